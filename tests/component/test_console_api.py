"""The console's JSON API for daily use, over real sockets on 127.0.0.1 (the console worker as a process over a
real SQLite store: the demo call, a receptionist call recorded through the controller, and 120 calls made
from it: tests/console_alone.py): the list's search, filters, paging and totals, the export (CSV and JSON, the
same filters, the whole list), a call's page data on one clock (lines with the keypress that confirmed a
booking, tool statuses, gate rows per answer, heard latency), the live list's agent, and clear 400s."""

from __future__ import annotations

import csv
import http.client
import io
import json
import urllib.parse

import pytest
from console_alone import FILLER_AGENTS, ConsoleAlone, start_console

pytestmark = pytest.mark.integration

FILLERS = 120


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> ConsoleAlone:
    running = start_console(tmp_path_factory.mktemp("console"), agent_call_too=True, more_calls=FILLERS)
    yield running
    running.stop()


def get(console: ConsoleAlone, path: str, **params) -> tuple[int, dict, bytes]:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=20)
    try:
        connection.request("GET", path + query, headers={"Authorization": f"Bearer {console.key}"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def listed(console: ConsoleAlone, **params) -> dict:
    status, _, body = get(console, "/api/calls", **params)
    assert status == 200, body
    return json.loads(body)


def test_the_list_pages_through_every_call_with_its_total(console):
    seen: list[str] = []
    page = listed(console, limit=50)
    assert page["total"] == FILLERS + 2 and len(page["calls"]) == 50 and page["next"]
    # the keys the list always had, and the new ones
    first = page["calls"][0]
    assert {"call_sid", "started_at", "ended_at", "duration_ms", "turns", "outcome", "agent", "control", "complete", "id"} <= set(first)
    assert {"carrier", "direction", "latency_p50_ms", "latency_max_ms", "bargeins", "error_count", "rejections",
            "outcome_text"} <= set(first)
    while True:
        seen += [call["call_sid"] for call in page["calls"]]
        if not page["next"]:
            break
        page = listed(console, limit=50, cursor=page["next"])
    assert len(seen) == len(set(seen)) == FILLERS + 2
    assert seen[:2] == [console.sid, console.agent_sid] and seen[2:] == [f"CAfill{n:05d}" for n in range(FILLERS)]
    assert set(listed(console)["agents"]) == {"", *FILLER_AGENTS} and "telnyx" in listed(console)["carriers"]


def test_search_and_filters(console):
    by_word = listed(console, q="whitening", limit=1000)
    assert by_word["total"] == len(by_word["calls"]) == 20  # one filler in six
    assert all("whitening" in call_text for call_text in (
        " ".join(line["text"] for line in json.loads(get(console, f"/api/calls/{c['call_sid']}")[2])["call"]["transcript"])
        for c in by_word["calls"][:3]))
    assert [c["call_sid"] for c in listed(console, q="CAfill0011")["calls"]] == [f"CAfill{n:05d}" for n in range(110, 120)]
    assert listed(console, q="cafill00011")["calls"][0]["call_sid"] == "CAfill00011"
    assert listed(console, q="kronor")["calls"][0]["call_sid"] == console.sid  # the demo call's answer
    front = listed(console, agent="front desk", carrier="telnyx", limit=1000)
    assert front["total"] and all((c["agent"], c["carrier"]) == ("front desk", "telnyx") for c in front["calls"])
    slow = listed(console, min_latency_ms=2500, limit=1000)
    assert slow["total"] and all(c["latency_max_ms"] >= 2500 for c in slow["calls"])
    errors = listed(console, errors=1, limit=1000)
    assert errors["total"] == len(range(0, FILLERS, 7)) and all(c["error_count"] > 0 for c in errors["calls"])
    assert listed(console, bargeins=1)["calls"][0]["call_sid"] == console.sid
    assert listed(console, direction="outbound")["total"] == 0
    transferred = listed(console, outcome="transfer", limit=1000)
    assert transferred["total"] == FILLERS // 4 and {c["outcome_text"] for c in transferred["calls"]} == {"Transferred to a person"}
    assert listed(console, q="nothing like this anywhere")["calls"] == []


@pytest.mark.parametrize("params, says", [
    ({"min_latency_ms": "fast"}, "min_latency_ms"), ({"min_latency_ms": "-5"}, "min_latency_ms"),
    ({"errors": "maybe"}, "errors"), ({"cursor": "forged"}, "cursor"), ({"q": "x" * 201}, "q"),
    ({"since": "nan"}, "since"), ({"limit": "5000"}, "limit")])
def test_a_bad_filter_is_a_400_that_says_which(console, params, says):
    status, _, body = get(console, "/api/calls", **params)
    assert status == 400 and says in json.loads(body)["error"]


def test_the_export_is_the_whole_filtered_list_as_csv_or_json(console):
    status, headers, body = get(console, "/api/export", format="csv", agent="after hours")
    assert status == 200 and headers["content-type"] == "text/csv; charset=utf-8"
    assert headers["content-disposition"].startswith('attachment; filename="calls-') and headers["content-disposition"].endswith('.csv"')
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    expected = listed(console, agent="after hours", limit=1000)
    assert [r["call_sid"] for r in rows] == [c["call_sid"] for c in expected["calls"]] and int(headers["x-voicecore-rows"]) == len(rows)
    assert headers["x-voicecore-truncated"] == "false" and {r["agent"] for r in rows} == {"after hours"}
    assert rows[0]["started_at"].endswith("+00:00") and rows[0]["outcome_text"]
    status, headers, body = get(console, "/api/export", format="json", q="whitening")
    calls = json.loads(body)["calls"]
    assert status == 200 and headers["content-type"] == "application/json" and len(calls) == 20
    status, _, body = get(console, "/api/export")  # CSV unless asked, everything
    assert status == 200 and body.decode().count("\r\n") == FILLERS + 3
    assert get(console, "/api/export", format="xlsx")[0] == 400


def test_a_calls_page_data_is_on_one_clock_with_the_keypress_that_confirmed_the_booking(console):
    status, _, body = get(console, f"/api/calls/{console.agent_sid}")
    detail = json.loads(body)
    call = detail["call"]
    assert status == 200 and detail["stored"] and {"turns", "transcript", "tool_calls", "verdicts", "errors"} <= set(call)
    lines = call["lines"]
    keypad = next(line for line in lines if line["kind"] == "keypad")
    assert keypad["text"] == "pressed 1: yes to book"
    booked = next(line for line in lines if line["text"].startswith("You are booked"))
    assert booked["at_ms"] > keypad["at_ms"]  # the booking is told after the consent that allowed it
    assert [line["at_ms"] for line in lines] == sorted(line["at_ms"] for line in lines)
    book, end_call = call["tool_calls"]
    assert (book["status"], book["tool_ms"], book["failed"]) == ("ran", 300, False) and book["consent_wait_ms"] > 1000
    assert (end_call["status"], end_call["status_text"]) == ("ended the call", "ended the call")
    (answer,) = call["answers"]
    assert answer["verdict"] == "approved" and len(answer["steps"]) == 3 and answer["citations"]
    assert all(turn["heard"]["total_ms"] == turn["heard_latency_ms"] for turn in call["turns"])
    assert call["latency"]["p50_ms"] <= call["latency"]["max_ms"] and call["outcome_text"] == "The agent said goodbye and hung up"
    assert call["summary"]["keypresses"] == 1 and call["summary"]["tools"] == {"ran": 1, "ended the call": 1}
    status, _, body = get(console, f"/api/calls/{console.agent_sid}/events", since=0)
    assert status == 200 and "dtmf" in {event["type"] for event in json.loads(body)}


def test_the_live_list_names_each_calls_agent(console):
    console.mark_live()
    status, _, body = get(console, "/api/live")
    (live,) = json.loads(body)["calls"]
    assert status == 200 and live["call_sid"] == console.sid and live["agent"] == ""
