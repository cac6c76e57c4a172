"""Sans-I/O core of the carrier simulator's REST APIs: the requests that hang up or transfer a live call, as
Twilio (the Calls resource), Telnyx (Call Control), Plivo (Call API) and Vonage (Voice API) take them, and
the requests that place an outbound call (Twilio's Calls API, Plivo's Make Call, Telnyx's TeXML Calls API, Vonage's Create Call).

Owns: reading one HTTP request into the action it asks for, the carrier's authentication check (Telnyx's
Bearer API key, Plivo's basic auth with the auth id in the path, Vonage's RS256 application JWT checked with
the public half of the application's key), the carrier's answer in its wire shape (status and body: Telnyx
``{"data": {"result": "ok"}}`` / ``{"errors": [...]}``, Plivo 204 / 202 ``{"message": "call transferred"}`` /
``{"error"}``, Vonage 204 / a problem object), and whether the call named is one the simulator has live.
The request shapes are voicecore/carriers/{telnyx,plivo,vonage}_rest.py's, which cite the carriers' docs.

Must not know: sockets, HTTP framing, asyncio, the clock (``now_s`` comes in) or what ending a call does to
its stream (voicecore/sim/carrier_rest.py, the shell, ends the simulated call).
"""

from __future__ import annotations

import base64
import hmac
import json
import re
import urllib.parse
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization

from voicecore.carriers.simulator import CarrierCredentials, PlacedCallRequest

HANGUP = "hangup"
TRANSFER = "transfer"
DTMF = "dtmf"  # digits pressed on a live call (Telnyx send_dtmf, Plivo DTMF, Vonage dtmf): ``target`` holds them
CREATE = "create"  # a new outbound call (Twilio's Calls API, Plivo's Make Call)
_PLIVO_CREATE_PATH = re.compile(r"^/v1/Account/([^/]+)/Call/$")
_VONAGE_CREATE_PATH = re.compile(r"^/v1/calls/?$")
_TELNYX_CREATE_PATH = re.compile(r"^/v2/texml/calls/([A-Za-z0-9_-]+)$")
_TWILIO_CREATE_PATH = re.compile(r"^/2010-04-01/Accounts/(AC[0-9a-fA-F]{32})/Calls\.json$")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
_TWILIO_PATH = re.compile(r"^/2010-04-01/Accounts/(AC[0-9a-fA-F]{32})/Calls/(CA[0-9a-fA-F]{32})\.json$")
_TELNYX_PATH = re.compile(r"^/v2/calls/([^/]+)/actions/(hangup|transfer|send_dtmf)$")
_PLIVO_DTMF_PATH = re.compile(r"^/v1/Account/([^/]+)/Call/([^/]+)/DTMF/$")
_VONAGE_DTMF_PATH = re.compile(r"^/v1/calls/([^/]+)/dtmf$")
_TELNYX_DIGITS = re.compile(r"^[0-9A-D*#wW]{1,64}$")
_PLIVO_DIGITS = re.compile(r"^[0-9*#wW]{1,64}$")
_VONAGE_DIGITS = re.compile(r"^[0-9*#p]{1,64}$")
_PLIVO_PATH = re.compile(r"^/v1/Account/([^/]+)/Call/([^/]+)/$")
_VONAGE_PATH = re.compile(r"^/v1/calls/([^/]+)$")
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class RestOutcome:
    """One request and what the simulated carrier made of it. ``action`` is "" when nothing is done (refused);
    ``target``: the transfer's number or URI (Plivo: its ``aleg_url``, which the shell fetches)."""

    status: int
    body: bytes
    content_type: str
    carrier: str = ""
    call_id: str = ""
    action: str = ""
    target: str = ""
    error: str = ""  # why it was refused, short fixed text
    placed: PlacedCallRequest | None = None  # a call to place (action CREATE)


def _json(status: int, value: object, **fields) -> RestOutcome:
    return RestOutcome(status, json.dumps(value).encode(), JSON, **fields)


