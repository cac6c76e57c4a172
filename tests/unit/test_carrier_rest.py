"""The non-Twilio carriers' call-control REST modules (voicecore/carriers/{telnyx,plivo,vonage}_rest.py), the
decision per carrier (voicecore/carriers/call_control.py) and the carrier simulator's REST core that answers
them (voicecore/sim/carrier_rest_core.py): request shapes, authentication, answers, the retry rule, and bad
ids refused with ValueError before anything is sent."""

from __future__ import annotations

import base64
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from voicecore.carriers import call_control
from voicecore.carriers.vonage import rest as vonage_rest
from voicecore.carriers.plivo import rest as plivo_rest
from voicecore.carriers.telnyx import rest as telnyx_rest
from voicecore.carriers.rest_common import check_target
from voicecore.sim import carrier_rest_core as sim
from voicecore.sim.carrier_modes_core import CarrierCredentials

CCID = "v3:KBnLO0ZK3DhKM5s7bE9VluaSmKsOchKht_fUYvxcp8ysbmzCCtpkmA"  # Telnyx's own example id
UUID = "edaa59e1-79e0-41de-b016-f7a7570f6e9c"
AUTH_ID = "MA0123456789ABCDEF01"
APP_ID = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def headers(request) -> dict[str, str]:
    return {name.lower(): value for name, value in request.headers}


# --- Telnyx ---------------------------------------------------------------------------------------------

def test_telnyx_hangup_and_transfer_are_call_control_commands_with_a_bearer_key():
    hangup = telnyx_rest.hangup_request(CCID, "KEYSECRET", command_id="c1", base_url="http://h/")
    assert (hangup.method, hangup.url) == ("POST", f"http://h/v2/calls/{CCID}/actions/hangup")
    assert headers(hangup)["authorization"] == "Bearer KEYSECRET"
    assert headers(hangup)["content-type"] == "application/json"
    assert json.loads(hangup.body) == {"command_id": "c1"}
    transfer = telnyx_rest.transfer_request(CCID, "sip:agent@pbx.example.com", "KEYSECRET")
    assert transfer.url == f"https://api.telnyx.com/v2/calls/{CCID}/actions/transfer"
    assert json.loads(transfer.body) == {"to": "sip:agent@pbx.example.com"}


@pytest.mark.parametrize("bad", ["", "v3:a/../b", "short", "v3:" + "a" * 300, "v3:a b" + "c" * 10, "v3:é" * 4])
def test_telnyx_refuses_an_unusable_call_control_id(bad):
    with pytest.raises(ValueError):
        telnyx_rest.hangup_request(bad, "KEY")


def test_telnyx_answers():
    ok = telnyx_rest.parse_response(200, b'{"data":{"result":"ok"}}')
    assert (ok.ok, ok.status) == (True, "ok")
    ended = telnyx_rest.parse_response(422, b'{"errors":[{"code":"90018","title":"Call has already ended"}]}')
    assert (ended.ok, ended.retryable, ended.error) == (False, False, "Call has already ended (90018)")
    assert telnyx_rest.parse_response(503, b"<html>").retryable
    assert telnyx_rest.parse_response(429, b"").retryable
    assert telnyx_rest.parse_response(401, b"[]").error == "HTTP 401"


# --- Plivo ----------------------------------------------------------------------------------------------

def test_plivo_hangup_is_a_delete_with_basic_auth_and_transfer_posts_the_aleg_url():
    hangup = plivo_rest.hangup_request(AUTH_ID, UUID, "TOKEN")
    assert (hangup.method, hangup.url, hangup.body) == (
        "DELETE", f"https://api.plivo.com/v1/Account/{AUTH_ID}/Call/{UUID}/", b"")
    assert headers(hangup)["authorization"] == "Basic " + base64.b64encode(f"{AUTH_ID}:TOKEN".encode()).decode()
    url = plivo_rest.transfer_url("https://voice.example.com", "+15550100")
    assert url == "https://voice.example.com/plivo/transfer?to=%2B15550100"
    transfer = plivo_rest.transfer_request(AUTH_ID, UUID, url, "TOKEN", base_url="http://127.0.0.1:9")
    assert (transfer.method, transfer.url) == ("POST", f"http://127.0.0.1:9/v1/Account/{AUTH_ID}/Call/{UUID}/")
    assert json.loads(transfer.body) == {"legs": "aleg", "aleg_url": url, "aleg_method": "POST"}


