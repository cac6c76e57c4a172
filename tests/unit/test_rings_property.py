"""Rings, tag table and pacer step against a simple Python model (hypothesis state machine).

The machine plays gateway, model worker and pacer shell on two call slots of a real (tmp-directory)
arena, in any interleaving hypothesis finds. The model predicts *what* each pacer pass writes from *which*
outbound items it consumed (the pacer decides how many, by its clock), and checks:

- INV-ORDER: frames of a response go out in index order, none lost (a live frame consumed is a frame
  sent), none duplicated; payload bytes decoded from the JSON + base64 equal the bytes pushed.
- INV-STALE: no frame of a cancelled response is written in any pass after the cancel; a `clear` follows
  the frames of the response being cut, before anything else.
- INV-GATE: nothing at or past the approved watermark is released, nothing behind a held frame either.
- Rings: a full ring refuses (IN_OVERRUNS / OUT_DROPPED count it), never overwrites; the gateway reads
  exactly what was written, in order.
- Marks: names are "tag:frames_through" every mark_every frames and "tag:n:end" at a normal end.
- Pacing: at most max_burst frames per call per tick, the lead never exceeds lead + one frame, and the
  pacer never stops while a frame is due, approved and the wire ring has room.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections import deque
from dataclasses import dataclass, field

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from voicecore.shm import control as C
from voicecore.shm import rings as R
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.timing import FRAME_BYTES, FRAME_NS
from voicecore.carriers.twilio.stream import wire_templates
from workers.pacer import core as P

MS = 1_000_000
LAYOUT = ArenaLayout(max_calls=2, in_slots=8, out_slots=16, wire_slots=8, wire_slot_bytes=384)
SLOTS = st.integers(0, LAYOUT.max_calls - 1)
MAX_TAG = C.TAG_TABLE_SIZE - 1  # row reuse (tag + 16) is covered in test_pacer_core.py


def out_frame(slot: int, tag: int, index: int) -> bytes:
    head = bytes([slot, tag, index & 0xFF, index >> 8])
    return head + bytes((slot * 101 + tag * 37 + index * 11 + k * 7) % 256 for k in range(FRAME_BYTES - 4))


def in_frame(slot: int, seq: int) -> bytes:
    return bytes((slot * 53 + seq * 29 + k) % 256 for k in range(FRAME_BYTES))


def sid_for(slot: int, generation: int) -> str:
    # the longest sid the arena allows, so the longest wire message is exercised too
    return (f"MZ{slot}g{generation}-" + "f" * 64)[:64]


@dataclass
class TagModel:
    gated: bool
    approved: int
    state: str = "live"  # live / done / cancelled
    pushed: int = 0
    sent: int = 0
    ended: bool = False


@dataclass
class SlotModel:
    sid: str
    in_ring: deque = field(default_factory=deque)
    in_overruns: int = 0
    next_seq: int = 1
    out_ring: deque = field(default_factory=deque)  # (tag, index); index < 0: END
    out_dropped: int = 0
    tags: dict = field(default_factory=dict)
    next_tag: int = 1
    sent_tag: int = 0
    sent_frames: int = 0
    closed: str = "open"  # open / ended / cleared
    cancel_pending: bool = False
    released: int = 0
    skipped: int = 0
    superseded: int = 0
    pending_wire: deque = field(default_factory=deque)  # entries written, not yet taken by the gateway
    underruns: int = 0


def decode(raw: bytes, sid: str, slot: int) -> tuple:
    msg = json.loads(raw.decode("utf-8"))
    assert msg["streamSid"] == sid
    if msg["event"] == "media":
        assert set(msg) == {"event", "streamSid", "media"} and set(msg["media"]) == {"payload"}
        payload = base64.b64decode(msg["media"]["payload"], validate=True)
        assert len(payload) == FRAME_BYTES and payload[0] == slot
        tag, index = payload[1], payload[2] | payload[3] << 8
        assert payload == out_frame(slot, tag, index), "payload bytes differ from the frame pushed"
        return ("media", tag, index)
    if msg["event"] == "mark":
        assert set(msg) == {"event", "streamSid", "mark"} and set(msg["mark"]) == {"name"}
        return ("mark", msg["mark"]["name"])
    assert msg == {"event": "clear", "streamSid": sid}
    return ("clear",)


class RingsMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="vc-rings-")
        self.arena = Arena.create(LAYOUT, directory=self.directory)
        self.now_ns = 1_000 * MS
        self.models: list[SlotModel] = []

    @initialize(
        lead_ms=st.sampled_from([20, 60, 80, 100]),
        mark_every=st.sampled_from([0, 1, 3, 5]),
        burst=st.sampled_from([1, 2, 4, 10]),
    )
    def start(self, lead_ms, mark_every, burst):
        self.lead_ns = lead_ms * MS
        self.mark_every = mark_every
        self.burst = burst
        # start_hold_ms=0: the prefill hold only delays release (test_pacer_core covers it); the model
        # here checks release timing exactly.
        self.pacer = P.PacerCore(self.arena, lead_ms=lead_ms, mark_every_frames=mark_every, max_burst_frames=burst,
                                 start_hold_ms=0)
        for slot in range(LAYOUT.max_calls):
            generation = self.arena.claim_slot(slot, sid_for(slot, 1), "CA" + "1" * 32, wire_templates(sid_for(slot, 1)))
            self.models.append(SlotModel(sid=sid_for(slot, generation)))

    def teardown(self):
        self.arena.close()
        self.arena.unlink()
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def ctrl(self):
        return self.arena.ctrl

    def word(self, slot, index):
        return int(self.arena.ctrl[slot, index])

    # --- gateway: inbound ring --------------------------------------------------------------------------

    @rule(slot=SLOTS, n=st.integers(1, 5), as_array=st.booleans())
    def gateway_receives(self, slot, n, as_array):
        m = self.models[slot]
        for _ in range(n):
            seq = m.next_seq
            m.next_seq += 1
            payload = in_frame(slot, seq)
            arg = np.frombuffer(payload, dtype=np.uint8) if as_array else payload
            ok = R.inbound_push(self.ctrl, self.arena.in_meta, self.arena.in_payload, slot, seq, seq * 20, arg)
            assert ok == (len(m.in_ring) < LAYOUT.in_slots)
            if ok:
                m.in_ring.append((seq, seq * 20, payload))
            else:
                m.in_overruns += 1  # refused, and nothing already queued was touched

    @rule(slot=SLOTS, max_frames=st.integers(1, 10), with_meta=st.booleans())
    def model_reads_caller_audio(self, slot, max_frames, with_meta):
        m = self.models[slot]
        out = np.zeros(FRAME_BYTES * 6, dtype=np.uint8)  # room for 6 frames whatever max_frames says
        meta = np.zeros((6, 2), dtype=np.int64)
        assert R.inbound_pending(self.ctrl, slot) == len(m.in_ring)
        if with_meta:
            n = R.inbound_pop_meta(self.ctrl, self.arena.in_meta, self.arena.in_payload, slot, out, meta, max_frames)
        else:
            n = R.inbound_pop(self.ctrl, self.arena.in_meta, self.arena.in_payload, slot, out, max_frames)
        assert n == min(len(m.in_ring), max_frames, 6)
        for f in range(n):
            seq, ts_ms, payload = m.in_ring.popleft()
            assert out[f * FRAME_BYTES : (f + 1) * FRAME_BYTES].tobytes() == payload
            if with_meta:
                assert tuple(meta[f]) == (seq, ts_ms)

    # --- model worker: tags and outbound ring -----------------------------------------------------------

    def _eligible(self, want):
        return [(slot, tag) for slot, m in enumerate(self.models) for tag, tm in sorted(m.tags.items()) if want(tm)]

    def _pick(self, data, want):
        return data.draw(st.sampled_from(self._eligible(want)))

    def _open(self, slot, gated):
        m = self.models[slot]
        tag = m.next_tag
        m.next_tag += 1
        R.tag_open(self.ctrl, slot, tag, gated)
        m.tags[tag] = TagModel(gated=gated, approved=0 if gated else C.APPROVE_ALL)
        assert R.tag_state(self.ctrl, slot, tag) == C.TAG_LIVE
        return tag

    def _push(self, slot, tag, n, many):
        m, tm = self.models[slot], self.models[slot].tags[tag]
        room = LAYOUT.out_slots - len(m.out_ring)
        assert R.outbound_free(self.ctrl, self.arena.out_meta, slot) == room
        if many:
            blob = b"".join(out_frame(slot, tag, tm.pushed + i) for i in range(n))
            written = R.outbound_push_many(self.ctrl, self.arena.out_meta, self.arena.out_payload, slot, tag, tm.pushed, blob)
            assert written == min(n, room)
            m.out_dropped += n - written
        else:
            written = 0
            for i in range(n):
                index = tm.pushed + i
                ok = R.outbound_push(self.ctrl, self.arena.out_meta, self.arena.out_payload, slot, tag, index, out_frame(slot, tag, index))
                assert ok == (written < room)
                if not ok:
                    m.out_dropped += 1
                    break
                written += 1
        for i in range(written):
            m.out_ring.append((tag, tm.pushed + i))
        tm.pushed += written  # a refused frame is retried later with the same index

    def _end(self, slot, tag):
        m, tm = self.models[slot], self.models[slot].tags[tag]
        ok = R.outbound_push_end(self.ctrl, self.arena.out_meta, slot, tag, tm.pushed)
        assert ok == (len(m.out_ring) < LAYOUT.out_slots)
        if ok:
            m.out_ring.append((tag, -1 - tm.pushed))
            tm.ended = True

    @precondition(lambda self: any(m.next_tag <= MAX_TAG for m in self.models))
    @rule(data=st.data(), gated=st.booleans(), n=st.integers(0, 12), many=st.booleans(), end=st.booleans())
    def model_speaks(self, data, gated, n, many, end):
        """A new response: tag_open, its first frames, maybe its END at once."""
        slot = data.draw(st.sampled_from([s for s, m in enumerate(self.models) if m.next_tag <= MAX_TAG]))
        tag = self._open(slot, gated)
        if n:
            self._push(slot, tag, n, many)
        if end:
            self._end(slot, tag)

    @precondition(lambda self: self._eligible(lambda tm: not tm.ended and tm.state != "cancelled"))
    @rule(data=st.data(), n=st.integers(1, 8), many=st.booleans())
    def model_pushes_frames(self, data, n, many):
        slot, tag = self._pick(data, lambda tm: not tm.ended and tm.state != "cancelled")
        self._push(slot, tag, n, many)

    @precondition(lambda self: self._eligible(lambda tm: not tm.ended and tm.state == "cancelled"))
    @rule(data=st.data(), n=st.integers(1, 3))
    def late_deltas_of_a_cancelled_response(self, data, n):
        # they still arrive after response.cancel; the pacer must drop them at the ring (INV-STALE)
        slot, tag = self._pick(data, lambda tm: not tm.ended and tm.state == "cancelled")
        self._push(slot, tag, n, False)

    @precondition(lambda self: self._eligible(lambda tm: not tm.ended))
    @rule(data=st.data())
    def model_ends_response(self, data):
        slot, tag = self._pick(data, lambda tm: not tm.ended)
        self._end(slot, tag)

    @precondition(lambda self: self._eligible(lambda tm: tm.gated))
    @rule(data=st.data(), frames=st.integers(0, 16))
    def validator_approves(self, data, frames):
        slot, tag = self._pick(data, lambda tm: tm.gated)
        tm = self.models[slot].tags[tag]
        assert R.tag_approve(self.ctrl, slot, tag, frames)
        tm.approved = max(tm.approved, frames)
        assert R.tag_approved_frames(self.ctrl, slot, tag) == tm.approved

    @precondition(lambda self: self._eligible(lambda tm: True))
    @rule(data=st.data())
    def model_cancels(self, data):
        slot, tag = self._pick(data, lambda tm: True)
        m = self.models[slot]
        assert R.tag_cancel(self.ctrl, slot, tag, self.now_ns)
        m.tags[tag].state = "cancelled"
        m.cancel_pending = True
        assert R.tag_state(self.ctrl, slot, tag) == C.TAG_CANCELLED
        assert self.word(slot, C.CANCEL_TAG) == tag

    @precondition(lambda self: self._eligible(lambda tm: tm.state == "live"))
    @rule(data=st.data())
    def model_finishes_response(self, data):
        slot, tag = self._pick(data, lambda tm: tm.state == "live")
        assert R.tag_done(self.ctrl, slot, tag)
        self.models[slot].tags[tag].state = "done"
        assert not R.tag_done(self.ctrl, slot, tag)

    # --- gateway: wire ring and slot life --------------------------------------------------------------------

    @rule(slot=SLOTS, k=st.integers(1, 10), one_by_one=st.booleans())
    def gateway_sends(self, slot, k, one_by_one):
        m = self.models[slot]
        if one_by_one:
            got = []
            for _ in range(k):
                raw = R.wire_pop(self.ctrl, self.arena.wire_len, self.arena.wire_data, slot)
                if raw is None:
                    break
                got.append(raw)
        else:
            got = R.wire_drain(self.ctrl, self.arena.wire_len, self.arena.wire_data, slot, k)
        assert len(got) == min(k, len(m.pending_wire))
        for raw in got:
            assert raw == m.pending_wire.popleft()  # exactly what the pacer wrote, in order

    @rule(slot=SLOTS)
    def call_ends_and_a_new_one_takes_the_slot(self, slot):
        self.arena.set_slot_state(slot, C.SLOT_ENDING)
        self.arena.set_slot_state(slot, C.SLOT_FREE)
        sid = sid_for(slot, self.word(slot, C.GENERATION) + 1)
        generation = self.arena.claim_slot(slot, sid, "CA" + "2" * 32, wire_templates(sid))
        self.models[slot] = SlotModel(sid=sid_for(slot, generation))

    # --- pacer ----------------------------------------------------------------------------------------------

    def _before_pass(self):
        return [
            (self.word(s, C.WIRE_HEAD), self.word(s, C.OUT_TAIL), self.word(s, C.UNDERRUNS)) for s in range(LAYOUT.max_calls)
        ]

    def _expect_clear(self, slot, room, expected):
        """The model's cancel step: returns False when the clear is owed but the wire ring is full."""
        m = self.models[slot]
        if not m.cancel_pending:
            return True
        sent = m.tags.get(m.sent_tag)
        if m.sent_frames > 0 and m.closed != "cleared" and sent is not None and sent.state == "cancelled":
            if room < 1:
                return False
            expected.append(("clear",))
            m.closed = "cleared"
        m.cancel_pending = False
        return True

    def _new_entries(self, slot, head_before):
        head = self.word(slot, C.WIRE_HEAD)
        raws = []
        for k in range(head_before, head):
            idx = k & (LAYOUT.wire_slots - 1)
            raws.append(self.arena.wire_data[slot, idx, : self.arena.wire_len[slot, idx]].tobytes())
        return raws

    def _check_pass(self, slot, head_before, tail_before, underruns_before, *, ticking):
        m = self.models[slot]
        wire_room = LAYOUT.wire_slots - len(m.pending_wire)
        expected: list[tuple] = []
        unblocked = self._expect_clear(slot, wire_room, expected)
        consumed = self.word(slot, C.OUT_TAIL) - tail_before
        assert 0 <= consumed <= len(m.out_ring)
        if not (ticking and unblocked):
            assert consumed == 0  # a cancel pass, or a call owing a clear, releases nothing
        released = 0
        for _ in range(consumed):
            tag, index = m.out_ring.popleft()
            tm = m.tags[tag]
            live = tm.state in ("live", "done")
            if not live:
                m.skipped += 1 if index >= 0 else 0  # INV-STALE: dropped at the ring head
                continue
            if tag < m.sent_tag:
                m.skipped += 1 if index >= 0 else 0  # INV-ONE-VOICE: a newer response already went out
                m.superseded += 1 if index >= 0 else 0
                continue
            if index < 0:
                if tag == m.sent_tag and m.closed == "open" and m.sent_frames > 0:
                    assert m.sent_frames == -1 - index == tm.pushed  # INV-ORDER: all of it went out
                    expected.append(("mark", f"{tag}:{m.sent_frames}:end"))
                    m.closed = "ended"
                continue
            assert index < tm.approved, "INV-GATE: released past the approved watermark"
            if tag != m.sent_tag:
                m.sent_tag, m.closed = tag, "open"
            assert index == tm.sent, "INV-ORDER: a frame lost, duplicated or out of order"
            tm.sent += 1
            m.sent_frames = tm.sent
            expected.append(("media", tag, index))
            if self.mark_every and m.sent_frames % self.mark_every == 0:
                expected.append(("mark", f"{tag}:{m.sent_frames}"))
            released += 1
        raws = self._new_entries(slot, head_before)
        assert [decode(r, m.sid, slot) for r in raws] == expected
        m.pending_wire.extend(raws)
        m.released += released
        assert released <= self.burst

        # pacing and liveness: why did the pacer stop where it stopped?
        lead_ns = self.word(slot, C.CARRIER_EMPTY_AT_NS) - self.now_ns
        assert lead_ns < self.lead_ns + FRAME_NS
        room = LAYOUT.wire_slots - len(m.pending_wire)
        if ticking and unblocked and m.out_ring:
            tag, index = m.out_ring[0]
            tm = m.tags[tag]
            assert tm.state in ("live", "done"), "a dead item was left at the head"
            assert tag >= m.sent_tag, "an item older than the response on the wire was left at the head"
            if index < 0:
                assert room < 1, "an END was left at the head with room on the wire"
            elif index < tm.approved and room >= 2 and released < self.burst:
                assert lead_ns >= self.lead_ns, "a due, approved frame was held back"
        if not unblocked:
            assert room == 0
        underruns = self.word(slot, C.UNDERRUNS)
        assert underruns - underruns_before in ((0, 1) if ticking else (0,))

    @rule(dt_ms=st.sampled_from([0, 3, 20, 20, 20, 40, 200]), ticks=st.integers(1, 4), gateway_keeps_up=st.booleans())
    def pacer_ticks(self, dt_ms, ticks, gateway_keeps_up):
        for _ in range(ticks):
            self.now_ns += dt_ms * MS
            before = self._before_pass()
            self.pacer.tick(self.now_ns)
            for slot in range(LAYOUT.max_calls):
                self._check_pass(slot, *before[slot], ticking=True)
                if gateway_keeps_up:
                    self.gateway_sends(slot, LAYOUT.wire_slots, False)

    @rule(dt_ms=st.sampled_from([0, 1, 7]))
    def pacer_handles_cancels_between_ticks(self, dt_ms):
        self.now_ns += dt_ms * MS
        before = self._before_pass()
        self.pacer.cancels(self.now_ns)
        for slot in range(LAYOUT.max_calls):
            self._check_pass(slot, *before[slot], ticking=False)

    # --- counters always agree with the model -------------------------------------------------------------

    @invariant()
    def counters_agree(self):
        for slot, m in enumerate(self.models):
            assert self.word(slot, C.IN_OVERRUNS) == m.in_overruns
            assert self.word(slot, C.IN_HEAD) - self.word(slot, C.IN_TAIL) == len(m.in_ring)
            assert self.word(slot, C.OUT_DROPPED) == m.out_dropped
            assert self.word(slot, C.OUT_HEAD) - self.word(slot, C.OUT_TAIL) == len(m.out_ring)
            assert self.word(slot, C.FRAMES_RELEASED) == m.released
            assert self.word(slot, C.FRAMES_SKIPPED) == m.skipped
            assert self.word(slot, C.FRAMES_SUPERSEDED) == m.superseded
            assert R.wire_pending(self.ctrl, slot) == len(m.pending_wire) <= LAYOUT.wire_slots
            assert self.word(slot, C.SENT_TAG) == m.sent_tag
            assert self.word(slot, C.SENT_FRAMES) == m.sent_frames


