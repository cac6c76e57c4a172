"""Running the stack under supervisord (voicecore/deploy_templates/supervisord.conf): start, wait until
ready, stop, clean up.

Owns the process-level lifecycle that `voicecore up` and `voicecore demo` share: the environment every
process gets, the readiness check, the shutdown that leaves nothing in /dev/shm or the runtime dir, and
reading CPU time of the stack's processes from /proc. Supervision itself (restarts) is supervisord's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import h11

from voicecore import http_client
from voicecore.bus.transport import ARENA_NAME_FILE, default_runtime_dir, ensure_runtime_dir
from voicecore import standby
from voicecore.config import Config
from voicecore.errors import DependencyError
from voicecore.store import database_url_for

# Where the voicecore and workers packages are imported from: a checkout's root, or site-packages after
# `pip install .`; the stack's processes get it on PYTHONPATH so they run the same code as we do.
REPO_ROOT = Path(__file__).resolve().parents[1]
# Shipped inside the package (package data), so an installed voicecore finds it; deploy/supervisord.conf
# in a checkout is a link to this file, for running supervisord by hand.
SUPERVISOR_CONF = Path(__file__).resolve().parent / "deploy_templates" / "supervisord.conf"
STACK_PROGRAMS = ("gateway", "pacer", "model", "validator", "recorder", "console")
RUNTIME_FILES = ("supervisord.pid", "supervisor.sock", "events.sock", "gateway.sock", "pacer.sock", "doorbell.sock",
                 "validator.sock", "model.sock", "recorder.sock", "observe.sock", ARENA_NAME_FILE, ARENA_NAME_FILE + ".tmp",
                 *(f"leader-{role}.{kind}" for role in standby.ROLES for kind in ("lock", "pid")))


class StackError(DependencyError, RuntimeError):
    pass


def get_from_gateway(config: Config, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET one of the gateway's own endpoints (/healthz, /metrics) where it listens: host:port or its
    Unix socket. Blocking; not for a thread that runs an event loop."""
    unix_path = config.listen_unix_path
    url = f"http://{'localhost' if unix_path else config.listen}{path}"
    return asyncio.run(http_client.send("GET", url, timeout_s=timeout_s, unix_socket=unix_path))


def resolve_config(config: Config) -> Config:
    """Fill the settings whose default depends on the machine or the run."""
    changes: dict[str, str] = {}
    if not config.runtime_dir:
        changes["runtime_dir"] = str(default_runtime_dir())
    if not config.twilio_auth_token:
        # Without a configured token nobody outside this run can sign a webhook: fine for the demo and
        # a local try-out; production sets VOICECORE_TWILIO_AUTH_TOKEN.
        changes["twilio_auth_token"] = secrets.token_hex(16)
    return dataclasses.replace(config, **changes) if changes else config


def stack_environment(config: Config) -> dict[str, str]:
    env = dict(os.environ)
    env.update(config.as_env())
    env["VOICECORE_PYTHON"] = sys.executable
    env["VOICECORE_SIM_AUTOSTART"] = "true" if config.uses_simulator else "false"
    # the recorder only has work with a call store (its own process: never on the 20 ms path)
    env["VOICECORE_RECORDER_AUTOSTART"] = "true" if database_url_for(config) else "false"
    # the console shows the store's calls and the recorder's live events: only with a store, and a port
    # the gateway, the pacer, the model worker and the validator: one serving, one standing by (voicecore/standby.py)
    env["VOICECORE_ROLE_PROCS"] = "2" if config.standby_workers else "1"
    env["VOICECORE_CONSOLE_AUTOSTART"] = "true" if database_url_for(config) and config.console_listen else "false"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclasses.dataclass
