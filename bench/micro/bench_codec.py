"""The gateway edge's transcoder at 16 kHz L16 (Vonage's default), per 20 ms frame and direction.

voicecore/carriers/codec.py's docstring: the resampled rates cost 12-20 us of CPU per 20 ms frame and
direction (12 us median here), where a one-shot ``soxr.resample`` per frame (what the edge ran before:
libsoxr designs its filter on every call) cost 45-55 us with its conversions (26 us median here alone). Both directions of EdgeTranscoder as the gateway calls them (one
640-byte L16 frame in, 160 mu-law bytes out; one 160-byte mu-law frame in, 640 L16 bytes out) on speech-like
noise, and for comparison the one-shot resample of the same 20 ms plus the 10 ms on either side a windowed
resample needs.
"""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.events import ENCODING_L16
from voicecore.timing import FRAME_BYTES

RATE_HZ = 16000
FRAMES = 50  # a second of audio, cycled
_rng = np.random.default_rng(3)
L16_FRAMES = [_rng.normal(0, 3000, 320).astype("<i2").tobytes() for _ in range(FRAMES)]
ULAW_FRAMES = [bytes(_rng.integers(0, 256, FRAME_BYTES, dtype=np.uint8)) for _ in range(FRAMES)]


def _cycling(call, frames):
    state = {"n": 0}

    def step():
        state["n"] += 1
        return call(frames[state["n"] % FRAMES])

    return step


@pytest.mark.benchmark(group="l16 16 kHz edge, per 20 ms frame")
def test_inbound_to_ulaw(benchmark):
    """Caller audio: 640 bytes of L16 at 16 kHz -> 160 bytes of 8 kHz mu-law (the gateway's inbound edge)."""
    transcoder = EdgeTranscoder(ENCODING_L16, RATE_HZ)
    transcoder.to_ulaw(L16_FRAMES[0])  # past the first call's lead silence
    assert len(benchmark(_cycling(transcoder.to_ulaw, L16_FRAMES))) == FRAME_BYTES


@pytest.mark.benchmark(group="l16 16 kHz edge, per 20 ms frame")
def test_outbound_from_ulaw(benchmark):
    """Our audio: 160 bytes of 8 kHz mu-law -> 640 bytes of L16 at 16 kHz (the gateway's outbound edge)."""
    transcoder = EdgeTranscoder(ENCODING_L16, RATE_HZ)
    transcoder.from_ulaw(ULAW_FRAMES[0])
    assert len(benchmark(_cycling(transcoder.from_ulaw, ULAW_FRAMES))) == 640


@pytest.mark.benchmark(group="l16 16 kHz edge, per 20 ms frame")
def test_one_shot_soxr_resample_per_frame(benchmark):
    """For comparison: soxr.resample of one 20 ms frame with 10 ms on either side, 16 -> 8 kHz (MQ)."""
    window = _rng.normal(0, 3000, 640).astype(np.float32)
    assert len(benchmark(soxr.resample, window, RATE_HZ, 8000, quality="MQ")) == 320
