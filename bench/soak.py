"""`voicecore bench --soak SECONDS`: the stack under a churning load for a long time, watched for leaks.

Owns the soak: a stack started as the bench starts it (bench/run.py LevelRun: the model simulator
process, supervisord and the stack, one warm-up call), `--calls` call slots kept busy by load processes
(`python -m bench.soak load`: each slot places a call of a random, seeded length, and when it ends
places the next, until the soak's end), a sample every SAMPLE_S of every stack process's RSS
(/proc/PID/status VmRSS) and open fds (/proc/PID/fd), by the name supervisord gives the process
(`gateway_0`, `gateway_1`, ...: the standbys are measured too), and, once the load stopped and the
stack was stopped the way `voicecore up` stops it, the checks that nothing was left behind: no arena of
this stack in /dev/shm, an empty (removed) runtime directory, no zombie child of the bench and no stack
process still alive. Also the `soak`
report's figures (soak_figures: a pure function of the samples), its console table and its plot.

How growth is measured (soak_figures):
- RSS: from a baseline taken after a warm-up, the first sample at or after max(60 s, 10% of SECONDS)
  under load, to the mean of the last three samples, so start-up allocation (imports, first calls,
  allocator arenas filling up) is not counted as growth. A soak too short for that warm-up takes its
  baseline at the sample in the middle of the run.
- fds: counted with no call up, once after the warm-up call and before the load (fds_start), once after
  the load ended and the stack closed every call (fds_end): under load the count follows the calls
  active at the sampling instant, which would read as growth or shrinkage that is neither.
A process that restarted counts from its new pid; `restarts` says how often its pid changed.

Call lengths: uniform in CALL_SECONDS (20-90 s) for a soak of FULL_RANGE_S or longer; a shorter soak
scales the range down (never under MIN_CALL_S) so its slots still churn several times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shlex
import signal
import sys
import tempfile
import time
import xmlrpc.client
from pathlib import Path

from bench.report import NO_MATPLOTLIB, pyplot
from bench.run import BenchOptions, LevelRun, Progress, child_env, run_async, wait_for_file
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.processes import children_of
from voicecore.supervise import StackError
from voicecore.shm.control import SLOT_QUARANTINE_MS

SAMPLE_S = 10.0  # one sample of every process every this long
POLL_S = 2.0  # pids and the arena name are checked this often (a restart between samples still counts)
WARM_UP_MIN_S = 60.0
WARM_UP_SHARE = 0.10
END_SAMPLES = 3  # RSS at the end: the mean of this many last samples
CALL_SECONDS = (20.0, 90.0)
FULL_RANGE_S = 360.0  # soaks this long or longer use CALL_SECONDS as they are
MIN_CALL_S = 3.0
GAP_S = (0.1, 1.0)  # a slot's pause between one call's end and the next one's webhook
FAILED_RETRY_S = 1.0  # after a failed call a slot waits this long more (no hot loop against a broken stack)
SOAK_SEED = 18
SOAK_DEFAULT_CALLS = 100
STOP_TIMEOUT_S = 30.0  # supervisord's own stop (its children have stopwaitsecs=5 each)
LOAD_END_SLACK_S = 30.0  # a load process still running this long after the soak's end is killed
IDLE_WAIT_S = 10.0  # after the load: how long the stack may take to close its last calls
SIM_KEEP_CLOSED = 50  # closed model sessions the simulator keeps (an hour of calls must not fill its memory)
SIM_NICE = 10


# ----- the figures (pure) ---------------------------------------------------------------------------


def warm_up_s(seconds: float) -> float:
    return max(WARM_UP_MIN_S, WARM_UP_SHARE * seconds)


def call_seconds_range(seconds: float) -> tuple[float, float]:
    """The range a soak of ``seconds`` draws call lengths from (see the module docstring)."""
    scale = min(1.0, seconds / FULL_RANGE_S)
    low, high = (max(MIN_CALL_S, bound * scale) for bound in CALL_SECONDS)
    return round(low, 2), round(max(low, high), 2)


def baseline_index(samples: list[dict], seconds: float) -> int:
    """The sample growth is measured from: the first at or after the warm-up, else the middle one."""
    warm = warm_up_s(seconds)
    for index, sample in enumerate(samples):
        if sample["t_s"] >= warm:
            return index
    return len(samples) // 2


def soak_figures(samples: list[dict], seconds: float, idle_start: dict[str, int], idle_end: dict[str, int],
                 restarts: dict[str, int]) -> dict[str, dict]:
    """Per process name: rss_kb_start (the baseline sample's), rss_kb_end (mean of the last END_SAMPLES
    samples that have the process), rss_growth_pct, fds_start/fds_end (idle, before and after the load),
    fd_growth and restarts. A process missing from the samples gets None for its RSS figures."""
    names = sorted({name for sample in samples for name in sample["processes"]} | set(idle_start) | set(idle_end))
    first = baseline_index(samples, seconds) if samples else 0
    figures: dict[str, dict] = {}
    for name in names:
        later = [s["processes"][name] for s in samples[first:] if name in s["processes"]]
        rss_start = later[0]["rss_kb"] if later else None
        tail = [p["rss_kb"] for p in later[-END_SAMPLES:]]
        rss_end = round(sum(tail) / len(tail)) if tail else None
        growth = round(100.0 * (rss_end - rss_start) / rss_start, 2) if rss_start and rss_end is not None else None
        fds_start, fds_end = idle_start.get(name), idle_end.get(name)
        figures[name] = {
            "rss_kb_start": rss_start, "rss_kb_end": rss_end, "rss_growth_pct": growth,
            "fds_start": fds_start, "fds_end": fds_end,
            "fd_growth": fds_end - fds_start if fds_start is not None and fds_end is not None else None,
            "restarts": restarts.get(name, 0),
        }
    return figures


def format_soak_table(soak: dict) -> str:
    lines = [f"voicecore bench --soak {soak['seconds']:g}: {soak['calls']} call slots, {soak['calls_completed']} calls "
             f"completed, {soak['calls_failed']} failed, {len(soak['samples'])} samples (RSS from t={soak['baseline_t_s']} s)",
             f"{'process':<20} {'RSS start kB':>12} {'RSS end kB':>11} {'growth %':>9} {'fds start':>9} "
             f"{'fds end':>8} {'fd +':>5} {'restarts':>8}"]

    def cell(value, width: int) -> str:
        return f"{'-' if value is None else value:>{width}}"

    for name, p in soak["processes"].items():
        lines.append(f"{name:<20} {cell(p['rss_kb_start'], 12)} {cell(p['rss_kb_end'], 11)} {cell(p['rss_growth_pct'], 9)} "
                     f"{cell(p['fds_start'], 9)} {cell(p['fds_end'], 8)} {cell(p['fd_growth'], 5)} {cell(p['restarts'], 8)}")
    lines.append(f"shm clean: {soak['shm_clean']}  runtime dir clean: {soak['runtime_dir_clean']}  zombies: {soak['zombies']}")
    for failure in soak["failures"]:
        lines.append(f"FAILURE: {failure}")
    return "\n".join(lines)


def write_soak_png(path: str, soak: dict) -> str:
    """RSS and open fds of every process over the soak, and the calls active."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    samples = soak["samples"]
    times = [s["t_s"] for s in samples]
    names = list(soak["processes"])
    fig, (ax_rss, ax_fds, ax_calls) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    for name in names:
        points = [(s["t_s"], s["processes"][name]) for s in samples if name in s["processes"]]
        ax_rss.plot([t for t, _ in points], [p["rss_kb"] / 1024 for _, p in points], marker=".", label=name)
        ax_fds.plot([t for t, _ in points], [p["fds"] for _, p in points], marker=".", label=name)
    ax_rss.axvline(soak["baseline_t_s"], color="grey", linestyle=":", label="RSS baseline")
    ax_rss.set_ylabel("RSS (MB)")
    ax_rss.set_title(f"soak {soak['seconds']:g} s, {soak['calls']} call slots: RSS per process")
    ax_rss.legend(fontsize=7, ncol=3)
    ax_fds.set_ylabel("open fds")
    ax_fds.set_title("open file descriptors per process")
    ax_calls.plot(times, [s["calls_active"] for s in samples], marker=".", color="black")
    ax_calls.set_ylabel("calls active")
    ax_calls.set_xlabel("seconds since the load started")
    for ax in (ax_rss, ax_fds, ax_calls):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"PNG report written to {path}"


