"""The knowledge base the gate grounds numbers in: markdown documents split into snippets, every number
indexed, fail-closed grounding with citations, lexical retrieval; sans-I/O.

Owns fail-closed grounding (every number of an answer must be found in the knowledge base, and the answer
cites where: docs/how-to/ground-answers.md#rules) and retrieval for retrieve-first
(docs/explanation/validation-gate.md#nodes): ``KnowledgeBase.from_documents({path: text})`` is built from file
contents, never from files, so the validator's shell owns reading, watching and reloading (``version`` tells
it whether a reload changed anything). Must not know calls, audio, clocks, sockets or how the files got here.
The one shell helper, ``load_knowledge_dir``, sits apart at the bottom and is the only code here that touches
a disk.

Snippets (the unit of citation): each heading, each list item, each table row (cells joined by " | ";
the separator row is skipped), and each paragraph (consecutive non-blank lines). Headings above a
snippet, and a table's header row, are kept as its ``context``: used for retrieval, never for grounding.
Retrieval returns only paragraphs, list items and table rows. Numbers are extracted from every snippet
with language "auto", so "1,500" and "3/1/2025" in a document keep both readings (numbers.py).

Grounding a number with what it is said of (``ground_text``, ``judge``; what the validation gate uses),
fail-closed: every number of the answer is read as a claim (claims.py: its subject, days, opening or
closing role, period, counted noun) and so is every number of the knowledge base (a ``Fact``, read with the
knowledge base's labels: a list item's words before ":", a table row's first cell, headings, the words a
sentence opens with). A claim is supported by the first fact (path order, the claim's unit first) whose
number matches it (the rules below) and that:
- measures the same thing: money never a count of lines, a clock time never a count of working days;
- has the same period, when both state one (a file's "All prices are per month" is its prices' period);
- holds for the claim's days, when both name days ("on Saturdays" is not "Monday to Friday");
- is the same end of the opening hours, when both say ("opens at 16:30" is not "closes at 16:30");
- names every subject term of the claim that is not generic (a term most facts stand under, like the
  company name), in its own words, label or subject (a term only headings use: in its headings). A term
  said where a verb stands ("we answer") is needed only when it is the claim's only subject.
A rejected claim's ``ClaimVerdict`` names the nearest passage: the fact that holds its number for something
else, else the fact of the same kind closest to it, else the best retrieved snippet.

Grounding numbers alone (``ground``: the value, without what it is said of), fail-closed: ``ok`` only if
every mention matches some snippet's mention; each mention that matches nothing is listed in
``unverified``. A mention matches a knowledge-base mention when:
- quantities (integer, decimal, percent, amount, ordinal): a reading of the magnitude is equal, and the
  units do not contradict: equal, or the answer states none ("99" may cite "99 kr"), or the knowledge
  base states none next to that number ("99 kr" may cite a table cell "99"). "99 kr" never cites
  "99 GB", "12%" never cites "12 kr".
- phone: equal canonical values, or one is a national form of the other (``phone_variants`` with the
  base's ``home_country``: "+46 70..." = "070..." for home "46"; "+44 70..." is not "070...").
- date: equal; an answer that leaves out the year ("1 mars") or the day ("March 2025") matches a full
  date that agrees on what the answer states; never the other way round.
- time: a reading equal ("halv fem" is 04:30 or 16:30); a whole hour also matches the bare number of the
  hour and back ("kl. 8" and "08-17"), with the unit "clock" so "8 GB" never cites "08:00".
An answer without numbers grounds trivially (ok, no citations): whether it needed sources is the
retrieve-first decision of the caller, made with ``retrieve``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from voicecore.validate.claims import DAYS, Claim, claims_of, leading_terms, related, supported, term_of
from voicecore.validate.numbers import Language, NumberMention, extract_numbers, phone_variants

_QUANTITY_KINDS = frozenset({"integer", "decimal", "percent", "amount", "ordinal"})
_CLOCK = "clock"  # the unit of a whole hour read as a bare number


@dataclass(frozen=True, slots=True)
class Snippet:
    file: str  # the document's key, e.g. "kb/pricing.md"
    index: int  # position of the snippet within its file, from 0
    line: int  # first line of the snippet in its file, from 1
    text: str  # what a citation quotes: markdown markers, link targets and emphasis removed
    context: str  # headings above it and a table's header row: retrieval only
    kind: str = "paragraph"  # "heading", "item" (list item), "header" (table header row), "row", "paragraph"


@dataclass(frozen=True, slots=True)
class Citation:
    file: str
    snippet: str  # the snippet's text
    number: str  # the canonical value of the answer's mention it supports
    line: int


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    """What the knowledge base says of one claim: the passage that supports it, or why none does."""

    claim: Claim
    ok: bool
    citation: Citation | None  # the supporting passage (ok)
    near_miss: Citation | None  # rejected: the passage closest to supporting it, when there is one
    why: str  # rejected: what is wrong with the near miss ("said of basic, not premium"), or "" when ok
    value_found: bool = False  # rejected, but some passage holds the number (for something else)

    def describe(self) -> str:
        """One line for a person: the claim, and its citation or its near miss and why."""
        claim = f"{self.claim.mention.raw!r} in \"{_shorten(self.claim.sentence)}\""
        if self.ok and self.citation is not None:
            return f"{claim}: {self.citation.file}:{self.citation.line} \"{_shorten(self.citation.snippet)}\""
        if self.near_miss is None:
            return f"{claim}: no passage comes near it"
        return (f"{claim}; nearest: {self.near_miss.file}:{self.near_miss.line} "
                f"\"{_shorten(self.near_miss.snippet)}\" ({self.why})")


@dataclass(frozen=True, slots=True)
class GroundingResult:
    ok: bool
    citations: tuple[Citation, ...]  # one per distinct verified number, in answer order
    unverified: tuple[NumberMention, ...]  # in answer order; empty when ok
    verdicts: tuple[ClaimVerdict, ...] = ()  # ground_text: one per claim, in answer order


@dataclass(frozen=True, slots=True)
class KnowledgeStatistics:
    files: int
    snippets: int
    numbers: int  # number mentions indexed
    version: str


# --------------------------------------------------------------------------------------------------
# Markdown -> snippets
# --------------------------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+(.*)$")
_TABLE_SEPARATOR = re.compile(r"^:?-{2,}:?$")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|`)")


def _clean(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    return re.sub(r"\s+", " ", _EMPHASIS.sub("", text)).strip()


def split_markdown(file: str, text: str) -> list[Snippet]:
    """Snippets of one markdown document (the splitting rules are in the module docstring)."""
    snippets: list[Snippet] = []
    headings: list[tuple[int, str]] = []
    paragraph: list[str] = []
    paragraph_line = 0
    table_header: str | None = None
    in_table = False

    def emit(kind: str, line: int, body: str, extra_context: str = "") -> None:
        body = _clean(body)
        if body:
            context = " ".join([h for _, h in headings] + ([extra_context] if extra_context else []))
            snippets.append(Snippet(file, len(snippets), line, body, context, kind))

    def flush() -> None:
        nonlocal paragraph
        if paragraph:
            emit("paragraph", paragraph_line, " ".join(paragraph))
            paragraph = []

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("|"):
            flush()
            cells = [c.strip() for c in stripped.strip("|").split("|")]
            if all(_TABLE_SEPARATOR.match(c) for c in cells if c) and any(cells):
                in_table = True
                continue
            if not in_table:
                table_header = " ".join(cells)
                in_table = True
                emit("header", number, " | ".join(cells))
            else:
                emit("row", number, " | ".join(cells), table_header or "")
            continue
        in_table, table_header = False, None
        if not stripped:
            flush()
            continue
        heading = _HEADING.match(stripped)
        if heading:
            flush()
            level = len(heading[1])
            headings = [h for h in headings if h[0] < level]
            emit("heading", number, heading[2])
            headings.append((level, _clean(heading[2])))
            continue
        item = _LIST_ITEM.match(line)
        if item:
            flush()
            emit("item", number, item[1])
            continue
        if not paragraph:
            paragraph_line = number
        paragraph.append(stripped)
    flush()
    return snippets


# --------------------------------------------------------------------------------------------------
# Retrieval tokens
# --------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[^\W_]+")
_STOPWORDS = frozenset(
    "a an the is are was were be been to of and or in on at for with what how much many does do did can "
    "could would will i you we it its this that my your our me us there their they he she per about from "
    "by as if so not no yes please tell "
    "och i att det som en ett på är för med av till den de har vad hur mycket många kan jag du vi ni man "
    "vill ska om från eller men så hos vilken vilket vilka när var min mitt mina din ditt er ert era oss "
    "dig mig sig inte ja nej är".split()
)


# A few cross-language synonyms of what callers ask about, each group read as one shared token, so
# "Vad kostar Premium?" finds an English price table and "phone" finds "Kontakt".
_CONCEPTS = {
    "price": "cost costs price prices pricing fee fees charge pris priser priset kostar kostnad avgift",
    "hours": "hours open opening opens closed öppet öppettider öppnar stänger",
    "contact": "phone call number contact reach ring ringa telefon nummer kontakt",
    "data": "data surf surfa internet",
}
_CONCEPT_OF = {word: concept for concept, words in _CONCEPTS.items() for word in words.split()}
_RETRIEVABLE = frozenset({"paragraph", "item", "row"})


def _tokens(text: str) -> list[str]:
    words = [t for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS]
    return [f"~{_CONCEPT_OF[w]}" if w in _CONCEPT_OF else w for w in words]


def _related(query: str, doc: str) -> bool:
    """Equal, or one a prefix of the other when both have 4+ letters: "pris" ~ "priser", "öppet" ~
    "öppettider". A crude stemmer for two languages and Swedish compounds, no dependency."""
    if query == doc:
        return True
    if len(query) < 4 or len(doc) < 4 or query.isdigit() or doc.isdigit():
        return False
    return doc.startswith(query) or query.startswith(doc)


# --------------------------------------------------------------------------------------------------
# The knowledge base
# --------------------------------------------------------------------------------------------------


class KnowledgeBase:
    """Snippets and number index of a set of markdown documents; immutable once built."""

    def __init__(self, snippets: Iterable[Snippet], version: str, home_country: str = "46") -> None:
        self.snippets: tuple[Snippet, ...] = tuple(snippets)
        self.version = version
        self.home_country = home_country
        self.mentions: tuple[tuple[NumberMention, ...], ...] = tuple(
            tuple(extract_numbers(s.text, "auto")) for s in self.snippets
        )
        # key -> [(snippet index, mention, unit to compare)] in snippet order
        self._index: dict[tuple[str, str], list[tuple[int, NumberMention, str | None]]] = {}
        for position, mentions in enumerate(self.mentions):
            for mention in mentions:
                for key, unit in _keys(mention, home_country, indexing=True):
                    self._index.setdefault(key, []).append((position, mention, unit))
        self._doc_tokens = [_tokens(f"{s.text} {s.context}") for s in self.snippets]
        self._files = len({s.file for s in self.snippets})
        self.facts, self.labels, self._strong, self._generic, self.names = _read_facts(self.snippets, self.mentions)
        self._label_cache: dict[str, bool] = {}
        self._generic_cache: dict[str, bool] = {}
        self._strong_cache: dict[str, bool] = {}

    @classmethod
    def from_documents(cls, docs: Mapping[str, str], home_country: str = "46") -> KnowledgeBase:
        """Build from {path: markdown text}; documents are indexed in path order. ``home_country`` is
        the calling code national phone numbers in the documents and answers belong to."""
        digest = hashlib.sha256()
        snippets: list[Snippet] = []
        for path in sorted(docs):
            text = docs[path]
            for part in (path, text):
                encoded = part.encode("utf-8", "surrogatepass")
                digest.update(len(encoded).to_bytes(8, "big") + encoded)
            snippets.extend(split_markdown(path, text))
        digest.update(home_country.encode())
        return cls(snippets, digest.hexdigest()[:16], home_country)

    def statistics(self) -> KnowledgeStatistics:
        return KnowledgeStatistics(self._files, len(self.snippets), sum(map(len, self.mentions)), self.version)

    # -- grounding: every number needs a fact that holds it, or the answer fails ---------------

    def ground(self, mentions: Iterable[NumberMention]) -> GroundingResult:
        """Fail-closed: ok only if every mention is found (matching rules: module docstring)."""
        citations: list[Citation] = []
        seen: set[tuple[str, int, str]] = set()
        unverified: list[NumberMention] = []
        for mention in mentions:
            found = self._find(mention)
            if found is None:
                unverified.append(mention)
                continue
            snippet = self.snippets[found]
            key = (snippet.file, snippet.index, mention.value)
            if key not in seen:
                seen.add(key)
                citations.append(Citation(snippet.file, snippet.text, mention.value, snippet.line))
        return GroundingResult(not unverified, tuple(citations), tuple(unverified))

    def ground_text(self, text: str, language: Language = "auto") -> GroundingResult:
        """Ground every number of an answer together with what the answer says it is: each claim
        (claims.py) must be supported by a fact of the knowledge base (``judge``)."""
        verdicts = [self.judge(claim) for claim in self.claims(text, language)]
        citations: list[Citation] = []
        for verdict in verdicts:
            if verdict.citation is not None and verdict.citation not in citations:
                citations.append(verdict.citation)
        unverified = tuple(v.claim.mention for v in verdicts if not v.ok)
        return GroundingResult(not unverified, tuple(citations), unverified, tuple(verdicts))

    # -- claims: a number with what it is said of --------------------------------------------------

    def is_label(self, term: str) -> bool:
        """Whether the knowledge base uses ``term`` to say what a number is of (claims.py ``subject``)."""
        known = self._label_cache.get(term)
        if known is None:
            known = self._label_cache[term] = supported(term, self.labels)
        return known

    def claims(self, text: str, language: Language = "auto", mentions: list[NumberMention] | None = None) -> list[Claim]:
        """The claims of an answer, their subjects read with this knowledge base's labels."""
        found = extract_numbers(text, language) if mentions is None else mentions
        return claims_of(text, found, self.is_label, names=self.names)

    def judge(self, claim: Claim, labels_of: KnowledgeBase | None = None) -> ClaimVerdict:
        """The first fact (in path order; one stating the claim's unit first) that holds the claim's number
        and supports what the claim says it is (``_mismatch``), cited; else the near miss. Fail-closed."""
        candidates = self._candidates(claim.mention)
        misses: list[tuple[int, Fact, str]] = []
        for fact in candidates:
            why = self._mismatch(claim, fact)
            if not why:
                return ClaimVerdict(claim, True, self._citation(fact, claim.mention.value), None, "")
            misses.append((self._closeness(claim, fact), fact, why))
        if misses:
            _, fact, why = max(misses, key=lambda m: m[0])
            return ClaimVerdict(claim, False, None, self._citation(fact, claim.mention.value), why, value_found=True)
        return self._near_miss(claim)

    def holds(self, mention: NumberMention) -> bool:
        """Some fact holds this number (whatever it is said of)."""
        return bool(self._candidates(mention))

    def _candidates(self, mention: NumberMention) -> list[Fact]:
        """Facts whose number matches the mention (module docstring), those stating its unit first."""
        same_unit: list[Fact] = []
        others: list[Fact] = []
        seen: set[tuple[int, int]] = set()
        for key, unit in _keys(mention, self.home_country, indexing=False):
            for position, candidate, candidate_unit in self._index.get(key, ()):
                if key[0] == "phone" and candidate.value.startswith("+") and mention.value.startswith("+"):
                    if candidate.value != mention.value:
                        continue
                if unit is not None and candidate_unit is not None and unit != candidate_unit:
                    continue
                k = self.mentions[position].index(candidate)
                if (position, k) in seen:
                    continue
                seen.add((position, k))
                fact = self.facts[position][k]
                (same_unit if unit is not None and unit == candidate_unit else others).append(fact)
        ordered = sorted(same_unit, key=lambda f: f.position) + sorted(others, key=lambda f: f.position)
        return ordered

    def _required(self, claim: Claim) -> list[str]:
        """The subject terms a supporting fact must name: every one that is not generic (or the first,
        when all are); a term said where a verb stands ("we answer", "du når") only when no other is left."""
        specific = [t for t in claim.subject if not self._is_generic(t)]
        firm = [t for t in specific if t not in claim.soft]
        return firm or specific or list(claim.subject[:1])

    def _is_generic(self, term: str) -> bool:
        known = self._generic_cache.get(term)
        if known is None:
            known = self._generic_cache[term] = supported(term, self._generic)
        return known

    def _names(self, fact: Fact, term: str) -> bool:
        """Whether ``fact`` says ``term`` of its number: in its own words and label, or, for a term only
        headings use ("## Add-ons"), in the headings it stands under."""
        if supported(term, fact.support):
            return True
        return not self._is_strong(term) and supported(term, fact.context)

    def _is_strong(self, term: str) -> bool:
        known = self._strong_cache.get(term)
        if known is None:
            known = self._strong_cache[term] = supported(term, self._strong)
        return known

    def _mismatch(self, claim: Claim, fact: Fact) -> str:
        """"" when ``fact`` supports ``claim``, else what differs, for a person to read."""
        theirs = fact.claim
        if not _classes_agree(claim, theirs):
            return f"there it is {_class_phrase(theirs)}, not {_class_phrase(claim)}"
        if claim.period and fact.period and claim.period != fact.period:
            return f"there it is per {fact.period}, not per {claim.period}"
        if claim.days and fact.days and not claim.days <= fact.days:
            return f"there it holds for {days_phrase(fact.days)}, not {days_phrase(claim.days)}"
        if claim.role and theirs.role and claim.role != theirs.role:
            return f"there it is {_ROLE_PHRASE[theirs.role]}, not {_ROLE_PHRASE[claim.role]}"
        for term in self._required(claim):
            if not self._names(fact, term):
                said_of = ", ".join(fact.labels[:2]) or "something else"
                return f"there it is said of {said_of}, not of {term}"
        return ""

    def _closeness(self, claim: Claim, fact: Fact) -> tuple[int, int, int, int]:
        subject = sum(1 for t in claim.subject if self._names(fact, t))
        terms = sum(1 for t in claim.terms if supported(t, fact.support))
        days = 1 if claim.days and fact.days and claim.days <= fact.days else 0
        role = 1 if claim.role and claim.role == fact.claim.role else 0
        return subject + days + role, terms, -fact.position

    def _near_miss(self, claim: Claim) -> ClaimVerdict:
        """No fact holds the number: the fact of the same kind whose support covers most of the claim."""
        best: tuple[tuple[int, int, int], Fact] | None = None  # (closeness, fact)
        for facts in self.facts:
            for fact in facts:
                if not _classes_agree(claim, fact.claim) or fact.claim.mention.kind != claim.mention.kind and \
                        claim.unit_class != fact.claim.unit_class:
                    continue
                closeness = self._closeness(claim, fact)
                if closeness[0] + closeness[1] == 0:
                    continue
                if best is None or closeness > best[0]:
                    best = (closeness, fact)
        if best is not None:
            fact = best[1]
            return ClaimVerdict(claim, False, None, self._citation(fact, fact.claim.mention.value),
                                f"it says {fact.claim.mention.raw}")
        found = self.retrieve(claim.sentence, 1)
        if found:
            snippet = found[0]
            return ClaimVerdict(claim, False, None, Citation(snippet.file, snippet.text, "", snippet.line),
                                "the closest passage; it does not state that number")
        return ClaimVerdict(claim, False, None, None, "")

    def _citation(self, fact: Fact, number: str) -> Citation:
        snippet = self.snippets[fact.position]
        return Citation(snippet.file, snippet.text, number, snippet.line)

    def _find(self, mention: NumberMention) -> int | None:
        """The first snippet (in path order) holding a match; one with the same unit wins over one
        without, so a citation shows the unit when the knowledge base has it."""
        fallback: int | None = None
        for key, unit in _keys(mention, self.home_country, indexing=False):
            for position, candidate, candidate_unit in self._index.get(key, ()):
                if key[0] == "phone" and candidate.value.startswith("+") and mention.value.startswith("+"):
                    if candidate.value != mention.value:
                        continue
                if unit is None or candidate_unit is None:
                    if unit is not None and fallback is None:
                        fallback = position
                    elif unit is None:
                        return position
                    continue
                if unit == candidate_unit:
                    return position
        return fallback

    # -- retrieve-first: the snippets an answer is given before it is asked for ----------------

    def retrieve(self, question: str, k: int = 3) -> list[Snippet]:
        """The k snippets most relevant to a question (BM25 over lowercase word tokens of the snippet
        and its context, with prefix matching, a few synonym groups, English and Swedish stopwords
        removed); only paragraphs, list items and table rows sharing a term, best first, ties in path
        order. An empty list means no support: the caller fails closed (a question that needs numbers gets the
        safe line)."""
        query = list(dict.fromkeys(_tokens(question)))
        if not query or not self.snippets or k <= 0:
            return []
        n = len(self.snippets)
        average = sum(map(len, self._doc_tokens)) / n or 1.0
        k1, b = 1.2, 0.75
        scores = [0.0] * n
        for term in query:
            counts = [sum(1 for t in doc if _related(term, t)) for doc in self._doc_tokens]
            holding = sum(1 for c in counts if c)
            if not holding:
                continue
            idf = math.log(1 + (n - holding + 0.5) / (holding + 0.5))
            for position, count in enumerate(counts):
                if count:
                    length = len(self._doc_tokens[position])
                    scores[position] += idf * count * (k1 + 1) / (count + k1 * (1 - b + b * length / average))
        ranked = sorted(
            (p for p in range(n) if scores[p] > 0 and self.snippets[p].kind in _RETRIEVABLE),
            key=lambda p: (-scores[p], p),
        )
        return [self.snippets[p] for p in ranked[:k]]


