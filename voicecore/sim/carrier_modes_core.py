"""Sans-I/O carrier modes of the carrier simulator: Telnyx, Plivo, Vonage and Exotel beside Twilio.

Owns, per carrier: the adapter that puts its wire shapes in front of the carrier-neutral measuring core
(voicecore.sim.carrier_core.PlayoutCore), built on that carrier's ``<Carrier>CarrierSide`` (voicecore/carriers/),
and found by it (its descriptor's ``carrier_side``: :func:`adapter_for`); and the simulator's entry points, by
carrier name, to what each carrier's own simulator side answers (``voicecore/carriers/<name>/sim.py``, through
its descriptor: voicecore/carriers/simulator.py): the signed answer webhook it sends, reading its answer document
(TeXML, Plivo XML, NCCO, Exotel's dynamic-URL JSON) into where to stream and what to carry exactly as the carrier
would follow it, the headers of its stream's upgrade, and what follows a stream that ended with the call up. The
simulator's credentials (the matching halves of the stack's secrets) are voicecore/carriers/simulator.py's.

Must not know: sockets, HTTP, asyncio, the clock or randomness (time, ids and nonces come in as
arguments), or how the gateway works inside. The shell is voicecore/sim/carrier.py.

How an adapter works. What the carrier sends (``start``, caller audio, DTMF, mark echoes, clear
acknowledgements, ``stop``) is written by the carrier side's own builders. What the gateway sends is read
by a fast path for the exact bytes the gateway writes (the carrier module's own encoder templates, as the
Twilio adapter's ``receive_fast``) and otherwise by the carrier side's parser. Audio the carrier gets is
turned into the 160-byte 8 kHz mu-law frames the core measures with voicecore.carriers.codec (the same
transcoder the gateway uses, so G.711 mu-law and L16 at 8 kHz come back bit-exact, modulo mu-law's two
zeros; A-law and resampled L16 do not: see voicecore/sim/audio_match.py for how those frames are tied to
the model's responses). Marks (Telnyx/Exotel ``mark``, Plivo ``checkpoint``, Vonage ``notify``) and clears
go to the core, which plays one 20 ms frame per tick, echoes a mark when playout passes it, and measures.
The carrier sides that keep a playout model of their own (Telnyx, Plivo) are used only to read: the
core's playout clock is the one that times echoes, so a second instance of the side reads what we send
and its own queue is never played.

Carrier behaviours the adapters model (docs/explanation/protocols.md#b and each carrier module's sources):

- Telnyx: ``connected`` + ``start`` (the TeXML ``<Parameter>``s in ``custom_parameters``), PCMU or PCMA as
  the TeXML's ``codec`` asks, marks echoed when played and at once when nothing is queued, ``clear``
  returns every queued mark, an ``error`` frame answers a message Telnyx would refuse. Optional jitter:
  a caller frame is now and then sent after the next one (its ``chunk`` and ``sequence_number`` keep the
  true order), the reordering a Telnyx stream documents, to exercise the gateway's reorder window.
- Plivo: ``start`` (the answer XML's ``extraHeaders`` in ``extra_headers``), the XML's ``contentType``,
  ``checkpoint`` echoed as ``playedStream`` when played, ``clearAudio`` answered by ``clearedAudio`` and
  pending checkpoints dropped unechoed. Optional stalls (``playout_stall_ms`` of every
  ``playout_stall_every_ms``): Plivo's buffer plays at real time but may play late (a slow media server,
  jitter in front of it), and whatever we send meanwhile stays in its deep buffer; the core's
  ``metrics.max_queued_frames`` shows how deep it got.
- Vonage: ``websocket:connected`` with the NCCO endpoint's ``content-type`` and its ``headers`` echoed at
  the top level, binary L16 frames of 20 ms both ways, ``notify`` echoed as ``websocket:notify`` with its
  payload when played, ``clear`` answered by ``websocket:cleared`` and pending notifies dropped; no
  ``stop``: the call ends by the socket closing. A socket that ends while the call goes on (the gateway closed it
  or vanished) under a synchronous ``connect`` is followed as its "WebSocket fallback options" say: the
  ``disconnected`` event, signed, to the ``eventUrl``; a new NCCO it answers replaces the call's, no NCCO (or one
  with nothing left to run) ends the call.
- Exotel: ``connected`` + ``start`` (the stream URL's query parameters but ``sample-rate`` in
  ``custom_parameters``; the rate from ``sample-rate``, default 8000), caller audio in ~100 ms ``media``
  messages, our audio in chunks of 100 ms and more, marks echoed when played; a ``clear`` returns the
  pending marks as Twilio's does (Exotel documents no echo rule; voicecore/carriers/exotel/protocol.py settles
  marks the same way).

Bad input from the gateway never raises: it is counted (``metrics.protocol_errors``) with a fixed reason.
Misuse by the harness raises ValueError.
"""

