"""Telnyx Call Control requests that end or transfer a live call, sans-I/O: build the request, parse the answer.

Owns the shape of ``POST {base}/v2/calls/{call_control_id}/actions/hangup`` and ``.../actions/transfer``
(JSON bodies, ``Authorization: Bearer <API key>``) and reading Telnyx's answer. Must not know sockets or the
clock: the shell sends the request with any HTTP client and retries what :func:`parse_response` calls
retryable, with the same ``command_id`` (Telnyx ignores a command whose id it has seen for the call, so a
retry after a lost answer cannot act twice).

Sources:

- [cmds] Telnyx "Sending Commands for Programmable Voice" (developers.telnyx.com/docs/voice/programmable-voice/
  sending-commands): a command is a POST to ``https://api.telnyx.com/v2/calls/{call_control_id}/actions/<name>``
  with ``Authorization: Bearer YOUR_API_KEY``, JSON; 200 OK, 403, 404, 422 answers.
- [sdk] telnyx-java ``docs/CallCommandsApi.md`` (``POST /calls/{call_control_id}/actions/hangup`` and
  ``/actions/transfer``, relative to ``https://api.telnyx.com/v2``), ``docs/HangupRequest.md`` (optional
  ``client_state``, ``command_id``), ``docs/TransferCallRequest.md`` (``to``: "The DID or SIP URI to dial
  out and bridge to the given call", required; ``from`` defaults to the original call's), and
  ``docs/CallControlCommandResponse.md`` (``{"data": {"result": "ok"}}``).
- [dtmf] Telnyx API reference "Send DTMF" (developers.telnyx.com/api-reference/call-commands/send-dtmf):
  ``POST /calls/{call_control_id}/actions/send_dtmf``, body ``digits`` (required; 0-9, A-D, *, #, pauses ``w``
  0.5 s and ``W`` 1 s), ``duration_millis`` (100-500, default 250), ``client_state``, ``command_id``; answered
  ``{"data": {"result": "ok"}}``.
- Telnyx API v2 errors are ``{"errors": [{"code", "title", "detail"}]}``; only ``title`` is kept (``detail``
  may echo what we sent).

Which id: a TeXML call's ``CallSid`` is its ``call_control_id`` (voicecore/carriers/telnyx/protocol.py), the id the
stream's ``start`` carries. [unverified]: that Telnyx accepts Call Control commands for a call its TeXML
application answered (the alternative would be TeXML's own ``POST /v2/texml/Accounts/{account_sid}/Calls/
{call_sid}`` with ``Status=completed``); no live Telnyx call has been placed.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from voicecore.carriers.rest_common import RestRequest, RestResult, check_target, json_object, result

DEFAULT_BASE_URL = "https://api.telnyx.com"
# call_control_id: "v3:" / "v2:" + URL-safe base64 in every example ([cmds], the TeXML pages), an older UUID
# form in v1 pages. Only characters that need no escaping in a path segment, so the id cannot add a segment.
_CALL_CONTROL_ID = re.compile(r"^[A-Za-z0-9_:-]{8,200}$")
_COMMAND_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def _url(base_url: str, call_control_id: str, action: str) -> str:
    if not isinstance(call_control_id, str) or not _CALL_CONTROL_ID.match(call_control_id):
        raise ValueError("call_control_id must be 8-200 characters of [A-Za-z0-9_:-]")
    return f"{base_url.rstrip('/')}/v2/calls/{quote(call_control_id, safe=':')}/actions/{action}"


def _request(url: str, api_key: str, body: dict) -> RestRequest:
    if not api_key:
        raise ValueError("a Telnyx API key is required")
    headers = (
        ("Authorization", f"Bearer {api_key}"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
    )
    return RestRequest("POST", url, headers, json.dumps(body, separators=(",", ":")).encode("utf-8"))


def _body(command_id: str | None) -> dict:
    if command_id is None:
        return {}
    if not _COMMAND_ID.match(command_id):
        raise ValueError("command_id must be 1-128 characters of [A-Za-z0-9_.:-]")
    return {"command_id": command_id}


def hangup_request(call_control_id: str, api_key: str, command_id: str | None = None,
                   base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """End the call (the controller's HangUp)."""
    return _request(_url(base_url, call_control_id, "hangup"), api_key, _body(command_id))


def transfer_request(call_control_id: str, target: str, api_key: str, command_id: str | None = None,
                     base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """Dial ``target`` (a number or SIP URI) and bridge the call to it (the controller's Transfer); the caller
    id shown to the target is the original call's ([sdk]: ``from`` omitted)."""
    body = {"to": check_target(target), **_body(command_id)}
    return _request(_url(base_url, call_control_id, "transfer"), api_key, body)


DTMF_DURATION_MS = 100  # each key's tone ([dtmf]: 100-500 ms, default 250); the in-band tones' length too


def send_dtmf_request(call_control_id: str, digits: str, api_key: str, command_id: str | None = None,
                      base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """Press ``digits`` on the call ([dtmf]: ``POST /v2/calls/{call_control_id}/actions/send_dtmf``, ``digits``
    of 0-9, A-D, *, # and the pauses w (0.5 s) and W (1 s), ``duration_millis``): voicecore/outbound/dtmf.py's
    syntax is a subset, sent as it is."""
    from voicecore.outbound.dtmf import parse_digits

    body = {"digits": parse_digits(digits), "duration_millis": DTMF_DURATION_MS, **_body(command_id)}
    return _request(_url(base_url, call_control_id, "send_dtmf"), api_key, body)


def parse_response(status_code: int, body: bytes) -> RestResult:
    """Telnyx answers 200 ``{"data": {"result": "ok"}}``, or ``{"errors": [{"code", "title", ...}]}``."""
    data = json_object(body)
    if 200 <= status_code < 300:
        inner = data.get("data")
        outcome = inner.get("result") if isinstance(inner, dict) else None
        return result(status_code, None, outcome if isinstance(outcome, str) else None)
    errors = data.get("errors")
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    title, code = first.get("title"), first.get("code")
    error = None
    if isinstance(title, str):
        error = f"{title} ({code})" if isinstance(code, (str, int)) else title
    return result(status_code, error)
