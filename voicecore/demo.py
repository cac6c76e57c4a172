"""`voicecore demo`: bring the stack up, place simulated calls, tear down, report what callers heard.

Owns the demo's call script and the run's orchestration; the figures themselves come from
``voicecore.callreport`` (shared with the bench and the integration tests). Both simulators run in
this process, on one clock, so every latency is measured between two events on the same clock:
the model simulator's send of an event and the carrier simulator's receipt of its consequence.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from voicecore.callreport import StackCpu, summarize
from voicecore.config import Config, load_config
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallResult, CallScript, place_call
from voicecore.sim.model_core import SimConfig
from voicecore.sim.model_server import serve_model_sim
from voicecore.sim.quiet_gc import collector_paused
from voicecore.supervise import Stack, StackError, resolve_config

MIN_SECONDS = 13.0
# The model simulator speaks these in order: greeting, the answer that gets interrupted, the next answer.
DEMO_CLIPS = ("agent_greeting", "agent_basic_price", "agent_hours", "agent_cancel", "agent_sim_card")
FIRST_QUESTION_AT_MS = 5500  # after the 4.2 s greeting
BARGE_IN_AT_MS = 10_000  # about 1.8 s into the 5.6 s answer to the first question


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def demo_script(seconds: float) -> CallScript:
    """Greeting, a question, and a barge-in in the middle of the answer."""
    return CallScript(
        duration_ms=int(seconds * 1000),
        utterances=((FIRST_QUESTION_AT_MS, load_clip("caller_basic_price")), (BARGE_IN_AT_MS, load_clip("caller_interrupt"))),
        bargein_at_ms=(BARGE_IN_AT_MS,),
    )


def demo_config(base: Config, workdir: Path, calls: int, sim_port: int) -> Config:
    return dataclasses.replace(
        base,
        listen=f"127.0.0.1:{free_port()}",
        public_url="",
        realtime_url=f"ws://127.0.0.1:{sim_port}/v1/realtime",
        realtime_api_key="",
        runtime_dir=str(workdir / "run"),
        record_dir=str(workdir / "records"),
        max_calls=max(calls, 4),
    )


async def run_calls(config: Config, calls: int, seconds: float, ramp_ms: int = 0) -> list[CallResult]:
    script = demo_script(seconds)
    lead_frames = max(1, config.lead_ms // 20)

    async def one(index: int) -> CallResult:
        if ramp_ms:
            await asyncio.sleep(ramp_ms * index / max(1, calls) / 1000)
        return await place_call(config.base_url, config.twilio_auth_token, script, lead_frames)

    with collector_paused():
        return await asyncio.gather(*(one(i) for i in range(calls)))


async def _demo(calls: int, seconds: float, config_path: str | None, workdir: Path, log_file) -> dict:
    sim_config = SimConfig(clip_sequence=DEMO_CLIPS, late_deltas_after_cancel=2)
    sim, sim_port = await serve_model_sim("127.0.0.1", 0, sim_config)
    base = resolve_config(load_config(os.environ, config_path))
    config = demo_config(base, workdir, calls, sim_port)
    stack = Stack(config)
    try:
        await asyncio.to_thread(stack.start, log_file)
        await asyncio.to_thread(stack.wait_ready, 90.0)
        cpu = StackCpu(stack)
        cpu.start()
        started = time.monotonic()
        load_cpu_started = time.process_time()
        # Spread call starts over up to 1 s so 200 webhooks do not arrive in the same millisecond.
        results = await run_calls(config, calls, seconds, ramp_ms=min(1000, 5 * calls))
        wall_s = time.monotonic() - started
        load_cpu_s = time.process_time() - load_cpu_started
        cpu_s = cpu.stop()
        metrics = await asyncio.to_thread(_fetch_metrics, config)
    finally:
        await asyncio.to_thread(stack.stop)
        await sim.aclose()
    leftovers = sorted(p.name for p in Path(config.shm_dir).glob("voicecore-*")) if Path(config.shm_dir).is_dir() else []
    report = summarize(results, sim, seconds=seconds, cpu_seconds=cpu_s, wall_seconds=wall_s, stack_metrics=metrics)
    report["shm_leftovers"] = len(leftovers)
    # The simulators' own CPU: near one full core the load side, not the stack, is what callers "hear".
    report["load_cpu_fraction"] = round(load_cpu_s / wall_s, 3) if wall_s else 0.0
    report["ok"] = bool(report["ok"] and not leftovers and not Path(config.runtime_dir).exists())
    return report


def _fetch_metrics(config: Config) -> dict:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{config.listen}/metrics", timeout=5) as response:
            return json.load(response)
    except OSError:
        return {}


def run_demo(calls: int, seconds: float, as_json: bool, config_path: str | None, keep_logs: bool = False) -> int:
    if calls < 1:
        print("voicecore demo: --calls must be at least 1", file=sys.stderr)
        return 2
    if seconds < MIN_SECONDS:
        print(f"voicecore demo: --seconds must be at least {MIN_SECONDS:.0f} (greeting, question, barge-in)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="voicecore-demo-") as tmp:
        workdir = Path(tmp)
        log_path = workdir / "stack.log"
        with open(log_path, "wb") as log_file:
            try:
                report = asyncio.run(_demo(calls, seconds, config_path, workdir, log_file))
            except StackError as exc:
                print(f"voicecore demo: {exc}", file=sys.stderr)
                sys.stderr.write(log_path.read_text(errors="replace")[-4000:])
                return 1
        if keep_logs or not report["ok"]:
            sys.stderr.write(log_path.read_text(errors="replace")[-20000:])
    if as_json:
        print(json.dumps(report))
    else:
        print(format_report(report))
    return 0 if report["ok"] else 1


def format_report(report: dict) -> str:
    lines = [
        f"voicecore demo: {report['calls']} call(s) x {report['seconds']:.0f} s -> {'OK' if report['ok'] else 'FAILED'}",
        f"  frames sent        {report['frames_sent']}",
        f"  lateness ms        p50 {report['lateness_ms']['p50']:.2f}  p99 {report['lateness_ms']['p99']:.2f}  max {report['lateness_ms']['max']:.2f}",
        f"  underruns          {report['underruns']}",
        f"  stale frames       {report['stale_frames']}",
        f"  barge-ins          {report['bargeins']}  (decision -> clear ms p50 {report['bargein_to_clear_ms']['p50']:.2f}  p99 {report['bargein_to_clear_ms']['p99']:.2f})",
        f"  truncate error ms  max {report['truncate_error_ms']['max']:.1f}",
        f"  mouth-to-ear ms    p50 {report['mouth_to_ear_ms']['p50']:.1f}  p99 {report['mouth_to_ear_ms']['p99']:.1f}",
        f"  CPU ms per call-s  {report['cpu_ms_per_call_second']:.2f}",
    ]
    for problem in report.get("problems", []):
        lines.append(f"  problem: {problem}")
    return "\n".join(lines)
