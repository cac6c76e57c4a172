"""Server side of one Twilio Media Streams WebSocket (bidirectional ``<Connect><Stream>``), without I/O.

Owns: validating every inbound text message into a frozen event (docs/explanation/protocols.md#a2), the order
in which Twilio may send them, the WebSocket close code for each kind of bad input, and the exact byte
shapes of what we send back (``media``, ``mark``, ``clear``; #a3). The section numbers in parentheses
below (A.1 to A.5) are that page's.

Must not know: sockets, clocks, session tokens, call slots or rings. The shell feeds each received
WebSocket message to :class:`TwilioStreamProtocol`, acts on the events, closes the socket with
``ProtocolViolation.close_code`` when one comes out, and runs the start deadline itself (it calls
:meth:`TwilioStreamProtocol.deadline_violation` when the timer fires).

Bad peer input never raises out of this module: it becomes one :class:`ProtocolViolation`, after which
the protocol is closed and ignores everything. Our own misuse (e.g. an unusable ``stream_sid`` given to
:class:`OutboundEncoder`) raises ``ValueError``.

Close codes (RFC 6455 section 7.4.1), the whole table:

=====  ======================================================================================
1003   a binary frame: Twilio only sends JSON text frames (A.1)
1007   malformed data: not UTF-8, not JSON, not an object, missing or wrongly typed field,
       counter not decimal digits, bad base64, payload not 160 bytes, SID of the wrong form,
       media format other than audio/x-mulaw 8000 Hz mono, garbage after the JSON value
1008   policy / order: unknown ``event``, ``media``/``dtmf``/``mark``/``stop`` before ``start``,
       a second ``connected`` or ``start``, a ``streamSid`` (or ``stop`` call/account) that is
       not this stream's, anything after ``stop``, no ``start`` before the deadline
1009   a message larger than ``timing.MAX_MESSAGE_BYTES`` (UTF-8 bytes)
=====  ======================================================================================

Unknown ``event`` values are a violation (strict), but unknown *keys* inside a known message are
ignored, so Twilio adding a field does not drop calls. JSON duplicate keys: the last one wins (the
``json`` module's rule); rejecting them would cost a Python hook on every media frame.
"""

from __future__ import annotations

import binascii
import enum
import json
import re
from dataclasses import dataclass
from typing import Union

import orjson

from voicecore.carriers.events import (ENCODING_PCMU, CallerAudio, MarkEcho, ProtocolViolation,
                                       StreamConnected, StreamStarted, StreamStopped)
from voicecore.carriers.events import Dtmf as DtmfEvent
from voicecore.carriers.wire import WireTemplates
from voicecore.errors import PeerInputError
from voicecore.timing import FRAME_BYTES, MAX_MESSAGE_BYTES, SAMPLE_RATE_HZ, START_DEADLINE_MS

__all__ = [
    "CLEAR_HEAD",
    "CLEAR_TAIL",
    "CloseCode",
    "Connected",
    "Dtmf",
    "Event",
    "MARK_AFTER_SID",
    "MARK_HEAD",
    "MARK_TAIL",
    "MEDIA_AFTER_SID",
    "MEDIA_HEAD",
    "MEDIA_TAIL",
    "Mark",
    "Media",
    "OutboundEncoder",
    "ProtocolViolation",
    "Start",
    "State",
    "Stop",
    "StreamStatistics",
    "TwilioCarrierStream",
    "TwilioStreamProtocol",
    "wire_templates",
]


class CloseCode(enum.IntEnum):
    """WebSocket close codes this protocol closes with (RFC 6455 section 7.4.1)."""

    UNSUPPORTED_DATA = 1003
    INVALID_PAYLOAD = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009


# --- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connected:
    """First message of every stream; carries no SID and no sequence number (A.2)."""

    protocol: str
    version: str


