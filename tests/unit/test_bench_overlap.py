"""The bench's `overlap` scenario (a real Realtime server sometimes starts a second response before the first is
done; one voice at a time: the newer supersedes the older, INV-ONE-VOICE) and the windowing of the figures that
measure it (synthetic records, no stack)."""

from __future__ import annotations

import argparse
from pathlib import Path
import base64
import json

import pytest

from bench import analysis
from bench.cli import add_bench_arguments
from bench.report import format_table
from bench.scenarios import OVERLAP_PROBABILITY, SCENARIOS, get_scenario
from voicecore.sim.carrier import CallResult
from voicecore.sim.carrier_core import CarrierCall
from voicecore.timing import FRAME_BYTES


def test_overlap_is_steady_with_overlaps_and_late_deltas():
    overlap, steady = get_scenario("overlap"), get_scenario("steady")
    assert "overlap" in SCENARIOS and OVERLAP_PROBABILITY == 0.25
    assert overlap.sim_config.overlap_probability == 0.25 and overlap.sim_config.late_deltas_after_cancel == 2
    assert overlap.sim_config.clip_sequence == steady.sim_config.clip_sequence
    assert steady.sim_config.overlap_probability == 0.0  # the other scenarios are unchanged
    assert overlap.expect_bargeins is False and overlap.cycle_ms == steady.cycle_ms
    assert overlap.script(30_000, 3) == steady.script(30_000, 3)


def test_every_scenario_is_named_in_the_cli_help_and_an_agent_directory_is_one_too():
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    action = next(a for a in parser._actions if a.dest == "scenario")
    assert all(name in action.help for name in SCENARIOS) and "agent:DIR" in action.help
    assert parser.parse_args(["--scenario", "overlap"]).scenario == "overlap"
    agent = get_scenario("agent:" + str(Path(__file__).resolve().parents[2] / "examples" / "receptionist"))
    assert agent.agent is not None and agent.sim_config.turns and agent.stack_env[0][0] == "VOICECORE_AGENT"
    assert agent.script(60_000, 1).utterances  # the agent's own callers


def _media(byte: int) -> str:
    return json.dumps({"event": "media", "streamSid": "MZ1", "media": {"payload": base64.b64encode(bytes([byte]) * FRAME_BYTES).decode()}})


def _mark(name: str) -> str:
    return json.dumps({"event": "mark", "streamSid": "MZ1", "mark": {"name": name}})


def test_window_counts_overlapping_frames_played_and_bargeins_noted_inside():
    core = CarrierCall("CA1", "MZ1", "AC1", "token", b"", 4, play_phase_ms=0.0)
    core.opening_messages()
    for tag, first, count in ((1, 1, 10), (2, 1, 10), (1, 11, 10)):  # tag 1 again after tag 2: 10 overlapping frames
        for _ in range(count):
            core.receive(_media(tag), 0)
        core.receive(_mark(f"{tag}:{first + count - 1}"), 0)
    core.note_bargein(50)  # never cleared
    core.note_bargein(450)
    core.tick_play(2000)
    core.stop_message(1900)
    result = CallResult("CA1", core.metrics, core.statistics(), None, "carrier", [], core)
    assert result.statistics.overlapping_frames == 10 and result.statistics.bargeins_without_clear == 1
    played_at = [f.played_at_ms for f in core.overlapping_played()]
    assert played_at == [400.0 + 20 * k for k in range(10)]
    trimmed = analysis.trim_result(result, 100, 500)
    assert trimmed.statistics.overlapping_frames == 5  # played at 400..480
    assert trimmed.statistics.bargeins_without_clear == 0  # the one at 450 is within 1.5 s of the end: not judged
    trimmed = analysis.trim_result(result, 0, 100)
    assert (trimmed.statistics.overlapping_frames, trimmed.statistics.bargeins_without_clear) == (0, 1)


def test_console_table_shows_overlaps_and_bargeins_without_clear():
    summary = {"p50": 1.0, "p99": 2.0, "p999": 3.0, "max": 4.0, "count": 5}
    run = {"calls": 10, "lateness_ms": summary, "underruns": 0, "stale_frames": 0, "overlapping_frames": 17,
           "bargeins_without_clear": 3, "bargein_to_clear_ms": summary, "truncate_error_ms": summary,
           "model_to_carrier_ms": summary, "turn_latency_ms": summary, "cpu_ms_per_call_second": 1.0, "frames_sent": 100, "bargeins": 4,
           "seconds": 10.0, "talkover_ms": summary, "overlapping_responses": 6, "late_deltas_sent": 8}
    text = format_table({"scenario": "overlap"}, [run])
    header, _rule, row = text.splitlines()[1:4]
    columns = [c for c in header.split("  ") if c.strip()]
    values = row.split()
    assert len(columns) == len(values)
    cells = dict(zip((c.strip() for c in columns), values))
    assert (cells["overlap"], cells["b-in no clr"]) == ("17", "3")
    assert "overlapping responses 6" in text and "late deltas 8" in text and "talkover ms p50/p99 1.00/2.00" in text


@pytest.mark.parametrize("name", ["steady", "bargein-storm", "model-stall", "silence"])
def test_other_scenarios_have_no_overlaps(name):
    assert get_scenario(name).sim_config.overlap_probability == 0.0
