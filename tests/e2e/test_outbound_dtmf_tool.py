"""The model's own keys, end to end: an agent with ``[outbound] dtmf_tool = true`` hands an IVR to the model
(``on_ivr = "model"``); the simulated menu asks again ("To speak with someone, press 1.") once the agent has
spoken, and the simulated model, scripted to call ``send_dtmf`` when it hears "press 1", does. On Telnyx the keys go
by its send_dtmf request (checked by the carrier simulator); on Twilio, whose keys go only in-band, as DTMF tones the
driver writes under a tag of its own (the recorded ``tones`` input), which the menu hears with its DTMF detector.
Either way the menu puts the call through. Checked: the RunTool action and its result in the record, the tones' tag
after the calling response's and before the next response's (one voice at a time), the menu's keys, and an
identical replay."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from voicecore.call.record import loads_partial
from voicecore.demo import record_paths
from voicecore.outbound import dtmf
from voicecore.outbound.outbound_demo import _outbound_demo
from voicecore.sim.model.config import SimTurn

from test_outbound_dtmf import outbound_agent

pytestmark = pytest.mark.integration

AGENT_OUTBOUND = '''
[outbound]
max_wait_ms = 12000
on_ivr = "model"
dtmf_tool = true
'''
PRESS = SimTurn(when="press 1", call="send_dtmf", arguments='{"digits": "1"}', then="Thank you.")


@pytest.fixture(scope="module")
def tool_calls(tmp_path_factory):
    """Both carriers' IVR calls at once on one stack, as the agent and the scripted model are the same for both:
    one stack's start, call and stop instead of two. Each carrier's report is its own (by_carrier), so its test
    fails alone."""
    tmp_path = tmp_path_factory.mktemp("dtmf-tool")
    records = tmp_path / "records"
    records.mkdir()
    with open(tmp_path / "stack.log", "wb") as log_file:
        config = outbound_agent(tmp_path, AGENT_OUTBOUND)
        report = asyncio.run(_outbound_demo(1, config, tmp_path, log_file, records, carriers=["telnyx", "twilio"],
                                            kinds=["ivr"], sim_turns=(PRESS,)))
    return report, records, tmp_path / "stack.log"


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
@pytest.mark.parametrize("carrier", ["telnyx", "twilio"])
def test_the_model_presses_the_menus_key_with_send_dtmf(tool_calls, carrier):
    run, records, stack_log = tool_calls
    report = run["by_carrier"][carrier]
    assert report["ok"], (report["problems"], stack_log.read_text(errors="replace")[-4000:])
    assert report["carrier"] == carrier
    [call] = report["calls_detail"]
    assert (call["verdict"], call["action"]) == ("ivr", "start")
    _header, entries, _complete = loads_partial(record_paths(records, [call["call_sid"]])[0].read_bytes())
    runs = [e["a"] for e in entries if e.get("k") == "out" and e["a"].get("type") == "RunTool"]
    assert [(r["name"], json.loads(r["arguments"])) for r in runs] == [("send_dtmf", {"digits": "1"})]
    [result] = [e for e in entries if e.get("k") == "tool"]
    notes = [(n["digits"], n["means"], n["ok"]) for n in entries if n.get("k") == "note" and n.get("what") == "dtmf"]
    means = {"telnyx": "rest", "twilio": "in_band"}[carrier]
    assert result["ok"] and json.loads(result["output"]) == {"ok": True, "digits": "1"}
    assert notes == [("1", means, True)]
    assert call["ivr_keys_heard"] == "1" and call["ivr_navigated"] and call["ivr_keys_by"] == means
    tones = [i for i, e in enumerate(entries) if e.get("k") == "tones"]
    if carrier == "twilio":
        # the tones' own tag, in order: after the response that called the tool, before the one after its result
        [at] = tones
        assert entries[at]["call_id"] == result["call_id"] and entries[at]["digits"] == "1"
        opened = [(i, e["a"]["tag"]) for i, e in enumerate(entries) if e.get("k") == "out" and e["a"]["type"] == "OpenTag"]
        run_at = next(i for i, e in enumerate(entries) if e.get("k") == "out" and e["a"].get("type") == "RunTool")
        result_at = entries.index(result)
        tone_tag = next(tag for i, tag in opened if i > at)
        before = [tag for i, tag in opened if i < run_at]
        after = [tag for i, tag in opened if i > result_at]
        assert before and max(before) < tone_tag and after and min(after) > tone_tag
        writes = [e["a"] for e in entries if e.get("k") == "out" and e["a"]["type"] == "WriteFrames" and e["a"]["tag"] == tone_tag]
        assert len(writes) == 1 and writes[0]["audio_len"] == dtmf.tone_ms("1") * 8
        assert not [e for e in entries if e.get("k") == "out" and e["a"]["type"] == "OpenGate" and e["a"]["tag"] == tone_tag]
    else:
        assert tones == []
    assert report["records_replayed_identical"] == 1
