"""The model worker's per-call core: realtime-model events in, ring writes and client events out.

Owns the response -> tag map, cutting model audio into 160-byte frames (remainders carried across deltas,
never padded inside a response), dropping deltas of dead tags, and the barge-in mechanism (cancel the tag,
`response.cancel`, truncate at the played position or delete at 0 ms: docs/explanation/protocols.md#c5).

INV-ONE-VOICE when the server runs two responses at once (a second ``response.created`` before the first's
``response.done``: server VAD racing a client ``response.create``, a function-call follow-up): the newer
response supersedes the older. The older is cancelled as by a barge-in (its tag dies, so the pacer skips
its remaining and late frames and sends ``clear`` if its audio is queued at the carrier; ``response.cancel``
with its ``response_id``; its item truncated at what the caller heard, or deleted when nothing was). A
response created after the older one's ``response.done`` is not an overlap: its frames queue behind the
older one's in the ring and play after them. A barge-in cancels every response the caller may still hear
or is about to hear, each item cut at its own played position.

In-band keys (``play_tones``: a ``send_dtmf`` tool on a carrier that takes keys only as tones on the stream) are
agent audio under a tag of their own, taken from the same counter as the responses' (one voice at a time: the
ring plays in order, so tags follow the order audio is written). They wait while a response is still producing
audio (the one that called the tool: its audio already written plays first, and the rest cannot land after the
tones), are never gated (tones say nothing the validator could check), and a barge-in cuts them as it cuts any
live response. Knows nothing
of sockets, shared memory or the clock: the shell feeds events, a playout snapshot and ``now_ns``, and
applies the returned actions. Turn-taking policy (semantic barge-in, debounce, scheduling) lives in
controller.py, which wraps this core: it builds it with ``auto_barge_in=False`` and decides when to call
``barge_in``.
"""

from __future__ import annotations

import dataclasses

from voicecore import g711, timing
from voicecore.outbound import dtmf
from voicecore.realtime import events as rt

MU_LAW_SILENCE = b"\xff"
A_LAW_SILENCE = b"\xd5"  # linear 0 encoded in A-law (audioop.lin2alaw; voicecore/g711.py ALAW_SILENCE)
_SILENCE = {"pcmu": MU_LAW_SILENCE, "pcma": A_LAW_SILENCE}  # by the session's audio format
DEFAULT_SAFE_LINE = "I can't verify that."
MAX_REJECTIONS_PER_TURN = 3  # retry a rejected prompt at most 3 times, then move on
HARMLESS_ERROR_CODES = frozenset({"response_cancel_not_active", "conversation_already_has_active_response"})


from voicecore.call.actions import (  # noqa: F401 (the mechanism's actions, importable from here as before)
    ApproveFrames, CancelTag, CoreAction, EndTag, GateSpec, GateTranscript, OpenGate, OpenTag, Playout, SendToModel, WriteFrames,
)

Action = CoreAction


@dataclasses.dataclass(slots=True)
class Response:
    response_id: str
    tag: int
    item_id: str = ""
    frames: int = 0
    remainder: bytes = b""
    audio_done: bool = False
    finished: bool = False  # response.done arrived: the server stopped generating
    cancelled: bool = False
    gated: bool = False  # the validator's verdict bounds its release (INV-GATE)
    transcript_closed: bool = False  # the validator has its final transcript

    @property
    def produced_frames(self) -> int:
        """Frames of audio the model produced for it: those written, plus a short last one still held
        back (it is padded and written when the audio is done)."""
        return self.frames + (1 if self.remainder else 0)


@dataclasses.dataclass(slots=True)
class CallStats:
    responses: int = 0
    frames_written: int = 0
    deltas_dropped: int = 0
    bargeins: int = 0
    truncates: int = 0
    deletes: int = 0
    model_errors: int = 0
    harmless_errors: int = 0
    malformed_events: int = 0
    dtmf_digits: int = 0
    superseded: int = 0  # responses cancelled because a newer one started before their response.done
    gated_responses: int = 0
    rejections: int = 0
    safe_lines: int = 0
    tones: int = 0  # in-band key sequences played (play_tones)


