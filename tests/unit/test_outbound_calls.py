"""Placing outbound calls: the Twilio Calls API request and status callbacks, the fields a call carries to its
agent, the answer gate before the agent's first words, and the simulator's callees and Calls API."""

from __future__ import annotations

import base64
import json
import types
import urllib.parse

import numpy as np
import pytest

from voicecore.agent.spec import AgentSpec
from voicecore.bus import messages
from voicecore.carriers.twilio import outbound
from voicecore.carriers.twilio.carrier import TWILIO
from voicecore.carriers.twilio.signature import compute_signature
from voicecore.carriers.webhook import EVENT, AnswerRequest, Refusal, WebhookError
from voicecore.g711 import linear_to_ulaw
from voicecore.outbound import answer_gate, call_fields
from voicecore.sim import callee_core
from voicecore.sim import carrier_rest_core as rest_core
from voicecore.sim.carrier_core import CarrierCall
from voicecore.sim.carrier_modes_core import CarrierCredentials
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES
from workers.model.answer_wait import agent_for_call

ACCOUNT = "AC" + "0123456789abcdef" * 2
CALL = "CA" + "fedcba9876543210" * 2
NODE = "http://127.0.0.1:8080"
CALLEE = "+15550100001"


# --- the Calls API request and its answer -------------------------------------------------------------


def test_the_calls_request_asks_for_every_progress_event_and_the_answer_url():
    url = outbound.answer_url(NODE + "/twilio/voice", CALLEE, {"first_name": "Anna"})
    request = outbound.place_call_request(ACCOUNT, "tok", CALLEE, "+15005550006", url=url,
                                          status_callback=NODE + "/twilio/call-status", base_url="http://api.test")
    assert request.method == "POST"
    assert request.url == f"http://api.test/2010-04-01/Accounts/{ACCOUNT}/Calls.json"
    assert dict(request.headers)["Authorization"] == "Basic " + base64.b64encode(f"{ACCOUNT}:tok".encode()).decode()
    pairs = urllib.parse.parse_qsl(request.body.decode())
    form = dict(pairs)
    assert (form["To"], form["From"], form["Url"], form["StatusCallbackMethod"]) == (
        CALLEE, "+15005550006", url, "POST")
    assert [v for k, v in pairs if k == "StatusCallbackEvent"] == ["initiated", "ringing", "answered", "completed"]
    assert "Twiml" not in form and "MachineDetection" not in form


def test_the_calls_request_with_async_amd_sends_its_result_to_the_status_callback():
    request = outbound.place_call_request(ACCOUNT, "tok", CALLEE, "+15005550006", twiml="<Response/>",
                                          status_callback=NODE + "/s", machine_detection="DetectMessageEnd",
                                          async_amd=True)
    form = dict(urllib.parse.parse_qsl(request.body.decode()))
    assert form["Twiml"] == "<Response/>" and "Url" not in form
    assert (form["MachineDetection"], form["AsyncAmd"], form["AsyncAmdStatusCallback"]) == (
        "DetectMessageEnd", "true", NODE + "/s")


@pytest.mark.parametrize("kwargs, message", [
    ({"to": "5550100001"}, "to must be a phone number"),
    ({"from_": "+1"}, "from must be a phone number"),
    ({"url": ""}, "exactly one of url"),
    ({"twiml": "<Response/>"}, "exactly one of url"),
    ({"machine_detection": "Yes"}, "machine_detection must be"),
    ({"timeout_s": 1}, "timeout_s"),
])
def test_a_calls_request_that_cannot_be_right_is_refused_before_it_is_sent(kwargs, message):
    args = {"to": CALLEE, "from_": "+15005550006", "url": NODE + "/twilio/voice"} | kwargs
    with pytest.raises(ValueError, match=message):
        outbound.place_call_request(ACCOUNT, "tok", **args)


def test_twilios_answer_to_the_calls_request_names_the_call_or_the_error():
    created = outbound.parse_place_call_response(201, json.dumps({"sid": CALL, "status": "queued"}).encode())
    assert (created.ok, created.call_sid, created.status) == (True, CALL, "queued")
    refused = outbound.parse_place_call_response(401, json.dumps({"code": 20003, "message": "Authenticate"}).encode())
    assert (refused.ok, refused.retryable, refused.error) == (False, False, "Authenticate")
    assert outbound.parse_place_call_response(503, b"<html>").retryable
    assert not outbound.parse_place_call_response(201, b"{}").ok  # no call named: not placed


