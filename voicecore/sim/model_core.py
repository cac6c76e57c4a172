"""Realtime-model simulator, one session: the server side of PROTOCOLS.md D.2, sans-I/O.

Owns what a fake OpenAI Realtime server says and when: the handshake, session merging (beta flat and GA
nested shapes, C.1), the input buffer with a simple energy VAD, the D.1 response sequence built from
packaged speech clips, cancel / truncate / delete semantics, the failure switches of `SimConfig`, and a
`SessionRecord` a measurement harness reads after the call. It is fed client event texts and a clock
(`now_ms`), and hands back server event texts; it must not know sockets, asyncio or the wall clock.
Randomness comes from `seed` through a local splitmix64 (ids, delta sizes, failure draws) and numpy's
PCG64 bit stream (dither), both stable across versions, so a session replays byte for byte.

Responses at once: a client's response.create during a response is refused (as the real server does),
but with `SimConfig.overlap_probability` the session itself starts a second response while the first
still streams, as a real server sometimes does (server VAD racing a client response.create, a
function-call follow-up): both send their deltas interleaved in time, each has its own ids and done
cascade, `ResponseRecord.overlaps` names the first. A cancel or a barge-in stops every response in
progress (a cancel with a response_id only that one); each lets its late deltas out.

Audio is 8 kHz mu-law only (`audio/pcmu` / `g711_ulaw`): a response is refused until session.update
selects it for output, as a real server would otherwise send 24 kHz PCM the carrier cannot play.

Frame identity: each response's audio is its clip plus a tiny deterministic dither, seeded per
response, so that no two 160-byte frames (cut from the response start) of different responses are
equal and a harness can tell which response and which frame index reached the carrier by content
alone (`SessionRecord.frame_owners`). A +/-1 LSB change on 16-bit linear would not survive mu-law
re-encoding (its smallest step is 8 LSB), so the dither works on mu-law codes: each sample in the two
quietest mu-law segments (|x| < 380 of 32768, steps of 8 and 16 LSB, about -72 and -66 dBFS) moves
by -1, 0 or +1 code; a frame with fewer than 32 such samples also dithers its 32 quietest samples.
Moving down from code 0 flips the sign of zero, which changes the byte and not the sound. On the
packaged clips the added noise is about -68 dBFS RMS (some 48 dB under the speech, below the codec's
own quantisation noise); the length of the audio is unchanged.
"""

from __future__ import annotations

import binascii
import functools
import math
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from voicecore.sim.audio_clips import ClipInfo, ClipLibrary, default_library
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES, FRAME_MS

try:  # deprecated in 3.11/3.12, gone in 3.13 unless audioop-lts is installed (PROTOCOLS.md D.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop as _audioop
except ImportError:  # pragma: no cover - exercised through rms_ulaw_numpy in the tests
    _audioop = None

# --------------------------------------------------------------------------------------------------
# Configuration and records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Behaviour switches of the simulator. Response indices count from 0 within one session."""

    naming: str = "ga"  # "ga" | "beta" (D.2 item 9); a connection may override it
    seed: int = 0  # base seed; each session mixes in its session_index
    model: str = "gpt-realtime"  # reported in session.created unless the URL names one
    speed_factor: float = 4.0  # audio is generated this many times faster than real time (D.2 item 4)
    first_delta_latency_ms: int = 200  # response.create -> first audio delta
    delta_min_bytes: int = 300  # audio delta sizes are drawn in [min, max], never a multiple of 160
    delta_max_bytes: int = 1900
    clip_sequence: tuple[str, ...] = ()  # pin the agent clips spoken, cycled; () = automatic choice
    late_deltas_after_cancel: int = 0  # 0-3 already generated deltas sent after a cancel (D.2 item 5)
    transcription_delay_ms: int = 150  # commit -> input_audio_transcription.completed (when enabled)
    vad_rms_threshold: int = 200  # 20 ms windows at or above this RMS (16-bit linear) are speech
    vad_min_speech_ms: int = 40  # this much speech in a row starts a turn
    hallucinate: bool = False  # every response's transcript says `hallucinated_text`; audio stays a clip
    hallucinate_responses: tuple[int, ...] = ()  # ... or only these responses
    hallucinated_text: str = "Basic costs 777 kr per month."
    stall_after_ms: int | None = None  # output pauses this long after the first delta ...
    stall_ms: int = 2000  # ... for this long
    stall_responses: tuple[int, ...] = ()  # responses that stall; () = every response
    error_rate: float = 0.0  # probability (seeded draw) that a response ends with status failed
    fail_next_response: bool = False  # the session's first response fails
    fail_responses: tuple[int, ...] = ()  # these responses fail
    # transcript-validation hooks (D.2 item 8)
    transcript_done_differs: bool = False  # (a) *_transcript.done differs from the joined deltas
    omit_transcript_done_on_cancel: bool = False  # (b)
    transcript_after_audio_done: bool = False  # (c) the second half of the transcript after audio.done
    obfuscation: bool = False  # (d) unknown `obfuscation` key on every delta
    rate_limits_empty: bool = False  # (e) rate_limits.updated carries []
    # A second response while the first still streams (server VAD racing a client response.create, a
    # function-call follow-up): for each response the session starts (not a failed one, not itself an
    # overlap) a seeded draw with this probability starts another one, a uniform delay in
    # overlap_delay_ms after the first was created, if the first is still in progress then.
    overlap_probability: float = 0.0
    overlap_delay_ms: tuple[int, int] = (200, 2000)

    def __post_init__(self) -> None:
        if self.naming not in ("ga", "beta"):
            raise ValueError(f"naming must be 'ga' or 'beta', not {self.naming!r}")
        if not self.speed_factor > 0:
            raise ValueError("speed_factor must be positive")
        if not 1 <= self.delta_min_bytes <= self.delta_max_bytes:
            raise ValueError("need 1 <= delta_min_bytes <= delta_max_bytes")
        if not 0 <= self.late_deltas_after_cancel <= 3:
            raise ValueError("late_deltas_after_cancel must be 0-3")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be in [0, 1]")
        if not 0.0 <= self.overlap_probability <= 1.0:
            raise ValueError("overlap_probability must be in [0, 1]")
        low, high = self.overlap_delay_ms
        if not 0 <= low <= high:
            raise ValueError("overlap_delay_ms must be (low, high) with 0 <= low <= high")


