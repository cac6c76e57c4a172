"""The text channel's cores: the model simulator in text output modality (every event checked against the
`openai` package's own types), the controller fed typed messages, and ChatSession (flow, confirmations, gate)
against the simulator, both sans-I/O on a fake clock that jumps to each wakeup."""

from __future__ import annotations

import json

import pytest

from realtime_wire import validate_server
from voicecore.agent.spec import AgentSpec, FlowSpec, FunctionSpec, Message, NodeSpec, Webhook
from voicecore.call import controller as C
from voicecore.chat.session import ChatSession, chat_controller_config
from voicecore.realtime import events as ev
from voicecore.sim.model import ModelSession, SimConfig, SimTurn
from voicecore.validate.knowledge import KnowledgeBase
from workers.validator.core import ValidatorCore

MS = 1_000_000
BOOK_PARAMS = {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"],
               "additionalProperties": False}


def agent(gate_answers: str = "off") -> AgentSpec:
    hook = Webhook("http://127.0.0.1:9/appointments")
    functions = {
        "book": FunctionSpec("book", "Book an appointment.", BOOK_PARAMS, tool=hook, confirm=True,
                             confirm_prompt="Shall I book a {service}?", transitions={"success": "booked"}),
        "end_call": FunctionSpec("end_call", "End the call.", action="end_call"),
    }
    nodes = {
        "reception": NodeSpec("reception", role_messages=(Message("system", "You book appointments."),),
                              functions=("book", "end_call")),
        "booked": NodeSpec("booked", functions=("end_call",), say="Anything else?"),
    }
    return AgentSpec("receptionist", "You are the receptionist.", FlowSpec("reception", nodes, functions),
                     greeting="Hello, Smile Dental.", gate_answers=gate_answers)


class Chat:
    """A ChatSession and a simulator session wired together on a fake clock."""

    def __init__(self, rules=(), naming: str = "ga", spec: AgentSpec | None = None, knowledge=None) -> None:
        self.sim = ModelSession(SimConfig(naming=naming, turns=tuple(rules)), 0, 3, naming=naming)
        self.naming = naming
        self.knowledge = knowledge
        self.chat = ChatSession(spec or agent(), "CHAT1", C.ControllerConfig(), ValidatorCore(knowledge), naming=naming,
                                knowledge=knowledge)
        self.now = 0
        self.sent: list[dict] = []
        self.server_events: list[str] = []
        self.feed(self.sim.events_to_send())

    def feed(self, texts: list[str]) -> None:
        for text in texts:
            validate_server(self.naming, text)
            self.server_events.append(text)
            self.chat.model_event(text, self.now * MS)

    def exchange(self) -> None:
        while self.chat.to_model:
            out, self.chat.to_model = self.chat.to_model, []
            for text in out:
                self.sent.append(json.loads(text))
                self.sim.receive_client_event(text, self.now)
                self.feed(self.sim.events_to_send())

    def settle(self, limit_ms: int = 20_000) -> None:
        end = self.now + limit_ms
        while self.now < end:
            self.exchange()
            if self.chat.tools and self.sim.active_response_id is None:
                return  # the test runs the tool: its result comes when it says
            if not self.chat.busy and self.sim.active_response_id is None:
                return
            due = self.sim.next_wakeup_ms()
            self.now = due if due is not None and due > self.now else self.now + 50
            self.sim.advance(self.now)
            self.feed(self.sim.events_to_send())
            self.chat.tick(self.now * MS)
        raise AssertionError("the conversation did not settle")

    def start(self) -> None:
        self.chat.start(self.now * MS)
        self.settle()

    def say(self, text: str) -> None:
        self.now += 1000
        self.chat.caller_says(text, self.now * MS)
        self.settle()

    def said(self) -> list[str]:
        return [e.text for e in self.chat.events if e.kind == "said"]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.chat.events]


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_the_session_asks_for_text_and_the_simulator_writes_text_as_the_vendor_does(naming):
    c = Chat([SimTurn(when="hello", answer="Hi, how can I help?")], naming=naming)
    c.start()
    update = c.sent[0]
    assert update["type"] == "session.update"
    if naming == "ga":
        assert update["session"]["output_modalities"] == ["text"]
        assert update["session"]["audio"]["input"]["turn_detection"] is None
        assert update["session"]["audio"]["input"]["transcription"] is None
    else:
        assert update["session"]["modalities"] == ["text"] and update["session"]["turn_detection"] is None
    c.say("hello there")
    assert c.said() == ["Hello, Smile Dental.", "Hi, how can I help?"]
    types = [json.loads(t)["type"] for t in c.server_events]
    delta, done = ("response.output_text.delta", "response.output_text.done") if naming == "ga" else (
        "response.text.delta", "response.text.done")
    assert delta in types and done in types
    assert not any("audio" in t for t in types)  # no audio, no transcript: the session is text only
    final = [json.loads(t) for t in c.server_events if json.loads(t)["type"] == "response.done"][-1]["response"]
    assert final[("output_modalities" if naming == "ga" else "modalities")] == ["text"]
    assert final["output"][0]["content"] == [{"type": "output_text" if naming == "ga" else "text", "text": "Hi, how can I help?"}]
    # the caller's message reached the model as a user item before the response was asked for
    user = [i for i, e in enumerate(c.sent) if e["type"] == "conversation.item.create" and e["item"]["role"] == "user"]
    asked = [i for i, e in enumerate(c.sent) if e["type"] == "response.create"]
    assert user and asked[-1] > user[-1]
    assert c.sent[user[-1]]["item"]["content"] == [{"type": "input_text", "text": "hello there"}]


