"""orjson against json.loads on the two JSON streams voicecore parses per call.

Why `orjson` (docs/explanation/architecture.md#tree, the dependencies): strict JSON parsing at a third of
`json.loads`' cost: Twilio media in the gateway, Realtime deltas in the model worker. Parsing only, the same
bytes both ways: Twilio's media message (what TwilioStreamProtocol.receive_text parses when the fast path
declines) and a Realtime `response.output_audio.delta` of 1,100 bytes of audio (the middle of the model
simulator's 300-1,900 byte deltas), as bytes, which is what picows hands the model worker.
"""

from __future__ import annotations

import base64
import json

import orjson
import pytest

from bench.micro.bench_twilio import media_message

TWILIO_MEDIA = media_message(1234)
REALTIME_DELTA = json.dumps({
    "type": "response.output_audio.delta",
    "event_id": "event_" + "a1b2c3d4e5f6a7b8c9d0",
    "response_id": "resp_" + "0a1b2c3d4e5f6a7b8c9d",
    "item_id": "item_" + "f0e1d2c3b4a5968778695a4b",
    "output_index": 0,
    "content_index": 0,
    "delta": base64.b64encode(bytes((i * 91) % 256 for i in range(1100))).decode(),
}, separators=(",", ":")).encode()


@pytest.mark.benchmark(group="json: twilio media message")
def test_twilio_media_orjson(benchmark):
    assert benchmark(orjson.loads, TWILIO_MEDIA)["event"] == "media"


@pytest.mark.benchmark(group="json: twilio media message")
def test_twilio_media_json(benchmark):
    assert benchmark(json.loads, TWILIO_MEDIA)["event"] == "media"


@pytest.mark.benchmark(group="json: realtime audio delta")
def test_realtime_delta_orjson(benchmark):
    assert benchmark(orjson.loads, REALTIME_DELTA)["output_index"] == 0


@pytest.mark.benchmark(group="json: realtime audio delta")
def test_realtime_delta_json(benchmark):
    assert benchmark(json.loads, REALTIME_DELTA)["output_index"] == 0
