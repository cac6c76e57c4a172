"""The shared-memory arena file: creation, attach checks, layout, slot claim, and leaving nothing behind."""

from __future__ import annotations

import multiprocessing
import os
import stat

import numpy as np
import pytest

from external import missing_resource
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.wire import MAX_TEMPLATE_BYTES, RAW, WireTemplates
from voicecore.shm import control as C
from voicecore.shm.arena import (
    ALIGN_BYTES,
    HEADER_BYTES,
    MAGIC,
    NAME_PREFIX,
    TEMPLATE_CLEAR,
    TEMPLATE_FLAGS,
    TEMPLATE_MEDIA_PREFIX,
    WIRE_BINARY,
    WIRE_RAW,
    Arena,
    ArenaError,
    ArenaLayout,
)
from voicecore.carriers.twilio.stream import wire_templates

SMALL = ArenaLayout(max_calls=3, in_slots=8, out_slots=16, wire_slots=8, wire_slot_bytes=384)
STREAM_SID = "MZ" + "0123456789abcdef" * 2
CALL_SID = "CA" + "fedcba9876543210" * 2
TEMPLATES = wire_templates(STREAM_SID)


@pytest.fixture
def arena(tmp_path):
    a = Arena.create(SMALL, directory=str(tmp_path))
    yield a
    a.close()
    a.unlink()


def test_create_makes_a_0600_regular_file_with_an_unpredictable_name(tmp_path):
    a = Arena.create(SMALL, directory=str(tmp_path))
    b = Arena.create(SMALL, directory=str(tmp_path))
    try:
        assert a.name.startswith(NAME_PREFIX) and len(a.name) == len(NAME_PREFIX) + 16
        assert a.name != b.name
        st = os.stat(a.path)
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.geteuid()
        assert st.st_size == SMALL.size_bytes()
    finally:
        for x in (a, b):
            x.close()
            x.unlink()


def test_create_refuses_an_existing_name(tmp_path, arena):
    with pytest.raises(ArenaError, match="cannot create"):
        Arena.create(SMALL, directory=str(tmp_path), name=arena.name)


def test_create_refuses_a_planted_symlink(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"")
    os.symlink(target, tmp_path / "voicecore-planted")
    with pytest.raises(ArenaError):
        Arena.create(SMALL, directory=str(tmp_path), name="voicecore-planted")
    assert target.read_bytes() == b""


def test_layout_arrays_are_aligned_shaped_and_disjoint():
    layout = ArenaLayout(max_calls=5)
    spans = []
    for _name, dtype, shape, offset in layout.arrays():
        assert offset % ALIGN_BYTES == 0 and offset >= HEADER_BYTES
        spans.append((offset, offset + dtype.itemsize * int(np.prod(shape))))
    for (a0, a1), (b0, _b1) in zip(spans, spans[1:]):
        assert a1 <= b0
    assert spans[-1][1] <= layout.size_bytes()
    assert layout.size_bytes() % ALIGN_BYTES == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_calls": 0},
        {"max_calls": 1, "in_slots": 100},
        {"max_calls": 1, "out_slots": 2},
        {"max_calls": 1, "wire_slots": 0},
        {"max_calls": 1, "wire_slot_bytes": 200},
    ],
)
def test_layout_rejects_bad_numbers(kwargs):
    with pytest.raises(ValueError):
        ArenaLayout(**kwargs)


