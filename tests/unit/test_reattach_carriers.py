"""The re-attach step on Plivo and Telnyx: their answer documents name it (a ``<Redirect>`` after the stream),
their re-attach request is checked as each carrier signs its webhooks, and the decision answers a new stream for
the same call or ``<Hangup/>``; the carrier simulator reads the continuation and signs its request as the carrier
would (so the gateway's check and the simulator's request are tested against each other)."""

from __future__ import annotations

import asyncio
import base64
import xml.etree.ElementTree as ElementTree
from urllib.parse import urlencode, urlsplit

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from voicecore import reattach as ra
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.plivo.backlog import OWN_CHECKPOINT_PREFIX, EchoBoundedBacklog
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.webhook import REATTACH, AnswerRequest, Refusal
from voicecore.config import load_config
from voicecore.sim import carrier_modes_core as modes
from workers.gateway import carrier_core as cc
from workers.gateway.reattach import ReattachService

NOW_S = 1_800_000_000
BASE = "https://voice.example.com"
STREAM_BASE = "wss://voice.example.com"
SEED = bytes(range(32))
PUBLIC_B64 = base64.b64encode(Ed25519PrivateKey.from_private_bytes(SEED).public_key().public_bytes_raw()).decode()
SETTINGS = cc.CarrierSettings(telnyx_public_key=PUBLIC_B64, plivo_auth_token="plivo-token", public_url=BASE)
CREDENTIALS = modes.CarrierCredentials(telnyx_private_key=SEED.hex(), plivo_auth_token="plivo-token")
CALLS = {"plivo": "0a1b2c3d-0000-4000-8000-123456789abc", "telnyx": "v3:abc-DEF_123"}
PATHS = {"plivo": "/plivo/reattach", "telnyx": "/telnyx/reattach"}


def ids(carrier: str) -> modes.CallIdentity:
    return modes.CallIdentity(CALLS[carrier], "acc", "stream-1", "session-1", "+15005550006", "+15005550001")


def answer(carrier: str, reattach_token: str | None = "re-tok") -> bytes:
    request = AnswerRequest(carrier, "answer", CALLS[carrier])
    content_type, body = cc.answer_document(request, STREAM_BASE, "session-tok", SETTINGS, reattach_token)
    assert content_type == b"text/xml"
    return body


def check(carrier: str, url: str, headers, body: bytes, now_s: float = NOW_S):
    target = urlsplit(url).path + ("?" + urlsplit(url).query if urlsplit(url).query else "")
    route = cc.webhook_routes(SETTINGS)[urlsplit(url).path]
    lower = {name.lower(): value for name, value in headers}
    return cc.check_webhook(route, "POST", target, lower, body, SETTINGS, BASE + target, now_s)


def carriers_request(carrier: str, url: str, call: modes.CallIdentity | None = None, now_s: float = NOW_S):
    request = modes.continuation_request(carrier, url, call or ids(carrier), CREDENTIALS, now_s=now_s,
                                         nonce="nonce-12345")
    return request.headers, request.body


# --- the answer documents ------------------------------------------------------------------------------


def test_plivos_answer_redirects_to_the_reattach_step_once_the_kept_alive_stream_ends():
    root = ElementTree.fromstring(answer("plivo"))
    assert [child.tag for child in root] == ["Stream", "Redirect"]
    stream, redirect = list(root)
    assert stream.get("keepCallAlive") == "true" and stream.get("bidirectional") == "true"
    assert redirect.get("method") == "POST" and redirect.text == BASE + "/plivo/reattach?token=re-tok"
    # what the simulator reads from it: the continuation, and the stream as before
    target = modes.parse_answer("plivo", answer("plivo"))
    assert target.redirect == BASE + "/plivo/reattach?token=re-tok" and target.parameters == (
        ("session_token", "session-tok"),)


def test_telnyxs_answer_redirects_to_the_reattach_step_after_connect():
    root = ElementTree.fromstring(answer("telnyx"))
    assert [child.tag for child in root] == ["Connect", "Redirect"]
    redirect = root.find("Redirect")
    assert redirect.get("method") == "POST" and redirect.text == BASE + "/telnyx/reattach?token=re-tok"
    assert modes.parse_answer("telnyx", answer("telnyx")).redirect == BASE + "/telnyx/reattach?token=re-tok"


def test_a_plivo_stream_not_kept_alive_has_no_continuation_after_it():
    """Without keepCallAlive Plivo runs the next element at once, not when the stream ends."""
    body = answer("plivo").replace(b'keepCallAlive="true"', b'keepCallAlive="false"')
    target = modes.parse_answer("plivo", body)
    assert target.redirect == "" and any("keepCallAlive" in problem for problem in target.problems)


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_the_answer_without_a_token_names_no_step_and_the_hangup_ends_the_call(carrier):
    root = ElementTree.fromstring(answer(carrier, None))
    assert root.find("Redirect") is None
    assert cc.reattaches(carrier)
    content_type, body = cc.hangup_document(carrier)
    assert content_type == b"text/xml" and [child.tag for child in ElementTree.fromstring(body)] == ["Hangup"]
    assert modes.parse_continuation(carrier, body) is None  # the simulated carrier ends the call on it


