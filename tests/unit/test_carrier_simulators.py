"""Each carrier's simulator side (``voicecore/carriers/<name>/sim.py``, through its descriptor): what the carrier
simulator asks a carrier instead of knowing it. The answer webhooks, answer documents and stream upgrades are
pinned by tests/unit/test_carrier_sim_modes.py; here: which adapter plays each carrier's stream, the settings that
serve it, its calls' ids, and the callbacks of a call its API placed, each checked with the gateway's own check."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

import pytest

from voicecore.carriers import registry
from voicecore.carriers.base import CarrierSettings
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.simulator import CarrierCredentials, PlacedCallRequest
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.twilio.signature import signature_is_valid
from voicecore.carriers.vonage import protocol as vonage
from voicecore.sim import carrier_modes_core as modes
from voicecore.sim.carrier import generate_credentials

NOW_S = 1_700_000_000.0
CREDENTIALS = CarrierCredentials(twilio_auth_token="t" * 32, telnyx_private_key="11" * 32, plivo_auth_token="plivo-token",
                                  vonage_signature_secret="vonage-secret-that-is-long-enough!", exotel_username="key",
                                  exotel_password="secret")


class CountingIds:
    """Ids that say which kind was drawn, so a carrier's shape shows."""

    def uuid(self):
        return "uuid"

    def uuid_hex(self):
        return "hex"

    def token_hex(self, nbytes):
        return "h" * 2 * nbytes

    def token_urlsafe(self, nbytes):
        return "u" * nbytes


def _placed(carrier: str, **fields) -> PlacedCallRequest:
    values = dict(account_sid="acct", call_sid="call-1", to="+15550100001", from_="+15005550006",
                  url="http://node/answer", twiml="", status_callback="http://node/status",
                  status_events=("initiated", "ringing", "answered", "completed"), machine_detection="Enable",
                  async_amd=True, carrier=carrier, amd_callback="http://node/amd")
    values.update(fields)
    return PlacedCallRequest(**values)


def test_every_carrier_but_twilio_is_played_by_the_adapter_on_its_carrier_side():
    for carrier in registry.CARRIERS:
        adapter = modes.adapter_for(carrier.name)
        if carrier.carrier_side is None:
            assert adapter is None  # the simulator's own core (Twilio's)
        else:
            assert adapter.carrier_side is carrier.carrier_side and adapter.carrier == carrier.name
    assert modes.adapter_for("twilio") is None
    with pytest.raises(ValueError):
        modes.adapter_for("no-such-carrier")


@pytest.mark.parametrize("name", registry.NAMES)
def test_the_settings_a_carrier_names_make_a_stack_serve_it(name):
    carrier = registry.get(name)
    settings = carrier.simulator.gateway_settings(generate_credentials("tok"))
    assert set(settings) == set(carrier.simulator.serving_settings) and all(settings.values())
    fields = {key: value for key, value in settings.items() if key in CarrierSettings.__slots__}
    assert carrier.served(CarrierSettings(**fields))


def test_a_calls_ids_have_its_carriers_shape():
    ids = {name: registry.get(name).simulator.new_identity(None, None, "+1", "+2", CountingIds())
           for name in ("telnyx", "plivo", "vonage", "exotel")}
    assert ids["telnyx"].call_id == "v3:" + "u" * 39 and ids["telnyx"].session_id == "uuid"
    assert ids["plivo"].call_id == ids["vonage"].call_id == ids["plivo"].stream_id == "uuid"
    assert (ids["exotel"].call_id, ids["exotel"].stream_id, ids["exotel"].account_id, ids["exotel"].session_id) == (
        "hex", "hex", "simulator", "")
    kept = registry.get("telnyx").simulator.new_identity("v3:given", "acct", "+1", "+2", CountingIds())
    assert (kept.call_id, kept.account_id) == ("v3:given", "acct")
    assert registry.get("vonage").simulator.new_nonce(CountingIds()) == "uuid"  # a JWT id
    assert registry.get("plivo").simulator.new_nonce(CountingIds()) == "h" * 20  # a signature nonce


def test_twiml_calls_tell_the_events_asked_for_and_always_the_final_one():
    simulator = registry.get("twilio").simulator
    placed = _placed("twilio", status_events=("ringing",))
    assert simulator.progress_callback(placed, "initiated", sequence=0, duration_s=None, call_uuid="") is None
    assert simulator.progress_callback(placed, "in-progress", sequence=1, duration_s=None, call_uuid="") is None
    url, form = simulator.progress_callback(placed, "ringing", sequence=1, duration_s=None, call_uuid="")
    assert url == "http://node/status" and form["SequenceNumber"] == "1" and form["CallStatus"] == "ringing"
    url, form = simulator.progress_callback(placed, "completed", sequence=2, duration_s=7, call_uuid="")
    assert form["CallDuration"] == "7" and form["Direction"] == "outbound-api"
    assert simulator.progress_callback(_placed("twilio", status_callback=""), "busy", sequence=0, duration_s=None,
                                       call_uuid="") is None


