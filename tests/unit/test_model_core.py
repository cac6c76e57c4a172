"""Model-worker core: framing across deltas, dead tags, and the barge-in mechanism
(docs/explanation/protocols.md#c5)."""

import json

from voicecore.call import core
from voicecore.realtime import events as rt

MS = 1_000_000
IDLE = core.Playout(0, 0, 0, 0, 0, 0)


def texts(actions):
    return [json.loads(a.text) for a in actions if isinstance(a, core.SendToModel)]


def frames_of(actions):
    return [a for a in actions if isinstance(a, core.WriteFrames)]


def start_response(c, rid="resp_1", item="item_1", now_ns=0, playout=IDLE):
    actions = c.on_event(rt.ResponseCreated(rid), now_ns, playout)
    (opened,) = [a for a in actions if isinstance(a, core.OpenTag)]
    return opened.tag


def delta(rid, n, item="item_1", fill=1):
    return rt.AudioDelta(response_id=rid, item_id=item, audio=bytes([fill]) * n)


def test_greeting_and_session_update_on_open():
    sent = texts(core.ModelCallCore("CA1").on_open())
    assert [e["type"] for e in sent] == ["session.update", "response.create"]
    assert sent[0]["session"]["audio"]["output"]["format"] == {"type": "audio/pcmu"}
    assert [e["type"] for e in texts(core.ModelCallCore("CA1", greet=False).on_open())] == ["session.update"]


def test_deltas_are_cut_into_frames_with_remainders_carried():
    c = core.ModelCallCore("CA1")
    tag = start_response(c)
    written = []
    for size in (100, 250, 333, 17):  # 700 bytes: 4 whole frames + 60 left
        written += frames_of(c.on_event(delta("resp_1", size), 0, IDLE))
    assert [(w.first_index, len(w.audio)) for w in written] == [(0, 320), (2, 320)]
    assert all(w.tag == tag for w in written)
    end = c.on_event(rt.AudioDone("resp_1", "item_1"), 0, IDLE)
    last, closing = end
    assert (last.first_index, len(last.audio)) == (4, 160)
    assert last.audio == b"\x01" * 60 + b"\xff" * 100  # silence only after the response's last byte
    assert closing == core.EndTag(tag, 5)
    assert c.on_event(rt.ResponseDone("resp_1", "completed", None), 0, IDLE) == []


def test_each_response_gets_a_new_tag():
    c = core.ModelCallCore("CA1", first_tag=7)
    assert start_response(c, "r1") == 7
    assert start_response(c, "r2") == 8


def test_deltas_of_unknown_or_cancelled_responses_are_dropped():
    c = core.ModelCallCore("CA1")
    assert c.on_event(delta("resp_x", 400), 0, IDLE) == []
    tag = start_response(c)
    c.on_event(delta("resp_1", 800), 0, IDLE)
    playing = core.Playout(0, 0, 0, tag, 3, 10 * MS)
    assert any(isinstance(a, core.CancelTag) for a in c.barge_in(5 * MS, playing))
    assert c.on_event(delta("resp_1", 800), 0, IDLE) == []  # a late delta after the cancel
    assert c.stats.deltas_dropped == 2


def test_barge_in_truncates_at_the_played_position_from_marks():
    c = core.ModelCallCore("CA1")
    tag = start_response(c)
    c.on_event(delta("resp_1", 160 * 50), 0, IDLE)
    # mark "tag:10" echoed at t=1000 ms; decision at 1013 ms; 20 frames were sent
    playout = core.Playout(tag, 10, 1000 * MS, tag, 20, 1100 * MS)
    actions = c.barge_in(1013 * MS, playout)
    assert actions[0] == core.CancelTag(tag, 1013 * MS)
    sent = texts(actions)
    assert sent[0] == {"type": "response.cancel", "response_id": "resp_1"}
    assert sent[1] == {"type": "conversation.item.truncate", "item_id": "item_1", "content_index": 0, "audio_end_ms": 213}


def test_played_position_is_capped_at_what_was_sent():
    playout = core.Playout(4, 10, 0, 4, 12, 0)
    assert core.played_ms(4, playout, 10_000 * MS) == 240


