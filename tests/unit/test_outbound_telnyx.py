"""Placing outbound calls with Telnyx's TeXML Calls API: the request and its answer, the status callbacks (signed
with Ed25519) and their statuses, the fields through the TeXML answer to the stream, and the simulator's side."""

from __future__ import annotations

import base64
import json
import types
import urllib.parse

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from voicecore.carriers.telnyx import outbound
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.telnyx.carrier import TELNYX
from voicecore.carriers.webhook import ANSWER, EVENT, AnswerRequest, Refusal, WebhookError
from voicecore.outbound import call_fields
from voicecore.sim import carrier_rest_core as rest_core
from voicecore.sim.carrier import parse_twiml
from voicecore.sim.carrier_modes_core import CarrierCredentials

APP = "1684641123236054244"
NODE = "http://127.0.0.1:8080"
CALLEE = "+15550100001"
CALLER = "+15005550006"
CALL = "v3:9X2vxPDFY2RHSJ1EdMS0RHRksMTg7ldNxdjWbVr9zBjbGjGsSe-aiQ"
NOW_S = 1_800_000_000
KEY = Ed25519PrivateKey.generate()
PUBLIC = base64.b64encode(KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def test_the_texml_calls_request_names_the_answer_url_and_the_status_callback():
    url = NODE + "/telnyx/voice?" + urllib.parse.urlencode(call_fields.parameters_for(CALLEE, {"first_name": "Anna"}))
    request = outbound.place_call_request(APP, "KEY123", CALLEE, CALLER, url=url,
                                          status_callback=NODE + outbound.STATUS_PATH)
    assert (request.method, request.url) == ("POST", f"https://api.telnyx.com/v2/texml/calls/{APP}")
    assert dict(request.headers)["Authorization"] == "Bearer KEY123"
    assert json.loads(request.body) == {"To": CALLEE, "From": CALLER, "Url": url, "Method": "POST",
                                        "StatusCallback": NODE + "/telnyx/call-status", "StatusCallbackMethod": "POST",
                                        "StatusCallbackEvent": "initiated ringing answered completed"}


@pytest.mark.parametrize("change", [{"application_id": "a/b"}, {"api_key": ""}, {"to": "555"},
                                    {"url": "ftp://x"}, {"status_callback": "x"}])
def test_a_request_telnyx_would_refuse_is_not_built(change):
    kwargs = {"application_id": APP, "api_key": "K", "to": CALLEE, "from_": CALLER, "url": NODE + "/telnyx/voice"}
    kwargs |= change
    with pytest.raises(ValueError):
        outbound.place_call_request(kwargs.pop("application_id"), kwargs.pop("api_key"), kwargs.pop("to"),
                                    kwargs.pop("from_"), **kwargs)


def test_telnyxs_answer_gives_the_call_control_id_or_its_error():
    flat = outbound.parse_place_call_response(200, json.dumps({"call_sid": CALL, "status": "queued"}).encode())
    assert (flat.ok, flat.call_sid, flat.status) == (True, CALL, "queued")
    wrapped = outbound.parse_place_call_response(200, json.dumps({"data": {"call_sid": CALL}}).encode())
    assert wrapped.ok and wrapped.call_sid == CALL
    refused = outbound.parse_place_call_response(401, b'{"errors": [{"code": "10009", "title": "Authentication failed"}]}')
    assert (refused.ok, refused.retryable, refused.error) == (False, False, "Authentication failed")
    assert outbound.parse_place_call_response(503, b"").retryable
    assert not outbound.parse_place_call_response(200, b'{"status": "queued"}').ok


def test_status_callbacks_are_read_and_bad_ones_refused():
    form = {"CallSid": CALL, "CallStatus": "no-answer", "SequenceNumber": "2", "Direction": "outbound-api"}
    event = outbound.parse_call_status(form)
    assert (event.call_sid, event.status, event.sequence, event.duration_s) == (CALL, "no-answer", 2, None)
    for bad in ({"CallStatus": "answered"}, {"CallSid": "x"}, {"SequenceNumber": "-1"}, {"CallDuration": "x"}):
        with pytest.raises(WebhookError):
            outbound.parse_call_status(form | bad)


def _signed(target: str, form: dict[str, str], key=KEY, timestamp=NOW_S):
    body = urllib.parse.urlencode(form).encode()
    headers = {telnyx.SIGNATURE_HEADER: telnyx.sign_webhook(key, timestamp, body), telnyx.TIMESTAMP_HEADER: str(timestamp)}
    settings = types.SimpleNamespace(telnyx_public_key=PUBLIC, public_url=NODE, telnyx_codec="PCMU")
    route = TELNYX.routes[target.split("?", 1)[0]]
    return TELNYX.check_webhook(route, "POST", target, headers, body, settings, NODE + target, NOW_S), settings


def test_a_signed_status_callback_is_a_call_status_for_the_store():
    form = {"CallSid": CALL, "CallStatus": "busy", "SequenceNumber": "3", "Direction": "outbound-api"}
    request, _settings = _signed(outbound.STATUS_PATH, form)
    assert isinstance(request, AnswerRequest) and request.kind == EVENT
    assert (request.call_status.call_sid, request.call_status.status) == (CALL, "busy")
    forged, _settings = _signed(outbound.STATUS_PATH, form, key=Ed25519PrivateKey.generate())
    assert isinstance(forged, Refusal) and forged.status == 403


def test_a_placed_calls_fields_reach_the_stream_as_texml_parameters():
    query = urllib.parse.urlencode(call_fields.parameters_for(CALLEE, {"first_name": "Anna", "reason": "a <b> & c"}))
    form = {"CallSid": CALL, "CallStatus": "in-progress", "Direction": "outbound-api"}
    request, settings = _signed("/telnyx/voice?" + query, form)
    assert isinstance(request, AnswerRequest) and request.kind == ANSWER and request.call_id == CALL
    assert request.parameters == (("direction", "outbound"), ("callee", CALLEE), ("field.first_name", "Anna"),
                                  ("field.reason", "a <b> & c"))
    _type, body = TELNYX.answer_document(request, "ws://127.0.0.1:8080/telnyx/stream", "token-1", settings)
    assert parse_twiml(body).parameters == {"session_token": "token-1", "direction": "outbound", "callee": CALLEE,
                                            "field.first_name": "Anna", "field.reason": "a <b> & c"}
    inbound, _settings = _signed("/telnyx/voice", form)
    assert inbound.parameters == ()


def _create(body: dict, key: str = "KEY123"):
    credentials = CarrierCredentials(telnyx_api_key="KEY123")
    return rest_core.handle("POST", f"/v2/texml/calls/{APP}", {"authorization": f"Bearer {key}"},
                            json.dumps(body).encode(), credentials, lambda *_: False, now_s=0,
                            new_call_sid="CA" + "0123456789abcdef" * 2)


def test_the_simulated_telnyx_places_the_call_as_telnyx_answers_it():
    request = outbound.place_call_request(APP, "KEY123", CALLEE, CALLER, url=NODE + "/telnyx/voice?a=1",
                                          status_callback=NODE + "/telnyx/call-status")
    outcome = _create(json.loads(request.body))
    assert outcome.status == 200 and outcome.action == rest_core.CREATE
    placed = outbound.parse_place_call_response(outcome.status, outcome.body)
    assert placed.ok and placed.call_sid == outcome.placed.call_sid and placed.status == "queued"
    assert outcome.placed.status_events == outbound.STATUS_EVENTS and outcome.placed.carrier == "telnyx"
    assert _create(json.loads(request.body), key="other").status == 401
    assert _create({"To": CALLEE, "From": CALLER}).status == 422


def test_texml_amd_is_asked_for_as_twilios_and_its_callback_carries_answered_by():
    request = outbound.place_call_request(APP, "KEY123", CALLEE, CALLER, url=NODE + "/telnyx/voice",
                                          status_callback=NODE + outbound.STATUS_PATH, machine_detection="Enable")
    body = json.loads(request.body)
    assert (body["MachineDetection"], body["AsyncAmd"], body["AsyncAmdStatusCallback"]) == (
        "Enable", "true", NODE + "/telnyx/call-status")
    with pytest.raises(ValueError, match="machine_detection"):
        outbound.place_call_request(APP, "KEY123", CALLEE, CALLER, url=NODE + "/v", status_callback=NODE + "/s",
                                    machine_detection="Premium")
    amd = {"AccountSid": APP, "CallSid": CALL, "CallSidLegacy": CALL, "AnsweredBy": "machine_start",
           "MachineDetectionDuration": "2500"}
    request, _settings = _signed(outbound.STATUS_PATH, amd)
    assert isinstance(request, AnswerRequest) and request.kind == EVENT and request.call_id == CALL
    assert request.answered_by == "machine_start" and request.call_status is None
    wrong, _settings = _signed(outbound.STATUS_PATH, {**amd, "AnsweredBy": "machine"})
    assert isinstance(wrong, Refusal) and wrong.status == 400
    forged, _settings = _signed(outbound.STATUS_PATH, amd, key=Ed25519PrivateKey.generate())
    assert isinstance(forged, Refusal) and forged.status == 403