def test_twilio_and_telnyx_sign_their_callbacks_as_the_gateway_checks_them():
    twilio_sim, telnyx_sim = registry.get("twilio").simulator, registry.get("telnyx").simulator
    placed = _placed("twilio")
    (amd,) = twilio_sim.amd_callbacks(placed, "machine_start", 1800, None, "")
    assert amd.at_ms == 1800 and amd.fields["AnsweredBy"] == "machine_start" and "CallSidLegacy" not in amd.fields
    request = twilio_sim.callback_request(placed, placed.amd_callback, amd.fields, CREDENTIALS, now_s=NOW_S, nonce="n")
    headers = dict(request.headers)
    assert signature_is_valid(CREDENTIALS.twilio_auth_token, placed.amd_callback, dict(parse_qsl(request.body.decode())),
                              headers["X-Twilio-Signature"])
    (amd,) = telnyx_sim.amd_callbacks(_placed("telnyx"), "human", 900, None, "")
    assert amd.fields["CallSidLegacy"] == "call-1"
    request = telnyx_sim.callback_request(_placed("telnyx"), "http://node/amd", amd.fields, CREDENTIALS, now_s=NOW_S,
                                          nonce="n")
    headers = dict(request.headers)
    assert telnyx.verify_webhook(CREDENTIALS.telnyx_public_key(), headers[telnyx.SIGNATURE_HEADER],
                                 headers[telnyx.TIMESTAMP_HEADER], request.body, NOW_S)
    assert telnyx_sim.amd_mode(_placed("telnyx", machine_detection="")) == ""
    assert telnyx_sim.amd_mode(_placed("telnyx", machine_detection="DetectMessageEnd")) == "DetectMessageEnd"


def test_plivo_tells_its_ring_and_hang_up_and_its_machine_detection_signed_v3():
    simulator = registry.get("plivo").simulator
    placed = _placed("plivo", ring_url="http://node/ring", machine_detection="hangup")
    for status in ("initiated", "in-progress"):
        assert simulator.progress_callback(placed, status, sequence=0, duration_s=None, call_uuid="") is None
    url, form = simulator.progress_callback(placed, "ringing", sequence=0, duration_s=None, call_uuid="")
    assert url == "http://node/ring" and form["Event"] == "Ring" and "CallUUID" not in form
    url, form = simulator.progress_callback(placed, "completed", sequence=0, duration_s=12, call_uuid="cu")
    assert url == "http://node/status" and form["HangupCause"] == "NORMAL_CLEARING" and form["Duration"] == "12"
    assert form["CallUUID"] == "cu"
    assert simulator.amd_callbacks(placed, "unknown", 5000, None, "cu") == ()  # its AMD heard nothing: no callback
    (amd,) = simulator.amd_callbacks(placed, "machine_start", 2000, None, "cu")
    assert amd.fields["Machine"] == "true" and amd.fields["IfMachine"] == "hangup" and amd.fields["CallUUID"] == "cu"
    request = simulator.callback_request(placed, placed.amd_callback, amd.fields, CREDENTIALS, now_s=NOW_S, nonce="n1")
    headers = dict(request.headers)
    assert plivo.validate_signature_v3("plivo-token", placed.amd_callback, "n1", headers[plivo.SIGNATURE_V3_HEADER],
                                       dict(parse_qsl(request.body.decode())), "POST")
    fetch = simulator.transfer_fetch("http://node/plivo/transfer?to=x", "cu", CREDENTIALS, nonce="n2")
    assert dict(parse_qsl(fetch.body.decode()))["Event"] == "Transfer"
    assert plivo.validate_signature_v3("plivo-token", fetch.url, "n2", dict(fetch.headers)[plivo.SIGNATURE_V3_HEADER],
                                       dict(parse_qsl(fetch.body.decode())), "POST")
    for name in ("twilio", "telnyx", "vonage", "exotel"):
        assert registry.get(name).simulator.transfer_fetch("http://x", "c", CREDENTIALS, nonce="n") is None


def test_vonage_tells_every_step_and_its_machine_detection_then_the_beep_as_signed_json_events():
    simulator = registry.get("vonage").simulator
    placed = _placed("vonage", machine_detection="default")
    url, fields = simulator.progress_callback(placed, "initiated", sequence=0, duration_s=None, call_uuid="")
    assert fields == {"status": "started"}
    url, fields = simulator.progress_callback(placed, "completed", sequence=0, duration_s=3, call_uuid="")
    assert fields == {"status": "completed", "duration": "3"}
    (human,) = simulator.amd_callbacks(placed, "human", 1500, 4000, "")
    assert human.fields == {"status": "human"} and not human.beep
    verdict, beep = simulator.amd_callbacks(placed, "machine_end_beep", 2500, 4000, "")
    assert verdict.fields == {"status": "machine"} and (beep.at_ms, beep.beep) == (4000, True)
    assert beep.fields == {"status": "machine", "sub_state": "beep_start"}
    assert len(simulator.amd_callbacks(_placed("vonage", machine_detection="detect"), "machine_start", 2500, 4000,
                                       "")) == 1
    request = simulator.callback_request(placed, placed.amd_callback, beep.fields, CREDENTIALS, now_s=NOW_S,
                                         nonce="jwt-id")
    event = json.loads(request.body)
    assert event["uuid"] == "call-1" and event["sub_state"] == "beep_start"
    assert event["timestamp"] == "2023-11-14T22:13:20.000Z"
    assert vonage.verify_signed_webhook(dict(request.headers)["Authorization"], request.body,
                                        CREDENTIALS.vonage_signature_secret, NOW_S)
