"""The end-of-call webhook from a whole stack: a call through it is summarized, signed and posted to a real
loopback receiver once the call is stored (what the summary says and how it is delivered:
tests/component/test_call_webhook.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from stacks import start_stack
from threaded_tool_server import serve
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.sim.tool_server import Route
from voicecore.store import webhook

SECRET = "s3cret"


@pytest.mark.integration
def test_a_call_through_the_stack_is_summarized_to_the_webhook_once_stored():
    server, base, stop = serve([Route("POST", "/calls", status=200)])
    running = start_stack(call_webhook_url=base + "/calls", call_webhook_secret=SECRET)
    try:
        async def call():
            async with running.model_sim():
                script = CallScript(duration_ms=9000, utterances=((5000, load_clip("caller_basic_price")),), bargein_at_ms=())
                return await place_call(running.config.base_url, running.config.twilio_auth_token, script)

        result = asyncio.run(call())
        assert result.closed_by == "carrier", running.log_tail()
        deadline = time.monotonic() + 15
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(server.requests) == 1, running.log_tail()
        request = server.requests[0]
        assert webhook.verify(SECRET, request.headers["x-voicecore-signature"], request.body, now_s=time.time())
        summary = json.loads(request.body)
        assert summary["call_sid"] == result.call_sid and summary["event"] == "call.ended"
        assert summary["turns"] >= 1 and summary["transcript"]
    finally:
        running.stop()
        stop()
