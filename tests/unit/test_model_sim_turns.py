"""The model simulator takes turns like the vendor: the caller's transcript as the session's transcription
model sends it (whisper-1 late and whole, the gpt-4o transcribe family in word-piece deltas, seeded), the
failed transcription fault, semantic_vad's end of turn by how the words sound, and the caller clips of
every kind (real turns, backchannels, noises) recognised by content, with what a report needs in the
SpeechRecord. Every event is validated against the `openai` package's types (test_model_sim.Harness); the
clock is fake, so every figure is exact."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_model_sim import SILENCE, VAD, Harness, caller_turn, first, types

from voicecore.realtime import events as ev
from voicecore.sim.audio_clips import ClipInfo, ClipLibrary, default_library
from voicecore.sim.model import ModelSession, SimConfig
from voicecore.sim.model.faults import FAULT_KINDS, parse_fault_request
from voicecore.sim.model.session_config import sounds_unfinished
from voicecore.sim.model.transcription import (
    backchannel_vocabulary,
    decisive_piece,
    streams_deltas,
    transcript_pieces,
)
from voicecore.timing import BYTES_PER_MS

LIBRARY = default_library()
CALLERS = [clip for clip in LIBRARY.infos if clip.role == "caller"]
TRANSCRIBED = "conversation.item.input_audio_transcription."


def transcription_events(h: Harness) -> list[tuple[int, dict[str, Any]]]:
    return [(at, e) for at, e in h.log if e["type"].startswith(TRANSCRIBED)]


def say(h: Harness, name: str, lead_ms: int = 300, tail_ms: int = 1000) -> None:
    h.append(caller_turn(name, lead_ms=lead_ms, tail_ms=tail_ms))
    h.run_all()


def committed_at(h: Harness) -> list[int]:
    return [at for at, e in h.log if e["type"] == "input_audio_buffer.committed"]


# ---- the clips and what the simulator hears in them ------------------------------------------------------


def test_the_caller_clips_of_each_kind_are_packaged_as_specified() -> None:
    by_kind: dict[str, list[ClipInfo]] = {}
    for clip in CALLERS:
        by_kind.setdefault(clip.kind, []).append(clip)
    assert set(by_kind) == {"caller", "backchannel", "noise"}
    texts = {clip.text for clip in by_kind["caller"]}
    assert {"No.", "Stop.", "Wait.", "Sorry, who is this?", "Hold on a second.", "Yeah, but on Friday.", "Nej.",
            "Vänta.", "Förlåt, vem är det här?"} <= texts
    assert {clip.text for clip in by_kind["backchannel"]} >= {"Mm-hmm.", "Yeah.", "Okay.", "Uh-huh.", "Right.",
                                                             "Mm.", "Ja.", "Okej.", "Precis."}
    assert 2 <= len(by_kind["noise"]) <= 3 and all(clip.text == "" for clip in by_kind["noise"])
    from voicecore.sim.model.clips import speech_span_ms
    spans = {clip.name: speech_span_ms(LIBRARY.audio[clip.name], 200) for clip in CALLERS}
    assert any(spans[c.name] >= 700 for c in by_kind["backchannel"])  # duration alone would call it a turn
    assert any(spans[c.name] < 400 for c in by_kind["backchannel"])
    assert all(150 <= spans[c.name] <= 450 for c in by_kind["noise"])


@pytest.mark.parametrize("audio_format", ["pcmu", "pcma"])
@pytest.mark.parametrize("name", [clip.name for clip in CALLERS])
def test_every_caller_clip_is_recognised_by_content(name: str, audio_format: str) -> None:
    h = Harness(turn_detection=VAD, audio_format=audio_format)
    audio = caller_turn(name, lead_ms=300, tail_ms=800)
    if audio_format == "pcma":
        from voicecore.g711 import ULAW_TO_ALAW
        audio = audio.translate(ULAW_TO_ALAW)  # an A-law caller plays the clip in A-law
    h.append(audio)
    h.run_all()
    speech = h.session.record.speech
    assert len(speech) == 1, [(s.caller_clip, s.audio_start_ms, s.audio_end_ms) for s in speech]
    clip = LIBRARY.info(name)
    assert (speech[0].caller_clip, speech[0].caller_kind, speech[0].transcript) == (name, clip.kind, clip.text)
    completed = [e for _, e in transcription_events(h) if e["type"].endswith("completed")]
    assert [e["transcript"] for e in completed] == [clip.text]  # a noise is "", never the "hello" fallback


def test_a_backchannel_and_a_turn_in_one_utterance_are_heard_in_order() -> None:
    h = Harness(turn_detection=VAD)
    h.append(caller_turn("backchannel_okay", lead_ms=300, tail_ms=200) + caller_turn("caller_short_wait", 0, 900))
    h.run_all()
    (speech,) = h.session.record.speech
    assert (speech.transcript, speech.caller_kind, speech.caller_clip) == ("Okay. Wait.", "caller", "backchannel_okay")


def test_audio_that_is_no_clip_is_never_taken_for_a_backchannel_or_a_noise() -> None:
    loud = bytes([0x90]) * (300 * BYTES_PER_MS)  # 300 ms of a steady tone: no packaged clip's bytes
    h = Harness(turn_detection=VAD)
    h.append(SILENCE * 2400 + loud + SILENCE * 8000)
    h.run_all()
    (speech,) = h.session.record.speech
    assert speech.caller_kind in ("caller", None) and speech.transcript != ""


# ---- transcription like the vendor -----------------------------------------------------------------------


def test_whisper_sends_one_late_completed_seeded() -> None:
    delays = []
    for seed in range(12):
        h = Harness(SimConfig(), seed=seed, turn_detection=VAD)
        say(h, "caller_basic_price")
        events = transcription_events(h)
        assert [e["type"] for _, e in events] == [TRANSCRIBED + "completed"]
        assert events[0][1]["usage"]["type"] == "duration"
        delay = events[0][0] - committed_at(h)[0]
        assert 400 <= delay <= 1500
        speech = h.session.record.speech[0]
        assert speech.words_sent_ms == speech.transcript_completed_ms == speech.decisive_words_ms == events[0][0]
        delays.append(delay)
    assert len(set(delays)) > 6  # a draw, not a constant
    again = Harness(SimConfig(), seed=3, turn_detection=VAD)
    say(again, "caller_basic_price")
    assert transcription_events(again)[0][0] - committed_at(again)[0] == delays[3]  # the seed replays it


@pytest.mark.parametrize("naming", ["ga", "beta"])
@pytest.mark.parametrize("model", ["gpt-4o-transcribe", "gpt-4o-mini-transcribe", "gpt-4o-mini-transcribe-2025-12-15"])
def test_the_gpt_4o_transcribe_family_streams_word_pieces(naming: str, model: str) -> None:
    h = Harness(SimConfig(), naming=naming, turn_detection=VAD, transcription_model=model, seed=11)
    say(h, "caller_who_is_this")
    events = transcription_events(h)
    kinds = [e["type"].removeprefix(TRANSCRIBED) for _, e in events]
    assert kinds == ["delta"] * (len(kinds) - 1) + ["completed"] and len(kinds) > 3
    deltas = [e["delta"] for _, e in events[:-1]]
    assert "".join(deltas) == events[-1][1]["transcript"] == "Sorry, who is this?"
    assert deltas == transcript_pieces("Sorry, who is this?") == ["Sorry", ",", " who", " is", " this", "?"]
    times = [at for at, _ in events]
    assert 50 <= times[0] - committed_at(h)[0] <= 1200
    assert all(10 <= b - a <= 80 for a, b in zip(times[:-2], times[1:-1]))
    assert 5 <= times[-1] - times[-2] <= 40
    usage = events[-1][1]["usage"]
    assert usage["type"] == "tokens" and usage["output_tokens"] == len(deltas)
    assert all(e["item_id"] == h.session.record.speech[0].item_id for _, e in events)


def test_the_words_become_decisive_at_the_piece_that_is_no_backchannel_word() -> None:
    h = Harness(SimConfig(), turn_detection=VAD, transcription_model="gpt-4o-mini-transcribe")
    say(h, "caller_yeah_but")
    events = transcription_events(h)
    speech = h.session.record.speech[0]
    sent = {e["delta"]: at for at, e in events if "delta" in e}
    assert speech.words_sent_ms == sent["Yeah"] < speech.decisive_words_ms == sent[" but"]
    assert speech.transcript_completed_ms == events[-1][0]
    vocabulary = backchannel_vocabulary(LIBRARY.infos)
    assert {"yeah", "mm", "hmm", "okay", "uh", "huh", "right", "ja", "okej", "precis"} <= vocabulary
    assert decisive_piece(transcript_pieces("Okay, okay."), vocabulary) is None


@pytest.mark.parametrize("name", ["backchannel_mm_hmm", "noise_cough"])
def test_a_backchannel_or_a_noise_never_becomes_decisive(name: str) -> None:
    h = Harness(SimConfig(), turn_detection=VAD, transcription_model="gpt-4o-transcribe")
    say(h, name)
    speech = h.session.record.speech[0]
    assert speech.decisive_words_ms is None and speech.transcript_completed_ms is not None
    if name.startswith("noise"):
        # no words: no delta at all, then completed with an empty transcript
        assert [e["type"] for _, e in transcription_events(h)] == [TRANSCRIBED + "completed"]
        assert speech.words_sent_ms is None and speech.caller_kind == "noise"
    else:
        assert speech.words_sent_ms is not None and speech.caller_kind == "backchannel"


def test_a_pinned_delay_sends_everything_at_once() -> None:
    h = Harness(SimConfig(transcription_delay_ms=150), turn_detection=VAD, transcription_model="gpt-4o-transcribe")
    say(h, "caller_hold_on")
    assert {at for at, _ in transcription_events(h)} == {committed_at(h)[0] + 150}


def test_transcription_ranges_are_checked() -> None:
    for bad in ({"transcription_whisper_ms": (900, 400)}, {"transcription_first_delta_ms": (-1, 5)},
                {"transcription_delta_gap_ms": (1, 2, 3)}, {"transcription_delay_ms": -5}):
        with pytest.raises(ValueError):
            SimConfig(**bad)
    assert SimConfig(transcription_completed_gap_ms=[1, 2]).transcription_completed_gap_ms == (1, 2)
    assert streams_deltas("gpt-4o-transcribe-diarize") and not streams_deltas("whisper-1")
    assert not streams_deltas(None)  # no model named: the vendor's default, whisper-1


@pytest.mark.parametrize("model", ["whisper-1", "gpt-4o-mini-transcribe"])
def test_the_transcription_failed_fault_fails_the_next_transcription_only(model: str) -> None:
    assert "transcription_failed" in FAULT_KINDS
    assert parse_fault_request(json.dumps({"kind": "transcription_failed"})).kind == "transcription_failed"
    h = Harness(SimConfig(), turn_detection=VAD, transcription_model=model)
    h.session.inject_fault("transcription_failed", h.now)
    assert h.drain() == []  # nothing is sent for it now
    say(h, "caller_short_stop")
    say(h, "caller_short_no")
    events = [e for _, e in transcription_events(h)]
    failed = first(events, TRANSCRIBED + "failed")
    assert failed["error"]["code"] == "audio_unintelligible" and failed["error"]["type"] == "transcription_error"
    first_item, second_item = (s.item_id for s in h.session.record.speech)
    assert failed["item_id"] == first_item and not any(e["item_id"] == first_item and "delta" in e for e in events)
    assert first(events, TRANSCRIBED + "completed")["item_id"] == second_item
    speech = h.session.record.speech
    assert speech[0].transcription_failed_ms is not None and speech[0].transcript_completed_ms is None
    assert speech[1].transcript_completed_ms is not None
    assert [f.kind for f in h.session.record.faults] == ["transcription_failed"]


# ---- semantic_vad ------------------------------------------------------------------------------------------


def semantic(eagerness: str, **fields: Any) -> dict[str, Any]:
    return {"type": "semantic_vad", "eagerness": eagerness, **fields}


def stop_silence_ms(h: Harness, clip_end_ms: int) -> int:
    stopped = first([e for _, e in h.log], "input_audio_buffer.speech_stopped")
    return stopped["audio_end_ms"] - clip_end_ms


def speech_end_in(name: str) -> int:
    """ms from a clip's start to the end of its last 20 ms window of speech."""
    from voicecore.sim.carrier_core import speech_end_ms
    return speech_end_ms(LIBRARY.audio[name])


