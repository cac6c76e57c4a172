"""Placing a call with Plivo, sans-I/O: the Make Call request, its answer, the call's ring and hang-up
callbacks, and how an outbound call's fields reach its stream.

Owns: ``POST {base}/v1/Account/{auth_id}/Call/`` (JSON: ``from``, ``to``, ``answer_url`` + ``answer_method``,
``ring_url`` + ``ring_method``, ``hangup_url`` + ``hangup_method``, ``ring_timeout``; basic auth
``auth_id:auth_token``), Plivo's answer (201 ``{"message": "call fired", "request_uuid", "api_id"}``), the
callbacks' forms (``RequestUUID``, ``CallUUID``, ``CallStatus``, ``Event``, ``Duration``) and the mapping of
their statuses onto the ones the call store keeps (Twilio's names: ringing, in-progress, completed, busy,
no-answer, failed, canceled).

Sources:

- [sdk] plivo-ruby ``CallInterface#create(from, to, answer_url, answer_method = 'POST', options)``: options
  ``ring_url`` / ``ring_method`` ("notified by Plivo when the call is ringing"), ``hangup_url`` /
  ``hangup_method`` ("notified by Plivo when the call hangs up"), ``ring_timeout``; plivo-python
  ``Calls.create`` posts them as JSON to ``/v1/Account/{auth_id}/Call/``.
- [ref] Plivo "Make a call" API page: 201 ``{"api_id", "message": "call fired", "request_uuid"}``; the call's
  CallUUID exists only once it is answered, so the callbacks name the request by ``RequestUUID``; the hang-up
  callback's ``CallStatus`` is completed, busy, failed, timeout or no-answer (cancel for a call hung up by
  the API before it was answered), its ``Duration`` in seconds.

Machine detection (asked for with ``machine_detection``): Make Call's ``machine_detection`` (``true``; never
``hangup`` here: the node's own answer gate decides, and Plivo's AMD takes some people for machines),
``machine_detection_url`` (the same ``/plivo/call-status``: asynchronous, the stream starts at the answer),
``machine_detection_method`` POST and optionally ``machine_detection_time`` (2000-10000 ms, Plivo's default 5000).
Its callback is a form signed as every Plivo callback (X-Plivo-Signature-V3): ``Machine`` (true/false),
``CallUUID``, ``RequestUUID``, ``Event=MachineDetection``, ``CallStatus=in-progress``, ``IfMachine``. ``Machine``
is mapped onto the detector's vocabulary (voicecore/outbound/answer.py, Twilio's AnsweredBy): true is
``machine_start`` (Plivo says no more than "a machine": a hint to the gate), false ``human``. [amd] Plivo
"Asynchronous machine detection" (the parameters sent to machine_detection_url); plivo-go ``CallCreateParams``
(``MachineDetection``, ``MachineDetectionTime``, ``MachineDetectionUrl``, ``MachineDetectionMethod``).

Which id the call goes by: the ``request_uuid`` Plivo answers with, the only one known when the request is
taken, is what this module reports as the call's id and what its status callbacks are stored under (their
``RequestUUID``). The answer webhook for the call also carries it, so its ``in-progress`` lands on the same
row. The answer webhook (its ``ALegRequestUUID``) and the hang-up callback of an answered call name the
CallUUID beside it: the gateway keeps it with the status, and a campaign reads the call's record under it.
[unverified]: no live Plivo call has been placed; the shapes are the SDKs' and the API page's, checked
against voicecore's own carrier simulator only.

How the fields reach the agent: the answer URL's query carries the call's direction, callee and fields (Plivo
signs the URL with its query, X-Plivo-Signature-V3); the answer XML hands them to the stream in one
``extraHeaders`` item (call_fields.PACKED), since extraHeaders take only [A-Za-z0-9_-] and 512 bytes in all.

Must not know: sockets, the clock, how a call is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from voicecore.carriers.rest_common import PlacedCall, RestRequest, basic_auth, json_object, result
from voicecore.carriers.webhook import WebhookError
from voicecore.outbound import call_fields

DEFAULT_BASE_URL = "https://api.plivo.com"
STATUS_PATH = "/plivo/call-status"  # the gateway route that takes ring_url and hangup_url (signed by Plivo)
_AUTH_ID = re.compile(r"^[MS]A[A-Z0-9]{18}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
# extraHeaders hold 512 bytes: the session token (a signed one is under 200 characters) and the packed fields.
MAX_PACKED_CHARS = 512 - 200 - len(call_fields.PACKED) - 2

# Plivo's CallStatus (ring and hang-up callbacks, the answer webhook) as the call store names it.
STATUS_NAMES = {"ringing": "ringing", "in-progress": "in-progress", "completed": "completed", "busy": "busy",
                "failed": "failed", "timeout": "no-answer", "no-answer": "no-answer", "cancel": "canceled"}
# Plivo numbers no callback: this is the order a call's statuses come in, so a late ringing never overwrites
# a final status (the store keeps the highest sequence).
_SEQUENCE = {"ringing": 1, "in-progress": 2}
_FINAL_SEQUENCE = 3
# Plivo's machine detection: the callback's Machine value, in the detector's vocabulary (Twilio's AnsweredBy)
AMD_EVENT = "MachineDetection"
ANSWERED_BY = {"true": "machine_start", "false": "human"}
MACHINE_DETECTION_TIME_MS = (2000, 10000)


def check_number(number: str, what: str) -> str:
    if not isinstance(number, str) or not _E164.match(number):
        raise ValueError(f"{what} must be a phone number in E.164 (+ and 7-15 digits)")
    return number


def answer_url(voice_url: str, callee: str, fields: Mapping[str, str]) -> str:
    """The node's answer webhook with the call's direction, callee and fields in its query; ValueError when they
    would not fit in the answer's extraHeaders (MAX_PACKED_CHARS)."""
    parts = urlsplit(voice_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
        raise ValueError("voice_url must be an absolute http(s) URL without a query")
    parameters = call_fields.parameters_for(callee, fields)
    if len(call_fields.pack(parameters)) > MAX_PACKED_CHARS:
        raise ValueError(f"the call's fields are too long for Plivo's stream headers (512 bytes in all): "
                         f"shorten them")
    return f"{voice_url}?{urlencode(parameters)}"


def stream_parameters(query: str) -> tuple[tuple[str, str], ...]:
    """The outbound call's parameters from the answer URL's query (empty for an inbound call)."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=call_fields.MAX_FIELDS + 2)
    except ValueError:
        return ()
    return call_fields.kept_parameters(pairs)


def extra_headers(token_name: str, token: str, parameters: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The answer XML's extraHeaders: the session token, and the outbound call's parameters packed."""
    headers = {token_name: token}
    if parameters:
        headers[call_fields.PACKED] = call_fields.pack(parameters)
    return headers


# --- Make Call -------------------------------------------------------------------------------------------


def place_call_request(auth_id: str, auth_token: str, to: str, from_: str, *, answer_url: str,
                       status_url: str = "", ring_timeout_s: int = 30,
                       base_url: str = DEFAULT_BASE_URL, machine_detection: bool = False,
                       machine_detection_time_ms: int | None = None) -> RestRequest:
    """Create a call from ``from_`` to ``to``; Plivo POSTs ``answer_url`` when it is answered, and its ring and
    hang-up to ``status_url``. ``machine_detection``: Plivo's AMD too, asynchronous (``true``, never ``hangup``),
    its result to ``status_url``; ``machine_detection_time_ms``: how long it may listen (Plivo's default: 5000)."""
    if not isinstance(auth_id, str) or not _AUTH_ID.match(auth_id):
        raise ValueError("plivo_auth_id must be MA or SA + 18 upper-case letters or digits")
    if not auth_token:
        raise ValueError("a Plivo auth token is required")
    check_number(to, "to")
    check_number(from_, "from")
    if not answer_url.startswith(("http://", "https://")):
        raise ValueError("answer_url must be an http(s) URL")
    if not 5 <= ring_timeout_s <= 600:
        raise ValueError("ring_timeout_s (how long it rings) must be 5-600")
    # Plivo's numbers go without the "+" (its examples and SDKs); E.164 checked above, so nothing else changes.
    body: dict[str, object] = {"from": from_[1:], "to": to[1:], "answer_url": answer_url, "answer_method": "POST",
                               "ring_timeout": ring_timeout_s}
    if status_url:
        if not status_url.startswith(("http://", "https://")):
            raise ValueError("status_url must be an http(s) URL")
        body.update(ring_url=status_url, ring_method="POST", hangup_url=status_url, hangup_method="POST")
    if machine_detection:
        if not status_url:
            raise ValueError("machine detection needs the status URL (its result goes there)")
        body.update(machine_detection="true", machine_detection_url=status_url, machine_detection_method="POST")
        if machine_detection_time_ms is not None:
            low, high = MACHINE_DETECTION_TIME_MS
            if not (isinstance(machine_detection_time_ms, int) and low <= machine_detection_time_ms <= high):
                raise ValueError(f"machine_detection_time_ms must be {low}-{high}")
            body["machine_detection_time"] = machine_detection_time_ms
    elif machine_detection_time_ms is not None:
        raise ValueError("machine_detection_time_ms without machine_detection")
    url = f"{base_url.rstrip('/')}/v1/Account/{quote(auth_id)}/Call/"
    headers = (("Authorization", basic_auth(auth_id, auth_token)), ("Content-Type", "application/json"),
               ("Accept", "application/json"))
    return RestRequest("POST", url, headers, json.dumps(body, separators=(",", ":")).encode("utf-8"))


def parse_place_call_response(status_code: int, body: bytes) -> PlacedCall:
    """Plivo answers 201 ``{"message": "call fired", "request_uuid": ...}``, or ``{"api_id", "error"}``."""
    data = json_object(body)
    if 200 <= status_code < 300:
        request_uuid = data.get("request_uuid")
        if isinstance(request_uuid, list) and len(request_uuid) == 1:  # a call to several numbers lists them
            request_uuid = request_uuid[0]
        if not isinstance(request_uuid, str) or not _UUID.match(request_uuid):
            return PlacedCall(False, False, "", "", "the answer names no call (no request_uuid)")
        return PlacedCall(True, False, request_uuid, "queued", None)
    error = data.get("error")
    common = result(status_code, error if isinstance(error, str) else None)
    return PlacedCall(False, common.retryable, "", "", common.error)


# --- the ring and hang-up callbacks ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallStatusEvent:
    call_sid: str  # the RequestUUID: the id the Make Call answer gave
    call_uuid: str  # the call's CallUUID
    status: str  # the store's name (STATUS_NAMES' values)
    direction: str
    answered_by: str  # always "": Plivo's machine detection result has a callback of its own (parse_amd_result)
    sequence: int
    duration_s: int | None


def parse_call_status(form: Mapping[str, str]) -> CallStatusEvent:
    """A ring or hang-up callback (or the answer webhook of a call we placed) as the store keeps it; WebhookError
    (fixed text) for a form that is not one."""
    plivo_status = form.get("CallStatus", "")
    status = STATUS_NAMES.get(plivo_status)
    if status is None:
        raise WebhookError("unknown CallStatus")
    request_uuid, call_uuid = form.get("RequestUUID", ""), form.get("CallUUID", "")
    if not _UUID.match(request_uuid) or (call_uuid and not _UUID.match(call_uuid)):
        raise WebhookError("RequestUUID or CallUUID is not a UUID")
    duration = form.get("Duration")
    if duration is not None and not duration.isdigit():
        raise WebhookError("Duration is not a number")
    return CallStatusEvent(request_uuid, call_uuid, status, form.get("Direction", ""), "",
                           _SEQUENCE.get(status, _FINAL_SEQUENCE), int(duration) if duration is not None else None)


# --- the machine detection callback ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AmdResult:
    request_uuid: str  # the id Make Call gave (the call's status row)
    call_uuid: str  # the id its stream and record go by
    answered_by: str  # ANSWERED_BY's values: human or machine_start
    if_machine: str  # continue or hangup, as the request asked (always continue for the node's calls)


def is_amd_result(form: Mapping[str, str]) -> bool:
    """Plivo's machine detection callback (``Event=MachineDetection``, or a ``Machine`` field), not a ring or
    hang-up one (it also says ``CallStatus=in-progress``)."""
    return form.get("Event") == AMD_EVENT or "Machine" in form


def parse_amd_result(form: Mapping[str, str]) -> AmdResult:
    """The machine detection callback's fields, ``Machine`` mapped (true: machine_start, false: human); WebhookError
    (fixed text) for a form that is not one."""
    answered_by = ANSWERED_BY.get(form.get("Machine", "").strip().lower())
    if answered_by is None:
        raise WebhookError("Machine is not true or false")
    request_uuid, call_uuid = form.get("RequestUUID", ""), form.get("CallUUID", "")
    if not _UUID.match(call_uuid) or (request_uuid and not _UUID.match(request_uuid)):
        raise WebhookError("RequestUUID or CallUUID is not a UUID")
    return AmdResult(request_uuid, call_uuid, answered_by, form.get("IfMachine", ""))
