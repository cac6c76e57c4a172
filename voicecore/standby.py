"""Hot standby for the runtime's processes: of the processes started for one role, one serves, the others
wait, warmed up, to take over the moment it dies.

Owns the lock protocol and nothing else. The serving process holds an exclusive ``flock`` on
``<runtime_dir>/leader-<role>.lock``; the kernel drops it when that process dies, however it dies
(SIGKILL included), and a waiting process's ``flock`` returns at once: the hand-over costs microseconds
plus what the new leader still has to do (bind its sockets, pick up the calls from shared memory), not the
supervisor's next poll and an interpreter start. The new leader writes its pid to
``<runtime_dir>/leader-<role>.pid`` once it serves (``announce``): that is how an operator or the chaos
bench finds the process that serves a role.

Why a lock and not the supervisor: supervisord notices a dead child on its next poll (up to 1 s) and then
starts an interpreter (0.3-0.8 s to imports, shared-memory attach and compiled kernels): the chaos bench
measured 1.3 s of silence after a pacer kill that way (docs/explanation/measured.md#failures). A lock wait
also needs no heartbeat protocol and cannot elect two leaders. supervisord still restarts the dead process,
which becomes the new standby.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from voicecore.logs import SignalledWorker, run_until_signalled, stop_requests
from voicecore.processes import pid_alive

log = logging.getLogger("voicecore.standby")

ROLES = ("gateway", "pacer", "model", "validator")
STANDBY_NET_S = 10.0  # a waiting standby looks at its stop flag at least this often, though a signal wakes it at once


def lock_path(runtime_dir: str | Path, role: str) -> Path:
    return Path(runtime_dir) / f"leader-{role}.lock"


def pid_path(runtime_dir: str | Path, role: str) -> Path:
    return Path(runtime_dir) / f"leader-{role}.pid"


def serve_as_leader(runtime_dir: str | Path, role: str, make_worker: Callable[[], SignalledWorker]) -> None:
    """A synchronous worker's life: stand by until this process holds ``role``, then build the worker (its
    sockets are bound only now: a standby binds nothing), say so, and run it until signalled.

    A stop of the whole stack reaches the standby too: it then leaves instead of taking over."""
    leadership = Leadership(runtime_dir, role)
    try:
        with stop_requests() as stop:
            if not leadership.wait(stop.is_set) or stop.is_set():
                return
        worker = make_worker()
        leadership.announce()
        run_until_signalled(worker)
    finally:
        leadership.release()


def standby_path(runtime_dir: str | Path, role: str) -> Path:
    return Path(runtime_dir) / f"leader-{role}.standby"


def leader_pid(runtime_dir: str | Path, role: str) -> int | None:
    """The pid that serves ``role`` now, or None when none has announced itself."""
    return _read_pid(pid_path(runtime_dir, role))


def standby_pid(runtime_dir: str | Path, role: str) -> int | None:
    """The pid of the process standing by, warmed up, to take ``role`` over, or None when none is (yet)."""
    return _read_pid(standby_path(runtime_dir, role))


def standbys_missing(runtime_dir: str | Path) -> list[str]:
    """The roles without a live process standing by (voicecore/standby_start.py starts them once their role
    serves, so they warm up in the seconds after the node is healthy)."""
    return [role for role in ROLES if not pid_alive(standby_pid(runtime_dir, role))]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Leadership:
    """This process's claim on a role: ``wait`` until it serves, ``announce`` once it does, ``release`` on exit."""

    def __init__(self, runtime_dir: str | Path, role: str) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
        self.runtime_dir = Path(runtime_dir)
        self.role = role
        self.fd: int | None = None
        self.held = False
        self.waited_s = 0.0

    def try_acquire(self) -> bool:
        self._open()
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = True
        return True

    def wait(self, stopping=lambda: False, poll_s: float = 0.2) -> bool:
        """Block until this process holds the role (True) or ``stopping()`` says to give up (False).

        The blocking ``flock`` runs on a daemon thread, so the caller's thread can still see a SIGTERM
        (its handler sets what ``stopping`` reads) while the lock wakes us the instant it is free. On the
        main thread both wake it through one pipe (the lock's thread writes to it, and so does any signal:
        ``signal.set_wakeup_fd``), so a standby sleeps until one of them comes; elsewhere (no signal reaches
        that thread) it looks at ``stopping()`` every ``poll_s``.
        """
        if self.try_acquire():
            return True
        self._stand_by()
        started = time.monotonic()
        got = threading.Event()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)

        def block() -> None:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            got.set()
            try:
                os.write(wake_w, b"!")
            except OSError:  # the pipe is full: the waiter is woken already
                pass

        blocker = threading.Thread(target=block, name=f"standby-{self.role}", daemon=True)
        blocker.start()
        try:
            previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            previous = None
        try:
            while not got.is_set():
                if stopping():
                    return False
                if previous is None:
                    got.wait(poll_s)
                    continue
                # The lock or a signal (whose handler runs before ``stopping()`` is read again); the timeout
                # is only a net under that promise, not a poll.
                if select.select([wake_r], [], [], STANDBY_NET_S)[0]:
                    os.read(wake_r, 512)
        finally:
            if previous is not None:
                signal.set_wakeup_fd(previous)
            if got.is_set():  # else the lock's thread may still write to it: leave it open (the process is leaving)
                blocker.join()  # it has written, or is about to
                os.close(wake_r)
                os.close(wake_w)
        self.held = True
        self._forget_standing_by()
        if stopping():
            return False  # the whole stack is stopping: the serving one left for that, not to be replaced
        self.waited_s = time.monotonic() - started
        log.warning("%s: taking over (pid %d) after standing by %.1f s", self.role, os.getpid(), self.waited_s)
        return True

    async def wait_async(self, stop) -> bool:
        """``wait`` for an asyncio process: ``stop`` is an asyncio.Event set by its signal handlers."""
        import asyncio

        if self.try_acquire():
            return True
        self._stand_by()
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        acquired = loop.run_in_executor(None, fcntl.flock, self.fd, fcntl.LOCK_EX)
        stopped = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait({acquired, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if acquired not in done:
            return False  # the executor thread stays blocked in flock; the process is exiting anyway
        stopped.cancel()
        self.held = True
        self._forget_standing_by()
        if stop.is_set():
            return False
        self.waited_s = time.monotonic() - started
        log.warning("%s: taking over (pid %d) after standing by %.1f s", self.role, os.getpid(), self.waited_s)
        return True

    def announce(self) -> None:
        """Say this process serves the role now."""
        _write_pid(pid_path(self.runtime_dir, self.role))

    def release(self) -> None:
        """A clean exit: forget the pid file if it is ours, then let a standby take over."""
        if self.held and leader_pid(self.runtime_dir, self.role) == os.getpid():
            pid_path(self.runtime_dir, self.role).unlink(missing_ok=True)
        self._forget_standing_by()
        if self.fd is not None:
            os.close(self.fd)  # drops the lock
            self.fd = None
        self.held = False

    def _stand_by(self) -> None:
        """Say this process stands by, warmed up (what a stack waits for before it calls itself whole)."""
        log.info("%s: standing by (pid %d); another process serves", self.role, os.getpid())
        _write_pid(standby_path(self.runtime_dir, self.role))

    def _forget_standing_by(self) -> None:
        if standby_pid(self.runtime_dir, self.role) == os.getpid():
            standby_path(self.runtime_dir, self.role).unlink(missing_ok=True)

    def _open(self) -> None:
        if self.fd is None:
            self.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.fd = os.open(lock_path(self.runtime_dir, self.role), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _write_pid(path: Path) -> None:
    """This process's pid into ``path``, atomically: a reader never sees half a pid."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{os.getpid()}\n")
    tmp.replace(path)
