"""voicecore.callreport's figures on synthetic simulator records (no stack, no sockets, a fake clock):
talkover, the clears a superseded (overlapped) response causes, the overlap keys in summarize (INV-ONE-VOICE),
and lateness and gaps from the carrier's playout clock (the same with or without marks), their
model-starved exemption, stale frames by content, the turn latency and the renamed model_to_carrier_ms."""

from __future__ import annotations

import base64
import json

from bench.analysis import RecordSet
from voicecore.callreport import (
    MODEL_VAD_SILENCE_MS,
    SUPERSEDE_CLEAR_WINDOW_MS,
    canonical_frame,
    frame_owners,
    playout_figures,
    summarize,
    talkover_ms,
    turn_latencies,
    underruns_by_call,
)
from bench.capacity import Slo, slo_violations
from voicecore.sim.carrier import CallResult, CallRunner
from voicecore.sim.carrier_core import CarrierCall
from voicecore.sim.model import ResponseRecord, SessionRecord, SpeechRecord, TruncateRecord
from voicecore.timing import FRAME_BYTES

SID = "MZ1"


def _core() -> CarrierCall:
    core = CarrierCall("CA1", SID, "AC1", "token", b"", 4, play_phase_ms=0.0)
    core.opening_messages()
    return core


def _send(core: CarrierCall, tag: int, frames: int, at_ms: float, byte: int = 1, start: int = 0, end: bool = True) -> None:
    for n in range(start + 1, start + frames + 1):
        payload = base64.b64encode(bytes([byte]) * FRAME_BYTES).decode()
        core.receive(json.dumps({"event": "media", "streamSid": SID, "media": {"payload": payload}}), at_ms)
    name = f"{tag}:{start + frames}" + (":end" if end else "")
    core.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": name}}), at_ms)


def _clear(core: CarrierCall, at_ms: float) -> None:
    core.receive(json.dumps({"event": "clear", "streamSid": SID}), at_ms)


def _response(rid: str, created_ms: int, overlaps: str | None = None, late_deltas: int = 0) -> ResponseRecord:
    return ResponseRecord(index=0, response_id=rid, item_id="item_" + rid, clip_name="x", text="", audio=b"",
                          delta_bytes=[], created_ms=created_ms, overlaps=overlaps, late_deltas=late_deltas,
                          status="completed")


def _record(speech_ms: list[int], responses: list[ResponseRecord]) -> SessionRecord:
    return SessionRecord("s", 0, "ga", "m", 0, call_sid="CA1", responses=responses,
                         speech=[SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=t) for t in speech_ms])


def _report(core: CarrierCall, record: SessionRecord, **kwargs) -> dict:
    result = CallResult("CA1", core.metrics, core.statistics(), None, "carrier", [], core)
    return summarize([result], RecordSet([record]), seconds=10, cpu_seconds=0.0, wall_seconds=10, **kwargs)


def test_talkover_runs_to_the_end_of_the_stretch_of_agent_audio():
    core = _core()
    _send(core, 1, 20, 0)  # frames play at 0, 20, ... 380: one stretch ending at 400
    core.tick_play(2000)
    _send(core, 2, 10, 2000)  # a second stretch: playout idles until the next tick, 2020, and ends at 2220
    core.tick_play(5000)
    assert talkover_ms(core, [150, 399.5, 400, 1000, 2010, 2030]) == [250, 0.5, 190]  # 400, 1000, 2010: silent


def test_talkover_ends_where_a_clear_cut_the_audio():
    core = _core()
    _send(core, 1, 50, 0, end=False)
    core.tick_play(200)
    _clear(core, 205)  # the frame playing since 200 is cut at 205
    core.tick_play(1000)
    assert talkover_ms(core, [110]) == [95]


