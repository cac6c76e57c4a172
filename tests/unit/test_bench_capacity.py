"""The bench's capacity search and SLO checks on synthetic measurements (no processes, no timing)."""

from __future__ import annotations

import pytest

from bench.capacity import CapacitySearch, Slo, slo_violations
from bench.pinning import parse_cpus


def run_search(search: CapacitySearch, true_capacity: int, noisy: dict[int, bool] | None = None) -> list[int]:
    """Drive the search against a machine that holds the SLOs up to ``true_capacity`` calls."""
    tried = []
    while (calls := search.next_calls()) is not None:
        assert calls not in tried, "the search must never repeat a count"
        tried.append(calls)
        passed = (noisy or {}).get(calls, calls <= true_capacity)
        search.record(calls, passed)
        assert len(tried) < 50
    return tried


@pytest.mark.parametrize("true_capacity", [1, 24, 25, 26, 99, 137, 400, 401, 777])
def test_search_finds_capacity_within_resolution(true_capacity):
    search = CapacitySearch(start=25, max_calls=1024, resolution=10)
    run_search(search, true_capacity)
    assert search.capacity <= true_capacity
    assert true_capacity - search.capacity <= 10
    assert not search.capped


def test_search_doubles_then_bisects():
    search = CapacitySearch(start=25, max_calls=1024, resolution=10)
    tried = run_search(search, 300)
    assert tried[:5] == [25, 50, 100, 200, 400]
    assert tried[5] == 300  # midway between the last good (200) and the first bad (400)
    assert search.capacity >= 290


def test_search_capped_at_max_calls():
    search = CapacitySearch(start=25, max_calls=120, resolution=10)
    tried = run_search(search, 10_000)
    assert tried == [25, 50, 100, 120]
    assert search.capacity == 120 and search.capped


def test_search_when_even_the_first_count_fails():
    search = CapacitySearch(start=25, max_calls=1024, resolution=4)
    tried = run_search(search, 0)
    assert tried[0] == 25 and search.capacity == 0 and not search.capped
    assert search.done


def test_search_noise_a_pass_above_a_failure_does_not_raise_capacity():
    # 200 fails, then the bisection tries 150 (fails: noise), 75.. and a later pass at 190 is above
    # no failure; capacity must stay below the smallest failure seen.
    noisy = {150: False}
    search = CapacitySearch(start=25, max_calls=1024, resolution=10)
    run_search(search, 180, noisy)
    assert search.capacity < 150
    assert all(calls < search.bad for calls, ok in search.history if ok and calls == search.capacity)


def test_record_failure_below_good_resets_good():
    search = CapacitySearch(start=10, max_calls=100, resolution=1)
    search.record(10, True)
    search.record(20, True)
    search.record(15, False)  # a failure below a pass: trust the failure
    assert search.bad == 15 and search.good == 10


def test_bad_arguments():
    with pytest.raises(ValueError):
        CapacitySearch(start=0)
    with pytest.raises(ValueError):
        CapacitySearch(start=50, max_calls=10)


def report(**overrides) -> dict:
    base = {
        "calls": 100, "calls_completed": 100,
        "lateness_ms": {"p50": 0.1, "p99": 2.0, "p999": 4.0, "max": 9.0, "count": 1000},
        "underruns": 0, "underruns_audio_available": 0, "underruns_model_starved": 0, "stale_frames": 0,
        "bargein_to_clear_ms": {"p50": 3.0, "p99": 8.0, "p999": 9.0, "max": 9.0, "count": 50},
    }
    base.update(overrides)
    return base


def test_slo_defaults_hold_on_a_good_run():
    assert slo_violations(report(), Slo()) == []


@pytest.mark.parametrize("overrides, needle", [
    ({"lateness_ms": {"p99": 5.01}}, "lateness p99"),
    ({"underruns_audio_available": 1}, "underruns with audio available"),
    ({"stale_frames": 1}, "stale frames"),
    ({"bargein_to_clear_ms": {"p99": 20.5, "count": 3}}, "barge-in"),
    ({"calls_completed": 99}, "did not complete"),
])
def test_each_slo_breaks(overrides, needle):
    broken = slo_violations(report(**overrides), Slo())
    assert len(broken) == 1 and needle in broken[0]


def test_model_starved_underruns_do_not_count():
    assert slo_violations(report(underruns=500, underruns_model_starved=500), Slo()) == []


