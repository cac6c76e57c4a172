"""The pacer's release step, table-driven: lead, bursts, marks, clears, gate, underruns (INV-* in names).

Each case is a list of steps run against a real (tmp-directory) arena and one PacerCore; after every tick
or cancel pass the wire ring is drained and decoded (json + base64), and each frame's payload is checked
byte for byte against what the model side pushed. Frames are written as "tag.index" in expectations.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os

import numpy as np
import pytest

from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.wire import RAW, RAW_CLEAR, RAW_MARK, RAW_MEDIA
from voicecore.fallback import FallbackClips
from voicecore.shm import control as C
from voicecore.shm import rings as R
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.timing import FRAME_BYTES, FRAME_NS
from voicecore.carriers import marks
from voicecore.carriers.twilio.stream import wire_templates
from workers.pacer import core as P

MS = 1_000_000
SID = "MZ" + "5" * 32
CALL_SID = "CA" + "6" * 32


def frame_payload(tag: int, index: int) -> bytes:
    """A frame naming its (tag, index) in its first bytes, the rest a pattern of both: any mix-up shows."""
    head = bytes([tag, index & 0xFF, index >> 8])
    return head + bytes((tag * 37 + index * 11 + k * 3) % 256 for k in range(FRAME_BYTES - len(head)))


class Call:
    """One call slot: the model side (push, tags), the gateway side (drain) and the pacer around it."""

    def __init__(self, tmp_path, *, slot=1, wire_slots=16, out_slots=64, lead_ms=80, mark_every=5, burst=10, start_hold_ms=0,
                 release=1):
        self.arena = Arena.create(
            ArenaLayout(max_calls=3, in_slots=8, out_slots=out_slots, wire_slots=wire_slots),
            directory=str(tmp_path),
        )
        self.slot = slot
        self.arena.claim_slot(slot, SID, CALL_SID, wire_templates(SID))
        # The prefill hold is off unless a test is about it (see test_dry_carrier_*): the other cases
        # pin release rules that the hold only delays.
        self.pacer = P.PacerCore(self.arena, lead_ms=lead_ms, mark_every_frames=mark_every, max_burst_frames=burst,
                                 start_hold_ms=start_hold_ms, release_frames=release)
        self.next_index: dict[int, int] = {}
        self.log: list[list[str]] = []

    def close(self):
        self.arena.close()
        self.arena.unlink()

    @property
    def ctrl(self):
        return self.arena.ctrl

    def word(self, index):
        return int(self.arena.ctrl[self.slot, index])

    # model side
    def open(self, tag, gated=False):
        R.tag_open(self.ctrl, self.slot, tag, gated)
        self.next_index.setdefault(tag, 0)

    def push(self, tag, n):
        for _ in range(n):
            i = self.next_index[tag]
            assert R.outbound_push(self.ctrl, self.arena.out_meta, self.arena.out_payload, self.slot, tag, i, frame_payload(tag, i))
            self.next_index[tag] = i + 1

    def end(self, tag):
        assert R.outbound_push_end(self.ctrl, self.arena.out_meta, self.slot, tag, self.next_index[tag])

    def approve(self, tag, frames):
        assert R.tag_approve(self.ctrl, self.slot, tag, frames)

    def cancel(self, tag, at_ms):
        R.tag_cancel(self.ctrl, self.slot, tag, at_ms * MS)

    def done(self, tag):
        R.tag_done(self.ctrl, self.slot, tag)

    # pacer and gateway side
    def tick(self, at_ms, drain=True):
        self.pacer.tick(at_ms * MS)
        return self.drain() if drain else None

    def cancels(self, at_ms, drain=True):
        self.pacer.cancels(at_ms * MS)
        return self.drain() if drain else None

    def drain(self):
        events = [decode(raw) for raw in R.wire_drain(self.ctrl, self.arena.wire_len, self.arena.wire_data, self.slot, 1000)]
        self.log.append(events)
        return events


def decode(raw: bytes) -> str:
    msg = json.loads(raw.decode("utf-8"))
    assert msg["streamSid"] == SID
    if msg["event"] == "media":
        assert set(msg) == {"event", "streamSid", "media"} and set(msg["media"]) == {"payload"}
        payload = base64.b64decode(msg["media"]["payload"], validate=True)
        assert len(payload) == FRAME_BYTES
        tag, index = payload[0], payload[1] | payload[2] << 8
        assert payload == frame_payload(tag, index), "payload bytes differ from the frame pushed"
        return f"{tag}.{index}"
    if msg["event"] == "mark":
        assert set(msg) == {"event", "streamSid", "mark"}
        return "mark " + msg["mark"]["name"]
    assert msg == {"event": "clear", "streamSid": SID}
    return "clear"


def frames(tag, first, last):
    return [f"{tag}.{i}" for i in range(first, last + 1)]


@pytest.fixture
def call(tmp_path):
    c = Call(tmp_path)
    yield c
    c.close()


# --- prefill hold when the carrier is dry ----------------------------------------------------------------


@pytest.fixture
def holding_call(tmp_path):
    c = Call(tmp_path, start_hold_ms=60)
    yield c
    c.close()


def test_dry_carrier_waits_for_a_lead_of_frames_then_bursts(holding_call):
    c = holding_call
    c.open(1)
    c.push(1, 1)
    assert c.tick(0) == []  # one frame alone would leave a gap at the next tick
    c.push(1, 2)
    assert c.tick(20) == []
    c.push(1, 5)
    assert c.tick(40) == frames(1, 0, 3)  # a lead's worth is ready: burst it
    assert c.tick(60) == frames(1, 4, 4) + ["mark 1:5"]
    assert c.word(C.START_HOLDS) == 1


def test_dry_carrier_releases_after_the_hold_timeout(holding_call):
    c = holding_call
    c.open(1)
    c.push(1, 2)
    assert c.tick(0) == []
    assert c.tick(40) == []
    assert c.tick(60) == frames(1, 0, 1)  # waited 60 ms: what there is goes out


def test_by_default_a_short_first_chunk_waits_out_the_vendors_pause_and_the_answer_starts_whole(tmp_path):
    """The vendor sends a 40 ms first chunk and its next ones ~200 ms later (as the Gemini simulator did when 50
    answers started at once): the default hold keeps the two frames back until a lead's worth is there, so the
    caller hears the answer start later, without a gap after its first 40 ms."""
    from voicecore.timing import DEFAULT_START_HOLD_MS

    c = Call(tmp_path, start_hold_ms=DEFAULT_START_HOLD_MS)
    try:
        c.open(1)
        c.push(1, 2)
        for t in range(0, 220, 20):
            assert c.tick(t) == [], t  # no frame goes out alone: the carrier would run dry after it
        c.push(1, 20)
        assert c.tick(220) == frames(1, 0, 3)  # a lead's worth, then one frame a tick
        assert c.tick(240) == frames(1, 4, 4) + ["mark 1:5"]
        assert c.word(C.START_HOLDS) == 1
    finally:
        c.close()


def test_by_default_a_vendor_that_stays_silent_gets_its_first_chunk_played_at_the_bound(tmp_path):
    from voicecore.timing import DEFAULT_START_HOLD_MS

    c = Call(tmp_path, start_hold_ms=DEFAULT_START_HOLD_MS)
    try:
        c.open(1)
        c.push(1, 2)
        assert c.tick(0) == []
        assert c.tick(DEFAULT_START_HOLD_MS - 20) == []
        assert c.tick(DEFAULT_START_HOLD_MS) == frames(1, 0, 1)  # what there is goes out: silence is worse
    finally:
        c.close()


def test_short_response_is_not_held(holding_call):
    c = holding_call
    c.open(1)
    c.push(1, 2)
    c.end(1)
    assert c.tick(0) == frames(1, 0, 1) + ["mark 1:2:end"]


def test_dry_carrier_waits_for_three_leads_of_approved_frames_without_timeout(holding_call):
    c = holding_call
    c.open(1, gated=True)
    c.push(1, 14)
    c.approve(1, 1)
    assert c.tick(0) == []  # one approved frame alone would stutter while approval catches up
    assert c.tick(100) == []  # the gate decides, not the prefill timeout
    c.approve(1, 8)
    assert c.tick(120) == []  # two leads approved, more audio waiting behind them: it would stall a tick later
    c.approve(1, 12)
    assert c.tick(140) == frames(1, 0, 3)


def test_a_short_gated_response_approved_whole_starts_at_once(holding_call):
    c = holding_call
    c.open(1, gated=True)
    c.push(1, 5)
    c.end(1)
    c.approve(1, 5)
    assert c.tick(0) == frames(1, 0, 3)  # all of it approved and its end written: nothing to wait for


def test_approval_ahead_of_a_short_first_delivery_still_waits_for_three_leads(holding_call):
    """The speech-rate bound approves a first word's worth before its audio came ("Shall": 10 frames, 8
    delivered); the next words may be held a while (" I", " book": 240 ms), so starting on that would stall."""
    c = holding_call
    c.open(1, gated=True)
    c.push(1, 8)
    c.approve(1, 10)
    assert c.tick(0) == []
    assert c.tick(100) == []  # the gate decides, not the prefill timeout
    c.approve(1, 12)
    assert c.tick(120) == frames(1, 0, 3)  # three leads approved: approval may trail the playback now


def test_model_falling_behind_mid_response_rebuffers(holding_call):
    c = holding_call
    c.open(1)
    c.push(1, 4)
    assert c.tick(0) == frames(1, 0, 3)
    assert c.tick(20) == []  # dry at 80 ms: counted as an underrun once the carrier runs out
    assert c.tick(100) == []
    assert c.word(C.UNDERRUNS) == 1
    c.push(1, 1)
    assert c.tick(120) == []  # refill before resuming: one frame would just gap again
    c.push(1, 3)
    assert c.tick(140) == ["1.4", "mark 1:5"] + frames(1, 5, 7)


# --- lead and bursts ------------------------------------------------------------------------------------


def test_lead_burst_of_four_then_one_per_tick(call):
    call.open(1)
    call.push(1, 10)
    assert call.tick(0) == frames(1, 0, 3)  # 80 ms lead from an empty carrier
    assert call.word(C.CARRIER_EMPTY_AT_NS) == 80 * MS
    assert call.tick(20) == ["1.4", "mark 1:5"]
    assert call.tick(40) == ["1.5"]
    assert call.tick(60) == ["1.6"]
    assert call.tick(70) == ["1.7"]  # an off-grid wake tops the lead up too: 70 ms < 80 ms
    assert call.tick(80) == []  # lead 80 ms: nothing due
    assert call.word(C.FRAMES_RELEASED) == 8 and call.word(C.LAST_RELEASE_NS) == 70 * MS


def own_lead(call, lead_ms):
    """The call in ``call``'s slot again, now with a lead of its own (LEAD_NS: the gateway writes its carrier's)."""
    call.arena.set_slot_state(call.slot, C.SLOT_FREE)
    call.arena.claim_slot(call.slot, SID, CALL_SID, wire_templates(SID), lead_ns=lead_ms * MS)


def test_a_call_with_its_own_lead_releases_that_much_ahead_and_the_others_keep_the_default(call):
    own_lead(call, 300)  # an Exotel call: one 200 ms chunk plus a margin
    arena = _second_call_in_slot_0(call, 20)  # a call without one: the configured 80 ms
    call.open(1)
    call.push(1, 30)
    assert call.tick(0) == frames(1, 0, 4) + ["mark 1:5"] + frames(1, 5, 9) + ["mark 1:10"]  # the burst bound
    assert R.wire_pending(arena.ctrl, 0) == 4
    assert call.tick(20) == frames(1, 10, 14) + ["mark 1:15", "1.15"]  # 300 ms queued ahead of 20 ms
    assert call.word(C.CARRIER_EMPTY_AT_NS) == 320 * MS
    assert R.wire_pending(arena.ctrl, 0) == 6 and arena.ctrl[0, C.CARRIER_EMPTY_AT_NS] == 100 * MS  # 1 frame, mark 9:5
    assert call.tick(40) == ["1.16"] and call.tick(60) == ["1.17"]  # then one per tick, 300 ms ahead
    assert call.tick(70) == ["1.18"] and call.tick(80) == []  # an off-grid wake tops it up; then it is full
    assert call.word(C.UNDERRUNS) == 0


def test_a_hold_of_a_call_with_its_own_lead_is_cleared_that_much_later(call):
    own_lead(call, 300)
    call.open(1)
    call.push(1, 30)
    assert len(call.tick(0)) == 12
    R.tag_pause(call.ctrl, call.slot, 1, 0)
    assert call.tick(20) == ["mark 1:10:end"]
    played(call, 1, 5, 100)  # the carrier plays what it holds: 200 ms of it left
    assert call.tick(100) == [] and call.tick(300) == []  # the configured lead's grace (100 ms) is not its
    assert call.tick(320) == ["clear"]  # its lead 300 + one frame


def own_backlog_bound(call, frames):
    """The call in ``call``'s slot again, now with a bound on its carrier's unconfirmed backlog (BACKLOG_MAX_FRAMES:
    the gateway writes Plivo's at claim time)."""
    call.arena.set_slot_state(call.slot, C.SLOT_FREE)
    call.arena.claim_slot(call.slot, SID, CALL_SID, wire_templates(SID), backlog_max_frames=frames)


def echoes_settled(call, position):
    """The gateway saw the carrier confirm (or a clear it sent settle) the call's first ``position`` frames."""
    call.ctrl[call.slot, C.CARRIER_PLAYED_POS] = position


def test_a_bounded_call_leaves_no_more_unconfirmed_frames_than_its_bound_and_a_hold_there_is_no_underrun(call):
    own_backlog_bound(call, 6)
    call.open(1)
    call.push(1, 30)
    assert call.tick(0) == frames(1, 0, 3)  # the lead by time, under the bound
    assert call.tick(20) == ["1.4", "mark 1:5"] and call.tick(40) == ["1.5"]
    assert call.word(C.WIRE_FRAMES) == 6 and call.word(C.BACKLOG_HELD) == 0
    # The carrier stalls: no echo. The time model says it plays on (and runs dry at 120 ms); the bound holds.
    for t in range(60, 300, 20):
        assert call.tick(t) == []
        assert call.word(C.CARRIER_EMPTY_AT_NS) >= (t + 20) * MS  # never dry while held: no prefill, no gap
    assert call.word(C.BACKLOG_HELD) == 12 and call.word(C.UNDERRUNS) == 0
    assert call.pacer.statistics()["backlog_held"] == 12 and call.pacer.statistics()["underruns"] == 0
    echoes_settled(call, 5)  # it plays again: "1:5" echoes; 1 frame unconfirmed, room for 5
    assert call.tick(300) == frames(1, 6, 9) + ["mark 1:10"]  # a lead's top-up (4), not the room (5)
    assert call.tick(320) == ["1.10"] and call.tick(340) == []  # the bound again: 6 unconfirmed
    assert call.word(C.WIRE_FRAMES) == 11 and call.word(C.UNDERRUNS) == 0


def test_a_clear_sent_settles_the_backlog_and_the_next_response_gets_its_whole_lead(call):
    own_backlog_bound(call, 6)
    call.open(1)
    call.push(1, 30)
    for t in (0, 20, 40, 60):
        call.tick(t)
    assert call.word(C.WIRE_FRAMES) == 6 and call.word(C.BACKLOG_HELD) == 1
    call.cancel(1, 70)
    assert call.tick(80) == ["clear"]
    call.open(2)
    call.push(2, 10)
    assert call.tick(100) == []  # the gateway has not sent the clear yet: its position is the old one
    echoes_settled(call, 6)  # it sent the clear: everything before it is played or thrown away
    assert call.tick(120) == frames(2, 0, 3)
    assert call.word(C.WIRE_FRAMES) == 10 and call.word(C.UNDERRUNS) == 0


def test_a_call_without_a_bound_counts_no_wire_frames_and_is_never_held_by_one(call):
    call.open(1)
    call.push(1, 40)
    for t in range(0, 400, 20):
        call.tick(t)
    assert call.word(C.FRAMES_RELEASED) == 23  # 4, then one a tick: the lead by time alone
    assert call.word(C.WIRE_FRAMES) == 0 and call.word(C.BACKLOG_HELD) == 0


def test_release_in_pairs_swings_the_queue_between_60_and_100_ms(tmp_path):
    """release_frames=2: two frames every other tick, so one gateway write carries both; the carrier's
    queue before a release is where it would be with one frame per tick (60 ms), never lower."""
    c = Call(tmp_path, release=2)
    try:
        c.open(1)
        c.push(1, 14)
        assert c.tick(0) == frames(1, 0, 4) + ["mark 1:5"]  # fill to 100 ms
        assert c.word(C.CARRIER_EMPTY_AT_NS) == 100 * MS
        assert c.tick(20) == []  # 80 ms queued: not down to 60 yet
        assert c.tick(40) == frames(1, 5, 6)  # 60 ms: two frames, back to 100
        assert c.tick(60) == []
        assert c.tick(80) == ["1.7", "1.8"]
        assert c.tick(100) == []
        assert c.tick(120) == ["1.9", "mark 1:10", "1.10"]
        # Whatever the tick's jitter, a release is two frames: just under or just over 60 ms queued.
        assert c.tick(160) == ["1.11", "1.12"] and c.tick(200.001) == ["1.13"]  # the 14th and last frame
        assert c.word(C.FRAMES_RELEASED) == 14
    finally:
        c.close()


def test_release_in_pairs_never_lets_a_response_start_late(tmp_path):
    """Frame n of a response reaches the carrier no later than with one frame per tick."""
    single, paired = Call(tmp_path, release=1), Call(tmp_path, release=2)
    try:
        arrival = {}
        for name, c in (("single", single), ("paired", paired)):
            c.open(1)
            c.push(1, 40)
            for tick in range(0, 800, 20):
                for event in c.tick(tick):
                    if not event.startswith("mark"):
                        arrival.setdefault(name, []).append(tick)
        assert len(arrival["single"]) == len(arrival["paired"]) == 40
        assert all(p <= s for p, s in zip(arrival["paired"], arrival["single"]))
    finally:
        single.close()
        paired.close()


def test_release_frames_must_leave_the_queue_above_zero(tmp_path):
    arena = Call(tmp_path).arena
    try:
        with pytest.raises(ValueError):
            P.PacerCore(arena, lead_ms=80, release_frames=5)  # would wait for an empty carrier
        with pytest.raises(ValueError):
            P.PacerCore(arena, release_frames=0)
        assert P.PacerCore(arena, lead_ms=80, release_frames=4).release_frames == 4
    finally:
        arena.close()
        arena.unlink()


@pytest.mark.parametrize(
    ("lead_ms", "first_tick"),
    [(20, 1), (60, 3), (80, 4), (100, 5), (90, 5)],
)
def test_first_burst_fills_the_lead(tmp_path, lead_ms, first_tick):
    c = Call(tmp_path, lead_ms=lead_ms)
    try:
        c.open(1)
        c.push(1, 20)
        assert len([e for e in c.tick(0) if not e.startswith("mark")]) == first_tick
    finally:
        c.close()


def test_bounded_catch_up_after_a_stall(tmp_path):
    c = Call(tmp_path, burst=3)
    try:
        c.open(1)
        c.push(1, 30)
        assert c.tick(0) == frames(1, 0, 2)  # burst bound, lead 60
        assert c.tick(20) == ["1.3", "1.4", "mark 1:5"]  # lead 40 -> 80
        assert c.tick(40) == ["1.5"]
        assert c.word(C.CARRIER_EMPTY_AT_NS) == 120 * MS
        # The pacer stalls until 300 ms: the carrier ran dry at 120. It refills at most 3 per tick
        # from "now", it does not try to send the 9 frames it "missed".
        assert c.tick(300) == frames(1, 6, 8)
        assert c.word(C.CARRIER_EMPTY_AT_NS) == 360 * MS
        assert c.tick(320) == ["1.9", "mark 1:10", "1.10"]  # lead 40 -> 80
        assert c.word(C.CARRIER_EMPTY_AT_NS) == 400 * MS
        assert c.tick(340) == ["1.11"]
        assert c.word(C.UNDERRUNS) == 0  # frames were there: a pacer stall is lateness, not an underrun
    finally:
        c.close()


# --- marks ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mark_every", "n_frames", "marks"),
    [
        (5, 12, ["mark 1:5", "mark 1:10", "mark 1:12:end"]),
        (4, 8, ["mark 1:4", "mark 1:8", "mark 1:8:end"]),
        (0, 7, ["mark 1:7:end"]),
        (1, 3, ["mark 1:1", "mark 1:2", "mark 1:3", "mark 1:3:end"]),
    ],
)
def test_marks_every_n_frames_and_at_the_end(tmp_path, mark_every, n_frames, marks):
    c = Call(tmp_path, mark_every=mark_every, lead_ms=1000, burst=100, wire_slots=64)
    try:
        c.open(1)
        c.push(1, n_frames)
        c.end(1)
        out = c.tick(0)
        assert [e for e in out if e.startswith("mark")] == marks
        # each mark sits right after the frame it counts
        sent = 0
        for e in out:
            if e.startswith("mark"):
                assert int(e.split()[1].split(":")[1]) == sent
            else:
                sent += 1
        assert sent == n_frames
        assert c.word(C.SENT_CLOSED) == C.SENT_ENDED
    finally:
        c.close()


