"""`voicecore bench`: N simulated calls against a voicecore stack, measured in a steady window.

Owns the run's orchestration: the model simulator in one dedicated process (bench/simproc.py), the
stack under supervisord (voicecore.supervise.Stack, configured like the demo), K load processes that
place the carrier calls (bench/loadgen.py), pinning of both sides, CPU and memory sampling over the
measured window, the optional py-spy profile, the capacity search loop, and --compare-store (the same
stack without and with records and the call store, taking turns, and the store's write cost). The
figures come from voicecore.callreport.summarize over the records restricted to the window
(bench/analysis.py), so every key of `voicecore demo --json` means the same here.

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
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import analysis
from bench.analysis import CDF_QUANTILES
from bench.capacity import (CapacitySearch, Slo, capacity_load_bound, capacity_summary, load_bound, load_process_cpu,
                            load_saturated, parse_resolution, slo_verdict, slo_violations)
from bench.pinning import affinity_of, parse_cpus, pin_tree
from bench.scenarios import AGENT_PREFIX, HALLUCINATION_UNGATED, SCENARIOS, get_scenario
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.callreport import TRUNCATE_TOLERANCE_MS, summarize
from voicecore.config import UNIX_PREFIX, load_config
from voicecore.demo import carrier_config, demo_config, fetch_gateway_metrics, frame_matching
from voicecore.errors import DependencyError
from voicecore.stats import percentile
from voicecore.store import CallStore, database_url_for
from voicecore.processes import cpu_seconds, kernel_cpu_seconds
from voicecore.supervise import REPO_ROOT, Stack, StackError, resolve_config
from voicecore import timing
from voicecore.timing import FRAME_MS

BASELINE_SERVERS = {"pipecat": REPO_ROOT / "bench" / "baseline_pipecat" / "server.py",
                    "pipecat-realtime": REPO_ROOT / "bench" / "baseline_pipecat" / "realtime_server.py"}
BASELINES = tuple(BASELINE_SERVERS)
# What the baselines leave out of the work voicecore does per call (the report's baseline_leaves_out).
BASELINE_LEAVES_OUT = {
    "pipecat": ["model socket (a WebSocket per call to the model)", "JSON parsing of the model's events",
                "base64 of the model's audio deltas and of the caller's audio", "Silero VAD (pipecat's own turn "
                "detection; the stand-in's VAD is an RMS threshold, like the model simulator's server VAD)"],
    "pipecat-realtime": ["Silero VAD (turns come from the model's server VAD, as voicecore's do)",
                         "resampling 8 <-> 24 kHz (pipecat's stock OpenAI service works in 24 kHz PCM; the bench's "
                         "G711RealtimeService uses the session's 8 kHz audio/pcmu, less work than stock pipecat)"],
}
# The baselines' own delivery knobs, as the bench runs them (pipecat 1.14's defaults).
BASELINE_SETTINGS = {"audio_out_10ms_chunks": 4, "audio_out_auto_silence": True, "marks": False,
                     "serializer": "TwilioFrameSerializer(auto_hang_up=False)", "sample_rate_hz": 8000}
# --privileges on: the pipecat server's nice value, as voicecore's gateway (the process that writes the
# socket); its one event loop also paces, but SCHED_FIFO on a process that can use a whole core would
# starve everything else on it (voicecore's pacer sleeps almost all of every tick).
BASELINE_NICE = -10
PRIORITY_ENV = "VOICECORE_REALTIME_PRIORITY"  # "0": the pacer and the gateway ask for no priority
CLIPS_DIR = REPO_ROOT / "voicecore" / "sim" / "clips"
# With --transport unix the servers' URLs name no real host: every connection goes to the Unix socket.
UNIX_BASE_URL = "http://localhost"
# --compare-store: the second system, the same stack with records on, so the recorder fills the SQLite call
# store (and stores the model worker's live observer events) and the console runs.
STORE_SYSTEM = "voicecore-store"
STORE_CPU_TARGET_MS = 0.1  # the most the store's writes may cost: the recorder's CPU ms per call-second
STORE_WAIT_S = 15.0  # after the calls ended: how long the recorder may take to ingest their records
CALLS_PER_LOAD_PROC = 150  # one carrier process stays well clear of saturation below this


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
    resolution: str = "2%"  # "10": calls; "2%": of the last count that held
    slo: Slo = field(default_factory=Slo)
    profile: bool = False
    ramp_ms: float | None = None
    settle_ms: float = 1500.0
    starved_grace_ms: float = analysis.DEFAULT_STARVED_GRACE_MS
    baseline: str = ""  # "pipecat", "pipecat-realtime" or both, comma-separated: measure those baselines too
    privileges: str = "on"  # "on": pacer SCHED_FIFO, gateway and pipecat nice -10; "off": none of them
    repeat: int = 1  # capacity searches per system
    pipecat_venv: str = ""
    config_path: str | None = None
    keep_logs: bool = False
    save: str = ""  # also write the JSON to bench/results/<date>-<save>.json (results_path)
    compare_store: bool = False  # also run STORE_SYSTEM, taking turns with voicecore: the report's store_comparison
    chaos_faults: str = ""  # --scenario chaos: the faults to inject, in order ("": all; bench/chaos.py)
    soak: float = 0.0  # > 0: `--soak SECONDS`, a leak watch under churning calls instead of a run (bench/soak.py)
    bad_input: bool = False  # --bad-input: the run without and with the gateway attacked (bench/badinput.py)
    carrier: str = "twilio"  # --carrier: the carrier the simulated calls come from (voicecore/sim/carrier_modes_core.py)
    model_vendor: str = "openai"  # --model-vendor: the Realtime simulator, or Gemini Live's (voicecore/sim/gemini.py)


class BenchError(DependencyError, RuntimeError):
    pass


def baseline_names(text: str) -> list[str]:
    """--baseline "pipecat,pipecat-realtime" -> both, in that order (each system's searches then alternate
    with voicecore's in one run). Raises ValueError on a name that is not a baseline or a repeated one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline {', '.join(map(repr, unknown))} (pipecat, pipecat-realtime, or both comma-separated)")
    if len(set(names)) != len(names):
        raise ValueError(f"baseline {text!r} names a system twice")
    return names


# ----- --compare-store ------------------------------------------------------------------------------


def wait_for_stored_calls(url: str, call_sids: set[str], timeout_s: float) -> tuple[dict[str, float], int, str]:
    """Wait up to ``timeout_s`` for every call of ``call_sids`` to be in the call store at ``url`` (the
    recorder ingests a record within about a second of its call's end). Returns the calls found, each
    with its stored seconds (all its parts), the rows of the events table, and why the store could not be
    read ("" when it could). Blocking: a thread's job."""
    deadline = time.monotonic() + timeout_s
    found: dict[str, float] = {}
    events = 0
    error = ""
    store = None
    try:
        while True:
            try:
                store = store or CallStore.open(url)
                found = {}
                for sid, duration_ms in store.backend.execute("SELECT call_sid, duration_ms FROM calls").fetchall():
                    found[sid] = found.get(sid, 0.0) + (duration_ms or 0) / 1000.0
                events = store.backend.execute("SELECT COUNT(*) FROM events").fetchone()[0]
                error = ""
            except Exception as exc:  # noqa: BLE001 (a store the bench cannot read is a figure to report, not a crash)
                error = f"{type(exc).__name__}: {exc}"
            if call_sids <= found.keys() or time.monotonic() >= deadline:
                return found, events, error
            time.sleep(0.2)
    finally:
        if store is not None:
            store.close()


STORE_COMPARED_KEYS = ("underruns_audio_available", "stale_frames", "cpu_ms_per_call_second",
                       "cpu_ms_per_call_second_by_process")


def store_comparison(off: dict, on: dict, target_ms: float = STORE_CPU_TARGET_MS) -> dict:
    """The report's store_comparison from the two runs' reports: voicecore without records ("off") and
    STORE_SYSTEM ("on"). The store's write cost is the recorder process's CPU over the measured window;
    the console's is apart. The records' ingest happens when calls end, after the window in a bench run
    (every call ends at its end), so it is its own figure: the recorder's CPU from the window's end until
    the last call was stored, per second of the calls stored."""

    def side(report: dict) -> dict:
        late = report.get("lateness_ms", {})
        figures = {"lateness_ms": {q: late.get(q, 0.0) for q in ("p50", "p99", "p999", "max")}}
        figures.update({key: report.get(key, {} if key.endswith("_by_process") else 0) for key in STORE_COMPARED_KEYS})
        figures["calls_completed"] = report.get("calls_completed", 0)
        return figures

    by_process = on.get("cpu_ms_per_call_second_by_process", {})
    store = on.get("call_store", {})
    store_cpu = by_process.get("recorder", 0.0)
    ingest_cpu_s, call_seconds = store.get("ingest_cpu_s", 0.0), store.get("stored_call_seconds", 0.0)
    on_figures = side(on)
    on_figures.update(
        store_cpu_ms_per_call_second=store_cpu,
        console_cpu_ms_per_call_second=by_process.get("console", 0.0),
        store_ingest_cpu_ms_per_call_second=round(ingest_cpu_s * 1000 / call_seconds, 3) if call_seconds else 0.0,
        calls_stored=store.get("calls_stored", 0), warm_up_call_stored=store.get("warm_up_call_stored", False),
        events_stored=store.get("events_stored", 0))
    return {
        "calls": off.get("calls", on.get("calls", 0)), "seconds": off.get("seconds", on.get("seconds", 0.0)),
        "off": side(off), "on": on_figures,
        "lateness_p99_delta_ms": round(on_figures["lateness_ms"]["p99"] - off.get("lateness_ms", {}).get("p99", 0.0), 3),
        "store_cpu_target_ms": target_ms,
        # The recorder must have run: a comparison without it measured nothing of the store.
        "store_cpu_within_target": "recorder" in by_process and store_cpu <= target_ms,
    }


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
    """The stack's processes to measure, by program name: whichever of gateway, pacer, model, validator,
    recorder and console run (the recorder and console only with a call store), and supervisord."""
    pids = {name: pid for name, pid in stack.program_pids().items() if name != "modelsim"}
    if stack.process is not None:
        pids["supervisord"] = stack.process.pid
    return pids


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def child_env() -> dict[str, str]:
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


async def read_status_lines(stream: asyncio.StreamReader, sink: dict, key: int) -> None:
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


async def wait_for_file(path: Path, timeout_s: float, process: asyncio.subprocess.Process | None = None) -> str:
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


def _stand_in_records(path: Path, clip_names: tuple[str, ...]) -> list:
    """The pipecat stand-in's per-call records as SessionRecords (bench/analysis.stand_in_records)."""
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    clips = [(CLIPS_DIR / f"{name}.ulaw").read_bytes() for name in clip_names]
    return analysis.stand_in_records(lines, clips, clip_names)


def scheduling_of(pid: int) -> str:
    """What the OS gives a process now: "SCHED_FIFO 10", "nice -10", "normal"."""
    try:
        policy = os.sched_getscheduler(pid)
        if policy in (os.SCHED_FIFO, os.SCHED_RR):
            name = "SCHED_FIFO" if policy == os.SCHED_FIFO else "SCHED_RR"
            return f"{name} {os.sched_getparam(pid).sched_priority}"
        nice = os.getpriority(os.PRIO_PROCESS, pid)
        return f"nice {nice}" if nice else "normal"
    except OSError:
        return "gone"


@dataclass
class LevelWindow:
    """What LevelRun.measure read over the measured window [w0_ms, w1_ms] (CLOCK_MONOTONIC ms)."""

    w0_ms: float
    w1_ms: float
    seconds: float  # the window's wall time as measured
    live_at_start: int  # calls live when it opened
    cpu_by_process: dict[str, float]  # the stack's CPU seconds in the window, by process name
    load_cpu_by_pid: dict[int, float]  # the load side's (load processes, model simulator), by pid
    loaded_memory: dict[str, float]
    affinity: dict[str, list[int]]
    scheduling: dict[str, str]
    cpu_at_end: dict[str, float] = field(default_factory=dict)  # each stack process's CPU seconds at the window's end
    load_kernel_cpu_by_pid: dict[int, float] = field(default_factory=dict)  # the system time within load_cpu_by_pid
    profile_info: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # the stack's /metrics after the calls
    store: dict = field(default_factory=dict)  # STORE_SYSTEM: what the call store held at the end (read_store)


class LevelRun:
    """One run of ``calls`` calls against one system: voicecore (a stack the bench starts, or --target) or a
    pipecat baseline. `run()` returns the report: callreport keys plus the bench's.

    The steps, in order: start_system (the model simulator and a voicecore stack, or a baseline server, or
    nothing with --target), warm_up (one unmeasured call), start_load (the K load processes and their common
    t0), measure (the window's CPU, memory and scheduling, then the end of every call), read_store (STORE_SYSTEM
    only: the calls and events the call store holds once the recorder ingested the records), and whatever
    happened, stop: every process this run started that still runs is ended (also on an error or a cancel), so nothing
    is left running or in /dev/shm. build_report then reads what the processes wrote into the workdir."""

    spare_slots = 4  # call slots beyond the calls: the warm-up call's slot may still be closing when the load starts
    wants_store = False  # a call store in the run's workdir when the environment names none (the chaos run's store faults)
    store_url = ""  # the run's own store the stack must use whatever the environment says (the chaos run's PostgreSQL)

    def __init__(self, opts: BenchOptions, calls: int, workdir: Path, profile_out: Path | None = None,
                 system: str = "voicecore") -> None:
        self.opts = opts
        self.calls = calls
        self.workdir = workdir
        self.profile_out = profile_out
        self.system = system
        self.scenario = get_scenario(opts.scenario)
        self.pin_stack = parse_cpus(opts.pin_stack) if opts.pin_stack else None
        self.pin_load = parse_cpus(opts.pin_load) if opts.pin_load else None
        self.load_cpus = len(self.pin_load) if self.pin_load else (os.cpu_count() or 1)
        procs = opts.load_procs or max(1, min(self.load_cpus, math.ceil(calls / CALLS_PER_LOAD_PROC)))
        self.procs = min(procs, calls)
        self.ramp_ms = (opts.ramp_ms if opts.ramp_ms is not None
                        else min(15_000.0, max(float(self.scenario.cycle_ms), 10.0 * calls)))
        self.settle_ms = opts.settle_ms
        self.cpus_arg = ",".join(map(str, sorted(self.pin_load))) if self.pin_load else ""
        self.problems: list[str] = []
        self.log_path = workdir / "stack.log"
        self.log_file = None
        # What this run started; stop() ends whatever of it still runs.
        self.sim_proc: asyncio.subprocess.Process | None = None
        self.baseline_proc: asyncio.subprocess.Process | None = None
        self.stack: Stack | None = None
        self.tool_server = None  # an agent scenario's fake tool API (voicecore.sim.tool_server.ToolServer)
        self.rest_server = None  # an agent scenario's carrier REST API (voicecore.sim.carrier_rest.CarrierRestServer)
        self.loads: list[asyncio.subprocess.Process] = []
        self.readers: list[asyncio.Task] = []
        self.status: dict = {}  # each load process's last status line, by its index (read_status_lines)
        self.progress: Progress | None = None
        # How the carrier reaches the system under test, and what of it the bench measures (start_system).
        self.unix_socket: str | None = None
        self.base_url = ""
        self.token = ""
        self.credentials = None  # --carrier other than twilio: the simulator's halves of the stack's secrets
        self.config = None  # the stack's Config; None for a baseline or --target
        self.lead_frames = 1
        self.pids: dict[str, int] = {}
        self.idle_memory: dict[str, float] = {}
        self.warm_up_sid = ""
        self.results_meta: list | None = None  # the load processes' (CallResult, meta), read once (_load_results)

    async def run(self) -> dict:
        self.log_file = open(self.log_path, "wb")
        try:
            await self.start_system()
            await self.warm_up()
            t0_ms = await self.start_load()
            window = await self.measure(t0_ms)
            if self.system == STORE_SYSTEM:
                window.store = await self.read_store(window)
        finally:
            await self.stop()
        return self.build_report(window)

    # ---- the system under test ----

    async def start_system(self) -> None:
        """Start what the carrier calls, then note the processes to measure and their idle memory."""
        if self.system in BASELINES:
            await self._start_baseline()
        elif self.opts.target:
            self._use_target()
        else:
            await self._start_stack()
        # The figures (voicecore/callreport.py playout_figures) are the carrier's playout clock, the same for
        # every sender; lead_frames only feeds the carrier's own mark-based schedule check (voicecore's marks).
        self.lead_frames = max(1, (self.config.lead_ms if self.config else timing.DEFAULT_LEAD_MS) // FRAME_MS)
        if self.stack:
            self.pids = stack_pids(self.stack)
        else:
            self.pids = {self.system: self.baseline_proc.pid} if self.baseline_proc else {}
        self.idle_memory = stack_memory_mb(self.pids, self.config)

    async def _start_model_sim(self) -> int:
        """The model simulator in its own process (bench/simproc.py); returns its port. The process is kept
        before its port is known, so stop() ends it also when it never gets that far."""
        port_file = self.workdir / "sim.port"
        self.sim_proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.simproc", "--scenario", self.opts.scenario, "--port-file", str(port_file),
            "--out", str(self.workdir / "sim.pkl"), *(["--cpus", self.cpus_arg] if self.cpus_arg else []),
            *(["--model-vendor", self.opts.model_vendor] if self.opts.model_vendor != "openai" else []),
            env=child_env(), stdout=self.log_file, stderr=subprocess.STDOUT)
        return int(await wait_for_file(port_file, 30, self.sim_proc))

    async def _start_baseline(self) -> None:
        opts, workdir = self.opts, self.workdir
        python = pipecat_venv(opts) / "bin" / "python"
        if not python.exists():
            raise BenchError(f"no pipecat venv at {python.parent.parent}: run bench/baseline_pipecat/setup_venv.sh first")
        if self.system == "pipecat-realtime":
            sim_port = await self._start_model_sim()
            extra = ["--realtime-url", f"ws://127.0.0.1:{sim_port}/v1/realtime"]
        else:
            extra = ["--records", str(workdir / "baseline.jsonl")]
        port_file = workdir / "baseline.port"
        if opts.transport == "unix":
            self.unix_socket = str(workdir / "baseline.sock")
        self.baseline_proc = await asyncio.create_subprocess_exec(
            str(python), str(BASELINE_SERVERS[self.system]), "--port-file", str(port_file), "--clips", str(CLIPS_DIR),
            "--sequence", ",".join(self.scenario.sim_config.clip_sequence), *extra,
            *(["--uds", self.unix_socket] if self.unix_socket else []),
            *(["--nice", str(BASELINE_NICE)] if opts.privileges == "on" else []),
            stdout=self.log_file, stderr=subprocess.STDOUT)
        port = int(await wait_for_file(port_file, 90, self.baseline_proc))
        if self.pin_stack:
            pin_tree(self.baseline_proc.pid, self.pin_stack)
        self.base_url = UNIX_BASE_URL if self.unix_socket else f"http://127.0.0.1:{port}"
        self.token, self.config = "baseline", None

    def _use_target(self) -> None:
        opts = self.opts
        self.base_url = opts.target.rstrip("/")
        self.unix_socket = opts.unix_socket or None
        self.token = opts.auth_token or os.environ.get("VOICECORE_TWILIO_AUTH_TOKEN", "")
        if not self.token:
            raise BenchError("--target needs the stack's Twilio auth token (--auth-token or VOICECORE_TWILIO_AUTH_TOKEN)")
        self.config = None

    async def _start_stack(self) -> None:
        opts, workdir, calls = self.opts, self.workdir, self.calls
        sim_port = await self._start_model_sim()
        agent = self.scenario.agent
        if agent is not None and agent.routes:
            # The agent's HTTP API, faked on loopback in this process; its URLs read the address from the
            # environment the stack inherits.
            from voicecore.sim.tool_server import ToolServer

            self.tool_server = ToolServer(agent.routes)
            os.environ[agent.tool_server_env] = await self.tool_server.start()
        # The scenario's own settings (the hallucination scenario's gate) win over the caller's.
        base = resolve_config(load_config({**os.environ, **dict(self.scenario.stack_env)}, opts.config_path))
        record_dir = base.record_dir
        if self.wants_store and (self.store_url or not database_url_for(base)):
            record_dir = None  # the run's own store, in its workdir (a chaos run's recorder and console faults)
        if self.store_url:
            base = dataclasses.replace(base, database_url=self.store_url)
        if opts.compare_store:
            # The two systems differ in records and the store only: none for voicecore whatever the
            # environment says, and for STORE_SYSTEM the SQLite store in the run's records (demo_config's
            # None), never a database_url of the environment.
            base = dataclasses.replace(base, database_url="")
            record_dir = None if self.system == STORE_SYSTEM else ""
        config = dataclasses.replace(demo_config(base, workdir, calls, sim_port, record_dir=record_dir),
                                     max_calls=calls + self.spare_slots)
        if opts.model_vendor == "gemini":  # the stack on the Gemini simulator (voicecore/sim/gemini_records.py)
            from voicecore.sim.gemini_records import demo_config as gemini_config

            config = gemini_config(config, sim_port)
        if agent is not None:
            from voicecore.agent.settings import configure

            config = configure(config, os.environ)[0]  # its knowledge folder, model and language for every process
        elif config.call_control == "auto":
            # Without an agent scenario the bench measures the bare stream (the spine), as its published
            # figures always have; VOICECORE_CALL_CONTROL=turns measures the controller instead.
            config = dataclasses.replace(config, call_control="spine")
        if opts.transport == "unix":
            self.unix_socket = str(workdir / "gateway.sock")
            config = dataclasses.replace(config, listen=UNIX_PREFIX + self.unix_socket, public_url=UNIX_BASE_URL)
        if opts.carrier != "twilio":
            # this run's secrets for the carrier: the stack gets its halves
            config, self.credentials = carrier_config(config, opts.carrier)
        if agent is not None:
            # An agent hangs up and transfers through the carrier's REST API: simulated here, granting every
            # request (the calls live in the load processes and run on to their scripts' end, as the load
            # expects); without it the stack would close those calls' streams (no API to take the request).
            from voicecore.sim.carrier import generate_credentials
            from voicecore.sim.carrier_rest import CarrierRestServer

            rest_credentials = self.credentials or generate_credentials(config.twilio_auth_token)
            self.rest_server = CarrierRestServer(rest_credentials, accept_unknown_calls=True)
            await self.rest_server.__aenter__()
            names = {f.name for f in dataclasses.fields(config)}
            config = dataclasses.replace(config, **{k: v for k, v in rest_credentials.rest_settings(
                self.rest_server.base_url).items() if k in names})
        self.config = config
        self.stack = Stack(config)
        await asyncio.to_thread(self.stack.start, self.log_file)
        await asyncio.to_thread(self.stack.wait_ready)  # READY_TIMEOUT_S: a fresh install on a loaded machine
        self.base_url, self.token = config.base_url, config.twilio_auth_token
        if self.pin_stack:
            pin_tree(self.stack.process.pid, self.pin_stack)

    async def warm_up(self) -> None:
        """One short call first, unmeasured: one-time costs of a first call (lazy imports, first connection
        set-up) must not land in the run, for either system."""
        from voicecore.sim.carrier import CallScript, place_call

        warm = await place_call(self.base_url, self.token, CallScript(duration_ms=1500), self.lead_frames,
                                unix_socket=self.unix_socket, carrier=self.opts.carrier, credentials=self.credentials)
        if warm.closed_by != "carrier" or warm.errors:
            raise BenchError(f"the warm-up call failed: {warm.closed_by} {'; '.join(warm.errors)[:300]}")
        self.warm_up_sid = warm.call_sid

    # ---- the load ----

    async def start_load(self) -> float:
        """Start the load processes, wait until each is ready, and send them all one t0 (returned, in ms)."""
        opts = self.opts
        env = child_env()
        env["BENCH_TWILIO_AUTH_TOKEN"] = self.token
        if self.credentials is not None:
            env["BENCH_CARRIER_CREDENTIALS"] = self.credentials.to_json()
        for k in range(self.procs):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.loadgen", "--base-url", self.base_url, "--scenario", opts.scenario,
                "--calls-total", str(self.calls), "--procs", str(self.procs), "--proc-index", str(k),
                "--seconds", str(opts.seconds), "--ramp-ms", str(self.ramp_ms), "--settle-ms", str(self.settle_ms),
                "--lead-frames", str(self.lead_frames), "--out", str(self.workdir / f"load-{k}.pkl"),
                *(["--unix-socket", self.unix_socket] if self.unix_socket else []),
                *(["--cpus", self.cpus_arg] if self.cpus_arg else []),
                *(["--carrier", opts.carrier] if opts.carrier != "twilio" else []),
                env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self.log_file)
            self.loads.append(proc)
        return await self.release_loads("load process")

    async def release_loads(self, what: str) -> float:
        """Wait for every load process's "ready", then give them all one start time (t0_ms, returned)."""
        for k, proc in enumerate(self.loads):
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise BenchError(f"{what} {k} did not start: {line[:200]!r}")
            self.readers.append(asyncio.create_task(read_status_lines(proc.stdout, self.status, k)))
        t0_ms = time.monotonic() * 1000.0 + 200.0
        for proc in self.loads:
            proc.stdin.write((json.dumps({"t0_ms": t0_ms}) + "\n").encode())
            await proc.stdin.drain()
            proc.stdin.close()
        return t0_ms

    def _load_total(self, key: str) -> int:
        """A count ("live", "done", "failed") summed over the load processes' last status lines."""
        return sum(s.get(key, 0) for k, s in self.status.items() if isinstance(k, int))

    def _show(self, phase: str) -> None:
        self.progress.update(self._load_total("live"), self._load_total("done"), self._load_total("failed"),
                             self.calls, phase)

    async def _sleep_until(self, when_ms: float, phase: str) -> None:
        while (left := when_ms / 1000.0 - time.monotonic()) > 0:
            self._show(phase)
            await asyncio.sleep(min(0.5, left))

    async def measure(self, t0_ms: float) -> LevelWindow:
        """Wait out the ramp-up and settling, read CPU, memory, affinity and scheduling over the window
        (and profile it with --profile), then wait for every call to end and read the stack's metrics."""
        opts, pids = self.opts, self.pids
        w0 = t0_ms + self.ramp_ms + self.settle_ms
        w1 = w0 + opts.seconds * 1000.0
        total_s = (w1 - time.monotonic() * 1000.0) / 1000.0 + 1.0
        self.progress = Progress(f"bench {opts.scenario} {self.calls} calls", total_s)
        await self._sleep_until(w0, "ramp-up")
        if self.stack:
            # What runs when the window opens (a recorder or console that started late is measured too).
            self.pids = pids = stack_pids(self.stack)
        live_at_w0 = self._load_total("live")
        load_pids = [p.pid for p in self.loads] + ([self.sim_proc.pid] if self.sim_proc else [])
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load_before = {pid: cpu_seconds(pid) for pid in load_pids}
        load_kernel_before = {pid: kernel_cpu_seconds(pid) for pid in load_pids}
        window_started = time.monotonic()
        profile_proc = None
        profile_info: dict = {}
        if opts.profile and pids and self.profile_out is not None:
            sample_s = min(2.0, opts.seconds / 4)
            profile_proc, profile_info = await _start_profile(
                pids, sample_s, opts.seconds - sample_s - 0.5, self.profile_out, self.pin_load, self.calls)
        elif opts.profile and not pids:
            profile_info = {"error": "no stack processes to profile (--target)"}
        await self._sleep_until(w1, "measuring")
        window_s = time.monotonic() - window_started
        # A process that restarted during the window counts from zero: all its CPU was in the window.
        current = stack_pids(self.stack) if self.stack else pids
        cpu_at_end = {name: cpu_seconds(pid) for name, pid in current.items()}
        window = LevelWindow(
            w0_ms=w0, w1_ms=w1, seconds=window_s, live_at_start=live_at_w0, cpu_at_end=cpu_at_end,
            cpu_by_process={name: cpu - cpu_before.get(name, 0.0) for name, cpu in cpu_at_end.items()},
            load_cpu_by_pid={pid: cpu_seconds(pid) - before for pid, before in load_before.items()},
            load_kernel_cpu_by_pid={pid: kernel_cpu_seconds(pid) - before for pid, before in load_kernel_before.items()},
            loaded_memory=stack_memory_mb(current, self.config),
            affinity={name: affinity_of(pid) for name, pid in current.items()},
            scheduling={name: scheduling_of(pid) for name, pid in current.items()},
        )
        window.affinity["load"] = affinity_of(self.loads[0].pid) if self.loads else []
        window.affinity["bench"] = affinity_of(os.getpid())
        window.scheduling["load"] = scheduling_of(self.loads[0].pid) if self.loads else "gone"
        if self.sim_proc is not None:
            window.scheduling["model_sim"] = scheduling_of(self.sim_proc.pid)
        await self._wait_for_load_end(w1)
        self.progress.finish()
        window.profile_info = await _finish_profile(profile_proc, profile_info)
        window.metrics = await asyncio.to_thread(fetch_gateway_metrics, self.config) if self.config else {}
        return window

    async def read_store(self, window: LevelWindow) -> dict:
        """STORE_SYSTEM, while the stack still runs (the recorder is part of it): wait up to STORE_WAIT_S for
        the run's calls to be in the SQLite store, then count them and the events table's rows. The records
        are ingested when their calls ended, after the window: that CPU of the recorder (ingest_cpu_s, from
        the window's end to the last call stored) is reported apart from the window's."""
        call_sids = [result.call_sid for result, _ in self._load_results()]
        wanted = set(call_sids) | ({self.warm_up_sid} if self.warm_up_sid else set())
        found, events, error = await asyncio.to_thread(wait_for_stored_calls, database_url_for(self.config), wanted,
                                                       STORE_WAIT_S)
        recorder = self.pids.get("recorder")
        ingest_cpu_s = (cpu_seconds(recorder) - window.cpu_at_end.get("recorder", 0.0)) if recorder else 0.0
        if error:
            self.problems.append(f"the call store could not be read: {error}")
        missing = len(set(call_sids) - found.keys())
        if missing:
            self.problems.append(f"{missing} of {len(call_sids)} calls were not in the call store {STORE_WAIT_S:.0f} s "
                                 "after they ended")
        return {"calls_stored": len(set(call_sids) & found.keys()), "warm_up_call_stored": self.warm_up_sid in found,
                "events_stored": events, "ingest_cpu_s": round(ingest_cpu_s, 3),
                "stored_call_seconds": round(sum(found.get(sid, 0.0) for sid in set(call_sids)), 3)}

    async def _wait_for_load_end(self, w1_ms: float) -> None:
        """Each load process exits when its calls have ended (their scripts say when); one still there 40 s
        after the window is killed, and the report says so."""
        for proc in self.loads:
            while proc.returncode is None:
                self._show("ending")
                try:
                    await asyncio.wait_for(proc.wait(), 1.0)
                except asyncio.TimeoutError:
                    if time.monotonic() * 1000.0 > w1_ms + 40_000:
                        proc.kill()
                        self.problems.append("a load process did not finish in time and was killed")

    async def stop(self) -> None:
        """End everything this run started that still runs: load processes, the model simulator (SIGTERM, so
        it writes its records), the baseline server, the stack (which cleans its shared memory)."""
        for proc in self.loads:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        for task in self.readers:
            task.cancel()
        if self.sim_proc is not None and self.sim_proc.returncode is None:
            self.sim_proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.sim_proc.wait(), 60)
            except asyncio.TimeoutError:
                self.sim_proc.kill()
        if self.baseline_proc is not None and self.baseline_proc.returncode is None:
            self.baseline_proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.baseline_proc.wait(), 20)
            except asyncio.TimeoutError:
                self.baseline_proc.kill()
        if self.stack is not None:
            await asyncio.to_thread(self.stack.stop)
        if self.tool_server is not None:
            await self.tool_server.stop()
        if self.rest_server is not None:
            await self.rest_server.__aexit__(None, None, None)
        self.log_file.close()

    # ---- the figures ----

    def _load_results(self) -> list:
        """(CallResult, meta) of every call, from the load processes' files (read once)."""
        if self.results_meta is not None:
            return self.results_meta
        results_meta = self.results_meta = []
        for k in range(self.procs):
            path = self.workdir / f"load-{k}.pkl"
            if not path.exists():
                self.problems.append(f"load process {k} wrote no results")
                continue
            with open(path, "rb") as f:
                results_meta.extend(pickle.load(f))
        return results_meta

    def _model_records(self) -> list:
        """The model side's SessionRecords: the simulator's, or the pipecat stand-in's in their shape."""
        if (self.workdir / "sim.pkl").exists():
            with open(self.workdir / "sim.pkl", "rb") as f:
                return pickle.load(f)
        if self.system == "pipecat":
            records = _stand_in_records(self.workdir / "baseline.jsonl", self.scenario.sim_config.clip_sequence)
            if not records:
                self.problems.append("the pipecat stand-in wrote no records")
            return records
        if not self.opts.target:
            self.problems.append("the model simulator wrote no records")
        return []

    def build_report(self, window: LevelWindow) -> dict:
        opts, calls, scenario, system, problems = self.opts, self.calls, self.scenario, self.system, self.problems
        w0, w1, window_s = window.w0_ms, window.w1_ms, window.seconds
        results_meta = self._load_results()
        records = self._model_records()
        full = analysis.RecordSet(records)
        # A lossy carrier path (A-law, resampled L16): tie its frames to the model's by content first
        # (voicecore/sim/audio_match.py), so every content-based figure below finds them.
        matching = frame_matching([result for result, _meta in results_meta], full)
        trimmed_records = analysis.trim_records(records, w0, w1)
        trimmed = []
        lost_out = lost_in = late_starts = 0
        for result, meta in results_meta:
            call_records = full.records(result.call_sid)
            o, i = analysis.frames_lost(result, call_records, meta["end_ms"], measure_inbound=system != "pipecat")
            lost_out += o
            lost_in += i
            if meta.get("send_origin_ms") is not None and meta["send_origin_ms"] > w0:
                late_starts += 1
            trimmed.append(analysis.trim_result(result, w0, w1))
        if late_starts:
            problems.append(f"{late_starts} calls started after the measured window opened (raise --settle-ms)")
        # A call must show a clear only if the window is long enough to hold one of its barge-ins for sure.
        expect_bargeins = scenario.expect_bargeins and opts.seconds * 1000 >= scenario.cycle_ms + 1000
        samples: dict[str, list[float]] = {}
        cpu_s = sum(window.cpu_by_process.values())
        report = summarize(trimmed, full, seconds=opts.seconds, cpu_seconds=cpu_s, wall_seconds=window_s,
                           stack_metrics=window.metrics, expect_bargeins=expect_bargeins, window_ms=(w0, w1),
                           grace_ms=opts.starved_grace_ms, samples=samples)
        report["problems"] = (report["problems"] + problems)[:50]
        report["scenario"] = opts.scenario
        # Under the turn-taking controller a barge-in waits for words on purpose (0.5-1 s): its latency is
        # the controller's decision -> the clear (the gateway's figure), not the caller's first sound.
        from voicecore.agent.settings import call_control

        turns = self.config is not None and call_control(self.config) == "turns"
        report["bargein_measured_from"] = "decision" if turns else "speech"
        report["system"] = system
        report["carrier"] = opts.carrier
        report["model_vendor"] = opts.model_vendor
        if matching is not None:
            report["frame_matching"] = matching
        report["transport"] = "unix" if self.unix_socket else "tcp"
        report["privileges"] = {"mode": opts.privileges, "granted": window.scheduling}
        report["frames_lost"] = lost_out + lost_in
        report["frames_lost_outbound"] = lost_out
        report["frames_lost_inbound"] = lost_in
        idle_memory, loaded_memory = self.idle_memory, window.loaded_memory
        idle_private = sum(v for k, v in idle_memory.items() if k != "arena")
        loaded_private = sum(v for k, v in loaded_memory.items() if k != "arena")
        # Memory per call: what the calls added to the processes' private pages, plus the whole arena
        # (voicecore sizes it for the run's call slots up front, so all of it is per-call memory).
        report["rss_per_call_mb"] = (round((loaded_private - idle_private + loaded_memory.get("arena", 0.0)) / calls, 4)
                                     if self.pids else 0.0)
        report["stack_memory_mb"] = {"idle": {k: round(v, 1) for k, v in idle_memory.items()},
                                     "loaded": {k: round(v, 1) for k, v in loaded_memory.items()}}
        report["cpu_ms_per_call_second_by_process"] = {
            name: round(s * 1000 / (calls * opts.seconds), 3) for name, s in sorted(window.cpu_by_process.items())}
        load_cpu_by_pid = window.load_cpu_by_pid
        load_cpu_s = sum(load_cpu_by_pid.values())
        report["load_cpu_fraction"] = round(load_cpu_s / window_s, 3) if window_s else 0.0
        # Which half of the load side is busy: the carrier simulator (load processes) or the model simulator.
        sim_pid = self.sim_proc.pid if self.sim_proc is not None else None
        carrier_cpu_s = sum(v for pid, v in load_cpu_by_pid.items() if pid != sim_pid)
        report["load_cpu_fraction_by_role"] = {
            "carrier": round(carrier_cpu_s / window_s, 3) if window_s else 0.0,
            "model_sim": round(load_cpu_by_pid.get(sim_pid, 0.0) / window_s, 3) if window_s and sim_pid else 0.0,
        }
        report["model_event_rates"] = analysis.model_event_rates(records, w0, w1)
        report["calls_live_at_window_start"] = window.live_at_start
        report["stack_processes_measured"] = bool(self.pids)  # False with --target: CPU and memory are not ours to read
        report["load_procs"] = self.procs
        report["load_cpus"] = self.load_cpus
        report["load_saturated"] = load_saturated(report)
        # Each load process alone: one event loop can use one core, so a load process near 1.0 stalls
        # even when the load CPUs as a whole have room (load_cpu_fraction).
        report["load_process_cpu"] = load_process_cpu(load_cpu_by_pid, sim_pid, window_s, window.load_kernel_cpu_by_pid)
        report["load_bound"] = load_bound(report)
        report["window"] = {"ramp_ms": self.ramp_ms, "settle_ms": self.settle_ms, "seconds": opts.seconds}
        report["affinity"] = window.affinity
        report["lateness_cdf_ms"] = _cdf(samples["lateness_ms"])
        if opts.scenario in ("hallucination", HALLUCINATION_UNGATED):
            figures = analysis.hallucination_figures(
                (result, trimmed_records.records(result.call_sid)) for result, _ in results_meta)
            first_audio = figures.pop("first_audio_ms")
            report.update(figures)
            report["gated_first_audio_ms" if opts.scenario == "hallucination" else "ungated_first_audio_ms"] = first_audio
        if opts.profile:
            report["profile"] = window.profile_info
        if window.store:
            report["call_store"] = dict(window.store)
        violations = slo_violations(report, opts.slo)
        report["slo_violations"] = violations
        report["slo_ok"] = not violations
        report["slo_verdict"] = slo_verdict(report, opts.slo)  # a broken SLO is the stack's only when the load side was clear
        truncate_max = report["truncate_error_ms"]["max"]
        # summarize's invariants, with underruns judged only where the model had sent the audio.
        report["ok"] = bool(calls and report["calls_completed"] == calls and report["stale_frames"] == 0
                            and report["overlapping_frames"] == 0 and report["bargeins_without_clear"] == 0
                            and report["underruns_audio_available"] == 0 and not report["problems"]
                            and truncate_max <= TRUNCATE_TOLERANCE_MS)
        if opts.keep_logs or not report["ok"]:
            report["_log_tail"] = self.log_path.read_text(errors="replace")[-6000:]
        return report


