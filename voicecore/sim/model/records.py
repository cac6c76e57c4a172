"""What a simulated session did, for a measurement harness to read after the call.

Owns `SessionRecord` and the records in it (responses, truncates, cancels, caller speech, errors, the
function outputs the client sent back, the faults injected). The
session fills them in as it goes; times are the `now_ms` values it was fed. The bench pickles them across
processes, so they stay plain dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voicecore.g711 import ALAW_TO_ULAW
from voicecore.timing import FRAME_BYTES


@dataclass(slots=True)
class ResponseRecord:
    index: int
    response_id: str
    # the assistant item ("" for a failed response, which has no item; the function_call item when the
    # response calls a function without saying anything first)
    item_id: str
    clip_name: str
    text: str  # the transcript the simulator speaks (the hallucinated text when hallucinating)
    audio: bytes  # full audio of the response: clip + dither (what would be sent if not cancelled)
    delta_bytes: list[int]  # planned audio delta sizes, in order; they sum to len(audio)
    created_ms: int
    # The instructions the response was made under, as the vendor applies them: response.instructions when
    # the response.create carried them (they replace the session's for that response, persona, task and
    # language rules included), else the session's instructions at that moment.
    instructions: str | None = None
    response_instructions: str | None = None  # what response.create carried (None: it carried none)
    session_instructions: str = ""  # the session's instructions when the response was created
    metadata: dict[str, str] | None = None
    first_delta_ms: int | None = None
    cancel_ms: int | None = None  # when the cancel (client or turn_detected) was received/decided
    done_ms: int | None = None  # when response.done was emitted
    status: str = "in_progress"  # in_progress | completed | cancelled | failed
    reason: str | None = None  # client_cancelled | turn_detected
    sent_bytes: int = 0  # audio actually sent, late deltas included
    late_bytes: int = 0  # audio sent after the cancel
    late_deltas: int = 0  # audio deltas sent after the cancel
    delta_sent_ms: list[int] = field(default_factory=list)  # now_ms of each audio delta sent (bench: was audio available?)
    hallucinated: bool = False
    stalled: bool = False
    failed: bool = False
    error_code: str | None = None  # a fault window's code when it failed (rate_limit_exceeded, server_error)
    overlaps: str | None = None  # the response_id of the response this one started during (SimConfig.overlap_*)
    # who asked for it: "client" (a response.create), "turn_detection" (the session's VAD with
    # create_response on), "overlap" (the simulator's own second response, SimConfig.overlap_*)
    origin: str = "client"
    # scripted turns (SimConfig.turns): the rule that shaped this response, and its function call if it made one
    rule: int | None = None  # index into SimConfig.turns
    function_call: str | None = None  # the function's name
    call_id: str | None = None
    call_item_id: str | None = None  # the function_call item (item_id is the spoken item, or this one if none)
    arguments: str | None = None  # the full arguments the call streams
    arguments_sent: str = ""  # what went out before the response ended (all of it unless cancelled)

    audio_format: str = "pcmu"  # the law ``audio`` went out in: "pcma" for a session in g711_alaw / audio/pcma

    def frames(self) -> list[bytes]:
        """The response audio cut into 160-byte frames from its start, in mu-law whatever law it went out in
        (what a carrier simulator measures: it reads an A-law stream as mu-law); the last one may be short."""
        audio = self.audio if self.audio_format == "pcmu" else self.audio.translate(ALAW_TO_ULAW)
        return [audio[i : i + FRAME_BYTES] for i in range(0, len(audio), FRAME_BYTES)]


@dataclass(slots=True)
class TruncateRecord:
    item_id: str
    audio_end_ms: int
    at_ms: int
    ok: bool
    item_audio_ms: int | None  # the item's audio length when the truncate arrived (None: no such item)


@dataclass(slots=True)
class CancelRecord:
    at_ms: int
    requested_response_id: str | None
    cancelled_response_id: str | None  # None when the cancel found nothing active (error sent)


@dataclass(slots=True)
class SpeechRecord:
    item_id: str
    audio_start_ms: int
    started_at_ms: int  # now_ms when speech_started was emitted
    audio_end_ms: int | None = None
    stopped_at_ms: int | None = None
    transcript: str | None = None
    caller_clip: str | None = None  # the caller clip recognised, if any (the first one heard, when several)
    # the response speech_started cancelled (turn_detected); the newest one when several were active
    interrupted_response_id: str | None = None
    # What the utterance was, by the kind of the caller clips recognised in it: "caller" (a real turn; also
    # when a backchannel or a noise came with one), "backchannel", "noise"; None: no packaged clip.
    caller_kind: str | None = None
    # The transcription events (when the session turns transcription on), as now_ms when each was sent:
    # the first one with words (a delta, or `completed` for whisper-1), `completed`, `failed`.
    words_sent_ms: int | None = None
    transcript_completed_ms: int | None = None
    transcription_failed_ms: int | None = None
    # When the words sent so far first held a word that is not a backchannel word (the words of the
    # simulator's backchannel clips): where the caller's words became a real turn. None: never.
    decisive_words_ms: int | None = None


@dataclass(slots=True)
class ErrorRecord:
    at_ms: int
    code: str | None
    client_event_type: str | None


@dataclass(slots=True)
class FaultRecord:
    """A fault injected into the session (`POST /faults`, voicecore.sim.model.faults)."""

    at_ms: int
    kind: str
    response_id: str | None = None  # the response an injected audio delta named (an unknown one included)
    until_ms: int | None = None  # end of a lasting fault's window


@dataclass(slots=True)
class FunctionCallOutputRecord:
    """A function_call_output item the client created (conversation.item.create)."""

    call_id: str
    output: str | None
    at_ms: int
    known: bool  # a function_call item with this call_id was in the conversation (else the error, if checked)


@dataclass(slots=True)
class SessionRecord:
    """Everything a harness needs after a call. Times are the `now_ms` values the core was fed."""

    session_id: str
    session_index: int
    naming: str
    model: str
    connected_ms: int
    call_sid: str | None = None
    closed_ms: int | None = None
    expired_ms: int | None = None  # when the session reached its longest duration (SimConfig.session_limit_ms)
    responses: list[ResponseRecord] = field(default_factory=list)
    truncates: list[TruncateRecord] = field(default_factory=list)
    cancels: list[CancelRecord] = field(default_factory=list)
    deleted_item_ids: list[str] = field(default_factory=list)
    speech: list[SpeechRecord] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    function_call_outputs: list[FunctionCallOutputRecord] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    appended_bytes: int = 0
    input_format: str = "pcm"  # the session's audio formats as its last session.update left them (pcm | pcmu | pcma)
    output_format: str = "pcm"
    client_events: dict[str, int] = field(default_factory=dict)

    @property
    def speech_started_ms(self) -> list[int]:
        return [s.started_at_ms for s in self.speech]

    def responses_without(self, text: str) -> list[ResponseRecord]:
        """The responses made under instructions that do not contain ``text`` (an agent's persona, a node's
        task, a language rule): an answer produced without what the session was told to do."""
        return [r for r in self.responses if text not in (r.instructions or "")]

    def response(self, response_id: str) -> ResponseRecord:
        for r in self.responses:
            if r.response_id == response_id:
                return r
        raise KeyError(response_id)

    def response_for_item(self, item_id: str) -> ResponseRecord:
        for r in self.responses:
            if r.item_id == item_id:
                return r
        raise KeyError(item_id)

    def frame_owners(self) -> dict[bytes, tuple[str, int]]:
        """Full 160-byte frame content -> (response_id, frame index), over every response."""
        owners: dict[bytes, tuple[str, int]] = {}
        for r in self.responses:
            for i, frame in enumerate(r.frames()):
                if len(frame) == FRAME_BYTES:
                    owners[frame] = (r.response_id, i)
        return owners
