"""`voicecore chat DIR` and `voicecore test DIR...`: talk to an agent in a terminal, and run its tests.

Both run the agent through the text channel (workers/chat/runner.py): against the vendor's Realtime API when
one is configured (``realtime_url`` or ``realtime_api_key``, or ``OPENAI_API_KEY`` in the environment),
otherwise against the model simulator. They live outside the library because they run the validator's core
(entry point group ``voicecore.commands``).
`chat` shows every line, function call, tool result, confirmation, node and gate verdict as it happens; with
stdin not a terminal it reads one caller message per line. `test` runs ``tests/*.toml`` of each agent
(voicecore/chat/agent_tests.py), prints each failure with the transcript around it, writes JUnit XML
(``--junit``) or prints one JSON object (``--json``: ``passed``, ``failed``, ``tests``), and exits 1 on any
failure (2: a test file or an agent that cannot be used).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from typing import Any, TextIO

from picows import WSError

from voicecore.agent.load import AgentError, load_agent
from voicecore.chat.agent_tests import (AgentTest, AgentTestError, Grounds, expectation_count, find_tests, judge_turn,
                                        load_test, rubrics)
from voicecore.chat.rubric import NO_MODEL
from voicecore.config import ConfigError, load_config
from voicecore.sim.caller_voice import ESPEAK, SpeechUnavailable, espeak_path
from voicecore.sim.tool_server import ToolServer
from voicecore.supervise import StackError
from workers.chat.runner import conversation_for, demo_world, knowledge_for, tool_pool_for, vendor_target

TRANSCRIPT_CONTEXT_LINES = 12  # lines of the conversation shown before a failure


def _model_note(config, agent, out: TextIO) -> None:
    target = vendor_target(config, agent)
    if target is not None:
        print(f"voicecore: talking to {target.describe()} (the test files' [[sim]] rules do not apply)", file=out)


# ---------------------------------------------------------------------------------------------- chat
def run_chat(agent_dir: str, stdin: TextIO, stdout: TextIO, config_path: str | None = None) -> int:
    try:
        agent = load_agent(agent_dir)
        config = load_config(os.environ, config_path)
        rules, routes, env = demo_world(agent_dir)
    except AgentError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    except (ConfigError, ValueError, tomllib.TOMLDecodeError) as exc:
        print(f"voicecore chat: {exc}", file=sys.stderr)
        return 2
    _model_note(config, agent, sys.stderr)
    interactive = stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
    return asyncio.run(_chat(agent, config, rules, routes, env, stdin, stdout, interactive))


async def _chat(agent, config, rules, routes, env, stdin: TextIO, stdout: TextIO, interactive: bool) -> int:
    def show(event) -> None:
        if event.kind == "said":
            print(event.text if not interactive else f"agent> {event.text}", file=stdout, flush=True)
        elif interactive:
            print(f"  {event.describe()}", file=stdout, flush=True)

    pool = tool_pool_for(agent)
    server = ToolServer(routes) if routes and env else None
    environ = dict(os.environ)
    try:
        if pool is not None:
            pool.start()
        if server is not None:
            environ[env] = await server.start()
        conversation = conversation_for(agent, config, rules, pool=pool, environ=environ, on_event=show)
        try:
            await conversation.start()
        except (OSError, WSError, TimeoutError) as exc:
            print(f"voicecore chat: cannot open the model session: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        while not conversation.ended:
            try:
                line = input("you> ") if interactive else stdin.readline()
            except (EOFError, KeyboardInterrupt):  # Ctrl-D or Ctrl-C: the caller leaves
                break
            if not interactive and line == "":
                break
            line = line.strip()
            if line:
                await conversation.say(line)
        await conversation.close()
    finally:
        if server is not None:
            await server.stop()
        if pool is not None:
            await pool.close()
    return 0


# ---------------------------------------------------------------------------------------------- test
async def _run_one(agent, config, test: AgentTest, demo: tuple, pool, knowledge) -> dict[str, Any]:
    rules = test.rules if test.rules is not None else demo[0]
    routes = test.routes if test.routes is not None else demo[1]
    env = test.tool_server_env or demo[2]
    server = ToolServer(routes) if routes and env else None
    environ = dict(os.environ)
    transcript: list[str] = []
    failures: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    started = time.monotonic()
    grounds = Grounds(knowledge, agent.gate_language)
    judge_target = vendor_target(config, agent)  # the model that judges rubrics; None: they are skipped
    try:
        conversation = conversation_for(agent, config, rules, pool=pool, knowledge=knowledge, environ=environ,
                                        session_id=f"CHAT{zlib.crc32(test.file.encode()):08x}")
        if server is not None:
            environ[env] = await server.start()
        for index, turn_spec in enumerate(test.turns):
            if index == 0:
                try:
                    turn = await conversation.start()
                except (OSError, WSError, TimeoutError) as exc:
                    failures.append({"turn": 0, "caller": None, "transcript": [],
                                     "message": f"cannot open the model session: {type(exc).__name__}: {exc}"})
                    break
                transcript += [e.describe() for e in turn.events]
                grounds.note(turn.events)
                if turn_spec.say is None:
                    _judge(turn_spec, turn, conversation, index, transcript, failures, grounds)
                    await _judge_rubrics(turn_spec, conversation, index, transcript, failures, skipped, judge_target,
                                         config.realtime_naming)
                    continue
            if conversation.ended:
                failures.append({"turn": index, "caller": turn_spec.say, "message": "the call had already ended",
                                 "transcript": transcript[-TRANSCRIPT_CONTEXT_LINES:]})
                break
            transcript.append(f"caller: {turn_spec.say}")
            turn = await conversation.say(turn_spec.say or "")
            transcript += [e.describe() for e in turn.events]
            if not turn.settled:
                transcript.append("[the agent was still busy when the turn's time ran out]")
            grounds.note(turn.events)
            _judge(turn_spec, turn, conversation, index, transcript, failures, grounds)
            await _judge_rubrics(turn_spec, conversation, index, transcript, failures, skipped, judge_target,
                                 config.realtime_naming)
    finally:
        await conversation.close()
        if server is not None:
            await server.stop()
    return {"name": test.name, "file": test.file, "outcome": "failed" if failures else "passed", "failures": failures,
            "skipped": skipped, "expectations": expectation_count(test), "seconds": round(time.monotonic() - started, 3),
            "transcript": transcript}


def _judge(turn_spec, turn, conversation, index, transcript, failures, grounds) -> None:
    for message in judge_turn(turn_spec.expect, turn.events, conversation.session.flow.node_name, turn.latency_ms,
                              grounds):
        failures.append({"turn": index, "caller": turn_spec.say, "message": message,
                         "transcript": transcript[-TRANSCRIPT_CONTEXT_LINES:]})


async def _judge_rubrics(turn_spec, conversation, index, transcript, failures, skipped, target, naming) -> None:
    """The turn's rubrics, each judged by the model (``target``) on the conversation so far; skipped without one."""
    wanted = rubrics(turn_spec.expect)
    if not wanted:
        return
    if target is None:
        skipped += [{"turn": index, "caller": turn_spec.say, "expectation": "rubric", "rubric": rubric, "reason": NO_MODEL}
                    for rubric in wanted]
        return
    from workers.chat.judge import judge_rubric

    lines = [(speaker, text) for speaker, text, _at in conversation.session.transcript]
    for rubric in wanted:
        verdict = await judge_rubric(target, naming, rubric, lines)
        if not verdict.ok:
            failures.append({"turn": index, "caller": turn_spec.say, "transcript": transcript[-TRANSCRIPT_CONTEXT_LINES:],
                             "message": f"expected the answer to meet the rubric {rubric!r}; the judge: {verdict.reason}"})


