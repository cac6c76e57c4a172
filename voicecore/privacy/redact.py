"""Redaction of personal data in text: what a caller said, as it may be stored.

Owns finding and replacing spans; no I/O, no clock. A ``Redactor`` is built once per agent (its languages
and its own patterns) and is then a pure function of the text.

Kinds (each replaced by ``[kind]``):

- ``email``: an address ``local@domain.tld``.
- ``iban``: two letters, two check digits and 11-30 letters or digits (spaces allowed), mod-97 checked.
- ``personnummer``: a Swedish personal identity or coordination number (samordningsnummer: day + 60), with
  or without the century, with ``-``/``+`` or spaces or nothing between the parts, Luhn-checked.
- ``card``: a payment card number, 13-19 digits starting 2-6, Luhn-checked.
- ``phone``: a number the ``phonenumbers`` library (libphonenumber's numbering plans) calls valid, in
  international form (``+46 ...``, ``0046 ...``) or national in the language's region (then the others).
- ``pattern``: a match of one of the agent's own regular expressions (``[privacy] patterns``).

Numbers are read as speech-to-text writes them too: digit groups separated by spaces, hyphens, dots or
slashes ("0 7 0 1 2 3 4 5 6 7", "070-123 45 67") and single digits said as words in English or Swedish
("four one one one", "noll sju noll"), mixed freely, with "plus" read out for "+". What is not caught is in docs/how-to/privacy.md.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Sequence

import phonenumbers

KINDS = ("phone", "email", "card", "personnummer", "iban", "pattern")

# Digits said one at a time. Ambiguous words ("one", "en", "sex", "oh") only count inside a run of digits:
# a lone one is a single digit, and no kind is shorter than seven.
DIGIT_WORDS: dict[str, str] = {
    # English
    "zero": "0", "oh": "0", "o": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9",
    # Swedish
    "noll": "0", "ett": "1", "en": "1", "två": "2", "tva": "2", "tre": "3", "fyra": "4", "fem": "5", "sex": "6",
    "sju": "7", "åtta": "8", "atta": "8", "nio": "9",
}

# Which phone regions are tried first for a national number (one without +/00), by language.
LANGUAGE_REGIONS: dict[str, tuple[str, ...]] = {"sv": ("SE",), "en": ("US", "GB")}
FALLBACK_REGIONS = ("SE", "US", "GB")

EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
# Candidate IBANs: the exact length is found by the checksum (a prefix of the candidate).
IBAN_CANDIDATE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?:[ ]?[A-Za-z0-9]){11,30}(?![A-Za-z0-9])")
_WORDS = "|".join(sorted((re.escape(w) for w in DIGIT_WORDS), key=len, reverse=True))
DIGIT_TOKEN = re.compile(rf"\d+|(?<![\w])(?:{_WORDS})(?![\w])", re.IGNORECASE)
# What may stand between two digit groups of one number: spaces, -, –, ., /, (, ), + (the personnummer's
# separator for a person over 100) and a comma (some transcribers write "070, 123, 45, 67").
SEPARATOR = re.compile(r"[\s\-–./()+,]{1,4}")
PLUS_WORD = re.compile(r"(?<!\w)plus\s+$", re.IGNORECASE)  # "+" read out, in English and Swedish alike
MIN_DIGITS = 7  # the shortest number any kind accepts (a short national phone number)
MAX_DIGITS = 19  # the longest (a card)


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    kind: str


class PatternError(ValueError):
    """An agent's pattern is not a regular expression Python accepts (``index``: which one)."""

    def __init__(self, index: int, pattern: str, reason: str) -> None:
        self.index, self.pattern, self.reason = index, pattern, reason
        super().__init__(f"pattern {index} ({pattern!r}) is not a valid regular expression: {reason}")