def _keys(mention: NumberMention, home_country: str, indexing: bool) -> list[tuple[tuple[str, str], str | None]]:
    """Keys a mention is indexed under (``indexing``) or looked up under, with the unit to compare."""
    if mention.kind in _QUANTITY_KINDS:
        magnitudes = dict.fromkeys(r[:-1] if mention.kind == "percent" else r for r in mention.readings)
        return [(("num", m), mention.unit) for m in magnitudes]
    if mention.kind == "phone":
        return [(("phone", v), None) for v in phone_variants(mention.value, home_country)]
    if mention.kind == "date":
        keys: list[tuple[tuple[str, str], str | None]] = []
        for reading in mention.readings:
            keys.append((("date", reading), None))
            if indexing and len(reading) == 10 and not reading.startswith("--"):
                keys.append((("date", "--" + reading[5:]), None))  # an answer may leave out the year
                keys.append((("date", reading[:7]), None))  # or the day
        return keys
    if mention.kind == "time":
        return _time_keys(mention)
    return []


def _time_keys(mention: NumberMention) -> list[tuple[tuple[str, str], str | None]]:
    keys: list[tuple[tuple[str, str], str | None]] = []
    for reading in mention.readings:  # "halv fem" is 04:30 or 16:30
        keys.append((("time", reading), None))
        hour, minute = reading.split(":")
        if minute == "00":
            keys.append((("num", str(int(hour))), _CLOCK))
    return keys


