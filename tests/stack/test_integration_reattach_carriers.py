"""A gateway kill during a Plivo, a Telnyx and a Vonage call: each simulated carrier requests the <Redirect> its
answer document put after the stream (Vonage: posts the socket's disconnected event to the synchronous connect's
eventUrl), signed as that carrier signs, the gateway serving now answers a new stream for the same call, and the
call runs on to the caller's own end."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from stacks import start_stack
from waiting import wait_until_async

from voicecore import standby
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, generate_credentials, place_call
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration

CARRIERS = ("plivo", "telnyx", "vonage")
# The greeting, a question at 5.5 s, the gateway killed at 9 s, a second question after the re-attach.
KILL_AT_S = 9.0
SCRIPT = CallScript(duration_ms=18_000, utterances=((5500, load_clip("caller_basic_price")),
                                                    (12_500, load_clip("caller_hours"))))


def gateway_metrics(config) -> dict:
    status, body = get_from_gateway(config, "/metrics")
    assert status == 200
    return json.loads(body)["gateway"]


def test_a_gateway_kill_re_attaches_a_plivo_a_telnyx_and_a_vonage_call():
    credentials = generate_credentials()
    running = start_stack(call_control="turns", standby_workers=True, **credentials.stack_settings())
    try:
        config = running.config

        async def scenario():
            async with running.model_sim():
                calls = [asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, SCRIPT,
                                                        carrier=carrier, credentials=credentials))
                         for carrier in CARRIERS]
                for _ in range(200):
                    if (await asyncio.to_thread(gateway_metrics, config))["calls_active"] == len(CARRIERS):
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(KILL_AT_S)
                old = standby.leader_pid(config.runtime_dir, "gateway")
                assert old and old in running.stack.program_pids().values(), "no serving gateway to kill"
                os.kill(old, signal.SIGKILL)
                results = await asyncio.gather(*calls)
                await wait_until_async(lambda: standby.leader_pid(config.runtime_dir, "gateway") not in (None, old), 5,
                                       "a new gateway leader", detail=running.log_tail)
                return results

        results = asyncio.run(scenario())
        log = running.log_path.read_text()
        for result in results:
            context = f"{result.carrier} {result.closed_by}: {'; '.join(result.errors)}\n{running.log_tail()}"
            assert result.closed_by == "carrier" and not result.errors, context
            assert len(result.core.metrics.reattaches) == 1, context
            lost_at, attached_at = result.core.metrics.reattaches[0]
            assert 0 <= attached_at - lost_at < 8000, context
            assert f"call {result.call_sid}: its stream ended unexpectedly: re-attached" in log, context
            assert f"call {result.call_sid}: model session re-attached" in log, context
            # the caller heard audio over the new stream
            assert any(frame.arrival_ms > attached_at for frame in result.core.frames), context
            assert result.statistics.stale_frames == 0, context
        gateway = gateway_metrics(config)
        assert gateway["calls_reattached"] == len(CARRIERS) and gateway["reattach_refused"] == 0, gateway
    finally:
        running.stop()
