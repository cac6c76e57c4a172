"""The carrier's AMD and the agent's actions on who answered, end to end: a stack with the carrier and model
simulators places four calls (a person, a voicemail, a screening assistant, an IVR) with Twilio's asynchronous
AMD (``MachineDetection=Enable``); the simulated carrier sends its signed AnsweredBy to the node, wrong on
purpose for some callees (the person among them: Twilio's ``machine_start`` on a short hello). The agent
introduces itself to a screening assistant (its greeting, filled with the call's fields), which puts the call
through, and hangs up on an IVR. Checked: every AMD callback accepted, the person's verdict a person's despite
the carrier, nobody hung up on, the person put through, the IVR hung up on, and each answer note's carrier fields."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from voicecore.agent.load import default_agent_dir
from voicecore.call.record import loads_partial
from voicecore.demo import record_paths
from voicecore.outbound.outbound_demo import _outbound_demo

pytestmark = pytest.mark.integration

# Long enough for the screening assistant's and the IVR's telling sentences (the simulated ones say them late).
AGENT_OUTBOUND = '''
[outbound]
max_wait_ms = 12000
on_screening = "introduce"
on_ivr = "hang_up"
'''
INTRODUCTION = 'greeting = "Hi, this is Maria from Acme Dental, calling {first_name} about {reason}."'


def _outbound_agent(tmp_path):
    agent = tmp_path / "agent"
    shutil.copytree(default_agent_dir(), agent)
    toml = (agent / "agent.toml").read_text()
    lines = [INTRODUCTION if line.startswith("greeting = ") else line for line in toml.splitlines()]
    (agent / "agent.toml").write_text("\n".join(lines) + "\n" + AGENT_OUTBOUND)
    config = tmp_path / "voicecore.toml"
    config.write_text(f'agent = "{agent}"\n')
    return str(config)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_the_carriers_amd_joins_the_verdict_and_each_class_gets_its_action(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    config = _outbound_agent(tmp_path)
    with open(tmp_path / "stack.log", "wb") as log_file:
        report = asyncio.run(_outbound_demo(4, config, tmp_path, log_file, records, machine_detection="Enable"))
    assert report["ok"], (report["problems"], (tmp_path / "stack.log").read_text(errors="replace")[-4000:])
    calls = {call["callee"]: call for call in report["calls_detail"]}
    assert set(calls) == {"human", "voicemail", "screening", "ivr"}
    amd = report["carrier_amd"]
    assert amd["machine_detection"] == "Enable" and amd["sent"] >= 2 and amd["accepted"] == amd["sent"]

    person = calls["human"]
    # the simulated AMD took this person's short hello for a machine (labelled): the detector's cadence overrules it
    assert (person["carrier_amd"], person["carrier_amd_right"]) == ("machine_start", False)
    assert person["verdict"] == "human" and person["action"] == "start" and person["closed_by"] != "rest_hangup"
    assert person["action_worked"] and report["humans_hung_up"] == 0

    screening = calls["screening"]
    assert screening["verdict"] == "screening" and screening["action"] == "introduce"
    assert screening["action_worked"] and screening["put_through_ms"] is not None and screening["closed_by"] != "rest_hangup"
    assert report["answer_actions"]["screening"] == {"actions": {"introduce": 1}, "worked": 1, "n": 1}
    ivr = calls["ivr"]
    assert ivr["verdict"] == "ivr" and ivr["action"] == "hang_up" and ivr["closed_by"] == "rest_hangup"
    assert ivr["action_worked"]

    # the record keeps what the carrier said, beside the verdict it came before (answer note) or after (its own note)
    for call in calls.values():
        _header, entries, _complete = loads_partial(record_paths(records, [call["call_sid"]])[0].read_bytes())
        answer = next(e for e in entries if e.get("k") == "note" and e.get("what") == "answer")
        late = [e for e in entries if e.get("k") == "note" and e.get("what") == "carrier_amd"]
        assert "carrier_amd" in answer and "carrier_amd_ms" in answer
        if call.get("carrier_amd_status") == 204:
            assert answer["carrier_amd"] == call["carrier_amd"] or [e["answered_by"] for e in late] == [call["carrier_amd"]]
