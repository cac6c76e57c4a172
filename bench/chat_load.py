"""Many text sessions at once against the console's text channel: the runtime's time from a message to the first
line of its answer, and the console's CPU per session.

``python -m bench.chat_load --sessions 200`` starts the real console worker (``python -m workers.console.main``)
on 127.0.0.1 with an agent (``--agent``, default the interview example) and the model simulator (no vendor
configured: it answers at once on the conversation's virtual clock, so the time measured is the runtime's own:
the flow, the gate, the tools, the console's loop and the sockets). It opens ``--sessions`` sessions at once,
each over ``/chat`` (``--via ws``) or ``POST /chat/messages`` (``--via http``), and in each sends the agent's
messages one after the other, all sessions together. Per message it takes the time from sending it to the
first agent line (``response``) coming back (over HTTP: to the answer, which holds the turn's lines). CPU: the
console process's user+system time over the load (from /proc), divided by the sessions. Bounded: the whole
load is cut off after ``--timeout`` seconds (the sessions not done are counted in ``errors``). Prints one JSON
object. Nothing here is timed inside a test: these are figures for the docs.
"""

from __future__ import annotations

import argparse
import asyncio
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

from websockets.asyncio.client import connect

from voicecore.demo import free_port
from voicecore.store import CallStore

REPO = Path(__file__).resolve().parents[1]
MESSAGES = {  # what a session says, per agent: lines its demo's simulator rules answer
    "interview": ["Yes, I am ready to start.", "About five years, mostly Django and some data work."],
    "receptionist": ["What are your opening hours?", "Thanks, that is all. Goodbye."],
}


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"count": 0}
    ordered = sorted(samples)
    rank = lambda q: ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]  # nearest rank
    return {"p50": round(statistics.median(ordered), 1), "p99": round(rank(0.99), 1), "max": round(ordered[-1], 1),
            "count": len(ordered)}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Console:
    """The console worker with an agent, over a fresh store with one API key, on a free port of 127.0.0.1."""

    def __init__(self, workdir: Path, agent_dir: Path, sessions: int) -> None:
        record_dir, runtime_dir = workdir / "records", workdir / "run"
        record_dir.mkdir(mode=0o700)
        runtime_dir.mkdir(mode=0o700)
        with CallStore.open(f"sqlite:///{record_dir}/calls.db") as store:
            self.key = store.add_api_key("bench")
        self.port = free_port()
        env = {name: value for name, value in os.environ.items() if not name.startswith("VOICECORE_")}
        env.pop("OPENAI_API_KEY", None)  # the simulator, never a vendor
        env.update({"VOICECORE_RECORD_DIR": str(record_dir), "VOICECORE_RUNTIME_DIR": str(runtime_dir),
                    "VOICECORE_CONSOLE_LISTEN": f"127.0.0.1:{self.port}", "VOICECORE_LOG_LEVEL": "warning",
                    "VOICECORE_AGENT": str(agent_dir), "VOICECORE_CONSOLE_CHAT_LIMIT": str(100 * sessions + 1000),
                    "VOICECORE_CONSOLE_CHAT_SESSIONS": str(sessions + 100)})
        self.log_path = workdir / "console.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "workers.console.main"], cwd=REPO, env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the console exited ({self.process.returncode}): {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the console did not answer /healthz in 30 s") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)  # it stores every session still open as it stops
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()


async def ws_session(console: Console, lines: list[str], start: asyncio.Event, ready: list[int],
                     took: list[list[float]]) -> None:
    async with connect(f"ws://127.0.0.1:{console.port}/chat", additional_headers={"Authorization": f"Bearer {console.key}"},
                       open_timeout=60) as ws:
        while json.loads(await ws.recv())["type"] != "turn_end":  # the session, the greeting
            pass
        ready[0] += 1
        await start.wait()
        for n, line in enumerate(lines):
            sent = time.perf_counter()
            await ws.send(json.dumps({"type": "message", "text": line}))
            first = None
            while True:
                message = json.loads(await ws.recv())
                if message["type"] == "response" and first is None:
                    first = time.perf_counter()
                if message["type"] in ("turn_end", "ended", "error"):
                    break
            if first is not None:
                took[n].append((first - sent) * 1000)


async def post(port: int, key: str, body: dict) -> dict:
    """One POST /chat/messages on its own connection (the console closes it after the answer), all sessions'
    at once on this loop (a thread per request would cap how many are in flight)."""
    data = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST /chat/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        answer = await reader.read()
    finally:
        writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200":
        raise RuntimeError(f"POST /chat/messages: {status.decode()} {payload[:200]!r}")
    return json.loads(payload)


async def http_session(console: Console, lines: list[str], start: asyncio.Event, ready: list[int],
                       took: list[list[float]]) -> None:
    opened = await post(console.port, console.key, {})  # the greeting
    ready[0] += 1
    await start.wait()
    for n, line in enumerate(lines):
        sent = time.perf_counter()
        answer = await post(console.port, console.key, {"text": line, "session_id": opened["session_id"]})
        if answer["replies"]:
            took[n].append((time.perf_counter() - sent) * 1000)


async def load(console: Console, sessions: int, lines: list[str], via: str, timeout_s: float) -> dict[str, Any]:
    took: list[list[float]] = [[] for _ in lines]
    start = asyncio.Event()
    run = ws_session if via == "ws" else http_session
    cpu_before = cpu_seconds(console.process.pid)
    began = time.perf_counter()
    ready = [0]
    tasks = [asyncio.create_task(run(console, lines, start, ready, took)) for _ in range(sessions)]
    # every session open (its greeting in) before the messages go, so the messages are what is measured together
    while ready[0] + sum(1 for t in tasks if t.done()) < sessions and time.perf_counter() - began < timeout_s / 2:
        await asyncio.sleep(0.05)
    opening_s = time.perf_counter() - began
    start.set()
    done, pending = await asyncio.wait(tasks, timeout=max(1.0, timeout_s - opening_s))
    for task in pending:
        task.cancel()
    errors = [repr(t.exception())[:200] for t in done if t.exception() is not None]
    wall = time.perf_counter() - began
    cpu = cpu_seconds(console.process.pid) - cpu_before
    return {"sessions": sessions, "via": via, "messages_per_session": len(lines),
            "first_line_ms": {f"message_{n + 1}": percentiles(samples) for n, samples in enumerate(took)},
            "cpu_ms_per_session": round(1000 * cpu / sessions, 2), "console_cpu_s": round(cpu, 2),
            "opening_s": round(opening_s, 2), "wall_s": round(wall, 2), "errors": len(errors) + len(pending), "error_samples": errors[:3],
            "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chat_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--via", choices=("ws", "http"), default="ws")
    parser.add_argument("--agent", default="interview", choices=sorted(MESSAGES))
    parser.add_argument("--timeout", type=float, default=120.0, help="the whole load is cut off after this (s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voicecore-chat-load-") as tmp:
        console = Console(Path(tmp), REPO / "examples" / args.agent, args.sessions)
        try:
            result = asyncio.run(load(console, args.sessions, MESSAGES[args.agent], args.via, args.timeout))
        finally:
            console.stop()
    result["agent"] = args.agent
    print(json.dumps(result))
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
