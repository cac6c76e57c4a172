"""What a stack costs with no call: `python -m bench.idle [--seconds 60] [--settle 10] [--json [PATH]]`.

Starts the main job the way a user does (`voicecore up`, against the built-in model simulator, on free
loopback ports and a runtime dir of its own: bench/cold_start.py's start), waits until GET /healthz answers
200 with every worker alive and a settle time has passed, then reads every process of the stack's tree from
/proc over the window: the CPU each used (utime + stime), as a fraction of one core. A stack that waits for
calls should cost close to nothing (the target: under 1% of a core for the whole tree); a process that polls
or ticks with nothing to do shows here. Then it sends SIGINT, as Ctrl-C does, and the run counts only when
the stop was clean: `voicecore up` exited 0, none of its processes is left, its arena is gone from /dev/shm
and its runtime dir removed. Prints one JSON object (`cpu_cores_total`, `cpu_cores_by_process`, `seconds`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.cold_start import (POLL_S, alive, interrupt, left_behind, stack_environment, stop_everything,
                              tree)
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.config import load_config
from voicecore.standby import standbys_missing
from voicecore.processes import cpu_seconds
from voicecore.supervise import read_cmdline


def process_name(pid: int) -> str:
    """The program a stack process runs (workers.pacer.main -> pacer), else its command's first words."""
    cmd = read_cmdline(pid)
    for word in cmd.split():
        if word.startswith("workers.") and word.endswith(".main"):
            return word.split(".")[1]
    if "supervisord" in cmd:
        return "supervisord"
    if "voicecore.sim" in cmd or "modelsim" in cmd:
        return "model_sim"
    if " up" in cmd:
        return "voicecore_up"
    return " ".join(cmd.split()[:2])[-40:] or str(pid)


def all_alive(listen: str) -> bool:
    """/healthz says healthy and names every worker alive (each judged by the heartbeat interval it announced)."""
    try:
        with urllib.request.urlopen(f"http://{listen}/healthz", timeout=1.0) as response:
            health = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):  # 503 (HTTPError) included: not ready yet
        return False
    workers = health.get("workers_alive", {})
    return bool(health.get("healthy")) and bool(workers) and all(workers.values())


def measure(seconds: float, settle_s: float, timeout_s: float) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="vc-idle-"))
    runtime_dir, listen, env = stack_environment(workdir)
    log_path = workdir / "up.log"
    with open(log_path, "wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "voicecore.cli", "up"], cwd=workdir, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    arena_name = ""
    try:
        deadline = time.monotonic() + timeout_s
        has_standbys = load_config(env).standby_workers
        # the standbys warm up after the node is healthy
        while not all_alive(listen) or (has_standbys and standbys_missing(runtime_dir)):
            if up.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"voicecore up not healthy:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(POLL_S)
        time.sleep(settle_s)
        pids = tree(up.pid)  # voicecore up, supervisord and every program under it
        names = {pid: process_name(pid) for pid in pids}
        before = {pid: cpu_seconds(pid) for pid in pids}
        t0 = time.monotonic()
        time.sleep(seconds)
        after = {pid: cpu_seconds(pid) for pid in pids}
        wall = time.monotonic() - t0
        changed = sorted(set(tree(up.pid)) ^ set(pids))  # a program restarted in the window: its cost is not all here
        by_process: dict[str, float] = {}
        for pid in pids:
            by_process[names[pid]] = by_process.get(names[pid], 0.0) + (after[pid] - before[pid]) / wall
        with contextlib.suppress(FileNotFoundError):
            arena_name = (runtime_dir / ARENA_NAME_FILE).read_text().strip()
        code, stop_s = interrupt(up, set(pids), timeout_s)
    except BaseException:
        stop_everything(up, runtime_dir)
        raise
    problems = left_behind(code, set(pids), runtime_dir, arena_name)
    if problems:
        stop_everything(up, runtime_dir)
        raise RuntimeError("unclean stop: " + "; ".join(problems) + "\n" + log_path.read_text(errors="replace")[-3000:])
    shutil.rmtree(workdir, ignore_errors=True)
    assert not alive(set(pids))
    return {"seconds": round(wall, 2), "settle_s": settle_s,
            "cpu_cores_total": round(sum(by_process.values()), 4),
            "cpu_cores_by_process": {k: round(v, 4) for k, v in sorted(by_process.items(), key=lambda kv: -kv[1])},
            "processes_changed": changed, "stop_s": round(stop_s, 2), "clean_stop": True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window (default 60)")
    parser.add_argument("--settle", type=float, default=10.0, help="wait after /healthz counts every worker alive (default 10)")
    parser.add_argument("--timeout", type=float, default=240.0, help="give up on a start or a stop after this long")
    parser.add_argument("--json", dest="json_path", nargs="?", const="-", default="",
                        help="print the report as JSON (default), or write it to this path too")
    args = parser.parse_args(argv)
    report = {"command": " ".join(["python -m bench.idle", *(argv if argv is not None else sys.argv[1:])]),
              **measure(args.seconds, args.settle, args.timeout)}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json_path and args.json_path != "-":
        Path(args.json_path).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
