"""The carrier simulator in each carrier mode against the real stack: two calls per carrier (Twilio, Telnyx
with jitter, Plivo, Vonage at 16 kHz, Exotel), all at once, through real supervisord, gateway, pacer and model
worker processes on 127.0.0.1, with the model simulator. Each call is greeted, barges in on the greeting and
hears the answer; the figures come from voicecore.callreport as the demo's do (after the tolerant matcher
for Vonage's resampled audio), and must show what `voicecore demo --carrier X` promises: every call
completed, no stale frame, every barge-in cleared, one voice."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from stacks import TEST_SIM, start_stack
from voicecore.callreport import summarize
from voicecore.config import Config
from voicecore.demo import frame_matching
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, generate_credentials, place_call
from voicecore.sim.carrier_modes_core import CARRIERS

pytestmark = pytest.mark.integration

CALL_MS = 8000
BARGE_IN_AT_MS = 2500  # into the 4.2 s greeting
CALLS_PER_CARRIER = 2

if "telnyx_public_key" not in {f.name for f in dataclasses.fields(Config)}:
    pytest.skip("this build's gateway serves Twilio only", allow_module_level=True)


def script() -> CallScript:
    return CallScript(duration_ms=CALL_MS, utterances=((BARGE_IN_AT_MS, load_clip("caller_interrupt")),),
                      bargein_at_ms=(BARGE_IN_AT_MS,))


@pytest.fixture(scope="module")
def reports():
    credentials = generate_credentials()  # every carrier's secrets for this run, as carrier_config makes them
    settings = credentials.stack_settings()
    running = start_stack(max_calls=len(CARRIERS) * CALLS_PER_CARRIER + 2, **settings)
    try:
        config = running.config

        async def run():
            async with running.model_sim(TEST_SIM) as sim:
                calls = [place_call(config.base_url, config.twilio_auth_token, script(), carrier=carrier,
                                    credentials=credentials, jitter_probability=0.05 if carrier == "telnyx" else 0.0)
                         for carrier in CARRIERS for _ in range(CALLS_PER_CARRIER)]
                results = await asyncio.wait_for(asyncio.gather(*calls), CALL_MS / 1000 + 30)
                out = {}
                for carrier in CARRIERS:
                    mine = [r for r in results if r.carrier == carrier]
                    matching = frame_matching(mine, sim)
                    report = summarize(mine, sim, seconds=CALL_MS / 1000, cpu_seconds=0.0, wall_seconds=CALL_MS / 1000)
                    out[carrier] = (report, matching, mine)
                return out

        yield asyncio.run(run()), running
    finally:
        running.stop()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_a_carrier_mode_call_completes_with_no_stale_frame(reports, carrier):
    by_carrier, running = reports
    report, matching, results = by_carrier[carrier]
    context = (report["problems"], [r.errors for r in results], running.log_tail(3000))
    assert report["calls_completed"] == CALLS_PER_CARRIER, context
    assert all(r.carrier == carrier and r.core is not None for r in results)
    assert report["stale_frames"] == 0, context
    assert report["overlapping_frames"] == 0 and report["bargeins_without_clear"] == 0, context
    assert all(r.statistics.clears_received >= 1 for r in results), context  # every barge-in got its clear
    assert report["frames_played_timed"] > 0
    if carrier == "vonage":  # 16 kHz: resampled both ways, tied by the tolerant matcher
        assert matching is not None and matching["unmatched_with_signal"] <= 4 * CALLS_PER_CARRIER, matching
    else:
        assert matching is None
    if carrier == "telnyx":
        assert sum(r.core.frames_reordered for r in results) > 0  # the gateway's reorder window had work
