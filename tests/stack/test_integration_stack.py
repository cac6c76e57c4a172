"""The spine end to end: real supervisord, gateway, pacer and model worker processes, real sockets on
127.0.0.1, real shared memory; the carrier and model simulators drive and measure the calls."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest

from exposition import parse_exposition
from stacks import start_stack
from waiting import wait_until, wait_until_async
from voicecore import timing
from voicecore.callreport import summarize
from voicecore.demo import demo_script
from voicecore.record import load as load_record
from voicecore.record import load_record as load_partial_record
from voicecore.sim import carrier
from voicecore.sim.carrier import CallScript, place_call
from voicecore.carriers.twilio.signature import compute_signature

pytestmark = pytest.mark.integration

CALL_SECONDS = 14


def run(coro):
    return asyncio.run(coro)


def report_for(sim, results, seconds=CALL_SECONDS):
    return summarize(results, sim, seconds=seconds, cpu_seconds=0.0, wall_seconds=seconds)


def wait_for_record(config, call_sid, detail, timeout_s=10.0, name="") -> Path:
    """The model worker writes a call's record when the call has ended (INV-REPLAY)."""
    path = Path(config.record_dir) / (name or f"{call_sid}.jsonl")
    return wait_until(lambda: path.exists() and path, timeout_s, f"the call's record {path.name}", detail=detail)


RECORD_INPUT_KINDS = {"start", "model", "audio", "dtmf", "tick", "stop", "reopen", "verdict", "snippets"}


def part_file_inputs(config) -> int:
    """The most inputs any part file of the record dir holds so far (voicecore/record.py: the header,
    then entries streamed in batches; a batch may end in a half-written line)."""
    counts = [0]
    for part in Path(config.record_dir).glob("*.jsonl.part"):
        try:
            lines = part.read_bytes().splitlines()[1:]
        except FileNotFoundError:
            continue  # the call ended and the part file got its final name meanwhile
        kinds = []
        for line in lines:
            try:
                kinds.append(json.loads(line).get("k"))
            except ValueError:
                pass
        counts.append(sum(kind in RECORD_INPUT_KINDS for kind in kinds))
    return max(counts)


def loud_ms(channel) -> int:
    """Milliseconds of a WAV channel (8 kHz) in 20 ms windows that are not silence."""
    windows = np.abs(channel[: len(channel) // 160 * 160].reshape(-1, 160)).max(axis=1)
    return int((windows > 1000).sum()) * 20


def replay_cli(*args) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "voicecore.cli", "replay", *map(str, args), "--json"],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr})


def test_call_with_bargein_has_no_stale_frames_and_an_exact_truncate(running_stack):
    """INV-STALE and the truncate point: greeting, a question, a barge-in in the middle of the answer."""
    config = running_stack.config

    async def call():
        async with running_stack.model_sim() as sim:
            return sim, await place_call(config.base_url, config.twilio_auth_token, demo_script(CALL_SECONDS))

    sim, result = run(call())
    report = report_for(sim, [result])
    assert result.closed_by == "carrier", running_stack.log_tail()
    assert report["stale_frames"] == 0
    assert report["bargeins"] == 1
    assert report["truncate_error_ms"]["count"] == 1
    assert report["truncate_error_ms"]["max"] <= 20, report
    (session,) = sim.by_call(result.call_sid)
    (truncate,) = session.record.truncates
    assert truncate.ok and truncate.audio_end_ms > 0
    cancelled = [r for r in session.record.responses if r.status == "cancelled"]
    assert len(cancelled) == 1 and cancelled[0].late_bytes > 0  # late deltas arrived ... and were dropped
    assert report["problems"] == []

    # The call's record (spine mode: SpineDriver's inputs and actions) replays identically, and its WAV has the
    # agent on the right (the caller's channel, on the left, is silent under the default agent's tier).
    path = wait_for_record(config, result.call_sid, running_stack.log_tail)
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    header, entries = load_record(path)
    assert header["control"] == "spine" and header["args"]["greet"] is True
    audio = [e for e in entries if e["k"] == "audio"]
    # The default agent stores under the `redacted` tier (docs/how-to/privacy.md): the caller's audio entries
    # keep their timing for the replay, not the audio.
    assert header["privacy"]["storage"] == "redacted"
    assert audio and not any("ulaw" in e for e in audio)
    wav = path.with_suffix(".wav")
    code, replayed = replay_cli(path, "--wav", wav)
    assert code == 0 and replayed["identical"] and replayed["control"] == "spine", replayed
    with wave.open(str(wav)) as w:
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, 2).astype(np.int64)
    assert loud_ms(samples[:, 0]) == 0  # the caller's channel: not kept
    assert loud_ms(samples[:, 1]) > 3000  # the greeting, the cut answer and the next one

    # The gateway told the pacer of the call's start (an idle pacer waits a heartbeat at a time; this woke it).
    def pacer_stats() -> dict:
        with urllib.request.urlopen(f"http://{config.listen}/metrics", timeout=5) as response:
            return json.load(response)["workers"]["pacer"]

    wait_until(lambda: pacer_stats().get("call_wakeups", 0) >= 1, 5, "the pacer's call_wakeups",
               detail=running_stack.log_tail)


