"""Plivo bidirectional audio streams (``<Stream bidirectional="true">``), both ends, without I/O.

Owns: validating every message Plivo sends into the carrier-neutral events of
:mod:`voicecore.carriers.events`, the order Plivo may send them in, the WebSocket close code for each kind
of bad input, the exact bytes of what we send (``playAudio``, ``checkpoint``, ``clearAudio``), the
unplayed-audio bound kept by checkpoints (:class:`CheckpointLead`), the carrier's end of the protocol
(:class:`PlivoCarrierSide`, the core of a simulator mode), the answer XML (:func:`stream_xml`) and
Plivo's request signature V3 (:func:`compute_signature_v3`, :func:`validate_signature_v3`), on the answer
webhook and on the stream's WebSocket upgrade (:func:`sign_upgrade`, :func:`validate_upgrade_signature`).

Must not know: sockets, clocks, session tokens, call slots, rings or codecs. The shell feeds each received
WebSocket message to :class:`PlivoStreamProtocol`, acts on the events, closes the socket with
``ProtocolViolation.close_code`` when one comes out, and runs the start deadline itself (it calls
:meth:`PlivoStreamProtocol.deadline_violation` when the timer fires).

Sources, cited below by tag (docs/explanation/protocols.md#b gives the comparison with Twilio):

- [ref]: Plivo's "Audio Streaming Protocol Reference" and "Stream Event Protocol" pages
  (docs.plivo.com voice-agents/audio-streaming/concepts/audio-streaming-reference, voice/audio-streaming),
  the ``<Stream>`` XML page (voice/xml/audiostream) and its checkpoint / playAudio / clearAudio pages.
- [sdk]: Plivo's official streaming SDK ``plivo-stream-sdk`` 0.1.1 (``plivo_stream/types.py``: the
  pydantic models of every message, ``base.py``: what it sends) and ``plivo`` 4.63.0
  (``plivo/utils/signature_v3.py``).
- [guide]: Plivo's "Audio Streaming Guide" (docs.plivo.com voice-agents/audio-streaming/concepts/
  audio-streaming-guide, "Signature Validation": "Plivo signs WebSocket connection requests", headers
  ``X-Plivo-Signature-V3`` and ``-Nonce``, validated with ``validateV3Signature`` and method "GET" for the
  upgrade) and ``plivo/plivo-stream-sdk-node`` ``src/index.ts`` (``validateConnectionSignature``: the two
  headers, the URL rebuilt from the request, validated as a GET with no parameters).
- [redirect]: Plivo's ``<Redirect>`` XML page (voice/xml/redirect): control goes to the URL's XML, POST by
  default, with ``From``, ``To``, ``Event`` ("Redirect"), ``CallUUID``, ``CallerName``, ``Direction`` and
  ``CallStatus`` (ringing, in-progress or completed; busy, failed, timeout or no-answer for outbound calls).
- [impl]: ``plivo-labs/agent-transport`` (``audio_stream/plivo.rs``, Plivo's own Rust transport) and
  pipecat ``src/pipecat/serializers/plivo.py``.

Bad peer input never raises out of the protocol: it becomes one :class:`ProtocolViolation`, after which
the protocol is closed and ignores everything. Our own misuse (an unusable stream id given to the
encoder, a checkpoint reported out of order) raises ``ValueError``.

Close codes (RFC 6455 section 7.4.1), the whole table:

=====  ======================================================================================
1003   a binary frame: Plivo sends JSON text frames only [ref]
1007   malformed data: not UTF-8, not JSON, not an object, a missing or wrongly typed field,
       a counter that is not a non-negative decimal, bad base64, an empty payload or one that
       is not whole 16-bit samples (L16), a stream id unsafe to echo, a media format other
       than audio/x-mulaw 8000 Hz or audio/x-l16 8000/16000 Hz, tracks other than
       ["inbound"], a DTMF digit outside 0-9 * # A-D, garbage after the JSON value
1008   policy / order: unknown ``event``, anything before ``start``, a second ``start``,
       a ``streamId`` that is not this stream's, anything after ``stop``, no ``start``
       before the deadline (``timing.START_DEADLINE_MS``)
1009   a message larger than ``timing.MAX_MESSAGE_BYTES`` (UTF-8 bytes; Plivo's own limit is
       64 KB per message [ref], the same number)
=====  ======================================================================================

Unknown ``event`` values are a violation (strict), but unknown *keys* inside a known message are ignored,
so Plivo adding a field does not drop calls. ``playFailed`` and ``error``, which only Plivo's own transport
[impl] knows, are known: counted, no event (see ``_TOLERATED_EVENTS``). Where Plivo's own sources disagree on a field's JSON type
(``sequenceNumber`` is "number" in [ref] and "can be string" in [sdk]; ``sampleRate`` is quoted in one
[ref] example), both forms are read; where a field is shown absent in one source (``sequenceNumber`` and
``streamId`` on ``playedStream``/``clearedAudio``/``dtmf``), it is optional but checked when present.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import re
import xml.etree.ElementTree as ElementTree
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Union
from urllib.parse import parse_qs, urlparse, urlsplit, urlunparse

import orjson

from voicecore.carriers.events import (
    ENCODING_L16,
    ENCODING_PCMU,
    CallerAudio,
    CarrierEvent,
    Cleared,
    Dtmf,
    MarkEcho,
    Outbound,
    ProtocolViolation,
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
    read_object,
    read_optional_counter,
    read_string,
)
from voicecore.carriers.wire import RAW, WireTemplates
from voicecore.timing import START_DEADLINE_MS

__all__ = [
    "CHECKPOINT_HEAD",
    "CLEAR_AUDIO_HEAD",
    "CONTENT_TYPE_L16",
    "CONTENT_TYPE_MULAW",
    "CheckpointLead",
    "CheckpointLeadStatistics",
    "Checkpoint",
    "ClearAudio",
    "CloseCode",
    "MAX_EXTRA_HEADERS_BYTES",
    "MAX_STREAM_URL_CHARS",
    "PLAY_AUDIO_HEAD",
    "PlayAudio",
    "PlivoCarrierSide",
    "PlivoOutboundEncoder",
    "PlivoStreamProtocol",
    "PlivoStreamStatistics",
    "Rejected",
    "SIGNATURE_MA_V3_HEADER",
    "SIGNATURE_V3_HEADER",
    "SIGNATURE_V3_NONCE_HEADER",
    "STREAM_CONTENT_TYPES",
    "State",
    "compute_signature_v3",
    "hangup_xml",
    "sign_upgrade",
    "stream_xml",
    "upgrade_signature_url",
    "validate_signature_v3",
    "validate_upgrade_signature",
    "wire_templates",
]


# --- media formats -----------------------------------------------------------------------------------

CONTENT_TYPE_MULAW = "audio/x-mulaw"
CONTENT_TYPE_L16 = "audio/x-l16"

# The (content type, rate) pairs Plivo documents for a bidirectional stream, in ``start.mediaFormat`` and
# in ``playAudio.media`` alike [ref]: mu-law is 8 kHz only; L16 (16-bit signed little-endian) 8 or 16 kHz.
# One [ref] page also lists L16 at 24 kHz; we never ask for it, so it stays a 1007.
_FORMATS: dict[tuple[str, int], str] = {
    (CONTENT_TYPE_MULAW, 8000): ENCODING_PCMU,
    (CONTENT_TYPE_L16, 8000): ENCODING_L16,
    (CONTENT_TYPE_L16, 16000): ENCODING_L16,
}
_BYTES_PER_SAMPLE = {CONTENT_TYPE_MULAW: 1, CONTENT_TYPE_L16: 2}

# The answer document's ``contentType`` values [ref]. Plivo's DEFAULT is audio/x-l16;rate=8000 (the guide
# page says mu-law; the reference says L16), so stream_xml always writes the attribute, and the protocol
# still reads whatever ``start.mediaFormat`` announces.
STREAM_CONTENT_TYPES: dict[str, tuple[str, int]] = {
    "audio/x-mulaw;rate=8000": (CONTENT_TYPE_MULAW, 8000),
    "audio/x-l16;rate=8000": (CONTENT_TYPE_L16, 8000),
    "audio/x-l16;rate=16000": (CONTENT_TYPE_L16, 16000),
}


# --- events that only Plivo has ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlivoStreamStatistics:
    messages_received: int
    media_frames: int
    media_payload_bytes: int
    checkpoints_echoed: int  # playedStream
    clears_confirmed: int  # clearedAudio
    dtmf_received: int
    play_failures: int  # playFailed: see _TOLERATED_EVENTS
    carrier_errors: int  # error: see _TOLERATED_EVENTS
    sequence_gaps: int  # a sequenceNumber more than one above the highest so far
    sequence_reordered: int  # a sequenceNumber at or below the highest so far
    violations: int


# --- states and the transition table -----------------------------------------------------------------


class State(enum.Enum):
    AWAITING_START = "awaiting_start"
    STREAMING = "streaming"
    STOPPED = "stopped"
    CLOSED = "closed"  # after a violation: every further input is ignored


# Rules [ref]: Plivo has no `connected` message; `start` comes first ("immediately when the WebSocket
# connection is established", once); then `media`, `dtmf`, `playedStream` and `clearedAudio` in any
# number. [ref] documents no `stop` (Plivo closes the socket when the call ends), but Plivo's own transport
# and pipecat's examples handle one [impl], so a `stop` is read as the last message. Any (state, event)
# pair not in this table is a 1008 policy violation.
_TRANSITIONS: dict[tuple[State, str], State] = {
    (State.AWAITING_START, "start"): State.STREAMING,
    (State.STREAMING, "media"): State.STREAMING,
    (State.STREAMING, "dtmf"): State.STREAMING,
    (State.STREAMING, "playedStream"): State.STREAMING,
    (State.STREAMING, "clearedAudio"): State.STREAMING,
    (State.STREAMING, "playFailed"): State.STREAMING,
    (State.STREAMING, "error"): State.STREAMING,
    (State.STREAMING, "stop"): State.STOPPED,
}

_KNOWN_EVENTS = frozenset(event for _, event in _TRANSITIONS)

# Plivo's own transport [impl] parses two messages no public page documents: `playFailed` {reason} (a
# playAudio it could not play) and `error` {reason}. Being strict about them would drop a call over an
# advisory message, and events.py has no event for them, so they are counted (statistics) and produce no
# event. Their `reason` is peer text and is never kept.
_TOLERATED_EVENTS = frozenset({"playFailed", "error"})

_MAX_ID_CHARS = 128
# Plivo's ids are UUIDs [ref]. The stream id goes back into every message we send, so it must be safe to
# put in a JSON string template as is; this class (a UUID's alphabet and a little more) guarantees that.
_SAFE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,%d}" % _MAX_ID_CHARS)
_DTMF_DIGITS = frozenset("0123456789*#ABCD")  # [ref]: 0-9, *, #, A-D
_INBOUND_TRACK = "inbound"
_EXTRA_HEADER_SEPARATORS = re.compile("[;,]")


# --- field readers beyond voicecore/carriers/jsonwire.py's -------------------------------------------


def _safe_id(message: dict, key: str) -> str:
    value = read_string(message, key)
    if not _SAFE_ID.fullmatch(value):
        raise malformed(f"{key} is not a usable id")
    return value


def _extra_headers(value: object) -> tuple[tuple[str, str], ...]:
    """``extra_headers`` of ``start``: the answer XML's ``extraHeaders`` as (name, value) pairs, in order.

    Three shapes are seen: "k1=v1;k2=v2" ([ref] example), "k1=v1,k2=v2" (the XML attribute's own form,
    [ref]) and a JSON object in a string ([sdk]: "Extra headers as JSON string"; a Plivo-compatible
    carrier sends "{}"). An item without "=" is skipped, not fatal: the gateway checks the parameter it
    needs and refuses a call without it, with a better reason than a close code.
    """
    if value is None:
        return ()
    if type(value) is dict:
        pairs = value
    elif type(value) is str:
        text = value.strip()
        if not text.startswith("{"):
            found = []
            for item in _EXTRA_HEADER_SEPARATORS.split(text):
                key, separator, item_value = item.partition("=")
                if separator and key.strip():
                    found.append((key.strip(), item_value.strip()))
            return tuple(found)
        try:
            pairs = orjson.loads(text)  # starts with "{": an object, or an error
        except orjson.JSONDecodeError:
            raise malformed("extra_headers is not a JSON object") from None
    else:
        raise malformed("extra_headers is not a string")
    if not all(type(item_value) is str for item_value in pairs.values()):
        raise malformed("extra_headers value is not a string")
    return tuple(pairs.items())


# --- the protocol --------------------------------------------------------------------------------------


class PlivoStreamProtocol(ClosesOnViolation):
    """One Plivo stream's inbound state machine. Feed it every WebSocket message; it returns events."""

    _CLOSED = State.CLOSED

    def __init__(self) -> None:
        self.state = State.AWAITING_START
        self.stream_id: str | None = None
        self.call_id: str | None = None
        self.account_id: str | None = None
        self.content_type: str | None = None  # audio/x-mulaw or audio/x-l16, from start.mediaFormat
        self.encoding: str | None = None  # events.ENCODING_*
        self.sample_rate_hz: int | None = None
        self.last_sequence_number: int | None = None  # the highest seen
        self.violation: ProtocolViolation | None = None  # the one that closed us, if any
        self._bytes_per_sample = 1
        self._messages = 0
        self._media_frames = 0
        self._media_payload_bytes = 0
        self._checkpoints_echoed = 0
        self._clears_confirmed = 0
        self._dtmf = 0
        self._play_failures = 0
        self._carrier_errors = 0
        self._sequence_gaps = 0
        self._sequence_reordered = 0
        self._violations = 0

    # -- input --------------------------------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> list[CarrierEvent]:
        """Parse one text message (``str``, or its UTF-8 ``bytes``). Returns [] once closed, and [] for the
        tolerated ``playFailed`` / ``error`` messages (counted in :meth:`statistics`)."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        try:
            event = self._receive(data)
        except Violation as violation:
            return [self._close(violation.close_code, violation.reason)]
        return [] if event is None else [event]

    def receive_binary(self, data: bytes) -> list[CarrierEvent]:
        """Plivo never sends binary frames [ref]: any one is a 1003 violation."""
        if self.state is State.CLOSED:
            return []
        self._messages += 1
        return [self._close(CloseCode.UNSUPPORTED_DATA, "binary frame")]

    def deadline_violation(self) -> ProtocolViolation:
        """The shell's start timer fired: close the protocol and return the violation to close with.

        The shell arms the timer (``timing.START_DEADLINE_MS``) when the socket opens and cancels it on
        ``StreamStarted``; it calls this only while ``state`` is still AWAITING_START.
        """
        return self._close(CloseCode.POLICY_VIOLATION, f"no start within {START_DEADLINE_MS // 1000} s")

    # -- introspection ------------------------------------------------------------------------------

    def statistics(self) -> PlivoStreamStatistics:
        return PlivoStreamStatistics(
            messages_received=self._messages,
            media_frames=self._media_frames,
            media_payload_bytes=self._media_payload_bytes,
            checkpoints_echoed=self._checkpoints_echoed,
            clears_confirmed=self._clears_confirmed,
            dtmf_received=self._dtmf,
            play_failures=self._play_failures,
            carrier_errors=self._carrier_errors,
            sequence_gaps=self._sequence_gaps,
            sequence_reordered=self._sequence_reordered,
            violations=self._violations,
        )

    # -- internals ----------------------------------------------------------------------------------

    def _receive(self, data: str | bytes) -> CarrierEvent | None:
        message, event = load_event(data)
        following = next_state(_TRANSITIONS, _KNOWN_EVENTS, self.state, event, State.STOPPED)
        parsed = _PARSERS[event](self, message)
        # Only a fully valid message moves the state: a violation above leaves it for _close.
        self.state = following
        return parsed

    def _track_sequence(self, sequence_number: int) -> int:
        last = self.last_sequence_number or 0  # set by start; this runs only after it
        # Not a violation: the consumer decides what a gap means; [ref] only says "increments".
        if sequence_number > last + 1:
            self._sequence_gaps += 1
        elif sequence_number <= last:
            self._sequence_reordered += 1
            return sequence_number
        self.last_sequence_number = sequence_number
        return sequence_number

    def _optional_sequence(self, message: dict) -> int:
        """``sequenceNumber`` where a source shows the message without one: 0 when absent."""
        sequence_number = read_optional_counter(message, "sequenceNumber")
        return 0 if sequence_number is None else self._track_sequence(sequence_number)

    def _check_stream_id(self, message: dict, required: bool) -> None:
        if not required and "streamId" not in message:
            return
        if read_string(message, "streamId") != self.stream_id:
            raise Violation(CloseCode.POLICY_VIOLATION, "wrong streamId")

    def _parse_start(self, message: dict) -> StreamStarted:
        sequence_number = read_counter(message, "sequenceNumber")
        start = read_object(message, "start")
        stream_id = _safe_id(start, "streamId")
        call_id = read_string(start, "callId")
        if not 0 < len(call_id) <= _MAX_ID_CHARS:
            raise malformed("callId is not a usable id")
        # accountId: listed by [ref] and [sdk]; a Plivo-compatible carrier sends another key, so absent is "".
        account_id = "" if "accountId" not in start else read_string(start, "accountId")

        # A bidirectional stream carries the caller's track only: audioTrack outbound/both is not allowed
        # with bidirectional="true" [ref]. Absent (Plivo's CLI tester omits it) reads as ["inbound"].
        if "tracks" in start and start["tracks"] != [_INBOUND_TRACK]:
            raise malformed("tracks is not [inbound]")

        media_format = read_object(start, "mediaFormat")
        content_type = read_string(media_format, "encoding")
        sample_rate_hz = read_counter(media_format, "sampleRate")
        encoding = _FORMATS.get((content_type, sample_rate_hz))
        if encoding is None:
            raise malformed("media format is not mu-law 8 kHz or L16 8/16 kHz")
        custom_parameters = _extra_headers(message.get("extra_headers"))

        self.stream_id = stream_id
        self.call_id = call_id
        self.account_id = account_id
        self.content_type = content_type
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        self._bytes_per_sample = _BYTES_PER_SAMPLE[content_type]
        self.last_sequence_number = sequence_number
        return StreamStarted(
            sequence_number=sequence_number,
            call_id=call_id,
            stream_id=stream_id,
            account_id=account_id,
            custom_parameters=custom_parameters,
            encoding=encoding,
            sample_rate_hz=sample_rate_hz,
            channels=1,  # Plivo streams are mono [ref]
        )

    def _parse_media(self, message: dict) -> CallerAudio:
        # The hot path (about 50 per second per call: ~20 ms of audio per message [ref]). [sdk] requires
        # sequenceNumber, streamId and media.{track, timestamp, chunk, payload}; track and chunk carry
        # nothing we use, so they are checked only when present.
        self._check_stream_id(message, required=True)
        media = read_object(message, "media")
        if "track" in media and media["track"] != _INBOUND_TRACK:
            raise malformed("media track is not inbound")
        if "chunk" in media:
            read_counter(media, "chunk")
        timestamp_ms = read_counter(media, "timestamp")  # [sdk]: a string of ms since the stream started
        payload = decode_base64(read_string(media, "payload"))
        # No frame size is enforced: [ref] says "about 20 ms"; only whole samples are required.
        if not payload or len(payload) % self._bytes_per_sample:
            raise malformed("payload is empty or not whole samples")
        sequence_number = self._track_sequence(read_counter(message, "sequenceNumber"))
        self._media_frames += 1
        self._media_payload_bytes += len(payload)
        return CallerAudio(sequence_number=sequence_number, timestamp_ms=timestamp_ms, payload=payload)

    def _parse_dtmf(self, message: dict) -> Dtmf:
        self._check_stream_id(message, required=False)
        digit = read_string(read_object(message, "dtmf"), "digit")
        if digit not in _DTMF_DIGITS:  # also rejects "" and multi-character strings
            raise malformed("digit is not one DTMF key")
        sequence_number = self._optional_sequence(message)
        self._dtmf += 1
        return Dtmf(sequence_number=sequence_number, digit=digit)

    def _parse_played_stream(self, message: dict) -> MarkEcho:
        # The echo of our `checkpoint` [ref]: "only emitted if the preceding events were played
        # successfully". A Plivo-compatible carrier sends it without streamId, so streamId is optional.
        self._check_stream_id(message, required=False)
        name = read_string(message, "name")
        sequence_number = self._optional_sequence(message)
        self._checkpoints_echoed += 1
        return MarkEcho(sequence_number=sequence_number, name=name)

    def _parse_cleared_audio(self, message: dict) -> Cleared:
        self._check_stream_id(message, required=False)
        sequence_number = self._optional_sequence(message)
        self._clears_confirmed += 1
        return Cleared(sequence_number=sequence_number)

    def _parse_play_failed(self, message: dict) -> None:
        self._check_stream_id(message, required=False)
        self._optional_sequence(message)
        self._play_failures += 1
        return None

    def _parse_error(self, message: dict) -> None:
        self._check_stream_id(message, required=False)
        self._optional_sequence(message)
        self._carrier_errors += 1
        return None

    def _parse_stop(self, message: dict) -> StreamStopped:
        self._check_stream_id(message, required=False)
        sequence_number = self._optional_sequence(message)
        return StreamStopped(sequence_number=sequence_number, reason="stop")


# --- outbound ------------------------------------------------------------------------------------------

# The fixed heads of the three messages we send [ref], the one source of their bytes: the encoder joins
# them around a stream's id, the pacer copies media_prefix/media_suffix into shared memory, and the gateway
# tells our messages apart by their heads (no head is a prefix of another).
#
# playAudio carries streamId too: [ref]'s example and [sdk] leave it out, pipecat's serializer (in
# production use on Plivo) sends it, and a Plivo-compatible carrier requires it. Unknown keys are ignored
# by Plivo (pipecat works), so sending it serves both.
PLAY_AUDIO_HEAD = b'{"event":"playAudio","streamId":"'
CHECKPOINT_HEAD = b'{"event":"checkpoint","streamId":"'
CLEAR_AUDIO_HEAD = b'{"event":"clearAudio","streamId":"'
_PLAY_AUDIO_TAIL = b'"}}'
_CHECKPOINT_TAIL = b"}"


# Each event's parser, a plain function of (protocol, message): a dict of bound methods in every protocol
# would tie it into a reference cycle that only the cyclic collector frees (see voicecore/carriers/twilio/stream.py).
_PARSERS = {
    "start": PlivoStreamProtocol._parse_start,
    "media": PlivoStreamProtocol._parse_media,
    "dtmf": PlivoStreamProtocol._parse_dtmf,
    "playedStream": PlivoStreamProtocol._parse_played_stream,
    "clearedAudio": PlivoStreamProtocol._parse_cleared_audio,
    "playFailed": PlivoStreamProtocol._parse_play_failed,
    "error": PlivoStreamProtocol._parse_error,
    "stop": PlivoStreamProtocol._parse_stop,
}


def _check_template_safe(stream_id: object) -> bytes:
    if not isinstance(stream_id, str) or not _SAFE_ID.fullmatch(stream_id):
        raise ValueError("stream_id must be 1-128 characters of A-Z a-z 0-9 _ . : -")
    return stream_id.encode("ascii")


def _check_format(content_type: object, sample_rate_hz: object) -> None:
    if (content_type, sample_rate_hz) not in _FORMATS or type(sample_rate_hz) is not int:
        raise ValueError("content_type/sample_rate_hz must be audio/x-mulaw 8000 or audio/x-l16 8000/16000")


class PlivoOutboundEncoder:
    """Exact wire messages we send on one Plivo stream [ref], as :class:`Outbound` text frames.

    ``content_type`` is the bare media type (no ";rate=": ``playAudio.media.contentType`` takes
    ``audio/x-mulaw`` or ``audio/x-l16`` and the rate goes in ``sampleRate`` [ref]); it must match what the
    stream's ``start.mediaFormat`` announced. ``media_prefix`` + base64 + ``media_suffix`` is a complete
    ``playAudio`` message; the pacer builds it in shared memory that way.
    """

    __slots__ = ("stream_id", "content_type", "sample_rate_hz", "media_prefix", "media_suffix", "mark_prefix",
                 "_bytes_per_sample", "_clear")

    def __init__(self, stream_id: str, content_type: str = CONTENT_TYPE_MULAW, sample_rate_hz: int = 8000) -> None:
        stream_id_bytes = _check_template_safe(stream_id)
        _check_format(content_type, sample_rate_hz)
        self.stream_id = stream_id
        self.content_type = content_type
        self.sample_rate_hz = sample_rate_hz
        self.media_prefix: bytes = (
            PLAY_AUDIO_HEAD + stream_id_bytes
            + b'","media":{"contentType":"' + content_type.encode("ascii")
            + b'","sampleRate":' + str(sample_rate_hz).encode("ascii") + b',"payload":"'
        )
        self.media_suffix: bytes = _PLAY_AUDIO_TAIL
        self.mark_prefix: bytes = CHECKPOINT_HEAD + stream_id_bytes + b'","name":'  # + JSON string + "}"
        self._bytes_per_sample = _BYTES_PER_SAMPLE[content_type]
        self._clear = Outbound(CLEAR_AUDIO_HEAD + stream_id_bytes + b'"}')

    def media(self, payload: bytes) -> Outbound:
        """Fast path: raw audio in the stream's format (the pacer sends 20 ms frames) as one ``playAudio``.
        [ref] asks for at most 16 KB of base64 per message; that is the caller's chunking."""
        if not payload or len(payload) % self._bytes_per_sample:
            raise ValueError("payload must be non-empty whole samples")
        return Outbound(self.media_prefix + binascii.b2a_base64(payload, newline=False) + self.media_suffix)

    def mark(self, name: str) -> Outbound:
        """A ``checkpoint``; Plivo answers ``playedStream`` with ``name`` once the audio before it has
        played [ref] (never for audio a ``clearAudio`` threw away: see :class:`CheckpointLead`)."""
        if not isinstance(name, str) or not name:
            raise ValueError("checkpoint name must be a non-empty str")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: escaped JSON that strict parsers refuse
            raise ValueError("checkpoint name must be valid Unicode") from None
        return Outbound(self.mark_prefix + json.dumps(name, ensure_ascii=True).encode("ascii") + _CHECKPOINT_TAIL)

    def clear(self) -> Outbound:
        """A ``clearAudio``: Plivo drops its buffered audio and answers ``clearedAudio`` [ref]."""
        return self._clear

    def wire_templates(self) -> WireTemplates:
        """How the pacer writes this stream's messages (voicecore/carriers/wire.py): for a mu-law 8 kHz
        stream the final text, byte for byte :meth:`media`, :meth:`mark` (of our mark names, which need no
        JSON escaping) and :meth:`clear`; for L16 raw entries, which the gateway's carrier edge resamples and
        finishes (the pacer's frames are mu-law at 8 kHz)."""
        if (self.content_type, self.sample_rate_hz) != (CONTENT_TYPE_MULAW, 8000):
            return RAW
        return WireTemplates(media_prefix=self.media_prefix, media_suffix=self.media_suffix,
                             mark_prefix=self.mark_prefix + b'"', mark_suffix=b'"' + _CHECKPOINT_TAIL,
                             clear=self._clear.data)