def _body_object(body: bytes) -> dict | None:
    try:
        value = json.loads(body.decode("utf-8")) if body else {}
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def handle(method: str, path: str, headers: Mapping[str, str], body: bytes, credentials: CarrierCredentials,
           is_live: Callable[[str, str], bool], *, now_s: float, api_id: str = "sim",
           new_call_sid: str = "") -> RestOutcome:
    """Answer one request. ``headers``: lower-case names; ``is_live(carrier, call_id)``: the call is up in the
    simulator; ``api_id``: Plivo's per-request id, ``new_call_sid``: the sid a created call gets (both come in:
    no randomness here)."""
    if match := _TWILIO_CREATE_PATH.match(path):
        return _twilio_create(method, match.group(1), headers, body, credentials, new_call_sid)
    if match := _PLIVO_CREATE_PATH.match(path):
        return _plivo_create(method, match.group(1), headers, body, credentials, api_id, new_call_sid)
    if _VONAGE_CREATE_PATH.match(path):
        return _vonage_create(method, headers, body, credentials, now_s, new_call_sid)
    if match := _TELNYX_CREATE_PATH.match(path):
        return _telnyx_create(method, match.group(1), headers, body, credentials, new_call_sid)
    if match := _TWILIO_PATH.match(path):
        return _twilio(method, match.group(1), match.group(2), headers, body, credentials, is_live)
    if match := _TELNYX_PATH.match(path):
        return _telnyx(method, match.group(1), match.group(2), headers, body, credentials, is_live)
    if match := _PLIVO_DTMF_PATH.match(path):
        return _plivo_dtmf(method, match.group(1), match.group(2), headers, body, credentials, is_live, api_id)
    if match := _VONAGE_DTMF_PATH.match(path):
        return _vonage_dtmf(method, match.group(1), headers, body, credentials, is_live, now_s)
    if match := _PLIVO_PATH.match(path):
        return _plivo(method, match.group(1), match.group(2), headers, body, credentials, is_live, api_id)
    if match := _VONAGE_PATH.match(path):
        return _vonage(method, match.group(1), headers, body, credentials, is_live, now_s)
    return RestOutcome(404, b"not found\n", "text/plain", error="unknown path")


def _twilio_error(status: int, code: int, message: str, **fields) -> RestOutcome:
    return _json(status, {"code": code, "message": message, "more_info": f"https://www.twilio.com/docs/errors/{code}",
                          "status": status}, carrier="twilio", **fields)


def _twilio(method: str, account_sid: str, call_sid: str, headers: Mapping[str, str], body: bytes,
            credentials: CarrierCredentials, is_live: Callable[[str, str], bool]) -> RestOutcome:
    """``POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json`` (voicecore/carriers/twilio/rest.py): basic auth
    AccountSid:auth token, a form with ``Status=completed`` (hang up) or ``Twiml`` holding ``<Dial>`` (transfer);
    answered with the call resource, or Twilio's error object (20003 Authenticate, 21220 not in progress)."""
    if method != "POST":
        return _twilio_error(405, 20004, "Method not allowed", error="method")
    expected = "Basic " + base64.b64encode(f"{account_sid}:{credentials.twilio_auth_token}".encode()).decode()
    if not credentials.twilio_auth_token or not hmac.compare_digest(headers.get("authorization", ""), expected):
        return _twilio_error(401, 20003, "Authenticate", error="auth")
    try:
        form = dict(urllib.parse.parse_qsl(body.decode("ascii"), strict_parsing=True)) if body else {}
    except (UnicodeDecodeError, ValueError):
        return _twilio_error(400, 20001, "Invalid form body", error="body")
    if form.get("Status") == "completed":
        action, target, status = HANGUP, "", "completed"
    elif "Twiml" in form:
        target = dial_target(form["Twiml"].encode())
        if not target:
            return _twilio_error(400, 21213, "Twiml is not valid (no <Dial> target)", error="no dial")
        action, status = TRANSFER, "in-progress"
    else:
        return _twilio_error(400, 20001, "Nothing to do: Status=completed or Twiml required", error="no action")
    if not is_live("twilio", call_sid):
        return _twilio_error(400, 21220, "Call is not in-progress. Cannot redirect.", error="not live")
    return _json(200, {"sid": call_sid, "account_sid": account_sid, "status": status, "api_version": "2010-04-01"},
                 carrier="twilio", call_id=call_sid, action=action, target=target)


