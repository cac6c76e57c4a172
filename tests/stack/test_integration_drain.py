"""Draining a node, with real processes (docs/how-to/drain.md): `voicecore drain` and SIGTERM to `voicecore up`.

While the node drains, the live call plays on to its normal end, a new voice webhook is refused (<Reject
reason="busy"/>, or <Redirect> to drain_redirect_url), /healthz answers 503, and a stream whose token was
issued before the drain is still served. After the last call ends the node stops by itself within a second
or two and leaves nothing in /dev/shm or the runtime dir. A short deadline ends a long call and counts it;
a standby gateway that takes over during a drain drains too."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
from stacks import start_stack
from waiting import wait_until

from voicecore import http_client, standby
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.demo import demo_script, free_port
from voicecore.sim import carrier
from voicecore.sim.carrier import place_call
from voicecore.supervise import get_from_gateway
from voicecore.carriers.twilio.signature import compute_signature

pytestmark = pytest.mark.integration

STOPPED_WITHIN_S = 5.0  # the last call's end to supervisord gone: about 1 s idle, 2-3 s on a loaded 2-core machine


def gateway_json(config, path: str) -> tuple[int, dict]:
    status, body = get_from_gateway(config, path, timeout_s=2.0)
    return status, json.loads(body)


async def gateway_json_async(config, path: str) -> tuple[int, dict]:
    status, body = await http_client.send("GET", f"http://{config.listen}{path}", timeout_s=2.0)
    return status, json.loads(body)


async def until(check, timeout_s: float, condition: str, detail=None):
    """``wait_until_async`` for a check that must itself await (a request to the gateway)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {condition}"
                        + (f"\n{detail()}" if detail else ""), pytrace=False)
        await asyncio.sleep(0.05)


async def calls_active_is(config, n: int) -> bool:
    return (await gateway_json_async(config, "/metrics"))[1]["gateway"]["calls_active"] == n


async def draining(config) -> bool:
    return (await gateway_json_async(config, "/healthz"))[0] == 503


async def voice_webhook(config, call_sid: str | None = None) -> tuple[int, bytes, dict]:
    """POST a signed voice webhook as Twilio does; (status, TwiML, the form sent)."""
    sid = call_sid or "CA" + os.urandom(16).hex()
    form = {"CallSid": sid, "AccountSid": "AC" + os.urandom(16).hex(), "From": "+15005550006", "To": "+15005550001"}
    url = config.base_url + "/twilio/voice"
    status, body = await carrier.http_request(
        "POST", url, form, [("X-Twilio-Signature", compute_signature(config.twilio_auth_token, url, form))])
    return status, body, form


async def serve_stream(target: carrier.StreamTarget, form: dict) -> tuple[bool, int | None]:
    """Open the stream the TwiML named, with its token, as Twilio does; (the agent's audio reached it, the close
    code after our stop)."""
    from websockets.asyncio.client import connect

    async with connect(target.url.replace("wss://", "ws://"), compression=None) as ws:
        stream_sid = "MZ" + os.urandom(16).hex()
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": stream_sid, "start": {
            "accountSid": form["AccountSid"], "streamSid": stream_sid, "callSid": form["CallSid"], "tracks": ["inbound"],
            "customParameters": target.parameters,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
        try:
            heard = json.loads(await asyncio.wait_for(ws.recv(), 10)).get("event") == "media"
        except (TimeoutError, Exception):
            heard = False
        await ws.send(json.dumps({"event": "stop", "sequenceNumber": "2", "streamSid": stream_sid,
                                  "stop": {"accountSid": form["AccountSid"], "callSid": form["CallSid"]}}))
        try:
            async for _ in ws:
                pass
        except Exception:
            pass
        return heard, ws.close_code


def arena_file(config) -> Path:
    return Path(config.shm_dir) / (Path(config.runtime_dir) / ARENA_NAME_FILE).read_text().strip()


def drain_command(config, *args: str) -> list[str]:
    return [sys.executable, "-m", "voicecore.cli", "drain", *args]


