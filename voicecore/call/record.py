"""Call records: every input to a call's driver and every action it returned, timestamped.

Owns the record format (encoding and parsing its text) and the recording wrapper; must not know files,
sockets, the clock or how the actions are applied (voicecore/record.py writes and reads record files).
The shell passes ``now_ns`` (monotonic) with every input exactly as it passes it to the driver, so a record
replays through a fresh driver with a virtual clock (INV-REPLAY, docs/explanation/architecture.md#section-9;
voicecore/replay.py).

The wrapped driver (driver.py) is the turn-taking ``CallController`` (controller.py,
``call_control = "turns"``) or the ``SpineDriver`` (spine.py, ``call_control = "spine"``: the model
worker's core alone). Both take the same inputs, and each writes its own header (``record_header``).

Format: JSON lines, UTF-8, one record per call; file names and the streamed part file are described in
voicecore/record.py. A record cut short (its writer killed) may end in a truncated line:
``loads_partial`` drops it.

Line 1, the header, for ``turns``::

    {"voicecore_record": 1, "control": "turns", "call_sid": "CA..", "naming": "ga", "first_tag": 1,
     "flow": "scripted", "flow_args": {...}, "config": {ControllerConfig fields}}

for ``spine`` (``args``: ModelCallCore's keyword arguments, e.g. greet, gate_policy, safe_line)::

    {"voicecore_record": 1, "control": "spine", "call_sid": "CA..", "naming": "ga", "first_tag": 1,
     "args": {"greet": true, "gate_policy": "off", "safe_line": "..."}}

A header without ``control`` (records written before spine calls were recorded) means ``turns``.

Then one line per entry, in the order they happened: ``{"t": now_ns, "k": kind, ...}``

Inputs (fed to the driver; ``p`` is a playout snapshot: [played_tag, played_frames, played_at_ns,
sent_tag, sent_frames, carrier_empty_at_ns, cleared_at_ns] as read from the control block at that moment;
records from before cleared_at_ns have the first six and replay with 0 for it):

- ``start``  ``{}``                                     -> ``start(t)``
- ``model``  ``{"text": raw server event, "p": [...]}``  -> ``on_model_event(text, t, playout)``
- ``audio``  ``{"n": frames, "ulaw": base64?, "p"?}``   -> ``on_caller_audio(frames, t)`` (``ulaw``: the caller's
  frames, kept unless VOICECORE_RECORD_CALLER_AUDIO is off; without it the replay feeds ``n`` frames of
  silence: the content is the model's business, no decision; ``p``: a playout snapshot for the WAV, not fed).
  The ``SendToModel`` that carries the frames to the model (``driver.forwarding_actions``) is not
  recorded as an ``out``: the entry holds the frames, and the record holds no audio the settings leave out.
- ``dtmf``   ``{"digit": "5"}``                         -> ``on_dtmf(digit, t)``
- ``tick``   ``{"p": [...]}``                           -> ``on_tick(t, playout)``
- ``stop``   ``{}``                                     -> ``on_carrier_stop(t)``
- ``reopen`` ``{}``                                     -> ``reopen(t)`` (the model socket reconnected)
- ``resume`` ``{"cut", "restored"?}``                   -> ``resume(t, cut, restored)`` (a worker took over a live call it cannot
  rebuild: the session is configured, the call is not started over; ``cut``: an answer was cut off)
- ``lost``   ``{"reason", "fatal"}``                    -> ``on_model_lost(t, reason, fatal)`` (the model socket closed or
  could not be opened; fatal: the vendor's circuit breaker is open for a new call)
- ``verdict`` ``{"tag", "frames", "rejected", "reason", "citations", "p"}`` -> ``on_verdict(tag, frames, rejected, t, playout, reason, citations)``
  (the validator's verdict on a gated response; ``reason`` and ``citations`` (JSON text) are for the reader)
- ``snippets`` ``{"req": req_id, "snippets": [{"file", "line", "text"}]}`` -> ``on_snippets(req, snippets, t)``
  (the knowledge base's answer to a ``Retrieve`` action: recorded, so a replay needs no knowledge base)
- ``tool`` ``{"call_id", "ok", "output"}`` -> ``on_tool_result(call_id, ok, output, t)`` (a tool's result for a
  ``RunTool`` action: recorded, so a replay needs no tool server)
- ``tones`` ``{"call_id", "digits"}`` -> ``on_tones(call_id, digits, t)`` (a ``send_dtmf`` run's keys as in-band
  tones, on a carrier that takes keys only on the stream: the tones' audio is the driver's, not recorded)

Outputs: ``out`` ``{"a": action}``, one line per action the preceding input returned, in order;
``action`` is ``controller.action_to_dict`` (bytes as ``<field>_len`` and ``<field>_crc``: the audio
itself is already in the ``model`` lines). Notes the replay ignores: kind ``note`` ``{"what": .., ...}``
(e.g. marks, clears, carrier events the shell wants kept for a human reader).

Records hold what the caller said (transcripts, DTMF digits) and optionally their audio, as the agent's
storage tier keeps them (header ``privacy``: voicecore/privacy/records.py): they are personal data; write them with mode 0600 into a private directory, never into logs.
"""

