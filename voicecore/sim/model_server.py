"""Realtime-model simulator, the shell: a WebSocket server that drives one `ModelSession` per connection.

Owns the socket, the real clock (CLOCK_MONOTONIC in ms, the clock the shared-memory control block uses, so an
in-process harness can line records up with pacer and gateway times) and the registry of sessions that a
harness reads after its calls. Protocol behaviour lives in voicecore.sim.model; this module must not decide
what the server says. Binds 127.0.0.1 only by default; serves without per-message compression (it doubles the
CPU per message, docs/explanation/architecture.md#section-11). The socket side is picows (framing in C), one
listener and at most one timer per session, and the events due at once go out in one write
(voicecore.wsframes): the bench runs hundreds of sessions on one load core.

Vendor faults on request (voicecore.sim.model.faults): the same port answers a plain HTTP
`POST /faults` {"kind": K, "duration_ms": D, "call": SID?} with 200 {"kind": K, "sessions": n} (n: the
live sessions it was applied to; 0 for refuse_new, which applies to handshakes) or 400 {"error": reason},
and `GET /faults` with the faults applied so far by kind. A front door reads each connection's request
line: /faults is answered here, anything else is handed, bytes and all, to picows's WebSocket protocol
(picows itself answers only GET without a body). The one-shot kinds act on the live sockets at once;
`stall` holds every outgoing event until its window ends (input is still read), `refuse_new` answers
new handshakes 503, and the response faults live in each ModelSession.

The vendor's refusals (voicecore.sim.model.refusals): with `SimConfig.api_keys` / `models` set, a wrong key
or an unknown model is refused as the vendor refuses it (on OpenAI's path an `error` event and a close; on
Azure's, /openai/..., HTTP 401 or 404 with Azure's JSON body); a client asking for the retired beta shape
(`OpenAI-Beta: realtime=v1`) gets the `error` and close 4000 `beta_api_shape_disabled` unless the simulator
itself is configured with naming "beta" (records made before the retirement). The vendor's speech endpoint
(`POST /v1/audio/speech`, Azure's `/openai/v1/audio/speech`: voicecore.sim.model.speech) answers on the same
port, as voicecore renders an agent's fallback lines with it. Every session ends
`SimConfig.session_limit_ms` after it opened (`error` session_expired, then close 1000), as the vendor's do.

    python -m voicecore.sim.model_server --port 9100 [--naming beta] [--late-deltas 2] [--overlap-probability 0.25]
        [--api-key KEY] [--serve-model NAME] [--session-limit-s 3600]
    curl -d '{"kind": "rate_limit", "duration_ms": 2000}' http://127.0.0.1:9100/faults
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
import secrets
from collections import Counter
from dataclasses import dataclass, field

import orjson
from picows import (
    WSAutoPingStrategy,
    WSCloseCode,
    WSFrame,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)
from picows.picows import WSProtocol

from voicecore import http_client
from voicecore.sim.audio_clips import ClipLibrary, default_library
from voicecore.sim.model import ModelSession, SimConfig
from voicecore.sim.model.refusals import CLOSE_RETIRED, RETIRED_BETA, Refusal, check_handshake, read_handshake
from voicecore.sim.model.speech import SPEECH_PATH_SUFFIX, speech_response
from voicecore.sim.model.faults import (
    BINARY_PAYLOAD,
    RESPONSE_FAULT_KINDS,
    FaultBook,
    FaultRejected,
    FaultRequest,
    parse_fault_request,
)
from voicecore.wsframes import text_frames

log = logging.getLogger("voicecore.sim.model_server")

CALL_HEADER = "X-Voicecore-Call"  # spec: model-session correlation; the real vendor ignores it
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
HANDSHAKE_TIMEOUT_S = 5.0
FAULTS_PATH = "/faults"
MAX_REQUEST_HEAD_BYTES = 16 * 1024  # picows's own limit for an upgrade request's head
MAX_FAULT_BODY_BYTES = 64 * 1024
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
    live: dict[str, "_SessionSocket"] = field(default_factory=dict)  # session_id -> its open socket
    faults: FaultBook = field(default_factory=FaultBook)
    handshakes_refused: int = 0  # by refuse_new
    refusals: Counter = field(default_factory=Counter)  # connections refused as the vendor would, by error code
    # the speech endpoint's requests (voicecore.sim.model.speech): what was asked, or the status of a refusal
    speech_requests: list = field(default_factory=list)
    # closed sessions kept in `registry` (oldest dropped first); None keeps all. Each keeps its response
    # audio, so a long-running CLI server bounds it while an in-process harness keeps everything.
    keep_closed: int | None = None
    # A call's own behaviour (call sid -> SimConfig) instead of `config`, for the sessions of that call: a harness
    # running callers that each need their own rules and phrases on one server (voicecore test --phone).
    call_configs: dict[str, SimConfig] = field(default_factory=dict)

    def by_call(self, call_sid: str) -> list[ModelSession]:
        return [s for s in self.registry.values() if s.record.call_sid == call_sid]

    async def aclose(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    def apply_fault(self, request: FaultRequest) -> int:
        """Apply one fault now; returns how many live sessions it was applied to."""
        now = now_ms()
        window = self.faults.record(request, now)
        targets = [sock for sock in list(self.live.values())
                   if request.call is None or sock.session.record.call_sid == request.call]
        kind = request.kind
        if kind == "refuse_new":
            targets = []  # it refuses handshakes; the live sessions go on
        spread: list[_SessionSocket] = []
        for sock in targets:
            if kind == "drop_1011":
                sock.session.note_fault(kind, now)
                sock._drop()
            elif kind == "close_4000":
                sock.session.note_fault(kind, now)
                sock._send_due()  # what was due goes first, as it would have
                sock._drop(WSCloseCode(CLOSE_RETIRED), RETIRED_BETA.encode())
            elif kind == "binary_frame":
                sock.session.note_fault(kind, now)
                sock._send_due()  # what was due goes first, as it would have
                if sock.transport is not None and not sock.transport.is_disconnected:
                    sock.transport.send(WSMsgType.BINARY, BINARY_PAYLOAD)
            elif kind in RESPONSE_FAULT_KINDS:
                assert window is not None
                sock.session.fail_responses(kind, window.until_ms, now)
            elif kind == "stall":
                assert window is not None
                sock.session.note_fault(kind, now, window.until_ms)
                sock._send_due()  # re-arms its timer for the window's end
            elif kind == "huge_delta":
                # 4 MiB of JSON per session, a session every 5 ms after the POST is answered: the simulator's
                # own loop (every other session's audio, the handshakes) is not held for the seconds that 100
                # of them take to build at once (one vendor server per session would not be).
                asyncio.get_running_loop().call_later(0.005 * len(spread), self._inject_now, sock, kind)
                spread.append(sock)
            else:
                sock.session.inject_fault(kind, now)
                sock._send_due()
        log.info("fault %s applied to %d sessions%s", kind, len(targets),
                 f" for {request.duration_ms} ms" if window is not None else "")
        return len(targets)

    @staticmethod
    def _inject_now(sock: "_SessionSocket", kind: str) -> None:
        if sock.transport is not None and not sock.transport.is_disconnected:
            sock.session.inject_fault(kind, now_ms())
            sock._send_due()

    def _open(self, request: WSUpgradeRequest) -> "_SessionSocket | WSUpgradeResponseWithListener":
        headers = request.headers
        call_sid = headers.get(CALL_HEADER)
        now = now_ms()
        if self.faults.until_ms("refuse_new", call_sid, now) is not None:
            self.handshakes_refused += 1
            refused = WSUpgradeResponse.create_error_response(503, b"Service Unavailable (simulated fault: refuse_new)")
            return WSUpgradeResponseWithListener(refused, None)
        path = request.path.decode("latin-1")
        handshake = read_handshake(path, headers)
        refusal = check_handshake(self.config, handshake, legacy_beta=self.config.naming == "beta")
        if refusal is not None:
            self.refusals[refusal.code] += 1
            log.info("session refused (%s): %s", handshake.form, refusal.code)
            if refusal.http_status:
                response = WSUpgradeResponse.create_error_response(refusal.http_status, refusal.body)
                response.headers["Content-Type"] = "application/json"
                return WSUpgradeResponseWithListener(response, None)
            return _RefusedSocket(refusal)
        beta, model = handshake.beta, handshake.model
        index = self.sessions_opened
        self.sessions_opened += 1
        config = self.call_configs.get(call_sid or "", self.config)
        session = ModelSession(
            config,
            index,
            config.seed,
            now_ms=now_ms(),
            naming="beta" if beta else config.naming,
            call_sid=call_sid,
            model=model,
            clips=self.clips,
        )
        # a session opened during a response fault's window fails its responses too, as a reconnect to a
        # rate-limited vendor would
        for window in self.faults.open_windows(call_sid, now):
            if window.kind in RESPONSE_FAULT_KINDS:
                session.fail_responses(window.kind, window.until_ms, now)
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
        self.expiry: asyncio.TimerHandle | None = None
        self.fragments: list[bytes] = []

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        self.sim.live[self.session.session_id] = self
        drop_after_ms = self.sim.config.drop_after_ms
        call_sid = self.session.record.call_sid
        if drop_after_ms and (call_sid is None or len(self.sim.by_call(call_sid)) == 1):
            self.loop.call_later(drop_after_ms / 1000, self._drop)
        self.expiry = self.loop.call_later(self.sim.config.session_limit_ms / 1000, self._expire)
        self._send_due()

    def _expire(self) -> None:
        """SimConfig.session_limit_ms: the vendor's `error` (session_expired), then a normal close."""
        transport = self.transport
        if transport is None or transport.is_disconnected or transport.is_close_frame_sent:
            return
        self.session.expire(now_ms())
        for event in self.session.events_to_send():
            transport.send(WSMsgType.TEXT, event.encode())
        transport.send_close(WSCloseCode.OK, b"session_expired")
        transport.disconnect()

    def _drop(self, code: WSCloseCode = WSCloseCode.INTERNAL_ERROR, reason: bytes = b"server error") -> None:
        """SimConfig.drop_after_ms: close as a server that hit an internal error does (or with ``code``)."""
        transport = self.transport
        if transport is not None and not transport.is_disconnected and not transport.is_close_frame_sent:
            transport.send_close(code, reason)
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
        now = now_ms()
        faults = self.sim.faults
        stalled_until = faults.until_ms("stall", session.record.call_sid, now) if faults.windows else None
        if stalled_until is not None:
            # a stalled vendor: nothing goes out until the window ends, then everything due at once
            self.timer = self.loop.call_at(self.loop.time() + (stalled_until - now) / 1000, self._send_due)
            return
        session.advance(now)
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
        self.sim.live.pop(self.session.session_id, None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None
        self.session.close(now_ms())
        self.sim._prune()


# How long a refused socket waits for the client's close frame before it drops the connection.
REFUSED_CLOSE_WAIT_S = 2.0


class _RefusedSocket(WSListener):
    """A connection the vendor refuses after the upgrade (voicecore.sim.model.refusals): the `error` event
    that says why, then the close frame, and the TCP connection dropped once the client answered the close
    (RFC 6455 section 7.1.1: the server closes TCP after the closing handshake) or after
    REFUSED_CLOSE_WAIT_S. Dropping it at once, as the close goes out, resets the connection when the client's
    first events (its session.update) arrive: the client's kernel then throws away the error event unread,
    which the vendor's clean close never does."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal

    def on_ws_connected(self, transport: WSTransport) -> None:
        refusal = self.refusal
        if refusal.error is not None:
            event = {"type": "error", "event_id": "event_" + secrets.token_hex(11)[:21], "error": refusal.error}
            transport.send(WSMsgType.TEXT, orjson.dumps(event))
        transport.send_close(WSCloseCode(refusal.close_code), refusal.close_reason.encode())
        asyncio.get_running_loop().call_later(REFUSED_CLOSE_WAIT_S, transport.disconnect)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.CLOSE:  # the client answered the close: the handshake is over
            transport.disconnect()
        # nothing else the client says changes the refusal


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # the core rejects it as not UTF-8 JSON


class _FrontDoor(asyncio.Protocol):
    """A new connection until its request line is read: /faults (and any POST) is answered here as plain
    HTTP; anything else is handed to picows's WebSocket protocol with the bytes read so far."""

    def __init__(self, sim: ModelSimServer) -> None:
        self.sim = sim
        self.transport: asyncio.Transport | None = None
        self.data = bytearray()
        self.method = b""
        self.path = ""
        self.body_at: int | None = None  # where the body starts once the head of a /faults request is in
        self.body_length = 0
        self.head = b""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.timer = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT_S, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def data_received(self, data: bytes) -> None:
        self.data += data
        if self.body_at is None:
            line_end = self.data.find(b"\r\n")
            if line_end < 0:
                if len(self.data) > MAX_REQUEST_HEAD_BYTES:
                    self._hand_over()  # picows answers 400
                return
            if not self.method:
                parts = bytes(self.data[:line_end]).split(b" ")
                self.method = parts[0]
                self.path = parts[1].decode("latin-1").split("?", 1)[0] if len(parts) == 3 else ""
                if self.path != FAULTS_PATH and self.method != b"POST":
                    self._hand_over()
                    return
            head_end = self.data.find(b"\r\n\r\n")
            if head_end < 0:
                if len(self.data) > MAX_REQUEST_HEAD_BYTES:
                    self._answer(431, {"error": "request head too large"})
                return
            self.body_at = head_end + 4
            self.head = bytes(self.data[:head_end])
            self.body_length = _content_length(self.head)
            if self.body_length < 0 or self.body_length > MAX_FAULT_BODY_BYTES:
                self._answer(413 if self.body_length > 0 else 400, {"error": "bad or too large Content-Length"})
                return
        if len(self.data) - self.body_at >= self.body_length:
            self._control(bytes(self.data[self.body_at : self.body_at + self.body_length]))

    def _control(self, body: bytes) -> None:
        if self.method == b"POST" and self.path.endswith(SPEECH_PATH_SUFFIX):
            (status, content_type, answer), asked = speech_response(self.sim.config, self.sim.clips, self.path,
                                                                    _headers(self.head), body)
            self.sim.speech_requests.append(asked if asked is not None else status)
            self._answer_raw(status, content_type.encode(), answer)
        elif self.path != FAULTS_PATH:
            self._answer(404, {"error": f"no such resource; POST {FAULTS_PATH}"})
        elif self.method == b"GET":
            self._answer(200, self.sim.faults.counts())
        elif self.method != b"POST":
            self._answer(405, {"error": f"{FAULTS_PATH} takes GET or POST"}, b"Allow: GET, POST\r\n")
        else:
            try:
                request = parse_fault_request(body)
            except FaultRejected as exc:
                self._answer(400, {"error": str(exc)})
                return
            self._answer(200, {"kind": request.kind, "sessions": self.sim.apply_fault(request)})

    def _answer(self, status: int, value: dict, extra_headers: bytes = b"") -> None:
        self._answer_raw(status, b"application/json", orjson.dumps(value), extra_headers)

    def _answer_raw(self, status: int, content_type: bytes, body: bytes, extra_headers: bytes = b"") -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        reason = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found",
                  405: b"Method Not Allowed", 413: b"Content Too Large", 431: b"Request Header Fields Too Large"}[status]
        transport.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s"
                        b"Connection: close\r\n\r\n%s" % (status, reason, content_type, len(body), extra_headers, body))
        transport.close()

    def _hand_over(self) -> None:
        """Make the connection picows's: its protocol takes the transport and the bytes read so far."""
        transport = self.transport
        assert transport is not None
        if self.timer is not None:
            self.timer.cancel()  # picows runs its own handshake timeout from here
        protocol = _websocket_protocol(self.sim)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        view = memoryview(bytes(self.data))
        self.data = bytearray()
        while view:
            buffer = protocol.get_buffer(len(view))
            n = min(len(buffer), len(view))
            if n == 0:
                transport.close()
                return
            buffer[:n] = view[:n]
            protocol.buffer_updated(n)
            view = view[n:]


