"""The recorder's decisions, without I/O or a clock: which record files to ingest, which part files are
leftovers, which records retention deletes, and when retention runs.

Fed a listing of the record directory (``RecordEntry``: name and mtime) and the time (``now_s``, wall
clock seconds, as file mtimes are); the shell (main.py) lists the directory, reads and writes the files
and talks to the store. File names follow voicecore/record.py: a finished record is ``<CallSid>[-N].jsonl``
(renamed into place whole: safe to read), a call still running or cut short is ``<CallSid>[-N].jsonl.part``,
and ``.record-*.tmp`` are a writer's scratch files (never ours to touch).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Iterable

from voicecore.record import PART_SUFFIX

RECORD_SUFFIX = ".jsonl"
DAY_S = 86_400.0
# A part file is written every second or so while its call runs, and no call lasts a day: a part file
# untouched that long belongs to a worker that was killed, and nobody will finish it but us.
STALE_PART_AFTER_S = DAY_S
PURGE_EVERY_S = 3_600.0


@dataclasses.dataclass(frozen=True, slots=True)
class RecordEntry:
    name: str
    mtime_s: float


def is_record(name: str) -> bool:
    return name.endswith(RECORD_SUFFIX) and not name.startswith(".")


def is_part(name: str) -> bool:
    return name.endswith(RECORD_SUFFIX + PART_SUFFIX) and not name.startswith(".")


def to_ingest(listing: Iterable[RecordEntry], done: set[str] | frozenset[str]) -> list[RecordEntry]:
    """Finished records not yet handled (``done``: ingested, found already stored, or unreadable), oldest
    first, so a backlog enters the store in the order its calls ended."""
    return sorted((e for e in listing if is_record(e.name) and e.name not in done), key=lambda e: (e.mtime_s, e.name))


def stale_parts(listing: Iterable[RecordEntry], now_s: float, after_s: float = STALE_PART_AFTER_S) -> list[RecordEntry]:
    """Part files untouched for ``after_s`` or longer: records whose writer died."""
    return sorted((e for e in listing if is_part(e.name) and now_s - e.mtime_s >= after_s), key=lambda e: e.name)


def record_name_of_part(part_name: str) -> str:
    """``<CallSid>[-N].jsonl.part`` -> ``<CallSid>[-N].jsonl``."""
    return part_name.removesuffix(PART_SUFFIX)


def expired_records(listing: Iterable[RecordEntry], now_s: float, retention_days: float) -> list[RecordEntry]:
    """Finished records older than the retention (by mtime: when the call ended); none when
    ``retention_days`` <= 0 (keep forever)."""
    if retention_days <= 0:
        return []
    limit_s = retention_days * DAY_S
    return sorted((e for e in listing if is_record(e.name) and now_s - e.mtime_s > limit_s), key=lambda e: e.name)


# A call's events derived from its record or spool file cover its whole time; its live events that come after
# that (queued for the recorder while it was down, delivered once it is back) are the same events. Both are
# stamped with the wall clock, read at different moments: this much apart is still the same time.
DERIVED_MARGIN_S = 1.0
DERIVED_KEPT = 10_000  # calls remembered; a late live event comes within seconds of its call's derivation


class DerivedEvents:
    """Which live events repeat events already derived from a file: those of a derived call no later than
    its last derived event (``at``, wall-clock seconds). Later ones (a later part of the call, served by
    another model worker) are new."""

    def __init__(self, margin_s: float = DERIVED_MARGIN_S, kept: int = DERIVED_KEPT) -> None:
        self.margin_s = margin_s
        self.kept = kept
        self.until: dict[str, float] = {}

    def derived(self, call_sid: str, ats: Iterable[float]) -> None:
        last = max(ats, default=None)
        if last is None:
            return
        self.until.pop(call_sid, None)
        self.until[call_sid] = last
        while len(self.until) > self.kept:
            del self.until[next(iter(self.until))]

    def repeats(self, call_sid: str, at: float) -> bool:
        until = self.until.get(call_sid)
        return until is not None and at <= until + self.margin_s


class PurgeSchedule:
    """Retention runs at start and then once every ``every_s``; never when ``retention_days`` <= 0.
    Times are monotonic seconds (a wall-clock step must not skip or repeat a purge)."""

    def __init__(self, retention_days: float, every_s: float = PURGE_EVERY_S) -> None:
        self.retention_days = retention_days
        self.every_s = every_s
        self.next_s: float | None = None  # None: not run yet, due at once

    @property
    def enabled(self) -> bool:
        return self.retention_days > 0

    def due(self, now_s: float) -> bool:
        return self.enabled and (self.next_s is None or now_s >= self.next_s)

    def ran(self, now_s: float) -> None:
        self.next_s = now_s + self.every_s


class MinuteCount:
    """Counts per kind (ingested, unreadable, ...) reported once a minute when anything happened: the
    info-level line; each call's own line is at debug."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self.counts: dict[str, int] = {}
        self.next_s: float | None = None

    def add(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def take_due(self, now_s: float) -> dict[str, int] | None:
        """The counts since the last report when a minute has passed and any is non-zero (then reset)."""
        if self.next_s is None:
            self.next_s = now_s + self.every_s
            return None
        if now_s < self.next_s:
            return None
        self.next_s = now_s + self.every_s
        counts = {kind: n for kind, n in self.counts.items() if n}
        self.counts = {}
        return counts or None


# A store that fails is tried again soon (a PostgreSQL restart takes seconds), then less and less often.
STORE_RETRY_FIRST_S = 0.5
STORE_RETRY_MAX_S = 5.0


class StoreOutage:
    """When to try a failed store again (doubling from ``first_s`` to ``max_s``), and whether a failure is
    the first of its outage (the one that is logged; the retries that fail too are not). Monotonic seconds."""

    def __init__(self, first_s: float = STORE_RETRY_FIRST_S, max_s: float = STORE_RETRY_MAX_S) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.since_s: float | None = None  # None: the store is not known to be down
        self.retry_s = 0.0
        self.retry_at_s = 0.0

    @property
    def down(self) -> bool:
        return self.since_s is not None

    def failed(self, now_s: float) -> bool:
        """The store failed; True when this starts an outage."""
        first = self.since_s is None
        if first:
            self.since_s = now_s
            self.retry_s = self.first_s
        else:
            self.retry_s = min(self.retry_s * 2, self.max_s)
        self.retry_at_s = now_s + self.retry_s
        return first

    def may_try(self, now_s: float) -> bool:
        return now_s >= self.retry_at_s

    def recovered(self, now_s: float) -> float | None:
        """The store works (again): how long it was down, None when it was not."""
        if self.since_s is None:
            return None
        down_s, self.since_s = now_s - self.since_s, None
        self.retry_s = self.retry_at_s = 0.0
        return down_s


UNSTORED_EVENTS_KEPT = 200_000  # live events kept while the store is down (some 40 MB): minutes of a full node


class UnstoredEvents:
    """Numbered live events the store did not take yet, oldest first, kept to be stored when it is back (the
    store keeps an event once: a (call_sid, seq) stored before is left as it is, so storing one twice is
    harmless). Bounded: past ``kept`` the oldest are dropped and counted (``dropped``)."""

    def __init__(self, kept: int = UNSTORED_EVENTS_KEPT) -> None:
        self.kept = kept
        self.rows: collections.deque = collections.deque()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.rows)

    def keep(self, rows: Iterable) -> int:
        """Keep ``rows`` after those kept already; how many old ones were dropped to make room."""
        self.rows.extend(rows)
        over = max(0, len(self.rows) - self.kept)
        for _ in range(over):
            self.rows.popleft()
        self.dropped += over
        return over

    def oldest(self, n: int) -> list:
        """The ``n`` oldest rows (a batch to store), still kept until ``stored``."""
        return list(itertools.islice(self.rows, n))

    def stored(self, n: int) -> None:
        for _ in range(min(n, len(self.rows))):
            self.rows.popleft()
