"""Who answered an outbound call: the beep detector, the phrase rules, the cadence and the bounded wait.

Synthetic signals with seeded noise only, so every run feeds the same samples.
"""

from __future__ import annotations

import numpy as np
import pytest

from voicecore.g711 import linear_to_ulaw
from voicecore.outbound import phrases
from voicecore.outbound.answer import (HUMAN, IVR, SCREENING, UNKNOWN, VOICEMAIL, AnswerDetector, DetectorSettings)
from voicecore.outbound.beep import BeepDetector, goertzel_bank, goertzel_powers
from voicecore.timing import FRAME_BYTES, FRAME_MS, SAMPLE_RATE_HZ

RATE = SAMPLE_RATE_HZ


def tone(frequency_hz: float, ms: int, amplitude: float = 8000.0) -> np.ndarray:
    return amplitude * np.sin(2 * np.pi * frequency_hz * np.arange(ms * RATE // 1000) / RATE)


def quiet(ms: int) -> np.ndarray:
    return np.zeros(ms * RATE // 1000)


def noise(samples: int, rms: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, rms, samples)


def speechlike(ms: int, seed: int, amplitude: float = 6000.0) -> np.ndarray:
    """Voiced syllables: a gliding pitch (110-220 Hz) with 25 harmonics under two moving formants, four
    syllables a second, plus breath noise. Not speech, but what matters to a tone detector: many harmonics,
    none steady."""
    rng = np.random.default_rng(seed)
    n = ms * RATE // 1000
    t = np.arange(n) / RATE
    pitch = 165 + 55 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6.28))
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    formant1 = 500 + 300 * np.sin(2 * np.pi * 3.1 * t)
    formant2 = 1500 + 600 * np.sin(2 * np.pi * 2.3 * t + 1.0)
    voiced = np.zeros(n)
    for k in range(1, 26):
        frequency = k * pitch
        gain = np.exp(-((frequency - formant1) / 250) ** 2) + 0.6 * np.exp(-((frequency - formant2) / 300) ** 2)
        voiced += gain * np.sin(k * phase)
    syllables = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * t) ** 2
    signal = voiced * syllables + 0.05 * rng.normal(0, 1, n)
    return signal * (amplitude / np.sqrt(np.mean(signal ** 2)))


def ulaw(samples: np.ndarray) -> bytes:
    data = linear_to_ulaw(np.clip(np.rint(samples), -32768, 32767).astype(np.int16))
    return data + bytes([0xFF]) * ((-len(data)) % FRAME_BYTES)