def test_a_drain_lets_the_live_call_finish_refuses_new_calls_and_stops_the_node():
    running = start_stack()
    drainer: subprocess.Popen | None = None
    try:
        config = running.config
        env = {**os.environ, **config.as_env()}
        arena = arena_file(config)
        seen: dict = {}

        async def scenario():
            nonlocal drainer
            async with running.model_sim():
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(14)))
                await until(lambda: calls_active_is(config, 1), 20, "the live call", detail=running.log_tail)
                # Twilio fetched the TwiML of a second call just before the drain: its stream is still owed to us
                status, body, early_form = await voice_webhook(config)
                assert status == 200
                early = carrier.parse_twiml(body)
                drainer = subprocess.Popen(drain_command(config), env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT)
                await until(lambda: draining(config), 5, "/healthz to answer 503", detail=running.log_tail)
                seen["health"] = (await gateway_json_async(config, "/healthz"))[1]
                seen["refused"] = await voice_webhook(config)
                seen["early"] = await serve_stream(early, early_form)  # accepted although the node drains
                seen["metrics"] = (await gateway_json_async(config, "/metrics"))[1]["gateway"]
                result = await call
                return result, time.monotonic()

        result, call_ended = asyncio.run(scenario())
        # the node stops by itself once the live call ended
        wait_until(lambda: running.stack.process.poll() is not None, 10, "supervisord to exit", interval_s=0.01,
                   detail=running.log_tail)
        stopped_after_s = time.monotonic() - call_ended
        output = drainer.communicate(timeout=30)[0].decode(errors="replace")
        print(f"the last call's end to the node stopped: {stopped_after_s:.2f} s")

        # The node stops within a second or two of its last call's end, so the carrier's stream-stopped
        # status callback, sent after the stream closed, may find nobody listening, or a listener that the
        # stopping gateway closes under it (refused, reset or cut off before an answer, by timing): the
        # drain did what it should (a fleet's callback URL would reach another node). Any other error is the call's.
        node_gone = {f"status callback stream-stopped failed: {name}"
                     for name in ("ConnectionRefusedError", "ConnectionResetError", "BrokenPipeError",
                                  "RemoteProtocolError")}
        errors = [e for e in result.errors if e not in node_gone]
        assert result.closed_by == "carrier" and not errors, running.log_tail()
        assert result.statistics.stale_frames == 0 and result.statistics.frames_received > 300
        assert seen["health"]["status"] == "draining" and seen["health"]["draining"] is True
        status, body, form = seen["refused"]
        assert status == 200
        root = ElementTree.fromstring(body)
        assert [(child.tag, child.attrib) for child in root] == [("Reject", {"reason": "busy"})]
        assert seen["early"] == (True, 1000), "the stream of a call answered before the drain was not served"
        metrics = seen["metrics"]
        assert metrics["draining"] == 1 and metrics["calls_refused_draining"] == 1
        assert metrics["drain_started_at"] > 0 and metrics["drain_deadline_at"] == pytest.approx(
            metrics["drain_started_at"] + config.drain_timeout_s)
        assert drainer.returncode == 0, output
        assert "voicecore drain: draining: 1 live call goes on, new calls are rejected (busy)" in output, output
        assert "voicecore drain: the node stopped" in output, output
        log = running.log_path.read_text()
        assert f"call {form['CallSid']}: refused, the node is draining (rejected busy)" in log
        assert "drained: stopping the node (1 calls refused, 0 ended at the deadline)" in log
        assert stopped_after_s < STOPPED_WITHIN_S, f"{stopped_after_s:.2f} s\n{running.log_tail()}"
        assert not arena.exists()
        assert not Path(config.runtime_dir).exists(), sorted(os.listdir(config.runtime_dir))
    finally:
        if drainer is not None and drainer.poll() is None:
            drainer.kill()
        running.stop()


def test_a_standby_gateway_that_takes_over_during_a_drain_drains_too():
    """The serving gateway dies mid-drain (its live call dies with it); the standby that takes over reads the
    drain from the runtime dir before it listens: it takes no call and stops the node."""
    running = start_stack()
    try:
        config = running.config

        async def scenario():
            async with running.model_sim():
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(12)))
                await until(lambda: calls_active_is(config, 1), 20, "the live call", detail=running.log_tail)
                drainer = await asyncio.create_subprocess_exec(*drain_command(config, "--no-wait"),
                                                               env={**os.environ, **config.as_env()})
                assert await asyncio.wait_for(drainer.wait(), 30) == 0
                await until(lambda: draining(config), 5, "/healthz to answer 503")
                os.kill(standby.leader_pid(config.runtime_dir, "gateway"), signal.SIGKILL)
                return await call

        lost = asyncio.run(scenario())
        assert lost.closed_by in ("connection_lost", "server")
        wait_until(lambda: running.stack.process.poll() is not None, 15, "the node to stop", detail=running.log_tail)
        log = running.log_path.read_text()
        takeover = log.index("gateway: taking over")
        assert "draining (asked by voicecore drain)" in log[takeover:], log[-4000:]
        assert "drained: stopping the node" in log[takeover:]
        assert "stream started" not in log[takeover:]
    finally:
        running.stop()


