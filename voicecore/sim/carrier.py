"""asyncio shell of the carrier simulator: places simulated calls against a voicecore gateway, as Twilio
or, in its carrier modes, as Telnyx, Plivo, Vonage or Exotel (place_call's ``carrier``).

Owns the I/O around the sans-I/O call cores (voicecore.sim.carrier_core.CarrierCall for Twilio,
voicecore.sim.carrier_modes_core for the others): the signed voice webhook and status callbacks (a small
HTTP/1.1 client on h11), following the carrier's answer document to its stream, the WebSocket leg (picows,
no permessage-deflate; a tick's messages of one call go out in one write, voicecore.wsframes), and one
shared 20 ms ticker per event loop that drives the caller clock and the playout clock of every call in
the process, so hundreds of calls cost one timer, not hundreds.

Must not know: what the calls measure (the cores do) or how the gateway works inside. Peer failures
never raise out of place_call(); they end up in CallResult.errors.
"""

import asyncio
import logging
import math
import secrets
import time
import urllib.parse
import uuid
import weakref
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import h11
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from picows import WSCloseCode, WSError, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from voicecore import http_client
from voicecore.carriers.events import ENCODING_L16
from voicecore.carriers.simulator import CarrierSimulator
from voicecore.wsunix import connect_unix_stream
from voicecore.sim.carrier_core import (
    DEFAULT_LEAD_FRAMES,
    CarrierCall,
    CarrierMetrics,
    CarrierStatistics,
)
from voicecore.sim import carrier_modes_core as modes
from voicecore.sim.carrier_modes_core import CarrierCredentials
from voicecore.sim.random_ids import RANDOM_IDS
from voicecore.timing import FRAME_MS
from voicecore.carriers.twilio.signature import compute_signature
from voicecore.wsframes import masked_text_frame, masked_text_frames

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 5.0
WS_CONNECT_TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 2.0  # after our close frame, how long the server has to close TCP
END_SLACK_S = 10.0  # a call may overrun its script by this much before it is abandoned
USER_AGENT = "TwilioProxy/1.1"
MAX_FRAME_BYTES = 16 * 2**20  # what the simulated carrier accepts from a gateway (it counts, never refuses, junk)
_TEXT = WSMsgType.TEXT
_BINARY = WSMsgType.BINARY
_ws_log = logging.getLogger("voicecore.sim.carrier.ws")  # picows logs each connection at INFO
_ws_log.setLevel(logging.WARNING)


# ----- script and result -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallScript:
    """What the simulated caller does. Times are ms after the stream's first media frame."""

    duration_ms: int
    utterances: tuple[tuple[int, bytes], ...] = ()  # (at_ms, mu-law clip)
    bargein_at_ms: tuple[int, ...] | None = None  # None: at the start of every utterance
    dtmf: tuple[tuple[int, str], ...] = ()  # (at_ms, digit)
    from_number: str = "+15005550006"
    to_number: str = "+15005550001"
    # A caller who decides while the call runs (voicecore/sim/turn_caller.py): called every 20 ms tick with
    # (the call's core, ms since its first media frame, now ms); it may add utterances to the core, and
    # returns True to hang up now. Twilio mode only, unless the caller says ``any_carrier`` (the simulated IVR).
    caller: Callable[[CarrierCall, float, float], bool] | None = None

    def bargein_times_ms(self) -> tuple[int, ...]:
        if self.bargein_at_ms is not None:
            return tuple(sorted(self.bargein_at_ms))
        return tuple(sorted(at_ms for at_ms, _clip in self.utterances))


@dataclass(slots=True)
class CallResult:
    call_sid: str
    metrics: CarrierMetrics | None  # None when the call never reached the WebSocket
    statistics: CarrierStatistics | None
    close_code: int | None  # the code of the server's close frame when the server closed first
    closed_by: str  # "carrier" (script ended), "server", "connection_lost" or "not_connected"
    errors: list[str] = field(default_factory=list)
    core: CarrierCall | None = None  # the whole record: frames, played log, per-tag queries
    carrier: str = "twilio"  # which carrier the simulator acted as (voicecore.sim.carrier_modes_core.CARRIERS)


# ----- HTTP (webhook and status callback) --------------------------------------------------------


