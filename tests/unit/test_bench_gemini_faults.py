"""The bench's Gemini simulator gets its scenario's faults (bench/simproc.py): late audio after a cut, a stall;
the overlap scenario, which Gemini's protocol cannot express, is refused."""

from __future__ import annotations

from bench.main import run_bench
from bench.run import BenchOptions
from bench.scenarios import get_scenario
from bench.simproc import gemini_switches
from voicecore.sim.gemini_records import Stall


def test_the_model_stall_scenario_stalls_the_gemini_simulator_as_the_realtime_one() -> None:
    sim = get_scenario("model-stall").sim_config
    switches = gemini_switches(sim)
    assert switches["stall"] == Stall(sim.stall_after_ms, sim.stall_ms, ()) and sim.stall_after_ms is not None


def test_the_bargein_storm_sends_late_audio_after_a_cut_on_gemini_too() -> None:
    assert gemini_switches(get_scenario("bargein-storm").sim_config) == {"late_chunks": 2, "stall": None}
    assert gemini_switches(get_scenario("steady").sim_config) == {"late_chunks": 0, "stall": None}


def test_the_overlap_scenario_is_refused_on_gemini(capsys) -> None:
    assert run_bench(BenchOptions(scenario="overlap", model_vendor="gemini")) == 2
    assert "overlap (Gemini has one model turn at a time)" in capsys.readouterr().err
