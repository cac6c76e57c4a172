"""voicecore.callturns' turn figures on synthetic simulator records (no stack, no sockets, a fake clock),
each definition on its own: backchannels over agent audio and the ones that cut it, answered, unanswered,
merged turns and turns cut by the call's end, talkover of real turns, how long a hold lasted (resumed or
cut) and answers resumed after a real turn's words; then the keys and problem lines in summarize."""

from __future__ import annotations

from test_callreport import _answer, _core, _deliver

from bench.analysis import RecordSet
from voicecore.callreport import summarize
from voicecore.callturns import (
    BACKCHANNEL_CUT_AFTER_MS,
    CALL_END_GRACE_MS,
    HOLD_GAP_MS,
    MERGE_TURNS_MS,
    turn_figures,
)
from voicecore.sim.carrier import CallResult
from voicecore.sim.model import CancelRecord, ResponseRecord, SessionRecord, SpeechRecord, TruncateRecord

PACE = [20.0 * k for k in range(100)]  # one frame every 20 ms from 0: the agent audible 0-2000 ms


def utterance(start: float, kind: str | None = "caller", stop: float | None = None, text: str = "Wait.",
              completed: float | None = None, decisive: float | None = None) -> SpeechRecord:
    speech = SpeechRecord(item_id=f"item_{start}", audio_start_ms=0, started_at_ms=start,
                          stopped_at_ms=start + 400 if stop is None else stop, transcript=text, caller_kind=kind)
    speech.transcript_completed_ms = completed
    speech.decisive_words_ms = decisive
    return speech


def request(created_ms: float, origin: str = "client", overlaps: str | None = None) -> ResponseRecord:
    """A response asked for at created_ms that never reached the carrier (no audio)."""
    return ResponseRecord(index=0, response_id=f"resp_{created_ms}_{origin}", item_id="", clip_name="", text="",
                          audio=b"", delta_bytes=[], created_ms=created_ms, origin=origin, overlaps=overlaps)


def record(speech: list[SpeechRecord], responses: list[ResponseRecord]) -> SessionRecord:
    return SessionRecord("s", 0, "ga", "m", 0, call_sid="CA1", responses=responses, speech=speech)


def played_call(answer: ResponseRecord, arrivals: list[float], end_ms: float = 60_000):
    core = _core()
    _deliver(core, answer, arrivals)
    core.tick_play(end_ms)
    core.stop_message(end_ms)
    return core


# ---- backchannels --------------------------------------------------------------------------------------


def test_backchannels_are_counted_over_agent_audio_only():
    answer = _answer("a", 100, 1)
    core = played_call(answer, PACE)
    speech = [utterance(300, "backchannel", text="Mm-hmm."), utterance(900, "backchannel", text="Yeah."),
              utterance(5000, "backchannel", text="Okay."),  # the agent was silent: a backchannel to nobody
              utterance(1500, "noise", text="")]
    figures = turn_figures(core, [record(speech, [answer])])
    assert (figures.backchannels, figures.backchannels_that_cut) == (2, 0)


def test_a_backchannel_cuts_when_the_answer_is_cancelled_before_its_transcript_is_2_s_old():
    answer = _answer("a", 100, 1)
    answer.cancel_ms = 900 + BACKCHANNEL_CUT_AFTER_MS  # the last moment still counted
    core = played_call(answer, PACE)
    speech = [utterance(300, "backchannel", completed=900)]
    assert turn_figures(core, [record(speech, [answer])]).backchannels_that_cut == 1
    answer.cancel_ms = 900 + BACKCHANNEL_CUT_AFTER_MS + 1
    assert turn_figures(core, [record(speech, [answer])]).backchannels_that_cut == 0
    answer.cancel_ms = 250  # before the backchannel started: not its doing
    assert turn_figures(core, [record(speech, [answer])]).backchannels_that_cut == 0
    # without a transcript the window runs from the VAD stop
    answer.cancel_ms = 700 + BACKCHANNEL_CUT_AFTER_MS
    assert turn_figures(core, [record([utterance(300, "backchannel", stop=700)], [answer])]).backchannels_that_cut == 1


