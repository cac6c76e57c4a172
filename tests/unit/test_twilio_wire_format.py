"""One home per wire format: what we send Twilio is ``voicecore/carriers/twilio/stream.py``'s bytes, and a mark's name
is ``voicecore/carriers/marks.py``'s rule, whoever writes or reads it.

The pacer writes its messages byte by byte into shared memory (no json.dumps on the hot path); these tests
run its real step over an arena in a tmp directory and compare every entry it wrote with
:class:`OutboundEncoder`'s bytes for the same message, for several stream SIDs, payloads and mark names.
"""

from __future__ import annotations

import ast
import binascii
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.shm import rings as R
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.sim import carrier_core
from voicecore.timing import FRAME_BYTES
from voicecore.carriers import marks
from voicecore.carriers.twilio import stream
from voicecore.carriers.marks import format_mark_name, parse_mark_name
from voicecore.carriers.twilio.stream import OutboundEncoder
from workers.gateway import core as gateway_core
from workers.pacer import core as pacer_core

ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000
CALL_SID = "CA" + "6" * 32
MARK_EVERY = 5

# The arena takes 1-64 characters of [A-Za-z0-9._:-]: a Twilio SID, the shortest, the longest, punctuation.
STREAM_SIDS = ["MZ" + "0123456789abcdef" * 2, "x", "A" * 64, "MZ.test-1:a_b"]
PAYLOADS = [
    bytes(FRAME_BYTES),
    b"\xff" * FRAME_BYTES,  # mu-law silence
    bytes(range(FRAME_BYTES)),
    b"\xfb\xef\xbe" * (FRAME_BYTES // 3) + b"\xff",  # base64 "++++" and "////"-like runs
    bytes((k * 97 + 13) % 256 for k in range(FRAME_BYTES)),
]


def _frame(k: int) -> bytes:
    return PAYLOADS[k % len(PAYLOADS)]


@pytest.fixture
def arena(tmp_path):
    arena = Arena.create(ArenaLayout(max_calls=len(STREAM_SIDS), in_slots=8, out_slots=64, wire_slots=64),
                         directory=str(tmp_path))
    yield arena
    arena.close()
    arena.unlink()


def _drain(arena, slot) -> list[bytes]:
    return [bytes(raw) for raw in R.wire_drain(arena.ctrl, arena.wire_len, arena.wire_data, slot, 1000)]


@pytest.mark.parametrize(
    "tag, first_index, frames",
    [
        (1, 0, 12),  # marks 1:5, 1:10, then 1:12:end
        (7, 0, 5),  # the end mark right behind a cadence mark: 7:5, 7:5:end
        (123_456_789, 99_994, 8),  # many digits: 123456789:99995, 123456789:100000, ...:100002:end
    ],
)
def test_the_pacers_bytes_are_the_encoders_for_every_message(arena, tag, first_index, frames):
    # Every slot holds a call with its own SID; one tick releases everything (a long lead, a big burst).
    pacer = pacer_core.PacerCore(arena, lead_ms=10_000, mark_every_frames=MARK_EVERY, max_burst_frames=64,
                                 start_hold_ms=0)
    for slot, sid in enumerate(STREAM_SIDS):
        arena.claim_slot(slot, sid, CALL_SID, stream.wire_templates(sid))
        R.tag_open(arena.ctrl, slot, tag, False)
        for k in range(frames):
            assert R.outbound_push(arena.ctrl, arena.out_meta, arena.out_payload, slot, tag, first_index + k,
                                   _frame(k))
        assert R.outbound_push_end(arena.ctrl, arena.out_meta, slot, tag, first_index + frames)
    pacer.tick(0)

    # A second response, cut by a barge-in: its frames, then the clear.
    cut_tag = tag + 1
    for slot in range(len(STREAM_SIDS)):
        R.tag_open(arena.ctrl, slot, cut_tag, False)
        for k in range(3):
            assert R.outbound_push(arena.ctrl, arena.out_meta, arena.out_payload, slot, cut_tag, k,
                                   _frame(k + 1))
    pacer.tick(20 * MS)
    for slot in range(len(STREAM_SIDS)):
        R.tag_cancel(arena.ctrl, slot, cut_tag, 30 * MS)
    pacer.cancels(30 * MS)

    for slot, sid in enumerate(STREAM_SIDS):
        encoder = OutboundEncoder(sid)
        expected = []
        for k in range(frames):
            expected.append(encoder.media(_frame(k)))
            frames_through = first_index + k + 1
            if frames_through % MARK_EVERY == 0:
                expected.append(encoder.mark(format_mark_name(tag, frames_through)))
        expected.append(encoder.mark(format_mark_name(tag, first_index + frames, end=True)))
        expected += [encoder.media(_frame(k + 1)) for k in range(3)]
        expected.append(encoder.clear())
        assert _drain(arena, slot) == expected, sid


# --- the stream module's pieces ---------------------------------------------------------------------


@pytest.mark.parametrize("sid", STREAM_SIDS)
def test_the_encoder_is_built_from_the_modules_pieces(sid):
    encoder = OutboundEncoder(sid)
    raw_sid = sid.encode()
    payload = bytes(range(FRAME_BYTES))
    assert encoder.media(payload) == (stream.MEDIA_HEAD + raw_sid + stream.MEDIA_AFTER_SID
                                      + binascii.b2a_base64(payload, newline=False) + stream.MEDIA_TAIL)
    name = format_mark_name(3, 10, end=True)
    assert encoder.mark(name) == (stream.MARK_HEAD + raw_sid + stream.MARK_AFTER_SID + b'"' + name.encode() + b'"'
                                  + stream.MARK_TAIL)
    assert encoder.clear() == stream.CLEAR_HEAD + raw_sid + stream.CLEAR_TAIL
    # Each message starts with its own head and no other: the gateway tells them apart by it.
    heads = {"media": stream.MEDIA_HEAD, "mark": stream.MARK_HEAD, "clear": stream.CLEAR_HEAD}
    for kind, message in (("media", encoder.media(payload)), ("mark", encoder.mark(name)), ("clear", encoder.clear())):
        assert [k for k, head in heads.items() if message.startswith(head)] == [kind]


@pytest.mark.parametrize("sid", STREAM_SIDS)
def test_the_wire_templates_are_the_encoders_bytes(sid):
    # What the gateway puts in the arena for a Twilio call (and tells the entries apart by): the encoder's.
    encoder = OutboundEncoder(sid)
    templates = stream.wire_templates(sid)
    assert templates == encoder.wire_templates() and not templates.raw and not templates.binary
    payload = bytes(range(FRAME_BYTES))
    assert templates.media_prefix + binascii.b2a_base64(payload, newline=False) + templates.media_suffix == encoder.media(payload)
    name = format_mark_name(123_456_789, 100_002, end=True)
    assert templates.mark_prefix + name.encode() + templates.mark_suffix == encoder.mark(name)
    assert templates.clear == encoder.clear()
    assert templates.media_prefix.startswith(stream.MEDIA_HEAD) and templates.mark_prefix.startswith(stream.MARK_HEAD)


# --- mark names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, parsed",
    [
        ("3:5", (3, 5, False)),
        ("3:10", (3, 10, False)),
        ("3:10:end", (3, 10, True)),
        ("3:12:end", (3, 12, True)),
        ("12:0", (12, 0, False)),
        ("", None),
        ("3", None),
        ("0:5", None),  # tags start at 1
        ("x:5", None),
        ("a:1", None),
        ("3:x", None),
        ("3:5:done", None),
        ("3:1:fin", None),
        ("3:5:end:x", None),
        ("3:1:end:x", None),
        ("-1:5", None),
        ("-1:2", None),
        ("+1:2", None),
        (" 1:2", None),
        ("３:5", None),  # a full-width digit: str.isdigit() says yes, the rule says ASCII
        ("²:5", None),  # a superscript: isdigit() yes, int() would raise
        ("1:²", None),
    ],
)
def test_parse_mark_name(name, parsed):
    assert parse_mark_name(name) == parsed


