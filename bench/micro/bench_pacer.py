"""The pacer's step (workers/pacer/core.py PacerCore) over a real arena in a temporary directory.

PacerCore's docstring: a tick over 200 active calls each releasing one frame (a mark every fifth) ~30 us
including the Python call, i.e. ~150 ns per frame for base64 + JSON straight into shared memory; a tick
with nothing to release ~2 us; a cancel pass ~1 us.

Set-up, untimed before every round (pytest-benchmark's pedantic mode): the clock moves on 20 ms, the
gateway's side takes every wire entry (wire_advance), and the model side tops the outbound rings up.
Each call has one live, ungated response with audio queued, so after the first burst (the 80 ms lead)
every tick releases exactly one frame per call (release_frames=1, as the docstring's figure; production
releases two every other tick), with a mark after every fifth: the benchmark checks it did.
For comparison, the same media message built in Python by OutboundEncoder.media (base64 + concatenation).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.micro.conftest import per_item
from voicecore.shm import rings as R
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.timing import FRAME_BYTES, FRAME_NS
from voicecore.carriers.twilio.stream import OutboundEncoder, wire_templates
from workers.pacer.core import PacerCore

CALLS = 200
OUT_SLOTS = 256
REFILL_BELOW = 64
TAG = 1
ROUNDS = 1500


class PacedCalls:
    """CALLS live calls in an arena, each with one response streaming, and the pacer over them."""

    def __init__(self, directory: str, *, queued: bool = True) -> None:
        self.arena = Arena.create(ArenaLayout(max_calls=CALLS, out_slots=OUT_SLOTS), directory=directory)
        self.pacer = PacerCore(self.arena, lead_ms=80, mark_every_frames=5, start_hold_ms=0, release_frames=1)
        self.payload = np.frombuffer(bytes((i * 53) % 256 for i in range(FRAME_BYTES)) * OUT_SLOTS, dtype=np.uint8)
        self.next_index = [0] * CALLS
        for slot in range(CALLS):
            sid = "MZ" + f"{slot:032x}"
            self.arena.claim_slot(slot, sid, "CA" + f"{slot:032x}", wire_templates(sid))
            R.tag_open(self.arena.ctrl, slot, TAG, 0)
            if queued:
                self.refill(slot)
        self.now_ns = 1_000 * FRAME_NS

    def refill(self, slot: int) -> None:
        ctrl, out_meta = self.arena.ctrl, self.arena.out_meta
        room = int(R.outbound_free(ctrl, out_meta, slot))
        n = R.outbound_push_many(ctrl, out_meta, self.arena.out_payload, slot, TAG, self.next_index[slot],
                                 self.payload[: room * FRAME_BYTES])
        self.next_index[slot] += n

    def between_ticks(self):
        """pedantic's setup: the next tick's time, the wire rings emptied, the outbound rings topped up."""
        ctrl = self.arena.ctrl
        for slot in range(CALLS):
            pending = int(R.wire_pending(ctrl, slot))
            if pending:
                R.wire_advance(ctrl, slot, pending)
            if self.next_index[slot] and OUT_SLOTS - int(R.outbound_free(ctrl, self.arena.out_meta, slot)) < REFILL_BELOW:
                self.refill(slot)
        self.now_ns += FRAME_NS
        return (self.now_ns,), {}

    def close(self) -> None:
        self.arena.close()
        self.arena.unlink()


@pytest.fixture
def streaming(tmp_path):
    calls = PacedCalls(str(tmp_path))
    calls.pacer.tick(calls.now_ns)  # the first burst fills every call's lead (and loads the compiled step)
    for _ in range(3):
        calls.pacer.tick(*calls.between_ticks()[0])
    yield calls
    calls.close()


@pytest.fixture
def silent(tmp_path):
    calls = PacedCalls(str(tmp_path), queued=False)
    calls.pacer.tick(calls.now_ns)
    yield calls
    calls.close()


@pytest.mark.benchmark(group="pacer step, 200 calls")
def test_tick_200_calls_one_frame_each(benchmark, streaming):
    before = streaming.pacer.statistics()
    benchmark.pedantic(streaming.pacer.tick, setup=streaming.between_ticks, rounds=ROUNDS, iterations=1, warmup_rounds=5)
    after = streaming.pacer.statistics()
    ticks = after["ticks"] - before["ticks"]
    assert after["frames_released"] - before["frames_released"] == ticks * CALLS, "not one frame per call per tick"
    marks = after["marks"] - before["marks"]  # every call's fifth frame: all calls on the same tick
    assert ticks // 5 * CALLS <= marks <= (ticks // 5 + 1) * CALLS
    assert after["underruns"] == before["underruns"] and after["wire_full"] == before["wire_full"]
    per_item(benchmark, CALLS, "frame")


@pytest.mark.benchmark(group="pacer step, 200 calls")
def test_tick_200_calls_nothing_to_release(benchmark, silent):
    before = silent.pacer.statistics()["frames_released"]
    benchmark.pedantic(silent.pacer.tick, setup=silent.between_ticks, rounds=ROUNDS, iterations=1, warmup_rounds=5)
    assert silent.pacer.statistics()["frames_released"] == before


@pytest.mark.benchmark(group="pacer step, 200 calls")
def test_cancel_pass_200_calls(benchmark, streaming):
    now = streaming.now_ns
    assert benchmark(streaming.pacer.cancels, now) == 0  # no cancel pending: nothing to do, as most passes


@pytest.mark.benchmark(group="one media message in Python")
def test_outbound_encoder_media(benchmark):
    encoder = OutboundEncoder("MZ" + "0" * 32)
    frame = bytes(range(FRAME_BYTES))
    assert benchmark(encoder.media, frame).endswith(b'"}}')

