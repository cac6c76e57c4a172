"""Regenerate the labelled redaction corpus, bench/privacy/corpus.jsonl (seeded: the same file every run).

Owns the templates (English and Swedish caller utterances, as speech-to-text writes them) and the number
generators: valid phone numbers (checked with phonenumbers), payment cards and personnummer with their
Luhn digit, IBANs with their mod-97 check digits, e-mail addresses; and look-alikes that must be kept
(a card or personnummer with a wrong check digit, a wrong IBAN, order numbers, prices, times, dates).
The checksums here are written independently of voicecore/privacy/redact.py, so the corpus checks it.

Each line: ``{"id", "language", "text", "spans": [{"start", "end", "kind"}]}``; ``spans`` are what must be
redacted (none on an utterance without personal data). Run:

    .venv/bin/python bench/privacy/make_corpus.py            # writes bench/privacy/corpus.jsonl
    .venv/bin/python bench/privacy/recall.py                 # recall per kind, false redactions
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path
from typing import Callable

import phonenumbers

SEED = 34
CORPUS = Path(__file__).with_name("corpus.jsonl")

DIGIT_WORDS = {
    "en": ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"],
    "sv": ["noll", "ett", "två", "tre", "fyra", "fem", "sex", "sju", "åtta", "nio"],
}


# -- checksums (independent of the redactor) ------------------------------------------------------------------------


def luhn_digit(body: str) -> str:
    """The check digit that makes body + digit pass Luhn."""
    total = 0
    for i, ch in enumerate(reversed(body)):
        n = int(ch)
        if i % 2 == 0:  # these are doubled once the check digit is appended
            n = n * 2 - 9 if n * 2 > 9 else n * 2
        total += n
    return str((10 - total % 10) % 10)


def iban_with_check(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    number = int("".join(str(int(ch, 36)) for ch in rearranged))
    return f"{country}{98 - number % 97:02d}{bban}"


# -- spoken and written forms ---------------------------------------------------------------------------------------


def spaced(digits: str) -> str:
    return " ".join(digits)


def as_words(digits: str, language: str) -> str:
    return " ".join(DIGIT_WORDS[language][int(d)] for d in digits)


def grouped(digits: str, sizes: list[int], sep: str = " ") -> str:
    out, at = [], 0
    for size in sizes:
        out.append(digits[at:at + size])
        at += size
    if at < len(digits):
        out.append(digits[at:])
    return sep.join(part for part in out if part)


# -- generators: each returns (text as said, kind) or (text, "") for a look-alike that must be kept -------------------


def swedish_mobile(rng: random.Random, language: str) -> str:
    while True:
        digits = "07" + rng.choice("02369") + "".join(rng.choice(string.digits) for _ in range(7))
        if phonenumbers.is_valid_number(phonenumbers.parse(digits, "SE")):
            break
    form = rng.randrange(6)
    if form == 0:
        return digits
    if form == 1:
        return f"{digits[:3]}-{digits[3:6]} {digits[6:8]} {digits[8:]}"
    if form == 2:
        return spaced(digits)
    if form == 3:
        return as_words(digits, language)
    if form == 4:
        return f"+46 {digits[1:3]} {digits[3:6]} {digits[6:8]} {digits[8:]}"
    return f"{digits[:3]} {digits[3:6]} {digits[6:]}"


def us_phone(rng: random.Random, language: str) -> str:
    while True:
        digits = str(rng.randint(2, 9)) + f"{rng.randint(0, 99):02d}" + str(rng.randint(2, 9)) + f"{rng.randint(0, 999999):06d}"
        if phonenumbers.is_valid_number(phonenumbers.parse(digits, "US")):
            break
    form = rng.randrange(5)
    if form == 0:
        return f"{digits[:3]}-{digits[3:6]}-{digits[6:]}"
    if form == 1:
        return f"({digits[:3]}) {digits[3:6]}-{digits[6:]}"
    if form == 2:
        return spaced(digits)
    if form == 3:
        return as_words(digits, language)
    return f"+1 {digits[:3]} {digits[3:6]} {digits[6:]}"


def uk_phone(rng: random.Random, language: str) -> str:
    while True:
        digits = "07" + str(rng.choice("12345789")) + "".join(rng.choice(string.digits) for _ in range(8))
        if phonenumbers.is_valid_number(phonenumbers.parse(digits, "GB")):
            break
    return rng.choice([f"{digits[:5]} {digits[5:]}", spaced(digits), f"+44 {digits[1:5]} {digits[5:]}"])


def card_digits(rng: random.Random) -> str:
    prefix, length = rng.choice([("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("34", 15), ("37", 15), ("6011", 16)])
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    return body + luhn_digit(body)


def card_form(rng: random.Random, digits: str, language: str) -> str:
    form = rng.randrange(5)
    if form == 0:
        return digits
    if form == 1:
        return grouped(digits, [4, 4, 4, 4] if len(digits) == 16 else [4, 6, 5])
    if form == 2:
        return grouped(digits, [4, 4, 4, 4], "-") if len(digits) == 16 else grouped(digits, [4, 6, 5], "-")
    if form == 3:
        return spaced(digits)
    return as_words(digits, language)


def personnummer_parts(rng: random.Random, coordination: bool = False, old: bool = False) -> tuple[str, str]:
    """(YYYYMMDD, NNNC) of a valid number."""
    year = rng.randint(1905, 1925) if old else rng.randint(1930, 2012)
    month = rng.randint(1, 12)
    day = rng.randint(1, 28) + (60 if coordination else 0)
    date = f"{year}{month:02d}{day:02d}"
    serial = f"{rng.randint(0, 999):03d}"
    return date, serial + luhn_digit(date[2:] + serial)


def personnummer_form(rng: random.Random, date: str, tail: str, language: str, old: bool) -> str:
    if old:
        return f"{date[2:]}+{tail}"  # a person of 100 or more: the + separator, no century
    form = rng.randrange(6)
    if form == 0:
        return f"{date[2:]}-{tail}"
    if form == 1:
        return f"{date}-{tail}"
    if form == 2:
        return date + tail
    if form == 3:
        return date[2:] + tail
    if form == 4:
        return spaced(date[2:] + tail)
    return as_words(date[2:] + tail, language)


def iban(rng: random.Random) -> str:
    country = rng.choice(["SE", "DE", "GB", "FI", "NO"])
    if country == "SE":
        value = iban_with_check("SE", "".join(rng.choice(string.digits) for _ in range(20)))
    elif country == "DE":
        value = iban_with_check("DE", "".join(rng.choice(string.digits) for _ in range(18)))
    elif country == "GB":
        value = iban_with_check("GB", "".join(rng.choice(string.ascii_uppercase) for _ in range(4))
                                + "".join(rng.choice(string.digits) for _ in range(14)))
    elif country == "FI":
        value = iban_with_check("FI", "".join(rng.choice(string.digits) for _ in range(14)))
    else:
        value = iban_with_check("NO", "".join(rng.choice(string.digits) for _ in range(11)))
    return value if rng.random() < 0.4 else " ".join(value[i:i + 4] for i in range(0, len(value), 4))


FIRST = ["anna", "erik", "maria", "john", "sara", "lars", "emma", "oscar", "karin", "peter"]
LAST = ["svensson", "lindqvist", "smith", "berg", "nilsson", "jones", "holm", "ek"]
DOMAINS = ["example.com", "mail.se", "post.example.org", "foretaget.se", "gmail.com", "outlook.com"]


def email(rng: random.Random) -> str:
    local = rng.choice(FIRST) + rng.choice([".", "_", ""]) + rng.choice(LAST) + rng.choice(["", str(rng.randint(1, 99))])
    return f"{local}@{rng.choice(DOMAINS)}"


# -- templates --------------------------------------------------------------------------------------------------------

TEMPLATES: dict[str, dict[str, list[str]]] = {
    "en": {
        "phone": ["my number is {x}", "you can call me back on {x}", "it's {x}, that's my mobile",
                  "please text {x} when it's ready", "the best number is {x} thanks", "{x}"],
        "card": ["my card number is {x}", "the card is {x}, expiry twelve twenty seven", "use {x} please",
                 "sure, {x}", "it's a visa, {x}"],
        "personnummer": ["my Swedish personal number is {x}", "the personnummer is {x}", "it's {x}",
                         "my ID number is {x} if you need it"],
        "iban": ["my IBAN is {x}", "pay it to {x} please", "the account is {x}"],
        "email": ["my email is {x}", "send it to {x} please", "you can reach me at {x}", "it's {x}"],
        "none": ["how much does the basic plan cost", "what about premium", "can I cancel any time",
                 "what are your opening hours", "I'd like to book a table for {n} on Friday at {h}",
                 "my order number is {o}", "it costs {p} kronor per month right", "the meeting was in {y}",
                 "I called {n} times yesterday", "the reference is {o}", "I live at number {n}",
                 "I was born in {y}", "can you do it at {h} on the {d}th", "okay, okay", "yeah, but on Friday",
                 "mm-hmm", "sorry, who is this", "one moment please", "I have two questions and one complaint",
                 "the invoice says {p} and {q}", "the card ending in {n4}", "{bad}"],
    },
    "sv": {
        "phone": ["mitt nummer är {x}", "du kan ringa mig på {x}", "det är {x}", "skicka ett sms till {x}",
                  "ring {x} efter lunch", "{x}"],
        "card": ["kortnumret är {x}", "mitt kort är {x}", "det är {x}, giltigt till december",
                 "ta det från {x}"],
        "personnummer": ["mitt personnummer är {x}", "personnumret är {x}", "det är {x}", "mitt samordningsnummer är {x}",
                         "{x} heter jag"],
        "iban": ["mitt IBAN är {x}", "betala till {x}", "kontot är {x}"],
        "email": ["min mejl är {x}", "skicka till {x}", "mejla {x} tack", "det är {x}"],
        "none": ["vad kostar basabonnemanget", "hur länge är bindningstiden", "när har ni öppet",
                 "jag vill boka bord för {n} på fredag klockan {h}", "mitt ordernummer är {o}",
                 "det kostar {p} kronor i månaden", "jag föddes {y}", "jag ringde {n} gånger i går",
                 "referensen är {o}", "jag bor på nummer {n}", "ja, men på fredag", "mm", "vem är det här",
                 "ett ögonblick", "jag har två frågor och ett klagomål", "fakturan säger {p} och {q}",
                 "kortet som slutar på {n4}", "{bad}"],
    },
}


def bad_lookalike(rng: random.Random, language: str) -> str:
    """A number that fails its check: must be kept."""
    kind = rng.randrange(3)
    if kind == 0:
        digits = card_digits(rng)
        wrong = digits[:-1] + str((int(digits[-1]) + rng.randint(1, 9)) % 10)
        return card_form(rng, wrong, language)
    if kind == 1:
        date, tail = personnummer_parts(rng)
        wrong = tail[:3] + str((int(tail[3]) + rng.randint(1, 9)) % 10)
        return f"{date[2:]}-{wrong}"
    value = iban(rng).replace(" ", "")
    wrong = value[:-1] + str((int(value[-1]) + rng.randint(1, 9)) % 10)
    return wrong


def none_values(rng: random.Random, language: str) -> dict[str, str]:
    return {"n": str(rng.randint(1, 12)), "h": f"{rng.randint(8, 20)}:{rng.choice(['00', '15', '30', '45'])}",
            "o": str(rng.randint(100000, 99999999)), "p": str(rng.choice([99, 149, 199, 349, 1299, 2500])),
            "q": str(rng.randint(10, 99999)), "y": str(rng.randint(1950, 2025)), "d": str(rng.randint(1, 28)),
            "n4": f"{rng.randint(0, 9999):04d}", "bad": bad_lookalike(rng, language)}


def value_for(kind: str, rng: random.Random, language: str) -> str:
    if kind == "phone":
        if language == "sv":
            return swedish_mobile(rng, language)
        return rng.choice([us_phone, uk_phone, swedish_mobile])(rng, language)
    if kind == "card":
        return card_form(rng, card_digits(rng), language)
    if kind == "personnummer":
        coordination, old = rng.random() < 0.15, rng.random() < 0.1
        date, tail = personnummer_parts(rng, coordination, old and not coordination)
        return personnummer_form(rng, date, tail, language, old and not coordination)
    if kind == "iban":
        return iban(rng)
    return email(rng)


def utterance(rng: random.Random, language: str, kind: str) -> tuple[str, list[dict]]:
    template = rng.choice(TEMPLATES[language][kind])
    if kind == "none":
        return template.format(**none_values(rng, language)), []
    value = value_for(kind, rng, language)
    start = template.index("{x}")
    text = template.replace("{x}", value)
    return text, [{"start": start, "end": start + len(value), "kind": kind}]


def two_kinds(rng: random.Random, language: str) -> tuple[str, list[dict]]:
    """One utterance with two things to redact, as callers give a number and then an address."""
    first, second = rng.sample(["phone", "card", "personnummer", "email"], 2)
    a, b = value_for(first, rng, language), value_for(second, rng, language)
    joiner = " and " if language == "en" else " och "
    text = a + joiner + b
    return text, [{"start": 0, "end": len(a), "kind": first},
                  {"start": len(a) + len(joiner), "end": len(text), "kind": second}]


def build(count_per_language: int = 200, seed: int = SEED) -> list[dict]:
    rng = random.Random(seed)
    kinds = ["phone", "card", "personnummer", "iban", "email"]
    rows = []
    for language in ("en", "sv"):
        for i in range(count_per_language):
            maker: Callable[[], tuple[str, list[dict]]]
            if i % 10 in (0, 1, 2, 3):  # 40 % without personal data
                text, spans = utterance(rng, language, "none")
            elif i % 10 == 4:
                text, spans = two_kinds(rng, language)
            else:
                text, spans = utterance(rng, language, kinds[i % len(kinds)])
            rows.append({"id": f"{language}-{i:03d}", "language": language, "text": text, "spans": spans})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS)
    parser.add_argument("--per-language", type=int, default=200)
    args = parser.parse_args(argv)
    rows = build(args.per_language)
    with args.out.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} utterances, {sum(1 for r in rows if r['spans'])} with personal data -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
