"""The gateway's decisions for Telnyx, Plivo, Vonage and Exotel (workers/gateway/carrier_core.py), table-driven,
no sockets: which carriers are served, each answer webhook's check (signed or not, the call id), the answer
documents read back the way each carrier reads them, where each stream's session token is, the arena ids,
the wire templates each call gets, and the mark ledger's settling of marks the edge never sent."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ElementTree
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.exotel.carrier import CHUNK_LEAD_MARGIN_MS
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.plivo.backlog import EchoBoundedBacklog, is_own_checkpoint
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMA, ENCODING_PCMU, StreamStarted
from voicecore.carriers.wire import RAW
from voicecore.config import ConfigError, load_config
from workers.gateway import carrier_core as cc
from workers.gateway.core import MarkDiscarded, MarkLedger, MarkPlayed, MarkUnknown

NOW_S = 1_800_000_000
BASE = "https://voice.example.com"
STREAM_BASE = "wss://voice.example.com"
PRIVATE = Ed25519PrivateKey.generate()
PUBLIC_B64 = base64.b64encode(PRIVATE.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
SETTINGS = cc.CarrierSettings(telnyx_public_key=PUBLIC_B64, plivo_auth_token="plivo-token",
                              vonage_signature_secret="vonage-secret-0123456789abcdef0123",
                              exotel_username="exo-key", exotel_password="exo-pass")
ROUTES = cc.routes(cc.CARRIERS)


def check(path, method="POST", target=None, headers=(), body=b"", settings=SETTINGS, now_s=NOW_S):
    target = target or path
    return cc.check_webhook(ROUTES[path], method, target, dict(headers), body, settings, BASE + target, now_s)


def telnyx_request(form, timestamp=NOW_S, key=PRIVATE):
    body = urlencode(form).encode()
    return [(telnyx.SIGNATURE_HEADER, telnyx.sign_webhook(key, timestamp, body)),
            (telnyx.TIMESTAMP_HEADER, str(timestamp))], body


def plivo_request(form, token="plivo-token", target="/plivo/voice"):
    nonce = "12345678901234567890"
    signature = plivo.compute_signature_v3(token, BASE + target, nonce, form, "POST")
    return [("x-plivo-signature-v3", signature), ("x-plivo-signature-v3-nonce", nonce)], urlencode(form).encode()


def vonage_auth(body=b"", secret="vonage-secret-0123456789abcdef0123", now_s=NOW_S):
    return [("authorization", vonage.sign_webhook(body, secret, now_s, "jti-1"))]


def basic(user="exo-key", password="exo-pass"):
    return [("authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())]


# --- which carriers, which routes ---------------------------------------------------------------------


def test_a_carrier_is_served_only_with_its_secret():
    assert cc.CarrierSettings().enabled() == ()
    assert SETTINGS.enabled() == cc.CARRIERS
    only_plivo = cc.CarrierSettings(plivo_auth_token="t", exotel_username="u")  # Exotel needs both
    assert only_plivo.enabled() == (cc.PLIVO,)
    # the transfer's <Dial> (REST), the re-attach step's <Redirect> and a placed call's ring and hang-up
    assert set(cc.routes((cc.PLIVO,))) == {"/plivo/voice", "/plivo/transfer", "/plivo/reattach", "/plivo/call-status"}
    assert cc.stream_paths((cc.PLIVO, cc.VONAGE)) == {"/plivo/stream": cc.PLIVO, "/vonage/stream": cc.VONAGE}
    assert set(cc.routes(cc.CARRIERS)) == {"/telnyx/voice", "/telnyx/reattach", "/telnyx/call-status", "/plivo/voice", "/plivo/transfer",
                                           "/plivo/reattach", "/plivo/call-status", "/vonage/answer", "/vonage/event",
                                           "/vonage/reattach", "/exotel/voice"}


def test_settings_come_from_the_config_and_are_checked():
    config = load_config({"VOICECORE_TELNYX_PUBLIC_KEY": PUBLIC_B64, "VOICECORE_VONAGE_SAMPLE_RATE_HZ": "8000"})
    settings = cc.CarrierSettings.from_config(config)
    assert settings.enabled() == (cc.TELNYX,) and settings.vonage_sample_rate_hz == 8000
    for bad in ({"VOICECORE_TELNYX_PUBLIC_KEY": "not base64!"}, {"VOICECORE_VONAGE_SAMPLE_RATE_HZ": "24000"},
                {"VOICECORE_EXOTEL_USERNAME": "only-user"}):
        with pytest.raises(ConfigError):
            load_config(bad)


# --- answer webhooks ------------------------------------------------------------------------------------


def test_telnyx_webhook_signed_or_refused():
    headers, body = telnyx_request({"CallSid": "v3:abc-DEF_123", "AccountSid": "acc", "From": "+1", "To": "+2"})
    assert check("/telnyx/voice", headers=headers, body=body) == cc.AnswerRequest(cc.TELNYX, cc.ANSWER, "v3:abc-DEF_123")
    other_key = Ed25519PrivateKey.generate()
    for bad_headers, bad_body, now_s in (
        (telnyx_request({"CallSid": "v3:x"}, key=other_key)[0], body, NOW_S),  # another key
        (headers, body + b"&x=1", NOW_S),  # body altered
        (headers, body, NOW_S + 3600),  # replayed an hour later
        ((), body, NOW_S),  # unsigned
    ):
        assert check("/telnyx/voice", headers=bad_headers, body=bad_body, now_s=now_s).status == 403
    headers, body = telnyx_request({"From": "+1"})
    assert check("/telnyx/voice", headers=headers, body=body) == cc.Refusal(400, "no usable call id")


def test_plivo_webhook_signed_or_refused():
    form = {"CallUUID": "0a1b2c3d-0000-4000-8000-123456789abc", "From": "+1", "To": "+2", "Direction": "inbound"}
    headers, body = plivo_request(form)
    assert check("/plivo/voice", headers=headers, body=body).call_id == form["CallUUID"]
    assert check("/plivo/voice", headers=plivo_request(form, token="other")[0], body=body).status == 403
    assert check("/plivo/voice", headers=headers, body=body.replace(b"inbound", b"outbound")).status == 403
    assert check("/plivo/voice", headers=headers, body=b"%zz").status == 400
    # The query is signed too: a request to another URL does not pass.
    target = "/plivo/voice?x=1"
    assert check("/plivo/voice", target=target, headers=headers, body=body).status == 403
    headers_q, body_q = plivo_request(form, target=target)
    assert check("/plivo/voice", target=target, headers=headers_q, body=body_q).call_id == form["CallUUID"]


def test_vonage_answer_get_and_post_and_event():
    uuid = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
    target = "/vonage/answer?" + urlencode({"uuid": uuid, "conversation_uuid": "CON-1", "to": "1", "from": "2"})
    assert check("/vonage/answer", "GET", target, vonage_auth()).call_id == uuid
    body = json.dumps({"uuid": uuid, "to": "1", "from": "2"}).encode()
    assert check("/vonage/answer", "POST", headers=vonage_auth(body), body=body).call_id == uuid
    assert check("/vonage/answer", "POST", headers=vonage_auth(b"{}"), body=body).status == 403  # hash of another body
    assert check("/vonage/answer", "POST", headers=vonage_auth(body, secret="wrong-secret"), body=body).status == 403
    assert check("/vonage/answer", "GET", target, vonage_auth(now_s=NOW_S - 3600)).status == 403
    assert check("/vonage/answer", "POST", headers=vonage_auth(b"[]"), body=b"[]").status == 400
    event = json.dumps({"status": "answered", "uuid": uuid}).encode()
    assert check("/vonage/event", headers=vonage_auth(event), body=event) == cc.AnswerRequest(cc.VONAGE, cc.EVENT, "")
    assert check("/vonage/event", headers=(), body=event).status == 403


def test_exotel_webhook_basic_auth_and_a_call_id_when_given():
    target = "/exotel/voice?" + urlencode({"CallSid": "b6f1c0ffee0000000000000000000001", "From": "0", "To": "1"})
    assert check("/exotel/voice", "GET", target, basic()).call_id == "b6f1c0ffee0000000000000000000001"
    assert check("/exotel/voice", "GET", "/exotel/voice", basic()).call_id == cc.ANY_CALL
    assert check("/exotel/voice", "POST", headers=basic(), body=b"CallSid=abc").call_id == "abc"
    assert check("/exotel/voice", "GET", target, basic(password="nope")).status == 403
    assert check("/exotel/voice", "GET", target, ()).status == 403
    assert check("/exotel/voice", "GET", "/exotel/voice?CallSid=a%20b", basic()).status == 400  # not an id we keep


# --- answer documents, read as the carrier reads them -----------------------------------------------------


def answer(carrier, call_id="call-1"):
    content_type, body = cc.answer_document(cc.AnswerRequest(carrier, cc.ANSWER, call_id), STREAM_BASE, "TOKEN_abc-1",
                                            SETTINGS)
    return content_type, body


def test_telnyx_texml_connects_the_stream_with_the_token_as_a_parameter():
    content_type, body = answer(cc.TELNYX)
    stream = ElementTree.fromstring(body).find("Connect/Stream")
    assert content_type == b"text/xml" and stream.get("url") == STREAM_BASE + "/telnyx/stream"
    assert stream.get("bidirectionalMode") == "rtp" and stream.get("codec") == "PCMU"
    assert {p.get("name"): p.get("value") for p in stream.findall("Parameter")} == {"session_token": "TOKEN_abc-1"}


def test_plivo_xml_streams_mulaw_with_the_token_in_extra_headers():
    content_type, body = answer(cc.PLIVO)
    stream = ElementTree.fromstring(body).find("Stream")
    assert content_type == b"text/xml" and stream.text == STREAM_BASE + "/plivo/stream"
    assert (stream.get("bidirectional"), stream.get("keepCallAlive"), stream.get("contentType")) == (
        "true", "true", "audio/x-mulaw;rate=8000")
    assert stream.get("extraHeaders") == "session_token=TOKEN_abc-1"


@pytest.mark.parametrize("rate", [16000, 8000])
def test_vonage_ncco_connects_a_websocket_with_call_id_and_token_headers(rate):
    settings = cc.CarrierSettings(vonage_signature_secret="s", vonage_sample_rate_hz=rate)
    content_type, body = cc.answer_document(cc.AnswerRequest(cc.VONAGE, cc.ANSWER, "uuid-1"), STREAM_BASE, "T", settings)
    (action,) = json.loads(body)
    (endpoint,) = action["endpoint"]
    assert content_type == b"application/json" and action["action"] == "connect"
    assert endpoint == {"type": "websocket", "uri": STREAM_BASE + "/vonage/stream",
                        "content-type": f"audio/l16;rate={rate}", "headers": {"call_id": "uuid-1", "session_token": "T"},
                        "authorization": {"type": "vonage"}}  # Vonage's JWT on the upgrade (check_upgrade)


def test_exotel_answer_is_the_dynamic_url_with_the_token_in_its_query():
    content_type, body = answer(cc.EXOTEL)
    url = json.loads(body)["url"]
    parts = urlsplit(url)
    # the configured credentials ride in the URL, for Exotel to send as Basic auth on the upgrade
    assert content_type == b"application/json" and url.startswith("wss://exo-key:exo-pass@voice.example.com/exotel/stream?")
    assert parse_qs(parts.query) == {"sample-rate": ["8000"], "session_token": ["TOKEN_abc-1"]}


# --- streams -----------------------------------------------------------------------------------------------


def started(call_id="c1", stream_id="s1", parameters=(), encoding=ENCODING_PCMU, rate=8000):
    return StreamStarted(1, call_id, stream_id, "", tuple(parameters), encoding, rate, 1)


def test_session_token_per_carrier():
    assert cc.session_token(cc.TELNYX, started(parameters=[("session_token", "A")]), "/telnyx/stream") == "A"
    assert cc.session_token(cc.PLIVO, started(parameters=[("Session_Token", "B")]), "/plivo/stream") == "B"
    assert cc.session_token(cc.TELNYX, started(parameters=[("Session_Token", "B")]), "/telnyx/stream") == ""
    assert cc.session_token(cc.VONAGE, started(parameters=[("call_id", "c"), ("session_token", "C")]), "/v") == "C"
    assert cc.session_token(cc.EXOTEL, started(), "/exotel/stream?sample-rate=8000&session_token=D") == "D"
    assert cc.session_token(cc.EXOTEL, started(parameters=[("session_token", "E")]), "/exotel/stream?session_token=D") == "E"
    assert cc.session_token(cc.TELNYX, started(), "/telnyx/stream?session_token=D") == ""  # only Exotel's URL carries it


def test_token_fits_its_call_or_any_call():
    assert cc.token_fits_call("c1", started("c1"))
    assert not cc.token_fits_call("c2", started("c1"))
    assert cc.token_fits_call(cc.ANY_CALL, started("c1"))
    assert cc.token_fits_call(cc.ANY_CALL, started("c1"), cc.EXOTEL)
    # Twilio's voice webhook always names the call: its stream never took a token tied to none
    assert not cc.token_fits_call(cc.ANY_CALL, started("c1"), cc.TWILIO)
    assert cc.token_fits_call("c1", started("c1"), cc.TWILIO) and not cc.token_fits_call("c2", started("c1"), cc.TWILIO)


def test_every_served_carriers_stream_comes_through_here_twilio_included():
    assert cc.stream_paths(SETTINGS.served())["/twilio/stream"] == cc.TWILIO
    assert set(cc.stream_paths(SETTINGS.served())) == {f"/{name}/stream" for name in (cc.TWILIO,) + cc.CARRIERS}
    assert cc.stream_paths(cc.CarrierSettings().served()) == {"/twilio/stream": cc.TWILIO}
    assert cc.check_upgrade(cc.TWILIO, "/twilio/stream", {}, SETTINGS, ("ws://x",), 0.0) is None
    assert cc.whole_frames(cc.TWILIO) and not any(cc.whole_frames(name) for name in cc.CARRIERS)


def test_a_twilio_stream_plan_is_its_sids_final_templates_with_no_edge_and_the_bus_names_it_as_before():
    from voicecore.carriers.twilio import stream as twilio_stream

    sid, call, account = "MZ" + "5" * 32, "CA" + "1" * 32, "AC" + "2" * 32
    protocol = cc.new_stream_protocol(cc.TWILIO)
    twilio_started = StreamStarted(1, call, sid, account, (("session_token", "t"),), ENCODING_PCMU, 8000, 1)
    plan = cc.plan_stream(cc.TWILIO, twilio_started, protocol, SETTINGS, 512, 80)
    assert plan.templates == twilio_stream.wire_templates(sid) and not plan.templates.raw
    assert (plan.arena_law, plan.edge, plan.lead_ms, plan.backlog_frames, plan.backlog) == (ENCODING_PCMU, None, 0, 0, None)
    assert cc.session_token(cc.TWILIO, twilio_started, "/twilio/stream") == "t"
    # CallStarted as the gateway always sent it for Twilio: carrier "", the account in account_sid
    assert cc.call_ids(cc.TWILIO, twilio_started, protocol) == cc.CallIds(call, sid, account,
                                                                          custom_parameters=(("session_token", "t"),))
    other, other_protocol = started("c1", "s1"), telnyx.TelnyxStreamProtocol()
    assert cc.call_ids(cc.TELNYX, other, other_protocol) == cc.CallIds(
        "c1", cc.stream_id(cc.TELNYX, other, other_protocol), "", cc.TELNYX, "c1", "")


def test_arena_ids_keep_usable_ids_and_hash_the_rest():
    assert cc.arena_id("v3:abc-DEF_1.2") == "v3:abc-DEF_1.2"
    hashed = cc.arena_id("x" * 65)
    assert hashed == cc.arena_id("x" * 65) and len(hashed) == 41 and hashed.startswith("h")
    assert cc.arena_id("a/b") != cc.arena_id("a\\b")


def test_wire_templates_final_for_mulaw_telnyx_and_plivo_raw_otherwise():
    t_protocol = telnyx.TelnyxStreamProtocol()
    assert cc.wire_templates(cc.TELNYX, started(), t_protocol, 512) == telnyx.wire_templates(ENCODING_PCMU)
    assert cc.wire_templates(cc.TELNYX, started(encoding=ENCODING_PCMA), t_protocol, 512) is RAW
    p_protocol = plivo.PlivoStreamProtocol()
    side = plivo.PlivoCarrierSide("st-1", "c1")
    (event,) = p_protocol.receive_text(side.start())
    assert cc.wire_templates(cc.PLIVO, event, p_protocol, 512) == plivo.wire_templates("st-1")
    assert cc.wire_templates(cc.PLIVO, event, p_protocol, 256) is RAW  # would not fit a small wire slot
    side16 = plivo.PlivoCarrierSide("st-2", "c1", content_type=plivo.CONTENT_TYPE_L16, sample_rate_hz=16000)
    p16 = plivo.PlivoStreamProtocol()
    (event16,) = p16.receive_text(side16.start())
    assert cc.wire_templates(cc.PLIVO, event16, p16, 512) is RAW
    assert cc.wire_templates(cc.VONAGE, started(encoding=ENCODING_L16, rate=16000), None, 512) is RAW
    assert cc.wire_templates(cc.EXOTEL, started(), None, 512) is RAW


def test_each_carrier_stream_gets_an_edge_that_speaks_its_format():
    vonage_edge = cc.new_edge(cc.VONAGE, started(encoding=ENCODING_L16, rate=16000), vonage.VonageStreamProtocol(), True)
    assert vonage_edge.transcoder.carrier_frame_bytes == 640
    e_protocol = exotel.ExotelStreamProtocol()
    side = exotel.ExotelCarrierSide("SS1", "CA1", "AC1")
    events = [e for m in side.opening_messages() for e in e_protocol.receive_text(m)]
    assert cc.new_edge(cc.EXOTEL, events[-1], e_protocol, True).sink.batcher is not None
    assert cc.new_edge(cc.TELNYX, started(), telnyx.TelnyxStreamProtocol(), False).sink is None
    assert isinstance(cc.new_stream_protocol(cc.PLIVO), plivo.PlivoStreamProtocol)
    with pytest.raises(ValueError):
        cc.new_stream_protocol("skype")  # no such carrier


def test_an_exotel_call_keeps_a_chunk_and_a_margin_ahead_and_the_others_the_pacers_lead():
    """Exotel's edge sends a 200 ms chunk only once its last frame came: its calls keep 300 ms in the
    carrier's buffer (control word LEAD_NS), or the configured lead if that is more; every other carrier's
    edge sends each frame as it comes, so its calls keep the pacer's configured lead (0)."""
    e_protocol = exotel.ExotelStreamProtocol()
    side = exotel.ExotelCarrierSide("SS1", "CA1", "AC1")
    events = [e for m in side.opening_messages() for e in e_protocol.receive_text(m)]
    exotel_edge = cc.new_edge(cc.EXOTEL, events[-1], e_protocol, True)
    assert exotel_edge.sink.batcher.chunk_bytes == 3200  # 200 ms of L16 at 8 kHz
    assert cc.pacer_lead_ms(cc.EXOTEL, exotel_edge, 80) == 200 + CHUNK_LEAD_MARGIN_MS == 300
    assert cc.pacer_lead_ms(cc.EXOTEL, exotel_edge, 400) == 0  # the configured lead is longer: it stands
    vonage_edge = cc.new_edge(cc.VONAGE, started(encoding=ENCODING_L16, rate=16000), vonage.VonageStreamProtocol(), True)
    assert cc.pacer_lead_ms(cc.VONAGE, vonage_edge, 80) == 0
    assert cc.pacer_lead_ms(cc.TELNYX, cc.new_edge(cc.TELNYX, started(), telnyx.TelnyxStreamProtocol(), False), 80) == 0


