"""Plivo Voice API requests that end or transfer a live call, sans-I/O: build the request, parse the answer.

Owns the shape of ``DELETE {base}/v1/Account/{auth_id}/Call/{call_uuid}/`` (hang up) and ``POST`` to the same
URL with ``{"legs": "aleg", "aleg_url": ..., "aleg_method": "POST"}`` (transfer: Plivo fetches the XML at
``aleg_url`` and runs it on the caller's leg, which ends the stream), HTTP basic auth ``auth_id:auth_token``,
JSON bodies, and the XML that transfer answers with (:func:`dial_xml`). Must not know sockets or the clock.

Sources:

- [sdk] plivo-python ``plivo/resources/calls.py``: ``Calls.delete`` / ``Call.hangup`` is ``DELETE ('Call',
  call_uuid)``; ``Calls.update`` / ``transfer`` is ``POST ('Call', call_uuid)`` with ``legs`` (``aleg``,
  ``bleg`` or ``both``), ``aleg_url`` and ``aleg_method``; its client puts ``/v1/Account/{auth_id}/`` before
  the resource and a ``/`` after it, sends JSON and authenticates with basic auth (auth id, auth token).
- [ref] Plivo's "Hang up a call" and "Transfer a call" API pages: 204 No Content for a hang-up, 202
  ``{"message": "call transferred", "api_id": ...}`` for a transfer, errors as ``{"api_id", "error"}``; the
  plivo-ruby docs of ``CallInterface#update`` ("aleg will transfer call_uuid"; aleg_method defaults to POST).
- [dtmf] Plivo's "Send digits" API page and plivo-python ``Calls.send_digits``: ``POST ('Call', call_uuid,
  'DTMF')`` with ``digits`` (0-9, *, #, w a 0.5 s pause, W 1 s) and ``leg`` (``aleg``, the default, or
  ``bleg``); 202 ``{"message": "digits sent", "api_id"}``. On a call we placed, the A leg is the callee's.
- [xml] Plivo XML ``<Dial>``: ``<Number>`` for a phone number, ``<User>`` for a SIP endpoint
  (``sip:...``).

The auth id is the account's (``MA...``, or a subaccount's ``SA...``: 20 characters); the auth token is the
one the gateway already checks X-Plivo-Signature-V3 with (``plivo_auth_token``), the same secret.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, urlencode
from xml.sax.saxutils import escape

from voicecore.carriers.rest_common import (
    RestRequest,
    RestResult,
    basic_auth,
    check_target,
    is_sip,
    json_object,
    result,
)

DEFAULT_BASE_URL = "https://api.plivo.com"
TRANSFER_PATH = "/plivo/transfer"  # the gateway route that answers aleg_url with dial_xml (signed by Plivo)
TARGET_PARAMETER = "to"
_AUTH_ID = re.compile(r"^[MS]A[A-Z0-9]{18}$")
_CALL_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _url(base_url: str, auth_id: str, call_uuid: str) -> str:
    if not isinstance(auth_id, str) or not _AUTH_ID.match(auth_id):
        raise ValueError("auth_id must be MA or SA + 18 upper-case letters or digits")
    if not isinstance(call_uuid, str) or not _CALL_UUID.match(call_uuid):
        raise ValueError("call_uuid must be a UUID")
    return f"{base_url.rstrip('/')}/v1/Account/{quote(auth_id)}/Call/{quote(call_uuid)}/"


def _headers(auth_id: str, auth_token: str, has_body: bool) -> tuple[tuple[str, str], ...]:
    if not auth_token:
        raise ValueError("a Plivo auth token is required")
    headers = [("Authorization", basic_auth(auth_id, auth_token)), ("Accept", "application/json")]
    if has_body:
        headers.append(("Content-Type", "application/json"))
    return tuple(headers)


def hangup_request(auth_id: str, call_uuid: str, auth_token: str, base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """End the call (the controller's HangUp)."""
    return RestRequest("DELETE", _url(base_url, auth_id, call_uuid), _headers(auth_id, auth_token, False), b"")


def transfer_url(public_base_url: str, target: str) -> str:
    """The ``aleg_url`` for a transfer to ``target``: the gateway's own route, which Plivo fetches signed (the
    signature covers the query, so only Plivo can make the gateway dial a number)."""
    if not public_base_url.startswith(("http://", "https://")):
        raise ValueError("public_base_url must be http(s)://")
    return f"{public_base_url.rstrip('/')}{TRANSFER_PATH}?{urlencode({TARGET_PARAMETER: check_target(target)})}"


def transfer_request(auth_id: str, call_uuid: str, aleg_url: str, auth_token: str,
                     base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """Move the caller's leg to the XML at ``aleg_url`` (the controller's Transfer: see :func:`transfer_url`)."""
    if not aleg_url.startswith(("http://", "https://")):
        raise ValueError("aleg_url must be an http(s) URL")
    body = json.dumps({"legs": "aleg", "aleg_url": aleg_url, "aleg_method": "POST"}, separators=(",", ":"))
    return RestRequest("POST", _url(base_url, auth_id, call_uuid), _headers(auth_id, auth_token, True),
                       body.encode("utf-8"))


def dial_xml(target: str) -> str:
    """The answer to ``aleg_url``: dial ``target`` ([xml]: ``<User>`` for a SIP URI, ``<Number>`` otherwise)."""
    target = check_target(target)
    element = "User" if is_sip(target) else "Number"
    return f'<Response><Dial><{element}>{escape(target)}</{element}></Dial></Response>'


def send_dtmf_request(auth_id: str, call_uuid: str, digits: str, auth_token: str,
                      base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """Press ``digits`` on the callee's leg ([dtmf]: ``POST .../Call/{call_uuid}/DTMF/`` with ``digits`` and
    ``leg``; w and W are its half-second and one-second pauses, as in voicecore/outbound/dtmf.py)."""
    from voicecore.outbound.dtmf import parse_digits

    body = json.dumps({"digits": parse_digits(digits), "leg": "aleg"}, separators=(",", ":"))
    return RestRequest("POST", _url(base_url, auth_id, call_uuid) + "DTMF/", _headers(auth_id, auth_token, True),
                       body.encode("utf-8"))


def parse_response(status_code: int, body: bytes) -> RestResult:
    """Plivo answers 204 (hang-up) or 202 ``{"message": "call transferred"}``, or ``{"api_id", "error"}``."""
    data = json_object(body)
    if 200 <= status_code < 300:
        message = data.get("message")
        return result(status_code, None, message if isinstance(message, str) else None)
    error = data.get("error")
    return result(status_code, error if isinstance(error, str) else None)
