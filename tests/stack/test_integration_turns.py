"""The turn-taking controller in the live model worker (VOICECORE_CALL_CONTROL=turns): a real call is
recorded, and its record replays identically through a fresh controller (INV-REPLAY)."""

from __future__ import annotations

import asyncio
import http.server
import json
import secrets
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
from stacks import start_stack
from waiting import wait_until

from voicecore.demo import demo_script
from voicecore.sim.carrier import CallScript, place_call
from voicecore.sim.model.faults import FaultRequest
from voicecore.sim.model_server import now_ms

pytestmark = pytest.mark.integration

DROP_AFTER_MS = 9000  # the vendor fails 9 s in: after the first question was answered, before the barge-in


async def _drop_first_session(sim, call_sid: str, after_ms: int) -> None:
    """SimConfig.drop_after_ms for one call only (it applies to every call on the simulator): the call's first
    model session is closed with 1011, as on a vendor's internal error, ``after_ms`` after it opened."""
    while not sim.by_call(call_sid):
        await asyncio.sleep(0.005)
    (first,) = sim.by_call(call_sid)
    await asyncio.sleep(max(0, first.record.connected_ms + after_ms - now_ms()) / 1000)
    assert sim.apply_fault(FaultRequest("drop_1011", call=call_sid)) == 1


@pytest.fixture(scope="module")
def turns_calls(turns_stack):
    """The live call and the call whose model session is dropped, placed at once on the shared stack: each waits
    on the clock (the demo caller's 16 s), not the CPU, so side by side they take the time of one. The
    simulator, and each call's CallResult or the exception it raised."""
    running = turns_stack
    dropped_sid = "CA" + secrets.token_hex(16)

    async def calls():
        async with running.model_sim() as sim:
            async def dropped_call():
                dropper = asyncio.create_task(_drop_first_session(sim, dropped_sid, DROP_AFTER_MS))
                try:
                    return await place_call(running.config.base_url, running.config.twilio_auth_token,
                                            demo_script(16), call_sid=dropped_sid)
                finally:
                    if dropper.done():
                        dropper.result()  # the drop's own failure
                    else:
                        dropper.cancel()  # never dropped: the test finds one session, not two

            live, dropped = await asyncio.gather(
                place_call(running.config.base_url, running.config.twilio_auth_token, demo_script(16)), dropped_call(),
                return_exceptions=True)
            return sim, {"live": live, "dropped": dropped}

    return asyncio.run(calls())


def _placed(turns_calls, name: str):
    """The simulator and the named call; the call's own failure fails its own test."""
    sim, results = turns_calls
    if isinstance(results[name], BaseException):
        raise results[name]
    return sim, results[name]


