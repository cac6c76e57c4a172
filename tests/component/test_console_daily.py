"""What the console's daily use reads from a call, pure: the summary of a whole agent call recorded through the
controller (tests/agent_call.py: a booking behind a confirmation, keypad or words or no answer), the heard
latency and its parts, outcome words, tool statuses, the call page's lines and gate rows on one clock, the
filters' SQL and page markers, and the export's text. The recording's tracks are checked against the store's
times: a line's moment is where its audio is in the recording."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json

import numpy as np
import pytest
from agent_call import BOOK_ARGS, QUESTION_AT_MS, QUESTION_END_MS, agent_call, write_record

from voicecore.call.record import loads
from voicecore.console import callview, export, media
from voicecore.g711 import ulaw_to_linear
from voicecore.replay import replay
from voicecore.store import summarize_record
from voicecore.store.figures import call_figures, call_latency, heard_latency, median_low, outcome_words, tool_status
from voicecore.store.query import CallFilter, QueryError, after_marker, page_marker, search_words, where
from voicecore.store.summary import carrier_of, summary_from_json, summary_to_json

DEMO = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "records" / "CA12d7ea0ef4734a81a0186375f3878962.jsonl.gz"


@pytest.fixture(scope="module")
def keypad_call():
    call = agent_call("CAkeypad", answer="keypad")
    return call, summarize_record(call.header, call.entries, "CAkeypad.jsonl", wall_end_s=1_800_000_000.0)


def as_dicts(summary):
    return [dataclasses.asdict(t) for t in summary.turns]


# --- the summary of a whole agent call ------------------------------------------------------------------------
def test_the_scripted_agent_call_is_a_real_record_that_replays_identically(keypad_call):
    call, summary = keypad_call
    assert replay(call.header, call.entries).identical
    assert summary.outcome == "hangup:completed" and summary.agent == "receptionist" and summary.complete


def test_a_keypress_that_confirms_an_action_is_kept_with_what_it_answered(keypad_call):
    call, summary = keypad_call
    assert [(k.digit, k.at_ms) for k in summary.keypresses] == [("1", call.dtmf_at_ms)]
    book, end_call = summary.tool_calls
    assert (book.name, book.answer, book.answered_by, book.answered_ms, book.started_ms) == (
        "book", "yes", "keypad 1", call.dtmf_at_ms, call.dtmf_at_ms)
    assert book.called_ms < book.asked_ms < book.answered_ms < book.result_ms and book.result_ms - book.started_ms == 300
    assert json.loads(book.arguments) == json.loads(BOOK_ARGS) and book.ran and book.ok
    assert (end_call.name, end_call.action, end_call.ran, end_call.answered_by) == ("end_call", "end_call", False, "")
    assert json.loads(end_call.reply) == {"ok": True}
    prompt = next(t for t in summary.transcripts if t.prompt == "confirm:book")
    assert prompt.text == "Shall I book a cleaning on Friday?" and prompt.speaker == "agent"


@pytest.mark.parametrize("answer, status, answered_by", [
    ("keypad no", "declined", "keypad 2"), ("words", "ran", "words"), ("none", "unanswered", "timeout")])
def test_each_answer_to_a_confirmation_and_what_became_of_the_action(answer, status, answered_by):
    call = agent_call("CAx", answer=answer)
    summary = summarize_record(call.header, call.entries, "x.jsonl")
    book = dataclasses.asdict(summary.tool_calls[0])
    assert book["answered_by"] == answered_by
    figures = tool_status(book, summary.outcome)
    assert figures["status"] == status and not figures["failed"]
    if status == "ran":
        assert figures["tool_ms"] == 300 and figures["consent_wait_ms"] == book["answered_ms"] - book["called_ms"]
    else:
        assert not book["ran"] and figures["tool_ms"] is None
        assert json.loads(book["reply"])["status"] == "not_done"


def test_speech_and_answers_are_on_the_audio_clock(keypad_call):
    call, summary = keypad_call
    first = summary.turns[0]
    # the caller spoke from QUESTION_AT_MS to QUESTION_END_MS; the model's events came 300 and 520 ms later
    assert (first.speech_began_ms, first.speech_ended_ms) == (QUESTION_AT_MS, QUESTION_END_MS)
    assert first.speech_started_ms == QUESTION_AT_MS + 300 and first.speech_stopped_ms == QUESTION_END_MS + 520
    # the answer's first frame went out 10 ms after its first write (the scripted carrier), and was heard 15 ms later
    assert first.first_audio_ms < first.first_sent_ms < first.first_played_ms
    caller_line = next(t for t in summary.transcripts if t.speaker == "caller")
    assert caller_line.spoken_ms == QUESTION_AT_MS and caller_line.at_ms > QUESTION_END_MS  # said then, known later
    for line in summary.transcripts:
        if line.speaker == "agent":
            assert line.spoken_ms is not None and line.spoken_ms < line.at_ms


def test_the_recording_has_each_line_where_the_store_says_it_was_said(keypad_call, tmp_path):
    """One clock: a caller line's moment is where the caller's voice starts in the recording's left track, an
    agent line's where the agent's starts in the right track (to the frame)."""
    call, summary = keypad_call
    record = tmp_path / "CAkeypad.jsonl"
    write_record(call, record)
    caller, agent = media.call_audio(record)

    def onset(track: bytes, from_ms: int) -> int:
        loud = np.abs(ulaw_to_linear(track[from_ms * 8:]).astype(np.int32)) > 2000
        return from_ms + int(np.argmax(loud)) // 8

    for line in summary.transcripts:
        track = caller if line.speaker == "caller" else agent
        assert abs(onset(track, line.spoken_ms - 200) - line.spoken_ms) <= 20, (line.speaker, line.text)


def test_the_demo_records_speech_end_is_the_vads_end_less_its_silence():
    header, entries = loads(gzip.open(DEMO, "rt", encoding="utf-8").read())
    summary = summarize_record(header, entries, DEMO.name)
    first = summary.turns[0]
    # server_vad with the vendor's 500 ms: the caller stopped that much before the model's audio_end_ms; both
    # placed by the caller audio the model had, which reached it at most a batch (100 ms) after it was received
    assert first.speech_stopped_ms - 600 <= first.speech_ended_ms <= first.speech_stopped_ms - 400
    latency = heard_latency(dataclasses.asdict(first))
    assert latency["ended_by"] == "audio" and latency["heard_by"] == "played"
    parts = [latency[k] for k in ("detection_ms", "model_ms", "runtime_ms", "carrier_ms")]
    assert sum(parts) == latency["total_ms"] == first.first_played_ms - first.speech_ended_ms
    assert latency["total_ms"] > first.latency_ms  # what the caller waited, not the model's speech_stopped -> audio
    assert summary.carrier == "twilio" and summary.direction == "inbound"


def test_a_summary_without_the_new_fields_reads_as_before():
    header, entries = loads(gzip.open(DEMO, "rt", encoding="utf-8").read())
    summary = summarize_record(header, entries, DEMO.name)
    data = json.loads(summary_to_json(summary))
    assert summary_from_json(summary_to_json(summary)) == summary
    for key in ("keypresses", "carrier", "direction"):
        del data[key]
    for turn in data["turns"]:
        for key in ("speech_began_ms", "speech_ended_ms", "first_sent_ms"):
            del turn[key]
    old = summary_from_json(json.dumps(data))  # what a model worker of the release before sends
    assert old.keypresses == () and old.turns[0].first_sent_ms is None and old.direction == "inbound"


@pytest.mark.parametrize("sid, carrier", [("CA" + "0a" * 16, "twilio"), ("v3:AbC-_x", "telnyx"), ("ab" * 16, "exotel"),
                                          ("7c1b4a34-6b2a-4b7e-9d3e-2f1f5f0c9a11", ""), ("CA1", "")])
def test_the_carrier_from_the_form_of_a_call_id(sid, carrier):
    assert carrier_of(sid) == carrier


def test_the_header_names_the_carrier_and_direction_when_it_has_them(keypad_call):
    call, _ = keypad_call
    summary = summarize_record({**call.header, "carrier": "plivo", "direction": "outbound"}, call.entries, "x")
    assert (summary.carrier, summary.direction) == ("plivo", "outbound")


# --- figures -------------------------------------------------------------------------------------------------
def test_heard_latency_parts_add_up_and_fall_back_for_rows_stored_before():
    turn = {"speech_ended_ms": 1000, "speech_stopped_ms": 1500, "response_requested_ms": 1600, "first_audio_ms": 2000,
            "first_sent_ms": 2050, "first_played_ms": 2120}
    latency = heard_latency(turn)
    assert (latency["total_ms"], latency["detection_ms"], latency["model_ms"], latency["runtime_ms"], latency["carrier_ms"]) == (
        1120, 600, 400, 50, 70)
    # the spine: no request of ours, the vendor answered at its speech_stopped
    assert heard_latency({**turn, "response_requested_ms": None})["detection_ms"] == 500
    # stored before migration 5: the model's speech end, no first frame sent
    old = heard_latency({"speech_stopped_ms": 1500, "first_audio_ms": 2000, "first_played_ms": 2120})
    assert (old["total_ms"], old["ended_by"], old["runtime_ms"], old["carrier_ms"]) == (620, "vad", 120, None)
    # no echo from the carrier: heard when sent
    sent = heard_latency({**turn, "first_played_ms": None})
    assert (sent["total_ms"], sent["heard_by"], sent["carrier_ms"]) == (1050, "sent", None)
    assert heard_latency({"speech_stopped_ms": 1500, "first_audio_ms": None}) is None


def test_a_calls_latency_is_its_median_and_slowest_turn():
    assert median_low([]) is None and median_low([5]) == 5 and median_low([9, 1]) == 1 and median_low([3, 1, 2]) == 2
    turns = [{"speech_ended_ms": 0, "first_played_ms": ms} for ms in (700, 400, 1200, 900)] + [{"speech_ended_ms": 0}]
    assert call_latency(turns) == {"p50_ms": 700, "max_ms": 1200, "turns": 4}
    figures = call_figures(turns + [{"barged_in_ms": 5}], [{"ran": True, "ok": False}, {"ran": True, "ok": True}],
                           [{"tag": 2, "rejected": False}, {"tag": 3, "rejected": True}, {"tag": 3, "rejected": True}], [object()])
    assert figures == {"latency_p50_ms": 700, "latency_max_ms": 1200, "bargeins": 1, "error_count": 2, "rejections": 1}


@pytest.mark.parametrize("outcome, words", [
    ("caller_hangup", "The caller hung up"), ("transfer", "Transferred to a person"),
    ("transfer_completed", "Transferred to a person"), ("hangup:completed", "The agent said goodbye and hung up"),
    ("hangup:vendor_failures", "The agent gave up: the model kept failing"),
    ("hangup:silence_gave_up", "The agent hung up: its last line could not be spoken"),
    ("hangup:max_turns", "The agent hung up (max turns)"), ("ended", "Ended without a hang-up in the record"), ("", "Unknown")])
def test_outcomes_in_words(outcome, words):
    assert outcome_words(outcome) == words


@pytest.mark.parametrize("tool, outcome, status, failed", [
    ({"ran": True, "ok": True, "started_ms": 10, "result_ms": 40}, "caller_hangup", "ran", False),
    ({"ran": True, "ok": False}, "caller_hangup", "failed", True),
    ({"ran": True, "ok": None}, "caller_hangup", "no result", False),
    ({"ran": False, "action": "end_call", "reply": '{"ok": true}'}, "hangup:completed", "ended the call", False),
    ({"ran": True, "ok": True, "action": "transfer"}, "transfer", "transferred", False),
    ({"ran": False, "action": "transfer", "reply": '{"ok": true}'}, "caller_hangup", "done", False),
    ({"ran": False, "reply": '{"error": {"type": "invalid_arguments", "message": "time: bad"}}'}, "ended", "refused", True),
    ({"ran": False, "asked_ms": 5, "answered_ms": 9, "answer": "no", "answered_by": "words"}, "ended", "declined", False),
    ({"ran": False, "asked_ms": 5, "answered_ms": 9, "answered_by": "superseded"}, "ended", "superseded", False),
    ({"ran": False, "asked_ms": 5}, "caller_hangup", "unanswered", False),
    ({"ran": False}, "caller_hangup", "no result", False)])
def test_what_became_of_a_function_the_model_called(tool, outcome, status, failed):
    figures = tool_status({"called_ms": 0, **tool}, outcome)
    assert (figures["status"], figures["failed"]) == (status, failed), figures
    if status == "ran":
        assert figures["tool_ms"] == 30 and figures["consent_wait_ms"] is None


# --- the call page's view ---------------------------------------------------------------------------------------
def stored_view(summary) -> dict:
    """The call dict as the store returns it (a round trip through SQLite), enriched as the API serves it."""
    import tempfile

    from voicecore.store import CallStore

    with tempfile.TemporaryDirectory() as tmp, CallStore.open(f"sqlite:///{tmp}/c.db") as store:
        store.ingest(summary)
        return callview.enrich(store.call(summary.call_sid))


def test_the_call_pages_lines_hold_keypresses_confirmations_and_tool_outcomes_in_the_audios_order(keypad_call):
    call, summary = keypad_call
    view = stored_view(summary)
    kinds = [(line["kind"], line["text"]) for line in view["lines"]]
    assert ("keypad", "pressed 1: yes to book") in kinds
    assert ("confirmation", "Shall I book a cleaning on Friday?") in kinds
    assert any(kind == "tool" and text.startswith("book(day Friday, service cleaning): ran after the caller's yes (keypad 1)")
               for kind, text in kinds)
    assert any(kind == "tool" and "ended the call" in text for kind, text in kinds)
    times = [line["at_ms"] for line in view["lines"]]
    assert times == sorted(times)
    order = [kind for kind, _ in kinds]
    assert order.index("confirmation") < order.index("keypad") < order.index("tool")
    # the consent's place: the booked answer comes after the keypress that allowed it
    booked = next(line for line in view["lines"] if line["text"].startswith("You are booked"))
    assert booked["at_ms"] > call.dtmf_at_ms and booked["known_ms"] > booked["at_ms"]


def test_a_spoken_yes_shows_as_the_callers_confirmation():
    call = agent_call("CAwords", answer="words")
    view = stored_view(summarize_record(call.header, call.entries, "w.jsonl"))
    (confirmation,) = [line for line in view["lines"] if line["kind"] == "confirmation" and line["speaker"] == "caller"]
    assert confirmation["text"].startswith("the caller confirmed book(") and confirmation["text"].endswith("(words)")


def test_gate_verdicts_are_one_row_per_answer_with_their_steps_folded(keypad_call):
    _, summary = keypad_call
    view = stored_view(summary)
    (answer,) = view["answers"]
    assert (answer["verdict"], answer["tag"], len(answer["steps"])) == ("approved", 4, 3)
    assert answer["text"].startswith("You are booked") and answer["citations"][0]["file"] == "services.md"
    assert [step["frames"] for step in answer["steps"]] == [20, 60, 200]
    assert view["summary"]["answers_approved"] == 1 and view["summary"]["answers_rejected"] == 0


def test_a_rejected_answer_row_says_why(keypad_call):
    _, summary = keypad_call
    verdicts = summary.verdicts + (dataclasses.replace(summary.verdicts[-1], rejected=True, reason="price not in the KB",
                                                       citations="[]", at_ms=summary.verdicts[-1].at_ms + 10),)
    view = stored_view(dataclasses.replace(summary, verdicts=verdicts))
    (answer,) = view["answers"]
    assert (answer["verdict"], answer["reason"], len(answer["steps"])) == ("rejected", "price not in the KB", 4)


def test_enrich_only_adds_keys(keypad_call):
    _, summary = keypad_call
    import tempfile

    from voicecore.store import CallStore

    with tempfile.TemporaryDirectory() as tmp, CallStore.open(f"sqlite:///{tmp}/c.db") as store:
        store.ingest(summary)
        plain = store.call(summary.call_sid)
        view = callview.enrich(store.call(summary.call_sid))
    for key, value in plain.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            assert [{k: row[k] for k in item} for item, row in zip(value, view[key])] == value, key
        else:
            assert view[key] == value, key
    assert view["latency"]["turns"] == 2 and view["turns"][0]["heard_latency_ms"] == view["turns"][0]["heard"]["total_ms"]
    assert view["tool_calls"][0]["status"] == "ran" and view["tool_calls"][1]["status"] == "ended the call"


# --- the list's filters and pages ---------------------------------------------------------------------------------
def test_filters_become_sql_with_parameters_only():
    sql, params = where(CallFilter(since_s=1.0, outcome="hangup", agent="front", carrier="twilio", direction="inbound",
                                   search="CA12 cleaning", min_latency_ms=800, errors=True, bargeins=True), "sqlite")
    assert "?" in sql and "%" not in sql and "cleaning" not in sql and "front" not in sql
    assert params[:2] == [1.0, "%"] and 800 in params and '"ca12"* "cleaning"*' in params
    assert "c.error_count > 0" in sql and "c.bargeins > 0" in sql
    pg_sql, pg_params = where(CallFilter(search="kronor 199"), "postgresql")
    assert "to_tsquery('simple', ?)" in pg_sql and pg_params == ["kronor:* & 199:*"]
    id_sql, id_params = where(CallFilter(search="CA12_d"), "sqlite")
    assert "LIKE" in id_sql and id_params[0] == "ca12\\_d%"  # a call id's wildcard characters are literal
    assert where(CallFilter(search="!!!"), "sqlite") == ("WHERE 1 = 0 ", [])  # nothing to search for: nothing found
    assert where(CallFilter(), "sqlite") == ("", [])
    assert search_words("Öppet på LÖRDAG? 10:00") == ["öppet", "på", "lördag", "10", "00"]


def test_a_page_marker_round_trips_and_a_forged_one_is_refused():
    marker = page_marker({"started_at": 1_800_000_000.123456, "id": 42})
    sql, params = after_marker(marker)
    assert params == [1_800_000_000.123456, 1_800_000_000.123456, 42] and "c.id < ?" in sql
    for bad in ("", "x_1", "1.5_y", "1.5"):
        with pytest.raises(QueryError):
            after_marker(bad)


# --- the export -----------------------------------------------------------------------------------------------------
def test_the_csv_export_is_rfc4180_in_utc_and_never_a_formula():
    row = {"id": 1, "call_sid": "CA1", "started_at": 0.0, "ended_at": 61.5, "duration_ms": 61500, "direction": "inbound",
           "carrier": "twilio", "agent": "=HYPERLINK(\"http://x\")", "control": "turns", "turns": 3, "latency_p50_ms": 640,
           "latency_max_ms": None, "bargeins": 1, "error_count": 0, "rejections": 0, "outcome": "hangup:completed",
           "complete": True, "cursor": "0.0_1"}
    text = export.to_csv([row, {**row, "agent": "-5", "call_sid": "@CA2"}]).decode()
    assert text.count("\r\n") == 3
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == list(export.CSV_COLUMNS)
    assert rows[0]["agent"] == "'=HYPERLINK(\"http://x\")" and rows[1]["agent"] == "-5" and rows[1]["call_sid"] == "'@CA2"
    assert rows[0]["started_at"] == "1970-01-01T00:00:00.000+00:00" and rows[0]["ended_at"] == "1970-01-01T00:01:01.500+00:00"
    assert rows[0]["latency_max_ms"] == "" and rows[0]["outcome_text"] == "The agent said goodbye and hung up"
    assert rows[0]["complete"] == "true"
    data = json.loads(export.to_json([row]))
    assert data["calls"][0]["agent"] == row["agent"] and "cursor" not in data["calls"][0] and "id" not in data["calls"][0]
    assert export.filename("csv", 0.0) == "calls-19700101-000000.csv"
