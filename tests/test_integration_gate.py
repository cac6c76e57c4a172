"""INV-GATE end to end: real gateway, pacer, model worker and validator; the model simulator says a price.

"Basic costs 777 kr per month" is not in the knowledge base (tests/kb): the response is cancelled before
the caller hears the number, and the safe line plays. "Basic costs 99 kr per month" is: it plays whole,
and its citation is logged.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from conftest import start_stack

from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.sim.model_core import SimConfig

pytestmark = pytest.mark.integration

KB = Path(__file__).parent / "kb"
QUESTION_AT_MS = 5500
CALL_MS = 14_000


@pytest.fixture(scope="module")
def gated_stack():
    running = start_stack(gate_policy="numbers", knowledge_dir=str(KB))
    yield running
    running.stop()


def ask_price(running, answer_text: str):
    """Greeting, "How much does the Basic plan cost?", and an answer whose transcript is ``answer_text``."""
    # No pinned clip sequence: the safe line is chosen by its instructions ("Say exactly: ...").
    sim_config = SimConfig(hallucinate_responses=(1,), hallucinated_text=answer_text)
    script = CallScript(duration_ms=CALL_MS, utterances=((QUESTION_AT_MS, load_clip("caller_basic_price")),), bargein_at_ms=())

    async def call():
        async with running.model_sim(sim_config) as sim:
            result = await place_call(running.config.base_url, running.config.twilio_auth_token, script)
            return sim, result

    return asyncio.run(call())


def heard_frames(result, response) -> int:
    frames = {f for f in response.frames() if len(f) == 160}
    return sum(1 for _, payload, _ in result.core.played_log() if payload in frames)


def test_unverifiable_number_is_never_heard_and_the_safe_line_plays(gated_stack):
    sim, result = ask_price(gated_stack, "Basic costs 777 kr per month.")
    assert result.closed_by == "carrier", gated_stack.log_tail()
    (session,) = sim.by_call(result.call_sid)
    greeting, answer = session.record.responses[0], session.record.responses[1]
    assert answer.hallucinated and answer.status == "cancelled"
    # The caller may hear the words before the number, never the number: the audio the validator could
    # approve ends where "777" starts in the transcript (audio and words are spread alike), less its margin.
    number_starts = answer.text.index("777") / len(answer.text)
    assert heard_frames(result, answer) < number_starts * len(answer.frames())
    safe = [r for r in session.record.responses[2:] if r.clip_name == "agent_safe_line"]
    assert safe and heard_frames(result, safe[0]) >= len(safe[0].frames()) - 2  # played whole (last frame padded)
    assert heard_frames(result, greeting) >= len(greeting.frames()) - 2  # a greeting without numbers plays
    assert result.statistics.stale_frames == 0
    assert "rejected by the validator" in gated_stack.log_tail(20000)


def test_grounded_number_plays_whole_with_its_citation_logged(gated_stack):
    sim, result = ask_price(gated_stack, "Basic costs 99 kr per month.")
    assert result.closed_by == "carrier", gated_stack.log_tail()
    (session,) = sim.by_call(result.call_sid)
    answer = session.record.responses[1]
    assert answer.status == "completed"
    assert heard_frames(result, answer) >= len(answer.frames()) - 2
    assert not any(r.clip_name == "agent_safe_line" for r in session.record.responses)
    log = gated_stack.log_tail(40000)
    assert "approved with citations" in log