from __future__ import annotations

import abc

import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from voicecore.carriers import registry
from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.codec import EdgeTranscoder, Framer
from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMA, ENCODING_PCMU
from voicecore.carriers.simulator import (CallIdentity, CarrierCredentials, CarrierSimulator, StreamTarget,
                                          WebhookRequest)
from voicecore.sim.carrier_core import DEFAULT_LEAD_FRAMES, PlayoutCore, Utterance
from voicecore.timing import FRAME_BYTES, FRAME_MS, SAMPLE_RATE_HZ
from voicecore.carriers.marks import PLAIN_NAME_BYTES

__all__ = [
    "ADAPTERS",
    "CARRIERS",
    "CallIdentity",
    "CarrierCredentials",
    "ExotelCall",
    "ModeCall",
    "ModeOptions",
    "PlivoCall",
    "StreamTarget",
    "TelnyxCall",
    "VonageCall",
    "WebhookRequest",
    "adapter_for",
    "answer_webhook",
    "continuation_request",
    "parse_answer",
    "parse_continuation",
    "simulator_of",
    "stream_headers",
]

CARRIERS = registry.NAMES  # every carrier the simulator acts as: Twilio by its own core, the others by an adapter
EXOTEL_MEDIA_FRAMES = 5  # Exotel sends caller audio "about every 100 ms" [ws]: five 20 ms frames a message


# ----- each carrier's simulator side, by name ----------------------------------------------------------


def simulator_of(carrier: str) -> CarrierSimulator:
    """``carrier``'s simulator side (its descriptor's); ValueError for a name no carrier package serves."""
    return registry.get(carrier).simulator


def answer_webhook(carrier: str, base_url: str, ids: CallIdentity, credentials: CarrierCredentials, *,
                   now_s: float, nonce: str, answer_method: str = "POST", answer_url: str = "",
                   request_uuid: str = "") -> WebhookRequest:
    """The signed answer webhook ``carrier`` sends to the gateway at ``base_url`` when the call comes in (its
    ``answer_path``), or to ``answer_url``: a call its API placed, answered by the callee, at the answer URL the
    request gave (signed with its query); ``request_uuid``: that request's id (Plivo). ``now_s``: Unix seconds;
    ``nonce``: the carrier's signature nonce or JWT id; ``answer_method``: Vonage's answer_method."""
    simulator = simulator_of(carrier)
    url = answer_url or base_url.rstrip("/") + simulator.answer_path
    return simulator.answer_webhook(url, ids, credentials, now_s=now_s, nonce=nonce, answer_method=answer_method,
                                    request_uuid=request_uuid)


def continuation_request(carrier: str, url: str, ids: CallIdentity, credentials: CarrierCredentials, *,
                         now_s: float, nonce: str, target: StreamTarget | None = None,
                         leg_id: str = "") -> WebhookRequest:
    """The signed request ``carrier`` sends to ``url``, what its answer put after the stream (``target``: the
    stream that ended; ``leg_id``: that stream's leg, where the carrier names it), once the stream ended with the
    call up: Telnyx's and Plivo's ``<Redirect>``, Vonage's ``disconnected`` event."""
    return simulator_of(carrier).continuation_request(url, ids, credentials, now_s=now_s, nonce=nonce, target=target,
                                                      leg_id=leg_id)


def parse_continuation(carrier: str, body: bytes) -> StreamTarget | None:
    """Read the document a continuation answered: the new stream it starts, or None when it starts none (the
    call ends). ValueError: not the carrier's document, or a stream the carrier would refuse."""
    return simulator_of(carrier).parse_continuation(body)


