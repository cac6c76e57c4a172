"""Running the stack under supervisord (voicecore/deploy_templates/supervisord.conf): start, wait until
ready, stop, clean up.

Owns the process-level lifecycle that `voicecore up` and `voicecore demo` share: the environment every
process gets, the readiness check, the shutdown that leaves nothing in /dev/shm or the runtime dir, and
reading CPU time of the stack's processes from /proc. Supervision itself (restarts) is supervisord's.
Also the drain's two front ends (`voicecore drain`, and `voicecore up` on SIGTERM or Ctrl-C): they write the
request (voicecore/drain.py) and watch the node stop; the gateway does the draining and, once drained,
stops supervisord itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h11

from voicecore import drain, http_client, timing
from voicecore.bus.transport import ARENA_NAME_FILE, default_runtime_dir, ensure_runtime_dir
from voicecore.reattach import LEDGER_DIR as REATTACH_LEDGER_DIR
from voicecore.shm.compile_lock import LOCK_FILE_NAMES as COMPILE_LOCK_FILES
from voicecore.store.spool import SPOOL_DIR
from voicecore import standby
from voicecore.config import METRICS_LOCAL, Config
from voicecore.errors import DependencyError
from voicecore.processes import children_of, pid_alive
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
                 *(f"leader-{role}.{kind}" for role in standby.ROLES for kind in ("lock", "pid", "standby")), drain.DRAIN_FILE,
                 *COMPILE_LOCK_FILES)
# After the drain's deadline, how long `voicecore drain` and `voicecore up` wait for the node to stop before
# they give up on it (the gateway ends the calls at the deadline and stops the node at once: this is slack for
# a gateway that is itself stuck or restarting).
DRAIN_STOP_SLACK_S = 30.0
# `voicecore up`'s watch loop: how often it looks for a drain request and the stack's end (a signal ends a wait
# at once), and while a drain goes on.
UP_WATCH_IDLE_S = 0.5
UP_WATCH_DRAINING_S = 0.1
PROGRESS_POLL_S = 1.0  # how often a drain's front end asks the gateway how many calls are left
# How long `voicecore up` and `voicecore demo` wait for the stack to be healthy before they give up and stop
# it. A fresh install compiles its numba kernels first; on a 2-core machine whose cores other work keeps busy
# such a start took up to 48 s, and before the kernels were compiled once per node, over 60 s
# (bench/cold_start.py; docs/explanation/measured.md#cold-start). A start given up on is a node that never
# comes up; a stack that cannot start at all ends the wait at once (supervisord exits).
READY_TIMEOUT_S = 180.0


class StackError(DependencyError, RuntimeError):
    pass


class StartInterrupted(StackError):
    """Asked to stop (``wait_ready``'s ``stopping``) before the stack was ready."""


def get_from_gateway(config: Config, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET one of the gateway's own endpoints (/healthz, /metrics) where it listens: host:port or its
    Unix socket (/metrics: metrics_listen's own address when it has one). Blocking; not for a thread that runs an event loop."""
    if path.split("?", 1)[0] == "/metrics" and config.metrics_listen != METRICS_LOCAL:
        host, _, port = config.metrics_listen.rpartition(":")
        host = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host in ("[::]", "::") else host
        return asyncio.run(http_client.send("GET", f"http://{host}:{port}{path}", timeout_s=timeout_s))
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


def stack_environment(config: Config, simulator: bool | None = None) -> dict[str, str]:
    """``simulator``: whether the built-in model simulator starts (None: when no OpenAI vendor is configured;
    `voicecore up` decides with the agent's vendor, voicecore/vendor_route.py)."""
    env = dict(os.environ)
    env.update(config.as_env())
    env["VOICECORE_PYTHON"] = sys.executable
    simulator = config.uses_simulator if simulator is None else simulator
    env["VOICECORE_SIM_AUTOSTART"] = "true" if simulator else "false"
    # the recorder only has work with a call store (its own process: never on the 20 ms path)
    env["VOICECORE_RECORDER_AUTOSTART"] = "true" if database_url_for(config) else "false"
    # the console shows the store's calls and the recorder's live events: only with a store, and a port
    # the gateway, the pacer, the model worker and the validator: one serving, one standing by (voicecore/standby.py)
    env["VOICECORE_ROLE_PROCS"] = "2" if config.standby_workers else "1"
    env["VOICECORE_CONSOLE_AUTOSTART"] = "true" if database_url_for(config) and config.console_listen else "false"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def pacer_step_cached(environ: dict[str, str]) -> bool:
    """numba's on-disk cache seems to hold the pacer's step already (a restart, not a fresh install): then
    `voicecore up` does not compile it ahead. A guess from the cache's file names where numba puts them
    (``NUMBA_CACHE_DIR``, else beside the sources, else the user's cache directory), without importing numba:
    a stale entry guessed fresh makes the pacer compile it itself, as it did before; never anything worse."""
    index = f"core.pace_tick-*.py{sys.version_info.major}{sys.version_info.minor}.nbi"
    if environ.get("NUMBA_CACHE_DIR"):
        return any(Path(environ["NUMBA_CACHE_DIR"]).rglob(index))
    user_cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "numba"
    return any((REPO_ROOT / "workers" / "pacer" / "__pycache__").glob(index)) or any(user_cache.rglob(index))


@dataclasses.dataclass
class Stack:
    config: Config
    process: subprocess.Popen | None = None
    simulator: bool | None = None  # the built-in model simulator starts (None: config.uses_simulator)
    # `voicecore up`: the pacer's step compiled (or loaded) by a process of its own started before supervisord
    # (workers/pacer/warm_up.py): a fresh install's compile is the start's critical path, and begins at once.
    compile_ahead: bool = False
    compiling: subprocess.Popen | None = None

    def start(self, log_file=None) -> None:
        runtime_dir = ensure_runtime_dir(self.config.runtime_dir)
        if (runtime_dir / "supervisor.sock").exists():
            probe = subprocess.run(
                [sys.executable, "-m", "supervisor.supervisorctl", "-c", str(SUPERVISOR_CONF), "pid"],
                env=stack_environment(self.config, self.simulator), capture_output=True, text=True, timeout=10,
            )
            if probe.returncode == 0 and probe.stdout.strip().isdigit():
                raise StackError(f"a stack is already running in {runtime_dir}")
        # A drain request left by a stack that did not stop cleanly would make this one drain (and stop) at once.
        drain.drain_path(runtime_dir).unlink(missing_ok=True)
        if self.config.record_dir:
            Path(self.config.record_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # records are personal data
        env = stack_environment(self.config, self.simulator)
        if self.compile_ahead and not pacer_step_cached(env):
            self.compiling = subprocess.Popen([sys.executable, "-m", "workers.pacer.warm_up"], env=env,
                                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=log_file)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "supervisor.supervisord", "-n", "-c", str(SUPERVISOR_CONF)],
            env=env,
            start_new_session=True,  # terminal signals reach us only; we stop the stack in order
            stdout=log_file, stderr=subprocess.STDOUT if log_file is not None else None,
        )

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, stopping=lambda: False, standbys: bool = True) -> dict:
        """Wait until /healthz answers and every worker has sent a heartbeat. A node whose model vendor refuses
        its configuration is up (it answers calls with the apology) though unhealthy: returned, its health
        saying why (``healthy`` false, ``model_vendor``). ``stopping()`` true ends the wait (StartInterrupted):
        a Ctrl-C during a slow first start is not held up to the timeout.

        ``standbys``: also until every role's standby stands by, warmed up (with the standby_workers setting).
        They start once their role serves, so they warm up in the seconds after the node is healthy: a test or
        a bench that starts its calls (or kills a worker) at once waits for them, so that their imports do not
        share the cores with its calls; `voicecore up` says it listens without them."""
        deadline = time.monotonic() + timeout_s
        last_error = "no answer"
        while time.monotonic() < deadline:
            if stopping():
                raise StartInterrupted("stopped before the stack was ready")
            if self.compiling is not None:
                self.compiling.poll()  # reaped once it is done
            if self.process is not None and self.process.poll() is not None:
                raise StackError(f"supervisord exited with {self.process.returncode}")
            try:
                status, body = get_from_gateway(self.config, "/healthz", timeout_s=1.0)
                health = json.loads(body) if status == 503 else {}
                if status != 200 and health.get("status") not in ("model_vendor_refused", "workers_down"):
                    raise ValueError(f"/healthz answered HTTP {status}")
                health = json.loads(body)
                alive = health.get("workers_alive", {})
                if not all(alive.get(name) for name in timing.ESSENTIAL_WORKERS):
                    last_error = f"workers not alive yet: {alive}"
                elif standbys and self.config.standby_workers and (missing := standby.standbys_missing(self.config.runtime_dir)):
                    last_error = f"not standing by yet: the standby {', '.join(missing)}"
                else:
                    return health
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
        if self.compiling is not None:
            if self.compiling.poll() is None:
                self.compiling.kill()  # the pacer compiles what it needs itself
            self.compiling.wait()
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
    shutil.rmtree(runtime_dir / REATTACH_LEDGER_DIR, ignore_errors=True)  # the stopped node's calls are over
    try:
        (runtime_dir / SPOOL_DIR).rmdir()  # empty: every spooled call is stored; else it waits for the next start
    except OSError:
        pass
    try:
        runtime_dir.rmdir()
    except OSError:
        pass  # not empty: someone else's files, leave them


def read_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def live_calls(config: Config) -> int | None:
    """Calls in a slot now, as the gateway says (None: it did not answer)."""
    try:
        status, body = get_from_gateway(config, "/metrics", timeout_s=1.0)
        return int(json.loads(body)["gateway"]["calls_active"]) if status == 200 else None
    except (OSError, TimeoutError, h11.ProtocolError, ValueError, KeyError, TypeError):
        return None


class DrainProgress:
    """What a drain's front end prints while the node drains: a line when the count of live calls changes,
    one when the deadline passes with calls still up."""

    def __init__(self, config: Config, request: drain.DrainRequest, prefix: str, out) -> None:
        self.config = config
        self.request = request
        self.prefix = prefix
        self.out = out
        self.last_calls: int | None = None
        self.next_poll = 0.0
        self.deadline_said = False

    def refusal(self) -> str:
        url = self.config.drain_redirect_url
        return f"redirected to {url}" if url else "rejected (busy)"

    def remaining_s(self) -> float:
        return self.request.remaining_s(time.monotonic_ns())

    def announce(self, created: bool, hint: str = "") -> None:
        calls = live_calls(self.config)
        self.last_calls = calls
        if created:
            head = f"draining: {_live_calls(calls)} {'goes' if calls == 1 else 'go'} on"
        else:
            ago = time.time() - self.request.started_at_s
            head = (f"a drain is already under way (asked {ago:.0f} s ago by {self.request.requested_by or '?'}): "
                    f"{_live_calls(calls)}")
        self._say(f"{head}, new calls are {self.refusal()}; deadline in {max(0.0, self.remaining_s()):.0f} s{hint}")
        self.next_poll = time.monotonic() + PROGRESS_POLL_S

    def poll(self) -> None:
        if time.monotonic() < self.next_poll:
            return
        self.next_poll = time.monotonic() + PROGRESS_POLL_S
        calls = live_calls(self.config)
        remaining = self.remaining_s()
        if calls is not None and calls != self.last_calls:
            self.last_calls = calls
            self._say(f"{_live_calls(calls)} left (deadline in {max(0.0, remaining):.0f} s)")
        if remaining <= 0 and not self.deadline_said and self.last_calls:
            self.deadline_said = True
            self._say(f"deadline reached: ending the {_live_calls(self.last_calls)} still up")

    def gave_up(self) -> bool:
        """True (said once) when the node has not stopped DRAIN_STOP_SLACK_S after the deadline."""
        if self.remaining_s() > -DRAIN_STOP_SLACK_S:
            return False
        self._say(f"the node has not stopped {DRAIN_STOP_SLACK_S:.0f} s after the drain's deadline")
        return True

    def _say(self, text: str) -> None:
        print(f"{self.prefix}: {text}", file=self.out, flush=True)


def _live_calls(n: int | None) -> str:
    return "? live calls" if n is None else f"{n} live call" + ("" if n == 1 else "s")


# `voicecore drain` exit codes (docs/how-to/drain.md#voicecore-drain-exit-codes)
DRAIN_STOPPED = 0  # the node drained and stopped (with --no-wait: the drain is under way)
DRAIN_NOT_STOPPED = 1  # still running DRAIN_STOP_SLACK_S after the deadline
DRAIN_NO_NODE = 3  # no running node in the runtime dir (2 is the CLI's configuration error)


def drain_node(config: Config, wait: bool = True, timeout_s: float | None = None, out=None) -> int:
    """`voicecore drain`: ask the node in config.runtime_dir to drain; with ``wait``, print its progress and
    return once it stopped (its runtime dir cleaned)."""
    out = out if out is not None else sys.stdout
    runtime_dir = Path(config.runtime_dir or default_runtime_dir())
    config = dataclasses.replace(config, runtime_dir=str(runtime_dir))
    pid = drain.supervisord_pid(runtime_dir)
    if pid is None:
        print(f"voicecore drain: no running node in {runtime_dir} (set VOICECORE_RUNTIME_DIR to the node's)",
              file=sys.stderr)
        return DRAIN_NO_NODE
    request, created = drain.request_drain(runtime_dir, config.drain_timeout_s if timeout_s is None else timeout_s,
                                           "voicecore drain")
    progress = DrainProgress(config, request, "voicecore drain", out)
    progress.announce(created)
    if not wait:
        return DRAIN_STOPPED
    while pid_alive(pid):
        progress.poll()
        if progress.gave_up():
            return DRAIN_NOT_STOPPED
        time.sleep(0.1)
    # `voicecore up` cleans up after its supervisord too; a node run by hand has nobody else to do it
    cleanup_runtime(config)
    elapsed = time.time() - request.started_at_s
    print(f"voicecore drain: the node stopped, {elapsed:.1f} s after the drain began", file=out, flush=True)
    return DRAIN_STOPPED


def run_foreground(config: Config, model_line: str = "", simulator: bool | None = None) -> int:
    """`voicecore up`: run the stack until SIGTERM or Ctrl-C (SIGINT), then drain it (live calls finish, new
    ones are refused, up to drain_timeout_s; the gateway stops the stack once drained) and clean up. A second
    signal stops everything at once, as does the first one before the stack is ready."""
    stack = Stack(config, simulator=simulator, compile_ahead=True)
    signals: list[int] = []
    signalled = threading.Event()  # ends the watch loop's wait at once (time.sleep resumes after a handler)

    def on_signal(signum, frame):  # noqa: ARG001
        signals.append(signum)
        signalled.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    stack.start()
    try:
        health = stack.wait_ready(stopping=lambda: bool(signals), standbys=False)  # the standbys warm up after
        mode = model_line or ("model built-in model simulator" if config.uses_simulator else f"model {config.model_url}")
        print(f"voicecore up: listening on {config.listen}, {mode}, {health['max_calls']} call slots; "
              "Ctrl-C (or SIGTERM) drains, twice stops at once", file=sys.stderr, flush=True)
        if health.get("status") == "model_vendor_refused":
            print(f"voicecore up: the model vendor refuses this node's configuration ({health['model_vendor']['error']}): "
                  "calls get the apology, /healthz answers 503", file=sys.stderr, flush=True)
        progress: DrainProgress | None = None
        signal_seen = False
        stop_at_once = bool(signals)  # a signal while starting up: there is nothing to drain yet
        while not stop_at_once and stack.process.poll() is None:
            if len(signals) >= 2:
                stop_at_once = True
                break
            if signals and not signal_seen:
                # The first signal drains, also when `voicecore drain` already began one (a preStop hook
                # run with --no-wait, then Kubernetes' SIGTERM): that drain goes on, its deadline unchanged.
                signal_seen = True
                name = signal.Signals(signals[0]).name
                request, created = drain.request_drain(config.runtime_dir, config.drain_timeout_s,
                                                       f"voicecore up ({name})")
                progress = DrainProgress(config, request, "voicecore up", sys.stderr)
                again = "Ctrl-C" if signals[0] == signal.SIGINT else name
                progress.announce(created, f"; {again} again stops at once")
            elif progress is None:
                try:
                    request = drain.read_request(config.runtime_dir)
                except drain.DrainFileError:
                    request = None
                if request is not None:  # `voicecore drain` asked
                    progress = DrainProgress(config, request, "voicecore up", sys.stderr)
                    progress.announce(False)
            if progress is not None:
                progress.poll()
                if progress.gave_up():
                    stop_at_once = True
                    break
            # Draining: progress lines as it goes; otherwise only a signal, a `voicecore drain` or the stack's
            # end are awaited, and an idle node's foreground process need not wake 10 times a second.
            signalled.wait(UP_WATCH_DRAINING_S if progress is not None else UP_WATCH_IDLE_S)
            signalled.clear()
        if stop_at_once:
            print("voicecore up: stopping at once", file=sys.stderr, flush=True)
    except StartInterrupted:  # a signal while starting: there is nothing to drain yet
        print("voicecore up: stopping at once", file=sys.stderr, flush=True)
    except StackError as exc:
        print(f"voicecore up: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    code = stack.stop()
    print("voicecore up: stopped", file=sys.stderr)
    return 0 if code in (0, -signal.SIGTERM) else code
