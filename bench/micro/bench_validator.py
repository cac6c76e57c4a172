"""The validation gate's cost per transcript delta: what the validator spends on every delta of every call.

A realtime model sends an answer's transcript as small deltas (about one word each); the validator judges
the whole transcript so far on each one (workers/validator/core.py). Each benchmark streams one answer
word by word through a fresh ``ValidatorCore`` (open, every delta, done) and reports the median per delta
in ``extra_info["median_ns_per_delta"]``. The knowledge base is bench/kb (two small files, as a real
agent's folder); the answers are grounded, so every delta is judged to the end:

- ``numbers``: an English answer with a price, an amount of data and a time (policy "numbers");
- ``numbers_sv``: a Swedish one with prices, periods, an amount of data and opening hours in words;
- ``text``: an answer without numbers (the common case: most words are judged inert at once);
- ``scripted``: a scripted prompt followed word by word (policy "scripted");
- ``numbers+forbidden``, ``text+forbidden``: the same answers under a prompt with forbidden phrases (as
  examples/receptionist has), which none of them says.

    nice .venv/bin/python -m pytest bench/micro/bench_validator.py -q --benchmark-only --benchmark-timer time.process_time

(process time: on a machine shared with other work, wall-clock medians mostly measure the others.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.micro.conftest import per_item
from voicecore.bus import messages
from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir
from workers.validator.core import ValidatorCore

KB = KnowledgeBase.from_documents(load_knowledge_dir(Path(__file__).resolve().parents[1] / "kb"))

ANSWERS = {
    "numbers": ("en", "numbers", "",
                "Premium costs 349 kronor per month and includes unlimited data, while Basic costs 199 kr "
                "with 10 GB of data. Support is open from 8 in the morning until 18:00 on weekdays."),
    "numbers_sv": ("sv", "numbers", "",
                   "Premium kostar 349 kronor i månaden och Basic kostar 199 kr per månad med 10 GB surf. "
                   "Supporten har öppet vardagar från klockan åtta till arton."),
    "text": ("en", "numbers", "",
             "Thank you for asking, that is a very good question, and I am happy to help you with it "
             "today. Let me know if there is anything else you would like to hear about our plans."),
    "scripted": ("en", "scripted",
                 "Thank you for calling Acme. Shall I book a callback on Thursday the 26th of November at ten a.m.?",
                 "Thank you for calling Acme. Shall I book a callback on Thursday the 26th of November at ten a.m.?"),
}


def deltas_of(text: str) -> list[str]:
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


FORBIDDEN = "guarantee\ndiagnosis"
ANSWERS["numbers+forbidden"] = ANSWERS["numbers"]
ANSWERS["text+forbidden"] = ANSWERS["text"]


def stream(language: str, policy: str, script: str, deltas: list[str], forbidden: str = "") -> bool:
    core = ValidatorCore(KB)
    key = (1, 1, 1)
    core.handle(messages.GateOpen(*key, policy, script, language, forbidden))
    text = ""
    rejected = False
    for delta in deltas:
        text += delta
        for verdict in core.handle(messages.TranscriptDelta(*key, delta, 3 * len(text))):
            rejected |= verdict.rejected
    for verdict in core.handle(messages.TranscriptDone(*key, "", 3 * len(text))):
        rejected |= verdict.rejected
    return rejected


@pytest.mark.parametrize("name", sorted(ANSWERS))
@pytest.mark.benchmark(group="validator: one answer streamed word by word")
def test_validator_answer(benchmark, name):
    language, policy, script, text = ANSWERS[name]
    deltas = deltas_of(text)
    forbidden = FORBIDDEN if name.endswith("+forbidden") else ""
    rejected = benchmark(stream, language, policy, script, deltas, forbidden)
    assert not rejected, name  # every answer is grounded: each delta is judged, none cut short
    per_item(benchmark, len(deltas), "delta")
