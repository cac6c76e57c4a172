"""The controller with an agent's flow: tools off the call's path, de-duplication, confirmations, fillers,
node transitions. One input at a time on a fake clock (no sleeps); the flow is built from an AgentSpec."""

from __future__ import annotations

import json

import pytest

from voicecore.agent import actions
from voicecore.agent.flow import AgentFlow
from voicecore.agent.spec import AgentSpec, FlowSpec, FunctionSpec, Message, NodeSpec, Webhook
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder
from voicecore.replay import replay

MS = 1_000_000
IDLE = C.IDLE_PLAYOUT
BOOK_PARAMS = {"type": "object", "properties": {"service": {"type": "string"}, "date": {"type": "string"},
                                                 "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}},
               "required": ["service", "date", "time"], "additionalProperties": False}
BOOK_ARGS = '{"time": "10:00", "service": "cleaning", "date": "2026-11-26"}'


def agent(confirm: bool = True, transitions: dict | None = None) -> AgentSpec:
    hook = Webhook("http://127.0.0.1:9/appointments")
    functions = {
        "book": FunctionSpec("book", "Book an appointment.", BOOK_PARAMS, tool=hook, confirm=confirm,
                             confirm_prompt="Shall I book a {service} on {date} at {time}?",
                             transitions=transitions or {}),
        "lookup": FunctionSpec("lookup", "Look something up.", tool=hook, writes=False),
        "end_call": FunctionSpec("end_call", "End the call.", action="end_call"),
    }
    nodes = {
        "reception": NodeSpec("reception", role_messages=(Message("system", "You book appointments."),),
                              functions=("book", "lookup", "end_call")),
        "booked": NodeSpec("booked", task_messages=(Message("system", "Say goodbye kindly."),), functions=("end_call",),
                           context_strategy="task"),
    }
    return AgentSpec("receptionist", "You are the receptionist of Smile Dental.", FlowSpec("reception", nodes, functions),
                     greeting="Hello, Smile Dental.", transfer_to="+15550123")


def ev(**fields):
    return json.dumps(fields)


def sent(actions_):
    return [json.loads(a.text) for a in actions_ if isinstance(a, C.SendToModel)]


def tool_call(name, arguments, call_id="call_1", rid="r9"):
    return ev(type="response.function_call_arguments.done", response_id=rid, item_id="fc_" + call_id, call_id=call_id,
              name=name, arguments=arguments)


def controller(spec: AgentSpec | None = None, **config) -> C.CallController:
    c = C.CallController("CA1", flow=AgentFlow(spec or agent()), config=C.ControllerConfig(**config))
    c.start(0)
    c.inflight = None  # the greeting's request is not the point here
    return c


def runs(out):
    return [a for a in out if isinstance(a, C.RunTool)]


def test_session_update_declares_the_nodes_functions_and_the_agents_voice():
    c = C.CallController("CA1", flow=AgentFlow(agent()), config=C.ControllerConfig(voice="sage"))
    update = sent(c.start(0))[0]
    session = update["session"]
    assert [t["name"] for t in session["tools"]] == ["book", "lookup", "end_call"] and session["tool_choice"] == "auto"
    assert session["audio"]["output"]["voice"] == "sage"
    assert session["instructions"].startswith("You are the receptionist") and "You book appointments." in session["instructions"]


def test_a_tool_runs_off_the_path_and_its_result_goes_back_then_the_agent_speaks_after_the_debounce():
    c = controller(agent(confirm=False))
    out = c.on_model_event(tool_call("lookup", '{"q": 1}'), 1000 * MS, IDLE)
    (run,) = runs(out)
    assert (run.call_id, run.name, run.key) == ("call_1", "lookup", actions.idempotency_key("CA1", "lookup", '{"q": 1}'))
    assert sent(out) == []  # nothing goes to the model until the result is in
    out = c.on_tool_result("call_1", True, '{"found": 3}', 1400 * MS)
    assert sent(out)[0] == {"type": "conversation.item.create",
                            "item": {"type": "function_call_output", "call_id": "call_1", "output": '{"found": 3}'}}
    assert sent(c.on_tick(2800 * MS, IDLE)) == []  # 1.4 s of quiet: the debounce still waits
    (create,) = sent(c.on_tick(2900 * MS, IDLE))
    assert create["type"] == "response.create"
    assert c.queued is None and c.inflight is not None and c.inflight.facts == '{"found": 3}'


def test_a_slow_tool_gets_one_filler_line_and_an_unsaid_filler_is_dropped_when_the_result_comes():
    c = controller(agent(confirm=False), filler_after_ms=1000)
    c.on_model_event(tool_call("lookup", "{}"), 0, IDLE)
    (create,) = sent(c.on_tick(1000 * MS, IDLE))
    assert create["response"]["metadata"]["vc_prompt"] == "filler" and c.stats.fillers == 1
    c.inflight = None  # as if the filler's response had come and gone
    c.on_tick(3000 * MS, IDLE)
    assert c.stats.fillers == 1  # never twice for one tool run
    c2 = controller(agent(confirm=False), filler_after_ms=1000)
    c2.on_model_event(tool_call("lookup", "{}"), 0, IDLE)
    c2.caller_speaking = True  # the filler waits for the caller ...
    c2.on_tick(1000 * MS, IDLE)
    assert c2.queued is not None and c2.queued.source == "filler"
    c2.on_tool_result("call_1", True, "{}", 1100 * MS)  # ... and the result overtakes it: it is never said
    assert c2.queued is None and c2.stats.requests_dropped == 1


def test_the_same_write_within_the_window_is_not_run_twice_but_errors_stay_retryable():
    c = controller(agent(confirm=False), dedupe_ms=30_000)
    spec_args = '{"date": "2026-11-26", "service": "cleaning", "time": "10:00"}'
    plan = C.flows.ToolPlan("book", actions.canonical_arguments(spec_args), writes=True)
    out: list = []
    c._run_tool("call_1", plan, out)
    assert len(runs(out)) == 1
    c.on_tool_result("call_1", False, '{"error": {"type": "timeout"}}', 100 * MS)  # an error: not remembered
    out = []
    c._run_tool("call_2", plan, out)
    assert len(runs(out)) == 1
    c.on_tool_result("call_2", True, '{"booked": true}', 200 * MS)
    out = []
    c.now_ns = 10_000 * MS
    c._run_tool("call_3", plan, out)
    assert runs(out) == [] and c.stats.duplicate_writes_suppressed == 1
    assert sent(out)[0]["item"] == {"type": "function_call_output", "call_id": "call_3", "output": '{"booked": true}'}
    out = []
    c.now_ns = 30_300 * MS  # the window is over: it runs again
    c._run_tool("call_4", plan, out)
    assert len(runs(out)) == 1


def speech(c, item, words, t_ms, playout=IDLE):
    c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=t_ms, item_id=item), t_ms * MS, playout)
    c.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=t_ms + 1300, item_id=item), (t_ms + 1300) * MS, playout)
    return c.on_model_event(ev(type="conversation.item.input_audio_transcription.completed", item_id=item, content_index=0,
                               transcript=words), (t_ms + 1500) * MS, playout)


