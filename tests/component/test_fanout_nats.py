"""The fleet's observer fan-out: the message (voicecore/observe/fleet.py, pure) and the NATS publisher and
subscription (voicecore/observe/transport.py) against a real nats-server on 127.0.0.1: another node's
batches arrive, a node's own are skipped, a publisher started before the server delivers once it is up,
and one whose queue overflowed meanwhile drops the oldest batches, counted."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from nats_server import start_nats, stop_nats

from voicecore.observe import fleet
from voicecore.observe.numbering import rows_chunks
from voicecore.observe.transport import FleetPublisher, FleetSubscription
from voicecore.demo import free_port

ROWS = [("CAa", 1, 1_800_000_000.5, 0, "call.started", '{"agent":""}'),
        ("CAa", 2, 1_800_000_001.25, 750, "transcript.delta", '{"role":"agent","text":"Hi","final":false}')]


def rows_text(rows=ROWS) -> str:
    [(count, text)] = list(rows_chunks(rows))
    assert count == len(rows)
    return text


def test_a_batch_round_trips_with_its_node():
    payload = fleet.encode("node-a", rows_text())
    assert orjson.loads(payload)["v"] == 1
    assert fleet.decode(payload) == ("node-a", ROWS)


@pytest.mark.parametrize("payload", [
    b"", b"nope", b"[]", b'{"v":2,"node":"a","rows":[]}', b'{"v":1,"node":"","rows":[]}', b'{"v":1,"node":"a"}',
    b'{"v":1,"node":"a","rows":[["CAa",0,1.0,0,"call.started","{}"]]}',  # seq starts at 1
    b'{"v":1,"node":"a","rows":[["CAa",1,1.0,0,"call.started",{}]]}',  # data is JSON text
    b'{"v":1,"node":"a","rows":[["CAa",1,1.0,0,"call.started"]]}',
])
def test_what_is_not_a_batch_is_refused(payload):
    assert fleet.decode(payload) is None


def test_servers_from_the_setting():
    assert fleet.servers(" nats://a:4222, nats://b:4222 ,") == ["nats://a:4222", "nats://b:4222"]


async def wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}", pytrace=False)
        await asyncio.sleep(0.02)


@pytest.mark.integration
def test_another_nodes_batches_arrive_and_our_own_are_skipped():
    server, url = start_nats()
    try:
        async def scenario():
            received: list = []
            console_b = FleetSubscription(url, "node-b", received.extend)
            task = asyncio.create_task(console_b.run())
            await wait_for(lambda: console_b.counters["fanout_connected"], 10, "the console's connection")
            await asyncio.sleep(0.2)  # the SUB reaches the server
            recorder_a, recorder_b = FleetPublisher(url, "node-a"), FleetPublisher(url, "node-b")
            try:
                recorder_b.publish(rows_text([("CAb", 1, 1.0, 0, "call.started", "{}")]))  # node B's own: skipped
                recorder_a.publish(rows_text())
                await wait_for(lambda: received, 10, "node A's batch at node B's console")
                await asyncio.sleep(0.3)
            finally:
                await asyncio.to_thread(recorder_a.close)
                await asyncio.to_thread(recorder_b.close)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            return received, console_b.counters, recorder_a.counters

        received, console_counters, publisher_counters = asyncio.run(scenario())
        assert received == ROWS
        assert console_counters["fanout_received"] == 2 and console_counters["fanout_malformed"] == 0
        assert publisher_counters["fanout_published"] == 1 and publisher_counters["fanout_dropped"] == 0
    finally:
        stop_nats(server)


@pytest.mark.integration
def test_a_publisher_started_before_the_server_delivers_once_it_is_up_dropping_the_oldest_beyond_its_queue():
    port = free_port()
    recorder = FleetPublisher(f"nats://127.0.0.1:{port}", "node-a", max_queued=3)
    server = None
    try:
        for seq in range(1, 6):  # 5 batches, room for 3: the first two go
            recorder.publish(rows_text([("CAq", seq, 1.0, 0, "call.started", "{}")]))
        assert recorder.counters["fanout_dropped"] == 2 and recorder.counters["fanout_connected"] == 0
        server, url = start_nats(port)

        async def scenario():
            received: list = []
            console = FleetSubscription(url, "node-b", received.extend)
            task = asyncio.create_task(console.run())
            await wait_for(lambda: console.counters["fanout_connected"], 10, "the console's connection")
            await asyncio.sleep(0.2)
            recorder.publish(rows_text([("CAq", 6, 1.0, 0, "call.started", "{}")]))  # wakes the publisher too
            await wait_for(lambda: any(row[1] == 6 for row in received), 15, "the batches after the server came up")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return received

        received = asyncio.run(scenario())
        # the subscription began after the publisher connected: what it sees is what came after it subscribed
        assert [row[1] for row in received][-1] == 6 and all(row[1] >= 3 for row in received)
        assert recorder.counters["fanout_connected"] == 1
    finally:
        recorder.close()
        if server is not None:
            stop_nats(server)
