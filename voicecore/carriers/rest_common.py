"""What the carriers' call-control REST modules share: the request and result shapes (so the model worker
sends any carrier's the same way), reading a JSON answer, the retry rule and the check of a transfer target.

Must not know: sockets, the clock, any one carrier's URLs or field names (each carrier package's ``rest.py``
owns those).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re

__all__ = ["PlacedCall", "RestRequest", "RestResult", "basic_auth", "check_target", "is_sip", "json_object", "result"]

# A transfer target: a phone number (E.164, the "+" optional: ITU-T E.164 allows at most 15 digits) or a SIP
# URI (RFC 3261 section 19.1; no spaces, quotes or angle brackets, so it cannot break out of a JSON string or
# an XML element). Anything else is the agent's misconfiguration, refused before a request is built.
@dataclasses.dataclass(frozen=True, slots=True)
class RestRequest:
    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class RestResult:
    ok: bool
    retryable: bool  # 5xx / 429: try again later; 4xx: our request is wrong (or the call already ended)
    status: str | None  # the call's status in the answer (e.g. "completed")
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class PlacedCall:
    """A carrier's answer to placing a call (each carrier's ``outbound.parse_place_call_response``)."""

    ok: bool
    retryable: bool  # as RestResult's
    call_sid: str  # the call's id in the answer (Twilio's sid, Plivo's request_uuid, Telnyx's call_control_id, Vonage's uuid)
    status: str
    error: str | None


_PHONE = re.compile(r"^\+?[0-9]{2,15}$")
_SIP = re.compile(r"^sips?:[^\s<>\"'&]{1,250}$")


def check_target(target: str) -> str:
    """``target`` if it is a phone number or a SIP URI; ValueError otherwise."""
    if not isinstance(target, str) or not (_PHONE.match(target) or _SIP.match(target)):
        raise ValueError("transfer target must be a phone number (E.164) or a sip: URI")
    return target


def is_sip(target: str) -> bool:
    return target.startswith(("sip:", "sips:"))


def basic_auth(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def json_object(body: bytes) -> dict:
    """The answer's JSON object, or {} (an empty body, HTML from a proxy, a JSON array...)."""
    try:
        data = json.loads(body.decode("utf-8")) if body else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def result(status_code: int, error: str | None, status: str | None = None) -> RestResult:
    """The carriers' common rule: 2xx done; 429 and 5xx worth another try later; any
    other 4xx our request is wrong, or the call already ended, and asking again changes nothing."""
    if 200 <= status_code < 300:
        return RestResult(True, False, status, None)
    return RestResult(False, status_code >= 500 or status_code == 429, None, error or f"HTTP {status_code}")