def test_views_have_the_documented_shapes(arena):
    m = SMALL.max_calls
    assert arena.ctrl.shape == (m, C.CONTROL_WORDS) and arena.ctrl.dtype == np.int64
    assert arena.sids.shape == (m, 64) and arena.call_sids.shape == (m, 64)
    assert arena.in_meta.shape == (m, 8, 2) and arena.in_payload.shape == (m, 8, 160)
    assert arena.out_meta.shape == (m, 16, 2) and arena.out_payload.shape == (m, 16, 160)
    assert arena.wire_len.shape == (m, 8) and arena.wire_len.dtype == np.int32
    assert arena.wire_data.shape == (m, 8, 384)
    assert arena.wire_tmpl.shape == (m, 5, MAX_TEMPLATE_BYTES) and arena.wire_tmpl.dtype == np.uint8
    assert arena.wire_tmpl_meta.shape == (m, 8) and arena.wire_tmpl_meta.dtype == np.int32
    for view in (arena.ctrl, arena.in_payload, arena.out_payload, arena.wire_data):
        assert view.flags.c_contiguous and view.flags.writeable
    assert not arena.ctrl.any() and not arena.out_payload.any()


def test_attach_sees_the_same_memory(tmp_path, arena):
    other = Arena.attach(arena.name, directory=str(tmp_path), layout=SMALL)
    try:
        assert other.layout == SMALL and not other.is_creator
        arena.ctrl[2, C.OUT_HEAD] = 12345
        arena.out_payload[1, 3, :] = 7
        assert other.ctrl[2, C.OUT_HEAD] == 12345
        assert (other.out_payload[1, 3] == 7).all()
        other.wire_len[0, 5] = 99
        assert arena.wire_len[0, 5] == 99
    finally:
        other.close()


def test_attach_reads_the_layout_from_the_header(tmp_path, arena):
    with Arena.attach(arena.name, directory=str(tmp_path)) as other:
        assert other.layout == SMALL
    assert os.path.exists(arena.path)  # an attacher's exit never unlinks


def test_attach_with_a_different_expected_layout_fails(tmp_path, arena):
    with pytest.raises(ArenaError, match="layout"):
        Arena.attach(arena.name, directory=str(tmp_path), layout=ArenaLayout(max_calls=4))


def test_attach_missing_file(tmp_path):
    with pytest.raises(ArenaError, match="no arena"):
        Arena.attach("voicecore-0000000000000000", directory=str(tmp_path))


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "", ".hidden", "x" * 300])
def test_attach_rejects_names_that_are_not_plain(tmp_path, name):
    with pytest.raises(ArenaError, match="invalid arena name"):
        Arena.attach(name, directory=str(tmp_path))


def test_attach_refuses_group_or_other_permissions(tmp_path, arena):
    os.chmod(arena.path, 0o640)
    with pytest.raises(ArenaError, match="mode 640"):
        Arena.attach(arena.name, directory=str(tmp_path))
    os.chmod(arena.path, 0o606)
    with pytest.raises(ArenaError, match="must be 0600"):
        Arena.attach(arena.name, directory=str(tmp_path))


def test_attach_refuses_another_owner(tmp_path, arena, monkeypatch):
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)
    with pytest.raises(ArenaError, match="owned by uid"):
        Arena.attach(arena.name, directory=str(tmp_path))


def test_attach_refuses_a_symlink(tmp_path, arena):
    os.symlink(arena.path, tmp_path / "voicecore-link")
    with pytest.raises(ArenaError, match="cannot open"):
        Arena.attach("voicecore-link", directory=str(tmp_path))


def test_attach_refuses_a_directory(tmp_path):
    os.mkdir(tmp_path / "voicecore-dir", 0o700)
    with pytest.raises(ArenaError):
        Arena.attach("voicecore-dir", directory=str(tmp_path))


def _foreign_file(tmp_path, content: bytes, name="voicecore-foreign") -> str:
    path = tmp_path / name
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.write(fd, content)
    os.close(fd)
    return name


def test_attach_refuses_bad_magic(tmp_path):
    name = _foreign_file(tmp_path, b"NOTARENA" + bytes(SMALL.size_bytes() - 8))
    with pytest.raises(ArenaError, match="bad magic"):
        Arena.attach(name, directory=str(tmp_path))


def test_attach_refuses_a_short_file(tmp_path):
    name = _foreign_file(tmp_path, MAGIC)
    with pytest.raises(ArenaError, match="too short"):
        Arena.attach(name, directory=str(tmp_path))