# --------------------------------------------------------------------------------------------------
# Facts: the knowledge base's numbers with what each is said of
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fact:
    """One number of a snippet, read as a claim (claims.py), with everything that supports a claim of it:
    its own terms and subject, the snippet's label (a list item's words before ":", a table row's first
    cell), its headings and table header (``support``), and the terms it is labelled by (``labels``)."""

    position: int  # the snippet's index in KnowledgeBase.snippets
    claim: Claim
    support: frozenset[str]
    labels: tuple[str, ...]  # what it is of: its label, else its subject, else the words its sentence opens with
    days: frozenset[int] | None  # its own, else its headings'
    period: str | None = None  # its own, else the one its file states for prices ("All prices are per month")
    context: frozenset[str] = frozenset()  # the terms of its headings and table header


_LABEL_MAX_WORDS = 6


def _terms(text: str) -> list[str]:
    return [t for t in (term_of(w) for w in _TOKEN.findall(text)) if t is not None]


def _raw_label_words(snippet: Snippet) -> list[str]:
    if snippet.kind == "row":
        return _TOKEN.findall(snippet.text.split(" | ")[0])
    head, colon, _ = snippet.text.partition(":")
    return _TOKEN.findall(head) if colon and len(head.split()) <= _LABEL_MAX_WORDS else []


