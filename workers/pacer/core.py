"""The pacer's step: one numba call per 20 ms tick moves audio of every call from its outbound ring to its
wire ring, already encoded as the call's carrier message (the final JSON text, or a raw entry the gateway's
carrier edge finishes), with the marks and clears in order.

Owns the release rules: send-ahead lead, burst bound, gate watermark, cancelled-tag skipping, mark cadence,
clear on cancel, underrun counting (docs/explanation/architecture.md#section-1, #section-3 and #section-6).
Knows nothing of clocks, sockets, processes or files: ``now_ns`` comes in as an argument, the arrays come from
the arena (or from plain numpy arrays in tests), and the shell (workers/pacer/main.py) owns the absolute 20 ms
grid, the wake-ups and exporting the statistics.

Per active call slot (STATE == SLOT_ACTIVE), in this order:

0. init: PACER_GENERATION != GENERATION means a new call in this slot. The gateway zeroed every counter
   when it claimed the slot (arena.py), so OUT_TAIL = 0 is where the model worker's first frame lands;
   the pacer resets only its own view (SENT_*, CARRIER_EMPTY_AT_NS = now, CANCEL_SEEN_SEQ = CANCEL_SEQ).
   The pacer keeps nothing private per call: a restarted or standby pacer resumes from shared memory alone.
1. cancel (also callable alone, ``pace_cancels``, when the shell is woken between ticks): when CANCEL_SEQ
   moved and the tag whose frames went out last (SENT_TAG) is now cancelled, queue a ``clear`` behind what the
   wire ring already holds (docs/explanation/architecture.md#section-3, step 8) and note the carrier's buffer
   as empty. The tag row, not CANCEL_TAG, decides: two cancels between looks leave only the newest tag in
   CANCEL_TAG, and the older one may be the one playing. If the wire ring is full the clear waits,
   CANCEL_SEEN_SEQ is not advanced, and nothing else is released for that call until it is queued: audio
   queued before a late clear would be cut by it.
1b. hold: PAUSED_TAG (the model worker's, on a bare VAD edge) stops release of that tag's frames at
   once; the carrier plays what it holds. Behind the last frame released goes ``tag:n:end`` (the tag's
   audio stops here, for now): its echo tells the gateway, and so the model worker, exactly what of the
   tag was heard, and ends the talk spurt at the carrier. Should the carrier still be playing held audio
   hold_clear_ns into the hold (its echo has not come: a carrier further behind than the lead), a
   ``clear`` cuts it. A resumed tag (a cough, a breath) plays on from where it stopped, with a fresh lead
   burst; a confirmed barge-in cancels it (step 1).
2. release, head of the outbound ring first, strictly in ring order:
   - a frame or END of a dead tag (row CANCELLED, or the row now holds another tag) is consumed and
     counted in FRAMES_SKIPPED: INV-STALE, the decision is read from the row on every frame;
   - a frame or END of a tag older than SENT_TAG (tags only rise within a call) is consumed and counted
     in FRAMES_SKIPPED and FRAMES_SUPERSEDED: INV-ONE-VOICE, once a newer response's audio went out no
     frame of an older one follows it, whatever the model worker wrote (its rule, that a newer response
     supersedes an older one still being generated, cancels the older first: this is the backstop);
   - END of the tag being sent: mark ``tag:n:end`` (n = frames of the tag sent), consumed;
   - a frame: stop when this tick's burst reached max_burst_frames or the carrier holds lead_ns of
     audio already (CARRIER_EMPTY_AT_NS - now >= lead_ns); stop when the call's carrier has its backlog
     bound's worth of audio no echo has confirmed (BACKLOG_MAX_FRAMES, below; BACKLOG_HELD); stop when its index is at or past the tag's
     approved watermark (INV-GATE; GATE_HELD counts ticks in which a due frame was held, and nothing
     behind it moves either: INV-ORDER); stop when the wire ring lacks room for the frame and its
     mark (WIRE_FULL). Otherwise encode it, consume it, CARRIER_EMPTY_AT_NS = max(it, now) + 20 ms, and
     after every mark_every_frames frames of a tag queue mark ``tag:frames_through``.
3. underrun: nothing was released, nothing was held back by the gate, the wire ring or the backlog
   bound, the tag being sent is still live and not ended, and the carrier's buffer ran dry: UNDERRUNS += 1,
   once per dry spell (UNDERRUN_OPEN, cleared by the next release).

Leads: with lead 80 ms and ticks on a 20 ms grid a response starts with a burst of 4 frames, then one
per tick; after a stall the pacer refills the lead at most max_burst_frames per tick. A call may have a
lead of its own (control word LEAD_NS, written by the gateway at claim time from the call's carrier; 0 for
the configured lead_ms): a carrier edge that holds audio back before sending it needs more than 80 ms in
the carrier's buffer. Exotel's edge batches frames into 200 ms chunks, so its calls keep one chunk plus a
margin (300 ms, workers/gateway/carrier_core.py pacer_lead_ms): with 80 ms the chunk carrying the next
audio left only once the carrier had played the previous one (underruns, and 120 ms more before a
response's first chunk). The call's lead also moves its hold's clear (hold_clear_ns) by as much; the
prefill of a dry carrier waits for the configured lead's worth, as for any call.

Backlog bound: a lead by time assumes the carrier plays what it holds at real time from the moment it
lands. Plivo's buffer is deep (whatever is sent, tens of seconds) and its media server may play late (a
stall, jitter in front of it); every late ms then stays in the buffer and the caller hears the agent that
much later, with the time model none the wiser. Such a call has a bound (BACKLOG_MAX_FRAMES, written by the
gateway at claim time from the call's carrier: workers/gateway/carrier_core.py backlog_max_frames) on the
frames no echo has confirmed: the pacer counts the media entries it puts on the wire (WIRE_FRAMES) and the
gateway publishes how many of them the carrier's checkpoint echoes (or a clear it sent) settled
(CARRIER_PLAYED_POS, from voicecore/carriers/plivo/protocol.py CheckpointLead); a tick releases at most the
difference's room under the bound. A tick held there is not an underrun (the carrier has not confirmed
playing what it holds; BACKLOG_HELD counts it) and keeps the time model a frame from dry, so the call's
next frames go out as a lead top-up, not a dry carrier's prefill. The estimate of what was played (the
model worker's, from the newest echo plus the time since, capped by what was sent) is then off by at most
the bound, where without it a stall's whole length stayed in the buffer. A call without a bound (every
other carrier) reads the one word and is paced exactly as before.

Wire entries (voicecore/carriers/wire.py): each call's carrier module made its templates, and the gateway
put them into the call's slot of the arena (wire_tmpl, wire_tmpl_meta) before publishing the call. A media
entry is the media prefix + the frame + the media suffix, the frame in base64, or its 160 raw bytes when the
call's WIRE_RAW flag is set; a mark the mark prefix + ``tag:frames[:end]`` + the mark suffix (the name's
JSON quotes, if any, are the templates'); a clear the clear template. A Twilio call's entries are byte for
byte what they were when this module wrote Twilio's constants (tests/unit/test_pacer_core.py pins them).

No allocation in the step: constant byte strings are module-level arrays frozen into the compiled code,
the wire entry is written byte by byte (base64 included) straight into the shared wire slot from the
call's templates in shared memory, the arrays are indexed directly instead of sliced, and the functions
are compiled with numba's runtime off (rings.KERNEL_OPTIONS), so an allocation would not even compile.
Measured: see PacerCore.

Inlining: the helpers on every call's path every tick are inlined into the step by numba itself
(``inline="always"``), since a numba call between them costs ~70 ns per call slot (a tick over 200 calls
with nothing to release: 3.3 us inlined, 18.6 us with no helper inlined; bench/micro/bench_pacer.py). Numba
pays for it at compile time: each call site runs the callee's front end again, and nested inlines again
within it. The four helpers of the rarer events stay calls: a clear (``_queue_clear``, ``_write_clear``), a
mark (``_write_mark``) and a fallback line (``_release_fallback``); that halved the step's compile on a fresh
install (~14 s to ~7 s) with the ticks as fast as before.

Numba's on-disk cache does not track imports: after editing voicecore/shm/rings.py, voicecore/shm/arena.py's
template constants or the mark pieces in voicecore/carriers/marks.py during development, delete
workers/pacer/__pycache__ too.
``NUMBA_DISABLE_JIT=1`` runs this module as plain Python.
"""

