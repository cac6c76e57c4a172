"""Keep the garbage collector out of a simulator process's measurements.

The simulators keep every frame and event they saw for the report: a heap that grows by thousands of
objects a second, whose generation-2 collections paused the process for tens of milliseconds and showed
up as 20-40 ms "lateness" that the stack under test never caused. Collect once before the calls, then
not at all until they are over (the memory is bounded by the run's length).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    gc.collect()
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()