def _twilio_create(method: str, account_sid: str, headers: Mapping[str, str], body: bytes,
                   credentials: CarrierCredentials, call_sid: str) -> RestOutcome:
    """``POST /2010-04-01/Accounts/{AccountSid}/Calls.json`` (voicecore/carriers/twilio/outbound.py): basic auth,
    a form with To, From, Url or Twiml; answered 201 with the call resource (status queued), or Twilio's error
    object (21201 no To, 21213 no From, 21205 a bad Url, 21220 Url and Twiml both or neither)."""
    if method != "POST":
        return _twilio_error(405, 20004, "Method not allowed", error="method")
    expected = "Basic " + base64.b64encode(f"{account_sid}:{credentials.twilio_auth_token}".encode()).decode()
    if not credentials.twilio_auth_token or not hmac.compare_digest(headers.get("authorization", ""), expected):
        return _twilio_error(401, 20003, "Authenticate", error="auth")
    try:
        pairs = urllib.parse.parse_qsl(body.decode("ascii"), strict_parsing=True) if body else []
    except (UnicodeDecodeError, ValueError):
        return _twilio_error(400, 20001, "Invalid form body", error="body")
    form = dict(pairs)
    to, from_ = form.get("To", ""), form.get("From", "")
    if not _E164.match(to):
        return _twilio_error(400, 21201, "No 'To' number is specified or it is not a valid phone number", error="to")
    if not _E164.match(from_):
        return _twilio_error(400, 21213, "No 'From' number is specified or it is not a valid phone number",
                             error="from")
    url, twiml = form.get("Url", ""), form.get("Twiml", "")
    if bool(url) == bool(twiml):
        return _twilio_error(400, 21220, "Exactly one of Url, Twiml or ApplicationSid is required", error="document")
    if url and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return _twilio_error(400, 21205, "Url is not a valid URL", error="url")
    placed = PlacedCallRequest(account_sid, call_sid, to, from_, url, twiml, form.get("StatusCallback", ""),
                               tuple(value for key, value in pairs if key == "StatusCallbackEvent"),
                               form.get("MachineDetection", ""), form.get("AsyncAmd", "").lower() == "true",
                               amd_callback=form.get("AsyncAmdStatusCallback", ""))
    return _json(201, {"sid": call_sid, "account_sid": account_sid, "to": to, "from": from_, "status": "queued",
                       "direction": "outbound-api", "api_version": "2010-04-01"},
                 carrier="twilio", call_id=call_sid, action=CREATE, placed=placed)


def _telnyx_error(status: int, code: str, title: str, **fields) -> RestOutcome:
    return _json(status, {"errors": [{"code": code, "title": title, "detail": title}]}, carrier="telnyx", **fields)


def _telnyx_create(method: str, application_id: str, headers: Mapping[str, str], body: bytes,
                   credentials: CarrierCredentials, new_call_sid: str) -> RestOutcome:
    """``POST /v2/texml/calls/{application_id}`` (voicecore/carriers/telnyx/outbound.py): Bearer API key, JSON with
    To, From, Url; answered with the flat call object (``call_sid`` a call_control_id, status queued)."""
    if method != "POST":
        return _telnyx_error(405, "10015", "Method not allowed", error="method")
    expected = f"Bearer {credentials.telnyx_api_key}"
    if not credentials.telnyx_api_key or not hmac.compare_digest(headers.get("authorization", ""), expected):
        return _telnyx_error(401, "10009", "Authentication failed", error="auth")
    data = _body_object(body)
    if data is None:
        return _telnyx_error(400, "10002", "Invalid JSON", error="body")
    to, from_, url = data.get("To"), data.get("From"), data.get("Url", "")
    if not isinstance(to, str) or not _E164.match(to) or not isinstance(from_, str) or not _E164.match(from_):
        return _telnyx_error(422, "10004", "To and From must be E.164 numbers", error="number")
    callback = data.get("StatusCallback", "")
    for value in (url, callback):
        if not isinstance(value, str) or (value and urllib.parse.urlsplit(value).scheme not in ("http", "https")):
            return _telnyx_error(422, "10004", "Url and StatusCallback must be http(s) URLs", error="url")
    if not url or data.get("Method", "POST") != "POST":
        return _telnyx_error(422, "10004", "Url (POST) is required: no application URL is simulated", error="url")
    events = data.get("StatusCallbackEvent", "")
    machine_detection, amd_callback = data.get("MachineDetection", ""), data.get("AsyncAmdStatusCallback", "")
    if machine_detection not in ("", "Enable", "DetectMessageEnd", "Disable") or not isinstance(amd_callback, str):
        return _telnyx_error(422, "10004", "MachineDetection must be Enable, DetectMessageEnd or Disable",
                             error="machine_detection")
    call_sid = "v3:" + new_call_sid[2:]
    placed = PlacedCallRequest(application_id, call_sid, to, from_, url, "", callback,
                               tuple(events.split()) if isinstance(events, str) else (),
                               "" if machine_detection == "Disable" else machine_detection,
                               str(data.get("AsyncAmd", "")).lower() == "true", carrier="telnyx",
                               amd_callback=amd_callback)
    return _json(200, {"call_sid": call_sid, "from": from_, "to": to, "status": "queued"}, carrier="telnyx",
                 call_id=call_sid, action=CREATE, placed=placed)