def test_two_concurrent_calls_stay_isolated_when_one_sends_garbage(running_stack):
    """A protocol violation closes that call with its code; the other call hears only its own audio."""
    config = running_stack.config

    async def both():
        async with running_stack.model_sim() as sim:
            good = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(CALL_SECONDS)))
            bad = asyncio.create_task(_call_that_sends_garbage(config))
            return sim, await good, await bad

    sim, good, bad_close = run(both())
    assert bad_close == 1007
    report = report_for(sim, [good])
    assert good.closed_by == "carrier"
    assert report["stale_frames"] == 0 and report["problems"] == []
    # Every frame the good call heard belongs to its own model session, none to another call's.
    own = {f for s in sim.by_call(good.call_sid) for r in s.record.responses for f in r.frames()}
    foreign = {f for s in sim.registry.values() if s.record.call_sid != good.call_sid for r in s.record.responses for f in r.frames()}
    played = [p for _, p, _ in good.core.played_log() if p is not None and p != b"\xff" * 160]
    assert not any(p in foreign for p in played)
    # The only frames not found verbatim are each response's last one, padded with silence at the end.
    assert played and sum(p in own for p in played) >= len(played) - 3


async def _call_that_sends_garbage(config) -> int | None:
    """Opens a real stream, then sends a non-JSON text frame once the agent's audio reaches it; returns the
    close code."""
    from websockets.asyncio.client import connect

    sid = "CA" + os.urandom(16).hex()
    form = {"CallSid": sid, "AccountSid": "AC" + os.urandom(16).hex(), "From": "+15005550006", "To": "+15005550001"}
    url = config.base_url + "/twilio/voice"
    status, body = await carrier.http_request("POST", url, form, [("X-Twilio-Signature", compute_signature(config.twilio_auth_token, url, form))])
    assert status == 200
    target = carrier.parse_twiml(body)
    async with connect(target.url.replace("wss://", "ws://"), compression=None) as ws:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        stream_sid = "MZ" + os.urandom(16).hex()
        await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": stream_sid, "start": {
            "accountSid": form["AccountSid"], "streamSid": stream_sid, "callSid": sid, "tracks": ["inbound"],
            "customParameters": target.parameters, "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
        try:  # the call is up end to end: the model's greeting reaches this stream
            await asyncio.wait_for(ws.recv(), 10)
        except TimeoutError:
            pytest.fail("timed out after 10 s waiting for the first outbound message of the garbage call", pytrace=False)
        await ws.send("{not json")
        try:
            async for _ in ws:
                pass
        except Exception:
            pass
        return ws.close_code


