"""Rubric expectations of agent tests (voicecore/chat/rubric.py): what the judge is sent, how its answer is read,
and that the file format takes a rubric as it takes `said`."""

from __future__ import annotations

import json

import pytest

from voicecore.chat.agent_tests import AgentTestError, judge_turn, load_test, rubrics
from voicecore.chat.rubric import INSTRUCTIONS, Reading, RubricVerdict, judge_events, judge_request, read_verdict
from voicecore.chat.session import ChatEvent


@pytest.mark.parametrize("answer, verdict", [
    ("PASS: it names the monthly price.", RubricVerdict(True, "it names the monthly price.")),
    ("**FAIL**: no price is said", RubricVerdict(False, "no price is said")),
    ("pass - the agent asks the question", RubricVerdict(True, "the agent asks the question")),
    ("FAIL", RubricVerdict(False, "the judge gave no reason")),
    ("The answer looks fine to me.", RubricVerdict(False, "the judge answered neither PASS nor FAIL: "
                                                          "'The answer looks fine to me.'")),
])
def test_the_judges_answer_is_read_pass_or_fail_and_anything_else_fails(answer, verdict):
    assert read_verdict(answer) == verdict


def test_the_judge_gets_the_conversation_and_the_rubric_in_a_text_session_without_tools():
    update, item, create = (json.loads(e) for e in judge_events("ga", "says the price", [("agent", "Hi."), ("caller", "Price?")]))
    assert update["type"] == "session.update" and update["session"]["output_modalities"] == ["text"]
    assert update["session"]["instructions"] == INSTRUCTIONS and update["session"]["tools"] == []
    assert item["type"] == "conversation.item.create"
    assert item["item"]["content"][0]["text"] == judge_request("says the price", [("agent", "Hi."), ("caller", "Price?")]) \
        == "Conversation:\nagent: Hi.\ncaller: Price?\n\nRubric for the agent's last answer: says the price"
    assert create == {"type": "response.create"}


def server(kind: str, **fields) -> str:
    return json.dumps({"type": kind, "event_id": "ev1", **fields})


def test_the_reading_collects_the_text_until_the_response_is_done():
    reading = Reading()
    reading.feed(server("response.created", response={"id": "resp1", "status": "in_progress"}))
    reading.feed(server("response.output_text.delta", response_id="resp1", item_id="i1", delta="PASS: it "))
    reading.feed(server("response.output_text.delta", response_id="resp1", item_id="i1", delta="asks."))
    assert not reading.done
    reading.feed(server("response.done", response={"id": "resp1", "status": "completed", "status_details": None}))
    assert reading.done and reading.verdict == RubricVerdict(True, "it asks.")


def test_a_refusal_or_a_lost_session_is_a_failure_with_its_reason_not_a_pass():
    refused = Reading()
    refused.feed(server("error", error={"type": "invalid_request_error", "code": "invalid_api_key", "message": "bad key"}))
    assert refused.verdict == RubricVerdict(False, "the judge's model refused: invalid_api_key: bad key")
    lost = Reading()
    lost.lost("the judge's model closed the session")
    lost.feed(server("response.done", response={"id": "r", "status": "completed", "status_details": None}))
    assert lost.verdict == RubricVerdict(False, "could not judge it: the judge's model closed the session")


def test_the_file_format_takes_a_rubric_or_a_list_and_judge_turn_leaves_them_to_the_model(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[[turn]]\nsay = "Price?"\nrubric = ["says the price", "says per month"]\n')
    spec = load_test(good).turns[0]
    assert rubrics(spec.expect) == ("says the price", "says per month")
    assert judge_turn(spec.expect, [ChatEvent("said", "Hello.")], "main", 5) == []
    bad = tmp_path / "bad.toml"
    bad.write_text('[[turn]]\nsay = "Price?"\nrubric = ""\n')
    with pytest.raises(AgentTestError, match=r"turn\[0\]\.rubric: expected a non-empty string"):
        load_test(bad)