def _telnyx(method: str, call_id: str, action: str, headers: Mapping[str, str], body: bytes,
            credentials: CarrierCredentials, is_live: Callable[[str, str], bool]) -> RestOutcome:
    if method != "POST":
        return _telnyx_error(405, "10015", "Method not allowed", error="method")
    expected = f"Bearer {credentials.telnyx_api_key}"
    if not credentials.telnyx_api_key or not hmac.compare_digest(headers.get("authorization", ""), expected):
        return _telnyx_error(401, "10009", "Authentication failed", error="auth")
    data = _body_object(body)
    if data is None:
        return _telnyx_error(400, "10002", "Invalid JSON", error="body")
    target = ""
    if action == TRANSFER:
        target = data.get("to")
        if not isinstance(target, str) or not target:
            return _telnyx_error(422, "10004", "Missing required parameter", error="no to")
    if action == "send_dtmf":
        # [dtmf] of voicecore/carriers/telnyx/rest.py: digits required, duration_millis 100-500 when given
        action, target = DTMF, data.get("digits")
        duration = data.get("duration_millis", 250)
        if not isinstance(target, str) or not _TELNYX_DIGITS.match(target):
            return _telnyx_error(422, "10004", "Missing required parameter", error="bad digits")
        if not isinstance(duration, int) or isinstance(duration, bool) or not 100 <= duration <= 500:
            return _telnyx_error(422, "10032", "Invalid parameter", error="bad duration_millis")
    if not is_live("telnyx", call_id):
        return _telnyx_error(422, "90018", "Call has already ended", error="not live")
    return _json(200, {"data": {"result": "ok"}}, carrier="telnyx", call_id=call_id, action=action, target=target)


def plivo_uuid(new_call_sid: str) -> str:
    """A UUID from the 32 hex digits of a new call's sid (the shell's randomness; none here)."""
    digits = new_call_sid[-32:]
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def _plivo_auth_ok(auth_id: str, headers: Mapping[str, str], credentials: CarrierCredentials) -> bool:
    expected = "Basic " + base64.b64encode(f"{credentials.plivo_auth_id}:{credentials.plivo_auth_token}".encode()).decode()
    return bool(credentials.plivo_auth_id and auth_id == credentials.plivo_auth_id
                and hmac.compare_digest(headers.get("authorization", ""), expected))


def _plivo_error(api_id: str, status: int, text: str, why: str) -> RestOutcome:
    return _json(status, {"api_id": api_id, "error": text}, carrier="plivo", error=why)


def _plivo_post_body(method: str, auth_id: str, headers: Mapping[str, str], body: bytes,
                     credentials: CarrierCredentials, api_id: str) -> dict | RestOutcome:
    """A Plivo ``POST`` request's JSON body once its basic auth and method are checked, or the error that refuses it."""
    if not _plivo_auth_ok(auth_id, headers, credentials):
        return _plivo_error(api_id, 401, "authentication failed", "auth")
    if method != "POST":
        return _plivo_error(api_id, 405, "method not allowed", "method")
    data = _body_object(body)
    if data is None:
        return _plivo_error(api_id, 400, "invalid json", "body")
    return data