async def run_level(opts: BenchOptions, calls: int, workdir: Path, profile_out: Path | None = None,
                    system: str = "voicecore") -> dict:
    """One run of ``calls`` calls against voicecore (or a pipecat baseline); returns the report
    (callreport keys plus the bench's). See LevelRun."""
    return await LevelRun(opts, calls, workdir, profile_out, system).run()


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


def _search_top(runs: list[dict], search: CapacitySearch) -> dict:
    """One search's figures: the report of the largest N that held, plus the search's outcome."""
    good = [r for r in runs if r["calls"] == search.capacity]
    top = dict(good[-1]) if good else {"system": runs[-1].get("system"), "scenario": runs[-1].get("scenario")}
    top.update(capacity_calls=search.capacity, capacity_capped=search.capped,
               capacity_load_bound=capacity_load_bound(runs, search),
               capacity_history=[{"calls": c, "held": ok} for c, ok in search.history])
    return top


def _summary_top(runs_by_search: list[list[dict]], searches: list[CapacitySearch] | None) -> dict:
    """The top-level figures of one system: its single run, or, over its searches, the report of the search
    whose capacity is the median (the first such), with the median, every search's result and the range."""
    if not searches:
        return dict(runs_by_search[-1][-1])
    tops = [_search_top(runs, search) for runs, search in zip(runs_by_search, searches)]
    figures = capacity_summary([search.capacity for search in searches])
    median = figures["capacity_calls"]
    chosen = min(range(len(tops)), key=lambda i: (abs(searches[i].capacity - median), i))
    top = tops[chosen]
    top.update(figures)
    top["capacity_search_quoted"] = chosen + 1
    top["capacity_searches"] = [{k: t[k] for k in ("capacity_calls", "capacity_capped", "capacity_load_bound",
                                                   "capacity_history")} for t in tops]
    return top


