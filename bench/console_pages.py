"""Page loads of the console over a filled store: the calls list and a call's page, as the browser loads them.

``python -m bench.console_pages --calls 1000 --requests 200`` fills a fresh SQLite store with that many calls:
one real recorded call (the demo record the tests use, tests/data/records: its summary, its events as the
recorder derives them, and its record file, so its page replays real audio) and the rest made as
bench/console_store.py makes them (four turns, eight transcript lines, a tool call, verdicts). It starts the
real console worker (``python -m workers.console.main``) on 127.0.0.1 over that store, and loads each page
``--requests`` times over HTTP the way the browser does, in three steps, each step's requests at once (the
browser opens several connections): the HTML; its stylesheet and scripts; then the data its script asks for.

- the list (``/``): ``/api/calls?limit=100`` (the newest page with the total, the agents and carriers) and
  ``/api/live``;
- a call's page (``/calls/SID``): ``/api/calls/SID`` (the page waits for it), then ``waveform?points=1180``,
  ``events?since=0`` and the recording's first byte range (``audio.wav``, ``Range: bytes=0-65535``: what the
  audio element asks for its metadata) at once.

It reports, in milliseconds, p50 and p99 of the whole page load (the three steps) and of each data request on
its own, and the call page's first load apart (the console replays the record for its waveform and keeps it).
``--json`` prints one JSON object. Nothing here is timed inside a test: these are figures for the docs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.console_store import fill, machine
from voicecore.demo import free_port
from voicecore.observe.events import events_of_record
from voicecore.record import load_record
from voicecore.store import CallStore, summarize_record
from voicecore.store.query import CallFilter

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "tests" / "data" / "records" / "CA12d7ea0ef4734a81a0186375f3878962.jsonl.gz"
WAVEFORM_POINTS = 1180  # the canvas's width on a wide window: what call.js asks for
AUDIO_FIRST_RANGE = "bytes=0-65535"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    rank = lambda q: ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]  # nearest rank
    return {"p50": round(statistics.median(ordered), 2), "p99": round(rank(0.99), 2), "max": round(ordered[-1], 2),
            "count": len(ordered)}


class Console:
    """The console worker over a record directory, on a free port of 127.0.0.1."""

    def __init__(self, record_dir: Path, runtime_dir: Path, log_path: Path) -> None:
        self.port = free_port()
        env = {name: value for name, value in os.environ.items() if not name.startswith("VOICECORE_")}
        env.update({"VOICECORE_RECORD_DIR": str(record_dir), "VOICECORE_RUNTIME_DIR": str(runtime_dir),
                    "VOICECORE_CONSOLE_LISTEN": f"127.0.0.1:{self.port}", "VOICECORE_LOG_LEVEL": "warning"})
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "workers.console.main"], cwd=REPO, env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the console exited ({self.process.returncode}): see {log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the console did not answer /healthz in 30 s: see {log_path}") from None
                time.sleep(0.1)

    def get(self, path: str, headers: dict[str, str]) -> float:
        """One GET on its own connection (the console closes each after its answer), read whole: its time in ms."""
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
            if response.status not in (200, 206):
                raise RuntimeError(f"GET {path}: {response.status}")
        finally:
            connection.close()
        return (time.perf_counter() - started) * 1000

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()


def fill_store(record_dir: Path, calls: int) -> tuple[str, str]:
    """The store with ``calls`` calls (one of them the recorded call); (the recorded call's id, an API key)."""
    record = record_dir / RECORD.name.removesuffix(".gz")
    record.write_bytes(gzip.decompress(RECORD.read_bytes()))
    header, entries, complete = load_record(record)
    summary = summarize_record(header, entries, record.name, wall_end_s=time.time())
    started = time.time() - summary.duration_ms / 1000
    with CallStore.open(f"sqlite:///{record_dir}/calls.db") as store:
        fill(store, calls - 1)
        store.ingest(summary)
        store.add_events([(summary.call_sid, seq, round(started + t_ms / 1000, 3), t_ms, kind, json.dumps(data))
                          for seq, (t_ms, kind, data) in enumerate(events_of_record(header, entries, complete), start=1)])
        key = store.add_api_key("bench")
        assert store.count_calls(CallFilter()) == calls
    return summary.call_sid, key


def load_page(console: Console, pool: concurrent.futures.Executor, steps: list[list[tuple[str, dict[str, str]]]],
              per_request: dict[str, list[float]]) -> float:
    """The page's steps one after the other, each step's requests at once: the whole load's time in ms."""
    started = time.perf_counter()
    for step in steps:
        for (path, _), took in zip(step, pool.map(lambda request: console.get(*request), step)):
            per_request.setdefault(path, []).append(took)
    return (time.perf_counter() - started) * 1000


def measure(console: Console, sid: str, key: str, requests: int) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    plain: dict[str, str] = {}
    call = f"/api/calls/{sid}"
    list_steps = [[("/", plain)], [("/static/console.css", plain), ("/static/index.js", plain), ("/static/common.js", plain)],
                  [("/api/calls?limit=100", auth), ("/api/live", auth)]]
    call_steps = [[(f"/calls/{sid}", plain)], [("/static/console.css", plain), ("/static/call.js", plain), ("/static/common.js", plain)],
                  [(call, auth)], [(f"{call}/waveform?points={WAVEFORM_POINTS}", auth), (f"{call}/events?since=0", auth),
                                   (f"{call}/audio.wav", {**auth, "Range": AUDIO_FIRST_RANGE})]]
    report: dict[str, Any] = {}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        first: dict[str, list[float]] = {}
        report["call_page_first_ms"] = round(load_page(console, pool, call_steps, first), 2)
        for name, steps in (("list_page", list_steps), ("call_page", call_steps)):
            per_request: dict[str, list[float]] = {}
            loads = [load_page(console, pool, steps, per_request) for _ in range(requests)]
            report[name] = {"load_ms": percentiles(loads),
                            "requests_ms": {path.replace(sid, "SID"): percentiles(took) for path, took in per_request.items()
                                            if path.startswith("/api/")}}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console_pages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200, help="page loads of each page (default 200)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"command": " ".join(["python -m bench.console_pages", *(argv if argv is not None else sys.argv[1:])]),
                              "calls": args.calls, "requests": args.requests, "store": "sqlite"}
    with tempfile.TemporaryDirectory(prefix="voicecore-bench-pages-") as tmp:
        record_dir, runtime_dir = Path(tmp) / "records", Path(tmp) / "run"
        record_dir.mkdir(mode=0o700)
        runtime_dir.mkdir(mode=0o700)
        sid, key = fill_store(record_dir, args.calls)
        console = Console(record_dir, runtime_dir, Path(tmp) / "console.log")
        try:
            report.update(measure(console, sid, key, args.requests))
        finally:
            console.stop()
    report["machine"] = machine()
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{args.calls} calls in the store, {args.requests} loads of each page (ms)")
    print(f"  a call's page, first load (its record replayed): {report['call_page_first_ms']}")
    for name in ("list_page", "call_page"):
        load = report[name]["load_ms"]
        print(f"  {name}: p50 {load['p50']}  p99 {load['p99']}  max {load['max']}")
        for path, figures in report[name]["requests_ms"].items():
            print(f"    {path:<40} p50 {figures['p50']:>8}  p99 {figures['p99']:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