def _plivo_create(method: str, auth_id: str, headers: Mapping[str, str], body: bytes,
                  credentials: CarrierCredentials, api_id: str, new_call_sid: str) -> RestOutcome:
    """``POST /v1/Account/{auth_id}/Call/`` (voicecore/carriers/plivo/outbound.py): basic auth, JSON with from,
    to (digits, the "+" optional), answer_url; answered 201 ``{"message": "call fired", "request_uuid"}``, or
    ``{"api_id", "error"}``."""
    def error(status: int, text: str, why: str) -> RestOutcome:
        return _plivo_error(api_id, status, text, why)

    data = _plivo_post_body(method, auth_id, headers, body, credentials, api_id)
    if isinstance(data, RestOutcome):
        return data
    numbers = []
    for key in ("to", "from"):
        value = data.get(key)
        number = "+" + value.lstrip("+") if isinstance(value, str) else ""
        if not _E164.match(number):
            return error(400, f"{key} is not a valid phone number", key)
        numbers.append(number)
    urls = []
    for key in ("answer_url", "ring_url", "hangup_url"):
        value = data.get(key, "")
        if not isinstance(value, str) or (value and urllib.parse.urlsplit(value).scheme not in ("http", "https")):
            return error(400, f"{key} is not a valid URL", key)
        urls.append(value)
    if not urls[0]:
        return error(400, "answer_url is required", "answer_url")
    if any(data.get(key, "POST") != "POST" for key in ("answer_method", "ring_method", "hangup_method")):
        return error(400, "only POST callbacks are simulated", "method")
    amd = _plivo_machine_detection(data)
    if isinstance(amd, tuple):
        return error(400, *amd)
    request_uuid = plivo_uuid(new_call_sid)
    machine_detection, amd_url = amd.get("machine_detection", ""), amd.get("machine_detection_url", "")
    placed = PlacedCallRequest(auth_id, request_uuid, numbers[0], numbers[1], urls[0], "", urls[2] or urls[0],
                               ("ringing",) if urls[1] else (), machine_detection, bool(machine_detection and amd_url),
                               carrier="plivo", ring_url=urls[1], amd_callback=amd_url)
    return _json(201, {"api_id": api_id, "message": "call fired", "request_uuid": request_uuid},
                 carrier="plivo", call_id=request_uuid, action=CREATE, placed=placed)


PLIVO_MACHINE_DETECTION = ("true", "hangup")


def _plivo_machine_detection(data: dict) -> dict[str, str] | tuple[str, str]:
    """Make Call's machine detection fields as Plivo takes them: ``machine_detection`` true or hangup (a JSON true
    is "true"), ``machine_detection_time`` 2000-10000 (ms), ``machine_detection_url`` an http(s) URL (the
    asynchronous detection: the result goes there), ``machine_detection_method`` GET or POST (POST only is
    simulated); the fields kept, or (error text, why) for one Plivo refuses. The simulated AMD never hangs up:
    ``hangup`` is taken and reported back as IfMachine, as Plivo does, but acted on as ``true``."""
    value = data.get("machine_detection")
    if value is None:
        if any(key in data for key in ("machine_detection_time", "machine_detection_url")):
            return "machine_detection_url and machine_detection_time need machine_detection", "machine_detection"
        return {}
    value = "true" if value is True else value
    if value not in PLIVO_MACHINE_DETECTION:
        return "machine_detection must be true or hangup", "machine_detection"
    time_ms = data.get("machine_detection_time", 5000)
    if isinstance(time_ms, str) and time_ms.isdigit():
        time_ms = int(time_ms)
    if not isinstance(time_ms, int) or isinstance(time_ms, bool) or not 2000 <= time_ms <= 10000:
        return "machine_detection_time must be between 2000 and 10000", "machine_detection_time"
    url = data.get("machine_detection_url", "")
    if not isinstance(url, str) or (url and urllib.parse.urlsplit(url).scheme not in ("http", "https")):
        return "machine_detection_url is not a valid URL", "machine_detection_url"
    method = data.get("machine_detection_method", "POST")
    if method not in ("GET", "POST"):
        return "machine_detection_method must be GET or POST", "machine_detection_method"
    if method != "POST":
        return "only POST callbacks are simulated", "method"
    return {"machine_detection": value, "machine_detection_url": url}