def test_stream_id_per_carrier():
    t_protocol = telnyx.TelnyxStreamProtocol()
    side = telnyx.TelnyxCarrierSide("stream-uuid", "v3:call", "user", custom_parameters={"session_token": "x"})
    t_protocol.receive_text(side.connected())
    (event,) = t_protocol.receive_text(side.start())
    assert cc.stream_id(cc.TELNYX, event, t_protocol) == "stream-uuid"
    assert cc.stream_id(cc.VONAGE, started("uuid-1", ""), None) == "uuid-1"


# --- marks the edge dropped unsent -------------------------------------------------------------------------


def test_a_mark_dropped_unsent_is_settled_discarded_without_skipping_the_sent_ones():
    ledger = MarkLedger()
    for name in ("1:5", "1:10", "1:15"):
        ledger.sent_mark(name)
    ledger.sent_clear()
    assert ledger.unsent("1:15") == MarkDiscarded("1:15")  # waited in the edge: never sent
    assert ledger.echoed("1:5") == MarkDiscarded("1:5")  # the carrier echoes what it had, after the clear
    assert ledger.echoed("1:10") == MarkDiscarded("1:10")
    assert ledger.unsent("9:9") == MarkUnknown("9:9") and ledger.pending == 0
    ledger.sent_mark("2:5")
    assert ledger.echoed("2:5") == MarkPlayed(2, 5, False)