def parse_answer(carrier: str, body: bytes) -> StreamTarget:
    """Read ``carrier``'s answer document. Raises ValueError when it does not start a stream."""
    return simulator_of(carrier).parse_answer(body)


def stream_headers(carrier: str, target: StreamTarget, credentials: CarrierCredentials, *, nonce: str,
                   now_s: float) -> dict[str, str]:
    """The extra headers of the carrier's WebSocket upgrade to ``target.url``: exactly what the carrier puts
    there, no more."""
    return simulator_of(carrier).stream_headers(target, credentials, nonce=nonce, now_s=now_s)


@dataclass(frozen=True, slots=True)
class ModeOptions:
    """How the simulator plays one call, beyond its script: ``play_phase_ms`` and ``keep_audio`` as
    PlayoutCore takes them; the rest is read by the adapter whose carrier it models and ignored by the others:
    ``jitter_probability`` (a carrier that reorders caller frames), ``exotel_encoding`` (what Exotel streams at
    8 kHz), ``playout_stall`` ((stall_ms, every_ms): Plivo's late playout)."""

    play_phase_ms: float | None = None
    keep_audio: bool = True
    jitter_probability: float = 0.0
    exotel_encoding: str = ENCODING_L16
    playout_stall: tuple[int, int] = (0, 0)


# ----- the adapters ------------------------------------------------------------------------------------


class ModeCall(PlayoutCore):
    """What the four adapters share: the outbound audio path into the core (carrier encoding -> mu-law frames,
    ``exact_audio`` telling whether that path is bit-exact) and the interface the shell drives (the Twilio
    adapter's, but stop_messages for its stop_message: opening_messages, tick_send, send_dtmf, receive_fast,
    receive, messages_to_send). Messages are ``str`` (a text frame) or ``bytes`` (a binary frame)."""

    carrier = ""
    carrier_side: type | None = None  # the carrier's own end of its protocol it plays (adapter_for finds it by it)
    BINARY_MESSAGES = False  # some messages it sends are binary frames (Vonage's audio)

    def __init__(self, call_sid: str, caller_audio, lead_frames: int, encoding: str, sample_rate_hz: int, *,
                 play_phase_ms: float | None, keep_audio: bool) -> None:
        super().__init__(caller_audio, lead_frames, play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self.call_sid = call_sid
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        # One transcoder each way, so the caller's and the measured direction keep separate state.
        self._caller_codec = EdgeTranscoder(encoding, sample_rate_hz)
        self._measure_codec = EdgeTranscoder(encoding, sample_rate_hz)
        self._framer = Framer(FRAME_BYTES)
        # mu-law passes untouched and L16 at 8 kHz converts sample by sample: the gateway's frames come back
        # byte for byte (callreport's canonical form). A-law and resampled L16 do not (audio_match.py).
        self.exact_audio = encoding == ENCODING_PCMU or (encoding == ENCODING_L16 and sample_rate_hz == SAMPLE_RATE_HZ)
        # The gateway's transcoder delays what it sends by this much (its output starts with that much silence),
        # so a tag's played time holds that much of the audio before it (PlayoutCore.played_ms_of_tag).
        self.outbound_delay_ms = self._caller_codec.delay_ms
        # An A-law stream's audio as it came, byte for byte (keep_audio): the core measures it as mu-law, which
        # cannot tell A-law passed through from the model untouched from A-law the gateway transcoded.
        self.alaw_received: bytearray | None = bytearray() if keep_audio and encoding == ENCODING_PCMA else None

    @classmethod
    @abc.abstractmethod
    def for_stream(cls, ids: CallIdentity, target: StreamTarget,
                   caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance], lead_frames: int,
                   options: ModeOptions) -> ModeCall:
        """The adapter of the call ``ids`` that the carrier's answer document streamed to ``target``."""

    def reattach(self, target: StreamTarget, stream_id: str, lost_at_ms: float, now_ms: float) -> list[str | bytes]:
        """The same call on a new stream (``target``: what the continuation after the old stream answered;
        ``stream_id``: the new stream's id): its opening messages."""
        raise ValueError(f"{self.carrier} names no continuation after its stream")

    def _caller_payload(self, n: int) -> bytes:
        """Caller frame ``n`` in the carrier's encoding."""
        self.metrics.media_sent += 1
        return self._caller_codec.from_ulaw(self._caller_frame(n))

    def _audio_arrived(self, payload: bytes, now_ms: float) -> None:
        """Audio in the carrier's encoding reached the carrier: as 20 ms mu-law frames into the core."""
        self._advance_play(now_ms)
        if self.alaw_received is not None:
            self.alaw_received += payload
        ulaw = self._measure_codec.to_ulaw(payload)
        for frame in self._framer.push(ulaw):
            self._accept_frame(frame, now_ms)

    def _cleared_audio_path(self) -> None:
        """A clear threw the queued audio away: the transcoder's held-back samples and the framer's
        remainder belonged to it (the next response must not start with the tail of the one dropped)."""
        if not self.exact_audio:
            self._measure_codec = EdgeTranscoder(self.encoding, self.sample_rate_hz)
        self._framer.take_remainder()

    @abc.abstractmethod
    def stop_messages(self, now_ms: float | None = None) -> list[str | bytes]:
        """The carrier's last messages (its ``stop``, and caller audio still held back): afterwards
        tick_send() returns nothing. ``now_ms``: when the call ends (see PlayoutCore.stopped_at_ms)."""

    def _stop(self, now_ms: float | None) -> None:
        self._require_open()
        self._stopped = True
        if now_ms is not None:
            self.stopped_at_ms = now_ms

    def release_wire_state(self) -> None:
        """Drop what only the live call needs (codecs, carrier sides, clips) before a result is stored."""
        self._clips = []
        self._queue.clear()
        self._outbox = []
        self._caller_codec = self._measure_codec = None


