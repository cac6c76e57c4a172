"""Every number a text states, found and normalized for the validation gate; sans-I/O.

Owns what counts as a number and its canonical spelling, for text as written and as spoken: integers,
decimals, percentages, phone numbers, dates, clock times, amounts with units, thousands with spaces, and
numbers said in words in English and Swedish. The knowledge base (knowledge.py) and the script matcher
(script.py) both compare these canonical strings. Must not know knowledge bases, files, calls, audio or
clocks. Our own misuse (an unknown language) raises ValueError; any text, however odd, only yields fewer or
more mentions, never an exception.

Canonical values (``NumberMention.value``):
- integer, amount, ordinal: the magnitude in plain digits, no leading zeros, no grouping ("08" -> "8",
  "10 000" -> "10000", "1,5 miljoner" -> "1500000"); decimal: "." as the separator, trailing zeros
  dropped ("3,50" -> "3.5"); a decimal equal to an integer is that integer ("12.0" -> integer "12").
- percent: magnitude + "%" ("12 procent" -> "12%"); the unit is "%".
- phone: the digits, with a leading "+" when the text had one; "+46 (0)70" drops the trunk "(0)".
- date: ISO "YYYY-MM-DD"; a date without a year "--MM-DD" (ISO 8601); month and year "YYYY-MM".
- time: "HH:MM", 24-hour ("5 pm" -> "17:00", "kl. 8" -> "08:00").
- unit: canonical and language-free ("kronor", "SEK", ":-" -> "kr"; "$", "dollars" -> "usd"; "GB",
  "gigabytes" -> "gb"; "månader", "months" -> "month"). SEK and kr are one currency.

Rules for the ambiguous cases (the ``language`` argument is "en", "sv" or "auto"):
- Comma: in "en" a comma followed by exactly three digits groups thousands ("1,000" -> "1000"), any
  other comma is a decimal ("3,5" -> "3.5"). In "sv" a comma is always a decimal ("1,000" -> "1").
  In "auto" "1,000" reads as 1000 with the decimal reading "1" kept in ``alternatives``. Several commas
  ("1,000,000") or both separators ("1,000.50", "1.000,50") are unambiguous in every language. A dot
  is a decimal, except several dots ("1.000.000").
- Spaces (also no-break, narrow no-break and thin spaces) group thousands when every group after the
  first has exactly three digits ("10 000", "1 299"); other digit groups of 7-15 digits are phone
  numbers ("070 123 45 67", "555 123 4567").
- Phone numbers: 7-15 digits that have a "+", parentheses, a leading 0 with separators (or a plain run
  of 8-12 digits starting with 0), or separators that do not group thousands. Two dash-separated
  groups without a leading 0 are a range ("2020-2024", "555-1234"), not a phone number. A single "."
  is a decimal point, never a phone separator.
- Slash dates: "en" reads M/D/Y, "sv" reads D/M/Y; when the preferred reading is impossible the other
  is used ("13/1/2025" is January 13 in both). "auto" keeps both valid readings (value = M/D/Y,
  ``alternatives`` = D/M/Y). Dotted "1.3.2025" is always D.M.Y. Two-digit years are 20YY.
- Words: whole words only ("often", "tone", "someone" hold no number). English "one" up to two words
  after a determiner ("the basic one", "no one", "which one") or before "of", "another", "moment",
  "sec", "second", "more", "thing", "way" is a pronoun or an idiom, not 1. English "a" is 1 only before hundred/thousand/million/
  billion. Swedish "en"/"ett" are articles: 1 only before "hundra"/"tusen"/"miljon(er)"/"miljard(er)"
  or a currency, data or percent unit ("en krona", "ett hundra"), never alone ("en månad" is no
  number). A hyphenated word counts only if every part is a number word ("ninety-nine" yes,
  "one-time" no). Swedish compounds are split into number morphemes and accepted only if they form a
  well-ordered number ("nittionio" 99, "tretton" 13, "trettio" 30, "tvåtusentrehundra" 2300; "tiotal",
  "sexig" are no numbers). Word ordinals ("first", "tredje") are not numbers (too often discourse
  markers); digit ordinals are ("1st", "3:e" -> kind "ordinal").
- Adjacent number words combine while they form one well-ordered number ("twenty one" 21, "one hundred
  and twenty" 120, "a hundred" 100); otherwise they are separate numbers ("one two three" -> 1, 2, 3;
  "twenty twenty-five" -> 20, 25: year-style readings are not supported). "point"/"komma" followed by
  digit words is a decimal ("three point five", "tre komma fem" -> 3.5).
- Digits glued to letters that are not a unit or ordinal suffix name a product ("5G", "3D"): no number.
- Sign: a leading "-" is not part of the number ("-5" -> "5").
- A whole amount and its minor unit are one amount: "en krona och nittio öre" 1.9 kr, "5 dollars and 99
  cents" 5.99 usd.

Spoken forms (times, dates and phone numbers said in words, as a transcript of speech writes them):
- Clock times in words: "half past eight", "quarter past/to three", "ten past five", "twenty to six",
  "five o'clock", "ten a.m.", "two thirty p.m.", "noon", "midnight"; Swedish "halv fem" (04:30), "kvart
  över/i tre", "fem över sju", "tio i fem", "fem i/över halv åtta", "klockan tio", "klockan tio och
  trettio", "midnatt". A part of the day after them decides the half: "in the morning", "in the evening",
  "på morgonen", "på kvällen".
- A bare hour after a time word ("at five", "until 5", "from 9", "till 17", "klockan fem", "vid nio",
  "mellan 9 och 17"; "about" may stand between), or in a range after a day or an opening-hours word
  ("Saturday: 9 to 13", "vardagar 9 till 17", "10 to 14 on Saturdays"), is a time, unless what follows
  it is what it counts ("at 3 locations", "till 5 personer", "från 99 kr").
- The half of the day: a time said with an hour 1-12 and no a.m./p.m. (or part of the day) is either:
  ``value`` the reading with the hour as said (05:00, 12:30), ``alternatives`` the other (17:00, 00:30).
  Digits after "kl."/"klockan" and "HH:MM" follow the 24-hour clock and have one reading. In a range the
  ends settle each other: "9 to 5" is 09:00-17:00, "8 to 17" 08:00-17:00; "8 till 11" stays open. "Ten to
  two" after an opening-hours word is a range, not 01:50.
- Dates with the day in words: "the twenty-sixth of November", "November twenty-sixth", "November the
  26th", Swedish "den tjugosjätte november", "tjugosex november" (a year in digits may follow).
- Phone numbers said as groups of number words: "five five five, zero one zero, four four seven seven",
  "plus fyra sex, sju noll, ett två tre" ("ett" is 1 there), "noll sju noll, etthundratjugotre,
  fyrtiofem": 7-15 digits in at least three groups (two after "plus"), English "oh" is 0 inside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Literal, NamedTuple

Language = Literal["en", "sv", "auto"]
LANGUAGES: tuple[str, ...] = ("en", "sv", "auto")

KINDS: tuple[str, ...] = ("integer", "decimal", "percent", "amount", "ordinal", "phone", "date", "time")


@dataclass(frozen=True, slots=True)
class NumberMention:
    """One number in a text: what kind it is, its canonical value and unit, where it stands."""

    kind: str  # one of KINDS
    value: str  # canonical, see the module docstring
    unit: str | None  # canonical unit, "%" for percentages, None when the text states none
    span: tuple[int, int]  # [start, end) in the text
    raw: str  # text[start:end]
    alternatives: tuple[str, ...] = ()  # other readings of an ambiguous notation, same format as value

    @property
    def magnitude(self) -> str:
        """The number without its percent sign ("12%" -> "12"); the value itself for other kinds."""
        return self.value[:-1] if self.kind == "percent" else self.value

    @property
    def readings(self) -> tuple[str, ...]:
        return (self.value, *self.alternatives)


# --------------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------------

_SP = "[ \u00a0\u202f\u2009]"  # space, no-break space, narrow no-break space, thin space
_MASK = "\x00"  # replaces text already claimed by an earlier stage: not a word char, not a space

# canonical unit -> written and spoken forms (matched case-insensitively, whole words). Public, like the
# number words below: the validation gate (workers/validator/core.py) reads them to tell which words may
# still become part of a number. Read-only.
UNIT_FORMS: dict[str, tuple[str, ...]] = {
    "%": ("%", "percent", "per cent", "procent", "pct"),
    "kr": ("kronor", "krona", "kr", "sek", ":-"),
    "usd": ("dollars", "dollar", "usd", "$"),
    "eur": ("euros", "euro", "eur", "€"),
    "gbp": ("£", "gbp"),
    "kb": ("kilobytes", "kilobyte", "kb"),
    "mb": ("megabytes", "megabyte", "mb"),
    "gb": ("gigabytes", "gigabyte", "gigs", "gig", "gb"),
    "tb": ("terabytes", "terabyte", "tb"),
    "mbit": ("mbit/s", "mbps", "megabits", "mbit"),
    "min": ("minutes", "minute", "minuter", "minut", "min"),
    "h": ("hours", "hour", "timmar", "timme", "h"),
    "day": ("days", "day", "dagar", "dag", "dygn"),
    "week": ("weeks", "week", "veckor", "vecka"),
    "month": ("months", "month", "månader", "månad", "mån"),
    "year": ("years", "year", "år"),
}
# Units that make a Swedish article count as 1 ("en krona"); durations do not ("en månad").
_STRONG_UNITS = frozenset({"%", "kr", "usd", "eur", "gbp", "kb", "mb", "gb", "tb", "mbit"})
_UNIT_OF_FORM = {form: canon for canon, forms in UNIT_FORMS.items() for form in forms}


def _unit_pattern() -> re.Pattern[str]:
    parts = []
    for form in sorted(_UNIT_OF_FORM, key=len, reverse=True):
        escaped = re.escape(form).replace("\\ ", _SP)
        if form[-1].isalpha():
            escaped += r"(?![^\W\d_])"
        parts.append(escaped)
    return re.compile(f"{_SP}?({'|'.join(parts)})", re.IGNORECASE)


_UNIT_AFTER = _unit_pattern()
_PREFIX_CURRENCY = re.compile(r"(?:US\$|\$|€|£|(?<![^\W\d_])(?:sek|usd|eur|gbp))[ \u00a0]?\Z", re.IGNORECASE)
_PREFIX_UNIT = {
    "$": "usd", "us$": "usd", "€": "eur", "£": "gbp", "sek": "kr", "usd": "usd", "eur": "eur", "gbp": "gbp",
}  # fmt: skip
_SCALE_WORDS = {
    "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9,
    "hundra": 100, "tusen": 1000, "miljon": 10**6, "miljoner": 10**6, "miljard": 10**9, "miljarder": 10**9,
}  # fmt: skip
_SCALE_AFTER = re.compile(
    f"{_SP}+({'|'.join(sorted(_SCALE_WORDS, key=len, reverse=True))})(?![^\\W\\d_])", re.IGNORECASE
)
_ORDINAL_SUFFIX = re.compile(r"(?:st|nd|rd|th|:a|:e)(?![^\W\d_])", re.IGNORECASE)

# English number words and their values (read-only, like UNIT_FORMS).
EN_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
    "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9,
}  # fmt: skip
# Swedish number morphemes (read-only, like EN_NUMBER_WORDS); compounds are written together
# ("tvåtusentrehundrafyrtiofem"), so words are split into these. Colloquial tens ("tretti", "förti") are
# what ASR often writes.
SV_NUMBER_MORPHEMES: dict[str, tuple[int, ...]] = {
    "noll": (0,), "en": (1,), "ett": (1,), "två": (2,), "tre": (3,), "fyra": (4,), "fem": (5,),
    "sex": (6,), "sju": (7,), "åtta": (8,), "nio": (9,), "tio": (10,), "elva": (11,), "tolv": (12,),
    "tretton": (13,), "fjorton": (14,), "femton": (15,), "sexton": (16,), "sjutton": (17,),
    "arton": (18,), "aderton": (18,), "nitton": (19,), "tjugo": (20,), "tjugu": (20,),
    "trettio": (30,), "tretti": (30,), "fyrtio": (40,), "fyrti": (40,), "förti": (40,),
    "femtio": (50,), "femti": (50,), "sextio": (60,), "sexti": (60,), "sjuttio": (70,),
    "sjutti": (70,), "åttio": (80,), "åtti": (80,), "nittio": (90,), "nitti": (90,),
    "hundra": (100,), "tusen": (1000,), "ettusen": (1, 1000), "miljon": (10**6,),
    "miljoner": (10**6,), "miljard": (10**9,), "miljarder": (10**9,),
}  # fmt: skip
_SV_BY_LENGTH = sorted(SV_NUMBER_MORPHEMES, key=len, reverse=True)
_EN_DETERMINERS = frozenset(
    {"the", "this", "that", "which", "each", "every", "any", "no", "another", "some", "a", "an"}
)
_EN_ONE_IDIOMS = frozenset({"of", "another", "moment", "sec", "second", "more", "thing", "way"})
_EN_SCALES = frozenset({"hundred", "thousand", "million", "billion"})

_MONTHS = {
    "january": 1, "jan": 1, "januari": 1, "february": 2, "feb": 2, "februari": 2, "march": 3, "mar": 3,
    "mars": 3, "april": 4, "apr": 4, "may": 5, "maj": 5, "june": 6, "jun": 6, "juni": 6, "july": 7,
    "jul": 7, "juli": 7, "august": 8, "aug": 8, "augusti": 8, "september": 9, "sep": 9, "sept": 9,
    "october": 10, "oct": 10, "oktober": 10, "okt": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}  # fmt: skip
_MONTH_ALT = "|".join(sorted(_MONTHS, key=len, reverse=True))

# --------------------------------------------------------------------------------------------------
# Patterns (run on the masked text, so each stage sees only what earlier stages left)
# --------------------------------------------------------------------------------------------------

_ISO_DATE = re.compile(r"(?<![\w/.\-])(\d{4})([-/.])(\d{1,2})\2(\d{1,2})(?![\w]|[-/.]\d)")
_SLASH_DATE = re.compile(r"(?<![\w/.])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\w/])")
_DOTTED_DATE = re.compile(r"(?<![\w.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?![\w]|\.\d)")
_DAY_MONTH = re.compile(
    rf"(?<![\w])(\d{{1,2}})(?:st|nd|rd|th|:a|:e)?\.?{_SP}+(?:of{_SP}+)?({_MONTH_ALT})(?![^\W\d_])\.?"
    rf"(?:,?{_SP}+(\d{{4}})(?!\d))?",
    re.IGNORECASE,
)
_MONTH_DAY = re.compile(
    rf"(?<![^\W\d_])({_MONTH_ALT})\.?{_SP}+(?:the{_SP}+)?(\d{{1,2}})(?:st|nd|rd|th)?(?![\w])(?:,?{_SP}+(\d{{4}})(?!\d))?",
    re.IGNORECASE,
)
_MONTH_YEAR = re.compile(rf"(?<![^\W\d_])({_MONTH_ALT})\.?{_SP}+(\d{{4}})(?!\d)", re.IGNORECASE)

_TIME_AMPM = re.compile(
    rf"(?<![\w:.])(1[0-2]|0?[1-9])(?::([0-5]\d))?{_SP}?([ap])\.?m(?![^\W\d_])\.?", re.IGNORECASE
)
_TIME_KL = re.compile(
    rf"(?<![^\W\d_])(?:kl\.?|klockan){_SP}*([01]?\d|2[0-3])(?:[:.]([0-5]\d))?(?![\w]|[.:]\d)", re.IGNORECASE
)
_TIME_DOT_RANGE = re.compile(
    rf"(?<![\w.:])([01]?\d|2[0-3])\.([0-5]\d){_SP}?[-–—]{_SP}?([01]?\d|2[0-3])\.([0-5]\d)(?![\w]|[.:]\d)"
)
_TIME_COLON = re.compile(r"(?<![\w:.])([01]?\d|2[0-3]):([0-5]\d)(?![\w:]|\.\d)")

_PHONE = re.compile(
    rf"(?<![\w+])(\+{_SP}?)?(?:\(\d{{1,4}}\){_SP}?-?)?\d{{1,4}}"
    rf"(?:(?:{_SP}|-|\.|{_SP}?\(\d{{1,4}}\){_SP}?)?\d{{1,4}}){{0,8}}(?!\d)"
)
_THOUSANDS_GROUPED = re.compile(rf"\d{{1,3}}(?:{_SP}\d{{3}})+|\d{{1,3}}(?:\.\d{{3}})+")

_DIGITS = re.compile(
    r"(?<![\w])("
    rf"\d{{1,3}}(?:{_SP}\d{{3}})+(?:[.,]\d+)?"  # 10 000, 1 299,50
    r"|\d{1,3}(?:[.,]\d{3}){2,}(?:[.,]\d+)?"  # 1,000,000  1.000.000,50
    r"|\d{1,3}[.,]\d{3}[.,]\d+"  # 1,000.50  1.000,50
    r"|\d+(?:[.,]\d+)?"  # 99  3,5  3.14  1,000
    r")(?!\d)"
)
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def extract_numbers(text: str, language: Language = "auto") -> list[NumberMention]:
    """Every number in ``text``, in text order, with canonical values (rules: module docstring)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, not {language!r}")
    found: list[NumberMention] = []
    masked = text
    spoken = _spoken_stages(text, language)
    digits = _ANY_DIGIT.search(text) is not None
    # Most specific first: a date or phone number must not be read as loose integers.
    for stage in (_spoken_dates, _dates, _times, _spoken_times, _phones, _digit_numbers, _spoken_phones,
                  _word_numbers):
        if stage in _SPOKEN_STAGES and stage not in spoken:
            continue
        if stage in _DIGIT_STAGES and not digits:
            continue  # each of their patterns needs a digit (a transcript delta's text mostly has none)
        new = stage(text, masked, language)
        for mention in new:
            start, end = mention.span
            masked = masked[:start] + _MASK * (end - start) + masked[end:]
        found.extend(new)
    return _join_ore(text, sorted(found, key=lambda m: m.span))


