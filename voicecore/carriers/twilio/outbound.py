"""Placing a call with Twilio, sans-I/O: the Calls API request, its answer, the call status callbacks, and the
fields an outbound call's answer document passes to its stream.

Owns: ``POST {base}/2010-04-01/Accounts/{AccountSid}/Calls.json`` (form: ``To``, ``From``, ``Url`` or ``Twiml``,
``StatusCallback`` with ``StatusCallbackMethod=POST`` and one ``StatusCallbackEvent`` per event asked for,
optional ``MachineDetection`` / ``AsyncAmd``), Twilio's answer (201 with the call resource), the call status
callback form (``CallStatus``, ``AnsweredBy``, ``SequenceNumber``, ``CallDuration``), and the answer URL.

Why ``Url`` rather than ``Twiml`` for the node's own calls: the answer document carries a session token tied to
the CallSid, and the CallSid exists only once Twilio took the request. So the node gives Twilio its own voice
webhook as the answer URL; Twilio fetches it (a signed POST, ``Direction=outbound-api``) when the callee picks
up, and the node answers with the ``<Connect><Stream>`` as for an inbound call. What the call carries to the
agent (the callee's fields) rides in that URL's query, which Twilio's signature covers, and reaches the stream
as ``<Parameter>`` elements (``start.customParameters``). ``Twiml`` stays available for a caller that writes
its own document.

Must not know: sockets, the clock, how a call is recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from voicecore.carriers.rest_common import PlacedCall, RestRequest, basic_auth, json_object, result
from voicecore.carriers.webhook import WebhookError
from voicecore.outbound import call_fields

DEFAULT_BASE_URL = "https://api.twilio.com"
_SID = re.compile(r"^AC[0-9a-fA-F]{32}$")
_CALL_SID = re.compile(r"^CA[0-9a-fA-F]{32}$")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")

# The call progress events a status callback may be asked for, and the statuses it reports.
STATUS_EVENTS = ("initiated", "ringing", "answered", "completed")
CALL_STATUSES = frozenset({"queued", "initiated", "ringing", "in-progress", "completed", "busy", "no-answer",
                           "failed", "canceled"})
FINAL_STATUSES = frozenset({"completed", "busy", "no-answer", "failed", "canceled"})
MACHINE_DETECTION = ("Enable", "DetectMessageEnd")
# AnsweredBy: Enable answers human, machine_start, fax or unknown; DetectMessageEnd waits for the end of a
# machine's greeting and answers machine_end_beep, machine_end_silence or machine_end_other instead of machine_start.
ANSWERED_BY = frozenset({"human", "machine_start", "machine_end_beep", "machine_end_silence", "machine_end_other",
                         "fax", "unknown"})



def check_number(number: str, what: str) -> str:
    if not isinstance(number, str) or not _E164.match(number):
        raise ValueError(f"{what} must be a phone number in E.164 (+ and 7-15 digits)")
    return number


def answer_url(voice_url: str, callee: str, fields: Mapping[str, str]) -> str:
    """The node's voice webhook with the call's direction, callee and fields in its query."""
    parts = urlsplit(voice_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
        raise ValueError("voice_url must be an absolute http(s) URL without a query")
    return f"{voice_url}?{urlencode(call_fields.parameters_for(callee, fields))}"


def stream_parameters(query: str) -> tuple[tuple[str, str], ...]:
    """The <Parameter>s to give the stream, from the answer URL's query (empty for an inbound call)."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=call_fields.MAX_FIELDS + 2)
    except ValueError:
        return ()
    return call_fields.kept_parameters(pairs)


# --- the Calls API -------------------------------------------------------------------------------------


