"""Matching Twilio's media message in the gateway: the fast path against the full parse.

Caller audio in Twilio's exact shape takes a fast path (one regex, no JSON parse, no event object: 5.1 ->
2.6 us per message). Both paths of voicecore/carriers/twilio/stream.py, on the message Twilio sends (compact JSON,
key order of its captures, one 160-byte frame), on a protocol that has seen connected and start, as the
gateway's StreamConnection._on_message calls them.
"""

from __future__ import annotations

import base64
import json

import pytest

from voicecore.timing import FRAME_BYTES
from voicecore.carriers.twilio.stream import Media, TwilioStreamProtocol

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
CALL_SID = "CA" + "fedcba9876543210" * 2
STREAM_SID = "MZ" + "18ad3ab5a668481ce02b83e7395059f0"
FRAME = bytes((i * 37) % 256 for i in range(FRAME_BYTES))


def media_message(seq: int) -> bytes:
    """Twilio's media message byte for byte (docs/explanation/protocols.md#a5): no spaces, this key order."""
    message = {
        "event": "media",
        "sequenceNumber": str(seq),
        "media": {"track": "inbound", "chunk": str(seq - 1), "timestamp": str(20 * seq), "payload": base64.b64encode(FRAME).decode()},
        "streamSid": STREAM_SID,
    }
    return json.dumps(message, separators=(",", ":")).encode()


def streaming_protocol() -> TwilioStreamProtocol:
    protocol = TwilioStreamProtocol()
    protocol.receive_text(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
    start = {"event": "start", "sequenceNumber": "1", "streamSid": STREAM_SID, "start": {
        "accountSid": ACCOUNT_SID, "streamSid": STREAM_SID, "callSid": CALL_SID, "tracks": ["inbound"],
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        "customParameters": {"session_token": "tok"}}}
    protocol.receive_text(json.dumps(start))
    return protocol


MESSAGE = media_message(1234)


@pytest.mark.benchmark(group="twilio media message")
def test_media_fast_path(benchmark):
    """TwilioStreamProtocol.receive_media: regex fullmatch, strict base64, counters (the gateway's path)."""
    protocol = streaming_protocol()
    result = benchmark(protocol.receive_media, MESSAGE)
    assert result == (1234, 20 * 1234, FRAME)


@pytest.mark.benchmark(group="twilio media message")
def test_media_full_parse(benchmark):
    """TwilioStreamProtocol.receive_text: orjson, every field checked, a Media event (what the fast path skips)."""
    protocol = streaming_protocol()
    (event,) = benchmark(protocol.receive_text, MESSAGE)
    assert isinstance(event, Media) and event.payload == FRAME
