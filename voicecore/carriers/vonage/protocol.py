"""Vonage Voice API WebSocket (NCCO ``connect`` to a ``websocket`` endpoint), without I/O.

Owns: validating what Vonage sends on the socket into the carrier-neutral events of
:mod:`voicecore.carriers.events`, the order it may send it in and the close code for each kind of bad
input (:class:`VonageStreamProtocol`); the exact messages we send (:class:`VonageOutboundEncoder`); the
carrier's end of the same protocol for the simulator (:class:`VonageCarrierSide`); the answer NCCO
(:func:`ncco_connect_websocket`), with its re-attach step (the synchronous ``connect``'s ``eventUrl``) and the
event Vonage sends there (:func:`parse_leg_event`, :func:`leg_event`); and Vonage's signed webhooks
(:func:`verify_signed_webhook`) and the same JWT on the WebSocket upgrade (:func:`verify_upgrade_jwt`).

Must not know: sockets, clocks, session tokens, call slots, rings, or how audio becomes mu-law (that is
:mod:`voicecore.carriers.codec`, once, at the gateway edge). Time comes in as ``now_s``; ids come in.

Sources (the comparison with Twilio: docs/explanation/protocols.md#b): the Vonage WebSockets guide
(developer.vonage.com/en/voice/voice-api/concepts/websockets;
an earlier text of it is in ``mheap/nexmo-developer:_documentation/en/voice/voice-api/guides/
websockets.md``), the AsyncAPI model taken from it (``api-evangelist/vonage:asyncapi/vonage-asyncapi.yml``),
the NCCO reference's websocket endpoint, pipecat's ``src/pipecat/serializers/vonage.py``, and the signed
webhooks pages (Messages API concept page; the Voice page says Voice signs "the same JWT"), and for the
upgrade the websocket endpoint's ``authorization`` object as Vonage's own SDK types it (``Vonage/vonage-node-sdk``
``packages/voice/lib/types/Endpoint/WebsocketAuthorization.ts``: with ``{"type": "vonage"}`` "the Voice API
includes the same JWT used for signed webhooks in the Authorization header (Bearer {JWT})" of the opening
handshake). The re-attach step: the WebSockets guide's "WebSocket fallback options" (a ``connect`` with
``"eventType": "synchronous"`` gets an event at its ``eventUrl`` when the WebSocket cannot be connected,
``failed`` / ``unanswered``, or "is terminated by the application for any reason", ``disconnected``; the answer
may be a new NCCO; "If you do not return an NCCO, the next action in the original NCCO will be processed. If there
are no further actions in the original NCCO, the call will complete"; the event carries the endpoint's
``headers``), the NCCO reference's ``connect`` (``eventType``, ``eventUrl``, ``eventMethod``: "calls
asynchronously on each of the possible Call States") and the Voice API webhooks reference ("Voice API ... support
signed callbacks by default").

The wire, as documented:

- Vonage is the WebSocket client. Its first message is **text**: ``{"event":"websocket:connected",
  "content-type":"audio/l16;rate=16000", ...}`` with every key of the NCCO endpoint's ``headers`` echoed
  at the top level (there is no ``headers`` key).
- Then **binary** messages of caller audio: 16-bit signed little-endian linear PCM, mono, 20 ms each
  (320 bytes at 8 kHz, 640 at 16 kHz), and **text** events "at any point": ``websocket:dtmf``
  ``{"event":"websocket:dtmf","digit":"5","duration":260}`` (one digit per key press),
  ``websocket:notify`` ``{"event":"websocket:notify","payload":{...}}`` (the echo of our ``notify``'s
  payload once the audio queued before it has played), ``websocket:cleared`` (our ``clear`` was done).
  The guide tells receivers to read ``event`` and ignore what is not of interest, so an unknown event is
  counted and ignored, not a violation (unlike Twilio's strict table).
- The call ends by the socket closing: there is no ``stop`` message. The shell calls
  :meth:`VonageStreamProtocol.socket_closed` to get the :class:`StreamStopped` the gateway expects.
- We send binary L16 frames of exactly 20 ms at the negotiated rate ("it is important that each message
  is 320 or 640 bytes"); Vonage buffers them (3072 frames, ~60 s, per the AsyncAPI; an older guide said
  1024, ~20 s), ``{"action":"clear"}`` and ``{"action":"notify","payload":{...}}``.

Decisions that are ours:

- Identity. Vonage has no stream id, and the ``websocket:connected`` message carries only what our NCCO
  put in ``headers``. voicecore's NCCO sets :data:`HEADER_CALL_ID` (``call_id``: the call leg's ``uuid``
  from the answer webhook; required, else 1007), :data:`HEADER_SESSION_TOKEN` (``session_token``: the
  gateway's one-time token, as the Twilio ``<Parameter>``; checked by the gateway, not here) and, when
  the gateway has one, :data:`HEADER_ACCOUNT_ID` (``account_id``: e.g. the Vonage application id).
  ``StreamStarted.stream_id`` is "" (our messages carry no id).
- Marks. A mark is a ``notify`` whose payload is ``{"mark": name}``; its echo becomes a
  :class:`MarkEcho`. A ``websocket:notify`` without a string ``mark`` is 1007 (only we send notifies).
- Frame sizes. The guide says every audio message is 20 ms; we accept any non-empty whole number of
  samples (``odd_sized_frames`` counts those that are not 20 ms), because a resize on Vonage's side must
  not drop calls and the codec's Framer restores exact frames. An odd byte count (half a sample) or an
  empty frame is 1007.
- Sequence numbers are ours: the 1-based index of the message on the socket (text and binary alike;
  ``websocket:connected`` is 1). ``CallerAudio.timestamp_ms`` is the audio received before the frame, in
  ms (frame n of 20 ms: 20 * (n - 1)).
- DTMF: ``digit`` at the top level (documented); ``{"dtmf":{"digit":...}}`` is also read, as pipecat
  does. ``duration`` is not used and not checked.

Bad peer input never raises out of :class:`VonageStreamProtocol`: it becomes one ``ProtocolViolation``,
after which the protocol is closed and ignores everything. Our own misuse raises ``ValueError``.

Close codes (RFC 6455 section 7.4.1), the whole table:

=====  ======================================================================================
1007   malformed data: text not UTF-8, not JSON, not an object, garbage after the JSON value,
       ``event`` not a string, ``content-type`` not ``audio/l16;rate=8000|16000``, no string
       ``call_id`` header (or a non-string ``account_id``), a DTMF digit that is not one key,
       a notify payload without a string ``mark``; an empty audio frame or one of an odd
       number of bytes
1008   policy / order: a binary frame or any event other than ``websocket:connected`` before
       ``websocket:connected``, a second ``websocket:connected``, anything after the socket
       closed, no ``websocket:connected`` before ``timing.START_DEADLINE_MS``
1009   a message (text in UTF-8 bytes, or binary) larger than ``timing.MAX_MESSAGE_BYTES``
=====  ======================================================================================

There is no 1003: Vonage legitimately sends both binary and text frames.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union
from urllib.parse import urlsplit

import jwt
import orjson

from voicecore.carriers.events import (
    ENCODING_L16,
    CallerAudio,
    CarrierEvent,
    Cleared,
    Dtmf,
    MarkEcho,
    Outbound,
    ProtocolViolation,
    StreamConnected,
    StreamStarted,
    StreamStopped,
)
from voicecore.carriers.jsonwire import ClosesOnViolation, Violation, load_event, load_object, malformed
from voicecore.timing import FRAME_MS, MAX_MESSAGE_BYTES, START_DEADLINE_MS

__all__ = [
    "AUTHORIZATION_VONAGE",
    "CLEAR_MESSAGE",
    "CloseCode",
    "DEFAULT_SAMPLE_RATE_HZ",
    "EVENT_TYPE_SYNCHRONOUS",
    "HEADER_ACCOUNT_ID",
    "HEADER_CALL_ID",
    "HEADER_SESSION_TOKEN",
    "MAX_NCCO_HEADERS_BYTES",
    "NOTIFY_HEAD",
    "NOTIFY_TAIL",
    "SentAudio",
    "SentClear",
    "SentInvalid",
    "SentMessage",
    "SentNotify",
    "State",
    "VONAGE_BUFFER_FRAMES",
    "VONAGE_SAMPLE_RATES_HZ",
    "VonageCarrierSide",
    "VonageOutboundEncoder",
    "VonageStreamProtocol",
    "VonageStreamStatistics",
    "LEG_DISCONNECTED",
    "LegEvent",
    "content_type",
    "frame_bytes",
    "leg_event",
    "ncco_connect_websocket",
    "ncco_end_call",
    "parse_leg_event",
    "sign_webhook",
    "verify_signed_webhook",
    "verify_upgrade_jwt",
]

VONAGE_SAMPLE_RATES_HZ = (8000, 16000)  # the NCCO websocket endpoint's content-type values (NCCO reference)
# 16 kHz is what Vonage's examples use. 8 kHz is the PSTN's own rate and needs no resampling at the edge
# (codec.py: no delay, <1 us per frame); prefer it unless a 16 kHz leg (SIP/WebRTC HD) is expected.
DEFAULT_SAMPLE_RATE_HZ = 16000
VONAGE_BUFFER_FRAMES = 3072  # outbound frames Vonage buffers (AsyncAPI: ~60 s); older guide: 1024
MAX_NCCO_HEADERS_BYTES = 512  # "The maximum length of the headers data is 512 bytes" (WebSockets guide)
SAMPLE_WIDTH_BYTES = 2

HEADER_CALL_ID = "call_id"
HEADER_SESSION_TOKEN = "session_token"
HEADER_ACCOUNT_ID = "account_id"
# The websocket endpoint's ``authorization.type`` that makes Vonage put its signed-webhook JWT on the upgrade.
AUTHORIZATION_VONAGE = "vonage"
# The connect's ``eventType`` that makes it wait for its ``eventUrl``'s answer on the leg's failure states.
EVENT_TYPE_SYNCHRONOUS = "synchronous"
# The WebSocket leg's status when the socket ended without the call ending: the application (or, as it reads to
# Vonage, its server vanishing) terminated the connection (WebSockets guide, "WebSocket disconnected").
LEG_DISCONNECTED = "disconnected"

EVENT_CONNECTED = "websocket:connected"
EVENT_DTMF = "websocket:dtmf"
EVENT_NOTIFY = "websocket:notify"
EVENT_CLEARED = "websocket:cleared"
_CONTENT_TYPE_KEY = "content-type"
_MARK_KEY = "mark"
_RESERVED_KEYS = frozenset({"event", _CONTENT_TYPE_KEY})  # keys of websocket:connected that are not headers
_AUDIO = "audio"  # the transition table's name for a binary frame
_DTMF_DIGITS = frozenset("0123456789*#ABCD")
_CONTENT_TYPE = re.compile(r"audio/l16\s*;\s*rate\s*=\s*([0-9]{1,6})", re.IGNORECASE)


def content_type(sample_rate_hz: int) -> str:
    """The NCCO / ``websocket:connected`` content-type for L16 at ``sample_rate_hz``."""
    return f"audio/l16;rate={sample_rate_hz}"


def frame_bytes(sample_rate_hz: int) -> int:
    """Bytes of one 20 ms L16 frame: 320 at 8 kHz, 640 at 16 kHz."""
    return sample_rate_hz * FRAME_MS // 1000 * SAMPLE_WIDTH_BYTES


def _check_rate(sample_rate_hz: object) -> int:
    if type(sample_rate_hz) is not int or sample_rate_hz not in VONAGE_SAMPLE_RATES_HZ:
        raise ValueError(f"sample_rate_hz must be one of {VONAGE_SAMPLE_RATES_HZ}")
    return sample_rate_hz


class CloseCode(enum.IntEnum):
    """WebSocket close codes this protocol closes with (RFC 6455 section 7.4.1)."""

    INVALID_PAYLOAD = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009


@dataclass(frozen=True, slots=True)
class VonageStreamStatistics:
    messages_received: int
    audio_frames: int
    audio_payload_bytes: int
    odd_sized_frames: int  # audio frames that were not exactly 20 ms (accepted; see the module docstring)
    marks_received: int
    dtmf_received: int
    clears_received: int
    unknown_events: int  # text events we do not know, ignored as the guide asks
    violations: int


# --- states and the transition table ---------------------------------------------------------------


class State(enum.Enum):
    AWAITING_CONNECTED = "awaiting_connected"
    STREAMING = "streaming"
    STOPPED = "stopped"  # the socket closed (socket_closed)
    CLOSED = "closed"  # after a violation: every further input is ignored


# Rules (WebSockets guide): `websocket:connected` first, once; then audio frames and the text events in
# any number; the end is the socket closing. Any known (state, message) pair not in this table is a 1008
# policy violation; an unknown event while streaming is ignored (see the module docstring).
_TRANSITIONS: dict[tuple[State, str], State] = {
    (State.AWAITING_CONNECTED, EVENT_CONNECTED): State.STREAMING,
    (State.STREAMING, _AUDIO): State.STREAMING,
    (State.STREAMING, EVENT_DTMF): State.STREAMING,
    (State.STREAMING, EVENT_NOTIFY): State.STREAMING,
    (State.STREAMING, EVENT_CLEARED): State.STREAMING,
}
_KNOWN_EVENTS = frozenset(event for _, event in _TRANSITIONS if event != _AUDIO)


def _header_text(value: object) -> str:
    """A header's value as text: a string as it is, anything else (the NCCO allows any JSON) as compact JSON."""
    if type(value) is str:
        return value
    return orjson.dumps(value).decode("utf-8")