# --- Plivo's buffer bounded by its checkpoint echoes (EchoBoundedBacklog) ----------------------------------


def test_only_plivo_calls_get_a_backlog_bound_in_frames():
    def bound(carrier, max_unplayed_ms):
        return cc.backlog_max_frames(carrier, cc.CarrierSettings(plivo_max_unplayed_ms=max_unplayed_ms))

    assert bound(cc.PLIVO, 400) == 20
    assert bound(cc.PLIVO, 410) == 20  # whole frames, rounded down: never above the setting
    assert bound(cc.PLIVO, 0) == 0  # the setting's 0: the lead by time alone
    for carrier in (cc.TELNYX, cc.VONAGE, cc.EXOTEL, "twilio"):
        assert bound(carrier, 400) == 0


def plivo_entries(templates, *kinds: str) -> list[bytes]:
    """Wire entries as the pacer writes them from ``templates``: "m" a frame, "k:NAME" a checkpoint, "c" a clear."""
    out = []
    for kind in kinds:
        if kind == "m":
            body = b"\xff" * 160 if templates.raw else base64.b64encode(b"\xff" * 160)
            out.append(templates.media_prefix + body + templates.media_suffix)
        elif kind == "c":
            out.append(templates.clear)
        else:
            out.append(templates.mark_prefix + kind[2:].encode() + templates.mark_suffix)
    return out


