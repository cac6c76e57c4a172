"""Scheduling priority of the latency-critical processes (the pacer and the gateway).

Owns asking the OS for a higher priority and saying what was granted; must not know what the process
does. The pacer's clock and the gateway's socket writes share a core with the model worker, whose work comes
in bursts (a model delta for many calls at once): at normal priority a burst delays a tick or a write by a
scheduler slice, which the carrier hears as lateness. The model worker and the validator keep normal priority:
the lead and the gate absorb their delays (docs/explanation/architecture.md#section-2 and #section-6).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("voicecore.priority")


def raise_priority(*, fifo_priority: int | None, nice: int) -> str:
    """SCHED_FIFO at ``fifo_priority`` (None: do not ask), else ``nice`` (negative: higher); returns what
    was granted ("SCHED_FIFO", "nice -10" or "normal"). Without CAP_SYS_NICE the process stays as it is."""
    if fifo_priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo_priority))
            return "SCHED_FIFO"
        except (PermissionError, OSError):
            pass
    try:
        current = os.nice(0)
        if current > nice:
            os.nice(nice - current)
        return f"nice {os.nice(0)}"
    except (PermissionError, OSError):
        log.warning("normal priority: no permission for SCHED_FIFO or a negative nice value")
        return "normal"
