"""Ring and tag-table operations over the arena's arrays: numba functions, one call slot per call.

Owns the ring protocol (who writes which counter, in which order) and the tag table's state changes.
Knows nothing of files, sockets or processes: every function takes the arena's numpy arrays (or any
arrays of the same shapes) and a slot index, so tests run them over plain ``np.zeros`` arrays.

Rings (docs/explanation/architecture.md#section-4), each single-producer single-consumer, counters in the
control block:

| ring     | producer     | consumer     | counters (producer, consumer) | slot                                    |
| -------- | ------------ | ------------ | ----------------------------- | --------------------------------------- |
| inbound  | gateway      | model worker | IN_HEAD, IN_TAIL              | in_meta (seq, ts_ms) + 160-byte frame   |
| outbound | model worker | pacer        | OUT_HEAD, OUT_TAIL            | out_meta (tag, index) + 160-byte frame  |
| wire     | pacer        | gateway      | WIRE_HEAD, WIRE_TAIL          | wire_len + carrier message or raw entry |

Counters are 64-bit and only grow (2**63 frames of 20 ms is ~5.8 billion years): the index of a slot is
``counter & (n_slots - 1)``, ``head - tail`` is the fill level, and a full ring refuses the write (the
producer counts it) instead of overwriting anything.

Memory ordering, what this module relies on:
- The producer writes payload, then meta, then publishes its counter with ``store_release``; the
  consumer reads the other side's counter with ``load_acquire``, then meta and payload, then publishes
  its own counter with ``store_release``. Both are LLVM atomic operations (``store atomic ... release``,
  ``load atomic ... acquire``) emitted by the two numba intrinsics below, so neither LLVM nor the CPU
  may move the payload/meta accesses across them. On x86-64 (TSO) they compile to plain ``mov``; on
  aarch64 to ``stlr`` / ``ldar``, which are the fences a weakly ordered CPU needs. Nothing relies on
  numba "not reordering stores to distinct arrays": LLVM is free to do that for plain stores.
- Other words are single-writer int64s, aligned, so a reader sees an old or a new value, never a torn
  one. A writer that must make several words visible together publishes the last one with
  ``store_release`` (tag rows: TAG_ROW_STATE last; cancels: CANCEL_SEQ last).
- Python-side readers (``wire_pop``) take the counter through a numba call (acquire), copy with numpy
  afterwards and publish through another numba call (release): a call boundary is opaque to both
  compilers, and the hardware acquire/release covers the numpy copy on aarch64 too.
- A value read a few microseconds stale is a linearisation, not a bug: e.g. a frame released by the pacer just
  as the model worker cancels its tag is followed by the ``clear`` the pacer queues on its next look at
  CANCEL_SEQ, so the carrier discards it (INV-STALE; docs/explanation/architecture.md#section-3, step 8).

Python call overhead (CPython 3.11, numba 0.68, x86-64, 2 cores, best of 300 batches): ``inbound_push``
and ``outbound_push`` with a 160-byte ``bytes`` or uint8-array payload ~0.43 us per call, ``tag_state``
~0.25 us, ``wire_push`` ~0.4 us, ``wire_pop`` ~1.35 us (two calls and a numpy copy; ``wire_drain`` pays
that once per batch). Use ``outbound_push_many`` for a whole model delta: one call, one publish. The
first call of each function in a fresh install compiles it (seconds); the cache makes later starts fast,
so shells should make one warm-up call before serving.

Under ``NUMBA_DISABLE_JIT=1`` the same functions run as plain Python (the intrinsics fall back to plain
numpy reads and writes), which is what a debugger wants; the ordering guarantees then come only from the
interpreter's call boundaries.
"""

from __future__ import annotations

import functools

from numba import config, njit, types
from numba.core import cgutils, cpu
from numba.extending import intrinsic

from voicecore.shm.control import (
    CANCEL_DECISION_NS,
    CANCEL_SEQ,
    CANCEL_TAG,
    IN_HEAD,
    IN_OVERRUNS,
    IN_TAIL,
    OUT_DROPPED,
    OUT_HEAD,
    OUT_TAIL,
    PAUSE_SINCE_NS,
    PAUSED_TAG,
    TAG_CANCELLED,
    TAG_DONE,
    TAG_LIVE,
    TAG_ROW_APPROVED_FRAMES,
    TAG_ROW_GATED,
    TAG_ROW_STATE,
    TAG_ROW_TAG,
    TAG_ROW_WORDS,
    TAG_TABLE_BASE,
    TAG_TABLE_SIZE,
    APPROVE_ALL,
    WIRE_HEAD,
    WIRE_TAIL,
)
from voicecore.timing import FRAME_BYTES

