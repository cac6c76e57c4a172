"""An agent's flow, run: the ``Flow`` of voicecore/call/flow.py driven by an ``AgentSpec``.

Owns which node the call is in and what the agent says next there: the greeting, a node's scripted prompt,
answers under the node's gate policy, the agent's lines, and what a function call does (an error, a
``ToolPlan`` to run a tool, with a confirmation prompt rendered from the arguments when the function asks
for one, a built-in action, a transition to another node with the session and context strategy of that
node). Never *when*: the controller schedules every step. Pure: no I/O, no clock; the arguments are
checked against the function's JSON Schema here (voicecore/agent/arguments.py: pure, reads no files), so an
invalid call never reaches a tool or the caller's ears as a confirmation.
"""

from __future__ import annotations

import json
from typing import Any

from voicecore.agent import actions
from voicecore.agent.arguments import check_arguments
from voicecore.agent.spec import AgentSpec, NodeSpec
from voicecore.call.flow import Answer, Say, SessionSpec, Step, ToolOutcome, ToolPlan, Transition, Wait

GREETING = "greeting"
NODE_PROMPT = "node:"  # prompt id of a node's scripted prompt: "node:<name>"
CONFIRM_PROMPT = "confirm:"  # prompt id of a confirmation prompt: "confirm:<function>"
TERMINAL_LINES = ("goodbye", "transfer", "apology")
VOICEMAIL_MESSAGE = "voicemail_message"  # prompt id, and the opening of a call that reached a voicemail's beep


def _error(kind: str, message: str) -> str:
    return json.dumps({"error": {"type": kind, "message": message}})


