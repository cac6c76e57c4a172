"""Placing outbound calls with Plivo: the Make Call request and its answer, the ring and hang-up callbacks and
their statuses, the fields through the answer XML to the stream, and the simulator's Make Call."""

from __future__ import annotations

import base64
import json
import types
import urllib.parse

import pytest

from voicecore.carriers.plivo import outbound
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.plivo.carrier import PLIVO
from voicecore.carriers.webhook import ANSWER, EVENT, AnswerRequest, Refusal, WebhookError
from voicecore.outbound import call_fields
from voicecore.sim import carrier_rest_core as rest_core
from voicecore.sim.carrier_modes_core import CarrierCredentials, parse_answer

AUTH_ID = "MA" + "ABCDEFGHIJ01234567"
NODE = "http://127.0.0.1:8080"
CALLEE = "+15550100001"
CALLER = "+15005550006"
REQUEST_UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CALL_UUID = "11111111-2222-4333-8444-555555555555"


def test_the_make_call_request_names_the_answer_url_and_both_callbacks():
    url = outbound.answer_url(NODE + "/plivo/voice", CALLEE, {"first_name": "Anna"})
    request = outbound.place_call_request(AUTH_ID, "tok", CALLEE, CALLER, answer_url=url,
                                          status_url=NODE + outbound.STATUS_PATH, base_url="https://api.plivo.com/")
    assert (request.method, request.url) == ("POST", f"https://api.plivo.com/v1/Account/{AUTH_ID}/Call/")
    headers = dict(request.headers)
    assert headers["Authorization"] == "Basic " + base64.b64encode(f"{AUTH_ID}:tok".encode()).decode()
    assert headers["Content-Type"] == "application/json"
    body = json.loads(request.body)
    assert body == {"from": CALLER[1:], "to": CALLEE[1:], "answer_url": url, "answer_method": "POST",
                    "ring_timeout": 30, "ring_url": NODE + "/plivo/call-status", "ring_method": "POST",
                    "hangup_url": NODE + "/plivo/call-status", "hangup_method": "POST"}
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert query == {"direction": "outbound", "callee": CALLEE, "field.first_name": "Anna"}


@pytest.mark.parametrize("change", [{"auth_id": "AC123"}, {"to": "5550100"}, {"from_": "+0"},
                                    {"answer_url": "ftp://x"}, {"auth_token": ""}, {"ring_timeout_s": 1}])
def test_a_request_that_plivo_would_refuse_is_not_built(change):
    kwargs = {"auth_id": AUTH_ID, "auth_token": "tok", "to": CALLEE, "from_": CALLER,
              "answer_url": NODE + "/plivo/voice"} | change
    with pytest.raises(ValueError):
        outbound.place_call_request(kwargs.pop("auth_id"), kwargs.pop("auth_token"), kwargs.pop("to"),
                                    kwargs.pop("from_"), **kwargs)


def test_fields_too_long_for_plivos_stream_headers_are_refused_before_the_call_is_placed():
    with pytest.raises(ValueError, match="512 bytes"):
        outbound.answer_url(NODE + "/plivo/voice", CALLEE, {"notes": "x" * 200, "more": "y" * 100})


def test_plivos_answer_gives_the_request_uuid_or_its_error():
    placed = outbound.parse_place_call_response(
        201, json.dumps({"api_id": "a", "message": "call fired", "request_uuid": REQUEST_UUID}).encode())
    assert (placed.ok, placed.call_sid, placed.status) == (True, REQUEST_UUID, "queued")
    refused = outbound.parse_place_call_response(401, b'{"api_id": "a", "error": "authentication failed"}')
    assert (refused.ok, refused.retryable, refused.error) == (False, False, "authentication failed")
    busy = outbound.parse_place_call_response(503, b"")
    assert busy.retryable and not busy.ok
    assert not outbound.parse_place_call_response(201, b'{"message": "call fired"}').ok


@pytest.mark.parametrize(("plivo_status", "stored", "sequence"), [
    ("ringing", "ringing", 1), ("in-progress", "in-progress", 2), ("completed", "completed", 3),
    ("busy", "busy", 3), ("timeout", "no-answer", 3), ("no-answer", "no-answer", 3), ("failed", "failed", 3),
    ("cancel", "canceled", 3)])
def test_plivos_statuses_map_onto_the_stores(plivo_status, stored, sequence):
    event = outbound.parse_call_status({"RequestUUID": REQUEST_UUID, "CallUUID": CALL_UUID, "CallStatus": plivo_status,
                                        "Direction": "outbound", "Duration": "7"})
    assert (event.call_sid, event.call_uuid, event.status, event.sequence, event.duration_s) == (
        REQUEST_UUID, CALL_UUID, stored, sequence, 7)


