"""Realtime-model simulator, the shell: a WebSocket server that drives one `ModelSession` per connection.

Owns the socket, the real clock (CLOCK_MONOTONIC in ms, the clock the shared-memory control block uses,
so an in-process harness can line records up with pacer and gateway times) and the registry of sessions
that a harness reads after its calls. Protocol behaviour lives in voicecore.sim.model; this module must not
decide what the server says. Binds 127.0.0.1 only by default; serves without per-message compression (it
doubles the CPU per message, ARCHITECTURE.md section 11). The socket side is picows (framing in C), one
listener and at most one timer per session, and the events due at once go out in one write
(voicecore.wsframes): the bench runs hundreds of sessions on one load core.

    python -m voicecore.sim.model_server --port 9100 [--naming beta] [--late-deltas 2] [--overlap-probability 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, WSUpgradeRequest, ws_create_server

from voicecore.sim.audio_clips import ClipLibrary, default_library
from voicecore.sim.model import ModelSession, SimConfig
from voicecore.wsframes import text_frames

log = logging.getLogger("voicecore.sim.model_server")

CALL_HEADER = "X-Voicecore-Call"  # spec: model-session correlation; the real vendor ignores it
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_ws_log = logging.getLogger("voicecore.sim.model_server.ws")  # picows logs every connection at INFO
_ws_log.setLevel(logging.WARNING)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ModelSimServer:
    """A running simulator. `registry` maps session_id -> ModelSession, in connection order."""

    config: SimConfig
    clips: ClipLibrary
    server: asyncio.Server | None = None
    port: int = 0
    registry: dict[str, ModelSession] = field(default_factory=dict)
    sessions_opened: int = 0
    # closed sessions kept in `registry` (oldest dropped first); None keeps all. Each keeps its response
    # audio, so a long-running CLI server bounds it while an in-process harness keeps everything.
    keep_closed: int | None = None

    def by_call(self, call_sid: str) -> list[ModelSession]:
        return [s for s in self.registry.values() if s.record.call_sid == call_sid]

    async def aclose(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    def _open(self, request: WSUpgradeRequest) -> "_SessionSocket":
        headers = request.headers
        beta = headers.get("OpenAI-Beta", "").strip().lower() == "realtime=v1"
        path = request.path.decode("latin-1")
        model = (parse_qs(urlsplit(path).query).get("model") or [None])[0]
        index = self.sessions_opened
        self.sessions_opened += 1
        session = ModelSession(
            self.config,
            index,
            self.config.seed,
            now_ms=now_ms(),
            naming="beta" if beta else self.config.naming,
            call_sid=headers.get(CALL_HEADER),
            model=model,
            clips=self.clips,
        )
        self.registry[session.session_id] = session
        return _SessionSocket(self, session)

    def _prune(self) -> None:
        if self.keep_closed is None:
            return
        closed = [sid for sid, s in self.registry.items() if s.record.closed_ms is not None]
        for sid in closed[: max(0, len(closed) - self.keep_closed)]:
            del self.registry[sid]


class _SessionSocket(WSListener):
    """One session's socket: client events in; what the session has due out, now or at its next wakeup."""

    def __init__(self, sim: ModelSimServer, session: ModelSession) -> None:
        self.sim = sim
        self.session = session
        self.transport: WSTransport | None = None
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.fragments: list[bytes] = []

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        drop_after_ms = self.sim.config.drop_after_ms
        call_sid = self.session.record.call_sid
        if drop_after_ms and (call_sid is None or len(self.sim.by_call(call_sid)) == 1):
            self.loop.call_later(drop_after_ms / 1000, self._drop)
        self._send_due()

    def _drop(self) -> None:
        """SimConfig.drop_after_ms: close as a server that hit an internal error does."""
        transport = self.transport
        if transport is not None and not transport.is_disconnected and not transport.is_close_frame_sent:
            transport.send_close(WSCloseCode.INTERNAL_ERROR, b"server error")
            transport.disconnect()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        msg_type = frame.msg_type
        if msg_type is WSMsgType.TEXT or msg_type is WSMsgType.BINARY:
            if not frame.fin:
                self.fragments = [frame.get_payload_as_bytes()]
                return
            # Text arrives decoded; a binary message goes to the core as bytes (it reads them as UTF-8 JSON).
            data = frame.get_payload_as_bytes()
            self.session.receive_client_event(_text_or_bytes(data) if msg_type is WSMsgType.TEXT else data, now_ms())
        elif msg_type is WSMsgType.CONTINUATION and self.fragments:
            self.fragments.append(frame.get_payload_as_bytes())
            if not frame.fin:
                return
            data, self.fragments = b"".join(self.fragments), []
            self.session.receive_client_event(_text_or_bytes(data), now_ms())
        elif msg_type is WSMsgType.CLOSE:
            if not transport.is_close_frame_sent:
                code = frame.get_close_code()
                transport.send_close(WSCloseCode.OK if code is WSCloseCode.NO_INFO else code)
            transport.disconnect()
            return
        else:
            return
        self._send_due()

    def _send_due(self) -> None:
        """Send what the session has due, then sleep until its next wakeup (or the next client event)."""
        transport = self.transport
        if transport is None or transport.is_disconnected or transport.is_close_frame_sent:
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        session = self.session
        session.advance(now_ms())
        events = session.events_to_send()
        if len(events) == 1:
            transport.send(WSMsgType.TEXT, events[0].encode())
        elif events:
            # Everything due now in one write (e.g. a transcript delta and its audio): one system call,
            # one TCP segment for the client to read.
            transport.underlying_transport.write(text_frames([event.encode() for event in events]))
        wakeup = session.next_wakeup_ms()
        if wakeup is not None:
            self.timer = self.loop.call_at(self.loop.time() + max(0, wakeup - now_ms()) / 1000, self._send_due)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.session.close(now_ms())
        self.sim._prune()


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # the core rejects it as not UTF-8 JSON


