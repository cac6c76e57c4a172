"""The carrier simulator: the sans-I/O core on a fake clock, and the asyncio shell against real sockets.

Core tests pass times as plain numbers (the clock jumps; nothing sleeps). The integration tests run a
tiny HTTP server (asyncio.start_server) and a websockets server on 127.0.0.1 in the test itself.
"""

import ast
import asyncio
import base64
import json
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore import stats as report_stats
from voicecore.sim import carrier_core
from voicecore.sim.carrier_core import (
    SILENT_FRAME,
    CarrierCall,
    Utterance,
    speech_end_ms,
)
from voicecore.carriers import marks
from voicecore.carriers.marks import parse_mark_name
from voicecore.timing import BARGEIN_CLEAR_WINDOW_MS, FRAME_BYTES

SID = "MZ" + "0" * 32
CALL = "CA" + "1" * 32
ACCOUNT = "AC" + "2" * 32


def make_call(caller_audio=b"", lead_frames=4, **kwargs) -> CarrierCall:
    call = CarrierCall(CALL, SID, ACCOUNT, "tok-123", caller_audio, lead_frames, **kwargs)
    call.opening_messages()
    return call


def media(payload: bytes = b"\x01" * FRAME_BYTES, sid: str = SID) -> str:
    return json.dumps({"event": "media", "streamSid": sid, "media": {"payload": base64.b64encode(payload).decode()}})


def mark(name: str, sid: str = SID) -> str:
    return json.dumps({"event": "mark", "streamSid": sid, "mark": {"name": name}})


def clear(sid: str = SID) -> str:
    return json.dumps({"event": "clear", "streamSid": sid})


def echoed_names(call: CarrierCall) -> list[str]:
    return [json.loads(m)["mark"]["name"] for m in call.messages_to_send()]


def send_response(call: CarrierCall, tag: int, frames: int, now_ms: float, start: int = 0, end: bool = False,
                  mark_every: int = 5) -> None:
    """The pacer's shape: frames of one tag, a mark "tag:n" after each group, ":end" after the last."""
    for n in range(start + 1, start + frames + 1):
        call.receive(media(bytes([tag]) * FRAME_BYTES), now_ms)
        if n % mark_every == 0 or n == start + frames:
            suffix = ":end" if end and n == start + frames else ""
            call.receive(mark(f"{tag}:{n}{suffix}"), now_ms)


# ----- opening and caller side ------------------------------------------------------------------