@pytest.mark.parametrize("raw", [False, True], ids=["final-mulaw", "raw-l16"])
def test_the_backlog_follows_what_was_sent_echoed_and_cleared_in_wire_order(raw):
    templates = RAW if raw else plivo.wire_templates("stream-1")
    backlog = EchoBoundedBacklog(templates)
    backlog.sent(plivo_entries(templates, *["m"] * 5, "k:1:5", "m", "m"))
    backlog.sent(plivo_entries(templates, "m", "m", "m", "k:1:10"))
    assert (backlog.unplayed_frames(), backlog.played_position_frames()) == (10, 0)
    backlog.echoed("1:5")
    assert (backlog.unplayed_frames(), backlog.played_position_frames()) == (5, 5)
    # A clear: everything sent before it is gone (played or thrown away) once it is sent; the checkpoint it
    # overtook is stale, its echo (if Plivo played it before reading the clear) confirms nothing more.
    backlog.sent(plivo_entries(templates, "m", "c", "m", "m"))
    assert (backlog.unplayed_frames(), backlog.played_position_frames()) == (2, 11)
    backlog.echoed("1:10")
    assert backlog.played_position_frames() == 11
    backlog.cleared()
    backlog.sent(plivo_entries(templates, "k:2:2:end"))
    backlog.echoed("2:2:end")
    assert (backlog.unplayed_frames(), backlog.played_position_frames()) == (0, 13)
    stats = backlog.lead.statistics()
    assert (stats.frames_sent, stats.frames_played, stats.frames_discarded) == (13, 7, 6)
    assert (stats.echoes_matched, stats.echoes_stale, stats.clears_sent, stats.clears_confirmed) == (2, 1, 1, 1)


