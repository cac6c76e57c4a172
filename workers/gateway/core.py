"""Gateway decisions that need no I/O: which slot a call gets, and what a mark echo means.

Owns the call-slot table (claim, release, quarantine before reuse) and the mark ledger that tells marks echoed
because audio played from marks echoed because of a `clear` (docs/explanation/protocols.md#a3: Twilio echoes
every pending mark when it clears its buffer; counting those as played over-counts the truncate point). What a
mark's name says is voicecore/carriers/marks.py's rule.
Also which WebSocket close codes a peer may send (the one it sends is echoed only if so), and the drain:
whether a voice webhook gets the call or is refused, and when a draining node ends its last calls and stops.
Knows nothing of sockets, shared memory or the clock: time comes in as arguments.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import OrderedDict, deque
from collections.abc import Iterable

from voicecore.shm.control import SLOT_QUARANTINE_MS
from voicecore.timing import DRAIN_REATTACH_WAIT_MS, DRAIN_STREAM_WAIT_MS
from voicecore.carriers.marks import parse_mark_name



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

    def unsent(self, name: str) -> MarkDiscarded | MarkUnknown:
        """A mark the pacer wrote that the carrier edge dropped before sending it (a clear came while it
        waited for its audio: voicecore/carriers/edge.py). No echo will come for it: it is settled here as
        discarded, as a clear's echo would be, and the marks before it stay pending (they were sent)."""
        for index, (pending_name, _) in enumerate(self._pending):
            if pending_name == name:
                del self._pending[index]
                return MarkDiscarded(name)
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


class DrainStep(enum.Enum):
    """What a draining gateway does now (``Drain.step``)."""

    WAIT = "wait"  # live calls go on (or a stream owed to us may still come)
    END_CALLS = "end_calls"  # the deadline passed: end every call still up (the usual close path), then stop
    STOP = "stop"  # nothing left: stop the node (said once)


@dataclasses.dataclass(frozen=True, slots=True)
class DrainStatistics:
    draining: bool
    started_at_s: float  # wall clock the drain was asked at (for people: /metrics); 0 when not draining
    deadline_at_s: float  # wall clock of the deadline; 0 when not draining
    remaining_s: float  # until the deadline; 0 when not draining or past it
    calls_refused: int  # voice webhooks answered <Reject> or <Redirect> because the node drains
    calls_ended_at_deadline: int  # calls still up at the deadline, ended by the node
    streams_awaited: int  # calls answered <Connect><Stream> whose stream has not started yet
    reattach_awaited: int = 0  # calls ended at the deadline whose carrier's re-attach request is not answered yet


