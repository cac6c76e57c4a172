"""The controller's conversation policy (voicecore/call/context.py): what a reconnected session is given
back, and a flow's context strategies applied before the next request."""

from __future__ import annotations

import json

from voicecore.call import flow as flows
from voicecore.call.context import HISTORY_MESSAGES, MAX_TRACKED_ITEMS, Conversation


def sent(actions) -> list[dict]:
    return [json.loads(action.text) for action in actions]


def transition(context: str, task_messages=()) -> flows.Transition:
    return flows.Transition("next", flows.SessionSpec("be brief", ()), context, tuple(task_messages))


def test_a_new_session_is_given_the_newest_messages_oldest_first():
    conversation = Conversation()
    for n in range(HISTORY_MESSAGES + 5):
        conversation.said("user" if n % 2 == 0 else "assistant", f"line {n}")
    given = sent(conversation.given_back())
    assert len(given) == HISTORY_MESSAGES
    texts = [event["item"]["content"][0]["text"] for event in given]
    assert texts[0] == "line 5" and texts[-1] == f"line {HISTORY_MESSAGES + 4}"
    assert {event["type"] for event in given} == {"conversation.item.create"}


def test_nothing_is_applied_until_a_strategy_is_scheduled_and_then_only_once():
    conversation = Conversation()
    conversation.item_added("item_1", "added")
    assert conversation.apply_pending() == []
    conversation.schedule(transition("reset"))
    deleted = sent(conversation.apply_pending())
    assert deleted == [{"type": "conversation.item.delete", "item_id": "item_1"}]
    assert conversation.apply_pending() == []


def test_reset_forgets_items_and_history_and_task_adds_the_nodes_messages():
    conversation = Conversation()
    for item in ("a", "b"):
        conversation.item_added(item, "added")
    conversation.item_added("c", "done")  # a done stage is not a new item
    conversation.item_deleted("b")
    conversation.said("user", "my order is late")
    conversation.schedule(transition("task", [("system", "You now handle refunds.")]))
    events = sent(conversation.apply_pending())
    assert [e["item_id"] for e in events if e["type"] == "conversation.item.delete"] == ["a"]
    assert events[-1]["type"] == "conversation.item.create"
    assert list(conversation.history) == [("system", "You now handle refunds.")]
    assert conversation.items == []


def test_only_the_newest_items_are_tracked():
    conversation = Conversation()
    for n in range(MAX_TRACKED_ITEMS + 3):
        conversation.item_added(f"item_{n}", "added")
    assert len(conversation.items) == MAX_TRACKED_ITEMS and conversation.items[0] == "item_3"