def test_the_played_position_never_goes_back_and_never_passes_what_was_sent():
    templates = plivo.wire_templates("stream-1")
    backlog = EchoBoundedBacklog(templates)
    positions = []
    steps = [("sent", ["m", "m", "k:1:2"]), ("echo", "1:2"), ("echo", "1:2"), ("sent", ["m", "k:1:3", "c"]),
             ("echo", "1:3"), ("sent", ["m"]), ("echo", "nope"), ("cleared", None)]
    for operation, argument in steps:
        if operation == "sent":
            backlog.sent(plivo_entries(templates, *argument))
        elif operation == "echo":
            backlog.echoed(argument)
        else:
            backlog.cleared()
        positions.append(backlog.played_position_frames())
        assert backlog.played_position_frames() <= backlog.lead.sent_position_frames()
    assert positions == sorted(positions) == [0, 2, 2, 3, 3, 3, 3, 3]


@pytest.mark.parametrize("raw", [False, True], ids=["final-mulaw", "raw-l16"])
def test_unmarked_frames_get_a_checkpoint_of_the_gateways_own_so_the_bound_never_stays_full(raw):
    """A fallback line goes out without marks (they name a response's tag): without a checkpoint of the
    gateway's own, its frames would fill the bound with nothing to echo and the call would fall silent."""
    templates = RAW if raw else plivo.wire_templates("stream-1")
    backlog = EchoBoundedBacklog(templates)
    backlog.sent(plivo_entries(templates, "m", "m", "m", "m"))
    assert backlog.own_checkpoint() is None  # fewer than 5 frames since the last checkpoint
    backlog.sent(plivo_entries(templates, "m", "m", "k:1:6"))
    assert backlog.own_checkpoint() is None  # the pacer's mark is behind them
    backlog.sent(plivo_entries(templates, *["m"] * 20))
    own = backlog.own_checkpoint()
    assert own is not None and own.startswith(templates.mark_prefix) and own.endswith(templates.mark_suffix)
    name = own[len(templates.mark_prefix):len(own) - len(templates.mark_suffix)].decode()
    assert is_own_checkpoint(name) and not is_own_checkpoint("1:6") and not is_own_checkpoint("1:6:end")
    assert backlog.is_own_checkpoint(name) and not backlog.is_own_checkpoint("1:6")
    assert backlog.own_checkpoint() is None  # one per run of unmarked frames
    assert backlog.unplayed_frames() == 26
    backlog.echoed("1:6")
    backlog.echoed(name)
    assert (backlog.unplayed_frames(), backlog.played_position_frames()) == (0, 26)
    backlog.sent(plivo_entries(templates, *["m"] * 5, "c"))
    assert backlog.own_checkpoint() is None  # a clear settles what went before it: nothing to confirm