@dataclass(frozen=True, slots=True)
class Start:
    """The stream's metadata. ``custom_parameters`` holds the TwiML ``<Parameter>`` pairs in the order
    Twilio sent them, as a tuple so the event stays hashable; use :meth:`custom_parameter` to look one up.
    """

    sequence_number: int
    stream_sid: str
    account_sid: str
    call_sid: str
    tracks: tuple[str, ...]
    custom_parameters: tuple[tuple[str, str], ...]
    encoding: str
    sample_rate_hz: int
    channels: int

    def custom_parameter(self, name: str, default: str | None = None) -> str | None:
        for key, value in self.custom_parameters:
            if key == name:
                return value
        return default


@dataclass(frozen=True, slots=True)
class Media:
    """One frame of caller audio: exactly ``FRAME_BYTES`` of raw mu-law (A.2)."""

    sequence_number: int
    chunk: int
    timestamp_ms: int
    track: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class Dtmf:
    sequence_number: int
    digit: str
    track: str


@dataclass(frozen=True, slots=True)
class Mark:
    """Echo of a mark we sent: the audio before it played, or was discarded by ``clear`` (A.3)."""

    sequence_number: int
    name: str


@dataclass(frozen=True, slots=True)
class Stop:
    sequence_number: int
    account_sid: str
    call_sid: str


Event = Union[Connected, Start, Media, Dtmf, Mark, Stop, ProtocolViolation]


@dataclass(frozen=True, slots=True)
class StreamStatistics:
    messages_received: int
    media_frames: int
    media_payload_bytes: int
    marks_received: int
    dtmf_received: int
    sequence_gaps: int  # a sequenceNumber more than one above the highest so far (A.2: jitter)
    sequence_reordered: int  # a sequenceNumber at or below the highest so far
    violations: int


# --- states and the transition table ---------------------------------------------------------------


class State(enum.Enum):
    AWAITING_CONNECTED = "awaiting_connected"
    AWAITING_START = "awaiting_start"
    STREAMING = "streaming"
    STOPPED = "stopped"
    CLOSED = "closed"  # after a violation: every further input is ignored


# Rules (docs/explanation/protocols.md#a2): `connected` comes first, once; `start` once, right after it (we
# tolerate a missing `connected`: it carries nothing we need); then `media`, `dtmf` and `mark` in any number;
# `stop` last. Any (state, event) pair not in this table is a 1008 policy violation.
_TRANSITIONS: dict[tuple[State, str], State] = {
    (State.AWAITING_CONNECTED, "connected"): State.AWAITING_START,
    (State.AWAITING_CONNECTED, "start"): State.STREAMING,
    (State.AWAITING_START, "start"): State.STREAMING,
    (State.STREAMING, "media"): State.STREAMING,
    (State.STREAMING, "dtmf"): State.STREAMING,
    (State.STREAMING, "mark"): State.STREAMING,
    (State.STREAMING, "stop"): State.STOPPED,
}

_KNOWN_EVENTS = frozenset(event for _, event in _TRANSITIONS)

