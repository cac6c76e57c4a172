"""The validation gate's grounding against labelled answers, per language (``pytest -s`` prints the figures).

tests/data/grounding/ holds a knowledge folder per language (a telecom shop: plans in a table, add-ons,
opening hours, phone numbers, returns, news) and a corpus of answers labelled approve or reject, in
categories (corpus-en.tsv's header lists them): right numbers said many ways, and wrong ones: another
subject's number, a wrong value, unit, period, day, opening or closing time, phone number or date.

Every answer is streamed word by word through the validator's core under the "numbers" policy, as a
realtime model's transcript reaches it; the verdict is the gate's. A rejection is the positive class:
precision is the share of rejections that were right, recall the share of wrong answers rejected. The
floors are the figures measured when the corpus was written; the last lines of each corpus ("held out")
were written after the rules were tuned on the others and are reported apart. The one category the gate
cannot see (a subject the knowledge never names: "our cheapest plan") is in recall, not in the zero
asserted for wrong-subject answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir
from workers.validator.core import ValidatorCore
from workers.validator.gate_command import stream_verdict

DATA = Path(__file__).parents[1] / "data" / "grounding"
LANGUAGES = ("en", "sv")
# measured on the corpus (see the module docstring): precision and recall of rejection, share of right
# answers approved
FLOORS = {
    "en": {"precision": 0.991, "recall": 0.974, "approved": 0.993},
    "sv": {"precision": 1.0, "recall": 0.974, "approved": 1.0},
}


@dataclass(frozen=True)
class Example:
    expect: str  # approve | reject
    category: str
    sentence: str
    held_out: bool


@dataclass(frozen=True)
class Outcome:
    example: Example
    approved: bool
    reason: str


def corpus(language: str) -> list[Example]:
    examples, held_out = [], False
    for line in (DATA / f"corpus-{language}.tsv").read_text(encoding="utf-8").splitlines():
        if line.startswith("# held out"):
            held_out = True
        if not line.strip() or line.startswith("#"):
            continue
        expect, category, sentence = line.split("\t")
        assert expect in ("approve", "reject"), line
        examples.append(Example(expect, category, sentence, held_out))
    return examples


@lru_cache(maxsize=None)
def knowledge(language: str) -> KnowledgeBase:
    return KnowledgeBase.from_documents(load_knowledge_dir(DATA / f"knowledge-{language}"))


@lru_cache(maxsize=None)
def outcomes(language: str) -> tuple[Outcome, ...]:
    kb = knowledge(language)
    out = []
    for example in corpus(language):
        verdict = stream_verdict(ValidatorCore(kb), example.sentence, "numbers", language)
        out.append(Outcome(example, not verdict.rejected, verdict.reason))
    return tuple(out)


def figures(results) -> dict[str, float]:
    rejected_right = sum(1 for r in results if r.example.expect == "reject" and not r.approved)
    rejected_wrong = sum(1 for r in results if r.example.expect == "approve" and not r.approved)
    wrong_answers = sum(1 for r in results if r.example.expect == "reject")
    right_answers = sum(1 for r in results if r.example.expect == "approve")
    return {
        "precision": rejected_right / (rejected_right + rejected_wrong) if rejected_right + rejected_wrong else 1.0,
        "recall": rejected_right / wrong_answers if wrong_answers else 1.0,
        "approved": (right_answers - rejected_wrong) / right_answers if right_answers else 1.0,
        "answers": float(len(results)),
    }


@pytest.mark.parametrize("language", LANGUAGES)
def test_corpus_is_big_enough_and_labelled_both_ways(language):
    examples = corpus(language)
    assert len(examples) >= 200
    assert sum(e.expect == "approve" for e in examples) >= 100
    assert sum(e.category == "wrong-subject" for e in examples) >= 30


@pytest.mark.parametrize("language", LANGUAGES)
def test_precision_and_recall_hold_their_floors(language):
    results = outcomes(language)
    all_figures = figures(results)
    held_out = figures([r for r in results if r.example.held_out])
    misses = [r for r in results if r.approved != (r.example.expect == "approve")]
    print(f"\ngrounding corpus {language}: {int(all_figures['answers'])} answers, precision "
          f"{all_figures['precision']:.3f}, recall {all_figures['recall']:.3f}, right answers approved "
          f"{all_figures['approved']:.3f}; held out ({int(held_out['answers'])}): precision "
          f"{held_out['precision']:.3f}, recall {held_out['recall']:.3f}, approved {held_out['approved']:.3f}")
    for r in misses:
        print(f"  {r.example.expect} expected, {'approved' if r.approved else 'rejected'} [{r.example.category}] "
              f"{r.example.sentence}  {r.reason}")
    floors = FLOORS[language]
    assert all_figures["precision"] >= floors["precision"]
    assert all_figures["recall"] >= floors["recall"]
    assert all_figures["approved"] >= floors["approved"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_wrong_subject_number_is_approved(language):
    approved = [r.example.sentence for r in outcomes(language)
                if r.example.category == "wrong-subject" and r.approved]
    assert approved == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_rejection_names_the_claim_and_a_passage(language):
    for r in outcomes(language):
        if r.approved:
            continue
        assert "' in \"" in r.reason, r.reason  # the number and the sentence it stands in
        assert "; nearest: knowledge-" in r.reason, r.reason  # the closest passage, file:line


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_streamed_verdict_is_the_whole_answer_judged(language):
    """What `voicecore gate` explains (every claim of the finished answer) agrees with what the stream
    decided: a number is judged once its clause has ended, so nothing later in the answer changes it."""
    core = ValidatorCore(knowledge(language))
    for r in outcomes(language):
        claims = core.explain(r.example.sentence, language)
        assert r.approved == all(c.ok for c in claims), (r.example.sentence, [c.describe() for c in claims])
