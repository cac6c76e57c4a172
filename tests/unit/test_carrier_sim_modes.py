"""The carrier simulator's carrier modes (voicecore/sim/carrier_modes_core.py), each adapter against its
carrier module: what the adapter sends is read by that carrier's stream protocol (the gateway's side) and
what the gateway's encoder writes is read by the adapter, on a fake clock (times are plain numbers).

Also: the answer documents each carrier module writes are followed, the answer webhooks verify with each
carrier module's own check, the carrier-neutral core measures the same timeline the same way whatever the
carrier, and the tolerant matcher (voicecore/sim/audio_match.py) ties a resampled round trip to the
model's frames.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import orjson
import pytest

from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.events import (
    ENCODING_L16,
    ENCODING_PCMA,
    ENCODING_PCMU,
    CallerAudio,
    Cleared,
    MarkEcho,
    StreamStarted,
)
from voicecore.sim import audio_match
from voicecore.sim import carrier_modes_core as modes
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier_core import CarrierCall
from voicecore.sim.carrier_modes_core import (
    CallIdentity,
    CarrierCredentials,
    ExotelCall,
    PlivoCall,
    TelnyxCall,
    VonageCall,
)
from voicecore.sim.model.clips import dither_ulaw
from voicecore.sim.model.records import ResponseRecord
from voicecore.timing import FRAME_BYTES, FRAME_MS

TOKEN = "tok-abc_123"
CALL = "v3:" + "A" * 52
STREAM = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9"
UUID = "63f61863-4a51-4f6b-86e1-46edebcf9356"
EXOTEL_SID = "e" * 32
CREDENTIALS = CarrierCredentials(twilio_auth_token="t" * 32, telnyx_private_key="11" * 32, plivo_auth_token="plivo-token",
                                  vonage_signature_secret="vonage-secret-that-is-long-enough!", exotel_username="key",
                                  exotel_password="secret")


def caller_clip(frames: int = 20) -> bytes:
    """Distinct, loud mu-law frames (so a round trip can be checked frame by frame)."""
    speech = (load_clip("agent_hours") * 4)[4000:4000 + frames * FRAME_BYTES]
    assert len(speech) == frames * FRAME_BYTES
    return dither_ulaw(speech, 7)


def make(carrier: str, caller_audio: bytes = b"", **kwargs):
    if carrier == "telnyx":
        call = TelnyxCall(CALL, STREAM, "user-1", caller_audio, 4, custom_parameters=[("session_token", TOKEN)], **kwargs)
    elif carrier == "plivo":
        call = PlivoCall(UUID, STREAM, "MA123", caller_audio, 4, extra_headers=f"session_token={TOKEN}", **kwargs)
    elif carrier == "vonage":
        call = VonageCall(UUID, {"call_id": UUID, "session_token": TOKEN}, caller_audio, 4, **kwargs)
    else:
        call = ExotelCall(EXOTEL_SID, "s" * 32, "acct", caller_audio, 4, custom_parameters=[("session_token", TOKEN)],
                          **kwargs)
    return call


def protocol_for(carrier: str):
    return {"telnyx": telnyx.TelnyxStreamProtocol, "plivo": plivo.PlivoStreamProtocol,
            "vonage": vonage.VonageStreamProtocol, "exotel": exotel.ExotelStreamProtocol}[carrier]()


def feed(protocol, messages) -> list:
    events = []
    for message in messages:
        events += protocol.receive_binary(message) if isinstance(message, bytes) else protocol.receive_text(message)
    return events


CARRIERS = ("telnyx", "plivo", "vonage", "exotel")


# ----- what the adapter sends, as the gateway's protocol reads it --------------------------------------


@pytest.mark.parametrize("carrier", CARRIERS)
def test_the_opening_starts_a_stream_carrying_the_answers_parameters(carrier):
    call = make(carrier)
    events = feed(protocol_for(carrier), call.opening_messages())
    started = [e for e in events if isinstance(e, StreamStarted)]
    assert len(started) == 1, events
    assert started[0].call_id == call.call_sid
    assert started[0].custom_parameter("session_token") == TOKEN
    with pytest.raises(RuntimeError):
        call.opening_messages()


@pytest.mark.parametrize("carrier, kwargs", [
    ("telnyx", {}), ("telnyx", {"encoding": ENCODING_PCMA}), ("plivo", {}),
    ("plivo", {"encoding": ENCODING_L16, "sample_rate_hz": 16000}), ("vonage", {"sample_rate_hz": 8000}),
    ("vonage", {}), ("exotel", {}), ("exotel", {"encoding": ENCODING_PCMU}),
])
def test_caller_audio_arrives_on_the_20_ms_clock_in_the_carriers_format(carrier, kwargs):
    clip = caller_clip(20)
    call = make(carrier, clip, **kwargs)
    protocol = protocol_for(carrier)
    events = feed(protocol, call.opening_messages())
    started = next(e for e in events if isinstance(e, StreamStarted))
    messages = []
    for tick in range(20):
        messages += call.tick_send(1000.0 + tick * FRAME_MS)
    messages += call.stop_messages(1400.0)
    if carrier == "exotel":
        assert len([m for m in messages if '"media"' in m]) == 4  # 100 ms a message
    audio = [e for e in feed(protocol, messages) if isinstance(e, CallerAudio)]
    codec = EdgeTranscoder(started.encoding, started.sample_rate_hz)
    ulaw = b"".join(codec.to_ulaw(e.payload) for e in audio)
    assert call.metrics.media_sent == 20
    if call.exact_audio:
        assert ulaw.translate(bytes.maketrans(b"\x7f", b"\xff")) == clip.translate(bytes.maketrans(b"\x7f", b"\xff"))
    else:  # A-law or resampled: the same speech, not the same bytes
        table = audio_match._ULAW
        delay = codec.delay_ms * 2 * 8  # resampled both ways: 20 ms in samples
        got = table[np.frombuffer(ulaw, np.uint8)][delay:]
        want = table[np.frombuffer(clip, np.uint8)][: len(got)]
        assert np.corrcoef(got, want)[0, 1] > 0.99


def test_telnyx_jitter_sends_frames_out_of_order_and_the_gateways_window_puts_them_back():
    clip = caller_clip(200)
    call = make("telnyx", clip, jitter_probability=0.2, jitter_seed=3)
    protocol = protocol_for("telnyx")
    feed(protocol, call.opening_messages())
    messages = []
    for tick in range(200):
        messages += call.tick_send(tick * FRAME_MS)
    messages += call.stop_messages(4000.0)
    chunks = [int(json.loads(m)["media"]["chunk"]) for m in messages if '"media"' in m]
    assert sorted(chunks) == list(range(1, 201)) and chunks != sorted(chunks)
    assert call.frames_reordered > 10
    audio = [e for e in feed(protocol, messages) if isinstance(e, CallerAudio)]
    assert b"".join(e.payload for e in audio) == clip  # released in order, nothing skipped
    stats = protocol.statistics()
    assert stats.frames_reordered == call.frames_reordered and stats.gaps_skipped == 0


@pytest.mark.parametrize("carrier", CARRIERS)
def test_dtmf_and_stop_are_the_carriers(carrier):
    call = make(carrier)
    protocol = protocol_for(carrier)
    feed(protocol, call.opening_messages())
    events = feed(protocol, [call.send_dtmf("7")])
    assert [e.digit for e in events] == ["7"]
    stop = call.stop_messages(10.0)
    if carrier == "vonage":
        assert stop == []  # Vonage ends a call by closing the socket
        assert protocol.socket_closed()
    else:
        assert type(feed(protocol, stop)[-1]).__name__ == "StreamStopped"
    assert call.tick_send(1000.0) == []


# ----- what the gateway sends, as the adapter reads it ---------------------------------------------------


def gateway_side(carrier: str, call):
    """The gateway's encoder for the call's stream: (media(ulaw frame) -> messages, mark, clear)."""
    if carrier == "telnyx":
        encoder = telnyx.TelnyxOutboundEncoder()
        return (lambda f: [encoder.media(f).data]), (lambda n: encoder.mark(n).data), encoder.clear().data
    if carrier == "plivo":
        encoder = plivo.PlivoOutboundEncoder(STREAM)
        return (lambda f: [encoder.media(f).data]), (lambda n: encoder.mark(n).data), encoder.clear().data
    if carrier == "vonage":
        encoder = vonage.VonageOutboundEncoder(call.sample_rate_hz)
        codec = EdgeTranscoder(ENCODING_L16, call.sample_rate_hz)
        return ((lambda f: [encoder.media(codec.from_ulaw(f)).data]), (lambda n: encoder.mark(n).data),
                encoder.clear().data)
    encoder = exotel.ExotelOutboundEncoder("s" * 32, ENCODING_L16, 8000)
    batcher = encoder.batcher()
    codec = EdgeTranscoder(ENCODING_L16, 8000)

    def media(frame):
        return [o.data for o in encoder.encode(batcher.push(codec.from_ulaw(frame)))]

    def mark(name):
        items = batcher.mark(name, end=name.endswith(":end"))
        return [o.data for o in encoder.encode(items)]

    return media, mark, encoder.clear().data


def deliver(call, data: bytes | list, now_ms: float) -> None:
    """The shell's path: binary frames as bytes, text through the fast path or the full reader."""
    if isinstance(data, list):
        for item in data:
            deliver(call, item, now_ms)
        return
    if call.BINARY_MESSAGES and not data.startswith(b"{"):
        call.receive(data, now_ms)
    elif not call.receive_fast(data, now_ms):
        call.receive(data.decode(), now_ms)


