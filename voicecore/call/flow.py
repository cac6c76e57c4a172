"""The minimal scripted call flow: greeting -> question -> answer -> goodbye.

Owns *what* the agent says next, never *when*: the controller (controller.py) asks the flow for a step
at each point where the agent could speak (call start, a scripted prompt played out, a caller turn, a
tool call, a DTMF digit, a prompt that keeps failing) and schedules the answer under its own rules (one
voice at a time, debounce, watchdog). Knows nothing of tags, frames, the clock or the model socket.

A real flow engine replaces this class by implementing the same methods (the ``Flow`` protocol); every
step is a frozen dataclass, so a flow is testable as a table of inputs -> steps. A flow also names itself
and the arguments that rebuild it (``name``, ``record_args``): a call record's header carries them so a
replay builds the same flow (voicecore/replay.py).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Protocol


# --- steps the flow returns ------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Say:
    """A scripted prompt: the model is asked to say ``text`` (response.create with instructions).

    ``terminal``: the call ends after it played completely (hang up, or transfer to ``transfer_to``).
    """

    prompt_id: str
    text: str
    terminal: bool = False
    transfer_to: str | None = None
    policy: str | None = None  # release policy of this node (validator); None: the controller's default
    forbidden: tuple[str, ...] = ()  # phrases this node must never say (the validator checks them)


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """Let the model answer the caller's turn from the conversation (response.create, no instructions).

    ``policy``/``forbidden``: as for Say; an answer has no script, so it is judged on numbers and
    forbidden phrases only."""

    policy: str | None = None
    forbidden: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to say now; the caller has the floor."""


Step = Say | Answer | Wait


@dataclasses.dataclass(frozen=True, slots=True)
class SessionSpec:
    """What the model is told and may call in the current flow node (a session.update)."""

    instructions: str
    tools: tuple[dict, ...] = ()  # function declarations ({"type": "function", "name", ...})


