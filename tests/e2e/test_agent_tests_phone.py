"""`voicecore test DIR --phone`: an example's tests as simulated phone calls through the whole stack (real
processes, the carrier and model simulators, the callers' lines spoken by espeak-ng), on a copy of the
interview with one more test whose expectations are wrong, so the run must pass five and fail one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300

WRONG = """
name = "expects what the interview does not do"

[[turn]]
say = "Yes, I am ready to start."
node = "closing"
said = "welcome aboard"
function = "record_answer"
"""


def interview_with_a_wrong_test(directory: Path) -> list[str]:
    agent = directory / "interview"
    shutil.copytree(ROOT / "examples" / "interview", agent)
    (agent / "tests" / "wrong.toml").write_text(WRONG, encoding="utf-8")
    return [sys.executable, "-m", "voicecore.cli", "test", str(agent), "--phone", "--json", "--junit",
            str(directory / "phone.xml")]


def receptionist_without_callers(directory: Path) -> list[str]:
    agent = directory / "receptionist"
    shutil.copytree(ROOT / "examples" / "receptionist", agent)
    (agent / "demo.toml").unlink()
    shutil.rmtree(agent / "tests")
    return [sys.executable, "-m", "voicecore.cli", "demo", "--agent", str(agent), "--json",
            "--record-dir", str(directory / "records")]


COMMANDS = {"phone": interview_with_a_wrong_test, "demo": receptionist_without_callers}


def stop(process: subprocess.Popen) -> None:
    # SIGTERM, not SIGKILL: the command then stops its own stack's processes on the way out
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both commands run at once, each with its own stack (its own temporary directory and free ports): their
    calls wait on the clock, so side by side they take about the minutes of one. Both are waited for here, in
    the first test's setup: the lanes' lock (tests/conftest.py) is held a test at a time, so a command still
    running after that test would run beside a solo module. Output goes to files, not pipes, so that a
    command's full pipe never stalls it while the other one is waited for. Name -> the finished command (or its
    TimeoutExpired) and its directory."""
    started: dict[str, tuple[Path, subprocess.Popen]] = {}
    outcomes: dict[str, tuple[subprocess.CompletedProcess | subprocess.TimeoutExpired, Path]] = {}
    try:
        for name, command in COMMANDS.items():
            directory = tmp_path_factory.mktemp(name)
            argv = command(directory)
            with open(directory / "stdout", "wb") as out, open(directory / "stderr", "wb") as err:
                started[name] = directory, subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT)
        deadline = time.monotonic() + TIMEOUT_S
        for name, (directory, process) in started.items():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as expired:
                stop(process)
                outcomes[name] = expired, directory
                continue
            outcomes[name] = subprocess.CompletedProcess(process.args, process.returncode,
                                                         (directory / "stdout").read_text(),
                                                         (directory / "stderr").read_text()), directory
    finally:
        for _directory, process in started.values():
            if process.poll() is None:
                stop(process)

    def finished(name: str) -> tuple[subprocess.CompletedProcess, Path]:
        outcome, directory = outcomes[name]
        if isinstance(outcome, subprocess.TimeoutExpired):
            raise outcome
        return outcome, directory

    return finished


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_the_interviews_tests_run_as_phone_calls(runs):
    run, directory = runs("phone")
    junit = directory / "phone.xml"
    assert run.returncode == 1, run.stdout + run.stderr[-6000:]
    report = json.loads(run.stdout)
    by_name = {test["name"]: test for test in report["tests"]}
    assert (report["passed"], report["failed"]) == (5, 1), run.stdout + run.stderr[-6000:]
    wrong = by_name["expects what the interview does not do"]
    assert wrong["outcome"] == "failed"
    # what the stack did, read from the call's record: the function, the node, the lines the caller heard
    assert any("expected the flow at node 'closing'; it is at 'questioning'" in f for f in wrong["failures"])
    assert any("expected a line containing 'welcome aboard'" in f for f in wrong["failures"])
    assert any("expected a call of record_answer; functions called: begin_interview" in f for f in wrong["failures"])
    for test in report["tests"]:
        if test is not wrong:
            assert test["outcome"] == "passed" and test["failures"] == [], test
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "6" and suite.get("failures") == "1"


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_the_demo_of_an_agent_without_demo_toml_or_tests_uses_a_generic_caller(runs):
    run, _directory = runs("demo")
    assert run.returncode == 0, run.stdout + run.stderr[-6000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    # the demo's own figures, as for any demo, and the generic caller's three lines judged on the record
    assert report["ok"] and report["calls"] == 1 and report["real_turns"] == 3
    assert report["records_replayed_identical"] == 1
    assert report["callers"] == "generic"
    tests = report["agent_tests"]
    assert (tests["passed"], tests["failed"]) == (1, 0), tests