# --- the protocol ----------------------------------------------------------------------------------


class VonageStreamProtocol(ClosesOnViolation):
    """One Vonage socket's inbound state machine. Feed it every WebSocket message; it returns events.

    Text messages go to :meth:`receive_text`, binary ones to :meth:`receive_binary`. ``websocket:connected``
    gives two events, :class:`StreamConnected` then :class:`StreamStarted`; every other message at most one.
    """

    _CLOSED = State.CLOSED

    def __init__(self) -> None:
        self.state = State.AWAITING_CONNECTED
        self.call_id: str | None = None
        self.sample_rate_hz: int | None = None
        self.frame_bytes: int | None = None  # one 20 ms frame at the negotiated rate
        self.violation: ProtocolViolation | None = None  # the one that closed us, if any
        self._messages = 0
        self._samples = 0  # caller audio received so far, for CallerAudio.timestamp_ms
        self._audio_frames = 0
        self._audio_payload_bytes = 0
        self._odd_sized_frames = 0
        self._marks = 0
        self._dtmf = 0
        self._clears = 0
        self._unknown_events = 0
        self._violations = 0

    # -- input ------------------------------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> list[CarrierEvent]:
        """Parse one text message (``str``, or its UTF-8 ``bytes``). Returns [] once closed."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        try:
            return self._receive_text(data)
        except Violation as violation:
            return [self._close(violation.close_code, violation.reason)]

    def receive_binary(self, data: bytes) -> list[CarrierEvent]:
        """One binary message: a frame of caller audio (L16 little-endian at the negotiated rate)."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        size = len(data)
        if size > MAX_MESSAGE_BYTES:
            return [self._close(CloseCode.MESSAGE_TOO_BIG, "message too big")]
        if self.state is not State.STREAMING:
            return [self._close(CloseCode.POLICY_VIOLATION, self._order_reason("audio"))]
        if size == 0 or size % SAMPLE_WIDTH_BYTES:
            return [self._close(CloseCode.INVALID_PAYLOAD, "audio frame is not whole samples")]
        if size != self.frame_bytes:
            self._odd_sized_frames += 1
        timestamp_ms = self._samples * 1000 // self.sample_rate_hz  # type: ignore[operator]
        self._samples += size // SAMPLE_WIDTH_BYTES
        self._audio_frames += 1
        self._audio_payload_bytes += size
        payload = data if type(data) is bytes else bytes(data)
        return [CallerAudio(sequence_number=self._messages, timestamp_ms=timestamp_ms, payload=payload)]

    def socket_closed(self) -> list[CarrierEvent]:
        """The socket closed (Vonage ends a call this way). While streaming: one :class:`StreamStopped`,
        and the protocol is STOPPED; before ``websocket:connected`` or after a violation: nothing."""
        if self.state is not State.STREAMING:
            return []
        self.state = State.STOPPED
        return [StreamStopped(sequence_number=self._messages, reason="socket closed")]

    def deadline_violation(self) -> ProtocolViolation:
        """The shell's start timer fired: close the protocol and return the violation to close with.

        The shell arms the timer (``timing.START_DEADLINE_MS``) when the socket opens and cancels it on
        ``StreamStarted``; it calls this only while ``state`` is still AWAITING_CONNECTED.
        """
        reason = f"no websocket:connected within {START_DEADLINE_MS // 1000} s"
        return self._close(CloseCode.POLICY_VIOLATION, reason)

    # -- introspection ----------------------------------------------------------------------------

    def statistics(self) -> VonageStreamStatistics:
        return VonageStreamStatistics(
            messages_received=self._messages,
            audio_frames=self._audio_frames,
            audio_payload_bytes=self._audio_payload_bytes,
            odd_sized_frames=self._odd_sized_frames,
            marks_received=self._marks,
            dtmf_received=self._dtmf,
            clears_received=self._clears,
            unknown_events=self._unknown_events,
            violations=self._violations,
        )

    # -- internals --------------------------------------------------------------------------------

    def _order_reason(self, what: str) -> str:
        if self.state is State.STOPPED:
            return "message after the socket closed"
        if self.state is State.AWAITING_CONNECTED:
            return f"{what} before websocket:connected"
        return f"unexpected {what}"

    def _receive_text(self, data: str | bytes) -> list[CarrierEvent]:
        message, event = load_event(data)
        next_state = _TRANSITIONS.get((self.state, event))
        if next_state is None:
            if self.state is State.STREAMING and event not in _KNOWN_EVENTS:
                self._unknown_events += 1
                return []
            raise Violation(CloseCode.POLICY_VIOLATION, self._order_reason(_event_name(event)))
        events = _PARSERS[event](self, message)
        # Only a fully valid message moves the state: a violation above leaves it for _close.
        self.state = next_state
        return events

    def _parse_connected(self, message: dict) -> list[CarrierEvent]:
        raw_type = message.get(_CONTENT_TYPE_KEY)
        match = _CONTENT_TYPE.fullmatch(raw_type) if type(raw_type) is str else None
        if match is None or int(match[1]) not in VONAGE_SAMPLE_RATES_HZ:
            raise malformed("content-type is not audio/l16 at 8 or 16 kHz")
        headers = [(key, value) for key, value in message.items() if key not in _RESERVED_KEYS]
        call_id = message.get(HEADER_CALL_ID)
        if type(call_id) is not str or not call_id:
            raise malformed("no call_id header")
        account_id = message.get(HEADER_ACCOUNT_ID, "")
        if type(account_id) is not str:
            raise malformed("account_id header is not a string")
        sample_rate_hz = int(match[1])
        self.call_id = call_id
        self.sample_rate_hz = sample_rate_hz
        self.frame_bytes = frame_bytes(sample_rate_hz)
        fields = tuple(sorted((key, _header_text(value)) for key, value in message.items() if key != "event"))
        return [
            StreamConnected(fields=fields),
            StreamStarted(
                sequence_number=self._messages,
                call_id=call_id,
                stream_id="",
                account_id=account_id,
                custom_parameters=tuple((key, _header_text(value)) for key, value in headers),
                encoding=ENCODING_L16,
                sample_rate_hz=sample_rate_hz,
                channels=1,
            ),
        ]

    def _parse_dtmf(self, message: dict) -> list[CarrierEvent]:
        digit = message.get("digit")
        if digit is None and type(message.get("dtmf")) is dict:
            digit = message["dtmf"].get("digit")  # the nested form pipecat also reads
        if type(digit) is not str or digit not in _DTMF_DIGITS:  # also rejects "" and several digits
            raise malformed("digit is not one DTMF key")
        self._dtmf += 1
        return [Dtmf(sequence_number=self._messages, digit=digit)]

    def _parse_notify(self, message: dict) -> list[CarrierEvent]:
        payload = message.get("payload")
        name = payload.get(_MARK_KEY) if type(payload) is dict else None
        if type(name) is not str:
            raise malformed("notify payload has no mark")
        self._marks += 1
        return [MarkEcho(sequence_number=self._messages, name=name)]

    def _parse_cleared(self, message: dict) -> list[CarrierEvent]:
        self._clears += 1
        return [Cleared(sequence_number=self._messages)]


