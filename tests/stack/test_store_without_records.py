"""The call store without record files (record_calls false): each call's summary, turns and events reach the
store live from the model worker, through the store spool in the runtime directory; a summary spooled while
the recorder is stopped, and then killed, is stored by the recorder supervisord starts next. With records on
(the default) a call is in the store exactly once, though the recorder is told of it and also lists it."""

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
from voicecore.store import CallStore, database_url_for
from voicecore.store import spool
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration


def short_call() -> CallScript:
    """The greeting, then one question: one caller turn, in 9 s."""
    return CallScript(duration_ms=9_000, utterances=((FIRST_QUESTION_AT_MS, load_clip("caller_basic_price")),))


def place_one(running) -> str:
    async def call():
        async with running.model_sim():
            return await place_call(running.config.base_url, running.config.twilio_auth_token, short_call())
    result = asyncio.run(call())
    assert result.closed_by == "carrier", running.log_tail()
    return result.call_sid


def stored_whole(store: CallStore, call_sid: str) -> bool:
    """The call, its turns, and its events to the end, in the store."""
    call = store.call(call_sid)
    events = store.events(call_sid)
    return bool(call and call.get("turns") and events and events[-1]["type"] == "call.ended")


def calls_named(store: CallStore, call_sid: str) -> int:
    return sum(1 for c in store.calls(limit=1000) if c["call_sid"] == call_sid)


def recorder_alive(running) -> bool:
    return bool(json.loads(get_from_gateway(running.config, "/healthz")[1])["workers_alive"].get("recorder"))


def recorder_stats(running) -> dict:
    status, body = get_from_gateway(running.config, "/metrics")
    assert status == 200
    return json.loads(body).get("workers", {}).get("recorder", {})


def test_without_records_the_store_gets_each_call_live_and_a_spooled_call_survives_a_killed_recorder():
    running = start_stack(record_calls=False)
    store = None
    try:
        record_dir = Path(running.config.record_dir)
        spool_dir = spool.spool_dir(running.config.runtime_dir)
        wait_until(lambda: recorder_alive(running), 10, "the recorder's heartbeat at the gateway", detail=running.log_tail)
        store = CallStore.open(database_url_for(running.config))  # <record_dir>/calls.db, as with records

        first = place_one(running)
        wait_until(lambda: stored_whole(store, first), 10, "the call, its turns and events in the store", detail=running.log_tail)
        call = store.call(first)
        assert call["sources"] == [name for name in call["sources"] if spool.is_spooled(name)] and len(call["sources"]) == 1
        assert any(t["speaker"] == "agent" and t["text"] for t in call["transcript"]), call["transcript"]  # the words, as the tier keeps them
        events = store.events(first)
        assert events[0]["type"] == "call.started" and [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert not list(record_dir.glob("*.jsonl*")), "no record file is written"
        wait_until(lambda: not spool.listing(spool_dir), 5, "the spool emptied once the call is stored")
        assert not spool.part_listing(spool_dir)  # the summary so far (every 5 s) is removed once the call ends

        # The recorder stopped for a whole call, then killed: what it had queued (the call's live events, the
        # message naming its summary) dies with it; the spool file does not.
        recorder_pid = running.stack.program_pids()["recorder"]
        os.kill(recorder_pid, signal.SIGSTOP)
        try:
            second = place_one(running)
            wait_until(lambda: spool.listing(spool_dir), 10, "the second call's summary in the spool", detail=running.log_tail)
            assert store.call(second) is None
        finally:
            os.kill(recorder_pid, signal.SIGKILL)
        wait_until(lambda: running.stack.program_pids().get("recorder") not in (None, recorder_pid), 10,
                   "supervisord restarting the recorder", detail=running.log_tail)
        wait_until(lambda: stored_whole(store, second), 10, "the spooled call, its turns and events in the store",
                   detail=running.log_tail)
        assert not spool.listing(spool_dir)
        # the new recorder found it in the spool at start (its message died with the old one), events and all
        stats = wait_until(lambda: (r := recorder_stats(running)).get("spooled_calls_stored", 0) >= 1 and r, 5,
                           "the new recorder's stats at the gateway")
        assert stats["spooled_calls_stored"] == 1 and stats["events_derived"] >= 2 and stats.get("spooled_unreadable", 0) == 0
        events = store.events(second)  # from the spool file: the same walk as live, numbered from 1
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and events[0]["type"] == "call.started"
        assert calls_named(store, first) == 1 and calls_named(store, second) == 1
        assert not list(record_dir.glob("*.jsonl*"))
    finally:
        if store is not None:
            store.close()
        running.stop()


def test_with_records_a_call_is_in_the_store_exactly_once():
    running = start_stack()
    store = None
    try:
        record_dir = Path(running.config.record_dir)
        wait_until(lambda: recorder_alive(running), 10, "the recorder's heartbeat at the gateway", detail=running.log_tail)
        store = CallStore.open(database_url_for(running.config))
        sid = place_one(running)
        wait_until(lambda: stored_whole(store, sid), 10, "the call, its turns and events in the store", detail=running.log_tail)
        assert store.call(sid)["sources"] == [f"{sid}.jsonl"] and (record_dir / f"{sid}.jsonl").is_file()
        assert not spool.listing(spool.spool_dir(running.config.runtime_dir))  # a recorded call is never spooled
        # a restarted recorder offers every record again (its listing at start): still one call
        recorder_pid = running.stack.program_pids()["recorder"]
        os.kill(recorder_pid, signal.SIGKILL)
        wait_until(lambda: running.stack.program_pids().get("recorder") not in (None, recorder_pid), 10,
                   "supervisord restarting the recorder", detail=running.log_tail)
        wait_until(lambda: recorder_alive(running), 10, "the new recorder's heartbeat", detail=running.log_tail)
        time.sleep(1.0)  # its first listing runs at once; give it the time to (not) store the call again
        assert calls_named(store, sid) == 1 and store.call(sid)["sources"] == [f"{sid}.jsonl"]
        events = store.events(sid)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # no event stored twice
    finally:
        if store is not None:
            store.close()
        running.stop()
