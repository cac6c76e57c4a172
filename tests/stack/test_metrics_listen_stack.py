"""/metrics kept to this host, in a real stack: with the default (metrics_listen = local) the gateway answers
/metrics to a loopback peer and refuses a request a proxy forwarded; with an address of its own the gateway's
port answers 404 and that listener serves /metrics and /healthz alone."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from stacks import start_stack
from voicecore.demo import free_port
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration


def get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_local_metrics_refuse_a_forwarded_request(default_stack):
    listen = default_stack.config.listen
    status, body = get(f"http://{listen}/metrics")
    assert status == 200 and "gateway" in json.loads(body)
    for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP"):
        status, body = get(f"http://{listen}/metrics", {header: "203.0.113.9"})
        assert status == 403 and b"metrics_listen" in body, header
    assert get(f"http://{listen}/healthz", {"X-Forwarded-For": "203.0.113.9"})[0] == 200  # only /metrics is kept


def test_metrics_on_a_listener_of_their_own():
    metrics = f"127.0.0.1:{free_port()}"
    stack = start_stack(metrics_listen=metrics)
    try:
        listen = stack.config.listen
        assert get(f"http://{listen}/metrics")[0] == 404
        status, body = get(f"http://{metrics}/metrics?format=prometheus")
        assert status == 200 and b"voicecore_calls_active" in body
        assert get(f"http://{metrics}/healthz")[0] == 200
        assert get(f"http://{metrics}/twilio/voice")[0] == 404  # nothing else is served there
        status, body = get_from_gateway(stack.config, "/metrics")  # what the demo, bench and drain read
        assert status == 200 and "gateway" in json.loads(body)
    finally:
        stack.stop()
