"""The console's text sessions by id: which conversation a message or a reconnecting /chat client continues.

Owns a session's life on the server, apart from any connection: opened (at most ``cap`` at once), claimed by
one user at a time (a /chat connection for as long as it is open, a POST /chat/messages for one turn), let go,
and expired once it has been let go for ``idle_s``; a session belongs to the API key that opened it and no other
key can see it. Pure: the shell passes the clock (seconds) and does the work (answering, storing what expired).
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclasses.dataclass
class Entry(Generic[T]):
    session_id: str
    owner: str  # the API key name that opened it
    conversation: T
    used_s: float  # when it was last let go (or opened)
    busy: bool = False
    started: bool = False  # the agent's opening was said
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


class Refused(Exception):
    """Why a session cannot be had: ``status`` as the console answers it (404, 409, 503)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Sessions(Generic[T]):
    def __init__(self, idle_s: float, cap: int) -> None:
        self.idle_s = idle_s
        self.cap = cap
        self.entries: dict[str, Entry[T]] = {}

    def __len__(self) -> int:
        return len(self.entries)

    @staticmethod
    def new_id() -> str:
        return "CHAT" + secrets.token_hex(8)

    def check_room(self) -> None:
        """Refused (503) when ``cap`` are open: the caller sweeps first (``expired``), so only sessions in use or
        used within ``idle_s`` hold the places."""
        if len(self.entries) >= self.cap:
            raise Refused(503, f"{self.cap} chat sessions are open, the most this console keeps (console_chat_sessions); "
                               "try again when one has ended or been idle for console_chat_idle_s")

    def open(self, owner: str, conversation: T, now_s: float, session_id: str | None = None) -> Entry[T]:
        """A new session, claimed (``check_room`` first)."""
        self.check_room()
        entry = Entry(session_id or self.new_id(), owner, conversation, now_s, busy=True)
        self.entries[entry.session_id] = entry
        return entry

    def claim(self, session_id: str, owner: str, now_s: float) -> Entry[T]:
        """The session, claimed; Refused as ``check`` says."""
        entry = self.check(session_id, owner, now_s)
        entry.busy = True
        return entry

    def check(self, session_id: str, owner: str, now_s: float) -> Entry[T]:
        """The session, if ``owner`` could claim it now. Refused 404 when there is none of that id for ``owner``
        (never opened, ended, expired, or another key's: the same answer, so ids cannot be probed), 409 when it
        is in use."""
        entry = self.entries.get(session_id)
        if entry is None or entry.owner != owner or (not entry.busy and now_s - entry.used_s >= self.idle_s):
            raise Refused(404, f"no chat session {session_id[:40]!r}: it ended, was idle for more than "
                               f"{self.idle_s:g} s, or never was (start one by leaving session_id out)")
        if entry.busy:
            raise Refused(409, f"chat session {session_id[:40]!r} is in use (a /chat connection or a message being "
                               "answered): one user at a time")
        return entry

    def release(self, entry: Entry[T], now_s: float) -> None:
        entry.busy = False
        entry.used_s = now_s

    def end(self, entry: Entry[T]) -> None:
        """The conversation is over (the agent ended it): its id answers 404 from now on."""
        self.entries.pop(entry.session_id, None)

    def expired(self, now_s: float) -> list[Entry[T]]:
        """Take out and return every session let go ``idle_s`` or more ago."""
        gone = [e for e in self.entries.values() if not e.busy and now_s - e.used_s >= self.idle_s]
        for entry in gone:
            del self.entries[entry.session_id]
        return gone

    def drain(self) -> list[Entry[T]]:
        """Take out every session (the console stops)."""
        gone = list(self.entries.values())
        self.entries.clear()
        return gone