# ----- /proc and supervisord ------------------------------------------------------------------------


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def proc_state_and_start(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a pid, or None when it is gone. The start time tells a
    reused pid from the process we saw."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def program_pids(runtime_dir: Path) -> dict[str, int]:
    """Program name -> pid of every running supervisord program (standbys included), over supervisord's
    XML-RPC socket. Blocking."""
    from supervisor.xmlrpc import SupervisorTransport

    transport = SupervisorTransport(None, None, f"unix://{runtime_dir / 'supervisor.sock'}")
    proxy = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)
    return {info["name"]: info["pid"] for info in proxy.supervisor.getAllProcessInfo() if info.get("pid")}


def zombie_children(pid: int) -> list[int]:
    return [child for child in children_of(pid) if (proc_state_and_start(child) or ("",))[0] == "Z"]


# ----- the run --------------------------------------------------------------------------------------


class SoakRun(LevelRun):
    """One soak: LevelRun's stack, model simulator and warm-up; its own load, sampling, stop and checks."""

    def __init__(self, opts: BenchOptions, workdir: Path) -> None:
        super().__init__(opts, opts.calls, workdir)
        self.seconds = float(opts.soak)
        self.ramp_ms = min(15_000.0, max(1000.0, 50.0 * self.calls))  # spread the first webhooks
        self.call_range = call_seconds_range(self.seconds)
        # An ended call's slot rests (the gateway's quarantine) while the slot's next call already wants
        # one: room for twice the slots resting when every call is as short as it can be.
        churn_per_s = self.calls / (self.call_range[0] + GAP_S[0])
        self.spare_slots = 4 + math.ceil(2 * churn_per_s * SLOT_QUARANTINE_MS / 1000.0)
        self.samples: list[dict] = []
        self.restarts: dict[str, int] = {}
        self.current: dict[str, int] = {}  # name -> pid now
        self.seen: dict[int, int] = {}  # every stack pid seen -> its start time
        self.arenas: set[str] = set()
        self.failures: list[str] = []

    async def _start_model_sim(self) -> int:
        """The model simulator, keeping only SIM_KEEP_CLOSED closed sessions (bench.simproc keeps all: fine
        for seconds, not for an hour)."""
        port_file = self.workdir / "sim.port"
        self.sim_proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.soak", "sim", "--scenario", self.opts.scenario, "--port-file", str(port_file),
            *(["--cpus", self.cpus_arg] if self.cpus_arg else []),
            env=child_env(), stdout=self.log_file, stderr=asyncio.subprocess.STDOUT)
        return int(await wait_for_file(port_file, 30, self.sim_proc))

    async def start_load(self) -> float:
        env = child_env()
        env["BENCH_TWILIO_AUTH_TOKEN"] = self.token
        low, high = self.call_range
        for k in range(self.procs):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.soak", "load", "--base-url", self.base_url, "--scenario", self.opts.scenario,
                "--slots-total", str(self.calls), "--procs", str(self.procs), "--proc-index", str(k),
                "--seconds", str(self.seconds), "--ramp-ms", str(self.ramp_ms), "--call-seconds", f"{low},{high}",
                "--seed", str(SOAK_SEED), "--lead-frames", str(self.lead_frames),
                *(["--unix-socket", self.unix_socket] if self.unix_socket else []),
                *(["--cpus", self.cpus_arg] if self.cpus_arg else []),
                env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self.log_file)
            self.loads.append(proc)
        return await self.release_loads("soak load process")

    # ---- watching the processes ----

    def _poll(self) -> None:
        """Who runs now (blocking: supervisord's RPC): note new pids, count restarts, remember arenas."""
        runtime_dir = Path(self.config.runtime_dir)
        try:
            pids = program_pids(runtime_dir)
        except (OSError, xmlrpc.client.Error) as exc:
            raise StackError(f"supervisord does not answer: {exc}") from exc
        pids = {name: pid for name, pid in pids.items() if name != "modelsim"}
        pids["supervisord"] = self.stack.process.pid
        for name, pid in pids.items():
            old = self.current.get(name)
            if old is not None and old != pid:
                self.restarts[name] = self.restarts.get(name, 0) + 1
            if pid not in self.seen:
                info = proc_state_and_start(pid)
                if info is not None:
                    self.seen[pid] = info[1]
        self.current = pids
        with contextlib.suppress(OSError):
            name = (runtime_dir / ARENA_NAME_FILE).read_text().strip()
            if name:
                self.arenas.add(name)

    def _measure(self) -> dict[str, dict]:
        out = {}
        for name, pid in self.current.items():
            rss, fds = rss_kb(pid), open_fds(pid)
            if rss is not None and fds is not None:
                out[name] = {"rss_kb": rss, "fds": fds}
        return out

    async def _idle_fds(self) -> dict[str, int]:
        await asyncio.to_thread(self._poll)
        return {name: p["fds"] for name, p in self._measure().items()}

    async def soak(self, t0_ms: float) -> None:
        """Poll every POLL_S, sample every SAMPLE_S (t = 0 at the load's start) until the soak's end."""
        end_s = t0_ms / 1000.0 + self.seconds
        progress = Progress(f"soak {self.calls} calls", self.seconds)
        next_sample = t0_ms / 1000.0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                await asyncio.to_thread(self._poll)
                self.samples.append({"t_s": round(now - t0_ms / 1000.0, 1), "calls_active": self._load_total("live"),
                                     "calls_completed": self._load_total("done"), "processes": self._measure()})
                next_sample += SAMPLE_S
                if next_sample > end_s + 0.5:
                    break
            elif now - next_sample < -POLL_S:
                await asyncio.to_thread(self._poll)
            if self.stack.process.poll() is not None:
                raise StackError(f"supervisord exited with {self.stack.process.returncode} during the soak")
            progress.update(self._load_total("live"), self._load_total("done"), self._load_total("failed"),
                            self.calls, "soaking")
            await asyncio.sleep(max(0.05, min(POLL_S, next_sample - time.monotonic())))
        progress.finish()

    async def wait_load_end(self) -> None:
        deadline = time.monotonic() + LOAD_END_SLACK_S
        for k, proc in enumerate(self.loads):
            try:
                await asyncio.wait_for(proc.wait(), max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                self.failures.append(f"soak load process {k} did not end its calls in time and was killed")
        for task in self.readers:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 5)
        # The stack closes its side of the last calls a moment after the carrier hung up.
        from voicecore.demo import fetch_gateway_metrics

        deadline = time.monotonic() + IDLE_WAIT_S
        while time.monotonic() < deadline:
            metrics = await asyncio.to_thread(fetch_gateway_metrics, self.config)
            if not metrics.get("workers", {}).get("gateway", {}).get("calls_active", 0):
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)

    async def stop_stack(self) -> list[str]:
        """Stop supervisord as `voicecore up` does (SIGTERM, wait) and return what its processes left in the
        runtime dir themselves; stop() then runs the same clean-up `voicecore up` runs (Stack.stop)."""
        process = self.stack.process
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, STOP_TIMEOUT_S)
        except Exception:  # subprocess.TimeoutExpired
            self.failures.append(f"supervisord did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM (killed)")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await asyncio.to_thread(process.wait)
        runtime_dir = Path(self.config.runtime_dir)
        return sorted(p.name for p in runtime_dir.iterdir()) if runtime_dir.exists() else []

    def checks(self) -> dict:
        """After everything stopped: /dev/shm, the runtime dir, zombies and stack processes still alive."""
        shm_left = sorted(name for name in self.arenas if (Path(self.config.shm_dir) / name).exists())
        runtime_dir = Path(self.config.runtime_dir)
        runtime_left = sorted(p.name for p in runtime_dir.iterdir()) if runtime_dir.exists() else []
        zombies = zombie_children(os.getpid())
        alive = [pid for pid, start in self.seen.items()
                 if (info := proc_state_and_start(pid)) is not None and info[1] == start]
        if shm_left:
            self.failures.append(f"arena(s) left in {self.config.shm_dir}: {', '.join(shm_left)}")
        if runtime_left:
            self.failures.append(f"runtime dir {runtime_dir} not clean after stop: {', '.join(runtime_left)}")
        if zombies:
            self.failures.append(f"zombie children of the bench: {zombies}")
        if alive:
            self.failures.append(f"stack processes still alive after stop: {alive}")
        return {"shm_clean": not shm_left, "runtime_dir_clean": not runtime_left, "zombies": len(zombies) + len(alive),
                "shm_leftovers": shm_left, "runtime_dir_leftovers": runtime_left, "stack_pids_alive": alive}

    async def run_soak(self) -> dict:
        self.log_file = open(self.log_path, "wb")
        left_by_processes: list[str] = []
        idle_start: dict[str, int] = {}
        idle_end: dict[str, int] = {}
        try:
            await self.start_system()
            await self.warm_up()
            idle_start = await self._idle_fds()
            t0_ms = await self.start_load()
            await self.soak(t0_ms)
            await self.wait_load_end()
            idle_end = await self._idle_fds()
            left_by_processes = await self.stop_stack()
        finally:
            await self.stop()
        completed = self._load_total("done")
        failed = self._load_total("failed")
        errors = [e for k, s in self.status.items() if isinstance(k, int) for e in s.get("errors", [])]
        reasons: dict[str, int] = {}
        for k, status in self.status.items():
            for reason, count in (status.get("reasons", {}) if isinstance(k, int) else {}).items():
                reasons[reason] = reasons.get(reason, 0) + count
        if failed:
            example = f", e.g. {errors[0][:300]}" if errors else ""
            self.failures.append(f"{failed} of {completed} calls failed (by how they ended: {reasons}){example}")
        for name, count in sorted(self.restarts.items()):
            self.failures.append(f"{name} restarted {count} time(s)")
        checked = self.checks()
        samples = [{k: s[k] for k in ("t_s", "calls_active", "processes")} for s in self.samples]
        first = baseline_index(self.samples, self.seconds) if self.samples else 0
        return {
            "seconds": self.seconds, "calls": self.calls, "calls_completed": completed, "calls_failed": failed,
            "calls_failed_by_reason": reasons,
            "call_seconds_range": list(self.call_range), "seed": SOAK_SEED, "scenario": self.opts.scenario,
            "max_calls": self.calls + self.spare_slots, "sample_interval_s": SAMPLE_S, "warm_up_s": warm_up_s(self.seconds),
            "baseline_t_s": self.samples[first]["t_s"] if self.samples else None,
            "samples": samples,
            "processes": soak_figures(self.samples, self.seconds, idle_start, idle_end, self.restarts),
            "shm_clean": checked["shm_clean"], "runtime_dir_clean": checked["runtime_dir_clean"],
            "zombies": checked["zombies"],
            "runtime_dir_left_by_processes": left_by_processes,  # before `voicecore up`'s clean-up ran
            "arenas_seen": len(self.arenas),
            "failures": self.failures[:50],
        }