async def _run_agent(agent_dir: str, config, phone_log=None) -> tuple[list[dict[str, Any]], list[str]]:
    problems: list[str] = []
    try:
        agent = load_agent(agent_dir)
        demo = demo_world(agent_dir)
        tests = [load_test(path) for path in find_tests(agent_dir)]
    except AgentError as exc:
        return [], [str(p) for p in exc.problems]
    except (AgentTestError, ValueError, tomllib.TOMLDecodeError) as exc:
        return [], [str(exc)]
    if not tests:
        return [], [f"{agent_dir}: no tests (tests/*.toml)"]
    if phone_log is not None:
        from workers.chat.phone import run_phone_tests

        try:
            return await run_phone_tests(agent_dir, agent, tests, demo, config, phone_log), problems
        except (SpeechUnavailable, StackError) as exc:
            return [], [f"{agent_dir}: {exc}"]
    _model_note(config, agent, sys.stderr)
    pool = tool_pool_for(agent)
    knowledge = knowledge_for(agent)
    results = []
    try:
        if pool is not None:
            pool.start()
            # A test's tool timeout is the tool's, not the pool's start: on a loaded machine a tool process
            # imports for seconds, and the first test's tool waited for it (a 2 s timeout said "Sorry ...").
            # One that never comes up leaves the tests to say so through their tools' errors.
            with contextlib.suppress(TimeoutError):
                await pool.wait_ready()
        for test in tests:
            result = await _run_one(agent, config, test, demo, pool, knowledge)
            result["agent"] = agent_dir
            results.append(result)
    finally:
        if pool is not None:
            await pool.close()
    return results, problems