def feed_audio(detector: AnswerDetector, audio: bytes, start_ms: int = 0, stop_at_verdict: bool = True):
    for offset in range(0, len(audio), FRAME_BYTES):
        detector.on_audio(audio[offset:offset + FRAME_BYTES], start_ms + offset // 8)
        if stop_at_verdict and detector.verdict is not None:
            break
    return detector.verdict


def beeps_in(samples: np.ndarray) -> BeepDetector:
    detector = BeepDetector()
    frame = detector.frame_samples
    for index in range(len(samples) // frame):
        detector.feed(samples[index * frame:(index + 1) * frame], index * FRAME_MS)
    return detector


# -- the Goertzel bank and the beep -------------------------------------------------------------------------

def goertzel_recurrence(samples: np.ndarray, frequency_hz: float) -> float:
    """The textbook Goertzel filter, one sample at a time (the reference the bank must match)."""
    coefficient = 2 * np.cos(2 * np.pi * frequency_hz / RATE)
    s1 = s2 = 0.0
    for x in samples:
        s1, s2 = x + coefficient * s1 - s2, s1
    return s1 * s1 + s2 * s2 - coefficient * s1 * s2


def test_the_bank_gives_the_goertzel_recurrences_power():
    samples = tone(1000, 20) + noise(160, 500, seed=3)
    frequencies = np.array([440.0, 997.0, 1000.0, 1733.0, 2000.0])
    bank = goertzel_powers(goertzel_bank(frequencies, 160), samples)
    reference = np.array([goertzel_recurrence(samples, f) for f in frequencies])
    np.testing.assert_allclose(bank, reference, rtol=1e-9)


def test_a_1khz_beep_in_noise_is_found_where_it_starts():
    line = np.concatenate([quiet(500), tone(1000, 400, amplitude=5000), quiet(600)])
    detector = beeps_in(line + noise(len(line), 400, seed=11))  # ~19 dB under the beep
    assert detector.beep is not None
    assert abs(detector.beep.start_ms - 500) <= FRAME_MS
    assert abs(detector.beep.frequency_hz - 1000) <= 20
    assert abs(detector.beep.end_ms - 900) <= FRAME_MS


@pytest.mark.parametrize("frequency_hz", [440.0, 777.0, 1400.0, 2000.0])
def test_beeps_across_the_band_are_found(frequency_hz):
    detector = beeps_in(np.concatenate([quiet(200), tone(frequency_hz, 300), quiet(200)]) + noise(5600, 200, seed=5))
    assert detector.beep is not None and abs(detector.beep.frequency_hz - frequency_hz) <= 20


def test_speech_is_not_a_beep():
    line = speechlike(6000, seed=2) + noise(48000, 300, seed=4)
    assert beeps_in(line).beep is None


@pytest.mark.parametrize("line", [
    np.concatenate([quiet(200), tone(1000, 100), quiet(200)]),  # too short: a click of tone, not a beep
    np.concatenate([quiet(200), tone(300, 600), quiet(200)]),  # below the band
    np.concatenate([quiet(200), tone(1000, 600, amplitude=60), quiet(200)]),  # too quiet to be heard
], ids=["100ms", "300Hz", "quiet"])
def test_what_is_not_a_beep(line):
    assert beeps_in(line).beep is None


def test_a_frame_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="160 samples"):
        BeepDetector().feed(np.zeros(80), 0)


# -- the phrase rules ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("Hi, you've reached Anna. Please leave a message after the tone.", VOICEMAIL),
    ("I'm not available right now", VOICEMAIL),
    ("For sales, press 1. For support, press 2.", IVR),
    ("Para español, oprima dos", IVR),
    ("This call is being screened. Please state your name.", SCREENING),
    ("Hej, lämna ett meddelande efter tonen", VOICEMAIL),
    ("Välkommen. Tryck ett för fakturor.", IVR),
    ("Säg ditt namn och ditt ärende", SCREENING),
])
def test_strong_phrases_name_their_class(text, expected):
    assert phrases.strongest(phrases.find_phrases(text), phrases.STRONG) == expected


def test_the_most_specific_class_wins():
    text = "Please state your name after the tone and leave a message"
    assert phrases.strongest(phrases.find_phrases(text), phrases.STRONG) == SCREENING


@pytest.mark.parametrize("text", ["Hello?", "Hello, who's calling?", "Yeah, this is Mike", "Hej, det är Anna"])
def test_what_a_person_says_has_no_strong_phrase(text):
    assert phrases.strongest(phrases.find_phrases(text), phrases.STRONG) is None


def test_phrases_match_whole_words_only():
    assert phrases.find_phrases("the pressure is on") == []  # not "press"
    assert phrases.find_phrases("Press 1!")[0].phrase == "press 1"
    assert phrases.find_phrases("I\u2019ll call you back")[0].answer_class == VOICEMAIL  # a curly apostrophe


# -- the detector ---------------------------------------------------------------------------------------------

def test_a_short_hello_then_silence_is_a_human_at_once():
    detector = AnswerDetector()
    line = np.concatenate([quiet(300), speechlike(500, seed=1), quiet(3000)]) + noise(30400, 150, seed=9)
    verdict = feed_audio(detector, ulaw(line))
    assert verdict is not None and verdict.verdict == HUMAN and verdict.reason == "short_greeting"
    # the hello ended at 800 ms; the verdict comes once the quiet after it is long enough, not at the bound
    assert 800 + detector.settings.human_silence_ms <= verdict.at_ms <= 800 + detector.settings.human_silence_ms + 2 * FRAME_MS