@pytest.mark.parametrize(("eagerness", "silence_ms"), [("high", 300), ("medium", 500), ("auto", 500), ("low", 800)])
def test_semantic_vad_ends_a_finished_turn_after_a_short_silence(eagerness: str, silence_ms: int) -> None:
    h = Harness(turn_detection=semantic(eagerness))
    h.append(caller_turn("caller_basic_price", lead_ms=500, tail_ms=9000))
    h.run_all()
    assert len(h.session.record.speech) == 1
    # the VAD sees 20 ms windows: the last one of speech may end up to a window after the clip's
    assert silence_ms <= stop_silence_ms(h, 500 + speech_end_in("caller_basic_price")) <= silence_ms + 40


def unfinished_library() -> ClipLibrary:
    """The packaged clips plus one caller clip whose words trail off ("Well, I was thinking, um..."), made of
    a packaged clip's audio so that it is speech to the VAD."""
    audio = LIBRARY.audio["caller_experience"]
    info = ClipInfo("caller_trailing_off", "caller", "caller", "Well, I was thinking, um...", len(audio) // BYTES_PER_MS)
    infos = tuple(c for c in LIBRARY.infos if c.name != "caller_experience") + (info,)
    return ClipLibrary(infos, {**LIBRARY.audio, "caller_trailing_off": audio})


def custom_harness(clips: ClipLibrary, td: dict[str, Any]) -> Harness:
    h = Harness(setup=False)
    h.session = ModelSession(h.config, 0, 7, call_sid="CA1", clips=clips)
    h.drain()
    h.send(ev.session_update("ga", "Help.", "alloy", td, "whisper-1"))
    return h


@pytest.mark.parametrize(("eagerness", "wait_ms"), [("high", 2000), ("medium", 4000), ("auto", 4000), ("low", 8000)])
def test_semantic_vad_waits_for_unfinished_words_up_to_the_eagerness_maximum(eagerness: str, wait_ms: int) -> None:
    h = custom_harness(unfinished_library(), semantic(eagerness))
    h.append(caller_turn("caller_experience", lead_ms=500, tail_ms=9000))
    h.run_all()
    (speech,) = h.session.record.speech
    assert speech.transcript == "Well, I was thinking, um..."
    assert wait_ms <= stop_silence_ms(h, 500 + speech_end_in("caller_experience")) <= wait_ms + 40


def test_semantic_vad_joins_unfinished_words_and_the_speech_that_resumes() -> None:
    h = custom_harness(unfinished_library(), semantic("high"))
    # trails off, then goes on 1.5 s later (within high's 2 s): one turn, both clips' words
    h.append(caller_turn("caller_experience", lead_ms=500, tail_ms=1500) + caller_turn("caller_short_no", 0, 3000))
    h.run_all()
    (speech,) = h.session.record.speech
    assert speech.transcript == "Well, I was thinking, um... No."
    # server_vad would have cut it in two
    h2 = custom_harness(unfinished_library(), VAD)
    h2.append(caller_turn("caller_experience", lead_ms=500, tail_ms=1500) + caller_turn("caller_short_no", 0, 3000))
    h2.run_all()
    assert len(h2.session.record.speech) == 2


def test_semantic_vad_waits_through_a_pause_inside_a_sentence() -> None:
    # "No, that was all. Thanks, bye." pauses 400 ms after "all.": longer than high's 300 ms, yet the caller
    # is mid-utterance (more of the clip follows), so the turn goes on; server_vad at 300 ms splits it
    h = Harness(turn_detection=semantic("high"))
    say(h, "caller_bye", tail_ms=3000)
    assert [s.transcript for s in h.session.record.speech] == ["No, that was all. Thanks, bye."]
    h2 = Harness(turn_detection=dict(VAD, silence_duration_ms=300))
    say(h2, "caller_bye", tail_ms=3000)
    assert len(h2.session.record.speech) == 2


def test_semantic_vad_answers_and_interrupts_like_server_vad() -> None:
    h = Harness(SimConfig(first_delta_latency_ms=100, speed_factor=1.0, clip_sequence=("agent_premium_price",)),
                turn_detection=semantic("auto"))
    h.send(ev.response_create())
    h.run_until(800)
    say(h, "caller_short_wait", lead_ms=100)
    responses = h.session.record.responses
    assert responses[0].reason == "turn_detected" and responses[0].origin == "client"
    assert responses[1].origin == "turn_detection" and responses[1].created_ms == h.session.record.speech[0].stopped_at_ms
    quiet = Harness(turn_detection=semantic("low", create_response=False, interrupt_response=False))
    say(quiet, "caller_short_wait")
    assert quiet.session.record.responses == []


@pytest.mark.parametrize(("td", "code", "param"), [
    (semantic("fast"), "invalid_value", "session.audio.input.turn_detection.eagerness"),
    (semantic("low", silence_duration_ms=500), "unknown_parameter", "session.audio.input.turn_detection.silence_duration_ms"),
    (semantic("low", idle_timeout_ms=5000), "unknown_parameter", "session.audio.input.turn_detection.idle_timeout_ms"),
    (semantic("low", threshold=0.5), "unknown_parameter", "session.audio.input.turn_detection.threshold"),
    (semantic("low", create_response="yes"), "invalid_value", "session.audio.input.turn_detection.create_response"),
    ({"type": "smart_vad"}, "invalid_value", "session.audio.input.turn_detection.type"),
    (dict(VAD, eagerness="low"), "unknown_parameter", "session.audio.input.turn_detection.eagerness"),
])
def test_semantic_vad_is_validated_as_the_vendor_does(td: dict[str, Any], code: str, param: str) -> None:
    h = Harness(setup=False)
    out = h.send(ev.session_update("ga", "Help.", "alloy", td, None))
    assert types(out) == ["error"]
    assert (out[0]["error"]["code"], out[0]["error"]["param"]) == (code, param)


def test_semantic_vad_settings_render_and_switch_back() -> None:
    h = Harness(setup=False)
    out = h.send(ev.session_update("ga", "Help.", "alloy", semantic("high", interrupt_response=False), None))
    td = out[0]["session"]["audio"]["input"]["turn_detection"]
    assert td == {"type": "semantic_vad", "eagerness": "high", "create_response": True, "interrupt_response": False}
    out = h.send(ev.session_update("ga", "Help.", "alloy", VAD, None))
    assert out[0]["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 500
    beta = Harness(naming="beta", setup=False)
    out = beta.send(ev.session_update("beta", "Help.", "alloy", semantic("low"), "gpt-4o-transcribe"))
    assert out[0]["session"]["turn_detection"]["eagerness"] == "low"


def test_what_sounds_unfinished() -> None:
    for text in ("Well, I was thinking, um...", "So, um", "I want the,", "and then\u2026", "Men så"):
        assert sounds_unfinished(text), text
    for text in ("Yeah, but on Friday.", "Sorry, who is this?", "Stop!", "hello", "", "Nej."):
        assert not sounds_unfinished(text), text


def test_an_overlap_is_marked_as_the_simulators_own() -> None:
    h = Harness(SimConfig(first_delta_latency_ms=100, overlap_probability=1.0, overlap_delay_ms=(300, 300),
                          speed_factor=1.0))
    h.send(ev.response_create())
    h.run_all()
    assert [r.origin for r in h.session.record.responses] == ["client", "overlap"]


def _phrase_audio(seed: int, ms: int = 900) -> bytes:
    """Speech-loud audio no packaged clip holds: seeded random mu-law codes of large magnitude."""
    import numpy as np

    rng = np.random.default_rng(seed)
    magnitude = rng.integers(0x40, 0x70, ms * BYTES_PER_MS)  # inverted codes 0x0f-0x3f: loud samples
    sign = rng.integers(0, 2, ms * BYTES_PER_MS) * 0x80
    return (~(magnitude | sign) & 0xFF).astype(np.uint8).tobytes()


def test_a_registered_caller_phrase_is_heard_as_its_text() -> None:
    book, yes = _phrase_audio(1), _phrase_audio(2, 500)
    config = SimConfig(first_delta_latency_ms=100, caller_phrases=(("I'd like to book a cleaning.", book),
                                                                   ("Yes, please.", yes)))
    h = Harness(config, turn_detection=VAD)
    h.append(SILENCE * 2400 + yes + SILENCE * 8000)
    h.run_all()
    (speech,) = h.session.record.speech
    assert (speech.transcript, speech.caller_kind) == ("Yes, please.", "caller")
    completed = [e for _, e in transcription_events(h) if e["type"].endswith("completed")]
    assert [e["transcript"] for e in completed] == ["Yes, please."]


def test_a_phrase_that_sounds_like_a_packaged_clip_is_heard_once() -> None:
    clip = LIBRARY.audio["caller_yes"]
    h = Harness(SimConfig(first_delta_latency_ms=100, caller_phrases=(("Yes please", clip),)), turn_detection=VAD)
    h.append(caller_turn("caller_yes", lead_ms=300, tail_ms=1000))
    h.run_all()
    (speech,) = h.session.record.speech
    assert speech.transcript == "Yes please"  # the registered phrase, not both texts joined


@pytest.mark.parametrize("phrases", [(("", b"\x00" * 400),), (("words", b"\x00" * 10),), (("words",),)])
def test_caller_phrases_must_be_text_and_audio(phrases) -> None:
    with pytest.raises(ValueError, match="caller_phrases"):
        SimConfig(caller_phrases=phrases)