def test_a_call_status_callback_is_read_and_a_wrong_one_refused():
    form = {"CallSid": CALL, "AccountSid": ACCOUNT, "CallStatus": "completed", "Direction": "outbound-api",
            "SequenceNumber": "3", "CallDuration": "12", "AnsweredBy": "human"}
    event = outbound.parse_call_status(form)
    assert (event.status, event.sequence, event.duration_s, event.answered_by) == ("completed", 3, 12, "human")
    for bad in ({"CallStatus": "answered"}, {"CallSid": "CA1"}, {"SequenceNumber": "x"}):
        with pytest.raises(WebhookError):
            outbound.parse_call_status(form | bad)


# --- the fields, through the answer document to the stream and the agent ----------------------------------


def _voice_request(url: str, token: str = "tok", signed_url: str | None = None):
    form = {"CallSid": CALL, "AccountSid": ACCOUNT, "From": "+15005550006", "To": CALLEE, "Direction": "outbound-api"}
    signature = compute_signature(token, signed_url or url, form)
    settings = types.SimpleNamespace(twilio_auth_token=token, public_url=NODE)
    target = url[len(NODE):]
    return TWILIO.check_webhook(TWILIO.routes["/twilio/voice"], "POST", target, {"x-twilio-signature": signature},
                                urllib.parse.urlencode(form).encode(), settings, url, 0), settings


def test_a_placed_calls_fields_reach_the_stream_as_parameters_of_the_answer_document():
    url = outbound.answer_url(NODE + "/twilio/voice", CALLEE, {"first_name": "Anna", "reason": "a <visit> & more"})
    request, settings = _voice_request(url)
    assert isinstance(request, AnswerRequest)
    assert request.parameters == (("direction", "outbound"), ("callee", CALLEE), ("field.first_name", "Anna"),
                                  ("field.reason", "a <visit> & more"))
    _type, body = TWILIO.answer_document(request, "ws://127.0.0.1:8080/twilio/stream", "token-1", settings)
    from voicecore.sim.carrier import parse_twiml

    assert parse_twiml(body).parameters == {"session_token": "token-1", "direction": "outbound", "callee": CALLEE,
                                            "field.first_name": "Anna", "field.reason": "a <visit> & more"}


def test_the_answer_urls_query_is_covered_by_the_signature():
    url = outbound.answer_url(NODE + "/twilio/voice", CALLEE, {"first_name": "Anna"})
    forged = url.replace("Anna", "Mallory")
    request, _settings = _voice_request(forged, signed_url=url)
    assert isinstance(request, Refusal) and request.status == 403


def test_an_inbound_calls_answer_document_has_only_the_token():
    request, _settings = _voice_request(NODE + "/twilio/voice")
    assert request.parameters == ()


def test_unknown_or_oversized_parameters_are_dropped_not_passed_on():
    query = urllib.parse.urlencode([("direction", "outbound"), ("callee", "12"), ("session_token", "x"),
                                    ("field.ok", "1"), ("field.9bad", "2"), ("field.long", "x" * 201), ("other", "3")])
    assert outbound.stream_parameters(query) == (("direction", "outbound"), ("field.ok", "1"))
    assert outbound.stream_parameters("callee=%2B15550100001") == ()  # not outbound: an inbound call
    with pytest.raises(ValueError, match="field name"):
        outbound.answer_url(NODE + "/twilio/voice", CALLEE, {"1x": "y"})


def test_the_call_status_route_checks_the_signature_and_logs_the_progress():
    form = {"CallSid": CALL, "AccountSid": ACCOUNT, "CallStatus": "busy", "Direction": "outbound-api",
            "SequenceNumber": "2"}
    url = NODE + "/twilio/call-status"
    settings = types.SimpleNamespace(twilio_auth_token="tok", public_url=NODE)
    route = TWILIO.routes["/twilio/call-status"]
    body = urllib.parse.urlencode(form).encode()
    ok = TWILIO.check_webhook(route, "POST", "/twilio/call-status",
                              {"x-twilio-signature": compute_signature("tok", url, form)}, body, settings, url, 0)
    assert isinstance(ok, AnswerRequest) and ok.kind == EVENT and "status busy (#2)" in ok.note
    # what the gateway keeps in the call store for the campaign that placed the call
    assert (ok.call_status.call_sid, ok.call_status.status, ok.call_status.sequence) == (CALL, "busy", 2)
    forged = TWILIO.check_webhook(route, "POST", "/twilio/call-status", {"x-twilio-signature": "AAAA"}, body,
                                  settings, url, 0)
    assert isinstance(forged, Refusal) and forged.status == 403


