"""Reading a live call's record on the model worker: what its observer events and its store summary cost.

The model worker hands every entry its recorder makes to one record reader (voicecore/call/record_reader.py)
as the entry is made, on the call's own event loop; the reader feeds the live observer events
(voicecore/observe/events.py) and the call store's summary (voicecore/store/summary.py), parsing each model
event once; at the call's end the worker builds the summary once. This is that work for one whole call,
entry by entry, with the events taken every OBSERVE_EVERY_MS as the worker ships them:

- spine: the demo's 15 s call as `voicecore demo` recorded it (tests/data/records/), caller audio left out;
- turns: the scenario suite's `bargein_mid` call through the turn-taking controller (20 s, a tick every
  20 ms), tests/scenarios;
- agent: the scenario suite's `fast_tool_call_mid_sentence` call (a tool runs mid-answer).

extra_info: `entries`, `median_ns_per_entry` and `us_per_call_second` (the median over the call's length).
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

from voicecore.call.record import loads
from voicecore.call.record_reader import RecordReader
from voicecore.observe.events import CallEventTap
from voicecore.store.summary import RecordSummarizer

TESTS = Path(__file__).resolve().parents[2] / "tests"
DEMO_RECORD = TESTS / "data" / "records" / "CA12d7ea0ef4734a81a0186375f3878962.jsonl.gz"
OBSERVE_EVERY_MS = 100  # the model worker's OBSERVE_EVERY_S


def _scenario_record(name: str) -> tuple[dict, list[dict]]:
    sys.path.insert(0, str(TESTS))
    try:
        from scenarios import catalog, harness
    finally:
        sys.path.remove(str(TESTS))
    (scenario,) = [s for s in catalog.SCENARIOS if s.name == name]
    outcome = harness.run(scenario.caller, scenario.model, scenario.config, scenario.flow_args, max_ms=scenario.max_ms)
    return loads(outcome.recorder.dumps())


def _records() -> dict[str, tuple[dict, list[dict]]]:
    return {"spine": loads(gzip.open(DEMO_RECORD, "rt", encoding="utf-8").read()),
            "turns": _scenario_record("bargein_mid"), "agent": _scenario_record("fast_tool_call_mid_sentence")}


RECORDS = _records()


def read_live_call(header: dict, entries: list[dict]) -> tuple[int, object]:
    """What the model worker does with one call's record entries: (events taken, the summary)."""
    tap = CallEventTap(header)
    summarizer = RecordSummarizer(header)
    feed = RecordReader(tap, summarizer).feed  # the recorder's observer (workers/model/main.py CallSession)
    events = 0
    next_take = entries[0]["t"] + OBSERVE_EVERY_MS * 1_000_000
    for entry in entries:
        feed(entry)
        if entry["t"] >= next_take:
            events += len(tap.take())
            next_take += OBSERVE_EVERY_MS * 1_000_000
    events += len(tap.take())
    return events, summarizer.summary("call.jsonl", 1000.0)


@pytest.mark.benchmark(group="read a live call's record")
@pytest.mark.parametrize("name", list(RECORDS))
def test_read_live_call(benchmark, name):
    header, entries = RECORDS[name]
    events, summary = benchmark(read_live_call, header, entries)
    assert events > 5 and summary.transcripts
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        median = stats.stats.median
        benchmark.extra_info["entries"] = len(entries)
        benchmark.extra_info["median_ns_per_entry"] = round(median / len(entries) * 1e9, 1)
        benchmark.extra_info["us_per_call_second"] = round(median * 1e6 / ((entries[-1]["t"] - entries[0]["t"]) / 1e9), 1)
