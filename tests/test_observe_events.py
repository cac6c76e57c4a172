"""The observer events: the walk over record entries (live and from a finished record), the bus chunks,
and the recorder's numbering."""

from __future__ import annotations

import json

import orjson

from test_store import delta, scripted_call
from voicecore.bus import messages
from voicecore.observe.events import CHUNK_BYTES, MAX_TEXT, CallEventTap, events_of_record, observe_chunks
from voicecore.observe.numbering import EventNumbering, rows_from_json, rows_json, wire, wire_stored

MS = 1_000_000


def test_a_call_becomes_its_observer_events_in_order():
    call = scripted_call()
    events = events_of_record(call.header, call.entries)
    types = [kind for _t, kind, _d in events]
    assert types[0] == "call.started" and types[-1] == "call.ended" and types.count("call.ended") == 1
    assert events[0][2] == {"control": "turns", "flow": "agent", "agent": "receptionist", "resumed": False}
    assert events[-1][2] == {"outcome": "caller_hangup"}
    # turns, transcripts both ways, the tool, the barge-in, the verdict, the model error: in the order they happened
    expected = ["response.started", "response.audio", "transcript.delta", "response.done",  # the greeting
                # the input's playout says nothing of the greeting played (IDLE): the answer's start cancels it
                "turn.caller_started", "turn.caller_ended", "transcript.delta", "bargein", "response.started", "tool.called",
                "response.done", "tool.result", "response.started", "response.audio", "transcript.delta", "response.done",
                "turn.caller_started", "transcript.delta", "bargein", "turn.caller_ended", "transcript.delta",
                "gate.verdict", "model.error"]
    assert types[1:-1] == expected
    times = [t for t, _k, _d in events]
    assert times == sorted(times) and times[0] == 0
    caller = [d for _t, k, d in events if k == "transcript.delta" and d["role"] == "caller"]
    assert [(d["text"], d["final"]) for d in caller] == [("Book a cleaning please", True), ("no wait ", False),
                                                         ("No wait, make it Friday", True)]
    agent = [d["text"] for _t, k, d in events if k == "transcript.delta" and d["role"] == "agent"]
    assert agent == ["Hello, Smile Dental.", "You are booked for a cleaning."]
    greeting, bargein = [(t, d) for t, k, d in events if k == "bargein"]
    assert greeting[1]["response_id"] == "r1"
    assert bargein == (call.cancel_ms, {"tag": bargein[1]["tag"], "response_id": "r3"})
    (tool_called,) = [d for _t, k, d in events if k == "tool.called"]
    assert tool_called["name"] == "book" and json.loads(tool_called["arguments"]) == {"service": "cleaning"}
    (verdict,) = [d for _t, k, d in events if k == "gate.verdict"]
    assert verdict["rejected"] is True and verdict["reason"] == "number not in the knowledge base"


def test_live_feeding_gives_the_same_events_as_the_finished_record():
    call = scripted_call()
    tap = CallEventTap(call.header)
    live = []
    for entry in call.entries:
        tap.feed(entry)
        live.extend(tap.take())
    assert live == events_of_record(call.header, call.entries)


def test_only_the_first_audio_delta_of_a_response_is_read():
    tap = CallEventTap({})
    tap.feed({"t": 0, "k": "start"})
    tap.feed({"t": MS, "k": "model", "text": json.dumps({"type": "response.created", "response": {"id": "r1"}})})
    tap.feed({"t": 2 * MS, "k": "model", "text": delta("r1", 2)})
    # not JSON at all: had it been parsed, nothing would come of it either; it must not even be looked at
    tap.feed({"t": 3 * MS, "k": "model", "text": '{"type":"response.output_audio.delta",' + "x" * 100})
    tap.feed({"t": 4 * MS, "k": "audio", "n": 5})
    tap.feed({"t": 5 * MS, "k": "tick", "p": []})
    assert [k for _t, k, _d in tap.take()] == ["call.started", "response.started", "response.audio"]
    assert tap.awaiting_audio == set()


def test_a_call_that_ends_without_a_stop_ends_once_with_the_drivers_outcome():
    tap = CallEventTap({})
    tap.feed({"t": 0, "k": "start"})
    tap.feed({"t": 5 * MS, "k": "out", "a": {"type": "HangUp", "reason": "goodbye"}})
    tap.end(9 * MS)
    tap.end(10 * MS)
    tap.feed({"t": 11 * MS, "k": "dtmf", "digit": "1"})  # after the end: nothing
    assert tap.take()[-1] == (9, "call.ended", {"outcome": "hangup:goodbye"})
    assert tap.take() == []


