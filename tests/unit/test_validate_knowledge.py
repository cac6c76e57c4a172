"""Knowledge base: snippets, fail-closed grounding with citations, retrieval, versions
(voicecore/validate/knowledge.py), on the small markdown knowledge base in tests/kb/.

tests/kb holds: pricing.md (English prose and a price table), priser.md (Swedish list), support.md
(hours, phone numbers). 99 and 349 appear there only as kr, 15 and 25 only as percentages.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir, split_markdown
from voicecore.validate.numbers import extract_numbers

KB_DIR = Path(__file__).resolve().parents[1] / "kb"


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase.from_documents(load_knowledge_dir(KB_DIR))


def test_load_knowledge_dir_keys_are_folder_relative():
    docs = load_knowledge_dir(KB_DIR)
    assert sorted(docs) == ["kb/pricing.md", "kb/priser.md", "kb/support.md"]
    assert "Basic costs 99 kr per month" in docs["kb/pricing.md"]


def test_split_markdown_kinds_lines_and_context():
    text = "\n".join(
        [
            "# Prices",  # 1
            "",
            "Basic costs 99 kr",  # 3
            "per month.",
            "",
            "| Plan | Price |",  # 6
            "|------|------:|",
            "| Basic | **99 kr** |",  # 8
            "",
            "## Extras",  # 10
            "- SMS: [see here](https://example.com/2025/1) 0 kr",  # 11
            "1. Roaming 49 kr",  # 12
        ]
    )
    snippets = split_markdown("kb/x.md", text)
    assert [(s.kind, s.line, s.text) for s in snippets] == [
        ("heading", 1, "Prices"),
        ("paragraph", 3, "Basic costs 99 kr per month."),
        ("header", 6, "Plan | Price"),
        ("row", 8, "Basic | 99 kr"),
        ("heading", 10, "Extras"),
        ("item", 11, "SMS: see here 0 kr"),  # link targets are dropped: their digits are no facts
        ("item", 12, "Roaming 49 kr"),
    ]
    assert snippets[3].context == "Prices Plan Price"
    assert snippets[5].context == "Prices Extras"
    assert [s.index for s in snippets] == list(range(7))


GROUNDED = [
    # text, language, number of citations, a file among the citations
    ("Basic costs 99 kr per month", "en", 1, "kb/pricing.md"),
    ("Basic kostar 99 kr/månad", "sv", 1, "kb/pricing.md"),
    ("Basic kostar nittionio kronor i månaden", "sv", 1, "kb/pricing.md"),  # words against "99 kr"
    ("Basic costs ninety-nine kronor", "en", 1, "kb/pricing.md"),
    ("Basic is 99 a month", "en", 1, "kb/pricing.md"),  # a bare number may cite "99 kr"
    ("Premium costs 349 SEK and gives you 1 TB", "en", 2, "kb/pricing.md"),
    ("Premium kostar trehundrafyrtionio kronor", "sv", 1, "kb/pricing.md"),
    ("Basic includes ten gigabytes", "en", 1, "kb/pricing.md"),
    ("Students get 15 percent off", "en", 1, "kb/pricing.md"),
    ("Momsen är tjugofem procent", "sv", 1, "kb/priser.md"),
    ("Uppsägningstiden är tre månader", "sv", 1, "kb/priser.md"),
    ("The start fee is zero kronor", "en", 1, "kb/priser.md"),
    ("The new prices apply from March 1st, 2025", "en", 1, "kb/pricing.md"),
    ("De nya priserna gäller från 1 mars", "sv", 1, "kb/pricing.md"),  # no year: cites the full date
    ("New prices from 3/1/2025", "en", 1, "kb/pricing.md"),  # en M/D/Y
    ("New prices from March 2025", "en", 1, "kb/pricing.md"),
    ("We are open from 8 am to 5 pm", "en", 2, "kb/support.md"),
    ("Vi har öppet 08.00–17.00", "sv", 2, "kb/support.md"),
    ("På lördagar öppnar vi kl. 10", "sv", 1, "kb/support.md"),  # a whole hour cites the bare "10"
    ("Vi stänger klockan 17", "sv", 1, "kb/support.md"),
    ("Nothing to verify here.", "en", 0, None),  # no numbers: trivially grounded
]


@pytest.mark.parametrize(("text", "language", "count", "file"), GROUNDED)
def test_grounded(kb, text, language, count, file):
    result = kb.ground(extract_numbers(text, language))
    assert result.ok, result.unverified
    assert result.unverified == ()
    assert len(result.citations) == count
    if file:
        assert file in {c.file for c in result.citations}


def test_grounded_answer_records_its_citation(kb):
    result = kb.ground(extract_numbers("Basic costs 99 kr per month", "en"))
    assert result.ok
    (citation,) = result.citations
    assert (citation.file, citation.snippet, citation.number, citation.line) == (
        "kb/pricing.md",
        "Basic costs 99 kr per month and includes 10 GB of data.",
        "99",
        3,
    )


REJECTED = [
    # text, language, the raw text of every unverified mention
    ("Basic costs 777 kr per month", "en", ["777 kr"]),  # a price the knowledge base lacks: rejected
    ("Basic kostar sjuhundrasjuttiosju kronor", "sv", ["sjuhundrasjuttiosju kronor"]),
    ("Basic costs 99 kr and Premium 399 kr", "en", ["399 kr"]),  # one bad number fails the answer
    # units must not contradict
    ("Basic includes 99 GB", "en", ["99 GB"]),
    ("Premium gives you 349 GB", "en", ["349 GB"]),
    ("Premium costs 1 kr", "en", ["1 kr"]),  # 1 is in the base only as 1 TB
    ("Students pay 15 kr", "en", ["15 kr"]),  # 15 is in the base only as 15 %
    ("Basic includes 99 percent", "en", ["99 percent"]),
    ("We open at 8 GB", "en", ["8 GB"]),  # a whole hour is "clock", not a data unit
    # dates, times, phones
    ("New prices from 3/1/2025", "sv", ["3/1/2025"]),  # sv D/M/Y: January 3
    ("New prices from 2 March", "en", ["2 March"]),
    ("New prices from 2026-03-01", "en", ["2026-03-01"]),
    ("We open at 9 am", "en", ["9 am"]),
    ("Ring 08-765 43 21", "sv", ["08-765 43 21"]),
    ("Call +44 70 123 45 67", "en", ["+44 70 123 45 67"]),  # "070..." in the base is a Swedish number
    ("Call +47 8 123 45 67", "en", ["+47 8 123 45 67"]),
    # a bare number in the base admits any unit: "10" (Saturday 10-14) backs "10 TB" (documented rule)
]


@pytest.mark.parametrize(("text", "language", "unverified"), REJECTED)
def test_fail_closed(kb, text, language, unverified):
    result = kb.ground(extract_numbers(text, language))
    assert not result.ok
    assert [m.raw for m in result.unverified] == unverified


def test_unverified_number_is_listed_and_verified_ones_still_cited(kb):
    result = kb.ground(extract_numbers("Basic costs 777 kr, Premium 349 kr", "en"))
    assert not result.ok
    assert [m.value for m in result.unverified] == ["777"]
    assert [c.number for c in result.citations] == ["349"]


def test_bare_number_in_base_admits_a_unit():
    kb = KnowledgeBase.from_documents({"a.md": "Table cell 14\n"})
    assert kb.ground(extract_numbers("Saturday until 14 kr", "en")).ok  # the documented permissive case


def test_a_time_in_the_base_is_no_amount(kb):
    # "lördag 10–14" reads as opening hours: 14 is 14:00 there, never 14 kr
    assert not kb.ground(extract_numbers("Saturday until 14 kr", "en")).ok


PHONES = [
    "Ring +46 8 123 45 67",
    "Ring +46-8-123-45-67",
    "Ring 08-123 45 67",
    "Ring 08 123 45 67",
    "Ring 081234567",
    "Skicka sms till 070-123 45 67",
    "Skicka sms till +46 70 123 45 67",
    "Skicka sms till +46 (0)70-123 45 67",
    "Skicka sms till 0701234567",
    "Call (555) 123-4567",
    "Call 555-123-4567",
    "Call +1 555 123 4567",
    "Call 1 555 123 4567",
]


@pytest.mark.parametrize("text", PHONES)
def test_phone_numbers_in_other_formats_match(kb, text):
    result = kb.ground(extract_numbers(text, "auto"))
    assert result.ok, result.unverified
    assert result.citations[0].file == "kb/support.md"


def test_citations_are_distinct_and_in_answer_order(kb):
    result = kb.ground(extract_numbers("Premium 349 kr, Basic 99 kr, again 99 kr", "en"))
    assert result.ok
    assert [c.number for c in result.citations] == ["349", "99"]


def test_citation_prefers_a_snippet_with_the_same_unit():
    kb = KnowledgeBase.from_documents({"a.md": "Table cell 99\n\nBasic 99 kr\n"})
    (citation,) = kb.ground(extract_numbers("99 kr", "en")).citations
    assert citation.snippet == "Basic 99 kr"
    (citation,) = kb.ground(extract_numbers("99", "en")).citations
    assert citation.snippet == "Table cell 99"


def test_ambiguous_base_notation_keeps_both_readings():
    kb = KnowledgeBase.from_documents({"a.md": "Fee: 1,500 kr\n"})  # "auto": 1500 or 1.5
    assert kb.ground(extract_numbers("1500 kr", "en")).ok
    assert kb.ground(extract_numbers("1,5 kr", "sv")).ok
    assert not kb.ground(extract_numbers("15 kr", "en")).ok


def test_home_country_decides_national_numbers():
    docs = {"a.md": "Call 020-123 45 67"}
    assert KnowledgeBase.from_documents(docs).ground(extract_numbers("+46 20 123 45 67", "en")).ok
    uk = KnowledgeBase.from_documents(docs, home_country="44")
    assert uk.ground(extract_numbers("+44 20 123 45 67", "en")).ok
    assert not uk.ground(extract_numbers("+46 20 123 45 67", "en")).ok


def test_ground_text_grounds_what_ground_grounds_and_binds_it(kb):
    text = "Basic kostar nittionio kronor"
    by_claims, by_value = kb.ground_text(text, "sv"), kb.ground(extract_numbers(text, "sv"))
    assert (by_claims.ok, by_claims.citations, by_claims.unverified) == (by_value.ok, by_value.citations, by_value.unverified)
    (verdict,) = by_claims.verdicts
    assert verdict.ok and verdict.claim.subject == ("basic",)
    # the same number said of another product: in the base (for Basic), not for Premium
    assert kb.ground(extract_numbers("Premium kostar nittionio kronor", "sv")).ok
    assert not kb.ground_text("Premium kostar nittionio kronor", "sv").ok


RETRIEVE = [
    # question, a text every returned snippet contains, a text some returned snippet contains
    ("What does Premium cost?", "Premium", "349"),
    ("Vad kostar Premium?", "Premium", "349"),
    ("How much data is in Basic?", "Basic", "10 GB"),
    ("Hur mycket surf ingår i Basic?", "Basic", "10 GB surf"),
    ("Vilka är era öppettider?", "", "08:00–17:00"),
    ("When are you open on Saturday?", "", "lördag 10–14"),
    ("What is your phone number?", "", "+46 8 123 45 67"),
]


@pytest.mark.parametrize(("question", "everywhere", "somewhere"), RETRIEVE)
def test_retrieve(kb, question, everywhere, somewhere):
    snippets = kb.retrieve(question, k=3)
    assert 1 <= len(snippets) <= 3
    assert all(everywhere in s.text for s in snippets)
    assert any(somewhere in s.text for s in snippets)
    assert all(s.kind in ("paragraph", "item", "row") for s in snippets)


@pytest.mark.parametrize("question", ["What's the weather in Paris?", "", "the and of", "Hej!"])
def test_retrieve_finds_nothing_for_unrelated_questions(kb, question):
    assert kb.retrieve(question) == []


def test_retrieve_k(kb):
    assert len(kb.retrieve("Premium Basic price", k=5)) == 5
    assert kb.retrieve("Premium", k=0) == []


def test_version_tracks_content_not_order():
    a = {"kb/a.md": "Basic 99 kr", "kb/b.md": "Premium 349 kr"}
    b = {"kb/b.md": "Premium 349 kr", "kb/a.md": "Basic 99 kr"}
    changed = {"kb/a.md": "Basic 99 kr", "kb/b.md": "Premium 399 kr"}
    renamed = {"kb/a.md": "Basic 99 kr", "kb/c.md": "Premium 349 kr"}
    version = KnowledgeBase.from_documents(a).version
    assert KnowledgeBase.from_documents(b).version == version
    assert KnowledgeBase.from_documents(changed).version != version
    assert KnowledgeBase.from_documents(renamed).version != version


def test_statistics(kb):
    stats = kb.statistics()
    assert (stats.files, stats.version) == (3, kb.version)
    assert stats.snippets == len(kb.snippets)
    assert stats.numbers == sum(len(m) for m in kb.mentions) > 10


def test_empty_base_grounds_nothing_and_retrieves_nothing():
    kb = KnowledgeBase.from_documents({})
    assert not kb.ground(extract_numbers("99 kr", "en")).ok
    assert kb.ground([]).ok
    assert kb.retrieve("price") == []