def test_end_mark_waits_for_its_frames_and_follows_the_last_one(call):
    call.open(1)
    call.push(1, 6)
    call.end(1)
    assert call.tick(0) == frames(1, 0, 3)
    assert call.tick(20) == ["1.4", "mark 1:5"]
    assert call.tick(40) == ["1.5", "mark 1:6:end"]  # the END needs no lead: it is not audio


def test_a_new_response_restarts_the_mark_count(call):
    call.open(1)
    call.push(1, 2)
    call.end(1)
    call.open(2)
    call.push(2, 6)
    assert call.tick(0) == ["1.0", "1.1", "mark 1:2:end", "2.0", "2.1"]
    assert call.tick(20) == ["2.2"]
    assert call.tick(40) == ["2.3"]
    assert call.tick(60) == ["2.4", "mark 2:5"]
    assert call.word(C.SENT_TAG) == 2 and call.word(C.SENT_FRAMES) == 5


def test_end_of_a_response_with_no_frames_sent_is_silent(call):
    call.open(1)
    call.end(1)
    assert call.tick(0) == []
    assert call.word(C.OUT_TAIL) == 1


def test_exact_json_text_of_media_mark_and_clear(call):
    call.open(3)
    call.push(3, 5)
    call.pacer.tick(0)
    call.cancel(3, 1)
    call.pacer.cancels(1 * MS)
    raw = R.wire_drain(call.ctrl, call.arena.wire_len, call.arena.wire_data, call.slot, 100)
    b64 = base64.b64encode(frame_payload(3, 0)).decode()
    assert raw[0] == ('{"event":"media","streamSid":"%s","media":{"payload":"%s"}}' % (SID, b64)).encode()
    assert raw[-1] == ('{"event":"clear","streamSid":"%s"}' % SID).encode()
    call.open(4)
    call.push(4, 5)
    call.pacer.tick(100 * MS)
    call.pacer.tick(120 * MS)
    raw = R.wire_drain(call.ctrl, call.arena.wire_len, call.arena.wire_data, call.slot, 100)
    assert raw[-1] == ('{"event":"mark","streamSid":"%s","mark":{"name":"4:5"}}' % SID).encode()
    call.end(4)
    call.pacer.tick(140 * MS)
    raw = R.wire_drain(call.ctrl, call.arena.wire_len, call.arena.wire_data, call.slot, 100)
    assert raw == [('{"event":"mark","streamSid":"%s","mark":{"name":"4:5:end"}}' % SID).encode()]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 159, 160, 161])