from __future__ import annotations

import binascii
import copy
import json
from typing import Any, Callable, Iterable

import orjson

from voicecore import timing
from voicecore.call.actions import Action, Playout, action_to_dict
from voicecore.call.controller import ControllerStats
from voicecore.call.core import ModelCallCore
from voicecore.call.driver import Driver, forwarding_actions
from voicecore.errors import MisuseError
from voicecore.privacy.records import RecordPrivacy

RECORD_VERSION = 1
INPUT_KINDS = frozenset({"start", "resume", "model", "audio", "dtmf", "tick", "stop", "verdict", "snippets", "reopen", "tool",
                         "lost", "tones"})


def playout_list(playout: Playout) -> list[int]:
    return [playout.played_tag, playout.played_frames, playout.played_at_ns, playout.sent_tag,
            playout.sent_frames, playout.carrier_empty_at_ns, playout.cleared_at_ns]


def playout_from(values: list[int]) -> Playout:
    return Playout(*(int(v) for v in values))


ENDING_ACTIONS = frozenset({"HangUp", "Transfer", "CallOver"})


def ending_outcome(action: dict[str, Any]) -> str:
    """What a recorded ending action (``out`` entry's ``a``) says of how the call ended: ``hangup:<reason>``,
    ``transfer`` or ``caller_hangup``; "" for any other action. The store and the observers both read it."""
    kind = action.get("type")
    if kind == "HangUp":
        return f"hangup:{action.get('reason', '')}"
    if kind == "Transfer":
        return "transfer"
    if kind == "CallOver":
        return "caller_hangup"
    return ""


