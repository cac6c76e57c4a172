"""A call's state carried to another node (voicecore/call/restore.py): written by the controller that served the
call, restored into a fresh one there, and the new session told what the old one knew."""

from __future__ import annotations

import json

import pytest
from test_controller_tools import BOOK_ARGS, IDLE, MS, agent, ev, runs, sent, speech, tool_call

from voicecore.agent.flow import AgentFlow
from voicecore.call import controller as C
from voicecore.call import flow as flows
from voicecore.call import restore
from voicecore.call.record import CallRecorder
from voicecore.privacy.records import RecordPrivacy
from voicecore.replay import replay
from workers.model.call_states import state_as_stored


def fresh(spec=None, **config) -> C.CallController:
    return C.CallController("CA1", flow=AgentFlow(spec or agent()), config=C.ControllerConfig(**config))


def served_call(confirm: bool = True) -> C.CallController:
    """A call that was greeted, heard the caller and answered, then had a function proposed."""
    c = fresh(agent(confirm=confirm))
    c.start(0)
    c.inflight = None
    c.conversation.said("assistant", "Hello, Smile Dental.")
    speech(c, "u1", "I would like a cleaning tomorrow at ten.", 2000)
    c.conversation.said("assistant", "Let me check that for you.")
    c.inflight = c.queued = None  # its answer came and went
    return c


def propose(c: C.CallController) -> None:
    """The model calls ``book`` (confirm first): the confirmation prompt is asked for, the action waits."""
    c.on_model_event(tool_call("book", BOOK_ARGS), 3000 * MS, IDLE)
    assert c.pending_action is not None and c.pending_action.plan.name == "book"


def through_json(state: dict) -> dict:
    return json.loads(json.dumps(state))  # what the store keeps is JSON text


def test_the_conversation_flow_node_and_pending_confirmation_come_back_on_a_fresh_controller():
    old = served_call()
    propose(old)  # "Shall I book a cleaning on 2026-11-26 at 10:00?" awaits a yes
    state = through_json(old.call_state())
    new = fresh()
    out = new.resume(90_000 * MS, False, state)
    events = sent(out)
    assert events[0]["type"] == "session.update"
    assert "You book appointments." in events[0]["session"]["instructions"]  # the node's session, not a blank one
    given = [(e["item"]["role"], e["item"]["content"][0]["text"]) for e in events if e["type"] == "conversation.item.create"]
    assert given == [("assistant", "Hello, Smile Dental."), ("user", "I would like a cleaning tomorrow at ten."),
                     ("assistant", "Let me check that for you.")]
    assert not any(e["type"] == "response.create" and e["response"]["metadata"].get("vc_prompt") == "greeting"
                   for e in events)  # never greeted twice
    assert new.pending_action is not None and new.pending_action.plan.name == "book"
    # the caller's yes on the new node runs the booking, with the arguments the old node proposed
    new.inflight = new.queued = None
    (run,) = runs(speech(new, "u9", "Yes, please.", 95_000))
    assert json.loads(run.arguments) == json.loads(BOOK_ARGS)


def test_a_write_done_on_the_old_node_is_not_done_again_on_the_new_one():
    old = served_call(confirm=False)
    out = old.on_model_event(tool_call("book", BOOK_ARGS), 3000 * MS, IDLE)
    (run,) = runs(out)
    old.on_tool_result(run.call_id, True, '{"booked": true}', 3500 * MS)
    state = through_json(old.call_state())
    assert state["writes"] and state["writes"][0][2] == '{"booked": true}'
    new = fresh(agent(confirm=False))
    new.resume(4000 * MS, False, state)
    new.inflight = new.queued = None
    out = new.on_model_event(tool_call("book", BOOK_ARGS, call_id="call_2"), 5000 * MS, IDLE)
    assert runs(out) == [] and new.stats.duplicate_writes_suppressed == 1


def test_a_flow_moved_to_another_node_is_restored_there():
    old = served_call(confirm=False)
    old.flow.restore_position({"node": "booked", "turns": 2, "transitions": 1})
    state = through_json(old.call_state())
    assert state["flow"] == {"node": "booked", "turns": 2, "transitions": 1}
    new = fresh(agent(confirm=False))
    update = sent(new.resume(0, False, state))[0]
    assert [t["name"] for t in update["session"]["tools"]] == ["end_call"]  # the booked node's functions
    assert new.flow.node_name == "booked" and new.flow.turns == 2


