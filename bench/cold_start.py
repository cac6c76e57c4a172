"""How long `voicecore up` takes to be healthy: `python -m bench.cold_start [--runs 3] [--busy] [--json]`.

Starts the main job the way a user does (`voicecore up`, against the built-in model simulator, on free
loopback ports and a runtime dir of its own) and times from the start until GET /healthz answers 200 with
the pacer and the model worker alive (what `voicecore up` waits for before it says it listens); also the CPU
seconds every process of the stack had used by then, which the machine's other work moves far less than the
wall time. Then it sends SIGINT, as Ctrl-C does, and times the stop; a run counts only when the stop was
clean: `voicecore up` exited 0, none of the stack's processes is left, the run's arena is gone from /dev/shm
and its runtime dir is removed. A start `voicecore up` gave up on (it waits READY_TIMEOUT_S) is reported with
what it said, and counts as slower than any other in the median.

Two starts each round, both in a numba cache directory (NUMBA_CACHE_DIR) made for the round:
- cold: the directory is empty, so every numba kernel compiles, as on a fresh install. NUMBA_CACHE_DIR set
  means numba neither reads nor writes cache files beside the sources (voicecore/shm/__pycache__,
  workers/pacer/__pycache__ in a checkout), so whatever is there does not make a cold start warm.
- warm: the same directory again, holding what a start compiled (topped up first, in case the cold start
  was given up on): a restart.

--busy runs a CPU burner (a busy loop) pinned to the last core for the whole measurement: the machine's
other work, competing with the stack for one of the two cores. Prints one JSON object: per mode the median
and every run (``cold_s``, ``warm_s``, ``cold_cpu_s``, ``warm_cpu_s``, ``stop_s``; ``cold_standbys_s`` and
``warm_standbys_s``: until every role's standby stood by too, which start once their role serves), the machine and the
versions (bench/report.py). --logs DIR keeps each start's log, whose timestamped lines say which process
was ready when.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.report import machine_info, versions
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.demo import free_port
from voicecore.processes import children_of, cpu_seconds, reaped_children_cpu_seconds
from voicecore.config import load_config
from voicecore.standby import standbys_missing
from voicecore.supervise import cleanup_runtime

POLL_S = 0.05


def tree(pid: int) -> list[int]:
    """``pid`` and every process under it (from /proc), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children_of(p))
    return out


def burn() -> None:  # pragma: no cover - runs in the burner process until terminated
    while True:
        pass


def start_burner() -> multiprocessing.Process:
    burner = multiprocessing.get_context("spawn").Process(target=burn, name="cold-start-burner", daemon=True)
    burner.start()
    last_core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(burner.pid, {last_core})
    return burner