@dataclass(slots=True)
class ResponseRecord:
    index: int
    response_id: str
    item_id: str  # the assistant item ("" for a failed response, which has no item)
    clip_name: str
    text: str  # the transcript the simulator speaks (the hallucinated text when hallucinating)
    audio: bytes  # full audio of the response: clip + dither (what would be sent if not cancelled)
    delta_bytes: list[int]  # planned audio delta sizes, in order; they sum to len(audio)
    created_ms: int
    instructions: str | None = None
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
    overlaps: str | None = None  # the response_id of the response this one started during (SimConfig.overlap_*)

    def frames(self) -> list[bytes]:
        """The response audio cut into 160-byte frames from its start; the last one may be short."""
        return [self.audio[i : i + FRAME_BYTES] for i in range(0, len(self.audio), FRAME_BYTES)]


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
    caller_clip: str | None = None  # the caller clip recognised, if any
    # the response speech_started cancelled (turn_detected); the newest one when several were active
    interrupted_response_id: str | None = None


@dataclass(slots=True)
class ErrorRecord:
    at_ms: int
    code: str | None
    client_event_type: str | None


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
    responses: list[ResponseRecord] = field(default_factory=list)
    truncates: list[TruncateRecord] = field(default_factory=list)
    cancels: list[CancelRecord] = field(default_factory=list)
    deleted_item_ids: list[str] = field(default_factory=list)
    speech: list[SpeechRecord] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    appended_bytes: int = 0
    client_events: dict[str, int] = field(default_factory=dict)

    @property
    def speech_started_ms(self) -> list[int]:
        return [s.started_at_ms for s in self.speech]

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


# --------------------------------------------------------------------------------------------------
# Deterministic randomness and ids
# --------------------------------------------------------------------------------------------------

