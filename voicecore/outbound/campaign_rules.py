"""A campaign's rules as plain values: when a callee may be called (calling windows in the callee's local
time), which time zones a number is in, and how an attempt's outcome decides the next one (retries).

Pure: every function takes the time (seconds since the epoch) it reasons about; nothing reads a clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import phonenumbers
from phonenumbers import timezone as number_timezones

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # datetime.weekday() order

# What an attempt can end as. The first three are final; the rest may be retried (RetryPolicy).
COMPLETED = "completed"  # a person answered and the call ran its course
OPTED_OUT = "opted-out"  # the callee asked not to be called again: final, and the number joins the do-not-call list
BUSY = "busy"
NO_ANSWER = "no-answer"
VOICEMAIL = "voicemail"
FAILED = "failed"  # the carrier could not place the call
INTERRUPTED = "interrupted"  # the campaign process stopped while the attempt was dialing: its outcome is unknown
OUTCOMES = (COMPLETED, OPTED_OUT, BUSY, NO_ANSWER, VOICEMAIL, FAILED, INTERRUPTED)
FINAL_OUTCOMES = (COMPLETED, OPTED_OUT)
RETRIED_OUTCOMES = (BUSY, NO_ANSWER, VOICEMAIL, FAILED, INTERRUPTED)


class RulesError(ValueError):
    """A window or retry setting that cannot be used (the message says which and why)."""


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; RulesError when there is none of that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise RulesError(f"{name!r} is not a time zone (expected an IANA name such as Europe/Stockholm)") from None


def zones_of_number(number: phonenumbers.PhoneNumber) -> tuple[str, ...]:
    """The time zones the numbering plan places ``number`` in (several for a region that spans zones, such
    as a US toll-free or an Australian mobile number); () when the plan does not tell."""
    names = tuple(n for n in number_timezones.time_zones_for_number(number) if n != "Etc/Unknown")
    valid = []
    for name in names:
        try:
            zone(name)
        except RulesError:
            continue
        valid.append(name)
    return tuple(valid)


@dataclasses.dataclass(frozen=True, slots=True)
class CallingWindow:
    """When a callee may be dialled, on the callee's own clock: ``days`` (0 = Monday) from ``start`` up to
    (not including) ``end``. The default is 09:00-20:00 on weekdays."""

    days: frozenset[int] = frozenset(range(5))
    start: dt.time = dt.time(9, 0)
    end: dt.time = dt.time(20, 0)

    def __post_init__(self) -> None:
        if not self.days or not all(0 <= d <= 6 for d in self.days):
            raise RulesError("window days: expected one or more of " + ", ".join(DAY_NAMES))
        if not self.start < self.end:
            raise RulesError(f"window: start {self.start:%H:%M} must be before end {self.end:%H:%M}")

    @classmethod
    def parse(cls, days: str = "mon-fri", start: str = "09:00", end: str = "20:00") -> CallingWindow:
        """From the text a user writes: days as ``mon-fri``, ``mon,wed,sat`` or ``mon-sun``; times as HH:MM."""
        return cls(days=_parse_days(days), start=_parse_time(start, "start"), end=_parse_time(end, "end"))

    def describe(self) -> dict[str, str]:
        return {"days": ",".join(DAY_NAMES[d] for d in sorted(self.days)), "start": f"{self.start:%H:%M}",
                "end": f"{self.end:%H:%M}"}

    def is_open(self, at_s: float, zone_name: str) -> bool:
        """Whether ``at_s`` falls inside the window on the clock of ``zone_name``."""
        local = dt.datetime.fromtimestamp(at_s, zone(zone_name))
        return local.weekday() in self.days and self.start <= local.time() < self.end

    def is_open_everywhere(self, at_s: float, zone_names: Iterable[str]) -> bool:
        """Open in every one of the zones: a number that may be in several zones takes the most restrictive
        reading, so nobody is called outside the window whichever zone they are really in."""
        names = tuple(zone_names)
        return bool(names) and all(self.is_open(at_s, name) for name in names)

    def next_open(self, at_s: float, zone_names: Iterable[str], horizon_days: int = 8) -> float | None:
        """The first moment at or after ``at_s`` when the window is open in all the zones; None when it never
        is within ``horizon_days`` (zones so far apart that their windows never overlap)."""
        names = tuple(zone_names)
        if self.is_open_everywhere(at_s, names):
            return at_s
        # Where open intervals intersect, the intersection begins where one of them begins: try each zone's
        # window starts, in time order.
        starts: list[float] = []
        for name in names:
            tz = zone(name)
            today = dt.datetime.fromtimestamp(at_s, tz).date()
            for offset in range(horizon_days + 1):
                day = today + dt.timedelta(days=offset)
                if day.weekday() in self.days:
                    begins = dt.datetime.combine(day, self.start, tzinfo=tz).timestamp()
                    if begins > at_s:
                        starts.append(begins)
        for begins in sorted(starts):
            if self.is_open_everywhere(begins, names):
                return begins
        return None


def _parse_days(text: str) -> frozenset[int]:
    days: set[int] = set()
    for part in (p.strip().lower() for p in text.split(",")):
        first, _, last = part.partition("-")
        if first not in DAY_NAMES or (last and last not in DAY_NAMES):
            raise RulesError(f"window days {text!r}: expected day names ({', '.join(DAY_NAMES)}), ranges such as mon-fri")
        a, b = DAY_NAMES.index(first), DAY_NAMES.index(last or first)
        if b < a:
            raise RulesError(f"window days {text!r}: a range runs forward within the week (mon-fri, not fri-mon)")
        days.update(range(a, b + 1))
    return frozenset(days)


def _parse_time(text: str, which: str) -> dt.time:
    try:
        hours, minutes = text.strip().split(":")
        return dt.time(int(hours), int(minutes))
    except ValueError:
        raise RulesError(f"window {which} {text!r}: expected HH:MM") from None


DEFAULT_BACKOFF_S: Mapping[str, float] = {BUSY: 600.0, NO_ANSWER: 3600.0, VOICEMAIL: 4 * 3600.0, FAILED: 1800.0,
                                          INTERRUPTED: 1800.0}


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a callee gets and how long to wait after each outcome. The wait after attempt n is
    ``backoff_s[outcome] * factor ** (n - 1)``: repeated busy signals are tried again later and later."""

    max_attempts: int = 3
    backoff_s: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_BACKOFF_S))
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 20:
            raise RulesError(f"max_attempts: expected 1..20, got {self.max_attempts}")
        if self.factor < 1:
            raise RulesError(f"backoff factor: expected 1 or more, got {self.factor:g}")
        for outcome in RETRIED_OUTCOMES:
            if self.backoff_s.get(outcome, -1) < 0:
                raise RulesError(f"backoff for {outcome}: expected seconds >= 0")

    def next_attempt_at(self, outcome: str, attempt: int, ended_at_s: float) -> float | None:
        """When attempt ``attempt + 1`` may be dialled after attempt ``attempt`` ended as ``outcome``; None when
        the callee is done (a final outcome, or no attempts left)."""
        if outcome in FINAL_OUTCOMES or attempt >= self.max_attempts:
            return None
        if outcome not in RETRIED_OUTCOMES:
            raise RulesError(f"unknown outcome {outcome!r}")
        return ended_at_s + self.backoff_s[outcome] * self.factor ** (attempt - 1)


