"""The console's pages in a real headless Chromium (Debian's chromium and chromium-driver, driven by
selenium): log in through /login, watch a live call's events arrive on its page, then see the stored call
in the list and on its page (transcript, turn timeline, drawn waveform, the player's audio), with no error
in the browser's console (a CSP violation or a failed request would log one).

Exposed to a browser (the console worker alone over a store holding one real call: tests/console_alone.py):
a page served from another port of the same host, in the browser the operator logged in with, gets nothing
from /observe, the JSON API or the recording, and cannot log the operator out; a login link whose next
leaves the console is refused; the recording seeks from a transcript time and from the waveform through
byte ranges, and a second visit revalidates it (304) instead of downloading it again."""

from __future__ import annotations

import asyncio
import http.server
import json
import shutil
import threading
import urllib.parse
from pathlib import Path

import pytest
from external import missing_resource
from stacks import start_stack
from console_alone import ConsoleAlone, start_console
from waiting import wait_until

from voicecore.demo import BARGE_IN_AT_MS, FIRST_QUESTION_AT_MS
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.store import CallStore, database_url_for
from voicecore.supervise import get_from_gateway

pytestmark = pytest.mark.integration

CHROMEDRIVER = Path("/usr/bin/chromedriver")  # Debian's; selenium-manager must not download one
HOW_TO_GET_IT = "apt-get install -y chromium chromium-driver; pip install selenium (the test extra)"


def call_script() -> CallScript:
    """A question, the agent's answer, and a barge-in over it: every part of the call page has something."""
    return CallScript(duration_ms=14_000, utterances=((FIRST_QUESTION_AT_MS, load_clip("caller_basic_price")),
                                                      (BARGE_IN_AT_MS, load_clip("caller_interrupt"))),
                      bargein_at_ms=(BARGE_IN_AT_MS,))


