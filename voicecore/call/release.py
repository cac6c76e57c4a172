"""The release side of the validation gate for one call (INV-GATE, docs/explanation/validation-gate.md#nodes).

Owns which release policy a request runs under (its flow node's ``policy``, else the call's
``gate_policy``; an unknown name is ``strict``, and an answer, which has no script, is judged on its numbers)
and, for every gated response, two watermarks: the validator's (its verdicts only raise it) and what was
released to the pacer (``ReleaseTag``, never past the validator's). A held response keeps its watermark
(``HoldTag`` carries it). What a rejection does to the call (a retry, the safe line) is the controller's
(controller.py). Sans-I/O.
"""

from __future__ import annotations

from voicecore.call import core
from voicecore.call import flow as flows
from voicecore.call.actions import Action, OpenGate, OpenTag, ReleaseTag
from voicecore.call.settings import ControllerConfig

GATE_POLICIES = ("off", "numbers", "scripted", "strict")
TRACKED_TAGS = 32  # gated tags remembered (a verdict for an older one finds nothing to release)


class GateRelease:
    __slots__ = ("config", "approved", "validated")

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.approved: dict[int, int] = {}  # gated tags: the watermark released to the pacer
        self.validated: dict[int, int] = {}  # gated tags: the validator's watermark

    def policy(self, step: flows.Say | flows.Answer) -> str:
        """The release policy ``step`` runs under."""
        policy = step.policy or self.config.gate_policy
        if policy not in GATE_POLICIES:
            policy = "strict"  # an unknown name must not open the gate
        if isinstance(step, flows.Answer) and policy in ("scripted", "strict"):
            return "numbers"  # an answer has no script: judged on its numbers (and forbidden phrases)
        return policy

    def spec(self, step: flows.Say | flows.Answer, facts: str) -> core.GateSpec:
        """How the validator judges the response to ``step`` (``facts``: a tool's result it may cite)."""
        policy = self.policy(step)
        script = step.text if isinstance(step, flows.Say) and policy in ("scripted", "strict") else ""
        return core.GateSpec(policy, script, "\n".join(step.forbidden), self.config.gate_language, facts)

    def opened(self, actions: list[Action]) -> None:
        """A response's tag was opened (the core's actions for its response.created): a gated one releases
        nothing until the validator approves it."""
        for action in actions:
            if isinstance(action, OpenGate):
                self.validated[action.tag] = 0
                _trim(self.validated)
        for action in actions:
            if isinstance(action, OpenTag) and action.gated:
                self.approved[action.tag] = 0
                _trim(self.approved)

    def released(self, tag: int) -> int:
        """Frames of ``tag`` released to the pacer so far (0 for a tag not gated)."""
        return self.approved.get(tag, 0)

    def judging(self, tag: int) -> bool:
        """The validator's verdicts on ``tag`` still count (gated, not rejected, not forgotten)."""
        return tag in self.validated

    def approve(self, tag: int, frames: int) -> ReleaseTag | None:
        """The validator approved ``frames`` of ``tag``: release up to its watermark, never past it."""
        if frames <= self.validated[tag]:
            return None
        self.validated[tag] = frames
        if frames <= self.approved.get(tag, 0):
            return None
        self.approved[tag] = frames
        return ReleaseTag(tag, frames)

    def rejected(self, tag: int) -> None:
        self.validated.pop(tag, None)


def _trim(watermarks: dict[int, int]) -> None:
    if len(watermarks) > TRACKED_TAGS:
        for tag in list(watermarks)[:-TRACKED_TAGS]:
            del watermarks[tag]
