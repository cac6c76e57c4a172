"""The demo's Gemini simulator in a process of its own (voicecore/sim/gemini_process.py): it serves on loopback
with the settings it was given, and its connections' records come back to the parent when it is stopped."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect

from voicecore.gemini import protocol as gp
from voicecore.sim.gemini_core import GeminiSimConfig
from voicecore.sim.gemini_process import GeminiSimProcess
from voicecore.sim.gemini_records import GeminiRecords, report_figures

KEY = "sim-key"


def test_the_simulator_process_serves_and_hands_back_its_records() -> None:
    async def scenario() -> None:
        process = await GeminiSimProcess.start(GeminiSimConfig(api_keys=(KEY,), speed_factor=20.0))
        records = GeminiRecords(process)
        headers = {"X-Voicecore-Call": "CA-process-test"}
        async with connect(gp.live_url(KEY, f"ws://127.0.0.1:{records.port}{gp.LIVE_PATH}"),
                           additional_headers=headers) as ws:
            await ws.send(gp.setup("gemini-x", "be brief", automatic_activity_detection=False))
            await ws.send(gp.activity_start())
            await ws.send(gp.activity_end())
            while not any(isinstance(e, gp.TurnComplete) for e in gp.parse_server_message(await ws.recv())):
                pass
        async with connect(gp.live_url("wrong-key", f"ws://127.0.0.1:{records.port}{gp.LIVE_PATH}")) as refused:
            await refused.send(gp.setup("gemini-x", "be brief"))
            await asyncio.wait_for(refused.wait_closed(), 10)
        await records.aclose()
        assert process.process.returncode == 0
        (session,) = records.by_call("CA-process-test")
        (turn,) = session.record.responses
        assert turn.status == "completed" and turn.audio  # the turn's audio, as the carrier would receive it
        assert report_figures(records, None)["connections"] == 2 and report_figures(records, None)["refused"] == 1
        assert await records.process.stop() is records.connections  # stopping again hands back the same records

    asyncio.run(scenario())
