"""The carrier-neutral events and outbound messages every carrier protocol module produces.

Owns: the shapes the gateway sees from any carrier's media stream (after the carrier module validated
the wire message), the shape of a message we send, and the interfaces a carrier module implements.
Must not know: any carrier's field names, sockets, clocks or rings.

Audio in events stays in the carrier's own encoding (``StreamStarted.encoding`` / ``sample_rate_hz``);
turning it into the arena's 160-byte mu-law frames is :mod:`voicecore.carriers.codec`'s job, once, at
the gateway edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Union

__all__ = [
    "CallerAudio",
    "Cleared",
    "ENCODING_L16",
    "ENCODING_PCMA",
    "ENCODING_PCMU",
    "CarrierEncoder",
    "CarrierEvent",
    "CarrierStream",
    "Dtmf",
    "MarkEcho",
    "Outbound",
    "ProtocolViolation",
    "StreamConnected",
    "StreamStarted",
    "StreamStopped",
]

# Encodings, named as the model side names them (OpenAI GA: audio/pcmu, audio/pcma, audio/pcm).
ENCODING_PCMU = "pcmu"  # G.711 mu-law
ENCODING_PCMA = "pcma"  # G.711 A-law
ENCODING_L16 = "l16"  # 16-bit signed linear PCM, little-endian on every carrier here


@dataclass(frozen=True, slots=True)
class StreamConnected:
    """The carrier's first message, before the stream's metadata (Twilio/Telnyx/Exotel ``connected``,
    Vonage ``websocket:connected``). ``fields`` keeps what it carried that the gateway may want (Vonage
    echoes the NCCO's headers here), as sorted (name, value) string pairs."""

    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class StreamStarted:
    """The stream's metadata: what the gateway needs to admit the call and claim a slot.

    ``stream_id`` is the id our outbound messages must carry ("" for a carrier whose messages carry
    none). ``custom_parameters`` holds the answer document's parameters / headers in the order sent, as
    a tuple so the event stays hashable."""

    sequence_number: int
    call_id: str
    stream_id: str
    account_id: str
    custom_parameters: tuple[tuple[str, str], ...]
    encoding: str  # ENCODING_*
    sample_rate_hz: int
    channels: int

    def custom_parameter(self, name: str, default: str | None = None) -> str | None:
        for key, value in self.custom_parameters:
            if key == name:
                return value
        return default


@dataclass(frozen=True, slots=True)
class CallerAudio:
    """Caller audio as the carrier sent it (its encoding and rate), in the order the module releases it:
    a carrier that may deliver frames out of order has them put back in order by the module."""

    sequence_number: int
    timestamp_ms: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Dtmf:
    sequence_number: int
    digit: str


@dataclass(frozen=True, slots=True)
class MarkEcho:
    """A mark (Twilio/Telnyx/Exotel ``mark``, Plivo ``playedStream``, Vonage ``websocket:notify``) came
    back: the audio queued before it played, or was thrown away by a clear."""

    sequence_number: int
    name: str


@dataclass(frozen=True, slots=True)
class Cleared:
    """The carrier confirms a clear (Plivo ``clearedAudio``, Vonage ``websocket:cleared``)."""

    sequence_number: int


@dataclass(frozen=True, slots=True)
class StreamStopped:
    sequence_number: int
    reason: str = ""  # short fixed text, never peer data


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The peer broke the protocol; the shell closes the socket with ``close_code``. ``reason`` is short
    fixed text (it goes into the close frame and logs), never an echo of peer data."""

    close_code: int
    reason: str


CarrierEvent = Union[StreamConnected, StreamStarted, CallerAudio, Dtmf, MarkEcho, Cleared, StreamStopped,
                     ProtocolViolation]


@dataclass(frozen=True, slots=True)
class Outbound:
    """One WebSocket message we send: ``binary`` True for a binary frame, else a text frame."""

    data: bytes
    binary: bool = False


class CarrierStream(Protocol):
    """Server side of one media stream, without I/O (the shape of voicecore.carriers.twilio.stream)."""

    def receive_text(self, data: str | bytes) -> list[CarrierEvent]: ...

    def receive_binary(self, data: bytes) -> list[CarrierEvent]: ...

    def deadline_violation(self) -> ProtocolViolation: ...


class CarrierEncoder(Protocol):
    """The exact messages we send on one stream. ``media`` takes the carrier's encoding at its rate."""

    def media(self, payload: bytes) -> Outbound: ...

    def mark(self, name: str) -> Outbound: ...

    def clear(self) -> Outbound: ...
