"""The call store: a record -> CallSummary (pure), and the same store suite over a real SQLite file and a
real PostgreSQL server (started here with pgserver; those params are marked integration).

The records (a scripted call on a fake clock, and one real record from `voicecore demo`) are tests/records.py's.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from voicecore.call.record import loads
from voicecore.config import ConfigError, load_config
from voicecore.store import CallStore, StoreError, database_url_for, summarize_record
from voicecore.store import schema

from records import DEMO_RECORD, MS, scripted_call, summary_of


# --- summarize_record: pure -----------------------------------------------------------------------------
def test_a_turns_call_summarized_turn_by_turn_with_its_timing_model():
    call = scripted_call()
    summary = summarize_record(call.header, call.entries, source="CA1.jsonl", wall_end_s=1_800_000_000.0)
    speaking_ms = call.request_ms + 1000
    assert (summary.call_sid, summary.control, summary.flow, summary.agent) == ("CA1", "turns", "agent", "receptionist")
    assert summary.duration_ms == speaking_ms + 2000 and summary.outcome == "caller_hangup" and summary.complete
    assert summary.started_at == pytest.approx(1_800_000_000.0 - summary.duration_ms / 1000)
    first, second = summary.turns
    assert (first.speech_started_ms, first.speech_stopped_ms, first.transcript) == (1000, 2000, "Book a cleaning please")
    assert first.response_requested_ms == 2100  # the first request after the utterance (the one that called the tool)
    # the caller's wait ends with the answer after the tool: r2 called the tool and had no audio
    assert (first.response_id, first.first_audio_ms, first.latency_ms) == ("r3", call.request_ms + 300, call.request_ms + 300 - 2000)
    assert first.barged_in_ms == call.cancel_ms and first.truncated_at_ms is not None and first.truncated_at_ms > 0
    assert first.agent_text == "You are booked for a cleaning."
    # the playout snapshot at the barge-in: 20 frames of the answer's tag played, the 20th done at speaking_ms
    assert (first.first_played_ms, first.played_ms) == (speaking_ms - 20 * 20, 20 * 20)
    assert (second.first_played_ms, second.played_ms) == (None, None)
    assert (second.speech_started_ms, second.transcript, second.first_audio_ms, second.barged_in_ms) == (
        speaking_ms, "No wait, make it Friday", None, None)
    assert [(t.speaker, t.text) for t in summary.transcripts] == [
        ("agent", "Hello, Smile Dental."), ("caller", "Book a cleaning please"), ("agent", "You are booked for a cleaning."),
        ("caller", "No wait, make it Friday")]
    (tool,) = summary.tool_calls
    assert (tool.call_id, tool.name, tool.called_ms, tool.ran, tool.ok, tool.output, tool.result_ms) == (
        "call_1", "book", 2400, True, True, '{"booked": true}', 2600)
    assert json.loads(tool.arguments) == {"service": "cleaning"}
    (verdict,) = summary.verdicts
    assert (verdict.rejected, verdict.reason, verdict.at_ms) == (True, "number not in the knowledge base", speaking_ms + 1700)
    assert json.loads(verdict.citations) == [{"file": "prices.md", "line": 3}]
    (error,) = summary.errors
    assert (error.code, error.message, error.at_ms) == ("response_cancel_not_active", "no active response", speaking_ms + 1800)


def test_the_outcome_is_the_drivers_end_reason():
    call = scripted_call(end="none")
    assert summarize_record(call.header, call.entries, "a").outcome == "ended"

    def with_out(action: dict) -> str:
        entries = call.entries + [{"t": call.entries[-1]["t"] + MS, "k": "out", "a": action},
                                  {"t": call.entries[-1]["t"] + 2 * MS, "k": "out", "a": {"type": "CallOver", "reason": "x"}}]
        return summarize_record(call.header, entries, "a").outcome

    assert with_out({"type": "HangUp", "reason": "goodbye"}) == "hangup:goodbye"  # the first end wins
    assert with_out({"type": "Transfer", "target": "+15550123"}) == "transfer"
    assert with_out({"type": "CallOver", "reason": "caller_hangup"}) == "caller_hangup"


def test_summarize_is_pure_and_reads_a_record_it_did_not_write():
    call = scripted_call()
    text = "\n".join(json.dumps(line) for line in [call.header, *call.entries]) + "\n"
    header, entries = loads(text)
    before = json.dumps(entries)
    assert summarize_record(header, entries, "s", 5.0) == summarize_record(header, entries, "s", 5.0)
    assert json.dumps(entries) == before  # the entries are not changed


def test_a_real_demo_record_spine_control():
    header, entries = loads(gzip.open(DEMO_RECORD, "rt", encoding="utf-8").read())
    summary = summarize_record(header, entries, DEMO_RECORD.name, wall_end_s=1000.0)
    # the carrier's stop ended it (the spine returns no CallOver for it): the caller hung up, as its events say
    assert (summary.control, summary.flow, summary.agent, summary.outcome) == ("spine", "", "", "caller_hangup")
    assert 14_000 <= summary.duration_ms <= 16_000
    first, second = summary.turns
    # the spine lets the server create responses: nothing is requested by the driver
    assert first.response_requested_ms is None and first.speech_started_ms < first.speech_stopped_ms < first.first_audio_ms
    assert 0 < first.latency_ms < 2000 and 0 < second.latency_ms < 2000
    # the caller's second utterance barged in on the first answer; the truncate says how much was heard
    assert first.barged_in_ms is not None and first.speech_stopped_ms < first.barged_in_ms <= second.speech_started_ms + 50
    assert first.truncated_at_ms is not None and first.truncated_at_ms > 0 and second.barged_in_ms is None
    assert [t.speaker for t in summary.transcripts] == ["agent", "agent", "agent"]  # the greeting and two answers
    assert summary.transcripts[0].text.startswith("Hello")
    assert first.agent_text == summary.transcripts[1].text and summary.tool_calls == () and summary.errors == ()


# --- the store: the same suite over SQLite and PostgreSQL ----------------------------------------------
@pytest.fixture(scope="module")
def postgres_url():
    pgserver = pytest.importorskip("pgserver")
    import psycopg

    with tempfile.TemporaryDirectory(prefix="voicecore-pg-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")
        admin = server.get_uri()
        counter = iter(range(1_000_000))

        def fresh() -> str:
            """A new empty database on the server: each test starts from nothing."""
            name = f"calls_{os.getpid()}_{next(counter)}"
            with psycopg.connect(admin, autocommit=True) as connection:
                connection.execute(f"CREATE DATABASE {name}")
            return admin.replace("/postgres?", f"/{name}?", 1)

        try:
            yield fresh
        finally:
            server.cleanup()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/calls.db"
    return request.getfixturevalue("postgres_url")()


def test_ingest_twice_stores_once(store_url):
    summary = summary_of("CA1", 1_800_000_000.0)
    with CallStore.open(store_url) as store:
        assert store.ingest(summary) is True
        assert store.ingest(summary) is False
        assert [c["call_sid"] for c in store.calls()] == ["CA1"]
    with CallStore.open(store_url) as store:  # another process, later: still known
        assert store.ingest(summary) is False and store.has_source("CA1.jsonl")
        assert len(store.calls()) == 1


def test_a_calls_turns_timings_transcript_tools_verdicts_and_errors_round_trip(store_url):
    summary = summary_of("CA1", 1_800_000_000.0)
    with CallStore.open(store_url) as store:
        store.ingest(summary)
        call = store.call("CA1")
    assert call is not None
    assert (call["call_sid"], call["control"], call["agent"], call["outcome"], call["complete"], call["sources"]) == (
        "CA1", "turns", "receptionist", "caller_hangup", True, ["CA1.jsonl"])
    assert call["started_at"] == pytest.approx(summary.started_at) and call["duration_ms"] == summary.duration_ms
    assert call["ended_at"] == pytest.approx(1_800_000_000.0)
    expected_turns = [{**{k: v for k, v in dataclasses.asdict(t).items()}, "latency_ms": t.latency_ms} for t in summary.turns]
    assert call["turns"] == expected_turns
    assert call["turns"][0]["barged_in_ms"] is not None and call["turns"][0]["latency_ms"] > 0
    assert call["transcript"] == [dataclasses.asdict(t) for t in summary.transcripts]
    assert call["tool_calls"] == [dataclasses.asdict(t) for t in summary.tool_calls]
    assert call["tool_calls"][0]["ok"] is True and call["tool_calls"][0]["ran"] is True
    assert call["verdicts"] == [dataclasses.asdict(v) for v in summary.verdicts] and call["verdicts"][0]["rejected"] is True
    assert call["errors"] == [dataclasses.asdict(e) for e in summary.errors]


def test_calls_newest_first_since_and_limit(store_url):
    with CallStore.open(store_url) as store:
        for n, end in enumerate((1000.0, 3000.0, 2000.0)):
            store.ingest(summary_of(f"CA{n}", end))
        assert [c["call_sid"] for c in store.calls()] == ["CA1", "CA2", "CA0"]
        assert all(c["turns"] == 2 and c["outcome"] == "caller_hangup" for c in store.calls())
        since = store.calls(since_s=2000.0 - 30)  # the calls last about 12 s: CA2 started after, CA0 before
        assert [c["call_sid"] for c in since] == ["CA1", "CA2"]
        assert [c["call_sid"] for c in store.calls(limit=1)] == ["CA1"]
        assert store.call("CA404") is None


def test_purge_deletes_old_calls_and_all_their_rows_but_remembers_their_records(store_url):
    day = 86400.0
    now = 1_800_000_000.0
    with CallStore.open(store_url) as store:
        store.ingest(summary_of("CAold", now - 40 * day))
        store.ingest(summary_of("CAnew", now - 1 * day))
        assert store.purge(30, now_s=now) == 1
        assert [c["call_sid"] for c in store.calls()] == ["CAnew"] and store.call("CAold") is None
        for table in ("turns", "transcripts", "tool_calls", "verdicts", "errors"):
            count = store.backend.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            assert count == {"turns": 2, "transcripts": 4, "tool_calls": 1, "verdicts": 1, "errors": 1}[table], table
        assert store.ingest(summary_of("CAold", now - 40 * day)) is False  # its record is still on disk: not again
        assert store.purge(30, now_s=now) == 0


def test_a_call_recorded_in_parts_is_its_latest_part_naming_every_record(store_url):
    with CallStore.open(store_url) as store:
        store.ingest(dataclasses.replace(summary_of("CA7", 1000.0, "CA7.jsonl.part"), complete=False))
        store.ingest(summary_of("CA7", 2000.0, "CA7-2.jsonl"))
        call = store.call("CA7")
        assert call["sources"] == ["CA7-2.jsonl", "CA7.jsonl.part"] and call["complete"] is True
        assert call["ended_at"] == pytest.approx(2000.0)
        assert [c["complete"] for c in store.calls()] == [True, False]


def test_migrations_run_once_and_opening_again_changes_nothing(store_url):
    with CallStore.open(store_url) as store:
        assert store.schema_version() == schema.LATEST_VERSION == len(schema.MIGRATIONS)
        store.ingest(summary_of("CA1", 1000.0))
    for _ in range(2):
        with CallStore.open(store_url) as store:
            assert store.migrate() == schema.LATEST_VERSION
            assert store.backend.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == schema.LATEST_VERSION
            assert [c["call_sid"] for c in store.calls()] == ["CA1"]


def test_an_ingest_that_fails_halfway_leaves_nothing(store_url):
    good = summary_of("CA1", 1000.0)
    bad = dataclasses.replace(good, source="bad.jsonl", transcripts=good.transcripts + (
        dataclasses.replace(good.transcripts[0], speaker="operator"),))  # the CHECK constraint refuses it
    with CallStore.open(store_url) as store:
        with pytest.raises(Exception):
            store.ingest(bad)
        assert store.calls() == [] and not store.has_source("bad.jsonl")
        assert store.ingest(good) is True


def test_the_sqlite_store_is_private_and_in_wal_mode(tmp_path):
    with CallStore.open(f"sqlite:///{tmp_path}/calls.db") as store:
        assert store.backend.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.backend.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert stat.S_IMODE((tmp_path / "calls.db").stat().st_mode) == 0o600


def test_store_urls_and_the_default_store():
    with pytest.raises(StoreError):
        CallStore.open("mysql://x")
    with pytest.raises(StoreError):
        CallStore.open("sqlite:////no/such/directory/calls.db")
    assert database_url_for(load_config({})) == ""
    assert database_url_for(load_config({"VOICECORE_RECORD_DIR": "/var/rec"})) == "sqlite:///var/rec/calls.db"
    url = "postgresql://u@db/calls"
    assert database_url_for(load_config({"VOICECORE_RECORD_DIR": "/var/rec", "VOICECORE_DATABASE_URL": url})) == url
    assert load_config({"VOICECORE_RETENTION_DAYS": "30"}).retention_days == 30
    for bad in ({"VOICECORE_DATABASE_URL": "mysql://x"}, {"VOICECORE_RETENTION_DAYS": "-1"}):
        with pytest.raises(ConfigError):
            load_config(bad)


def test_a_response_after_the_answer_is_done_is_not_the_turns_answer():
    """A silence check-in after the answer played belongs to no turn (it is in the transcript only)."""
    def model(at_ms: int, **fields) -> dict:
        return {"t": at_ms * MS, "k": "model", "text": json.dumps(fields), "p": [0, 0, 0, 0, 0, 0]}

    entries = [{"t": 0, "k": "start"},
               model(1000, type="input_audio_buffer.speech_started", item_id="u1"),
               model(1500, type="input_audio_buffer.speech_stopped", item_id="u1"),
               model(1600, type="response.created", response={"id": "rA"}),
               model(1700, type="response.output_audio.delta", response_id="rA", delta=""),
               model(1800, type="response.output_audio_transcript.done", response_id="rA", transcript="Sure."),
               model(1810, type="response.done", response={"id": "rA"}),
               model(9000, type="response.created", response={"id": "rB"}),
               model(9100, type="response.output_audio.delta", response_id="rB", delta=""),
               model(9200, type="response.output_audio_transcript.done", response_id="rB", transcript="Still there?")]
    (turn,) = summarize_record({"voicecore_record": 1, "control": "spine", "call_sid": "CA2"}, entries, "x").turns
    assert (turn.response_id, turn.first_audio_ms, turn.latency_ms, turn.agent_text) == ("rA", 1700, 200, "Sure.")


def test_a_version_1_store_is_migrated_keeping_its_calls(tmp_path):
    url = f"sqlite:///{tmp_path}/calls.db"
    store = CallStore(__import__("voicecore.store.db", fromlist=["_backend_for"])._backend_for(url))
    db = store.backend
    with db.transaction():
        db.execute(schema.SCHEMA_VERSION_TABLE)
        for statement in schema.migration_sql(1, "sqlite"):
            db.execute(statement)
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (1, 0)")
        # a call as version 1 stored it (its turns without the playout columns)
        db.execute("INSERT INTO sources (name, ingested_at) VALUES ('CAv1.jsonl', 0)")
        db.execute("INSERT INTO calls (source, call_sid, control, flow, agent, started_at, duration_ms, outcome, complete) "
                   "VALUES ('CAv1.jsonl', 'CAv1', 'turns', 'agent', 'a', 1000.0, 5000, 'ended', 1)")
        db.execute("INSERT INTO turns (call_id, idx, speech_started_ms, speech_stopped_ms, transcript, response_requested_ms, "
                   "response_id, first_audio_ms, barged_in_ms, truncated_at_ms, agent_text) "
                   "VALUES (1, 0, 100, 900, 'hello', 950, 'r1', 1400, NULL, NULL, 'hi')")
    store.close()
    with CallStore.open(url) as store:
        assert store.schema_version() == schema.LATEST_VERSION
        turns = store.call("CAv1")["turns"]
        assert [t["latency_ms"] for t in turns] == [500] and store.last_seq("CAv1") == 0
        assert turns[0]["first_played_ms"] is None and turns[0]["played_ms"] is None  # rows from before: unknown


def test_a_stream_token_is_claimed_once_across_stores_sharing_the_database(store_url):
    """Two nodes' gateways sharing one store: the first INSERT of a nonce wins, every later one is a replay."""
    with CallStore.open(store_url) as node_a, CallStore.open(store_url) as node_b:
        assert node_b.claim_stream_token("ab" * 16, "CA1", "node-a", "node-b", 1060.0, now_s=1000.0) is True
        assert node_a.claim_stream_token("ab" * 16, "CA1", "node-a", "node-a", 1060.0, now_s=1001.0) is False
        assert node_b.claim_stream_token("ab" * 16, "CA1", "node-a", "node-b", 1060.0, now_s=1002.0) is False
        assert node_a.claim_stream_token("cd" * 16, "CA2", "node-b", "node-a", 1070.0, now_s=1003.0) is True
        assert node_a.purge_stream_tokens(1065.0) == 1
        assert node_b.claim_stream_token("ab" * 16, "CA1", "node-a", "node-b", 1060.0) is True  # purged: gone
        assert node_b.claim_stream_token("cd" * 16, "CA2", "node-b", "node-b", 1070.0) is False