def _plivo(method: str, auth_id: str, call_uuid: str, headers: Mapping[str, str], body: bytes,
           credentials: CarrierCredentials, is_live: Callable[[str, str], bool], api_id: str) -> RestOutcome:
    def error(status: int, text: str, why: str) -> RestOutcome:
        return _json(status, {"api_id": api_id, "error": text}, carrier="plivo", error=why)

    if not _plivo_auth_ok(auth_id, headers, credentials):
        return error(401, "authentication failed", "auth")
    if method == "DELETE":
        action, target = HANGUP, ""
    elif method == "POST":
        data = _body_object(body)
        if data is None:
            return error(400, "invalid json", "body")
        target = data.get("aleg_url")
        if data.get("legs", "aleg") != "aleg" or not isinstance(target, str) or not target.startswith(("http://", "https://")):
            return error(400, "aleg_url is required when legs is aleg", "no aleg_url")
        action = TRANSFER
    else:
        return error(405, "method not allowed", "method")
    if not is_live("plivo", call_uuid):
        return error(404, "not found", "not live")
    if action == HANGUP:
        return RestOutcome(204, b"", JSON, carrier="plivo", call_id=call_uuid, action=action)
    return _json(202, {"api_id": api_id, "message": "call transferred"}, carrier="plivo", call_id=call_uuid,
                 action=action, target=target)


def _plivo_dtmf(method: str, auth_id: str, call_uuid: str, headers: Mapping[str, str], body: bytes,
                credentials: CarrierCredentials, is_live: Callable[[str, str], bool], api_id: str) -> RestOutcome:
    """``POST /v1/Account/{auth_id}/Call/{call_uuid}/DTMF/`` (voicecore/carriers/plivo/rest.py): basic auth, JSON
    ``digits`` (0-9 * # w W) and ``leg`` (aleg or bleg; the simulated call has one leg, the A leg); 202
    ``{"message": "digits sent"}``."""
    def error(status: int, text: str, why: str) -> RestOutcome:
        return _plivo_error(api_id, status, text, why)

    data = _plivo_post_body(method, auth_id, headers, body, credentials, api_id)
    if isinstance(data, RestOutcome):
        return data
    digits = data.get("digits")
    if not isinstance(digits, str) or not _PLIVO_DIGITS.match(digits):
        return error(400, "digits is required and may hold 0-9, *, #, w, W", "bad digits")
    if data.get("leg", "aleg") != "aleg":
        return error(400, "leg must be aleg on this call", "leg")
    if not is_live("plivo", call_uuid):
        return error(404, "not found", "not live")
    return _json(202, {"api_id": api_id, "message": "digits sent"}, carrier="plivo", call_id=call_uuid,
                 action=DTMF, target=digits)


def _vonage_call_problem(status: int, title: str, why: str) -> RestOutcome:
    """Vonage's problem object for a request on a live call (its type names the error)."""
    return RestOutcome(status, json.dumps({"type": "https://developer.nexmo.com/api-errors#" + why,
                                           "title": title, "detail": title}).encode(),
                       "application/problem+json", carrier="vonage", error=why)


def _vonage_put_body(method: str, headers: Mapping[str, str], body: bytes, credentials: CarrierCredentials,
                     now_s: float) -> dict | RestOutcome:
    """A ``PUT /v1/calls/{uuid}[/dtmf]`` request's JSON body once its method and application JWT are checked, or
    the problem that refuses it."""
    if method != "PUT":
        return _vonage_call_problem(405, "Method Not Allowed", "method")
    if not _vonage_jwt_ok(headers.get("authorization", ""), credentials, now_s):
        return _vonage_call_problem(401, "Unauthorized", "auth")
    data = _body_object(body)
    if data is None:
        return _vonage_call_problem(400, "Bad Request", "body")
    return data


