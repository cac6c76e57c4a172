"""demo.toml, the world an agent's demo runs in: parsed strictly (a typo never silently changes a run)."""

from __future__ import annotations

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
