"""A function's arguments said to a caller: dates, clock times, money and phone numbers as a person says them.

A confirmation prompt is read out before an action runs, so the caller can catch a wrong argument:
"Shall I book a cleaning on 2026-11-26 at 10:00?" is read as digits and ISO dates; "Shall I book a
cleaning on Thursday the 26th of November at ten a.m.?" is what a receptionist says. This module owns
that rendering, in English and Swedish, for an argument whose JSON Schema says what it is:

- ``"format": "date"`` ("2026-11-26"): the weekday, the day and the month ("Thursday the 26th of
  November", "torsdag den 26 november"). The year is not said; the weekday makes a wrong year audible.
- ``"format": "time"`` ("10:00", "14:30:00"): "ten a.m.", "two thirty p.m.", "noon"; "klockan tio",
  "klockan fjorton och trettio", "midnatt" (a 24-hour clock in Swedish, as Swedes book).
- ``"format": "date-time"`` ("2026-11-26T10:00"): the date, then "at" / "klockan" and the time.
- ``"x-kind": "money"`` (a number, or a string with its currency: "349 kr", "USD 5.99"), the currency from
  ``"x-currency"`` (SEK, USD, EUR, GBP) when the value has none: "349 kronor", "5 dollars and 99 cents",
  "99 kronor och 50 öre".
- ``"x-kind": "phone"``: the digits one by one, in the groups they were written in ("+46 70 123 45 67":
  "plus four six, seven zero, one two three, four five, six seven"; Swedish "plus fyra sex, sju noll, ett
  två tre, fyra fem, sex sju").
``"x-kind"`` may also name date, time or date-time for a schema whose ``format`` cannot (a ``pattern``).

Every spoken form is read back with the gate's own number reader (voicecore.validate.numbers) before it
is used: it must state exactly the argument's value (the same day and month, clock time, amount and
currency, digits). A value that does not read back, or is not what its schema says (a date that is no
date), is said as given. Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from voicecore.validate.numbers import extract_numbers

SPOKEN_KINDS = ("date", "time", "date-time", "money", "phone")
KIND_KEY = "x-kind"
CURRENCY_KEY = "x-currency"
CURRENCIES = {"SEK": "kr", "KR": "kr", "USD": "usd", "EUR": "eur", "GBP": "gbp"}
LANGUAGES = ("en", "sv")

_EN_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
            "sixteen seventeen eighteen nineteen").split()
_EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SV_ONES = ("noll ett två tre fyra fem sex sju åtta nio tio elva tolv tretton fjorton femton sexton sjutton "
            "arton nitton").split()
_SV_TENS = "_ _ tjugo trettio fyrtio femtio sextio sjuttio åttio nittio".split()
_EN_DIGITS = _EN_ONES[:10]
_SV_DIGITS = _SV_ONES[:10]
_EN_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_SV_WEEKDAYS = ("måndag", "tisdag", "onsdag", "torsdag", "fredag", "lördag", "söndag")
_EN_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
              "November", "December")
_SV_MONTHS = ("januari", "februari", "mars", "april", "maj", "juni", "juli", "augusti", "september", "oktober",
              "november", "december")
# currency -> (singular, plural, minor unit singular, minor unit plural)
_EN_CURRENCY = {"kr": ("krona", "kronor", "öre", "öre"), "usd": ("dollar", "dollars", "cent", "cents"),
                "eur": ("euro", "euros", "cent", "cents"), "gbp": ("pound", "pounds", "penny", "pence")}
_SV_CURRENCY = {"kr": ("krona", "kronor", "öre", "öre"), "usd": ("dollar", "dollar", "cent", "cent"),
                "eur": ("euro", "euro", "cent", "cent"), "gbp": ("pund", "pund", "penny", "pence")}
_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d)(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:?\d{2})?$")
_MONEY_TEXT = re.compile(r"^\s*(?:(?P<pre>[A-Za-z]{3}|\$|€|£)\s*)?(?P<amount>\d+(?:[.,]\d{1,2})?)\s*"
                         r"(?P<post>[A-Za-z]{2,3}|kronor|:-)?\s*$")
_SYMBOLS = {"$": "usd", "€": "eur", "£": "gbp", "kr": "kr", "sek": "kr", "usd": "usd", "eur": "eur", "gbp": "gbp",
            "kronor": "kr", ":-": "kr"}


def spoken_kind(schema: Any) -> str | None:
    """What an argument's schema says it is, for speech: one of SPOKEN_KINDS, or None (said as given)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get(KIND_KEY)
    if kind in SPOKEN_KINDS:
        return kind
    fmt = schema.get("format")
    return fmt if fmt in ("date", "time", "date-time") else None