def wire_templates(stream_id: str, content_type: str = CONTENT_TYPE_MULAW, sample_rate_hz: int = 8000) -> WireTemplates:
    """The wire templates of one Plivo stream (:meth:`PlivoOutboundEncoder.wire_templates`)."""
    return PlivoOutboundEncoder(stream_id, content_type, sample_rate_hz).wire_templates()


# --- bounded lead by checkpoints ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointLeadStatistics:
    frames_sent: int
    frames_played: int  # confirmed by echoes
    frames_discarded: int  # sent before a clear and never confirmed played
    checkpoints_sent: int
    echoes_matched: int
    echoes_stale: int  # a checkpoint sent before a clear: its echo raced the clear, or its audio was dropped
    echoes_unmatched: int  # a name not pending: never sent, echoed already, or passed by a later echo
    clears_sent: int
    clears_confirmed: int


class CheckpointLead:
    """How much of the audio we sent the carrier has not played yet, known only from checkpoint echoes.

    Plivo buffers whatever we send (40-60 s of audio [ref]) and plays it in order, so a lead measured in
    time, as the Twilio pacer keeps (``DEFAULT_LEAD_MS``), says nothing about how deep that buffer is after
    a burst or a stall. This bounds it by what the carrier confirmed instead: the pacer reports, in wire
    order, the frames it sends (:meth:`frames_sent`), each checkpoint with the number of frames sent before
    it (:meth:`checkpoint_sent`), and each clear (:meth:`clear_sent`); the echoes (``playedStream`` ->
    :class:`MarkEcho`) advance the played position (:meth:`checkpoint_echoed`), and so does ``clearedAudio``
    (-> :class:`Cleared`, :meth:`clear_confirmed`). :meth:`may_send` tells whether more frames keep the
    unplayed audio within a bound; if the pacer sends only when it says yes, :meth:`unplayed_frames` never
    exceeds that bound. A checkpoint nobody echoes simply holds the count up: the bound is conservative.

    Clears (docs/explanation/protocols.md#a3, and what differs for Plivo): a mark echo after a clear means
    "discarded", not "played". Plivo goes further and never echoes a checkpoint whose audio it dropped [ref];
    a Plivo-compatible carrier's docs say so outright. So :meth:`clear_sent` resets the count (the audio sent
    before it is played or thrown away once Plivo reads the clear; WebSocket order puts everything sent after
    it into an emptied buffer) and forgets the pending checkpoints. An echo of one of those that still arrives
    (Plivo played it before it read the clear) is stale: Plivo writes its messages in order, so until
    ``clearedAudio`` comes back, a name sent before the clear is stale. A name that was pending
    both before and after the clear stays stale until then (the safe side: unplayed stays high), and an
    echo of a checkpoint sent after the clear shows the clear was read even if ``clearedAudio`` is lost.

    Positions count frames since the stream started; the pacer's frame is 20 ms (``timing.FRAME_MS``).
    Reporting out of order (a checkpoint before frames not yet reported, positions going back) is our
    misuse and raises ``ValueError``.
    """

    __slots__ = ("_sent", "_played", "_discarded", "_pending", "_stale_names", "_clears_outstanding",
                 "_checkpoints_sent", "_echoes_matched", "_echoes_stale", "_echoes_unmatched", "_clears_sent",
                 "_clears_confirmed", "_confirmed_played")

    def __init__(self) -> None:
        self._sent = 0  # frames sent since the stream started
        self._played = 0  # the position known played, or reset by a clear
        self._confirmed_played = 0  # frames confirmed by echoes (statistics)
        self._discarded = 0
        self._pending: deque[tuple[str, int]] = deque()  # checkpoints sent since the last clear, in order
        self._stale_names: dict[str, int] = {}  # names a clear dropped, until clearedAudio: name -> count
        self._clears_outstanding = 0
        self._checkpoints_sent = 0
        self._echoes_matched = 0
        self._echoes_stale = 0
        self._echoes_unmatched = 0
        self._clears_sent = 0
        self._clears_confirmed = 0

    # -- what the pacer sent -------------------------------------------------------------------------

    def frames_sent(self, frames: int) -> None:
        if type(frames) is not int or frames < 0:
            raise ValueError("frames must be an int >= 0")
        self._sent += frames

    def checkpoint_sent(self, name: str, frames_sent_before: int) -> None:
        """A checkpoint went out behind ``frames_sent_before`` frames (a stream position)."""
        if not isinstance(name, str) or not name:
            raise ValueError("checkpoint name must be a non-empty str")
        floor = self._pending[-1][1] if self._pending else self._played
        if type(frames_sent_before) is not int or not floor <= frames_sent_before <= self._sent:
            raise ValueError("frames_sent_before must lie between the last checkpoint (or clear) and frames sent")
        self._pending.append((name, frames_sent_before))
        self._checkpoints_sent += 1

    def clear_sent(self) -> None:
        for name, _ in self._pending:
            self._stale_names[name] = self._stale_names.get(name, 0) + 1
        self._pending.clear()
        self._discarded += self._sent - self._played
        self._played = self._sent
        self._clears_outstanding += 1
        self._clears_sent += 1

    # -- what the carrier answered ----------------------------------------------------------------------

    def checkpoint_echoed(self, name: str) -> int:
        """A ``playedStream`` for ``name``: the frames newly confirmed played (0 for a stale or unmatched
        echo). Plivo plays in order, so the checkpoints before it have played too."""
        if self._clears_outstanding and name in self._stale_names:
            self._echoes_stale += 1
            return 0
        index = next((i for i, (pending_name, _) in enumerate(self._pending) if pending_name == name), None)
        if index is None:
            self._echoes_unmatched += 1
            return 0
        if self._clears_outstanding:
            # Only a carrier that read our clear can echo a checkpoint we sent after it.
            self._clears_outstanding = 0
            self._stale_names.clear()
        position = self._pending[index][1]
        for _ in range(index + 1):
            self._pending.popleft()
        newly_played = position - self._played
        self._played = position
        self._confirmed_played += newly_played
        self._echoes_matched += 1
        return newly_played

    def clear_confirmed(self) -> None:
        """A ``clearedAudio``: the carrier read our oldest outstanding clear."""
        self._clears_confirmed += 1
        if self._clears_outstanding:
            self._clears_outstanding -= 1
            if not self._clears_outstanding:
                self._stale_names.clear()

    # -- the bound -------------------------------------------------------------------------------------

    def unplayed_frames(self) -> int:
        """Frames sent since the last clear that no echo has confirmed played (never negative)."""
        return self._sent - self._played

    def may_send(self, frames_more: int, max_unplayed_frames: int) -> bool:
        """Whether sending ``frames_more`` frames now keeps the unplayed audio within ``max_unplayed_frames``."""
        if frames_more < 0 or max_unplayed_frames < 0:
            raise ValueError("frames_more and max_unplayed_frames must be >= 0")
        return self._sent - self._played + frames_more <= max_unplayed_frames

    def pending_checkpoints(self) -> int:
        return len(self._pending)

    def sent_position_frames(self) -> int:
        """Frames sent since the stream started (the position the next checkpoint would name)."""
        return self._sent

    def played_position_frames(self) -> int:
        """The stream position (frames since the stream started) known played or thrown away by a clear:
        ``sent_position_frames() - unplayed_frames()``. A sender that counts its frames from the same start
        (the pacer's WIRE_FRAMES) knows its unplayed backlog from this one number, without a clock."""
        return self._played

    def statistics(self) -> CheckpointLeadStatistics:
        return CheckpointLeadStatistics(
            frames_sent=self._sent,
            frames_played=self._confirmed_played,
            frames_discarded=self._discarded,
            checkpoints_sent=self._checkpoints_sent,
            echoes_matched=self._echoes_matched,
            echoes_stale=self._echoes_stale,
            echoes_unmatched=self._echoes_unmatched,
            clears_sent=self._clears_sent,
            clears_confirmed=self._clears_confirmed,
        )


