"""A campaign started through the console's API (``POST /api/campaigns``) end to end: a stack with the carrier and
model simulators (bench/campaign_stack.py), eight callees at concurrency 3 (persons, an opt-out, busy, a voicemail,
no answer, failed, and a number on the do-not-call list) run by the console with `voicecore campaign run`'s engine,
followed through ``GET /api/campaigns/{id}`` to its end. The carrier's log of placed calls is checked against the
store. With Plivo too: its calls are followed by the Make Call's request_uuid while their records go by the
CallUUID, so the voicemail and the opt-out reach the campaign only through the link the gateway keeps."""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil

import pytest

from bench.campaign_stack import (EXPECTED, FROM_NUMBERS, RETRY_AFTER_S, campaign_stack, check,
                                  do_not_call_numbers)
from voicecore.store import CallStore, database_url_for

pytestmark = pytest.mark.integration


def call_console(listen: str, key: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    host, _, port = listen.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                           headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


async def console_campaign(tmp_path, carrier: str) -> dict:
    async with campaign_stack(8, 3, tmp_path, carrier=carrier) as up:
        with CallStore.open(database_url_for(up.config)) as store:
            key = store.add_api_key("campaigns")
        listen = up.config.console_listen
        listed = do_not_call_numbers(up.rows, 1)
        body = {"rows": [{"number": n, "first_name": f"Callee {i}", "timezone": "Europe/Stockholm"}
                         for i, (n, _) in enumerate(up.rows)],
                "from": list(FROM_NUMBERS), "concurrency": 3, "max_attempts": 2, "days": "mon-sun",
                "window_start": "00:00", "window_end": "23:59", "do_not_call": listed, "carrier": carrier,
                "name": f"e2e-{carrier}",
                "retry_after": {o: RETRY_AFTER_S for o in ("busy", "no-answer", "failed", "voicemail", "interrupted")}}
        status, started = await asyncio.to_thread(call_console, listen, key, "POST", "/api/campaigns", body)
        assert status == 202, started
        seen_in_the_air = 0
        detail: dict = {}
        for _ in range(1200):  # up to 5 minutes
            detail = (await asyncio.to_thread(call_console, listen, key, "GET", f"/api/campaigns/{started['id']}"))[1]
            seen_in_the_air = max(seen_in_the_air, detail.get("in_progress", 0))
            if detail.get("state") in ("finished", "stopped"):
                break
            await asyncio.sleep(0.25)
        listing = (await asyncio.to_thread(call_console, listen, key, "GET", "/api/campaigns"))[1]
    report = check(up.record_dir / "calls.db", up.rows, up.rest, set(listed), 2)
    report.update(detail=detail, seen_in_the_air=seen_in_the_air, listing=listing, started=started,
                  stack_log=(tmp_path / "stack.log").read_text(errors="replace")[-4000:])
    return report


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
@pytest.mark.parametrize("carrier", ["twilio", "plivo"])
def test_a_campaign_started_through_the_console_runs_to_its_end_with_its_outcomes(tmp_path, carrier):
    report = asyncio.run(console_campaign(tmp_path, carrier))
    detail = report["detail"]
    assert detail["state"] == "finished" and detail["finished"], (detail, report["stack_log"])
    assert (detail["numbers"], detail["dialled"], detail["in_progress"], detail["done"]) == (8, 7, 0, 8)
    assert 1 <= report["seen_in_the_air"] <= 3  # the progress showed calls in the air, never above the concurrency
    # every number dialled once per attempt, none on the do-not-call list, every dial recorded first
    assert (report["dialed_twice"], report["dnc_dialed"], report["unrecorded_dials"]) == (0, 0, 0)
    assert report["mismatched_outcomes"] == [] and report["early_retries"] == 0
    per_kind = {kind: {int(k): v for k, v in counts.items()} for kind, counts in report["attempts_per_kind"].items()}
    assert per_kind["opt-out"] == {1: 1} and per_kind["busy"] == {2: 1}
    # the answered calls' verdicts and the opt-out reached the campaign (Plivo: through the CallUUID link)
    assert report["voicemail_outcomes"] == {"voicemail": 2} and per_kind["voicemail"] == {2: 1}
    assert detail["outcomes"]["opted-out"] == 1 and detail["outcomes"]["do-not-call"] == 1
    assert detail["outcomes"]["completed"] == 2 and set(EXPECTED.values()) >= set(detail["attempt_outcomes"])
    assert report["opted_out_on_list"] == report["opt_out_callees"] == 1
    assert report["status_callbacks_refused"] == 0
    answered = [a for a in detail["recent_attempts"] if a["outcome"] in ("completed", "opted-out", "voicemail")]
    assert answered and all((a["record_call_sid"] != a["call_sid"]) == (carrier == "plivo") for a in answered)
    assert [(c["name"], c["state"]) for c in report["listing"]["campaigns"]] == [(f"e2e-{carrier}", "finished")]
