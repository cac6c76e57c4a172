"""The gateway's stream tokens: issuing the voice webhook's session token and checking a stream's ``start``.

Owns which kind of token this node issues and accepts (``stream_tokens``), the clock and randomness the
sans-I/O cores are given, and the fleet-wide single-use check through the shared store. The decisions are
elsewhere: ``voicecore/carriers/session_tokens.py`` ``SessionTokens`` (``local``: a random token only this gateway
knows, kept in its memory) and ``voicecore/stream_tokens.py`` (``signed``: a token any node of the fleet
verifies; its per-node redeemed cache; what the store's answer means, ``SharedCheck``).

The shared check runs only with signed tokens and a PostgreSQL ``database_url`` (a SQLite store is this
node's alone: the per-node cache already covers it). Its queries run on one thread of their own with their
own connection, never on the event loop; a start waits for the answer at most ``token_store_timeout_ms``,
and a store that fails or is slow is passed over for a few seconds (fail open, counted and logged). The
connection is opened, and the schema migrated, when the gateway starts, so the first call does not pay for it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from voicecore import stream_tokens as st
from voicecore.config import Config
from voicecore.store import CallStore, database_url_for
from voicecore.store.db import POSTGRES_PREFIXES
from voicecore.carriers.session_tokens import SessionTokens
from voicecore.store.on_thread import StoreOnItsThread

log = logging.getLogger("voicecore.gateway")

PURGE_EVERY_S = 60.0  # claimed tokens are deleted from the store this often, a minute after they expired
STATEMENT_TIMEOUT_MS = 2000  # a claim stuck longer than this is cancelled by PostgreSQL itself
CONNECT_TIMEOUT_S = 2  # opening the connection (libpq's connect_timeout, unless the URL sets one)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class TokenLedger(StoreOnItsThread):
    """The shared store's side: claims on one thread, with one connection (opened at once, reopened after a
    failure on the next claim)."""

    def __init__(self, url: str, node: str) -> None:
        # libpq waits for an unreachable server as long as TCP does (minutes) unless told otherwise
        super().__init__(url if "connect_timeout" in url
                         else url + ("&" if "?" in url else "?") + f"connect_timeout={CONNECT_TIMEOUT_S}", "gateway-tokens")
        self.node = node
        self.next_purge_s = 0.0
        self.opening = self.thread.submit(self._open)

    def _connect(self) -> CallStore:
        store = CallStore.open(self.url)
        if store.dialect == "postgresql":
            store.backend.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
        return store

    def _claim(self, check: st.TokenCheck) -> str:
        try:
            store = self._open()
            first = store.claim_stream_token(check.nonce or "", check.call_sid or "", check.issuer or "", self.node,
                                             check.expires_at_ms / 1000)
            now = time.time()
            if now >= self.next_purge_s:
                self.next_purge_s = now + PURGE_EVERY_S
                store.purge_stream_tokens(now - 60)
        except Exception as exc:  # noqa: BLE001 (driver errors vary; the caller fails open)
            self._use_failed(log, "token store", "stream token store failed (%s: %s)", type(exc).__name__, exc)
            return st.SHARED_ERROR
        self._use_worked(log, "stream tokens")
        return st.SHARED_INSERTED if first else st.SHARED_DUPLICATE

    def _reattach_facts(self, check: st.TokenCheck, call_sid: str) -> tuple[str, bool]:
        """A re-attach token's fleet-wide claim (as a stream token's) and whether the call's stream ended
        normally on any node; the claim's SHARED_ERROR (ended then reads False) when the store failed."""
        claimed = self._claim(check)
        if claimed == st.SHARED_ERROR or self.store is None:
            return st.SHARED_ERROR, False
        try:
            return claimed, self.store.stream_ended_normally(call_sid)
        except Exception as exc:  # noqa: BLE001
            self._use_failed(log, "token store", "stream token store failed (%s: %s)", type(exc).__name__, exc)
            return st.SHARED_ERROR, False

    def _mark_ended(self, call_sid: str, expires_at_s: float) -> None:
        try:
            store = self._open()
            store.mark_stream_ended(call_sid, self.node, expires_at_s)
            store.purge_stream_endings(time.time() - 60)
            store.drop_call_state(call_sid)  # nothing will re-attach it: its state is of no use to any node
            store.purge_call_states(time.time())  # states of calls whose node died with them
        except Exception as exc:  # noqa: BLE001
            self._use_failed(log, "token store", "call %s: its normal end not written to the store for the fleet's "
                             "re-attach step (%s: %s)", call_sid, type(exc).__name__, exc)
            return
        self._use_worked(log, "stream tokens")

    async def claim(self, check: st.TokenCheck, timeout_s: float) -> str:
        try:
            future = asyncio.wrap_future(self.thread.submit(self._claim, check))
        except RuntimeError:  # the gateway is stopping: its thread is shut down
            return st.SHARED_ERROR
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return st.SHARED_TIMEOUT

    async def reattach_facts(self, check: st.TokenCheck, call_sid: str, timeout_s: float) -> tuple[str, bool]:
        """The fleet's word on a re-attach request: (the token's claim outcome, the call's stream ended normally
        somewhere); (SHARED_TIMEOUT, False) when the store does not answer in time."""
        try:
            future = asyncio.wrap_future(self.thread.submit(self._reattach_facts, check, call_sid))
        except RuntimeError:
            return st.SHARED_ERROR, False
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return st.SHARED_TIMEOUT, False

    def mark_ended(self, call_sid: str, expires_at_s: float) -> None:
        """Write, on the ledger's thread (the caller does not wait), that the call's stream ended normally."""
        try:
            self.thread.submit(self._mark_ended, call_sid, expires_at_s)
        except RuntimeError:  # the gateway is stopping
            pass

    def close(self) -> None:
        self.thread.submit(self._drop)
        self.thread.shutdown(wait=False, cancel_futures=True)


