"""A-law passthrough (docs/explanation/carrier-edge.md#a-law-calls-telnyx-pcma): a Telnyx PCMA stream whose
model takes A-law stays A-law from the carrier to the model and back. Pinned here piece by piece: the gateway's
choice (arena_encoding) and what it gives the stream (final templates, an edge that changes no byte), the slot's
CODEC word, the pacer's A-law copies of its fallback lines, the model session opened in g711_alaw / audio/pcma
with A-law silence padding, the record and its replay, and the model simulator speaking and hearing A-law as the
vendor does. The mu-law path is pinned unchanged beside each."""

from __future__ import annotations

import base64
import json
import warnings

import numpy as np
import pytest
from test_model_sim import Harness, audio_of, caller_turn, types

from voicecore.call import core as callcore
from voicecore.call.controller import CallController
from voicecore.call.record import CallRecorder
from voicecore.call.spine import SpineDriver
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMA, ENCODING_PCMU, StreamStarted
from voicecore.fallback import FallbackClips, codec_table, load_clips
from voicecore.g711 import ALAW_SILENCE, ALAW_TO_ULAW, ULAW_SILENCE, ULAW_TO_ALAW, from_ulaw, silence_byte, to_ulaw
from voicecore.realtime import events as rt
from voicecore.replay import agent_track, driver_from_header, replay
from voicecore.shm import control as C
from voicecore.shm import rings as R
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.timing import FRAME_BYTES
from voicecore.carriers.twilio.stream import wire_templates as twilio_templates
from workers.gateway import carrier_core
from workers.pacer import core as P

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop


IDLE = callcore.Playout(0, 0, 0, 0, 0, 0)


def started(encoding: str, rate: int = 8000) -> StreamStarted:
    return StreamStarted(sequence_number=1, call_id="v3:call", stream_id="s1", account_id="acc",
                         custom_parameters=(("session_token", "t"),), encoding=encoding, sample_rate_hz=rate, channels=1)


# ---- G.711 tables ------------------------------------------------------------------------------------


def test_the_tables_are_audioops_composition_and_the_silences_decode_to_zero():
    codes = bytes(range(256))
    assert ULAW_TO_ALAW == audioop.lin2alaw(audioop.ulaw2lin(codes, 2), 2)
    assert ALAW_TO_ULAW == audioop.lin2ulaw(audioop.alaw2lin(codes, 2), 2)
    assert audioop.ulaw2lin(bytes([ULAW_SILENCE]), 2) == b"\0\0"
    # A-law has no code for 0: lin2alaw(0) is the nearest, +8 of 32768 (-72 dBFS)
    assert audioop.lin2alaw(b"\0\0", 2) == bytes([ALAW_SILENCE]) and audioop.alaw2lin(bytes([ALAW_SILENCE]), 2) == b"\x08\x00"
    assert bytes([ULAW_SILENCE]).translate(ULAW_TO_ALAW) == bytes([ALAW_SILENCE])
    assert silence_byte("pcmu") == 0xFF and silence_byte("pcma") == 0xD5
    assert to_ulaw(b"\x01\x02", "pcmu") == b"\x01\x02" and from_ulaw(b"\x01\x02", "pcmu") == b"\x01\x02"
    assert to_ulaw(from_ulaw(b"\xff\x80", "pcma"), "pcma") == b"\xff\x80".translate(ULAW_TO_ALAW).translate(ALAW_TO_ULAW)
    with pytest.raises(ValueError):
        silence_byte("pcm")


# ---- the gateway's choice and the stream's edge ------------------------------------------------------------


@pytest.mark.parametrize(("carrier", "encoding", "rate", "passthrough", "expected"), [
    ("telnyx", ENCODING_PCMA, 8000, True, ENCODING_PCMA),
    ("telnyx", ENCODING_PCMA, 8000, False, ENCODING_PCMU),  # the setting off: one transcode at the edge
    ("telnyx", ENCODING_PCMU, 8000, True, ENCODING_PCMU),
    ("plivo", ENCODING_PCMU, 8000, True, ENCODING_PCMU),
    ("vonage", ENCODING_L16, 16000, True, ENCODING_PCMU),
    ("exotel", ENCODING_L16, 8000, True, ENCODING_PCMU),
])
def test_only_an_a_law_telnyx_stream_with_the_setting_on_stays_a_law(carrier, encoding, rate, passthrough, expected):
    assert carrier_core.arena_encoding(carrier, started(encoding, rate), passthrough) == expected


