"""The console for daily use in a real headless Chromium (Debian's chromium and chromium-driver, through
selenium), against the console worker alone over a real SQLite store (tests/console_alone.py: the demo call,
a receptionist call recorded through the controller whose booking the caller confirmed with keypad 1, and
240 more calls): searching and filtering the list, paging past the first 100, the export links, the list on a
narrow screen, the call page used by keyboard alone (turns, the waveform as a slider), seeking from the
transcript, what the page says (summary, tool statuses, one gate row per answer, the event log's filter and
folded words), WCAG AA contrast of every visible text in light and dark, and the live cards.

Screenshots are kept as test artifacts in each test's pytest tmp dir, ``<basetemp>/<test name>0/screenshots/*.png``
(each test prints where). pytest's default basetemp is ``/tmp/pytest-of-$USER/pytest-N``, of which it keeps the
last three runs (of every pytest run by that user); to keep them, give one: ``pytest --basetemp=/tmp/console-shots``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from console_alone import ConsoleAlone, start_console
from test_console_browser import browser, console_errors, log_in  # noqa: F401 (the browser fixture)

from voicecore.store.figures import outcome_words

pytestmark = pytest.mark.integration

FILLERS = 240


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> ConsoleAlone:
    running = start_console(tmp_path_factory.mktemp("console"), agent_call_too=True, more_calls=FILLERS)
    yield running
    running.stop()


@pytest.fixture
def shots(tmp_path) -> Path:
    directory = tmp_path / "screenshots"
    directory.mkdir()
    yield directory
    print(f"\nscreenshots: {directory}")


def shoot(driver, directory: Path, name: str, full_page: bool = False) -> None:
    if full_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        width = driver.get_window_size()["width"]
        driver.set_window_size(width, min(6000, height + 120))
    driver.save_screenshot(str(directory / f"{name}.png"))
    assert (directory / f"{name}.png").stat().st_size > 5000


def wait(driver, condition, what: str, timeout_s: float = 15):
    """Until ``condition`` holds; an element the page re-rendered meanwhile (stale) is looked up again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
                         ).until(condition, f"timed out waiting for {what}")


def select(driver, name: str, value: str) -> bool:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("name", name)).select_by_value(value)
    return True


def css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def listed(driver) -> int:
    return int(driver.find_element("tag name", "body").get_attribute("data-listed") or -1)


