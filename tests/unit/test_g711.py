"""voicecore.g711 against the ITU-T G.191 mu-law vectors, plus the WAV helpers.

The G.191 vectors (openitu/STL, src/g711/test_data/: sweep.src, sweep-r.u, sweep-r.u-u) may not be copied into
the repository (their licence forbids it), so the test computes them: every int16 once, its code by the G.191
reference encoder and that code decoded by the G.191 reference decoder, both written out below from G.711's
segment arithmetic. Each computed vector must have the CRC32 of its ITU file, so what the tests compare
voicecore.g711 against is the ITU data byte for byte, and nothing is skipped.
"""

import wave
import zlib
from pathlib import Path

import numpy as np
import pytest

from voicecore.g711 import frame_rms, linear_to_ulaw, read_wav_as_ulaw, ulaw_to_linear, write_stereo_wav

# CRC32 of each ITU file (little-endian int16, 65,536 samples; a code in the low byte of its word).
G191_CRC32 = {"sweep.src": 0xC8BA7682, "sweep-r.u": 0xCD170E15, "sweep-r.u-u": 0x63641C01}
BIAS = 33  # G.711 mu-law's bias, in units of the 14-bit magnitude
CLIP = 0x1FFF  # the largest biased magnitude


def g191_encode(linear: np.ndarray) -> np.ndarray:
    """The G.191 reference encoder: a negative input is one's-complemented (not negated) before its 2 low bits
    are dropped; the biased 14-bit magnitude's segment is 1 + the bit length of magnitude >> 6, its mantissa the
    4 bits below the segment's leading one; the code is their complement, bit 7 set for a non-negative input."""
    x = linear.astype(np.int32)
    magnitude = np.minimum((np.where(x < 0, ~x, x) >> 2) + BIAS, CLIP)
    segment = 1 + sum(((magnitude >> (6 + bit)) > 0).astype(np.int32) for bit in range(7))
    mantissa = (magnitude >> segment) & 0xF
    code = 0x7F - (((segment - 1) << 4) | mantissa)
    return np.where(x >= 0, code | 0x80, code).astype(np.int16)


def g191_decode(codes: np.ndarray) -> np.ndarray:
    """The G.191 reference decoder: the complemented code's exponent and mantissa give the middle of its
    quantization interval, ((2 * mantissa + 33) << (exponent + 2)) - 132, negative when bit 7 is clear."""
    inverted = ~codes.astype(np.int32)
    exponent = (inverted >> 4) & 0x7
    mantissa = inverted & 0xF
    magnitude = ((2 * mantissa + BIAS) << (exponent + 2)) - 4 * BIAS
    return np.where(codes < 0x80, -magnitude, magnitude).astype(np.int16)


def _as_itu_file(name: str, values: np.ndarray) -> np.ndarray:
    raw = values.astype("<i2").tobytes()
    assert zlib.crc32(raw) == G191_CRC32[name], f"the computed {name} is not the ITU file"
    assert values.size == 65536
    return values


@pytest.fixture(scope="module")
def g191():
    source = _as_itu_file("sweep.src", np.arange(-32768, 32768, dtype=np.int16))
    coded = _as_itu_file("sweep-r.u", g191_encode(source))
    decoded = _as_itu_file("sweep-r.u-u", g191_decode(coded))
    # The ITU file keeps the mu-law code in the low byte of each int16 word.
    assert (coded >> 8 == 0).all()
    codes = (coded & 0xFF).astype(np.uint8)
    return source, codes, decoded


def test_the_computed_vectors_are_the_itu_files(g191):
    source, codes, decoded = g191
    assert zlib.crc32(source.astype("<i2").tobytes()) == G191_CRC32["sweep.src"]
    assert zlib.crc32(codes.astype("<i2").tobytes()) == G191_CRC32["sweep-r.u"]
    assert zlib.crc32(decoded.astype("<i2").tobytes()) == G191_CRC32["sweep-r.u-u"]


def test_decode_matches_g191_bit_for_bit(g191):
    _, codes, decoded = g191
    assert np.array_equal(ulaw_to_linear(codes.tobytes()), decoded)


def test_encode_non_negative_inputs_match_g191_exactly(g191):
    source, codes, _ = g191
    ours = np.frombuffer(linear_to_ulaw(source), dtype=np.uint8)
    non_negative = source >= 0
    assert np.array_equal(ours[non_negative], codes[non_negative])


def test_encode_negative_inputs_follow_audioop_rounding(g191):
    # By design, not a bug: G.191 one's-complements a negative input before dropping the 2 low bits
    # (magnitude (-x-1) >> 2), audioop negates after the shift (magnitude -(x >> 2)), which is exactly
    # one 14-bit step more. So our code for x equals the G.191 code for x - 4 on every negative input
    # the table covers, and the two encoders disagree on 508 inputs by one code step.
    source, codes, _ = g191
    ours = np.frombuffer(linear_to_ulaw(source), dtype=np.uint8)
    index_of = source.astype(np.int64) + 32768
    negative = index_of[(source < 0) & (source >= -32764)]
    assert np.array_equal(ours[negative], codes[negative - 4])
    # The four most negative inputs are clipped to the top code by both encoders.
    assert np.array_equal(ours[:4], codes[:4])
    differs = ours != codes
    assert int(differs.sum()) == 508
    assert (source[differs] < 0).all()
    assert (np.abs(ours[differs].astype(int) - codes[differs].astype(int)) == 1).all()


