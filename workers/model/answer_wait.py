"""The model worker's side of a call the node placed: the callee's audio goes to the answer gate
(voicecore/outbound/answer_gate.py) until it decides, and the agent's texts get the call's fields.

Owns: reading the call's CallStarted copy of its direction, callee and fields, the agent filled with them
(``{callee}`` and each field's ``{name}`` in its instructions and greeting), the gate's clock (the callee's frames,
and the wall clock since the first of them as the bound), and the call record's ``answer`` note (verdict, its
time, what decided, the beep, what the gate did) and log line.
"""

from __future__ import annotations

import dataclasses
import logging


from voicecore.agent.spec import AgentSpec
from voicecore.outbound import call_fields
from voicecore.outbound.answer_gate import AnswerGate, GateDecision

log = logging.getLogger("voicecore.model")


def agent_for_call(agent: AgentSpec, started) -> AgentSpec:
    """``agent`` with the outbound call's fields in its texts (itself for an inbound call)."""
    if started is None or started.direction != call_fields.OUTBOUND:
        return agent
    values = dict(call_fields.fields_of(started), callee=started.callee)
    return dataclasses.replace(agent, instructions=call_fields.fill(agent.instructions, values),
                               greeting=call_fields.fill(agent.greeting, values))


class AnswerWait:
    def __init__(self, call_sid: str, agent: AgentSpec) -> None:
        self.call_sid = call_sid
        self.gate = AnswerGate(agent.outbound_max_wait_ms, agent.outbound_on_voicemail)
        self.first_audio_ns = 0
        self.decided_ns = 0

    @property
    def waiting(self) -> bool:
        return self.gate.waiting

    def feed(self, audio: bytes, now_ns: int) -> GateDecision | None:
        if audio and not self.first_audio_ns:
            self.first_audio_ns = now_ns
        decision = self.gate.on_audio(audio) if audio else None
        if decision is None and self.first_audio_ns:
            decision = self.gate.on_elapsed((now_ns - self.first_audio_ns) // 1_000_000)
        if decision is not None and not self.decided_ns:
            self.decided_ns = now_ns
        return decision

    def note(self, decision: GateDecision) -> dict:
        """What the call record keeps of the answer (and the log line says)."""
        verdict = decision.verdict
        wall_ms = (self.decided_ns - self.first_audio_ns) // 1_000_000 if self.first_audio_ns else None
        fields = {"verdict": verdict.verdict, "verdict_ms": verdict.at_ms, "reason": verdict.reason,
                  "detail": verdict.detail, "action": decision.action, "action_ms": decision.at_ms,
                  "beep_at_ms": decision.beep_at_ms, "wall_ms": wall_ms}
        log.info("call %s: answered by %s at %d ms (%s%s): %s", self.call_sid, verdict.verdict, verdict.at_ms,
                 verdict.reason, f", {verdict.detail}" if verdict.detail else "", decision.action)
        return fields