def test_opening_messages_match_protocols_a2():
    call = CarrierCall(CALL, SID, ACCOUNT, "tok-123", b"", 4)
    connected, start = (json.loads(m) for m in call.opening_messages())
    assert connected == {"event": "connected", "protocol": "Call", "version": "1.0.0"}
    assert start["event"] == "start"
    assert start["sequenceNumber"] == "1"
    assert start["streamSid"] == SID
    body = start["start"]
    assert body["accountSid"] == ACCOUNT and body["streamSid"] == SID and body["callSid"] == CALL
    assert body["tracks"] == ["inbound"]
    assert body["customParameters"] == {"session_token": "tok-123"}
    assert body["mediaFormat"] == {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
    assert type(body["mediaFormat"]["sampleRate"]) is int and type(body["mediaFormat"]["channels"]) is int


def test_media_needs_opening_first():
    call = CarrierCall(CALL, SID, ACCOUNT, "t", b"", 4)
    with pytest.raises(RuntimeError):
        call.tick_send(0)


def test_caller_frames_have_rising_counters_and_audio_then_silence():
    audio = bytes(range(200)) + bytes(200)  # 400 bytes: 2.5 frames
    call = make_call(audio, first_timestamp_ms=155)
    sent = [json.loads(m) for m in call.tick_send(1000) + call.tick_send(1060)]
    assert len(sent) == 4  # origin 1000: frames due at 1000, 1020, 1040, 1060
    assert [m["sequenceNumber"] for m in sent] == ["2", "3", "4", "5"]
    assert [m["media"]["chunk"] for m in sent] == ["1", "2", "3", "4"]
    assert [m["media"]["timestamp"] for m in sent] == ["155", "175", "195", "215"]
    assert all(m["event"] == "media" and m["streamSid"] == SID and m["media"]["track"] == "inbound" for m in sent)
    payloads = [base64.b64decode(m["media"]["payload"]) for m in sent]
    assert all(len(p) == FRAME_BYTES for p in payloads)
    assert b"".join(payloads)[:400] == audio
    assert b"".join(payloads)[400:] == b"\xff" * 240
    assert call.send_origin_ms == 1000 and call.frames_sent == 4


def test_utterances_are_placed_on_the_timeline():
    first = b"\x10" * 240  # 30 ms
    second = b"\x20" * 80
    call = make_call([(30, first), Utterance(at_ms=70, audio=second)])
    timeline = b"".join(base64.b64decode(json.loads(m)["media"]["payload"]) for m in call.tick_send(0) + call.tick_send(100))
    assert len(timeline) == 6 * FRAME_BYTES
    assert timeline[:240] == b"\xff" * 240
    assert timeline[240:480] == first
    assert timeline[480:560] == b"\xff" * 80
    assert timeline[560:640] == second
    assert timeline[640:] == b"\xff" * (len(timeline) - 640)


def test_overlapping_utterances_later_start_wins():
    call = make_call([(0, b"\x10" * 320), (10, b"\x20" * 80)])
    frames = [base64.b64decode(json.loads(m)["media"]["payload"]) for m in call.tick_send(0) + call.tick_send(20)]
    assert frames[0] == b"\x10" * 80 + b"\x20" * 80
    assert frames[1] == b"\x10" * 160


@pytest.mark.parametrize("jitter_ms", [0, 1, 7, 19])
def test_absolute_send_clock_does_not_drift_when_ticks_are_late(jitter_ms):
    call = make_call()
    sent = 0
    for k in range(500):
        sent += len(call.tick_send(k * 20 + (jitter_ms if k else 0)))
    # Frames due at 0, 20, ..., up to the last tick: exactly one per 20 ms, no loss, no drift.
    last_tick = 499 * 20 + jitter_ms
    assert sent == last_tick // 20 + 1


def test_a_stall_is_caught_up_with_the_frames_that_fell_due():
    call = make_call()
    assert len(call.tick_send(0)) == 1
    assert len(call.tick_send(20)) == 1
    burst = call.tick_send(245)  # stalled: frames due at 40..240
    assert len(burst) == 11
    assert [json.loads(m)["media"]["chunk"] for m in burst] == [str(n) for n in range(3, 14)]
    assert call.tick_send(259) == []
    assert len(call.tick_send(260)) == 1


def test_dtmf_and_stop_share_the_sequence_counter():
    call = make_call()
    call.tick_send(0)
    dtmf = json.loads(call.send_dtmf("7"))
    assert dtmf == {"event": "dtmf", "streamSid": SID, "sequenceNumber": "3",
                    "dtmf": {"track": "inbound_track", "digit": "7"}}
    stop = json.loads(call.stop_message())
    assert stop == {"event": "stop", "sequenceNumber": "4", "streamSid": SID,
                    "stop": {"accountSid": ACCOUNT, "callSid": CALL}}
    assert call.tick_send(1000) == []
    with pytest.raises(ValueError):
        call.send_dtmf("x")


# ----- playout, marks, clear --------------------------------------------------------------------


def test_marks_are_echoed_when_playout_passes_them():
    call = make_call()
    for _ in range(3):
        call.receive(media(), 0)
    call.receive(mark("1:3"), 0)
    assert call.messages_to_send() == []
    call.tick_play(20)
    call.tick_play(59)
    assert call.messages_to_send() == []  # the third frame plays 40..60
    call.tick_play(60)
    echoes = [json.loads(m) for m in call.messages_to_send()]
    assert echoes == [{"event": "mark", "sequenceNumber": "2", "streamSid": SID, "mark": {"name": "1:3"}}]
    assert [t for t, _payload, _tag in call.played_log()] == [0, 20, 40]
    assert call.played_frames_of_tag(1) == 3
    assert call.statistics().frames_played == 3


def test_mark_with_nothing_queued_or_playing_echoes_at_once():
    call = make_call()
    call.receive(mark("done"), 5)
    assert echoed_names(call) == ["done"]
    call.receive(media(), 10)  # plays 10..30
    call.receive(mark("1:1"), 15)
    assert echoed_names(call) == []
    call.tick_play(30)
    assert echoed_names(call) == ["1:1"]


def test_playout_is_one_frame_per_20_ms_and_catches_up():
    call = make_call()
    for _ in range(5):
        call.receive(media(), 3)
    call.tick_play(100)  # one late tick runs every playout tick that fell due
    assert [t for t, _p, _tag in call.played_log()] == [3, 23, 43, 63, 83]


def test_playout_on_a_shared_grid_waits_for_the_next_grid_point():
    call = make_call(play_phase_ms=5)
    call.receive(media(), 12)
    call.tick_play(24)
    assert call.played_log() == []
    call.tick_play(25)
    assert [t for t, _p, _tag in call.played_log()] == [25]


def test_clear_drops_the_queue_and_echoes_every_pending_mark_at_once():
    call = make_call()
    send_response(call, 1, 10, now_ms=0, end=True)  # marks "1:5" and "1:10:end"
    call.tick_play(30)  # frames 1 and 2 started at 0 and 20
    call.receive(clear(), 30)
    assert echoed_names(call) == ["1:5", "1:10:end"]
    stats = call.statistics()
    assert stats.frames_played == 2
    assert stats.frames_dropped_by_clear == 8
    assert stats.marks_echoed_on_clear == 2
    assert stats.clears_received == 1
    assert call.metrics.clear_at_ms == [30]
    assert call.played_frames_of_tag(1) == 2
    assert call.played_ms_of_tag(1) == 30  # 20 + the 10 ms of frame 2 before the clear cut it
    call.tick_play(500)
    assert call.messages_to_send() == [] and call.statistics().frames_played == 2
    assert call.statistics().underruns == 0


def test_played_audio_keeps_payloads_per_tag():
    call = make_call()
    send_response(call, 1, 2, now_ms=0, end=True)
    call.tick_play(100)
    send_response(call, 2, 1, now_ms=100, end=True)
    call.tick_play(200)
    assert call.played_audio(1) == b"\x01" * 320
    assert call.played_audio(2) == b"\x02" * 160
    assert [tag for _t, _p, tag in call.played_log()] == [1, 1, 2]


def test_keep_audio_off_drops_payloads():
    call = make_call(keep_audio=False)
    send_response(call, 1, 1, now_ms=0, end=True)
    call.tick_play(40)
    assert call.played_log() == [(0, None, 1)]


def test_a_media_message_may_carry_several_whole_frames():
    # Twilio takes any whole number of 20 ms frames per message (pipecat's default is 40 ms): k frames
    # arriving at once, played on consecutive ticks; a 160-byte message is one frame as before.
    call = make_call(play_phase_ms=0.0)
    call.receive(media(b"\x01" * FRAME_BYTES + b"\x02" * FRAME_BYTES), 5)
    call.receive(media(b"\x03" * (3 * FRAME_BYTES)), 30)
    call.receive(media(b"\x04" * FRAME_BYTES), 90)
    call.tick_play(500)
    assert call.metrics.frames_received == 6 and call.metrics.protocol_errors == 0
    assert [f.arrival_ms for f in call.frames] == [5, 5, 30, 30, 30, 90]
    assert [(at, payload[0]) for at, payload, _tag in call.played_log()] == [
        (20, 1), (40, 2), (60, 3), (80, 3), (100, 3), (120, 4)]


def test_utterance_spans_end_where_the_speech_ends():
    loud = bytes([0x80]) * FRAME_BYTES  # mu-law 0x80: linear -32124, far above the threshold
    quiet = SILENT_FRAME
    clip = quiet + loud * 3 + quiet * 5  # speech from 20 to 80 ms, then 100 ms of silence
    assert speech_end_ms(clip) == 80 and speech_end_ms(quiet * 4) == 80  # no speech: the whole clip
    call = make_call([Utterance(1000, clip), Utterance(3000, loud * 2)])
    assert call.utterance_spans_ms == [(1000, 1080), (3000, 3040)]


# ----- measurements -----------------------------------------------------------------------------


def test_lateness_is_measured_against_lead_then_one_frame_per_20_ms():
    call = make_call(lead_frames=4)
    # Tag 1: the lead (4 frames) at 100, then one per 20 ms; frame index 6 is 15 ms late.
    arrivals = [100, 100, 100, 100, 120, 140, 175, 180]
    for n, at in enumerate(arrivals, start=1):
        call.receive(media(), at)
        if n % 4 == 0:
            call.receive(mark(f"1:{n}"), at)
    assert call.metrics.lateness_ms == [0, 0, 0, 0, 0, 0, 15, 0]
    # Tag 2 starts its own spurt: its first frame defines t_first again.
    for n, at in enumerate([1000, 1000, 1001, 1002, 1030], start=1):
        call.receive(media(), at)
    call.receive(mark("2:5:end"), 1030)
    assert call.metrics.lateness_ms[8:] == [0, 0, 1, 2, 10]
    stats = call.statistics()
    assert stats.late_frames == 4 and stats.lateness_max_ms == 15
    assert stats.lateness_p50_ms == 0
    # Nearest rank, as in every report (voicecore.stats): the 13th of 13 samples, not 14.4 interpolated.
    assert stats.lateness_p99_ms == 15


def test_a_tag_resumed_after_its_end_mark_is_timed_as_a_new_spurt():
    # A hold on a VAD edge ends the tag's audio with "1:4:end"; a false alarm resumes it 1 s later.
    call = make_call(lead_frames=4)
    for at in (100, 100, 100, 100):
        call.receive(media(), at)
    call.receive(mark("1:4:end"), 100)
    call.tick_play(1200)
    assert call.metrics.underruns == 0  # the end mark ended the spurt: the silence is not a gap
    for at in (1200, 1200, 1200, 1200, 1220, 1245):
        call.receive(media(), at)
    call.receive(mark("1:10"), 1245)
    assert call.metrics.lateness_ms == [0, 0, 0, 0, 0, 0, 0, 0, 0, 5]
    assert call.metrics.mark_count_mismatches == 0 and call.metrics.stale_frames == 0


def test_underruns_count_empty_ticks_inside_a_response_only():
    call = make_call()
    send_response(call, 1, 3, now_ms=0)  # mark "1:3", not the end
    call.tick_play(100)  # plays 0, 20, 40; ticks 60 and 80 and 100 are empty inside the response
    assert call.metrics.underruns == 3
    send_response(call, 1, 2, now_ms=105, start=3, end=True)  # "1:5:end"
    call.tick_play(1000)  # plays at 120, 140; the end mark passes at 160; silence after is not an underrun
    stats = call.statistics()
    assert stats.underruns == 3 and stats.underrun_episodes == 1
    assert call.metrics.underrun_at_ms == [60, 80, 100]
    assert stats.frames_played == 5 and stats.marks_echoed == 2


def test_a_clear_ends_the_talk_spurt():
    call = make_call()
    send_response(call, 1, 2, now_ms=0)
    call.tick_play(30)
    call.receive(clear(), 30)
    call.tick_play(400)
    assert call.statistics().underruns == 0


def test_stale_frames_of_a_tag_seen_before_the_clear():
    call = make_call()
    send_response(call, 1, 5, now_ms=0)  # "1:5" before the clear
    call.receive(clear(), 30)
    send_response(call, 1, 2, now_ms=40, start=5)  # "1:7": tag 1 is dead
    send_response(call, 2, 3, now_ms=50, end=True)  # a new response is fine
    stats = call.statistics()
    assert stats.stale_frames == 2
    assert [f.stale for f in call.frames] == [False] * 5 + [True, True] + [False] * 3
    assert len(call.metrics.lateness_ms) == 5 + 3  # stale frames are not timed
    assert stats.mark_count_mismatches == 0
    call.tick_play(200)
    assert call.statistics().stale_frames_played == 2


def test_stale_frames_identified_by_the_pacers_count_when_no_mark_preceded_the_clear():
    call = make_call()
    for _ in range(3):
        call.receive(media(), 0)  # tag unknown yet: no mark before the clear
    call.receive(clear(), 10)
    call.receive(media(), 20)
    call.receive(media(), 20)
    call.receive(mark("1:5"), 20)  # the pacer counts 5 frames of tag 1, only 2 came after the clear
    stats = call.statistics()
    assert stats.stale_frames == 2
    assert stats.frames_without_mark == 3


def test_frames_never_followed_by_a_mark_are_counted_not_guessed():
    call = make_call()
    call.receive(media(), 0)
    call.receive(media(), 0)
    call.receive(mark("not-a-tag"), 0)
    call.receive(media(), 10)
    stats = call.statistics()
    assert stats.frames_without_mark == 3
    assert stats.marks_unparsed == 1
    assert stats.stale_frames == 0
    assert call.metrics.lateness_ms == []


def test_mark_count_mismatch_is_counted():
    call = make_call()
    call.receive(media(), 0)
    call.receive(mark("1:2"), 0)
    assert call.statistics().mark_count_mismatches == 1


def test_bargein_latency_runs_to_the_next_clear():
    call = make_call()
    send_response(call, 1, 20, now_ms=0)
    call.tick_play(100)
    assert call.note_bargein(100) is True
    call.tick_play(300)
    call.receive(clear(), 350)
    assert call.metrics.bargein_latency_ms == [250]
    call.tick_play(1000)
    assert call.note_bargein(1000) is False  # the agent is silent: nothing to interrupt
    stats = call.statistics()
    assert stats.bargeins_noted == 1 and stats.bargeins_ignored == 1 and stats.bargeins_without_clear == 0
    assert stats.bargein_latency_p50_ms == 250


def test_bargein_without_a_clear_is_counted():
    call = make_call()
    send_response(call, 1, 50, now_ms=0)
    call.note_bargein(10)
    call.note_bargein(500)
    stats = call.statistics()
    assert stats.bargeins_noted == 2
    assert stats.bargeins_without_clear == 2  # neither got a clear (no end time: every barge-in is judged)


def test_a_clear_later_than_the_window_leaves_the_bargein_without_clear():
    call = make_call()
    send_response(call, 1, 200, now_ms=0)
    call.tick_play(100)
    assert call.note_bargein(100)
    call.receive(clear(), 100 + BARGEIN_CLEAR_WINDOW_MS + 500)  # 2 s later
    stats = call.statistics()
    assert stats.bargeins_without_clear == 1 and call.bargeins_without_clear_ms() == [100]
    assert call.metrics.bargein_latency_ms == [2000]  # the latency figure still runs to that clear


def test_a_clear_inside_the_window_answers_every_bargein_before_it():
    call = make_call()
    send_response(call, 1, 200, now_ms=0)
    call.note_bargein(100)
    call.note_bargein(300)  # the same caller turn noted twice
    call.receive(clear(), 100 + BARGEIN_CLEAR_WINDOW_MS)
    assert call.statistics().bargeins_without_clear == 0
    assert BARGEIN_CLEAR_WINDOW_MS == 1500


def test_a_bargein_just_before_the_end_is_not_judged():
    call = make_call()
    send_response(call, 1, 200, now_ms=0)
    call.note_bargein(100)  # its window closed before the end: judged
    call.note_bargein(3000)  # the call ends 1 s later, its clear may have been on its way: not judged
    call.stop_message(4000)
    assert call.stopped_at_ms == 4000
    assert call.bargeins_without_clear_ms() == [100] and call.statistics().bargeins_without_clear == 1


def test_overlapping_frames_an_older_tag_after_a_newer_one_began():
    call = make_call()
    send_response(call, 3, 5, now_ms=0)
    send_response(call, 4, 5, now_ms=0)
    send_response(call, 3, 5, now_ms=0, start=5)  # the older response again: two voices
    send_response(call, 4, 2, now_ms=0, start=5, end=True)
    call.tick_play(1000)
    assert [f.tag for f in call.played] == [3] * 5 + [4] * 5 + [3] * 5 + [4] * 2
    assert call.statistics().overlapping_frames == 5
    assert call.overlapping_played() == call.played[10:15]


def test_rising_tags_and_untagged_frames_do_not_overlap():
    call = make_call()
    send_response(call, 1, 5, now_ms=0, end=True)
    send_response(call, 2, 5, now_ms=0)
    call.receive(media(b"\x07" * FRAME_BYTES), 0)  # no mark ever claims it
    call.tick_play(500)
    call.receive(clear(), 500)
    send_response(call, 5, 5, now_ms=600, end=True)
    call.tick_play(1000)
    assert any(f.tag is None for f in call.played)
    assert call.statistics().overlapping_frames == 0


@pytest.mark.parametrize(
    "message, reason",
    [
        (b"\x00\x01", "binary frame"),
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"event": "start", "streamSid": SID}), "unexpected event 'start'"),
        (json.dumps({"event": "media", "streamSid": "MZother", "media": {"payload": ""}}), "media: wrong or missing streamSid"),
        (json.dumps({"event": "clear"}), "clear: wrong or missing streamSid"),
        (json.dumps({"event": "media", "streamSid": SID}), "media: missing payload"),
        (json.dumps({"event": "media", "streamSid": SID, "media": {"payload": "!!!"}}), "media: payload is not base64"),
        (media(b"\x01" * 240), "media: payload is 240 bytes, expected a multiple of 160"),
        (media(b""), "media: payload is 0 bytes, expected a multiple of 160"),
        (json.dumps({"event": "mark", "streamSid": SID, "mark": {}}), "mark: missing name"),
    ],
)
def test_bad_input_is_counted_never_raised(message, reason):
    call = make_call()
    call.receive(message, 0)
    call.tick_play(100)
    assert call.metrics.protocol_errors == 1
    assert call.metrics.error_reasons == [reason]
    assert call.metrics.frames_received == 0 and call.played == []
    assert call.messages_to_send() == []