# The carrier's final call statuses (Twilio's CallStatus values for a call that is over).
CALL_OVER_STATUSES = ("completed", "busy", "no-answer", "failed", "canceled")
# The carrier's own answering-machine results that mean a machine took the call (Twilio's AnsweredBy).
MACHINE_ANSWERS = ("machine_start", "machine_end_beep", "machine_end_silence", "machine_end_other", "fax")


def attempt_outcome(call_status: str, answered_by: str = "", verdict: str = "", opted_out: bool = False) -> str | None:
    """What a placed call's attempt ended as, from its last status callback (``call_status``), the carrier's
    answering-machine result, the answer gate's verdict and whether the callee opted out during it; None while
    the call is not over. An answered call is ``voicemail`` when the gate (or, without a verdict, the
    carrier's AMD) says a machine took it, else ``completed``: a screening assistant or an IVR may have passed
    the call on to a person, so only a voicemail is tried again."""
    if call_status not in CALL_OVER_STATUSES:
        return None
    if call_status in (BUSY, NO_ANSWER):
        return call_status
    if call_status != "completed":
        return FAILED  # failed, or canceled before it was answered
    if opted_out:
        return OPTED_OUT
    if verdict == VOICEMAIL or (not verdict and answered_by in MACHINE_ANSWERS):
        return VOICEMAIL
    return COMPLETED