def test_summarize_reports_overlaps_and_clears_superseding_them():
    core = _core()
    _send(core, 3, 10, 0, end=False)
    core.tick_play(100)
    _send(core, 4, 10, 100)
    _send(core, 3, 5, 100, start=10)  # the older response again after the newer one began: 5 overlapping frames
    core.tick_play(1000)
    _clear(core, 1000)  # supersede: an overlapping response was created at 800, no speech near
    _send(core, 5, 10, 2900, byte=5)  # the agent talks when the caller starts at 2990
    core.tick_play(2995)
    _clear(core, 3000)  # barge-in: speech started at 2990
    _clear(core, 6000)  # neither: the speech at 2990 is too long ago
    core.note_bargein(7000)  # the agent is silent: ignored
    core.stop_message(8000)
    record = _record([2990], [_response("a", 0), _response("b", 800, overlaps="a", late_deltas=2),
                              _response("c", 2900, late_deltas=1)])
    report = _report(core, record, expect_bargeins=False)
    assert report["overlapping_frames"] == 5
    assert report["overlapping_responses"] == 1 and report["late_deltas_sent"] == 3
    assert (report["clears_superseded"], report["bargeins"], report["clears_not_bargein"]) == (1, 1, 1)
    assert report["bargein_to_clear_ms"]["count"] == 1 and report["bargein_to_clear_ms"]["max"] == 10
    assert report["bargeins_without_clear"] == 0
    assert set(report["talkover_ms"]) == {"p50", "p99", "p999", "max", "count"}
    assert not report["ok"] and "two voices" in report["problems"][0]


def test_a_clear_long_after_the_overlap_is_not_a_supersede():
    core = _core()
    _send(core, 1, 10, 0)
    core.tick_play(500)
    _clear(core, 800 + SUPERSEDE_CLEAR_WINDOW_MS + 1)
    report = _report(core, _record([], [_response("a", 0), _response("b", 800, overlaps="a")]), expect_bargeins=False)
    assert report["clears_superseded"] == 0
    assert any("a clear with no speech before it" in p for p in report["problems"])


def test_a_clear_goes_to_its_nearest_cause_an_overlap_after_the_callers_question():
    # The caller asked at 0, the answer began, an overlapping response came at 1300 and the runtime cleared
    # the older one at 1303: a supersede, not a barge-in 1.3 s late.
    core = _core()
    _send(core, 1, 50, 500, end=False)
    core.tick_play(1303)
    _clear(core, 1303)
    core.stop_message(3000)
    record = _record([0], [_response("a", 450), _response("b", 1300, overlaps="a")])
    report = _report(core, record, expect_bargeins=False)
    assert (report["clears_superseded"], report["bargeins"]) == (1, 0)
    assert report["bargein_to_clear_ms"]["count"] == 0


def test_a_bargein_without_clear_fails_the_run_and_talkover_counts_in_the_window():
    core = _core()
    _send(core, 1, 100, 0)
    core.tick_play(100)
    assert core.note_bargein(100)
    core.tick_play(5000)
    core.stop_message(5000)
    record = _record([150, 4000], [_response("a", 0)])
    report = _report(core, record, expect_bargeins=False)
    assert report["bargeins_without_clear"] == 1 and not report["ok"]
    assert any("no clear within 1500 ms" in p for p in report["problems"])
    assert report["talkover_ms"]["count"] == 1 and report["talkover_ms"]["max"] == 1850  # 150 -> 2000
    windowed = _report(core, record, expect_bargeins=False, window_ms=(1000.0, 5000.0))
    assert windowed["talkover_ms"]["count"] == 0


def test_a_clean_call_stays_ok_with_the_new_keys_at_zero():
    core = _core()
    _send(core, 1, 20, 0)
    core.tick_play(100)
    assert core.note_bargein(100)
    _clear(core, 120)
    core.tick_play(2000)
    core.stop_message(2000)
    report = _report(core, _record([110], [_response("a", 0)]))
    assert report["ok"], report["problems"]
    assert (report["overlapping_frames"], report["bargeins_without_clear"], report["overlapping_responses"],
            report["late_deltas_sent"], report["clears_superseded"], report["bargeins"]) == (0, 0, 0, 0, 0, 1)
    assert report["talkover_ms"]["count"] == 1 and report["talkover_ms"]["max"] == 10  # 110 -> cut at 120


