"""The console exposed to browsers, over real sockets on 127.0.0.1 (the console worker as a process, a real
SQLite store holding one real call: tests/console_alone.py).

- A page of another port of the same host, with the operator's session cookie (cookies do not isolate by
  port), is refused on /observe and on the JSON API; the console's own pages, and programs with an API key
  and no Origin, are served. Missing and wrong Origins on the WebSocket and on a POST are refused, 403 with
  one log line naming the origin.
- The login's ``next`` is a path on this console only.
- The session cookie: HttpOnly, SameSite=Strict, Path=/, named for the console's port; Secure (and
  ``__Host-``) behind TLS.
- ``audio.wav`` answers byte ranges (206, 416, several ranges: the whole), and a finished call's recording
  is cacheable (private, ETag, 304); a live call's is not.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import re
import wave

import pytest
import websockets
from console_alone import ConsoleAlone, start_console
from waiting import wait_until
from websockets.asyncio.client import connect

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def console(tmp_path_factory) -> ConsoleAlone:
    running = start_console(tmp_path_factory.mktemp("console"))
    yield running
    running.stop()


def request(console: ConsoleAlone, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """(status, headers with lower-case names, body) of one request on its own connection."""
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def other_port(console: ConsoleAlone) -> str:
    return f"http://127.0.0.1:{console.port + 1 if console.port < 65535 else console.port - 1}"


def log_in(console: ConsoleAlone) -> tuple[str, str]:
    """(the Cookie header a browser then sends, the Set-Cookie it got) from the login page's POST."""
    status, headers, body = request(console, "POST", "/api/session",
                                    {"Authorization": f"Bearer {console.key}", "Origin": console.origin})
    assert status == 200, body
    set_cookie = headers["set-cookie"]
    return set_cookie.split(";", 1)[0], set_cookie


async def upgrade(console: ConsoleAlone, query: str = "", origin: str | None = None, headers: dict | None = None,
                  until: int = 0) -> tuple[int, list[dict]]:
    """(101 or the refusal's status, the events read: ``until`` of them, or none)."""
    try:
        # max_queue=None: events left unread must not stop the client reading the close frame behind them
        async with connect(f"ws://127.0.0.1:{console.port}/observe{query}", origin=origin,
                           additional_headers=headers or {}, open_timeout=10, max_queue=None) as ws:
            events = []
            async with asyncio.timeout(10):
                while len(events) < until:
                    events.append(json.loads(await ws.recv()))
            return 101, events
    except websockets.InvalidStatus as exc:
        return exc.response.status_code, []


def test_a_page_of_another_port_cannot_read_calls_with_the_operators_cookie(console):
    cookie, _ = log_in(console)
    attacker = other_port(console)
    sid = console.sid

    # what the operator reached before: the stored call's every event over /observe, and the live firehose
    assert asyncio.run(upgrade(console, f"?call={sid}&since=0", attacker, {"Cookie": cookie})) == (403, [])
    assert asyncio.run(upgrade(console, "", attacker, {"Cookie": cookie})) == (403, [])
    # the JSON API: a cross-origin fetch carries the page's Origin; a no-cors one, Sec-Fetch-Site
    status, _, body = request(console, "GET", f"/api/calls/{sid}/events?since=0", {"Cookie": cookie, "Origin": attacker})
    assert status == 403 and sid.encode() not in body
    status, _, body = request(console, "GET", f"/api/calls/{sid}", {"Cookie": cookie, "Sec-Fetch-Site": "same-site"})
    assert status == 403 and b"transcript" not in body
    status, _, _ = request(console, "GET", f"/api/calls/{sid}/audio.wav", {"Cookie": cookie, "Sec-Fetch-Site": "cross-site"})
    assert status == 403
    refusals = [line for line in console.log().splitlines() if f"origin '{attacker}' with a session cookie" in line]
    assert any("refused GET /observe" in line for line in refusals), console.log()[-2000:]
    assert any(f"refused GET /api/calls/{sid}/events" in line for line in refusals)

    # the same cookie from the console's own pages: everything
    status, events = asyncio.run(upgrade(console, f"?call={sid}&since=0", console.origin, {"Cookie": cookie},
                                         until=console.events))
    assert status == 101 and [e["seq"] for e in events] == list(range(1, console.events + 1))
    status, _, body = request(console, "GET", f"/api/calls/{sid}/events?since=0", {"Cookie": cookie, "Sec-Fetch-Site": "same-origin"})
    assert status == 200 and len(json.loads(body)) == console.events
    status, _, body = request(console, "GET", f"/api/calls/{sid}", {"Cookie": cookie, "Origin": console.origin})
    assert status == 200 and json.loads(body)["call"]["transcript"] == console.transcript


