"""The pacer's fallback lines (INV-NEVER-SILENT): a line the model worker asks for, or the pacer's own hold
line when the model worker stops stamping a call that waits on it, plays whole and alone, under the lead,
behind what the carrier holds; a response queued behind it follows it; a restarted pacer finishes it."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from test_pacer_core import MS, SID, Call, frame_payload

from voicecore.fallback import FallbackClips, load_clips
from voicecore.shm import control as C
from voicecore.shm import rings as R
from voicecore.timing import FRAME_BYTES
from workers.pacer import core as P

CLIP_FRAMES = (3, 5, 7)


def clip_payload(clip: int, k: int) -> bytes:
    return bytes([250, clip, k]) + bytes((clip * 13 + k * 7 + j) % 256 for j in range(FRAME_BYTES - 3))


def test_clips() -> FallbackClips:
    frames = np.zeros((len(CLIP_FRAMES), max(CLIP_FRAMES), FRAME_BYTES), dtype=np.uint8)
    for clip, n in enumerate(CLIP_FRAMES):
        for k in range(n):
            frames[clip, k] = np.frombuffer(clip_payload(clip, k), dtype=np.uint8)
    return FallbackClips(frames=frames, frame_counts=np.array(CLIP_FRAMES, dtype=np.int64), texts=("a", "b", "c"))


test_clips.__test__ = False  # a helper, not a test


class FallbackCall(Call):
    def __init__(self, tmp_path, model_silent_ms=500):
        super().__init__(tmp_path)
        self.make_pacer(model_silent_ms)

    def make_pacer(self, model_silent_ms=500):
        self.pacer = P.PacerCore(self.arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0,
                                 model_silent_ms=model_silent_ms, clips=test_clips())

    def ask(self, clip):
        self.ctrl[self.slot, C.FALLBACK_CLIP] = clip
        self.ctrl[self.slot, C.FALLBACK_SEQ] += 1

    def drain(self):
        events = [decode(raw) for raw in R.wire_drain(self.ctrl, self.arena.wire_len, self.arena.wire_data, self.slot, 1000)]
        self.log.append(events)
        return events


def decode(raw: bytes) -> str:
    msg = json.loads(raw)
    assert msg["streamSid"] == SID
    if msg["event"] == "media":
        payload = base64.b64decode(msg["media"]["payload"], validate=True)
        if payload[0] == 250:
            assert payload == clip_payload(payload[1], payload[2])
            return f"line{payload[1]}.{payload[2]}"
        tag, index = payload[0], payload[1] | payload[2] << 8
        assert payload == frame_payload(tag, index)
        return f"{tag}.{index}"
    if msg["event"] == "mark":
        return "mark " + msg["mark"]["name"]
    return msg["event"]


@pytest.fixture
def call(tmp_path):
    c = FallbackCall(tmp_path)
    yield c
    c.close()


def test_an_asked_line_plays_whole_under_the_lead_and_is_counted(call):
    call.ask(2)  # 7 frames
    assert call.tick(0) == ["line2.0", "line2.1", "line2.2", "line2.3"]  # the lead: 80 ms
    assert call.tick(20) == ["line2.4"]
    assert call.tick(40) == ["line2.5"]
    assert call.tick(60) == ["line2.6"]
    assert call.tick(80) == []
    assert call.word(C.FALLBACK_LINES) == 1 and call.word(C.FALLBACK_PLAYING) == 0
    stats = call.pacer.statistics()
    assert stats["fallback_lines"] == 1 and stats["fallback_frames"] == 7 and stats["frames_released"] == 0


def test_a_response_queued_behind_a_line_follows_it_and_never_mixes_in(call):
    call.ask(1)  # 5 frames
    call.tick(0)
    call.open(1)
    call.push(1, 3)
    call.end(1)
    assert call.tick(20) == ["line1.4"]  # the line first, alone
    assert call.tick(40) == ["1.0"]  # then the response, at one frame per tick (the lead is full)
    assert call.tick(60) == ["1.1"]
    assert call.tick(80) == ["1.2", "mark 1:3:end"]


def test_a_line_asked_while_a_response_streams_waits_for_a_tick_without_response_audio(call):
    call.open(1)
    call.push(1, 6)
    assert call.tick(0) == ["1.0", "1.1", "1.2", "1.3"]
    call.ask(0)  # 3 frames
    assert call.tick(20) == ["1.4", "mark 1:5"]  # the response goes on
    assert call.tick(40) == ["1.5"]
    # the model is gone mid-answer: no more frames come; the line follows what the carrier holds
    assert call.tick(60) == ["line0.0"]
    assert call.tick(80) == ["line0.1"]


def test_the_pacer_plays_the_hold_line_itself_when_the_model_worker_stops_stamping_a_waiting_call(call):
    call.ctrl[call.slot, C.HOLD_CLIP] = 1
    call.ctrl[call.slot, C.MODEL_ALIVE_NS] = 1_000 * MS
    call.ctrl[call.slot, C.MODEL_EXPECTING] = 1
    assert call.tick(1_400) == []  # 400 ms without a stamp: not yet
    assert call.tick(1_500) == ["line1.0", "line1.1", "line1.2", "line1.3"]
    for t in range(1_520, 1_700, 20):
        call.tick(t)
    assert call.word(C.FALLBACK_LINES) == 1  # one line per silence, however long it lasts
    call.ctrl[call.slot, C.MODEL_ALIVE_NS] = 2_000 * MS  # a new worker stamps, then falls silent too
    assert call.tick(2_400) == []
    assert call.tick(2_520)[0] == "line1.0"
    assert call.word(C.FALLBACK_LINES) == 2


def test_no_line_of_its_own_for_a_call_that_waits_on_nothing(call):
    call.ctrl[call.slot, C.MODEL_ALIVE_NS] = 1_000 * MS
    call.ctrl[call.slot, C.MODEL_EXPECTING] = 0
    assert call.tick(5_000) == []
    assert call.word(C.FALLBACK_LINES) == 0


def test_a_restarted_pacer_finishes_the_line_where_it_stood(call):
    call.ask(2)
    assert call.tick(0) == ["line2.0", "line2.1", "line2.2", "line2.3"]
    call.make_pacer()  # the standby takes over: its state is the arena's words
    assert call.tick(20) == ["line2.4"]
    assert call.tick(40) == ["line2.5"]
    assert call.word(C.FALLBACK_LINES) == 1


def test_an_unknown_clip_number_is_ignored(call):
    call.ask(99)
    assert call.tick(0) == []
    assert call.word(C.FALLBACK_LINES) == 0


def test_the_shipped_lines_load_and_the_hold_lines_fit_in_a_second():
    clips = load_clips()
    assert clips.frames.shape[0] == len(clips.texts) == 6
    assert all(int(clips.frame_counts[n]) * 20 <= 1000 for n in (0, 3))  # en and sv hold lines
    assert len(clips.frame_payloads()) > 100


def test_the_agents_own_lines_play_from_its_row_after_the_shipped_ones(tmp_path):
    from voicecore.fallback import HOLD, KINDS
    from voicecore.fallback.lines import agent_clip_number, table_with_agent_lines

    hold = agent_clip_number(HOLD)
    lines = {kind: (b"".join(clip_payload(agent_clip_number(i), k) for k in range(4 + i)), "test")
             for i, kind in enumerate(KINDS)}
    c = FallbackCall(tmp_path)
    try:
        c.pacer = P.PacerCore(c.arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0,
                              model_silent_ms=500, clips=table_with_agent_lines(lines))
        c.ask(hold)
        assert c.tick(0) == [f"line{hold}.{k}" for k in range(4)]  # the agent's hold line, whole, under the lead
        assert c.tick(20) == []
        c.ask(agent_clip_number(2))
        played = c.tick(40) + c.tick(60) + c.tick(80) + c.tick(100) + c.tick(120)
        assert played == [f"line{hold + 2}.{k}" for k in range(6)]
    finally:
        c.close()
