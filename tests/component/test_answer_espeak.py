"""The answer detector on espeak-ng speech: one greeting of each kind, spoken, on a noisy line.

A few clips of the tuning corpus (bench/answer_corpus.py), so the detector is seen working on real
synthetic speech and a beep after it, not only on the unit tests' synthetic signals. The figures over the
whole corpus are the bench's (python -m bench.answer_detection).
"""

from __future__ import annotations

import shutil

import pytest

from bench.answer_corpus import make_clip
from bench.answer_detection import BEEP_TOLERANCE_MS, run_clip
from voicecore.outbound.greetings import TUNING

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                reason="espeak-ng (Debian package) is not installed: the greetings cannot be spoken")


@pytest.mark.parametrize("label", ["human", "voicemail", "screening", "ivr"])
def test_a_spoken_greeting_gets_its_verdict(label):
    language, text = TUNING[label][0]
    clip = make_clip(label, language, text, variant=1, seed=42)  # variant 1: a 30 dB noisy line
    result = run_clip(clip)
    assert result["verdict"] == label, result
    assert result["verdict_ms"] <= 6000
    if label == "voicemail":
        assert abs(result["beep_at_ms"] - clip.beep_at_ms) <= BEEP_TOLERANCE_MS, result
    else:
        assert result["beep_at_ms"] is None


def test_a_person_is_answered_soon_after_their_hello():
    language, text = TUNING["human"][0]  # "Hello?"
    clip = make_clip("human", language, text, variant=3, seed=7)  # variant 3: a 15 dB noisy line
    result = run_clip(clip)
    assert result["verdict"] == "human" and result["reason"] == "short_greeting"
    assert result["verdict_ms"] - clip.greeting_end_ms <= 1000, result