def _strip(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "_log_tail"}


async def _bench(opts: BenchOptions) -> dict:
    from bench.report import machine_info, versions

    # SIGTERM (a supervisor, `timeout`, kill) cancels the run like Ctrl-C does, so every step's finally
    # stops its stack and load processes: nothing is left running or in /dev/shm.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    # The bench's own process (orchestration, the analysis between steps) runs with the load, not on the
    # stack's CPUs; what it starts is pinned where it belongs right after.
    if opts.pin_load:
        os.sched_setaffinity(0, parse_cpus(opts.pin_load))
    # --privileges off: voicecore's pacer and gateway ask for no priority (workers/*/main.py read this);
    # the pipecat server gets no --nice either (LevelRun._start_baseline).
    os.environ[PRIORITY_ENV] = "1" if opts.privileges == "on" else "0"

    json_path = Path(opts.json_path) if opts.json_path else None
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)  # before an hour of runs, not after
    profile_base = (json_path.parent if json_path else Path.cwd()) / ((json_path.stem if json_path else "bench") + "-profile")
    baselines = baseline_names(opts.baseline)
    # --compare-store: the stack with records and the call store is one more system taking turns.
    systems = ["voicecore", *baselines, *([STORE_SYSTEM] if opts.compare_store else [])]
    resolution, relative = parse_resolution(opts.resolution)
    repeats = opts.repeat if opts.find_capacity else 1
    runs: dict[str, list[list[dict]]] = {system: [] for system in systems}
    searches: dict[str, list[CapacitySearch]] = {system: [] for system in systems}

    def profile_out(system: str) -> Path | None:
        if not opts.profile:
            return None
        return profile_base if system == "voicecore" else profile_base.with_name(f"{profile_base.name}-{system}")

    for repeat in range(repeats):
        current = {system: CapacitySearch(start=opts.start_calls, max_calls=opts.max_calls, resolution=resolution,
                                          relative=relative) if opts.find_capacity else None for system in systems}
        for system in systems:
            runs[system].append([])
            if current[system] is not None:
                searches[system].append(current[system])
        # The systems take turns, one step each, so slow drift on a shared machine hits both alike.
        pending = True
        while pending:
            pending = False
            for system in systems:
                search = current[system]
                if search is None:
                    if runs[system][-1]:
                        continue
                    runs[system][-1].append(await _one_step(opts, system, opts.calls, profile_out(system)))
                    continue
                calls = search.next_calls()
                if calls is None:
                    continue
                pending = True
                report = await _one_step(opts, system, calls, profile_out(system))
                report["search"] = repeat + 1
                passed = report["slo_ok"] and not report["problems"]
                search.record(calls, passed)
                runs[system][-1].append(report)
                verdict = "held" if passed else "broke: " + "; ".join(report["slo_violations"] or report["problems"][:2])
                if not passed and report.get("slo_verdict") == "load_bound":
                    verdict += " (load-bound: the load generator, not the stack, may have broken it)"
                label = f" (search {repeat + 1}/{repeats})" if repeats > 1 else ""
                print(f"bench: {system} {calls} calls -> {verdict}{label}", file=sys.stderr, flush=True)
    top = _strip(_summary_top(runs["voicecore"], searches["voicecore"] or None))
    flat = {system: [run for search_runs in runs[system] for run in search_runs] for system in systems}
    top["runs"] = [_strip(run) for run in flat["voicecore"]] if opts.find_capacity else []
    # One summary per baseline under "baselines"; the first one's also under the keys a single
    # --baseline has always written (baseline, baseline_capacity_calls, capacity_ratio, ...).
    summaries = {}
    for name in baselines:
        baseline = _strip(_summary_top(runs[name], searches[name] or None))
        baseline["runs"] = [_strip(run) for run in flat[name]] if opts.find_capacity else []
        baseline["baseline_leaves_out"] = BASELINE_LEAVES_OUT[name]
        baseline["baseline_settings"] = BASELINE_SETTINGS
        if opts.find_capacity:
            baseline["capacity_ratio"] = (round(top["capacity_calls"] / baseline["capacity_calls"], 2)
                                          if baseline["capacity_calls"] else None)
        if baseline.get("cpu_ms_per_call_second") and top.get("cpu_ms_per_call_second"):
            baseline["cpu_per_call_ratio"] = round(baseline["cpu_ms_per_call_second"] / top["cpu_ms_per_call_second"], 2)
        summaries[name] = baseline
    if baselines:
        first = summaries[baselines[0]]
        top["baseline"] = first
        if len(baselines) > 1:
            top["baselines"] = summaries
        if opts.find_capacity:
            top["baseline_capacity_calls"] = first["capacity_calls"]
            top["baseline_capacity_calls_runs"] = first["capacity_calls_runs"]
            top["baseline_capacity_calls_range"] = first["capacity_calls_range"]
            top["capacity_ratio"] = first["capacity_ratio"]
        if "cpu_per_call_ratio" in first:
            top["cpu_per_call_ratio"] = first["cpu_per_call_ratio"]
    if opts.compare_store:
        on = _strip(runs[STORE_SYSTEM][-1][-1])
        top["store_comparison"] = store_comparison(runs["voicecore"][-1][-1], on)
        on.pop("lateness_cdf_ms", None)
        top["store_run"] = on  # the whole report of the run with the store, for its problems and details
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
    top["command"] = shlex.join(sys.argv)
    top["privileges"] = top.get("privileges", {"mode": opts.privileges})
    top["machine"] = machine_info()
    top["versions"] = versions()
    if opts.baseline:
        top["versions"]["pipecat_venv"] = pipecat_versions(opts)
    top["configuration"] = _configuration(opts)
    top["_runs_full"] = flat
    return top


