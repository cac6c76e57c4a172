"""Telnyx media streaming over WebSocket, without I/O: the server side of one stream, the exact messages
we send back, the carrier's own end (the core of a Telnyx simulator), the TeXML answer and webhook
signatures.

Owns: validating every inbound text message into the carrier-neutral events of
:mod:`voicecore.carriers.events`, the order Telnyx may send them in, putting caller audio back in order
(Telnyx does not guarantee frame order), the WebSocket close code for each kind of bad input, the byte
shapes of ``media`` / ``mark`` / ``clear``, the ``<Connect><Stream>`` TeXML, and Ed25519 webhook signatures.

Must not know: sockets, clocks, session tokens, call slots, rings or codecs. The shell feeds each received
WebSocket message to :class:`TelnyxStreamProtocol`, acts on the events, closes the socket with
``ProtocolViolation.close_code`` when one comes out, and runs the start deadline itself (it calls
:meth:`TelnyxStreamProtocol.deadline_violation` when the timer fires). Time comes in as an argument
(``now_s`` for webhooks, ``elapsed_ms`` for the simulated playback).

Sources, cited below by these names:

- [guide]: Telnyx "Media Streaming over Websockets" (developers.telnyx.com/docs/voice/programmable-voice/
  media-streaming): the ``connected``/``start``/``media``/``stop``/``mark``/``dtmf``/``error`` examples,
  bidirectional RTP mode, ``clear``, the error-code table.
- [asyncapi]: Telnyx "Stream call media over WebSocket" (developers.telnyx.com/api-reference/websockets/
  stream-call-media-over-websocket): frame list, "Media frame order is not guaranteed. Use media.chunk,
  media.timestamp, and sequence_number to order frames", marks echoed at once when nothing is queued.
- [texml]: Telnyx TeXML ``<Stream>``, ``<Connect>`` ("the following instructions will be executed when the
  service is stopped") and ``<Redirect>`` verb pages.
- [webhooks]: Telnyx callback pages (headers ``telnyx-timestamp``, ``telnyx-signature-ed25519``: an
  Ed25519 signature of ``timestamp|payload``), and telnyx-python's ``webhook.py``, which verifies exactly
  ``timestamp + b"|" + payload`` with a base64 public key.
- [pipecat]: ``pipecat-ai/pipecat`` ``src/pipecat/serializers/telnyx.py``: outbound ``media`` and ``clear``
  carry no ``stream_id``.
- docs/explanation/protocols.md#b: the Twilio/Telnyx comparison this module follows.

The WebSocket upgrade is not signed. Telnyx signs its webhooks [webhooks] and nothing on the stream: the
connection flow of [asyncapi] is "Telnyx opens a WebSocket connection to the configured stream_url" and
then sends ``connected``; the TeXML Streams API takes url, track, codec, name and status callback
(``/texml/Accounts/{account_sid}/Calls/{call_sid}/Streams.json``) and no credential. Call Control's
``streaming_start`` has ``stream_auth_token``, "an authentication token to be sent as part of the WebSocket
connection": a static token of ours, not a signature, and not on the TeXML path the gateway answers with.
So there is no upgrade check for Telnyx: the single-use session token in ``start.custom_parameters`` (a
TeXML ``<Parameter>``) is what admits a stream.

Close codes (RFC 6455 section 7.4.1), the whole table:

=====  ======================================================================================
1003   a binary frame: Telnyx only sends JSON text frames ([guide], [asyncapi])
1007   malformed data: not UTF-8, not JSON, not an object, garbage after the JSON value, a missing
       or wrongly typed field, a counter that is not a non-negative decimal, bad base64, an empty
       payload, an id that is not printable ASCII, a DTMF "digit" that is not one key, a media
       format other than PCMU/PCMA 8000 Hz mono ("media format is not PCMU/PCMA 8000 Hz mono")
1008   policy / order: unknown ``event``, ``media``/``dtmf``/``mark``/``error``/``stop`` before
       ``start``, a second ``connected`` or ``start``, a ``stream_id`` that is not this stream's,
       a ``stop`` naming another call, anything after ``stop``, no ``start`` before the deadline
1009   a message larger than ``timing.MAX_MESSAGE_BYTES`` (UTF-8 bytes)
=====  ======================================================================================

Decisions, and why:

- Codecs. Telnyx can stream PCMU, PCMA, G722, OPUS, AMR-WB and L16 ([guide]). Only PCMU and PCMA at
  8000 Hz are accepted: they are the encodings :mod:`voicecore.carriers.codec` turns into the arena's
  frames without a decoder we do not have (G722, OPUS, AMR-WB), and Telnyx's L16 is 16-bit *network byte
  order* (RTP, RFC 3551; [pipecat] byte-swaps it) while ``events.ENCODING_L16`` promises little-endian.
  Anything else closes with 1007 and the fixed reason above; :func:`texml_connect_stream` asks Telnyx for
  the accepted codecs so a correctly answered call never sees it. The older docs' example spelled PCMU
  ``"audio/x-mulaw"``; it is read as PCMU.
- Counters (``sequence_number``, ``chunk``, ``timestamp``) are decimal strings in every Telnyx example
  ([guide], [asyncapi]). Non-negative JSON integers are accepted too: Telnyx's own docs changed
  ``error.code`` from ``"100005"`` to ``100002`` between versions, so a counter's JSON type is not
  something to drop a call over.
- Order. Caller audio is released in ``media.chunk`` order (the per-track audio counter the docs name for
  reordering), from chunk ``FIRST_CHUNK`` = 1 (Twilio's documented start; Telnyx's is [unverified], and a
  wrong guess costs one counted gap or one dropped frame, never a call). A frame ahead of a missing one is
  held; at most ``REORDER_WINDOW_FRAMES`` are held (60 ms of 20 ms frames). When one more arrives the
  missing frames are given up: the gap is skipped and counted. A frame older than what was released is
  dropped and counted. ``dtmf``, ``mark`` and ``error`` pass straight through: they are not audio.
- ``track: "outbound"`` media (a ``both_tracks`` stream) is our own audio played back: validated, counted
  and never released as caller audio. :func:`texml_connect_stream` asks for ``inbound_track`` only.
- ``error`` frames report a problem with what *we* sent (malformed frame, invalid media, rate limit;
  [guide]). They are documented and not the peer's violation, so they do not close the stream; events.py
  has no event for them, so they are counted in :meth:`TelnyxStreamProtocol.statistics` and the last one
  kept in ``last_error`` (code and a documented title only, never the peer's ``detail`` text).
- ``StreamStarted.stream_id`` is "" because Telnyx's outbound messages carry no id ([guide], [pipecat])
  and events.py defines that field as "the id our outbound messages must carry"; the Telnyx stream id
  stays on ``TelnyxStreamProtocol.stream_id`` for logs. ``call_id`` is ``call_control_id`` and
  ``account_id`` is ``user_id``. ``client_state``, ``call_session_id`` and the numbers stay on the protocol
  object: phone numbers must not travel in events that reach logs.
- Unknown *keys* are ignored (``tags``, ``occurred_at``, ``connected.x-telnyx-streaming-auth-token``...),
  unknown *events* are a violation. JSON duplicate keys: the last one wins (orjson's rule).

Bad peer input never raises out of the stream protocol: it becomes one ProtocolViolation, after which the
protocol is closed and ignores everything. Our own misuse (an unusable mark name, a payload outside what
Telnyx plays, a bad TeXML value, an unusable webhook public key) raises ``ValueError``.
"""

