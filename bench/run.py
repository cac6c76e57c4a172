"""`voicecore bench`: N simulated calls against a voicecore stack, measured in a steady window.

Owns the run's orchestration: the model simulator in one dedicated process (bench/simproc.py), the
stack under supervisord (voicecore.supervise.Stack, configured like the demo), K load processes that
place the carrier calls (bench/loadgen.py), pinning of both sides, CPU and memory sampling over the
measured window, the optional py-spy profile, and the capacity search loop. The figures come from
voicecore.callreport.summarize over the records restricted to the window (bench/analysis.py), so every
key of `voicecore demo --json` means the same here.

Timeline of one run (all CLOCK_MONOTONIC, system-wide, so the processes' times compare):
    t0 ........ t0+ramp ........ w0 = t0+ramp+settle ............ w1 = w0+seconds
    calls start one by one       every call is up: measure        every call ends (its script says so)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import analysis
from bench.capacity import CapacitySearch, Slo, capacity_load_bound, load_saturated, slo_violations
from bench.pinning import affinity_of, parse_cpus, pin_tree
from bench.scenarios import HALLUCINATION_UNGATED, SCENARIOS, get_scenario
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.callreport import TRUNCATE_TOLERANCE_MS, summarize
from voicecore.config import UNIX_PREFIX, load_config
from voicecore.demo import _fetch_metrics, demo_config
from voicecore.stats import percentile, summary
from voicecore.supervise import REPO_ROOT, Stack, StackError, cpu_seconds, resolve_config
from voicecore.timing import FRAME_MS

BASELINE_SERVER = REPO_ROOT / "bench" / "baseline_pipecat" / "server.py"
CLIPS_DIR = REPO_ROOT / "voicecore" / "sim" / "clips"
# With --transport unix the servers' URLs name no real host: every connection goes to the Unix socket.
UNIX_BASE_URL = "http://localhost"
CALLS_PER_LOAD_PROC = 150  # one carrier process stays well clear of saturation below this
CDF_QUANTILES = tuple([float(q) for q in range(0, 90, 2)] + [90 + q / 2 for q in range(0, 18)]
                      + [99 + q / 10 for q in range(0, 10)] + [99.95, 100.0])


@dataclass
class BenchOptions:
    calls: int = 10
    seconds: float = 10.0
    scenario: str = "steady"
    json_path: str | None = None
    png_path: str | None = None
    target: str | None = None
    auth_token: str = ""
    transport: str = "tcp"  # "unix": the carrier reaches the servers the bench starts over a Unix socket
    unix_socket: str = ""  # with target: the stack's Unix socket
    load_procs: int = 0  # 0: automatic
    pin_stack: str = ""
    pin_load: str = ""
    find_capacity: bool = False
    start_calls: int = 25
    max_calls: int = 1024
    resolution: int = 10
    slo: Slo = field(default_factory=Slo)
    profile: bool = False
    ramp_ms: float | None = None
    settle_ms: float = 1500.0
    starved_grace_ms: float = analysis.DEFAULT_STARVED_GRACE_MS
    baseline: str = ""  # "pipecat": measure the pipecat baseline too
    pipecat_venv: str = ""
    config_path: str | None = None
    keep_logs: bool = False


class BenchError(RuntimeError):
    pass


# ----- small process helpers ----------------------------------------------------------------------


def private_mb(pid: int) -> float:
    """Memory only this process holds (USS: private clean + dirty pages), in MB. Proportional or resident
    set sizes move when other processes map the same libraries (the load processes do), USS does not."""
    total_kb = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total_kb += int(line.split()[1])
    except OSError:
        return 0.0
    return total_kb / 1024.0


def arena_mb(config) -> float:
    """Pages of the shared-memory arena actually in use (tmpfs allocates on touch), counted once."""
    if config is None:
        return 0.0
    try:
        name = (Path(config.runtime_dir) / ARENA_NAME_FILE).read_text().strip()
        return os.stat(Path(config.shm_dir) / name).st_blocks * 512 / 2**20
    except (OSError, ValueError):
        return 0.0


def stack_memory_mb(pids: dict[str, int], config) -> dict[str, float]:
    memory = {name: private_mb(pid) for name, pid in pids.items()}
    memory["arena"] = arena_mb(config)
    return memory


def stack_pids(stack: Stack) -> dict[str, int]:
    pids = {name: pid for name, pid in stack.program_pids().items() if name != "modelsim"}
    if stack.process is not None:
        pids["supervisord"] = stack.process.pid
    return pids


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Progress:
    """One status line on stderr: a bar over the run's timeline, calls live, done and failed."""

    def __init__(self, label: str, total_s: float) -> None:
        self.label = label
        self.total_s = total_s
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last_print = 0.0

    def update(self, live: int, done: int, failed: int, calls: int, phase: str) -> None:
        now = time.monotonic()
        if not self.tty and now - self.last_print < 5.0:
            return
        self.last_print = now
        elapsed = now - self.started
        width = 30
        filled = min(width, int(width * elapsed / self.total_s)) if self.total_s else width
        line = (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {elapsed:5.1f}/{self.total_s:.1f} s "
                f"{phase:<9} live {live}/{calls} done {done} failed {failed}")
        sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
        sys.stderr.flush()

    def finish(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


# ----- one run --------------------------------------------------------------------------------------


async def _read_lines(stream: asyncio.StreamReader, sink: dict, key: int) -> None:
    while True:
        line = await stream.readline()
        if not line:
            return
        text = line.decode(errors="replace").strip()
        if text.startswith("{"):
            with contextlib.suppress(ValueError):
                sink[key] = json.loads(text)
        elif text:
            sink.setdefault("_lines", {}).setdefault(key, []).append(text)


async def _wait_file(path: Path, timeout_s: float, process: asyncio.subprocess.Process | None = None) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        if process is not None and process.returncode is not None:
            raise BenchError(f"{path.name}: the process exited with {process.returncode}")
        await asyncio.sleep(0.05)
    raise BenchError(f"timed out waiting for {path.name}")


def _cdf(values: list[float]) -> list[float]:
    return [round(percentile(values, q), 3) for q in CDF_QUANTILES]


async def _start_profile(pids: dict[str, int], sample_s: float, duration_s: float, out: Path,
                         pin_load: set[int] | None, calls: int) -> tuple[asyncio.subprocess.Process | None, dict]:
    """Sample the stack's CPU for sample_s, then py-spy the hottest process for duration_s."""
    info: dict = {}
    py_spy = _tool("py-spy")
    if py_spy is None:
        info["error"] = "py-spy is not installed (pip install 'voicecore[bench]')"
        return None, info
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    await asyncio.sleep(sample_s)
    usage = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    hottest = max(usage, key=usage.get)
    info.update(process=hottest, pid=pids[hottest], cpu_share_during_sample=round(usage[hottest] / sample_s, 3),
                svg=str(out.with_name(f"{out.name}-{hottest}-{calls}calls.svg")), seconds=round(duration_s, 1))
    process = await asyncio.create_subprocess_exec(
        py_spy, "record", "--pid", str(pids[hottest]), "--duration", str(max(1, int(duration_s))),
        "--rate", "100", "--nonblocking", "--format", "flamegraph", "--output", info["svg"],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    if pin_load:
        pin_tree(process.pid, pin_load)
    return process, info


async def _finish_profile(process: asyncio.subprocess.Process | None, info: dict) -> dict:
    if process is None:
        return info
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 30)
    except asyncio.TimeoutError:
        process.kill()
        output = b"py-spy did not finish in time"
    text = output.decode(errors="replace").strip()
    if process.returncode != 0 or not Path(info["svg"]).exists():
        hint = " (ptrace not permitted here: run as root or with CAP_SYS_PTRACE)" if "ermission" in text else ""
        info["error"] = f"py-spy exited with {process.returncode}{hint}: {text[-400:]}"
        info.pop("svg", None)
    else:
        from bench.report import hot_spots_from_svg

        info["hot_spots"] = hot_spots_from_svg(info["svg"])
    return info


def pipecat_venv(opts: BenchOptions) -> Path:
    return Path(opts.pipecat_venv or os.environ.get("VOICECORE_PIPECAT_VENV")
                or Path.home() / ".cache" / "voicecore-bench" / "pipecat-venv")


def _baseline_records(path: Path) -> list:
    """The pipecat server's per-call speech starts as SessionRecords (no responses: it is not the simulator)."""
    from voicecore.sim.model_core import SessionRecord, SpeechRecord

    records = []
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        item = json.loads(line)
        records.append(SessionRecord(
            session_id=item["call_sid"], session_index=0, naming="ga", model="pipecat-stand-in",
            connected_ms=int(item["connected_ms"]), call_sid=item["call_sid"],
            speech=[SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=t) for t in item["speech_started_ms"]]))
    return records


