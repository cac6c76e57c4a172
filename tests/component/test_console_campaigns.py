"""The console's campaigns API over real sockets on 127.0.0.1: the console worker as a process over a real SQLite
store (tests/console_alone.py) and the carrier simulator's Calls API (real HTTP) in a thread. No gateway runs, so
the carrier's status callbacks reach nobody: a placed call ends ``failed`` once its ``call_timeout`` passes with
no final status, which is what lets these tests see calls in the air, a stop, and a console restart. Outcomes from
status callbacks and answer verdicts are tests/e2e/test_campaign_console.py's (a whole stack)."""

from __future__ import annotations

import asyncio
import http.client
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from console_alone import ConsoleAlone, start_console
from waiting import wait_until

from voicecore.sim.carrier import generate_credentials
from voicecore.sim.carrier_rest import CarrierRestServer

pytestmark = pytest.mark.integration

ACCOUNT = "AC" + "0123456789abcdef" * 2
FROM = "+46812345600"
WINDOW = {"days": "mon-sun", "window_start": "00:00", "window_end": "23:59"}


class Carrier:
    """The carrier simulator's REST API on its own loop in a thread; ``seen()``: the calls it was asked to place."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.stop_flag = threading.Event()
        self.base_url = ""
        self.server: CarrierRestServer | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    async def _serve(self) -> None:
        async with CarrierRestServer(generate_credentials("tok")) as rest:
            rest.ring_ms = 40
            rest.callees.update({f"+467010{i:05d}": "no-answer" for i in range(10)})  # rings, answers never
            self.server = rest
            self.base_url = rest.base_url
            self.ready.set()
            while not self.stop_flag.is_set():
                await asyncio.sleep(0.02)

    def seen(self) -> list[str]:
        assert self.server is not None
        return [seen.placed.to for seen in list(self.server.outbound)]

    def close(self) -> None:
        self.stop_flag.set()
        self.thread.join(10)


@pytest.fixture
def carrier():
    running = Carrier()
    yield running
    running.close()


def console_for(tmp_path: Path, carrier: Carrier) -> ConsoleAlone:
    """The console with an agent whose instructions use {first_name}: every row must give one."""
    agent = tmp_path / "agent"
    if not agent.exists():
        agent.mkdir()
        (agent / "agent.toml").write_text('name = "caller"\ninstructions = "Call {first_name} about the appointment."\n')
    return start_console(tmp_path / "console", VOICECORE_TWILIO_API_BASE=carrier.base_url,
                         VOICECORE_TWILIO_ACCOUNT_SID=ACCOUNT, VOICECORE_TWILIO_AUTH_TOKEN="tok",
                         VOICECORE_PUBLIC_URL="http://127.0.0.1:9", VOICECORE_NODE_ID="node-a",
                         VOICECORE_AGENT=str(agent))


def request(console: ConsoleAlone, method: str, path: str, body: bytes | None = None, key: str | None = "",
            content_type: str = "application/json", **headers: str) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=20)
    sent = {"Content-Type": content_type, **headers}
    if key is not None:
        sent["Authorization"] = f"Bearer {key or console.key}"
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        connection.close()


def post(console: ConsoleAlone, body: dict, **kwargs) -> tuple[int, dict]:
    return request(console, "POST", "/api/campaigns", json.dumps(body).encode(), **kwargs)


def stored_attempts(tmp_path: Path) -> list[tuple]:
    db = sqlite3.connect(tmp_path / "console" / "records" / "calls.db")
    try:
        return db.execute("SELECT row_no, attempt, state, outcome, call_sid FROM campaign_attempts ORDER BY row_no, "
                          "attempt").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def rows(count: int) -> list[dict[str, str]]:
    return [{"number": f"+467010{i:05d}", "first_name": f"Callee {i}", "timezone": "Europe/Stockholm"} for i in range(count)]


def test_the_api_needs_a_key_refuses_a_bad_file_with_every_problem_and_dials_nothing(tmp_path, carrier):
    console = console_for(tmp_path, carrier)
    try:
        good = {"rows": rows(2), "from": [FROM], **WINDOW}
        assert post(console, good, key=None)[0] == 401
        assert post(console, good, key="not-a-key")[0] == 401
        assert request(console, "GET", "/api/campaigns", key=None)[0] == 401
        # a browser page of another origin cannot start one with the operator's session
        assert post(console, good, Origin="http://evil.example")[0] == 403
        # a file with problems: every one listed, nothing stored, nothing dialled
        csv = ("number,first_name\n+46701234567,Ann\nhello,Bo\n+46701234567,Cy\n,Di\n").encode()
        status, answer = request(console, "POST", "/api/campaigns?from=%2B46812345600&name=bad&days=mon-sun",
                                 csv, content_type="text/csv")
        assert status == 400 and "nothing was dialled" in answer["error"]
        assert [(p["row"], p["code"]) for p in answer["problems"]] == [(3, "bad-number"), (4, "duplicate-number"),
                                                                        (5, "no-number")]
        assert all(p["file"] == "bad.csv" for p in answer["problems"])
        status, answer = post(console, {"rows": [{"number": "+46701234567"}], "from": [FROM], "do_not_call": ["nope"]})
        assert status == 400 and {p["code"] for p in answer["problems"]} == {"missing-column", "bad-number"}
        # options the command would refuse, and bodies that are no campaign
        for body, says in [({"rows": rows(1)}, "from"), ({"rows": rows(1), "from": [FROM], "concurrency": 0}, "concurrency"),
                           ({"rows": rows(1), "from": [FROM], "window_start": "21:00", "window_end": "08:00"}, "21:00"),
                           ({"rows": rows(1), "from": [FROM], "retry_after": {"fax": 3}}, "fax"),
                           ({"rows": rows(1), "from": [FROM], "carrier": "bandwidth"}, "carrier"),
                           ({"rows": rows(1), "from": [FROM], "colour": "red"}, "colour"),
                           ({"rows": "x", "from": [FROM]}, "rows"), ({"from": [FROM]}, "csv"),
                           ({"rows": rows(1), "from": [FROM], "agent": "/etc"}, "agent")]:
            status, answer = post(console, body)
            assert status == 400 and says in answer["error"], (body, answer)
        assert request(console, "POST", "/api/campaigns", b"{not json")[0] == 400
        status, answer = post(console, {"rows": rows(1), "from": [FROM], "carrier": "plivo"})
        assert status == 503 and "plivo" in answer["error"]
        assert request(console, "GET", "/api/campaigns/99")[0] == 404
        assert request(console, "POST", "/api/campaigns/99/stop")[0] == 404
        assert request(console, "GET", "/api/campaigns/99/stop")[0] == 405
        assert request(console, "GET", "/api/campaigns/x")[0] == 404
        assert request(console, "GET", "/api/campaigns")[1] == {"campaigns": []}
        # the console still serves everything else
        assert request(console, "GET", f"/api/calls/{console.sid}")[0] == 200
    finally:
        console.stop()
    assert stored_attempts(tmp_path) == [] and carrier.seen() == []


def test_a_campaign_runs_in_the_console_shows_its_progress_and_stops(tmp_path, carrier):
    console = console_for(tmp_path, carrier)
    try:
        status, started = post(console, {"rows": rows(4), "from": [FROM], "concurrency": 1, "max_attempts": 1,
                                         "call_timeout": 10, "name": "spring", **WINDOW})
        assert status == 202 and started["name"] == "spring" and started["numbers"] == 4 and not started["resumed"]
        campaign = f"/api/campaigns/{started['id']}"

        def in_the_air() -> dict | None:
            # a dial is recorded before it is placed: the call's id comes with the carrier's answer, moments later
            detail = request(console, "GET", campaign)[1]
            placed = detail["in_progress"] == 1 and detail["recent_attempts"][0]["call_sid"]
            return detail if placed else None
        detail = wait_until(in_the_air, 10, "the first call in the air", interval_s=0.1, detail=console.log)
        assert (detail["state"], detail["numbers"], detail["dialled"], detail["done"]) == ("running", 4, 1, 0)
        assert detail["recent_attempts"][0]["state"] == "dialing" and detail["recent_attempts"][0]["call_sid"]
        # the same campaign again while it runs: refused, nothing else dialled
        assert post(console, {"rows": rows(4), "from": [FROM], "name": "spring", **WINDOW})[0] == 409
        status, stopping = request(console, "POST", f"{campaign}/stop")
        assert status == 202 and stopping["state"] == "stopping"
        # the call in the air ends (no status came: failed at its call_timeout); nobody else is dialled
        stopped = wait_until(lambda: (d := request(console, "GET", campaign)[1])["state"] == "stopped" and d,
                             20, "the campaign to stop", interval_s=0.2, detail=console.log)
        assert (stopped["dialled"], stopped["in_progress"], stopped["attempt_outcomes"]) == (1, 0, {"failed": 1})
        assert not stopped["finished"] and stopped["outcomes"] == {"failed": 1}
        listed = request(console, "GET", "/api/campaigns")[1]["campaigns"]
        assert [(c["name"], c["state"], c["numbers"], c["dialled"]) for c in listed] == [("spring", "stopped", 4, 1)]
        assert request(console, "POST", f"{campaign}/stop")[1]["state"] == "stopped"
    finally:
        console.stop()
    assert carrier.seen() == ["+46701000000"]
    assert [a[2:4] for a in stored_attempts(tmp_path)] == [("ended", "failed")]


def test_a_restarted_console_resumes_its_campaign_without_dialling_an_attempt_twice(tmp_path, carrier):
    console = console_for(tmp_path, carrier)
    try:
        status, started = post(console, {"rows": rows(3), "from": [FROM], "concurrency": 2, "max_attempts": 1,
                                         "call_timeout": 10, "name": "resumed", **WINDOW})
        assert status == 202
        wait_until(lambda: len([a for a in stored_attempts(tmp_path) if a[4]]) == 2, 10,
                   "two calls placed", interval_s=0.1, detail=console.log)
    finally:
        console.stop()  # the calls in the air stay 'dialing', with their call ids, and the campaign 'running'
    assert [a[2] for a in stored_attempts(tmp_path)] == ["dialing", "dialing"]
    console = console_for(tmp_path, carrier)
    try:
        campaign = f"/api/campaigns/{started['id']}"
        done = wait_until(lambda: (d := request(console, "GET", campaign)[1])["finished"] and d, 40,
                          "the resumed campaign to finish", interval_s=0.3, detail=console.log)
        assert done["state"] == "finished" and done["outcomes"] == {"failed": 3} and done["attempts"] == 3
        assert "resumed" in console.log()
    finally:
        console.stop()
    # each callee dialled once: the two calls in the air were followed, not placed again
    assert sorted(carrier.seen()) == ["+46701000000", "+46701000001", "+46701000002"]
    assert len(stored_attempts(tmp_path)) == 3


def test_the_campaign_pages_are_served_and_print_only_text(tmp_path, carrier):
    console = console_for(tmp_path, carrier)
    try:
        for page in ("/campaigns", "/campaigns/1"):
            connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=20)
            connection.request("GET", page)
            response = connection.getresponse()
            body = response.read().decode()
            connection.close()
            assert response.status == 200 and "<script type=\"module\" src=\"/static/campaign" in body
            assert "default-src 'self'" in response.getheader("Content-Security-Policy")
        for script in ("campaigns.js", "campaign.js"):
            text = (Path(__file__).resolve().parents[2] / "voicecore" / "console" / "static" / script).read_text()
            assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "el(" in text
    finally:
        console.stop()


def test_a_campaign_posted_as_csv_takes_its_options_from_the_query(tmp_path, carrier):
    console = console_for(tmp_path, carrier)
    try:
        csv = "number,first_name\n+46701000007,Ann\n".encode()
        status, started = request(console, "POST", "/api/campaigns?from=%2B46812345600&name=csv-one&days=mon-sun&"
                                  "window_start=00:00&window_end=23:59&max_attempts=1&call_timeout=10&region=SE",
                                  csv, content_type="text/csv")
        assert status == 202 and started["numbers"] == 1
        detail = request(console, "GET", f"/api/campaigns/{started['id']}")[1]
        assert detail["settings"]["from_numbers"] == [FROM] and detail["settings"]["max_attempts"] == 1
        assert detail["carrier"] == "twilio" and detail["runner"] == "node-a"
        wait_until(lambda: carrier.seen() == ["+46701000007"], 10, "the dial", interval_s=0.1, detail=console.log)
        time.sleep(0.2)
    finally:
        console.stop()
