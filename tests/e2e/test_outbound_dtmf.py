"""Keys pressed on an IVR, end to end: a stack with the carrier and model simulators places a call that a simulated
IVR menu answers ("... press 1 ..."); the agent (``on_ivr = "dtmf"``, ``ivr_digits = "1"``) presses its key once the
verdict is ``ivr``, by the carrier's own means: Twilio's as in-band tones on the stream (the menu hears them with
the DTMF detector), Telnyx's, Plivo's and Vonage's by their send-DTMF REST request, which the carrier simulator
checks (path, body, the carrier's auth) and hands to the menu. Checked: the menu heard the key by the expected
means and put the call through to the person ("connecting you"), the agent's audio reached the callee after it, the
record's ``dtmf`` note, and the record replays identically."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from voicecore.agent.load import default_agent_dir
from voicecore.call.record import loads_partial
from voicecore.demo import record_paths
from voicecore.outbound.outbound_demo import _outbound_demo

pytestmark = pytest.mark.integration

AGENT_OUTBOUND = '''
[outbound]
max_wait_ms = 12000
on_ivr = "dtmf"
ivr_digits = "1"
'''
MEANS = {"twilio": "in_band", "telnyx": "rest", "plivo": "rest", "vonage": "rest"}


def outbound_agent(tmp_path, toml: str = AGENT_OUTBOUND) -> str:
    """A voicecore.toml naming a copy of the default agent with ``toml`` (its [outbound]) appended."""
    agent = tmp_path / "agent"
    shutil.copytree(default_agent_dir(), agent)
    (agent / "agent.toml").write_text((agent / "agent.toml").read_text() + toml)
    config = tmp_path / "voicecore.toml"
    config.write_text(f'agent = "{agent}"\n')
    return str(config)


@pytest.fixture(scope="module")
def ivr_calls(tmp_path_factory):
    """Every carrier's IVR call at once on one stack, as the agent is the same for all: one stack's start, call
    and stop instead of four. Each carrier's report is its own (by_carrier), so its test fails alone."""
    tmp_path = tmp_path_factory.mktemp("ivr")
    records = tmp_path / "records"
    records.mkdir()
    with open(tmp_path / "stack.log", "wb") as log_file:
        report = asyncio.run(_outbound_demo(1, outbound_agent(tmp_path), tmp_path, log_file, records,
                                            carriers=list(MEANS), kinds=["ivr"]))
    return report, records, tmp_path / "stack.log"


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
@pytest.mark.parametrize("carrier", ["twilio", "telnyx", "plivo", "vonage"])
def test_the_agent_presses_the_ivrs_key_and_reaches_the_person(ivr_calls, carrier):
    run, records, stack_log = ivr_calls
    report = run["by_carrier"][carrier]
    assert report["ok"], (report["problems"], stack_log.read_text(errors="replace")[-4000:])
    assert report["carrier"] == carrier
    [call] = report["calls_detail"]
    assert (call["callee"], call["verdict"], call["action"]) == ("ivr", "ivr", "dtmf")
    assert call["ivr_keys_heard"] == "1" and call["ivr_navigated"] and call["ivr_keys_by"] == MEANS[carrier]
    assert call["action_worked"] and call["agent_frames"] > 0 and call["closed_by"] != "rest_hangup"
    assert report["ivr_navigated"] == 1
    assert report["ivr_navigation"]["by"][MEANS[carrier]] == 1 and report["records_replayed_identical"] == 1
    _header, entries, _complete = loads_partial(record_paths(records, [call.get("call_uuid", call["call_sid"])])[0]
                                                .read_bytes())
    notes = [e for e in entries if e.get("k") == "note" and e.get("what") == "dtmf"]
    assert [(n["digits"], n["means"], n["ok"]) for n in notes] == [("1", MEANS[carrier], True)]
    # the agent's first response comes after the tones' own tag (in-band) or after the request was taken (REST)
    answer = next(e for e in entries if e.get("k") == "note" and e.get("what") == "answer")
    assert answer["action"] == "dtmf" and json.dumps(answer)