def test_which_carriers_name_the_step():
    assert [carrier for carrier in cc.CARRIERS if cc.reattaches(carrier)] == ["telnyx", "plivo", "vonage"]


@pytest.mark.parametrize("url", ["ftp://x/y", "/relative", "https://voice.example.com/a b"])
def test_an_unusable_redirect_url_is_our_misuse(url):
    with pytest.raises(ValueError):
        plivo.stream_xml(STREAM_BASE + "/plivo/stream", {}, redirect_url=url)
    if " " not in url:
        with pytest.raises(ValueError):
            telnyx.texml_connect_stream(STREAM_BASE + "/telnyx/stream", {}, redirect_url=url)


# --- the re-attach request's check --------------------------------------------------------------------


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_the_carriers_signed_request_is_a_reattach_request_for_its_call(carrier):
    url = BASE + PATHS[carrier] + "?token=re-tok"
    headers, body = carriers_request(carrier, url)
    outcome = check(carrier, url, headers, body)
    assert outcome == AnswerRequest(carrier, REATTACH, CALLS[carrier], token="re-tok", call_completed=False)


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_an_unsigned_or_altered_reattach_request_is_refused(carrier):
    url = BASE + PATHS[carrier] + "?token=re-tok"
    headers, body = carriers_request(carrier, url)
    assert check(carrier, url, (), body).status == 403  # unsigned
    assert check(carrier, url, headers, body.replace(b"in-progress", b"completed")).status == 403  # body altered
    if carrier == "plivo":  # Plivo signs the URL: another token in the query does not pass
        other = BASE + PATHS[carrier] + "?token=other"
        assert check(carrier, other, headers, body).status == 403
    else:  # Telnyx signs timestamp|body: a request kept an hour is refused
        assert check(carrier, url, headers, body, now_s=NOW_S + 3600).status == 403


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_a_reattach_request_without_a_token_or_a_call_is_a_400(carrier):
    url = BASE + PATHS[carrier]
    headers, body = carriers_request(carrier, url)
    outcome = check(carrier, url, headers, body)
    assert isinstance(outcome, Refusal) and outcome.status == 400 and outcome.problem == "reattach"
    url = BASE + PATHS[carrier] + "?token=re-tok"
    nameless = modes.CallIdentity("", "acc", "s", "s", "+1", "+2")
    headers, body = carriers_request(carrier, url, nameless)
    assert check(carrier, url, headers, body).status == 400


@pytest.mark.parametrize("carrier, status", [("plivo", "completed"), ("plivo", "timeout"), ("telnyx", "completed"),
                                             ("telnyx", "canceled")])
def test_the_carrier_saying_the_call_is_over(carrier, status):
    url = BASE + PATHS[carrier] + "?token=re-tok"
    call = ids(carrier)
    if carrier == "plivo":
        form = {"CallUUID": call.call_id, "Event": "Redirect", "CallStatus": status}
        body = urlencode(form).encode()
        headers = ((plivo.SIGNATURE_V3_HEADER, plivo.compute_signature_v3("plivo-token", url, "n1", form, "POST")),
                   (plivo.SIGNATURE_V3_NONCE_HEADER, "n1"))
    else:
        body = urlencode({"CallSid": call.call_id, "CallStatus": status}).encode()
        headers = ((telnyx.TIMESTAMP_HEADER, str(NOW_S)), (telnyx.SIGNATURE_HEADER, telnyx.sign_webhook(SEED, NOW_S, body)))
    assert check(carrier, url, headers, body).call_completed


# --- the decision, as the gateway takes it --------------------------------------------------------------


@pytest.fixture
def service(tmp_path):
    config = load_config({"VOICECORE_TOKEN_SECRET": "node-secret-0123456789abcdef", "VOICECORE_NODE_ID": "node-a",
                          "VOICECORE_RUNTIME_DIR": str(tmp_path)})
    return ReattachService(config, tmp_path)


def _decide(service, carrier, token, ended_reason=None):
    call = CALLS[carrier]
    if ended_reason is not None:
        service.stream_ended(call, ended_reason)
    url = BASE + PATHS[carrier] + "?token=" + token
    outcome = check(carrier, url, *carriers_request(carrier, url))
    assert isinstance(outcome, AnswerRequest)
    return asyncio.run(service.decide(outcome.token, outcome.call_id, draining=False,
                                      call_completed=outcome.call_completed))


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_a_lost_stream_gets_a_new_stream_for_the_same_call_once(service, carrier):
    token = service.issue(CALLS[carrier])
    decision = _decide(service, carrier, token, ended_reason="connection lost")
    assert decision.action == ra.ATTACH and decision.call_sid == CALLS[carrier]
    # the gateway's answer: the carrier's stream document again, naming a fresh step
    body = answer(carrier, service.issue(CALLS[carrier]))
    followed = modes.parse_continuation(carrier, body)
    assert followed is not None and followed.redirect.startswith(BASE + PATHS[carrier] + "?token=")
    assert _decide(service, carrier, token).action == ra.REFUSE  # the token is single use


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_a_stream_that_ended_normally_is_hung_up(service, carrier):
    token = service.issue(CALLS[carrier])
    assert _decide(service, carrier, token, ended_reason="ended by the agent").action == ra.HANGUP


