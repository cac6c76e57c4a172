"""voicecore.g711 against the ITU-T G.191 mu-law vectors, plus the WAV helpers.

The vectors live outside the repository (their licence forbids copying them in):
../shared/testdata/g711 from the repo root; see its README.md. When the folder is absent those tests
skip, except under CI (CI=true), which checks shared/ out beside the clone: there they fail and say where
they looked.
"""

import wave
import zlib
from pathlib import Path

import numpy as np
import pytest

from external import in_ci, missing_resource
from voicecore.g711 import linear_to_ulaw, read_wav_as_ulaw, ulaw_to_linear, write_stereo_wav

G191_DIR = Path(__file__).resolve().parents[3] / "shared" / "testdata" / "g711"

# CRC32 of each file, from the vectors' README.md: a changed file must fail loudly, not pass by accident.
G191_CRC32 = {"sweep.src": 0xC8BA7682, "sweep-r.u": 0xCD170E15, "sweep-r.u-u": 0x63641C01}


def _load(name: str) -> np.ndarray:
    raw = (G191_DIR / name).read_bytes()
    assert zlib.crc32(raw) == G191_CRC32[name], name
    # The vectors' README.md: little-endian int16, 65,536 samples per file.
    values = np.frombuffer(raw, dtype="<i2").astype(np.int16)
    assert values.size == 65536
    return values


@pytest.fixture(scope="module")
def g191():
    if not G191_DIR.is_dir():
        missing_resource("ITU-T G.191 mu-law test vectors", G191_DIR,
                         "the shared/ folder beside the repository, see shared/testdata/g711/README.md")
    source = _load("sweep.src")
    coded = _load("sweep-r.u")
    decoded = _load("sweep-r.u-u")
    # The vectors' README.md: the mu-law code sits in the low byte of each int16 word.
    assert (coded >> 8 == 0).all()
    codes = (coded & 0xFF).astype(np.uint8)
    return source, codes, decoded


def test_sweep_source_is_every_int16_once(g191):
    source, _, _ = g191
    assert np.array_equal(source, np.arange(-32768, 32768, dtype=np.int16))


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
    # the table covers, and the two encoders disagree on 508 inputs by one code step (the vectors' README.md).
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


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("1", pytest.fail.Exception),
                                         ("TRUE", pytest.fail.Exception), ("", pytest.skip.Exception),
                                         ("false", pytest.skip.Exception), (None, pytest.skip.Exception)])
def test_missing_vectors_skip_only_outside_ci(monkeypatch, ci, outcome):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert in_ci() is (outcome is pytest.fail.Exception)
    with pytest.raises(outcome, match="looked in /nowhere/g711"):
        missing_resource("ITU-T G.191 mu-law test vectors", "/nowhere/g711")


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