def test_a_cancel_after_the_next_real_turn_started_is_that_turns():
    answer = _answer("a", 100, 1)
    answer.cancel_ms = 1300
    core = played_call(answer, PACE)
    speech = [utterance(300, "backchannel", completed=900), utterance(1200, "caller", text="Stop.")]
    figures = turn_figures(core, [record(speech, [answer])])
    assert (figures.backchannels, figures.backchannels_that_cut) == (1, 0)


# ---- answered and unanswered real turns -------------------------------------------------------------------


def turn_states(speech: list[SpeechRecord], responses: list[ResponseRecord], end_ms: float = 60_000):
    core = _core()
    core.stop_message(end_ms)
    figures = turn_figures(core, [record(speech, responses)])
    return figures.real_turns, figures.unanswered_turns, figures.turns_cut_by_call_end


def test_a_turn_is_answered_by_a_response_asked_for_after_its_stop_and_before_the_next_turn():
    speech = [utterance(1000, stop=2000), utterance(10_000, stop=11_000)]
    assert turn_states(speech, [request(2500), request(11_200)]) == (2, 0, 0)
    assert turn_states(speech, [request(1500), request(11_200)]) == (2, 1, 0)  # asked for before it ended
    assert turn_states(speech, [request(10_500), request(11_200)]) == (2, 1, 0)  # only after the next began
    # the vendor's own turn-detection response answers too; the simulator's injected overlap does not
    assert turn_states(speech, [request(2500, "turn_detection"), request(11_200)]) == (2, 0, 0)
    assert turn_states(speech, [request(2500, "overlap", overlaps="r"), request(11_200)]) == (2, 1, 0)


def test_backchannels_and_noises_are_not_turns():
    speech = [utterance(1000, "backchannel", text="Mm-hmm."), utterance(5000, "noise", text=""),
              utterance(9000, None, text="hello")]  # no packaged clip: not judged
    assert turn_states(speech, []) == (0, 0, 0)


def test_turns_less_than_3_s_apart_merge_into_one_answer():
    first = utterance(1000, stop=2000)
    soon = utterance(2000 + MERGE_TURNS_MS - 1, stop=6000)
    assert turn_states([first, soon], [request(6500)]) == (2, 0, 0)
    assert turn_states([first, soon], []) == (2, 2, 0)  # neither got its answer
    late = utterance(2000 + MERGE_TURNS_MS, stop=6000)
    assert turn_states([first, late], [request(6500)]) == (2, 1, 0)
    # a chain of three: each continues the next
    chain = [utterance(1000, stop=1500), utterance(2500, stop=3000), utterance(4000, stop=4500)]
    assert turn_states(chain, [request(5000)]) == (3, 0, 0)


def test_a_turn_the_call_ended_on_is_cut_not_unanswered():
    end = 30_000
    assert turn_states([utterance(20_000, stop=end - CALL_END_GRACE_MS + 1)], [], end) == (1, 0, 1)
    assert turn_states([utterance(20_000, stop=end - CALL_END_GRACE_MS)], [], end) == (1, 1, 0)
    never_stopped = utterance(29_000)
    never_stopped.stopped_at_ms = None
    assert turn_states([never_stopped], [], end) == (1, 0, 1)
    # merged with a turn the call cut: cut with it
    assert turn_states([utterance(15_000, stop=20_000), utterance(22_000, stop=29_000)], [], end) == (2, 0, 2)


def test_the_window_counts_the_turns_that_started_in_it():
    core = _core()
    core.stop_message(60_000)
    speech = [utterance(1000, stop=2000), utterance(20_000, stop=21_000)]
    figures = turn_figures(core, [record(speech, [])], window_ms=(10_000.0, 30_000.0))
    assert (figures.real_turns, figures.unanswered_turns) == (1, 1)


# ---- talkover, hold, resumed after words -----------------------------------------------------------------


def test_talkover_counts_real_turns_only():
    answer = _answer("a", 100, 1)
    core = played_call(answer, PACE)
    speech = [utterance(300, "backchannel", text="Mm-hmm."), utterance(1200, "caller", stop=1600)]
    figures = turn_figures(core, [record(speech, [answer, request(1700)])])
    audio_end = core.played[-1].played_at_ms + 20  # the last of the 100 frames (2 s of audio) ends the stretch
    assert figures.talkover_real_turns_ms == [audio_end - 1200] and 2000 <= audio_end <= 2040


