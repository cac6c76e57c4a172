"""Placing outbound calls with Vonage's Voice API: the Create Call request (its application JWT) and answer, the
event webhook's statuses, the fields through the NCCO's websocket headers, and the simulator's Create Call."""

from __future__ import annotations

import json
import types
import urllib.parse

import jwt
import pytest

from voicecore.carriers.vonage import outbound
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.vonage import rest
from voicecore.carriers.vonage.carrier import VONAGE
from voicecore.carriers.webhook import ANSWER, EVENT, AnswerRequest, Refusal, WebhookError
from voicecore.sim import carrier_rest_core as rest_core
from voicecore.sim.carrier import generate_credentials

NODE = "http://127.0.0.1:8080"
CALLEE = "+15550100001"
CALLER = "+15005550006"
CALL = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
SECRET = "vonage-secret-0123456789abcdef0123"
NOW_S = 1_800_000_000
CREDENTIALS = generate_credentials("tok")


def test_the_create_call_request_names_the_answer_and_event_urls_and_carries_the_application_jwt():
    url = outbound.answer_url(NODE + outbound.ANSWER_PATH, CALLEE, {"first_name": "Anna"})
    token = rest.application_jwt(CREDENTIALS.vonage_application_id, CREDENTIALS.vonage_private_key, NOW_S, "jti-1")
    request = outbound.place_call_request(token, CALLEE, CALLER, answer_url=url, event_url=NODE + outbound.EVENT_PATH)
    assert (request.method, request.url) == ("POST", "https://api.nexmo.com/v1/calls")
    assert dict(request.headers)["Authorization"] == f"Bearer {token}"
    assert json.loads(request.body) == {"to": [{"type": "phone", "number": CALLEE[1:]}],
                                        "from": {"type": "phone", "number": CALLER[1:]}, "answer_url": [url],
                                        "answer_method": "POST", "ringing_timer": 30,
                                        "event_url": [NODE + "/vonage/event"], "event_method": "POST"}
    assert dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)) == {
        "direction": "outbound", "callee": CALLEE, "field.first_name": "Anna"}
    with pytest.raises(ValueError, match="512 bytes"):
        outbound.answer_url(NODE + outbound.ANSWER_PATH, CALLEE, {"notes": "x" * 200, "more": "y" * 100})
    with pytest.raises(ValueError):
        outbound.place_call_request("", CALLEE, CALLER, answer_url=url)
    with pytest.raises(ValueError):
        outbound.place_call_request(token, "555", CALLER, answer_url=url)


def test_vonages_answer_gives_the_call_uuid_or_its_problem():
    placed = outbound.parse_place_call_response(201, json.dumps({"uuid": CALL, "status": "started"}).encode())
    assert (placed.ok, placed.call_sid, placed.status) == (True, CALL, "started")
    refused = outbound.parse_place_call_response(401, b'{"type": "x", "title": "Unauthorized"}')
    assert (refused.ok, refused.retryable, refused.error) == (False, False, "Unauthorized")
    assert outbound.parse_place_call_response(502, b"").retryable


@pytest.mark.parametrize(("vonage_status", "stored", "sequence"), [
    ("started", "initiated", 0), ("ringing", "ringing", 1), ("answered", "in-progress", 2),
    ("completed", "completed", 3), ("busy", "busy", 3), ("timeout", "no-answer", 3), ("unanswered", "no-answer", 3),
    ("failed", "failed", 3), ("rejected", "failed", 3), ("cancelled", "canceled", 3)])
def test_vonages_statuses_map_onto_the_stores(vonage_status, stored, sequence):
    event = outbound.parse_event({"uuid": CALL, "status": vonage_status, "direction": "outbound", "duration": "4"})
    assert (event.call_sid, event.status, event.sequence, event.duration_s) == (CALL, stored, sequence, 4)


def test_an_event_that_is_no_call_status_is_passed_over_and_a_bad_one_refused():
    assert outbound.parse_event({"uuid": CALL, "status": "human", "direction": "outbound"}) is None
    assert outbound.parse_event({"uuid": CALL, "status": "answered", "direction": "inbound"}) is None
    assert outbound.parse_event({"event": "websocket:connected"}) is None
    for bad in ({"uuid": "x", "status": "busy"}, {"uuid": CALL, "status": "completed", "duration": "-"}):
        with pytest.raises(WebhookError):
            outbound.parse_event(bad | {"direction": "outbound"})


