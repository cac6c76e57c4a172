"""Placing a call with Telnyx's TeXML Calls API, sans-I/O: the request, its answer and the call's status callbacks.

Owns: ``POST {base}/v2/texml/calls/{application_id}`` (JSON: ``To``, ``From``, ``Url`` + ``Method``,
``StatusCallback`` + ``StatusCallbackMethod`` + ``StatusCallbackEvent``; ``Authorization: Bearer <API key>``),
Telnyx's answer (the call: ``call_sid``, its call_control_id, ``status`` queued; flat or under ``data``), and
the status callback form (TwiML-compatible: ``CallSid``, ``CallStatus``, ``SequenceNumber``, ``CallDuration``),
signed with Ed25519 like every TeXML request (checked by the descriptor with ``telnyx_public_key``).

Sources:

- [create] Telnyx API reference, "Create a connection-scoped TeXML call", ``POST /texml/calls/{connection_id}``
  (relative to ``https://api.telnyx.com/v2``): ``From`` and ``To`` required, ``Url`` overrides the
  application's XML request URL, ``Method`` GET or POST; the answer "a flat call object without a data
  wrapper": ``call_sid`` ("The call control ID of the created call"), ``from``, ``to``, ``status`` queued.
- [fetch] Telnyx "TeXML Instruction Fetching": the TeXML Calls API with ``To``, ``From``, ``Url`` and
  ``StatusCallback``.
- [callbacks] Telnyx API reference, TexmlCallInitiated / Ringing / Answered webhooks: form-encoded,
  ``telnyx-signature-ed25519`` over ``timestamp|payload``, fields ``CallSid``, ``AccountSid``, ``CallStatus``
  (initiated, ringing, in-progress, completed, busy, no-answer, failed, canceled), ``SequenceNumber``,
  ``CallDuration``.

[unverified]: that the connection-scoped request takes ``StatusCallback``, ``StatusCallbackMethod`` and
``StatusCallbackEvent`` as the account-scoped one does (its page lists only From, To, Texml, Url, Method); a
TeXML application's own status callback URL, set to ``/telnyx/call-status``, gives the same callbacks. No live
Telnyx call has been placed: checked against voicecore's own carrier simulator only.

The fields reach the agent as for Twilio: the answer URL's query (Telnyx signs the body, not the URL: the
query is as trustworthy as the request that placed the call, which only holders of the API key can make),
passed to the stream as TeXML ``<Parameter>``s.

Must not know: sockets, the clock, how a call is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from voicecore.carriers.rest_common import PlacedCall, RestRequest, json_object, result
from voicecore.carriers.webhook import WebhookError

DEFAULT_BASE_URL = "https://api.telnyx.com"
STATUS_PATH = "/telnyx/call-status"
STATUS_EVENTS = ("initiated", "ringing", "answered", "completed")
# TeXML's answering-machine detection: the request's MachineDetection values and the callback's AnsweredBy ones
# (Telnyx's TeXML AMD callback lists the same as Twilio's)
MACHINE_DETECTION = ("Enable", "DetectMessageEnd")
ANSWERED_BY = frozenset({"human", "machine_start", "machine_end_beep", "machine_end_silence", "machine_end_other",
                         "fax", "unknown"})
CALL_STATUSES = frozenset({"queued", "initiated", "ringing", "in-progress", "completed", "busy", "no-answer",
                           "failed", "canceled"})
_APPLICATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CALL_ID = re.compile(r"^[A-Za-z0-9_:-]{8,200}$")  # a call_control_id ("v3:" + URL-safe base64)
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


def place_call_request(application_id: str, api_key: str, to: str, from_: str, *, url: str,
                       status_callback: str = "", base_url: str = DEFAULT_BASE_URL,
                       machine_detection: str = "") -> RestRequest:
    """Create a call from ``from_`` to ``to``; Telnyx POSTs ``url`` for its TeXML when it is answered and its
    progress (every event of STATUS_EVENTS) to ``status_callback``. ``machine_detection``: Enable or
    DetectMessageEnd, TeXML's AMD as Twilio's (asynchronous, its AnsweredBy to ``status_callback`` too)."""
    if not isinstance(application_id, str) or not _APPLICATION_ID.match(application_id):
        raise ValueError("telnyx_texml_application_id must be 1-64 characters of [A-Za-z0-9_-]")
    if not api_key:
        raise ValueError("a Telnyx API key is required")
    for number, what in ((to, "to"), (from_, "from")):
        if not isinstance(number, str) or not _E164.match(number):
            raise ValueError(f"{what} must be a phone number in E.164 (+ and 7-15 digits)")
    if not url.startswith(("http://", "https://")):
        raise ValueError("url must be an http(s) URL")
    body: dict[str, str] = {"To": to, "From": from_, "Url": url, "Method": "POST"}
    if status_callback:
        if not status_callback.startswith(("http://", "https://")):
            raise ValueError("status_callback must be an http(s) URL")
        body.update(StatusCallback=status_callback, StatusCallbackMethod="POST",
                    StatusCallbackEvent=" ".join(STATUS_EVENTS))
    if machine_detection:
        if machine_detection not in MACHINE_DETECTION:
            raise ValueError(f"machine_detection must be one of {', '.join(MACHINE_DETECTION)}")
        if not status_callback:
            raise ValueError("machine detection needs the status callback (its result goes there)")
        body.update(MachineDetection=machine_detection, AsyncAmd="true", AsyncAmdStatusCallback=status_callback,
                    AsyncAmdStatusCallbackMethod="POST")
    headers = (("Authorization", f"Bearer {api_key}"), ("Content-Type", "application/json"),
               ("Accept", "application/json"))
    return RestRequest("POST", f"{base_url.rstrip('/')}/v2/texml/calls/{quote(application_id)}", headers,
                       json.dumps(body, separators=(",", ":")).encode("utf-8"))


def parse_place_call_response(status_code: int, body: bytes) -> PlacedCall:
    """Telnyx answers the call (``call_sid``, ``status`` queued), or ``{"errors": [{"code", "title"}]}``."""
    data = json_object(body)
    if 200 <= status_code < 300:
        call = data.get("data") if isinstance(data.get("data"), dict) else data
        sid, status = call.get("call_sid"), call.get("status")
        if not isinstance(sid, str) or not _CALL_ID.match(sid):
            return PlacedCall(False, False, "", "", "the answer names no call (no call_sid)")
        return PlacedCall(True, False, sid, status if isinstance(status, str) else "", None)
    errors = data.get("errors")
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    title = first.get("title")
    common = result(status_code, title if isinstance(title, str) else None)
    return PlacedCall(False, common.retryable, "", "", common.error)


def is_amd_result(form: Mapping[str, str]) -> bool:
    """TeXML's asynchronous AMD callback (AnsweredBy, no CallStatus), not a call progress one."""
    return "CallStatus" not in form and "AnsweredBy" in form


