"""Who may use the console: API keys (kept hashed in the call store) and browser sessions (no I/O: the
clock and the key check are passed in; session tokens come from ``secrets``).

Owns reading a request's credentials and the session table. A program sends its key in a header
(``Authorization: Bearer KEY`` or ``X-Voicecore-Key: KEY``) with every request, the ``/observe``
WebSocket included. A browser cannot put a header on a WebSocket, and a key in a URL ends up in
histories and logs, so the console's login page POSTs the key once, in the header, to ``/api/session``,
which answers a random session token in an ``HttpOnly; SameSite=Strict; Path=/`` cookie (``Secure``, and
named with the ``__Host-`` prefix, when the console is reached over TLS). A session lasts ``SESSION_TTL_S``
and is checked against the store again every ``RECHECK_S`` (a revoked key ends its sessions within that).

Cookies do not isolate by port: every server on the same host name gets them. The cookie's name carries the
console's port, so two consoles (or another app using the same name) on one host do not overwrite or read
each other's session as their own; keeping other apps from seeing it takes a host name of the console's own.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Mapping

COOKIE = "voicecore_session"
SESSION_TTL_S = 12 * 3600
RECHECK_S = 60.0
MAX_SESSIONS = 10_000


def cookie_name(port: int, secure: bool) -> str:
    """The session cookie of the console on ``port``; ``__Host-`` (Secure, Path=/, no Domain: the browser
    refuses it from a sub-domain or over plain HTTP) when the console is reached over TLS."""
    return f"{'__Host-' if secure else ''}{COOKIE}_{port}"


def cookie_is_secure(setting: str, public_url: str) -> bool:
    """``console_cookie_secure``: "always", or "auto": the console is reached over TLS (console_public_url is
    https). A Secure cookie is never sent over plain HTTP, so a console reached at http:// with "always" has
    no session: that is the setting's point behind a TLS proxy."""
    return setting == "always" or public_url.lower().startswith("https://")


def set_cookie(name: str, token: str, max_age_s: int, secure: bool) -> str:
    """A Set-Cookie value: the session token, or "" with max_age_s 0 to end it."""
    return f"{name}={token}; Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")


def key_from_headers(headers: Mapping[str, str]) -> str:
    """The API key a request carries in a header ("" for none). ``headers``: lower-case names."""
    authorization = headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-voicecore-key", "").strip()


def cookie_value(cookie_header: str, name: str = COOKIE) -> str:
    for part in cookie_header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value.strip()
    return ""


@dataclasses.dataclass(slots=True)
class Session:
    key: str
    name: str
    expires_s: float
    checked_s: float


class Sessions:
    """Browser sessions; ``check_key(key) -> name | None`` asks the store."""

    def __init__(self, check_key: Callable[[str], str | None]) -> None:
        self.check_key = check_key
        self.sessions: dict[str, Session] = {}

    def open(self, key: str, now_s: float) -> tuple[str, str] | None:
        """A new session for a valid key: (token, key name); None for a key the store does not know."""
        name = self.check_key(key)
        if name is None:
            return None
        self._expire(now_s)
        if len(self.sessions) >= MAX_SESSIONS:
            oldest = min(self.sessions, key=lambda t: self.sessions[t].expires_s)
            del self.sessions[oldest]
        token = secrets.token_urlsafe(32)
        self.sessions[token] = Session(key, name, now_s + SESSION_TTL_S, now_s)
        return token, name

    def who(self, token: str, now_s: float) -> str | None:
        """The key name behind a live session token; None when unknown, expired or its key revoked."""
        session = self.sessions.get(token) if token else None
        if session is None:
            return None
        if now_s >= session.expires_s:
            del self.sessions[token]
            return None
        if now_s - session.checked_s >= RECHECK_S:
            if self.check_key(session.key) is None:
                del self.sessions[token]
                return None
            session.checked_s = now_s
        return session.name

    def close(self, token: str) -> None:
        self.sessions.pop(token, None)

    def _expire(self, now_s: float) -> None:
        for token in [t for t, s in self.sessions.items() if now_s >= s.expires_s]:
            del self.sessions[token]

