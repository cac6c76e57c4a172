"""`voicecore bench --soak`: the growth figures (pure) and the option defaults (a short soak end to end:
tests/e2e/test_bench_scenarios.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.cli import add_bench_arguments, bench_options_from_args
from bench.soak import baseline_index, call_seconds_range, soak_figures


def _sample(t_s: float, **rss: int) -> dict:
    return {"t_s": t_s, "calls_active": 5, "processes": {name: {"rss_kb": kb, "fds": 10} for name, kb in rss.items()}}


def test_growth_is_measured_from_the_first_sample_after_the_warm_up_to_the_mean_of_the_last_three():
    # 1000 s: warm-up max(60, 100) = 100 s. Start-up allocation before it (1000 -> 5000) is not growth.
    samples = [_sample(t, pacer=1000 if t < 50 else 5000) for t in range(0, 100, 10)]
    samples += [_sample(100, pacer=5000), _sample(110, pacer=5050)]
    samples += [_sample(t, pacer=kb) for t, kb in ((980, 5080), (990, 5100), (1000, 5120))]
    assert baseline_index(samples, 1000) == 10
    figures = soak_figures(samples, 1000, idle_start={"pacer": 10}, idle_end={"pacer": 12}, restarts={"pacer": 1})
    assert figures["pacer"] == {"rss_kb_start": 5000, "rss_kb_end": 5100, "rss_growth_pct": 2.0,
                                "fds_start": 10, "fds_end": 12, "fd_growth": 2, "restarts": 1}


def test_a_process_seen_only_in_some_samples_and_a_soak_shorter_than_the_warm_up():
    # 40 s: no sample after the 60 s warm-up: the baseline is the middle sample (t=20).
    samples = [_sample(0, model=900), _sample(10, model=950), _sample(20, model=1000, standby=500),
               _sample(30, model=1010), _sample(40, model=1020)]
    assert baseline_index(samples, 40) == 2
    figures = soak_figures(samples, 40, idle_start={"model": 30}, idle_end={}, restarts={})
    assert figures["model"]["rss_kb_start"] == 1000 and figures["model"]["rss_kb_end"] == 1010
    assert figures["model"]["rss_growth_pct"] == 1.0
    assert figures["model"]["fd_growth"] is None and figures["model"]["restarts"] == 0
    assert figures["standby"]["rss_kb_start"] == figures["standby"]["rss_kb_end"] == 500
    assert figures["standby"]["rss_growth_pct"] == 0.0


def test_call_lengths_are_20_to_90_s_for_a_long_soak_and_scaled_down_for_a_short_one():
    assert call_seconds_range(3600) == (20.0, 90.0) == call_seconds_range(360)
    low, high = call_seconds_range(40)
    assert 3.0 <= low < high <= 40 / 2


def test_a_soak_defaults_to_100_calls_unless_calls_are_given():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_bench_arguments(parser)

    def options(*argv):
        return bench_options_from_args(parser.parse_args(list(argv)))

    assert options("--soak", "60").calls == 100 and options("--soak", "60").soak == 60
    assert options("--soak", "60", "--calls", "7").calls == 7
    assert options().calls == 10 and options().soak == 0


def test_save_writes_the_soak_report_and_a_taken_name_is_refused_before_the_soak(monkeypatch, tmp_path: Path):
    """--save was dropped by the soak (a 1 h run left no raw report): it writes as --json does, and a name
    already published is refused before the hour, not after it."""
    import bench.run
    import bench.soak

    def options_for(*argv: str):
        parser = argparse.ArgumentParser()
        parser.add_argument("--config")
        add_bench_arguments(parser)
        return bench_options_from_args(parser.parse_args(list(argv)))

    saved = tmp_path / "2026-11-27-soak-test.json"
    monkeypatch.setattr(bench.run, "results_path", lambda name, today=None: tmp_path / f"2026-11-27-{name}.json")
    ran = []
    top = {"soak": {"failures": []}, "command": "voicecore bench --soak 10"}
    monkeypatch.setattr(bench.soak, "run_async", lambda main: (main.close(), ran.append(1), (top, 0))[2])
    monkeypatch.setattr(bench.soak, "format_soak_table", lambda soak: "table")
    monkeypatch.setattr(bench.soak, "write_soak_png", lambda path, soak: f"PNG report written to {path}")
    assert bench.soak.run_soak(options_for("--soak", "10", "--save", "soak-test")) == 0
    assert json.loads(saved.read_text()) == top
    assert bench.soak.run_soak(options_for("--soak", "10", "--save", "soak-test")) == 2  # never overwritten
    assert ran == [1]
