"""One walk over a call record's entries for everything that reads them (pure: no I/O, no clock).

Owns reading voicecore/call/record.py's entries in order, once, for several consumers at a time: live (the
model worker hands ``feed`` every entry its recorder makes, for the observer events and the store's
summary) or from a file (``read_entries`` over what voicecore/record.py loaded: the call store's ingest,
the replay and the console's recording). The reader keeps what every consumer needs alike:

- the call's clock: ``t0`` (the first entry's ``t``), ``last_t``, and per entry ``at_ms`` from ``t0``;
- ``input_kind``: the kind of the input whose actions follow (a ``note`` is no input: it changes nothing);
- ``created``: the response the current input's model event created (its ``OpenTag`` follows among the
  input's actions); ``tags`` / ``tag_of``: which playout tag plays which response, and back;
- ``outcome``: how the call ended: the first ending action's (``ending_outcome``), or ``caller_hangup`` for a
  carrier ``stop`` with none before it; "" while it runs (its readers say ``ended``);

and parses each model event's text once, with voicecore/realtime/events.py ``read_server_event``, into the
typed event every consumer of its type is handed (a Gemini Live call's messages, into the Realtime events of
the same conversation: voicecore/gemini/turns.py; their transcripts come only in pieces, so the whole texts
the account joins from the stored pieces are redacted once more, under the tier of the record whose header
its consumers were made of: an e-mail address cut across two pieces is whole in neither). Audio deltas are
most of a call's model events and say nothing but that a response is talking: one is parsed only while a
consumer awaits a response's audio (``awaiting_audio``), the others are passed over on a look at the head of
their text.

A consumer (``RecordConsumer``) names what it reads, and nothing else is parsed for it or handed to it (a
tick, a ``WriteFrames`` that no consumer reads costs the reader a dict lookup):

- ``input_handlers()``: entry kind -> ``handler(entry, at_ms)``; ``ANY`` for every kind but ``out`` and
  ``note`` (the replay: an unknown kind ends an input's actions too);
- ``action_handlers()``: recorded action type -> ``handler(action, at_ms)`` (an ``out`` entry's ``a``); ``ANY``
  for every one;
- ``event_handlers()``: server event class -> ``handler(event, at_ms)``, after the model entry's input handler;
- ``awaiting_audio``: the responses whose audio deltas it still needs (a set it keeps, never rebinds).

The consumers: the live observer events (voicecore/observe/events.py ``CallEventTap``), the call store's
summary (voicecore/store/summary.py ``RecordSummarizer``) and the replay (voicecore/replay.py ``Replayer``,
which the console's recording, voicecore/console/media.py, is made by).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from voicecore import timing
from voicecore.call.record import ENDING_ACTIONS, ending_outcome
from voicecore.gemini import protocol as gemini_protocol
from voicecore.gemini.turns import GeminiTurns, is_gemini_text
from voicecore.privacy.records import RecordPrivacy
from voicecore.realtime import events as rt

NS_PER_MS = 1_000_000
_JOINED_TEXTS = (rt.TranscriptDone, rt.InputTranscriptionCompleted)  # a Gemini account's whole texts
ANY = "*"  # a consumer's handler for every input kind (but out and note) or every action type

InputHandler = Callable[[dict[str, Any], int], None]  # (entry, at_ms)
ActionHandler = Callable[[dict[str, Any], int], None]  # (action, at_ms)
EventHandler = Callable[[Any, int], None]  # (a typed server event, at_ms)


def received_at_ns(t_ns: int, frames: int) -> int:
    """When the first frame of an ``audio`` entry recorded at ``t_ns`` with ``frames`` frames arrived: the model
    worker appends the caller's audio in batches, what came since the last one, so the batch's frames arrived
    in the ``frames`` x 20 ms before it was recorded (the call's audio clock: the store's speech times and the
    console's recording place the caller's audio by it)."""
    return t_ns - frames * timing.FRAME_NS


class RecordConsumer:
    """What a RecordReader feeds (module docstring): it reads nothing unless it says so. Fed alone (``feed``),
    a consumer walks with a reader of its own; ``reader`` is the one that feeds it."""

    __slots__ = ("reader",)

    awaiting_audio: set[str]

    def __init__(self) -> None:
        self.reader: RecordReader | None = None

    def input_handlers(self) -> Mapping[str, InputHandler]:
        return {}

    def action_handlers(self) -> Mapping[str, ActionHandler]:
        return {}

    def event_handlers(self) -> Mapping[type, EventHandler]:
        return {}

    def feed(self, entry: dict[str, Any]) -> None:
        """One entry, read by this consumer alone (a reader shared with others feeds them all at once)."""
        reader = self.reader if self.reader is not None else RecordReader(self)
        reader.feed(entry)


class RecordReader:
    """Feed a call's record entries in order (``feed``, or ``read_entries``); each consumer gets what it reads."""

    __slots__ = ("consumers", "t0", "last_t", "input_kind", "created", "tags", "tag_of", "outcome", "_inputs",
                 "_any_input", "_input_cache", "_actions", "_any_action", "_action_cache", "_events", "_audio_waits",
                 "_gemini", "_privacy")

    def __init__(self, *consumers: RecordConsumer) -> None:
        self.consumers = consumers
        # the record's storage tier, from a consumer made of its header (the observer tap, the store's summary)
        headers = [h for h in (getattr(c, "header", None) for c in consumers) if isinstance(h, dict)]
        privacy = RecordPrivacy.from_header(headers[0]) if headers else None
        self._privacy = privacy if privacy is not None and privacy.changes_text else None
        self.t0: int | None = None
        self.last_t = 0
        self.input_kind = ""
        self.created = ""
        self.tags: dict[int, str] = {}  # playout tag -> the response it plays (OpenTag after response.created)
        self.tag_of: dict[str, int] = {}  # ... and back
        self.outcome = ""
        inputs: dict[str, list[InputHandler]] = {}
        actions: dict[str, list[ActionHandler]] = {}
        events: dict[type, list[EventHandler]] = {}
        audio_waits: list[set[str]] = []
        for consumer in consumers:
            if consumer.reader is not None and consumer.reader is not self:
                raise ValueError(f"{type(consumer).__name__} is read by another reader already")
            consumer.reader = self
            for kind, handler in consumer.input_handlers().items():
                inputs.setdefault(kind, []).append(handler)
            for kind, handler in consumer.action_handlers().items():
                actions.setdefault(kind, []).append(handler)
            reads = consumer.event_handlers()
            for kind, handler in reads.items():
                events.setdefault(kind, []).append(handler)
            if rt.AudioDelta in reads:
                audio_waits.append(consumer.awaiting_audio)
        self._any_input = inputs.pop(ANY, [])
        self._inputs = inputs
        self._input_cache: dict[str, tuple[InputHandler, ...]] = {}
        self._any_action = actions.pop(ANY, [])
        self._actions = actions
        self._action_cache: dict[Any, tuple[ActionHandler, ...]] = {}
        self._events = {kind: tuple(handlers) for kind, handlers in events.items()}
        self._audio_waits = audio_waits
        self._gemini: GeminiTurns | None = None  # a Gemini Live call's turns (its model events are Gemini's)

    def at_ms(self, t_ns: int) -> int:
        """``t_ns`` on the call's clock (ms from its first entry); a call with no entry yet starts its clock here."""
        if self.t0 is None:
            self.t0 = t_ns
        return (t_ns - self.t0) // NS_PER_MS

    def feed(self, entry: dict[str, Any]) -> None:
        kind = entry["k"]
        t = entry["t"]
        t0 = self.t0
        if t0 is None:
            t0 = self.t0 = t
        self.last_t = t
        at_ms = (t - t0) // NS_PER_MS
        if kind == "out":
            self._action(entry.get("a") or {}, at_ms)
            return
        if kind != "note":
            self.input_kind, self.created = kind, ""
            if kind == "stop" and not self.outcome:
                self.outcome = "caller_hangup"  # the carrier's stop with no end before it (the spine returns none)
        handlers = self._input_cache.get(kind)
        if handlers is None:
            handlers = self._input_cache[kind] = (*self._inputs.get(kind, ()), *(self._any_input if kind != "note" else ()))
        for handler in handlers:
            handler(entry, at_ms)
        if kind == "model" and self._events:
            self._model(entry.get("text"), at_ms)
        elif kind in ("reopen", "lost", "resume") and self._gemini is not None:
            # the connection is gone: a Gemini turn in progress ends there, as the driver ended it
            for event in self._gemini.lost():
                for handler in self._events.get(type(event), ()):
                    handler(event, at_ms)

    def _action(self, action: dict[str, Any], at_ms: int) -> None:
        kind = action.get("type")
        if kind == "OpenTag" and self.created:
            tag = int(action.get("tag", 0))
            self.tags[tag] = self.created
            self.tag_of[self.created] = tag
        if kind in ("SendToModel", "CancelTag") and self._events:
            self._gemini_action(kind, action, at_ms)
        handlers = self._action_cache.get(kind)
        if handlers is None:
            handlers = self._action_cache[kind] = (*self._actions.get(kind, ()), *self._any_action)  # type: ignore[arg-type]
        for handler in handlers:
            handler(action, at_ms)
        if kind in ENDING_ACTIONS and not self.outcome:
            self.outcome = ending_outcome(action)

    def _model(self, text: object, at_ms: int) -> None:
        if not isinstance(text, str):
            return
        if self._gemini is not None or is_gemini_text(text):
            self._gemini_model(text, at_ms)
            return
        if rt.AUDIO_DELTA_MARK in text[:64] and not any(self._audio_waits):
            return  # the bulk of a call's model events: audio of responses no consumer awaits
        event = rt.read_server_event(text)
        kind = type(event)
        if kind is rt.ResponseCreated:
            self.created = event.response_id  # type: ignore[union-attr]
        for handler in self._events.get(kind, ()):
            handler(event, at_ms)

    def _gemini_action(self, kind: str, action: dict[str, Any], at_ms: int) -> None:
        """What the driver did that the account of a Gemini call's turns follows: its ``setup`` (whether the
        server cuts a turn on the caller's activity), and a tag it cancelled while the server went on with
        that turn (turn-taking by words: the driver, not the server, cut it)."""
        if kind == "SendToModel":
            text = action.get("text")
            if isinstance(text, str) and text.startswith('{"setup"'):
                if self._gemini is None:
                    self._gemini = GeminiTurns()
                self._gemini.configured_by(text)
            return
        gemini = self._gemini
        if gemini is None or gemini.server_interrupts or not gemini.response_id:
            return
        if self.tags.get(int(action.get("tag", 0))) == gemini.response_id:
            for event in gemini.cut_turn():
                for handler in self._events.get(type(event), ()):
                    handler(event, at_ms)

    def _gemini_model(self, text: str, at_ms: int) -> None:
        """A Gemini server message: the Realtime events of the same conversation (voicecore/gemini/turns.py,
        the account the call's driver kept, so response ids and tags agree)."""
        if self._gemini is None:
            self._gemini = GeminiTurns()
        for message_event in gemini_protocol.parse_server_message(text):
            for event in self._gemini.feed(message_event):
                kind = type(event)
                if self._privacy is not None and kind in _JOINED_TEXTS:
                    event = dataclasses.replace(event, transcript=self._privacy.text(event.transcript))  # type: ignore[call-arg]
                if kind is rt.ResponseCreated:
                    self.created = event.response_id  # type: ignore[attr-defined]
                for handler in self._events.get(kind, ()):
                    handler(event, at_ms)


def read_entries(reader: RecordReader, entries: Iterable[dict[str, Any]]) -> RecordReader:
    """Feed ``entries`` (a record's, as voicecore/record.py loads them) to ``reader``; returns it."""
    feed = reader.feed
    for entry in entries:
        feed(entry)
    return reader