def test_garbage_after_valid_input_does_not_disturb_it():
    call = make_call()
    call.receive(media(), 0)
    call.receive("\x00garbage", 1)
    call.receive(mark("1:1:end"), 2)
    call.tick_play(20)
    assert echoed_names(call) == ["1:1:end"]
    assert call.metrics.protocol_errors == 1


def test_sequence_numbers_rise_across_media_and_mark_echoes():
    call = make_call()
    numbers = []
    for k in range(20):
        now = k * 20
        if k == 2:
            send_response(call, 1, 5, now_ms=now, end=True)
        call.tick_play(now)
        for message in call.messages_to_send() + call.tick_send(now):
            numbers.append(int(json.loads(message)["sequenceNumber"]))
    assert numbers == list(range(2, 2 + len(numbers)))
    assert len(numbers) == 20 + 1  # 20 media frames and the end mark's echo


@pytest.mark.parametrize(
    "name, parsed",
    [
        ("3:5", (3, 5, False)),
        ("3:10:end", (3, 10, True)),
        ("12:0", (12, 0, False)),
        ("0:5", None),
        ("x:5", None),
        ("3:5:done", None),
        ("3", None),
        ("3:5:end:x", None),
        ("-1:5", None),
        ("３:5", None),
    ],
)
def test_parse_mark_name(name, parsed):
    assert parse_mark_name(name) == parsed


