"""A scripted voicemail message, end to end: a stack with the carrier and model simulators places a call that a
simulated voicemail answers (its greeting, a beep, then it records); the agent (``on_voicemail = "message"``) waits
for the beep as ``greet`` does, says its ``voicemail_message`` filled with the call's fields, as a scripted line the
validator checks word for word, and hangs up through the carrier's API. Checked: the action, the record's opening,
the gate's script, the agent's audio at the callee after the beep, the hang-up, and an identical replay."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from voicecore.call.record import loads_partial
from voicecore.demo import record_paths
from voicecore.outbound.outbound_demo import _outbound_demo

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_the_agent_leaves_its_message_after_the_beep_and_hangs_up(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    with open(tmp_path / "stack.log", "wb") as log_file:
        report = asyncio.run(_outbound_demo(1, None, tmp_path, log_file, records, kinds=["voicemail"],
                                            on_voicemail="message"))
    assert report["ok"], (report["problems"], (tmp_path / "stack.log").read_text(errors="replace")[-4000:])
    [call] = report["calls_detail"]
    assert (call["callee"], call["verdict"], call["action"]) == ("voicemail", "voicemail", "message")
    assert call["action_worked"] and call["closed_by"] == "rest_hangup" and call["agent_frames"] > 100
    assert report["records_replayed_identical"] == 1
    _header, entries, _complete = loads_partial(record_paths(records, [call["call_sid"]])[0].read_bytes())
    answer = next(e for e in entries if e.get("k") == "note" and e.get("what") == "answer")
    assert answer["beep_at_ms"] is not None and answer["action_ms"] > answer["beep_at_ms"]
    assert [e.get("opening") for e in entries if e.get("k") == "start"] == ["voicemail_message"]
    gates = [e["a"] for e in entries if e.get("k") == "out" and e["a"].get("type") == "OpenGate"]
    assert gates[0]["policy"] == "scripted"
    assert gates[0]["script"] == "Hi Callee0, this is Maria from Acme Dental about your appointment. Please call us back. Thank you."
    assert any(e["a"].get("type") == "HangUp" for e in entries if e.get("k") == "out")
