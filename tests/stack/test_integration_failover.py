"""Worker death under live calls, with real processes (docs/explanation/failure-and-standby.md#hot-standby): SIGKILL
of the serving pacer, model worker, validator or gateway. With standby workers the waiting process takes over (its
pid becomes the role's leader) and the call goes on with no stale frame; a gateway's calls are re-attached through
the answer document's re-attach step (a carrier never reconnects a stream, but goes on to <Connect action>), and
new calls are taken again. Without a standby, a model worker that dies while a
caller waits on it leaves the caller with the pacer's own hold line, not silence."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stacks import start_stack
from waiting import wait_until, wait_until_async

from voicecore import standby
from voicecore.demo import demo_script
from voicecore.fallback import load_clips
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.sim.model import SimConfig
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration

CALL_SECONDS = 12


def run(coro):
    return asyncio.run(coro)


def metrics(config) -> dict:
    status, body = get_from_gateway(config, "/metrics")
    assert status == 200
    return json.loads(body)


def leader(config, role: str) -> int | None:
    return standby.leader_pid(config.runtime_dir, role)


def kill_leader(running, role: str) -> int:
    pid = leader(running.config, role)
    assert pid and pid in running.stack.program_pids().values(), f"no serving {role} to kill"
    os.kill(pid, signal.SIGKILL)
    return pid


def frames_after(result, t_ms: float) -> int:
    return sum(1 for frame in result.core.frames if frame.arrival_ms > t_ms)


def test_the_standby_takes_over_pacer_model_and_validator_and_the_call_goes_on():
    running = start_stack()
    try:
        config = running.config
        for role in standby.ROLES:
            assert leader(config, role), f"{role} announced no leader"
        pids = running.stack.program_pids()
        assert {"pacer-standby", "model-standby", "validator-standby", "gateway-standby"} <= set(pids)
        # each standby stands by, warmed up (start_stack waited for it: they start once the node serves)
        assert {role: standby.standby_pid(config.runtime_dir, role) for role in standby.ROLES} == \
            {role: pids[role + "-standby"] for role in standby.ROLES}
        killed: dict[str, tuple[int, float]] = {}

        async def call_and_kill():
            async with running.model_sim() as sim:
                started = time.monotonic()
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(CALL_SECONDS)))
                for role, at_s in (("pacer", 2.5), ("model", 5.0), ("validator", 7.0)):
                    await asyncio.sleep(max(0.0, started + at_s - time.monotonic()))
                    killed[role] = (kill_leader(running, role), (time.monotonic() - started) * 1000)
                    old = killed[role][0]
                    await wait_until_async(lambda r=role, o=old: leader(config, r) not in (None, o), 5,
                                           f"a new {role} leader", detail=running.log_tail)
                return sim, await call

        sim, result = run(call_and_kill())
        assert result.closed_by == "carrier", running.log_tail()
        stats = result.statistics
        assert stats.stale_frames == 0 and stats.protocol_errors == 0
        for role, (pid, at_ms) in killed.items():
            assert leader(config, role) != pid
            # audio kept reaching the caller after each kill (the call's timeline starts a little after ours)
            assert frames_after(result, at_ms - 500) > 0, f"no audio after the {role} kill"
        assert len(sim.by_call(result.call_sid)) == 2  # the model session was reopened by the new worker
        wait_until(lambda: "pacer" in metrics(config)["workers"], 5, "pacer stats")
        assert "taking over" in running.log_path.read_text()
    finally:
        running.stop()


# The greeting (4.2 s), a question at 5.5 s and its 5.6 s answer, the gateway killed in the pause after it, a
# second question after the re-attach: its answer is the new stream's.
GATEWAY_KILL_AT_S = 14.0  # after the stream started
REATTACH_SCRIPT = CallScript(duration_ms=26_000, utterances=((5500, load_clip("caller_basic_price")),
                                                             (17_000, load_clip("caller_hours"))))


@pytest.mark.parametrize("standby_workers", [True, False], ids=["standby", "restarted"])
def test_a_gateway_kill_re_attaches_the_call_which_goes_on_with_its_history(standby_workers):
    """SIGKILL of the serving gateway mid-call: the carrier simulator requests the TwiML's <Connect action> (the
    re-attach step), the gateway serving now (the standby, or the one supervisord restarted) answers a new
    stream for the same call, and the model worker resumes the call from its record: no second greeting, the
    new model session is given the conversation so far, and the call runs to the caller's own end."""
    running = start_stack(call_control="turns", standby_workers=standby_workers)
    try:
        config = running.config

        async def scenario():
            async with running.model_sim() as sim:
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, REATTACH_SCRIPT))
                for _ in range(200):
                    if (await asyncio.to_thread(metrics, config))["gateway"]["calls_active"] == 1:
                        break
                    await asyncio.sleep(0.05)
                # after the greeting and the answer to the first question, before the second question
                await asyncio.sleep(GATEWAY_KILL_AT_S)
                old = kill_leader(running, "gateway")
                result = await call
                await wait_until_async(lambda: leader(config, "gateway") not in (None, old), 5, "a new gateway leader",
                                       detail=running.log_tail)
                again = await place_call(config.base_url, config.twilio_auth_token, demo_script(4))
                return sim, result, again

        sim, result, again = run(scenario())
        log = running.log_path.read_text()
        assert result.closed_by == "carrier", f"{result.closed_by}: {'; '.join(result.errors)}\n{running.log_tail()}"
        assert len(result.core.metrics.reattaches) == 1, result.errors
        lost_at, attached_at = result.core.metrics.reattaches[0]
        assert 0 <= attached_at - lost_at < 8000
        assert f"call {result.call_sid}: its stream ended unexpectedly: re-attached" in log, running.log_tail()
        assert f"call {result.call_sid}: model session re-attached" in log and \
            f"(rebuilt from {result.call_sid}.jsonl)" in log, running.log_tail()
        # frames reached the caller over the new stream
        assert any(frame.arrival_ms > attached_at for frame in result.core.frames), \
            "\n".join(line for line in log.splitlines() if result.call_sid in line or "model" in line)[-8000:]
        sessions = [session.record for session in sim.by_call(result.call_sid)]
        assert len(sessions) >= 2, len(sessions)
        later = sessions[-1]
        prompts = [(r.metadata or {}).get("vc_prompt") for r in later.responses]
        assert "greeting" not in prompts, f"the re-attached call was greeted again: {prompts}"
        assert later.client_events.get("conversation.item.create", 0) >= 1, later.client_events
        assert again.closed_by == "carrier" and again.statistics.frames_received > 0, running.log_tail()
        gateway = metrics(config)["gateway"]
        assert gateway["calls_reattached"] == 1 and gateway["reattach_refused"] == 0, gateway
        assert result.statistics.stale_frames == 0
    finally:
        running.stop()