def test_a_live_call_under_the_controller_is_recorded_and_replays_identically(turns_stack, turns_calls):
    running = turns_stack
    sim, result = _placed(turns_calls, "live")
    assert result.closed_by == "carrier", running.log_tail()
    assert result.statistics.stale_frames == 0
    assert result.statistics.clears_received >= 1  # the caller's speech interrupted the agent
    (session,) = sim.by_call(result.call_sid)
    # the flow's greeting: a scripted line, after the session's instructions (the vendor replaces them for the response)
    greeting = session.record.responses[0].instructions
    assert greeting.startswith("You are a helpful phone assistant.")
    assert greeting.rstrip().endswith('Say exactly: "Hello, thanks for calling. How can I help you today?"')
    record = Path(running.config.record_dir) / f"{result.call_sid}.jsonl"
    wait_until(record.exists, 10, f"the call's record {record.name}", detail=running.log_tail)
    assert (record.stat().st_mode & 0o777) == 0o600
    replay = subprocess.run([sys.executable, "-m", "voicecore.cli", "replay", str(record), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert '"identical": true' in replay.stdout


class _FakeTwilioRest(http.server.BaseHTTPRequestHandler):
    """Twilio's Calls resource, as far as a hang-up needs it; remembers what it was sent."""

    requests: list[tuple[str, str, str, bytes]] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).requests.append((self.command, self.path, self.headers.get("Authorization", ""), body))
        answer = json.dumps({"sid": self.path.rsplit("/", 1)[-1].removesuffix(".json"), "status": "completed"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def _goodbye_call(running, duration_ms: int):
    """One call that presses '#' 7 s in (the default agent's flow says goodbye and hangs up)."""
    script = CallScript(duration_ms=duration_ms, dtmf=((7000, "#"),))

    async def call():
        async with running.model_sim():
            return await place_call(running.config.base_url, running.config.twilio_auth_token, script)

    return asyncio.run(call())


def test_the_controller_hangs_up_through_the_rest_api_after_the_goodbye_played():
    rest = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeTwilioRest)
    threading.Thread(target=rest.serve_forever, daemon=True).start()
    _FakeTwilioRest.requests = []
    running = start_stack(call_control="turns", twilio_api_base=f"http://127.0.0.1:{rest.server_address[1]}")
    try:
        result = _goodbye_call(running, duration_ms=20_000)
        wait_until(lambda: _FakeTwilioRest.requests, 5, "the hang-up request to the fake Twilio REST API",
                   detail=running.log_tail)
        method, path, authorization, body = _FakeTwilioRest.requests[0]
        assert (method, path.endswith(f"/Calls/{result.call_sid}.json")) == ("POST", True)
        assert "/2010-04-01/Accounts/AC" in path
        assert authorization.startswith("Basic ")
        assert urllib.parse.parse_qs(body.decode()) == {"Status": ["completed"]}
        assert "hangup sent to Twilio" in running.log_tail(20000)
    finally:
        running.stop()
        rest.shutdown()


def test_a_hang_up_the_rest_api_cannot_take_closes_the_stream_instead_of_leaving_dead_air():
    """The REST API unreachable (a port nobody listens on): after its retries the gateway closes the stream,
    which ends a call whose TwiML has nothing after <Connect>, instead of the caller holding on in silence."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    running = start_stack(call_control="turns", twilio_api_base=f"http://127.0.0.1:{dead_port}")
    try:
        result = _goodbye_call(running, duration_ms=25_000)
        log = running.log_tail(20000)
        assert result.closed_by == "server" and result.close_code == 1000, (result.closed_by, result.close_code, log)
        assert "hangup failed: ConnectionRefusedError" in log
        assert "hangup not sent; the gateway closes the stream instead" in log
        assert "stream closed for the agent (rest_failed)" in log
    finally:
        running.stop()


def test_a_model_session_the_vendor_drops_mid_call_is_reopened_with_the_conversation_so_far(turns_stack, turns_calls):
    running = turns_stack
    sim, result = _placed(turns_calls, "dropped")
    assert result.closed_by == "carrier", running.log_tail()
    assert result.statistics.stale_frames == 0
    first, second = sim.by_call(result.call_sid)
    assert first.record.closed_ms - first.record.connected_ms >= DROP_AFTER_MS
    reconnect_ms = second.record.connected_ms - first.record.closed_ms
    assert 0 <= reconnect_ms <= 600, reconnect_ms  # the first reconnect: 0.1-0.3 s, jittered
    # the new session was given what was said before the drop (the greeting and the first answer), before
    # anything else was asked of it
    restored = second.record.client_events.get("conversation.item.create", 0)
    said_before = [r for r in first.record.responses if r.text]
    assert restored >= len(said_before) >= 2, (restored, len(said_before))
    # and the call went on: audio reached the caller after the reconnect
    assert any(frame.arrival_ms > second.record.connected_ms + 500 for frame in result.core.frames)
    record = Path(running.config.record_dir) / f"{result.call_sid}.jsonl"
    wait_until(record.exists, 10, f"the call's record {record.name}", detail=running.log_tail)
    replay = subprocess.run([sys.executable, "-m", "voicecore.cli", "replay", str(record), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0 and '"identical": true' in replay.stdout, replay.stdout + replay.stderr
