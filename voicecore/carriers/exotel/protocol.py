"""Exotel's bidirectional media stream (Voicebot applet / AgentStream WebSocket), without I/O.

Owns: validating every message Exotel sends into a :mod:`voicecore.carriers.events` event, the order in
which Exotel may send them, the close code for each kind of bad input, the exact bytes of what we send
back (``media``, ``mark``, ``clear``), Exotel's chunk-size rules for outbound audio and the
:class:`ChunkBatcher` that turns our 20 ms frames into chunks that obey them, the carrier's own end of
the protocol (:class:`ExotelCarrierSide`, the simulator's core), the dynamic-URL answer and the Basic
authentication check of the WebSocket upgrade.

Must not know: sockets, clocks, call slots, rings, the model. Time never enters: the shell runs the
start deadline and calls :meth:`ExotelStreamProtocol.deadline_violation`.

Sources (docs/explanation/protocols.md#b compares the carriers; every rule below names one):
[ws] developer.exotel.com/docs/agentstream/websocket-protocol;
[applet] developer.exotel.com/docs/agentstream/stream-voicebot-applet and its older
copy support.exotel.com article 3000108630; [beta] developer.exotel.com/docs/agentstream/
stream-voicebot-extension ("Beta: features and behavior may change"); [guide] developer.exotel.com/docs/
agentstream/developer-guide; [exo-repo] Exotel's own sample code, github.com/exotel/Agent-Stream;
[pipecat] pipecat src/pipecat/serializers/exotel.py.

How a stream is configured (Exotel has no answer document like TwiML):

- **Voicebot applet** in a call flow (App Bazaar) [applet]. Its URL is either a static ``wss://`` (or
  ``ws://``) URL, or an ``https://`` URL that Exotel requests per call and that must answer a JSON
  object whose key ``url`` holds the WebSocket URL (:func:`voicebot_url_response`) [applet]. The
  request Exotel makes to that endpoint (method, parameters) is not documented in what we could read.
  The applet's next applet runs once the socket closes: the stream "auto-closes before the next applet
  executes" [applet], and Exotel's own bridge closes the socket to move the call on [exo-repo].
- **Connect Voice AI**: ``POST /v1/accounts/{sid}/calls/connect`` with ``streamurl`` (max 600 chars)
  and ``streamtype=bidirectional`` dials a number and streams the answered call [guide].
- The URL carries the sample rate as ``?sample-rate=8000|16000|24000`` (default 8000) and up to three
  custom parameters (at most 256 characters together), which arrive in ``start.custom_parameters``
  [applet]; :func:`voicebot_stream_url` builds such a URL.

Authentication [applet]: IP allow-listing (network level, not here), or Basic auth written into the URL
(``wss://KEY:TOKEN@host/path``) that Exotel sends as ``Authorization: Basic base64(KEY:TOKEN)`` on the
upgrade request: :func:`check_basic_auth`. What that proves: the peer knows the shared static
credentials. What it does not: there is no signature over the request, no nonce or timestamp, so a
captured header can be replayed for as long as the credentials live, and nothing ties the socket to a
particular call. Whether Exotel sends the header over plain ``ws://`` too is not documented; serve wss.
The applet's page shows the credentials in the configured URL; with a dynamic URL, the gateway writes them
into the ``wss://`` URL it answers with (:func:`with_basic_auth`), so the stream's upgrade carries them as
a static URL's would. That Exotel reads credentials from a URL its dynamic endpoint returned the same way is
what the applet's text implies, not something it says [unverified].

Wire shapes [ws]. Exotel sends ``connected`` ({"event"} only), ``start`` {event, sequence_number,
stream_sid, start:{stream_sid, call_sid, account_sid, from, to, custom_parameters, media_format:
{encoding, sample_rate, bit_rate}}}, ``media`` {event, sequence_number, stream_sid, media:{chunk,
timestamp, payload}} about every 100 ms (so one payload holds several 20 ms frames), ``dtmf``
{dtmf:{digit, duration}}, ``mark`` (the echo of ours) and ``stop``. Counters are strings in [ws]
("1", "200") but Exotel's own samples write ``sample_rate`` as a number [exo-repo], so every counter
here is read as either decimal digits in a string or a non-negative JSON integer. We send ``media``
{event, stream_sid, media:{payload}}, ``mark`` {event, stream_sid, mark:{name}} and ``clear`` {event,
stream_sid} [ws] (pipecat and parts of Exotel's own samples write ``streamSid`` instead, which suggests
Exotel does not check the key; we follow the documented ``stream_sid``).

Audio encoding is read at run time from ``start.media_format.encoding`` (docs/explanation/protocols.md#b): the
base guide says raw/slin 16-bit little-endian PCM [applet] (``audio/x-raw`` in [ws]), the beta extension says
mu-law 8 kHz by default with L16 8/16 kHz as options [beta]. We answer in the same encoding and rate. See
``_ENCODINGS`` for the names accepted.

Phone numbers: ``start.from`` and ``start.to`` are the caller's and the called number. They are not put
into :class:`~voicecore.carriers.events.StreamStarted` (which the gateway logs and records) nor into
statistics or violation reasons; they are kept on the protocol object as :attr:`ExotelStreamProtocol.
call_parties`, whose ``repr`` hides them, for a shell that has a use for them and a redacted field to
put them in (no phone numbers in log text: docs/explanation/style.md#rules).

Bad peer input never raises out of :class:`ExotelStreamProtocol`: it becomes one
:class:`~voicecore.carriers.events.ProtocolViolation`, after which the protocol is closed and ignores
everything. Our own misuse (an unusable ``stream_sid``, a chunk that breaks Exotel's size rules) raises
``ValueError``.

Close codes (RFC 6455 section 7.4.1), the whole table:

=====  ======================================================================================
1003   a binary frame: Exotel sends JSON text frames only [ws]
1007   malformed data: not UTF-8, not JSON, not an object, missing or wrongly typed field,
       counter not decimal digits, bad base64, a payload that is not a whole number of samples
       (an odd byte count in L16), an unusable stream/call/account id, ``start.stream_sid``
       differing from the top-level one, an unknown encoding ("unsupported media encoding"),
       a sample rate the encoding does not have, an encoding ``;rate=`` that differs from
       ``sample_rate``, a ``bit_rate`` other than 16 for L16, a ``track`` other than
       inbound/outbound, a DTMF digit that is not one key, garbage after the JSON value
1008   policy / order: unknown ``event``, ``media``/``dtmf``/``mark``/``stop`` before ``start``,
       a second ``connected`` or ``start``, a ``stream_sid`` (or ``stop`` call/account id) that
       is not this stream's, anything after ``stop``, no ``start`` before the deadline
       (``timing.START_DEADLINE_MS``)
1009   a message larger than ``timing.MAX_MESSAGE_BYTES`` (UTF-8 bytes)
=====  ======================================================================================

Unknown ``event`` values are a violation (strict); unknown keys inside a known message are ignored, and
so are documented keys that are absent where the sources disagree on them: ``stream_sid`` on messages
after ``start`` (Exotel's own protocol notes omit it [exo-repo]; counted, never guessed), ``media.chunk``,
``dtmf.duration``, ``media_format.bit_rate``, the ``stop`` body. A ``media`` whose ``track`` is
"outbound" (the beta's "both tracks" option [beta]) is our own audio coming back: counted and dropped,
never handed on as caller audio. An empty payload is counted and dropped.

Outbound audio must come in chunks of at least 3.2 KB (see ``ALIGNMENT_BYTES`` for the rules and the
one inconsistency in Exotel's own numbers); :class:`ChunkBatcher` builds them from our 20 ms frames and
is the only place that ever adds silence, at the end of a response's audio.
"""