def write_junit(results: list[dict[str, Any]], path: str, seconds: float) -> None:
    failed = sum(1 for r in results if r["outcome"] == "failed")
    suite = ET.Element("testsuite", name="voicecore agent tests", tests=str(len(results)), failures=str(failed),
                       errors="0", time=f"{seconds:.3f}")
    for result in results:
        case = ET.SubElement(suite, "testcase", classname=Path(result["agent"]).name, name=result["name"],
                             time=f"{result['seconds']:.3f}", file=result["file"])
        for failure in result["failures"]:
            element = ET.SubElement(case, "failure", message=failure["message"])
            element.text = "\n".join(failure["transcript"])
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def run_test(agent_dirs: list[str], junit: str | None, as_json: bool, out: TextIO, config_path: str | None = None,
             phone: bool = False) -> int:
    """``phone``: run each test as a simulated phone call through the whole stack (workers/chat/phone.py)."""
    try:
        config = load_config(os.environ, config_path)
    except ConfigError as exc:
        print(f"voicecore test: {exc}", file=sys.stderr)
        return 2
    if phone and espeak_path() is None:
        print(f"voicecore test: --phone speaks the callers' lines with {ESPEAK}, which is not installed "
              "(Debian: apt-get install espeak-ng)", file=sys.stderr)
        return 2
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="voicecore-test-") as tmp:
        log_path = Path(tmp) / "stack.log"
        with open(log_path, "wb") as log_file:
            for agent_dir in agent_dirs:
                if not Path(agent_dir).is_dir():
                    print(f"voicecore test: {agent_dir}: not a directory, skipped", file=sys.stderr)
                    continue
                try:
                    found, trouble = asyncio.run(_run_agent(agent_dir, config, log_file if phone else None))
                except (asyncio.CancelledError, KeyboardInterrupt):
                    print("voicecore test: stopped before the end", file=sys.stderr)
                    return 130
                results += found
                problems += trouble
        if phone and (problems or any(r["outcome"] == "failed" for r in results)):
            sys.stderr.write(log_path.read_text(errors="replace")[-8000:])  # the stack's side of what went wrong
    seconds = time.monotonic() - started
    passed = sum(1 for r in results if r["outcome"] == "passed")
    failed = len(results) - passed
    skipped_count = sum(len(r.get("skipped", ())) for r in results)  # expectations not judged (a rubric without a model)
    if junit:
        write_junit(results, junit, seconds)
    if as_json:
        tests = [{"name": r["name"], "outcome": r["outcome"], "failures": [f["message"] for f in r["failures"]],
                  "skipped": [{k: s[k] for k in ("turn", "expectation", "rubric", "reason")} for s in r.get("skipped", ())],
                  "agent": r["agent"], "file": r["file"], "expectations": r["expectations"], "seconds": r["seconds"]}
                 for r in results]
        print(json.dumps({"passed": passed, "failed": failed, "tests": tests, "problems": problems,
                          "expectations": sum(r["expectations"] for r in results), "skipped": skipped_count,
                          "seconds": round(seconds, 3)}),
              file=out)
    else:
        for result in results:
            mark = "PASS" if result["outcome"] == "passed" else "FAIL"
            print(f"{mark} {Path(result['agent']).name}: {result['name']} ({result['seconds']:.2f} s)", file=out)
            for failure in result["failures"]:
                caller = f" (caller: {failure['caller']!r})" if failure["caller"] else " (the greeting)"
                print(f"  turn {failure['turn']}{caller}: {failure['message']}", file=out)
                for line in failure["transcript"]:
                    print(f"    | {line}", file=out)
            for skip in result.get("skipped", ()):
                print(f"  turn {skip['turn']}: SKIPPED rubric {skip['rubric']!r}: {skip['reason']}", file=out)
        for problem in problems:
            print(f"voicecore test: {problem}", file=sys.stderr)
        not_judged = f" ({skipped_count} skipped)" if skipped_count else ""
        print(f"{passed} passed, {failed} failed, {sum(r['expectations'] for r in results)} expectations{not_judged} "
              f"in {seconds:.1f} s", file=out)
    if problems:
        return 2
    return 1 if failed else 0


def register(subparsers: Any) -> None:
    """Add `voicecore chat` and `voicecore test` (entry points ``voicecore.commands``: chat, test)."""
    if "chat" not in subparsers.choices:
        chat = subparsers.add_parser(
            "chat", help="talk to an agent directory in the terminal, through the text channel (the same flow, tools, "
                         "confirmations and gate as a call; the model simulator answers)")
        chat.add_argument("agent_dir", metavar="DIR", help="the agent directory")
        chat.set_defaults(func=lambda args: run_chat(args.agent_dir, sys.stdin, sys.stdout, args.config))
    if "test" not in subparsers.choices:
        test = subparsers.add_parser(
            "test", help="run the agent tests (tests/*.toml) of agent directories through the text channel; exit 1 "
                         "on any failure")
        test.add_argument("agent_dirs", nargs="+", metavar="DIR", help="agent directories")
        test.add_argument("--junit", metavar="PATH", help="also write the results as JUnit XML to PATH")
        test.add_argument("--json", action="store_true", help="print one JSON object: passed, failed, tests")
        test.add_argument("--phone", action="store_true",
                          help="run each test as a simulated phone call through the whole stack (the callers' lines "
                               "spoken by espeak-ng, the carrier and model simulators, real processes)")
        test.set_defaults(func=lambda args: run_test(args.agent_dirs, args.junit, args.json, sys.stdout, args.config,
                                                     args.phone))