def test_plivo_dial_xml_dials_a_number_or_a_sip_user():
    assert plivo_rest.dial_xml("+15550100") == "<Response><Dial><Number>+15550100</Number></Dial></Response>"
    assert plivo_rest.dial_xml("sip:a@b.example") == "<Response><Dial><User>sip:a@b.example</User></Dial></Response>"
    assert sim.dial_target(plivo_rest.dial_xml("+15550100").encode()) == "+15550100"


@pytest.mark.parametrize("auth_id, call_uuid", [("XA0123456789ABCDEF01", UUID), (AUTH_ID, "not-a-uuid"),
                                                (AUTH_ID, UUID + "/../x"), ("ma0123456789abcdef01", UUID)])
def test_plivo_refuses_bad_ids(auth_id, call_uuid):
    with pytest.raises(ValueError):
        plivo_rest.hangup_request(auth_id, call_uuid, "TOKEN")


def test_plivo_answers():
    assert plivo_rest.parse_response(204, b"").ok
    assert plivo_rest.parse_response(202, b'{"message":"call transferred","api_id":"x"}').status == "call transferred"
    missing = plivo_rest.parse_response(404, b'{"api_id":"x","error":"not found"}')
    assert (missing.ok, missing.retryable, missing.error) == (False, False, "not found")
    assert plivo_rest.parse_response(500, b"").retryable


# --- Vonage ---------------------------------------------------------------------------------------------

def test_vonage_requests_are_puts_with_an_rs256_application_jwt(pem):
    token = vonage_rest.application_jwt(APP_ID, pem, NOW, "jti-1")
    public = serialization.load_pem_private_key(pem.encode(), None).public_key()
    claims = jwt.decode(token, public, algorithms=["RS256"], options={"verify_exp": False, "verify_iat": False})
    assert claims == {"application_id": APP_ID, "iat": int(NOW), "jti": "jti-1", "exp": int(NOW) + vonage_rest.JWT_TTL_S}
    hangup = vonage_rest.hangup_request(UUID, token)
    assert (hangup.method, hangup.url) == ("PUT", f"https://api.nexmo.com/v1/calls/{UUID}")
    assert headers(hangup)["authorization"] == f"Bearer {token}" and json.loads(hangup.body) == {"action": "hangup"}
    transfer = vonage_rest.transfer_request(UUID, "+447700900000", token)
    assert json.loads(transfer.body) == {"action": "transfer", "destination": {"type": "ncco", "ncco": [
        {"action": "connect", "endpoint": [{"type": "phone", "number": "447700900000"}]}]}}
    sip = vonage_rest.transfer_request(UUID, "sip:x@y.example", token)
    assert json.loads(sip.body)["destination"]["ncco"][0]["endpoint"] == [{"type": "sip", "uri": "sip:x@y.example"}]


def test_vonage_refuses_bad_ids_and_keys(pem):
    with pytest.raises(ValueError):
        vonage_rest.hangup_request("CON-" + UUID, "t")
    with pytest.raises(ValueError):
        vonage_rest.application_jwt("not-a-uuid", pem, NOW, "j")
    with pytest.raises(ValueError):
        vonage_rest.application_jwt(APP_ID, "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n", NOW, "j")


def test_vonage_answers():
    assert vonage_rest.parse_response(204, b"").ok
    gone = vonage_rest.parse_response(404, b'{"type":"x","title":"Not Found","detail":"..."}')
    assert (gone.ok, gone.retryable, gone.error) == (False, False, "Not Found")
    assert vonage_rest.parse_response(502, b"").retryable


# --- the decision per carrier ---------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["", "15550100 ", "<x>", "tel:+1555", "sip:a b", "+" + "1" * 16])
def test_a_bad_transfer_target_is_refused(target):
    with pytest.raises(ValueError):
        check_target(target)