def test_a_callback_that_is_not_one_is_refused():
    form = {"RequestUUID": REQUEST_UUID, "CallStatus": "completed"}
    for bad in ({"CallStatus": "answered"}, {"RequestUUID": "r1"}, {"CallUUID": "c1"}, {"Duration": "x"}):
        with pytest.raises(WebhookError):
            outbound.parse_call_status(form | bad)


# --- through the gateway's descriptor ----------------------------------------------------------------------


def _signed(path_and_query: str, form: dict[str, str], token: str = "plivo-token", signed_url: str | None = None):
    url = NODE + path_and_query
    nonce = "12345678901234567890"
    signature = plivo.compute_signature_v3(token, signed_url or url, nonce, form, "POST")
    settings = types.SimpleNamespace(plivo_auth_token="plivo-token", public_url=NODE)
    route = PLIVO.routes[path_and_query.split("?", 1)[0]]
    headers = {plivo.SIGNATURE_V3_HEADER.lower(): signature, plivo.SIGNATURE_V3_NONCE_HEADER.lower(): nonce}
    return PLIVO.check_webhook(route, "POST", path_and_query, headers, urllib.parse.urlencode(form).encode(),
                               settings, url, 0), settings


def test_a_signed_hangup_callback_is_a_call_status_for_the_store():
    form = {"RequestUUID": REQUEST_UUID, "CallUUID": CALL_UUID, "CallStatus": "busy", "Event": "Hangup",
            "Direction": "outbound", "Duration": "0"}
    request, _settings = _signed(outbound.STATUS_PATH, form)
    assert isinstance(request, AnswerRequest) and request.kind == EVENT
    assert (request.call_status.call_sid, request.call_status.status) == (REQUEST_UUID, "busy")
    forged, _settings = _signed(outbound.STATUS_PATH, form, token="other")
    assert isinstance(forged, Refusal) and forged.status == 403
    unknown, _settings = _signed(outbound.STATUS_PATH, form | {"CallStatus": "answered"})
    assert isinstance(unknown, Refusal) and unknown.status == 400


def test_a_placed_calls_fields_reach_the_stream_packed_in_one_extra_header():
    url = outbound.answer_url(NODE + "/plivo/voice", CALLEE, {"first_name": "Åsa", "reason": "a=b, c; d"})
    form = {"CallUUID": CALL_UUID, "RequestUUID": REQUEST_UUID, "CallStatus": "in-progress", "Direction": "outbound",
            "From": CALLER[1:], "To": CALLEE[1:], "Event": "StartApp"}
    request, settings = _signed(url[len(NODE):], form)
    assert isinstance(request, AnswerRequest) and request.kind == ANSWER and request.call_id == CALL_UUID
    expected = (("direction", "outbound"), ("callee", CALLEE), ("field.first_name", "Åsa"),
                ("field.reason", "a=b, c; d"))
    assert request.parameters == expected
    # its answer is the call's in-progress, stored under the request's id
    assert (request.call_status.call_sid, request.call_status.status) == (REQUEST_UUID, "in-progress")
    _type, body = PLIVO.answer_document(request, "ws://127.0.0.1:8080/plivo/stream", "token-1", settings)
    target = parse_answer("plivo", body)
    headers = dict(plivo._extra_headers(target.raw_extra_headers))
    assert headers["session_token"] == "token-1"
    assert call_fields.kept_parameters(headers.items()) == expected
    forged, _settings = _signed(url[len(NODE):].replace("%C3%85sa", "Eve"), form, signed_url=url)
    assert isinstance(forged, Refusal) and forged.status == 403


def test_the_request_uuid_and_the_call_uuid_come_together_for_the_gateway_to_link():
    """A campaign follows a Plivo call by its request_uuid; its stream and record go by its CallUUID. The answer
    webhook (which names the request ALegRequestUUID, Plivo's answer-URL parameter) and the hang-up callback carry
    both: the request's id is the status's call, the CallUUID the request's call id (what the gateway keeps
    beside it as the record's id)."""
    url = outbound.answer_url(NODE + "/plivo/voice", CALLEE, {})
    form = {"CallUUID": CALL_UUID, "ALegUUID": CALL_UUID, "ALegRequestUUID": REQUEST_UUID, "CallStatus": "in-progress",
            "Direction": "outbound", "From": CALLER[1:], "To": CALLEE[1:], "Event": "StartApp"}
    answer, _settings = _signed(url[len(NODE):], form)
    assert (answer.call_status.call_sid, answer.call_id) == (REQUEST_UUID, CALL_UUID)
    hangup, _settings = _signed(outbound.STATUS_PATH, {"RequestUUID": REQUEST_UUID, "CallUUID": CALL_UUID,
                                                       "CallStatus": "completed", "Event": "Hangup", "Duration": "9"})
    assert (hangup.call_status.call_sid, hangup.call_id) == (REQUEST_UUID, CALL_UUID)
    # a call never answered has no CallUUID: nothing to link
    ring, _settings = _signed(outbound.STATUS_PATH, {"RequestUUID": REQUEST_UUID, "CallStatus": "ringing", "Event": "Ring"})
    assert (ring.call_status.call_sid, ring.call_id) == (REQUEST_UUID, "")


