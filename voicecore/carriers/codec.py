"""The one transcode at the gateway edge: a carrier's audio <-> the arena's 8 kHz mu-law, for every carrier.

Owns: turning a carrier stream's audio (``StreamStarted.encoding`` at ``StreamStarted.sample_rate_hz``,
:mod:`voicecore.carriers.events`) into 8 kHz mu-law and back, with the state that makes a stream of
20 ms frames come out as one continuous signal; and :class:`Framer`, which cuts a byte stream into
exact fixed-size frames (a carrier's 640-byte L16 frames <-> the arena's 160-byte mu-law frames).

Must not know: carriers' wire formats, sockets, clocks, rings. A payload is bytes in, bytes out.

What each encoding costs (per 20 ms frame, each direction):

- ``pcmu`` at 8 kHz: nothing. ``to_ulaw``/``from_ulaw`` return the very object they were given.
- ``pcma`` at 8 kHz: one ``bytes.translate`` through a 256-entry table built at import from
  ``audioop.alaw2lin`` + ``lin2ulaw`` (and the reverse), so it is exactly the audioop composition at a
  fraction of its cost. A-law -> mu-law -> A-law is not transparent (G.711 defines no lossless mapping):
  the error is at most 1/32 of the sample's magnitude (8 near zero); tests/unit/test_carrier_codec.py pins it.
- ``l16`` (16-bit signed linear PCM, little-endian on every carrier) at 8 kHz: ``audioop`` lin2ulaw /
  ulaw2lin only.
- ``l16`` at 16 or 24 kHz: also a resample to or from 8 kHz, with libsoxr (python-soxr), below.

Resampling, and why neither of python-soxr's calls runs per frame. ``soxr.ResampleStream`` (python-soxr 1.1,
16 kHz -> 8 kHz fed 20 ms frames) holds its input until it has a whole DFT block and then releases ~100 ms
at once (HQ: nothing for four frames, then 830 samples), so a sample leaves it 12-135 ms after it arrived,
62 ms more than framing alone on average, in each direction; MQ and VHQ are alike, LQ halves that but is
-8 dB at 3.4 kHz, and ``vr=True`` is an experimental low-quality interpolator (aliasing). A phone agent
cannot spend that. The one-shot ``soxr.resample`` has no such delay, but each call designs its filter
afresh: 45-55 us per 20 ms frame and direction in the gateway whatever the frame's length (a stream
reused with ``clear()`` saves a fifth of it), which made a 16 kHz Vonage call cost the gateway 3.4x a
Twilio call's CPU (2.0x with the FIR below: the rest is twice the bytes per message on the socket).

So the filter is libsoxr's and only its application is ours. The filter is libsoxr's MQ recipe (flat to
3.4 kHz, -2.7 dB at 3.8 kHz, > 120 dB of stopband from 4.2 kHz); at 8 <-> 16 and 8 <-> 24 kHz (the ratio
is a whole number) it is linear and time-invariant per output sample, so :func:`_soxr_taps` reads its
taps once per rate pair from ``soxr.resample`` of unit impulses, and :class:`_OverlapResampler` applies
them to the stream as a polyphase FIR (one ``numpy.correlate`` per phase of the ratio): each call filters
the new input with ``RESAMPLER_DELAY_MS`` of input history before it and releases output only as far as
the filter has ``RESAMPLER_DELAY_MS`` of input after it. The response dies away within 10 ms on either
side (taps beyond are under 1e-6 of the largest), so every released sample equals the whole-buffer
``soxr.resample`` of the same signal to within float rounding (libsoxr works in single precision: < 0.03
of an int16 step before rounding for noise at -12 dBFS, < 0.003 at -30 dBFS, as with the one-shot run on
each 20 ms window that this replaced, whose int16 output it matches but for one step in under 0.5% of
samples; tests/unit/test_carrier_codec.py holds both directions to the whole-buffer result): no clicks or
seams at frame edges. The history starts as silence, as the whole-buffer resample assumes.

Latency: the output is the input delayed by exactly ``RESAMPLER_DELAY_MS`` (10 ms), that is, it starts
with 10 ms of silence; then each call returns exactly the duration it was given (a 640-byte 16 kHz
frame in, 160 mu-law bytes out, and back), so carrier frames and arena frames stay one to one and nothing
waits for a following frame. (Releasing the unshifted signal instead would hold the last 10 ms of every
frame back until the next frame arrived: 20 ms for a 20 ms consumer.) So the resampled rates cost 10 ms
inbound and 10 ms outbound, a constant with no bursts, and 12-20 us of CPU per 20 ms frame and
direction on the 2-core dev machine (12 us median in bench/micro/bench_codec.py; ~20 us when 20 streams
take turns as in the gateway, where the one-shot per frame cost 45-55 us; G.711 and L16 at 8 kHz cost
under 1 us). tests/unit/test_carrier_codec.py measures the delay by cross-correlation.
"""