from __future__ import annotations

import numpy as np

from voicecore.shm.control import (
    CODEC,
    CODEC_ALAW,
    BACKLOG_HELD,
    BACKLOG_MAX_FRAMES,
    CANCEL_SEEN_SEQ,
    CANCEL_SEQ,
    CARRIER_EMPTY_AT_NS,
    CARRIER_PLAYED_POS,
    CLEAR_QUEUED_NS,
    FALLBACK_AUTO_FOR_NS,
    FALLBACK_CLIP,
    FALLBACK_LINES,
    FALLBACK_PENDING,
    FALLBACK_PLAYING,
    FALLBACK_POS,
    FALLBACK_SEEN_SEQ,
    FALLBACK_SEQ,
    FRAMES_RELEASED,
    FRAMES_SKIPPED,
    FRAMES_SUPERSEDED,
    GATE_HELD,
    HOLD_CLIP,
    HOLD_SINCE_NS,
    GENERATION,
    LAST_RELEASE_NS,
    LEAD_NS,
    MODEL_ALIVE_NS,
    MODEL_EXPECTING,
    OUT_HEAD,
    OUT_TAIL,
    PACER_GENERATION,
    PAUSE_SINCE_NS,
    PAUSED_TAG,
    PLAYED_FRAMES,
    PLAYED_TAG,
    SENT_CLEARED,
    SENT_CLOSED,
    SENT_ENDED,
    SENT_FRAMES,
    SENT_OPEN,
    SENT_TAG,
    SLOT_ACTIVE,
    START_HOLDS,
    STATE,
    TAG_CANCELLED,
    TAG_DONE,
    TAG_LIVE,
    TAG_ROW_APPROVED_FRAMES,
    TAG_ROW_STATE,
    TAG_ROW_TAG,
    TAG_ROW_WORDS,
    TAG_TABLE_BASE,
    TAG_TABLE_SIZE,
    UNDERRUN_OPEN,
    UNDERRUNS,
    WIRE_FRAMES,
    WIRE_FULL,
    WIRE_HEAD,
    WIRE_TAIL,
)
from voicecore.shm.arena import (
    MIN_WIRE_SLOT_BYTES,
    TEMPLATE_CLEAR,
    TEMPLATE_FLAGS,
    TEMPLATE_MARK_PREFIX,
    TEMPLATE_MARK_SUFFIX,
    TEMPLATE_MEDIA_PREFIX,
    TEMPLATE_MEDIA_SUFFIX,
    TEMPLATE_META_WORDS,
    TEMPLATE_PIECES,
    WIRE_RAW,
)
from voicecore.shm.rings import atomic_load_acquire, atomic_store_release, kernel
from voicecore.timing import (
    DEFAULT_LEAD_MS,
    DEFAULT_MARK_EVERY_FRAMES,
    DEFAULT_START_HOLD_MS,
    FRAME_NS,
    MAX_CATCH_UP_FRAMES,
)
from voicecore.fallback import FallbackClips, codec_table, load_clips
from voicecore.carriers import marks

# A call waiting on the model (MODEL_EXPECTING) whose model worker has not stamped it this long hears its
# hold line from the pacer: the model worker stamps every ~100 ms, a standby takes over in well under this.
DEFAULT_MODEL_SILENT_MS = 500

# --- statistics the step accumulates for the shell (stats_out[STAT_*]) --------------------------------
STAT_TICKS = 0
STAT_CANCEL_PASSES = 1
STAT_CALLS_SERVED = 2  # active call slots visited, summed over ticks
STAT_FRAMES_RELEASED = 3
STAT_FRAMES_SKIPPED = 4
STAT_WIRE_ENTRIES = 5
STAT_MARKS = 6
STAT_CLEARS = 7
STAT_GATE_HELD = 8
STAT_UNDERRUNS = 9
STAT_WIRE_FULL = 10
STAT_FRAMES_SUPERSEDED = 11
STAT_FALLBACK_LINES = 12
STAT_FALLBACK_FRAMES = 13
STAT_BACKLOG_HELD = 14
STATS_WORDS = 16
STAT_NAMES = (
    "ticks",
    "cancel_passes",
    "calls_served",
    "frames_released",
    "frames_skipped",
    "wire_entries",
    "marks",
    "clears",
    "gate_held",
    "underruns",
    "wire_full",
    "frames_superseded",
    "fallback_lines",
    "fallback_frames",
    "backlog_held",
)

# --- the pieces of a mark's name (voicecore/carriers/marks.py); everything around it is the call's templates --
_END = np.frombuffer(marks.END_SUFFIX.encode("ascii"), dtype=np.uint8)
_COLON = ord(marks.SEPARATOR)
_B64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)
_PAD = 61  # "="
_DIGIT_0 = 48

