"""demo.toml, the world an agent's demo runs in: parsed strictly (a typo never silently changes a run)."""

from __future__ import annotations

from types import SimpleNamespace

from pathlib import Path

import pytest

from voicecore.agent.demo_report import caller_yeses
from voicecore.agent.load import load_agent
from voicecore.agent.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("receptionist", "shop-assistant", "interview")


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_shipped_example_has_a_scenario_whose_rules_only_call_its_functions(name):
    agent = load_agent(ROOT / "examples" / name)
    scenario = load_scenario(ROOT / "examples" / name)
    assert scenario.scripts and scenario.sim_turns
    for rule in scenario.sim_turns:
        assert not rule.call or rule.call in agent.flow.functions
    if scenario.routes:
        assert scenario.tool_server_env and all(r.path.startswith("/") for r in scenario.routes)


def test_the_scripts_say_yes_as_often_as_the_demo_expects():
    scenario = load_scenario(ROOT / "examples" / "receptionist")
    assert [caller_yeses(scenario, i, 60_000, ("en",)) for i in range(3)] == [1, 0, 1]  # yes, no, DTMF 1
    assert caller_yeses(scenario, 0, 30_000, ("en",)) == 0  # a turn after the call's end is not said


@pytest.mark.parametrize("data, expected", [
    ({"call": [{"seconds": 60, "turns": [{"at_s": 5, "say": "caller_nope"}]}]}, "no caller clip named 'caller_nope'"),
    ({"call": [{"seconds": 60, "turns": [{"at_s": 70, "say": "caller_yes"}]}]}, "within the call's 60 s"),
    ({"call": [{"seconds": 60, "turns": [{"at_s": 5, "say": "caller_yes", "dtmf": "1"}]}]}, "one of say"),
    ({"call": [{"seconds": 60, "turns": [{"at_s": 5, "dtmf": "12"}]}]}, "one of 0-9 * #"),
    ({"call": [{"seconds": 60}], "sims": []}, "unknown keys ['sims']"),
    ({"call": [{"seconds": 60}], "sim": [{"answer": "hi"}]}, "sim[0]"),
    ({"call": [{"seconds": 60}], "tool_server": {"routes": [{"method": "POST", "path": "/x"}]}}, "tool_server.env"),
    ({"call": [{"seconds": 60}], "tool_server": {"env": "API", "routes": [{"method": "POST"}]}}, "routes[0]"),
    ({}, "at least one [[call]]"),
])
def test_a_bad_scenario_is_refused_with_what_is_wrong(data, expected):
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "demo.toml")
    assert expected in str(info.value)


def test_a_missing_scenario_says_the_demo_needs_one(tmp_path):
    with pytest.raises(ScenarioError, match="no demo scenario"):
        load_scenario(tmp_path)


# --- the demo's check of talk-over after a tool call (voicecore/agent/demo_report.py) ---------------------


def _response(response_id: str, created_ms: int, tone: int, frames: int = 10, function_call=None):
    audio = [bytes([tone + i]) * 160 for i in range(frames)]  # each frame its own content: the owners map by it
    return SimpleNamespace(response_id=response_id, created_ms=created_ms, function_call=function_call,
                           frames=lambda: list(audio))


def _played(response, first_arrival_ms: float, first_play_ms: float) -> list:
    return [SimpleNamespace(payload=frame, arrival_ms=first_arrival_ms + 20 * i, played_at_ms=first_play_ms + 20 * i,
                            played_ms=20) for i, frame in enumerate(response.frames())]


def _talkover(responses, played, speech, outputs_ms) -> list[float]:
    from voicecore.agent.demo_report import talkover_after_tools_ms

    record = SimpleNamespace(responses=responses, speech=[SimpleNamespace(started_at_ms=a, stopped_at_ms=b)
                                                          for a, b in speech],
                             function_call_outputs=[SimpleNamespace(at_ms=at) for at in outputs_ms])
    result = SimpleNamespace(core=SimpleNamespace(played=played))
    return talkover_after_tools_ms(result, [SimpleNamespace(record=record)])


def test_an_answer_to_a_tool_sent_while_the_caller_speaks_counts_its_overlap():
    tool_call = _response("r-call", 900, 10, frames=0, function_call="book")
    answer = _response("r-answer", 1000, 40)
    # the caller started at 1050; the answer's first frame reached the carrier at 1100 and played from 1120
    assert _talkover([tool_call, answer], _played(answer, 1100, 1120), [(1050, 1220)], [990]) == [100.0]


def test_a_caller_who_starts_once_the_answer_is_on_its_way_barges_in_on_it():
    answer = _response("r-answer", 1000, 40)
    # sent at 1100, played from 1120: the caller's speech began at 1105, after the frames were sent
    assert _talkover([answer], _played(answer, 1100, 1120), [(1105, 1220)], [990]) == [0.0]


def test_only_the_first_answer_after_a_tools_result_is_an_answer_to_it():
    answer = _response("r-answer", 1000, 40)
    prompt = _response("r-still-there", 9000, 80)  # "Are you still there?" long after the tool's answer
    played = _played(answer, 1100, 1120) + _played(prompt, 9200, 9220)
    assert _talkover([answer, prompt], played, [(9150, 9500)], [990]) == [0.0]  # the answer had no overlap

