"""Realtime-model simulator, one session: the server side of docs/explanation/protocols.md#d2, sans-I/O.
The section numbers in parentheses below (C.1, D.2 item 6, ...) are that page's.

Owns what a fake OpenAI Realtime server says and when over one connection: the handshake, the input buffer
with a simple energy VAD, the D.1 response sequence built from packaged speech clips, cancel / truncate /
delete semantics, the failure switches of `SimConfig`, and the `SessionRecord` a measurement harness reads
after the call. It is fed client event texts and a clock (`now_ms`), and hands back server event texts; it
must not know sockets, asyncio or the wall clock. Settings validation lives in session_config, the audio
work in clips, the send timing in schedule; randomness comes from `seed` through rng (ids, delta sizes,
failure draws) and the clips' dither, so a session replays byte for byte.

Responses at once: a client's response.create during a response is refused (as the real server does),
but with `SimConfig.overlap_probability` the session itself starts a second response while the first
still streams, as a real server sometimes does (server VAD racing a client response.create, a
function-call follow-up): both send their deltas interleaved in time, each has its own ids and done
cascade, `ResponseRecord.overlaps` names the first. A cancel or a barge-in stops every response in
progress (a cancel with a response_id only that one); each lets its late deltas out.

Instructions as the vendor applies them: a response.create's `response.instructions` replace the session's
instructions for that response (the persona, the task and any language rule the session carries are not in
force for it); `ResponseRecord.instructions` keeps the instructions each response was made under, so a
harness can tell an answer made without the agent's instructions (`SessionRecord.responses_without`).

Scripted caller turns (`SimConfig.turns`, module turns): a response that no scripted prompt ("Say
exactly: ...") or sim_clip metadata pins answers the first rule whose `when` is in the last caller item's
words, by speaking its answer or by calling a declared function (the function_call item after an optional
spoken preamble, output_index 1), and answers its `then` after the client sends the function's output.
With rules configured the session also checks a function_call_output's call_id as the real server does
(error `invalid_tool_call_id`); without rules it accepts any, as it always has.

Injected vendor faults (voicecore.sim.model.faults, `POST /faults`): `fail_responses` opens a window
in which every response the session would start fails at once, as a rate-limited or failing server
answers (response.created, an `error` event, response.done status `failed` with the error); `inject_fault`
sends one bad message (not JSON, an event type the protocol lacks, an audio delta of a response never
created, a 4 MiB delta), or makes the next transcription fail (`transcription_failed`: the vendor's
`conversation.item.input_audio_transcription.failed` instead of the transcript). Neither changes the
conversation: the session goes on as before afterwards.

Caller transcripts (module transcription): with input transcription on, the session's transcription model
decides the events (whisper-1: one late `completed`; the gpt-4o transcribe family: `delta` word pieces,
then `completed`), at seeded delays. Turn detection `semantic_vad` ends a turn after a short silence when
its words sound finished, and waits up to the eagerness's maximum when they do not (session_config).

Audio is 8 kHz G.711: mu-law (`audio/pcmu` / `g711_ulaw`) or A-law (`audio/pcma` / `g711_alaw`), each
direction as session.update selects it, as the real server takes and speaks both (C.1). A response is
refused until session.update selects one of them for output, as a real server would otherwise send 24 kHz
PCM the carrier cannot play. Inside, the session works in mu-law (its clips, VAD, recognition): A-law input
is read through ``G711_ALAW_TO_ULAW`` as it arrives, and a response's audio is put in A-law once, when the
response is made (``dither_alaw``), so its deltas carry A-law bytes exactly as the vendor's would.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass, field
from typing import Any

import orjson

from voicecore.g711 import ALAW_TO_ULAW as G711_ALAW_TO_ULAW
from voicecore.g711 import ULAW_TO_ALAW as G711_ULAW_TO_ALAW
from voicecore.sim.audio_clips import ClipInfo, ClipLibrary, default_library, with_caller_phrases
from voicecore.sim.model.clips import (
    caller_signature,
    fitting_clip,
    clip_speaking,
    dither_alaw,
    dither_ulaw,
    peak_ulaw,
    rms_ulaw,
    scripted_text,
    speech_span_ms,
)
from voicecore.sim.model.config import SimConfig
from voicecore.sim.model.faults import (
    MALFORMED_TEXT,
    MULAW_SILENCE,
    RESPONSE_FAULT_KINDS,
    UNKNOWN_DELTA_BYTES,
    UNKNOWN_EVENT_TYPE,
    huge_delta_base64,
    vendor_error,
)
from voicecore.sim.model.records import (
    CancelRecord,
    ErrorRecord,
    FaultRecord,
    FunctionCallOutputRecord,
    ResponseRecord,
    SessionRecord,
    SpeechRecord,
    TruncateRecord,
)
from voicecore.sim.model.refusals import expired_error
from voicecore.sim.model.rejects import ClientEventRejected, invalid_value, missing_parameter
from voicecore.sim.model.rng import SplitMix64
from voicecore.sim.model.schedule import plan_response, plan_text, split_delta_sizes
from voicecore.sim.model.turns import (
    CALL_AFTER_PREAMBLE_MS,
    TurnAction,
    TurnBook,
    argument_chunks,
    plan_call,
)
from voicecore.sim.model.session_config import (
    SessionSettings,
    merge_session_update,
    render_session,
    semantic_max_silence_ms,
    sounds_unfinished,
    turn_end_silence_ms,
)
from voicecore.sim.model.transcription import (
    FAILED_ERROR,
    TranscriptionStep,
    backchannel_vocabulary,
    plan_transcription,
    streams_deltas,
    transcript_pieces,
    words_of,
)
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES, FRAME_MS

# event names that differ between beta and GA (C.1); everything else is spelled the same
_NAMES = {
    "ga": {
        "audio_delta": "response.output_audio.delta",
        "audio_done": "response.output_audio.done",
        "transcript_delta": "response.output_audio_transcript.delta",
        "transcript_done": "response.output_audio_transcript.done",
        "assistant_content": "output_audio",
        "text_delta": "response.output_text.delta",
        "text_done": "response.output_text.done",
        "assistant_text": "output_text",
    },
    "beta": {
        "audio_delta": "response.audio.delta",
        "audio_done": "response.audio.done",
        "transcript_delta": "response.audio_transcript.delta",
        "transcript_done": "response.audio_transcript.done",
        "assistant_content": "audio",
        "text_delta": "response.text.delta",
        "text_done": "response.text.done",
        "assistant_text": "text",
    },
}

_RATE_LIMITS = [
    {"name": "requests", "limit": 10000, "remaining": 9999, "reset_seconds": 0.006},
    {"name": "tokens", "limit": 2000000, "remaining": 1994000, "reset_seconds": 0.18},
]

_FAILED_DETAILS = {
    "type": "failed",
    "error": {"type": "server_error", "code": "simulated_failure", "message": "The simulator failed this response."},
}


# what _next_due found due next (also the tie order)
_DUE_RESPONSE, _DUE_OVERLAP, _DUE_TIMER = 0, 1, 2


@dataclass(slots=True)
class _Item:
    item_id: str
    role: str | None
    rendered: dict[str, Any]  # the item as the server shows it (conversation.item.retrieve)
    audio_bytes: int = 0  # assistant audio sent so far (or kept after a truncate)
    transcript: str | None = None


@dataclass(slots=True)
class _CallPart:
    """The function_call output item of a response (turns.TurnAction with a call)."""

    item_id: str
    call_id: str
    name: str
    arguments: str
    chunks: list[str]  # the argument deltas
    output_index: int
    sent: int = 0  # argument deltas sent
    added: bool = False
    done: bool = False
    item: dict[str, Any] | None = None  # as rendered at output_item.done
    previous_item_id: str | None = None


@dataclass(slots=True)
class _Response:
    record: ResponseRecord
    words: list[str]  # transcript deltas; "".join(words) == record.text
    plan: list[tuple[int, int, str, int]]  # (due_ms, order, kind, index), sorted
    offsets: list[int] = field(default_factory=list)  # byte offset of each audio delta
    previous_item_id: str | None = None
    cursor: int = 0
    sent_words: int = 0
    audio_done_sent: bool = False
    usage_input_tokens: int = 0
    has_audio: bool = True  # a spoken item (output_index 0); False: a function call and nothing said
    audio_item: dict[str, Any] | None = None  # the spoken item once its done cascade went out before response.done
    call: _CallPart | None = None
    rate_limits_sent: bool = False
    error: dict[str, Any] | None = None  # a fault window's vendor error (faults.vendor_error) it fails with
    text_only: bool = False  # the session's output modality is text: its item is text, it has no audio


class ModelSession:
    """One simulated realtime session. Feed it client texts and time; read server texts back."""

    def __init__(
        self,
        config: SimConfig,
        session_index: int,
        seed: int,
        *,
        now_ms: int = 0,
        naming: str | None = None,
        call_sid: str | None = None,
        model: str | None = None,
        clips: ClipLibrary | None = None,
    ) -> None:
        self.config = config
        self.naming = naming or config.naming
        if self.naming not in ("ga", "beta"):
            raise ValueError(f"naming must be 'ga' or 'beta', not {self.naming!r}")
        self._names = _NAMES[self.naming]
        self._seed = seed
        self._session_index = session_index
        self._ids = SplitMix64(seed, session_index, "ids")
        self._clips = with_caller_phrases(clips if clips is not None else default_library(), config.caller_phrases)
        self._agent_clips = [c for c in self._clips.infos if c.role == "agent"]
        self._auto_clips = [c for c in self._agent_clips if c.kind in ("question", "answer")] or self._agent_clips
        self._caller_clips = [c for c in self._clips.infos if c.role == "caller"]
        self._backchannel_words = backchannel_vocabulary(self._caller_clips)
        self._heard_clips: dict[str, bytes] = {}  # caller clip name -> as an A-law caller's audio is heard here
        self._model = model or config.model
        self._cfg = SessionSettings()
        self._outbox: list[str] = []
        self._items: dict[str, _Item] = {}
        # responses in progress, oldest first: one, or two while an overlap (SimConfig.overlap_*) streams
        self._active: list[_Response] = []
        self._overlap_starts: list[tuple[int, int, _Response]] = []  # (due_ms, seq, the response it overlaps)
        self._overlap_seq = 0
        self._response_count = 0
        self._auto_clip_cursor = 0
        self._fail_next = config.fail_next_response
        self._fault_until: dict[str, int] = {}  # RESPONSE_FAULT_KINDS -> end of its window (ms)
        self._client_event_id: str | None = None  # of the client event being handled (an error echoes it)
        self._turns = TurnBook(config.turns)
        self._audio_produced = False
        # transcription events due: (due_ms, seq, item_id, the step, seconds of audio transcribed)
        self._timers: list[tuple[int, int, str, TranscriptionStep, float]] = []
        self._timer_seq = 0
        self._transcriptions = 0  # items transcribed so far (each draws its delays from its own stream)
        self._fail_next_transcription = False
        self._speech_by_item: dict[str, SpeechRecord] = {}
        # input buffer and VAD (positions are byte offsets into all audio appended this session)
        self._in_total = 0
        self._in_buf = bytearray()
        self._in_buf_start = 0
        self._vad_pos = 0
        self._speaking = False
        self._speech_run_ms = 0
        self._silence_run_ms = 0
        self._speech: SpeechRecord | None = None
        self._speech_start_bytes = 0
        self._last_speech_pos = 0  # end of the latest 20 ms window of speech (byte position)
        # semantic_vad: the silence the turn now waits for, once its words sounded unfinished (None: the
        # eagerness's short silence, not yet judged in this pause)
        self._semantic_hold_ms: int | None = None
        self._session_id = "sess_" + self._ids.token()
        self._conversation_id = "conv_" + self._ids.token()
        self.record = SessionRecord(
            session_id=self._session_id,
            session_index=session_index,
            naming=self.naming,
            model=self._model,
            connected_ms=now_ms,
            call_sid=call_sid,
        )
        # session.created is always the first event (C.3)
        self._emit({"type": "session.created", "session": self._render_session()})

    # ---- public API ----------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def active_response_id(self) -> str | None:
        """The newest response in progress (None: none)."""
        return self._active[-1].record.response_id if self._active else None

    def events_to_send(self) -> list[str]:
        out, self._outbox = self._outbox, []
        return out

    def next_wakeup_ms(self) -> int | None:
        due = self._next_due()
        return None if due is None else due[0]

    def fail_next_response(self) -> None:
        """Arm a failure for the next response.create (a harness switch at run time)."""
        self._fail_next = True

    def close(self, now_ms: int) -> None:
        self.record.closed_ms = now_ms

    def expire(self, now_ms: int) -> None:
        """The session reached the vendor's longest duration (SimConfig.session_limit_ms): whatever was due
        goes out, then the `error` that says so; the shell closes the socket after it. Responses in progress
        end with the socket, unfinished, as the vendor's do."""
        self.advance(now_ms)
        self.record.expired_ms = now_ms
        self.record.errors.append(ErrorRecord(now_ms, "session_expired", None))
        self._emit({"type": "error", "error": expired_error(self.config.session_limit_ms)})

    def fail_responses(self, kind: str, until_ms: int, now_ms: int) -> None:
        """Until `until_ms` every response this session would start fails at once with `kind`'s vendor
        error (faults.RESPONSE_FAULT_KINDS: rate_limit, server_error); the session stays open."""
        if kind not in RESPONSE_FAULT_KINDS:
            raise ValueError(f"not a response fault: {kind!r}")
        self._fault_until[kind] = max(until_ms, self._fault_until.get(kind, 0))
        self.record.faults.append(FaultRecord(now_ms, kind, until_ms=until_ms))

    def note_fault(self, kind: str, now_ms: int, until_ms: int | None = None) -> None:
        """Record a fault the socket applied (drop_1011, binary_frame, stall): the session sends nothing
        for it, but a harness reading the record sees what hit the session."""
        self.record.faults.append(FaultRecord(now_ms, kind, until_ms=until_ms))

    def inject_fault(self, kind: str, now_ms: int) -> None:
        """Send one bad message now, after whatever was due: `malformed_json` (a text that is not JSON),
        `unknown_event` (a type the protocol does not have), `unknown_response_delta` (audio of a response
        never created), `huge_delta` (4 MiB of base64 silence for the newest response in progress, or for an
        unknown one when none is), `transcription_failed` (nothing now: the next item transcribed gets the
        `failed` event instead of its transcript). The conversation is not changed."""
        self.advance(now_ms)
        response_id = None
        if kind == "transcription_failed":
            self._fail_next_transcription = True
        elif kind == "malformed_json":
            self._outbox.append(MALFORMED_TEXT)
        elif kind == "unknown_event":
            self._emit({"type": UNKNOWN_EVENT_TYPE, "detail": "an event type the Realtime protocol does not have"})
        elif kind in ("unknown_response_delta", "huge_delta"):
            current = self._active[-1] if kind == "huge_delta" and self._active else None
            if current is not None and current.has_audio:
                response_id, item_id = current.record.response_id, current.record.item_id
                stored = self._items.get(item_id)
                if stored is not None:  # the vendor sent it as part of the item: a truncate may cut into it
                    stored.audio_bytes += len(huge_delta_base64()) // 4 * 3
            else:
                response_id, item_id = "resp_" + self._ids.token(), "item_" + self._ids.token()
            if kind == "huge_delta":
                delta = huge_delta_base64()
            else:
                delta = binascii.b2a_base64(bytes([MULAW_SILENCE]) * UNKNOWN_DELTA_BYTES, newline=False).decode("ascii")
            self._emit({
                "type": self._names["audio_delta"],
                "response_id": response_id,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": delta,
            })
        else:
            raise ValueError(f"not a fault a session sends: {kind!r}")
        self.record.faults.append(FaultRecord(now_ms, kind, response_id=response_id))

    def advance(self, now_ms: int) -> None:
        """Emit every scheduled event due at or before `now_ms`, in time order."""
        while True:
            due = self._next_due()
            if due is None or due[0] > now_ms:
                return
            if due[1] == _DUE_RESPONSE:
                self._step_response(due[2], now_ms)
            elif due[1] == _DUE_OVERLAP:
                self._start_overlap(now_ms)
            else:
                _, _, item_id, step, seconds = self._timers.pop(0)
                self._emit_transcription(item_id, step, seconds, now_ms)

    def receive_client_event(self, text: str | bytes, now_ms: int) -> None:
        # whatever was due before this event arrived went out first
        self.advance(now_ms)
        event_type: str | None = None
        event_id: str | None = None
        try:
            if isinstance(text, (bytes, bytearray, memoryview)):
                try:
                    text = bytes(text).decode("utf-8")
                except UnicodeDecodeError:
                    raise ClientEventRejected("invalid_json", "The message is not UTF-8 JSON text.") from None
            try:
                event = orjson.loads(text)
            except (ValueError, RecursionError):
                raise ClientEventRejected("invalid_json", "The message could not be parsed as JSON.") from None
            if not isinstance(event, dict):
                raise ClientEventRejected("invalid_json", "The message must be a JSON object.")
            raw_id = event.get("event_id")
            event_id = raw_id if isinstance(raw_id, str) else None
            self._client_event_id = event_id
            event_type = event.get("type")
            if not isinstance(event_type, str):
                raise missing_parameter("type")
            self.record.client_events[event_type] = self.record.client_events.get(event_type, 0) + 1
            handler = self._HANDLERS.get(event_type)
            if handler is None:
                raise ClientEventRejected(
                    "invalid_value", f"Invalid value: '{event_type}'. Unsupported client event type.", "type"
                )
            handler(self, event, now_ms)
        except ClientEventRejected as reject:
            self._error(reject, event_id, event_type, now_ms)
        finally:
            self._client_event_id = None

    # ---- client event handlers (D.2) -----------------------------------------------------------

    def _on_session_update(self, event: dict[str, Any], now_ms: int) -> None:
        session = event.get("session")
        if not isinstance(session, dict):
            raise missing_parameter("session")
        merged = merge_session_update(self._cfg, session, self.naming)
        if merged.voice != self._cfg.voice and self._audio_produced:
            raise ClientEventRejected(
                "cannot_update_voice",
                "Cannot update a conversation's voice if assistant audio is present.",
                "session.voice",
            )
        self._cfg = merged
        self.record.input_format, self.record.output_format = merged.input_format, merged.output_format
        self._emit({"type": "session.updated", "session": self._render_session()})

    def _on_append(self, event: dict[str, Any], now_ms: int) -> None:
        audio_b64 = event.get("audio")
        if not isinstance(audio_b64, str):
            raise missing_parameter("audio")
        try:
            audio = binascii.a2b_base64(audio_b64, strict_mode=True)
        except (binascii.Error, ValueError):
            raise invalid_value("audio", "not valid base64") from None
        # no acknowledgement is sent for append (C.2)
        if self._cfg.input_format == "pcma":
            audio = audio.translate(G711_ALAW_TO_ULAW)  # the session listens in mu-law (module docstring)
        self._in_buf += audio
        self._in_total += len(audio)
        self.record.appended_bytes += len(audio)
        self._run_vad(now_ms)

    def _on_commit(self, event: dict[str, Any], now_ms: int) -> None:
        have_ms = len(self._in_buf) // BYTES_PER_MS
        if have_ms < 100:
            raise ClientEventRejected(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, "
                f"but buffer only has {have_ms:.2f}ms of audio.",
            )
        audio = bytes(self._in_buf)
        item_id = self._speech.item_id if self._speech is not None else "item_" + self._ids.token()
        self._reset_input(self._in_total)
        self._commit(audio, item_id, now_ms)

    def _on_clear(self, event: dict[str, Any], now_ms: int) -> None:
        self._reset_input(self._in_total)
        self._emit({"type": "input_audio_buffer.cleared"})

    def _on_output_clear(self, event: dict[str, Any], now_ms: int) -> None:
        # WebRTC/SIP only; over a WebSocket the client owns playback (C.2, D.2 item 7)
        raise ClientEventRejected(
            "invalid_value",
            "output_audio_buffer.clear is only supported for WebRTC and SIP sessions.",
            "type",
        )

    def _on_response_create(self, event: dict[str, Any], now_ms: int) -> None:
        options = event.get("response")
        if options is not None and not isinstance(options, dict):
            raise invalid_value("response", "expected an object")
        if options is not None and "instructions" in options and not isinstance(options["instructions"], str):
            raise invalid_value("response.instructions", "expected a string")
        self._start_response(now_ms, options or {}, origin="client")

    def _on_response_cancel(self, event: dict[str, Any], now_ms: int) -> None:
        """With a response_id: that response, if it is in progress. Without one: every response in
        progress, oldest first (the real server's choice when two are active is not documented; cancelling
        all is what a client that names none means). One CancelRecord per response cancelled."""
        requested = event.get("response_id")
        if requested is not None and not isinstance(requested, str):
            raise invalid_value("response_id", "expected a string")
        if requested is None:
            targets = list(self._active)
        else:
            targets = [r for r in self._active if r.record.response_id == requested]
        if not targets:
            self.record.cancels.append(CancelRecord(now_ms, requested, None))
            raise ClientEventRejected("response_cancel_not_active", "Cancellation failed: no active response found")
        for response in targets:
            self.record.cancels.append(CancelRecord(now_ms, requested, response.record.response_id))
            self._cancel(response, now_ms, "client_cancelled")

    def _on_item_create(self, event: dict[str, Any], now_ms: int) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            raise missing_parameter("item")
        item_type = item.get("type")
        call_id: str | None = None
        if item_type == "message":
            role = item.get("role")
            if role not in ("user", "system", "assistant"):
                raise invalid_value("item.role", "expected user, system or assistant")
            content = item.get("content")
            if not isinstance(content, list):
                raise missing_parameter("item.content")
        elif item_type in ("function_call_output", "function_call"):
            role, content = None, []
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise missing_parameter("item.call_id")
        else:
            raise invalid_value("item.type", "expected message, function_call or function_call_output")
        item_id = item.get("id") if isinstance(item.get("id"), str) else "item_" + self._ids.token()
        if item_id in self._items:
            raise invalid_value("item.id", f"an item with id '{item_id}' already exists")
        if item_type == "function_call_output" and call_id is not None:
            self._receive_function_output(call_id, item.get("output"), now_ms)
        previous = self._last_item_id()
        rendered = {k: v for k, v in item.items() if k not in ("id", "object", "status")}
        rendered.update({"id": item_id, "object": "realtime.item", "status": "completed"})
        stored = _Item(item_id, role, rendered)
        if role == "user":
            # the caller's words as the rules see them: a DTMF note, a typed line
            texts = [part.get("text") for part in content if isinstance(part, dict)]
            stored.transcript = " ".join(t for t in texts if isinstance(t, str)) or None
            self._turns.caller_spoke()
        self._items[item_id] = stored
        self._emit_item_events(rendered, previous, ("added", "done"))
        if item_type == "function_call_output" and call_id is not None:
            self._turns.output_received(call_id)

    def _receive_function_output(self, call_id: str, output: Any, now_ms: int) -> None:
        """Record a function_call_output; with rules configured, refuse one whose call is not in the
        conversation, as the real server does ("Tool call ID ... not found in conversation.")."""
        known = any(
            stored.rendered.get("type") == "function_call" and stored.rendered.get("call_id") == call_id
            for stored in self._items.values()
        )
        self.record.function_call_outputs.append(
            FunctionCallOutputRecord(call_id, output if isinstance(output, str) else None, now_ms, known)
        )
        if self.config.turns and not known:
            raise ClientEventRejected("invalid_tool_call_id", f"Tool call ID '{call_id}' not found in conversation.")

    def _on_item_retrieve(self, event: dict[str, Any], now_ms: int) -> None:
        item = self._find_item(event)
        self._emit({"type": "conversation.item.retrieved", "item": item.rendered})

    def _on_item_delete(self, event: dict[str, Any], now_ms: int) -> None:
        item = self._find_item(event)
        del self._items[item.item_id]
        self.record.deleted_item_ids.append(item.item_id)
        self._emit({"type": "conversation.item.deleted", "item_id": item.item_id})

    def _on_item_truncate(self, event: dict[str, Any], now_ms: int) -> None:
        # D.2 item 6: item exists, is assistant, content_index 0, audio_end_ms within its audio
        item_id = event.get("item_id")
        audio_end_ms = event.get("audio_end_ms")
        if not isinstance(audio_end_ms, int) or isinstance(audio_end_ms, bool) or audio_end_ms < 0:
            raise invalid_value("audio_end_ms", "expected a non-negative integer")
        item = self._items.get(item_id) if isinstance(item_id, str) else None
        record = TruncateRecord(
            item_id if isinstance(item_id, str) else "", audio_end_ms, now_ms, False,
            None if item is None else item.audio_bytes // BYTES_PER_MS,
        )
        self.record.truncates.append(record)
        if not isinstance(item_id, str):
            raise missing_parameter("item_id")
        if item is None:
            raise invalid_value("item_id", f"Item with item_id '{item_id}' not found.")
        if item.role != "assistant":
            raise invalid_value("item_id", "Only assistant messages can be truncated.")
        content_index = event.get("content_index", 0)
        if content_index != 0:
            raise invalid_value("content_index", "expected 0 (the audio content part)")
        item_audio_ms = item.audio_bytes // BYTES_PER_MS
        if audio_end_ms > item_audio_ms:
            raise ClientEventRejected(
                "invalid_value",
                f"Audio content of {item_audio_ms}ms is already shorter than {audio_end_ms}ms",
                "audio_end_ms",
            )
        item.audio_bytes = audio_end_ms * BYTES_PER_MS
        item.transcript = None  # the server deletes the transcript of the unheard part (C.2)
        record.ok = True
        self._emit(
            {
                "type": "conversation.item.truncated",
                "item_id": item_id,
                "content_index": 0,
                "audio_end_ms": audio_end_ms,
            }
        )

    _HANDLERS = {
        "session.update": _on_session_update,
        "input_audio_buffer.append": _on_append,
        "input_audio_buffer.commit": _on_commit,
        "input_audio_buffer.clear": _on_clear,
        "output_audio_buffer.clear": _on_output_clear,
        "conversation.item.create": _on_item_create,
        "conversation.item.retrieve": _on_item_retrieve,
        "conversation.item.delete": _on_item_delete,
        "conversation.item.truncate": _on_item_truncate,
        "response.create": _on_response_create,
        "response.cancel": _on_response_cancel,
    }

    # ---- input: VAD and commits ----------------------------------------------------------------

    def _reset_input(self, position: int) -> None:
        self._in_buf = bytearray()
        self._in_buf_start = position
        self._vad_pos = position
        self._speaking = False
        self._speech = None
        self._speech_run_ms = 0
        self._silence_run_ms = 0
        self._semantic_hold_ms = None

    def _turn_silence_ms(self, td: dict[str, Any]) -> int:
        """The silence that ends the current turn now: server_vad's silence_duration_ms; semantic_vad's
        short silence, or its eagerness's maximum once the words in this pause sounded unfinished."""
        return self._semantic_hold_ms if self._semantic_hold_ms is not None else turn_end_silence_ms(td)

    def _run_vad(self, now_ms: int) -> None:
        td = self._cfg.turn_detection
        if td is None:
            self._vad_pos = self._in_total  # no VAD: the client commits (C.4)
            return
        prefix_ms = int(td.get("prefix_padding_ms", 300))
        self._skip_quiet_frames(prefix_ms, self._turn_silence_ms(td))
        while self._vad_pos + FRAME_BYTES <= self._in_total:
            at = self._vad_pos - self._in_buf_start
            is_speech = rms_ulaw(bytes(self._in_buf[at : at + FRAME_BYTES])) >= self.config.vad_rms_threshold
            self._vad_pos += FRAME_BYTES
            if is_speech:
                self._last_speech_pos = self._vad_pos
            end_ms = self._vad_pos // BYTES_PER_MS
            if not self._speaking:
                self._speech_run_ms = self._speech_run_ms + FRAME_MS if is_speech else 0
                if self._speech_run_ms >= self.config.vad_min_speech_ms:
                    self._start_speech(end_ms - self._speech_run_ms, prefix_ms, td, now_ms)
                elif not is_speech:
                    # idle: keep only what a future turn's prefix padding can reach
                    keep_from = max(self._in_buf_start, self._vad_pos - (prefix_ms + 100) * BYTES_PER_MS)
                    if keep_from > self._in_buf_start:
                        del self._in_buf[: keep_from - self._in_buf_start]
                        self._in_buf_start = keep_from
            elif is_speech:
                self._silence_run_ms = 0
                self._semantic_hold_ms = None  # speech resumed: the next pause is judged afresh
            else:
                self._silence_run_ms += FRAME_MS
                if self._silence_run_ms < self._turn_silence_ms(td):
                    continue
                if td["type"] == "semantic_vad" and self._semantic_hold_ms is None and self._unfinished_so_far():
                    self._semantic_hold_ms = semantic_max_silence_ms(td)
                    if self._silence_run_ms < self._semantic_hold_ms:
                        continue
                self._stop_speech(end_ms, td, now_ms)

    def _skip_quiet_frames(self, prefix_ms: int, silence_ms: int) -> None:
        """What the frame loop of _run_vad would do with the waiting whole frames, in one step, when no
        sample among them reaches the threshold (so no frame's RMS can) and the silence they add ends no
        turn (nor reaches the point where semantic_vad judges the words): most of a caller's appends are
        quiet, and the loop costs a Python round per frame."""
        frames = (self._in_total - self._vad_pos) // FRAME_BYTES
        if frames < 2:
            return
        span_ms = frames * FRAME_MS
        if self._speaking and self._silence_run_ms + span_ms >= silence_ms:
            return
        at = self._vad_pos - self._in_buf_start
        if peak_ulaw(bytes(self._in_buf[at : at + frames * FRAME_BYTES])) >= self.config.vad_rms_threshold:
            return
        self._vad_pos += frames * FRAME_BYTES
        if self._speaking:
            self._silence_run_ms += span_ms
            return
        self._speech_run_ms = 0
        keep_from = max(self._in_buf_start, self._vad_pos - (prefix_ms + 100) * BYTES_PER_MS)
        if keep_from > self._in_buf_start:
            del self._in_buf[: keep_from - self._in_buf_start]
            self._in_buf_start = keep_from

    def _unfinished_so_far(self) -> bool:
        """semantic_vad's judgement of the caller's words at a pause: unfinished when the pause is inside a
        packaged caller clip (more of its speech follows: the caller is mid-sentence), else when the words
        recognised so far sound unfinished (session_config.sounds_unfinished: a comma, "...", a filler)."""
        lo = max(0, self._speech_start_bytes - self._in_buf_start)
        hi = self._last_speech_pos - self._in_buf_start
        audio = bytes(self._in_buf[lo:hi])
        # the 40 ms before the last window of speech: inside the clip whatever the frames' alignment
        probe = audio[-3 * FRAME_BYTES : -FRAME_BYTES]
        if len(probe) == 2 * FRAME_BYTES:
            threshold = self.config.vad_rms_threshold
            min_windows = max(1, -(-self.config.vad_min_speech_ms // FRAME_MS))
            for clip in self._caller_clips:
                heard = self._heard_clip(clip.name)
                at = heard.find(probe)
                if at < 0:
                    continue
                rest = heard[at + len(probe) + 2 * FRAME_BYTES :]  # past the last window (and its edge)
                windows = sum(1 for i in range(0, len(rest) - FRAME_BYTES + 1, FRAME_BYTES)
                              if rms_ulaw(rest[i : i + FRAME_BYTES]) >= threshold)
                return windows >= min_windows or sounds_unfinished(clip.text)
        text, _clip, _kind = self._recognise(audio)
        return sounds_unfinished(text)

    def _heard_clip(self, name: str) -> bytes:
        """A caller clip as this session hears it: as is, or through A-law and back for an A-law caller
        (who plays the clip in A-law, read here through ALAW_TO_ULAW: _on_append)."""
        audio = self._clips.audio[name]
        if self._cfg.input_format != "pcma":
            return audio
        heard = self._heard_clips.get(name)
        if heard is None:
            heard = self._heard_clips[name] = audio.translate(G711_ULAW_TO_ALAW).translate(G711_ALAW_TO_ULAW)
        return heard

    def _start_speech(self, start_ms: int, prefix_ms: int, td: dict[str, Any], now_ms: int) -> None:
        audio_start_ms = max(self._in_buf_start // BYTES_PER_MS, start_ms - prefix_ms)
        item_id = "item_" + self._ids.token()
        self._speaking = True
        self._silence_run_ms = 0
        self._semantic_hold_ms = None
        self._speech_start_bytes = audio_start_ms * BYTES_PER_MS
        self._speech = SpeechRecord(item_id=item_id, audio_start_ms=audio_start_ms, started_at_ms=now_ms)
        self.record.speech.append(self._speech)
        self._speech_by_item[item_id] = self._speech
        self._emit({"type": "input_audio_buffer.speech_started", "audio_start_ms": audio_start_ms, "item_id": item_id})
        if td.get("interrupt_response", True) and self._active:
            # every response in progress stops, oldest first: each lets its late deltas out, then its done cascade
            self._speech.interrupted_response_id = self._active[-1].record.response_id
            for response in list(self._active):
                self._cancel(response, now_ms, "turn_detected")

    def _stop_speech(self, end_ms: int, td: dict[str, Any], now_ms: int) -> None:
        speech = self._speech
        assert speech is not None
        speech.audio_end_ms = end_ms
        speech.stopped_at_ms = now_ms
        self._emit({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": end_ms, "item_id": speech.item_id})
        lo = self._speech_start_bytes - self._in_buf_start
        hi = end_ms * BYTES_PER_MS - self._in_buf_start
        audio = bytes(self._in_buf[max(0, lo) : hi])
        rest = bytes(self._in_buf[hi:])
        self._reset_input(end_ms * BYTES_PER_MS)
        self._in_buf += rest
        self._commit(audio, speech.item_id, now_ms, speech)
        if td.get("create_response", True) and not self._active:
            self._start_response(now_ms, {}, origin="turn_detection")

    def _commit(self, audio: bytes, item_id: str, now_ms: int, speech: SpeechRecord | None = None) -> None:
        previous = self._last_item_id()
        self._emit({"type": "input_audio_buffer.committed", "item_id": item_id, "previous_item_id": previous})
        rendered = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        stored = _Item(item_id, "user", rendered)
        self._items[item_id] = stored
        self._emit_item_events(rendered, previous, ("added", "done"))
        transcript, clip_name, kind = self._recognise(audio)
        # the caller's words as the rules see them (not rendered: the transcription event is asynchronous)
        stored.transcript = transcript
        self._turns.caller_spoke()
        if speech is not None:
            speech.transcript, speech.caller_clip, speech.caller_kind = transcript, clip_name, kind
        if self._cfg.transcription is not None:
            # transcription runs asynchronously: it may land before or after the response events (C.3)
            seconds = round(len(audio) / (BYTES_PER_MS * 1000), 3)
            rng = SplitMix64(self._seed, self._session_index, "transcription", self._transcriptions)
            self._transcriptions += 1
            fail, self._fail_next_transcription = self._fail_next_transcription, False
            steps = plan_transcription(self.config, self._cfg.transcription.get("model"), transcript, now_ms, rng,
                                       self._backchannel_words, fail)
            for step in steps:
                self._timer_seq += 1
                self._timers.append((step.due_ms, self._timer_seq, item_id, step, seconds))
            self._timers.sort(key=lambda timer: timer[:2])

    def _recognise(self, audio: bytes) -> tuple[str, str | None, str | None]:
        """(words, the first clip, the utterance's kind) of caller audio: the caller clips found in it by
        content (a carrier simulator plays clips byte for byte), in the order heard, their words joined (a
        noise has none); else the caller clip (kind caller) of about its speech length; else 'hello'. The
        kind is "caller" when a real turn's clip is among them, else "backchannel", else "noise"."""
        threshold = self.config.vad_rms_threshold
        found: list[tuple[int, ClipInfo]] = []
        for clip in self._caller_clips:
            probe, _ = caller_signature(self._clips.audio[clip.name], threshold)
            if self._cfg.input_format == "pcma":
                # an A-law caller plays the clip in A-law: heard here through ALAW_TO_ULAW (_on_append)
                probe = probe.translate(G711_ULAW_TO_ALAW).translate(G711_ALAW_TO_ULAW)
            at = audio.find(probe) if probe else -1
            if at >= 0:
                found.append((at, clip))
        if found:
            found.sort(key=lambda hit: hit[0])
            # a registered phrase that sounds exactly like a packaged clip (the same words, voice and speed)
            # is one utterance, heard once: the first listed (phrases come first) at each position
            found = [hit for n, hit in enumerate(found) if n == 0 or hit[0] != found[n - 1][0]]
            clips = [clip for _, clip in found]
            kinds = {clip.kind for clip in clips}
            kind = next((k for k in ("caller", "backchannel", "noise") if k in kinds), clips[0].kind)
            return " ".join(clip.text for clip in clips if clip.text), clips[0].name, kind
        span_ms = speech_span_ms(audio, threshold)
        best: tuple[int, ClipInfo] | None = None
        for clip in self._caller_clips:
            if clip.kind != "caller":
                continue  # audio that is no packaged clip is taken for a turn, never for a backchannel or a cough
            _, clip_span_ms = caller_signature(self._clips.audio[clip.name], threshold)
            distance = abs(clip_span_ms - span_ms)
            if distance <= 150 and (best is None or distance < best[0]):
                best = (distance, clip)
        if best is not None:
            return best[1].text, best[1].name, best[1].kind
        return "hello", None, None

    # ---- responses -----------------------------------------------------------------------------

    def _choose_clip(self, options: dict[str, Any], index: int) -> ClipInfo:
        metadata = options.get("metadata")
        if isinstance(metadata, dict) and "sim_clip" in metadata:
            name = metadata["sim_clip"]
            for clip in self._agent_clips:
                if clip.name == name:
                    return clip
            raise invalid_value("response.metadata.sim_clip", f"no agent clip named {name!r}")
        if self.config.clip_sequence:
            name = self.config.clip_sequence[index % len(self.config.clip_sequence)]
            return self._clips.info(name)
        instructions = options.get("instructions")
        if isinstance(instructions, str):
            # a scripted prompt ("Say exactly: ...") gets the clip that speaks it
            scripted = clip_speaking(scripted_text(instructions) or instructions, self._agent_clips)
            if scripted is not None:
                return scripted
        clip = self._auto_clips[self._auto_clip_cursor % len(self._auto_clips)]
        self._auto_clip_cursor += 1
        return clip

    def _start_response(self, now_ms: int, options: dict[str, Any], overlaps: _Response | None = None,
                        origin: str = "client") -> None:
        """``overlaps``: start this response while that one is still in progress (the overlap injection;
        a client's response.create during a response is refused, as the real server does). ``origin``:
        who asked for it (ResponseRecord.origin)."""
        if self._active and overlaps is None:
            active_id = self._active[-1].record.response_id
            raise ClientEventRejected(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {active_id}. "
                "Wait until the response is finished before creating a new one.",
            )
        text_only = self._cfg.output_modalities == ("text",)
        if not text_only and self._cfg.output_format not in ("pcmu", "pcma"):
            raise ClientEventRejected(
                "invalid_value",
                "The voicecore model simulator produces only 8 kHz G.711: set the output format to "
                + ("audio/pcmu or audio/pcma" if self.naming == "ga" else "g711_ulaw or g711_alaw")
                + " with session.update first.",
                "session.audio.output.format" if self.naming == "ga" else "session.output_audio_format",
            )
        metadata = options.get("metadata")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            raise invalid_value("response.metadata", "expected an object of strings")
        index = self._response_count
        action = self._turn_action(options) if overlaps is None else None
        calling = action is not None and bool(action.call)
        # a function call with nothing said first has no audio, so it takes no clip (nor a round-robin turn)
        clip = None if calling and action is not None and not action.text else self._choose_clip(options, index)
        if clip is not None and self.config.turns and not self.config.clip_sequence:
            # An agent scenario speaks lines no packaged clip speaks: give the line the clip whose length
            # fits it (as a voice would take about that long to say it), so its words and its audio keep
            # pace as a real server's streams do.
            line = action.text if action is not None and action.text else scripted_text(options.get("instructions"))
            if line and line != clip.text:
                clip = fitting_clip(line, self._agent_clips)
        self._response_count += 1
        cfg = self.config
        rng = SplitMix64(self._seed, self._session_index, "response", index)
        failed = self._fail_next or index in cfg.fail_responses or rng.uniform() < cfg.error_rate
        # a fault window (rate_limit, server_error) fails it at once, with the vendor's error
        fault = None if overlaps is not None else self._response_fault(now_ms)
        if overlaps is not None:
            failed = False  # the failure switches aim at requested responses; an overlap always speaks
        else:
            failed = failed or fault is not None
            self._fail_next = False
        hallucinated = (cfg.hallucinate or index in cfg.hallucinate_responses) and clip is not None
        if clip is None:
            text = ""
        elif hallucinated:
            text = cfg.hallucinated_text
        elif action is not None and action.text:
            text = action.text  # the rule's line; the audio is the clip chosen as usual
        else:
            text = scripted_text(options.get("instructions")) or clip.text
        # what an A-law session's deltas carry: the clip in A-law, dithered there (frame identity: clips.py)
        dither = dither_alaw if self._cfg.output_format == "pcma" else dither_ulaw
        audio = b"" if failed or clip is None or text_only else dither(self._clips.audio[clip.name], rng.u64())
        sizes = split_delta_sizes(len(audio), rng, cfg.delta_min_bytes, cfg.delta_max_bytes) if audio else []
        response_id = "resp_" + self._ids.token()
        item_id = "" if failed else "item_" + self._ids.token()
        # As the vendor applies them: the response's own instructions replace the session's for this response.
        requested = options.get("instructions")
        requested = requested if isinstance(requested, str) else None
        record = ResponseRecord(
            index=index,
            response_id=response_id,
            item_id=item_id,
            clip_name="" if clip is None else clip.name,
            text=text,
            audio=audio,
            audio_format="pcma" if self._cfg.output_format == "pcma" else "pcmu",
            delta_bytes=sizes,
            created_ms=now_ms,
            instructions=self._cfg.instructions if requested is None else requested,
            response_instructions=requested,
            session_instructions=self._cfg.instructions,
            metadata=metadata,
            hallucinated=hallucinated,
            failed=failed,
            overlaps=None if overlaps is None else overlaps.record.response_id,
            origin="overlap" if overlaps is not None else origin,
        )
        self.record.responses.append(record)
        words = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))] if text else []
        response = _Response(record=record, words=words, plan=[], usage_input_tokens=120 + 40 * index)
        response.has_audio = clip is not None
        response.text_only = text_only
        self._active.append(response)
        self._emit({"type": "response.created", "response": self._render_response(response, "in_progress", None, [])})
        if fault is not None:
            kind, until_ms = fault
            response.error = vendor_error(kind, self._model, until_ms - now_ms)
            record.error_code = response.error["code"]
            self._emit({"type": "error", "error": {**response.error, "param": None, "event_id": self._client_event_id}})
            response.plan = [(now_ms, 0, "fail", 0)]  # refused on arrival: no generation time
            return
        if failed:
            response.plan = [(now_ms + cfg.first_delta_latency_ms, 0, "fail", 0)]
            return  # the rule is not used up: a retried response.create gets it again
        if action is not None:
            record.rule = action.rule
            if calling:
                response.call = self._new_call(response, action)
            self._turns.commit(action, None if response.call is None else response.call.call_id)
        if response.has_audio and text_only:
            response.plan = plan_text(cfg, words, now_ms, rng)
        elif response.has_audio:
            response.plan, record.stalled = plan_response(cfg, sizes, words, now_ms, index)
            response.offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        if response.call is not None:
            call_rng = SplitMix64(self._seed, self._session_index, "call", index)
            if response.has_audio:
                # the spoken preamble's item completes, then the function_call item follows it
                finish_due = response.plan[-1][0]
                response.plan = [step for step in response.plan if step[2] != "finish"]
                response.plan.append((finish_due, 4, "audio_item_done", 0))
                low, high = CALL_AFTER_PREAMBLE_MS
                start_ms = finish_due + low + call_rng.below(high - low + 1)
            else:
                start_ms = now_ms + cfg.first_delta_latency_ms
            steps = plan_call(start_ms, len(response.call.chunks), call_rng)
            # with nothing said first, the item is added at once (below), as a spoken item would be
            response.plan += [step for step in steps if response.has_audio or step[2] != "call_added"]
            response.plan.sort()
        if overlaps is None and cfg.overlap_probability > 0.0:
            draw = SplitMix64(self._seed, self._session_index, "overlap", index)
            if draw.uniform() < cfg.overlap_probability:
                low, high = cfg.overlap_delay_ms
                self._overlap_seq += 1
                self._overlap_starts.append((now_ms + low + draw.below(high - low + 1), self._overlap_seq, response))
                self._overlap_starts.sort(key=lambda entry: entry[:2])
        if not response.has_audio:
            assert response.call is not None
            self._add_call_item(response)  # right after response.created, as the spoken item would be
            return
        previous = self._last_item_id()
        response.previous_item_id = previous
        item = self._render_assistant_item(response, "in_progress", include_content=False)
        self._items[item_id] = _Item(item_id, "assistant", item)
        self._emit({"type": "response.output_item.added", "response_id": response_id, "output_index": 0, "item": item})
        self._emit_item_events(item, previous, ("added",))
        self._emit(
            {
                "type": "response.content_part.added",
                "response_id": response_id,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "part": {"type": "text", "text": ""} if text_only else {"type": "audio", "transcript": ""},
            }
        )

    def _response_fault(self, now_ms: int) -> tuple[str, int] | None:
        """(kind, window end) of the fault window open now, if any (the one lasting longest)."""
        open_now = [(until, kind) for kind, until in self._fault_until.items() if now_ms < until]
        if not open_now:
            return None
        until, kind = max(open_now)
        return kind, until

    def _turn_action(self, options: dict[str, Any]) -> TurnAction | None:
        """The scripted turn (SimConfig.turns) this response answers, if any: not for a scripted prompt
        ("Say exactly: ...") nor a response pinned by sim_clip metadata, which keep their behaviour."""
        if not self.config.turns or scripted_text(options.get("instructions")) is not None:
            return None
        metadata = options.get("metadata")
        if isinstance(metadata, dict) and "sim_clip" in metadata:
            return None
        user_item = next(
            ((stored.item_id, stored.transcript) for stored in reversed(self._items.values()) if stored.role == "user"),
            None,
        )
        return self._turns.choose(user_item, self._callable_functions(options))

    def _callable_functions(self, options: dict[str, Any]) -> frozenset[str]:
        """Names of the functions the model may call in this response: the response's own tools if it
        sends any, else the session's; none when tool_choice is "none"."""
        tools = options.get("tools", self._cfg.tools)
        tool_choice = options.get("tool_choice", self._cfg.tool_choice)
        if tool_choice == "none" or not isinstance(tools, (list, tuple)):
            return frozenset()
        return frozenset(
            tool["name"] for tool in tools if isinstance(tool, dict) and isinstance(tool.get("name"), str)
        )

    def _new_call(self, response: _Response, action: TurnAction) -> _CallPart:
        """The function_call item of a response: its ids (from the session's id stream) and deltas."""
        record = response.record
        if response.has_audio:
            item_id, output_index = "item_" + self._ids.token(), 1
        else:
            item_id, output_index = record.item_id, 0  # the response's only item
        call_id = "call_" + self._ids.token(16)  # the real ids look like call_Xz0z4X8aSYDdkTf2
        record.function_call, record.call_id, record.call_item_id = action.call, call_id, item_id
        record.arguments = action.arguments
        chunks = argument_chunks(action.arguments, self.config.argument_delta_chars)
        return _CallPart(item_id, call_id, action.call, action.arguments, chunks, output_index)

    def _next_due(self) -> tuple[int, int, _Response | None] | None:
        """(due_ms, what, the response) of the next scheduled step. On a tie a response step goes first
        (the older response first), then an overlap start, then a transcription: a response that
        finishes in the same millisecond its overlap was due has finished by then."""
        best: tuple[int, int, _Response | None] | None = None
        for response in self._active:
            if response.cursor < len(response.plan):
                due = response.plan[response.cursor][0]
                if best is None or due < best[0]:
                    best = (due, _DUE_RESPONSE, response)
        if self._overlap_starts and (best is None or self._overlap_starts[0][0] < best[0]):
            best = (self._overlap_starts[0][0], _DUE_OVERLAP, None)
        if self._timers and (best is None or self._timers[0][0] < best[0]):
            best = (self._timers[0][0], _DUE_TIMER, None)
        return best

    def _start_overlap(self, now_ms: int) -> None:
        _, _, first = self._overlap_starts.pop(0)
        if not any(r is first for r in self._active):
            return  # the first response finished (done or cancelled) before: no overlap (_finish drops these too)
        try:
            # chosen like a server-VAD response's: the clip_sequence or the automatic choice
            self._start_response(now_ms, {}, overlaps=first)
        except ClientEventRejected:
            pass  # e.g. the client switched the output format away from pcmu meanwhile: no overlap

    def _step_response(self, response: _Response, now_ms: int) -> None:
        _, _, kind, index = response.plan[response.cursor]
        response.cursor += 1
        if kind == "audio":
            self._send_audio(response, index, now_ms, late=False)
        elif kind == "text":
            self._send_word(response, index)
        elif kind == "audio_done":
            self._send_rate_limits(response)
            self._send_audio_done(response)
        elif kind == "finish":
            self._finish(response, now_ms, "completed", None)
        elif kind == "fail":
            self._finish(response, now_ms, "failed", None)
        elif kind == "audio_item_done":
            response.audio_item = self._finish_audio_item(response, "completed")
        elif kind == "call_added":
            self._add_call_item(response)
        elif kind == "args":
            self._send_arguments(response, index)
        elif kind == "call_done":
            self._send_rate_limits(response)
            self._finish_call_item(response, "completed")

    def _send_rate_limits(self, response: _Response) -> None:
        # real logs show rate_limits.updated late in the response, before the done cascade (C.3); once
        if response.rate_limits_sent:
            return
        response.rate_limits_sent = True
        limits = [] if self.config.rate_limits_empty else _RATE_LIMITS
        self._emit({"type": "rate_limits.updated", "rate_limits": limits})

    def _render_call_item(self, call: _CallPart, status: str, arguments: str) -> dict[str, Any]:
        return {
            "id": call.item_id,
            "object": "realtime.item",
            "type": "function_call",
            "status": status,
            "call_id": call.call_id,
            "name": call.name,
            "arguments": arguments,
        }

    def _add_call_item(self, response: _Response) -> None:
        call = response.call
        assert call is not None
        call.added = True
        call.previous_item_id = self._last_item_id()
        item = self._render_call_item(call, "in_progress", "")
        self._items[call.item_id] = _Item(call.item_id, None, item)
        self._emit(
            {
                "type": "response.output_item.added",
                "response_id": response.record.response_id,
                "output_index": call.output_index,
                "item": item,
            }
        )
        self._emit_item_events(item, call.previous_item_id, ("added",))

    def _call_event(self, event_type: str, response: _Response, call: _CallPart) -> dict[str, Any]:
        return {
            "type": event_type,
            "response_id": response.record.response_id,
            "item_id": call.item_id,
            "output_index": call.output_index,
            "call_id": call.call_id,
        }

    def _send_arguments(self, response: _Response, index: int) -> None:
        call = response.call
        assert call is not None
        call.sent = max(call.sent, index + 1)
        response.record.arguments_sent = "".join(call.chunks[: call.sent])
        event = self._call_event("response.function_call_arguments.delta", response, call)
        event["delta"] = call.chunks[index]
        self._emit(self._obfuscate(event))

    def _finish_call_item(self, response: _Response, status: str) -> None:
        """The function_call item's done cascade: arguments.done (GA names the function; the beta event
        has no name), output_item.done, conversation.item.done (GA). Also sent, with the arguments so far,
        when the response is cancelled (the SDK documents arguments.done for that case)."""
        call = response.call
        assert call is not None
        call.done = True
        arguments = call.arguments if status == "completed" else response.record.arguments_sent
        done = self._call_event("response.function_call_arguments.done", response, call)
        if self.naming == "ga":
            done["name"] = call.name
        done["arguments"] = arguments
        self._emit(done)
        call.item = self._render_call_item(call, status, arguments)
        stored = self._items.get(call.item_id)
        if stored is not None:  # the client may have deleted it mid-response
            stored.rendered = call.item
        self._emit(
            {
                "type": "response.output_item.done",
                "response_id": response.record.response_id,
                "output_index": call.output_index,
                "item": call.item,
            }
        )
        if self.naming == "ga":
            self._emit({"type": "conversation.item.done", "item": call.item, "previous_item_id": call.previous_item_id})

    def _send_audio(self, response: _Response, index: int, now_ms: int, late: bool) -> None:
        record = response.record
        start = response.offsets[index]
        chunk = record.audio[start : start + record.delta_bytes[index]]
        if record.first_delta_ms is None:
            record.first_delta_ms = now_ms
        record.sent_bytes += len(chunk)
        record.delta_sent_ms.append(now_ms)
        if late:
            record.late_bytes += len(chunk)
            record.late_deltas += 1
        stored = self._items.get(record.item_id)
        if stored is not None:  # the client may have deleted the item mid-response
            stored.audio_bytes += len(chunk)
        self._audio_produced = True
        event = {
            "type": self._names["audio_delta"],
            "response_id": record.response_id,
            "item_id": record.item_id,
            "output_index": 0,
            "content_index": 0,
            "delta": binascii.b2a_base64(chunk, newline=False).decode("ascii"),
        }
        self._emit(self._obfuscate(event))

    def _send_word(self, response: _Response, index: int) -> None:
        response.sent_words = max(response.sent_words, index + 1)
        event = {
            "type": self._names["text_delta" if response.text_only else "transcript_delta"],
            "response_id": response.record.response_id,
            "item_id": response.record.item_id,
            "output_index": 0,
            "content_index": 0,
            "delta": response.words[index],
        }
        self._emit(self._obfuscate(event))

    def _send_audio_done(self, response: _Response) -> None:
        response.audio_done_sent = True
        self._emit(self._ids_event(self._names["audio_done"], response))

    def _cancel(self, response: _Response, now_ms: int, reason: str) -> None:
        """Stop generating; let the configured late deltas out, then the done cascade (D.2 item 5)."""
        response.record.cancel_ms = now_ms
        late = self.config.late_deltas_after_cancel
        remaining = response.plan[response.cursor :]
        response.cursor = len(response.plan)
        if response.record.failed:
            self._finish(response, now_ms, "cancelled", reason)
            return
        for _, _, kind, index in remaining:
            if late <= 0:
                break
            if kind == "audio":
                self._send_audio(response, index, now_ms, late=True)
                late -= 1
        self._finish(response, now_ms, "cancelled", reason)

    def _finish_audio_item(self, response: _Response, status: str) -> dict[str, Any]:
        """The spoken item's done cascade; returns the item as output_item.done showed it. `status` is
        the response's (completed | cancelled | ...): a cancelled item is incomplete, with what was said."""
        record = response.record
        cfg = self.config
        if response.text_only:
            return self._finish_text_item(response, status)
        if not response.audio_done_sent:
            self._send_audio_done(response)
        spoken = "".join(response.words[: response.sent_words]) if status == "cancelled" else record.text
        done_text = spoken + " (revised)" if cfg.transcript_done_differs else spoken
        if not (status == "cancelled" and cfg.omit_transcript_done_on_cancel):
            event = self._ids_event(self._names["transcript_done"], response)
            event["transcript"] = done_text
            self._emit(event)
        part_done = self._ids_event("response.content_part.done", response)
        part_done["part"] = {"type": "audio", "transcript": spoken}
        self._emit(part_done)
        item_status = "completed" if status == "completed" else "incomplete"
        item = self._render_assistant_item(response, item_status, include_content=True, transcript=spoken)
        stored = self._items.get(record.item_id)
        if stored is not None:
            stored.transcript = spoken
            stored.rendered = item
        self._emit(
            {
                "type": "response.output_item.done",
                "response_id": record.response_id,
                "output_index": 0,
                "item": item,
            }
        )
        if self.naming == "ga":
            self._emit({"type": "conversation.item.done", "item": item, "previous_item_id": response.previous_item_id})
        return item

    def _finish_text_item(self, response: _Response, status: str) -> dict[str, Any]:
        """A text response's item done cascade, as the vendor sends it in text output modality: text.done,
        content_part.done, output_item.done, conversation.item.done (GA). A cancelled item keeps what was sent."""
        record = response.record
        written = "".join(response.words[: response.sent_words]) if status == "cancelled" else record.text
        event = self._ids_event(self._names["text_done"], response)
        event["text"] = written
        self._emit(event)
        part_done = self._ids_event("response.content_part.done", response)
        part_done["part"] = {"type": "text", "text": written}
        self._emit(part_done)
        item = self._render_assistant_item(response, "completed" if status == "completed" else "incomplete",
                                           include_content=True, transcript=written)
        stored = self._items.get(record.item_id)
        if stored is not None:
            stored.transcript = written
            stored.rendered = item
        self._emit({"type": "response.output_item.done", "response_id": record.response_id, "output_index": 0, "item": item})
        if self.naming == "ga":
            self._emit({"type": "conversation.item.done", "item": item, "previous_item_id": response.previous_item_id})
        return item

    def _finish(self, response: _Response, now_ms: int, status: str, reason: str | None) -> None:
        """The done cascade (D.1): audio.done, transcript.done, content_part.done, output_item.done,
        conversation.item.done (GA), then the function_call item's if the response makes one, then
        response.done. Also sent, with partial content, on cancel."""
        record = response.record
        output: list[dict[str, Any]] = []
        if not record.failed:
            item_status = "completed" if status == "completed" else "incomplete"
            if response.has_audio:
                if response.audio_item is None:
                    response.audio_item = self._finish_audio_item(response, status)
                output.append(response.audio_item)
            call = response.call
            if call is not None and call.added:
                if not call.done:
                    self._finish_call_item(response, item_status)
                assert call.item is not None
                output.append(call.item)
        details: dict[str, Any] | None
        if status == "cancelled":
            details = {"type": "cancelled", "reason": reason}
        elif status == "failed":
            error = _FAILED_DETAILS["error"] if response.error is None else response.error
            details = {"type": "failed", "error": dict(error)}
        else:
            details = None
        record.status = status
        record.reason = reason
        record.done_ms = now_ms
        self._active = [r for r in self._active if r is not response]
        if self._overlap_starts:
            self._overlap_starts = [entry for entry in self._overlap_starts if entry[2] is not response]
        self._emit({"type": "response.done", "response": self._render_response(response, status, details, output)})

    # ---- rendering -----------------------------------------------------------------------------

    def _emit(self, event: dict[str, Any]) -> None:
        body = {"type": event.pop("type"), "event_id": "event_" + self._ids.token()}
        body.update(event)
        self._outbox.append(orjson.dumps(body).decode())  # compact, UTF-8 as is: what json.dumps gave, faster

    def _obfuscate(self, event: dict[str, Any]) -> dict[str, Any]:
        if self.config.obfuscation:
            # real GA deltas carry this undocumented padding string (C.3); parsers must ignore it
            event["obfuscation"] = self._ids.token(3 + self._ids.below(12))
        return event

    def _ids_event(self, event_type: str, response: _Response) -> dict[str, Any]:
        return {
            "type": event_type,
            "response_id": response.record.response_id,
            "item_id": response.record.item_id,
            "output_index": 0,
            "content_index": 0,
        }

    def _error(self, reject: ClientEventRejected, event_id: str | None, event_type: str | None, now_ms: int) -> None:
        self.record.errors.append(ErrorRecord(now_ms, reject.code, event_type))
        self._emit(
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "code": reject.code,
                    "message": reject.message,
                    "param": reject.param,
                    "event_id": event_id,  # echoes the client's event_id (C.0)
                },
            }
        )

    def _emit_item_events(self, item: dict[str, Any], previous: str | None, stages: tuple[str, ...]) -> None:
        if self.naming == "beta":
            self._emit({"type": "conversation.item.created", "previous_item_id": previous, "item": item})
            return
        for stage in stages:
            self._emit({"type": f"conversation.item.{stage}", "previous_item_id": previous, "item": item})

    def _last_item_id(self) -> str | None:
        return next(reversed(self._items), None)

    def _find_item(self, event: dict[str, Any]) -> _Item:
        item_id = event.get("item_id")
        if not isinstance(item_id, str):
            raise missing_parameter("item_id")
        item = self._items.get(item_id)
        if item is None:
            raise invalid_value("item_id", f"Item with item_id '{item_id}' not found.")
        return item

    def _render_assistant_item(
        self, response: _Response, status: str, include_content: bool, transcript: str | None = None
    ) -> dict[str, Any]:
        if not include_content:
            content: list[dict[str, Any]] = []
        elif response.text_only:
            content = [{"type": self._names["assistant_text"], "text": transcript}]
        else:
            content = [{"type": self._names["assistant_content"], "transcript": transcript}]
        return {
            "id": response.record.item_id,
            "object": "realtime.item",
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _render_response(
        self, response: _Response, status: str, details: dict[str, Any] | None, output: list[dict[str, Any]]
    ) -> dict[str, Any]:
        record = response.record
        usage = None
        if status != "in_progress":
            audio_tokens = record.sent_bytes // (BYTES_PER_MS * 50)  # about 20 audio tokens per second
            text_tokens = len(response.words[: response.sent_words])
            if response.call is not None:
                text_tokens += -(-len(record.arguments_sent) // 4)  # about 4 characters of JSON per token
            output_tokens = audio_tokens + text_tokens
            input_tokens = response.usage_input_tokens
            usage = {
                "total_tokens": input_tokens + output_tokens,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "input_token_details": {"text_tokens": input_tokens - 20, "audio_tokens": 20, "cached_tokens": 0},
                "output_token_details": {"text_tokens": text_tokens, "audio_tokens": audio_tokens},
            }
        body: dict[str, Any] = {
            "object": "realtime.response",
            "id": record.response_id,
            "status": status,
            "status_details": details,
            "output": output,
            "conversation_id": self._conversation_id,
            "usage": usage,
            "metadata": record.metadata,
        }
        if self.naming == "ga":
            body["output_modalities"] = ["text"] if response.text_only else ["audio"]
            body["max_output_tokens"] = self._cfg.max_output_tokens
            body["audio"] = {"output": {"format": {"type": "audio/" + self._cfg.output_format},
                                        "voice": self._cfg.voice}}
        else:
            body["modalities"] = ["text"] if response.text_only else ["text", "audio"]
            body["max_output_tokens"] = self._cfg.max_output_tokens
            body["voice"] = self._cfg.voice
            body["output_audio_format"] = "g711_alaw" if self._cfg.output_format == "pcma" else "g711_ulaw"
            body["temperature"] = 0.8
        return body

    def _render_session(self) -> dict[str, Any]:
        return render_session(self._cfg, self.naming, self._session_id, self._model)

    def _emit_transcription(self, item_id: str, step: TranscriptionStep, seconds: float, now_ms: int) -> None:
        """One transcription event (module transcription), noted in the utterance's SpeechRecord."""
        speech = self._speech_by_item.get(item_id)
        event: dict[str, Any] = {"type": "conversation.item.input_audio_transcription." + step.kind,
                                 "item_id": item_id, "content_index": 0}
        if step.kind == "delta":
            event["delta"] = step.text
        elif step.kind == "completed":
            event["transcript"] = step.text
            model = (self._cfg.transcription or {}).get("model")
            if streams_deltas(model):
                # the gpt-4o transcribe family bills tokens (about 10 audio tokens a second), whisper-1 seconds
                audio_tokens = max(1, round(seconds * 10))
                output_tokens = len(transcript_pieces(step.text))
                event["usage"] = {"type": "tokens", "input_tokens": audio_tokens, "output_tokens": output_tokens,
                                  "total_tokens": audio_tokens + output_tokens,
                                  "input_token_details": {"text_tokens": 0, "audio_tokens": audio_tokens}}
            else:
                event["usage"] = {"type": "duration", "seconds": seconds}
        else:
            event["error"] = dict(FAILED_ERROR)
        self._emit(event)
        if speech is None:
            return  # a client's commit without VAD: no utterance to note it in
        if step.kind != "failed" and speech.words_sent_ms is None and words_of(step.text):
            speech.words_sent_ms = now_ms
        if step.decisive and speech.decisive_words_ms is None:
            speech.decisive_words_ms = now_ms
        if step.kind == "completed":
            speech.transcript_completed_ms = now_ms
        elif step.kind == "failed":
            speech.transcription_failed_ms = now_ms