# --- the carrier's end -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlayAudio:
    """A ``playAudio`` we sent, as Plivo reads it."""

    content_type: str
    sample_rate_hz: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Checkpoint:
    name: str


@dataclass(frozen=True, slots=True)
class ClearAudio:
    pass


@dataclass(frozen=True, slots=True)
class Rejected:
    """What Plivo would refuse: fixed text, never an echo of the message."""

    reason: str


Received = Union[PlayAudio, Checkpoint, ClearAudio, Rejected]


class PlivoCarrierSide:
    """Plivo's end of one stream: builds what Plivo sends, reads and checks what we send, and keeps a
    playout queue so a simulator can echo checkpoints when the audio before them has played.

    Message shapes follow [sdk] (the strictest source: every field it requires is written): counters are
    JSON numbers, ``media.timestamp`` a string of ms since the stream started, ``media.chunk`` a number from
    1. One ``sequenceNumber`` counter runs across all messages, from 1 at ``start`` [ref]. A ``stop`` is
    written as {event, sequenceNumber, streamId} (its shape is not documented; see the module docstring).

    Playout: ``playAudio`` queues audio; ``checkpoint`` queues a marker behind it; :meth:`play` plays
    audio in order and returns a ``playedStream`` for every checkpoint it passes (a checkpoint with nothing
    before it is echoed on the next :meth:`play`, even ``play(0)``); ``clearAudio`` empties the queue and
    drops the pending checkpoints without echoing them [ref]. The simulator answers a :class:`ClearAudio`
    with :meth:`cleared_audio`.
    """

    def __init__(
        self,
        stream_id: str,
        call_id: str,
        account_id: str = "MA0123456789ABCDEF01",
        content_type: str = CONTENT_TYPE_MULAW,
        sample_rate_hz: int = 8000,
        extra_headers: str = "",
    ) -> None:
        _check_template_safe(stream_id)
        _check_format(content_type, sample_rate_hz)
        self.stream_id = stream_id
        self.call_id = call_id
        self.account_id = account_id
        self.content_type = content_type
        self.sample_rate_hz = sample_rate_hz
        self.extra_headers = extra_headers
        self.bytes_per_ms = sample_rate_hz * _BYTES_PER_SAMPLE[content_type] // 1000
        self.sequence_number = 0  # the last one written
        self.chunk = 0
        self.timestamp_ms = 0  # of the next media message
        self.played_bytes = 0
        self.discarded_bytes = 0
        self.checkpoints_dropped = 0
        self._queue: deque[tuple[str, object]] = deque()  # ("audio", bytearray) | ("checkpoint", name)
        self._queued_bytes = 0

    # -- what Plivo sends ------------------------------------------------------------------------------

    def _write(self, message: dict) -> str:
        self.sequence_number += 1
        return json.dumps({"sequenceNumber": self.sequence_number, **message})

    def start(self) -> str:
        return self._write({
            "event": "start",
            "start": {
                "callId": self.call_id,
                "streamId": self.stream_id,
                "accountId": self.account_id,
                "tracks": [_INBOUND_TRACK],
                "mediaFormat": {"encoding": self.content_type, "sampleRate": self.sample_rate_hz},
            },
            "extra_headers": self.extra_headers,
        })

    def media(self, payload: bytes) -> str:
        """One ``media`` message of caller audio (the stream's format; about 20 ms each [ref])."""
        self.chunk += 1
        message = self._write({
            "event": "media",
            "streamId": self.stream_id,
            "media": {
                "track": _INBOUND_TRACK,
                "timestamp": str(self.timestamp_ms),
                "chunk": self.chunk,
                "payload": base64.b64encode(payload).decode("ascii"),
            },
        })
        self.timestamp_ms += len(payload) // self.bytes_per_ms
        return message

    def dtmf(self, digit: str) -> str:
        return self._write({
            "event": "dtmf",
            "streamId": self.stream_id,
            "dtmf": {"track": _INBOUND_TRACK, "digit": digit, "timestamp": str(self.timestamp_ms)},
        })

    def played_stream(self, name: str) -> str:
        return self._write({"event": "playedStream", "streamId": self.stream_id, "name": name})

    def cleared_audio(self) -> str:
        return self._write({"event": "clearedAudio", "streamId": self.stream_id})

    def stop(self) -> str:
        return self._write({"event": "stop", "streamId": self.stream_id})

    # -- what we send, as Plivo reads it ---------------------------------------------------------------

    def receive_text(self, data: str | bytes) -> Received:
        """Check one message we sent and apply it to the playout queue. Never raises on bad input."""
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return Rejected("not a JSON value")
        if type(message) is not dict:
            return Rejected("not a JSON object")
        event = message.get("event")
        if event == "playAudio":
            return self._receive_play_audio(message)
        if event == "checkpoint":
            # [ref]: event, streamId, name are all required.
            if message.get("streamId") != self.stream_id:
                return Rejected("wrong or missing streamId")
            name = message.get("name")
            if type(name) is not str or not name:
                return Rejected("name is not a non-empty string")
            self._queue.append(("checkpoint", name))
            return Checkpoint(name)
        if event == "clearAudio":
            if message.get("streamId") != self.stream_id:
                return Rejected("wrong or missing streamId")
            for kind, item in self._queue:
                if kind == "checkpoint":
                    self.checkpoints_dropped += 1
            self.discarded_bytes += self._queued_bytes
            self._queue.clear()
            self._queued_bytes = 0
            return ClearAudio()
        return Rejected("unknown event")

    def receive_binary(self, data: bytes) -> Rejected:
        return Rejected("binary frame")

    def _receive_play_audio(self, message: dict) -> Received:
        if "streamId" in message and message["streamId"] != self.stream_id:
            return Rejected("wrong streamId")
        media = message.get("media")
        if type(media) is not dict:
            return Rejected("media is not an object")
        content_type = media.get("contentType")
        sample_rate_hz = media.get("sampleRate")
        # [ref]: the bare type ("audio/x-mulaw", no ";rate=") and a sampleRate matching the stream.
        expected = (self.content_type, self.sample_rate_hz)
        if type(sample_rate_hz) is not int or (content_type, sample_rate_hz) != expected:
            return Rejected("contentType/sampleRate differ from the stream's")
        encoded = media.get("payload")
        if type(encoded) is not str:
            return Rejected("payload is not a string")
        try:
            payload = binascii.a2b_base64(encoded, strict_mode=True)
        except ValueError:
            return Rejected("payload is not base64")
        if not payload or len(payload) % _BYTES_PER_SAMPLE[self.content_type]:
            return Rejected("payload is empty or not whole samples")
        self._queue.append(("audio", bytearray(payload)))
        self._queued_bytes += len(payload)
        return PlayAudio(content_type=content_type, sample_rate_hz=sample_rate_hz, payload=payload)

    # -- playout ---------------------------------------------------------------------------------------

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def play(self, duration_ms: int) -> list[str]:
        """Play ``duration_ms`` of queued audio (silence once it runs dry) and return the ``playedStream``
        messages for every checkpoint reached."""
        if duration_ms < 0:
            raise ValueError("duration_ms must be >= 0")
        budget = duration_ms * self.bytes_per_ms
        echoes = []
        while self._queue:
            kind, item = self._queue[0]
            if kind == "checkpoint":
                self._queue.popleft()
                echoes.append(self.played_stream(item))  # type: ignore[arg-type]
                continue
            if not budget:
                break
            audio: bytearray = item  # type: ignore[assignment]
            taken = min(budget, len(audio))
            del audio[:taken]
            budget -= taken
            self._queued_bytes -= taken
            self.played_bytes += taken
            if not audio:
                self._queue.popleft()
        return echoes


