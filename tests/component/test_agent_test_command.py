"""`voicecore test` and `voicecore chat` as a user runs them (subprocesses), on the shipped examples and on a
copy of the receptionist whose flow is broken on purpose."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def voicecore(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voicecore.cli", *args], capture_output=True, text=True,
                          input=stdin, timeout=120, cwd=ROOT)


def test_every_example_passes_its_tests_with_json_and_junit(tmp_path):
    junit = tmp_path / "agents.xml"
    run = voicecore("test", str(EXAMPLES / "interview"), str(EXAMPLES / "receptionist"), str(EXAMPLES / "shop-assistant"),
                    "--json", "--junit", str(junit))
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["failed"] == 0 and report["passed"] == len(report["tests"]) >= 15
    for test in report["tests"]:
        assert set(test) >= {"name", "outcome", "failures"} and test["outcome"] == "passed"
    per_agent = {}
    for test in report["tests"]:
        per_agent[Path(test["agent"]).name] = per_agent.get(Path(test["agent"]).name, 0) + 1
    assert min(per_agent.values()) >= 5, per_agent
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == str(report["passed"]) and suite.get("failures") == "0"


def test_a_tool_process_slow_to_start_does_not_fail_a_test_on_its_tools_timeout(tmp_path):
    """The interview's record_answer has a 2 s timeout: a tool process that imports for 3 s (a loaded machine,
    a heavy tool module) must not make the first test that calls a tool fail on it."""
    agent = tmp_path / "interview"
    shutil.copytree(EXAMPLES / "interview", agent)
    tools = agent / "interview_tools.py"
    tools.write_text(tools.read_text(encoding="utf-8") + "\nimport time\ntime.sleep(3)  # a slow import\n", encoding="utf-8")
    for test in (agent / "tests").glob("*.toml"):  # only the test that records an answer: the first tool call
        if "records the answer" not in test.read_text(encoding="utf-8"):
            test.unlink()
    run = voicecore("test", str(agent), "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert (report["passed"], report["failed"]) == (1, 0), report


def test_a_wrong_transition_is_caught_with_a_readable_failure(tmp_path):
    broken = tmp_path / "receptionist"
    shutil.copytree(EXAMPLES / "receptionist", broken)
    flow_path = broken / "flow.json"
    flow = json.loads(flow_path.read_text())
    # the mistake (which `voicecore check` cannot see: every node is still reachable): the transitions swapped,
    # a booking that succeeded goes back to reception and one that failed goes on to `booked`
    flow["functions"]["book_appointment"]["transitions"] = {"success": "reception", "error": "booked"}
    flow_path.write_text(json.dumps(flow))
    run = voicecore("test", str(broken))
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert "FAIL receptionist: books a cleaning after the caller's yes" in out
    assert "expected the flow at node 'booked'; it is at 'reception'" in out
    assert "| caller: Yes, please." in out  # the transcript around the failure
    assert "| [tool book_appointment -> ok:" in out
    assert "FAIL receptionist: a failing booking API is said, not hidden" in out
    assert "expected the flow at node 'reception'; it is at 'booked'" in out
    assert "4 passed, 2 failed" in out
    as_json = json.loads(voicecore("test", str(broken), "--json").stdout)
    failures = sorted(f for t in as_json["tests"] if t["outcome"] == "failed" for f in t["failures"])
    assert as_json["failed"] == 2
    assert "expected the flow at node 'booked'; it is at 'reception'" in failures
    assert "expected the flow at node 'reception'; it is at 'booked'" in failures


def test_numbers_grounded_fails_on_a_number_neither_knowledge_nor_a_tool_gave(tmp_path):
    agent = tmp_path / "receptionist"
    shutil.copytree(EXAMPLES / "receptionist", agent)
    test_file = agent / "tests" / "books-a-cleaning.toml"
    # the confirmation repeats the date and time the caller asked for: the gate lets them through (they are the
    # function's arguments), but they are in neither the knowledge nor a tool's result
    test_file.write_text(test_file.read_text().replace('said = "Shall I book a cleaning"\n',
                                                       'said = "Shall I book a cleaning"\nnumbers_grounded = true\n'))
    run = voicecore("test", str(agent), "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads(run.stdout)
    failed = [t for t in report["tests"] if t["outcome"] == "failed"]
    assert [t["name"] for t in failed] == ["books a cleaning after the caller's yes"] and report["passed"] == 5
    assert failed[0]["failures"] == [
        "expected every number said to be in the agent's knowledge or a tool's result; not there: "
        "'26th of November' in 'Shall I book a cleaning on Thursday the 26th of November at ten a.m.?', "
        "'ten a.m.' in 'Shall I book a cleaning on Thursday the 26th of November at ten a.m.?'"]
    printed = voicecore("test", str(agent)).stdout  # the failure with the transcript around it
    assert "turn 0 (caller: \"I'd like to book a cleaning on November 26 at 10.\"): expected every number said" in printed
    assert "| agent: Shall I book a cleaning on Thursday the 26th of November at ten a.m.?" in printed


RUBRIC_TEST = """name = "asks the first question"

