"""The carrier simulator's AMD answers are timed from the call's stream, where the simulated callee's audio starts,
not from the answer's status: a stream that opens late (an answer URL slow to answer, a loaded machine) must not
have the carrier say ``human`` before the person's hello has ended (the outbound demo's human_first_word_ms went
negative: the gate takes the carrier's human at once, so the agent spoke over the hello)."""

from __future__ import annotations

import asyncio

import pytest

from voicecore.carriers import registry
from voicecore.sim import callee_core
from voicecore.sim import carrier_rest_core as core
from voicecore.sim.carrier import generate_credentials
from voicecore.sim.carrier_rest import CarrierRestServer, OutboundCallSeen

STREAM_LATE_S = 0.3
AMD_AT_MS = 100


def _seen(carrier: str) -> OutboundCallSeen:
    placed = core.PlacedCallRequest("acct", "CA" + "0" * 32, "+15550100001", "+15005550006", "http://x/voice", "",
                                    "http://x/status", (), "Enable", True, carrier=carrier, amd_callback="http://x/amd")
    seen = OutboundCallSeen(placed, callee_core.plan_callee("human", 1), [])
    seen.carrier_amd = callee_core.CarrierAmd("human", AMD_AT_MS, True)
    if registry.get(carrier).simulator.answered_call_has_own_id:
        seen.call_uuid = "11111111-2222-4333-8444-555555555555"
    return seen


@pytest.mark.parametrize("carrier", ["twilio", "telnyx", "plivo", "vonage"])
def test_the_carriers_amd_answer_counts_from_the_stream_not_from_the_answer(carrier):
    async def run():
        rest = CarrierRestServer(generate_credentials("tok"))
        loop = asyncio.get_running_loop()
        sent: list[float] = []

        async def post(*_args):
            sent.append(loop.time())
            return 204

        rest._callback = lambda *_args: post()
        seen = _seen(carrier)
        answered_at = loop.time()  # the answer's status: the stream opens STREAM_LATE_S later
        task = loop.create_task(rest._carrier_amd(seen, registry.get(carrier).simulator))
        await asyncio.sleep(STREAM_LATE_S)
        opened_at = loop.time()
        rest.register(carrier, seen.call_uuid or seen.placed.call_sid, lambda _action: None)
        await asyncio.wait_for(task, 5)
        return answered_at, opened_at, sent, seen

    answered_at, opened_at, sent, seen = asyncio.run(run())
    assert len(sent) == 1 and seen.amd_status == 204
    assert sent[0] - opened_at >= AMD_AT_MS / 1000 - 0.005  # AMD_AT_MS of the callee's audio heard first
    assert sent[0] - answered_at >= STREAM_LATE_S + AMD_AT_MS / 1000 - 0.005
