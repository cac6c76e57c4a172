"""The turn-taking scenario suite: scripted calls, each with the checks of what the caller heard and what
the model received. Invariants and replay are checked for every scenario by tests/unit/test_scenarios.py.

Timeline of the scripted call (harness defaults): greeting asked at 0, heard 0.52-2.02 s; question heard
2.54-4.04 s; each answer is heard from about 0.5 s after the caller's turn ends (VAD stop = speech end +
0.5 s). Caller speech is placed relative to the first heard frame of a prompt, so it survives timing
changes in the controller.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

from voicecore.call import controller as C

from .harness import LEAD_MS, TICK_MS, WORD_GAP_MS, Dtmf, HangUpCaller, ModelScript, Outcome, Plan, Speech

LONG = Plan(audio_ms=4000)
TURN = Speech(1500, "I would like to book a table", after="question", offset_ms=2500)
BARGE_IN = Speech(1500)  # "yes I have a question": starts like a backchannel, is not one
NO_OVER_ANSWER = Speech(300, "no", after="answer", offset_ms=1000)
YEAH_BUT = Speech(900, "yeah but on Friday", after="answer", offset_ms=1000)
STOP_WHISPER = Speech(350, "stop", after="answer", offset_ms=1000, deltas=False, words_delay_ms=1200)
LATE_WAIT = Speech(1600, "wait", after="answer", offset_ms=1000, words_delay_ms=1400)


@dataclasses.dataclass
class Scenario:
    name: str
    caller: list
    check: Callable[[Outcome], None]
    model: ModelScript = dataclasses.field(default_factory=ModelScript)
    config: C.ControllerConfig | None = None
    flow_args: dict = dataclasses.field(default_factory=dict)
    max_ms: int = 20_000
    debounce: bool = False  # counted in the "overlap in debounce scenarios" figure


def truncates(o: Outcome) -> list[int]:
    return [e["audio_end_ms"] for _, e in o.sent("conversation.item.truncate")]


def creates(o: Outcome, prompt: str | None = None) -> list[int]:
    return [t for t, e in o.sent("response.create")
            if prompt is None or (e.get("response") or {}).get("metadata", {}).get("vc_prompt") == prompt]


def frames_of(o: Outcome, prompt: str) -> dict[int, int]:
    """Frames heard per tag of one prompt."""
    counts: dict[int, int] = {}
    for tag, _, _ in o.heard_by_prompt().get(prompt, []):
        counts[tag] = counts.get(tag, 0) + 1
    return counts


VAD_SILENCE_MS = 500  # ModelScript.vad_stop_delay_ms: the commit comes this long after the speech ends


def words_at_ms(sp: Speech, word: int = 0) -> int:
    """When the ``word``-th word of ``sp`` reaches the controller, from the start of the speech (the harness
    sends them as the vendor does: after the commit, WORD_GAP_MS apart)."""
    return sp.dur_ms + VAD_SILENCE_MS + 1 + sp.words_delay_ms + word * WORD_GAP_MS


def _bargein(offset_ms: int, prompt: str = "answer", speech: Speech | None = None) -> Callable[[Outcome], None]:
    speech = speech or BARGE_IN

    def check(o: Outcome) -> None:
        st = o.controller.stats
        assert st.bargeins == 1 and st.holds == 1 and st.backchannels == 0
        cut_tag = min(frames_of(o, prompt))
        heard_ms = frames_of(o, prompt)[cut_tag] * 20
        # the VAD edge holds release at once: only the lead the carrier held plays over the caller
        assert offset_ms <= heard_ms <= offset_ms + LEAD_MS + TICK_MS
        (trunc,) = truncates(o)
        assert abs(trunc - heard_ms) <= 40, (trunc, heard_ms)  # truncate at what the caller heard
        # cut when the words stop reading as a backchannel: "yes", "yes I" (-> "yes, I see") could still be
        # one, "yes I have" is not; never resumed on the way
        (latency,) = st.bargein_latency_ms
        assert words_at_ms(speech, 2) <= latency <= words_at_ms(speech, 2) + 2 * TICK_MS, latency
        assert not [e for e in o.recorder.entries if e["k"] == "out" and e["a"]["type"] == "ResumeTag"]
        assert st.false_interruptions == 0 and st.turns_reopened == 0
    return check


def _early(o: Outcome) -> None:
    _bargein(300)(o)
    assert len(o.sent("response.cancel")) == 1  # still generating: cancel it (then truncate)


def _late(o: Outcome) -> None:
    _bargein(3300)(o)
    # generation (2x real time) finished long before: no response.cancel, only the truncate
    assert o.sent("response.cancel") == []


def _greeting(o: Outcome) -> None:
    st = o.controller.stats
    assert st.bargeins == 1
    assert creates(o, "question") == []  # the greeting never finished, the caller took the floor instead
    assert len(creates(o, "answer")) == 1
    (trunc,) = truncates(o)
    assert 300 <= trunc <= 1300


def _cough(o: Outcome) -> None:
    st = o.controller.stats
    assert (st.bargeins, st.holds, st.false_interruptions) == (0, 1, 1)
    assert frames_of(o, "answer") == {3: 200}  # all 4 s of the answer played
    assert o.sent("response.cancel") == [] and truncates(o) == []


def _backchannel(o: Outcome) -> None:
    st = o.controller.stats
    assert st.bargeins == 0 and st.backchannels == 1 and st.false_interruptions == 0
    assert list(frames_of(o, "answer").values()) == [200]
    assert len(creates(o, "answer")) == 1  # nothing asked for the "mhm"
    resume = _resume_at(o)
    completed = _completed_at(o, "item_u2")
    assert completed <= resume <= completed + 100  # the agent goes on as soon as the words say so


def _resume_at(o: Outcome) -> int:
    (resume,) = [e["t"] // 1_000_000 for e in o.recorder.entries if e["k"] == "out" and e["a"]["type"] == "ResumeTag"]
    return resume


def _completed_at(o: Outcome, item: str) -> int:
    (done,) = [t for t, e in o.received("conversation.item.input_audio_transcription.completed") if e["item_id"] == item]
    return done


def _late_words(o: Outcome) -> None:
    # "wait", its words 1.4 s after the commit (inside the transcript wait): the words decide, not the length
    st = o.controller.stats
    assert st.bargeins == 1 and st.false_interruptions == 0 and st.turns_reopened == 0
    (latency,) = st.bargein_latency_ms
    assert words_at_ms(LATE_WAIT) <= latency <= words_at_ms(LATE_WAIT) + 2 * TICK_MS
    assert len(creates(o, "answer")) == 2  # and the "wait" is answered


def _late_transcript_turn(o: Outcome) -> None:
    # 0.7 s of speech (a VAD of 0.2 s silence), its transcript 2.5 s after the commit, past the 1.5 s wait:
    # too long for a cough, so a turn by its length, never resumed
    st = o.controller.stats
    assert st.bargeins == 1 and st.false_interruptions == 0 and st.holds == 1
    answers = frames_of(o, "answer")
    assert len(answers) == 2  # the interrupted answer, then the answer to the caller's turn
    assert answers[min(answers)] * 20 <= 1000 + LEAD_MS + TICK_MS  # nothing more of it after the hold


def _seed001(o: Outcome) -> None:
    st = o.controller.stats
    assert st.tool_calls == 1 and st.debounce_flushes == 1
    outputs = o.sent("conversation.item.create")
    assert len(outputs) == 1 and outputs[0][1]["item"]["type"] == "function_call_output"
    last_speech_end = max(end for _, end, _ in o.speech)
    follow_up = [t for t in creates(o, "answer") if t > outputs[0][0]]
    assert len(follow_up) == 1 and follow_up[0] >= last_speech_end  # one combined turn, after the caller
    assert o.overlap_ms() == 0


def _silent(o: Outcome) -> None:
    st = o.controller.stats
    assert st.checkins == 3
    times = creates(o, "checkin")
    heard = o.heard_by_prompt()
    question_end = heard["question"][-1][2] + 20
    assert times[0] - question_end >= 10_000
    assert len(creates(o, "goodbye")) == 1
    assert isinstance(o.end[1], C.HangUp) and o.end[1].reason == "completed"


def _never(o: Outcome) -> None:
    st = o.controller.stats
    assert st.watchdog_fires == 6 and o.playout.heard == []
    assert isinstance(o.end[1], C.Transfer) and st.end_reason == "transfer_model_unresponsive"
    gaps = [b - a for a, b in zip(creates(o), creates(o)[1:])]
    assert all(g >= 3000 for g in gaps)  # one request at a time, each given the watchdog's 3 s


def _stall(o: Outcome) -> None:
    st = o.controller.stats
    assert st.stalls == 1 and st.retries == 1
    tags = frames_of(o, "answer")
    first, second = sorted(tags)
    assert tags[first] * 20 <= 840 and tags[second] == 75  # the stalled part, then the full retry
    assert len(o.sent("response.cancel")) == 1


def _stall_twice(o: Outcome) -> None:
    st = o.controller.stats
    assert st.stalls == 2
    assert len(creates(o, "apology")) == 1
    assert isinstance(o.end[1], C.Transfer) and o.end[1].target == "+15550100"


def _late_deltas(o: Outcome) -> None:
    assert o.controller.core.stats.deltas_dropped >= 3
    _bargein(1500)(o)


def _second_response(o: Outcome) -> None:
    st = o.controller.stats
    assert st.responses_rejected == 1
    assert "spontaneous" not in o.heard_by_prompt()
    cancels = [e.get("response_id") for _, e in o.sent("response.cancel")]
    rejected = [rid for rid, p in o.model.response_prompt.items() if p == "spontaneous"]
    assert cancels == rejected
    assert list(frames_of(o, "answer").values()) == [200]  # the answer played on, whole


def _dtmf_digit(o: Outcome) -> None:
    st = o.controller.stats
    assert st.dtmf == 1
    items = o.sent("conversation.item.create")
    assert items and "5" in items[0][1]["item"]["content"][0]["text"]
    assert creates(o, "answer")[0] == items[0][0]


def _dtmf_zero(o: Outcome) -> None:
    st = o.controller.stats
    assert st.dtmf == 1 and st.bargeins == 1  # the key cut the question at once
    assert isinstance(o.end[1], C.Transfer)
    transfer_end = o.heard_by_prompt()["transfer"][-1][2] + 20
    assert o.end[0] >= transfer_end + 500  # deferred until the goodbye played, plus grace


def _hangup(o: Outcome) -> None:
    assert isinstance(o.end[1], C.CallOver)
    ended = o.end[0]
    assert all(at < ended for _, _, at in o.playout.heard)
    assert len(o.sent("response.cancel")) == 1
    assert o.controller.ended and o.controller.on_tick(10**12, C.IDLE_PLAYOUT) == []


def _transfer_cancelled(o: Outcome) -> None:
    st = o.controller.stats
    assert st.transfers_cancelled == 1
    assert o.end is None or not isinstance(o.end[1], C.Transfer)
    assert len(creates(o, "answer")) == 1


def _goodbye(o: Outcome) -> None:
    assert isinstance(o.end[1], C.HangUp) and o.end[1].reason == "completed"
    goodbye = o.heard_by_prompt()["goodbye"]
    assert len(goodbye) == 75  # played completely
    assert o.end[0] >= goodbye[-1][2] + 20 + 500


def _end_call_tool(o: Outcome) -> None:
    st = o.controller.stats
    assert st.tool_calls == 2 and st.debounce_flushes == 1
    end_call_at = o.sent("conversation.item.create")[1][0]
    assert st.requests_dropped == 1  # the flushed combined turn, made obsolete by the goodbye
    goodbyes = creates(o, "goodbye")
    assert goodbyes[0] > end_call_at  # end_call: flushed, then the goodbye right away ...
    # ... but never over the caller: the caller was still talking (their words not all in), so it was asked
    # once, when they were done.
    assert len(goodbyes) == 1 and goodbyes[0] >= max(end for _, end, _ in o.speech)
    assert st.bargeins == 0
    assert isinstance(o.end[1], C.HangUp) and len(o.heard_by_prompt()["goodbye"]) == 75
    assert o.overlap_ms() == 0


# --- turn-taking by what the caller said --------------------------------------------------------------
def _resumes(o: Outcome) -> list[int]:
    return [e["t"] // 1_000_000 for e in o.recorder.entries if e["k"] == "out" and e["a"]["type"] == "ResumeTag"]


def _cut_for_a_turn(decided_ms_after_start: int, resumed: bool = False) -> Callable[[Outcome], None]:
    """A real turn over the answer: held at the VAD edge, cut when its words decide, and answered."""
    def check(o: Outcome) -> None:
        st = o.controller.stats
        assert st.bargeins == 1 and st.holds == 1 and st.backchannels == 0
        (latency,) = st.bargein_latency_ms
        assert decided_ms_after_start <= latency <= decided_ms_after_start + 2 * TICK_MS, latency
        assert bool(_resumes(o)) == resumed
        assert len(creates(o, "answer")) == 2  # the words got their answer
        answers = frames_of(o, "answer")
        assert answers[min(answers)] * 20 <= 1000 + LEAD_MS + TICK_MS or resumed  # nothing more after the hold
        assert answers[max(answers)] == 75  # the answer to the turn played whole
    return check


def _carries_on(kind: str) -> Callable[[Outcome], None]:
    """A backchannel or a cough over the answer: held, then resumed as soon as it is known, never answered."""
    def check(o: Outcome) -> None:
        st = o.controller.stats
        assert st.bargeins == 0 and st.holds == 1
        assert (st.backchannels, st.false_interruptions) == ((1, 0) if kind == "backchannel" else (0, 1))
        assert list(frames_of(o, "answer").values()) == [200]  # all of it, once
        assert len(creates(o, "answer")) == 1 and truncates(o) == []
        (resume,) = _resumes(o)
        done = _completed_at(o, "item_u2")
        assert done <= resume <= done + 100
    return check


def _reopened(o: Outcome) -> None:
    # 0.4 s without words for 1.5 s: a cough, resumed; then its words ("sorry who is this") came: a turn after
    # all, cut where the resumed answer was, and answered
    st = o.controller.stats
    assert st.false_interruptions == 1 and st.turns_reopened == 1 and st.bargeins == 1
    (resume,) = _resumes(o)
    done = _completed_at(o, "item_u2")
    assert resume < done
    (cancel,) = [t for t, _ in o.sent("conversation.item.truncate")]
    assert done <= cancel <= done + TICK_MS
    assert len(creates(o, "answer")) == 2


def _answered_at_once(o: Outcome) -> None:
    # a turn while the agent is silent: asked for when its transcript completes, not a fixed wait later
    done = _completed_at(o, "item_u1")
    (answer,) = creates(o, "answer")
    assert done <= answer <= done + TICK_MS


def _failed_transcript(kind: str) -> Callable[[Outcome], None]:
    def check(o: Outcome) -> None:
        st = o.controller.stats
        if kind == "turn":
            assert st.bargeins == 1 and len(creates(o, "answer")) == 2 and _resumes(o) == []
        else:
            assert st.bargeins == 0 and st.false_interruptions == 1 and len(_resumes(o)) == 1
            assert list(frames_of(o, "answer").values()) == [200]
    return check


def _held_at_creation(words: bool) -> Callable[[Outcome], None]:
    """The question was asked just before the caller began: created while they speak, it waits, held."""
    def check(o: Outcome) -> None:
        st = o.controller.stats
        (start, _end, _) = o.speech[0]
        question = o.heard_by_prompt().get("question", [])
        assert not [at for _, _, at in question if at >= start and at < _completed_at(o, "item_u1")]
        if words:
            assert question == [] and len(creates(o, "answer")) == 1  # never heard; the turn answered
        else:
            assert len(question) == 75 and st.backchannels == 1 and creates(o, "answer") == []
    return check


# --- the validation gate in the controller: per-node release policies, retrieve-first ------------------
GATED = C.ControllerConfig(gate_policy="numbers", retrieve_first=True)
ASK_PRICE = Speech(1500, "How much does Basic cost", after="question", offset_ms=2500)
HALLUCINATED = "Basic costs 777 kr per month."
HONEST = "Basic costs 99 kr per month."
OFF_SCRIPT = "Our prices start at 5 kr today."


def gated_verdicts(o: Outcome) -> list[dict]:
    return [e for e in o.recorder.entries if e["k"] == "verdict"]


def _rejects_hallucination(o: Outcome) -> None:
    st = o.controller.stats
    assert st.gate_rejections == 1 and st.safe_lines == 1 and st.retrievals == 1
    (answer_create,) = [e for _, e in o.sent("response.create") if e["response"]["metadata"]["vc_prompt"] == "answer"]
    assert "99 kr" in answer_create["response"]["instructions"]  # retrieve-first: the snippet is in its context
    # The number is the third word of six over 3 s of audio: its audio starts at 1000 ms (frame 50); not
    # one frame of it reaches the caller, and the answer's tag is cancelled before it played out.
    answer = frames_of(o, "answer")
    assert sum(answer.values()) <= 50 - 10
    assert len(o.heard_by_prompt()["safe_line"]) == 75  # the safe line plays whole
    (rejection,) = [v for v in gated_verdicts(o) if v["rejected"]]
    assert "knowledge base" in rejection["reason"]
    assert o.overlap_ms() == 0


def _approves_grounded(o: Outcome) -> None:
    st = o.controller.stats
    assert st.gate_rejections == 0 and st.safe_lines == 0
    (tag,) = frames_of(o, "answer")
    assert frames_of(o, "answer")[tag] == 150  # the whole 3 s answer
    final = [v for v in gated_verdicts(o) if v["tag"] == tag][-1]
    assert final["frames"] == C.APPROVE_ALL
    assert {(c["file"], c["number"]) for c in json.loads(final["citations"])} == {("kb/pricing.md", "99")}


def _scripted_retried(o: Outcome) -> None:
    st = o.controller.stats
    assert st.gate_rejections == 1 and st.retries == 1
    assert len(creates(o, "question")) == 2
    first, second = sorted(t for t, p in o.tag_prompt.items() if p == "question")
    heard = frames_of(o, "question")
    assert heard.get(first, 0) == 0  # off script from its first words: rejected before a frame played
    assert heard[second] == 75
    # the flow went on: the caller's turn was answered after the approved question
    assert creates(o, "answer")


def _scripted_gives_up(o: Outcome) -> None:
    st = o.controller.stats
    assert len(creates(o, "question")) == 1 + 3 and st.gate_rejections == 4 and st.retries == 3
    assert frames_of(o, "question") == {}  # every attempt rejected before a frame of it played
    # the flow advanced past the prompt: the caller's turn still got its answer
    assert creates(o, "answer")


def _no_support(o: Outcome) -> None:
    st = o.controller.stats
    assert st.retrievals == 1 and st.retrievals_empty == 1 and st.safe_lines == 1
    assert creates(o, "answer") == []  # the model was never asked to invent an answer
    assert len(o.heard_by_prompt()["safe_line"]) == 75
    (snippets,) = [e for e in o.recorder.entries if e["k"] == "snippets"]
    assert snippets["snippets"] == []


# A fast transcript of the first fragment: its turn is asked for just before the caller goes on, so the
# tool call arrives mid-sentence: the call in which an agent spoke over a caller who had not finished, right
# after a tool result (the agent must wait for the caller's quiet: docs/explanation/agents.md#tools).
SEED001_CALLER = [
    Speech(800, "Yeah. I'm", after="question", offset_ms=1600, words_delay_ms=50),
    Speech(1500, "currently having a problem", after="question", offset_ms=3100),
    Speech(1200, "with my air conditioning", after="question", offset_ms=5200),
]

SCENARIOS = [
    # 8 s of answer at 2x real time: still being generated when the caller's words decide, 2.7 s into it
    Scenario("bargein_early", [TURN, Speech(1500, after="answer", offset_ms=300)], _early, ModelScript(plans={"answer": [Plan(audio_ms=8000), Plan()]})),
    Scenario("bargein_mid", [TURN, Speech(1500, after="answer", offset_ms=1500)], _bargein(1500), ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("bargein_late", [TURN, Speech(1500, after="answer", offset_ms=3300)], _late, ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("bargein_during_greeting", [Speech(1500, "hi I need help", after="greeting", offset_ms=400)], _greeting),
    Scenario("cough_without_words", [TURN, Speech(300, None, after="answer", offset_ms=1000)], _cough, ModelScript(plans={"answer": [LONG]})),
    # Realtime input transcription arrives after the commit: the words of a short "mhm" come after it ended.
    Scenario("short_backchannel", [TURN, Speech(300, "mhm", after="answer", offset_ms=1000, words_delay_ms=900)], _backchannel,
             ModelScript(plans={"answer": [LONG]})),
    Scenario("late_transcript_is_a_turn_not_a_cough", [TURN, Speech(700, "stop please", after="answer", offset_ms=1000, words_delay_ms=2500)],
             _late_transcript_turn, ModelScript(plans={"answer": [LONG, Plan()]}, vad_stop_delay_ms=200),
             config=C.ControllerConfig(vad_silence_duration_ms=200)),
    Scenario("late_words_decide_within_the_wait", [TURN, LATE_WAIT], _late_words, ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("fast_tool_call_mid_sentence", SEED001_CALLER, _seed001,
             ModelScript(plans={"answer": [Plan(tool="lookup_caller"), Plan(audio_ms=2500)]}), debounce=True),
    Scenario("end_call_flushes_debounce", SEED001_CALLER, _end_call_tool,
             ModelScript(plans={"answer": [Plan(tool="lookup_caller,end_call")]}), debounce=True),
    Scenario("caller_silent_through_checkins", [], _silent, max_ms=150_000),
    Scenario("model_never_responds", [], _never, ModelScript(default=Plan(never=True)), max_ms=60_000),
    Scenario("model_stalls_mid_audio", [TURN], _stall, ModelScript(plans={"answer": [Plan(audio_ms=3000, stall_after_ms=800), Plan()]}), max_ms=25_000),
    Scenario("model_stalls_twice", [TURN], _stall_twice, ModelScript(plans={"answer": [Plan(audio_ms=3000, stall_after_ms=800)]}), max_ms=40_000),
    Scenario("late_deltas_after_cancel", [TURN, Speech(1500, after="answer", offset_ms=1500)], _late_deltas,
             ModelScript(plans={"answer": [Plan(audio_ms=12_000), Plan()]}, late_deltas_after_cancel=3, speed=1.2)),
    Scenario("second_response_while_playing", [TURN], _second_response, ModelScript(plans={"answer": [LONG]}, spontaneous_at_ms=9000)),
    Scenario("dtmf_digit_is_caller_input", [Dtmf("5", after="question", offset_ms=2500)], _dtmf_digit),
    Scenario("dtmf_zero_transfers", [Dtmf("0", after="question", offset_ms=600)], _dtmf_zero),
    Scenario("caller_hangs_up_mid_response", [TURN, HangUpCaller(after="answer", offset_ms=1000)], _hangup, ModelScript(plans={"answer": [LONG]})),
    Scenario("transfer_cancelled_by_bargein", [Dtmf("0", after="question", offset_ms=600), Speech(1500, "no wait, one more thing", after="transfer", offset_ms=800)],
             _transfer_cancelled, ModelScript(plans={"transfer": [Plan(audio_ms=3000)]})),
    Scenario("gate_rejects_hallucinated_answer", [ASK_PRICE], _rejects_hallucination,
             ModelScript(plans={"answer": [Plan(audio_ms=3000, text=HALLUCINATED)]}), config=GATED),
    Scenario("gate_approves_grounded_answer", [ASK_PRICE], _approves_grounded,
             ModelScript(plans={"answer": [Plan(audio_ms=3000, text=HONEST)]}), config=GATED),
    Scenario("gate_scripted_prompt_retried", [TURN], _scripted_retried,
             ModelScript(plans={"question": [Plan(text=OFF_SCRIPT), Plan(text="How can I help you today?")]}),
             flow_args={"node_policies": {"question": "scripted"}}),
    Scenario("gate_scripted_prompt_gives_up", [Speech(1500, "I would like to book a table", at_ms=16_000)], _scripted_gives_up,
             ModelScript(plans={"question": [Plan(text=OFF_SCRIPT)]}), flow_args={"node_policies": {"question": "scripted"}}),
    Scenario("retrieve_first_without_support", [Speech(1500, "How much is the helicopter rental", after="question", offset_ms=2500)],
             _no_support, config=GATED),
    # --- turn-taking by what the caller said (an answer of 4 s; the caller 1 s into it) ---
    Scenario("short_real_turn_is_cut_and_answered", [TURN, NO_OVER_ANSWER], _cut_for_a_turn(words_at_ms(NO_OVER_ANSWER)),
             ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("yeah_but_is_a_turn_not_a_backchannel", [TURN, YEAH_BUT], _cut_for_a_turn(words_at_ms(YEAH_BUT, 1)),
             ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("late_completed_only_short_turn", [TURN, STOP_WHISPER], _cut_for_a_turn(words_at_ms(STOP_WHISPER)),
             ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("long_backchannel_carries_on", [TURN, Speech(800, "okay okay", after="answer", offset_ms=1000)],
             _carries_on("backchannel"), ModelScript(plans={"answer": [LONG]})),
    Scenario("late_completed_only_backchannel", [TURN, Speech(400, "Mm-hmm.", after="answer", offset_ms=1000, deltas=False,
                                                           words_delay_ms=1100)],
             _carries_on("backchannel"), ModelScript(plans={"answer": [LONG]})),
    Scenario("cough_completed_empty", [TURN, Speech(300, None, after="answer", offset_ms=1000, words_delay_ms=700)],
             _carries_on("noise"), ModelScript(plans={"answer": [LONG]})),
    # the vendor heard no words at all in 0.8 s of sound (a long breath, a door): noise, however long
    Scenario("long_noise_completed_empty", [TURN, Speech(800, None, after="answer", offset_ms=1000, words_delay_ms=700)],
             _carries_on("noise"), ModelScript(plans={"answer": [LONG]})),
    Scenario("late_words_reopen_a_cough", [TURN, Speech(400, "sorry who is this", after="answer", offset_ms=1000, deltas=False,
                                                      words_delay_ms=1800)],
             _reopened, ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("failed_transcript_long_is_a_turn", [TURN, Speech(800, after="answer", offset_ms=1000, failed=True)],
             _failed_transcript("turn"), ModelScript(plans={"answer": [LONG, Plan()]})),
    Scenario("failed_transcript_short_is_noise", [TURN, Speech(300, after="answer", offset_ms=1000, failed=True)],
             _failed_transcript("noise"), ModelScript(plans={"answer": [LONG]})),
    Scenario("turn_answered_when_its_words_are_in", [TURN], _answered_at_once),
    Scenario("created_over_a_backchannel_waits_then_plays", [Speech(500, "mhm", after="greeting", offset_ms=1520)],
             _held_at_creation(words=False)),
    Scenario("created_over_a_turn_is_never_heard", [Speech(900, "hello is anyone there", after="greeting", offset_ms=1520)],
             _held_at_creation(words=True)),
    Scenario("goodbye_then_hangup", [TURN, Speech(1200, "thanks that's all", after="answer", offset_ms=2500)], _goodbye, flow_args={"max_turns": 1}),
]
