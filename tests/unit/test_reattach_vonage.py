"""The re-attach step on Vonage: the answer NCCO's connect is synchronous with its eventUrl at /vonage/reattach
(a signed single-use token); Vonage's ``disconnected`` event there, signed with the signed-webhook JWT, is the
re-attach request for the call its echoed headers name, and the decision answers a new NCCO for the same call or
one with no action (the call ends). The carrier simulator reads the step and signs its event as Vonage would, so
the gateway's check and the simulator's request are tested against each other."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from urllib.parse import urlsplit

import orjson
import pytest

from voicecore import reattach as ra
from voicecore.carriers.simulator import iso_timestamp
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.webhook import EVENT, REATTACH, AnswerRequest, Refusal
from voicecore.config import load_config
from voicecore.sim import carrier_modes_core as modes
from workers.gateway import carrier_core as cc
from workers.gateway.reattach import ReattachService

NOW_S = 1_800_000_000
BASE = "https://voice.example.com"
STREAM_BASE = "wss://voice.example.com"
SECRET = "vonage-signature-secret-0123456789abcdef"
SETTINGS = cc.CarrierSettings(vonage_signature_secret=SECRET, public_url=BASE)
CREDENTIALS = modes.CarrierCredentials(vonage_signature_secret=SECRET)
CALL = "0a1b2c3d-0000-4000-8000-123456789abc"  # the caller's leg: the call
LEG = "9f8e7d6c-0000-4000-8000-cba987654321"  # the WebSocket leg that ended
IDS = modes.CallIdentity(CALL, "app-1", LEG, "CON-1", "+15005550006", "+15005550001")
PATH = "/vonage/reattach"


def answer(reattach_token: str | None = "re-tok", call: str = CALL) -> bytes:
    content_type, body = cc.answer_document(AnswerRequest("vonage", "answer", call), STREAM_BASE, "session-tok",
                                            SETTINGS, reattach_token)
    assert content_type == b"application/json"
    return body


def check(url: str, headers, body: bytes, now_s: float = NOW_S):
    parts = urlsplit(url)
    target = parts.path + ("?" + parts.query if parts.query else "")
    route = cc.webhook_routes(SETTINGS)[parts.path]
    lower = {name.lower(): value for name, value in headers}
    return cc.check_webhook(route, "POST", target, lower, body, SETTINGS, BASE + target, now_s)


def disconnected(url: str, ended: modes.StreamTarget | None = None, now_s: float = NOW_S):
    """Vonage's event for the stream that ended, as the simulator sends it."""
    request = modes.continuation_request("vonage", url, IDS, CREDENTIALS, now_s=now_s, nonce="jti-1",
                                         target=ended or modes.parse_answer("vonage", answer()))
    assert request.method == "POST" and request.url == url
    return request.headers, request.body


def leg_event(status: str, url: str, headers=None):
    body = vonage.leg_event(status, LEG, "CON-1", "15005550006", STREAM_BASE + "/vonage/stream",
                            {"call_id": CALL, "session_token": "s"} if headers is None else headers,
                            "2027-01-15T08:00:00.000Z")
    return (("Authorization", vonage.sign_webhook(body, SECRET, NOW_S, "jti-2")),), body


# --- the answer NCCO -----------------------------------------------------------------------------------


def test_the_answer_connects_synchronously_with_the_reattach_step_as_its_event_url():
    (action,) = json.loads(answer())
    assert action["action"] == "connect" and action["eventType"] == "synchronous"
    assert action["eventUrl"] == [BASE + PATH + "?token=re-tok"] and action["eventMethod"] == "POST"
    (endpoint,) = action["endpoint"]
    assert endpoint["headers"] == {"call_id": CALL, "session_token": "session-tok"}  # the token is not in them
    # what the simulator reads from it: the step, and the stream as before
    target = modes.parse_answer("vonage", answer())
    assert target.redirect == BASE + PATH + "?token=re-tok" and target.headers == endpoint["headers"]


def test_without_a_token_the_connect_is_as_before_and_names_no_step():
    (action,) = json.loads(answer(None))
    assert set(action) == {"action", "endpoint"}
    assert modes.parse_answer("vonage", answer(None)).redirect == ""