_MINOR_LINK = re.compile(rf"{_SP}+(?:och|and){_SP}+\Z", re.IGNORECASE)
_MINOR_UNITS = {
    "kr": re.compile(rf"{_SP}*öre(?![^\W\d_])", re.IGNORECASE),
    "usd": re.compile(rf"{_SP}*cents?(?![^\W\d_])", re.IGNORECASE),
    "eur": re.compile(rf"{_SP}*cents?(?![^\W\d_])", re.IGNORECASE),
    "gbp": re.compile(rf"{_SP}*(?:pence|penny|p)(?![^\W\d_])", re.IGNORECASE),
}


def _join_ore(text: str, mentions: list[NumberMention]) -> list[NumberMention]:
    """A whole amount and its minor unit said after it: "en krona och nittio öre", "99 kr och 50 öre",
    "5 dollars and 99 cents" are one amount (1.9 kr, 99.5 kr, 5.99 usd)."""
    out: list[NumberMention] = []
    for mention in mentions:
        previous = out[-1] if out else None
        minor = _MINOR_UNITS.get(previous.unit or "") if previous is not None else None
        if (previous is not None and minor is not None and previous.value.isdigit() and mention.unit is None
                and mention.kind == "integer" and int(mention.value) < 100
                and _MINOR_LINK.search(text, previous.span[1], mention.span[0])):
            after = minor.match(text, mention.span[1])
            if after:
                value = canonical_decimal(Decimal(previous.value) + Decimal(mention.value) / 100)
                out[-1] = _mention(text, "amount", value, previous.unit, previous.span[0], after.end())
                continue
        out.append(mention)
    return out


