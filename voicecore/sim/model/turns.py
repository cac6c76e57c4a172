"""Scripted caller turns: which `SimTurn` a response answers, and the function calls it makes.

Owns the simulated model's memory of its rules over one session: which rule has answered which caller
item, the calls it has issued (call_id -> rule, calls still to repeat), the follow-up a function's output
asks for, and the plan of a function call's argument deltas. Decisions are made in two steps, `choose`
(pure) and `commit` (after the response was accepted and did not fail), so a refused or failed
response.create uses no rule up. Knows nothing of events or items; the session feeds it words and ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voicecore.sim.model.config import SimTurn
from voicecore.sim.model.rng import SplitMix64

# a function call's argument deltas go out this many ms apart (drawn per delta, inclusive): a few tens
# of ms for a call, like the audio deltas' bursts
ARGUMENT_GAP_MS = (2, 9)
# after a spoken preamble, the function_call item starts this many ms after the preamble's last delta
CALL_AFTER_PREAMBLE_MS = (20, 60)


@dataclass(frozen=True, slots=True)
class TurnAction:
    """What the next response does because of a rule."""

    rule: int  # index into SimConfig.turns
    text: str  # spoken transcript: the answer, the `then`, or the preamble before a call ("" for none)
    call: str = ""  # the function to call ("" : just speak `text`)
    arguments: str = "{}"
    repeats_left: int = 0  # calls still to repeat after this one's output
    user_item_id: str | None = None  # the caller item this answers (None: a follow-up of a function output)


@dataclass(slots=True)
class _IssuedCall:
    rule: int
    repeats_left: int


@dataclass(slots=True)
class TurnBook:
    """One session's state of its scripted turns."""

    turns: tuple[SimTurn, ...]
    answered: set[tuple[str, int]] = field(default_factory=set)  # (user item id, rule)
    calls: dict[str, _IssuedCall] = field(default_factory=dict)  # call_id -> the rule that made it
    followup: _IssuedCall | None = None  # set by a known function output, used by the next response

    def choose(self, user_item: tuple[str, str | None] | None, callable_names: frozenset[str]) -> TurnAction | None:
        """The rule action for a response now: the follow-up of a function output if one waits, else the
        first rule whose `when` is in the last caller item's words and that has not answered that item.
        `callable_names`: the functions the model may call now (declared tools, unless tool_choice is none)."""
        if self.followup is not None:
            rule_index = self.followup.rule
            turn = self.turns[rule_index]
            if self.followup.repeats_left > 0 and turn.call in callable_names:
                return TurnAction(rule_index, "", turn.call, turn.arguments, self.followup.repeats_left - 1)
            return TurnAction(rule_index, turn.then)
        if user_item is None:
            return None
        item_id, words = user_item
        if not words:
            return None
        folded = words.casefold()
        for rule_index, turn in enumerate(self.turns):
            if (item_id, rule_index) in self.answered or turn.when.casefold() not in folded:
                continue
            if turn.call and turn.call in callable_names:
                return TurnAction(rule_index, turn.preamble, turn.call, turn.arguments, turn.repeat_call, item_id)
            # a real model calls only declared tools: an undeclared call falls back to the answer
            return TurnAction(rule_index, turn.answer, user_item_id=item_id)
        return None

    def commit(self, action: TurnAction, call_id: str | None) -> None:
        """The response of `action` started (and did not fail): use the rule up, remember its call."""
        if action.user_item_id is None:
            self.followup = None
        else:
            self.answered.add((action.user_item_id, action.rule))
        if call_id is not None:
            self.calls[call_id] = _IssuedCall(action.rule, action.repeats_left)

    def output_received(self, call_id: str) -> None:
        """A function_call_output for `call_id` came in: the next response follows it up (if a rule made it)."""
        issued = self.calls.get(call_id)
        if issued is not None:
            self.followup = issued

    def caller_spoke(self) -> None:
        """A new caller item: a function output waiting for its follow-up is answered by that turn instead."""
        self.followup = None


def argument_chunks(arguments: str, size: int) -> list[str]:
    """The argument deltas, `size` characters each (the last may be shorter); one empty delta for ""."""
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def plan_call(start_ms: int, chunks: int, rng: SplitMix64) -> list[tuple[int, int, str, int]]:
    """Steps (due_ms, order, kind, index) of a function call that starts at `start_ms`: the item, its
    argument deltas, the arguments' done cascade and response.done. The orders sort after a spoken
    preamble's steps (0-4) when due at once."""
    steps: list[tuple[int, int, str, int]] = [(start_ms, 5, "call_added", 0)]
    due = start_ms
    low, high = ARGUMENT_GAP_MS
    for i in range(chunks):
        due += low + rng.below(high - low + 1)
        steps.append((due, 6, "args", i))
    steps.append((due, 7, "call_done", 0))
    steps.append((due, 8, "finish", 0))
    return steps