def echoes(carrier, call) -> list:
    protocol = protocol_for(carrier)
    feed(protocol, make(carrier).opening_messages())  # a protocol past its start, to read echoes with
    out = []
    for message in call.messages_to_send():
        out += protocol.receive_binary(message) if isinstance(message, bytes) else protocol.receive_text(message)
    return out


@pytest.mark.parametrize("carrier", CARRIERS)
def test_marks_come_back_when_the_audio_before_them_has_played(carrier):
    call = make(carrier)
    call.opening_messages()
    media, mark, _clear = gateway_side(carrier, call)
    for n in range(10):  # Exotel: one 200 ms chunk
        for message in media(bytes([0x10 + n]) * FRAME_BYTES):
            deliver(call, message, 0.0)
    deliver(call, mark("1:10:end"), 0.0)
    assert call.metrics.frames_received == 10 and call.metrics.marks_received == 1
    call.tick_play(9 * FRAME_MS)  # the 10th frame is playing
    assert echoes(carrier, call) == []
    call.tick_play(10 * FRAME_MS)
    assert [e.name for e in echoes(carrier, call) if isinstance(e, MarkEcho)] == ["1:10:end"]
    stats = call.statistics()
    assert stats.frames_played == 10 and stats.protocol_errors == 0 and stats.stale_frames == 0