from __future__ import annotations

import functools
import math
import sys
import warnings

import numpy as np
import soxr

from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMA, ENCODING_PCMU
from voicecore.timing import FRAME_MS, SAMPLE_RATE_HZ

with warnings.catch_warnings():
    # Python 3.11/3.12 warn that audioop goes away in 3.13; on 3.13+ `audioop-lts` provides it (g711.py).
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

__all__ = [
    "EdgeTranscoder",
    "Framer",
    "L16_SAMPLE_RATES_HZ",
    "RESAMPLER_DELAY_MS",
    "carrier_frame_bytes",
]

SAMPLE_WIDTH_BYTES = 2  # L16 and the linear form audioop works in
# The L16 rates any carrier here offers (docs/explanation/protocols.md#b).
L16_SAMPLE_RATES_HZ = frozenset({8000, 16000, 24000})
G711_SAMPLE_RATE_HZ = SAMPLE_RATE_HZ  # G.711 is 8 kHz by definition

# The resampler's look-ahead, and so its delay, in each direction (see the module docstring): 10 ms is
# where the MQ filter's response has died away (measured: the windowed result then differs from the
# whole-buffer one by float rounding only, < 0.03 of an int16 step; at 8 ms by ~0.5 step, at 6 ms by several).
RESAMPLER_DELAY_MS = 10
_CONTEXT_MS = RESAMPLER_DELAY_MS  # the filter is symmetric: as much history as look-ahead
_SOXR_QUALITY = "MQ"
_INT16_LOW, _INT16_HIGH = np.float32(-32768), np.float32(32767)  # the resampler's output is clipped to int16
_NO_SAMPLES = np.zeros(0, dtype=np.int16)
_NO_SAMPLES.flags.writeable = False
_L16_WIRE = np.dtype("<i2")  # L16 on every carrier

# audioop works in the machine's byte order; L16 on the wire is little-endian.
_NEEDS_SWAP = sys.byteorder != "little"

# G.711 A-law <-> mu-law through linear, as audioop computes it, for every code at once.
_ALL_CODES = bytes(range(256))
_ALAW_TO_ULAW = audioop.lin2ulaw(audioop.alaw2lin(_ALL_CODES, SAMPLE_WIDTH_BYTES), SAMPLE_WIDTH_BYTES)
_ULAW_TO_ALAW = audioop.lin2alaw(audioop.ulaw2lin(_ALL_CODES, SAMPLE_WIDTH_BYTES), SAMPLE_WIDTH_BYTES)


def carrier_frame_bytes(encoding: str, sample_rate_hz: int) -> int:
    """Bytes of one 20 ms frame of ``encoding`` at ``sample_rate_hz`` (160 for G.711, 640 for L16 16 kHz)."""
    samples = sample_rate_hz * FRAME_MS // 1000
    return samples * SAMPLE_WIDTH_BYTES if encoding == ENCODING_L16 else samples