def test_percentile_is_the_reports_nearest_rank_or_none():
    # One definition for the carrier's figures and every report's (voicecore/stats.py); no samples is None.
    assert carrier_core.percentile_or_none is report_stats.percentile_or_none
    percentile = report_stats.percentile_or_none
    assert percentile([], 50) is None
    assert percentile([5], 99) == 5
    assert percentile([1, 2, 3, 4], 50) == 2  # nearest rank: the 2nd of 4 (interpolation said 2.5)
    assert percentile([3, 1, 2], 100) == 3
    assert percentile([3, 1, 2], 0) == 1
    assert percentile(list(range(101)), 99) == 99


def test_the_carrier_reads_mark_names_by_the_one_rule():
    assert carrier_core.parse_mark_name is marks.parse_mark_name
    assert carrier_core.PLAIN_NAME_BYTES is marks.PLAIN_NAME_BYTES


def test_silent_frame_is_ulaw_zero():
    assert SILENT_FRAME == b"\xff" * FRAME_BYTES


def test_carrier_core_is_sans_io():
    # House rule: cores import no asyncio, zmq, websockets, time, os, random, uuid.
    source = Path(__file__).resolve().parents[2] / "voicecore" / "sim" / "carrier_core.py"
    forbidden = {"asyncio", "zmq", "websockets", "time", "os", "random", "uuid", "socket"}
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & forbidden