@pytest.mark.parametrize("carrier, echoed", [("telnyx", True), ("plivo", False), ("vonage", False), ("exotel", True)])
def test_a_clear_drops_the_queue_and_returns_or_drops_pending_marks_as_the_carrier_does(carrier, echoed):
    call = make(carrier)
    call.opening_messages()
    media, mark, clear = gateway_side(carrier, call)
    for n in range(10):
        for message in media(bytes([0x20 + n]) * FRAME_BYTES):
            deliver(call, message, 0.0)
        if n == 4:
            deliver(call, mark("1:5"), 0.0)
    deliver(call, mark("1:10:end"), 0.0)
    call.note_bargein(30.0)
    call.tick_play(30.0)
    deliver(call, clear, 35.0)
    events = echoes(carrier, call)
    names = [e.name for e in events if isinstance(e, MarkEcho)]
    assert names == (["1:5", "1:10:end"] if echoed else [])
    assert any(isinstance(e, Cleared) for e in events) == (carrier in ("plivo", "vonage"))
    m = call.metrics
    assert m.clears_received == 1 and m.bargein_latency_ms == [5.0]
    assert m.marks_echoed_on_clear == (2 if echoed else 0) and m.marks_dropped_on_clear == (0 if echoed else 2)
    assert m.frames_dropped_by_clear == 8  # two frames played (ticks 0 and 20), eight thrown away
    # The next response plays from a clean queue.
    for n in range(10):
        for message in media(bytes([0x40 + n]) * FRAME_BYTES):
            deliver(call, message, 40.0)
    deliver(call, mark("2:10:end"), 40.0)
    call.tick_play(40.0 + 11 * FRAME_MS)
    assert call.statistics().stale_frames == 0 and call.played_frames_of_tag(2) == 10