def test_played_position_stops_at_a_clear_queued_after_the_newest_echo():
    """A hold's clear cut what the carrier still held: "4:75" echoed at 1000 ms, 81 frames sent, the pacer's
    clear at 1046 ms (nothing released since: the carrier's buffer is empty from then). Heard: 75 frames and
    46 ms, not all 81 as the time since the echo alone would say (seen in a two-lane demo: 72 ms too many)."""
    cleared = core.Playout(4, 75, 1000 * MS, 4, 81, 1046 * MS, cleared_at_ns=1046 * MS)
    assert core.played_ms(4, cleared, 5000 * MS) == 75 * 20 + 46
    # before the clear, the time since the echo counts as played
    assert core.played_ms(4, cleared, 1030 * MS) == 75 * 20 + 30
    # a clear before the newest echo (an earlier cut) does not stop it
    earlier = core.Playout(4, 75, 1000 * MS, 4, 81, 1120 * MS, cleared_at_ns=900 * MS)
    assert core.played_ms(4, earlier, 1200 * MS) == 81 * 20
    # audio released after the clear (a hold resumed: the buffer runs past it) plays on
    resumed = core.Playout(4, 75, 1000 * MS, 4, 90, 1300 * MS, cleared_at_ns=1046 * MS)
    assert core.played_ms(4, resumed, 1100 * MS) == 75 * 20 + 100


def test_played_position_before_the_first_echo_uses_the_buffer_model():
    # 4 frames sent, the carrier's buffer runs dry at 80 ms: at 30 ms, 50 ms are still queued
    playout = core.Playout(0, 0, 0, 4, 4, 80 * MS)
    assert core.played_ms(4, playout, 30 * MS) == 30


def test_barge_in_with_nothing_played_deletes_the_item():
    c = core.ModelCallCore("CA1")
    tag = start_response(c)
    c.on_event(delta("resp_1", 160 * 4), 0, IDLE)
    actions = c.barge_in(1 * MS, core.Playout(0, 0, 0, 0, 0, 0))
    assert texts(actions)[-1] == {"type": "conversation.item.delete", "item_id": "item_1"}
    assert actions[0].tag == tag


def test_no_barge_in_when_the_agent_finished_speaking():
    c = core.ModelCallCore("CA1")
    tag = start_response(c)
    c.on_event(delta("resp_1", 160 * 4), 0, IDLE)
    c.on_event(rt.ResponseDone("resp_1", "completed", None), 0, IDLE)
    all_played = core.Playout(tag, 4, 0, tag, 4, 0)
    assert c.on_event(rt.SpeechStarted(audio_start_ms=100, item_id="item_u"), 5 * MS, all_played) == []
    assert c.stats.bargeins == 0


def test_done_response_still_playing_is_cancelled_without_response_cancel():
    c = core.ModelCallCore("CA1")
    tag = start_response(c)
    c.on_event(delta("resp_1", 160 * 40), 0, IDLE)
    c.on_event(rt.ResponseDone("resp_1", "completed", None), 0, IDLE)
    playing = core.Playout(tag, 10, 0, tag, 14, 300 * MS)
    actions = c.on_event(rt.SpeechStarted(audio_start_ms=100, item_id="item_u"), 10 * MS, playing)
    assert [e["type"] for e in texts(actions)] == ["conversation.item.truncate"]
    assert texts(actions)[0]["audio_end_ms"] == 210


def test_harmless_errors_are_not_fatal():
    c = core.ModelCallCore("CA1")
    c.on_event(rt.RealtimeError("invalid_request_error", "response_cancel_not_active", "no active response", None, None), 0, IDLE)
    c.on_event(rt.RealtimeError("invalid_request_error", None, "Audio content of 100ms is already shorter than 200ms", None, None), 0, IDLE)
    c.on_event(rt.RealtimeError("server_error", "boom", "x", None, None), 0, IDLE)
    assert (c.stats.harmless_errors, c.stats.model_errors) == (2, 1)