def test_a_call_a_gateway_kill_drops_for_good_gets_its_call_ended_event():
    """The carrier never comes back for the call (its action URL unreachable): the model worker ends it once the
    re-attach wait is over, with a call.ended event (outcome stream_lost) in the store."""
    from voicecore.store import CallStore, database_url_for
    from workers.model.main import REATTACH_WAIT_S

    running = start_stack()
    try:
        config = running.config

        async def scenario():
            async with running.model_sim():
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(8),
                                                      follow_action=False))
                for _ in range(200):
                    if (await asyncio.to_thread(metrics, config))["gateway"]["calls_active"] == 1:
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(2.0)
                kill_leader(running, "gateway")
                return await call

        lost = run(scenario())
        assert lost.closed_by in ("connection_lost", "server"), lost.closed_by

        def ended_event() -> list:
            with CallStore.open(database_url_for(config)) as store:
                return store.backend.execute("SELECT type, data FROM events WHERE call_sid = ? ORDER BY seq",
                                             (lost.call_sid,)).fetchall()

        wait_until(lambda: any(kind == "call.ended" for kind, _ in ended_event()), REATTACH_WAIT_S + 30,
                   "the dropped call's call.ended", detail=running.log_tail)
        (data,) = [data for kind, data in ended_event() if kind == "call.ended"]
        assert json.loads(data)["outcome"] == "stream_lost"
        # the worker's counters reach /metrics with its next statistics (each second), maybe after the event
        wait_until(lambda: metrics(config)["workers"]["model"].get("calls_lost_with_gateway") == 1, 5,
                   "the model worker's calls_lost_with_gateway", detail=running.log_tail)
    finally:
        running.stop()


