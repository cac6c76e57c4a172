"""The one walk over a call record's entries (voicecore/call/record_reader.py) and the lenient reading of
recorded server events it parses with (voicecore/realtime/events.py read_server_event).

Records are the real ones: the demo's spine call (tests/data/records/) and the store suite's scripted agent
call (a CallRecorder around a CallController), fed live through the model worker's wiring and read back."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from records import DEMO_RECORD, scripted_call
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder, loads
from voicecore.call.record_reader import ANY, RecordConsumer, RecordReader, read_entries, received_at_ns
from voicecore.observe.events import CallEventTap, events_of_record
from voicecore.realtime import events as rt
from voicecore.store.summary import RecordSummarizer, summarize_record

MS = 1_000_000


def demo_record() -> tuple[dict, list[dict]]:
    return loads(gzip.decompress(DEMO_RECORD.read_bytes()).decode())


class Seen(RecordConsumer):
    """A consumer that keeps what it is handed."""

    def __init__(self, inputs=(), actions=(), events=()) -> None:
        super().__init__()
        self.inputs, self.actions, self.events = inputs, actions, events
        self.awaiting_audio: set[str] = set()
        self.seen: list[tuple] = []

    def input_handlers(self):
        return {kind: (lambda entry, at_ms: self.seen.append(("input", entry["k"], at_ms))) for kind in self.inputs}

    def action_handlers(self):
        return {kind: (lambda action, at_ms: self.seen.append(("action", action["type"], at_ms))) for kind in self.actions}

    def event_handlers(self):
        return {kind: (lambda event, at_ms: self.seen.append(("event", event, at_ms))) for kind in self.events}


def count_parses(monkeypatch) -> list[str]:
    parsed: list[str] = []
    real = rt.read_server_event

    def counting(text):
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(rt, "read_server_event", counting)
    return parsed


# --- read_server_event -------------------------------------------------------------------------------


def test_a_well_formed_recorded_event_reads_as_the_live_parser_reads_it():
    header, entries = demo_record()
    texts = [entry["text"] for entry in entries if entry["k"] == "model"]
    call = scripted_call()
    texts += [entry["text"] for entry in call.entries if entry["k"] == "model"]
    kinds = set()
    for text in texts:
        live = rt.parse_server_event(text)
        assert not isinstance(live, rt.MalformedEvent), text[:120]
        assert rt.read_server_event(text) == live
        kinds.add(type(live))
    # the corpus covers what the readers read: turns, answers, words both ways, tools, errors
    assert {rt.SpeechStarted, rt.SpeechStopped, rt.ResponseCreated, rt.ResponseDone, rt.AudioDelta, rt.TranscriptDelta,
            rt.TranscriptDone, rt.InputTranscriptionCompleted, rt.FunctionCallArgumentsDone, rt.RealtimeError} <= kinds


def test_a_recorded_event_is_read_as_far_as_it_goes():
    read = rt.read_server_event
    # what a live event must have and a recorded one may lack: the live parser finds these malformed
    assert isinstance(rt.parse_server_event('{"type":"response.output_audio_transcript.delta","delta":"Hi"}'), rt.MalformedEvent)
    assert read('{"type":"response.output_audio_transcript.delta","delta":"Hi"}') == rt.TranscriptDelta("", "", "Hi")
    assert read('{"type":"input_audio_buffer.speech_started","item_id":"u1"}') == rt.SpeechStarted(None, "u1")
    assert read('{"type":"input_audio_buffer.speech_stopped","audio_end_ms":true}') == rt.SpeechStopped(None, "")
    assert read('{"type":"response.created","response":"odd"}') == rt.ResponseCreated("", None)
    assert read('{"type":"response.done","response":{"id":"r1"}}') == rt.ResponseDone("r1", "", None, None)
    assert read('{"type":"conversation.item.input_audio_transcription.completed","transcript":7}') == \
        rt.InputTranscriptionCompleted("", "7")
    assert read('{"type":"error","error":"boom"}') == rt.RealtimeError("", None, "boom", None, None)
    assert read('{"type":"error","error":{"code":0,"type":"server_error","message":"m"}}') == \
        rt.RealtimeError("server_error", None, "m", None, None)
    delta = read('{"type":"response.output_audio.delta","response_id":"r1","delta":"' + base64.b64encode(b"\xff" * 8).decode() + '"}')
    assert delta == rt.AudioDelta("r1", "", b"\xff" * 8)
    # never raises: not JSON, not an object, no type, an unknown type, a type the readers do not read
    assert isinstance(read('{"type":"response.output_audio.delta",' + "x" * 40), rt.MalformedEvent)
    assert isinstance(read("[1, 2]"), rt.MalformedEvent) and isinstance(read('{"delta": 1}'), rt.MalformedEvent)
    assert read('{"type":"rate_limits.updated"}') == rt.Unhandled("rate_limits.updated")
    assert isinstance(read('{"type":"conversation.item.added"}'), rt.MalformedEvent)  # read as live: item is required
    assert read(b'{"type":"input_audio_buffer.committed","item_id":"u1"}') == rt.InputCommitted("u1", None)


def test_the_recorded_events_are_events_of_the_live_vocabulary():
    recorded = set(rt._RECORDED)  # the module's own two tables, compared
    assert recorded <= rt.SERVER_EVENT_TYPES
    assert rt.AUDIO_DELTA_TYPES | rt.TRANSCRIPT_DELTA_TYPES | rt.TRANSCRIPT_DONE_TYPES | {rt.CALLER_TRANSCRIPT_DONE} <= recorded


# --- the reader --------------------------------------------------------------------------------------


def test_each_model_event_is_parsed_once_for_every_consumer(monkeypatch):
    header, entries = demo_record()
    parsed = count_parses(monkeypatch)
    tap, summarizer = CallEventTap(header), RecordSummarizer(header)
    read_entries(RecordReader(tap, summarizer), entries)
    model_texts = [entry["text"] for entry in entries if entry["k"] == "model"]
    assert parsed and len(parsed) == len(set(parsed)) and set(parsed) <= set(model_texts)
    # the audio deltas of responses already talking are passed over: the bulk of the call's events
    deltas = [text for text in model_texts if rt.AUDIO_DELTA_MARK in text[:64]]
    assert len(deltas) > 90 and sum(1 for text in parsed if text in deltas) <= 6
    # what one walk gave both is what each gives alone
    assert tap.take() == events_of_record(header, entries, complete=False)
    assert summarizer.summary("s", 9.0) == summarize_record(header, entries, "s", 9.0)


def test_nothing_is_parsed_for_consumers_that_read_no_model_event(monkeypatch):
    header, entries = demo_record()
    parsed = count_parses(monkeypatch)
    seen = Seen(inputs=("start", "stop"), actions=("OpenTag",))
    read_entries(RecordReader(seen), entries)
    assert parsed == []
    assert [s[:2] for s in seen.seen] == [("input", "start"), *[("action", "OpenTag")] * 3, ("input", "stop")]


def test_an_audio_delta_is_parsed_only_while_a_consumer_awaits_audio(monkeypatch):
    parsed = count_parses(monkeypatch)
    seen = Seen(events=(rt.AudioDelta, rt.ResponseCreated))
    reader = RecordReader(seen)
    delta = json.dumps({"type": "response.output_audio.delta", "response_id": "r1", "item_id": "i1", "delta": ""})
    reader.feed({"t": 0, "k": "model", "text": delta})
    assert parsed == [] and seen.seen == []
    seen.awaiting_audio.add("r1")
    reader.feed({"t": 2 * MS, "k": "model", "text": delta})
    assert seen.seen == [("event", rt.AudioDelta("r1", "i1", b""), 2)]


def test_the_reader_keeps_the_clock_the_responses_tags_and_the_outcome():
    seen = Seen(inputs=(ANY,), actions=(ANY,), events=(rt.ResponseCreated,))
    reader = RecordReader(seen)
    created = json.dumps({"type": "response.created", "response": {"id": "r1"}})
    for entry in [{"t": 5 * MS, "k": "start"}, {"t": 7 * MS, "k": "model", "text": created},
                  {"t": 7 * MS, "k": "out", "a": {"type": "OpenTag", "tag": 3}},
                  {"t": 8 * MS, "k": "note", "what": "mark"}, {"t": 9 * MS, "k": "out", "a": {"type": "HangUp", "reason": "done"}},
                  {"t": 10 * MS, "k": "stop"}, {"t": 11 * MS, "k": "x-unknown"}]:
        reader.feed(entry)
        if entry["k"] == "note":
            assert (reader.input_kind, reader.created) == ("model", "r1")  # a note is no input: it changes nothing
    assert reader.t0 == 5 * MS and reader.last_t == 11 * MS
    assert reader.tags == {3: "r1"} and reader.tag_of == {"r1": 3}
    assert reader.outcome == "hangup:done"  # the first end; the stop after it does not change it
    assert reader.input_kind == "x-unknown" and reader.created == ""
    assert [s[:3] for s in seen.seen if s[0] != "event"] == [
        ("input", "start", 0), ("input", "model", 2), ("action", "OpenTag", 2), ("action", "HangUp", 4), ("input", "stop", 5),
        ("input", "x-unknown", 6)]


def test_a_stop_with_no_end_before_it_is_the_callers_hangup():
    reader = RecordReader(Seen())
    reader.feed({"t": 0, "k": "start"})
    reader.feed({"t": MS, "k": "stop"})
    reader.feed({"t": 2 * MS, "k": "out", "a": {"type": "CallOver"}})
    assert reader.outcome == "caller_hangup"


def test_a_consumer_is_fed_by_one_reader():
    tap = CallEventTap({})
    RecordReader(tap)
    with pytest.raises(ValueError, match="another reader"):
        RecordReader(tap, RecordSummarizer({}))


def test_the_model_workers_live_reading_is_the_finished_records():
    """The recorder's observer is one reader feeding the tap and the summarizer (workers/model/main.py): what they
    build as the call goes is what reading the written record gives, event for event."""
    call = scripted_call()
    tap, summarizer = CallEventTap(call.header), RecordSummarizer(call.header)
    recorder = CallRecorder(C.CallController("CA1"), observer=RecordReader(tap, summarizer).feed)
    for entry in call.entries:  # the same inputs again, through a recorder whose observer is the reader
        recorder.entries.append(entry)
        recorder.observer(entry)
    header, entries = call.header, call.entries
    assert tap.take() == events_of_record(header, entries)
    assert summarizer.summary("s", 5.0) == summarize_record(header, entries, "s", 5.0)
    assert tap.t0 == entries[0]["t"]


def test_the_store_and_the_recording_place_the_callers_audio_on_one_clock(tmp_path):
    """A batch of caller audio recorded at t arrived in the batch's length before t: the store's speech start
    (the model's audio_start_ms placed by it) and the console's recording put the caller's first sound at the
    same millisecond."""
    from voicecore.console.media import call_audio
    from voicecore.record import save_new

    recorder = CallRecorder(C.CallController("CA1"), keep_caller_audio=True)
    recorder.start(0)
    recorder.on_caller_audio(b"\xff" * 160 * 10, 500 * MS)  # silence, 300-500 ms
    recorder.on_caller_audio(b"\x10" * 160 * 5, 600 * MS)  # the caller's first sound: 500-600 ms
    recorder.on_model_event(json.dumps({"type": "input_audio_buffer.speech_started", "item_id": "u1",
                                        "audio_start_ms": 200}), 700 * MS, C.IDLE_PLAYOUT)
    recorder.on_carrier_stop(800 * MS)
    assert received_at_ns(600 * MS, 5) == 500 * MS
    summary = summarize_record(recorder.header, recorder.entries, "s", 1.0)
    assert summary.turns[0].speech_began_ms == 500
    caller, _agent = call_audio(save_new(recorder, tmp_path))
    assert caller.index(b"\x10") == 500 * 8  # 8 kHz mu-law: 8 bytes a millisecond
