"""The console worker alone: a real process on 127.0.0.1 over a real SQLite call store that holds one real
call (the demo record in tests/data/records: its summary, its observer events derived from the record as the
recorder derives them, and its audio), with an API key. For the console's HTTP and browser tests that need
a stored call but no call placed (no stack, no model, no carrier).

``mark_live`` plays the recorder's part on the bus: it publishes a ``call.started`` for the call on the feed
the console subscribes to (``observe.sock``), so the console takes the stored call for one in progress.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import zmq
from waiting import wait_until

from voicecore.bus import messages
from voicecore.bus.transport import OBSERVE_FEED
from voicecore.config import load_config
from voicecore.demo import free_port
from voicecore.observe.events import events_of_record
from voicecore.record import load_record
from voicecore.store import CallStore, database_url_for, summarize_record

REPO = Path(__file__).resolve().parents[1]
DEMO_RECORD = REPO / "tests" / "data" / "records" / "CA12d7ea0ef4734a81a0186375f3878962.jsonl.gz"


@dataclasses.dataclass
class ConsoleAlone:
    process: subprocess.Popen
    port: int
    key: str
    sid: str
    events: int  # stored events of the call
    transcript: list[dict]  # the stored call's transcript lines
    runtime_dir: Path
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def mark_live(self) -> None:
        """The call in progress, as the recorder's feed would say, until the console's API says so."""
        context = zmq.Context.instance()
        pub = context.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.bind(f"ipc://{self.runtime_dir / OBSERVE_FEED}")
        row = [self.sid, 1_000_000, time.time(), 0, "call.started", "{}"]
        try:
            def live() -> bool:
                pub.send(messages.encode(messages.ObservedEvents(json.dumps([row]))))  # again: a SUB joins late
                return http_json(self.base + f"/api/calls/{self.sid}", self.key).get("live") is True
            wait_until(live, 10, "the console to take the call for live", interval_s=0.1, detail=self.log)
        finally:
            pub.close(linger=0)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def http_json(url: str, key: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return {"status": exc.code}


def start_console(workdir: Path, **settings: str) -> ConsoleAlone:
    """The console on a free port of 127.0.0.1; ``settings``: more VOICECORE_* variables."""
    port = free_port()
    record_dir, runtime_dir = workdir / "records", workdir / "run"
    record_dir.mkdir(mode=0o700)
    runtime_dir.mkdir(mode=0o700)
    record = record_dir / DEMO_RECORD.name.removesuffix(".gz")
    record.write_bytes(gzip.decompress(DEMO_RECORD.read_bytes()))
    env = {name: value for name, value in os.environ.items() if not name.startswith("VOICECORE_")}
    env.update({"VOICECORE_RECORD_DIR": str(record_dir), "VOICECORE_RUNTIME_DIR": str(runtime_dir),
                "VOICECORE_CONSOLE_LISTEN": f"127.0.0.1:{port}", "VOICECORE_LOG_LEVEL": "info", **settings})
    config = load_config(env)
    header, entries, complete = load_record(record)
    summary = summarize_record(header, entries, record.name, wall_end_s=time.time())
    sid = summary.call_sid
    started = time.time() - 60
    rows = [(sid, seq, round(started + t_ms / 1000, 3), t_ms, kind, json.dumps(data, separators=(",", ":")))
            for seq, (t_ms, kind, data) in enumerate(events_of_record(header, entries, complete), start=1)]
    with CallStore.open(database_url_for(config)) as store:
        store.ingest(summary)
        store.add_events(rows)
        key = store.add_api_key("ops")
        transcript = store.call(sid)["transcript"]
    log_path = workdir / "console.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "workers.console.main"], cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    console = ConsoleAlone(process, port, key, sid, len(rows), transcript, runtime_dir, log_path)

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the console exited ({process.returncode}):\n{console.log()[-3000:]}")
        try:
            with urllib.request.urlopen(console.base + "/healthz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_until(healthy, 30, "the console's /healthz", interval_s=0.1, detail=console.log)
    except BaseException:
        console.stop()
        raise
    return console