def row_sids(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#calls tr[data-call-sid]')].map((r) => r.dataset.callSid);")


# --- the list -----------------------------------------------------------------------------------------------------
def test_search_filters_paging_and_the_export_of_what_is_shown(browser, console, shots):  # noqa: F811
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    log_in(browser, console)
    wait(browser, lambda d: listed(d) == 100, "the first page")
    assert browser.find_element("id", "count").text == f"100 of {FILLERS + 2} calls, newest first"
    # paging: past the newest 100, to the end
    for shown in (200, FILLERS + 2):
        browser.find_element("id", "more").click()
        wait(browser, lambda d, n=shown: listed(d) == n, f"{shown} calls listed")
    assert len(set(row_sids(browser))) == FILLERS + 2 and not browser.find_element("id", "more").is_displayed()
    # search by words: the list, the address and the export links follow
    search = browser.find_element("name", "q")
    search.send_keys("whitening", Keys.ENTER)
    wait(browser, lambda d: listed(d) == FILLERS // 6, "the search's calls")
    assert "q=whitening" in browser.current_url
    shoot(browser, shots, "list-search")
    csv_link = browser.find_element("id", "export-csv").get_attribute("href")
    assert "format=csv" in csv_link and "q=whitening" in csv_link
    # the link downloads the file, as a click on it does for the operator (a same-origin navigation: allowed)
    downloads = shots.parent / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    browser.find_element("id", "export-csv").click()
    wait(browser, lambda d: [f for f in downloads.iterdir() if f.suffix == ".csv"], "the downloaded CSV")
    (exported,) = [f for f in downloads.iterdir() if f.suffix == ".csv"]
    assert exported.name.startswith("calls-") and exported.read_bytes().count(b"\r\n") == FILLERS // 6 + 1
    # ... and by call id, then filters on top of a cleared search
    search.clear()
    search.send_keys("cafill0023", Keys.ENTER)
    wait(browser, lambda d: row_sids(d) == [f"CAfill{n:05d}" for n in range(230, 240)], "the calls whose id begins so")
    browser.find_element("css selector", "#filters button[type=reset]").click()
    wait(browser, lambda d: listed(d) == 100 and "q=" not in d.current_url, "the cleared list")
    # the filter form may be drawn again once the cleared list is in: look its elements up until they hold
    wait(browser, lambda d: select(d, "agent", "front desk"), "the agent filter")
    wait(browser, lambda d: d.find_element("name", "errors").click() or True, "the errors filter")
    wait(browser, lambda d: 0 < listed(d) < 100 and "errors=1" in d.current_url, "the filtered list")
    cells = wait(browser, lambda d: [(row.find_elements("tag name", "td")[2].text, row.find_elements("tag name", "td")[8].text)
                                     for row in css(d, "#calls tr[data-call-sid]")], "the filtered rows")
    assert cells and all(agent == "front desk" and errors.startswith("⚠") for agent, errors in cells), cells
    shoot(browser, shots, "list-filtered")
    # a filter that matches nothing says so; an empty store would say that nothing is stored yet
    Select(browser.find_element("name", "direction")).select_by_value("outbound")
    wait(browser, lambda d: listed(d) == 0, "no calls")
    assert browser.find_element("css selector", "#calls td.empty").text == "No calls match these filters."
    assert console_errors(browser) == []


def test_the_live_strip_says_when_no_call_is_in_progress(browser, console):  # noqa: F811
    """No filter applies to the calls in progress: their strip says "No call in progress." when there is none
    (never the list's "No calls match"), and shows a call instead while one goes on."""
    log_in(browser, console)
    wait(browser, lambda d: listed(d) == 100, "the first page")
    none = browser.find_element("id", "live-none")
    wait(browser, lambda d: none.is_displayed(), "the empty strip")
    assert none.text == "No call in progress." and css(browser, "#live-now li") == []
    with console.live_feed("CAlive0002", {"control": "turns", "flow": "agent", "agent": "receptionist", "resumed": False}) as send:
        wait(browser, lambda d: len(css(d, "#live-now li")) == 1 and not none.is_displayed(), "the call in the strip", 10)
        assert "CAlive0002" in css(browser, "#live-now li")[0].text
        send(3000, "call.ended", {"outcome": "hangup:completed"})
        wait(browser, lambda d: none.is_displayed() and css(d, "#live-now li") == [], "the strip empty again", 10)
    assert none.text == "No call in progress."
    assert "No calls match" not in browser.find_element("css selector", ".live-strip").text
    assert console_errors(browser) == []


def test_the_list_scrolls_sideways_on_a_narrow_screen_with_every_column(browser, console, shots):  # noqa: F811
    browser.set_window_size(420, 900)
    log_in(browser, console)
    wait(browser, lambda d: listed(d) == 100, "the first page")
    box = browser.find_element("css selector", "#calls").find_element("xpath", "ancestor::div[@class='scroll']")
    sizes = browser.execute_script("const b = arguments[0]; return [b.scrollWidth, b.clientWidth, document.documentElement.scrollWidth,"
                                   " document.documentElement.clientWidth];", box)
    assert sizes[0] > sizes[1] + 200 and sizes[2] <= sizes[3] + 1, sizes  # the table scrolls in its box, the page does not
    headers = [th.text.replace("\n", " ") for th in css(browser, "table.calls th")]
    assert len(headers) == 10 and headers[-1] == "Outcome"
    shoot(browser, shots, "list-narrow")
    browser.execute_script("arguments[0].scrollLeft = arguments[0].scrollWidth;", box)
    outcome = css(browser, "table.calls th")[-1]
    right = browser.execute_script("return arguments[0].getBoundingClientRect().right;", outcome)
    assert 0 < right <= 420, right
    shoot(browser, shots, "list-narrow-scrolled")
    # the dates never wrap at a common desktop width
    browser.set_window_size(1400, 900)
    browser.refresh()
    wait(browser, lambda d: listed(d) == 100, "the first page again")
    heights = {cell.size["height"] for cell in css(browser, "#calls tr td:first-child")[:20]}
    line = browser.execute_script("return parseFloat(getComputedStyle(document.querySelector('#calls td')).lineHeight)")
    assert max(heights) < 2 * line + 16, (heights, line)


# --- the call page --------------------------------------------------------------------------------------------------
def open_call(driver, console: ConsoleAlone, sid: str) -> float:
    """Log in and open a call's page; the ms from the navigation's start until the page was ready."""
    log_in(driver, console, f"/calls/{sid}")
    wait(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true", "the call page")
    return float(driver.find_element("tag name", "body").get_attribute("data-ready-ms"))


def player(driver, expression: str):
    return driver.execute_script(f"const p = document.getElementById('player'); return {expression};")


def test_the_call_page_by_keyboard_alone(browser, console, shots):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    ready_ms = open_call(browser, console, console.agent_sid)
    print(f"\ncall page ready {ready_ms:.0f} ms after the navigation began")
    wait(browser, lambda d: player(d, "p.readyState") >= 1, "the recording's metadata")
    duration = player(browser, "p.duration")
    browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
    focused = []
    for _ in range(60):  # Tab from the top of the page to the first turn
        ActionChains(browser).send_keys(Keys.TAB).perform()
        active = browser.switch_to.active_element
        focused.append(active.get_attribute("class") or active.tag_name)
        if "turn" in focused[-1].split():
            break
    else:
        raise AssertionError(f"no turn reachable by Tab: {focused}")
    seek_ms = int(active.get_attribute("data-seek-ms"))
    label = active.get_attribute("aria-label")
    assert label.startswith("Turn 1 at ") and "heard the answer after" in label and "detection" in label
    active.send_keys(Keys.ENTER)
    wait(browser, lambda d: abs(player(d, "p.currentTime") - seek_ms / 1000) < 0.6, "the seek to the turn")
    # Tab on to the waveform: a slider for the arrow keys
    for _ in range(30):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.switch_to.active_element.get_attribute("id") == "waveform":
            break
    else:
        raise AssertionError("the waveform is not reachable by Tab")
    waveform = browser.switch_to.active_element
    player(browser, "p.pause()")
    assert waveform.get_attribute("role") == "slider"
    waveform.send_keys(Keys.HOME)
    wait(browser, lambda d: player(d, "p.currentTime") == 0, "Home")
    for _ in range(3):
        waveform.send_keys(Keys.ARROW_RIGHT)
    waveform.send_keys(Keys.SHIFT, Keys.ARROW_RIGHT)
    wait(browser, lambda d: abs(player(d, "p.currentTime") - 8) < 0.05, "three steps of 1 s and one of 5 s")
    assert waveform.get_attribute("aria-valuenow") == "8" and waveform.get_attribute("aria-valuetext").startswith("0:08.0 of ")
    waveform.send_keys(Keys.END)
    wait(browser, lambda d: abs(player(d, "p.currentTime") - duration) < 0.1, "End")
    waveform.send_keys(Keys.SPACE)
    wait(browser, lambda d: player(d, "!p.paused") or player(d, "p.ended"), "Space plays")
    shoot(browser, shots, "call-keyboard")
    # every seek control of the transcript is a button
    assert all(b.tag_name == "button" for b in css(browser, "#transcript .line .at"))
    assert console_errors(browser) == []


def test_a_transcript_line_plays_from_where_it_was_said(browser, console):  # noqa: F811
    open_call(browser, console, console.agent_sid)
    wait(browser, lambda d: player(d, "p.readyState") >= 1, "the recording's metadata")
    line = next(row for row in css(browser, "#transcript .line") if row.text.split("\n")[-1].startswith("You are booked"))
    at_ms = int(line.get_attribute("data-at-ms"))
    line.find_element("css selector", ".at").click()
    wait(browser, lambda d: player(d, "!p.paused && p.currentTime > 0"), "playback")
    assert at_ms / 1000 - 0.05 <= player(browser, "p.currentTime") < at_ms / 1000 + 2.5
    # the same moment is where the agent's lane of the waveform starts to sound
    data = browser.execute_async_script(
        "const done = arguments[1]; fetch(arguments[0] + '/waveform?points=2000').then((r) => r.json()).then(done);",
        f"/api/calls/{console.agent_sid}")
    per_point_ms = data["duration_ms"] / len(data["agent"])
    at = int(at_ms / per_point_ms)
    assert max(data["agent"][at + 1:at + 5]) > 0.1 and max(data["agent"][at - 6:at - 1]) < 0.02


def test_the_call_page_says_what_happened(browser, console, shots):  # noqa: F811
    from selenium.webdriver.common.by import By

    open_call(browser, console, console.agent_sid)
    summary = browser.find_element(By.ID, "summary-text").text
    assert summary.startswith("The agent said goodbye and hung up after") and "The caller pressed 1 key." in summary
    assert "book: ran after the caller's yes (keypad 1)." in summary and "end_call: ended the call." in summary
    # the turns: the heard latency in bold and its parts written out, no hover needed
    first = css(browser, "#timeline .turn")[0]
    parts = first.find_element(By.CSS_SELECTOR, ".latency .parts")
    assert parts.is_displayed() and all(word in parts.text for word in ("detection", "model", "runtime", "carrier"))
    assert first.find_element(By.CSS_SELECTOR, ".latency .total").text.endswith(("ms", " s"))
    # the transcript: the keypress that confirmed the booking, before the booking was told
    lines = [(row.get_attribute("data-kind"), row.find_element(By.CSS_SELECTOR, ".text").text) for row in css(browser, "#transcript .line")]
    kinds = [kind for kind, _ in lines]
    assert ("keypad", "pressed 1: yes to book") in lines and kinds.index("keypad") < kinds.index("tool")
    assert [text for kind, text in lines if kind == "confirmation"] == ["Shall I book a cleaning on Friday?"]
    # tools: what became of each, no red "not run" for the call's normal end; the tool's time apart from the yes
    tools = {row.find_elements(By.TAG_NAME, "td")[1].text: row for row in css(browser, "#tools tr")}
    assert tools["book"].get_attribute("data-status") == "ran" and tools["book"].find_elements(By.TAG_NAME, "td")[4].text == "300 ms"
    assert tools["end_call"].get_attribute("data-status") == "ended the call" and "not run" not in tools["end_call"].text
    assert int(tools["book"].find_elements(By.TAG_NAME, "td")[5].text.removesuffix(" ms")) > 1000
    # the gate: one row for the answer, its three verdicts folded
    (row,) = css(browser, "#verdicts tr")
    assert row.get_attribute("data-verdict") == "approved" and "services.md:4" in row.text
    steps = row.find_element(By.CSS_SELECTOR, "details.steps")
    assert not steps.find_element(By.TAG_NAME, "ol").is_displayed()
    steps.find_element(By.TAG_NAME, "summary").click()
    assert len(steps.find_elements(By.TAG_NAME, "li")) == 3
    # the event log: words folded into one row per utterance, every event in some row, filterable by kind
    rows = css(browser, "#live-events .event")
    held = sorted(int(seq) for row in rows for seq in row.get_attribute("data-seqs").split())
    assert held == list(range(1, len(held) + 1)) and len(held) > len(rows)
    word_rows = [row for row in rows if row.get_attribute("data-type") == "transcript.delta"]
    assert word_rows and all(row.get_attribute("data-final") == "true" for row in word_rows)
    (gate_row,) = [row for row in rows if row.get_attribute("data-type") == "gate.verdict"]  # three approvals, one row
    assert len(gate_row.get_attribute("data-seqs").split()) == 3 and "(3 verdicts)" in gate_row.text
    assert not any("resp_" in row.text or "item_" in row.text for row in rows)
    browser.find_element(By.CSS_SELECTOR, "#event-filter input[name=words]").click()
    assert not any(row.is_displayed() for row in word_rows) and any(row.is_displayed() for row in rows if row not in word_rows)
    shoot(browser, shots, "call-page", full_page=True)
    assert console_errors(browser) == []


CONTRAST = """
const done = arguments[0];
const parse = (c) => {
  let m = c.match(/^rgba?\\(([^)]+)\\)$/);
  if (m) { const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
  m = c.match(/^color\\(srgb ([^)]+)\\)$/);
  if (m) { const p = m[1].split(/[ /]+/).filter(Boolean).map(Number); return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1]; }
  return null;
};
const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
const luminance = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
const unknown = [];
const background = (node) => {
  const layers = [];
  for (let n = node; n && n.nodeType === 1; n = n.parentElement) {
    const c = parse(getComputedStyle(n).backgroundColor);
    if (c === null) { unknown.push(getComputedStyle(n).backgroundColor); continue; }
    if (c[3] > 0) layers.push(c);
    if (c[3] === 1) break;
  }
  return layers.reverse().reduce((under, top) => over(top, under), [255, 255, 255, 1]);
};
const results = [];
for (const node of document.querySelectorAll('body *')) {
  if (['SCRIPT', 'STYLE', 'CANVAS', 'OPTION'].includes(node.tagName) || !node.getClientRects().length) continue;
  const own = [...node.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim());
  if (!own && !['SELECT', 'INPUT'].includes(node.tagName)) continue;
  const style = getComputedStyle(node);
  if (style.visibility === 'hidden' || node.closest('[hidden]')) continue;
  const color = parse(style.color);
  if (color === null) { unknown.push(style.color); continue; }
  const bg = background(node);
  const fg = over(color, bg);
  const [a, b] = [luminance(fg), luminance(bg)].sort((x, y) => y - x);
  const size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  results.push({ text: (node.innerText || node.value || '').trim().slice(0, 40), tag: node.tagName, cls: node.className,
                 ratio: (a + 0.05) / (b + 0.05), needs: large ? 3 : 4.5 });
}
done({ results, unknown });
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_visible_text_meets_wcag_aa_contrast(browser, console, shots, scheme):  # noqa: F811
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
    checked = 0
    for page, ready in (("/", lambda d: listed(d) == 100), (f"/calls/{console.agent_sid}",
                                                            lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true")):
        log_in(browser, console, page)
        wait(browser, ready, f"{page} ready")
        found = browser.execute_async_script(CONTRAST)
        assert found["unknown"] == [], found["unknown"][:5]
        failing = [r for r in found["results"] if r["ratio"] < r["needs"]]
        assert not failing, [(r["text"], r["tag"], r["cls"], round(r["ratio"], 2)) for r in failing[:10]]
        checked += len(found["results"])
        shoot(browser, shots, f"contrast-{scheme}-{'list' if page == '/' else 'call'}")
    assert checked > 300


def test_the_pages_formats_and_words_are_the_stores(browser, console):  # noqa: F811
    log_in(browser, console)
    outcomes = ["caller_hangup", "transfer", "hangup:completed", "hangup:vendor_failures", "hangup:model_unreachable",
                "hangup:silence_gave_up", "hangup:max_turns", "ended", "transfer_completed", ""]
    got = browser.execute_async_script(
        "const [outcomes, done] = arguments; import('/static/common.js').then((m) => done({"
        "words: outcomes.map(m.outcomeWords), durations: [59960, 60000, 119970, 3599990, 8300].map(m.fmtDuration),"
        "offsets: [119970, 0, 61049].map(m.fmtOffset), latencies: [373, 1234].map(m.fmtLatency)}));", outcomes)
    assert got["words"] == [outcome_words(o) for o in outcomes]
    assert got["durations"] == ["1:00.0", "1:00.0", "2:00.0", "1:00:00.0", "8.3 s"]  # never 1:60.0
    assert got["offsets"] == ["2:00.0", "0:00.0", "1:01.0"] and got["latencies"] == ["373 ms", "1.23 s"]


def test_live_cards_show_the_agent_the_elapsed_time_and_the_words_not_internal_ids(browser, console, shots):  # noqa: F811
    log_in(browser, console, "/live")
    with console.live_feed("CAlive0001", {"control": "turns", "flow": "agent", "agent": "receptionist", "resumed": False}) as send:
        card = wait(browser, lambda d: (css(d, '.call-card[data-call-sid="CAlive0001"]') or [None])[0], "the live card")
        send(1200, "turn.caller_started", {"item_id": "item_Xy12"})
        for word in ("Do ", "you ", "open ", "Saturdays?"):
            send(1500, "transcript.delta", {"role": "caller", "text": word, "final": False, "item_id": "item_Xy12"})
        send(2500, "response.started", {"response_id": "resp_Qz98"})
        send(2700, "response.audio", {"response_id": "resp_Qz98"})
        send(2800, "transcript.delta", {"role": "agent", "text": "Yes, from nine.", "final": True, "response_id": "resp_Qz98"})
        wait(browser, lambda d: "Yes, from nine." in card.text, "the agent's words")
        first = card.find_element("css selector", ".elapsed").text
        assert first.startswith("0:0")
        wait(browser, lambda d: card.find_element("css selector", ".elapsed").text != first, "the elapsed time to run", 3)
        text = card.text
        assert card.find_element("css selector", ".who").text == "receptionist"
        assert "Do you open Saturdays?" in text and text.count("caller") == 1  # four deltas, one line
        assert "agent speaking" in text
        assert "resp_" not in text and "item_" not in text
        shoot(browser, shots, "live")
        send(9000, "call.ended", {"outcome": "hangup:completed"})
        wait(browser, lambda d: "The agent said goodbye and hung up" in card.text, "the ended card")
    assert console_errors(browser) == []


def test_figures_for_the_report(browser, console):  # noqa: F811
    """The call page's ready time, cold (the recording replayed for its waveform) and warm, printed for the record."""
    cold = open_call(browser, console, console.sid)
    browser.refresh()
    wait(browser, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true", "the call page again")
    warm = float(browser.find_element("tag name", "body").get_attribute("data-ready-ms"))
    print(f"\ncall page ready: {cold:.0f} ms (first), {warm:.0f} ms (again)")
    assert json.loads(json.dumps(cold)) > 0 and warm > 0