def held(resume_at: float) -> list[float]:
    """Frames 0-9 one every 20 ms (the agent audible 0-200 ms), then held; frames 10-99 from resume_at."""
    return PACE[:10] + [resume_at + 20.0 * k for k in range(90)]


def test_hold_resumed_runs_from_the_start_to_the_answer_arriving_again():
    answer = _answer("a", 100, 1)
    core = played_call(answer, held(700))
    figures = turn_figures(core, [record([utterance(100, "backchannel", text="Mm-hmm.")], [answer])])
    assert figures.hold_resumed_ms == [600.0] and figures.hold_cut_ms == []


def test_hold_cut_runs_from_the_start_to_the_cancel_whichever_came_first():
    answer = _answer("a", 100, 1)
    answer.cancel_ms = 650
    core = played_call(answer, held(700))
    figures = turn_figures(core, [record([utterance(100, stop=500)], [answer, request(700)])])
    assert figures.hold_cut_ms == [550.0] and figures.hold_resumed_ms == []
    answer.cancel_ms = 750  # resumed at 700 first
    figures = turn_figures(core, [record([utterance(100, stop=500)], [answer, request(800)])])
    assert figures.hold_resumed_ms == [600.0] and figures.hold_cut_ms == []


def test_an_answer_the_vendor_had_finished_is_cut_by_its_truncate_or_a_late_cancel():
    # generated faster than it plays, the answer is done at the vendor when the caller speaks: the runtime
    # cuts it by truncating its item (a response.cancel then finds nothing to cancel)
    answer = _answer("a", 100, 1)
    core = played_call(answer, held(5000))
    rec = record([utterance(100, stop=500)], [answer, request(600)])
    rec.truncates.append(TruncateRecord("item_a", 120, at_ms=400, ok=True, item_audio_ms=2000))
    assert turn_figures(core, [rec]).hold_cut_ms == [300.0]
    bc = record([utterance(100, "backchannel", completed=700)], [answer])
    bc.cancels.append(CancelRecord(at_ms=2600, requested_response_id="a", cancelled_response_id=None))
    figures = turn_figures(core, [bc])
    assert figures.backchannels_that_cut == 1 and figures.hold_cut_ms == [2500.0]


def test_no_hold_sample_when_the_answer_played_on_or_a_gap_was_too_short():
    answer = _answer("a", 100, 1)
    core = played_call(answer, PACE)
    assert turn_figures(core, [record([utterance(100, "backchannel")], [answer])]).hold_resumed_ms == []
    short = _answer("b", 100, 1)
    core = played_call(short, PACE[:10] + [180 + HOLD_GAP_MS - 1 + 20.0 * k for k in range(90)])
    assert turn_figures(core, [record([utterance(100, "backchannel")], [short])]).hold_resumed_ms == []


def test_an_answer_resumed_after_the_turns_words_is_counted():
    answer = _answer("a", 100, 1)
    core = played_call(answer, held(700))
    after = turn_figures(core, [record([utterance(100, stop=500, decisive=650)], [answer, request(900)])])
    assert after.resumed_after_words == 1
    before = turn_figures(core, [record([utterance(100, stop=500, decisive=750)], [answer, request(900)])])
    assert before.resumed_after_words == 0  # the words came after it resumed: a false alarm then
    bc = turn_figures(core, [record([utterance(100, "backchannel", text="Yeah.", decisive=None)], [answer])])
    assert bc.resumed_after_words == 0


def test_a_resume_is_timed_from_the_words_that_decided_it():
    answer = _answer("a", 100, 1)
    core = played_call(answer, held(700))
    figures = turn_figures(core, [record([utterance(100, "backchannel", text="Mm-hmm.", completed=640)], [answer])])
    assert figures.resume_after_decision_ms == [60.0]
    # resumed before any words (the runtime judged by length): no sample
    early = turn_figures(core, [record([utterance(100, "noise", text="", completed=900)], [answer])])
    assert early.hold_resumed_ms == [600.0] and early.resume_after_decision_ms == []