@pytest.mark.parametrize("carrier", ["plivo", "telnyx"])
def test_a_token_for_another_call_is_refused(service, carrier):
    token = service.issue("another-call")
    assert _decide(service, carrier, token).action == ra.REFUSE


# --- the simulated carrier on the new stream --------------------------------------------------------


def _followed(**fields) -> modes.StreamTarget:
    """What a continuation's answer streams the call to (the URL is the shell's to open)."""
    return modes.StreamTarget(url="wss://gw.example/stream", **fields)


def test_the_simulated_plivo_call_reopens_on_a_new_stream_with_its_new_headers():
    call = modes.PlivoCall(CALLS["plivo"], "stream-1", "acc", b"", extra_headers="session_token=a")
    (start,) = call.opening_messages()
    assert '"streamId": "stream-1"' in start or '"streamId":"stream-1"' in start
    (start,) = call.reattach(_followed(raw_extra_headers="session_token=b"), "stream-2", 1000.0, 1500.0)
    assert "stream-2" in start and "session_token" in start and "stream-1" not in start
    assert call.metrics.reattaches == [(1000.0, 1500.0)]


def test_the_simulated_telnyx_call_reopens_on_a_new_stream_with_its_new_parameters():
    call = modes.TelnyxCall(CALLS["telnyx"], "stream-1", "acc", b"", custom_parameters=(("session_token", "a"),))
    call.opening_messages()
    connected, start = call.reattach(_followed(parameters=(("session_token", "b"),)), "stream-2", 1000.0, 1500.0)
    assert "connected" in connected and "stream-2" in start and '"b"' in start
    assert call.metrics.reattaches == [(1000.0, 1500.0)]


def _bounded_drains(backlog: EchoBoundedBacklog, templates, kinds: list[str]) -> list[bytes]:
    """What the gateway puts on a bounded Plivo stream for the pacer's entries (``kinds``: "m" a frame, "k:NAME"
    a mark), one frame a drain as the pacer releases them at a steady lead (a mark goes in the drain of the frame
    it follows: the pacer publishes both in one tick): each drain's entries, then the gateway's own checkpoint
    if it adds one."""
    drains: list[list[bytes]] = []
    for kind in kinds:
        if kind == "m":
            body = base64.b64encode(bytes([0x20 + len(drains) % 64]) * 160)
            drains.append([templates.media_prefix + body + templates.media_suffix])
        else:
            drains[-1].append(templates.mark_prefix + kind[2:].encode() + templates.mark_suffix)
    wire = []
    for out in drains:
        backlog.sent(out)
        own = backlog.own_checkpoint()
        wire += out + ([own] if own is not None else [])
    return wire


def test_a_response_after_a_hold_line_on_a_reattached_bounded_plivo_stream_is_not_stale():
    """On a re-attached Plivo call the hold line (unmarked: 49 frames) plays before the reconnect line. The
    gateway's own checkpoints settle its bound behind the hold line's frames; the last one falls between the
    line's tail and the response's first frames, before the response's first mark ("2:5"). That checkpoint
    claims no frames: the response's frames are all its own, none stale, and the hold line's stay unattributed."""
    call = modes.PlivoCall(CALLS["plivo"], "stream-1", "acc", b"", extra_headers="session_token=a")
    call.opening_messages()
    call.reattach(_followed(raw_extra_headers="session_token=b"), "stream-2", 1000.0, 1500.0)
    templates = plivo.wire_templates("stream-2")
    backlog = EchoBoundedBacklog(templates)  # the new gateway's, for the new stream
    response = []
    for n in range(1, 13):
        response.append("m")
        if n % 5 == 0:
            response.append(f"k:2:{n}")
    response.append("k:2:12:end")
    wire = _bounded_drains(backlog, templates, ["m"] * 49 + response)
    names = [data[len(templates.mark_prefix):-len(templates.mark_suffix)].decode()
             for data in wire if data.startswith(templates.mark_prefix)]
    # The case itself: a checkpoint of the gateway's own right before the response's first mark.
    assert names[names.index("2:5") - 1].startswith(OWN_CHECKPOINT_PREFIX)
    now_ms = 1500.0
    for data in wire:  # the shell's path: the fast one for the pacer's entries, the reader for the rest
        if not call.receive_fast(data, now_ms):
            call.receive(data.decode(), now_ms)
        now_ms += 20.0
    stats = call.statistics()
    assert stats.stale_frames == 0 and stats.mark_count_mismatches == 0 and stats.protocol_errors == 0
    assert [frame.tag for frame in call.frames] == [None] * 49 + [2] * 12
    assert stats.frames_without_mark == 49