def propose(c) -> None:
    out = c.on_model_event(tool_call("book", BOOK_ARGS), 1000 * MS, IDLE)
    assert runs(out) == [] and c.pending_action is not None
    (create,) = [e for e in sent(out) if e["type"] == "response.create"]
    # the prompt is scripted from the arguments: every number in it is one of theirs
    # ... and said with the agent's instructions in force (a response's own instructions replace the session's)
    instructions = create["response"]["instructions"]
    assert instructions.endswith('\n\nSay exactly: "Shall I book a cleaning on 2026-11-26 at 10:00?"')
    assert instructions.startswith(c.core.instructions.strip()) and c.core.instructions.strip()
    c.inflight = None


def test_a_confirmed_action_runs_only_after_a_spoken_yes():
    c = controller()
    propose(c)
    assert runs(c.on_tick(5000 * MS, IDLE)) == []
    out = speech(c, "u1", "Yes, please.", 6000)
    (run,) = runs(out)
    assert run.arguments == actions.canonical_arguments(BOOK_ARGS)
    assert (c.stats.actions_proposed, c.stats.actions_confirmed, c.stats.actions_declined) == (1, 1, 0)


@pytest.mark.parametrize("words", ["No, thank you.", "Nej tack."])
def test_a_no_drops_the_action_the_model_is_told_and_the_caller_hears_the_declined_line(words):
    c = controller()
    propose(c)
    out = speech(c, "u1", words, 6000)
    assert runs(out) == [] and c.pending_action is None and c.stats.actions_declined == 1
    (output,) = [e for e in sent(out) if e["type"] == "conversation.item.create"]
    assert json.loads(output["item"]["output"]) == {"status": "not_done", "reason": "caller_declined"}
    said = c.queued or c.inflight
    assert said is not None and said.step.prompt_id == "declined"