@given(st.integers(1, 10**18 - 1), st.integers(0, 10**18 - 1), st.booleans())
def test_format_and_parse_round_trip(tag, frames, end):
    name = format_mark_name(tag, frames, end)
    assert parse_mark_name(name) == (tag, frames, end)
    # The shape the carrier's fast path accepts, and a JSON string body needing no escapes.
    assert marks.PLAIN_NAME_BYTES.fullmatch(name.encode("ascii"))
    assert OutboundEncoder("MZ" + "0" * 32).mark(name).endswith(b'"' + name.encode() + b'"' + stream.MARK_TAIL)


@pytest.mark.parametrize("tag, frames", [(0, 5), (-1, 5), (1, -1)])
def test_format_refuses_a_name_that_could_not_be_parsed_back(tag, frames):
    with pytest.raises(ValueError):
        format_mark_name(tag, frames)


def test_the_gateway_and_the_carrier_read_marks_by_the_one_rule():
    assert gateway_core.parse_mark_name is marks.parse_mark_name
    assert carrier_core.parse_mark_name is marks.parse_mark_name
    ledger = gateway_core.MarkLedger()
    for name in (format_mark_name(9, 5), format_mark_name(9, 7, end=True), "0:5"):
        ledger.sent_mark(name)
    assert ledger.echoed(format_mark_name(9, 5)) == gateway_core.MarkPlayed(9, 5, False)
    assert ledger.echoed(format_mark_name(9, 7, end=True)) == gateway_core.MarkPlayed(9, 7, True)
    assert ledger.echoed("0:5") == gateway_core.MarkUnknown("0:5")

    sid = "MZ" + "0" * 32
    call = carrier_core.CarrierCall(CALL_SID, sid, "AC" + "2" * 32, "tok", b"", 4)
    call.opening_messages()
    encoder = OutboundEncoder(sid)
    for k in range(3):
        assert call.receive_fast(encoder.media(_frame(k)), 0.0)
    assert call.receive_fast(encoder.mark(format_mark_name(9, 3, end=True)), 0.0)
    assert [frame.tag for frame in call.frames] == [9, 9, 9]
    assert call.statistics().mark_count_mismatches == 0


def test_no_module_keeps_its_own_mark_parser():
    # The rule lives in voicecore/carriers/marks.py only: no other parse_mark_name, no other ":end" literal.
    own = ROOT / "voicecore" / "carriers" / "marks.py"
    offenders = []
    for folder in ("voicecore", "workers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == own:
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name == "parse_mark_name":
                    offenders.append(f"{path.relative_to(ROOT)}: def parse_mark_name")
                elif isinstance(node, ast.Constant) and node.value in (":end", b":end"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert offenders == []