def _patched_copy(tmp_path, arena, word_index: int, value: int, name="voicecore-patched") -> str:
    raw = bytearray(open(arena.path, "rb").read())
    offset = 8 + 8 * word_index  # header: magic, then int64 words
    raw[offset : offset + 8] = value.to_bytes(8, "little", signed=True)
    return _foreign_file(tmp_path, bytes(raw), name)


@pytest.mark.parametrize(
    ("word_index", "value", "message"),
    [
        (0, 99, "version 99"),  # version
        (0, 1, "version 1"),  # an arena of a build whose pacer wrote Twilio's messages from the SIDs
        (4, C.CONTROL_WORDS + 1, "different control block"),  # control_words
        (5, 12, "invalid layout"),  # in_slots not a power of two
        (2, 4096, "header size"),  # size_bytes disagrees with the layout
        (11, 6, "wire templates"),  # template_pieces
        (12, 128, "wire templates"),  # template_bytes: a build with another MAX_TEMPLATE_BYTES
    ],
)
def test_attach_refuses_a_header_we_do_not_speak(tmp_path, arena, word_index, value, message):
    name = _patched_copy(tmp_path, arena, word_index, value)
    with pytest.raises(ArenaError, match=message):
        Arena.attach(name, directory=str(tmp_path))


def test_attach_refuses_a_file_of_the_wrong_size(tmp_path, arena):
    with open(arena.path, "ab") as f:
        f.write(b"\0" * 64)
    with pytest.raises(ArenaError, match="bytes, its header says"):
        Arena.attach(arena.name, directory=str(tmp_path))


def test_unlink_leaves_nothing_and_only_the_creator_may(tmp_path):
    a = Arena.create(SMALL, directory=str(tmp_path))
    b = Arena.attach(a.name, directory=str(tmp_path))
    with pytest.raises(ArenaError, match="only the process that created"):
        b.unlink()
    b.close()
    a.close()
    a.unlink()
    a.unlink()  # idempotent
    assert os.listdir(tmp_path) == []


def test_context_manager_of_the_creator_unlinks(tmp_path):
    with Arena.create(SMALL, directory=str(tmp_path)) as a:
        a.ctrl[0, 0] = 1
    assert a.closed
    assert os.listdir(tmp_path) == []


def test_unlink_does_not_remove_a_replacement(tmp_path):
    a = Arena.create(SMALL, directory=str(tmp_path))
    a.close()
    os.rename(a.path, tmp_path / "moved")  # keeps the inode alive, so the replacement gets another one
    _foreign_file(tmp_path, b"someone else's", name=a.name)
    with pytest.raises(ArenaError, match="no longer the arena"):
        a.unlink()
    assert os.path.exists(a.path)


def test_close_with_a_view_still_held_keeps_the_view_valid(tmp_path):
    a = Arena.create(SMALL, directory=str(tmp_path))
    ctrl = a.ctrl
    a.close()
    ctrl[0, 0] = 5  # still mapped: closing never leaves a dangling view
    assert ctrl[0, 0] == 5
    a.unlink()
    del ctrl
    assert os.listdir(tmp_path) == []


def test_call_ids_round_trip_and_are_validated(arena):
    arena.set_call_ids(1, STREAM_SID, CALL_SID)
    assert arena.stream_sid(1) == STREAM_SID and arena.call_sid(1) == CALL_SID
    assert arena.sids[1, len(STREAM_SID)] == 0
    arena.set_call_ids(1, "MZshort", "CAshort")
    assert arena.stream_sid(1) == "MZshort"
    for bad in ('MZ"}', "MZ\\x", "", "x" * 65, "MZ\u00e9", "MZ 1"):
        with pytest.raises(ValueError):
            arena.set_call_ids(1, bad, CALL_SID)
    with pytest.raises(IndexError):
        arena.stream_sid(SMALL.max_calls)


