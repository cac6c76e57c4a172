"""Sans-I/O core of one simulated call: the caller's phone plus the carrier's media-stream leg.

Owns: the carrier-neutral measuring core (PlayoutCore: an absolute 20 ms caller clock, a model of the
carrier's outbound playout buffer that plays one 20 ms frame per tick, echoes marks when playout passes them
and honours `clear`, and the measurements the tests and the bench read: lateness, underruns, stale frames,
barge-in latency, barge-ins without a clear, overlapping frames, what was played of each response), and its
Twilio adapter (CarrierCall: the messages Twilio sends, docs/explanation/protocols.md#a2, and its reading of
what the gateway sends, #a3). The other carriers' adapters sit on PlayoutCore in
voicecore/sim/carrier_modes_core.py.

Must not know: sockets, asyncio, HTTP, the wall clock. Every method that depends on time takes `now_ms`
(any monotonic millisecond clock; floats are fine). The shell is voicecore/sim/carrier.py.

How frames are tied to responses: the pacer sends a `mark` named "tag:n" after each group of frames of
one response and "tag:n:end" after its last frame, n counting the frames of that tag sent so far (the
naming rule and its parser: voicecore/carriers/marks.py). The frames received since the previous mark
belong to the tag of the next mark, as many of the newest as its count says (a marker with another name, such
as a Plivo gateway's own checkpoint, claims none). A frame is attributed only when such a mark arrives; frames
that a clear or the end of the call overtakes first, and frames no mark's count covers (a fallback line's),
stay unattributed (`frames_without_mark`) and are never guessed.

A `media` message may carry any whole number of 20 ms frames (160 * k bytes, k >= 1), as Twilio accepts:
it becomes k frames arriving at once, played on consecutive ticks. Empty payloads and payloads that are
not whole frames are protocol errors.

The lateness and underruns counted here (`metrics.lateness_ms`, `metrics.underruns`) are the sender's own
schedule as its marks describe it (frame n of a tag expected at first arrival + max(0, n - (lead - 1)) *
20 ms; an underrun is an empty tick between a tag's first frame and its end mark or a clear): useful to
check a pacer that marks its responses, meaningless for a sender that sends no marks. The figures the
demo and the bench report (`lateness_ms`, `underruns`) are defined once, from this core's playout log
(which tick played which frame) and the frames' content, for any sender: voicecore/callreport.py
playout_figures.

Bad input from the gateway never raises: it is counted in `metrics.protocol_errors` with a reason.
Misuse by the harness (sending media before `opening_messages()`, a bad DTMF digit) raises.
"""

import abc
import binascii
import functools
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from voicecore.g711 import ulaw_to_linear
from voicecore.stats import percentile_or_none
from voicecore.timing import BARGEIN_CLEAR_WINDOW_MS, BYTES_PER_MS, DEFAULT_LEAD_MS, FRAME_BYTES, FRAME_MS
from voicecore.carriers.marks import PLAIN_NAME_BYTES, parse_mark_name
from voicecore.carriers.twilio.stream import OutboundEncoder