def _snippet_label(snippet: Snippet) -> list[str]:
    if snippet.kind == "row":
        cell = snippet.text.split(" | ")[0]
        return [w.casefold() if w[:1].isupper() and term_of(w) is None and w.isalpha() and len(w) >= 3 else t
                for w in _TOKEN.findall(cell) if (t := term_of(w)) is not None or w[:1].isupper() and w.isalpha() and len(w) >= 3]
    if snippet.kind == "heading":
        return _terms(snippet.text)
    head, colon, _ = snippet.text.partition(":")
    if colon and len(head.split()) <= _LABEL_MAX_WORDS:
        return _terms(head)
    return []


def _read_facts(snippets: tuple[Snippet, ...], mentions: tuple[tuple[NumberMention, ...], ...]):
    """Every snippet's facts, the labels of the knowledge base (all, and by the class of what their facts
    measure) and its generic terms. Two passes: the labels come first (a list item's words before ":",
    a table row's first cell, headings, the words each sentence opens with), then each number is read
    as a claim with them, so "A new SIM card costs 0 kr and arrives within 3 working days" says the 3 of
    the SIM card, and "Basic costs 99 kr and Premium costs 349 kr" keeps 99 and 349 apart."""
    structural = [_snippet_label(snippet) for snippet in snippets]
    # a label that is a stop word elsewhere ("Mellan", "between"): a name when capitalized
    names = frozenset(w.casefold() for snippet in snippets for w in _raw_label_words(snippet)
                      if w[:1].isupper() and term_of(w) is None and len(w) >= 3 and w.isalpha())
    first_pass = [claims_of(snippet.text, list(found)) if found else [] for snippet, found in zip(snippets, mentions)]
    labels: set[str] = {t for label in structural for t in label}
    labels |= {t for snippet in snippets if snippet.kind == "heading" for t in _terms(snippet.text) if t[0] != "~"}
    labels |= {t for claims in first_pass for claim in claims for t in leading_terms(claim.sentence)}
    frozen = frozenset(labels)
    cache: dict[str, bool] = {}

    def is_label(term: str) -> bool:
        if term not in cache:
            cache[term] = supported(term, frozen)
        return cache[term]

    facts: list[tuple[Fact, ...]] = []
    strong: set[str] = set()  # labels a fact names itself (not only a heading above it)
    under: list[frozenset[str]] = []  # every fact's support with its headings: what counts as generic
    default_period: dict[str, str] = {}  # file -> "All prices are per month" said above its price facts
    for position, (snippet, found) in enumerate(zip(snippets, mentions)):
        if not found:
            period = _stated_period(snippet.text) if snippet.kind in ("paragraph", "item") else None
            if period is not None:
                default_period[snippet.file] = period
            facts.append(())
            continue
        label = structural[position]
        context = frozenset(_terms(snippet.context))
        context_days = _context_days(snippet.context)
        out = []
        for claim in claims_of(snippet.text, list(found), is_label, inherit_all=True, names=names):
            leading = leading_terms(claim.sentence)
            own = label or list(claim.subject) or leading
            support = claim.terms | frozenset(claim.subject) | claim.setting | frozenset(label)
            if not label and not claim.subject:
                support |= frozenset(leading)
            if not own:
                support |= context  # a fact that names nothing itself is about its headings ("## Premium")
            fact_labels = tuple(dict.fromkeys(t for t in own if t[0] != "~"))
            period = claim.period or (default_period.get(snippet.file) if claim.unit_class == "money" else None)
            out.append(Fact(position, claim, support, fact_labels, claim.days or context_days, period, context))
            strong.update(fact_labels)
            under.append(support | context)
        facts.append(tuple(out))
    counts: dict[str, int] = {}
    for terms in under:
        for term in terms:
            counts[term] = counts.get(term, 0) + 1
    total = len(under)
    # a label most facts are said under (the company name in the top heading, the "Plans" a price table
    # stands under) distinguishes nothing: a claim need not repeat it (KnowledgeBase._required)
    generic = frozenset(t for t, n in counts.items() if total >= 3 and n * 3 >= total)
    return tuple(facts), frozen | strong, frozenset(strong), generic, names