def test_the_answer_request_is_timed_from_the_later_of_the_words_and_the_stop():
    speech = [utterance(1000, stop=2000, completed=2600), utterance(10_000, stop=11_000, completed=10_900)]
    core = _core()
    core.stop_message(60_000)
    figures = turn_figures(core, [record(speech, [request(2630), request(11_040)])])
    assert figures.answer_request_ms == [30.0, 40.0]
    # the caller spoke again before the answer was asked for, or a tool ran in between: not a sample
    rec = record(speech + [utterance(2610, "backchannel", text="Mm.")], [request(2700), request(11_040)])
    assert turn_figures(core, [rec]).answer_request_ms == [40.0]
    from voicecore.sim.model import FunctionCallOutputRecord

    rec = record(speech, [request(2630), request(12_000)])
    rec.function_call_outputs.append(FunctionCallOutputRecord("call_1", "{}", at_ms=11_500, known=True))
    assert turn_figures(core, [rec]).answer_request_ms == [30.0]


# ---- in the report -----------------------------------------------------------------------------------------


def report_of(core, rec: SessionRecord) -> dict:
    result = CallResult("CA1", core.metrics, core.statistics(), None, "carrier", [], core)
    return summarize([result], RecordSet([rec]), seconds=60, cpu_seconds=0.0, wall_seconds=60, expect_bargeins=False)


def test_the_report_has_the_turn_keys_and_names_the_problems():
    answer = _answer("a", 100, 1)
    core = played_call(answer, held(700))
    speech = [utterance(100, stop=500, decisive=650), utterance(5000, stop=5600),
              utterance(9000, "backchannel", text="Okay.")]
    report = report_of(core, record(speech, [answer]))
    assert (report["real_turns"], report["unanswered_turns"], report["turns_cut_by_call_end"]) == (2, 2, 0)
    assert (report["backchannels"], report["backchannels_that_cut"], report["resumed_after_words"]) == (0, 0, 1)
    assert report["hold_ms"]["resumed"]["count"] == 1 and report["hold_ms"]["cut"]["count"] == 0
    assert report["talkover_real_turns_ms"]["count"] == 1
    assert not report["ok"]
    assert report["problems"][:2] == ["2 real turn(s) of the caller got no answer before the caller spoke again",
                                      "1 real turn(s) heard the answer they interrupted resume after their words were sent"]


def test_a_clean_call_has_the_turn_keys_at_zero():
    answer = _answer("a", 100, 1)
    core = played_call(answer, PACE)
    report = report_of(core, record([utterance(3000, stop=3500)], [answer, request(3600)]))
    assert report["ok"], report["problems"]
    assert (report["real_turns"], report["unanswered_turns"], report["resumed_after_words"]) == (1, 0, 0)
    assert set(report["hold_ms"]) == {"resumed", "cut"} and report["talkover_real_turns_ms"]["count"] == 0


# ---- the bench scenario that exercises them ---------------------------------------------------------------


def test_the_turn_taking_scenario_says_every_kind_and_barges_in_only_with_real_turns():
    from bench.scenarios import SCENARIOS, get_scenario
    from voicecore.sim.audio_clips import default_library

    assert "turn-taking" in SCENARIOS
    library = default_library()
    name_of = {audio: name for name, audio in library.audio.items()}
    script = get_scenario("turn-taking").script(60_000, 3)
    said = [(at, library.info(name_of[clip])) for at, clip in script.utterances]
    kinds = {clip.kind for _, clip in said}
    assert kinds == {"caller", "backchannel", "noise"}
    assert all(at + clip.duration_ms < 60_000 for at, clip in said)
    assert [at for at, _ in said] == sorted(at for at, _ in said)
    # barge-ins: the short real turns said over an answer, never a backchannel or a cough
    assert script.bargein_at_ms and set(script.bargein_at_ms) <= {at for at, clip in said if clip.kind == "caller"}
    assert {clip.name for at, clip in said if at in script.bargein_at_ms} <= {
        "caller_short_no", "caller_short_stop", "caller_short_wait", "caller_hold_on", "caller_yeah_but",
        "caller_who_is_this"}
