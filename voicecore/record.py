"""Call records: every input to a call's controller and every action it returned, timestamped.

Owns the record format and the recording wrapper; must not know sockets, the clock or how the actions
are applied. The shell passes ``now_ns`` (monotonic) with every input exactly as it passes it to the
controller, so a record replays through a fresh controller with a virtual clock (INV-REPLAY,
ARCHITECTURE.md section 9; voicecore/replay.py).

The wrapped "controller" is the call's driver: the turn-taking ``CallController``
(workers/model/controller.py, ``call_control = "turns"``) or the ``SpineDriver`` (workers/model/spine.py,
``call_control = "spine"``: the model worker's core alone). Both take the same inputs.

Format: JSON lines, UTF-8, one file per call (``<record_dir>/<CallSid>.jsonl``; ``<CallSid>-2.jsonl``
and so on when a restarted model worker records the rest of a call it resumed).

Streaming (``RecordFile``): while the call runs, the model worker appends the record to a part file
``<CallSid>.jsonl.part`` (``<CallSid>-N.jsonl.part`` if ``<CallSid>[-N].jsonl[.part]`` is taken), header
first, in batches of about a second; at call end the part file is linked to its final name (the same
never-overwrite rule: the first free ``<CallSid>[-N].jsonl`` from its own number up) and unlinked, so a
reader never sees a half-written ``.jsonl``. A part file left behind (the worker was killed) is a record
cut short: every line handed to the writer before the kill, maybe a truncated last line
(``load_record`` drops it and says the record is incomplete). A restarted worker that resumes the call
leaves it as it is and records the rest under the next number.

Line 1, the header, for ``turns``::

    {"voicecore_record": 1, "control": "turns", "call_sid": "CA..", "naming": "ga", "first_tag": 1,
     "flow": "scripted", "flow_args": {...}, "config": {ControllerConfig fields}}

for ``spine`` (``args``: ModelCallCore's keyword arguments, e.g. greet, gate_policy, safe_line)::

    {"voicecore_record": 1, "control": "spine", "call_sid": "CA..", "naming": "ga", "first_tag": 1,
     "args": {"greet": true, "gate_policy": "off", "safe_line": "..."}}

A header without ``control`` (records written before spine calls were recorded) means ``turns``.

Then one line per entry, in the order they happened: ``{"t": now_ns, "k": kind, ...}``

Inputs (fed to the controller; ``p`` is a playout snapshot: [played_tag, played_frames, played_at_ns,
sent_tag, sent_frames, carrier_empty_at_ns] as read from the control block at that moment):

- ``start``  ``{}``                                     -> ``start(t)``
- ``model``  ``{"text": raw server event, "p": [...]}``  -> ``on_model_event(text, t, playout)``
- ``audio``  ``{"n": frames, "ulaw": base64?, "p"?}``   -> ``on_caller_audio(n, t)`` (``ulaw``: the caller's frames, kept
  unless VOICECORE_RECORD_CALLER_AUDIO is off; ``p``: a playout snapshot for the WAV; neither is fed)
- ``dtmf``   ``{"digit": "5"}``                         -> ``on_dtmf(digit, t)``
- ``tick``   ``{"p": [...]}``                           -> ``on_tick(t, playout)``
- ``stop``   ``{}``                                     -> ``on_carrier_stop(t)``
- ``reopen`` ``{}``                                     -> ``reopen(t)`` (the model socket reconnected)
- ``verdict`` ``{"tag", "frames", "rejected", "reason", "citations", "p"}`` -> ``on_verdict(tag, frames, rejected, t, playout)``
  (the validator's verdict on a gated response; ``citations`` JSON text, kept for the reader)
- ``snippets`` ``{"req": req_id, "snippets": [{"file", "line", "text"}]}`` -> ``on_snippets(req, snippets, t)``
  (the knowledge base's answer to a ``Retrieve`` action: recorded, so a replay needs no knowledge base)

Outputs: ``out`` ``{"a": action}``, one line per action the preceding input returned, in order;
``action`` is ``controller.action_to_dict`` (bytes as ``<field>_len`` and ``<field>_crc``: the audio
itself is already in the ``model`` lines). Notes the replay ignores: kind ``note`` ``{"what": .., ...}``
(e.g. marks, clears, carrier events the shell wants kept for a human reader).

Records hold what the caller said (transcripts, DTMF digits) and optionally their audio: they are
personal data; write them with mode 0600 into a private directory, never into logs.
"""

from __future__ import annotations

import binascii
import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

from workers.model.controller import Action, CallController, ControllerConfig, Playout, action_to_dict