@pytest.mark.parametrize("origin", [None, "http://127.0.0.1:9", "null", "http://localhost.evil.example:{port}",
                                    "https://127.0.0.1:{port}", "http://127.0.0.1:{port}/x"])
def test_a_websocket_with_the_cookie_and_a_missing_or_wrong_origin_is_refused(console, origin):
    cookie, _ = log_in(console)
    origin = origin.format(port=console.port) if origin else None
    before = console.log().count("console: refused")
    assert asyncio.run(upgrade(console, f"?call={console.sid}", origin, {"Cookie": cookie})) == (403, [])
    lines = console.log().splitlines()
    refused = [line for line in lines if "console: refused" in line][before:]
    assert len(refused) == 1 and (f"origin {origin!r}" if origin else "origin (none)") in refused[0], refused


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{port}", "http://localhost:{port}", "http://[::1]:{port}",
                                    "HTTP://LOCALHOST:{port}"])
def test_a_websocket_from_the_consoles_own_origins_is_served(console, origin):
    cookie, _ = log_in(console)
    status, events = asyncio.run(upgrade(console, f"?call={console.sid}&since=0", origin.format(port=console.port),
                                         {"Cookie": cookie}, until=1))
    assert status == 101 and events[0]["type"] == "call.started"


def test_a_program_with_an_api_key_and_no_origin_is_served(console):
    key = {"Authorization": f"Bearer {console.key}"}
    status, events = asyncio.run(upgrade(console, f"?call={console.sid}&since=0", None, key, until=console.events))
    assert status == 101 and len(events) == console.events
    assert asyncio.run(upgrade(console, "", None, key)) == (101, [])
    status, _, body = request(console, "GET", f"/api/calls/{console.sid}/events", key)
    assert status == 200 and len(json.loads(body)) == console.events
    status, headers, _ = request(console, "POST", "/api/session", key)  # a program may open a session too
    assert status == 200 and headers["set-cookie"]
    # ... but not from a page of another origin that somehow holds the key
    assert asyncio.run(upgrade(console, "", "http://127.0.0.1:9", key)) == (403, [])
    assert request(console, "GET", "/api/calls", {**key, "Origin": "http://127.0.0.1:9"})[0] == 403
    # and without any credential, an allowed origin is still 401
    assert asyncio.run(upgrade(console, "", console.origin)) == (401, [])