def place_call_request(account_sid: str, auth_token: str, to: str, from_: str, *, url: str = "", twiml: str = "",
                       status_callback: str = "", machine_detection: str = "", async_amd: bool = False,
                       timeout_s: int = 30, base_url: str = DEFAULT_BASE_URL,
                       username: str | None = None) -> RestRequest:
    """Create a call from ``from_`` to ``to``; Twilio runs ``url``'s (or ``twiml``'s) document when it answers.
    ``status_callback``: where Twilio POSTs the call's progress (every event of STATUS_EVENTS).
    ``machine_detection``: Enable or DetectMessageEnd (Twilio's AMD; with ``async_amd`` its result comes
    to ``status_callback`` as ``AnsweredBy`` instead of holding the answer document back)."""
    if not _SID.match(account_sid):
        raise ValueError("account_sid must be AC + 32 hex digits")
    check_number(to, "to")
    check_number(from_, "from")
    if bool(url) == bool(twiml):
        raise ValueError("give exactly one of url (the answer document's address) or twiml (the document)")
    if machine_detection and machine_detection not in MACHINE_DETECTION:
        raise ValueError(f"machine_detection must be one of {', '.join(MACHINE_DETECTION)}")
    if not 5 <= timeout_s <= 600:
        raise ValueError("timeout_s (how long it rings) must be 5-600")
    form: list[tuple[str, str]] = [("To", to), ("From", from_), ("Timeout", str(timeout_s))]
    form.append(("Url", url) if url else ("Twiml", twiml))
    if url:
        form.append(("Method", "POST"))
    if status_callback:
        form += [("StatusCallback", status_callback), ("StatusCallbackMethod", "POST")]
        form += [("StatusCallbackEvent", event) for event in STATUS_EVENTS]
    if machine_detection:
        form.append(("MachineDetection", machine_detection))
        if async_amd:
            form += [("AsyncAmd", "true"), ("AsyncAmdStatusCallback", status_callback),
                     ("AsyncAmdStatusCallbackMethod", "POST")]
    calls_url = f"{base_url.rstrip('/')}/2010-04-01/Accounts/{quote(account_sid)}/Calls.json"
    headers = (("Authorization", basic_auth(username or account_sid, auth_token)),
               ("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json"))
    return RestRequest("POST", calls_url, headers, urlencode(form).encode("ascii"))


def parse_place_call_response(status_code: int, body: bytes) -> PlacedCall:
    """Twilio answers 201 with the call resource (sid, status "queued"), or its error object."""
    data = json_object(body)
    if 200 <= status_code < 300:
        sid, status = data.get("sid"), data.get("status")
        if not isinstance(sid, str) or not _CALL_SID.match(sid):
            return PlacedCall(False, False, "", "", "the answer names no call (no CA sid)")
        return PlacedCall(True, False, sid, status if isinstance(status, str) else "", None)
    message = data.get("message")
    common = result(status_code, message if isinstance(message, str) else None)
    return PlacedCall(False, common.retryable, "", "", common.error)


# --- the call status callback --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallStatusEvent:
    call_sid: str
    account_sid: str
    status: str  # one of CALL_STATUSES
    direction: str  # outbound-api for a call we placed
    answered_by: str  # AMD's result when the call asked for it, else ""
    sequence: int  # SequenceNumber: the callbacks of a call may arrive out of order
    duration_s: int | None  # CallDuration, on completed


def parse_call_status(form: Mapping[str, str]) -> CallStatusEvent:
    """The call status callback's fields we use; WebhookError (fixed text) for a form that is not one."""
    status = form.get("CallStatus")
    if status not in CALL_STATUSES:
        raise WebhookError("unknown CallStatus")
    call_sid, account_sid = form.get("CallSid", ""), form.get("AccountSid", "")
    if not _CALL_SID.match(call_sid) or not _SID.match(account_sid):
        raise WebhookError("CallSid or AccountSid is not a Twilio SID")
    sequence = form.get("SequenceNumber", "0")
    duration = form.get("CallDuration")
    if not sequence.isdigit() or (duration is not None and not duration.isdigit()):
        raise WebhookError("SequenceNumber or CallDuration is not a number")
    answered_by = form.get("AnsweredBy", "")
    if answered_by and answered_by not in ANSWERED_BY:
        raise WebhookError("unknown AnsweredBy")
    return CallStatusEvent(call_sid, account_sid, status, form.get("Direction", ""), answered_by,
                           int(sequence), int(duration) if duration is not None else None)


@dataclass(frozen=True, slots=True)
class AmdResult:
    """Twilio's asynchronous AMD callback (to ``AsyncAmdStatusCallback``): no ``CallStatus``, the result in
    ``AnsweredBy`` and how long Twilio listened in ``MachineDetectionDuration`` (ms)."""

    call_sid: str
    account_sid: str
    answered_by: str  # one of ANSWERED_BY
    duration_ms: int | None


def is_amd_result(form: Mapping[str, str]) -> bool:
    """An AMD callback, not a call progress one: it names AnsweredBy and no CallStatus."""
    return "CallStatus" not in form and "AnsweredBy" in form


def parse_amd_result(form: Mapping[str, str]) -> AmdResult:
    """The async AMD callback's fields; WebhookError (fixed text) for a form that is not one."""
    call_sid, account_sid = form.get("CallSid", ""), form.get("AccountSid", "")
    if not _CALL_SID.match(call_sid) or not _SID.match(account_sid):
        raise WebhookError("CallSid or AccountSid is not a Twilio SID")
    answered_by = form.get("AnsweredBy", "")
    if answered_by not in ANSWERED_BY:
        raise WebhookError("unknown AnsweredBy")
    duration = form.get("MachineDetectionDuration")
    if duration is not None and not duration.isdigit():
        raise WebhookError("MachineDetectionDuration is not a number")
    return AmdResult(call_sid, account_sid, answered_by, int(duration) if duration is not None else None)
