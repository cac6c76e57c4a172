"""CPU pinning for the bench: parse CPU lists and pin whole process trees (every thread of every process).

os.sched_setaffinity(pid) only moves the thread whose id is pid; threads a process already started
(numba, zmq, asyncio executors) keep their mask, so every task under /proc/<pid>/task is pinned.
Children started later inherit the mask of the thread that forks them.
"""

from __future__ import annotations

import os

from voicecore.processes import children_of


def parse_cpus(text: str) -> set[int]:
    """'0', '0,2', '0-3', '0-1,4' -> a set of CPU numbers. Raises ValueError on anything else."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            first, last = int(low), int(high)
            if first > last:
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(first, last + 1))
        else:
            cpus.add(int(part))
    if not cpus:
        raise ValueError(f"no CPUs in {text!r}")
    return cpus


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (read from /proc)."""
    found = [pid]
    index = 0
    while index < len(found):
        found.extend(children_of(found[index]))
        index += 1
    return found


def pin_tree(pid: int, cpus: set[int]) -> list[int]:
    """Pin every thread of pid and of its descendants to cpus; returns the pids pinned."""
    pinned = []
    for proc in process_tree(pid):
        try:
            tasks = [int(t) for t in os.listdir(f"/proc/{proc}/task")]
        except OSError:
            continue
        for task in tasks:
            try:
                os.sched_setaffinity(task, cpus)
            except OSError:
                pass  # the thread ended in between
        pinned.append(proc)
    return pinned


def affinity_of(pid: int) -> list[int]:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return []