class TelnyxCall(ModeCall):
    """A Telnyx media stream (TeXML ``<Connect><Stream bidirectionalMode="rtp">``)."""

    carrier = "telnyx"
    carrier_side = telnyx.TelnyxCarrierSide

    def __init__(self, call_control_id: str, stream_id: str, user_id: str,
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, custom_parameters: Sequence[tuple[str, str]] = (),
                 encoding: str = ENCODING_PCMU, call_session_id: str | None = None, from_number: str | None = None,
                 to_number: str | None = None, play_phase_ms: float | None = None, keep_audio: bool = True,
                 jitter_probability: float = 0.0, jitter_seed: int = 0) -> None:
        if encoding not in (ENCODING_PCMU, ENCODING_PCMA):
            raise ValueError("a Telnyx stream here is PCMU or PCMA")
        if not 0.0 <= jitter_probability <= 1.0:
            raise ValueError("jitter_probability must be from 0 to 1")
        super().__init__(call_control_id, caller_audio, lead_frames, encoding, SAMPLE_RATE_HZ,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        codec = "PCMU" if encoding == ENCODING_PCMU else "PCMA"
        self.stream_id = stream_id
        kwargs = dict(encoding=codec, call_session_id=call_session_id, from_number=from_number, to_number=to_number,
                      custom_parameters=dict(custom_parameters))
        self._writer = telnyx.TelnyxCarrierSide(stream_id, call_control_id, user_id, **kwargs)
        self._reader = telnyx.TelnyxCarrierSide(stream_id, call_control_id, user_id, **kwargs)
        self._media_head = telnyx.MEDIA_PREFIX
        self._media_tail = telnyx.MEDIA_SUFFIX
        self._mark_head = telnyx.MARK_PREFIX + b'"'
        self._mark_tail = b'"' + telnyx.MARK_SUFFIX
        self.jitter_probability = jitter_probability
        self._jitter = np.random.Generator(np.random.PCG64(jitter_seed)) if jitter_probability else None
        self._held: str | None = None  # a caller frame held back to go out after the next one
        self.frames_reordered = 0

    @classmethod
    def for_stream(cls, ids, target, caller_audio, lead_frames, options):
        return cls(ids.call_id, ids.stream_id, ids.account_id, caller_audio, lead_frames,
                   custom_parameters=target.parameters, encoding=target.encoding, call_session_id=ids.session_id,
                   from_number=ids.from_number, to_number=ids.to_number,
                   jitter_probability=options.jitter_probability, jitter_seed=stable_seed(ids.call_id),
                   play_phase_ms=options.play_phase_ms, keep_audio=options.keep_audio)

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return [self._writer.connected(), self._writer.start()]

    def _media_message(self, n: int) -> str:
        return self._writer.media(self._caller_payload(n))

    def tick_send(self, now_ms: float) -> list[str]:
        messages = super().tick_send(now_ms)
        if self._jitter is None or not messages:
            return messages
        out = []
        for message in messages:
            if self._held is not None:
                out += [message, self._held]  # the held frame arrives after its successor
                self._held = None
                self.frames_reordered += 1
            elif self._jitter.random() < self.jitter_probability:
                self._held = message
            else:
                out.append(message)
        return out

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._writer.dtmf(digit)

    def reattach(self, target: StreamTarget, stream_id: str, lost_at_ms: float, now_ms: float) -> list[str]:
        """The same call on a new stream (the TeXML its ``<Redirect>`` answered after the old stream dropped):
        its ``connected`` and ``start`` with the new stream id and ``<Parameter>``s."""
        self._new_stream(lost_at_ms, now_ms)
        self._held = None  # a frame held back belonged to the old stream
        self._cleared_audio_path()
        self.stream_id = stream_id
        w = self._writer
        kwargs = dict(encoding=w.encoding, call_session_id=w.call_session_id, from_number=w.from_number,
                      to_number=w.to_number, custom_parameters=dict(target.parameters))
        self._writer = telnyx.TelnyxCarrierSide(stream_id, w.call_control_id, w.user_id, **kwargs)
        self._reader = telnyx.TelnyxCarrierSide(stream_id, w.call_control_id, w.user_id, **kwargs)
        return self.opening_messages()

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        held, self._held = self._held, None
        self._stop(now_ms)
        # a frame still held goes out before the stop (it was due before it)
        return ([held] if held is not None else []) + [self._writer.stop()]

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        """The gateway's own ``media`` and ``mark`` bytes (telnyx.TelnyxOutboundEncoder's); anything else
        returns False with nothing changed."""
        head = self._media_head
        if data.startswith(head) and data.endswith(self._media_tail):
            try:
                payload = binascii.a2b_base64(data[len(head):-len(self._media_tail)], strict_mode=True)
            except (binascii.Error, ValueError):
                return False
            if not payload or len(payload) % FRAME_BYTES:
                return False
            self._audio_arrived(payload, now_ms)
            return True
        head = self._mark_head
        if data.startswith(head) and data.endswith(self._mark_tail):
            name = data[len(head):-len(self._mark_tail)]
            if PLAIN_NAME_BYTES.fullmatch(name) is None:
                return False
            self.mark_arrived(name.decode("ascii"), now_ms)
            return True
        return False

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        if not isinstance(data, str):
            self._reject(self._reader.receive_binary(data), "binary frame")
            return
        sent = self._reader.receive_text(data)
        # The reader's own playout queue is never played (the core times echoes): keep it empty.
        self._reader.advance(int(self._reader.queued_ms) + FRAME_MS)
        self._reader.data_to_send()
        if isinstance(sent, telnyx.SentMedia):
            if len(sent.payload) % FRAME_BYTES:
                self._protocol_error("media: payload is not whole 20 ms frames")
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, telnyx.SentMark):
            self.mark_arrived(sent.name, now_ms)
        elif isinstance(sent, telnyx.SentClear):
            self.clear_arrived(now_ms)
        else:
            self._reject(sent, f"rejected: {sent.title}")

    def _reject(self, rejected: telnyx.Rejected, reason: str) -> None:
        # Telnyx answers a message it refuses with an `error` frame [guide].
        self._protocol_error(reason)
        self._outbox.append(self._writer.error(rejected.code))

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        self._outbox.append(self._writer.mark_echo(name))

    def _cleared(self, now_ms: float) -> None:
        self._cleared_audio_path()

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._writer = self._reader = self._jitter = None


