"""The pacer's compiled step, loaded (or on a fresh install compiled) before the pacer serves.

``warm_up_kernels`` runs in every pacer process before it stands by or serves. ``python -m
workers.pacer.warm_up`` runs it alone, with the node's configuration from the environment: `voicecore up`
starts it before supervisord, so a fresh install's compile (seconds of one core, the start's critical path)
begins at once instead of after supervisord and the pacer's own imports; the pacer then finds the step in
numba's cache under the node's compile lock (docs/explanation/failure-and-standby.md#hot-standby). Light
imports on purpose: only what the step needs.
"""

from __future__ import annotations

import os
import time

from voicecore import timing
from voicecore.config import Config, load_config
from voicecore.priority import raise_priority
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.shm.compile_lock import compiling_alone
from workers.pacer.core import PacerCore


def warm_up_kernels(config: Config) -> None:
    """Load the compiled step (numba's cache, ~0.2 s; a cold compile ~8 s) on a private arena of the live
    one's types, so a standby that takes over ticks at once and writes nothing before it serves. One process
    of the node at a time: the others load what the first compiled (voicecore/shm/compile_lock.py)."""
    with compiling_alone(config.runtime_dir, "pacer"):
        _run_step_once(config)


def _run_step_once(config: Config) -> None:
    arena = Arena.anonymous(ArenaLayout(max_calls=1))
    core = PacerCore(arena, lead_ms=config.lead_ms, mark_every_frames=config.mark_every_frames,
                     max_burst_frames=timing.MAX_CATCH_UP_FRAMES, start_hold_ms=config.start_hold_ms,
                     release_frames=config.release_frames)
    core.tick(time.monotonic_ns())
    core.cancels(time.monotonic_ns())
    core.has_live_call()
    del core
    arena.close()


def warm_up_priority() -> str | None:
    """Ahead of the node's other processes, as the gateway is, but not SCHED_FIFO (a FIFO compile would hold
    a core for seconds); VOICECORE_REALTIME_PRIORITY=0 asks for none."""
    if os.environ.get("VOICECORE_REALTIME_PRIORITY", "1") == "0":
        return None
    return raise_priority(fifo_priority=None, nice=-10)


def main() -> None:
    warm_up_priority()
    warm_up_kernels(load_config(os.environ))


if __name__ == "__main__":
    main()