from __future__ import annotations

import binascii
import enum
import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union
from urllib.parse import urlsplit

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_der_public_key

from voicecore.carriers.events import (
    ENCODING_PCMA,
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
    read_counter,
    read_id,
    read_integer,
    read_object,
    read_optional_string,
    read_string,
)
from voicecore.carriers.wire import RAW, WireTemplates
from voicecore.timing import BYTES_PER_MS, SAMPLE_RATE_HZ, START_DEADLINE_MS

__all__ = [
    "CLEAR_MESSAGE",
    "ERROR_TITLES",
    "FIRST_CHUNK",
    "MARK_PREFIX",
    "MARK_SUFFIX",
    "MEDIA_PREFIX",
    "MEDIA_SUFFIX",
    "OUTBOUND_MAX_MS",
    "OUTBOUND_MIN_MS",
    "REORDER_WINDOW_FRAMES",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WEBHOOK_TOLERANCE_S",
    "CloseCode",
    "Rejected",
    "SentClear",
    "SentMark",
    "SentMedia",
    "State",
    "TelnyxCarrierSide",
    "TelnyxError",
    "TelnyxOutboundEncoder",
    "TelnyxStreamProtocol",
    "TelnyxStreamStatistics",
    "sign_webhook",
    "texml_connect_stream",
    "texml_hangup",
    "verify_webhook",
    "wire_templates",
]


# --- constants -------------------------------------------------------------------------------------

REORDER_WINDOW_FRAMES = 3  # frames held while one is missing: 60 ms of added delay at most, once per gap
FIRST_CHUNK = 1  # the first inbound media.chunk (Twilio's documented start; Telnyx's is [unverified])

# [guide]: "RTP media chunks sent back to Telnyx can contain 20 milliseconds to 30 seconds of audio".
OUTBOUND_MIN_MS = 20
OUTBOUND_MAX_MS = 30_000

# [guide] error table. Titles are kept only from this table, so no peer text reaches a log.
ERROR_TITLES: dict[int, str] = {
    100002: "unknown_error",
    100003: "malformed_frame",
    100004: "invalid_media",
    100005: "rate_limit_reached",
}

SIGNATURE_HEADER = "telnyx-signature-ed25519"  # [webhooks]: base64 Ed25519 signature
TIMESTAMP_HEADER = "telnyx-timestamp"  # [webhooks]: Unix seconds, part of what is signed
WEBHOOK_TOLERANCE_S = 300  # replay window; telnyx-python's verify takes a tolerance, Standard Webhooks uses 5 min

# media_format.encoding -> our encoding name. "audio/x-mulaw" is the older docs' spelling of PCMU.
_ENCODINGS = {"PCMU": ENCODING_PCMU, "PCMA": ENCODING_PCMA, "audio/x-mulaw": ENCODING_PCMU}
_MEDIA_CHANNELS = 1
_TRACK_INBOUND = "inbound"
_TRACK_OUTBOUND = "outbound"
_DTMF_DIGITS = frozenset("0123456789*#ABCD")
_MAX_ID_CHARS = 256  # stream_id is a UUID and call_control_id ~60 characters; generous, and bounded
_MAX_TIMESTAMP_DIGITS = 12  # webhook timestamps are Unix seconds: 10 digits until the year 2286


# --- events and statistics -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TelnyxError:
    """The last ``error`` frame: Telnyx rejected something we sent ([guide]). ``title`` comes from
    ``ERROR_TITLES`` ("other" for a code not in it), never from the peer's text."""

    code: int
    title: str


@dataclass(frozen=True, slots=True)
class TelnyxStreamStatistics:
    messages_received: int
    media_frames: int  # valid inbound-track media messages accepted into the reorder window
    media_payload_bytes: int
    frames_released: int  # CallerAudio events given out, in chunk order
    frames_reordered: int  # arrived after a later chunk and were still released in order
    gaps_skipped: int  # times the window overflowed and missing frames were given up
    frames_skipped: int  # chunks never released because a gap was skipped
    late_dropped: int  # a chunk older than the last released one (late, or a duplicate of a released one)
    duplicates_dropped: int  # a chunk already held in the window
    outbound_frames_ignored: int  # track "outbound": our own audio echoed by a both_tracks stream
    marks_received: int
    dtmf_received: int
    carrier_errors: int  # Telnyx `error` frames: problems with what we sent
    violations: int