async def run_level(opts: BenchOptions, calls: int, workdir: Path, profile_out: Path | None = None,
                    system: str = "voicecore") -> dict:
    """One run of ``calls`` calls against voicecore (or the pipecat baseline); returns the report
    (callreport keys plus the bench's)."""
    scenario = get_scenario(opts.scenario)
    pin_stack = parse_cpus(opts.pin_stack) if opts.pin_stack else None
    pin_load = parse_cpus(opts.pin_load) if opts.pin_load else None
    load_cpus = len(pin_load) if pin_load else (os.cpu_count() or 1)
    procs = opts.load_procs or max(1, min(load_cpus, math.ceil(calls / CALLS_PER_LOAD_PROC)))
    procs = min(procs, calls)
    ramp_ms = opts.ramp_ms if opts.ramp_ms is not None else min(15_000.0, max(float(scenario.cycle_ms), 10.0 * calls))
    settle_ms = opts.settle_ms
    problems: list[str] = []
    cpus_arg = ",".join(map(str, sorted(pin_load))) if pin_load else ""

    sim_proc = None
    baseline_proc = None
    stack = None
    unix_socket: str | None = None
    log_path = workdir / "stack.log"
    log_file = open(log_path, "wb")
    loads: list[asyncio.subprocess.Process] = []
    readers: list[asyncio.Task] = []
    status: dict = {}
    profile_proc = None
    profile_info: dict = {}
    try:
        if system == "pipecat":
            python = pipecat_venv(opts) / "bin" / "python"
            if not python.exists():
                raise BenchError(f"no pipecat venv at {python.parent.parent}: run bench/baseline_pipecat/setup_venv.sh first")
            port_file = workdir / "baseline.port"
            if opts.transport == "unix":
                unix_socket = str(workdir / "baseline.sock")
            baseline_proc = await asyncio.create_subprocess_exec(
                str(python), str(BASELINE_SERVER), "--port-file", str(port_file), "--records",
                str(workdir / "baseline.jsonl"), "--clips", str(CLIPS_DIR), "--sequence",
                ",".join(scenario.sim_config.clip_sequence), *(["--uds", unix_socket] if unix_socket else []),
                stdout=log_file, stderr=subprocess.STDOUT)
            port = int(await _wait_file(port_file, 90, baseline_proc))
            if pin_stack:
                pin_tree(baseline_proc.pid, pin_stack)
            base_url = UNIX_BASE_URL if unix_socket else f"http://127.0.0.1:{port}"
            token, config = "baseline", None
        elif opts.target:
            base_url = opts.target.rstrip("/")
            unix_socket = opts.unix_socket or None
            token = opts.auth_token or os.environ.get("VOICECORE_TWILIO_AUTH_TOKEN", "")
            if not token:
                raise BenchError("--target needs the stack's Twilio auth token (--auth-token or VOICECORE_TWILIO_AUTH_TOKEN)")
            config = None
        else:
            port_file = workdir / "sim.port"
            sim_proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.simproc", "--scenario", opts.scenario, "--port-file", str(port_file),
                "--out", str(workdir / "sim.pkl"), *(["--cpus", cpus_arg] if cpus_arg else []),
                env=_env(), stdout=log_file, stderr=subprocess.STDOUT)
            sim_port = int(await _wait_file(port_file, 30, sim_proc))
            # The scenario's own settings (the hallucination scenario's gate) win over the caller's.
            base = resolve_config(load_config({**os.environ, **dict(scenario.stack_env)}, opts.config_path))
            # A few spare slots: the warm-up call's slot may still be closing when the load starts.
            config = dataclasses.replace(demo_config(base, workdir, calls, sim_port, record_dir=base.record_dir), max_calls=calls + 4)
            if opts.transport == "unix":
                unix_socket = str(workdir / "gateway.sock")
                config = dataclasses.replace(config, listen=UNIX_PREFIX + unix_socket, public_url=UNIX_BASE_URL)
            stack = Stack(config)
            await asyncio.to_thread(stack.start, log_file)
            await asyncio.to_thread(stack.wait_ready, 90.0)
            base_url, token = config.base_url, config.twilio_auth_token
            if pin_stack:
                pin_tree(stack.process.pid, pin_stack)
        # The carrier's lateness formula takes the sender's intended send-ahead: voicecore keeps lead_ms
        # queued at the carrier; pipecat sends each frame in real time with no lead (its own schedule).
        lead_frames = 1 if system == "pipecat" else max(1, (config.lead_ms if config else 80) // FRAME_MS)
        pids = stack_pids(stack) if stack else ({"pipecat": baseline_proc.pid} if baseline_proc else {})
        idle_memory = stack_memory_mb(pids, config)

        # One short call first, unmeasured: one-time costs of a first call (lazy imports, first
        # connection set-up) must not land in the run, for either system.
        from voicecore.sim.carrier import CallScript, place_call

        warm = await place_call(base_url, token, CallScript(duration_ms=1500), lead_frames, unix_socket=unix_socket)
        if warm.closed_by != "carrier" or warm.errors:
            raise BenchError(f"the warm-up call failed: {warm.closed_by} {'; '.join(warm.errors)[:300]}")
        env = _env()
        env["BENCH_TWILIO_AUTH_TOKEN"] = token
        for k in range(procs):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.loadgen", "--base-url", base_url, "--scenario", opts.scenario,
                "--calls-total", str(calls), "--procs", str(procs), "--proc-index", str(k),
                "--seconds", str(opts.seconds), "--ramp-ms", str(ramp_ms), "--settle-ms", str(settle_ms),
                "--lead-frames", str(lead_frames), "--out", str(workdir / f"load-{k}.pkl"),
                *(["--unix-socket", unix_socket] if unix_socket else []),
                *(["--cpus", cpus_arg] if cpus_arg else []),
                env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log_file)
            loads.append(proc)
        for k, proc in enumerate(loads):
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise BenchError(f"load process {k} did not start: {line[:200]!r}")
            readers.append(asyncio.create_task(_read_lines(proc.stdout, status, k)))
        t0_ms = time.monotonic() * 1000.0 + 200.0
        for proc in loads:
            proc.stdin.write((json.dumps({"t0_ms": t0_ms}) + "\n").encode())
            await proc.stdin.drain()
            proc.stdin.close()
        w0 = t0_ms + ramp_ms + settle_ms
        w1 = w0 + opts.seconds * 1000.0
        total_s = (w1 - time.monotonic() * 1000.0) / 1000.0 + 1.0
        progress = Progress(f"bench {opts.scenario} {calls} calls", total_s)

        def show(phase: str) -> None:
            live = sum(s.get("live", 0) for k, s in status.items() if isinstance(k, int))
            done = sum(s.get("done", 0) for k, s in status.items() if isinstance(k, int))
            failed = sum(s.get("failed", 0) for k, s in status.items() if isinstance(k, int))
            progress.update(live, done, failed, calls, phase)

        async def sleep_until(when_ms: float, phase: str) -> None:
            while (left := when_ms / 1000.0 - time.monotonic()) > 0:
                show(phase)
                await asyncio.sleep(min(0.5, left))

        await sleep_until(w0, "ramp-up")
        live_at_w0 = sum(s.get("live", 0) for k, s in status.items() if isinstance(k, int))
        load_pids = [p.pid for p in loads] + ([sim_proc.pid] if sim_proc else [])
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load_before = {pid: cpu_seconds(pid) for pid in load_pids}
        window_started = time.monotonic()
        if opts.profile and pids and profile_out is not None:
            sample_s = min(2.0, opts.seconds / 4)
            profile_proc, profile_info = await _start_profile(
                pids, sample_s, opts.seconds - sample_s - 0.5, profile_out, pin_load, calls)
        elif opts.profile and not pids:
            profile_info = {"error": "no stack processes to profile (--target)"}
        await sleep_until(w1, "measuring")
        window_s = time.monotonic() - window_started
        # A process that restarted during the window counts from zero: all its CPU was in the window.
        current = stack_pids(stack) if stack else pids
        cpu_by_process = {name: cpu_seconds(pid) - cpu_before.get(name, 0.0) for name, pid in current.items()}
        cpu_s = sum(cpu_by_process.values())
        load_cpu_by_pid = {pid: cpu_seconds(pid) - before for pid, before in load_before.items()}
        load_cpu_s = sum(load_cpu_by_pid.values())
        loaded_memory = stack_memory_mb(current, config)
        affinity = {name: affinity_of(pid) for name, pid in current.items()}
        affinity["load"] = affinity_of(loads[0].pid) if loads else []
        for proc in loads:
            while proc.returncode is None:
                show("ending")
                try:
                    await asyncio.wait_for(proc.wait(), 1.0)
                except asyncio.TimeoutError:
                    if time.monotonic() * 1000.0 > w1 + 40_000:
                        proc.kill()
                        problems.append("a load process did not finish in time and was killed")
        progress.finish()
        profile_info = await _finish_profile(profile_proc, profile_info)
        metrics = await asyncio.to_thread(_fetch_metrics, config) if config else {}
    finally:
        for proc in loads:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        for task in readers:
            task.cancel()
        if sim_proc is not None and sim_proc.returncode is None:
            sim_proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(sim_proc.wait(), 60)
            except asyncio.TimeoutError:
                sim_proc.kill()
        if baseline_proc is not None and baseline_proc.returncode is None:
            baseline_proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(baseline_proc.wait(), 20)
            except asyncio.TimeoutError:
                baseline_proc.kill()
        if stack is not None:
            await asyncio.to_thread(stack.stop)
        log_file.close()

    # ---- the figures ----
    results_meta = []
    for k in range(procs):
        path = workdir / f"load-{k}.pkl"
        if not path.exists():
            problems.append(f"load process {k} wrote no results")
            continue
        with open(path, "rb") as f:
            results_meta.extend(pickle.load(f))
    records = []
    if (workdir / "sim.pkl").exists():
        with open(workdir / "sim.pkl", "rb") as f:
            records = pickle.load(f)
    elif system == "pipecat":
        records = _baseline_records(workdir / "baseline.jsonl")
    elif not opts.target:
        problems.append("the model simulator wrote no records")
    full = analysis.RecordSet(records)
    trimmed_records = analysis.trim_records(records, w0, w1)
    trimmed = []
    available = starved = lost_out = lost_in = late_starts = re_anchored = 0
    raw_lateness: list[float] = []
    for result, meta in results_meta:
        call_records = full.records(result.call_sid)
        a, s = analysis.split_underruns(result, call_records, w0, w1, opts.starved_grace_ms)
        available += a
        starved += s
        o, i = analysis.frames_lost(result, call_records, meta["end_ms"], measure_inbound=system == "voicecore")
        lost_out += o
        lost_in += i
        if meta.get("send_origin_ms") is not None and meta["send_origin_ms"] > w0:
            late_starts += 1
        t, trim_problems, anchored = analysis.trim_result(result, w0, w1, call_records, lead_frames)
        re_anchored += anchored
        if result.core is not None:
            timed = [f for f in result.core.frames if f.index_in_tag is not None]
            raw_lateness.extend(v for f, v in zip(timed, result.core.metrics.lateness_ms) if w0 <= f.arrival_ms < w1)
        trimmed.append(t)
        problems.extend(trim_problems)
    if late_starts:
        problems.append(f"{late_starts} calls started after the measured window opened (raise --settle-ms)")
    # A call must show a clear only if the window is long enough to hold one of its barge-ins for sure.
    expect_bargeins = scenario.expect_bargeins and opts.seconds * 1000 >= scenario.cycle_ms + 1000
    report = summarize(trimmed, trimmed_records, seconds=opts.seconds, cpu_seconds=cpu_s, wall_seconds=window_s,
                       stack_metrics=metrics, expect_bargeins=expect_bargeins, window_ms=(w0, w1))
    report["problems"] = (report["problems"] + problems)[:50]
    lateness = [v for t in trimmed if t.core is not None for v in t.core.metrics.lateness_ms]
    report["scenario"] = opts.scenario
    report["system"] = system
    report["transport"] = "unix" if unix_socket else "tcp"
    report["underruns_audio_available"] = available
    report["underruns_model_starved"] = starved
    # lateness_ms is the carrier's formula re-anchored where the model had not sent the audio yet;
    # the carrier's own figures (a stall makes every later frame of the response "late") stay here.
    report["lateness_ms_unadjusted"] = summary(raw_lateness)
    report["lateness_frames_model_starved"] = re_anchored
    report["frames_lost"] = lost_out + lost_in
    report["frames_lost_outbound"] = lost_out
    report["frames_lost_inbound"] = lost_in
    idle_private = sum(v for k, v in idle_memory.items() if k != "arena")
    loaded_private = sum(v for k, v in loaded_memory.items() if k != "arena")
    # Memory per call: what the calls added to the processes' private pages, plus the whole arena
    # (voicecore sizes it for the run's call slots up front, so all of it is per-call memory).
    report["rss_per_call_mb"] = round((loaded_private - idle_private + loaded_memory.get("arena", 0.0)) / calls, 4) if pids else 0.0
    report["stack_memory_mb"] = {"idle": {k: round(v, 1) for k, v in idle_memory.items()},
                                 "loaded": {k: round(v, 1) for k, v in loaded_memory.items()}}
    report["cpu_ms_per_call_second_by_process"] = {
        name: round(s * 1000 / (calls * opts.seconds), 3) for name, s in sorted(cpu_by_process.items())}
    report["load_cpu_fraction"] = round(load_cpu_s / window_s, 3) if window_s else 0.0
    # Which half of the load side is busy: the carrier simulator (load processes) or the model simulator.
    sim_pid = sim_proc.pid if sim_proc is not None else None
    report["load_cpu_fraction_by_role"] = {
        "carrier": round(sum(v for pid, v in load_cpu_by_pid.items() if pid != sim_pid) / window_s, 3) if window_s else 0.0,
        "model_sim": round(load_cpu_by_pid.get(sim_pid, 0.0) / window_s, 3) if window_s and sim_pid else 0.0,
    }
    report["model_event_rates"] = analysis.model_event_rates(records, w0, w1)
    report["calls_live_at_window_start"] = live_at_w0
    report["stack_processes_measured"] = bool(pids)  # False with --target: CPU and memory are not ours to read
    report["load_procs"] = procs
    report["load_cpus"] = load_cpus
    report["load_saturated"] = load_saturated(report)
    report["window"] = {"ramp_ms": ramp_ms, "settle_ms": settle_ms, "seconds": opts.seconds}
    report["affinity"] = affinity
    report["lateness_cdf_ms"] = _cdf(lateness)
    if opts.scenario in ("hallucination", HALLUCINATION_UNGATED):
        figures = analysis.hallucination_figures(
            (result, trimmed_records.records(result.call_sid)) for result, _ in results_meta)
        first_audio = figures.pop("first_audio_ms")
        report.update(figures)
        report["gated_first_audio_ms" if opts.scenario == "hallucination" else "ungated_first_audio_ms"] = first_audio
    if opts.profile:
        report["profile"] = profile_info
    violations = slo_violations(report, opts.slo)
    report["slo_violations"] = violations
    report["slo_ok"] = not violations
    truncate_max = report["truncate_error_ms"]["max"]
    # summarize's invariants, with underruns judged only where the model had sent the audio.
    report["ok"] = bool(calls and report["calls_completed"] == calls and report["stale_frames"] == 0
                        and report["overlapping_frames"] == 0 and report["bargeins_without_clear"] == 0
                        and available == 0 and not report["problems"] and truncate_max <= TRUNCATE_TOLERANCE_MS)
    if opts.keep_logs or not report["ok"]:
        report["_log_tail"] = log_path.read_text(errors="replace")[-6000:]
    return report