PREFILL_WAIT = 0
PREFILL_READY = 1
PREFILL_GATED = 2

def new_stats() -> np.ndarray:
    return np.zeros(STATS_WORDS, dtype=np.int64)


# --- byte writers: straight into wire_data[s, w, off...], no views, no allocation ------------------------


GATED_START_LEADS = 3  # receptionist demo: 1 lead, 9 underruns in 3 calls; 2 leads, 4 in 50 calls; 3 leads, 0 in 50


@kernel
def _prefill_ready(ctrl, out_meta, s, out_tail, out_head, tag, want_frames):
    """PREFILL_READY when want_frames releasable frames of ``tag`` (or its END) are in the ring from out_tail;
    PREFILL_GATED when frames are there but the gate watermark stops them short; else PREFILL_WAIT.

    A watermark within GATED_START_LEADS leads of the start also holds, whether or not the audio past it has
    come: approval that trails the audio (a validator judging word by word holds a word that may still grow,
    a single letter, an open word) would otherwise release one lead, stall a tick, release the next word's
    worth and stall again, and so would approval that ran ahead of a slow first delivery on the speech-rate
    bound and then waited for the next words ("Shall" approved 10 frames before its audio came, " I" and
    " book" held it there for 240 ms). Waiting for that much approved lets playback start ahead of approval,
    not beside it. A tag approved in full, or approved by rolling windows wider than that (the turn-taking
    controller's), starts at once.
    """
    n_out = out_meta.shape[1]
    approved = _row_approved(ctrl, s, tag)
    have = 0
    first = -1
    t = out_tail
    while t < out_head and have < GATED_START_LEADS * want_frames:
        o = t & (n_out - 1)
        if out_meta[s, o, 0] != tag:
            return PREFILL_READY  # another tag follows: this one has no more frames to wait for
        index = out_meta[s, o, 1]
        if index < 0:
            return PREFILL_READY  # END: a short response plays whole
        if index >= approved:
            return PREFILL_GATED  # the audio is here; the validator has not approved it yet
        if first < 0:
            first = index
        have += 1
        t += 1
    if have < want_frames:
        return PREFILL_WAIT
    if have < GATED_START_LEADS * want_frames and approved - first < GATED_START_LEADS * want_frames:
        return PREFILL_GATED  # the audio came short of the leads, and so did the approval: wait for the gate
    return PREFILL_READY


@kernel(inline="always")
def _put(wire_data, s, w, off, src):
    for k in range(src.shape[0]):
        wire_data[s, w, off + k] = src[k]
    return off + src.shape[0]


@kernel(inline="always")
def _put_uint(wire_data, s, w, off, value):
    """Decimal digits of value (>= 0)."""
    n_digits = 1
    v = value
    while v >= 10:
        v //= 10
        n_digits += 1
    v = value
    for k in range(n_digits - 1, -1, -1):
        wire_data[s, w, off + k] = _DIGIT_0 + v % 10
        v //= 10
    return off + n_digits


@kernel(inline="always")
def _put_template(wire_data, s, w, off, tmpl, tmpl_meta, piece):
    """The call's template ``piece`` (TEMPLATE_*; its length in tmpl_meta) at off."""
    n = tmpl_meta[s, piece]
    for k in range(n):
        wire_data[s, w, off + k] = tmpl[s, piece, k]
    return off + n


@kernel(inline="always")
def _put_raw_frame(wire_data, s, w, off, frames, a, b):
    """frames[a, b, :] as they are (a raw entry: the carrier edge encodes them)."""
    n = frames.shape[2]
    for k in range(n):
        wire_data[s, w, off + k] = frames[a, b, k]
    return off + n


@kernel(inline="always")
def _put_b64_frame(wire_data, s, w, off, frames, a, b):
    """Standard base64 (RFC 4648 section 4, padded) of frames[a, b, :] into the wire slot: an outbound ring's
    frame (out_payload[slot, o]) or a fallback line's (clips[clip, k])."""
    n = frames.shape[2]
    i = 0
    while i + 3 <= n:
        v = (np.int64(frames[a, b, i]) << 16) | (np.int64(frames[a, b, i + 1]) << 8)
        v |= np.int64(frames[a, b, i + 2])
        wire_data[s, w, off] = _B64[(v >> 18) & 63]
        wire_data[s, w, off + 1] = _B64[(v >> 12) & 63]
        wire_data[s, w, off + 2] = _B64[(v >> 6) & 63]
        wire_data[s, w, off + 3] = _B64[v & 63]
        off += 4
        i += 3
    rest = n - i
    if rest > 0:
        v = np.int64(frames[a, b, i]) << 16
        if rest == 2:
            v |= np.int64(frames[a, b, i + 1]) << 8
        wire_data[s, w, off] = _B64[(v >> 18) & 63]
        wire_data[s, w, off + 1] = _B64[(v >> 12) & 63]
        wire_data[s, w, off + 2] = _B64[(v >> 6) & 63] if rest == 2 else _PAD
        wire_data[s, w, off + 3] = _PAD
        off += 4
    return off


@kernel
def b64encode_into(src, dst, off):
    """Standard padded base64 of the 1-d uint8 array src into dst[off:]; returns the new offset."""
    n = src.shape[0]
    i = 0
    while i + 3 <= n:
        v = (np.int64(src[i]) << 16) | (np.int64(src[i + 1]) << 8) | np.int64(src[i + 2])
        dst[off] = _B64[(v >> 18) & 63]
        dst[off + 1] = _B64[(v >> 12) & 63]
        dst[off + 2] = _B64[(v >> 6) & 63]
        dst[off + 3] = _B64[v & 63]
        off += 4
        i += 3
    rest = n - i
    if rest > 0:
        v = np.int64(src[i]) << 16
        if rest == 2:
            v |= np.int64(src[i + 1]) << 8
        dst[off] = _B64[(v >> 18) & 63]
        dst[off + 1] = _B64[(v >> 12) & 63]
        dst[off + 2] = _B64[(v >> 6) & 63] if rest == 2 else _PAD
        dst[off + 3] = _PAD
        off += 4
    return off


@kernel(inline="always")
def _write_media(wire_data, wire_len, s, w, tmpl, tmpl_meta, frames, a, b):
    """A media entry of frames[a, b] (an outbound ring's frame or a fallback line's, see _put_b64_frame)
    into wire slot w of call s: media prefix + base64 (raw bytes for a WIRE_RAW call) + media suffix."""
    off = _put_template(wire_data, s, w, 0, tmpl, tmpl_meta, TEMPLATE_MEDIA_PREFIX)
    if tmpl_meta[s, TEMPLATE_FLAGS] & WIRE_RAW:
        off = _put_raw_frame(wire_data, s, w, off, frames, a, b)
    else:
        off = _put_b64_frame(wire_data, s, w, off, frames, a, b)
    off = _put_template(wire_data, s, w, off, tmpl, tmpl_meta, TEMPLATE_MEDIA_SUFFIX)
    wire_len[s, w] = off


