"""How long callers waited, as the console shows it, over the calls of a store: per turn, the caller stopped
speaking -> they heard the answer begin (voicecore/store/figures.py ``heard_latency``), and its parts.

``python -m bench.console_heard --record-dir ./voicecore-records`` (the store a ``voicecore demo`` or
``voicecore up`` left there; ``--database-url`` for another) reads every stored call's turns (``--agent`` for
one agent's) and reports, in milliseconds, p50 and p95 (nearest rank) of the heard latency ("caller waited")
and of each part (detection, model, runtime, carrier), and the model's share of each turn's wait. A turn
the caller heard no answer to (cut by a barge-in before its first frame, or the call's last words) has
none and is left out, as on the call page. ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from voicecore.store import CallStore
from voicecore.store.figures import LATENCY_PARTS, heard_latency
from voicecore.store.query import CallFilter


def nearest_rank(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None


def spread(values: list[float]) -> dict[str, Any]:
    return {"p50": nearest_rank(values, 0.50), "p95": nearest_rank(values, 0.95), "max": max(values) if values else None,
            "count": len(values)}


def heard(url: str, agent: str = "") -> dict[str, Any]:
    with CallStore.open(url) as store:
        rows, after = [], None
        while True:
            page = store.calls(filter=CallFilter(agent=agent or None), limit=1000, after=after)
            rows += page
            if len(page) < 1000:
                break
            after = page[-1]["cursor"]
        turns = [turn for row in rows for turn in (store.call(row["call_sid"]) or {}).get("turns", [])]
    latencies = [latency for turn in turns if (latency := heard_latency(turn)) is not None]
    report: dict[str, Any] = {"calls": len(rows), "turns": len(turns), "turns_heard": len(latencies),
                              "heard_by_echo": sum(1 for latency in latencies if latency["heard_by"] == "played"),
                              "caller_waited_ms": spread([latency["total_ms"] for latency in latencies])}
    for part in LATENCY_PARTS:
        report[part] = spread([latency[part] for latency in latencies if latency[part] is not None])
    shares = [latency["model_ms"] / latency["total_ms"] for latency in latencies
              if latency["model_ms"] is not None and latency["total_ms"] > 0]
    report["model_share"] = {key: None if value is None else round(value, 3) if key != "count" else value
                             for key, value in spread(shares).items()}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console_heard", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--record-dir", help="the record directory whose calls.db to read")
    where.add_argument("--database-url", help="a store's URL (sqlite:///PATH or postgresql://...)")
    parser.add_argument("--agent", default="", help="only this agent's calls")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    url = args.database_url or f"sqlite:///{args.record_dir}/calls.db"
    report = {"command": " ".join(["python -m bench.console_heard", *(argv if argv is not None else sys.argv[1:])]),
              **heard(url, args.agent)}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['calls']} calls, {report['turns_heard']} of {report['turns']} turns with an answer heard (ms)")
    for name in ("caller_waited_ms", *LATENCY_PARTS):
        figures = report[name]
        print(f"  {name:<18} p50 {figures['p50']}  p95 {figures['p95']}  max {figures['max']}")
    share = report["model_share"]
    print(f"  model's share of the wait: p50 {share['p50']}  p95 {share['p95']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
