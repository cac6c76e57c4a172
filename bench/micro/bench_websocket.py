"""WebSocket frame parsing: picows (C) against websockets' sans-I/O protocol (Python).

Why `picows` (docs/explanation/architecture.md#tree, the dependencies, and the gateway's module docstring):
WebSocket framing and parsing in C: a 200-byte media message costs well under a microsecond against 4-5 us in
websockets' Python parser. What is measured: one masked client text frame carrying Twilio's media message (the
369-byte message the gateway gets 50 times a second per call), handed to each library as bytes read from a
socket, up to the payload as `bytes` in our code:
- picows: the gateway's WSProtocol (built as workers/gateway/main.py builds it) on a fake transport, fed
  through get_buffer/buffer_updated as uvloop feeds it; the listener's on_ws_frame takes
  get_payload_as_bytes(), as the gateway's does;
- websockets: `Protocol(Side.SERVER, state=OPEN)`, receive_data then events_received.
Each benchmark feeds a batch of 100 frames in one read (a busy socket delivers several per read; it
also keeps the Python loop that stands in for uvloop's C feed out of the per-frame figure); the
per-frame median is in extra_info (`median_ns_per_frame`). The single-frame benchmarks include that
Python feed: an upper bound. Sending: picows' transport.send of the same message (framing, unmasked, one
write) against voicecore.wsframes.text_frames, which frames the gateway's batched writes.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from picows import WSAutoPingStrategy, WSListener, WSMsgType
from picows.picows import WSProtocol
from websockets.protocol import Protocol, Side, State

from bench.micro.bench_twilio import media_message
from bench.micro.conftest import per_item
from voicecore.wsframes import masked_text_frames, text_frames

MESSAGE = media_message(1234)
FRAME = masked_text_frames([MESSAGE])
BATCH = 100
FRAMES = FRAME * BATCH
UPGRADE = (b"GET /twilio/stream HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


class _Socket:
    """What picows asks of the transport's socket: TCP options (no-ops here) and names for its log."""

    family = socket.AF_INET

    def setsockopt(self, *args):
        return None

    def getsockopt(self, *args):
        return 0

    def getpeername(self):
        return ("127.0.0.1", 40000)

    def getsockname(self):
        return ("127.0.0.1", 8080)

    def fileno(self) -> int:
        return -1


class _Transport:
    """An asyncio transport that keeps nothing: the bytes picows writes are counted and dropped."""

    def __init__(self) -> None:
        self.socket = _Socket()
        self.written = 0

    def write(self, data) -> None:
        self.written += len(data)

    def writelines(self, parts) -> None:
        for part in parts:
            self.written += len(part)

    def get_extra_info(self, name, default=None):
        return self.socket if name == "socket" else default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, *args, **kwargs) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Listener(WSListener):
    def __init__(self) -> None:
        self.frames = 0
        self.last = b""
        self.transport = None

    def on_ws_connected(self, transport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport, frame) -> None:
        self.frames += 1
        self.last = frame.get_payload_as_bytes()


class PicowsServer:
    """A picows server connection past its upgrade, fed bytes as the event loop would feed them."""

    def __init__(self) -> None:
        self.listener = _Listener()
        self.transport = _Transport()
        # The arguments workers/gateway/main.py ConnectionRouter._hand_to_websocket passes.
        self.protocol = WSProtocol(
            None, None, False, lambda _request: self.listener, logging.getLogger("bench.picows"), True, 5.0,
            False, 20.0, 20.0, WSAutoPingStrategy.PING_WHEN_IDLE, True, 64 * 1024, None, 4096,
        )
        self.protocol.connection_made(self.transport)
        self.feed(UPGRADE)
        assert self.listener.transport is not None, "picows did not accept the upgrade"

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            buffer = self.protocol.get_buffer(-1)
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            view = view[n:]
            self.protocol.buffer_updated(n)


@pytest.fixture
def loop():
    # picows arms its timers (upgrade timeout, auto-ping) on the running loop.
    event_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(event_loop)
    yield event_loop
    event_loop.close()
    asyncio.set_event_loop(None)


def _in_loop(loop, function):
    async def run():
        return function()
    return loop.run_until_complete(run())


@pytest.mark.benchmark(group="websocket parse: 100 media frames per read")
def test_picows_parse(benchmark, loop):
    def run():
        server = PicowsServer()
        benchmark(server.feed, FRAMES)
        assert server.listener.last == MESSAGE and server.listener.frames % BATCH == 0
    _in_loop(loop, run)
    per_item(benchmark, BATCH, "frame")


@pytest.mark.benchmark(group="websocket parse: 100 media frames per read")
def test_websockets_parse(benchmark):
    protocol = Protocol(Side.SERVER, state=State.OPEN, max_size=64 * 1024)

    def feed():
        protocol.receive_data(FRAMES)
        return protocol.events_received()

    events = benchmark(feed)
    assert len(events) == BATCH and events[-1].data == MESSAGE
    per_item(benchmark, BATCH, "frame")


@pytest.mark.benchmark(group="websocket parse: one media frame per read")
def test_picows_parse_one(benchmark, loop):
    def run():
        server = PicowsServer()
        benchmark(server.feed, FRAME)
        assert server.listener.last == MESSAGE
    _in_loop(loop, run)


@pytest.mark.benchmark(group="websocket parse: one media frame per read")
def test_websockets_parse_one(benchmark):
    protocol = Protocol(Side.SERVER, state=State.OPEN, max_size=64 * 1024)

    def feed():
        protocol.receive_data(FRAME)
        return protocol.events_received()

    (event,) = benchmark(feed)
    assert event.data == MESSAGE


@pytest.mark.benchmark(group="websocket framing: one media message")
def test_picows_send(benchmark, loop):
    def run():
        server = PicowsServer()
        transport = server.listener.transport
        before = server.transport.written
        benchmark(transport.send, WSMsgType.TEXT, MESSAGE)
        assert server.transport.written > before
    _in_loop(loop, run)


@pytest.mark.benchmark(group="websocket framing: one media message")
def test_wsframes_text_frames(benchmark):
    assert len(benchmark(text_frames, (MESSAGE,))) == len(MESSAGE) + 4