_PERIOD_STATED = re.compile(
    r"(?<![^\W\d_])(?:per|/|each|every|i|om|varje|a)\s*(?:the\s+)?(month|månad|månaden|year|år|året|week|vecka|"
    r"veckan)(?![^\W\d_])|(?<![^\W\d_])(monthly|yearly|månadsvis)(?![^\W\d_])",
    re.IGNORECASE,
)
_PERIOD_NAMES = {"month": "month", "månad": "month", "månaden": "month", "monthly": "month", "månadsvis": "month",
                 "year": "year", "år": "year", "året": "year", "yearly": "year", "week": "week", "vecka": "week",
                 "veckan": "week"}


def _stated_period(text: str) -> str | None:
    """The period a numberless passage says prices are given for ("All prices are per month")."""
    if not any(term_of(w) == "~price" for w in _TOKEN.findall(text)):
        return None
    m = _PERIOD_STATED.search(text)
    return _PERIOD_NAMES[(m[1] or m[2]).lower()] if m else None


def _context_days(context: str) -> frozenset[int] | None:
    days: set[int] = set()
    for word in _TOKEN.findall(context.lower()):
        days |= DAYS.get(word, frozenset())
    return frozenset(days) or None


_CLASS_WORDS = {"money": "an amount of money", "data": "an amount of data", "percent": "a percentage",
                "duration": "a duration", "time": "a clock time", "date": "a date", "phone": "a phone number"}