class PlivoCall(ModeCall):
    """A Plivo bidirectional audio stream (``<Stream bidirectional="true">``)."""

    carrier = "plivo"
    carrier_side = plivo.PlivoCarrierSide
    ECHOES_MARKS_ON_CLEAR = False  # clearAudio drops pending checkpoints unechoed [ref]

    def __init__(self, call_uuid: str, stream_id: str, account_id: str,
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, extra_headers: str = "", encoding: str = ENCODING_PCMU,
                 sample_rate_hz: int = SAMPLE_RATE_HZ, play_phase_ms: float | None = None,
                 keep_audio: bool = True, playout_stall_ms: int = 0, playout_stall_every_ms: int = 0) -> None:
        super().__init__(call_uuid, caller_audio, lead_frames, encoding, sample_rate_hz,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self.set_playout_stall(playout_stall_ms, playout_stall_every_ms)
        content_type = plivo.CONTENT_TYPE_MULAW if encoding == ENCODING_PCMU else plivo.CONTENT_TYPE_L16
        self.stream_id = stream_id
        args = (stream_id, call_uuid, account_id, content_type, sample_rate_hz, extra_headers)
        self._writer = plivo.PlivoCarrierSide(*args)
        self._reader = plivo.PlivoCarrierSide(*args)
        encoder = plivo.PlivoOutboundEncoder(stream_id, content_type, sample_rate_hz)
        self._media_head = encoder.media_prefix
        self._media_tail = encoder.media_suffix
        self._mark_head = encoder.mark_prefix + b'"'
        self._mark_tail = b'"}'
        self._frame_bytes = EdgeTranscoder(encoding, sample_rate_hz).carrier_frame_bytes

    @classmethod
    def for_stream(cls, ids, target, caller_audio, lead_frames, options):
        stall_ms, stall_every_ms = options.playout_stall
        return cls(ids.call_id, ids.stream_id, ids.account_id, caller_audio, lead_frames,
                   extra_headers=target.raw_extra_headers, encoding=target.encoding,
                   sample_rate_hz=target.sample_rate_hz, playout_stall_ms=stall_ms,
                   playout_stall_every_ms=stall_every_ms, play_phase_ms=options.play_phase_ms,
                   keep_audio=options.keep_audio)

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return [self._writer.start()]  # Plivo sends no `connected` [ref]

    def reattach(self, target: StreamTarget, stream_id: str, lost_at_ms: float, now_ms: float) -> list[str]:
        """The same call on a new stream (the XML its ``<Redirect>`` answered after the old stream dropped): its
        ``start`` with the new stream id and ``extraHeaders``."""
        self._new_stream(lost_at_ms, now_ms)
        self._cleared_audio_path()
        w = self._writer
        self.stream_id = stream_id
        args = (stream_id, w.call_id, w.account_id, w.content_type, w.sample_rate_hz, target.raw_extra_headers)
        self._writer = plivo.PlivoCarrierSide(*args)
        self._reader = plivo.PlivoCarrierSide(*args)
        encoder = plivo.PlivoOutboundEncoder(stream_id, w.content_type, w.sample_rate_hz)
        self._media_head = encoder.media_prefix
        self._mark_head = encoder.mark_prefix + b'"'
        return self.opening_messages()

    def _media_message(self, n: int) -> str:
        return self._writer.media(self._caller_payload(n))

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._writer.dtmf(digit)

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        self._stop(now_ms)
        return [self._writer.stop()]

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        """The gateway's own ``playAudio`` and ``checkpoint`` bytes (plivo.PlivoOutboundEncoder's)."""
        head = self._media_head
        if data.startswith(head) and data.endswith(self._media_tail):
            try:
                payload = binascii.a2b_base64(data[len(head):-len(self._media_tail)], strict_mode=True)
            except (binascii.Error, ValueError):
                return False
            if not payload or len(payload) % self._frame_bytes:
                return False
            self._audio_arrived(payload, now_ms)
            return True
        head = self._mark_head
        if data.startswith(head) and data.endswith(self._mark_tail):
            name = data[len(head):-len(self._mark_tail)]
            if PLAIN_NAME_BYTES.fullmatch(name) is None:
                return False
            self.mark_arrived(name.decode("ascii"), now_ms)
            return True
        return False

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        if not isinstance(data, str):
            self._protocol_error("binary frame")
            return
        sent = self._reader.receive_text(data)
        if self._reader.queued_bytes > 1 << 20:
            # The reader's queue is never played (the core times echoes); start a fresh reader before it grows.
            self._reader = plivo.PlivoCarrierSide(self._reader.stream_id, self._reader.call_id, self._reader.account_id,
                                                  self._reader.content_type, self._reader.sample_rate_hz)
        if isinstance(sent, plivo.PlayAudio):
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, plivo.Checkpoint):
            self.mark_arrived(sent.name, now_ms)
        elif isinstance(sent, plivo.ClearAudio):
            self.clear_arrived(now_ms)
        else:
            self._protocol_error(f"rejected: {sent.reason}")

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        self._outbox.append(self._writer.played_stream(name))

    def _cleared(self, now_ms: float) -> None:
        self._cleared_audio_path()
        self._outbox.append(self._writer.cleared_audio())

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._writer = self._reader = None