def _vonage_dtmf(method: str, call_uuid: str, headers: Mapping[str, str], body: bytes, credentials: CarrierCredentials,
                 is_live: Callable[[str, str], bool], now_s: float) -> RestOutcome:
    """``PUT /v1/calls/{uuid}/dtmf`` (voicecore/carriers/vonage/rest.py): the application JWT, JSON ``digits``
    (0-9 * # and p, a 500 ms pause); 200 ``{"message": "DTMF sent", "uuid"}``."""
    problem = _vonage_call_problem
    data = _vonage_put_body(method, headers, body, credentials, now_s)
    if isinstance(data, RestOutcome):
        return data
    digits = data.get("digits")
    if not isinstance(digits, str) or not _VONAGE_DIGITS.match(digits):
        return problem(400, "Bad Request", "bad digits")
    if not is_live("vonage", call_uuid):
        return problem(404, "Not Found", "not live")
    return _json(200, {"message": "DTMF sent", "uuid": call_uuid}, carrier="vonage", call_id=call_uuid, action=DTMF,
                 target=digits)


def _vonage_create(method: str, headers: Mapping[str, str], body: bytes, credentials: CarrierCredentials,
                   now_s: float, new_call_sid: str) -> RestOutcome:
    """``POST /v1/calls`` (voicecore/carriers/vonage/outbound.py): the application JWT, JSON with a phone ``to``
    and ``from`` (E.164 digits), ``answer_url`` (an array of one URL, POST); answered 201 ``{"uuid", "status":
    "started", "direction": "outbound", "conversation_uuid"}``, or a problem object."""
    def problem(status: int, title: str, why: str) -> RestOutcome:
        return RestOutcome(status, json.dumps({"type": "https://developer.nexmo.com/api-errors", "title": title,
                                               "detail": title}).encode(), "application/problem+json",
                           carrier="vonage", error=why)

    if method != "POST":
        return problem(405, "Method not allowed", "method")
    if not _vonage_jwt_ok(headers.get("authorization", ""), credentials, now_s):
        return problem(401, "Unauthorized", "auth")
    data = _body_object(body)
    if data is None:
        return problem(400, "Invalid JSON", "body")
    to, from_ = data.get("to"), data.get("from")
    first = to[0] if isinstance(to, list) and len(to) == 1 and isinstance(to[0], dict) else {}
    numbers = []
    for endpoint in (first, from_ if isinstance(from_, dict) else {}):
        number = endpoint.get("number")
        if endpoint.get("type") != "phone" or not isinstance(number, str) or not _E164.match("+" + number):
            return problem(400, "Bad Request: to and from must be phone endpoints", "number")
        numbers.append("+" + number)
    urls = []
    for key in ("answer_url", "event_url"):
        value = data.get(key, [])
        if (not isinstance(value, list) or len(value) > 1 or not all(isinstance(u, str) for u in value)
                or any(urllib.parse.urlsplit(u).scheme not in ("http", "https") for u in value)):
            return problem(400, f"Bad Request: {key} must be an array of one URL", key)
        urls.append(value[0] if value else "")
    if not urls[0] or any(data.get(key, "POST") != "POST" for key in ("answer_method", "event_method")):
        return problem(400, "Bad Request: answer_url (POST) is required", "answer_url")
    amd = data.get("advanced_machine_detection")
    mode = ""
    if amd is not None:
        why = _vonage_amd_problem(amd)
        if why:
            return problem(400, f"Bad Request: advanced_machine_detection: {why}", "advanced_machine_detection")
        mode = amd.get("mode", "default")
    call_uuid = plivo_uuid(new_call_sid)
    # mode default is the asynchronous detection (the NCCO runs at the answer); detect and detect_beep hold it back
    placed = PlacedCallRequest(credentials.vonage_application_id, call_uuid, numbers[0], numbers[1], urls[0], "",
                               urls[1], ("started", "ringing", "answered", "completed"), mode, mode == "default",
                               carrier="vonage", amd_callback=urls[1] if mode else "")
    return _json(201, {"uuid": call_uuid, "status": "started", "direction": "outbound",
                       "conversation_uuid": "CON-" + plivo_uuid(new_call_sid[::-1])},
                 carrier="vonage", call_id=call_uuid, action=CREATE, placed=placed)


