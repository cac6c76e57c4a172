"""An agent test as a phone call, the pure parts: the simulated caller who says each line once the agent is
done answering (voicecore/sim/turn_caller.py), and the cutting of a recorded call into the test's turns as
the text channel's events (voicecore/chat/phone_turns.py), judged by the same judge as a chat."""

from __future__ import annotations

from voicecore.chat.agent_tests import judge_turn
from voicecore.chat.phone_turns import node_at, split_turns
from voicecore.sim.turn_caller import TurnCaller
from voicecore.store.summary import CallSummary, ToolCall, Transcript, Verdict

LINE = b"\x10" * 8000  # one second of a line


class FakeCore:
    """What the caller reads of the carrier simulator's call: its origin, when the agent was last heard."""

    def __init__(self) -> None:
        self.send_origin_ms = 1000.0
        self.agent_heard_until_ms: float | None = None
        self.added: list[tuple[int, int]] = []

    def add_utterance(self, at_ms: int, audio: bytes) -> None:
        self.added.append((at_ms, len(audio)))


class Call:
    """Ticks the caller every 20 ms of the call; ``agent(elapsed)``: True while the agent's audio arrives."""

    def __init__(self, caller: TurnCaller) -> None:
        self.caller, self.core, self.elapsed = caller, FakeCore(), 0

    def run(self, until_ms: int, agent=lambda elapsed: False) -> bool:
        while self.elapsed <= until_ms:
            if agent(self.elapsed):
                self.core.agent_heard_until_ms = self.core.send_origin_ms + self.elapsed
            if self.caller(self.core, self.elapsed, self.core.send_origin_ms + self.elapsed):
                return True
            self.elapsed += 20
        return False


def test_the_caller_waits_for_the_greeting_then_for_each_answer_and_hangs_up_after_the_last() -> None:
    caller = TurnCaller([LINE, LINE], quiet_ms=1000)
    call = Call(caller)
    greeting = lambda t: 200 <= t < 3000  # noqa: E731  (last heard at 2980)
    assert not call.run(3960, greeting)
    assert call.core.added == []  # 980 ms of quiet after the greeting: not yet
    assert not call.run(3980, greeting)
    assert call.core.added == [(4000, 8000)]  # said from the next frame on
    assert caller.said_ms == [(4000.0, 5000.0)] and caller.said_clock_ms == [5000.0]  # the clock: origin + at
    # the answer to the first line: from 5500 to 7000; nothing is said while it speaks nor before it
    answer = lambda t: 5500 <= t < 7000  # noqa: E731
    assert not call.run(7960, answer)
    assert len(call.core.added) == 1
    call.run(7980, answer)
    assert call.core.added[1][0] == 8000
    # the second answer never comes: the caller gives up after answer_wait_ms, then hangs up
    assert not call.run(9000 + caller.answer_wait_ms - 40)
    assert call.run(9000 + caller.answer_wait_ms + 20)
    assert caller.gave_up == [2] and caller.hung_up


def test_a_silent_agent_is_given_up_on_after_the_greeting_wait() -> None:
    caller = TurnCaller([LINE], quiet_ms=1000, greeting_wait_ms=3000)
    call = Call(caller)
    assert not call.run(3000)
    assert call.core.added == [(3020, 8000)] and caller.gave_up == [0]


def summary(outcome: str = "caller_hangup") -> CallSummary:
    return CallSummary(
        source="CA1.jsonl", call_sid="CA1", control="turns", flow="agent", agent="a", started_at=0.0,
        duration_ms=20_000, outcome=outcome, complete=True, turns=(),
        transcripts=(Transcript("agent", "Welcome to the clinic.", 300, spoken_ms=400, ref="r1"),
                     Transcript("caller", "Book a cleaning.", 5200, spoken_ms=5000),
                     Transcript("agent", "Shall I book a cleaning?", 6500, spoken_ms=6400, ref="r2",
                                prompt="confirm:book"),
                     Transcript("agent", "It costs 999 kronor.", 11_500, spoken_ms=11_400, ref="r3"),
                     Transcript("agent", "I'm sorry, I can't confirm that.", 12_500, spoken_ms=12_400, ref="r4"),
                     Transcript("agent", "Booked.", 13_000, spoken_ms=13_000, ref="r5")),
        tool_calls=(ToolCall("c1", "book", '{"service": "cleaning"}', 6000, True, True, '{"ok":true}', 11_000,
                             asked_ms=6100, answered_ms=10_900, answer="yes"),),
        verdicts=(Verdict(3, True, "a number is not in the knowledge base", "[]", 11_450, response_id="r3"),
                  Verdict(5, False, "", "[]", 12_900, response_id="r5"),
                  Verdict(5, False, "", "[]", 12_950, response_id="r5")),
        errors=())


TIMELINE = [(0, "reception"), (11_200, "booked")]


