"""One bench load process: its share of the simulated calls (voicecore.sim.carrier.place_call), timed
against a start instant the bench hands every load process, so K processes together ramp N calls up.

Owns the call schedule of its share (call i starts at t0 + ramp * i / N and every call ends at
t0 + ramp + settle + seconds, so all calls are up during the measured window), progress lines on
stdout, and the dump of its CallResults (pickled into the bench's private temp dir). Must not know how
the figures are computed. Protocol with the bench: prints "ready", reads one JSON line {"t0_ms": ...}
(CLOCK_MONOTONIC ms, system-wide on Linux), prints {"live": n, "done": n, "failed": n} lines about
every second, writes --out and prints "finished".

The auth token arrives in the environment (BENCH_TWILIO_AUTH_TOKEN), not on the command line; with
--carrier other than twilio, that carrier's secrets too (BENCH_CARRIER_CREDENTIALS: a CarrierCredentials'
JSON).

A load process asks for SCHED_FIFO (priority LOAD_RT_PRIORITY, else nice -10): the carrier stands in
for Twilio, whose arrival times are not disturbed by the model vendor's servers, but here the model
simulator shares the load CPUs. Running first whenever a frame arrives keeps the simulator's work
out of the lateness the carrier measures (the simulator's delays show as model lateness instead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import sys
import time
from pathlib import Path

import uvloop

from bench.pinning import parse_cpus
from bench.scenarios import get_scenario
from voicecore.sim.carrier import CallResult, place_call, shared_ticker
from voicecore.sim.carrier_modes_core import CARRIERS, CarrierCredentials
from voicecore.priority import SIMULATOR_RT_PRIORITY, raise_priority
from voicecore.sim.quiet_gc import collector_paused

TOKEN_ENV = "BENCH_TWILIO_AUTH_TOKEN"
CREDENTIALS_ENV = "BENCH_CARRIER_CREDENTIALS"
LOAD_RT_PRIORITY = SIMULATOR_RT_PRIORITY  # below the pacer's (10), should the two ever share a CPU


def schedule(calls: int, ramp_ms: float, settle_ms: float, seconds: float, t0_ms: float) -> list[tuple[float, float]]:
    """(start_ms, end_ms) of every call: starts spread over the ramp, one common end."""
    end_ms = t0_ms + ramp_ms + settle_ms + seconds * 1000.0
    return [(t0_ms + ramp_ms * i / max(1, calls), end_ms) for i in range(calls)]


def _strip(result: CallResult) -> CallResult:
    """Drop what the report never reads (the caller's clips, the playout queue) before pickling."""
    core = result.core
    if core is not None:
        if hasattr(core, "release_wire_state"):  # a carrier mode's adapter: its codecs and carrier sides too
            core.release_wire_state()
        else:
            core._clips = []
            core._queue.clear()
            core._outbox = []
    return result


async def _run(args: argparse.Namespace, t0_ms: float) -> list[tuple[CallResult, dict]]:
    scenario = get_scenario(args.scenario)
    token = os.environ.get(TOKEN_ENV, "")
    credentials = CarrierCredentials.from_json(os.environ.get(CREDENTIALS_ENV, "")) if args.carrier != "twilio" else None
    plan = schedule(args.calls_total, args.ramp_ms, args.settle_ms, args.seconds, t0_ms)
    mine = list(range(args.proc_index, args.calls_total, args.procs))
    counts = {"done": 0, "failed": 0}

    async def one(index: int) -> tuple[CallResult, dict]:
        start_ms, end_ms = plan[index]
        delay = start_ms / 1000.0 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        started_ms = time.monotonic() * 1000.0
        script = scenario.script(int(end_ms - started_ms), index)
        result = await place_call(args.base_url, token, script, args.lead_frames, unix_socket=args.unix_socket or None,
                                  carrier=args.carrier, credentials=credentials)
        counts["done"] += 1
        if result.closed_by != "carrier" or result.errors:
            counts["failed"] += 1
        meta = {"index": index, "planned_start_ms": start_ms, "started_ms": started_ms, "end_ms": end_ms,
                "send_origin_ms": result.core.send_origin_ms if result.core is not None else None}
        return _strip(result), meta

    async def progress() -> None:
        ticker = shared_ticker()
        while True:
            print(json.dumps({"live": ticker.live(), **counts}), flush=True)
            await asyncio.sleep(1.0)

    reporter = asyncio.create_task(progress())
    try:
        with collector_paused():
            return await asyncio.gather(*(one(i) for i in mine))
    finally:
        reporter.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="voicecore bench: one load process")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--calls-total", type=int, required=True)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--proc-index", type=int, default=0)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--ramp-ms", type=float, required=True)
    parser.add_argument("--settle-ms", type=float, required=True)
    parser.add_argument("--lead-frames", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--unix-socket", default="", help="reach the server through this Unix socket")
    parser.add_argument("--cpus", default="")
    parser.add_argument("--carrier", default="twilio", choices=CARRIERS)
    args = parser.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, parse_cpus(args.cpus))
    raise_priority(fifo_priority=LOAD_RT_PRIORITY, nice=-10)
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line:
        return
    t0_ms = float(json.loads(line)["t0_ms"])
    results = uvloop.run(_run(args, t0_ms))
    out = Path(args.out)
    with open(out.with_suffix(".tmp"), "wb") as f:
        pickle.dump(results, f, protocol=pickle.HIGHEST_PROTOCOL)
    out.with_suffix(".tmp").replace(out)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