def test_a_clear_at_a_turn_start_with_no_agent_audio_is_not_a_barge_in():
    # pipecat sends a clear whenever the caller's turn starts, also when the agent is silent
    core = _core()
    _send(core, 1, 10, 0)
    core.tick_play(2000)
    _clear(core, 2010)  # speech started at 2000; everything played long before
    core.stop_message(3000)
    report = _report(core, _record([2000], [_response("a", 0)]), expect_bargeins=False)
    assert (report["bargeins"], report["clears_idle"], report["bargein_to_clear_ms"]["count"]) == (0, 1, 0)


# ----- the playout clock, the same for every sender (docs/reference/bench-report.md#definitions) -------

def _answer(rid: str, frames: int, base: int, sent_ms: list[float] | None = None, created_ms: float = 0,
            first_delta_ms: float | None = 0) -> ResponseRecord:
    """A response whose frame k is bytes([base + k]) * 160 (never 0x7F or 0xFF); one delta per frame sent
    at ``sent_ms[k]`` (default: all at 0)."""
    audio = b"".join(bytes([base + k]) * FRAME_BYTES for k in range(frames))
    sent = sent_ms if sent_ms is not None else [0.0] * frames
    return ResponseRecord(index=1, response_id=rid, item_id="item_" + rid, clip_name="x", text="", audio=audio,
                          delta_bytes=[FRAME_BYTES] * frames, created_ms=created_ms, first_delta_ms=first_delta_ms,
                          delta_sent_ms=list(sent), status="completed")


def _media(core: CarrierCall, payload: bytes, at_ms: float) -> None:
    core.receive(json.dumps({"event": "media", "streamSid": SID, "media": {"payload": base64.b64encode(payload).decode()}}), at_ms)


def _deliver(core: CarrierCall, response: ResponseRecord, arrivals: list[float], tag: int | None = None) -> None:
    """Frame k of ``response`` at arrivals[k]; with ``tag`` a voicecore-style mark after each frame."""
    for k, at in enumerate(arrivals):
        core.tick_play(at)
        _media(core, response.audio[k * FRAME_BYTES:(k + 1) * FRAME_BYTES], at)
        if tag is not None:
            end = ":end" if k + 1 == len(arrivals) else ""
            core.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": f"{tag}:{k + 1}{end}"}}), at)


# Four frames at once (a lead), then one every 20 ms, frame 4 15 ms after its tick (80): one gap.
LATE_ARRIVALS = [0, 0, 0, 0, 95, 115, 135, 155, 175, 195]


