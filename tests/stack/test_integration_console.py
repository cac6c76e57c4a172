"""The console worker in a real stack: observers of a live call (ten at once and a late joiner) get every
event once and in order, the API answers only with a key, a stored call has its turns, events, waveform
and stereo WAV."""

from __future__ import annotations

import asyncio
import io
import json
import time
import urllib.error
import urllib.request
import wave

import orjson
import pytest
import websockets
from stacks import start_stack
from websockets.asyncio.client import connect
from waiting import wait_until

from voicecore.demo import BARGE_IN_AT_MS, FIRST_QUESTION_AT_MS
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.store import CallStore, database_url_for
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration


def call_script() -> CallScript:
    return CallScript(duration_ms=14_000, utterances=((FIRST_QUESTION_AT_MS, load_clip("caller_basic_price")),
                                                      (BARGE_IN_AT_MS, load_clip("caller_interrupt"))),
                      bargein_at_ms=(BARGE_IN_AT_MS,))


def get(base: str, path: str, key: str | None = None) -> tuple[int, bytes, dict]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


async def observe_until_ended(url: str, key: str, into: list[dict], timeout_s: float = 40.0) -> None:
    async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10) as ws:
        async with asyncio.timeout(timeout_s):
            async for message in ws:
                event = orjson.loads(message)
                into.append(event)
                if event["type"] == "call.ended":
                    return


def test_observers_and_the_console_api_on_a_real_call():
    running = start_stack()
    try:
        config = running.config
        base = f"http://{config.console_listen}"
        ws_base = f"ws://{config.console_listen}/observe"
        wait_until(lambda: json.loads(get_from_gateway(config, "/healthz")[1])["workers_alive"].get("console"),
                   15, "the console's heartbeat at the gateway", detail=running.log_tail)
        with CallStore.open(database_url_for(config)) as store:
            key = store.add_api_key("test")

        # without a key: nothing but the pages and health
        assert get(base, "/api/calls")[0] == 401 and get(base, "/api/calls", "vck_wrong")[0] == 401
        assert get(base, "/healthz")[0] == 200
        status, body, headers = get(base, "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html") and headers["X-Frame-Options"] == "DENY"
        assert get(base, "/static/../../config.py")[0] == 404

        async def scenario() -> dict:
            async def no_key() -> int:
                try:
                    async with connect(ws_base, open_timeout=5):
                        return 101
                except websockets.InvalidStatus as exc:
                    return exc.response.status_code

            assert await no_key() == 401
            everything: list[dict] = []
            firehose = asyncio.create_task(observe_until_ended(ws_base, key, everything))
            await asyncio.sleep(0.5)
            async with running.model_sim():
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, call_script()))
                deadline = time.monotonic() + 15
                while not everything and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                assert everything, "no live event on the every-call observer"
                sid = everything[0]["call_sid"]
                assert everything[0]["type"] == "call.started" and everything[0]["seq"] == 1
                ten = [[] for _ in range(10)]
                observers = [asyncio.create_task(observe_until_ended(f"{ws_base}?call={sid}", key, into)) for into in ten]
                await asyncio.sleep(6)  # mid-call: the late joiner starts from the store
                late: list[dict] = []
                late_task = asyncio.create_task(observe_until_ended(f"{ws_base}?call={sid}&since=0", key, late))
                result = await call
                await asyncio.gather(*observers, late_task, firehose)
            return {"sid": sid, "result": result, "ten": ten, "late": late, "everything": everything}

        seen = asyncio.run(scenario())
        sid = seen["sid"]
        assert seen["result"].closed_by == "carrier", running.log_tail()
        reference = [(e["seq"], e["type"]) for e in seen["late"]]
        assert [seq for seq, _ in reference] == list(range(1, len(reference) + 1)), "the late joiner's sequence has a gap"
        assert reference[0][1] == "call.started" and reference[-1][1] == "call.ended"
        types = {kind for _, kind in reference}
        assert {"turn.caller_started", "turn.caller_ended", "transcript.delta", "response.started", "response.audio",
                "bargein"} <= types, types
        for events in seen["ten"]:
            assert [(e["seq"], e["type"]) for e in events] == reference  # each: every event, in order, once
        assert [(e["seq"], e["type"]) for e in seen["everything"]] == reference
        print(f"\nconsole: 11 observers got the same {len(reference)} events of call {sid}")

        # the stored call, through the API
        with CallStore.open(database_url_for(config)) as store:
            wait_until(lambda: store.call(sid) is not None, 15, "the call in the store", detail=running.log_tail)
        status, body, _ = get(base, "/api/calls", key)
        assert status == 200 and sid in [c["call_sid"] for c in json.loads(body)["calls"]]
        status, body, _ = get(base, f"/api/calls/{sid}", key)
        detail = json.loads(body)
        assert status == 200 and detail["stored"] and not detail["live"] and detail["last_seq"] == len(reference)
        assert detail["call"]["turns"] and any(t["speaker"] == "agent" for t in detail["call"]["transcript"])
        status, body, _ = get(base, f"/api/calls/{sid}/events?since=3", key)
        assert status == 200 and [e["seq"] for e in json.loads(body)] == list(range(4, len(reference) + 1))
        status, body, _ = get(base, f"/api/calls/{sid}/waveform?points=200", key)
        waveform = json.loads(body)
        assert status == 200 and len(waveform["caller"]) == len(waveform["agent"]) == 200
        # the default agent stores under the `redacted` tier: no caller audio is kept (docs/how-to/privacy.md)
        assert max(waveform["agent"]) > 0.05 and max(waveform["caller"]) == 0 and 12_000 <= waveform["duration_ms"] <= 20_000
        status, body, headers = get(base, f"/api/calls/{sid}/audio.wav", key)
        assert status == 200 and headers["Content-Type"] == "audio/wav"
        with wave.open(io.BytesIO(body)) as wav:
            assert (wav.getnchannels(), wav.getframerate()) == (2, 8000) and wav.getnframes() > 8000 * 10
        assert get(base, "/api/calls/CAnosuchcall/waveform", key)[0] == 404
        assert get(base, "/api/calls?since=yesterday", key)[0] == 400
    finally:
        running.stop()
