"""INV-GATE end to end: real gateway, pacer, model worker and validator; the model simulator says a price.

"Basic costs 777 kr per month" is not in the knowledge base (tests/kb): the response is cancelled before
the caller hears the number (word release: the words before it may play; sentence release: none of it),
and the safe line plays. "Basic costs 99 kr per month" is: it plays whole, and its citation is logged.
The first two tests run the spine (one policy for every response), the last two the turn-taking
controller with per-node policies (a scripted greeting), retrieve-first and call records.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from stacks import start_stack
from waiting import wait_until

from voicecore.sim.audio_clips import load_clip
from voicecore.sim.model.clips import scripted_text
from voicecore.sim.carrier import CallScript, place_call
from voicecore.sim.model import SimConfig

pytestmark = pytest.mark.integration

KB = Path(__file__).parents[1] / "kb"
# The greeting (202 frames, 4.04 s) starts when the model's first audio reaches the carrier, later on a busy
# machine: asked at 5.5 s, the question once cut its last 44 frames (158 of 202 heard: it had started 2.3 s
# into the call). Asked at 7 s it follows a greeting that started up to 2.9 s late; the answer and the safe
# line keep the 8.5 s they had.
QUESTION_AT_MS = 7000
CALL_MS = 15_500


@pytest.fixture(scope="module")
def gated_stack():
    running = start_stack(gate_policy="numbers", knowledge_dir=str(KB))
    yield running
    running.stop()


UNVERIFIABLE = "Basic costs 777 kr per month."
GROUNDED = "Basic costs 99 kr per month."


def ask_prices(running, script: CallScript, answers: tuple[str, ...]) -> dict:
    """One call per answer, placed at once on one simulator: each asks "How much does the Basic plan cost?" and
    is answered with a transcript of its own (its call's SimConfig). A call waits on the clock, not the CPU, so
    side by side they take the time of one. Answer -> (simulator, CallResult or the exception it raised)."""
    # No pinned clip sequence: the safe line is chosen by its instructions ("Say exactly: ...").
    # responses per session: 0 the greeting, 1 the answer (the one given the transcript)
    sids = {answer: "CA" + secrets.token_hex(16) for answer in answers}

    async def calls():
        async with running.model_sim(SimConfig()) as sim:
            for answer, sid in sids.items():
                sim.call_configs[sid] = SimConfig(hallucinate_responses=(1,), hallucinated_text=answer)
            results = await asyncio.gather(*(
                place_call(running.config.base_url, running.config.twilio_auth_token, script, call_sid=sid)
                for sid in sids.values()), return_exceptions=True)
            return {answer: (sim, result) for answer, result in zip(sids, results)}

    return asyncio.run(calls())


def answered(calls: dict, answer_text: str):
    """The simulator and the call answered with ``answer_text``; the call's own failure fails its own test."""
    sim, result = calls[answer_text]
    if isinstance(result, BaseException):
        raise result
    return sim, result


def call_lines(running, call_sid: str) -> list[str]:
    # the calls overlap: the whole log, and only the lines that name this call
    return [line for line in running.log_tail(1 << 30).splitlines() if f"call {call_sid}: " in line]


@pytest.fixture(scope="module")
def spine_calls(gated_stack):
    script = CallScript(duration_ms=CALL_MS, utterances=((QUESTION_AT_MS, load_clip("caller_basic_price")),),
                        bargein_at_ms=())
    return ask_prices(gated_stack, script, (UNVERIFIABLE, GROUNDED))


def heard_frames(result, response) -> int:
    frames = {f for f in response.frames() if len(f) == 160}
    return sum(1 for _, payload, _ in result.core.played_log() if payload in frames)


def test_unverifiable_number_is_never_heard_and_the_safe_line_plays(gated_stack, spine_calls):
    sim, result = answered(spine_calls, UNVERIFIABLE)
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
    assert any("rejected by the validator" in line for line in call_lines(gated_stack, result.call_sid))


def test_grounded_number_plays_whole_with_its_citation_logged(gated_stack, spine_calls):
    sim, result = answered(spine_calls, GROUNDED)
    assert result.closed_by == "carrier", gated_stack.log_tail()
    (session,) = sim.by_call(result.call_sid)
    answer = session.record.responses[1]
    assert answer.status == "completed"
    assert heard_frames(result, answer) >= len(answer.frames()) - 2
    assert not any(r.clip_name == "agent_safe_line" for r in session.record.responses)
    assert any("approved with citations" in line for line in call_lines(gated_stack, result.call_sid))


# --- the same gate under the turn-taking controller (VOICECORE_CALL_CONTROL=turns) ---------------------
TURNS_QUESTION_AT_MS = 11_000  # after the default agent's greeting played
TURNS_CALL_MS = 24_000


@pytest.fixture(scope="module")
def turns_stack():
    # sentence release: an answer is heard only once its whole sentence is approved
    running = start_stack(call_control="turns", gate_policy="numbers", knowledge_dir=str(KB),
                          gate_node_policies="greeting=scripted", gate_release="sentence")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def turns_calls(turns_stack):
    # responses per session: 0 the default agent's greeting (a scripted prompt), 1 the answer
    script = CallScript(duration_ms=TURNS_CALL_MS,
                        utterances=((TURNS_QUESTION_AT_MS, load_clip("caller_basic_price")),), bargein_at_ms=())
    return ask_prices(turns_stack, script, (UNVERIFIABLE, GROUNDED))


def record_of(running, call_sid: str) -> Path:
    path = Path(running.config.record_dir) / f"{call_sid}.jsonl"
    wait_until(path.exists, 10, f"the call's record {path.name}", detail=running.log_tail)
    return path


def test_turns_mode_scripted_prompts_pass_and_a_hallucinated_answer_is_replaced(turns_stack, turns_calls):
    sim, result = answered(turns_calls, UNVERIFIABLE)
    assert result.closed_by == "carrier", turns_stack.log_tail()
    assert result.statistics.stale_frames == 0
    (session,) = sim.by_call(result.call_sid)
    greeting, answer = session.record.responses[:2]
    # scripted prompts follow their script: approved, heard whole
    # (a scripted line after the session's instructions, which the vendor would otherwise replace)
    assert scripted_text(greeting.instructions) and greeting.session_instructions
    assert greeting.instructions.startswith(greeting.session_instructions)
    assert heard_frames(result, greeting) >= len(greeting.frames()) - 2
    # retrieve-first: the answer was asked for with the knowledge base's snippets in its instructions
    assert answer.instructions and "Facts:" in answer.instructions and "99 kr" in answer.instructions
    assert answer.hallucinated and answer.status == "cancelled"
    assert heard_frames(result, answer) == 0  # sentence release: not one frame of the rejected sentence
    safe = [r for r in session.record.responses[2:] if scripted_text(r.instructions) == "I can't verify that."]
    assert safe and heard_frames(result, safe[0]) >= len(safe[0].frames()) - 2
    # the record holds the verdicts and the snippets, and replays identically without a knowledge base
    path = record_of(turns_stack, result.call_sid)
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert any(e["k"] == "verdict" and e["rejected"] for e in entries)
    assert any(e["k"] == "snippets" and e["snippets"] for e in entries)
    replay = subprocess.run([sys.executable, "-m", "voicecore.cli", "replay", str(path), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_turns_mode_grounded_answer_plays_whole_with_citations_in_the_record(turns_stack, turns_calls):
    sim, result = answered(turns_calls, GROUNDED)
    assert result.closed_by == "carrier", turns_stack.log_tail()
    (session,) = sim.by_call(result.call_sid)
    answer = session.record.responses[1]
    assert answer.status == "completed" and heard_frames(result, answer) >= len(answer.frames()) - 2
    entries = [json.loads(line) for line in record_of(turns_stack, result.call_sid).read_text().splitlines()[1:]]
    cited = [json.loads(e["citations"]) for e in entries if e["k"] == "verdict" and e["citations"] not in ("", "[]")]
    assert any(c["number"] == "99" and c["file"].endswith("pricing.md") for batch in cited for c in batch)