def test_without_a_standby_a_dead_model_worker_leaves_the_waiting_caller_the_pacers_hold_line():
    running = start_stack(standby_workers=False)
    hold_frames = load_clips().frame_payloads()
    try:
        config = running.config
        assert "model-standby" not in running.stack.program_pids()
        # The model stalls in the middle of every answer: a caller waiting on it is what the pacer covers.
        stalling = SimConfig(clip_sequence=("agent_greeting",), speed_factor=1.0, stall_after_ms=200, stall_ms=6000)

        async def scenario():
            async with running.model_sim(stalling):
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(6)))
                await asyncio.sleep(1.5)  # the greeting streams, then stalls: the caller waits on the model
                os.kill(running.stack.program_pids()["model"], signal.SIGKILL)
                return await call

        result = run(scenario())
        heard = [frame for frame in result.core.frames if frame.payload in hold_frames]
        assert heard, "the pacer played no hold line while the model worker was dead\n" + running.log_tail()
        assert metrics(config)["workers"]["pacer"]["fallback_lines"] >= 1
        assert result.statistics.stale_frames == 0
    finally:
        running.stop()


def test_a_model_worker_that_takes_over_a_turns_call_rebuilds_it_and_never_greets_twice():
    running = start_stack(call_control="turns")
    try:
        config = running.config

        async def scenario():
            async with running.model_sim() as sim:
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(CALL_SECONDS)))
                # after the greeting played and the caller asked (demo_script: the question at ~4 s)
                await asyncio.sleep(6.5)
                kill_leader(running, "model")
                return sim, await call

        sim, result = run(scenario())
        assert result.closed_by == "carrier", running.log_tail()
        first, second = (session.record for session in sim.by_call(result.call_sid))
        prompts = [(r.metadata or {}).get("vc_prompt") for r in second.responses]
        assert "greeting" not in prompts, f"the new worker greeted the caller again: {prompts}"
        # the new session was given the conversation so far (the greeting and the caller's question)
        assert second.client_events.get("conversation.item.create", 0) >= 1, second.client_events
        log = running.log_path.read_text()
        assert f"call {result.call_sid}: rebuilt from {result.call_sid}.jsonl.part (followed while standing by)" in log, \
            running.log_tail()
        assert metrics(config)["workers"]["model"]["calls_taken_over_followed"] == 1
        # the record the new worker wrote continues the dead one's, and replays with it
        record = Path(config.record_dir) / f"{result.call_sid}-2.jsonl"
        wait_until(record.exists, 10, "the second record", detail=running.log_tail)
        replayed = subprocess.run([sys.executable, "-m", "voicecore.replay", str(record), "--json"], capture_output=True,
                                  text=True, timeout=60)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert json.loads(replayed.stdout)["identical"] is True
        assert result.statistics.stale_frames == 0
    finally:
        running.stop()