def test_end_call_per_carrier(pem):
    settings = call_control.CallControlSettings(
        telnyx_api_key="K", plivo_auth_id=AUTH_ID, plivo_auth_token="T", public_url="https://gw.example.com",
        vonage_application_id=APP_ID, vonage_private_key=pem)
    kw = {"now_s": NOW, "nonce": "n1"}
    telnyx = call_control.end_call(call_control.CallRef("telnyx", CCID), "transfer", "+15550100", settings, **kw)
    assert telnyx.url.endswith("/actions/transfer") and json.loads(telnyx.body) == {"to": "+15550100", "command_id": "n1"}
    plivo = call_control.end_call(call_control.CallRef("plivo", UUID), "transfer", "+15550100", settings, **kw)
    assert json.loads(plivo.body)["aleg_url"] == "https://gw.example.com/plivo/transfer?to=%2B15550100"
    vonage = call_control.end_call(call_control.CallRef("vonage", UUID), "hangup", "", settings, **kw)
    assert vonage.method == "PUT"
    exotel = call_control.end_call(call_control.CallRef("exotel", "abc"), "hangup", "", settings, **kw)
    assert isinstance(exotel, call_control.CloseStream)
    unset = call_control.end_call(call_control.CallRef("telnyx", CCID), "hangup", "", call_control.CallControlSettings(), **kw)
    assert isinstance(unset, call_control.CannotEnd) and "telnyx_api_key" in unset.reason
    with pytest.raises(ValueError):
        call_control.end_call(call_control.CallRef("twilio", "CA1"), "hangup", "", settings, **kw)  # not a CallSid
    with pytest.raises(ValueError):
        call_control.end_call(call_control.CallRef("nope", "abc"), "hangup", "", settings, **kw)  # no such carrier


def test_twilios_hangup_and_transfer_go_the_same_way_with_the_same_bytes():
    """Twilio's calls end through call_control like every carrier's, with the requests its rest module builds."""
    from voicecore.carriers.twilio import rest as twilio_rest

    account, call = "AC" + "1" * 32, "CA" + "2" * 32
    settings = call_control.CallControlSettings(twilio_auth_token="tok", twilio_api_base="http://sim")
    ref = call_control.CallRef("twilio", call, account)
    kw = {"now_s": NOW, "nonce": "n1"}
    assert call_control.end_call(ref, "hangup", "", settings, **kw) == twilio_rest.hangup_request(
        account, call, "tok", base_url="http://sim")
    assert call_control.end_call(ref, "transfer", "+15550100", settings, **kw) == twilio_rest.transfer_request(
        account, call, "+15550100", "tok", base_url="http://sim")
    assert call_control.parse_response("twilio", 200, b'{"status": "completed"}') == twilio_rest.parse_response(
        200, b'{"status": "completed"}')
    assert call_control.title("twilio") == "Twilio" and call_control.title("telnyx") == "Telnyx"


def test_a_call_started_names_the_carrier_ids_its_ending_uses():
    from voicecore.bus.messages import CallStarted

    twilio = CallStarted(1, 2, "CA" + "2" * 32, "MZ1", "AC" + "1" * 32)
    assert call_control.call_ref(twilio) == call_control.CallRef("twilio", "CA" + "2" * 32, "AC" + "1" * 32)
    plivo = CallStarted(1, 2, "h" + "0" * 40, "h" + "1" * 40, "", "plivo", UUID, "acct")
    assert call_control.call_ref(plivo) == call_control.CallRef("plivo", UUID, "acct")


# --- the simulator's side -------------------------------------------------------------------------------

def _live(carrier, call_id):
    return call_id in (CCID, UUID)


def test_the_simulator_grants_the_requests_the_modules_build(pem):
    creds = CarrierCredentials(plivo_auth_token="T", telnyx_api_key="K", plivo_auth_id=AUTH_ID,
                               vonage_application_id=APP_ID, vonage_private_key=pem)
    settings = call_control.CallControlSettings(telnyx_api_key="K", plivo_auth_id=AUTH_ID, plivo_auth_token="T",
                                                public_url="http://gw", vonage_application_id=APP_ID,
                                                vonage_private_key=pem)
    for carrier, call_id in (("telnyx", CCID), ("plivo", UUID), ("vonage", UUID)):
        for action in ("hangup", "transfer"):
            request = call_control.end_call(call_control.CallRef(carrier, call_id), action, "+15550100", settings,
                                            now_s=NOW, nonce="n")
            path = request.url.split("api.", 1)[1].split("/", 1)[1]
            outcome = sim.handle(request.method, "/" + path, headers(request), request.body, creds, _live, now_s=NOW)
            assert (outcome.carrier, outcome.call_id, outcome.action) == (carrier, call_id, action), outcome
            assert call_control.parse_response(carrier, outcome.status, outcome.body).ok