# ----- entry from `voicecore bench` -----------------------------------------------------------------


def soak_problem(opts: BenchOptions) -> str | None:
    """Why these options cannot soak, or None."""
    if opts.soak < 10:
        return "--soak SECONDS needs at least 10 s (a sample every 10 s)"
    if opts.calls < 1:
        return "need --calls >= 1"
    if opts.target or opts.baseline or opts.find_capacity or opts.compare_store or opts.profile:
        return "--soak starts its own voicecore stack: not with --target, --baseline, --find-capacity, --compare-store or --profile"
    if opts.scenario not in ("steady", "bargein-storm", "model-stall", "silence", "overlap"):
        return f"--soak runs the simulator's scenarios steady, bargein-storm, model-stall, silence or overlap, not {opts.scenario!r}"
    return None


async def _soak_main(opts: BenchOptions) -> dict:
    from bench.report import machine_info, versions

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    if opts.pin_load:
        from bench.pinning import parse_cpus

        os.sched_setaffinity(0, parse_cpus(opts.pin_load))
    with tempfile.TemporaryDirectory(prefix="voicecore-soak-") as tmp:
        run = SoakRun(opts, Path(tmp))
        try:
            soak = await run.run_soak()
        except BaseException:
            if run.log_path.exists():
                sys.stderr.write(run.log_path.read_text(errors="replace")[-3000:] + "\n")
            raise
        if (opts.keep_logs or soak["failures"]) and run.log_path.exists():
            sys.stderr.write(run.log_path.read_text(errors="replace")[-6000:] + "\n")
    return {"soak": soak, "command": shlex.join(sys.argv), "machine": machine_info(), "versions": versions()}