# --- states and the transition table ---------------------------------------------------------------


class State(enum.Enum):
    AWAITING_CONNECTED = "awaiting_connected"
    AWAITING_START = "awaiting_start"
    STREAMING = "streaming"
    STOPPED = "stopped"
    CLOSED = "closed"  # after a violation: every further input is ignored


# Rules ([guide] "Streaming process flow", [asyncapi] "Connection Flow"): `connected` first, once; `start`
# once, right after it (a missing `connected` is tolerated: it carries nothing we need); then `media`,
# `dtmf`, `mark` and `error` in any number (`error` answers what we sent, and we send nothing before
# `start`); `stop` last. Any (state, event) pair not in this table is a 1008 policy violation.
_TRANSITIONS: dict[tuple[State, str], State] = {
    (State.AWAITING_CONNECTED, "connected"): State.AWAITING_START,
    (State.AWAITING_CONNECTED, "start"): State.STREAMING,
    (State.AWAITING_START, "start"): State.STREAMING,
    (State.STREAMING, "media"): State.STREAMING,
    (State.STREAMING, "dtmf"): State.STREAMING,
    (State.STREAMING, "mark"): State.STREAMING,
    (State.STREAMING, "error"): State.STREAMING,
    (State.STREAMING, "stop"): State.STOPPED,
}

_KNOWN_EVENTS = frozenset(event for _, event in _TRANSITIONS)


# --- field readers beyond voicecore/carriers/jsonwire.py's -------------------------------------------


def _payload(media: dict) -> bytes:
    payload = decode_base64(read_string(media, "payload"))
    if not payload:
        raise malformed("payload is empty")  # an RTP payload is never empty
    return payload


# --- the reorder window ----------------------------------------------------------------------------


class _ReorderWindow:
    """Releases caller audio in chunk order, holding at most ``limit`` frames while one is missing.

    Invariants: every chunk is released at most once; released chunks strictly increase; at most
    ``limit`` frames are held after any push.
    """

    __slots__ = ("next_chunk", "limit", "held", "highest_seen", "reordered", "gaps_skipped", "frames_skipped",
                 "late_dropped", "duplicates_dropped")

    def __init__(self, first_chunk: int, limit: int) -> None:
        self.next_chunk = first_chunk
        self.limit = limit
        self.held: dict[int, CallerAudio] = {}
        self.highest_seen = first_chunk - 1
        self.reordered = 0
        self.gaps_skipped = 0
        self.frames_skipped = 0
        self.late_dropped = 0
        self.duplicates_dropped = 0

    def push(self, chunk: int, audio: CallerAudio) -> list[CallerAudio]:
        if chunk < self.next_chunk:
            self.late_dropped += 1  # released already, or given up when its gap was skipped
            return []
        if chunk in self.held:
            self.duplicates_dropped += 1
            return []
        if chunk < self.highest_seen:
            self.reordered += 1  # a later chunk came first; this one is still in time
        else:
            self.highest_seen = chunk
        released: list[CallerAudio] = []
        if chunk == self.next_chunk:
            released.append(audio)
            self.next_chunk += 1
        else:
            self.held[chunk] = audio
            if len(self.held) > self.limit:
                # The window is full: the missing frames will not come in time. Skip to the oldest held.
                self._skip_to(min(self.held))
        self._drain(released)
        return released

    def flush(self) -> list[CallerAudio]:
        """Everything held, in chunk order (the stream stopped: the missing frames never will come)."""
        released: list[CallerAudio] = []
        while self.held:
            self._skip_to(min(self.held))
            self._drain(released)
        return released

    def _skip_to(self, chunk: int) -> None:
        self.gaps_skipped += 1
        self.frames_skipped += chunk - self.next_chunk
        self.next_chunk = chunk

    def _drain(self, released: list[CallerAudio]) -> None:
        held = self.held
        chunk = self.next_chunk
        while chunk in held:
            released.append(held.pop(chunk))
            chunk += 1
        self.next_chunk = chunk


# --- the protocol ----------------------------------------------------------------------------------


