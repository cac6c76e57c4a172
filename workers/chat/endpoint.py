"""The console's text channel for programs: the ``/chat`` WebSocket and ``POST /chat/messages``.

Owns the wire of a chat connection (docs/how-to/talk-to-and-test-your-agent.md#the-chat-websocket) and its
limits. The console authenticates the upgrade as it does ``/observe`` (an API key, or a session from
/login) and hands the connection here. A conversation is workers/chat/runner.py's, with the node's agent
(``VOICECORE_AGENT``, else the shipped default), against the configured vendor or the simulator.

Client -> server: ``{"type": "message", "text": "..."}`` (``id`` optional, echoed). Server -> client:
``{"type": "session", "id", "agent", "resumed"}`` first; then per line the agent says ``{"type": "response", "text",
"node", "reply_to"}``; everything else that happens ``{"type": "event", "kind", "text", "data"}`` (a function
call, a tool result, a confirmation, a node, a gate verdict); ``{"type": "turn_end", "reply_to",
"latency_ms"}`` once the agent is done answering; ``{"type": "ended", "reason"}`` and a close (1000) when the
call ends. Bad input: ``{"type": "error", "error"}`` and the connection stays (not JSON, an unknown type, a
missing, empty or too long text); a message larger than the console's frame limit closes with 1009; more
than MAX_MESSAGES in WINDOW_S on one connection, or more than ``console_chat_limit`` in WINDOW_S
from one API key (all its connections together: a program cannot get round the limit by opening more),
closes the connection that sent it with 1008. No connection's input reaches another's conversation.

A conversation is a session of the console's (voicecore/chat/sessions.py), not a connection's: ``/chat?session=ID``
continues one, and so does ``POST /chat/messages`` with its ``session_id`` (one message per request,
voicecore/chat/http_messages.py, under the same per-key limit; one user of a session at a time). Every
conversation goes to the call store once, as a call of carrier ``chat``, when it is over: the agent ended it,
it was idle ``console_chat_idle_s``, or the console stops (voicecore/chat/summary.py; ``keep``: the console's
way to the store).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voicecore.agent.load import AgentError, load_configured_agent
from voicecore.agent.settings import agent_for_config
from voicecore.chat.http_messages import BadMessage, answer, read_message
from voicecore.chat.session import ChatEvent
from voicecore.chat.sessions import Entry, Refused, Sessions
from voicecore.chat.summary import chat_summary
from voicecore.privacy.records import RecordPrivacy
from voicecore.store.summary import CallSummary
from voicecore.config import Config
from workers.chat.runner import Conversation, conversation_for, demo_world, knowledge_for, tool_pool_for

log = logging.getLogger("voicecore.chat")

MAX_TEXT_CHARS = 2000
MAX_MESSAGES = 20  # per connection in WINDOW_S: a flood is closed, not queued
WINDOW_S = 10.0
CLOSE_FLOOD = 1008


def wire_event(event: ChatEvent, reply_to: Any) -> dict[str, Any]:
    if event.kind == "said":
        return {"type": "response", "text": event.text, "node": event.data.get("node", ""), "reply_to": reply_to}
    return {"type": "event", "kind": event.kind, "text": event.text, "data": event.data}


@dataclasses.dataclass
class Chat:
    conversation: Conversation
    started_at: float  # wall clock, for the store


class ChatEndpoint:
    """Every /chat connection of one console: the agent, its knowledge and its tool processes, shared."""

    def __init__(self, config: Config, keep: Callable[[CallSummary], Awaitable[Any]] | None = None) -> None:
        self.config = config
        self.keep = keep
        self.problem = ""
        self.agent = None
        try:
            self.agent = agent_for_config(load_configured_agent(config, os.environ), config)
        except AgentError as exc:
            self.problem = f"the agent has {len(exc.problems)} problem(s): {exc.problems[0]}"
        self.knowledge = knowledge_for(self.agent) if self.agent is not None else None
        self.rules = demo_world(self.agent.directory)[0] if self.agent is not None else ()
        # the conversations' Python tools share processes, as a model worker's calls do (tool_processes)
        self.pool = tool_pool_for(self.agent, config.tool_processes, config.tool_runs_per_call) if self.agent is not None else None
        self.pool_started = False
        self.counters: collections.Counter[str] = collections.Counter()
        # when each API key's recent messages came (all its connections), for its limit
        self.key_messages: dict[str, collections.deque[float]] = {}
        self.key_limit = config.console_chat_limit
        self.sessions: Sessions[Chat] = Sessions(config.console_chat_idle_s, config.console_chat_sessions)

    def over_key_limit(self, key_name: str, now: float) -> bool:
        """Count one message of ``key_name`` at ``now``: True when it is over the key's limit in WINDOW_S."""
        recent = self.key_messages.setdefault(key_name, collections.deque())
        while recent and now - recent[0] >= WINDOW_S:
            recent.popleft()
        recent.append(now)
        over = len(recent) > self.key_limit
        if len(self.key_messages) > 10_000:  # keys with nothing recent are forgotten, so the map stays small
            for name in [n for n, times in self.key_messages.items() if not times or now - times[-1] >= WINDOW_S]:
                del self.key_messages[name]
        return over

    @property
    def available(self) -> bool:
        return self.agent is not None

    async def close(self) -> None:
        """The console stops: every session still open is stored (as its client's hang-up) and closed."""
        for entry in self.sessions.drain():
            await self._finish(entry, closed_by_caller=True)
        if self.pool is not None and self.pool_started:
            await self.pool.close()

    def _conversation(self, session_id: str):
        assert self.agent is not None
        if self.pool is not None and not self.pool_started:
            self.pool.start()
            self.pool_started = True
        self.counters["sessions"] += 1
        return Chat(conversation_for(self.agent, self.config, self.rules, session_id=session_id, pool=self.pool,
                                     knowledge=self.knowledge), time.time())

    def check_resume(self, session_id: str, key_name: str) -> None:
        """Before a /chat upgrade: Refused (404, 409, 503) when the connection could not have its session."""
        if session_id:
            self.sessions.check(session_id, key_name, time.monotonic())  # the connection claims it once open
        else:
            self.sessions.check_room()

    def _take(self, session_id: str, key_name: str) -> tuple[Entry[Chat], bool]:
        """(the session, whether it is new), claimed; Refused as Sessions says."""
        if session_id:
            return self.sessions.claim(session_id, key_name, time.monotonic()), False
        self.sessions.check_room()
        new_id = self.sessions.new_id()
        return self.sessions.open(key_name, self._conversation(new_id), time.monotonic(), new_id), True

    async def serve(self, connection: ServerConnection, key_name: str = "", resume: str = "") -> None:
        """``key_name``: the API key the connection was opened with (a browser session's key), for its limit and
        its sessions. ``resume``: the id of the session to continue (``/chat?session=ID``); "": a new one."""
        assert self.agent is not None
        try:
            entry, _new = self._take(resume, key_name)
        except Refused as exc:  # taken or gone between the upgrade's check and now
            await connection.send(json.dumps({"type": "error", "error": exc.message}))
            await connection.close(CLOSE_FLOOD if exc.status != 503 else 1013, exc.message[:120])
            return
        session_id = entry.session_id
        conversation = entry.conversation.conversation
        sent: list[float] = []
        ended = False

        async def send(value: dict[str, Any]) -> None:
            await connection.send(json.dumps(value, ensure_ascii=False))

        async def report(turn, reply_to: Any) -> None:
            for event in turn.events:
                await send(wire_event(event, reply_to))
            await send({"type": "turn_end", "reply_to": reply_to, "latency_ms": turn.latency_ms})

        try:
            await send({"type": "session", "id": session_id, "agent": self.agent.name, "resumed": bool(resume)})
            if not entry.started:
                entry.started = True
                await report(await conversation.start(), None)
            async for raw in connection:
                now = time.monotonic()
                sent = [t for t in sent if now - t < WINDOW_S] + [now]
                if len(sent) > MAX_MESSAGES:
                    self.counters["floods"] += 1
                    log.warning("chat %s: more than %d messages in %g s: closed", session_id, MAX_MESSAGES, WINDOW_S)
                    await connection.close(CLOSE_FLOOD, "too many messages")
                    return
                if self.over_key_limit(key_name, now):
                    self.counters["key_floods"] += 1
                    log.warning("chat %s: key %s sent more than %d messages in %g s: closed", session_id, key_name,
                                self.key_limit, WINDOW_S)
                    await connection.close(CLOSE_FLOOD, "too many messages for this key")
                    return
                problem, text, reply_to = self._read(raw)
                if problem:
                    self.counters["bad_messages"] += 1
                    await send({"type": "error", "error": problem})
                    continue
                self.counters["messages"] += 1
                await report(await conversation.say(text), reply_to)
                if conversation.ended:
                    ended = True
                    await send({"type": "ended", "reason": conversation.ended})
                    await connection.close(1000, "the call ended")
                    return
        except ConnectionClosed:
            pass
        finally:
            # the client that leaves may come back for it (``resume``) until it has been idle console_chat_idle_s
            await self._let_go(entry, ended or bool(conversation.ended), closed_by_caller=not ended)

    async def _let_go(self, entry: Entry[Chat], ended: bool, closed_by_caller: bool = True) -> None:
        if not ended:
            self.sessions.release(entry, time.monotonic())
            return
        self.sessions.end(entry)
        await self._finish(entry, closed_by_caller)

    async def _finish(self, entry: Entry[Chat], closed_by_caller: bool) -> None:
        try:
            await entry.conversation.conversation.close()
        except Exception:  # its tools or its vendor socket would not close: it is stored all the same
            log.exception("chat %s: closing the conversation failed", entry.session_id)
        await self._keep(entry.conversation.conversation, entry.conversation.started_at, closed_by_caller)

    async def message(self, key_name: str, body: bytes) -> tuple[int, dict[str, Any], tuple[tuple[str, str], ...]]:
        """``POST /chat/messages`` (voicecore/chat/http_messages.py): (status, JSON, extra headers)."""
        assert self.agent is not None
        now = time.monotonic()
        if self.over_key_limit(key_name, now):  # every request counts, a bad one too, as every /chat message does
            self.counters["key_floods"] += 1
            return 429, {"error": f"more than {self.key_limit} messages in {WINDOW_S:g} s from this key "
                                  "(console_chat_limit)"}, (("Retry-After", str(int(WINDOW_S))),)
        try:
            request = read_message(body)
        except BadMessage as exc:
            self.counters["bad_messages"] += 1
            return exc.status, {"error": exc.message}, ()
        if request.agent and request.agent != self.agent.name:
            return 404, {"error": f"no agent {request.agent[:80]!r} here: this console's agent is {self.agent.name!r}"}, ()
        try:
            entry, new = self._take(request.session_id, key_name)
        except Refused as exc:
            return exc.status, {"error": exc.message}, (("Retry-After", str(int(WINDOW_S))),) if exc.status == 503 else ()
        recent = entry.extra.setdefault("sent", collections.deque())
        while recent and now - recent[0] >= WINDOW_S:
            recent.popleft()
        recent.append(now)
        if len(recent) > MAX_MESSAGES:
            self.counters["floods"] += 1
            self.sessions.release(entry, now)
            return 429, {"error": f"more than {MAX_MESSAGES} messages in {WINDOW_S:g} s to this session"}, \
                (("Retry-After", str(int(WINDOW_S))),)
        conversation = entry.conversation.conversation
        greeting: list[dict[str, Any]] = []
        reply: list[dict[str, Any]] = []
        latency_ms = None
        try:
            if not entry.started:
                entry.started = True
                opening = await conversation.start()
                greeting = [wire_event(event, None) for event in opening.events]
                latency_ms = opening.latency_ms
            if request.text and not conversation.ended:
                self.counters["messages"] += 1
                turn = await conversation.say(request.text)
                reply = [wire_event(event, request.reply_to) for event in turn.events]
                latency_ms = turn.latency_ms
        finally:
            await self._let_go(entry, bool(conversation.ended), closed_by_caller=False)
        return 200, answer(entry.session_id, self.agent.name, new, greeting, reply, latency_ms, conversation.ended), ()

    async def sweep(self) -> int:
        """Store and close every session idle for console_chat_idle_s; how many there were."""
        gone = self.sessions.expired(time.monotonic())
        for entry in gone:
            self.counters["expired"] += 1
            await self._finish(entry, closed_by_caller=True)
        return len(gone)

    async def sweep_forever(self, every_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.sweep()
            except Exception:  # one conversation's trouble must not stop the others' expiry
                log.exception("chat: expiring idle sessions failed")

    async def _keep(self, conversation, started_at: float, closed_by_caller: bool) -> None:
        if self.keep is None or self.agent is None:
            return
        session = conversation.session
        summary = chat_summary(session, self.agent.name, started_at, 0, max(session.now_ns, conversation.now_ms * 1_000_000),
                               closed_by_caller, RecordPrivacy.for_agent(self.agent))
        try:
            await self.keep(summary)
            self.counters["stored"] += 1
        except Exception:  # the store's trouble must not take the console down; the conversation is over anyway
            self.counters["store_errors"] += 1
            log.exception("chat %s: could not store the conversation", session.session_id)

    @staticmethod
    def _read(raw: str | bytes) -> tuple[str, str, Any]:
        """(problem, text, id) of one client message; problem "" when it is a message to answer."""
        try:
            message = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return "not JSON: send {\"type\": \"message\", \"text\": \"...\"}", "", None
        if not isinstance(message, dict):
            return "expected a JSON object", "", None
        if message.get("type") != "message":
            return f"unknown type {str(message.get('type'))[:40]!r}: the one type is \"message\"", "", None
        text = message.get("text")
        reply_to = message.get("id")
        if not isinstance(text, str) or not text.strip():
            return "text: expected a non-empty string", "", reply_to
        if len(text) > MAX_TEXT_CHARS:
            return f"text: at most {MAX_TEXT_CHARS} characters", "", reply_to
        return "", text, reply_to
