"""Control-bus sockets: private runtime dir, exclusive binds, messages across real ipc sockets."""

import contextlib
import os
import socket
import time

import pytest
import zmq

from voicecore.bus import messages
from voicecore.bus.transport import (Bus, BusError, DoorbellSender, bind_doorbell, claim_socket_path, ensure_runtime_dir,
                                     read_doorbells)
from waiting import wait_until


def test_runtime_dir_is_created_private(tmp_path):
    directory = ensure_runtime_dir(tmp_path / "run")
    assert (directory.stat().st_mode & 0o777) == 0o700


def test_runtime_dir_open_to_others_is_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o755)
    with pytest.raises(BusError, match="accessible by others"):
        ensure_runtime_dir(open_dir)


def test_second_bind_to_a_live_path_is_refused_and_a_stale_one_is_replaced(tmp_path):
    first = Bus(tmp_path)
    first.bind(zmq.PULL, "x.sock")
    second = Bus(tmp_path)
    try:
        with pytest.raises(BusError, match="live process"):
            second.bind(zmq.PULL, "x.sock")
    finally:
        second.close()
    # A crashed owner leaves its socket file behind: the next bind takes the path over.
    stale = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(stale))
    sock.close()
    claim_socket_path(stale)
    assert not stale.exists()
    first.close()


@contextlib.contextmanager
def pull_and_push(tmp_path):
    """A bound PULL inbox and a PUSH connected to it, each on a Bus of its own: (server, inbox, client, outbox)."""
    server, client = Bus(tmp_path), Bus(tmp_path)
    inbox = server.bind(zmq.PULL, "inbox.sock")
    outbox = client.connect(zmq.PUSH, "inbox.sock")
    try:
        yield server, inbox, client, outbox
    finally:
        client.close()
        server.close()


def test_messages_travel_and_garbage_is_counted_not_raised(tmp_path):
    with pull_and_push(tmp_path) as (server, inbox, client, outbox):
        client.send(outbox, messages.CancelTag(1, 2, 3, 4))
        outbox.send(b"\x93garbage")
        received = []

        def both_arrived() -> bool:
            if inbox.poll(50):
                received.extend(server.receive_nowait(inbox))
            return bool(received) and server.rejected >= 1

        wait_until(both_arrived, 5, "the message and the garbage to arrive")
        assert received == [messages.CancelTag(1, 2, 3, 4)]
        assert server.rejected == 1


def test_send_all_carries_many_messages_in_few_sends_in_order(tmp_path):
    with pull_and_push(tmp_path) as (server, inbox, client, outbox):
        deltas = [messages.TranscriptDelta(1, 2, 3, f" word{i}", i) for i in range(40)]
        done = messages.TranscriptDone(1, 2, 3, "x" * 63_000, 40)  # with the deltas, more than one message holds
        sent = [*deltas, done, messages.CancelTag(1, 2, 3, 4)]
        assert client.send_all(outbox, [messages.encode(x) for x in sent]) == len(sent)
        assert client.send_all(outbox, [messages.encode(deltas[0])]) == 1  # alone: sent as itself
        received, raw_messages = [], []

        def all_arrived() -> bool:
            while inbox.poll(50):
                raw = inbox.recv()
                raw_messages.append(raw)
                received.extend(messages.decode_all(raw))
            return len(received) >= len(sent) + 1

        wait_until(all_arrived, 5, "the batches to arrive")
        assert received == [*sent, deltas[0]]
        assert len(raw_messages) == 3  # two batches (a message's size apart) and the lone message
        assert messages.decode(raw_messages[-1]) == deltas[0]
        assert server.rejected == 0 and client.dropped_sends == 0


def test_receive_nowait_reads_a_batch_and_counts_its_bad_message(tmp_path):
    with pull_and_push(tmp_path) as (server, inbox, client, outbox):
        good = messages.CancelTag(1, 2, 3, 4)
        not_a_map = b"\x07"  # msgpack's 7: read, and rejected on its own
        outbox.send(messages.encode_batch([messages.encode(good), not_a_map, messages.encode(good)]))
        received = []

        def arrived() -> bool:
            if inbox.poll(50):
                received.extend(server.receive_nowait(inbox))
            return bool(received)

        wait_until(arrived, 5, "the batch to arrive")
        assert received == [good, good]
        assert server.rejected == 1


def test_doorbell_rings_and_tolerates_a_missing_gateway(tmp_path):
    sender = DoorbellSender(tmp_path)
    sender.ring()  # nobody bound yet: counted, not raised
    assert sender.failures == 1
    receiver = bind_doorbell(tmp_path)
    sender.ring(1_000_000_007)
    sender.ring(1_000_000_009)
    assert read_doorbells(receiver) == 1_000_000_007  # all read; the oldest ring's time
    assert read_doorbells(receiver) is None  # nothing waiting
    before = time.monotonic_ns()
    sender.ring()  # stamped now by default
    assert before <= read_doorbells(receiver) <= time.monotonic_ns()
    sender.sock.sendto(b"!", sender.path)  # a pacer from before the stamp: read, no time
    assert read_doorbells(receiver) is None
    receiver.close()
    sender.close()