def test_a_live_calls_state_is_kept_newest_first_read_by_any_node_and_gone_when_dropped_or_expired(store_url):
    """The model worker serving a call writes its state as it changes; another node's worker reads it after a
    re-attach (workers/model/call_states.py)."""
    with CallStore.open(store_url) as node_a, CallStore.open(store_url) as node_b:
        assert node_b.call_state("CA1") is None
        node_a.save_call_state("CA1", "node-a", '{"format": 1, "turn": 1}', 5000.0, now_s=1000.0)
        node_a.save_call_state("CA1", "node-a", '{"format": 1, "turn": 2}', 5010.0, now_s=1010.0)
        node_a.save_call_state("CA2", "node-a", '{"format": 1}', 1100.0, now_s=1010.0)
        assert node_b.call_state("CA1", now_s=1020.0) == {"node": "node-a", "state": '{"format": 1, "turn": 2}',
                                                          "updated_at": 1010.0}
        assert node_b.call_state("CA2", now_s=1200.0) is None  # expired: no re-attach can come for it any more
        assert node_b.purge_call_states(1200.0) == 1
        node_b.drop_call_state("CA1")
        assert node_a.call_state("CA1", now_s=1020.0) is None


def test_events_are_kept_in_order_once_each_and_say_which_calls_are_live(store_url):
    with CallStore.open(store_url) as store:
        rows = [("CAlive", 1, 100.0, 0, "call.started", '{"agent":"a"}'),
                ("CAlive", 2, 100.5, 500, "turn.caller_started", '{"item_id":"i1"}'),
                ("CAdone", 1, 90.0, 0, "call.started", "{}"),
                ("CAdone", 2, 95.0, 5000, "call.ended", '{"outcome":"ended"}')]
        store.add_events(rows)
        store.add_events(rows[1:2] + [("CAlive", 3, 101.0, 1000, "bargein", '{"tag":2}')])  # seq 2 again: kept as it was
        assert store.last_seq("CAlive") == 3 and store.last_seq("CAnone") == 0
        assert [e["seq"] for e in store.events("CAlive")] == [1, 2, 3]
        assert [(e["seq"], e["type"], e["data"]) for e in store.events("CAlive", after_seq=1)] == [
            (2, "turn.caller_started", '{"item_id":"i1"}'), (3, "bargein", '{"tag":2}')]
        assert [c["call_sid"] for c in store.live_calls(now_s=200.0)] == ["CAlive"]
        assert store.live_calls(now_s=200.0 + 7 * 3600) == []  # older than the window: not live, cut off
        assert store.purge(1, now_s=100.2 + 86400) == 0  # no calls rows; events before the cutoff go
        assert [e["seq"] for e in store.events("CAlive")] == [2, 3]