async def serve_model_sim(
    host: str = "127.0.0.1", port: int = 0, config: SimConfig | None = None, *, keep_closed: int | None = None
) -> tuple[ModelSimServer, int]:
    """Start the simulator; returns it (with `.registry`) and the bound port."""
    sim = ModelSimServer(config=config or SimConfig(), clips=default_library(), keep_closed=keep_closed)
    sim.server = await ws_create_server(sim._open, host, port, max_frame_size=MAX_MESSAGE_BYTES,
                                        logger_name=_ws_log)
    sim.port = sim.server.sockets[0].getsockname()[1] if sim.server.sockets else port
    return sim, sim.port


async def _main(args: argparse.Namespace) -> None:
    config = SimConfig(
        naming=args.naming,
        seed=args.seed,
        speed_factor=args.speed_factor,
        late_deltas_after_cancel=args.late_deltas,
        overlap_probability=args.overlap_probability,
    )
    sim, port = await serve_model_sim(args.host, args.port, config, keep_closed=args.keep_closed)
    # the supervisor and the CLI test read the bound port from this line
    log.info("model simulator listening on %s:%d naming=%s late_deltas=%d overlap_probability=%g", args.host, port,
             config.naming, config.late_deltas_after_cancel, config.overlap_probability)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await sim.aclose()


def probability(text: str) -> float:
    """argparse type: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="OpenAI Realtime model simulator (voicecore)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--naming", choices=("ga", "beta"), default="ga")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speed-factor", type=float, default=4.0)
    parser.add_argument("--late-deltas", type=int, default=0, choices=range(4),
                        help="audio deltas still sent after a cancel (0-3, default 0)")
    parser.add_argument("--overlap-probability", type=probability, default=0.0, metavar="P",
                        help="chance (0-1) that a response gets a second one started while it streams (default 0)")
    parser.add_argument("--keep-closed", type=int, default=50, help="closed sessions kept in memory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