def _signed(target: str, fields: dict, secret: str = SECRET):
    body = json.dumps(fields).encode()
    headers = {"authorization": vonage.sign_webhook(body, secret, NOW_S, "jti-1", application_id=CALL)}
    settings = types.SimpleNamespace(vonage_signature_secret=SECRET, public_url=NODE, vonage_sample_rate_hz=16000)
    route = VONAGE.routes[target.split("?", 1)[0]]
    return VONAGE.check_webhook(route, "POST", target, headers, body, settings, NODE + target, NOW_S), settings


def test_a_signed_event_is_a_call_status_for_the_store():
    request, _settings = _signed(outbound.EVENT_PATH, {"uuid": CALL, "status": "busy", "direction": "outbound"})
    assert isinstance(request, AnswerRequest) and request.kind == EVENT
    assert (request.call_status.call_sid, request.call_status.status) == (CALL, "busy")
    forged, _settings = _signed(outbound.EVENT_PATH, {"uuid": CALL, "status": "busy"}, secret="other" * 8)
    assert isinstance(forged, Refusal) and forged.status == 403
    other, _settings = _signed(outbound.EVENT_PATH, {"uuid": CALL, "status": "answered", "direction": "inbound"})
    assert isinstance(other, AnswerRequest) and other.call_status is None


def test_a_placed_calls_fields_reach_the_stream_in_the_ncco_headers():
    url = outbound.answer_url(NODE + outbound.ANSWER_PATH, CALLEE, {"first_name": "Anna"})
    request, settings = _signed(url[len(NODE):], {"uuid": CALL, "to": CALLEE[1:], "from": CALLER[1:]})
    assert isinstance(request, AnswerRequest) and request.kind == ANSWER and request.call_id == CALL
    assert request.parameters == (("direction", "outbound"), ("callee", CALLEE), ("field.first_name", "Anna"))
    _type, body = VONAGE.answer_document(request, "ws://127.0.0.1:8080/vonage/stream", "token-1", settings)
    headers = json.loads(body)[0]["endpoint"][0]["headers"]
    assert headers == {"direction": "outbound", "callee": CALLEE, "field.first_name": "Anna", "call_id": CALL,
                       "session_token": "token-1"}


def test_the_simulated_vonage_creates_the_call_as_vonage_answers_it():
    url = outbound.answer_url(NODE + outbound.ANSWER_PATH, CALLEE, {})
    token = rest.application_jwt(CREDENTIALS.vonage_application_id, CREDENTIALS.vonage_private_key, NOW_S, "jti-1")
    request = outbound.place_call_request(token, CALLEE, CALLER, answer_url=url, event_url=NODE + outbound.EVENT_PATH)

    def create(headers):
        return rest_core.handle("POST", "/v1/calls", headers, request.body, CREDENTIALS, lambda *_: False,
                                now_s=NOW_S, new_call_sid="CA" + "0123456789abcdef" * 2)

    outcome = create({"authorization": f"Bearer {token}"})
    assert outcome.status == 201 and outcome.action == rest_core.CREATE
    placed = outbound.parse_place_call_response(outcome.status, outcome.body)
    assert placed.ok and placed.call_sid == outcome.placed.call_sid and outcome.placed.carrier == "vonage"
    assert (outcome.placed.to, outcome.placed.from_, outcome.placed.url) == (CALLEE, CALLER, url)
    forged = jwt.encode({"application_id": CREDENTIALS.vonage_application_id, "iat": NOW_S, "jti": "j"}, "k" * 32)
    assert create({"authorization": f"Bearer {forged}"}).status == 401


# --- advanced machine detection ---------------------------------------------------------------------------


def _create_with(body: dict):
    token = rest.application_jwt(CREDENTIALS.vonage_application_id, CREDENTIALS.vonage_private_key, NOW_S, "jti-1")
    return rest_core.handle("POST", "/v1/calls", {"authorization": f"Bearer {token}"}, json.dumps(body).encode(),
                            CREDENTIALS, lambda *_: False, now_s=NOW_S, new_call_sid="CA" + "0123456789abcdef" * 2)