@kernel
def _write_mark(wire_data, wire_len, s, w, tmpl, tmpl_meta, tag, frames_through, end):
    """mark prefix + ``<tag>:<frames_through>[:end]`` (marks.py) + mark suffix; for Twilio
    {"event":"mark","streamSid":"...","mark":{"name":"<tag>:<frames_through>[:end]"}} (spec.md)."""
    off = _put_template(wire_data, s, w, 0, tmpl, tmpl_meta, TEMPLATE_MARK_PREFIX)
    off = _put_uint(wire_data, s, w, off, tag)
    wire_data[s, w, off] = _COLON
    off = _put_uint(wire_data, s, w, off + 1, frames_through)
    if end:
        off = _put(wire_data, s, w, off, _END)
    off = _put_template(wire_data, s, w, off, tmpl, tmpl_meta, TEMPLATE_MARK_SUFFIX)
    wire_len[s, w] = off


@kernel
def _write_clear(wire_data, wire_len, s, w, tmpl, tmpl_meta):
    wire_len[s, w] = _put_template(wire_data, s, w, 0, tmpl, tmpl_meta, TEMPLATE_CLEAR)


# --- per-call steps ---------------------------------------------------------------------------------------


@kernel(inline="always")
def _row_state(ctrl, s, tag):
    """The tag's row state, 0 when the row holds another tag (dead) or the tag is not a tag."""
    if tag <= 0:
        return 0
    base = TAG_TABLE_BASE + (tag % TAG_TABLE_SIZE) * TAG_ROW_WORDS
    if ctrl[s, base + TAG_ROW_TAG] != tag:
        return 0
    return ctrl[s, base + TAG_ROW_STATE]


@kernel(inline="always")
def _row_approved(ctrl, s, tag):
    return ctrl[s, TAG_TABLE_BASE + (tag % TAG_TABLE_SIZE) * TAG_ROW_WORDS + TAG_ROW_APPROVED_FRAMES]


@kernel(inline="always")
def _prepare_slot(ctrl, s, now_ns):
    """True when the slot holds an active call; (re)initialises the pacer's view of a new call."""
    if atomic_load_acquire(ctrl, s, STATE) != SLOT_ACTIVE:  # acquire: the claim's writes (templates too) are visible
        return False
    generation = ctrl[s, GENERATION]
    if ctrl[s, PACER_GENERATION] != generation:
        ctrl[s, SENT_TAG] = 0
        ctrl[s, SENT_FRAMES] = 0
        ctrl[s, SENT_CLOSED] = SENT_OPEN
        ctrl[s, UNDERRUN_OPEN] = 0
        ctrl[s, CARRIER_EMPTY_AT_NS] = now_ns
        ctrl[s, CLEAR_QUEUED_NS] = 0
        ctrl[s, LAST_RELEASE_NS] = 0
        # Cancels decided before we first looked concern audio we never sent: nothing to clear.
        ctrl[s, CANCEL_SEEN_SEQ] = atomic_load_acquire(ctrl, s, CANCEL_SEQ)
        ctrl[s, PACER_GENERATION] = generation
    return True


@kernel
def any_live_call(ctrl):
    """True when a slot holds an active call: with none, the pacer has nothing to tick and need not wake
    on its grid (a slot being claimed is seen within a frame; its first audio comes after the model's)."""
    for s in range(ctrl.shape[0]):
        if atomic_load_acquire(ctrl, s, STATE) == SLOT_ACTIVE:
            return True
    return False


@kernel(inline="always")
def _wire_head_with_room(ctrl, wire_len, s, stats_out):
    """WIRE_HEAD when the wire ring has room for one more entry; -1 (counted in WIRE_FULL) when full."""
    head = ctrl[s, WIRE_HEAD]
    if head - atomic_load_acquire(ctrl, s, WIRE_TAIL) >= wire_len.shape[1]:
        ctrl[s, WIRE_FULL] += 1
        stats_out[STAT_WIRE_FULL] += 1
        return -1
    return head


@kernel
def _queue_clear(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, stats_out):
    """Put a ``clear`` behind what the wire ring holds. False when the ring is full (the clear is owed)."""
    head = _wire_head_with_room(ctrl, wire_len, s, stats_out)
    if head < 0:
        return False
    _write_clear(wire_data, wire_len, s, head & (wire_len.shape[1] - 1), tmpl, tmpl_meta)
    atomic_store_release(ctrl, s, WIRE_HEAD, head + 1)
    ctrl[s, SENT_CLOSED] = SENT_CLEARED
    ctrl[s, UNDERRUN_OPEN] = 0
    # Twilio throws its whole buffer away on clear (docs/explanation/protocols.md#a3): the next frames start
    # from an empty carrier and get their full lead burst.
    ctrl[s, CARRIER_EMPTY_AT_NS] = now_ns
    ctrl[s, CLEAR_QUEUED_NS] = now_ns
    stats_out[STAT_CLEARS] += 1
    stats_out[STAT_WIRE_ENTRIES] += 1
    return True


@kernel(inline="always")
def _slot_lead_ns(ctrl, s, lead_ns):
    """The call's own lead (LEAD_NS, its carrier's: the gateway wrote it at claim time), else the configured one."""
    own = ctrl[s, LEAD_NS]
    return own if own > 0 else lead_ns


@kernel(inline="always")
def _process_pause(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, hold_clear_ns, stats_out):
    """A hold of the tag on the wire: mark where its audio stops, clear a carrier still playing it
    hold_clear_ns into the hold (the call's: pace_tick adds a call's own lead). False: the wire ring is full
    (what is owed waits for the next tick)."""
    paused_tag = atomic_load_acquire(ctrl, s, PAUSED_TAG)
    sent_frames = ctrl[s, SENT_FRAMES]
    if paused_tag <= 0 or paused_tag != ctrl[s, SENT_TAG] or sent_frames <= 0:
        return True
    closed = ctrl[s, SENT_CLOSED]
    if closed == SENT_OPEN:
        head = _wire_head_with_room(ctrl, wire_len, s, stats_out)
        if head < 0:
            return False
        _write_mark(wire_data, wire_len, s, head & (wire_len.shape[1] - 1), tmpl, tmpl_meta, paused_tag,
                    sent_frames, True)
        atomic_store_release(ctrl, s, WIRE_HEAD, head + 1)
        ctrl[s, SENT_CLOSED] = SENT_ENDED
        stats_out[STAT_MARKS] += 1
        stats_out[STAT_WIRE_ENTRIES] += 1
        return True
    if (
        closed == SENT_ENDED
        and now_ns - ctrl[s, PAUSE_SINCE_NS] >= hold_clear_ns
        and not (ctrl[s, PLAYED_TAG] == paused_tag and ctrl[s, PLAYED_FRAMES] >= sent_frames)
    ):
        return _queue_clear(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, stats_out)
    return True


