"""One process of a node compiles a set of numba kernels at a time; the others then load what it cached.

Owns the lock only. A node runs two of each worker (the serving one and its standby), and the gateway
and the model worker both warm up the same ring functions: started together on a fresh install, every one
of them compiled the same kernels at once (four compiles of the rings, two of the pacer's step, on two
cores), and the node was healthy only when the slowest had finished. Under an exclusive flock on a file
in the node's runtime dir, the first compiles and numba saves to its on-disk cache; each next one finds
the cache when it gets the lock and loads in a fraction of a second. Different sets (the rings, the
pacer's step) have different locks, so they still compile side by side on two cores.

Light on purpose (no numpy, no numba): `voicecore up` imports it for the names of the files it cleans up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

# The kernel sets that are warmed up under a lock: voicecore/shm/warmup.py (the rings: the gateway and the
# model worker) and workers/pacer/main.py (the pacer's step).
KERNEL_SETS = ("rings", "pacer")


def lock_file_name(kernels: str) -> str:
    if kernels not in KERNEL_SETS:
        raise ValueError(f"unknown kernel set {kernels!r}; one of {', '.join(KERNEL_SETS)}")
    return f"compile-{kernels}.lock"


LOCK_FILE_NAMES = tuple(lock_file_name(kernels) for kernels in KERNEL_SETS)


@contextlib.contextmanager
def compiling_alone(runtime_dir: str | Path, kernels: str) -> Iterator[None]:
    """Hold the node's lock for ``kernels`` while the body compiles (or loads) them. No runtime dir (a
    worker started by hand without one): no lock, each process compiles on its own as it always could."""
    if not runtime_dir:
        yield
        return
    path = Path(runtime_dir) / lock_file_name(kernels)
    # The runtime dir is the node's private one (0700, made by `voicecore up` before anything starts). A worker
    # started by hand before its runtime dir exists compiles unlocked: the lock saves time, it guards nothing.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the close, also when the body raises or the process dies
        yield
    finally:
        os.close(fd)
