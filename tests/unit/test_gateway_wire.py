"""The gateway's wire drain (workers/gateway/main.py StreamConnection.drain_wire, every carrier's) over what the real pacer
wrote from each call's templates: final entries go out as they are, one WebSocket text frame each (binary
when the templates say so), the marks and clears are told apart by the call's own templates (the mark
ledger gets the names, clears are counted), and raw entries go to the connection's carrier edge instead."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

import pytest
from test_pacer_core import PACER_ENTRIES_MARKS, pacer_wire_entries

from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.wire import RAW, RAW_MEDIA, WireTemplates
from voicecore.shm import control as C
from voicecore.shm import rings as R
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.stats import LatencyLog
from voicecore.carriers.twilio.stream import wire_templates
from workers.gateway.core import MarkDiscarded
from workers.gateway.main import StreamConnection

SID = "MZ" + "5" * 32


class FakeTransport:
    def __init__(self):
        self.written = b""
        self.is_close_frame_sent = False
        self.is_disconnected = False
        self.closes = []
        self.underlying_transport = self

    def write(self, data):
        self.written += data

    def get_write_buffer_size(self):
        return 0

    def send_close(self, code, reason=b""):
        self.is_close_frame_sent = True
        self.closes.append(code)

    def disconnect(self, graceful=True):
        self.is_disconnected = True


def frames_of(data: bytes) -> list[tuple[int, bytes]]:
    """(first header byte, payload) of each unmasked frame in data."""
    out = []
    while data:
        first, length, at = data[0], data[1] & 0x7F, 2
        if length == 126:
            length, at = int.from_bytes(data[2:4], "big"), 4
        out.append((first, data[at:at + length]))
        data = data[at + length:]
    return out


class Edge(StreamConnection):
    def carrier_edge(self, entry):
        self.edge_entries.append(entry)


def drained(tmp_path, templates, connection=StreamConnection):
    """The real pacer's entries of one call with `templates` (tests/unit/test_pacer_core.py pacer_wire_entries),
    pushed into a fresh arena's wire ring and drained by a connection."""
    entries = pacer_wire_entries(tmp_path, "stream-1", templates)
    arena = Arena.create(ArenaLayout(max_calls=1, in_slots=8, out_slots=8, wire_slots=64), directory=str(tmp_path))
    released = []
    gateway = SimpleNamespace(arena=arena, ctrl=arena.ctrl, counters=Counter(), bargein_to_clear=LatencyLog(),
                              carriers_enabled=(),
                              bargein_clear_seconds=SimpleNamespace(observe=lambda s: None),
                              release_slot=lambda slot, reason: released.append(reason))

    async def run():
        conn = connection(gateway, "twilio", "/twilio/stream")  # the drain is every carrier's: the templates decide
        conn.edge_entries = []
        conn.transport = FakeTransport()
        arena.claim_slot(0, "stream-1", "CA" + "1" * 32, templates)
        conn.use_wire_templates(templates)
        conn.slot = 0
        for entry in entries:
            assert R.wire_push(arena.ctrl, arena.wire_len, arena.wire_data, 0, entry, len(entry))
        arena.ctrl[0, C.CANCEL_DECISION_NS] = 1  # the clear is a barge-in's
        conn.drain_wire()
        conn.deadline.cancel()
        return conn

    try:
        conn = asyncio.run(run())
        return entries, conn, gateway, released
    finally:
        arena.close()
        arena.unlink()


@pytest.mark.parametrize("templates", [wire_templates("stream-1"), telnyx.wire_templates()], ids=["twilio", "telnyx"])
def test_final_entries_go_out_as_text_frames_and_marks_and_clears_are_read_by_the_calls_templates(tmp_path, templates):
    entries, conn, gateway, released = drained(tmp_path, templates)
    assert frames_of(conn.transport.written) == [(0x81, entry) for entry in entries]
    assert gateway.counters["wire_messages"] == len(entries) and gateway.counters["clears_sent"] == 1
    # the ledger got the marks' names, then the clear (their echoes now tell audio the carrier threw away)
    assert [conn.ledger.echoed(name) for name in PACER_ENTRIES_MARKS] == [MarkDiscarded(n) for n in PACER_ENTRIES_MARKS]
    assert conn.edge_entries == [] and released == []


def test_binary_templates_go_out_as_binary_frames(tmp_path):
    binary = WireTemplates(b"<m>", b"</m>", b"<k>", b"</k>", b"<c/>", binary=True)
    entries, conn, gateway, _ = drained(tmp_path, binary)
    assert frames_of(conn.transport.written) == [(0x82, entry) for entry in entries]
    assert gateway.counters["clears_sent"] == 1


def test_raw_entries_go_to_the_carrier_edge_and_nothing_is_written(tmp_path):
    entries, conn, gateway, released = drained(tmp_path, RAW, Edge)
    assert conn.edge_entries == entries and entries[0].startswith(RAW_MEDIA)
    assert conn.transport.written == b"" and gateway.counters["clears_sent"] == 1 and released == []


def test_a_call_without_a_carrier_edge_ends_when_it_gets_raw_entries(tmp_path):
    _entries, conn, _gateway, released = drained(tmp_path, RAW)
    assert released == ["no carrier edge"] and conn.transport.closes and conn.transport.written == b""
