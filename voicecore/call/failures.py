"""What a call's driver knows of its model's failures, and what it makes of them (INV-NEVER-SILENT).

Owns one call's failure spell: since when the model socket is gone, how many responses the vendor failed
in a row, whether the caller already heard the hold line in this spell, when a failed request may be asked
again, when the vendor last said anything. ``verdict`` turns that into the next step: the shipped hold line
for a caller who waits on a failing or silent model, or giving up (the agent's failure policy) after
``after_failures`` failed responses in a row or ``after_ms`` without a model socket. Sans-I/O: fed a clock;
both drivers (the turn-taking controller and the spine) keep one.
"""

from __future__ import annotations

import dataclasses

MS = 1_000_000

# Error codes of a vendor that cannot serve right now (an `error` event's code:
# docs/explanation/protocols.md#c3): the request is asked again after a pause, and counts toward the failure
# policy (docs/explanation/failure-and-standby.md#the-vendor-fails).
VENDOR_FAILURE_CODES = frozenset({"rate_limit_exceeded", "server_error", "server_overloaded", "service_unavailable",
                                  "insufficient_quota"})

HOLD = "hold"
GAVE_UP_VENDOR = "vendor_failures"
GAVE_UP_UNREACHABLE = "model_unreachable"


@dataclasses.dataclass(frozen=True, slots=True)
class FailurePolicy:
    after_failures: int = 5  # responses the vendor failed in a row -> give up (asked at 0, 0.5, 1.5, 3.5, 5.5 s)
    after_ms: int = 10_000  # this long without a model socket -> give up
    vendor_retry_ms: int = 500  # a failed request is asked again after this, doubling per failure in a row ...
    vendor_retry_max_ms: int = 2000  # ... up to this: a rate limit lasts seconds, and the caller is waiting
    silent_ms: int = 1000  # a caller waits on the vendor and it has said nothing this long: the hold line
    # The caller still waits this long after the hold line was asked: it is said again. Once per spell left
    # a caller with up to after_ms of dead air after one short line (the chaos bench: 2.7 s under refused
    # handshakes); 0: once per spell (records made before this setting replay that way).
    hold_every_ms: int = 3000

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class FailureSpell:
    __slots__ = ("policy", "model_down_since_ns", "failed_in_row", "hold_line_at_ns", "not_before_ns", "last_event_ns")

    def __init__(self, policy: FailurePolicy) -> None:
        self.policy = policy
        self.model_down_since_ns = 0  # the model socket is gone since (0: connected)
        self.failed_in_row = 0  # responses the vendor failed since the last one that produced audio
        self.hold_line_at_ns = 0  # when the hold line was last asked in this spell (0: not yet)
        self.not_before_ns = 0  # a failed request is asked again from here
        self.last_event_ns = 0  # the vendor's last event (or the session's start)

    @property
    def failing(self) -> bool:
        return self.failed_in_row > 0 or self.model_down_since_ns > 0

    def event(self, now_ns: int) -> None:
        self.last_event_ns = now_ns

    def asked(self, now_ns: int) -> None:
        """A request went to the vendor: its silence counts from here, not from its last event (a prompt
        asked after the previous one played out found the vendor quiet for seconds, and the hold line
        played between the greeting and the question)."""
        self.last_event_ns = max(self.last_event_ns, now_ns)

    def served(self) -> None:
        """The model's audio flows again: the spell is over."""
        self.failed_in_row = 0
        self.hold_line_at_ns = 0

    def hold_asked(self, now_ns: int) -> None:
        """The hold line was asked for outside ``verdict`` (a worker took over mid-answer)."""
        self.hold_line_at_ns = now_ns or 1

    def hold_due(self, now_ns: int) -> bool:
        """No hold line yet in this spell, or the last one was asked ``hold_every_ms`` ago."""
        if not self.hold_line_at_ns:
            return True
        every_ms = self.policy.hold_every_ms
        return every_ms > 0 and now_ns - self.hold_line_at_ns >= every_ms * MS

    def lost(self, now_ns: int) -> None:
        if not self.model_down_since_ns:
            self.model_down_since_ns = now_ns

    def reopened(self, now_ns: int) -> None:
        self.model_down_since_ns = 0
        self.last_event_ns = now_ns

    def vendor_failed(self, now_ns: int) -> None:
        """The vendor failed a request. Counted once per attempt: a failure inside the pause the last one
        set is the same attempt's second word (Realtime sends an `error` and a failed `response.done` for one
        refused response.create) or a response the vendor started by itself meanwhile (server VAD). Counting
        those gave up on a 4 s rate limit after 1.5 s (the chaos bench: 5 calls hung up at 100 calls)."""
        if self.failed_in_row and now_ns < self.not_before_ns:
            return
        self.failed_in_row += 1
        policy = self.policy
        delay_ms = min(policy.vendor_retry_max_ms, policy.vendor_retry_ms * 2 ** min(8, self.failed_in_row - 1))
        self.not_before_ns = now_ns + delay_ms * MS

    def may_ask(self, now_ns: int) -> bool:
        """A request may go to the model now (a socket, and no pause after a failure)."""
        return not self.model_down_since_ns and now_ns >= self.not_before_ns

    def verdict(self, now_ns: int, *, awaiting: bool, waiting_on_vendor: bool, caller_speaking: bool) -> str | None:
        """GAVE_UP_* (the failure policy, now), HOLD (ask the pacer for the hold line), or None.

        ``awaiting``: the caller waits on the model (a response asked for, coming or playing, or the call's
        first words). ``waiting_on_vendor``: a response was asked for or is being generated: the vendor owes
        the next event."""
        policy = self.policy
        if self.failed_in_row >= policy.after_failures:
            return GAVE_UP_VENDOR
        if self.model_down_since_ns and now_ns - self.model_down_since_ns >= policy.after_ms * MS:
            return GAVE_UP_UNREACHABLE
        if caller_speaking or not self.hold_due(now_ns):
            return None
        silent = waiting_on_vendor and self.last_event_ns and now_ns - self.last_event_ns >= policy.silent_ms * MS
        if (self.failing and awaiting) or silent:
            self.hold_asked(now_ns)
            return HOLD
        return None