def phone_variants(value: str, home_country: str = "46") -> tuple[str, ...]:
    """A canonical phone value and the national forms it is dialled as.

    "+46 70..." is "070..." at home (``home_country`` "46": a trunk-0 country, so "0" + rest), but
    "+44 70..." is not: a national number that starts with 0 is taken to be a home number. NANP
    numbers ("+1" and 10 digits, never starting with 0) are also their 10 digits and "1" + them, and
    "1" + 10 digits is also the 10 digits.
    """
    variants = [value]
    if value.startswith("+"):
        digits = value[1:]
        if home_country != "1" and digits.startswith(home_country) and len(digits) > len(home_country) + 4:
            rest = digits[len(home_country) :]
            variants.append("0" + rest if home_country in _TRUNK_ZERO else rest)
        if digits.startswith("1") and len(digits) == 11:
            variants.extend((digits[1:], digits))
    elif value.startswith("1") and len(value) == 11:
        variants.append(value[1:])  # NANP long-distance "1 555 ..." is the 10 digits
    return tuple(variants)


_TRUNK_ZERO = ("46", "44", "49", "358", "31", "32", "33", "41", "43")


def canonical_decimal(number: Decimal) -> str:
    """Plain digits, "." as decimal point, no trailing zeros, no exponent: Decimal("3.50") -> "3.5"."""
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


# --------------------------------------------------------------------------------------------------
# Stages: each returns mentions found in the unmasked part of the text
# --------------------------------------------------------------------------------------------------


def _mention(
    text: str, kind: str, value: str, unit: str | None, start: int, end: int, alternatives=()
) -> NumberMention:
    return NumberMention(kind, value, unit, (start, end), text[start:end], tuple(alternatives))