def test_dtmf_one_is_a_yes_and_another_key_a_no():
    c = controller()
    propose(c)
    assert len(runs(c.on_dtmf("1", 4000 * MS))) == 1
    c2 = controller()
    propose(c2)
    assert runs(c2.on_dtmf("5", 4000 * MS)) == [] and c2.stats.actions_declined == 1


def test_no_answer_drops_the_action_after_the_timeout_from_when_the_prompt_played():
    c = controller(confirm_timeout_ms=8000)
    propose(c)
    c.pending_action.played_ns = 3000 * MS
    c.on_tick(10_900 * MS, IDLE)
    assert c.pending_action is not None
    out = c.on_tick(11_000 * MS, IDLE)
    assert c.pending_action is None and c.stats.actions_timed_out == 1 and runs(out) == []
    assert json.loads(sent(out)[0]["item"]["output"])["reason"] == "no_confirmation"


def test_a_repeated_yes_within_thirty_seconds_never_runs_it_twice():
    c = controller()
    propose(c)
    (run,) = runs(speech(c, "u1", "Yes.", 6000))
    c.on_tool_result(run.call_id, True, '{"booked": true}', 8000 * MS)
    # the model asks again with the same arguments (real models do): not proposed again, not run again
    out = c.on_model_event(tool_call("book", BOOK_ARGS, call_id="call_2"), 12_000 * MS, IDLE)
    assert runs(out) == [] and c.pending_action is None and c.stats.duplicate_writes_suppressed == 1
    assert sent(out)[0]["item"] == {"type": "function_call_output", "call_id": "call_2", "output": '{"booked": true}'}
    c.inflight = None
    out = speech(c, "u2", "Yes, please.", 14_000)  # a second yes is only a turn now
    assert runs(out) == [] and c.stats.actions_confirmed == 1 and c.stats.actions_proposed == 1


def test_a_second_proposal_while_one_waits_replaces_it():
    c = controller()
    propose(c)
    other = BOOK_ARGS.replace("10:00", "11:00")
    out = c.on_model_event(tool_call("book", other, call_id="call_2"), 2000 * MS, IDLE)
    outputs = [e for e in sent(out) if e["type"] == "conversation.item.create"]
    assert json.loads(outputs[0]["item"]["output"])["reason"] == "superseded" and outputs[0]["item"]["call_id"] == "call_1"
    assert c.pending_action.call_id == "call_2" and c.stats.actions_proposed == 2


def test_words_that_are_neither_drop_the_action_and_are_answered_as_a_turn():
    c = controller()
    propose(c)
    out = speech(c, "u1", "Actually, what time do you open on Saturdays?", 6000)
    assert runs(out) == [] and c.stats.actions_declined == 1
    assert json.loads(sent(out)[0]["item"]["output"])["reason"] == "caller_moved_on"


def test_a_yes_followed_at_once_by_more_words_is_still_a_yes_and_the_rest_is_the_next_turn():
    c = controller()
    propose(c)
    ev_ = lambda kind, item, t, **f: c.on_model_event(ev(type=kind, item_id=item, **f), t * MS, IDLE)  # noqa: E731
    ev_("input_audio_buffer.speech_started", "u1", 6000, audio_start_ms=6000)
    ev_("input_audio_buffer.speech_stopped", "u1", 7300, audio_end_ms=7000)
    ev_("input_audio_buffer.speech_started", "u2", 7600, audio_start_ms=7600)  # the caller goes on ...
    out = ev_("conversation.item.input_audio_transcription.completed", "u1", 7900, content_index=0, transcript="Ja, gärna.")
    (run,) = runs(out)  # ... the yes is read on its own, at once
    assert (c.stats.actions_confirmed, c.stats.actions_declined) == (1, 0)
    ev_("input_audio_buffer.speech_stopped", "u2", 9500, audio_end_ms=9000)
    ev_("conversation.item.input_audio_transcription.completed", "u2", 9700, content_index=0,
        transcript="Vad kostar Premium per månad?")
    asked = c.queued or c.inflight  # the question is answered (asked for at once when nothing else plays)
    assert asked is not None and asked.question == "Vad kostar Premium per månad?"