DEFAULT_LEAD_FRAMES = DEFAULT_LEAD_MS // FRAME_MS
SILENT_FRAME = b"\xff" * FRAME_BYTES  # mu-law code 0xFF is linear 0
DTMF_DIGITS = frozenset("0123456789*#")
MAX_ERROR_REASONS = 32  # keep the first reasons; the counter keeps counting
_FRAME_BASE64_CHARS = 4 * -(-FRAME_BYTES // 3)
_SILENT_BASE64 = binascii.b2a_base64(SILENT_FRAME, newline=False).decode("ascii")  # most caller frames
# Speech, for where a caller utterance ends: a 20 ms window at or above this RMS (16-bit linear), the
# model simulator's VAD threshold (SimConfig.vad_rms_threshold) and the pipecat stand-in's.
SPEECH_RMS = 200


def _json_string(text: str) -> str:
    """``json.dumps(text)``, without its cost for what needs no escaping (printable ASCII with no quote or
    backslash: every mark name a pacer writes), which is most of the mark echoes a carrier sends."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return '"' + text + '"'
    return json.dumps(text)


@functools.lru_cache(maxsize=64)
def speech_end_ms(audio: bytes, threshold: int = SPEECH_RMS) -> int:
    """ms from the start of a caller clip to the end of its last 20 ms window at or above ``threshold``
    (the clip's length when none is: then the whole clip counts). Clips carry ~100 ms of trailing silence,
    which is not the caller speaking. Cached per clip: every call of a run speaks the same few."""
    frames = len(audio) // FRAME_BYTES
    if frames == 0:
        return round(len(audio) / BYTES_PER_MS)
    pcm = ulaw_to_linear(audio[: frames * FRAME_BYTES]).astype("float64").reshape(frames, FRAME_BYTES)
    rms = (pcm * pcm).mean(axis=1) ** 0.5
    loud = (rms >= threshold).nonzero()[0]
    if len(loud) == 0:
        return round(len(audio) / BYTES_PER_MS)
    return int(loud[-1] + 1) * FRAME_MS


@dataclass(frozen=True, slots=True)
class Utterance:
    """One caller clip placed on the stream's timeline, ``at_ms`` after the first media frame."""

    at_ms: int
    audio: bytes  # mu-law, 8 kHz


class ReceivedFrame:
    """One outbound `media` frame as the carrier saw it. Filled in as marks, ticks and clears happen."""

    __slots__ = ("index", "arrival_ms", "payload", "epoch", "tag", "index_in_tag", "stale", "resumed", "played_at_ms",
                 "played_ms", "dropped", "dropped_at_ms")

    def __init__(self, index: int, arrival_ms: float, payload: bytes | None, epoch: int) -> None:
        self.index = index  # order of arrival within the call, from 0
        self.arrival_ms = arrival_ms
        self.payload = payload  # None when the call keeps no audio
        self.epoch = epoch  # number of clears received before this frame
        self.tag: int | None = None  # from the next mark, once it arrives
        self.index_in_tag: int | None = None  # n-th frame of its tag (non-stale frames only)
        self.stale = False
        # Its tag's audio had ended with an end mark before a clear, and goes on after it: a held response
        # resumed after the hold's clear (turns mode), not audio of a dead tag.
        self.resumed = False
        self.played_at_ms: float | None = None
        self.played_ms = 0.0  # FRAME_MS, or less when a clear cut it mid-play
        self.dropped = False  # thrown away by a clear before it played
        self.dropped_at_ms: float | None = None  # when that clear came

    def __repr__(self) -> str:
        return (f"ReceivedFrame(index={self.index}, arrival_ms={self.arrival_ms}, tag={self.tag}, "
                f"stale={self.stale}, played_at_ms={self.played_at_ms}, dropped={self.dropped})")


@dataclass(slots=True)
class CarrierMetrics:
    """Running counters and samples of one call. Read freely; only the core writes."""

    media_sent: int = 0
    dtmf_sent: int = 0
    frames_received: int = 0
    frames_played: int = 0
    frames_dropped_by_clear: int = 0
    frames_without_mark: int = 0  # overtaken by a clear, or no mark's count covers them (end of call: statistics())
    stale_frames: int = 0
    frames_resumed_after_clear: int = 0  # frames of a tag held (its end mark) before a clear, resumed after it
    marks_received: int = 0
    marks_unparsed: int = 0
    marks_echoed_played: int = 0  # playout passed them
    marks_echoed_idle: int = 0  # nothing queued or playing when they came: echoed at once (Telnyx rule)
    marks_echoed_on_clear: int = 0
    marks_dropped_on_clear: int = 0  # pending when a clear came, on a carrier that drops them unechoed
    mark_count_mismatches: int = 0  # "tag:n" where n != frames of that tag received
    clears_received: int = 0
    clear_at_ms: list[float] = field(default_factory=list)
    protocol_errors: int = 0
    error_reasons: list[str] = field(default_factory=list)
    lateness_ms: list[float] = field(default_factory=list)  # one per attributed, non-stale frame
    underruns: int = 0
    underrun_episodes: int = 0
    underrun_at_ms: list[float] = field(default_factory=list)
    bargeins_noted: int = 0
    bargeins_ignored: int = 0  # noted while the agent was silent
    bargein_at_ms: list[float] = field(default_factory=list)  # the noted (not ignored) barge-ins
    bargein_latency_ms: list[float] = field(default_factory=list)
    # The deepest the carrier's buffer got: frames received and not yet begun playing, at the moment each
    # arrived (what a sender's lead, by time or by echoes, really left queued at the carrier).
    max_queued_frames: int = 0
    stalled_ticks: int = 0  # playout ticks the carrier's own stall held (set_playout_stall): not underruns
    # (from_ms, to_ms): the simulator itself stalled (its process got no CPU, its loop was busy): its 20 ms
    # ticker woke more than two frames after the previous tick, so nothing was read or played in between and
    # frames the sender wrote then were stamped when it woke. Gaps there are the instrument's, not the sender's.
    harness_stalls: list[tuple[float, float]] = field(default_factory=list)
    # Re-attaches (the stream dropped without a stop and the carrier's action opened a new one): when the old
    # stream was lost and when the new one started, ms.
    reattaches: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CarrierStatistics:
    """A snapshot of one call's measurements (see CarrierMetrics for the meaning of the counters)."""

    media_sent: int
    dtmf_sent: int
    frames_received: int
    frames_played: int
    frames_dropped_by_clear: int
    frames_without_mark: int
    stale_frames: int
    stale_frames_played: int
    marks_received: int
    marks_unparsed: int
    marks_echoed: int
    marks_echoed_on_clear: int
    marks_dropped_on_clear: int
    mark_count_mismatches: int
    clears_received: int
    protocol_errors: int
    underruns: int
    underrun_episodes: int
    lateness_p50_ms: float | None
    lateness_p99_ms: float | None
    lateness_max_ms: float | None
    late_frames: int  # lateness > 0
    bargeins_noted: int
    bargeins_ignored: int
    bargeins_without_clear: int  # noted barge-ins with no clear within BARGEIN_CLEAR_WINDOW_MS
    bargein_latency_p50_ms: float | None
    bargein_latency_max_ms: float | None
    overlapping_frames: int  # played after a newer response's audio had started: two voices (overlapping_played)


class _QueuedMark:
    """A mark waiting in Twilio's playout queue behind the frames sent before it."""

    __slots__ = ("name", "is_end")

    def __init__(self, name: str, is_end: bool) -> None:
        self.name = name
        self.is_end = is_end  # "tag:n:end": echoing it ends the talk spurt


class _TagState:
    __slots__ = ("first_epoch", "first_arrival_ms", "timed_frames", "attributed_frames", "epoch",
                 "frames_in_epoch", "stale_epoch", "spurt_ended", "ended_epoch", "resumed_epoch")

    def __init__(self, epoch: int) -> None:
        self.first_epoch = epoch
        self.first_arrival_ms: float | None = None
        self.timed_frames = 0  # non-stale frames of the current talk spurt: the n of the lateness formula
        self.spurt_ended = False  # its "tag:n:end" mark came: frames of it after that start a new spurt
        self.attributed_frames = 0
        self.epoch = epoch
        self.frames_in_epoch = 0
        self.stale_epoch: int | None = None
        self.ended_epoch: int | None = None  # the epoch its latest end mark came in
        self.resumed_epoch: int | None = None  # an epoch it resumed in after its end mark and a clear


class PlayoutCore(abc.ABC):
    """The carrier-neutral half of one simulated call: the caller's 20 ms send clock, the carrier's playout
    clock, and every measurement (lateness, underruns, marks echoed at playout time, clears, stale frames,
    barge-ins, what was played of each tag). Knows no wire format: an adapter (CarrierCall for Twilio,
    voicecore/sim/carrier_modes_core.py for the others) turns its carrier's messages into mu-law frames,
    marks and clears (frame_arrived, mark_arrived, clear_arrived, protocol_error), writes the caller's
    frames in its carrier's shape (``_media_message``) and the echoes (``_echo``, ``_cleared``).

    ``ECHOES_MARKS_ON_CLEAR``: a clear echoes every pending mark (Twilio, Telnyx, Exotel) or drops them
    unechoed (Plivo, Vonage; counted in ``metrics.marks_dropped_on_clear``).

    ``MARKS_CLAIM_BY_COUNT``: a mark claims only as many of the frames since the previous mark as its count says
    the pacer sent of its tag, the older ones (a fallback line's, which the pacer sends without marks) staying
    unattributed (``_attribute``); where False, only after a gateway's own checkpoint.
    """

    MARKS_CLAIM_BY_COUNT = False

    ECHOES_MARKS_ON_CLEAR = True
    # How late the carrier's frames carry the gateway's audio: 0 when the frames are the gateway's own (mu-law,
    # L16 at 8 kHz); a resampled stream's transcoder delay otherwise (voicecore.carriers.codec, 10 ms).
    outbound_delay_ms = 0

    def __init__(
        self,
        caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
        lead_frames: int = DEFAULT_LEAD_FRAMES,
        *,
        play_phase_ms: float | None = None,
        keep_audio: bool = True,
    ) -> None:
        """``caller_audio``: mu-law bytes played from the first frame on, or (at_ms, clip) utterances.

        ``lead_frames``: the send-ahead the gateway is expected to keep (lateness formula).
        ``play_phase_ms``: put the carrier's playout ticks on the grid phase + k*20 ms (a shared ticker);
        None starts the grid at the first frame's arrival. ``keep_audio``: keep received payloads
        for the played-audio log (the bench turns it off to save memory).
        """
        if lead_frames < 1:
            raise ValueError("lead_frames must be >= 1")
        self.lead_frames = lead_frames
        self.keep_audio = keep_audio
        self.metrics = CarrierMetrics()
        self.frames: list[ReceivedFrame] = []
        self.played: list[ReceivedFrame] = []

        if isinstance(caller_audio, (bytes, bytearray, memoryview)):
            utterances = [(0, bytes(caller_audio))] if len(caller_audio) else []
        else:
            utterances = [(u.at_ms, u.audio) if isinstance(u, Utterance) else (u[0], u[1]) for u in caller_audio]
        # (start byte, end byte, audio) sorted by start; a later clip wins where two overlap.
        self._clips = sorted(
            ((round(at_ms * BYTES_PER_MS), round(at_ms * BYTES_PER_MS) + len(audio), bytes(audio))
             for at_ms, audio in utterances if len(audio)),
            key=lambda clip: clip[0],
        )
        self._clip_cursor = 0
        # (speech start, speech end) ms after the first media frame, per utterance: where the caller's
        # voice ends (speech_end_ms), for the turn latency (voicecore/callreport.py).
        self.utterance_spans_ms: list[tuple[float, float]] = [
            (start / BYTES_PER_MS, start / BYTES_PER_MS + speech_end_ms(audio)) for start, _end, audio in self._clips]

        self._opened = False
        self._stopped = False
        self.stopped_at_ms: float | None = None  # when the stop was sent, if it was given the time
        self._send_origin_ms: float | None = None
        self._next_send_frame = 0
        self._outbox: list[str | bytes] = []

        self._play_phase_ms = play_phase_ms
        self._play_anchor_ms: float | None = None
        self._play_tick = 0  # index of the next playout tick: anchor + k * FRAME_MS
        self._playing_until_ms = float("-inf")
        self._queue: deque[ReceivedFrame | _QueuedMark] = deque()
        self._queued_frames = 0
        self._in_spurt = False
        self._in_underrun = False
        self._stall_every_ticks = 0  # set_playout_stall: 0, the carrier plays every tick
        self._stall_ticks = 0

        self._epoch = 0
        self._pending: list[ReceivedFrame] = []  # received since the last mark
        self._pending_past_checkpoint = False  # a marker that is no pacer mark came while frames were pending
        self._tags: dict[int, _TagState] = {}
        self._bargein_at_ms: float | None = None

    # ----- caller side ------------------------------------------------------------------------------

    def add_utterance(self, at_ms: int, audio: bytes) -> None:
        """Say ``audio`` (mu-law) from ``at_ms`` after the first media frame on: a caller who decides what to
        say while the call runs (it must start after every frame already sent, and after the last utterance)."""
        start = round(at_ms * BYTES_PER_MS)
        if start < self._next_send_frame * FRAME_BYTES or (self._clips and start < self._clips[-1][0]):
            raise ValueError("an utterance added during the call must start after what was already sent")
        if audio:
            self._clips.append((start, start + len(audio), bytes(audio)))
            self.utterance_spans_ms.append((start / BYTES_PER_MS, start / BYTES_PER_MS + speech_end_ms(audio)))

    @property
    def agent_heard_until_ms(self) -> float | None:
        """When the caller last heard (or was sent) the agent's audio: the later of the last received frame's
        arrival and the end of the last frame played; None before any."""
        if not self.frames:
            return None
        return max(self.frames[-1].arrival_ms, self._playing_until_ms)

    def tick_send(self, now_ms: float) -> list[str]:
        """Caller `media` frames due by ``now_ms`` on the absolute clock origin + n*20 ms.

        The origin is the first call's ``now_ms``. A late tick returns every frame that fell due since
        the previous one (catch-up, never drift: docs/explanation/architecture.md#section-6).
        """
        if not self._opened:
            self._require_open()
        if self._stopped:
            return []
        origin = self._send_origin_ms
        if origin is None:
            origin = self._send_origin_ms = now_ms
        n = self._next_send_frame
        if origin + n * FRAME_MS > now_ms:
            return []
        if origin + (n + 1) * FRAME_MS > now_ms:  # one frame due: every tick that is on time
            self._next_send_frame = n + 1
            return [self._media_message(n)]
        messages = []
        while origin + n * FRAME_MS <= now_ms:
            messages.append(self._media_message(n))
            n += 1
            self._next_send_frame = n
        return messages

    @property
    def send_origin_ms(self) -> float | None:
        """When caller frame 0 was due (utterance at_ms values count from here)."""
        return self._send_origin_ms

    @property
    def frames_sent(self) -> int:
        return self._next_send_frame

    def messages_to_send(self) -> list[str]:
        """Mark echoes produced since the last call, in sequenceNumber order. Send them before tick_send's."""
        messages, self._outbox = self._outbox, []
        return messages

    def _require_open(self) -> None:
        if not self._opened:
            raise RuntimeError("call opening_messages() first")

    def _caller_frame(self, n: int) -> bytes:
        start = n * FRAME_BYTES
        end = start + FRAME_BYTES
        clips = self._clips
        # Frames are asked for in order, so clips that ended before this frame are never needed again.
        while self._clip_cursor < len(clips) and clips[self._clip_cursor][1] <= start:
            self._clip_cursor += 1
        frame: bytearray | None = None
        for i in range(self._clip_cursor, len(clips)):
            clip_start, clip_end, audio = clips[i]
            if clip_start >= end:
                break
            if clip_end <= start:
                continue
            if frame is None and clip_start <= start and clip_end >= end:
                if i + 1 >= len(clips) or clips[i + 1][0] >= end:
                    return audio[start - clip_start:end - clip_start]
            if frame is None:
                frame = bytearray(SILENT_FRAME)
            lo = max(start, clip_start)
            hi = min(end, clip_end)
            frame[lo - start:hi - start] = audio[lo - clip_start:hi - clip_start]
        return SILENT_FRAME if frame is None else bytes(frame)

    @abc.abstractmethod
    def _media_message(self, n: int) -> str | bytes:
        """The carrier's message carrying caller frame ``n`` (``_caller_frame(n)``); counts media_sent."""

    # ----- the adapter's interface (a carrier adapter feeds the measurements through these) -----------

    def frame_arrived(self, payload: bytes, now_ms: float) -> None:
        """One 160-byte mu-law frame of outbound audio reached the carrier at ``now_ms``."""
        self._advance_play(now_ms)
        self._accept_frame(payload, now_ms)

    def mark_arrived(self, name: str, now_ms: float) -> None:
        """A playback marker (mark, checkpoint, notify) named ``name`` reached the carrier at ``now_ms``."""
        self._advance_play(now_ms)
        self._receive_mark(name, parse_mark_name(name), now_ms)

    def clear_arrived(self, now_ms: float) -> None:
        """A clear (clear, clearAudio, {"action":"clear"}) reached the carrier at ``now_ms``."""
        self._advance_play(now_ms)
        self._receive_clear(now_ms)

    def protocol_error(self, reason: str, now_ms: float | None = None) -> None:
        """Something the carrier would not accept: counted with its fixed ``reason``."""
        if now_ms is not None:
            self._advance_play(now_ms)
        self._protocol_error(reason)

    # ----- what reached the carrier ------------------------------------------------------------------

    def _protocol_error(self, reason: str) -> None:
        self.metrics.protocol_errors += 1
        if len(self.metrics.error_reasons) < MAX_ERROR_REASONS:
            self.metrics.error_reasons.append(reason)

    def _accept_frame(self, payload: bytes, now_ms: float) -> None:
        frames = self.frames
        frame = ReceivedFrame(len(frames), now_ms, payload if self.keep_audio else None, self._epoch)
        frames.append(frame)
        self._pending.append(frame)
        metrics = self.metrics
        metrics.frames_received += 1
        anchor = self._play_anchor_ms
        if anchor is None:
            # Playout starts with the first frame: at once, or on the next tick of the shared grid.
            phase = self._play_phase_ms
            if phase is None:
                anchor = self._play_anchor_ms = now_ms
            else:
                ticks = -(-(now_ms - phase) // FRAME_MS)  # ceil
                anchor = self._play_anchor_ms = phase + ticks * FRAME_MS
        self._queue.append(frame)
        queued = self._queued_frames = self._queued_frames + 1
        if queued > metrics.max_queued_frames:
            metrics.max_queued_frames = queued
        if anchor + self._play_tick * FRAME_MS <= now_ms:  # a playout tick is due (else _advance_play does nothing)
            self._advance_play(now_ms)

    def _receive_mark(self, name: str, parsed: tuple[int, int, bool] | None, now_ms: float) -> None:
        self.metrics.marks_received += 1
        self._attribute(parsed)
        is_end = parsed is not None and parsed[2]
        if not self._queue and self._playing_until_ms <= now_ms:
            # Nothing queued or playing: echo at once (Telnyx documents this; unverified for Twilio, A.3).
            self.metrics.marks_echoed_idle += 1
            self._echo(name, is_end)
        else:
            self._queue.append(_QueuedMark(name, is_end))

    def _receive_clear(self, now_ms: float) -> None:
        metrics = self.metrics
        metrics.clears_received += 1
        metrics.clear_at_ms.append(now_ms)
        # A.3: all buffered audio is thrown away and every pending mark comes back at once (carriers
        # that drop pending marks instead say so in ECHOES_MARKS_ON_CLEAR).
        for item in self._queue:
            if type(item) is _QueuedMark:
                if self.ECHOES_MARKS_ON_CLEAR:
                    metrics.marks_echoed_on_clear += 1
                    self._echo(item.name, item.is_end)
                else:
                    metrics.marks_dropped_on_clear += 1
            else:
                item.dropped = True
                item.dropped_at_ms = now_ms
                metrics.frames_dropped_by_clear += 1
        self._queue.clear()
        self._queued_frames = 0
        if self._playing_until_ms > now_ms and self.played:
            cut = self.played[-1]
            cut.played_ms = now_ms - cut.played_at_ms
            self._playing_until_ms = now_ms
        self._in_spurt = False
        self._in_underrun = False
        # Frames no mark claimed before the clear can never be tied to a response.
        metrics.frames_without_mark += len(self._pending)
        self._pending = []
        self._pending_past_checkpoint = False
        self._epoch += 1
        if self._bargein_at_ms is not None:
            metrics.bargein_latency_ms.append(now_ms - self._bargein_at_ms)
            self._bargein_at_ms = None
        self._cleared(now_ms)

    def _echo_ended_spurt(self, is_end: bool) -> None:
        """A response's last mark (``is_end``) played: its talk spurt is over, silence from here is no underrun."""
        if is_end:
            self._in_spurt = False
            self._in_underrun = False

    @abc.abstractmethod
    def _echo(self, name: str, is_end: bool) -> None:
        """Playout passed the mark ``name`` (or a clear returned it): the adapter queues its echo in
        ``self._outbox``. Every adapter calls ``_echo_ended_spurt(is_end)`` first (or does what it does)."""

    def _cleared(self, now_ms: float) -> None:
        """A clear was carried out (after the pending marks were echoed or dropped): the adapter's
        acknowledgement, if its carrier sends one (Plivo clearedAudio, Vonage websocket:cleared)."""

    def _attribute(self, parsed: tuple[int, int, bool] | None) -> None:
        """Give the frames received since the previous mark the tag this mark names (parse_mark_name).

        A marker whose name is no mark of the pacer's claims nothing: the frames before it wait for the next
        mark. Plivo's gateway sends checkpoints of its own (they settle its bound on unconfirmed audio) behind
        any five frames that went out with no mark behind them, so one can fall between a fallback line's last
        frames and a response's first ones, before that response's first mark: the response's frames are its
        own all the same. So a mark that comes after such a checkpoint takes the newest of the waiting frames, as
        many as its count says the pacer sent of its tag since the tag's previous mark; older ones (a fallback
        line's: no response's audio) stay without a mark. Twilio's adapter applies that count rule to every mark
        (MARKS_CLAIM_BY_COUNT); for the others, without a checkpoint between, a mark takes every frame since the
        previous mark: applied to every mark, the count rule made an Exotel call (which batches audio) show 380
        stale frames in its stack test (why was not examined)."""
        metrics = self.metrics
        if parsed is None:
            metrics.marks_unparsed += 1
            self._pending_past_checkpoint = self._pending_past_checkpoint or bool(self._pending)
            return
        frames, self._pending = self._pending, []
        past_checkpoint, self._pending_past_checkpoint = self._pending_past_checkpoint, False
        tag, frames_through, is_end = parsed
        epoch = self._epoch
        state = self._tags.get(tag)
        if state is None:
            state = self._tags[tag] = _TagState(epoch)
        claimed = max(0, frames_through - state.attributed_frames)
        if (past_checkpoint or self.MARKS_CLAIM_BY_COUNT) and len(frames) > claimed:
            metrics.frames_without_mark += len(frames) - claimed
            frames = frames[len(frames) - claimed:]
        if state.spurt_ended and frames:
            # The tag's audio resumes after its end mark (a hold on a VAD edge, then a false alarm): a new
            # talk spurt, timed from its own first frame like a response's first. After a clear that came
            # behind that end mark (the hold's clear) it is the same live tag going on, not a dead one.
            if state.ended_epoch is not None and state.ended_epoch < epoch:
                state.resumed_epoch = epoch
            state.spurt_ended = False
            state.timed_frames = 0
            state.first_arrival_ms = None
        state.spurt_ended = state.spurt_ended or is_end
        if is_end:
            state.ended_epoch = epoch
        if state.epoch != epoch:
            state.epoch = epoch
            state.frames_in_epoch = 0
        state.frames_in_epoch += len(frames)
        state.attributed_frames += len(frames)
        # A tag that lived before the latest clear is dead after it: its frames are stale (INV-STALE).
        # Either we saw it before the clear, or the pacer's own count says it sent frames of it that
        # did not arrive after the clear (they came before it, unclaimed).
        resumed = state.resumed_epoch == epoch
        if epoch > 0 and not resumed and (state.first_epoch < epoch or frames_through > state.frames_in_epoch):
            state.stale_epoch = epoch
        stale = state.stale_epoch == epoch and epoch > 0
        if not stale and state.stale_epoch is None and frames_through != state.attributed_frames:
            metrics.mark_count_mismatches += 1
        lead = self.lead_frames - 1
        for frame in frames:
            frame.tag = tag
            if resumed:
                frame.resumed = True
                metrics.frames_resumed_after_clear += 1
            if stale:
                frame.stale = True
                metrics.stale_frames += 1
                continue
            n = state.timed_frames
            if n == 0:
                state.first_arrival_ms = frame.arrival_ms
            frame.index_in_tag = n
            expected_ms = state.first_arrival_ms + max(0, n - lead) * FRAME_MS
            metrics.lateness_ms.append(max(0.0, frame.arrival_ms - expected_ms))
            state.timed_frames = n + 1

    # ----- the carrier's playout -----------------------------------------------------------------------

    def _new_stream(self, lost_at_ms: float, now_ms: float) -> None:
        """The same call goes on over a new stream (the carrier's continuation answered one after the old stream
        dropped without a stop): what the old stream had buffered never plays (the carrier's buffer went with
        it), and what the caller said while no stream was open is lost: the caller's clock goes on, so the next
        frame sent is the one due now. Each adapter's ``reattach`` adds its own stream's ids and opening."""
        self._advance_play(now_ms)
        self.metrics.frames_without_mark += len(self._pending)
        self._pending = []
        self._pending_past_checkpoint = False
        self._queue.clear()
        self._queued_frames = 0
        self._in_spurt = False
        self._in_underrun = False
        self._playing_until_ms = min(self._playing_until_ms, now_ms)
        self._epoch += 1
        self._outbox = []
        # The marks of a new stream are the new stream's: a tag number the old one used means nothing here.
        self._tags = {}
        if self._send_origin_ms is not None:
            self._next_send_frame = max(self._next_send_frame,
                                        int((now_ms - self._send_origin_ms) // FRAME_MS) + 1)
        self.metrics.reattaches.append((lost_at_ms, now_ms))
        self._opened = False

    def tick_play(self, now_ms: float) -> None:
        """Run every playout tick due by ``now_ms``; mark echoes go to messages_to_send()."""
        self._advance_play(now_ms)

    def set_playout_stall(self, stall_ms: int, every_ms: int) -> None:
        """Make the carrier's playout stall: the last ``stall_ms`` of every ``every_ms`` of its 20 ms grid
        (counted from its first tick) play nothing, and so pass no mark, while what is queued waits: a media
        server that falls behind (a slow host, network jitter in front of it) and then plays on at real time
        from where it stopped, late by that much, as a deep buffer like Plivo's does. Stalled ticks are counted
        in ``metrics.stalled_ticks``, not as underruns: the sender did not leave the caller short. 0, 0: none."""
        if stall_ms == 0 and every_ms == 0:
            self._stall_every_ticks = self._stall_ticks = 0
            return
        if stall_ms < FRAME_MS or stall_ms % FRAME_MS or every_ms % FRAME_MS or not stall_ms < every_ms:
            raise ValueError("stall_ms and every_ms must be whole 20 ms frames with 20 <= stall_ms < every_ms")
        self._stall_every_ticks = every_ms // FRAME_MS
        self._stall_ticks = stall_ms // FRAME_MS

    def _advance_play(self, now_ms: float) -> None:
        anchor = self._play_anchor_ms
        if anchor is None:
            return
        while True:
            tick_ms = anchor + self._play_tick * FRAME_MS
            if tick_ms > now_ms:
                return
            if not self._queue and not self._in_spurt:
                # Idle: nothing can happen until something arrives; skip to the first tick after now.
                self._play_tick = int((now_ms - anchor) // FRAME_MS) + 1
                return
            every = self._stall_every_ticks
            if every and self._play_tick % every >= every - self._stall_ticks:
                self.metrics.stalled_ticks += 1  # the carrier's own stall: nothing plays, no mark is passed
            else:
                self._play_one(tick_ms)
            self._play_tick += 1

    def _play_one(self, tick_ms: float) -> None:
        queue = self._queue
        # The frame that started a tick ago has finished: marks right behind it are passed now (A.3).
        while queue and type(queue[0]) is _QueuedMark:
            self.metrics.marks_echoed_played += 1
            mark = queue.popleft()
            self._echo(mark.name, mark.is_end)
        if queue:
            frame = queue.popleft()
            self._queued_frames -= 1
            frame.played_at_ms = tick_ms
            frame.played_ms = float(FRAME_MS)
            self._playing_until_ms = tick_ms + FRAME_MS
            self.played.append(frame)
            self.metrics.frames_played += 1
            self._in_spurt = True
            self._in_underrun = False
        elif self._in_spurt:
            # Inside a response and nothing to play: the caller hears a gap.
            self.metrics.underruns += 1
            self.metrics.underrun_at_ms.append(tick_ms)
            if not self._in_underrun:
                self.metrics.underrun_episodes += 1
                self._in_underrun = True

    # ----- harness hooks and results ---------------------------------------------------------------

    def note_bargein(self, now_ms: float) -> bool:
        """The caller starts talking now. If the agent is audible, time the gateway's next `clear`.

        Returns whether the barge-in counts (False: the agent was silent, nothing to interrupt).
        """
        self._advance_play(now_ms)
        metrics = self.metrics
        talking = self._queued_frames > 0 or self._playing_until_ms > now_ms or self._in_spurt
        if not talking:
            metrics.bargeins_ignored += 1
            return False
        metrics.bargeins_noted += 1
        metrics.bargein_at_ms.append(now_ms)
        self._bargein_at_ms = now_ms  # the latency runs from the latest barge-in to the next clear
        return True

    def bargeins_without_clear_ms(self) -> list[float]:
        """When each noted barge-in that got no `clear` within BARGEIN_CLEAR_WINDOW_MS happened. A barge-in
        less than the window before the call's end (stop_message's now_ms) with no clear yet is not
        judged: the clear may have been on its way. Without an end time every barge-in is judged."""
        clears = self.metrics.clear_at_ms
        end = self.stopped_at_ms
        missed = []
        for at in self.metrics.bargein_at_ms:
            deadline = at + BARGEIN_CLEAR_WINDOW_MS
            if any(at <= clear <= deadline for clear in clears):
                continue
            if end is not None and deadline > end:
                continue
            missed.append(at)
        return missed

    def overlapping_played(self) -> list[ReceivedFrame]:
        """Played frames of an older response than one whose audio already started playing before them: the
        caller heard the older voice after the newer one began (tags rise within a call). Frames without
        a tag (no mark claimed them) are skipped."""
        newest = 0
        found = []
        for frame in self.played:
            tag = frame.tag
            if tag is None:
                continue
            if tag < newest:
                found.append(frame)
            else:
                newest = tag
        return found

    def played_frames_of_tag(self, tag: int) -> int:
        """How many frames of response ``tag`` started playing (a frame cut by clear counts)."""
        return sum(1 for frame in self.played if frame.tag == tag)

    def played_ms_of_tag(self, tag: int) -> float:
        """Milliseconds of response ``tag`` the caller heard (a frame cut by clear counts partly), less the
        carrier path's ``outbound_delay_ms`` (a resampled stream's frames carry the response's audio that
        much late, so that much of what played was still the audio before it)."""
        played = sum(frame.played_ms for frame in self.played if frame.tag == tag)
        return max(0.0, played - self.outbound_delay_ms) if played else played

    def played_audio(self, tag: int | None = None) -> bytes:
        """The payload bytes of the frames played (of one tag, or all), in play order; needs keep_audio."""
        return b"".join(frame.payload or b"" for frame in self.played if tag is None or frame.tag == tag)

    def played_log(self) -> list[tuple[float, bytes | None, int | None]]:
        """(play_time_ms, payload, tag or None) for every played frame, in play order."""
        return [(frame.played_at_ms, frame.payload, frame.tag) for frame in self.played]

    def statistics(self) -> CarrierStatistics:
        """Snapshot of the measurements; frames still unclaimed by a mark count as without mark."""
        m = self.metrics
        lateness = m.lateness_ms
        return CarrierStatistics(
            media_sent=m.media_sent,
            dtmf_sent=m.dtmf_sent,
            frames_received=m.frames_received,
            frames_played=m.frames_played,
            frames_dropped_by_clear=m.frames_dropped_by_clear,
            frames_without_mark=m.frames_without_mark + len(self._pending),
            stale_frames=m.stale_frames,
            stale_frames_played=sum(1 for frame in self.played if frame.stale),
            marks_received=m.marks_received,
            marks_unparsed=m.marks_unparsed,
            marks_echoed=m.marks_echoed_played + m.marks_echoed_idle + m.marks_echoed_on_clear,
            marks_echoed_on_clear=m.marks_echoed_on_clear,
            marks_dropped_on_clear=m.marks_dropped_on_clear,
            mark_count_mismatches=m.mark_count_mismatches,
            clears_received=m.clears_received,
            protocol_errors=m.protocol_errors,
            underruns=m.underruns,
            underrun_episodes=m.underrun_episodes,
            lateness_p50_ms=percentile_or_none(lateness, 50),
            lateness_p99_ms=percentile_or_none(lateness, 99),
            lateness_max_ms=max(lateness) if lateness else None,
            late_frames=sum(1 for value in lateness if value > 0),
            bargeins_noted=m.bargeins_noted,
            bargeins_ignored=m.bargeins_ignored,
            bargeins_without_clear=len(self.bargeins_without_clear_ms()),
            bargein_latency_p50_ms=percentile_or_none(m.bargein_latency_ms, 50),
            bargein_latency_max_ms=max(m.bargein_latency_ms) if m.bargein_latency_ms else None,
            overlapping_frames=len(self.overlapping_played()),
        )


class CarrierCall(PlayoutCore):
    """One simulated Twilio call (the Twilio adapter). Drive it with opening_messages(), tick_send(),
    receive() / receive_fast(), tick_play()."""

    # Twilio's path carries the pacer's entries one to one (no re-chunking), so a mark's count is exact: the
    # frames of a fallback line played before a response's first mark (the pacer's hold line while the model was
    # silent) are no part of that response's heard time (a truncate was measured 984 ms off for that).
    MARKS_CLAIM_BY_COUNT = True

    def __init__(
        self,
        call_sid: str,
        stream_sid: str,
        account_sid: str,
        session_token: str,
        caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
        lead_frames: int = DEFAULT_LEAD_FRAMES,
        *,
        play_phase_ms: float | None = None,
        first_timestamp_ms: int = 0,
        keep_audio: bool = True,
        parameters: Sequence[tuple[str, str]] = (),
    ) -> None:
        """``caller_audio``, ``lead_frames``, ``play_phase_ms``, ``keep_audio``: PlayoutCore's.
        ``first_timestamp_ms``: media timestamp of the first frame (real streams do not start at 0, A.2).
        ``parameters``: the TwiML's other ``<Parameter>``s, passed on in ``start.customParameters`` after the token.
        """
        super().__init__(caller_audio, lead_frames, play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self.call_sid = call_sid
        self.stream_sid = stream_sid
        self.account_sid = account_sid
        self.session_token = session_token
        self.parameters = tuple((name, value) for name, value in parameters if name != "session_token")

        self._expect_stream(stream_sid)
        self._seq = 0  # last sequenceNumber used; `start` is "1" (A.2)
        self._first_timestamp_ms = first_timestamp_ms

    # ----- caller side (A.2) -----------------------------------------------------------------------

    def opening_messages(self) -> list[str]:
        """`connected` then `start` (sequenceNumber "1"), exactly as docs/explanation/protocols.md#a2 says."""
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        connected = {"event": "connected", "protocol": "Call", "version": "1.0.0"}
        self._seq = 1
        start = {
            "event": "start",
            "sequenceNumber": "1",
            "start": {
                "accountSid": self.account_sid,
                "streamSid": self.stream_sid,
                "callSid": self.call_sid,
                "tracks": ["inbound"],
                "customParameters": {"session_token": self.session_token, **dict(self.parameters)},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            },
            "streamSid": self.stream_sid,
        }
        return [json.dumps(connected), json.dumps(start)]

    def send_dtmf(self, digit: str) -> str:
        """A `dtmf` message (bidirectional streams only, A.2)."""
        self._require_open()
        if digit not in DTMF_DIGITS:
            raise ValueError("DTMF digit must be one of 0-9 * #")
        self.metrics.dtmf_sent += 1
        return json.dumps({
            "event": "dtmf",
            "streamSid": self.stream_sid,
            "sequenceNumber": self._next_seq(),
            "dtmf": {"track": "inbound_track", "digit": digit},
        })

    def stop_message(self, now_ms: float | None = None) -> str:
        """The final `stop` (A.2). Afterwards tick_send() returns nothing. ``now_ms``: when the call ends
        (barge-ins whose clear window was still open then are not judged: bargeins_without_clear_ms)."""
        self._require_open()
        self._stopped = True
        if now_ms is not None:
            self.stopped_at_ms = now_ms
        return json.dumps({
            "event": "stop",
            "sequenceNumber": self._next_seq(),
            "streamSid": self.stream_sid,
            "stop": {"accountSid": self.account_sid, "callSid": self.call_sid},
        })

    def _expect_stream(self, stream_sid: str) -> None:
        """The compact shapes voicecore's gateway writes for this stream (its OutboundEncoder; see receive_fast).
        A stream SID the encoder cannot template gets no fast path: None never matches."""
        self._sid_json = json.dumps(stream_sid)
        try:
            encoder = OutboundEncoder(stream_sid)
        except ValueError:
            encoder = None
        self._media_head = encoder.media_prefix if encoder else None
        self._media_tail = encoder.media_suffix if encoder else None
        self._media_bytes = len(encoder.media_prefix) + _FRAME_BASE64_CHARS + len(encoder.media_suffix) if encoder else -1
        self._mark_head = encoder.mark_prefix + b'"' if encoder else None
        self._media_head_len = len(encoder.media_prefix) if encoder else 0  # where the payload starts and ends
        self._media_tail_at = -len(encoder.media_suffix) if encoder else 0

    def reattach(self, stream_sid: str, session_token: str, lost_at_ms: float, now_ms: float) -> list[str]:
        """The same call on a new stream (a ``<Connect><Stream>`` its action URL answered after the old stream
        dropped without a stop): its `connected` and `start`. What the old stream had buffered never plays (the
        carrier's buffer went with it), and what the caller said while no stream was open is lost: the caller's
        clock goes on, so the next frame sent is the one due now."""
        self._new_stream(lost_at_ms, now_ms)
        self.stream_sid = stream_sid
        self.session_token = session_token
        self._expect_stream(stream_sid)
        self._opened = False
        return self.opening_messages()

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        """The messages that end the stream: Twilio's is the one `stop` (the other carriers' adapters,
        carrier_modes_core.ModeCall, may send several or none; the simulator asks every adapter this way)."""
        return [self.stop_message(now_ms)]

    def _next_seq(self) -> str:
        # One counter across all message types (A.2).
        self._seq += 1
        return str(self._seq)

    def _media_message(self, n: int) -> str:
        self.metrics.media_sent += 1
        if self._clip_cursor >= len(self._clips):  # no clip left to say: silence (_caller_frame's answer)
            payload = _SILENT_BASE64
        else:
            frame = self._caller_frame(n)
            payload = _SILENT_BASE64 if frame is SILENT_FRAME else binascii.b2a_base64(frame, newline=False).decode("ascii")
        seq = self._seq = self._seq + 1  # _next_seq, inline
        return (
            f'{{"event":"media","sequenceNumber":"{seq}","media":{{"track":"inbound",'
            f'"chunk":"{n + 1}","timestamp":"{self._first_timestamp_ms + n * FRAME_MS}",'
            f'"payload":"{payload}"}},"streamSid":{self._sid_json}}}'
        )

    # ----- gateway -> Twilio (A.3) -----------------------------------------------------------------

    def receive(self, text: str | bytes, now_ms: float) -> None:
        """Handle one WebSocket message from the gateway, received at ``now_ms``."""
        # Playout first: the queue must look the way it did when the message arrived.
        self._advance_play(now_ms)
        if not isinstance(text, str):
            # A.1: binary frames are rejected by Twilio (warning 31950).
            self._protocol_error("binary frame")
            return
        try:
            message = orjson.loads(text)
        except ValueError:
            self._protocol_error("not JSON")
            return
        if not isinstance(message, dict):
            self._protocol_error("not a JSON object")
            return
        event = message.get("event")
        if event not in ("media", "mark", "clear"):
            # A.1: anything but media, mark and clear is error 31951.
            self._protocol_error(f"unexpected event {str(event)[:40]!r}")
            return
        if message.get("streamSid") != self.stream_sid:
            self._protocol_error(f"{event}: wrong or missing streamSid")
            return
        if event == "media":
            self._receive_media(message, now_ms)
        elif event == "mark":
            mark = message.get("mark")
            name = mark.get("name") if isinstance(mark, dict) else None
            if not isinstance(name, str):
                self._protocol_error("mark: missing name")
                return
            self._receive_mark(name, parse_mark_name(name), now_ms)
        else:
            self._receive_clear(now_ms)

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        """The hot path for the two messages a gateway sends most (~75 per second per call): a text
        message's UTF-8 bytes that are a `media` frame or a "tag:n[:end]" `mark` of this stream in the
        compact shape voicecore's gateway writes (its key order, no whitespace). Then it has the effect
        receive() would have had, and returns True. Anything else returns False with nothing changed:
        pass it to receive(), which parses and judges it in full.

        A message that matches is valid JSON with exactly receive()'s fields: the strict base64
        decoder admits no quote, backslash or control character, and the mark name's pattern none either.
        """
        if len(data) == self._media_bytes:  # -1 when there is no fast path: never
            if data.startswith(self._media_head) and data.endswith(self._media_tail):
                try:
                    payload = binascii.a2b_base64(data[self._media_head_len:self._media_tail_at], strict_mode=True)
                except (binascii.Error, ValueError):
                    return False
                if len(payload) != FRAME_BYTES:
                    return False
                anchor = self._play_anchor_ms
                if anchor is not None and anchor + self._play_tick * FRAME_MS <= now_ms:  # a playout tick is due
                    self._advance_play(now_ms)
                self._accept_frame(payload, now_ms)
                return True
        if data.endswith(b'"}}'):
            head = self._mark_head
            if head is not None and data.startswith(head):
                name_bytes = data[len(head):-3]
                if PLAIN_NAME_BYTES.fullmatch(name_bytes) is None:
                    return False
                # The pattern admits only "digits:digits[:end]": parse_mark_name's answer without its checks.
                parts = name_bytes.split(b":")
                tag = int(parts[0])
                parsed = (tag, int(parts[1]), len(parts) == 3) if tag >= 1 else None
                self._advance_play(now_ms)
                self._receive_mark(name_bytes.decode("ascii"), parsed, now_ms)
                return True
        return False

    def _receive_media(self, message: dict, now_ms: float) -> None:
        media = message.get("media")
        payload_text = media.get("payload") if isinstance(media, dict) else None
        if not isinstance(payload_text, str):
            self._protocol_error("media: missing payload")
            return
        try:
            payload = binascii.a2b_base64(payload_text, strict_mode=True)
        except (binascii.Error, ValueError):
            self._protocol_error("media: payload is not base64")
            return
        size = len(payload)
        if size == FRAME_BYTES:
            self._accept_frame(payload, now_ms)
            return
        if size == 0 or size % FRAME_BYTES:
            self._protocol_error(f"media: payload is {size} bytes, expected a multiple of {FRAME_BYTES}")
            return
        # Twilio takes any whole number of 20 ms frames in one message (pipecat's default is 40 ms) and
        # plays them in order: k frames arriving at once, each played on its own tick.
        for start in range(0, size, FRAME_BYTES):
            self._accept_frame(payload[start:start + FRAME_BYTES], now_ms)

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        self._outbox.append(
            f'{{"event":"mark","sequenceNumber":"{self._next_seq()}","streamSid":{self._sid_json},'
            f'"mark":{{"name":{_json_string(name)}}}}}'
        )
