"""Live events to observers: one bounded queue per observer, never a wait (pure asyncio, no sockets).

Owns which observers get which call's events, the calls in progress as the feed tells them, and the
slow-observer rule: an observer whose queue holds ``OBSERVER_QUEUE`` events not yet sent is marked
``too_slow`` (its connection closes it; the call and the other observers never wait for it).
"""

from __future__ import annotations

import asyncio
import collections

from voicecore.observe.numbering import Row, wire

OBSERVER_QUEUE = 2048
_WAKE = (0, b"")  # what a too-slow observer's queue gets instead of the event that did not fit


class Observer:
    __slots__ = ("queue", "call_sid", "too_slow", "gone")

    def __init__(self, call_sid: str, queue_size: int = OBSERVER_QUEUE) -> None:
        self.queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue(queue_size)
        self.call_sid = call_sid  # "": every live call
        self.too_slow = False
        self.gone = False  # its client closed the connection

    def leave(self) -> None:
        """Its client closed: wake its reader, which may be waiting for an event that never comes."""
        self.gone = True
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(_WAKE)


class FanOut:
    def __init__(self) -> None:
        self.observers: dict[str, set[Observer]] = collections.defaultdict(set)  # call sid ("" every call) -> observers
        self.live: dict[str, float] = {}  # call sid -> wall time of its call.started (calls in progress)
        self.too_slow = 0
        self.received = 0

    def add(self, observer: Observer) -> None:
        self.observers[observer.call_sid].add(observer)

    def remove(self, observer: Observer) -> None:
        group = self.observers.get(observer.call_sid)
        if group is not None:
            group.discard(observer)
            if not group:
                del self.observers[observer.call_sid]

    def count(self) -> int:
        return sum(len(group) for group in self.observers.values())

    def publish(self, rows: list[Row]) -> None:
        """One feed message's rows (several calls', each call's in seq order) to each call's observers and the
        every-call ones."""
        self.received += len(rows)
        everyone = self.observers.get("", set())
        for row in rows:
            call_sid, kind = row[0], row[4]
            if kind == "call.started":
                self.live[call_sid] = row[2]
            elif kind == "call.ended":
                self.live.pop(call_sid, None)
            targets = self.observers.get(call_sid)
            if not targets and not everyone:
                continue
            data = wire(row)
            for observer in (*(targets or ()), *everyone):
                if observer.too_slow:
                    continue
                try:
                    observer.queue.put_nowait((row[1], data))
                except asyncio.QueueFull:
                    observer.too_slow = True
                    self.too_slow += 1
                    observer.queue.get_nowait()  # room for the wake-up: its reader sees too_slow and closes
                    observer.queue.put_nowait(_WAKE)
