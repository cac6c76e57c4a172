"""Single-use session tokens that tie a stream's start back to the webhook that announced it, kept in the memory
of the gateway that issued them (``stream_tokens = local``; docs/explanation/protocols.md#a4).

The WebSocket upgrade of a media stream carries no body, so what signs it alone could be replayed: the answer
document hands the carrier a token that the stream's start must bring back, once, before its TTL. Signed
tokens any node of a fleet verifies are voicecore/stream_tokens.py's; the gateway's shell picks one kind
(workers/gateway/tokens.py).

Must not know: clocks, randomness. ``now_ms`` comes from the shell's monotonic clock and the token text from
its ``secrets``; our own misuse raises ``ValueError``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from voicecore.timing import TOKEN_TTL_MS

__all__ = [
    "REDEEM_EXPIRED",
    "REDEEM_REUSED",
    "REDEEM_UNKNOWN",
    "RedeemResult",
    "SessionTokens",
    "TokenStatistics",
]

REDEEM_UNKNOWN = "unknown"  # never issued, or already swept or evicted
REDEEM_EXPIRED = "expired"  # issued, never redeemed, older than the TTL
REDEEM_REUSED = "reused"  # redeemed once already: a replayed stream


@dataclass(frozen=True, slots=True)
class RedeemResult:
    """``ok`` with the ``call_sid`` the token was issued for, or not ``ok`` with one ``REDEEM_*`` reason.
    The shell must also check ``call_sid`` against ``start.callSid``."""

    ok: bool
    call_sid: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class TokenStatistics:
    live: int
    issued: int
    redeemed: int
    refused: int
    expired: int  # swept after their TTL
    evicted: int  # pushed out early because the table was full


@dataclass(slots=True)
class _TokenEntry:
    call_sid: str
    expires_at_ms: int
    redeemed: bool = False


class SessionTokens:
    """Single-use session tokens, each valid ``ttl_ms`` after issue (``timing.TOKEN_TTL_MS``).

    ``now_ms`` must come from a monotonic clock (non-decreasing). The TTL is the same for all, so issue
    order is expiry order: the table is an ordered dict swept from the front, and when it is full the
    oldest token is evicted first. A redeemed token stays until its TTL so a replay reads "reused".
    """

    def __init__(self, ttl_ms: int = TOKEN_TTL_MS, max_entries: int = 10_000) -> None:
        if ttl_ms <= 0 or max_entries <= 0:
            raise ValueError("ttl_ms and max_entries must be positive")
        self.ttl_ms = ttl_ms
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _TokenEntry] = OrderedDict()
        self._last_now_ms: int | None = None
        self._issued = 0
        self._redeemed = 0
        self._refused = 0
        self._expired = 0
        self._evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def issue(self, token: str, call_sid: str, now_ms: int) -> None:
        if not isinstance(token, str) or not token:
            raise ValueError("token must be a non-empty str")
        self._advance(now_ms)
        self.expire(now_ms)
        if token in self._entries:
            raise ValueError("token already issued")  # the shell's generator collided or repeated
        while len(self._entries) >= self.max_entries:
            self._entries.popitem(last=False)
            self._evicted += 1
        self._entries[token] = _TokenEntry(call_sid=call_sid, expires_at_ms=now_ms + self.ttl_ms)
        self._issued += 1

    def redeem(self, token: str, now_ms: int) -> RedeemResult:
        self._advance(now_ms)
        entry = self._entries.get(token)
        if entry is None:
            return self._refuse(REDEEM_UNKNOWN)
        if entry.redeemed:
            return self._refuse(REDEEM_REUSED)
        if now_ms >= entry.expires_at_ms:
            return self._refuse(REDEEM_EXPIRED)
        entry.redeemed = True
        self._redeemed += 1
        return RedeemResult(ok=True, call_sid=entry.call_sid)

    def expire(self, now_ms: int) -> int:
        """Forget every token whose TTL has passed; returns how many went."""
        self._advance(now_ms)
        swept = 0
        while self._entries:
            token, entry = next(iter(self._entries.items()))
            if entry.expires_at_ms > now_ms:
                break
            del self._entries[token]
            swept += 1
        self._expired += swept
        return swept

    def statistics(self) -> TokenStatistics:
        return TokenStatistics(
            live=len(self._entries),
            issued=self._issued,
            redeemed=self._redeemed,
            refused=self._refused,
            expired=self._expired,
            evicted=self._evicted,
        )

    def _refuse(self, reason: str) -> RedeemResult:
        self._refused += 1
        return RedeemResult(ok=False, reason=reason)

    def _advance(self, now_ms: int) -> None:
        # The front-of-queue sweep is only right if time never goes back; a wall clock would break it.
        if self._last_now_ms is not None and now_ms < self._last_now_ms:
            raise ValueError("now_ms went backwards: pass a monotonic clock")
        self._last_now_ms = now_ms
