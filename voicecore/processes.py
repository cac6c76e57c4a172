"""Other processes as /proc shows them: whether one still runs, a parent's children, the CPU one used.

One home for these: the drain stops a node's processes, the standbys and their start wait on the serving
ones, the bench's chaos run waits for a killed worker's replacement, and the demo, the bench and the cold-start
and idle measurements count CPU seconds; each needs the same reading of ``/proc/PID/stat``, a zombie included
(a killed worker is one until supervisord reaps it).
"""

from __future__ import annotations

import os

# /proc/PID/stat after the command name, from its state on (proc(5) numbers the fields from 1: state is 3)
_STATE, _PARENT, _USER, _SYSTEM, _CHILDREN_USER, _CHILDREN_SYSTEM = 0, 1, 11, 12, 13, 14


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > _CHILDREN_SYSTEM else None


def pid_alive(pid: int | None) -> bool:
    """``pid`` is a running process: not gone, and not a zombie (exited, not yet reaped by its parent)."""
    fields = _stat(pid) if pid else None
    return fields is not None and fields[_STATE] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and int(fields[_PARENT]) == pid:
            found.append(int(entry))
    return found


def _seconds(pid: int, *fields: int) -> float:
    stat = _stat(pid)
    return sum(int(stat[i]) for i in fields) / os.sysconf("SC_CLK_TCK") if stat is not None else 0.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (0 if it is gone)."""
    return _seconds(pid, _USER, _SYSTEM)


def kernel_cpu_seconds(pid: int) -> float:
    """stime of ``pid`` in seconds (0 if it is gone): the part of cpu_seconds spent in the kernel."""
    return _seconds(pid, _SYSTEM)


def reaped_children_cpu_seconds(pid: int) -> float:
    """cutime + cstime of ``pid``: the CPU of the children it has waited for (0 if it is gone)."""
    return _seconds(pid, _CHILDREN_USER, _CHILDREN_SYSTEM)
