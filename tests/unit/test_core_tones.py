"""In-band keys mid-call (ModelCallCore.play_tones): the model's ``send_dtmf`` on a carrier that takes keys
only as tones on the stream. The tones are agent audio under a tag of the core's own, written after every frame of
the response that called the tool, before the next response's, ungated, and cut by a barge-in like any response."""

from __future__ import annotations

import base64
import json

import pytest

from voicecore import g711, timing
from voicecore.call import controller as C
from voicecore.call import core
from voicecore.call.record import CallRecorder, loads
from voicecore.call.spine import SpineDriver
from voicecore.outbound import dtmf
from voicecore.realtime import events as rt
from voicecore.replay import replay

MS = 1_000_000
IDLE = core.Playout(0, 0, 0, 0, 0, 0)


def start_response(c, rid):
    [opened] = [a for a in c.on_event(rt.ResponseCreated(rid), 0, IDLE) if isinstance(a, core.OpenTag)]
    return opened.tag


def delta(rid, n=320):
    return rt.AudioDelta(response_id=rid, item_id="item_" + rid, audio=b"\x01" * n)


def tone_actions(actions):
    return [a for a in actions if isinstance(a, (core.OpenTag, core.WriteFrames, core.EndTag, core.OpenGate))]


def test_tones_with_no_response_producing_audio_are_written_at_once_under_the_next_tag_ungated():
    c = core.ModelCallCore("CA1", first_tag=7, gate_policy="strict")  # a gated call: tones are never judged
    audio = dtmf.tone_audio("1w2")
    frames = len(audio) // timing.FRAME_BYTES
    assert c.play_tones("call_1", "1w2") == [core.OpenTag(7, False), core.WriteFrames(7, 0, audio), core.EndTag(7, frames)]
    tones = c.tones_state("call_1")
    assert (tones.tag, tones.frames, tones.cancelled) == (7, frames, False)
    assert start_response(c, "r1") == 8  # the next response's tag comes after the tones'
    assert c.play_tones("call_1", "1w2") == []  # asked once per tool call
    assert c.stats.tones == 1


def test_tones_asked_while_the_calling_response_produces_audio_wait_for_all_of_its_frames():
    c = core.ModelCallCore("CA1", first_tag=3)
    tag = start_response(c, "r1")
    c.on_event(delta("r1"), 0, IDLE)
    assert c.play_tones("call_1", "1") == []  # the response may write more audio: the tones would land inside it
    assert c.tones_state("call_1").tag == 0
    more = c.on_event(delta("r1", 200), 0, IDLE)  # audio after the function call still goes before the tones
    assert [type(a) for a in more] == [core.WriteFrames]  # one whole frame; 40 bytes held back
    done = c.on_event(rt.AudioDone("r1", "item_r1"), 0, IDLE)
    kinds = [(type(a).__name__, a.tag) for a in done]
    # the response's padded last frame and its end, then the tones under the next tag
    assert kinds == [("WriteFrames", tag), ("EndTag", tag), ("OpenTag", tag + 1), ("WriteFrames", tag + 1), ("EndTag", tag + 1)]
    assert c.tones_state("call_1").tag == tag + 1
    assert c.on_event(rt.ResponseDone("r1", "completed", None), 0, IDLE) == []
    assert start_response(c, "r2") == tag + 2


def test_a_barge_in_cuts_written_tones_with_their_tag_alone():
    c = core.ModelCallCore("CA1", first_tag=3)
    c.play_tones("call_1", "12")
    tones = c.tones_state("call_1")
    playing = core.Playout(played_tag=3, played_frames=2, played_at_ns=0, sent_tag=3, sent_frames=tones.frames,
                           carrier_empty_at_ns=10**12)
    actions = c.barge_in(MS, playing)
    assert actions == [core.CancelTag(3, MS)]  # no model response: nothing to cancel, truncate or delete there
    assert c.tones_state("call_1").cancelled


def test_a_barge_in_drops_tones_still_waiting_for_the_calling_response():
    c = core.ModelCallCore("CA1", first_tag=3)
    start_response(c, "r1")
    c.on_event(delta("r1"), 0, IDLE)
    c.play_tones("call_1", "1")
    c.barge_in(MS, IDLE)
    assert c.tones_state("call_1").cancelled
    assert tone_actions(c.on_event(rt.ResponseDone("r1", "cancelled", None), 0, IDLE)) == []  # never written