class AgentFlow:
    """One call's position in an agent's flow. Build it from the spec (``AgentFlow(spec)``) or from a
    record header's ``flow_args`` (``AgentFlow(**flow_args)``)."""

    name = "agent"

    def __init__(self, spec: AgentSpec | dict[str, Any], node_policies: dict[str, str] | None = None,
                 node_forbidden: dict[str, list[str]] | None = None) -> None:
        # node_policies / node_forbidden: the operator's overrides from the configuration
        # (VOICECORE_GATE_NODE_POLICIES, VOICECORE_GATE_FORBIDDEN), keyed by prompt id, "answer" or "*".
        self.spec = spec if isinstance(spec, AgentSpec) else AgentSpec.from_dict(spec)
        self.node_policies = dict(node_policies or {})
        self.node_forbidden = {k: list(v) for k, v in (node_forbidden or {}).items()}
        self.node_name = self.spec.flow.initial_node
        self.turns = 0
        self.transitions = 0

    def record_args(self) -> dict:
        args: dict[str, Any] = {"spec": self.spec.to_dict()}
        if self.node_policies:
            args["node_policies"] = dict(self.node_policies)
        if self.node_forbidden:
            args["node_forbidden"] = {k: list(v) for k, v in self.node_forbidden.items()}
        return args

    def position(self) -> dict[str, Any]:
        """Where the call stands in the flow (voicecore/call/restore.py carries it to another node)."""
        return {"node": self.node_name, "turns": self.turns, "transitions": self.transitions}

    def restore_position(self, position: dict[str, Any]) -> None:
        node = position.get("node")
        if not isinstance(node, str) or node not in self.spec.flow.nodes:
            raise ValueError(f"flow position names node {node!r}, which this agent's flow does not have")
        self.node_name = node
        self.turns = int(position.get("turns", 0))
        self.transitions = int(position.get("transitions", 0))

    @property
    def node(self) -> NodeSpec:
        return self.spec.flow.nodes[self.node_name]

    # --- what the model is told --------------------------------------------------------------------
    def session(self) -> SessionSpec:
        return self._session(self.node)

    def _session(self, node: NodeSpec) -> SessionSpec:
        parts = [self.spec.instructions.strip()]
        parts += [m.content.strip() for m in node.role_messages]
        parts += [m.content.strip() for m in node.task_messages]
        tools = tuple(self.spec.flow.functions[name].declaration() for name in node.functions
                      if name in self.spec.flow.functions)
        return SessionSpec("\n\n".join(p for p in parts if p), tools)

    # --- steps -------------------------------------------------------------------------------------
    def _forbidden(self, prompt_id: str = "answer") -> tuple[str, ...]:
        configured = tuple(self.node_forbidden.get("*", ())) + tuple(self.node_forbidden.get(prompt_id, ()))
        return tuple(self.spec.forbidden) + tuple(self.node.forbidden) + configured

    def _override(self, prompt_id: str) -> str | None:
        return self.node_policies.get(prompt_id, self.node_policies.get("*"))

    def _prompt(self, prompt_id: str, text: str, terminal: bool = False, transfer_to: str | None = None,
                policy: str | None = None) -> Say:
        policy = policy or self._override(prompt_id) or self.spec.gate_prompts
        return Say(prompt_id, text, terminal, transfer_to, policy, self._forbidden(prompt_id))

    def answer(self) -> Answer:
        """The model answering in the current node: how its answer is judged (not a turn of the caller's)."""
        policy = self._override("answer") or self.node.gate_policy or self.spec.gate_answers
        return Answer(policy, self._forbidden())

    def line(self, kind: str) -> Say:
        lines = self.spec.lines
        target = self.spec.transfer_to or None
        if kind == "goodbye":
            return self._prompt("goodbye", lines["goodbye"], terminal=True)
        if kind == "transfer":
            if target is None:
                return self.line("goodbye")
            return self._prompt("transfer", lines["transfer"], terminal=True, transfer_to=target)
        if kind == "apology":
            # a request that failed again after its retry: apologise and hand over to a person (or say goodbye)
            follow = lines["transfer"] if target else lines["goodbye"]
            return self._prompt("apology", f'{lines["apology"]} {follow}', terminal=True, transfer_to=target)
        return self._prompt(kind, lines[kind])

    def _enter(self, node_name: str) -> Step:
        """The step of arriving in ``node_name`` (its prompt; its end or transfer)."""
        self.node_name = node_name
        node = self.node
        target = node.transfer_to or None
        terminal = node.end or target is not None
        if node.say:
            return self._prompt(NODE_PROMPT + node.name, node.say, terminal=terminal, transfer_to=target)
        if target is not None:
            return self._prompt("transfer", self.spec.lines["transfer"], terminal=True, transfer_to=target)
        if node.end:
            return self.line("goodbye")
        return Wait()

    def start(self, opening: str = "") -> Step:
        """The first step. ``opening`` VOICEMAIL_MESSAGE (a placed call's answer gate reached a voicemail's beep,
        ``on_voicemail = "message"``): the agent's voicemail message instead of its greeting, scripted and gated
        whatever gate_prompts says, and the call ends after it."""
        self.node_name = self.spec.flow.initial_node
        if opening == VOICEMAIL_MESSAGE and self.spec.outbound_voicemail_message:
            policy = self._override(VOICEMAIL_MESSAGE) or "scripted"
            return self._prompt(VOICEMAIL_MESSAGE, self.spec.outbound_voicemail_message, terminal=True, policy=policy)
        if self.spec.greeting:
            return self._prompt(GREETING, self.spec.greeting)
        return self._enter(self.node_name)

    def after_played(self, prompt_id: str) -> Step:
        if prompt_id == GREETING:
            return self._enter(self.node_name)
        return Wait()

    def on_user_turn(self, text: str) -> Step:
        self.turns += 1
        if self.spec.max_turns and self.turns > self.spec.max_turns:
            return self.line("goodbye")
        return self.answer()

    def after_tool(self, text: str) -> Step:
        return self.on_user_turn(text) if text.strip() else self.answer()

    def on_dtmf(self, digit: str) -> Step:
        if digit == "0" and self.spec.transfer_to:
            return self.line("transfer")
        if digit == "#":
            return self.line("goodbye")
        return self.on_user_turn(f"(keypad {digit})")

    # --- functions ---------------------------------------------------------------------------------
    def on_tool_call(self, name: str, arguments: str) -> ToolOutcome | ToolPlan:
        function = self.spec.flow.functions.get(name)
        if function is None or name not in self.node.functions:
            # A real model may still call a function of the node it just left (the session.update races
            # its response): it gets an error and answers again.
            return ToolOutcome(_error("unknown_function", f"{name!r} is not available now"))
        canonical = actions.canonical_arguments(arguments)
        if canonical is None:
            return ToolOutcome(_error("invalid_arguments", "arguments must be a JSON object"))
        _, problem = check_arguments(function.parameters, canonical)
        if problem:
            return ToolOutcome(_error("invalid_arguments", problem))
        confirm = None
        if function.confirm:
            language = self.spec.languages[0] if self.spec.languages else "en"
            text = actions.render_prompt(function.confirm_prompt, canonical, function.parameters, language.split("-")[0])
            if text is None:
                return ToolOutcome(_error("invalid_arguments", "an argument the confirmation needs is missing"))
            # Scripted and gated: the caller must hear exactly this, every number one of the arguments
            # (a date, time, amount or phone number said as a person says it: the gate reads it back).
            confirm = Say(CONFIRM_PROMPT + name, text, policy="scripted", forbidden=self._forbidden(CONFIRM_PROMPT + name))
        if function.tool is None:
            if confirm is not None:
                return ToolPlan(name, canonical, writes=True, confirm=confirm)
            return self.on_tool_result(name, canonical, True, json.dumps({"ok": True}))
        filler = self._prompt("filler", function.filler) if function.filler else self.line("filler")
        return ToolPlan(name, canonical, writes=function.writes or function.confirm, confirm=confirm, filler=filler)

    def on_tool_result(self, name: str, arguments: str, ok: bool, output: str) -> ToolOutcome:
        function = self.spec.flow.functions.get(name)
        if function is None:
            return ToolOutcome(output)
        facts = output if ok else ""
        if ok and function.action == "end_call":
            return ToolOutcome(output, speak=False, then=self.line("goodbye"))
        if ok and function.action == "transfer":
            target = function.transfer_to or self.spec.transfer_to
            return ToolOutcome(output, speak=False,
                               then=self._prompt("transfer", self.spec.lines["transfer"], terminal=True, transfer_to=target))
        target = function.transitions.get("success" if ok else "error")
        if target and target in self.spec.flow.nodes and target != self.node_name:
            node = self.spec.flow.nodes[target]
            self.transitions += 1
            transition = Transition(target, self._session(node), node.context_strategy,
                                    tuple((m.role, m.content) for m in node.task_messages))
            step = self._enter(target)
            if isinstance(step, Wait):
                return ToolOutcome(output, speak=True, transition=transition, facts=facts)
            return ToolOutcome(output, speak=False, then=step, transition=transition, facts=facts)
        if not ok:
            # The model has the structured error; the caller hears a scripted line now, never silence.
            return ToolOutcome(output, speak=False, then=self.line("tool_error"))
        return ToolOutcome(output, speak=True, facts=facts)