from __future__ import annotations

import binascii
import enum
import hmac
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Union
from urllib.parse import quote, urlencode

import orjson

from voicecore.carriers.events import (
    ENCODING_L16,
    ENCODING_PCMU,
    CallerAudio,
    CarrierEvent,
    Dtmf,
    MarkEcho,
    Outbound,
    ProtocolViolation,
    StreamConnected,
    StreamStarted,
    StreamStopped,
)
from voicecore.carriers.jsonwire import (
    CloseCode,
    ClosesOnViolation,
    Violation,
    decode_base64,
    load_event,
    malformed,
    next_state,
    printable_id,
    read_counter,
    read_id,
    read_object,
    read_optional_counter,
    read_optional_string,
    read_string,
)
from voicecore.timing import FRAME_MS, START_DEADLINE_MS

__all__ = [
    "ALIGNMENT_BYTES",
    "BatcherStatistics",
    "CallParties",
    "ChunkBatcher",
    "ChunkMark",
    "ChunkMedia",
    "ChunkRules",
    "CloseCode",
    "ClearedChunk",
    "DEFAULT_CHUNK_MS",
    "ExotelCarrierSide",
    "ExotelCarrierStatistics",
    "ExotelOutboundEncoder",
    "ExotelStreamProtocol",
    "ExotelStreamStatistics",
    "MAX_CHUNK_BYTES",
    "MAX_CUSTOM_PARAMETERS",
    "MAX_CUSTOM_PARAMETERS_CHARS",
    "MIN_CHUNK_MS",
    "MIN_CHUNK_SAMPLES",
    "OutboundRejected",
    "SAMPLE_RATES_HZ",
    "SentClear",
    "SentMark",
    "SentMedia",
    "State",
    "check_basic_auth",
    "chunk_rules",
    "frame_bytes",
    "silence",
    "voicebot_stream_url",
    "with_basic_auth",
    "voicebot_url_response",
]


# --- audio formats and Exotel's chunk rules ---------------------------------------------------------

# Sample rates each encoding comes in: L16 at 8, 16 or 24 kHz ([applet] sample-rate parameter; 16 kHz
# also in [beta]); mu-law only at 8 kHz (G.711, [beta]).
SAMPLE_RATES_HZ: dict[str, tuple[int, ...]] = {ENCODING_L16: (8000, 16000, 24000), ENCODING_PCMU: (8000,)}
_BYTES_PER_SAMPLE = {ENCODING_L16: 2, ENCODING_PCMU: 1}
_SILENCE_BYTE = {ENCODING_L16: b"\x00", ENCODING_PCMU: b"\xff"}  # linear 0; the mu-law code of linear 0

# Outbound chunk rules [applet]: "Minimum 3.2 KB (100ms of data), Maximum 100 KB, must be a multiple of
# 320 bytes"; smaller chunks "risk audio distortion" (network jitter), larger ones "cause timeouts",
# and a size that is not a multiple of 320 B leaves a short last packet after which the platform "will
# wait for 20ms", a gap. The numbers are written for the base format, 16-bit 8 kHz, where 320 B is one
# 20 ms packet. There 3.2 KB is 1,600 samples, 200 ms, not the 100 ms the same sentence says (16 bytes
# per ms); every source repeats the byte count (Exotel's own bridge: MIN_CHUNK_SIZE = 3200 [exo-repo]),
# so the byte count is the rule we keep. Per format, a chunk
# - is a multiple of 320 bytes AND of one 20 ms frame (lcm: 320 B for mu-law, the frame itself for L16);
# - holds at least 1,600 samples (3.2 KB of 16-bit audio) and at least 100 ms: L16 3,200 B at 8 and
#   16 kHz, 4,800 B at 24 kHz; mu-law 1,600 B (200 ms, the duration 3.2 KB is in the base format).
#   [unverified] whether Exotel's mu-law path counts 3,200 *bytes* (400 ms) instead; a gateway that
#   wants that reading asks its batcher for chunk_ms=400;
# - is at most 100 KB.
ALIGNMENT_BYTES = 320
MIN_CHUNK_SAMPLES = 1600  # 3.2 KB of 16-bit samples
MIN_CHUNK_MS = 100
MAX_CHUNK_BYTES = 100_000  # "100 KB", read as the smaller of 100,000 and 102,400
DEFAULT_CHUNK_MS = 100  # asked for; rounded up to the format's minimum (200 ms at 8 kHz)

# Custom parameters on the stream URL [applet]: "Up to 3 key-value pairs ... (max 256 chars total)".
MAX_CUSTOM_PARAMETERS = 3
MAX_CUSTOM_PARAMETERS_CHARS = 256
_SAMPLE_RATE_QUERY_KEY = "sample-rate"


def _check_format(encoding: str, sample_rate_hz: int) -> None:
    if encoding not in SAMPLE_RATES_HZ or sample_rate_hz not in SAMPLE_RATES_HZ[encoding]:
        raise ValueError(f"Exotel has no audio format {encoding!r} at {sample_rate_hz!r} Hz")


def frame_bytes(encoding: str, sample_rate_hz: int) -> int:
    """Bytes in one 20 ms frame of the negotiated format (160 for mu-law 8 kHz, 320/640/960 for L16 at
    8/16/24 kHz): the unit the gateway cuts Exotel's ~100 ms payloads into."""
    _check_format(encoding, sample_rate_hz)
    return sample_rate_hz * FRAME_MS // 1000 * _BYTES_PER_SAMPLE[encoding]