def test_sigterm_to_voicecore_up_drains_and_the_deadline_ends_a_long_call(tmp_path):
    """What Kubernetes does: SIGTERM to `voicecore up`. A call longer than drain_timeout_s is ended at the
    deadline (closed 1001 by the node, logged and counted); new calls meanwhile are redirected."""
    workdir = tmp_path
    port = free_port()
    redirect = "https://other-node.example.com/twilio/voice"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    env.update({
        "VOICECORE_LISTEN": f"127.0.0.1:{port}",
        "VOICECORE_SIM_PORT": str(free_port()),
        "VOICECORE_CONSOLE_LISTEN": f"127.0.0.1:{free_port()}",
        "VOICECORE_SEND_CALL_ID_TO_VENDOR": "true",
        "VOICECORE_RUNTIME_DIR": str(workdir / "run"),
        "VOICECORE_TWILIO_AUTH_TOKEN": "test-token",
        "VOICECORE_MAX_CALLS": "4",
        "VOICECORE_DRAIN_TIMEOUT_S": "3",
        "VOICECORE_DRAIN_REDIRECT_URL": redirect,
    })
    from voicecore.config import load_config

    config = load_config(env)
    up = subprocess.Popen([sys.executable, "-m", "voicecore.cli", "up"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    # read the stack's log as it comes: a full pipe would block supervisord's writes, and with them the stack
    read: list[bytes] = []
    ready = threading.Event()  # `voicecore up` said it listens: a signal before that stops it at once, by design

    def read_output() -> None:
        for line in up.stdout:
            read.append(line)
            if b"voicecore up: listening on" in line:
                ready.set()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()

    def output_when_exited(timeout_s: float) -> str:
        up.wait(timeout_s)
        reader.join(10)
        return b"".join(read).decode(errors="replace")

    def model_alive() -> bool:
        assert up.poll() is None, output_when_exited(10)
        try:
            return gateway_json(config, "/healthz")[1]["workers_alive"].get("model", False)
        except (OSError, ValueError):
            return False

    try:
        wait_until(model_alive, 180, "/healthz to report the model worker alive", interval_s=0.3)
        wait_until(ready.is_set, 60, "voicecore up to say it listens", interval_s=0.1)
        arena = arena_file(config)
        seen: dict = {}

        async def scenario():
            call = asyncio.create_task(place_call(config.base_url, "test-token", demo_script(20)))
            await until(lambda: calls_active_is(config, 1), 20, "the live call")
            up.send_signal(signal.SIGTERM)
            drain_began = time.monotonic()
            await until(lambda: draining(config), 5, "/healthz to answer 503")
            seen["redirected"] = await voice_webhook(config)
            result = await call
            return result, time.monotonic() - drain_began

        result, call_lasted_s = asyncio.run(scenario())
        output = output_when_exited(60)
    except BaseException:
        # two signals: stop at once (a SIGKILL would leave its supervisord, in a session of its own, running)
        for _ in range(2):
            if up.poll() is None:
                up.send_signal(signal.SIGTERM)
                time.sleep(0.5)
        try:
            print(output_when_exited(60)[-8000:])  # the stack's log, shown with the failure
        except subprocess.TimeoutExpired:
            up.kill()
        raise
    assert up.returncode == 0, output[-4000:]
    status, body, _ = seen["redirected"]
    assert status == 200
    root = ElementTree.fromstring(body)
    assert [(child.tag, child.attrib, child.text) for child in root] == [("Redirect", {"method": "POST"}, redirect)]
    # ended by the node at the deadline (3 s after the SIGTERM), not by the caller's script (20 s)
    assert result.closed_by == "server" and result.close_code == 1001, (result.closed_by, result.close_code)
    assert 2.5 < call_lasted_s < 6, call_lasted_s
    assert f"call {result.call_sid}: ended (drain deadline)" in output
    # Twilio goes on to the <Connect action> step: the node answers it <Hangup/> before it stops (a node gone
    # by then would leave the caller with Twilio's error message; the simulator would retry it 10 s)
    assert not [e for e in result.errors if "re-attach" in e], result.errors
    hung_up = output.find(f"call {result.call_sid}: not re-attached, its stream ended normally")
    assert -1 < hung_up < output.find("drained: stopping the node (1 calls refused, 1 ended at the deadline)"), output[-4000:]
    assert "voicecore up: draining: 1 live call goes on, new calls are redirected to " + redirect in output
    assert "voicecore up: stopped" in output
    assert not arena.exists()
    assert not (workdir / "run").exists()
