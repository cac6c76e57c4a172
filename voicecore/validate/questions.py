"""Does a caller's question need numbers to answer? (retrieve-first: docs/explanation/validation-gate.md#nodes)

When the knowledge base holds nothing relevant to a question, an answer that needs a price, a date, a
time, an amount or a phone number can only be invented; the controller then says the safe line without
asking the model. This module owns that guess, for English and Swedish. It errs towards "no": a wrong
"no" costs one answer the gate rejects (its numbers are still checked), a wrong "yes" costs an honest
answer, so only unambiguous cues count.
"""

from __future__ import annotations

import re

from voicecore.validate.numbers import extract_numbers

# Whole-word cues, casefolded. Multi-word cues are matched as phrases.
_CUES = (
    # English
    "how much", "how many", "how long", "how old", "how far", "what time", "which time", "what date",
    "when", "price", "prices", "cost", "costs", "fee", "fees", "charge", "charges", "rate", "rates",
    "percent", "percentage", "discount", "number", "phone number", "opening hours", "hours", "deadline",
    "expensive", "cheap", "cheaper", "cheapest", "amount", "balance", "interest",
    # Swedish
    "hur mycket", "hur många", "hur länge", "hur gammal", "vilken tid", "vilket datum", "när", "pris",
    "priset", "priser", "kostar", "kostnad", "kostnaden", "avgift", "avgiften", "procent", "rabatt",
    "nummer", "numret", "telefonnummer", "öppettider", "öppet", "dyr", "dyrt", "billig", "billigt",
    "billigast", "belopp", "saldo", "ränta", "räntan",
)
_CUE_PATTERN = re.compile(r"\b(?:" + "|".join(re.escape(c) for c in sorted(_CUES, key=len, reverse=True)) + r")\b")


def question_needs_numbers(question: str) -> bool:
    """True when answering ``question`` would state a number: it asks for one ("how much", "when",
    "kostar", "öppettider"), or it names one itself ("the 5 GB plan", "nittionio kronor")."""
    text = question.casefold()
    if not text.strip():
        return False
    if _CUE_PATTERN.search(text):
        return True
    return bool(extract_numbers(question, "auto"))
