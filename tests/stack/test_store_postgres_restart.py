"""A PostgreSQL store killed (SIGKILL of its postmaster) and started again under a running node: the calls that
were live through it, and ended while it was down, are all in the store afterwards, each once, with its turns
and its live events numbered without a hole; nothing on the audio path noticed (every call ran to its end).
With record files and without them (the store spool). The PostgreSQL is pgserver's, through the chaos bench's
own wrapper (bench/postgres.py), on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pytest
from stacks import start_stack
from waiting import wait_until

from voicecore.demo import FIRST_QUESTION_AT_MS
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.store import CallStore
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration

CALLS = 4
CALL_MS = 9_000
STAGGER_S = 1.0
KILL_AT_S = 7.0  # every call live, none ended yet
DOWN_S = 6.0  # every call ends while PostgreSQL is down (they end at 9 to 12 s)


@pytest.fixture
def postgres():
    pytest.importorskip("pgserver")
    from bench.postgres import BenchPostgres
    from voicecore.demo import free_port

    with tempfile.TemporaryDirectory(prefix="voicecore-pg-restart-") as tmp:
        server = BenchPostgres(Path(tmp), free_port())
        try:
            server.create()
            yield server
        finally:
            server.stop()


def script() -> CallScript:
    return CallScript(duration_ms=CALL_MS, utterances=((FIRST_QUESTION_AT_MS, load_clip("caller_basic_price")),))


def recorder_stats(running) -> dict:
    status, body = get_from_gateway(running.config, "/metrics")
    assert status == 200
    return json.loads(body).get("workers", {}).get("recorder", {})


def read_store(url: str, call_sids: list[str]) -> dict[str, tuple[list[str], int, list[dict]]]:
    """call_sid -> (its parts' sources, its turns, its events), for those of ``call_sids`` stored."""
    found = {}
    with CallStore.open(url) as store:
        for sid in call_sids:
            call = store.call(sid)
            if call is not None:
                found[sid] = (call["sources"], len(call.get("turns") or ()), store.events(sid))
    return found


def whole(found: dict, call_sids: list[str]) -> bool:
    return all(sid in found and found[sid][1] and found[sid][2] and found[sid][2][-1]["type"] == "call.ended"
               for sid in call_sids)


@pytest.mark.parametrize("record_calls", [True, False], ids=["records", "no-record-files"])
def test_calls_that_ended_while_postgres_was_down_are_all_stored_once_with_turns_and_events(postgres, record_calls):
    running = start_stack(database_url=postgres.url, record_calls=record_calls)
    try:
        wait_until(lambda: recorder_stats(running).get("store_errors") is not None, 10, "the recorder's stats",
                   detail=running.log_tail)

        async def scenario():
            async def one(k: int):
                await asyncio.sleep(k * STAGGER_S)
                return await place_call(running.config.base_url, running.config.twilio_auth_token, script())

            async def outage():
                await asyncio.sleep(KILL_AT_S)
                assert postgres.kill() is not None
                await asyncio.sleep(DOWN_S)
                await asyncio.to_thread(postgres.start)

            async with running.model_sim():
                results, _ = await asyncio.gather(asyncio.gather(*(one(k) for k in range(CALLS))), outage())
            return results

        results = asyncio.run(scenario())
        assert all(r.closed_by == "carrier" and not r.errors for r in results), [(r.closed_by, r.errors) for r in results]
        sids = [r.call_sid for r in results]

        found: dict = {}

        def stored() -> bool:
            nonlocal found
            found = read_store(postgres.url, sids)
            return whole(found, sids)

        wait_until(stored, 60, "every call, its turns and events to call.ended in the store", detail=running.log_tail)
        for sid in sids:
            sources, turns, events = found[sid]
            assert len(sources) == 1, (sid, sources)  # once: one record or one spool file
            assert turns >= 1
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), (sid, [e["seq"] for e in events])
            assert events[0]["type"] == "call.started"
            assert len({(e["type"], e["t_ms"], e["data"]) for e in events}) == len(events), "an event stored twice"
        with CallStore.open(postgres.url) as store:
            assert len([c for c in store.calls(limit=1000) if c["call_sid"] in sids]) == CALLS
        # the live events of the outage were kept and stored late (not derived from the files, not lost); the
        # recorder's stats reach the gateway every second
        stats = wait_until(lambda: (r := recorder_stats(running)).get("events_stored_late", 0) > 0 and r, 5,
                           "the recorder's stats: events stored late", detail=lambda: str(recorder_stats(running)))
        assert stats["store_outages"] >= 1 and stats["events_not_stored"] == 0, stats
        log = running.log_path.read_text(errors="replace")
        assert log.count("call store failed") + log.count("call store cannot be opened") <= stats["store_outages"], \
            "the outage is logged once, not per call or per retry"
        # the gateway's and the model worker's store writes fail open, and say so once per outage, not per call
        assert log.count("its normal end not written") <= 1 and log.count("its state not written") <= 1, \
            [line for line in log.splitlines() if "not written" in line]
    finally:
        running.stop()