# ----- the fast path for the gateway's compact messages -----------------------------------------


def test_receive_fast_takes_the_gateways_own_encoding():
    from voicecore.carriers.twilio.stream import OutboundEncoder

    encoder = OutboundEncoder(SID)
    call = make_call()
    assert call.receive_fast(encoder.media(b"\x07" * FRAME_BYTES), 0.0)
    assert call.receive_fast(encoder.mark("3:1"), 0.0)
    assert call.receive_fast(encoder.mark("3:1:end"), 0.0)
    assert not call.receive_fast(encoder.clear(), 0.0)  # rare: the full parser handles it
    assert not call.receive_fast(encoder.mark("a name with \"quotes\""), 0.0)
    assert not call.receive_fast(encoder.media(b"\x07" * 80), 0.0)  # wrong length: receive() reports it
    assert call.metrics.frames_received == 1 and call.metrics.marks_received == 2
    assert call.metrics.protocol_errors == 0
    assert call.frames[0].tag == 3


@pytest.mark.parametrize("name", ["0:5", "00:5:end", "007:3", "3:007:end", "999999999999999999:1", "1:0"])
def test_receive_fast_reads_a_mark_name_as_parse_mark_name_does(name):
    # receive_fast parses a name its pattern admitted without parse_mark_name; it must read it the same way
    # (tag 0 is no pacer mark, leading zeros count for nothing, the longest numbers the pattern allows).
    from voicecore.carriers.twilio.stream import OutboundEncoder

    encoder = OutboundEncoder(SID)
    fast, full = make_call(), make_call()
    for call, data in ((fast, encoder.media(b"\x07" * FRAME_BYTES)), (full, encoder.media(b"\x07" * FRAME_BYTES))):
        assert call.receive_fast(data, 0.0)
    assert fast.receive_fast(encoder.mark(name), 1.0)
    full.receive(encoder.mark(name).decode(), 1.0)
    assert fast.metrics == full.metrics
    assert fast.metrics.marks_unparsed == (parse_mark_name(name) is None)
    parsed = parse_mark_name(name)
    # the frame is the mark's tag's when its count covers it ("1:0" says the pacer sent none of tag 1)
    assert fast.frames[0].tag == full.frames[0].tag == (None if parsed is None or parsed[1] < 1 else parsed[0])