def test_the_simulator_refuses_wrong_credentials_and_ended_calls(pem):
    creds = CarrierCredentials(plivo_auth_token="T", telnyx_api_key="K", plivo_auth_id=AUTH_ID,
                               vonage_application_id=APP_ID, vonage_private_key=pem)
    wrong = telnyx_rest.hangup_request(CCID, "WRONG")
    outcome = sim.handle("POST", f"/v2/calls/{CCID}/actions/hangup", headers(wrong), wrong.body, creds, _live, now_s=NOW)
    assert outcome.status == 401 and not telnyx_rest.parse_response(outcome.status, outcome.body).retryable
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    forged = vonage_rest.hangup_request(UUID, vonage_rest.application_jwt(APP_ID, other_key, NOW, "j"))
    assert sim.handle("PUT", f"/v1/calls/{UUID}", headers(forged), forged.body, creds, _live, now_s=NOW).status == 401
    ended = plivo_rest.hangup_request(AUTH_ID, "11111111-2222-3333-4444-555555555555", "T")
    outcome = sim.handle("DELETE", f"/v1/Account/{AUTH_ID}/Call/11111111-2222-3333-4444-555555555555/",
                         headers(ended), b"", creds, _live, now_s=NOW)
    assert outcome.status == 404 and plivo_rest.parse_response(outcome.status, outcome.body).error == "not found"


def test_the_simulator_takes_twilios_calls_requests_as_twilio_does():
    """The demo's agents hang up and transfer Twilio calls through the simulator's Calls resource."""
    from voicecore.carriers.twilio import rest as twilio_rest

    account, call = "AC" + "a" * 32, "CA" + "b" * 32
    creds = CarrierCredentials(twilio_auth_token="tok")
    live = lambda carrier, call_id: (carrier, call_id) == ("twilio", call)  # noqa: E731
    path = f"/2010-04-01/Accounts/{account}/Calls/{call}.json"
    hangup = twilio_rest.hangup_request(account, call, "tok", base_url="http://sim")
    outcome = sim.handle("POST", path, headers(hangup), hangup.body, creds, live, now_s=NOW)
    assert (outcome.carrier, outcome.call_id, outcome.action) == ("twilio", call, "hangup")
    assert twilio_rest.parse_response(outcome.status, outcome.body) == twilio_rest.RestResult(True, False, "completed", None)
    transfer = twilio_rest.transfer_request(account, call, "+15550100", "tok", base_url="http://sim")
    outcome = sim.handle("POST", path, headers(transfer), transfer.body, creds, live, now_s=NOW)
    assert (outcome.action, outcome.target) == ("transfer", "+15550100")
    wrong = twilio_rest.hangup_request(account, call, "other", base_url="http://sim")
    outcome = sim.handle("POST", path, headers(wrong), wrong.body, creds, live, now_s=NOW)
    assert outcome.status == 401 and twilio_rest.parse_response(outcome.status, outcome.body).error == "Authenticate"
    ended = sim.handle("POST", path.replace("b" * 32, "c" * 32), headers(hangup), hangup.body, creds, live, now_s=NOW)
    assert ended.status == 400 and ended.action == "" and json.loads(ended.body)["code"] == 21220


def test_the_settings_default_to_each_carriers_own_api_base():
    """The settings repeat each rest module's default base URL (so they need no carrier module): the same."""
    from voicecore.carriers.twilio import rest as twilio_rest
    from voicecore.config import load_config

    defaults = call_control.CallControlSettings()
    assert (defaults.twilio_api_base, defaults.telnyx_api_base, defaults.plivo_api_base, defaults.vonage_api_base) == (
        twilio_rest.DEFAULT_BASE_URL, telnyx_rest.DEFAULT_BASE_URL, plivo_rest.DEFAULT_BASE_URL,
        vonage_rest.DEFAULT_BASE_URL)
    from_config = call_control.CallControlSettings.from_config(load_config({}))
    assert (from_config.twilio_api_base, from_config.telnyx_api_base, from_config.plivo_api_base,
            from_config.vonage_api_base) == (defaults.twilio_api_base, defaults.telnyx_api_base,
                                             defaults.plivo_api_base, defaults.vonage_api_base)


# --- DTMF -----------------------------------------------------------------------------------------------

