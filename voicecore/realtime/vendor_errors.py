"""What a realtime vendor's refusal means for the node: a configuration the vendor will never serve (fatal),
or a passing trouble that a retry outlives (transient). Sans-I/O: fed what came off the wire.

Owns the classification of the vendor's four ways of saying no: the HTTP status of a refused WebSocket
handshake (with its JSON body), an ``error`` server event, a ``response.done`` that failed with an error,
and a close frame's code and reason. Fatal: the key is refused, the model (or Azure deployment) does not
exist, the account has no quota, the session configuration is rejected, the API shape is retired (close
4000 ``beta_api_shape_disabled``). Every call would meet the same refusal, so the node stops trying: the
shell opens its breaker, reports the vendor's own message and answers new calls with the agent's failure
policy at once. Transient: rate limits, server errors, overload, an expired session, a dropped socket:
today's retry policy. Anything else (an error that answers one client event mid-call, a missing item) is
the call's business, not the node's: None.
"""

from __future__ import annotations

import dataclasses

import orjson

# Error codes that no retry outlives: the node's configuration (key, model, account) is refused.
AUTH_CODES = frozenset({"invalid_api_key", "invalid_authentication", "authentication_error", "unauthorized",
                        "permission_denied", "account_deactivated", "organization_deactivated",
                        "unsupported_country_region_territory"})
MODEL_CODES = frozenset({"model_not_found", "DeploymentNotFound", "deployment_not_found", "invalid_model"})
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})
RETIRED_CODES = frozenset({"beta_api_shape_disabled"})
FATAL_CODES = AUTH_CODES | MODEL_CODES | QUOTA_CODES | RETIRED_CODES
FATAL_TYPES = frozenset({"authentication_error", "permission_error", "insufficient_quota"})
# A vendor that cannot serve right now: asked again after a pause (voicecore/call/failures.py counts them).
TRANSIENT_CODES = frozenset({"rate_limit_exceeded", "server_error", "server_overloaded", "service_unavailable",
                             "session_expired"})
# Close codes of a vendor refusing the session itself: 4000 is OpenAI's for a retired API shape.
FATAL_CLOSE_CODES = frozenset({4000})
RETIRED_BETA_REASON = "beta_api_shape_disabled"

FATAL = "fatal"
TRANSIENT = "transient"


@dataclasses.dataclass(frozen=True, slots=True)
class VendorFault:
    """One refusal, classified. ``kind``: auth, model, quota, session_config, retired, http or close;
    ``code``: the vendor's code (or the HTTP status / close code as text); ``message``: its own words."""

    severity: str  # FATAL | TRANSIENT
    kind: str
    code: str
    message: str

    @property
    def fatal(self) -> bool:
        return self.severity == FATAL

    def describe(self) -> str:
        """One line for a log, /healthz and `voicecore up`: what kind, the vendor's code and its message."""
        return f"{self.kind}: {self.code}: {self.message}" if self.message else f"{self.kind}: {self.code}"


def _fatal_kind(code: str, error_type: str) -> str | None:
    if code in AUTH_CODES or error_type in ("authentication_error", "permission_error"):
        return "auth"
    if code in MODEL_CODES:
        return "model"
    if code in QUOTA_CODES or error_type == "insufficient_quota":
        return "quota"
    if code in RETIRED_CODES:
        return "retired"
    return None


def classify_error(error_type: str | None, code: str | None, message: str, param: str | None = None, *,
                   configuring: bool = False) -> VendorFault | None:
    """An ``error`` event's (or a failed response's) error object. ``configuring``: it came before the
    session acknowledged its first session.update, so it answers the handshake or that update (the vendor
    handles a socket's events in order). An ``invalid_request_error`` then, or later with a ``session.``
    param, is the session configuration refused."""
    error_type, code = error_type or "", code or ""
    kind = _fatal_kind(code, error_type)
    if kind is not None:
        return VendorFault(FATAL, kind, code or error_type, message)
    if code in TRANSIENT_CODES or error_type in TRANSIENT_CODES:
        return VendorFault(TRANSIENT, "vendor", code or error_type, message)
    if error_type == "invalid_request_error" and (configuring or (param or "").startswith("session.")):
        return VendorFault(FATAL, "session_config", code or error_type, message + (f" (param {param})" if param else ""))
    return None


