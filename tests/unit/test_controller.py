"""CallController unit tests: one input at a time, a fake clock, table-like checks (no sleeps)."""

from __future__ import annotations

import ast
import base64
import http.server
import json
import threading
import urllib.request
from pathlib import Path

import pytest

from voicecore.call import controller as C
from voicecore.call import flow as flows
from voicecore.carriers.twilio import rest as twilio_rest

MS = 1_000_000
IDLE = C.IDLE_PLAYOUT
ROOT = Path(__file__).resolve().parents[2]


def sent(actions):
    return [json.loads(a.text) for a in actions if isinstance(a, C.SendToModel)]


def ev(**fields):
    return json.dumps(fields)


def created(rid, req):
    return ev(type="response.created", response={"id": rid, "metadata": {"vc_req": str(req)}})


def delta(rid, n, item="item_a"):
    return ev(type="response.output_audio.delta", response_id=rid, item_id=item, delta=base64.b64encode(b"\x11" * n).decode())


def started(c):
    c.start(0)
    return c


def test_start_configures_the_session_so_the_controller_takes_turns():
    c = C.CallController("CA1")
    out = sent(c.start(0))
    assert [e["type"] for e in out] == ["session.update", "response.create"]
    td = out[0]["session"]["audio"]["input"]["turn_detection"]
    assert td["create_response"] is False and td["interrupt_response"] is False
    assert out[0]["session"]["audio"]["input"]["transcription"] == {"model": "gpt-4o-mini-transcribe"}
    assert out[1]["response"]["metadata"] == {"vc_req": "1", "vc_prompt": "greeting"}


def test_a_responses_own_instructions_keep_the_sessions_in_force():
    # The vendor: response.instructions replace the session's for that response. A scripted line and a
    # grounded answer must not lose the agent's persona and its node's role.
    flow = flows.ScriptedFlow()
    c = started(C.CallController("CA1", flow=flow))
    persona = c.core.instructions
    assert persona
    line = C.Request(9, flows.Say("question", "How can I help you today?"), "flow")
    assert c._response_instructions(line) == persona + '\n\nSay exactly: "How can I help you today?"'
    grounded = C.Request(10, flows.Answer(), "flow", snippets=({"text": "Basic costs 99 kr.", "file": "kb.md"},))
    assert c._response_instructions(grounded).startswith(persona + "\n\nAnswer the caller briefly")
    assert c._response_instructions(C.Request(11, flows.Answer(), "flow")) is None  # the session's own
    c.core.reconfigure("You are the booking desk now.", [])  # a node transition changes what is in force
    assert c._response_instructions(line).startswith("You are the booking desk now.\n\n")


def test_one_request_at_a_time_and_the_next_only_after_the_previous_played():
    c = started(C.CallController("CA1"))
    out = c.on_model_event(created("r1", 1), 100 * MS, IDLE)
    (opened,) = [a for a in out if isinstance(a, C.OpenTag)]
    # ungated: the pacer releases it as it comes (a hold is the pacer's own check), no approvals needed
    assert not opened.gated and not any(isinstance(a, C.ReleaseTag) for a in out)
    c.on_model_event(delta("r1", 1600), 110 * MS, IDLE)
    c.on_model_event(ev(type="response.output_audio.done", response_id="r1", item_id="item_a"), 120 * MS, IDLE)
    c.on_model_event(ev(type="response.done", response={"id": "r1", "status": "completed"}), 121 * MS, IDLE)
    playing = C.Playout(opened.tag, 5, 200 * MS, opened.tag, 9, 300 * MS)
    assert sent(c.on_tick(200 * MS, playing)) == []  # greeting still audible: the question waits
    done = C.Playout(opened.tag, 10, 320 * MS, opened.tag, 10, 320 * MS)
    (question,) = sent(c.on_tick(320 * MS, done))
    assert question["response"]["metadata"]["vc_prompt"] == "question"