def test_tones_that_played_out_are_not_cut_by_a_later_barge_in():
    c = core.ModelCallCore("CA1", first_tag=3)
    c.play_tones("call_1", "1")
    frames = c.tones_state("call_1").frames
    played = core.Playout(3, frames, 0, 3, frames, 0)
    assert c.barge_in(MS, played) == []
    assert not c.tones_state("call_1").cancelled


def test_an_a_law_call_gets_its_tones_in_a_law():
    c = core.ModelCallCore("CA1", audio_format="pcma")
    [_, write, _] = c.play_tones("call_1", "5")
    assert write.audio == g711.from_ulaw(dtmf.tone_audio("5"), "pcma")


def test_bad_digits_are_refused():
    c = core.ModelCallCore("CA1")
    with pytest.raises(ValueError):
        c.play_tones("call_1", "1x")
    assert c.tones_state("call_1") is None


def _dtmf_agent():
    from voicecore.agent.spec import AgentSpec, FlowSpec, FunctionSpec, NodeSpec, Webhook

    press = FunctionSpec("send_dtmf", "Press keys.", {"type": "object", "properties": {"digits": {"type": "string"}}},
                         tool=Webhook("http://127.0.0.1:9/keys"), writes=False)
    return AgentSpec("caller", "You call on behalf of a client.",
                     FlowSpec("start", {"start": NodeSpec("start", functions=("send_dtmf",))}, {"send_dtmf": press}),
                     greeting="Hello, this is an assistant calling.")


def ev(**fields):
    return json.dumps(fields)


def test_the_controller_plays_tones_only_for_a_tool_it_runs_after_the_calling_response_and_a_record_replays_them():
    from voicecore.agent.flow import AgentFlow

    recorder = CallRecorder(C.CallController("CA1", flow=AgentFlow(_dtmf_agent()), config=C.ControllerConfig()))
    recorder.start(0)
    assert recorder.on_tones("call_unknown", "1", MS) == []  # no such tool running: nothing is written
    created = recorder.on_model_event(ev(type="response.created", response={"id": "r1", "metadata": {"vc_req": "1"}}),
                                      50 * MS, IDLE)
    [calling_tag] = [a.tag for a in created if isinstance(a, core.OpenTag)]
    recorder.on_model_event(ev(type="response.output_audio.delta", response_id="r1", item_id="i1",
                               delta=base64.b64encode(b"\x01" * 480).decode()), 60 * MS, IDLE)
    out = recorder.on_model_event(ev(type="response.function_call_arguments.done", response_id="r1", item_id="fc_1",
                                     call_id="call_1", name="send_dtmf", arguments='{"digits": "1"}'), 100 * MS, IDLE)
    assert [a.name for a in out if isinstance(a, C.RunTool)] == ["send_dtmf"]
    assert recorder.on_tones("call_1", "1", 110 * MS) == []  # the calling response is still producing audio
    done = recorder.on_model_event(ev(type="response.done", response={"id": "r1", "status": "completed"}), 120 * MS, IDLE)
    assert [a.tag for a in done if isinstance(a, core.OpenTag)] == [calling_tag + 1]
    ends = [a for a in done if isinstance(a, core.EndTag)]
    assert [e.tag for e in ends] == [calling_tag, calling_tag + 1]  # the calling response ends before the tones start
    recorder.on_tool_result("call_1", True, '{"ok": true, "digits": "1"}', 900 * MS)
    header, entries = json.loads(json.dumps(recorder.header)), json.loads(json.dumps(recorder.entries))
    assert [e for e in entries if e["k"] == "tones"] == [{"t": MS, "k": "tones", "call_id": "call_unknown", "digits": "1"},
                                                         {"t": 110 * MS, "k": "tones", "call_id": "call_1", "digits": "1"}]
    result = replay(header, entries)
    assert result.identical, result.divergence


def test_the_spine_plays_tones_and_a_record_replays_them():
    recorder = CallRecorder(SpineDriver("CA1", first_tag=5))
    recorder.start(0)
    actions = recorder.on_tones("call_1", "1", MS)
    assert [type(a) for a in actions] == [core.OpenTag, core.WriteFrames, core.EndTag] and actions[0].tag == 5
    header, entries = loads(recorder.dumps())
    result = replay(header, entries)
    assert result.identical, result.divergence
