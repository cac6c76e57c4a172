"""When a Vertex AI access token for Gemini Live is refreshed: pure, fed a monotonic clock in seconds.

A token lives about an hour; it is refreshed ``REFRESH_BEFORE_EXPIRY_S`` before it expires, so a call that
connects or reconnects finds one ready, and a token close to its end is not handed to a new connection. A
failed refresh is retried after a pause that grows to a minute, the old token kept while it is good. The
shell that fetches tokens (google-auth, in a thread of its own, never on the model worker's loop) is
``VertexTokens`` in voicecore/gemini/transport.py.
"""

from __future__ import annotations

from dataclasses import dataclass

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