def test_the_core_measures_a_timeline_the_same_whatever_the_carrier():
    """The carrier-neutral core: the same frames, marks and clears at the same times give the same figures
    on the Twilio adapter as on any other (their messages differ, their measurements must not)."""
    timeline = []
    t = 0.0
    for tag in (1, 2, 3):
        for n in range(1, 16):
            timeline.append(("media", bytes([tag * 16 + n % 16]) * FRAME_BYTES, t))
            if n % 5 == 0:
                timeline.append(("mark", f"{tag}:{n}" + (":end" if n == 15 else ""), t))
            t += 13.0 if tag != 2 else 31.0  # ahead of real time, then behind (underruns)
        if tag == 2:
            timeline.append(("bargein", None, t))
            timeline.append(("clear", None, t + 4.0))
    from voicecore.carriers.twilio.stream import OutboundEncoder

    twilio = CarrierCall("CA" + "1" * 32, "MZ" + "0" * 32, "AC" + "2" * 32, TOKEN, b"", 4, play_phase_ms=0.0)
    twilio.opening_messages()
    encoder = OutboundEncoder("MZ" + "0" * 32)
    telnyx_call = make("telnyx", play_phase_ms=0.0)
    telnyx_call.opening_messages()
    t_media, t_mark, t_clear = gateway_side("telnyx", telnyx_call)
    for kind, data, at in timeline:
        for call in (twilio, telnyx_call):
            call.tick_play(at)
        if kind == "media":
            assert twilio.receive_fast(encoder.media(data), at)
            deliver(telnyx_call, t_media(data)[0], at)
        elif kind == "mark":
            assert twilio.receive_fast(encoder.mark(data), at)
            deliver(telnyx_call, t_mark(data), at)
        elif kind == "clear":
            twilio.receive(encoder.clear().decode(), at)
            deliver(telnyx_call, t_clear, at)
        else:
            twilio.note_bargein(at)
            telnyx_call.note_bargein(at)
    for call in (twilio, telnyx_call):
        call.tick_play(t + 1000.0)
    assert twilio.statistics() == telnyx_call.statistics()
    assert twilio.metrics == telnyx_call.metrics
    assert [repr(f) for f in twilio.played] == [repr(f) for f in telnyx_call.played]
    assert twilio.metrics.underruns > 0 and twilio.metrics.clears_received == 1


@pytest.mark.parametrize("carrier, bad, reason", [
    ("telnyx", '{"event":"media","media":{"payload":"@@"}}', "rejected: invalid_media"),
    ("telnyx", b"\x00\x01", "binary frame"),
    ("plivo", b"\x00\x01", "binary frame"),
    ("plivo", '{"event":"playAudio","streamId":"other","media":{}}', "rejected: wrong streamId"),
    ("vonage", b"\x00" * 100, "rejected: audio frame is not 20 ms"),
    ("vonage", '{"action":"dance"}', "rejected: unknown action"),
    ("exotel", '{"event":"media","stream_sid":"' + "s" * 32 + '","media":{"payload":"AAAA"}}',
     "rejected: chunk below the minimum"),
])
def test_what_the_carrier_would_refuse_is_counted_never_raised(carrier, bad, reason):
    call = make(carrier)
    call.opening_messages()
    call.receive(bad, 0.0)
    assert call.metrics.protocol_errors == 1 and call.metrics.error_reasons == [reason]
    if carrier == "telnyx":  # Telnyx answers with an `error` frame
        assert json.loads(call.messages_to_send()[-1])["event"] == "error"


def test_exotel_chunks_of_100_ms_and_more_play_frame_by_frame():
    call = make("exotel")
    call.opening_messages()
    media, mark, _clear = gateway_side("exotel", call)
    sent = []
    for n in range(25):
        sent += media(bytes([0x30 + n]) * FRAME_BYTES)
    sent += mark("1:25:end")  # pads the last chunk with silence up to the minimum
    for message in sent:
        deliver(call, message, 0.0)
    assert call.metrics.frames_received == 30  # 2 chunks of 10 frames, the last padded from 5 to 10
    call.tick_play(31 * FRAME_MS)
    assert call.statistics().frames_played == 30
    assert [f.payload[0] for f in call.played[:25]] == [0x30 + n for n in range(25)]


# ----- following the answer --------------------------------------------------------------------------------


