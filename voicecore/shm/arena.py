"""The shared-memory arena: one file per gateway holding every call slot's control block and rings.

Owns the file (create, attach, checks, unlink), its header and the layout of the arrays inside it, and
the gateway's slot-claim protocol. Knows nothing of what the words mean beyond control.py, nor of calls,
sockets or timing; the ring operations live in rings.py and take the arrays this module exposes.

Layout: a 128-byte header at offset 0 (magic, version, the layout numbers), then one numpy array per
kind, each 64-byte aligned, indexed by call slot first, so one numba call can walk every call:

    ctrl        int64 [max_calls, CONTROL_WORDS]           control block (control.py)
    sids        uint8 [max_calls, 64]                      stream_sid, ASCII, NUL padded
    call_sids   uint8 [max_calls, 64]                      call_sid, ASCII, NUL padded
    wire_tmpl_meta int32 [max_calls, 8]                    the 5 templates' lengths, then WIRE_FLAGS
    wire_tmpl   uint8 [max_calls, 5, MAX_TEMPLATE_BYTES]   the call's wire templates (voicecore/carriers/wire.py)
    in_meta     int64 [max_calls, in_slots, 2]             (sequence number, timestamp_ms)
    in_payload  uint8 [max_calls, in_slots, 160]
    out_meta    int64 [max_calls, out_slots, 2]            (tag, frame index); END: index = -1 - total
    out_payload uint8 [max_calls, out_slots, 160]
    wire_len    int32 [max_calls, wire_slots]
    wire_data   uint8 [max_calls, wire_slots, wire_slot_bytes]

Why a plain file and mmap, not ``multiprocessing.shared_memory``: on Python 3.11 a process that merely
*attaches* to a ``SharedMemory`` registers it with its resource tracker, which unlinks the segment when
that process exits (CPython issue 82300; ``track=False`` arrives only in 3.13). A restarted model worker
or pacer would then delete the gateway's arena under every live call. A file we open and mmap ourselves
has no tracker: only ``Arena.unlink()`` by the creator removes it (docs/explanation/architecture.md#section-4).

Security (the same section): the creator makes the file with O_CREAT|O_EXCL|O_NOFOLLOW, mode
0600, under an unpredictable name (``voicecore-`` + 16 hex digits), so no other user can pre-create,
redirect or read it. Attachers open it O_NOFOLLOW and refuse it unless it is a regular file owned by
their effective uid with no group/other permission bits, and its header matches.

The creator reserves the whole file with posix_fallocate: on tmpfs a sparse file whose pages cannot be
backed later (a full /dev/shm) kills the writing process with SIGBUS mid-call; reserving up front turns
that into an ArenaError at start-up.

Slot claim protocol (the only place where one process writes words other processes own): while a slot
is SLOT_FREE nobody else writes it, so the gateway zeroes the whole row except GENERATION, writes the
call ids and the call's wire templates (how the pacer writes this call's media, marks and clear: its
carrier module's, voicecore/carriers/wire.py), its lead (LEAD_NS), backlog bound (BACKLOG_MAX_FRAMES) and codec (CODEC), bumps GENERATION and publishes
STATE = SLOT_ACTIVE last (release). The templates live only here, so a restarted or standby pacer writes the right bytes for
every live call from shared memory alone. Every counter therefore
starts at 0 for a new call: the model worker's first frame goes to outbound index 0 and the pacer's
OUT_TAIL starts there too; the pacer re-initialises its own per-call words when it sees PACER_GENERATION
differ from GENERATION. A freed slot should stay free for a while (the gateway picks the longest-free
slot) so a worker still finishing a tick on the old call cannot write into the new one.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import re
import secrets
import stat
import struct

import numpy as np

from voicecore.carriers.wire import MAX_MARK_NAME_BYTES, MAX_TEMPLATE_BYTES, WireTemplates
from voicecore.errors import DependencyError
from voicecore.shm.control import (
    BACKLOG_MAX_FRAMES,
    CODEC,
    CODEC_ALAW,
    CODEC_ULAW,
    CONTROL_WORDS,
    GENERATION,
    LEAD_NS,
    SLOT_ACTIVE,
    SLOT_FREE,
    STARTED_AT_NS,
    STATE,
)
from voicecore.shm.rings import store_release
from voicecore.timing import FRAME_BYTES, FRAME_NS

MAGIC = b"VCARENA\x00"
# 2: per-call wire templates (the pacer no longer builds Twilio's messages from the SIDs); 3: a per-call lead
# (control word LEAD_NS, read by the pacer: an older pacer would ignore it and starve an Exotel call); 4: a
# per-call bound on the carrier's unplayed backlog (BACKLOG_MAX_FRAMES, CARRIER_PLAYED_POS, WIRE_FRAMES: an older
# pacer would ignore it and fill Plivo's buffer by time alone); 5: a per-call codec (CODEC: an A-law call's rings
# carry A-law, and an older pacer would play it mu-law fallback lines)
VERSION = 5
HEADER_BYTES = 128
ALIGN_BYTES = 64
SID_BYTES = 64
NAME_PREFIX = "voicecore-"
# The longest Twilio wire message is a media message: 30 + 64 (sid) + 23 + 216 (base64) + 3 = 336 bytes.
# Another carrier's templates must fit the arena's wire_slot_bytes (checked when they are written).
MIN_WIRE_SLOT_BYTES = 384
# The longest per-call lead (LEAD_NS) a slot may ask for: the wire ring must hold it, its marks and a burst.
MAX_LEAD_NS = 1_000_000_000
# The largest per-call backlog bound (BACKLOG_MAX_FRAMES): 60 s, beyond any carrier's buffer.
MAX_BACKLOG_FRAMES = 3000

# The per-call wire templates: wire_tmpl[slot, piece] holds wire_tmpl_meta[slot, piece] bytes of each piece;
# wire_tmpl_meta[slot, TEMPLATE_FLAGS] the WIRE_* bits.
TEMPLATE_MEDIA_PREFIX = 0
TEMPLATE_MEDIA_SUFFIX = 1
TEMPLATE_MARK_PREFIX = 2
TEMPLATE_MARK_SUFFIX = 3
TEMPLATE_CLEAR = 4
TEMPLATE_PIECES = 5
TEMPLATE_FLAGS = 5
TEMPLATE_META_WORDS = 8
WIRE_RAW = 1  # the pacer writes raw entries (RAW_MEDIA + the 160 mu-law bytes ...): the carrier edge finishes them
WIRE_BINARY = 2  # final entries go out as binary WebSocket frames
_PIECE_NAMES = ("media_prefix", "media_suffix", "mark_prefix", "mark_suffix", "clear")
_B64_FRAME_CHARS = (FRAME_BYTES + 2) // 3 * 4

# magic, then int64: version, header_bytes, size_bytes, max_calls, control_words, in_slots, out_slots,
# wire_slots, wire_slot_bytes, frame_bytes, sid_bytes, template_pieces, template_bytes
_HEADER = struct.Struct("<8s13q")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
_SID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class ArenaError(DependencyError, RuntimeError):
    """The arena file is missing, foreign, unsafe, or not the layout we expect."""


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _align(offset: int) -> int:
    return (offset + ALIGN_BYTES - 1) // ALIGN_BYTES * ALIGN_BYTES


@dataclasses.dataclass(frozen=True, slots=True)
class ArenaLayout:
    """How many call slots and ring slots the arena holds; every process must agree on it."""

    max_calls: int
    in_slots: int = 256  # 5.1 s of caller audio
    out_slots: int = 2048  # 41 s of model audio (the model produces faster than real time)
    wire_slots: int = 128  # 2.5 s of frames plus their marks waiting for the gateway
    wire_slot_bytes: int = 512

    def __post_init__(self) -> None:
        if self.max_calls < 1:
            raise ValueError("max_calls must be at least 1")
        for name in ("in_slots", "out_slots", "wire_slots"):
            value = getattr(self, name)
            if not _is_power_of_two(value) or value < 4:
                raise ValueError(f"{name} must be a power of two >= 4, got {value}")
        if self.wire_slot_bytes < MIN_WIRE_SLOT_BYTES:
            raise ValueError(f"wire_slot_bytes must be at least {MIN_WIRE_SLOT_BYTES}")

    def arrays(self) -> tuple[tuple[str, np.dtype, tuple[int, ...], int], ...]:
        """(name, dtype, shape, offset_bytes) of every array, in file order."""
        m = self.max_calls
        specs = (
            ("ctrl", np.dtype(np.int64), (m, CONTROL_WORDS)),
            ("sids", np.dtype(np.uint8), (m, SID_BYTES)),
            ("call_sids", np.dtype(np.uint8), (m, SID_BYTES)),
            ("wire_tmpl_meta", np.dtype(np.int32), (m, TEMPLATE_META_WORDS)),
            ("wire_tmpl", np.dtype(np.uint8), (m, TEMPLATE_PIECES, MAX_TEMPLATE_BYTES)),
            ("in_meta", np.dtype(np.int64), (m, self.in_slots, 2)),
            ("in_payload", np.dtype(np.uint8), (m, self.in_slots, FRAME_BYTES)),
            ("out_meta", np.dtype(np.int64), (m, self.out_slots, 2)),
            ("out_payload", np.dtype(np.uint8), (m, self.out_slots, FRAME_BYTES)),
            ("wire_len", np.dtype(np.int32), (m, self.wire_slots)),
            ("wire_data", np.dtype(np.uint8), (m, self.wire_slots, self.wire_slot_bytes)),
        )
        out = []
        offset = HEADER_BYTES
        for name, dtype, shape in specs:
            offset = _align(offset)
            out.append((name, dtype, shape, offset))
            offset += dtype.itemsize * int(np.prod(shape))
        return tuple(out)

    def size_bytes(self) -> int:
        name, dtype, shape, offset = self.arrays()[-1]
        return _align(offset + dtype.itemsize * int(np.prod(shape)))


def _encode_id(value: str, what: str) -> bytes:
    # Ids end up inside JSON text the pacer builds byte by byte: allow no quote, backslash or control
    # character, so no escaping is ever needed (Twilio SIDs are letters and digits:
    # docs/explanation/protocols.md#a2).
    if not isinstance(value, str) or _SID_RE.fullmatch(value) is None:
        raise ValueError(f"{what} must be 1-64 characters of [A-Za-z0-9._:-]")
    return value.encode("ascii")


class Arena:
    """An open arena: the numpy views over the mapped file. Create once (gateway), attach elsewhere."""

    ctrl: np.ndarray
    sids: np.ndarray
    call_sids: np.ndarray
    wire_tmpl_meta: np.ndarray
    wire_tmpl: np.ndarray
    in_meta: np.ndarray
    in_payload: np.ndarray
    out_meta: np.ndarray
    out_payload: np.ndarray
    wire_len: np.ndarray
    wire_data: np.ndarray

    def __init__(self, layout: ArenaLayout, path: str, mm: mmap.mmap, stat_key: tuple[int, int], creator: bool):
        self.layout = layout
        self.path = path
        self.name = os.path.basename(path)
        self.is_creator = creator
        self._mm: mmap.mmap | None = mm
        self._stat_key = stat_key  # (st_dev, st_ino): unlink only the file we created
        self._unlinked = False
        for name, dtype, shape, offset in layout.arrays():
            count = int(np.prod(shape))
            view = np.frombuffer(mm, dtype=dtype, count=count, offset=offset).reshape(shape)
            setattr(self, name, view)

    # --- lifecycle --------------------------------------------------------------------------------------

    @classmethod
    def create(cls, layout: ArenaLayout, directory: str = "/dev/shm", name: str | None = None) -> Arena:
        """Create a new arena file (0600, exclusive) in `directory`, zeroed, header written last."""
        if name is None:
            name = NAME_PREFIX + secrets.token_hex(8)
        path = _path(directory, name)
        size = layout.size_bytes()
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ArenaError(f"cannot create arena {path!r}: {exc.strerror}") from exc
        try:
            os.fchmod(fd, 0o600)  # the umask may only remove bits; make the mode exact anyway
            os.ftruncate(fd, size)
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                raise ArenaError(f"cannot reserve {size} bytes for arena {path!r}: {exc.strerror}") from exc
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)  # the mapping keeps the file alive; no descriptor to leak into children
        header = _HEADER.pack(
            MAGIC,
            VERSION,
            HEADER_BYTES,
            size,
            layout.max_calls,
            CONTROL_WORDS,
            layout.in_slots,
            layout.out_slots,
            layout.wire_slots,
            layout.wire_slot_bytes,
            FRAME_BYTES,
            SID_BYTES,
            TEMPLATE_PIECES,
            MAX_TEMPLATE_BYTES,
        )
        # Everything but the magic first, the magic last: an attacher racing the creator sees no magic
        # and refuses, rather than trusting half a header.
        mm[8 : _HEADER.size] = header[8:]
        mm[0:8] = MAGIC
        return cls(layout, path, mm, (st.st_dev, st.st_ino), creator=True)

    @classmethod
    def attach(cls, name: str, directory: str = "/dev/shm", layout: ArenaLayout | None = None) -> Arena:
        """Open an existing arena; checks owner, mode, file type, magic, version and layout.

        layout: when given, the file's layout must equal it. Never unlinks anything, at exit or ever.
        """
        path = _path(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise ArenaError(f"no arena {path!r}") from exc
        except OSError as exc:  # ELOOP: a symlink planted in its place
            raise ArenaError(f"cannot open arena {path!r}: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ArenaError(f"arena {path!r} is not a regular file")
            if st.st_uid != os.geteuid():
                raise ArenaError(f"arena {path!r} is owned by uid {st.st_uid}, not by us ({os.geteuid()})")
            if st.st_mode & 0o077:
                raise ArenaError(f"arena {path!r} has mode {stat.S_IMODE(st.st_mode):o}; must be 0600")
            raw = os.pread(fd, _HEADER.size, 0)
            found = _parse_header(raw, path)
            if layout is not None and found != layout:
                raise ArenaError(f"arena {path!r} has layout {found}, expected {layout}")
            size = found.size_bytes()
            if st.st_size != size:
                raise ArenaError(f"arena {path!r} is {st.st_size} bytes, its header says {size}")
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return cls(found, path, mm, (st.st_dev, st.st_ino), creator=False)

    @classmethod
    def anonymous(cls, layout: ArenaLayout) -> Arena:
        """A private arena in anonymous memory with the same arrays, shared with no one: a standby process
        warms its compiled kernels up on it (their types are the live arena's) without writing a live one."""
        mm = mmap.mmap(-1, layout.size_bytes(), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return cls(layout, "<anonymous>", mm, None, creator=False)

    def close(self) -> None:
        """Drop this process's views and mapping. The file stays (see unlink)."""
        mm = self._mm
        if mm is None:
            return
        self._mm = None
        for name, _dtype, _shape, _offset in self.layout.arrays():
            setattr(self, name, None)
        try:
            mm.close()
        except BufferError:
            # A caller still holds a numpy view: the mapping is released when the last view goes away.
            # Closing it now would leave that view pointing at unmapped memory, so we let it be.
            pass

    def unlink(self) -> None:
        """Creator only: remove the file (idempotent). Processes that have it mapped keep their mapping."""
        if not self.is_creator:
            raise ArenaError("only the process that created the arena may unlink it")
        if self._unlinked:
            return
        self._unlinked = True
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) != self._stat_key:
            raise ArenaError(f"{self.path!r} is no longer the arena we created; not removing it")
        os.unlink(self.path)

    @property
    def closed(self) -> bool:
        return self._mm is None

    def __enter__(self) -> Arena:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
        if self.is_creator:
            self.unlink()

    # --- call ids and slot claim (gateway) --------------------------------------------------------------

    def set_call_ids(self, slot: int, stream_sid: str, call_sid: str) -> None:
        """Write the call's ids, NUL padded. Only while the slot is free (claim_slot does it for you)."""
        self._check_slot(slot)
        for array, value, what in ((self.sids, stream_sid, "stream_sid"), (self.call_sids, call_sid, "call_sid")):
            raw = _encode_id(value, what)
            array[slot, :] = 0
            array[slot, : len(raw)] = np.frombuffer(raw, dtype=np.uint8)

    def stream_sid(self, slot: int) -> str:
        self._check_slot(slot)
        return _decode_id(self.sids[slot])

    def call_sid(self, slot: int) -> str:
        self._check_slot(slot)
        return _decode_id(self.call_sids[slot])

    def set_wire_templates(self, slot: int, templates: WireTemplates) -> None:
        """Write how the pacer writes this call's messages. Only while the slot is free (claim_slot does it
        for you): the pacer reads them without a lock. Every piece is written, then its length, the flags
        last; STATE = SLOT_ACTIVE (claim_slot) publishes them."""
        self._check_slot(slot)
        self._check_wire_templates(templates)
        meta = self.wire_tmpl_meta[slot]
        tmpl = self.wire_tmpl[slot]
        for piece, name in enumerate(_PIECE_NAMES):
            raw = getattr(templates, name)
            tmpl[piece, :] = 0
            tmpl[piece, : len(raw)] = np.frombuffer(raw, dtype=np.uint8)
            meta[piece] = len(raw)
        meta[TEMPLATE_PIECES:] = 0
        meta[TEMPLATE_FLAGS] = (WIRE_RAW if templates.raw else 0) | (WIRE_BINARY if templates.binary else 0)

    def wire_templates(self, slot: int) -> WireTemplates:
        """The slot's wire templates as written (tests, tools)."""
        self._check_slot(slot)
        meta = self.wire_tmpl_meta[slot]
        pieces = {name: self.wire_tmpl[slot, piece, : int(meta[piece])].tobytes() for piece, name in enumerate(_PIECE_NAMES)}
        flags = int(meta[TEMPLATE_FLAGS])
        return WireTemplates(**pieces, binary=bool(flags & WIRE_BINARY), raw=bool(flags & WIRE_RAW))

    def _check_wire_templates(self, templates: WireTemplates) -> None:
        # The pacer writes byte by byte without bounds checks: the longest entry of each kind must fit a slot.
        if not isinstance(templates, WireTemplates):
            raise TypeError("templates must be a voicecore.carriers.wire.WireTemplates")
        body = FRAME_BYTES if templates.raw else _B64_FRAME_CHARS
        longest = max(
            len(templates.media_prefix) + body + len(templates.media_suffix),
            len(templates.mark_prefix) + MAX_MARK_NAME_BYTES + len(templates.mark_suffix),
            len(templates.clear),
        )
        if longest > self.layout.wire_slot_bytes:
            raise ValueError(f"wire templates make {longest}-byte entries; wire slots hold {self.layout.wire_slot_bytes}")

    def claim_slot(self, slot: int, stream_sid: str, call_sid: str, templates: WireTemplates, lead_ns: int = 0,
                   backlog_max_frames: int = 0, codec: int = CODEC_ULAW, started_at_ns: int = 0) -> int:
        """Gateway: take a free slot for a new call whose outbound messages the pacer writes from `templates`
        (its carrier module's), keeping `lead_ns` of audio in the carrier's buffer (0: the pacer's configured
        lead; control word LEAD_NS) and at most `backlog_max_frames` of it unconfirmed by the carrier's echoes
        (0: no such bound; BACKLOG_MAX_FRAMES), its rings carrying `codec` (CODEC_ULAW or CODEC_ALAW; control
        word CODEC), stamped `started_at_ns` (control word STARTED_AT_NS, time.monotonic_ns(): a model worker
        waits up to a bound after it for the call's CallStarted, so it must be there when the slot is published);
        returns its new GENERATION (see module docstring)."""
        self._check_slot(slot)
        row = self.ctrl[slot]
        if row[STATE] != SLOT_FREE:
            raise ValueError(f"slot {slot} is not free")
        # Validate the ids and the templates before touching anything, so bad ones leave the slot as it was.
        _encode_id(stream_sid, "stream_sid")
        _encode_id(call_sid, "call_sid")
        self._check_wire_templates(templates)
        if not isinstance(lead_ns, int) or not (lead_ns == 0 or FRAME_NS <= lead_ns <= MAX_LEAD_NS):
            raise ValueError(f"lead_ns must be 0 or {FRAME_NS}..{MAX_LEAD_NS}")
        if not isinstance(backlog_max_frames, int) or not 0 <= backlog_max_frames <= MAX_BACKLOG_FRAMES:
            raise ValueError(f"backlog_max_frames must be 0..{MAX_BACKLOG_FRAMES}")
        if codec not in (CODEC_ULAW, CODEC_ALAW):
            raise ValueError("codec must be CODEC_ULAW or CODEC_ALAW")
        if not isinstance(started_at_ns, int) or started_at_ns < 0:
            raise ValueError("started_at_ns must be an int >= 0")
        generation = int(row[GENERATION]) + 1
        row[:GENERATION] = 0
        row[GENERATION + 1 :] = 0
        self.set_call_ids(slot, stream_sid, call_sid)
        self.set_wire_templates(slot, templates)
        row[LEAD_NS] = lead_ns
        row[BACKLOG_MAX_FRAMES] = backlog_max_frames
        row[CODEC] = codec
        row[STARTED_AT_NS] = started_at_ns
        row[GENERATION] = generation
        store_release(self.ctrl, slot, STATE, SLOT_ACTIVE)  # publishes the zeroed row, the ids, the templates, the bounds
        return generation

    def set_slot_state(self, slot: int, state: int) -> None:
        """Gateway: SLOT_ENDING when the call is ending, SLOT_FREE when nothing may touch it any more."""
        self._check_slot(slot)
        store_release(self.ctrl, slot, STATE, state)

    def _check_slot(self, slot: int) -> None:
        if self._mm is None:
            raise ArenaError("arena is closed")
        if not 0 <= slot < self.layout.max_calls:
            raise IndexError(f"call slot {slot} out of range")


def _decode_id(raw: np.ndarray) -> str:
    return raw.tobytes().split(b"\x00", 1)[0].decode("ascii", errors="replace")


def _path(directory: str, name: str) -> str:
    if _NAME_RE.fullmatch(name) is None:
        raise ArenaError(f"invalid arena name {name!r}")
    return os.path.join(directory, name)


def _parse_header(raw: bytes, path: str) -> ArenaLayout:
    if len(raw) < _HEADER.size:
        raise ArenaError(f"arena {path!r} is too short to hold a header")
    (
        magic,
        version,
        header_bytes,
        size,
        max_calls,
        control_words,
        in_slots,
        out_slots,
        wire_slots,
        wire_slot_bytes,
        frame_bytes,
        sid_bytes,
        template_pieces,
        template_bytes,
    ) = _HEADER.unpack(raw)
    if magic != MAGIC:
        raise ArenaError(f"{path!r} is not a voicecore arena (bad magic)")
    if version != VERSION:
        raise ArenaError(f"arena {path!r} has version {version}, we speak {VERSION}")
    if (header_bytes, control_words, frame_bytes, sid_bytes, template_pieces, template_bytes) != (
        HEADER_BYTES, CONTROL_WORDS, FRAME_BYTES, SID_BYTES, TEMPLATE_PIECES, MAX_TEMPLATE_BYTES
    ):
        raise ArenaError(f"arena {path!r} was made by a build with a different control block, header or wire templates")
    try:
        layout = ArenaLayout(max_calls, in_slots, out_slots, wire_slots, wire_slot_bytes)
    except ValueError as exc:
        raise ArenaError(f"arena {path!r} has an invalid layout: {exc}") from exc
    if size != layout.size_bytes():
        raise ArenaError(f"arena {path!r} header size {size} does not match its layout")
    return layout