# --- the stream's upgrade ----------------------------------------------------------------------------------

BASES = cc.stream_url_bases("wss://node-a.voice.example.com", BASE)


def upgrade(carrier, headers=(), target=None, settings=SETTINGS, now_s=NOW_S, bases=BASES):
    target = target or f"/{carrier}/stream"
    head = f"GET {target} HTTP/1.1\r\nHost: voice.example.com\r\nUpgrade: websocket\r\n".encode()
    head += b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)
    return cc.check_upgrade(carrier, target, cc.upgrade_headers(head.rstrip(b"\r\n")), settings, bases, now_s)


def plivo_upgrade(url, token="plivo-token", nonce="98765432109876543210"):
    return [(plivo.SIGNATURE_V3_HEADER, plivo.sign_upgrade(token, url, nonce)), (plivo.SIGNATURE_V3_NONCE_HEADER, nonce)]


def vonage_upgrade(secret="vonage-secret-0123456789abcdef0123", now_s=NOW_S):
    return [("Authorization", vonage.sign_webhook(b"", secret, now_s, "jti-2"))]


def test_the_bases_a_stream_url_may_have_been_dialled_at():
    assert BASES == ("wss://node-a.voice.example.com", "wss://voice.example.com")
    assert cc.stream_url_bases("ws://127.0.0.1:8080/", "http://127.0.0.1:8080") == ("ws://127.0.0.1:8080",)