class CallRecorder:
    """Wraps a call's driver (a CallController or a SpineDriver) and is a driver itself (the ``Driver``
    protocol): same inputs, each recorded with the actions it returned. The header is the driver's own
    ``record_header``. Writing a record to a file is voicecore/record.py's business (``save``,
    ``save_new``, ``RecordFile``)."""

    def __init__(self, driver: Driver, keep_caller_audio: bool = False,
                 sink: Callable[[list[dict[str, Any]]], None] | None = None,
                 observer: Callable[[dict[str, Any]], None] | None = None,
                 privacy: RecordPrivacy | None = None) -> None:
        """``sink``: streaming; ``hand_off()`` passes it the entries recorded since the last hand-off and
        forgets them (``entries``, ``lines()`` and ``dumps()`` then cover only what was not handed off).
        None: the whole record stays in ``entries``. ``observer``: called with every entry as it is
        recorded (voicecore/observe/events.py's tap, for the live observers). ``privacy``: the agent's storage
        tier, applied to every entry before it is kept or observed (the driver gets the inputs as they are);
        the header says which, so a replay stores its actions the same way."""
        self.driver = driver
        self.privacy = privacy if privacy is not None and privacy.storage != "everything" else None
        self.sink = sink
        self.observer = observer
        self.handed_off = 0  # entries passed to the sink so far
        self.keep_caller_audio = privacy.keep_caller_audio(keep_caller_audio) if privacy is not None else keep_caller_audio
        self.header: dict[str, Any] = {"voicecore_record": RECORD_VERSION, **driver.record_header()}
        if self.privacy is not None:
            self.header["privacy"] = self.privacy.header()
        self.entries: list[dict[str, Any]] = []

    # --- the wrapped driver's description (the Driver protocol) ----------------------------------
    @property
    def call_sid(self) -> str:
        return self.driver.call_sid

    @property
    def control(self) -> str:
        return self.driver.control

    @property
    def core(self) -> ModelCallCore:
        return self.driver.core

    @property
    def stats(self) -> ControllerStats | None:
        return self.driver.stats

    @property
    def wants_ticks(self) -> bool:
        return self.driver.wants_ticks

    @property
    def quiet(self) -> bool:
        return self.driver.quiet

    @property
    def ended(self) -> bool:
        """The driver gave the call up (the failure policy): the shell stops reconnecting its model."""
        return bool(getattr(self.driver, "ended", False))

    def record_header(self) -> dict[str, Any]:
        return self.driver.record_header()

    def statistics(self) -> dict:
        return self.driver.statistics()

    # --- the driver's inputs, recorded -----------------------------------------------------------
    def start(self, now_ns: int, opening: str = "") -> list[Action]:
        if opening:  # recorded only when given: a record without it is as before
            return self._run({"t": now_ns, "k": "start", "opening": opening}, self.driver.start(now_ns, opening))
        return self._run({"t": now_ns, "k": "start"}, self.driver.start(now_ns))

    def on_model_event(self, text: str | bytes, now_ns: int, playout: Playout) -> list[Action]:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        entry = {"t": now_ns, "k": "model", "text": text, "p": playout_list(playout)}
        return self._run(entry, self.driver.on_model_event(text, now_ns, playout))

    def on_caller_audio(self, audio: bytes, now_ns: int, playout: Playout | None = None) -> list[Action]:
        """Recorded as ``n`` frames (their bytes too with ``keep_caller_audio``) and ``playout`` if given;
        the actions after the audio's own ``SendToModel`` as ``out`` lines."""
        entry: dict[str, Any] = {"t": now_ns, "k": "audio", "n": len(audio) // timing.FRAME_BYTES}
        if self.keep_caller_audio and audio:
            entry["ulaw"] = binascii.b2a_base64(audio, newline=False).decode("ascii")
        if playout is not None:
            entry["p"] = playout_list(playout)
        return self._run(entry, self.driver.on_caller_audio(audio, now_ns), forwarding_actions(audio))

    def on_dtmf(self, digit: str, now_ns: int) -> list[Action]:
        return self._run({"t": now_ns, "k": "dtmf", "digit": digit}, self.driver.on_dtmf(digit, now_ns))

    def on_tick(self, now_ns: int, playout: Playout) -> list[Action]:
        actions = self.driver.on_tick(now_ns, playout)
        if not actions and getattr(self.driver, "idle_ticks_change_nothing", False):
            return actions  # nothing to replay: a tick that decided nothing left the driver as it was
        return self._run({"t": now_ns, "k": "tick", "p": playout_list(playout)}, actions)

    def on_carrier_stop(self, now_ns: int) -> list[Action]:
        return self._run({"t": now_ns, "k": "stop"}, self.driver.on_carrier_stop(now_ns))

    def resume(self, now_ns: int, cut_off: bool = False, restored: dict | None = None) -> list[Action]:
        entry: dict = {"t": now_ns, "k": "resume", "cut": cut_off}
        if restored is not None:
            entry["restored"] = restored
        return self._run(entry, self.driver.resume(now_ns, cut_off, restored))

    def reopen(self, now_ns: int, reattached: bool = False) -> list[Action]:
        """The model socket reconnected: the driver configures the new session."""
        if reattached:
            return self._run({"t": now_ns, "k": "reopen", "reattached": True}, self.driver.reopen(now_ns, True))
        return self._run({"t": now_ns, "k": "reopen"}, self.driver.reopen(now_ns))

    def on_model_lost(self, now_ns: int, reason: str, fatal: bool = False) -> list[Action]:
        entry = {"t": now_ns, "k": "lost", "reason": reason, "fatal": fatal}
        return self._run(entry, self.driver.on_model_lost(now_ns, reason, fatal))

    def awaiting_model(self) -> bool:
        return self.driver.awaiting_model()

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int, playout: Playout,
                   reason: str = "", citations: str = "") -> list[Action]:
        entry = {"t": now_ns, "k": "verdict", "tag": tag, "frames": approved_frames, "rejected": rejected,
                 "reason": reason, "citations": citations, "p": playout_list(playout)}
        return self._run(entry, self.driver.on_verdict(tag, approved_frames, rejected, now_ns, playout, reason, citations))

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[Action]:
        entry = {"t": now_ns, "k": "snippets", "req": req_id, "snippets": list(snippets)}
        return self._run(entry, self.driver.on_snippets(req_id, snippets, now_ns))

    def on_tool_result(self, call_id: str, ok: bool, output: str, now_ns: int) -> list[Action]:
        entry = {"t": now_ns, "k": "tool", "call_id": call_id, "ok": ok, "output": output}
        return self._run(entry, self.driver.on_tool_result(call_id, ok, output, now_ns))

    def on_tones(self, call_id: str, digits: str, now_ns: int) -> list[Action]:
        entry = {"t": now_ns, "k": "tones", "call_id": call_id, "digits": digits}
        return self._run(entry, self.driver.on_tones(call_id, digits, now_ns))

    def note(self, now_ns: int, what: str, **fields: Any) -> None:
        """Something the replay does not feed (a mark echo, a clear sent): kept for the reader."""
        entry = {"t": now_ns, "k": "note", "what": what, **fields}
        entry = self.privacy.entry(entry) if self.privacy is not None else entry
        self.entries.append(entry)
        if self.observer is not None:  # the live summary reads some notes (a placed call's answer verdict), as a record's reader does
            self.observer(entry)

    def _run(self, entry: dict[str, Any], actions: list[Action], unrecorded: int = 0) -> list[Action]:
        """Record ``entry`` and ``actions`` after the first ``unrecorded`` (the caller audio's forwarding)."""
        privacy = self.privacy
        if privacy is not None:
            entry = privacy.entry(entry)
        self.entries.append(entry)
        observer = self.observer
        if observer is not None:
            observer(entry)
        t = entry["t"]
        for i in range(unrecorded, len(actions)):
            action = action_to_dict(actions[i])
            out = {"t": t, "k": "out", "a": privacy.action(action) if privacy is not None else action}
            self.entries.append(out)
            if observer is not None:
                observer(out)
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
        yield encode_line(self.header)
        for entry in self.entries:
            yield encode_line(entry)

    def dumps(self) -> str:
        return "\n".join(self.lines()) + "\n"

    def snapshot(self) -> CallRecorder:
        """The record so far, as a copy that does not grow (to write it from another thread)."""
        frozen = copy.copy(self)
        frozen.header, frozen.entries = dict(self.header), list(self.entries)
        return frozen