def test_a_long_greeting_then_a_beep_is_a_voicemail_with_the_beep_time():
    detector = AnswerDetector()
    line = np.concatenate([quiet(200), speechlike(4500, seed=3), quiet(900), tone(1200, 500), quiet(1500)])
    verdict = feed_audio(detector, ulaw(line), stop_at_verdict=False)
    assert verdict.verdict == VOICEMAIL and verdict.reason == "long_greeting"
    assert verdict.at_ms <= 200 + 4500 + detector.settings.human_silence_ms + FRAME_MS  # when the greeting paused
    # it listens on after the verdict: the beep's start and end are what the agent's message waits for
    assert abs(detector.beep_at_ms - 5600) <= FRAME_MS and abs(detector.beep_end_ms - 6100) <= FRAME_MS


def test_a_beep_after_a_short_greeting_is_a_voicemail():
    detector = AnswerDetector()
    line = np.concatenate([quiet(200), speechlike(800, seed=4), quiet(300), tone(900, 400), quiet(1000)])
    verdict = feed_audio(detector, ulaw(line))
    assert verdict.verdict == VOICEMAIL and verdict.reason == "beep"
    assert verdict.at_ms == pytest.approx(1300 + 160, abs=2 * FRAME_MS)


def test_silence_gives_unknown_at_the_bound_not_before():
    detector = AnswerDetector(DetectorSettings(max_wait_ms=3000))
    audio = ulaw(noise(8000 * 5, 100, seed=1))
    verdict = feed_audio(detector, audio)
    assert verdict.verdict == UNKNOWN and verdict.reason == "max_wait" and verdict.at_ms == 3000


def test_the_bound_holds_when_audio_stops_arriving():
    detector = AnswerDetector(DetectorSettings(max_wait_ms=4000))
    feed_audio(detector, ulaw(quiet(1000)))
    assert detector.on_tick(3980) is None
    verdict = detector.on_tick(4000)
    assert verdict.verdict == UNKNOWN and verdict.at_ms == 4000


def test_a_machine_still_talking_at_the_bound_is_named_then():
    detector = AnswerDetector(DetectorSettings(max_wait_ms=5000))
    verdict = feed_audio(detector, ulaw(np.concatenate([quiet(100), speechlike(8000, seed=6)])))
    assert verdict.verdict == VOICEMAIL and verdict.reason == "max_wait" and verdict.at_ms == 5000


def test_a_strong_phrase_decides_when_it_is_heard():
    detector = AnswerDetector()
    feed_audio(detector, ulaw(np.concatenate([quiet(200), speechlike(1500, seed=7)])))
    assert detector.on_transcript_delta("Hi, you've reached Sam, please", 1400) is None
    verdict = detector.on_transcript_delta(" leave a message", 1700)
    assert (verdict.verdict, verdict.reason, verdict.detail, verdict.at_ms) == (VOICEMAIL, "words", "leave a message", 1700)


def test_a_weak_phrase_names_a_long_greeting_but_not_a_short_one():
    person = AnswerDetector()
    person.on_transcript_done("Hello, who's calling?", 900)
    verdict = feed_audio(person, ulaw(np.concatenate([quiet(200), speechlike(900, seed=8), quiet(2000)])))
    assert verdict.verdict == HUMAN

    assistant = AnswerDetector()
    assistant.on_transcript_delta("Hello, this is an assistant, who is calling", 2500)
    line = np.concatenate([quiet(200), speechlike(3600, seed=8), quiet(2500)])
    verdict = feed_audio(assistant, ulaw(line))
    assert verdict.verdict == SCREENING and verdict.reason == "long_greeting"
    # the words of the greeting's last stretch (after 2.5 s) never came: its pause waited words_grace_ms for them
    settings = assistant.settings
    assert verdict.at_ms >= 3800 + settings.human_silence_ms + settings.words_grace_ms - 40


