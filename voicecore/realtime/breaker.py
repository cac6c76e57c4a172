"""A circuit breaker per model vendor endpoint: a vendor that refuses or fails new sessions is not hammered
by every call's reconnect, and a new call is sent straight to its agent's failure policy instead of waiting
on a vendor known to be down.

Owns the states and nothing else (sans-I/O: fed the clock). Closed: sessions are opened freely; failures
to open one are counted over ``window_s``. ``threshold`` of them open the breaker: nothing is tried for
``open_s``; then one trial (half-open) decides: success closes it, failure opens it again for twice as
long (at most ``max_open_s``). A session that opened and later dropped is not a failure here: a vendor
that drops every socket at once and takes them back is not down (the calls reconnect at once).

Fatal: the vendor refused the node's configuration (its key, model, quota, session configuration: a
``vendor_errors.VendorFault``). No call may open a session until ``success`` (a trial session the shell
opens by itself succeeded): trying again with every call would only repeat the refusal while callers wait.
"""

from __future__ import annotations

import collections

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"
FATAL = "fatal"


class CircuitBreaker:
    # One trial a second (at most one in 5 s while it keeps failing) costs a vendor nothing, and a vendor that
    # is back is found within a second: the chaos bench's refuse_new measured 4.6 s of extra silence with 2 s
    # doubling to 30 s.
    def __init__(self, threshold: int = 5, window_s: float = 30.0, open_s: float = 1.0, max_open_s: float = 5.0) -> None:
        if threshold < 1 or window_s <= 0 or open_s <= 0 or max_open_s < open_s:
            raise ValueError("threshold >= 1, window_s > 0, 0 < open_s <= max_open_s")
        self.threshold = threshold
        self.window_s = window_s
        self.base_open_s = open_s
        self.max_open_s = max_open_s
        self.state = CLOSED
        self.failures: collections.deque[float] = collections.deque()
        self.open_s = open_s
        self.opened_at = 0.0
        self.trial_started_at = 0.0
        self.times_opened = 0
        self.fatal_reason = ""  # what the vendor said when it refused the configuration (state FATAL)
        self.fatal_since = 0.0

    def allow(self, now: float) -> bool:
        """May a session be opened now? In half-open state only the one trial may (until it reports)."""
        if self.state == CLOSED:
            return True
        if self.state == FATAL:
            return False
        if self.state == OPEN:
            if now - self.opened_at < self.open_s:
                return False
            self.state = HALF_OPEN
            self.trial_started_at = now
            return True
        # half-open: one trial at a time; a trial that never reports (its task died) is retried after open_s
        if now - self.trial_started_at >= self.open_s:
            self.trial_started_at = now
            return True
        return False

    def retry_in(self, now: float) -> float:
        """Seconds until allow() may say yes (0 when closed)."""
        if self.state == CLOSED:
            return 0.0
        if self.state == FATAL:
            return self.max_open_s  # until a trial session of the shell's own succeeds
        start = self.opened_at if self.state == OPEN else self.trial_started_at
        return max(0.0, start + self.open_s - now)

    def success(self, now: float) -> None:
        self.state = CLOSED
        self.failures.clear()
        self.open_s = self.base_open_s
        self.fatal_reason = ""

    def fatal(self, now: float, reason: str) -> bool:
        """The vendor refused the configuration: closed to every call until ``success``. True when it was
        not fatal already (the caller logs and reports it once)."""
        first = self.state != FATAL
        if first:
            self.times_opened += 1
            self.fatal_since = now
        self.state = FATAL
        self.failures.clear()
        self.fatal_reason = reason
        return first

    @property
    def is_fatal(self) -> bool:
        return self.state == FATAL

    def failure(self, now: float) -> None:
        if self.state == FATAL:
            return
        if self.state == HALF_OPEN:
            self.open_s = min(self.max_open_s, self.open_s * 2)
            self._open(now)
            return
        if self.state == OPEN:
            return
        self.failures.append(now)
        while self.failures and now - self.failures[0] > self.window_s:
            self.failures.popleft()
        if len(self.failures) >= self.threshold:
            self._open(now)

    @property
    def is_open(self) -> bool:
        return self.state != CLOSED

    def _open(self, now: float) -> None:
        self.state = OPEN
        self.opened_at = now
        self.failures.clear()
        self.times_opened += 1