# Each event's parser, a plain function of (protocol, message): a dict of bound methods in every protocol
# would tie it into a reference cycle that only the cyclic collector frees (see voicecore/carriers/twilio/stream.py).
_PARSERS = {
    EVENT_CONNECTED: VonageStreamProtocol._parse_connected,
    EVENT_DTMF: VonageStreamProtocol._parse_dtmf,
    EVENT_NOTIFY: VonageStreamProtocol._parse_notify,
    EVENT_CLEARED: VonageStreamProtocol._parse_cleared,
}


def _event_name(event: str) -> str:
    # Reasons are fixed text, never peer data (they go into close frames and logs).
    return event if event in _KNOWN_EVENTS else "event"


# --- outbound --------------------------------------------------------------------------------------

# The exact text of our two control messages (WebSockets guide; AsyncAPI ClearCommand / NotifyCommand).
CLEAR_MESSAGE = b'{"action":"clear"}'
NOTIFY_HEAD = b'{"action":"notify","payload":{"mark":'  # + the name as a JSON string + NOTIFY_TAIL
NOTIFY_TAIL = b"}}"


class VonageOutboundEncoder:
    """The exact messages we send on one Vonage socket, as :class:`Outbound` (``binary`` tells the frame
    type: audio is binary, control is text)."""

    __slots__ = ("sample_rate_hz", "frame_bytes", "_clear")

    def __init__(self, sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ) -> None:
        self.sample_rate_hz = _check_rate(sample_rate_hz)
        self.frame_bytes = frame_bytes(sample_rate_hz)
        self._clear = Outbound(CLEAR_MESSAGE, binary=False)

    def media(self, payload: bytes) -> Outbound:
        """One binary frame of exactly 20 ms of L16 at the negotiated rate (the guide requires it); the
        codec's ``Framer(encoder.frame_bytes)`` makes them. ``payload`` itself is sent, not a copy."""
        if len(payload) != self.frame_bytes:
            raise ValueError(f"a Vonage audio frame is exactly {self.frame_bytes} bytes (20 ms)")
        return Outbound(payload if type(payload) is bytes else bytes(payload), binary=True)

    def mark(self, name: str) -> Outbound:
        """A ``notify`` whose payload ``{"mark": name}`` Vonage echoes in ``websocket:notify`` once the audio
        queued before it has played."""
        if not isinstance(name, str) or not name:
            raise ValueError("mark name must be a non-empty str")
        try:
            name.encode("utf-8")  # a lone surrogate would make JSON no strict parser (Vonage's) reads back
        except UnicodeEncodeError:
            raise ValueError("mark name must be valid Unicode") from None
        return Outbound(NOTIFY_HEAD + json.dumps(name, ensure_ascii=True).encode("ascii") + NOTIFY_TAIL)

    def clear(self) -> Outbound:
        """``{"action":"clear"}``: Vonage drops its buffered audio and answers ``websocket:cleared``."""
        return self._clear