def test_a_machine_long_pause_waits_for_the_words_of_its_last_stretch_and_no_longer():
    line = ulaw(np.concatenate([quiet(200), speechlike(3600, seed=24), quiet(3000)]))
    waiting = AnswerDetector()
    waiting.on_transcript_delta("Hi, thanks for calling.", 1500)  # a recogniser sends words: the segment will end
    assert feed_audio(waiting, line[:(3800 + 900) * 8]) is None  # 0.9 s of quiet: the last words are on their way
    verdict = waiting.on_transcript_done("Please state your name and the reason for your call.", 4700)
    assert (verdict.verdict, verdict.reason) == (SCREENING, "words")

    no_words = AnswerDetector()  # no recogniser: the pause names the machine at once, as before
    verdict = feed_audio(no_words, line)
    assert verdict.reason == "long_greeting" and verdict.at_ms <= 3800 + no_words.settings.human_silence_ms + 40


def test_a_completed_segment_replaces_its_deltas():
    detector = AnswerDetector()
    detector.on_transcript_delta("press", 500)
    verdict = detector.on_transcript_done("For billing, press 1", 900)
    assert verdict.verdict == IVR and verdict.at_ms == 900


@pytest.mark.parametrize("answered_by, expected", [
    ("human", HUMAN), ("machine_end_beep", VOICEMAIL), ("machine_end_silence", VOICEMAIL),
    ("machine_end_other", VOICEMAIL), ("fax", UNKNOWN),
])
def test_the_carriers_amd_decides_at_once(answered_by, expected):
    verdict = AnswerDetector().on_carrier_amd(answered_by, 2500)
    assert (verdict.verdict, verdict.reason, verdict.detail, verdict.at_ms) == (expected, "carrier_amd", answered_by, 2500)


def test_a_carrier_machine_end_after_screening_words_keeps_the_words_class():
    detector = AnswerDetector()
    detector.on_transcript_delta("who is calling", 800)
    assert detector.on_carrier_amd("machine_end_other", 3000).verdict == SCREENING


def test_carrier_machine_start_makes_a_machine_sooner_and_unknown_is_no_evidence():
    line = ulaw(np.concatenate([quiet(100), speechlike(2500, seed=10), quiet(2000)]))
    plain = AnswerDetector()
    assert plain.on_carrier_amd("unknown", 300) is None
    # 2.5 s of speech is too long for a hello and too short for a machine: nothing until the bound
    assert feed_audio(plain, line) is None
    assert plain.on_tick(plain.settings.max_wait_ms).verdict == UNKNOWN
    hinted = AnswerDetector()
    assert hinted.on_carrier_amd("machine_start", 300) is None
    verdict = feed_audio(hinted, line)
    assert verdict.verdict == VOICEMAIL and verdict.reason == "long_greeting" and verdict.at_ms < 3400


