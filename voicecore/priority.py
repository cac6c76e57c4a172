"""Scheduling priority of the latency-critical processes (the pacer and the gateway) and of the simulators that
measure them (the demo's and the bench's carrier and model simulators).

Owns asking the OS for a higher priority and saying what was granted; must not know what the process
does. The pacer's clock and the gateway's socket writes share a core with the model worker, whose work comes
in bursts (a model delta for many calls at once): at normal priority a burst delays a tick or a write by a
scheduler slice, which the carrier hears as lateness. The model worker and the validator keep normal priority:
the lead and the gate absorb their delays (docs/explanation/architecture.md#section-2 and #section-6).

The simulators stand in for Twilio and the model vendor, whose clocks no load on this machine disturbs: a
simulator that waits for a CPU stamps what it reads late and plays its caller's audio late, which would be
charged to the stack. They ask for SCHED_FIFO below the pacer's priority while calls run.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

log = logging.getLogger("voicecore.priority")

SIMULATOR_RT_PRIORITY = 5  # below the pacer's (10), should the two share a CPU


def raise_priority(*, fifo_priority: int | None, nice: int, warn: bool = True, fifo_not_inherited: bool = False) -> str:
    """SCHED_FIFO at ``fifo_priority`` (None: do not ask), else ``nice`` (negative: higher); returns what
    was granted ("SCHED_FIFO", "nice -10" or "normal"). Without CAP_SYS_NICE the process stays as it is
    (logged as a warning unless ``warn`` is false). ``fifo_not_inherited``: threads and processes started
    afterwards run at normal priority, not SCHED_FIFO (SCHED_RESET_ON_FORK: SCHED_OTHER at nice 0)."""
    if fifo_priority is not None:
        policy = os.SCHED_FIFO | (os.SCHED_RESET_ON_FORK if fifo_not_inherited else 0)
        try:
            os.sched_setscheduler(0, policy, os.sched_param(fifo_priority))
            return "SCHED_FIFO"
        except (PermissionError, OSError):
            pass
    try:
        current = os.nice(0)
        if current > nice:
            os.nice(nice - current)
        return f"nice {os.nice(0)}"
    except (PermissionError, OSError):
        if warn:
            log.warning("normal priority: no permission for SCHED_FIFO or a negative nice value")
        return "normal"


@contextlib.contextmanager
def priority_raised(*, fifo_priority: int | None, nice: int) -> Iterator[str]:
    """``raise_priority`` for the calling thread during the block, then the scheduling policy and nice value it
    had: what runs after (a report's computation, seconds of CPU) must not hold a core ahead of everything else.
    Threads and processes started meanwhile (a worker thread, a speech synthesizer) do not get SCHED_FIFO: they
    run at SCHED_OTHER, nice 0 (the kernel's reset, whatever nice value the calling thread had).
    Yields what was granted; never warns."""
    policy, param, niceness = os.sched_getscheduler(0), os.sched_getparam(0), os.nice(0)
    granted = raise_priority(fifo_priority=fifo_priority, nice=nice, warn=False, fifo_not_inherited=True)
    try:
        yield granted
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, policy, param)
        with contextlib.suppress(OSError):
            os.nice(niceness - os.nice(0))
