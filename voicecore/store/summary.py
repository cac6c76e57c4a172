"""A call record -> a CallSummary: what the call store keeps of a call (pure: no I/O, no clock).

Owns the turn timing model read from a record (voicecore/call/record.py format): ``RecordSummarizer``, a
consumer of the one walk over a record's entries (voicecore/call/record_reader.py, which keeps the call's
clock, which tag plays which response and how the call ended, and parses each model event once). Times are
milliseconds from the record's first entry (records hold monotonic nanoseconds); the wall-clock start is the
caller's business (``wall_end_s``: when the record was finished, e.g. its file's mtime), so this stays pure.

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
  it they heard (the tag's played frames, last seen); None when no snapshot shows it played;
- ``speech_began_ms`` / ``speech_ended_ms``: the utterance on the call's audio clock: the model's
  ``audio_start_ms`` and ``audio_end_ms`` (positions in the audio the model was sent since its session
  opened) placed where those frames were received: an ``audio`` entry of ``n`` frames recorded at ``t`` holds
  the frames that arrived in the ``n`` x 20 ms before ``t`` (the model worker appends what came since its last
  batch), as the console's recording lays them out (voicecore/console/media.py). ``audio_end_ms`` includes the silence that ended the turn (``silence_duration_ms`` of
  the session's ``server_vad``, 500 ms when the session leaves it to the vendor): the caller stopped speaking
  that much earlier. Under ``semantic_vad`` the vendor's wait is not known, so the end is its ``audio_end_ms``.
  None when the record has no audio entries to place them by;
- ``first_sent_ms``: when the answer's first frame went to the carrier (the first playout snapshot showing
  its tag sent: the carrier's buffer runs dry at ``carrier_empty_at``, so the first of ``sent`` frames starts
  ``sent`` frames before that): where the answer begins in the recording (voicecore/replay.py places the
  agent's frames by the same rule).

Transcript lines carry ``spoken_ms`` besides ``at_ms`` (when the words were known): a caller line's speech
start, an agent line's first frame sent (None: never played), so lines sort and seek on the audio's clock;
``ref`` (the caller's item or the agent's response) and ``prompt`` (the controller's prompt id from the
response's metadata: ``confirm:<function>`` for a confirmation prompt).

Tool calls carry what a confirmation makes of them: ``asked_ms`` (the confirmation prompt was requested),
``answered_ms`` / ``answer`` (``yes``, ``no``, or "" for none) / ``answered_by`` (``keypad <digit>``, ``words``,
``timeout``, ``superseded``), ``started_ms`` (the tool was started: ``RunTool``), ``reply`` / ``reply_ms`` (what
the model was told, e.g. ``{"status": "not_done", "reason": "caller_declined"}``) and ``action`` (the
function's built-in action from the agent in the header: ``end_call``, ``transfer`` or ""). The record does
not say why a ``RunTool`` happened; a confirmation's answer is the input that produced it (a ``dtmf`` entry:
the keypad; a model event: the caller's words).

Keypresses (``dtmf`` entries) are kept with their time. ``carrier`` and ``direction`` are the header's when it
has them; otherwise the carrier is read from the form of the call id (``carrier_of``: Twilio's ``CA`` + 32 hex
digits, Telnyx's ``v2:``/``v3:`` ids, Exotel's 32 hex digits; "" when it cannot tell, e.g. Plivo's and Vonage's
UUIDs look alike) and the direction is ``inbound`` (voicecore answers calls; it places none).

Model responses nobody asked for in a turn (the greeting) appear in ``transcripts`` only. The outcome is the
first ending action's (``HangUp``, ``Transfer``, ``CallOver``); a carrier's ``stop`` with none before it is
``caller_hangup`` (the spine returns no action for it; the observer events say the same); no end at all is
``ended``.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import orjson

from voicecore.call.record_reader import (ActionHandler, EventHandler, InputHandler, RecordConsumer, RecordReader,
                                          read_entries)
from voicecore.outbound.opt_out import OPT_OUT_PROMPT
from voicecore.realtime import events as rt

NS_PER_MS = 1_000_000
FRAME_MS = 20
FRAME_NS = FRAME_MS * NS_PER_MS
DEFAULT_VAD_SILENCE_MS = 500  # the vendor's server_vad silence_duration_ms when a session does not set it
KEPT_AUDIO_BATCHES = 6000  # caller audio batches kept to place the model's positions by: 10 minutes and more
CONFIRM_PROMPT = "confirm:"  # the prompt id of a confirmation prompt (voicecore/agent/flow.py)
NOT_DONE_ANSWERS = {"caller_declined": ("no", ""), "no_confirmation": ("", "timeout"), "superseded": ("", "superseded")}
_TWILIO_SID = re.compile(r"CA[0-9a-f]{32}")
_HEX_32 = re.compile(r"[0-9a-f]{32}")


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
    speech_began_ms: int | None = None
    speech_ended_ms: int | None = None
    first_sent_ms: int | None = None

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
    at_ms: int  # when the words were known (the transcript's event)
    spoken_ms: int | None = None  # when they were said: caller speech start, agent first frame sent
    ref: str = ""  # the caller's item id or the agent's response id
    prompt: str = ""  # the controller's prompt id of an agent line (confirm:<function> for a confirmation)


@dataclasses.dataclass(frozen=True, slots=True)
class Keypress:
    digit: str
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
    asked_ms: int | None = None  # its confirmation prompt was requested
    answered_ms: int | None = None  # the caller's answer took effect (or the wait for it ended)
    answer: str = ""  # "yes", "no", or "" (no answer)
    answered_by: str = ""  # "keypad <digit>", "words", "timeout", "superseded"
    started_ms: int | None = None  # RunTool: the tool began (after the yes, with a confirmation)
    reply: str = ""  # what the model was told (function_call_output)
    reply_ms: int | None = None
    action: str = ""  # the function's built-in action: "end_call", "transfer" or ""


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    tag: int
    rejected: bool
    reason: str
    citations: str  # JSON text, as recorded
    at_ms: int
    frames: int | None = None  # approved up to this many frames of the answer
    response_id: str = ""  # the answer the tag played


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
    keypresses: tuple[Keypress, ...] = ()
    carrier: str = ""
    direction: str = "inbound"
    answer_verdict: str = ""  # a placed call's answer verdict (its record's ``answer`` note)
    answer_action: str = ""  # ... and what its answer gate did on it (start, hang_up, introduce)
    callee: str = ""  # a placed call's number (its record header's)
    opted_out: bool = False  # the callee asked not to be called again (the agent said the opt-out goodbye)

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
    speech_began_ms: int | None = None
    speech_ended_ms: int | None = None

    def frozen(self, first_sent_ms: int | None) -> Turn:
        response_id = self.audio_response_id or (self.response_ids[0] if self.response_ids else "")
        played_ms = None if self.played_frames is None else self.played_frames * FRAME_MS
        return Turn(self.index, self.speech_started_ms, self.speech_stopped_ms, self.transcript,
                    self.response_requested_ms, response_id, self.first_audio_ms, self.barged_in_ms,
                    self.truncated_at_ms, " ".join(t for t in self.agent_texts if t), self.first_played_ms, played_ms,
                    self.speech_began_ms, self.speech_ended_ms, first_sent_ms)


class RecordSummarizer(RecordConsumer):
    """A record's summary built as its entries come (``feed``, in order, or a RecordReader it shares), for a
    live call (the model worker feeds every entry as it is recorded, so the record need not be read again)
    or a finished record (``summarize_record``). Audio deltas are read only while a turn's answer waits for
    its first audio."""

    __slots__ = ("header", "actions", "turns", "transcripts", "tools", "verdicts", "errors", "keypresses", "owner",
                 "prompts", "first_sent", "cancelled", "awaiting_audio", "unfinished", "digit", "sent_audio_ms",
                 "sent_audio_at", "session_audio_ms", "vad_silence_ms", "answer_verdict", "answer_action")

    def __init__(self, header: dict[str, Any]) -> None:
        super().__init__()
        self.header = header
        self.actions = function_actions(header)  # function name -> its built-in action
        self.turns: list[_OpenTurn] = []
        self.transcripts: list[list[Any]] = []  # [speaker, text, at_ms, ref, prompt]: spoken_ms is resolved at the end
        self.tools: dict[str, dict[str, Any]] = {}  # by call_id, in the order first seen
        self.verdicts: list[Verdict] = []
        self.errors: list[ModelError] = []
        self.keypresses: list[Keypress] = []
        self.owner: dict[str, _OpenTurn] = {}  # response id -> the turn it answers
        self.prompts: dict[str, str] = {}  # response id -> the controller's prompt id (its metadata's vc_prompt)
        self.first_sent: dict[int, int] = {}  # tag -> ms its first frame went to the carrier
        self.cancelled: _OpenTurn | None = None  # the turn of the latest barge-in, until its truncate
        self.awaiting_audio: set[str] = set()  # responses of turns that have no first audio yet
        self.unfinished: dict[str, tuple[int, list[str]]] = {}  # response id -> (first delta's ms, transcript deltas)
        self.digit = ""  # the latest keypress
        # the caller's audio the model was sent in its session, to place its audio_start/end_ms on the call's clock:
        # per audio entry, the session's audio before it (ms) and when its first frame began (ms from the call's start)
        self.sent_audio_ms: list[int] = []
        self.sent_audio_at: list[int] = []
        self.session_audio_ms = 0
        self.vad_silence_ms = DEFAULT_VAD_SILENCE_MS
        self.answer_verdict = ""  # a placed call's: the answer gate's ``answer`` note
        self.answer_action = ""

    def summary(self, source: str, wall_end_s: float = 0.0, complete: bool = True) -> CallSummary:
        """``wall_end_s``: the wall-clock time of the last entry (the record file's mtime, as a rule);
        ``complete``: False for a part file."""
        header, reader = self.header, self.reader
        t0, last_t, outcome = (reader.t0, reader.last_t, reader.outcome) if reader is not None else (None, 0, "")
        duration_ms = (last_t - t0) // NS_PER_MS if t0 is not None else 0
        flow = str(header.get("flow", "")) if header.get("control", "turns") == "turns" else ""
        agent = ""
        if flow == "agent":
            spec = (header.get("flow_args") or {}).get("spec") or {}
            agent = str(spec.get("name", "")) if isinstance(spec, dict) else ""
        call_sid = str(header.get("call_sid", ""))
        transcripts = self.all_transcripts()
        return CallSummary(
            source=source, call_sid=call_sid, control=str(header.get("control", "turns")),
            flow=flow, agent=agent, started_at=wall_end_s - duration_ms / 1000, duration_ms=duration_ms,
            outcome=outcome or "ended", complete=complete,
            turns=tuple(turn.frozen(self.first_sent_of(turn.audio_response_id)) for turn in self.turns),
            transcripts=transcripts,
            tool_calls=tuple(_tool_call(fields) for fields in self.tools.values()),
            verdicts=tuple(self.verdicts), errors=tuple(self.errors), keypresses=tuple(self.keypresses),
            carrier=str(header.get("carrier") or carrier_of(call_sid)), direction=str(header.get("direction") or "inbound"),
            answer_verdict=self.answer_verdict, answer_action=self.answer_action, callee=str(header.get("callee") or ""),
            opted_out=any(t.speaker == "agent" and t.prompt == OPT_OUT_PROMPT for t in transcripts))

    # --- what the summary reads (RecordConsumer) ------------------------------------------------------------
    def input_handlers(self) -> Mapping[str, InputHandler]:
        return {"model": self._snapshot, "tick": self._snapshot, "audio": self._audio_entry, "verdict": self._verdict,
                "tool": self._tool_result, "dtmf": self._dtmf, "reopen": self._new_session, "resume": self._new_session,
                "note": self._note}

    def _note(self, entry: dict[str, Any], at_ms: int) -> None:
        if entry.get("what") == "answer" and isinstance(entry.get("verdict"), str):
            self.answer_verdict = entry["verdict"]
            self.answer_action = entry["action"] if isinstance(entry.get("action"), str) else ""

    def action_handlers(self) -> Mapping[str, ActionHandler]:
        return {"SendToModel": self._sent_to_model, "CancelTag": self._cancel, "RunTool": self._run_tool}

    def event_handlers(self) -> Mapping[type, EventHandler]:
        return {rt.SpeechStarted: self._speech_started, rt.SpeechStopped: self._speech_stopped,
                rt.InputTranscriptionCompleted: self._caller_transcript, rt.ResponseCreated: self._created,
                rt.ResponseDone: self._done, rt.AudioDelta: self._audio_delta, rt.TranscriptDelta: self._agent_delta,
                rt.TranscriptDone: self._agent_transcript, rt.FunctionCallArgumentsDone: self._function_called,
                rt.RealtimeError: self._error}

    # --- the record's inputs --------------------------------------------------------------------------------
    def _snapshot(self, entry: dict[str, Any], at_ms: int) -> None:
        """The playout snapshot an input carries (``p``): what was played and sent of which tag."""
        snapshot = entry.get("p")
        if snapshot and len(snapshot) >= 3:
            if snapshot[0] and snapshot[1]:
                self._played(int(snapshot[0]), int(snapshot[1]), int(snapshot[2]))
            if len(snapshot) >= 6 and snapshot[3] and snapshot[4] and snapshot[3] not in self.first_sent:
                self._sent(int(snapshot[3]), int(snapshot[4]), int(snapshot[5]), at_ms)

    def _audio_entry(self, entry: dict[str, Any], at_ms: int) -> None:
        if "p" in entry:
            self._snapshot(entry, at_ms)
        batch_ms = int(entry.get("n", 0)) * FRAME_MS
        self.sent_audio_ms.append(self.session_audio_ms)
        self.sent_audio_at.append(at_ms - batch_ms)  # when its first frame arrived: received_at_ns, on the call's clock
        self.session_audio_ms += batch_ms
        if len(self.sent_audio_ms) > 2 * KEPT_AUDIO_BATCHES:  # the model's positions point at recent audio only
            del self.sent_audio_ms[:KEPT_AUDIO_BATCHES], self.sent_audio_at[:KEPT_AUDIO_BATCHES]

    def _verdict(self, entry: dict[str, Any], at_ms: int) -> None:
        self._snapshot(entry, at_ms)
        reader = self.reader
        assert reader is not None
        tag = int(entry.get("tag", 0))
        frames = entry.get("frames")
        self.verdicts.append(Verdict(tag, bool(entry.get("rejected")), str(entry.get("reason", "")),
                                     str(entry.get("citations", "")), at_ms,
                                     int(frames) if isinstance(frames, int) else None, reader.tags.get(tag, "")))

    def _tool_result(self, entry: dict[str, Any], at_ms: int) -> None:
        fields = self._tool(str(entry.get("call_id", "")))
        fields.update(ok=bool(entry.get("ok")), output=str(entry.get("output", "")), result_ms=at_ms)

    def _dtmf(self, entry: dict[str, Any], at_ms: int) -> None:
        self.digit = str(entry.get("digit", ""))
        self.keypresses.append(Keypress(self.digit, at_ms))

    def _new_session(self, entry: dict[str, Any], at_ms: int) -> None:
        """A new model session (reopen, resume): its audio positions count from 0 again."""
        self.sent_audio_ms, self.sent_audio_at, self.session_audio_ms = [], [], 0

    # --- the model's events -----------------------------------------------------------------------
    def _speech_started(self, event: rt.SpeechStarted, at_ms: int) -> None:
        turn = _OpenTurn(len(self.turns), item_id=event.item_id, speech_started_ms=at_ms)
        turn.speech_began_ms = self._on_audio_clock(event.audio_start_ms)
        self.turns.append(turn)

    def _speech_stopped(self, event: rt.SpeechStopped, at_ms: int) -> None:
        turn = self._turn_of(event.item_id)
        if turn.speech_stopped_ms is None:
            turn.speech_stopped_ms = at_ms
            if event.audio_end_ms is not None:
                turn.speech_ended_ms = self._on_audio_clock(max(0, event.audio_end_ms - self.vad_silence_ms))
        turn.heard = True

    def _caller_transcript(self, event: rt.InputTranscriptionCompleted, at_ms: int) -> None:
        text = event.transcript.strip()
        item_id = event.item_id
        turn = self._turn_of(item_id, wants_transcript=True)
        turn.transcript = f"{turn.transcript} {text}".strip() if turn.transcript else text
        turn.heard = True
        if text:
            self.transcripts.append(["caller", text, at_ms, item_id or turn.item_id, ""])

    def _created(self, event: rt.ResponseCreated, at_ms: int) -> None:
        response_id = event.response_id
        metadata = event.metadata
        if metadata is not None and metadata.get("vc_prompt"):
            self.prompts[response_id] = str(metadata["vc_prompt"])
        turn = self.turns[-1] if self.turns else None
        if turn is not None and turn.heard and not turn.answered:
            self.owner[response_id] = turn
            turn.response_ids.append(response_id)
            if turn.first_audio_ms is None:
                self.awaiting_audio.add(response_id)

    def _done(self, event: rt.ResponseDone, at_ms: int) -> None:
        response_id = event.response_id
        turn = self.owner.get(response_id)
        if turn is not None and turn.audio_response_id == response_id:
            turn.answered = True

    def _audio_delta(self, event: rt.AudioDelta, at_ms: int) -> None:
        turn = self.owner.get(event.response_id)
        if turn is not None and turn.first_audio_ms is None:
            turn.first_audio_ms = at_ms
            turn.audio_response_id = event.response_id
            self.awaiting_audio.difference_update(turn.response_ids)

    def _agent_delta(self, event: rt.TranscriptDelta, at_ms: int) -> None:
        # kept until the response's transcript is done: a call that ends mid-answer still shows what was said
        started = self.unfinished.setdefault(event.response_id, (at_ms, []))
        started[1].append(event.delta)

    def _agent_transcript(self, event: rt.TranscriptDone, at_ms: int) -> None:
        text = event.transcript.strip()
        response_id = event.response_id
        self.unfinished.pop(response_id, None)
        turn = self.owner.get(response_id)
        if turn is not None:
            turn.agent_texts.append(text)
        if text:
            self.transcripts.append(["agent", text, at_ms, response_id, self.prompts.get(response_id, "")])

    def _function_called(self, event: rt.FunctionCallArgumentsDone, at_ms: int) -> None:
        fields = self._tool(event.call_id)
        fields.setdefault("name", event.name or "")
        fields.setdefault("arguments", event.arguments)
        fields.setdefault("called_ms", at_ms)
        fields.setdefault("action", self.actions.get(fields["name"], ""))

    def _error(self, event: rt.RealtimeError, at_ms: int) -> None:
        self.errors.append(ModelError(event.code or event.type, event.message, at_ms))

    # --- pieces ---------------------------------------------------------------------------------------
    def all_transcripts(self) -> tuple[Transcript, ...]:
        """The transcripts, with the agent's answers whose transcript never finished (the call ended, or the
        answer was cut off and its transcript never came) from their deltas, each where it began; each with
        the moment it was said (``spoken_ms``)."""
        lines = [*self.transcripts, *(["agent", text, at_ms, response_id, self.prompts.get(response_id, "")]
                                      for response_id, (at_ms, deltas) in self.unfinished.items()
                                      if (text := "".join(deltas).strip()))]
        if len(lines) > len(self.transcripts):
            lines.sort(key=lambda line: line[2])  # stable: same-ms order kept
        spoken_by_item = {turn.item_id: turn.speech_began_ms if turn.speech_began_ms is not None else turn.speech_started_ms
                          for turn in self.turns if turn.item_id}
        result = []
        for speaker, text, at_ms, ref, prompt in lines:
            spoken = spoken_by_item.get(ref) if speaker == "caller" else self.first_sent_of(ref)
            result.append(Transcript(speaker, text, at_ms, spoken, ref, prompt))
        return tuple(result)

    def first_sent_of(self, response_id: str) -> int | None:
        tag = self.reader.tag_of.get(response_id) if self.reader is not None else None
        return None if tag is None else self.first_sent.get(tag)

    def _on_audio_clock(self, position_ms: object) -> int | None:
        """A position in the session's audio (the model's audio_start/end_ms) -> ms from the call's start, when
        that audio was received; None without audio entries."""
        if not isinstance(position_ms, int) or isinstance(position_ms, bool) or not self.sent_audio_ms:
            return None
        i = max(0, bisect.bisect_right(self.sent_audio_ms, position_ms) - 1)
        return self.sent_audio_at[i] + position_ms - self.sent_audio_ms[i]

    def _sent(self, tag: int, frames: int, empty_at_ns: int, at_ms: int) -> None:
        """The first snapshot showing ``tag`` sent: its first frame started ``frames`` before the carrier runs dry."""
        if empty_at_ns:
            self.first_sent[tag] = self._call_ms(empty_at_ns - frames * FRAME_NS)
        else:
            self.first_sent[tag] = at_ms

    def _played(self, tag: int, frames: int, played_at_ns: int) -> None:
        """A playout snapshot: ``frames`` of ``tag`` played, the last of them by ``played_at_ns``."""
        reader = self.reader
        assert reader is not None
        response_id = reader.tags.get(tag)
        turn = self.owner.get(response_id or "")
        if turn is None or turn.audio_response_id != response_id:
            return
        if turn.first_played_ms is None and played_at_ns:
            turn.first_played_ms = self._call_ms(played_at_ns - frames * FRAME_NS)
        if turn.played_frames is None or frames > turn.played_frames:
            turn.played_frames = frames

    def _call_ms(self, t_ns: int) -> int:
        """A monotonic time as ms on the call's clock (from the record's first entry)."""
        reader = self.reader
        assert reader is not None and reader.t0 is not None
        return (t_ns - reader.t0) // NS_PER_MS

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
    def _sent_to_model(self, action: dict[str, Any], at_ms: int) -> None:
        sent = _json_object(action.get("text")) or {}
        sent_type = sent.get("type")
        if sent_type == "response.create":
            turn = self.turns[-1] if self.turns else None
            if turn is not None and turn.heard and turn.response_requested_ms is None:
                turn.response_requested_ms = at_ms
            metadata = (sent.get("response") or {}).get("metadata") or {}
            prompt = str(metadata.get("vc_prompt", "")) if isinstance(metadata, dict) else ""
            if prompt.startswith(CONFIRM_PROMPT):
                self._confirmation_asked(prompt[len(CONFIRM_PROMPT):], at_ms)
        elif sent_type == "conversation.item.truncate" and self.cancelled is not None:
            if isinstance(sent.get("audio_end_ms"), int):
                self.cancelled.truncated_at_ms = sent["audio_end_ms"]
            self.cancelled = None
        elif sent_type == "conversation.item.create":
            item = sent.get("item") or {}
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                self._replied(str(item.get("call_id", "")), str(item.get("output", "")), at_ms)
        elif sent_type == "session.update":
            self._session(sent.get("session") or {})

    def _cancel(self, action: dict[str, Any], at_ms: int) -> None:
        # the caller talked over the response that tag plays; a cancel of the greeting (no turn's) must not
        # pass its truncate on to a turn
        reader = self.reader
        assert reader is not None
        turn = self.owner.get(reader.tags.get(int(action.get("tag", 0)), ""))
        self.cancelled = turn
        if turn is not None and turn.barged_in_ms is None:
            turn.barged_in_ms = at_ms

    def _run_tool(self, action: dict[str, Any], at_ms: int) -> None:
        fields = self._tool(str(action.get("call_id", "")))
        fields["name"] = str(action.get("name", fields.get("name", "")))
        fields["arguments"] = str(action.get("arguments", fields.get("arguments", "")))
        fields["ran"] = True
        fields.setdefault("action", self.actions.get(fields["name"], ""))
        fields.setdefault("started_ms", at_ms)
        if fields.get("asked_ms") is not None and fields.get("answered_ms") is None:
            fields.update(answered_ms=at_ms, answer="yes", answered_by=self._answered_by())

    def _session(self, session: dict[str, Any]) -> None:
        """The silence that ends a turn under the session's turn detection (how long before audio_end_ms the
        caller stopped speaking)."""
        detection = ((session.get("audio") or {}).get("input") or {}).get("turn_detection", session.get("turn_detection"))
        if not isinstance(detection, dict):
            return
        if detection.get("type") == "server_vad":
            silence = detection.get("silence_duration_ms", DEFAULT_VAD_SILENCE_MS)
            self.vad_silence_ms = int(silence) if isinstance(silence, int) and not isinstance(silence, bool) else DEFAULT_VAD_SILENCE_MS
        else:
            self.vad_silence_ms = 0  # the vendor's own end-of-turn model: its wait is not known

    def _confirmation_asked(self, name: str, at_ms: int) -> None:
        """A confirmation prompt for the function ``name``: the latest call of it still waiting for an answer."""
        for fields in reversed(self.tools.values()):
            if fields.get("name") == name and fields.get("answered_ms") is None and not fields.get("ran"):
                fields.setdefault("asked_ms", at_ms)
                return

    def _replied(self, call_id: str, output: str, at_ms: int) -> None:
        fields = self._tool(call_id)
        fields.update(reply=output, reply_ms=at_ms)
        if fields.get("answered_ms") is not None or fields.get("ran"):
            return
        reply = _json_object(output) or {}
        if reply.get("status") == "not_done" and reply.get("reason") in NOT_DONE_ANSWERS:
            answer, by = NOT_DONE_ANSWERS[reply["reason"]]
            fields.update(answered_ms=at_ms, answer=answer, answered_by=by or self._answered_by())

    def _answered_by(self) -> str:
        """What answered a confirmation: the input whose actions follow (the keypad, the caller's words, a tick's timeout)."""
        input_kind = self.reader.input_kind if self.reader is not None else ""
        if input_kind == "dtmf":
            return f"keypad {self.digit}"
        if input_kind == "model":
            return "words"
        return "timeout" if input_kind == "tick" else input_kind

    def _tool(self, call_id: str) -> dict[str, Any]:
        return self.tools.setdefault(call_id, {"call_id": call_id})


def carrier_of(call_sid: str) -> str:
    """The carrier a call id's form names: ``twilio`` (``CA`` and 32 hex digits), ``telnyx`` (``v2:``/``v3:``),
    ``exotel`` (32 hex digits); "" when the form does not tell (Plivo's and Vonage's ids are both UUIDs)."""
    if _TWILIO_SID.fullmatch(call_sid):
        return "twilio"
    if call_sid.startswith(("v2:", "v3:")):
        return "telnyx"
    if _HEX_32.fullmatch(call_sid):
        return "exotel"
    return ""


def function_actions(header: dict[str, Any]) -> dict[str, str]:
    """An agent call's functions with a built-in action (``end_call``, ``transfer``), from the record header's
    agent; {} for any other call."""
    spec = (header.get("flow_args") or {}).get("spec") if isinstance(header.get("flow_args"), dict) else None
    functions = ((spec or {}).get("flow") or {}).get("functions") if isinstance(spec, dict) else None
    if not isinstance(functions, dict):
        return {}
    return {str(name): str(fn.get("action", "")) for name, fn in functions.items()
            if isinstance(fn, dict) and fn.get("action")}


def summarize_record(header: dict[str, Any], entries: list[dict[str, Any]], source: str, wall_end_s: float = 0.0,
                     complete: bool = True) -> CallSummary:
    """What the store keeps of one record (see RecordSummarizer.summary)."""
    summarizer = RecordSummarizer(header)
    read_entries(RecordReader(summarizer), entries)
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
        "errors": tuple(ModelError(**e) for e in data["errors"]),
        "keypresses": tuple(Keypress(**k) for k in data.get("keypresses", ()))})


def _tool_call(fields: dict[str, Any]) -> ToolCall:
    return ToolCall(call_id=fields["call_id"], name=fields.get("name", ""), arguments=fields.get("arguments", ""),
                    called_ms=fields.get("called_ms"), ran=fields.get("ran", False), ok=fields.get("ok"),
                    output=fields.get("output", ""), result_ms=fields.get("result_ms"), asked_ms=fields.get("asked_ms"),
                    answered_ms=fields.get("answered_ms"), answer=fields.get("answer", ""),
                    answered_by=fields.get("answered_by", ""), started_ms=fields.get("started_ms"),
                    reply=fields.get("reply", ""), reply_ms=fields.get("reply_ms"), action=fields.get("action", ""))


def _json_object(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = orjson.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
