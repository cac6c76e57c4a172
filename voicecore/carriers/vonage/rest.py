"""Vonage Voice API requests that end or transfer a live call, sans-I/O: build the request, parse the answer.

Owns the shape of ``PUT {base}/v1/calls/{uuid}`` with ``{"action": "hangup"}`` or ``{"action": "transfer",
"destination": {"type": "ncco", "ncco": [connect ...]}}``, the application JWT that authenticates it
(:func:`application_jwt`: RS256 over ``application_id``, ``iat``, ``jti``, ``exp`` with the application's
private key) and reading Vonage's answer. Must not know sockets, the clock or randomness: ``now_s`` and the
JWT id come in.

Sources:

- [api] Vonage Voice API reference, "Modify an in progress call": ``PUT https://api.nexmo.com/v1/calls/:uuid``,
  ``Authorization: Bearer <JWT>``, body ``action`` one of hangup, mute, unmute, earmuff, unearmuff,
  transfer; a transfer's ``destination`` is ``{"type": "ncco", "url": [...]}`` or ``{"type": "ncco",
  "ncco": [...]}``; 204 No Content when done; errors as ``{"type", "title", "detail", "instance"}``
  (application/problem+json).
- [curl] Vonage/vonage-curl-code-snippets ``voice/voice-api/transfer-a-call.sh`` (``curl -X PUT
  https://api.nexmo.com/v1/calls/$VOICE_CALL_ID -H "Authorization: Bearer $JWT"``, ``{"action": "transfer",
  "destination": {"type": "ncco", ...}}``); @vonage/voice ``ModifyCallRequest`` (hangup, transfer, ...).
- [jwt] Vonage "JSON Web Tokens" guide: RS256 signed with the application's private key; claims
  ``application_id`` (required), ``iat``, ``jti`` (unique), ``exp`` (default 15 minutes); ``nbf``, ``acl``
  optional.
- [dtmf] Vonage Voice API reference, "Play DTMF into a call": ``PUT /v1/calls/:uuid/dtmf``, body ``{"digits":
  "1713"}`` (0-9, *, #, ``p`` a 500 ms pause); 200 ``{"message": "DTMF sent", "uuid"}``; @vonage/voice
  ``playDTMF(uuid, digits)``.
- [ncco] NCCO reference, ``connect``: endpoint ``{"type": "phone", "number": "447700900000"}`` (E.164
  without "+") or ``{"type": "sip", "uri": "sip:..."}``.

The call id is the call leg's ``uuid`` from the answer webhook, which our NCCO hands to the stream as the
``call_id`` header (voicecore/carriers/vonage/protocol.py).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import jwt

from voicecore.carriers.rest_common import RestRequest, RestResult, check_target, is_sip, json_object, result

DEFAULT_BASE_URL = "https://api.nexmo.com"
JWT_TTL_S = 300  # a token per request: short-lived beats the 15-minute default [jwt]
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_JTI = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def application_jwt(application_id: str, private_key_pem: str, now_s: float, jti: str) -> str:
    """The application JWT of one request [jwt]. Raises ValueError for an unusable key (our configuration)."""
    if not _UUID.match(application_id or ""):
        raise ValueError("vonage application_id must be a UUID")
    if not _JTI.match(jti or ""):
        raise ValueError("jti must be 1-128 characters of [A-Za-z0-9_.:-]")
    iat = int(now_s)
    claims = {"application_id": application_id, "iat": iat, "jti": jti, "exp": iat + JWT_TTL_S}
    try:
        return jwt.encode(claims, private_key_pem, algorithm="RS256")
    except (jwt.exceptions.PyJWTError, TypeError, ValueError) as exc:
        raise ValueError(f"the Vonage private key cannot sign RS256: {type(exc).__name__}") from None


def _request(base_url: str, call_uuid: str, token: str, body: dict) -> RestRequest:
    if not isinstance(call_uuid, str) or not _UUID.match(call_uuid):
        raise ValueError("call uuid must be a UUID")
    headers = (
        ("Authorization", f"Bearer {token}"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
    )
    url = f"{base_url.rstrip('/')}/v1/calls/{quote(call_uuid)}"
    return RestRequest("PUT", url, headers, json.dumps(body, separators=(",", ":")).encode("utf-8"))


def hangup_request(call_uuid: str, token: str, base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """End the call (the controller's HangUp); ``token`` from :func:`application_jwt`."""
    return _request(base_url, call_uuid, token, {"action": "hangup"})


def connect_endpoint(target: str) -> dict:
    """The NCCO ``connect`` endpoint for ``target`` [ncco]."""
    target = check_target(target)
    if is_sip(target):
        return {"type": "sip", "uri": target}
    return {"type": "phone", "number": target.lstrip("+")}


def transfer_request(call_uuid: str, target: str, token: str, base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """Replace the call's NCCO with a ``connect`` to ``target`` (the controller's Transfer): the WebSocket leg
    ends and the caller is connected to the target."""
    ncco = [{"action": "connect", "endpoint": [connect_endpoint(target)]}]
    return _request(base_url, call_uuid, token, {"action": "transfer", "destination": {"type": "ncco", "ncco": ncco}})


VONAGE_PAUSE = "p"  # [dtmf]: a 500 ms pause in Vonage's digits


def send_dtmf_request(call_uuid: str, digits: str, token: str, base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """Press ``digits`` on the call ([dtmf]: ``PUT /v1/calls/{uuid}/dtmf`` with ``digits``). Vonage's pause is
    ``p`` (500 ms): voicecore/outbound/dtmf.py's ``w`` becomes one, ``W`` two."""
    from voicecore.outbound.dtmf import parse_digits

    text = parse_digits(digits).replace("W", VONAGE_PAUSE * 2).replace("w", VONAGE_PAUSE)
    request = _request(base_url, call_uuid, token, {"digits": text})
    return RestRequest(request.method, request.url + "/dtmf", request.headers, request.body)


def parse_response(status_code: int, body: bytes) -> RestResult:
    """Vonage answers 204 with no body, or a problem object ``{"type", "title", "detail"}``."""
    data = json_object(body)
    if 200 <= status_code < 300:
        return result(status_code, None)
    title = data.get("title")
    return result(status_code, title if isinstance(title, str) else None)