def healthy(listen: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{listen}/healthz", timeout=1.0) as response:
            health = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):  # 503 (HTTPError) included: not ready yet
        return False
    return bool(health.get("healthy"))  # healthy: the pacer and the model worker alive too


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists() and not zombie(pid)}


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def supervisord_pid(runtime_dir: Path) -> int | None:
    try:
        return int((runtime_dir / "supervisord.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def stop_everything(up: subprocess.Popen, runtime_dir: Path) -> None:
    """After a failure or an interrupt: what `voicecore up` does on a second Ctrl-C (stop at once), then
    supervisord asked to stop its programs, and whatever is still left killed. supervisord and each of its
    programs run in a process group of their own: the processes are found by parentage, before any dies."""
    stack = supervisord_pid(runtime_dir)
    processes = set(tree(up.pid)) | (set(tree(stack)) if stack is not None else set())
    with contextlib.suppress(ProcessLookupError):
        up.send_signal(signal.SIGINT)
        time.sleep(0.5)
        up.send_signal(signal.SIGINT)
    try:
        up.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)
        up.wait()
    if stack is not None and alive({stack}):
        with contextlib.suppress(ProcessLookupError):
            os.kill(stack, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while alive({stack}) and time.monotonic() < deadline:
            time.sleep(POLL_S)
    for pid in alive(processes):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while alive(processes):
        time.sleep(POLL_S)
    # what a killed stack leaves: its arena in /dev/shm, its runtime dir
    cleanup_runtime(dataclasses.replace(load_config({}), runtime_dir=str(runtime_dir)))


def stack_environment(workdir: Path) -> tuple[Path, str, dict[str, str]]:
    """A `voicecore up` of its own: a runtime dir under ``workdir``, free loopback ports, the model simulator
    (no vendor key, no VOICECORE_ setting of the caller's). (runtime dir, listen address, environment)."""
    runtime_dir = workdir / "run"
    listen = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_") and k != "OPENAI_API_KEY"}
    env.update({"VOICECORE_RUNTIME_DIR": str(runtime_dir), "VOICECORE_LISTEN": listen,
                "VOICECORE_SIM_PORT": str(free_port()), "VOICECORE_CONSOLE_LISTEN": f"127.0.0.1:{free_port()}"})
    return runtime_dir, listen, env


def interrupt(up: subprocess.Popen, stack: set[int], timeout_s: float) -> tuple[int, float]:
    """SIGINT, as Ctrl-C does: `voicecore up`'s exit code and the seconds until none of ``stack`` is left."""
    t1 = time.monotonic()
    if up.poll() is None:
        up.send_signal(signal.SIGINT)
    code = up.wait(timeout_s)
    while alive(stack) and time.monotonic() - t1 < timeout_s:
        time.sleep(POLL_S)
    return code, time.monotonic() - t1


def left_behind(code: int, stack: set[int], runtime_dir: Path, arena_name: str) -> list[str]:
    """What makes a stop unclean: a non-zero exit, a process of the stack, its arena in /dev/shm, its runtime dir."""
    problems = []
    if code != 0:
        problems.append(f"voicecore up exited {code}")
    if alive(stack):
        problems.append(f"processes of the stack are left: {sorted(alive(stack))}")
    if arena_name and (Path("/dev/shm") / arena_name).exists():
        problems.append(f"/dev/shm/{arena_name} is left")
    if runtime_dir.exists():
        problems.append(f"the runtime dir is left: {sorted(p.name for p in runtime_dir.iterdir())}")
    return problems


def one_start(cache_dir: Path, timeout_s: float, keep_log: Path | None = None) -> dict:
    """One `voicecore up` with this numba cache dir: seconds to healthy, the CPU seconds its processes had
    used by then, seconds to stop after SIGINT."""
    workdir = Path(tempfile.mkdtemp(prefix="vc-coldstart-"))
    runtime_dir, listen, env = stack_environment(workdir)
    env["NUMBA_CACHE_DIR"] = str(cache_dir)
    log_path = workdir / "up.log"
    arena_name = ""
    stack: set[int] = set()
    cpu_s: float | None = None
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "voicecore.cli", "up"], cwd=workdir, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready_s: float | None = None
        while ready_s is None:
            if healthy(listen):
                ready_s = time.monotonic() - t0
            elif up.poll() is not None:  # `voicecore up` gave up waiting for its stack
                break
            elif time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"voicecore up not healthy after {timeout_s:.0f} s:\n"
                                   + log_path.read_text(errors="replace")[-3000:])
            else:
                time.sleep(POLL_S)
        standbys_s: float | None = None
        if ready_s is not None:
            stack = set(tree(up.pid))  # voicecore up, supervisord and every program under it
            # and what `voicecore up` has reaped already: its compile of the pacer's step ahead, once done
            cpu_s = sum(cpu_seconds(pid) for pid in stack) + reaped_children_cpu_seconds(up.pid)
            # the standbys start once their role serves: the node is whole when each stands by, warmed up
            has_standbys = load_config(env).standby_workers
            while has_standbys and standbys_s is None and up.poll() is None and time.monotonic() - t0 <= timeout_s:
                if not standbys_missing(runtime_dir):
                    standbys_s = time.monotonic() - t0
                else:
                    time.sleep(POLL_S)
            stack = set(tree(up.pid))
        with contextlib.suppress(FileNotFoundError):
            arena_name = (runtime_dir / ARENA_NAME_FILE).read_text().strip()
        code, stop_s = interrupt(up, stack, timeout_s)
    except BaseException:
        stop_everything(up, runtime_dir)
        raise
    failed = ""
    if ready_s is None:  # its own words: the last line it printed about itself
        said = [line for line in log_path.read_text(errors="replace").splitlines() if line.startswith("voicecore up:")]
        failed = said[-1] if said else f"voicecore up exited {code} before /healthz said healthy"
    problems = left_behind(code if ready_s is not None else 0, stack, runtime_dir, arena_name)
    if problems:
        stop_everything(up, runtime_dir)
        raise RuntimeError("unclean stop: " + "; ".join(problems) + "\n" + log_path.read_text(errors="replace")[-3000:])
    if keep_log is not None:  # the stack's own lines, timestamped: which process was ready when
        keep_log.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log_path, keep_log)
    shutil.rmtree(workdir, ignore_errors=True)
    return {"ready_s": None if ready_s is None else round(ready_s, 2),
            "standbys_s": None if standbys_s is None else round(standbys_s, 2),
            "cpu_s": None if cpu_s is None else round(cpu_s, 2), "stop_s": round(stop_s, 2), "failed": failed}