def test_upgrade_headers_lower_case_names_and_mark_a_repeated_one():
    head = b"GET /x HTTP/1.1\r\nHost: h\r\nX-Plivo-Signature-V3:  abc \r\nAuthorization: a\r\nauthorization: b\r\nbad line"
    assert cc.upgrade_headers(head) == {"host": "h", "x-plivo-signature-v3": "abc", "authorization": None}


@pytest.mark.parametrize("carrier, headers, expected", [
    # Telnyx signs nothing on the stream: whatever comes is let through to the session token
    (cc.TELNYX, [], None),
    (cc.TELNYX, [("Authorization", "anything")], None),
    # Plivo: V3 over a GET of the URL it dialled, node's own or the fleet's
    (cc.PLIVO, plivo_upgrade("wss://voice.example.com/plivo/stream"), None),
    (cc.PLIVO, plivo_upgrade("wss://node-a.voice.example.com/plivo/stream"), None),
    (cc.PLIVO, [], (403, "no X-Plivo-Signature-V3 on the upgrade")),
    (cc.PLIVO, plivo_upgrade("wss://voice.example.com/plivo/stream")[:1], (403, "no X-Plivo-Signature-V3 on the upgrade")),
    (cc.PLIVO, plivo_upgrade("wss://voice.example.com/plivo/stream", token="not-the-token"),
     (403, "bad X-Plivo-Signature-V3 on the upgrade")),
    (cc.PLIVO, plivo_upgrade("wss://elsewhere.example.com/plivo/stream"), (403, "bad X-Plivo-Signature-V3 on the upgrade")),
    # Vonage: its signed-webhook JWT, young enough
    (cc.VONAGE, vonage_upgrade(), None),
    (cc.VONAGE, [], (403, "no signed JWT on the upgrade")),
    (cc.VONAGE, vonage_upgrade(secret="not-the-secret-0123456789abcdef"), (403, "bad signed JWT on the upgrade")),
    (cc.VONAGE, vonage_upgrade(now_s=NOW_S - 301), (403, "bad signed JWT on the upgrade")),
    (cc.VONAGE, basic(), (403, "bad signed JWT on the upgrade")),
    # Exotel: the configured Basic credentials
    (cc.EXOTEL, basic(), None),
    (cc.EXOTEL, [], (403, "no Basic credentials on the upgrade")),
    (cc.EXOTEL, basic(password="wrong"), (403, "bad Basic credentials on the upgrade")),
    (cc.EXOTEL, basic(user="exo-key2"), (403, "bad Basic credentials on the upgrade")),
    (cc.EXOTEL, [("Authorization", "")], (403, "no Basic credentials on the upgrade")),
    (cc.EXOTEL, basic() + basic(), (400, "Authorization sent twice on the upgrade")),
    (cc.VONAGE, vonage_upgrade() + vonage_upgrade(), (400, "Authorization sent twice on the upgrade")),
    (cc.PLIVO, plivo_upgrade("wss://voice.example.com/plivo/stream") * 2, (400, "X-Plivo-Signature-V3 sent twice on the upgrade")),
], ids=lambda value: value if isinstance(value, str) else None)
def test_the_upgrade_carries_what_its_carrier_puts_on_it(carrier, headers, expected):
    refusal = upgrade(carrier, headers)
    assert (None if refusal is None else (refusal.status, refusal.reason)) == expected


def test_a_tampered_upgrade_is_refused():
    # Plivo: the signature is over the URL with its query, so another query (or path) fails it
    signed = plivo_upgrade("wss://voice.example.com/plivo/stream?a=1")
    assert upgrade(cc.PLIVO, signed, target="/plivo/stream?a=1") is None
    assert upgrade(cc.PLIVO, signed, target="/plivo/stream?a=2").status == 403
    flipped = [(signed[0][0], signed[0][1][:-2] + ("A=" if signed[0][1][-2] != "A" else "B=")), signed[1]]
    assert upgrade(cc.PLIVO, flipped, target="/plivo/stream?a=1").status == 403
    other_nonce = [signed[0], (plivo.SIGNATURE_V3_NONCE_HEADER, "1")]
    assert upgrade(cc.PLIVO, other_nonce, target="/plivo/stream?a=1").status == 403
    # Vonage: a JWT whose claims were changed (its signature no longer matches), or signed with "none"
    header, claims, signature = vonage_upgrade()[0][1].removeprefix("Bearer ").split(".")
    forged = json.loads(base64.urlsafe_b64decode(claims + "=="))
    forged["iat"] = NOW_S + 10
    tampered = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
    assert upgrade(cc.VONAGE, [("Authorization", f"Bearer {header}.{tampered}.{signature}")]).status == 403
    unsigned = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').decode().rstrip("=")
    assert upgrade(cc.VONAGE, [("Authorization", f"Bearer {unsigned}.{claims}.")]).status == 403
    # Exotel: Basic of the right user with another password, and a header that is not Basic at all
    assert upgrade(cc.EXOTEL, [("Authorization", "Bearer exo-pass")]).status == 403
    assert upgrade(cc.EXOTEL, [("Authorization", "Basic !!!")]).status == 403


