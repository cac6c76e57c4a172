"""``POST /chat/messages``: one message of a text conversation per request, as JSON.

Owns the request body's reading and the answer's shape (docs/how-to/talk-to-and-test-your-agent.md#one-message-at-a-time-over-http).
Request: ``{"text": "...", "session_id": optional, "agent": optional, "id": optional}``; without ``session_id``
a session starts (``text`` may then be left out: the answer is the agent's opening alone). Answer: ``session_id``,
``agent``, ``started`` (this request opened the session), ``greeting`` (the opening's lines, when started),
``replies`` (the lines answering ``text``), ``events`` (everything of the request in order, each as /chat sends
it), ``latency_ms`` and ``ended`` (the reason, once the agent has ended the conversation; else null). Pure.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

MAX_TEXT_CHARS = 2000  # as a /chat message
MAX_ID_CHARS = 100


class BadMessage(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass(frozen=True)
class MessageRequest:
    text: str  # "" only when a session starts
    session_id: str  # "": start one
    agent: str  # "": the console's agent
    reply_to: Any = None


def read_message(body: bytes) -> MessageRequest:
    """The request in ``body``; BadMessage(400) naming what is wrong with it."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadMessage(400, 'the body is not JSON: send {"text": "...", "session_id": "..."}') from None
    if not isinstance(value, dict):
        raise BadMessage(400, "expected a JSON object")
    unknown = sorted(set(value) - {"text", "session_id", "agent", "id"})
    if unknown:
        raise BadMessage(400, f"unknown field {unknown[0][:40]!r}: the fields are text, session_id, agent and id")
    session_id, agent, text = value.get("session_id"), value.get("agent"), value.get("text")
    if session_id is not None and (not isinstance(session_id, str) or not session_id or len(session_id) > MAX_ID_CHARS):
        raise BadMessage(400, "session_id: expected the id a previous answer gave (a string)")
    if agent is not None and not isinstance(agent, str):
        raise BadMessage(400, "agent: expected a string, the agent's name")
    if text is None and not session_id:
        text = ""  # a session starts with the agent's opening alone
    elif not isinstance(text, str) or not text.strip():
        raise BadMessage(400, "text: expected a non-empty string")
    if len(text) > MAX_TEXT_CHARS:
        raise BadMessage(400, f"text: at most {MAX_TEXT_CHARS} characters")
    reply_to = value.get("id")
    if reply_to is not None and not isinstance(reply_to, (str, int)):
        raise BadMessage(400, "id: expected a string or a number")
    return MessageRequest(text, session_id or "", agent or "", reply_to)


def answer(session_id: str, agent: str, started: bool, greeting: list[dict[str, Any]], reply: list[dict[str, Any]],
           latency_ms: int | None, ended: str) -> dict[str, Any]:
    """The answer's JSON from the wire messages (/chat's shape) of the opening and of the reply."""
    return {"session_id": session_id, "agent": agent, "started": started,
            "greeting": [m["text"] for m in greeting if m["type"] == "response"],
            "replies": [m["text"] for m in reply if m["type"] == "response"],
            "events": greeting + reply, "latency_ms": latency_ms, "ended": ended or None}
