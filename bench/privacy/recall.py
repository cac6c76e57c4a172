"""Recall and false redactions of voicecore/privacy/redact.py on the labelled corpus (bench/privacy/corpus.jsonl).

A labelled span is caught when one redacted span covers all of it (``caught``); ``kind_right`` also needs the
redactor to name the same kind. A false redaction is a redacted span that overlaps no labelled span (on an
utterance without personal data, or beside the personal data). Run:

    .venv/bin/python bench/privacy/recall.py [--json] [--misses]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from voicecore.privacy.redact import KINDS, Redactor

CORPUS = Path(__file__).with_name("corpus.jsonl")


def load(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    redactors = {language: Redactor((language,)) for language in {row["language"] for row in rows}}
    per_kind = {kind: {"labelled": 0, "caught": 0, "kind_right": 0} for kind in KINDS if kind != "pattern"}
    false_spans, false_utterances, misses, false_examples = 0, 0, [], []
    for row in rows:
        found = redactors[row["language"]].find(row["text"])
        for label in row["spans"]:
            counts = per_kind[label["kind"]]
            counts["labelled"] += 1
            cover = [s for s in found if s.start <= label["start"] and s.end >= label["end"]]
            if cover:
                counts["caught"] += 1
                counts["kind_right"] += any(s.kind == label["kind"] for s in cover)
            else:
                misses.append({"id": row["id"], "kind": label["kind"], "text": row["text"][label["start"]:label["end"]]})
        stray = [s for s in found if not any(s.start < l["end"] and l["start"] < s.end for l in row["spans"])]
        if stray:
            false_spans += len(stray)
            false_utterances += 1
            false_examples.append({"id": row["id"], "text": row["text"], "redacted": [row["text"][s.start:s.end] for s in stray]})
    for counts in per_kind.values():
        counts["recall"] = counts["caught"] / counts["labelled"] if counts["labelled"] else 1.0
    labelled = sum(c["labelled"] for c in per_kind.values())
    return {
        "utterances": len(rows),
        "with_personal_data": sum(1 for r in rows if r["spans"]),
        "languages": sorted(redactors),
        "per_kind": per_kind,
        "recall": sum(c["caught"] for c in per_kind.values()) / labelled if labelled else 1.0,
        "false_redactions": false_spans,
        "utterances_with_false_redactions": false_utterances,
        "misses": misses,
        "false_examples": false_examples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--misses", action="store_true", help="also print each miss and false redaction")
    args = parser.parse_args(argv)
    result = score(load(args.corpus))
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
        return 0
    print(f"{result['utterances']} utterances ({', '.join(result['languages'])}), "
          f"{result['with_personal_data']} with personal data")
    for kind, c in result["per_kind"].items():
        print(f"  {kind:13s} recall {c['recall']:.3f}  ({c['caught']}/{c['labelled']}, kind named right {c['kind_right']})")
    print(f"  all kinds     recall {result['recall']:.3f}")
    print(f"false redactions: {result['false_redactions']} span(s) in {result['utterances_with_false_redactions']} utterance(s)")
    if args.misses:
        for miss in result["misses"]:
            print(f"  missed {miss['kind']} in {miss['id']}: {miss['text']!r}")
        for stray in result["false_examples"]:
            print(f"  false redaction in {stray['id']}: {stray['redacted']} of {stray['text']!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