class VonageCall(ModeCall):
    """A Vonage Voice API WebSocket (NCCO ``connect`` to a ``websocket`` endpoint). ``headers``: the NCCO
    endpoint's headers, echoed in ``websocket:connected``; ``call_sid`` is the call's uuid."""

    carrier = "vonage"
    carrier_side = vonage.VonageCarrierSide
    BINARY_MESSAGES = True
    ECHOES_MARKS_ON_CLEAR = False  # a clear drops the queued audio and the notifies behind it

    def __init__(self, call_uuid: str, headers: Mapping[str, object],
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, sample_rate_hz: int = vonage.DEFAULT_SAMPLE_RATE_HZ,
                 play_phase_ms: float | None = None, keep_audio: bool = True) -> None:
        super().__init__(call_uuid, caller_audio, lead_frames, ENCODING_L16, sample_rate_hz,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self._side = vonage.VonageCarrierSide(headers, sample_rate_hz)
        self._notify_payloads: dict[str, bytes] = {}  # a pending notify's payload, echoed verbatim

    @classmethod
    def for_stream(cls, ids, target, caller_audio, lead_frames, options):
        return cls(ids.call_id, target.headers, caller_audio, lead_frames, sample_rate_hz=target.sample_rate_hz,
                   play_phase_ms=options.play_phase_ms, keep_audio=options.keep_audio)

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return [self._side.connected().data.decode("utf-8")]

    def _media_message(self, n: int) -> bytes:
        return self._side.audio(self._caller_payload(n)).data

    def reattach(self, target: StreamTarget, stream_id: str, lost_at_ms: float, now_ms: float) -> list[str]:
        """The same call on a new stream (the NCCO the ``disconnected`` event's answer connected after the old
        socket ended): its ``websocket:connected`` with the new NCCO's headers (a socket's leg id is the shell's
        to name in the next ``disconnected`` event: nothing on the stream carries it)."""
        self._new_stream(lost_at_ms, now_ms)
        self._notify_payloads.clear()  # the old socket's pending notifies went with it
        self._cleared_audio_path()
        self._side = vonage.VonageCarrierSide(target.headers, self.sample_rate_hz)
        self._opened = False
        return self.opening_messages()

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._side.dtmf(digit).data.decode("utf-8")

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        """Vonage has no ``stop``: the call ends by the socket closing."""
        self._stop(now_ms)
        return []

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        return False  # audio is binary (always the plain path, which is short); control is rare

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        binary = not isinstance(data, str)
        sent = self._side.receive(data, binary)
        if isinstance(sent, vonage.SentAudio):
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, vonage.SentNotify):
            name = sent.mark if sent.mark is not None else ""
            self._notify_payloads[name] = sent.payload_json
            self.mark_arrived(name, now_ms)
        elif isinstance(sent, vonage.SentClear):
            self.clear_arrived(now_ms)
        else:
            self._protocol_error(f"rejected: {sent.reason}")

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        payload = self._notify_payloads.pop(name, None) or orjson.dumps({"mark": name})
        self._outbox.append(self._side.notify_echo(vonage.SentNotify(payload, name)).data.decode("utf-8"))

    def _cleared(self, now_ms: float) -> None:
        self._notify_payloads.clear()  # every notify not yet echoed was pending, and is dropped
        self._cleared_audio_path()
        self._outbox.append(self._side.cleared().data.decode("utf-8"))

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._side = None