def test_unsolicited_response_is_rejected_and_never_gets_a_tag():
    c = started(C.CallController("CA1"))
    out = c.on_model_event(ev(type="response.created", response={"id": "rX"}), 100 * MS, IDLE)
    c2 = started(C.CallController("CA2"))
    c2.on_model_event(created("r1", 1), 100 * MS, IDLE)
    out = c2.on_model_event(ev(type="response.created", response={"id": "rX", "metadata": {"vc_req": "9"}}), 150 * MS, IDLE)
    assert not any(isinstance(a, C.OpenTag) for a in out)
    assert sent(out) == [{"type": "response.cancel", "response_id": "rX"}]
    assert c2.on_model_event(delta("rX", 800), 160 * MS, IDLE) == []
    assert c2.stats.responses_rejected == 1


def speaking_controller():
    c = started(C.CallController("CA1"))
    (tag,) = [a.tag for a in c.on_model_event(created("r1", 1), 100 * MS, IDLE) if isinstance(a, C.OpenTag)]
    c.on_model_event(delta("r1", 160 * 100), 110 * MS, IDLE)
    return c, tag


def test_bare_vad_edge_holds_release_then_resumes_without_words():
    c, tag = speaking_controller()
    p = C.Playout(tag, 10, 400 * MS, tag, 14, 480 * MS)
    out = c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=100, item_id="u1"), 400 * MS, p)
    assert C.HoldTag(tag, 0) in out
    p2 = C.Playout(tag, 15, 500 * MS, tag, 15, 520 * MS)
    assert not any(isinstance(a, (C.ResumeTag, C.CancelTag)) for a in c.on_tick(500 * MS, p2))  # held
    c.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=700, item_id="u1"), 900 * MS, p2)
    out = c.on_model_event(ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0, transcript=""), 1000 * MS, p2)
    assert C.ResumeTag(tag) in out and not any(isinstance(a, C.CancelTag) for a in out)
    assert (c.stats.false_interruptions, c.stats.bargeins) == (1, 0)


def test_a_word_that_is_not_a_backchannel_cuts_at_once_with_truncate_at_the_played_position():
    c, tag = speaking_controller()
    p = C.Playout(tag, 10, 400 * MS, tag, 14, 480 * MS)
    c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=100, item_id="u1"), 400 * MS, p)
    p2 = C.Playout(tag, 15, 500 * MS, tag, 15, 520 * MS)
    words = ev(type="conversation.item.input_audio_transcription.delta", item_id="u1", content_index=0, delta="stop ")
    out = c.on_model_event(words, 700 * MS, p2)  # 0.3 s of speech: its length does not matter, its word does
    assert out[0] == C.CancelTag(tag, 700 * MS)
    assert [e["type"] for e in sent(out)] == ["response.cancel", "conversation.item.truncate"]
    assert sent(out)[1]["audio_end_ms"] == 300  # 15 frames echoed; the carrier ran dry at 520 ms
    assert c.stats.bargein_latency_ms == [300]


def test_speech_without_words_holds_then_its_length_decides_once_the_words_are_overdue():
    long_speech, _ = speaking_controller()
    short_speech, tag = speaking_controller()
    p = C.Playout(tag, 10, 400 * MS, tag, 14, 480 * MS)
    # audio_end_ms includes the VAD's 500 ms of silence, audio_start_ms the 300 ms of prefix padding
    for c, end_ms in ((long_speech, 1000 + 500), (short_speech, 600 + 500)):
        c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=100, item_id="u1"), 400 * MS, p)
        assert not any(isinstance(a, (C.CancelTag, C.ResumeTag)) for a in c.on_tick(5000 * MS, p))  # still speaking: held
        c.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=end_ms, item_id="u1"), 5100 * MS, p)
        assert not any(isinstance(a, (C.CancelTag, C.ResumeTag)) for a in c.on_tick(6580 * MS, p))  # words may come
    # 600 ms of speech with no words in 1.5 s: a turn; 200 ms: a noise, and the agent goes on
    assert any(isinstance(a, C.CancelTag) for a in long_speech.on_tick(6600 * MS, p))
    out = short_speech.on_tick(6600 * MS, p)
    assert C.ResumeTag(tag) in out and not any(isinstance(a, C.CancelTag) for a in out)
    # ... until its words come after all: "no" is a turn, cut where the resumed answer is
    late = ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0, transcript="No.")
    out = short_speech.on_model_event(late, 7000 * MS, p)
    assert out[0] == C.CancelTag(tag, 7000 * MS)
    assert short_speech.stats.turns_reopened == 1