# ----- the command ----------------------------------------------------------------------------------


def format_hallucination(top: dict) -> str:
    """The hallucination scenario's figures, gated run then the ungated one, for the console."""
    lines = []
    for label, run, key in (("gate on ", top, "gated_first_audio_ms"),
                            ("gate off", top.get("ungated", {}), "ungated_first_audio_ms")):
        first = run.get(key, {})
        lines.append(f"{label}: answers {run.get('answers', 0)}, hallucinated {run.get('hallucinated_answers', 0)}, "
                     f"hallucinated frames played {run.get('hallucinated_frames_played', 0)}, "
                     f"false rejections {run.get('false_rejections', 0)}, safe lines played {run.get('safe_lines_played', 0)}, "
                     f"first audio p50/p99 {first.get('p50', 0.0):.1f}/{first.get('p99', 0.0):.1f} ms")
    added = top.get("gate_added_first_audio_ms")
    if added:
        lines.append(f"gate adds to first audio: p50 {added['p50']:.1f} ms, p99 {added['p99']:.1f} ms")
    return "\n".join(lines)


def _configuration(opts: BenchOptions) -> dict:
    scenario = get_scenario(opts.scenario)
    options = dataclasses.asdict(opts)
    options.pop("auth_token", None)
    options["slo"] = opts.slo.as_dict()
    return {"options": options, "scenario": {"name": scenario.name, "description": scenario.description,
                                             "sim_config": dataclasses.asdict(scenario.sim_config),
                                             "stack_env": dict(scenario.stack_env)},
            "config_file": opts.config_path}