def test_the_texml_answer_is_followed_to_its_stream():
    body = telnyx.texml_connect_stream("wss://gw.example/telnyx/stream?x=1", {"session_token": TOKEN}, codec="PCMA")
    target = modes.parse_answer("telnyx", body.encode())
    assert target.url == "wss://gw.example/telnyx/stream?x=1" and target.parameters == (("session_token", TOKEN),)
    assert target.encoding == ENCODING_PCMA and target.problems == ()


def test_the_plivo_answer_is_followed_to_its_stream():
    body = plivo.stream_xml("wss://gw.example/plivo/stream", {"session_token": TOKEN, "other": "x"})
    target = modes.parse_answer("plivo", body.encode())
    assert target.url == "wss://gw.example/plivo/stream" and ("session_token", TOKEN) in target.parameters
    assert (target.encoding, target.sample_rate_hz) == (ENCODING_PCMU, 8000)
    call = PlivoCall(UUID, STREAM, "MA1", extra_headers=target.raw_extra_headers)
    started = next(e for e in feed(protocol_for("plivo"), call.opening_messages()) if isinstance(e, StreamStarted))
    assert started.custom_parameter("session_token") == TOKEN
    # Plivo's default content type is L16 at 8 kHz
    default = modes.parse_answer("plivo", b'<Response><Stream bidirectional="true" keepCallAlive="true">ws://h/p</Stream></Response>')
    assert (default.encoding, default.sample_rate_hz) == (ENCODING_L16, 8000)
    lonely = modes.parse_answer("plivo", b"<Response><Stream>ws://h/p</Stream></Response>")
    assert len(lonely.problems) == 2


@pytest.mark.parametrize("rate", [8000, 16000])
def test_the_ncco_is_followed_and_its_headers_come_back_in_websocket_connected(rate):
    ncco = vonage.ncco_connect_websocket("wss://gw.example/vonage/stream", {"call_id": UUID, "session_token": TOKEN}, rate)
    target = modes.parse_answer("vonage", orjson.dumps(ncco))
    assert target.url == "wss://gw.example/vonage/stream" and target.sample_rate_hz == rate
    call = VonageCall(UUID, target.headers, sample_rate_hz=rate)
    started = next(e for e in feed(protocol_for("vonage"), call.opening_messages()) if isinstance(e, StreamStarted))
    assert started.call_id == UUID and started.custom_parameter("session_token") == TOKEN
    assert call.exact_audio == (rate == 8000)


def test_the_exotel_answer_is_followed_with_its_query_as_custom_parameters():
    url = exotel.voicebot_stream_url("wss://gw.example/exotel/stream", sample_rate_hz=16000,
                                     custom_parameters=[("session_token", TOKEN)])
    target = modes.parse_answer("exotel", exotel.voicebot_url_response(url))
    assert target.url == url and target.sample_rate_hz == 16000 and target.parameters == (("session_token", TOKEN),)
    # credentials in the URL become Basic auth on the upgrade, and leave the URL
    with_auth = modes.parse_answer("exotel", orjson.dumps({"url": "wss://k:s@gw.example:8443/exotel/stream"}))
    assert with_auth.url == "wss://gw.example:8443/exotel/stream"
    headers = modes.stream_headers("exotel", with_auth, CREDENTIALS, nonce="n", now_s=0)
    assert exotel.check_basic_auth(headers["Authorization"], "k", "s")
    # percent-encoded credentials are decoded first, as an HTTP client does; a URL without any sends none
    encoded = modes.parse_answer("exotel", orjson.dumps({"url": exotel.with_basic_auth(url, "k y", "p@ss:w")}))
    assert encoded.url == url
    assert exotel.check_basic_auth(modes.stream_headers("exotel", encoded, CREDENTIALS, nonce="n", now_s=0)[
        "Authorization"], "k y", "p@ss:w")
    assert modes.stream_headers("exotel", target, CREDENTIALS, nonce="n", now_s=0) == {}


@pytest.mark.parametrize("carrier, body", [
    ("telnyx", b"<Response><Say>hi</Say></Response>"), ("plivo", b"not xml"), ("vonage", b'[{"action":"talk"}]'),
    ("exotel", b'{"url":"https://not-a-socket"}'),
])
def test_an_answer_that_starts_no_stream_is_refused(carrier, body):
    with pytest.raises(ValueError):
        modes.parse_answer(carrier, body)


