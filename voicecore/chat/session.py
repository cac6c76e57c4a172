"""One text conversation with an agent, sans-I/O: the phone path's controller, flow and gate, fed text.

Owns what the text channel adds around the turn-taking controller (voicecore/call/controller.py, run with
``modality="text"``): the validation gate in process (``gate``: the validator's core, which the shell
passes in, since the library does not import the process packages; a gated reply is shown only once it is approved
whole; a rejected one never, the safe line comes instead), knowledge-base look-ups answered at once, and
the conversation as the caller sees it: ``ChatEvent``s for each line the agent says, each function the model
calls, each tool run and result, each confirmation asked, accepted or declined, each node reached, each gate
verdict, and the end of the call (hung up or transferred). Knows no sockets, processes or clock: the shell
(voicecore/chat/runner.py) feeds caller messages, the model's event texts, tool results and ``now_ns``; it
sends ``to_model`` texts to the model, runs ``tools`` and shows ``events``.

Text-channel settings (``chat_controller_config``): the post-tool debounce waits for no caller quiet (a
typed message cannot be talked over), silence check-ins and the silence goodbye are off (a typist is
not a silent caller), and a confirmation waits minutes, not seconds, for its yes.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Protocol

from voicecore.agent.flow import AgentFlow
from voicecore.agent.spec import AgentSpec
from voicecore.bus import messages
from voicecore.call import controller as ctl
from voicecore.call import core
from voicecore.realtime import events as rt
from voicecore.validate.knowledge import KnowledgeBase

CHAT_CONFIRM_TIMEOUT_MS = 300_000  # a confirmation waits this long for the typed yes
NEVER_MS = 10**12  # a silence timer that never fires in a chat
_SLOT, _GENERATION = 0, 0  # the validator's key of this conversation (one per ValidatorCore)


@dataclasses.dataclass(frozen=True, slots=True)
class ChatEvent:
    """What happened, for the person typing (and for agent tests). ``kind``: said | function_call |
    tool_result | confirmation | confirmed | declined | node | gate | fallback | ended | transferred.
    ``text``: the line said, the node's name, the end's reason; ``data``: the details (a function's name and
    arguments, a tool's ok and output, a verdict's reason)."""

    kind: str
    text: str = ""
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    at_ns: int = 0

    def describe(self) -> str:
        """One line for a terminal or a failure report."""
        d = self.data
        if self.kind == "said":
            return f"agent: {self.text}"
        if self.kind == "function_call":
            return f"[function {d.get('name')}({d.get('arguments')})]"
        if self.kind == "tool_result":
            return f"[tool {d.get('name')} -> {'ok' if d.get('ok') else 'error'}: {d.get('output')}]"
        if self.kind == "confirmation":
            return f"[confirmation asked for {d.get('name')}]"
        if self.kind in ("confirmed", "declined"):
            return f"[{d.get('name')} {self.kind}]"
        if self.kind == "node":
            return f"[node {self.text}]"
        if self.kind == "gate":
            verdict = "approved" if d.get("approved") else "rejected"
            reason = f": {d.get('reason')}" if d.get("reason") else ""
            return f"[gate {d.get('policy')} {verdict}{reason}]"
        if self.kind == "fallback":
            return f"[fallback line: {self.text}]"
        if self.kind == "ended":
            return f"[call ended: {self.text}]"
        if self.kind == "transferred":
            return f"[call transferred to {self.text}]"
        return f"[{self.kind} {self.text}]"


def chat_controller_config(base: ctl.ControllerConfig) -> ctl.ControllerConfig:
    """The agent's controller settings as the text channel runs them (module docstring)."""
    return dataclasses.replace(base, debounce_quiet_ms=0, silence_checkins_ms=(), silence_goodbye_ms=NEVER_MS,
                               confirm_timeout_ms=max(base.confirm_timeout_ms, CHAT_CONFIRM_TIMEOUT_MS),
                               pause_release=False)


class Gate(Protocol):
    """The validator's core (workers/validator/core.py ValidatorCore): bus messages in, verdicts out."""

    def handle(self, message: object) -> list[messages.Verdict]: ...


@dataclasses.dataclass(slots=True)
class _Reply:
    response_id: str
    tag: int
    gated: bool
    policy: str = "off"
    text: str = ""
    done: bool = False
    shown: bool = False