@kernel(inline="always")
def _process_cancel(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, stats_out):
    """Queue a clear if the tag on the wire was cancelled. False: the clear is still owed (wire full)."""
    seq = atomic_load_acquire(ctrl, s, CANCEL_SEQ)
    if seq == ctrl[s, CANCEL_SEEN_SEQ]:
        return True
    sent_tag = ctrl[s, SENT_TAG]
    if (
        sent_tag > 0
        and ctrl[s, SENT_FRAMES] > 0
        and ctrl[s, SENT_CLOSED] != SENT_CLEARED
        and _row_state(ctrl, s, sent_tag) == TAG_CANCELLED
    ):
        if not _queue_clear(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, stats_out):
            return False
    ctrl[s, CANCEL_SEEN_SEQ] = seq
    return True


@kernel(inline="always")
def _take_fallback_requests(ctrl, s, now_ns, model_silent_ns, n_clips):
    """A line the model worker asked for (FALLBACK_SEQ moved), or the pacer's own hold line when the model
    worker stopped stamping a call that waits on it: becomes FALLBACK_PENDING (INV-NEVER-SILENT)."""
    seq = atomic_load_acquire(ctrl, s, FALLBACK_SEQ)  # acquire: FALLBACK_CLIP was written before it
    if seq != ctrl[s, FALLBACK_SEEN_SEQ]:
        clip = ctrl[s, FALLBACK_CLIP]
        if 0 <= clip < n_clips and ctrl[s, FALLBACK_PLAYING] != clip + 1:
            ctrl[s, FALLBACK_PENDING] = clip + 1
        ctrl[s, FALLBACK_SEEN_SEQ] = seq
    if model_silent_ns > 0 and ctrl[s, MODEL_EXPECTING] != 0:
        alive = ctrl[s, MODEL_ALIVE_NS]
        if alive > 0 and now_ns - alive >= model_silent_ns and ctrl[s, FALLBACK_AUTO_FOR_NS] != alive:
            ctrl[s, FALLBACK_AUTO_FOR_NS] = alive  # one line per silence of the model worker
            if ctrl[s, FALLBACK_PLAYING] == 0 and ctrl[s, FALLBACK_PENDING] == 0:
                hold = ctrl[s, HOLD_CLIP]
                ctrl[s, FALLBACK_PENDING] = (hold if 0 <= hold < n_clips else 0) + 1


@kernel
def _release_fallback(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, empty_at_ns, wire_head,
                      wire_tail, budget, start_below_ns, fill_below_ns, clips, clip_frames, stats_out):
    """Frames of the fallback line playing in call s, under the lead and burst bounds of a response's.
    Returns (empty_at_ns, wire_head, frames released); FALLBACK_PLAYING drops to 0 after its last frame.
    No marks: the line is no response's audio (marks name a response's tag)."""
    n_wire = wire_len.shape[1]
    clip = ctrl[s, FALLBACK_PLAYING] - 1
    if ctrl[s, CODEC] == CODEC_ALAW:
        clip += clip_frames.shape[0] // 2  # the line's A-law copy (fallback.codec_table): the call's rings are A-law
    pos = ctrl[s, FALLBACK_POS]
    count = clip_frames[clip]
    released = 0
    while pos < count and released < budget:
        if empty_at_ns - now_ns >= (fill_below_ns if released else start_below_ns):
            break
        if wire_head - wire_tail >= n_wire:
            ctrl[s, WIRE_FULL] += 1
            stats_out[STAT_WIRE_FULL] += 1
            break
        _write_media(wire_data, wire_len, s, wire_head & (n_wire - 1), tmpl, tmpl_meta, clips, clip, pos)
        wire_head += 1
        pos += 1
        released += 1
        empty_at_ns = max(empty_at_ns, now_ns) + FRAME_NS
    ctrl[s, FALLBACK_POS] = pos
    if pos >= count:
        ctrl[s, FALLBACK_PLAYING] = 0
    stats_out[STAT_FALLBACK_FRAMES] += released
    return empty_at_ns, wire_head, released


