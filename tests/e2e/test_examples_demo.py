"""The shipped example agents, end to end: `voicecore demo --agent examples/NAME` against the simulators,
real processes, loopback sockets, a fake of each agent's tool API; every record replayed.

Each demo has its own stack (3 calls x 60 s, so every caller script of an example runs once); they run as many
at once as the machine has pairs of cores (one after the other on 2 cores), once per test session: the
conformance test (tests/stack/test_integration_conformance.py) validates the same runs' records. What each example must show is
asserted from the demo's report, whose figures come from outside the controller: the model simulator's
function calls, the tool server's log, what the scripted callers said.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from demo_run import example_demo, why_not_ok

# The reports hold real-time figures (underruns while the model's audio was there, stale frames, lateness):
# a demo's stack and its 3 calls take about a core, and a test worker beside it may run another stack, so as
# many demos at once as the machine has pairs of cores.
pytestmark = pytest.mark.integration
DEMOS_AT_ONCE = max(1, (os.cpu_count() or 1) // 2)

EXAMPLES = ("receptionist", "shop-assistant", "interview")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    # shared with the conformance test, which validates these runs' records (tests/demo_run.py)
    with ThreadPoolExecutor(min(len(EXAMPLES), DEMOS_AT_ONCE)) as pool:
        runs = dict(zip(EXAMPLES, pool.map(lambda name: example_demo(name, tmp_path_factory), EXAMPLES)))
    return {name: (run.returncode, run.report, run.stderr) for name, run in runs.items()}


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_runs_clean_and_its_records_replay(reports, name):
    code, report, stderr = reports[name]
    assert code == 0 and report.get("ok"), why_not_ok(report, stderr)
    assert report["stale_frames"] == 0 and report["overlapping_frames"] == 0
    assert report["lateness_ms"]["p99"] <= 5.0
    assert report["records_written"] == report["records_replayed_identical"] == 3
    agent = report["agent"]
    assert agent["actions_executed_without_confirmation"] == 0
    assert agent["responses_without_agent_instructions"] == 0  # the vendor's rule: own instructions replace the session's
    assert agent["talkover_after_tool_ms"]["max"] == 0
    assert agent["model_function_calls"] >= 3 and agent["controller"]["tool_calls"] == agent["model_function_calls"]


def test_receptionist_books_only_after_a_yes_once_and_transfers(reports):
    _, report, _ = reports["receptionist"]
    agent, c = report["agent"], report["agent"]["controller"]
    # scripts: A says yes, B says no, C presses 1: two bookings reach the API, one per yes, never after the no
    assert (c["actions_proposed"], c["actions_confirmed"], c["actions_declined"]) == (3, 2, 1)
    # the API answers its first request 503: retried with the same Idempotency-Key, still one booking
    assert agent["actions_executed"] == 2 and agent["tool_server_requests"] == 3
    assert c["fillers"] == 2  # the booking API takes 2 s: a filler line each time, never over the answer
    # /metrics' voicecore_tool_duration_seconds counted every tool run the controllers counted, by outcome
    runs = report["tool_runs_by_outcome"]
    assert runs["ok"] + runs["error"] == c["tools_run"] and runs["error"] == c["tool_errors"]
    assert c["transitions"] == 2  # reception -> booked


def test_shop_assistant_runs_confirmed_actions_in_swedish(reports):
    _, report, _ = reports["shop-assistant"]
    c = report["agent"]["controller"]
    # A: callback, yes; B: callback, no; C: text message (a Python tool), yes
    assert (c["actions_proposed"], c["actions_confirmed"], c["actions_declined"]) == (3, 2, 1)
    assert report["agent"]["actions_executed"] == 2 and report["agent"]["tool_server_requests"] == 1
    # the model books the callback again after its result (SimTurn.repeat_call): answered, not written twice
    assert c["duplicate_writes_suppressed"] == 1


def test_interview_moves_through_its_two_nodes(reports):
    _, report, _ = reports["interview"]
    c = report["agent"]["controller"]
    assert c["transitions"] == 3  # greeting -> questioning, once per call
    assert c["tools_run"] == 3  # record_answer, once per call