_ROLE_PHRASE = {"start": "an opening time", "end": "a closing time"}
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _class_phrase(claim: Claim) -> str:
    if claim.unit_class == "count":
        return f"a count of {claim.noun}"
    return _CLASS_WORDS.get(claim.unit_class or "", "a number")


def days_phrase(days: frozenset[int]) -> str:
    """Days of the week for a person: "Monday-Friday", "Saturday, Sunday"."""
    ordered = sorted(days)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{_DAY_NAMES[ordered[0]]}-{_DAY_NAMES[ordered[-1]]}"
    return ", ".join(_DAY_NAMES[d] for d in ordered)


def _unit_forms(unit: str) -> tuple[str, ...]:
    from voicecore.validate.numbers import UNIT_FORMS

    return UNIT_FORMS.get(unit, ())


def _classes_agree(claim: Claim, fact: Claim) -> bool:
    """What the two numbers measure may be the same: money never grounds a count of lines, a clock time
    never a count of working days. Unknown on either side agrees."""
    a, b = claim.unit_class, fact.unit_class
    if a is None or b is None or a == b and a != "count":
        return True
    if a == "count" and b == "count":
        return related(claim.noun or "", fact.noun or "") if claim.noun and fact.noun else True
    if "count" in (a, b):
        counted, other = (claim, fact) if a == "count" else (fact, claim)
        forms = _unit_forms(other.mention.unit or "")
        return bool(counted.noun) and any(related(counted.noun, f) for f in forms if len(f) >= 3)  # type: ignore[arg-type]
    return a == b