def test_caller_frames_after_the_last_clip_are_silence_and_a_later_utterance_is_still_said():
    # _media_message skips the clip search once every clip has been said; add_utterance reopens it.
    clip = bytes(range(FRAME_BYTES))
    call = make_call([(0, clip)])
    sent = call.tick_send(0.0) + call.tick_send(20.0) + call.tick_send(40.0)
    payloads = [base64.b64decode(json.loads(message)["media"]["payload"]) for message in sent]
    assert payloads == [clip, SILENT_FRAME, SILENT_FRAME]
    call.add_utterance(80, clip * 2)
    sent = call.tick_send(60.0) + call.tick_send(80.0) + call.tick_send(100.0) + call.tick_send(120.0)
    payloads = [base64.b64decode(json.loads(message)["media"]["payload"]) for message in sent]
    assert payloads == [SILENT_FRAME, clip, clip, SILENT_FRAME]
    assert [int(json.loads(message)["sequenceNumber"]) for message in sent] == [5, 6, 7, 8]


def test_a_late_tick_sends_every_frame_it_owes_in_order():
    call = make_call()
    assert len(call.tick_send(0.0)) == 1
    assert call.tick_send(10.0) == []  # none due
    late = call.tick_send(75.0)  # frames 1, 2, 3 fell due (20, 40, 60 ms)
    assert [json.loads(message)["media"]["chunk"] for message in late] == ["2", "3", "4"]
    assert call.frames_sent == 4


def _compact(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


_fast_messages = st.one_of(
    # the gateway's compact media: right, wrong stream, wrong length, broken base64, spaced
    st.builds(lambda byte, n: _compact({"event": "media", "streamSid": SID,
                                        "media": {"payload": base64.b64encode(bytes([byte]) * n).decode()}}),
              st.integers(0, 255), st.sampled_from([FRAME_BYTES, FRAME_BYTES, FRAME_BYTES, 159, 161])),
    st.just(_compact({"event": "media", "streamSid": "MZ" + "9" * 32,
                      "media": {"payload": base64.b64encode(SILENT_FRAME).decode()}})),
    st.just(b'{"event":"media","streamSid":"' + SID.encode() + b'","media":{"payload":"'
            + b"@" * 216 + b'"}}'),
    st.just(media(b"\x05" * FRAME_BYTES).encode()),
    # marks: the pacer's names, other names, escaped characters, a spaced encoding
    st.builds(lambda tag, n, end: _compact({"event": "mark", "streamSid": SID,
                                            "mark": {"name": f"{tag}:{n}{':end' if end else ''}"}}),
              st.integers(1, 4), st.integers(0, 12), st.booleans()),
    st.builds(lambda name: _compact({"event": "mark", "streamSid": SID, "mark": {"name": name}}),
              st.text(alphabet='0123456789:end"\\\n x', max_size=8)),
    st.builds(lambda tag, n: mark(f"{tag}:{n}").encode(), st.integers(1, 4), st.integers(0, 12)),
    st.just(clear().encode()),
    st.just(b"not json"),
)


@given(st.lists(st.tuples(_fast_messages, st.floats(0.0, 45.0)), max_size=40))
def test_receive_fast_has_exactly_the_effect_of_receive(steps):
    """Fed the same messages at the same times, a call that tries receive_fast first and a call that only
    uses receive() end up the same: counters, samples, echoes, frames and playout."""
    fast, full = make_call(), make_call()
    now = 0.0
    for data, gap in steps:
        now += gap
        if not fast.receive_fast(data, now):
            fast.receive(data.decode(), now)
        full.receive(data.decode(), now)
        fast.tick_play(now)
        full.tick_play(now)
        assert fast.messages_to_send() == full.messages_to_send()
    assert fast.metrics == full.metrics
    assert [repr(f) for f in fast.frames] == [repr(f) for f in full.frames]
    assert fast.played_audio() == full.played_audio()


# ----- the asyncio shell against real sockets ---------------------------------------------------

AUTH_TOKEN = "test-auth-token"


class FakeGateway:
    """A minimal HTTP server (voice webhook + status callback) and a websockets server on 127.0.0.1."""

    def __init__(self, ws_behaviour: str = "respond", webhook_status: int = 200) -> None:
        self.ws_behaviour = ws_behaviour
        self.webhook_status = webhook_status
        self.http_requests: list[tuple[str, dict[str, str], bool]] = []  # (path, form, signature valid)
        self.ws_messages: list[dict] = []
        self.ws_signature_valid: bool | None = None
        self.ws_extensions_offered: str | None = None
        self.http_port = 0
        self.ws_port = 0

    async def __aenter__(self):
        from websockets.asyncio.server import serve

        self._http = await asyncio.start_server(self._handle_http, "127.0.0.1", 0)
        self.http_port = self._http.sockets[0].getsockname()[1]
        self._ws = await serve(self._handle_ws, "127.0.0.1", 0, compression=None)
        self.ws_port = next(iter(self._ws.sockets)).getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self._ws.close()
        await self._ws.wait_closed()
        self._http.close()
        await self._http.wait_closed()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def stream_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/twilio"

    async def _handle_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from voicecore.carriers.twilio.signature import signature_is_valid

        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        form = dict(urllib.parse.parse_qsl(body.decode()))
        url = self.base_url + target
        valid = signature_is_valid(AUTH_TOKEN, url, form, headers.get("x-twilio-signature", ""))
        self.http_requests.append((target, form, valid))
        if not valid:
            status, payload = 403, b"bad signature"
        elif target == "/twilio/voice":
            status = self.webhook_status
            payload = (
                '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
                f'<Stream url="{self.stream_url}" name="agent" '
                f'statusCallback="{self.base_url}/twilio/stream-status" statusCallbackMethod="POST">'
                '<Parameter name="session_token" value="tok-xyz"/><Parameter name="tenant" value="acme"/>'
                "</Stream></Connect><Say>Goodbye</Say></Response>"
            ).encode()
        else:
            status, payload = 204, b""
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: text/xml\r\nContent-Length: {len(payload)}\r\n"
                     "Connection: close\r\n\r\n".encode() + payload)
        await writer.drain()
        writer.close()

    async def _handle_ws(self, websocket) -> None:
        from voicecore.carriers.twilio.signature import signature_is_valid

        headers = websocket.request.headers
        self.ws_signature_valid = signature_is_valid(AUTH_TOKEN, self.stream_url, {}, headers.get("X-Twilio-Signature", ""))
        self.ws_extensions_offered = headers.get("Sec-WebSocket-Extensions")
        async for text in websocket:
            message = json.loads(text)
            self.ws_messages.append(message)
            if message["event"] == "start":
                sid = message["streamSid"]
                if self.ws_behaviour == "close":
                    await websocket.close(4000, "goodbye")
                    return
                # One 10-frame response in the pacer's shape, sent faster than real time (A.3).
                for n in range(1, 11):
                    await websocket.send(media(bytes([n]) * FRAME_BYTES, sid))
                    if n % 5 == 0:
                        await websocket.send(mark(f"1:{n}" + (":end" if n == 10 else ""), sid))
            elif message["event"] == "stop":
                return