def test_an_inbound_plivo_call_has_no_parameters_and_no_status():
    form = {"CallUUID": CALL_UUID, "CallStatus": "ringing", "Direction": "inbound"}
    request, settings = _signed("/plivo/voice", form)
    assert request.parameters == () and request.call_status is None
    _type, body = PLIVO.answer_document(request, "ws://127.0.0.1:8080/plivo/stream", "token-1", settings)
    assert dict(plivo._extra_headers(parse_answer("plivo", body).raw_extra_headers)) == {"session_token": "token-1"}


def test_packed_parameters_round_trip_and_garbage_is_dropped():
    parameters = call_fields.parameters_for(CALLEE, {"name": "Zoë & co"})
    packed = call_fields.pack(parameters)
    assert set(packed) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
    assert call_fields.kept_parameters([("OUTBOUND_CALL", packed)]) == tuple(parameters)
    assert call_fields.kept_parameters([("outbound_call", "!!not base64")]) == ()


# --- the simulator's Make Call -----------------------------------------------------------------------------


def _create(body: dict, auth_id: str = AUTH_ID, token: str = "tok"):
    credentials = CarrierCredentials(plivo_auth_id=AUTH_ID, plivo_auth_token="tok")
    headers = {"authorization": "Basic " + base64.b64encode(f"{auth_id}:{token}".encode()).decode()}
    return rest_core.handle("POST", f"/v1/Account/{auth_id}/Call/", headers, json.dumps(body).encode(), credentials,
                            lambda *_: False, now_s=0, api_id="api-1", new_call_sid="CA" + "0123456789abcdef" * 2)


def test_the_simulated_plivo_takes_a_make_call_request_as_plivo_answers_it():
    request = outbound.place_call_request(AUTH_ID, "tok", CALLEE, CALLER, answer_url=NODE + "/plivo/voice?a=1",
                                          status_url=NODE + "/plivo/call-status")
    outcome = _create(json.loads(request.body))
    assert outcome.status == 201 and outcome.action == rest_core.CREATE
    answer = json.loads(outcome.body)
    assert answer == {"api_id": "api-1", "message": "call fired", "request_uuid": "01234567-89ab-cdef-0123-456789abcdef"}
    placed = outcome.placed
    assert (placed.carrier, placed.to, placed.from_, placed.url) == ("plivo", CALLEE, CALLER, NODE + "/plivo/voice?a=1")
    assert placed.ring_url == placed.status_callback == NODE + "/plivo/call-status"
    assert outbound.parse_place_call_response(outcome.status, outcome.body).call_sid == answer["request_uuid"]


def test_the_simulated_plivo_refuses_what_plivo_would():
    good = {"from": CALLER[1:], "to": CALLEE[1:], "answer_url": NODE + "/plivo/voice"}
    assert _create(good, token="wrong").status == 401
    assert _create(good | {"to": "12"}).status == 400
    assert _create({"from": CALLER[1:], "to": CALLEE[1:]}).status == 400
    assert _create(good | {"hangup_url": "ftp://x"}).status == 400


# --- machine detection ------------------------------------------------------------------------------------


