"""The gateway edge's transcoder and framer (voicecore/carriers/codec.py): pcmu passthrough without a copy,
A-law <-> mu-law error bounds over every code, L16 at 8 kHz, the resampled rates (a 1 kHz sine keeps its
frequency and level, streaming equals whole-buffer conversion, no seam at frame edges, odd-sized input,
the delay measured), and exact framing with a carried remainder.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import soxr
from hypothesis import given
from hypothesis import strategies as st

from voicecore.carriers.codec import (
    L16_SAMPLE_RATES_HZ,
    RESAMPLER_DELAY_MS,
    EdgeTranscoder,
    Framer,
    carrier_frame_bytes,
)
from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMA, ENCODING_PCMU
from voicecore.timing import FRAME_BYTES, FRAME_MS, SAMPLE_RATE_HZ

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

ALL_CODES = bytes(range(256))
RESAMPLED_RATES_HZ = sorted(L16_SAMPLE_RATES_HZ - {SAMPLE_RATE_HZ})


def linear(ulaw: bytes) -> np.ndarray:
    return np.frombuffer(audioop.ulaw2lin(ulaw, 2), dtype=np.int16).astype(np.int64)


def alaw_linear(alaw: bytes) -> np.ndarray:
    return np.frombuffer(audioop.alaw2lin(alaw, 2), dtype=np.int16).astype(np.int64)


def l16(samples: np.ndarray) -> bytes:
    return np.clip(np.rint(samples), -32768, 32767).astype("<i2").tobytes()


def from_l16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float64)


def sine(frequency_hz: float, rate_hz: int, seconds: float, amplitude: float = 0.5 * 32767) -> np.ndarray:
    return amplitude * np.sin(2 * np.pi * frequency_hz * np.arange(int(rate_hz * seconds)) / rate_hz)


def frames_of(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def ulaw_step(magnitude: np.ndarray) -> np.ndarray:
    """The mu-law quantization step at a linear magnitude (16-bit scale): 8 near zero, doubling per segment."""
    return 8 * 2 ** np.clip(np.floor(np.log2(np.abs(magnitude) / 256 + 1)), 0, 7)


# --- construction ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("encoding", "rate_hz", "frame_bytes"), [
    (ENCODING_PCMU, 8000, 160), (ENCODING_PCMA, 8000, 160),
    (ENCODING_L16, 8000, 320), (ENCODING_L16, 16000, 640), (ENCODING_L16, 24000, 960),
])
def test_supported_formats_and_their_20_ms_frame(encoding: str, rate_hz: int, frame_bytes: int) -> None:
    transcoder = EdgeTranscoder(encoding, rate_hz)
    assert (transcoder.encoding, transcoder.sample_rate_hz) == (encoding, rate_hz)
    assert transcoder.carrier_frame_bytes == carrier_frame_bytes(encoding, rate_hz) == frame_bytes
    assert transcoder.delay_ms == (RESAMPLER_DELAY_MS if encoding == ENCODING_L16 and rate_hz != 8000 else 0)


@pytest.mark.parametrize(("encoding", "rate_hz"), [
    (ENCODING_PCMU, 16000), (ENCODING_PCMA, 16000), (ENCODING_L16, 11025), (ENCODING_L16, 48000),
    ("PCMU", 8000), ("opus", 8000), ("", 8000),
])
def test_unsupported_formats_are_our_misuse(encoding: str, rate_hz: int) -> None:
    with pytest.raises(ValueError):
        EdgeTranscoder(encoding, rate_hz)


# --- pcmu: passthrough ---------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [bytes(range(160)), b"\xff" * 160, b"", b"\x00", bytes(range(256)) * 3])
def test_pcmu_passes_the_same_object_both_ways(payload: bytes) -> None:
    transcoder = EdgeTranscoder(ENCODING_PCMU, 8000)
    assert transcoder.to_ulaw(payload) is payload
    assert transcoder.from_ulaw(payload) is payload


# --- pcma: the audioop composition, and its error bounds -----------------------------------------------


def test_pcma_is_exactly_audioops_composition_for_every_code() -> None:
    transcoder = EdgeTranscoder(ENCODING_PCMA, 8000)
    assert transcoder.to_ulaw(ALL_CODES) == audioop.lin2ulaw(audioop.alaw2lin(ALL_CODES, 2), 2)
    assert transcoder.from_ulaw(ALL_CODES) == audioop.lin2alaw(audioop.ulaw2lin(ALL_CODES, 2), 2)


def test_pcma_conversion_error_bounds_over_every_code() -> None:
    # G.711 has no lossless A-law <-> mu-law mapping; these are the bounds the module docstring states.
    transcoder = EdgeTranscoder(ENCODING_PCMA, 8000)
    alaw = alaw_linear(ALL_CODES)
    once = np.abs(linear(transcoder.to_ulaw(ALL_CODES)) - alaw)
    assert np.all(once <= np.maximum(8, np.abs(alaw) / 32))
    back = np.abs(alaw_linear(transcoder.from_ulaw(transcoder.to_ulaw(ALL_CODES))) - alaw)
    assert np.all(back <= np.maximum(8, np.abs(alaw) / 16))
    ulaw = linear(ALL_CODES)
    round_trip = np.abs(linear(transcoder.to_ulaw(transcoder.from_ulaw(ALL_CODES))) - ulaw)
    assert round_trip.max() <= 8  # mu-law -> A-law -> mu-law moves a sample by at most one small step


def test_pcma_silence_and_lengths() -> None:
    transcoder = EdgeTranscoder(ENCODING_PCMA, 8000)
    alaw_silence = audioop.lin2alaw(b"\x00\x00" * 160, 2)
    assert np.abs(linear(transcoder.to_ulaw(alaw_silence))).max() <= 8
    for size in (0, 1, 159, 160, 161, 8000):
        assert len(transcoder.to_ulaw(bytes(size))) == size
        assert len(transcoder.from_ulaw(bytes(size))) == size


# --- l16 at 8 kHz: no resampling -----------------------------------------------------------------------


def test_l16_8k_is_audioops_lin2ulaw_of_little_endian_samples() -> None:
    transcoder = EdgeTranscoder(ENCODING_L16, 8000)
    samples = np.arange(-32768, 32768, 211, dtype=np.int16)
    payload = samples.astype("<i2").tobytes()
    assert transcoder.to_ulaw(payload) == audioop.lin2ulaw(samples.tobytes(), 2)
    native = np.frombuffer(audioop.ulaw2lin(ALL_CODES, 2), dtype=np.int16)
    assert transcoder.from_ulaw(ALL_CODES) == native.astype("<i2").tobytes()


def test_l16_8k_mu_law_round_trip_is_lossless() -> None:
    transcoder = EdgeTranscoder(ENCODING_L16, 8000)
    expected = ALL_CODES.replace(b"\x7f", b"\xff")  # mu-law has two zeros; lin2ulaw writes 0xFF
    assert transcoder.to_ulaw(transcoder.from_ulaw(ALL_CODES)) == expected
    assert len(transcoder.from_ulaw(b"\xff" * FRAME_BYTES)) == carrier_frame_bytes(ENCODING_L16, 8000)


@pytest.mark.parametrize("cuts", [[1], [3, 5], [319, 1], [321], [1, 1, 1, 1], [641, 7, 2]])
def test_l16_8k_odd_sized_payloads_carry_the_half_sample(cuts: list[int]) -> None:
    payload = (np.arange(1600, dtype=np.int16) * 17).astype("<i2").tobytes()
    whole = EdgeTranscoder(ENCODING_L16, 8000).to_ulaw(payload)
    transcoder = EdgeTranscoder(ENCODING_L16, 8000)
    pieces, start = [], 0
    for cut in cuts * 20:
        pieces.append(transcoder.to_ulaw(payload[start : start + cut]))
        start += cut
    pieces.append(transcoder.to_ulaw(payload[start:]))
    assert b"".join(pieces) == whole


# --- the resampled rates --------------------------------------------------------------------------------


def stream_to_ulaw(rate_hz: int, signal: np.ndarray) -> bytes:
    transcoder = EdgeTranscoder(ENCODING_L16, rate_hz)
    out = []
    for frame in frames_of(l16(signal), carrier_frame_bytes(ENCODING_L16, rate_hz)):
        ulaw = transcoder.to_ulaw(frame)
        assert len(ulaw) == FRAME_BYTES  # one carrier frame in, one arena frame out, from the first on
        out.append(ulaw)
    return b"".join(out)


def round_trip(rate_hz: int, signal: np.ndarray) -> np.ndarray:
    """Carrier L16 -> arena mu-law frames -> carrier L16, frame by frame, as the gateway would."""
    transcoder = EdgeTranscoder(ENCODING_L16, rate_hz)
    inbound = Framer(FRAME_BYTES)
    outbound = Framer(transcoder.carrier_frame_bytes)
    back = []
    for frame in frames_of(l16(signal), transcoder.carrier_frame_bytes):
        for ulaw_frame in inbound.push(transcoder.to_ulaw(frame)):
            for carrier_frame in outbound.push(transcoder.from_ulaw(ulaw_frame)):
                assert len(carrier_frame) == transcoder.carrier_frame_bytes
                back.append(carrier_frame)
    assert inbound.pending_bytes == 0 and outbound.pending_bytes == 0  # frames stay one to one
    return from_l16(b"".join(back))


def delay_samples(reference: np.ndarray, delayed: np.ndarray, max_lag: int) -> int:
    span = len(reference) - max_lag
    scores = [float(np.dot(reference[:span], delayed[lag : lag + span])) for lag in range(max_lag)]
    return int(np.argmax(scores))


def level_db(signal: np.ndarray) -> float:
    return 20 * np.log10(np.sqrt(np.mean(signal.astype(np.float64) ** 2)))


@pytest.mark.parametrize("rate_hz", RESAMPLED_RATES_HZ)
def test_1khz_sine_keeps_frequency_and_level_through_the_round_trip(rate_hz: int) -> None:
    signal = sine(1000, rate_hz, 1.0)
    back = round_trip(rate_hz, signal)
    assert len(back) == len(signal)
    steady = back[rate_hz // 10 :]  # past the lead silence and the filter's start
    spectrum = np.abs(np.fft.rfft(steady * np.hanning(len(steady))))
    peak_hz = np.argmax(spectrum) * rate_hz / len(steady)
    assert abs(peak_hz - 1000) <= rate_hz / len(steady)  # within one FFT bin
    assert abs(level_db(steady) - level_db(signal)) < 0.2
    # Nothing but the tone: the rest of the spectrum is mu-law's quantization noise (~38 dB down).
    tone_bins = slice(int(950 * len(steady) / rate_hz), int(1050 * len(steady) / rate_hz))
    rest = spectrum.copy()
    rest[tone_bins] = 0
    assert 10 * np.log10(np.sum(spectrum**2) / np.sum(rest**2)) > 30


@pytest.mark.parametrize("rate_hz", RESAMPLED_RATES_HZ)
def test_delay_is_measured_and_is_the_documented_one(rate_hz: int) -> None:
    # Band-limited noise (no periodicity to fool the cross-correlation).
    rng = np.random.default_rng(7)
    noise = soxr.resample(rng.standard_normal(rate_hz * 2), rate_hz, 6000, quality="VHQ")
    signal = soxr.resample(noise, 6000, rate_hz, quality="VHQ")[:rate_hz]
    signal = signal / np.abs(signal).max() * 12000
    # Inbound alone: the mu-law at 8 kHz is the signal delayed by RESAMPLER_DELAY_MS.
    ulaw = linear(stream_to_ulaw(rate_hz, signal)).astype(np.float64)
    reference_8k = soxr.resample(signal, rate_hz, SAMPLE_RATE_HZ, quality="VHQ")
    inbound = delay_samples(reference_8k, ulaw, 400)
    assert inbound == RESAMPLER_DELAY_MS * SAMPLE_RATE_HZ // 1000 == 80
    assert not ulaw[:inbound].any()  # the delay is leading silence
    # Both ways: twice that, at the carrier's rate (16 kHz: 320 samples, 20 ms).
    back = round_trip(rate_hz, signal)
    assert delay_samples(signal, back, 1000) == 2 * RESAMPLER_DELAY_MS * rate_hz // 1000


@pytest.mark.parametrize("rate_hz", RESAMPLED_RATES_HZ)
def test_streaming_equals_whole_buffer_conversion(rate_hz: int) -> None:
    signal = sine(1000, rate_hz, 0.5) + sine(3100, rate_hz, 0.5, 3000)
    streamed = linear(stream_to_ulaw(rate_hz, signal))
    whole = linear(EdgeTranscoder(ENCODING_L16, rate_hz).to_ulaw(l16(signal)))
    assert len(streamed) == len(whole)
    # The windows differ, so float rounding may tip a sample over a mu-law decision level: one step.
    assert np.all(np.abs(streamed - whole) <= ulaw_step(whole))
    assert np.mean(streamed == whole) > 0.99


@pytest.mark.parametrize("rate_hz", RESAMPLED_RATES_HZ)
def test_outbound_resampling_is_libsoxrs_whole_buffer_result(rate_hz: int) -> None:
    # from_ulaw's output is linear, so it can be held to soxr.resample itself: within rounding, shifted by
    # the delay, whatever the frame sizes.
    ulaw = audioop.lin2ulaw(l16(sine(700, SAMPLE_RATE_HZ, 0.5) + sine(2900, SAMPLE_RATE_HZ, 0.5, 4000)), 2)
    expected = soxr.resample(linear(ulaw).astype(np.float32), SAMPLE_RATE_HZ, rate_hz, quality="MQ")
    shift = RESAMPLER_DELAY_MS * rate_hz // 1000
    for size in (FRAME_BYTES, 1, 7, 333):
        transcoder = EdgeTranscoder(ENCODING_L16, rate_hz)
        out = from_l16(b"".join(transcoder.from_ulaw(piece) for piece in frames_of(ulaw, size)))
        assert len(out) == len(ulaw) * rate_hz // SAMPLE_RATE_HZ
        assert not out[:shift].any()
        assert np.abs(out[shift:] - expected[: len(out) - shift]).max() <= 1


@pytest.mark.parametrize("rate_hz", RESAMPLED_RATES_HZ)
def test_inbound_resampling_is_libsoxrs_whole_buffer_result(rate_hz: int) -> None:
    # to_ulaw's output is mu-law of the resampled signal: held to mu-law of soxr.resample itself, shifted by
    # the delay, whatever the payload sizes. Rounding may tip a sample over a decision level: one step.
    rng = np.random.default_rng(11)
    signal = np.clip(rng.normal(0, 8000, rate_hz), -32768, 32767)  # -12 dBFS noise: float rounding at its worst
    payload = l16(signal)
    expected = linear(audioop.lin2ulaw(l16(soxr.resample(from_l16(payload).astype(np.float32), rate_hz,
                                                         SAMPLE_RATE_HZ, quality="MQ")), 2))
    shift = RESAMPLER_DELAY_MS * SAMPLE_RATE_HZ // 1000
    for size in (carrier_frame_bytes(ENCODING_L16, rate_hz), 2, 14, 666):
        transcoder = EdgeTranscoder(ENCODING_L16, rate_hz)
        out = linear(b"".join(transcoder.to_ulaw(piece) for piece in frames_of(payload, size)))
        assert len(out) == SAMPLE_RATE_HZ
        assert not out[:shift].any()
        assert np.all(np.abs(out[shift:] - expected[: len(out) - shift]) <= ulaw_step(expected[: len(out) - shift]))
        assert np.mean(out[shift:] == expected[: len(out) - shift]) > 0.99


@pytest.mark.parametrize("rate_hz", RESAMPLED_RATES_HZ)
def test_no_seam_at_frame_edges(rate_hz: int) -> None:
    # A sine's sample-to-sample step is bounded; a click at a frame edge would exceed it there.
    back = round_trip(rate_hz, sine(1000, rate_hz, 0.5))
    steps = np.abs(np.diff(back))
    frame_samples = rate_hz * FRAME_MS // 1000
    at_edge = (np.arange(steps.size) + 1) % frame_samples == 0  # between a frame's last and the next's first
    at_edge[: rate_hz // 20] = False  # past the lead silence
    inner = steps[~at_edge][rate_hz // 20 :]
    largest_true_step = 0.5 * 32767 * 2 * np.pi * 1000 / rate_hz
    assert steps[at_edge].max() <= inner.max() < 1.1 * largest_true_step


@pytest.mark.parametrize("rate_hz", RESAMPLED_RATES_HZ)
@pytest.mark.parametrize("cuts", [[1], [3], [641], [639, 2], [5, 1280, 1], [960, 961]])
def test_odd_sized_payloads_give_the_same_audio(rate_hz: int, cuts: list[int]) -> None:
    payload = l16(sine(1000, rate_hz, 0.3) + sine(2500, rate_hz, 0.3, 2000))
    aligned = linear(stream_to_ulaw(rate_hz, from_l16(payload)))
    transcoder = EdgeTranscoder(ENCODING_L16, rate_hz)
    pieces, start = [], 0
    while start < len(payload):
        for cut in cuts:
            pieces.append(transcoder.to_ulaw(payload[start : start + cut]))
            start += cut
    odd = linear(b"".join(pieces))
    # Every whole sample in came out; at most one rate-ratio step (and an odd byte) is still pending.
    assert len(aligned) - 1 <= len(odd) <= len(aligned)
    assert np.all(np.abs(odd - aligned[: len(odd)]) <= ulaw_step(aligned[: len(odd)]))


def test_empty_payloads_are_harmless() -> None:
    for rate_hz in sorted(L16_SAMPLE_RATES_HZ):
        transcoder = EdgeTranscoder(ENCODING_L16, rate_hz)
        first = transcoder.to_ulaw(b"")
        assert first == b"\xff" * (transcoder.delay_ms * SAMPLE_RATE_HZ // 1000)  # the lead silence, at once
        assert len(first) + len(transcoder.to_ulaw(bytes(transcoder.carrier_frame_bytes))) == FRAME_BYTES
        assert transcoder.to_ulaw(b"") == b""


def test_reset_outbound_drops_what_the_resampler_held() -> None:
    transcoder = EdgeTranscoder(ENCODING_L16, 16000)
    loud = audioop.lin2ulaw(l16(sine(1000, SAMPLE_RATE_HZ, 0.1, 20000)), 2)
    for frame in frames_of(loud, FRAME_BYTES):
        transcoder.from_ulaw(frame)
    transcoder.reset_outbound()
    after = from_l16(transcoder.from_ulaw(b"\xff" * FRAME_BYTES))
    assert len(after) == 320
    assert not after.any()  # a fresh stream: lead silence, then silence; nothing of the old response
    # Without the reset, the held-back tail of the tone would have come out here.
    kept = EdgeTranscoder(ENCODING_L16, 16000)
    for frame in frames_of(loud, FRAME_BYTES):
        kept.from_ulaw(frame)
    assert np.abs(from_l16(kept.from_ulaw(b"\xff" * FRAME_BYTES))).max() > 1000
    # Inbound and the G.711 encodings have nothing to reset.
    EdgeTranscoder(ENCODING_PCMU, 8000).reset_outbound()


# --- Framer ---------------------------------------------------------------------------------------------


def test_framer_cuts_exact_frames_and_carries_the_remainder() -> None:
    framer = Framer(640)
    data = bytes(range(256)) * 10  # 2560 bytes
    assert framer.push(data[:100]) == []
    assert framer.pending_bytes == 100
    frames = framer.push(data[100:1500])
    assert frames == [data[:640], data[640:1280]]
    assert framer.pending_bytes == 1500 - 1280
    assert framer.push(data[1500:]) == [data[1280:1920], data[1920:2560]]
    assert framer.pending_bytes == 0
    assert framer.push(b"") == []


def test_framer_passes_an_aligned_frame_without_copying() -> None:
    framer = Framer(160)
    frame = bytes(range(160))
    (out,) = framer.push(frame)
    assert out is frame
    framer.push(b"x")
    (out,) = framer.push(frame[:159])
    assert out == b"x" + frame[:159] and framer.pending_bytes == 0


def test_framer_take_remainder() -> None:
    framer = Framer(160)
    framer.push(b"a" * 170)
    assert framer.take_remainder() == b"a" * 10
    assert framer.pending_bytes == 0 and framer.take_remainder() == b""


@pytest.mark.parametrize("size", [0, -1, 1.5, None])
def test_framer_rejects_unusable_sizes(size: object) -> None:
    with pytest.raises(ValueError):
        Framer(size)  # type: ignore[arg-type]


@given(frame_bytes=st.sampled_from([1, 160, 320, 640, 7]), pieces=st.lists(st.binary(max_size=1500), max_size=12))
def test_framer_output_is_the_input_in_whole_frames(frame_bytes: int, pieces: list[bytes]) -> None:
    framer = Framer(frame_bytes)
    frames = [frame for piece in pieces for frame in framer.push(piece)]
    assert all(len(frame) == frame_bytes for frame in frames)
    data = b"".join(pieces)
    assert b"".join(frames) + framer.take_remainder() == data
    assert len(frames) == len(data) // frame_bytes
