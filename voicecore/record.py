"""Call record files: writing a record to disk (whole or streamed) and reading one back.

Owns the file I/O only; the record format and the recorder are voicecore/call/record.py's (pure). File
names: one record per call, ``<record_dir>/<CallSid>.jsonl`` (``<CallSid>-2.jsonl`` and so on when a
restarted model worker records the rest of a call it resumed), mode 0600 in a directory created 0700:
records hold what the caller said (transcripts, DTMF digits, maybe their audio), so they are personal data.

Streaming (``RecordFile``): while the call runs, the model worker appends the record to a part file
``<CallSid>.jsonl.part`` (``<CallSid>-N.jsonl.part`` if ``<CallSid>[-N].jsonl[.part]`` is taken), header
first, in batches of about a second; at call end the part file is linked to its final name (the same
never-overwrite rule: the first free ``<CallSid>[-N].jsonl`` from its own number up) and unlinked, so a
reader never sees a half-written ``.jsonl``. A part file left behind (the worker was killed) is a record
cut short: every line handed to the writer before the kill, maybe a truncated last line
(``load_record`` drops it and says the record is incomplete). A restarted worker that resumes the call
leaves it as it is and records the rest under the next number.

Whole (``save``, ``save_new``): a recorder that kept every entry in memory (tests, the scenario suite)
written at once.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

# RecordError and loads belong to the format; they are named here too: load() applies loads to a
# file's text and raises RecordError when it is not a record.
from voicecore.call.record import CallRecorder, RecordError, encode_line, loads, loads_partial

__all__ = ["PART_SUFFIX", "RecordError", "RecordFile", "load", "load_record", "loads", "record_name", "record_paths", "save", "save_new"]


PART_SUFFIX = ".part"


def record_name(call_sid: str, n: int) -> str:
    return f"{call_sid}.jsonl" if n == 1 else f"{call_sid}-{n}.jsonl"


def save(recorder: CallRecorder, path: str | Path) -> Path:
    """Write ``recorder``'s record (mode 0600: it holds what the caller said), replacing ``path`` at once:
    a reader never sees half a record."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = _write_tmp(recorder, path.parent)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def save_new(recorder: CallRecorder, directory: str | Path) -> Path:
    """Write ``recorder``'s record as ``<directory>/<CallSid>.jsonl`` (``-2``, ``-3``, ... if taken: a
    resumed call's second record never overwrites its first), mode 0600, in a directory created 0700."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    call_sid = str(recorder.header["call_sid"])
    tmp = _write_tmp(recorder, directory)
    try:
        for n in range(1, 1000):
            path = directory / record_name(call_sid, n)
            try:
                os.link(tmp, path)  # atomic, and fails if the name is taken
                return path
            except FileExistsError:
                continue
        raise FileExistsError(f"no free record name for {call_sid} in {directory}")
    finally:
        tmp.unlink(missing_ok=True)


def _write_tmp(recorder: CallRecorder, directory: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=".record-", suffix=".tmp", dir=directory)  # mode 0600
    try:
        # One buffer, one write: fewer points where a writer thread gives up the GIL.
        data = memoryview(recorder.dumps().encode("utf-8"))
        with os.fdopen(fd, "wb") as f:
            while data:
                data = data[f.write(data):]
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


class RecordFile:
    """A record streamed to disk (see the module docstring): ``append`` batches of entries to the part file
    (created 0600, header first, on the first call), then ``finish`` into the final name. Blocking file I/O:
    call it from one thread (the model worker's record writer), never from the event loop."""

    def __init__(self, directory: str | Path, header: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.header = dict(header)
        self.call_sid = str(self.header["call_sid"])
        self.number = 0  # n of the part file's name; 0: not created yet
        self.part: Path | None = None
        self.fd = -1

    def open(self) -> Path:
        """Create the part file under the first number whose record and part names are both free; write the header."""
        if self.part is not None:
            return self.part
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for n in range(1, 1000):
            final = self.directory / record_name(self.call_sid, n)
            if final.exists():
                continue
            part = final.with_name(final.name + PART_SUFFIX)
            try:
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
            except FileExistsError:
                continue
            self.number, self.part, self.fd = n, part, fd
            self._write(encode_line(self.header) + "\n")
            return part
        raise FileExistsError(f"no free record name for {self.call_sid} in {self.directory}")

    def append(self, entries: list[dict[str, Any]]) -> None:
        self.open()
        if entries:
            self._write("".join([encode_line(e) + "\n" for e in entries]))  # one buffer, one write

    def finish(self) -> Path:
        """Close the part file and give it its final name, atomically, never replacing a record (on an
        error the part file stays where it is)."""
        self.open()
        assert self.part is not None
        self.close()
        for n in range(self.number, 1000):
            path = self.directory / record_name(self.call_sid, n)
            try:
                os.link(self.part, path)  # atomic, and fails if the name is taken
            except FileExistsError:
                continue
            self.part.unlink(missing_ok=True)
            return path
        # the part file stays: the record, under a name that says it was not finished
        raise FileExistsError(f"no free record name for {self.call_sid} in {self.directory}")

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def _write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(self.fd, data):]


def load(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return loads(Path(path).read_text(encoding="utf-8"))


def load_record(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """(header, entries, complete): a part file (``.part``: a call still running, or its worker killed) or a
    record whose last line is cut short is incomplete; its complete lines are returned."""
    path = Path(path)
    # bytes, not text: a kill mid-write may cut a UTF-8 sequence; only the (dropped) last line holds it
    header, entries, truncated = loads_partial(path.read_bytes())
    return header, entries, not truncated and not path.name.endswith(PART_SUFFIX)


def record_paths(record_dir: Path, call_sids: list[str]) -> list[Path]:
    """The records of these calls (``<sid>.jsonl``, and ``<sid>-2.jsonl``... if a worker restarted mid-call)."""
    paths: list[Path] = []
    for sid in call_sids:
        first = record_dir / f"{sid}.jsonl"
        if first.exists():
            paths.append(first)
        paths.extend(sorted(record_dir.glob(f"{sid}-*.jsonl")))
    return paths
