"""Signed stream tokens (voicecore/stream_tokens.py), with a fake clock (plain integers, unix ms) and fixed
nonces: issued on one node and checked on another, single use per node, expiry, forgeries, the layout's
edges, and what a start does with the shared store's answer (fail open, with a pause after a failure)."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.stream_tokens import (
    MAX_CLOCK_SKEW_MS,
    NONCE_BYTES,
    REDEEM_BUSY,
    REDEEM_EXPIRED,
    REDEEM_FORGED,
    REDEEM_MALFORMED,
    REDEEM_REUSED,
    SHARED_DUPLICATE,
    SHARED_ERROR,
    SHARED_INSERTED,
    SHARED_TIMEOUT,
    SharedCheck,
    SignedTokens,
    derive_secret,
)
from voicecore.timing import TOKEN_TTL_MS

SECRET = derive_secret("", "twilio-auth-token-of-the-fleet")
CALL_SID = "CA" + "0123456789abcdef" * 2
T0 = 1_800_000_000_000  # unix ms


def nonce(n: int) -> bytes:
    return n.to_bytes(NONCE_BYTES, "big")


def test_a_token_issued_on_one_node_is_accepted_once_on_another():
    a, b = SignedTokens(SECRET, "node-a"), SignedTokens(SECRET, "node-b")
    token = a.issue(CALL_SID, T0, nonce(1))
    check = b.check(token, T0 + 500)
    assert check.ok and (check.call_sid, check.issuer, check.nonce) == (CALL_SID, "node-a", nonce(1).hex())
    assert check.expires_at_ms == T0 + TOKEN_TTL_MS
    assert b.check(token, T0 + 600).reason == REDEEM_REUSED
    assert (b.redeemed, b.redeemed_foreign, b.refused) == (1, 1, {REDEEM_REUSED: 1})
    # node A has its own cache: the same token once there too (the shared store is what stops that)
    assert a.check(token, T0 + 700).ok and a.redeemed_foreign == 0


def test_the_token_text_is_url_safe_and_short():
    token = SignedTokens(SECRET, "voicecore-7f9c-0.eu-west.example.internal:8080").issue(CALL_SID, T0, nonce(2))
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token), token
    assert len(token) < 200


@pytest.mark.parametrize(("at_ms", "reason"), [
    (T0 + TOKEN_TTL_MS - 1, None),
    (T0 + TOKEN_TTL_MS, REDEEM_EXPIRED),
    (T0 + 10 * TOKEN_TTL_MS, REDEEM_EXPIRED),
])
def test_expiry(at_ms, reason):
    tokens = SignedTokens(SECRET, "a")
    token = tokens.issue(CALL_SID, T0, nonce(3))
    assert tokens.check(token, at_ms).reason == reason


def test_another_secret_or_an_altered_token_is_forged():
    other = SignedTokens(derive_secret("", "another-account-token"), "a")
    ours = SignedTokens(SECRET, "b")
    assert ours.check(other.issue(CALL_SID, T0, nonce(4)), T0).reason == REDEEM_FORGED
    token = ours.issue(CALL_SID, T0, nonce(5))
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    for index in (1, 9, 30, len(raw) - 1):  # expiry, nonce, call sid, mac
        altered = bytearray(raw)
        altered[index] ^= 0x01
        text = base64.urlsafe_b64encode(bytes(altered)).rstrip(b"=").decode()
        assert ours.check(text, T0).reason == REDEEM_FORGED, index
    assert ours.check(token, T0).ok  # the original is untouched by the failed attempts


def test_a_token_from_a_clock_far_ahead_is_refused():
    ahead = SignedTokens(SECRET, "a")
    here = SignedTokens(SECRET, "b")
    skewed = ahead.issue(CALL_SID, T0 + MAX_CLOCK_SKEW_MS + 1, nonce(6))
    assert here.check(skewed, T0).reason == REDEEM_FORGED
    within = ahead.issue(CALL_SID, T0 + MAX_CLOCK_SKEW_MS, nonce(7))
    assert here.check(within, T0).ok


@pytest.mark.parametrize("text", ["", "x", "tok-abc", "a" * 500, "not base64!", "====", "é" * 40,
                                  SignedTokens(SECRET, "a").issue(CALL_SID, T0, nonce(8))[:-3]])
def test_garbage_is_malformed_or_forged_never_an_error(text):
    reason = SignedTokens(SECRET, "a").check(text, T0).reason
    assert reason in (REDEEM_MALFORMED, REDEEM_FORGED)


@given(st.text(max_size=300))
def test_any_text_is_refused(text):
    assert not SignedTokens(SECRET, "a").check(text, T0).ok


def test_the_old_random_tokens_are_not_signed_tokens():
    import secrets

    assert SignedTokens(SECRET, "a").check(secrets.token_urlsafe(24), T0).reason in (REDEEM_MALFORMED, REDEEM_FORGED)


def test_redeemed_nonces_are_forgotten_at_their_expiry_only():
    tokens = SignedTokens(SECRET, "a", ttl_ms=100)
    first = tokens.issue(CALL_SID, T0, nonce(10))
    second = tokens.issue(CALL_SID, T0 + 50, nonce(11))
    assert tokens.check(first, T0 + 10).ok and tokens.check(second, T0 + 60).ok
    assert len(tokens) == 2
    assert tokens.expire(T0 + 99) == 0
    assert tokens.expire(T0 + 100) == 1 and len(tokens) == 1
    assert tokens.check(first, T0 + 101).reason == REDEEM_EXPIRED  # forgotten, and too old anyway
    assert tokens.check(second, T0 + 120).reason == REDEEM_REUSED
    tokens.check("x", T0 + 150)  # every check sweeps
    assert len(tokens) == 0


def test_a_full_cache_refuses_rather_than_forgetting_early():
    tokens = SignedTokens(SECRET, "a", max_redeemed=2)
    issued = [tokens.issue(CALL_SID, T0, nonce(20 + i)) for i in range(3)]
    assert tokens.check(issued[0], T0).ok and tokens.check(issued[1], T0).ok
    assert tokens.check(issued[2], T0).reason == REDEEM_BUSY
    assert tokens.check(issued[0], T0).reason == REDEEM_REUSED  # still remembered
    assert tokens.check(issued[2], T0 + TOKEN_TTL_MS - 1).reason == REDEEM_BUSY


def test_misuse_is_a_value_error():
    with pytest.raises(ValueError):
        SignedTokens(b"short", "a")
    with pytest.raises(ValueError):
        SignedTokens(SECRET, "")
    with pytest.raises(ValueError):
        SignedTokens(SECRET, "n" * 65)
    tokens = SignedTokens(SECRET, "a")
    with pytest.raises(ValueError):
        tokens.issue(CALL_SID, T0, b"123")
    with pytest.raises(ValueError):
        tokens.issue("", T0, nonce(1))
    with pytest.raises(ValueError):
        derive_secret("", "")


def test_the_secret_setting_wins_over_the_auth_token_and_differs_from_it():
    assert derive_secret("fleet-secret-0123456789", "auth") == derive_secret("fleet-secret-0123456789", "other")
    assert derive_secret("", "auth") != derive_secret("", "other")
    assert derive_secret("", "auth") != b"auth"


# --- the shared store's answer ----------------------------------------------------------------------------

def test_the_store_decides_first_use_and_replay():
    check = SharedCheck()
    assert check.should_ask(T0)
    assert check.outcome(SHARED_INSERTED, T0).accept
    verdict = check.outcome(SHARED_DUPLICATE, T0)
    assert not verdict.accept and verdict.reason == REDEEM_REUSED
    assert check.should_ask(T0 + 1)  # a duplicate is no failure of the store


@pytest.mark.parametrize("failure", [SHARED_ERROR, SHARED_TIMEOUT])
def test_a_failing_store_fails_open_and_is_passed_over_for_a_while(failure):
    check = SharedCheck(skip_ms=5_000)
    verdict = check.outcome(failure, T0)
    assert verdict.accept and "accepted on this node's check alone" in verdict.reason
    assert not check.should_ask(T0 + 4_999)
    assert check.should_ask(T0 + 5_000)
    assert check.counts == {SHARED_INSERTED: 0, SHARED_DUPLICATE: 0, SHARED_ERROR: int(failure == SHARED_ERROR),
                            SHARED_TIMEOUT: int(failure == SHARED_TIMEOUT), "skipped": 1}
    with pytest.raises(ValueError):
        check.outcome("skipped", T0)


# --- the settings -----------------------------------------------------------------------------------------

def test_the_stream_url_names_this_node_when_node_stream_url_is_set():
    from voicecore.config import load_config

    fleet = {"VOICECORE_PUBLIC_URL": "https://voice.example.com"}
    assert load_config(fleet).stream_base_url == "wss://voice.example.com"
    assert load_config({**fleet, "VOICECORE_NODE_STREAM_URL": "https://node-a.voice.example.com/"}).stream_base_url == (
        "wss://node-a.voice.example.com")
    assert load_config({**fleet, "VOICECORE_NODE_STREAM_URL": "ws://10.0.0.7:8080"}).stream_base_url == "ws://10.0.0.7:8080"
    assert load_config({}).stream_base_url == "ws://127.0.0.1:8080"


def test_the_node_name_defaults_to_host_and_port():
    import socket

    from voicecore.config import load_config

    assert load_config({"VOICECORE_NODE_ID": "node-a"}).node == "node-a"
    assert load_config({"VOICECORE_LISTEN": "0.0.0.0:8081"}).node == f"{socket.gethostname()}:8081"[:64]
    assert load_config({}).stream_tokens == "signed" and load_config({}).token_store_timeout_ms == 250


@pytest.mark.parametrize(("name", "value"), [
    ("NODE_ID", "a b"), ("NODE_ID", "n" * 65), ("NODE_STREAM_URL", "ftp://x"), ("NODE_STREAM_URL", "wss://x/?a=1"),
    ("NODE_STREAM_URL", "node-a"), ("STREAM_TOKENS", "shared"), ("TOKEN_SECRET", "too-short"),
    ("TOKEN_STORE_TIMEOUT_MS", "5"), ("TOKEN_STORE_TIMEOUT_MS", "60000"),
])
def test_bad_settings_are_refused(name, value):
    from voicecore.config import ConfigError, load_config

    with pytest.raises(ConfigError):
        load_config({f"VOICECORE_{name}": value})
