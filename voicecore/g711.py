"""G.711 mu-law codec and the two WAV helpers the simulators and recordings need.

Owns: mu-law <-> 16-bit linear conversion (8 kHz, one byte per sample, docs/explanation/protocols.md#d3), the
mu-law <-> A-law tables an A-law call's copies and recordings go through (``ULAW_TO_ALAW``,
``ALAW_TO_ULAW``: audioop's decode of one law, encoded in the other) and reading/writing WAV files around
it. It must not know about calls, frames or the wire: a payload is just
bytes here.

The arithmetic is `audioop` (C, ~0.2 us per 20 ms frame to decode): the stdlib module on Python < 3.13, the
`audioop-lts` backport (same import name) on 3.13+ (docs/explanation/protocols.md#d3). Decoding matches the
ITU-T G.191 reference bit for bit. Encoding is CPython's: for a negative input it quantizes a 14-bit magnitude
one step larger than the G.191 reference encoder does (G.191 one's-complements negative inputs), so 508 of the
65,536 inputs get the neighbouring code; tests/unit/test_g711.py pins that relation exactly.
"""

import io
import sys
import warnings
import wave
from pathlib import Path

import numpy as np

from voicecore.timing import FRAME_BYTES, SAMPLE_RATE_HZ

with warnings.catch_warnings():
    # Python 3.11/3.12 warn that audioop goes away in 3.13; on 3.13+ `audioop-lts` provides it.
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

SAMPLE_WIDTH_BYTES = 2
ULAW_SILENCE = 0xFF  # the mu-law code of linear 0
ALAW_SILENCE = 0xD5  # A-law's silence: lin2alaw(0), which decodes to +8 (A-law has no code for 0; 0x55 is -8)

# Audio formats as the model side names them (OpenAI GA audio/pcmu, audio/pcma:
# docs/explanation/protocols.md#c1); the same strings as voicecore/carriers/events.py's ENCODING_PCMU /
# ENCODING_PCMA.
PCMU = "pcmu"
PCMA = "pcma"

# audioop works in the machine's byte order; WAV files are little-endian.
_NEEDS_SWAP = sys.byteorder != "little"


_ALL_CODES = bytes(range(256))
# One bytes.translate each way: exactly audioop's decode of one law encoded in the other, per byte.
ALAW_TO_ULAW = audioop.lin2ulaw(audioop.alaw2lin(_ALL_CODES, SAMPLE_WIDTH_BYTES), SAMPLE_WIDTH_BYTES)
ULAW_TO_ALAW = audioop.lin2alaw(audioop.ulaw2lin(_ALL_CODES, SAMPLE_WIDTH_BYTES), SAMPLE_WIDTH_BYTES)


def silence_byte(audio_format: str) -> int:
    """The silence code of ``audio_format`` (``PCMU`` or ``PCMA``): what linear 0 encodes to."""
    if audio_format == PCMU:
        return ULAW_SILENCE
    if audio_format == PCMA:
        return ALAW_SILENCE
    raise ValueError(f"not a G.711 format: {audio_format!r}")


def to_ulaw(audio: bytes, audio_format: str) -> bytes:
    """``audio`` in ``audio_format`` as mu-law (``audio`` itself for PCMU): what recordings and scoring read."""
    if audio_format == PCMU:
        return audio
    if audio_format == PCMA:
        return bytes(audio).translate(ALAW_TO_ULAW)
    raise ValueError(f"not a G.711 format: {audio_format!r}")


def from_ulaw(ulaw: bytes, audio_format: str) -> bytes:
    """mu-law ``ulaw`` in ``audio_format`` (``ulaw`` itself for PCMU)."""
    if audio_format == PCMU:
        return ulaw
    if audio_format == PCMA:
        return bytes(ulaw).translate(ULAW_TO_ALAW)
    raise ValueError(f"not a G.711 format: {audio_format!r}")


def ulaw_to_linear(data: bytes) -> np.ndarray:
    """Decode mu-law bytes to a writable int16 array (one sample per byte)."""
    return np.frombuffer(bytearray(audioop.ulaw2lin(data, SAMPLE_WIDTH_BYTES)), dtype=np.int16)


