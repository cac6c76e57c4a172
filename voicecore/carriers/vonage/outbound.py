"""Placing a call with Vonage's Voice API, sans-I/O: the Create Call request, its answer and the call's events.

Owns: ``POST {base}/v1/calls`` (JSON: ``to`` ``[{"type": "phone", "number"}]``, ``from`` ``{"type": "phone",
"number"}``, ``answer_url`` + ``answer_method``, ``event_url`` + ``event_method``, ``ringing_timer``;
``Authorization: Bearer <application JWT>`` from rest.application_jwt), Vonage's answer (201 ``{"uuid",
"status": "started", "direction": "outbound", "conversation_uuid"}``) and the event webhook's call statuses,
mapped onto the names the call store keeps (Twilio's).

Sources:

- [create] Vonage Voice API reference, "Create an outbound call": ``POST https://api.nexmo.com/v1/calls``,
  ``to`` (array of endpoints; phone numbers in E.164 without "+"), ``from`` (a phone endpoint),
  ``answer_url`` (array of one URL) and ``answer_method``, ``event_url`` (array) and ``event_method``,
  ``ringing_timer``; 201 with ``uuid``, ``status``, ``direction``, ``conversation_uuid``; @vonage/voice
  ``CallWithAnswerURL`` (``answerUrl: string[]``, ``answerMethod``).
- [events] Vonage Voice API webhooks reference, the event webhook: JSON with ``uuid``, ``conversation_uuid``,
  ``status`` (started, ringing, answered, completed, busy, cancelled, failed, rejected, timeout,
  unanswered, machine, human), ``direction``, ``timestamp``, ``duration`` on completed; signed like every
  webhook of a signed-webhook application (the JWT in ``Authorization``, HS256 with the signature secret, its
  ``payload_hash`` over the body).

- [amd] Vonage "Voicemail Detection (Automatic Machine Detection)" and the SDKs' AdvancedMachineDetection
  (@vonage/voice, vonage-dotnet-sdk): ``advanced_machine_detection`` ``{"behavior": "continue" | "hangup",
  "mode": "default" | "detect" | "detect_beep", "beep_timeout": 45-120}``; ``default`` is the asynchronous mode
  (the NCCO runs at the answer, beep detection included), ``detect`` / ``detect_beep`` the synchronous ones (the
  call is silent until it decided). Its result comes to the event URL: ``status`` ``human`` or ``machine``, and
  with beep detection a later ``machine`` event with ``sub_state`` ``beep_start`` (or ``beep_timeout`` when no
  beep came within ``beep_timeout``).

Machine detection (``machine_detection``): ``behavior`` continue (never hangup: the node's own answer gate decides,
and a carrier's AMD takes some people for machines), ``mode`` default (asynchronous: the stream starts at the
answer). Its events are mapped onto the detector's vocabulary (voicecore/outbound/answer.py, Twilio's AnsweredBy):
``human`` human, ``machine`` machine_start, ``machine`` + ``beep_start`` machine_end_beep; ``beep_timeout`` (no
beep within 45 s or more, long after any verdict) adds nothing and is passed over.

[unverified]: no live Vonage call has been placed; checked against voicecore's own carrier simulator only.
Vonage numbers no event, so the store's order is the status's (started 0, ringing 1, answered 2, a final 3).

Must not know: sockets, the clock, randomness (the JWT comes in), how a call is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from voicecore.carriers.rest_common import PlacedCall, RestRequest, json_object, result
from voicecore.carriers.webhook import WebhookError
from voicecore.outbound import call_fields

ANSWER_PATH = "/vonage/answer"
EVENT_PATH = "/vonage/event"
# The NCCO's websocket headers hold 512 bytes of JSON: the call id and session token (under 260 with a signed
# token) and the outbound call's parameters.
MAX_PARAMETER_BYTES = 512 - 260

DEFAULT_BASE_URL = "https://api.nexmo.com"
STATUS_NAMES = {"started": "initiated", "ringing": "ringing", "answered": "in-progress", "completed": "completed",
                "busy": "busy", "timeout": "no-answer", "unanswered": "no-answer", "failed": "failed",
                "rejected": "failed", "cancelled": "canceled"}
_SEQUENCE = {"initiated": 0, "ringing": 1, "in-progress": 2}
# advanced machine detection: the event's status (and sub_state) in the detector's vocabulary; "" passed over
AMD_STATUSES = ("human", "machine")
AMD_ANSWERS = {("human", ""): "human", ("machine", ""): "machine_start", ("machine", "beep_start"): "machine_end_beep",
               ("machine", "beep_timeout"): ""}
BEEP_TIMEOUT_S = (45, 120)
_FINAL_SEQUENCE = 3
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


def answer_url(voice_url: str, callee: str, fields: Mapping[str, str]) -> str:
    """The node's answer webhook with the call's direction, callee and fields in its query; ValueError when they
    would not fit in the NCCO's websocket headers."""
    parameters = call_fields.parameters_for(callee, fields)
    if len(json.dumps(dict(parameters), separators=(",", ":")).encode()) > MAX_PARAMETER_BYTES:
        raise ValueError("the call's fields are too long for Vonage's websocket headers (512 bytes in all): "
                         "shorten them")
    return f"{voice_url}?{urlencode(parameters)}"


