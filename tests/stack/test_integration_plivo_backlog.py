"""Plivo's buffer bounded by its checkpoint echoes, against the real stack: supervisord, gateway, pacer and model
worker processes on 127.0.0.1, the model simulator, and the carrier simulator acting as a Plivo whose media
server plays late now and then (a 200 ms stall every 500 ms of its playout: PlayoutCore.set_playout_stall).

With the bound (plivo_max_unplayed_ms, 400 ms: 20 frames) the audio waiting in Plivo's buffer, as the simulated
carrier itself counts it, never exceeds the bound, the pacer says it held calls there (backlog_held) without
calling that an underrun, and a barge-in's clearAudio still cuts the answer with no stale frame after it.
Without it (plivo_max_unplayed_ms = 0: the lead by time alone, as every carrier had it) the same stalls leave
the buffer growing by each stall's length, well past the bound."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.request

import pytest

from stacks import TEST_SIM, start_stack
from voicecore.config import Config
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, generate_credentials, place_call

pytestmark = pytest.mark.integration

CALL_MS = 8000
BARGE_IN_AT_MS = 3000  # into the 4.2 s greeting, after a few stalls
CALLS = 2
STALL = (200, 500)  # (stall_ms, every_ms) of the simulated Plivo's playout
BOUND_MS = 400
BOUND_FRAMES = BOUND_MS // 20

if "plivo_max_unplayed_ms" not in {f.name for f in dataclasses.fields(Config)}:
    pytest.skip("this build keeps Plivo's lead by time alone", allow_module_level=True)


def script() -> CallScript:
    return CallScript(duration_ms=CALL_MS, utterances=((BARGE_IN_AT_MS, load_clip("caller_interrupt")),),
                      bargein_at_ms=(BARGE_IN_AT_MS,))


def run_calls(max_unplayed_ms: int):
    """CALLS stalling Plivo calls through a fresh stack with that bound: (results, the pacer's statistics)."""
    credentials = generate_credentials()
    running = start_stack(max_calls=CALLS + 2, plivo_max_unplayed_ms=max_unplayed_ms, **credentials.stack_settings())
    try:
        config = running.config

        async def run():
            async with running.model_sim(TEST_SIM):
                calls = [place_call(config.base_url, config.twilio_auth_token, script(), carrier="plivo",
                                    credentials=credentials, playout_stall=STALL) for _ in range(CALLS)]
                return await asyncio.wait_for(asyncio.gather(*calls), CALL_MS / 1000 + 30)

        results = asyncio.run(run())
        with urllib.request.urlopen(f"http://{config.listen}/metrics", timeout=5) as response:
            pacer = json.load(response)["workers"]["pacer"]
        return results, pacer, running.log_tail(3000)
    finally:
        running.stop()


@pytest.fixture(scope="module")
def bounded():
    return run_calls(BOUND_MS)


@pytest.fixture(scope="module")
def unbounded():
    return run_calls(0)


def test_a_stalling_plivo_never_holds_more_than_the_bound_and_a_bargein_still_clears(bounded):
    results, pacer, log = bounded
    for result in results:
        context = (result.errors, log)
        assert result.statistics is not None and not result.errors, context
        metrics = result.metrics
        assert metrics.stalled_ticks >= 10, context  # the carrier did play late, again and again
        assert metrics.frames_played > 100, context
        # The carrier's own count: frames received and not yet begun playing, at the deepest moment.
        assert 0 < metrics.max_queued_frames <= BOUND_FRAMES, (metrics.max_queued_frames, context)
        stats = result.statistics
        assert stats.clears_received >= 1 and stats.bargeins_noted >= 1, context  # the barge-in got its clear
        assert result.core.bargeins_without_clear_ms() == [], context
        assert stats.stale_frames == 0 and stats.stale_frames_played == 0, context  # INV-STALE
        assert stats.overlapping_frames == 0, context  # INV-ONE-VOICE
    # The pacer waited at the bound (the carrier still had that much to play): held, not counted as underruns.
    # Each stall while a response plays ends in such a hold (about ten per call here, hundreds of ticks); had
    # they counted, underruns would be at least that many. What remains is the model's own (the answer after
    # the barge-in: the same count without the bound).
    assert pacer["backlog_held"] > 100, pacer
    assert pacer["underruns"] <= 2 * CALLS, pacer


def test_without_the_bound_the_same_stalls_leave_the_buffer_growing(unbounded, bounded):
    results, pacer, log = unbounded
    for result in results:
        assert result.statistics is not None and not result.errors, (result.errors, log)
        assert result.metrics.stalled_ticks >= 10
        # Each stall's length stays in the buffer when the sender paces by time alone.
        assert result.metrics.max_queued_frames > 2 * BOUND_FRAMES, result.metrics.max_queued_frames
        assert result.statistics.stale_frames == 0 and result.statistics.clears_received >= 1
    assert pacer["backlog_held"] == 0, pacer
    deepest_bounded = max(r.metrics.max_queued_frames for r in bounded[0])
    deepest_unbounded = max(r.metrics.max_queued_frames for r in results)
    print(f"deepest Plivo buffer: {deepest_bounded} frames with the bound, {deepest_unbounded} without")
