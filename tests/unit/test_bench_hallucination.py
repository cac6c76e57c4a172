"""The bench's `hallucination` scenario: its knowledge base, its script and hallucination pattern, and the
figures bench/analysis.py computes from the simulators' records (synthetic records, no timing). The
end-to-end smoke of `voicecore bench --scenario hallucination` is tests/e2e/test_bench_scenarios.py's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import analysis
from bench.scenarios import HALLUCINATION_UNGATED, KNOWLEDGE_DIR, auto_agent_clips, get_scenario
from voicecore.sim.audio_clips import clip_index
from voicecore.sim.carrier import CallResult
from voicecore.sim.carrier_core import ReceivedFrame
from voicecore.sim.model import CancelRecord, ResponseRecord, SessionRecord, SimConfig, SpeechRecord
from voicecore.timing import FRAME_BYTES
from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir

HALLUCINATED = SimConfig().hallucinated_text  # "Basic costs 777 kr per month."


# ----- knowledge base -----------------------------------------------------------------------------


def _kb() -> KnowledgeBase:
    return KnowledgeBase.from_documents(load_knowledge_dir(KNOWLEDGE_DIR))


@pytest.mark.parametrize("clip", [c for c in clip_index() if c.role == "agent"], ids=lambda c: c.name)
def test_every_honest_agent_clip_grounds(clip):
    result = _kb().ground_text(clip.text)
    assert result.ok, (clip.text, result.unverified)


@pytest.mark.parametrize("text", [HALLUCINATED, "Basic costs 99 kr per month.", "Premium costs 777 kronor per month.",
                                  "Basic includes 10 kronor of data."])
def test_hallucinated_numbers_do_not_ground(text):
    result = _kb().ground_text(text)
    assert not result.ok and result.unverified


def test_numbered_clips_cite_the_knowledge_base():
    result = _kb().ground_text("Our Basic plan costs 199 kronor per month, with no binding period.")
    assert result.ok and any("199" in c.snippet for c in result.citations)


# ----- scenario -----------------------------------------------------------------------------------


def test_stack_environment_turns_the_gate_on_only_in_the_gated_run():
    gated, ungated = get_scenario("hallucination"), get_scenario(HALLUCINATION_UNGATED)
    assert dict(gated.stack_env)["VOICECORE_GATE_POLICY"] == "numbers"
    assert dict(ungated.stack_env)["VOICECORE_GATE_POLICY"] == "off"
    kb = Path(dict(gated.stack_env)["VOICECORE_KNOWLEDGE_DIR"])
    assert kb.is_absolute() and sorted(kb.glob("*.md"))
    assert get_scenario("steady").stack_env == ()
    for scenario in (gated, ungated):
        assert scenario.sim_config.clip_sequence == ()  # else the safe line would not get its clip


def _answer_flags(hallucinate: tuple[int, ...], gated: bool, answers: int) -> list[bool]:
    """Which answers the simulator hallucinates, by its per-session response index (0 is the greeting);
    with the gate on, a hallucinated answer is followed by the safe line, which takes an index."""
    flags: list[bool] = []
    index = 1
    while len(flags) < answers:
        hallucinated = index in hallucinate
        flags.append(hallucinated)
        index += 2 if hallucinated and gated else 1
    return flags


@pytest.mark.parametrize("name,gated", [("hallucination", True), (HALLUCINATION_UNGATED, False)])
def test_every_other_answer_is_hallucinated(name, gated):
    flags = _answer_flags(get_scenario(name).sim_config.hallucinate_responses, gated, 60)
    assert flags == [k % 2 == 0 for k in range(60)]


def test_script_asks_after_each_answer_without_overlap():
    scenario = get_scenario("hallucination")
    agent = auto_agent_clips()
    assert "agent_safe_line" not in agent and agent[0] == "agent_question"
    for call_index in range(3):
        script = scenario.script(30_000, call_index)
        assert len(script.utterances) >= 2 and script.bargein_at_ms == ()
        ends = [at + len(audio) // 8 for at, audio in script.utterances]
        starts = [at for at, _ in script.utterances]
        assert starts[0] >= 250 + 4025  # after the greeting (agent_question) has played
        # between a question's end and the next one: the answer delay and the longest answer fits
        assert all(nxt - end >= 800 + 3000 for end, nxt in zip(ends, starts[1:]))
        assert ends[-1] < 30_000


# ----- figures on synthetic records ---------------------------------------------------------------

_FRAMES = 100


def _audio(seed: int, frames: int = _FRAMES) -> bytes:
    # distinct content per response and per frame, so frames match their owner by content
    return b"".join(bytes([seed, k % 256, k // 256]) + bytes([(seed * 7 + k) % 256]) * (FRAME_BYTES - 3)
                    for k in range(frames))


def _response(index: int, seed: int, *, clip: str = "agent_basic_price", text: str = "Our Basic plan costs 199 kronor.",
              hallucinated: bool = False, status: str = "completed", first_delta_ms: int | None = 1000,
              cancel_ms: int | None = None) -> ResponseRecord:
    audio = _audio(seed)
    return ResponseRecord(index=index, response_id=f"resp_{seed}", item_id=f"item_{seed}", clip_name=clip,
                          text=HALLUCINATED if hallucinated else text, audio=audio, delta_bytes=[len(audio)],
                          created_ms=0, first_delta_ms=first_delta_ms, cancel_ms=cancel_ms, status=status,
                          hallucinated=hallucinated)


def _session(responses, cancels=(), speech=()) -> SessionRecord:
    return SessionRecord(session_id="s", session_index=0, naming="ga", model="m", connected_ms=0, call_sid="CA1",
                         responses=list(responses), cancels=list(cancels),
                         speech=[SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=t) for t in speech])


def _call(arrivals: list[tuple[ResponseRecord, int, float]], played: set[tuple[str, int]],
          clears_ms: tuple[float, ...] = ()) -> CallResult:
    """Carrier frames: (response, frame index, arrival ms); ``played``: (response_id, index) that played (80 ms
    after arriving); ``clears_ms``: the clears, which throw away what arrived before them and did not play."""
    frames, played_frames = [], []
    for n, (response, index, arrival_ms) in enumerate(arrivals):
        frame = ReceivedFrame(n, arrival_ms, response.frames()[index], sum(1 for c in clears_ms if c <= arrival_ms))
        frames.append(frame)
        if (response.response_id, index) in played:
            frame.played_at_ms = arrival_ms + 80
            frame.played_ms = 20.0
            played_frames.append(frame)
        else:
            frame.dropped = True
            frame.dropped_at_ms = min(c for c in clears_ms if c > arrival_ms)
    core = SimpleNamespace(frames=frames, played=played_frames, stopped_at_ms=None,
                           metrics=SimpleNamespace(clear_at_ms=list(clears_ms)))
    return CallResult(call_sid="CA1", metrics=None, statistics=None, close_code=None, closed_by="carrier", core=core)


def test_answers_exclude_greeting_safe_line_and_failed():
    greeting = _response(0, 1, clip="agent_question")
    answer = _response(1, 2)
    safe = _response(2, 3, clip="agent_safe_line", text="I can't verify that.")
    failed = _response(3, 4, status="failed")
    assert [r.index for r in analysis.answers([_session([greeting, answer, safe, failed])])] == [1]


def test_claim_frame_follows_the_simulators_word_alignment():
    response = _response(1, 2, hallucinated=True)  # "Basic costs 777 kr per month.": 777 is word 2 of 6
    assert analysis.claim_frame(response) == _FRAMES * 2 // 6
    assert analysis.claim_frame(_response(1, 3, text="You can cancel at any time.")) is None


def test_figures_of_a_gated_call():
    greeting = _response(0, 1, clip="agent_question", text="Would you like to hear about our plans?", first_delta_ms=0)
    bad = _response(1, 2, hallucinated=True, status="cancelled", first_delta_ms=5000, cancel_ms=5600)
    safe = _response(2, 3, clip="agent_safe_line", text="I can't verify that.", first_delta_ms=6100)
    good = _response(3, 4, first_delta_ms=9000)
    bad2 = _response(4, 5, hallucinated=True, status="cancelled", first_delta_ms=14000, cancel_ms=14200)
    record = _session([greeting, bad, safe, good, bad2], cancels=[CancelRecord(5600, None, "resp_2"), CancelRecord(14200, None, "resp_5")])
    arrivals = ([(greeting, k, 100 + 20 * k) for k in range(10)]
                + [(bad, k, 5250 + 20 * k) for k in range(40)]  # the words before the claim, and 7 frames of it
                + [(safe, k, 6200 + 20 * k) for k in range(20)]
                + [(good, k, 9030 + 20 * k) for k in range(50)])  # bad2: rejected before any frame was sent
    played = {(r.response_id, k) for r, k, _ in arrivals if not (r is bad and k >= 38)}  # a clear dropped 2
    # gaps: two while bad's audio waited at its claim (its last frame played at 5250+37*20+80 = 6070, the
    # clear at 6120 ended it: ticks 6090 and 6110); the greeting's (only 10 of its 100 frames came) are not
    # in a hallucinated answer
    figures = analysis.hallucination_figures([(_call(arrivals, played, (6120,)), [record])])
    assert figures["underruns_in_hallucinated_answers"] == 2
    assert figures["answers"] == 3
    assert figures["hallucinated_answers"] == 2
    assert figures["hallucinated_frames_played"] == 38
    assert figures["hallucinated_frames_played_past_claim"] == 38 - _FRAMES * 2 // 6
    assert figures["hallucinated_answers_blocked"] == 1
    assert figures["false_rejections"] == 0
    assert figures["safe_lines"] == 1 and figures["safe_lines_played"] == 1
    # first audio per answer that reached the carrier: bad 250 ms, good 30 ms (not the greeting or safe line)
    assert figures["first_audio_ms"]["count"] == 2
    assert figures["first_audio_ms"]["max"] == 250.0


def test_false_rejections_need_an_honest_answer_cancelled_without_speech_near():
    def record(speech, hallucinated=False):
        r = _response(1, 2, hallucinated=hallucinated, status="cancelled", cancel_ms=10_000)
        return _session([r], cancels=[CancelRecord(10_000, None, r.response_id)], speech=speech)

    assert analysis.false_rejections([record([])]) == 1
    assert analysis.false_rejections([record([4_000])]) == 1  # a question long before: not a barge-in
    assert analysis.false_rejections([record([9_700])]) == 0  # the caller barged in
    assert analysis.false_rejections([record([10_100])]) == 0  # speech_started raced the cancel
    assert analysis.false_rejections([record([], hallucinated=True)]) == 0  # a true rejection
    completed = _session([_response(1, 3)])
    assert analysis.false_rejections([completed]) == 0


def test_cancel_time_falls_back_to_the_response():
    r = _response(1, 2, status="cancelled", cancel_ms=700)
    assert analysis.cancel_ms(_session([r]), r) == 700
    assert analysis.cancel_ms(_session([r], cancels=[CancelRecord(650, None, r.response_id)]), r) == 650
    assert analysis.cancel_ms(_session([_response(1, 3)]), _response(1, 3)) is None


def test_ungated_call_plays_the_claim():
    bad = _response(1, 2, hallucinated=True, first_delta_ms=1000)
    arrivals = [(bad, k, 1020 + 20 * k) for k in range(_FRAMES)]
    figures = analysis.hallucination_figures([(_call(arrivals, {(bad.response_id, k) for k in range(_FRAMES)}), [_session([bad])])])
    assert figures["hallucinated_frames_played"] == _FRAMES
    assert figures["hallucinated_frames_played_past_claim"] == _FRAMES - _FRAMES * 2 // 6
    assert figures["hallucinated_answers_blocked"] == 0 and figures["safe_lines"] == 0
    assert figures["first_audio_ms"]["p50"] == 20.0


def test_no_calls_no_figures():
    figures = analysis.hallucination_figures([])
    assert figures["answers"] == figures["hallucinated_answers"] == figures["false_rejections"] == 0
    assert figures["first_audio_ms"]["count"] == 0