RECORD_VERSION = 1
INPUT_KINDS = frozenset({"start", "model", "audio", "dtmf", "tick", "stop", "verdict", "snippets", "reopen"})


def playout_list(playout: Playout) -> list[int]:
    return [playout.played_tag, playout.played_frames, playout.played_at_ns, playout.sent_tag,
            playout.sent_frames, playout.carrier_empty_at_ns]


def playout_from(values: list[int]) -> Playout:
    return Playout(*(int(v) for v in values))


class CallRecorder:
    """Wraps a call's driver (a CallController or a SpineDriver): same input methods, records each input
    and the actions it returned. ``flow_name``/``flow_args`` describe a controller's flow (turns only)."""

    def __init__(self, controller: Any, flow_name: str = "scripted", flow_args: dict | None = None,
                 keep_caller_audio: bool = False, sink: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        """``sink``: streaming; ``hand_off()`` passes it the entries recorded since the last hand-off and
        forgets them (``entries``, ``lines()`` and ``dumps()`` then cover only what was not handed off).
        None: the whole record stays in ``entries``."""
        self.controller = controller
        self.sink = sink
        self.handed_off = 0  # entries passed to the sink so far
        self.keep_caller_audio = keep_caller_audio
        self.header: dict[str, Any] = {"voicecore_record": RECORD_VERSION}
        if hasattr(controller, "record_header"):
            self.header.update(controller.record_header())
        else:
            self.header.update({
                "control": "turns",
                "call_sid": controller.call_sid,
                "naming": controller.core.naming,
                "first_tag": controller.core.next_tag,
                "flow": flow_name,
                "flow_args": dict(flow_args or {}),
                "config": controller.config.to_dict(),
            })
        self.entries: list[dict[str, Any]] = []

    # --- the controller's inputs, recorded -----------------------------------------------------------
    def start(self, now_ns: int) -> list[Action]:
        return self._run({"t": now_ns, "k": "start"}, self.controller.start(now_ns))

    def on_model_event(self, text: str | bytes, now_ns: int, playout: Playout) -> list[Action]:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        entry = {"t": now_ns, "k": "model", "text": text, "p": playout_list(playout)}
        return self._run(entry, self.controller.on_model_event(text, now_ns, playout))

    def on_caller_audio(self, n_frames: int, now_ns: int, audio: bytes | None = None,
                        playout: Playout | None = None) -> list[Action]:
        entry: dict[str, Any] = {"t": now_ns, "k": "audio", "n": n_frames}
        if self.keep_caller_audio and audio:
            entry["ulaw"] = binascii.b2a_base64(audio, newline=False).decode("ascii")
        if playout is not None:
            entry["p"] = playout_list(playout)
        return self._run(entry, self.controller.on_caller_audio(n_frames, now_ns))

    def on_dtmf(self, digit: str, now_ns: int) -> list[Action]:
        return self._run({"t": now_ns, "k": "dtmf", "digit": digit}, self.controller.on_dtmf(digit, now_ns))

    def on_tick(self, now_ns: int, playout: Playout) -> list[Action]:
        return self._run({"t": now_ns, "k": "tick", "p": playout_list(playout)}, self.controller.on_tick(now_ns, playout))

    def on_carrier_stop(self, now_ns: int) -> list[Action]:
        return self._run({"t": now_ns, "k": "stop"}, self.controller.on_carrier_stop(now_ns))

    def reopen(self, now_ns: int) -> list[Action]:
        """The model socket reconnected: the driver configures the new session."""
        return self._run({"t": now_ns, "k": "reopen"}, self.controller.reopen(now_ns))

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int, playout: Playout,
                   reason: str = "", citations: str = "") -> list[Action]:
        entry = {"t": now_ns, "k": "verdict", "tag": tag, "frames": approved_frames, "rejected": rejected,
                 "reason": reason, "citations": citations, "p": playout_list(playout)}
        return self._run(entry, self.controller.on_verdict(tag, approved_frames, rejected, now_ns, playout))

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[Action]:
        entry = {"t": now_ns, "k": "snippets", "req": req_id, "snippets": list(snippets)}
        return self._run(entry, self.controller.on_snippets(req_id, snippets, now_ns))

    def note(self, now_ns: int, what: str, **fields: Any) -> None:
        """Something the replay does not feed (a mark echo, a clear sent): kept for the reader."""
        self.entries.append({"t": now_ns, "k": "note", "what": what, **fields})

    def _run(self, entry: dict[str, Any], actions: list[Action]) -> list[Action]:
        self.entries.append(entry)
        t = entry["t"]
        for action in actions:
            self.entries.append({"t": t, "k": "out", "a": action_to_dict(action)})
        return actions

    def hand_off(self) -> int:
        """Pass the entries recorded since the last hand-off to the sink and drop them; how many."""
        if self.sink is None or not self.entries:
            return 0
        batch, self.entries = self.entries, []
        self.handed_off += len(batch)
        self.sink(batch)
        return len(batch)

    # --- output ----------------------------------------------------------------------------------------
    def lines(self) -> Iterable[str]:
        yield _dumps(self.header)
        for entry in self.entries:
            yield _dumps(entry)

    def dumps(self) -> str:
        return "\n".join(self.lines()) + "\n"

    def snapshot(self) -> CallRecorder:
        """The record so far, as a copy that does not grow (to write it from another thread)."""
        frozen = copy.copy(self)
        frozen.header, frozen.entries = dict(self.header), list(self.entries)
        return frozen

    def save(self, path: str | Path) -> Path:
        """Write the record (mode 0600: it holds what the caller said), replacing ``path`` at once: a
        reader never sees half a record."""
        path = Path(path)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self._write_tmp(path.parent)
        try:
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    def save_new(self, directory: str | Path) -> Path:
        """Write the record as ``<directory>/<CallSid>.jsonl`` (``-2``, ``-3``, ... if taken: a resumed
        call's second record never overwrites its first), mode 0600, in a directory created 0700."""
        directory = Path(directory)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self._write_tmp(directory)
        try:
            for n in range(1, 1000):
                path = directory / (f"{self.header['call_sid']}.jsonl" if n == 1 else f"{self.header['call_sid']}-{n}.jsonl")
                try:
                    os.link(tmp, path)  # atomic, and fails if the name is taken
                    return path
                except FileExistsError:
                    continue
            raise FileExistsError(f"no free record name for {self.header['call_sid']} in {directory}")
        finally:
            tmp.unlink(missing_ok=True)

    def _write_tmp(self, directory: Path) -> Path:
        fd, name = tempfile.mkstemp(prefix=".record-", suffix=".tmp", dir=directory)  # mode 0600
        try:
            # One buffer, one write: fewer points where a writer thread gives up the GIL.
            data = memoryview(self.dumps().encode("utf-8"))
            with os.fdopen(fd, "wb") as f:
                while data:
                    data = data[f.write(data):]
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        return Path(name)


