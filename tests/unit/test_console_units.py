"""The console's pure parts: the fan-out's queues and slow-observer rule, sessions, keys and the session
cookie, waveform peaks, which browser requests are served (origins, next paths), and byte ranges."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson

import pytest

from voicecore.config import ConfigError, load_config
from voicecore.console import auth, guard, media, ranges
from voicecore.console.fanout import FanOut, Observer
from voicecore.g711 import linear_to_ulaw


def rows(call_sid: str, first: int, kinds: list[str]) -> list[tuple]:
    return [(call_sid, first + i, 100.0 + i, i * 10, kind, "{}") for i, kind in enumerate(kinds)]


def test_each_observer_gets_its_calls_events_and_the_every_call_observer_all():
    async def run():
        fanout = FanOut()
        one, other, every = Observer("CA1"), Observer("CA2"), Observer("")
        for observer in (one, other, every):
            fanout.add(observer)
        fanout.publish(rows("CA1", 1, ["call.started", "bargein"]))
        fanout.publish(rows("CA2", 1, ["call.started"]))
        assert fanout.live == {"CA1": 100.0, "CA2": 100.0}
        fanout.publish(rows("CA1", 3, ["call.ended"]))
        assert list(fanout.live) == ["CA2"]
        got = {name: [orjson.loads(o.queue.get_nowait()[1]) for _ in range(o.queue.qsize())]
               for name, o in (("one", one), ("other", other), ("every", every))}
        assert [(e["call_sid"], e["seq"], e["type"]) for e in got["one"]] == [("CA1", 1, "call.started"), ("CA1", 2, "bargein"),
                                                                            ("CA1", 3, "call.ended")]
        assert [e["seq"] for e in got["other"]] == [1] and len(got["every"]) == 4
        fanout.remove(one)
        fanout.remove(one)
        assert fanout.count() == 2

    asyncio.run(run())


def test_a_slow_observer_is_marked_and_woken_and_the_others_get_everything():
    async def run():
        fanout = FanOut()
        slow, fast = Observer("CA1", queue_size=4), Observer("CA1", queue_size=100)
        fanout.add(slow)
        fanout.add(fast)
        fanout.publish(rows("CA1", 1, ["transcript.delta"] * 10))
        assert slow.too_slow and fanout.too_slow == 1
        assert fast.queue.qsize() == 10 and not fast.too_slow
        # what the slow one's reader finds last is the wake-up, after which it closes the connection
        items = [slow.queue.get_nowait() for _ in range(slow.queue.qsize())]
        assert items[-1] == (0, b"") and len(items) == 4
        fanout.publish(rows("CA1", 11, ["bargein"]))
        assert slow.queue.qsize() == 0 and fanout.too_slow == 1  # nothing more for it, counted once

    asyncio.run(run())


def test_keys_come_from_a_header_and_browsers_from_a_session_cookie():
    assert auth.key_from_headers({"authorization": "Bearer vck_a"}) == "vck_a"
    assert auth.key_from_headers({"authorization": "Basic xyz", "x-voicecore-key": "vck_b"}) == "vck_b"
    assert auth.key_from_headers({}) == ""
    assert auth.cookie_value("a=1; voicecore_session=tok; b=2") == "tok" and auth.cookie_value("x=1") == ""
    keys = {"vck_good": "ops"}
    sessions = auth.Sessions(keys.get)
    assert sessions.open("vck_bad", 0.0) is None
    token, name = sessions.open("vck_good", 0.0)
    assert name == "ops" and sessions.who(token, 10.0) == "ops" and sessions.who("forged", 10.0) is None
    del keys["vck_good"]  # revoked: the session ends at its next re-check
    assert sessions.who(token, 30.0) == "ops" and sessions.who(token, 30.0 + auth.RECHECK_S) is None
    keys["vck_good"] = "ops"
    token, _ = sessions.open("vck_good", 0.0)
    assert sessions.who(token, auth.SESSION_TTL_S + 1) is None  # expired


def test_peaks_follow_the_loudness_of_each_stretch():
    quiet = np.zeros(8000, dtype=np.int16)
    loud = (np.sin(np.arange(8000) / 5) * 16000).astype(np.int16)
    track = linear_to_ulaw(np.concatenate([quiet, loud]).tobytes())
    peaks = media.peaks(track, 10)
    assert len(peaks) == 10 and max(peaks[:5]) < 0.01 and min(peaks[5:]) > 0.4
    shape = media.waveform(track, track[:8000], 4)
    assert shape["duration_ms"] == 2000 and len(shape["caller"]) == len(shape["agent"]) == 4
    assert max(shape["agent"]) < 0.01  # the shorter track padded with silence
    assert media.peaks(b"", 10) == []


def test_an_observer_whose_client_left_is_woken_even_with_a_full_queue():
    async def run():
        observer = Observer("CA1", queue_size=2)
        observer.queue.put_nowait((1, b"a"))
        observer.queue.put_nowait((2, b"b"))
        observer.leave()
        assert observer.gone and observer.queue.qsize() == 2 and observer.queue.get_nowait() == (2, b"b")
        assert observer.queue.get_nowait() == (0, b"")
        idle = Observer("CA2")
        idle.leave()
        assert idle.queue.get_nowait() == (0, b"")

    asyncio.run(run())


def test_the_session_cookie_is_named_for_the_consoles_port_and_secure_behind_tls():
    assert auth.cookie_name(8090, secure=False) == "voicecore_session_8090"
    assert auth.cookie_name(8091, secure=True) == "__Host-voicecore_session_8091"
    assert auth.set_cookie("voicecore_session_8090", "tok", 60, secure=False) == (
        "voicecore_session_8090=tok; Path=/; Max-Age=60; HttpOnly; SameSite=Strict")
    assert auth.set_cookie("__Host-voicecore_session_1", "", 0, secure=True).endswith("; Secure")
    header = "voicecore_session_8091=other; voicecore_session_8090=mine"
    assert auth.cookie_value(header, "voicecore_session_8090") == "mine" and auth.cookie_value(header, "voicecore_session_9") == ""


# --- origins ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "origin"), [
    ("http://127.0.0.1:8090", "http://127.0.0.1:8090"), ("HTTPS://Console.Example.COM:443/", "https://console.example.com"),
    ("http://example.com:80", "http://example.com"), ("http://[::1]:8090", "http://[::1]:8090"),
    ("https://console.example.com:8443", "https://console.example.com:8443")])
def test_origins_are_compared_as_browsers_serialize_them(text, origin):
    assert guard.normalize_origin(text) == origin


@pytest.mark.parametrize("text", ["null", "", "console.example.com", "ftp://example.com", "http://example.com/app",
                                  "http://example.com?x", "http://user@example.com", "http://example.com:99999",
                                  "http://exa mple.com", "http://example.com\\@evil.example", "file:///etc"])
def test_what_is_not_an_origin(text):
    assert guard.normalize_origin(text) is None


def test_the_consoles_origins_default_to_its_own_addresses():
    loopback = ("http://127.0.0.1:8090", "http://localhost:8090", "http://[::1]:8090")
    assert guard.console_origins("", "127.0.0.1:8090", "") == loopback
    assert guard.console_origins("", "0.0.0.0:8090", "") == loopback and guard.listens_on_all_interfaces("0.0.0.0:8090")
    assert guard.console_origins("", "10.1.2.3:8090", "") == ("http://10.1.2.3:8090",)
    assert guard.console_origins("", "127.0.0.1:8090", "https://console.example.com/") == ("https://console.example.com", *loopback)
    assert guard.console_origins(" https://a.example.com, http://b.example.com:81 ,", "127.0.0.1:8090", "") == (
        "https://a.example.com", "http://b.example.com:81")
    with pytest.raises(ValueError, match="console.example.com/app"):
        guard.parse_origins("https://console.example.com/app")


def test_console_origins_and_public_url_settings():
    config = load_config({"VOICECORE_CONSOLE_ORIGINS": "https://console.example.com,http://127.0.0.1:8090",
                          "VOICECORE_CONSOLE_PUBLIC_URL": "https://console.example.com"})
    assert config.console_public_url == "https://console.example.com" and config.as_env()["VOICECORE_CONSOLE_ORIGINS"]
    for bad in ({"VOICECORE_CONSOLE_ORIGINS": "console.example.com"},
                {"VOICECORE_CONSOLE_PUBLIC_URL": "https://console.example.com/console"},
                {"VOICECORE_CONSOLE_PUBLIC_URL": "console.example.com"},
                {"VOICECORE_CONSOLE_PUBLIC_URL": "https://console.example.com", "VOICECORE_CONSOLE_ORIGINS": "http://127.0.0.1:8090"}):
        with pytest.raises(ConfigError, match="console_"):
            load_config(bad)


ALLOWED = ("http://127.0.0.1:8090", "http://localhost:8090")


def facts(method="GET", origin=None, fetch_site="", has_key=False, has_cookie=True, websocket=False) -> guard.RequestFacts:
    return guard.RequestFacts(method, origin, fetch_site, has_key, has_cookie, websocket)


@pytest.mark.parametrize(("request_facts", "changes_state", "served"), [
    # a WebSocket upgrade: a browser's always has an Origin; a program's has its key
    (facts(websocket=True, origin="http://127.0.0.1:8090"), False, True),
    (facts(websocket=True, origin="http://LOCALHOST:8090"), False, True),
    (facts(websocket=True, origin="http://127.0.0.1:8091"), False, False),  # another port of the same host
    (facts(websocket=True, origin="null"), False, False),
    (facts(websocket=True), False, False),  # the cookie and no Origin: no browser sends that
    (facts(websocket=True, has_key=True, has_cookie=False), False, True),
    (facts(websocket=True, has_key=True), False, True),
    (facts(websocket=True, has_key=True, origin="http://evil.example"), False, False),
    (facts(websocket=True, has_cookie=False), False, True),  # no credential at all: the key check's 401
    (facts(websocket=True, has_cookie=False, origin="http://evil.example"), False, False),
    # a POST
    (facts("POST", origin="http://127.0.0.1:8090"), True, True),
    (facts("POST"), True, False),
    (facts("POST", origin="http://127.0.0.1:8091"), True, False),
    (facts("POST", has_key=True, has_cookie=False), True, True),
    (facts("PUT"), False, False),
    # a read of call data: the console's own page sends no Origin on a GET, and Sec-Fetch-Site same-origin
    (facts(fetch_site="same-origin"), False, True),
    (facts(fetch_site="none"), False, True),  # typed in, a bookmark
    (facts(fetch_site="same-site"), False, False),  # another port of the same host
    (facts(fetch_site="cross-site"), False, False),
    (facts(fetch_site="cross-site", has_key=True), False, True),
    (facts(origin="http://127.0.0.1:8091", fetch_site="same-site"), False, False),
    (facts(origin="http://127.0.0.1:8090", fetch_site="same-origin"), False, True),
    (facts(), False, True),  # a browser too old to say: a cross-origin read would be opaque to its page anyway
    (facts(has_cookie=False, has_key=True), False, True),  # a program
])
def test_which_requests_are_served(request_facts, changes_state, served):
    reason = guard.refusal(request_facts, ALLOWED, changes_state=changes_state)
    assert (reason is None) is served, reason


@pytest.mark.parametrize("raw", ["/%5Cexample.invalid/phish", "/\\example.invalid", "//example.invalid", "///example.invalid",
                                 "/%2F%2Fexample.invalid", "/%2f/example.invalid", "/%252F%252Fexample.invalid",
                                 "/%25252F%25252Fexample.invalid", "/%2525252F%2525252Fx", "/a\\b", "/a%5Cb",
                                 "https://example.invalid", "javascript:alert(1)", "example.invalid", " /x", "/x y",
                                 "/\t/example.invalid", "/%09/example.invalid", "/%0d%0aLocation:x", "/\x00", "/x\x7f",
                                 "/caf\u00e9", "/" + "a" * 3000])
def test_a_next_that_could_leave_the_console_is_refused(raw):
    assert guard.next_path(raw) is None


@pytest.mark.parametrize(("raw", "path"), [(None, "/"), ("", "/"), ("/", "/"), ("/calls/CA1", "/calls/CA1"),
                                           ("/?agent=Smile%20Dental&outcome=transfer", "/?agent=Smile%20Dental&outcome=transfer"),
                                           ("/calls/CA1?x=%2F%2Fnot-a-host", "/calls/CA1?x=%2F%2Fnot-a-host"),
                                           ("/login", "/"), ("/login?next=/live", "/"), ("/live", "/live"), ("/%zz", "/%zz")])
def test_a_next_within_the_console_is_kept(raw, path):
    assert guard.next_path(raw) == path


# --- byte ranges -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("header", "expected"), [
    ("bytes=0-99", (0, 99)), ("bytes=100-", (100, 999)), ("bytes=-100", (900, 999)), ("bytes=-5000", (0, 999)),
    ("bytes=990-5000", (990, 999)), ("Bytes = 5-5", (5, 5)), ("bytes=999-", (999, 999))])
def test_a_single_range_is_served(header, expected):
    chosen = ranges.byte_range(header, 1000)
    assert isinstance(chosen, ranges.ByteRange) and (chosen.first, chosen.last) == expected
    assert chosen.content_range(1000) == f"bytes {expected[0]}-{expected[1]}/1000" and chosen.length == expected[1] - expected[0] + 1


@pytest.mark.parametrize("header", ["bytes=1000-", "bytes=2000-3000", "bytes=-0"])
def test_a_range_past_the_end_is_unsatisfiable(header):
    assert ranges.byte_range(header, 1000) == ranges.UNSATISFIABLE
    assert ranges.byte_range("bytes=0-", 0) == ranges.UNSATISFIABLE


@pytest.mark.parametrize("header", [None, "bytes=0-1,5-6", "bytes=5-1", "pages=0-1", "bytes", "bytes=", "bytes=x-y",
                                    "bytes=-", "bytes=1-2-3", "bytes=+1-2", "bytes=0x10-", "bytes=\u0661-2"])
def test_several_ranges_or_a_range_that_is_not_valid_get_the_whole_body(header):
    assert ranges.byte_range(header, 1000) is None


def test_entity_tags_and_conditional_requests():
    tag = ranges.entity_tag(b"recording")
    assert tag == ranges.entity_tag(b"recording") != ranges.entity_tag(b"recording2") and tag.startswith('"')
    assert ranges.none_match(tag, tag) and ranges.none_match(f'W/{tag}', tag) and ranges.none_match(f'"a", {tag}', tag)
    assert ranges.none_match("*", tag) and not ranges.none_match('"a"', tag) and not ranges.none_match(None, tag)
    assert not ranges.none_match(tag, None)  # a live call's recording has no tag: never 304
    assert ranges.range_applies(None, tag) and ranges.range_applies(tag, tag)
    assert not ranges.range_applies(f"W/{tag}", tag) and not ranges.range_applies('"a"', tag)
    assert not ranges.range_applies("Wed, 21 Oct 2015 07:28:00 GMT", tag) and not ranges.range_applies(tag, None)