@pytest.fixture
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing_resource("selenium", "the Python environment", HOW_TO_GET_IT)
    chromium = shutil.which("chromium")
    if chromium is None:
        missing_resource("chromium", "PATH", HOW_TO_GET_IT)
    if not CHROMEDRIVER.is_file():
        missing_resource("chromedriver", CHROMEDRIVER, HOW_TO_GET_IT)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})  # performance: the network
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """The browser console's errors since the last look (reading the log empties it)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def network(driver, path_part: str) -> list[dict]:
    """The browser's requests whose URL holds ``path_part`` since the last look, each as the network saw it:
    {"url", "headers" (request, as sent), "status" (as the server answered, before the browser's cache)}."""
    requests: dict[str, dict] = {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        request = requests.setdefault(params.get("requestId", ""), {"url": "", "headers": {}, "status": None})
        if message["method"] == "Network.requestWillBeSent":
            request["url"] = params["request"]["url"]
        elif message["method"] == "Network.requestWillBeSentExtraInfo":
            request["headers"].update({k.lower(): v for k, v in params.get("headers", {}).items()})
        elif message["method"] == "Network.responseReceivedExtraInfo":
            request["status"] = params.get("statusCode")
    return [r for r in requests.values() if path_part in r["url"]]


@pytest.fixture
def console(tmp_path) -> ConsoleAlone:
    running = start_console(tmp_path)
    yield running
    running.stop()


def log_in(driver, console: ConsoleAlone, next_path: str = "") -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(console.base + "/login" + (f"?next={urllib.parse.quote(next_path, safe='')}" if next_path else ""))
    driver.find_element(By.ID, "key").send_keys(console.key)
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
    WebDriverWait(driver, 10, poll_frequency=0.1).until(
        lambda d: urllib.parse.urlsplit(d.current_url).path != "/login", "timed out waiting for the login to go through")


def test_console_pages_show_a_live_call_then_the_stored_call(browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(condition, timeout_s: float, what: str):
        return WebDriverWait(browser, timeout_s, poll_frequency=0.1).until(condition, f"timed out waiting for {what}")

    def elements(selector: str):
        return browser.find_elements(By.CSS_SELECTOR, selector)

    running = start_stack()
    try:
        config = running.config
        base = f"http://{config.console_listen}"
        wait_until(lambda: json.loads(get_from_gateway(config, "/healthz")[1])["workers_alive"].get("console"),
                   15, "the console's heartbeat at the gateway", detail=running.log_tail)
        with CallStore.open(database_url_for(config)) as store:
            key = store.add_api_key("browser")

        # without a session the list sends the browser to /login, which comes back after the key
        browser.get(base + "/")
        wait(lambda d: "/login" in d.current_url, 10, "the redirect to /login")
        browser.find_element(By.ID, "key").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
        wait(lambda d: d.current_url == base + "/", 10, "the way back to the list")
        console_errors(browser)  # the 401s that sent us to /login are expected

        # a live call: the list's "Live now" box links to it, its page shows its events as they come
        outcome: dict = {}

        def call_in_background() -> None:
            async def call():
                async with running.model_sim():
                    return await place_call(config.base_url, config.twilio_auth_token, call_script())
            try:
                outcome["result"] = asyncio.run(call())
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                outcome["error"] = exc

        caller = threading.Thread(target=call_in_background, daemon=True)
        caller.start()
        href = wait(lambda d: [a.get_attribute("href") for a in elements("#live-now a")], 20, "a call in 'Live now'")[0]
        sid = href.rsplit("/", 1)[1]
        assert href == f"{base}/calls/{sid}" and sid.startswith("CA"), href
        browser.get(href)  # (not a click: the box is redrawn every 2 s under the pointer)
        wait(lambda d: d.find_element(By.ID, "status").text == "live", 10, "the live view's socket")

        def live_events() -> list[tuple[int, str]]:
            """Every event the live view holds, (seq, type) in order (a row of words holds its deltas' numbers too)."""
            rows = browser.execute_script(
                "return [...document.querySelectorAll('#live-events .event')].map((e) => [e.dataset.seqs, e.dataset.type]);")
            return sorted((int(seq), kind) for seqs, kind in rows for seq in seqs.split())

        wait(lambda d: {"turn.caller_started", "transcript.delta"} & {kind for _, kind in live_events()}, 20,
             "a turn or transcript event in the live view")
        seen = live_events()
        assert seen[0] == (1, "call.started"), seen[:3]
        assert [seq for seq, _ in seen] == list(range(1, len(seen) + 1)), "the live view skipped or repeated an event"
        assert elements("#transcript .line[data-speaker]"), "the live transcript stayed empty"

        caller.join(40)
        assert not caller.is_alive() and "error" not in outcome, outcome.get("error") or running.log_tail()
        assert outcome["result"].closed_by == "carrier", running.log_tail()
        wait(lambda d: d.find_element(By.ID, "status").text == "ended", 15, "call.ended in the live view")
        seen = live_events()
        assert seen[-1][1] == "call.ended" and [seq for seq, _ in seen] == list(range(1, len(seen) + 1))
        with CallStore.open(database_url_for(config)) as store:
            wait_until(lambda: store.call(sid) is not None, 15, "the call in the store", detail=running.log_tail)
        assert console_errors(browser) == []

        # the stored call: its row in the list, its page with transcript, timeline, waveform and audio
        browser.get(base + "/")
        row = wait(lambda d: (elements(f'#calls tr[data-call-sid="{sid}"]') or [None])[0], 10, "the call's row")
        assert row.find_element(By.CSS_SELECTOR, "a").get_attribute("href") == f"{base}/calls/{sid}"
        browser.get(f"{base}/calls/{sid}")
        wait(lambda d: d.find_element(By.ID, "waveform").get_attribute("data-drawn") == "true", 15, "the waveform")
        assert browser.find_element(By.ID, "status").text == "ended"
        lines = elements("#transcript .line[data-speaker]")
        assert any(line.get_attribute("data-speaker") == "agent" and line.text for line in lines), [line.text for line in lines]
        assert len(elements("#timeline .turn")) >= 1
        assert browser.find_element(By.ID, "player").get_attribute("src") == f"{base}/api/calls/{sid}/audio.wav"
        wait(lambda d: d.execute_script("return document.getElementById('player').readyState") >= 1, 10,
             "the player reading the WAV's header")
        assert console_errors(browser) == []
    finally:
        running.stop()


# --- exposed to a browser --------------------------------------------------------------------------------------

ANOTHER_APP = """<!doctype html>
<html><head><meta charset="utf-8"><title>another app</title></head><body><pre id="result"></pre>
<script>
// What a page of another port of the same host tries with the console's session cookie, which the browser
// sends it (cookies do not isolate by port; SameSite counts the host, not the port).
const http = 'http://127.0.0.1:CONSOLE_PORT';
const results = {};
function socket(name, url) {
  return new Promise((resolve) => {
    const seen = { opened: false, messages: 0 };
    results[name] = seen;
    const ws = new WebSocket(url);
    ws.onopen = () => { seen.opened = true; };
    ws.onmessage = () => { seen.messages += 1; };
    ws.onclose = (event) => { seen.code = event.code; resolve(); };
    setTimeout(() => { ws.close(); resolve(); }, 5000);
  });
}
async function read(name, url, init) {
  try {
    const response = await fetch(url, init);
    results[name] = { status: response.status, type: response.type, bytes: (await response.text()).length };
  } catch (error) {
    results[name] = { error: String(error) };
  }
}
function listen(name, url) {
  return new Promise((resolve) => {
    const audio = new Audio();
    results[name] = {};
    audio.onloadedmetadata = () => { results[name].duration = audio.duration; resolve(); };
    audio.onerror = () => { results[name].error = audio.error ? audio.error.code : 'error'; resolve(); };
    audio.src = url;
    setTimeout(resolve, 5000);
  });
}
Promise.all([
  socket('call', 'ws://127.0.0.1:CONSOLE_PORT/observe?call=CALL_SID&since=0'),
  socket('every_call', 'ws://127.0.0.1:CONSOLE_PORT/observe'),
  read('events', `${http}/api/calls/CALL_SID/events?since=0`, { credentials: 'include' }),
  read('events_no_cors', `${http}/api/calls/CALL_SID/events?since=0`, { credentials: 'include', mode: 'no-cors' }),
  read('logout', `${http}/api/logout`, { method: 'POST', credentials: 'include', mode: 'no-cors' }),
  listen('recording', `${http}/api/calls/CALL_SID/audio.wav`),
]).then(() => {
  document.getElementById('result').textContent = JSON.stringify(results);
  document.title = 'done';
});
</script></body></html>
"""


class AnotherApp:
    """A web app on another port of 127.0.0.1, serving ANOTHER_APP at /."""

    def __init__(self, console: ConsoleAlone) -> None:
        page = ANOTHER_APP.replace("CONSOLE_PORT", str(console.port)).replace("CALL_SID", console.sid).encode()

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def test_a_page_of_another_port_gets_nothing_with_the_operators_session(browser, console):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    log_in(browser, console)
    another = AnotherApp(console)
    try:
        browser.get(another.origin + "/")
        WebDriverWait(browser, 30, poll_frequency=0.1).until(lambda d: d.title == "done", "timed out waiting for the page's tries")
        results = json.loads(browser.find_element(By.ID, "result").text)
    finally:
        another.close()
    # the stored call's events and every live call's: no socket opened, no event read
    assert results["call"] == {"opened": False, "messages": 0, "code": 1006}, results
    assert results["every_call"] == {"opened": False, "messages": 0, "code": 1006}, results
    assert "error" in results["events"] and results["events_no_cors"]["bytes"] == 0
    assert "duration" not in results["recording"] and results["recording"].get("error"), results  # not even playable
    # the browser did send the cookie (the attack was real): the console refused each, naming the page's origin
    refusals = [line for line in console.log().splitlines() if "console: refused" in line]
    for what in ("GET /observe from origin", f"GET /api/calls/{console.sid}/events from origin",
                 f"GET /api/calls/{console.sid}/audio.wav from origin (none)", "POST /api/logout from origin"):
        assert any(what in line and "with a session cookie" in line for line in refusals), (what, refusals)
    assert sum(f"origin '{another.origin}'" in line for line in refusals) >= 4, refusals
    # and the operator is still logged in: the log-out it tried was refused
    browser.get(f"{console.base}/calls/{console.sid}")
    WebDriverWait(browser, 10, poll_frequency=0.1).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript .line"),
                                                         "timed out waiting for the call page of the operator")
    assert urllib.parse.urlsplit(browser.current_url).path == f"/calls/{console.sid}"


NEXT_PATHS = {"/%5Cexample.invalid/phish": None, "/\\example.invalid": None, "//example.invalid": None,
              "/%2F%2Fexample.invalid": None, "/%252F%252Fexample.invalid": None, "https://example.invalid/": None,
              "javascript:alert(1)": None, "/%09/example.invalid": None, "/\texample": None, "/a b": None,
              "": "/", "/login?next=//example.invalid": "/", "/calls/CA1": "/calls/CA1", "/live": "/live",
              "/?agent=Smile%20Dental": "/?agent=Smile%20Dental"}


def test_the_login_sends_the_browser_only_to_a_path_of_the_console(browser, console):
    from selenium.webdriver.common.by import By

    # the link an attacker sends: refused before there is a form to type the key in
    browser.get(console.base + "/login?next=/%5Cexample.invalid/phish")
    assert not browser.find_elements(By.ID, "key") and "next" in browser.find_element(By.TAG_NAME, "body").text
    console_errors(browser)  # that 400 (and the browser's look for a /favicon.ico) are expected
    # the page's own rule, the same as the console's
    browser.get(console.base + "/login")
    verdicts = browser.execute_async_script(
        "const [paths, done] = arguments;"
        "import('/static/common.js').then((m) => done(paths.map((p) => m.safeNextPath(p))));", list(NEXT_PATHS))
    assert dict(zip(NEXT_PATHS, verdicts, strict=True)) == NEXT_PATHS
    # a link back into the console: there after the login
    log_in(browser, console, f"/calls/{console.sid}")
    assert browser.current_url == f"{console.base}/calls/{console.sid}"
    assert console_errors(browser) == []


def test_the_recording_seeks_from_a_transcript_time_and_the_waveform(browser, console):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(condition, what: str, timeout_s: float = 15):
        return WebDriverWait(browser, timeout_s, poll_frequency=0.05).until(condition, f"timed out waiting for {what}")

    def player(expression: str):
        return browser.execute_script(f"const p = document.getElementById('player'); return {expression};")

    log_in(browser, console, f"/calls/{console.sid}")
    wait(lambda d: d.find_element(By.ID, "waveform").get_attribute("data-drawn") == "true", "the waveform")
    wait(lambda d: player("p.readyState") >= 1, "the recording's metadata")
    duration = player("p.duration")
    assert 14 < duration < 16 and player("p.seekable.length && p.seekable.end(0)") == pytest.approx(duration, abs=0.05)

    # a transcript time (the latest with a few seconds after it): the player plays from there, the moment the
    # line was said (spoken_ms: an agent line's first frame sent), not when its words were known (at_ms)
    line = max((line for line in console.transcript if line["spoken_ms"] < (duration - 4) * 1000), key=lambda line: line["spoken_ms"])
    assert line["spoken_ms"] > 5000, console.transcript  # far enough from 0 to tell a seek from a start over
    assert line["at_ms"] - line["spoken_ms"] > 500  # and far enough from when its words were known to tell those apart
    row = next(row for row in browser.find_elements(By.CSS_SELECTOR, "#transcript .line")
               if row.find_element(By.CSS_SELECTOR, ".text").text == line["text"])
    row.find_element(By.CSS_SELECTOR, ".at").click()
    at_s = line["spoken_ms"] / 1000
    wait(lambda d: player("!p.paused && p.currentTime") and player("p.currentTime") > at_s, "playback from the line's time")
    assert at_s <= player("p.currentTime") < at_s + 2.5, (at_s, player("p.currentTime"))
    audio = network(browser, "/audio.wav")
    ranged = [r for r in audio if "range" in r["headers"]]
    assert ranged and all(r["status"] in (206, 304) for r in ranged), audio
    assert any(r["status"] == 206 for r in ranged), audio  # the bytes came in ranges, not as a whole each time

    # the waveform: a click at three quarters of its width
    player("p.pause()")
    canvas = browser.find_element(By.ID, "waveform")
    width = canvas.size["width"]
    ActionChains(browser).move_to_element_with_offset(canvas, round(width * 0.75) - width // 2, 0).click().perform()
    wait(lambda d: abs(player("p.currentTime") - duration * 0.75) < 0.3, "the seek to three quarters")
    assert console_errors(browser) == []

    # the next visit: the browser asks whether its copy is current, and keeps it (304), no download
    browser.refresh()
    wait(lambda d: player("p.readyState") >= 1, "the recording's metadata on the second visit")
    again = network(browser, "/audio.wav")
    assert again and all(r["status"] == 304 and r["headers"].get("if-none-match") for r in again), again


def test_the_opus_rendition_plays_and_seeks(browser, console):
    """A short call plays the WAV; ``?audio=opus`` (what a call over 10 minutes gets) plays the Opus file:
    Chromium reads its duration and seeks in it through byte ranges."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(condition, what: str, timeout_s: float = 15):
        return WebDriverWait(browser, timeout_s, poll_frequency=0.05).until(condition, f"timed out waiting for {what}")

    def player(expression: str):
        return browser.execute_script(f"const p = document.getElementById('player'); return {expression};")

    log_in(browser, console, f"/calls/{console.sid}")
    wait(lambda d: player("p.dataset.format") == "wav", "the player's recording")
    assert player("p.canPlayType('audio/ogg; codecs=opus')") != ""
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#audio-files a")]
    assert links == [f"{console.base}/api/calls/{console.sid}/audio.{kind}" for kind in ("wav", "opus")]

    browser.get(f"{console.base}/calls/{console.sid}?audio=opus")
    wait(lambda d: player("p.dataset.format") == "opus", "the Opus rendition chosen")
    assert player("p.src") == f"{console.base}/api/calls/{console.sid}/audio.opus"
    wait(lambda d: player("p.readyState") >= 1, "the Opus file's metadata", 30)
    duration = player("p.duration")
    assert 14 < duration < 16, duration
    player("p.currentTime = 11")
    wait(lambda d: player("!p.seeking && p.readyState >= 2"), "the seek to 0:11")
    assert player("p.currentTime") == pytest.approx(11, abs=0.1)
    opus = network(browser, "/audio.opus")
    assert opus and all(r["status"] in (200, 206, 304) for r in opus), opus
    assert any(r["status"] == 206 for r in opus), opus
    assert console_errors(browser) == []
