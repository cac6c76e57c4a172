"""The console's Campaigns pages in a real headless Chromium (as tests/stack/test_console_browser.py drives it):
the list and one campaign's page show a campaign's progress and outcomes from the store, and print what the store
holds as text: a campaign named like HTML (a name is whatever its creator typed) shows as those characters, runs
nothing, and the browser logs no error (a CSP violation would log one)."""

from __future__ import annotations

import pytest
from console_alone import ConsoleAlone, start_console
from test_console_browser import browser, console_errors, log_in  # noqa: F401 (the browser fixture)

from voicecore.outbound.campaign import CampaignSettings, Dial
from voicecore.outbound.campaign_file import Callee
from voicecore.outbound.campaign_store import CampaignStore
from voicecore.store import CallStore

pytestmark = pytest.mark.integration

NAME = '<img src=x onerror="document.body.dataset.pwned=1">spring'


@pytest.fixture
def console(tmp_path) -> ConsoleAlone:
    running = start_console(tmp_path)
    store = CampaignStore(CallStore.open(f"sqlite:///{tmp_path}/records/calls.db"))
    try:
        callees = [Callee(2 + i, f"+4670100000{i}", ("Europe/Stockholm",), {"first_name": f"<b>{i}</b>"}) for i in range(3)]
        campaign_id = store.create(NAME, CampaignSettings(from_numbers=("+46812345600",)), callees, 1_800_000_000.0)
        for row, outcome in ((2, "completed"), (3, "busy")):
            store.begin_attempt(campaign_id, Dial(row, f"+4670100000{row - 2}", 1, "+46812345600"), 1_800_000_010.0)
            store.end_attempt(campaign_id, row, 1, outcome, 1_800_000_020.0, f"CA{row:032d}")
        store.begin_attempt(campaign_id, Dial(4, "+46701000002", 1, "+46812345600"), 1_800_000_030.0)
    finally:
        store.close()
    yield running
    running.stop()


def test_the_campaign_pages_show_progress_and_outcomes_as_text(browser, console):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    log_in(browser, console, "/campaigns")
    WebDriverWait(browser, 10, poll_frequency=0.1).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute(
        "data-listed") == "1", "timed out waiting for the campaign list")
    row = browser.find_element(By.CSS_SELECTOR, "#campaigns tr")
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[0] == NAME and cells[1] == "command" and cells[3:7] == ["3", "3", "1", "1"]
    assert cells[7] == "completed 1"  # busy is retried (attempts remain): that callee is not done
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    row.find_element(By.TAG_NAME, "a").click()
    WebDriverWait(browser, 10, poll_frequency=0.1).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute(
        "data-state") == "command", "timed out waiting for the campaign's page")
    assert browser.find_element(By.ID, "name").text == NAME and browser.title.startswith(NAME)
    assert "1 of 3 callee(s) done, 3 dialled, 1 call(s) in the air, 3 attempt(s)" in browser.find_element(By.ID, "progress").text
    attempts = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#attempts tr")]
    assert len(attempts) == 3 and "in the air" in attempts[0] and "completed" in attempts[1] and "busy" in attempts[2]
    link = browser.find_element(By.CSS_SELECTOR, "#attempts a.sid")
    assert link.get_attribute("href").endswith(f"/calls/CA{2:032d}")
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-pwned") is None
    assert console_errors(browser) == []
