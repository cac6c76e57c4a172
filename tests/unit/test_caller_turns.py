"""The caller's utterances and their verdicts (voicecore/call/turns.py), on a fake clock: the judging the
controller acts on, without the controller."""

from __future__ import annotations

from voicecore.call.controller import ControllerConfig
from voicecore.call.turns import MAX_TRACKED_UTTERANCES, MS, CallerTurns

CFG = ControllerConfig()


def spoken(turns: CallerTurns, item: str, start_ms: int, stop_ms: int, interrupting: bool = True):
    u = turns.started(item, start_ms * MS, interrupting, audio_start_ms=start_ms)
    end_ms = stop_ms + CFG.vad_prefix_padding_ms + CFG.vad_silence_duration_ms
    turns.stopped(item, stop_ms * MS, audio_end_ms=end_ms)
    return u


def test_a_backchannel_while_the_agent_speaks_is_not_a_turn_once_its_words_settle():
    turns = CallerTurns(CFG)
    u = spoken(turns, "i1", 0, 400)
    turns.heard("i1", "mm-hmm", False, 450 * MS)
    assert turns.verdict(u, 460 * MS, "") == ""  # more words may come ("yeah ... but on Friday")
    assert turns.verdict(u, (450 + CFG.words_settle_ms) * MS, "") == "backchannel"
    turns.heard("i1", "mm-hmm", True, 500 * MS)
    assert turns.verdict(u, 500 * MS, "") == "backchannel"


def test_one_word_that_is_not_a_backchannel_is_a_turn_and_so_is_a_yes_to_a_confirmation():
    turns = CallerTurns(CFG)
    u = spoken(turns, "i1", 0, 600)
    turns.heard("i1", "wait", False, 300 * MS)
    assert turns.verdict(u, 300 * MS, "") == "turn"
    v = spoken(turns, "i2", 1_000, 1_300)
    turns.heard("i2", "yes", True, 1_400 * MS)
    assert turns.verdict(v, 1_400 * MS, "") == "backchannel"
    assert turns.verdict(v, 1_400 * MS, "yes") == "turn"


def test_without_words_length_decides_after_the_transcript_wait_and_words_reopen_it():
    turns = CallerTurns(CFG)
    long = spoken(turns, "i1", 0, CFG.bargein_min_speech_ms + 200)
    stop = long.stopped_ns // MS
    assert turns.verdict(long, (stop + CFG.transcript_wait_ms - 1) * MS, "") == ""
    assert turns.verdict(long, (stop + CFG.transcript_wait_ms) * MS, "") == "turn"
    short = spoken(turns, "i2", 10_000, 10_100)
    short.verdict = turns.verdict(short, (10_100 + CFG.transcript_wait_ms) * MS, "")
    assert short.verdict == "noise"
    turns.heard("i2", "no", True, 12_000 * MS)  # late words overturn a verdict by length
    assert turns.verdict(short, 12_000 * MS, "") == "turn"


def test_a_failed_transcription_is_judged_by_length_and_a_finished_silent_one_is_noise():
    turns = CallerTurns(CFG)
    u = spoken(turns, "i1", 0, CFG.bargein_min_speech_ms + 100)
    turns.transcription_failed("i1")
    assert u.completed and turns.verdict(u, u.stopped_ns, "") == "turn"
    v = spoken(turns, "i2", 5_000, 5_000 + CFG.bargein_min_speech_ms + 100)
    turns.heard("i2", "", True, 6_000 * MS)
    assert turns.verdict(v, 6_000 * MS, "") == "noise"


def test_ready_once_the_words_settle_and_settled_utterances_are_forgotten():
    turns = CallerTurns(CFG)
    u = spoken(turns, "i1", 0, 800, interrupting=False)
    turns.heard("i1", "I want to book", False, 900 * MS)
    assert not turns.ready(u, 900 * MS)
    assert turns.ready(u, (900 + CFG.words_settle_ms) * MS)
    u.verdict, u.turn_taken = "turn", True
    turns.forget_settled()
    assert turns.utterances == [] and not turns.any_open
    for n in range(MAX_TRACKED_UTTERANCES + 4):
        turns.started(f"x{n}", n * MS, True, n)
    assert len(turns.utterances) == MAX_TRACKED_UTTERANCES and turns.any_open