_MASK64 = (1 << 64) - 1
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE62_SQUARED = 62 * 62
_BASE62_PAIRS = tuple(_BASE62[r % 62] + _BASE62[r // 62] for r in range(_BASE62_SQUARED))  # low digit first


def _fold(*parts: int | str) -> int:
    """A stable 64-bit seed from parts (FNV-1a; Python's hash() of str changes per process)."""
    h = 0xCBF29CE484222325
    for part in parts:
        data = part.encode() if isinstance(part, str) else int(part).to_bytes(16, "little", signed=True)
        for byte in data + b"\x00":
            h = ((h ^ byte) * 0x100000001B3) & _MASK64
    return h


class _Rng:
    """splitmix64: tiny, fast enough, and identical on every platform and Python version."""

    __slots__ = ("_state",)

    def __init__(self, *parts: int | str) -> None:
        self._state = _fold(*parts)

    def u64(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK64
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.u64() % n

    def uniform(self) -> float:
        return self.u64() / 2.0**64

    def token(self, length: int = 21) -> str:
        # Ten base-62 digits per draw (62**10 < 2**64), two at a time (a divmod by 62**2 and a table):
        # ids are a large share of the simulator's work.
        pairs: list[str] = []
        while 2 * len(pairs) < length:
            z = self.u64()
            for _ in range(5):
                z, r = divmod(z, _BASE62_SQUARED)
                pairs.append(_BASE62_PAIRS[r])
        return "".join(pairs)[:length]


# --------------------------------------------------------------------------------------------------
# Audio helpers (pure functions; the tests call them directly)
# --------------------------------------------------------------------------------------------------


def _ulaw_table() -> np.ndarray:
    """G.711 mu-law byte -> 16-bit linear, the same values audioop.ulaw2lin(width=2) gives."""
    table = np.zeros(256, dtype=np.int32)
    for byte in range(256):
        u = ~byte & 0xFF
        sample = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07)
        sample -= 0x84
        table[byte] = -sample if u & 0x80 else sample
    return table


_ULAW_TO_LINEAR = _ulaw_table()


def rms_ulaw_numpy(window: bytes) -> int:
    """RMS of mu-law audio on 16-bit linear samples; the fallback when audioop is missing."""
    if not window:
        return 0
    samples = _ULAW_TO_LINEAR[np.frombuffer(window, dtype=np.uint8)].astype(np.float64)
    return int(math.sqrt(float(np.mean(samples * samples))))


def rms_ulaw(window: bytes) -> int:
    if _audioop is None:  # pragma: no cover - Python 3.13 without audioop-lts
        return rms_ulaw_numpy(window)
    return _audioop.rms(_audioop.ulaw2lin(window, 2), 2)


def peak_ulaw(audio: bytes) -> int:
    """Largest absolute 16-bit linear sample of mu-law audio (an upper bound of any window's RMS)."""
    if not audio:
        return 0
    if _audioop is None:  # pragma: no cover - Python 3.13 without audioop-lts
        return int(np.abs(_ULAW_TO_LINEAR[np.frombuffer(audio, dtype=np.uint8)]).max())
    return _audioop.max(_audioop.ulaw2lin(audio, 2), 2)


def speech_span_ms(audio: bytes, threshold: int) -> int:
    """ms from the first to the end of the last 20 ms window at or above `threshold` (0: none)."""
    first = last = None
    for i in range(0, len(audio) - FRAME_BYTES + 1, FRAME_BYTES):
        if rms_ulaw(audio[i : i + FRAME_BYTES]) >= threshold:
            if first is None:
                first = i
            last = i + FRAME_BYTES
    if first is None or last is None:
        return 0
    return (last - first) // BYTES_PER_MS


_DITHER_MIN_SAMPLES = 32  # per frame: 3**32 patterns, so frames of two responses never collide
_DITHER_STEP = (np.arange(256) % 3 - 1).astype(np.int16)  # random byte -> code step
_DITHER_QUIET_CODE = 31  # mu-law magnitude codes 0-31: the two quietest segments (steps 8 and 16)


def dither_ulaw(audio: bytes, seed: int) -> bytes:
    """`audio` with a deterministic +/-1 mu-law code dither on its quiet samples (module docstring)."""
    n = len(audio)
    if n == 0:
        return b""
    frames, magnitude, sign, chosen = _dither_plan(audio)
    count = frames * FRAME_BYTES
    # One random byte per sample (eight per 64-bit draw), mapped to -1/0/+1 by a table: a quarter of
    # the draws and no 64-bit modulo (the byte's 256 values split 86/85/85, unbiased enough for a dither).
    draws = np.random.PCG64(seed).random_raw(-(-count // 8)).astype("<u8", copy=False)  # bytes in one order everywhere
    raw = draws.view(np.uint8)[:count].reshape(frames, FRAME_BYTES)
    step = np.where(chosen, _DITHER_STEP[raw], 0)
    moved = magnitude + step
    below_zero = moved < 0
    sign = np.where(below_zero, sign ^ 0x80, sign).astype(np.uint8)
    moved = np.clip(moved, 0, 127).astype(np.uint8)
    out = (~(sign | moved)).astype(np.uint8).reshape(-1)[:n]
    return out.tobytes()


@functools.lru_cache(maxsize=64)
def _dither_plan(audio: bytes) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """The seed-independent half of dither_ulaw (which samples may move), computed once per clip: every
    response of a clip differs only in its random steps."""
    n = len(audio)
    frames = -(-n // FRAME_BYTES)
    padded = np.full(frames * FRAME_BYTES, 0xFF, dtype=np.uint8)
    padded[:n] = np.frombuffer(audio, dtype=np.uint8)
    inverted = (~padded).reshape(frames, FRAME_BYTES)
    magnitude = (inverted & 0x7F).astype(np.int16)
    sign = inverted & 0x80
    valid = (np.arange(frames * FRAME_BYTES) < n).reshape(frames, FRAME_BYTES)
    ranked = np.where(valid, magnitude, 1000)
    kth = np.partition(ranked, _DITHER_MIN_SAMPLES - 1, axis=1)[:, _DITHER_MIN_SAMPLES - 1 : _DITHER_MIN_SAMPLES]
    chosen = valid & ((magnitude <= _DITHER_QUIET_CODE) | (ranked <= kth))
    for array in (magnitude, sign, chosen):
        array.flags.writeable = False  # shared by every response of the clip
    return frames, magnitude, sign, chosen


def split_delta_sizes(total_bytes: int, rng: _Rng, min_bytes: int, max_bytes: int) -> list[int]:
    """Delta sizes summing to `total_bytes`, none a multiple of 160 (so deltas never line up with
    frames, D.2 item 4). The tail may be shorter than `min_bytes`."""
    sizes: list[int] = []
    remaining = total_bytes
    while remaining > max_bytes:
        size = min_bytes + rng.below(max_bytes - min_bytes + 1)
        if size % FRAME_BYTES == 0:
            size -= 1
        sizes.append(size)
        remaining -= size
    if remaining % FRAME_BYTES:
        sizes.append(remaining)
    elif remaining:
        # a frame-aligned tail (160, 320, ...) becomes two unaligned pieces: (r - 81) and 81
        sizes.extend((remaining - 81, 81))
    return sizes


@functools.lru_cache(maxsize=64)
def _caller_signature(audio: bytes, threshold: int) -> tuple[bytes, int]:
    """(the loudest 40 ms of a caller clip, its speech span): what recognition looks for."""
    best_at, best_rms = 0, -1
    for i in range(0, max(1, len(audio) - 2 * FRAME_BYTES + 1), FRAME_BYTES):
        rms = rms_ulaw(audio[i : i + 2 * FRAME_BYTES])
        if rms > best_rms:
            best_at, best_rms = i, rms
    return audio[best_at : best_at + 2 * FRAME_BYTES], speech_span_ms(audio, threshold)


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


_SAY_EXACTLY = re.compile(r'\s*Say exactly:\s*"?(.*?)"?\s*$', re.DOTALL | re.IGNORECASE)


def scripted_text(instructions: object) -> str | None:
    """The text of a scripted prompt ("Say exactly: ..."), which the model then says (its transcript;
    the audio is the nearest clip); None for other instructions."""
    if not isinstance(instructions, str):
        return None
    match = _SAY_EXACTLY.match(instructions)
    return match.group(1).strip() or None if match else None


# --------------------------------------------------------------------------------------------------
# Session configuration (canonical form, rendered per naming)
# --------------------------------------------------------------------------------------------------

_SERVER_VAD_DEFAULTS: dict[str, Any] = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
}
_SEMANTIC_VAD_DEFAULTS: dict[str, Any] = {
    "type": "semantic_vad",
    "eagerness": "auto",
    "create_response": True,
    "interrupt_response": True,
}
# silence that ends a turn for semantic_vad, by eagerness (a simulation; C.4 gives only maxima)
_SEMANTIC_SILENCE_MS = {"low": 800, "medium": 500, "auto": 500, "high": 300}

_BETA_FORMATS = {"pcm16": "pcm", "g711_ulaw": "pcmu", "g711_alaw": "pcma"}
_BETA_FORMAT_NAMES = {v: k for k, v in _BETA_FORMATS.items()}
_GA_FORMATS = {"audio/pcm": "pcm", "audio/pcmu": "pcmu", "audio/pcma": "pcma"}

_GA_SESSION_KEYS = {
    "type", "model", "instructions", "output_modalities", "audio", "tools", "tool_choice",
    "max_output_tokens", "tracing", "truncation", "include", "prompt", "parallel_tool_calls", "reasoning",
}
_BETA_SESSION_KEYS = {
    "model", "instructions", "modalities", "voice", "input_audio_format", "output_audio_format",
    "input_audio_transcription", "turn_detection", "tools", "tool_choice", "temperature",
    "max_response_output_tokens", "speed", "tracing", "input_audio_noise_reduction", "client_secret",
}


@dataclass(frozen=True, slots=True)
class _SessionConfig:
    instructions: str = "You are a helpful assistant."
    voice: str = "alloy"
    speed: float = 1.0
    input_format: str = "pcm"  # canonical: pcm | pcmu | pcma; the real default is 24 kHz PCM
    output_format: str = "pcm"
    turn_detection: dict[str, Any] | None = field(default_factory=lambda: dict(_SERVER_VAD_DEFAULTS))
    transcription: dict[str, Any] | None = None
    noise_reduction: dict[str, Any] | None = None
    tools: tuple[Any, ...] = ()
    tool_choice: Any = "auto"
    max_output_tokens: Any = "inf"


class _Reject(Exception):
    """Internal: the client event is invalid; becomes an `error` server event."""

    def __init__(self, code: str | None, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


def _unknown(param: str) -> _Reject:
    return _Reject("unknown_parameter", f"Unknown parameter: '{param}'.", param)


def _missing(param: str) -> _Reject:
    return _Reject("missing_required_parameter", f"Missing required parameter: '{param}'.", param)


def _invalid(param: str, detail: str) -> _Reject:
    return _Reject("invalid_value", f"Invalid value for '{param}': {detail}", param)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Leaf checks for session fields: (test, what the error says). Every field we store is checked here, so
# a peer's odd value becomes an `error` event instead of an exception later in the VAD or the renderer.
_CHECKS: dict[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "ms": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "ms_or_null": (lambda v: v is None or (_is_int(v) and v >= 0), "a non-negative integer or null"),
    "number": (_is_number, "a number"),
    "unit": (lambda v: _is_number(v) and 0 <= v <= 1, "a number from 0 to 1"),
    "speed": (lambda v: _is_number(v) and 0.25 <= v <= 1.5, "a number from 0.25 to 1.5"),
    "tokens": (lambda v: v == "inf" or (_is_int(v) and 1 <= v <= 4096), "an integer from 1 to 4096 or 'inf'"),
    "eagerness": (lambda v: v in ("low", "medium", "high", "auto"), "low, medium, high or auto"),
    "tool_choice": (lambda v: v in ("none", "auto", "required"), "none, auto or required"),
    "noise": (lambda v: v in ("near_field", "far_field"), "near_field or far_field"),
    "function": (lambda v: v == "function", "function"),
    "object": (lambda v: isinstance(v, dict), "an object"),
}

# nested objects we store, field by field (the simulator supports function tools only)
_OBJECT_FIELDS: dict[str, dict[str, str]] = {
    "transcription": {"model": "str", "language": "str", "prompt": "str"},
    "noise_reduction": {"type": "noise"},
    "tool": {"type": "function", "name": "str", "description": "str", "parameters": "object"},
    "tool_choice": {"type": "function", "name": "str"},
}

_VAD_FIELDS = {
    "server_vad": {
        "type": "str",
        "threshold": "unit",
        "prefix_padding_ms": "ms",
        "silence_duration_ms": "ms",
        "create_response": "bool",
        "interrupt_response": "bool",
    },
    "semantic_vad": {"type": "str", "eagerness": "eagerness", "create_response": "bool", "interrupt_response": "bool"},
}


def _check(value: Any, check: str, param: str) -> Any:
    test, what = _CHECKS[check]
    if not test(value):
        raise _invalid(param, f"expected {what}")
    return value


def _check_object(value: Any, kind: str, param: str, nullable: bool = True) -> dict[str, Any] | None:
    if value is None and nullable:
        return None
    if not isinstance(value, dict):
        raise _invalid(param, "expected an object" + (" or null" if nullable else ""))
    fields = _OBJECT_FIELDS[kind]
    for key, field_value in value.items():
        if key not in fields:
            raise _unknown(f"{param}.{key}")
        _check(field_value, fields[key], f"{param}.{key}")
    return value


def _check_tools(value: Any, param: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list):
        raise _invalid(param, "expected an array")
    for i, tool in enumerate(value):
        _check_object(tool, "tool", f"{param}[{i}]", nullable=False)
        if not isinstance(tool.get("name"), str):
            raise _missing(f"{param}[{i}].name")
    return tuple(value)


def _check_tool_choice(value: Any, naming: str, param: str) -> Any:
    if isinstance(value, dict) and naming == "ga":  # GA may force one function: {type, name}
        _check_object(value, "tool_choice", param, nullable=False)
        if value.get("type") != "function" or not isinstance(value.get("name"), str):
            raise _invalid(param, "expected {type: function, name}")
        return value
    return _check(value, "tool_choice", param)


def _merge_turn_detection(
    current: dict[str, Any] | None, value: Any, param: str, naming: str
) -> dict[str, Any] | None:
    if value is None:
        return None  # null clears turn detection (C.2)
    if not isinstance(value, dict):
        raise _invalid(param, "expected an object or null")
    kind = value.get("type", (current or {}).get("type", "server_vad"))
    if kind not in _VAD_FIELDS:
        raise _invalid(f"{param}.type", "expected server_vad or semantic_vad")
    fields = dict(_VAD_FIELDS[kind])
    if kind == "server_vad" and naming == "ga":
        fields["idle_timeout_ms"] = "ms_or_null"  # GA only (C.3 timeout_triggered); not simulated
    for key, field_value in value.items():
        if key not in fields:
            raise _unknown(f"{param}.{key}")
        _check(field_value, fields[key], f"{param}.{key}")
    # fields not sent keep their value; a change of type starts from that type's defaults
    defaults = _SERVER_VAD_DEFAULTS if kind == "server_vad" else _SEMANTIC_VAD_DEFAULTS
    base = dict(current) if current is not None and current.get("type") == kind else dict(defaults)
    base.update(value)
    return base


def _parse_format(value: Any, naming: str, param: str) -> str:
    """A canonical format name (pcm | pcmu | pcma) from the GA object or the beta string (C.1)."""
    if naming == "beta":
        if not isinstance(value, str) or value not in _BETA_FORMATS:
            raise _invalid(param, "expected pcm16, g711_ulaw or g711_alaw")
        return _BETA_FORMATS[value]
    if not isinstance(value, dict):
        raise _invalid(param, "expected an object")
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in _GA_FORMATS:
        raise _invalid(f"{param}.type", "expected audio/pcm, audio/pcmu or audio/pcma")
    fmt = _GA_FORMATS[kind]
    for key in value:
        # audio/pcmu and audio/pcma take no `rate` key: the real server rejects it (C.1)
        if key != "type" and not (fmt == "pcm" and key == "rate"):
            raise _unknown(f"{param}.{key}")
    if fmt == "pcm" and value.get("rate", 24000) != 24000:
        raise _invalid(f"{param}.rate", "PCM is 24000 Hz only")
    return fmt


def _object(value: Any, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(param, "expected an object")
    return value


def _only(obj: dict[str, Any], allowed: set[str] | tuple[str, ...], prefix: str) -> None:
    for key in obj:
        if key not in allowed:
            raise _unknown(f"{prefix}.{key}")


def _merge_common(changes: dict[str, Any], session: dict[str, Any], naming: str, tokens_key: str) -> None:
    """Fields spelled the same in both shapes (plus the max-tokens key, which is not)."""
    if "instructions" in session:
        changes["instructions"] = _check(session["instructions"], "str", "session.instructions")
    if "tools" in session:
        changes["tools"] = _check_tools(session["tools"], "session.tools")
    if "tool_choice" in session:
        changes["tool_choice"] = _check_tool_choice(session["tool_choice"], naming, "session.tool_choice")
    if tokens_key in session:
        changes["max_output_tokens"] = _check(session[tokens_key], "tokens", f"session.{tokens_key}")


def _merge_ga(cfg: _SessionConfig, session: dict[str, Any]) -> _SessionConfig:
    _only(session, _GA_SESSION_KEYS, "session")
    if "type" not in session:
        raise _missing("session.type")
    if session["type"] != "realtime":
        raise _invalid("session.type", "the simulator supports only 'realtime' sessions")
    if "output_modalities" in session and session["output_modalities"] not in (["audio"], ["text"]):
        raise _invalid("session.output_modalities", "expected ['audio'] or ['text'], not both")
    changes: dict[str, Any] = {}
    _merge_common(changes, session, "ga", "max_output_tokens")
    audio = _object(session.get("audio"), "session.audio")
    _only(audio, ("input", "output"), "session.audio")
    inp = _object(audio.get("input"), "session.audio.input")
    out = _object(audio.get("output"), "session.audio.output")
    _only(inp, ("format", "transcription", "noise_reduction", "turn_detection"), "session.audio.input")
    _only(out, ("format", "voice", "speed"), "session.audio.output")
    if "format" in inp:
        changes["input_format"] = _parse_format(inp["format"], "ga", "session.audio.input.format")
    if "format" in out:
        changes["output_format"] = _parse_format(out["format"], "ga", "session.audio.output.format")
    if "turn_detection" in inp:
        changes["turn_detection"] = _merge_turn_detection(
            cfg.turn_detection, inp["turn_detection"], "session.audio.input.turn_detection", "ga"
        )
    if "transcription" in inp:
        param = "session.audio.input.transcription"
        changes["transcription"] = _check_object(inp["transcription"], "transcription", param)
    if "noise_reduction" in inp:
        param = "session.audio.input.noise_reduction"
        changes["noise_reduction"] = _check_object(inp["noise_reduction"], "noise_reduction", param)
    if "voice" in out:
        changes["voice"] = _check(out["voice"], "str", "session.audio.output.voice")
    if "speed" in out:
        changes["speed"] = _check(out["speed"], "speed", "session.audio.output.speed")
    return replace(cfg, **changes)


def _merge_beta(cfg: _SessionConfig, session: dict[str, Any]) -> _SessionConfig:
    _only(session, _BETA_SESSION_KEYS, "session")
    changes: dict[str, Any] = {}
    _merge_common(changes, session, "beta", "max_response_output_tokens")
    if "input_audio_format" in session:
        changes["input_format"] = _parse_format(session["input_audio_format"], "beta", "session.input_audio_format")
    if "output_audio_format" in session:
        param = "session.output_audio_format"
        changes["output_format"] = _parse_format(session["output_audio_format"], "beta", param)
    if "turn_detection" in session:
        changes["turn_detection"] = _merge_turn_detection(
            cfg.turn_detection, session["turn_detection"], "session.turn_detection", "beta"
        )
    if "input_audio_transcription" in session:
        param = "session.input_audio_transcription"
        changes["transcription"] = _check_object(session["input_audio_transcription"], "transcription", param)
    if "input_audio_noise_reduction" in session:
        param = "session.input_audio_noise_reduction"
        changes["noise_reduction"] = _check_object(session["input_audio_noise_reduction"], "noise_reduction", param)
    if "voice" in session:
        changes["voice"] = _check(session["voice"], "str", "session.voice")
    if "speed" in session:
        changes["speed"] = _check(session["speed"], "speed", "session.speed")
    return replace(cfg, **changes)


# --------------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------------

# event names that differ between beta and GA (C.1); everything else is spelled the same
_NAMES = {
    "ga": {
        "audio_delta": "response.output_audio.delta",
        "audio_done": "response.output_audio.done",
        "transcript_delta": "response.output_audio_transcript.delta",
        "transcript_done": "response.output_audio_transcript.done",
        "assistant_content": "output_audio",
    },
    "beta": {
        "audio_delta": "response.audio.delta",
        "audio_done": "response.audio.done",
        "transcript_delta": "response.audio_transcript.delta",
        "transcript_done": "response.audio_transcript.done",
        "assistant_content": "audio",
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
        self._ids = _Rng(seed, session_index, "ids")
        self._clips = clips if clips is not None else default_library()
        self._agent_clips = [c for c in self._clips.infos if c.role == "agent"]
        self._auto_clips = [c for c in self._agent_clips if c.kind in ("question", "answer")] or self._agent_clips
        self._caller_clips = [c for c in self._clips.infos if c.role == "caller"]
        self._model = model or config.model
        self._cfg = _SessionConfig()
        self._outbox: list[str] = []
        self._items: dict[str, _Item] = {}
        # responses in progress, oldest first: one, or two while an overlap (SimConfig.overlap_*) streams
        self._active: list[_Response] = []
        self._overlap_starts: list[tuple[int, int, _Response]] = []  # (due_ms, seq, the response it overlaps)
        self._overlap_seq = 0
        self._response_count = 0
        self._auto_clip_cursor = 0
        self._fail_next = config.fail_next_response
        self._audio_produced = False
        self._timers: list[tuple[int, int, str, str, float]] = []  # (due_ms, seq, item_id, transcript, s)
        self._timer_seq = 0
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
                _, _, item_id, transcript, seconds = self._timers.pop(0)
                self._emit_transcription(item_id, transcript, seconds)

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
                    raise _Reject("invalid_json", "The message is not UTF-8 JSON text.") from None
            try:
                event = orjson.loads(text)
            except (ValueError, RecursionError):
                raise _Reject("invalid_json", "The message could not be parsed as JSON.") from None
            if not isinstance(event, dict):
                raise _Reject("invalid_json", "The message must be a JSON object.")
            raw_id = event.get("event_id")
            event_id = raw_id if isinstance(raw_id, str) else None
            event_type = event.get("type")
            if not isinstance(event_type, str):
                raise _missing("type")
            self.record.client_events[event_type] = self.record.client_events.get(event_type, 0) + 1
            handler = self._HANDLERS.get(event_type)
            if handler is None:
                raise _Reject(
                    "invalid_value", f"Invalid value: '{event_type}'. Unsupported client event type.", "type"
                )
            handler(self, event, now_ms)
        except _Reject as reject:
            self._error(reject, event_id, event_type, now_ms)

    # ---- client event handlers (D.2) -----------------------------------------------------------

    def _on_session_update(self, event: dict[str, Any], now_ms: int) -> None:
        session = event.get("session")
        if not isinstance(session, dict):
            raise _missing("session")
        merged = _merge_ga(self._cfg, session) if self.naming == "ga" else _merge_beta(self._cfg, session)
        if merged.voice != self._cfg.voice and self._audio_produced:
            raise _Reject(
                "cannot_update_voice",
                "Cannot update a conversation's voice if assistant audio is present.",
                "session.voice",
            )
        self._cfg = merged
        self._emit({"type": "session.updated", "session": self._render_session()})

    def _on_append(self, event: dict[str, Any], now_ms: int) -> None:
        audio_b64 = event.get("audio")
        if not isinstance(audio_b64, str):
            raise _missing("audio")
        try:
            audio = binascii.a2b_base64(audio_b64, strict_mode=True)
        except (binascii.Error, ValueError):
            raise _invalid("audio", "not valid base64") from None
        # no acknowledgement is sent for append (C.2)
        self._in_buf += audio
        self._in_total += len(audio)
        self.record.appended_bytes += len(audio)
        self._run_vad(now_ms)

    def _on_commit(self, event: dict[str, Any], now_ms: int) -> None:
        have_ms = len(self._in_buf) // BYTES_PER_MS
        if have_ms < 100:
            raise _Reject(
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
        raise _Reject(
            "invalid_value",
            "output_audio_buffer.clear is only supported for WebRTC and SIP sessions.",
            "type",
        )

    def _on_response_create(self, event: dict[str, Any], now_ms: int) -> None:
        options = event.get("response")
        if options is not None and not isinstance(options, dict):
            raise _invalid("response", "expected an object")
        self._start_response(now_ms, options or {})

    def _on_response_cancel(self, event: dict[str, Any], now_ms: int) -> None:
        """With a response_id: that response, if it is in progress. Without one: every response in
        progress, oldest first (the real server's choice when two are active is not documented; cancelling
        all is what a client that names none means). One CancelRecord per response cancelled."""
        requested = event.get("response_id")
        if requested is not None and not isinstance(requested, str):
            raise _invalid("response_id", "expected a string")
        if requested is None:
            targets = list(self._active)
        else:
            targets = [r for r in self._active if r.record.response_id == requested]
        if not targets:
            self.record.cancels.append(CancelRecord(now_ms, requested, None))
            raise _Reject("response_cancel_not_active", "Cancellation failed: no active response found")
        for response in targets:
            self.record.cancels.append(CancelRecord(now_ms, requested, response.record.response_id))
            self._cancel(response, now_ms, "client_cancelled")

    def _on_item_create(self, event: dict[str, Any], now_ms: int) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            raise _missing("item")
        item_type = item.get("type")
        if item_type == "message":
            role = item.get("role")
            if role not in ("user", "system", "assistant"):
                raise _invalid("item.role", "expected user, system or assistant")
            content = item.get("content")
            if not isinstance(content, list):
                raise _missing("item.content")
        elif item_type in ("function_call_output", "function_call"):
            role, content = None, []
            if not isinstance(item.get("call_id"), str):
                raise _missing("item.call_id")
        else:
            raise _invalid("item.type", "expected message, function_call or function_call_output")
        item_id = item.get("id") if isinstance(item.get("id"), str) else "item_" + self._ids.token()
        if item_id in self._items:
            raise _invalid("item.id", f"an item with id '{item_id}' already exists")
        previous = self._last_item_id()
        rendered = {k: v for k, v in item.items() if k not in ("id", "object", "status")}
        rendered.update({"id": item_id, "object": "realtime.item", "status": "completed"})
        self._items[item_id] = _Item(item_id, role, rendered)
        self._emit_item_events(rendered, previous, ("added", "done"))

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
            raise _invalid("audio_end_ms", "expected a non-negative integer")
        item = self._items.get(item_id) if isinstance(item_id, str) else None
        record = TruncateRecord(
            item_id if isinstance(item_id, str) else "", audio_end_ms, now_ms, False,
            None if item is None else item.audio_bytes // BYTES_PER_MS,
        )
        self.record.truncates.append(record)
        if not isinstance(item_id, str):
            raise _missing("item_id")
        if item is None:
            raise _invalid("item_id", f"Item with item_id '{item_id}' not found.")
        if item.role != "assistant":
            raise _invalid("item_id", "Only assistant messages can be truncated.")
        content_index = event.get("content_index", 0)
        if content_index != 0:
            raise _invalid("content_index", "expected 0 (the audio content part)")
        item_audio_ms = item.audio_bytes // BYTES_PER_MS
        if audio_end_ms > item_audio_ms:
            raise _Reject(
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

    def _run_vad(self, now_ms: int) -> None:
        td = self._cfg.turn_detection
        if td is None:
            self._vad_pos = self._in_total  # no VAD: the client commits (C.4)
            return
        prefix_ms = int(td.get("prefix_padding_ms", 300))
        if td["type"] == "semantic_vad":
            silence_ms = _SEMANTIC_SILENCE_MS.get(td.get("eagerness", "auto"), 500)
        else:
            silence_ms = int(td.get("silence_duration_ms", 500))
        self._skip_quiet_frames(prefix_ms, silence_ms)
        while self._vad_pos + FRAME_BYTES <= self._in_total:
            at = self._vad_pos - self._in_buf_start
            is_speech = rms_ulaw(bytes(self._in_buf[at : at + FRAME_BYTES])) >= self.config.vad_rms_threshold
            self._vad_pos += FRAME_BYTES
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
            else:
                self._silence_run_ms = 0 if is_speech else self._silence_run_ms + FRAME_MS
                if self._silence_run_ms >= silence_ms:
                    self._stop_speech(end_ms, td, now_ms)

    def _skip_quiet_frames(self, prefix_ms: int, silence_ms: int) -> None:
        """What the frame loop of _run_vad would do with the waiting whole frames, in one step, when no
        sample among them reaches the threshold (so no frame's RMS can) and the silence they add ends no
        turn: most of a caller's appends are quiet, and the loop costs a Python round per frame."""
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

    def _start_speech(self, start_ms: int, prefix_ms: int, td: dict[str, Any], now_ms: int) -> None:
        audio_start_ms = max(self._in_buf_start // BYTES_PER_MS, start_ms - prefix_ms)
        item_id = "item_" + self._ids.token()
        self._speaking = True
        self._silence_run_ms = 0
        self._speech_start_bytes = audio_start_ms * BYTES_PER_MS
        self._speech = SpeechRecord(item_id=item_id, audio_start_ms=audio_start_ms, started_at_ms=now_ms)
        self.record.speech.append(self._speech)
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
            self._start_response(now_ms, {})

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
        self._items[item_id] = _Item(item_id, "user", rendered)
        self._emit_item_events(rendered, previous, ("added", "done"))
        transcript, clip_name = self._recognise(audio)
        if speech is not None:
            speech.transcript, speech.caller_clip = transcript, clip_name
        if self._cfg.transcription is not None:
            # transcription runs asynchronously: it may land before or after the response events (C.3)
            self._timer_seq += 1
            seconds = round(len(audio) / (BYTES_PER_MS * 1000), 3)
            self._timers.append(
                (now_ms + self.config.transcription_delay_ms, self._timer_seq, item_id, transcript, seconds)
            )
            self._timers.sort()

    def _recognise(self, audio: bytes) -> tuple[str, str | None]:
        """The caller clip this audio is: by content (a carrier simulator plays clips byte for byte),
        else by speech length, else 'hello'."""
        threshold = self.config.vad_rms_threshold
        for clip in self._caller_clips:
            probe, _ = _caller_signature(self._clips.audio[clip.name], threshold)
            if probe and probe in audio:
                return clip.text, clip.name
        span_ms = speech_span_ms(audio, threshold)
        best: tuple[int, ClipInfo] | None = None
        for clip in self._caller_clips:
            _, clip_span_ms = _caller_signature(self._clips.audio[clip.name], threshold)
            distance = abs(clip_span_ms - span_ms)
            if distance <= 150 and (best is None or distance < best[0]):
                best = (distance, clip)
        if best is not None:
            return best[1].text, best[1].name
        return "hello", None

    # ---- responses -----------------------------------------------------------------------------

    def _choose_clip(self, options: dict[str, Any], index: int) -> ClipInfo:
        metadata = options.get("metadata")
        if isinstance(metadata, dict) and "sim_clip" in metadata:
            name = metadata["sim_clip"]
            for clip in self._agent_clips:
                if clip.name == name:
                    return clip
            raise _invalid("response.metadata.sim_clip", f"no agent clip named {name!r}")
        if self.config.clip_sequence:
            name = self.config.clip_sequence[index % len(self.config.clip_sequence)]
            return self._clips.info(name)
        instructions = options.get("instructions")
        if isinstance(instructions, str):
            # a scripted prompt ("Say exactly: ...") gets the clip that speaks it, longest match first
            wanted = _normalise(instructions)
            for clip in sorted(self._agent_clips, key=lambda c: -len(c.text)):
                if _normalise(clip.text) in wanted:
                    return clip
        clip = self._auto_clips[self._auto_clip_cursor % len(self._auto_clips)]
        self._auto_clip_cursor += 1
        return clip

    def _start_response(self, now_ms: int, options: dict[str, Any], overlaps: _Response | None = None) -> None:
        """``overlaps``: start this response while that one is still in progress (the overlap injection;
        a client's response.create during a response is refused, as the real server does)."""
        if self._active and overlaps is None:
            active_id = self._active[-1].record.response_id
            raise _Reject(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {active_id}. "
                "Wait until the response is finished before creating a new one.",
            )
        if self._cfg.output_format != "pcmu":
            raise _Reject(
                "invalid_value",
                "The voicecore model simulator produces only 8 kHz mu-law: set the output format to "
                + ("audio/pcmu" if self.naming == "ga" else "g711_ulaw")
                + " with session.update first.",
                "session.audio.output.format" if self.naming == "ga" else "session.output_audio_format",
            )
        metadata = options.get("metadata")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            raise _invalid("response.metadata", "expected an object of strings")
        index = self._response_count
        clip = self._choose_clip(options, index)
        self._response_count += 1
        cfg = self.config
        rng = _Rng(self._seed, self._session_index, "response", index)
        failed = self._fail_next or index in cfg.fail_responses or rng.uniform() < cfg.error_rate
        if overlaps is not None:
            failed = False  # the failure switches aim at requested responses; an overlap always speaks
        else:
            self._fail_next = False
        hallucinated = cfg.hallucinate or index in cfg.hallucinate_responses
        text = cfg.hallucinated_text if hallucinated else (scripted_text(options.get("instructions")) or clip.text)
        audio = b"" if failed else dither_ulaw(self._clips.audio[clip.name], rng.u64())
        sizes = split_delta_sizes(len(audio), rng, cfg.delta_min_bytes, cfg.delta_max_bytes) if audio else []
        response_id = "resp_" + self._ids.token()
        item_id = "" if failed else "item_" + self._ids.token()
        instructions = options.get("instructions")
        record = ResponseRecord(
            index=index,
            response_id=response_id,
            item_id=item_id,
            clip_name=clip.name,
            text=text,
            audio=audio,
            delta_bytes=sizes,
            created_ms=now_ms,
            instructions=instructions if isinstance(instructions, str) else None,
            metadata=metadata,
            hallucinated=hallucinated,
            failed=failed,
            overlaps=None if overlaps is None else overlaps.record.response_id,
        )
        self.record.responses.append(record)
        words = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))] if text else []
        response = _Response(record=record, words=words, plan=[], usage_input_tokens=120 + 40 * index)
        self._active.append(response)
        self._emit({"type": "response.created", "response": self._render_response(response, "in_progress", None, [])})
        if failed:
            response.plan = [(now_ms + cfg.first_delta_latency_ms, 0, "fail", 0)]
            return
        response.plan = self._plan(response, now_ms, index)
        response.offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        if overlaps is None and cfg.overlap_probability > 0.0:
            draw = _Rng(self._seed, self._session_index, "overlap", index)
            if draw.uniform() < cfg.overlap_probability:
                low, high = cfg.overlap_delay_ms
                self._overlap_seq += 1
                self._overlap_starts.append((now_ms + low + draw.below(high - low + 1), self._overlap_seq, response))
                self._overlap_starts.sort(key=lambda entry: entry[:2])
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
                "part": {"type": "audio", "transcript": ""},
            }
        )

    def _plan(self, response: _Response, now_ms: int, index: int) -> list[tuple[int, int, str, int]]:
        """When each audio delta and transcript word goes out: audio as fast as it is 'generated'
        (speed_factor x real time), words spread over the audio (D.1: two interleaved streams)."""
        cfg = self.config
        sizes = response.record.delta_bytes
        start_ms = now_ms + cfg.first_delta_latency_ms
        plan: list[tuple[int, int, str, int]] = []
        ends: list[int] = []
        cum = 0
        for i, size in enumerate(sizes):
            cum += size
            due = start_ms + math.ceil(cum / BYTES_PER_MS / cfg.speed_factor)
            ends.append(cum)
            plan.append((due, 1, "audio", i))
        total = cum
        last_due = plan[-1][0] if plan else start_ms
        words = response.words
        late_from = len(words) // 2 if cfg.transcript_after_audio_done else len(words)
        for j in range(len(words)):
            if j >= late_from:
                plan.append((last_due, 3, "text", j))  # after audio.done, before the done cascade
                continue
            position = total * j // max(1, len(words))
            k = next((i for i, end in enumerate(ends) if end > position), len(ends) - 1)
            plan.append((plan[k][0], 0, "text", j))  # a word goes just before the audio it covers
        plan.append((last_due, 2, "audio_done", 0))
        plan.append((last_due, 4, "finish", 0))
        plan.sort()
        stall_applies = cfg.stall_after_ms is not None and (not cfg.stall_responses or index in cfg.stall_responses)
        if stall_applies and cfg.stall_after_ms is not None:
            first_due = plan[0][0]
            cut = first_due + cfg.stall_after_ms
            if any(entry[0] > cut for entry in plan):
                response.record.stalled = True
                plan = [(d + cfg.stall_ms, o, k, i) if d > cut else (d, o, k, i) for d, o, k, i in plan]
        return plan

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
        except _Reject:
            pass  # e.g. the client switched the output format away from pcmu meanwhile: no overlap

    def _step_response(self, response: _Response, now_ms: int) -> None:
        _, _, kind, index = response.plan[response.cursor]
        response.cursor += 1
        if kind == "audio":
            self._send_audio(response, index, now_ms, late=False)
        elif kind == "text":
            self._send_word(response, index)
        elif kind == "audio_done":
            # real logs show rate_limits.updated late in the response, before the done cascade (C.3)
            limits = [] if self.config.rate_limits_empty else _RATE_LIMITS
            self._emit({"type": "rate_limits.updated", "rate_limits": limits})
            self._send_audio_done(response)
        elif kind == "finish":
            self._finish(response, now_ms, "completed", None)
        elif kind == "fail":
            self._finish(response, now_ms, "failed", None)

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
            "type": self._names["transcript_delta"],
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

    def _finish(self, response: _Response, now_ms: int, status: str, reason: str | None) -> None:
        """The done cascade (D.1): audio.done, transcript.done, content_part.done, output_item.done,
        conversation.item.done (GA), response.done. Also sent, with partial content, on cancel."""
        record = response.record
        cfg = self.config
        output: list[dict[str, Any]] = []
        if not record.failed:
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
                self._emit(
                    {"type": "conversation.item.done", "item": item, "previous_item_id": response.previous_item_id}
                )
            output = [item]
        details: dict[str, Any] | None
        if status == "cancelled":
            details = {"type": "cancelled", "reason": reason}
        elif status == "failed":
            details = dict(_FAILED_DETAILS)
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

    def _error(self, reject: _Reject, event_id: str | None, event_type: str | None, now_ms: int) -> None:
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
            raise _missing("item_id")
        item = self._items.get(item_id)
        if item is None:
            raise _invalid("item_id", f"Item with item_id '{item_id}' not found.")
        return item

    def _render_assistant_item(
        self, response: _Response, status: str, include_content: bool, transcript: str | None = None
    ) -> dict[str, Any]:
        content = [{"type": self._names["assistant_content"], "transcript": transcript}] if include_content else []
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
            body["output_modalities"] = ["audio"]
            body["max_output_tokens"] = self._cfg.max_output_tokens
            body["audio"] = {"output": {"format": {"type": "audio/pcmu"}, "voice": self._cfg.voice}}
        else:
            body["modalities"] = ["text", "audio"]
            body["max_output_tokens"] = self._cfg.max_output_tokens
            body["voice"] = self._cfg.voice
            body["output_audio_format"] = "g711_ulaw"
            body["temperature"] = 0.8
        return body

    def _render_session(self) -> dict[str, Any]:
        cfg = self._cfg
        td = None if cfg.turn_detection is None else dict(cfg.turn_detection)
        if self.naming == "ga":
            if td is not None and td["type"] == "server_vad":
                td.setdefault("idle_timeout_ms", None)

            def fmt(name: str) -> dict[str, Any]:
                return {"type": "audio/pcm", "rate": 24000} if name == "pcm" else {"type": f"audio/{name}"}

            return {
                "type": "realtime",
                "object": "realtime.session",
                "id": self._session_id,
                "model": self._model,
                "output_modalities": ["audio"],
                "instructions": cfg.instructions,
                "tools": list(cfg.tools),
                "tool_choice": cfg.tool_choice,
                "max_output_tokens": cfg.max_output_tokens,
                "tracing": None,
                "truncation": "auto",
                "prompt": None,
                "expires_at": 0,
                "audio": {
                    "input": {
                        "format": fmt(cfg.input_format),
                        "transcription": cfg.transcription,
                        "noise_reduction": cfg.noise_reduction,
                        "turn_detection": td,
                    },
                    "output": {"format": fmt(cfg.output_format), "voice": cfg.voice, "speed": cfg.speed},
                },
                "include": None,
            }
        return {
            "id": self._session_id,
            "object": "realtime.session",
            "model": self._model,
            "expires_at": 0,
            "modalities": ["text", "audio"],
            "instructions": cfg.instructions,
            "voice": cfg.voice,
            "speed": cfg.speed,
            "input_audio_format": _BETA_FORMAT_NAMES[cfg.input_format],
            "output_audio_format": _BETA_FORMAT_NAMES[cfg.output_format],
            "input_audio_transcription": cfg.transcription,
            "input_audio_noise_reduction": cfg.noise_reduction,
            "turn_detection": td,
            "tools": list(cfg.tools),
            "tool_choice": cfg.tool_choice,
            "temperature": 0.8,
            "max_response_output_tokens": cfg.max_output_tokens,
            "tracing": None,
        }

    def _emit_transcription(self, item_id: str, transcript: str, seconds: float) -> None:
        self._emit(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": item_id,
                "content_index": 0,
                "transcript": transcript,
                "usage": {"type": "duration", "seconds": seconds},
            }
        )