# Twilio SIDs are a two-letter prefix and 32 hex digits (A.2). Checking them here also guarantees the
# stream SID is safe to embed in the outbound JSON templates.
_SID_HEX_CHARS = 32
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_FRAME_BASE64_CHARS = 4 * -(-FRAME_BYTES // 3)  # 216: one frame in base64, with its padding
_MAX_COUNTER_DIGITS = 18  # fits int64 with room; also stops int() on absurdly long digit strings

_MEDIA_ENCODING = "audio/x-mulaw"
_MEDIA_CHANNELS = 1
_TRACKS = frozenset({"inbound", "outbound"})
_DTMF_DIGITS = frozenset("0123456789*#ABCD")


class _Violation(PeerInputError):
    """Internal only: raised by the field readers, turned into a ProtocolViolation in one place."""

    def __init__(self, close_code: CloseCode, reason: str) -> None:
        self.close_code = close_code
        self.reason = reason


def _malformed(reason: str) -> _Violation:
    return _Violation(CloseCode.INVALID_PAYLOAD, reason)


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


# --- field readers: each returns a checked value or raises _Violation(1007) ------------------------


def _object(message: dict, key: str) -> dict:
    value = message.get(key)
    if type(value) is not dict:
        raise _malformed(f"{key} is not an object")
    return value


def _string(message: dict, key: str) -> str:
    value = message.get(key)
    if type(value) is not str:
        raise _malformed(f"{key} is not a string")
    return value


def _counter(message: dict, key: str) -> int:
    # String-typed counters are real strings ("1", not 1) (A.2).
    value = message.get(key)
    if type(value) is not str:
        raise _malformed(f"{key} is not a string")
    if not (0 < len(value) <= _MAX_COUNTER_DIGITS and value.isascii() and value.isdigit()):
        raise _malformed(f"{key} is not a decimal counter")
    return int(value)


def _integer(message: dict, key: str) -> int:
    value = message.get(key)
    if type(value) is not int:  # bool is an int subclass; `type is` keeps it out
        raise _malformed(f"{key} is not an integer")
    return value


def _sid(message: dict, key: str, prefix: str) -> str:
    value = _string(message, key)
    if not (
        len(value) == len(prefix) + _SID_HEX_CHARS
        and value.startswith(prefix)
        and _HEX_DIGITS.issuperset(value[len(prefix) :])
    ):
        raise _malformed(f"{key} is not a {prefix} SID")
    return value


# A media message byte for byte as Twilio writes it (docs/explanation/protocols.md#a2): groups sequenceNumber,
# timestamp, payload, track and streamSid. One pattern for every stream: the track and the SID are captured
# and compared with the stream's own (a pattern compiled per stream would go through re's module cache, 512
# patterns of about 2 KB each, evicting everyone else's, and cost a compile per call). The payload's alphabet
# and padding are left to the strict base64 decoder (cheaper than a character class here).
_MEDIA_SHAPE = re.compile(
    rb'\{"event":"media","sequenceNumber":"([0-9]{1,%d})"' % _MAX_COUNTER_DIGITS
    + rb',"media":\{"track":"([a-z]{1,16})","chunk":"[0-9]{1,%d}","timestamp":"([0-9]{1,%d})"'
    % (_MAX_COUNTER_DIGITS, _MAX_COUNTER_DIGITS)
    + rb',"payload":"([^"]{%d})"\},"streamSid":"([^"]{1,64})"\}' % _FRAME_BASE64_CHARS
)


# --- the protocol ----------------------------------------------------------------------------------


class TwilioStreamProtocol:
    """One stream's inbound state machine. Feed it every WebSocket message; it returns events."""

    # event -> its parser, a plain function of (protocol, message): _PARSERS below (TwilioCarrierStream has its own)
    _parsers: dict

    def __init__(self) -> None:
        self.state = State.AWAITING_CONNECTED
        self.stream_sid: str | None = None
        self.call_sid: str | None = None
        self.account_sid: str | None = None
        self.tracks: tuple[str, ...] = ()
        self.last_sequence_number: int | None = None  # the highest seen
        self.violation: ProtocolViolation | None = None  # the one that closed us, if any
        self._messages = 0
        self._media_frames = 0
        self._media_payload_bytes = 0
        self._marks = 0
        self._dtmf = 0
        self._sequence_gaps = 0
        self._sequence_reordered = 0
        self._violations = 0
        # set by start, for receive_media: the stream's SID and tracks as the media messages write them
        self._media_sid: bytes | None = None
        self._media_tracks: frozenset[bytes] = frozenset()

    # -- input ------------------------------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> list[Event]:
        """Parse one text message (``str``, or its UTF-8 ``bytes``). Returns [] once closed."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        try:
            return [self._receive(data)]
        except _Violation as violation:
            return [self._close(violation.close_code, violation.reason)]

    def receive_media(self, data: bytes) -> tuple[int, int, bytes] | None:
        """The hot path for caller audio (~50 messages per second per call): ``(sequence_number,
        timestamp_ms, payload)`` when ``data`` is a ``media`` message of this stream in exactly the shape
        Twilio sends it (its key order, no whitespace, one 160-byte frame); then the protocol has
        counted it as :meth:`receive_text` would have. ``None`` for anything else, with nothing
        changed: pass the same message to :meth:`receive_text`, which parses and judges it in full.

        A message that matches the shape is valid JSON whose fields pass every check of
        ``_parse_media``, so both paths accept the same messages with the same result; this one skips
        the JSON parser, the dict lookups and the event object (a third of the cost).
        """
        if self._media_sid is None or self.state is not State.STREAMING or type(data) is not bytes:
            return None
        match = _MEDIA_SHAPE.fullmatch(data)
        if match is None or match[5] != self._media_sid or match[2] not in self._media_tracks:
            return None
        try:
            payload = binascii.a2b_base64(match[4], strict_mode=True)
        except ValueError:
            return None
        if len(payload) != FRAME_BYTES:
            return None
        self._messages += 1
        self._media_frames += 1
        self._media_payload_bytes += FRAME_BYTES
        return self._track_sequence(int(match[1])), int(match[3]), payload

    def receive_binary(self, data: bytes) -> list[Event]:
        """Twilio never sends binary frames (A.1): any one is a 1003 violation."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        return [self._close(CloseCode.UNSUPPORTED_DATA, "binary frame")]

    def deadline_violation(self) -> ProtocolViolation:
        """The shell's start timer fired: close the protocol and return the violation to close with.

        The shell arms the timer (``timing.START_DEADLINE_MS``) when the socket opens and cancels it on
        ``Start``; it calls this only while ``state`` is still AWAITING_CONNECTED or AWAITING_START.
        """
        return self._close(CloseCode.POLICY_VIOLATION, f"no start within {START_DEADLINE_MS // 1000} s")

    # -- introspection ----------------------------------------------------------------------------

    def statistics(self) -> StreamStatistics:
        return StreamStatistics(
            messages_received=self._messages,
            media_frames=self._media_frames,
            media_payload_bytes=self._media_payload_bytes,
            marks_received=self._marks,
            dtmf_received=self._dtmf,
            sequence_gaps=self._sequence_gaps,
            sequence_reordered=self._sequence_reordered,
            violations=self._violations,
        )

    # -- internals --------------------------------------------------------------------------------

    def _close(self, close_code: int, reason: str) -> ProtocolViolation:
        violation = ProtocolViolation(close_code=int(close_code), reason=reason)
        if self.state is not State.CLOSED:
            self._violations += 1
            self.violation = violation
            self.state = State.CLOSED
        return violation

    def _receive(self, data: str | bytes) -> Event:
        if isinstance(data, str):
            # Cheap bound first: a str of n characters is at most 4n UTF-8 bytes.
            if len(data) * 4 > MAX_MESSAGE_BYTES and _utf8_length(data) > MAX_MESSAGE_BYTES:
                raise _Violation(CloseCode.MESSAGE_TOO_BIG, "message too big")
        elif len(data) > MAX_MESSAGE_BYTES:
            raise _Violation(CloseCode.MESSAGE_TOO_BIG, "message too big")
        try:
            # orjson: strict RFC 8259 (no NaN/Infinity, no trailing garbage, valid UTF-8 only, bounded
            # nesting) at a third of json.loads' cost on this path (~50 messages per second per call).
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            if not isinstance(data, str):
                try:
                    bytes(data).decode("utf-8")
                except UnicodeDecodeError:
                    raise _malformed("not UTF-8") from None
            raise _malformed("not a JSON value") from None
        if type(message) is not dict:
            raise _malformed("not a JSON object")
        event = message.get("event")
        if type(event) is not str:
            raise _malformed("event is not a string")
        if event not in _KNOWN_EVENTS:
            raise _Violation(CloseCode.POLICY_VIOLATION, "unknown event")
        next_state = _TRANSITIONS.get((self.state, event))
        if next_state is None:
            if self.state is State.STOPPED:
                raise _Violation(CloseCode.POLICY_VIOLATION, "message after stop")
            raise _Violation(CloseCode.POLICY_VIOLATION, f"unexpected {event}")
        parsed = self._parsers[event](self, message)
        # Only a fully valid message moves the state: a violation above leaves it for _close.
        self.state = next_state
        return parsed

    def _sequence(self, message: dict) -> int:
        return self._track_sequence(_counter(message, "sequenceNumber"))

    def _track_sequence(self, sequence_number: int) -> int:
        last = self.last_sequence_number
        if last is not None:
            # Not a violation: jitter can bunch and reorder frames (A.2); the consumer orders them.
            if sequence_number > last + 1:
                self._sequence_gaps += 1
            elif sequence_number <= last:
                self._sequence_reordered += 1
                return sequence_number
        self.last_sequence_number = sequence_number
        return sequence_number

    def _check_stream_sid(self, message: dict) -> None:
        if _string(message, "streamSid") != self.stream_sid:
            raise _Violation(CloseCode.POLICY_VIOLATION, "wrong streamSid")

    def _parse_connected(self, message: dict) -> Connected:
        return Connected(protocol=_string(message, "protocol"), version=_string(message, "version"))

    def _parse_start(self, message: dict) -> Start:
        sequence_number = _counter(message, "sequenceNumber")
        stream_sid = _sid(message, "streamSid", "MZ")
        start = _object(message, "start")
        if _string(start, "streamSid") != stream_sid:
            raise _malformed("start.streamSid differs from streamSid")
        account_sid = _sid(start, "accountSid", "AC")
        call_sid = _sid(start, "callSid", "CA")

        tracks = start.get("tracks")
        if type(tracks) is not list or not tracks:
            raise _malformed("tracks is not a non-empty array")
        if not all(type(track) is str and track in _TRACKS for track in tracks) or len(set(tracks)) != len(tracks):
            raise _malformed("tracks holds an unknown or repeated track")

        # Twilio always sends customParameters ({} when there are none, A.5); absent is read as empty.
        raw_parameters = start.get("customParameters", {})
        if type(raw_parameters) is not dict:
            raise _malformed("customParameters is not an object")
        if not all(type(value) is str for value in raw_parameters.values()):
            raise _malformed("customParameters value is not a string")

        media_format = _object(start, "mediaFormat")
        encoding = _string(media_format, "encoding")
        sample_rate_hz = _integer(media_format, "sampleRate")
        channels = _integer(media_format, "channels")
        if (encoding, sample_rate_hz, channels) != (_MEDIA_ENCODING, SAMPLE_RATE_HZ, _MEDIA_CHANNELS):
            raise _malformed("media format is not audio/x-mulaw 8000 Hz mono")

        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.account_sid = account_sid
        self.tracks = tuple(tracks)
        self.last_sequence_number = sequence_number
        self._media_sid = stream_sid.encode()
        self._media_tracks = frozenset(track.encode() for track in self.tracks)
        return Start(
            sequence_number=sequence_number,
            stream_sid=stream_sid,
            account_sid=account_sid,
            call_sid=call_sid,
            tracks=self.tracks,
            custom_parameters=tuple(raw_parameters.items()),
            encoding=encoding,
            sample_rate_hz=sample_rate_hz,
            channels=channels,
        )

    def _parse_media(self, message: dict) -> Media:
        # Fast path: ~50 of these per second per call.
        self._check_stream_sid(message)
        media = _object(message, "media")
        track = _string(media, "track")
        if track not in self.tracks:
            raise _malformed("media track was not started")
        chunk = _counter(media, "chunk")
        timestamp_ms = _counter(media, "timestamp")
        encoded = _string(media, "payload")
        try:
            payload = binascii.a2b_base64(encoded, strict_mode=True)
        except ValueError:  # binascii.Error, or non-ASCII characters in a str
            raise _malformed("payload is not base64") from None
        if len(payload) != FRAME_BYTES:
            raise _malformed("payload is not one 160-byte frame")
        sequence_number = self._sequence(message)
        self._media_frames += 1
        self._media_payload_bytes += FRAME_BYTES
        return Media(
            sequence_number=sequence_number, chunk=chunk, timestamp_ms=timestamp_ms, track=track, payload=payload
        )

    def _parse_dtmf(self, message: dict) -> Dtmf:
        self._check_stream_sid(message)
        dtmf = _object(message, "dtmf")
        track = _string(dtmf, "track")
        digit = _string(dtmf, "digit")
        if digit not in _DTMF_DIGITS:  # also rejects "" and multi-character strings
            raise _malformed("digit is not one DTMF key")
        sequence_number = self._sequence(message)
        self._dtmf += 1
        return Dtmf(sequence_number=sequence_number, digit=digit, track=track)

    def _parse_mark(self, message: dict) -> Mark:
        self._check_stream_sid(message)
        name = _string(_object(message, "mark"), "name")
        sequence_number = self._sequence(message)
        self._marks += 1
        return Mark(sequence_number=sequence_number, name=name)

    def _parse_stop(self, message: dict) -> Stop:
        self._check_stream_sid(message)
        stop = _object(message, "stop")
        account_sid = _sid(stop, "accountSid", "AC")
        call_sid = _sid(stop, "callSid", "CA")
        if (account_sid, call_sid) != (self.account_sid, self.call_sid):
            raise _Violation(CloseCode.POLICY_VIOLATION, "stop names another call")
        sequence_number = self._sequence(message)
        return Stop(sequence_number=sequence_number, account_sid=account_sid, call_sid=call_sid)


# Each event's parser, as a plain function of (protocol, message). Not a per-instance dict of bound methods:
# that ties every protocol into a reference cycle (protocol -> dict -> method -> protocol) that only the
# cyclic collector frees, and its full passes are rare in the gateway (none in a soak's first 1,300 calls):
# every ended call's protocol, with its compiled media pattern, stayed in memory until one came.
_PARSERS = {
    "connected": TwilioStreamProtocol._parse_connected,
    "start": TwilioStreamProtocol._parse_start,
    "media": TwilioStreamProtocol._parse_media,
    "dtmf": TwilioStreamProtocol._parse_dtmf,
    "mark": TwilioStreamProtocol._parse_mark,
    "stop": TwilioStreamProtocol._parse_stop,
}


TwilioStreamProtocol._parsers = _PARSERS


class TwilioCarrierStream(TwilioStreamProtocol):
    """The same protocol, giving the carrier-neutral events (voicecore/carriers/events.py) every carrier's stream
    gives the gateway: ``StreamConnected``, ``StreamStarted`` (its ``encoding`` ENCODING_PCMU), ``CallerAudio``,
    ``Dtmf``, ``MarkEcho``, ``StreamStopped`` and ``ProtocolViolation``. The descriptor's stream
    (carrier.py ``new_stream``). Every check, close code and statistic is :class:`TwilioStreamProtocol`'s; only
    the events' shapes differ. Caller audio still comes from :meth:`receive_media` as a tuple, the gateway's hot
    path (the descriptor's ``whole_frames``), which this class leaves as it is: a mark echo, the message that
    comes most after media, is read straight into a ``MarkEcho`` (no Twilio event first)."""

    def _neutral_connected(self, message: dict) -> StreamConnected:
        self._parse_connected(message)
        return StreamConnected()

    def _neutral_start(self, message: dict) -> StreamStarted:
        start = self._parse_start(message)  # checked: mu-law at 8 kHz, mono
        return StreamStarted(start.sequence_number, start.call_sid, start.stream_sid, start.account_sid,
                             start.custom_parameters, ENCODING_PCMU, start.sample_rate_hz, start.channels)

    def _neutral_media(self, message: dict) -> CallerAudio:
        # Only a media message not in Twilio's exact shape comes here (receive_media takes the others).
        media = self._parse_media(message)
        return CallerAudio(media.sequence_number, media.timestamp_ms, media.payload)

    def _neutral_dtmf(self, message: dict) -> DtmfEvent:
        dtmf = self._parse_dtmf(message)
        return DtmfEvent(dtmf.sequence_number, dtmf.digit)

    def _neutral_mark(self, message: dict) -> MarkEcho:
        # _parse_mark's checks and count, giving the neutral event at once
        self._check_stream_sid(message)
        name = _string(_object(message, "mark"), "name")
        sequence_number = self._sequence(message)
        self._marks += 1
        return MarkEcho(sequence_number, name)

    def _neutral_stop(self, message: dict) -> StreamStopped:
        return StreamStopped(self._parse_stop(message).sequence_number)


TwilioCarrierStream._parsers = {
    "connected": TwilioCarrierStream._neutral_connected,
    "start": TwilioCarrierStream._neutral_start,
    "media": TwilioCarrierStream._neutral_media,
    "dtmf": TwilioCarrierStream._neutral_dtmf,
    "mark": TwilioCarrierStream._neutral_mark,
    "stop": TwilioCarrierStream._neutral_stop,
}


# --- outbound --------------------------------------------------------------------------------------

# The fixed pieces of the three messages we may send (A.3), the one source of their bytes: the encoder
# below joins them around a stream's SID, and so do the call's wire templates that the gateway puts in the
# arena for the pacer (wire_templates; workers/pacer/core.py copies them around each frame and mark name). A message is HEAD + SID + AFTER_SID + body +
# TAIL (a clear has no body: HEAD + SID + TAIL); no head is a prefix of another, so ``startswith``
# tells the kind of a message we wrote.
MEDIA_HEAD = b'{"event":"media","streamSid":"'
MEDIA_AFTER_SID = b'","media":{"payload":"'  # + the payload in base64
MEDIA_TAIL = b'"}}'
MARK_HEAD = b'{"event":"mark","streamSid":"'
MARK_AFTER_SID = b'","mark":{"name":'  # + the name as a JSON string
MARK_TAIL = b"}}"
CLEAR_HEAD = b'{"event":"clear","streamSid":"'
CLEAR_TAIL = b'"}'


def _check_template_safe(stream_sid: object) -> bytes:
    if not isinstance(stream_sid, str) or not stream_sid:
        raise ValueError("stream_sid must be a non-empty str")
    if not all(" " <= char <= "~" and char not in '"\\' for char in stream_sid):
        raise ValueError("stream_sid must be printable ASCII without quotes or backslashes")
    return stream_sid.encode("ascii")


class OutboundEncoder:
    """Exact wire bytes of the messages we send on one stream (docs/explanation/protocols.md#a3).

    Every method returns compact UTF-8 JSON as ``bytes``. The shell must send it as a WebSocket
    **text** frame: Twilio rejects binary frames (A.1, warning 31950). ``media_prefix`` + base64 +
    ``media_suffix`` is a complete ``media`` message; the pacer builds it in shared memory that way.
    """

    __slots__ = ("stream_sid", "media_prefix", "media_suffix", "mark_prefix", "_clear")

    def __init__(self, stream_sid: str) -> None:
        sid = _check_template_safe(stream_sid)
        self.stream_sid = stream_sid
        self.media_prefix: bytes = MEDIA_HEAD + sid + MEDIA_AFTER_SID
        self.media_suffix: bytes = MEDIA_TAIL
        self.mark_prefix: bytes = MARK_HEAD + sid + MARK_AFTER_SID  # + JSON string + MARK_TAIL
        self._clear = CLEAR_HEAD + sid + CLEAR_TAIL

    def media(self, payload: bytes) -> bytes:
        """Fast path: raw mu-law (any length; the pacer sends 160-byte frames) as one ``media`` message."""
        return self.media_prefix + binascii.b2a_base64(payload, newline=False) + self.media_suffix

    def mark(self, name: str) -> bytes:
        """A ``mark``; Twilio echoes ``name`` once the audio queued before it has played (A.3)."""
        if not isinstance(name, str) or not name:
            raise ValueError("mark name must be a non-empty str")
        return self.mark_prefix + json.dumps(name, ensure_ascii=True).encode("ascii") + MARK_TAIL

    def clear(self) -> bytes:
        """A ``clear``: Twilio drops its buffered audio and echoes every pending mark (A.3)."""
        return self._clear

    def wire_templates(self) -> WireTemplates:
        """How the pacer writes this stream's messages (voicecore/carriers/wire.py): final text, byte for
        byte what :meth:`media`, :meth:`mark` (of a name that needs no JSON escaping: our mark names) and
        :meth:`clear` return."""
        return WireTemplates(
            media_prefix=self.media_prefix,
            media_suffix=self.media_suffix,
            mark_prefix=self.mark_prefix + b'"',
            mark_suffix=b'"' + MARK_TAIL,
            clear=self._clear,
        )


def wire_templates(stream_sid: str) -> WireTemplates:
    """The wire templates of one Twilio stream (:meth:`OutboundEncoder.wire_templates`)."""
    return OutboundEncoder(stream_sid).wire_templates()