def test_claim_slot_zeroes_every_counter_and_bumps_the_generation(arena):
    arena.ctrl[2, :] = 77
    arena.ctrl[2, C.STATE] = C.SLOT_FREE
    arena.ctrl[2, C.GENERATION] = 4
    generation = arena.claim_slot(2, STREAM_SID, CALL_SID, TEMPLATES)
    assert generation == 5
    row = arena.ctrl[2]
    assert row[C.STATE] == C.SLOT_ACTIVE and row[C.GENERATION] == 5
    others = np.delete(row, [C.STATE, C.GENERATION])
    assert not others.any()
    assert arena.stream_sid(2) == STREAM_SID
    with pytest.raises(ValueError, match="not free"):
        arena.claim_slot(2, STREAM_SID, CALL_SID, TEMPLATES)
    arena.set_slot_state(2, C.SLOT_ENDING)
    arena.set_slot_state(2, C.SLOT_FREE)
    assert arena.claim_slot(2, "MZother", CALL_SID, wire_templates("MZother")) == 6


def test_claim_slot_writes_the_calls_own_lead_and_the_next_call_starts_without_it(arena):
    arena.claim_slot(2, STREAM_SID, CALL_SID, RAW, lead_ns=300_000_000)  # its carrier's (Exotel's chunks)
    assert arena.ctrl[2, C.LEAD_NS] == 300_000_000
    arena.set_slot_state(2, C.SLOT_FREE)
    arena.claim_slot(2, STREAM_SID, CALL_SID, TEMPLATES)
    assert arena.ctrl[2, C.LEAD_NS] == 0  # the pacer's configured lead
    arena.set_slot_state(2, C.SLOT_FREE)
    arena.ctrl[2, C.IN_HEAD] = 9
    for bad in (-1, 1, 19_999_999, 1_000_000_001, 0.3):
        with pytest.raises(ValueError, match="lead_ns"):
            arena.claim_slot(2, STREAM_SID, CALL_SID, TEMPLATES, lead_ns=bad)
    assert arena.ctrl[2, C.IN_HEAD] == 9 and arena.ctrl[2, C.STATE] == C.SLOT_FREE  # untouched


def test_claim_slot_writes_the_calls_backlog_bound_and_the_next_call_starts_without_it(arena):
    arena.claim_slot(2, STREAM_SID, CALL_SID, TEMPLATES, backlog_max_frames=20)  # its carrier's (Plivo's echoes)
    arena.ctrl[2, C.CARRIER_PLAYED_POS] = 7
    arena.ctrl[2, C.WIRE_FRAMES] = 9
    assert arena.ctrl[2, C.BACKLOG_MAX_FRAMES] == 20
    arena.set_slot_state(2, C.SLOT_FREE)
    arena.claim_slot(2, STREAM_SID, CALL_SID, TEMPLATES)
    row = arena.ctrl[2]
    assert row[C.BACKLOG_MAX_FRAMES] == row[C.CARRIER_PLAYED_POS] == row[C.WIRE_FRAMES] == 0  # no bound, counts from 0
    arena.set_slot_state(2, C.SLOT_FREE)
    for bad in (-1, 3001, 2.0):
        with pytest.raises(ValueError, match="backlog_max_frames"):
            arena.claim_slot(2, STREAM_SID, CALL_SID, TEMPLATES, backlog_max_frames=bad)
    assert arena.ctrl[2, C.STATE] == C.SLOT_FREE