def test_machine_detection_asks_plivo_for_its_asynchronous_amd_never_its_hangup():
    request = outbound.place_call_request(AUTH_ID, "tok", CALLEE, CALLER, answer_url=NODE + "/plivo/voice",
                                          status_url=NODE + outbound.STATUS_PATH, machine_detection=True,
                                          machine_detection_time_ms=4000)
    body = json.loads(request.body)
    assert {key: body[key] for key in body if key.startswith("machine_detection")} == {
        "machine_detection": "true", "machine_detection_url": NODE + "/plivo/call-status",
        "machine_detection_method": "POST", "machine_detection_time": 4000}
    plain = json.loads(outbound.place_call_request(AUTH_ID, "tok", CALLEE, CALLER, answer_url=NODE + "/plivo/voice",
                                                   status_url=NODE + outbound.STATUS_PATH).body)
    assert not any(key.startswith("machine_detection") for key in plain)
    for wrong in ({"machine_detection_time_ms": 1999}, {"machine_detection_time_ms": 10001},
                  {"machine_detection": False, "machine_detection_time_ms": 5000}):
        with pytest.raises(ValueError, match="machine_detection"):
            outbound.place_call_request(AUTH_ID, "tok", CALLEE, CALLER, answer_url=NODE + "/plivo/voice",
                                        status_url=NODE + outbound.STATUS_PATH, **({"machine_detection": True} | wrong))
    with pytest.raises(ValueError, match="status URL"):  # its result would go nowhere
        outbound.place_call_request(AUTH_ID, "tok", CALLEE, CALLER, answer_url=NODE + "/plivo/voice",
                                    machine_detection=True)


AMD_FORM = {"From": CALLER[1:], "To": CALLEE[1:], "RequestUUID": REQUEST_UUID, "ALegRequestUUID": REQUEST_UUID,
            "CallUUID": CALL_UUID, "ALegUUID": CALL_UUID, "IfMachine": "continue", "Direction": "outbound",
            "Event": "MachineDetection", "CallStatus": "in-progress"}


@pytest.mark.parametrize(("machine", "answered_by"), [("true", "machine_start"), ("false", "human"),
                                                      ("True", "machine_start")])
def test_plivos_machine_value_maps_onto_the_detectors_vocabulary(machine, answered_by):
    form = AMD_FORM | {"Machine": machine}
    assert outbound.is_amd_result(form) and not outbound.is_amd_result({**AMD_FORM, "Event": "Hangup"} | {})
    amd = outbound.parse_amd_result(form)
    assert (amd.request_uuid, amd.call_uuid, amd.answered_by) == (REQUEST_UUID, CALL_UUID, answered_by)


def test_a_signed_amd_callback_goes_to_the_calls_stream_by_its_call_uuid_and_a_bad_one_is_refused():
    request, _settings = _signed(outbound.STATUS_PATH, AMD_FORM | {"Machine": "true"})
    assert isinstance(request, AnswerRequest) and request.kind == EVENT
    # no call status (the call's in-progress came with its answer): the AMD alone, for the call's CallUUID
    assert (request.call_id, request.answered_by, request.call_status) == (CALL_UUID, "machine_start", None)
    assert "answered by machine_start" in request.note
    forged, _settings = _signed(outbound.STATUS_PATH, AMD_FORM | {"Machine": "true"}, token="other")
    assert isinstance(forged, Refusal) and forged.status == 403
    for bad in ({"Machine": "maybe"}, {"Machine": "false", "CallUUID": "nope"}, {}):
        refused, _settings = _signed(outbound.STATUS_PATH, AMD_FORM | bad)
        assert isinstance(refused, Refusal) and refused.status == 400, bad


def test_the_simulated_plivo_takes_machine_detection_as_plivo_names_it_and_refuses_what_plivo_would():
    good = {"from": CALLER[1:], "to": CALLEE[1:], "answer_url": NODE + "/plivo/voice",
            "hangup_url": NODE + "/plivo/call-status"}
    request = outbound.place_call_request(AUTH_ID, "tok", CALLEE, CALLER, answer_url=NODE + "/plivo/voice",
                                          status_url=NODE + "/plivo/call-status", machine_detection=True)
    outcome = _create(json.loads(request.body))
    assert outcome.status == 201
    placed = outcome.placed
    assert (placed.machine_detection, placed.async_amd, placed.amd_callback) == ("true", True, NODE + "/plivo/call-status")
    assert _create(good | {"machine_detection": "hangup", "machine_detection_url": NODE + "/amd"}).status == 201
    synchronous = _create(good | {"machine_detection": "true"}).placed  # no URL: no asynchronous callback
    assert (synchronous.machine_detection, synchronous.async_amd) == ("true", False)
    for wrong in ({"machine_detection": "yes"}, {"machine_detection": "Enable"},
                  {"machine_detection": "true", "machine_detection_time": 1000},
                  {"machine_detection": "true", "machine_detection_time": 20000},
                  {"machine_detection": "true", "machine_detection_url": "ftp://x"},
                  {"machine_detection": "true", "machine_detection_method": "PUT"},
                  {"machine_detection_url": NODE + "/amd"}):
        refused = _create(good | wrong)
        assert refused.status == 400 and refused.placed is None, wrong