def prime(cache_dir: Path) -> None:
    """Fill the cache as a finished start leaves it (a cold start given up on may have left it half full)."""
    subprocess.run([sys.executable, "-c", PRIME], env={**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}, check=True)


PRIME = """
from voicecore.config import load_config
from voicecore.shm.warmup import warm_up_rings
from workers.pacer.warm_up import warm_up_kernels
warm_up_rings()
warm_up_kernels(load_config({}))
"""


def measure(runs: int, busy: bool, timeout_s: float, logs: Path | None = None) -> dict:
    burner = start_burner() if busy else None
    results: dict[str, list[dict]] = {"cold": [], "warm": []}
    load_before = os.getloadavg()[0]
    try:
        for round_number in range(1, runs + 1):
            cache_dir = Path(tempfile.mkdtemp(prefix="vc-numba-cache-"))
            try:
                for mode in ("cold", "warm"):
                    if mode == "warm":
                        prime(cache_dir)
                    result = one_start(cache_dir, timeout_s, logs / f"{mode}-{round_number}.log" if logs else None)
                    results[mode].append(result)
                    said = (f"healthy after {result['ready_s']:.2f} s ({result['cpu_s']:.1f} CPU s), "
                            f"standbys warm after {result['standbys_s'] or float('nan'):.2f} s, "
                            f"stopped {result['stop_s']:.2f} s after SIGINT"
                            if result["ready_s"] is not None else f"FAILED ({result['failed']})")
                    print(f"{mode}: {said}", file=sys.stderr, flush=True)
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
    finally:
        if burner is not None:
            burner.terminate()
            burner.join()
    report: dict = {"busy": busy, "runs": runs, "machine": machine_info(), "versions": versions(),
                    "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}}
    for mode, done in results.items():
        # a start `voicecore up` gave up on counts as infinitely slow: the median says so when most failed
        times = [r["ready_s"] if r["ready_s"] is not None else float("inf") for r in done]
        median = statistics.median(times)
        report[f"{mode}_s"] = {"median": median if median != float("inf") else None,
                               "runs": [r["ready_s"] for r in done],
                               "failed": [r["failed"] for r in done if r["failed"]]}
        whole = [r["standbys_s"] for r in done if r.get("standbys_s") is not None]
        report[f"{mode}_standbys_s"] = {"median": statistics.median(whole) if whole else None, "runs": whole}
        cpu = [r["cpu_s"] for r in done if r["cpu_s"] is not None]
        report[f"{mode}_cpu_s"] = {"median": statistics.median(cpu) if cpu else None, "runs": cpu}
    stops = [r["stop_s"] for done in results.values() for r in done if r["ready_s"] is not None]  # a stop of a node that was up
    report["stop_s"] = {"median": statistics.median(stops) if stops else None, "runs": stops}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds of a cold and a warm start (default 3; medians)")
    parser.add_argument("--busy", action="store_true", help="a CPU burner on the last core for the whole measurement")
    parser.add_argument("--timeout", type=float, default=240.0, help="give up on a start or a stop after this long")
    parser.add_argument("--logs", type=Path, default=None, help="keep each start's log (voicecore up and its stack) in this directory")
    parser.add_argument("--json", dest="json_path", nargs="?", const="-", default="",
                        help="print the report as JSON (default), or write it to this path too")
    args = parser.parse_args(argv)
    report = {"command": " ".join(["python -m bench.cold_start", *(argv if argv is not None else sys.argv[1:])]),
              **measure(args.runs, args.busy, args.timeout, args.logs)}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json_path and args.json_path != "-":
        Path(args.json_path).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