def test_bad_signature_and_reused_token_are_refused(running_stack):
    config = running_stack.config

    async def attempt():
        sid = "CA" + os.urandom(16).hex()
        form = {"CallSid": sid, "AccountSid": "AC" + os.urandom(16).hex(), "From": "+1", "To": "+2"}
        url = config.base_url + "/twilio/voice"
        status_bad, _ = await carrier.http_request("POST", url, form, [("X-Twilio-Signature", "AAAA")])
        status, body = await carrier.http_request("POST", url, form, [("X-Twilio-Signature", compute_signature(config.twilio_auth_token, url, form))])
        target = carrier.parse_twiml(body)
        codes = []
        from websockets.asyncio.client import connect

        for _ in range(2):  # the same token twice: the second start is refused
            async with connect(target.url.replace("wss://", "ws://"), compression=None) as ws:
                stream_sid = "MZ" + os.urandom(16).hex()
                await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": stream_sid, "start": {
                    "accountSid": form["AccountSid"], "streamSid": stream_sid, "callSid": sid, "tracks": ["inbound"],
                    "customParameters": target.parameters, "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
                await ws.send(json.dumps({"event": "stop", "sequenceNumber": "2", "streamSid": stream_sid, "stop": {"accountSid": form["AccountSid"], "callSid": sid}}))
                try:
                    async for _ in ws:
                        pass
                except Exception:
                    pass
                codes.append(ws.close_code)
        return status_bad, status, codes

    status_bad, status, codes = run(attempt())
    assert status_bad == 403
    assert status == 200
    assert codes == [1000, 1008]


def test_health_and_metrics_endpoints(running_stack):
    with urllib.request.urlopen(f"http://{running_stack.config.listen}/healthz", timeout=5) as response:
        health = json.load(response)
    # the recorder runs because the stack records (it fills the call store from the records), and the console
    # because there is a store and a console port
    assert health["workers_alive"] == {"pacer": True, "model": True, "validator": True, "recorder": True, "console": True}
    with urllib.request.urlopen(f"http://{running_stack.config.listen}/metrics", timeout=5) as response:
        metrics = json.load(response)
    pacer = metrics["workers"]["pacer"]
    assert pacer["ticks"] + pacer["idle_waits"] > 0  # its clock runs (with no call live it waits, not ticks)


def test_an_idle_node_beats_slowly_and_healthz_still_counts_every_worker_alive(running_stack):
    """With no call, every worker heartbeats once a second (voicecore/timing.py IDLE_HEARTBEAT_MS) and says so
    in its heartbeat; /healthz judges each by the interval it announced, so none looks dead between beats."""
    ages: dict[str, list[float]] = {}
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://{running_stack.config.listen}/healthz", timeout=5) as response:
            health = json.load(response)
        assert health["calls"] == 0
        assert all(health["workers_alive"].values()), health
        for name, age in health["workers_heartbeat_age_ms"].items():
            ages.setdefault(name, []).append(age)
        time.sleep(0.1)
    # Idle, the gaps between beats are longer than the live judgement (3 x 150 ms) would allow.
    assert max(ages["model"]) > timing.HEARTBEAT_MS * timing.HEARTBEAT_MISSES_DEAD, ages
    assert max(ages["pacer"]) > timing.HEARTBEAT_MS * timing.HEARTBEAT_MISSES_DEAD, ages


def healthz(config) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{config.listen}/healthz", timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def test_a_node_whose_pacer_is_not_heard_from_is_not_ready_until_it_is_again(running_stack):
    """A pacer that stops (here: stopped, serving one and standby, so nothing takes over) leaves calls with
    nobody to pace their audio: /healthz answers 503 "workers_down" naming it once three of its intervals pass
    without its heartbeat, so a load balancer sends calls elsewhere, and 200 again once it beats."""
    config = running_stack.config
    pids = [pid for name, pid in running_stack.stack.program_pids().items() if name.startswith("pacer")]
    assert pids and healthz(config)[0] == 200
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: healthz(config)[0] == 503, 10, "/healthz to say the pacer is down")
        status, health = healthz(config)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert (status, health["status"], health["healthy"], health["workers_down"]) == (503, "workers_down", False,
                                                                                     ["pacer"]), health
    assert health["workers_alive"]["pacer"] is False and health["workers_alive"]["model"] is True
    wait_until(lambda: healthz(config)[0] == 200, 10, "/healthz to be healthy again")
    status, health = healthz(config)
    assert health["status"] == "ok" and health["healthy"] and "workers_down" not in health


