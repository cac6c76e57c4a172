"""`voicecore replay` speed: a recorded call through a fresh driver on a virtual clock.

docs/how-to/replay-a-call.md#replay: replay builds the driver the header names and runs the recorded
inputs through it on a virtual clock: no process, socket or sleep (2,000x to 4,000x real time).
Two records, made in the set-up (untimed) by the test suite's sans-I/O harnesses, so no stack is needed:
- spine: the demo's 16 s call (greeting, a question, a barge-in) against the model simulator's core,
  tests/unit/test_replay_spine.py `spine_call`;
- turns: the scenario suite's `bargein_mid` call through the turn-taking controller (a tick every
  20 ms), tests/scenarios.
The benchmark is what `voicecore replay CALL.jsonl` does once Python is up: record.load(path), then
voicecore.replay.replay(header, entries); extra_info has `x_real_time`: the call's length over the median.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from voicecore import record, replay

TESTS = Path(__file__).resolve().parents[2] / "tests"


@pytest.fixture(scope="module")
def harnesses():
    sys.path.insert(0, str(TESTS))
    try:
        import test_replay_spine
        from scenarios import catalog, harness
    finally:
        sys.path.remove(str(TESTS))
    return test_replay_spine, catalog, harness


def _replay_file(path: Path):
    header, entries = record.load(path)
    result = replay.replay(header, entries)
    assert result.identical, result.divergence
    return result


def _x_real_time(benchmark, call_ms: int) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["call_seconds"] = call_ms / 1000
        benchmark.extra_info["x_real_time"] = round(call_ms / 1000 / stats.stats.median)


@pytest.mark.benchmark(group="replay one call")
def test_replay_spine_demo_call(benchmark, harnesses, tmp_path):
    spine, _, _ = harnesses
    seconds = 16.0
    recorder, _, _ = spine.spine_call(seconds=seconds)
    benchmark(_replay_file, record.save_new(recorder, tmp_path))
    _x_real_time(benchmark, int(seconds * 1000))


@pytest.mark.benchmark(group="replay one call")
def test_replay_turns_bargein_call(benchmark, harnesses, tmp_path):
    _, catalog, harness = harnesses
    (scenario,) = [s for s in catalog.SCENARIOS if s.name == "bargein_mid"]
    outcome = harness.run(scenario.caller, scenario.model, scenario.config, scenario.flow_args, max_ms=scenario.max_ms)
    benchmark(_replay_file, record.save_new(outcome.recorder, tmp_path))
    _x_real_time(benchmark, outcome.end_ms)