class TelnyxStreamProtocol(ClosesOnViolation):
    """One Telnyx stream's inbound state machine. Feed it every WebSocket message; it returns events.

    ``reorder_window_frames`` is the most frames held while one is missing (``REORDER_WINDOW_FRAMES``).
    """

    _CLOSED = State.CLOSED

    def __init__(self, reorder_window_frames: int = REORDER_WINDOW_FRAMES) -> None:
        if type(reorder_window_frames) is not int or reorder_window_frames < 0:
            raise ValueError("reorder_window_frames must be a non-negative int")
        self.state = State.AWAITING_CONNECTED
        self.stream_id: str | None = None
        self.call_control_id: str | None = None
        self.user_id: str | None = None
        self.call_session_id: str | None = None
        self.client_state: str | None = None  # base64 data from the Call Control command that started us
        self.from_number: str | None = None  # phone numbers: never put them in a log message
        self.to_number: str | None = None
        self.encoding: str | None = None  # ENCODING_PCMU or ENCODING_PCMA once started
        self.last_error: TelnyxError | None = None
        self.violation: ProtocolViolation | None = None  # the one that closed us, if any
        self._window = _ReorderWindow(FIRST_CHUNK, reorder_window_frames)
        self._messages = 0
        self._media_frames = 0
        self._media_payload_bytes = 0
        self._frames_released = 0
        self._outbound_ignored = 0
        self._marks = 0
        self._dtmf = 0
        self._carrier_errors = 0
        self._violations = 0

    # -- input ------------------------------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> list[CarrierEvent]:
        """Parse one text message (``str``, or its UTF-8 ``bytes``). Returns [] once closed.

        A media message can give no event (held in the reorder window, or not caller audio) or several
        (it filled a gap); ``stop`` gives the held frames, then ``StreamStopped``.
        """
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        try:
            return self._receive(data)
        except Violation as violation:
            return [self._close(violation.close_code, violation.reason)]

    def receive_binary(self, data: bytes) -> list[CarrierEvent]:
        """Telnyx never sends binary frames ([guide]: JSON frames only): any one is a 1003 violation."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        return [self._close(CloseCode.UNSUPPORTED_DATA, "binary frame")]

    def deadline_violation(self) -> ProtocolViolation:
        """The shell's start timer fired: close the protocol and return the violation to close with.

        The shell arms the timer (``timing.START_DEADLINE_MS``) when the socket opens and cancels it on
        ``StreamStarted``; it calls this only while ``state`` is AWAITING_CONNECTED or AWAITING_START.
        """
        return self._close(CloseCode.POLICY_VIOLATION, f"no start within {START_DEADLINE_MS // 1000} s")

    # -- introspection ----------------------------------------------------------------------------

    @property
    def held_frames(self) -> int:
        """Frames waiting in the reorder window for a missing one."""
        return len(self._window.held)

    def statistics(self) -> TelnyxStreamStatistics:
        window = self._window
        return TelnyxStreamStatistics(
            messages_received=self._messages,
            media_frames=self._media_frames,
            media_payload_bytes=self._media_payload_bytes,
            frames_released=self._frames_released,
            frames_reordered=window.reordered,
            gaps_skipped=window.gaps_skipped,
            frames_skipped=window.frames_skipped,
            late_dropped=window.late_dropped,
            duplicates_dropped=window.duplicates_dropped,
            outbound_frames_ignored=self._outbound_ignored,
            marks_received=self._marks,
            dtmf_received=self._dtmf,
            carrier_errors=self._carrier_errors,
            violations=self._violations,
        )

    # -- internals --------------------------------------------------------------------------------

    def _receive(self, data: str | bytes) -> list[CarrierEvent]:
        message, event = load_event(data)
        following = next_state(_TRANSITIONS, _KNOWN_EVENTS, self.state, event, State.STOPPED)
        # Each parser validates the whole message before it changes anything (window, counters), so a
        # violation leaves the protocol as it was for _close.
        events = _PARSERS[event](self, message)
        self.state = following
        return events

    def _check_stream_id(self, message: dict) -> None:
        if read_string(message, "stream_id") != self.stream_id:
            raise Violation(CloseCode.POLICY_VIOLATION, "wrong stream_id")

    def _release(self, released: list[CallerAudio]) -> list[CarrierEvent]:
        self._frames_released += len(released)
        return released  # type: ignore[return-value]

    def _parse_connected(self, message: dict) -> list[CarrierEvent]:
        # [guide]: {"event": "connected", "version": "1.0.0"}. A streaming auth token may ride along in
        # `connected` ([asyncapi]); it is a credential, so it is not copied into the event: the shell
        # checks the x-telnyx-streaming-auth-token upgrade header instead.
        return [StreamConnected(fields=(("version", read_string(message, "version")),))]

    def _parse_start(self, message: dict) -> list[CarrierEvent]:
        sequence_number = read_counter(message, "sequence_number")
        stream_id = read_id(message, "stream_id", _MAX_ID_CHARS)  # top level, not inside `start` ([guide])
        start = read_object(message, "start")
        call_control_id = read_id(start, "call_control_id", _MAX_ID_CHARS)
        user_id = read_string(start, "user_id")
        call_session_id = read_optional_string(start, "call_session_id", null=True)
        client_state = read_optional_string(start, "client_state", null=True)
        from_number = read_optional_string(start, "from", null=True)
        to_number = read_optional_string(start, "to", null=True)

        # TeXML <Parameter> pairs ([texml]); absent or null reads as none.
        raw_parameters = start.get("custom_parameters")
        if raw_parameters is None:
            raw_parameters = {}
        if type(raw_parameters) is not dict:
            raise malformed("custom_parameters is not an object")
        if not all(type(value) is str for value in raw_parameters.values()):
            raise malformed("custom_parameters value is not a string")

        media_format = read_object(start, "media_format")
        encoding_name = read_string(media_format, "encoding")
        sample_rate_hz = read_integer(media_format, "sample_rate")
        channels = read_integer(media_format, "channels")
        encoding = _ENCODINGS.get(encoding_name)
        if encoding is None or (sample_rate_hz, channels) != (SAMPLE_RATE_HZ, _MEDIA_CHANNELS):
            raise malformed("media format is not PCMU/PCMA 8000 Hz mono")

        self.stream_id = stream_id
        self.call_control_id = call_control_id
        self.user_id = user_id
        self.call_session_id = call_session_id
        self.client_state = client_state
        self.from_number = from_number
        self.to_number = to_number
        self.encoding = encoding
        return [
            StreamStarted(
                sequence_number=sequence_number,
                call_id=call_control_id,
                stream_id="",  # Telnyx's outbound messages carry no id ([guide], [pipecat])
                account_id=user_id,
                custom_parameters=tuple(raw_parameters.items()),
                encoding=encoding,
                sample_rate_hz=sample_rate_hz,
                channels=channels,
            )
        ]

    def _parse_media(self, message: dict) -> list[CarrierEvent]:
        self._check_stream_id(message)
        sequence_number = read_counter(message, "sequence_number")
        media = read_object(message, "media")
        track = read_string(media, "track")
        if track != _TRACK_INBOUND and track != _TRACK_OUTBOUND:
            raise malformed("media track is not inbound or outbound")
        chunk = read_counter(media, "chunk")
        # Read as milliseconds since the stream started, as Twilio documents for the same field; Telnyx
        # names no unit (its example is "5") [unverified]. Passed through, never used for ordering here.
        timestamp_ms = read_counter(media, "timestamp")
        payload = _payload(media)
        if track == _TRACK_OUTBOUND:
            self._outbound_ignored += 1
            return []
        self._media_frames += 1
        self._media_payload_bytes += len(payload)
        audio = CallerAudio(sequence_number=sequence_number, timestamp_ms=timestamp_ms, payload=payload)
        return self._release(self._window.push(chunk, audio))

    def _parse_dtmf(self, message: dict) -> list[CarrierEvent]:
        # [guide]: {"event": "dtmf", "stream_id", "occurred_at", "sequence_number", "dtmf": {"digit"}}.
        # sequence_number is optional here (0 when absent: never a real counter, `start` is "1").
        self._check_stream_id(message)
        digit = read_string(read_object(message, "dtmf"), "digit")
        if digit not in _DTMF_DIGITS:  # also rejects "" and multi-character strings
            raise malformed("digit is not one DTMF key")
        sequence_number = read_counter(message, "sequence_number") if "sequence_number" in message else 0
        self._dtmf += 1
        return [Dtmf(sequence_number=sequence_number, digit=digit)]

    def _parse_mark(self, message: dict) -> list[CarrierEvent]:
        # [guide]: the echo of a mark we sent, once the media before it played, at once if nothing was
        # queued, or when a `clear` flushed it.
        self._check_stream_id(message)
        sequence_number = read_counter(message, "sequence_number")
        name = read_string(read_object(message, "mark"), "name")
        self._marks += 1
        return [MarkEcho(sequence_number=sequence_number, name=name)]

    def _parse_error(self, message: dict) -> list[CarrierEvent]:
        # [guide]: {"event": "error", "payload": {"code": 100002, "title", "detail"}, "stream_id"}; the
        # older docs: {"stream_id", "event", "sequence_number": "6", "error": {"title", "code": "100005",
        # "detail"}}. Both are read; neither closes the stream (see the module docstring).
        self._check_stream_id(message)
        body = message.get("payload") if "payload" in message else message.get("error")
        if type(body) is not dict:
            raise malformed("error has no payload object")
        code = read_counter(body, "code")
        read_string(body, "title")
        if "sequence_number" in message:
            read_counter(message, "sequence_number")
        self._carrier_errors += 1
        self.last_error = TelnyxError(code=code, title=ERROR_TITLES.get(code, "other"))
        return []

    def _parse_stop(self, message: dict) -> list[CarrierEvent]:
        # [guide]: {"event": "stop", "sequence_number", "stop": {"user_id", "call_control_id"}, "stream_id"}.
        self._check_stream_id(message)
        sequence_number = read_counter(message, "sequence_number")
        stop = read_object(message, "stop")
        if read_string(stop, "call_control_id") != self.call_control_id:
            raise Violation(CloseCode.POLICY_VIOLATION, "stop names another call")
        user_id = read_optional_string(stop, "user_id", null=True)
        if user_id is not None and user_id != self.user_id:
            raise Violation(CloseCode.POLICY_VIOLATION, "stop names another account")
        events: list[CarrierEvent] = self._release(self._window.flush())
        events.append(StreamStopped(sequence_number=sequence_number, reason="carrier stop"))
        return events


# --- outbound --------------------------------------------------------------------------------------

# The fixed pieces of the three messages we send ([guide] "Bidirectional media streaming"): no stream_id,
# as the docs show and [pipecat] sends. MEDIA_PREFIX + base64 + MEDIA_SUFFIX is a complete `media`; the
# pacer builds it that way in shared memory.
MEDIA_PREFIX = b'{"event":"media","media":{"payload":"'
MEDIA_SUFFIX = b'"}}'
MARK_PREFIX = b'{"event":"mark","mark":{"name":'  # + the name as a JSON string + MARK_SUFFIX
MARK_SUFFIX = b"}}"
CLEAR_MESSAGE = b'{"event":"clear"}'

_OUTBOUND_MIN_BYTES = OUTBOUND_MIN_MS * BYTES_PER_MS  # G.711 at 8 kHz: one byte per sample, both laws
_OUTBOUND_MAX_BYTES = OUTBOUND_MAX_MS * BYTES_PER_MS


# Each event's parser, a plain function of (protocol, message): a dict of bound methods in every protocol
# would tie it into a reference cycle that only the cyclic collector frees (see voicecore/carriers/twilio/stream.py).
_PARSERS = {
    "connected": TelnyxStreamProtocol._parse_connected,
    "start": TelnyxStreamProtocol._parse_start,
    "media": TelnyxStreamProtocol._parse_media,
    "dtmf": TelnyxStreamProtocol._parse_dtmf,
    "mark": TelnyxStreamProtocol._parse_mark,
    "error": TelnyxStreamProtocol._parse_error,
    "stop": TelnyxStreamProtocol._parse_stop,
}


class TelnyxOutboundEncoder:
    """Exact wire messages we send on one stream, as :class:`Outbound` **text** frames.

    ``stream_id`` is kept for logs only: Telnyx's outbound messages carry none ([guide]), so any str is
    accepted, including the "" that ``StreamStarted.stream_id`` holds for Telnyx. Requires a stream in
    ``bidirectionalMode="rtp"`` (:func:`texml_connect_stream`): in the default mp3 mode Telnyx would
    read the payload as an MP3 file.
    """

    __slots__ = ("stream_id", "media_prefix", "media_suffix", "mark_prefix", "mark_suffix", "_clear")

    def __init__(self, stream_id: str = "") -> None:
        if not isinstance(stream_id, str):
            raise ValueError("stream_id must be a str")
        self.stream_id = stream_id
        self.media_prefix: bytes = MEDIA_PREFIX
        self.media_suffix: bytes = MEDIA_SUFFIX
        self.mark_prefix: bytes = MARK_PREFIX
        self.mark_suffix: bytes = MARK_SUFFIX
        self._clear = Outbound(CLEAR_MESSAGE)

    def media(self, payload: bytes) -> Outbound:
        """Raw G.711 in the stream's law, 20 ms to 30 s of it ([guide]), as one ``media`` message."""
        if not _OUTBOUND_MIN_BYTES <= len(payload) <= _OUTBOUND_MAX_BYTES:
            raise ValueError("Telnyx plays 20 ms to 30 s of audio per media message")
        return Outbound(MEDIA_PREFIX + binascii.b2a_base64(payload, newline=False) + MEDIA_SUFFIX)

    def mark(self, name: str) -> Outbound:
        """A ``mark``; Telnyx echoes ``name`` once the media before it has played ([guide])."""
        if not isinstance(name, str) or not name:
            raise ValueError("mark name must be a non-empty str")
        return Outbound(MARK_PREFIX + json.dumps(name, ensure_ascii=True).encode("ascii") + MARK_SUFFIX)

    def clear(self) -> Outbound:
        """A ``clear``: Telnyx stops playback, drops its queue and echoes every queued mark ([guide])."""
        return self._clear


