"""A flood of connections that never authenticate, from one address, while a real call runs from another:
the gateway holds at most max_pending_per_address of them, answers the rest 503 at once, closes the held
ones after HEAD_TIMEOUT_S with 408, and the real call is served as if nothing happened."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from stacks import start_stack

from voicecore.demo import demo_script
from voicecore.sim.carrier import place_call
from voicecore.supervise import get_from_gateway
from workers.gateway.main import HEAD_TIMEOUT_S

pytestmark = pytest.mark.integration

FLOOD = 40
PER_ADDRESS = 8


def open_idle(host: str, port: int, source: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, port))
    sock.settimeout(0.5)
    return sock


def answer(sock: socket.socket) -> bytes:
    try:
        return sock.recv(200)
    except TimeoutError:
        return b""  # held: nothing said yet


def test_a_flood_from_one_address_is_capped_timed_out_and_harms_no_call():
    running = start_stack(max_pending_per_address=PER_ADDRESS)
    flood: list[socket.socket] = []
    try:
        config = running.config
        host, port = config.listen.rsplit(":", 1)
        flood = [open_idle(host, int(port), "127.0.0.2") for _ in range(FLOOD)]
        opened = time.monotonic()
        answers = [answer(sock) for sock in flood]
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        held = [sock for sock, a in zip(flood, answers) if a == b""]
        assert len(refused) == FLOOD - PER_ADDRESS and len(held) == PER_ADDRESS, answers
        metrics = json.loads(get_from_gateway(config, "/metrics")[1])["gateway"]
        assert metrics["connections_refused"] == FLOOD - PER_ADDRESS and metrics["connections_pending"] >= PER_ADDRESS

        async def call():  # from 127.0.0.1: its own place, the flood's cap does not touch it
            async with running.model_sim():
                return await place_call(config.base_url, config.twilio_auth_token, demo_script(14))

        result = asyncio.run(call())
        assert result.closed_by == "carrier" and not result.errors, running.log_tail()
        assert len(result.core.frames) > 300  # the greeting and two answers reached the caller

        # the held ones never sent a request head: 408 and closed once HEAD_TIMEOUT_S passed
        for sock in held:
            sock.settimeout(max(0.1, HEAD_TIMEOUT_S + 2 - (time.monotonic() - opened)))
            assert sock.recv(200).startswith(b"HTTP/1.1 408")
        metrics = json.loads(get_from_gateway(config, "/metrics")[1])["gateway"]
        assert metrics["head_timeouts"] == PER_ADDRESS
        assert metrics["connections_pending"] == 1  # the /metrics request itself, while it is being answered
        # and the address may connect again
        again = open_idle(host, int(port), "127.0.0.2")
        again.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        again.settimeout(2)
        assert again.recv(200).startswith(b"HTTP/1.1 200")
        again.close()
        assert "refused" in running.log_tail(100_000)  # the flood is named in the log
    finally:
        for sock in flood:
            sock.close()
        running.stop()