class _OverlapResampler:
    """A stream of int16 samples at ``in_rate_hz`` -> the same stream at ``out_rate_hz``, continuous across
    calls, delayed by exactly ``RESAMPLER_DELAY_MS``: libsoxr's filter (:func:`_soxr_taps`) applied as a
    polyphase FIR (the module docstring says why and how)."""

    __slots__ = ("_in_step", "_out_step", "_ratio", "_phases", "_lookahead_in", "_context_in", "_lead_silence",
                 "_history", "_history_start", "_next_out", "_started")

    def __init__(self, in_rate_hz: int, out_rate_hz: int) -> None:
        divisor = math.gcd(in_rate_hz, out_rate_hz)
        # Output index j sits at input index j * in_step / out_step. The history starts on an input index
        # that is a multiple of in_step, and outputs are released in multiples of out_step, so every call's
        # first output falls on an input sample and each phase's taps line up with the same inputs.
        self._in_step = in_rate_hz // divisor
        self._out_step = out_rate_hz // divisor
        self._ratio = max(self._in_step, self._out_step)
        self._phases = _soxr_taps(in_rate_hz, out_rate_hz)
        self._lookahead_in = self._whole_steps(in_rate_hz * RESAMPLER_DELAY_MS // 1000)
        self._context_in = self._whole_steps(in_rate_hz * _CONTEXT_MS // 1000)
        # The delay, as output samples of silence released before the signal (10 ms at the output rate).
        self._lead_silence = np.zeros(self._lookahead_in * self._out_step // self._in_step, dtype=np.int16)
        self.reset()

    def _whole_steps(self, samples: int) -> int:
        return -(-samples // self._in_step) * self._in_step

    def reset(self) -> None:
        """Start a new stream: forget the history and the held-back output."""
        # Input from absolute index _history_start on: silence before the stream's first sample.
        self._history = np.zeros(self._context_in, dtype=np.float32)
        self._history_start = -self._context_in
        self._next_out = 0  # absolute index of the next output sample (of the unshifted signal)
        self._started = False  # the lead silence has been released

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Feed int16 samples; return the int16 output samples they complete: after the first call's lead
        silence, as many as the input's duration (up to one step of the rate ratio carried over)."""
        out = self._resample(samples)
        if not self._started:
            self._started = True
            return np.concatenate((self._lead_silence, out))
        return out

    def _resample(self, samples: np.ndarray) -> np.ndarray:
        if samples.size:
            self._history = np.concatenate((self._history, samples), dtype=np.float32)
        available_end = self._history_start + self._history.size
        # Output j needs input up to j * in_step / out_step + lookahead; release whole out_steps only.
        out_end = (available_end - self._lookahead_in) * self._out_step // self._in_step
        out_end -= out_end % self._out_step
        count = out_end - self._next_out
        if count <= 0:
            return _NO_SAMPLES
        out = self._filter(count)
        self._next_out = out_end
        # Keep only the history the next call's first output needs (_context_in before it).
        keep_from = out_end * self._in_step // self._out_step - self._context_in
        self._history = self._history[keep_from - self._history_start :]
        self._history_start = keep_from
        np.rint(out, out=out)
        np.maximum(out, _INT16_LOW, out=out)
        np.minimum(out, _INT16_HIGH, out=out)
        return out.astype(np.int16)

    def _filter(self, count: int) -> np.ndarray:
        """Outputs _next_out .. _next_out + count - 1 (float32) from the history (see _soxr_taps for the
        phases): each is a 'valid' correlation, so it reads exactly the inputs within 10 ms of its outputs."""
        history, ratio = self._history, self._ratio
        if self._in_step == 1:  # upsampling: phase p makes outputs ratio * m + p from inputs m - n
            out = np.empty(count, dtype=np.float32)
            first, rows = self._next_out // ratio - self._history_start, count // ratio
            for phase, low, high, taps in self._phases:
                out[phase::ratio] = np.correlate(history[first - high : first + rows - low], taps, "valid")
            return out
        # downsampling: output j is the sum over the phases p of the inputs ratio * (j - n) + p
        first = self._next_out - self._history_start // ratio
        parts = [np.correlate(history[phase::ratio][first - high : first + count - low], taps, "valid")
                 for phase, low, high, taps in self._phases]
        out = parts[0]
        for part in parts[1:]:
            out += part
        return out


@functools.cache
def _soxr_taps(in_rate_hz: int, out_rate_hz: int) -> tuple[tuple[int, int, int, np.ndarray], ...]:
    """libsoxr's MQ filter from ``in_rate_hz`` to ``out_rate_hz`` (one a whole multiple ``r`` of the other),
    as one ``(phase, low, high, taps)`` per phase: ``taps[n - low]`` for ``low <= n <= high``.

    The filter is read, not designed: ``soxr.resample`` of a unit impulse at input index ``i`` gives output
    ``j`` the tap at offset ``d = j * in_step - i * out_step`` (in samples of the higher rate), the same for
    every ``i`` of one phase of the ratio. Kept: ``|d| <= RESAMPLER_DELAY_MS`` (the response has died away
    there: the module docstring). Downsampling by r, output ``j`` is the sum over phases ``p`` of input
    ``r * (j - n) + p`` times tap ``r * n - p``; upsampling by r, output ``r * m + p`` is the sum of input
    ``m - n`` times tap ``r * n + p``.
    """
    divisor = math.gcd(in_rate_hz, out_rate_hz)
    in_step, out_step = in_rate_hz // divisor, out_rate_hz // divisor
    if min(in_step, out_step) != 1:
        raise ValueError("only rates that are whole multiples of each other are resampled here")
    ratio = max(in_step, out_step)
    half = max(in_rate_hz, out_rate_hz) * RESAMPLER_DELAY_MS // 1000  # 10 ms at the higher rate
    kernel = np.zeros(2 * half + 1, dtype=np.float64)
    length = 8 * half  # input samples: the impulse sits far from both ends
    for phase in range(in_step):
        at = length // 2 // in_step * in_step + phase
        impulse = np.zeros(length, dtype=np.float32)
        impulse[at] = 1.0
        response = soxr.resample(impulse, in_rate_hz, out_rate_hz, quality=_SOXR_QUALITY)
        offsets = np.arange(response.size) * in_step - at * out_step
        kept = np.abs(offsets) <= half
        kernel[offsets[kept] + half] = response[kept]
    sign = 1 if in_step == 1 else -1  # tap r * n + p upsampling, r * n - p downsampling
    phases = []
    for phase in range(ratio):
        low = -((half + sign * phase) // ratio)  # the smallest n with |r * n + sign * p| <= half
        high = (half - sign * phase) // ratio
        offsets = ratio * np.arange(low, high + 1) + sign * phase
        # Reversed, for numpy.correlate: a convolution without numpy.convolve's copies and checks per call.
        phases.append((phase, low, high, kernel[offsets[::-1] + half].astype(np.float32)))
    return tuple(phases)


class EdgeTranscoder:
    """One stream's audio, carrier encoding <-> 8 kHz mu-law, both directions, with their state.

    ``to_ulaw`` takes what the carrier sent (``CallerAudio.payload``) and returns the same duration of
    mu-law: one 20 ms carrier frame gives one arena frame (``timing.FRAME_BYTES``). The resampled rates
    delay the signal by ``delay_ms`` (their output starts with that much silence) and, for a payload that
    is not a whole number of rate-ratio steps (2 samples at 16 kHz), carry the odd sample to the next
    call; an L16 payload of an odd number of bytes keeps its last byte for the next call. So a carrier
    that sends frames of other sizes needs a :class:`Framer` of ``timing.FRAME_BYTES`` after this.
    ``from_ulaw`` is the reverse for what we send (one arena frame in, one carrier frame out).
    Our own misuse (an unsupported encoding or rate) raises ``ValueError``; no payload can make it raise.
    """

    __slots__ = ("encoding", "sample_rate_hz", "carrier_frame_bytes", "delay_ms", "_down", "_up",
                 "_inbound_odd", "_to_ulaw", "_from_ulaw")

    def __init__(self, encoding: str, sample_rate_hz: int) -> None:
        if encoding in (ENCODING_PCMU, ENCODING_PCMA):
            if sample_rate_hz != G711_SAMPLE_RATE_HZ:
                raise ValueError(f"{encoding} is only defined at {G711_SAMPLE_RATE_HZ} Hz")
        elif encoding == ENCODING_L16:
            if sample_rate_hz not in L16_SAMPLE_RATES_HZ:
                raise ValueError(f"l16 is supported at {sorted(L16_SAMPLE_RATES_HZ)} Hz")
        else:
            raise ValueError(f"unknown encoding {encoding!r}")
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        self.carrier_frame_bytes = carrier_frame_bytes(encoding, sample_rate_hz)
        resampled = encoding == ENCODING_L16 and sample_rate_hz != SAMPLE_RATE_HZ
        self.delay_ms = RESAMPLER_DELAY_MS if resampled else 0  # added by to_ulaw, and again by from_ulaw
        self._down = _OverlapResampler(sample_rate_hz, SAMPLE_RATE_HZ) if resampled else None
        self._up = _OverlapResampler(SAMPLE_RATE_HZ, sample_rate_hz) if resampled else None
        self._inbound_odd = b""  # an L16 payload's trailing half sample, waiting for its other byte
        if encoding == ENCODING_PCMU:
            self._to_ulaw, self._from_ulaw = _identity, _identity
        elif encoding == ENCODING_PCMA:
            self._to_ulaw, self._from_ulaw = _alaw_to_ulaw, _ulaw_to_alaw
        elif resampled:
            self._to_ulaw, self._from_ulaw = self._l16_resampled_to_ulaw, self._ulaw_to_l16_resampled
        else:
            self._to_ulaw, self._from_ulaw = self._l16_to_ulaw, _ulaw_to_l16

    def to_ulaw(self, payload: bytes) -> bytes:
        """Carrier audio -> 8 kHz mu-law (pcmu: ``payload`` itself, not a copy)."""
        return self._to_ulaw(payload)

    def from_ulaw(self, ulaw: bytes) -> bytes:
        """8 kHz mu-law -> carrier audio (pcmu: ``ulaw`` itself, not a copy)."""
        return self._from_ulaw(ulaw)

    def reset_outbound(self) -> None:
        """Drop what ``from_ulaw`` holds back: call it when the carrier's playback buffer was cleared, so
        the next response does not start with the tail of the one thrown away."""
        if self._up is not None:
            self._up.reset()

    # -- l16 ---------------------------------------------------------------------------------------

    def _whole_samples(self, payload: bytes) -> bytes:
        if self._inbound_odd:
            payload = self._inbound_odd + payload
            self._inbound_odd = b""
        if len(payload) % SAMPLE_WIDTH_BYTES:
            self._inbound_odd = payload[-1:]
            payload = payload[:-1]
        return payload

    def _l16_to_ulaw(self, payload: bytes) -> bytes:
        return audioop.lin2ulaw(_native(self._whole_samples(payload)), SAMPLE_WIDTH_BYTES)

    def _l16_resampled_to_ulaw(self, payload: bytes) -> bytes:
        samples = np.frombuffer(self._whole_samples(payload), dtype=_L16_WIRE)
        out = self._down.process(samples)  # type: ignore[union-attr]
        return audioop.lin2ulaw(out.tobytes(), SAMPLE_WIDTH_BYTES)  # int16 in the machine's order

    def _ulaw_to_l16_resampled(self, ulaw: bytes) -> bytes:
        samples = np.frombuffer(audioop.ulaw2lin(ulaw, SAMPLE_WIDTH_BYTES), dtype=np.int16)
        return self._up.process(samples).astype(_L16_WIRE, copy=False).tobytes()  # type: ignore[union-attr]


def _identity(payload: bytes) -> bytes:
    return payload


def _alaw_to_ulaw(payload: bytes) -> bytes:
    return payload.translate(_ALAW_TO_ULAW)


def _ulaw_to_alaw(ulaw: bytes) -> bytes:
    return ulaw.translate(_ULAW_TO_ALAW)


def _native(little_endian: bytes) -> bytes:
    return audioop.byteswap(little_endian, SAMPLE_WIDTH_BYTES) if _NEEDS_SWAP else little_endian


def _ulaw_to_l16(ulaw: bytes) -> bytes:
    return _native(audioop.ulaw2lin(ulaw, SAMPLE_WIDTH_BYTES))  # byteswap is its own inverse


class Framer:
    """Cuts a byte stream into frames of exactly ``frame_bytes``, keeping the remainder for the next push.

    ``push`` returns the frames completed so far, in order. A push of exactly one frame onto an empty
    remainder returns the given object itself (no copy): the common case when sizes already line up.
    """

    __slots__ = ("frame_bytes", "_pending")

    def __init__(self, frame_bytes: int) -> None:
        if type(frame_bytes) is not int or frame_bytes <= 0:
            raise ValueError("frame_bytes must be a positive int")
        self.frame_bytes = frame_bytes
        self._pending = bytearray()

    @property
    def pending_bytes(self) -> int:
        """Bytes held back, waiting to complete a frame (always < ``frame_bytes``)."""
        return len(self._pending)

    def push(self, data: bytes) -> list[bytes]:
        size = self.frame_bytes
        if not self._pending and len(data) == size:
            return [data]
        self._pending += data
        whole = len(self._pending) - len(self._pending) % size
        if not whole:
            return []
        buffer = self._pending
        frames = [bytes(buffer[start : start + size]) for start in range(0, whole, size)]
        del buffer[:whole]
        return frames

    def take_remainder(self) -> bytes:
        """Return and forget the incomplete tail (at the end of a stream, or to drop it on a clear)."""
        remainder = bytes(self._pending)
        self._pending.clear()
        return remainder
