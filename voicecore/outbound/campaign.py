"""The campaign scheduler: a plain object fed the time and the outcomes of calls that says which callees to
dial now, within the campaign's concurrency, each caller number's limit, the callees' calling windows, the
do-not-call list and the retry backoff.

Sans-I/O: it reads no clock and touches no store. Its whole state can be rebuilt from the callees, the
attempts so far and the do-not-call list, which is how a restarted campaign resumes (campaign_store.py
keeps them; the shell records each dial before it places it).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

from voicecore.outbound.campaign_file import Callee
from voicecore.outbound.campaign_rules import OPTED_OUT, OUTCOMES, CallingWindow, RetryPolicy

# What became of a callee that will not be dialled again, besides the final outcomes (completed, opted-out)
# and the last outcome of one whose attempts ran out (busy, no-answer, voicemail, failed, interrupted).
DO_NOT_CALL = "do-not-call"  # on the list before a dial: never dialled (again)
NO_WINDOW = "no-window"  # its zones' calling windows never overlap: it can never be called


@dataclasses.dataclass(frozen=True, slots=True)
class CampaignSettings:
    """How a campaign dials. ``from_numbers``: the caller numbers it dials from, each with at most
    ``per_from_limit`` calls at once (0: only the campaign's ``concurrency`` bounds them)."""

    window: CallingWindow = CallingWindow()
    retry: RetryPolicy = RetryPolicy()
    concurrency: int = 10
    from_numbers: tuple[str, ...] = ("",)  # "": the carrier account's default caller number
    per_from_limit: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= 10_000:
            raise ValueError(f"concurrency: expected 1..10000, got {self.concurrency}")
        if not self.from_numbers or len(set(self.from_numbers)) != len(self.from_numbers):
            raise ValueError("from_numbers: expected one or more distinct numbers")
        if self.per_from_limit < 0:
            raise ValueError(f"per_from_limit: expected 0 (no limit) or more, got {self.per_from_limit}")


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """One dial of a callee, as the store keeps it. ``outcome`` "" while it is dialing."""

    row: int
    attempt: int  # 1, 2, ...: the callee's attempts in order
    from_number: str
    dialed_at: float
    outcome: str = ""
    ended_at: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Dial:
    """Dial this callee now, as its attempt number ``attempt``, from ``from_number``."""

    row: int
    number: str
    attempt: int
    from_number: str


@dataclasses.dataclass(slots=True)
class _CalleeState:
    callee: Callee
    attempts: int = 0
    next_at: float = 0.0
    dialing_from: str | None = None  # set while an attempt is in the air
    result: str = ""  # set once the callee is done


class CampaignScheduler:
    """``due(now)`` -> the dials to place now; ``on_outcome`` as each ends; ``next_wakeup`` says when to ask again."""

    def __init__(self, settings: CampaignSettings, callees: Iterable[Callee], do_not_call: Iterable[str] = (),
                 attempts: Iterable[Attempt] = ()) -> None:
        self.settings = settings
        self.do_not_call = set(do_not_call)
        self._callees = {c.row: _CalleeState(c) for c in callees}
        self._by_number = {s.callee.number: s for s in self._callees.values()}
        self._in_flight: Counter[str] = Counter()
        for attempt in sorted(attempts, key=lambda a: (a.row, a.attempt)):
            state = self._callees[attempt.row]
            state.attempts = max(state.attempts, attempt.attempt)
            if attempt.outcome:
                self._ended(state, attempt.attempt, attempt.outcome, attempt.ended_at or attempt.dialed_at)
            else:
                state.dialing_from = attempt.from_number
                self._in_flight[attempt.from_number] += 1
        for state in self._callees.values():
            if self._waiting(state) and state.callee.number in self.do_not_call:
                state.result = DO_NOT_CALL

    # -- what the shell asks ------------------------------------------------------------------------------------------

    def due(self, now: float) -> list[Dial]:
        """The dials to place at ``now``, each counted in flight until its outcome comes. The shell records
        each one (the store's begin_attempt) before it places it."""
        dials: list[Dial] = []
        waiting = sorted((s for s in self._callees.values() if self._waiting(s) and s.next_at <= now),
                         key=lambda s: (s.next_at, s.callee.row))
        for state in waiting:
            if self.in_flight >= self.settings.concurrency:
                break
            if state.callee.number in self.do_not_call:
                state.result = DO_NOT_CALL
                continue
            if not self.settings.window.is_open_everywhere(now, state.callee.zones):
                opens = self.settings.window.next_open(now, state.callee.zones)
                if opens is None:
                    state.result = NO_WINDOW
                else:
                    state.next_at = opens
                continue
            from_number = self._free_from_number()
            if from_number is None:
                break
            state.attempts += 1
            state.dialing_from = from_number
            self._in_flight[from_number] += 1
            dials.append(Dial(state.callee.row, state.callee.number, state.attempts, from_number))
        return dials

    def on_outcome(self, row: int, attempt: int, outcome: str, now: float) -> None:
        """Attempt ``attempt`` of the callee on ``row`` ended as ``outcome`` at ``now``. An opt-out puts the
        number on the do-not-call list (the shell stores it there too)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r} (expected one of {', '.join(OUTCOMES)})")
        state = self._callees[row]
        if state.dialing_from is None or attempt != state.attempts:
            raise ValueError(f"row {row}: attempt {attempt} is not the one dialing")
        self._in_flight[state.dialing_from] -= 1
        state.dialing_from = None
        self._ended(state, attempt, outcome, now)

    def on_refused(self, row: int, attempt: int) -> None:
        """The dial of ``due`` was not placed: the store found the number on the do-not-call list when it
        came to record it. The attempt is not counted and the callee is done."""
        state = self._callees[row]
        if state.dialing_from is None or attempt != state.attempts:
            raise ValueError(f"row {row}: attempt {attempt} is not the one dialing")
        self._in_flight[state.dialing_from] -= 1
        state.dialing_from = None
        state.attempts -= 1
        state.result = DO_NOT_CALL
        self.do_not_call.add(state.callee.number)

    def add_do_not_call(self, number: str) -> None:
        """A number joined the list (a file, another campaign's opt-out): it is not dialled from now on."""
        self.do_not_call.add(number)
        state = self._by_number.get(number)
        if state is not None and self._waiting(state):
            state.result = DO_NOT_CALL

    def next_wakeup(self) -> float | None:
        """The earliest time a waiting callee may become due (it may still wait for its window or a free
        line); None when none is waiting."""
        times = [s.next_at for s in self._callees.values() if self._waiting(s)]
        return min(times) if times else None

    @property
    def in_flight(self) -> int:
        return sum(self._in_flight.values())

    @property
    def finished(self) -> bool:
        return all(s.result for s in self._callees.values())

    def results(self) -> Counter[str]:
        """How many callees ended each way (callees not done yet are not counted)."""
        return Counter(s.result for s in self._callees.values() if s.result)

    def result_of(self, row: int) -> str:
        return self._callees[row].result

    def callee(self, number: str) -> Callee | None:
        state = self._by_number.get(number)
        return state.callee if state else None

    # -- inside -------------------------------------------------------------------------------------------------------

    @staticmethod
    def _waiting(state: _CalleeState) -> bool:
        return not state.result and state.dialing_from is None

    def _ended(self, state: _CalleeState, attempt: int, outcome: str, at: float) -> None:
        if outcome == OPTED_OUT:
            self.do_not_call.add(state.callee.number)
        next_at = self.settings.retry.next_attempt_at(outcome, attempt, at)
        if next_at is None:
            state.result = outcome  # final, or the last outcome of a callee whose attempts ran out
        else:
            state.next_at = next_at

    def _free_from_number(self) -> str | None:
        limit = self.settings.per_from_limit
        free = [n for n in self.settings.from_numbers if not limit or self._in_flight[n] < limit]
        return min(free, key=lambda n: (self._in_flight[n], self.settings.from_numbers.index(n))) if free else None
