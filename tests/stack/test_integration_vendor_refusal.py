"""A vendor that refuses the node's configuration, with real processes: a wrong key (an `error` event on
OpenAI's path, then a close), a model it does not serve, and a session configuration it rejects. The first
call's session meets the refusal and that call goes to its apology at once; every later call goes there
without dialing at all (the breaker is closed to calls until a trial session is accepted); /healthz answers
503 with the vendor's own words. Transient errors keep the retry policy (tests/stack/test_model_vendor_faults.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import threading
import time
from pathlib import Path

import pytest
from stacks import TEST_SIM, start_stack
from test_integration_turns import _FakeTwilioRest
from waiting import wait_until

from voicecore.demo import demo_script
from voicecore.fallback import APOLOGY_HANGUP, clip_number, load_clips
from voicecore.sim.carrier import place_call
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration

APOLOGY_WITHIN_MS = 2000  # from the call's webhook to the first frame of the apology at the carrier


def apology_frames() -> set[bytes]:
    clips = load_clips()
    number = clip_number("en", APOLOGY_HANGUP)
    # digital silence is in the clip too, and in any line: not a sign of this one
    return {bytes(clips.frames[number, k]) for k in range(int(clips.frame_counts[number]))} - {bytes([0xFF]) * 160}


async def call_until_apology(config, seconds: int = 9) -> tuple[float, object]:
    """One call; ms from placing it to the first apology frame at the carrier (inf: none)."""
    frames = apology_frames()
    placed_ms = time.monotonic() * 1000
    result = await place_call(config.base_url, config.twilio_auth_token, demo_script(seconds))
    heard = [f.arrival_ms for f in result.core.frames if f.payload in frames] if result.core else []
    return (min(heard) - placed_ms if heard else float("inf")), result


@pytest.fixture()
def rest():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeTwilioRest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _FakeTwilioRest.requests = []
    yield server
    server.shutdown()


def agent_with_voice(tmp_path, voice: str) -> str:
    """The shipped default agent, speaking in ``voice``."""
    from voicecore.agent.load import default_agent_dir

    text = (default_agent_dir() / "agent.toml").read_text()
    directory = tmp_path / "agent"
    directory.mkdir()
    (directory / "agent.toml").write_text(text.replace('name = "assistant"', f'name = "assistant"\nvoice = "{voice}"'))
    return str(directory)


REFUSALS = ["invalid_api_key", "model_not_found", "session_config"]
RIGHT_KEY, WRONG_KEY = "sk-proj-right111111111", "sk-proj-wrong000000000"


def _own_rest() -> http.server.ThreadingHTTPServer:
    """A fake Twilio REST server whose handler keeps its own requests: stacks live at once count only theirs."""
    handler = type("_OwnTwilioRest", (_FakeTwilioRest,), {"requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Each refusal's stack and its two calls, one call after the other on each stack but the stacks' calls side by
    side: they wait on the clock, not on the CPU. The stacks start one at a time, before any call, so no start
    takes the cores from a call. Each stack has its own vendor simulator, REST server and log."""
    sim_config = dataclasses.replace(TEST_SIM, api_keys=(RIGHT_KEY,), models=("gpt-realtime",))
    servers, stacks = {}, {}
    try:
        for refusal in REFUSALS:
            key = WRONG_KEY if refusal == "invalid_api_key" else RIGHT_KEY
            overrides: dict[str, object] = {"realtime_api_key": key}
            if refusal == "model_not_found":
                overrides["model"] = "gpt-realtime-typo"
            if refusal == "session_config":
                # a voice the vendor does not speak in
                overrides["agent"] = agent_with_voice(tmp_path_factory.mktemp(refusal), "nova2")
            servers[refusal] = _own_rest()
            stacks[refusal] = start_stack(call_control="turns",
                                          twilio_api_base=f"http://127.0.0.1:{servers[refusal].server_address[1]}",
                                          **overrides)

        async def scenario(running):
            async with running.model_sim(sim_config) as sim:
                first = await call_until_apology(running.config)
                second = await call_until_apology(running.config)
                return sim, first, second

        async def scenarios():
            return await asyncio.gather(*(scenario(stacks[refusal]) for refusal in REFUSALS), return_exceptions=True)

        outcomes = dict(zip(REFUSALS, asyncio.run(scenarios())))
        yield {refusal: (stacks[refusal], servers[refusal], outcomes[refusal]) for refusal in REFUSALS}
    finally:
        for running in stacks.values():
            running.stop()
        for server in servers.values():
            server.shutdown()


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refused_configuration_sends_calls_to_the_apology_at_once_and_healthz_says_why(refused, refusal):
    running, rest, outcome = refused[refusal]
    if isinstance(outcome, BaseException):
        raise outcome
    config = running.config
    sim, (first_ms, first), (second_ms, second) = outcome
    assert first_ms < APOLOGY_WITHIN_MS, running.log_tail()
    assert second_ms < APOLOGY_WITHIN_MS, running.log_tail()
    dialed = sum(sim.refusals.values()) + len(sim.registry)
    assert dialed == 1, (sim.refusals, sim.registry)  # the second call never dialed the vendor
    if refusal == "session_config":
        session = next(iter(sim.registry.values()))
        rejected = session.record.errors[0]
        assert (rejected.code, rejected.client_event_type) == ("invalid_value", "session.update")
        assert session.record.responses == []
    requests = rest.RequestHandlerClass.requests
    wait_until(lambda: len(requests) >= 2, 10, "both hang-ups", detail=running.log_tail)
    status, body = get_from_gateway(config, "/healthz")
    health = json.loads(body)
    assert status == 503 and health["status"] == "model_vendor_refused" and not health["healthy"], health
    expected = {"invalid_api_key": "Incorrect API key provided", "model_not_found": "does not exist",
                "session_config": "Invalid value: 'nova2'"}[refusal]
    assert expected in health["model_vendor"]["error"], health
    log = running.log_tail(400_000)
    assert log.count("the model vendor refuses this node's configuration") == 1, log[-3000:]
    assert WRONG_KEY not in log
    status, body = get_from_gateway(config, "/metrics")
    model = json.loads(body)["workers"]["model"]
    assert model["vendor_refused"] == 1 and model["calls_refused_by_vendor"] >= 1
    print(f"FIGURE refusal={refusal} first_call_apology_ms={first_ms:.0f} second_call_apology_ms={second_ms:.0f}")