def pipecat_versions(opts: BenchOptions) -> dict:
    """pipecat-ai and its transport's packages as installed in the baseline's venv."""
    python = pipecat_venv(opts) / "bin" / "python"
    code = ("import json,platform\nfrom importlib import metadata\nout={'python': platform.python_version()}\n"
            "for n in ('pipecat-ai','fastapi','uvicorn','websockets','numpy','soxr'):\n"
            "    try: out[n]=metadata.version(n)\n    except metadata.PackageNotFoundError: out[n]=None\n"
            "print(json.dumps(out))")
    try:
        done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def results_path(name: str, today: str | None = None) -> Path:
    """bench/results/<YYYY-MM-DD>-<name>.json, the file a published figure comes from (bench/results/README.md)."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"--save {name!r}: a plain name, like steady-unix-capacity")
    day = today or time.strftime("%Y-%m-%d", time.gmtime())
    return REPO_ROOT / "bench" / "results" / f"{day}-{name.removesuffix('.json')}.json"



def save_path_for(opts: BenchOptions) -> tuple[Path | None, str]:
    """(where --save writes the report, or None; a problem with the name, or "")."""
    if not opts.save:
        return None, ""
    try:
        path = results_path(opts.save)
    except ValueError as exc:
        return None, str(exc)
    if path.exists():
        return None, f"{path} exists; published results are never overwritten (pick another name)"
    return path, ""


def run_async(main) -> tuple[object, int]:
    """Run a bench's coroutine: (its result, 0), or (None, exit code) after saying why on stderr (1: the bench
    failed; 130: interrupted, with the stack and load processes shut down)."""
    try:
        return asyncio.run(main), 0
    except (BenchError, StackError) as exc:
        print(f"voicecore bench: {exc}", file=sys.stderr)
        return None, 1
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("voicecore bench: stopped; the stack and load processes were shut down", file=sys.stderr)
        return None, 130


def options_problem(opts: BenchOptions) -> str | None:
    """What is wrong with a measured run's (or the chaos run's) options, or None: every combination is judged
    before anything starts, whether or not this machine has the baseline's venv."""
    if opts.scenario.startswith(AGENT_PREFIX):
        from voicecore.agent.load import AgentError
        from voicecore.agent.scenario import ScenarioError

        try:
            get_scenario(opts.scenario)
        except (AgentError, ScenarioError) as exc:
            return str(exc)
        if opts.baseline:
            return ("an agent scenario runs voicecore's agent (flows, tools, confirmations); the "
                    "baselines have none to compare")
    elif opts.scenario not in SCENARIOS:
        return f"unknown scenario {opts.scenario!r} (or agent:DIR)"
    try:
        baselines = baseline_names(opts.baseline)
    except ValueError as exc:
        return str(exc)
    if "pipecat" in baselines and opts.scenario == "model-stall":
        return ("the pipecat baseline's model stand-in does not stall; use another scenario "
                "(or --baseline pipecat-realtime, which talks to the model simulator)")
    if opts.baseline and opts.scenario == "overlap":
        return ("the overlap scenario checks voicecore's one-voice rule; pipecat has none to measure "
                "(its stand-in never overlaps responses); use another scenario")
    if opts.privileges not in ("on", "off"):
        return "--privileges is on or off"
    try:
        parse_resolution(opts.resolution)
    except ValueError as exc:
        return str(exc)
    if opts.repeat < 1 or (opts.repeat > 1 and not opts.find_capacity):
        return "--repeat N (N >= 1) repeats a capacity search: use it with --find-capacity"
    _, problem = save_path_for(opts)
    if problem:
        return problem
    if opts.scenario == "hallucination" and (opts.baseline or opts.target or opts.find_capacity):
        return ("the hallucination scenario starts its own stack twice (gate on, then off): "
                "not with --baseline, --target or --find-capacity")
    if opts.compare_store and (opts.baseline or opts.target or opts.find_capacity
                               or opts.scenario.startswith(AGENT_PREFIX) or opts.scenario == "hallucination"):
        return ("--compare-store runs voicecore's stack twice, without and with the call store, at a "
                "fixed --calls: not with --baseline, --target, --find-capacity, an agent scenario or hallucination")
    if opts.baseline and opts.target:
        return "--baseline needs the bench to start both servers (no --target)"
    if opts.unix_socket and not opts.target:
        return ("--unix-socket is for --target (a stack the bench did not start); "
                "use --transport unix for the servers the bench starts")
    if opts.target and opts.transport != "tcp":
        return "with --target, give the stack's socket with --unix-socket PATH"
    if opts.calls < 1 or opts.seconds < 2:
        return "need --calls >= 1 and --seconds >= 2"
    try:
        for cpus in (opts.pin_stack, opts.pin_load):
            if cpus:
                parse_cpus(cpus)
    except ValueError as exc:
        return str(exc)
    if opts.carrier != "twilio" and (opts.target or opts.baseline):
        return ("--carrier other than twilio needs a stack the bench starts (its secrets are made for "
                "the run) and voicecore on both sides: not with --target or --baseline")
    # Last: every combination of options is judged first, whether or not this machine has the baseline's venv.
    if opts.baseline and not (pipecat_venv(opts) / "bin" / "python").exists():
        return (f"no pipecat venv at {pipecat_venv(opts)}: run bench/baseline_pipecat/setup_venv.sh "
                "first (or pass --pipecat-venv)")
    return None


