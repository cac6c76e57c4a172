"""The gateway's re-attach step: its tokens, and what it must remember beyond its own life.

The decisions are voicecore/reattach.py's. What a decision needs from the past lives in the runtime
directory, so that the gateway answering a re-attach request (the one supervisord restarted, or a standby
that took over) knows what the dead one knew:

- ``reattach/used/<nonce>``: a re-attach token presented once (created with O_EXCL: the claim is atomic,
  whichever gateway makes it);
- ``reattach/ended/<CallSid>``: the call's stream ended normally (written when the gateway ends the stream;
  a gateway that is killed writes none, so its calls read as ended unexpectedly).

Both are empty files, swept once they are older than a re-attach token can be.

A fleet (nodes behind one public URL sharing a PostgreSQL ``database_url``) keeps both in the store as well,
so a re-attach request that reaches another node is decided as the serving node would: a token is claimed
fleet-wide in ``stream_tokens`` (beside the stream tokens' nonces), a normal end is written to
``stream_endings``. The store is asked on the stream tokens' thread and within their bound
(``token_store_timeout_ms``); a store that fails or is slow is passed over as for a stream token (fail
open: the node's own ledger decides).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import time
from pathlib import Path

from voicecore import reattach as core
from voicecore import stream_tokens as st
from voicecore.config import Config
from workers.gateway.tokens import TokenLedger, monotonic_ms

log = logging.getLogger("voicecore.gateway")

SWEEP_EVERY_S = 600.0
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class ReattachLedger:
    """The runtime directory's record of used re-attach tokens and of calls that ended normally."""

    def __init__(self, runtime_dir: Path, ttl_s: float = core.REATTACH_TTL_MS / 1000) -> None:
        self.used_dir = Path(runtime_dir) / core.LEDGER_DIR / "used"
        self.ended_dir = Path(runtime_dir) / core.LEDGER_DIR / "ended"
        self.ttl_s = ttl_s
        self.next_sweep_s = 0.0
        for directory in (self.used_dir, self.ended_dir):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def claim(self, nonce_hex: str) -> bool:
        """True the first time ``nonce_hex`` is claimed on this node (by any of its gateways)."""
        try:
            os.close(os.open(self.used_dir / nonce_hex, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        return True

    def mark_ended(self, call_sid: str) -> None:
        if not _SAFE_NAME.fullmatch(call_sid):
            return  # never a path out of the directory; such a call reads as ended unexpectedly
        try:
            (self.ended_dir / call_sid).touch(mode=0o600)
        except OSError as exc:
            log.warning("call %s: its normal end not recorded for the re-attach step: %s", call_sid, exc,
                        extra={"problem": "reattach"})

    def ended(self, call_sid: str) -> bool:
        return bool(_SAFE_NAME.fullmatch(call_sid)) and (self.ended_dir / call_sid).exists()

    def sweep(self, now_s: float) -> int:
        """Forget entries older than a token lives (at most every SWEEP_EVERY_S); returns how many went."""
        if now_s < self.next_sweep_s:
            return 0
        self.next_sweep_s = now_s + SWEEP_EVERY_S
        gone = 0
        for directory in (self.used_dir, self.ended_dir):
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        if entry.stat().st_mtime < now_s - self.ttl_s:
                            os.unlink(entry.path)
                            gone += 1
                    except OSError:
                        pass
        return gone


class ReattachService:
    """Issue the re-attach token of an answer document; answer a re-attach request (a Decision)."""

    def __init__(self, config: Config, runtime_dir: Path, fleet: TokenLedger | None = None,
                 shared: st.SharedCheck | None = None) -> None:
        self.tokens = core.ReattachTokens(st.derive_secret(config.token_secret, config.twilio_auth_token), config.node)
        self.ledger = ReattachLedger(runtime_dir)
        self.fleet = fleet  # the fleet's store (PostgreSQL), or None: this node's ledger alone
        self.shared = shared if shared is not None else st.SharedCheck()
        self.timeout_s = config.token_store_timeout_ms / 1000
        self.counts = {"reattach_requests": 0, "calls_reattached": 0, "reattach_hangups": 0, "reattach_refused": 0,
                       "reattach_refused_reused_in_fleet": 0, "reattach_ended_on_another_node": 0}

    def issue(self, call_sid: str) -> str:
        return self.tokens.issue(call_sid, time.time_ns() // 1_000_000, secrets.token_bytes(st.NONCE_BYTES))

    async def decide(self, token: str, call_sid: str, draining: bool, call_completed: bool) -> core.Decision:
        self.counts["reattach_requests"] += 1
        check = self.tokens.check(token, time.time_ns() // 1_000_000)
        first_use = check.ok and check.call_sid == call_sid and self.ledger.claim(check.nonce or "")
        ended = self.ledger.ended(call_sid)
        if first_use and self.fleet is not None and self.shared.should_ask(monotonic_ms()):
            outcome, ended_in_fleet = await self.fleet.reattach_facts(check, call_sid, self.timeout_s)
            verdict = self.shared.outcome(outcome, monotonic_ms())
            if not verdict.accept:
                first_use = False
                self.counts["reattach_refused_reused_in_fleet"] += 1
            elif verdict.reason:
                log.warning("call %s: re-attach decided without the fleet's store: %s", call_sid, verdict.reason,
                            extra={"problem": "token store"})
            if ended_in_fleet and not ended:
                ended = True
                self.counts["reattach_ended_on_another_node"] += 1
        decision = core.decide(check, call_sid, first_use, ended, draining, call_completed)
        key = {core.ATTACH: "calls_reattached", core.HANGUP: "reattach_hangups", core.REFUSE: "reattach_refused"}
        self.counts[key[decision.action]] += 1
        return decision

    def stream_ended(self, call_sid: str, reason: str) -> None:
        if core.ended_normally(reason):
            self.ledger.mark_ended(call_sid)
            if self.fleet is not None and _SAFE_NAME.fullmatch(call_sid):
                self.fleet.mark_ended(call_sid, time.time() + self.ledger.ttl_s)
        self.ledger.sweep(time.time())
