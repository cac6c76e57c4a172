"""Microbenchmarks: the per-message, per-frame and per-call costs the docs and docstrings quote.

Outside the test gate: the files are named bench_*.py, which pytest's default collection (test_*.py,
testpaths = tests) never picks up. This conftest collects them when the folder is named on the command
line:

    .venv/bin/pytest bench/micro --benchmark-only                      # every benchmark
    .venv/bin/pytest bench/micro/bench_twilio.py --benchmark-only      # one file
    taskset -c 1 .venv/bin/pytest bench/micro --benchmark-only --benchmark-json micro.json   # for figures

pytest-benchmark (the `test` extra) reports min/median/mean per call of the benchmarked function; where a
benchmark runs a batch, `extra_info` holds the per-item median (`median_ns_per_*`) and the `--benchmark-json`
report carries it. Quote medians from a quiet machine, pinned to one core.
"""

from __future__ import annotations

import pytest


def pytest_collect_file(file_path, parent):
    # A file named on the command line is collected by pytest itself, whatever its name.
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def per_item(benchmark, items: int, unit: str) -> None:
    """Record the median per item of a batch benchmark in its extra_info (nanoseconds)."""
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info[f"median_ns_per_{unit}"] = round(stats.stats.median / items * 1e9, 1)