class ExotelCall(ModeCall):
    """An Exotel Voicebot stream. Caller audio goes out in ``EXOTEL_MEDIA_FRAMES``-frame ``media`` messages."""

    carrier = "exotel"
    carrier_side = exotel.ExotelCarrierSide

    def __init__(self, call_sid: str, stream_sid: str, account_sid: str,
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, custom_parameters: Sequence[tuple[str, str]] = (),
                 encoding: str = ENCODING_L16, sample_rate_hz: int = SAMPLE_RATE_HZ, from_number: str = "",
                 to_number: str = "", play_phase_ms: float | None = None, keep_audio: bool = True) -> None:
        super().__init__(call_sid, caller_audio, lead_frames, encoding, sample_rate_hz,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self.stream_sid = stream_sid
        self._side = exotel.ExotelCarrierSide(stream_sid, call_sid, account_sid, encoding=encoding,
                                              sample_rate_hz=sample_rate_hz, custom_parameters=custom_parameters,
                                              from_number=from_number, to_number=to_number)
        self._caller_batch: list[bytes] = []

    @classmethod
    def for_stream(cls, ids, target, caller_audio, lead_frames, options):
        encoding = options.exotel_encoding if target.sample_rate_hz == 8000 else ENCODING_L16  # mu-law is 8 kHz only
        return cls(ids.call_id, ids.stream_id, ids.account_id, caller_audio, lead_frames,
                   custom_parameters=target.parameters, encoding=encoding, sample_rate_hz=target.sample_rate_hz,
                   from_number=ids.from_number, to_number=ids.to_number, play_phase_ms=options.play_phase_ms,
                   keep_audio=options.keep_audio)

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return self._side.opening_messages()

    def _media_message(self, n: int) -> str | None:
        self._caller_batch.append(self._caller_payload(n))
        if len(self._caller_batch) < EXOTEL_MEDIA_FRAMES:
            return None
        return self._flush_caller_batch()

    def _flush_caller_batch(self) -> str:
        payload, self._caller_batch = b"".join(self._caller_batch), []
        return self._side.media(payload)

    def tick_send(self, now_ms: float) -> list[str]:
        return [message for message in super().tick_send(now_ms) if message is not None]

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._side.dtmf(digit)

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        self._stop(now_ms)
        # caller audio still batched goes out before the stop (it was due before it)
        batched = [self._flush_caller_batch()] if self._caller_batch else []
        return batched + [self._side.stop()]

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        return False  # chunks come every 100 ms or more and marks with them: the carrier side reads them

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        sent = self._side.receive_binary(data) if not isinstance(data, str) else self._side.receive_text(data)
        if isinstance(sent, exotel.SentMedia):
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, exotel.SentMark):
            self.mark_arrived(sent.name, now_ms)
        elif isinstance(sent, exotel.SentClear):
            self.clear_arrived(now_ms)
        else:
            self._protocol_error(f"rejected: {sent.reason}")

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        self._outbox.append(self._side.mark_echo(name))

    def _cleared(self, now_ms: float) -> None:
        self._cleared_audio_path()

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._side = None


# The adapter that plays each carrier's own end of its stream, by that end's class (a descriptor's carrier_side).
ADAPTERS: dict[type, type[ModeCall]] = {adapter.carrier_side: adapter
                                        for adapter in (TelnyxCall, PlivoCall, VonageCall, ExotelCall)}


def adapter_for(carrier: str) -> type[ModeCall] | None:
    """The adapter that plays ``carrier``'s stream, found by its descriptor's ``carrier_side``; None for a carrier
    whose stream the simulator plays with its own core (a descriptor without one: Twilio, voicecore/sim/
    carrier_core.py CarrierCall, place_call's). ValueError: no such carrier, or no adapter for its side."""
    side = registry.get(carrier).carrier_side
    if side is None:
        return None
    adapter = ADAPTERS.get(side)
    if adapter is None:
        raise ValueError(f"the simulator has no adapter for {carrier}'s stream ({side.__name__})")
    return adapter


def stable_seed(text: str) -> int:
    """A 64-bit seed from ``text`` (a call id): the same call jitters the same way."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
