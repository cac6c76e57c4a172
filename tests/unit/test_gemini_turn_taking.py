"""Turn-taking by what the caller said, on Gemini Live (voicecore/gemini/driver.py with ``turn_taking``): the
session asks for ``activityHandling`` NO_INTERRUPTION, the caller's first sound holds the agent, and their words
decide. Driven against the Gemini simulator's core, deterministic (the harness of test_gemini_driver.py), with
the packaged caller clips as the phrases the simulator transcribes."""

from __future__ import annotations

import json

from voicecore import timing
from voicecore.call import core
from voicecore.call.controller import HoldTag, ResumeTag
from voicecore.call.record import CallRecorder
from voicecore.call.record_reader import RecordReader
from voicecore.gemini import protocol as gp
from voicecore.realtime import events as rt
from voicecore.replay import replay
from voicecore.sim.audio_clips import default_library
from voicecore.sim.gemini_core import GeminiSimConfig
from voicecore.sim.gemini_records import caller_phrases, session_record

from test_gemini_driver import ANSWER_MS, MS, SILENT, Harness, caller_frames, new_driver, seen_events

BY_WORDS = {"languages": ["en"], "confirm_languages": ["en"], "vad_prefix_padding_ms": 0}
PHRASES = caller_phrases()
LONG_ANSWER_MS = 3000  # the harness's answers last 400 ms; a turn over a playing answer needs it longer


def clip(name: str) -> bytes:
    return default_library().audio[name]


def call(speed_factor: float = 4.0, observer: RecordReader | None = None) -> Harness:
    """A call whose greeting is being generated; with ``observer``: every input through a CallRecorder, whose
    entries the observer reads as they are recorded (as the model worker wires them)."""
    driver = new_driver(turn_taking=BY_WORDS)
    config = GeminiSimConfig(speed_factor=speed_factor, caller_phrases=PHRASES, first_chunk_ms=0)
    if observer is not None:
        rec = CallRecorder(driver)
        rec.observer = observer.feed
        h = Harness(driver, config)
        h.driver = rec
    else:
        h = Harness(driver, config)
    h.apply(h.driver.start(0))
    return h