def test_api_keys_are_stored_hashed_shown_once_and_revocable(store_url):
    with CallStore.open(store_url) as store:
        key = store.add_api_key("ops")
        assert key.startswith("vck_") and len(key) > 40
        assert store.api_key_name(key) == "ops" and store.api_key_name(key + "x") is None and store.api_key_name("") is None
        stored = store.backend.execute("SELECT key_hash FROM api_keys").fetchone()[0]
        assert key not in stored and len(stored) == 64
        with pytest.raises(StoreError):
            store.add_api_key("ops")
        assert store.revoke_api_key("ops") is True and store.revoke_api_key("ops") is False
        assert store.api_key_name(key) is None
        assert [k["name"] for k in store.api_keys()] == ["ops"] and store.api_keys()[0]["revoked_at"] is not None


def test_calls_filter_by_time_outcome_and_agent(store_url):
    with CallStore.open(store_url) as store:
        for sid, end, outcome, agent in (("CA1", 1000.0, "hangup:goodbye", "front"), ("CA2", 2000.0, "transfer", "front"),
                                         ("CA3", 3000.0, "caller_hangup", "shop")):
            store.ingest(dataclasses.replace(summary_of(sid, end), outcome=outcome, agent=agent))
        assert [c["call_sid"] for c in store.calls(outcome="hangup")] == ["CA1"]
        assert [c["call_sid"] for c in store.calls(outcome="transfer")] == ["CA2"]
        assert [c["call_sid"] for c in store.calls(agent="front")] == ["CA2", "CA1"]
        first = store.calls(outcome="caller_hangup")[0]["started_at"]
        assert [c["call_sid"] for c in store.calls(until_s=first)] == ["CA2", "CA1"]
        assert store.agents() == ["front", "shop"]


