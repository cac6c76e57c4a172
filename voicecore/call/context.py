"""The conversation the model holds for a call, as the controller tracks it: a policy of the controller.

Two uses: a reconnected model session starts empty, so it is given the conversation back as messages
(the newest ``HISTORY_MESSAGES``, oldest first); and a flow's context strategy (docs/explanation/agents.md#flows)
``reset`` forgets the conversation so far (every item the server holds is deleted), ``task`` forgets it and adds
the node's task messages. A strategy is scheduled when the flow moves and applied just before the next request
is sent, so the request that follows a move is the first one the new context sees. Sans-I/O: fed events,
returns the client events to send.
"""

from __future__ import annotations

import collections

from voicecore.call import flow as flows
from voicecore.call.actions import SendToModel
from voicecore.realtime import events as rt

MAX_TRACKED_ITEMS = 512  # conversation items remembered for a context reset (older ones stay)
HISTORY_MESSAGES = 40  # messages a reconnected model session is given back (the newest)


class Conversation:
    def __init__(self) -> None:
        self.items: list[str] = []  # conversation items the server holds (for a context reset)
        self.history: collections.deque[tuple[str, str]] = collections.deque(maxlen=HISTORY_MESSAGES)
        self.pending: flows.Transition | None = None  # a strategy applied before the next request is sent
        self.said_count = 0  # messages ever added to the history (it is bounded): the history changed when this did

    def said(self, role: str, text: str) -> None:
        """``text`` was said by ``role`` (user: a caller's final transcript; assistant: what the caller heard)."""
        self.history.append((role, text))
        self.said_count += 1

    def item_added(self, item_id: str, stage: str) -> None:
        if stage != "done" and item_id not in self.items:
            self.items.append(item_id)
            if len(self.items) > MAX_TRACKED_ITEMS:
                del self.items[0]

    def item_deleted(self, item_id: str) -> None:
        if item_id in self.items:
            self.items.remove(item_id)

    def given_back(self) -> list[SendToModel]:
        """The conversation so far for a new, empty session: message items, oldest first."""
        return [SendToModel(rt.conversation_item_create_message(role, text)) for role, text in self.history]

    def schedule(self, transition: flows.Transition) -> None:
        self.pending = transition

    def apply_pending(self) -> list[SendToModel]:
        """The scheduled strategy's client events (none when nothing is scheduled)."""
        transition, self.pending = self.pending, None
        if transition is None:
            return []
        out = [SendToModel(rt.item_delete(item_id)) for item_id in self.items]
        self.items = []
        self.history.clear()
        self.said_count += 1
        if transition.context == "task":
            for role, text in transition.task_messages:
                out.append(SendToModel(rt.conversation_item_create_message(role, text)))
                self.history.append((role, text))
        return out