# --- the carrier's side (the simulator's core) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SentAudio:
    payload: bytes


@dataclass(frozen=True, slots=True)
class SentClear:
    pass


@dataclass(frozen=True, slots=True)
class SentNotify:
    """A ``notify``: ``payload_json`` is its payload as compact JSON, echoed verbatim; ``mark`` is the
    payload's ``mark`` when it is a string (what voicecore sends), else None."""

    payload_json: bytes
    mark: str | None


@dataclass(frozen=True, slots=True)
class SentInvalid:
    """Something Vonage would not accept; ``reason`` is fixed text."""

    reason: str


SentMessage = Union[SentAudio, SentClear, SentNotify, SentInvalid]


class VonageCarrierSide:
    """Vonage's end of one socket: the messages it sends, and what it makes of the messages we send.

    The core of a Vonage simulator (its shell owns the socket and the clock), and the other half of the
    round-trip tests. Bad input from the gateway never raises: ``receive`` returns :class:`SentInvalid`.
    Misuse by the harness (a header named ``event``, a bad DTMF digit) raises ``ValueError``.
    """

    __slots__ = ("headers", "sample_rate_hz", "frame_bytes", "_connected")

    def __init__(self, headers: Mapping[str, object], sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ) -> None:
        if any(key in _RESERVED_KEYS for key in headers):
            raise ValueError("headers may not be named 'event' or 'content-type'")
        self.headers = dict(headers)
        self.sample_rate_hz = _check_rate(sample_rate_hz)
        self.frame_bytes = frame_bytes(sample_rate_hz)
        self._connected = orjson.dumps(
            {"event": EVENT_CONNECTED, _CONTENT_TYPE_KEY: content_type(sample_rate_hz), **self.headers}
        )

    # -- what Vonage sends -------------------------------------------------------------------------

    def connected(self) -> Outbound:
        """The first message: the content-type and the NCCO's headers at the top level."""
        return Outbound(self._connected)

    def audio(self, l16: bytes) -> Outbound:
        """One binary frame of caller audio (any bytes: a test may send a bad one on purpose)."""
        return Outbound(bytes(l16), binary=True)

    def dtmf(self, digit: str, duration_ms: int = 260) -> Outbound:
        if digit not in _DTMF_DIGITS or len(digit) != 1:
            raise ValueError("digit must be one DTMF key")
        return Outbound(orjson.dumps({"event": EVENT_DTMF, "digit": digit, "duration": duration_ms}))

    def notify_echo(self, sent: SentNotify) -> Outbound:
        """``websocket:notify`` carrying the payload of a ``notify`` we received, as it was."""
        return Outbound(b'{"event":"' + EVENT_NOTIFY.encode() + b'","payload":' + sent.payload_json + b"}")

    def cleared(self) -> Outbound:
        return Outbound(b'{"event":"' + EVENT_CLEARED.encode() + b'"}')

    # -- what the gateway sends ----------------------------------------------------------------------

    def receive(self, data: bytes | str, binary: bool) -> SentMessage:
        if binary:
            if len(data) != self.frame_bytes:
                return SentInvalid("audio frame is not 20 ms")
            return SentAudio(bytes(data))  # type: ignore[arg-type]
        try:
            message = load_object(data)
        except Violation as violation:
            return SentInvalid(violation.reason)
        action = message.get("action")
        if action == "clear":
            return SentClear()
        if action == "notify":
            payload = message.get("payload")
            if type(payload) is not dict:
                return SentInvalid("notify payload is not an object")
            mark = payload.get(_MARK_KEY)
            return SentNotify(payload_json=orjson.dumps(payload), mark=mark if type(mark) is str else None)
        return SentInvalid("unknown action")