VONAGE_AMD_BEHAVIORS = ("continue", "hangup")
VONAGE_AMD_MODES = ("default", "detect", "detect_beep")


def _vonage_amd_problem(amd: object) -> str:
    """What Vonage refuses in Create Call's ``advanced_machine_detection`` ("" for nothing): an object with
    ``behavior`` continue or hangup, ``mode`` default (asynchronous, beep included), detect or detect_beep
    (synchronous), ``beep_timeout`` 45-120 (s), and nothing else."""
    if not isinstance(amd, dict):
        return "must be an object"
    unknown = sorted(set(amd) - {"behavior", "mode", "beep_timeout"})
    if unknown:
        return f"unknown field {unknown[0]}"
    if amd.get("behavior", "continue") not in VONAGE_AMD_BEHAVIORS:
        return "behavior must be continue or hangup"
    if amd.get("mode", "default") not in VONAGE_AMD_MODES:
        return "mode must be default, detect or detect_beep"
    timeout = amd.get("beep_timeout", 45)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 45 <= timeout <= 120:
        return "beep_timeout must be between 45 and 120"
    return ""


def _vonage(method: str, call_uuid: str, headers: Mapping[str, str], body: bytes, credentials: CarrierCredentials,
            is_live: Callable[[str, str], bool], now_s: float) -> RestOutcome:
    problem = _vonage_call_problem
    data = _vonage_put_body(method, headers, body, credentials, now_s)
    if isinstance(data, RestOutcome):
        return data
    action = data.get("action")
    target = ""
    if action == TRANSFER:
        destination = data.get("destination")
        ncco = destination.get("ncco") if isinstance(destination, dict) and destination.get("type") == "ncco" else None
        endpoint = _connect_endpoint(ncco)
        if endpoint is None:
            return problem(400, "Bad Request", "no ncco connect")
        target = endpoint
    elif action != HANGUP:
        return problem(400, "Bad Request", "action")
    if not is_live("vonage", call_uuid):
        return problem(404, "Not Found", "not live")
    return RestOutcome(204, b"", JSON, carrier="vonage", call_id=call_uuid, action=action, target=target)


def _connect_endpoint(ncco: object) -> str | None:
    """The number or URI of a transfer NCCO's first ``connect`` endpoint, or None."""
    if not isinstance(ncco, list):
        return None
    for step in ncco:
        if isinstance(step, dict) and step.get("action") == "connect" and isinstance(step.get("endpoint"), list):
            endpoint = step["endpoint"][0] if step["endpoint"] else None
            if isinstance(endpoint, dict):
                value = endpoint.get("number") if endpoint.get("type") == "phone" else endpoint.get("uri")
                if isinstance(value, str) and value:
                    return value
    return None


def _vonage_jwt_ok(authorization: str, credentials: CarrierCredentials, now_s: float) -> bool:
    if not authorization.startswith("Bearer ") or not credentials.vonage_private_key:
        return False
    key = serialization.load_pem_private_key(credentials.vonage_private_key.encode(), password=None).public_key()
    try:
        claims = jwt.decode(authorization[len("Bearer "):], key, algorithms=["RS256"],
                            options={"require": ["iat", "jti", "application_id"], "verify_exp": False,
                                     "verify_iat": False})
    except jwt.exceptions.PyJWTError:
        return False
    exp = claims.get("exp")
    fresh = isinstance(claims.get("iat"), int) and claims["iat"] <= now_s + 60 and (exp is None or now_s < exp)
    return fresh and claims.get("application_id") == credentials.vonage_application_id


def dial_target(xml: bytes) -> str | None:
    """What a transfer's XML dials (``<Dial><Number>`` or ``<User>``, as Plivo reads it, or the number as
    ``<Dial>``'s own text, as TwiML has it); None otherwise."""
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError:
        return None
    dial = root.find("Dial") if root.tag == "Response" else None
    if dial is None:
        return None
    for child in dial:
        if child.tag in ("Number", "User", "Sip") and child.text:
            return child.text.strip()
    return (dial.text or "").strip() or None


__all__ = ["CREATE", "HANGUP", "TRANSFER", "PlacedCallRequest", "RestOutcome", "dial_target", "handle"]
