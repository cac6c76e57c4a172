"""The store spool: a finished call's summary, kept in a file until the recorder has stored it.

Owns the spool's file names and its files (write, list, read, remove); knows nothing of sockets or of the
store. A call whose record file is not written (``record_calls`` false) has no file the recorder could find
again, so the model worker writes the call's summary (voicecore/store/summary.py ``summary_to_json``, built
from the entries as the agent's storage tier keeps them) here when the call ends, then tells the recorder
over the bus. The recorder stores it and only then removes the file; at start it stores whatever is left
(it was down, or killed between the two). The file also holds the call's observer events (as the live
ones: ``(t_ms, type, data)`` from the call's start at ``started_at``): a call whose live events never
reached the store (the recorder was down all along) gets them from here, as a recorded call gets them
from its record. The store's ingest is idempotent on the summary's ``source``,
which is the spool file's name, so a file stored twice (a kill after the commit, before the removal) is
one call in the store.

While the call runs, the model worker rewrites its summary so far every few seconds into the part file
``<name>.part`` (no events: they reach the store live), and removes it once the finished file is written.
A part file left untouched (``STALE_PART_AFTER_S``) belongs to a model worker that was killed: the recorder
finishes it (renamed to its final name, never over one) and stores the call as it stood, marked incomplete,
as it finishes a record's part file.

File names: ``<CallSid>-<ms>.call.json``, ``<ms>`` the wall-clock millisecond the call's session began in
this worker (a call taken over by another worker is a second session: a second name, a second part of the
same call, as its records would be). Written whole under a scratch name and renamed into place, mode 0600
in a directory made 0700 (summaries hold what the caller said): a reader never sees half a file. A writer
killed between the write and the rename leaves its scratch file (``.spool-*.tmp``) behind, and no one would
ever rename it: the recorder removes scratch files older than any write in progress
(``STALE_SCRATCH_AFTER_S``) when it lists the spool.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from voicecore.store.summary import CallSummary, summary_from_json

SPOOL_DIR = "store-spool"  # under the runtime directory
SPOOL_SUFFIX = ".call.json"
PART_SUFFIX = ".part"
PART_EVERY_S = 5.0  # a live call's part file is rewritten this often
STALE_PART_AFTER_S = 120.0  # untouched this long (many rewrites missed): its writer is gone
_SCRATCH_PREFIX = ".spool-"
_SCRATCH_SUFFIX = ".tmp"
# A scratch file lives for one write and one rename (milliseconds; a part file is rewritten every
# PART_EVERY_S): one this old has no writer left, even on a disk stalled for minutes.
STALE_SCRATCH_AFTER_S = 600.0


def spool_name(call_sid: str, began_ms: int) -> str:
    """The spool file (and store source) name of a call's session that began at ``began_ms`` (wall clock)."""
    if not call_sid or "/" in call_sid or call_sid.startswith("."):
        raise ValueError(f"call sid {call_sid!r} cannot name a spool file")
    return f"{call_sid}-{int(began_ms)}{SPOOL_SUFFIX}"


def is_spooled(name: str) -> bool:
    """A finished spool file's name (never a scratch file, never a path)."""
    return name.endswith(SPOOL_SUFFIX) and not name.startswith(".") and "/" not in name and len(name) > len(SPOOL_SUFFIX)


@dataclasses.dataclass(frozen=True, slots=True)
class SpooledCall:
    summary: CallSummary
    started_at: float  # wall-clock seconds of the call's first event
    events: list[tuple[int, str, dict[str, Any]]]


def document(summary_json: bytes, started_at: float, events: list[tuple[int, str, dict[str, Any]]]) -> bytes:
    """A spool file's content: the summary (``summary_to_json``), where its events' clock began, the events."""
    return b'{"summary":' + summary_json + b',"started_at":' + orjson.dumps(started_at) + b',"events":' + orjson.dumps(events) + b"}"


def parse(content: bytes) -> SpooledCall:
    """``document``'s inverse; ValueError (or TypeError, KeyError) on anything else."""
    data = orjson.loads(content)
    if not isinstance(data, dict):
        raise ValueError("not a spooled call")
    events = [(int(t_ms), str(kind), dict(event)) for t_ms, kind, event in data["events"]]
    return SpooledCall(summary_from_json(orjson.dumps(data["summary"])), float(data["started_at"]), events)