def test_no_bargeins_no_bargein_slo():
    assert slo_violations(report(bargein_to_clear_ms={"p99": 0.0, "count": 0}), Slo()) == []


def test_slo_thresholds_are_configurable():
    loose = Slo(lateness_p99_ms=10.0, underruns_audio_available=3, stale_frames=1, bargein_to_clear_p99_ms=30.0)
    assert slo_violations(report(lateness_ms={"p99": 9.0}, underruns_audio_available=3, stale_frames=1,
                                 bargein_to_clear_ms={"p99": 29.0, "count": 1}), loose) == []


def test_parse_cpus():
    assert parse_cpus("0") == {0}
    assert parse_cpus("0-2,5") == {0, 1, 2, 5}
    with pytest.raises(ValueError):
        parse_cpus("")
    with pytest.raises(ValueError):
        parse_cpus("3-1")


# ----- bench/analysis.py: the window and the underrun split, on synthetic simulator records ---------

import base64  # noqa: E402
import json  # noqa: E402

from bench import analysis  # noqa: E402
from voicecore.sim.carrier import CallResult  # noqa: E402
from voicecore.sim.carrier_core import CarrierCall  # noqa: E402
from voicecore.sim.model import ResponseRecord, SessionRecord  # noqa: E402

FRAMES = 20