# ----- the signed webhooks ------------------------------------------------------------------------------------


IDS = CallIdentity(CALL, "acct-1", STREAM, "session-1", "+15005550006", "+15005550001")


def test_telnyx_signs_with_the_private_half_of_the_stacks_public_key():
    request = modes.answer_webhook("telnyx", "http://127.0.0.1:1/", IDS, CREDENTIALS, now_s=1_700_000_000, nonce="n")
    headers = dict(request.headers)
    public = CREDENTIALS.stack_settings()["telnyx_public_key"]
    assert telnyx.verify_webhook(public, headers[telnyx.SIGNATURE_HEADER], headers[telnyx.TIMESTAMP_HEADER],
                                 request.body, 1_700_000_010)
    assert request.url == "http://127.0.0.1:1/telnyx/voice" and dict(parse_qsl(request.body.decode()))["CallSid"] == CALL


def test_plivo_signs_v3_over_url_form_and_nonce_and_the_upgrade_too():
    request = modes.answer_webhook("plivo", "http://127.0.0.1:1", IDS, CREDENTIALS, now_s=0, nonce="12345")
    headers = dict(request.headers)
    form = dict(parse_qsl(request.body.decode()))
    assert form["CallUUID"] == CALL
    assert plivo.validate_signature_v3("plivo-token", request.url, headers[plivo.SIGNATURE_V3_NONCE_HEADER],
                                       headers[plivo.SIGNATURE_V3_HEADER], form, "POST")
    target = modes.StreamTarget(url="wss://gw.example/plivo/stream?a=b")
    upgrade = modes.stream_headers("plivo", target, CREDENTIALS, nonce="999", now_s=0)
    assert plivo.validate_signature_v3("plivo-token", plivo.upgrade_signature_url(target.url), "999",
                                       upgrade[plivo.SIGNATURE_V3_HEADER], None, "GET")


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_vonage_signs_a_jwt_over_the_body(method):
    request = modes.answer_webhook("vonage", "http://127.0.0.1:1", IDS, CREDENTIALS, now_s=1_700_000_000, nonce="j",
                                   answer_method=method)
    assert request.method == method
    authorization = dict(request.headers)["Authorization"]
    assert vonage.verify_signed_webhook(authorization, request.body, CREDENTIALS.vonage_signature_secret, 1_700_000_001)
    fields = json.loads(request.body) if method == "POST" else dict(parse_qsl(urlsplit(request.url).query))
    assert fields["uuid"] == CALL


def test_vonage_signs_the_upgrade_only_when_the_ncco_asks():
    headers = {"call_id": UUID, "session_token": TOKEN}
    plain = modes.parse_answer("vonage", orjson.dumps(vonage.ncco_connect_websocket("wss://gw.example/vonage/stream",
                                                                                    headers)))
    assert modes.stream_headers("vonage", plain, CREDENTIALS, nonce="j", now_s=1_700_000_000) == {}
    signed = modes.parse_answer("vonage", orjson.dumps(vonage.ncco_connect_websocket(
        "wss://gw.example/vonage/stream", headers, signed_upgrade=True)))
    upgrade = modes.stream_headers("vonage", signed, CREDENTIALS, nonce="j", now_s=1_700_000_000)
    assert vonage.verify_upgrade_jwt(upgrade["Authorization"], CREDENTIALS.vonage_signature_secret, 1_700_000_001)
    custom = modes.parse_answer("vonage", orjson.dumps([{"action": "connect", "endpoint": [{
        "type": "websocket", "uri": "wss://gw.example/vonage/stream", "content-type": "audio/l16;rate=8000",
        "authorization": {"type": "custom", "value": "ApiKey X9Z"}}]}]))
    assert modes.stream_headers("vonage", custom, CREDENTIALS, nonce="j", now_s=0) == {"Authorization": "ApiKey X9Z"}
    with pytest.raises(ValueError):
        modes.parse_answer("vonage", orjson.dumps([{"action": "connect", "endpoint": [{
            "type": "websocket", "uri": "wss://gw.example/vonage/stream", "content-type": "audio/l16;rate=8000",
            "authorization": {"type": "basic"}}]}]))


