"""What a stack costs with no call: `python -m bench.idle [--seconds 30] [--json PATH]`.

Starts the main job the way a user does (`voicecore up`, against the built-in model simulator), waits until it
says it listens and a settle time has passed, then reads every process of the stack's tree from /proc over
the window: the CPU each used, as a fraction of one core. A stack that waits for calls should cost close to
nothing (the target: under 1% of a core for the whole tree); a process that polls or ticks with nothing to do
shows here. Prints one JSON object (`cpu_cores_total`, `cpu_cores_by_process`, `seconds`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from voicecore.drain import children_of
from voicecore.supervise import cpu_seconds, read_cmdline

READY_LINE = "voicecore up: listening on"


def tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children_of(p))
    return out


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


def measure(seconds: float, settle_s: float, start_timeout_s: float) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="vc-idle-"))
    log_path = workdir / "up.log"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # the simulator, as a fresh install runs
    env.setdefault("VOICECORE_RUNTIME_DIR", str(workdir / "run"))
    with open(log_path, "wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "voicecore.cli", "up"], cwd=workdir, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while READY_LINE not in log_path.read_text(errors="replace"):
            if up.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"voicecore up did not come up:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        time.sleep(settle_s)
        pids = tree(up.pid)
        before = {pid: cpu_seconds(pid) for pid in pids}
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        by_process: dict[str, float] = {}
        for pid in pids:
            name = process_name(pid)
            by_process[name] = by_process.get(name, 0.0) + (cpu_seconds(pid) - before[pid]) / wall
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
    return {"seconds": round(wall, 2), "settle_s": settle_s,
            "cpu_cores_total": round(sum(by_process.values()), 4),
            "cpu_cores_by_process": {k: round(v, 4) for k, v in sorted(by_process.items(), key=lambda kv: -kv[1])}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window (default 30)")
    parser.add_argument("--settle", type=float, default=10.0, help="wait after the stack listens (default 10)")
    parser.add_argument("--start-timeout", type=float, default=180.0, help="how long voicecore up may take to listen")
    parser.add_argument("--json", dest="json_path", default="", help="also write the JSON report here")
    args = parser.parse_args(argv)
    report = measure(args.seconds, args.settle, args.start_timeout)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json_path:
        Path(args.json_path).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
