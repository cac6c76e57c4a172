"""The gateway's carrier edge, without I/O: one stream's audio between the carrier's format and the arena's
20 ms mu-law frames, and the raw wire entries the pacer wrote finished into the carrier's messages.

Owns, per stream:

- inbound: caller audio as the carrier sent it (``CallerAudio.payload``, any size) -> exact 160-byte mu-law
  frames for the call's inbound ring (:meth:`CarrierEdge.inbound`: ``EdgeTranscoder.to_ulaw``, then a
  ``Framer(timing.FRAME_BYTES)``);
- outbound, for a call whose wire templates are raw (voicecore/carriers/wire.py: Vonage, Exotel, a stream
  not in mu-law at 8 kHz): each raw entry (``RAW_MEDIA`` + 160 mu-law bytes, ``RAW_MARK`` + a mark name,
  ``RAW_CLEAR``) -> the carrier's messages (:meth:`CarrierEdge.outbound`), through the transcoder, a
  ``Framer`` of the carrier's 20 ms frame, and a sink that owns the carrier's message shapes
  (:class:`FrameSink`: one message per frame; :class:`BatchedSink`: frames batched into chunks, Exotel).

The one rule the outbound side keeps besides the formats: **a mark never goes out ahead of its audio**
(its echo says "the audio before me has played": voicecore/carriers/marks.py, docs/explanation/protocols.md#a3). A
resampled stream delays its audio by ``EdgeTranscoder.delay_ms`` (10 ms: codec.py), so the last 10 ms of
what the pacer sent is still inside the resampler when a mark arrives. Such a mark waits until the carrier
bytes that carry its audio have gone out (the next frame, 20 ms later at most); a response's last mark
(``tag:frames:end``) cannot wait for audio that will not come, so one frame of mu-law silence is pushed
through first, which brings the tail out as a whole frame, and the mark follows it. Either way the mark's
echo comes when the rest of that frame (10 ms) has played too: :meth:`CarrierEdge.echo_late_ns` tells the
gateway by how much, and it dates the echo's played position that much earlier. A ``clear`` drops what
the edge holds (the framer's remainder, the resampler's history, marks waiting for their audio) and
reports the dropped marks: they were never sent, so no echo will come for them, and the gateway settles
them the way it settles the echoes a clear causes (discarded, not played). A :class:`BatchedSink` may hold
marks behind a chunk still filling; its clear reports those too.

Must not know: any carrier's field names (the sink is handed an encoder, :class:`voicecore.carriers.events.
CarrierEncoder`, and for batching a batcher such as ``exotel.ChunkBatcher``), sockets, rings, the clock.
Our own misuse (an entry that is not a raw entry, a media entry that is not one frame) raises
``ValueError``; nothing the carrier sends reaches this module except caller audio, and no payload can make
:meth:`CarrierEdge.inbound` raise.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

from voicecore.carriers.codec import EdgeTranscoder, Framer
from voicecore.carriers.events import CarrierEncoder, Outbound
from voicecore.carriers.wire import RAW_CLEAR, RAW_MARK, RAW_MEDIA
from voicecore.timing import FRAME_BYTES, FRAME_MS, FRAME_NS
from voicecore.carriers.marks import END_SUFFIX

__all__ = ["BatchedSink", "CarrierEdge", "EdgeOutput", "EdgeSink", "FrameSink", "OutboundEdge", "ULAW_SILENCE_FRAME"]

ULAW_SILENCE_FRAME = b"\xff" * FRAME_BYTES  # the mu-law code of linear 0, one 20 ms frame
MAX_LATE_MARKS = 64  # marks awaiting their echo whose lateness is kept (a lead holds a few)


@dataclass(frozen=True, slots=True)
class EdgeOutput:
    """What one raw entry became: the messages to send now, in order, and the names of marks that were
    dropped unsent (by a clear) and must be settled as discarded."""

    messages: tuple[Outbound, ...] = ()
    dropped_marks: tuple[str, ...] = ()


_NOTHING = EdgeOutput()


class EdgeSink(Protocol):
    """A carrier's message shapes for the outbound edge: frames (20 ms of the carrier's format), marks and
    clears in, messages out."""

    def frame(self, payload: bytes) -> list[Outbound]: ...

    def mark(self, name: str, end: bool) -> list[Outbound]: ...

    def clear(self) -> tuple[list[Outbound], tuple[str, ...]]: ...


class FrameSink:
    """One message per 20 ms frame, a mark as the encoder writes it (Telnyx, Plivo, Vonage)."""

    __slots__ = ("encoder",)

    def __init__(self, encoder: CarrierEncoder) -> None:
        self.encoder = encoder

    def frame(self, payload: bytes) -> list[Outbound]:
        return [self.encoder.media(payload)]

    def mark(self, name: str, end: bool) -> list[Outbound]:
        return [self.encoder.mark(name)]

    def clear(self) -> tuple[list[Outbound], tuple[str, ...]]:
        return [self.encoder.clear()], ()


class BatchedSink:
    """Frames batched into the carrier's chunks before they are sent (Exotel: ``exotel.ChunkBatcher``, whose
    ``push``/``mark``/``clear`` this calls and whose items ``encoder.encode`` turns into messages). A mark
    named ``tag:frames:end`` asks the batcher to send what it holds now (padded as its rules require)."""

    __slots__ = ("encoder", "batcher")

    def __init__(self, encoder, batcher) -> None:
        self.encoder = encoder
        self.batcher = batcher

    def frame(self, payload: bytes) -> list[Outbound]:
        return self.encoder.encode(self.batcher.push(payload))

    def mark(self, name: str, end: bool) -> list[Outbound]:
        return self.encoder.encode(self.batcher.mark(name, end=end))

    def clear(self) -> tuple[list[Outbound], tuple[str, ...]]:
        cleared = self.batcher.clear()
        return [self.encoder.clear()], tuple(cleared.dropped_marks)


class OutboundEdge:
    """The pacer's mu-law frames and marks -> whole carrier frames and marks, in order, no mark ahead of the
    audio before it (see the module docstring). Items come out as ``("frame", bytes)`` and
    ``("mark", name, end, late_ns)``.

    Positions count carrier bytes since the stream started or was last cleared: the audio of the first
    ``n`` mu-law bytes pushed is out once ``delay_bytes + n * ratio`` carrier bytes have gone out as frames
    (the resampler's output is its input delayed by ``delay_ms``, and as long as its input: codec.py). A
    mark comes out as ``("mark", name, end, late_ns)``: ``late_ns`` is how much carrier audio went out
    between its position and the mark (the rest of the frame that carried its audio's tail), so how much
    later than its audio its echo comes back (0 at 8 kHz; 10 ms on a resampled stream, whose marks wait for
    the frame that carries their last 10 ms).
    """

    __slots__ = ("transcoder", "frame_bytes", "ratio", "delay_bytes", "_framer", "_in_bytes", "_out_bytes",
                 "_waiting")

    def __init__(self, transcoder: EdgeTranscoder) -> None:
        self.transcoder = transcoder
        self.frame_bytes = transcoder.carrier_frame_bytes
        if self.frame_bytes % FRAME_BYTES:
            raise ValueError("a carrier frame must be a whole number of bytes per mu-law byte")
        self.ratio = self.frame_bytes // FRAME_BYTES  # carrier bytes per mu-law byte: 1, 2, 4 or 6
        self.delay_bytes = transcoder.delay_ms * self.frame_bytes // FRAME_MS
        self._framer = Framer(self.frame_bytes)
        self._in_bytes = 0
        self._out_bytes = 0
        self._waiting: deque[tuple[int, str, bool]] = deque()  # (position, name, end), oldest first

    @property
    def waiting_marks(self) -> tuple[str, ...]:
        return tuple(name for _, name, _ in self._waiting)

    def media(self, ulaw: bytes) -> list[tuple]:
        """One 20 ms mu-law frame from the pacer."""
        if len(ulaw) != FRAME_BYTES:
            raise ValueError(f"a raw media entry carries one {FRAME_BYTES}-byte frame")
        out: list[tuple] = []
        self._push(ulaw, out)
        self._release(out)
        return out

    def mark(self, name: str, end: bool = False) -> list[tuple]:
        out: list[tuple] = []
        position = self.delay_bytes + self._in_bytes * self.ratio if self._in_bytes else 0
        if end:
            # No audio follows for now: bring the resampler's tail out as whole frames (silence behind it).
            while self._out_bytes < position:
                self._push(ULAW_SILENCE_FRAME, out)
        self._waiting.append((position, name, end))
        self._release(out)
        return out

    def clear(self) -> tuple[str, ...]:
        """Forget what is held (the next response starts afresh); returns the marks dropped unsent."""
        dropped = self.waiting_marks
        self._waiting.clear()
        self._framer.take_remainder()
        self.transcoder.reset_outbound()
        self._in_bytes = 0
        self._out_bytes = 0
        return dropped

    def _push(self, ulaw: bytes, out: list[tuple]) -> None:
        # Silence pushed for an end mark counts too: it sits in the stream ahead of the next response.
        self._in_bytes += len(ulaw)
        for frame in self._framer.push(self.transcoder.from_ulaw(ulaw)):
            self._out_bytes += len(frame)
            out.append(("frame", frame))

    def _release(self, out: list[tuple]) -> None:
        waiting = self._waiting
        while waiting and waiting[0][0] <= self._out_bytes:
            position, name, end = waiting.popleft()
            # It goes behind audio that ends (out_bytes - position) carrier bytes after its own: its echo
            # comes that much after the audio before it played (10 ms on a resampled stream).
            out.append(("mark", name, end, (self._out_bytes - position) * FRAME_NS // self.frame_bytes))


class CarrierEdge:
    """One stream's edge: :meth:`inbound` for caller audio, :meth:`outbound` for raw wire entries (only
    used when the call's templates are raw; ``sink`` may then not be None)."""

    __slots__ = ("transcoder", "sink", "_inbound", "_outbound", "inbound_frames", "_late_marks")

    def __init__(self, transcoder: EdgeTranscoder, sink: EdgeSink | None = None) -> None:
        self.transcoder = transcoder
        self.sink = sink
        self._inbound = Framer(FRAME_BYTES)
        self._outbound = OutboundEdge(transcoder) if sink is not None else None
        self.inbound_frames = 0  # frames given out by inbound(), the shell's sequence numbers
        # (name, late_ns) of marks sent behind audio past their own, oldest first, until their echo
        # (echo_late_ns) or a clear; bounded, should a carrier never echo.
        self._late_marks: deque[tuple[str, int]] = deque(maxlen=MAX_LATE_MARKS)

    def echo_late_ns(self, name: str) -> int:
        """How much later than the audio before it the echo of mark ``name`` comes (its ``late_ns``, see
        :class:`OutboundEdge`), 0 for a mark sent right behind its audio: the gateway takes that much off
        the echo's time, so the played position it publishes is the audio's. Echoes come in the order the
        marks went out, so the entries before its own are passed (their marks were lost)."""
        late = self._late_marks
        for index, (late_name, late_ns) in enumerate(late):
            if late_name == name:
                for _ in range(index + 1):
                    late.popleft()
                return late_ns
        return 0

    def inbound(self, payload: bytes) -> list[bytes]:
        """Caller audio in the carrier's format -> the 160-byte mu-law frames it completes."""
        frames = self._inbound.push(self.transcoder.to_ulaw(payload))
        self.inbound_frames += len(frames)
        return frames

    def outbound(self, entry: bytes) -> EdgeOutput:
        """One raw wire entry -> the carrier's messages (and the marks a clear dropped unsent)."""
        edge, sink = self._outbound, self.sink
        if edge is None or sink is None:
            raise ValueError("this edge has no outbound side (the call's templates are final)")
        kind = entry[:1]
        if kind == RAW_MEDIA:
            items = edge.media(entry[1:])
        elif kind == RAW_MARK:
            name = entry[1:].decode("ascii")
            items = edge.mark(name, end=name.endswith(END_SUFFIX))
        elif kind == RAW_CLEAR and len(entry) == 1:
            dropped = edge.clear()
            self._late_marks.clear()  # marks sent before a clear are settled as discarded, not played
            messages, sink_dropped = sink.clear()
            # The sink's marks were handed to it before the ones still waiting here: oldest first.
            return EdgeOutput(tuple(messages), sink_dropped + dropped)
        else:
            raise ValueError("not a raw wire entry")
        if not items:
            return _NOTHING
        messages: list[Outbound] = []
        for item in items:
            if item[0] == "frame":
                messages += sink.frame(item[1])
            else:
                if item[3]:
                    self._late_marks.append((item[1], item[3]))
                messages += sink.mark(item[1], item[2])
        return EdgeOutput(tuple(messages))
