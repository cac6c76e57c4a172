"""Realtime-model simulator, the shell: a WebSocket server that drives one `ModelSession` per connection.

Owns the socket, the real clock (CLOCK_MONOTONIC in ms, the clock the shared-memory control block uses,
so an in-process harness can line records up with pacer and gateway times) and the registry of sessions
that a harness reads after its calls. Protocol behaviour lives in model_core; this module must not decide
what the server says. Binds 127.0.0.1 only by default; serves without per-message compression (it
doubles the CPU per message, ARCHITECTURE.md section 11).

    python -m voicecore.sim.model_server --port 9100 [--naming beta]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from voicecore.sim.audio_clips import ClipLibrary, default_library
from voicecore.sim.model_core import ModelSession, SimConfig

log = logging.getLogger("voicecore.sim.model_server")

CALL_HEADER = "X-Voicecore-Call"  # spec: model-session correlation; the real vendor ignores it
_SENDS_PER_YIELD = 32  # a loop of sends to a fast reader never yields on its own (ARCHITECTURE.md 11)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ModelSimServer:
    """A running simulator. `registry` maps session_id -> ModelSession, in connection order."""

    config: SimConfig
    clips: ClipLibrary
    server: Server | None = None
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

    async def _handle(self, ws: ServerConnection) -> None:
        request = ws.request
        headers = request.headers if request is not None else None
        beta = headers is not None and headers.get("OpenAI-Beta", "").strip().lower() == "realtime=v1"
        model = None
        if request is not None:
            model = (parse_qs(urlsplit(request.path).query).get("model") or [None])[0]
        index = self.sessions_opened
        self.sessions_opened += 1
        session = ModelSession(
            self.config,
            index,
            self.config.seed,
            now_ms=now_ms(),
            naming="beta" if beta else self.config.naming,
            call_sid=headers.get(CALL_HEADER) if headers is not None else None,
            model=model,
            clips=self.clips,
        )
        self.registry[session.session_id] = session
        wake = asyncio.Event()
        writer = asyncio.create_task(_write_loop(ws, session, wake))
        try:
            async for message in ws:
                session.receive_client_event(message, now_ms())
                wake.set()
        except ConnectionClosed:
            pass
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await writer
            session.close(now_ms())
            self._prune()

    def _prune(self) -> None:
        if self.keep_closed is None:
            return
        closed = [sid for sid, s in self.registry.items() if s.record.closed_ms is not None]
        for sid in closed[: max(0, len(closed) - self.keep_closed)]:
            del self.registry[sid]


async def _write_loop(ws: ServerConnection, session: ModelSession, wake: asyncio.Event) -> None:
    """Send what the session has due, then sleep until its next wakeup or the next client event."""
    while True:
        wake.clear()  # before draining: a client event that arrives while we send sets it again
        session.advance(now_ms())
        sent = 0
        for text in session.events_to_send():
            await ws.send(text)
            sent += 1
            if sent % _SENDS_PER_YIELD == 0:
                await asyncio.sleep(0)
        if wake.is_set():
            continue
        wakeup = session.next_wakeup_ms()
        timeout = None if wakeup is None else max(0, wakeup - now_ms()) / 1000
        if timeout == 0:
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout)


async def serve_model_sim(
    host: str = "127.0.0.1", port: int = 0, config: SimConfig | None = None, *, keep_closed: int | None = None
) -> tuple[ModelSimServer, int]:
    """Start the simulator; returns it (with `.registry`) and the bound port."""
    sim = ModelSimServer(config=config or SimConfig(), clips=default_library(), keep_closed=keep_closed)
    sim.server = await serve(sim._handle, host, port, compression=None, max_size=16 * 1024 * 1024)
    sim.port = sim.server.sockets[0].getsockname()[1] if sim.server.sockets else port
    return sim, sim.port


async def _main(args: argparse.Namespace) -> None:
    config = SimConfig(
        naming=args.naming,
        seed=args.seed,
        speed_factor=args.speed_factor,
        late_deltas_after_cancel=args.late_deltas,
    )
    sim, port = await serve_model_sim(args.host, args.port, config, keep_closed=args.keep_closed)
    # the supervisor and the CLI test read the bound port from this line
    log.info("model simulator listening on %s:%d naming=%s", args.host, port, config.naming)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await sim.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="OpenAI Realtime model simulator (voicecore)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--naming", choices=("ga", "beta"), default="ga")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speed-factor", type=float, default=4.0)
    parser.add_argument("--late-deltas", type=int, default=0, choices=range(4))
    parser.add_argument("--keep-closed", type=int, default=50, help="closed sessions kept in memory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
