"""The gateway under bad input (bad input harms nothing else: docs/explanation/measured.md#bad-input): the bench's
attacker (bench/badinput.py) against a real stack while a real call runs, and the gateway bugs its campaign found,
each pinned by a focused check on the same stack: a form body that is not ASCII escaped the event loop (no answer at
all), a body that never ends held its place among the pending connections for ever, a request head over 16 KiB got
through when it arrived in one segment, frames with reserved bits set were read as if clear, and a peer's close code
that no endpoint may send (1006, 5000 and up) was echoed back."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import time

import pytest
from stacks import start_stack

from bench.badinput import (TOKEN_ENV, Conn, build_strategies, expected_first_message, peer_close_answer,
                            strict_form, ws_frame)
from voicecore.callreport import summarize
from voicecore.demo import demo_script
from voicecore.sim.carrier import place_call
from voicecore.supervise import REPO_ROOT, get_from_gateway
from workers.gateway.core import peer_close_code_is_valid
from workers.gateway.main import HEAD_TIMEOUT_S

pytestmark = pytest.mark.integration

PER_ADDRESS = 8
ATTACK_S = 12
CALL_S = 10


@pytest.fixture(scope="module")
def stack():
    running = start_stack(max_calls=8, max_pending_per_address=PER_ADDRESS)
    yield running
    running.stop()


def address(stack) -> tuple[str, int]:
    host, port = stack.config.listen.rsplit(":", 1)
    return host, int(port)


def pending(stack) -> int:
    return json.loads(get_from_gateway(stack.config, "/metrics")[1])["gateway"]["connections_pending"]


async def http_answer(stack, data: bytes, timeout: float = 3.0) -> str:
    conn = await Conn.open(*address(stack), "127.0.3.1")
    try:
        conn.send(data)
        return await conn.http_status(timeout)
    finally:
        conn.close()


async def ws_answer(stack, data: bytes) -> str:
    conn = await Conn.open(*address(stack), "127.0.3.2")
    try:
        assert await conn.upgrade() == "ok"
        conn.send(data)
        return await conn.ws_outcome(3.0)
    finally:
        conn.close()


# ----- the pure parts ---------------------------------------------------------------------------------


def test_close_codes_a_peer_may_send():
    assert all(peer_close_code_is_valid(c) for c in (1000, 1001, 1002, 1003, 1007, 1011, 1014, 3000, 4999))
    assert not any(peer_close_code_is_valid(c) for c in (0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535))


def test_the_oracle_reads_the_documented_rules():
    assert strict_form(b"a=1&b=") == {"a": "1", "b": ""}
    assert strict_form(b"a\xff=1") is None and strict_form(b"novalue") is None and strict_form(b"a=%ff") is None
    assert expected_first_message(b"{not json") == "ws 1007"
    assert expected_first_message(b"[1]") == "ws 1007"
    assert expected_first_message(b'{"event":"clear"}') == "ws 1008"
    assert expected_first_message(b'{"event":"connected","protocol":"Call","version":"1"}') == "ws 1008"
    assert expected_first_message(b'{"event":"media","x":"' + b"a" * 70_000 + b'"}') == "ws 1009"
    assert peer_close_answer(None, b"") == "ws 1000"
    assert peer_close_answer(1006, b"") == "ws 1002"
    assert peer_close_answer(4000, b"\xff") == "ws 1007"
    assert set(build_strategies()) >= {"http_signature", "flood", "ws_stream", "ws_frames", "ws_never_start"}


# ----- the bugs the campaign found, one by one --------------------------------------------------------


def test_a_form_body_that_is_not_ascii_is_answered_400(stack):
    body = b"CallSid=\xff"
    request = b"POST /twilio/voice HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert asyncio.run(http_answer(stack, request)) == "http 400"
    assert "Traceback" not in stack.log_tail(200_000)


def test_a_body_that_never_ends_is_timed_out_and_gives_its_place_back(stack):
    async def slow_body() -> tuple[str, float]:
        conn = await Conn.open(*address(stack), "127.0.3.3")
        opened = time.monotonic()
        try:
            conn.send(b"POST /twilio/voice HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nCallSid=CA")
            return await conn.http_status(HEAD_TIMEOUT_S + 3), time.monotonic() - opened
        finally:
            conn.close()

    answer, waited = asyncio.run(slow_body())
    assert answer == "http 408" and HEAD_TIMEOUT_S - 0.5 <= waited <= HEAD_TIMEOUT_S + 2
    deadline = time.monotonic() + 3
    while pending(stack) > 1 and time.monotonic() < deadline:  # 1: the /metrics request itself
        time.sleep(0.1)
    assert pending(stack) == 1


def test_a_head_over_16_kib_is_431_even_in_one_segment(stack):
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 17_000 + b"\r\n\r\n"
    assert asyncio.run(http_answer(stack, request)) == "http 431"
    assert asyncio.run(http_answer(stack, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 15_000 + b"\r\n\r\n")) == "http 200"


def test_reserved_bits_fail_the_stream_with_1002(stack):
    for rsv in (1, 2, 4):
        assert asyncio.run(ws_answer(stack, ws_frame(0x1, b'{"event":"connected"}', rsv=rsv))) == "ws 1002"


def test_a_close_code_no_peer_may_send_is_not_echoed(stack):
    def close(code: int) -> bytes:
        return ws_frame(0x8, struct.pack("!H", code))

    assert asyncio.run(ws_answer(stack, close(1006))) == "ws 1002"
    assert asyncio.run(ws_answer(stack, close(5000))) == "ws 1002"
    assert asyncio.run(ws_answer(stack, close(4000))) == "ws 4000"
    assert asyncio.run(ws_answer(stack, close(1000))) == "ws 1000"


# ----- the campaign ------------------------------------------------------------------------------------


def test_the_campaign_during_a_real_call(stack, tmp_path):
    """Every kind of bad input from the attacker process for ATTACK_S while a real call runs from 127.0.0.1:
    every input answered as documented, no process died or logged a traceback, the call served as usual."""
    config = stack.config
    out = tmp_path / "badinput.json"
    pids_before = stack.stack.program_pids()
    env = dict(os.environ, **{TOKEN_ENV: config.twilio_auth_token})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    attacker = subprocess.Popen(
        [sys.executable, "-m", "bench.badinput", "--base-url", config.base_url, "--seconds", str(ATTACK_S),
         "--pool", "40", "--per-address-cap", str(PER_ADDRESS), "--max-pending", "64", "--json", str(out)],
        env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert attacker.stdout.readline().strip() == "ready"  # its inputs are drawn: the attack starts now

        async def call():
            async with stack.model_sim() as sim:
                await asyncio.sleep(1.0)  # the call starts under attack
                return sim, await place_call(config.base_url, config.twilio_auth_token, demo_script(CALL_S))

        sim, result = asyncio.run(call())
        assert attacker.wait(ATTACK_S + 20) == 0
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait()
    time.sleep(1.0)
    campaign = json.loads(out.read_text())
    unexpected = {kind: entry["unexpected"] for kind, entry in campaign["by_kind"].items() if entry["unexpected"]}
    assert campaign["unexpected_total"] == 0, unexpected
    assert campaign["inputs_tried"] >= 300 and campaign["attacker_errors"] == 0, campaign
    assert len(campaign["by_kind"]) >= 14, sorted(campaign["by_kind"])  # the kinds that run at least once in 12 s
    assert stack.stack.program_pids() == pids_before  # nothing died or restarted
    assert "Traceback" not in stack.log_tail(2_000_000)
    # the real call: served, its audio reached the caller, nothing stale
    assert result.closed_by == "carrier" and not result.errors, (result.errors, stack.log_tail())
    report = summarize([result], sim, seconds=CALL_S, cpu_seconds=0.0, wall_seconds=CALL_S)
    assert len(result.core.frames) > 200 and report["stale_frames"] == 0, report