def _days_in_month(year: int | None, month: int) -> int:
    if month == 2:
        if year is None or (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
            return 29
        return 28
    return 30 if month in (4, 6, 9, 11) else 31


def _date_value(year: int | None, month: int, day: int | None) -> str | None:
    if not 1 <= month <= 12:
        return None
    if day is not None and not 1 <= day <= _days_in_month(year, month):
        return None
    if day is None:
        return f"{year:04d}-{month:02d}"
    if year is None:
        return f"--{month:02d}-{day:02d}"
    return f"{year:04d}-{month:02d}-{day:02d}"


def _overlaps(span: tuple[int, int], taken: list[tuple[int, int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in taken)


def _dates(text: str, masked: str, language: str) -> list[NumberMention]:
    out: list[NumberMention] = []
    taken: list[tuple[int, int]] = []

    def add(kind_value: str | None, start: int, end: int, alternatives=()) -> None:
        if kind_value is not None and not _overlaps((start, end), taken):
            out.append(_mention(text, "date", kind_value, None, start, end, alternatives))
            taken.append((start, end))

    for m in _ISO_DATE.finditer(masked):
        add(_date_value(int(m[1]), int(m[3]), int(m[4])), *m.span())
    for m in _DOTTED_DATE.finditer(masked):
        add(_date_value(int(m[3]), int(m[2]), int(m[1])), *m.span())
    for m in _SLASH_DATE.finditer(masked):
        a, b, year = int(m[1]), int(m[2]), int(m[3])
        year = 2000 + year if len(m[3]) == 2 else year
        month_first = _date_value(year, a, b)  # en: M/D/Y
        day_first = _date_value(year, b, a)  # sv: D/M/Y
        if language == "sv":
            preferred, other = day_first, month_first
        else:
            preferred, other = month_first, day_first
        if preferred is None:
            preferred, other = other, None
        alternatives = (other,) if language == "auto" and other and other != preferred else ()
        add(preferred, *m.span(), alternatives)
    for m in _DAY_MONTH.finditer(masked):
        if _is_month(m[2]):
            add(_date_value(int(m[3]) if m[3] else None, _MONTHS[m[2].lower()], int(m[1])), *m.span())
    for m in _MONTH_DAY.finditer(masked):
        if _is_month(m[1]):
            add(_date_value(int(m[3]) if m[3] else None, _MONTHS[m[1].lower()], int(m[2])), *m.span())
    for m in _MONTH_YEAR.finditer(masked):
        if _is_month(m[1]):
            add(_date_value(int(m[2]), _MONTHS[m[1].lower()], None), *m.span())
    return out


def _is_month(word: str) -> bool:
    # "may" is a verb far more often than a month: only the capitalized "May" is one.
    return word.lower() != "may" or word[0] == "M"


def _time(text: str, hour: int, minute: int, start: int, end: int) -> NumberMention:
    return _mention(text, "time", f"{hour:02d}:{minute:02d}", None, start, end)


def _times(text: str, masked: str, language: str) -> list[NumberMention]:
    out: list[NumberMention] = []
    taken: list[tuple[int, int]] = []

    def add(mention: NumberMention) -> None:
        if not _overlaps(mention.span, taken):
            out.append(mention)
            taken.append(mention.span)

    for m in _TIME_AMPM.finditer(masked):
        hour = int(m[1]) % 12 + (12 if m[3].lower() == "p" else 0)
        add(_time(text, hour, int(m[2] or 0), *m.span()))
    for m in _TIME_KL.finditer(masked):
        add(_time(text, int(m[1]), int(m[2] or 0), m.start(1), m.end()))
    for m in _TIME_DOT_RANGE.finditer(masked):
        # "08.00–17.00": a dotted time only inside a range, else "8.30" stays a decimal.
        add(_time(text, int(m[1]), int(m[2]), m.start(1), m.end(2)))
        add(_time(text, int(m[3]), int(m[4]), m.start(3), m.end(4)))
    for m in _TIME_COLON.finditer(masked):
        add(_time(text, int(m[1]), int(m[2]), *m.span()))
    return out


def _phones(text: str, masked: str, language: str) -> list[NumberMention]:
    out: list[NumberMention] = []
    for m in _PHONE.finditer(masked):
        raw = m.group()
        plus = raw.startswith("+")
        digits = re.sub(r"\D", "", raw.replace("(0)", "") if plus else raw)
        if _is_phone(raw, digits, plus):
            out.append(_mention(text, "phone", ("+" if plus else "") + digits, None, *m.span()))
    return out


def _is_phone(raw: str, digits: str, plus: bool) -> bool:
    if not 7 <= len(digits) <= 15:
        return False
    if plus or "(" in raw:
        return True
    groups = [g for g in re.split(r"\D+", raw) if g]
    if len(groups) == 1:
        return digits.startswith("0") and 8 <= len(digits) <= 12
    if digits.startswith("0"):
        return True
    if _THOUSANDS_GROUPED.fullmatch(raw):
        return False
    if raw.count(".") == 1 and not re.search(rf"{_SP}|-", raw):
        return False  # a decimal point, not a separator
    if len(groups) == 2 and "-" in raw:
        return False  # a range: "2020-2024"
    return True


def _parse_digits(raw: str, language: str) -> tuple[Decimal, tuple[Decimal, ...]]:
    """Value and alternative readings of a digit string (separator rules: module docstring)."""
    s = re.sub(_SP, "", raw)
    has_comma, has_dot = "," in s, "." in s
    if has_comma and has_dot:
        if s.rfind(".") > s.rfind(","):
            return Decimal(s.replace(",", "")), ()
        return Decimal(s.replace(".", "").replace(",", ".")), ()
    sep = "," if has_comma else "." if has_dot else None
    if sep is None:
        return Decimal(s), ()
    if s.count(sep) > 1:
        return Decimal(s.replace(sep, "")), ()
    whole, frac = s.split(sep)
    as_decimal = Decimal(f"{whole}.{frac}")
    if sep == "," and len(frac) == 3 and whole != "0":
        as_thousands = Decimal(whole + frac)
        if language == "en":
            return as_thousands, ()
        if language == "auto":
            return as_thousands, (as_decimal,)
    return as_decimal, ()


def _format(kind: str, number: Decimal) -> str:
    text = canonical_decimal(number)
    return text + "%" if kind == "percent" else text


def _kind_of(number: Decimal, unit: str | None) -> str:
    if unit == "%":
        return "percent"
    if unit is not None:
        return "amount"
    return "integer" if number == number.to_integral_value() else "decimal"


def _unit_at(masked: str, pos: int) -> tuple[str, int] | None:
    m = _UNIT_AFTER.match(masked, pos)
    if m is None:
        return None
    form = re.sub(r"\s+", " ", m[1].lower())
    return _UNIT_OF_FORM[form], m.end()


def _digit_numbers(text: str, masked: str, language: str) -> list[NumberMention]:
    out: list[NumberMention] = []
    for m in _DIGITS.finditer(masked):
        start, end = m.span()
        if out and start < out[-1].span[1]:
            continue  # taken by the previous number's unit or multiplier
        try:
            number, alternatives = _parse_digits(m[1], language)
        except InvalidOperation:
            continue
        scale = _SCALE_AFTER.match(masked, end)
        if scale:
            factor = _SCALE_WORDS[scale[1].lower()]
            number, alternatives = number * factor, tuple(a * factor for a in alternatives)
            end = scale.end()
        unit: str | None = None
        kind = "integer"
        ordinal = None if scale else _ORDINAL_SUFFIX.match(masked, end)
        if ordinal and number == number.to_integral_value() and not alternatives:
            kind, end = "ordinal", ordinal.end()
        else:
            found = _unit_at(masked, end)
            if found:
                unit, end = found
            elif end < len(masked) and masked[end].isalpha():
                continue  # "5G", "3D": a name, not a quantity
            if unit is None:
                previous_end = out[-1].span[1] if out else 0
                prefix = _PREFIX_CURRENCY.search(masked, max(previous_end, start - 4), start)
                if prefix:
                    unit = _PREFIX_UNIT[prefix.group().strip().lower()]
                    start = prefix.start()
            kind = _kind_of(number, unit)
        value = _format(kind, number)
        alts = tuple(_format(kind, a) for a in alternatives if _format(kind, a) != value)
        out.append(_mention(text, kind, value, unit, start, end, alts))
    return out


# --------------------------------------------------------------------------------------------------
# Numbers in words
# --------------------------------------------------------------------------------------------------


def _combine(values: list[int] | tuple[int, ...]) -> int | None:
    """The number a sequence of word values spells, or None when it is not one well-ordered number.

    Within a group below a thousand: [unit "hundred"] [tens] [unit] or [unit "hundred"] [teen];
    "hundred" may follow any group below 100 ("nineteen hundred", "tjugofemhundra"); scales
    (thousand, million, billion) strictly decrease; zero stands only alone.
    """
    if not values:
        return None
    if 0 in values:
        return 0 if len(values) == 1 else None
    total, group, state = 0, 0, "start"
    has_hundred, last_scale = False, None
    for v in values:
        if v >= 1000:
            if last_scale is not None and v >= last_scale:
                return None
            total += (group or 1) * v
            group, state, has_hundred, last_scale = 0, "start", False, v
        elif v == 100:
            if has_hundred or group >= 100 or state == "tens":
                return None
            group, state, has_hundred = (group or 1) * 100, "hundred", True
        elif v >= 10:
            if state not in ("start", "hundred"):
                return None
            group += v
            state = "tens" if v >= 20 else "teen"
        else:
            if state not in ("start", "hundred", "tens"):
                return None
            group += v
            state = "unit"
    return total + group


@lru_cache(maxsize=16384)
def _en_values(word: str) -> tuple[int, ...] | None:
    parts = word.split("-")
    if all(p in EN_NUMBER_WORDS for p in parts):
        return tuple(EN_NUMBER_WORDS[p] for p in parts)
    return None


@lru_cache(maxsize=4096)
def _sv_values(word: str) -> tuple[int, ...] | None:
    """Split a Swedish word into number morphemes: "nittionio" -> (90, 9); None if it is no number."""
    if "-" in word:
        parts = [_sv_values(p) for p in word.split("-")]
        if all(parts):
            joined = tuple(v for p in parts for v in p)  # type: ignore[union-attr]
            return joined if _combine(joined) is not None else None
        return None
    if len(word) > 64:
        return None

    def split(pos: int):
        if pos == len(word):
            yield ()
            return
        for morpheme in _SV_BY_LENGTH:
            if word.startswith(morpheme, pos):
                for rest in split(pos + len(morpheme)):
                    yield SV_NUMBER_MORPHEMES[morpheme] + rest

    for values in split(0):
        if _combine(values) is not None:
            return values
    return None


def _word_values(word: str, language: str) -> tuple[int, ...] | None:
    if language != "sv":
        values = _en_values(word)
        if values is not None:
            return values
    if language != "en":
        return _sv_values(word)
    return None


def _word_numbers(text: str, masked: str, language: str) -> list[NumberMention]:
    tokens = [(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(masked)]
    english, swedish = language != "sv", language != "en"
    decimal_words = ({"point"} if english else set()) | ({"komma"} if swedish else set())

    def joined(a: int, b: int) -> bool:
        return b < len(tokens) and masked[tokens[a][2] : tokens[b][1]].isspace()

    out: list[NumberMention] = []
    i = 0
    while i < len(tokens):
        word = tokens[i][0]
        values = _word_values(word, language)
        if values is None and english and word == "a" and joined(i, i + 1) and tokens[i + 1][0] in _EN_SCALES:
            values = (1,)
        if values is None or _combine(values) is None:
            i += 1
            continue
        acc = list(values)
        j = i + 1
        while joined(j - 1, j):
            nxt = tokens[j][0]
            if english and nxt == "and" and acc[-1] >= 100 and joined(j, j + 1):
                after = _word_values(tokens[j + 1][0], language)
                if after and max(after) < 100 and _combine(acc + list(after)) is not None:
                    acc += after
                    j += 2
                    continue
                break
            after = _word_values(nxt, language)
            if after is None or _combine(acc + list(after)) is None:
                break
            acc += after
            j += 1
        number = Decimal(_combine(acc))  # type: ignore[arg-type]
        last = j - 1
        if joined(last, j) and tokens[j][0] in decimal_words:
            digits = _decimal_digits(tokens, j + 1, language, joined)
            if digits:
                number = Decimal(f"{int(number)}.{''.join(digits)}")
                last = j + len(digits)
        end = tokens[last][2]
        found = _unit_at(masked, end)
        unit = found[0] if found else None
        single = last == i
        if single and unit is None and english and word == "one" and _one_is_pronoun(tokens, i, joined):
            i = last + 1
            continue
        if single and word in ("en", "ett") and swedish and not (unit in _STRONG_UNITS):
            i = last + 1  # the Swedish article; "en hundra"/"ett tusen" were joined above
            continue
        if found:
            end = found[1]
        kind = _kind_of(number, unit)
        out.append(_mention(text, kind, _format(kind, number), unit, tokens[i][1], end))
        i = last + 1
    return out


def _decimal_digits(tokens, k: int, language: str, joined) -> list[str]:
    """Digits after "point"/"komma": single digit words, or one word below 100 ("tre komma tjugofem")."""
    digits: list[str] = []
    while k < len(tokens) and joined(k - 1, k):
        values = _word_values(tokens[k][0], language)
        value = _combine(values) if values else None
        if value is None or (value > 9 and digits) or value > 99:
            break
        digits.append(str(value))
        k += 1
        if value > 9:
            break
    return digits


def _one_is_pronoun(tokens, i: int, joined) -> bool:
    """ "one" as a pronoun: a determiner up to two words before ("this one", "the basic one"), or an
    idiom after ("one of", "one moment")."""
    before = []
    k = i
    while k > 0 and len(before) < 2 and joined(k - 1, k):
        k -= 1
        before.append(tokens[k][0])
    after = tokens[i + 1][0] if joined(i, i + 1) else ""
    return any(word in _EN_DETERMINERS for word in before) or after in _EN_ONE_IDIOMS


# --------------------------------------------------------------------------------------------------
# Spoken forms: clock times, dates and phone numbers said in words (and bare hours in a time context)
# --------------------------------------------------------------------------------------------------

_WORDS = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*")
_SPOKEN_TIME_WORDS = frozenset({"noon", "midday", "midnight", "midnatt"})
_TIME_STARTS = _SPOKEN_TIME_WORDS | {"half", "quarter", "halv", "kvart"}
_RANGE_WORDS = frozenset({"to", "till", "-", "–", "—", "and", "och"})


@lru_cache(maxsize=16384)
def _number_word(word: str, language: str) -> bool:
    """A word that says a number (not the Swedish articles "en"/"ett")."""
    return word not in ("en", "ett") and _word_values(word, language) is not None


def _spoken_stages(text: str, language: str) -> frozenset:
    """The spoken-form stages that can find anything in ``text``, from one look at its words (they run on
    every transcript delta: a text without number words, digits or months skips them all)."""
    words = _WORDS.findall(text.casefold())
    numeric = sum(1 for w in words if _number_word(w, language))
    articles = sum(1 for w in words if w in ("en", "ett"))
    digits = any(ch.isdigit() for ch in text)
    stages = set()
    if numeric or digits or not _SPOKEN_TIME_WORDS.isdisjoint(words) or articles and not _CLOCK_WORDS.isdisjoint(words):
        stages.add(_spoken_times)  # "klockan ett", "halv ett"
    if not _MONTH_WORDS.isdisjoint(words) and (numeric or not _ORDINAL_WORDS.isdisjoint(words)):
        stages.add(_spoken_dates)
    if numeric + articles >= 3:
        stages.add(_spoken_phones)  # "ett två tre"
    return frozenset(stages)

_TOKEN = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*|\d+|[^\w\s]")


class _Tok(NamedTuple):
    word: str  # casefolded; punctuation and masked characters are one-character tokens
    start: int
    end: int


def _toks(masked: str) -> list[_Tok]:
    lowered = masked.casefold().replace("’", "'")
    if len(lowered) != len(masked):  # casefold changed a length ("ß" -> "ss"): keep the spans right
        return [_Tok(m.group().casefold().replace("’", "'"), m.start(), m.end()) for m in _TOKEN.finditer(masked)]
    return [_Tok(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(lowered)]


def _gap(masked: str, a: _Tok, b: _Tok) -> str:
    return masked[a.end : b.start]


def _spaced(masked: str, toks: list[_Tok], i: int) -> bool:
    """Token i and token i + 1 are separated by whitespace only."""
    return i + 1 < len(toks) and _gap(masked, toks[i], toks[i + 1]).isspace()


def _int_word(word: str, language: str) -> int | None:
    """The integer one token says: digits, or number words ("tjugofem", "forty-five")."""
    if word.isdigit():
        return int(word) if len(word) <= 4 else None
    values = _word_values(word, language)
    return _combine(values) if values else None


# -- times ------------------------------------------------------------------------------------------

# Words before a bare hour that make it a time of day ("at five", "till fem"); the hour must then be
# followed by a word from _TIME_FOLLOWERS or punctuation, so "at 3 locations" stays a count.
_EN_TIME_CUES = frozenset({"at", "until", "till", "til", "from", "before", "after", "around", "between"})
_SV_TIME_CUES = frozenset({"klockan", "kl", "till", "tills", "från", "efter", "före", "innan", "vid", "mellan"})
_APPROXIMATELY = frozenset({"about", "around", "approximately", "ungefär", "cirka", "runt", "ca"})
_EN_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_SV_DAYS = ("måndag", "tisdag", "onsdag", "torsdag", "fredag", "lördag", "söndag")
_DAY_WORDS = frozenset(
    [d for d in _EN_DAYS] + [d + "s" for d in _EN_DAYS] + list(_SV_DAYS) + [d + "ar" for d in _SV_DAYS]
    + [d + "en" for d in _SV_DAYS] + ["weekdays", "weekday", "weekends", "weekend", "vardagar", "vardag",
                                      "helger", "helgen", "helgdagar", "today", "tomorrow", "idag", "imorgon"]
)
_TIME_CONTEXT = frozenset({"open", "opens", "opening", "closes", "close", "hours", "öppet", "öppnar", "stänger",
                           "öppettider", "stängt"})
_TIME_FOLLOWERS = frozenset({
    "and", "or", "but", "on", "in", "every", "each", "today", "tomorrow", "tonight", "sharp", "o'clock", "oclock",
    "to", "until", "till", "then", "so", "we", "you", "at", "if", "when", "latest", "the",
    "och", "eller", "men", "på", "i", "idag", "imorgon", "ikväll", "varje", "så", "sen", "då", "vi", "ni", "du",
    "senast", "prick", "om", "när", "tills",
}) | _DAY_WORDS
_EN_RELATIVE_MINUTES = frozenset({5, 10, 20, 25})  # "ten to five"; "eight to five" is a range
_DAY_PART = re.compile(
    rf"{_SP}+(?:(in{_SP}+the{_SP}+(?:morning))|(in{_SP}+the{_SP}+(?:afternoon|evening)|at{_SP}+night|tonight)"
    rf"|(på{_SP}+(?:morgonen|förmiddagen))|(på{_SP}+(?:eftermiddagen|kvällen|natten)|i{_SP}*kväll))(?![^\W\d_])",
    re.IGNORECASE,
)
_AMPM_AFTER = re.compile(rf"{_SP}?([ap])\.?{_SP}?m(?![^\W\d_])\.?", re.IGNORECASE)
_TIME_UNITS = frozenset(_UNIT_OF_FORM)


def _hour_of(tok: _Tok, language: str, low: int = 0, high: int = 24) -> int | None:
    if tok.word.isdigit():
        value = int(tok.word) if len(tok.word) <= 2 else None
    else:
        value = _int_word(tok.word, language)
    return value if value is not None and low <= value <= high else None


def _minutes_after(masked: str, toks: list[_Tok], i: int, language: str, low: int = 10) -> tuple[int, int] | None:
    """Minutes said after an hour, starting at token i: "thirty", "forty five", "oh five", "och trettio",
    "och fem", "15"; (minutes, index of the last token) or None."""
    if i >= len(toks):
        return None
    word = toks[i].word
    if language != "en" and word == "och" and _spaced(masked, toks, i):
        return _minutes_after(masked, toks, i + 1, "sv", low=1)
    if language != "sv" and word in ("oh", "o") and _spaced(masked, toks, i) and i + 1 < len(toks):
        digit = _int_word(toks[i + 1].word, "en")
        return (digit, i + 1) if digit is not None and 1 <= digit <= 9 and not toks[i + 1].word.isdigit() else None
    if word.isdigit():
        return (int(word), i) if len(word) == 2 and int(word) < 60 else None
    values = _word_values(word, language)
    if not values:
        return None
    total = _combine(values)
    if total is None or not low <= total <= 59:
        return None
    if 20 <= total and total % 10 == 0 and _spaced(masked, toks, i):
        unit = _word_values(toks[i + 1].word, language)
        if unit and len(unit) == 1 and 1 <= unit[0] <= 9:
            return total + unit[0], i + 1  # "forty five"
    return total, i


def _ampm(masked: str, pos: int) -> tuple[str, int] | None:
    m = _AMPM_AFTER.match(masked, pos)
    return (m[1].lower(), m.end()) if m else None


def _day_part(masked: str, pos: int) -> tuple[str, int] | None:
    m = _DAY_PART.match(masked, pos)
    if m is None:
        return None
    return ("am" if m[1] or m[3] else "pm"), m.end()


def _time_readings(hour: int, minute: int, mode: str) -> tuple[str, tuple[str, ...]]:
    """(value, alternatives) of an hour said as ``mode``: "am", "pm", "24" (as said), "12" (either half
    of the day: value the reading with an hour 1-12, the other the alternative)."""
    if mode == "24" or hour > 12 or hour == 0 and mode == "12":
        return f"{hour % 24:02d}:{minute:02d}", ()
    if mode == "am":
        return f"{hour % 12:02d}:{minute:02d}", ()
    if mode == "pm":
        return f"{hour % 12 + 12:02d}:{minute:02d}", ()
    morning, evening = f"{hour % 12:02d}:{minute:02d}", f"{hour % 12 + 12:02d}:{minute:02d}"
    return (evening, (morning,)) if hour == 12 else (morning, (evening,))


def _followed_well(masked: str, toks: list[_Tok], after: int, end_pos: int) -> bool:
    """What follows a contextual time: nothing, punctuation, or a word that cannot be what it counts."""
    rest = masked[end_pos:]
    if not rest.strip():
        return True
    if after >= len(toks):
        return True
    tok = toks[after]
    if not tok.word[0].isalnum():
        return tok.word not in ("%", "$", "€", "£", ":", _MASK) or tok.word == ":" and not rest.lstrip()[1:2].isdigit()
    if tok.word in _TIME_UNITS:
        return False
    return tok.word in _TIME_FOLLOWERS


def _context_before(toks: list[_Tok], i: int, language: str) -> str:
    """"cue" when a time cue word stands just before token i ("at", "klockan", "från"; "about" may stand
    between), "day" when a day word or an opening-hours word does (":" may stand between), else ""."""
    k = i - 1
    if k >= 0 and toks[k].word in _APPROXIMATELY:
        k -= 1
    while k >= 0 and toks[k].word in (":", ","):
        k -= 1
    if k < 0:
        return ""
    word = toks[k].word
    cues = (_EN_TIME_CUES if language != "sv" else frozenset()) | (_SV_TIME_CUES if language != "en" else frozenset())
    if word in cues and k == i - 1 - (toks[i - 1].word in _APPROXIMATELY):
        return "cue"
    # a day or an opening-hours word up to three words back: "Saturday hours are ten to two"
    for back in range(k, max(-1, k - 3), -1):
        word = toks[back].word
        if not word[0].isalpha() and word not in (":", ","):
            break
        if word in _DAY_WORDS or word in _TIME_CONTEXT or (word.isalpha() and word.rstrip("s") in _DAY_WORDS):
            return "day"
    return ""


def _relative_time(masked: str, toks: list[_Tok], i: int, language: str) -> tuple[int, int, int] | None:
    """A time said relative to an hour ("half past eight", "kvart i tre", "fem över halv sju"):
    (hour 1-12, minute, index of its last token) or None."""
    n = len(toks)

    def hour_at(k: int) -> int | None:
        return _hour_of(toks[k], language, 1, 12) if k < n and _spaced(masked, toks, k - 1) else None

    def back(hour: int) -> int:
        return 12 if hour == 1 else hour - 1

    w = toks[i].word
    nxt = toks[i + 1].word if _spaced(masked, toks, i) else ""
    if language != "sv":
        if w == "half" and nxt == "past" and (h := hour_at(i + 2)):
            return h, 30, i + 2
        if w == "quarter" and nxt in ("past", "after", "to", "before") and (h := hour_at(i + 2)):
            return (h, 15, i + 2) if nxt in ("past", "after") else (back(h), 45, i + 2)
        minutes = _int_word(w, "en") if not w.isdigit() or len(w) <= 2 else None
        if minutes is not None and 1 <= minutes <= 29:
            k = i + 1
            said_minutes = nxt in ("minutes", "minute")
            if said_minutes:
                k += 1
            link = toks[k].word if k < n and _spaced(masked, toks, k - 1) else ""
            before = toks[i - 1].word if i > 0 else ""
            if link in ("past", "after") and (h := hour_at(k + 1)):
                return h, minutes, k + 1
            if link == "to" and (said_minutes or minutes in _EN_RELATIVE_MINUTES) and before not in ("from", "between"):
                if h := hour_at(k + 1):
                    return back(h), 60 - minutes, k + 1
    if language != "en":
        if w == "halv" and (h := hour_at(i + 1)):
            return back(h), 30, i + 1
        if w == "kvart" and nxt in ("över", "i") and (h := hour_at(i + 2)):
            return (h, 15, i + 2) if nxt == "över" else (back(h), 45, i + 2)
        minutes = _int_word(w, "sv") if w not in ("en", "ett") else None
        if minutes is not None and 1 <= minutes <= 29 and nxt in ("över", "i"):
            if i + 2 < n and toks[i + 2].word == "halv" and _spaced(masked, toks, i + 1) and (h := hour_at(i + 3)):
                return back(h), 30 + minutes if nxt == "över" else 30 - minutes, i + 3
            if minutes <= 20 and (h := hour_at(i + 2)):
                return (h, minutes, i + 2) if nxt == "över" else (back(h), 60 - minutes, i + 2)
    return None


def _spoken_times(text: str, masked: str, language: str) -> list[NumberMention]:
    """Times in words ("half past eight", "halv fem", "ten a.m.", "klockan tio", "noon") and bare hours in
    a time context ("at five", "till 17", "Saturday 9 to 13"); module docstring for the rules."""
    toks = _toks(masked)
    out: list[NumberMention] = []
    i = 0
    previous: tuple[int, str, tuple[str, ...]] | None = None  # last time: (token index, mode, readings)
    while i < len(toks):
        word = toks[i].word
        if not (word.isdigit() or word in _TIME_STARTS or _number_word(word, language)
                or word in ("en", "ett") and i > 0 and toks[i - 1].word in ("klockan", "kl")):
            i += 1  # no time starts here (the loop runs on every transcript delta: keep it cheap)
            continue
        found = _time_at(masked, toks, i, language, previous)
        if found is None:
            i += 1
            continue
        first, last, end_pos, hour, minute, mode = found
        if previous is not None and previous[0] == first - 2 and out:
            mode = _range_end(out, text, hour, mode, previous[1])
        value, alternatives = _time_readings(hour, minute, mode)
        out.append(_mention(text, "time", value, None, toks[first].start, end_pos, alternatives))
        previous = (last, mode, (value, *alternatives))
        i = last + 1
        while i < len(toks) and toks[i].start < end_pos:
            i += 1
    return out


def _range_end(out: list[NumberMention], text: str, hour: int, mode: str, start_mode: str) -> str:
    """Settle the half of the day of a range's two ends from each other: "8 to 17" is a 24-hour clock
    (08:00), "9 to 5" ends in the afternoon (09:00-17:00), "5 pm to 9" too; "8 till 11" stays open.
    Returns the end's mode; the start (``out[-1]``) is replaced when it is settled."""
    start = out[-1]
    start_hour, start_minute = int(start.value[:2]), int(start.value[3:])

    def settle_start() -> None:
        out[-1] = _mention(text, "time", f"{start_hour:02d}:{start_minute:02d}", None, *start.span)

    if start_mode == "12" and mode != "12":
        if mode == "24" and hour > 12 or mode == "pm" and hour % 12 > start_hour % 12:
            settle_start()  # the morning reading, which the value is
        return mode
    if start_mode == "12" and mode == "12":
        if hour < start_hour or hour == 12 and start_hour < 12:
            settle_start()
            return "pm" if hour != 12 else "24"
        return mode
    if mode == "12" and (start_hour >= 12 or hour < start_hour):
        return "pm"
    return mode


def _time_at(masked: str, toks: list[_Tok], i: int, language: str,
             previous: tuple[int, str, tuple[str, ...]] | None):
    """(first token, last token, end char, hour, minute, mode) of a time starting at token i, or None."""
    tok = toks[i]
    if not tok.word[0].isalnum():
        return None
    english, swedish = language != "sv", language != "en"
    if english and tok.word in ("noon", "midday"):
        return i, i, tok.end, 12, 0, "24"
    if english and tok.word == "midnight" or swedish and tok.word == "midnatt":
        return i, i, tok.end, 0, 0, "24"
    relative = _relative_time(masked, toks, i, language)
    if relative is not None and relative[2] == i + 2 and toks[i + 1].word == "to" and \
            _context_before(toks, i, language) == "day":
        relative = None  # "Saturday hours are ten to two": a range, not 01:50
    if relative is not None:
        hour, minute, last = relative
        return _finish_time(masked, toks, i, last, hour, minute, "12", checked=True)
    context = _context_before(toks, i, language)
    in_range = (previous is not None and previous[0] == i - 2 and toks[i - 1].word in _RANGE_WORDS
                and _spaced_or_dash(masked, toks, i - 1))
    if tok.word.isdigit():
        glued = i > 0 and toks[i - 1].word in (":", ".", ",") and toks[i - 1].end == tok.start  # "3.5", "1,5"
        if glued or not (context or in_range or _range_before_days(masked, toks, i)):
            return None
        hour = _hour_of(tok, language)
        if hour is None:
            return None
        last, minute = i, 0
    else:
        hour = _hour_of(tok, language, 0, 24 if swedish else 12)
        if hour is None or tok.word in ("en", "ett") and (i == 0 or toks[i - 1].word not in ("klockan", "kl")):
            return None  # the Swedish article: "till en kollega"; "klockan ett" is a time
        explicit = None
        last, minute = i, 0
        found = _minutes_after(masked, toks, i + 1, language) if _spaced(masked, toks, i) else None
        if found is not None and toks[i + 1].word == "och" and (i == 0 or toks[i - 1].word not in ("klockan", "kl")):
            found = None  # "klockan nio och fem" is 09:05; "mellan tio och två" is a range
        if found is not None:
            minute, last = found
        end_pos = toks[last].end
        if english:
            if i + 1 < len(toks) and toks[i + 1].word in ("o'clock", "oclock") and _spaced(masked, toks, i):
                return i, i + 1, toks[i + 1].end, hour, 0, "12"
            marker = _ampm(masked, end_pos)
            if marker is not None and hour <= 12:
                explicit = (marker[0] + "m", marker[1])
        if explicit is not None:
            return i, _last_before(toks, explicit[1]), explicit[1], hour, minute, explicit[0]
        if not (context or in_range):
            return None
        if hour == 24:
            return None
    mode = "24" if hour > 12 or hour == 0 else "12"
    if tok.word.isdigit() and len(tok.word) == 2 and tok.word.startswith("0"):
        mode = "24"
    return _finish_time(masked, toks, i, last, hour, minute, mode, checked=False)


def _range_before_days(masked: str, toks: list[_Tok], i: int) -> bool:
    """Token i starts a range of two hours that days follow: "10 to 14 on Saturdays", "9–17 vardagar"."""
    if i + 3 >= len(toks) or toks[i + 1].word not in ("to", "till", "-", "–", "—") or not toks[i + 2].word.isdigit():
        return False
    if _hour_of(toks[i + 2], "sv") is None or not _spaced_or_dash(masked, toks, i + 1):
        return False
    k = i + 3
    if toks[k].word in ("on", "på") and k + 1 < len(toks):
        k += 1
    return toks[k].word in _DAY_WORDS


def _spaced_or_dash(masked: str, toks: list[_Tok], k: int) -> bool:
    gap_before = _gap(masked, toks[k - 1], toks[k])
    gap_after = _gap(masked, toks[k], toks[k + 1]) if k + 1 < len(toks) else ""
    if toks[k].word in ("-", "–", "—"):
        return len(gap_before) <= 1 and len(gap_after) <= 1
    return gap_before.isspace() and gap_after.isspace()


def _last_before(toks: list[_Tok], end_pos: int) -> int:
    last = 0
    for k, tok in enumerate(toks):
        if tok.start < end_pos:
            last = k
    return last


def _finish_time(masked: str, toks: list[_Tok], first: int, last: int, hour: int, minute: int, mode: str,
                 checked: bool):
    """Apply a part of the day said after the time ("in the morning", "på kvällen"), and for a time read
    from its context check what follows it."""
    end_pos = toks[last].end
    part = _day_part(masked, end_pos) if mode == "12" else None
    if part is not None:
        mode, end_pos = part
        last = _last_before(toks, end_pos)
    elif not checked and not _followed_well(masked, toks, last + 1, end_pos):
        return None
    if minute >= 60:
        return None
    return first, last, end_pos, hour, minute, mode


# -- dates ------------------------------------------------------------------------------------------

_EN_ORDINAL_UNITS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9,
}  # fmt: skip
_EN_ORDINALS = {
    **_EN_ORDINAL_UNITS, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19, "twentieth": 20,
    "thirtieth": 30,
    **{f"twenty-{w}": 20 + v for w, v in _EN_ORDINAL_UNITS.items()},
    **{f"twenty {w}": 20 + v for w, v in _EN_ORDINAL_UNITS.items()},
    "thirty-first": 31, "thirty first": 31,
}  # fmt: skip
_SV_ORDINAL_UNITS = {
    "första": 1, "andra": 2, "tredje": 3, "fjärde": 4, "femte": 5, "sjätte": 6, "sjunde": 7, "åttonde": 8, "nionde": 9,
}  # fmt: skip
_SV_ORDINALS = {
    **_SV_ORDINAL_UNITS, "tionde": 10, "elfte": 11, "tolfte": 12, "trettonde": 13, "fjortonde": 14, "femtonde": 15,
    "sextonde": 16, "sjuttonde": 17, "artonde": 18, "nittonde": 19, "tjugonde": 20, "trettionde": 30,
    **{f"tjugo{w}": 20 + v for w, v in _SV_ORDINAL_UNITS.items()},
    "trettioförsta": 31,
}  # fmt: skip


def _day_number(masked: str, toks: list[_Tok], i: int, language: str) -> tuple[int, int] | None:
    """A day of the month said in words at token i: an ordinal ("twenty-sixth", "tjugosjätte"), in
    Swedish also a cardinal ("tjugosex november"); (day, index of its last token) or None."""
    word = toks[i].word
    if language != "sv":
        if _spaced(masked, toks, i) and f"{word} {toks[i + 1].word}" in _EN_ORDINALS:
            return _EN_ORDINALS[f"{word} {toks[i + 1].word}"], i + 1
        if word in _EN_ORDINALS:
            return _EN_ORDINALS[word], i
    if language != "en":
        if word in _SV_ORDINALS:
            return _SV_ORDINALS[word], i
        if word not in ("en", "ett") and not word.isdigit():
            value = _int_word(word, "sv")
            if value is not None and 1 <= value <= 31:
                return value, i
    return None


def _month_at(text: str, toks: list[_Tok], k: int) -> int | None:
    if k >= len(toks) or toks[k].word not in _MONTHS:
        return None
    return _MONTHS[toks[k].word] if _is_month(text[toks[k].start : toks[k].end]) else None


def _spoken_dates(text: str, masked: str, language: str) -> list[NumberMention]:
    """Dates with the day in words: "the twenty-sixth of November", "November twenty-sixth", "den
    tjugosjätte november", "tjugosex november" (a year in digits may follow)."""
    toks = _toks(masked)
    out: list[NumberMention] = []
    i = 0
    while i < len(toks):
        start = i
        day = month = None
        last = i
        found = _day_number(masked, toks, i, language) if toks[i].word[0].isalpha() else None
        if found is not None:
            day, k = found
            k += 1
            if k < len(toks) and toks[k].word == "of" and _spaced(masked, toks, k - 1):
                k += 1
            if _spaced(masked, toks, k - 1):
                month = _month_at(text, toks, k)
            last = k
        else:
            month = _month_at(text, toks, i)
            if month is not None and _spaced(masked, toks, i):
                k = i + 1
                if k < len(toks) and toks[k].word == "the" and _spaced(masked, toks, k):
                    k += 1
                found = _day_number(masked, toks, k, language)
                if found is not None and not toks[k].word.isdigit():
                    day, last = found
                else:
                    month = None
        if day is None or month is None:
            i += 1
            continue
        end = toks[last].end
        year = None
        m = re.compile(rf",?{_SP}+(\d{{4}})(?!\d)").match(masked, end)
        if m:
            year, end = int(m[1]), m.end()
        value = _date_value(year, month, day)
        if value is not None:
            out.append(_mention(text, "date", value, None, toks[start].start, end))
        i = last + 1
    return out


# -- phone numbers said in words --------------------------------------------------------------------

_PHONE_SEPARATOR = re.compile(rf"{_SP}*[,\-]?{_SP}*\Z")


def _spoken_phones(text: str, masked: str, language: str) -> list[NumberMention]:
    """Phone numbers said as groups of number words: "five five five, zero one zero, four four seven
    seven", "plus fyra sex, sju noll, ett två tre", "noll sju noll, etthundratjugotre, fyrtiofem"."""
    toks = _toks(masked)
    groups: list[tuple[str, int, int]] = []  # (digits, first token, last token)
    i = 0
    english = language != "sv"
    while i < len(toks):
        word = toks[i].word
        values = _word_values(word, language) if word[0].isalpha() else None
        if english and word in ("oh", "o") and groups and (
                groups[-1][2] == i - 1 or groups[-1][2] == i - 2 and toks[i - 1].word == ","):
            groups.append(("0", i, i))
            i += 1
            continue
        if not values or _combine(values) is None or max(values) >= 1000:
            i += 1
            continue
        acc, j = list(values), i + 1
        while j < len(toks) and _gap(masked, toks[j - 1], toks[j]).isspace():
            after = _word_values(toks[j].word, language) if toks[j].word[0].isalpha() else None
            if not after or max(after) >= 1000 or _combine(acc + list(after)) is None:
                break
            acc += after
            j += 1
        number = _combine(acc)
        if number is not None and number < 1000:
            groups.append((("0" if acc == [0] else str(number)), i, j - 1))
        i = j
    out: list[NumberMention] = []
    k = 0
    while k < len(groups):
        run = [groups[k]]
        while k + len(run) < len(groups):
            nxt = groups[k + len(run)]
            if not _PHONE_SEPARATOR.match(_gap(masked, toks[run[-1][2]], toks[nxt[1]])):
                break
            run.append(nxt)
        digits = "".join(g[0] for g in run)
        first = run[0][1]
        plus = first > 0 and toks[first - 1].word == "plus" and _gap(masked, toks[first - 1], toks[first]).isspace()
        if 7 <= len(digits) <= 15 and (len(run) >= 3 or plus and len(run) >= 2):
            start = toks[first - 1].start if plus else toks[first].start
            out.append(_mention(text, "phone", ("+" if plus else "") + digits, None, start, toks[run[-1][2]].end))
        k += len(run)
    return out


_MONTH_WORDS = frozenset(_MONTHS)
_ORDINAL_WORDS = frozenset(w for w in (*_EN_ORDINALS, *_SV_ORDINALS) if " " not in w)
_CLOCK_WORDS = frozenset({"klockan", "kl", "halv", "kvart"})
_SPOKEN_STAGES = frozenset({_spoken_dates, _spoken_times, _spoken_phones})
_DIGIT_STAGES = frozenset({_dates, _times, _phones, _digit_numbers})
_ANY_DIGIT = re.compile(r"\d")  # what their patterns' digits are
