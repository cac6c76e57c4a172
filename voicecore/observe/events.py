"""A call's observable events, derived from its record entries (pure: no I/O, no clock).

Owns the observer event vocabulary (what ``/observe`` streams and the store's ``events`` table keeps) and
what turns record entries (voicecore/call/record.py's format, as ``CallRecorder`` makes them) into events:
``CallEventTap``, a consumer of the one walk over a record's entries (voicecore/call/record_reader.py), which
keeps the call's clock, parses each model event once and passes over the audio deltas no reader awaits. The
model worker feeds every entry of a live call as it is recorded (one reader for this and the store's
summary) and ships the events over the bus; the recorder numbers them (``seq``), stores them and publishes
them to the console. The tap reads what it must on the model worker's hot path and no more: no audio or
tick entry, and an audio delta only while a response's first audio is still unseen.

Events (``type`` and the fields of ``data``; ``t_ms`` is from the call's first entry):

- ``call.started``           ``{"control", "flow", "agent", "resumed"}`` the call began (``resumed``: a restarted
  model worker took the call over; its ``t_ms`` count from then)
- ``turn.caller_started``    ``{"item_id"}``                 the model heard the caller start speaking
- ``turn.caller_ended``      ``{"item_id"}``                 ... and stop
- ``transcript.delta``       ``{"role": "caller"|"agent", "text", "final": bool, "response_id"|"item_id"}``
  words of either side as they are recognised (``final``: the whole utterance, after its deltas; a viewer replaces the deltas with it)
- ``response.started``       ``{"response_id"}``             the model created a response
- ``response.audio``         ``{"response_id"}``             its first audio delta (the agent starts talking)
- ``response.done``          ``{"response_id", "status"}``   the model finished it (``status`` as the vendor says it)
- ``bargein``                ``{"tag", "response_id"}``      the caller talked over the response playing
- ``response.cancelled``     ``{"tag", "response_id", "cause"}`` cancelled for another reason: ``superseded`` (a newer
  response began while it was in flight) or ``gate`` (the validator rejected it)
- ``dtmf``                   ``{"digit"}``                  the caller pressed a key
- ``tool.called``            ``{"call_id", "name", "arguments"}`` the model called a function
- ``tool.result``            ``{"call_id", "ok", "output"}`` its tool's result (what the model is given)
- ``gate.verdict``           ``{"tag", "rejected", "frames", "reason", "citations"}`` the validator approved a
  response up to ``frames``, or rejected it
- ``model.error``            ``{"code", "message"}``        an ``error`` event from the model vendor
- ``model.lost``             ``{"reason", "fatal"}``        the model socket dropped or could not open (``fatal``: none
  will be opened again for this call)
- ``fallback.line``          ``{"kind"}``                   the pacer played a shipped hold line or apology
- ``call.ended``             ``{"outcome"}``                 the call ended: ``hangup:<reason>``, ``transfer``, ``caller_hangup``, ``ended``,
  ``stream_lost`` (its gateway died and no stream re-attached it)

Texts are cut to ``MAX_TEXT`` characters (a bus message holds 64 KiB). Events carry what the caller said:
they are personal data like the record, shown only to observers with an API key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from voicecore.call.record_reader import (ActionHandler, EventHandler, InputHandler, RecordConsumer, RecordReader,
                                          read_entries)
from voicecore.realtime import events as rt

NS_PER_MS = 1_000_000
MAX_TEXT = 4000
CHUNK_BYTES = 40 * 1024  # one bus message of events: well under the bus's 64 KiB limit

EVENT_TYPES = (
    "call.started", "turn.caller_started", "turn.caller_ended", "transcript.delta", "response.started",
    "response.audio", "response.done", "bargein", "response.cancelled", "dtmf", "tool.called", "tool.result", "gate.verdict",
    "model.error", "model.lost", "fallback.line", "call.ended",
)


def _cut(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


class CallEventTap(RecordConsumer):
    """Feed a call's record entries in order (``feed``, or a RecordReader it shares); take the events they
    produced (``take``).

    ``header``: the record header (``control``, ``flow``, ``flow_args``) for ``call.started``.
    """

    __slots__ = ("header", "resumed", "pending", "awaiting_audio", "ended")

    def __init__(self, header: dict[str, Any] | None = None, resumed: bool = False) -> None:
        super().__init__()
        self.header = header or {}
        self.resumed = resumed
        self.pending: list[tuple[int, str, dict[str, Any]]] = []  # (t_ms, type, data), not taken yet
        self.awaiting_audio: set[str] = set()  # responses created whose first audio delta is not seen yet
        self.ended = False

    @property
    def t0(self) -> int | None:
        """The monotonic ns the events' ``t_ms`` count from (the call's first entry); None before any."""
        return self.reader.t0 if self.reader is not None else None

    def take(self) -> list[tuple[int, str, dict[str, Any]]]:
        events, self.pending = self.pending, []
        return events

    def end(self, now_ns: int, outcome: str = "") -> None:
        """The call is over (its stop, or the worker finishing it): ``call.ended`` once."""
        if self.ended:
            return
        reader = self.reader if self.reader is not None else RecordReader(self)
        self._emit(reader.at_ms(now_ns), "call.ended", {"outcome": outcome or reader.outcome or "ended"})
        self.ended = True
        self.awaiting_audio.clear()  # nothing is read after the end

    # --- what the tap reads (RecordConsumer) ----------------------------------------------------------------
    def input_handlers(self) -> Mapping[str, InputHandler]:
        return {"start": self._start, "dtmf": self._dtmf, "tool": self._tool, "verdict": self._verdict,
                "lost": self._lost, "stop": self._stop}

    def action_handlers(self) -> Mapping[str, ActionHandler]:
        return {"CancelTag": self._cancel, "PlayFallback": self._fallback}

    def event_handlers(self) -> Mapping[type, EventHandler]:
        return {rt.AudioDelta: self._audio, rt.TranscriptDelta: self._agent_delta, rt.TranscriptDone: self._agent_done,
                rt.SpeechStarted: self._speech_started, rt.SpeechStopped: self._speech_stopped,
                rt.InputTranscriptionDelta: self._caller_delta, rt.InputTranscriptionCompleted: self._caller_done,
                rt.ResponseCreated: self._created, rt.ResponseDone: self._done,
                rt.FunctionCallArgumentsDone: self._tool_called, rt.RealtimeError: self._error}

    # --- entries ----------------------------------------------------------------------------------------
    def _emit(self, at_ms: int, kind: str, data: dict[str, Any]) -> None:
        if not self.ended:
            self.pending.append((at_ms, kind, data))

    def _start(self, entry: dict[str, Any], at_ms: int) -> None:
        self._emit(at_ms, "call.started", self._describe_call())

    def _dtmf(self, entry: dict[str, Any], at_ms: int) -> None:
        self._emit(at_ms, "dtmf", {"digit": _cut(entry.get("digit", ""))})

    def _tool(self, entry: dict[str, Any], at_ms: int) -> None:
        self._emit(at_ms, "tool.result", {"call_id": _cut(entry.get("call_id", "")), "ok": bool(entry.get("ok")),
                                          "output": _cut(entry.get("output", ""))})

    def _verdict(self, entry: dict[str, Any], at_ms: int) -> None:
        self._emit(at_ms, "gate.verdict", {
            "tag": int(entry.get("tag", 0)), "rejected": bool(entry.get("rejected")), "frames": int(entry.get("frames", 0)),
            "reason": _cut(entry.get("reason", "")), "citations": _cut(entry.get("citations", ""))})

    def _lost(self, entry: dict[str, Any], at_ms: int) -> None:
        self._emit(at_ms, "model.lost", {"reason": _cut(str(entry.get("reason", ""))), "fatal": bool(entry.get("fatal"))})

    def _stop(self, entry: dict[str, Any], at_ms: int) -> None:
        self.end(entry["t"])

    def _describe_call(self) -> dict[str, Any]:
        control = str(self.header.get("control", "turns"))
        flow = str(self.header.get("flow", "")) if control == "turns" else ""
        agent = ""
        if flow == "agent":
            spec = (self.header.get("flow_args") or {}).get("spec") or {}
            agent = str(spec.get("name", "")) if isinstance(spec, dict) else ""
        return {"control": control, "flow": flow, "agent": agent, "resumed": self.resumed}

    # --- the model's events -------------------------------------------------------------------------------
    def _audio(self, event: rt.AudioDelta, at_ms: int) -> None:
        if event.response_id in self.awaiting_audio:
            self.awaiting_audio.discard(event.response_id)
            self._emit(at_ms, "response.audio", {"response_id": event.response_id})

    def _agent_delta(self, event: rt.TranscriptDelta, at_ms: int) -> None:
        self._emit(at_ms, "transcript.delta", {"role": "agent", "text": _cut(event.delta), "final": False,
                                               "response_id": event.response_id})

    def _agent_done(self, event: rt.TranscriptDone, at_ms: int) -> None:
        self._emit(at_ms, "transcript.delta", {"role": "agent", "text": _cut(event.transcript), "final": True,
                                               "response_id": event.response_id})

    def _speech_started(self, event: rt.SpeechStarted, at_ms: int) -> None:
        self._emit(at_ms, "turn.caller_started", {"item_id": event.item_id})

    def _speech_stopped(self, event: rt.SpeechStopped, at_ms: int) -> None:
        self._emit(at_ms, "turn.caller_ended", {"item_id": event.item_id})

    def _caller_delta(self, event: rt.InputTranscriptionDelta, at_ms: int) -> None:
        self._emit(at_ms, "transcript.delta", {"role": "caller", "text": _cut(event.delta), "final": False,
                                               "item_id": event.item_id})

    def _caller_done(self, event: rt.InputTranscriptionCompleted, at_ms: int) -> None:
        self._emit(at_ms, "transcript.delta", {"role": "caller", "text": _cut(event.transcript), "final": True,
                                               "item_id": event.item_id})

    def _created(self, event: rt.ResponseCreated, at_ms: int) -> None:
        if not self.ended:
            self.awaiting_audio.add(event.response_id)
        self._emit(at_ms, "response.started", {"response_id": event.response_id})

    def _done(self, event: rt.ResponseDone, at_ms: int) -> None:
        self.awaiting_audio.discard(event.response_id)
        self._emit(at_ms, "response.done", {"response_id": event.response_id, "status": event.status})

    def _tool_called(self, event: rt.FunctionCallArgumentsDone, at_ms: int) -> None:
        self._emit(at_ms, "tool.called", {"call_id": event.call_id, "name": event.name or "", "arguments": _cut(event.arguments)})

    def _error(self, event: rt.RealtimeError, at_ms: int) -> None:
        self._emit(at_ms, "model.error", {"code": event.code or event.type, "message": _cut(event.message)})

    # --- the driver's actions -----------------------------------------------------------------------------
    def _cancel(self, action: dict[str, Any], at_ms: int) -> None:
        reader = self.reader
        assert reader is not None
        tag = int(action.get("tag", 0))
        response_id = reader.tags.get(tag, "")
        if reader.input_kind == "verdict":
            self._emit(at_ms, "response.cancelled", {"tag": tag, "response_id": response_id, "cause": "gate"})
        elif reader.created and response_id != reader.created:
            self._emit(at_ms, "response.cancelled", {"tag": tag, "response_id": response_id, "cause": "superseded"})
        else:
            self._emit(at_ms, "bargein", {"tag": tag, "response_id": response_id})

    def _fallback(self, action: dict[str, Any], at_ms: int) -> None:
        self._emit(at_ms, "fallback.line", {"kind": _cut(str(action.get("kind", "")))})


def events_of_record(header: dict[str, Any], entries: list[dict[str, Any]], complete: bool = True) -> list[tuple[int, str, dict[str, Any]]]:
    """Every event of a finished record (the same walk as live): for a call whose live events were lost."""
    tap = CallEventTap(header)
    read_entries(RecordReader(tap), entries)
    if complete and entries:
        tap.end(int(entries[-1]["t"]))
    return tap.take()


def json_array_chunks(items: Iterable[Any], max_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, str]]:
    """``items`` as JSON array texts of at most about ``max_bytes`` each (one item may exceed it alone), for bus
    messages (64 KiB at most): (how many items, text)."""
    chunk: list[bytes] = []
    size = 0
    for item in items:
        encoded = orjson.dumps(item)
        if chunk and size + len(encoded) > max_bytes:
            yield len(chunk), (b"[" + b",".join(chunk) + b"]").decode()
            chunk, size = [], 0
        chunk.append(encoded)
        size += len(encoded) + 1
    if chunk:
        yield len(chunk), (b"[" + b",".join(chunk) + b"]").decode()


def observe_chunks(events: list[tuple[str, float, int, str, dict[str, Any]]]) -> Iterator[tuple[int, str]]:
    """``events`` (call_sid, at, t_ms, type, data) as JSON texts of ``[[call_sid, at, t_ms, type, data], ...]``
    (``ObserveEvents.events``); texts are cut to MAX_TEXT characters, so one event fits a message alone."""
    return json_array_chunks(events)