# --- migration 5: what the console's daily use reads, on both backends ---------------------------------------------
def agent_summary(call_sid: str = "CAagent", answer: str = "keypad"):
    from agent_call import agent_call

    call = agent_call(call_sid, answer=answer)
    return summarize_record(call.header, call.entries, f"{call_sid}.jsonl", wall_end_s=1_800_000_000.0)


def test_a_confirmed_booking_round_trips_with_its_keypress_consent_and_clock(store_url):
    summary = agent_summary()
    with CallStore.open(store_url) as store:
        store.ingest(summary)
        call = store.call("CAagent")
        (row,) = store.calls()
    assert call["keypresses"] == [dataclasses.asdict(k) for k in summary.keypresses] and call["keypresses"][0]["digit"] == "1"
    assert call["turns"] == [{**dataclasses.asdict(t), "latency_ms": t.latency_ms} for t in summary.turns]
    assert call["transcript"] == [dataclasses.asdict(t) for t in summary.transcripts]
    assert call["tool_calls"] == [dataclasses.asdict(t) for t in summary.tool_calls]
    assert call["tool_calls"][0]["answered_by"] == "keypad 1" and call["tool_calls"][1]["action"] == "end_call"
    assert call["verdicts"] == [dataclasses.asdict(v) for v in summary.verdicts] and call["verdicts"][0]["frames"] == 20
    assert isinstance(call["errors"], list)  # the detail's errors stay the list of model errors
    heard = [t["first_played_ms"] - t["speech_ended_ms"] for t in call["turns"]]
    assert (row["latency_p50_ms"], row["latency_max_ms"]) == (min(heard), max(heard))
    assert (row["bargeins"], row["error_count"], row["rejections"], row["carrier"], row["direction"]) == (0, 0, 0, "", "inbound")