def test_metrics_answers_prometheus_text_when_scraped_as_such(running_stack):
    """Prometheus' own Accept header gets the text format (0.0.4); `*/*` still gets the JSON."""
    url = f"http://{running_stack.config.listen}/metrics"
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=5) as response:
        content_type = response.headers["Content-Type"]
        text = response.read().decode("utf-8")
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    families = parse_exposition(text)  # the strict parser of tests/exposition.py
    assert families["voicecore_pacer_ticks_total"]["type"] == "counter"
    assert families["voicecore_gateway_calls_active"]["type"] == "gauge"
    assert ("voicecore_pacer_tick_lateness_ms", (("quantile", "0.99"),)) in families["voicecore_pacer_tick_lateness_ms"]["samples"]
    with urllib.request.urlopen(f"{url}?format=prometheus", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "*/*"}), timeout=5) as response:
        assert response.headers["Content-Type"] == "application/json"
        pacer = json.load(response)["workers"]["pacer"]
        assert pacer["ticks"] + pacer["idle_waits"] > 0


def test_model_worker_killed_mid_call_is_restarted_and_the_call_goes_on():
    running = start_stack()
    try:
        config = running.config
        killed = {}

        async def call_and_kill():
            async with running.model_sim() as sim:
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(CALL_SECONDS)))
                # mid-call: the worker to be killed has streamed a batch of this call (its start and the
                # caller's audio) to its part file, which the replay below checks
                await wait_until_async(lambda: part_file_inputs(config) > 1, 20,
                                       "the model worker's part file to hold more than the call's start",
                                       detail=running.log_tail)
                pid = running.stack.program_pids()["model"]
                os.kill(pid, signal.SIGKILL)
                killed["pid"] = pid
                result = await call
                killed["after"] = running.stack.program_pids().get("model")
                return sim, result

        sim, result = run(call_and_kill())
        assert result.closed_by == "carrier", running.log_tail()
        assert killed["after"] and killed["after"] != killed["pid"]
        sessions = sim.by_call(result.call_sid)
        assert len(sessions) == 2  # the restarted worker reopened this call's model session
        # After the restart the caller's question was still answered: audio reached the caller.
        restarted_at = sessions[1].record.connected_ms
        assert any(frame.arrival_ms > restarted_at + 1000 for frame in result.core.frames)
        # The killed worker's part of the call stays in its part file (streamed during the call): it holds
        # the call's start and replays what it has, reported incomplete.
        part = Path(config.record_dir) / f"{result.call_sid}.jsonl.part"
        assert part.exists() and not (Path(config.record_dir) / f"{result.call_sid}.jsonl").exists(), running.log_tail()
        assert part.stat().st_mode & 0o777 == 0o600
        header, entries, complete = load_partial_record(part)
        assert not complete and header["args"]["greet"] is True and header["call_sid"] == result.call_sid
        assert entries[0]["k"] == "start"
        code, replayed = replay_cli(part)
        assert code == 0 and replayed["identical"] and replayed["complete"] is False and replayed["inputs"] > 1, replayed
        # The worker that took over rebuilt the call from that part file and recorded the rest under the next
        # number, naming the record it continues; that record replays identically (from the chain).
        path = wait_for_record(config, result.call_sid, running.log_tail, name=f"{result.call_sid}-2.jsonl")
        header, _ = load_record(path)
        assert header["resumed_from"] == part.name
        code, replayed = replay_cli(path)
        assert code == 0 and replayed["identical"], replayed
    finally:
        running.stop()


def test_shutdown_leaves_nothing_in_dev_shm_or_the_runtime_dir():
    # The stack's arena in a directory of its own on /dev/shm's tmpfs: "nothing left" is then this stack's
    # doing alone, whatever other stacks (of tests beside this one, of other users) do in /dev/shm meanwhile.
    shm_dir = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="vctest-shm-"))
    running = start_stack(shm_dir=str(shm_dir))
    arena_name = (Path(running.config.runtime_dir) / "arena.name").read_text().strip()
    arena_path = shm_dir / arena_name
    assert arena_path.exists()
    assert (arena_path.stat().st_mode & 0o777) == 0o600
    assert (Path(running.config.runtime_dir).stat().st_mode & 0o777) == 0o700
    config = running.config

    async def short_call():
        async with running.model_sim():
            return await place_call(config.base_url, config.twilio_auth_token, CallScript(duration_ms=2000))

    assert run(short_call()).closed_by == "carrier"
    running.stop_and_wait()
    assert not arena_path.exists()
    assert list(shm_dir.iterdir()) == []
    shm_dir.rmdir()
    assert not Path(config.runtime_dir).exists()