TONES_PREFIX = "tones:"  # the response id of in-band keys: TONES_PREFIX + the tool call's id


@dataclasses.dataclass(slots=True)
class Tones:
    """In-band keys asked for by the tool call ``key`` (``play_tones``): ``tag`` 0 while they wait for a response
    still producing audio; ``cancelled``: cut (a barge-in, the stream replaced) before or while they played."""

    key: str
    digits: str
    tag: int = 0
    frames: int = 0
    cancelled: bool = False


def played_ms(tag: int, playout: Playout, now_ns: int, written_frames: int | None = None) -> int:
    """Audio of ``tag`` the carrier has played by ``now_ns``, in ms, never more than was sent.

    Primary source: the newest mark echoed because its audio played, plus the time since that echo
    (the carrier plays continuously), up to a clear the pacer queued after that echo with nothing released
    since (a hold's clear cut what the carrier still held: the time after it was silence, and the echoes
    that came with the clear say nothing of what played). Before the first echo of this tag: the pacer's model of the
    carrier's buffer (what was sent minus what is still queued). ``written_frames``: the frames of the
    tag in the ring; when a newer tag is already on the wire, everything of this one that the pacer
    released went out before it (INV-ONE-VOICE), so that bounds what was sent.
    """
    if playout.sent_tag == tag:
        sent_ms = playout.sent_frames * timing.FRAME_MS
    elif playout.sent_tag > tag and written_frames is not None:
        sent_ms = written_frames * timing.FRAME_MS
    else:
        sent_ms = 0
    if playout.played_tag == tag and playout.played_frames > 0:
        until_ns = now_ns
        cleared_ns = playout.cleared_at_ns
        if playout.played_at_ns < cleared_ns < now_ns and playout.carrier_empty_at_ns <= cleared_ns:
            until_ns = cleared_ns
        estimate = playout.played_frames * timing.FRAME_MS + (until_ns - playout.played_at_ns) // 1_000_000
    elif sent_ms:
        queued_ms = max(0, playout.carrier_empty_at_ns - now_ns) // 1_000_000
        estimate = sent_ms - queued_ms
    else:
        estimate = 0
    return int(max(0, min(estimate, sent_ms)))


