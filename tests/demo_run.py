"""`voicecore demo ... --json` run as a user runs it, its one JSON object read back (shared by the e2e and stack tests)."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def why_not_ok(report: dict, stderr: str) -> str:
    """A failed demo's assertion message: every problem line whole (pytest shortens a tuple's repr in the
    middle, where the problems line names the call and the tick), then its stderr's tail."""
    problems = report.get("problems") or ["(no problem named)" if report else "(it printed no report)"]
    return "the demo's problems:\n" + "\n".join(f"  {line}" for line in problems) + "\nits stderr's tail:\n" + stderr


def run_demo(args: list[str], timeout_s: float) -> dict:
    """The demo's report; asserts it exited 0 with ``ok`` true, naming its problems and its stderr's tail if not."""
    command = [sys.executable, "-m", "voicecore.cli", "demo", *args, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        report = {}
    assert done.returncode == 0 and report.get("ok"), why_not_ok(report, done.stderr[-6000:])
    return report


# The shipped examples' demos, as tests/e2e/test_examples_demo.py asserts their reports and
# tests/stack/test_integration_conformance.py validates their records: 3 calls x 60 s each, so every caller
# script of an example runs once. They are run once per test session and shared (about 3 minutes of real-time
# calls a session no longer runs twice), whichever test worker asks first.
EXAMPLE_DEMO_ARGS = ("--calls", "3", "--seconds", "60")
EXAMPLE_DEMO_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class ExampleDemo:
    returncode: int
    report: dict  # the demo's JSON report ({} when it printed none)
    stderr: str  # its tail
    record_dir: Path  # the calls' records


def _session_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every worker of this test session sees: the session's temporary root under pytest-xdist
    (each worker's basetemp is a directory in it), the basetemp itself without it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def example_demo(name: str, tmp_path_factory: pytest.TempPathFactory) -> ExampleDemo:
    """`voicecore demo --agent examples/NAME --calls 3 --seconds 60 --json --record-dir ...`, run once per test
    session: the first caller runs it under a lock, the others wait for it and read its result."""
    shared = _session_shared_dir(tmp_path_factory) / "example-demos"
    shared.mkdir(exist_ok=True)
    record_dir = shared / name
    result = shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            command = [sys.executable, "-m", "voicecore.cli", "demo", "--agent", str(ROOT / "examples" / name),
                       *EXAMPLE_DEMO_ARGS, "--json", "--record-dir", str(record_dir)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=EXAMPLE_DEMO_TIMEOUT_S, cwd=ROOT)
            try:
                report = json.loads(done.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                report = {}
            result.write_text(json.dumps({"returncode": done.returncode, "report": report,
                                          "stderr": done.stderr[-6000:]}))
        ran = json.loads(result.read_text())
    return ExampleDemo(ran["returncode"], ran["report"], ran["stderr"], record_dir)