def test_base64_encoder_matches_binascii(n):
    src = np.arange(n, dtype=np.uint8) * np.uint8(97) + np.uint8(13)
    dst = np.zeros(4 * ((n + 2) // 3) + 8, dtype=np.uint8)
    end = P.b64encode_into(src, dst, 3)
    assert dst[3:end].tobytes() == binascii.b2a_base64(src.tobytes(), newline=False)


# --- cancel and clear (INV-STALE) -----------------------------------------------------------------------


def test_clear_goes_behind_frames_already_queued(call):
    call.open(1)
    call.push(1, 10)
    call.tick(0, drain=False)  # four frames wait in the wire ring, the gateway has not sent them
    call.cancel(1, 10)
    assert call.cancels(10) == frames(1, 0, 3) + ["clear"]
    assert call.word(C.CLEAR_QUEUED_NS) == 10 * MS
    assert call.word(C.CARRIER_EMPTY_AT_NS) == 10 * MS
    assert call.word(C.SENT_CLOSED) == C.SENT_CLEARED
    assert call.word(C.CANCEL_SEEN_SEQ) == call.word(C.CANCEL_SEQ) == 1
    assert call.tick(20) == []  # INV-STALE: the rest is skipped, never sent
    assert call.word(C.FRAMES_SKIPPED) == 6 and call.word(C.OUT_TAIL) == 10
    call.push(1, 3)  # late deltas of the cancelled response
    call.end(1)
    assert call.tick(40) == []
    assert call.word(C.FRAMES_SKIPPED) == 9


def test_cancel_without_a_cancel_pass_is_handled_by_the_next_tick(call):
    call.open(1)
    call.push(1, 10)
    assert call.tick(0) == frames(1, 0, 3)
    call.cancel(1, 5)
    call.open(2)
    call.push(2, 2)
    # the clear comes first, then the new response from an empty carrier (full lead burst)
    assert call.tick(20) == ["clear", "2.0", "2.1"]
    assert call.word(C.SENT_TAG) == 2 and call.word(C.SENT_CLOSED) == C.SENT_OPEN


def test_cancel_pass_releases_nothing(call):
    call.open(1)
    call.push(1, 10)
    assert call.cancels(0) == []
    assert call.word(C.OUT_TAIL) == 0
    assert call.pacer.statistics()["cancel_passes"] == 1


def test_cancel_of_a_response_not_yet_on_the_wire_sends_no_clear(call):
    call.open(1)
    call.push(1, 2)
    call.end(1)
    call.open(2)
    call.push(2, 4)
    call.cancel(2, 0)
    assert call.tick(0) == ["1.0", "1.1", "mark 1:2:end"]
    assert call.word(C.FRAMES_SKIPPED) == 4


def test_two_cancels_between_looks_still_clear_the_one_playing(call):
    # CANCEL_TAG only holds the newest cancel (2); the tag on the wire is 1 and must be cleared.
    call.open(1)
    call.push(1, 8)
    assert call.tick(0) == frames(1, 0, 3)
    call.open(2)
    call.cancel(1, 5)
    call.cancel(2, 6)
    assert call.word(C.CANCEL_TAG) == 2
    assert call.cancels(7) == ["clear"]


def test_cancel_after_the_end_mark_still_clears_buffered_audio(call):
    call.open(1)
    call.push(1, 3)
    call.end(1)
    assert call.tick(0) == ["1.0", "1.1", "1.2", "mark 1:3:end"]
    call.cancel(1, 10)  # barge-in while the tail is still playing
    assert call.cancels(10) == ["clear"]
    call.cancel(1, 11)  # a second cancel of the same tag: one clear is enough
    assert call.cancels(11) == []


def test_cancel_decided_before_the_pacer_first_saw_the_call_is_not_cleared(tmp_path):
    c = Call(tmp_path)
    try:
        c.open(1)
        c.push(1, 3)
        c.cancel(1, 0)
        assert c.tick(0) == []
        assert c.word(C.FRAMES_SKIPPED) == 3
    finally:
        c.close()


def test_a_row_reused_by_a_newer_tag_makes_the_old_frames_dead(call):
    call.open(1)
    call.push(1, 3)
    call.open(1 + C.TAG_TABLE_SIZE)  # same row
    call.push(1 + C.TAG_TABLE_SIZE, 1)
    assert call.tick(0) == [f"{1 + C.TAG_TABLE_SIZE}.0"]
    assert call.word(C.FRAMES_SKIPPED) == 3


# --- gate (INV-GATE) -----------------------------------------------------------------------------------


def test_gate_holds_then_releases_up_to_the_watermark(call):
    call.open(1, gated=True)
    call.push(1, 10)
    assert call.tick(0) == []
    assert call.word(C.GATE_HELD) == 1
    assert call.tick(20) == []
    assert call.word(C.GATE_HELD) == 2
    call.approve(1, 2)
    assert call.tick(40) == ["1.0", "1.1"]
    assert call.word(C.GATE_HELD) == 3  # frame 2 was due and held
    call.approve(1, 1)  # the watermark never goes down
    call.approve(1, 10)
    assert call.tick(60) == ["1.2", "1.3", "1.4", "mark 1:5"]  # lead 20 -> 80
    assert call.word(C.GATE_HELD) == 3
    assert call.word(C.UNDERRUNS) == 0  # waiting for the gate is not the model falling behind


def test_gate_hold_is_not_counted_when_nothing_is_due(call):
    call.open(1, gated=True)
    call.approve(1, 4)
    call.push(1, 8)
    assert call.tick(0) == frames(1, 0, 3)
    assert call.word(C.GATE_HELD) == 0  # the lead is full: the gate held nothing back this tick
    assert call.tick(20) == []
    assert call.word(C.GATE_HELD) == 1


def test_frames_behind_a_held_frame_wait_even_if_their_tag_is_open(call):
    call.open(1, gated=True)
    call.push(1, 2)
    call.end(1)
    call.open(2)  # not gated
    call.push(2, 3)
    assert call.tick(0) == []  # INV-ORDER: response 2 never overtakes response 1
    call.approve(1, 2)
    assert call.tick(20) == ["1.0", "1.1", "mark 1:2:end", "2.0", "2.1"]


def test_cancelling_a_held_response_lets_the_next_one_through(call):
    call.open(1, gated=True)
    call.push(1, 5)
    call.open(2)
    call.push(2, 2)
    assert call.tick(0) == []
    call.cancel(1, 10)  # the validator rejected it: none of its audio ever plays
    assert call.tick(20) == ["2.0", "2.1"]
    assert call.word(C.FRAMES_SKIPPED) == 5


# --- underruns ------------------------------------------------------------------------------------------


def test_underrun_counted_once_per_dry_spell(call):
    call.open(1)
    call.push(1, 4)
    assert call.tick(0) == frames(1, 0, 3)
    for t in (20, 40, 60):
        assert call.tick(t) == []
        assert call.word(C.UNDERRUNS) == 0  # still playing what it has
    assert call.tick(80) == []
    assert call.word(C.UNDERRUNS) == 1 and call.word(C.UNDERRUN_OPEN) == 1
    for t in (100, 120):
        call.tick(t)
    assert call.word(C.UNDERRUNS) == 1
    call.push(1, 1)
    assert call.tick(140) == ["1.4", "mark 1:5"]
    assert call.word(C.UNDERRUN_OPEN) == 0
    assert call.tick(160) == []
    assert call.word(C.UNDERRUNS) == 2
    assert call.pacer.statistics()["underruns"] == 2


@pytest.mark.parametrize("how", ["end", "cancel"])
def test_no_underrun_after_a_response_ended_or_was_cancelled(call, how):
    call.open(1)
    call.push(1, 2)
    if how == "end":
        call.done(1)
        call.end(1)
    assert call.tick(0)[:2] == ["1.0", "1.1"]
    if how == "cancel":
        call.cancel(1, 10)
    for t in range(20, 200, 20):
        call.tick(t)
    assert call.word(C.UNDERRUNS) == 0


def test_done_response_still_plays_its_frames(call):
    call.open(1)
    call.push(1, 6)
    call.done(1)
    assert call.tick(0) == frames(1, 0, 3)
    assert call.tick(20) == ["1.4", "mark 1:5"]


# --- wire ring full -------------------------------------------------------------------------------------


def test_wire_full_stops_and_resumes_in_order(tmp_path):
    c = Call(tmp_path, wire_slots=4, lead_ms=1000, burst=50, mark_every=5)
    try:
        c.open(1)
        c.push(1, 12)
        c.tick(0, drain=False)
        assert c.word(C.WIRE_HEAD) == 4 and c.word(C.WIRE_FULL) == 1
        # frame 4 needs two entries (frame and mark 1:5): it waits rather than split them
        out = c.drain()
        assert out == frames(1, 0, 3)
        assert c.tick(20) == ["1.4", "mark 1:5", "1.5", "1.6"]
        assert c.tick(40) == ["1.7", "1.8", "1.9", "mark 1:10"]
        assert c.word(C.FRAMES_RELEASED) == 10
    finally:
        c.close()


def test_a_clear_owed_while_the_wire_is_full_blocks_the_call_until_queued(tmp_path):
    c = Call(tmp_path, wire_slots=4, lead_ms=1000, burst=4, mark_every=0)
    try:
        c.open(1)
        c.push(1, 8)
        c.tick(0, drain=False)  # wire ring now full with 1.0-1.3
        c.cancel(1, 5)
        c.open(2)
        c.push(2, 2)
        c.cancels(5, drain=False)
        assert c.word(C.CANCEL_SEEN_SEQ) == 0 and c.word(C.WIRE_FULL) == 1
        c.tick(20, drain=False)  # still owed: nothing of response 2 may go before the clear
        assert c.word(C.WIRE_HEAD) == 4
        assert c.drain() == frames(1, 0, 3)
        assert c.tick(40) == ["clear", "2.0", "2.1"]
    finally:
        c.close()


# --- slots, generations, restarts -----------------------------------------------------------------------


def test_free_and_ending_slots_are_not_served(call):
    call.open(1)
    call.push(1, 4)
    call.arena.set_slot_state(call.slot, C.SLOT_ENDING)
    assert call.tick(0) == []
    assert call.word(C.OUT_TAIL) == 0
    assert call.pacer.statistics()["calls_served"] == 0
    call.arena.set_slot_state(call.slot, C.SLOT_ACTIVE)
    assert call.tick(20) == frames(1, 0, 3)


def test_a_new_call_in_the_slot_resets_the_pacer_view(call):
    call.open(1)
    call.push(1, 7)
    call.tick(0)
    call.tick(20)
    call.arena.set_slot_state(call.slot, C.SLOT_FREE)
    call.arena.claim_slot(call.slot, "MZnewcall", CALL_SID, wire_templates("MZnewcall"))
    assert call.word(C.SENT_TAG) == 0 and call.word(C.OUT_TAIL) == 0  # gateway zeroed the row
    R.tag_open(call.ctrl, call.slot, 1, False)
    assert R.outbound_push(call.ctrl, call.arena.out_meta, call.arena.out_payload, call.slot, 1, 0, frame_payload(1, 0))
    call.pacer.tick(1000 * MS)
    raw = R.wire_drain(call.ctrl, call.arena.wire_len, call.arena.wire_data, call.slot)
    assert [json.loads(r)["streamSid"] for r in raw] == ["MZnewcall"]
    assert call.word(C.PACER_GENERATION) == call.word(C.GENERATION) == 2
    assert call.word(C.CARRIER_EMPTY_AT_NS) == 1000 * MS + FRAME_NS


def test_a_restarted_pacer_resumes_from_shared_memory(call):
    call.open(1)
    call.push(1, 10)
    assert call.tick(0) == frames(1, 0, 3)
    call.pacer = P.PacerCore(call.arena)  # a new process: nothing but the arena (words and templates)
    assert call.tick(20) == ["1.4", "mark 1:5"]


def _second_call_in_slot_0(call, frames):
    """Another call in slot 0 with ``frames`` frames of its tag 9 queued; returns the arena."""
    arena = call.arena
    arena.claim_slot(0, "MZzero", "CAzero", wire_templates("MZzero"))
    R.tag_open(arena.ctrl, 0, 9, False)
    for i in range(frames):
        R.outbound_push(arena.ctrl, arena.out_meta, arena.out_payload, 0, 9, i, frame_payload(9, i))
    return arena


def test_calls_are_independent_and_the_return_value_counts_calls_with_news(call):
    arena = _second_call_in_slot_0(call, 2)
    call.open(1)
    assert call.pacer.tick(0) == 1
    assert R.wire_pending(arena.ctrl, 1) == 0 and R.wire_pending(arena.ctrl, 0) == 2
    call.push(1, 1)
    assert call.pacer.tick(20 * MS) == 1
    slots = np.zeros(3, dtype=np.int64)
    assert R.wire_ready_slots(arena.ctrl, slots) == 2 and list(slots[:2]) == [0, 1]
    stats = call.pacer.statistics()
    assert stats["ticks"] == 2 and stats["calls_served"] == 4 and stats["frames_released"] == 3


def test_a_phase_ticks_only_its_group_of_slots(call):
    """The shell ticks slot % phases == phase on each sub-tick: every call once per 20 ms, on its phase."""
    arena = _second_call_in_slot_0(call, 4)
    call.open(1)
    call.push(1, 4)
    assert call.pacer.tick(0, 1, 2) == 1  # slot 1's group
    assert R.wire_pending(arena.ctrl, 0) == 0 and R.wire_pending(arena.ctrl, 1) == 4
    assert call.pacer.tick(0, 0, 2) == 1  # then slot 0's
    assert R.wire_pending(arena.ctrl, 0) == 4
    assert call.pacer.statistics()["calls_served"] == 2


def test_bad_arguments_are_refused(call):
    with pytest.raises(ValueError):
        P.PacerCore(call.arena, lead_ms=0)
    arena = call.arena
    for tmpl, tmpl_meta in ((arena.wire_tmpl[:1], arena.wire_tmpl_meta), (arena.wire_tmpl, arena.wire_tmpl_meta[:, :4])):
        with pytest.raises(ValueError):  # templates for fewer calls than the arena holds, or too few words
            P.pace_tick(
                arena.ctrl, arena.out_meta, arena.out_payload, arena.wire_len, arena.wire_data, tmpl, tmpl_meta,
                0, 80 * MS, 5, 10, 0, P.new_stats(), 0, 1, 1, 80 * MS, call.pacer.clips, call.pacer.clip_frames, 0,
            )
    with pytest.raises(ValueError):
        call.pacer.tick(0, 0, 0)  # a group step of 0 would never advance


# --- INV-ONE-VOICE: a newer response on the wire; holds on a bare VAD edge ----------------------------------


def test_frames_of_an_older_tag_after_a_newer_one_went_out_are_skipped(call):
    call.open(1)
    call.open(2)
    call.push(2, 2)
    call.push(1, 3)  # the model worker wrote the older response behind the newer one's start
    call.push(2, 2)
    call.end(1)
    call.end(2)
    assert call.tick(0) == ["2.0", "2.1", "2.2", "2.3", "mark 2:4:end"]
    assert call.word(C.FRAMES_SUPERSEDED) == 3 and call.word(C.FRAMES_SKIPPED) == 3
    assert call.pacer.statistics()["frames_superseded"] == 3


def played(call, tag, frames, at_ms):
    """The gateway saw the carrier echo mark ``tag:frames`` (its audio played)."""
    call.ctrl[call.slot, C.PLAYED_TAG] = tag
    call.ctrl[call.slot, C.PLAYED_FRAMES] = frames
    call.ctrl[call.slot, C.PLAYED_AT_NS] = at_ms * MS


def hold_after_four_frames(call, since_ms):
    """Response 1 has 30 frames; its lead burst goes out at 0 ms, then a VAD edge holds it."""
    call.open(1)
    call.push(1, 30)
    assert call.tick(0) == frames(1, 0, 3)
    R.tag_pause(call.ctrl, call.slot, 1, since_ms * MS)
    assert call.tick(20) == ["mark 1:4:end"]


def test_a_hold_stops_release_at_once_and_marks_where_the_held_audio_ends(call):
    # held: nothing newer goes out; the end mark says where the audio stops (its echo ends the spurt)
    hold_after_four_frames(call, since_ms=10)
    assert call.tick(40) == [] and call.tick(60) == []
    assert call.word(C.UNDERRUNS) == 0  # a hold is not a gap the model caused
    played(call, 1, 4, 80)  # the carrier played what it held: nothing to clear
    assert call.tick(140) == [] and call.tick(400) == []
    assert R.tag_resume(call.ctrl, call.slot, 1)
    # a false alarm: the same response goes on from where it stopped, with a fresh lead burst
    assert call.tick(420) == ["1.4", "mark 1:5"] + frames(1, 5, 7)
    assert call.word(C.SENT_CLOSED) == C.SENT_OPEN
    assert not R.tag_resume(call.ctrl, call.slot, 1)


def test_a_hold_clears_a_carrier_still_playing_held_audio_after_the_grace(call):
    hold_after_four_frames(call, since_ms=0)
    assert call.tick(80) == []
    played(call, 1, 3, 70)  # the carrier is behind: frame 4 still queued 100 ms into the hold
    assert call.tick(100) == ["clear"]  # grace: lead 80 + one frame
    assert call.word(C.SENT_CLOSED) == C.SENT_CLEARED and call.tick(120) == []


def test_a_confirmed_bargein_after_a_hold_clears_and_the_next_response_is_not_held(call):
    hold_after_four_frames(call, since_ms=0)
    played(call, 1, 4, 80)
    call.cancel(1, 500)  # the words came: a real barge-in
    assert call.cancels(500) == ["clear"]  # the carrier gets its clear (what it holds is nothing now)
    assert call.tick(520) == []
    call.open(2)
    call.push(2, 4)
    call.end(2)
    assert call.tick(540) == frames(2, 0, 3) + ["mark 2:4:end"]


def test_a_held_response_whose_frames_all_went_out_gets_no_second_end_mark(call):
    call.open(1)
    call.push(1, 3)
    assert call.tick(0) == frames(1, 0, 2)
    R.tag_pause(call.ctrl, call.slot, 1, 0)
    assert call.tick(20) == ["mark 1:3:end"]
    call.end(1)
    assert call.tick(40) == []  # its end was marked by the hold: all of it is out
    assert call.word(C.OUT_TAIL) == 4


# --- wire templates: each call's messages are its carrier module's (voicecore/carriers/wire.py) ------------

PLIVO_ID = "b77e037d-4119-44b5-902d-25826b654539"  # Plivo's stream ids are UUIDs: a 139-byte playAudio head


def _twilio_reader(sid):
    def read(entry):
        msg = json.loads(entry)
        assert msg["streamSid"] == sid
        if msg["event"] == "media":
            assert set(msg) == {"event", "streamSid", "media"} and set(msg["media"]) == {"payload"}
            return "media", base64.b64decode(msg["media"]["payload"], validate=True)
        if msg["event"] == "mark":
            return "mark", msg["mark"]["name"]
        assert msg == {"event": "clear", "streamSid": sid}
        return ("clear",)
    return read


def _telnyx_reader():
    side = telnyx.TelnyxCarrierSide("", "v3:call-control-id", "user-id")

    def read(entry):
        got = side.receive_text(entry)
        if isinstance(got, telnyx.SentMedia):
            return "media", got.payload
        if isinstance(got, telnyx.SentMark):
            return "mark", got.name
        assert isinstance(got, telnyx.SentClear), got
        return ("clear",)
    return read


def _plivo_reader():
    side = plivo.PlivoCarrierSide(PLIVO_ID, "call-uuid")

    def read(entry):
        got = side.receive_text(entry)
        if isinstance(got, plivo.PlayAudio):
            assert (got.content_type, got.sample_rate_hz) == (plivo.CONTENT_TYPE_MULAW, 8000)
            return "media", got.payload
        if isinstance(got, plivo.Checkpoint):
            return "mark", got.name
        assert isinstance(got, plivo.ClearAudio), got
        return ("clear",)
    return read


def _raw_reader():
    def read(entry):
        kind, rest = entry[:1], entry[1:]
        if kind == RAW_MEDIA:
            assert len(rest) == FRAME_BYTES
            return "media", rest
        if kind == RAW_MARK:
            assert marks.PLAIN_NAME_BYTES.fullmatch(rest)
            return "mark", rest.decode("ascii")
        assert entry == RAW_CLEAR
        return ("clear",)
    return read


# carrier: (stream id in the arena, its templates, a reader of what that carrier receives)
CARRIERS = {
    "twilio": (SID, lambda: wire_templates(SID), lambda: _twilio_reader(SID)),
    "telnyx": ("telnyx-stream", lambda: telnyx.wire_templates(), _telnyx_reader),
    "plivo": (PLIVO_ID, lambda: plivo.wire_templates(PLIVO_ID), _plivo_reader),
    "raw": ("vonage-call", lambda: RAW, _raw_reader),  # Vonage, Exotel: the gateway's carrier edge finishes them
}
LINE_FRAMES = 3


def _line_clips() -> FallbackClips:
    frames = np.zeros((1, LINE_FRAMES, FRAME_BYTES), dtype=np.uint8)
    for k in range(LINE_FRAMES):
        frames[0, k] = np.frombuffer(bytes([250, 0, k]) + bytes((k * 7 + j) % 256 for j in range(FRAME_BYTES - 3)), dtype=np.uint8)
    return FallbackClips(frames=frames, frame_counts=np.array([LINE_FRAMES], dtype=np.int64), texts=("line",))


def _label(event, clips) -> str:
    if event[0] == "media":
        payload = event[1]
        if payload[0] == 250:
            assert payload == clips.frames[0, payload[2]].tobytes()
            return f"line.{payload[2]}"
        tag, index = payload[0], payload[1] | payload[2] << 8
        assert payload == frame_payload(tag, index), "payload bytes differ from the frame pushed"
        return f"{tag}.{index}"
    return "mark " + event[1] if event[0] == "mark" else "clear"


class CarrierCalls:
    """One call per carrier in one arena (slot k: carriers[k]), each read by its own carrier's reader."""

    def __init__(self, tmp_path, carriers):
        self.carriers = list(carriers)
        self.arena = Arena.create(ArenaLayout(max_calls=len(self.carriers), in_slots=8, out_slots=64, wire_slots=64),
                                  directory=str(tmp_path))
        self.readers = []
        for slot, name in enumerate(self.carriers):
            stream_id, templates, reader = CARRIERS[name]
            self.arena.claim_slot(slot, stream_id, CALL_SID, templates())
            self.readers.append(reader())
        self.clips = _line_clips()
        self.attached: list[Arena] = []
        self.restart_pacer(self.arena)
        self.raw: list[list[bytes]] = [[] for _ in self.carriers]

    def restart_pacer(self, arena):
        """A pacer process (a first one, or one that restarted or took over): nothing but the arena."""
        self.pacer = P.PacerCore(arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0,
                                 clips=self.clips)

    def each(self, f):
        for slot in range(len(self.carriers)):
            f(slot)

    def push(self, tag, first, n):
        def push(slot):
            R.tag_open(self.arena.ctrl, slot, tag, False) if first == 0 else None
            for i in range(first, first + n):
                assert R.outbound_push(self.arena.ctrl, self.arena.out_meta, self.arena.out_payload, slot, tag, i,
                                       frame_payload(tag, i))
        self.each(push)

    def drain(self):
        events = []
        for slot, read in enumerate(self.readers):
            entries = R.wire_drain(self.arena.ctrl, self.arena.wire_len, self.arena.wire_data, slot, 1000)
            self.raw[slot] += entries
            events.append([_label(read(entry), self.clips) for entry in entries])
        return events

    def tick(self, at_ms):
        self.pacer.tick(at_ms * MS)
        return self.drain()

    def close(self):
        for arena in self.attached:
            arena.close()
        self.arena.close()
        self.arena.unlink()


def _play_a_call(calls: CarrierCalls, restart_at_ms=None):
    """A response with cadence and end marks, one cut by a barge-in (clear), a fallback line; every call's
    events as labels (the same for every carrier), with the pacer restarted from the arena at restart_at_ms."""
    log = []

    def tick(at_ms):
        if at_ms == restart_at_ms:
            calls.attached.append(Arena.attach(calls.arena.name, directory=os.path.dirname(calls.arena.path)))
            calls.restart_pacer(calls.attached[-1])
        log.append(calls.tick(at_ms))

    calls.push(1, 0, 7)
    calls.each(lambda slot: R.outbound_push_end(calls.arena.ctrl, calls.arena.out_meta, slot, 1, 7))
    for at_ms in (0, 20, 40, 60):
        tick(at_ms)
    calls.push(2, 0, 6)
    tick(140)
    calls.each(lambda slot: R.tag_cancel(calls.arena.ctrl, slot, 2, 150 * MS))
    calls.pacer.cancels(150 * MS)
    log.append(calls.drain())

    def ask_line(slot):
        calls.arena.ctrl[slot, C.FALLBACK_CLIP] = 0
        calls.arena.ctrl[slot, C.FALLBACK_SEQ] += 1
    calls.each(ask_line)
    for at_ms in (160, 180, 200):
        tick(at_ms)
    return [sum((events[slot] for events in log), []) for slot in range(len(calls.carriers))]


def pacer_wire_entries(tmp_path, stream_id, templates) -> list[bytes]:
    """What the real pacer writes for one call with these templates: frames 1.0-1.6 of a response with marks
    1:5 and 1:7:end, then frames 2.0-2.3 of a response a barge-in cuts (a clear). For the carrier modules'
    tests: their CarrierSide must read it."""
    arena = Arena.create(ArenaLayout(max_calls=1, in_slots=8, out_slots=64, wire_slots=64), directory=str(tmp_path))
    try:
        arena.claim_slot(0, stream_id, CALL_SID, templates)
        pacer = P.PacerCore(arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0)
        ctrl = arena.ctrl
        R.tag_open(ctrl, 0, 1, False)
        for i in range(7):
            R.outbound_push(ctrl, arena.out_meta, arena.out_payload, 0, 1, i, frame_payload(1, i))
        R.outbound_push_end(ctrl, arena.out_meta, 0, 1, 7)
        for at_ms in (0, 20, 40, 60):
            pacer.tick(at_ms * MS)
        R.tag_open(ctrl, 0, 2, False)
        for i in range(6):
            R.outbound_push(ctrl, arena.out_meta, arena.out_payload, 0, 2, i, frame_payload(2, i))
        pacer.tick(140 * MS)
        R.tag_cancel(ctrl, 0, 2, 150 * MS)
        pacer.cancels(150 * MS)
        return R.wire_drain(ctrl, arena.wire_len, arena.wire_data, 0, 1000)
    finally:
        arena.close()
        arena.unlink()


PACER_ENTRIES_FRAMES = [(1, i) for i in range(5)] + [(1, 5), (1, 6)] + [(2, i) for i in range(4)]
PACER_ENTRIES_MARKS = ["1:5", "1:7:end"]


EXPECTED_CALL = (frames(1, 0, 4) + ["mark 1:5", "1.5", "1.6", "mark 1:7:end"] + frames(2, 0, 3) + ["clear"]
                 + [f"line.{k}" for k in range(LINE_FRAMES)])


@pytest.mark.parametrize("carrier", sorted(CARRIERS))
def test_a_calls_entries_are_its_carriers_messages(tmp_path, carrier):
    calls = CarrierCalls(tmp_path, [carrier])
    try:
        assert _play_a_call(calls) == [EXPECTED_CALL]
    finally:
        calls.close()


def test_raw_entries_have_the_raw_layout(tmp_path):
    calls = CarrierCalls(tmp_path, ["raw"])
    try:
        _play_a_call(calls)
        raw = calls.raw[0]
        assert raw[:6] == [RAW_MEDIA + frame_payload(1, i) for i in range(5)] + [RAW_MARK + b"1:5"]
        assert raw[8:14] == [RAW_MARK + b"1:7:end"] + [RAW_MEDIA + frame_payload(2, i) for i in range(4)] + [RAW_CLEAR]
        assert raw[14:] == [RAW_MEDIA + calls.clips.frames[0, k].tobytes() for k in range(LINE_FRAMES)]
    finally:
        calls.close()


def test_mixed_carriers_in_one_arena_and_a_restarted_pacer_keeps_each_calls_templates(tmp_path):
    carriers = ["plivo", "twilio", "raw", "telnyx", "twilio"]
    calls = CarrierCalls(tmp_path, carriers)
    try:
        # The pacer restarts mid-response (a new process: it attaches the arena and has nothing else).
        assert _play_a_call(calls, restart_at_ms=40) == [EXPECTED_CALL] * len(carriers)
        twilio_entries = calls.raw[carriers.index("twilio")]
        assert twilio_entries[0] == ('{"event":"media","streamSid":"%s","media":{"payload":"%s"}}'
                                     % (SID, base64.b64encode(frame_payload(1, 0)).decode())).encode()
    finally:
        calls.close()


def test_a_new_call_of_another_carrier_in_the_slot_gets_its_own_templates(call):
    call.open(1)
    call.push(1, 2)
    call.tick(0)
    call.arena.set_slot_state(call.slot, C.SLOT_FREE)
    call.arena.claim_slot(call.slot, "vonage-call", CALL_SID, RAW)
    R.tag_open(call.ctrl, call.slot, 1, False)
    assert R.outbound_push(call.ctrl, call.arena.out_meta, call.arena.out_payload, call.slot, 1, 0, frame_payload(1, 0))
    call.pacer.tick(1000 * MS)
    raw = R.wire_drain(call.ctrl, call.arena.wire_len, call.arena.wire_data, call.slot)
    assert raw == [RAW_MEDIA + frame_payload(1, 0)]


# The pacer of commit 66c7146 (before the carriers' message templates) built Twilio's messages from the SIDs and the
# constants of voicecore/carriers/twilio/stream.py. Over this scenario (4 SIDs from 1 to 64 characters, tags of up
# to 10 digits, indices past 99,999, cadence and end marks, a barge-in's clear, a hold's end mark and clear,
# fallback lines) it wrote these 144 entries; the templates must give the same bytes.
GOLDEN_ENTRIES = 144
GOLDEN_SHA256 = "18620911b78b8e26b97324a75303e8530ec2090d24a1a6dcf99e6aded0893a90"


def test_twilio_entries_are_byte_for_byte_those_of_the_pacer_that_built_them_from_the_sids(tmp_path):
    sids = ["MZ" + "0123456789abcdef" * 2, "x", "A" * 64, "MZ.test-1:a_b"]

    def payload(tag, i):
        return bytes((tag * 37 + i * 11 + k * 3 + (k * k) % 7) % 256 for k in range(FRAME_BYTES))

    clips = np.zeros((2, 6, FRAME_BYTES), dtype=np.uint8)
    for c in range(2):
        for k in range(6):
            clips[c, k] = np.frombuffer(bytes((250 + c + k * 5 + j) % 256 for j in range(FRAME_BYTES)), dtype=np.uint8)
    line_clips = FallbackClips(frames=clips, frame_counts=np.array([4, 6], dtype=np.int64), texts=("a", "b"))
    arena = Arena.create(ArenaLayout(max_calls=len(sids), in_slots=8, out_slots=256, wire_slots=256), directory=str(tmp_path))
    try:
        for s, sid in enumerate(sids):
            arena.claim_slot(s, sid, CALL_SID, wire_templates(sid))
        pacer = P.PacerCore(arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0, clips=line_clips)
        ctrl = arena.ctrl
        out: list[list[bytes]] = [[] for _ in sids]
        now = [0]

        def tick(n=1):
            for _ in range(n):
                pacer.tick(now[0] * MS)
                for s in range(len(sids)):
                    out[s] += R.wire_drain(ctrl, arena.wire_len, arena.wire_data, s, 1000)
                now[0] += 20

        def response(tag_base, first, n, end=None):
            for s in range(len(sids)):
                tag = tag_base + s * 123_456_789
                R.tag_open(ctrl, s, tag, False)
                for i in range(n):
                    R.outbound_push(ctrl, arena.out_meta, arena.out_payload, s, tag, first * s + i, payload(tag, i))
                if end is not None:
                    R.outbound_push_end(ctrl, arena.out_meta, s, tag, first * s + end)

        response(7, 99_990, 12, end=12)
        tick(15)
        response(8, 0, 6)
        tick(2)
        for s in range(len(sids)):
            R.tag_cancel(ctrl, s, 8 + s * 123_456_789, now[0] * MS)
        pacer.cancels(now[0] * MS)
        for s in range(len(sids)):
            out[s] += R.wire_drain(ctrl, arena.wire_len, arena.wire_data, s, 1000)
        tick(3)
        response(9, 0, 20)
        tick(3)
        for s in range(len(sids)):
            R.tag_pause(ctrl, s, 9 + s * 123_456_789, now[0] * MS)
        tick(10)
        for s in range(len(sids)):
            ctrl[s, C.FALLBACK_CLIP] = s % 2
            ctrl[s, C.FALLBACK_SEQ] += 1
        tick(12)
        digest = hashlib.sha256()
        entries = [entry for s in range(len(sids)) for entry in out[s]]
        for entry in entries:
            digest.update(len(entry).to_bytes(4, "little") + entry)
        stats = pacer.statistics()
        assert (stats["marks"], stats["clears"], stats["fallback_frames"]) == (24, 8, 20)  # every kind is in it
        assert (len(entries), digest.hexdigest()) == (GOLDEN_ENTRIES, GOLDEN_SHA256)
    finally:
        arena.close()
        arena.unlink()


def test_the_pacer_sees_a_live_call_only_while_a_slot_is_active(tmp_path):
    """The pacer's idle wait (workers/pacer/main.py) rests on this: no active slot, nothing to tick."""
    arena = Arena.create(ArenaLayout(max_calls=3, in_slots=8, out_slots=8, wire_slots=8), directory=str(tmp_path))
    try:
        pacer = P.PacerCore(arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0, release_frames=1)
        assert not pacer.has_live_call()
        arena.claim_slot(2, SID, CALL_SID, wire_templates(SID))
        assert pacer.has_live_call()
        arena.set_slot_state(2, C.SLOT_ENDING)
        assert not pacer.has_live_call()  # an ending call is not paced (pace_tick skips it too)
    finally:
        arena.close()
        arena.unlink()