def speak(value: Any, schema: Any, language: str) -> str | None:
    """``value`` as it is said in ``language``, or None when it is said as given (no kind, an unsupported
    language, a value that is not what its schema says, or a spoken form that would not read back)."""
    kind = spoken_kind(schema)
    if kind is None or language not in LANGUAGES:
        return None
    try:
        if kind == "date":
            date = dt.date.fromisoformat(str(value))
            return _checked(_date(date, language), language, [("date", f"--{date.month:02d}-{date.day:02d}")])
        if kind == "time":
            hour, minute = _parse_time(str(value))
            return _checked(_time(hour, minute, language), language, [("time", f"{hour:02d}:{minute:02d}")])
        if kind == "date-time":
            moment = dt.datetime.fromisoformat(str(value))
            text = f"{_date(moment.date(), language)} {'at' if language == 'en' else 'klockan'} " \
                   f"{_time(moment.hour, moment.minute, language, said_klockan=True)}"
            return _checked(text, language, [("date", f"--{moment.month:02d}-{moment.day:02d}"),
                                             ("time", f"{moment.hour:02d}:{moment.minute:02d}")])
        if kind == "money":
            amount, currency = _money(value, schema)
            return _checked(_amount(amount, currency, language), language,
                            [("amount", _plain(amount), currency)])
        if kind == "phone":
            digits = str(value)
            spoken, canonical = _phone(digits, language)
            return _checked(spoken, language, [("phone", canonical)])
    except (ValueError, TypeError, InvalidOperation):
        return None
    return None


# -- numbers in words -----------------------------------------------------------------------------------


def number_words(n: int, language: str) -> str:
    """A whole number below a million in words: "three hundred and forty-nine", "trehundrafyrtionio"."""
    if n < 0 or n >= 1_000_000:
        raise ValueError(f"{n} is out of range")
    return _en_words(n) if language == "en" else _sv_words(n)


