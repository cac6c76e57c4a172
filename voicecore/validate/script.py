"""Scripted prompts followed as the transcript streams, and forbidden phrases; sans-I/O.

Owns the scripted half of the gate (the ``scripted`` policy: docs/explanation/validation-gate.md#policies).
A Twilio-to-Realtime bridge's usual hallucination guard checks a scripted prompt only after its audio was
queued, with a 30 % overlap of words longer than 3 letters; here the transcript must follow the script word
by word while it streams, so the gate can release audio only as far as the text is approved and cancel a
hallucinated continuation before it plays. That guard's figure is still computed (``word_overlap``,
``Verdict.overlap``) for comparison. Forbidden phrases are the ones such bridges put in their prompts
("Got it", "I'll have someone", "technician", ...), checked instead of asked for. Must not know audio, frames,
calls or clocks: the validator maps ``approved_chars`` to audio positions.

Normalization (``normalize_for_script``), applied to script and transcript alike:
- numbers through ``extract_numbers`` (same language): "3" and "three", "ninety-nine kronor" and "99 kr",
  "12 %" and "twelve percent" become the same tokens (magnitude, then canonical unit); phone numbers
  become their digits ("plus four six, seven zero, ..." and "+46 70 ..." alike); clock times and dates
  said in words are their values ("ten a.m." = "10:00", "klockan tio" = "kl. 10", "the 26th of November"
  = "November 26"), and a date without its year equals the full date with that day and month; adjacent
  plain integers join ("zero seven zero" = "070"), so digit-by-digit readings match the written number.
- case folded, punctuation dropped, apostrophes removed inside words ("I'll" -> "ill"), hyphens split.
- letter-by-letter spelling: a run of 2+ single letters joins into one word ("V A N", "V-A-N", "V. A. N."
  -> "van"), so it equals "Van".
- fillers ("um", "uh", "öh", ...) are dropped.

Tolerance (``ScriptMatcher``): word-level alignment (edit distance over tokens) of the transcript against
the script. Free per word: equality, or a small spelling difference (character edit distance 1 for
words of 4-7 letters, 2 from 8 letters: ASR spelling variants), and two words written as one or one as
two ("every one"/"everyone", "van cau"/"vancau"). Each inserted, skipped or substituted word costs 1; the
budget is ``max_word_edits`` (default max(1, script words // 10)). Numbers, units and spelled runs are
never fuzzy and any edit involving one exceeds every budget: a wrong, extra or missing number, or a
wrong letter in a spelled name, rejects at once (a single letter alone, like "a", is an ordinary word).

Streaming: a word still being written (the delta ended mid-word) is held back unless it begins the script
word the transcript may go on with (``ScriptMatcher._begins_next_word``), and so are numbers,
spelled letters and a few open words ("and", "a", "en", "one", ...) at the end of what arrived, because
the next word can still change them ("ninety" -> "ninety nine", "one" -> "one of", "V A" -> "V A N").
``approved_chars`` is the end of the last held-in transcript token that matches a script token on an
alignment within budget; it never decreases. The verdict is rejected
as soon as no alignment of the held-in transcript to any prefix of the script stays within budget, so a
hallucinated continuation or a skipped sentence is rejected mid-stream. ``finish`` requires the whole
script. A verdict that is rejected or finished is final.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from voicecore.validate.numbers import UNIT_FORMS, Language, extract_numbers

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_LETTER_GAP = re.compile(r"^[\s.\-–]*$")
_DIGIT_GAP = re.compile(r"^[\s,\-]*$")
_FILLERS = frozenset({"um", "uh", "uhm", "erm", "eh", "ehm", "öh", "äh", "hmm", "mm"})
# words later text can still turn into (part of) a number: "and" -> "one hundred and twenty",
# "a" -> "a hundred", "en" -> "en krona", "one" -> "one of" (a pronoun)
_OPEN_WORDS = frozenset({"and", "point", "komma", "a", "en", "ett", "one"})
# words that, after a number, may join it to the next into a date: "the 26th of" -> "the 26th of November"
_DATE_LINKS = frozenset({"of"})
_OVER_BUDGET = 1_000_000  # cost of an edit that involves a number: more than any budget


@dataclass(frozen=True, slots=True)
class Verdict:
    approved_chars: int  # transcript[:approved_chars] follows the script; never decreases
    rejected: bool = False
    reason: str = ""  # why it was rejected; empty otherwise
    complete: bool = False  # finish() matched the whole script within tolerance
    edits: int = 0  # word edits of the best alignment so far (capped at the budget + 1)
    overlap: float | None = None  # word_overlap(), the after-the-fact guard's figure, set by finish()


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    start: int
    end: int
    critical: bool  # a number, unit or spelled run: compared exactly, any edit involving it rejects
    digits: bool = False  # a plain integer or phone number: joins with an adjacent one
    spelled: bool = False  # a single letter or a run of them: joins with a following letter


def _mention_tokens(kind: str, value: str, magnitude: str, unit: str | None) -> list[str]:
    if kind == "phone":
        return [value.lstrip("+")]
    if unit is not None:
        return [magnitude, unit]
    return [value]


def _tokenize(text: str, language: Language) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0

    def words(upto: int) -> None:
        for m in _WORD.finditer(text, position, upto):
            word = re.sub(r"['’]", "", m.group().casefold())
            if word not in _FILLERS:
                tokens.append(_Token(word, m.start(), m.end(), critical=False))

    for mention in extract_numbers(text, language):
        start, end = mention.span
        words(start)
        plain = mention.kind == "phone" or (mention.kind == "integer" and mention.value.isdigit())
        for part in _mention_tokens(mention.kind, mention.value, mention.magnitude, mention.unit):
            tokens.append(_Token(part, start, end, critical=True, digits=plain))
        position = end
    words(len(text))
    return _join_runs(text, tokens)


def _join_runs(text: str, tokens: list[_Token]) -> list[_Token]:
    """Join spelled letters ("V A N" -> "van") and adjacent plain integers ("0 7 0" -> "070")."""
    out: list[_Token] = []
    for token in tokens:
        letter = not token.critical and len(token.text) == 1 and token.text.isalpha()
        if out:
            prev = out[-1]
            gap = text[prev.end : token.start]
            if letter and prev.spelled and _LETTER_GAP.match(gap):
                # a spelled run is a name or a code: exact, like a number
                out[-1] = _Token(prev.text + token.text, prev.start, token.end, critical=True, spelled=True)
                continue
            if token.digits and prev.digits and prev.end <= token.start and _DIGIT_GAP.match(gap):
                out[-1] = _Token(prev.text + token.text, prev.start, token.end, critical=True, digits=True)
                continue
        out.append(_Token(token.text, token.start, token.end, token.critical, token.digits, spelled=letter))
    return out


def normalize_for_script(text: str, language: Language = "auto") -> str:
    """The comparable form of a script or transcript: normalized tokens joined by single spaces."""
    return " ".join(t.text for t in _tokenize(text, language))


def word_overlap(expected: str, actual: str) -> float:
    """The after-the-fact guard's figure, verbatim: share of the expected words longer than 3 characters
    (split on whitespace, lowercased, punctuation kept) that occur as substrings of the lowercased actual
    text; 1.0 when there are none. That guard rejects when this is < 0.3 and the transcript is > 20
    characters."""
    words = [w for w in expected.lower().split() if len(w) > 3]
    if not words:
        return 1.0
    actual = actual.lower()
    return sum(1 for w in words if w in actual) / len(words)


def _edit_distance(a: str, b: str, limit: int) -> int:
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


_FULL_DATE = re.compile(r"^\d{4}(-\d\d-\d\d)$")
_DAY_OF_YEAR = re.compile(r"^-(-\d\d-\d\d)$")


def _same_date(a: str, b: str) -> bool:
    """A date said without its year ("Thursday the 26th of November": --11-26) is the full date written
    with one (2026-11-26): a confirmation prompt says the weekday, day and month of a date argument."""
    full, short = (a, b) if _FULL_DATE.match(a) else (b, a)
    m, n = _FULL_DATE.match(full), _DAY_OF_YEAR.match(short)
    return bool(m and n and m[1] == n[1])


def _same_word(a: _Token, b: str, b_critical: bool) -> bool:
    if a.text == b:
        return True
    if a.critical and b_critical and _same_date(a.text, b):
        return True
    if a.critical or b_critical:
        return False
    longest = max(len(a.text), len(b))
    limit = 2 if longest >= 8 else 1 if longest >= 4 else 0
    return limit > 0 and _edit_distance(a.text, b, limit) <= limit


class ScriptMatcher:
    """Follows one scripted prompt's transcript as deltas arrive (rules: module docstring)."""

    def __init__(self, expected_text: str, language: Language = "auto", max_word_edits: int | None = None) -> None:
        self.expected_text = expected_text
        self.language = language
        self._expected = _tokenize(expected_text, language)
        words = len(self._expected)
        self.max_word_edits = max(1, words // 10) if max_word_edits is None else max_word_edits
        self._transcript = ""
        self._verdict = Verdict(0)
        self._final = False
        self._alignment = _Alignment(self._expected)

    @property
    def transcript(self) -> str:
        return self._transcript

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    def feed(self, delta: str) -> Verdict:
        """Append a transcript delta; the verdict on everything received so far."""
        if self._final:
            return self._verdict
        self._transcript += delta
        tokens = _tokenize(self._transcript, self.language)
        held_in = _settled(self._transcript, tokens)
        self._verdict = self._judge(tokens[:held_in], complete=False)
        self._final = self._verdict.rejected
        if not self._final and held_in == len(tokens) - 1 and self._begins_next_word(tokens):
            self._verdict = replace(self._verdict, approved_chars=tokens[-1].end)
        return self._verdict

    def _begins_next_word(self, tokens: list[_Token]) -> bool:
        """The word being written (the last token; every one before it held in and approved) is an ordinary
        word that begins a script word the transcript may go on with: an alignment of the words before it
        within budget reaches that script word. Its audio is then on script whatever it becomes ("Thank"
        of "Thank you"; should it end as "Thanks", the whole word is judged as usual), so it need not wait
        for the next delta."""
        tail = tokens[-1]
        if tail.critical or tail.spelled or _is_open(tokens, len(tokens) - 1):
            return False
        if len(tokens) > 1 and self._verdict.approved_chars < tokens[-2].end:
            return False
        row = self._alignment.cost[-1]
        return any(row[j] <= self.max_word_edits and not e.critical and e.text.startswith(tail.text)
                   for j, e in enumerate(self._expected))

    def finish(self, final_transcript: str | None = None) -> Verdict:
        """The response's transcript is done (``final_transcript`` replaces the deltas when given):
        the whole script must have been said within tolerance."""
        if self._final:
            return self._verdict
        if final_transcript is not None:
            self._transcript = final_transcript
        tokens = _tokenize(self._transcript, self.language)
        verdict = self._judge(tokens, complete=True)
        self._verdict = Verdict(
            verdict.approved_chars,
            verdict.rejected,
            verdict.reason,
            verdict.complete,
            verdict.edits,
            word_overlap(self.expected_text, self._transcript),
        )
        self._final = True
        return self._verdict

    def _judge(self, tokens: list[_Token], complete: bool) -> Verdict:
        self._alignment.update(tokens)
        cost, matched_min = self._alignment.cost, self._alignment.matched_min
        budget = self.max_word_edits
        approved = self._verdict.approved_chars
        best = min(cost[-1])
        final = cost[-1][-1]
        over = (final if complete else best) > budget
        if not over:
            for i in range(len(tokens), 0, -1):
                if matched_min[i] <= budget:
                    approved = max(approved, tokens[i - 1].end)
                    break
            if complete:
                approved = max(approved, len(self._transcript))
            return Verdict(approved, complete=complete, edits=final if complete else best)
        if complete and best <= budget:
            reason = "incomplete: the transcript ends before the script does"
        elif (final if complete else best) >= _OVER_BUDGET:
            reason = "a number or spelled word differs from the script"
        else:
            reason = f"diverges from the script: more than {budget} word edits"
        return Verdict(approved, rejected=True, reason=reason, edits=min(best, budget + 1))


def _settled(text: str, tokens: list[_Token]) -> int:
    """How many leading tokens later text can no longer change: not a word still being written (the
    delta ended mid-word), and not a number, spelled letter or open word (``_OPEN_WORDS``) that the
    next word may still extend or reinterpret ("ninety" -> "ninety nine", "V A" -> "V A N")."""
    settled = len(tokens) - (1 if text and text[-1].isalnum() else 0)
    while settled > 0 and (
        tokens[settled - 1].critical or tokens[settled - 1].spelled or _is_open(tokens, settled - 1)
    ):
        settled -= 1
    return max(settled, 0)


def _is_open(tokens: list[_Token], index: int) -> bool:
    """Token ``index`` is a word the next may still turn into part of a number or a date."""
    word = tokens[index].text
    return word in _OPEN_WORDS or (word in _DATE_LINKS and index > 0 and tokens[index - 1].critical)


class _Alignment:
    """Edit-distance table of transcript tokens against script tokens, extended row by row.

    cost[i][j]: fewest word edits aligning tokens[:i] with expected[:j]. matched_min[i]: the fewest
    over alignments of tokens[:i] (with any script prefix) whose last step matched tokens[i-1] to the
    script. Row i depends only on tokens[:i], so rows of settled tokens are kept between feeds and a
    feed costs O(new tokens x script tokens).
    """

    def __init__(self, expected: list[_Token]) -> None:
        self.expected = expected
        self.keys: list[tuple[str, bool]] = []
        first = [0]
        for e in expected:
            first.append(first[-1] + _edit_cost(e.critical))
        self.cost: list[list[int]] = [first]
        self.matched_min: list[int] = [_INFINITE]
        self._same: dict[tuple[str, bool, int], bool] = {}

    def update(self, tokens: list[_Token]) -> None:
        keys = [(t.text, t.critical) for t in tokens]
        keep = 0
        while keep < min(len(keys), len(self.keys)) and keys[keep] == self.keys[keep]:
            keep += 1
        del self.cost[keep + 1 :], self.matched_min[keep + 1 :]
        self.keys = keys
        for i in range(keep + 1, len(tokens) + 1):
            self._add_row(tokens, i)

    def _add_row(self, tokens: list[_Token], i: int) -> None:
        expected, cost = self.expected, self.cost
        t = tokens[i - 1]
        above = cost[i - 1]
        two_above = cost[i - 2] if i >= 2 else None
        row = [above[0] + _edit_cost(t.critical)]
        matched_min = _INFINITE
        for j in range(1, len(expected) + 1):
            e = expected[j - 1]
            best_match = _INFINITE
            key = (t.text, t.critical, j - 1)
            same = self._same.get(key)
            if same is None:
                same = self._same[key] = _same_word(t, e.text, e.critical)
            if same:
                best_match = above[j - 1]
            # joins compare exact strings, so they are safe for numbers and spelled runs too
            if j >= 2 and t.text == expected[j - 2].text + e.text:
                best_match = min(best_match, above[j - 2])  # two script words said as one
            if two_above is not None and tokens[i - 2].text + t.text == e.text:
                best_match = min(best_match, two_above[j - 1])  # one script word said as two
            matched_min = min(matched_min, best_match)
            row.append(
                min(
                    best_match,
                    above[j - 1] + max(_edit_cost(t.critical), _edit_cost(e.critical)),  # substitution
                    above[j] + _edit_cost(t.critical),  # a word the script does not have
                    row[j - 1] + _edit_cost(e.critical),  # a script word left out
                )
            )
        cost.append(row)
        self.matched_min.append(matched_min)


_INFINITE = _OVER_BUDGET * 4


def _edit_cost(critical: bool) -> int:
    return _OVER_BUDGET if critical else 1


class ForbiddenPhrases:
    """Phrases a prompt or flow node must never say, found in normalized text on word boundaries: "Got it"
    matches "got it!" but "schedule" does not match "rescheduled". A trailing "*" makes the last word a
    prefix: "schedul*" matches "scheduled" and "scheduling"."""

    def __init__(self, phrases: Iterable[str], language: Language = "auto") -> None:
        self.language = language
        self._phrases: list[tuple[str, tuple[str, ...], bool]] = []
        # per phrase, its words that only an ordinary or spelled word of the text can match (see _may_occur)
        self._anchors: list[tuple[str, ...]] = []
        for phrase in dict.fromkeys(phrases):
            prefix = phrase.rstrip().endswith("*")
            tokens = _tokenize(phrase.rstrip().rstrip("*"), language)
            if tokens:
                self._phrases.append((phrase, tuple(t.text for t in tokens), prefix))
                self._anchors.append(tuple(_squashed(t.text) for t in tokens
                                           if not t.critical and t.text.isalpha() and t.text not in _UNIT_NAMES))

    def find(self, text: str) -> list[str]:
        """The phrases (as given) that occur in ``text``, in the order they were given."""
        if not self._may_occur(text):
            return []
        words = [t.text for t in _tokenize(text, self.language)]
        found = []
        for phrase, pattern, prefix in self._phrases:
            size = len(pattern)
            for start in range(len(words) - size + 1):
                window = words[start : start + size]
                if window[:-1] == list(pattern[:-1]) and (
                    window[-1] == pattern[-1] or (prefix and window[-1].startswith(pattern[-1]))
                ):
                    found.append(phrase)
                    break
        return found

    def _may_occur(self, text: str) -> bool:
        """Whether some phrase may occur in ``text``, from its letters alone (this runs on every transcript
        delta of a gated answer, and tokenizing the whole transcript, numbers and all, is what costs). A
        text token that equals an anchor (a phrase's word that is no number, unit or spelled run) is an
        ordinary word, casefolded without its apostrophes, or a spelled run joined across the spaces, dots
        and dashes between its letters: either way its letters stand together in the text once the text is
        casefolded and everything but letters and digits is dropped. So a phrase one of whose anchors is
        not there cannot be found; a phrase without anchors (numbers only) always takes the full check."""
        squashed = _squashed(text.casefold())
        return any(all(anchor in squashed for anchor in anchors) for anchors in self._anchors)


_UNIT_NAMES = frozenset(UNIT_FORMS)  # a unit's token is its canonical name, which the text need not spell
_NOT_ALNUM = re.compile(r"[\W_]+")


def _squashed(text: str) -> str:
    return _NOT_ALNUM.sub("", text)