def test_a_backchannel_lets_the_agent_carry_on_and_asks_for_nothing():
    c, tag = speaking_controller()
    p = C.Playout(tag, 10, 400 * MS, tag, 14, 480 * MS)
    c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=100, item_id="u1"), 400 * MS, p)
    c.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=1300, item_id="u1"), 1700 * MS, p)
    delta = ev(type="conversation.item.input_audio_transcription.delta", item_id="u1", content_index=0, delta="Okay")
    assert not any(isinstance(a, (C.ResumeTag, C.CancelTag)) for a in c.on_model_event(delta, 1900 * MS, p))  # more may come
    done = ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0, transcript="Okay, okay.")
    out = c.on_model_event(done, 1950 * MS, p)
    assert C.ResumeTag(tag) in out and not sent(out)
    assert (c.stats.backchannels, c.stats.bargeins) == (1, 0)
    assert not any(e["type"] == "response.create" for e in sent(c.on_tick(5000 * MS, C.Playout(tag, 15, 500 * MS, tag, 15, 520 * MS))))


def test_an_agents_own_backchannel_phrases_extend_the_lexicon():
    c = started(C.CallController("CA1", config=C.ControllerConfig(backchannels=("you bet",))))
    (tag,) = [a.tag for a in c.on_model_event(created("r1", 1), 100 * MS, IDLE) if isinstance(a, C.OpenTag)]
    c.on_model_event(delta("r1", 160 * 100), 110 * MS, IDLE)
    p = C.Playout(tag, 10, 400 * MS, tag, 14, 480 * MS)
    c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=100, item_id="u1"), 400 * MS, p)
    c.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=900, item_id="u1"), 1300 * MS, p)
    done = ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0, transcript="You bet.")
    assert C.ResumeTag(tag) in c.on_model_event(done, 1400 * MS, p)


def test_semantic_vad_is_configured_with_its_eagerness():
    c = C.CallController("CA1", config=C.ControllerConfig(turn_detection="semantic_vad", vad_eagerness="low"))
    (update,) = [e for e in sent(c.start(0)) if e["type"] == "session.update"]
    assert update["session"]["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad", "eagerness": "low", "create_response": False, "interrupt_response": False}


def test_watchdog_retries_a_prompt_three_times_then_the_flow_advances():
    cfg = C.ControllerConfig(give_up_after_failures=99)
    c = C.CallController("CA1", config=cfg)
    c.start(0)
    prompts = []
    for k in range(1, 6):
        out = sent(c.on_tick(k * 3000 * MS, IDLE))
        prompts += [e["response"]["metadata"]["vc_prompt"] for e in out]
    assert prompts == ["greeting", "greeting", "greeting", "question", "question"]
    assert c.stats.watchdog_fires == 5 and c.stats.retries == 4  # 3 for the greeting, 1 for the question


def test_harmless_errors_do_not_end_anything():
    c = started(C.CallController("CA1"))
    for code, message in (("response_cancel_not_active", "x"), (None, "Audio content of 10ms is already shorter than 20ms")):
        c.on_model_event(ev(type="error", error={"type": "invalid_request_error", "code": code, "message": message}), 10 * MS, IDLE)
    assert c.core.stats.harmless_errors == 2 and not c.ended


def tool_call(name, call_id="call_1", rid="r1"):
    return ev(type="response.function_call_arguments.done", response_id=rid, item_id="fc1", call_id=call_id, name=name, arguments="{}")


def test_post_tool_debounce_waits_for_quiet_then_sends_one_turn():
    c = started(C.CallController("CA1"))
    c.inflight = None  # the greeting's request is not the point here
    out = c.on_model_event(tool_call("lookup_caller"), 1000 * MS, IDLE)
    assert sent(out)[0]["item"]["type"] == "function_call_output"
    frag = ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0, transcript="air conditioning")
    c.on_model_event(frag, 2000 * MS, IDLE)
    assert sent(c.on_tick(3400 * MS, IDLE)) == []  # 1.4 s quiet
    (create,) = sent(c.on_tick(3500 * MS, IDLE))
    assert create["type"] == "response.create" and c.stats.debounce_flushes == 1