def frame_rms(ulaw: bytes) -> list[int]:
    """The RMS (16-bit linear, rounded down to a whole number) of each 20 ms frame of mu-law ``ulaw``, whose
    length is a whole number of frames."""
    linear = memoryview(audioop.ulaw2lin(ulaw, SAMPLE_WIDTH_BYTES))
    step = FRAME_BYTES * SAMPLE_WIDTH_BYTES
    rms = audioop.rms
    return [rms(linear[start:start + step], SAMPLE_WIDTH_BYTES) for start in range(0, len(linear), step)]


def linear_to_ulaw(samples) -> bytes:
    """Encode 16-bit linear samples to mu-law bytes.

    ``samples`` is an int16 array (other numeric arrays are clipped to the int16 range and cast) or
    bytes-like raw int16 in the machine's byte order.
    """
    if isinstance(samples, (bytes, bytearray, memoryview)):
        return audioop.lin2ulaw(bytes(samples), SAMPLE_WIDTH_BYTES)
    array = np.asarray(samples)
    if array.dtype != np.int16:
        array = np.clip(np.rint(array) if array.dtype.kind == "f" else array, -32768, 32767).astype(np.int16)
    return audioop.lin2ulaw(np.ascontiguousarray(array).tobytes(), SAMPLE_WIDTH_BYTES)


def read_wav_as_ulaw(path: str | Path) -> bytes:
    """Read a PCM WAV file and return 8 kHz mono mu-law bytes.

    Any sample width `wave` reads (8-bit unsigned, 16/24/32-bit signed), any channel count (mixed to mono by
    averaging) and any rate (resampled with audioop.ratecv) are accepted. Non-PCM WAVs make `wave` raise
    `wave.Error`.
    """
    with wave.open(str(path), "rb") as reader:
        channels = reader.getnchannels()
        width_bytes = reader.getsampwidth()
        rate_hz = reader.getframerate()
        raw = reader.readframes(reader.getnframes())
    if _NEEDS_SWAP and width_bytes > 1:
        raw = audioop.byteswap(raw, width_bytes)
    if width_bytes == 1:
        # 8-bit WAV is unsigned; audioop's 8-bit format is signed.
        raw = audioop.bias(raw, 1, -128)
    if width_bytes != SAMPLE_WIDTH_BYTES:
        raw = audioop.lin2lin(raw, width_bytes, SAMPLE_WIDTH_BYTES)
    if channels == 2:
        raw = audioop.tomono(raw, SAMPLE_WIDTH_BYTES, 0.5, 0.5)
    elif channels > 2:
        frames = np.frombuffer(raw, dtype=np.int16).reshape(-1, channels)
        raw = np.rint(frames.mean(axis=1)).astype(np.int16).tobytes()
    if rate_hz != SAMPLE_RATE_HZ:
        raw, _state = audioop.ratecv(raw, SAMPLE_WIDTH_BYTES, 1, rate_hz, SAMPLE_RATE_HZ, None)
    return audioop.lin2ulaw(raw, SAMPLE_WIDTH_BYTES)


def write_stereo_wav(path: str | Path, left_ulaw: bytes, right_ulaw: bytes) -> None:
    """Write two mu-law tracks as one 8 kHz 16-bit stereo WAV; the shorter track is padded with silence.

    Recordings put the caller on the left and the agent on the right (docs/explanation/architecture.md#section-9).
    """
    Path(path).write_bytes(stereo_wav_bytes(left_ulaw, right_ulaw))


def stereo_wav_bytes(left_ulaw: bytes, right_ulaw: bytes) -> bytes:
    """``write_stereo_wav``'s file, in memory (the console serves it)."""
    left = ulaw_to_linear(left_ulaw)
    right = ulaw_to_linear(right_ulaw)
    frames = np.zeros((max(left.size, right.size), 2), dtype=np.int16)
    frames[: left.size, 0] = left
    frames[: right.size, 1] = right
    data = frames.astype("<i2", copy=False).tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(2)
        writer.setsampwidth(SAMPLE_WIDTH_BYTES)
        writer.setframerate(SAMPLE_RATE_HZ)
        writer.writeframes(data)
    return out.getvalue()
