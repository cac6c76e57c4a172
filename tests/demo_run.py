"""`voicecore demo ... --json` run as a user runs it, its one JSON object read back (shared by the e2e tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_demo(args: list[str], timeout_s: float) -> dict:
    """The demo's report; asserts it exited 0 with ``ok`` true, naming its problems and its stderr's tail if not."""
    command = [sys.executable, "-m", "voicecore.cli", "demo", *args, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        report = {}
    assert done.returncode == 0 and report.get("ok"), (report.get("problems"), done.stderr[-6000:])
    return report
