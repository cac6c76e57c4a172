"""A call record -> a CallSummary: what the call store keeps of a call (pure: no I/O, no clock).

Owns the turn timing model read from a record (voicecore/call/record.py format). Times are milliseconds
from the record's first entry (records hold monotonic nanoseconds); the wall-clock start is the caller's
business (``wall_end_s``: when the record was finished, e.g. its file's mtime), so this stays pure.

A turn is one caller utterance (the model's ``speech_started``; a transcript without one opens a turn
too), with, in milliseconds from the call's start:

- ``speech_started_ms`` / ``speech_stopped_ms``: the model's VAD edges of the utterance;
- ``transcript``: what the model heard (``conversation.item.input_audio_transcription.completed``);
- ``response_requested_ms``: the driver's next ``response.create`` after the utterance (turns control;
  the spine lets the server create responses, so it is None there);
- ``response_id`` / ``first_audio_ms``: the responses created after the utterance belong to the turn,
  until the next utterance or until the first of them with audio is done (a later one, e.g. a silence
  check-in, is no answer); the first audio delta of one of them is when the agent's answer started; with a
  tool call in between, that is the answer after the tool, the caller's wait;
- ``barged_in_ms``: a ``CancelTag`` of the tag playing one of the turn's responses (the caller talked over
  it; the ``OpenTag`` the driver returns for a ``response.created`` ties the tag to the response);
  ``truncated_at_ms``: the ``audio_end_ms`` of the ``conversation.item.truncate`` that followed (how much of
  the answer the caller heard);
- ``agent_text``: the transcripts of the turn's responses;
- ``first_played_ms`` / ``played_ms``: when the caller began to hear the answer (its first frame played, from
  the playout snapshots: the first mark of its tag echoed, less the frames before that mark) and how much of
  it they heard (the tag's played frames, last seen); None when no snapshot shows it played.

Model responses nobody asked for in a turn (the greeting) appear in ``transcripts`` only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from voicecore.call.record import ENDING_ACTIONS, ending_outcome
from voicecore.realtime import events as rt

NS_PER_MS = 1_000_000
FRAME_MS = 20
AUDIO_DELTAS = rt.AUDIO_DELTA_TYPES
AGENT_TRANSCRIPTS = rt.TRANSCRIPT_DONE_TYPES
AGENT_TRANSCRIPT_DELTAS = rt.TRANSCRIPT_DELTA_TYPES
CALLER_TRANSCRIPT = rt.CALLER_TRANSCRIPT_DONE
_AUDIO_DELTA_MARK = rt.AUDIO_DELTA_MARK


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    index: int
    speech_started_ms: int | None
    speech_stopped_ms: int | None
    transcript: str
    response_requested_ms: int | None
    response_id: str
    first_audio_ms: int | None
    barged_in_ms: int | None
    truncated_at_ms: int | None
    agent_text: str
    first_played_ms: int | None = None
    played_ms: int | None = None

    @property
    def latency_ms(self) -> int | None:
        """From the end of the caller's speech to the agent's first audio (what the caller waits)."""
        if self.speech_stopped_ms is None or self.first_audio_ms is None:
            return None
        return self.first_audio_ms - self.speech_stopped_ms


@dataclasses.dataclass(frozen=True, slots=True)
class Transcript:
    speaker: str  # "caller" or "agent"
    text: str
    at_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """A function the model called (``response.function_call_arguments.done``), and, when the driver ran its
    tool (``RunTool``), the result (``tool`` input). ``ran`` False: an action or a confirmation, no tool."""

    call_id: str
    name: str
    arguments: str
    called_ms: int | None
    ran: bool
    ok: bool | None
    output: str
    result_ms: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    tag: int
    rejected: bool
    reason: str
    citations: str  # JSON text, as recorded
    at_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class ModelError:
    code: str
    message: str
    at_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class CallSummary:
    source: str  # the record file's name: what the store ingests once
    call_sid: str
    control: str  # "turns" or "spine"
    flow: str
    agent: str  # the agent's name (turns calls with an agent flow), else ""
    started_at: float  # wall clock, seconds since the epoch
    duration_ms: int
    outcome: str  # "hangup:<reason>", "transfer", "caller_hangup" or "ended"
    complete: bool  # False: a part file (the writer was stopped before the call ended)
    turns: tuple[Turn, ...]
    transcripts: tuple[Transcript, ...]
    tool_calls: tuple[ToolCall, ...]
    verdicts: tuple[Verdict, ...]
    errors: tuple[ModelError, ...]

    @property
    def ended_at(self) -> float:
        return self.started_at + self.duration_ms / 1000


@dataclasses.dataclass(slots=True)
class _OpenTurn:
    index: int
    item_id: str = ""
    speech_started_ms: int | None = None
    speech_stopped_ms: int | None = None
    transcript: str = ""
    heard: bool = False  # stopped or transcribed: responses from now on answer it
    answered: bool = False  # its audio response is done: later ones (a check-in) are not its answer
    response_requested_ms: int | None = None
    response_ids: list[str] = dataclasses.field(default_factory=list)
    audio_response_id: str = ""
    first_audio_ms: int | None = None
    barged_in_ms: int | None = None
    truncated_at_ms: int | None = None
    agent_texts: list[str] = dataclasses.field(default_factory=list)
    first_played_ms: int | None = None
    played_frames: int | None = None

    def frozen(self) -> Turn:
        response_id = self.audio_response_id or (self.response_ids[0] if self.response_ids else "")
        played_ms = None if self.played_frames is None else self.played_frames * FRAME_MS
        return Turn(self.index, self.speech_started_ms, self.speech_stopped_ms, self.transcript,
                    self.response_requested_ms, response_id, self.first_audio_ms, self.barged_in_ms,
                    self.truncated_at_ms, " ".join(t for t in self.agent_texts if t), self.first_played_ms, played_ms)


class RecordSummarizer:
    """A record's summary built as its entries come (``feed``, in order), for a live call (the model worker
    feeds every entry as it is recorded, so the record need not be read again) or a finished record
    (``summarize_record``). Audio deltas are parsed only while a turn's answer waits for its first audio."""

    __slots__ = ("header", "t0", "last_t", "reader")

    def __init__(self, header: dict[str, Any]) -> None:
        self.header = header
        self.t0: int | None = None
        self.last_t = 0
        self.reader = _Reader()

    def feed(self, entry: dict[str, Any]) -> None:
        t = entry["t"]
        if self.t0 is None:
            self.t0 = self.reader.t0_ns = t
        self.last_t = t
        self.reader.feed(entry, (t - self.t0) // NS_PER_MS)

    def summary(self, source: str, wall_end_s: float = 0.0, complete: bool = True) -> CallSummary:
        """``wall_end_s``: the wall-clock time of the last entry (the record file's mtime, as a rule);
        ``complete``: False for a part file."""
        header, reader = self.header, self.reader
        duration_ms = (self.last_t - self.t0) // NS_PER_MS if self.t0 is not None else 0
        flow = str(header.get("flow", "")) if header.get("control", "turns") == "turns" else ""
        agent = ""
        if flow == "agent":
            spec = (header.get("flow_args") or {}).get("spec") or {}
            agent = str(spec.get("name", "")) if isinstance(spec, dict) else ""
        return CallSummary(
            source=source, call_sid=str(header.get("call_sid", "")), control=str(header.get("control", "turns")),
            flow=flow, agent=agent, started_at=wall_end_s - duration_ms / 1000, duration_ms=duration_ms,
            outcome=reader.outcome or "ended", complete=complete,
            turns=tuple(turn.frozen() for turn in reader.turns), transcripts=reader.all_transcripts(),
            tool_calls=tuple(_tool_call(fields) for fields in reader.tools.values()),
            verdicts=tuple(reader.verdicts), errors=tuple(reader.errors))


def summarize_record(header: dict[str, Any], entries: list[dict[str, Any]], source: str, wall_end_s: float = 0.0,
                     complete: bool = True) -> CallSummary:
    """What the store keeps of one record (see RecordSummarizer.summary)."""
    summarizer = RecordSummarizer(header)
    for entry in entries:
        summarizer.feed(entry)
    return summarizer.summary(source, wall_end_s, complete)


def summary_to_json(summary: CallSummary) -> bytes:
    return orjson.dumps(dataclasses.asdict(summary))


def summary_from_json(text: str | bytes) -> CallSummary:
    """``summary_to_json``'s inverse; raises ValueError (or TypeError, KeyError) on anything else."""
    data = orjson.loads(text)
    return CallSummary(**{
        **data,
        "turns": tuple(Turn(**t) for t in data["turns"]), "transcripts": tuple(Transcript(**t) for t in data["transcripts"]),
        "tool_calls": tuple(ToolCall(**t) for t in data["tool_calls"]), "verdicts": tuple(Verdict(**v) for v in data["verdicts"]),
        "errors": tuple(ModelError(**e) for e in data["errors"])})


def _tool_call(fields: dict[str, Any]) -> ToolCall:
    return ToolCall(call_id=fields["call_id"], name=fields.get("name", ""), arguments=fields.get("arguments", ""),
                    called_ms=fields.get("called_ms"), ran=fields.get("ran", False), ok=fields.get("ok"),
                    output=fields.get("output", ""), result_ms=fields.get("result_ms"))


class _Reader:
    """Walks a record's entries in order, building the turns and the rest."""

    def __init__(self, t0_ns: int = 0) -> None:
        self.t0_ns = t0_ns
        self.turns: list[_OpenTurn] = []
        self.transcripts: list[Transcript] = []
        self.tools: dict[str, dict[str, Any]] = {}  # by call_id, in the order first seen
        self.verdicts: list[Verdict] = []
        self.errors: list[ModelError] = []
        self.outcome = ""
        self.owner: dict[str, _OpenTurn] = {}  # response id -> the turn it answers
        self.tags: dict[int, str] = {}  # playout tag -> the response it plays (OpenTag after response.created)
        self.created = ""  # the response the current input created: the OpenTag among its actions is its tag
        self.cancelled: _OpenTurn | None = None  # the turn of the latest barge-in, until its truncate
        self.waiting_audio: set[str] = set()  # responses of turns that have no first audio yet
        self.unfinished: dict[str, tuple[int, list[str]]] = {}  # response id -> (first delta's ms, transcript deltas)

    def feed(self, entry: dict[str, Any], at_ms: int) -> None:
        kind = entry["k"]
        snapshot = entry.get("p")
        if snapshot and len(snapshot) >= 3 and snapshot[0] and snapshot[1]:
            self._played(int(snapshot[0]), int(snapshot[1]), int(snapshot[2]))
        if kind != "out":
            self.created = ""
        if kind == "model":
            text = entry.get("text")
            if isinstance(text, str) and _AUDIO_DELTA_MARK in text[:64] and not self.waiting_audio:
                return  # most of a call's model events: audio of an answer whose first audio is known
            event = _json_object(text)
            if event is not None:
                self._model_event(event, at_ms)
        elif kind == "out":
            self._action(entry.get("a") or {}, at_ms)
        elif kind == "tool":
            fields = self._tool(str(entry.get("call_id", "")))
            fields.update(ok=bool(entry.get("ok")), output=str(entry.get("output", "")), result_ms=at_ms)
        elif kind == "verdict":
            self.verdicts.append(Verdict(int(entry.get("tag", 0)), bool(entry.get("rejected")), str(entry.get("reason", "")),
                                         str(entry.get("citations", "")), at_ms))

    # --- the model's events -----------------------------------------------------------------------
    def _model_event(self, event: dict[str, Any], at_ms: int) -> None:
        kind = event.get("type")
        if kind == "input_audio_buffer.speech_started":
            self.turns.append(_OpenTurn(len(self.turns), item_id=str(event.get("item_id", "")), speech_started_ms=at_ms))
        elif kind == "input_audio_buffer.speech_stopped":
            turn = self._turn_of(str(event.get("item_id", "")))
            if turn.speech_stopped_ms is None:
                turn.speech_stopped_ms = at_ms
            turn.heard = True
        elif kind == CALLER_TRANSCRIPT:
            text = str(event.get("transcript", "")).strip()
            turn = self._turn_of(str(event.get("item_id", "")), wants_transcript=True)
            turn.transcript = f"{turn.transcript} {text}".strip() if turn.transcript else text
            turn.heard = True
            if text:
                self.transcripts.append(Transcript("caller", text, at_ms))
        elif kind == "response.created":
            response_id = str((event.get("response") or {}).get("id", ""))
            self.created = response_id
            turn = self.turns[-1] if self.turns else None
            if turn is not None and turn.heard and not turn.answered:
                self.owner[response_id] = turn
                turn.response_ids.append(response_id)
                if turn.first_audio_ms is None:
                    self.waiting_audio.add(response_id)
        elif kind == "response.done":
            response_id = str((event.get("response") or {}).get("id", ""))
            turn = self.owner.get(response_id)
            if turn is not None and turn.audio_response_id == response_id:
                turn.answered = True
        elif kind in AUDIO_DELTAS:
            self._audio(str(event.get("response_id", "")), at_ms)
        elif kind in AGENT_TRANSCRIPT_DELTAS:
            # kept until the response's transcript is done: a call that ends mid-answer still shows what was said
            response_id = str(event.get("response_id", ""))
            started = self.unfinished.setdefault(response_id, (at_ms, []))
            started[1].append(str(event.get("delta", "")))
        elif kind in AGENT_TRANSCRIPTS:
            text = str(event.get("transcript", "")).strip()
            self.unfinished.pop(str(event.get("response_id", "")), None)
            turn = self.owner.get(str(event.get("response_id", "")))
            if turn is not None:
                turn.agent_texts.append(text)
            if text:
                self.transcripts.append(Transcript("agent", text, at_ms))
        elif kind == "response.function_call_arguments.done":
            fields = self._tool(str(event.get("call_id", "")))
            fields.setdefault("name", str(event.get("name", "")))
            fields.setdefault("arguments", str(event.get("arguments", "")))
            fields.setdefault("called_ms", at_ms)
        elif kind == "error":
            error = event.get("error") or {}
            if not isinstance(error, dict):
                error = {"message": str(error)}
            self.errors.append(ModelError(str(error.get("code") or error.get("type") or ""), str(error.get("message", "")), at_ms))

    def all_transcripts(self) -> tuple[Transcript, ...]:
        """The transcripts, with the agent's answers whose transcript never finished (the call ended, or the
        answer was cut off and its transcript never came) from their deltas, each where it began."""
        partial = [Transcript("agent", text, at_ms) for at_ms, deltas in self.unfinished.values()
                   if (text := "".join(deltas).strip())]
        if not partial:
            return tuple(self.transcripts)
        return tuple(sorted([*self.transcripts, *partial], key=lambda t: t.at_ms))  # stable: same-ms order kept

    def _played(self, tag: int, frames: int, played_at_ns: int) -> None:
        """A playout snapshot: ``frames`` of ``tag`` played, the last of them by ``played_at_ns``."""
        turn = self.owner.get(self.tags.get(tag, ""))
        if turn is None or turn.audio_response_id != self.tags.get(tag):
            return
        if turn.first_played_ms is None and played_at_ns:
            turn.first_played_ms = (played_at_ns - frames * FRAME_MS * NS_PER_MS - self.t0_ns) // NS_PER_MS
        if turn.played_frames is None or frames > turn.played_frames:
            turn.played_frames = frames

    def _audio(self, response_id: str, at_ms: int) -> None:
        turn = self.owner.get(response_id)
        if turn is not None and turn.first_audio_ms is None:
            turn.first_audio_ms = at_ms
            turn.audio_response_id = response_id
            self.waiting_audio.difference_update(turn.response_ids)

    def _turn_of(self, item_id: str, wants_transcript: bool = False) -> _OpenTurn:
        """The turn of the caller's item ``item_id``; without one that matches, the latest (without a
        transcript, for a transcript); none at all opens one."""
        if item_id:
            for turn in reversed(self.turns):
                if turn.item_id == item_id:
                    return turn
        for turn in reversed(self.turns):
            if not (wants_transcript and turn.transcript):
                return turn
        self.turns.append(_OpenTurn(len(self.turns), item_id=item_id))
        return self.turns[-1]

    # --- the driver's actions -----------------------------------------------------------------------
    def _action(self, action: dict[str, Any], at_ms: int) -> None:
        kind = action.get("type")
        if kind == "SendToModel":
            sent = _json_object(action.get("text")) or {}
            if sent.get("type") == "response.create":
                turn = self.turns[-1] if self.turns else None
                if turn is not None and turn.heard and turn.response_requested_ms is None:
                    turn.response_requested_ms = at_ms
            elif sent.get("type") == "conversation.item.truncate" and self.cancelled is not None:
                if isinstance(sent.get("audio_end_ms"), int):
                    self.cancelled.truncated_at_ms = sent["audio_end_ms"]
                self.cancelled = None
        elif kind == "OpenTag" and self.created:
            self.tags[int(action.get("tag", 0))] = self.created
        elif kind == "CancelTag":
            # the caller talked over the response that tag plays; a cancel of the greeting (no turn's) must not
            # pass its truncate on to a turn
            turn = self.owner.get(self.tags.get(int(action.get("tag", 0)), ""))
            self.cancelled = turn
            if turn is not None and turn.barged_in_ms is None:
                turn.barged_in_ms = at_ms
        elif kind == "RunTool":
            fields = self._tool(str(action.get("call_id", "")))
            fields["name"] = str(action.get("name", fields.get("name", "")))
            fields["arguments"] = str(action.get("arguments", fields.get("arguments", "")))
            fields["ran"] = True
        elif kind in ENDING_ACTIONS and not self.outcome:
            self.outcome = ending_outcome(action)

    def _tool(self, call_id: str) -> dict[str, Any]:
        return self.tools.setdefault(call_id, {"call_id": call_id})


def _json_object(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = orjson.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
