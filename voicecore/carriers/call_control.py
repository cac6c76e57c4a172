"""How a call is ended or transferred, whatever its carrier: the decision, without I/O.

Owns: which request (or other step) the controller's HangUp / Transfer becomes for a call, given the ids the
call's stream named (``CallRef``, from the gateway's CallStarted) and the configured credentials
(``CallControlSettings``), and which module reads the answer. Each carrier's own rule is its descriptor's
(``voicecore/carriers/<name>/carrier.py``: Twilio's Calls resource, Telnyx's Call Control, Plivo's and Vonage's
call APIs, Exotel's stream closed for the flow's next applet); this module only finds the call's carrier in the
registry.

Must not know: sockets, the clock or randomness (``now_s`` and ``nonce`` come in), the bus. The model worker
(workers/model/main.py) sends a ``RestRequest`` with voicecore.http_client and retries what ``parse_response``
calls retryable, with one retry policy for every carrier; a ``CloseStream`` it asks of the gateway
(messages.EndStream); a ``CannotEnd`` it logs.
"""

from __future__ import annotations

from voicecore.carriers import registry
from voicecore.carriers.base import HANGUP, TRANSFER, CallControlSettings, CallRef, CannotEnd, CloseStream, InBand
from voicecore.carriers.rest_common import RestRequest, RestResult

__all__ = ["DTMF", "HANGUP", "TRANSFER", "CallControlSettings", "CallRef", "CannotEnd", "CloseStream", "InBand",
           "call_ref", "end_call", "parse_response", "send_digits", "title"]

DTMF = "dtmf"  # the step's name in the worker's log lines and counters


def call_ref(started) -> CallRef:
    """The carrier's ids of a call as the gateway's CallStarted names them (voicecore/bus/messages.py): a Twilio
    call's carrier is "" there and its ids the arena's (its CallSid always fits the arena), every other carrier's
    call has its own carrier and ids as its stream sent them."""
    if not started.carrier:
        return CallRef("twilio", started.call_sid, started.account_sid)
    return CallRef(started.carrier, started.carrier_call_id, started.carrier_account_id)


def end_call(ref: CallRef, action: str, target: str, settings: CallControlSettings, *, now_s: float,
             nonce: str) -> RestRequest | CloseStream | CannotEnd:
    """What ``action`` (HANGUP or TRANSFER, to ``target``) on ``ref``'s call becomes. ValueError: an unknown
    carrier, or an id, target or key that cannot go into the request (a bad id from the stream, the agent's bad
    target, an unusable key)."""
    if action not in (HANGUP, TRANSFER):
        raise ValueError(f"unknown action {action!r}")
    return registry.get(ref.carrier).end_call(ref, action == TRANSFER, target, settings, now_s=now_s, nonce=nonce)


def send_digits(ref: CallRef, digits: str, settings: CallControlSettings, *, now_s: float,
                nonce: str) -> RestRequest | InBand | CannotEnd:
    """What pressing ``digits`` (voicecore/outbound/dtmf.py) on ``ref``'s call becomes: the carrier's send-DTMF
    request (Telnyx, Plivo, Vonage), or ``InBand``: tones on the call's stream (Twilio, Exotel). ValueError: an
    unknown carrier, a bad sequence, an id or key that cannot go into the request."""
    return registry.get(ref.carrier).send_digits(ref, digits, settings, now_s=now_s, nonce=nonce)


def parse_response(carrier: str, status_code: int, body: bytes) -> RestResult:
    """Read ``carrier``'s answer to a request from :func:`end_call`."""
    return registry.get(carrier).parse_response(status_code, body)


def title(carrier: str) -> str:
    """The carrier's name for people (log lines: "hangup sent to Twilio")."""
    return registry.get(carrier).title
