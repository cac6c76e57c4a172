"""Backchannels: the short words a listener says while the other person talks ("mm-hmm", "yeah", "okay";
"mm", "ja", "precis"), which ask for nothing and must not stop the speaker.

Owns the shipped lexicons (English and Swedish), the reading of a caller's words against them, and the
verdict on a transcript that may still be growing: a backchannel is the *whole* utterance ("yeah but on
Friday" is not one), so a partial transcript is "backchannel" only as long as every word so far is one,
and the last, possibly cut, word could still become one. Pure functions; the controller decides what a
verdict does (voicecore/call/controller.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Whole phrases, lower case, words separated by single spaces. A caller's utterance is a backchannel when
# it can be cut into a sequence of these (so "yeah yeah okay" is one; repetitions need no entries).
LEXICONS: dict[str, tuple[str, ...]] = {
    "en": (
        "mm", "mmm", "mhm", "mm-hmm", "mm hmm", "mm-hm", "hmm", "hm", "uh-huh", "uh huh", "uh-hum", "um-hum",
        "yeah", "yea", "yep", "yup", "yes", "ya", "okay", "ok", "o.k.", "k", "kay", "alright", "all right",
        "right", "sure", "oh", "ah", "aha", "ahh", "oh okay", "i see", "got it", "gotcha", "cool", "great",
        "good", "nice", "wow", "really", "exactly", "absolutely", "indeed", "of course", "that's right",
        "uh", "um", "true", "fine",
    ),
    "sv": (
        "mm", "mmm", "mhm", "mm-hm", "hm", "hmm", "ja", "jaa", "jaha", "japp", "jo", "jovisst", "javisst",
        "visst", "okej", "ok", "okey", "precis", "absolut", "aha", "ah", "jaså", "just det", "just ja",
        "precis ja", "ja ja", "jajamen", "toppen", "bra", "fint", "kanon", "juste", "nä men", "oj", "åh",
    ),
}

_WORD = re.compile(r"[\w'’.-]+", re.UNICODE)


def normalize(text: str) -> list[str]:
    """The words of ``text``, lower case, without surrounding punctuation ("Mm-hmm." -> ["mm-hmm"])."""
    words = []
    for raw in _WORD.findall(text.casefold().replace("’", "'")):
        word = raw.strip(".-'")
        if word:
            words.append(word)
    return words


class Lexicon:
    """The backchannel phrases of some languages plus an agent's own, ready to read transcripts with."""

    def __init__(self, languages: Iterable[str] = ("en", "sv"), extra: Iterable[str] = ()) -> None:
        phrases: set[tuple[str, ...]] = set()
        for language in languages:
            base = language.split("-")[0].lower()
            for phrase in LEXICONS.get(base, ()):
                phrases.add(tuple(normalize(phrase)))
        for phrase in extra:
            words = tuple(normalize(phrase))
            if words:
                phrases.add(words)
        phrases.discard(())
        self._phrases = phrases
        self._longest = max((len(p) for p in phrases), default=0)

    def is_backchannel(self, text: str) -> bool:
        """The whole of ``text`` is backchannel phrases (no words at all is not a backchannel: a noise)."""
        words = normalize(text)
        return bool(words) and self._covers(words)

    def verdict(self, text: str, complete: bool) -> str:
        """"backchannel", "turn", or "" (no words yet) for the caller's words so far. ``complete``: the
        transcript is final; otherwise its last word may be cut short ("mm-h" of "mm-hmm") and more may
        follow: a partial transcript whose words are all backchannel so far reads as one, which later
        words may still overturn."""
        words = normalize(text)
        if not words:
            return ""
        reachable = self._reachable(words)
        if reachable[len(words)]:
            return "backchannel"
        if not complete and any(reachable[i] and self._begins_phrase(words[i:]) for i in range(len(words))):
            return "backchannel"  # so far: the rest may still complete a phrase ("yes i" of "yes, I see")
        return "turn"

    def _covers(self, words: list[str]) -> bool:
        return self._reachable(words)[len(words)]

    def _reachable(self, words: list[str]) -> list[bool]:
        """For each position of ``words``: can the words before it be cut into phrases of the lexicon?"""
        reachable = [True] + [False] * len(words)
        for start in range(len(words)):
            if not reachable[start]:
                continue
            for length in range(1, min(self._longest, len(words) - start) + 1):
                if tuple(words[start:start + length]) in self._phrases:
                    reachable[start + length] = True
        return reachable

    def _begins_phrase(self, words: list[str]) -> bool:
        """``words`` (the last possibly cut short) are the beginning of some phrase."""
        n = len(words)
        for phrase in self._phrases:
            if len(phrase) >= n and phrase[:n - 1] == tuple(words[:-1]) and phrase[n - 1].startswith(words[-1]):
                return True
        return False


__all__ = ["LEXICONS", "Lexicon", "normalize"]