def test_call_started_carries_the_fields_and_the_agent_sees_them_in_its_texts():
    started = messages.CallStarted(2, 7, CALL, "MZ" + "0" * 32, ACCOUNT)
    parameters = [("session_token", "t"), ("direction", "outbound"), ("callee", CALLEE), ("field.first_name", "Anna")]
    placed = call_fields.outbound_started(started, parameters)
    assert (placed.direction, placed.callee, call_fields.fields_of(placed)) == ("outbound", CALLEE, {"first_name": "Anna"})
    assert messages.decode(messages.encode(placed)) == placed
    assert call_fields.outbound_started(started, [("session_token", "t")]) is started  # inbound: unchanged
    agent = AgentSpec(name="a", instructions="Call {first_name} at {callee} about {unknown}.", flow=None,
                      greeting="Hi {first_name}, {\"json\": 1}")
    filled = agent_for_call(agent, placed)
    assert filled.instructions == f"Call Anna at {CALLEE} about {{unknown}}."
    assert filled.greeting == 'Hi Anna, {"json": 1}'
    assert agent_for_call(agent, started) is agent


# --- the answer gate ---------------------------------------------------------------------------------


def _line(*parts: tuple[str, int]) -> bytes:
    """Callee audio: ("speech", ms) as loud noise (energy is what the cadence reads), ("quiet", ms), ("beep", ms)."""
    rng = np.random.default_rng(1)
    chunks = []
    for kind, ms in parts:
        n = ms * BYTES_PER_MS
        if kind == "speech":
            chunks.append(rng.normal(0, 3000, n))
        elif kind == "beep":
            chunks.append(8000 * np.sin(2 * np.pi * 1000 * np.arange(n) / 8000))
        else:
            chunks.append(rng.normal(0, 20, n))
    return linear_to_ulaw(np.clip(np.concatenate(chunks), -32768, 32767).astype(np.int16))


def _feed(gate: answer_gate.AnswerGate, audio: bytes, batch: int = 5 * FRAME_BYTES + 7):
    for offset in range(0, len(audio), batch):  # batches as the ring gives them, not cut at frames
        decision = gate.on_audio(audio[offset:offset + batch])
        if decision is not None:
            return decision
    return None


def test_a_persons_hello_lets_the_agent_speak_as_soon_as_the_person_waits():
    gate = answer_gate.AnswerGate()
    decision = _feed(gate, _line(("quiet", 300), ("speech", 600), ("quiet", 3000)))
    assert decision.action == answer_gate.START and decision.verdict.verdict == "human"
    assert decision.at_ms == decision.verdict.at_ms <= 300 + 600 + 700 + 60


def test_a_voicemail_is_hung_up_on_or_greeted_after_its_beep():
    line = _line(("quiet", 200), ("speech", 4000), ("quiet", 800), ("beep", 400), ("quiet", 3000))
    hang_up = _feed(answer_gate.AnswerGate(on_voicemail="hang_up"), line)
    assert (hang_up.action, hang_up.verdict.verdict) == (answer_gate.HANG_UP, "voicemail")
    greet = _feed(answer_gate.AnswerGate(on_voicemail="greet"), line)
    assert (greet.action, greet.verdict.verdict) == (answer_gate.START, "voicemail")
    assert greet.beep_at_ms is not None and 4900 <= greet.beep_at_ms <= 5100
    assert greet.at_ms >= greet.beep_at_ms + 150  # after the beep, never over it


def test_a_voicemail_without_a_beep_is_greeted_after_the_beep_wait():
    gate = answer_gate.AnswerGate(on_voicemail="greet")
    assert _feed(gate, _line(("quiet", 200), ("speech", 4000), ("quiet", 1000))) is None
    decision = gate.on_elapsed(gate.detector.verdict.at_ms + answer_gate.BEEP_WAIT_MS)
    assert decision.action == answer_gate.START and decision.beep_at_ms is None


