"""Twilio REST requests that end or redirect a live call, sans-I/O: build the request, parse the answer.

Owns the shape of ``POST {base}/2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json`` with
``Status=completed`` (hang up) or ``Twiml=<Response><Dial>target</Dial></Response>`` (transfer), HTTP
basic auth (AccountSid or API key SID : secret), form-encoded body. The base URL is configurable so tests
and the demo point it at a local fake server. Must not know sockets or the clock: the shell sends the
request with any HTTP client (and retries a 5xx or a network error, never a 4xx).
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, urlencode
from xml.sax.saxutils import escape

from voicecore.carriers.rest_common import RestRequest, RestResult

__all__ = ["DEFAULT_BASE_URL", "RestRequest", "RestResult", "hangup_request", "parse_response", "transfer_request"]

DEFAULT_BASE_URL = "https://api.twilio.com"
_SID = re.compile(r"^[A-Z]{2}[0-9a-fA-F]{32}$")


def _calls_url(base_url: str, account_sid: str, call_sid: str) -> str:
    if not _SID.match(account_sid) or not account_sid.startswith("AC"):
        raise ValueError("account_sid must be AC + 32 hex digits")
    if not _SID.match(call_sid) or not call_sid.startswith("CA"):
        raise ValueError("call_sid must be CA + 32 hex digits")
    return f"{base_url.rstrip('/')}/2010-04-01/Accounts/{quote(account_sid)}/Calls/{quote(call_sid)}.json"


def _request(url: str, username: str, password: str, form: dict[str, str]) -> RestRequest:
    token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    headers = (
        ("Authorization", f"Basic {token}"),
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Accept", "application/json"),
    )
    return RestRequest("POST", url, headers, urlencode(form).encode("ascii"))


def hangup_request(account_sid: str, call_sid: str, password: str, username: str | None = None,
                   base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """End the call (the controller's HangUp). ``username`` defaults to the AccountSid (auth token auth)."""
    return _request(_calls_url(base_url, account_sid, call_sid), username or account_sid, password, {"Status": "completed"})


def transfer_request(account_sid: str, call_sid: str, target: str, password: str, username: str | None = None,
                     base_url: str = DEFAULT_BASE_URL) -> RestRequest:
    """Redirect the call to ``target`` (the controller's Transfer): new TwiML replaces the stream."""
    twiml = f"<Response><Dial>{escape(target)}</Dial></Response>"
    return _request(_calls_url(base_url, account_sid, call_sid), username or account_sid, password, {"Twiml": twiml})


def parse_response(status_code: int, body: bytes) -> RestResult:
    """Twilio answers 200 with the call resource, or an error object {code, message, status}."""
    try:
        data = json.loads(body.decode("utf-8")) if body else {}
    except (UnicodeDecodeError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    if 200 <= status_code < 300:
        status = data.get("status")
        return RestResult(True, False, status if isinstance(status, str) else None, None)
    message = data.get("message")
    error = message if isinstance(message, str) else f"HTTP {status_code}"
    return RestResult(False, status_code >= 500 or status_code == 429, None, error)
