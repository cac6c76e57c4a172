"""The validator's sans-I/O core: per gated response, how much of its audio may play (INV-GATE).

Owns the release policies (docs/explanation/validation-gate.md#policies), per (slot, generation, tag):
- "off": approve everything at once.
- "numbers": every number the transcript states must be grounded in the knowledge base together with
  what the transcript says it is (a claim, voicecore.validate.claims: "Premium costs 299 kr" is not
  grounded by "Basic: 299 kr"; voicecore.validate.knowledge judges it, fail-closed: no knowledge base
  means every number is unverifiable); text without numbers is approved as it streams. A rejection's
  reason is "<category>: <the claim>; nearest: <file>:<line> "<passage>" (<what differs>)", the category
  one of NOT_IN_KNOWLEDGE, WRONG_SUBJECT, NOT_IN_FACTS, NO_KNOWLEDGE (``reason_category``: what logs show).
- "scripted": the transcript must follow the expected text (voicecore.validate.script.ScriptMatcher).
- "strict": both.
Forbidden phrases (GateOpen.forbidden) are checked under every policy but "off".
A gate opened with ``facts`` (GateOpen.facts: the result of the tool the agent is answering from) grounds
numbers in them too, for that response only: the facts are indexed like one more knowledge-base document
(KnowledgeBase.from_documents, the same extraction and matching rules; JSON becomes one "key: value" line
per object, knowledge.facts_document, so each object's numbers are facts of its own keys and values), cited
as file "tool-result".

It turns transcript deltas into ``messages.Verdict``s: the approved transcript prefix, mapped to audio
frames. Must not know sockets, files, clocks or the shared-memory rings: the shell (main.py) feeds it bus
messages and a KnowledgeBase object and sends what it returns; the model worker applies the verdicts
(rings.tag_approve / tag_cancel). Bad or unexpected input never raises: it is counted, and where a gate
would otherwise wait forever it becomes a rejection (fail-closed).

The approved prefix (numbers policy) ends before the first number that is not yet judged. A number is
complete once a settled ordinary word follows it (``_complete``): later text can no longer change it
("99" -> "99 kr" or "99,50", "ninety" -> "ninety-nine", "070" -> "070-123 45 67", "en krona" -> "en
krona och nittio öre"). A complete number that no source holds at all rejects at once; one that some
passage holds is judged as a claim once its clause has ended (claims.py ``closed``: ",", ".", "and", ...
or six words later), so "... until 17 on Saturdays" and "... 299 kr per year" are judged with what
follows the number. A judged claim is kept per gate (by the number's span and value) and never judged
again. Words that may turn into part of a number ("a" -> "a hundred", "March" -> "March 3") are held at
the tail.

Under "numbers" the word a delta ends inside still counts as settled when no later text can make it part
of a number: it has no digit and is neither a number word, unit, month nor an open word, nor a prefix of
one ("Basic" may become "Basically", never a number; "se" may become "seven"), and, with forbidden phrases,
no word of a phrase begins with it ("guar" may become "guarantee"). That approves the first word of an
answer with its own delta instead of one word later (a one-word hold, ~160 ms at the start of every gated
answer). Under "scripted" a word being written counts when the script's matcher finds it begins the script's
next word (voicecore/validate/script.py) and it cannot become part of a number; "strict" keeps to settled words.

The mapping (transcript chars -> audio frames): with T transcript chars and A audio frames of the tag
written so far (the latest delta's ``audio_frames``) and the approved prefix at c chars,
``approved_frames = max(floor(A * c / T) - margin_frames, c * min_frames_per_char)``, never decreasing.
The first term assumes the transcript is not more than ``margin_frames`` behind the audio (the realtime
API sends a transcript piece before the audio it covers); when it lags further, the margin is what
protects the number. The second is a speech-rate bound: c chars take at least c / max_rate of audio
(default 25 chars/s: fast speech is 15-20), so the first unapproved char cannot start before it, whatever
the streams' interleaving; it is what lets the first words play before the margin is covered. When the
transcript is done and fully approved, everything is approved (APPROVE_ALL_FRAMES).

``release="sentence"`` (numbers and strict) approves only whole sentences: a response whose first sentence
states an unverifiable number is rejected before any of its audio plays, at the price of waiting for the
first sentence's transcript before the first frame ("word", the default, releases word by word).
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache

from voicecore.bus import messages
from voicecore.validate.claims import CLOSE_AFTER_WORDS, Claim, claims_of
from voicecore.validate.knowledge import Citation, ClaimVerdict, KnowledgeBase, facts_document
from voicecore.validate.numbers import (
    EN_NUMBER_WORDS,
    LANGUAGES,
    SV_NUMBER_MORPHEMES,
    UNIT_FORMS,
    NumberMention,
    extract_numbers,
)
from voicecore.validate.script import ForbiddenPhrases, ScriptMatcher

APPROVE_ALL_FRAMES = 1 << 62  # equals voicecore.shm.control.APPROVE_ALL: every frame of the tag
POLICIES = ("off", "numbers", "scripted", "strict")
DEFAULT_MARGIN_FRAMES = 10  # 200 ms: audio of the approved text's last word may run a little late
DEFAULT_MAX_CHARS_PER_S = 25  # speech-rate bound of the mapping (module docstring)
RELEASES = ("word", "sentence")
MAX_GATES = 4096  # live gates kept; the oldest is forgotten (its tag long finished or cancelled)
MAX_CLOSED = 8192  # keys of finished gates remembered, so late messages for them are dropped quietly
MAX_CITATIONS = 16  # per verdict: a Verdict must stay far below the bus's 64 KiB message limit
MAX_SNIPPET_CHARS = 240
FACTS_FILE = "tool-result"  # the citation file of a number grounded in a gate's facts

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
# Words later text can still make part of a number ("one hundred and twenty", "a hundred", "en krona",
# "three point five"); held when they end the approved text, never taken as the end of a number.
_OPEN_WORDS = frozenset({"and", "och", "point", "komma", "a", "en", "ett", "one", "plus", "minus"})
_MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec "
    "januari februari mars maj juni juli augusti oktober".split()
)
# Words that may still be absorbed into the number before them ("99" + " kr", "3" + " March",
# "5" + " pm", "12 per" + " cent"); after a number that has no unit they are skipped, not taken as
# the end of the number.
_EXTENDERS = (
    frozenset(form for forms in UNIT_FORMS.values() for form in forms if form.isalpha())
    | _MONTHS
    | {"pm", "am", "per", "cent", "o", "clock", "kl", "klockan", "öre", "thousand", "tusen", "hundred", "hundra"}
)
_TAIL_HOLD = _OPEN_WORDS | _MONTHS | {"kl", "klockan"}
_MAX_EXTENDER_SKIPS = 3
# Words (and beginnings of words) a number can be made of or extended by; a partial word related to none
# of them is inert (module docstring).
_NUMBER_LEXICON = tuple(sorted(
    set(EN_NUMBER_WORDS) | set(SV_NUMBER_MORPHEMES) | _EXTENDERS | _OPEN_WORDS
    | {form for forms in UNIT_FORMS.values() for form in forms}
))
_NUMBER_STARTS = tuple(sorted(set(EN_NUMBER_WORDS) | {m for m in SV_NUMBER_MORPHEMES if len(m) >= 3}))
_COMPOUND_STARTS = tuple(m for m in SV_NUMBER_MORPHEMES if len(m) >= 3)  # Swedish numbers are written together
_SENTENCE_END = re.compile(r"[.!?](?=\s)")

# Categories of a rejected number: the start of Verdict.reason, before ": " and the claim itself (a log
# line shows only the category: the claim holds the caller's numbers).
NOT_IN_KNOWLEDGE = "a number is not in the knowledge base"
WRONG_SUBJECT = "a number is in the knowledge base only for something else"
NOT_IN_FACTS = "a number is neither in the knowledge base nor in the tool result"
NO_KNOWLEDGE = "a number cannot be verified, there is no knowledge base"


def reason_category(reason: str) -> str:
    """What of a verdict's reason a log line may show: the text before its first ": " (its category),
    without the claim and the passage after it (they hold the caller's numbers)."""
    return reason.partition(": ")[0]


_CLAUSE_END = re.compile(r"[,;:()\[\]!?.\n]|(?<![^\W\d_])(?:and|but|or|while|whereas|och|men|eller|samt|medan)(?![^\W\d_])",
                         re.IGNORECASE)


def _may_have_closed(text: str, start: int, limit: int) -> bool:
    """Cheaply: the clause of a number ending at ``start`` may have ended within ``text[:limit]`` (a clause
    mark, a conjunction, or as many words as close a claim; claims.py decides)."""
    return bool(_CLAUSE_END.search(text, start, limit)) or len(text[start:limit].split()) >= CLOSE_AFTER_WORDS


def _claim_key(mention: NumberMention) -> tuple:
    return mention.span, mention.kind, mention.value, mention.unit, mention.alternatives


@lru_cache(maxsize=4096)
def _is_number_word(word: str, language: str) -> bool:
    return any(ch.isdigit() for ch in word) or bool(extract_numbers(word, language))  # type: ignore[arg-type]


@lru_cache(maxsize=32)
def _words(text: str) -> tuple[tuple[int, int, str], ...]:
    """(start, end, casefolded word) of every word, settled or not (``_settled_limit``). Cached: a delta's
    judgement reads the words of the same transcript up to three times (numbers, phrases, their hold)."""
    return tuple((m.start(), m.end(), m.group().casefold().replace("'", "").replace("’", ""))
                 for m in _WORD.finditer(text))


@lru_cache(maxsize=8192)
def _inert(token: str) -> bool:
    """A partial word that can never become (part of) a number, whatever follows it."""
    word = token.casefold()
    if not word.isalpha():
        return False  # digits, hyphens, apostrophes, punctuation: "ninety-", "99,", "month."
    if any(w.startswith(word) for w in _NUMBER_LEXICON):
        return False  # the beginning of a number word, unit, month or open word
    return not any(word.startswith(m) for m in _COMPOUND_STARTS)  # "tvåhundra", "femtiofem"


def _cannot_extend(token: str, unit: bool) -> bool:
    """A partial word after a complete-looking number that cannot join it, however it ends. After a unit
    ("777 kr") only a number word could ("777 kr 50"); without one, extenders and open words could too."""
    word = token.rstrip(".,!?;:").casefold()
    if not word.isalpha():
        return False
    if not unit:
        return _inert(word)
    return not any(w.startswith(word) or word.startswith(w) for w in _NUMBER_STARTS)


def _numbers_limit(text: str) -> int:
    """Like ``_settled_limit``, but the word being written counts as settled when it is inert."""
    limit = _settled_limit(text)
    tail = text[limit:].strip()
    return len(text) if tail and _inert(tail) else limit


def _forbidden_limit(text: str, forbidden_words: list[tuple[str, ...]]) -> int:
    """Like ``_settled_limit``, but the word being written counts as settled when no word of a forbidden phrase
    begins with it ("Sure" can become "Surely", never "guarantee"): whatever follows, it is a word of its own
    that the phrases' check has read."""
    limit = _settled_limit(text)
    tail = text[limit:].strip()
    word = re.sub(r"['’]", "", tail.rstrip(".,!?;:").casefold())
    if not word.isalpha() or any(w.startswith(word) for phrase in forbidden_words for w in phrase):
        return limit
    return len(text)


def _settled_limit(text: str) -> int:
    """Words ending at or before this index are settled: whitespace follows them. A delta that ends
    inside a token ("ninety-n", "99,", "month.") may still change every word of that token."""
    for index in range(len(text) - 1, -1, -1):
        if text[index].isspace():
            return index
    return 0


@dataclass(slots=True)
class _Gate:
    key: tuple[int, int, int]
    policy: str
    language: str
    matcher: ScriptMatcher | None
    forbidden: ForbiddenPhrases | None
    forbidden_words: list[tuple[str, ...]]
    transcript: str = ""
    audio_frames: int = 0
    approved_chars: int = 0
    approved_frames: int = 0  # the last value sent in a Verdict
    final: bool = False
    citations: dict[tuple[str, int, str], Citation] = field(default_factory=dict)
    facts: KnowledgeBase | None = None  # this response's own grounding (GateOpen.facts), besides the knowledge base
    judged: dict[tuple, ClaimVerdict] = field(default_factory=dict)  # approved claims, by their number


class ValidatorCore:
    """Verdicts for gated responses (rules: module docstring). Feed it bus messages with ``handle``."""

    def __init__(self, knowledge: KnowledgeBase | None = None, margin_frames: int = DEFAULT_MARGIN_FRAMES,
                 max_gates: int = MAX_GATES, max_chars_per_s: float = DEFAULT_MAX_CHARS_PER_S,
                 release: str = "word") -> None:
        if release not in RELEASES:
            raise ValueError(f"release must be one of {RELEASES}, not {release!r}")
        self.knowledge = knowledge
        self.margin_frames = max(0, margin_frames)
        # frames of audio one char takes at the fastest plausible speech; 0 turns the bound off
        self.min_frames_per_char = (1000 / 20) / max_chars_per_s if max_chars_per_s > 0 else 0.0
        self.release = release
        self.max_gates = max(1, max_gates)
        self._gates: OrderedDict[tuple[int, int, int], _Gate] = OrderedDict()
        self._closed: OrderedDict[tuple[int, int, int], None] = OrderedDict()
        self._orphans: OrderedDict[tuple[int, int, int], None] = OrderedDict()  # transcripts of gates never opened: rejected once
        self.counters: dict[str, int] = {
            "gates_opened": 0, "deltas": 0, "dones": 0, "verdicts_approve": 0, "verdicts_reject": 0,
            "approved_all": 0, "rejected_numbers": 0, "rejected_script": 0, "rejected_forbidden": 0,
            "rejected_other": 0, "dropped": 0, "after_final": 0, "evicted": 0, "knowledge_reloads": 0,
        }

    # -- inputs ------------------------------------------------------------------------------------

    def set_knowledge(self, knowledge: KnowledgeBase | None) -> None:
        """A reloaded knowledge base; numbers judged from now on are grounded in it."""
        self.knowledge = knowledge
        self.counters["knowledge_reloads"] += 1

    def handle(self, message: object) -> list[messages.Verdict]:
        """One bus message in, the verdicts to send out (usually zero or one)."""
        if isinstance(message, messages.GateOpen):
            return self.open(message)
        if isinstance(message, messages.TranscriptDelta):
            return self.delta(message)
        if isinstance(message, messages.TranscriptDone):
            return self.done(message)
        if isinstance(message, messages.CallEnded):
            self.end_call(message.slot, message.generation)
            return []
        self.counters["dropped"] += 1
        return []

    def open(self, message: messages.GateOpen) -> list[messages.Verdict]:
        key = (message.slot, message.generation, message.tag)
        if message.resend:
            self._gates.pop(key, None)  # opened by what reached us of the first sending: the resend is whole
            self._orphans.pop(key, None)  # rejected as unknown: the model worker held on to it
        elif key in self._orphans:
            self.counters["dropped"] += 1
            return []
        if key in self._gates or key in self._closed:
            self.counters["dropped"] += 1  # a duplicate open must not reset a gate that already judged
            return []
        self.counters["gates_opened"] += 1
        language = message.language if message.language in LANGUAGES else "auto"
        policy = message.policy
        phrases = [p.strip() for p in message.forbidden.splitlines() if p.strip()]
        gate = _Gate(key, policy, language, None, None, [])
        if policy not in POLICIES:
            return self._reject(gate, "unknown release policy", "rejected_other")
        if policy == "off":
            return self._approve_all(gate)
        if policy in ("scripted", "strict"):
            if not message.script.strip():
                return self._reject(gate, "scripted policy without a script", "rejected_other")
            gate.matcher = ScriptMatcher(message.script, language)  # type: ignore[arg-type]
        if phrases:
            gate.forbidden = ForbiddenPhrases(phrases, language)  # type: ignore[arg-type]
            gate.forbidden_words = [tuple(w for _, _, w in _words(p.rstrip("*"))) for p in phrases]
        if message.facts.strip() and policy in ("numbers", "strict"):
            home_country = self.knowledge.home_country if self.knowledge is not None else "46"
            gate.facts = KnowledgeBase.from_documents({FACTS_FILE: facts_document(message.facts)}, home_country)
        self._gates[key] = gate
        while len(self._gates) > self.max_gates:
            old_key, _ = self._gates.popitem(last=False)
            self._close(old_key)
            self.counters["evicted"] += 1
        return []

    def delta(self, message: messages.TranscriptDelta) -> list[messages.Verdict]:
        gate = self._gate_for(message.slot, message.generation, message.tag)
        if gate is None:
            return self._orphan(message.slot, message.generation, message.tag)
        self.counters["deltas"] += 1
        gate.transcript += message.delta
        gate.audio_frames = max(gate.audio_frames, message.audio_frames)
        if gate.matcher is not None:
            gate.matcher.feed(message.delta)
        return self._judge(gate, final=False)

    def done(self, message: messages.TranscriptDone) -> list[messages.Verdict]:
        gate = self._gate_for(message.slot, message.generation, message.tag)
        if gate is None:
            return self._orphan(message.slot, message.generation, message.tag)
        self.counters["dones"] += 1
        if message.transcript:
            gate.transcript = message.transcript  # the model's final text wins over the joined deltas
        gate.audio_frames = max(gate.audio_frames, message.audio_frames)
        return self._judge(gate, final=True)

    def end_call(self, slot: int, generation: int) -> None:
        """The call ended: forget its gates (the model worker cancels whatever was still held)."""
        for key in [k for k in self._gates if k[0] == slot and k[1] == generation]:
            del self._gates[key]
            self._close(key)

    # -- retrieve-first (docs/explanation/validation-gate.md#nodes) ----------------------------------

    def snippets_for(self, question: str, k: int = 3) -> list[dict[str, object]]:
        """Knowledge-base snippets relevant to ``question``, best first, for the model's context; an
        empty list means no support (the caller uses the safe line if the answer needs numbers)."""
        if self.knowledge is None:
            return []
        return [{"file": s.file, "line": s.line, "text": s.text} for s in self.knowledge.retrieve(question, k)]

    def explain(self, text: str, language: str = "auto", facts: str = "") -> list[ClaimVerdict]:
        """Every claim of a finished answer judged as the "numbers" policy judges it (the knowledge base,
        then ``facts``: a tool result), each with its citation or its near miss; what `voicecore gate`
        shows. Unlike the streaming judgement it does not stop at the first rejected claim."""
        language = language if language in LANGUAGES else "auto"
        gate = _Gate((0, 0, 0), "numbers", language, None, None, [])
        if facts.strip():
            home_country = self.knowledge.home_country if self.knowledge is not None else "46"
            gate.facts = KnowledgeBase.from_documents({FACTS_FILE: facts_document(facts)}, home_country)
        mentions = extract_numbers(text, language)  # type: ignore[arg-type]
        return [self._judge_claim(gate, claim)
                for claim in claims_of(text, mentions, self._labels(gate), names=self._names(gate))]

    def statistics(self) -> dict[str, float]:
        values = {k: float(v) for k, v in self.counters.items()}
        values["gates_live"] = float(len(self._gates))
        values["knowledge_loaded"] = 0.0 if self.knowledge is None else 1.0
        if self.knowledge is not None:
            stats = self.knowledge.statistics()
            values["knowledge_snippets"] = float(stats.snippets)
            values["knowledge_numbers"] = float(stats.numbers)
        return values

    # -- judging -----------------------------------------------------------------------------------

    def _gate_for(self, slot: int, generation: int, tag: int) -> _Gate | None:
        gate = self._gates.get((slot, generation, tag))
        if gate is not None:
            self._gates.move_to_end(gate.key)
        return gate

    def _orphan(self, slot: int, generation: int, tag: int) -> list[messages.Verdict]:
        """Transcript for a tag we hold no gate for. Already judged: drop. Never opened (we restarted, or
        the open was lost): reject once, so the pacer does not hold that audio forever (fail-closed)."""
        key = (slot, generation, tag)
        if key in self._closed:
            self.counters["after_final"] += 1
            return []
        self.counters["dropped"] += 1
        if key in self._orphans:
            return []  # rejected once already
        self._orphans[key] = None
        while len(self._orphans) > MAX_CLOSED:
            self._orphans.popitem(last=False)
        self.counters["verdicts_reject"] += 1
        self.counters["rejected_other"] += 1
        # Not closed: the model worker may open it again (GateOpen.resend); if it cannot, it rejects the answer.
        return [self._verdict(_Gate(key, "off", "auto", None, None, []), rejected=True, reason=messages.UNKNOWN_GATE)]

    def _judge(self, gate: _Gate, final: bool) -> list[messages.Verdict]:
        text = gate.transcript
        if final:
            approved = len(text)
        elif gate.policy == "numbers":
            approved = len(text)  # _numbers bounds it (inert partial words count as settled), the phrases below too
        elif gate.policy == "scripted":
            # The script's matcher bounds it (a word being written only when it begins the script's next word),
            # and a word that may still become part of a number waits, as under "numbers".
            approved = _numbers_limit(text)
        else:
            approved = self._settled_end(text)
        if gate.policy in ("numbers", "strict"):
            chars, reason = self._numbers(gate, text, final)
            if reason:
                return self._reject(gate, reason, "rejected_numbers")
            approved = min(approved, chars)
            if self.release == "sentence" and not final:
                approved = min(approved, self._sentence_end(text, approved))
        if gate.matcher is not None:
            verdict = gate.matcher.finish(text) if final else gate.matcher.verdict
            if verdict.rejected:
                return self._reject(gate, verdict.reason, "rejected_script")
            approved = min(approved, len(text) if final else verdict.approved_chars)
        if gate.forbidden is not None:
            limit = len(text) if final else _forbidden_limit(text, gate.forbidden_words)
            found = gate.forbidden.find(text[: self._words_end(text, limit)])
            if found:
                return self._reject(gate, "a forbidden phrase was said", "rejected_forbidden")
            if not final:
                approved = min(approved, self._forbidden_hold(gate, text, limit))
        if final:
            return self._approve_all(gate)
        gate.approved_chars = max(gate.approved_chars, approved)
        return self._approve(gate)

    @staticmethod
    def _sentence_end(text: str, limit: int) -> int:
        """End of the last whole sentence (its final ".", "!" or "?" followed by a space) within ``limit``."""
        ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, limit + 1) if m.end() <= limit]
        return ends[-1] if ends else 0

    @staticmethod
    def _settled_end(text: str) -> int:
        """End of the last settled word: a word the delta may still be inside is not approved yet."""
        return ValidatorCore._words_end(text, _settled_limit(text))

    @staticmethod
    def _words_end(text: str, limit: int) -> int:
        """End of the last word that ends at or before ``limit``."""
        settled = [w for w in _words(text) if w[1] <= limit]
        return settled[-1][1] if settled else 0

    def _numbers(self, gate: _Gate, text: str, final: bool) -> tuple[int, str]:
        """(approved chars, "") or (_, reason) when a claim is not supported (a number with what the
        answer says it is, voicecore.validate.claims): judged once the number is complete and its clause
        has ended, so the words after it ("... on Saturdays", "... per year") are part of the claim."""
        mentions = extract_numbers(text, gate.language)  # type: ignore[arg-type]
        words = _words(text)
        cut = len(text)
        limit = len(text) if final else _settled_limit(text)
        pending: list[NumberMention] = []
        for mention in mentions:
            if _claim_key(mention) in gate.judged:
                continue
            if not final and not self._complete(mention, mentions, words, text, gate.language):
                cut = min(cut, mention.span[0])
                continue  # a later number that is already complete may still reject at once
            pending.append(mention)
        if not final:
            # a claim whose clause cannot have ended yet waits without being read (this runs per delta)
            waiting = [m for m in pending if self._held_somewhere(gate, m) and not _may_have_closed(text, m.span[1], limit)]
            for mention in waiting:
                cut = min(cut, mention.span[0])
            pending = [m for m in pending if m not in waiting]
        if pending:
            settled = [m for m in mentions if m.span[1] <= limit]
            for claim in claims_of(text[:limit], settled, self._labels(gate), names=self._names(gate)):
                if claim.mention not in pending:
                    continue
                if not final and not claim.closed and self._held_somewhere(gate, claim.mention):
                    cut = min(cut, claim.mention.span[0])  # the rest of its clause may still qualify it
                    continue  # (a number no source holds is rejected at once, whatever follows it)
                verdict = self._judge_claim(gate, claim)
                if not verdict.ok:
                    return 0, self._rejection(gate, verdict)
                gate.judged[_claim_key(claim.mention)] = verdict
            for mention in pending:
                if _claim_key(mention) not in gate.judged:
                    cut = min(cut, mention.span[0])
        if final:
            return len(text), ""
        inside = [m.span for m in mentions]
        limit = _numbers_limit(text) if gate.policy == "numbers" else _settled_limit(text)
        approved = 0
        for start, end, word in words:
            if end > cut or end > limit:
                break  # past a held number, or the word the delta may still be in the middle of
            in_number = any(s <= start and end <= e for s, e in inside)
            if in_number or word not in _TAIL_HOLD:
                approved = end
            # a held word only counts once an ordinary word after it is approved
        return approved, ""

    def _held_somewhere(self, gate: _Gate, mention: NumberMention) -> bool:
        return any(source is not None and source.holds(mention) for source in (self.knowledge, gate.facts))

    def _names(self, gate: _Gate) -> frozenset[str]:
        return frozenset().union(*(k.names for k in (self.knowledge, gate.facts) if k is not None))

    def _labels(self, gate: _Gate):
        sources = [k for k in (self.knowledge, gate.facts) if k is not None]
        if len(sources) == 1:
            return sources[0].is_label
        return lambda term: any(source.is_label(term) for source in sources)  # none: no term is a label

    def _judge_claim(self, gate: _Gate, claim: Claim) -> ClaimVerdict:
        """In the knowledge base first (its citation names a document), else in the gate's facts; rejected,
        the nearest miss of the two (one that holds the number for something else first)."""
        misses: list[ClaimVerdict] = []
        for source in (self.knowledge, gate.facts):
            if source is None:
                continue
            verdict = source.judge(claim)
            if verdict.ok:
                if verdict.citation is not None:
                    self._cite(gate, (verdict.citation,))
                return verdict
            misses.append(verdict)
        if not misses:
            return ClaimVerdict(claim, False, None, None, "")  # fail-closed: nothing to ground in
        return max(misses, key=lambda v: (v.value_found, v.near_miss is not None))

    def _rejection(self, gate: _Gate, verdict: ClaimVerdict) -> str:
        """The reason of a rejected claim: a category (before the first ": ", what logs may show) and the
        claim with its nearest passage."""
        if self.knowledge is None and gate.facts is None:
            category = NO_KNOWLEDGE
        elif verdict.value_found:
            category = WRONG_SUBJECT
        elif gate.facts is not None:
            category = NOT_IN_FACTS
        else:
            category = NOT_IN_KNOWLEDGE
        return f"{category}: {verdict.describe()}"

    @staticmethod
    def _complete(mention: NumberMention, mentions: list[NumberMention], words: tuple[tuple[int, int, str], ...],
                  text: str, language: str) -> bool:
        """Later text can no longer change this number: a settled ordinary word follows it."""
        end = mention.span[1]
        limit = _settled_limit(text)
        if end > limit:
            return False  # the number's own token is still being written
        skips = 0
        for start, word_end, word in words:
            if start < end:
                continue
            if word_end > limit:
                # the next word is still being written: enough if no ending can make it part of a number
                tail = text[limit:].strip()
                if mention.unit == "kr" and skips == 0 and any(w.startswith(tail.casefold()) for w in ("och", "and")):
                    return False  # "en krona och nittio öre"
                return _cannot_extend(tail, unit=mention.unit is not None)
            if any(s <= start < e for s, e in (m.span for m in mentions) if (s, e) != mention.span):
                return False  # another number follows: they may still merge ("070 123" -> a phone)
            if mention.unit is not None:
                if mention.unit == "kr" and word in ("och", "and") and skips == 0:
                    skips += 1
                    continue  # "en krona och nittio öre"
                # a unit fixes the number; only another number word could still extend it ("99 kr 50")
                return not _is_number_word(word, language)
            if _is_number_word(word, language) or (word in _OPEN_WORDS and skips == 0):
                return False  # "ninety" + " nine", "one hundred" + " and twenty"
            if (word in _EXTENDERS or word in _OPEN_WORDS) and skips < _MAX_EXTENDER_SKIPS:
                skips += 1
                continue
            return True
        return False

    @staticmethod
    def _cite(gate: _Gate, citations: tuple[Citation, ...]) -> None:
        for citation in citations:
            key = (citation.file, citation.line, citation.number)
            if key not in gate.citations and len(gate.citations) < MAX_CITATIONS:
                gate.citations[key] = citation

    @staticmethod
    def _forbidden_hold(gate: _Gate, text: str, limit: int) -> int:
        """Hold the tail words (those ending by ``limit``) that begin a forbidden phrase ("got" before "got it")."""
        words = [w for w in _words(text) if w[1] <= limit]
        held = len(words)
        for phrase in gate.forbidden_words:
            for size in range(min(len(phrase) - 1, len(words)), 0, -1):
                if tuple(w for _, _, w in words[-size:]) == phrase[:size]:
                    held = min(held, len(words) - size)
                    break
        if held == len(words) and limit == len(text):
            return len(text)
        return words[held - 1][1] if held else 0  # the end of the last word before the held ones (or the tail)

    # -- verdicts ----------------------------------------------------------------------------------

    def _frames_for(self, gate: _Gate) -> int:
        total_chars = len(gate.transcript)
        if total_chars == 0 or gate.approved_chars == 0:
            return 0
        proportional = gate.audio_frames * gate.approved_chars // total_chars - self.margin_frames
        return max(0, proportional, int(gate.approved_chars * self.min_frames_per_char))

    def _approve(self, gate: _Gate) -> list[messages.Verdict]:
        frames = self._frames_for(gate)
        if frames <= gate.approved_frames:
            return []
        gate.approved_frames = frames
        self.counters["verdicts_approve"] += 1
        return [self._verdict(gate, rejected=False, reason="")]

    def _approve_all(self, gate: _Gate) -> list[messages.Verdict]:
        gate.approved_frames = APPROVE_ALL_FRAMES
        self.counters["verdicts_approve"] += 1
        self.counters["approved_all"] += 1
        self._finish(gate)
        return [self._verdict(gate, rejected=False, reason="")]

    def _reject(self, gate: _Gate, reason: str, counter: str) -> list[messages.Verdict]:
        self.counters["verdicts_reject"] += 1
        self.counters[counter] += 1
        gate.citations.clear()  # a rejected answer cites nothing
        self._finish(gate)
        return [self._verdict(gate, rejected=True, reason=reason)]

    def _finish(self, gate: _Gate) -> None:
        gate.final = True
        self._gates.pop(gate.key, None)
        self._close(gate.key)

    def _close(self, key: tuple[int, int, int]) -> None:
        self._closed[key] = None
        self._closed.move_to_end(key)
        while len(self._closed) > MAX_CLOSED:
            self._closed.popitem(last=False)

    @staticmethod
    def _verdict(gate: _Gate, rejected: bool, reason: str) -> messages.Verdict:
        citations = [
            {"file": c.file, "snippet": c.snippet[:MAX_SNIPPET_CHARS], "number": c.number, "line": c.line}
            for c in gate.citations.values()
        ]
        slot, generation, tag = gate.key
        return messages.Verdict(slot, generation, tag, gate.approved_frames, rejected, reason,
                                json.dumps(citations, ensure_ascii=False))