class ChatSession:
    """One conversation. Call ``start`` once, then feed inputs in time order; after each, take
    ``to_model`` (send in order), ``tools`` (run each, feed its result back) and ``events`` (show)."""

    def __init__(self, agent: AgentSpec, session_id: str, config: ctl.ControllerConfig, gate: Gate, *,
                 naming: str = "ga", knowledge: KnowledgeBase | None = None, flow_args: dict | None = None) -> None:
        self.session_id = session_id
        self.flow = AgentFlow(agent, **(flow_args or {}))
        self.controller = ctl.CallController(session_id, flow=self.flow, config=chat_controller_config(config),
                                             naming=naming, modality="text")
        self.knowledge = knowledge
        self.validator = gate
        self.to_model: list[str] = []
        self.tools: list[ctl.RunTool] = []
        self.events: list[ChatEvent] = []
        self.replies: dict[str, _Reply] = {}
        self.gates: dict[int, str] = {}  # tag -> policy
        self.calls: dict[str, tuple[str, str]] = {}  # call_id -> (function name, arguments)
        self.node = self.flow.node_name
        self.ended = ""
        self.now_ns = 0
        self.transcript: list[tuple[str, str, int]] = []  # (caller | agent, text, when), in the order it happened

    # ------------------------------------------------------------------------------------ inputs
    def start(self, now_ns: int) -> None:
        self._run(lambda: self.controller.start(now_ns), now_ns)

    def caller_says(self, text: str, now_ns: int) -> None:
        self.transcript.append(("caller", " ".join(text.split()), now_ns))
        self._run(lambda: self.controller.on_caller_text(text, now_ns), now_ns)

    def model_event(self, text: str | bytes, now_ns: int) -> None:
        event = rt.parse_server_event(text)
        self._before_controller(event)
        self._run(lambda: self.controller.on_model_event(event, now_ns, ctl.IDLE_PLAYOUT), now_ns)
        self._after_controller(event)

    def tool_result(self, call_id: str, ok: bool, output: str, now_ns: int) -> None:
        name = self.calls.get(call_id, ("?", ""))[0]
        self._emit("tool_result", data={"name": name, "ok": ok, "output": output, "call_id": call_id}, now_ns=now_ns)
        self._run(lambda: self.controller.on_tool_result(call_id, ok, output, now_ns), now_ns)

    def tick(self, now_ns: int) -> None:
        self._run(lambda: self.controller.on_tick(now_ns, ctl.IDLE_PLAYOUT), now_ns)

    def model_lost(self, reason: str, now_ns: int) -> None:
        self._run(lambda: self.controller.on_model_lost(now_ns, reason), now_ns)

    def caller_left(self, now_ns: int) -> None:
        self._run(lambda: self.controller.on_carrier_stop(now_ns), now_ns)

    # ------------------------------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        """The agent owes the caller something: a reply asked for, being written or judged, a tool running."""
        c = self.controller
        if self.ended:
            return False
        return (c.queued is not None or c.inflight is not None or c.active is not None or c.debounce.waiting
                or bool(c.tools_running) or c.endings.playing
                or any(not r.shown and not r.done for r in self.replies.values()))

    @property
    def pending_confirmation(self) -> str:
        pending = self.controller.pending_action
        return pending.plan.name if pending is not None else ""

    # ------------------------------------------------------------------------------------ internals
    def _emit(self, kind: str, text: str = "", data: dict | None = None, now_ns: int | None = None) -> None:
        self.events.append(ChatEvent(kind, text, data or {}, self.now_ns if now_ns is None else now_ns))

    def _before_controller(self, event: object) -> None:
        if isinstance(event, rt.FunctionCallArgumentsDone):
            self.calls[event.call_id] = (event.name or "", event.arguments)
            self._emit("function_call", data={"name": event.name or "", "arguments": _arguments(event.arguments),
                                              "call_id": event.call_id})

    def _after_controller(self, event: object) -> None:
        """Text as it comes; a reply is shown once written whole (and, gated, approved whole)."""
        if isinstance(event, rt.ResponseCreated):
            response = self.controller.core.response(event.response_id)
            if response is not None and event.response_id not in self.controller.rejected:
                self.replies[event.response_id] = _Reply(event.response_id, response.tag, response.gated,
                                                         self.gates.get(response.tag, "off"))
                if len(self.replies) > 64:
                    del self.replies[next(iter(self.replies))]
        elif isinstance(event, rt.TextDelta):
            reply = self.replies.get(event.response_id)
            if reply is not None:
                reply.text += event.delta
        elif isinstance(event, rt.TextDone):
            reply = self.replies.get(event.response_id)
            if reply is not None:
                reply.text = event.text
                reply.done = True
                self._show(reply)
        elif isinstance(event, rt.ResponseDone):
            reply = self.replies.get(event.response_id)
            if reply is not None:
                reply.done = True

    def _show(self, reply: _Reply) -> None:
        response = self.controller.core.response(reply.response_id)
        if reply.shown or not reply.done or response is None or response.cancelled or not reply.text.strip():
            return
        if reply.gated and self.controller.approved.get(reply.tag, 0) < ctl.APPROVE_ALL:
            return
        reply.shown = True
        self._emit("said", reply.text.strip(), {"node": self.flow.node_name})
        self.transcript.append(("agent", reply.text.strip(), self.now_ns))

    def _run(self, step, now_ns: int) -> None:
        self.now_ns = now_ns
        stats = self.controller.stats
        before = (stats.actions_proposed, stats.actions_confirmed, stats.actions_declined, stats.actions_timed_out)
        pending = self.controller.pending_action
        self._apply(step(), now_ns)
        after = (stats.actions_proposed, stats.actions_confirmed, stats.actions_declined, stats.actions_timed_out)
        if after[0] > before[0] and self.controller.pending_action is not None:
            plan = self.controller.pending_action.plan
            self._emit("confirmation", data={"name": plan.name, "arguments": _arguments(plan.arguments),
                                             "call_id": self.controller.pending_action.call_id})
        if pending is not None and (after[1] > before[1] or after[2] > before[2] or after[3] > before[3]):
            kind = "confirmed" if after[1] > before[1] else "declined"
            self._emit(kind, data={"name": pending.plan.name, "timed_out": after[3] > before[3], "call_id": pending.call_id})
        if self.flow.node_name != self.node:
            self.node = self.flow.node_name
            self._emit("node", self.node)
        for reply in list(self.replies.values()):
            self._show(reply)

    def _apply(self, actions: list, now_ns: int) -> None:
        for action in actions:
            if isinstance(action, core.SendToModel):
                self.to_model.append(action.text)
            elif isinstance(action, ctl.RunTool):
                self.tools.append(action)
            elif isinstance(action, core.OpenGate):
                self.gates[action.tag] = action.policy
                self._verdicts(self.validator.handle(messages.GateOpen(
                    _SLOT, _GENERATION, action.tag, action.policy, action.script, action.language, action.forbidden,
                    action.facts)), now_ns)
            elif isinstance(action, core.GateTranscript):
                if action.done:
                    message: object = messages.TranscriptDone(_SLOT, _GENERATION, action.tag, action.text, action.audio_frames)
                else:
                    message = messages.TranscriptDelta(_SLOT, _GENERATION, action.tag, action.text, action.audio_frames)
                self._verdicts(self.validator.handle(message), now_ns)
            elif isinstance(action, ctl.Retrieve):
                found = self.knowledge.retrieve(action.question, action.k) if self.knowledge is not None else []
                snippets = [{"file": s.file, "line": s.line, "text": s.text} for s in found]
                self._apply(self.controller.on_snippets(action.req_id, snippets, now_ns), now_ns)
            elif isinstance(action, ctl.PlayFallback):
                self._emit("fallback", action.kind)
            elif isinstance(action, ctl.HangUp):
                self.ended = action.reason
                self._emit("ended", action.reason)
            elif isinstance(action, ctl.Transfer):
                self.ended = f"transfer: {action.target}"
                self._emit("transferred", action.target)
            # tags, frames and playout are the phone path's: a text reply has none

    def _verdicts(self, verdicts: list[messages.Verdict], now_ns: int) -> None:
        for verdict in verdicts:
            final = verdict.rejected or verdict.approved_frames >= ctl.APPROVE_ALL
            if final:
                self._emit("gate", data={"policy": self.gates.get(verdict.tag, ""), "approved": not verdict.rejected,
                                         "reason": verdict.reason, "tag": verdict.tag, "citations": verdict.citations})
            self._apply(self.controller.on_verdict(verdict.tag, verdict.approved_frames, verdict.rejected, now_ns,
                                                   ctl.IDLE_PLAYOUT, verdict.reason, verdict.citations), now_ns)


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
