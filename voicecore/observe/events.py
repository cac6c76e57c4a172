"""A call's observable events, derived from its record entries (pure: no I/O, no clock).

Owns the observer event vocabulary (what ``/observe`` streams and the store's ``events`` table keeps) and
the walk that turns record entries (voicecore/call/record.py's format, as ``CallRecorder`` makes them)
into events. The model worker feeds every entry of a live call as it is recorded and ships the events
over the bus; the recorder numbers them (``seq``), stores them and publishes them to the console. The
walk must stay cheap on the model worker: audio and tick entries are skipped without a look, and a model
audio delta is parsed only while a response's first audio is still unseen.

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
- ``call.ended``             ``{"outcome"}``                 the call ended: ``hangup:<reason>``, ``transfer``, ``caller_hangup``, ``ended``

Texts are cut to ``MAX_TEXT`` characters (a bus message holds 64 KiB). Events carry what the caller said:
they are personal data like the record, shown only to observers with an API key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from voicecore.call.record import ENDING_ACTIONS, ending_outcome
from voicecore.realtime import events as rt

NS_PER_MS = 1_000_000
MAX_TEXT = 4000
CHUNK_BYTES = 40 * 1024  # one bus message of events: well under the bus's 64 KiB limit

EVENT_TYPES = (
    "call.started", "turn.caller_started", "turn.caller_ended", "transcript.delta", "response.started",
    "response.audio", "response.done", "bargein", "response.cancelled", "dtmf", "tool.called", "tool.result", "gate.verdict",
    "model.error", "model.lost", "fallback.line", "call.ended",
)

_SKIPPED_KINDS = frozenset({"audio", "tick", "snippets", "note", "reopen"})
_WATCHED_ACTIONS = frozenset({"OpenTag", "CancelTag", "PlayFallback"}) | ENDING_ACTIONS
_AUDIO_DELTA_MARK = rt.AUDIO_DELTA_MARK
_AGENT_DELTAS = rt.TRANSCRIPT_DELTA_TYPES
_AGENT_DONE = rt.TRANSCRIPT_DONE_TYPES
_AUDIO_DELTAS = rt.AUDIO_DELTA_TYPES


def _cut(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


class CallEventTap:
    """Feed a call's record entries in order (``feed``); take the events they produced (``take``).

    ``header``: the record header (``control``, ``flow``, ``flow_args``) for ``call.started``.
    """

    __slots__ = ("header", "resumed", "t0", "pending", "created", "last_input", "tags", "awaiting_audio", "outcome", "ended")

    def __init__(self, header: dict[str, Any] | None = None, resumed: bool = False) -> None:
        self.header = header or {}
        self.resumed = resumed
        self.t0: int | None = None
        self.pending: list[tuple[int, str, dict[str, Any]]] = []  # (t_ms, type, data), not taken yet
        self.created = ""  # the response the current model event created (its OpenTag follows as an out)
        self.last_input = ""  # the kind of the input whose actions follow: what a cancel among them means
        self.tags: dict[int, str] = {}  # playout tag -> response id
        self.awaiting_audio: set[str] = set()  # responses created whose first audio delta is not seen yet
        self.outcome = ""
        self.ended = False

    def take(self) -> list[tuple[int, str, dict[str, Any]]]:
        events, self.pending = self.pending, []
        return events

    def feed(self, entry: dict[str, Any]) -> None:
        kind = entry.get("k")
        if kind in _SKIPPED_KINDS or self.ended:
            if kind != "note":
                self.last_input, self.created = kind, ""
            return
        t = int(entry.get("t", 0))
        if self.t0 is None:
            self.t0 = t
        at_ms = (t - self.t0) // NS_PER_MS
        if kind == "out":
            action = entry.get("a") or {}
            if action.get("type") in _WATCHED_ACTIONS:
                self._action(action, at_ms)
            return
        self.created = ""
        self.last_input = kind
        if kind == "model":
            self._model_text(entry.get("text"), at_ms)
        elif kind == "start":
            self._emit(at_ms, "call.started", self._describe_call())
        elif kind == "dtmf":
            self._emit(at_ms, "dtmf", {"digit": _cut(entry.get("digit", ""))})
        elif kind == "tool":
            self._emit(at_ms, "tool.result", {"call_id": _cut(entry.get("call_id", "")), "ok": bool(entry.get("ok")),
                                              "output": _cut(entry.get("output", ""))})
        elif kind == "verdict":
            self._emit(at_ms, "gate.verdict", {
                "tag": int(entry.get("tag", 0)), "rejected": bool(entry.get("rejected")), "frames": int(entry.get("frames", 0)),
                "reason": _cut(entry.get("reason", "")), "citations": _cut(entry.get("citations", ""))})
        elif kind == "lost":
            self._emit(at_ms, "model.lost", {"reason": _cut(str(entry.get("reason", ""))), "fatal": bool(entry.get("fatal"))})
        elif kind == "stop":
            self.end(t, self.outcome or "caller_hangup")

    def end(self, now_ns: int, outcome: str = "") -> None:
        """The call is over (its stop, or the worker finishing it): ``call.ended`` once."""
        if self.ended:
            return
        if self.t0 is None:
            self.t0 = now_ns
        self._emit((now_ns - self.t0) // NS_PER_MS, "call.ended", {"outcome": outcome or self.outcome or "ended"})
        self.ended = True

    # --- pieces -------------------------------------------------------------------------------------------
    def _emit(self, at_ms: int, kind: str, data: dict[str, Any]) -> None:
        self.pending.append((at_ms, kind, data))

    def _describe_call(self) -> dict[str, Any]:
        control = str(self.header.get("control", "turns"))
        flow = str(self.header.get("flow", "")) if control == "turns" else ""
        agent = ""
        if flow == "agent":
            spec = (self.header.get("flow_args") or {}).get("spec") or {}
            agent = str(spec.get("name", "")) if isinstance(spec, dict) else ""
        return {"control": control, "flow": flow, "agent": agent, "resumed": self.resumed}

    def _model_text(self, text: object, at_ms: int) -> None:
        if not isinstance(text, str):
            return
        if _AUDIO_DELTA_MARK in text[:64] and not self.awaiting_audio:
            return  # the bulk of a call's model events: audio of a response already seen talking
        try:
            event = orjson.loads(text)
        except ValueError:
            return
        if isinstance(event, dict):
            self._model_event(event, at_ms)

    def _model_event(self, event: dict[str, Any], at_ms: int) -> None:
        kind = event.get("type")
        if kind in _AUDIO_DELTAS:
            response_id = str(event.get("response_id", ""))
            if response_id in self.awaiting_audio:
                self.awaiting_audio.discard(response_id)
                self._emit(at_ms, "response.audio", {"response_id": response_id})
        elif kind in _AGENT_DELTAS:
            self._emit(at_ms, "transcript.delta", {"role": "agent", "text": _cut(event.get("delta", "")), "final": False,
                                                   "response_id": str(event.get("response_id", ""))})
        elif kind in _AGENT_DONE:
            self._emit(at_ms, "transcript.delta", {"role": "agent", "text": _cut(event.get("transcript", "")), "final": True,
                                                   "response_id": str(event.get("response_id", ""))})
        elif kind == "input_audio_buffer.speech_started":
            self._emit(at_ms, "turn.caller_started", {"item_id": str(event.get("item_id", ""))})
        elif kind == "input_audio_buffer.speech_stopped":
            self._emit(at_ms, "turn.caller_ended", {"item_id": str(event.get("item_id", ""))})
        elif kind == "conversation.item.input_audio_transcription.delta":
            self._emit(at_ms, "transcript.delta", {"role": "caller", "text": _cut(event.get("delta", "")), "final": False,
                                                   "item_id": str(event.get("item_id", ""))})
        elif kind == rt.CALLER_TRANSCRIPT_DONE:
            self._emit(at_ms, "transcript.delta", {"role": "caller", "text": _cut(event.get("transcript", "")), "final": True,
                                                   "item_id": str(event.get("item_id", ""))})
        elif kind == "response.created":
            response_id = str((event.get("response") or {}).get("id", ""))
            self.created = response_id
            self.awaiting_audio.add(response_id)
            self._emit(at_ms, "response.started", {"response_id": response_id})
        elif kind == "response.done":
            response = event.get("response") or {}
            response_id = str(response.get("id", ""))
            self.awaiting_audio.discard(response_id)
            self._emit(at_ms, "response.done", {"response_id": response_id, "status": str(response.get("status", ""))})
        elif kind == "response.function_call_arguments.done":
            self._emit(at_ms, "tool.called", {"call_id": str(event.get("call_id", "")), "name": str(event.get("name", "")),
                                              "arguments": _cut(event.get("arguments", ""))})
        elif kind == "error":
            error = event.get("error") or {}
            if not isinstance(error, dict):
                error = {"message": str(error)}
            self._emit(at_ms, "model.error", {"code": str(error.get("code") or error.get("type") or ""),
                                              "message": _cut(error.get("message", ""))})

    def _action(self, action: dict[str, Any], at_ms: int) -> None:
        kind = action["type"]
        if kind == "OpenTag":
            if self.created:
                self.tags[int(action.get("tag", 0))] = self.created
        elif kind == "CancelTag":
            tag = int(action.get("tag", 0))
            response_id = self.tags.get(tag, "")
            if self.last_input == "verdict":
                self._emit(at_ms, "response.cancelled", {"tag": tag, "response_id": response_id, "cause": "gate"})
            elif self.created and response_id != self.created:
                self._emit(at_ms, "response.cancelled", {"tag": tag, "response_id": response_id, "cause": "superseded"})
            else:
                self._emit(at_ms, "bargein", {"tag": tag, "response_id": response_id})
        elif kind == "PlayFallback":
            self._emit(at_ms, "fallback.line", {"kind": _cut(str(action.get("kind", "")))})
        elif not self.outcome:
            self.outcome = ending_outcome(action)


def events_of_record(header: dict[str, Any], entries: list[dict[str, Any]], complete: bool = True) -> list[tuple[int, str, dict[str, Any]]]:
    """Every event of a finished record (the same walk as live): for a call whose live events were lost."""
    tap = CallEventTap(header)
    for entry in entries:
        tap.feed(entry)
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
