"""The model worker frees an ended call's session by reference counting, at the call's end (the soak bench's
memory must stay flat: docs/explanation/measured.md#soak).

A session that kept its cancelled task formed a reference cycle (session -> task -> CancelledError ->
traceback -> run()'s frame -> session) that only the cyclic collector frees; in the serving worker its full
passes are rare, so every ended call's session, driver, socket and buffers piled up between them (the 1 h
soak's model worker: +9% RSS). Here calls start and end through ModelWorker.reconcile, the way the arena
tells it, with the collector off: every session must be gone once its task has finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import socket
import weakref

import pytest

from voicecore.agent.load import load_configured_agent
from voicecore.carriers.exotel.protocol import ExotelStreamProtocol
from voicecore.carriers.plivo.protocol import PlivoStreamProtocol
from voicecore.carriers.telnyx.protocol import TelnyxStreamProtocol
from voicecore.carriers.vonage.protocol import VonageStreamProtocol
from voicecore.config import load_config
from voicecore.shm import control as C
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.carriers.twilio.stream import TwilioStreamProtocol, wire_templates
from workers.model.main import RECORD_WRITER, ModelWorker

LAYOUT = ArenaLayout(max_calls=4, in_slots=8, out_slots=16, wire_slots=8, wire_slot_bytes=384)


def closed_port() -> int:
    """A loopback port nothing listens on: the sessions' model connections fail at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sid(prefix: str, n: int) -> str:
    return f"{prefix}{n:032x}"


async def churn(worker: ModelWorker, arena: Arena, calls: int) -> list[weakref.ref]:
    sessions = []
    for n in range(calls):
        slot = n % LAYOUT.max_calls
        arena.claim_slot(slot, sid("MZ", n), sid("CA", n), wire_templates(sid("MZ", n)))
        worker.reconcile()
        session = worker.calls[slot]
        sessions.append(weakref.ref(session))
        del session
        await asyncio.sleep(0.01)  # its task runs: a connection attempt, refused, then the reconnect wait
        arena.set_slot_state(slot, C.SLOT_ENDING)
        worker.reconcile()
        arena.set_slot_state(slot, C.SLOT_FREE)
    for _ in range(5):
        await asyncio.sleep(0)  # the cancelled tasks finish
    return sessions


@pytest.mark.parametrize("records", [False, True], ids=["no-records", "records"])
def test_ended_sessions_are_freed_without_the_cyclic_collector(tmp_path, records):
    # The model is unreachable, so no session ever starts: with records on, each call's record is finished
    # all the same (its part file used to stay open, and the recorder's sink, a method of the session, kept
    # the session in a cycle).
    base = load_config({})
    record_dir = str(tmp_path / "records") if records else ""
    config = dataclasses.replace(base, runtime_dir=str(tmp_path / "run"), record_dir=record_dir,
                                 realtime_url=f"ws://127.0.0.1:{closed_port()}/v1/realtime", send_call_id_to_vendor=True)
    (tmp_path / "run").mkdir()
    agent = load_configured_agent(config, {})
    arena = Arena.create(LAYOUT, directory=str(tmp_path))

    async def main() -> list[weakref.ref]:
        worker = ModelWorker(config, agent)
        worker.arena = arena
        try:
            return await churn(worker, arena, 40)
        finally:
            assert not worker.calls  # every call ended
            worker.ship_events()  # the ended calls' last events (no recorder listens: dropped, counted)
            assert not worker.carrier_calls and not worker.tool_tasks and not worker.observed
            worker.bus.close()
            worker.follower.close()

    gc.collect()
    gc.disable()
    try:
        sessions = asyncio.run(main())
        RECORD_WRITER.submit(lambda: None).result(timeout=30)  # the records' last writes are done
        alive = sum(1 for ref in sessions if ref() is not None)
    finally:
        gc.enable()
        arena.close()
    assert alive == 0, f"{alive} of {len(sessions)} ended sessions still in memory (a reference cycle)"
    if records:
        # every call's record finished, none left as an open part file
        assert not list((tmp_path / "records").glob("*.part"))
        assert len(list((tmp_path / "records").glob("*.jsonl"))) == len(sessions)
        assert not [fd for fd in open_files() if fd.startswith(str(tmp_path / "records"))]


def open_files() -> list[str]:
    """What this process's file descriptors point to."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return out


@pytest.mark.parametrize("protocol_class", [TwilioStreamProtocol, ExotelStreamProtocol, PlivoStreamProtocol,
                                            TelnyxStreamProtocol, VonageStreamProtocol])
def test_an_ended_stream_protocol_is_freed_without_the_cyclic_collector(protocol_class):
    # The gateway's per-call carrier protocols each kept a dict of their own bound methods (a cycle per call).
    gc.collect()
    gc.disable()
    try:
        protocol = protocol_class()
        ref = weakref.ref(protocol)
        del protocol
        assert ref() is None
    finally:
        gc.enable()
