"""The console's pages in a real headless Chromium (Debian's chromium and chromium-driver, driven by
selenium): log in through /login, watch a live call's events arrive on its page, then see the stored call
in the list and on its page (transcript, turn timeline, drawn waveform, the player's audio), with no error
in the browser's console (a CSP violation or a failed request would log one)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest
from conftest import missing_resource, start_stack
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
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """The browser console's errors since the last look (reading the log empties it)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


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
            return [(int(e.get_attribute("data-seq")), e.get_attribute("data-type")) for e in elements("#live-events .event")]

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