def test_a_late_frame_is_one_gap_and_the_spurt_re_anchors():
    core = _core()
    answer = _answer("a", 10, 1)
    _deliver(core, answer, LATE_ARRIVALS)
    core.tick_play(1000)
    figures = playout_figures(core, [_record([], [answer])])
    assert [at for at, _starved, _r in figures.gaps] == [80]
    assert [late for _at, late, _s, _h in figures.frames] == [0, 0, 0, 0, 15, 0, 0, 0, 0, 0]
    # the frames after the gap are judged from where the caller heard it: 5 ms of headroom each
    assert [ahead for _at, _l, _s, ahead in figures.frames][5:] == [5.0] * 5
    report = _report(core, _record([], [answer]), expect_bargeins=False)
    assert (report["underruns"], report["underruns_audio_available"], report["underruns_model_starved"]) == (1, 1, 0)
    assert report["lateness_ms"]["max"] == 15 and report["lateness_ms_unadjusted"]["max"] == 15
    assert report["frames_played_timed"] == 10 <= report["frames_sent"] and not report["ok"]
    # the problems line says where: which call, when on the carrier's clock, which response
    assert report["problems"][0] == "1 underrun(s) while the model's audio was available (call CA1 at 80 ms, response a)"
    # with the stack's metrics, the pacer's own count says which side of it the gap came from
    for pacer_dry, said in ((0.0, "0 (the audio left the pacer in time)"), (2.0, "2")):
        report = _report(core, _record([], [answer]), expect_bargeins=False,
                         stack_metrics={"workers": {"pacer": {"underruns_total": pacer_dry}}})
        assert report["pacer_underruns"] == int(pacer_dry)
        assert report["problems"][0] == ("1 underrun(s) while the model's audio was available (call CA1 at 80 ms, "
                                         f"response a); the pacer's own dry spells: {said}")
    # and how late the gateway wrote out what the pacer released (its loop's own delay)
    drained = {"p50": 0.3, "p99": 2.0, "p999": 84.5, "max": 84.5, "count": 900}
    report = _report(core, _record([], [answer]), expect_bargeins=False,
                     stack_metrics={"workers": {"pacer": {"underruns_total": 0.0}}, "doorbell_to_drain_ms": drained})
    assert report["gateway_doorbell_to_drain_ms"] == drained
    assert report["problems"][0].endswith("the pacer's own dry spells: 0 (the audio left the pacer in time); "
                                          "the gateway wrote it out at most 84.5 ms after the pacer's doorbell")


def test_underruns_are_counted_per_call_most_first_with_their_span():
    gaps = [("CA1", 80.0, "a"), ("CA2", 100.0, "b"), ("CA2", 120.0, "b"), ("CA2", 5000.0, "c"), ("CA3", 60.0, "d")]
    assert underruns_by_call(gaps) == [("CA2", (3, 100.0, 5000.0)), ("CA1", (1, 80.0, 80.0)), ("CA3", (1, 60.0, 60.0))]
    assert underruns_by_call([]) == []


def test_the_underruns_line_counts_them_per_call_when_the_named_ones_do_not_say_it_all():
    # one gap: the line names it, no count
    core = _core()
    answer = _answer("a", 10, 1)
    _deliver(core, answer, LATE_ARRIVALS)
    core.tick_play(1000)
    report = _report(core, _record([], [answer]), expect_bargeins=False)
    assert report["underruns_audio_available_by_call"] == {"CA1": 1}
    assert "by call" not in report["problems"][0]
    # a hole of 200 ms: more gaps than the line names, so it says how many the call had and over what span
    core = _core()
    answer = _answer("a", 10, 1)
    _deliver(core, answer, [0, 0, 0, 0, 275, 295, 315, 335, 355, 375])
    core.tick_play(1000)
    report = _report(core, _record([], [answer]), expect_bargeins=False)
    assert report["underruns_audio_available"] == 10 and report["underruns_audio_available_by_call"] == {"CA1": 10}
    assert report["problems"][0].endswith("; by call: CA1 10 (80-260 ms))")


def test_marks_change_nothing():
    plain, marked = _core(), _core()
    answer = _answer("a", 10, 1)
    _deliver(plain, answer, LATE_ARRIVALS)
    _deliver(marked, answer, LATE_ARRIVALS, tag=1)
    for core in (plain, marked):
        core.tick_play(1000)
    records = [_record([], [answer])]
    a, b = playout_figures(plain, records), playout_figures(marked, records)
    assert a.frames == b.frames and [g[:2] for g in a.gaps] == [g[:2] for g in b.gaps] and a.stale_at_ms == b.stale_at_ms


