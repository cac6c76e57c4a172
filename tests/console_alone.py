"""The console worker alone: a real process on 127.0.0.1 over a real SQLite call store that holds one real
call (the demo record in tests/data/records: its summary, its observer events derived from the record as the
recorder derives them, and its audio), with an API key. For the console's HTTP and browser tests that need
a stored call but no call placed (no stack, no model, no carrier).

``agent_call_too=True`` adds a receptionist call recorded through the turn-taking controller (tests/agent_call.py:
a booking confirmed with keypad 1, a tool, gate verdicts, the agent's hang-up), its record and events too;
``more_calls=N`` adds N calls made from it with other ids, agents, carriers, outcomes, words and latencies
(``filler_calls``), started one a minute before the others.

``mark_live`` plays the recorder's part on the bus: it publishes a ``call.started`` for the call on the feed
the console subscribes to (``observe.sock``), so the console takes the stored call for one in progress.
"""

from __future__ import annotations

import contextlib
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
from agent_call import agent_call, write_record

from voicecore.observe.events import events_of_record
from voicecore.record import load_record
from voicecore.store import CallStore, CallSummary, ModelError, database_url_for, summarize_record

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
    agent_sid: str = ""  # the receptionist call's, with agent_call_too=True

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
        with self.live_feed(self.sid):
            pass

    @contextlib.contextmanager
    def live_feed(self, call_sid: str, started: dict | None = None, first_seq: int = 1_000_000):
        """Play the recorder: a ``call.started`` for ``call_sid`` (``started``: its data) on the feed the console
        subscribes to, until the console takes the call for live; yields ``send(t_ms, type, data)`` for the
        call's next events (numbered on from ``first_seq``)."""
        context = zmq.Context.instance()
        pub = context.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.bind(f"ipc://{self.runtime_dir / OBSERVE_FEED}")
        row = [call_sid, first_seq, time.time(), 0, "call.started", json.dumps(started or {})]
        seq = [first_seq]

        def send(t_ms: int, kind: str, data: dict) -> None:
            seq[0] += 1
            event = [call_sid, seq[0], time.time(), t_ms, kind, json.dumps(data)]
            pub.send(messages.encode(messages.ObservedEvents(json.dumps([event]))))

        try:
            def live() -> bool:
                pub.send(messages.encode(messages.ObservedEvents(json.dumps([row]))))  # again: a SUB joins late
                return http_json(self.base + f"/api/calls/{call_sid}", self.key).get("live") is True
            wait_until(live, 10, "the console to take the call for live", interval_s=0.1, detail=self.log)
            yield send
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


FILLER_AGENTS = ("receptionist", "front desk", "after hours")
FILLER_CARRIERS = ("twilio", "telnyx", "exotel", "")
FILLER_OUTCOMES = ("hangup:completed", "caller_hangup", "transfer", "hangup:vendor_failures")
FILLER_WORDS = ("cleaning", "whitening", "checkup", "invoice", "parking", "emergency")


def filler_calls(base: CallSummary, count: int, newest_s: float) -> list[CallSummary]:
    """``count`` calls made from ``base``: call n has id CAfill<n>, started n minutes before ``newest_s``, an agent,
    carrier and outcome in turn, a word of FILLER_WORDS in its caller's line, and its answers heard 100 ms x (n mod
    20) later than base's (so latencies differ); every 7th a model error."""
    calls = []
    for n in range(count):
        shift = 100 * (n % 20)
        turns = tuple(dataclasses.replace(t, first_played_ms=None if t.first_played_ms is None else t.first_played_ms + shift)
                      for t in base.turns)
        word = FILLER_WORDS[n % len(FILLER_WORDS)]
        transcripts = tuple(dataclasses.replace(t, text=f"I need a {word} appointment, call {n}") if t.speaker == "caller" else t
                            for t in base.transcripts[:3])
        errors = base.errors + ((ModelError("rate_limit_exceeded", "Rate limit reached", 1000),) if n % 7 == 0 else ())
        calls.append(dataclasses.replace(
            base, source=f"CAfill{n}.jsonl", call_sid=f"CAfill{n:05d}", agent=FILLER_AGENTS[n % len(FILLER_AGENTS)],
            carrier=FILLER_CARRIERS[n % len(FILLER_CARRIERS)], outcome=FILLER_OUTCOMES[n % len(FILLER_OUTCOMES)],
            started_at=newest_s - 60 * (n + 1), turns=turns, transcripts=transcripts, errors=errors))
    return calls


def start_console(workdir: Path, agent_call_too: bool = False, more_calls: int = 0, **settings: str) -> ConsoleAlone:
    """The console on a free port of 127.0.0.1; ``settings``: more VOICECORE_* variables."""
    port = free_port()
    record_dir, runtime_dir = workdir / "records", workdir / "run"
    record_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # exists: a console started again on the same store
    runtime_dir.mkdir(mode=0o700, exist_ok=True)
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
    agent_sid = ""
    with CallStore.open(database_url_for(config)) as store:
        store.ingest(summary)
        store.add_events(rows)
        # a console started again on the same store: another key
        key = store.add_api_key("ops" if not store.api_keys() else f"ops-{len(store.api_keys()) + 1}")
        transcript = store.call(sid)["transcript"]
        if agent_call_too or more_calls:
            call = agent_call("CA" + "a9" * 16)
            agent_record = record_dir / f"{call.header['call_sid']}.jsonl"
            write_record(call, agent_record)
            agent_summary = summarize_record(call.header, call.entries, agent_record.name, wall_end_s=time.time() - 120)
            agent_sid = agent_summary.call_sid
            store.ingest(agent_summary)
            agent_started = time.time() - 120 - agent_summary.duration_ms / 1000
            store.add_events([(agent_sid, seq, round(agent_started + t_ms / 1000, 3), t_ms, kind, json.dumps(data))
                              for seq, (t_ms, kind, data) in enumerate(events_of_record(call.header, call.entries), start=1)])
            for filler in filler_calls(agent_summary, more_calls, time.time() - 600):
                store.ingest(filler)
    log_path = workdir / "console.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "workers.console.main"], cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    console = ConsoleAlone(process, port, key, sid, len(rows), transcript, runtime_dir, log_path, agent_sid)

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