def test_post_tool_debounce_is_capped_at_five_seconds():
    c = started(C.CallController("CA1"))
    c.inflight = None
    c.on_model_event(tool_call("lookup_caller"), 0, IDLE)
    for t in range(1000, 5000, 1000):
        c.on_model_event(ev(type="conversation.item.input_audio_transcription.delta", item_id="u1", content_index=0, delta="more "), t * MS, IDLE)
    assert c.debounce.waiting
    c.on_tick(5000 * MS, IDLE)
    assert not c.debounce.waiting and c.stats.debounce_flushes == 1


def test_end_call_flushes_the_debounce_and_says_goodbye():
    c = started(C.CallController("CA1"))
    c.inflight = None
    c.on_model_event(tool_call("lookup_caller"), 0, IDLE)
    out = c.on_model_event(tool_call("end_call", "call_2"), 200 * MS, IDLE)
    assert c.stats.debounce_flushes == 1
    assert sent(out)[-1]["response"]["metadata"]["vc_prompt"] == "goodbye"


def test_dtmf_is_caller_input():
    c = started(C.CallController("CA1"))
    c.inflight = None
    out = sent(c.on_dtmf("7", 100 * MS))
    assert out[0]["type"] == "conversation.item.create" and "7" in out[0]["item"]["content"][0]["text"]
    assert out[1]["type"] == "response.create"


def test_caller_hangup_mid_response_ends_cleanly_once():
    c, tag = speaking_controller()
    c.on_tick(200 * MS, C.Playout(0, 0, 0, tag, 5, 300 * MS))
    out = c.on_carrier_stop(250 * MS)
    assert out[0] == C.CancelTag(tag, 250 * MS) and out[-1] == C.CallOver("caller_hangup")
    assert c.on_carrier_stop(260 * MS) == [] and c.on_model_event(delta("r1", 800), 270 * MS, IDLE) == []


def test_bad_model_input_never_raises():
    c = started(C.CallController("CA1"))
    for junk in ("not json", "[]", ev(type="response.created"), ev(type="conversation.item.input_audio_transcription.delta")):
        c.on_model_event(junk, 10 * MS, IDLE)
    # all four: a transcription delta without its item_id is malformed like any modelled event missing a field
    assert c.core.stats.malformed_events == 4 and not c.ended


def test_config_round_trips_through_a_dict():
    cfg = C.ControllerConfig(silence_checkins_ms=(1, 2), debounce_quiet_ms=7)
    assert C.ControllerConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_flow_steps():
    f = flows.ScriptedFlow(max_turns=1)
    assert f.start().prompt_id == "greeting"
    assert f.after_played("greeting").prompt_id == "question"
    assert isinstance(f.on_user_turn("hi"), flows.Answer)
    assert f.on_user_turn("bye").terminal
    assert f.on_dtmf("0").transfer_to == "+15550100"
    assert f.on_tool_call("end_call", "{}").then.terminal