async def _one_step(opts: BenchOptions, system: str, calls: int, profile_out: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"voicecore-bench-{system}-") as tmp:
        return await run_level(opts, calls, Path(tmp), profile_out, system)


def _summary_top(runs: list[dict], search: CapacitySearch | None) -> dict:
    """The top-level figures of one system: its single run, or the largest N that held plus the search."""
    if search is None:
        return dict(runs[-1])
    good = [r for r in runs if r["calls"] == search.capacity]
    top = dict(good[-1]) if good else {"system": runs[-1].get("system"), "scenario": runs[-1].get("scenario")}
    top.update(capacity_calls=search.capacity, capacity_capped=search.capped,
               capacity_load_bound=capacity_load_bound(runs, search),
               capacity_history=[{"calls": c, "held": ok} for c, ok in search.history])
    return top


async def _bench(opts: BenchOptions) -> dict:
    from bench.report import machine_info, versions

    # SIGTERM (a supervisor, `timeout`, kill) cancels the run like Ctrl-C does, so every step's finally
    # stops its stack and load processes: nothing is left running or in /dev/shm.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)

    json_path = Path(opts.json_path) if opts.json_path else None
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)  # before an hour of runs, not after
    profile_base = (json_path.parent if json_path else Path.cwd()) / ((json_path.stem if json_path else "bench") + "-profile")
    systems = ["voicecore"] + (["pipecat"] if opts.baseline == "pipecat" else [])
    runs: dict[str, list[dict]] = {system: [] for system in systems}
    searches: dict[str, CapacitySearch | None] = {
        system: CapacitySearch(start=opts.start_calls, max_calls=opts.max_calls, resolution=opts.resolution)
        if opts.find_capacity else None for system in systems}

    def profile_out(system: str) -> Path | None:
        if not opts.profile:
            return None
        return profile_base if system == "voicecore" else profile_base.with_name(profile_base.name + "-pipecat")

    # The systems take turns, one step each, so slow drift on a shared machine hits both alike.
    pending = True
    while pending:
        pending = False
        for system in systems:
            search = searches[system]
            if search is None:
                if runs[system]:
                    continue
                runs[system].append(await _one_step(opts, system, opts.calls, profile_out(system)))
                continue
            calls = search.next_calls()
            if calls is None:
                continue
            pending = True
            report = await _one_step(opts, system, calls, profile_out(system))
            passed = report["slo_ok"] and not report["problems"]
            search.record(calls, passed)
            runs[system].append(report)
            verdict = "held" if passed else "broke: " + "; ".join(report["slo_violations"] or report["problems"][:2])
            print(f"bench: {system} {calls} calls -> {verdict}", file=sys.stderr, flush=True)
    top = _summary_top(runs["voicecore"], searches["voicecore"])
    top.pop("_log_tail", None)
    top["runs"] = [{k: v for k, v in run.items() if k != "_log_tail"} for run in runs["voicecore"]] if opts.find_capacity else []
    if "pipecat" in systems:
        baseline = _summary_top(runs["pipecat"], searches["pipecat"])
        baseline.pop("_log_tail", None)
        baseline["runs"] = [{k: v for k, v in run.items() if k != "_log_tail"} for run in runs["pipecat"]] if opts.find_capacity else []
        top["baseline"] = baseline
        if opts.find_capacity:
            top["baseline_capacity_calls"] = baseline["capacity_calls"]
            top["capacity_ratio"] = round(top["capacity_calls"] / baseline["capacity_calls"], 2) if baseline["capacity_calls"] else None
        if baseline.get("cpu_ms_per_call_second") and top.get("cpu_ms_per_call_second"):
            top["cpu_per_call_ratio"] = round(baseline["cpu_ms_per_call_second"] / top["cpu_ms_per_call_second"], 2)
    if opts.scenario == "hallucination":
        # The same calls once more with the gate off: what the gate adds to the time to first audio.
        ungated = await _one_step(dataclasses.replace(opts, scenario=HALLUCINATION_UNGATED), "voicecore", opts.calls, None)
        ungated.pop("_log_tail", None)
        ungated.pop("lateness_cdf_ms", None)
        top["ungated_first_audio_ms"] = ungated["ungated_first_audio_ms"]
        top["gate_added_first_audio_ms"] = {
            q: round(top["gated_first_audio_ms"][q] - ungated["ungated_first_audio_ms"][q], 3) for q in ("p50", "p99")}
        top["ungated"] = ungated
    top["slo"] = opts.slo.as_dict()
    top["machine"] = machine_info()
    top["versions"] = versions()
    top["configuration"] = _configuration(opts)
    top["_runs_full"] = runs
    return top