def test_a_gap_while_the_carrier_simulator_itself_stalled_is_the_instruments_not_the_senders():
    """The simulator's ticker woke 95 ms after its previous tick (its process had no CPU): the frame due at 80
    was stamped 95 when it woke. That gap and that frame's lateness are the instrument's own, counted apart."""
    stalled, steady = _core(), _core()
    answer = _answer("a", 10, 1)
    for core in (stalled, steady):
        _deliver(core, answer, LATE_ARRIVALS)
        core.tick_play(1000)
    stalled.metrics.harness_stalls.append((20.0, 95.0))  # as CallRunner.on_tick notes it: (last tick + 20, now)
    records = [_record([], [answer])]
    report = _report(stalled, records[0], expect_bargeins=False)
    assert (report["underruns"], report["underruns_audio_available"], report["underruns_harness_stalled"]) == (1, 0, 1)
    assert report["harness_stalls"] == 1 and report["harness_stall_ms"]["max"] == 75
    assert report["lateness_ms"]["max"] == 0 and report["lateness_ms_unadjusted"]["max"] == 15
    assert report["problems"] == [] and report["ok"]
    # Without the stall noted the same gap is the sender's (the test above).
    assert _report(steady, records[0], expect_bargeins=False)["underruns_audio_available"] == 1
    # The bench does not pass a level on it: the run measured its own load (load-bound).
    assert any("load generator itself stalled" in line for line in slo_violations(report, Slo()))


def test_a_truncate_whose_clear_the_carrier_simulator_read_in_its_own_stall_is_counted_apart():
    """The stack cut the answer after 3 frames (truncate at 60 ms) with a clear that reached the carrier at 50;
    the simulator's ticker had no CPU from 40 to 120, read the clear when it woke and had played through 120
    meanwhile (6 frames heard): a 60 ms error of the instrument's, kept out of truncate_error_ms. The same
    clear read at 120 with no stall noted is the sender's, and fails the run."""
    def cut_call(stalled: bool) -> dict:
        core = _core()
        answer = _answer("a", 10, 1)
        _deliver(core, answer, [0] * 10, tag=1)
        if stalled:
            core.metrics.harness_stalls.append((40.0, 120.0))  # (last tick + 20, the tick it woke for)
        _clear(core, 120)
        core.tick_play(1000)
        record = _record([45], [answer])
        record.truncates.append(TruncateRecord(item_id="item_a", audio_end_ms=60, at_ms=50, ok=True, item_audio_ms=200))
        return _report(core, record, expect_bargeins=False)

    report = cut_call(stalled=True)
    assert report["truncate_error_ms"]["count"] == 0
    assert report["truncate_error_ms_harness_stalled"]["count"] == 1
    assert report["truncate_error_ms_harness_stalled"]["max"] == 60
    assert report["problems"] == [] and report["ok"]
    steady = cut_call(stalled=False)
    assert steady["truncate_error_ms"]["max"] == 60 and steady["truncate_error_ms_harness_stalled"]["count"] == 0
    # the line names the call and the response, and both sides of the error
    assert steady["problems"] == ["a truncate point was 60.0 ms from what the caller heard (tolerance 20 ms; call CA1, "
                                  "response a: the truncate said 60 ms, the carrier played 120 ms of it)"]
    assert not steady["ok"]


def test_the_carrier_simulator_notes_a_tick_that_came_more_than_two_frames_late():
    """CallRunner.on_tick: ticks 20 ms apart are normal; one 100 ms after the previous is a stall of the
    simulator itself, from the tick it missed to the one it ran."""
    core = _core()
    runner = CallRunner.__new__(CallRunner)  # the tick bookkeeping alone: no loop, no stream
    runner.core, runner.done, runner._last_tick_ms = core, False, None
    for now_ms in (0.0, 20.0, 40.5, 140.0):
        runner._note_tick(now_ms)
    assert core.metrics.harness_stalls == [(60.5, 140.0)]