def test_a_passed_through_stream_gets_final_templates_and_an_edge_that_changes_no_byte():
    s = started(ENCODING_PCMA)
    protocol = carrier_core.new_stream_protocol("telnyx")
    templates = carrier_core.wire_templates("telnyx", s, protocol, 512, ENCODING_PCMA)
    assert not templates.raw and templates == telnyx.wire_templates(ENCODING_PCMU)  # Telnyx's media names no law
    edge = carrier_core.new_edge("telnyx", s, protocol, templates.raw, ENCODING_PCMA)
    alaw = bytes(range(256)) * 2 + bytes(range(128))  # 640 bytes: four frames, every code
    assert b"".join(edge.inbound(alaw)) == alaw
    # the setting off: raw entries, and the edge transcodes A-law -> mu-law as before
    assert carrier_core.wire_templates("telnyx", s, protocol, 512, ENCODING_PCMU).raw
    edge = carrier_core.new_edge("telnyx", s, protocol, True, ENCODING_PCMU)
    assert b"".join(edge.inbound(alaw)) == alaw.translate(ALAW_TO_ULAW)


def test_the_answer_asks_telnyx_for_the_configured_codec():
    request = carrier_core.AnswerRequest("telnyx", carrier_core.ANSWER, "v3:call")
    for codec in ("PCMU", "PCMA"):
        _, body = carrier_core.answer_document(request, "wss://gw.example", "tok",
                                               carrier_core.CarrierSettings(telnyx_public_key="k", telnyx_codec=codec))
        assert f'codec="{codec}"'.encode() in body and f'bidirectionalCodec="{codec}"'.encode() in body


# ---- the slot's CODEC word and the pacer's lines -------------------------------------------------------------


def test_codec_table_holds_each_line_in_a_law_after_the_mu_law_ones():
    clips = load_clips()
    frames, counts = codec_table(clips)
    n = clips.frames.shape[0]
    assert frames.shape == (2 * n,) + clips.frames.shape[1:] and list(counts) == list(clips.frame_counts) * 2
    assert np.array_equal(frames[:n], clips.frames)
    assert frames[n:].tobytes() == clips.frames.tobytes().translate(ULAW_TO_ALAW)
    last = int(clips.frame_counts[0]) - 1
    assert frames[n, last, -1] == ALAW_SILENCE  # the padding is A-law silence


def test_claim_slot_writes_the_codec_and_refuses_another(tmp_path):
    arena = Arena.create(ArenaLayout(max_calls=2, in_slots=8, out_slots=16, wire_slots=16), directory=str(tmp_path))
    try:
        arena.claim_slot(0, "MZ0", "CA0", twilio_templates("MZ0"))
        arena.claim_slot(1, "MZ1", "CA1", twilio_templates("MZ1"), codec=C.CODEC_ALAW)
        assert int(arena.ctrl[0, C.CODEC]) == C.CODEC_ULAW and int(arena.ctrl[1, C.CODEC]) == C.CODEC_ALAW
        arena.set_slot_state(1, C.SLOT_FREE)
        with pytest.raises(ValueError):
            arena.claim_slot(1, "MZ1", "CA1", twilio_templates("MZ1"), codec=2)
        arena.claim_slot(1, "MZ2", "CA2", twilio_templates("MZ2"))
        assert int(arena.ctrl[1, C.CODEC]) == C.CODEC_ULAW  # a new call of the slot starts mu-law again
    finally:
        arena.close()
        arena.unlink()


def _line_payloads(arena, slot) -> list[bytes]:
    out = []
    for raw in R.wire_drain(arena.ctrl, arena.wire_len, arena.wire_data, slot, 1000):
        msg = json.loads(raw)
        if msg["event"] == "media":
            out.append(base64.b64decode(msg["media"]["payload"], validate=True))
    return out