def test_claim_slot_stamps_the_start_before_publishing_the_slot(arena, monkeypatch):
    """A model worker that sees a slot published reads its start's stamp to know how long to wait for the
    call's CallStarted: the stamp must be in the row when the state turns active, not written after."""
    import voicecore.shm.arena as arena_module

    seen = []
    real_release = arena_module.store_release

    def release(ctrl, slot, word, value):
        if word == C.STATE and value == C.SLOT_ACTIVE:
            seen.append(int(ctrl[slot, C.STARTED_AT_NS]))
        real_release(ctrl, slot, word, value)

    monkeypatch.setattr(arena_module, "store_release", release)
    arena.claim_slot(1, STREAM_SID, CALL_SID, TEMPLATES, started_at_ns=123_456_789)
    assert seen == [123_456_789] and arena.ctrl[1, C.STARTED_AT_NS] == 123_456_789
    arena.set_slot_state(1, C.SLOT_FREE)
    arena.claim_slot(1, STREAM_SID, CALL_SID, TEMPLATES)
    assert seen[-1] == 0  # no stamp given: none left over from the slot's last call
    arena.set_slot_state(1, C.SLOT_FREE)
    for bad in (-1, 1.5):
        with pytest.raises(ValueError, match="started_at_ns"):
            arena.claim_slot(1, STREAM_SID, CALL_SID, TEMPLATES, started_at_ns=bad)
    assert arena.ctrl[1, C.STATE] == C.SLOT_FREE


def test_claim_slot_with_a_bad_id_leaves_the_slot_untouched(arena):
    arena.ctrl[0, C.IN_HEAD] = 9
    with pytest.raises(ValueError):
        arena.claim_slot(0, STREAM_SID, 'CA"', TEMPLATES)
    assert arena.ctrl[0, C.IN_HEAD] == 9 and arena.ctrl[0, C.STATE] == C.SLOT_FREE


# --- wire templates: how the pacer writes each call's messages (voicecore/carriers/wire.py) ----------------


def test_claim_slot_writes_the_calls_templates_before_publishing_it(arena):
    arena.claim_slot(1, STREAM_SID, CALL_SID, TEMPLATES)
    assert arena.wire_templates(1) == TEMPLATES
    meta = arena.wire_tmpl_meta[1]
    assert meta[TEMPLATE_MEDIA_PREFIX] == len(TEMPLATES.media_prefix) and meta[TEMPLATE_CLEAR] == len(TEMPLATES.clear)
    assert meta[TEMPLATE_FLAGS] == 0
    # The next call in the slot, of another carrier: every piece replaced, nothing of the old one left over.
    arena.set_slot_state(1, C.SLOT_FREE)
    arena.claim_slot(1, "MZnext", CALL_SID, RAW)
    assert arena.wire_templates(1) == RAW and arena.wire_tmpl_meta[1, TEMPLATE_FLAGS] == WIRE_RAW
    assert not arena.wire_tmpl[1, TEMPLATE_MEDIA_PREFIX, 1:].any()
    binary = WireTemplates(b"<m>", b"</m>", b"<k>", b"</k>", b"<c/>", binary=True)
    arena.set_slot_state(1, C.SLOT_FREE)
    arena.claim_slot(1, "MZnext", CALL_SID, binary)
    assert arena.wire_templates(1) == binary and arena.wire_tmpl_meta[1, TEMPLATE_FLAGS] == WIRE_BINARY


def test_an_attacher_reads_the_templates_a_creator_wrote(tmp_path, arena):
    arena.set_wire_templates(0, TEMPLATES)
    with Arena.attach(arena.name, directory=str(tmp_path)) as other:
        assert other.wire_templates(0) == TEMPLATES


def test_templates_whose_entries_would_not_fit_a_wire_slot_are_refused_and_leave_the_slot_untouched(tmp_path, arena):
    # A Plivo stream id may be 128 characters: its playAudio head is then 231 bytes, and 231 + 216 + 3 > 384.
    long_id = plivo.wire_templates("p" * 128)
    arena.ctrl[0, C.IN_HEAD] = 9
    with pytest.raises(ValueError, match="wire slots hold 384"):
        arena.claim_slot(0, STREAM_SID, CALL_SID, long_id)
    assert arena.ctrl[0, C.IN_HEAD] == 9 and arena.ctrl[0, C.STATE] == C.SLOT_FREE
    assert not arena.wire_tmpl_meta[0].any()
    with pytest.raises(TypeError):
        arena.claim_slot(0, STREAM_SID, CALL_SID, None)
    with Arena.create(ArenaLayout(max_calls=1, in_slots=8, out_slots=8, wire_slots=8), directory=str(tmp_path)) as roomy:
        roomy.claim_slot(0, STREAM_SID, CALL_SID, long_id)  # 512-byte slots, the default: it fits
        assert roomy.wire_templates(0) == long_id