def test_silence_waits_no_longer_than_max_wait_and_is_never_hung_up_on():
    gate = answer_gate.AnswerGate(max_wait_ms=2000)
    assert _feed(gate, _line(("quiet", 1000))) is None
    assert gate.on_elapsed(1500) is None  # the callee's frames stopped: the clock still bounds the wait
    decision = gate.on_elapsed(2000)
    assert (decision.action, decision.verdict.verdict, decision.at_ms) == (answer_gate.START, "unknown", 2000)


def test_the_gate_refuses_an_unknown_voicemail_action():
    with pytest.raises(ValueError, match="on_voicemail"):
        answer_gate.AnswerGate(on_voicemail="leave")


# --- the simulator's callees and its Calls API ----------------------------------------------------------


def test_callee_plans_are_seeded_and_cover_every_kind():
    assert callee_core.plan_callee("voicemail", 5) == callee_core.plan_callee("voicemail", 5)
    for kind in callee_core.KINDS:
        plan = callee_core.plan_callee(kind, 11)
        assert 1 <= plan.rings <= 5 and plan.answered == (kind in callee_core.ANSWERED_KINDS)
        statuses = [step.status for step in callee_core.status_steps(plan, ring_ms=100)]
        expected = {"busy": "busy", "no-answer": "no-answer", "failed": "failed"}.get(kind, "in-progress")
        assert statuses[0] == "initiated" and statuses[-1] == expected
    with pytest.raises(ValueError, match="callee kind"):
        callee_core.plan_callee("fax", 1)


def test_an_opt_out_callee_says_hello_then_asks_to_be_taken_off_the_list_once_the_agent_speaks():
    plan = callee_core.plan_callee(callee_core.OPT_OUT, 7)
    assert plan == callee_core.plan_callee(callee_core.OPT_OUT, 7) and plan.answered and plan.reply
    assert callee_core.OPT_OUT not in callee_core.KINDS  # not an answer class: the outbound demo's rotation is unchanged
    assert [step.status for step in callee_core.status_steps(plan, ring_ms=100)][-1] == "in-progress"
    hello, reply = _line(("speech", 400)), _line(("speech", 1200))
    audio = callee_core.callee_audio(plan, hello, reply)
    ulaw = np.frombuffer(audio.audio, dtype=np.uint8)
    reply_at = (plan.lead_ms + 400 + callee_core.OPT_OUT_REPLY_AFTER_MS) * BYTES_PER_MS
    assert audio.audio[reply_at:reply_at + len(reply)] == reply and audio.beep_at_ms is None
    assert len(set(ulaw[(plan.lead_ms + 500) * BYTES_PER_MS:reply_at - BYTES_PER_MS].tolist())) == 1  # quiet between
    with pytest.raises(ValueError, match="reply"):
        callee_core.callee_audio(plan, hello)
    languages = {callee_core.plan_callee(callee_core.OPT_OUT, seed).language for seed in range(40)}
    assert languages == {"en", "sv"}


def test_a_voicemails_line_has_its_beep_after_the_greeting():
    plan = callee_core.plan_callee("voicemail", 3)
    speech = _line(("speech", 2000))
    audio = callee_core.callee_audio(plan, speech)
    assert len(audio.audio) % FRAME_BYTES == 0 and audio.speech_ms == 2000
    assert audio.beep_at_ms == plan.lead_ms + 2000 + plan.gap_ms and 440 <= plan.beep_hz <= 2000
    with pytest.raises(ValueError, match="never answers"):
        callee_core.callee_audio(callee_core.plan_callee("busy", 3), speech)


def test_a_greetings_last_word_leaves_out_the_synthesisers_trailing_quiet():
    plan = callee_core.plan_callee("human", 5)
    audio = callee_core.callee_audio(plan, _line(("speech", 700), ("quiet", 300)))
    assert audio.speech_ms == 1000 and abs(audio.last_word_ms - (plan.lead_ms + 700)) <= 1


def test_a_persons_wait_runs_from_their_last_word_to_the_agents_first_frame():
    from types import SimpleNamespace

    from voicecore.outbound.outbound_demo import first_word_wait_ms
    core = SimpleNamespace(frames=[SimpleNamespace(arrival_ms=12_340.0)], send_origin_ms=10_000.0)
    assert first_word_wait_ms(SimpleNamespace(result=SimpleNamespace(core=core), last_word_ms=1_500)) == 840.0
    silent = SimpleNamespace(frames=[], send_origin_ms=10_000.0)  # the agent never spoke: no wait to report
    assert first_word_wait_ms(SimpleNamespace(result=SimpleNamespace(core=silent), last_word_ms=1_500)) is None
    assert first_word_wait_ms(SimpleNamespace(result=None, last_word_ms=1_500)) is None