def test_chunks_stay_under_the_bus_limit_and_cut_long_texts():
    tap = CallEventTap({})
    tap.feed({"t": 0, "k": "start"})
    for i in range(300):
        tap.feed({"t": i * MS, "k": "tool", "call_id": f"c{i}", "ok": True, "output": "é\u0001" * 5000})
    events = tap.take()
    assert all(len(d.get("output", "")) <= MAX_TEXT + 1 for _t, _k, d in events)
    chunks = list(observe_chunks(events))
    assert sum(n for n, _text in chunks) == len(events) and len(chunks) > 1
    decoded = [event for _n, text in chunks for event in json.loads(text)]
    assert [tuple(e) for e in decoded] == [[t, k, d] and (t, k, d) for t, k, d in events]
    for _n, text in chunks:
        raw = messages.encode(messages.ObserveEvents("CA1", 1.5, text))
        assert len(raw) < messages.MAX_MESSAGE_BYTES and isinstance(messages.decode(raw), messages.ObserveEvents)


def test_numbering_continues_where_the_store_stood_and_skips_malformed_events():
    asked = []

    def last_seq(call_sid: str) -> int:
        asked.append(call_sid)
        return 41 if call_sid == "CAold" else 0

    numbering = EventNumbering(last_seq)
    rows = numbering.number("CAold", 1000.0, json.dumps([[0, "call.started", {}], [1500, "dtmf", {"digit": "5"}]]))
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(42, 1000.0, 0, "call.started"), (43, 1001.5, 1500, "dtmf")]
    rows = numbering.number("CAold", 1000.0, json.dumps([[2000, "no.such.type", {}], ["x", "dtmf", {}], [2500, "call.ended", {"outcome": "ended"}]]))
    assert [r[1] for r in rows] == [44] and numbering.malformed == 2
    assert numbering.number("CAold", 1000.0, "not json") == [] and numbering.malformed == 3
    assert asked == ["CAold"]  # the count is kept: the store is asked once per call
    first = numbering.number("CAnew", 5.0, json.dumps([[0, "call.started", {"agent": "a"}]]))
    assert first[0][1] == 1
    # the wire form: the same bytes live (from a row) and late (from the store)
    wired = orjson.loads(wire(first[0]))
    assert wired == {"call_sid": "CAnew", "seq": 1, "type": "call.started", "t_ms": 0, "at": 5.0, "data": {"agent": "a"}}
    stored = {"call_sid": "CAnew", "seq": 1, "type": "call.started", "t_ms": 0, "at": 5.0, "data": first[0][5]}
    assert wire_stored(stored) == wire(first[0])
    assert rows_from_json(rows_json(first)) == first


def test_a_cancel_by_a_newer_response_or_by_the_gate_is_no_bargein():
    def created(rid: str) -> dict:
        return {"k": "model", "text": json.dumps({"type": "response.created", "response": {"id": rid}})}

    tap = CallEventTap({})
    for t, entry in enumerate([{"k": "start"}, created("r1"), {"k": "out", "a": {"type": "OpenTag", "tag": 1}},
                               created("r2"), {"k": "out", "a": {"type": "CancelTag", "tag": 1}},
                               {"k": "out", "a": {"type": "OpenTag", "tag": 2}},
                               {"k": "verdict", "tag": 2, "rejected": True}, {"k": "out", "a": {"type": "CancelTag", "tag": 2}},
                               {"k": "tick"}, {"k": "out", "a": {"type": "CancelTag", "tag": 2}}]):
        tap.feed({"t": t * MS, **entry})
    cancels = [(k, d) for _t, k, d in tap.take() if k in ("bargein", "response.cancelled")]
    assert cancels == [("response.cancelled", {"tag": 1, "response_id": "r1", "cause": "superseded"}),
                       ("response.cancelled", {"tag": 2, "response_id": "r2", "cause": "gate"}),
                       ("bargein", {"tag": 2, "response_id": "r2"})]


def test_a_record_read_light_summarizes_and_observes_the_same(tmp_path):
    from voicecore.call.record import loads_partial
    from voicecore.store import summarize_record

    call = scripted_call()
    entries = call.entries + [{"t": call.entries[-1]["t"] + i, "k": "audio", "n": 5, "ulaw": "////", "p": [3, 40, 9, 3, 44, 10]}
                              for i in range(3)] + [{"k": "audio", "t": 1, "n": 1}]  # a writer that ordered its keys otherwise
    text = "\n".join(json.dumps(line, separators=(",", ":")) for line in [call.header, *entries]) + "\n"
    skip = frozenset({"audio", "tick"})
    for raw in (text, text.encode()):
        header, read, truncated = loads_partial(raw, skip_kinds=skip)
        assert not truncated and len(read) == len(entries)
        # audio and ticks read light: time, kind and playout snapshot only, never the caller's audio
        assert [e for e in read if e["k"] in skip] == [{k: v for k, v in e.items() if k in ("t", "k", "p")}
                                                      for e in entries if e["k"] in skip]
        assert summarize_record(header, read, "s", 9.0) == summarize_record(call.header, entries, "s", 9.0)
        assert events_of_record(header, read) == events_of_record(call.header, entries)
    # cut off mid-line (a killed writer) and mid-UTF-8: the last line goes, the rest is read
    cut = text.encode() + '{"t":1,"k":"dtmf","digit":"é'.encode()[:-1]
    assert loads_partial(cut, skip_kinds=skip)[2] is True