def test_telnyx_puts_nothing_on_the_upgrade():
    target = modes.StreamTarget(url="wss://gw.example/telnyx/stream")
    assert modes.stream_headers("telnyx", target, CREDENTIALS, nonce="n", now_s=0) == {}


def test_exotel_asks_with_basic_auth():
    request = modes.answer_webhook("exotel", "http://127.0.0.1:1", IDS, CREDENTIALS, now_s=0, nonce="n")
    assert request.method == "GET" and dict(parse_qsl(urlsplit(request.url).query))["CallSid"] == CALL
    assert exotel.check_basic_auth(dict(request.headers)["Authorization"], "key", "secret")


def test_credentials_travel_as_json_and_give_the_stack_its_halves_only():
    assert CarrierCredentials.from_json(CREDENTIALS.to_json()) == CREDENTIALS
    settings = CREDENTIALS.stack_settings()
    assert set(settings) == {"twilio_auth_token", "telnyx_public_key", "plivo_auth_token", "vonage_signature_secret",
                             "exotel_username", "exotel_password"}
    assert CREDENTIALS.telnyx_private_key not in json.dumps(settings)


# ----- resampled carriers: tying frames to the model's ------------------------------------------------------


def response(index: int, clip: str, seed: int, created_ms: int, sent_ms: int) -> ResponseRecord:
    audio = dither_ulaw(load_clip(clip), seed)
    record = ResponseRecord(index=index, response_id=f"resp_{index}", item_id=f"item_{index}", clip_name=clip, text="",
                            audio=audio, delta_bytes=[len(audio)], created_ms=created_ms)
    record.delta_sent_ms = [sent_ms]
    record.first_delta_ms = sent_ms
    return record


def test_a_resampled_round_trip_is_tied_to_the_right_responses_frames():
    # Two responses of the same clip (they differ only in their dither) and one of another; the call hears the
    # second and third through Vonage at 16 kHz, the gateway's transcoder one way and the simulator's the other.
    first = response(0, "agent_hours", 1, 0, 0)
    second = response(1, "agent_hours", 2, 1000, 1000)
    third = response(2, "agent_cancel", 3, 5000, 5000)
    records = [SimpleNamespace(responses=[first, second, third])]
    call = make("vonage", play_phase_ms=0.0)
    call.opening_messages()
    encoder = vonage.VonageOutboundEncoder(16000)
    codec = EdgeTranscoder(ENCODING_L16, 16000)
    now = 1000.0
    for tag, played in ((2, second), (3, third)):
        frames = played.frames()
        frames[-1] = frames[-1].ljust(FRAME_BYTES, b"\xff")
        for n, frame in enumerate(frames, 1):
            call.receive(encoder.media(codec.from_ulaw(frame)).data, now)
            if n % 5 == 0 or n == len(frames):
                call.receive(encoder.mark(f"{tag}:{n}" + (":end" if n == len(frames) else "")).data.decode(), now)
            now += FRAME_MS
        now = max(now, 5000.0)
    call.tick_play(now + 1000.0)
    assert not call.exact_audio
    stats = audio_match.match_frames(call, records)
    assert stats is not None and stats.exact == 0
    # every frame with signal is tied; the first frame is the resamplers' silence, one tail is held back
    assert stats.unmatched_with_signal == 0 and stats.matched >= stats.frames - 8
    owners = {frame: index for index, response_ in enumerate((first, second, third))
              for frame in [f.ljust(FRAME_BYTES, b"\xff") for f in response_.frames()]}
    got = [owners.get(frame.payload) for frame in call.frames]
    assert 0 not in got  # never the twin the call did not hear
    assert got.count(1) >= len(second.frames()) - 3 and got.count(2) >= len(third.frames()) - 3
    # and the stream order holds: all of the second response's frames before the third's
    assert max(i for i, g in enumerate(got) if g == 1) < min(i for i, g in enumerate(got) if g == 2)


def test_a_bit_exact_call_is_left_alone():
    call = make("telnyx")
    assert call.exact_audio and audio_match.match_frames(call, []) is None
    assert audio_match.match_frames(CarrierCall("CA1", "MZ1", "AC1", TOKEN), []) is None