def test_a_call_is_cut_into_the_tests_turns_by_the_caller_lines() -> None:
    greeting, booking, yes = split_turns(summary(), TIMELINE, [5000.0, 10_000.0], [900, 1200], judges_greeting=True)
    assert [e.text for e in greeting.events if e.kind == "said"] == ["Welcome to the clinic."]
    assert greeting.node == "reception" and greeting.latency_ms is None
    assert [e.kind for e in booking.events if e.kind != "heard"] == ["function_call", "confirmation", "said"]
    assert booking.node == "reception" and booking.latency_ms == 900
    assert judge_turn({"function": "book", "arguments": {"service": "CLEANING"}, "confirmation": True,
                       "said": "Shall I book", "node": "reception"}, booking.events, booking.node, booking.latency_ms) == []
    # the answer the gate rejected was never heard; the safe line and the booked line were
    said = [e.text for e in yes.events if e.kind == "said"]
    assert said == ["I'm sorry, I can't confirm that.", "Booked."]
    assert yes.node == "booked" and [e.kind for e in yes.events].count("gate") == 2  # one per tag and verdict
    assert judge_turn({"never_said": "999", "ended": False, "max_latency_ms": 1000}, yes.events, yes.node,
                      yes.latency_ms) == ["expected the first line within 1000 ms; it took 1200 ms"]


def test_without_a_greeting_turn_the_first_line_is_turn_zero_and_the_end_is_in_the_last() -> None:
    turns = split_turns(summary("hangup:goodbye"), TIMELINE, [5000.0, 10_000.0], [900, None], judges_greeting=False)
    assert len(turns) == 2
    assert not any(e.kind == "ended" for e in turns[0].events)
    assert [e.text for e in turns[1].events if e.kind == "ended"] == ["goodbye"]
    assert judge_turn({"ended": True, "max_latency_ms": 5000}, turns[1].events, turns[1].node, None) == [
        "expected a line within 5000 ms; the agent said nothing"]
    transferred = split_turns(summary("transfer"), TIMELINE, [5000.0], [900], judges_greeting=False, transfer_to="+1555")
    assert judge_turn({"transferred": True}, transferred[0].events, "", 900) == []


def test_the_node_is_the_flows_at_the_turns_end() -> None:
    assert [node_at(TIMELINE, t) for t in (0, 11_199, 11_200, 99_999)] == ["reception", "reception", "booked", "booked"]
    assert node_at([], 5) == ""


# ---- the callers of an agent without demo.toml (voicecore demo --agent DIR) ------------------------------

def test_the_generic_caller_asks_what_the_knowledge_answers_and_says_goodbye():
    from pathlib import Path

    from voicecore.agent.load import load_agent
    from voicecore.chat.phone_calls import generic_test, knowledge_fact, webhook_variables

    root = Path(__file__).resolve().parents[2] / "examples"
    receptionist = load_agent(root / "receptionist")
    assert knowledge_fact(receptionist.knowledge_dir) == ("Opening hours", "Monday to Friday: 8 to 17.")
    test = generic_test(receptionist)
    assert [t.say for t in test.turns] == [None, "Hello, I have a question.", "What about opening hours?",
                                           "That is all, thank you. Goodbye."]
    assert test.turns[2].expect == {"said": ("Monday to Friday: 8 to 17.",)}
    assert test.turns[3].expect == {"ended": True}  # end_call is a function of its first node
    rules = {rule.when: rule for rule in test.rules}
    assert rules["opening hours"].answer == "Monday to Friday: 8 to 17."
    assert rules["goodbye"].call == "end_call"
    assert webhook_variables(receptionist) == {"RECEPTIONIST_API"}
    shop = generic_test(load_agent(root / "shop-assistant"))  # Swedish: its lines in Swedish
    assert shop.turns[1].say == "Hej, jag har en fråga." and shop.turns[3].say == "Det var allt, tack. Hej då."
    interview = generic_test(load_agent(root / "interview"))  # no knowledge folder: no question
    assert [t.say for t in interview.turns][1:] == ["Hello, I have a question.", "That is all, thank you. Goodbye."]
    assert {r.when: r.call for r in interview.rules}["goodbye"] == "end_interview"


def test_an_agents_callers_cycle_its_tests_to_the_calls_asked_for():
    from voicecore.chat.agent_tests import AgentTest, TurnSpec
    from voicecore.chat.phone_calls import AgentCallers

    tests = tuple(AgentTest(name, f"{name}.toml", (TurnSpec("hi", {}),), None, None, "API") for name in "ab")
    callers = AgentCallers("tests", tests, {"hi": b"\x10" * 800}, webhook_envs=frozenset({"HOOK"}))
    assert [t.name for t in callers.for_calls(1)] == ["a", "b"]  # every test at least once
    assert [t.name for t in callers.for_calls(5)] == ["a", "b", "a", "b", "a"]
    assert callers.envs == {"API", "HOOK"}
    assert callers.sim_config.caller_phrases == (("hi", b"\x10" * 800),)