# The count of examples is the profile's (tests/conftest.py); a run of the machine is up to 60 steps (enough
# for rings to wrap and tags to be reused), and the filter's rejections are by design (a step that does not
# apply to the current state is not run: the rules' preconditions).
RingsMachine.TestCase.settings = settings(
    stateful_step_count=60,
    suppress_health_check=[HealthCheck.filter_too_much],
)
TestRings = RingsMachine.TestCase


def test_rings_refuse_bad_input():
    """Our misuse is an exception from the ring functions, never memory corruption."""
    ctrl = np.zeros((2, C.CONTROL_WORDS), dtype=np.int64)
    meta = np.zeros((2, 8, 2), dtype=np.int64)
    payload = np.zeros((2, 8, FRAME_BYTES), dtype=np.uint8)
    wire_len = np.zeros((2, 8), dtype=np.int32)
    wire_data = np.zeros((2, 8, 384), dtype=np.uint8)
    frame = bytes(FRAME_BYTES)
    import pytest

    for slot in (-1, 2, 1000):
        with pytest.raises(IndexError):
            R.inbound_push(ctrl, meta, payload, slot, 1, 1, frame)
        with pytest.raises(IndexError):
            R.outbound_push(ctrl, meta, payload, slot, 1, 0, frame)
        with pytest.raises(IndexError):
            R.tag_cancel(ctrl, slot, 1, 0)
        with pytest.raises(IndexError):
            R.load_acquire(ctrl, slot, 0)
    with pytest.raises(IndexError):
        R.store_release(ctrl, 0, C.CONTROL_WORDS, 1)
    with pytest.raises(ValueError):
        R.inbound_push(ctrl, meta, payload, 0, 1, 1, bytes(100))
    with pytest.raises(ValueError):
        R.outbound_push(ctrl, meta, payload, 0, 0, 0, frame)  # tag 0 is not a tag
    with pytest.raises(ValueError):
        R.outbound_push_many(ctrl, meta, payload, 0, 1, 0, bytes(FRAME_BYTES + 1))
    with pytest.raises(ValueError):
        R.tag_open(ctrl, 0, 0, False)
    with pytest.raises(ValueError):
        R.wire_push(ctrl, wire_len, wire_data, 0, bytes(400), 400)
    assert not ctrl.any()
    assert R.tag_state(ctrl, 0, 5) == 0  # never opened: dead
    assert not R.tag_approve(ctrl, 0, 5, 3) and not R.tag_done(ctrl, 0, 5)
    assert not R.tag_cancel(ctrl, 0, 5, 123)  # already dead; the decision is still recorded
    assert ctrl[0, C.CANCEL_SEQ] == 1 and ctrl[0, C.CANCEL_DECISION_NS] == 123