class ModelCallCore:
    """One call's model session, from the worker's side."""

    def __init__(self, call_sid: str, naming: str = "ga", first_tag: int = 1, greet: bool = True,
                 instructions: str = "You are a helpful phone agent. Keep answers short.",
                 auto_barge_in: bool = True, gate_release: bool = False,
                 turn_detection: dict | None = None, transcription_model: str | None = None,
                 gate_policy: str = "off", safe_line: str = DEFAULT_SAFE_LINE, voice: str = "alloy",
                 greeting: str = "", tools: list[dict] | None = None, audio_format: str = "pcmu",
                 modality: str = "audio") -> None:
        # instructions, voice, greeting and tools: the agent's (voicecore/agent); the defaults are for
        # tests of the mechanism. greeting "": the model is asked to greet in its own words. audio_format:
        # the law of the call's frames ("pcmu", or "pcma" for an A-law carrier stream passed through), which
        # the session is opened in both ways and a response's short last frame is padded with the silence of.
        # modality "text": a text channel's session (the model writes, the caller types): no turn detection,
        # no transcription, text deltas where audio would be; a response has no frames and no playout.
        self.call_sid = call_sid
        self.modality = modality
        self.audio_format = audio_format
        if audio_format not in _SILENCE:
            raise ValueError(f"audio_format must be 'pcmu' or 'pcma', not {audio_format!r}")
        self.silence = _SILENCE[audio_format]
        self.voice = voice
        self.greeting = greeting
        self.tools = list(tools or [])
        # gate_policy: how the validator judges this call's responses (off, numbers, scripted, strict).
        # A rejected response is cancelled before it plays and the safe line is spoken instead.
        self.gate_policy = gate_policy
        self.safe_line = safe_line
        self.safe_line_after: str | None = None  # ask for the safe line once this response is done
        self.safe_line_next = False  # the next response is the safe line: never gated (it has no claims)
        self.rejections_in_turn = 0
        self.next_gate: GateSpec | None = None  # the controller's choice for the next response.created
        # auto_barge_in: barge in on every speech_started while audible (the spine's behaviour). The
        # controller turns it off and calls barge_in itself once the caller's speech has words.
        self.auto_barge_in = auto_barge_in
        self.gate_release = gate_release
        self.turn_detection = turn_detection if turn_detection is not None else {
            "type": "server_vad", "create_response": True, "interrupt_response": True}
        self.transcription_model = transcription_model
        if modality == "text":
            self.turn_detection, self.transcription_model = None, None
        self.naming = naming
        self.next_tag = first_tag
        self.greet = greet
        self.instructions = instructions
        self.responses: dict[str, Response] = {}
        self.current: Response | None = None  # the newest response that may be audible
        self.stats = CallStats()
        self.tones: dict[str, Tones] = {}  # in-band keys by tool call id (the last 16)

    # --- session start ---------------------------------------------------------------------------
    def on_open(self) -> list[Action]:
        actions: list[Action] = [self.session_update()]
        if self.greet:
            greet = f'Say exactly: "{self.greeting}"' if self.greeting else "Greet the caller."
            actions.append(SendToModel(rt.response_create(instructions=self.in_session(greet))))
        return actions

    def in_session(self, addition: str) -> str:
        """Instructions for one response: the session's in force, then ``addition``. The vendor applies a
        response's instructions in place of the session's for that response, so a response that needs its
        own (a line to say, facts to answer from) must carry the session's too (the agent's persona, its
        node's role, its language rules)."""
        session = self.instructions.strip()
        return f"{session}\n\n{addition}" if session else addition

    def session_update(self) -> SendToModel:
        """The session's configuration as it stands (instructions, voice, tools, turn detection)."""
        return SendToModel(rt.session_update(
            naming=self.naming,
            instructions=self.instructions,
            voice=self.voice,
            turn_detection=self.turn_detection,
            transcription_model=self.transcription_model,
            tools=self.tools or None,
            audio_format=self.audio_format,
            modality=self.modality,
        ))

    def reconfigure(self, instructions: str, tools: list[dict]) -> SendToModel:
        """A flow node changed what the model is told and may call: the session.update that says so."""
        self.instructions = instructions
        self.tools = list(tools)
        return SendToModel(rt.session_update(
            naming=self.naming, instructions=instructions, voice=None, turn_detection=self.turn_detection,
            transcription_model=self.transcription_model, tools=self.tools, audio_format=self.audio_format,
            modality=self.modality))

    def caller_audio(self, audio: bytes) -> list[Action]:
        return [SendToModel(rt.input_audio_append(audio))] if audio else []

    # --- what the controller asks and sets -------------------------------------------------------
    def response(self, response_id: str) -> Response | None:
        """The response ``response_id`` if this core still knows it (it keeps the last 16)."""
        return self.responses.get(response_id)

    def gate_next_response(self, spec: GateSpec) -> None:
        """Judge the next response this core sees created under ``spec`` instead of the call's policy."""
        self.next_gate = spec

    # --- model events ----------------------------------------------------------------------------
    def on_event(self, event: object, now_ns: int, playout: Playout) -> list[Action]:
        actions = self._on_event(event, now_ns, playout)
        if self._tones_waiting() and not self._producing():
            actions = actions + self._release_tones()  # the response they waited for has all its audio written
        return actions

    def _on_event(self, event: object, now_ns: int, playout: Playout) -> list[Action]:
        if isinstance(event, rt.AudioDelta):
            return self._on_audio(event)
        if isinstance(event, rt.ResponseCreated):
            return self._on_created(event.response_id, now_ns, playout)
        if isinstance(event, rt.AudioDone):
            return self._on_audio_done(event.response_id)
        if isinstance(event, rt.ResponseDone):
            return self._on_done(event.response_id)
        if isinstance(event, rt.TranscriptDelta):
            return self._on_transcript(event.response_id, event.delta, done=False)
        if isinstance(event, rt.TranscriptDone):
            return self._on_transcript(event.response_id, event.transcript, done=True)
        if isinstance(event, rt.TextDelta):
            response = self.responses.get(event.response_id)
            if response is not None and not response.item_id:
                response.item_id = event.item_id  # a cut reply's item is deleted, as unheard audio's is
            return self._on_transcript(event.response_id, event.delta, done=False)
        if isinstance(event, rt.TextDone):
            return self._on_transcript(event.response_id, event.text, done=True)
        if isinstance(event, rt.SpeechStarted):
            self.rejections_in_turn = 0
            return self.barge_in(now_ns, playout) if self.auto_barge_in else []
        if isinstance(event, rt.RealtimeError):
            if event.code in HARMLESS_ERROR_CODES or "already shorter than" in (event.message or ""):
                self.stats.harmless_errors += 1
            else:
                self.stats.model_errors += 1
            return []
        if isinstance(event, rt.MalformedEvent):
            self.stats.malformed_events += 1
        return []

    def _on_created(self, response_id: str, now_ns: int, playout: Playout) -> list[Action]:
        if response_id in self.responses:
            return []  # a repeated response.created: the response already has its tag
        actions: list[Action] = []
        for older in list(self.responses.values()):
            if not older.finished and not older.cancelled:
                # INV-ONE-VOICE: two responses in flight at once; the newer supersedes the older.
                self.stats.superseded += 1
                if self.safe_line_after == older.response_id:
                    self.safe_line_after = None  # the server answers something else now
                actions.extend(self._cancel(older, now_ns, playout))
        tag = self.next_tag
        self.next_tag += 1
        response = Response(response_id=response_id, tag=tag)
        self.responses[response_id] = response
        self.current = response
        self.stats.responses += 1
        self._forget_old()
        spec, self.next_gate = self.next_gate, None
        if spec is None:
            spec = GateSpec("off" if self.safe_line_next else self.gate_policy)
        self.safe_line_next = False
        if spec.policy == "off":
            actions.append(OpenTag(tag, self.gate_release))
            return actions
        response.gated = True
        self.stats.gated_responses += 1
        actions += [OpenTag(tag, True), OpenGate(tag, spec.policy, spec.script, spec.forbidden, spec.language, spec.facts)]
        return actions

    def _on_transcript(self, response_id: str, text: str, done: bool) -> list[Action]:
        response = self.responses.get(response_id)
        if response is None or not response.gated or response.cancelled or response.transcript_closed:
            return []
        response.transcript_closed = done
        return [GateTranscript(response.tag, text, response.frames, done)]

    def _on_audio(self, delta: rt.AudioDelta) -> list[Action]:
        response = self.responses.get(delta.response_id)
        if response is None or response.cancelled or response.audio_done:
            # Deltas already in flight when we cancelled (docs/explanation/protocols.md#c5-step-4), or of a
            # response we never saw created: the tag is dead, the audio goes nowhere.
            self.stats.deltas_dropped += 1
            return []
        response.item_id = response.item_id or delta.item_id
        data = response.remainder + delta.audio if response.remainder else delta.audio
        whole = len(data) - len(data) % timing.FRAME_BYTES
        response.remainder = data[whole:]
        if not whole:
            return []
        first = response.frames
        response.frames += whole // timing.FRAME_BYTES
        self.stats.frames_written += whole // timing.FRAME_BYTES
        return [WriteFrames(response.tag, first, data[:whole])]

    def _close_audio(self, response: Response) -> list[Action]:
        if response.audio_done or response.cancelled:
            return []
        response.audio_done = True
        actions: list[Action] = []
        if response.remainder:
            # The response's last frame is the only one that may be short: pad it with silence at the end.
            pad = self.silence * (timing.FRAME_BYTES - len(response.remainder))
            actions.append(WriteFrames(response.tag, response.frames, response.remainder + pad))
            response.frames += 1
            self.stats.frames_written += 1
            response.remainder = b""
        actions.append(EndTag(response.tag, response.frames))
        return actions

    def _on_audio_done(self, response_id: str) -> list[Action]:
        response = self.responses.get(response_id)
        return self._close_audio(response) if response else []

    def _on_done(self, response_id: str) -> list[Action]:
        response = self.responses.get(response_id)
        if response is None:
            return []
        response.finished = True
        actions = self._close_audio(response)
        if response.gated and not response.transcript_closed and not response.cancelled:
            # No transcript.done came (cancelled, or the server left it out): the validator judges what
            # it has; until then the gated audio would wait for ever.
            response.transcript_closed = True
            actions.append(GateTranscript(response.tag, "", response.frames, True))
        if self.safe_line_after == response_id:
            actions.extend(self._ask_for_safe_line())
        return actions

    # --- validator verdicts ----------------------------------------------------------------------
    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int, playout: Playout) -> list[Action]:
        response = next((r for r in self.responses.values() if r.tag == tag), None)
        if response is None or response.cancelled or not response.gated:
            return []
        if not rejected:
            return [ApproveFrames(tag, approved_frames)]
        self.stats.rejections += 1
        self.rejections_in_turn += 1
        actions = self._cancel(response, now_ns, playout)
        if self.rejections_in_turn <= MAX_REJECTIONS_PER_TURN:
            if response.finished:
                actions.extend(self._ask_for_safe_line())
            else:
                # The server refuses a new response while this one is active: ask once it is done.
                self.safe_line_after = response.response_id
        return actions

    def reject(self, tag: int, now_ns: int, playout: Playout) -> list[Action]:
        """The validator rejected ``tag``: cancel it before more of it plays. What is said instead is
        the caller's business (the spine's on_verdict: the safe line; the controller: its policy)."""
        response = next((r for r in self.responses.values() if r.tag == tag), None)
        if response is None or response.cancelled or not response.gated:
            return []
        self.stats.rejections += 1
        return self._cancel(response, now_ns, playout)

    def _ask_for_safe_line(self) -> list[Action]:
        self.safe_line_after = None
        self.safe_line_next = True
        self.stats.safe_lines += 1
        return [SendToModel(rt.response_create(instructions=self.in_session(f'Say exactly: "{self.safe_line}"')))]

    # --- barge-in --------------------------------------------------------------------------------
    @staticmethod
    def _played_out(response: Response, playout: Playout) -> bool:
        """Every frame of ``response`` played (or it had none): nothing of it is left to hear."""
        if not response.audio_done:
            return False
        if response.frames == 0:
            return True
        if playout.played_tag == response.tag:
            return playout.played_frames >= response.frames  # its last mark echoed
        # Marks echo in play order and no older frame follows a newer tag's (INV-ONE-VOICE): a mark of a
        # newer tag means this one finished playing.
        return playout.played_tag > response.tag

    def live_responses(self, playout: Playout) -> list[Response]:
        """Responses the caller may be hearing or is about to hear, oldest first."""
        return [r for r in self.responses.values() if not r.cancelled and not self._played_out(r, playout)]

    def audible(self, playout: Playout) -> Response | None:
        """The response the caller may be hearing or about to hear first (the oldest live one), if any."""
        live = self.live_responses(playout)
        return live[0] if live else None

    def stream_replaced(self) -> int:
        """The call's stream was replaced (re-attached after its gateway died) and the model session that made
        these responses is gone: nothing written for the old stream can play, and nothing is left to cancel
        anywhere. Every live response is dead (its tag numbers the old stream's, which the new playout never
        reaches); returns how many were."""
        dead = [r for r in self.responses.values() if not r.cancelled and not (r.audio_done and r.frames == 0)]
        for response in dead:
            response.cancelled = True
        self._tones_cut()
        return len(dead)

    def barge_in(self, now_ns: int, playout: Playout) -> list[Action]:
        """The caller interrupts: cancel every live response (the one playing and any queued behind it
        or still being generated), each item cut at its own played position."""
        live = self.live_responses(playout)
        waiting = [t for t in self.tones.values() if not t.tag and not t.cancelled]
        for tones in waiting:
            tones.cancelled = True  # never to be heard: the caller took the floor before they were written
        if not live:
            return []
        self.stats.bargeins += 1
        actions: list[Action] = []
        for response in live:
            actions.extend(self._cancel(response, now_ns, playout))
        return actions

    def cancel(self, response_id: str, now_ns: int, playout: Playout) -> list[Action]:
        """Cancel one response (a driver's own decision, e.g. a reply to a backchannel never to be heard)."""
        response = self.responses.get(response_id)
        if response is None or response.cancelled:
            return []
        return self._cancel(response, now_ns, playout)

    def _cancel(self, response: Response, now_ns: int, playout: Playout) -> list[Action]:
        """Cancel ``response``: its tag dies (the pacer skips it, `clear`s if any of it went out), the
        server stops it, and its item is cut at what the caller heard, or deleted when nothing was."""
        response.cancelled = True
        actions: list[Action] = [CancelTag(response.tag, now_ns)]
        if response.response_id.startswith(TONES_PREFIX):
            self._tones_cut(response.tag)
            return actions  # no model response: nothing to stop or truncate at the server
        if not response.finished:
            actions.append(SendToModel(rt.response_cancel(response.response_id)))
        if response.item_id:
            heard_ms = played_ms(response.tag, playout, now_ns, response.frames)
            if heard_ms > 0:
                self.stats.truncates += 1
                actions.append(SendToModel(rt.item_truncate(response.item_id, heard_ms)))
            else:
                self.stats.deletes += 1
                actions.append(SendToModel(rt.item_delete(response.item_id)))
        return actions

    def _forget_old(self) -> None:
        # Keep a few old responses so their late deltas are recognised as dead, not unknown.
        if len(self.responses) > 16:
            for response_id in list(self.responses)[:-16]:
                del self.responses[response_id]

    # --- in-band keys ------------------------------------------------------------------------------
    def play_tones(self, key: str, digits: str) -> list[Action]:
        """Play ``digits`` (voicecore/outbound/dtmf.py syntax) as DTMF tones for the tool call ``key``: at once when
        no response is producing audio, else once the last one has written all of its own (``tones(key)`` says
        which tag they got, and whether they were cut). ValueError for a bad sequence (nothing is asked)."""
        dtmf.parse_digits(digits)
        if key in self.tones:
            return []  # asked once per tool call
        self.tones[key] = Tones(key, digits)
        while len(self.tones) > 16:
            del self.tones[next(iter(self.tones))]
        return [] if self._producing() else self._release_tones()

    def tones_state(self, key: str) -> Tones | None:
        """The in-band keys of the tool call ``key`` as they stand (None: never asked, or long forgotten)."""
        return self.tones.get(key)

    def _producing(self) -> bool:
        """A response is still producing audio: more of it may be written to the ring."""
        return any(not r.audio_done and not r.cancelled for r in self.responses.values())

    def _tones_waiting(self) -> bool:
        return any(not t.tag and not t.cancelled for t in self.tones.values())

    def _release_tones(self) -> list[Action]:
        """Every waiting sequence written, in the order asked, each under the next tag (ungated: released as
        written), as a response already done, so a barge-in cuts it as it cuts any live response."""
        actions: list[Action] = []
        for tones in self.tones.values():
            if tones.tag or tones.cancelled:
                continue
            audio = g711.from_ulaw(dtmf.tone_audio(tones.digits), self.audio_format)
            tones.tag, tones.frames = self.next_tag, len(audio) // timing.FRAME_BYTES
            self.next_tag += 1
            self.responses[TONES_PREFIX + tones.key] = Response(
                TONES_PREFIX + tones.key, tones.tag, frames=tones.frames, audio_done=True, finished=True)
            self._forget_old()
            self.stats.tones += 1
            actions += [OpenTag(tones.tag, False), WriteFrames(tones.tag, 0, audio), EndTag(tones.tag, tones.frames)]
        return actions

    def _tones_cut(self, tag: int = 0) -> None:
        """The tones under ``tag`` (0: every sequence not yet played out) will not be heard (whole)."""
        for tones in self.tones.values():
            if tag == 0 or tones.tag == tag:
                tones.cancelled = True
