"""The simulator's mu-law audio work on the packaged clips: levels, dither, and recognising clips.

Owns the pure functions on 8 kHz mu-law bytes the session needs: RMS and peak (its energy VAD), the
speech span of a clip and the signature by which a caller clip is recognised in appended audio, the
frame-identity dither of a response's audio, and which agent clip speaks a scripted prompt. Knows nothing
of events or sessions.

Frame identity: each response's audio is its clip plus a tiny deterministic dither, seeded per
response, so that no two 160-byte frames (cut from the response start) of different responses are
equal and a harness can tell which response and which frame index reached the carrier by content
alone (`SessionRecord.frame_owners`). A +/-1 LSB change on 16-bit linear would not survive mu-law
re-encoding (its smallest step is 8 LSB), so the dither works on mu-law codes: each sample in the two
quietest mu-law segments (|x| < 380 of 32768, steps of 8 and 16 LSB, about -72 and -66 dBFS) moves
by -1, 0 or +1 code; a frame with fewer than 32 such samples also dithers its 32 quietest samples.
Moving down from code 0 flips the sign of zero, which changes the byte and not the sound. An A-law
session's responses are dithered the same way on A-law codes (`dither_alaw`: the same samples, A-law's
quietest steps being 16 and 16 LSB, so a little louder). On the packaged clips the added noise is about -68 dBFS RMS (some 48 dB under the speech, below the codec's
own quantisation noise); the length of the audio is unchanged. The dither draws from numpy's PCG64 bit
stream, stable across versions.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from collections.abc import Sequence

import numpy as np

from voicecore.g711 import ULAW_TO_ALAW as _ULAW_TO_ALAW
from voicecore.sim.audio_clips import ClipInfo
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES


try:  # deprecated in 3.11/3.12, gone in 3.13 unless audioop-lts is installed (docs/explanation/protocols.md#d3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop as _audioop
except ImportError:  # pragma: no cover - exercised through rms_ulaw_numpy in the tests
    _audioop = None


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


def dither_alaw(audio: bytes, seed: int) -> bytes:
    """mu-law ``audio`` in A-law, with dither_ulaw's dither done on A-law codes instead: the same samples
    (chosen on the mu-law clip) move by the same -1/0/+1 code steps of A-law's magnitude. Dithering in
    mu-law first would not survive the move to A-law, whose quietest steps are twice mu-law's (16 LSB):
    most of two responses' quiet frames would come out equal, and a frame's owner unknowable (an A-law
    session's frame identity, module docstring)."""
    n = len(audio)
    if n == 0:
        return b""
    frames, _magnitude, _sign, chosen = _dither_plan(audio)
    count = frames * FRAME_BYTES
    padded = np.full(count, 0xFF, dtype=np.uint8)
    padded[:n] = np.frombuffer(audio, dtype=np.uint8)
    # A-law codes are sign (0x80 set: positive) + 7 magnitude bits, with the even bits inverted (0x55).
    even_inverted = (np.frombuffer(padded.tobytes().translate(_ULAW_TO_ALAW), dtype=np.uint8) ^ 0x55).reshape(
        frames, FRAME_BYTES)
    magnitude = (even_inverted & 0x7F).astype(np.int16)
    sign = even_inverted & 0x80
    draws = np.random.PCG64(seed).random_raw(-(-count // 8)).astype("<u8", copy=False)
    raw = draws.view(np.uint8)[:count].reshape(frames, FRAME_BYTES)
    moved = magnitude + np.where(chosen, _DITHER_STEP[raw], 0)
    sign = np.where(moved < 0, sign ^ 0x80, sign).astype(np.uint8)
    moved = np.clip(moved, 0, 127).astype(np.uint8)
    return ((sign | moved) ^ 0x55).astype(np.uint8).reshape(-1)[:n].tobytes()


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


@functools.lru_cache(maxsize=512)  # every packaged caller clip and a test run's synthesized phrases
def caller_signature(audio: bytes, threshold: int) -> tuple[bytes, int]:
    """(the loudest 40 ms of a caller clip, its speech span): what recognition looks for."""
    best_at, best_rms = 0, -1
    for i in range(0, max(1, len(audio) - 2 * FRAME_BYTES + 1), FRAME_BYTES):
        rms = rms_ulaw(audio[i : i + 2 * FRAME_BYTES])
        if rms > best_rms:
            best_at, best_rms = i, rms
    return audio[best_at : best_at + 2 * FRAME_BYTES], speech_span_ms(audio, threshold)


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


# The runtime puts a scripted line after the session's instructions (a response's instructions replace the
# session's, so they carry them): the line is what follows the last "Say exactly:", to the end (on the Gemini
# path after a note in the same sentence: "Nothing is done yet. Ask the caller ... Say exactly: ...").
_SAY_EXACTLY = re.compile(r'Say exactly:\s*"?([^\n]*?)"?\s*$', re.IGNORECASE)


def scripted_text(instructions: object) -> str | None:
    """The text of a scripted prompt ("Say exactly: ..."), which the model then says (its transcript;
    the audio is the nearest clip); None for other instructions."""
    if not isinstance(instructions, str):
        return None
    match = _SAY_EXACTLY.search(instructions)
    return match.group(1).strip() or None if match else None


def clip_speaking(instructions: str, clips: Sequence[ClipInfo]) -> ClipInfo | None:
    """The clip whose text a scripted prompt ("Say exactly: ...") contains, longest text first; None if
    no clip's text is in the instructions."""
    wanted = _normalise(instructions)
    for clip in sorted(clips, key=lambda c: -len(c.text)):
        if _normalise(clip.text) in wanted:
            return clip
    return None


SPOKEN_CHARS_PER_S = 15.0  # a phone voice says about this many characters a second (150 words a minute)


def fitting_clip(text: str, clips: Sequence[ClipInfo]) -> ClipInfo:
    """The clip whose duration is nearest to how long ``text`` takes to say (ties: the first listed)."""
    want_ms = 1000.0 * len(text) / SPOKEN_CHARS_PER_S
    return min(clips, key=lambda clip: abs(clip.duration_ms - want_ms))