def test_invalid_arguments_are_refused_before_any_confirmation_or_run():
    c = controller()
    out = c.on_model_event(tool_call("book", '{"service": "cleaning", "date": "x", "time": "ten"}'), 1000 * MS, IDLE)
    assert runs(out) == [] and c.pending_action is None
    error = json.loads(sent(out)[0]["item"]["output"])["error"]
    assert error["type"] == "invalid_arguments" and "time" in error["message"]


def test_a_tool_error_gives_the_model_a_structured_error_and_the_caller_a_spoken_line():
    c = controller(agent(confirm=False))
    c.on_model_event(tool_call("lookup", "{}"), 0, IDLE)
    out = c.on_tool_result("call_1", False, '{"error": {"type": "timeout", "message": "no answer in 5 s"}}', 5000 * MS)
    assert json.loads(sent(out)[0]["item"]["output"])["error"]["type"] == "timeout"
    assert c.inflight is not None and c.inflight.step.prompt_id == "tool_error"


def test_a_transition_reconfigures_the_session_and_applies_the_task_strategy_before_the_next_request():
    c = controller(agent(confirm=False, transitions={"success": "booked"}))
    for item in ("u1", "a1"):
        c.on_model_event(ev(type="conversation.item.added", item={"id": item, "type": "message", "role": "user"}), 10 * MS, IDLE)
    c.on_model_event(tool_call("book", BOOK_ARGS), 1000 * MS, IDLE)
    out = c.on_tool_result("call_1", True, '{"booked": true}', 1500 * MS)
    events = sent(out)
    assert [e["type"] for e in events[:2]] == ["conversation.item.create", "session.update"]
    assert [t["name"] for t in events[1]["session"]["tools"]] == ["end_call"]
    assert c.flow.node_name == "booked" and c.stats.transitions == 1
    out = c.on_tick(3100 * MS, IDLE)  # the debounce ends: history deleted, task message added, then the request
    types = [(e["type"], e.get("item_id") or e.get("item", {}).get("role")) for e in sent(out)]
    assert types == [("conversation.item.delete", "u1"), ("conversation.item.delete", "a1"),
                     ("conversation.item.create", "system"), ("response.create", None)]


def test_end_call_function_says_goodbye_and_hangs_up_after_it_played():
    c = controller()
    out = c.on_model_event(tool_call("end_call", "{}"), 0, IDLE)
    assert runs(out) == [] and c.inflight.step.prompt_id == "goodbye" and c.inflight.step.terminal


def test_a_function_of_another_node_gets_an_error():
    c = controller(agent(confirm=False, transitions={"success": "booked"}))
    c.on_model_event(tool_call("book", BOOK_ARGS), 0, IDLE)
    c.on_tool_result("call_1", True, "{}", 100 * MS)
    out = c.on_model_event(tool_call("lookup", "{}", call_id="call_2"), 200 * MS, IDLE)
    assert runs(out) == [] and json.loads(sent(out)[0]["item"]["output"])["error"]["type"] == "unknown_function"


def test_a_call_with_tools_and_a_confirmation_replays_identically_from_its_record():
    recorder = CallRecorder(C.CallController("CA1", flow=AgentFlow(agent()), config=C.ControllerConfig()))
    recorder.start(0)
    recorder.on_model_event(ev(type="response.created", response={"id": "r1", "metadata": {"vc_req": "1"}}), 50 * MS, IDLE)
    recorder.on_model_event(tool_call("book", BOOK_ARGS, rid="r1"), 100 * MS, IDLE)
    recorder.on_model_event(ev(type="response.done", response={"id": "r1", "status": "completed"}), 120 * MS, IDLE)
    for t in range(140, 6000, 20):
        recorder.on_tick(t * MS, IDLE)
    recorder.on_dtmf("1", 6000 * MS)
    run = next(a for e in recorder.entries if e["k"] == "out" and (a := e["a"])["type"] == "RunTool")
    recorder.on_tool_result(run["call_id"], True, '{"booked": true}', 6500 * MS)
    header = json.loads(json.dumps(recorder.header))
    entries = json.loads(json.dumps(recorder.entries))
    assert header["flow"] == "agent" and header["flow_args"]["spec"]["name"] == "receptionist"
    assert any(e["k"] == "tool" for e in entries)
    result = replay(header, entries)
    assert result.identical, result.divergence
    assert result.statistics["actions_confirmed"] == 1 and result.statistics["tools_run"] == 1


