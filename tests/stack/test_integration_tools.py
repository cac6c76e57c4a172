"""An agent's tools through the real stack (supervisord, gateway, pacer, model worker, its tool pool),
simulated callers and model, and the fake tool API on loopback (tests/agents/isolation).

Four concurrent calls: two book the same slot at the same moment, one's Python tool hangs (killed at its
timeout), one's crashes its process (SIGSEGV). What each call got back is read from its record (the tool
results are recorded inputs), what reached the API from the fake API's log, and what the pool did from
the model worker's counters on /metrics.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from stacks import start_stack

from voicecore.agent.actions import canonical_arguments, idempotency_key
from voicecore.agent.scenario import load_scenario
from voicecore.demo import fetch_gateway_metrics, free_port, record_paths, replay_records, run_calls, wait_for_records
from voicecore.record import load_record
from voicecore.sim.model import SimConfig
from voicecore.sim.tool_server import ToolServer

pytestmark = pytest.mark.integration

AGENT = Path(__file__).resolve().parents[1] / "agents" / "isolation"
BOOKING = '{"service": "cleaning", "date": "2026-11-26", "time": "10:00"}'


def tool_results(record: Path) -> list[tuple[bool, dict]]:
    """(ok, output) of every tool result the call got, in order."""
    _, entries, _ = load_record(record)
    return [(bool(e["ok"]), json.loads(e["output"])) for e in entries if e["k"] == "tool"]


def test_two_calls_booking_one_slot_send_two_keys_and_a_hung_or_crashed_tool_costs_only_its_own_call(monkeypatch):
    port = free_port()
    monkeypatch.setenv("ISOLATION_API", f"http://127.0.0.1:{port}")  # the stack inherits it; the agent's URL reads it
    scenario = load_scenario(AGENT)
    running = start_stack(agent=str(AGENT))
    try:
        async def calls():
            server = ToolServer(scenario.routes)
            await server.start(port=port)
            try:
                async with running.model_sim(SimConfig(turns=scenario.sim_turns)):
                    return await run_calls(running.config, 4, 18.0, scenario=scenario), server
            finally:
                await server.stop()

        results, server = asyncio.run(calls())
        metrics = fetch_gateway_metrics(running.config)
        sids = [r.call_sid for r in results]
        assert all(r.closed_by == "carrier" for r in results), running.log_tail()
        assert all(r.statistics.stale_frames == 0 for r in results)

        # Two bookings of the same slot by two callers: two requests, two keys, each its own call's.
        bookings = [r for r in server.requests if r.path == "/appointments"]
        assert len(bookings) == 2, running.log_tail()
        by_call = {r.headers["x-voicecore-call"]: r.headers["idempotency-key"] for r in bookings}
        assert set(by_call) == set(sids[:2])
        assert len(set(by_call.values())) == 2
        for sid, key in by_call.items():
            assert key == idempotency_key(sid, "book", canonical_arguments(BOOKING))

        record_dir = Path(running.config.record_dir)
        wait_for_records(record_dir, sids)
        records = {sid: record_paths(record_dir, [sid])[0] for sid in sids}
        booked_a, booked_b, hung, crashed = (tool_results(records[sid]) for sid in sids)
        # The bookers got their bookings and their goodbye tool's answer: the hang and the crash cost them nothing.
        for results_of_call in (booked_a, booked_b):
            assert [ok for ok, _ in results_of_call] == [True, True]
            assert results_of_call[0][1] == {"booked": True} and results_of_call[1][1]["noted"] is True
        # The hung tool's call: a timeout (killed), then the pool still ran its goodbye tool.
        assert [ok for ok, _ in hung] == [False, True]
        assert hung[0][1]["error"]["type"] == "timeout" and hung[1][1]["call"] == sids[2]
        # The crashed tool's call: a crashed error naming the signal, then its goodbye tool ran.
        assert [ok for ok, _ in crashed] == [False, True]
        assert crashed[0][1]["error"]["type"] == "crashed" and "SIGSEGV" in crashed[0][1]["error"]["message"]

        model = metrics.get("workers", {}).get("model", {})
        assert model.get("tool_runs_killed") == 1 and model.get("tool_runs_crashed") == 1, model
        assert model.get("tool_processes") == running.config.tool_processes  # both were replaced

        identical, problems = replay_records(list(records.values()))
        assert identical == 4, problems
    finally:
        running.stop()