PART_SUFFIX = ".part"


def record_name(call_sid: str, n: int) -> str:
    return f"{call_sid}.jsonl" if n == 1 else f"{call_sid}-{n}.jsonl"


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
            self._write(_dumps(self.header) + "\n")
            return part
        raise FileExistsError(f"no free record name for {self.call_sid} in {self.directory}")

    def append(self, entries: list[dict[str, Any]]) -> None:
        self.open()
        if entries:
            self._write("".join([_dumps(e) + "\n" for e in entries]))  # one buffer, one write

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


class RecordError(ValueError):
    """The file is not a voicecore record (or a version this code cannot read)."""


def loads(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    header, entries, _ = loads_partial(text, allow_truncated=False)
    return header, entries


def loads_partial(text: str, allow_truncated: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """(header, entries, truncated): with ``allow_truncated``, a last line cut short (no newline, not
    JSON: the writer was killed mid-write) is dropped and ``truncated`` is True."""
    lines = [line for line in text.splitlines() if line.strip()]
    truncated = False
    if allow_truncated and lines and not text.endswith("\n") and len(lines) > 1:
        try:
            json.loads(lines[-1])
        except ValueError:
            lines.pop()
            truncated = True
    if not lines:
        raise RecordError("empty record")
    try:
        header = json.loads(lines[0])
        entries = [json.loads(line) for line in lines[1:]]
    except ValueError as exc:
        raise RecordError(f"not JSON lines: {exc}") from None
    if not isinstance(header, dict) or header.get("voicecore_record") != RECORD_VERSION:
        raise RecordError("missing or unsupported voicecore_record header")
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("t"), int) or not isinstance(entry.get("k"), str):
            raise RecordError("an entry lacks t or k")
    return header, entries, truncated


def load(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return loads(Path(path).read_text(encoding="utf-8"))


def load_record(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """(header, entries, complete): a part file (``.part``: a call still running, or its worker killed) or a
    record whose last line is cut short is incomplete; its complete lines are returned."""
    path = Path(path)
    # errors="replace": a kill mid-write may cut a UTF-8 sequence; only the (dropped) last line holds it
    header, entries, truncated = loads_partial(path.read_bytes().decode("utf-8", errors="replace"))
    return header, entries, not truncated and not path.name.endswith(PART_SUFFIX)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # built once: json.dumps with options builds one per call


def _dumps(value: dict[str, Any]) -> str:
    return _ENCODER.encode(value)
