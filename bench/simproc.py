"""The bench's model-simulator process: serve_model_sim for one scenario, dump its records on SIGTERM.

Owns only the process around voicecore.sim.model_server.serve_model_sim (the simulator itself is not
forked): it pins itself to the load CPUs, writes the bound port to a file, and when told to stop
writes every session's SessionRecord (pickled; the file stays in the bench's private temp dir) so the
bench can line the model's send times up with what the carrier heard. Times are CLOCK_MONOTONIC ms,
system-wide on Linux, so they compare with the carrier processes' times.

It runs at nice +10: it shares the load CPUs with the carrier processes, and a burst of model deltas
for many calls must not delay the carrier's arrival time stamps (those are the lateness the bench
reports; the real model vendor is not on the carrier's machine). The model's own delays show up where
they belong: as late deltas, absorbed by the lead or counted as model-starved underruns.

    python -m bench.simproc --scenario steady --port-file P --out F [--cpus 1] [--model-vendor gemini]

With ``--model-vendor gemini`` it serves the Gemini Live simulator instead, with the scenario's faults where the
protocol has them (late audio after a cut, stalls), and writes each connection as a SessionRecord
(voicecore/sim/gemini_records.py), which the analysis reads as it reads the Realtime ones.
"""

from __future__ import annotations

import argparse
import os
import pickle
from pathlib import Path

import uvloop

from bench.pinning import parse_cpus
from bench.scenarios import get_scenario
from voicecore.sim import gemini_records
from voicecore.sim.model_server import serve_model_sim
from voicecore.sim.process_shell import announce_and_serve

SIM_NICE = 10


async def _main(args: argparse.Namespace) -> None:
    scenario = get_scenario(args.scenario)
    if args.model_vendor == "gemini":
        sim, port = await gemini_records.start_sim(args.gemini_connection_limit_s, **gemini_switches(scenario.sim_config))
    else:
        sim, port = await serve_model_sim("127.0.0.1", 0, scenario.sim_config)
    await announce_and_serve(port, Path(args.port_file))
    await sim.aclose()
    if args.model_vendor == "gemini":  # its connections as the Realtime simulator's sessions are read
        records = [gemini_records.session_record(c.record, i) for i, c in enumerate(sim.connections)]
    else:
        records = [session.record for session in sim.registry.values()]
    out = Path(args.out)
    with open(out.with_suffix(".tmp"), "wb") as f:
        pickle.dump(records, f, protocol=pickle.HIGHEST_PROTOCOL)
    out.with_suffix(".tmp").replace(out)


def gemini_switches(sim_config) -> dict:
    """The scenario's Realtime simulator faults, as the Gemini simulator's: late audio after a cut, a stall. A
    second turn overlapping the first has no Gemini form (one model turn at a time: the protocol has no ids to
    tell two apart), so the overlap scenario is refused for Gemini (bench/main.py)."""
    stall = None
    if sim_config.stall_after_ms is not None:
        stall = gemini_records.Stall(sim_config.stall_after_ms, sim_config.stall_ms, tuple(sim_config.stall_responses))
    return {"late_chunks": sim_config.late_deltas_after_cancel, "stall": stall}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="voicecore bench: model simulator process")
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpus", default="")
    parser.add_argument("--model-vendor", default="openai", choices=("openai", "gemini"))
    parser.add_argument("--gemini-connection-limit-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, parse_cpus(args.cpus))
    os.nice(SIM_NICE)
    uvloop.run(_main(args))


if __name__ == "__main__":
    main()
