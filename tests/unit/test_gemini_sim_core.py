"""The Gemini Live simulator's core (voicecore.sim.gemini_core), fed messages and a clock: refusals,
turn taking by its VAD or the client's activity signals, barge-in, tools, goAway and resumption."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voicecore.gemini import protocol as gp
from voicecore.sim.gemini_core import (DITHER_LSB, Answer, GeminiConnection, GeminiSimConfig, SessionStore, ToolRule,
                                       chunk_seed, dithered)

ANSWERS = (Answer("One two three four", b"\x20\x00" * 24_000), Answer("Second answer", b"\x20\x00" * 12_000))


def connect(config: GeminiSimConfig | None = None, store: SessionStore | None = None, *, key: str | None = "k",
            now: int = 0, **setup) -> GeminiConnection:
    conn = GeminiConnection(config or GeminiSimConfig(), ANSWERS, store or SessionStore(), api_key=key, now_ms=now)
    conn.receive(gp.setup("gemini-x", "be brief", **setup), now)
    return conn


def events(conn: GeminiConnection) -> list:
    return [event for text in conn.take_outgoing() for event in gp.parse_server_message(text)]


@pytest.mark.parametrize(("first", "code", "reason"), [
    (gp.activity_end(), 1008, "first message must be setup"),
    ("{not json", 1007, "Invalid JSON"),
    ('{"setup":{},"toolResponse":{}}', 1007, "exactly one member"),
    ('{"sessionUpdate":{}}', 1007, 'Unknown name "sessionUpdate"'),
    ('{"setup":{"model":"models/m","voice":"x"}}', 1007, 'Unknown name "voice"'),
])
def test_bad_first_messages_close_with_the_vendors_codes(first: str, code: int, reason: str) -> None:
    conn = GeminiConnection(GeminiSimConfig(), ANSWERS, SessionStore(), api_key="k", now_ms=0)
    conn.receive(first, 0)
    assert conn.close is not None and conn.close[0] == code and reason in conn.close[1]
    assert conn.take_outgoing() == []


@pytest.mark.parametrize("message", [
    '{"realtimeInput":{"audio":"x"}}', '{"realtimeInput":{"audio":{"mimeType":"audio/pcm","data":"@@"}}}',
    '{"realtimeInput":{"audio":{"mimeType":"audio/pcm","data":7}}}', '{"clientContent":{"turns":[1]}}',
    '{"clientContent":{"turns":[{"parts":[{"text":1}]}],"turnComplete":true}}', '{"clientContent":{"turns":"x"}}',
    '{"toolResponse":{"functionResponses":[{"id":["x"]}]}}', '{"toolResponse":{"functionResponses":[]}}',
    '{"realtimeInput":{"activityStart":{},"activityEnd":{}}}', '{"realtimeInput":[]}',
])
def test_bad_messages_after_setup_close_never_raise(message: str) -> None:
    conn = connect(automatic_activity_detection=False)
    conn.receive(message, 10)
    assert conn.close is not None and conn.close[0] == 1007 and conn.close[1]


def test_a_setup_member_of_the_wrong_type_is_refused() -> None:
    conn = GeminiConnection(GeminiSimConfig(), ANSWERS, SessionStore(), api_key="k", now_ms=0)
    conn.receive('{"setup":{"model":"models/m","realtimeInputConfig":"off"}}', 0)
    assert conn.close is not None and conn.close[0] == 1007


def test_key_and_model_are_checked_at_setup() -> None:
    assert connect(key=None).close[0] == 1008
    assert "API key not valid" in connect(GeminiSimConfig(api_keys=("good",)), key="bad").close[1]
    assert "is not found" in connect(GeminiSimConfig(models=("gemini-y",))).close[1]
    ok = connect(GeminiSimConfig(api_keys=("k",), models=("models/gemini-x",)))
    assert ok.close is None and events(ok)[0] == gp.SetupComplete()


def test_explicit_activity_signals_need_detection_disabled() -> None:
    conn = connect()
    conn.receive(gp.activity_start(), 10)
    assert conn.close is not None and conn.close[0] == 1007


def test_own_vad_ends_the_callers_turn_after_silence() -> None:
    conn = connect(GeminiSimConfig(vad_silence_ms=300, first_chunk_ms=0))
    events(conn)
    speech = (8000 * np.sin(np.arange(320) / 3)).astype("<i2").tobytes()  # 20 ms at 16 kHz
    for n in range(5):
        conn.receive(gp.realtime_audio(speech), n * 20)
    assert events(conn) == [gp.VoiceActivity(started=True)]  # announced as the vendor's detection does
    for n in range(14):  # 280 ms of silence: not yet the end
        conn.receive(gp.realtime_audio(bytes(640)), 100 + n * 20)
    assert conn.record.turns_started == 0
    conn.receive(gp.realtime_audio(bytes(640)), 400)
    conn.advance(400)
    out = events(conn)
    assert out[0] == gp.VoiceActivity(started=False)
    assert isinstance(out[1], gp.InputTranscription) and isinstance(out[3], gp.ModelAudio)
    assert out[2] == gp.SessionResumptionUpdate(None, False)  # no handle while the model generates
    assert conn.record.turns_started == 1


def test_a_whole_turn_then_a_resumption_handle() -> None:
    conn = connect(GeminiSimConfig(speed_factor=4.0, chunk_ms=40), automatic_activity_detection=False)
    events(conn)
    conn.receive(gp.activity_start(), 0)
    conn.receive(gp.activity_end(), 0)
    conn.advance(10_000)
    out = events(conn)
    audio = b"".join(e.audio for e in out if isinstance(e, gp.ModelAudio))
    clip = ANSWERS[0].pcm24  # 1 s at 24 kHz, in 25 chunks of 40 ms, each with its own dither
    assert audio == b"".join(dithered(clip[i:i + 1920], chunk_seed(0, i // 1920)) for i in range(0, len(clip), 1920))
    sent = np.frombuffer(audio, "<i2").astype(int) - np.frombuffer(ANSWERS[0].pcm24, "<i2")
    assert np.abs(sent).max() <= DITHER_LSB and np.abs(sent).max() > 0  # the clip, with its turn's dither
    assert "".join(e.text for e in out if isinstance(e, gp.OutputTranscription)).split() == "One two three four".split()
    assert [type(e) for e in out[-4:]] == [gp.GenerationComplete, gp.TurnComplete, gp.UsageMetadata,
                                           gp.SessionResumptionUpdate]
    assert out[-1].resumable and out[-1].new_handle  # a handle again once the turn is complete


def test_the_first_audio_comes_first_chunk_ms_after_the_callers_turn_as_a_vendors_model_takes_its_time() -> None:
    conn = connect(GeminiSimConfig(speed_factor=2.0, chunk_ms=40), automatic_activity_detection=False)
    assert conn.config.first_chunk_ms == 200  # the default: the Realtime simulator's first_delta_latency_ms
    events(conn)
    conn.receive(gp.activity_start(), 1000)
    conn.receive(gp.activity_end(), 1000)
    conn.advance(1199)
    assert not any(isinstance(e, gp.ModelAudio) for e in events(conn))  # the model is still thinking
    assert conn.next_wakeup_ms() == 1200
    conn.advance(1300)  # then at its pace: 100 ms at 20 ms a chunk
    assert sum(isinstance(e, gp.ModelAudio) for e in events(conn)) == 6
    assert conn.record.turns[-1].chunk_sent_ms[0] == 1300  # when it went out (advance's clock), for the report


def test_audio_is_paced_by_the_speed_factor() -> None:
    conn = connect(GeminiSimConfig(speed_factor=2.0, chunk_ms=40, first_chunk_ms=0), automatic_activity_detection=False)
    events(conn)
    conn.receive(gp.activity_start(), 1000)
    conn.receive(gp.activity_end(), 1000)
    conn.advance(1100)  # 100 ms at 20 ms a chunk: chunks 0..5
    assert sum(isinstance(e, gp.ModelAudio) for e in events(conn)) == 6
    assert conn.next_wakeup_ms() == 1120


def test_barge_in_cuts_the_turn_late_chunks_follow_interrupted_and_turn_complete_ends_it() -> None:
    conn = connect(GeminiSimConfig(late_chunks_after_interrupt=2), automatic_activity_detection=False)
    events(conn)
    conn.receive(gp.activity_start(), 0)
    conn.receive(gp.activity_end(), 0)
    conn.advance(50)
    events(conn)
    conn.receive(gp.activity_start(), 60)
    out = events(conn)
    assert isinstance(out[0], gp.Interrupted)  # late audio (and its words) come after it ...
    assert sum(isinstance(e, gp.ModelAudio) for e in out[1:]) == 2
    assert isinstance(out[-1], gp.TurnComplete)  # ... then the cut turn's turnComplete: "interrupted > turn_complete"
    assert not any(isinstance(e, gp.GenerationComplete) for e in out)
    conn.advance(10_000)
    assert events(conn) == []  # the cut turn is over: no more audio
    assert conn.record.interrupts == 1 and conn.record.late_chunks_sent == 2


def test_tool_call_round_trip_and_cancellation() -> None:
    rule = ToolRule("book", {"day": "mon"}, on_turn=1)
    conn = connect(GeminiSimConfig(tool_rules=(rule,)), automatic_activity_detection=False)
    events(conn)
    conn.receive(gp.activity_start(), 0)
    conn.receive(gp.activity_end(), 0)
    (call,) = [e for e in events(conn) if isinstance(e, gp.ToolCall)]
    assert conn.record.turns_started == 0  # the model waits for the result
    conn.receive(gp.tool_response([(call.calls[0].call_id, "book", {"ok": True})]), 10)
    assert conn.record.turns_started == 1
    conn.advance(10_000)
    events(conn)

    texts = connect(GeminiSimConfig(tool_rules=(ToolRule("book", on_text="BOOK"),)))
    events(texts)
    texts.receive(gp.client_content([("user", "I want to book")]), 0)
    (call,) = [e for e in events(texts) if isinstance(e, gp.ToolCall)]
    texts.receive(gp.client_content([("user", "never mind")]), 5)
    assert gp.ToolCallCancellation((call.calls[0].call_id,)) in events(texts)
    texts.receive(gp.tool_response([(call.calls[0].call_id, "book", {})]), 6)
    assert texts.close is not None and "answers no pending function call" in texts.close[1]


def test_go_away_then_the_limit_then_resumption() -> None:
    store = SessionStore()
    config = GeminiSimConfig(connection_limit_ms=60_000, go_away_notice_ms=5_000)
    conn = connect(config, store, now=1_000)
    handle = [e for e in events(conn) if isinstance(e, gp.SessionResumptionUpdate)][0].new_handle
    assert conn.next_wakeup_ms() == 56_000
    conn.advance(56_000)
    assert events(conn) == [gp.GoAway(5_000)]
    assert conn.next_wakeup_ms() == 61_000 and conn.close is None
    conn.advance(61_000)
    assert conn.close == (1000, "The connection reached its time limit.")

    again = connect(config, store, now=61_500, resumption_handle=handle)
    assert again.record.resumed and again.session is conn.session and conn.session.connections == 2
    assert "Invalid session resumption handle" in connect(config, store, resumption_handle="nope").close[1]


def test_setup_twice_is_refused() -> None:
    conn = connect()
    conn.receive(gp.setup("gemini-x", "again"), 5)
    assert conn.close is not None and conn.close[0] == 1008
    assert json.loads(conn.take_outgoing()[0]) == {"setupComplete": {}}


def test_proto_field_names_are_accepted_as_the_vendors_parser_accepts_them() -> None:
    """proto3 JSON parsers take a field's proto name as well as its lowerCamelCase name; Google's SDK sends
    ``realtime_input`` and nested snake_case members in setup."""
    conn = GeminiConnection(GeminiSimConfig(), ANSWERS, SessionStore(), api_key="k", now_ms=0)
    conn.receive('{"setup":{"model":"models/m","realtime_input_config":{"automatic_activity_detection":'
                 '{"disabled":true}},"session_resumption":{}}}', 0)
    assert conn.close is None and not conn.automatic_vad and conn.resumption
    conn.receive('{"realtime_input":{"activity_start":{}}}', 1)
    conn.receive('{"realtime_input":{"audio":{"data":"AAA=","mime_type":"audio/pcm;rate=16000"}}}', 2)
    conn.receive('{"realtime_input":{"activity_end":{}}}', 3)
    assert conn.close is None and conn.record.turns_started == 1 and conn.record.audio_in_bytes == 2
    conn.receive('{"realtime_input":{"activity_middle":{}}}', 4)
    assert conn.close is not None and conn.close[0] == 1007


def test_each_turn_is_dithered_differently_so_no_two_share_a_frame() -> None:
    quiet = bytes(2 * 24_000 // 10)  # 100 ms of digital silence
    assert dithered(quiet, 1) != dithered(quiet, 2)
    assert dithered(quiet, 1) == dithered(quiet, 1)  # seeded: a harness computes the same audio


def test_speech_late_in_a_long_audio_message_is_heard_in_that_message() -> None:
    conn = connect()
    events(conn)
    quiet = bytes(2 * 16_000 * 80 // 1000)  # 80 ms of silence, then 20 ms of speech: one 100 ms message
    speech = (8000 * np.sin(np.arange(320) / 3)).astype("<i2").tobytes()
    conn.receive(gp.realtime_audio(quiet + speech), 100)
    assert events(conn) == [gp.VoiceActivity(started=True)]


def test_a_stall_pauses_the_turns_output_then_it_goes_on_whole() -> None:
    config = GeminiSimConfig(speed_factor=4.0, chunk_ms=40, stall_after_ms=100, stall_ms=2000, first_chunk_ms=0)
    conn = connect(config, automatic_activity_detection=False)
    events(conn)
    conn.receive(gp.activity_start(), 0)
    conn.receive(gp.activity_end(), 0)
    conn.advance(100)  # chunks due at 0, 10, ..., 100: eleven of the 25
    assert sum(isinstance(e, gp.ModelAudio) for e in events(conn)) == 11
    assert conn.next_wakeup_ms() == 2110  # the rest waits out the stall
    conn.advance(2109)
    assert events(conn) == []
    conn.advance(10_000)
    rest = events(conn)
    assert sum(isinstance(e, gp.ModelAudio) for e in rest) == 14 and isinstance(rest[-3], gp.TurnComplete)
    assert conn.record.turns[0].stalled


def test_a_stall_applies_only_to_the_turns_it_names() -> None:
    config = GeminiSimConfig(speed_factor=4.0, chunk_ms=40, stall_after_ms=100, stall_ms=2000, stall_turns=(1,), first_chunk_ms=0)
    conn = connect(config, automatic_activity_detection=False)
    events(conn)
    for at in (0, 1000):  # each turn's 25 chunks are due within 250 ms of its start, unless it stalls
        conn.receive(gp.activity_start(), at)
        conn.receive(gp.activity_end(), at)
        conn.advance(at + 500)
    assert [turn.stalled for turn in conn.record.turns] == [False, True]
    assert conn.record.turns[0].completed_ms == 500 and conn.record.turns[1].completed_ms is None


def test_an_internal_error_drops_the_sessions_first_connection_and_not_the_one_that_resumes_it() -> None:
    store = SessionStore()
    config = GeminiSimConfig(internal_error_after_ms=5000)
    conn = connect(config, store, automatic_activity_detection=False)
    handle = [e for e in events(conn) if isinstance(e, gp.SessionResumptionUpdate)][-1].new_handle
    assert conn.next_wakeup_ms() == 5000
    conn.advance(4999)
    assert conn.close is None
    conn.advance(5000)
    assert conn.close == (1011, "Internal error encountered.") and conn.record.go_away_ms is None  # no warning
    resumed = GeminiConnection(config, ANSWERS, store, api_key="k", now_ms=6000)
    resumed.receive(gp.setup("gemini-x", "be brief", resumption_handle=handle), 6000)
    resumed.advance(60_000)
    assert resumed.record.resumed and resumed.close is None


def test_the_end_of_an_utterance_searches_only_what_came_since_and_hears_what_one_search_of_it_all_would(
        monkeypatch) -> None:
    """The simulator answers every session from one process: a search of the whole utterance at its end (~5-25 ms
    for a few seconds of speech) paused every session's audio when 50 callers stopped at once. The end searches
    only the audio since the last partial transcription, and the phrases heard are those one search of the whole
    utterance finds."""
    from voicecore.carriers.codec import EdgeTranscoder
    from voicecore.carriers.events import ENCODING_L16
    from voicecore.sim import gemini_core
    from voicecore.sim.audio_clips import default_library
    from voicecore.sim.gemini_records import caller_phrases

    phrases = caller_phrases()
    library = default_library().audio
    to_16k = EdgeTranscoder(ENCODING_L16, gp.INPUT_SAMPLE_RATE_HZ)
    ulaw = library["caller_hello"] + library["caller_hours"] + library["backchannel_okay"]
    speech = b"".join(to_16k.from_ulaw(ulaw[i:i + 160]) for i in range(0, len(ulaw) - len(ulaw) % 160, 160))
    searched: list[int] = []
    real_hits = gemini_core.phrase_hits

    def counting_hits(pcm16k, known):
        searched.append(pcm16k.size)
        return real_hits(pcm16k, known)

    monkeypatch.setattr(gemini_core, "phrase_hits", counting_hits)
    conn = connect(GeminiSimConfig(vad_silence_ms=300, caller_phrases=phrases))
    events(conn)
    now = 0
    for start in range(0, len(speech), 640):  # 20 ms messages, as the driver sends them
        conn.receive(gp.realtime_audio(speech[start:start + 640]), now)
        now += 20
    for _ in range(20):
        conn.receive(gp.realtime_audio(bytes(640)), now)
        now += 20
    assert conn.record.caller_activity and conn.record.caller_activity[-1][1] is not None  # the utterance ended
    partial_window = gp.INPUT_SAMPLE_RATE_HZ * (gemini_core.PARTIAL_EVERY_MS + 2 * gemini_core.SIGNATURE_MS) // 1000
    assert len(speech) // 2 > 8 * partial_window
    assert max(searched) <= partial_window + 320  # each search the stretch since the last, the end's too
    whole = np.frombuffer(speech, dtype="<i2")
    expected = " ".join(p.text for p in gemini_core.recognised(whole, phrases) if p.text)
    assert expected.count(" ") >= 2  # the three phrases are there to hear
    assert conn.record.transcripts[-1] == expected


def test_a_heard_note_that_comes_after_the_next_answer_marks_the_answer_it_names_as_cut() -> None:
    """The client's note of a cut waits until the model is idle, most often after its next answer, and a caller
    may have begun another utterance over that answer meanwhile: the note names the cut answer by its opening
    words, and the simulator records the cut on that one, not on the answer the newest utterance began over."""
    from voicecore.gemini.driver import _heard_note

    conn = connect(GeminiSimConfig(first_chunk_ms=0), automatic_activity_detection=False, interrupt_on_activity=False)
    events(conn)
    conn.receive(gp.activity_start(), 0)
    conn.receive(gp.activity_end(), 100)  # answered with "One two three four"
    conn.advance(200)
    conn.receive(gp.activity_start(), 400)  # the caller's words cut it (the client's decision) ...
    conn.receive(gp.activity_end(), 1200)  # ... and are answered with "Second answer"
    conn.advance(1300)
    conn.receive(gp.activity_start(), 1500)  # a backchannel over the second answer, which goes on
    conn.receive(gp.activity_end(), 1700)  # (answered too: with the first answer's words again)
    conn.advance(1800)
    first, second, third = conn.record.turns
    assert (first.text, second.text, third.text) == ("One two three four", "Second answer", "One two three four")
    note = json.loads(_heard_note(300, 1000, "One two three four"))["clientContent"]["turns"][0]["parts"][0]["text"]
    assert 'your answer that began "One two three four"' in note
    conn.receive(gp.client_content([("user", note)], turn_complete=False), 2600)
    assert first.client_cut_ms == 2600 and second.client_cut_ms is None and third.client_cut_ms is None


def test_a_heard_note_naming_an_answer_said_twice_marks_the_one_it_cut_by_how_much_was_heard() -> None:
    """The same line said twice (the safe line after two rejected answers) with an utterance begun over each: the
    note's opening words name both, and the simulator marks the one whose utterance began about as far into its
    audio as the note says the caller heard, not the newest (whose frames would then count as played after a cut)."""
    from voicecore.gemini.driver import _heard_note

    conn = connect(GeminiSimConfig(first_chunk_ms=0), automatic_activity_detection=False, interrupt_on_activity=False)
    events(conn)
    conn.receive(gp.activity_start(), 0)
    conn.receive(gp.activity_end(), 100)  # answered with "One two three four" from 100
    conn.advance(200)
    conn.receive(gp.activity_start(), 400)  # the caller's words cut it 300 ms in ...
    conn.receive(gp.activity_end(), 1200)  # ... and are answered with "Second answer"
    conn.advance(1500)
    conn.receive(gp.activity_start(), 1500)
    conn.receive(gp.activity_end(), 1700)  # answered with "One two three four" again, from 1700
    conn.advance(1800)
    conn.receive(gp.activity_start(), 3200)  # a backchannel 1.5 s into it, which goes on
    conn.receive(gp.activity_end(), 3300)
    conn.advance(3400)
    first, third = conn.record.turns[0], conn.record.turns[2]
    assert first.text == third.text == "One two three four"
    note = json.loads(_heard_note(300, 1000, "One two three four"))["clientContent"]["turns"][0]["parts"][0]["text"]
    conn.receive(gp.client_content([("user", note)], turn_complete=False), 4000)
    assert first.client_cut_ms == 4000 and third.client_cut_ms is None


def test_a_line_asked_as_written_is_said_as_written_in_the_audio_nearest_its_length() -> None:
    """As a real model told 'Say exactly: "..."' says the line (in a text turn, or a function response's
    instruction): its transcript is the line, its audio the answer whose length fits the line."""
    conn = connect(GeminiSimConfig(speed_factor=4.0, tool_rules=(ToolRule("book", on_text="BOOK"),)))
    events(conn)

    conn.receive(gp.client_content([("user", 'Say exactly: "Hi."')]), 0)
    conn.advance(10_000)
    out = events(conn)
    assert "".join(e.text for e in out if isinstance(e, gp.OutputTranscription)).split() == ["Hi."]
    short = b"".join(e.audio for e in out if isinstance(e, gp.ModelAudio))
    assert len(short) == len(ANSWERS[1].pcm24)  # the shorter answer's audio: "Hi." takes a fifth of a second
    conn.receive(gp.client_content([("user", "I want to book")]), 10_000)
    (call,) = [e for e in events(conn) if isinstance(e, gp.ToolCall)]
    instruction = 'Nothing is done yet. Ask the caller, then wait for their answer. Say exactly: "Shall I book it?"'
    conn.receive(gp.tool_response([(call.calls[0].call_id, "book", {"instruction": instruction})]), 10_010)
    conn.advance(20_000)
    words = "".join(e.text for e in events(conn) if isinstance(e, gp.OutputTranscription)).split()
    assert words == ["Shall", "I", "book", "it?"]
    conn.receive(gp.client_content([("user", "What are your hours?")]), 20_000)
    conn.advance(30_000)
    words = "".join(e.text for e in events(conn) if isinstance(e, gp.OutputTranscription)).split()
    assert words in (ANSWERS[0].text.split(), ANSWERS[1].text.split())  # anything else: its answers in turn