class Stack:
    config: Config
    process: subprocess.Popen | None = None

    def start(self, log_file=None) -> None:
        runtime_dir = ensure_runtime_dir(self.config.runtime_dir)
        if (runtime_dir / "supervisor.sock").exists():
            probe = subprocess.run(
                [sys.executable, "-m", "supervisor.supervisorctl", "-c", str(SUPERVISOR_CONF), "pid"],
                env=stack_environment(self.config), capture_output=True, text=True, timeout=10,
            )
            if probe.returncode == 0 and probe.stdout.strip().isdigit():
                raise StackError(f"a stack is already running in {runtime_dir}")
        if self.config.record_dir:
            Path(self.config.record_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # records are personal data
        self.process = subprocess.Popen(
            [sys.executable, "-m", "supervisor.supervisord", "-n", "-c", str(SUPERVISOR_CONF)],
            env=stack_environment(self.config),
            start_new_session=True,  # terminal signals reach us only; we stop the stack in order
            stdout=log_file, stderr=subprocess.STDOUT if log_file is not None else None,
        )

    def wait_ready(self, timeout_s: float = 60.0) -> dict:
        """Wait until /healthz answers and every worker has sent a heartbeat."""
        deadline = time.monotonic() + timeout_s
        last_error = "no answer"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise StackError(f"supervisord exited with {self.process.returncode}")
            try:
                status, body = get_from_gateway(self.config, "/healthz", timeout_s=1.0)
                if status != 200:
                    raise ValueError(f"/healthz answered HTTP {status}")
                health = json.loads(body)
                alive = health.get("workers_alive", {})
                if all(alive.get(name) for name in ("pacer", "model")):
                    return health
                last_error = f"workers not alive yet: {alive}"
            except (OSError, TimeoutError, h11.ProtocolError, ValueError) as exc:
                last_error = str(exc)
            time.sleep(0.2)
        raise StackError(f"stack not ready after {timeout_s:.0f} s: {last_error}")

    def program_pids(self) -> dict[str, int]:
        """Program name -> pid, from supervisord's children (read from /proc, no RPC needed)."""
        if self.process is None:
            return {}
        pids: dict[str, int] = {}
        role_pids: dict[str, list[int]] = {}
        for child in children_of(self.process.pid):
            cmdline = read_cmdline(child)
            for name, module in (("gateway", "workers.gateway.main"), ("pacer", "workers.pacer.main"), ("model", "workers.model.main"),
                                 ("validator", "workers.validator.main"), ("recorder", "workers.recorder.main"),
                                 ("console", "workers.console.main"), ("modelsim", "voicecore.sim.model_server")):
                if module in cmdline:
                    role_pids.setdefault(name, []).append(child)
        for name, found in role_pids.items():
            leader = standby.leader_pid(self.config.runtime_dir, name) if name in standby.ROLES else None
            found.sort(key=lambda pid: pid != leader)  # the serving one first, when it has said so
            pids[name] = found[0]
            if len(found) > 1:
                pids[name + "-standby"] = found[1]  # a role's other process: the one waiting to take over
        return pids

    def stop(self, timeout_s: float = 20.0) -> int:
        code = 0
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                code = self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                code = self.process.wait()
        cleanup_runtime(self.config)
        return code


def cleanup_runtime(config: Config) -> None:
    """Remove what a stack may leave behind after a crash: the arena file and the runtime dir's files."""
    runtime_dir = Path(config.runtime_dir)
    name_file = runtime_dir / ARENA_NAME_FILE
    try:
        name = name_file.read_text().strip()
        if name.startswith("voicecore-") and "/" not in name:
            (Path(config.shm_dir) / name).unlink(missing_ok=True)
    except FileNotFoundError:
        pass
    for name in RUNTIME_FILES:
        (runtime_dir / name).unlink(missing_ok=True)
    try:
        runtime_dir.rmdir()
    except OSError:
        pass  # not empty: someone else's files, leave them


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def read_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def run_foreground(config: Config) -> int:
    """`voicecore up`: run the stack until Ctrl-C or SIGTERM, then stop it and clean up."""
    stack = Stack(config)
    stopping = False

    def request_stop(signum, frame):  # noqa: ARG001
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    stack.start()
    try:
        health = stack.wait_ready()
        mode = "built-in model simulator" if config.uses_simulator else config.model_url
        print(f"voicecore up: listening on {config.listen}, model {mode}, {health['max_calls']} call slots; Ctrl-C stops", file=sys.stderr, flush=True)
        while not stopping and stack.process.poll() is None:
            time.sleep(0.2)
    except StackError as exc:
        print(f"voicecore up: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    code = stack.stop()
    print("voicecore up: stopped", file=sys.stderr)
    return 0 if code in (0, -signal.SIGTERM) else code