def run_soak(opts: BenchOptions) -> int:
    problem = soak_problem(opts)
    if problem:
        print(f"voicecore bench: {problem}", file=sys.stderr)
        return 2
    from bench.run import PRIORITY_ENV, save_path_for

    save_path, problem = save_path_for(opts)  # checked before the hour, not after it
    if problem:
        print(f"voicecore bench: {problem}", file=sys.stderr)
        return 2

    os.environ[PRIORITY_ENV] = "1" if opts.privileges == "on" else "0"
    top, code = run_async(_soak_main(opts))
    if top is None:
        return code
    soak = top["soak"]
    print(format_soak_table(soak))
    text = json.dumps(top, indent=1) + "\n"
    for path in filter(None, (opts.json_path, save_path)):  # --save was dropped here before: a 1 h soak lost
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        print(f"bench: JSON report written to {path}", file=sys.stderr)
    report_path = opts.json_path or (str(save_path) if save_path else None)
    png = opts.png_path or (str(Path(report_path).with_suffix(".png")) if report_path else None)
    if png:
        print(f"bench: {write_soak_png(png, soak)}", file=sys.stderr)
    return 0 if not soak["failures"] else 1


# ----- the soak's own processes: `python -m bench.soak load|sim` ------------------------------------


async def _load(args: argparse.Namespace, t0_ms: float) -> dict:
    """Keep this process's share of the slots busy until t0 + seconds; returns the totals."""
    from bench.scenarios import get_scenario
    from voicecore.sim.carrier import place_call, shared_ticker

    scenario = get_scenario(args.scenario)
    token = os.environ.get("BENCH_TWILIO_AUTH_TOKEN", "")
    low, high = (float(x) for x in args.call_seconds.split(","))
    end_s = t0_ms / 1000.0 + args.seconds
    counts = {"started": 0, "done": 0, "failed": 0}
    errors: list[str] = []
    reasons: dict[str, int] = {}  # failed calls by how they ended ("server 1011", "not_connected")

    async def slot(index: int) -> None:
        rng = random.Random(f"{args.seed}-{index}")  # each slot its own seeded sequence of call lengths
        await asyncio.sleep(max(0.0, (t0_ms + args.ramp_ms * index / max(1, args.slots_total)) / 1000.0 - time.monotonic()))
        call = 0
        while (left := end_s - time.monotonic()) >= MIN_CALL_S:
            length = min(rng.uniform(low, high), left)
            script = scenario.script(int(length * 1000), index + args.slots_total * call)
            call += 1
            counts["started"] += 1
            result = await place_call(args.base_url, token, script, args.lead_frames, keep_audio=False,
                                      unix_socket=args.unix_socket or None)
            counts["done"] += 1
            pause = rng.uniform(*GAP_S)
            if result.closed_by != "carrier" or result.errors:
                counts["failed"] += 1
                reason = f"{result.closed_by}" + (f" {result.close_code}" if result.close_code is not None else "")
                reasons[reason] = reasons.get(reason, 0) + 1
                if len(errors) < 5:
                    errors.append(f"{result.call_sid} (a {length:.1f} s call): {reason} {'; '.join(result.errors)}"[:400])
                pause += FAILED_RETRY_S
            await asyncio.sleep(pause)

    async def progress() -> None:
        ticker = shared_ticker()
        while True:
            print(json.dumps({"live": ticker.live(), **counts, "errors": errors, "reasons": reasons}), flush=True)
            await asyncio.sleep(1.0)

    reporter = asyncio.create_task(progress())
    try:
        await asyncio.gather(*(slot(i) for i in range(args.proc_index, args.slots_total, args.procs)))
    finally:
        reporter.cancel()
    return {"live": 0, **counts, "errors": errors, "reasons": reasons}


