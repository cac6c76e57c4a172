"""The end-of-call webhook: what it says, how it is signed, and how it is delivered (a real loopback server)."""

from __future__ import annotations

import json
import time

from voicecore.sim.tool_server import Route
from voicecore.store import webhook
from workers.recorder.webhook import WebhookSender

from threaded_tool_server import serve

SECRET = "s3cret"
CALL = {
    "call_sid": "CA" + "1" * 32, "agent": "receptionist", "outcome": "hangup:completed", "started_at": 1795598977.5,
    "ended_at": 1795599007.5, "duration_ms": 30_017,
    "turns": [{"latency_ms": 260, "barged_in_ms": 10_124}, {"latency_ms": 224, "barged_in_ms": None},
              {"latency_ms": None, "barged_in_ms": None}],
    "tool_calls": [{"name": "book", "arguments": "{}", "ok": True, "output": '{"booked": true}', "ran": True}],
    "transcript": [{"speaker": "agent", "text": "Hello.", "at_ms": 1264, "extra": "x"}],
}


def test_the_summary_holds_outcome_duration_turns_latency_tools_and_transcript():
    summary = webhook.call_summary(CALL)
    assert summary["event"] == "call.ended" and summary["call_sid"] == CALL["call_sid"]
    assert (summary["outcome"], summary["duration_s"], summary["turns"], summary["bargeins"]) == ("hangup:completed", 30.017, 3, 1)
    assert summary["latency_ms"]["max"] == 260 and summary["latency_ms"]["p50"] is not None
    assert summary["tool_calls"] == [{"name": "book", "arguments": "{}", "ok": True, "output": '{"booked": true}'}]
    assert summary["transcript"] == [{"speaker": "agent", "text": "Hello.", "at_ms": 1264}]


def test_a_signature_verifies_and_a_tampered_or_stale_one_does_not():
    body = webhook.encode(webhook.call_summary(CALL))
    header = webhook.signature(SECRET, 1_000_000, body)
    assert header.startswith("t=1000000,v1=") and webhook.verify(SECRET, header, body, now_s=1_000_010)
    assert not webhook.verify(SECRET, header, body + b" ", now_s=1_000_010)
    assert not webhook.verify("other", header, body, now_s=1_000_010)
    assert not webhook.verify(SECRET, header, body, now_s=1_000_000 + webhook.DEFAULT_TOLERANCE_S + 1)
    assert not webhook.verify(SECRET, "v1=abc", body, now_s=1_000_000)


def test_a_5xx_is_retried_and_the_delivery_is_signed():
    server, base, stop = serve([Route("POST", "/calls", status=503, times=1), Route("POST", "/calls", status=200)])
    try:
        sender = WebhookSender(base + "/calls", SECRET, backoff_s=(0.01,))
        sender.submit(CALL["call_sid"], webhook.call_summary(CALL))
        sender.close()
        assert (sender.counters["webhooks_sent"], sender.counters["webhook_retries"], sender.counters["webhooks_failed"]) == (1, 1, 0)
        assert len(server.requests) == 2
        last = server.requests[-1]
        assert webhook.verify(SECRET, last.headers["x-voicecore-signature"], last.body, now_s=time.time())
        assert json.loads(last.body)["call_sid"] == CALL["call_sid"]
    finally:
        stop()


def test_a_4xx_is_not_retried_and_counted_as_failed():
    server, base, stop = serve([Route("POST", "/calls", status=400)])
    try:
        sender = WebhookSender(base + "/calls", SECRET, backoff_s=(0.01,))
        sender.submit(CALL["call_sid"], webhook.call_summary(CALL))
        sender.close()
        assert len(server.requests) == 1 and sender.counters["webhooks_failed"] == 1
    finally:
        stop()


def test_a_receiver_that_is_down_costs_attempts_not_the_recorder():
    sender = WebhookSender("http://127.0.0.1:9/calls", SECRET, backoff_s=(0.01,))  # nothing listens on port 9
    started = time.monotonic()
    sender.submit(CALL["call_sid"], webhook.call_summary(CALL))
    assert time.monotonic() - started < 0.05  # submit never waits for the delivery
    sender.close()
    assert sender.counters["webhooks_failed"] == 1 and sender.counters["webhook_retries"] == 4
