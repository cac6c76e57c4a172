"""The observer events: the walk over record entries (live and from a finished record), the bus chunks,
and the recorder's numbering."""

from __future__ import annotations

import json

import orjson

from records import delta, scripted_call
from voicecore.bus import messages
from voicecore.observe.events import CHUNK_BYTES, MAX_TEXT, CallEventTap, events_of_record, observe_chunks
from voicecore.observe.numbering import EventNumbering, rows_chunks, rows_from_json, wire, wire_stored

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
    events = [("CA1", 100.0 + t_ms / 1000, t_ms, kind, data) for t_ms, kind, data in tap.take()]
    assert all(len(e[4].get("output", "")) <= MAX_TEXT + 1 for e in events)
    chunks = list(observe_chunks(events))
    assert sum(n for n, _text in chunks) == len(events) and len(chunks) > 1
    decoded = [tuple(event) for _n, text in chunks for event in json.loads(text)]
    assert decoded == events
    for _n, text in chunks:
        raw = messages.encode(messages.ObserveEvents(text))
        assert len(raw) < messages.MAX_MESSAGE_BYTES and isinstance(messages.decode(raw), messages.ObserveEvents)
    # numbered, and published by the recorder in chunks under the limit too
    numbering = EventNumbering(lambda sid: 0)
    rows = [row for _n, text in chunks for row in numbering.number(text)]
    assert [row[1] for row in rows] == list(range(1, len(events) + 1))
    published = list(rows_chunks(rows))
    assert sum(n for n, _text in published) == len(rows) and len(published) > 1
    assert [tuple(r) for _n, text in published for r in json.loads(text)] == rows
    for _n, text in published:
        assert len(messages.encode(messages.ObservedEvents(text))) < messages.MAX_MESSAGE_BYTES


def test_numbering_continues_where_the_store_stood_and_skips_malformed_events():
    asked = []

    def last_seq(call_sid: str) -> int:
        asked.append(call_sid)
        return 41 if call_sid == "CAold" else 0

    numbering = EventNumbering(last_seq)
    rows = numbering.number(json.dumps([["CAold", 1000.0, 0, "call.started", {}], ["CAnew", 5.0, 0, "call.started", {"agent": "a"}],
                                        ["CAold", 1001.5, 1500, "dtmf", {"digit": "5"}]]))
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        ("CAold", 42, 1000.0, 0, "call.started"), ("CAnew", 1, 5.0, 0, "call.started"), ("CAold", 43, 1001.5, 1500, "dtmf")]
    rows = numbering.number(json.dumps([["CAold", 1002.0, 2000, "no.such.type", {}], ["CAold", 1.0, "x", "dtmf", {}],
                                        ["", 1.0, 5, "dtmf", {}], ["CAold", 1002.5, 2500, "call.ended", {"outcome": "ended"}]]))
    assert [r[1] for r in rows] == [44] and numbering.malformed == 3
    assert numbering.number("not json") == [] and numbering.malformed == 4
    assert asked == ["CAold", "CAnew"]  # each count is kept: the store is asked once per call
    first = [r for r in numbering.number(json.dumps([["CAnew", 6.0, 1000, "bargein", {"tag": 2}]]))]
    assert first[0][1] == 2
    # the wire form: the same bytes live (from a row) and late (from the store)
    wired = orjson.loads(wire(first[0]))
    assert wired == {"call_sid": "CAnew", "seq": 2, "type": "bargein", "t_ms": 1000, "at": 6.0, "data": {"tag": 2}}
    stored = {"call_sid": "CAnew", "seq": 2, "type": "bargein", "t_ms": 1000, "at": 6.0, "data": first[0][5]}
    assert wire_stored(stored) == wire(first[0])
    assert rows_from_json(rows_chunks(first).__next__()[1]) == first


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


def test_a_record_reads_the_same_from_text_and_from_bytes_and_a_cut_last_line_goes():
    from voicecore.call.record import loads_partial
    from voicecore.store import summarize_record

    call = scripted_call()
    text = "\n".join(json.dumps(line, separators=(",", ":"), ensure_ascii=False) for line in [call.header, *call.entries]) + "\n"
    for raw in (text, text.encode()):
        header, read, truncated = loads_partial(raw)
        assert not truncated and read == call.entries
        assert summarize_record(header, read, "s", 9.0) == summarize_record(call.header, call.entries, "s", 9.0)
        assert events_of_record(header, read) == events_of_record(call.header, call.entries)
    # cut off mid-line (a killed writer), here inside a UTF-8 sequence: the last line goes, the rest is read
    cut = text.encode() + '{"t":1,"k":"dtmf","digit":"é'.encode()[:-1]
    header, read, truncated = loads_partial(cut)
    assert truncated is True and read == call.entries


def test_an_answer_cut_off_by_the_end_of_the_call_is_in_the_stored_transcript():
    from voicecore.store import summarize_record

    call = scripted_call(end="none")
    last = call.entries[-1]["t"]
    entries = call.entries + [
        {"t": last + MS, "k": "model", "text": json.dumps({"type": "response.created", "response": {"id": "r9"}})},
        {"t": last + 2 * MS, "k": "model", "text": json.dumps({"type": "response.output_audio_transcript.delta",
                                                                  "response_id": "r9", "delta": "Our hours are "})},
        {"t": last + 3 * MS, "k": "model", "text": json.dumps({"type": "response.output_audio_transcript.delta",
                                                                  "response_id": "r9", "delta": "nine to five"})},
        {"t": last + 4 * MS, "k": "stop"}]
    summary = summarize_record(call.header, entries, "s", 1.0)
    whole = summarize_record(call.header, call.entries, "s", 1.0)
    assert summary.transcripts[:-1] == whole.transcripts
    assert summary.transcripts[-1].speaker == "agent" and summary.transcripts[-1].text == "Our hours are nine to five"
    assert summary.transcripts[-1].at_ms == (last + 2 * MS - call.entries[0]["t"]) // MS


def test_a_lost_model_socket_and_the_fallback_lines_are_events():
    from voicecore.call import controller as C
    from voicecore.call.record import CallRecorder, loads
    from voicecore.observe.events import events_of_record

    rec = CallRecorder(C.CallController("CA1", config=C.ControllerConfig(failure_transfer=False)))
    rec.start(0)
    rec.on_model_lost(100 * 1_000_000, "closed_1011")
    rec.on_tick(11_000 * 1_000_000, C.IDLE_PLAYOUT)
    header, entries = loads(rec.dumps())
    events = [(kind, data) for _, kind, data in events_of_record(header, entries)]
    assert ("model.lost", {"reason": "closed_1011", "fatal": False}) in events
    assert [data["kind"] for kind, data in events if kind == "fallback.line"] == ["hold", "apology_hangup"]
