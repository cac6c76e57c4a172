"""Who-answered accuracy: the answer detector over the labelled tuning and held-out corpora.

    python -m bench.answer_detection [--json] [--seed N] [--per-class N]

Owns running voicecore.outbound.answer.AnswerDetector over each clip of bench/answer_corpus.py (frames
and transcript events in time order, as a call would deliver them) and the figures: per class
``precision``, ``recall`` and ``n`` (under ``answer_verdicts``), ``answer_accuracy``, ``verdict_ms``
(p50/p95 of the time from answer to verdict, in the clip's time, not the machine's), a person's wait
(``human_wait_ms``: from their last word to the verdict), and how well the beep was found. The tuning set is what the thresholds were set
on; the held-out set (different texts) never was: quote its figures.
Bounded: every clip is at most ~25 s of audio processed faster than real time, and the corpus is a few
hundred clips.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.answer_corpus import Clip, corpus, espeak_available
from voicecore.outbound.answer import HUMAN, UNKNOWN, VOICEMAIL, AnswerDetector, DetectorSettings
from voicecore.outbound.greetings import CLASSES, HELD_OUT, TUNING
from voicecore.stats import percentile

TUNING_VARIANTS = 3
HELD_OUT_VARIANTS = 5
BEEP_TOLERANCE_MS = 60


def run_clip(clip: Clip, settings: DetectorSettings | None = None, use_words: bool = True) -> dict:
    """Feed one clip to a fresh detector; listen on after a voicemail verdict until its beep or the clip's end."""
    detector = AnswerDetector(settings)
    events = sorted(clip.transcript) if use_words else []
    next_event = 0
    for at_ms, frame in clip.frames():
        while next_event < len(events) and events[next_event][0] <= at_ms:
            event_ms, kind, text = events[next_event]
            if kind == "delta":
                detector.on_transcript_delta(text, event_ms)
            else:
                detector.on_transcript_done(text, event_ms)
            next_event += 1
        detector.on_audio(frame, at_ms)
        verdict = detector.verdict
        if verdict is not None and (verdict.verdict != VOICEMAIL or detector.beep_end_ms is not None):
            break
    verdict = detector.verdict
    if verdict is None:  # the clip ended before the bound: the clock runs on without audio
        verdict = detector.on_tick(detector.settings.max_wait_ms)
    return {"name": clip.name, "label": clip.label, "verdict": verdict.verdict, "verdict_ms": verdict.at_ms,
            "reason": verdict.reason, "detail": verdict.detail, "beep_at_ms": detector.beep_at_ms,
            "true_beep_at_ms": clip.beep_at_ms, "greeting_end_ms": clip.greeting_end_ms}


def score(results: list[dict]) -> dict:
    """Per class precision/recall/n, accuracy, time to verdict, the person's wait and the beep figures."""
    per_class = {}
    for label in CLASSES:
        predicted = [r for r in results if r["verdict"] == label]
        actual = [r for r in results if r["label"] == label]
        hits = sum(1 for r in actual if r["verdict"] == label)
        per_class[label] = {"precision": round(hits / len(predicted), 4) if predicted else None,
                            "recall": round(hits / len(actual), 4) if actual else None, "n": len(actual)}
    confusion = {label: {} for label in CLASSES}
    for r in results:
        confusion[r["label"]][r["verdict"]] = confusion[r["label"]].get(r["verdict"], 0) + 1
    times = [r["verdict_ms"] for r in results]
    human_times = [r["verdict_ms"] for r in results if r["label"] == HUMAN]
    # what the detector adds to a person's wait for the agent's first word: from their last word to the verdict
    human_waits = [r["verdict_ms"] - r["greeting_end_ms"] for r in results if r["label"] == HUMAN]
    voicemails = [r for r in results if r["true_beep_at_ms"] is not None]
    found = [r for r in voicemails
             if r["beep_at_ms"] is not None and abs(r["beep_at_ms"] - r["true_beep_at_ms"]) <= BEEP_TOLERANCE_MS]
    false_beeps = [r for r in results if r["true_beep_at_ms"] is None and r["beep_at_ms"] is not None]
    return {
        "n": len(results),
        "answer_verdicts": per_class,
        "answer_accuracy": round(sum(1 for r in results if r["verdict"] == r["label"]) / len(results), 4) if results else None,
        "verdict_ms": {"p50": percentile(times, 50), "p95": percentile(times, 95)} if times else None,
        "human_verdict_ms": {"p50": percentile(human_times, 50), "p95": percentile(human_times, 95)} if human_times else None,
        "human_wait_ms": {"p50": percentile(human_waits, 50), "p95": percentile(human_waits, 95)} if human_waits else None,
        "unknown_verdicts": sum(1 for r in results if r["verdict"] == UNKNOWN),
        "confusion": confusion,
        "beeps": {"voicemails": len(voicemails), "found": len(found),
                  "error_ms_p95": percentile([abs(r["beep_at_ms"] - r["true_beep_at_ms"]) for r in found], 95) if found else None,
                  "false_beeps": len(false_beeps)},
    }


def evaluate(clips: list[Clip], use_words: bool = True) -> tuple[dict, list[dict]]:
    results = [run_clip(clip, use_words=use_words) for clip in clips]
    return score(results), results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.answer_detection", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--seed", type=int, default=1, help="seed of the corpus' noise, pauses and beeps")
    parser.add_argument("--per-class", type=int, default=None, help="at most this many clips of each class per set")
    parser.add_argument("--errors", action="store_true", help="also list every wrongly classified clip")
    args = parser.parse_args(argv)
    if not espeak_available():
        print("espeak-ng is not installed (Debian: apt-get install espeak-ng): the corpus cannot be spoken",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    report: dict = {"seed": args.seed}
    errors = {}
    for name, greetings, variants in (("tuning", TUNING, TUNING_VARIANTS), ("held_out", HELD_OUT, HELD_OUT_VARIANTS)):
        clips = corpus(greetings, variants, args.seed, args.per_class)
        figures, results = evaluate(clips)
        audio_only, _ = evaluate(clips, use_words=False)
        figures["audio_only"] = {key: audio_only[key] for key in ("answer_verdicts", "answer_accuracy", "verdict_ms")}
        report[name] = figures
        errors[name] = [r for r in results if r["verdict"] != r["label"]]
    report["seconds"] = round(time.monotonic() - started, 1)
    if args.errors:
        report["errors"] = errors
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        for name in ("tuning", "held_out"):
            figures = report[name]
            print(f"{name}: {figures['n']} answers, accuracy {figures['answer_accuracy']}, "
                  f"verdict p50/p95 {figures['verdict_ms']['p50']}/{figures['verdict_ms']['p95']} ms, "
                  f"audio only {figures['audio_only']['answer_accuracy']}, "
                  f"a person waits p50/p95 {figures['human_wait_ms']['p50']}/{figures['human_wait_ms']['p95']} ms")
            for label, row in figures["answer_verdicts"].items():
                print(f"  {label:10s} precision {row['precision']}  recall {row['recall']}  n {row['n']}")
            print(f"  beeps: {figures['beeps']}")
        if args.errors:
            for name, rows in errors.items():
                for r in rows:
                    print(f"{name} {r['name']}: {r['verdict']} by {r['reason']} ({r['detail']}) at {r['verdict_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