# --- answer XML --------------------------------------------------------------------------------------------

MAX_STREAM_URL_CHARS = 2048  # [ref]: a stream URL of at most 2048 characters
MAX_EXTRA_HEADERS_BYTES = 512  # [ref]: extraHeaders "Max length: 512 bytes"
# [ref] allows only [A-Za-z0-9] in extraHeaders; "_" and "-" are seen to work (and our session tokens
# are URL-safe base64). Anything else (",", "=", ";", quotes, spaces) would break the k=v,k=v format or
# be refused by Plivo, so it is our misuse, refused here.
_EXTRA_HEADER_ITEM = re.compile(r"[A-Za-z0-9_-]+")
# XML 1.0 forbids most control characters outright; a value holding one cannot be written at all.
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _check_xml_url(url: object, schemes: tuple[str, ...], what: str) -> str:
    if not isinstance(url, str):
        raise ValueError(f"{what} must be a str")
    if len(url) > MAX_STREAM_URL_CHARS or _XML_FORBIDDEN.search(url) or any(char.isspace() for char in url):
        raise ValueError(f"{what} is too long or holds whitespace or characters XML cannot carry")
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"{what} must be an absolute {' or '.join(schemes)} URL")
    return url


def stream_xml(
    stream_url: str,
    extra_headers: Mapping[str, str],
    content_type: str = "audio/x-mulaw;rate=8000",
    status_callback_url: str | None = None,
    redirect_url: str | None = None,
) -> str:
    """The answer XML for a Plivo call: one bidirectional stream to ``stream_url`` [ref].

    ``bidirectional="true"`` (else the caller hears nothing from us), ``keepCallAlive="true"`` (else
    Plivo runs the next element at once and, with none, ends the call within seconds: 4010), and an
    explicit ``contentType`` (Plivo's default is L16, see :data:`STREAM_CONTENT_TYPES`). ``extra_headers``
    arrive in ``start.extra_headers`` (:attr:`StreamStarted.custom_parameters`); Plivo logs them, so they
    carry a single-use token, never a secret. Unlike Twilio, the URL may carry a query string. Real Plivo
    needs ``wss://``; ``ws://`` is accepted for the local carrier simulator. Built with ElementTree: every
    value is escaped, none is concatenated into the markup.

    ``redirect_url``: a ``<Redirect method="POST">`` after the stream. With ``keepCallAlive="true"`` the
    elements after ``<Stream>`` run only once the stream disconnects [ref], and ``<Redirect>`` asks its URL
    for the call's next XML (a POST signed like the answer webhook, with ``CallUUID``, ``CallStatus`` and
    ``Event=Redirect`` [redirect]): the re-attach step (voicecore/reattach.py).
    """
    _check_xml_url(stream_url, ("wss", "ws"), "stream_url")
    if content_type not in STREAM_CONTENT_TYPES:
        raise ValueError(f"content_type must be one of {sorted(STREAM_CONTENT_TYPES)}")
    attributes = {"bidirectional": "true", "keepCallAlive": "true", "contentType": content_type}
    if not isinstance(extra_headers, Mapping):
        raise ValueError("extra_headers must be a mapping of str to str")
    if extra_headers:
        items = []
        for key, value in extra_headers.items():
            if not (isinstance(key, str) and isinstance(value, str)
                    and _EXTRA_HEADER_ITEM.fullmatch(key) and _EXTRA_HEADER_ITEM.fullmatch(value)):
                raise ValueError("extra_headers names and values must be non-empty A-Z a-z 0-9 _ -")
            items.append(f"{key}={value}")
        joined = ",".join(items)  # [ref]: "test1=12,test2=123"
        if len(joined) > MAX_EXTRA_HEADERS_BYTES:
            raise ValueError("extra_headers exceed 512 bytes")
        attributes["extraHeaders"] = joined
    if status_callback_url is not None:
        attributes["statusCallbackUrl"] = _check_xml_url(status_callback_url, ("https", "http"), "status_callback_url")
        attributes["statusCallbackMethod"] = "POST"
    response = ElementTree.Element("Response")
    stream = ElementTree.SubElement(response, "Stream", attributes)
    stream.text = stream_url
    if redirect_url is not None:
        redirect = ElementTree.SubElement(response, "Redirect", {"method": "POST"})
        redirect.text = _check_xml_url(redirect_url, ("https", "http"), "redirect_url")
    return ElementTree.tostring(response, encoding="unicode")


