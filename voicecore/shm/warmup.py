"""Compile (or load from numba's cache) every ring function before a process serves calls.

Owns nothing but the warm-up: a numba function compiles on its first call, which would otherwise land on
the first call's first frame (a barge-in that compiles `tag_cancel` took 180 ms in the first demo run).
The warm-up arena is a private, tiny one in a temporary directory with the real array types. Within a
node one process at a time warms up (voicecore/shm/compile_lock.py): the first compiles, the others load
numba's cache.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from voicecore import timing
from voicecore.carriers.wire import RAW
from voicecore.shm import rings
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.shm.compile_lock import compiling_alone


def warm_up_rings(runtime_dir: str | Path = "") -> None:
    """``runtime_dir``: the node's, whose other processes warm up the same functions (none: no lock)."""
    with compiling_alone(runtime_dir, "rings"), tempfile.TemporaryDirectory(prefix="voicecore-warmup-") as directory:
        arena = Arena.create(ArenaLayout(max_calls=1, in_slots=4, out_slots=4, wire_slots=4), directory=directory)
        try:
            frame = np.zeros(timing.FRAME_BYTES, dtype=np.uint8)
            out = np.zeros(timing.FRAME_BYTES * 4, dtype=np.uint8)
            arena.claim_slot(0, "MZ" + "0" * 32, "CA" + "0" * 32, RAW)
            ctrl = arena.ctrl
            rings.inbound_push(ctrl, arena.in_meta, arena.in_payload, 0, 1, 20, frame)
            rings.inbound_push(ctrl, arena.in_meta, arena.in_payload, 0, 2, 40, bytes(timing.FRAME_BYTES))  # the gateway's path
            rings.inbound_pop(ctrl, arena.in_meta, arena.in_payload, 0, out, 4)
            rings.tag_open(ctrl, 0, 1, 0)
            rings.tag_state(ctrl, 0, 1)
            rings.tag_approve(ctrl, 0, 1, 1)
            rings.outbound_push(ctrl, arena.out_meta, arena.out_payload, 0, 1, 0, frame)
            rings.outbound_push_many(ctrl, arena.out_meta, arena.out_payload, 0, 1, 1, out[: timing.FRAME_BYTES])
            rings.outbound_free(ctrl, arena.out_meta, 0)
            rings.outbound_push_end(ctrl, arena.out_meta, 0, 1, 1)
            rings.tag_done(ctrl, 0, 1)
            rings.tag_cancel(ctrl, 0, 1, 0)
            rings.wire_push(ctrl, arena.wire_len, arena.wire_data, 0, frame, 4)
            rings.wire_pending(ctrl, 0)
            rings.wire_ready_slots(ctrl, np.zeros(1, dtype=np.int64))
            rings.wire_drain(ctrl, arena.wire_len, arena.wire_data, 0)
        finally:
            arena.close()
            arena.unlink()