def classify_handshake(status: int, body: bytes | None) -> VendorFault:
    """A WebSocket upgrade answered ``status`` (not 101), with its body (the vendor's JSON error, if any):
    401/403 the key, 404 the model, deployment or URL path, 400 the request; 429 and 5xx pass (unless the
    body names a fatal code, as a 429 for an exhausted quota does)."""
    error_type, code, message = _body_error(body)
    kind = _fatal_kind(code, error_type)
    if kind is not None:
        return VendorFault(FATAL, kind, code or error_type, message or f"HTTP {status}")
    if status in (401, 403):
        return VendorFault(FATAL, "auth", code or f"http_{status}", message or f"HTTP {status}: the key was refused")
    if status == 404:
        return VendorFault(FATAL, "model", code or "http_404",
                           message or "HTTP 404: no such model, deployment or path at this URL")
    if status in (400, 405, 410, 426):
        return VendorFault(FATAL, "http", code or f"http_{status}", message or f"HTTP {status}")
    return VendorFault(TRANSIENT, "http", code or f"http_{status}", message or f"HTTP {status}")


def classify_close(code: int | None, reason: str) -> VendorFault | None:
    """The vendor closed the socket: 4000 (a retired API shape) is fatal, and so is a close whose reason is
    a fatal error code; anything else is a drop the call reconnects after (None)."""
    if code in FATAL_CLOSE_CODES or reason.strip() in FATAL_CODES:
        word = reason.strip() or str(code)
        kind = _fatal_kind(word, "") or "retired"
        message = "the vendor closed the session" + (f" ({code} {word})" if reason else f" ({code})")
        if word == RETIRED_BETA_REASON:
            message = ("the vendor retired the beta Realtime interface (close 4000 beta_api_shape_disabled); "
                       "voicecore speaks the GA interface")
        return VendorFault(FATAL, kind, word, message)
    return None


def _body_error(body: bytes | None) -> tuple[str, str, str]:
    """(type, code, message) of an HTTP error body: OpenAI's and Azure's {"error": {...}}; ("", "", text)
    for a body that is not that."""
    if not body:
        return "", "", ""
    try:
        value = orjson.loads(body)
    except ValueError:
        return "", "", body[:300].decode("utf-8", errors="replace").strip()
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        return "", "", ""
    fields = [error.get(key) for key in ("type", "code", "message")]
    return tuple(str(v) if isinstance(v, (str, int)) and not isinstance(v, bool) else "" for v in fields)  # type: ignore[return-value]


def scan_server_text(text: str, *, configuring: bool) -> VendorFault | None:
    """A server event's text, as it came off the socket: the refusal it carries, if any (an ``error`` event
    or a failed ``response.done``). Cheap for everything else: the bulk of a call's events (audio deltas,
    transcripts) has no ``"error"`` key and is not parsed here."""
    if '"error"' not in text:
        return None
    try:
        event = orjson.loads(text)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    error: object = None
    if event.get("type") == "error":
        error = event.get("error")
    elif event.get("type") == "response.done":
        response = event.get("response")
        details = response.get("status_details") if isinstance(response, dict) else None
        if isinstance(details, dict) and details.get("type") == "failed":
            error = details.get("error")
            configuring = False  # a response's failure is never the session's configuration
    if not isinstance(error, dict):
        return None

    def text_of(key: str) -> str | None:
        value = error.get(key)  # type: ignore[union-attr]
        return value if isinstance(value, str) else None

    return classify_error(text_of("type"), text_of("code"), text_of("message") or "", text_of("param"),
                          configuring=configuring)
