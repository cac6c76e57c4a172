"""DTMF (voicecore/outbound/dtmf.py): the digit syntax, the in-band tones, and the Goertzel detector that hears them
back through mu-law, with noise, split anywhere, and not in a voice."""

from __future__ import annotations

import numpy as np
import pytest

from voicecore.g711 import linear_to_ulaw, ulaw_to_linear
from voicecore.outbound import dtmf
from voicecore.outbound.answer_gate import DTMF, HANG_UP, START, AnswerGate
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES


def test_the_syntax_is_keys_and_two_pauses_and_bad_sequences_are_named():
    assert dtmf.parse_digits("1w2W#*0") == "1w2W#*0" and dtmf.keys_of("1w2W#*0") == "12#*0"
    for bad, words in (("", "empty"), ("1x2", "'x'"), ("wW", "presses no key"), ("1" * 33, "at most 32"),
                       ("1A", "'A'"), ("1 2", "' '")):
        with pytest.raises(ValueError, match=words):
            dtmf.parse_digits(bad)


def test_tones_are_whole_frames_100_ms_a_key_100_ms_apart_and_the_pauses_last_their_time():
    one = dtmf.tone_audio("1")
    assert len(one) % FRAME_BYTES == 0 and len(one) == 200 * BYTES_PER_MS
    assert dtmf.tone_ms("1w2") == 100 + 100 + 500 + 100 + 100 and dtmf.tone_ms("1W") == 1200
    samples = ulaw_to_linear(one).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples[:800]))
    peaks = sorted(np.argsort(spectrum)[-2:] * 8000 / 800)
    assert peaks == [700.0, 1210.0]  # 697 and 1209 Hz at the FFT's 10 Hz resolution
    assert np.max(np.abs(samples[800:])) < 50  # the gap is quiet


def _noisy(audio: bytes, snr_db: float, seed: int = 1) -> bytes:
    x = ulaw_to_linear(audio).astype(np.float64)
    on = x[np.abs(x) > 0]
    noise = np.random.default_rng(seed).normal(0, np.sqrt(np.mean(on ** 2)) / 10 ** (snr_db / 20), len(x))
    return bytes(linear_to_ulaw(np.clip(np.rint(x + noise), -32768, 32767).astype(np.int16)))


@pytest.mark.parametrize("snr_db", [None, 20, 10])
def test_every_key_round_trips_through_mu_law_and_noise(snr_db):
    digits = "1w234567890*#"
    audio = dtmf.tone_audio(digits)
    if snr_db is not None:
        audio = _noisy(audio, snr_db)
    assert dtmf.DtmfDetector().feed(audio) == dtmf.keys_of(digits)


def test_the_detector_takes_audio_split_anywhere_and_reports_a_held_key_once():
    audio = dtmf.tone_audio("55") + dtmf.tone_audio("5")
    detector = dtmf.DtmfDetector()
    rng = np.random.default_rng(3)
    found, at = "", 0
    while at < len(audio):
        step = int(rng.integers(1, 400))
        found += detector.feed(audio[at:at + step])
        at += step
    assert found == "555" == detector.keys
    held = dtmf.tone_audio("5", tone_ms=600)  # one long press is one key
    assert dtmf.DtmfDetector().feed(held) == "5"


def test_quiet_noise_a_single_tone_and_a_voice_like_sound_are_no_key():
    rng = np.random.default_rng(5)
    t = np.arange(8000) / 8000
    sounds = [np.zeros(8000), rng.normal(0, 3000, 8000), 8000 * np.sin(2 * np.pi * 1000 * t),  # a voicemail beep
              8000 * np.sin(2 * np.pi * 697 * t)]  # a row frequency alone
    voice = sum((4000 / k) * np.sin(2 * np.pi * 140 * k * t + k) for k in range(1, 25))  # a voiced vowel at 140 Hz
    sounds.append(voice)
    for sound in sounds:
        audio = bytes(linear_to_ulaw(np.clip(np.rint(sound), -32768, 32767).astype(np.int16)))
        assert dtmf.DtmfDetector().feed(audio) == ""


def _ivr_words(gate: AnswerGate):
    gate.on_audio(b"\xff" * FRAME_BYTES * 10)
    return gate.on_words("For billing, press 1.", done=True)


def test_the_gate_presses_the_keys_on_an_ivr_only_with_dtmf():
    decision = _ivr_words(AnswerGate(on_ivr="dtmf"))
    assert decision is not None and decision.verdict.verdict == "ivr" and decision.action == DTMF
    assert _ivr_words(AnswerGate(on_ivr="model")).action == START
    assert _ivr_words(AnswerGate(on_ivr="hang_up")).action == HANG_UP
    person = AnswerGate(on_ivr="dtmf")
    hello = bytes(linear_to_ulaw((8000 * np.sin(2 * np.pi * 220 * np.arange(4000) / 8000)).astype(np.int16)))
    person.on_audio(b"\xff" * FRAME_BYTES * 10 + hello)
    assert person.on_audio(b"\xff" * FRAME_BYTES * 40).action == START  # a person's hello is never sent keys
    with pytest.raises(ValueError, match="on_ivr"):
        AnswerGate(on_ivr="press")


def _beep(gate: AnswerGate):
    """A machine-long greeting, the voicemail's words, then a 1 kHz beep and quiet."""
    t = np.arange(4000) / 8000
    speech = bytes(linear_to_ulaw((6000 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t))).astype(np.int16)))
    gate.on_audio(b"\xff" * FRAME_BYTES * 5)
    for _ in range(8):
        gate.on_audio(speech)
    gate.on_words("Please leave a message after the tone.", done=True)
    tone = bytes(linear_to_ulaw((8000 * np.sin(2 * np.pi * 1000 * np.arange(4000) / 8000)).astype(np.int16)))
    gate.on_audio(b"\xff" * FRAME_BYTES * 20 + tone)
    return gate.on_audio(b"\xff" * FRAME_BYTES * 10)


def test_a_voicemail_message_waits_for_the_beep_as_greet_does():
    from voicecore.outbound.answer_gate import MESSAGE

    message, greet = _beep(AnswerGate(on_voicemail="message")), _beep(AnswerGate(on_voicemail="greet"))
    assert message.verdict.verdict == "voicemail" and message.action == MESSAGE and greet.action == START
    assert message.at_ms == greet.at_ms and message.beep_at_ms is not None and message.at_ms > message.beep_at_ms
    assert _beep(AnswerGate(on_voicemail="hang_up")).action == HANG_UP


@pytest.mark.skipif(__import__("shutil").which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_speech_is_no_key():
    """espeak-ng saying held-out greetings of every class (about a minute of speech): not one key heard."""
    from voicecore.outbound.greetings import HELD_OUT
    from voicecore.sim.caller_voice import speak

    for items in HELD_OUT.values():
        for language, text in items[:4]:
            assert dtmf.DtmfDetector().feed(speak(text, language)) == "", text
