"""The receptionist (examples/receptionist: two flow nodes, a booking behind a confirmation, an OpenAI voice
with a Gemini one under [voices]) on Gemini Live end to end: `voicecore demo --model-vendor gemini --agent
examples/receptionist` against the Gemini simulator, real processes, loopback sockets, the records replayed.

Three calls, one per script of its demo.toml: the booking confirmed by voice, declined by voice, confirmed
on the keypad. The simulator transcribes the callers' clips and calls book_appointment on "book a
cleaning"; the fake booking API's log says what was executed, judged against the yeses the callers said.
40 s: the confirmation is answered at 31 s (the scripts' later turns are cut off).
"""

from __future__ import annotations

import json

import pytest
from demo_run import ROOT, run_demo

pytestmark = pytest.mark.integration

DEMO_TIMEOUT_S = 300


def test_the_receptionist_books_only_after_a_yes_and_moves_to_its_next_node_on_gemini(tmp_path):
    report = run_demo(["--model-vendor", "gemini", "--agent", str(ROOT / "examples" / "receptionist"), "--calls", "3",
                       "--seconds", "40", "--record-dir", str(tmp_path / "records")], DEMO_TIMEOUT_S)
    assert report["model_vendor"] == "gemini" and report["calls_completed"] == 3
    assert report["stale_frames"] == 0 and report["overlapping_frames"] == 0
    assert report["unanswered_turns"] == 0
    assert report["records_written"] == report["records_replayed_identical"] == 3
    agent = report["agent"]
    assert agent["actions_executed_without_confirmation"] == 0
    controller = agent["controller"]
    assert controller["actions_proposed"] == 3  # each call asked to book once
    assert controller["actions_confirmed"] == 2 and controller["actions_declined"] == 1  # yes, no, keypad 1
    assert controller["transitions"] == 2  # the two bookings moved their calls to the node "booked"
    assert agent["actions_executed"] == 2 and agent["tool_server_requests"] >= 2
    assert report["gemini"]["tool_calls"] == 3 and report["gemini"]["refused"] == 0
    # each session was set up with the agent's knowledge (a Gemini server answers on its own: nothing is added per answer)
    headers = [json.loads(path.read_text().split("\n", 1)[0]) for path in (tmp_path / "records").glob("*.jsonl")]
    assert len(headers) == 3
    assert all("Facts:" in h["args"]["instructions"] and "Cleaning: 95 dollars" in h["args"]["instructions"] for h in headers)
