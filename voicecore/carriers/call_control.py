"""How a call of each non-Twilio carrier is ended or transferred: the decision, without I/O.

Owns: which request (or other step) the controller's HangUp / Transfer becomes for a Telnyx, Plivo, Vonage or
Exotel call, given the ids the call's stream named (``CallRef``, from the gateway's CallStarted) and the
configured credentials (``CallControlSettings``); and which module reads the answer. Twilio's own path stays
in voicecore/carriers/twilio/rest.py, untouched.

Must not know: sockets, the clock or randomness (``now_s`` and ``nonce`` come in), the bus. The model worker
(workers/model/main.py) sends a ``RestRequest`` with voicecore.http_client and retries what ``parse_response``
calls retryable; a ``CloseStream`` it asks of the gateway (messages.EndStream); a ``CannotEnd`` it logs.

Per carrier:

- Telnyx: Call Control ``hangup`` / ``transfer`` on the stream's ``call_control_id`` (telnyx_rest.py), Bearer
  ``telnyx_api_key``; ``nonce`` is the ``command_id``, the same for every retry of one action.
- Plivo: ``DELETE`` / ``POST .../Call/{CallUUID}/`` (plivo_rest.py), basic auth ``plivo_auth_id`` +
  ``plivo_auth_token``; a transfer sends Plivo to the gateway's ``/plivo/transfer?to=...`` (under
  ``public_url``), which answers ``<Dial>``.
- Vonage: ``PUT /v1/calls/{uuid}`` (vonage_rest.py) with an application JWT (``vonage_application_id``,
  ``vonage_private_key``; ``nonce`` is its ``jti``).
- Exotel: its Voicebot applet has no REST call to end or redirect a live call (Exotel's v2 Legs API acts on
  legs of its own call flows, which a Voicebot applet call does not hand us). What it documents instead: the
  applet's next applet runs once the bot closes the WebSocket (voicecore/carriers/exotel/protocol.py [applet]). So both
  actions close the stream, and the flow's next applet decides: a Hangup applet ends the call, a Connect
  applet transfers it (to the number configured there: the agent's target cannot reach Exotel this way).
"""

from __future__ import annotations

from dataclasses import dataclass

from voicecore.carriers.vonage import rest as vonage_rest
from voicecore.carriers.plivo import rest as plivo_rest
from voicecore.carriers.telnyx import rest as telnyx_rest
from voicecore.carriers.rest_common import RestRequest, RestResult, check_target

TELNYX = "telnyx"
PLIVO = "plivo"
VONAGE = "vonage"
EXOTEL = "exotel"
HANGUP = "hangup"
TRANSFER = "transfer"


@dataclass(frozen=True, slots=True)
class CallRef:
    """The carrier's own ids of one call: ``call_id`` is Telnyx's call_control_id, Plivo's CallUUID, Vonage's
    uuid, Exotel's CallSid; ``account_id`` what the stream named as the account ("" if nothing)."""

    carrier: str
    call_id: str
    account_id: str = ""


@dataclass(frozen=True, slots=True)
class CallControlSettings:
    """The credentials and API base URLs (voicecore/config.py); empty: that carrier's calls cannot be ended."""

    telnyx_api_key: str = ""
    telnyx_api_base: str = telnyx_rest.DEFAULT_BASE_URL
    plivo_auth_id: str = ""
    plivo_auth_token: str = ""
    plivo_api_base: str = plivo_rest.DEFAULT_BASE_URL
    public_url: str = ""  # where Plivo reaches the gateway's /plivo/transfer
    vonage_application_id: str = ""
    vonage_private_key: str = ""  # the PEM text (the shell reads a file path into it)
    vonage_api_base: str = vonage_rest.DEFAULT_BASE_URL

    @classmethod
    def from_config(cls, config, vonage_private_key: str = "") -> CallControlSettings:
        return cls(config.telnyx_api_key, config.telnyx_api_base, config.plivo_auth_id, config.plivo_auth_token,
                   config.plivo_api_base, config.base_url, config.vonage_application_id, vonage_private_key,
                   config.vonage_api_base)


@dataclass(frozen=True, slots=True)
class CloseStream:
    """Close the call's media stream (Exotel: the flow's next applet takes the call)."""

    reason: str


@dataclass(frozen=True, slots=True)
class CannotEnd:
    """Nothing can be sent: a credential is not configured (fixed text naming the setting)."""

    reason: str


def end_call(ref: CallRef, action: str, target: str, settings: CallControlSettings, *, now_s: float,
             nonce: str) -> RestRequest | CloseStream | CannotEnd:
    """What ``action`` (HANGUP or TRANSFER, to ``target``) on ``ref``'s call becomes. ValueError: an id,
    target or key that cannot go into the request (a bad id from the stream, the agent's bad target, an
    unusable key)."""
    if action not in (HANGUP, TRANSFER):
        raise ValueError(f"unknown action {action!r}")
    transfer = action == TRANSFER
    if transfer:
        check_target(target)
    carrier = ref.carrier
    if carrier == TELNYX:
        if not settings.telnyx_api_key:
            return CannotEnd("telnyx_api_key is not set")
        if transfer:
            return telnyx_rest.transfer_request(ref.call_id, target, settings.telnyx_api_key, nonce,
                                                settings.telnyx_api_base)
        return telnyx_rest.hangup_request(ref.call_id, settings.telnyx_api_key, nonce, settings.telnyx_api_base)
    if carrier == PLIVO:
        if not (settings.plivo_auth_id and settings.plivo_auth_token):
            return CannotEnd("plivo_auth_id is not set")
        if transfer:
            aleg_url = plivo_rest.transfer_url(settings.public_url, target)
            return plivo_rest.transfer_request(settings.plivo_auth_id, ref.call_id, aleg_url, settings.plivo_auth_token,
                                               settings.plivo_api_base)
        return plivo_rest.hangup_request(settings.plivo_auth_id, ref.call_id, settings.plivo_auth_token,
                                         settings.plivo_api_base)
    if carrier == VONAGE:
        if not (settings.vonage_application_id and settings.vonage_private_key):
            return CannotEnd("vonage_application_id or vonage_private_key is not set")
        token = vonage_rest.application_jwt(settings.vonage_application_id, settings.vonage_private_key, now_s, nonce)
        if transfer:
            return vonage_rest.transfer_request(ref.call_id, target, token, settings.vonage_api_base)
        return vonage_rest.hangup_request(ref.call_id, token, settings.vonage_api_base)
    if carrier == EXOTEL:
        return CloseStream("exotel transfer: the flow's next applet" if transfer else "exotel hangup")
    raise ValueError(f"no call control for carrier {carrier!r}")


def parse_response(carrier: str, status_code: int, body: bytes) -> RestResult:
    """Read ``carrier``'s answer to a request from :func:`end_call`."""
    if carrier == TELNYX:
        return telnyx_rest.parse_response(status_code, body)
    if carrier == PLIVO:
        return plivo_rest.parse_response(status_code, body)
    if carrier == VONAGE:
        return vonage_rest.parse_response(status_code, body)
    raise ValueError(f"no REST answers for carrier {carrier!r}")