def _response(delta_sent_ms: list[int]) -> ResponseRecord:
    audio = b"".join(bytes([k + 1]) * 160 for k in range(FRAMES))
    return ResponseRecord(index=0, response_id="resp_1", item_id="item_1", clip_name="x", text="", audio=audio,
                          delta_bytes=[160 * FRAMES // 2] * 2, created_ms=0, first_delta_ms=delta_sent_ms[0],
                          delta_sent_ms=delta_sent_ms, status="completed", done_ms=delta_sent_ms[-1])


def _call(arrivals_ms: list[float]) -> CallResult:
    """One response of FRAMES frames arriving at ``arrivals_ms``, a mark after every 5 and at the end."""
    core = CarrierCall("CA1", "MZ1", "AC1", "token", b"", 4, play_phase_ms=0.0)
    core.opening_messages()
    for k, at in enumerate(arrivals_ms):
        payload = base64.b64encode(bytes([k + 1]) * 160).decode()
        core.receive(json.dumps({"event": "media", "streamSid": "MZ1", "media": {"payload": payload}}), at)
        if (k + 1) % 5 == 0 or k + 1 == FRAMES:
            name = f"1:{k + 1}" + (":end" if k + 1 == FRAMES else "")
            core.receive(json.dumps({"event": "mark", "streamSid": "MZ1", "mark": {"name": name}}), at)
    core.tick_play(3000.0)
    return CallResult("CA1", core.metrics, core.statistics(), None, "carrier", [], core)


def _paced(start_ms: float, first: int, count: int) -> list[float]:
    """The pacer's pattern: a burst of 4 frames, then one per 20 ms tick."""
    return [start_ms + max(0, k - 3) * 20.0 for k in range(count)]


def test_stall_gaps_are_model_starved_and_lateness_re_anchors():
    arrivals = _paced(10, 0, 10) + _paced(1010, 10, 10)  # the model sent frames 10.. only at 1000 ms
    result = _call(arrivals)
    record = SessionRecord("s", 0, "ga", "m", 0, call_sid="CA1", responses=[_response([0, 1000])])
    figures = analysis.playout_figures(result.core, [record], analysis.STARVED_GRACE_MS)
    # frames 0-9 play at 20..200, frame 10 at 1020: the caller heard 40 empty ticks, all the model's
    assert len(figures.gaps) == 40 and all(starved for _t, starved, _r in figures.gaps)
    late = [(late, starved) for _at, late, starved, _h in figures.frames if late]
    assert late == [(790.0, True)]  # frame 10 against its tick (220); exempt; the frames after it are on time
    assert max(result.core.metrics.lateness_ms) > 500  # the carrier's own mark-based schedule blames the stall


def test_late_delivery_of_available_audio_counts_against_the_sender():
    arrivals = _paced(10, 0, 10) + _paced(1010, 10, 10)
    result = _call(arrivals)
    record = SessionRecord("s", 0, "ga", "m", 0, call_sid="CA1", responses=[_response([0, 5])])  # all sent at once
    figures = analysis.playout_figures(result.core, [record], analysis.STARVED_GRACE_MS)
    assert len(figures.gaps) == 40 and not any(starved for _t, starved, _r in figures.gaps)
    assert [(late, starved) for _at, late, starved, _h in figures.frames if late] == [(790.0, False)]


def test_window_keeps_only_events_inside():
    result = _call(_paced(10, 0, FRAMES))
    record = SessionRecord("s", 0, "ga", "m", 0, call_sid="CA1", responses=[_response([0, 5])])
    trimmed = analysis.trim_result(result, 100, 250)
    inside = [f for f in result.core.frames if 100 <= f.arrival_ms < 250]
    assert trimmed.statistics.frames_received == len(inside)
    windowed = analysis.playout_figures(trimmed.core, [record]).windowed(100, 250)
    assert len(windowed.frames) == len(inside)
    assert result.statistics.frames_received == FRAMES  # the original is untouched
    assert analysis.trim_record(record, 100, 250).responses == []  # its first delta was before the window
    assert analysis.trim_record(record, 0, 250).responses == record.responses


def test_resolution_in_calls_or_percent():
    from bench.capacity import capacity_summary, parse_resolution

    assert parse_resolution("10") == (10, 0.0) and parse_resolution(10) == (10, 0.0)
    assert parse_resolution("2%") == (1, 0.02)
    for bad in ("0", "0%", "100%", "x", "-5"):
        with pytest.raises(ValueError):
            parse_resolution(bad)
    # 2% of the last count that held: a 60-call system to the call, a 600-call one to 12
    for true_capacity, widest in ((61, 1), (611, 12)):
        search = CapacitySearch(start=25, max_calls=2000, resolution=1, relative=0.02)
        run_search(search, true_capacity)
        assert 0 <= true_capacity - search.capacity <= widest and search.bad - search.good <= max(1, widest)
    assert capacity_summary([56, 62, 58]) == {"capacity_calls": 58, "capacity_calls_runs": [56, 62, 58],
                                              "capacity_calls_range": [56, 62]}
    assert capacity_summary([10, 11])["capacity_calls"] == 10.5


def test_repeated_searches_quote_the_median_search():
    from bench.run import _summary_top

    searches, runs = [], []
    for capacity in (60, 50, 55):
        search = CapacitySearch(start=25, max_calls=200, resolution=10)
        tried = run_search(search, capacity)
        searches.append(search)
        runs.append([{"calls": c, "system": "pipecat", "scenario": "steady", "slo_ok": c <= capacity} for c in tried])
    top = _summary_top(runs, searches)
    capacities = [s.capacity for s in searches]
    assert top["capacity_calls"] == sorted(capacities)[1] and top["capacity_calls_runs"] == capacities
    assert top["capacity_calls_range"] == [min(capacities), max(capacities)]
    assert top["calls"] == top["capacity_calls"] and top["capacity_search_quoted"] == capacities.index(top["capacity_calls"]) + 1
    assert len(top["capacity_searches"]) == 3


def test_load_saturation_marks_a_capacity_as_a_lower_bound():
    from bench.capacity import capacity_load_bound, load_saturated

    assert load_saturated({"load_cpu_fraction": 0.95, "load_cpus": 1})
    assert not load_saturated({"load_cpu_fraction": 0.85, "load_cpus": 1})
    assert not load_saturated({"load_cpu_fraction": 0.95, "load_cpus": 2})  # half of two CPUs
    assert load_saturated({"load_cpu_fraction": 1.9, "load_cpus": 2})
    search = CapacitySearch(start=100, max_calls=800, resolution=50)
    for calls, held in [(100, True), (200, True), (400, True), (800, False), (600, True), (700, False), (650, True)]:
        search.record(calls, held)
    assert search.done and search.capacity == 650 and search.bad == 700
    runs = [{"calls": 800, "load_cpu_fraction": 0.99, "load_cpus": 1},
            {"calls": 700, "load_cpu_fraction": 0.93, "load_cpus": 1},
            {"calls": 650, "load_cpu_fraction": 0.88, "load_cpus": 1}]
    assert capacity_load_bound(runs, search)  # 700 broke with the load core 93% busy
    runs[1]["load_cpu_fraction"] = 0.7
    assert not capacity_load_bound(runs, search)  # 700 broke on the stack's account
    assert not capacity_load_bound(runs, CapacitySearch(start=100, max_calls=100))  # nothing broke
