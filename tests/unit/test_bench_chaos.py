"""`voicecore bench --scenario chaos` (bench/chaos.py): the per-fault figures on synthetic calls (gap runs,
window edges, fallback-line frames that are neither gaps nor stale, a dropped call's cut spurt, sessions
reopened, a new call taken after a gateway kill). The bounded end-to-end run (4 calls, a pacer kill and a
model-worker kill) is tests/e2e/test_bench_scenarios.py's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.chaos import (DEFAULT_FAULTS, FAULTS, OBSERVE_MS, QUIET_MS, CallTimeline, calls_taken_after_ms,
                         call_timeline, check_options, counter_delta, fault_times_ms, longest_gap_ms, parse_faults,
                         run_length_ms, sessions_reopened, window_figures)
from bench.run import BenchOptions
from voicecore.sim.carrier import CallResult
from voicecore.sim.carrier_core import ReceivedFrame
from voicecore.sim.model import ResponseRecord, SessionRecord
from voicecore.timing import FRAME_BYTES, FRAME_MS

# ----- synthetic calls ------------------------------------------------------------------------------


def response(frames: int, sent_ms: int = 0) -> ResponseRecord:
    """A response whose frame k is 160 bytes of value k + 1 (distinct content), all sent at ``sent_ms``."""
    audio = b"".join(bytes([k + 1]) * FRAME_BYTES for k in range(frames))
    return ResponseRecord(index=0, response_id="resp-1", item_id="item-1", clip_name="c", text="", audio=audio,
                          delta_bytes=[len(audio)], created_ms=0, first_delta_ms=sent_ms, delta_sent_ms=[sent_ms],
                          sent_bytes=len(audio), status="completed")


FALLBACK = bytes([200]) * FRAME_BYTES  # a fallback line's frame: no response has it


def carrier_call(plays: list[tuple[bytes, float]], stale_payloads: tuple[bytes, ...] = ()):
    """A carrier core that received and played these payloads at these play times (arrived 100 ms before)."""
    frames = []
    for index, (payload, play_ms) in enumerate(plays):
        frame = ReceivedFrame(index, play_ms - 100.0, payload, 0)
        frame.played_at_ms, frame.played_ms = play_ms, float(FRAME_MS)
        frame.stale = payload in stale_payloads
        frames.append(frame)
    return SimpleNamespace(frames=frames, played=list(frames), metrics=SimpleNamespace(clear_at_ms=[]),
                           stopped_at_ms=None, send_origin_ms=0.0, utterance_spans_ms=[])


def result_of(core, closed_by: str = "carrier") -> CallResult:
    return CallResult("CA1", None, None, None, closed_by, [], core)


def record_of(resp: ResponseRecord, connected_ms: int = 0, closed_ms: int | None = None) -> SessionRecord:
    return SessionRecord(session_id="s", session_index=0, naming="ga", model="m", connected_ms=connected_ms,
                         call_sid="CA1", closed_ms=closed_ms, responses=[resp])


def frame(resp: ResponseRecord, k: int) -> bytes:
    return resp.frames()[k]


META = {"started_ms": 0.0, "ended_ms": 10_000.0}


# ----- the figures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ticks, expected", [
    ([], 0.0),
    ([100.0], 20.0),
    ([100.0, 120.0, 140.0], 60.0),
    ([100.0, 120.0, 200.0, 220.0, 240.0, 260.0], 80.0),  # two runs: the longer one
    ([260.0, 100.0, 240.0, 120.0, 220.0, 200.0], 80.0),  # in any order
    ([100.0, 140.0, 180.0], 20.0),  # a tick apart each: three gaps of one tick, not one of three
])
def test_longest_gap_is_the_longest_run_of_consecutive_ticks(ticks, expected):
    assert longest_gap_ms(ticks) == expected


def test_a_gap_inside_a_spurt_is_counted():
    resp = response(6)
    core = carrier_call([(frame(resp, 0), 1000.0), (frame(resp, 1), 1020.0),  # then 1040, 1060 silent
                         (frame(resp, 2), 1080.0), (frame(resp, 3), 1100.0), (frame(resp, 4), 1120.0),
                         (frame(resp, 5), 1140.0)])
    timeline = call_timeline(result_of(core), META, [record_of(resp)], frozenset({FALLBACK}))
    assert timeline.gap_ticks_ms == [1040.0, 1060.0]
    assert window_figures([timeline], 0, 5000)["max_gap_ms"] == 40.0


def test_fallback_frames_are_audio_heard_not_gaps_and_not_stale():
    resp = response(6)
    # the same silence filled by a fallback line, whose frames the carrier's mark rule calls stale
    plays = [(frame(resp, 0), 1000.0), (frame(resp, 1), 1020.0), (FALLBACK, 1040.0), (FALLBACK, 1060.0),
             (frame(resp, 2), 1080.0), (frame(resp, 3), 1100.0), (frame(resp, 4), 1120.0), (frame(resp, 5), 1140.0)]
    heard = call_timeline(result_of(carrier_call(plays, stale_payloads=(FALLBACK,))), META, [record_of(resp)],
                          frozenset({FALLBACK}))
    figures = window_figures([heard], 0, 5000)
    assert heard.gap_ticks_ms == [] and figures["max_gap_ms"] == 0.0
    assert figures["stale_frames"] == 0 and figures["fallback_frames"] == 2 and figures["unknown_frames"] == 0
    # not known as a fallback line, the same frames are unknown audio, and stale by the carrier's rule
    unknown = call_timeline(result_of(carrier_call(plays, stale_payloads=(FALLBACK,))), META, [record_of(resp)],
                            frozenset())
    figures = window_figures([unknown], 0, 5000)
    assert figures["stale_frames"] == 2 and figures["unknown_frames"] == 2 and figures["fallback_frames"] == 0


def test_a_stale_model_frame_is_still_stale_next_to_a_fallback_frame():
    resp = response(4)
    plays = [(frame(resp, 0), 1000.0), (FALLBACK, 1020.0), (frame(resp, 1), 1040.0)]
    timeline = call_timeline(result_of(carrier_call(plays, stale_payloads=(FALLBACK, frame(resp, 1)))), META,
                             [record_of(resp)], frozenset({FALLBACK}))
    assert len(timeline.stale_ms) == 1 and timeline.fallback_ms == [920.0]


def test_a_dropped_call_has_no_gap_after_its_stream_ended():
    resp = response(10)
    core = carrier_call([(frame(resp, k), 1000.0 + k * FRAME_MS) for k in range(3)])
    kept = call_timeline(result_of(core), META, [record_of(resp)], frozenset())
    assert len(kept.gap_ticks_ms) == 7  # the answer stopped mid-sentence: its 7 frames left are heard as a gap
    dropped = call_timeline(result_of(core, "connection_lost"), {"started_ms": 0.0, "ended_ms": 1065.0},
                            [record_of(resp)], frozenset())
    assert dropped.dropped and dropped.gap_ticks_ms == [1060.0]  # only the tick before the stream ended


def timeline(**fields) -> CallTimeline:
    base = {"call_sid": "CA", "started_ms": 0.0, "ended_ms": 100_000.0, "dropped": False}
    return CallTimeline(**{**base, **fields})


def test_window_edges():
    # a gap run crossing w0 counts its ticks inside; w0 is in the window, w1 is not
    calls = [timeline(gap_ticks_ms=[960.0, 980.0, 1000.0, 1020.0], stale_ms=[999.0, 1000.0, 2000.0],
                      turns=[(999.0, 5000.0), (1000.0, 700.0), (2000.0, 9000.0)]),
             timeline(dropped=True, ended_ms=1000.0), timeline(dropped=True, ended_ms=2000.0),
             timeline(dropped=True, ended_ms=1999.0, fallback_ms=[1500.0, 2500.0])]
    figures = window_figures(calls, 1000.0, 2000.0)
    assert figures["max_gap_ms"] == 40.0 and figures["gap_ticks"] == 2
    assert figures["stale_frames"] == 1
    assert figures["calls_dropped"] == 2
    assert figures["answer_latency_max_ms"] == 700.0  # by the speech end, however late the answer came
    assert figures["fallback_frames"] == 1
    assert window_figures([], 0, 1)["answer_latency_max_ms"] is None


def test_calls_taken_after_a_gateway_kill():
    calls = [timeline(started_ms=0.0, accepted_ms=50.0, dropped=True, ended_ms=1000.0),
             timeline(started_ms=1010.0),  # never reached a stream
             timeline(started_ms=1300.0, accepted_ms=1450.0), timeline(started_ms=1200.0, accepted_ms=1700.0)]
    assert calls_taken_after_ms(calls, 1000.0) == 450.0
    assert calls_taken_after_ms(calls[:2], 1000.0) is None


def test_sessions_reopened():
    at, w1 = 1000.0, 9000.0
    calls = [
        timeline(sessions=[(0.0, None)]),  # never closed
        timeline(sessions=[(0.0, 1010.0), (1300.0, None)]),  # closed by the fault, back 300 ms later
        timeline(sessions=[(0.0, 1005.0), (1100.0, 1200.0), (1800.0, None)]),  # back, lost again, back at 800 ms
        timeline(sessions=[(0.0, 2000.0), (1900.0, None)]),  # the new one opened before the old one closed
        timeline(started_ms=1500.0, sessions=[(1600.0, None)]),  # a call placed after the fault: not judged
        timeline(dropped=True, ended_ms=1020.0, sessions=[(0.0, 1020.0)]),  # dropped in the window: not judged
    ]
    assert sessions_reopened(calls, at, w1) == {
        "calls_with_session_closed": 3, "calls_without_session_at_end": 0, "sessions_reopened_ms": 800.0}
    lost = calls + [timeline(sessions=[(0.0, 1001.0)])]
    assert sessions_reopened(lost, at, w1)["sessions_reopened_ms"] is None
    assert sessions_reopened(lost, at, w1)["calls_without_session_at_end"] == 1
    assert sessions_reopened(calls[:1], at, w1)["sessions_reopened_ms"] == 0.0


def test_counter_delta_of_a_restarted_process():
    assert counter_delta(3, 5) == 2 and counter_delta(7, 2) == 2 and counter_delta(None, 4) == 4
    assert counter_delta(3, None) == 0


def test_fault_names_and_schedule():
    assert [spec.name for spec in parse_faults("pacer,model")] == ["pacer", "model"]
    assert [spec.name for spec in parse_faults("")] == list(DEFAULT_FAULTS)
    assert DEFAULT_FAULTS[-1] == "gateway"  # it drops every call: last, so the others are measured on old calls
    assert FAULTS["refuse_new"].vendor == (("refuse_new", 3000), ("drop_1011", 0))
    with pytest.raises(ValueError, match="unknown chaos fault"):
        parse_faults("pacer,router")
    with pytest.raises(ValueError, match="twice"):
        parse_faults("pacer,pacer")
    assert fault_times_ms(0.0, 3) == [QUIET_MS, 2 * QUIET_MS + OBSERVE_MS, 3 * QUIET_MS + 2 * OBSERVE_MS]
    # every fault at 100 calls fits the budget of about 4 minutes with the ramp and start-up
    assert run_length_ms(len(DEFAULT_FAULTS)) <= 200_000
    assert check_options(BenchOptions(scenario="chaos", chaos_faults="pacer")) == ""
    assert "not with" in check_options(BenchOptions(scenario="chaos", target="http://x"))
    assert "unknown" in check_options(BenchOptions(scenario="chaos", chaos_faults="nope"))


def _stored(sources, turns=1, kinds=("call.started", "turn.started", "call.ended")):
    from bench.chaos import StoredCall

    return StoredCall(list(sources), turns, [(seq, kind, seq * 100, "{}") for seq, kind in enumerate(kinds, start=1)])


def test_store_figures_count_every_call_that_ended_once():
    from bench.chaos import store_figures

    stored = {"CA1": _stored(["CA1.jsonl"]), "CA2": _stored(["CA2.jsonl", "CA2-2.jsonl"]),
              "CA3": _stored(["CA3-1700000000000.call.json"])}
    figures = store_figures(["CA1", "CA2", "CA3", "CA4", "CA5"], stored, dropped=["CA5"])
    assert figures["calls_ended"] == 5 and figures["calls_stored"] == 3
    assert figures["calls_missing"] == 2 and figures["calls_missing_dropped_by_gateway_kill"] == 1
    assert figures["missing_sample"] == ["CA4", "CA5"]
    assert figures["parts_max"] == 2 and figures["calls_spooled"] == 1  # a taken-over call's two parts are one call
    assert figures["calls_stored_both_ways"] == figures["calls_with_an_event_twice"] == 0
    assert figures["calls_without_turns"] == figures["calls_without_events_to_the_end"] == 0


def test_store_figures_name_a_call_stored_twice_and_events_cut_short():
    from bench.chaos import StoredCall, store_figures

    twice = _stored(["CA1.jsonl", "CA1-1700000000000.call.json"])  # as its record and as a spooled summary
    repeated = StoredCall(["CA2.jsonl"], 1, [(1, "call.started", 0, "{}"), (2, "call.started", 0, "{}"), (3, "call.ended", 9, "{}")])
    holed = StoredCall(["CA3.jsonl"], 0, [(1, "call.started", 0, "{}"), (3, "turn.started", 5, "{}")])
    figures = store_figures(["CA1", "CA2", "CA3"], {"CA1": twice, "CA2": repeated, "CA3": holed})
    assert figures["calls_stored_both_ways"] == 1 and figures["calls_with_an_event_twice"] == 1
    assert figures["calls_without_turns"] == 1 and figures["calls_without_events_to_the_end"] == 1
    assert figures["calls_with_event_numbers_missing"] == 1
    assert figures["calls_without_events"] == 0
    eventless = StoredCall(["CA4.jsonl"], 1, [])
    assert store_figures(["CA4"], {"CA4": eventless})["calls_without_events"] == 1


def test_recorder_and_console_kills_are_faults_asked_for_by_name():
    assert FAULTS["recorder"].kill == "recorder" and FAULTS["console"].kill == "console"
    assert "recorder" not in DEFAULT_FAULTS and "console" not in DEFAULT_FAULTS  # the default run has no store
    assert [spec.name for spec in parse_faults("recorder,console,gateway")] == ["recorder", "console", "gateway"]


def test_reattach_figures_count_the_calls_their_silence_and_the_conversations_restored():
    from types import SimpleNamespace

    from bench.chaos import GREETED_AGAIN, NO_HISTORY, NO_SESSION, RESTORED, CallTimeline, conversation_restored, \
        reattach_figures

    def session(connected, items=0, greeting=False):
        responses = [SimpleNamespace(metadata={"vc_prompt": "greeting"})] if greeting else []
        return SimpleNamespace(connected_ms=connected, client_events={"conversation.item.create": items},
                               responses=responses)

    assert conversation_restored([session(0), session(1_050, items=3)], 1_000) == RESTORED
    assert conversation_restored([session(0), session(1_050, items=0)], 1_000) == NO_HISTORY  # the spine keeps none
    assert conversation_restored([session(0), session(1_050, items=3, greeting=True)], 1_000) == GREETED_AGAIN
    assert conversation_restored([session(0)], 1_000) == NO_SESSION
    timelines = [CallTimeline(f"CA{i}", 0, 20_000, False,
                              reattaches=[(1_000, 1_000 + gap, RESTORED if i % 2 == 0 else NO_HISTORY)])
                 for i, gap in enumerate((40, 60, 80, 100))]
    timelines.append(CallTimeline("CAlate", 0, 20_000, False, reattaches=[(30_000, 30_050, RESTORED)]))  # outside
    timelines.append(CallTimeline("CAdropped", 0, 1_000, True))
    figures = reattach_figures(timelines, 900, 9_000)
    assert figures == {"calls_reattached": 4, "reattach_silence_p50_ms": 60.0, "reattach_silence_p95_ms": 100.0,
                       "reattach_silence_max_ms": 100.0, "conversations_restored": 2,
                       "reattached_without_history": 2, "reattached_greeted_again": 0,
                       "reattached_without_model_session": 0}
    assert reattach_figures([], 0, 1)["reattach_silence_p50_ms"] is None


def test_the_postgres_fault_is_asked_for_by_name_and_kills_no_supervised_role():
    spec = FAULTS["postgres"]
    assert "postgres" not in DEFAULT_FAULTS and not spec.kill and not spec.vendor  # the bench's own PostgreSQL
    assert [f.name for f in parse_faults("recorder,postgres")] == ["recorder", "postgres"]


def test_a_postgres_fault_reports_how_long_the_store_was_down():
    from bench.chaos import Injected, fault_report

    injected = Injected(FAULTS["postgres"], 10_000.0, killed_pid=41, pid_source="postmaster.pid", new_pid=42,
                        store_up_ms=16_250.0)
    entry = fault_report(injected, [], [])
    assert entry["store_down_ms"] == entry["recovery_ms"] == 6250.0
    assert (entry["killed_pid"], entry["new_pid"]) == (41, 42) and "sessions_hit" not in entry
    never = fault_report(Injected(FAULTS["postgres"], 10_000.0, killed_pid=41), [], [])
    assert never["store_down_ms"] is None and never["recovery_ms"] is None