def test_a_typed_yes_runs_the_confirmed_tool_and_the_flow_moves_on():
    c = Chat([SimTurn(when="book", call="book", arguments='{"service": "cleaning"}', then="Booked.")])
    c.start()
    c.say("Please book a cleaning")
    assert c.said()[-1] == "Shall I book a cleaning?"
    assert "confirmation" in c.kinds() and not c.chat.tools
    c.say("Yes")
    (run,) = c.chat.tools
    assert run.name == "book" and json.loads(run.arguments) == {"service": "cleaning"}
    c.chat.tools.clear()
    c.chat.tool_result(run.call_id, True, '{"booked": true}', c.now * MS)
    c.settle()
    assert [e.text for e in c.chat.events if e.kind == "node"] == ["booked"]
    assert c.said()[-1] == "Anything else?"
    assert "confirmed" in c.kinds()


def test_a_typed_no_runs_nothing_and_says_the_declined_line():
    c = Chat([SimTurn(when="book", call="book", arguments='{"service": "cleaning"}', then="Booked.")])
    c.start()
    c.say("Please book a cleaning")
    c.say("No thanks")
    assert not c.chat.tools and "declined" in c.kinds()
    outputs = [e["item"]["output"] for e in c.sent if e["type"] == "conversation.item.create"
               and e["item"]["type"] == "function_call_output"]
    assert json.loads(outputs[-1]) == {"status": "not_done", "reason": "caller_declined"}
    assert c.chat.flow.node_name == "reception"


def test_an_answer_the_gate_rejects_is_never_shown_and_the_safe_line_comes_instead():
    knowledge = KnowledgeBase.from_documents({"prices.md": "# Prices\n\nBasic: 299 kr per month.\n"})
    c = Chat([SimTurn(when="basic", answer="Basic costs 777 kr per month.")], spec=agent(gate_answers="numbers"),
             knowledge=knowledge)
    c.start()
    c.say("What does basic cost?")
    assert not any("777" in line for line in c.said())
    assert c.said()[-1] == c.chat.controller.config.safe_line
    verdicts = [e.data for e in c.chat.events if e.kind == "gate"]
    assert any(not v["approved"] and "777" in v["reason"] for v in verdicts)


def test_a_message_while_a_reply_is_written_cuts_it_and_it_is_never_shown():
    c = Chat([SimTurn(when="tell me everything", answer=" ".join(["word"] * 60)),
              SimTurn(when="stop", answer="Sure.")])
    c.start()
    c.now += 1000
    c.chat.caller_says("tell me everything", c.now * MS)
    c.exchange()
    c.now += 250  # the first words are written, not the reply whole
    c.sim.advance(c.now)
    c.feed(c.sim.events_to_send())
    c.chat.caller_says("stop", c.now * MS)
    c.settle()
    assert c.said() == ["Hello, Smile Dental.", "Sure."]
    assert any(e["type"] == "response.cancel" for e in c.sent)
    assert any(e["type"] == "conversation.item.delete" for e in c.sent)  # the cut reply leaves the conversation


def test_the_text_channel_takes_no_silence_check_ins_and_waits_minutes_for_a_yes():
    config = chat_controller_config(C.ControllerConfig(silence_checkins_ms=(10_000,), confirm_timeout_ms=8000))
    assert config.silence_checkins_ms == () and config.debounce_quiet_ms == 0
    assert config.confirm_timeout_ms >= 300_000
    with pytest.raises(ValueError):
        C.CallController("CA1", modality="video")


def test_a_conversation_becomes_a_stored_call_of_carrier_chat():
    from voicecore.chat.summary import chat_summary

    c = Chat([SimTurn(when="book", call="book", arguments='{"service": "cleaning"}', then="Booked.")])
    c.start()
    c.say("Please book a cleaning")
    c.say("No thanks")
    summary = chat_summary(c.chat, "receptionist", 1_700_000_000.0, 0, c.now * MS)
    assert summary.carrier == "chat" and summary.call_sid == "CHAT1" and summary.outcome == "caller_hangup"
    assert [(t.speaker, t.text) for t in summary.transcripts] == [
        ("agent", "Hello, Smile Dental."), ("caller", "Please book a cleaning"), ("agent", "Shall I book a cleaning?"),
        ("caller", "No thanks"), ("agent", c.chat.flow.line("declined").text)]
    (call,) = summary.tool_calls
    assert call.name == "book" and call.answer == "no" and call.answered_by == "words" and not call.ran
    assert call.asked_ms is not None and call.answered_ms > call.asked_ms
    assert summary.duration_ms == c.now


@pytest.mark.parametrize("storage", ["redacted", "metadata_only"])
def test_a_stored_conversation_keeps_what_the_agents_storage_tier_allows(storage):
    """A /chat conversation reaches the store through the same tier as a phone call's record."""
    from voicecore.chat.summary import chat_summary
    from voicecore.privacy.records import RecordPrivacy

    c = Chat([SimTurn(when="book", call="book", arguments='{"service": "cleaning", "phone": "+46 70 123 45 67"}',
                      then="Booked.")])
    c.start()
    c.say("Please book a cleaning, my number is +46 70 123 45 67")
    c.say("No thanks")
    summary = chat_summary(c.chat, "receptionist", 1_700_000_000.0, 0, c.now * MS,
                           privacy=RecordPrivacy(storage, ("en",)))
    kept = json.dumps([[t.text for t in summary.transcripts], [(t.arguments, t.output) for t in summary.tool_calls]])
    assert "123 45 67" not in kept and "701234567" not in kept
    caller = [t.text for t in summary.transcripts if t.speaker == "caller"]
    assert len(caller) == 2  # the turns are kept, with their text as the tier stores it
    if storage == "metadata_only":
        assert caller == ["", ""]
    else:
        assert caller[0].startswith("Please book a cleaning") and caller[1] == "No thanks"