def say(h: Harness, name: str, quiet_ms: int = 700) -> None:
    audio = clip(name)
    h.run(len(audio) // timing.FRAME_BYTES * timing.FRAME_MS, audio)
    h.run(quiet_ms, caller_frames(quiet_ms, loud=False))


def driver_of(h: Harness):
    return h.driver.driver if isinstance(h.driver, CallRecorder) else h.driver


def writes_of(h: Harness, tag: int) -> list[core.WriteFrames]:
    return [w for w in h.of(core.WriteFrames) if w.tag == tag]


def test_the_session_asks_the_server_not_to_cut_the_agent_on_the_callers_sound():
    setup = json.loads(new_driver(turn_taking=BY_WORDS).setup_message())["setup"]
    assert setup["realtimeInputConfig"] == {"activityHandling": "NO_INTERRUPTION"}
    assert "realtimeInputConfig" not in json.loads(new_driver().setup_message())["setup"]


def test_the_simulator_refuses_an_activity_handling_the_vendor_does_not_have():
    h = Harness(new_driver())
    h.sim.receive(json.dumps({"setup": {"model": "models/gemini-2.5-flash",
                                        "realtimeInputConfig": {"activityHandling": "NEVER"}}}), 0)
    assert h.sim.close is not None and h.sim.close[0] == 1007 and "activity_handling" in h.sim.close[1]


def test_a_backchannel_over_a_playing_answer_holds_it_then_lets_it_go_on_and_its_reply_is_never_played():
    h = call()
    h.run(ANSWER_MS)  # the greeting, generated whole; nothing played yet (SILENT): it is audible
    say(h, "backchannel_mm_hmm")
    d = driver_of(h)
    assert h.of(HoldTag) == [HoldTag(1, d.core.responses["gemini_turn_1"].frames)]
    assert h.of(ResumeTag) == [ResumeTag(1)]
    assert h.actions.index(h.of(HoldTag)[0]) < h.actions.index(h.of(ResumeTag)[0])
    # the simulator answered the "mm-hmm" (as a model may): that turn got a tag and was cut before a frame
    assert h.sim.record.turns_started == 2 and h.sim.record.interrupts == 0
    assert [a.tag for a in h.of(core.OpenTag)] == [1, 2]
    assert [c.tag for c in h.of(core.CancelTag)] == [2]
    assert writes_of(h, 2) == []
    assert d.counts.backchannels == 1 and d.counts.replies_dropped == 1 and d.counts.turns_by_words == 0
    assert d.counts.holds == 1 and d.counts.resumes == 1


def test_a_backchannel_while_the_answer_is_still_generated_does_not_stop_the_server():
    h = call(speed_factor=0.5)  # the greeting comes at half real time: still being generated below
    h.run(100)
    say(h, "backchannel_yeah", quiet_ms=600)
    d = driver_of(h)
    assert h.sim.record.interrupts == 0 and h.sim.record.turns[0].interrupted_ms is None
    assert h.of(core.CancelTag) == [] or all(c.tag != 1 for c in h.of(core.CancelTag))
    assert h.of(ResumeTag) == [ResumeTag(1)]
    h.run(1500)
    ended = [e for e in h.of(core.EndTag) if e.tag == 1]
    assert ended and ended[0].total_frames == ANSWER_MS // timing.FRAME_MS + 1  # the whole greeting, kept
    assert d.counts.replies_dropped == 1 and writes_of(h, 2) == []


def test_words_that_ask_something_cut_the_agent_and_the_model_answers_them():
    h = call()
    h.run(ANSWER_MS)
    say(h, "caller_basic_price")
    d = driver_of(h)
    assert h.of(HoldTag) and not h.of(ResumeTag)
    assert [c.tag for c in h.of(core.CancelTag)] == [1]  # the greeting, cut where it played
    cut = h.actions.index(h.of(core.CancelTag)[0])
    opened = h.actions.index([a for a in h.of(core.OpenTag) if a.tag == 2][0])
    assert cut < opened and writes_of(h, 2)  # the answer plays under its own tag
    assert d.counts.turns_by_words == 1 and d.counts.replies_dropped == 0 and d.counts.backchannels == 0
    h.run(ANSWER_MS * 2)  # the answer generated: the model is told what the caller heard, as context only
    notes = [json.loads(t)["clientContent"] for t in h.sent if gp.HEARD_NOTE_PREFIX in t]
    assert len(notes) == 1 and notes[0]["turnComplete"] is False
    assert d.counts.heard_notes == 1
    assert h.sim.record.turns[0].client_cut_ms is not None and h.sim.record.turns[1].client_cut_ms is None
    record = session_record(h.sim.record, 0)
    assert [r.status for r in record.responses] == ["cancelled", "completed"]
    assert [s.caller_kind for s in record.speech] == ["caller"]


def test_a_turn_while_the_answer_is_generated_cuts_it_and_its_late_audio_is_never_written():
    h = call(speed_factor=0.1)  # the greeting's 400 ms take 4 s to generate: the question is heard before its end
    h.run(100)
    say(h, "caller_basic_price", quiet_ms=600)
    d = driver_of(h)
    cancels = h.of(core.CancelTag)
    assert cancels and cancels[0].tag == 1
    after_cut = h.actions[h.actions.index(cancels[0]):]
    assert not [a for a in after_cut if isinstance(a, core.WriteFrames) and a.tag == 1]
    h.run(6000)  # the server finishes the greeting (late: dropped), then answers the question
    assert d.exchange.late_chunks > 0
    assert writes_of(h, 2) and h.sim.record.interrupts == 0


def test_a_cough_over_the_agent_is_noise_and_changes_nothing_it_says():
    h = call()
    h.run(ANSWER_MS)
    say(h, "noise_cough")
    d = driver_of(h)
    assert h.of(ResumeTag) == [ResumeTag(1)] and [c.tag for c in h.of(core.CancelTag)] == [2]
    assert d.counts.false_interruptions == 1 and d.counts.replies_dropped == 1
    assert h.sim.record.caller_kinds == ["noise"] and h.sim.record.transcripts == [""]  # transcribed as nothing


def test_a_yes_after_the_agent_finished_is_a_turn_the_model_answers():
    h = call()
    h.run(ANSWER_MS)
    greeting = h.of(core.EndTag)[0]
    h.playout = core.Playout(1, greeting.total_frames, h.now_ms * MS, 1, greeting.total_frames, 0)  # played out
    say(h, "backchannel_yeah")
    d = driver_of(h)
    assert h.of(HoldTag) == [] and d.counts.replies_dropped == 0
    assert writes_of(h, 2)  # not spoken over the agent: a "yeah" is an answer


def test_the_record_replays_to_the_same_actions_and_is_read_as_the_driver_cut_the_turns():
    seen = seen_events(rt.ResponseCreated, rt.ResponseDone)()
    h = call(observer=RecordReader(seen))
    h.run(ANSWER_MS)
    say(h, "backchannel_mm_hmm")
    h.run(ANSWER_MS)
    say(h, "caller_basic_price")
    h.run(ANSWER_MS * 2)
    done = {e.response_id: e.status for e in seen.events if isinstance(e, rt.ResponseDone)}
    # the greeting played on; the reply to the "mm-hmm" was cut; the question cut... nothing still playing:
    # the greeting (gemini_turn_1) had finished and is not cut again; the answer to the question completed
    assert done["gemini_turn_1"] == "completed" and done["gemini_turn_2"] == "cancelled"
    assert done["gemini_turn_3"] == "completed"
    result = replay(h.driver.header, h.driver.entries)
    assert result.identical, result.divergence


def test_a_turn_the_model_begins_while_the_caller_speaks_is_held_until_their_words_decide():
    h = call()
    h.run(ANSWER_MS)
    greeting = h.of(core.EndTag)[0]
    h.playout = core.Playout(1, greeting.total_frames, h.now_ms * MS, 1, greeting.total_frames, 0)  # played out
    audio = clip("caller_basic_price")
    half = len(audio) // 2 // timing.FRAME_BYTES * timing.FRAME_BYTES
    h.run(half // timing.FRAME_BYTES * timing.FRAME_MS, audio[:half])  # the caller is speaking ...
    h.apply(driver_of(h)._asked([core.SendToModel(gp.client_content([("user", "Say the opening hours.")]))]))
    h.run(ANSWER_MS)  # ... when a turn asked for before begins
    opened = [a.tag for a in h.of(core.OpenTag)]
    assert opened == [1, 2] and HoldTag(2, 0) in h.of(HoldTag)
    assert h.actions.index(HoldTag(2, 0)) == h.actions.index(core.OpenTag(2, False)) + 1  # before a frame plays
    rest = audio[half:]
    h.run(len(rest) // timing.FRAME_BYTES * timing.FRAME_MS, rest)
    h.run(700, caller_frames(700, loud=False))
    assert 2 in [c.tag for c in h.of(core.CancelTag)]  # their words were a question: the turn is cut, unheard


def test_under_the_vendors_turn_taking_a_cut_answer_is_told_to_the_model_too():
    """call_control spine: the server's activity detection cuts; an answer done generating but still playing is
    cut by the runtime alone, and the model hears of it by the same note (the simulator counts it as the cut)."""
    h = Harness(new_driver(), GeminiSimConfig(caller_phrases=PHRASES))
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS)  # generated whole, still audible (SILENT)
    say(h, "backchannel_mm_hmm")
    assert [c.tag for c in h.of(core.CancelTag)] == [1]  # the vendor's way: any sound cuts the agent
    h.run(ANSWER_MS * 2)
    notes = [t for t in h.sent if gp.HEARD_NOTE_PREFIX in t]
    assert len(notes) == 1 and h.driver.counts.heard_notes == 1
    assert h.sim.record.turns[0].client_cut_ms is not None and h.sim.record.turns[0].interrupted_ms is None
    assert session_record(h.sim.record, 0).responses[0].status == "cancelled"