def run_bench(opts: BenchOptions) -> int:
    """A measured run (or a capacity search, a baseline comparison): bench/main.py hands every other kind on."""
    from bench.report import format_store_comparison, format_table, write_png

    problem = options_problem(opts)
    if problem:
        print(f"voicecore bench: {problem}", file=sys.stderr)
        return 2
    baselines = baseline_names(opts.baseline)
    save_path, _ = save_path_for(opts)
    top, code = run_async(_bench(opts))
    if top is None:
        return code
    all_runs = top.pop("_runs_full")
    runs = all_runs["voicecore"]
    baseline_runs = [run for name in baselines for run in all_runs[name]] or None
    last = runs[-1]
    if "_log_tail" in last and (opts.keep_logs or not last.get("ok")):
        sys.stderr.write(last["_log_tail"] + "\n")
    for system_runs in all_runs.values():
        for run in system_runs:
            run.pop("_log_tail", None)
    print(format_table(top, runs))
    if opts.scenario == "hallucination":
        print(format_hallucination(top))
    if "store_comparison" in top:
        print()
        print(format_store_comparison(top["store_comparison"]))
    for name in baselines:
        summary = top.get("baselines", {}).get(name) or top["baseline"]
        print()
        print(format_table({**summary, "machine": top["machine"]}, all_runs[name]))
        if summary.get("capacity_ratio") is not None:
            print(f"capacity ratio voicecore / {name} (medians): {summary['capacity_ratio']}x")
        if summary.get("cpu_per_call_ratio") is not None:
            print(f"CPU per call-second {name} / voicecore: {summary['cpu_per_call_ratio']}x")
    text = json.dumps(top, indent=1) + "\n"
    for path in filter(None, (opts.json_path, save_path)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        print(f"bench: JSON report written to {path}", file=sys.stderr)
    png = opts.png_path or (str(Path(opts.json_path).with_suffix(".png")) if opts.json_path else None)
    if png:
        message = write_png(png, top, runs, baseline_runs)
        print(f"bench: {message}", file=sys.stderr)
    if opts.find_capacity:
        return 0 if top.get("capacity_calls", 0) > 0 else 1
    store_run_completed = top.get("store_run", {}).get("calls_completed", top.get("calls")) == top.get("calls")
    return 0 if top.get("slo_ok") and top.get("calls_completed") == top.get("calls") and store_run_completed else 1