# Every function here and in the pacer core is compiled with numba's runtime (NRT) off. Nothing on these
# paths allocates, so the NRT only costs: it wraps each array argument coming from Python in a fresh
# meminfo (0.9 -> 0.5 us for an inbound push + pop) and keeps incref/decref pairs (atomic, ~20 ns each)
# around arrays passed to helpers (12 -> 0.7 us for a pacer pass over 256 idle slots). It also turns
# "no allocation on the hot path" into a compile error instead of a review comment. `_nrt` is a
# CPU-target option of numba (numba/core/options.py); should a future numba drop it, we fall back to
# the default and only lose speed.
KERNEL_OPTIONS = {"cache": True, "nogil": True}
if hasattr(cpu.CPUTargetOptions, "_nrt"):
    KERNEL_OPTIONS["_nrt"] = False
kernel = functools.partial(njit, **KERNEL_OPTIONS)

# --- ordered loads and stores of control words ---------------------------------------------------------

if config.DISABLE_JIT:  # pragma: no cover - exercised by running the suite with NUMBA_DISABLE_JIT=1

    def atomic_load_acquire(ctrl, slot, word):
        """ctrl[slot, word] (a plain read: without the JIT there is no compiler to reorder anything)."""
        return ctrl[slot, word]

    def atomic_store_release(ctrl, slot, word, value):
        """ctrl[slot, word] = value (a plain write without the JIT)."""
        ctrl[slot, word] = value