@dataclasses.dataclass(frozen=True, slots=True)
class Transition:
    """The flow entered another node: the model session is reconfigured and its context strategy applied
    (``reset``: the conversation so far is deleted; ``task``: deleted, then ``task_messages`` added as
    items; ``keep``: nothing deleted)."""

    node: str
    session: SessionSpec
    context: str = "keep"
    task_messages: tuple[tuple[str, str], ...] = ()  # (role, text)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool call did: ``output`` goes back to the model as the function_call_output.

    ``speak``: the state changed so the agent should speak again (after the post-tool debounce).
    ``then``: a step that replaces the model's follow-up (end_call -> goodbye, transfer -> goodbye+transfer).
    ``transition``: the flow moved to another node. ``facts``: text the follow-up answer may take numbers
    from (the tool's result), besides the knowledge base.
    """

    output: str
    speak: bool = True
    then: Step | None = None
    transition: Transition | None = None
    facts: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolPlan:
    """A function call that runs a tool (off the call's path: the controller's ``RunTool`` action, its
    result an input). ``confirm``: ask the caller first, run it only after a yes. ``writes``: a success
    stands for the de-duplication window (the same call again returns it without running)."""

    name: str
    arguments: str  # canonical JSON text of the arguments object
    writes: bool = True
    confirm: Say | None = None
    filler: Say | None = None  # said if the tool is still running after the filler delay; None: none


class Flow(Protocol):
    name: str  # how a call record names this kind of flow (voicecore/replay.py FLOWS)

    def record_args(self) -> dict: ...  # JSON-able keyword arguments that build this flow afresh

    def start(self) -> Step: ...
    # Optional (voicecore/call/restore.py): where the call stands, JSON-able, and setting it back on a fresh flow
    # (ValueError for a position this flow cannot be in). A flow without them is restored at its start.
    # def position(self) -> dict: ...
    # def restore_position(self, position: dict) -> None: ...

    def after_played(self, prompt_id: str) -> Step: ...

    def on_user_turn(self, text: str) -> Step: ...

    def session(self) -> SessionSpec: ...  # the model session at the call's start

    def on_tool_call(self, name: str, arguments: str) -> ToolOutcome | ToolPlan: ...

    def on_tool_result(self, name: str, arguments: str, ok: bool, output: str) -> ToolOutcome: ...

    def after_tool(self, text: str) -> Step: ...  # the post-tool debounce ended; ``text``: the caller's words meanwhile

    def on_dtmf(self, digit: str) -> Step: ...

    # Canned lines the controller's own policies use (check-ins, watchdog fallback, apology, goodbye).
    def line(self, kind: str) -> Say: ...


LINES = {
    "greeting": "Hello, thanks for calling. This is the virtual assistant.",
    "question": "How can I help you today?",
    "goodbye": "Thank you for calling. Goodbye!",
    "transfer": "Let me connect you with a colleague. One moment please.",
    "checkin": "Are you still there?",
    "fallback": "Sorry, could you say that again?",
    "apology": "I'm sorry, I'm having trouble right now.",
    "reconnect": "Sorry, we were cut off for a moment. Could you say that again?",
}
DEFAULT_INSTRUCTIONS = "You are a helpful phone agent. Keep answers short."
DEFAULT_OPERATOR = "+15550100"  # where "0" and the apology transfer the caller
DEFAULT_MAX_TURNS = 3
ANSWER_NODE = "answer"  # the node id of model answers in node_policies / node_forbidden
SAFE_LINE_NODE = "safe_line"  # never gated: it replaces a rejected answer and claims nothing


class ScriptedFlow:
    """greeting -> question -> (caller turns answered by the model) -> goodbye.

    Tools: ``end_call`` (goodbye, then hang up), ``transfer_call`` (goodbye, then transfer); any other
    function gets an error (the agent then speaks after the debounce). DTMF: ``0`` transfers to the
    operator, ``#`` says goodbye, any other digit is a caller turn. The flow of tests and replays of
    records written before agents; a call on the live path runs an agent's flow (voicecore/agent/flow.py).
    """

    name = "scripted"

    def __init__(self, operator: str = DEFAULT_OPERATOR, max_turns: int = DEFAULT_MAX_TURNS,
                 node_policies: dict[str, str] | None = None,
                 node_forbidden: dict[str, list[str]] | None = None) -> None:
        # node_policies: release policy per node id (a prompt id, "answer", or "*" for every node);
        # node_forbidden: forbidden phrases per node id ("*": every node). Both are flow configuration,
        # JSON-able so a call record can rebuild the flow.
        self.operator = operator
        self.max_turns = max_turns
        self.node_policies = dict(node_policies or {})
        self.node_forbidden = {k: list(v) for k, v in (node_forbidden or {}).items()}
        self.turns = 0
        self.state = "greeting"

    def record_args(self) -> dict:
        """The constructor arguments that differ from their defaults (what the caller passed, as a rule)."""
        args: dict = {}
        if self.operator != DEFAULT_OPERATOR:
            args["operator"] = self.operator
        if self.max_turns != DEFAULT_MAX_TURNS:
            args["max_turns"] = self.max_turns
        if self.node_policies:
            args["node_policies"] = dict(self.node_policies)
        if self.node_forbidden:
            args["node_forbidden"] = {k: list(v) for k, v in self.node_forbidden.items()}
        return args

    def _node(self, node: str) -> tuple[str | None, tuple[str, ...]]:
        policy = self.node_policies.get(node, self.node_policies.get("*"))
        forbidden = tuple(self.node_forbidden.get("*", ())) + tuple(self.node_forbidden.get(node, ()))
        return policy, forbidden

    def _say(self, prompt_id: str, text: str, terminal: bool = False, transfer_to: str | None = None) -> Say:
        policy, forbidden = self._node(prompt_id)
        return Say(prompt_id, text, terminal, transfer_to, policy, forbidden)

    def _answer(self) -> Answer:
        policy, forbidden = self._node(ANSWER_NODE)
        return Answer(policy, forbidden)

    def line(self, kind: str) -> Say:
        if kind == "goodbye":
            return self._say("goodbye", LINES["goodbye"], terminal=True)
        if kind == "transfer":
            return self._say("transfer", LINES["transfer"], terminal=True, transfer_to=self.operator)
        if kind == "apology":
            # a request that failed again after its retry: apologise and hand over to a person
            return self._say("apology", f'{LINES["apology"]} {LINES["transfer"]}', terminal=True, transfer_to=self.operator)
        return self._say(kind, LINES[kind])

    def position(self) -> dict:
        return {"state": self.state, "turns": self.turns}

    def restore_position(self, position: dict) -> None:
        state = position.get("state")
        if state not in ("greeting", "question", "answer", "goodbye"):
            raise ValueError(f"flow position names state {state!r}, which the scripted flow does not have")
        self.state = state
        self.turns = int(position.get("turns", 0))

    def start(self) -> Step:
        self.state = "greeting"
        return self.line("greeting")

    def after_played(self, prompt_id: str) -> Step:
        if prompt_id == "greeting":
            self.state = "question"
            return self.line("question")
        return Wait()

    def on_user_turn(self, text: str) -> Step:
        self.turns += 1
        if self.turns > self.max_turns:
            self.state = "goodbye"
            return self.line("goodbye")
        self.state = "answer"
        return self._answer()

    def on_tool_call(self, name: str, arguments: str) -> ToolOutcome:
        if name == "end_call":
            self.state = "goodbye"
            return ToolOutcome(json.dumps({"ok": True}), speak=False, then=self.line("goodbye"))
        if name == "transfer_call":
            self.state = "goodbye"
            return ToolOutcome(json.dumps({"ok": True}), speak=False, then=self.line("transfer"))
        return ToolOutcome(json.dumps({"error": "unknown tool"}))

    def session(self) -> SessionSpec:
        return SessionSpec(DEFAULT_INSTRUCTIONS)

    def on_tool_result(self, name: str, arguments: str, ok: bool, output: str) -> ToolOutcome:
        return ToolOutcome(output)  # never reached: this flow plans no tool runs

    def after_tool(self, text: str) -> Step:
        return self.on_user_turn(text)

    def on_dtmf(self, digit: str) -> Step:
        if digit == "0":
            self.state = "goodbye"
            return self.line("transfer")
        if digit == "#":
            self.state = "goodbye"
            return self.line("goodbye")
        return self.on_user_turn(f"(keypad {digit})")
