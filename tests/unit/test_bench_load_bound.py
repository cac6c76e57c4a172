"""The bench's load_bound verdict: each load process's CPU, and a broken SLO not called the stack's when a
load process was busier than LOAD_BOUND_CORE of its core (bench/capacity.py, bench/report.py)."""

import json

from bench.capacity import (LOAD_BOUND_CORE, CapacitySearch, Slo, capacity_load_bound, load_bound, load_process_cpu,
                            slo_verdict)
from bench.report import format_table

SIM_PID = 300


def test_each_load_process_is_reported_in_cores_of_the_window():
    cpu = load_process_cpu({101: 4.5, 102: 2.0, SIM_PID: 1.0}, SIM_PID, window_s=10.0,
                           kernel_s_by_pid={101: 2.5, 102: 1.0, SIM_PID: 0.5})
    assert cpu == {"carrier": [0.45, 0.2], "carrier_kernel": [0.25, 0.1], "model_sim": 0.1, "max": 0.45}
    assert json.loads(json.dumps(cpu)) == cpu  # a JSON report's value as it is
    # The model simulator counts for the busiest as well: it is a load-side process on one core too.
    assert load_process_cpu({101: 1.0, SIM_PID: 9.0}, SIM_PID, 10.0)["max"] == 0.9
    # No model simulator (a --target run, the pipecat stand-in) and an empty window.
    assert load_process_cpu({101: 3.0}, None, 10.0) == {"carrier": [0.3], "carrier_kernel": [0.0], "model_sim": None,
                                                         "max": 0.3}
    assert load_process_cpu({101: 3.0}, SIM_PID, 0.0) == {"carrier": [], "carrier_kernel": [], "model_sim": None,
                                                          "max": 0.0}


def test_a_load_process_above_the_limit_makes_the_run_load_bound():
    def run(busiest: float) -> dict:
        return {"load_process_cpu": {"carrier": [busiest], "model_sim": 0.2, "max": busiest}}

    assert LOAD_BOUND_CORE == 0.8
    assert load_bound(run(0.81)) and load_bound(run(1.0))
    assert not load_bound(run(0.8)) and not load_bound(run(0.35))
    assert not load_bound({})  # an older report without the key


def test_a_broken_slo_is_the_stacks_only_with_the_load_side_clear():
    slo = Slo()
    late = {"lateness_ms": {"p99": 9.0}, "calls": 10, "calls_completed": 10, "load_cpu_fraction": 0.5, "load_cpus": 2}
    clear = {**late, "load_process_cpu": {"carrier": [0.3], "model_sim": 0.2, "max": 0.3}}
    busy = {**late, "load_process_cpu": {"carrier": [0.95], "model_sim": 0.2, "max": 0.95}}
    assert slo_verdict(clear, slo) == "broken_by_stack"
    assert slo_verdict(busy, slo) == "load_bound"
    # All load CPUs nearly full (load_saturated) is load-bound as well, whatever each process used.
    assert slo_verdict({**clear, "load_cpu_fraction": 0.95, "load_cpus": 1}, slo) == "load_bound"
    # A run that held is held, however busy its load side was.
    assert slo_verdict({**busy, "lateness_ms": {"p99": 1.0}}, slo) == "held"
    # Only the underruns inside the load generator's own stalls (no CPU for it on a shared machine) broke
    # an SLO: not the stack's either; with the stack's own underruns as well, it is the stack's.
    stalled = {**clear, "lateness_ms": {"p99": 1.0}, "underruns_harness_stalled": 12}
    assert slo_verdict(stalled, slo) == "harness_stalled"
    assert slo_verdict({**stalled, "underruns_audio_available": 3}, slo) == "broken_by_stack"


def test_a_load_bound_first_failure_makes_the_capacity_a_lower_bound():
    search = CapacitySearch(start=100, max_calls=400, resolution=50)
    for calls, held in [(100, True), (200, True), (400, False), (300, False), (250, True)]:
        search.record(calls, held)
    assert search.done and search.bad == 300
    runs = [{"calls": 300, "load_cpu_fraction": 0.6, "load_cpus": 2,
             "load_process_cpu": {"carrier": [0.9], "model_sim": 0.3, "max": 0.9}}]
    assert capacity_load_bound(runs, search)  # one load process at 0.9 of its core, the two CPUs 60% busy
    runs[0]["load_process_cpu"]["max"] = 0.5
    assert not capacity_load_bound(runs, search)


def _run(busiest: float, slo_ok: bool, verdict: str) -> dict:
    summary = {"p50": 1.0, "p99": 2.0, "p999": 3.0, "max": 4.0, "count": 5}
    return {"calls": 500, "lateness_ms": summary, "underruns": 0, "stale_frames": 0, "bargein_to_clear_ms": summary,
            "truncate_error_ms": summary, "model_to_carrier_ms": summary, "turn_latency_ms": summary,
            "cpu_ms_per_call_second": 1.0, "frames_sent": 100, "bargeins": 4, "seconds": 10.0, "talkover_ms": summary,
            "slo_ok": slo_ok, "slo_verdict": verdict, "slo_violations": [] if slo_ok else ["lateness p99 > 5 ms"],
            "load_cpu_fraction": busiest + 0.2, "load_process_cpu": {"carrier": [busiest], "carrier_kernel": [0.1], "model_sim": 0.2,
                                                           "max": busiest},
            "load_bound": busiest > LOAD_BOUND_CORE}


def test_the_console_table_names_a_load_bound_run_and_never_calls_it_broken():
    text = format_table({"scenario": "steady"}, [_run(0.93, False, "load_bound")])
    row = text.splitlines()[3]
    assert row.split()[-1] == "LOAD-BOUND" and "BROKE" not in row
    assert "load processes, cores each: carrier [0.93 (0.10 in the kernel)], model sim 0.20" in text
    assert "LOAD-BOUND: a load process used more than 0.8 of its core" in text
    text = format_table({"scenario": "steady"}, [_run(0.3, False, "broken_by_stack")])
    assert text.splitlines()[3].split()[-1] == "BROKE" and "LOAD-BOUND" not in text
    assert format_table({"scenario": "steady"}, [_run(0.3, True, "held")]).splitlines()[3].split()[-1] == "held"
    assert format_table({"scenario": "steady"}, [_run(0.3, False, "harness_stalled")]).splitlines()[3].split()[-1] == "LOAD-STALLED"