def test_send_digits_per_carrier_is_its_send_dtmf_request_or_in_band_tones(pem):
    settings = call_control.CallControlSettings(telnyx_api_key="K", plivo_auth_id=AUTH_ID, plivo_auth_token="T",
                                                vonage_application_id=APP_ID, vonage_private_key=pem,
                                                twilio_auth_token="tok")
    kw = {"now_s": NOW, "nonce": "n1"}
    telnyx = call_control.send_digits(call_control.CallRef("telnyx", CCID), "1w2W#", settings, **kw)
    assert (telnyx.method, telnyx.url) == ("POST", f"https://api.telnyx.com/v2/calls/{CCID}/actions/send_dtmf")
    assert json.loads(telnyx.body) == {"digits": "1w2W#", "duration_millis": 100, "command_id": "n1"}
    assert headers(telnyx)["authorization"] == "Bearer K"
    plivo = call_control.send_digits(call_control.CallRef("plivo", UUID), "1w2", settings, **kw)
    assert (plivo.method, plivo.url) == ("POST", f"https://api.plivo.com/v1/Account/{AUTH_ID}/Call/{UUID}/DTMF/")
    assert json.loads(plivo.body) == {"digits": "1w2", "leg": "aleg"}
    assert headers(plivo)["authorization"] == "Basic " + base64.b64encode(f"{AUTH_ID}:T".encode()).decode()
    vonage = call_control.send_digits(call_control.CallRef("vonage", UUID), "1w2W#", settings, **kw)
    assert (vonage.method, vonage.url) == ("PUT", f"https://api.nexmo.com/v1/calls/{UUID}/dtmf")
    assert json.loads(vonage.body) == {"digits": "1p2pp#"}  # Vonage's pause is p (500 ms)
    claims = jwt.decode(headers(vonage)["authorization"].removeprefix("Bearer "),
                        serialization.load_pem_private_key(pem.encode(), None).public_key(), algorithms=["RS256"],
                        options={"verify_exp": False, "verify_iat": False})
    assert claims["application_id"] == APP_ID and claims["jti"] == "n1"
    twilio = call_control.send_digits(call_control.CallRef("twilio", "CA" + "2" * 32, "AC" + "1" * 32), "1", settings, **kw)
    assert isinstance(twilio, call_control.InBand)  # no digit message on its bidirectional stream: tones
    assert isinstance(call_control.send_digits(call_control.CallRef("exotel", "abc"), "1", settings, **kw),
                      call_control.InBand)
    unset = call_control.send_digits(call_control.CallRef("plivo", UUID), "1", call_control.CallControlSettings(), **kw)
    assert isinstance(unset, call_control.CannotEnd) and "plivo_auth_id" in unset.reason
    for bad in ("", "1x", "ww"):
        with pytest.raises(ValueError):
            call_control.send_digits(call_control.CallRef("telnyx", CCID), bad, settings, **kw)


def test_the_simulator_takes_the_send_dtmf_requests_and_checks_their_shape_and_auth(pem):
    creds = CarrierCredentials(plivo_auth_token="T", telnyx_api_key="K", plivo_auth_id=AUTH_ID,
                               vonage_application_id=APP_ID, vonage_private_key=pem)
    settings = call_control.CallControlSettings(telnyx_api_key="K", plivo_auth_id=AUTH_ID, plivo_auth_token="T",
                                                vonage_application_id=APP_ID, vonage_private_key=pem)
    for carrier, call_id, sent in (("telnyx", CCID, "1w2"), ("plivo", UUID, "1w2"), ("vonage", UUID, "1p2")):
        request = call_control.send_digits(call_control.CallRef(carrier, call_id), "1w2", settings, now_s=NOW, nonce="n")
        path = "/" + request.url.split("api.", 1)[1].split("/", 1)[1]
        outcome = sim.handle(request.method, path, headers(request), request.body, creds, _live, now_s=NOW)
        assert (outcome.carrier, outcome.call_id, outcome.action, outcome.target) == (carrier, call_id, sim.DTMF, sent)
        assert call_control.parse_response(carrier, outcome.status, outcome.body).ok, outcome
        # a wrong credential, a bad body, a call no longer live: refused as the carrier refuses them
        forged = dict(headers(request), authorization="Bearer nope")
        assert sim.handle(request.method, path, forged, request.body, creds, _live, now_s=NOW).status == 401
        assert sim.handle(request.method, path, headers(request), b'{"digits": "1x"}', creds, _live,
                          now_s=NOW).status in (400, 422)
        gone = lambda carrier, call_id: False  # noqa: E731
        assert sim.handle(request.method, path, headers(request), request.body, creds, gone, now_s=NOW).status in (404, 422)
    telnyx = call_control.send_digits(call_control.CallRef("telnyx", CCID), "1", settings, now_s=NOW, nonce="n")
    too_long = json.dumps({"digits": "1", "duration_millis": 900}).encode()
    outcome = sim.handle("POST", f"/v2/calls/{CCID}/actions/send_dtmf", headers(telnyx), too_long, creds, _live, now_s=NOW)
    assert outcome.status == 422 and outcome.error == "bad duration_millis"