@pytest.mark.parametrize(
    "pieces",
    [
        dict(media_prefix=b"", mark_prefix=b"M", clear=b"C"),  # an empty head tells nothing apart
        dict(media_prefix=b"{", mark_prefix=b"{m", clear=b"C"),  # a mark would pass for media
        dict(media_prefix=b"A", mark_prefix=b"M", clear=b"Ma"),  # a clear would pass for a mark
        dict(media_prefix=b"x" * (MAX_TEMPLATE_BYTES + 1), mark_prefix=b"M", clear=b"C"),
    ],
)
def test_wire_templates_the_gateway_could_not_tell_apart_or_store_are_refused(pieces):
    with pytest.raises(ValueError):
        WireTemplates(media_suffix=b"", mark_suffix=b"", **pieces)
    with pytest.raises(ValueError, match="raw"):
        WireTemplates(b"A", b"", b"M", b"", b"C", binary=True, raw=True)


def test_closed_arena_refuses_helpers(tmp_path):
    a = Arena.create(SMALL, directory=str(tmp_path))
    a.close()
    a.close()  # idempotent
    with pytest.raises(ArenaError, match="closed"):
        a.set_call_ids(0, STREAM_SID, CALL_SID)
    a.unlink()


# --- a child process attaches and exits: the arena must survive (CPython issue 82300) -----------------


def _child_attach_and_exit(name: str, directory: str, slot: int) -> None:
    arena = Arena.attach(name, directory=directory)
    arena.ctrl[slot, C.MODEL_GENERATION] = int(arena.ctrl[slot, C.GENERATION])
    arena.close()


def _run_child(name: str, directory: str, slot: int) -> int:
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_child_attach_and_exit, args=(name, directory, slot))
    proc.start()
    proc.join(timeout=120)
    return proc.exitcode


def test_a_child_that_attaches_and_exits_does_not_remove_the_arena(tmp_path):
    with Arena.create(SMALL, directory=str(tmp_path)) as a:
        generation = a.claim_slot(1, STREAM_SID, CALL_SID, TEMPLATES)
        assert _run_child(a.name, str(tmp_path), 1) == 0
        assert os.path.exists(a.path)
        assert a.ctrl[1, C.MODEL_GENERATION] == generation
    assert os.listdir(tmp_path) == []


def test_real_dev_shm_round_trip_with_a_child_process():
    if not os.path.isdir("/dev/shm"):
        missing_resource("a /dev/shm directory (tmpfs)", "/dev/shm", "the arena's default home on Linux")
    with Arena.create(ArenaLayout(max_calls=2, in_slots=8, out_slots=8, wire_slots=8)) as a:
        assert a.path.startswith("/dev/shm/")
        assert stat.S_IMODE(os.stat(a.path).st_mode) == 0o600
        a.claim_slot(0, STREAM_SID, CALL_SID, TEMPLATES)
        assert _run_child(a.name, "/dev/shm", 0) == 0
        assert os.path.exists(a.path)
        assert a.ctrl[0, C.MODEL_GENERATION] == 1
    # This arena's name only: other arenas come and go in /dev/shm meanwhile (stacks of tests running beside
    # this one, other voicecore nodes of the machine), and this test made no other.
    assert a.name.startswith(NAME_PREFIX) and a.name not in os.listdir("/dev/shm")