def run_bench(opts: BenchOptions) -> int:
    from bench.report import format_table, write_png

    if opts.scenario not in SCENARIOS:
        print(f"voicecore bench: unknown scenario {opts.scenario!r}", file=sys.stderr)
        return 2
    if opts.baseline not in ("", "pipecat"):
        print(f"voicecore bench: unknown baseline {opts.baseline!r} (only pipecat)", file=sys.stderr)
        return 2
    if opts.baseline and opts.scenario == "model-stall":
        print("voicecore bench: the pipecat baseline's model stand-in does not stall; use another scenario", file=sys.stderr)
        return 2
    if opts.baseline and opts.scenario == "overlap":
        print("voicecore bench: the pipecat baseline's model stand-in never overlaps responses; use another scenario",
              file=sys.stderr)
        return 2
    if opts.baseline and not (pipecat_venv(opts) / "bin" / "python").exists():
        print(f"voicecore bench: no pipecat venv at {pipecat_venv(opts)}: run bench/baseline_pipecat/setup_venv.sh "
              "first (or pass --pipecat-venv)", file=sys.stderr)
        return 2
    if opts.scenario == "hallucination" and (opts.baseline or opts.target or opts.find_capacity):
        print("voicecore bench: the hallucination scenario starts its own stack twice (gate on, then off): "
              "not with --baseline, --target or --find-capacity", file=sys.stderr)
        return 2
    if opts.baseline and opts.target:
        print("voicecore bench: --baseline needs the bench to start both servers (no --target)", file=sys.stderr)
        return 2
    if opts.unix_socket and not opts.target:
        print("voicecore bench: --unix-socket is for --target (a stack the bench did not start); "
              "use --transport unix for the servers the bench starts", file=sys.stderr)
        return 2
    if opts.target and opts.transport != "tcp":
        print("voicecore bench: with --target, give the stack's socket with --unix-socket PATH", file=sys.stderr)
        return 2
    if opts.calls < 1 or opts.seconds < 2:
        print("voicecore bench: need --calls >= 1 and --seconds >= 2", file=sys.stderr)
        return 2
    try:
        for cpus in (opts.pin_stack, opts.pin_load):
            if cpus:
                parse_cpus(cpus)
    except ValueError as exc:
        print(f"voicecore bench: {exc}", file=sys.stderr)
        return 2
    try:
        top = asyncio.run(_bench(opts))
    except (BenchError, StackError) as exc:
        print(f"voicecore bench: {exc}", file=sys.stderr)
        return 1
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("voicecore bench: stopped; the stack and load processes were shut down", file=sys.stderr)
        return 130
    all_runs = top.pop("_runs_full")
    runs = all_runs["voicecore"]
    last = runs[-1]
    if "_log_tail" in last and (opts.keep_logs or not last.get("ok")):
        sys.stderr.write(last["_log_tail"] + "\n")
    for system_runs in all_runs.values():
        for run in system_runs:
            run.pop("_log_tail", None)
    print(format_table(top, runs))
    if opts.scenario == "hallucination":
        print(format_hallucination(top))
    if "baseline" in top:
        print()
        print(format_table({**top["baseline"], "machine": top["machine"]}, all_runs["pipecat"]))
        if top.get("capacity_ratio") is not None:
            print(f"capacity ratio voicecore / pipecat: {top['capacity_ratio']}x")
        if top.get("cpu_per_call_ratio") is not None:
            print(f"CPU per call-second pipecat / voicecore: {top['cpu_per_call_ratio']}x")
    if opts.json_path:
        Path(opts.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.json_path).write_text(json.dumps(top, indent=1) + "\n")
        print(f"bench: JSON report written to {opts.json_path}", file=sys.stderr)
    png = opts.png_path or (str(Path(opts.json_path).with_suffix(".png")) if opts.json_path else None)
    if png:
        message = write_png(png, top, runs, all_runs.get("pipecat"))
        print(f"bench: {message}", file=sys.stderr)
    if opts.find_capacity:
        return 0 if top.get("capacity_calls", 0) > 0 else 1
    return 0 if top.get("slo_ok") and top.get("calls_completed") == top.get("calls") else 1