async def _sim(args: argparse.Namespace) -> None:
    from bench.scenarios import get_scenario
    from voicecore.sim.model_server import serve_model_sim

    sim, port = await serve_model_sim("127.0.0.1", 0, get_scenario(args.scenario).sim_config, keep_closed=SIM_KEEP_CLOSED)
    tmp = Path(args.port_file + ".tmp")
    tmp.write_text(str(port))
    tmp.replace(args.port_file)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await sim.aclose()


def main(argv: list[str] | None = None) -> None:
    import uvloop

    from bench.pinning import parse_cpus

    parser = argparse.ArgumentParser(description="voicecore bench --soak: a load or model-simulator process")
    sub = parser.add_subparsers(dest="role", required=True)
    load = sub.add_parser("load", help="keep call slots busy (protocol as bench/loadgen.py: ready, t0, status lines)")
    load.add_argument("--base-url", required=True)
    load.add_argument("--scenario", required=True)
    load.add_argument("--slots-total", type=int, required=True)
    load.add_argument("--procs", type=int, default=1)
    load.add_argument("--proc-index", type=int, default=0)
    load.add_argument("--seconds", type=float, required=True)
    load.add_argument("--ramp-ms", type=float, default=1000.0)
    load.add_argument("--call-seconds", default=f"{CALL_SECONDS[0]},{CALL_SECONDS[1]}", metavar="LOW,HIGH")
    load.add_argument("--seed", type=int, default=SOAK_SEED)
    load.add_argument("--lead-frames", type=int, default=4)
    load.add_argument("--unix-socket", default="")
    load.add_argument("--cpus", default="")
    sim = sub.add_parser("sim", help="the model simulator, bounded memory")
    sim.add_argument("--scenario", required=True)
    sim.add_argument("--port-file", required=True)
    sim.add_argument("--cpus", default="")
    args = parser.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, parse_cpus(args.cpus))
    if args.role == "sim":
        os.nice(SIM_NICE)
        uvloop.run(_sim(args))
        return
    from bench.loadgen import LOAD_RT_PRIORITY
    from voicecore.priority import raise_priority

    raise_priority(fifo_priority=LOAD_RT_PRIORITY, nice=-10)
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line:
        return
    totals = uvloop.run(_load(args, float(json.loads(line)["t0_ms"])))
    print(json.dumps(totals), flush=True)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
