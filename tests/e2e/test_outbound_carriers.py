"""Outbound calls placed through Plivo's Make Call, Telnyx's TeXML Calls API and Vonage's Create Call, end to end: a stack with the
carrier and model simulators, two calls (a person and a voicemail) placed by voicecore/outbound/dial.py against
the simulated carrier API, which rings, sends its status callbacks signed as the carrier signs them
(X-Plivo-Signature-V3; Ed25519; the signed-webhook JWT), and on answer POSTs the node's answer URL and opens the stream the answer
names. Checked: each call answered, the agent heard on the person's call, the voicemail hung up through the
carrier's API, and the final status of each call in the node's call store."""

from __future__ import annotations

import asyncio
import shutil
import types

import pytest

from voicecore.outbound.outbound_demo import _outbound_demo
from voicecore.store import CallStore, database_url_for

pytestmark = pytest.mark.integration


# what the simulated carrier sent, each answered 204 by the node: Plivo's ring_url and hangup_url; TeXML's events
STATUSES = {"plivo": ["ringing", "completed"], "telnyx": ["initiated", "ringing", "in-progress", "completed"],
            "vonage": ["initiated", "ringing", "in-progress", "completed"]}  # Vonage's started, ringing, answered, ...
DIRECTION = {"plivo": "outbound", "telnyx": "outbound-api", "vonage": "outbound"}


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
@pytest.mark.parametrize("carrier", ["plivo", "telnyx", "vonage"])
def test_a_placed_call_is_answered_the_agent_speaks_and_its_statuses_reach_the_store(tmp_path, carrier):
    records = tmp_path / "records"
    records.mkdir()
    with open(tmp_path / "stack.log", "wb") as log_file:
        report = asyncio.run(_outbound_demo(2, None, tmp_path, log_file, records, carrier=carrier))
    assert report["ok"], (report["problems"], (tmp_path / "stack.log").read_text(errors="replace")[-4000:])
    assert report["carrier"] == carrier
    calls = {call["callee"]: call for call in report["calls_detail"]}
    assert set(calls) == {"human", "voicemail"}
    for call in calls.values():
        assert call["statuses"] == STATUSES[carrier]
        if carrier == "plivo":  # the record goes by the CallUUID, the status by the request's id
            assert call["call_uuid"] != call["call_sid"]
    person = calls["human"]
    assert person["verdict"] == "human" and person["action"] == "start" and person["agent_frames"] > 0
    assert calls["voicemail"]["verdict"] == "voicemail" and calls["voicemail"]["closed_by"] == "rest_hangup"
    assert report["status_callbacks_accepted"] == report["status_callbacks_sent"] == 2 * len(STATUSES[carrier])
    store = CallStore.open(database_url_for(types.SimpleNamespace(database_url="", record_dir=str(records))))
    try:
        for call in calls.values():
            row = store.call_status(call["call_sid"])
            assert row is not None and row["status"] == "completed" and row["direction"] == DIRECTION[carrier]
    finally:
        store.close()