def many_calls(store, count: int = 30) -> None:
    """``count`` calls a minute apart (CA00 newest), agents, carriers and words in turn; every 5th with an error."""
    base = summary_of("CAbase", 1_800_000_000.0)
    for n in range(count):
        transcripts = tuple(dataclasses.replace(t, text=f"{t.text} {('cleaning', 'whitening', 'Öppettider')[n % 3]}")
                            for t in base.transcripts)
        turns = tuple(dataclasses.replace(t, first_played_ms=None if t.first_played_ms is None else t.first_played_ms + 100 * n)
                      for t in base.turns)
        store.ingest(dataclasses.replace(
            base, source=f"CA{n:02d}.jsonl", call_sid=f"CA{n:02d}", started_at=1_800_000_000.0 - 60 * n,
            agent=("front", "shop")[n % 2], carrier=("twilio", "telnyx", "")[n % 3], transcripts=transcripts, turns=turns,
            errors=base.errors if n % 5 == 0 else (), verdicts=() if n % 4 else base.verdicts,
            direction="outbound" if n == 7 else "inbound"))


def sids(rows) -> list[str]:
    return [row["call_sid"] for row in rows]


def test_search_finds_calls_by_their_words_and_by_their_ids_beginning(store_url):
    from voicecore.store.query import CallFilter

    with CallStore.open(store_url) as store:
        many_calls(store)
        assert sids(store.calls(filter=CallFilter(search="whitening"))) == [f"CA{n:02d}" for n in range(1, 30, 3)]
        assert sids(store.calls(filter=CallFilter(search="WHITEN"))) == [f"CA{n:02d}" for n in range(1, 30, 3)]  # a prefix
        assert store.count_calls(CallFilter(search="öppettider")) == 10  # letters beyond ASCII, any case
        assert store.count_calls(CallFilter(search="cleaning please")) == 30  # every word, anywhere in the call
        assert store.count_calls(CallFilter(search="cleaning zebra")) == 0
        assert sids(store.calls(filter=CallFilter(search="ca2"))) == [f"CA{n:02d}" for n in range(20, 30)]  # id, any case
        assert sids(store.calls(filter=CallFilter(search="CA07"))) == ["CA07"]
        assert store.count_calls(CallFilter(search="' OR 1=1 --")) == 0  # words, never SQL