def test_a_gap_the_model_caused_is_exempt():
    core = _core()
    # the model sent frame 4 only at 90: after its tick (80) less the grace
    answer = _answer("a", 10, 1, sent_ms=[0, 0, 0, 0, 90, 90, 90, 90, 90, 90])
    _deliver(core, answer, LATE_ARRIVALS)
    core.tick_play(1000)
    report = _report(core, _record([], [answer]), expect_bargeins=False)
    assert (report["underruns_audio_available"], report["underruns_model_starved"]) == (0, 1)
    assert report["lateness_ms"]["max"] == 0 and report["lateness_ms_unadjusted"]["max"] == 15
    assert report["lateness_frames_model_starved"] == 1 and report["ok"], report["problems"]


def test_silence_after_the_caller_took_the_floor_is_a_yield_not_a_gap():
    # Turns mode: a VAD edge at 50 ms holds release; the lead plays out (frames 0-3), then silence; a false
    # alarm resumes the same answer at 1000 ms. Neither the held silence nor the resumed frames count.
    core = _core()
    answer = _answer("a", 10, 1)
    _deliver(core, answer, [0, 0, 0, 0, 1000, 1000, 1000, 1000, 1020, 1040])
    core.tick_play(2000)
    yielded = playout_figures(core, [_record([50], [answer])])
    assert yielded.gaps == [] and [late for _at, late, _s, _h in yielded.frames] == [0] * 10
    # the same silence with no caller speech before it is what the caller hears as a gap
    unexplained = playout_figures(core, [_record([], [answer])])
    assert len(unexplained.gaps) == 47 and max(late for _at, late, _s, _h in unexplained.frames) > 900
    # speech that started and ended long before the answer's last frame played does not explain a later silence
    early = _record([], [answer])
    early.speech = [SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=-500, stopped_at_ms=-300)]
    assert len(playout_figures(core, [early]).gaps) == 47
    # but a caller who started long before and was still speaking when it played: the agent gave the floor late
    # (a busy machine's hold), which talkover counts; the silence after is the floor given, not a gap
    for stopped_at_ms in (400, None):
        late_hold = _record([], [answer])
        late_hold.speech = [SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=-500, stopped_at_ms=stopped_at_ms)]
        assert playout_figures(core, [late_hold]).gaps == []


def test_silence_before_a_frame_a_clear_threw_away_is_a_gap():
    core = _core()
    answer = _answer("a", 4, 1)
    _deliver(core, answer, [0, 0, 65])  # frames 0, 1 play at 0, 20; frame 2 was due at 40
    _clear(core, 70)  # a barge-in throws frame 2 away before its tick (80)
    core.tick_play(500)
    figures = playout_figures(core, [_record([], [answer])])
    assert [at for at, _s, _r in figures.gaps] == [40, 60]
    assert len(figures.frames) == 2  # only what the caller heard is timed




def test_late_audio_sent_once_the_model_cut_the_response_was_never_available_to_play():
    """A Gemini turn a text turn interrupted: two frames played; its late audio, sent with the interruption,
    must never play (the runtime drops it): the silence after is the model's wait for its next turn, not
    an underrun with audio available. Audio sent before the cut and held is still available (the gate's)."""
    core = _core()
    answer = _answer("a", 6, 1, sent_ms=[0, 0, 30, 30, 30, 30])  # frames 2-5: the late chunks, sent at the cut
    _deliver(core, answer, [0, 0])  # frames 0, 1 play at 0, 20
    core.tick_play(500)
    answer.cancel_ms = 30
    gaps = playout_figures(core, [_record([], [answer])]).gaps
    assert [(at, starved) for at, starved, _r in gaps] == [(40, True), (60, True), (80, True), (100, True)]
    held = _answer("a", 6, 1)  # every frame sent at 0, before the cut: audio that was there to play
    core = _core()
    _deliver(core, held, [0, 0])
    core.tick_play(500)
    uncut = [(at, starved) for at, starved, _r in playout_figures(core, [_record([], [held])]).gaps]
    held.cancel_ms = 30
    assert [(at, starved) for at, starved, _r in playout_figures(core, [_record([], [held])]).gaps] == uncut
    assert [starved for _at, starved in uncut].count(False) >= 1

