"""The recorder worker in a real stack with records on: finished calls reach the call store (SQLite under
the record directory) with their turns within seconds, a corrupt record is logged and skipped, and a part
file left behind by a killed writer is finished (or removed, if unreadable) when the recorder starts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest
from stacks import start_stack
from waiting import wait_until

from voicecore.demo import FIRST_QUESTION_AT_MS
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.record import load_record
from voicecore.store import CallStore, database_url_for, summarize_record
from voicecore.processes import cpu_seconds
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration

TWO_DAYS_S = 2 * 86_400
CORRUPT = "CAcorrupt00000000000000000000000000.jsonl"
STALE_SID = "CAstale000000000000000000000000000"
JUNK_PART = "CAjunk0000000000000000000000000000.jsonl.part"


def short_call() -> CallScript:
    """The greeting, then one question: one caller turn, in 9 s."""
    return CallScript(duration_ms=9_000, utterances=((FIRST_QUESTION_AT_MS, load_clip("caller_basic_price")),))


def turns_stored(store: CallStore, call_sid: str) -> int:
    call = store.call(call_sid)
    return len(call.get("turns") or ()) if call else 0


def recorder_stats(running) -> dict:
    status, body = get_from_gateway(running.config, "/metrics")
    assert status == 200
    return json.loads(body).get("workers", {}).get("recorder", {})


def test_finished_calls_reach_the_store_corrupt_records_are_skipped_and_stale_parts_are_finished():
    running = start_stack()
    store = None
    try:
        record_dir = Path(running.config.record_dir)
        url = database_url_for(running.config)
        assert url.startswith("sqlite:///") and url.endswith(f"{record_dir}/calls.db")
        status, body = get_from_gateway(running.config, "/healthz")
        assert status == 200
        wait_until(lambda: json.loads(get_from_gateway(running.config, "/healthz")[1])["workers_alive"].get("recorder"),
                   10, "the recorder's heartbeat at the gateway", detail=running.log_tail)
        recorder_pid = running.stack.program_pids()["recorder"]

        # Not a record at all, dropped in with the real ones: the recorder names it once (when a listing finds it)
        # and goes on.
        (record_dir / CORRUPT).write_bytes(b'{"voicecore_record": 1, "call_sid": "CAcorrupt\n\x00\x01 not json\n')

        async def calls():
            async with running.model_sim():
                return await asyncio.gather(*(place_call(running.config.base_url, running.config.twilio_auth_token, short_call())
                                              for _ in range(2)))

        results = asyncio.run(calls())
        ended = time.monotonic()
        sids = [r.call_sid for r in results]
        assert all(r.closed_by == "carrier" for r in results), running.log_tail()

        store = CallStore.open(url)
        wait_until(lambda: all(turns_stored(store, sid) >= 1 for sid in sids), 10,
                   "both calls in the store with their turns", detail=running.log_tail)
        assert (record_dir / "calls.db").is_file()  # SQLite, under the record directory
        print(f"\nrecorder: both calls stored with turns {time.monotonic() - ended:.2f} s after the calls ended")
        for sid in sids:
            call = store.call(sid)
            assert call["call_sid"] == sid
            assert (record_dir / f"{sid}.jsonl").exists()  # the record stays: it is the replay format
        listed = {c["call_sid"] for c in store.calls()}
        assert set(sids) <= listed
        assert "CAcorrupt" not in "".join(listed)

        stats = wait_until(lambda: (s := recorder_stats(running)).get("calls_ingested", 0) >= 2 and s, 5,
                           "the recorder's stats at the gateway")
        # stored from the summaries the model worker built during the calls, not by reading the files, and the
        # same as reading them would give
        assert stats["summaries_received"] == 2 and stats.get("summaries_malformed", 0) == 0
        for sid in sids:
            header, entries, complete = load_record(record_dir / f"{sid}.jsonl")
            from_file = summarize_record(header, entries, f"{sid}.jsonl", 0.0, complete)
            stored = store.call(sid)
            assert [{k: t[k] for k in ("speech_started_ms", "first_audio_ms", "first_played_ms", "played_ms", "transcript")}
                    for t in stored["turns"]] == [
                {"speech_started_ms": t.speech_started_ms, "first_audio_ms": t.first_audio_ms, "first_played_ms": t.first_played_ms,
                 "played_ms": t.played_ms, "transcript": t.transcript} for t in from_file.turns]
            assert stored["duration_ms"] == from_file.duration_ms and len(stored["transcript"]) == len(from_file.transcripts)
        print(f"recorder: ingest ms per call {stats['ingest_per_call_ms']:.2f} (max {stats['ingest_max_ms']:.2f}), "
              f"{stats['calls_ingested']:.0f} calls; recorder CPU so far {cpu_seconds(recorder_pid) * 1000:.0f} ms")

        # A writer killed two days ago left a part file (cut off mid-line) and one with nothing readable.
        good = (record_dir / f"{sids[0]}.jsonl").read_text().splitlines()
        header = json.loads(good[0])
        header["call_sid"] = STALE_SID
        stale_part = record_dir / f"{STALE_SID}.jsonl.part"
        stale_part.write_text("\n".join([json.dumps(header), *good[1:]]) + "\n" + good[-1][: len(good[-1]) // 2])
        junk_part = record_dir / JUNK_PART
        junk_part.write_bytes(b"\x00garbage")
        fresh_part = record_dir / "CAfresh000000000000000000000000000.jsonl.part"  # a call still running
        fresh_part.write_text(json.dumps(header) + "\n")
        two_days_ago = time.time() - TWO_DAYS_S
        for part in (stale_part, junk_part):
            os.utime(part, (two_days_ago, two_days_ago))

        # The stale-part rule runs at the recorder's start: stop it; supervisord starts a new one.
        os.kill(recorder_pid, signal.SIGTERM)
        wait_until(lambda: running.stack.program_pids().get("recorder") not in (None, recorder_pid), 10,
                   "supervisord restarting the recorder", detail=running.log_tail)
        finished = record_dir / f"{STALE_SID}.jsonl"
        wait_until(lambda: finished.exists() and not stale_part.exists() and not junk_part.exists(), 10,
                   "the stale part files finished or removed", detail=running.log_tail)
        assert fresh_part.exists()  # a part file written to lately belongs to a live call: untouched
        assert abs(finished.stat().st_mtime - two_days_ago) < 1  # retention counts from when the call last wrote
        assert (finished.stat().st_mode & 0o777) == 0o600
        assert len(finished.read_text().splitlines()) == len(good)  # every complete line, not the cut-off one
        wait_until(lambda: turns_stored(store, STALE_SID) >= 1, 10, "the finished record in the store",
                   detail=running.log_tail)
        assert all(turns_stored(store, sid) >= 1 for sid in sids)  # a restart re-offers all; nothing is lost or doubled
        # the corrupt file no model worker announced: the listing at the new recorder's start found it
        wait_until(lambda: CORRUPT in running.log_tail(200_000), 5, "the corrupt record named in the log",
                   detail=running.log_tail)
        corrupt_lines = [line for line in running.log_tail(200_000).splitlines() if CORRUPT in line]
        assert len(corrupt_lines) == 1, corrupt_lines  # once: never retried in a loop
        assert "skipped" in corrupt_lines[0]
        stats = wait_until(lambda: (s := recorder_stats(running)).get("records_unreadable", 0) >= 1 and s, 5,
                           "the new recorder's stats at the gateway")
        assert stats["records_unreadable"] == 1
        # the stale call never sent live events (it never ran here): its events come from its record, the same
        # walk as live, so they match the live calls' events in kind and order
        derived = store.events(STALE_SID)
        live = store.events(sids[0])
        assert [e["seq"] for e in derived] == list(range(1, len(derived) + 1)) and derived[0]["type"] == "call.started"
        assert [e["type"] for e in derived] == [e["type"] for e in live][: len(derived)]
        assert live[-1]["type"] == "call.ended" and [e["seq"] for e in live] == list(range(1, len(live) + 1))
        assert len([c for c in store.calls() if c["call_sid"] in sids]) == 2
    finally:
        if store is not None:
            store.close()
        running.stop()