def test_an_answer_cut_off_or_words_left_unanswered_get_the_reconnect_line():
    old = served_call()
    old._enqueue(flows.Answer(), "flow", [])
    old.on_tick(8000 * MS, IDLE)
    assert old.inflight is not None
    req = str(old.inflight.req_id)
    old.on_model_event(ev(type="response.created", response={"id": "r1", "metadata": {"vc_req": req}}), 9000 * MS, IDLE)
    state = through_json(old.call_state())
    assert state["answering"]
    new = fresh()
    creates = [e for e in sent(new.resume(0, False, state)) if e["type"] == "response.create"]
    assert [e["response"]["metadata"]["vc_prompt"] for e in creates] == ["reconnect"]
    quiet = served_call()
    quiet.queued = quiet.inflight = None
    state = through_json(quiet.call_state())
    assert not state["answering"] and not state["words_open"]
    assert [e["type"] for e in sent(fresh().resume(0, False, state))
            if e["type"] == "response.create"] == []  # nothing was cut: the new session only listens


def test_the_state_key_changes_whenever_the_state_does():
    c = served_call()
    key = c.call_state_key()
    assert c.call_state_key() == key
    c.conversation.said("user", "Hello?")
    assert c.call_state_key() != key
    key = c.call_state_key()
    propose(c)
    assert c.call_state_key() != key


def test_a_state_of_another_format_or_a_node_the_flow_lacks_is_refused():
    with pytest.raises(ValueError, match="format"):
        fresh().resume(0, False, {"format": 99})
    state = through_json(served_call().call_state())
    state["flow"]["node"] = "basement"
    with pytest.raises(ValueError, match="basement"):
        fresh().resume(0, False, state)
    with pytest.raises(ValueError, match="state"):
        flows.ScriptedFlow().restore_position({"state": "nowhere"})


def test_the_scripted_flow_keeps_its_position_too():
    old = C.CallController("CA1")
    old.start(0)
    old.flow.after_played("greeting")
    state = through_json(old.call_state())
    new = C.CallController("CA1")
    new.resume(0, False, state)
    assert new.flow.state == "question"


def test_a_restored_call_replays_identically_from_the_record_the_new_node_writes():
    state = through_json(served_call().call_state())
    recorder = CallRecorder(fresh())
    recorder.resume(0, False, state)
    for t in range(20, 400, 20):
        recorder.on_tick(t * MS, IDLE)
    header, entries = json.loads(json.dumps(recorder.header)), json.loads(json.dumps(recorder.entries))
    assert entries[0]["k"] == "resume" and entries[0]["restored"] == state
    result = replay(header, entries)
    assert result.identical, result.divergence


def test_the_storage_tier_decides_what_of_the_state_reaches_the_store():
    c = served_call()
    c.conversation.said("user", "My card is 4111 1111 1111 1111 and mail me at anna@example.com")
    propose(c)
    state = through_json(c.call_state())
    assert state_as_stored(state, RecordPrivacy("everything")) is state
    redacted = state_as_stored(state, RecordPrivacy("redacted"))
    text = json.dumps(redacted["history"])
    assert "4111" not in text and "anna@example.com" not in text and "Smile Dental" in text
    assert redacted["pending"] == state["pending"]  # its arguments hold nothing the tier redacts
    bare = state_as_stored(state, RecordPrivacy("metadata_only"))
    assert bare["history"] == [] and bare["flow"] == state["flow"]
    # a confirmation whose arguments the tier would change is not carried: no tool runs on redacted arguments
    c2 = served_call()
    c2.pending_action = C.PendingAction("call_7", flows.ToolPlan("book", '{"email": "anna@example.com"}'), 0)
    assert "pending" not in state_as_stored(through_json(c2.call_state()), RecordPrivacy("redacted"))


def test_restore_reads_only_the_fields_it_knows():
    state = restore.snapshot(served_call(), 0)
    assert set(state) == {"format", "history", "flow", "writes", "facts", "answering", "words_open", "ended"}
