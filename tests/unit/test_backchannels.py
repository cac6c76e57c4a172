"""The backchannel lexicons: a backchannel is the whole utterance, read as the words come."""

from __future__ import annotations

import pytest

from voicecore.call.backchannels import Lexicon, normalize

EN = Lexicon(("en",))
SV = Lexicon(("sv",))


@pytest.mark.parametrize("text", ["Mm-hmm.", "mhm", "Yeah.", "Okay, okay.", "Uh-huh", "Right.", "Yeah, yeah, I see.",
                                  "OK got it", "All right.", "Sure", "Oh okay"])
def test_english_backchannels(text):
    assert EN.is_backchannel(text) and EN.verdict(text, complete=True) == "backchannel"


@pytest.mark.parametrize("text", ["No.", "Stop.", "Wait.", "Sorry, who is this?", "Hold on a second.", "Yeah, but on Friday.",
                                  "okay so what does it cost", "yes I have a question", "Hello?"])
def test_english_turns(text):
    assert not EN.is_backchannel(text) and EN.verdict(text, complete=True) == "turn"


@pytest.mark.parametrize("text", ["Mm.", "Ja.", "Okej.", "Precis.", "Ja ja", "Just det.", "Jaha."])
def test_swedish_backchannels(text):
    assert SV.verdict(text, complete=True) == "backchannel"


@pytest.mark.parametrize("text", ["Nej.", "Vänta.", "Förlåt, vem är det här?", "Ja, men på fredag."])
def test_swedish_turns(text):
    assert SV.verdict(text, complete=True) == "turn"


def test_a_partial_transcript_is_a_backchannel_only_while_it_could_still_be_one():
    assert EN.verdict("Yeah", complete=False) == "backchannel"
    assert EN.verdict("Yeah, but", complete=False) == "turn"  # one word that is not one decides at once
    assert EN.verdict("mm-h", complete=False) == "backchannel"  # a word cut short may still become one
    assert EN.verdict("mm-h", complete=True) == "turn"
    assert EN.verdict("yes I", complete=False) == "backchannel"  # "yes, I see"
    assert EN.verdict("yes I have", complete=False) == "turn"


def test_no_words_is_not_a_backchannel_and_has_no_verdict():
    assert not EN.is_backchannel("  ...  ") and EN.verdict("", complete=True) == ""


def test_languages_are_separate_and_an_agent_adds_its_own():
    assert EN.verdict("precis", complete=True) == "turn" and SV.verdict("precis", complete=True) == "backchannel"
    own = Lexicon(("en",), extra=("sounds good", "You bet!"))
    assert own.is_backchannel("Sounds good.") and own.is_backchannel("you bet, yeah")
    assert not own.is_backchannel("sounds")
    assert own.verdict("sounds", complete=False) == "backchannel"  # on its way to "sounds good"
    assert Lexicon(("en-GB",)).is_backchannel("Right.")  # a regional code reads its language's lexicon


def test_normalize_keeps_hyphenated_backchannels_and_drops_punctuation():
    assert normalize("Mm-hmm... Uh-huh! O.K.") == ["mm-hmm", "uh-huh", "o.k"]
