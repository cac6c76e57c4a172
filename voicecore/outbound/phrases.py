"""The words of a greeting that say what answered: a voicemail, a screening assistant or an IVR menu.

Owns the phrase lists (English and Swedish) and matching them in transcript text. Two strengths: a
``strong`` phrase decides on its own ("leave a message", "press 1"); a ``weak`` one ("who is calling") is
also what a person says on answering, so it only names the class once the greeting is machine-long.
Matching is on lower-cased text with punctuation folded to spaces, whole words only.
"""

from __future__ import annotations

import re
from typing import NamedTuple

VOICEMAIL = "voicemail"
SCREENING = "screening"
IVR = "ivr"

STRONG = "strong"
WEAK = "weak"

# class -> strength -> phrases (already normalized: lower case, single spaces, no punctuation)
PHRASES: dict[str, dict[str, tuple[str, ...]]] = {
    VOICEMAIL: {
        STRONG: (
            "leave a message", "leave me a message", "leave your message", "leave a brief message",
            "leave a short message", "leave your name and number", "leave your name and phone number",
            "not available", "unavailable", "after the tone", "after the beep", "at the tone", "at the beep",
            "can't take your call", "cannot take your call", "can't come to the phone", "cannot come to the phone",
            "can't answer", "cannot answer", "unable to answer", "unable to take your call",
            "voicemail", "voice mail", "mailbox", "record your message", "i'll call you back",
            "i will call you back", "get back to you", "away from the phone", "not here right now",
            # Swedish
            "lämna ett meddelande", "lämna meddelande", "efter tonen", "efter pipet", "inte tillgänglig",
            "kan inte svara", "kan inte ta ditt samtal", "röstbrevlåda", "röstbrevlådan", "tala in",
            "ringer upp dig", "ringer tillbaka",
        ),
        WEAK: ("you've reached", "you have reached", "du har kommit till", "du har ringt"),
    },
    SCREENING: {
        STRONG: (
            "state your name", "say your name", "record your name", "your name and reason",
            "your name and why", "reason for calling", "reason for your call", "why you're calling",
            "why you are calling", "what you're calling about", "what you are calling about",
            "being screened", "screening service", "call screening", "screens calls", "screening your call",
            "see if this person is available", "see if they're available", "get a copy of this conversation",
            # Swedish
            "säg ditt namn", "ditt namn och ärende", "ditt ärende", "vad ditt samtal gäller", "vad samtalet gäller",
            "samtalet granskas",
        ),
        WEAK: ("who is calling", "who's calling", "who is this", "may i ask who", "vem som ringer", "vem är det"),
    },
    IVR: {
        STRONG: (
            "press 1", "press one", "press 2", "press two", "press 3", "press three", "press 0", "press zero",
            "press star", "press pound", "para español", "para espanol", "for english", "main menu",
            "menu options", "dial the extension", "extension now", "your party's extension", "say or press",
            "please listen carefully", "your call is important", "please hold", "stay on the line",
            "next available", "for billing", "for sales", "for support", "to speak to", "to speak with",
            # Swedish
            "tryck 1", "tryck ett", "tryck 2", "tryck två", "tryck stjärna", "knappa in", "för svenska",
            "huvudmenyn", "ditt samtal är viktigt", "vänligen vänta", "nästa lediga",
        ),
        WEAK: ("thank you for calling", "thanks for calling", "welcome to", "tack för att du ringer",
               "välkommen till"),
    },
}

# When the same text holds phrases of several classes, the most specific one wins: a screening
# assistant and an IVR both often mention messages, a plain voicemail never asks for your name or a digit.
CLASS_ORDER = (SCREENING, IVR, VOICEMAIL)

_FOLD = re.compile(r"[^\w'#*]+", re.UNICODE)


class PhraseMatch(NamedTuple):
    answer_class: str
    strength: str
    phrase: str


def normalize(text: str) -> str:
    """Lower case, curly apostrophes straightened, punctuation folded to single spaces, padded with one space."""
    folded = _FOLD.sub(" ", text.lower().replace("\u2019", "'"))
    return f" {' '.join(folded.split())} "


def _compiled() -> list[tuple[str, str, str, str]]:
    rows = []
    for answer_class in CLASS_ORDER:
        for strength in (STRONG, WEAK):
            for phrase in PHRASES[answer_class][strength]:
                rows.append((answer_class, strength, phrase, normalize(phrase)))
    return rows


_PATTERNS = _compiled()


def find_phrases(text: str) -> list[PhraseMatch]:
    """Every phrase in ``text``, most specific class first, strong before weak within a class."""
    padded = normalize(text)
    return [PhraseMatch(answer_class, strength, phrase)
            for answer_class, strength, phrase, pattern in _PATTERNS if pattern in padded]


def strongest(matches: list[PhraseMatch], strength: str) -> str | None:
    """The class ``matches`` name at ``strength`` (the first in CLASS_ORDER), or None."""
    for match in matches:
        if match.strength == strength:
            return match.answer_class
    return None