def test_an_a_law_call_hears_its_fallback_line_in_a_law_and_a_mu_law_call_in_mu_law(tmp_path):
    arena = Arena.create(ArenaLayout(max_calls=2, in_slots=8, out_slots=16, wire_slots=64), directory=str(tmp_path))
    try:
        arena.claim_slot(0, "MZ0", "CA0", twilio_templates("MZ0"))
        arena.claim_slot(1, "MZ1", "CA1", twilio_templates("MZ1"), codec=C.CODEC_ALAW)
        clips = load_clips()
        pacer = P.PacerCore(arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0, clips=clips)
        for slot in (0, 1):
            arena.ctrl[slot, C.FALLBACK_CLIP] = 1  # the hang-up apology
            arena.ctrl[slot, C.FALLBACK_SEQ] += 1
        heard: dict[int, list[bytes]] = {0: [], 1: []}
        count = int(clips.frame_counts[1])
        for tick in range(count + 10):
            pacer.tick(tick * 20_000_000)
            for slot in (0, 1):
                heard[slot] += _line_payloads(arena, slot)
        ulaw = [clips.frames[1, k].tobytes() for k in range(count)]
        assert heard[0] == ulaw
        assert heard[1] == [frame.translate(ULAW_TO_ALAW) for frame in ulaw]
        assert pacer.statistics()["fallback_lines"] == 2
    finally:
        arena.close()
        arena.unlink()


def test_the_pacer_takes_only_the_mu_law_numbers_as_clip_numbers(tmp_path):
    """A clip number past the shipped lines is refused for either law (the A-law rows are not clips of their own)."""
    arena = Arena.create(ArenaLayout(max_calls=1, in_slots=8, out_slots=16, wire_slots=64), directory=str(tmp_path))
    try:
        arena.claim_slot(0, "MZ0", "CA0", twilio_templates("MZ0"), codec=C.CODEC_ALAW)
        clips = FallbackClips(frames=load_clips().frames, frame_counts=load_clips().frame_counts, texts=load_clips().texts)
        pacer = P.PacerCore(arena, lead_ms=80, mark_every_frames=5, max_burst_frames=10, start_hold_ms=0, clips=clips)
        arena.ctrl[0, C.FALLBACK_CLIP] = clips.frames.shape[0]  # the first A-law row's index
        arena.ctrl[0, C.FALLBACK_SEQ] += 1
        pacer.tick(0)
        assert _line_payloads(arena, 0) == [] and int(arena.ctrl[0, C.FALLBACK_PENDING]) == 0
    finally:
        arena.close()
        arena.unlink()


# ---- the model session ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("naming", "fmt", "expected"), [
    ("ga", "pcmu", "audio/pcmu"), ("ga", "pcma", "audio/pcma"), ("beta", "pcmu", "g711_ulaw"), ("beta", "pcma", "g711_alaw"),
])
def test_session_update_names_the_law_both_ways(naming, fmt, expected):
    session = json.loads(rt.session_update(naming, "Help.", "alloy", None, audio_format=fmt))["session"]
    if naming == "ga":
        assert session["audio"]["input"]["format"] == {"type": expected} == session["audio"]["output"]["format"]
    else:
        assert session["input_audio_format"] == expected == session["output_audio_format"]
    with pytest.raises(ValueError):
        rt.session_update(naming, "Help.", "alloy", None, audio_format="pcm")


def test_the_mu_law_session_update_is_byte_for_byte_what_it_was():
    assert rt.session_update("ga", "Help.", "alloy", None) == rt.session_update("ga", "Help.", "alloy", None,
                                                                                audio_format="pcmu")
    text = rt.session_update("beta", "Help.", "alloy", None)
    assert '"input_audio_format":"g711_ulaw","output_audio_format":"g711_ulaw"' in text


def _delta(response_id: str, audio: bytes) -> str:
    return json.dumps({"type": "response.output_audio.delta", "event_id": "event_1", "response_id": response_id,
                       "item_id": "item_1", "output_index": 0, "content_index": 0,
                       "delta": base64.b64encode(audio).decode()})


@pytest.mark.parametrize(("fmt", "pad"), [("pcmu", 0xFF), ("pcma", 0xD5)])
def test_a_responses_short_last_frame_is_padded_with_the_calls_silence(fmt, pad):
    core = callcore.ModelCallCore("CA1", greet=False, audio_format=fmt)
    (update,) = core.on_open()
    assert ("audio/pcma" in update.text) == (fmt == "pcma")
    created = {"type": "response.created", "event_id": "event_0",
               "response": {"id": "resp_1", "object": "realtime.response", "status": "in_progress", "output": []}}
    core.on_event(rt.parse_server_event(json.dumps(created)), 0, IDLE)
    core.on_event(rt.parse_server_event(_delta("resp_1", b"\x11" * (FRAME_BYTES + 10))), 0, IDLE)
    done = {"type": "response.output_audio.done", "event_id": "event_2", "response_id": "resp_1", "item_id": "item_1",
            "output_index": 0, "content_index": 0}
    actions = core.on_event(rt.parse_server_event(json.dumps(done)), 0, IDLE)
    (last,) = [a for a in actions if isinstance(a, callcore.WriteFrames)]
    assert last.audio == b"\x11" * 10 + bytes([pad]) * (FRAME_BYTES - 10)
    with pytest.raises(ValueError):
        callcore.ModelCallCore("CA1", audio_format="pcm")