@pytest.mark.parametrize("relative", ["voicecore/call/controller.py", "voicecore/call/flow.py", "voicecore/carriers/twilio/rest.py"])
def test_controller_modules_import_no_io(relative):
    forbidden = {"asyncio", "zmq", "websockets", "time", "os", "random", "uuid", "socket", "threading", "subprocess", "urllib.request"}
    tree = ast.parse((ROOT / relative).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    assert not {n.split(".")[0] for n in names} & (forbidden - {"urllib.request"}) and "urllib.request" not in names


# --- Twilio REST: built sans-I/O, sent to a local fake REST server --------------------------------------
ACCOUNT = "AC" + "a" * 32
CALL = "CA" + "b" * 32


class _FakeTwilio(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _FakeTwilio.seen.append((self.path, self.headers["Authorization"], body.decode()))
        status = 200 if self.headers["Authorization"] == "Basic " + base64.b64encode(f"{ACCOUNT}:tok".encode()).decode() else 401
        payload = {"sid": CALL, "status": "completed"} if status == 200 else {"code": 20003, "message": "Authenticate", "status": 401}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def _send(request):
    req = urllib.request.Request(request.url, data=request.body, headers=dict(request.headers), method=request.method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_twilio_rest_hangup_and_transfer_against_a_local_fake():
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeTwilio)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        _FakeTwilio.seen.clear()
        result = twilio_rest.parse_response(*_send(twilio_rest.hangup_request(ACCOUNT, CALL, "tok", base_url=base)))
        assert result.ok and result.status == "completed"
        twilio_rest.parse_response(*_send(twilio_rest.transfer_request(ACCOUNT, CALL, "+15550100", "tok", base_url=base)))
        bad = twilio_rest.parse_response(*_send(twilio_rest.hangup_request(ACCOUNT, CALL, "wrong", base_url=base)))
        assert not bad.ok and not bad.retryable and bad.error == "Authenticate"
    finally:
        server.shutdown()
        server.server_close()
    path, _, body = _FakeTwilio.seen[0]
    assert path == f"/2010-04-01/Accounts/{ACCOUNT}/Calls/{CALL}.json" and body == "Status=completed"
    assert _FakeTwilio.seen[1][2] == "Twiml=%3CResponse%3E%3CDial%3E%2B15550100%3C%2FDial%3E%3C%2FResponse%3E"
    with pytest.raises(ValueError):
        twilio_rest.hangup_request("AC1", CALL, "tok")
    assert twilio_rest.parse_response(503, b"").retryable


# --- the validation gate's release policies in the controller (docs/explanation/validation-gate.md) ----
def test_a_gated_prompt_releases_what_the_validator_approved_and_no_more():
    flow = flows.ScriptedFlow(node_policies={"greeting": "scripted"})
    c = started(C.CallController("CA1", flow=flow))
    out = c.on_model_event(created("r1", 1), 100 * MS, IDLE)
    (gate,) = [a for a in out if isinstance(a, C.core.OpenGate)]
    assert gate.policy == "scripted" and gate.script == flows.LINES["greeting"]
    assert not any(isinstance(a, C.ReleaseTag) for a in out)  # nothing before the validator says so
    out = c.on_verdict(gate.tag, 4, False, 120 * MS, IDLE)
    assert C.ReleaseTag(gate.tag, 4) in out  # the verdict bounds it (INV-GATE)
    playing = C.Playout(0, 0, 0, gate.tag, 4, 200 * MS)
    assert not any(isinstance(a, C.ReleaseTag) for a in c.on_tick(200 * MS, playing))  # still 4
    assert not any(isinstance(a, C.ReleaseTag) for a in c.on_verdict(gate.tag, 3, False, 210 * MS, playing))  # never lower
    out = c.on_verdict(gate.tag, C.APPROVE_ALL, False, 220 * MS, playing)
    assert C.ReleaseTag(gate.tag, C.APPROVE_ALL) in out  # approved whole


def test_a_rejected_answer_is_cancelled_and_the_safe_line_said_in_its_place():
    config = C.ControllerConfig(gate_policy="numbers", safe_line="I can't verify that.")
    c = started(C.CallController("CA1", config=config))
    c.queued = c.inflight = None  # as if past the greeting: the caller's turn is answered
    c._enqueue(flows.Answer(), "flow", [], question="How much is Basic?")
    out = c.on_tick(10 * MS, IDLE)
    (create,) = sent(out)
    out = c.on_model_event(created("r2", create["response"]["metadata"]["vc_req"]), 50 * MS, IDLE)
    (gate,) = [a for a in out if isinstance(a, C.core.OpenGate)]
    assert gate.policy == "numbers" and gate.script == ""
    c.on_model_event(delta("r2", 1600), 60 * MS, IDLE)
    out = c.on_verdict(gate.tag, 0, True, 80 * MS, IDLE)
    assert C.CancelTag(gate.tag, 80 * MS) in out
    assert [e["type"] for e in sent(out)] == ["response.cancel", "conversation.item.delete"]
    assert c.stats.gate_rejections == 1 and c.queued.step == flows.Say("safe_line", "I can't verify that.", policy="off")
    assert sent(c.on_tick(90 * MS, IDLE)) == []  # one voice at a time: not while r2 is still active
    (safe,) = sent(c.on_model_event(ev(type="response.done", response={"id": "r2", "status": "cancelled"}), 100 * MS, IDLE))
    assert safe["response"]["instructions"] == c.core.instructions + '\n\nSay exactly: "I can\'t verify that."'


def test_retrieve_first_puts_snippets_in_the_instructions_or_says_the_safe_line_without_support():
    config = C.ControllerConfig(gate_policy="numbers", retrieve_first=True)
    c = started(C.CallController("CA1", config=config))
    c.queued = c.inflight = None
    c._enqueue(flows.Answer(), "flow", [], question="How much does Basic cost?")
    (retrieve,) = [a for a in c.on_tick(10 * MS, IDLE) if isinstance(a, C.Retrieve)]
    assert retrieve.question == "How much does Basic cost?" and retrieve.k == 3
    out = c.on_snippets(retrieve.req_id, [{"file": "kb/pricing.md", "line": 3, "text": "Basic costs 99 kr per month."}], 20 * MS)
    (create,) = sent(out)
    assert "Basic costs 99 kr per month. (kb/pricing.md)" in create["response"]["instructions"]
    c = started(C.CallController("CA1", config=config))
    c.queued = c.inflight = None
    c._enqueue(flows.Answer(), "flow", [], question="How much is the helicopter?")
    (retrieve,) = [a for a in c.on_tick(10 * MS, IDLE) if isinstance(a, C.Retrieve)]
    (create,) = sent(c.on_snippets(retrieve.req_id, [], 20 * MS))
    assert create["response"]["metadata"]["vc_prompt"] == "safe_line" and c.stats.retrievals_empty == 1


def test_a_model_reconnect_configures_the_new_session_and_asks_again():
    c = started(C.CallController("CA1"))  # the greeting was asked for, never created
    out = sent(c.reopen(500 * MS))
    assert [e["type"] for e in out] == ["session.update", "response.create"]
    assert out[1]["response"]["metadata"]["vc_prompt"] == "greeting"  # asked again, on the new session
    c = started(C.CallController("CA1"))
    c.on_model_event(created("r1", 1), 100 * MS, IDLE)
    c.on_model_event(delta("r1", 1600), 110 * MS, IDLE)
    out = c.reopen(600 * MS)  # cut off mid-audio: cancelled and retried like a stall
    assert any(isinstance(a, C.CancelTag) for a in out) and c.stats.stalls == 1
    assert sent(out)[0]["type"] == "session.update"


def test_a_call_re_attached_mid_answer_drops_the_rest_of_it_and_says_the_reconnect_line():
    c = started(C.CallController("CA1"))
    c.on_model_event(created("r1", 1), 100 * MS, IDLE)
    c.on_model_event(delta("r1", 1600), 110 * MS, IDLE)
    out = c.reopen(600 * MS, reattached=True)  # its gateway died; the call is on a new stream and a new session
    assert c.stats.stalls == 0 and not any(isinstance(a, C.CancelTag) for a in out)
    events = sent(out)
    assert events[0]["type"] == "session.update"
    (create,) = [e for e in events if e["type"] == "response.create"]
    assert create["response"]["metadata"]["vc_prompt"] == "reconnect"
    assert flows.LINES["reconnect"] in create["response"]["instructions"]
    # the caller was speaking when the gateway died: the new session never hears the end of it
    c = started(C.CallController("CA1"))
    c.queued = c.inflight = None
    c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=100, item_id="u1"), 200 * MS, IDLE)
    assert not c._may_speak()
    events = sent(c.reopen(600 * MS, reattached=True))
    assert [e["response"]["metadata"]["vc_prompt"] for e in events if e["type"] == "response.create"] == ["reconnect"]
    assert not c.caller_speaking and not c.turns.any_open
    # not mid-answer: nothing is said, the new session is only configured
    c = started(C.CallController("CA1"))
    c.queued = c.inflight = None
    assert [e["type"] for e in sent(c.reopen(600 * MS, reattached=True))] == ["session.update"]


