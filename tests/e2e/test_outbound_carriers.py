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

from voicecore.call.record import loads_partial
from voicecore.demo import record_paths
from voicecore.outbound.outbound_demo import _outbound_demo
from voicecore.store import CallStore, database_url_for

pytestmark = pytest.mark.integration


# what the simulated carrier sent, each answered 204 by the node: Plivo's ring_url and hangup_url; TeXML's events
STATUSES = {"plivo": ["ringing", "completed"], "telnyx": ["initiated", "ringing", "in-progress", "completed"],
            "vonage": ["initiated", "ringing", "in-progress", "completed"]}  # Vonage's started, ringing, answered, ...
DIRECTION = {"plivo": "outbound", "telnyx": "outbound-api", "vonage": "outbound"}


def outbound_run(tmp_path_factory, name: str, carriers: list[str], calls: int, **options):
    """One stack for the carriers' calls, all placed at once, as the configuration is the same for them: one
    stack's start, calls and stop instead of one per carrier. Each carrier's report is its own (by_carrier), so
    its test fails alone."""
    tmp_path = tmp_path_factory.mktemp(name)
    records = tmp_path / "records"
    records.mkdir()
    with open(tmp_path / "stack.log", "wb") as log_file:
        report = asyncio.run(_outbound_demo(calls, None, tmp_path, log_file, records, carriers=carriers, **options))
    return report, records, tmp_path / "stack.log"


@pytest.fixture(scope="module")
def placed_calls(tmp_path_factory):
    return outbound_run(tmp_path_factory, "placed", list(STATUSES), 2)


@pytest.fixture(scope="module")
def amd_calls(tmp_path_factory):
    # the other test's agent hangs up on a voicemail, this one greets it: a stack of their own
    return outbound_run(tmp_path_factory, "amd", ["plivo", "vonage"], 3, machine_detection="Enable",
                        kinds=["human", "voicemail", "voicemail"], on_voicemail="greet")


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
@pytest.mark.parametrize("carrier", ["plivo", "telnyx", "vonage"])
def test_a_placed_call_is_answered_the_agent_speaks_and_its_statuses_reach_the_store(placed_calls, carrier):
    run, records, stack_log = placed_calls
    report = run["by_carrier"][carrier]
    assert report["ok"], (report["problems"], stack_log.read_text(errors="replace")[-4000:])
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


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
@pytest.mark.parametrize("carrier", ["plivo", "vonage"])
def test_the_carriers_own_amd_is_asked_for_verified_mapped_and_joins_the_verdict(amd_calls, carrier):
    """Plivo's machine detection (Machine=true/false to machine_detection_url) and Vonage's advanced machine detection
    (human / machine, then machine + beep_start, to the event URL), asked for by --machine-detection: each result
    signed as the carrier's other callbacks, accepted by the node, mapped to the detector's vocabulary, weighed by
    the answer gate (or noted after its verdict) and kept on the call's status row. Three callees: a person and a
    voicemail the simulated AMD gets wrong on purpose (labelled), and a voicemail it gets right; the agent greets a
    voicemail after its beep (on_voicemail greet), so Vonage's beep_start comes while the call is up."""
    run, records, stack_log = amd_calls
    report = run["by_carrier"][carrier]
    assert report["ok"], (report["problems"], stack_log.read_text(errors="replace")[-4000:])
    assert report["carrier"] == carrier
    amd = report["carrier_amd"]
    assert amd["sent"] == 3 and amd["accepted"] == 3, amd
    rows = report["calls_detail"]
    person = next(call for call in rows if call["callee"] == "human")
    # the simulated AMD took this person's short hello for a machine: the detector's cadence overrules it
    assert (person["carrier_amd"], person["carrier_amd_right"]) == ("machine_start", False)
    assert person["verdict"] == "human" and person["action"] == "start" and report["humans_hung_up"] == 0
    # ... and this voicemail for a person: the carrier's human over a long greeting names nobody (the agent starts)
    fooled = next(call for call in rows if call["callee"] == "voicemail" and not call["carrier_amd_right"])
    assert fooled["carrier_amd"] == "human" and fooled["verdict"] in ("unknown", "voicemail")
    machine = next(call for call in rows if call["callee"] == "voicemail" and call["carrier_amd_right"])
    assert machine["carrier_amd"] == "machine_start" and machine["verdict"] == "voicemail"
    assert machine["action"] == "start" and machine["action_worked"]  # greet: the agent starts after the beep
    if carrier == "vonage":  # its beep_start, after the machine, as machine_end_beep
        assert machine["carrier_amd_beep"] == "machine_end_beep"
    store = CallStore.open(database_url_for(types.SimpleNamespace(database_url="", record_dir=str(records))))
    try:
        for call in rows:
            said = call.get("carrier_amd_beep") or call["carrier_amd"]  # Vonage's beep_start comes last
            assert store.call_status(call["call_sid"])["answered_by"] == said, call
    finally:
        store.close()
    for call in rows:  # the record keeps what the carrier said, in the verdict's note or a late one
        path = record_paths(records, [call.get("call_uuid", call["call_sid"])])[0]
        _header, entries, _complete = loads_partial(path.read_bytes())
        answer = next(e for e in entries if e.get("k") == "note" and e.get("what") == "answer")
        late = [e["answered_by"] for e in entries if e.get("k") == "note" and e.get("what") == "carrier_amd"]
        assert answer.get("carrier_amd") == call["carrier_amd"] or late[:1] == [call["carrier_amd"]], (answer, late)