def test_stale_frames_by_content_without_marks():
    core = _core()
    first, second = _answer("a", 6, 1), _answer("b", 3, 20)
    _deliver(core, first, [0, 0, 0])
    _clear(core, 10)
    _deliver(core, first, [12])  # "a" had frames before the clear: any of its frames after it is stale
    _media(core, first.audio[3 * FRAME_BYTES:4 * FRAME_BYTES], 13)
    _deliver(core, second, [20, 20, 20])
    core.tick_play(500)
    figures = playout_figures(core, [_record([], [first, second])])
    assert figures.stale_at_ms == [12, 13]
    assert [late for _at, late, _s, _h in figures.frames] == [0, 0, 0, 0]  # a's first frame and b's three


def test_canonical_frames_match_a_sender_that_re_encodes():
    answer = _answer("a", 2, 1)
    audio = bytearray(answer.audio)
    audio[5] = 0x7F  # negative zero: pipecat's PCM round trip sends 0xFF
    answer.audio = bytes(audio)
    owners = frame_owners([_record([], [answer])])
    received = bytes(audio[:FRAME_BYTES]).replace(b"\x7f", b"\xff")
    assert owners[canonical_frame(received)][1] == 0
    # the short last frame is padded with mu-law silence, as the model worker pads it
    short = _answer("b", 1, 40)
    short.audio = short.audio[:100]
    assert frame_owners([_record([], [short])])[canonical_frame(short.audio + b"\xff" * 60)][1] == 0


def test_turn_latency_runs_from_the_end_of_the_speech_to_the_first_agent_frame():
    loud = bytes([0x80]) * FRAME_BYTES
    clip = loud * 10 + b"\xff" * (5 * FRAME_BYTES)  # 200 ms of speech, 100 ms of silence
    core = CarrierCall("CA1", SID, "AC1", "token", [(1000, clip)], 4, play_phase_ms=0.0)
    core.opening_messages()
    core.tick_send(0.0)  # the first caller frame: the utterance starts 1000 ms later, speech ends at 1200
    answer = _answer("a", 5, 1, created_ms=1750, first_delta_ms=1900, sent_ms=[1900] * 5)
    record = SessionRecord("s", 0, "ga", "m", 0, call_sid="CA1", responses=[answer],
                           speech=[SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=1040, stopped_at_ms=1750)])
    _deliver(core, answer, [1910] * 5)
    core.tick_play(3000)
    figures = playout_figures(core, [record])
    # the model's share: its VAD's 500 ms of silence plus speech_stopped (1750) -> first delta (1900)
    assert turn_latencies(core, figures, [record]) == [(1200, 710, MODEL_VAD_SILENCE_MS + 150)]
    result = CallResult("CA1", core.metrics, core.statistics(), None, "carrier", [], core)
    report = summarize([result], RecordSet([record]), seconds=3, cpu_seconds=0.0, wall_seconds=3, expect_bargeins=False)
    assert report["turn_latency_ms"]["max"] == 710 and report["turn_latency_model_ms"]["max"] == 650
    assert report["turn_latency_runtime_ms"]["max"] == 60
    assert report["model_to_carrier_ms"] == report["mouth_to_ear_ms"] and report["model_to_carrier_ms"]["max"] == 10


def test_every_reason_for_a_failed_run_has_its_problem_line():
    # A stale frame: audio of a cancelled response after the clear that cut it.
    core = _core()
    _send(core, 1, 20, 0, end=False)
    core.tick_play(100)
    assert core.note_bargein(100)
    _clear(core, 120)
    _send(core, 1, 5, 130, start=20)
    core.tick_play(2000)
    core.stop_message(2000)
    report = _report(core, _record([110], [_response("a", 0)]))
    assert report["stale_frames"] == 5 and not report["ok"]
    assert report["problems"] == ["5 stale frame(s): audio of a cancelled response reached the caller"]
    empty = summarize([], RecordSet([]), seconds=10, cpu_seconds=0.0, wall_seconds=10)
    assert not empty["ok"] and empty["problems"] == ["no calls were placed"]