def _create(form: list[tuple[str, str]], token: str = "tok") -> rest_core.RestOutcome:
    auth = "Basic " + base64.b64encode(f"{ACCOUNT}:{token}".encode()).decode()
    return rest_core.handle("POST", f"/2010-04-01/Accounts/{ACCOUNT}/Calls.json", {"authorization": auth},
                            urllib.parse.urlencode(form).encode(), CarrierCredentials(twilio_auth_token="tok"),
                            lambda carrier, call: False, now_s=0, new_call_sid=CALL)


def test_the_simulated_calls_api_takes_a_call_as_twilio_does():
    request = outbound.place_call_request(ACCOUNT, "tok", CALLEE, "+15005550006", url=NODE + "/twilio/voice?x=1",
                                          status_callback=NODE + "/twilio/call-status")
    outcome = _create(urllib.parse.parse_qsl(request.body.decode()))
    assert outcome.status == 201 and outcome.action == rest_core.CREATE
    assert json.loads(outcome.body)["sid"] == CALL and json.loads(outcome.body)["status"] == "queued"
    placed = outcome.placed
    assert (placed.to, placed.url, placed.status_events) == (CALLEE, NODE + "/twilio/voice?x=1",
                                                             ("initiated", "ringing", "answered", "completed"))
    assert _create([("To", CALLEE)], token="wrong").status == 401
    assert json.loads(_create([("From", "+15005550006"), ("Url", NODE)]).body)["code"] == 21201
    both = _create([("To", CALLEE), ("From", "+15005550006"), ("Url", NODE), ("Twiml", "<Response/>")])
    assert (both.status, both.placed) == (400, None)


def test_the_simulated_stream_passes_the_answer_documents_parameters_on():
    call = CarrierCall(CALL, "MZ" + "0" * 32, ACCOUNT, "tok-1", parameters=[("direction", "outbound"),
                                                                         ("session_token", "forged")])
    start = json.loads(call.opening_messages()[1])
    assert start["start"]["customParameters"] == {"session_token": "tok-1", "direction": "outbound"}


def test_the_callees_words_decide_as_soon_as_a_strong_phrase_is_heard():
    gate = answer_gate.AnswerGate()
    assert _feed(gate, _line(("quiet", 200), ("speech", 1500))) is None
    assert gate.on_words("Please state your", done=False) is None
    decision = gate.on_words(" name", done=False)
    assert (decision.action, decision.verdict.verdict, decision.verdict.reason) == (answer_gate.INTRODUCE, "screening", "words")
    assert decision.at_ms == gate.callee_ms  # timed at the callee audio heard so far


def test_the_worker_side_wait_counts_the_words_and_reports_once(monkeypatch):
    from workers.model.answer_wait import AnswerWait, listening_session

    session = json.loads(listening_session("gpt-4o-mini-transcribe"))["session"]
    detection = session["audio"]["input"]["turn_detection"]
    assert detection["create_response"] is False and detection["interrupt_response"] is False
    assert session["audio"]["input"]["transcription"] == {"model": "gpt-4o-mini-transcribe"}
    agent = AgentSpec(name="a", instructions="", flow=None, outbound_max_wait_ms=3000)
    wait = AnswerWait(CALL, agent)
    assert wait.feed(_line(("quiet", 200), ("speech", 1000)), now_ns=1_000_000_000) is None
    wait.on_words("For billing, press 2.", done=True)
    decision = wait.feed(b"", now_ns=1_300_000_000)
    assert decision.verdict.verdict == "ivr"
    note = wait.note(decision)
    assert (note["verdict"], note["reason"], note["transcript_events"], note["wall_ms"]) == ("ivr", "words", 1, 300)


def test_a_greeting_is_said_sentence_by_sentence_with_its_pauses():
    assert callee_core.sentences("Hi, this is Sam. Leave a message! Bye?  ") == ["Hi, this is Sam.", "Leave a message!",
                                                                              "Bye?"]
    plan = callee_core.plan_callee("ivr", 9)
    audio = callee_core.callee_audio(plan, [_line(("speech", 1000)), _line(("speech", 500))])
    assert audio.speech_ms == 1000 + callee_core.SENTENCE_GAP_MS + 500
    assert callee_core.SENTENCE_GAP_MS < answer_gate.AnswerGate().detector.settings.human_silence_ms  # never a hello