def test_machine_detection_asks_vonage_for_its_asynchronous_amd_that_never_hangs_up():
    token = rest.application_jwt(CREDENTIALS.vonage_application_id, CREDENTIALS.vonage_private_key, NOW_S, "jti-1")
    url = NODE + outbound.ANSWER_PATH
    request = outbound.place_call_request(token, CALLEE, CALLER, answer_url=url, event_url=NODE + outbound.EVENT_PATH,
                                          machine_detection=True)
    assert json.loads(request.body)["advanced_machine_detection"] == {"behavior": "continue", "mode": "default"}
    timed = outbound.place_call_request(token, CALLEE, CALLER, answer_url=url, event_url=NODE + outbound.EVENT_PATH,
                                        machine_detection=True, beep_timeout_s=60)
    assert json.loads(timed.body)["advanced_machine_detection"]["beep_timeout"] == 60
    plain = outbound.place_call_request(token, CALLEE, CALLER, answer_url=url, event_url=NODE + outbound.EVENT_PATH)
    assert "advanced_machine_detection" not in json.loads(plain.body)
    for wrong in ({"beep_timeout_s": 44}, {"beep_timeout_s": 121}, {"event_url": ""}):
        with pytest.raises(ValueError):
            outbound.place_call_request(token, CALLEE, CALLER, **({"answer_url": url, "event_url": NODE + "/e",
                                                                   "machine_detection": True} | wrong))
    # the simulated Vonage takes it as Vonage names it: asynchronous (mode default), results to the event URL
    outcome = _create_with(json.loads(timed.body))
    assert outcome.status == 201
    assert (outcome.placed.machine_detection, outcome.placed.async_amd, outcome.placed.amd_callback) == (
        "default", True, NODE + "/vonage/event")


@pytest.mark.parametrize("amd", [{"behavior": "drop", "mode": "default"}, {"behavior": "continue", "mode": "fast"},
                                 {"behavior": "continue", "mode": "default", "beep_timeout": 30},
                                 {"behavior": "continue", "mode": "default", "beep_timeout": "60"},
                                 {"behavior": "continue", "mode": "default", "beeps": 1}, "continue"])
def test_the_simulated_vonage_refuses_machine_detection_vonage_would_refuse(amd):
    body = {"to": [{"type": "phone", "number": CALLEE[1:]}], "from": {"type": "phone", "number": CALLER[1:]},
            "answer_url": [NODE + "/vonage/answer"], "event_url": [NODE + "/vonage/event"],
            "advanced_machine_detection": amd}
    outcome = _create_with(body)
    assert outcome.status == 400 and outcome.placed is None


@pytest.mark.parametrize(("event", "answered_by"), [
    ({"status": "human"}, "human"), ({"status": "machine"}, "machine_start"),
    ({"status": "machine", "sub_state": "beep_start"}, "machine_end_beep"),
    ({"status": "machine", "sub_state": "beep_timeout"}, ""),  # adds nothing: passed over
])
def test_vonages_machine_detection_events_map_onto_the_detectors_vocabulary(event, answered_by):
    fields = {"uuid": CALL, "conversation_uuid": "CON-1", "direction": "outbound"} | event
    assert outbound.is_amd_event(fields) and outbound.parse_event(fields) is None  # no call status
    assert outbound.parse_amd_event(fields) == (CALL, answered_by)
    request, _settings = _signed(outbound.EVENT_PATH, fields)
    assert isinstance(request, AnswerRequest) and request.kind == EVENT and request.call_status is None
    assert (request.call_id, request.answered_by) == ((CALL if answered_by else ""), answered_by)


def test_a_machine_detection_event_that_names_no_call_or_is_not_signed_is_refused():
    bad, _settings = _signed(outbound.EVENT_PATH, {"uuid": "x", "status": "machine"})
    assert isinstance(bad, Refusal) and bad.status == 400
    forged, _settings = _signed(outbound.EVENT_PATH, {"uuid": CALL, "status": "human"}, secret="other" * 8)
    assert isinstance(forged, Refusal) and forged.status == 403