def silence(encoding: str, size_bytes: int) -> bytes:
    """``size_bytes`` of digital silence in ``encoding``."""
    if encoding not in _SILENCE_BYTE:
        raise ValueError(f"unknown encoding {encoding!r}")
    return _SILENCE_BYTE[encoding] * size_bytes


@dataclass(frozen=True, slots=True)
class ChunkRules:
    """The size rules one outbound ``media`` payload must obey, in bytes of the negotiated format."""

    encoding: str
    sample_rate_hz: int
    frame_bytes: int  # one 20 ms frame
    alignment_bytes: int  # a chunk is a whole multiple of this
    min_bytes: int
    max_bytes: int  # the largest aligned size within MAX_CHUNK_BYTES

    @property
    def bytes_per_ms(self) -> int:
        return self.frame_bytes // FRAME_MS

    def problem(self, size_bytes: int) -> str | None:
        """None when a payload of ``size_bytes`` obeys the rules, else a short fixed reason."""
        if size_bytes < self.min_bytes:
            return "chunk below the minimum"
        if size_bytes > self.max_bytes:
            return "chunk above the maximum"
        if size_bytes % self.alignment_bytes:
            return f"chunk not a multiple of {self.alignment_bytes} bytes"
        return None

    def align_up(self, size_bytes: int) -> int:
        return -(-size_bytes // self.alignment_bytes) * self.alignment_bytes


def chunk_rules(encoding: str, sample_rate_hz: int) -> ChunkRules:
    """Exotel's chunk rules for one format (see ALIGNMENT_BYTES above for how they were read)."""
    frame = frame_bytes(encoding, sample_rate_hz)
    alignment = math.lcm(ALIGNMENT_BYTES, frame)
    least = max(MIN_CHUNK_SAMPLES * _BYTES_PER_SAMPLE[encoding], MIN_CHUNK_MS * frame // FRAME_MS)
    min_bytes = -(-least // alignment) * alignment
    max_bytes = MAX_CHUNK_BYTES // alignment * alignment
    return ChunkRules(encoding, sample_rate_hz, frame, alignment, min_bytes, max_bytes)


# Names Exotel may write in start.media_format.encoding, lower-cased, parameters (";rate=...") cut off,
# mapped to ours. Anything else is a 1007 "unsupported media encoding": audio we cannot decode must not
# be fed to the model as if it were speech.
_ENCODINGS: dict[str, str] = {
    "audio/x-raw": ENCODING_L16,  # [ws] start example
    "raw": ENCODING_L16,  # [applet] "raw/slin"
    "slin": ENCODING_L16,  # [applet] "raw/slin"
    "raw/slin": ENCODING_L16,  # [applet]
    "linear16": ENCODING_L16,  # [exo-repo] Agent-Stream/docs/reference/WEBSOCKET_PROTOCOL.md
    "audio/l16": ENCODING_L16,  # [beta] MediaFormat "audio/L16;rate=8000|16000"
    "l16": ENCODING_L16,
    "audio/x-mulaw": ENCODING_PCMU,  # [beta] MediaFormat "audio/x-mulaw;rate=8000", the beta default
    "mulaw": ENCODING_PCMU,  # [beta] "mulaw (G.711)"
    "audio/pcmu": ENCODING_PCMU,
    "pcmu": ENCODING_PCMU,
}


# --- events and statistics -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallParties:
    """``start.from`` / ``start.to``: phone numbers. Kept out of every event and log line; ``repr``
    hides them so an accidental ``%r`` does not leak them."""

    from_number: str = field(repr=False)
    to_number: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class ExotelStreamStatistics:
    messages_received: int
    media_messages: int
    media_payload_bytes: int
    outbound_track_messages: int  # our own audio echoed back by a "both tracks" applet: dropped
    empty_media_messages: int  # dropped
    messages_without_stream_sid: int  # after start; tolerated (see the module docstring)
    marks_received: int
    dtmf_received: int
    sequence_gaps: int  # a sequence_number more than one above the highest so far
    sequence_reordered: int  # a sequence_number at or below the highest so far
    violations: int


class State(enum.Enum):
    AWAITING_CONNECTED = "awaiting_connected"
    AWAITING_START = "awaiting_start"
    STREAMING = "streaming"
    STOPPED = "stopped"
    CLOSED = "closed"  # after a violation: every further input is ignored


# Rules [ws]: `connected` first, once; `start` once, right after it (a missing `connected` is tolerated:
# it carries nothing we need); then `media`, `dtmf` and `mark` in any number; `stop` last. Any (state,
# event) pair not in this table is a 1008 policy violation.
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

_MAX_ID_CHARS = 128  # Exotel ids are short (32 hex for a call); the bound keeps logs and JSON small
_DTMF_DIGITS = frozenset("0123456789*#ABCD")
_INBOUND_TRACKS = frozenset({"inbound", "inbound_track"})
_OUTBOUND_TRACKS = frozenset({"outbound", "outbound_track"})
# stop.reason values seen in the sources ("stopped"/"callended": the AsyncAPI model of [ws]; Exotel's own
# notes: "caller_hangup"). StreamStopped.reason only ever holds one of these table entries.
_STOP_REASONS = {reason: reason for reason in ("stopped", "callended", "caller_hangup")}
_CONNECTED_FIELDS = ("protocol", "version")  # what [exo-repo] shows besides "event"


# --- field readers beyond voicecore/carriers/jsonwire.py's -------------------------------------------


def _media_format(start: dict) -> tuple[str, int]:
    """start.media_format -> (our encoding, sample rate in Hz), or 1007."""
    media_format = read_object(start, "media_format")
    raw_encoding = read_string(media_format, "encoding")
    base, *parameters = (part.strip() for part in raw_encoding.lower().split(";"))
    encoding = _ENCODINGS.get(base)
    if encoding is None:
        raise malformed("unsupported media encoding")
    rate_parameter: int | None = None
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip() == "rate":
            rate_parameter = read_counter({"rate": value.strip()}, "rate")
    sample_rate_hz = read_optional_counter(media_format, "sample_rate")
    if sample_rate_hz is None:
        sample_rate_hz = rate_parameter
    elif rate_parameter is not None and rate_parameter != sample_rate_hz:
        raise malformed("encoding rate differs from sample_rate")
    if sample_rate_hz is None:
        raise malformed("sample_rate is missing")
    if sample_rate_hz not in SAMPLE_RATES_HZ[encoding]:
        raise malformed("sample rate not supported for the encoding")
    bit_rate = read_optional_counter(media_format, "bit_rate")
    # [ws]/[applet]: "bit_rate": "16" for 16-bit PCM. What Exotel reports for mu-law is not documented,
    # so there only its type is checked.
    if encoding == ENCODING_L16 and bit_rate is not None and bit_rate != 16:
        raise malformed("bit_rate is not 16 for L16")
    return encoding, sample_rate_hz


# --- the protocol ------------------------------------------------------------------------------------


class ExotelStreamProtocol(ClosesOnViolation):
    """Server side of one Exotel Voicebot stream: text messages in, carrier-neutral events out.

    After ``start``: :attr:`encoding`, :attr:`sample_rate_hz`, :attr:`frame_bytes` (20 ms of that
    format, for cutting payloads), :attr:`chunk_rules` and :meth:`outbound_encoder` are ready.
    """

    _CLOSED = State.CLOSED

    def __init__(self) -> None:
        self.state = State.AWAITING_CONNECTED
        self.stream_sid: str | None = None
        self.call_sid: str | None = None
        self.account_sid: str | None = None
        self.encoding: str | None = None
        self.sample_rate_hz: int | None = None
        self.frame_bytes: int | None = None
        self.chunk_rules: ChunkRules | None = None
        self.call_parties: CallParties | None = None  # phone numbers: never log (module docstring)
        self.last_sequence_number: int | None = None
        self.violation: ProtocolViolation | None = None  # the one that closed us, if any
        self._sample_bytes = 1
        self._messages = 0
        self._media_messages = 0
        self._media_payload_bytes = 0
        self._outbound_track = 0
        self._empty_media = 0
        self._without_stream_sid = 0
        self._marks = 0
        self._dtmf = 0
        self._sequence_gaps = 0
        self._sequence_reordered = 0
        self._violations = 0

    # -- input ------------------------------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> list[CarrierEvent]:
        """Parse one text message (``str``, or its UTF-8 ``bytes``). Returns [] once closed, and for a
        valid message that carries nothing for the gateway (outbound-track or empty media)."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        try:
            return self._receive(data)
        except Violation as violation:
            return [self._close(violation.close_code, violation.reason)]

    def receive_binary(self, data: bytes) -> list[CarrierEvent]:
        """Exotel never sends binary frames [ws]: any one is a 1003 violation."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        return [self._close(CloseCode.UNSUPPORTED_DATA, "binary frame")]

    def deadline_violation(self) -> ProtocolViolation:
        """The shell's start timer (``timing.START_DEADLINE_MS``, armed when the socket opens, cancelled
        on StreamStarted) fired: close the protocol and return the violation to close with."""
        return self._close(CloseCode.POLICY_VIOLATION, f"no start within {START_DEADLINE_MS // 1000} s")

    def outbound_encoder(self) -> ExotelOutboundEncoder:
        """The encoder for this stream (its stream_sid, encoding and rate). Only after ``start``."""
        if self.stream_sid is None or self.encoding is None or self.sample_rate_hz is None:
            raise ValueError("the stream has not started")
        return ExotelOutboundEncoder(self.stream_sid, self.encoding, self.sample_rate_hz)

    # -- introspection ----------------------------------------------------------------------------

    def statistics(self) -> ExotelStreamStatistics:
        return ExotelStreamStatistics(
            messages_received=self._messages,
            media_messages=self._media_messages,
            media_payload_bytes=self._media_payload_bytes,
            outbound_track_messages=self._outbound_track,
            empty_media_messages=self._empty_media,
            messages_without_stream_sid=self._without_stream_sid,
            marks_received=self._marks,
            dtmf_received=self._dtmf,
            sequence_gaps=self._sequence_gaps,
            sequence_reordered=self._sequence_reordered,
            violations=self._violations,
        )

    # -- internals --------------------------------------------------------------------------------

    def _receive(self, data: str | bytes) -> list[CarrierEvent]:
        message, event = load_event(data)
        following = next_state(_TRANSITIONS, _KNOWN_EVENTS, self.state, event, State.STOPPED)
        parsed = _PARSERS[event](self, message)
        # Only a fully valid message moves the state: a violation above leaves it for _close.
        self.state = following
        return parsed

    def _sequence(self, message: dict) -> int:
        sequence_number = read_counter(message, "sequence_number")
        last = self.last_sequence_number
        if last is not None:
            # Not a violation: counted for the shell, which logs it once per call.
            if sequence_number > last + 1:
                self._sequence_gaps += 1
            elif sequence_number <= last:
                self._sequence_reordered += 1
                return sequence_number
        self.last_sequence_number = sequence_number
        return sequence_number

    def _check_stream_sid(self, message: dict) -> None:
        if "stream_sid" not in message:
            self._without_stream_sid += 1
            return
        if read_string(message, "stream_sid") != self.stream_sid:
            raise Violation(CloseCode.POLICY_VIOLATION, "wrong stream_sid")

    def _parse_connected(self, message: dict) -> list[CarrierEvent]:
        fields = tuple(
            sorted((key, message[key]) for key in _CONNECTED_FIELDS if type(message.get(key)) is str)
        )
        return [StreamConnected(fields=fields)]

    def _parse_start(self, message: dict) -> list[CarrierEvent]:
        sequence_number = read_counter(message, "sequence_number")
        start = read_object(message, "start")
        # [ws] repeats stream_sid at the top level and inside start; either alone is enough.
        if "stream_sid" in message:
            stream_sid = read_id(message, "stream_sid", _MAX_ID_CHARS, space=True)
            if "stream_sid" in start and read_string(start, "stream_sid") != stream_sid:
                raise malformed("start.stream_sid differs from stream_sid")
        elif "stream_sid" in start:
            stream_sid = read_id(start, "stream_sid", _MAX_ID_CHARS, space=True)
        else:
            raise malformed("stream_sid is missing")
        call_sid = read_id(start, "call_sid", _MAX_ID_CHARS, space=True)
        account_sid = read_id(start, "account_sid", _MAX_ID_CHARS, space=True)
        from_number = read_optional_string(start, "from") or ""
        to_number = read_optional_string(start, "to") or ""

        # Absent is read as empty; values are strings (they come from the URL's query string [applet]).
        raw_parameters = start.get("custom_parameters", {})
        if type(raw_parameters) is not dict:
            raise malformed("custom_parameters is not an object")
        if not all(type(value) is str for value in raw_parameters.values()):
            raise malformed("custom_parameters value is not a string")

        encoding, sample_rate_hz = _media_format(start)

        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.account_sid = account_sid
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        self.frame_bytes = frame_bytes(encoding, sample_rate_hz)
        self.chunk_rules = chunk_rules(encoding, sample_rate_hz)
        self.call_parties = CallParties(from_number=from_number, to_number=to_number)
        self.last_sequence_number = sequence_number
        self._sample_bytes = _BYTES_PER_SAMPLE[encoding]
        return [
            StreamStarted(
                sequence_number=sequence_number,
                call_id=call_sid,
                stream_id=stream_sid,
                account_id=account_sid,
                custom_parameters=tuple(raw_parameters.items()),
                encoding=encoding,
                sample_rate_hz=sample_rate_hz,
                channels=1,  # mono [applet]
            )
        ]

    def _parse_media(self, message: dict) -> list[CarrierEvent]:
        self._check_stream_sid(message)
        media = read_object(message, "media")
        read_optional_counter(media, "chunk")
        timestamp_ms = read_counter(media, "timestamp")
        encoded = read_string(media, "payload")
        outbound = False
        if "track" in media:
            track = read_string(media, "track")
            if track in _OUTBOUND_TRACKS:
                outbound = True
            elif track not in _INBOUND_TRACKS:
                raise malformed("media track is unknown")
        payload = decode_base64(encoded)
        if len(payload) % self._sample_bytes:
            raise malformed("payload is not a whole number of samples")
        sequence_number = self._sequence(message)
        self._media_messages += 1
        if outbound:
            self._outbound_track += 1
            return []
        if not payload:
            self._empty_media += 1
            return []
        self._media_payload_bytes += len(payload)
        return [CallerAudio(sequence_number=sequence_number, timestamp_ms=timestamp_ms, payload=payload)]

    def _parse_dtmf(self, message: dict) -> list[CarrierEvent]:
        self._check_stream_sid(message)
        dtmf = read_object(message, "dtmf")
        digit = read_string(dtmf, "digit")
        if digit not in _DTMF_DIGITS:  # also rejects "" and multi-character strings
            raise malformed("digit is not one DTMF key")
        read_optional_counter(dtmf, "duration")
        sequence_number = self._sequence(message)
        self._dtmf += 1
        return [Dtmf(sequence_number=sequence_number, digit=digit)]

    def _parse_mark(self, message: dict) -> list[CarrierEvent]:
        self._check_stream_sid(message)
        name = read_string(read_object(message, "mark"), "name")
        sequence_number = self._sequence(message)
        self._marks += 1
        return [MarkEcho(sequence_number=sequence_number, name=name)]

    def _parse_stop(self, message: dict) -> list[CarrierEvent]:
        self._check_stream_sid(message)
        reason = ""
        if "stop" in message:
            stop = read_object(message, "stop")
            if "call_sid" in stop and read_string(stop, "call_sid") != self.call_sid:
                raise Violation(CloseCode.POLICY_VIOLATION, "stop names another call")
            if "account_sid" in stop and read_string(stop, "account_sid") != self.account_sid:
                raise Violation(CloseCode.POLICY_VIOLATION, "stop names another call")
            if "reason" in stop:
                reason = _STOP_REASONS.get(read_string(stop, "reason"), "")
        sequence_number = self._sequence(message)
        return [StreamStopped(sequence_number=sequence_number, reason=reason)]


# --- outbound --------------------------------------------------------------------------------------


# Each event's parser, a plain function of (protocol, message): a dict of bound methods in every protocol
# would tie it into a reference cycle that only the cyclic collector frees (see voicecore/carriers/twilio/stream.py).
_PARSERS = {
    "connected": ExotelStreamProtocol._parse_connected,
    "start": ExotelStreamProtocol._parse_start,
    "media": ExotelStreamProtocol._parse_media,
    "dtmf": ExotelStreamProtocol._parse_dtmf,
    "mark": ExotelStreamProtocol._parse_mark,
    "stop": ExotelStreamProtocol._parse_stop,
}


def _stream_sid_bytes(stream_sid: object) -> bytes:
    if not printable_id(stream_sid, _MAX_ID_CHARS, space=True):
        raise ValueError("stream_sid must be 1-128 printable ASCII characters without quotes or backslashes")
    return stream_sid.encode("ascii")  # type: ignore[union-attr]


def _check_mark_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("mark name must be a non-empty str")
    return name


class ExotelOutboundEncoder:
    """Exact wire bytes of the messages we send on one stream [ws], as text-frame
    :class:`~voicecore.carriers.events.Outbound` (compact UTF-8 JSON).

    ``media`` takes one chunk in the stream's encoding and rate and refuses (``ValueError``) a chunk
    that breaks :attr:`rules`: a 20 ms frame sent alone is audible distortion on Exotel [applet], so
    frames go through a :class:`ChunkBatcher` (:meth:`batcher`) first.
    """

    __slots__ = ("stream_sid", "encoding", "sample_rate_hz", "rules", "media_prefix", "media_suffix",
                 "_mark_prefix", "_clear")

    def __init__(self, stream_sid: str, encoding: str, sample_rate_hz: int) -> None:
        sid = _stream_sid_bytes(stream_sid)
        self.rules = chunk_rules(encoding, sample_rate_hz)
        self.stream_sid = stream_sid
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        self.media_prefix: bytes = b'{"event":"media","stream_sid":"' + sid + b'","media":{"payload":"'
        self.media_suffix: bytes = b'"}}'
        self._mark_prefix = b'{"event":"mark","stream_sid":"' + sid + b'","mark":{"name":'
        self._clear = b'{"event":"clear","stream_sid":"' + sid + b'"}'

    def media(self, payload: bytes) -> Outbound:
        """One ``media`` message; ``payload`` must obey :attr:`rules`."""
        problem = self.rules.problem(len(payload))
        if problem is not None:
            raise ValueError(f"{problem} ({len(payload)} bytes)")
        return Outbound(self.media_prefix + binascii.b2a_base64(payload, newline=False) + self.media_suffix)

    def mark(self, name: str) -> Outbound:
        """A ``mark``; Exotel echoes it once the audio sent before it has played [ws]."""
        encoded = json.dumps(_check_mark_name(name), ensure_ascii=True).encode("ascii")
        return Outbound(self._mark_prefix + encoded + b"}}")

    def clear(self) -> Outbound:
        """A ``clear``: Exotel drops the audio it has queued (barge-in) [ws]. Whether it then echoes the
        pending marks, as Twilio does, is not documented [unverified]."""
        return Outbound(self._clear)

    def batcher(self, chunk_ms: int = DEFAULT_CHUNK_MS) -> ChunkBatcher:
        """A :class:`ChunkBatcher` for this stream's format."""
        return ChunkBatcher.for_format(self.encoding, self.sample_rate_hz, chunk_ms)

    def encode(self, items: Iterable[ChunkMedia | ChunkMark]) -> list[Outbound]:
        """The batcher's output as wire messages, in order."""
        return [self.media(item.payload) if isinstance(item, ChunkMedia) else self.mark(item.name) for item in items]


# --- batching 20 ms frames into Exotel chunks ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChunkMedia:
    """One chunk to send as ``media``. Its last ``padded_bytes`` are silence the batcher added."""

    payload: bytes
    padded_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ChunkMark:
    """A mark to send now: every byte of audio queued before it has been sent before it."""

    name: str


ChunkItem = Union[ChunkMedia, ChunkMark]


@dataclass(frozen=True, slots=True)
class ClearedChunk:
    """What :meth:`ChunkBatcher.clear` threw away: never-sent audio and the marks that waited behind it.
    Those marks were never sent, so no echo will come for them: the gateway settles them itself, as it
    settles the marks a ``clear`` echoes (their audio was not played)."""

    dropped_bytes: int
    dropped_frames: int
    dropped_marks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BatcherStatistics:
    frames_in: int
    chunks_out: int
    chunk_bytes_out: int  # padding included
    marks_out: int
    marks_deferred: int  # marks that waited for their chunk to fill
    padded_chunks: int
    padded_frames: int  # silence inserted, in frames (the only place voicecore inserts any for Exotel)
    frames_dropped_by_clear: int
    marks_dropped_by_clear: int


class ChunkBatcher:
    """Our 20 ms frames in, Exotel-sized chunks and marks out, in order. Pure; one per stream.

    - :meth:`push` frames (whole frames of the stream's format); a :class:`ChunkMedia` of
      ``chunk_bytes`` comes out each time that much is collected.
    - :meth:`mark` never lets a mark overtake audio pushed before it. With nothing pending the mark goes
      out at once; with a pending part that already obeys the rules (a larger ``chunk_bytes``) that part
      goes out, then the mark; otherwise the mark waits and goes out right behind the chunk that carries
      the last byte pushed before it. A waiting mark comes back later than its audio finished playing,
      never earlier, so "the audio before this mark has played" stays true of its echo.
    - ``end=True`` (the gateway passes it for the ``"<tag>:<n>:end"`` marks, voicecore.carriers.marks) and
      :meth:`flush` mean no more audio follows for now, so the pending part must go out although it is
      short. Exotel documents no exception for a last chunk ([applet]: smaller chunks "risk audio
      distortion", sizes off the 320-byte grid "create gaps"), so the part is padded with silence of the
      stream's encoding up to the next size that obeys the rules, and the padded frames are counted
      (:class:`ChunkMedia.padded_bytes`, statistics). This is the only place silence is inserted into
      what we send Exotel. It comes after the response's last frame, where the caller hears a pause
      anyway, and delays that mark's echo by less than ``min_bytes`` of audio (200 ms at 8 kHz).
    - :meth:`clear` drops the pending part and the marks waiting behind it (see :class:`ClearedChunk`).
    """

    def __init__(self, rules: ChunkRules, chunk_bytes: int | None = None) -> None:
        chunk = rules.min_bytes if chunk_bytes is None else chunk_bytes
        if rules.problem(chunk) is not None:
            raise ValueError(f"chunk_bytes {chunk} breaks Exotel's chunk rules")
        self.rules = rules
        self.chunk_bytes = chunk
        self._silence_byte = _SILENCE_BYTE[rules.encoding]
        self._pending = bytearray()
        self._waiting: list[str] = []  # marks behind the pending part, in order
        self._frames_in = 0
        self._chunks_out = 0
        self._chunk_bytes_out = 0
        self._marks_out = 0
        self._marks_deferred = 0
        self._padded_chunks = 0
        self._padded_frames = 0
        self._frames_dropped = 0
        self._marks_dropped = 0

    @classmethod
    def for_format(cls, encoding: str, sample_rate_hz: int, chunk_ms: int = DEFAULT_CHUNK_MS) -> ChunkBatcher:
        """A batcher whose chunks hold ``chunk_ms`` of audio, rounded up to the format's alignment and at
        least its minimum (the default 100 ms becomes 200 ms at 8 kHz, see MIN_CHUNK_SAMPLES)."""
        rules = chunk_rules(encoding, sample_rate_hz)
        if not isinstance(chunk_ms, int) or chunk_ms <= 0:
            raise ValueError("chunk_ms must be a positive int")
        return cls(rules, rules.align_up(max(chunk_ms * rules.bytes_per_ms, rules.min_bytes)))

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    @property
    def waiting_marks(self) -> tuple[str, ...]:
        return tuple(self._waiting)

    def push(self, frames: bytes) -> list[ChunkItem]:
        """Queue whole frames; returns the chunks (and the marks behind them) that are now complete."""
        if len(frames) % self.rules.frame_bytes:
            raise ValueError(f"push takes whole {self.rules.frame_bytes}-byte frames")
        self._frames_in += len(frames) // self.rules.frame_bytes
        self._pending += frames
        out: list[ChunkItem] = []
        while len(self._pending) >= self.chunk_bytes:
            self._emit(out, self.chunk_bytes, 0)
        return out

    def mark(self, name: str, *, end: bool = False) -> list[ChunkItem]:
        """Queue a mark behind everything pushed so far; ``end``: flush (padding) first."""
        _check_mark_name(name)
        out = self.flush() if end else []
        pending = len(self._pending)
        if pending and (pending < self.rules.min_bytes or pending % self.rules.alignment_bytes):
            self._waiting.append(name)
            self._marks_deferred += 1
            return out
        if pending:
            self._emit(out, pending, 0)
        out.append(ChunkMark(name))
        self._marks_out += 1
        return out

    def flush(self) -> list[ChunkItem]:
        """Send the pending part now, padded with silence to the next size that obeys the rules."""
        out: list[ChunkItem] = []
        pending = len(self._pending)
        if pending:
            target = max(self.rules.min_bytes, self.rules.align_up(pending))
            padding = target - pending
            self._pending += self._silence_byte * padding
            self._emit(out, target, padding)
        return out

    def clear(self) -> ClearedChunk:
        """Drop the pending part and the marks waiting behind it (send the encoder's ``clear`` too)."""
        cleared = ClearedChunk(
            dropped_bytes=len(self._pending),
            dropped_frames=len(self._pending) // self.rules.frame_bytes,
            dropped_marks=self.waiting_marks,
        )
        self._frames_dropped += cleared.dropped_frames
        self._marks_dropped += len(cleared.dropped_marks)
        self._pending.clear()
        self._waiting.clear()
        return cleared

    def statistics(self) -> BatcherStatistics:
        return BatcherStatistics(
            frames_in=self._frames_in,
            chunks_out=self._chunks_out,
            chunk_bytes_out=self._chunk_bytes_out,
            marks_out=self._marks_out,
            marks_deferred=self._marks_deferred,
            padded_chunks=self._padded_chunks,
            padded_frames=self._padded_frames,
            frames_dropped_by_clear=self._frames_dropped,
            marks_dropped_by_clear=self._marks_dropped,
        )

    def _emit(self, out: list[ChunkItem], size: int, padding: int) -> None:
        """Send the first ``size`` pending bytes, then every waiting mark.

        Every waiting mark's audio is inside them: between calls fewer than ``chunk_bytes`` are pending
        (push sends every full chunk), a mark waits only behind what is pending, and each chunk sent
        is a full one, the whole pending part (mark) or the whole part padded (flush)."""
        out.append(ChunkMedia(bytes(self._pending[:size]), padding))
        del self._pending[:size]
        self._chunks_out += 1
        self._chunk_bytes_out += size
        if padding:
            self._padded_chunks += 1
            self._padded_frames += padding // self.rules.frame_bytes
        out.extend(ChunkMark(name) for name in self._waiting)
        self._marks_out += len(self._waiting)
        self._waiting.clear()


# --- the carrier's end (the simulator's core) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class SentMedia:
    payload: bytes


@dataclass(frozen=True, slots=True)
class SentMark:
    name: str


@dataclass(frozen=True, slots=True)
class SentClear:
    pass


@dataclass(frozen=True, slots=True)
class OutboundRejected:
    """A message we sent that Exotel's documented contract does not allow. ``reason`` is short fixed
    text. What Exotel really does with such a message (ignore it, play a gap, close) is not documented;
    the simulator counts it as a protocol error."""

    reason: str


SentMessage = Union[SentMedia, SentMark, SentClear, OutboundRejected]


@dataclass(frozen=True, slots=True)
class ExotelCarrierStatistics:
    messages_sent: int
    media_sent: int
    messages_received: int
    media_received: int
    media_bytes_received: int
    marks_received: int
    clears_received: int
    rejected: int


class ExotelCarrierSide:
    """Exotel's end of one stream: builds the text messages Exotel sends [ws] (with its sequence
    numbers, chunk counter and timestamps) and parses what we send back, checking the chunk rules.

    Counters are written as strings, as in [ws]. The first ``media`` is sequence_number 2 and chunk 1.
    Misuse by the harness (a DTMF key that does not exist, a payload that is not whole samples) raises.
    """

    def __init__(
        self,
        stream_sid: str,
        call_sid: str,
        account_sid: str,
        *,
        encoding: str = ENCODING_L16,
        sample_rate_hz: int = 8000,
        custom_parameters: Sequence[tuple[str, str]] = (),
        from_number: str = "",
        to_number: str = "",
        encoding_name: str | None = None,
    ) -> None:
        _stream_sid_bytes(stream_sid)
        self.rules = chunk_rules(encoding, sample_rate_hz)
        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.account_sid = account_sid
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        self.custom_parameters = tuple(custom_parameters)
        self._from_number = from_number
        self._to_number = to_number
        # The name written into start.media_format.encoding ([ws] "audio/x-raw"; [beta] "audio/x-mulaw").
        self.encoding_name = encoding_name or ("audio/x-raw" if encoding == ENCODING_L16 else "audio/x-mulaw")
        self._sequence = 0
        self._chunk = 0
        self._next_timestamp_ms = 0
        self._sent = 0
        self._media_sent = 0
        self._received = 0
        self._media_received = 0
        self._media_bytes_received = 0
        self._marks_received = 0
        self._clears_received = 0
        self._rejected = 0

    # -- what Exotel sends ------------------------------------------------------------------------

    def connected(self) -> str:
        return self._dump({"event": "connected"})

    def start(self) -> str:
        return self._dump({
            "event": "start",
            "sequence_number": self._next_sequence(),
            "stream_sid": self.stream_sid,
            "start": {
                "stream_sid": self.stream_sid,
                "call_sid": self.call_sid,
                "account_sid": self.account_sid,
                "from": self._from_number,
                "to": self._to_number,
                "custom_parameters": dict(self.custom_parameters),
                "media_format": {
                    "encoding": self.encoding_name,
                    "sample_rate": str(self.sample_rate_hz),
                    "bit_rate": str(8 * _BYTES_PER_SAMPLE[self.encoding]),
                },
            },
        })

    def opening_messages(self) -> list[str]:
        return [self.connected(), self.start()]

    def media(self, payload: bytes, timestamp_ms: int | None = None) -> str:
        """Caller audio (any whole number of samples; Exotel sends ~100 ms). ``timestamp_ms`` defaults to
        the end of the previous payload, so consecutive calls describe contiguous audio from 0."""
        if len(payload) % _BYTES_PER_SAMPLE[self.encoding]:
            raise ValueError("payload is not a whole number of samples")
        timestamp = self._next_timestamp_ms if timestamp_ms is None else timestamp_ms
        self._next_timestamp_ms = timestamp + len(payload) // self.rules.bytes_per_ms
        self._chunk += 1
        self._media_sent += 1
        return self._dump({
            "event": "media",
            "sequence_number": self._next_sequence(),
            "stream_sid": self.stream_sid,
            "media": {
                "chunk": str(self._chunk),
                "timestamp": str(timestamp),
                "payload": binascii.b2a_base64(payload, newline=False).decode("ascii"),
            },
        })

    def dtmf(self, digit: str, duration_ms: int = 100) -> str:
        if digit not in _DTMF_DIGITS or len(digit) != 1:
            raise ValueError("not a DTMF key")
        return self._dump({
            "event": "dtmf",
            "sequence_number": self._next_sequence(),
            "stream_sid": self.stream_sid,
            "dtmf": {"digit": digit, "duration": str(duration_ms)},
        })

    def mark_echo(self, name: str) -> str:
        return self._dump({
            "event": "mark",
            "sequence_number": self._next_sequence(),
            "stream_sid": self.stream_sid,
            "mark": {"name": name},
        })

    def stop(self, reason: str = "callended") -> str:
        return self._dump({
            "event": "stop",
            "sequence_number": self._next_sequence(),
            "stream_sid": self.stream_sid,
            "stop": {"call_sid": self.call_sid, "account_sid": self.account_sid, "reason": reason},
        })

    # -- what we send -----------------------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> SentMessage:
        """Parse one message we sent; an :class:`OutboundRejected` when the contract does not allow it."""
        self._received += 1
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return self._reject("not JSON")
        if type(message) is not dict:
            return self._reject("not a JSON object")
        event = message.get("event")
        if event not in ("media", "mark", "clear"):
            return self._reject("not media, mark or clear")
        if message.get("stream_sid") != self.stream_sid:
            return self._reject("wrong or missing stream_sid")
        if event == "clear":
            self._clears_received += 1
            return SentClear()
        body = message.get(event)
        if type(body) is not dict:
            return self._reject(f"{event} is not an object")
        if event == "mark":
            name = body.get("name")
            if type(name) is not str or not name:
                return self._reject("mark name is not a non-empty string")
            self._marks_received += 1
            return SentMark(name)
        encoded = body.get("payload")
        if type(encoded) is not str:
            return self._reject("payload is not a string")
        try:
            payload = binascii.a2b_base64(encoded, strict_mode=True)
        except ValueError:
            return self._reject("payload is not base64")
        problem = self.rules.problem(len(payload))
        if problem is not None:
            return self._reject(problem)
        self._media_received += 1
        self._media_bytes_received += len(payload)
        return SentMedia(payload)

    def receive_binary(self, data: bytes) -> SentMessage:
        """Exotel's protocol is JSON text only [ws]."""
        self._received += 1
        return self._reject("binary frame")

    def statistics(self) -> ExotelCarrierStatistics:
        return ExotelCarrierStatistics(
            messages_sent=self._sent,
            media_sent=self._media_sent,
            messages_received=self._received,
            media_received=self._media_received,
            media_bytes_received=self._media_bytes_received,
            marks_received=self._marks_received,
            clears_received=self._clears_received,
            rejected=self._rejected,
        )

    def _reject(self, reason: str) -> OutboundRejected:
        self._rejected += 1
        return OutboundRejected(reason)

    def _next_sequence(self) -> str:
        self._sequence += 1
        return str(self._sequence)

    def _dump(self, message: dict) -> str:
        self._sent += 1
        return json.dumps(message, separators=(",", ":"))


# --- configuration: the dynamic URL answer, the stream URL, Basic auth -----------------------------


def _check_ws_url(url: object) -> str:
    if not isinstance(url, str) or not url.startswith(("wss://", "ws://")):
        raise ValueError("the stream URL must be a ws:// or wss:// URL")
    if not url.isascii() or any(char <= " " or char == "\x7f" for char in url):
        raise ValueError("the stream URL must be ASCII without spaces or control characters")
    return url


def voicebot_url_response(wss_url: str) -> bytes:
    """The body for the https endpoint a Voicebot applet may call to get the stream URL: a JSON object
    whose key ``url`` holds the ws(s) URL [applet]. Serve it as ``application/json``."""
    return orjson.dumps({"url": _check_ws_url(wss_url)})


def voicebot_stream_url(
    base_url: str, *, sample_rate_hz: int = 8000, custom_parameters: Sequence[tuple[str, str]] = ()
) -> str:
    """``base_url`` with ``?sample-rate=`` and up to three custom parameters (at most 256 characters
    together, URL-encoded), as the Voicebot applet takes them [applet]. Whether Exotel counts
    ``sample-rate`` among the three, or passes it on in ``custom_parameters``, is not documented."""
    _check_ws_url(base_url)
    if "?" in base_url or "#" in base_url:
        raise ValueError("base_url must carry no query or fragment")
    if sample_rate_hz not in SAMPLE_RATES_HZ[ENCODING_L16]:
        raise ValueError("sample_rate_hz must be 8000, 16000 or 24000")
    pairs = list(custom_parameters)
    if len(pairs) > MAX_CUSTOM_PARAMETERS:
        raise ValueError(f"at most {MAX_CUSTOM_PARAMETERS} custom parameters")
    names = [name for name, _ in pairs]
    if any(not isinstance(name, str) or not name or name == _SAMPLE_RATE_QUERY_KEY for name in names) or len(
        set(names)
    ) != len(names):
        raise ValueError("custom parameter names must be distinct non-empty strings other than sample-rate")
    if not all(isinstance(value, str) for _, value in pairs):
        raise ValueError("custom parameter values must be strings")
    custom = urlencode(pairs)
    if len(custom) > MAX_CUSTOM_PARAMETERS_CHARS:
        raise ValueError(f"custom parameters exceed {MAX_CUSTOM_PARAMETERS_CHARS} characters")
    query = urlencode([(_SAMPLE_RATE_QUERY_KEY, str(sample_rate_hz))])
    return f"{base_url}?{query}&{custom}" if custom else f"{base_url}?{query}"


def check_basic_auth(authorization_header: str | bytes | None, expected_user: str, expected_password: str) -> bool:
    """True when ``authorization_header`` is ``Basic base64(user:password)`` (RFC 7617) with exactly the
    expected credentials, which Exotel sends on the upgrade when they are written into the applet's URL
    [applet]. Both parts are compared in constant time, and both always, so the timing says nothing
    about which part was wrong. Empty expected credentials are our misuse (``ValueError``): they would
    let an empty header in."""
    if not expected_user or not expected_password:
        raise ValueError("expected credentials must be non-empty")
    if authorization_header is None:
        return False
    if isinstance(authorization_header, bytes):
        try:
            authorization_header = authorization_header.decode("ascii")
        except UnicodeDecodeError:
            return False
    scheme, _, token = authorization_header.strip().partition(" ")
    if scheme.lower() != "basic":  # the scheme name is case-insensitive (RFC 7235 section 2.1)
        return False
    try:
        decoded = binascii.a2b_base64(token.strip(), strict_mode=True)
    except ValueError:
        return False
    user, colon, password = decoded.partition(b":")
    if not colon:
        return False
    user_ok = hmac.compare_digest(user, expected_user.encode("utf-8"))
    password_ok = hmac.compare_digest(password, expected_password.encode("utf-8"))
    return user_ok & password_ok


def with_basic_auth(url: str, user: str, password: str) -> str:
    """``url`` (``wss://`` or ``ws://``, no credentials in it yet) as ``wss://user:password@host/...``, the form
    the Voicebot applet takes Basic auth credentials in [applet]. Both are percent-encoded (RFC 3986 section
    3.2.1: userinfo may not hold ``@``, ``:`` in the user, ``/``...), which a client decodes before it builds
    the ``Authorization`` header; credentials of letters, digits and ``-._~`` come through unchanged."""
    _check_ws_url(url)
    if not user or not password:
        raise ValueError("user and password must be non-empty")
    scheme, rest = url.split("://", 1)
    if "@" in rest.split("/", 1)[0]:
        raise ValueError("the URL already carries credentials")
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{rest}"