def _en_words(n: int) -> str:
    if n < 20:
        return _EN_ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _EN_TENS[tens] + (f"-{_EN_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_EN_ONES[hundreds]} hundred" + (f" and {_en_words(rest)}" if rest else "")
    thousands, rest = divmod(n, 1000)
    return f"{_en_words(thousands)} thousand" + ((" and " if rest < 100 else " ") + _en_words(rest) if rest else "")


def _sv_words(n: int) -> str:
    if n < 20:
        return _SV_ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _SV_TENS[tens] + (_SV_ONES[ones] if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return ("ett" if hundreds == 1 else _SV_ONES[hundreds]) + "hundra" + (_sv_words(rest) if rest else "")
    thousands, rest = divmod(n, 1000)
    return ("ettusen" if thousands == 1 else _sv_words(thousands) + "tusen") + (_sv_words(rest) if rest else "")


# -- dates and times ------------------------------------------------------------------------------------


def _ordinal_suffix(day: int) -> str:
    if 11 <= day % 100 <= 13:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _date(date: dt.date, language: str) -> str:
    if language == "en":
        return f"{_EN_WEEKDAYS[date.weekday()]} the {date.day}{_ordinal_suffix(date.day)} of {_EN_MONTHS[date.month - 1]}"
    return f"{_SV_WEEKDAYS[date.weekday()]} den {date.day} {_SV_MONTHS[date.month - 1]}"


def _parse_time(text: str) -> tuple[int, int]:
    m = _TIME.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a time")
    return int(m[1]), int(m[2])


def _time(hour: int, minute: int, language: str, said_klockan: bool = False) -> str:
    if language == "en":
        if (hour, minute) == (12, 0):
            return "noon"
        if (hour, minute) == (0, 0):
            return "midnight"
        twelve = hour % 12 or 12
        said = _en_words(twelve)
        if minute:
            said += " " + (f"oh {_en_words(minute)}" if minute < 10 else _en_words(minute))
        return f"{said} {'a.m.' if hour < 12 else 'p.m.'}"
    if (hour, minute) == (0, 0):
        return "midnatt"
    said = _sv_words(hour)
    if minute:
        said += f" och {_sv_words(minute)}"
    return said if said_klockan else f"klockan {said}"


# -- money ----------------------------------------------------------------------------------------------


def _money(value: Any, schema: dict[str, Any]) -> tuple[Decimal, str]:
    declared = schema.get(CURRENCY_KEY)
    currency = CURRENCIES.get(str(declared).upper()) if declared else None
    if isinstance(value, bool):
        raise ValueError("a boolean is no amount")
    if isinstance(value, (int, float)):
        amount = Decimal(str(value))
    else:
        m = _MONEY_TEXT.match(str(value))
        if m is None:
            raise ValueError(f"{value!r} is not an amount")
        amount = Decimal(m["amount"].replace(",", "."))
        written = (m["pre"] or m["post"] or "").lower()
        if written:
            if written not in _SYMBOLS:
                raise ValueError(f"unknown currency {written!r}")
            currency = _SYMBOLS[written]
    if currency is None:
        raise ValueError("no currency")
    if amount < 0 or amount != amount.quantize(Decimal("0.01")) or amount >= 1_000_000:
        raise ValueError("not an amount to say")
    return amount, currency


def _plain(amount: Decimal) -> str:
    return str(int(amount)) if amount == amount.to_integral_value() else format(amount.normalize(), "f")


def _amount(amount: Decimal, currency: str, language: str) -> str:
    whole = int(amount)
    minor = int((amount - whole) * 100)
    names = (_EN_CURRENCY if language == "en" else _SV_CURRENCY)[currency]
    said = f"{whole} {names[0] if whole == 1 else names[1]}"
    if minor:
        said += f" {'and' if language == 'en' else 'och'} {minor} {names[2] if minor == 1 else names[3]}"
    return said


# -- phone numbers --------------------------------------------------------------------------------------


def _phone(text: str, language: str) -> tuple[str, str]:
    """(spoken, canonical value as numbers.py reads the written number)."""
    written = extract_numbers(text, "auto")
    if len(written) != 1 or written[0].kind != "phone":
        raise ValueError(f"{text!r} is not a phone number")
    canonical = written[0].value
    groups = re.findall(r"\d+", text.replace("(0)", ""))
    if len(groups) == 1:
        digits = groups[0]
        groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
        if len(groups) > 1 and len(groups[-1]) == 1:
            groups[-2:] = [groups[-2] + groups[-1]]
    names = _EN_DIGITS if language == "en" else _SV_DIGITS
    spoken = ", ".join(" ".join(names[int(d)] for d in group) for group in groups)
    return (("plus " if canonical.startswith("+") else "") + spoken), canonical


# -- read back ------------------------------------------------------------------------------------------


def _checked(spoken: str, language: str, expected: list[tuple[str, ...]]) -> str | None:
    """``spoken`` when the gate's reader finds exactly the expected numbers in it: (kind, value[, unit])."""
    found = []
    for mention in extract_numbers(spoken, language):  # type: ignore[arg-type]
        if mention.kind == "amount":
            found.append(("amount", mention.value, mention.unit))
        else:
            found.append((mention.kind, mention.value))
    return spoken if found == expected else None