def hangup_xml() -> str:
    """The XML that ends a Plivo call (``<Hangup/>``): the re-attach step's answer for a call that is over."""
    return "<Response><Hangup/></Response>"


# --- request signature V3 -------------------------------------------------------------------------------

SIGNATURE_V3_HEADER = "X-Plivo-Signature-V3"
SIGNATURE_V3_NONCE_HEADER = "X-Plivo-Signature-V3-Nonce"
# Signed the same way with the main account's token (V3 uses the (sub)account's that owns the number).
SIGNATURE_MA_V3_HEADER = "X-Plivo-Signature-Ma-V3"

ParamValue = Union[str, Sequence[str]]


def _sorted_query(params: Mapping[str, ParamValue]) -> str:
    parts = []
    for key in sorted(params):
        value = params[key]
        if isinstance(value, str):
            parts.append(f"{key}={value}")
        else:
            parts.append("&".join(f"{key}={item}" for item in sorted(value)))
    return "&".join(parts)


def _sorted_params(params: Mapping[str, ParamValue]) -> str:
    parts = []
    for key in sorted(params):
        value = params[key]
        if isinstance(value, str):
            parts.append(f"{key}{value}")
        else:
            parts.append("".join(f"{key}{item}" for item in sorted(value)))
    return "".join(parts)