def test_a_reconnected_session_gets_the_conversation_so_far():
    c = started(C.CallController("CA1"))
    c.on_model_event(json.dumps({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u1",
                                 "content_index": 0, "transcript": " What does Basic cost? "}), 100 * MS, IDLE)
    c.on_model_event(json.dumps({"type": "response.output_audio_transcript.done", "response_id": "r1", "item_id": "a1",
                                 "output_index": 0, "content_index": 0, "transcript": "Basic costs 99 kronor."}), 200 * MS, IDLE)
    c.on_model_event(json.dumps({"type": "response.output_audio_transcript.done", "response_id": "r2", "item_id": "a2",
                                 "output_index": 0, "content_index": 0, "transcript": ""}), 250 * MS, IDLE)
    out = sent(c.reopen(500 * MS))
    assert out[0]["type"] == "session.update"
    restored = [(e["item"]["role"], e["item"]["content"][0]) for e in out if e["type"] == "conversation.item.create"]
    assert restored == [("user", {"type": "input_text", "text": "What does Basic cost?"}),
                        ("assistant", {"type": "output_text", "text": "Basic costs 99 kronor."})]
    assert [e["type"] for e in out].index("conversation.item.create") == 1  # before any new response


def test_the_agents_turns_section_and_the_operators_transcription_model_reach_the_controller():
    import dataclasses

    from voicecore.agent.spec import AgentSpec, FlowSpec
    from voicecore.config import load_config
    from voicecore.call.build import controller_config

    agent = AgentSpec(name="x", instructions="Help.", flow=FlowSpec("main", {}, {}), languages=("sv",),
                      turn_detection="semantic_vad", vad_eagerness="high", transcription_model="whisper-1",
                      backchannels=("kanon",), transcript_wait_ms=900)
    cfg = controller_config(load_config({}), agent)
    assert (cfg.languages, cfg.backchannels, cfg.turn_detection, cfg.vad_eagerness, cfg.transcription_model,
            cfg.transcript_wait_ms) == (("sv",), ("kanon",), "semantic_vad", "high", "whisper-1", 900)
    operator = dataclasses.replace(load_config({}), transcription_model="gpt-4o-transcribe")
    assert controller_config(operator, agent).transcription_model == "gpt-4o-transcribe"