def test_filters_by_agent_carrier_direction_latency_errors_and_bargeins(store_url):
    from voicecore.store.query import CallFilter

    with CallStore.open(store_url) as store:
        many_calls(store)
        assert store.count_calls(CallFilter(agent="shop")) == 15
        assert sids(store.calls(filter=CallFilter(carrier="telnyx", agent="front"))) == [f"CA{n:02d}" for n in range(4, 30, 6)]
        assert sids(store.calls(filter=CallFilter(direction="outbound"))) == ["CA07"]
        slowest = {row["call_sid"]: row["latency_max_ms"] for row in store.calls(limit=100)}
        floor = slowest["CA10"]
        assert sids(store.calls(filter=CallFilter(min_latency_ms=floor))) == [f"CA{n:02d}" for n in range(10, 30)]
        assert sids(store.calls(filter=CallFilter(errors=True))) == [f"CA{n:02d}" for n in range(0, 30, 5)]
        assert store.count_calls(CallFilter(bargeins=True)) == 30
        assert store.carriers() == ["", "telnyx", "twilio"]
        assert sids(store.calls(filter=CallFilter(since_s=1_800_000_000.0 - 60 * 9 - 30, agent="front", search="whitening"))) == [
            "CA04"]  # all at once: the newest ten, front's, with that word