def run(coro):
    return asyncio.run(coro)


@pytest.mark.integration
def test_place_call_end_to_end_echoes_marks_and_stops():
    from voicecore.sim.carrier import CallScript, place_call

    async def scenario():
        async with FakeGateway() as gateway:
            script = CallScript(duration_ms=1000, utterances=((100, b"\x00" * 800),), dtmf=((200, "5"),))
            result = await place_call(gateway.base_url, AUTH_TOKEN, script)
            return gateway, result

    gateway, result = run(scenario())
    assert result.errors == []
    assert result.closed_by == "carrier" and result.close_code is None
    stats = result.statistics
    assert stats.frames_received == 10 and stats.frames_played == 10
    assert stats.marks_echoed == 2 and stats.protocol_errors == 0
    assert result.core.played_frames_of_tag(1) == 10
    assert result.core.played_audio(1) == b"".join(bytes([n]) * FRAME_BYTES for n in range(1, 11))

    # The webhook and both status callbacks arrived, signed.
    paths = [(path, valid) for path, _form, valid in gateway.http_requests]
    assert paths == [("/twilio/voice", True), ("/twilio/stream-status", True), ("/twilio/stream-status", True)]
    voice_form = gateway.http_requests[0][1]
    assert voice_form["CallSid"] == result.call_sid and voice_form["CallStatus"] == "ringing"
    assert voice_form["Direction"] == "inbound" and voice_form["ApiVersion"] == "2010-04-01"
    assert [form["StreamEvent"] for _p, form, _v in gateway.http_requests[1:]] == ["stream-started", "stream-stopped"]
    assert gateway.http_requests[1][1]["StreamName"] == "agent"

    # What the gateway's WebSocket saw: a signed upgrade with no compression offered, then A.2 messages.
    assert gateway.ws_signature_valid is True
    assert gateway.ws_extensions_offered is None
    events = [m["event"] for m in gateway.ws_messages]
    assert events[:2] == ["connected", "start"] and events[-1] == "stop"
    assert gateway.ws_messages[1]["start"]["customParameters"] == {"session_token": "tok-xyz", "tenant": "acme"}  # every <Parameter>, as Twilio sends them
    assert [m["mark"]["name"] for m in gateway.ws_messages if m["event"] == "mark"] == ["1:5", "1:10:end"]
    assert [m["dtmf"]["digit"] for m in gateway.ws_messages if m["event"] == "dtmf"] == ["5"]
    media_messages = [m for m in gateway.ws_messages if m["event"] == "media"]
    assert len(media_messages) == 1000 // 20
    assert [m["media"]["chunk"] for m in media_messages] == [str(n) for n in range(1, 51)]
    numbers = [int(m["sequenceNumber"]) for m in gateway.ws_messages[1:]]
    assert numbers == list(range(1, len(numbers) + 1))
    caller = b"".join(base64.b64decode(m["media"]["payload"]) for m in media_messages)
    assert caller[800:1600] == b"\x00" * 800 and caller[:800] == b"\xff" * 800


@pytest.mark.integration
def test_place_call_records_the_servers_close_code():
    from voicecore.sim.carrier import CallScript, place_call

    async def scenario():
        async with FakeGateway(ws_behaviour="close") as gateway:
            return await place_call(gateway.base_url, AUTH_TOKEN, CallScript(duration_ms=5000))

    result = run(scenario())
    assert result.errors == []
    assert result.closed_by == "server" and result.close_code == 4000


