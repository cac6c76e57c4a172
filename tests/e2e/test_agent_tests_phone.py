"""`voicecore test DIR --phone`: an example's tests as simulated phone calls through the whole stack (real
processes, the carrier and model simulators, the callers' lines spoken by espeak-ng), on a copy of the
interview with one more test whose expectations are wrong, so the run must pass five and fail one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_the_interviews_tests_run_as_phone_calls(tmp_path):
    agent = tmp_path / "interview"
    shutil.copytree(ROOT / "examples" / "interview", agent)
    (agent / "tests" / "wrong.toml").write_text(WRONG, encoding="utf-8")
    junit = tmp_path / "phone.xml"
    run = subprocess.run([sys.executable, "-m", "voicecore.cli", "test", str(agent), "--phone", "--json", "--junit",
                          str(junit)], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
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
def test_the_demo_of_an_agent_without_demo_toml_or_tests_uses_a_generic_caller(tmp_path):
    agent = tmp_path / "receptionist"
    shutil.copytree(ROOT / "examples" / "receptionist", agent)
    (agent / "demo.toml").unlink()
    shutil.rmtree(agent / "tests")
    run = subprocess.run([sys.executable, "-m", "voicecore.cli", "demo", "--agent", str(agent), "--json",
                          "--record-dir", str(tmp_path / "records")], capture_output=True, text=True, timeout=TIMEOUT_S,
                         cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr[-6000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    # the demo's own figures, as for any demo, and the generic caller's three lines judged on the record
    assert report["ok"] and report["calls"] == 1 and report["real_turns"] == 3 and report["records_replayed_identical"] == 1
    assert report["callers"] == "generic"
    tests = report["agent_tests"]
    assert (tests["passed"], tests["failed"]) == (1, 0), tests