def _signed_text(url: str, params: Mapping[str, ParamValue] | None, method: str) -> str:
    """The text Plivo signs, as plivo-python's construct_get_url / construct_post_url build it [sdk]:

    - the URL without query or fragment (and without ";params", which urlparse splits off);
    - GET: "?" + every query and callback parameter, percent-decoded, sorted, as k=v joined by "&";
    - POST with form parameters: "?" + the sorted query (even when empty), "." after a non-empty query,
      then the form parameters sorted, each key and value run together with no separator;
    - POST without: the sorted query only, like GET.
    """
    parsed = urlparse(url)
    base = urlunparse((parsed.scheme, parsed.netloc, parsed.path, "", "", ""))
    query: dict[str, ParamValue] = dict(parse_qs(parsed.query, keep_blank_values=True))
    if method == "GET":
        merged: dict[str, ParamValue] = dict(params or {})
        merged.update(query)  # [sdk]: params.update(query map): the URL's own parameters win
        sorted_query = _sorted_query(merged)
        return f"{base}?{sorted_query}" if sorted_query else base
    sorted_query = _sorted_query(query)
    if not params:
        return f"{base}?{sorted_query}" if sorted_query else base
    return f"{base}?{sorted_query}{'.' if sorted_query else ''}{_sorted_params(params)}"


