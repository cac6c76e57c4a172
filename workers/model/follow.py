"""A standby model worker follows the serving worker's call records, so that taking over costs a second of
replay per call, not the whole call's.

Owns reading part files incrementally and feeding what they hold to a driver per live call (the replay's
rebuild, voicecore/replay.py): while it stands by, the standby polls every FOLLOW_EVERY_S; the serving worker
hands its entries to the writer thread every second, so a follower is at most about two seconds behind,
and taking over replays only that tail. Rebuilding every call from scratch at takeover costs about 0.6 ms
per second of call (a 3-minute call 110 ms; 100 of them 11 s, while every caller waits); following costs
the standby the same 0.6 ms per call-second spread over the calls' lives, and nothing of the serving
worker. Knows nothing of sockets; reads files and the arena's call table, never writes either.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

from voicecore import replay
from voicecore.call.driver import Driver
from voicecore.call.record import INPUT_KINDS, RECORD_VERSION, RecordError
from voicecore.record import PART_SUFFIX, record_name

log = logging.getLogger("voicecore.model.follow")

FOLLOW_EVERY_S = 1.0
MAX_RECORD_NUMBER = 64


def part_path(directory: Path, call_sid: str, n: int) -> Path:
    return directory / (record_name(call_sid, n) + PART_SUFFIX)


def newest_part(directory: Path, call_sid: str, from_n: int = 1) -> tuple[int, Path] | None:
    """The part file with the highest number (from ``from_n`` up), and its number; None when there is none."""
    found = None
    for n in range(max(1, from_n), MAX_RECORD_NUMBER):
        path = part_path(directory, call_sid, n)
        if path.exists():
            found = (n, path)
        elif found is not None or n > from_n + 2:
            break
    return found


class CallFollower:
    """One live call's newest part file, read as it grows, fed to the driver it rebuilds."""

    def __init__(self, directory: str | Path, call_sid: str) -> None:
        self.directory = Path(directory)
        self.call_sid = call_sid
        self.number = 0
        self.path: Path | None = None
        self.offset = 0
        self.rest = b""  # a last line not complete yet
        self.driver: Driver | None = None
        self.entries = 0
        self.failed = False

    def poll(self) -> None:
        """Read what was appended since the last poll (a newer part file starts the driver over)."""
        if self.failed:
            return
        newest = newest_part(self.directory, self.call_sid, max(1, self.number))
        if newest is None:
            return
        if newest[0] != self.number:
            self.number, self.path = newest
            self.offset, self.rest, self.driver, self.entries = 0, b"", None, 0
        assert self.path is not None
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return  # renamed to its final name: the call ended (or is ending)
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        try:
            for line in lines:
                if line.strip():
                    self._feed(orjson.loads(line))
        except (RecordError, ValueError, KeyError, TypeError) as exc:
            log.warning("call %s: cannot follow %s (%s); a takeover would rebuild it from the start", self.call_sid,
                        self.path.name, exc)
            self.failed, self.driver = True, None

    def _feed(self, value: dict) -> None:
        if self.driver is None:
            if not isinstance(value, dict) or value.get("voicecore_record") != RECORD_VERSION:
                raise RecordError("not a record header")
            if value.get("call_sid") != self.call_sid:
                raise RecordError("the part file names another call")
            self.driver = replay.driver_for_record(self.directory, value)
            return
        if value.get("k") in INPUT_KINDS:
            replay.rebuild(self.driver, [value])
            self.entries += 1

    def take(self) -> tuple[Driver, str] | None:
        """At takeover: read the tail, then hand over the driver and the part file's name."""
        self.poll()
        if self.driver is None or self.path is None:
            return None
        return self.driver, self.path.name


class Followers:
    """The standby's followers, one per live call of the arena."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.by_call: dict[str, CallFollower] = {}

    def update(self, live_call_sids: list[str]) -> list[CallFollower]:
        """Follow exactly these calls; returns their followers, to poll (one at a time: the caller yields
        between them, so a takeover is never kept waiting behind a long catch-up)."""
        live = set(live_call_sids)
        for call_sid in list(self.by_call):
            if call_sid not in live:
                del self.by_call[call_sid]
        for call_sid in live_call_sids:
            if call_sid not in self.by_call:
                self.by_call[call_sid] = CallFollower(self.directory, call_sid)
        return list(self.by_call.values())

    def take(self, call_sid: str) -> tuple[Driver, str] | None:
        follower = self.by_call.pop(call_sid, None)
        return follower.take() if follower is not None else None