else:

    def _word_pointer(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        slot = context.cast(builder, args[1], signature.args[1], types.intp)
        word = context.cast(builder, args[2], signature.args[2], types.intp)
        return cgutils.get_item_pointer(context, builder, aryty, ary, [slot, word])

    def _is_ctrl(ctrl):
        return isinstance(ctrl, types.Array) and ctrl.dtype == types.int64 and ctrl.ndim == 2

    @intrinsic
    def atomic_load_acquire(typingctx, ctrl, slot, word):
        """ctrl[slot, word] as an LLVM ``load atomic acquire`` (x86-64: mov; aarch64: ldar)."""
        if not (_is_ctrl(ctrl) and isinstance(slot, types.Integer) and isinstance(word, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            return builder.load_atomic(_word_pointer(context, builder, signature, args), "acquire", 8)

        return types.int64(ctrl, slot, word), codegen

    @intrinsic
    def atomic_store_release(typingctx, ctrl, slot, word, value):
        """ctrl[slot, word] = value as an LLVM ``store atomic release`` (x86-64: mov; aarch64: stlr)."""
        if not (_is_ctrl(ctrl) and isinstance(slot, types.Integer) and isinstance(word, types.Integer)):
            return None
        if not isinstance(value, (types.Integer, types.Boolean)):
            return None

        def codegen(context, builder, signature, args):
            ptr = _word_pointer(context, builder, signature, args)
            value_i64 = context.cast(builder, args[3], signature.args[3], types.int64)
            builder.store_atomic(value_i64, ptr, "release", 8)
            return context.get_dummy_value()

        return types.void(ctrl, slot, word, value), codegen


# Inside numba code call atomic_load_acquire / atomic_store_release directly: they are code, not calls,
# and have no error path. A callee that can raise makes numba keep an NRT incref/decref pair (two atomic
# read-modify-writes, ~20 ns) around every use of the array, which cost the pacer 5x in a 200-call loop.
# The checked load_acquire / store_release below are for Python callers.

# Numba compiles with bounds checks off: an out-of-range slot would write outside the arena. Every entry
# point checks its slot once (a compare), so a caller's bug is an IndexError, not memory corruption.
@kernel(inline="always")
def _check_slot(ctrl, slot):
    if slot < 0 or slot >= ctrl.shape[0]:
        raise IndexError("call slot out of range")


@kernel(inline="always")
def load_acquire(ctrl, slot, word):
    """ctrl[slot, word], read before any later memory access of this thread (callable from Python too)."""
    if slot < 0 or slot >= ctrl.shape[0] or word < 0 or word >= ctrl.shape[1]:
        raise IndexError("control word out of range")
    return atomic_load_acquire(ctrl, slot, word)


@kernel(inline="always")
def store_release(ctrl, slot, word, value):
    """ctrl[slot, word] = value, after every earlier memory access of this thread (Python too)."""
    if slot < 0 or slot >= ctrl.shape[0] or word < 0 or word >= ctrl.shape[1]:
        raise IndexError("control word out of range")
    atomic_store_release(ctrl, slot, word, value)


# --- inbound ring: gateway -> model worker ---------------------------------------------------------------


@kernel
def inbound_push(ctrl, in_meta, in_payload, slot, seq, ts_ms, payload_u8):
    """Gateway: append one 160-byte caller frame. False when the ring is full (IN_OVERRUNS += 1)."""
    _check_slot(ctrl, slot)
    if len(payload_u8) != FRAME_BYTES:
        raise ValueError("inbound frame must be FRAME_BYTES long")
    n_slots = in_meta.shape[1]
    head = ctrl[slot, IN_HEAD]
    tail = atomic_load_acquire(ctrl, slot, IN_TAIL)
    if head - tail >= n_slots:
        # Never overwrite: the model worker may be reading that slot right now.
        ctrl[slot, IN_OVERRUNS] += 1
        return False
    idx = head & (n_slots - 1)
    for k in range(FRAME_BYTES):
        in_payload[slot, idx, k] = payload_u8[k]
    in_meta[slot, idx, 0] = seq
    in_meta[slot, idx, 1] = ts_ms
    atomic_store_release(ctrl, slot, IN_HEAD, head + 1)
    return True


@kernel
def inbound_pending(ctrl, slot):
    """Frames waiting in the inbound ring."""
    _check_slot(ctrl, slot)
    return atomic_load_acquire(ctrl, slot, IN_HEAD) - ctrl[slot, IN_TAIL]


@kernel
def inbound_pop(ctrl, in_meta, in_payload, slot, out_u8, max_frames):
    """Model worker: copy up to max_frames frames contiguously into out_u8; returns the frame count."""
    _check_slot(ctrl, slot)
    n_slots = in_meta.shape[1]
    tail = ctrl[slot, IN_TAIL]
    n = atomic_load_acquire(ctrl, slot, IN_HEAD) - tail
    n = min(n, max_frames, len(out_u8) // FRAME_BYTES)
    if n <= 0:
        return 0
    for f in range(n):
        idx = (tail + f) & (n_slots - 1)
        base = f * FRAME_BYTES
        for k in range(FRAME_BYTES):
            out_u8[base + k] = in_payload[slot, idx, k]
    atomic_store_release(ctrl, slot, IN_TAIL, tail + n)
    return n


@kernel
def inbound_pop_meta(ctrl, in_meta, in_payload, slot, out_u8, out_meta, max_frames):
    """inbound_pop that also copies each frame's (sequence number, timestamp_ms) into out_meta[f]."""
    _check_slot(ctrl, slot)
    n_slots = in_meta.shape[1]
    tail = ctrl[slot, IN_TAIL]
    n = atomic_load_acquire(ctrl, slot, IN_HEAD) - tail
    n = min(n, max_frames, len(out_u8) // FRAME_BYTES, out_meta.shape[0])
    if n <= 0:
        return 0
    for f in range(n):
        idx = (tail + f) & (n_slots - 1)
        out_meta[f, 0] = in_meta[slot, idx, 0]
        out_meta[f, 1] = in_meta[slot, idx, 1]
        base = f * FRAME_BYTES
        for k in range(FRAME_BYTES):
            out_u8[base + k] = in_payload[slot, idx, k]
    atomic_store_release(ctrl, slot, IN_TAIL, tail + n)
    return n


# --- outbound ring: model worker -> pacer ------------------------------------------------------------------


@kernel
def outbound_free(ctrl, out_meta, slot):
    """Slots the model worker may still write in this call's outbound ring (out_meta gives the size)."""
    _check_slot(ctrl, slot)
    return out_meta.shape[1] - (ctrl[slot, OUT_HEAD] - atomic_load_acquire(ctrl, slot, OUT_TAIL))


@kernel
def outbound_push(ctrl, out_meta, out_payload, slot, tag, frame_index, payload_u8):
    """Model worker: append frame `frame_index` of response `tag`. False when full (OUT_DROPPED += 1)."""
    _check_slot(ctrl, slot)
    if len(payload_u8) != FRAME_BYTES:
        raise ValueError("outbound frame must be FRAME_BYTES long")
    if tag <= 0 or frame_index < 0:
        raise ValueError("tag must be positive and frame_index non-negative")
    n_slots = out_meta.shape[1]
    head = ctrl[slot, OUT_HEAD]
    if head - atomic_load_acquire(ctrl, slot, OUT_TAIL) >= n_slots:
        ctrl[slot, OUT_DROPPED] += 1
        return False
    idx = head & (n_slots - 1)
    for k in range(FRAME_BYTES):
        out_payload[slot, idx, k] = payload_u8[k]
    out_meta[slot, idx, 0] = tag
    out_meta[slot, idx, 1] = frame_index
    atomic_store_release(ctrl, slot, OUT_HEAD, head + 1)
    return True


@kernel
def outbound_push_many(ctrl, out_meta, out_payload, slot, tag, first_index, payload_u8):
    """Append len(payload_u8) // 160 frames (indices first_index, first_index + 1, ...) with one publish.

    Returns the frames written; fewer than asked when the ring fills (each refused frame counts in
    OUT_DROPPED). The length must be a whole number of frames: the model worker carries the remainder of
    a delta to the next one, never pads mid-response (docs/explanation/architecture.md#section-3, step 5).
    """
    _check_slot(ctrl, slot)
    if len(payload_u8) % FRAME_BYTES != 0:
        raise ValueError("payload must be a whole number of frames")
    if tag <= 0 or first_index < 0:
        raise ValueError("tag must be positive and first_index non-negative")
    n_slots = out_meta.shape[1]
    want = len(payload_u8) // FRAME_BYTES
    head = ctrl[slot, OUT_HEAD]
    room = n_slots - (head - atomic_load_acquire(ctrl, slot, OUT_TAIL))
    n = min(want, room)
    for f in range(n):
        idx = (head + f) & (n_slots - 1)
        base = f * FRAME_BYTES
        for k in range(FRAME_BYTES):
            out_payload[slot, idx, k] = payload_u8[base + k]
        out_meta[slot, idx, 0] = tag
        out_meta[slot, idx, 1] = first_index + f
    if want > n:
        ctrl[slot, OUT_DROPPED] += want - n
    if n > 0:
        atomic_store_release(ctrl, slot, OUT_HEAD, head + n)
    return n


@kernel
def outbound_push_end(ctrl, out_meta, slot, tag, total_frames):
    """Model worker: response `tag` finished normally after total_frames frames. False when full.

    The END marker is a meta-only slot with frame index -1 - total_frames (always negative); the pacer
    turns it into the ``tag:n:end`` mark. A refused END is not counted as a dropped frame: retry it.
    """
    _check_slot(ctrl, slot)
    if tag <= 0 or total_frames < 0:
        raise ValueError("tag must be positive and total_frames non-negative")
    n_slots = out_meta.shape[1]
    head = ctrl[slot, OUT_HEAD]
    if head - atomic_load_acquire(ctrl, slot, OUT_TAIL) >= n_slots:
        return False
    idx = head & (n_slots - 1)
    out_meta[slot, idx, 0] = tag
    out_meta[slot, idx, 1] = -1 - total_frames
    atomic_store_release(ctrl, slot, OUT_HEAD, head + 1)
    return True


# --- tag table: written by the model worker, read by the pacer -----------------------------------------


@kernel(inline="always")
def _row_word(tag, field):
    return TAG_TABLE_BASE + (tag % TAG_TABLE_SIZE) * TAG_ROW_WORDS + field


@kernel
def tag_open(ctrl, slot, tag, gated):
    """Model worker: start response `tag` (> 0). gated: release waits for tag_approve (INV-GATE).

    Must come before the tag's first outbound_push. Reuses the row of tag - TAG_TABLE_SIZE: frames of
    that old tag still in the ring become dead and are skipped.
    """
    _check_slot(ctrl, slot)
    if tag <= 0:
        raise ValueError("tag must be positive")
    # The row is invisible-then-visible: state 0 first, the other words, TAG_LIVE last (release).
    ctrl[slot, _row_word(tag, TAG_ROW_STATE)] = 0
    ctrl[slot, _row_word(tag, TAG_ROW_TAG)] = tag
    ctrl[slot, _row_word(tag, TAG_ROW_GATED)] = 1 if gated else 0
    ctrl[slot, _row_word(tag, TAG_ROW_APPROVED_FRAMES)] = 0 if gated else APPROVE_ALL
    atomic_store_release(ctrl, slot, _row_word(tag, TAG_ROW_STATE), TAG_LIVE)


@kernel
def tag_state(ctrl, slot, tag):
    """TAG_LIVE / TAG_CANCELLED / TAG_DONE, or 0 when the row holds another tag (this one is dead)."""
    _check_slot(ctrl, slot)
    if tag <= 0:
        return 0
    if ctrl[slot, _row_word(tag, TAG_ROW_TAG)] != tag:
        return 0
    return ctrl[slot, _row_word(tag, TAG_ROW_STATE)]


@kernel
def tag_approved_frames(ctrl, slot, tag):
    """Frames of `tag` the gate lets through (index < this); 0 when the row holds another tag."""
    _check_slot(ctrl, slot)
    if tag <= 0 or ctrl[slot, _row_word(tag, TAG_ROW_TAG)] != tag:
        return 0
    return ctrl[slot, _row_word(tag, TAG_ROW_APPROVED_FRAMES)]


@kernel
def tag_approve(ctrl, slot, tag, approved_frames):
    """Model worker (on a validator verdict): frames with index < approved_frames may go out.

    The watermark only rises: a smaller value than the current one changes nothing. False when the row
    holds another tag.
    """
    _check_slot(ctrl, slot)
    if tag <= 0 or ctrl[slot, _row_word(tag, TAG_ROW_TAG)] != tag:
        return False
    word = _row_word(tag, TAG_ROW_APPROVED_FRAMES)
    if approved_frames > ctrl[slot, word]:
        atomic_store_release(ctrl, slot, word, approved_frames)
    return True


@kernel
def tag_cancel(ctrl, slot, tag, decision_ns):
    """Model worker: cancel `tag` (barge-in or rejection). Its frames are never released after this.

    Order matters: the row state first, then CANCEL_TAG and CANCEL_DECISION_NS, then CANCEL_SEQ last
    (release), so a pacer that sees the new CANCEL_SEQ also sees the cancelled row. Returns True if the
    row held `tag` (False: the tag was already dead; CANCEL_SEQ is still bumped so the decision time is
    recorded and the pacer looks).
    """
    _check_slot(ctrl, slot)
    hit = False
    if tag > 0 and ctrl[slot, _row_word(tag, TAG_ROW_TAG)] == tag:
        atomic_store_release(ctrl, slot, _row_word(tag, TAG_ROW_STATE), TAG_CANCELLED)
        hit = True
    ctrl[slot, CANCEL_TAG] = tag
    ctrl[slot, CANCEL_DECISION_NS] = decision_ns
    atomic_store_release(ctrl, slot, CANCEL_SEQ, ctrl[slot, CANCEL_SEQ] + 1)
    return hit


@kernel
def tag_done(ctrl, slot, tag):
    """Model worker: every frame of `tag` is in the ring (its frames still play). False if not live."""
    _check_slot(ctrl, slot)
    if tag <= 0 or ctrl[slot, _row_word(tag, TAG_ROW_TAG)] != tag:
        return False
    if ctrl[slot, _row_word(tag, TAG_ROW_STATE)] != TAG_LIVE:
        return False
    atomic_store_release(ctrl, slot, _row_word(tag, TAG_ROW_STATE), TAG_DONE)
    return True


@kernel
def tag_pause(ctrl, slot, tag, since_ns):
    """Model worker: hold release of `tag` (a bare VAD edge). Nothing more of it goes out; what the
    carrier holds plays, and the pacer sends `clear` once the hold outlasts the carrier's queue."""
    _check_slot(ctrl, slot)
    if tag <= 0:
        raise ValueError("tag must be positive")
    ctrl[slot, PAUSE_SINCE_NS] = since_ns
    atomic_store_release(ctrl, slot, PAUSED_TAG, tag)


@kernel
def tag_resume(ctrl, slot, tag):
    """Model worker: end the hold of `tag` (a false alarm: release goes on). False if it was not held."""
    _check_slot(ctrl, slot)
    if tag <= 0 or ctrl[slot, PAUSED_TAG] != tag:
        return False
    atomic_store_release(ctrl, slot, PAUSED_TAG, 0)
    return True


# --- wire ring: pacer -> gateway ---------------------------------------------------------------------------


@kernel
def wire_free(ctrl, wire_len, slot):
    """Entries the pacer may still write."""
    _check_slot(ctrl, slot)
    return wire_len.shape[1] - (ctrl[slot, WIRE_HEAD] - atomic_load_acquire(ctrl, slot, WIRE_TAIL))


@kernel
def wire_push(ctrl, wire_len, wire_data, slot, data_u8, n):
    """Pacer: append one message of n bytes (the call's carrier message, voicecore/carriers/wire.py). False
    when the ring is full."""
    _check_slot(ctrl, slot)
    if n < 0 or n > wire_data.shape[2] or n > len(data_u8):
        raise ValueError("wire message longer than a wire slot")
    n_slots = wire_len.shape[1]
    head = ctrl[slot, WIRE_HEAD]
    if head - atomic_load_acquire(ctrl, slot, WIRE_TAIL) >= n_slots:
        return False
    idx = head & (n_slots - 1)
    for k in range(n):
        wire_data[slot, idx, k] = data_u8[k]
    wire_len[slot, idx] = n
    atomic_store_release(ctrl, slot, WIRE_HEAD, head + 1)
    return True


@kernel
def wire_pending(ctrl, slot):
    """Entries the gateway has not taken yet."""
    _check_slot(ctrl, slot)
    return atomic_load_acquire(ctrl, slot, WIRE_HEAD) - ctrl[slot, WIRE_TAIL]


@kernel
def wire_advance(ctrl, slot, n):
    """Gateway: mark n entries taken (after copying them out)."""
    _check_slot(ctrl, slot)
    atomic_store_release(ctrl, slot, WIRE_TAIL, ctrl[slot, WIRE_TAIL] + n)


@kernel
def wire_ready_slots(ctrl, out_slots):
    """Gateway: write the indices of slots with pending wire entries into out_slots; returns the count."""
    n = 0
    for s in range(ctrl.shape[0]):
        if n >= out_slots.shape[0]:
            break
        if atomic_load_acquire(ctrl, s, WIRE_HEAD) != ctrl[s, WIRE_TAIL]:
            out_slots[n] = s
            n += 1
    return n


def wire_pop(ctrl, wire_len, wire_data, slot):
    """Gateway: the oldest wire entry as bytes (the carrier message, or a raw entry), or None when empty."""
    if wire_pending(ctrl, slot) <= 0:  # checks the slot; acquire: the entry is complete before we copy it
        return None
    tail = int(ctrl[slot, WIRE_TAIL])
    idx = tail & (wire_len.shape[1] - 1)
    data = wire_data[slot, idx, : wire_len[slot, idx]].tobytes()
    wire_advance(ctrl, slot, 1)  # release: the pacer may reuse the slot only after our copy
    return data


def wire_drain(ctrl, wire_len, wire_data, slot, max_entries=64):
    """Gateway: up to max_entries oldest wire entries, in order, as a list of bytes (one publish)."""
    n = min(int(wire_pending(ctrl, slot)), max_entries)
    if n <= 0:
        return []
    tail = int(ctrl[slot, WIRE_TAIL])
    mask = wire_len.shape[1] - 1
    out = []
    for k in range(n):
        idx = (tail + k) & mask
        out.append(wire_data[slot, idx, : wire_len[slot, idx]].tobytes())
    wire_advance(ctrl, slot, n)
    return out


__all__ = [
    "atomic_load_acquire",
    "atomic_store_release",
    "load_acquire",
    "store_release",
    "inbound_push",
    "inbound_pending",
    "inbound_pop",
    "inbound_pop_meta",
    "outbound_free",
    "outbound_push",
    "outbound_push_many",
    "outbound_push_end",
    "tag_open",
    "tag_state",
    "tag_approved_frames",
    "tag_approve",
    "tag_cancel",
    "tag_done",
    "wire_free",
    "wire_push",
    "wire_pending",
    "wire_advance",
    "wire_ready_slots",
    "wire_pop",
    "wire_drain",
]
