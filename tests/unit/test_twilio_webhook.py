"""Twilio HTTP side: TwiML, session tokens (fake clock: plain integers), form parsing, status callback and
voice webhook parsing, and the request signature checked against the `twilio` package's own validator.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from urllib.parse import urlencode

import pytest
from twilio.request_validator import RequestValidator

from voicecore.timing import TOKEN_TTL_MS
from voicecore.carriers.twilio.signature import compute_signature
from voicecore.carriers.session_tokens import REDEEM_EXPIRED, REDEEM_REUSED, REDEEM_UNKNOWN, RedeemResult, SessionTokens
from voicecore.carriers.twilio.webhook import (
    MAX_FORM_BYTES,
    StatusCallback,
    VoiceRequest,
    WebhookError,
    check_signature,
    parse_form,
    parse_status_callback,
    parse_voice_webhook,
    twiml_connect_stream,
)

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
CALL_SID = "CA" + "fedcba9876543210" * 2
STREAM_SID = "MZ" + "18ad3ab5a668481ce02b83e7395059f0"
AUTH_TOKEN = "12345678901234567890123456789012"


# --- TwiML ---------------------------------------------------------------------------------------


def parse_twiml(twiml: str) -> ElementTree.Element:
    assert twiml.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ElementTree.fromstring(twiml.encode("utf-8"))


def test_twiml_connect_stream_shape() -> None:
    twiml = twiml_connect_stream(
        "wss://gw.example.com/twilio", "tok-abc", "https://gw.example.com/stream-status", name="agent"
    )
    root = parse_twiml(twiml)
    assert root.tag == "Response"
    (connect,) = list(root)
    assert connect.tag == "Connect"
    (stream,) = list(connect)
    assert stream.tag == "Stream"
    assert stream.attrib == {
        "url": "wss://gw.example.com/twilio",
        "name": "agent",
        "statusCallback": "https://gw.example.com/stream-status",
        "statusCallbackMethod": "POST",
    }
    (parameter,) = list(stream)
    assert parameter.tag == "Parameter"
    assert parameter.attrib == {"name": "session_token", "value": "tok-abc"}


def test_twiml_minimal_has_no_callback_or_name() -> None:
    stream = parse_twiml(twiml_connect_stream("ws://127.0.0.1:8765/twilio", "t", None)).find("Connect/Stream")
    assert stream is not None
    assert stream.attrib == {"url": "ws://127.0.0.1:8765/twilio"}
    assert stream.find("Parameter").attrib == {"name": "session_token", "value": "t"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "token", ['a"b', "a'b", "<x>&amp;</x>", "tab\there", "line\nbreak\r\n", "  spaced  ", "naïve ☎ 𝄞", "]]>"]
)
def test_twiml_escapes_attribute_values(token: str) -> None:
    name = "n" + token
    callback = "https://gw.example.com/s?x=1&y=" + token.replace(" ", "%20")
    stream = parse_twiml(twiml_connect_stream("wss://gw.example.com/t", token, callback, name=name)).find(
        "Connect/Stream"
    )
    assert stream is not None
    assert stream.attrib["name"] == name
    assert stream.attrib["statusCallback"] == callback
    assert stream.find("Parameter").attrib["value"] == token  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("stream_url", "token", "callback"),
    [
        ("wss://gw.example.com/t?token=x", "t", None),  # Twilio error 31922: use <Parameter>
        ("wss://gw.example.com/t?", "t", None),
        ("wss://gw.example.com/t#frag", "t", None),
        ("https://gw.example.com/t", "t", None),
        ("http://gw.example.com/t", "t", None),
        ("gw.example.com/t", "t", None),
        ("wss:///t", "t", None),
        ("", "t", None),
        (None, "t", None),
        ("wss://gw.example.com/t", "", None),
        ("wss://gw.example.com/t", None, None),
        ("wss://gw.example.com/t", "bad\x00token", None),
        ("wss://gw.example.com/t", "bad\x1btoken", None),
        ("wss://gw.example.com/t", "t", "ftp://gw.example.com/s"),
        ("wss://gw.example.com/t", "t", "/relative/status"),
    ],
)
def test_twiml_rejects_our_misuse(stream_url: object, token: object, callback: object) -> None:
    with pytest.raises(ValueError):
        twiml_connect_stream(stream_url, token, callback)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a\x0bb", "\ufffe", 5])
def test_twiml_rejects_unwritable_name(name: object) -> None:
    with pytest.raises(ValueError):
        twiml_connect_stream("wss://gw.example.com/t", "t", None, name=name)  # type: ignore[arg-type]


# --- session tokens (the clock is an int we move by hand) -----------------------------------------


def test_token_issue_redeem_then_reuse() -> None:
    tokens = SessionTokens()
    tokens.issue("tok-1", CALL_SID, now_ms=1_000)
    assert tokens.redeem("tok-1", now_ms=1_500) == RedeemResult(ok=True, call_sid=CALL_SID)
    assert tokens.redeem("tok-1", now_ms=1_600) == RedeemResult(ok=False, reason=REDEEM_REUSED)
    assert tokens.redeem("never-issued", now_ms=1_700) == RedeemResult(ok=False, reason=REDEEM_UNKNOWN)
    stats = tokens.statistics()
    assert (stats.issued, stats.redeemed, stats.refused, stats.live) == (1, 1, 2, 1)


@pytest.mark.parametrize(
    ("redeem_at_ms", "expected"),
    [
        (0, RedeemResult(ok=True, call_sid=CALL_SID)),
        (TOKEN_TTL_MS - 1, RedeemResult(ok=True, call_sid=CALL_SID)),
        (TOKEN_TTL_MS, RedeemResult(ok=False, reason=REDEEM_EXPIRED)),
        (TOKEN_TTL_MS * 10, RedeemResult(ok=False, reason=REDEEM_EXPIRED)),
    ],
)
def test_token_ttl_boundary(redeem_at_ms: int, expected: RedeemResult) -> None:
    tokens = SessionTokens()
    tokens.issue("tok", CALL_SID, now_ms=0)
    assert tokens.redeem("tok", now_ms=redeem_at_ms) == expected


def test_expire_sweeps_old_tokens_only() -> None:
    tokens = SessionTokens(ttl_ms=100)
    tokens.issue("a", CALL_SID, now_ms=0)
    tokens.issue("b", CALL_SID, now_ms=50)
    tokens.issue("c", CALL_SID, now_ms=90)
    assert tokens.redeem("a", now_ms=95).ok
    assert tokens.expire(now_ms=99) == 0
    assert tokens.expire(now_ms=150) == 2  # a (redeemed) and b
    assert len(tokens) == 1
    assert tokens.redeem("a", now_ms=151) == RedeemResult(ok=False, reason=REDEEM_UNKNOWN)
    assert tokens.redeem("b", now_ms=151) == RedeemResult(ok=False, reason=REDEEM_UNKNOWN)
    assert tokens.redeem("c", now_ms=151).ok
    assert tokens.expire(now_ms=190) == 1
    assert len(tokens) == 0
    assert tokens.statistics().expired == 3


def test_reused_wins_over_expired() -> None:
    # A replay of a redeemed token reads "reused" even after its TTL, until the sweep forgets it.
    tokens = SessionTokens(ttl_ms=100)
    tokens.issue("a", CALL_SID, now_ms=0)
    assert tokens.redeem("a", now_ms=10).ok
    assert tokens.redeem("a", now_ms=500) == RedeemResult(ok=False, reason=REDEEM_REUSED)


def test_issue_sweeps_expired_tokens() -> None:
    tokens = SessionTokens(ttl_ms=100)
    tokens.issue("a", CALL_SID, now_ms=0)
    tokens.issue("b", CALL_SID, now_ms=200)
    assert len(tokens) == 1
    assert tokens.redeem("a", now_ms=200).reason == REDEEM_UNKNOWN


def test_table_is_bounded_oldest_evicted_first() -> None:
    tokens = SessionTokens(ttl_ms=1_000, max_entries=3)
    for index, token in enumerate(["a", "b", "c", "d", "e"]):
        tokens.issue(token, f"CA{index:032x}", now_ms=index)
    assert len(tokens) == 3
    assert tokens.redeem("a", now_ms=10).reason == REDEEM_UNKNOWN
    assert tokens.redeem("b", now_ms=10).reason == REDEEM_UNKNOWN
    assert tokens.redeem("c", now_ms=10) == RedeemResult(ok=True, call_sid=f"CA{2:032x}")
    assert tokens.redeem("e", now_ms=10).ok
    assert tokens.statistics().evicted == 2


def test_token_misuse_raises() -> None:
    tokens = SessionTokens()
    tokens.issue("a", CALL_SID, now_ms=100)
    with pytest.raises(ValueError):
        tokens.issue("a", CALL_SID, now_ms=101)  # a repeated token is our generator's bug
    with pytest.raises(ValueError):
        tokens.issue("", CALL_SID, now_ms=101)
    with pytest.raises(ValueError):
        tokens.redeem("a", now_ms=50)  # the clock went backwards
    with pytest.raises(ValueError):
        SessionTokens(ttl_ms=0)
    with pytest.raises(ValueError):
        SessionTokens(max_entries=0)


# --- form bodies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", {}),
        (b"a=1", {"a": "1"}),
        (b"a=1&b=2", {"a": "1", "b": "2"}),
        (b"From=%2B15551234567&To=%2B15557654321", {"From": "+15551234567", "To": "+15557654321"}),
        (b"CallerName=Jane+Doe", {"CallerName": "Jane Doe"}),
        (b"City=M%C3%BCnchen", {"City": "München"}),
        (b"Blank=&a=1", {"Blank": "", "a": "1"}),
        (b"a=1&a=2", {"a": "2"}),  # repeated key: the last value is kept
        (b"a=1;b=2", {"a": "1;b=2"}),  # only & separates
        (b"=v", {"": "v"}),
        (b"a=b=c", {"a": "b=c"}),
    ],
)
def test_parse_form(body: bytes, expected: dict[str, str]) -> None:
    assert parse_form(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"a",  # no '='
        b"a=1&&b=2",  # empty field
        b"a=1&",
        b"&",
        b"a=%FF",  # percent-escape that is not UTF-8
        b"a=\xc3\xa9",  # raw non-ASCII bytes: the encoding escapes these
        b"&".join(b"k%d=v" % i for i in range(201)),  # too many fields
        b"a=" + b"x" * MAX_FORM_BYTES,  # too big
    ],
)
def test_parse_form_rejects(body: bytes) -> None:
    with pytest.raises(WebhookError) as raised:
        parse_form(body)
    assert raised.value.reason


def test_parse_form_field_limit_is_a_parameter() -> None:
    body = b"a=1&b=2&c=3"
    assert len(parse_form(body, max_fields=3)) == 3
    with pytest.raises(WebhookError):
        parse_form(body, max_fields=2)


# --- voice webhook ------------------------------------------------------------------------------

VOICE_FORM = {
    "AccountSid": ACCOUNT_SID,
    "ApiVersion": "2010-04-01",
    "CallSid": CALL_SID,
    "CallStatus": "ringing",
    "Called": "+15557654321",
    "Caller": "+15551234567",
    "Direction": "inbound",
    "From": "+15551234567",
    "To": "+15557654321",
}


def test_parse_voice_webhook_from_a_real_body() -> None:
    form = parse_form(urlencode(VOICE_FORM).encode())
    assert parse_voice_webhook(form) == VoiceRequest(
        call_sid=CALL_SID, account_sid=ACCOUNT_SID, from_="+15551234567", to="+15557654321"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("CallSid", None),
        ("CallSid", ""),
        ("CallSid", "CA123"),
        ("CallSid", "AC" + "0" * 32),
        ("CallSid", "CA" + "0" * 33),
        ("CallSid", "CA" + "z" * 32),
        ("CallSid", "ca" + "0" * 32),
        ("CallSid", "CA" + "0" * 32 + "\n"),
        ("AccountSid", None),
        ("AccountSid", "AC" + "0" * 31),
        ("AccountSid", "CA" + "0" * 32),
        ("From", None),
        ("To", None),
    ],
)
def test_parse_voice_webhook_rejects(key: str, value: str | None) -> None:
    form = dict(VOICE_FORM)
    if value is None:
        del form[key]
    else:
        form[key] = value
    with pytest.raises(WebhookError) as raised:
        parse_voice_webhook(form)
    assert raised.value.reason and (not value or value not in raised.value.reason)  # no echo of input


# --- stream status callback ----------------------------------------------------------------------


def status_form(event: str, **extra: str) -> dict[str, str]:
    form = {
        "AccountSid": ACCOUNT_SID,
        "CallSid": CALL_SID,
        "StreamSid": STREAM_SID,
        "StreamName": STREAM_SID,
        "StreamEvent": event,
        "Timestamp": "2026-11-22T10:15:30.123Z",
    }
    form.update(extra)
    return form


@pytest.mark.parametrize(
    ("form", "expected_event", "expected_error", "expected_name"),
    [
        (status_form("stream-started"), "stream-started", None, STREAM_SID),
        (status_form("stream-stopped", StreamName="agent"), "stream-stopped", None, "agent"),
        (
            status_form("stream-error", StreamError="Stream - WebSocket - Connection Refused"),
            "stream-error",
            "Stream - WebSocket - Connection Refused",
            STREAM_SID,
        ),
        (status_form("stream-error"), "stream-error", None, STREAM_SID),
    ],
)
def test_parse_status_callback(
    form: dict[str, str], expected_event: str, expected_error: str | None, expected_name: str
) -> None:
    # Through the real body encoding, as the shell will do it.
    parsed = parse_status_callback(parse_form(urlencode(form).encode()))
    assert parsed == StatusCallback(
        account_sid=ACCOUNT_SID,
        call_sid=CALL_SID,
        stream_sid=STREAM_SID,
        stream_name=expected_name,
        stream_event=expected_event,
        stream_error=expected_error,
        timestamp="2026-11-22T10:15:30.123Z",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("StreamEvent", "start"),  # the non-hyphenated forms one codebase assumes (A.4)
        ("StreamEvent", "stop"),
        ("StreamEvent", "stream-Started"),
        ("StreamEvent", None),
        ("StreamSid", "MZ1"),
        ("StreamSid", CALL_SID),
        ("StreamSid", None),
        ("CallSid", "CA"),
        ("AccountSid", None),
        ("StreamName", None),
        ("Timestamp", None),
    ],
)
def test_parse_status_callback_rejects(key: str, value: str | None) -> None:
    form = status_form("stream-started")
    if value is None:
        del form[key]
    else:
        form[key] = value
    with pytest.raises(WebhookError):
        parse_status_callback(form)


# --- signature: agree with twilio's RequestValidator ---------------------------------------------

URLS = [
    "https://gw.example.com/voice",
    "https://gw.example.com/voice?tenant=acme&x=%20y",
    "https://gw.example.com:8443/voice",
    "https://gw.example.com:443/voice",
    "http://127.0.0.1:8080/voice",
    "http://gw.example.com/voice/",
    "https://gw.example.com/st%C3%A4tus?q=ä",
]
PARAM_SETS: list[dict[str, str]] = [
    {},
    {"CallSid": CALL_SID, "AccountSid": ACCOUNT_SID, "From": "+15551234567", "To": "+15557654321"},
    {"Digits": "1234", "Empty": "", "b": "2", "a": "1", "B": "3"},
    {"CallerName": "Jürgen Ñandú ☎ 𝄞", "City": "東京"},
    {"key with space": "value with space", "amp&ersand": "eq=uals"},
]
AUTH_TOKENS = [AUTH_TOKEN, "other-token", "tökén"]


@pytest.mark.parametrize("auth_token", AUTH_TOKENS)
@pytest.mark.parametrize("params", PARAM_SETS, ids=[f"params{i}" for i in range(len(PARAM_SETS))])
@pytest.mark.parametrize("url", URLS)
def test_signature_agrees_with_twilio(auth_token: str, url: str, params: dict[str, str]) -> None:
    validator = RequestValidator(auth_token)
    ours = compute_signature(auth_token, url, params)
    assert ours == validator.compute_signature(url, params)
    # Both ways: each side accepts the other's signature.
    assert validator.validate(url, params, ours)
    assert check_signature(auth_token, url, params, validator.compute_signature(url, params))
    # And both refuse a wrong token, a changed param, a changed url.
    wrong = compute_signature(auth_token + "x", url, params)
    assert not validator.validate(url, params, wrong)
    assert not check_signature(auth_token, url, params, wrong)
    tampered = dict(params, Injected="1")
    assert not validator.validate(url, tampered, ours)
    assert not check_signature(auth_token, url, tampered, ours)
    other_url = url.replace("/voice", "/other") if "/voice" in url else url + "x"
    assert not validator.validate(other_url, params, ours)
    assert not check_signature(auth_token, other_url, params, ours)


@pytest.mark.parametrize(
    ("signed_url", "request_url"),
    [
        ("https://gw.example.com/voice", "https://gw.example.com:443/voice"),
        ("https://gw.example.com:443/voice", "https://gw.example.com/voice"),
        ("http://gw.example.com/voice", "http://gw.example.com:80/voice"),
        ("https://gw.example.com/voice", "https://gw.example.com:8443/voice"),
        ("https://gw.example.com:8443/voice", "https://gw.example.com/voice"),
    ],
)
def test_port_variants_agree_with_twilio(signed_url: str, request_url: str) -> None:
    # Twilio signs with or without the port; its validator accepts both, and so do we.
    params = {"CallSid": CALL_SID}
    signature = compute_signature(AUTH_TOKEN, signed_url, params)
    assert check_signature(AUTH_TOKEN, request_url, params, signature) == RequestValidator(AUTH_TOKEN).validate(
        request_url, params, signature
    )


def test_websocket_upgrade_signature_over_wss_url_without_params() -> None:
    # docs/explanation/protocols.md#a1: the upgrade is signed over the wss URL with no POST parameters.
    url = "wss://gw.example.com/twilio"
    signature = RequestValidator(AUTH_TOKEN).compute_signature(url, {})
    assert check_signature(AUTH_TOKEN, url, {}, signature)
    assert check_signature(AUTH_TOKEN, url, None, signature)
    assert check_signature(AUTH_TOKEN, "wss://gw.example.com:443/twilio", None, signature)
    assert not check_signature(AUTH_TOKEN, "wss://gw.example.com/other", None, signature)


@pytest.mark.parametrize("header", [None, "", "not-base64", "x" * 28])
def test_missing_or_junk_header_is_refused(header: str | None) -> None:
    assert not check_signature(AUTH_TOKEN, URLS[0], PARAM_SETS[1], header)


def test_bad_port_in_url_does_not_raise() -> None:
    signature = compute_signature(AUTH_TOKEN, "https://gw.example.com:99999/voice", {})
    assert check_signature(AUTH_TOKEN, "https://gw.example.com:99999/voice", {}, signature)
    assert not check_signature(AUTH_TOKEN, "https://gw.example.com:99999/voice", {}, signature[:-2] + "AA")