@pytest.mark.parametrize("change", [{"eventType": "asynchronous"}, {"eventMethod": "GET"}, {"eventUrl": []}])
def test_the_simulator_follows_only_a_synchronous_post_event_url(change):
    """Vonage sends the disconnected event only to a synchronous connect ("to receive this event, you must
    include the eventType: synchronous"); the simulator models only our POST."""
    (action,) = json.loads(answer())
    action.update(change)
    assert modes.parse_answer("vonage", orjson.dumps([action])).redirect == ""


@pytest.mark.parametrize("url", ["ftp://x/y", "/relative", "https://voice.example.com/a b", ""])
def test_an_unusable_event_url_is_our_misuse(url):
    with pytest.raises(ValueError):
        vonage.ncco_connect_websocket(STREAM_BASE + "/vonage/stream", {}, event_url=url)


def test_the_hangup_equivalent_is_an_ncco_with_no_action_and_the_simulator_ends_the_call_on_it():
    content_type, body = cc.hangup_document("vonage")
    assert content_type == b"application/json" and json.loads(body) == []
    assert modes.parse_continuation("vonage", body) is None
    # no NCCO at all: the original NCCO goes on, and ours has nothing after the connect
    assert modes.parse_continuation("vonage", b"") is None
    assert modes.parse_continuation("vonage", b'[{"action": "talk", "text": "bye"}]') is None
    for bad in (b"<Response/>", b'{"action": "connect"}'):
        with pytest.raises(ValueError):
            modes.parse_continuation("vonage", bad)


# --- the request's check -------------------------------------------------------------------------------


def test_the_disconnected_event_is_a_reattach_request_for_the_call_its_headers_name():
    url = BASE + PATH + "?token=re-tok"
    headers, body = disconnected(url)
    event = json.loads(body)
    assert (event["status"], event["uuid"], event["conversation_uuid"]) == ("disconnected", LEG, "CON-1")
    assert event["to"] == STREAM_BASE + "/vonage/stream" and event["headers"]["call_id"] == CALL
    assert check(url, headers, body) == AnswerRequest("vonage", REATTACH, CALL, token="re-tok", call_completed=False)


def test_an_unsigned_or_altered_or_old_event_is_refused():
    url = BASE + PATH + "?token=re-tok"
    headers, body = disconnected(url)
    assert check(url, (), body).status == 403  # unsigned
    altered = body.replace(CALL.encode(), b"0a1b2c3d-0000-4000-8000-000000000000")
    assert check(url, headers, altered).status == 403  # payload_hash of another body
    assert check(url, headers, body, now_s=NOW_S + 3600).status == 403  # an hour old
    other_secret = modes.CarrierCredentials(vonage_signature_secret="another-secret-0123456789abcdef")
    forged = modes.continuation_request("vonage", url, IDS, other_secret, now_s=NOW_S, nonce="j",
                                        target=modes.parse_answer("vonage", answer()))
    assert check(url, forged.headers, forged.body).status == 403


@pytest.mark.parametrize("status", ["started", "ringing", "answered", "completed", "failed", "unanswered"])
def test_the_legs_other_events_are_plain_events_and_take_no_token(status):
    """The connect's eventUrl gets every state of the WebSocket leg; only disconnected is the step (a caller's
    hang-up completes the leg). Failed or unanswered (the socket never opened) are not re-attached."""
    url = BASE + PATH + "?token=re-tok"
    assert check(url, *leg_event(status, url)) == AnswerRequest("vonage", EVENT, "")


def test_a_disconnected_event_without_a_token_or_a_call_id_is_a_400():
    headers, body = disconnected(BASE + PATH)
    outcome = check(BASE + PATH, headers, body)
    assert isinstance(outcome, Refusal) and outcome.status == 400 and outcome.problem == "reattach"
    url = BASE + PATH + "?token=re-tok"
    assert check(url, *leg_event("disconnected", url, headers={"session_token": "s"})).status == 400
    assert check(url, *leg_event("disconnected", url, headers={"call_id": "a b"})).status == 400


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"uuid": "x"}', b'{"status": 3}'])
def test_a_signed_body_that_is_no_event_is_a_400(body):
    url = BASE + PATH + "?token=re-tok"
    headers = (("Authorization", vonage.sign_webhook(body, SECRET, NOW_S, "jti-3")),)
    outcome = check(url, headers, body)
    assert isinstance(outcome, Refusal) and outcome.status == 400


