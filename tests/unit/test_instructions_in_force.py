"""Every response is made under the agent's instructions. The vendor applies a response.create's
`response.instructions` in place of the session's for that response, and so does the model simulator
(its ResponseRecord.instructions are the effective ones); a driver that sends a scripted line or a grounded
answer as response.instructions alone leaves that answer without the agent's persona, its node's role and
task messages and any language rule. Here each driver starts a call against the simulator's session core and
the simulator says which responses were made without the agent's instructions
(SessionRecord.responses_without)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voicecore.agent.load import load_agent
from voicecore.call import core
from voicecore.call.build import driver_for_config
from voicecore.config import load_config
from voicecore.sim.model import ModelSession, SimConfig

ROOT = Path(__file__).resolve().parents[2]


def responses_without_the_agent(control: str):
    agent = load_agent(ROOT / "examples" / "receptionist")
    config = load_config({"VOICECORE_CALL_CONTROL": control, "VOICECORE_AGENT": str(ROOT / "examples" / "receptionist")})
    driver = driver_for_config(config, agent, "CA" + "0" * 32)
    session = ModelSession(SimConfig(first_delta_latency_ms=0), 0, 1, naming="ga")
    for action in driver.start(0):
        if isinstance(action, core.SendToModel):
            session.receive_client_event(action.text, 0)
    session.advance(60_000)
    persona = agent.instructions.strip().splitlines()[0][:60]
    assert persona and session.record.responses, "the call's greeting"
    return session.record.responses_without(persona), session


def test_the_simulator_tells_a_response_made_under_the_sessions_instructions():
    """The check itself can pass and fail: a response.create without instructions is made under the session's."""
    _, session = responses_without_the_agent("turns")
    from voicecore.realtime import events as rt

    session.receive_client_event(rt.response_create(), 70_000)
    session.advance(200_000)
    plain = session.record.responses[-1]
    assert plain.response_instructions is None and plain.instructions == plain.session_instructions
    assert plain not in session.record.responses_without(plain.session_instructions[:60])


# The drivers' greeting and safe line (voicecore/call/core.py) and the controller's scripted lines and
# grounded answers carry the session's instructions in force before their own (core.in_session).
@pytest.mark.parametrize("control", ["turns", "spine"])
def test_every_response_a_driver_asks_for_is_made_under_the_agents_instructions(control):
    missing, _ = responses_without_the_agent(control)
    assert missing == [], [(r.index, (r.instructions or "")[:80]) for r in missing]