class RecordError(MisuseError, ValueError):
    """The file is not a voicecore record (or a version this code cannot read)."""


def loads(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    header, entries, _ = loads_partial(text, allow_truncated=False)
    return header, entries


def loads_partial(text: str | bytes, allow_truncated: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """(header, entries, truncated) of a record's text (or its file's bytes): with ``allow_truncated``, a last
    line cut short (no newline, not JSON: the writer was killed mid-write) is dropped and ``truncated`` is
    True. Parsed with orjson: most of a record is base64 audio in long strings, which it reads several times
    faster than the standard library (the recorder's ingest is the call store's write cost)."""
    newline = b"\n" if isinstance(text, bytes) else "\n"
    lines = [line for line in text.split(newline) if line and not line.isspace()]  # type: ignore[arg-type]
    truncated = False
    if allow_truncated and lines and not text.endswith(newline) and len(lines) > 1:  # type: ignore[arg-type]
        try:
            orjson.loads(lines[-1])
        except ValueError:
            lines.pop()
            truncated = True
    if not lines:
        raise RecordError("empty record")
    try:
        header = orjson.loads(lines[0])
        entries = [orjson.loads(line) for line in lines[1:]]
    except ValueError as exc:
        raise RecordError(f"not JSON lines: {exc}") from None
    if not isinstance(header, dict) or header.get("voicecore_record") != RECORD_VERSION:
        raise RecordError("missing or unsupported voicecore_record header")
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("t"), int) or not isinstance(entry.get("k"), str):
            raise RecordError("an entry lacks t or k")
    return header, entries, truncated


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # built once: json.dumps with options builds one per call


def encode_line(value: dict[str, Any]) -> str:
    """One record line (the header or an entry) as compact JSON text, without its newline."""
    return _ENCODER.encode(value)
