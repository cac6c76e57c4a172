"""Warm-up leaves nothing to compile on the audio path: after voicecore/shm/warmup.py warm_up_rings and the
pacer's warm_up_kernels, the live arena's arrays (a file-backed arena of another layout) and the pacer's
live fallback clips hit the signatures the warm-up compiled, so the first call's first frame never waits
on numba. A new signature here is a compile of seconds in the middle of a call.

Each check runs in a fresh process: in this one, other tests may have compiled signatures the warm-up
did not, which would hide exactly the compile this looks for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import config as numba_config

from voicecore.supervise import REPO_ROOT

pytestmark = pytest.mark.skipif(numba_config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT=1: nothing compiles")

COMPILED = '''
import json, sys, time
import numpy as np
from numba.core.dispatcher import Dispatcher
from voicecore import timing
from voicecore.carriers.wire import RAW
from voicecore.shm.arena import Arena, ArenaLayout

def compiled(module):
    return {name: len(obj.signatures) for name, obj in vars(module).items() if isinstance(obj, Dispatcher)}

work = sys.argv[1]
arena = Arena.create(ArenaLayout(max_calls=8), directory=work)
'''

RINGS = COMPILED + '''
from voicecore.shm import rings
from voicecore.shm.warmup import warm_up_rings
warm_up_rings(work)
warmed = compiled(rings)
ctrl, slot = arena.ctrl, 5
frame = np.full(timing.FRAME_BYTES, 0x7F, dtype=np.uint8)
out = np.zeros(timing.FRAME_BYTES * 8, dtype=np.uint8)
arena.claim_slot(slot, "MZ" + "1" * 32, "CA" + "1" * 32, RAW)
rings.inbound_push(ctrl, arena.in_meta, arena.in_payload, slot, 1, 20, frame)
rings.inbound_push(ctrl, arena.in_meta, arena.in_payload, slot, 2, 40, bytes(frame))
assert rings.inbound_pop(ctrl, arena.in_meta, arena.in_payload, slot, out, 8) == 2
rings.tag_open(ctrl, slot, 3, 1)
rings.tag_state(ctrl, slot, 3)
rings.tag_approve(ctrl, slot, 3, 1)
rings.outbound_push(ctrl, arena.out_meta, arena.out_payload, slot, 3, 0, frame)
rings.outbound_push_many(ctrl, arena.out_meta, arena.out_payload, slot, 3, 1, out[: 2 * timing.FRAME_BYTES])
rings.outbound_free(ctrl, arena.out_meta, slot)
rings.outbound_push_end(ctrl, arena.out_meta, slot, 3, 3)
rings.tag_done(ctrl, slot, 3)
rings.tag_cancel(ctrl, slot, 3, 0)
rings.wire_push(ctrl, arena.wire_len, arena.wire_data, slot, frame, 4)
rings.wire_pending(ctrl, slot)
rings.wire_ready_slots(ctrl, np.zeros(8, dtype=np.int64))
rings.wire_drain(ctrl, arena.wire_len, arena.wire_data, slot)
print(json.dumps({"warmed": warmed, "after": compiled(rings)}))
'''

PACER = COMPILED + '''
import dataclasses
from voicecore.config import load_config
from workers.pacer import core as pacer_core
from workers.pacer.main import clips_for_config
from workers.pacer.warm_up import warm_up_kernels
config = dataclasses.replace(load_config({}), runtime_dir=work)
warm_up_kernels(config)
warmed = compiled(pacer_core)
# as the serving pacer builds its core: the live arena, the clips of its configuration
core = pacer_core.PacerCore(arena, lead_ms=config.lead_ms, mark_every_frames=config.mark_every_frames,
                            max_burst_frames=timing.MAX_CATCH_UP_FRAMES, start_hold_ms=config.start_hold_ms,
                            release_frames=config.release_frames, clips=clips_for_config(config, {}))
arena.claim_slot(2, "MZ" + "2" * 32, "CA" + "2" * 32, RAW)
now = time.monotonic_ns()
for tick in range(3):
    core.tick(now + tick * timing.FRAME_NS, tick % 2, 2)
core.cancels(now)
core.has_live_call()
print(json.dumps({"warmed": warmed, "after": compiled(pacer_core)}))
'''


def signatures_before_and_after(code: str, work: Path) -> dict:
    work.mkdir(mode=0o700)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-c", code, str(work)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_ring_operations_compile_nothing_after_the_warm_up(tmp_path):
    found = signatures_before_and_after(RINGS, tmp_path / "work")
    assert found["warmed"]["wire_push"] == found["warmed"]["tag_cancel"] == 1
    assert found["after"] == found["warmed"]


def test_the_pacer_step_compiles_nothing_after_the_warm_up(tmp_path):
    found = signatures_before_and_after(PACER, tmp_path / "work")
    assert found["warmed"]["pace_tick"] == found["warmed"]["pace_cancels"] == found["warmed"]["any_live_call"] == 1
    assert found["after"] == found["warmed"]
