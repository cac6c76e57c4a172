"""Number extraction and normalization (voicecore/validate/numbers.py), table-driven.

Each row: text, language, and the expected mentions as (kind, value, unit) in text order. The rules
behind the ambiguous rows are in the module docstring; the row's comment names the rule it pins.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from voicecore.validate.numbers import NumberMention, extract_numbers, phone_variants

I, D, P, A, O = "integer", "decimal", "percent", "amount", "ordinal"
PHONE, DATE, TIME = "phone", "date", "time"

CASES = [
    # --- integers and decimals
    ("Basic costs 99 a month", "en", [(I, "99", None)]),
    ("We have 200 stores and 1000 staff", "en", [(I, "200", None), (I, "1000", None)]),
    ("Leading zero 08", "sv", [(I, "8", None)]),
    ("Pi is 3.14", "en", [(D, "3.14", None)]),
    ("3,5 is a decimal", "sv", [(D, "3.5", None)]),
    ("3,5 in English too", "en", [(D, "3.5", None)]),  # a comma not followed by exactly 3 digits
    ("12,50", "sv", [(D, "12.5", None)]),  # trailing zero dropped
    ("12.0", "en", [(I, "12", None)]),  # a decimal equal to an integer is one
    ("1,000 users", "en", [(I, "1000", None)]),  # comma + exactly 3 digits = thousands in English
    ("1,000", "sv", [(I, "1", None)]),  # a comma is always a decimal in Swedish: 1.000
    ("1,000,000", "sv", [(I, "1000000", None)]),  # several commas group in every language
    ("1,000.50", "en", [(D, "1000.5", None)]),
    ("1.000,50", "sv", [(D, "1000.5", None)]),
    ("1.000.000", "sv", [(I, "1000000", None)]),
    ("0,125", "en", [(D, "0.125", None)]),  # "0," is never a thousands group
    # --- thousands with spaces (plain, no-break, narrow no-break, thin)
    ("10 000 customers", "sv", [(I, "10000", None)]),
    ("10\u00a0000", "sv", [(I, "10000", None)]),
    ("10\u202f000", "sv", [(I, "10000", None)]),
    ("1\u2009299 kr", "sv", [(A, "1299", "kr")]),
    ("1 000 000", "sv", [(I, "1000000", None)]),
    ("10 000,50 kr", "sv", [(A, "10000.5", "kr")]),
    # --- percentages
    ("12%", "en", [(P, "12%", "%")]),
    ("12 %", "sv", [(P, "12%", "%")]),
    ("12\u00a0%", "sv", [(P, "12%", "%")]),
    ("12 percent", "en", [(P, "12%", "%")]),
    ("12 per cent", "en", [(P, "12%", "%")]),
    ("12 procent", "sv", [(P, "12%", "%")]),
    ("2,5 %", "sv", [(P, "2.5%", "%")]),
    # --- amounts with units, before and after
    ("399 kr", "sv", [(A, "399", "kr")]),
    ("399kr", "sv", [(A, "399", "kr")]),
    ("99 kronor", "sv", [(A, "99", "kr")]),
    ("99:-", "sv", [(A, "99", "kr")]),
    ("99 SEK", "en", [(A, "99", "kr")]),  # SEK and kr are one currency
    ("SEK 99", "en", [(A, "99", "kr")]),
    ("$5", "en", [(A, "5", "usd")]),
    ("$5.99 a month", "en", [(A, "5.99", "usd")]),
    ("5 dollars", "en", [(A, "5", "usd")]),
    ("€10", "en", [(A, "10", "eur")]),
    ("1 TB", "en", [(A, "1", "tb")]),
    ("10GB of data", "en", [(A, "10", "gb")]),
    ("100 Mbit/s", "sv", [(A, "100", "mbit")]),
    ("3 månader", "sv", [(A, "3", "month")]),
    ("24 months", "en", [(A, "24", "month")]),
    ("Premium 349 kr/månad", "sv", [(A, "349", "kr")]),
    ("3 thousand", "en", [(I, "3000", None)]),
    ("1,5 miljoner kronor", "sv", [(A, "1500000", "kr")]),
    # --- phone numbers
    ("+46 70-123 45 67", "sv", [(PHONE, "+46701234567", None)]),
    ("070-123 45 67", "sv", [(PHONE, "0701234567", None)]),
    ("070 123 45 67", "sv", [(PHONE, "0701234567", None)]),
    ("0701234567", "sv", [(PHONE, "0701234567", None)]),
    ("+46 8 123 45 67", "sv", [(PHONE, "+4681234567", None)]),
    ("+46-8-123-45-67", "sv", [(PHONE, "+4681234567", None)]),  # hyphens between the groups
    ("+46 (0)70 123 45 67", "sv", [(PHONE, "+46701234567", None)]),  # the trunk "(0)" is dropped
    ("(555) 123-4567", "en", [(PHONE, "5551234567", None)]),
    ("+1 555 123 4567", "en", [(PHONE, "+15551234567", None)]),
    ("555-123-4567", "en", [(PHONE, "5551234567", None)]),
    ("555.123.4567", "en", [(PHONE, "5551234567", None)]),
    ("2020-2024", "en", [(I, "2020", None), (I, "2024", None)]),  # two dash groups = a range
    ("12 345 678", "sv", [(I, "12345678", None)]),  # groups of three = thousands, not a phone
    # --- dates
    ("2025-03-01", "en", [(DATE, "2025-03-01", None)]),
    ("2025/12/31", "sv", [(DATE, "2025-12-31", None)]),  # year first with slashes: Y/M/D
    ("3/1/2025", "en", [(DATE, "2025-03-01", None)]),  # en: M/D/Y
    ("3/1/2025", "sv", [(DATE, "2025-01-03", None)]),  # sv: D/M/Y
    ("01/03/2025", "sv", [(DATE, "2025-03-01", None)]),
    ("13/1/2025", "en", [(DATE, "2025-01-13", None)]),  # M/D impossible: D/M
    ("1.3.2025", "en", [(DATE, "2025-03-01", None)]),  # dotted is always D.M.Y
    ("3/1/25", "en", [(DATE, "2025-03-01", None)]),
    ("1 mars 2025", "sv", [(DATE, "2025-03-01", None)]),
    ("den 1:a mars", "sv", [(DATE, "--03-01", None)]),  # no year: ISO 8601 --MM-DD
    ("March 1st, 2025", "en", [(DATE, "2025-03-01", None)]),
    ("the 1st of March", "en", [(DATE, "--03-01", None)]),
    ("in March 2025", "en", [(DATE, "2025-03", None)]),
    ("2025-02-30", "en", [(PHONE, "20250230", None)]),  # no such day: not a date (digits remain)
    ("you may 2 weeks", "en", [(A, "2", "week")]),  # lowercase "may" is a verb
    # --- clock times
    ("08:00–17:00", "sv", [(TIME, "08:00", None), (TIME, "17:00", None)]),
    ("08.00–17.00", "sv", [(TIME, "08:00", None), (TIME, "17:00", None)]),
    ("kl. 8", "sv", [(TIME, "08:00", None)]),
    ("klockan 17.30", "sv", [(TIME, "17:30", None)]),
    ("8 am to 5 pm", "en", [(TIME, "08:00", None), (TIME, "17:00", None)]),
    ("5:30 p.m.", "en", [(TIME, "17:30", None)]),
    ("12 am", "en", [(TIME, "00:00", None)]),
    ("8.30 is a decimal", "sv", [(D, "8.3", None)]),  # a dotted time only in a range or after kl
    # --- ordinals and products
    ("the 3rd floor", "en", [(O, "3", None)]),
    ("den 3:e", "sv", [(O, "3", None)]),
    ("our 5G network in 3D", "en", []),  # digits glued to letters name a product
    # --- English words
    ("ninety-nine", "en", [(I, "99", None)]),
    ("one hundred and twenty", "en", [(I, "120", None)]),
    ("three thousand four hundred", "en", [(I, "3400", None)]),
    ("twenty one", "en", [(I, "21", None)]),
    ("a hundred", "en", [(I, "100", None)]),
    ("zero", "en", [(I, "0", None)]),
    ("one", "en", [(I, "1", None)]),
    ("two million three hundred thousand", "en", [(I, "2300000", None)]),
    ("nineteen hundred", "en", [(I, "1900", None)]),
    ("one two three", "en", [(I, "1", None), (I, "2", None), (I, "3", None)]),  # no valid combination
    ("twenty twenty-five", "en", [(I, "20", None), (I, "25", None)]),  # year-style reading unsupported
    ("three point five", "en", [(D, "3.5", None)]),
    ("ninety-nine kronor a month", "en", [(A, "99", "kr")]),
    ("twelve percent", "en", [(P, "12%", "%")]),
    ("five dollars", "en", [(A, "5", "usd")]),
    ("ten gigabytes", "en", [(A, "10", "gb")]),
    ("Twenty-One", "en", [(I, "21", None)]),  # case-insensitive
    # --- English negatives
    ("often", "en", []),
    ("tone", "en", []),
    ("someone will call", "en", []),
    ("no one", "en", []),
    ("the basic one", "en", []),  # a determiner up to two words before "one"
    ("which one do you want", "en", []),
    ("one of our agents", "en", []),
    ("one moment please", "en", []),
    ("one more thing", "en", []),
    ("a one-time fee", "en", []),  # hyphenated with a non-number part
    ("a month", "en", []),  # "a" is 1 only before a scale word
    ("seventh heaven", "en", []),  # word ordinals are not numbers
    # --- Swedish words and compounds
    ("nittionio", "sv", [(I, "99", None)]),
    ("tjugofem", "sv", [(I, "25", None)]),
    ("hundratjugo", "sv", [(I, "120", None)]),
    ("etthundra", "sv", [(I, "100", None)]),
    ("ettusen", "sv", [(I, "1000", None)]),
    ("tvåtusen", "sv", [(I, "2000", None)]),
    ("tvåtusentrehundrafyrtiofem", "sv", [(I, "2345", None)]),
    ("tre", "sv", [(I, "3", None)]),
    ("elva", "sv", [(I, "11", None)]),
    ("sjutton", "sv", [(I, "17", None)]),
    ("tretton", "sv", [(I, "13", None)]),  # tretton is 13 ...
    ("trettio", "sv", [(I, "30", None)]),  # ... trettio is 30
    ("trettiotre", "sv", [(I, "33", None)]),
    ("tjugoett", "sv", [(I, "21", None)]),
    ("femtioen", "sv", [(I, "51", None)]),
    ("tjugofemhundra", "sv", [(I, "2500", None)]),
    ("två tusen", "sv", [(I, "2000", None)]),  # written apart
    ("ett hundra", "sv", [(I, "100", None)]),  # the article before hundra counts
    ("en miljon", "sv", [(I, "1000000", None)]),
    ("en krona", "sv", [(A, "1", "kr")]),  # the article before a currency counts
    ("nittionio kronor", "sv", [(A, "99", "kr")]),
    ("tio procent", "sv", [(P, "10%", "%")]),
    ("tre komma fem", "sv", [(D, "3.5", None)]),
    ("fyrtiotvå", "sv", [(I, "42", None)]),
    ("förti", "sv", [(I, "40", None)]),  # colloquial tens, as ASR writes them
    # --- Swedish negatives
    ("en bok och ett hus", "sv", []),  # articles, not 1
    ("en månad", "sv", []),  # a duration is not a unit that makes "en" count
    ("tiotal", "sv", []),
    ("sexig", "sv", []),
    ("tusentals", "sv", []),
    ("femte", "sv", []),
    ("entre", "sv", []),  # en + tre is no well-ordered number
    ("tretton trettio", "sv", [(I, "13", None), (I, "30", None)]),
    # --- languages apart and together
    ("nittionio", "en", []),  # Swedish words only in sv/auto
    ("ninety-nine", "sv", []),
    ("ninety-nine och nittionio", "auto", [(I, "99", None), (I, "99", None)]),
    # --- mixed sentences
    (
        "Basic costs 99 kr per month and includes 10 GB; call 070-123 45 67 before 2025-03-01.",
        "en",
        [(A, "99", "kr"), (A, "10", "gb"), (PHONE, "0701234567", None), (DATE, "2025-03-01", None)],
    ),
    (
        "Premium kostar trehundrafyrtionio kronor i månaden och ger en terabyte",
        "sv",
        [(A, "349", "kr"), (A, "1", "tb")],
    ),
    ("", "en", []),
]


@pytest.mark.parametrize(("text", "language", "expected"), CASES, ids=[f"{c[1]}:{c[0][:40]}" for c in CASES])
def test_extract(text, language, expected):
    mentions = extract_numbers(text, language)
    assert [(m.kind, m.value, m.unit) for m in mentions] == expected
    for m in mentions:
        assert m.raw == text[m.span[0] : m.span[1]]


AMBIGUOUS = [
    ("1,000", "auto", "1000", ("1",)),  # auto keeps the decimal reading
    ("1,000", "en", "1000", ()),
    ("3/1/2025", "auto", "2025-03-01", ("2025-01-03",)),  # auto keeps both date readings
    ("3/3/2025", "auto", "2025-03-03", ()),  # both readings agree
    ("13/1/2025", "auto", "2025-01-13", ()),  # only one reading is a date
]


@pytest.mark.parametrize(("text", "language", "value", "alternatives"), AMBIGUOUS)
def test_ambiguous_readings(text, language, value, alternatives):
    (mention,) = extract_numbers(text, language)
    assert (mention.value, mention.alternatives) == (value, alternatives)
    assert mention.readings == (value, *alternatives)


def test_spans_and_raw_in_a_sentence():
    text = "Ring 070-123 45 67, det kostar nittionio kronor."
    phone, amount = extract_numbers(text, "sv")
    assert phone.raw == "070-123 45 67" and phone.span == (5, 18)
    assert amount.raw == "nittionio kronor" and text[amount.span[0] : amount.span[1]] == amount.raw
    assert amount.magnitude == "99"


def test_percent_magnitude():
    (mention,) = extract_numbers("20%", "en")
    assert (mention.value, mention.magnitude, mention.unit) == ("20%", "20", "%")


def test_mentions_are_frozen():
    (mention,) = extract_numbers("99", "en")
    assert isinstance(mention, NumberMention)
    with pytest.raises(AttributeError):
        mention.value = "1"  # type: ignore[misc]


def test_unknown_language_is_our_misuse():
    with pytest.raises(ValueError):
        extract_numbers("99", "de")  # type: ignore[arg-type]


PHONES = [
    ("+46701234567", "46", ("+46701234567", "0701234567")),
    ("+4681234567", "46", ("+4681234567", "081234567")),
    ("+44701234567", "46", ("+44701234567",)),  # not a home number
    ("+44701234567", "44", ("+44701234567", "0701234567")),
    ("+4791234567", "47", ("+4791234567", "91234567")),  # no trunk 0 in Norway
    ("+15551234567", "46", ("+15551234567", "5551234567", "15551234567")),
    ("0701234567", "46", ("0701234567",)),
    ("15551234567", "46", ("15551234567", "5551234567")),
]


@pytest.mark.parametrize(("value", "home", "variants"), PHONES)
def test_phone_variants(value, home, variants):
    assert phone_variants(value, home) == variants


@given(
    st.lists(
        st.sampled_from(list("0123456789 ,.-+()/:%$€kKrRGBtTenoå\u00a0amp") + ["one ", "tio", "hundra ", "kl "]),
        max_size=40,
    ).map("".join)
)
@example("0$0")  # a suffix unit and a prefix currency once claimed the same "$"
def test_any_text_gives_ordered_disjoint_mentions(text):
    """Odd input never raises; mentions are in order, disjoint, and their raw text is the span."""
    for language in ("en", "sv", "auto"):
        mentions = extract_numbers(text, language)
        end = 0
        for m in mentions:
            assert m.span[0] >= end and m.span[1] > m.span[0]
            assert m.raw == text[m.span[0] : m.span[1]]
            end = m.span[1]



SPOKEN = [
    # text, language, expected (kind, value, alternatives) in text order; the rules are in the module docstring
    # --- clock times in words: the half of the day said, else both readings
    ("half past eight", "en", [(TIME, "08:30", ("20:30",))]),
    ("quarter to three", "en", [(TIME, "02:45", ("14:45",))]),
    ("quarter past three", "en", [(TIME, "03:15", ("15:15",))]),
    ("ten past five", "en", [(TIME, "05:10", ("17:10",))]),
    ("twenty to six", "en", [(TIME, "05:40", ("17:40",))]),
    ("five o'clock", "en", [(TIME, "05:00", ("17:00",))]),
    ("ten a.m.", "en", [(TIME, "10:00", ())]),
    ("two thirty p.m.", "en", [(TIME, "14:30", ())]),
    ("nine oh five a.m.", "en", [(TIME, "09:05", ())]),
    ("at eight thirty in the evening", "en", [(TIME, "20:30", ())]),
    ("from 8 in the morning", "en", [(TIME, "08:00", ())]),
    ("noon", "en", [(TIME, "12:00", ())]),
    ("midnight", "en", [(TIME, "00:00", ())]),
    ("halv fem", "sv", [(TIME, "04:30", ("16:30",))]),
    ("halv ett", "sv", [(TIME, "12:30", ("00:30",))]),
    ("kvart i tre", "sv", [(TIME, "02:45", ("14:45",))]),
    ("kvart över tre", "sv", [(TIME, "03:15", ("15:15",))]),
    ("fem i halv åtta", "sv", [(TIME, "07:25", ("19:25",))]),
    ("fem över halv åtta", "sv", [(TIME, "07:35", ("19:35",))]),
    ("tio i fem", "sv", [(TIME, "04:50", ("16:50",))]),
    ("klockan tio", "sv", [(TIME, "10:00", ("22:00",))]),
    ("klockan ett", "sv", [(TIME, "01:00", ("13:00",))]),
    ("klockan fjorton och trettio", "sv", [(TIME, "14:30", ())]),
    ("klockan nio och fem", "sv", [(TIME, "09:05", ("21:05",))]),
    ("klockan tre på eftermiddagen", "sv", [(TIME, "15:00", ())]),
    ("midnatt", "sv", [(TIME, "00:00", ())]),
    # --- a bare hour in a time context
    ("We close at five.", "en", [(TIME, "05:00", ("17:00",))]),
    ("Vi stänger klockan fem", "sv", [(TIME, "05:00", ("17:00",))]),
    ("open until 5 on weekdays", "en", [(TIME, "05:00", ("17:00",))]),
    ("Vi har öppet till 17", "sv", [(TIME, "17:00", ())]),
    ("Vi öppnar vid nio", "sv", [(TIME, "09:00", ("21:00",))]),
    ("from eight to five", "en", [(TIME, "08:00", ()), (TIME, "17:00", ())]),  # a range settles both ends
    ("Open 9 to 5 on weekdays", "en", [(TIME, "09:00", ()), (TIME, "17:00", ())]),
    ("Monday to Friday: 8 to 17", "en", [(TIME, "08:00", ()), (TIME, "17:00", ())]),
    ("Saturday: 10 to 14", "en", [(TIME, "10:00", ()), (TIME, "14:00", ())]),
    ("mellan 9 och 17", "sv", [(TIME, "09:00", ()), (TIME, "17:00", ())]),
    ("mellan tio och två", "sv", [(TIME, "10:00", ()), (TIME, "14:00", ())]),
    ("10 to 14 on Saturdays", "en", [(TIME, "10:00", ()), (TIME, "14:00", ())]),
    ("Saturday hours are ten to two", "en", [(TIME, "10:00", ()), (TIME, "14:00", ())]),  # not 01:50
    ("vardagar 9 till 17", "sv", [(TIME, "09:00", ()), (TIME, "17:00", ())]),
    # --- a time word before a count is no time
    ("We have 3 lines at 3 locations", "en", [(I, "3", ()), (I, "3", ())]),
    ("We open at 8 GB", "en", [(A, "8", ())]),
    ("Jag kopplar dig till en kollega", "sv", []),
    ("Upp till tre månader", "sv", [(A, "3", ())]),
    ("tretton trettio", "sv", [(I, "13", ()), (I, "30", ())]),  # no time word: two numbers
    # --- dates with the day in words
    ("the twenty-sixth of November", "en", [(DATE, "--11-26", ())]),
    ("November twenty-sixth, 2026", "en", [(DATE, "2026-11-26", ())]),
    ("November the 26th", "en", [(DATE, "--11-26", ())]),
    ("on the first of March 2026", "en", [(DATE, "2026-03-01", ())]),
    ("den tjugosjätte november", "sv", [(DATE, "--11-26", ())]),
    ("tjugosex november", "sv", [(DATE, "--11-26", ())]),
    ("den andra januari 2027", "sv", [(DATE, "2027-01-02", ())]),
    ("the second thing you may know", "en", []),  # an ordinal without a month is no date
    # --- phone numbers said in groups
    ("five five five, zero one zero, four four seven seven", "en", [(PHONE, "5550104477", ())]),
    ("plus four six, seven zero, one two three, four five, six seven", "en", [(PHONE, "+46701234567", ())]),
    ("five five five, oh one oh, four four seven seven", "en", [(PHONE, "5550104477", ())]),
    ("plus fyra sex, sju noll, ett två tre, fyra fem, sex sju", "sv", [(PHONE, "+46701234567", ())]),
    ("noll sju noll, etthundratjugotre, fyrtiofem, sextiosju", "sv", [(PHONE, "0701234567", ())]),
    ("one two three", "en", [(I, "1", ()), (I, "2", ()), (I, "3", ())]),  # three digits are no phone
    # --- an amount and its minor unit
    ("en krona och nittio öre", "sv", [(A, "1.9", ())]),
    ("99 kr och 50 öre", "sv", [(A, "99.5", ())]),
    ("5 dollars and 99 cents", "en", [(A, "5.99", ())]),
]


@pytest.mark.parametrize(("text", "language", "expected"), SPOKEN, ids=[f"{c[1]}:{c[0][:40]}" for c in SPOKEN])
def test_spoken_forms(text, language, expected):
    mentions = extract_numbers(text, language)
    assert [(m.kind, m.value, m.alternatives) for m in mentions] == expected
    for m in mentions:
        assert m.raw == text[m.span[0] : m.span[1]]