def is_part(name: str) -> bool:
    return name.endswith(PART_SUFFIX) and is_spooled(name.removesuffix(PART_SUFFIX))


def stale_parts(entries: list[tuple[str, float]], now_s: float, after_s: float = STALE_PART_AFTER_S) -> list[str]:
    """Of (name, mtime) entries, the part files untouched for ``after_s`` or longer, oldest first."""
    return [name for name, mtime in sorted(entries, key=lambda e: (e[1], e[0])) if is_part(name) and now_s - mtime >= after_s]


def is_scratch(name: str) -> bool:
    """A scratch file ``write`` makes and renames (never a spool or part file, never a path)."""
    return (name.startswith(_SCRATCH_PREFIX) and name.endswith(_SCRATCH_SUFFIX) and "/" not in name
            and len(name) > len(_SCRATCH_PREFIX) + len(_SCRATCH_SUFFIX))


def stale_scratch(entries: list[tuple[str, float]], now_s: float, after_s: float = STALE_SCRATCH_AFTER_S) -> list[str]:
    """Of (name, mtime) entries, the scratch files untouched for ``after_s`` or longer, oldest first."""
    return [name for name, mtime in sorted(entries, key=lambda e: (e[1], e[0])) if is_scratch(name) and now_s - mtime >= after_s]


def spool_dir(runtime_dir: str | Path) -> Path:
    return Path(runtime_dir) / SPOOL_DIR


def write(directory: Path, name: str, content: bytes) -> Path:
    """Write a ``document`` under ``name`` (a spool file's or its part file's), atomically (scratch file,
    rename; a finished file is fsynced first, a part file, rewritten every few seconds, is not); an existing
    file of that name is the same session's and is replaced."""
    if not (is_spooled(name) or is_part(name)):
        raise ValueError(f"{name!r} is not a spool file name")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=_SCRATCH_PREFIX, suffix=_SCRATCH_SUFFIX, dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            if not is_part(name):
                f.flush()
                os.fsync(f.fileno())
        final = directory / name
        os.replace(scratch, final)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise
    return final


def listing(directory: Path) -> list[str]:
    """The spool files waiting, oldest first (by name's time, then name); none when the directory is missing."""
    try:
        names = [entry.name for entry in os.scandir(directory) if is_spooled(entry.name)]
    except FileNotFoundError:
        return []
    return sorted(names, key=lambda n: (_began_ms(n), n))


def part_listing(directory: Path) -> list[tuple[str, float]]:
    """The part files (name, mtime); none when the directory is missing."""
    return _listing_with_mtimes(directory, is_part)


def scratch_listing(directory: Path) -> list[tuple[str, float]]:
    """The scratch files (name, mtime), a write in progress or a killed writer's leftover; none when the
    directory is missing."""
    return _listing_with_mtimes(directory, is_scratch)


def _listing_with_mtimes(directory: Path, wanted: Callable[[str], bool]) -> list[tuple[str, float]]:
    entries = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if wanted(entry.name):
                    try:
                        entries.append((entry.name, entry.stat().st_mtime))
                    except FileNotFoundError:
                        continue  # renamed or removed between the listing and the stat
    except FileNotFoundError:
        return []
    return entries


def finish_part(directory: Path, part: str) -> str:
    """A stale part file under its final name (never over a finished file of that name: then the part is only
    removed); the final name."""
    final = part.removesuffix(PART_SUFFIX)
    try:
        os.link(directory / part, directory / final)
    except FileExistsError:
        pass
    (directory / part).unlink(missing_ok=True)
    return final


def read(directory: Path, name: str) -> bytes:
    return (directory / name).read_bytes()


def remove(directory: Path, name: str) -> None:
    (directory / name).unlink(missing_ok=True)


def _began_ms(name: str) -> int:
    stem = name.removesuffix(SPOOL_SUFFIX)
    _, _, began = stem.rpartition("-")
    return int(began) if began.isdigit() else 0
