"""The gateway's events socket welcomes a subscriber that connects after a call started: a real Gateway object, its
real ZeroMQ sockets on ipc in a temp runtime dir and a real arena (no stack, no processes).

A PUB drops what it publishes before a subscriber's connection is up, so a model worker that connected a moment
after a call's start never learnt the call's carrier ids (CI saw its hang-up fail, "carrier ids are unknown");
the gateway now hears each subscription (XPUB) and publishes the live calls' starts again for it."""

from __future__ import annotations

import asyncio
import time

import zmq

from voicecore.bus import messages
from voicecore.bus.transport import EVENTS, Bus
from voicecore.config import load_config
from voicecore.shm.arena import Arena, ArenaLayout
from workers.gateway.main import Gateway

LAYOUT = ArenaLayout(max_calls=2, in_slots=8, out_slots=16, wire_slots=8, wire_slot_bytes=384)


def _received(sock: zmq.Socket, bus: Bus, gateway: Gateway, within_s: float) -> list[messages.Message]:
    deadline = time.monotonic() + within_s
    got: list[messages.Message] = []
    while time.monotonic() < deadline and not got:
        gateway.on_subscriber()  # what the gateway's loop runs when the socket is readable
        got = bus.receive_nowait(sock)
        time.sleep(0.01)
    return got


def test_a_subscriber_that_connects_after_a_call_started_is_sent_the_calls_start(tmp_path):
    arena = Arena.create(LAYOUT, directory=str(tmp_path))
    runtime = tmp_path / "run"
    runtime.mkdir()
    config = load_config({"VOICECORE_MAX_CALLS": "2", "VOICECORE_RUNTIME_DIR": str(runtime),
                          "VOICECORE_TWILIO_AUTH_TOKEN": "test-token"})
    gateway = Gateway(config, runtime, arena, asyncio.Event())
    started = messages.CallStarted(0, 1, "CA1", "MZ1", "AC1", "telnyx", "v3:call-control-id", "")
    gateway.started_messages[0] = started
    gateway.bus.send(gateway.events, started)  # published while nobody listens: lost, as a PUB loses it
    late = Bus(runtime)
    sock = late.connect(zmq.SUB, EVENTS)
    try:
        got = _received(sock, late, gateway, within_s=5)
        assert [m for m in got if isinstance(m, messages.CallStarted)] == [started]
        assert gateway.counters["subscribers_welcomed"] == 1
        gateway.on_subscriber()  # nothing new: no second welcome
        assert gateway.counters["subscribers_welcomed"] == 1
    finally:
        sock.close(0)
        late.close()
        gateway.bus.close()
        arena.close()
        arena.unlink()