def test_pages_follow_one_another_without_a_gap_or_a_repeat_while_calls_arrive(store_url):
    from voicecore.store.query import CallFilter

    with CallStore.open(store_url) as store:
        many_calls(store)
        first = store.calls(limit=12)
        store.ingest(dataclasses.replace(summary_of("CAnew", 1_800_000_100.0)))  # newer than all: not in later pages
        second = store.calls(limit=12, after=first[-1]["cursor"])
        third = store.calls(limit=12, after=second[-1]["cursor"])
        assert sids(first + second + third) == [f"CA{n:02d}" for n in range(30)] and len(third) == 6
        assert store.calls(limit=12, after=third[-1]["cursor"]) == []
        filtered = CallFilter(agent="front")
        page = store.calls(filter=filtered, limit=4)
        rest = store.calls(filter=filtered, limit=100, after=page[-1]["cursor"])
        assert sids(page + rest) == [f"CA{n:02d}" for n in range(0, 30, 2)]


def test_a_purged_call_is_no_longer_found_by_its_words(store_url):
    from voicecore.store.query import CallFilter

    with CallStore.open(store_url) as store:
        many_calls(store, 6)
        assert store.purge(1, now_s=1_800_000_000.0 - 60 * 2.5 + 86400) == 3  # CA03..CA05 started more than a day before
        assert sids(store.calls(filter=CallFilter(search="whitening"))) == ["CA01"]  # CA04 is gone, and its words
        text_rows = store.backend.execute("SELECT COUNT(*) FROM call_text").fetchone()[0]
        assert text_rows == 3