def test_state_changing_requests_are_posts_with_the_consoles_origin(console):
    cookie, _ = log_in(console)
    calls = {"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}
    attacker = other_port(console)
    # log-out: a GET (an <img> on any page of the host could end the session) is not served
    assert request(console, "GET", "/api/logout", {"Cookie": cookie})[0] == 405
    status, headers, _ = request(console, "GET", "/api/session", {"Authorization": f"Bearer {console.key}"})
    assert status == 405 and headers["allow"] == "POST"
    # a POST without an Origin, or with another one, is refused and changes nothing
    for origin in (None, attacker, "null"):
        status, _, body = request(console, "POST", "/api/logout", {"Cookie": cookie} | ({"Origin": origin} if origin else {}))
        assert status == 403, (origin, body)
        assert request(console, "GET", "/api/calls", calls)[0] == 200, "a refused log-out ended the session"
    status, _, _ = request(console, "POST", "/api/session", {"Authorization": f"Bearer {console.key}", "Origin": attacker})
    assert status == 403
    # from the console's page: it ends the session, and the cookie with it
    status, headers, _ = request(console, "POST", "/api/logout", {"Cookie": cookie, "Origin": console.origin})
    assert status == 204 and "Max-Age=0" in headers["set-cookie"]
    assert request(console, "GET", "/api/calls", calls)[0] == 401


PHISHING_NEXTS = ["/%5Cexample.invalid/phish", "//example.invalid/phish", "/\\example.invalid", "https://example.invalid/",
                  "javascript:alert(1)", "/%2F%2Fexample.invalid", "/%252F%252Fexample.invalid", "/%5C%5Cexample.invalid",
                  "/%09/example.invalid", "%2F%2Fexample.invalid", "/calls/x%0d%0aSet-Cookie:x=1", "example.invalid",
                  "/ /example.invalid"]


@pytest.mark.parametrize("raw", PHISHING_NEXTS)
def test_a_login_link_that_would_leave_the_console_is_refused(console, raw):
    from urllib.parse import quote

    status, _, body = request(console, "GET", "/login?next=" + quote(raw, safe=""))
    assert status == 400 and b"next" in body, raw


@pytest.mark.parametrize("raw", ["/", "/calls/CA12d7ea0ef4734a81a0186375f3878962", "/?outcome=transfer&agent=Smile%20Dental",
                                 "/live"])
def test_a_login_link_back_into_the_console_is_served(console, raw):
    from urllib.parse import quote

    status, headers, _ = request(console, "GET", "/login?next=" + quote(raw, safe=""))
    assert status == 200 and headers["content-type"].startswith("text/html")


def test_the_session_cookie_is_the_consoles_own(console, tmp_path):
    _, set_cookie = log_in(console)
    attributes = [part.strip() for part in set_cookie.split(";")]
    assert attributes[0].startswith(f"voicecore_session_{console.port}=")
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(attributes) and "Secure" not in attributes
    # a console behind TLS: Secure, __Host-; its public origin is served beside its listen address's
    behind_tls = start_console(tmp_path, VOICECORE_CONSOLE_PUBLIC_URL="https://console.example.test")
    try:
        status, headers, _ = request(behind_tls, "POST", "/api/session",
                                     {"Authorization": f"Bearer {behind_tls.key}", "Origin": "https://console.example.test"})
        attributes = [part.strip() for part in headers["set-cookie"].split(";")]
        assert status == 200 and attributes[0].startswith(f"__Host-voicecore_session_{behind_tls.port}=")
        assert {"HttpOnly", "SameSite=Strict", "Path=/", "Secure"} <= set(attributes)
        tls_cookie = attributes[0]
        assert request(behind_tls, "GET", "/api/calls", {"Cookie": tls_cookie, "Origin": "https://console.example.test"})[0] == 200
        # the browser sends every console's cookie to each (cookies do not isolate by port): each reads its own
        both = f"{tls_cookie}; {log_in(console)[0]}"
        assert request(behind_tls, "GET", "/api/calls", {"Cookie": log_in(console)[0]})[0] == 401
        assert request(console, "GET", "/api/calls", {"Cookie": tls_cookie})[0] == 401
        assert request(console, "GET", "/api/calls", {"Cookie": both})[0] == 200
        assert request(behind_tls, "GET", "/api/calls", {"Cookie": both})[0] == 200
    finally:
        behind_tls.stop()


# --- the recording -------------------------------------------------------------------------------------------


def audio(console: ConsoleAlone, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    return request(console, method, f"/api/calls/{console.sid}/audio.wav",
                   {"Authorization": f"Bearer {console.key}", **(headers or {})})


def test_the_recording_is_served_in_byte_ranges(console):
    status, headers, whole = audio(console)
    size = len(whole)
    assert status == 200 and headers["accept-ranges"] == "bytes" and int(headers["content-length"]) == size
    with wave.open(io.BytesIO(whole)) as wav:
        assert (wav.getnchannels(), wav.getframerate()) == (2, 8000) and wav.getnframes() > 8000 * 10
    for spec, first, last in [("bytes=0-43", 0, 43), ("bytes=1000-", 1000, size - 1), ("bytes=-500", size - 500, size - 1),
                              (f"bytes=100-{size * 2}", 100, size - 1), ("bytes = 7-7", 7, 7), ("bytes=-99999999", 0, size - 1)]:
        status, headers, body = audio(console, {"Range": spec})
        assert status == 206, spec
        assert headers["content-range"] == f"bytes {first}-{last}/{size}" and body == whole[first:last + 1], spec
        assert headers["accept-ranges"] == "bytes" and int(headers["content-length"]) == last - first + 1
    # a seek's worth, as a browser asks: the parts make the whole
    parts = [audio(console, {"Range": f"bytes={at}-{min(at + 99_999, size - 1)}"})[2] for at in range(0, size, 100_000)]
    assert b"".join(parts) == whole
    for spec in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0"):
        status, headers, _ = audio(console, {"Range": spec})
        assert status == 416 and headers["content-range"] == f"bytes */{size}", spec
    for spec in ("bytes=0-10,20-30", "bytes=5-1", "items=0-10", "bytes=abc", "bytes=", "bytes=--5"):
        status, headers, body = audio(console, {"Range": spec})  # several ranges or not valid: the whole
        assert status == 200 and body == whole, spec
    status, headers, body = audio(console, {"Range": "bytes=0-10"}, method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) == size


def test_a_finished_calls_recording_is_cacheable(console):
    status, headers, whole = audio(console)
    etag = headers["etag"]
    assert status == 200 and re.fullmatch(r'"[0-9a-f]{24}"', etag)
    assert headers["cache-control"] == "private, no-cache"  # kept by the browser, revalidated: 304 when unchanged
    assert audio(console)[1]["etag"] == etag
    for match in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        status, headers, body = audio(console, {"If-None-Match": match})
        assert (status, body, headers["etag"]) == (304, b"", etag), match
        assert headers["cache-control"] == "private, no-cache"
    assert audio(console, {"If-None-Match": '"other"'})[0] == 200
    # If-Range: the range only while the client's part is of the same recording
    assert audio(console, {"Range": "bytes=0-9", "If-Range": etag})[0] == 206
    status, _, body = audio(console, {"Range": "bytes=0-9", "If-Range": '"older"'})
    assert status == 200 and body == whole
    assert audio(console, {"Range": "bytes=0-9", "If-Range": "Wed, 21 Oct 2015 07:28:00 GMT"})[0] == 200
    # the other API answers are never stored
    assert request(console, "GET", "/api/calls", {"Authorization": f"Bearer {console.key}"})[1]["cache-control"] == "no-store"


def test_a_live_calls_recording_is_not_stored(tmp_path):
    running = start_console(tmp_path)
    try:
        etag = audio(running)[1]["etag"]
        running.mark_live()
        status, headers, whole = audio(running, {"If-None-Match": etag})
        assert status == 200 and headers["cache-control"] == "no-store" and "etag" not in headers
        status, headers, body = audio(running, {"Range": "bytes=10-19"})
        assert status == 206 and body == whole[10:20] and headers["cache-control"] == "no-store"
    finally:
        running.stop()


def test_an_observer_that_leaves_is_let_go(console):
    """Its handler waits for the call's next event, which for a finished call never comes: the client's
    close frame must end it (else each such observer stayed counted, and held a stopping console up)."""
    def observers() -> int:
        return json.loads(request(console, "GET", "/healthz")[2])["observers"]

    key = {"Authorization": f"Bearer {console.key}"}
    status, events = asyncio.run(upgrade(console, f"?call={console.sid}&since=0", None, key, until=console.events))
    assert status == 101 and len(events) == console.events
    assert asyncio.run(upgrade(console, f"?call={console.sid}&since=0", None, key, until=1))[0] == 101  # leaves mid-replay
    wait_until(lambda: observers() == 0, 5, "the observers that left to be let go")