def compute_signature_v3(
    auth_token: str, url: str, nonce: str, params: Mapping[str, ParamValue] | None = None, method: str = "POST"
) -> str:
    """``X-Plivo-Signature-V3`` for a request to ``url``: base64(HMAC-SHA256(auth_token, signed text + "."
    + nonce)), UTF-8 throughout, exactly as plivo-python 4.63's validate_v3_signature computes it [sdk].

    ``params`` are the request's form parameters (POST) or callback parameters (GET); a value may be a
    list for a repeated key. ``nonce`` is the ``X-Plivo-Signature-V3-Nonce`` header.
    """
    method = method.upper()
    if method not in ("GET", "POST"):
        raise ValueError("method must be GET or POST")
    text = f"{_signed_text(url, params, method)}.{nonce}"
    digest = hmac.new(auth_token.encode("utf-8"), text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def validate_signature_v3(
    auth_token: str,
    url: str,
    nonce: str | None,
    signature_header: str | None,
    params: Mapping[str, ParamValue] | None = None,
    method: str = "POST",
) -> bool:
    """True if ``signature_header`` holds a valid V3 signature of this request.

    With several active auth tokens Plivo sends a comma-separated list [sdk]: any member may match. Every
    member is compared in constant time (``hmac.compare_digest``), none skipped on an early match. A
    missing nonce or header is simply invalid. ``url`` must be the URL Plivo called (its public scheme, host,
    port, path and query), not one rewritten by a proxy.
    """
    if not isinstance(nonce, str) or not nonce or not isinstance(signature_header, str) or not signature_header:
        return False
    expected = compute_signature_v3(auth_token, url, nonce, params, method).encode("ascii")
    valid = False
    for candidate in signature_header.split(","):
        try:
            candidate_bytes = candidate.strip().encode("ascii")
        except UnicodeEncodeError:
            continue
        valid |= hmac.compare_digest(expected, candidate_bytes)
    return valid


def upgrade_signature_url(stream_url: str) -> str:
    """The URL the WebSocket upgrade's V3 signature covers (validate it as a GET): ``wss://`` or ``ws://``
    replaced by ``http://``, port, path and query kept as dialled. Observed on live calls (only that form
    matched, not ``wss://`` or ``https://``), and what plivo-stream-sdk's handler does [sdk]. That handler
    also appends "/websocket" to the URL it validates; unverified, so not done here."""
    for scheme in ("wss://", "ws://"):
        if stream_url.startswith(scheme):
            return "http://" + stream_url[len(scheme):]
    raise ValueError("stream_url must start with wss:// or ws://")



def sign_upgrade(auth_token: str, stream_url: str, nonce: str) -> str:
    """The ``X-Plivo-Signature-V3`` Plivo puts on its WebSocket upgrade to ``stream_url`` (the URL as the
    ``<Stream>`` element gave it) [guide]: a V3 signature of a GET of :func:`upgrade_signature_url` with no
    parameters. For the simulator and tests; the gateway checks with :func:`validate_upgrade_signature`."""
    return compute_signature_v3(auth_token, upgrade_signature_url(stream_url), nonce, None, "GET")


def validate_upgrade_signature(auth_token: str, stream_url: str, nonce: str | None,
                               signature_header: str | None) -> bool:
    """True when the upgrade's ``X-Plivo-Signature-V3`` (``signature_header``) with its nonce signs a GET of
    ``stream_url``, the URL Plivo dialled (our stream base URL + the request's path and query) [guide].

    What it proves: the peer holds the auth token and meant this URL. What it does not: the signed text has
    no timestamp and no call in it (the nonce is Plivo's, never remembered here), so a captured pair of
    headers can be replayed; the single-use session token in ``start.extra_headers`` ties the stream to one
    call.
    A missing nonce or header is simply invalid, as for a webhook."""
    try:
        signed_url = upgrade_signature_url(stream_url)
    except ValueError:
        return False
    return validate_signature_v3(auth_token, signed_url, nonce, signature_header, None, "GET")