def test_reencoding_the_g191_decode_reproduces_the_codes(g191):
    # Decoded values sit inside their quantization interval, so re-encoding returns the same code,
    # except code 0x7F ("negative zero", decodes to 0), which comes back as 0xFF (positive zero).
    _, codes, decoded = g191
    ours = np.frombuffer(linear_to_ulaw(decoded), dtype=np.uint8)
    negative_zero = codes == 0x7F
    assert np.array_equal(ours[~negative_zero], codes[~negative_zero])
    assert (ours[negative_zero] == 0xFF).all()


def test_every_code_round_trips_except_negative_zero():
    codes = bytes(range(256))
    again = linear_to_ulaw(ulaw_to_linear(codes))
    expected = bytearray(codes)
    expected[0x7F] = 0xFF
    assert again == bytes(expected)
    assert ulaw_to_linear(b"\xff\x7f").tolist() == [0, 0]


def test_decode_returns_writable_int16():
    samples = ulaw_to_linear(b"\x00\x80")
    assert samples.dtype == np.int16
    samples[0] = 1  # must not raise
    assert ulaw_to_linear(b"").size == 0


def test_encode_accepts_bytes_and_other_dtypes():
    values = np.array([-32768, -1000, 0, 1000, 32767], dtype=np.int16)
    expected = linear_to_ulaw(values)
    assert linear_to_ulaw(values.tobytes()) == expected
    assert linear_to_ulaw(values.astype(np.int32)) == expected
    assert linear_to_ulaw(values.astype(np.float64)) == expected
    assert linear_to_ulaw([100000, -100000]) == linear_to_ulaw(np.array([32767, -32768], dtype=np.int16))


def _write_wav(path: Path, frames: np.ndarray, rate_hz: int, width_bytes: int = 2) -> None:
    channels = 1 if frames.ndim == 1 else frames.shape[1]
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width_bytes)
        writer.setframerate(rate_hz)
        writer.writeframes(frames.astype(f"<i{width_bytes}" if width_bytes > 1 else np.uint8).tobytes())


def _tone(rate_hz: int, seconds: float, amplitude: int = 8000) -> np.ndarray:
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    return np.rint(amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def test_read_wav_8k_mono_is_plain_encoding(tmp_path):
    tone = _tone(8000, 0.1)
    _write_wav(tmp_path / "a.wav", tone, 8000)
    assert read_wav_as_ulaw(tmp_path / "a.wav") == linear_to_ulaw(tone)


def test_read_wav_stereo_is_mixed_to_mono(tmp_path):
    tone = _tone(8000, 0.05)
    stereo = np.stack([tone, np.zeros_like(tone)], axis=1)
    _write_wav(tmp_path / "s.wav", stereo, 8000)
    mixed = ulaw_to_linear(read_wav_as_ulaw(tmp_path / "s.wav"))
    assert mixed.size == tone.size
    # Half the tone, within one mu-law quantization step of its magnitude.
    half = tone.astype(np.int32) // 2
    assert np.all(np.abs(mixed.astype(np.int32) - half) <= np.maximum(64, np.abs(half) // 8))


def test_read_wav_resamples_to_8k(tmp_path):
    _write_wav(tmp_path / "w.wav", _tone(16000, 0.5), 16000)
    ulaw = read_wav_as_ulaw(tmp_path / "w.wav")
    assert abs(len(ulaw) - 4000) <= 2
    peak = np.abs(ulaw_to_linear(ulaw)[400:]).max()
    assert 6000 < peak < 10000


def test_read_wav_8_bit_unsigned(tmp_path):
    unsigned = np.array([128, 255, 0, 128], dtype=np.uint8)
    _write_wav(tmp_path / "b.wav", unsigned, 8000, width_bytes=1)
    decoded = ulaw_to_linear(read_wav_as_ulaw(tmp_path / "b.wav"))
    assert decoded[0] == 0 and decoded[3] == 0
    assert decoded[1] > 30000 and decoded[2] < -30000


def test_write_stereo_wav_pads_the_shorter_track(tmp_path):
    left = linear_to_ulaw(_tone(8000, 0.02))  # 160 bytes
    right = linear_to_ulaw(_tone(8000, 0.01, amplitude=2000))  # 80 bytes
    path = tmp_path / "rec.wav"
    write_stereo_wav(path, left, right)
    with wave.open(str(path), "rb") as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (2, 2, 8000)
        assert reader.getnframes() == 160
        frames = np.frombuffer(reader.readframes(160), dtype="<i2").reshape(-1, 2)
    assert np.array_equal(frames[:, 0], ulaw_to_linear(left))
    assert np.array_equal(frames[:80, 1], ulaw_to_linear(right))
    assert (frames[80:, 1] == 0).all()


def test_frame_rms_is_each_frames_root_mean_square_rounded_down():
    rng = np.random.default_rng(7)
    quiet = linear_to_ulaw(rng.normal(0, 30, 160))
    loud = linear_to_ulaw(rng.normal(0, 3000, 160))
    codes = bytes(rng.integers(0, 256, 160, dtype=np.uint8))  # every kind of code, both signs
    ulaw = quiet + loud + codes + bytes([0xFF] * 160)  # 0xFF: linear 0
    expected = [int(np.sqrt(np.mean(ulaw_to_linear(ulaw[n:n + 160]).astype(np.float64) ** 2)))
                for n in range(0, len(ulaw), 160)]
    assert frame_rms(ulaw) == expected
    assert expected[0] < 200 <= expected[1] and expected[3] == 0
