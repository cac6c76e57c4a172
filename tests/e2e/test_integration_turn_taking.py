"""Turn-taking by what the caller said, through real processes: `voicecore demo` runs the shipped default
agent under the turn-taking controller against its scenario (voicecore/agents/default/demo.toml), whose
callers say backchannels, coughs and a long "okay, okay" over the agent's answers and short real turns
("wait", "stop", "no", "yeah, but on Friday", "sorry, who is this?") over and between them, with the model
simulator sending their words as the vendor does, in both transcription positions: word by word after the
commit (gpt-4o-mini-transcribe) and only late and whole (whisper-1). Each demo has its own
stack (3 calls x 60 s play every script once); they run as many at once as the machine has pairs of cores.

The figures come from outside the controller (voicecore/callturns.py reads both simulators' records).
Timings (talk-over, hold lengths, resume and answer latency) are the bench's and the demo's to report, not
asserted here: the machine may be busy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from demo_run import why_not_ok

# The reports hold real-time figures (underruns while the model's audio was there, stale frames, lateness):
# a demo's stack and its 3 calls take about a core, and a test worker beside it may run another stack, so as
# many demos at once as the machine has pairs of cores.
pytestmark = pytest.mark.integration
DEMOS_AT_ONCE = max(1, (os.cpu_count() or 1) // 2)

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPTION = ("gpt-4o-mini-transcribe", "whisper-1")


def run_demo(model: str, record_dir: Path) -> tuple[int, dict, str]:
    command = [sys.executable, "-m", "voicecore.cli", "demo", "--calls", "3", "--seconds", "60", "--json",
               "--transcription", model, "--record-dir", str(record_dir / model)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        report = {}
    return done.returncode, report, done.stderr[-6000:]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    record_dir = tmp_path_factory.mktemp("turn-taking-records")
    with ThreadPoolExecutor(min(len(TRANSCRIPTION), DEMOS_AT_ONCE)) as pool:
        return dict(zip(TRANSCRIPTION, pool.map(lambda model: run_demo(model, record_dir), TRANSCRIPTION)))


@pytest.mark.parametrize("model", TRANSCRIPTION)
def test_the_default_agent_listens_by_what_the_caller_said(reports, model):
    code, report, stderr = reports[model]
    assert code == 0 and report.get("ok"), why_not_ok(report, stderr)
    # every real turn answered, none talked over by a resume, no backchannel cut the agent
    assert report["real_turns"] >= 20 and report["unanswered_turns"] == 0 and report["turns_cut_by_call_end"] == 0
    assert report["resumed_after_words"] == 0
    assert report["backchannels"] >= 5 and report["backchannels_that_cut"] == 0
    # the agent was held and carried on for every backchannel and noise over it, and cut for the real turns
    holds = report["hold_ms"]
    assert holds["resumed"]["count"] >= report["backchannels"] and holds["cut"]["count"] >= 5
    assert report["resume_after_decision_ms"]["count"] == holds["resumed"]["count"]
    # every real turn's answer is timed but each call's goodbye, which runs end_call (a tool's turn)
    assert report["answer_request_ms"]["count"] == report["real_turns"] - 3
    assert report["stale_frames"] == 0 and report["overlapping_frames"] == 0
    assert report["records_written"] == report["records_replayed_identical"] == 3
    controller = report["agent"]["controller"]
    assert controller["tool_calls"] == report["agent"]["model_function_calls"] >= 3  # end_call, once per call
