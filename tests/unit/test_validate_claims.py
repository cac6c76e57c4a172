"""Claims (voicecore/validate/claims.py): what a sentence says each of its numbers is, and how the knowledge
base (voicecore/validate/knowledge.py) binds a number to its subject. Table-driven, no I/O."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.validate.claims import claims_of, related, term_of
from voicecore.validate.knowledge import KnowledgeBase, facts_document
from voicecore.validate.numbers import extract_numbers

WEEKDAYS, SATURDAY = frozenset(range(5)), frozenset({5})


def claims(text: str, language: str = "en", labels=None):
    return claims_of(text, extract_numbers(text, language), labels)


CLAIMS = [
    # text, language, [(raw, subject, days, role, period, noun, unit_class)]
    ("Premium costs 299 kr per month.", "en", [("299 kr", ("premium",), None, "", "month", None, "money")]),
    ("Basic costs 99 kr and Premium costs 349 kr.", "en",
     [("99 kr", ("basic",), None, "", None, None, "money"), ("349 kr", ("premium",), None, "", None, None, "money")]),
    # a clause that names nothing inherits: the number before it in its clause, else the clause before it
    ("For Premium, it costs 349 kr.", "en", [("349 kr", ("premium",), None, "", None, None, "money")]),
    ("Premium has 12 months binding and costs 349 kr.", "en",
     [("12 months", ("premium", "binding"), None, "", None, None, "duration"),
      ("349 kr", ("premium",), None, "", None, None, "money")]),
    ("Premium is our biggest plan. It costs 549 kr a month.", "en",
     [("549 kr", ("premium",), None, "", "month", None, "money")]),
    # days: of its own clause (before or after the number), else (a clock time) earlier in the sentence
    ("We are open 8 to 17 on weekdays and 10 to 14 on Saturdays.", "en",
     [("8", (), WEEKDAYS, "start", None, None, "time"), ("17", (), WEEKDAYS, "end", None, None, "time"),
      ("10", (), SATURDAY, "start", None, None, "time"), ("14", (), SATURDAY, "end", None, None, "time")]),
    ("On Saturdays we open at 10 and close at 14.", "en",
     [("10", (), SATURDAY, "start", None, None, "time"), ("14", (), SATURDAY, "end", None, None, "time")]),
    ("Måndag–fredag 08:00–17:00, lördag 10–14.", "sv",
     [("08:00", (), WEEKDAYS, "start", None, None, "time"), ("17:00", (), WEEKDAYS, "end", None, None, "time"),
      ("10", (), SATURDAY, "start", None, None, "time"), ("14", (), SATURDAY, "end", None, None, "time")]),
    ("Vi stänger klockan fem.", "sv", [("fem", (), None, "end", None, None, "time")]),
    ("We open at nine.", "en", [("nine", (), None, "start", None, None, "time")]),
    # what a plain number counts, and a price's period written many ways
    ("Call us on 3 lines.", "en", [("3", ("lines",), None, "", None, "lines", "count")]),
    ("Basic: 99 kr/månad, 10 GB surf.", "sv",
     [("99 kr", ("basic",), None, "", "month", None, "money"), ("10 GB", ("basic",), None, "", None, None, "data")]),
    ("Insurance is 89 kr per year.", "en", [("89 kr", ("insurance",), None, "", "year", None, "money")]),
    ("Försäkringen kostar 89 kr om året.", "sv", [("89 kr", ("försäkringen",), None, "", "year", None, "money")]),
    ("Calls are 1.90 kr per minute.", "en", [("1.90 kr", (), None, "", "min", None, "money")]),
    ("The price is 5.", "en", [("5", (), None, "", None, None, "money")]),  # "price": money, though unitless
]


@pytest.mark.parametrize(("text", "language", "expected"), CLAIMS, ids=[c[0][:40] for c in CLAIMS])
def test_claims(text, language, expected):
    got = [(c.mention.raw, c.subject, c.days, c.role, c.period, c.noun, c.unit_class) for c in claims(text, language)]
    assert got == expected


def test_labels_decide_what_can_be_a_subject():
    (claim,) = claims("Our lovely Premium plan costs 549 kr.", labels=lambda term: term == "premium")
    assert claim.subject == ("premium",)
    assert {"lovely", "premium", "plan"} <= claim.terms


def test_a_claim_is_closed_when_its_clause_ends():
    assert not claims("Basic costs 99 kr per")[0].closed
    assert claims("Basic costs 99 kr per month,")[0].closed
    assert claims("Basic costs 99 kr per month and")[0].closed
    assert claims("Basic costs 99 kr per month.")[0].closed
    assert claims("Basic costs 99 kr per month for all of our")[0].closed  # six words after it


def test_a_word_after_a_subject_pronoun_is_a_soft_subject():
    (claim,) = claims("We answer on 3 lines.")
    assert "answer" in claim.subject and claim.soft == {"answer"}


def test_a_capitalized_name_that_is_a_stop_word_elsewhere():
    (claim,) = claims_of("Mellan kostar 399 kr.", extract_numbers("Mellan kostar 399 kr.", "sv"), names=frozenset({"mellan"}))
    assert claim.subject == ("mellan",)
    (claim,) = claims_of("Öppet mellan 9 och 17.", extract_numbers("Öppet mellan 9 och 17.", "sv")[:1], names=frozenset({"mellan"}))
    assert claim.subject == ()  # lower case: "between"


@pytest.mark.parametrize(("a", "b", "same"), [
    ("pris", "priser", True), ("cleaning", "cleanings", True), ("dagar", "arbetsdagar", True),
    ("studenter", "studentrabatt", True), ("familjer", "familjerabatt", True), ("basic", "premium", False),
    ("mobil", "mobiltelefon", True), ("card", "cards", True), ("bas", "basic", False), ("~price", "~price", True), ("~price", "~pricey", False),
])
def test_related_terms(a, b, same):
    assert related(a, b) is same


def test_terms_say_nothing_of_stop_words_numbers_units_and_days():
    assert [term_of(w) for w in ("the", "kostar", "Premium", "fem", "kronor", "Saturday", "five", "kr")] == \
        [None, "~price", "premium", None, None, None, None, None]


# -- binding in the knowledge base ----------------------------------------------------------------------

KB = KnowledgeBase.from_documents({
    "kb/prices.md": "# Prices\n\nAll prices are per month.\n\n- Basic: 299 kr\n- Premium: 349 kr\n\n"
                    "## Contact\n\nCall us on 3 lines.\n",
    "kb/hours.md": "# Hours\n\nÖppettider: måndag–fredag 09:00–16:30.\n",
})

BINDING = [
    # the cases a value-only check approves: a number that exists, said of something else
    ("Premium costs 299 kr.", "en", False, "there it is said of basic, not of premium"),
    ("Basic costs 3 kr per month.", "en", False, "there it is a count of lines, not an amount of money"),
    ("Vi stänger klockan fem.", "sv", False, "it says 16:30"),
    ("Vi stänger halv fem.", "sv", True, ""),  # 16:30
    ("Vi stänger 16:30 på lördagar.", "sv", False, "there it holds for Monday-Friday, not Saturday"),
    ("We open at 16:30.", "en", False, "there it is a closing time, not an opening time"),
    ("Premium costs 349 kr a year.", "en", False, "there it is per month, not per year"),  # the file's "per month"
    ("Basic costs 299 kr per month.", "en", True, ""),
    ("We close at half past four.", "en", True, ""),
    ("We answer on three lines.", "en", True, ""),
]


@pytest.mark.parametrize(("text", "language", "ok", "why"), BINDING, ids=[b[0] for b in BINDING])
def test_a_number_is_grounded_only_with_its_subject(text, language, ok, why):
    result = KB.ground_text(text, language)
    assert result.ok is ok, [v.describe() for v in result.verdicts]
    if not ok:
        (verdict,) = [v for v in result.verdicts if not v.ok]
        assert verdict.why == why and verdict.near_miss is not None
        assert verdict.describe().startswith(f"{verdict.claim.mention.raw!r} in \"{text}\"; nearest: kb/")
        assert not KB.ground_text(text, language).ok
    # the value alone: the old rule, still there for callers that have only numbers
    assert KB.ground(extract_numbers("Premium costs 299 kr.", "en")).ok


def test_a_rejected_claim_with_no_such_number_names_the_nearest_fact_of_its_kind():
    (verdict,) = KB.ground_text("Premium costs 777 kr.", "en").verdicts
    assert not verdict.ok and not verdict.value_found
    assert verdict.near_miss.snippet == "Premium: 349 kr" and verdict.why == "it says 349 kr"


def test_facts_document_gives_each_json_object_its_own_line():
    result = json.dumps({"slots": [{"time": "10:00", "dentist": "Anna"}, {"time": "11:00", "dentist": "Bo"}],
                         "price": 450})
    assert facts_document(result) == \
        "- price: 450\n- slots Anna: time: 10:00, dentist: Anna\n- slots Bo: time: 11:00, dentist: Bo"
    assert facts_document("Not JSON: 42") == "Not JSON: 42"
    facts = KnowledgeBase.from_documents({"tool-result": facts_document(result)})
    assert facts.ground_text("Anna is free at 10:00.", "en").ok
    assert not facts.ground_text("Bo is free at 10:00.", "en").ok


@given(st.lists(st.sampled_from([
    "Basic", "Premium", "kostar", "costs", "299", "kr", "per", "månad", "month", ",", ".", "och", "and", "on",
    "Saturdays", "lördag", "till", "klockan", "fem", "halv", "five", "at", "3", "lines", "plus", "fyra", "sex",
    "noll", "ett", "två", "the", "twenty-sixth", "of", "November", "kvart", "i", ":", "–", "16:30", "we", "open",
]), max_size=30).map(" ".join))
def test_any_answer_is_read_and_judged_without_raising(text):
    """Odd input only yields other verdicts: claims are in text order, one per number, each judged."""
    for language in ("en", "sv"):
        mentions = extract_numbers(text, language)
        found = claims_of(text, mentions, KB.is_label)
        assert [c.mention for c in found] == mentions
        result = KB.ground_text(text, language)
        assert len(result.verdicts) == len(mentions)
        assert all(v.ok == (v.citation is not None) for v in result.verdicts)