@kernel(inline="always")
def _release(
    ctrl,
    out_meta,
    out_payload,
    wire_len,
    wire_data,
    tmpl,
    tmpl_meta,
    s,
    now_ns,
    lead_ns,
    prefill_frames,
    mark_every_frames,
    max_burst_frames,
    start_hold_ns,
    stats_out,
    release_frames,
    clips,
    clip_frames,
    model_silent_ns,
):
    """Step 2 for call s. lead_ns: the call's lead; prefill_frames: the configured lead in frames, what a
    dry carrier's start waits for (the model's delivery, not the carrier's buffer, decides it)."""
    n_out = out_meta.shape[1]
    n_wire = wire_len.shape[1]
    out_head = atomic_load_acquire(ctrl, s, OUT_HEAD)  # acquire: the frames below it are complete
    out_tail = ctrl[s, OUT_TAIL]
    wire_head = ctrl[s, WIRE_HEAD]
    wire_tail = atomic_load_acquire(ctrl, s, WIRE_TAIL)  # acquire: the gateway is done with slots below it
    wire_head_start = wire_head
    sent_tag = ctrl[s, SENT_TAG]
    sent_frames = ctrl[s, SENT_FRAMES]
    closed = ctrl[s, SENT_CLOSED]
    empty_at_ns = ctrl[s, CARRIER_EMPTY_AT_NS]
    paused_tag = atomic_load_acquire(ctrl, s, PAUSED_TAG)
    released = 0
    skipped = 0
    superseded = 0
    marks = 0
    held = False  # a due entry was held by the gate or the wire ring: a dry carrier is not an underrun
    # Release in batches of release_frames (one socket write carries them all): start only when the
    # carrier's queue is down to about lead - (B-1) frames, fill it to about lead + (B-1) frames, so
    # the queue swings around the lead and never falls below where B = 1 would leave it before a tick.
    # B = 1 keeps the lead topped up on every tick.
    if release_frames <= 1:
        start_below_ns = lead_ns
        fill_below_ns = lead_ns
    else:
        start_below_ns = lead_ns - (release_frames - 1) * FRAME_NS + FRAME_NS // 2
        fill_below_ns = lead_ns + (release_frames - 1) * FRAME_NS - FRAME_NS // 2
    # A call whose carrier's buffer is bounded by its echoes (BACKLOG_MAX_FRAMES, Plivo's checkpoints): this
    # tick may add no more than leaves the frames no echo has confirmed at the bound, whatever the lead by time
    # says (a carrier that played late still holds what the time model thinks it played). Every other call:
    # the burst bound alone (one word read: the lead's cache line).
    room = max_burst_frames
    backlog_max = ctrl[s, BACKLOG_MAX_FRAMES]
    if backlog_max > 0:
        unplayed = ctrl[s, WIRE_FRAMES] - ctrl[s, CARRIER_PLAYED_POS]
        room = min(max_burst_frames, max(0, backlog_max - unplayed))
    backlog_held = False

    # A fallback line (INV-NEVER-SILENT) plays whole, alone: while it plays nothing of the outbound ring goes
    # out (one voice); a response waiting behind it follows it.
    _take_fallback_requests(ctrl, s, now_ns, model_silent_ns, clip_frames.shape[0] // 2)
    fallback_released = 0
    if ctrl[s, FALLBACK_PLAYING] > 0:
        empty_at_ns, wire_head, fallback_released = _release_fallback(
            ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, empty_at_ns, wire_head, wire_tail,
            room, start_below_ns, fill_below_ns, clips, clip_frames, stats_out)
        backlog_held = (
            ctrl[s, FALLBACK_PLAYING] > 0
            and fallback_released >= room
            and room < max_burst_frames
            and empty_at_ns - now_ns < (fill_below_ns if fallback_released else start_below_ns)
        )
    released = fallback_released

    while out_tail < out_head and ctrl[s, FALLBACK_PLAYING] == 0:
        o = out_tail & (n_out - 1)
        tag = out_meta[s, o, 0]
        frame_index = out_meta[s, o, 1]
        state = _row_state(ctrl, s, tag)
        if state != TAG_LIVE and state != TAG_DONE:
            # INV-STALE: cancelled, rejected or long-gone tag; read fresh from the row for every frame.
            if frame_index >= 0:
                skipped += 1
            out_tail += 1
            continue
        if tag < sent_tag:
            # INV-ONE-VOICE: a newer response is already on the wire; the older one is never heard again.
            if frame_index >= 0:
                skipped += 1
                superseded += 1
            out_tail += 1
            continue
        if frame_index < 0:
            # END marker. Only the tag on the wire gets its ":end" mark; a response whose frames were
            # all skipped, or that had none, ends silently. A live tag cut by its hold's clear (a
            # cancelled one never gets here) gets it too; one whose hold marked its end already does not.
            if tag == sent_tag and closed != SENT_ENDED:
                if wire_head - wire_tail >= n_wire:
                    ctrl[s, WIRE_FULL] += 1
                    stats_out[STAT_WIRE_FULL] += 1
                    held = True
                    break
                w = wire_head & (n_wire - 1)
                _write_mark(wire_data, wire_len, s, w, tmpl, tmpl_meta, tag, sent_frames, True)
                wire_head += 1
                marks += 1
                closed = SENT_ENDED
            out_tail += 1
            continue
        if tag == paused_tag:
            # A bare VAD edge holds this tag: nothing newer of it goes out (the carrier plays what it has).
            held = True
            break
        if released >= max_burst_frames or empty_at_ns - now_ns >= (fill_below_ns if released else start_below_ns):
            break
        if released >= room:
            # The lead by time wants this frame, but the carrier has the bound's worth unconfirmed already.
            backlog_held = True
            break
        if released == 0 and empty_at_ns <= now_ns and start_hold_ns > 0:
            # The carrier is dry: prefill. Release only when a (configured) lead's worth of this tag's
            # frames (or its end) is ready, or the first of them has waited start_hold_ns; one frame alone
            # would leave the caller a gap at the next tick.
            readiness = _prefill_ready(ctrl, out_meta, s, out_tail, out_head, tag, prefill_frames)
            if readiness == PREFILL_GATED:
                # Start only when a lead's worth is approved: releasing the first approved frame alone
                # made every gated answer stutter while approval caught up (no timeout: the gate decides).
                ctrl[s, GATE_HELD] += 1
                stats_out[STAT_GATE_HELD] += 1
                held = True
                break
            if readiness == PREFILL_WAIT:
                # Stored plus one so that 0 can mean "not holding" even for a clock that starts at 0.
                hold_since_plus_1 = ctrl[s, HOLD_SINCE_NS]
                if hold_since_plus_1 == 0:
                    ctrl[s, HOLD_SINCE_NS] = now_ns + 1
                    ctrl[s, START_HOLDS] += 1
                    held = True
                    break
                if now_ns + 1 - hold_since_plus_1 < start_hold_ns:
                    held = True
                    break
        ctrl[s, HOLD_SINCE_NS] = 0
        if frame_index >= _row_approved(ctrl, s, tag):
            # INV-GATE: nothing past the watermark, and nothing behind it either (INV-ORDER).
            ctrl[s, GATE_HELD] += 1
            stats_out[STAT_GATE_HELD] += 1
            held = True
            break
        # Frames of this tag through this one. The index, not a running count: equal to the count under
        # INV-ORDER (indices 0, 1, 2, ...), and still this tag's audio should a response's first frames
        # have been skipped.
        frames_through = frame_index + 1
        mark_due = mark_every_frames > 0 and frames_through % mark_every_frames == 0
        if n_wire - (wire_head - wire_tail) < (2 if mark_due else 1):
            ctrl[s, WIRE_FULL] += 1
            stats_out[STAT_WIRE_FULL] += 1
            held = True
            break
        _write_media(wire_data, wire_len, s, wire_head & (n_wire - 1), tmpl, tmpl_meta, out_payload, s, o)
        wire_head += 1
        if tag != sent_tag or closed != SENT_OPEN:
            # A new response, or the held one resuming after its hold's end mark or clear (a cancelled
            # tag never gets here: its frames are skipped; an ended one has no frames left).
            sent_tag = tag
            closed = SENT_OPEN
        sent_frames = frames_through
        if mark_due:
            w = wire_head & (n_wire - 1)
            _write_mark(wire_data, wire_len, s, w, tmpl, tmpl_meta, tag, sent_frames, False)
            wire_head += 1
            marks += 1
        out_tail += 1
        released += 1
        empty_at_ns = max(empty_at_ns, now_ns) + FRAME_NS

    if released == 0 and ctrl[s, FALLBACK_PENDING] > 0 and ctrl[s, FALLBACK_PLAYING] == 0:
        # Nothing of a response went out this tick: the line starts, behind what the carrier still holds.
        ctrl[s, FALLBACK_PLAYING] = ctrl[s, FALLBACK_PENDING]
        ctrl[s, FALLBACK_PENDING] = 0
        ctrl[s, FALLBACK_POS] = 0
        ctrl[s, FALLBACK_LINES] += 1
        stats_out[STAT_FALLBACK_LINES] += 1
        empty_at_ns, wire_head, fallback_released = _release_fallback(
            ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, empty_at_ns, wire_head, wire_tail,
            room, start_below_ns, fill_below_ns, clips, clip_frames, stats_out)
        released = fallback_released
    response_released = released - fallback_released
    if backlog_held:
        # Not an underrun, whatever the time model says: the carrier has not confirmed playing the bound's
        # worth of audio, so it still has audio (or it stalled, which the echoes will tell). The time model
        # keeps the carrier at least a frame from dry meanwhile: a dry carrier's prefill is for a response's
        # start, and what is played of a response (the model worker's estimate before its first echo, a
        # fallback line's end) is not the time since the last release.
        held = True
        empty_at_ns = max(empty_at_ns, now_ns + FRAME_NS)
        ctrl[s, BACKLOG_HELD] += 1
        stats_out[STAT_BACKLOG_HELD] += 1

    ctrl[s, SENT_TAG] = sent_tag
    ctrl[s, SENT_FRAMES] = sent_frames
    ctrl[s, SENT_CLOSED] = closed
    ctrl[s, CARRIER_EMPTY_AT_NS] = empty_at_ns
    if released > 0:
        ctrl[s, FRAMES_RELEASED] += response_released
        ctrl[s, LAST_RELEASE_NS] = now_ns
        ctrl[s, UNDERRUN_OPEN] = 0
        if backlog_max > 0:
            ctrl[s, WIRE_FRAMES] += released  # before WIRE_HEAD is published: the gateway counts what it drains
    elif closed != SENT_OPEN:
        ctrl[s, UNDERRUN_OPEN] = 0
    elif (
        not held
        and sent_frames > 0
        and empty_at_ns <= now_ns
        and ctrl[s, UNDERRUN_OPEN] == 0
        and (_row_state(ctrl, s, sent_tag) == TAG_LIVE or _row_state(ctrl, s, sent_tag) == TAG_DONE)
    ):
        # The response is still coming, the carrier has played everything we gave it, and the model
        # has nothing for us: the caller hears a gap (INV-ORDER: docs/explanation/invariants.md#inv-order).
        ctrl[s, UNDERRUNS] += 1
        ctrl[s, UNDERRUN_OPEN] = 1
        stats_out[STAT_UNDERRUNS] += 1
    if skipped > 0:
        ctrl[s, FRAMES_SKIPPED] += skipped
    if superseded > 0:
        ctrl[s, FRAMES_SUPERSEDED] += superseded
    # Publish: wire entries first (the gateway may send them), then free the outbound slots we read.
    if wire_head != wire_head_start:
        atomic_store_release(ctrl, s, WIRE_HEAD, wire_head)
    atomic_store_release(ctrl, s, OUT_TAIL, out_tail)
    stats_out[STAT_FRAMES_RELEASED] += response_released
    stats_out[STAT_FRAMES_SKIPPED] += skipped
    stats_out[STAT_FRAMES_SUPERSEDED] += superseded
    stats_out[STAT_MARKS] += marks
    stats_out[STAT_WIRE_ENTRIES] += wire_head - wire_head_start


@kernel(inline="always")
def _check_arrays(ctrl, wire_len, wire_data, tmpl, tmpl_meta, stats_out):
    n_calls = ctrl.shape[0]
    if wire_len.shape[0] != n_calls or wire_data.shape[0] != n_calls:
        raise ValueError("arrays disagree on max_calls")
    if tmpl.shape[0] != n_calls or tmpl_meta.shape[0] != n_calls:
        raise ValueError("wire templates disagree on max_calls")
    if tmpl.shape[1] < TEMPLATE_PIECES or tmpl_meta.shape[1] < TEMPLATE_META_WORDS:
        raise ValueError("wire templates too small")
    # Each call's templates were checked against the wire slot when the gateway wrote them (arena.py).
    if wire_data.shape[2] < MIN_WIRE_SLOT_BYTES:
        raise ValueError("wire slot too small")
    if stats_out.shape[0] < STATS_WORDS:
        raise ValueError("stats_out must have STATS_WORDS words")


@kernel
def pace_tick(
    ctrl,
    out_meta,
    out_payload,
    wire_len,
    wire_data,
    tmpl,
    tmpl_meta,
    now_ns,
    lead_ns,
    mark_every_frames,
    max_burst_frames,
    start_hold_ns,
    stats_out,
    first_slot,
    slot_step,
    release_frames,
    hold_clear_ns,
    clips,
    clip_frames,
    model_silent_ns,
):
    """One 20 ms tick for the call slots first_slot, first_slot + slot_step, ... (0, 1: every slot).
    Returns the number of calls with new wire entries.

    ctrl, out_meta, out_payload, wire_len, wire_data, tmpl, tmpl_meta: the arena's arrays (tmpl and
    tmpl_meta: its wire_tmpl and wire_tmpl_meta, every call's wire templates). now_ns: the tick's time on
    the shell's monotonic clock. lead_ns: send-ahead to keep in the carrier's buffer, for every call whose
    control block names no lead of its own (LEAD_NS 0; a call's own replaces it, hold_clear_ns grows by
    the difference). mark_every_frames:
    mark cadence (0: only ":end" marks). max_burst_frames: frames per call per tick at most.
    start_hold_ns: longest prefill wait when the carrier is dry (0: release at once).
    release_frames: frames released together (1: top the lead up every tick; 2: every other tick, two
    at a time, so the gateway writes half as often).
    stats_out: int64[STATS_WORDS], accumulated (STAT_*). first_slot, slot_step: the shell ticks the slots
    in groups on phases of the 20 ms grid (PacerCore.tick), so the gateway gets a group's frames at a
    time instead of every call's at once. hold_clear_ns: a hold (PAUSED_TAG) of the tag on the wire that
    lasts this long while the carrier has not echoed its end mark gets a ``clear``. clips, clip_frames: the
    fallback lines in both laws (voicecore/fallback ``codec_table``: uint8[2n, max_frames, 160], int64[2n],
    the n lines in mu-law, then the same n in A-law for calls whose CODEC is CODEC_ALAW). model_silent_ns: a call waiting
    on a model worker that has not stamped it this long gets the call's hold line (0: never).
    """
    _check_arrays(ctrl, wire_len, wire_data, tmpl, tmpl_meta, stats_out)
    if out_meta.shape[0] != ctrl.shape[0] or out_payload.shape[0] != ctrl.shape[0]:
        raise ValueError("arrays disagree on max_calls")
    if first_slot < 0 or slot_step < 1:
        raise ValueError("first_slot must be >= 0 and slot_step >= 1")
    calls_with_news = 0
    for s in range(first_slot, ctrl.shape[0], slot_step):
        if not _prepare_slot(ctrl, s, now_ns):
            continue
        stats_out[STAT_CALLS_SERVED] += 1
        wire_head_before = ctrl[s, WIRE_HEAD]
        # The call's lead: its carrier's (LEAD_NS) or the configured one; a hold is cleared that much later.
        slot_lead_ns = _slot_lead_ns(ctrl, s, lead_ns)
        if _process_cancel(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, stats_out) and _process_pause(
            ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, hold_clear_ns + (slot_lead_ns - lead_ns), stats_out
        ):
            _release(
                ctrl,
                out_meta,
                out_payload,
                wire_len,
                wire_data,
                tmpl,
                tmpl_meta,
                s,
                now_ns,
                slot_lead_ns,
                lead_ns // FRAME_NS,
                mark_every_frames,
                max_burst_frames,
                start_hold_ns,
                stats_out,
                release_frames,
                clips,
                clip_frames,
                model_silent_ns,
            )
        if ctrl[s, WIRE_HEAD] != wire_head_before:
            calls_with_news += 1
    stats_out[STAT_TICKS] += 1
    return calls_with_news


@kernel
def pace_cancels(ctrl, wire_len, wire_data, tmpl, tmpl_meta, now_ns, stats_out):
    """Only step 1 (and 0) for every call: for a shell woken between ticks by a barge-in.

    Returns the number of calls that got a clear. Releases nothing, so it never disturbs the lead.
    """
    _check_arrays(ctrl, wire_len, wire_data, tmpl, tmpl_meta, stats_out)
    calls_with_news = 0
    for s in range(ctrl.shape[0]):
        if not _prepare_slot(ctrl, s, now_ns):
            continue
        wire_head_before = ctrl[s, WIRE_HEAD]
        _process_cancel(ctrl, wire_len, wire_data, tmpl, tmpl_meta, s, now_ns, stats_out)
        if ctrl[s, WIRE_HEAD] != wire_head_before:
            calls_with_news += 1
    stats_out[STAT_CANCEL_PASSES] += 1
    return calls_with_news


class PacerCore:
    """The step with its configuration, for the shell: ``tick(now_ns)``, ``cancels(now_ns)``.

    `arena` is anything with the arena's array attributes (an Arena, or a test's namespace of arrays).
    What a tick costs (over 200 active calls each releasing one frame, base64 + JSON from the call's
    templates straight into shared memory, a mark every fifth; with nothing to release) and what a cancel pass costs:
    bench/micro/bench_pacer.py. Compiling both steps cold takes ~8 s, loading them from numba's cache
    ~0.2 s: call ``tick`` once on start-up, before the first real tick.
    """

    __slots__ = ("_arrays", "stats", "lead_ns", "mark_every_frames", "max_burst_frames",
                 "start_hold_ns", "release_frames", "hold_clear_ns", "clips", "clip_frames", "model_silent_ns")

    def __init__(
        self,
        arena,
        *,
        lead_ms: int = DEFAULT_LEAD_MS,
        mark_every_frames: int = DEFAULT_MARK_EVERY_FRAMES,
        max_burst_frames: int = MAX_CATCH_UP_FRAMES,
        start_hold_ms: int = DEFAULT_START_HOLD_MS,
        release_frames: int = 1,
        model_silent_ms: int = DEFAULT_MODEL_SILENT_MS,
        clips: FallbackClips | None = None,
    ):
        if lead_ms < 1 or mark_every_frames < 0 or max_burst_frames < 1 or start_hold_ms < 0:
            raise ValueError("lead_ms and max_burst_frames must be >= 1, mark_every_frames and start_hold_ms >= 0")
        if release_frames < 1 or (release_frames - 1) * FRAME_NS >= lead_ms * 1_000_000:
            raise ValueError("release_frames must be >= 1 and leave the queue above zero: (release_frames - 1) * 20 < lead_ms")
        self._arrays = (arena.ctrl, arena.out_meta, arena.out_payload, arena.wire_len, arena.wire_data, arena.wire_tmpl,
                        arena.wire_tmpl_meta)
        self.stats = new_stats()
        self.lead_ns = lead_ms * 1_000_000
        self.mark_every_frames = mark_every_frames
        self.max_burst_frames = max_burst_frames
        self.start_hold_ns = start_hold_ms * 1_000_000
        self.release_frames = release_frames
        # A hold's end mark normally echoes once the carrier played the most it can hold (the lead plus
        # the release swing); a carrier still playing held audio one more frame after that is cleared.
        self.hold_clear_ns = self.lead_ns + release_frames * FRAME_NS
        clips = clips if clips is not None else load_clips()
        self.clips, self.clip_frames = codec_table(clips)
        self.model_silent_ns = model_silent_ms * 1_000_000

    def tick(self, now_ns: int, phase: int = 0, phases: int = 1) -> int:
        """The tick of the slots in ``phase`` of ``phases`` groups (slot % phases == phase); (0, 1): all."""
        ctrl, out_meta, out_payload, wire_len, wire_data, tmpl, tmpl_meta = self._arrays
        return pace_tick(
            ctrl,
            out_meta,
            out_payload,
            wire_len,
            wire_data,
            tmpl,
            tmpl_meta,
            now_ns,
            self.lead_ns,
            self.mark_every_frames,
            self.max_burst_frames,
            self.start_hold_ns,
            self.stats,
            phase,
            phases,
            self.release_frames,
            self.hold_clear_ns,
            self.clips,
            self.clip_frames,
            self.model_silent_ns,
        )

    def has_live_call(self) -> bool:
        return any_live_call(self._arrays[0])

    def cancels(self, now_ns: int) -> int:
        ctrl, _out_meta, _out_payload, wire_len, wire_data, tmpl, tmpl_meta = self._arrays
        return pace_cancels(ctrl, wire_len, wire_data, tmpl, tmpl_meta, now_ns, self.stats)

    def statistics(self) -> dict[str, int]:
        return {name: int(self.stats[i]) for i, name in enumerate(STAT_NAMES)}