@pytest.mark.parametrize("carrier", cc.CARRIERS)
def test_what_the_simulated_carrier_sends_passes_the_check_of_our_answer(carrier):
    """The answer document -> the carrier simulator's reading of it -> the headers it puts on the upgrade ->
    the gateway's check: the demo and the integration tests pass the check for the reason a real call would."""
    from voicecore.sim import carrier_modes_core as modes

    credentials = modes.CarrierCredentials(plivo_auth_token="plivo-token",
                                           vonage_signature_secret="vonage-secret-0123456789abcdef0123",
                                           exotel_username="exo-key", exotel_password="exo-pass")
    _, body = answer(carrier)
    target = modes.parse_answer(carrier, body)
    headers = modes.stream_headers(carrier, target, credentials, nonce="11223344556677889900", now_s=NOW_S)
    path_and_query = "/" + target.url.split("://", 1)[1].split("/", 1)[1]
    assert upgrade(carrier, list(headers.items()), target=path_and_query) is None
    if carrier != cc.TELNYX:  # and without them the upgrade is refused
        assert upgrade(carrier, [], target=path_and_query).status == 403


# --- Twilio's webhooks through the same path -------------------------------------------------------------


def test_twilios_webhooks_go_through_the_same_check_with_the_lines_and_answers_they_always_had():
    from voicecore.carriers.twilio import stream as twilio_stream
    from voicecore.carriers.twilio import webhook as twilio_webhook
    from voicecore.carriers.twilio.signature import compute_signature

    settings = cc.CarrierSettings(twilio_auth_token="tw-token", public_url=BASE)
    routes = cc.webhook_routes(settings)
    assert {"/twilio/voice", "/twilio/status"} <= set(routes) and "/plivo/voice" not in routes
    assert set(cc.webhook_routes(SETTINGS)) == {"/twilio/voice", "/twilio/status", "/twilio/call-status", "/twilio/reattach"} | set(ROUTES)
    call_sid = "CA" + "3" * 32
    form = {"CallSid": call_sid, "AccountSid": "AC" + "4" * 32, "From": "+15550100", "To": "+15550199"}
    body = urlencode(form).encode()

    def post(path, body, signature):
        return cc.check_webhook(routes[path], "POST", path, {"x-twilio-signature": signature}, body, settings,
                                BASE + path, NOW_S)

    good = compute_signature("tw-token", BASE + "/twilio/voice", form)
    assert post("/twilio/voice", body, good) == cc.AnswerRequest("twilio", cc.ANSWER, call_sid)
    refused = post("/twilio/voice", body, "bad")
    assert (refused.status, refused.reason, refused.problem) == (403, "bad signature", "signature")
    assert refused.log == f"webhook /twilio/voice: bad X-Twilio-Signature (call {call_sid})" and not refused.quiet
    unreadable = post("/twilio/voice", b"%zz=\xff&" * 3, good)
    assert unreadable.status == 400 and unreadable.quiet
    request = cc.AnswerRequest("twilio", cc.ANSWER, call_sid)
    content_type, twiml = cc.answer_document(request, STREAM_BASE, "TOKEN_abc-1", settings)
    assert content_type == b"text/xml" and twiml == twilio_webhook.twiml_connect_stream(
        STREAM_BASE + "/twilio/stream", "TOKEN_abc-1", BASE + "/twilio/status").encode()
    rejected = cc.draining_answer(request, settings)
    assert (rejected.status, rejected.body) == (200, twilio_webhook.twiml_reject("busy").encode())
    assert rejected.log == f"call {call_sid}: refused, the node is draining (rejected busy)"
    redirect = cc.CarrierSettings(drain_redirect_url="https://other.example.com/twilio/voice")
    assert cc.draining_answer(request, redirect).body == twilio_webhook.twiml_redirect(
        "https://other.example.com/twilio/voice").encode()
    assert isinstance(cc.new_stream_protocol("twilio"), twilio_stream.TwilioCarrierStream)  # the one stream class's
