"""The answer bench's arithmetic: precision, recall, accuracy, times and beeps from per-clip results."""

from bench.answer_corpus import transcript_events
from bench.answer_detection import score


def result(label, verdict, verdict_ms=1000, beep_at_ms=None, true_beep_at_ms=None, greeting_end_ms=500):
    return {"name": f"{label}-x", "label": label, "verdict": verdict, "verdict_ms": verdict_ms, "reason": "test",
            "detail": "", "beep_at_ms": beep_at_ms, "true_beep_at_ms": true_beep_at_ms,
            "greeting_end_ms": greeting_end_ms}


def test_precision_recall_and_accuracy_per_class():
    results = [result("human", "human", 1200), result("human", "human", 1400), result("voicemail", "human"),
               result("voicemail", "voicemail", 4000, beep_at_ms=5010, true_beep_at_ms=5000),
               result("ivr", "unknown", 6000, true_beep_at_ms=None)]
    figures = score(results)
    assert figures["answer_verdicts"]["human"] == {"precision": 0.6667, "recall": 1.0, "n": 2}
    assert figures["answer_verdicts"]["voicemail"] == {"precision": 1.0, "recall": 0.5, "n": 2}
    assert figures["answer_verdicts"]["ivr"] == {"precision": None, "recall": 0.0, "n": 1}
    assert figures["answer_verdicts"]["screening"] == {"precision": None, "recall": None, "n": 0}
    assert figures["answer_accuracy"] == 0.6 and figures["unknown_verdicts"] == 1
    assert figures["confusion"]["voicemail"] == {"human": 1, "voicemail": 1}
    # a person waits from their last word (500 ms) to the verdict: 700 and 900 ms; nearest-rank percentiles
    assert figures["human_wait_ms"] == {"p50": 700.0, "p95": 900.0} and figures["verdict_ms"]["p95"] == 6000.0


def test_a_beep_counts_only_near_where_it_was():
    figures = score([result("voicemail", "voicemail", beep_at_ms=5200, true_beep_at_ms=5000),
                     result("voicemail", "voicemail", beep_at_ms=7010, true_beep_at_ms=7000),
                     result("human", "human", beep_at_ms=3000)])
    assert figures["beeps"] == {"voicemails": 2, "found": 1, "error_ms_p95": 10.0, "false_beeps": 1}


def test_the_transcript_follows_the_words_and_ends_with_the_segment():
    events = transcript_events("leave a message", 1000, 900)
    assert [kind for _, kind, _ in events] == ["delta", "delta", "delta", "done"]
    assert "".join(text for _, kind, text in events if kind == "delta") == "leave a message"
    times = [at for at, _, _ in events]
    assert times == sorted(times) and times[2] == 1000 + 900 + 300 and times[3] == 1000 + 900 + 700
