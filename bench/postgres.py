"""A PostgreSQL of the bench's own that can be killed and started again: the chaos run's `postgres` fault.

Owns one PostgreSQL server from the ``pgserver`` package's binaries (``pip install 'voicecore[postgres-bench]'``):
a data directory in the run's workdir, listening on 127.0.0.1 only at a port of its own (and a Unix socket in
the data directory, for nobody), started with ``pg_ctl``; ``kill()`` sends SIGKILL to the postmaster (its
backends notice and end, every client connection is cut), ``start()`` starts it again on the same data
directory and port (crash recovery replays the WAL: what was committed is there), and ``stop()`` ends it,
bounded in time. pgserver runs the server as its own system user when this process is root (PostgreSQL
refuses to run as root); the commands below pass that user on.

Blocking calls (pg_ctl waits for the server): an event loop runs them in a thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

START_TIMEOUT_S = 30.0  # a restart after SIGKILL waits for the old backends to let go of the shared memory
STOP_TIMEOUT_S = 15.0


class PostgresUnavailable(RuntimeError):
    """pgserver is not installed, or its server would not start."""


def _pgserver():
    try:
        import pgserver  # its commands (pg_ctl, initdb) are its top-level names
    except ImportError:
        raise PostgresUnavailable("the chaos fault `postgres` starts a PostgreSQL from the pgserver package: "
                                  "pip install 'voicecore[postgres-bench]'") from None
    return pgserver


class BenchPostgres:
    def __init__(self, workdir: Path, port: int) -> None:
        self.pgdata = (workdir / "pgdata").resolve()
        self.port = port
        self.log_path = self.pgdata / "server.log"
        self.user: str | None = None
        self.pgserver = None  # the module, once create() found it

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def create(self) -> None:
        """initdb (through pgserver, which also prepares the directory for its system user), then start."""
        self.pgserver = _pgserver()
        server = self.pgserver.get_server(self.pgdata, cleanup_mode="stop")  # initdb, and a first start on a socket only
        self.user = server.system_user
        server.cleanup()  # stopped: started again below on 127.0.0.1 at our port
        self.start()

    def _pg_ctl(self, args: list[str], timeout_s: float) -> str:
        assert self.pgserver is not None
        return self.pgserver.pg_ctl(args, pgdata=self.pgdata, user=self.user, timeout=timeout_s)

    def start(self) -> float:
        """Start the server on the same directory and port; the seconds it took. After a SIGKILL the old
        backends may hold the shared memory a moment: tried again until START_TIMEOUT_S."""
        started = time.monotonic()
        deadline = started + START_TIMEOUT_S
        options = f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}"
        while True:
            try:
                self._pg_ctl(["-w", "-t", "20", "-o", options, "-l", str(self.log_path), "start"], timeout_s=25)
                return time.monotonic() - started
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                if time.monotonic() >= deadline:
                    raise PostgresUnavailable(f"PostgreSQL would not start in {START_TIMEOUT_S:.0f} s: {exc}; "
                                              f"its log: {self.log_tail()}") from None
                time.sleep(0.5)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def kill(self) -> int | None:
        """SIGKILL of the postmaster; its pid (None: none was running)."""
        pid = self.postmaster_pid()
        if pid is None:
            return None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return pid

    def stop(self) -> None:
        """End the server whatever its state: an immediate-mode stop, else SIGKILL of the postmaster; then
        wait (bounded) for the postmaster to be gone."""
        if self.pgserver is None:
            return
        pid = self.postmaster_pid()
        try:
            self._pg_ctl(["-w", "-t", str(int(STOP_TIMEOUT_S)), "-m", "immediate", "stop"], timeout_s=STOP_TIMEOUT_S + 5)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.kill()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while pid is not None and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-800:]
        except OSError:
            return "(none)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child of a process that has not reaped it yet is gone all the same
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