# --- the answer NCCO ---------------------------------------------------------------------------------


def ncco_connect_websocket(uri: str, headers: Mapping[str, str],
                           sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ, *, signed_upgrade: bool = False,
                           event_url: str | None = None) -> list:
    """The answer webhook's NCCO that connects the call to our WebSocket (NCCO reference, ``connect``
    action, ``websocket`` endpoint: ``uri``, ``content-type``, ``headers``).

    ``headers`` (string values only, so their echo in ``websocket:connected`` reads back the same) come
    back as top-level keys of that message; voicecore puts :data:`HEADER_CALL_ID` and
    :data:`HEADER_SESSION_TOKEN` there. Their JSON may be at most 512 bytes (WebSockets guide).
    ``signed_upgrade``: the endpoint asks for ``"authorization": {"type": "vonage"}``, so Vonage puts its
    signed-webhook JWT on the upgrade (checked with :func:`verify_upgrade_jwt`); without it the upgrade
    carries no credential at all.

    ``event_url``: the re-attach step (voicecore/reattach.py). The ``connect`` becomes synchronous
    (``"eventType": "synchronous"``) with this ``eventUrl`` (POST): Vonage posts the WebSocket leg's events
    there, and when the socket ends without the call ending (``disconnected``) the NCCO the URL answers
    replaces the call's (WebSockets guide, "WebSocket fallback options").
    """
    if not isinstance(uri, str) or not uri.startswith(("wss://", "ws://")):
        raise ValueError("uri must be a ws:// or wss:// URL (Vonage requires wss:// in production)")
    rate = _check_rate(sample_rate_hz)
    if not all(type(key) is str and type(value) is str for key, value in headers.items()):
        raise ValueError("header names and values must be str")
    if any(key in _RESERVED_KEYS for key in headers):
        raise ValueError("headers may not be named 'event' or 'content-type' (they share a message with them)")
    if len(orjson.dumps(dict(headers))) > MAX_NCCO_HEADERS_BYTES:
        raise ValueError(f"headers must be at most {MAX_NCCO_HEADERS_BYTES} bytes of JSON")
    endpoint = {"type": "websocket", "uri": uri, "content-type": content_type(rate), "headers": dict(headers)}
    if signed_upgrade:
        endpoint["authorization"] = {"type": AUTHORIZATION_VONAGE}
    action: dict[str, object] = {"action": "connect", "endpoint": [endpoint]}
    if event_url is not None:
        parts = urlsplit(event_url) if isinstance(event_url, str) else None
        if parts is None or parts.scheme not in ("https", "http") or not parts.netloc or any(
                ch.isspace() for ch in event_url):
            raise ValueError("event_url must be an absolute https or http URL")
        action.update(eventType=EVENT_TYPE_SYNCHRONOUS, eventUrl=[event_url], eventMethod="POST")
    return [action]