def compile_patterns(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """The agent's patterns, compiled (case-insensitive); PatternError names the first bad one. A pattern
    that matches the empty string is refused too: it would redact nothing and match everywhere."""
    compiled = []
    for i, pattern in enumerate(patterns):
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise PatternError(i, pattern, str(exc)) from None
        if regex.fullmatch(""):
            raise PatternError(i, pattern, "it matches the empty string")
        compiled.append(regex)
    return tuple(compiled)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = ord(ch) - 48
        if i % 2:
            n *= 2
            if n > 9:
                n -= 9
        total += n
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    """``iban``: letters and digits only, upper case."""
    if len(iban) < 15 or len(iban) > 34 or not iban[:2].isalpha() or not iban[2:4].isdigit():
        return False
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


def personnummer_ok(digits: str) -> bool:
    """10 digits (YYMMDDNNNC) or 12 (with the century 18, 19 or 20); a real month, a day (or a coordination
    number's day + 60), and the Luhn check over the ten."""
    if len(digits) == 12:
        if digits[:2] not in ("18", "19", "20"):
            return False
        digits = digits[2:]
    if len(digits) != 10:
        return False
    month, day = int(digits[2:4]), int(digits[4:6])
    if not 1 <= month <= 12:
        return False
    if day > 60:
        day -= 60
    return 1 <= day <= 31 and luhn_ok(digits)


def card_ok(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_ok(digits)


@dataclasses.dataclass(frozen=True, slots=True)
class _Token:
    start: int
    end: int
    digits: str


class Redactor:
    """Finds and replaces personal data in text (the module's docstring lists the kinds)."""

    def __init__(self, languages: Sequence[str] = ("en",), patterns: Iterable[str] = ()) -> None:
        regions: list[str] = []
        for language in languages:
            for region in LANGUAGE_REGIONS.get(language.split("-")[0].lower(), ()):
                if region not in regions:
                    regions.append(region)
        self.regions = tuple(regions) + tuple(r for r in FALLBACK_REGIONS if r not in regions)
        self.patterns = compile_patterns(patterns)

    def redact(self, text: str) -> str:
        """``text`` with every span found replaced by ``[kind]``."""
        if not text:
            return text
        spans = self.find(text)
        if not spans:
            return text
        out, at = [], 0
        for span in spans:
            out.append(text[at:span.start])
            out.append(f"[{span.kind}]")
            at = span.end
        out.append(text[at:])
        return "".join(out)

    def find(self, text: str) -> list[Span]:
        """The spans to redact, in order, none overlapping (an earlier or longer span wins)."""
        found: list[Span] = []
        for regex in self.patterns:
            found += [Span(m.start(), m.end(), "pattern") for m in regex.finditer(text) if m.end() > m.start()]
        found += [Span(m.start(), m.end(), "email") for m in EMAIL.finditer(text)]
        found += self._ibans(text)
        found += self._numbers(text)
        found.sort(key=lambda s: (s.start, -(s.end - s.start)))
        kept: list[Span] = []
        for span in found:
            if kept and span.start < kept[-1].end:
                continue
            kept.append(span)
        return kept

    def _ibans(self, text: str) -> list[Span]:
        spans = []
        for match in IBAN_CANDIDATE.finditer(text):
            raw = match.group()
            # the longest prefix (in characters, spaces included) whose letters and digits check
            positions = [i for i, ch in enumerate(raw) if ch != " "]
            compact = "".join(raw[i] for i in positions).upper()
            for n in range(len(compact), 14, -1):
                if iban_ok(compact[:n]):
                    spans.append(Span(match.start(), match.start() + positions[n - 1] + 1, "iban"))
                    break
        return spans

    def _numbers(self, text: str) -> list[Span]:
        spans = []
        for run in _digit_runs(text):
            i = 0
            while i < len(run):
                span = self._longest_at(text, run, i)
                if span is None:
                    i += 1
                    continue
                spans.append(span[0])
                i = span[1]
        return spans

    def _longest_at(self, text: str, run: list[_Token], i: int) -> tuple[Span, int] | None:
        """The longest number starting at ``run[i]`` that some kind accepts, and the index after it."""
        digits = ""
        windows = []
        for j in range(i, len(run)):
            digits += run[j].digits
            if len(digits) > MAX_DIGITS + 2:
                break
            if len(digits) >= MIN_DIGITS:
                windows.append((j, digits))
        before = text[max(0, run[i].start - 6):run[i].start]
        plus_said = PLUS_WORD.search(before)
        plus = before.rstrip().endswith("+") or plus_said is not None
        for j, digits in reversed(windows):
            kind = self._kind(digits, plus)
            if kind:
                start = run[i].start
                if kind == "phone" and plus_said is not None:  # "plus four six ...", as a number is read out
                    start = run[i].start - len(before) + plus_said.start()
                elif kind == "phone" and start and text[start - 1] in "+(":  # "+46 ...", "(415) 555-2671"
                    start -= 1
                return Span(start, run[j].end, kind), j + 1
        return None

    def _kind(self, digits: str, plus: bool) -> str:
        if not plus:
            if len(digits) in (10, 12) and personnummer_ok(digits):
                return "personnummer"
            if card_ok(digits):
                return "card"
        return "phone" if self._phone_ok(digits, plus) else ""

    def _phone_ok(self, digits: str, plus: bool) -> bool:
        if plus or digits.startswith("00"):
            candidates = [("+" + (digits[2:] if not plus else digits), None)]
        else:
            # A national number as people say it: with the region's trunk prefix (0 in Sweden and Britain;
            # optional 1 in North America), so that an order or customer number is not taken for a phone.
            candidates = [(digits, region) for region in self.regions if _national_form(digits, region)]
        for number, region in candidates:
            if len(number.lstrip("+")) > 17:
                continue
            try:
                parsed = phonenumbers.parse(number, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(parsed):
                return True
        return False


def _national_form(digits: str, region: str) -> bool:
    metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
    if metadata is None:
        return False
    prefix = metadata.national_prefix or ""
    return metadata.country_code == 1 or not prefix or digits.startswith(prefix)


def _digit_runs(text: str) -> list[list[_Token]]:
    """Maximal runs of digit groups and digit words with only separators between them."""
    runs: list[list[_Token]] = []
    current: list[_Token] = []
    for match in DIGIT_TOKEN.finditer(text):
        token = match.group()
        digits = token if token.isdigit() else DIGIT_WORDS[token.lower()]
        if not token.isascii() and token.isdigit():
            digits = "".join(str(int(ch)) for ch in token)  # other scripts' digits, as ASCII
        if current and not SEPARATOR.fullmatch(text[current[-1].end:match.start()]):
            runs.append(current)
            current = []
        current.append(_Token(match.start(), match.end(), digits))
    if current:
        runs.append(current)
    return [run for run in runs if sum(len(t.digits) for t in run) >= MIN_DIGITS]
