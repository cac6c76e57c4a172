"""`voicecore test DIR --phone`: an agent's tests as simulated phone calls through the whole stack.

The demo's machinery (voicecore/demo.py): the stack's real processes under supervisord, the carrier
simulator placing Twilio calls, the model simulator as the vendor, a fake of the agent's tool API. Each
test is one call; its caller says the test's lines, spoken by espeak-ng (voicecore/sim/caller_voice.py),
each once the agent is done answering the previous one (voicecore/sim/turn_caller.py). The model simulator
is given each line's audio with its text (SimConfig.caller_phrases) and the test's rules for that call
(ModelSimServer.call_configs), so it hears the caller's words exactly and answers as the test says. The
expectations are judged on what the stack did, read from each call's record (voicecore/chat/phone_turns.py).

Tests that share their fake API run at once, one call each; tests with another API's answers wait for the
next round (the stack reads the API's address once, at its start; the routes change between rounds).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from voicecore.agent import settings as agent_settings
from voicecore.chat.agent_tests import AgentTest
from voicecore.chat.phone_calls import (
    TRANSCRIPTION_MS,
    judge_call,
    place_test_calls,
    spoken_lines,
)
from voicecore.config import Config
from voicecore.sim.carrier import generate_credentials
from voicecore.sim.carrier_rest import CarrierRestServer
from voicecore.sim.model import SimConfig
from voicecore.sim.model_server import serve_model_sim
from voicecore.sim.tool_server import ToolServer
from voicecore.supervise import Stack, resolve_config

STACK_READY_S = 90.0


async def run_phone_tests(agent_dir: str, agent, tests: list[AgentTest], demo: tuple, base: Config,
                          log_file) -> list[dict[str, Any]]:
    """Every test of one agent as a call through a stack brought up for them, then torn down."""
    language = agent.languages[0] if agent.languages else "en"
    phrases = await asyncio.to_thread(spoken_lines, tests, language)
    registered = tuple(phrases.items())
    from voicecore.demo import demo_config  # the demo's stack settings (ports, simulator URL, records)

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    base = resolve_config(base)
    credentials = generate_credentials(base.twilio_auth_token)
    rest = CarrierRestServer(credentials)
    await rest.__aenter__()
    names = {f.name for f in dataclasses.fields(base)}
    base = dataclasses.replace(base, **{k: v for k, v in credentials.rest_settings(rest.base_url).items() if k in names})
    sim, sim_port = await serve_model_sim("127.0.0.1", 0, SimConfig(turns=demo[0], caller_phrases=registered,
                                                                   transcription_delay_ms=TRANSCRIPTION_MS))
    tool_server = ToolServer(())
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="voicecore-test-phone-") as tmp:
        workdir = Path(tmp)
        config = demo_config(base, workdir, max(4, len(tests)), sim_port)
        envs = {t.tool_server_env for t in tests if t.tool_server_env} | ({demo[2]} if demo[2] else set())
        saved = {name: os.environ.get(name) for name in envs}
        stack = None
        try:
            if envs:
                url = await tool_server.start()
                for name in envs:
                    os.environ[name] = url  # the stack's tool processes inherit it
            config, _agent = agent_settings.configure(dataclasses.replace(config, agent=str(Path(agent_dir).resolve())),
                                                      os.environ)
            stack = Stack(config)
            await asyncio.to_thread(stack.start, log_file)
            await asyncio.to_thread(stack.wait_ready, STACK_READY_S)
            calls = await place_test_calls(config, tests, phrases, demo, sim, rest, tool_server)
            from voicecore.demo import record_paths, wait_for_records

            record_dir = Path(config.record_dir)
            await asyncio.to_thread(wait_for_records, record_dir, [c.call_sid for c in calls])
            for call in calls:
                result = judge_call(call, record_paths(record_dir, [call.call_sid]), agent)
                result.update(agent=agent_dir, seconds=result.pop("call_seconds", 0.0))
                results.append(result)
        finally:
            if stack is not None:
                await asyncio.to_thread(stack.stop)
            await sim.aclose()
            await rest.__aexit__(None, None, None)
            await tool_server.stop()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return results


