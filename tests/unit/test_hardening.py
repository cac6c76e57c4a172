"""Hardening settings: who may read /metrics on the gateway's own address (metrics_listen = local), the
settings' validation, and when the console's session cookie is Secure."""

from __future__ import annotations

import pytest

from voicecore.config import ConfigError, load_config
from voicecore.console import auth
from voicecore.metrics_text import local_request


def test_metrics_are_served_locally_by_default() -> None:
    assert load_config({}).metrics_listen == "local"


@pytest.mark.parametrize("peer, unix, headers, allowed", [
    ("127.0.0.1", False, [b"host", b"accept"], True),
    ("127.8.9.1", False, [], True),
    ("::1", False, [], True),
    ("", True, [b"host"], True),  # the Unix socket: this host
    ("10.0.0.7", False, [b"host"], False),
    ("203.0.113.9", False, [], False),
    ("127.0.0.1", False, [b"X-Forwarded-For"], False),  # a tunnel to localhost: not this host's request
    ("127.0.0.1", False, [b"forwarded"], False),
    ("", True, [b"x-real-ip"], False),  # a TLS proxy on the Unix socket, forwarding for someone
    ("not an address", False, [], False),
])
def test_who_may_read_metrics_on_the_gateways_address(peer, unix, headers, allowed) -> None:
    assert local_request(peer, unix, headers) is allowed


@pytest.mark.parametrize("value", ["0.0.0.0:9464", "127.0.0.1:9100", "[::1]:9464"])
def test_metrics_listen_takes_an_address(value) -> None:
    assert load_config({"VOICECORE_METRICS_LISTEN": value}).metrics_listen == value


@pytest.mark.parametrize("value, words", [("9464", "expected local or host:port"), ("host:", "expected local"),
                                          ("127.0.0.1:8080", "a port of its own"), ("127.0.0.1:8090", "a port of its own")])
def test_metrics_listen_refuses_what_cannot_work(value, words) -> None:
    with pytest.raises(ConfigError, match=words):
        load_config({"VOICECORE_METRICS_LISTEN": value})


def test_the_session_cookie_is_secure_over_tls_or_when_asked() -> None:
    assert auth.cookie_is_secure("auto", "https://console.example.com")
    assert not auth.cookie_is_secure("auto", "")
    assert not auth.cookie_is_secure("auto", "http://console.example.com")
    assert auth.cookie_is_secure("always", "")
    cookie = auth.set_cookie(auth.cookie_name(8090, True), "tok", 60, secure=True)
    assert cookie.startswith("__Host-voicecore_session_8090=tok;") and "SameSite=Strict" in cookie and cookie.endswith("; Secure")
    with pytest.raises(ConfigError, match="console_cookie_secure"):
        load_config({"VOICECORE_CONSOLE_COOKIE_SECURE": "yes"})
