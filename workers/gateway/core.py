"""Gateway decisions that need no I/O: which slot a call gets, and what a mark echo means.

Owns the call-slot table (claim, release, quarantine before reuse) and the mark ledger that tells marks
echoed because audio played from marks echoed because of a `clear` (PROTOCOLS.md A.3: Twilio echoes every
pending mark when it clears its buffer; counting those as played over-counts the truncate point). What a
mark's name says is voicecore/twilio/marks.py's rule.
Also which WebSocket close codes a peer may send (the one it sends is echoed only if so).
Knows nothing of sockets, shared memory or the clock: time comes in as arguments.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from voicecore.twilio.marks import parse_mark_name

SLOT_QUARANTINE_MS = 2000  # workers finish with an ended call's slot before it is handed out again


@dataclasses.dataclass(frozen=True, slots=True)
class MarkPlayed:
    tag: int
    frames: int  # frames of ``tag`` played through this mark
    final: bool  # the response's last mark: every frame of it played


@dataclasses.dataclass(frozen=True, slots=True)
class MarkDiscarded:
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class MarkUnknown:
    """An echo of a mark we never sent, or out of order: the peer's fault, counted, otherwise ignored."""

    name: str


class MarkLedger:
    """Marks in the order they went to the socket; a `clear` turns every pending one into a discard."""

    def __init__(self) -> None:
        self._pending: deque[tuple[str, bool]] = deque()  # (name, cleared before it was echoed)

    def sent_mark(self, name: str) -> None:
        self._pending.append((name, False))

    def sent_clear(self) -> None:
        self._pending = deque((name, True) for name, _ in self._pending)

    def echoed(self, name: str) -> MarkPlayed | MarkDiscarded | MarkUnknown:
        # Twilio echoes in the order it received marks; anything skipped over was lost, not played.
        while self._pending:
            pending_name, cleared = self._pending.popleft()
            if pending_name != name:
                continue
            if cleared:
                return MarkDiscarded(name)
            parsed = parse_mark_name(name)
            if parsed is None:
                return MarkUnknown(name)
            tag, frames, final = parsed
            return MarkPlayed(tag, frames, final)
        return MarkUnknown(name)

    @property
    def pending(self) -> int:
        return len(self._pending)


class SlotTable:
    """Free call slots of the arena. A released slot rests for SLOT_QUARANTINE_MS before reuse."""

    def __init__(self, max_calls: int) -> None:
        self._free: deque[int] = deque(range(max_calls))
        self._resting: deque[tuple[int, int]] = deque()  # (free_at_ms, slot)
        self.in_use: set[int] = set()

    def claim(self) -> int | None:
        """A free slot, or None at capacity. Call ``due_for_free`` first so rested slots count."""
        if not self._free:
            return None
        slot = self._free.popleft()
        self.in_use.add(slot)
        return slot

    def release(self, slot: int, now_ms: int) -> None:
        if slot in self.in_use:
            self.in_use.discard(slot)
            self._resting.append((now_ms + SLOT_QUARANTINE_MS, slot))

    def due_for_free(self, now_ms: int) -> list[int]:
        """Slots whose quarantine ended, now claimable (the shell marks them SLOT_FREE in the arena)."""
        woken = []
        while self._resting and self._resting[0][0] <= now_ms:
            _, slot = self._resting.popleft()
            self._free.append(slot)
            woken.append(slot)
        return woken


class Admission:
    """Connections not yet in a call (no request served, no stream ``start`` accepted yet): how many at once,
    in all and per peer address, so a flood of connections that never authenticate holds at most
    ``max_pending`` sockets and cannot starve real calls of file descriptors or the loop's time. A
    connection is admitted when it opens and let go when it is served, gets its call, or closes.
    Addresses: a TCP peer's IP; "" (a Unix socket behind a local TLS proxy, where every peer is the proxy)
    is counted in the total only."""

    def __init__(self, max_pending: int, max_per_address: int) -> None:
        self.max_pending = max_pending
        self.max_per_address = max_per_address
        self.pending = 0
        self.by_address: dict[str, int] = {}
        self.refused_total = 0
        self.refused_address = 0

    def admit(self, address: str) -> bool:
        if self.pending >= self.max_pending:
            self.refused_total += 1
            return False
        if address and self.by_address.get(address, 0) >= self.max_per_address:
            self.refused_address += 1
            return False
        self.pending += 1
        if address:
            self.by_address[address] = self.by_address.get(address, 0) + 1
        return True

    def release(self, address: str) -> None:
        self.pending -= 1
        if address:
            left = self.by_address[address] - 1
            if left:
                self.by_address[address] = left
            else:
                del self.by_address[address]


def peer_close_code_is_valid(code: int) -> bool:
    """Whether a peer may send ``code`` in a close frame (RFC 6455 7.4.1-7.4.2 and the IANA registry):
    1000-1003 and 1007-1014 as defined, 3000-4999 for libraries and applications. 1004-1006 and 1015 are
    reserved or must never be sent, and everything below 1000, 1016-2999 and from 5000 on is not a code."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999
