"""Gemini Live simulator, the shell: a WebSocket server on the vendor's path that drives one
``GeminiConnection`` (voicecore.sim.gemini_core) per connection.

Owns the socket (picows, as the Realtime simulator's), the real clock (CLOCK_MONOTONIC in ms), the
sessions that outlive a connection (``SessionStore``, so a new connection with a ``sessionResumption``
handle continues one) and the agent clips as 24 kHz PCM16 answers. Protocol behaviour lives in the core;
this module must not decide what the server says. Binds 127.0.0.1 only by default.

The path is the Gemini API's, ``/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent``,
with the API key in the ``key`` query parameter (or the ``x-goog-api-key`` header, as Google's SDK sends it); another path is answered HTTP 404. A wrong key or an unknown
model is refused as the vendor refuses it: the upgrade succeeds and the connection closes 1008 once
``setup`` arrives.

Vertex AI's path, ``/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent``, is served too: an
OAuth access token in ``Authorization: Bearer`` (``access_tokens``, or ``token_check`` for tokens a test's
token endpoint issued) is checked at the upgrade, as Google's front end checks every request's credentials:
none, or one not accepted (wrong, expired), is answered HTTP 401 with Google's JSON error (UNAUTHENTICATED);
the model must be a resource name (projects/P/locations/L/publishers/google/models/NAME), else 1008 at setup.

    python -m voicecore.sim.gemini --port 9200 [--api-key KEY] [--serve-model NAME] [--connection-limit-s 600]
        [--go-away-notice-s 10] [--late-chunks 2] [--speed-factor 4] [--first-chunk-ms 200] [--keep-closed 50] [--access-token TOKEN]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import signal
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import numpy as np
import soxr
from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, WSUpgradeRequest, ws_create_server
from picows import WSUpgradeResponse, WSUpgradeResponseWithListener

from voicecore.g711 import ulaw_to_linear
from voicecore.gemini.protocol import LIVE_PATH, OUTPUT_SAMPLE_RATE_HZ
from voicecore.gemini.transport import VERTEX_LIVE_PATH
from voicecore.sim.audio_clips import ClipLibrary, default_library
from voicecore.sim.gemini_core import Answer, GeminiConnection, GeminiSimConfig, SessionStore
from voicecore.timing import SAMPLE_RATE_HZ

log = logging.getLogger("voicecore.sim.gemini")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
API_KEY_HEADER = "x-goog-api-key"
CALL_HEADER = "X-Voicecore-Call"
_ws_log = logging.getLogger("voicecore.sim.gemini.ws")  # picows logs every connection at INFO
_ws_log.setLevel(logging.WARNING)
# Google's answer to a request without valid credentials (the google.rpc.Status JSON of every googleapis.com API)
UNAUTHENTICATED_BODY = (b'{"error": {"code": 401, "message": "Request had invalid authentication credentials. Expected '
                        b'OAuth 2 access token, login cookie or other valid authentication credential. See '
                        b'https://developers.google.com/identity/sign-in/web/devconsole-project.", '
                        b'"status": "UNAUTHENTICATED"}}')


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def answers_from_clips(clips: ClipLibrary) -> tuple[Answer, ...]:
    """The agent's answer clips (8 kHz mu-law) as the model's 24 kHz PCM16, resampled once by libsoxr."""
    answers = []
    for info in clips.by_role("agent"):
        if info.kind not in ("answer", "question", "checkin", "goodbye"):
            continue
        linear = ulaw_to_linear(clips.audio[info.name]).astype(np.float32) / 32768.0
        upsampled = soxr.resample(linear, SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ, quality="MQ")
        pcm = np.clip(np.round(upsampled * 32768.0), -32768, 32767).astype("<i2").tobytes()
        answers.append(Answer(info.text, pcm))
    return tuple(answers)


@functools.lru_cache(maxsize=1)
def default_answers() -> tuple[Answer, ...]:
    return answers_from_clips(default_library())


@dataclass(slots=True)
class GeminiSimServer:
    """A running simulator: ``connections`` in opening order (their ``record`` says what happened)."""

    config: GeminiSimConfig
    answers: tuple[Answer, ...]
    store: SessionStore = field(default_factory=SessionStore)
    connections: list[GeminiConnection] = field(default_factory=list)
    server: asyncio.Server | None = None
    port: int = 0
    # closed connections kept in `connections` (oldest dropped first); None keeps all, as a test wants
    keep_closed: int | None = None
    # Vertex AI: whether a bearer token is good now (a test's token endpoint knows what it issued and until
    # when); None: config.access_tokens (empty: any token)
    token_check: Callable[[str], bool] | None = None
    refused_unauthenticated: int = 0  # Vertex upgrades answered 401

    def accepts_token(self, token: str) -> bool:
        if not token:
            return False
        if self.token_check is not None:
            return self.token_check(token)
        return not self.config.access_tokens or token in self.config.access_tokens

    def _open(self, request: WSUpgradeRequest) -> "WSListener | WSUpgradeResponseWithListener":
        target = urlsplit(request.path.decode("latin-1"))
        vertex = target.path == VERTEX_LIVE_PATH
        if target.path != LIVE_PATH and not vertex:
            return WSUpgradeResponseWithListener(WSUpgradeResponse.create_error_response(404, b"Not Found"), None)
        if vertex:
            scheme, _, token = (request.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or not self.accepts_token(token.strip()):
                self.refused_unauthenticated += 1
                response = WSUpgradeResponse.create_error_response(401, UNAUTHENTICATED_BODY)
                response.headers["Content-Type"] = "application/json; charset=UTF-8"
                response.headers["WWW-Authenticate"] = 'Bearer realm="https://accounts.google.com/"'
                return WSUpgradeResponseWithListener(response, None)
            key = None
        else:
            # the Gemini API takes the key in the `key` query parameter or the x-goog-api-key header (the SDK's way)
            key = parse_qs(target.query).get("key", [None])[0] or request.headers.get(API_KEY_HEADER)
        connection = GeminiConnection(self.config, self.answers, self.store, api_key=key, now_ms=now_ms(), vertex=vertex)
        # our own harnesses name the call (as for the Realtime simulator); Google's server ignores the header
        connection.record.call_sid = request.headers.get(CALL_HEADER)
        self._prune()
        self.connections.append(connection)
        return _ConnectionSocket(connection)

    def _prune(self) -> None:
        if self.keep_closed is None:
            return
        closed = [c for c in self.connections if c.record.disconnected]
        drop = {id(c) for c in closed[: max(0, len(closed) - self.keep_closed)]}
        if drop:
            self.connections = [c for c in self.connections if id(c) not in drop]

    async def aclose(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


class _ConnectionSocket(WSListener):
    def __init__(self, connection: GeminiConnection) -> None:
        self.connection = connection
        self.transport: WSTransport | None = None
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.fragments: list[bytes] = []

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        self._send_due()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        msg_type = frame.msg_type
        if msg_type in (WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.CONTINUATION):
            if msg_type is not WSMsgType.CONTINUATION:
                self.fragments = []
            self.fragments.append(frame.get_payload_as_bytes())
            if not frame.fin:
                return
            data, self.fragments = b"".join(self.fragments), []
            self.connection.receive(data, now_ms())  # the core reads bytes as UTF-8 JSON
            self._send_due()
        elif msg_type is WSMsgType.CLOSE:
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
            transport.disconnect()

    def _send_due(self) -> None:
        transport = self.transport
        if transport is None or transport.is_disconnected or transport.is_close_frame_sent:
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        connection = self.connection
        connection.advance(now_ms())
        for text in connection.take_outgoing():
            transport.send(WSMsgType.TEXT, text.encode())
        if connection.close is not None:
            code, reason = connection.close
            transport.send_close(WSCloseCode(code), reason.encode())
            # the client answers the close; drop TCP if it does not
            self.loop.call_later(2.0, transport.disconnect)
            return
        wakeup = connection.next_wakeup_ms()
        if wakeup is not None:
            self.timer = self.loop.call_at(self.loop.time() + max(0, wakeup - now_ms()) / 1000, self._send_due)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.connection.record.disconnected = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


async def serve_gemini_sim(host: str = "127.0.0.1", port: int = 0, config: GeminiSimConfig | None = None,
                           answers: tuple[Answer, ...] | None = None, *,
                           ssl_context: ssl.SSLContext | None = None,
                           keep_closed: int | None = None) -> tuple[GeminiSimServer, int]:
    """Start the simulator; returns it and the bound port. ``ssl_context``: serve wss:// (Google's SDK
    connects only over TLS, so a test that points the SDK at the simulator needs it)."""
    sim = GeminiSimServer(config or GeminiSimConfig(), answers if answers is not None else default_answers(),
                          keep_closed=keep_closed)
    sim.server = await ws_create_server(sim._open, host, port, logger_name=_ws_log, max_frame_size=MAX_MESSAGE_BYTES,
                                        ssl=ssl_context)
    sim.port = sim.server.sockets[0].getsockname()[1] if sim.server.sockets else port
    return sim, sim.port


async def _main(args: argparse.Namespace) -> None:
    config = GeminiSimConfig(
        api_keys=tuple(args.api_key),
        models=tuple(args.serve_model),
        connection_limit_ms=int(args.connection_limit_s * 1000),
        go_away_notice_ms=int(args.go_away_notice_s * 1000),
        speed_factor=args.speed_factor,
        first_chunk_ms=args.first_chunk_ms,
        late_chunks_after_interrupt=args.late_chunks,
        access_tokens=tuple(args.access_token),
        stall_after_ms=args.stall_after_ms,
        stall_ms=args.stall_ms,
    )
    sim, port = await serve_gemini_sim(args.host, args.port, config, keep_closed=args.keep_closed)
    log.info("gemini simulator listening on %s:%d connection_limit_s=%g late_chunks=%d", args.host, port,
             args.connection_limit_s, args.late_chunks)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await sim.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Gemini Live simulator (voicecore)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9200)
    parser.add_argument("--api-key", action="append", default=[], metavar="KEY",
                        help="a key the simulator accepts (repeatable); none given: any non-empty key")
    parser.add_argument("--serve-model", action="append", default=[], metavar="NAME",
                        help="a model the simulator serves (repeatable); none given: any")
    parser.add_argument("--connection-limit-s", type=float, default=600.0,
                        help="a connection ends this long after it opened, as the vendor's do (default 600)")
    parser.add_argument("--go-away-notice-s", type=float, default=10.0,
                        help="goAway is sent this long before the connection limit (default 10)")
    parser.add_argument("--speed-factor", type=float, default=4.0,
                        help="model audio is sent this many times faster than real time (default 4)")
    parser.add_argument("--first-chunk-ms", type=int, default=200,
                        help="the model's time from a caller's turn (or a function's result) to its first audio (default 200)")
    parser.add_argument("--late-chunks", type=int, default=0, choices=range(4),
                        help="audio chunks of an interrupted turn still sent after `interrupted` (0-3, default 0)")
    parser.add_argument("--stall-after-ms", type=int, default=None, metavar="MS",
                        help="every model turn's output stops this long after it began (default: never)")
    parser.add_argument("--stall-ms", type=int, default=2000, metavar="MS",
                        help="with --stall-after-ms: how long the output stops (default 2000)")
    parser.add_argument("--keep-closed", type=int, default=50, help="closed connections kept in memory")
    parser.add_argument("--access-token", action="append", default=[], metavar="TOKEN",
                        help="Vertex AI path: a bearer token the simulator accepts (repeatable); none given: any "
                             "non-empty token")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