def test_bad_input_is_refused_with_a_clear_error():
    detector = AnswerDetector()
    with pytest.raises(ValueError, match="160 bytes"):
        detector.on_audio(b"\xff" * 100, 0)
    with pytest.raises(ValueError, match="not a carrier AMD result"):
        detector.on_carrier_amd("machine", 0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        DetectorSettings(max_wait_ms=0)


def test_the_verdict_is_reached_once_and_kept():
    detector = AnswerDetector()
    first = detector.on_carrier_amd("human", 100)
    assert detector.on_transcript_done("please leave a message", 200) is None
    assert detector.on_carrier_amd("machine_end_beep", 300) is None
    assert detector.verdict is first


def test_a_person_is_a_person_even_when_the_carrier_guessed_machine_start():
    detector = AnswerDetector()
    detector.on_carrier_amd("machine_start", 200)
    line = np.concatenate([quiet(300), speechlike(600, seed=12), quiet(2000)])
    verdict = feed_audio(detector, ulaw(line))
    assert verdict.verdict == HUMAN and verdict.reason == "short_greeting" and verdict.at_ms <= 900 + 720


def test_a_carrier_machine_end_over_a_hello_length_greeting_is_a_hint_only():
    """The carrier's word alone never hangs up on someone who sounded like a person: a machine_end_* while our
    audio heard a hello-length burst leaves the cadence to decide (a person), where one over a machine-long
    greeting, or over nothing heard (synchronous AMD), decides."""
    hello = AnswerDetector()
    line = ulaw(np.concatenate([quiet(200), speechlike(600, seed=21), quiet(2000)]))
    frames = [line[i:i + FRAME_BYTES] for i in range(0, len(line), FRAME_BYTES)]
    for index, frame in enumerate(frames[:45]):  # 900 ms: the hello, not yet its quiet
        assert hello.on_audio(frame, index * FRAME_MS) is None
    assert hello.on_carrier_amd("machine_end_silence", 900) is None
    assert hello.on_carrier_amd("machine_end_beep", 920) is None
    verdict = None
    for index, frame in enumerate(frames[45:], start=45):
        verdict = verdict or hello.on_audio(frame, index * FRAME_MS)
    assert verdict.verdict == HUMAN and verdict.reason == "short_greeting"
    assert (hello.carrier_amd, hello.carrier_amd_ms) == ("machine_end_silence", 900)

    machine = AnswerDetector()
    long_line = ulaw(np.concatenate([quiet(100), speechlike(2000, seed=22)]))
    assert feed_audio(machine, long_line) is None
    verdict = machine.on_carrier_amd("machine_end_other", 2200)
    assert (verdict.verdict, verdict.reason) == (VOICEMAIL, "carrier_amd")

    nothing_heard = AnswerDetector()
    verdict = nothing_heard.on_carrier_amd("machine_end_beep", 0)
    assert (verdict.verdict, verdict.detail) == (VOICEMAIL, "machine_end_beep")
    assert nothing_heard.carrier_beep_ms == 0


def test_a_carrier_beep_names_a_voicemail_even_after_weak_screening_words():
    detector = AnswerDetector()
    detector.on_transcript_delta("who is calling", 800)
    assert detector.on_carrier_amd("machine_end_beep", 3000).verdict == VOICEMAIL


def test_a_late_carrier_result_is_kept_beside_the_verdict_it_does_not_change():
    detector = AnswerDetector()
    first = detector.on_transcript_done("Please leave a message after the tone.", 2500)
    assert detector.on_carrier_amd("human", 3100) is None
    assert detector.verdict is first and (detector.carrier_amd, detector.carrier_amd_ms) == ("human", 3100)


def test_a_carrier_human_over_a_machine_long_greeting_leaves_the_machine_to_its_words_or_unknown():
    line = ulaw(np.concatenate([quiet(100), speechlike(3500, seed=23)]))
    by_words = AnswerDetector()
    assert feed_audio(by_words, line) is None
    assert by_words.on_carrier_amd("human", 3700) is None  # our audio heard a machine: the carrier's word waits
    verdict = by_words.on_transcript_done("Please leave a message after the tone.", 3800)
    assert (verdict.verdict, verdict.reason) == (VOICEMAIL, "words")

    by_cadence = AnswerDetector()
    feed_audio(by_cadence, line)
    by_cadence.on_carrier_amd("human", 3700)
    assert feed_audio(by_cadence, ulaw(quiet(1000)), start_ms=3600) is None  # a pause would have named a voicemail
    verdict = by_cadence.on_tick(by_cadence.settings.max_wait_ms)
    assert (verdict.verdict, verdict.reason) == (UNKNOWN, "max_wait")  # the agent starts: no hang-up on a disagreement