def test_a_call_that_did_not_end_normally_is_named_first():
    core = _core()
    _send(core, 1, 20, 0)
    core.tick_play(2000)
    result = CallResult("CA1", core.metrics, core.statistics(), None, "server", ["closed 1011"], core)
    report = summarize([result], RecordSet([_record([], [_response("a", 0)])]), seconds=10, cpu_seconds=0.0,
                       wall_seconds=10, expect_bargeins=False)
    assert not report["ok"]
    assert report["problems"][0] == "1 of 1 call(s) did not end normally"
    assert any("ended by server" in p for p in report["problems"])


def test_a_held_response_resumed_after_its_holds_clear_is_not_stale_unless_it_was_cut():
    # turns mode: a hold ends the tag's audio with its end mark, the pacer clears a carrier still playing it,
    # then a backchannel resumes the same tag: its later frames are the answer going on, not a dead tag's
    def played(answer: ResponseRecord) -> CarrierCall:
        core = _core()
        for k in range(50):
            at = 0.0 if k < 20 else 900 + 20.0 * (k - 20)  # 20 frames at once (a carrier far behind), then paced
            core.tick_play(at)
            _media(core, answer.audio[k * FRAME_BYTES:(k + 1) * FRAME_BYTES], at)
            if k == 19:  # the hold: the tag's end mark, then the hold's clear while 10 frames are still queued
                core.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": "1:20:end"}}), 0)
                core.tick_play(200)
                _clear(core, 200)
        core.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": "1:50:end"}}), 1500)
        core.tick_play(3000)
        core.stop_message(3000)
        return core

    answer = _answer("a", 50, 1)
    core = played(answer)
    assert core.metrics.frames_resumed_after_clear == 30 and core.metrics.stale_frames == 0
    report = _report(core, _record([110], [answer]), expect_bargeins=False)
    assert report["stale_frames"] == 0, report["problems"]
    # what the hold's clear threw away of the live answer is counted: the caller never heard it
    dropped = sum(1 for f in core.frames if f.dropped)
    assert dropped > 0 and report["frames_lost_to_hold_clears"] == dropped
    # the same frames of a response the runtime had cut (its cancel reached the model) are stale
    cut = _answer("a", 50, 1)
    cut.cancel_ms = 800
    assert _report(played(cut), _record([110], [cut]), expect_bargeins=False)["stale_frames"] == 30


def test_a_barge_in_without_a_clear_names_whether_the_agent_was_audible_and_when_its_audio_came():
    silent = _core()
    silent.tick_send(0.0)  # the call's first media frame: times below count from it
    _send(silent, 1, 50, 1000)  # the greeting arrives at 1 s and has played out by 2 s
    silent.tick_play(2500)
    silent.note_bargein(3000)  # the caller barges in before the answer started: nothing to interrupt
    _send(silent, 2, 10, 4000)
    silent.stop_message(6000)
    problems = _report(silent, _record([], []))["problems"]
    assert ("call CA1: the barge-in produced no clear (1 barge-in(s) found the agent silent, so none interrupted "
            "it; agent audio arrived 1.0-1.0 s, 4.0-4.0 s)") in problems

    audible = _core()
    audible.tick_send(0.0)
    _send(audible, 1, 100, 1000)
    audible.tick_play(1500)
    audible.note_bargein(1600)  # 2 s of greeting queued at the carrier: it is heard
    audible.stop_message(6000)
    problems = _report(audible, _record([], []))["problems"]
    assert ("call CA1: the barge-in produced no clear (barge-in(s) at 1.6 s with the agent audible; agent audio "
            "arrived 1.0-1.0 s)") in problems