def place_call_request(token: str, to: str, from_: str, *, answer_url: str, event_url: str = "",
                       ringing_timer_s: int = 30, base_url: str = DEFAULT_BASE_URL, machine_detection: bool = False,
                       beep_timeout_s: int | None = None) -> RestRequest:
    """Create a call from ``from_`` to ``to``; Vonage POSTs ``answer_url`` for its NCCO when it is answered and
    the call's events to ``event_url``. ``token``: the application JWT (rest.application_jwt).
    ``machine_detection``: Vonage's advanced machine detection too, asynchronous and never hanging up, its
    results to ``event_url``; ``beep_timeout_s``: how long it waits for a beep (45-120; Vonage's default)."""
    if not token:
        raise ValueError("a Vonage application JWT is required")
    for number, what in ((to, "to"), (from_, "from")):
        if not isinstance(number, str) or not _E164.match(number):
            raise ValueError(f"{what} must be a phone number in E.164 (+ and 7-15 digits)")
    for url in (answer_url, event_url):
        if url and not url.startswith(("http://", "https://")):
            raise ValueError("answer_url and event_url must be http(s) URLs")
    if not answer_url:
        raise ValueError("answer_url is required")
    if not 1 <= ringing_timer_s <= 120:
        raise ValueError("ringing_timer_s must be 1-120")
    body: dict[str, object] = {"to": [{"type": "phone", "number": to[1:]}],
                               "from": {"type": "phone", "number": from_[1:]},
                               "answer_url": [answer_url], "answer_method": "POST", "ringing_timer": ringing_timer_s}
    if event_url:
        body.update(event_url=[event_url], event_method="POST")
    if machine_detection:
        if not event_url:
            raise ValueError("machine detection needs the event URL (its results go there)")
        amd: dict[str, object] = {"behavior": "continue", "mode": "default"}
        if beep_timeout_s is not None:
            low, high = BEEP_TIMEOUT_S
            if not (isinstance(beep_timeout_s, int) and low <= beep_timeout_s <= high):
                raise ValueError(f"beep_timeout_s must be {low}-{high}")
            amd["beep_timeout"] = beep_timeout_s
        body["advanced_machine_detection"] = amd
    elif beep_timeout_s is not None:
        raise ValueError("beep_timeout_s without machine_detection")
    headers = (("Authorization", f"Bearer {token}"), ("Content-Type", "application/json"),
               ("Accept", "application/json"))
    return RestRequest("POST", f"{base_url.rstrip('/')}/v1/calls", headers,
                       json.dumps(body, separators=(",", ":")).encode("utf-8"))


def parse_place_call_response(status_code: int, body: bytes) -> PlacedCall:
    """Vonage answers 201 ``{"uuid", "status": "started", ...}``, or a problem object (``title``)."""
    data = json_object(body)
    if 200 <= status_code < 300:
        uuid, status = data.get("uuid"), data.get("status")
        if not isinstance(uuid, str) or not _UUID.match(uuid):
            return PlacedCall(False, False, "", "", "the answer names no call (no uuid)")
        return PlacedCall(True, False, uuid, status if isinstance(status, str) else "", None)
    title = data.get("title")
    common = result(status_code, title if isinstance(title, str) else None)
    return PlacedCall(False, common.retryable, "", "", common.error)


@dataclass(frozen=True, slots=True)
class CallStatusEvent:
    call_sid: str
    status: str
    direction: str
    answered_by: str
    sequence: int
    duration_s: int | None


def parse_event(event: Mapping[str, object]) -> CallStatusEvent | None:
    """An event webhook's call status as the store keeps it, for a call we placed (``direction`` outbound); None
    for an inbound call's and for an event that is no call status (a stream's, a transfer's, a machine-detection
    result); WebhookError for one that names no call."""
    status = STATUS_NAMES.get(event.get("status")) if isinstance(event.get("status"), str) else None
    if status is None or event.get("direction") != "outbound":
        return None
    uuid = event.get("uuid")
    if not isinstance(uuid, str) or not _UUID.match(uuid):
        raise WebhookError("uuid is not a UUID")
    duration = event.get("duration")
    if isinstance(duration, str) and duration.isdigit():
        duration = int(duration)
    if duration is not None and not (isinstance(duration, int) and duration >= 0):
        raise WebhookError("duration is not a number")
    return CallStatusEvent(uuid, status, "outbound", "",
                           _SEQUENCE.get(status, _FINAL_SEQUENCE), duration)


def is_amd_event(event: Mapping[str, object]) -> bool:
    """A machine detection result on the event URL (``status`` human or machine), not a call status."""
    return event.get("status") in AMD_STATUSES


def parse_amd_event(event: Mapping[str, object]) -> tuple[str, str]:
    """(uuid, answered_by) of a machine detection event, answered_by in the detector's vocabulary ("" for one that
    adds nothing: ``beep_timeout``, or a sub_state this module does not know); WebhookError for one that names no
    call."""
    uuid = event.get("uuid")
    if not isinstance(uuid, str) or not _UUID.match(uuid):
        raise WebhookError("uuid is not a UUID")
    sub_state = event.get("sub_state") or ""
    if not isinstance(sub_state, str):
        raise WebhookError("sub_state is not a string")
    return uuid, AMD_ANSWERS.get((str(event.get("status")), sub_state), "")