# --- the decision, as the gateway takes it --------------------------------------------------------------


@pytest.fixture
def service(tmp_path):
    config = load_config({"VOICECORE_TOKEN_SECRET": "node-secret-0123456789abcdef", "VOICECORE_NODE_ID": "node-a",
                          "VOICECORE_RUNTIME_DIR": str(tmp_path)})
    return ReattachService(config, tmp_path)


def _decide(service, token, ended_reason=None, draining=False):
    if ended_reason is not None:
        service.stream_ended(CALL, ended_reason)
    url = BASE + PATH + "?token=" + token
    outcome = check(url, *disconnected(url))
    assert isinstance(outcome, AnswerRequest) and outcome.kind == REATTACH
    return asyncio.run(service.decide(outcome.token, outcome.call_id, draining=draining,
                                      call_completed=outcome.call_completed))


def test_a_lost_stream_gets_a_new_ncco_for_the_same_call_once(service):
    token = service.issue(CALL)
    decision = _decide(service, token, ended_reason="connection lost")
    assert decision.action == ra.ATTACH and decision.call_sid == CALL
    # the gateway's answer: the NCCO again, with a new session token and a fresh step, for the same call
    body = answer(service.issue(CALL))
    followed = modes.parse_continuation("vonage", body)
    assert followed is not None and followed.headers["call_id"] == CALL
    assert followed.redirect.startswith(BASE + PATH + "?token=") and not followed.redirect.endswith(token)
    again = _decide(service, token)  # the token is single use
    assert again.action == ra.REFUSE and again.reason == "re-attach token reused"
    assert service.counts["calls_reattached"] == 1 and service.counts["reattach_refused"] == 1


def test_a_stream_that_ended_normally_is_hung_up(service):
    token = service.issue(CALL)
    assert _decide(service, token, ended_reason="ended by the agent").action == ra.HANGUP
    assert service.counts["reattach_hangups"] == 1


def test_a_draining_node_hangs_up(service):
    assert _decide(service, service.issue(CALL), draining=True).action == ra.HANGUP


def test_a_token_for_another_call_or_forged_is_refused(service):
    assert _decide(service, service.issue("another-call")).action == ra.REFUSE
    assert _decide(service, "not-a-token").action == ra.REFUSE
    assert service.counts["reattach_refused"] == 2


# --- the simulated carrier on the new stream --------------------------------------------------------


def test_the_simulated_vonage_call_reopens_on_a_new_socket_with_the_new_headers():
    call = modes.VonageCall(CALL, {"call_id": CALL, "session_token": "a"}, b"", sample_rate_hz=8000)
    (connected,) = call.opening_messages()
    assert json.loads(connected)["session_token"] == "a"
    (connected,) = call.reattach(modes.StreamTarget(url="wss://gw.example/vonage/stream",
                                                     headers={"call_id": CALL, "session_token": "b"}),
                                  "leg-2", 1000.0, 1500.0)
    message = json.loads(connected)
    assert message["event"] == "websocket:connected" and message["session_token"] == "b"
    assert message["content-type"] == "audio/l16;rate=8000"
    assert call.metrics.reattaches == [(1000.0, 1500.0)]


def test_the_event_names_the_leg_that_ended_and_its_timestamp():
    url = BASE + PATH + "?token=re-tok"
    request = modes.continuation_request("vonage", url, IDS, CREDENTIALS, now_s=1585656000.25, nonce="j",
                                         target=modes.parse_answer("vonage", answer()), leg_id="leg-2")
    event = json.loads(request.body)
    assert event["uuid"] == "leg-2" and event["timestamp"] == "2020-03-31T12:00:00.250Z"
    with pytest.raises(ValueError):
        modes.continuation_request("vonage", url, IDS, CREDENTIALS, now_s=NOW_S, nonce="j")


@pytest.mark.parametrize("now_s", [0.0, 951_782_400.5, 1_585_656_000.25, 1_709_208_000.999, 4_102_444_800.0,
                                   1_800_000_000.0])
def test_the_event_timestamp_is_the_calendar_date_in_utc(now_s):
    expected = datetime.fromtimestamp(int(now_s), timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    assert iso_timestamp(now_s) == f"{expected}.{int(round(now_s % 1 * 1000)) if now_s % 1 else 0:03d}Z"