async def http_request(
    method: str, url: str, form: dict[str, str] | None = None, headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = HTTP_TIMEOUT_S, unix_socket: str | None = None,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request over a fresh connection (plain http only); returns (status, body).

    POST sends ``form`` url-encoded in the body; GET puts it in the query string. ``unix_socket``: reach
    the URL through this Unix socket (a gateway with listen = unix:PATH).
    """
    return await asyncio.wait_for(_http_request(method, url, form or {}, headers, unix_socket), timeout_s)


async def _http_request(method: str, url: str, form: dict[str, str], headers, unix_socket: str | None) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    # Through a Unix socket the carrier stands in for the TLS proxy's plain side: https is sent as http.
    if parts.scheme not in (("http", "https") if unix_socket else ("http",)) or not parts.hostname:
        raise ValueError(f"only http:// URLs are supported, got {parts.scheme!r}")
    body = b""
    extra = list(headers)
    if method == "POST":
        body = urllib.parse.urlencode(form).encode("ascii")
        extra.append(("Content-Type", "application/x-www-form-urlencoded"))
    elif form:
        query = "&".join(filter(None, [parts.query, urllib.parse.urlencode(form)]))
        url = urllib.parse.urlunsplit(parts._replace(query=query))
    return await http_client.send(method, url, extra, body, timeout_s=HTTP_TIMEOUT_S * 2, user_agent=USER_AGENT,
                                  unix_socket=unix_socket)


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """What the TwiML `<Connect><Stream>` tells Twilio (docs/explanation/protocols.md#a4)."""

    url: str
    name: str | None
    status_callback: str | None
    status_callback_method: str
    parameters: dict[str, str]
    action: str | None = None  # <Connect action>: where the call goes on when the stream ends


def parse_twiml(body: bytes) -> StreamTarget:
    """Find the `<Connect><Stream>` in a TwiML response. Raises ValueError if there is none."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise ValueError(f"TwiML is not XML: {exc}") from None
    stream = root.find("./Connect/Stream")
    if root.tag != "Response" or stream is None or not stream.get("url"):
        raise ValueError("TwiML has no <Response><Connect><Stream url=...>")
    parameters = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
    return StreamTarget(
        url=stream.get("url", ""),
        name=stream.get("name"),
        status_callback=stream.get("statusCallback"),
        status_callback_method=(stream.get("statusCallbackMethod") or "POST").upper(),
        parameters=parameters,
        action=root.find("./Connect").get("action"),
    )


async def _signed_request(auth_token: str, method: str, url: str, form: dict[str, str],
                          unix_socket: str | None = None) -> tuple[int, bytes]:
    # Twilio signs the full URL plus the sorted POST params; for GET the params are part of the URL.
    if method == "POST":
        signature = compute_signature(auth_token, url, form)
    else:
        signed_url = url + ("&" if "?" in url else "?") + urllib.parse.urlencode(form) if form else url
        signature = compute_signature(auth_token, signed_url, {})
    return await http_request(method, url, form, [("X-Twilio-Signature", signature)], unix_socket=unix_socket)


# ----- the shared ticker ------------------------------------------------------------------------


class SharedTicker:
    """Absolute 20 ms clocks on one event loop for every registered call, in PHASES phases.

    Real callers are not in step: each call's 20 ms grid has its own phase. So a call is given a phase
    (round robin, assign_phase()) and is serviced on origin + phase * SUB_TICK_MS + k * 20 ms; one timer
    fires every SUB_TICK_MS and runs the calls of the phase that is due. A gateway then sees a quarter of
    the calls' media every 5 ms instead of all of it at once, as it would from Twilio, and the simulator's
    own work comes in small batches that delay its arrival time stamps less.

    A late wake-up runs every phase whose turn passed (each at its newest grid point); each call's core
    catches up the frames it owes, so nothing drifts (docs/explanation/architecture.md#section-6). Callbacks get
    (grid_ms, now_ms) and return False to leave.
    """

    PHASES = 4
    SUB_TICK_MS = FRAME_MS // PHASES

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.monotonic) -> None:
        self._loop = loop
        self._clock = clock  # seconds; CLOCK_MONOTONIC (tests pass a fake)
        self._origin_ms: int | None = None
        self._next_index = 0  # sub-tick index: origin + index * SUB_TICK_MS
        self._handle: asyncio.TimerHandle | None = None
        self._callbacks: list[dict[int, Callable[[int, float], bool]]] = [{} for _ in range(self.PHASES)]
        self._next_key = 0
        self._next_phase = 0
        self.ticks = 0  # timer wake-ups
        self.late_ticks = 0  # woke a whole frame or more after the grid point

    @property
    def origin_ms(self) -> int:
        if self._origin_ms is None:
            self._origin_ms = math.ceil(self.now_ms())
        return self._origin_ms

    def now_ms(self) -> float:
        # CLOCK_MONOTONIC read now, not the loop's clock: uvloop's loop.time() is libuv's cached
        # millisecond time of the current iteration, too coarse and stale for arrival stamps. The same
        # clock as the stack's processes (time.monotonic_ns), so their records line up.
        return self._clock() * 1000.0

    def live(self) -> int:
        """Calls registered now."""
        return sum(len(callbacks) for callbacks in self._callbacks)

    def assign_phase(self) -> int:
        """The phase for the next call (round robin over PHASES)."""
        phase = self._next_phase
        self._next_phase = (phase + 1) % self.PHASES
        return phase

    def phase_origin_ms(self, phase: int) -> int:
        """Where ``phase``'s 20 ms grid starts: origin + phase * SUB_TICK_MS."""
        return self.origin_ms + phase * self.SUB_TICK_MS

    def add(self, callback: Callable[[int, float], bool], phase: int = 0) -> int:
        if not 0 <= phase < self.PHASES:
            raise ValueError(f"phase must be in 0..{self.PHASES - 1}")
        key = self._next_key
        self._next_key += 1
        self._callbacks[phase][key] = callback
        if self._handle is None:
            origin = self.origin_ms
            self._next_index = max(self._next_index, math.ceil((self.now_ms() - origin) / self.SUB_TICK_MS))
            self._schedule()
        return key

    def remove(self, key: int) -> None:
        for callbacks in self._callbacks:
            callbacks.pop(key, None)

    def _schedule(self) -> None:
        when_ms = self.origin_ms + self._next_index * self.SUB_TICK_MS
        self._handle = self._loop.call_later(max(0.0, when_ms - self.now_ms()) / 1000.0, self._tick)

    def _tick(self) -> None:
        self._handle = None
        now_ms = self.now_ms()
        due_ms = self.origin_ms + self._next_index * self.SUB_TICK_MS
        if now_ms < due_ms:
            # uvloop's timers count whole milliseconds of a clock read at the start of the loop's
            # iteration, so they can fire up to ~1.5 ms early: wait for the grid point itself (playout
            # ticks must not run before their time).
            self._handle = self._loop.call_later((due_ms - now_ms) / 1000.0, self._tick)
            return
        index = max(self._next_index, int((now_ms - self.origin_ms) // self.SUB_TICK_MS))
        if index - self._next_index >= self.PHASES:
            self.late_ticks += 1
        self.ticks += 1
        for sub_index in range(max(self._next_index, index - self.PHASES + 1), index + 1):
            callbacks = self._callbacks[sub_index % self.PHASES]
            grid_ms = self.origin_ms + sub_index * self.SUB_TICK_MS
            for key, callback in list(callbacks.items()):
                try:
                    keep = callback(grid_ms, now_ms)
                except Exception:  # one broken call must not stop the clock of all the others
                    logger.exception("carrier sim: call tick failed")
                    keep = False
                if not keep:
                    callbacks.pop(key, None)
        self._next_index = index + 1
        if any(self._callbacks):
            self._schedule()


_tickers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedTicker]" = weakref.WeakKeyDictionary()


def shared_ticker(loop: asyncio.AbstractEventLoop | None = None) -> SharedTicker:
    """The one ticker of ``loop`` (the running loop by default)."""
    loop = loop or asyncio.get_running_loop()
    ticker = _tickers.get(loop)
    if ticker is None:
        ticker = _tickers[loop] = SharedTicker(loop)
    return ticker


# ----- the WebSocket leg ------------------------------------------------------------------------


class StreamListener(WSListener):
    """The picows side of one call's stream: frames in, core calls, texts out."""

    def __init__(self, call: "CallRunner") -> None:
        self.call = call
        self.transport: WSTransport | None = None
        self.closed: asyncio.Future[None] = call.loop.create_future()
        self._fragments: list[bytes] = []
        self._fragment_text = True
        self._close_timer: asyncio.TimerHandle | None = None
        self.close_sent_by_us = False

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        self._write = transport.underlying_transport.write  # looked up once: send_texts runs every 20 ms

    def send_texts(self, messages: list[str]) -> None:
        transport = self.transport
        if not messages or transport is None or transport.is_close_frame_sent or transport.is_disconnected:
            return
        # A tick's messages (a mark echo and the next caller frame) in one write, as one TCP segment: a
        # write is a system call that also runs the gateway's side of loopback TCP. Framed here, not by
        # picows, so the masking keys come from one bulk read of the OS's random source (wsframes).
        if len(messages) == 1:
            self._write(masked_text_frame(messages[0].encode()))
        else:
            self._write(masked_text_frames([message.encode() for message in messages]))

    def send_messages(self, messages: list) -> None:
        """``str`` messages as text frames, ``bytes`` as binary frames (Vonage's audio), in order."""
        transport = self.transport
        if not messages or transport is None or transport.is_close_frame_sent or transport.is_disconnected:
            return
        texts: list[str] = []
        for message in messages:
            if type(message) is str:
                texts.append(message)
                continue
            self.send_texts(texts)
            texts = []
            transport.send(WSMsgType.BINARY, message)
        self.send_texts(texts)

    def close(self, code: int = 1000) -> None:
        transport = self.transport
        if transport is None or transport.is_close_frame_sent or transport.is_disconnected:
            return
        self.close_sent_by_us = True
        transport.send_close(WSCloseCode(code))
        # The server should answer and close TCP now; do not wait for it forever.
        self._close_timer = self.call.loop.call_later(CLOSE_TIMEOUT_S, transport.disconnect)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        msg_type = frame.msg_type
        if msg_type is _TEXT or msg_type is _BINARY:
            if frame.fin:
                self.call.on_message(frame.get_payload_as_bytes(), msg_type is _TEXT)
            else:
                self._fragment_text = msg_type is WSMsgType.TEXT
                self._fragments = [frame.get_payload_as_bytes()]
        elif msg_type is WSMsgType.CONTINUATION:
            self._fragments.append(frame.get_payload_as_bytes())
            if frame.fin:
                self.call.on_message(b"".join(self._fragments), self._fragment_text)
                self._fragments = []
        elif msg_type is WSMsgType.CLOSE:
            code = frame.get_close_code()
            self.call.on_close_frame(1005 if code is WSCloseCode.NO_INFO else code.value,
                                     by_server=not self.close_sent_by_us)
            if not transport.is_close_frame_sent:
                transport.send_close(code if code is not WSCloseCode.NO_INFO else WSCloseCode.OK)
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self._close_timer is not None:
            self._close_timer.cancel()
        if not self.closed.done():
            self.closed.set_result(None)
        self.call.on_connection_lost()


# ----- one call ----------------------------------------------------------------------------------


def _sid(prefix: str) -> str:
    # Twilio's SIDs: two letters + 32 hex digits (docs/explanation/protocols.md#a2).
    return prefix + uuid.uuid4().hex


def _rfc3339_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# A tick this long after the previous one (two frames; they come every 20 ms) means the simulator itself
# stalled: CarrierMetrics.harness_stalls.
HARNESS_STALL_MS = 2 * FRAME_MS


class CallRunner:
    def __init__(self, core: CarrierCall, script: CallScript, ticker: SharedTicker) -> None:
        self.core = core
        self.script = script
        self.ticker = ticker
        self.loop = asyncio.get_running_loop()
        self.stream: StreamListener | None = None
        self.errors: list[str] = []
        self.close_code: int | None = None
        self.closed_by = "not_connected"
        self.done = False
        self._dtmf = sorted(script.dtmf, key=lambda item: item[0])
        self._bargeins = list(script.bargein_times_ms())
        self._stopped_future: asyncio.Future[None] = self.loop.create_future()
        # The Twilio adapter (CarrierCall) writes text only and one stop; the other carriers' adapters may
        # write binary frames (Vonage) and end with several messages or none (carrier_modes_core.ModeCall).
        self._modes = not isinstance(core, CarrierCall)
        self._send: Callable[[list], None] = self._send_first
        self._last_tick_ms: float | None = None
        self._clock = ticker._clock
        # The script's caller, when it plays on this carrier (Twilio, or a caller that says ``any_carrier``).
        caller = script.caller
        self._caller = caller if caller is not None and (not self._modes or getattr(caller, "any_carrier", False)) else None

    def attach(self, stream: "StreamListener") -> None:
        self.stream = stream

    def reattached(self, stream: "StreamListener") -> None:
        """The call goes on over ``stream`` (a new one after a drop): running again, its sender looked up anew."""
        self.stream = stream
        self.done = False
        self.closed_by = "carrier"
        self.close_code = None
        self._send = self._send_first
        self._stopped_future = self.loop.create_future()

    def _send_first(self, messages: list) -> None:
        # The stream's sender, looked up once (the stream of a call never changes once it is set).
        stream = self.stream
        self._send = stream.send_messages if self._modes else stream.send_texts
        self._send(messages)

    def _note_tick(self, now_ms: float) -> None:
        last = self._last_tick_ms
        if last is not None and now_ms - last > HARNESS_STALL_MS:
            self.core.metrics.harness_stalls.append((last + FRAME_MS, now_ms))
        self._last_tick_ms = now_ms

    # Called by the shared ticker every 20 ms, for every call in the process: the hot path (one call's
    # work per tick, no helper calls for what is usually absent: a caller, DTMF, barge-ins).
    def on_tick(self, grid_ms: int, now_ms: float) -> bool:
        if self.done:
            return False
        core = self.core
        self._note_tick(now_ms)
        core.tick_play(now_ms)
        out = core.messages_to_send()
        origin = core.send_origin_ms
        elapsed_ms = 0 if origin is None else grid_ms - origin
        end_ms = self.script.duration_ms
        caller = self._caller
        if caller is not None and origin is not None and caller(core, elapsed_ms, now_ms):
            end_ms = elapsed_ms  # the caller hangs up
        if elapsed_ms >= end_ms:
            # Frames due before the end still go out, even if the tick that owed them was skipped.
            if origin is not None:
                out.extend(core.tick_send(math.nextafter(origin + end_ms, -math.inf)))
            out.extend(core.stop_messages(now_ms))
            self._send(out)
            self.closed_by = "carrier"
            self.stream.close(1000)
            self._finish()
            return False
        dtmf = self._dtmf
        while dtmf and dtmf[0][0] <= elapsed_ms:
            out.append(core.send_dtmf(dtmf.pop(0)[1]))
        bargeins = self._bargeins
        while bargeins and bargeins[0] <= elapsed_ms:
            bargeins.pop(0)
            core.note_bargein(now_ms)
        out += core.tick_send(grid_ms)
        self._send(out)
        return True

    def end_by_rest(self, action: str) -> None:
        """The carrier's REST API was asked to hang up or transfer this call (voicecore/sim/carrier_rest.py):
        the call leaves the stream as the carrier ends a stream (its last messages, then the close)."""
        if self.done or self.stream is None:
            return
        out = self.core.messages_to_send()
        out.extend(self.core.stop_messages(self.ticker.now_ms()))
        self._send(out)
        self.closed_by = f"rest_{action}"
        self.stream.close(1000)
        self._finish()

    def on_message(self, data: bytes, is_text: bool) -> None:
        if self.done:
            return
        now_ms = self._clock() * 1000.0  # the ticker's clock (SharedTicker.now_ms), read without two calls
        if not (is_text and self.core.receive_fast(data, now_ms)):
            text: str | bytes = data
            if is_text:
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    pass  # the core counts it as a bad frame
            self.core.receive(text, now_ms)
        if self.stream is not None:
            out = self.core.messages_to_send()
            if out:  # most messages (media frames, marks queued behind them) produce nothing to send
                self._send(out)

    def on_close_frame(self, code: int | None, by_server: bool) -> None:
        if by_server and not self.done:
            self.close_code = code
            self.closed_by = "server"
        self._finish()

    def on_connection_lost(self) -> None:
        if not self.done:
            self.closed_by = "connection_lost"
            self.errors.append("WebSocket connection lost before the call ended")
        self._finish()

    def _finish(self) -> None:
        self.done = True
        if not self._stopped_future.done():
            self._stopped_future.set_result(None)

    async def wait_finished(self, timeout_s: float) -> None:
        await asyncio.wait_for(asyncio.shield(self._stopped_future), timeout_s)


async def _play_stream_out(runner, stream, ticker, phase: float, script, core, errors: list[str]) -> None:
    """Run one stream of a call from its first tick to its close: the caller's script until it is done (or its
    time is up: an error), then the TCP close that follows the close handshake (bounded by the protocol's close
    timer; a peer that never closes is cut off)."""
    ticker.add(runner.on_tick, phase)
    left_s = script.duration_ms / 1000.0 + END_SLACK_S
    if core.send_origin_ms is not None:
        left_s -= (ticker.now_ms() - core.send_origin_ms) / 1000.0
    try:
        await runner.wait_finished(max(left_s, 1.0))
    except asyncio.TimeoutError:
        errors.append("call did not finish in time")
        runner.done = True
    try:
        await asyncio.wait_for(asyncio.shield(stream.closed), CLOSE_TIMEOUT_S + 1.0)
    except asyncio.TimeoutError:
        if stream.transport is not None:
            stream.transport.disconnect()

async def place_call(
    base_url_http: str,
    auth_token: str,
    script: CallScript,
    lead_frames: int = DEFAULT_LEAD_FRAMES,
    *,
    call_sid: str | None = None,
    account_sid: str | None = None,
    keep_audio: bool = True,
    plain_ws: bool = True,
    unix_socket: str | None = None,
    carrier: str = "twilio",
    credentials: CarrierCredentials | None = None,
    jitter_probability: float = 0.0,
    exotel_encoding: str = ENCODING_L16,
    playout_stall: tuple[int, int] = (0, 0),
    rest=None,
    voice_url: str | None = None,
    direction: str = "inbound",
    follow_action: bool = True,
    request_uuid: str = "",
) -> CallResult:
    """Run one simulated inbound call against the gateway at ``base_url_http`` and measure it.

    POSTs the signed voice webhook to {base}/twilio/voice, opens the TwiML's Stream URL (wss is dialled
    as plain ws when ``plain_ws``: the gateway serves ws on 127.0.0.1), plays ``script`` for
    script.duration_ms on the loop's clock, sends `stop` and closes, and reports stream-started /
    stream-stopped to the statusCallback. Times come from the running loop's clock. ``unix_socket``: every
    connection (webhooks and the stream) goes to this Unix socket, whatever the URLs' hosts (a gateway
    with listen = unix:PATH, standing in for the TLS proxy in front of it).

    ``carrier``: act as this carrier instead (telnyx, plivo, vonage, exotel; place_mode_call): its signed
    answer webhook, its answer document followed, its stream. ``credentials`` then holds the secrets
    (``auth_token`` is Twilio's); ``jitter_probability``: Telnyx sends that share of caller frames after the
    next one; ``exotel_encoding``: what Exotel streams (l16, its base guide, or pcmu, its beta's default);
    ``playout_stall``: (stall_ms, every_ms), Plivo's playout stalls that long that often (PlayoutCore.set_playout_stall);
    ``rest``: a voicecore.sim.carrier_rest.CarrierRestServer: its hang-up and transfer requests end the call.
    ``voice_url`` and ``direction``: an outbound call the carrier placed: the answer URL its Calls API request
    gave (signed with its query, as the carrier signs it) and ``outbound-api`` (Twilio's; a carrier mode's
    answer webhook has its own); ``request_uuid``: the placing request's id, for a carrier whose answered call
    gets an id of its own (Plivo); the script's audio is then the callee's.
    A stream that drops without a stop is followed by the TwiML's ``<Connect action>`` as Twilio does (a new
    ``<Connect><Stream>`` answered is connected and the caller talks on), for Telnyx and Plivo by the
    ``<Redirect>`` their answer document put after the stream, and for Vonage by the ``disconnected`` event to
    its synchronous connect's eventUrl; ``follow_action`` False: act as a carrier that cannot reach that URL (the
    call ends with its stream).
    """
    if modes.adapter_for(carrier) is not None:  # a carrier mode; Twilio's calls are played below
        return await place_mode_call(
            base_url_http, credentials or CarrierCredentials(twilio_auth_token=auth_token), script, lead_frames,
            carrier=carrier, call_sid=call_sid, account_sid=account_sid, keep_audio=keep_audio, plain_ws=plain_ws,
            unix_socket=unix_socket, jitter_probability=jitter_probability, exotel_encoding=exotel_encoding,
            playout_stall=playout_stall, rest=rest, follow_action=follow_action, answer_url=voice_url or "",
            request_uuid=request_uuid)
    loop = asyncio.get_running_loop()
    call_sid = call_sid or _sid("CA")
    account_sid = account_sid or _sid("AC")
    stream_sid = _sid("MZ")
    errors: list[str] = []

    def failed(reason: str) -> CallResult:
        errors.append(reason)
        return CallResult(call_sid, None, None, None, "not_connected", errors)

    # 1. Voice webhook (docs/explanation/protocols.md#a4; docs/explanation/architecture.md#section-3-step-1).
    voice_url = voice_url or base_url_http.rstrip("/") + "/twilio/voice"
    form = {
        "CallSid": call_sid,
        "AccountSid": account_sid,
        "From": script.from_number,
        "To": script.to_number,
        "CallStatus": "ringing",
        "Direction": direction,
        "ApiVersion": "2010-04-01",
    }
    try:
        status, body = await _signed_request(auth_token, "POST", voice_url, form, unix_socket)
    except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError) as exc:
        return failed(f"voice webhook failed: {type(exc).__name__}: {exc}")
    if status != 200:
        return failed(f"voice webhook answered HTTP {status}")
    try:
        target = parse_twiml(body)
    except ValueError as exc:
        return failed(str(exc))
    session_token = target.parameters.get("session_token")
    if session_token is None:
        errors.append("TwiML has no session_token Parameter")
        session_token = ""

    # 2. The stream.
    ticker = shared_ticker(loop)
    phase = ticker.assign_phase()
    core = CarrierCall(
        call_sid, stream_sid, account_sid, session_token, script.utterances, lead_frames,
        play_phase_ms=ticker.phase_origin_ms(phase), keep_audio=keep_audio,
        parameters=tuple(target.parameters.items()),
    )
    runner = CallRunner(core, script, ticker)
    runner.errors = errors
    stream = StreamListener(runner)
    runner.attach(stream)
    problem = await _connect_stream(stream, target, auth_token, plain_ws, unix_socket)
    if problem:
        return failed(problem)
    runner.closed_by = "carrier"
    opening = core.opening_messages()
    callbacks: list[asyncio.Task] = []
    if rest is not None:
        rest.register("twilio", call_sid, runner.end_by_rest)
    try:
        while True:
            stream.send_texts(opening)
            status_form = {"AccountSid": account_sid, "CallSid": call_sid, "StreamSid": core.stream_sid,
                           "StreamName": target.name or core.stream_sid}

            def status_callback(event: str, target: StreamTarget = target, status_form: dict = status_form) -> None:
                if not target.status_callback:
                    return
                fields = dict(status_form, StreamEvent=event, Timestamp=_rfc3339_now())
                callbacks.append(loop.create_task(
                    _status_callback(auth_token, target.status_callback, target.status_callback_method, fields, errors,
                                     unix_socket)))

            status_callback("stream-started")
            await _play_stream_out(runner, stream, ticker, phase, script, core, errors)
            status_callback("stream-stopped")
            # The stream ended without the caller's stop (and not by a REST hang-up or transfer): Twilio goes on
            # with the call's instructions, <Connect action> first.
            if runner.closed_by not in ("server", "connection_lost") or not target.action or not follow_action:
                break
            lost_at_ms = ticker.now_ms()
            followed = await _follow_action(auth_token, target.action, dict(form, CallStatus="in-progress"),
                                            errors, unix_socket)
            if followed is None:
                break
            stream = StreamListener(runner)
            problem = await _connect_stream(stream, followed, auth_token, plain_ws, unix_socket)
            if problem:
                errors.append(f"re-attach: {problem}")
                break
            lost = "WebSocket connection lost before the call ended"
            if runner.closed_by == "connection_lost" and lost in errors:
                errors.remove(lost)  # the call went on
            runner.reattached(stream)
            target = followed
            opening = core.reattach(_sid("MZ"), followed.parameters.get("session_token", ""), lost_at_ms,
                                    ticker.now_ms())
    finally:
        if rest is not None:
            rest.unregister("twilio", call_sid)
    if callbacks:
        await asyncio.gather(*callbacks)
    if core.metrics.protocol_errors:
        errors.append(f"{core.metrics.protocol_errors} protocol errors from the gateway: "
                      + "; ".join(core.metrics.error_reasons[:5]))
    return CallResult(call_sid, core.metrics, core.statistics(), runner.close_code, runner.closed_by, errors, core)


async def _connect_stream(stream: StreamListener, target: StreamTarget, auth_token: str, plain_ws: bool,
                          unix_socket: str | None) -> str:
    """Open the WebSocket of ``target``; "" when it opened, else why not."""
    ws_url = target.url
    if plain_ws and ws_url.startswith("wss://"):
        ws_url = "ws://" + ws_url[len("wss://"):]
    # A.1: the upgrade is signed over the Stream URL as the TwiML gave it, with no params.
    headers = {"X-Twilio-Signature": compute_signature(auth_token, target.url, {}), "User-Agent": USER_AGENT}
    try:
        await asyncio.wait_for(
            ws_connect(lambda: stream, ws_url, extra_headers=headers, websocket_handshake_timeout=WS_CONNECT_TIMEOUT_S,
                       max_frame_size=MAX_FRAME_BYTES, max_redirects=0, logger_name=_ws_log,
                       socket_factory=None if unix_socket is None else (lambda _url: connect_unix_stream(unix_socket))),
            WS_CONNECT_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError, WSError, ValueError) as exc:
        if stream.transport is not None:
            stream.transport.disconnect()
        return f"WebSocket connect failed: {type(exc).__name__}: {exc}"
    return ""


# A refused or reset action request is tried again for up to this long. Twilio retries a failed connection
# once by default (more with the URL's connection overrides, rc/rp/tt, up to 15 s in all); the simulator is more
# patient, so that a node without a standby gateway (supervisord restarts it in 1-5 s) can be measured too.
ACTION_RETRY_FOR_S = 10.0
ACTION_RETRY_EVERY_S = 0.05


async def _follow_action(auth_token: str, action_url: str, form: dict[str, str], errors: list[str],
                         unix_socket: str | None) -> StreamTarget | None:
    """POST the ``<Connect action>`` URL as Twilio does when a stream ends (signed over the whole URL and the
    form); the new ``<Connect><Stream>`` it answered, or None: it answered ``<Hangup/>`` (or anything else
    that ends the call) or could not be reached."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + ACTION_RETRY_FOR_S
    while True:
        try:
            status, body = await _signed_request(auth_token, "POST", action_url, form, unix_socket)
            break
        except (OSError, asyncio.TimeoutError, h11.ProtocolError) as exc:
            if loop.time() >= give_up_at:
                errors.append(f"re-attach: action URL unreachable: {type(exc).__name__}")
                return None
            await asyncio.sleep(ACTION_RETRY_EVERY_S)
    if status != 200:
        errors.append(f"re-attach: action URL answered HTTP {status}")
        return None
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        errors.append("re-attach: action URL answered no XML")
        return None
    if root.find("./Connect/Stream") is None:
        return None  # <Hangup/>: the call is over
    try:
        return parse_twiml(body)
    except ValueError as exc:
        errors.append(f"re-attach: {exc}")
        return None


async def _status_callback(auth_token: str, url: str, method: str, fields: dict[str, str], errors: list[str],
                           unix_socket: str | None) -> None:
    event = fields["StreamEvent"]
    try:
        status, _body = await _signed_request(auth_token, method, url, fields, unix_socket)
    except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError) as exc:
        errors.append(f"status callback {event} failed: {type(exc).__name__}")
        return
    if not 200 <= status < 300:
        errors.append(f"status callback {event} answered HTTP {status}")


async def _connect_mode_stream(stream: StreamListener, simulator: CarrierSimulator, target: modes.StreamTarget,
                               credentials: CarrierCredentials, plain_ws: bool, unix_socket: str | None) -> str:
    """Open the WebSocket the carrier's answer named, with the headers the carrier puts on it; "" when it
    opened, else why not."""
    ws_url = target.url
    if plain_ws and ws_url.startswith("wss://"):
        ws_url = "ws://" + ws_url[len("wss://"):]
    upgrade = simulator.stream_headers(target, credentials, nonce=simulator.new_nonce(RANDOM_IDS), now_s=time.time())
    headers = {"User-Agent": simulator.user_agent, **upgrade}
    try:
        await asyncio.wait_for(
            ws_connect(lambda: stream, ws_url, extra_headers=headers, websocket_handshake_timeout=WS_CONNECT_TIMEOUT_S,
                       max_frame_size=MAX_FRAME_BYTES, max_redirects=0, logger_name=_ws_log,
                       socket_factory=None if unix_socket is None else (lambda _url: connect_unix_stream(unix_socket))),
            WS_CONNECT_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError, WSError, ValueError) as exc:
        if stream.transport is not None:
            stream.transport.disconnect()
        return f"WebSocket connect failed: {type(exc).__name__}: {exc}"
    return ""


async def _follow_redirect(simulator: CarrierSimulator, url: str, ids: modes.CallIdentity,
                           credentials: CarrierCredentials, errors: list[str], unix_socket: str | None,
                           ended: modes.StreamTarget | None = None, leg_id: str = "") -> modes.StreamTarget | None:
    """Request the ``<Redirect>`` URL that followed the stream (Vonage: post the ``disconnected`` event of the
    stream ``ended``, leg ``leg_id``, to its synchronous connect's eventUrl), signed as the carrier signs it,
    retried as _follow_action retries Twilio's action URL; the new stream its answer starts, or None
    (``<Hangup/>``, an NCCO that connects nothing, or the URL could not be reached: the call is over)."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + ACTION_RETRY_FOR_S
    while True:
        request = simulator.continuation_request(url, ids, credentials, now_s=time.time(),
                                                 nonce=simulator.new_nonce(RANDOM_IDS), target=ended, leg_id=leg_id)
        try:
            status, body = await http_client.send(request.method, request.url, request.headers, request.body,
                                                  timeout_s=HTTP_TIMEOUT_S * 2, user_agent=simulator.user_agent,
                                                  unix_socket=unix_socket)
            break
        except (OSError, asyncio.TimeoutError, h11.ProtocolError) as exc:
            if loop.time() >= give_up_at:
                errors.append(f"re-attach: redirect URL unreachable: {type(exc).__name__}")
                return None
            await asyncio.sleep(ACTION_RETRY_EVERY_S)
    if status != 200:
        errors.append(f"re-attach: redirect URL answered HTTP {status}")
        return None
    try:
        return simulator.parse_continuation(body)
    except ValueError as exc:
        errors.append(f"re-attach: {exc}")
        return None


# ----- the other carriers ----------------------------------------------------------------------------


def generate_credentials(twilio_auth_token: str = "") -> CarrierCredentials:
    """Random secrets for one run: the simulator keeps these, the stack it calls gets
    ``credentials.stack_settings()`` (the Telnyx public key for the private one kept here)."""
    return CarrierCredentials(
        twilio_auth_token=twilio_auth_token or secrets.token_hex(16),
        telnyx_private_key=secrets.token_bytes(32).hex(),
        plivo_auth_token=secrets.token_urlsafe(30),
        vonage_signature_secret=secrets.token_urlsafe(32),
        exotel_username=secrets.token_hex(10),
        exotel_password=secrets.token_urlsafe(20),
        telnyx_api_key="KEY" + secrets.token_hex(16).upper(),
        plivo_auth_id="MA" + secrets.token_hex(9).upper(),
        vonage_application_id=RANDOM_IDS.uuid(),
        vonage_private_key=_rsa_private_key_pem(),
    )


def _rsa_private_key_pem() -> str:
    """A fresh RSA key of the shape Vonage gives an application (PKCS#8 PEM, 2048 bits)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode("ascii")


async def place_mode_call(
    base_url_http: str,
    credentials: CarrierCredentials,
    script: CallScript,
    lead_frames: int = DEFAULT_LEAD_FRAMES,
    *,
    carrier: str,
    call_sid: str | None = None,
    account_sid: str | None = None,
    keep_audio: bool = True,
    plain_ws: bool = True,
    unix_socket: str | None = None,
    jitter_probability: float = 0.0,
    exotel_encoding: str = ENCODING_L16,
    playout_stall: tuple[int, int] = (0, 0),
    rest=None,
    follow_action: bool = True,
    answer_url: str = "",
    request_uuid: str = "",
) -> CallResult:
    """place_call for Telnyx, Plivo, Vonage or Exotel: the carrier's signed answer webhook
    ({base}/telnyx/voice, /plivo/voice, /vonage/answer, /exotel/voice), its answer document followed to the
    stream (the URL, the codec and what to carry back, as the carrier would read them: nothing about the
    stream's path or where the session token travels is assumed), then the call as place_call plays it, on
    the carrier's adapter (voicecore/sim/carrier_modes_core.py). A Telnyx, Plivo or Vonage stream that ends
    without the caller's stop (the gateway closed it or the connection was lost) goes on as the carrier goes on:
    the ``<Redirect>`` after the stream is requested (Vonage: its ``disconnected`` event is posted to the
    synchronous connect's eventUrl), signed, and a new stream it answers is connected (``follow_action`` False:
    the call ends with its stream). ``answer_url`` and ``request_uuid``: a Plivo call
    its Make Call placed (voicecore/sim/carrier_rest.py), answered at the URL the request gave."""
    adapter = modes.adapter_for(carrier)
    if adapter is None:
        raise ValueError(f"{carrier}'s calls are place_call's own, not a carrier mode's")
    simulator = modes.simulator_of(carrier)
    loop = asyncio.get_running_loop()
    ids = simulator.new_identity(call_sid, account_sid, script.from_number, script.to_number, RANDOM_IDS)
    errors: list[str] = []

    def failed(reason: str) -> CallResult:
        errors.append(reason)
        return CallResult(ids.call_id, None, None, None, "not_connected", errors, carrier=carrier)

    # 1. The answer webhook, signed as the carrier signs it.
    request = modes.answer_webhook(carrier, base_url_http, ids, credentials, now_s=time.time(),
                                   nonce=simulator.new_nonce(RANDOM_IDS), answer_url=answer_url,
                                   request_uuid=request_uuid)
    try:
        status, body = await http_client.send(request.method, request.url, request.headers, request.body,
                                              timeout_s=HTTP_TIMEOUT_S * 2, user_agent=simulator.user_agent,
                                              unix_socket=unix_socket)
    except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError) as exc:
        return failed(f"answer webhook failed: {type(exc).__name__}: {exc}")
    if status != 200:
        return failed(f"answer webhook answered HTTP {status}")
    try:
        target = simulator.parse_answer(body)
    except ValueError as exc:
        return failed(str(exc))
    errors.extend(target.problems)

    # 2. The stream, where the answer said.
    ticker = shared_ticker(loop)
    phase = ticker.assign_phase()
    try:
        options = modes.ModeOptions(ticker.phase_origin_ms(phase), keep_audio, jitter_probability, exotel_encoding,
                                    playout_stall)
        core = adapter.for_stream(ids, target, script.utterances, lead_frames, options)
    except ValueError as exc:  # the answer asked for something the carrier would refuse (an NCCO header named event)
        return failed(f"the answer document cannot be followed: {exc}")
    runner = CallRunner(core, script, ticker)
    runner.errors = errors
    stream = StreamListener(runner)
    runner.attach(stream)
    problem = await _connect_mode_stream(stream, simulator, target, credentials, plain_ws, unix_socket)
    if problem:
        return failed(problem)
    runner.closed_by = "carrier"
    opening = core.opening_messages()
    leg_id = ids.stream_id  # the stream's leg, where the carrier's continuation names it (Vonage's events)
    if rest is not None:
        rest.register(carrier, ids.call_id, runner.end_by_rest)
    try:
        while True:
            stream.send_messages(opening)
            await _play_stream_out(runner, stream, ticker, phase, script, core, errors)
            # The stream ended without the caller's stop (and not by a REST hang-up or transfer): the carrier runs
            # what its document put after the stream, the <Redirect> first.
            if runner.closed_by not in ("server", "connection_lost") or not target.redirect or not follow_action:
                break
            lost_at_ms = ticker.now_ms()
            followed = await _follow_redirect(simulator, target.redirect, ids, credentials, errors, unix_socket,
                                              ended=target, leg_id=leg_id)
            if followed is None:
                break
            stream = StreamListener(runner)
            problem = await _connect_mode_stream(stream, simulator, followed, credentials, plain_ws, unix_socket)
            if problem:
                errors.append(f"re-attach: {problem}")
                break
            lost = "WebSocket connection lost before the call ended"
            if runner.closed_by == "connection_lost" and lost in errors:
                errors.remove(lost)  # the call went on
            runner.reattached(stream)
            target = followed
            leg_id = simulator.new_stream_id(RANDOM_IDS)  # a new stream (Vonage: a new WebSocket leg) of the same call
            opening = core.reattach(followed, leg_id, lost_at_ms, ticker.now_ms())
    finally:
        if rest is not None:
            rest.unregister(carrier, ids.call_id)
    if core.metrics.protocol_errors:
        errors.append(f"{core.metrics.protocol_errors} protocol errors from the gateway: "
                      + "; ".join(core.metrics.error_reasons[:5]))
    return CallResult(ids.call_id, core.metrics, core.statistics(), runner.close_code, runner.closed_by, errors, core,
                      carrier=carrier)