def recorded_call_with_a_tool():
    recorder = CallRecorder(C.CallController("CA1", flow=AgentFlow(agent(confirm=False)), config=C.ControllerConfig()))
    recorder.start(0)
    recorder.on_model_event(ev(type="response.created", response={"id": "r1", "metadata": {"vc_req": "1"}}), 50 * MS, IDLE)
    recorder.on_model_event(tool_call("book", BOOK_ARGS, rid="r1"), 100 * MS, IDLE)
    recorder.on_tool_result("call_1", True, '{"booked": true}', 600 * MS)
    for t in range(620, 3000, 20):
        recorder.on_tick(t * MS, IDLE)
    return json.loads(json.dumps(recorder.header)), json.loads(json.dumps(recorder.entries))


def test_a_record_made_before_keys_named_the_call_still_replays():
    header, entries = recorded_call_with_a_tool()
    (run,) = [e["a"] for e in entries if e["k"] == "out" and e["a"]["type"] == "RunTool"]
    assert run["key"] == actions.idempotency_key("CA1", "book", run["arguments"])
    run["key"] = actions.call_free_idempotency_key("book", run["arguments"])  # as the older version wrote it
    result = replay(header, entries)
    assert result.identical, result.divergence


def test_a_record_whose_key_differs_otherwise_diverges():
    header, entries = recorded_call_with_a_tool()
    (run,) = [e["a"] for e in entries if e["k"] == "out" and e["a"]["type"] == "RunTool"]
    run["key"] = actions.idempotency_key("CA2", "book", run["arguments"])  # another call's key
    result = replay(header, entries)
    assert not result.identical and result.divergence.expected["type"] == "RunTool"


def test_confirmation_words_in_english_and_swedish():
    answer = actions.confirmation_answer
    assert [answer(w) for w in ("Yes, please.", "Ja, gärna.", "No, thank you.", "Nej tack.", "yes no wait", "hmm",
                                "Yes, but make it on Friday at noon instead please")] == \
        ["yes", "yes", "no", "no", "no", "", ""]


def test_the_prompt_takes_its_numbers_from_the_arguments_only():
    assert actions.render_prompt("Call {phone} {when}?", '{"phone": "+46 70 123 45 67", "when": "imorgon"}') == \
        "Call +46 70 123 45 67 imorgon?"
    assert actions.render_prompt("Call {phone}?", '{"when": "x"}') is None
    assert actions.idempotency_key("CA1", "f", '{"a": 1, "b": 2}') == actions.idempotency_key("CA1", "f", '{"b":2,"a":1}')


def test_two_calls_writing_the_same_action_get_two_keys_and_each_call_keeps_its_own():
    arguments = '{"date": "2026-11-26", "service": "cleaning", "time": "10:00"}'
    plan = C.flows.ToolPlan("book", actions.canonical_arguments(arguments), writes=True)
    keys = {}
    for sid in ("CA1", "CA2"):
        c = C.CallController(sid, flow=AgentFlow(agent(confirm=False)), config=C.ControllerConfig(dedupe_ms=30_000))
        out: list = []
        c._run_tool("call_1", plan, out)
        (first,) = runs(out)
        c.on_tool_result("call_1", False, '{"error": {"type": "timeout"}}', 100 * MS)
        out = []
        c._run_tool("call_2", plan, out)  # the model asks again after an error: the same action, the same key
        (again,) = runs(out)
        assert again.key == first.key == actions.idempotency_key(sid, "book", arguments)
        keys[sid] = first.key
    assert keys["CA1"] != keys["CA2"]


def test_the_post_tool_debounce_waits_while_the_caller_speaks_even_before_their_words_come():
    c = controller(agent(confirm=False))
    c.on_model_event(tool_call("lookup", "{}"), 0, IDLE)
    c.on_tool_result("call_1", True, "{}", 100 * MS)
    c.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=500, item_id="u1"), 500 * MS, IDLE)
    for t in range(520, 3000, 20):  # 2.5 s of speech and no transcript yet: not quiet
        c.on_tick(t * MS, IDLE)
    assert c.debounce.waiting and c.stats.debounce_flushes == 0
    c.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=3000, item_id="u1"), 3000 * MS, IDLE)
    c.on_model_event(ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0,
                        transcript="and one more thing"), 3200 * MS, IDLE)
    assert c.stats.debounce_flushes == 0
    (create,) = [e for e in sent(c.on_tick(4700 * MS, IDLE)) if e["type"] == "response.create"]  # 1.5 s after the words
    assert c.stats.debounce_flushes == 1 and c.inflight.question == "and one more thing"