def _headers(head: bytes) -> dict[str, str]:
    """A request head's headers, names in lower case (the last of a repeated one)."""
    found: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            found[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return found


def _content_length(head: bytes) -> int:
    """The Content-Length of a request head (0 if absent, -1 if malformed or chunked)."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return -1
        if name == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return -1
    return length


def _websocket_protocol(sim: ModelSimServer) -> WSProtocol:
    """picows's server-side protocol, built with the arguments picows.ws_create_server would give it (the
    public API offers no way to route a connection by its request line; picows is pinned below 3)."""
    return WSProtocol(
        None,  # host:port (client side only)
        None,  # path (client side only)
        False,  # is_client_side
        sim._open,
        _ws_log,
        True,  # disconnect_on_exception
        HANDSHAKE_TIMEOUT_S,
        False, 20, 20, WSAutoPingStrategy.PING_WHEN_IDLE,  # auto-ping off (and its unused settings)
        True,  # enable_auto_pong
        MAX_MESSAGE_BYTES,
        None,  # extra_headers (client side only)
        16 * 1024,  # read_buffer_init_size
    )


async def serve_model_sim(
    host: str = "127.0.0.1", port: int = 0, config: SimConfig | None = None, *, keep_closed: int | None = None
) -> tuple[ModelSimServer, int]:
    """Start the simulator; returns it (with `.registry`) and the bound port."""
    sim = ModelSimServer(config=config or SimConfig(), clips=default_library(), keep_closed=keep_closed)
    sim.server = await asyncio.get_running_loop().create_server(lambda: _FrontDoor(sim), host, port)
    sim.port = sim.server.sockets[0].getsockname()[1] if sim.server.sockets else port
    return sim, sim.port


async def post_fault(host: str, port: int, kind: str, duration_ms: int = 0, *, call: str | None = None,
                     timeout_s: float = 5.0) -> dict:
    """Client side of `POST /faults` (tests, the chaos bench): returns {"kind", "sessions"}. Raises
    ValueError with the simulator's reason when it refuses the request."""
    request: dict = {"kind": kind, "duration_ms": duration_ms}
    if call is not None:
        request["call"] = call
    status, body = await http_client.send("POST", f"http://{host}:{port}{FAULTS_PATH}",
                                          [("Content-Type", "application/json")], orjson.dumps(request), timeout_s)
    answer = orjson.loads(body)
    if status != 200:
        raise ValueError(f"POST {FAULTS_PATH} answered {status}: {answer.get('error')}")
    return answer


async def _main(args: argparse.Namespace) -> None:
    config = SimConfig(
        naming=args.naming,
        seed=args.seed,
        speed_factor=args.speed_factor,
        late_deltas_after_cancel=args.late_deltas,
        overlap_probability=args.overlap_probability,
        api_keys=tuple(args.api_key),
        models=tuple(args.serve_model),
        session_limit_ms=int(args.session_limit_s * 1000),
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
    parser.add_argument("--api-key", action="append", default=[], metavar="KEY",
                        help="a key the simulator accepts (repeatable); none given: any key")
    parser.add_argument("--serve-model", action="append", default=[], metavar="NAME",
                        help="a model (Azure: deployment) the simulator serves (repeatable); none given: any")
    parser.add_argument("--session-limit-s", type=float, default=3600.0,
                        help="a session ends this long after it opened, as the vendor's do (default 3600)")
    parser.add_argument("--keep-closed", type=int, default=50, help="closed sessions kept in memory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