@pytest.mark.integration
def test_place_call_reports_a_refused_webhook():
    from voicecore.sim.carrier import CallScript, place_call

    async def scenario():
        async with FakeGateway(webhook_status=503) as gateway:
            return await place_call(gateway.base_url, AUTH_TOKEN, CallScript(duration_ms=100))

    result = run(scenario())
    assert result.closed_by == "not_connected" and result.statistics is None
    assert result.errors == ["voice webhook answered HTTP 503"]


@pytest.mark.integration
def test_many_calls_share_one_ticker():
    from voicecore.sim.carrier import CallScript, place_call, shared_ticker

    async def scenario():
        async with FakeGateway() as gateway:
            results = await asyncio.gather(
                *(place_call(gateway.base_url, AUTH_TOKEN, CallScript(duration_ms=600)) for _ in range(20)))
            return results, shared_ticker()

    results, ticker = run(scenario())
    assert all(r.errors == [] and r.statistics.frames_played == 10 for r in results)
    assert len({r.call_sid for r in results}) == 20
    # One timer for all calls, not one per call: 600 ms is 30 frames, each in PHASES sub-ticks.
    assert ticker.ticks < 30 * ticker.PHASES * 2
    assert ticker.live() == 0


class _FakeLoop:
    """Just enough of a loop for SharedTicker: call_later is recorded (when, delay, callback), the test fires it."""

    def __init__(self, clock):
        self.clock = clock
        self.pending = None

    def call_later(self, delay_s, callback):
        self.pending = (self.clock.now + delay_s, delay_s, callback)
        return self.pending


class _FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def _run_ticker(ticker, loop, clock, until_s, *, early_s=0.0):
    """Fire the ticker's timers in order until ``until_s``. A timer of a millisecond or more fires
    ``early_s`` before its time (uvloop's whole-millisecond timers); a shorter one fires on time."""
    for _ in range(100_000):  # a ticker that never reaches its grid point fails here, not hangs
        if loop.pending is None or loop.pending[0] > until_s:
            return
        when, delay_s, callback = loop.pending
        loop.pending = None
        clock.now = max(clock.now, when - (early_s if delay_s >= 0.001 else 0.0))
        callback()
    raise AssertionError("the ticker kept rescheduling without reaching its grid point")


def test_shared_ticker_gives_each_call_its_own_phase_of_the_20ms_grid():
    from voicecore.sim.carrier import SharedTicker

    clock = _FakeClock(100.0)
    loop = _FakeLoop(clock)
    ticker = SharedTicker(loop, clock)
    seen: dict[int, list[float]] = {}
    phases = [ticker.assign_phase() for _ in range(6)]
    assert phases == [0, 1, 2, 3, 0, 1]  # round robin
    for call, phase in enumerate(phases):
        ticker.add(lambda grid_ms, now_ms, call=call: seen.setdefault(call, []).append(grid_ms) or True, phase)
    assert ticker.live() == 6
    _run_ticker(ticker, loop, clock, 100.1)
    origin = ticker.origin_ms
    for call, phase in enumerate(phases):
        grid = seen[call]
        assert all((g - origin) % 20 == phase * ticker.SUB_TICK_MS for g in grid), (call, grid)
        assert all(b - a == 20 for a, b in zip(grid, grid[1:]))  # every 20 ms, on its own phase
        assert len(grid) >= 4
    assert ticker.phase_origin_ms(3) == origin + 15


def test_shared_ticker_waits_out_an_early_timer_and_catches_up_after_a_stall():
    from voicecore.sim.carrier import SharedTicker

    clock = _FakeClock(50.0)
    loop = _FakeLoop(clock)
    ticker = SharedTicker(loop, clock)
    calls: list[tuple[int, float]] = []
    ticker.add(lambda grid_ms, now_ms: calls.append((grid_ms, now_ms)) or True, 2)
    # Timers that fire 0.8 ms early (uvloop's whole-millisecond timers): no callback runs before its grid point.
    _run_ticker(ticker, loop, clock, 50.1, early_s=0.0008)
    assert calls and all(now_ms >= grid_ms for grid_ms, now_ms in calls)
    # A 70 ms stall: the call's turn passed three times; it runs once, at its newest grid point.
    before = len(calls)
    clock.now += 0.070
    _when, _delay_s, callback = loop.pending
    loop.pending = None
    callback()
    assert len(calls) == before + 1
    grid_ms, now_ms = calls[-1]
    assert 0 <= now_ms - grid_ms < 20 and (grid_ms - ticker.origin_ms) % 20 == 10
    assert ticker.late_ticks == 1


def test_a_fallback_lines_frames_before_a_responses_first_mark_are_not_that_responses():
    # The pacer's hold line (no marks) while the model was silent, then the response's 4 frames and its mark
    # "1:4": the mark's count claims the newest 4; the line's 3 stay unattributed, out of tag 1's heard time.
    call = make_call()
    for _ in range(3):
        call.receive(media(), 0)
    for _ in range(4):
        call.receive(media(), 60)
    call.receive(mark("1:4:end"), 60)
    stats = call.statistics()
    assert [frame.tag for frame in call.frames] == [None] * 3 + [1] * 4
    assert stats.frames_without_mark == 3 and stats.mark_count_mismatches == 0 and stats.stale_frames == 0
    call.tick_play(500)
    assert call.played_ms_of_tag(1) == 80
