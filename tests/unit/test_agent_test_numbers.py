"""The ``numbers_grounded`` expectation of agent tests (voicecore/chat/agent_tests.py): every number the agent
says in a turn is in its knowledge or in a tool's result of the conversation so far, matched as the gate
matches a number's value."""

from __future__ import annotations

import pytest

from voicecore.chat.agent_tests import AgentTestError, Grounds, judge_turn, load_test
from voicecore.chat.session import ChatEvent
from voicecore.validate.knowledge import KnowledgeBase

PRICES = KnowledgeBase.from_documents({"prices.md": "# Prices\n\n- Premium: 349 kr per month\n- Basic: 199 kr per month\n"})


def said(*lines: str) -> list[ChatEvent]:
    return [ChatEvent("said", line) for line in lines]


def test_numbers_from_the_knowledge_pass():
    grounds = Grounds(PRICES, "en")
    assert judge_turn({"numbers_grounded": True}, said("Premium costs 349 kr, Basic 199 kr."), "main", 5, grounds) == []


def test_a_number_from_nowhere_fails_naming_it_and_its_line():
    grounds = Grounds(PRICES, "en")
    failures = judge_turn({"numbers_grounded": True}, said("Hello.", "Premium costs 777 kr a month."), "main", 5, grounds)
    assert failures == ["expected every number said to be in the agent's knowledge or a tool's result; not there: "
                        "'777 kr' in 'Premium costs 777 kr a month.'"]


def test_a_tool_result_of_an_earlier_turn_grounds_a_later_answer():
    grounds = Grounds(PRICES, "en")
    grounds.note([ChatEvent("function_call", "", {"name": "order"}),
                  ChatEvent("tool_result", "", {"name": "order", "ok": True, "output": '{"order": 58213, "total": 548}'})])
    grounds.note(said("One moment."))  # a later turn without tools keeps what came before
    answer = said("Your order number is 58213 and the total is 548 kr.")
    assert judge_turn({"numbers_grounded": True}, answer, "main", 5, grounds) == []
    assert judge_turn({"numbers_grounded": True}, answer, "main", 5, Grounds(PRICES, "en")) != []


def test_without_knowledge_only_tool_results_ground_and_the_failure_says_there_is_none():
    failures = judge_turn({"numbers_grounded": True}, said("We open at 8."), "main", 5, Grounds(None, "en"))
    assert failures == ["expected every number said to be in the agent's knowledge (it has none) or a tool's result; "
                        "not there: '8' in 'We open at 8.'"]


def test_a_turn_without_numbers_or_without_the_expectation_is_not_judged_on_them():
    assert judge_turn({"numbers_grounded": True}, said("I can't confirm that."), "main", 5, Grounds(PRICES, "en")) == []
    assert judge_turn({"numbers_grounded": False}, said("It is 777 kr."), "main", 5, Grounds(PRICES, "en")) == []
    assert judge_turn({}, said("It is 777 kr."), "main", 5, Grounds(PRICES, "en")) == []


def test_the_file_format_takes_true_or_false_only(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[[turn]]\nsay = "What does premium cost?"\nnumbers_grounded = true\n')
    assert load_test(good).turns[0].expect == {"numbers_grounded": True}
    bad = tmp_path / "bad.toml"
    bad.write_text('[[turn]]\nsay = "What does premium cost?"\nnumbers_grounded = "yes"\n')
    with pytest.raises(AgentTestError, match=r"turn\[0\]\.numbers_grounded: expected true or false"):
        load_test(bad)