def test_played_time_of_a_resampled_tag_leaves_out_the_transcoders_delay():
    call = make("vonage", play_phase_ms=0.0)
    call.opening_messages()
    media, mark, _clear = gateway_side("vonage", call)
    for n in range(5):
        deliver(call, media(b"\x10" * FRAME_BYTES)[0], 0.0)
    deliver(call, mark("1:5:end"), 0.0)
    call.tick_play(200.0)
    assert call.outbound_delay_ms == 10
    assert call.played_ms_of_tag(1) == 5 * FRAME_MS - 10
    assert call.played_ms_of_tag(9) == 0


# ----- the switches ---------------------------------------------------------------------------------------


def test_demo_and_bench_take_the_carrier_and_default_to_twilio():
    from bench.cli import bench_options_from_args
    from voicecore.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["demo"]).carrier == "twilio"
    assert parser.parse_args(["demo", "--carrier", "vonage"]).carrier == "vonage"
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--carrier", "sinch"])
    args = parser.parse_args(["bench", "--carrier", "exotel"])
    assert bench_options_from_args(args).carrier == "exotel"
    assert bench_options_from_args(parser.parse_args(["bench"])).carrier == "twilio"


@pytest.mark.parametrize("argv", [["--target", "http://127.0.0.1:9", "--auth-token", "x"], ["--soak", "60"]])
def test_the_bench_refuses_a_carrier_it_cannot_make_secrets_for(argv, capsys):
    from bench.main import run_bench
    from bench.run import BenchOptions

    options = {"--target": {"target": "http://127.0.0.1:9", "auth_token": "x"}, "--soak": {"soak": 60.0}}[argv[0]]
    assert run_bench(BenchOptions(carrier="telnyx", **options)) == 2
    assert "--carrier" in capsys.readouterr().err


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_the_chaos_bench_takes_a_carrier_whose_calls_can_re_attach(carrier):
    """The chaos scenario starts its own stack, so it makes the carrier's secrets for the run (a gateway kill on
    a Plivo or Telnyx call is followed by the <Redirect> after the stream)."""
    from bench.chaos import check_options
    from bench.run import BenchOptions, options_problem

    options = BenchOptions(carrier=carrier, scenario="chaos", chaos_faults="gateway")
    assert options_problem(options) is None
    assert check_options(options) == ""


def test_a_stalling_plivo_plays_late_and_its_buffer_keeps_what_came_meanwhile():
    """playout_stall_ms of every playout_stall_every_ms: nothing plays, no checkpoint is passed, what is queued
    waits; then it plays on at real time, late by that much. Not an underrun: the sender was not short."""
    call = make("plivo", playout_stall_ms=60, playout_stall_every_ms=200)
    call.opening_messages()
    media, mark, _clear = gateway_side("plivo", call)
    for n in range(20):  # a sender pacing by time alone: frame n 15 ms before its tick, a checkpoint every 5
        now_ms = max(0, n * FRAME_MS - 15)
        deliver(call, media(bytes([0x10 + n]) * FRAME_BYTES), now_ms)
        if n % 5 == 4:
            deliver(call, mark(f"1:{n + 1}" + (":end" if n == 19 else "")), now_ms)
    call.tick_play(40 * FRAME_MS)
    played_at = [frame.played_at_ms for frame in call.played]
    # Ticks 7-9 and 17-19 of every 10 stall: the frames after each stall play 60 ms late, then 120 ms.
    assert played_at[:7] == [k * FRAME_MS for k in range(7)]
    assert played_at[7:14] == [(k + 3) * FRAME_MS for k in range(7, 14)]
    assert played_at[14:] == [(k + 6) * FRAME_MS for k in range(14, 20)]
    assert call.metrics.stalled_ticks == 6 and call.metrics.underruns == 0
    # One frame queued ahead at first; each stall leaves its three frames in the buffer for good: 4, then 6.
    assert call.metrics.max_queued_frames == 6
    echoed = [e.name for e in echoes("plivo", call) if isinstance(e, MarkEcho)]
    assert echoed == ["1:5", "1:10", "1:15", "1:20:end"]


def test_a_playout_stall_must_be_whole_frames_shorter_than_its_period():
    for stall_ms, every_ms in ((10, 200), (200, 200), (30, 200), (20, 210)):
        with pytest.raises(ValueError):
            make("plivo", playout_stall_ms=stall_ms, playout_stall_every_ms=every_ms)
    make("plivo", playout_stall_ms=0, playout_stall_every_ms=0)  # none
