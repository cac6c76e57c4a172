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