def test_the_agents_screening_and_ivr_actions():
    def decided(gate, text):
        _feed(gate, _line(("quiet", 200), ("speech", 1500)))
        return gate.on_words(text, done=True)

    assert decided(answer_gate.AnswerGate(), "Please state your name").action == answer_gate.INTRODUCE
    assert decided(answer_gate.AnswerGate(on_screening="hang_up"), "Please state your name").action == answer_gate.HANG_UP
    assert decided(answer_gate.AnswerGate(), "For billing, press 1").action == answer_gate.START
    assert decided(answer_gate.AnswerGate(on_ivr="hang_up"), "For billing, press 1").action == answer_gate.HANG_UP
    # a person is never hung up on, whatever the machine actions say
    gate = answer_gate.AnswerGate(on_screening="hang_up", on_ivr="hang_up")
    assert gate.on_carrier_amd("human", 1200).action == answer_gate.START
    assert decided(answer_gate.AnswerGate(on_ivr="dtmf"), "For billing, press 1").action == answer_gate.DTMF
    with pytest.raises(ValueError, match="on_ivr"):
        answer_gate.AnswerGate(on_ivr="press")
    with pytest.raises(ValueError, match="on_screening"):
        answer_gate.AnswerGate(on_screening="greet")


def test_a_carrier_beep_lets_a_greeting_agent_speak_at_once():
    gate = answer_gate.AnswerGate(on_voicemail="greet")
    _feed(gate, _line(("quiet", 200), ("speech", 3500)))
    decision = gate.on_carrier_amd("machine_end_beep", 3900)
    assert (decision.action, decision.verdict.verdict, decision.at_ms) == (answer_gate.START, "voicemail", 3900)


# --- the carrier's AMD -------------------------------------------------------------------------------


def test_twilios_async_amd_callback_is_verified_and_carries_answered_by():
    url = NODE + "/twilio/call-status"
    settings = types.SimpleNamespace(twilio_auth_token="tok", public_url=NODE)
    route = TWILIO.routes["/twilio/call-status"]

    def check(form, signature=None):
        body = urllib.parse.urlencode(form).encode()
        headers = {"x-twilio-signature": signature or compute_signature("tok", url, form)}
        return TWILIO.check_webhook(route, "POST", "/twilio/call-status", headers, body, settings, url, 0)

    amd = {"CallSid": CALL, "AccountSid": ACCOUNT, "AnsweredBy": "machine_end_beep", "MachineDetectionDuration": "4210"}
    ok = check(amd)
    assert isinstance(ok, AnswerRequest) and ok.kind == EVENT and ok.call_id == CALL
    assert ok.answered_by == "machine_end_beep" and ok.call_status is None  # no progress to keep in the ledger
    assert "answered by machine_end_beep" in ok.note
    assert check(amd, signature="AAAA").status == 403
    wrong = check({**amd, "AnsweredBy": "machine"})
    assert isinstance(wrong, Refusal) and wrong.status == 400
    # a status callback that carries AnsweredBy (Twilio adds it once AMD ran) passes it on too
    status = check({"CallSid": CALL, "AccountSid": ACCOUNT, "CallStatus": "in-progress", "SequenceNumber": "2",
                    "AnsweredBy": "human"})
    assert status.answered_by == "human" and status.call_status.status == "in-progress"


def test_synchronous_amd_comes_with_the_answer_webhook():
    url = NODE + "/twilio/voice"
    settings = types.SimpleNamespace(twilio_auth_token="tok", public_url=NODE)
    form = {"CallSid": CALL, "AccountSid": ACCOUNT, "From": "+15005550006", "To": CALLEE, "CallStatus": "in-progress",
            "Direction": "outbound-api", "AnsweredBy": "machine_end_silence"}
    body = urllib.parse.urlencode(form).encode()
    answer = TWILIO.check_webhook(TWILIO.routes["/twilio/voice"], "POST", "/twilio/voice",
                                  {"x-twilio-signature": compute_signature("tok", url, form)}, body, settings, url, 0)
    assert isinstance(answer, AnswerRequest) and answer.answered_by == "machine_end_silence"


