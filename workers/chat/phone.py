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
import secrets
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from voicecore.agent import settings as agent_settings
from voicecore.chat.agent_tests import AgentTest, expectation_count, judge_turn
from voicecore.chat.phone_turns import call_events, node_at, split_turns
from voicecore.config import Config
from voicecore.sim.caller_voice import speak
from voicecore.sim.carrier import CallScript, generate_credentials, place_call
from voicecore.sim.carrier_core import speech_end_ms
from voicecore.sim.carrier_rest import CarrierRestServer
from voicecore.sim.model import SimConfig
from voicecore.sim.model_server import serve_model_sim
from voicecore.sim.tool_server import ToolServer
from voicecore.sim.turn_caller import TurnCaller
from voicecore.supervise import Stack, resolve_config

TRANSCRIPT_CONTEXT_LINES = 12
CALL_CAP_S_PER_TURN = 40.0  # a call is cut off after this long per caller line (a stuck agent fails, not hangs)
STACK_READY_S = 90.0
# The caller's transcript comes this long after the model heard the line's end, every time (the stack tests'
# value): a test judges what the agent does, so the vendor's transcription jitter (0.05-1.5 s drawn by the
# simulator otherwise) is left out of its latency, which stays comparable from run to run.
TRANSCRIPTION_MS = 150


@dataclasses.dataclass
class PhoneCall:
    test: AgentTest
    call_sid: str
    caller: TurnCaller
    lines: list[bytes]
    result: Any = None


def spoken_lines(tests: list[AgentTest], language: str) -> dict[str, bytes]:
    """Every caller line of ``tests`` said by the caller's voice (SpeechUnavailable without espeak-ng)."""
    said: dict[str, bytes] = {}
    for test in tests:
        for turn in test.turns:
            if turn.say is not None and turn.say not in said:
                said[turn.say] = speak(turn.say, language)
    return said


