"""`voicecore bench`'s hand-off: which kind of run the options ask for, and the module that runs it.

A measured run, a capacity search and a baseline comparison are bench/run.py's; a soak (bench/soak.py), the
bad-input pair (bench/badinput.py) and the chaos run (bench/chaos.py) build on run.py's level runs. This module
is the only one that knows all four, so the arrows go one way: the runs import run.py, never the other way.
"""

from __future__ import annotations

import sys

from bench.run import BenchOptions, options_problem
from bench.run import run_bench as run_measured


def run_bench(opts: BenchOptions) -> int:
    if opts.carrier != "twilio" and (opts.soak or opts.bad_input):
        print("voicecore bench: --soak and --bad-input place Twilio calls; --carrier is for measured runs",
              file=sys.stderr)
        return 2
    if opts.model_vendor != "openai" and (opts.soak or opts.bad_input or opts.baseline or opts.target
                                          or _has_agent(opts.scenario) or opts.scenario in ("chaos", "hallucination", "overlap")):
        print("voicecore bench: --model-vendor gemini measures the stack it starts on a scenario without an agent "
              "(steady, bargein-storm, model-stall, ...): not with --soak, --bad-input, --baseline, --target, chaos, "
              "hallucination, overlap (Gemini has one model turn at a time) or an agent scenario", file=sys.stderr)
        return 2
    if opts.soak:
        from bench.soak import run_soak

        return run_soak(opts)
    if opts.bad_input:
        from bench.badinput import run_bad_input  # its own pair of runs: without and with the attacker

        return run_bad_input(opts)
    if opts.scenario == "chaos":
        problem = options_problem(opts)
        if problem:
            print(f"voicecore bench: {problem}", file=sys.stderr)
            return 2
        from bench.chaos import run_chaos  # its own run: faults injected into one stack

        return run_chaos(opts)
    return run_measured(opts)


def _has_agent(scenario: str) -> bool:
    """The scenario runs an agent (an agent:DIR scenario, or a built-in one with its own); an unknown name is
    left to the measured run's own check."""
    from bench.scenarios import get_scenario

    try:
        return get_scenario(scenario).agent is not None
    except Exception:  # noqa: BLE001 (an unknown or broken scenario: options_problem names it)
        return False