def _shorten(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def facts_document(text: str) -> str:
    """A tool result as a knowledge document: JSON becomes one list item per object, "key: value" pairs
    joined by ", " after a label of the keys it stands under and its words-only values ("- slots Anna:
    time: 10:00, dentist: Anna"), so each object's numbers are facts of its own keys and names; other text
    is kept as it is."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, (dict, list)):
        return text
    lines: list[str] = []

    def scalar(v) -> str:
        return "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    def walk(node, path: list[str]) -> None:
        if isinstance(node, dict):
            pairs = [f"{_words_of(k)}: {scalar(v)}" for k, v in node.items() if not isinstance(v, (dict, list))]
            names = [v for v in node.values() if isinstance(v, str) and v.strip() and len(v) <= 40
                     and not any(ch.isdigit() for ch in v)]
            if pairs:
                label = " ".join(path + names)
                lines.append("- " + (f"{label}: " if label else "") + ", ".join(pairs))
            for k, v in node.items():
                if isinstance(v, (dict, list)):
                    walk(v, path + [_words_of(k)])
        elif isinstance(node, list):
            for item in node:
                if isinstance(item, (dict, list)):
                    walk(item, path)
                else:
                    lines.append("- " + (" ".join(path) + ": " if path else "") + scalar(item))

    walk(value, [])
    return "\n".join(lines) if lines else text


def _words_of(key: str) -> str:
    return re.sub(r"[_\-]+", " ", str(key)).strip()


# --------------------------------------------------------------------------------------------------
# Shell helper: the only disk access in this module (the validator's main calls it, then
# KnowledgeBase.from_documents; comparing ``version`` tells it whether a reload changed anything).
# --------------------------------------------------------------------------------------------------


def load_knowledge_dir(path) -> dict[str, str]:
    """Every *.md file under ``path`` (recursively) as {"<dir name>/<relative path>": text}, UTF-8.

    Keys use "/" and start with the folder's own name, so a citation reads "kb/pricing.md".
    """
    from pathlib import Path

    root = Path(path)
    return {
        f"{root.name}/{file.relative_to(root).as_posix()}": file.read_text(encoding="utf-8")
        for file in sorted(root.rglob("*.md"))
        if file.is_file()
    }
