"""What a text says each of its numbers is: claims that bind a number to its subject; sans-I/O.

A number alone is no fact: "299 kr" is true of Basic and false of Premium, "3" may count phone lines and
never be a price, "five" may be an opening hour that the knowledge base says is 16:30. This module reads,
for every number mention of a text (numbers.py), what the sentence around it says it is:

- ``subject``: the words that name what the number is of ("premium", "cleaning", "lördag"), among the
  words the knowledge base uses as labels (``labels``: a list item's label before ":", a table row's first
  cell, a heading, the word just before a number in prose). Words the knowledge base never uses as a label
  ("lovely", "appointment" in a knowledge base whose labels are products) cannot be checked and are left out.
- ``terms``: every content word the number is attributed (its clause's words, each given to the nearest
  number), with a few synonym groups ("~price": costs, kostar, avgift; "~hours": open, stänger) shared by
  English and Swedish; the knowledge base's side of a comparison (``Fact.support``) adds its label, its
  headings and its table header.
- ``days``: the days of the week it holds for ("on Saturdays", "måndag–fredag", "weekdays"), ``role``
  of a clock time ("start": opens at, from; "end": closes at, until), ``period`` of a price ("per
  month", "/månad", "om året"), ``noun`` a plain count names ("3 lines"), ``unit_class`` (money, data,
  percent, duration, count, or the kind of a clock time, date or phone number).

How a word finds its number (both the answer's claims and the knowledge base's facts are read this way):
sentences end at ".", "!", "?" (not after "kl.", "ca." and the like) and line breaks; clauses at ",", ";",
":", brackets and the conjunctions and/but/or/och/men/eller/samt/medan. Within a clause each content word
belongs to the nearest number (ties: both). A number whose clause names no label inherits the subject of
the number before it in the clause, else the labels of the nearest clause before it in the text that has
any ("For Premium, it costs 349 kr"; "Premium is our biggest plan. It costs 349 kr"). Days attach to the
numbers of their clause (before or after them), else to later numbers of the sentence ("On Saturdays we
open at 10 and close at 14").

A claim is ``closed`` once its clause has ended (or six words followed it): the validator judges it then,
not earlier, so what the rest of the clause says ("... on Saturdays", "... per year") is part of it.
Must not know knowledge bases' files, calls, audio or clocks; knowledge.py decides what supports a claim.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from voicecore.validate.numbers import (
    EN_NUMBER_WORDS,
    SV_NUMBER_MORPHEMES,
    UNIT_FORMS,
    NumberMention,
    _sv_values,
)

# -- vocabulary ---------------------------------------------------------------------------------------

# Synonym groups read as one term, in both languages: what a number is said to be (its attribute).
CONCEPTS = {
    "price": "cost costs price prices pricing priced fee fees charge charges pay pays paid pris priser priset "
             "prisen kostar kosta kostnad kostnaden avgift avgiften avgifter betala betalar",
    "hours": "hours open opening opens closed close closes closing öppet öppettider öppnar öppna stänger "
             "stängt stänga",
    "contact": "phone call calls number contact reach ring ringa ringer telefon telefonnummer nummer numret "
               "kontakt nå når",
    "data": "data surf surfa internet",
    "discount": "discount discounts off rabatt rabatten rabatter",
}
CONCEPT_OF = {word: "~" + concept for concept, words in CONCEPTS.items() for word in words.split()}

STOPWORDS = frozenset(
    # English function words and words that say nothing of what a number is
    "a an the is are was were be been being am has have had having get gets got give gives gave include "
    "includes included including take takes took come comes came offer offers can could will would shall "
    "should may might must do does did also only just still then now currently today here there this that "
    "these those it its it's our your my their his her we you they us them me i he she who which what when "
    "where how why all any some each every per about around approximately roughly exactly almost nearly "
    "over under up down out off on in at to from for with without of by as than more less most least very "
    "really so too yes no not please thank thanks okay ok sure well great good happy glad help let know like "
    "and or but if into onto within until till between after before during since usually normally always "
    "typically one ones whole entire total right now "
    # Swedish
    "och i att det som en ett på är för med av till den de har vad hur mycket många kan jag du vi ni man "
    "vill ska om från eller men så hos vilken vilket vilka när var min mitt mina din ditt er ert era oss "
    "dig mig sig inte ja nej vara varit blir bli hade ha får fick få ingår ingick inkluderar inkluderat "
    "inklusive ger gav kommer kunde skulle måste bör också bara än nu idag här där detta denna dessa dem "
    "han hon vår vårt våra sin sitt sina varje cirka ungefär runt över under upp ner ut utan mer mindre "
    "mest minst väldigt tack gärna okej bra hjälpa veta gäller alltid oftast vanligtvis samma hela totalt "
    "inom efter innan före sedan mellan tills klockan kl clock alla allt again too igen även "
    "oftast".split()
)
_CONJUNCTIONS = frozenset({"and", "but", "or", "while", "whereas", "och", "men", "eller", "samt", "medan"})
_ABBREVIATIONS = frozenset({"kl", "ca", "tel", "nr", "etc", "eg", "ie", "mr", "mrs", "dr", "st", "no", "vs",
                            "approx", "inkl", "exkl", "tex", "bla", "mån", "tis", "ons", "tors", "fre", "lör",
                            "sön", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "okt", "oct",
                            "nov", "dec", "p", "a", "m"})
_UNIT_WORDS = frozenset(form for forms in UNIT_FORMS.values() for form in forms if form.isalpha()) | {
    "månaden", "året", "veckan", "dagen", "timmen", "månadsvis", "monthly", "yearly", "weekly", "daily",
    "årligen", "öre", "cent", "cents", "o'clock", "oclock", "am", "pm"}
_MONTH_WORDS = frozenset(
    "january february march april may june july august september october november december januari februari "
    "mars maj juni juli augusti oktober".split()
)

# Days of the week: Monday is 0. Plurals and Swedish definite forms are the same day.
_EN_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_SV_DAYS = ("måndag", "tisdag", "onsdag", "torsdag", "fredag", "lördag", "söndag")
_WEEKDAYS = frozenset(range(5))
_WEEKEND = frozenset({5, 6})
DAYS: dict[str, frozenset[int]] = {}
for _i, (_en, _sv) in enumerate(zip(_EN_DAYS, _SV_DAYS)):
    for _form in (_en, _en + "s", _en[:3], _sv, _sv + "ar", _sv + "en", _sv + "arna", _sv[:3]):
        DAYS[_form] = frozenset({_i})
DAYS.update({
    "weekday": _WEEKDAYS, "weekdays": _WEEKDAYS, "vardag": _WEEKDAYS, "vardagar": _WEEKDAYS, "vardagarna": _WEEKDAYS,
    "weekend": _WEEKEND, "weekends": _WEEKEND, "helg": _WEEKEND, "helger": _WEEKEND, "helgen": _WEEKEND,
    "helgerna": _WEEKEND,
})
DAYS["tue"] = DAYS["tues"] = DAYS["tuesday"]
DAYS["thu"] = DAYS["thur"] = DAYS["thurs"] = DAYS["thursday"]
_DAY_RANGE_LINKS = frozenset({"to", "through", "till", "-", "–", "—"})

_START_CUES = frozenset({"open", "opens", "opening", "from", "starts", "start", "öppnar", "från", "börjar"})
_END_CUES = frozenset({"close", "closes", "closing", "until", "till", "tills", "stänger", "slutar", "to"})
_RANGE_LINKS = frozenset({"to", "till", "-", "–", "—", "and", "och"})

_PERIOD_WORDS = {
    "month": "month", "months": "month", "månad": "month", "månaden": "month", "mån": "month", "mo": "month",
    "year": "year", "years": "year", "år": "year", "året": "year", "yr": "year",
    "week": "week", "weeks": "week", "vecka": "week", "veckan": "week",
    "day": "day", "days": "day", "dag": "day", "dagen": "day", "dygn": "day",
    "hour": "h", "hours": "h", "timme": "h", "timmen": "h", "h": "h",
    "minute": "min", "minutes": "min", "minut": "min", "minuten": "min", "min": "min",
}
_PERIOD_AFTER = re.compile(
    r"\s*(?:(?:/|per|a|an|each|every|i|om|varje|in)\s*(?:the\s+)?([^\W\d_]+)|(monthly|yearly|annually|weekly|"
    r"daily|månadsvis|årligen|hourly))(?![^\W\d_])",
    re.IGNORECASE,
)
_PERIOD_ADVERBS = {"monthly": "month", "månadsvis": "month", "yearly": "year", "annually": "year",
                   "årligen": "year", "weekly": "week", "daily": "day", "hourly": "h"}

UNIT_CLASS = {
    "kr": "money", "usd": "money", "eur": "money", "gbp": "money",
    "kb": "data", "mb": "data", "gb": "data", "tb": "data", "mbit": "data",
    "%": "percent",
    "min": "duration", "h": "duration", "day": "duration", "week": "duration", "month": "duration", "year": "duration",
}
_QUANTITY_KINDS = frozenset({"integer", "decimal", "percent", "amount", "ordinal"})

_TOKEN = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*|[.!?]+|[,;:()\[\]]|\n")
_SENTENCE_ENDS = frozenset({".", "!", "?", "\n"})
_CLAUSE_ENDS = frozenset({",", ";", ":", "(", ")", "[", "]"})
CLOSE_AFTER_WORDS = 6  # a clause this many words past its number is judged even before it ends


@lru_cache(maxsize=16384)
def term_of(word: str) -> str | None:
    """The term a word counts as: its concept ("~price"), itself (casefolded), or None for a word that
    says nothing of what a number is (a stop word, a number word, a unit, a month, a day)."""
    w = word.casefold().replace("’", "").replace("'", "")
    if w in CONCEPT_OF:
        return CONCEPT_OF[w]
    if len(w) < 2 or not w.isalpha() or w in STOPWORDS or w in _UNIT_WORDS or w in _MONTH_WORDS or w in DAYS:
        return None
    if w in EN_NUMBER_WORDS or w in SV_NUMBER_MORPHEMES or (len(w) <= 40 and _sv_values(w) is not None):
        return None
    return w


def related(a: str, b: str) -> bool:
    """Two terms name the same thing: equal, or (4+ letters each) one is a prefix of the other ("pris" ~
    "priser", "cleaning" ~ "cleanings") or the head of a Swedish compound ("dagar" ~ "arbetsdagar")."""
    if a == b:
        return True
    if a[0] == "~" or b[0] == "~" or len(a) < 4 or len(b) < 4:
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if long_.startswith(short) or long_.endswith(short):
        return True
    # a shared stem of 6+ letters that is most of the shorter word: "studenter" ~ "studentrabatt"
    common = 0
    for x, y in zip(short, long_):
        if x != y:
            break
        common += 1
    return common >= 6 and common * 4 >= len(short) * 3


def supported(term: str, support: Iterable[str]) -> bool:
    return any(related(term, s) for s in support)


# -- claims -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """One number of a text and what the text says it is (module docstring)."""

    mention: NumberMention
    sentence: str  # the sentence it stands in, stripped
    subject: tuple[str, ...]  # label terms naming what it is of, nearest first
    terms: frozenset[str]  # every term attributed to it (concepts included)
    days: frozenset[int] | None
    role: str  # "start", "end" or "" (a clock time's place in opening hours)
    period: str | None  # a price's period: month, year, week, day, h
    noun: str | None  # what a plain count counts ("lines")
    unit_class: str | None
    closed: bool  # its clause has ended: later text cannot change the claim
    head: str | None = None  # the content word nearest before it in its clause (else after): a label candidate
    setting: frozenset[str] = frozenset()  # terms of the clauses of its sentence that hold no number
    soft: frozenset[str] = frozenset()  # subject terms said where a verb stands ("we answer"): needed only alone

    @property
    def concepts(self) -> frozenset[str]:
        return frozenset(t for t in self.terms if t[0] == "~")


@dataclass(slots=True)
class _Word:
    word: str  # casefolded
    term: str | None
    start: int
    end: int
    sentence: int
    clause: int
    verb: bool = False  # stands where a verb does: after a subject pronoun ("we answer", "du når")


# A word right after one of these (and the auxiliaries after them) is the verb of the clause, never its
# subject: "We answer on 3 lines", "Du kan lämna tillbaka en telefon".
_PRONOUNS = frozenset("i we you they he she it jag vi du ni de han hon den det man".split())
_AUXILIARIES = frozenset("can will would could should may must do does did also just kan ska kommer vill måste får "
                         "brukar också bara".split())


def claims_of(text: str, mentions: list[NumberMention], labels: Callable[[str], bool] | None = None,
              inherit_all: bool = False, names: frozenset[str] = frozenset()) -> list[Claim]:
    """The claim of every mention (``mentions``: ``extract_numbers(text)``, in text order). ``labels``
    tells which terms can name a subject; None: every content word can. A number whose clause names no
    subject inherits the first label of the clause before (``inherit_all``: all of them, how a knowledge
    base reads its own facts, generously). ``names``: words that are names when capitalized, though
    otherwise stop words (a product called "Mellan", "between" in Swedish)."""
    if not mentions:
        return []
    is_label = labels or (lambda term: True)
    words, number_at, sentence_spans, clause_closed = _scan(text, mentions, names)
    days_of = _days(text, words, number_at, mentions)
    # attribution: each content word of a clause to the nearest number(s) of that clause (positions are
    # indexes into `words`, where number i stands at number_at[i])
    by_clause: dict[int, list[int]] = {}
    for i, position in enumerate(number_at):
        by_clause.setdefault(words[position].clause, []).append(i)
    attributed: list[list[tuple[int, int, str, bool]]] = [[] for _ in mentions]  # (after it, distance, term, verb)
    heads: list[str | None] = [None] * len(mentions)
    clause_labels: dict[int, list[str]] = {}
    clause_terms: dict[int, list[str]] = {}
    clause_sentence: dict[int, int] = {}
    for position, w in enumerate(words):
        clause_sentence[w.clause] = w.sentence
        if w.term is None:
            continue
        clause_terms.setdefault(w.clause, []).append(w.term)
        if w.term[0] != "~" and not w.verb and is_label(w.term):
            clause_labels.setdefault(w.clause, []).append(w.term)
        numbers = by_clause.get(w.clause)
        if not numbers:
            continue
        distances = [(abs(number_at[i] - position), i) for i in numbers]
        nearest = min(d for d, _ in distances)
        for d, i in distances:
            if d == nearest:
                attributed[i].append((0 if position < number_at[i] else 1, d, w.term, w.verb))
    for i, position in enumerate(number_at):
        before = [w.term for w in words[:position] if w.clause == words[position].clause and w.term and w.term[0] != "~"]
        after = [w.term for w in words[position + 1:] if w.clause == words[position].clause and w.term and w.term[0] != "~"]
        heads[i] = before[-1] if before else (after[0] if after else None)
    out: list[Claim] = []
    previous_subject: dict[int, tuple[str, ...]] = {}  # clause -> subject of its last number so far
    for i, mention in enumerate(mentions):
        position = number_at[i]
        clause = words[position].clause
        terms = sorted(attributed[i])
        subject = tuple(dict.fromkeys(t for _, _, t, _ in terms if t[0] != "~" and is_label(t)))
        soft = frozenset(t for _, _, t, verb in terms if verb) - {t for _, _, t, verb in terms if not verb}
        keep = None if inherit_all else 1
        if not subject:
            subject = previous_subject.get(clause, ())[:keep]
        if not subject:
            earlier = [c for c in clause_labels if c < clause]
            if earlier:
                subject = tuple(dict.fromkeys(clause_labels[max(earlier)]))[:keep]
        previous_subject[clause] = subject
        sentence_start, sentence_end = sentence_spans[words[position].sentence]
        term_set = frozenset(t for _, _, t, _ in terms)
        setting = frozenset(t for c, ts in clause_terms.items() if c not in by_clause
                            and clause_sentence[c] == words[position].sentence for t in ts)
        noun = _noun(words, position, mention)
        out.append(Claim(
            mention=mention,
            sentence=text[sentence_start:sentence_end].strip(),
            subject=subject,
            terms=term_set,
            days=days_of[i],
            role=_role(text, words, position, number_at, mention),
            period=_period(text, mention),
            noun=noun,
            unit_class=_unit_class(mention, noun, term_set),
            closed=clause_closed[i],
            head=heads[i],
            setting=setting,
            soft=soft & frozenset(subject),
        ))
    return out


def leading_terms(text: str) -> list[str]:
    """The words a sentence opens with, its topic: the first run of content terms (stop words before it
    skipped), up to the first word that is no term ("A new SIM card costs ..." -> new, sim, card)."""
    run: list[str] = []
    for m in _TOKEN.finditer(text):
        token = m.group()
        if not token[0].isalpha():
            if run:
                break
            continue
        term = term_of(token)
        if term is None or term[0] == "~":
            if run:
                break
            if term is not None:
                break
            continue
        run.append(term)
    return run


def _scan(text: str, mentions: list[NumberMention], names: frozenset[str] = frozenset()):
    """Words and numbers in text order with their sentence and clause numbers. Returns (words, the index
    in words of each number's placeholder, each sentence's span, whether each number's clause ended)."""
    words: list[_Word] = []
    number_at: list[int] = []
    sentence, clause = 0, 0
    sentence_spans: list[tuple[int, int]] = []
    sentence_start = 0
    open_numbers: list[tuple[int, int]] = []  # (number index, words after it) whose clause is still open
    closed = [False] * len(mentions)

    def end_clause() -> None:
        nonlocal clause
        for i, _ in open_numbers:
            closed[i] = True
        open_numbers.clear()
        clause += 1

    def scan(start: int, stop: int) -> None:
        nonlocal sentence, sentence_start
        for m in _TOKEN.finditer(text, start, stop):
            token = m.group()
            if token[0] in ".!?" or token == "\n":
                if token[0] == "." and len(token) == 1 and words and words[-1].end == m.start() and \
                        words[-1].word in _ABBREVIATIONS:
                    continue
                if token != "\n" and m.end() < len(text) and not text[m.end()].isspace():
                    continue  # "3.5", "e.g": not an end
                end_clause()
                sentence_spans.append((sentence_start, m.end()))
                sentence_start = m.end()
                sentence += 1
                continue
            if token in _CLAUSE_ENDS:
                end_clause()
                continue
            word = token.casefold()
            if word in _CONJUNCTIONS:
                end_clause()
                continue
            term = word if token[0].isupper() and word in names else term_of(word)
            verb = bool(words) and words[-1].clause == clause and (
                words[-1].word in _PRONOUNS
                or words[-1].word in _AUXILIARIES and len(words) > 1 and words[-2].word in _PRONOUNS)
            words.append(_Word(word, term, m.start(), m.end(), sentence, clause, verb))
            for k, (i, seen) in enumerate(open_numbers):
                open_numbers[k] = (i, seen + 1)
                if seen + 1 >= CLOSE_AFTER_WORDS:
                    closed[i] = True

    position = 0
    for i, mention in enumerate(mentions):
        scan(position, mention.span[0])
        number_at.append(len(words))
        words.append(_Word("#", None, mention.span[0], mention.span[1], sentence, clause))
        open_numbers.append((i, 0))
        position = mention.span[1]
    scan(position, len(text))
    sentence_spans.append((sentence_start, len(text)))
    return words, number_at, sentence_spans, closed


def _days(text: str, words: list[_Word], number_at: list[int],
          mentions: list[NumberMention]) -> list[frozenset[int] | None]:
    """Each number's days: a day phrase of its own clause (the nearest before it, else after it), else,
    for a clock time, the nearest before it in its sentence. A phrase is days joined by "and"/"och" or a
    range ("Monday to Friday", "måndag–fredag")."""
    phrases: list[tuple[int, int, int, frozenset[int]]] = []  # (first word, last word, clause, days)
    k = 0
    while k < len(words):
        days = DAYS.get(words[k].word)
        if days is None:
            k += 1
            continue
        first, collected = k, set(days)
        while True:
            dashed = k + 1 < len(words) and words[k + 1].word in DAYS and \
                text[words[k].end : words[k + 1].start].strip() in ("-", "–", "—")
            linked = k + 2 < len(words) and words[k + 2].word in DAYS and \
                words[k + 1].word in _DAY_RANGE_LINKS | {"and", "och"} and words[k + 2].clause == words[k].clause
            if not (dashed or linked):
                break
            nxt = k + 1 if dashed else k + 2
            single, later = DAYS[words[k].word], DAYS[words[nxt].word]
            if (dashed or words[k + 1].word in _DAY_RANGE_LINKS) and len(single) == 1 and len(later) == 1:
                a, b = min(single), min(later)
                collected |= set(range(a, b + 1)) if a <= b else set(range(a, 7)) | set(range(0, b + 1))
            else:
                collected |= later
            k = nxt
        phrases.append((first, k, words[first].clause, frozenset(collected)))
        k += 1
    out: list[frozenset[int] | None] = []
    for position, mention in zip(number_at, mentions):
        clause, sentence = words[position].clause, words[position].sentence
        own_before = [p for p in phrases if p[2] == clause and p[1] < position]
        own_after = [p for p in phrases if p[2] == clause and p[0] > position]
        earlier = [p for p in phrases if p[1] < position and words[p[0]].sentence == sentence]
        if own_before:
            out.append(own_before[-1][3])
        elif own_after:
            out.append(own_after[0][3])
        elif earlier and mention.kind == "time":
            out.append(earlier[-1][3])
        else:
            out.append(None)
    return out


def _role(text: str, words: list[_Word], position: int, number_at: list[int], mention: NumberMention) -> str:
    """A clock time's place in opening hours: "start" (opens at, from), "end" (closes at, until), ""."""
    if mention.kind != "time":
        return ""
    previous = position - 1
    if previous >= 1 and words[previous].word in _RANGE_LINKS and words[previous - 1].word == "#":
        return "end"  # the second time of a range "8 to 17"
    if position - 1 in number_at and text[words[position - 1].end : mention.span[0]].strip() in ("-", "–", "—"):
        return "end"  # "08:00–17:00": the dash is no word
    following = position + 1
    if following + 1 < len(words) and words[following].word in _RANGE_LINKS and words[following + 1].word == "#":
        return "start"
    if following in number_at and text[mention.span[1] : words[following].start].strip() in ("-", "–", "—"):
        return "start"
    for k in range(position - 1, max(-1, position - 4), -1):
        if words[k].clause != words[position].clause:
            break
        if words[k].word in _END_CUES:
            return "end"
        if words[k].word in _START_CUES:
            return "start"
    return ""


def _period(text: str, mention: NumberMention) -> str | None:
    if mention.unit is None or UNIT_CLASS.get(mention.unit) != "money":
        return None
    m = _PERIOD_AFTER.match(text, mention.span[1])
    if m is None:
        return None
    if m[2]:
        return _PERIOD_ADVERBS[m[2].lower()]
    return _PERIOD_WORDS.get(m[1].lower())


def _noun(words: list[_Word], position: int, mention: NumberMention) -> str | None:
    if mention.kind not in _QUANTITY_KINDS or mention.unit is not None:
        return None
    following = position + 1
    if following < len(words) and words[following].clause == words[position].clause:
        term = words[following].term
        if term is not None and term[0] != "~" and words[following].word not in DAYS:
            return term
    return None


def _unit_class(mention: NumberMention, noun: str | None, terms: frozenset[str]) -> str | None:
    if mention.kind in ("time", "date", "phone"):
        return mention.kind
    if mention.unit is not None:
        return UNIT_CLASS.get(mention.unit)
    if noun is not None:
        return "count"
    if "~price" in terms:
        return "money"
    return None