def test_a_vendor_that_keeps_failing_ends_the_call_with_the_apology_then_a_hang_up():
    """rate_limit_exceeded on every response.create: the caller hears the hold line, the request is asked again
    (0.5, 1, 2, 2 s apart), the fifth failure ends the call: the shipped apology plays, then (and only then)
    the hang-up goes to Twilio's REST API (the built-in agent has no transfer target)."""
    from test_integration_turns import _FakeTwilioRest
    import http.server
    import threading
    import urllib.parse

    from voicecore.fallback import APOLOGY_HANGUP, HOLD, clip_number
    from voicecore.sim.model.faults import FaultRequest

    class TimedRest(_FakeTwilioRest):
        times: list[float] = []

        def do_POST(self):  # noqa: N802
            type(self).times.append(time.monotonic() * 1000)
            super().do_POST()

    rest = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TimedRest)
    threading.Thread(target=rest.serve_forever, daemon=True).start()
    TimedRest.requests, TimedRest.times = [], []
    clips = load_clips()
    line_frames = {name: {bytes(clips.frames[n, k]) for k in range(int(clips.frame_counts[n]))}
                   for name, n in (("hold", clip_number("en", HOLD)), ("apology", clip_number("en", APOLOGY_HANGUP)))}
    running = start_stack(call_control="turns", twilio_api_base=f"http://127.0.0.1:{rest.server_address[1]}")
    try:
        config = running.config

        async def scenario():
            async with running.model_sim() as sim:
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(24)))
                await asyncio.sleep(1.0)  # the greeting is under way; everything asked from now on is refused
                sim.apply_fault(FaultRequest("rate_limit", 30_000))
                return await call

        result = asyncio.run(scenario())
        wait_until(lambda: TimedRest.requests, 5, "the hang-up request", detail=running.log_tail)
        heard = {name: [f.arrival_ms for f in result.core.frames if f.payload in frames] for name, frames in line_frames.items()}
        assert heard["hold"], "no hold line while the vendor refused\n" + running.log_tail()
        assert len(heard["apology"]) >= int(clips.frame_counts[clip_number("en", APOLOGY_HANGUP)]) - 5, running.log_tail()
        assert TimedRest.times[0] >= max(heard["apology"]), "the hang-up went out before the apology had played"
        _method, path, _auth, body = TimedRest.requests[0]
        assert path.endswith(f"/Calls/{result.call_sid}.json")
        assert urllib.parse.parse_qs(body.decode()) == {"Status": ["completed"]}
        model = metrics(config)["workers"]["model"]
        assert model["failure_policy_calls"] == 1 and model["fallback_lines_asked"] >= 2
    finally:
        running.stop()
        rest.shutdown()


def test_a_validator_that_takes_over_gets_the_open_gates_again_and_the_gated_answer_plays():
    """The serving validator is frozen while a gated answer's transcript is sent to it, then killed: those
    messages die with it. The model worker sees a new validator serve and sends every open gate again."""
    from test_integration_gate import KB, QUESTION_AT_MS, heard_frames
    from voicecore.sim.audio_clips import load_clip
    from voicecore.sim.carrier import CallScript

    running = start_stack(gate_policy="numbers", knowledge_dir=str(KB))
    try:
        config = running.config
        sim_config = SimConfig(hallucinate_responses=(1,), hallucinated_text="Basic costs 99 kr per month.")
        # The answer (5.6 s) plays once the new validator serves, which takes 0.3 s alone and 0.6 s or more beside
        # another lane's stack: a 16 s call ended 0.1 s after the answer alone, and cut its last frames in a CI run.
        script = CallScript(duration_ms=19_000, utterances=((QUESTION_AT_MS, load_clip("caller_basic_price")),),
                            bargein_at_ms=())

        async def scenario():
            async with running.model_sim(sim_config) as sim:
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, script))
                await asyncio.sleep(QUESTION_AT_MS / 1000 - 0.5)
                frozen = leader(config, "validator")
                os.kill(frozen, signal.SIGSTOP)  # the answer's gate messages queue up in a process that never reads them
                await asyncio.sleep(3.5)
                os.kill(frozen, signal.SIGKILL)
                return sim, await call, frozen

        sim, result, frozen = asyncio.run(scenario())
        assert leader(config, "validator") not in (None, frozen)
        (session,) = sim.by_call(result.call_sid)
        answer = session.record.responses[1]
        log = "".join(line for line in running.log_path.read_text().splitlines(True) if "model[" in line or "validator[" in line)
        assert heard_frames(result, answer) >= len(answer.frames()) - 2, (heard_frames(result, answer), len(answer.frames()), log[-6000:])
        assert metrics(config)["workers"]["model"]["gate_messages_resent"] >= 2
        assert result.statistics.stale_frames == 0
    finally:
        running.stop()