def test_the_simulated_amd_is_plausible_in_value_and_time_and_sometimes_wrong_labelled():
    speech = bytes(linear_to_ulaw(np.full(2000 * BYTES_PER_MS, 4000, dtype=np.int16)))
    hello = bytes(linear_to_ulaw(np.full(600 * BYTES_PER_MS, 4000, dtype=np.int16)))
    seen = {"right": 0, "wrong": 0}
    for seed in range(60):
        for kind in ("human", "voicemail", "ivr"):
            plan = callee_core.plan_callee(kind, seed)
            audio = callee_core.callee_audio(plan, hello if kind == "human" else [speech, speech])
            for mode in ("Enable", "DetectMessageEnd"):
                amd = callee_core.carrier_amd(plan, audio, mode, seed)
                assert amd.right == ((amd.answered_by == "human") == (kind == "human"))
                seen["right" if amd.right else "wrong"] += 1
                if amd.answered_by == "human":
                    assert amd.at_ms == min(audio.last_word_ms, plan.lead_ms + 2400) + 1200
                elif mode == "Enable":
                    assert amd.answered_by == "machine_start" and amd.at_ms <= plan.lead_ms + 2400
                elif kind == "voicemail":
                    assert amd.answered_by == "machine_end_beep" and amd.at_ms == audio.beep_at_ms + plan.beep_ms
                else:
                    assert amd.answered_by == "machine_end_silence" and amd.at_ms > audio.last_word_ms
                assert amd == callee_core.carrier_amd(plan, audio, mode, seed)  # seeded
    assert 0.1 < seen["wrong"] / (seen["right"] + seen["wrong"]) < 0.3
    with pytest.raises(ValueError, match="machine_detection"):
        callee_core.carrier_amd(callee_core.plan_callee("human", 1), audio, "Yes", 1)


def test_the_simulated_calls_api_keeps_the_amd_callback():
    credentials = CarrierCredentials(twilio_auth_token="tok")
    form = {"To": CALLEE, "From": "+15005550006", "Url": NODE + "/twilio/voice", "StatusCallback": NODE + "/s",
            "MachineDetection": "DetectMessageEnd", "AsyncAmd": "true", "AsyncAmdStatusCallback": NODE + "/amd"}
    auth = "Basic " + base64.b64encode(f"{ACCOUNT}:tok".encode()).decode()
    outcome = rest_core.handle("POST", f"/2010-04-01/Accounts/{ACCOUNT}/Calls.json", {"authorization": auth},
                               urllib.parse.urlencode(form).encode(), credentials, lambda *_: True, now_s=0,
                               api_id="x", new_call_sid=CALL)
    placed = outcome.placed
    assert (placed.machine_detection, placed.async_amd, placed.amd_callback) == ("DetectMessageEnd", True, NODE + "/amd")


def test_a_screening_assistant_puts_the_call_through_after_the_agents_introduction():
    from voicecore.sim.screened_callee import ScreenedCallee

    class Core:  # what ScreenedCallee reads of the carrier simulator's call, and where its hello goes
        def __init__(self):
            self.agent_heard_until_ms, self.send_origin_ms, self.added = None, 1000.0, []

        def add_utterance(self, at_ms, audio):
            self.added.append((at_ms, audio))

    core, hello = Core(), b"\x00" * 800
    callee = ScreenedCallee(hello, greeting_end_ms=3000)
    assert callee(core, 2000, 3000) is False and not core.added  # nothing of the agent heard yet
    core.agent_heard_until_ms = 1000 + 3500.0  # the agent began after the greeting
    callee(core, 3500, 4500)
    core.agent_heard_until_ms = 1000 + 5000.0  # 1.5 s of introduction
    callee(core, 5000, 6000)
    assert not core.added  # the agent is still talking
    callee(core, 6300, 7300)  # 1.3 s quiet: put through
    assert core.added == [(6320, hello)] and callee.put_through_at_ms == 6320
    callee(core, 9000, 10000)
    assert len(core.added) == 1  # once

    short = ScreenedCallee(hello, greeting_end_ms=3000)
    core = Core()
    core.agent_heard_until_ms = 1000 + 3100.0
    short(core, 3100, 4100)
    short(core, 6000, 7000)  # a click, then quiet: no introduction, nobody comes on
    assert not core.added and short.put_through_at_ms is None


