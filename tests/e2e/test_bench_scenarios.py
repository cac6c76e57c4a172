"""`voicecore bench` run end to end as a user runs it, one run per scenario that has figures of its own: chaos
(a pacer kill and a model-worker kill during 4 calls), hallucination (4 calls gated and ungated) and a short
soak (the real stack under supervisord, a load process churning calls, the model simulator; 40 s, 6 slots).
The figures' arithmetic on synthetic records is in tests/unit/test_bench_{chaos,hallucination,soak}.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scenarios import HALLUCINATION_UNGATED
from voicecore.supervise import REPO_ROOT

SOAK_S = 40
SLOTS = 6
PROCESS_KEYS = {"rss_kb_start", "rss_kb_end", "rss_growth_pct", "fds_start", "fds_end", "fd_growth", "restarts"}


# ----- chaos ------------------------------------------------------------------------------------------

FAULT_KEYS = {"fault", "calls_dropped", "max_gap_ms", "fallback_lines", "stale_frames", "recovery_ms",
              "answer_latency_max_ms"}


@pytest.mark.integration
def test_chaos_run_kills_the_pacer_and_the_model_worker(tmp_path: Path):
    report_path = tmp_path / "chaos.json"
    completed = subprocess.run(
        # the calls' starts over 1 s, not the scenario's cycle: the faults come after they are all up
        [sys.executable, "-m", "voicecore.cli", "bench", "--scenario", "chaos", "--calls", "4",
         "--chaos-faults", "pacer,model", "--ramp-ms", "1000", "--json", str(report_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=150,
    )
    assert completed.returncode in (0, 1) and report_path.exists(), completed.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert "voicecore bench chaos" in completed.stdout  # the console table
    assert report["scenario"] == "chaos" and report["calls"] == 4
    assert [f["fault"] for f in report["faults"]] == ["pacer", "model"], report["faults_skipped"]
    for fault in report["faults"]:
        assert FAULT_KEYS <= set(fault), fault
        assert fault["max_gap_ms"] >= 0 and fault["stale_frames"] >= 0 and fault["fallback_lines"] >= 0
        assert fault["killed_pid"] and fault["new_pid"] and fault["new_pid"] != fault["killed_pid"], fault
        assert fault["recovery_ms"] is not None and fault["recovery_ms"] >= 0, fault
    pacer = report["faults"][0]
    assert pacer["calls_dropped"] == 0, (pacer, report["problems"])
    assert report["calls_placed"] >= 4 and report["baseline_window"]["calls_dropped"] == 0
    assert report["ok"] == (completed.returncode == 0)
    assert set(report["leader_files"]) == {"pacer", "model", "validator", "gateway"}


# ----- hallucination -------------------------------------------------------------------------------

KEYS = ("answers", "hallucinated_answers", "hallucinated_frames_played", "false_rejections", "safe_lines_played")


@pytest.mark.integration
def test_bench_hallucination_smoke(tmp_path: Path):
    report_path = tmp_path / "hallucination.json"
    completed = subprocess.run(
        # the calls' starts over 2 s, not the scenario's cycle (8 s): what is asserted is what each call heard,
        # not the load's shape
        [sys.executable, "-m", "voicecore.cli", "bench", "--scenario", "hallucination", "--calls", "4",
         "--seconds", "12", "--ramp-ms", "2000", "--json", str(report_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
    )
    assert report_path.exists(), completed.stderr[-3000:]
    report = json.loads(report_path.read_text())
    ungated = report["ungated"]
    for run in (report, ungated):
        missing = [k for k in KEYS if k not in run]
        assert not missing, missing
        assert run["calls_completed"] == 4, run["problems"]
        assert run["answers"] >= run["hallucinated_answers"] > 0
        assert run["hallucinated_frames_played"] >= run["hallucinated_frames_played_past_claim"] >= 0
        assert 0 <= run["safe_lines_played"] <= run["safe_lines"]
    assert report["scenario"] == "hallucination" and ungated["scenario"] == HALLUCINATION_UNGATED
    assert set(report["gated_first_audio_ms"]) >= {"p50", "p99"}
    assert set(report["ungated_first_audio_ms"]) >= {"p50", "p99"}
    assert report["ungated_first_audio_ms"] == ungated["ungated_first_audio_ms"]
    assert report["gated_first_audio_ms"]["count"] > 0 and ungated["ungated_first_audio_ms"]["count"] > 0
    assert set(report["gate_added_first_audio_ms"]) == {"p50", "p99"}
    # Without the gate nothing stops the hallucinations and no safe line is asked for.
    assert ungated["safe_lines"] == 0 and ungated["hallucinated_frames_played_past_claim"] > 0
    assert report["configuration"]["scenario"]["stack_env"]["VOICECORE_GATE_POLICY"] == "numbers"
    assert "gate on" in completed.stdout and "gate off" in completed.stdout


# ----- soak ----------------------------------------------------------------------------------------

@pytest.mark.integration
def test_a_short_soak_churns_calls_and_leaves_nothing_behind(tmp_path: Path):
    report_path = tmp_path / "soak.json"
    completed = subprocess.run(
        ["nice", "-n", "10", sys.executable, "-m", "voicecore.cli", "bench", "--soak", str(SOAK_S), "--calls", str(SLOTS),
         "--json", str(report_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=SOAK_S + 150,
    )
    assert report_path.exists(), completed.stderr[-3000:]
    soak = json.loads(report_path.read_text())["soak"]
    assert completed.returncode == 0, (soak["failures"], completed.stderr[-2000:])
    assert "RSS start kB" in completed.stdout  # the console table
    assert soak["seconds"] == SOAK_S and soak["calls"] == SLOTS
    assert soak["calls_completed"] > soak["calls"], soak["calls_completed"]  # the slots churned
    assert soak["failures"] == [] and soak["calls_failed"] == 0
    assert soak["shm_clean"] is True and soak["runtime_dir_clean"] is True and soak["zombies"] == 0
    assert soak["arenas_seen"] >= 1
    # A sample every 10 s from the load's start to its end, each with every stack process.
    assert [s["t_s"] // 10 for s in soak["samples"]] == [0, 1, 2, 3, 4]
    assert max(s["calls_active"] for s in soak["samples"]) >= SLOTS - 1
    for sample in soak["samples"]:
        assert {"supervisord", "gateway", "pacer", "model"} <= {name.split("_")[0] for name in sample["processes"]}
        assert all(p["rss_kb"] > 0 and p["fds"] > 0 for p in sample["processes"].values())
    assert set(soak["processes"]) == {name for s in soak["samples"] for name in s["processes"]}
    for name, figures in soak["processes"].items():
        assert set(figures) == PROCESS_KEYS, name
        assert figures["rss_kb_start"] > 0 and figures["rss_kb_end"] > 0 and figures["fds_start"] > 0
        assert figures["restarts"] == 0
    try:
        import matplotlib  # noqa: F401  (the bench extra draws the PNG; the test extra alone has none)
    except ImportError:
        assert not report_path.with_suffix(".png").exists() and "matplotlib is not installed" in completed.stderr
    else:
        assert os.path.getsize(report_path.with_suffix(".png")) > 10_000
