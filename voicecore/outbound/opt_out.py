"""A callee asking not to be called again, in their own words: "stop calling me", "take me off your list",
"ring inte mig igen".

Owns the phrase list (English and Swedish), matching it in a caller's transcript, and the agent's polite
goodbye in the caller's language. Matching is phrases.py's: lower-cased text with punctuation folded to spaces,
whole words only, so "don't call me" matches in "please, DON'T call me again!" and not in "don't call me
Bob". The controller (voicecore/call/controller.py) says the goodbye and ends the call; the call store puts the
number on the do-not-call list when it stores the call (its agent line carries OPT_OUT_PROMPT).
"""

from __future__ import annotations

from typing import NamedTuple

from voicecore.outbound.phrases import normalize

# The prompt id of the opt-out goodbye: how the call's record and the store tell that the callee opted out.
OPT_OUT_PROMPT = "opt_out"

PHRASES: dict[str, tuple[str, ...]] = {
    "en": (
        "stop calling me", "stop calling", "stop ringing me", "don't call me again", "do not call me again",
        "don't call me anymore", "do not call me anymore", "don't call me any more", "never call me again",
        "don't ever call me", "take me off your list", "take me off your calling list", "take me off the list",
        "remove me from your list", "remove me from the list", "remove my number", "take my number off",
        "put me on your do not call list", "put me on the do not call list", "add me to your do not call list",
        "do not call list", "don't call this number", "do not call this number", "lose my number",
        "quit calling me", "unsubscribe me",
    ),
    "sv": (
        "ring inte mig igen", "ring inte igen", "ring mig inte igen", "ring inte hit igen", "sluta ring",
        "sluta ringa", "sluta ringa mig", "sluta att ringa", "ta bort mig från listan", "ta bort mig från er lista",
        "ta bort mitt nummer", "stryk mig från listan", "jag vill inte bli uppringd", "vill inte bli uppringd",
        "ring aldrig mer", "ring aldrig hit",
    ),
}

GOODBYES = {
    "en": "Of course. I have taken your number off our list, and we will not call you again. Sorry for the "
          "trouble. Goodbye!",
    "sv": "Självklart. Jag har tagit bort ditt nummer från vår lista, och vi ringer inte igen. Förlåt för "
          "besväret. Hej då!",
}


class OptOut(NamedTuple):
    language: str  # the language of the phrase heard: the goodbye's
    phrase: str


_PATTERNS = [(language, phrase, normalize(phrase)) for language, phrases in PHRASES.items() for phrase in phrases]


def find_opt_out(text: str) -> OptOut | None:
    """The first opt-out phrase in ``text`` (a caller's transcript), or None."""
    padded = normalize(text)
    for language, phrase, pattern in _PATTERNS:
        if pattern in padded:
            return OptOut(language, phrase)
    return None


def goodbye(language: str) -> str:
    """The agent's polite goodbye to a callee who opted out, in ``language`` (English when it has none)."""
    return GOODBYES.get(language, GOODBYES["en"])
