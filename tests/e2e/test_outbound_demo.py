"""`voicecore demo --outbound --calls 6 --json`, end to end: the stack places six calls through the carrier
simulator's Calls API (a person, a voicemail, a screening assistant, an IVR, busy, no answer), the callees answer
with espeak-ng speech on real media streams, the model worker's answer gate decides, and the report scores the
verdicts it recorded against the callees the simulator played."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DEMO_TIMEOUT_S = 240


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_outbound_demo_places_every_kind_of_call_and_never_hangs_up_on_a_person(tmp_path):
    command = [sys.executable, "-m", "voicecore.cli", "demo", "--outbound", "--calls", "6", "--json",
               "--record-dir", str(tmp_path / "records")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, cwd=tmp_path)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and report["ok"], (report["problems"], done.stderr[-4000:])
    calls = report["calls_detail"]
    assert sorted(call["callee"] for call in calls) == sorted(
        ["human", "voicemail", "screening", "ivr", "busy", "no-answer"])
    for kind in ("human", "voicemail", "screening", "ivr"):
        assert report["answer_verdicts"][kind]["n"] == 1
    answered = [call for call in calls if call["callee"] in ("human", "voicemail", "screening", "ivr")]
    assert all(call["verdict"] in report["verdict_classes"] for call in answered)
    assert all(call["statuses"] == ["initiated", "ringing", "in-progress", "completed"] for call in answered)
    person = next(call for call in calls if call["callee"] == "human")
    assert person["verdict"] == "human" and person["action"] == "start" and person["closed_by"] != "rest_hangup"
    assert report["humans_hung_up"] == 0
    voicemail = next(call for call in calls if call["callee"] == "voicemail")
    assert voicemail["verdict"] == "voicemail" and voicemail["closed_by"] == "rest_hangup"
    for call in calls:
        if call["callee"] in ("busy", "no-answer"):
            assert call["statuses"][-1] == call["callee"] and "verdict" not in call
    assert report["status_callbacks_accepted"] == report["status_callbacks_sent"] == 4 * 4 + 2 * 3
    assert 0 < report["verdict_ms"]["p50"] <= report["verdict_ms"]["p95"] <= 6000
    assert report["records_replayed_identical"] == 4
    # the listening session brought the machines' words to the gate (each sentence transcribed as it paused)
    assert all(call["transcript_events"] > 0 for call in answered if call["callee"] != "human")