def ncco_end_call() -> list:
    """The NCCO that ends the call: one with no action. Vonage's NCCO has no hang-up action; "when all the actions
    in the NCCO are complete, the Call ends" (NCCO reference), and an empty one has none left to run. The
    re-attach step's answer for a call that is over (its stream ended normally, the node drains)."""
    return []


# --- the WebSocket leg's events (the synchronous connect's eventUrl) -----------------------------------

@dataclass(frozen=True, slots=True)
class LegEvent:
    """An event of the WebSocket leg at the connect's ``eventUrl``: its ``status`` (started, ringing, answered,
    completed, disconnected, failed, unanswered, ...), the leg's own ``uuid`` and the ``call_id`` our NCCO put
    in the endpoint's headers (the caller's leg: the call), None when the event carries none."""

    status: str
    leg_uuid: str | None
    call_id: str | None


def parse_leg_event(body: bytes) -> LegEvent:
    """Read the JSON event Vonage posts to the connect's ``eventUrl`` (WebSockets guide: ``from``, ``to``, ``uuid``,
    ``conversation_uuid``, ``status``, ``timestamp``, and the endpoint's ``headers`` as an object).
    ``ValueError`` (fixed text) for a body that is no such event: not a JSON object, no string ``status``."""
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError("the event is not JSON") from None
    if type(event) is not dict:
        raise ValueError("the event is not a JSON object")
    status = event.get("status")
    if type(status) is not str or not status:
        raise ValueError("the event has no status")
    headers = event.get("headers")
    call_id = headers.get(HEADER_CALL_ID) if type(headers) is dict else None
    leg_uuid = event.get("uuid")
    return LegEvent(status, leg_uuid if type(leg_uuid) is str else None, call_id if type(call_id) is str else None)


