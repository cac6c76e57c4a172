"""Vertex AI access tokens for Gemini Live: an OAuth 2.0 access token from Application Default Credentials,
kept fresh before it expires, obtained off the event loop.

Owns when a token is refreshed (``TokenSchedule``: pure, fed a monotonic clock) and the shell that refreshes
it (``VertexTokens``): google-auth's blocking ``credentials.refresh`` runs in a thread of its own, never on
the model worker's loop (it carries every call's 20 ms audio). A token lives about an hour; it is refreshed
``REFRESH_BEFORE_EXPIRY_S`` before it expires, so a call that connects or reconnects finds one ready; one
that finds none (the first call, or every refresh failed) waits for one refresh, and a refresh that fails
is a ``TokenError`` with google-auth's words, which the caller turns into a log line naming the call and a
failed connection (the call's failure policy, as for any other).

google-auth is the optional ``vertex`` extra: imported on first use, and its absence is a ``TokenError``
that names the extra.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("voicecore.gemini.vertex")

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
REFRESH_BEFORE_EXPIRY_S = 300.0  # a fresh token well before the old one ends (google-auth: 225 s early at most)
USABLE_UNTIL_BEFORE_EXPIRY_S = 30.0  # a token this close to its end is not handed to a new connection
RETRY_AFTER_FAILURE_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # background retries after a failed refresh
MISSING_EXTRA = ("Vertex AI credentials need google-auth, the 'vertex' extra: pip install 'voicecore[vertex]'")


class TokenError(Exception):
    """No access token: google-auth's reason (no credentials found, the token endpoint refused, unreachable)."""


@dataclass(slots=True)
class TokenSchedule:
    """The current token and when the next refresh is due, on a monotonic clock in seconds."""

    token: str = ""
    expires_at_s: float = 0.0
    failures: int = 0
    retry_at_s: float = 0.0
    last_error: str = ""

    def usable(self, now_s: float) -> bool:
        return bool(self.token) and now_s < self.expires_at_s - USABLE_UNTIL_BEFORE_EXPIRY_S

    def refresh_due_at_s(self) -> float:
        """When the background refresh runs next: at once without a token, after a pause after a failure,
        else REFRESH_BEFORE_EXPIRY_S before the token ends."""
        if self.failures:
            return self.retry_at_s
        if not self.token:
            return 0.0
        return self.expires_at_s - REFRESH_BEFORE_EXPIRY_S

    def refreshed(self, token: str, lifetime_s: float, now_s: float) -> None:
        self.token = token
        self.expires_at_s = now_s + max(0.0, lifetime_s)
        self.failures = 0
        self.retry_at_s = 0.0
        self.last_error = ""

    def failed(self, error: str, now_s: float) -> float:
        """A refresh failed: the pause before the next try (the current token, if still good, is kept)."""
        pause = RETRY_AFTER_FAILURE_S[min(self.failures, len(RETRY_AFTER_FAILURE_S) - 1)]
        self.failures += 1
        self.retry_at_s = now_s + pause
        self.last_error = error
        return pause


def seconds_until(expiry: datetime.datetime | None, now_utc: datetime.datetime) -> float:
    """google-auth's ``credentials.expiry`` (naive UTC; aware in some versions) as seconds from ``now_utc``."""
    if expiry is None:
        return 3600.0  # credentials that do not say: Google's tokens live an hour
    if expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=datetime.timezone.utc)
    return (expiry - now_utc).total_seconds()


def load_credentials() -> Any:
    """Application Default Credentials with the cloud-platform scope (GOOGLE_APPLICATION_CREDENTIALS: a
    service account's JSON key; else gcloud's ADC file, else the metadata server). Blocking."""
    try:
        import google.auth
        import google.auth.exceptions
    except ImportError:
        raise TokenError(MISSING_EXTRA) from None
    try:
        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except google.auth.exceptions.GoogleAuthError as exc:
        raise TokenError(f"no Application Default Credentials: {exc}") from None
    return credentials


def refresh_blocking(credentials: Any) -> tuple[str, float]:
    """One refresh (an HTTPS POST to the credentials' token endpoint): the token and its lifetime in seconds."""
    try:
        import google.auth.exceptions
        import google.auth.transport.requests
    except ImportError:
        raise TokenError(MISSING_EXTRA) from None
    try:
        credentials.refresh(google.auth.transport.requests.Request())
    except google.auth.exceptions.GoogleAuthError as exc:
        raise TokenError(f"the token endpoint refused or could not be reached: {exc}") from None
    if not credentials.token:
        raise TokenError("the token endpoint answered without an access token")
    return credentials.token, seconds_until(credentials.expiry, datetime.datetime.now(datetime.timezone.utc))


class VertexTokens:
    """The node's Vertex AI access token: ``token()`` for a connection about to be opened, ``keep_fresh()``
    as a background task, ``current()`` for a synchronous caller (what is usable now, else "")."""

    def __init__(self, load: Callable[[], Any] = load_credentials,
                 refresh: Callable[[Any], tuple[str, float]] = refresh_blocking,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self._refresh_blocking = refresh
        self._clock = clock
        self._credentials: Any = None
        self.schedule = TokenSchedule()
        self.quota_project = ""
        self._in_flight: asyncio.Future | None = None
        # one thread: refreshes never run two at once, and never on the event loop
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="vertex-token")

    def current(self) -> str:
        return self.schedule.token if self.schedule.usable(self._clock()) else ""

    def _fetch(self) -> tuple[str, float]:
        if self._credentials is None:
            self._credentials = self._load()
            self.quota_project = getattr(self._credentials, "quota_project_id", None) or ""
        return self._refresh_blocking(self._credentials)

    async def refresh(self) -> str:
        """One refresh in the token thread, shared by every caller that asks while it runs. Raises TokenError."""
        if self._in_flight is None or self._in_flight.done():
            self._in_flight = asyncio.ensure_future(self._refresh_once())
        return await asyncio.shield(self._in_flight)

    async def _refresh_once(self) -> str:
        loop = asyncio.get_running_loop()
        try:
            token, lifetime_s = await loop.run_in_executor(self._thread, self._fetch)
        except TokenError as exc:
            self.schedule.failed(str(exc), self._clock())
            raise
        except Exception as exc:  # noqa: BLE001 - a library's surprise is still a failed refresh, said as such
            self.schedule.failed(f"{type(exc).__name__}: {exc}", self._clock())
            raise TokenError(f"{type(exc).__name__}: {exc}") from None
        self.schedule.refreshed(token, lifetime_s, self._clock())
        return token

    async def token(self) -> str:
        """A token usable for a new connection: the current one, else one refresh's. Raises TokenError."""
        current = self.current()
        return current if current else await self.refresh()

    async def keep_fresh(self, stop: asyncio.Event | None = None) -> None:
        """Refresh ahead of expiry until ``stop``; a failure is logged once per try and retried after a pause."""
        while stop is None or not stop.is_set():
            delay = max(0.0, self.schedule.refresh_due_at_s() - self._clock())
            if delay > 0:
                try:
                    if stop is None:
                        await asyncio.sleep(delay)
                    else:
                        await asyncio.wait_for(stop.wait(), delay)
                        return
                except TimeoutError:
                    pass
                continue
            try:
                await self.refresh()
            except TokenError as exc:
                pause = self.schedule.retry_at_s - self._clock()
                log.error("Vertex AI access token refresh failed (%s); retrying in %.0f s%s", exc, max(0.0, pause),
                          "" if self.current() else ": calls that connect now get their failure policy",
                          extra={"problem": "vendor"})

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
