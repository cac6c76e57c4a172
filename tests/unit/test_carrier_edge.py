"""The gateway's carrier edge (voicecore/carriers/edge.py): caller audio of every carrier format into exact
160-byte mu-law frames, and the pacer's raw wire entries into each carrier's messages, read back by that
carrier's own side (voicecore/carriers/*.py CarrierSide): Vonage's 640-byte binary L16 frames, Exotel chunks
that obey its rules, Telnyx A-law, Plivo L16. The rule that matters beyond formats: no mark goes out ahead
of the audio before it (a property test against a model of the stream), and a clear drops and reports the
marks that were never sent."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.edge import ULAW_SILENCE_FRAME, BatchedSink, CarrierEdge, EdgeOutput, FrameSink, OutboundEdge
from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMA, ENCODING_PCMU
from voicecore.carriers.wire import RAW_CLEAR, RAW_MARK, RAW_MEDIA
from voicecore.timing import FRAME_BYTES, FRAME_NS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop


def tone_ulaw(frames: int, hz: float = 440.0) -> bytes:
    t = np.arange(FRAME_BYTES * frames) / 8000
    return audioop.lin2ulaw((8000 * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes(), 2)


def media(ulaw: bytes) -> bytes:
    return RAW_MEDIA + ulaw


def mark(name: str) -> bytes:
    return RAW_MARK + name.encode("ascii")


def run(edge: CarrierEdge, entries: list[bytes]) -> list:
    messages = []
    for entry in entries:
        messages += edge.outbound(entry).messages
    return messages


# --- inbound -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding,rate,payload_bytes", [
    (ENCODING_PCMU, 8000, 160),  # Telnyx, Plivo mu-law: 20 ms frames
    (ENCODING_PCMA, 8000, 160),  # Telnyx PCMA
    (ENCODING_L16, 8000, 320),  # Plivo's default, Vonage at 8 kHz
    (ENCODING_L16, 16000, 640),  # Vonage's default
    (ENCODING_L16, 8000, 1600),  # Exotel: ~100 ms per media message
    (ENCODING_PCMU, 8000, 800),  # Exotel mu-law: 100 ms
    (ENCODING_L16, 16000, 222),  # an odd size: the remainder waits for the next payload
])
def test_inbound_gives_exact_mulaw_frames_of_the_same_duration(encoding, rate, payload_bytes):
    edge = CarrierEdge(EdgeTranscoder(encoding, rate))
    bytes_per_ms = rate // 1000 * (2 if encoding == ENCODING_L16 else 1)
    frames = []
    for _ in range(50):
        frames += edge.inbound(b"\x01" * payload_bytes)
    assert all(len(frame) == FRAME_BYTES for frame in frames)
    assert edge.inbound_frames == len(frames)
    duration_ms = 50 * payload_bytes // bytes_per_ms
    assert duration_ms - 20 <= len(frames) * 20 <= duration_ms


def test_inbound_pcmu_frames_pass_through_unchanged():
    edge = CarrierEdge(EdgeTranscoder(ENCODING_PCMU, 8000))
    audio = tone_ulaw(1)
    assert edge.inbound(audio) == [audio]


def test_inbound_never_raises_on_any_payload():
    edge = CarrierEdge(EdgeTranscoder(ENCODING_L16, 16000))
    for payload in (b"", b"\x00", b"\xff" * 3, b"\x7f" * 4001):
        edge.inbound(payload)


# --- outbound: each carrier's messages, read by its own side -----------------------------------------


def test_vonage_gets_640_byte_binary_frames_and_notify_marks_after_their_audio():
    edge = CarrierEdge(EdgeTranscoder(ENCODING_L16, 16000), FrameSink(vonage.VonageOutboundEncoder(16000)))
    side = vonage.VonageCarrierSide({"call_id": "c"}, 16000)
    audio = tone_ulaw(4)
    entries = [media(audio[:160]), mark("1:1"), media(audio[160:320]), media(audio[320:480]), mark("1:3:end")]
    seen = [side.receive(m.data, m.binary) for m in run(edge, entries)]
    kinds = [type(item).__name__ for item in seen]
    # 1:1 waits for the frame that carries the resampler's tail of frame 1; the end mark pushes silence first.
    assert kinds == ["SentAudio", "SentAudio", "SentNotify", "SentAudio", "SentAudio", "SentNotify"]
    assert [item.mark for item in seen if isinstance(item, vonage.SentNotify)] == ["1:1", "1:3:end"]
    assert all(len(item.payload) == 640 for item in seen if isinstance(item, vonage.SentAudio))


def test_a_resampled_streams_mark_echo_is_known_to_come_10_ms_after_its_audio():
    """The mark waits for the frame that carries its audio's last 10 ms, so its echo comes when 10 ms of the
    next audio have played too: the edge says so (echo_late_ns), and the gateway dates the echo's played
    position that much earlier. Marks sent right behind their audio (8 kHz, a stream's very first) are not late."""
    edge = CarrierEdge(EdgeTranscoder(ENCODING_L16, 16000), FrameSink(vonage.VonageOutboundEncoder(16000)))
    audio = tone_ulaw(4)
    run(edge, [mark("1:0"), media(audio[:160]), mark("1:1"), media(audio[160:320]), mark("1:2"), media(audio[320:480]),
               mark("1:3:end")])
    assert edge.echo_late_ns("1:0") == 0  # no audio before it: nothing to wait for
    assert edge.echo_late_ns("1:1") == 10_000_000
    # Echoes come in order: one passed over was lost, and its entry goes with it.
    assert edge.echo_late_ns("1:3:end") == 10_000_000  # behind the silence that brought the tail out
    assert edge.echo_late_ns("1:2") == 0
    run(edge, [media(audio[:160]), media(audio[160:320]), mark("2:2"), RAW_CLEAR])
    assert edge.echo_late_ns("2:2") == 0  # a clear settles the marks before it: their echoes are discards

    narrow = CarrierEdge(EdgeTranscoder(ENCODING_L16, 8000), FrameSink(vonage.VonageOutboundEncoder(8000)))
    run(narrow, [media(audio[:160]), mark("1:1"), media(audio[160:320]), mark("1:2:end")])
    assert narrow.echo_late_ns("1:1") == narrow.echo_late_ns("1:2:end") == 0
    assert CarrierEdge(EdgeTranscoder(ENCODING_PCMU, 8000)).echo_late_ns("1:1") == 0  # final templates


def test_vonage_at_8000_hz_needs_no_waiting():
    edge = CarrierEdge(EdgeTranscoder(ENCODING_L16, 8000), FrameSink(vonage.VonageOutboundEncoder(8000)))
    side = vonage.VonageCarrierSide({"call_id": "c"}, 8000)
    seen = [side.receive(m.data, m.binary) for m in run(edge, [media(tone_ulaw(1)), mark("1:1:end")])]
    assert [type(item).__name__ for item in seen] == ["SentAudio", "SentNotify"]
    assert len(seen[0].payload) == 320


def test_telnyx_pcma_and_plivo_l16_messages_parse_on_their_carrier_side():
    audio = tone_ulaw(2)
    t_edge = CarrierEdge(EdgeTranscoder(ENCODING_PCMA, 8000), FrameSink(telnyx.TelnyxOutboundEncoder()))
    t_side = telnyx.TelnyxCarrierSide("s", "v3:c", "u", encoding="PCMA")
    t_seen = [t_side.receive_text(m.data) for m in run(t_edge, [media(audio[:160]), mark("1:1:end"), RAW_CLEAR])]
    assert [type(item).__name__ for item in t_seen] == ["SentMedia", "SentMark", "SentClear"]
    assert t_seen[0].payload == audio[:160].translate(bytes(audioop.lin2alaw(audioop.ulaw2lin(bytes(range(256)), 2), 2)))

    p_edge = CarrierEdge(EdgeTranscoder(ENCODING_L16, 16000),
                         FrameSink(plivo.PlivoOutboundEncoder("st-1", plivo.CONTENT_TYPE_L16, 16000)))
    p_side = plivo.PlivoCarrierSide("st-1", "c", content_type=plivo.CONTENT_TYPE_L16, sample_rate_hz=16000)
    p_seen = [p_side.receive_text(m.data) for m in run(p_edge, [media(audio[:160]), media(audio[160:]), mark("1:2:end")])]
    assert [type(item).__name__ for item in p_seen] == ["PlayAudio", "PlayAudio", "PlayAudio", "Checkpoint"]
    assert all(len(item.payload) == 640 for item in p_seen[:3])


def exotel_stream(encoding=ENCODING_L16, rate=8000):
    protocol = exotel.ExotelStreamProtocol()
    side = exotel.ExotelCarrierSide("SS1", "CA1", "AC1", encoding=encoding, sample_rate_hz=rate)
    for message in side.opening_messages():
        protocol.receive_text(message)
    encoder = protocol.outbound_encoder()
    return CarrierEdge(EdgeTranscoder(encoding, rate), BatchedSink(encoder, encoder.batcher())), side


@pytest.mark.parametrize("encoding,rate", [(ENCODING_L16, 8000), (ENCODING_PCMU, 8000), (ENCODING_L16, 16000)])
def test_exotel_chunks_obey_its_rules_and_marks_follow_their_chunk(encoding, rate):
    edge, side = exotel_stream(encoding, rate)
    audio = tone_ulaw(23)
    entries = []
    for index in range(23):
        entries.append(media(audio[index * 160:(index + 1) * 160]))
        if index % 5 == 4:
            entries.append(mark(f"1:{index + 1}"))
    entries.append(mark("1:23:end"))
    seen = [side.receive_text(m.data) for m in run(edge, entries)]
    assert not [item for item in seen if isinstance(item, exotel.OutboundRejected)], seen
    chunks = [item for item in seen if isinstance(item, exotel.SentMedia)]
    assert chunks and all(side.rules.problem(len(chunk.payload)) is None for chunk in chunks)
    names = [item.name for item in seen if isinstance(item, exotel.SentMark)]
    assert names == ["1:5", "1:10", "1:15", "1:20", "1:23:end"]
    # Every mark comes after the chunk that carries its last frame (plus the resampler's tail at 16 kHz).
    sent = 0
    frame_bytes = side.rules.frame_bytes
    for item in seen:
        if isinstance(item, exotel.SentMedia):
            sent += len(item.payload)
        elif isinstance(item, exotel.SentMark):
            frames = int(item.name.split(":")[1])
            assert sent >= frames * frame_bytes


def test_exotel_clear_reports_the_marks_that_waited_in_the_batcher():
    edge, side = exotel_stream()
    for _ in range(3):
        edge.outbound(media(tone_ulaw(1)))
    assert edge.outbound(mark("2:3")) == EdgeOutput()  # waits behind 60 ms, below Exotel's minimum chunk
    cleared = edge.outbound(RAW_CLEAR)
    assert cleared.dropped_marks == ("2:3",)
    assert [type(side.receive_text(m.data)).__name__ for m in cleared.messages] == ["SentClear"]


def test_clear_drops_marks_waiting_for_their_audio_and_the_next_response_starts_clean():
    edge = CarrierEdge(EdgeTranscoder(ENCODING_L16, 16000), FrameSink(vonage.VonageOutboundEncoder(16000)))
    run(edge, [media(tone_ulaw(1)), mark("1:1")])  # 1:1 waits for the resampler's tail
    cleared = edge.outbound(RAW_CLEAR)
    assert cleared.dropped_marks == ("1:1",)
    assert [m.data for m in cleared.messages] == [vonage.CLEAR_MESSAGE]
    # After the clear the resampler starts over: its first frame opens with 10 ms of silence again.
    (first,) = edge.outbound(media(tone_ulaw(1))).messages
    assert first.data[:320] == bytes(320)


def test_bad_entries_are_our_misuse():
    edge = CarrierEdge(EdgeTranscoder(ENCODING_PCMU, 8000), FrameSink(telnyx.TelnyxOutboundEncoder()))
    for entry in (b"X", RAW_MEDIA + b"\xff" * 159, RAW_CLEAR + b"x", b""):
        with pytest.raises(ValueError):
            edge.outbound(entry)
    with pytest.raises(ValueError):
        CarrierEdge(EdgeTranscoder(ENCODING_PCMU, 8000)).outbound(RAW_CLEAR)  # final templates: no outbound side


# --- the ordering rule, against a model ------------------------------------------------------------------

OPS = st.lists(st.one_of(st.just("frame"), st.just("mark"), st.just("end"), st.just("clear")), max_size=60)


@given(ops=OPS, rate=st.sampled_from([8000, 16000, 24000]))
def test_no_mark_overtakes_its_audio_and_every_mark_is_sent_or_dropped(ops, rate):
    """Model: since the last clear, a mark placed after n mu-law frames (the pacer's, and the silence an end
    mark pushes) covers the carrier bytes delay + n * 160 * ratio (the resampler delays by delay_ms); it must
    come out only after that many bytes, and each mark comes out exactly once or is reported dropped by the
    clear that followed it."""
    edge = OutboundEdge(EdgeTranscoder(ENCODING_L16, rate))
    delay, ratio = edge.delay_bytes, edge.ratio
    frames_in = 0
    out_bytes = 0
    placed: dict[str, int] = {}  # name -> carrier bytes that must precede it
    emitted: list[str] = []
    dropped: list[str] = []
    for index, op in enumerate(ops):
        if op == "frame":
            items = edge.media(tone_ulaw(1))
            frames_in += 1
        elif op in ("mark", "end"):
            name = f"{index + 1}:{frames_in}" + (":end" if op == "end" else "")
            placed[name] = delay + frames_in * FRAME_BYTES * ratio if frames_in else 0
            items = edge.mark(name, end=op == "end")
        else:
            dropped += edge.clear()
            frames_in, out_bytes, items = 0, 0, []
        for item in items:
            if item[0] == "frame":
                assert len(item[1]) == edge.frame_bytes
                out_bytes += len(item[1])
                if op == "end":
                    frames_in += 1  # a frame of silence pushed behind the response: in the stream like audio
            else:
                assert out_bytes >= placed[item[1]], (item, out_bytes, placed[item[1]])
                # ... and it says by how much it is late: less than a frame, exactly the carrier audio between
                assert item[3] == (out_bytes - placed[item[1]]) * FRAME_NS // edge.frame_bytes < FRAME_NS, item
                emitted.append(item[1])
        if op == "end":
            assert not edge.waiting_marks  # nothing follows an end mark: all went out
    assert sorted(emitted + dropped + list(edge.waiting_marks)) == sorted(placed)


def test_silence_frame_is_mulaw_zero():
    assert audioop.ulaw2lin(ULAW_SILENCE_FRAME, 2) == bytes(2 * FRAME_BYTES)
