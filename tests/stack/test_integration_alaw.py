"""A-law passthrough on the real stack (docs/explanation/carrier-edge.md#a-law-calls-telnyx-pcma): supervisord,
gateway, pacer and model worker processes on 127.0.0.1 with the model simulator; the gateway asks Telnyx for PCMA
(telnyx_codec) and passes it through (alaw_passthrough, the default). Two Telnyx PCMA calls and a Twilio call
run at once, each greeted, barging in on the greeting and hearing the answer:

- the Telnyx calls' model sessions are A-law both ways (g711_alaw / audio/pcma, as the session.update set
  them), the caller's A-law is recognised by its content, and every whole frame of the model's A-law the
  carrier received is one of the model's frames byte for byte (nothing transcoded it on the way);
- barge-in: every barge-in got its clear, no stale frame, one voice (the carrier simulator's figures);
- the Twilio call beside them is mu-law as before (audio/pcmu)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from stacks import TEST_SIM, start_stack
from voicecore.callreport import summarize
from voicecore.config import Config
from voicecore.demo import frame_matching
from voicecore.g711 import ALAW_SILENCE
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, generate_credentials, place_call
from voicecore.timing import FRAME_BYTES

pytestmark = pytest.mark.integration

CALL_MS = 8000
BARGE_IN_AT_MS = 2500  # into the 4.2 s greeting
TELNYX_CALLS = 2

if "alaw_passthrough" not in {f.name for f in dataclasses.fields(Config)}:
    pytest.skip("this build has no A-law passthrough", allow_module_level=True)


def script() -> CallScript:
    return CallScript(duration_ms=CALL_MS, utterances=((BARGE_IN_AT_MS, load_clip("caller_interrupt")),),
                      bargein_at_ms=(BARGE_IN_AT_MS,))


@pytest.fixture(scope="module")
def calls():
    credentials = generate_credentials()
    running = start_stack(max_calls=TELNYX_CALLS + 3, telnyx_codec="PCMA", **credentials.stack_settings())
    try:
        config = running.config

        async def run():
            async with running.model_sim(TEST_SIM) as sim:
                placed = [place_call(config.base_url, config.twilio_auth_token, script(), carrier="telnyx",
                                     credentials=credentials) for _ in range(TELNYX_CALLS)]
                placed.append(place_call(config.base_url, config.twilio_auth_token, script()))
                results = await asyncio.wait_for(asyncio.gather(*placed), CALL_MS / 1000 + 30)
                telnyx_results = [r for r in results if r.carrier == "telnyx"]
                twilio_results = [r for r in results if r.carrier == "twilio"]
                matching = frame_matching(telnyx_results, sim)
                report = summarize(telnyx_results, sim, seconds=CALL_MS / 1000, cpu_seconds=0.0,
                                   wall_seconds=CALL_MS / 1000)
                records = {r.call_sid: [s.record for s in sim.by_call(r.call_sid)] for r in results}
                return telnyx_results, twilio_results, report, matching, records

        yield asyncio.run(run()), running
    finally:
        running.stop()


def test_the_telnyx_calls_model_sessions_are_a_law_both_ways_and_the_twilio_calls_mu_law(calls):
    (telnyx_results, twilio_results, _report, _matching, records), running = calls
    context = running.log_tail(3000)
    assert len(telnyx_results) == TELNYX_CALLS and len(twilio_results) == 1, context
    for result in telnyx_results:
        assert result.core is not None and result.core.encoding == "pcma", context  # Telnyx streamed PCMA
        sessions = records[result.call_sid]
        assert sessions, context
        assert all(s.input_format == s.output_format == "pcma" for s in sessions), [
            (s.input_format, s.output_format) for s in sessions]
        assert all(r.audio_format == "pcma" for s in sessions for r in s.responses if r.audio)
        # the caller's A-law, as the carrier simulator played it, reached the model untouched: recognised by content
        assert any(sp.caller_clip == "caller_interrupt" for s in sessions for sp in s.speech), context
    for result in twilio_results:
        sessions = records[result.call_sid]
        assert sessions and all(s.input_format == s.output_format == "pcmu" for s in sessions)
    assert "passed through to the model" in running.log_tail(200_000)


def test_the_models_a_law_reaches_the_carrier_byte_for_byte(calls):
    (telnyx_results, _twilio, _report, matching, records), running = calls
    for result in telnyx_results:
        model_frames = set()
        for session in records[result.call_sid]:
            for response in session.responses:
                audio = response.audio
                model_frames.update(audio[i:i + FRAME_BYTES] for i in range(0, len(audio) - FRAME_BYTES + 1, FRAME_BYTES))
        received = bytes(result.core.alaw_received)
        assert len(received) % FRAME_BYTES == 0
        frames = [received[i:i + FRAME_BYTES] for i in range(0, len(received), FRAME_BYTES)]
        # a response's short last frame is padded with A-law silence by the model worker (so it is no model
        # frame as such); a fallback line is the pacer's, not the model's: neither happens more than a few times
        foreign = [f for f in frames if f not in model_frames and f != bytes([ALAW_SILENCE]) * FRAME_BYTES]
        assert len(frames) >= 100 and len(foreign) <= 4, (len(frames), len(foreign), running.log_tail(3000))
        assert all(f.endswith(bytes([ALAW_SILENCE])) for f in foreign), [f[-8:] for f in foreign]
    # the tolerant matcher found nothing to do: every frame it could tie was tied exactly
    assert matching is not None and matching["matched"] == 0 and matching["exact"] >= 100, matching


def test_barge_in_clears_with_no_stale_frame_and_one_voice(calls):
    (telnyx_results, _twilio, report, _matching, _records), running = calls
    context = (report["problems"], [r.errors for r in telnyx_results], running.log_tail(3000))
    assert report["calls_completed"] == TELNYX_CALLS, context
    assert report["stale_frames"] == 0, context
    assert report["overlapping_frames"] == 0 and report["bargeins_without_clear"] == 0, context
    assert all(r.statistics.clears_received >= 1 for r in telnyx_results), context
    assert report["frames_played_timed"] > 0