def test_a_version_4_store_is_migrated_with_its_calls_counted_and_searchable(store_url):
    """A store as migration 4 left it, with a call in it: migration 5 fills the list's columns and the index."""
    from voicecore.store.db import _backend_for
    from voicecore.store.query import CallFilter

    store = CallStore(_backend_for(store_url))
    db = store.backend
    with db.transaction():
        db.execute(schema.SCHEMA_VERSION_TABLE)
        for version in range(1, 5):
            for statement in schema.migration_sql(version, db.dialect):
                db.execute(statement)
            db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)", (version,))
        ids = []
        for n, sid in enumerate(("CA" + "0f" * 16, "v3:abc"), start=1):
            db.execute("INSERT INTO sources (name, ingested_at) VALUES (?, 0)", (f"{sid}.jsonl",))
            ids.append(db.execute("INSERT INTO calls (source, call_sid, control, flow, agent, started_at, duration_ms, outcome, "
                                  "complete) VALUES (?, ?, 'turns', 'agent', 'a', ?, 9000, 'caller_hangup', 1) RETURNING id",
                                  (f"{sid}.jsonl", sid, 1000.0 * n)).fetchone()[0])
        assert ids[0] == 1
        for idx, (stopped, played, barged) in enumerate(((900, 1500, None), (3000, 3400, 3600), (5000, 6200, None))):
            db.execute("INSERT INTO turns (call_id, idx, speech_started_ms, speech_stopped_ms, transcript, response_requested_ms, "
                       "response_id, first_audio_ms, barged_in_ms, truncated_at_ms, agent_text, first_played_ms, played_ms) "
                       "VALUES (1, ?, 100, ?, 'x', NULL, 'r', ?, ?, NULL, 'y', ?, 100)", (idx, stopped, played - 50, barged, played))
        db.execute("INSERT INTO transcripts (call_id, idx, speaker, text, at_ms) VALUES (1, 0, 'caller', 'Do you open on Saturdays', 950)")
        db.execute("INSERT INTO transcripts (call_id, idx, speaker, text, at_ms) VALUES (1, 1, 'agent', 'We open at nine', 1600)")
        db.execute("INSERT INTO errors (call_id, idx, code, message, at_ms) VALUES (1, 0, 'x', 'y', 10)")
        db.execute("INSERT INTO tool_calls (call_id, idx, tool_call_id, name, arguments, called_ms, ran, ok, output, result_ms) "
                   "VALUES (1, 0, 'c1', 'book', '{}', 10, 1, 0, 'no', 20)")
        db.execute("INSERT INTO verdicts (call_id, idx, tag, rejected, reason, citations, at_ms) VALUES (1, 0, 3, 1, 'r', '[]', 5)")
        db.execute("INSERT INTO verdicts (call_id, idx, tag, rejected, reason, citations, at_ms) VALUES (1, 1, 3, 1, 'r', '[]', 6)")
    store.close()
    with CallStore.open(store_url) as store:
        assert store.schema_version() == schema.LATEST_VERSION
        rows = {row["call_sid"]: row for row in store.calls()}
        old = rows["CA" + "0f" * 16]
        # heard latencies 600, 400, 1200 (played - the model's speech end): median 600, slowest 1200
        assert (old["latency_p50_ms"], old["latency_max_ms"], old["bargeins"], old["error_count"], old["rejections"]) == (
            600, 1200, 1, 2, 1)
        assert (old["carrier"], old["direction"], rows["v3:abc"]["carrier"]) == ("twilio", "inbound", "telnyx")
        assert rows["v3:abc"]["latency_p50_ms"] is None and rows["v3:abc"]["error_count"] == 0
        assert sids(store.calls(filter=CallFilter(search="saturdays nine"))) == ["CA" + "0f" * 16]
        call = store.call("CA" + "0f" * 16)
        assert call["keypresses"] == [] and call["transcript"][0]["spoken_ms"] is None and call["transcript"][0]["prompt"] == ""
        store.ingest(summary_of("CAafter", 5000.0))  # and calls stored after the migration are searchable too
        assert sids(store.calls(filter=CallFilter(search="Friday"))) == ["CAafter"]
