"""Signed stream tokens: a session token any node of a fleet can verify, still usable once
(docs/how-to/fleet.md#stream-tokens).

The voice webhook's answer hands the carrier a token that the media stream's ``start`` must bring back
(``<Parameter name="session_token">`` for Twilio). ``voicecore/carriers/session_tokens.py``'s ``SessionTokens`` keeps
each token in the memory of the gateway that issued it, so behind a load balancer a stream that lands on
another node is refused. A signed token carries what a node needs to check it: the CallSid it was issued
for, the issuing node, its expiry (wall clock, ``TOKEN_TTL_MS`` after issue) and a random nonce, with an
HMAC-SHA256 over them under a secret the fleet shares (``token_secret``; by default derived from the Twilio
auth token, which every node of a fleet must share anyway to check webhook signatures).

Single use:
- per node: a redeemed token's nonce is kept until its expiry (:class:`SignedTokens`' redeemed cache), so a
  replay on the same node reads "reused";
- across nodes, when the fleet shares a PostgreSQL store: the shell INSERTs the nonce into
  ``stream_tokens`` (primary key) after this module's check, a second INSERT of it finds the row; that
  step is the shell's, its outcome is judged here by :class:`SharedCheck` (bounded wait; a store that
  fails or is slow is skipped for a while and the start is accepted on the local check alone: fail open).

The token text is URL-safe base64 without padding (``[A-Za-z0-9_-]``, like ``secrets.token_urlsafe``), so it
fits wherever the old tokens went (a TwiML ``<Parameter>``, Plivo's extraHeaders, a URL). Layout before
encoding: version (1 byte, 1), expiry (8 bytes, unix ms, big-endian), nonce (16 bytes), node id (1 length
byte + UTF-8), CallSid (1 length byte + ASCII), then the first 16 bytes of HMAC-SHA256(secret, all of the
above). 128 bits of MAC: a forger must guess it, with no oracle faster than one stream per attempt.

Must not know: sockets, clocks, randomness, databases. Times and nonces come in as arguments.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import heapq
import hmac
import struct

from voicecore.timing import TOKEN_TTL_MS

__all__ = [
    "MAX_CLOCK_SKEW_MS",
    "NONCE_BYTES",
    "REDEEM_BUSY",
    "REDEEM_EXPIRED",
    "REDEEM_FORGED",
    "REDEEM_MALFORMED",
    "REDEEM_REUSED",
    "SHARED_DUPLICATE",
    "SHARED_ERROR",
    "SHARED_INSERTED",
    "SHARED_TIMEOUT",
    "SharedCheck",
    "SharedVerdict",
    "SignedTokens",
    "TokenCheck",
    "derive_secret",
]

VERSION = 1
NONCE_BYTES = 16
MAC_BYTES = 16
MAX_NODE_BYTES = 64
MAX_CALL_SID_BYTES = 64
MAX_CLOCK_SKEW_MS = 5_000  # a token whose expiry lies further ahead than ttl + this was not made by a fleet node's clock
_HEAD = struct.Struct(">BQ")  # version, expiry (unix ms)
_MIN_BYTES = _HEAD.size + NONCE_BYTES + 1 + 1 + 1 + MAC_BYTES
_MAX_TEXT = 4 * (_HEAD.size + NONCE_BYTES + 2 + MAX_NODE_BYTES + MAX_CALL_SID_BYTES + MAC_BYTES) // 3 + 4

REDEEM_MALFORMED = "unknown"  # not a signed token at all (the same word SessionTokens uses for a token it never issued)
REDEEM_FORGED = "forged"  # the MAC does not match: another secret, or altered
REDEEM_EXPIRED = "expired"
REDEEM_REUSED = "reused"
REDEEM_BUSY = "busy"  # the redeemed cache is full (never with real traffic: see SignedTokens)

_DERIVATION_LABEL = b"voicecore stream token v1"


def derive_secret(token_secret: str, twilio_auth_token: str) -> bytes:
    """The MAC key: ``token_secret`` when set, else one derived from the Twilio auth token (so a single node,
    or a fleet that shares its Twilio account, needs no extra setting). Derived rather than the auth token
    itself, so a token's MAC and a webhook's signature never share a key."""
    if token_secret:
        return hashlib.sha256(b"voicecore token_secret\x00" + token_secret.encode("utf-8")).digest()
    if not twilio_auth_token:
        raise ValueError("a stream token secret needs token_secret or twilio_auth_token")
    return hmac.new(twilio_auth_token.encode("utf-8"), _DERIVATION_LABEL, hashlib.sha256).digest()


@dataclasses.dataclass(frozen=True, slots=True)
class TokenCheck:
    """A signed token's verdict on this node: ``ok`` with what it says, or not ``ok`` with one reason. An
    ``ok`` token is already marked redeemed here; the shell still compares ``call_sid`` with the start's and,
    with a shared store, claims ``nonce`` there (:class:`SharedCheck`)."""

    ok: bool
    reason: str | None = None
    call_sid: str | None = None
    issuer: str | None = None
    nonce: str | None = None  # hex
    expires_at_ms: int = 0  # unix ms


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    if not text or len(text) > _MAX_TEXT or len(text) % 4 == 1:
        return None
    try:
        raw = text.encode("ascii")
        if not raw.replace(b"-", b"").replace(b"_", b"").isalnum():
            return None
        return base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None


class SignedTokens:
    """Issue and check signed stream tokens on one node.

    ``issue`` needs this node's id and a fresh random nonce from the shell; ``check`` verifies the MAC (in
    constant time), the expiry against ``now_ms`` (unix ms: the fleet's clocks, NTP-close; a token expiring
    more than ``ttl_ms + max_skew_ms`` ahead is refused as forged), and that this node has not redeemed the
    nonce before, then marks it redeemed until its expiry.

    The redeemed cache holds only tokens whose MAC was valid, that is, tokens a fleet node really issued and
    someone presented here within their minute: it cannot be filled by forgeries. ``max_redeemed`` bounds it
    all the same; when full, ``check`` refuses (``busy``) rather than forget a nonce early, which would let
    its replay through.
    """

    def __init__(self, secret: bytes, node_id: str, ttl_ms: int = TOKEN_TTL_MS,
                 max_skew_ms: int = MAX_CLOCK_SKEW_MS, max_redeemed: int = 200_000) -> None:
        if len(secret) < 16:
            raise ValueError("the token secret must be at least 16 bytes")
        node = node_id.encode("utf-8")
        if not node or len(node) > MAX_NODE_BYTES:
            raise ValueError(f"node_id must be 1..{MAX_NODE_BYTES} bytes of UTF-8")
        if ttl_ms <= 0 or max_skew_ms < 0 or max_redeemed <= 0:
            raise ValueError("ttl_ms and max_redeemed must be positive, max_skew_ms not negative")
        self._secret = secret
        self.node_id = node_id
        self._node = node
        self.ttl_ms = ttl_ms
        self.max_skew_ms = max_skew_ms
        self.max_redeemed = max_redeemed
        self._redeemed: dict[bytes, int] = {}  # nonce -> expiry (unix ms)
        self._expiries: list[tuple[int, bytes]] = []  # a heap over the same, soonest first
        self.issued = 0
        self.redeemed = 0
        self.redeemed_foreign = 0  # issued by another node
        self.refused: dict[str, int] = {}

    def issue(self, call_sid: str, now_ms: int, nonce: bytes) -> str:
        """A token for ``call_sid``, valid until ``now_ms + ttl_ms``. ``nonce``: NONCE_BYTES random bytes."""
        if len(nonce) != NONCE_BYTES:
            raise ValueError(f"nonce must be {NONCE_BYTES} bytes")
        sid = call_sid.encode("ascii")
        if not sid or len(sid) > MAX_CALL_SID_BYTES:
            raise ValueError(f"call_sid must be 1..{MAX_CALL_SID_BYTES} ASCII bytes")
        body = (_HEAD.pack(VERSION, now_ms + self.ttl_ms) + nonce + bytes([len(self._node)]) + self._node
                + bytes([len(sid)]) + sid)
        self.issued += 1
        return _b64(body + self._mac(body))

    def check(self, token: str, now_ms: int) -> TokenCheck:
        self.expire(now_ms)
        raw = _unb64(token) if isinstance(token, str) else None
        if raw is None or len(raw) < _MIN_BYTES or raw[0] != VERSION:
            return self._refuse(REDEEM_MALFORMED)
        body, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(body)):
            return self._refuse(REDEEM_FORGED)
        # the MAC holds: the layout is ours, but parse defensively all the same
        _version, expires_at_ms = _HEAD.unpack_from(body)
        at = _HEAD.size
        nonce = body[at:at + NONCE_BYTES]
        at += NONCE_BYTES
        node_len = body[at]
        node = body[at + 1:at + 1 + node_len]
        at += 1 + node_len
        if at >= len(body) or body[at] != len(body) - at - 1 or not node:
            return self._refuse(REDEEM_MALFORMED)
        try:
            issuer = node.decode("utf-8")
            call_sid = body[at + 1:].decode("ascii")
        except UnicodeDecodeError:
            return self._refuse(REDEEM_MALFORMED)
        if now_ms >= expires_at_ms:
            return self._refuse(REDEEM_EXPIRED)
        if expires_at_ms > now_ms + self.ttl_ms + self.max_skew_ms:
            return self._refuse(REDEEM_FORGED)  # signed with our secret, but no fleet clock made that expiry
        if nonce in self._redeemed:
            return self._refuse(REDEEM_REUSED)
        if len(self._redeemed) >= self.max_redeemed:
            return self._refuse(REDEEM_BUSY)
        self._redeemed[nonce] = expires_at_ms
        heapq.heappush(self._expiries, (expires_at_ms, nonce))
        self.redeemed += 1
        if issuer != self.node_id:
            self.redeemed_foreign += 1
        return TokenCheck(True, None, call_sid, issuer, nonce.hex(), expires_at_ms)

    def expire(self, now_ms: int) -> int:
        """Forget the redeemed nonces whose token has expired (a replay of one now reads "expired")."""
        swept = 0
        while self._expiries and self._expiries[0][0] <= now_ms:
            _, nonce = heapq.heappop(self._expiries)
            del self._redeemed[nonce]
            swept += 1
        return swept

    def __len__(self) -> int:
        return len(self._redeemed)

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._secret, body, hashlib.sha256).digest()[:MAC_BYTES]

    def _refuse(self, reason: str) -> TokenCheck:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        return TokenCheck(False, reason)


# --- the fleet-wide check through a shared store -------------------------------------------------------

SHARED_INSERTED = "inserted"  # the nonce was new to the fleet: the first use
SHARED_DUPLICATE = "duplicate"  # another start claimed it first (here or on another node): a replay
SHARED_ERROR = "error"  # the store failed
SHARED_TIMEOUT = "timeout"  # the store did not answer within the bound


@dataclasses.dataclass(frozen=True, slots=True)
class SharedVerdict:
    accept: bool
    reason: str | None  # why refused ("reused"), or why accepted without the store ("store unavailable")


class SharedCheck:
    """What a start does with the shared store's answer, and when to ask it at all.

    A phone call cannot be retried, and the store is a second line: the per-node cache already stops a
    replay on the node that saw the first use, and a replay elsewhere needs a token captured from the
    carrier's TLS connection within its minute. So a store that fails or does not answer within the bound
    is passed over (**fail open**: the start is accepted on the local check, counted and logged), and after
    a failure it is not asked again for ``skip_ms``, so a store that is down costs the starts meanwhile
    nothing, not the bound each. A duplicate is refused: that is the replay the store is there to catch.
    """

    def __init__(self, skip_ms: int = 5_000) -> None:
        self.skip_ms = skip_ms
        self.skip_until_ms = 0
        self.counts = {SHARED_INSERTED: 0, SHARED_DUPLICATE: 0, SHARED_ERROR: 0, SHARED_TIMEOUT: 0, "skipped": 0}

    def should_ask(self, now_ms: int) -> bool:
        """False while the store is being passed over after a failure (the start is accepted without it)."""
        if now_ms < self.skip_until_ms:
            self.counts["skipped"] += 1
            return False
        return True

    def outcome(self, outcome: str, now_ms: int) -> SharedVerdict:
        if outcome not in self.counts or outcome == "skipped":
            raise ValueError(f"unknown outcome {outcome!r}")
        self.counts[outcome] += 1
        if outcome == SHARED_INSERTED:
            return SharedVerdict(True, None)
        if outcome == SHARED_DUPLICATE:
            return SharedVerdict(False, REDEEM_REUSED)
        self.skip_until_ms = now_ms + self.skip_ms
        return SharedVerdict(True, f"store {outcome}: accepted on this node's check alone")