class TokenService:
    """Issue a session token for a voice webhook; check the token a stream's ``start`` brings back."""

    def __init__(self, config: Config) -> None:
        self.mode = config.stream_tokens
        self.node = config.node
        self.local = SessionTokens()
        self.signed: st.SignedTokens | None = None
        self.ledger: TokenLedger | None = None
        self.shared = st.SharedCheck()
        self.timeout_s = config.token_store_timeout_ms / 1000
        self.refused_by_store = 0
        if self.mode == "signed":
            self.signed = st.SignedTokens(st.derive_secret(config.token_secret, config.twilio_auth_token), self.node)
            url = database_url_for(config)
            if url.startswith(POSTGRES_PREFIXES):
                self.ledger = TokenLedger(url, self.node)

    def issue(self, call_sid: str) -> str:
        if self.signed is not None:
            return self.signed.issue(call_sid, wall_ms(), secrets.token_bytes(st.NONCE_BYTES))
        token = secrets.token_urlsafe(24)
        self.local.issue(token, call_sid, monotonic_ms())
        return token

    def redeem(self, token: str) -> st.TokenCheck:
        """This node's verdict (the token is marked used here when ok); ``needs_shared_check`` says whether
        the fleet's store must confirm it before the call starts."""
        if self.signed is not None:
            return self.signed.check(token, wall_ms())
        result = self.local.redeem(token, monotonic_ms())
        return st.TokenCheck(result.ok, result.reason, result.call_sid, self.node if result.ok else None)

    def needs_shared_check(self, check: st.TokenCheck) -> bool:
        return check.ok and self.ledger is not None and self.shared.should_ask(monotonic_ms())

    async def confirm(self, check: st.TokenCheck) -> st.SharedVerdict:
        """The fleet's answer: first use (accept), a replay (refuse, ``reused``), or no answer in time or an
        error (accept: fail open)."""
        assert self.ledger is not None
        outcome = await self.ledger.claim(check, self.timeout_s)
        verdict = self.shared.outcome(outcome, monotonic_ms())
        if not verdict.accept:
            self.refused_by_store += 1
        return verdict

    def metrics(self) -> dict[str, int]:
        """Counters for /metrics (the gateway's section)."""
        values = {"stream_tokens_signed": int(self.signed is not None)}
        if self.signed is not None:
            values.update(tokens_issued=self.signed.issued, tokens_redeemed=self.signed.redeemed,
                          tokens_redeemed_from_other_nodes=self.signed.redeemed_foreign,
                          tokens_redeemed_cache=len(self.signed))
            refused = dict(self.signed.refused)
        else:
            stats = self.local.statistics()
            values.update(tokens_issued=stats.issued, tokens_redeemed=stats.redeemed,
                          tokens_redeemed_from_other_nodes=0, tokens_redeemed_cache=stats.live)
            refused = {"all": stats.refused}
        values["tokens_refused"] = sum(refused.values()) + self.refused_by_store
        values["tokens_refused_reused_in_fleet"] = self.refused_by_store
        values.update({f"token_store_{name}": n for name, n in self.shared.counts.items()})
        return values

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