def parse_amd_result(form: Mapping[str, str]) -> tuple[str, str]:
    """(call_sid, answered_by) of TeXML's AMD callback: the values are Twilio's (voicecore/outbound/answer.py
    takes them as they are); WebhookError (fixed text) for a form that is not one."""
    call_sid, answered_by = form.get("CallSid", ""), form.get("AnsweredBy", "")
    if not _CALL_ID.match(call_sid):
        raise WebhookError("CallSid is not a call_control_id")
    if answered_by not in ANSWERED_BY:
        raise WebhookError("unknown AnsweredBy")
    return call_sid, answered_by


@dataclass(frozen=True, slots=True)
class CallStatusEvent:
    call_sid: str
    status: str
    direction: str
    answered_by: str
    sequence: int
    duration_s: int | None


def parse_call_status(form: Mapping[str, str]) -> CallStatusEvent:
    """A TeXML status callback's fields; WebhookError (fixed text) for a form that is not one."""
    status = form.get("CallStatus")
    if status not in CALL_STATUSES:
        raise WebhookError("unknown CallStatus")
    call_sid = form.get("CallSid", "")
    if not _CALL_ID.match(call_sid):
        raise WebhookError("CallSid is not a call_control_id")
    sequence, duration = form.get("SequenceNumber", "0"), form.get("CallDuration")
    if not sequence.isdigit() or (duration is not None and not duration.isdigit()):
        raise WebhookError("SequenceNumber or CallDuration is not a number")
    answered_by = form.get("AnsweredBy", "")
    if answered_by and answered_by not in ANSWERED_BY:
        raise WebhookError("unknown AnsweredBy")
    return CallStatusEvent(call_sid, status, form.get("Direction", ""), answered_by, int(sequence),
                           int(duration) if duration is not None else None)
