"""An agent's callers as simulated phone calls: their lines, their rounds, and the judging of each call.

Owns what ``voicecore test --phone`` and ``voicecore demo --agent DIR`` (an agent without demo.toml) share:
the caller of each test (its lines spoken by espeak-ng, voicecore/sim/caller_voice.py; said in turn,
voicecore/sim/turn_caller.py), the grouping of tests by the fake API they need, generic callers for an agent
without tests (a greeting, a question from its knowledge folder, a goodbye), and the judging of a call's
record against the test's expectations (voicecore/chat/phone_turns.py). Bringing the stack up and placing
the calls is the shells' business (workers/chat/phone.py, voicecore/demo.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
from pathlib import Path
from typing import Any

from voicecore.chat.agent_tests import (AgentTest, Grounds, TurnSpec, expectation_count, find_tests, judge_turn, load_test,
                                        rubrics)
from voicecore.chat.phone_turns import call_events, split_turns
from voicecore.record import record_paths
from voicecore.sim.caller_voice import speak
from voicecore.sim.carrier_core import speech_end_ms
from voicecore.sim.model import SimConfig, SimTurn
from voicecore.sim.turn_caller import TurnCaller

TRANSCRIPT_CONTEXT_LINES = 12
PHONE_RUBRIC = "rubric expectations are judged in text runs (voicecore test without --phone)"
CALL_CAP_S_PER_TURN = 40.0  # a call is cut off after this long per caller line (a stuck agent fails, not hangs)
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


def call_sim_config(test: AgentTest, demo_rules: tuple, phrases: tuple[tuple[str, bytes], ...]) -> SimConfig:
    """The model simulator's behaviour on a test's call: its rules (else demo.toml's), every registered line."""
    rules = test.rules if test.rules is not None else demo_rules
    return SimConfig(turns=tuple(rules), caller_phrases=phrases, transcription_delay_ms=TRANSCRIPTION_MS)


async def place_test_calls(config, tests: list[AgentTest], phrases: dict[str, bytes], demo: tuple, sim, rest,
                           tool_server) -> list[PhoneCall]:
    """One call per test against the running stack ``config`` describes, round by round (``rounds``: the
    fake API ``tool_server`` answers as the round's tests need); each call's simulator behaviour registered
    on ``sim`` (ModelSimServer.call_configs) under its call sid. The calls, each with its CallResult."""
    from voicecore.sim.carrier import place_call

    registered = tuple(phrases.items())
    lead_frames = max(1, config.lead_ms // 20)
    placed: list[PhoneCall] = []
    for routes, group in rounds(tests, demo):
        tool_server.routes = list(routes)
        calls = []
        for test in group:
            sid = "CA" + secrets.token_hex(16)
            lines = [phrases[t.say] for t in test.turns if t.say is not None]
            sim.call_configs[sid] = call_sim_config(test, demo[0], registered)
            calls.append(PhoneCall(test, sid, TurnCaller(lines), lines))

        async def one(call: PhoneCall) -> None:
            call.result = await place_call(config.base_url, config.twilio_auth_token, call_script(call), lead_frames,
                                           call_sid=call.call_sid, rest=rest)

        await asyncio.gather(*(one(call) for call in calls))
        placed += calls
    return placed


def call_script(call: PhoneCall):
    from voicecore.sim.carrier import CallScript

    cap_ms = int(1000 * (20 + CALL_CAP_S_PER_TURN * max(1, len(call.lines))))
    return CallScript(duration_ms=cap_ms, caller=call.caller)


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


def _grounds(test: AgentTest, agent) -> Grounds:
    """The agent's knowledge (read only when a turn expects ``numbers_grounded``) for judging the call's numbers."""
    knowledge = None
    if getattr(agent, "knowledge_dir", "") and any(t.expect.get("numbers_grounded") for t in test.turns):
        from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir

        knowledge = KnowledgeBase.from_documents(load_knowledge_dir(agent.knowledge_dir))
    return Grounds(knowledge, agent.gate_language)


def judge_call(call: PhoneCall, paths: list[Path], agent) -> dict[str, Any]:
    from voicecore.record import RecordError, load_record
    from voicecore.store.summary import summarize_record

    test = call.test
    failures: list[dict[str, Any]] = []
    transcript: list[str] = []
    skipped = [{"turn": index, "caller": spec.say, "expectation": "rubric", "rubric": rubric, "reason": PHONE_RUBRIC}
               for index, spec in enumerate(test.turns) for rubric in rubrics(spec.expect)]
    outcome = {"name": test.name, "file": test.file, "call_sid": call.call_sid, "failures": failures, "skipped": skipped,
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
    grounds = _grounds(test, agent)
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
        grounds.note(turn.events)
        for message in judge_turn(spec.expect, turn.events, turn.node, turn.latency_ms, grounds):
            failures.append({"turn": index, "caller": spec.say, "message": message,
                             "transcript": transcript[-TRANSCRIPT_CONTEXT_LINES:]})
    outcome["outcome"] = "failed" if failures else "passed"
    return outcome


# The generic caller's lines, by the agent's main language: an opening, the question (its topic: a heading of
# the knowledge folder), a goodbye; and what the simulated model answers to the opening.
GENERIC_LINES = {
    "en": ("Hello, I have a question.", "What about {topic}?", "That is all, thank you. Goodbye.",
           "Of course. What would you like to know?", "Goodbye!"),
    "sv": ("Hej, jag har en fråga.", "Hur är det med {topic}?", "Det var allt, tack. Hej då.",
           "Absolut. Vad vill du veta?", "Hej då!"),
}
_HEADING = re.compile(r"^#{2,6}\s+(.+?)\s*$")


def knowledge_fact(knowledge_dir: str) -> tuple[str, str] | None:
    """(a topic, what the knowledge says of it): the first heading below the title of the first Markdown or
    text file (by name) that has a line of text under it, and that line; None for no such heading."""
    if not knowledge_dir or not Path(knowledge_dir).is_dir():
        return None
    for path in sorted(Path(knowledge_dir).rglob("*")):
        if path.suffix.lower() not in (".md", ".txt") or not path.is_file():
            continue
        topic = ""
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            heading = _HEADING.match(raw)
            if heading:
                topic = heading.group(1).strip()
                continue
            text = raw.strip().lstrip("-*").strip()
            if topic and text and not text.startswith("#"):
                return topic, text.rstrip(".") + "."
    return None


def generic_test(agent) -> AgentTest:
    """A generic caller of ``agent`` (an AgentSpec), as a test: the greeting, an opening, a question the
    knowledge folder answers (the simulated model answers with the knowledge's line, which the gate must let
    through), and a goodbye (the agent hangs up if one of its functions ends the call)."""
    language = (agent.languages[0] if agent.languages else "en").split("-")[0].lower()
    opening, question, goodbye, opening_answer, goodbye_answer = GENERIC_LINES.get(language, GENERIC_LINES["en"])
    rules = [SimTurn(when=opening.rstrip(".").lower(), answer=opening_answer)]
    turns = [TurnSpec(None, {}), TurnSpec(opening, {"said": (opening_answer,)})]
    fact = knowledge_fact(agent.knowledge_dir)
    if fact is not None:
        topic, answer = fact
        asked = question.format(topic=topic.lower())
        rules.append(SimTurn(when=topic.lower(), answer=answer))
        turns.append(TurnSpec(asked, {"said": (answer,)}))
    # a function of the first node that ends the call (the model can call only what the node declares)
    first_node = agent.flow.nodes[agent.flow.initial_node]
    ending = next((name for name in first_node.functions
                   if name in agent.flow.functions and agent.flow.functions[name].action == "end_call"), "")
    bye_words = goodbye.split(".")[-2].strip().lower()  # "goodbye", "hej då"
    if ending:
        rules.append(SimTurn(when=bye_words, call=ending))
        turns.append(TurnSpec(goodbye, {"ended": True}))
    else:
        rules.append(SimTurn(when=bye_words, answer=goodbye_answer))
        turns.append(TurnSpec(goodbye, {"said": (goodbye_answer,)}))
    return AgentTest(name="a generic caller: a greeting, a question, a goodbye", file=str(Path(agent.directory) / "(generic caller)"),
                     turns=tuple(turns), rules=tuple(rules))


@dataclasses.dataclass(frozen=True)
class AgentCallers:
    """The callers of an agent without demo.toml, for the demo: its tests, or a generic caller."""

    kind: str  # "tests" (its tests/*.toml) or "generic"
    tests: tuple[AgentTest, ...]
    phrases: dict[str, bytes]  # every line, spoken
    demo: tuple = ((), (), "")  # no demo.toml: no default rules, routes or API variable

    webhook_envs: frozenset[str] = frozenset()  # the variables the agent's webhook URLs read

    @property
    def envs(self) -> set[str]:
        """The variables that get the fake API's address: the tests' and the webhooks' (a generic caller's
        agent still needs its URLs to resolve; the API then answers every request with 404)."""
        return {test.tool_server_env for test in self.tests if test.tool_server_env} | set(self.webhook_envs)

    @property
    def sim_config(self) -> SimConfig:
        """The simulator's behaviour for a session of no test's call (each call gets its test's)."""
        return SimConfig(caller_phrases=tuple(self.phrases.items()), transcription_delay_ms=TRANSCRIPTION_MS)

    def for_calls(self, calls: int) -> list[AgentTest]:
        """Every test once, cycled to ``calls`` calls when more are asked for."""
        count = max(calls, len(self.tests))
        return [self.tests[i % len(self.tests)] for i in range(count)]


def agent_callers(agent_dir: Path, agent) -> AgentCallers:
    """The tests of ``agent_dir`` as callers, or a generic caller when it has none; every line spoken
    (AgentTestError for a test file that cannot be used, SpeechUnavailable without espeak-ng)."""
    tests = tuple(load_test(path) for path in find_tests(agent_dir))
    kind = "tests" if tests else "generic"
    if not tests:
        tests = (generic_test(agent),)
    language = agent.languages[0] if agent.languages else "en"
    return AgentCallers(kind, tests, spoken_lines(list(tests), language), webhook_envs=webhook_variables(agent))


def webhook_variables(agent) -> frozenset[str]:
    """The environment variables the agent's webhook URLs name (``${NAME}``), from an agent loaded without
    an environment (its URLs unresolved)."""
    from voicecore.agent.load import ENV_REFERENCE

    names: set[str] = set()
    for function in agent.flow.functions.values():
        url = getattr(function.tool, "url", "")
        if isinstance(url, str):
            names.update(ENV_REFERENCE.findall(url))
    return frozenset(names)


def judged_tests(placed: list[PhoneCall], record_dir: Path | None, agent) -> dict[str, Any]:
    """The demo report's ``agent_tests``: each caller's test judged on its call's record."""
    if record_dir is None:
        return {"passed": 0, "failed": 0, "tests": [],
                "problems": ["no records (--no-record): the callers' expectations cannot be judged"]}
    tests = []
    for call in placed:
        result = judge_call(call, record_paths(record_dir, [call.call_sid]), agent)
        tests.append({"name": result["name"], "file": result["file"], "call_sid": call.call_sid,
                      "outcome": result["outcome"], "failures": [f"turn {f['turn']}: {f['message']}" for f in result["failures"]]})
    passed = sum(1 for test in tests if test["outcome"] == "passed")
    return {"passed": passed, "failed": len(tests) - passed, "tests": tests, "problems": []}
