"""The conversation the model session holds: its items, what was said, and a flow's context strategy.

Owns the ids of the conversation items the server holds (a context reset deletes them), the messages said
so far (a new session after a reconnect is given them back: the old session's items are gone with it), and
a node transition's pending context strategy (docs/explanation/agents.md#flows: ``reset`` forgets the
conversation so far, ``task`` forgets it and adds the node's task messages; ``keep`` changes nothing). A
strategy is applied just before the next request is sent, when no response is active, so nothing it says is
cut from under it. Returns the client events that do it; the controller (controller.py) sends them.
Sans-I/O.
"""

from __future__ import annotations

import collections

from voicecore.call import flow as flows
from voicecore.call.actions import SendToModel
from voicecore.realtime import events as rt

MAX_TRACKED_ITEMS = 512  # conversation items remembered for a context reset (older ones stay)
HISTORY_MESSAGES = 40  # messages a reconnected model session is given back (the newest)


class Conversation:
    __slots__ = ("items", "history", "pending")

    def __init__(self) -> None:
        self.items: list[str] = []  # conversation items the server holds (for a context reset)
        # what was said, as messages, for a new model session after a reconnect (the old one's items are gone)
        self.history: collections.deque[tuple[str, str]] = collections.deque(maxlen=HISTORY_MESSAGES)
        self.pending: flows.Transition | None = None  # applied before the next request is sent

    def item_added(self, item_id: str) -> None:
        if item_id not in self.items:
            self.items.append(item_id)
            if len(self.items) > MAX_TRACKED_ITEMS:
                del self.items[0]

    def item_deleted(self, item_id: str) -> None:
        if item_id in self.items:
            self.items.remove(item_id)

    def said(self, role: str, text: str) -> None:
        """``role`` ("user", "assistant") said ``text`` (stripped, not empty)."""
        self.history.append((role, text))

    def transition(self, transition: flows.Transition) -> None:
        """A node transition: its context strategy waits for the next request."""
        if transition.context in ("reset", "task"):
            self.pending = transition

    def before_request(self) -> list[SendToModel]:
        """The pending context strategy, applied now (nothing if none is pending)."""
        transition = self.pending
        if transition is None:
            return []
        self.pending = None
        out = [SendToModel(rt.item_delete(item_id)) for item_id in self.items]
        self.items = []
        self.history.clear()
        if transition.context == "task":
            for role, text in transition.task_messages:
                out.append(SendToModel(rt.conversation_item_create_message(role, text)))
                self.history.append((role, text))
        return out

    def restore(self) -> list[SendToModel]:
        """A new model session starts empty: the conversation so far as message items, oldest first."""
        return [SendToModel(rt.conversation_item_create_message(role, text)) for role, text in self.history]
