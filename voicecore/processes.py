"""Other processes as /proc shows them: whether one still runs, and a parent's children.

One home for both: the drain stops a node's processes, the standbys and their start wait on the serving
ones, the bench's chaos run waits for a killed worker's replacement, and each needs the same answer to "does
this pid still run", a zombie included (a killed worker is one until supervisord reaps it).
"""

from __future__ import annotations

import os


def pid_alive(pid: int | None) -> bool:
    """``pid`` is a running process: not gone, and not a zombie (exited, not yet reaped by its parent)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found