class Drain:
    """A node's drain, seen by its gateway: from the moment it began refusing calls until it says STOP.

    The rules, in order (``step`` applies them; ``now_ms`` is one monotonic clock, the gateway's):
    - not draining: every voice webhook gets the call (``voice_webhook`` answers True).
    - draining: every voice webhook is refused (answered <Reject> or <Redirect> by the shell, counted);
      a stream whose token was issued before (any token: none is issued while draining) is accepted, since
      Twilio already routed that call here and a carrier never dials a refused stream again elsewhere;
      live calls go on untouched.
    - the node stops when no call is live and no stream is owed: a call answered <Connect><Stream> before
      the drain began is owed until its ``start`` arrives or DRAIN_STREAM_WAIT_MS after the answer (its
      caller hung up, or the stream went to another gateway).
    - at the deadline the calls still up are ended (END_CALLS, until none is left); those whose carrier goes
      on to a re-attach step (Twilio's <Connect action>) are owed its answer (<Hangup/>) until the request
      came or DRAIN_REATTACH_WAIT_MS after they were ended; then the node stops, whatever stream is owed.
    A drain is one-way: it ends with the node stopped (a second ``begin`` changes nothing).
    """

    def __init__(self, stream_wait_ms: int = DRAIN_STREAM_WAIT_MS, reattach_wait_ms: int = DRAIN_REATTACH_WAIT_MS) -> None:
        self.stream_wait_ms = stream_wait_ms
        self.reattach_wait_ms = reattach_wait_ms
        self.began_ms: int | None = None  # when this gateway began refusing calls
        self.deadline_ms = 0
        self.started_at_s = 0.0
        self.deadline_at_s = 0.0
        self.calls_refused = 0
        self.calls_ended_at_deadline = 0
        self.stop_said = False
        # CallSid -> when its <Connect><Stream> was answered, oldest first: streams owed to us
        self._awaited: OrderedDict[str, int] = OrderedDict()
        # CallSid -> when the node ended it at the deadline: re-attach requests owed an answer
        self._reattach_owed: dict[str, int] = {}

    @property
    def draining(self) -> bool:
        return self.began_ms is not None

    def begin(self, now_ms: int, deadline_ms: int, started_at_s: float, deadline_at_s: float) -> bool:
        """Start refusing calls; True the first time. ``deadline_ms`` on the ``now_ms`` clock; the wall-clock
        times are only reported."""
        if self.began_ms is not None:
            return False
        self.began_ms = now_ms
        self.deadline_ms = deadline_ms
        self.started_at_s = started_at_s
        self.deadline_at_s = deadline_at_s
        return True

    def voice_webhook(self, call_sid: str, now_ms: int) -> bool:
        """True: answer the call with <Connect><Stream> (its stream is owed from now); False: refuse it."""
        self._forget_awaited(now_ms)
        if self.began_ms is not None:
            self.calls_refused += 1
            return False
        self._awaited[call_sid] = now_ms
        self._awaited.move_to_end(call_sid)
        return True

    def stream_started(self, call_sid: str) -> None:
        """The call's ``start`` came with its valid token: no longer owed (live now, or refused for capacity)."""
        self._awaited.pop(call_sid, None)

    def step(self, now_ms: int, calls_active: int) -> DrainStep:
        self._forget_awaited(now_ms)
        if self.began_ms is None or self.stop_said:
            return DrainStep.WAIT
        if now_ms >= self.deadline_ms:
            if calls_active:
                return DrainStep.END_CALLS
            if self._reattach_owed:
                return DrainStep.WAIT
        elif calls_active or self._awaited:
            return DrainStep.WAIT
        self.stop_said = True
        return DrainStep.STOP

    def ended_at_deadline(self, calls: int, reattaching: Iterable[str] = (), now_ms: int = 0) -> None:
        """``calls`` were ended at the deadline; ``reattaching``: the CallSids of those whose carrier will ask
        the re-attach step (answered by ``reattach_answered``)."""
        self.calls_ended_at_deadline += calls
        for call_sid in reattaching:
            self._reattach_owed[call_sid] = now_ms

    def reattach_answered(self, call_sid: str) -> None:
        self._reattach_owed.pop(call_sid, None)

    def statistics(self, now_ms: int) -> DrainStatistics:
        draining = self.began_ms is not None
        return DrainStatistics(
            draining=draining,
            started_at_s=self.started_at_s if draining else 0.0,
            deadline_at_s=self.deadline_at_s if draining else 0.0,
            remaining_s=max(0.0, (self.deadline_ms - now_ms) / 1000) if draining else 0.0,
            calls_refused=self.calls_refused,
            calls_ended_at_deadline=self.calls_ended_at_deadline,
            streams_awaited=len(self._awaited),
            reattach_awaited=len(self._reattach_owed),
        )

    def _forget_awaited(self, now_ms: int) -> None:
        owed = self._reattach_owed
        for call_sid in [sid for sid, ended_ms in owed.items() if now_ms - ended_ms >= self.reattach_wait_ms]:
            del owed[call_sid]
        awaited = self._awaited
        while awaited:
            call_sid, answered_ms = next(iter(awaited.items()))
            if now_ms - answered_ms < self.stream_wait_ms:
                break
            del awaited[call_sid]
