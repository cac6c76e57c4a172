"""Placing a call goes through the carrier's descriptor (voicecore/carriers/base.py ``placing``,
``place_call_request``, ``parse_placed``): dial.py knows no carrier by name, each placing carrier points the
call at its own routes, and the settings its API needs are named when missing."""

from __future__ import annotations

import json
import urllib.parse
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from voicecore.carriers import registry
from voicecore.carriers.webhook import ANSWER, EVENT
from voicecore.config import ConfigError, pem_text
from voicecore.outbound import campaign_request, dial

NODE = "http://node.test"
CALLEE, CALLER = "+15005550006", "+15005550001"


@pytest.fixture(scope="module")
def pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def accounts(pem: str) -> dict[str, tuple[str, str]]:
    """Each placing carrier's account id and secret, in the forms its API takes."""
    return {"twilio": ("AC" + "0" * 32, "token"), "telnyx": ("1684641123236054244", "KEY0123"),
            "plivo": ("MA" + "X" * 18, "token"), "vonage": ("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", pem)}


def callback_urls(body: bytes) -> tuple[str, list[str]]:
    """The answer URL and the progress callback URLs of a placing request, whichever carrier's it is."""
    try:
        fields = json.loads(body)
    except ValueError:
        fields = dict(urllib.parse.parse_qsl(body.decode()))
    answer = fields.get("Url") or fields.get("answer_url")
    answer = answer[0] if isinstance(answer, list) else answer
    callbacks = [fields[name] for name in ("StatusCallback", "AsyncAmdStatusCallback", "ring_url", "hangup_url",
                                           "machine_detection_url") if name in fields]
    callbacks += fields.get("event_url", [])
    return answer, callbacks


def test_the_carriers_that_place_calls_are_the_descriptors_with_placing_settings():
    assert dial.CARRIERS == campaign_request.CARRIERS == registry.PLACING
    assert set(registry.PLACING) == {"twilio", "telnyx", "plivo", "vonage"}  # Exotel's calls are placed by its flows
    with pytest.raises(ValueError, match="placing calls is built for twilio, telnyx, plivo, vonage only, not 'exotel'"):
        dial.credentials(SimpleNamespace(), "exotel")


@pytest.mark.parametrize("carrier", registry.PLACING)
def test_a_placed_call_is_pointed_at_its_carriers_own_answer_and_event_routes(carrier, pem):
    descriptor = registry.get(carrier)
    account, secret = accounts(pem)[carrier]
    request = descriptor.place_call_request(NODE, "http://api.test", account, secret, CALLEE, CALLER,
                                            {"first_name": "Anna"}, "Enable", now_s=1.7e9, nonce="n" * 32)
    assert request.url.startswith("http://api.test/")
    answer, callbacks = callback_urls(request.body)
    answer_parts = urllib.parse.urlsplit(answer)
    assert answer.startswith(NODE) and descriptor.routes[answer_parts.path].kind == ANSWER
    query = dict(urllib.parse.parse_qsl(answer_parts.query))
    assert (query["direction"], query["callee"], query["field.first_name"]) == ("outbound", CALLEE, "Anna")
    assert callbacks, "the call's progress (and its AMD result) must come back to the node"
    for url in callbacks:
        assert url.startswith(NODE) and descriptor.routes[urllib.parse.urlsplit(url).path].kind == EVENT, url


@pytest.mark.parametrize("carrier", registry.PLACING)
def test_a_carrier_is_asked_for_its_amd_only_when_machine_detection_is(carrier, pem):
    descriptor = registry.get(carrier)
    account, secret = accounts(pem)[carrier]

    def body(machine_detection: str) -> str:
        return descriptor.place_call_request(NODE, "http://api.test", account, secret, CALLEE, CALLER, {},
                                             machine_detection, now_s=1.7e9, nonce="n" * 32).body.decode().lower()

    assert "machine" not in body("") and "machine" in body("DetectMessageEnd")


@pytest.mark.parametrize("carrier", registry.PLACING)
def test_a_missing_api_setting_is_named_with_its_variable(carrier):
    names = registry.get(carrier).placing
    config = SimpleNamespace(**{names.api_base: "http://api.test", names.account_id: "id", names.secret: ""})
    with pytest.raises(ValueError, match=f"{names.secret} is not set \\(VOICECORE_{names.secret.upper()}\\)"):
        dial.credentials(config, carrier)
    config = SimpleNamespace(**{names.api_base: "http://api.test", names.account_id: "", names.secret: "s"})
    with pytest.raises(ValueError, match=f"{names.account_id} is not set"):
        dial.credentials(config, carrier)


def test_vonages_private_key_is_read_from_the_file_it_names(tmp_path, pem):
    key_file = tmp_path / "private.key"
    key_file.write_text(pem)
    config = SimpleNamespace(vonage_api_base="http://api.test", vonage_application_id="app",
                             vonage_private_key=str(key_file))
    assert dial.credentials(config, "vonage") == dial.Credentials("http://api.test", "app", pem)
    inline = SimpleNamespace(vonage_api_base="http://api.test", vonage_application_id="app", vonage_private_key=pem)
    assert dial.credentials(inline, "vonage").auth_token == pem
    missing = SimpleNamespace(vonage_api_base="http://api.test", vonage_application_id="app",
                              vonage_private_key=str(tmp_path / "absent.key"))
    with pytest.raises(ConfigError, match="vonage_private_key: cannot read .*absent.key \\(FileNotFoundError\\)"):
        dial.credentials(missing, "vonage")
    # a secret that is not a PEM key is taken as it is, never as a path
    twilio = SimpleNamespace(twilio_api_base="http://api.test", twilio_account_sid="AC1", twilio_auth_token="/etc/x")
    assert dial.credentials(twilio, "twilio").auth_token == "/etc/x"
    assert pem_text("vonage_private_key", "") == ""


@pytest.mark.parametrize("carrier", registry.PLACING)
def test_each_carriers_answer_to_placing_is_read_by_its_descriptor(carrier):
    descriptor = registry.get(carrier)
    refused = descriptor.parse_placed(401, b'{"message": "Authenticate", "title": "Unauthorized"}')
    assert not refused.ok and not refused.retryable and refused.error
    busy = descriptor.parse_placed(503, b"")
    assert not busy.ok and busy.retryable


def test_a_carrier_that_places_no_calls_says_so():
    with pytest.raises(ValueError, match="placing calls is not built for carrier 'exotel'"):
        registry.get("exotel").place_call_request(NODE, "http://api.test", "a", "s", CALLEE, CALLER, {}, "",
                                                  now_s=0.0, nonce="n")