def test_wire_push_pop_round_trip():
    ctrl = np.zeros((1, C.CONTROL_WORDS), dtype=np.int64)
    wire_len = np.zeros((1, 4), dtype=np.int32)
    wire_data = np.zeros((1, 4, 384), dtype=np.uint8)
    assert R.wire_pop(ctrl, wire_len, wire_data, 0) is None and R.wire_drain(ctrl, wire_len, wire_data, 0) == []
    messages = [b"x" * n for n in (0, 1, 383, 384, 7, 9)]
    for msg in messages[:4]:
        assert R.wire_push(ctrl, wire_len, wire_data, 0, msg, len(msg))
    assert R.wire_free(ctrl, wire_len, 0) == 0
    assert not R.wire_push(ctrl, wire_len, wire_data, 0, messages[4], 7)
    assert R.wire_pop(ctrl, wire_len, wire_data, 0) == messages[0]
    assert R.wire_push(ctrl, wire_len, wire_data, 0, messages[4], 7)
    assert R.wire_drain(ctrl, wire_len, wire_data, 0, 2) == messages[1:3]
    assert R.wire_drain(ctrl, wire_len, wire_data, 0) == [messages[3], messages[4]]
    assert R.wire_pending(ctrl, 0) == 0 and ctrl[0, C.WIRE_TAIL] == 5
