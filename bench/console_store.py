"""The console's list queries over a filled call store: SQLite and PostgreSQL, the same queries.

``python -m bench.console_store --calls 10000`` fills a fresh store of each kind with that many calls (each
with four turns, eight transcript lines of words drawn from a small vocabulary, a tool call, verdicts, every
seventh a model error; agents, carriers and outcomes in turn, a minute apart) and times what the console's
list asks (``CallStore.calls`` with ``limit + 1`` rows and ``count_calls``, as /api/calls does): the newest
page, the 50th page (following page markers), by agent, by a transcript word, by a call id's beginning,
slow calls, calls with errors, everything at once, and the whole list exported (100 rows a query, as
/api/export pages, and its CSV). Each figure is the median of ``--repeat`` runs, in milliseconds. PostgreSQL is
started with pgserver (the test extra) in a temporary directory; ``--no-postgres`` skips it. ``--json`` prints
one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from voicecore.console import export
from voicecore.store import CallStore, CallSummary, ModelError, ToolCall, Transcript, Turn, Verdict
from voicecore.store.query import CallFilter

WORDS = ("appointment cleaning whitening checkup invoice parking emergency friday monday tomorrow price kronor hours "
         "open closed insurance dentist booking cancel change time morning afternoon evening thanks please").split()
AGENTS = ("receptionist", "front desk", "after hours", "billing")
CARRIERS = ("twilio", "telnyx", "exotel", "")
OUTCOMES = ("hangup:completed", "caller_hangup", "transfer", "hangup:vendor_failures")
PAGE = 100


def call_summary(n: int, rng: random.Random, newest_s: float) -> CallSummary:
    turns, transcripts = [], []
    at = 1500
    for index in range(4):
        said = " ".join(rng.choice(WORDS) for _ in range(8))
        answer = " ".join(rng.choice(WORDS) for _ in range(14))
        ended = at + 1800
        latency = rng.randint(450, 2600)
        turns.append(Turn(index, at + 300, ended + 520, said, ended + 600, f"resp_{n}_{index}", ended + latency - 60,
                          ended + latency + 2500 if rng.random() < 0.1 else None, None, answer, ended + latency, 2400,
                          at, ended, ended + latency - 40))
        transcripts += [Transcript("caller", said, ended + 700, at, f"item_{index}"),
                        Transcript("agent", answer, ended + latency + 1200, ended + latency - 40, f"resp_{n}_{index}", "answer")]
        at = ended + latency + 3000
    tools = (ToolCall(f"call_{n}", "book", '{"service": "cleaning"}', 4000, True, n % 11 != 0, '{"booked": true}', 4300,
                      started_ms=4000),)
    verdicts = tuple(Verdict(2, False, "", "[]", 5000 + 100 * i, 20 * i, f"resp_{n}_1") for i in range(5))
    errors = (ModelError("rate_limit_exceeded", "Rate limit reached", 3000),) if n % 7 == 0 else ()
    return CallSummary(
        source=f"CAb{n:06d}.jsonl", call_sid=f"CAb{n:06d}", control="turns", flow="agent", agent=AGENTS[n % len(AGENTS)],
        started_at=newest_s - 60 * n, duration_ms=at + 2000, outcome=OUTCOMES[n % len(OUTCOMES)], complete=True,
        turns=tuple(turns), transcripts=tuple(transcripts), tool_calls=tools, verdicts=verdicts, errors=errors,
        carrier=CARRIERS[n % len(CARRIERS)])


def fill(store: CallStore, calls: int) -> float:
    rng = random.Random(17)
    newest = time.time()
    started = time.perf_counter()
    for n in range(calls):
        store.ingest(call_summary(n, rng, newest))
    return (time.perf_counter() - started) / calls * 1000


def timed(work: Callable[[], Any], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        runs.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(runs), 2)


def list_page(store: CallStore, filter_: CallFilter, after: str | None = None) -> list[dict]:
    rows = store.calls(filter=filter_, limit=PAGE + 1, after=after)
    store.count_calls(filter_)
    return rows


def fiftieth_page(store: CallStore) -> None:
    after = None
    for _ in range(50):
        after = store.calls(filter=CallFilter(), limit=PAGE, after=after)[-1]["cursor"]


def exported(store: CallStore) -> int:
    rows, after = [], None
    while True:
        page = store.calls(filter=CallFilter(), limit=1000, after=after)
        rows += page
        if len(page) < 1000:
            break
        after = page[-1]["cursor"]
    return len(export.to_csv(rows))


def measure(url: str, calls: int, repeat: int) -> dict[str, Any]:
    with CallStore.open(url) as store:
        ingest_ms = fill(store, calls)
        figures: dict[str, Any] = {"ingest_ms_per_call": round(ingest_ms, 2)}
        queries = {
            "newest_page": lambda: list_page(store, CallFilter()),
            "page_50": lambda: fiftieth_page(store),
            "agent": lambda: list_page(store, CallFilter(agent="billing")),
            "search_word": lambda: list_page(store, CallFilter(search="whitening")),
            "search_two_words": lambda: list_page(store, CallFilter(search="insurance kronor")),
            "search_call_id": lambda: list_page(store, CallFilter(search="CAb0042")),
            "slow_calls": lambda: list_page(store, CallFilter(min_latency_ms=2500)),
            "errors": lambda: list_page(store, CallFilter(errors=True)),
            "everything": lambda: list_page(store, CallFilter(agent="front desk", carrier="telnyx", search="friday",
                                                              min_latency_ms=1500, errors=False)),
            "export_all_csv": lambda: exported(store),
            "detail": lambda: store.call(f"CAb{calls // 2:06d}"),
        }
        for name, work in queries.items():
            figures[f"{name}_ms"] = timed(work, repeat)
        figures["matches"] = {"search_word": store.count_calls(CallFilter(search="whitening")),
                              "slow_calls": store.count_calls(CallFilter(min_latency_ms=2500))}
    return figures


def machine() -> dict[str, Any]:
    import os
    import platform
    import sqlite3

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "") if Path("/proc/cpuinfo").exists() else ""
    return {"cpu": model, "cores": os.cpu_count(), "kernel": platform.release(), "load_average": os.getloadavg(),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console_store", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"command": " ".join(["python -m bench.console_store", *(argv if argv is not None else sys.argv[1:])]),
                              "calls": args.calls, "page": PAGE, "repeat": args.repeat, "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="voicecore-bench-store-") as tmp:
        report["sqlite"] = measure(f"sqlite:///{tmp}/calls.db", args.calls, args.repeat)
        if not args.no_postgres:
            import pgserver

            server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")
            try:
                report["postgresql"] = measure(server.get_uri(), args.calls, args.repeat)
                with CallStore.open(server.get_uri()) as store:
                    report["machine"]["postgresql"] = str(store.backend.execute("SHOW server_version").fetchone()[0])
            finally:
                server.cleanup()
    if args.json:
        print(json.dumps(report))
        return 0
    backends = [b for b in ("sqlite", "postgresql") if b in report]
    print(f"{args.calls} calls, a page of {PAGE}, median of {args.repeat} runs (ms)")
    for key in report["sqlite"]:
        if key == "matches":
            continue
        print(f"  {key:<24}" + "".join(f"{backend} {report[backend][key]:>9}   " for backend in backends))
    return 0


if __name__ == "__main__":
    sys.exit(main())