def leg_event(status: str, leg_uuid: str, conversation_uuid: str, from_number: str, uri: str,
              headers: Mapping[str, object], timestamp: str) -> bytes:
    """The event Vonage posts for the WebSocket leg (the simulator's; WebSockets guide's example): ``to`` is the
    socket's URI, ``headers`` the NCCO endpoint's, as given."""
    return orjson.dumps({"from": from_number, "to": uri, "uuid": leg_uuid, "conversation_uuid": conversation_uuid,
                         "status": status, "timestamp": timestamp, "headers": dict(headers)})


# --- signed webhooks ---------------------------------------------------------------------------------

# Vonage signs a webhook with a JWT in ``Authorization: Bearer <jwt>``: HS256 with the account's signature
# secret; claims ``iat`` (seconds), ``jti``, ``iss`` ("Vonage"), ``payload_hash`` (SHA-256 of the request
# payload, hex), ``api_key`` and, with an application, ``application_id``. There is no ``exp``: the age
# is judged from ``iat`` here. (Signed webhooks page, Messages API; Voice uses "the same JWT".)
_ISSUER = "Vonage"
_MAX_CLOCK_SKEW_S = 60  # an iat this far in our future is still accepted (Vonage's clock vs ours)
# Vonage chooses the secret's length (its docs ask for at least 32 bits); PyJWT >= 2.10 warns on every
# HS256 key under 32 bytes. The warning cannot be acted on, so it is silenced around our two calls.
_SHORT_KEY_WARNING = getattr(jwt, "InsecureKeyLengthWarning", None)


