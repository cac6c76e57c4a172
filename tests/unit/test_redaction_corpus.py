"""The labelled redaction corpus (bench/privacy/): it is what its seeded script makes, it is big enough and
in both languages, and the redactor catches at least 99 % of every kind in it."""

from __future__ import annotations

import json

from bench.privacy import make_corpus, recall


def test_the_corpus_is_what_its_script_makes() -> None:
    assert recall.load() == json.loads(json.dumps(make_corpus.build()))


def test_recall_on_the_corpus() -> None:
    result = recall.score(recall.load())
    assert result["utterances"] >= 300 and result["languages"] == ["en", "sv"]
    assert 0 < result["with_personal_data"] < result["utterances"]
    for kind, counts in result["per_kind"].items():
        assert counts["labelled"] >= 30, kind
        assert counts["recall"] >= 0.99, (kind, result["misses"])
    # The look-alikes (a wrong check digit) are kept but for a few whose digits hold a valid shorter number
    # or another kind's (docs/how-to/privacy.md): more than that is a regression.
    assert result["false_redactions"] <= 8, result["false_examples"]
