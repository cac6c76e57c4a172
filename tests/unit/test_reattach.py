"""The re-attach step's cores: its token (voicecore/reattach.py), its decision, Twilio's answer document naming it
and its request's check (voicecore/carriers/twilio), and the gateway's ledger in a runtime directory
(workers/gateway/reattach.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from urllib.parse import parse_qs, urlsplit

import pytest

from voicecore import reattach as ra
from voicecore import stream_tokens as st
from voicecore.carriers.twilio.signature import compute_signature
from voicecore.carriers.webhook import REATTACH, AnswerRequest, Refusal
from workers.gateway import carrier_core as cc
from workers.gateway.reattach import ReattachLedger

SECRET = st.derive_secret("", "tw-token")
NOW_MS = 1_800_000_000_000
CALL = "CA" + "1" * 32
OTHER = "CA" + "2" * 32
NONCE = bytes(range(16))
BASE = "https://voice.example.com"
SETTINGS = cc.CarrierSettings(twilio_auth_token="tw-token", public_url=BASE)


def test_a_token_names_its_call_and_outlives_a_stream_token():
    tokens = ra.ReattachTokens(SECRET, "node-a")
    token = tokens.issue(CALL, NOW_MS, NONCE)
    one_hour_on = ra.ReattachTokens(SECRET, "node-b").check(token, NOW_MS + 3600_000)
    assert one_hour_on.ok and one_hour_on.call_sid == CALL and one_hour_on.issuer == "node-a"
    assert one_hour_on.nonce == NONCE.hex()
    assert not ra.ReattachTokens(SECRET, "node-b").check(token, NOW_MS + ra.REATTACH_TTL_MS).ok


def test_a_stream_token_is_no_reattach_token_and_the_reverse():
    stream_token = st.SignedTokens(SECRET, "node-a").issue(CALL, NOW_MS, NONCE)
    assert ra.ReattachTokens(SECRET, "node-a").check(stream_token, NOW_MS).reason == st.REDEEM_FORGED
    reattach_token = ra.ReattachTokens(SECRET, "node-a").issue(CALL, NOW_MS, NONCE)
    assert st.SignedTokens(SECRET, "node-a").check(reattach_token, NOW_MS).reason == st.REDEEM_FORGED


def test_a_token_of_another_secret_or_altered_is_forged():
    token = ra.ReattachTokens(st.derive_secret("another", ""), "node-a").issue(CALL, NOW_MS, NONCE)
    assert ra.ReattachTokens(SECRET, "node-a").check(token, NOW_MS).reason == st.REDEEM_FORGED
    good = ra.ReattachTokens(SECRET, "node-a").issue(CALL, NOW_MS, NONCE)
    altered = good[:-2] + ("AA" if good[-2:] != "AA" else "BB")
    assert not ra.ReattachTokens(SECRET, "node-a").check(altered, NOW_MS).ok


@pytest.mark.parametrize("reason, final", [("connection lost", False), ("shutdown", False), ("stop", True),
                                           ("ended by the agent", True), ("drain deadline", True),
                                           ("violation", True), ("slow peer", True)])
def test_which_stream_ends_are_reattached(reason, final):
    assert ra.ended_normally(reason) is final


def _ok(call_sid=CALL):
    return st.TokenCheck(True, None, call_sid, "node-a", NONCE.hex(), NOW_MS + 1)


@pytest.mark.parametrize("check, call, first_use, ended, draining, completed, action", [
    (_ok(), CALL, True, False, False, False, ra.ATTACH),
    (_ok(), CALL, True, True, False, False, ra.HANGUP),
    (_ok(), CALL, True, False, True, False, ra.HANGUP),
    (_ok(), CALL, True, False, False, True, ra.HANGUP),
    (_ok(), CALL, False, False, False, False, ra.REFUSE),
    (_ok(), OTHER, True, False, False, False, ra.REFUSE),
    (st.TokenCheck(False, st.REDEEM_FORGED), CALL, True, False, False, False, ra.REFUSE),
    (st.TokenCheck(False, st.REDEEM_EXPIRED), CALL, True, False, False, False, ra.REFUSE),
])
def test_the_decision(check, call, first_use, ended, draining, completed, action):
    decision = ra.decide(check, call, first_use, ended, draining, completed)
    assert decision.action == action
    assert decision.reason


def test_twilios_answer_names_the_reattach_step_and_its_request_is_checked():
    request = AnswerRequest("twilio", "answer", CALL)
    content_type, body = cc.answer_document(request, "wss://voice.example.com", "session-tok", SETTINGS, "re-tok")
    assert content_type == b"text/xml"
    connect = ElementTree.fromstring(body).find("./Connect")
    assert connect.get("method") == "POST"
    action = connect.get("action")
    assert action == BASE + "/twilio/reattach?token=re-tok"
    assert connect.find("./Stream/Parameter").get("value") == "session-tok"
    # Twilio POSTs the action URL with the call's parameters, signed over the whole URL (its query included).
    form = {"CallSid": CALL, "AccountSid": "AC" + "0" * 32, "CallStatus": "in-progress"}
    body_bytes = "&".join(f"{k}={v}" for k, v in form.items()).encode()
    route = cc.webhook_routes(SETTINGS)["/twilio/reattach"]
    target = urlsplit(action).path + "?" + urlsplit(action).query
    signed = {"x-twilio-signature": compute_signature("tw-token", action, form)}
    outcome = cc.check_webhook(route, "POST", target, signed, body_bytes, SETTINGS, BASE + target, 0)
    assert isinstance(outcome, AnswerRequest) and outcome.kind == REATTACH
    assert outcome.call_id == CALL and outcome.token == parse_qs(urlsplit(action).query)["token"][0]
    assert not outcome.call_completed
    # signed over the URL without its query: refused (Twilio signs the URL it was given)
    unsigned = {"x-twilio-signature": compute_signature("tw-token", BASE + "/twilio/reattach", form)}
    assert isinstance(cc.check_webhook(route, "POST", target, unsigned, body_bytes, SETTINGS, BASE + target, 0),
                      Refusal)
    completed = dict(form, CallStatus="completed")
    body_completed = "&".join(f"{k}={v}" for k, v in completed.items()).encode()
    signed = {"x-twilio-signature": compute_signature("tw-token", action, completed)}
    outcome = cc.check_webhook(route, "POST", target, signed, body_completed, SETTINGS, BASE + target, 0)
    assert outcome.call_completed


def test_a_reattach_request_without_a_token_is_a_400():
    route = cc.webhook_routes(SETTINGS)["/twilio/reattach"]
    form = {"CallSid": CALL}
    signed = {"x-twilio-signature": compute_signature("tw-token", BASE + "/twilio/reattach", form)}
    outcome = cc.check_webhook(route, "POST", "/twilio/reattach", signed, b"CallSid=" + CALL.encode(), SETTINGS,
                               BASE + "/twilio/reattach", 0)
    assert isinstance(outcome, Refusal) and outcome.status == 400


def test_the_hangup_document_and_carriers_without_a_reattach_step():
    content_type, body = cc.hangup_document("twilio")
    assert ElementTree.fromstring(body).find("./Hangup") is not None
    assert cc.reattaches("twilio")
    # Exotel names no step (docs/how-to/drain.md says why); Plivo's and Telnyx's: test_reattach_carriers.py,
    # Vonage's: test_reattach_vonage.py
    assert not cc.reattaches("exotel")


def test_the_ledger_claims_once_and_remembers_normal_ends_across_instances(tmp_path):
    first = ReattachLedger(tmp_path)
    assert first.claim(NONCE.hex())
    second = ReattachLedger(tmp_path)  # a restarted gateway
    assert not second.claim(NONCE.hex())
    assert not second.ended(CALL)
    first.mark_ended(CALL)
    assert second.ended(CALL)
    first.mark_ended("../escape")
    assert not second.ended("../escape") and not (tmp_path / "reattach" / "escape").exists()


def test_the_ledger_sweeps_what_no_token_can_name_any_more(tmp_path):
    import os
    ledger = ReattachLedger(tmp_path, ttl_s=100)
    ledger.claim("aa")
    ledger.mark_ended(CALL)
    old = 1_000.0
    for path in (ledger.used_dir / "aa", ledger.ended_dir / CALL):
        os.utime(path, (old, old))
    assert ledger.sweep(old + 50) == 0  # not yet old enough
    ledger.next_sweep_s = 0
    assert ledger.sweep(old + 101) == 2
    assert not ledger.ended(CALL) and ledger.claim("aa")