def wire_templates(encoding: str = ENCODING_PCMU, arena_encoding: str = ENCODING_PCMU) -> WireTemplates:
    """How the pacer writes a Telnyx stream's messages (voicecore/carriers/wire.py). A stream whose law
    is the one the call's frames carry (``arena_encoding``: PCMU, or PCMA for an A-law call passed through
    to the model) gets the final text, byte for byte :class:`TelnyxOutboundEncoder`'s (its messages name
    neither the stream nor the law, so every such call shares them); a PCMA stream of a mu-law call raw
    entries, which the gateway's carrier edge transcodes and finishes."""
    if encoding != arena_encoding or encoding not in (ENCODING_PCMU, ENCODING_PCMA):
        return RAW
    return WireTemplates(media_prefix=MEDIA_PREFIX, media_suffix=MEDIA_SUFFIX, mark_prefix=MARK_PREFIX + b'"',
                         mark_suffix=b'"' + MARK_SUFFIX, clear=CLEAR_MESSAGE)


# --- the carrier's end (the core of a Telnyx simulator) --------------------------------------------


@dataclass(frozen=True, slots=True)
class SentMedia:
    """A ``media`` message we sent, as Telnyx reads it: the raw payload bytes."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class SentMark:
    name: str


@dataclass(frozen=True, slots=True)
class SentClear:
    pass


@dataclass(frozen=True, slots=True)
class Rejected:
    """Telnyx would refuse this message and answer with an ``error`` frame of ``code`` ([guide])."""

    code: int
    title: str


Sent = Union[SentMedia, SentMark, SentClear, Rejected]

_INVALID_MEDIA = 100004
_MALFORMED_FRAME = 100003


class TelnyxCarrierSide:
    """Telnyx's end of one stream: builds what Telnyx sends, parses and plays what we send.

    Builders return JSON text in the documented shapes ([guide]): string counters, ``stream_id`` at the
    top level, ``sequence_number`` one counter over every message, ``chunk`` counting inbound media from
    ``FIRST_CHUNK``, ``timestamp`` advancing by each frame's duration.

    Playback ([guide], [asyncapi]): media we send is queued and plays in order; :meth:`advance` plays it
    as time passes. A mark is echoed once the media before it has played, at once when nothing is queued,
    and a ``clear`` drops the queue and echoes every queued mark. Echoes, and the ``error`` frames for
    messages Telnyx would refuse, wait in :meth:`data_to_send`.
    """

    def __init__(
        self,
        stream_id: str,
        call_control_id: str,
        user_id: str,
        *,
        encoding: str = "PCMU",
        sample_rate_hz: int = SAMPLE_RATE_HZ,
        channels: int = _MEDIA_CHANNELS,
        call_session_id: str | None = None,
        client_state: str | None = None,
        from_number: str | None = None,
        to_number: str | None = None,
        custom_parameters: Mapping[str, str] | None = None,
        first_timestamp_ms: int = 0,
    ) -> None:
        self.stream_id = stream_id
        self.call_control_id = call_control_id
        self.user_id = user_id
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        self.channels = channels
        self.call_session_id = call_session_id
        self.client_state = client_state
        self.from_number = from_number
        self.to_number = to_number
        self.custom_parameters = dict(custom_parameters or {})
        self._sequence_number = 0
        self._chunk = FIRST_CHUNK - 1
        self._timestamp_ms = first_timestamp_ms
        # Playback queue: ["audio", bytes left] or ["mark", name], oldest first.
        self._queue: list[list] = []
        self._outbox: list[str] = []
        self.played_bytes = 0
        self.cleared_bytes = 0

    # -- what Telnyx sends --------------------------------------------------------------------------

    def _next_sequence(self) -> str:
        self._sequence_number += 1
        return str(self._sequence_number)

    def connected(self) -> str:
        return json.dumps({"event": "connected", "version": "1.0.0"})

    def start(self) -> str:
        start: dict = {"user_id": self.user_id, "call_control_id": self.call_control_id}
        optional = {"call_session_id": self.call_session_id, "from": self.from_number, "to": self.to_number,
                    "client_state": self.client_state}
        start.update((key, value) for key, value in optional.items() if value is not None)
        if self.custom_parameters:
            start["custom_parameters"] = self.custom_parameters
        start["media_format"] = {"encoding": self.encoding, "sample_rate": self.sample_rate_hz,
                                 "channels": self.channels}
        return json.dumps({"event": "start", "sequence_number": self._next_sequence(), "start": start,
                           "stream_id": self.stream_id})

    def media(self, payload: bytes, *, track: str = _TRACK_INBOUND) -> str:
        """One frame of caller audio (or, with ``track="outbound"``, of our own audio played back)."""
        if track == _TRACK_INBOUND:
            self._chunk += 1
        timestamp_ms = self._timestamp_ms
        self._timestamp_ms += len(payload) // BYTES_PER_MS
        return json.dumps({
            "event": "media",
            "sequence_number": self._next_sequence(),
            "media": {"track": track, "chunk": str(self._chunk), "timestamp": str(timestamp_ms),
                      "payload": binascii.b2a_base64(payload, newline=False).decode("ascii")},
            "stream_id": self.stream_id,
        })

    def dtmf(self, digit: str, occurred_at: str | None = None) -> str:
        message = {"event": "dtmf", "stream_id": self.stream_id, "sequence_number": self._next_sequence(),
                   "dtmf": {"digit": digit}}
        if occurred_at is not None:
            message["occurred_at"] = occurred_at
        return json.dumps(message)

    def mark_echo(self, name: str) -> str:
        return json.dumps({"event": "mark", "stream_id": self.stream_id, "sequence_number": self._next_sequence(),
                           "mark": {"name": name}})

    def error(self, code: int, title: str | None = None, detail: str = "") -> str:
        title = ERROR_TITLES.get(code, "unknown_error") if title is None else title
        return json.dumps({"event": "error", "payload": {"code": code, "title": title, "detail": detail},
                           "stream_id": self.stream_id})

    def stop(self) -> str:
        return json.dumps({"event": "stop", "sequence_number": self._next_sequence(),
                           "stop": {"user_id": self.user_id, "call_control_id": self.call_control_id},
                           "stream_id": self.stream_id})

    # -- what we send ---------------------------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> Sent:
        """Parse one message we sent, queue its effect, and return what Telnyx read (or Rejected)."""
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return self._reject(_MALFORMED_FRAME)
        event = message.get("event") if type(message) is dict else None
        if event == "media":
            media = message.get("media")
            encoded = media.get("payload") if type(media) is dict else None
            if type(encoded) is not str:
                return self._reject(_MALFORMED_FRAME)
            try:
                payload = binascii.a2b_base64(encoded, strict_mode=True)
            except ValueError:
                return self._reject(_INVALID_MEDIA)
            if not _OUTBOUND_MIN_BYTES <= len(payload) <= _OUTBOUND_MAX_BYTES:
                return self._reject(_INVALID_MEDIA)  # [unverified]: what Telnyx does outside 20 ms..30 s
            self._queue.append(["audio", len(payload)])
            return SentMedia(payload)
        if event == "mark":
            mark = message.get("mark")
            name = mark.get("name") if type(mark) is dict else None
            if type(name) is not str:
                return self._reject(_MALFORMED_FRAME)
            self._queue.append(["mark", name])
            self._echo_marks_at_front()
            return SentMark(name)
        if event == "clear":
            for item in self._queue:
                if item[0] == "mark":
                    self._outbox.append(self.mark_echo(item[1]))
                else:
                    self.cleared_bytes += item[1]
            self._queue.clear()
            return SentClear()
        return self._reject(_MALFORMED_FRAME)

    def receive_binary(self, data: bytes) -> Rejected:
        return self._reject(_MALFORMED_FRAME)  # Telnyx reads JSON text frames only

    def advance(self, elapsed_ms: int) -> None:
        """Play ``elapsed_ms`` of the queued audio, echoing the marks it reaches."""
        budget = elapsed_ms * BYTES_PER_MS
        while budget > 0 and self._queue:
            item = self._queue[0]
            if item[0] == "audio":
                played = min(budget, item[1])
                item[1] -= played
                budget -= played
                self.played_bytes += played
                if item[1] == 0:
                    self._queue.pop(0)
            self._echo_marks_at_front()

    @property
    def queued_ms(self) -> float:
        return sum(item[1] for item in self._queue if item[0] == "audio") / BYTES_PER_MS

    def data_to_send(self) -> list[str]:
        """The messages Telnyx sends now (mark echoes, error frames), oldest first; drains them."""
        outbox, self._outbox = self._outbox, []
        return outbox

    def _echo_marks_at_front(self) -> None:
        while self._queue and self._queue[0][0] == "mark":
            self._outbox.append(self.mark_echo(self._queue.pop(0)[1]))

    def _reject(self, code: int) -> Rejected:
        self._outbox.append(self.error(code))
        return Rejected(code=code, title=ERROR_TITLES[code])


# --- the answer document ---------------------------------------------------------------------------

# XML 1.0 forbids most control characters outright: a value holding one cannot be written at all.
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_TEXML_CODECS = ("PCMU", "PCMA")  # what TelnyxStreamProtocol accepts (module docstring)


def _xml_value(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a str")
    if _XML_FORBIDDEN.search(value):
        raise ValueError(f"{what} holds a character XML cannot carry")
    return value


def texml_connect_stream(stream_url: str, parameters: Mapping[str, str], codec: str = "PCMU",
                         redirect_url: str | None = None) -> str:
    """The TeXML answer to a voice webhook: a bidirectional RTP stream to ``stream_url`` ([texml]).

    ``<Connect>`` runs the stream synchronously: verbs after it run only once the stream stops. The
    ``<Stream>`` asks for the caller's track only (``inbound_track``), for ``codec`` in both directions
    (``codec`` for what Telnyx streams to us: it transcodes between PCMU and PCMA; ``bidirectionalCodec``
    for what we send) at 8000 Hz, and ``bidirectionalMode="rtp"``: without it Telnyx reads our media as
    MP3 files. ``parameters`` arrive in ``start.custom_parameters``. ElementTree writes the document, so
    ``&``, ``<``, quotes and line breaks in any value are escaped; a character XML cannot carry at all
    raises ValueError. Real Telnyx needs ``wss://``; ``ws://`` is accepted for a local simulator.

    ``redirect_url``: a ``<Redirect method="POST">`` after the ``<Connect>``. TeXML's ``<Connect>`` has no
    ``action`` (unlike TwiML's); the verbs after it run when the stream stops ([texml]), and ``<Redirect>``
    fetches the call's next TeXML from its URL (a form POST signed like every TeXML request): the re-attach
    step (voicecore/reattach.py).
    """
    _xml_value(stream_url, "stream_url")
    parts = urlsplit(stream_url)
    if parts.scheme not in ("wss", "ws") or not parts.netloc:
        raise ValueError("stream_url must be an absolute wss or ws URL")
    if codec not in _TEXML_CODECS:
        raise ValueError("codec must be PCMU or PCMA")
    response = ElementTree.Element("Response")
    connect = ElementTree.SubElement(response, "Connect")
    stream = ElementTree.SubElement(connect, "Stream", {
        "url": stream_url,
        "track": "inbound_track",
        "codec": codec,
        "bidirectionalMode": "rtp",
        "bidirectionalCodec": codec,
        "bidirectionalSamplingRate": str(SAMPLE_RATE_HZ),
    })
    for name, value in parameters.items():
        if not _xml_value(name, "parameter name"):
            raise ValueError("parameter name must be non-empty")
        ElementTree.SubElement(stream, "Parameter", {"name": name, "value": _xml_value(value, "parameter value")})
    if redirect_url is not None:
        _xml_value(redirect_url, "redirect_url")
        redirect_parts = urlsplit(redirect_url)
        if redirect_parts.scheme not in ("https", "http") or not redirect_parts.netloc:
            raise ValueError("redirect_url must be an absolute https or http URL")
        ElementTree.SubElement(response, "Redirect", {"method": "POST"}).text = redirect_url
    return '<?xml version="1.0" encoding="UTF-8"?>' + ElementTree.tostring(response, encoding="unicode")


def texml_hangup() -> str:
    """The TeXML that ends a call (``<Hangup/>``): the re-attach step's answer for a call that is over."""
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>'


# --- webhook signatures ----------------------------------------------------------------------------


def _public_key(public_key_b64: str) -> Ed25519PublicKey:
    """The Mission Control key: base64 of the raw 32-byte Ed25519 key (telnyx-python decodes it so); a
    base64 DER SubjectPublicKeyInfo is accepted too. An unusable key is our configuration's fault."""
    try:
        raw = binascii.a2b_base64(public_key_b64, strict_mode=True)
        if len(raw) == 32:
            return Ed25519PublicKey.from_public_bytes(raw)
        key = load_der_public_key(raw)
    except ValueError:
        raise ValueError("public key is not a base64 Ed25519 public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("public key is not an Ed25519 key")
    return key


def _signed_payload(timestamp: str, body: bytes | str) -> bytes:
    # [webhooks]: the signature covers "timestamp|payload", the raw body exactly as received.
    return timestamp.encode("ascii") + b"|" + (body.encode("utf-8") if isinstance(body, str) else bytes(body))


def verify_webhook(
    public_key_b64: str,
    signature_b64: str,
    timestamp: str,
    body: bytes | str,
    now_s: float,
    tolerance_s: int = WEBHOOK_TOLERANCE_S,
) -> bool:
    """True when ``signature_b64`` (header ``telnyx-signature-ed25519``) signs ``timestamp|body`` with the
    key of ``public_key_b64`` and ``timestamp`` (header ``telnyx-timestamp``, Unix seconds) is within
    ``tolerance_s`` of ``now_s``.

    telnyx-python rejects only timestamps older than the tolerance; this also rejects ones that far in
    the future, so a request signed ahead of time cannot be kept and replayed later. Bad peer input gives
    False; an unusable ``public_key_b64`` (our configuration) raises ValueError.
    """
    key = _public_key(public_key_b64)
    if not (isinstance(timestamp, str) and 0 < len(timestamp) <= _MAX_TIMESTAMP_DIGITS
            and timestamp.isascii() and timestamp.isdigit()):
        return False
    if abs(now_s - int(timestamp)) > tolerance_s:
        return False
    if not isinstance(signature_b64, str):
        return False
    try:
        signature = binascii.a2b_base64(signature_b64, strict_mode=True)
    except ValueError:
        return False
    if len(signature) != 64:  # an Ed25519 signature is 64 bytes (RFC 8032 section 5.1.6)
        return False
    try:
        key.verify(signature, _signed_payload(timestamp, body))
    except InvalidSignature:
        return False
    return True


def sign_webhook(private_key: Ed25519PrivateKey | bytes, timestamp: str | int, body: bytes | str) -> str:
    """The ``telnyx-signature-ed25519`` value Telnyx would send: base64 Ed25519 over ``timestamp|body``.

    For tests and the simulator; ``private_key`` is a key object or its 32-byte raw seed.
    """
    if isinstance(private_key, (bytes, bytearray)):
        private_key = Ed25519PrivateKey.from_private_bytes(bytes(private_key))
    signature = private_key.sign(_signed_payload(str(timestamp), body))
    return binascii.b2a_base64(signature, newline=False).decode("ascii")