def _secret_key(signature_secret: str) -> bytes:
    if not isinstance(signature_secret, str) or not signature_secret:
        raise ValueError("signature_secret must be a non-empty str")
    return signature_secret.encode("utf-8")


def _number(value: object) -> bool:
    return type(value) in (int, float)


def verify_signed_webhook(authorization_header: str | None, body: bytes, signature_secret: str, now_s: float,
                          max_age_s: float = 300) -> bool:
    """True when ``authorization_header`` is ``Bearer <jwt>`` signed (HS256) with ``signature_secret``,
    issued at most ``max_age_s`` before ``now_s`` (and not more than a minute after it), and its
    ``payload_hash`` is the SHA-256 of ``body`` (the raw request body). False for anything else; no header
    can make it raise (an empty secret is our misuse: ``ValueError``).
    """
    claims = _checked_claims(authorization_header, signature_secret, now_s, max_age_s, ("iat", "payload_hash"))
    if claims is None:
        return False
    payload_hash = claims.get("payload_hash")
    if type(payload_hash) is not str:
        return False
    expected = hashlib.sha256(body).hexdigest().encode("ascii")
    return hmac.compare_digest(payload_hash.lower().encode("ascii", "replace"), expected)


def verify_upgrade_jwt(authorization_header: str | None, signature_secret: str, now_s: float,
                       max_age_s: float = 300) -> bool:
    """True when the WebSocket upgrade's ``Authorization`` is Vonage's signed-webhook JWT (an endpoint with
    ``"authorization": {"type": "vonage"}``): ``Bearer <jwt>``, HS256 with ``signature_secret``, ``iat`` at
    most ``max_age_s`` old, as :func:`verify_signed_webhook` judges it.

    ``payload_hash`` is not compared: an upgrade has no body, and what Vonage hashes for one is not
    documented, so a check of it could refuse every real call while binding nothing. What it proves: the
    peer holds the signature secret, within the last five minutes. What it does not: nothing in the JWT names
    the call or the URL, so a JWT captured within its age could be replayed; the single-use session token in
    ``websocket:connected`` ties the stream to one call."""
    return _checked_claims(authorization_header, signature_secret, now_s, max_age_s, ("iat",)) is not None


def _checked_claims(authorization_header: str | None, signature_secret: str, now_s: float, max_age_s: float,
                    required: tuple[str, ...]) -> dict | None:
    """The claims of a ``Bearer`` HS256 JWT signed with ``signature_secret`` whose times are good at ``now_s``,
    else None (any bad input). An empty secret is our misuse (``ValueError``)."""
    key = _secret_key(signature_secret)
    if not isinstance(authorization_header, str):
        return None
    scheme, _, token = authorization_header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    try:
        with warnings.catch_warnings():
            if _SHORT_KEY_WARNING is not None:
                warnings.simplefilter("ignore", _SHORT_KEY_WARNING)
            # PyJWT would read the wall clock for exp/iat/nbf: those are judged below against now_s.
            claims = jwt.decode(token, key, algorithms=["HS256"], options={
                "verify_exp": False, "verify_iat": False, "verify_nbf": False, "require": list(required),
            })
    except jwt.PyJWTError:
        return None
    issued_at_s = claims.get("iat")
    if not _number(issued_at_s) or not now_s - max_age_s <= issued_at_s <= now_s + _MAX_CLOCK_SKEW_S:
        return None
    if "exp" in claims and not (_number(claims["exp"]) and now_s < claims["exp"]):
        return None
    if "nbf" in claims and not (_number(claims["nbf"]) and claims["nbf"] <= now_s + _MAX_CLOCK_SKEW_S):
        return None
    return claims


def sign_webhook(body: bytes, signature_secret: str, now_s: int, jti: str, api_key: str = "",
                 application_id: str | None = None) -> str:
    """The ``Authorization`` header value Vonage would send with ``body`` (for the simulator and tests)."""
    claims: dict[str, object] = {
        "iat": int(now_s),
        "jti": jti,
        "iss": _ISSUER,
        "payload_hash": hashlib.sha256(body).hexdigest(),
        "api_key": api_key,
    }
    if application_id is not None:
        claims["application_id"] = application_id
    with warnings.catch_warnings():
        if _SHORT_KEY_WARNING is not None:
            warnings.simplefilter("ignore", _SHORT_KEY_WARNING)
        token = jwt.encode(claims, _secret_key(signature_secret), algorithm="HS256")
    return "Bearer " + token