def test_the_outbound_demo_scores_whether_each_action_worked():
    from voicecore.outbound.outbound_demo import action_worked, score_actions, score_carrier_amd

    assert action_worked("voicemail", "hang_up", "rest_hangup", 0, False) is True
    assert action_worked("screening", "introduce", "carrier", 120, True) is True
    assert action_worked("screening", "introduce", "carrier", 120, False) is False
    assert action_worked("human", "start", "carrier", 300, False) is True
    assert action_worked("ivr", "start", "carrier", 0, False) is False
    assert action_worked("human", None, "carrier", 0, False) is None
    rows = [{"callee": "screening", "closed_by": "carrier", "action": "introduce", "action_worked": True,
             "carrier_amd": "machine_start", "carrier_amd_right": True, "carrier_amd_status": 204, "verdict": "screening"},
            {"callee": "human", "closed_by": "carrier", "action": "start", "action_worked": True,
             "carrier_amd": "machine_start", "carrier_amd_right": False, "carrier_amd_status": 204, "verdict": "human"},
            {"callee": "busy", "statuses": ["busy"]}]
    assert score_actions(rows) == {"screening": {"actions": {"introduce": 1}, "worked": 1, "n": 1},
                                   "human": {"actions": {"start": 1}, "worked": 1, "n": 1}}
    assert score_carrier_amd(rows) == {"sent": 2, "accepted": 2, "right": 1, "verdict_right_when_amd_wrong": 1,
                                       "verdict_right_when_amd_right": 1}


def test_an_agent_with_the_dtmf_tool_offers_send_dtmf_on_placed_calls_only_and_the_flow_runs_it_as_a_tool():
    import dataclasses

    from voicecore.agent.flow import AgentFlow
    from voicecore.agent.load import default_agent_dir, load_agent
    from voicecore.agent.spec import AgentSpec as Spec, BuiltinTool
    from voicecore.call.flow import ToolPlan
    from workers.model.answer_wait import SEND_DTMF

    started = messages.CallStarted(2, 7, CALL, "MZ" + "0" * 32, ACCOUNT)
    placed = call_fields.outbound_started(started, [("session_token", "t"), ("direction", "outbound"), ("callee", CALLEE)])
    agent = dataclasses.replace(load_agent(default_agent_dir()), outbound_dtmf_tool=True)
    assert SEND_DTMF not in agent_for_call(agent, started).flow.functions  # an inbound call: not offered
    offered = agent_for_call(agent, placed)
    function = offered.flow.functions[SEND_DTMF]
    assert function.tool == BuiltinTool(SEND_DTMF) and not function.writes
    assert all(SEND_DTMF in node.functions for node in offered.flow.nodes.values())
    assert Spec.from_dict(offered.to_dict()) == dataclasses.replace(offered, directory="", line_audio={})  # a record's header
    flow = AgentFlow(offered)
    plan = flow.on_tool_call(SEND_DTMF, '{"digits": "1w2"}')
    assert isinstance(plan, ToolPlan) and plan.name == SEND_DTMF  # run by the worker, through RunTool
    refused = flow.on_tool_call(SEND_DTMF, '{"digits": "1x"}')
    assert not isinstance(refused, ToolPlan) and "invalid_arguments" in refused.output
    plain = agent_for_call(load_agent(default_agent_dir()), placed)
    assert SEND_DTMF not in plain.flow.functions  # not opted in


def test_a_voicemail_message_is_the_flows_opening_scripted_gated_and_terminal_with_the_calls_fields():
    import dataclasses

    from voicecore.agent.flow import VOICEMAIL_MESSAGE, AgentFlow
    from voicecore.agent.load import default_agent_dir, load_agent
    from voicecore.call.flow import Say

    started = messages.CallStarted(2, 7, CALL, "MZ" + "0" * 32, ACCOUNT)
    placed = call_fields.outbound_started(started, [("session_token", "t"), ("direction", "outbound"),
                                                    ("callee", CALLEE), ("field.first_name", "Anna")])
    agent = dataclasses.replace(load_agent(default_agent_dir()), outbound_on_voicemail="message",
                                outbound_voicemail_message="Hi {first_name}, please call us back.")
    filled = agent_for_call(agent, placed)
    assert filled.outbound_voicemail_message == "Hi Anna, please call us back."
    step = AgentFlow(filled).start(VOICEMAIL_MESSAGE)
    assert isinstance(step, Say) and step.prompt_id == VOICEMAIL_MESSAGE and step.terminal
    assert step.text == "Hi Anna, please call us back." and step.policy == "scripted"  # gated whatever gate_prompts
    greeting = AgentFlow(filled).start()
    assert isinstance(greeting, Say) and greeting.prompt_id == "greeting"  # a person still hears the greeting