def test_the_drivers_take_the_law_into_their_records_and_the_replay_rebuilds_them():
    controller = CallController("CA1", audio_format="pcma")
    assert controller.record_header()["audio_format"] == "pcma" and controller.core.audio_format == "pcma"
    assert "audio_format" not in CallController("CA1").record_header()  # a mu-law record's header is unchanged
    assert driver_from_header(controller.record_header()).core.audio_format == "pcma"
    spine = SpineDriver("CA1", audio_format="pcma")
    assert driver_from_header(spine.record_header()).core.audio_format == "pcma"
    assert "audio_format" not in SpineDriver("CA1").record_header()["args"]


def test_an_a_law_records_agent_track_is_written_in_mu_law():
    recorder = CallRecorder(SpineDriver("CA1", greet=False, audio_format="pcma"))
    recorder.start(0)
    created = {"type": "response.created", "event_id": "event_0",
               "response": {"id": "resp_1", "object": "realtime.response", "status": "in_progress", "output": []}}
    recorder.on_model_event(json.dumps(created), 1_000_000, IDLE)
    alaw = bytes([0x2A]) * FRAME_BYTES
    recorder.on_model_event(_delta("resp_1", alaw), 2_000_000, IDLE)
    recorder.on_carrier_stop(100_000_000)  # the call goes on past the frame, so it is heard
    result = replay(recorder.header, recorder.entries)
    assert result.identical and result.audio_format == "pcma"
    assert agent_track(result, 0).endswith(alaw.translate(ALAW_TO_ULAW))


# ---- the model simulator -----------------------------------------------------------------------------------


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_the_simulator_speaks_a_law_when_asked_its_mu_law_clip_in_a_law_dithered_there(naming):
    ulaw_session = Harness(naming=naming, seed=11)
    ulaw_session.send(rt.response_create())
    ulaw = audio_of(ulaw_session.run_all())
    alaw_session = Harness(naming=naming, seed=11, audio_format="pcma")
    out = alaw_session.send(rt.response_create())
    created = out[0]["response"]
    if naming == "ga":
        assert created["audio"]["output"]["format"] == {"type": "audio/pcma"}
    else:
        assert created["output_audio_format"] == "g711_alaw"
    alaw = audio_of(alaw_session.run_all())
    # the same clip in A-law, dithered on A-law codes: the quiet samples move, by one code at most
    assert ulaw and len(alaw) == len(ulaw)
    undithered = np.frombuffer(ulaw.translate(ULAW_TO_ALAW), dtype=np.uint8).astype(int) ^ 0x55
    got = np.frombuffer(alaw, dtype=np.uint8).astype(int) ^ 0x55
    moved = got != undithered
    assert 0.05 < moved.mean() < 0.8
    assert np.all(np.abs((got & 0x7F) - (undithered & 0x7F))[moved] <= 1)
    record = alaw_session.session.record.responses[0]
    assert record.audio == alaw and b"".join(record.frames()) == alaw.translate(ALAW_TO_ULAW)


def test_two_a_law_responses_of_one_clip_share_no_frame():
    """Frame identity (voicecore/sim/model/clips.py) holds in A-law, and in the mu-law a carrier measures it as."""
    h = Harness(naming="ga", audio_format="pcma", seed=3)
    h.send(rt.response_create(metadata={"sim_clip": "agent_greeting"}))
    h.run_all()
    h.send(rt.response_create(metadata={"sim_clip": "agent_greeting"}))
    h.run_all()
    first, second = h.session.record.responses
    assert first.clip_name == second.clip_name and len(first.audio) == len(second.audio) > 10 * FRAME_BYTES
    whole = len(first.audio) // FRAME_BYTES
    assert not set(first.frames()[:whole]) & set(second.frames()[:whole])


def test_the_simulator_hears_a_law_caller_audio():
    h = Harness(naming="ga", audio_format="pcma", turn_detection={"type": "server_vad", "silence_duration_ms": 500,
                                                                  "prefix_padding_ms": 300})
    out = h.append(caller_turn("caller_basic_price").translate(ULAW_TO_ALAW))
    out += h.run_until(h.now + 200)
    assert types(out)[:2] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"]
    assert h.session.record.speech[0].caller_clip == "caller_basic_price"