def _answer_and_play(c, rid, req, at_ms, before=IDLE):
    """Response ``rid`` to request ``req`` created at ``at_ms`` (``before``: the playout then), 10 frames, done;
    the tick once they played."""
    (tag,) = [a.tag for a in c.on_model_event(created(rid, req), at_ms * MS, before) if isinstance(a, C.OpenTag)]
    c.on_model_event(delta(rid, 1600), (at_ms + 10) * MS, before)
    c.on_model_event(ev(type="response.output_audio.done", response_id=rid, item_id="item_a"), (at_ms + 20) * MS, before)
    c.on_model_event(ev(type="response.done", response={"id": rid, "status": "completed"}), (at_ms + 21) * MS, before)
    playing = C.Playout(tag, 5, (at_ms + 100) * MS, tag, 10, (at_ms + 200) * MS)
    assert c.on_tick((at_ms + 100) * MS, playing) == [] and not c.quiet  # audible
    played = C.Playout(tag, 10, (at_ms + 200) * MS, tag, 10, (at_ms + 200) * MS)
    return c.on_tick((at_ms + 200) * MS, played), played


def test_a_call_between_turns_is_quiet_and_anything_pending_makes_it_busy():
    c = C.CallController("CA1")
    assert not c.quiet  # not started
    c.start(0)
    assert not c.quiet  # the greeting is asked for
    out, played = _answer_and_play(c, "r1", 1, 100)
    assert [e["response"]["metadata"]["vc_prompt"] for e in sent(out)] == ["question"] and not c.quiet
    out, played = _answer_and_play(c, "r2", 2, 400, played)
    assert out == [] and c.quiet  # the question played; the caller's turn: only the silence timers are left
    # the silence check-in still comes from a quiet call's (coarser) ticks
    assert sent(c.on_tick(10_500 * MS, played)) == [] and c.quiet
    (checkin,) = sent(c.on_tick(10_700 * MS, played))
    assert checkin["response"]["metadata"]["vc_prompt"] == "checkin" and not c.quiet
    # a caller who speaks makes it busy at once, and their turn keeps it so until the answer has played
    c2 = C.CallController("CA2")
    c2.start(0)
    _, played = _answer_and_play(c2, "r1", 1, 100)
    _, played = _answer_and_play(c2, "r2", 2, 400, played)
    assert c2.quiet
    c2.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=900, item_id="u1"), 1000 * MS, played)
    assert not c2.quiet
    c2.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=2000, item_id="u1"), 2100 * MS, played)
    assert not c2.quiet  # its words are not known yet
    words = ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0,
               transcript="What are your opening hours?")
    out = c2.on_model_event(words, 2300 * MS, played)
    assert [e["type"] for e in sent(out)] == ["response.create"] and not c2.quiet  # answered: asked for
    assert c2.on_tick(2320 * MS, played) == [] and not c2.quiet