[[turn]]
say = "Yes, I am ready to start."
said = "First question"
rubric = ["asks how long the candidate has worked with Python", "promises a salary figure"]
"""


def _rubric_agent(tmp_path) -> Path:
    agent = tmp_path / "interview"
    shutil.copytree(EXAMPLES / "interview", agent)
    shutil.rmtree(agent / "tests")
    (agent / "tests").mkdir()
    (agent / "tests" / "rubric.toml").write_text(RUBRIC_TEST)
    return agent


def test_rubrics_without_a_model_are_skipped_with_the_reason_never_passed(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VOICECORE_REALTIME_API_KEY",
                                                              "VOICECORE_REALTIME_URL")}
    agent = _rubric_agent(tmp_path)
    run = subprocess.run([sys.executable, "-m", "voicecore.cli", "test", str(agent), "--json"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["skipped"] == 2 and report["passed"] == 1 and report["failed"] == 0
    (test,) = report["tests"]
    reason = "no model to judge it: set VOICECORE_REALTIME_API_KEY or OPENAI_API_KEY (or realtime_url) to judge rubric expectations"
    assert test["skipped"] == [
        {"turn": 0, "expectation": "rubric", "rubric": "asks how long the candidate has worked with Python", "reason": reason},
        {"turn": 0, "expectation": "rubric", "rubric": "promises a salary figure", "reason": reason}]
    printed = subprocess.run([sys.executable, "-m", "voicecore.cli", "test", str(agent)], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env=env).stdout
    assert "  turn 0: SKIPPED rubric 'promises a salary figure': no model to judge it" in printed
    assert "1 passed, 0 failed, 3 expectations (2 skipped)" in printed


def test_rubrics_are_judged_by_the_configured_model_over_its_socket(tmp_path):
    """The configured model here is the simulator's Realtime server on loopback (no network): it plays the agent's
    model and the judge, each rubric's answer scripted by the rubric's words."""
    import asyncio
    import os

    from voicecore.sim.model import SimConfig, SimTurn
    from voicecore.sim.model_server import serve_model_sim

    rules = (SimTurn(when="has worked with python", answer="PASS: the agent asks for the years of Python."),
             SimTurn(when="promises a salary figure", answer="FAIL: the agent names no salary."),
             SimTurn(when="ready to start", call="begin_interview", arguments="{}",
                     then="Great. First question: how long have you worked with Python?"))
    agent = _rubric_agent(tmp_path)

    async def scenario():
        sim, port = await serve_model_sim(config=SimConfig(turns=rules))
        try:
            env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VOICECORE_REALTIME_API_KEY")}
            env["VOICECORE_REALTIME_URL"] = f"ws://127.0.0.1:{port}/v1/realtime"
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "voicecore.cli", "test", str(agent), "--json", cwd=ROOT, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(child.communicate(), 90)
            return child.returncode, out.decode(), err.decode(), len(sim.registry)
        finally:
            await sim.aclose()

    code, out, err, sessions = asyncio.run(scenario())
    assert code == 1, out + err
    report = json.loads(out)
    (test,) = report["tests"]
    assert test["skipped"] == [] and report["skipped"] == 0
    assert test["failures"] == ["expected the answer to meet the rubric 'promises a salary figure'; the judge: "
                                "the agent names no salary."]
    assert sessions == 3  # the conversation's, and one per rubric


def test_a_bad_test_file_is_a_usage_error_naming_it(tmp_path):
    agent = tmp_path / "interview"
    shutil.copytree(EXAMPLES / "interview", agent)
    (agent / "tests" / "typo.toml").write_text('[[turn]]\nsay = "hello"\nsaid_it = "x"\n')
    run = voicecore("test", str(agent))
    assert run.returncode == 2
    assert "typo.toml: turn[0]: unknown key(s) said_it" in run.stderr


def test_chat_reads_one_message_a_line_and_prints_the_answers():
    run = voicecore("chat", str(EXAMPLES / "interview"),
                    stdin="Yes, I am ready to start.\nI have worked with Python for five years.\nThat is all from me, thanks.\n")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "Hello, and thank you for taking the time for this interview. Are you ready to begin?",
        "Great. First question: how long have you worked with Python?",
        "Thank you. That was my last question.",
        "Thank you for your time. We will be in touch. Goodbye!",
    ]


def test_chat_talks_to_a_configured_realtime_server_over_its_socket(tmp_path):
    """With realtime_url set, chat dials it (here the simulator's server on loopback, as a vendor would be):
    the same conversation on the real clock, over a real WebSocket, in text output modality."""
    import asyncio
    import os

    from voicecore.sim.model import SimConfig, SimTurn
    from voicecore.sim.model_server import serve_model_sim

    rules = (SimTurn(when="ready to start", call="begin_interview", arguments="{}",
                     then="Great. First question: how long have you worked with Python?"),
             SimTurn(when="that is all from me", call="end_interview", arguments="{}"))

    async def scenario():
        sim, port = await serve_model_sim(config=SimConfig(turns=rules))
        try:
            env = {**os.environ, "VOICECORE_REALTIME_URL": f"ws://127.0.0.1:{port}/v1/realtime"}
            env.pop("OPENAI_API_KEY", None)
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "voicecore.cli", "chat", str(EXAMPLES / "interview"), cwd=ROOT, env=env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(
                child.communicate(b"Yes, I am ready to start.\nThat is all from me, thanks.\n"), 60)
            return child.returncode, out.decode(), err.decode(), list(sim.registry.values())
        finally:
            await sim.aclose()

    code, out, err, sessions = asyncio.run(scenario())
    assert code == 0, err
    assert "talking to openai ws://127.0.0.1:" in err
    assert out.splitlines() == [
        "Hello, and thank you for taking the time for this interview. Are you ready to begin?",
        "Great. First question: how long have you worked with Python?",
        "Thank you for your time. We will be in touch. Goodbye!",
    ]
    (session,) = sessions
    assert session.record.client_events.get("input_audio_buffer.append", 0) == 0  # text only, nothing spoken
    assert all(r.audio == b"" for r in session.record.responses)


def test_phone_mode_without_espeak_ng_says_so_and_exits_2(tmp_path):
    # a PATH with python's directory and no espeak-ng: the command must say what is missing, start nothing
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    run = subprocess.run([sys.executable, "-m", "voicecore.cli", "test", str(EXAMPLES / "interview"), "--phone"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env={"PATH": str(bin_dir)})
    assert run.returncode == 2, run.stdout + run.stderr
    assert "espeak-ng" in run.stderr and "not installed" in run.stderr
    assert run.stdout == ""