def rounds(tests: list[AgentTest], demo: tuple) -> list[tuple[tuple, list[AgentTest]]]:
    """The tests grouped by the fake API they need (routes), in the order first needed."""
    groups: dict[str, tuple[tuple, list[AgentTest]]] = {}
    for test in tests:
        routes = tuple(test.routes if test.routes is not None else demo[1])
        groups.setdefault(repr(routes), (routes, []))[1].append(test)  # a route's body may be a dict: by its text
    return list(groups.values())


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
            lead_frames = max(1, config.lead_ms // 20)
            for routes, group in rounds(tests, demo):
                tool_server.routes = list(routes)
                calls = []
                for test in group:
                    sid = "CA" + secrets.token_hex(16)
                    lines = [phrases[t.say] for t in test.turns if t.say is not None]
                    rules = test.rules if test.rules is not None else demo[0]
                    sim.call_configs[sid] = SimConfig(turns=rules, caller_phrases=registered,
                                                      transcription_delay_ms=TRANSCRIPTION_MS)
                    calls.append(PhoneCall(test, sid, TurnCaller(lines), lines))
                started = time.monotonic()

                async def one(call: PhoneCall):
                    cap_ms = int(1000 * (20 + CALL_CAP_S_PER_TURN * max(1, len(call.lines))))
                    script = CallScript(duration_ms=cap_ms, caller=call.caller)
                    call.result = await place_call(config.base_url, config.twilio_auth_token, script, lead_frames,
                                                   call_sid=call.call_sid, rest=rest)

                await asyncio.gather(*(one(call) for call in calls))
                seconds = time.monotonic() - started
                from voicecore.demo import record_paths, wait_for_records

                record_dir = Path(config.record_dir)
                await asyncio.to_thread(wait_for_records, record_dir, [c.call_sid for c in calls])
                for call in calls:
                    result = judge_call(call, record_paths(record_dir, [call.call_sid]), agent)
                    result.update(agent=agent_dir, seconds=result.pop("call_seconds", round(seconds, 3)))
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


def node_timeline(header: dict, entries: list[dict]) -> list[tuple[int, str]]:
    """(ms into the call, node) each time the flow moved, from feeding the record's inputs to a fresh driver."""
    from voicecore.call.record import INPUT_KINDS
    from voicecore.replay import driver_from_header, rebuild

    driver = driver_from_header(header)
    flow = getattr(driver, "flow", None)
    timeline: list[tuple[int, str]] = []
    t0 = entries[0]["t"] if entries else 0
    for entry in entries:
        if entry["k"] not in INPUT_KINDS:
            continue
        rebuild(driver, [entry])
        node = getattr(flow, "node_name", "")
        if not timeline or timeline[-1][1] != node:
            timeline.append(((entry["t"] - t0) // 1_000_000, node))
    return timeline


def line_latencies(call: PhoneCall) -> list[int | None]:
    """Per caller line: its speech's end -> the first agent frame the carrier got after it (ms)."""
    core = call.result.core if call.result is not None else None
    latencies: list[int | None] = []
    for (start_ms, _end), line in zip(call.caller.said_ms, call.lines):
        if core is None or core.send_origin_ms is None:
            latencies.append(None)
            continue
        spoke_until = core.send_origin_ms + start_ms + speech_end_ms(line)
        first = next((f.arrival_ms for f in core.frames if f.arrival_ms > spoke_until), None)
        latencies.append(None if first is None else int(round(first - spoke_until)))
    return latencies


def judge_call(call: PhoneCall, paths: list[Path], agent) -> dict[str, Any]:
    from voicecore.record import RecordError, load_record
    from voicecore.store.summary import summarize_record

    test = call.test
    failures: list[dict[str, Any]] = []
    transcript: list[str] = []
    outcome = {"name": test.name, "file": test.file, "call_sid": call.call_sid, "failures": failures,
               "expectations": expectation_count(test), "transcript": transcript}
    problems = list(call.result.errors) if call.result is not None else ["the call was not placed"]
    if not paths:
        failures.append({"turn": 0, "caller": None, "transcript": [],
                         "message": "the call left no record: " + ("; ".join(problems) or "the stack did not answer it")})
        outcome["outcome"] = "failed"
        return outcome
    try:
        header, entries, _complete = load_record(paths[-1])
    except (OSError, RecordError, ValueError) as exc:
        failures.append({"turn": 0, "caller": None, "transcript": [], "message": f"its record cannot be read: {exc}"})
        outcome["outcome"] = "failed"
        return outcome
    summary = summarize_record(header, entries, paths[-1].name)
    outcome["call_seconds"] = round(summary.duration_ms / 1000, 3)
    timeline = node_timeline(header, entries)
    t0_ms = entries[0]["t"] / 1_000_000 if entries else 0.0
    starts = [clock_ms - t0_ms for clock_ms in call.caller.said_clock_ms]
    judges_greeting = test.turns[0].say is None
    turns = split_turns(summary, timeline, starts, line_latencies(call), judges_greeting,
                        getattr(agent, "transfer_to", ""))
    first = starts[0] if starts else float("inf")
    if not judges_greeting:  # the greeting is context for the failures, not a turn of the test
        transcript += [event.describe() for at, event in call_events(summary) if at < first]
    line = 0
    for index, spec in enumerate(test.turns):
        if spec.say is not None:
            if line >= len(starts):
                ended = summary.outcome != "caller_hangup"
                failures.append({"turn": index, "caller": spec.say, "transcript": transcript[-TRANSCRIPT_CONTEXT_LINES:],
                                 "message": "the call had already ended" if ended else
                                 f"the caller's line was never said ({'; '.join(problems) or 'the call ended first'})"})
                break
            transcript.append(f"caller: {spec.say}")
            line += 1
        position = index if judges_greeting else line - 1  # of the turn in `turns`
        turn = turns[position]
        transcript += [event.describe() for event in turn.events if event.kind != "heard"]
        # the caller's wait that ended this turn (TurnCaller.gave_up counts the greeting's wait as 0)
        if (position if judges_greeting else position + 1) in call.caller.gave_up:
            transcript.append("[the agent was still busy (or silent) when the caller's wait ran out]")
        for message in judge_turn(spec.expect, turn.events, turn.node, turn.latency_ms):
            failures.append({"turn": index, "caller": spec.say, "message": message,
                             "transcript": transcript[-TRANSCRIPT_CONTEXT_LINES:]})
    outcome["outcome"] = "failed" if failures else "passed"
    return outcome