def test_the_caller_hears_the_agents_own_apology_when_it_has_one(rest, tmp_path):
    """[lines.audio] apology_hangup: the WAV (44.1 kHz stereo here) is what the pacer plays, not the shipped clip."""
    import wave

    import numpy as np

    from voicecore.fallback.lines import wav_to_line

    directory = Path(agent_with_voice(tmp_path, "marin"))
    rate = 44_100
    tone = (0.4 * np.sin(2 * np.pi * 330 * np.arange(int(1.5 * rate)) / rate) * 32767).astype("<i2")
    with wave.open(str(directory / "sorry.wav"), "wb") as writer:
        writer.setnchannels(2)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(np.repeat(tone, 2).tobytes())
    with open(directory / "agent.toml", "a") as toml:
        toml.write('\n[lines.audio]\napology_hangup = "sorry.wav"\n')
    line = wav_to_line(directory / "sorry.wav")
    own = {line[i:i + 160] for i in range(0, len(line) - 159, 160)}
    running = start_stack(call_control="turns", twilio_api_base=f"http://127.0.0.1:{rest.server_address[1]}",
                          realtime_api_key="sk-proj-wrong000000000", agent=str(directory))
    try:
        async def scenario():
            async with running.model_sim(dataclasses.replace(TEST_SIM, api_keys=("sk-proj-right111111111",))):
                return await place_call(running.config.base_url, running.config.twilio_auth_token, demo_script(6))

        result = asyncio.run(scenario())
        heard = [f for f in result.core.frames if f.payload in own]
        assert len(heard) >= len(own) - 2, (len(heard), len(own), running.log_tail())
        shipped_only = apology_frames() - own
        assert not [f for f in result.core.frames if f.payload in shipped_only]  # not the shipped one
        assert "apology_hangup wav:" in running.log_tail(400_000)  # the pacer said where its lines come from
    finally:
        running.stop()


def test_a_session_closed_with_4000_ends_its_call_and_every_new_one_at_once(rest):
    """The vendor closes a live session with 4000 beta_api_shape_disabled (as it closed the sessions of the
    shape it retired): that call goes to its apology within a second of the close, the next at once."""
    from voicecore.sim.model.faults import FaultRequest

    running = start_stack(call_control="turns", twilio_api_base=f"http://127.0.0.1:{rest.server_address[1]}")
    try:
        config = running.config

        async def scenario():
            async with running.model_sim() as sim:
                frames = apology_frames()
                call = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(10)))
                while not sim.registry:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(2.0)  # the greeting plays
                closed_ms = time.monotonic() * 1000
                sim.apply_fault(FaultRequest("close_4000"))
                first = await call
                heard = [f.arrival_ms for f in first.core.frames if f.payload in frames and f.arrival_ms > closed_ms]
                second_ms, _second = await call_until_apology(config)
                return sim, (min(heard) - closed_ms if heard else float("inf")), second_ms

        sim, first_ms, second_ms = asyncio.run(scenario())
        assert first_ms < 1000, running.log_tail()
        assert second_ms < APOLOGY_WITHIN_MS, running.log_tail()
        assert len(sim.registry) == 1  # the second call never dialed
        status, body = get_from_gateway(config, "/healthz")
        health = json.loads(body)
        assert status == 503 and "beta_api_shape_disabled" in health["model_vendor"]["error"], health
        print(f"FIGURE refusal=close_4000 first_call_apology_after_close_ms={first_ms:.0f} "
              f"second_call_apology_ms={second_ms:.0f}")
    finally:
        running.stop()
