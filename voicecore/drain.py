"""A node's drain request: one file in the runtime directory, ``drain.json``.

Owns the file's format, writing it once (the first request wins: a second `voicecore drain`, or a SIGTERM
after a preStop hook's drain, never moves the deadline) and reading it, and the gateway's cheap watch for it.
What a drain does is the gateway's (workers/gateway/core.py ``Drain``); `voicecore drain` and `voicecore
up`'s signal handling are voicecore/supervise.py's.

Why a file, and not an HTTP endpoint on the gateway or a message on the bus:
- the runtime directory is private (0700, our uid): being able to write there is the authorization. The
  gateway's port is the one the public reaches through a TLS proxy, which on the same host makes every peer
  a loopback address, so "POST /drain from loopback only" would let anyone on the internet drain the node;
- the state outlives the process that serves: a standby gateway that takes over, or one supervisord
  restarts, reads the same file before it listens and drains too, so no restarted process ever takes new
  calls during a drain (a message on the bus would die with the gateway it was sent to);
- it works whatever the gateway listens on (host:port or a Unix socket) and needs no running gateway.
The gateway looks for it on each heartbeat (150 ms with calls live, 1 s idle): one stat() until it appears.

Times: ``started_monotonic_ns`` is CLOCK_MONOTONIC, one clock for every process on the host (the deadline is
computed from it, immune to wall-clock steps); ``started_at_s`` is the wall clock, for people and /metrics.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from voicecore.processes import children_of, pid_alive

DRAIN_FILE = "drain.json"
SUPERVISORD_PID_FILE = "supervisord.pid"  # written by supervisord (deploy_templates/supervisord.conf pidfile=)
FORMAT_VERSION = 1


class DrainFileError(ValueError):
    """The drain file exists but cannot be read as a drain request (written by hand, or truncated)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DrainRequest:
    started_at_s: float  # time.time() when the drain was asked for
    started_monotonic_ns: int  # time.monotonic_ns() then
    timeout_s: float  # live calls may go on this long
    requested_by: str  # "voicecore drain", "voicecore up (SIGTERM)", ...

    @property
    def deadline_monotonic_ns(self) -> int:
        return self.started_monotonic_ns + int(self.timeout_s * 1e9)

    @property
    def deadline_at_s(self) -> float:
        return self.started_at_s + self.timeout_s

    def remaining_s(self, now_monotonic_ns: int) -> float:
        return (self.deadline_monotonic_ns - now_monotonic_ns) / 1e9

    def to_json(self) -> bytes:
        return json.dumps({"version": FORMAT_VERSION, **dataclasses.asdict(self)}).encode()


def parse_request(data: bytes) -> DrainRequest:
    try:
        raw = json.loads(data)
    except ValueError:
        raise DrainFileError("not JSON") from None
    if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
        raise DrainFileError(f"not a version {FORMAT_VERSION} drain request")
    try:
        request = DrainRequest(float(raw["started_at_s"]), int(raw["started_monotonic_ns"]), float(raw["timeout_s"]),
                               str(raw.get("requested_by", "")))
    except (KeyError, TypeError, ValueError):
        raise DrainFileError("a field is missing or has the wrong type") from None
    if request.timeout_s < 0 or request.timeout_s != request.timeout_s or request.started_monotonic_ns < 0:
        raise DrainFileError("negative or undefined times")
    return request


def drain_path(runtime_dir: str | Path) -> Path:
    return Path(runtime_dir) / DRAIN_FILE


def read_request(runtime_dir: str | Path) -> DrainRequest | None:
    """The node's drain request, or None when it is not draining. Raises DrainFileError for a bad file."""
    try:
        data = drain_path(runtime_dir).read_bytes()
    except FileNotFoundError:
        return None
    return parse_request(data)


def request_drain(runtime_dir: str | Path, timeout_s: float, requested_by: str) -> tuple[DrainRequest, bool]:
    """Ask the node in ``runtime_dir`` to drain: (the request in force, True if this call made it). The file
    appears whole or not at all (written aside, then hard-linked: link() fails if one is there already, so
    the first request wins, also against a concurrent one)."""
    request = DrainRequest(time.time(), time.monotonic_ns(), float(timeout_s), requested_by)
    path = drain_path(runtime_dir)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(request.to_json())
    try:
        os.link(tmp, path)
    except FileExistsError:
        try:
            existing = read_request(runtime_dir)
        except DrainFileError:
            existing = None
        return (existing or request), False
    finally:
        tmp.unlink(missing_ok=True)
    return request, True


class DrainWatch:
    """The gateway's look for a drain request, once a heartbeat: a stat() until the file appears, then
    nothing (a drain is never taken back). ``poll`` returns the request the one time it is found."""

    def __init__(self, runtime_dir: str | Path) -> None:
        self.path = drain_path(runtime_dir)
        self.found = False

    def poll(self) -> DrainRequest | None:
        """The request, the first time the file is there; None before and after. Raises DrainFileError (once)
        for a file that is there but unreadable: the caller drains anyway, on its own timeout."""
        if self.found or not os.path.exists(self.path):
            return None
        self.found = True
        try:
            return parse_request(self.path.read_bytes())
        except FileNotFoundError:
            self.found = False  # removed between the stat and the read: as if never there
            return None


def supervisord_pid(runtime_dir: str | Path) -> int | None:
    """The pid of the supervisord that runs the node in ``runtime_dir``, if it is alive."""
    try:
        pid = int((Path(runtime_dir) / SUPERVISORD_PID_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def stop_supervised_node(supervisord: int, own_pid: int, standbys: Iterable[int] = ()) -> int:
    """Stop a drained node: SIGTERM to supervisord, then to each of its programs' processes at once (but
    ``own_pid``, the caller, which leaves by itself), the ``standbys`` first; returns how many were signalled.

    SIGTERM is supervisord's documented way to stop everything and exit, and from the moment it has it no
    program is restarted (supervisor/process.py restarts only while its mood is RUNNING; its handler records
    the signal as soon as it is delivered, before it can reap a child that exits afterwards). Its own stop
    goes program by program in priority order, each waited for: 6-7 s for this stack. A drained node has no
    call left to protect by that order, so every process gets its SIGTERM now and they exit side by side
    (supervisord then finds them gone and exits). A standby signalled after the process it stands by for
    could find the role free first and take over for a moment (the pacer, at SCHED_FIFO, exits in
    microseconds): so they hear it first (docs/explanation/failure-and-standby.md#hot-standby)."""
    os.kill(supervisord, signal.SIGTERM)
    first = set(standbys)
    signalled = 0
    for pid in sorted(children_of(supervisord), key=lambda pid: pid not in first):
        if pid == own_pid:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            signalled += 1
        except ProcessLookupError:
            pass
    return signalled
