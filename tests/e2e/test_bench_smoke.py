"""`voicecore bench` end to end: 10 simulated calls for a few seconds, the report's figures present and
consistent (and the SLOs held: a tiny healthy run must not break them). Starts the real stack, the model
simulator process and a load process on 127.0.0.1; the pipecat baseline's smoke run needs its venv.
--compare-store runs the stack twice, without and with the SQLite call store, and reads the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from voicecore.supervise import REPO_ROOT
from waiting import wait_until

CALLS = 10
SECONDS = 5.0
# Keys of `voicecore demo --json` (voicecore.callreport.summarize): the bench must use the same names.
SUMMARY_KEYS = {
    "calls", "seconds", "calls_completed", "frames_sent", "lateness_ms", "underruns", "stale_frames", "bargeins",
    "bargein_to_clear_ms", "truncate_error_ms", "mouth_to_ear_ms", "cpu_ms_per_call_second", "cpu_seconds",
    "wall_seconds", "pacer_tick_lateness_ms", "pacer_frames_skipped", "gateway_bargein_decision_to_clear_ms",
    "problems", "ok", "model_to_carrier_ms", "turn_latency_ms", "turn_latency_model_ms", "turn_latency_runtime_ms",
    "frames_played_timed", "playout_headroom_ms", "lateness_ms_unadjusted", "lateness_frames_model_starved",
    "underruns_audio_available", "underruns_model_starved", "clears_idle", "clears_not_bargein", "clears_superseded",
    "starved_grace_ms",
}
BENCH_KEYS = {
    "scenario", "underruns_audio_available", "underruns_model_starved", "lateness_ms_unadjusted", "frames_lost",
    "rss_per_call_mb", "model_event_rates", "cpu_ms_per_call_second_by_process", "load_cpu_fraction", "load_cpu_fraction_by_role",
    "slo_violations", "slo_ok", "lateness_cdf_ms", "machine", "versions", "configuration", "slo", "command",
    "privileges", "transport",
}


def assert_consistent(report: dict) -> None:
    """Figures that must agree with each other in any run (docs/reference/bench-report.md#definitions)."""
    assert report["calls_completed"] <= report["calls"]
    assert report["frames_played_timed"] <= report["frames_sent"]
    assert report["lateness_ms"]["count"] == report["lateness_ms_unadjusted"]["count"] == report["frames_played_timed"]
    assert report["playout_headroom_ms"]["count"] == report["frames_played_timed"]
    assert report["lateness_ms"]["max"] <= report["lateness_ms_unadjusted"]["max"]
    assert report["lateness_frames_model_starved"] <= report["frames_played_timed"]
    assert report["underruns"] == report["underruns_audio_available"] + report["underruns_model_starved"]
    assert report["bargein_to_clear_ms"]["count"] == report["bargeins"] >= 0
    assert report["bargeins_without_clear"] <= report["bargeins"] + report["bargeins_without_clear"]
    assert report["mouth_to_ear_ms"] == report["model_to_carrier_ms"]  # the deprecated alias
    turn, model, runtime = (report[k] for k in ("turn_latency_ms", "turn_latency_model_ms", "turn_latency_runtime_ms"))
    assert turn["count"] == model["count"] == runtime["count"]
    if turn["count"]:
        assert 0 < model["p50"] <= turn["p50"] and runtime["max"] >= 0
    assert report["slo_ok"] == (report["slo_violations"] == [])
    cdf = report["lateness_cdf_ms"]
    assert cdf == sorted(cdf) and (not cdf or cdf[-1] == report["lateness_ms"]["max"])


@pytest.mark.integration
def test_bench_smoke(tmp_path: Path):
    report_path = tmp_path / "bench.json"
    png_path = tmp_path / "bench.png"
    completed = subprocess.run(
        [sys.executable, "-m", "voicecore.cli", "bench", "--calls", str(CALLS), "--seconds", str(SECONDS),
         "--scenario", "steady", "--json", str(report_path), "--png", str(png_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=90,
    )
    assert report_path.exists(), completed.stderr[-3000:]
    report = json.loads(report_path.read_text())
    missing = (SUMMARY_KEYS | BENCH_KEYS) - set(report)
    assert not missing, missing
    assert "voicecore bench" in completed.stdout  # the console table

    assert report["calls"] == CALLS and report["calls_completed"] == CALLS, report["problems"]
    assert report["seconds"] == SECONDS
    assert_consistent(report)
    # a tiny healthy run meets every SLO, with the same figures the capacity search judges
    assert report["slo_ok"], report["slo_violations"]
    assert report["underruns_audio_available"] == 0 and report["lateness_ms"]["p99"] <= report["slo"]["lateness_p99_ms"]
    assert report["turn_latency_ms"]["count"] > 0 and report["model_to_carrier_ms"]["count"] > 0
    assert "bench" in report["command"] and "--calls" in report["command"]
    assert report["privileges"]["mode"] == "on" and report["privileges"]["granted"]["pacer"] != "gone"
    # Frames arrive at 50 per call-second while the agent talks. The window opens after every call is
    # up; in `steady` the agent talks most of the time, with a question and the answer's start-up
    # latency (about 2 s per 7 s) in between and the greeting's first 250 ms before the window.
    full = CALLS * SECONDS * 50
    assert 0.35 * full <= report["frames_sent"] <= 1.02 * full, report["frames_sent"]
    assert report["lateness_ms"]["count"] > 0.9 * report["frames_sent"] - 20  # the frames played, timed
    assert report["cpu_seconds"] > 0 and report["cpu_ms_per_call_second"] > 0
    assert report["stale_frames"] == 0
    assert report["underruns"] == report["underruns_audio_available"] + report["underruns_model_starved"]
    assert report["bargeins"] == 0  # steady: the caller never talks over the agent
    assert report["frames_lost"] >= 0 and report["rss_per_call_mb"] != 0
    assert set(report["cpu_ms_per_call_second_by_process"]) >= {"gateway", "pacer", "model"}
    assert report["model_event_rates"]["sessions"] >= CALLS
    assert report["model_event_rates"]["server_events_per_second"]["audio_deltas"] > 0
    assert report["versions"]["voicecore"] and report["versions"]["python"]
    assert report["machine"]["cores"] >= 1
    assert report["configuration"]["options"]["calls"] == CALLS
    assert report["transport"] == "tcp" and "over tcp sockets" in completed.stdout
    assert "auth_token" not in report["configuration"]["options"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in completed.stderr
    else:
        assert png_path.exists() and png_path.stat().st_size > 10_000


@pytest.mark.integration
def test_bench_over_a_unix_socket(tmp_path: Path):
    """--transport unix: the gateway listens on a Unix socket in the run's directory, the carrier dials it."""
    report_path = tmp_path / "bench.json"
    completed = subprocess.run(
        [sys.executable, "-m", "voicecore.cli", "bench", "--calls", str(CALLS), "--seconds", "3", "--transport", "unix",
         "--json", str(report_path), "--png", str(tmp_path / "bench.png")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=90,
    )
    assert report_path.exists(), completed.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["transport"] == "unix" and report["configuration"]["options"]["transport"] == "unix"
    assert "over unix sockets" in completed.stdout
    assert report["calls_completed"] == CALLS, report["problems"]
    assert 0.35 * CALLS * 3 * 50 <= report["frames_sent"] <= 1.02 * CALLS * 3 * 50
    assert report["stale_frames"] == 0 and report["cpu_seconds"] > 0


STORE_ON_KEYS = {"lateness_ms", "underruns_audio_available", "stale_frames", "cpu_ms_per_call_second",
                 "cpu_ms_per_call_second_by_process", "store_cpu_ms_per_call_second", "console_cpu_ms_per_call_second",
                 "calls_stored", "events_stored"}


@pytest.mark.integration
def test_bench_compare_store_runs_both_stacks_and_reads_the_store(tmp_path: Path):
    """--compare-store: voicecore without records, then with them (recorder, SQLite store, console), taking
    turns; the store holds every call of the run (and the warm-up call) and the live events."""
    report_path = tmp_path / "bench.json"
    calls = 3
    completed = subprocess.run(
        # the calls' starts over 1 s, not the scenario's cycle: what is asserted is the two runs' figures and the
        # store's rows, not the load's shape, and the module runs alone among the real-time tests
        [sys.executable, "-m", "voicecore.cli", "bench", "--calls", str(calls), "--seconds", "4", "--compare-store",
         "--ramp-ms", "1000", "--json", str(report_path), "--png", str(tmp_path / "bench.png")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
    )
    assert report_path.exists(), completed.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["system"] == "voicecore" and report["configuration"]["options"]["compare_store"] is True
    comparison = report["store_comparison"]
    assert {"calls", "seconds", "off", "on", "lateness_p99_delta_ms", "store_cpu_target_ms",
            "store_cpu_within_target"} <= set(comparison)
    assert (comparison["calls"], comparison["seconds"], comparison["store_cpu_target_ms"]) == (calls, 4.0, 0.1)
    off, on = comparison["off"], comparison["on"]
    assert STORE_ON_KEYS <= set(on) and STORE_ON_KEYS - set(off) == {
        "store_cpu_ms_per_call_second", "console_cpu_ms_per_call_second", "calls_stored", "events_stored"}
    assert set(off["lateness_ms"]) == set(on["lateness_ms"]) == {"p50", "p99", "p999", "max"}
    # The top level is the run without the store, as without the flag.
    assert off["lateness_ms"]["p99"] == report["lateness_ms"]["p99"]
    assert off["cpu_ms_per_call_second_by_process"] == report["cpu_ms_per_call_second_by_process"]
    # Only the run with records has a recorder and a console to measure.
    assert not {"recorder", "console"} & set(off["cpu_ms_per_call_second_by_process"])
    assert {"recorder", "console", "gateway", "pacer", "model"} <= set(on["cpu_ms_per_call_second_by_process"])
    assert on["store_cpu_ms_per_call_second"] == on["cpu_ms_per_call_second_by_process"]["recorder"]
    assert on["console_cpu_ms_per_call_second"] == on["cpu_ms_per_call_second_by_process"]["console"]
    assert comparison["lateness_p99_delta_ms"] == pytest.approx(on["lateness_ms"]["p99"] - off["lateness_ms"]["p99"], abs=1e-3)
    assert comparison["store_cpu_within_target"] == (on["store_cpu_ms_per_call_second"] <= 0.1)
    # Every measured call is in the store, and the unmeasured warm-up call before them too.
    assert on["calls_stored"] == calls and on["warm_up_call_stored"] is True, report["store_run"]["problems"]
    assert on["events_stored"] > 0
    assert report["store_run"]["system"] == "voicecore-store" and report["store_run"]["calls_completed"] == calls
    assert off["calls_completed"] == calls
    assert "call store off vs on" in completed.stdout and "store write cost" in completed.stdout


def test_store_comparison_figures():
    from bench.report import format_store_comparison
    from bench.run import store_comparison

    def run(p99: float, by_process: dict, **extra) -> dict:
        return {"calls": 200, "seconds": 10.0, "lateness_ms": {"p50": 0.5, "p99": p99, "p999": 3.0, "max": 4.0, "count": 9},
                "underruns_audio_available": 0, "stale_frames": 0, "calls_completed": 200,
                "cpu_ms_per_call_second": sum(by_process.values()), "cpu_ms_per_call_second_by_process": by_process, **extra}

    off = run(1.25, {"gateway": 10.0, "pacer": 5.0})
    on = run(1.5, {"gateway": 10.0, "pacer": 5.0, "recorder": 0.08, "console": 0.01},
             call_store={"calls_stored": 200, "warm_up_call_stored": True, "events_stored": 5000,
                         "ingest_cpu_s": 0.5, "stored_call_seconds": 2500.0})
    comparison = store_comparison(off, on)
    assert (comparison["calls"], comparison["seconds"]) == (200, 10.0)
    assert comparison["lateness_p99_delta_ms"] == 0.25
    assert comparison["off"]["lateness_ms"] == {"p50": 0.5, "p99": 1.25, "p999": 3.0, "max": 4.0}
    assert "store_cpu_ms_per_call_second" not in comparison["off"]
    assert comparison["on"]["store_cpu_ms_per_call_second"] == 0.08
    assert comparison["on"]["console_cpu_ms_per_call_second"] == 0.01
    assert comparison["on"]["store_ingest_cpu_ms_per_call_second"] == 0.2  # 500 ms over 2500 call-seconds
    assert (comparison["on"]["calls_stored"], comparison["on"]["events_stored"]) == (200, 5000)
    assert comparison["store_cpu_target_ms"] == 0.1 and comparison["store_cpu_within_target"] is True
    assert store_comparison(off, run(1.5, {"recorder": 0.2}))["store_cpu_within_target"] is False
    # No recorder measured: nothing of the store was measured, so it is not within the target.
    assert store_comparison(off, run(1.5, {"gateway": 10.0}))["store_cpu_within_target"] is False
    text = format_store_comparison(comparison)
    assert "call store off vs on: 200 calls" in text and "store write cost 0.080" in text
    assert "+0.25 ms" in text and "200 of 200 calls" in text and "5000 events" in text


def test_bench_refuses_a_unix_socket_without_target():
    completed = subprocess.run([sys.executable, "-m", "voicecore.cli", "bench", "--unix-socket", "/tmp/x.sock"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 2 and "--unix-socket is for --target" in completed.stderr


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""  # gone meanwhile


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


@pytest.mark.integration
def test_sigterm_stops_the_bench_and_everything_it_started(tmp_path: Path):
    import os
    import signal

    bench = subprocess.Popen(
        [sys.executable, "-m", "voicecore.cli", "bench", "--calls", "2", "--seconds", "60", "--scenario", "silence",
         "--json", str(tmp_path / "bench.json")],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    started: set[int] = set()

    def load_and_stack_running_or_bench_gone() -> bool:
        if bench.poll() is not None:
            return True  # exited early: the assert below shows why
        started.update(_descendants(bench.pid))
        cmdlines = [_cmdline(pid) for pid in started]
        return any(b"bench.loadgen" in c for c in cmdlines) and any(b"workers.pacer" in c for c in cmdlines)

    try:
        wait_until(load_and_stack_running_or_bench_gone, 60, "the bench's load process and the stack's pacer",
                   interval_s=0.2)
        assert bench.poll() is None, bench.stderr.read()[-2000:]
        started |= _descendants(bench.pid)
        os.kill(bench.pid, signal.SIGTERM)
        _out, err = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 130, err[-2000:]
    assert "stopped" in err

    def still_alive() -> list[int]:
        alive = []
        for pid in started:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
            except OSError:
                pass  # gone
        return alive

    wait_until(lambda: not still_alive(), 10, "every process the bench started to exit",
               detail=lambda: repr([_cmdline(pid)[:80] for pid in still_alive()]))


PIPECAT_PYTHON = Path(os.environ.get("VOICECORE_PIPECAT_VENV") or Path.home() / ".cache" / "voicecore-bench" / "pipecat-venv") / "bin" / "python"


@pytest.mark.integration
@pytest.mark.skipif(not PIPECAT_PYTHON.exists(), reason="no pipecat venv (bench/baseline_pipecat/setup_venv.sh)")
def test_bench_pipecat_baseline_smoke(tmp_path: Path):
    """Both systems, the same figures from the same definitions; pipecat at its defaults (40 ms messages, no marks)."""
    report_path = tmp_path / "bench.json"
    completed = subprocess.run(
        [sys.executable, "-m", "voicecore.cli", "bench", "--calls", "3", "--seconds", "3", "--baseline", "pipecat",
         "--json", str(report_path), "--png", str(tmp_path / "bench.png")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )
    assert report_path.exists(), completed.stderr[-3000:]
    report = json.loads(report_path.read_text())
    baseline = report["baseline"]
    assert baseline["system"] == "pipecat" and "pipecat baseline" in completed.stdout
    for run in (report, baseline):
        assert run["calls_completed"] == 3, run["problems"]
        assert_consistent(run)
        assert run["frames_played_timed"] > 0 and run["stale_frames"] == 0
    assert baseline["privileges"]["granted"]["pipecat"] == "nice -10"
    assert any("model socket" in item for item in baseline["baseline_leaves_out"])
    assert baseline["baseline_settings"]["audio_out_10ms_chunks"] == 4 and baseline["baseline_settings"]["marks"] is False
    assert report["versions"]["pipecat_venv"]["pipecat-ai"].startswith("1.14")
    assert report["cpu_per_call_ratio"] > 0
