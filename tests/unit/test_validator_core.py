"""Validator core (workers/validator/core.py): release policies, the approved prefix, the char -> frame
mapping, citations and fail-closed rejections (INV-GATE), on the small knowledge base in tests/kb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.bus import messages as m
from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir
from voicecore.validate.numbers import extract_numbers
from workers.validator.core import APPROVE_ALL_FRAMES, ValidatorCore, reason_category

KB_DIR = Path(__file__).parents[1] / "kb"
KB = KnowledgeBase.from_documents(load_knowledge_dir(KB_DIR))
KEY = (3, 7, 5)  # slot, generation, tag


def open_gate(core: ValidatorCore, policy: str = "numbers", script: str = "", language: str = "en",
              forbidden: str = "") -> list[m.Verdict]:
    return core.handle(m.GateOpen(*KEY, policy, script, language, forbidden))


def words_of(text: str) -> list[str]:
    """Deltas the way a realtime model sends them: one word with its leading space."""
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


def stream(core: ValidatorCore, deltas: list[str], frames_per_char: int = 3, done: bool = True):
    """Feed deltas with the audio exactly in step with the transcript; returns [(text so far, audio
    frames, verdicts)] with a last entry for the done message."""
    steps = []
    text = ""
    for delta in deltas:
        text += delta
        frames = frames_per_char * len(text)
        steps.append((text, frames, core.handle(m.TranscriptDelta(*KEY, delta, frames))))
    if done:
        frames = frames_per_char * len(text)
        steps.append((text, frames, core.handle(m.TranscriptDone(*KEY, "", frames))))
    return steps


def approved_through(deltas: list[str], policy: str, script: str = "", forbidden: str = "") -> str:
    """The transcript prefix approved once ``deltas`` arrived one by one (one audio frame per char, no margin
    or speech-rate bound); a delta that approves nothing more gets no verdict."""
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core, policy, script, forbidden=forbidden)
    text, approved = "", 0
    for delta in deltas:
        text += delta
        verdicts = core.handle(m.TranscriptDelta(*KEY, delta, len(text)))
        assert not any(v.rejected for v in verdicts), verdicts
        approved = verdicts[-1].approved_frames if verdicts else approved
    return text[:approved]


def all_verdicts(steps) -> list[m.Verdict]:
    return [v for _, _, verdicts in steps for v in verdicts]


def approved_prefix(text: str, policy: str = "numbers", knowledge=KB, language: str = "en", script: str = "") -> str:
    """The transcript prefix approved after ``text`` arrived in one delta: with one audio frame per char
    and no margin or speech-rate bound, approved_frames is the approved char count."""
    core = ValidatorCore(knowledge, margin_frames=0, max_chars_per_s=0)
    open_gate(core, policy, script, language)
    verdicts = core.handle(m.TranscriptDelta(*KEY, text, len(text)))
    assert not any(v.rejected for v in verdicts), verdicts
    return text[: verdicts[-1].approved_frames] if verdicts else ""


# -- the numbers policy -------------------------------------------------------------------------------


def test_unverifiable_number_is_rejected_before_its_audio_is_approved():
    """INV-GATE: "Basic costs 777 kr per month" -> rejected as soon as "777 kr" is complete."""
    core = ValidatorCore(KB, margin_frames=10)
    assert open_gate(core) == []
    steps = stream(core, words_of("Basic costs 777 kr per month."))
    verdicts = all_verdicts(steps)
    rejections = [v for v in verdicts if v.rejected]
    assert len(rejections) == 1
    # the reason names the claim and the nearest passage; its category (what a log line shows) comes first
    assert rejections[0].reason.startswith("a number is not in the knowledge base: '777 kr' in ")
    assert 'nearest: kb/pricing.md:3 "Basic costs 99 kr per month' in rejections[0].reason
    assert reason_category(rejections[0].reason) == "a number is not in the knowledge base"
    assert json.loads(rejections[0].citations) == []
    # rejected by the first delta after the number that no ending can join to it (" per": after a unit
    # only a number word could), before the transcript is done
    at = next(i for i, (_, _, vs) in enumerate(steps) if any(v.rejected for v in vs))
    assert steps[at][0] == "Basic costs 777 kr per"
    number_audio_frame = 3 * "Basic costs 777 kr per month.".index("777")
    assert all(v.approved_frames <= number_audio_frame for v in verdicts)
    assert all(v.approved_frames < APPROVE_ALL_FRAMES for v in verdicts)
    assert steps[-1][2] == []  # the done message after a rejection: nothing more


def test_grounded_number_is_approved_with_its_citation():
    core = ValidatorCore(KB, margin_frames=10)
    open_gate(core)
    steps = stream(core, words_of("Basic costs 99 kr per month."))
    verdicts = all_verdicts(steps)
    assert not any(v.rejected for v in verdicts)
    frames = [v.approved_frames for v in verdicts]
    assert frames == sorted(frames) and len(set(frames)) == len(frames)  # sent only when it rises
    final = verdicts[-1]
    assert final.approved_frames == APPROVE_ALL_FRAMES
    citations = json.loads(final.citations)
    assert citations == [{"file": "kb/pricing.md", "snippet": "Basic costs 99 kr per month and includes 10 GB of data.",
                          "number": "99", "line": 3}]
    assert (final.slot, final.generation, final.tag) == KEY


def test_text_without_numbers_is_approved_progressively_with_the_margin():
    core = ValidatorCore(KB, margin_frames=10, max_chars_per_s=0)
    open_gate(core)
    text = "Hello and welcome to the support line, how are you today?"
    # The approved prefix after each delta: a word still being written counts when it can never become
    # part of a number ("Hello", "welcome"); "and" ("one hundred and ...") and "to" ("tolv") wait for
    # the next word, "line," for what follows its comma ("line, 5"?).
    approved = ["Hello", "Hello", "Hello and welcome", "Hello and welcome", "Hello and welcome to the",
                "Hello and welcome to the support", "Hello and welcome to the support",
                "Hello and welcome to the support line, how", "Hello and welcome to the support line, how are",
                "Hello and welcome to the support line, how are you", "Hello and welcome to the support line, how are you"]
    steps = stream(core, words_of(text), frames_per_char=4)
    last = 0
    for (so_far, frames, verdicts), prefix in zip(steps[:-1], approved):
        expected = max(0, frames * len(prefix) // len(so_far) - 10)
        if expected > last:
            assert verdicts and verdicts[-1].approved_frames == expected, (so_far, verdicts)
            last = expected
        else:
            assert verdicts == []  # sent only when it rises
    frames = [v.approved_frames for v in all_verdicts(steps)]
    assert len(frames) >= 6 and frames == sorted(frames)
    assert frames[-1] == APPROVE_ALL_FRAMES


def test_speech_rate_bound_releases_the_first_words_before_the_margin_is_covered():
    """c approved chars take at least c / 25 s of audio: 2 frames per char, whatever the margin says."""
    core = ValidatorCore(KB, margin_frames=10)  # 25 chars/s by default
    open_gate(core)
    verdicts = core.handle(m.TranscriptDelta(*KEY, "Basic", 8))  # the first delta and its first 8 frames
    assert verdicts[-1].approved_frames == 2 * len("Basic")  # the margin alone would approve nothing
    verdicts = core.handle(m.TranscriptDelta(*KEY, " costs", 30))
    assert verdicts[-1].approved_frames == 2 * len("Basic costs")
    assert core.handle(m.TranscriptDelta(*KEY, " 777", 40)) == []  # the number waits
    assert core.handle(m.TranscriptDelta(*KEY, " kr per month.", 90))[-1].rejected


def test_sentence_release_rejects_before_any_audio_of_the_sentence():
    core = ValidatorCore(KB, margin_frames=10, release="sentence")
    open_gate(core)
    sent = []
    text = ""
    for delta in words_of("Basic costs 777 kr per month. Premium is nice."):
        text += delta
        sent += core.handle(m.TranscriptDelta(*KEY, delta, 3 * len(text)))
    assert [v.rejected for v in sent] == [True]  # not a frame approved before the rejection
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0, release="sentence")
    open_gate(core)
    assert core.handle(m.TranscriptDelta(*KEY, "Basic costs 99 kr per", 21)) == []  # no whole sentence yet
    verdicts = core.handle(m.TranscriptDelta(*KEY, " month. Premium is", 39))
    assert verdicts[-1].approved_frames == len("Basic costs 99 kr per month.")  # whole sentences only
    with pytest.raises(ValueError):
        ValidatorCore(KB, release="paragraph")


@pytest.mark.parametrize(
    "text, approved, language",
    [
        ("Basic costs 99 ", "Basic costs", "en"),  # "kr" or ",50" may follow
        ("Basic costs 99 kr ", "Basic costs", "en"),  # "99 kr 50"? wait for the next word
        # a complete number is judged with what its clause says of it ("per year", "on Saturdays"): held
        # until the clause ends (",", ";", ".", "and", ...) or six words followed it
        ("Basic costs 99 kr per ", "Basic costs", "en"),
        ("Basic costs 99 kr per month, ", "Basic costs 99 kr per month", "en"),
        ("It is ninety ", "It is", "en"),  # "ninety" -> "ninety-nine"
        ("It is ninety-n", "It is", "en"),  # mid-token
        ("It is ninety-nine kronor a ", "It is", "en"),
        ("Premium costs 349 kr per month and includes ", "Premium costs 349 kr per month and includes", "en"),
        ("Call 070-123 45 ", "Call", "en"),  # the phone number may go on
        ("Call 070-123 45 67 today ", "Call", "en"),
        ("Call 070-123 45 67 today. ", "Call 070-123 45 67 today", "en"),
        ("It costs a ", "It costs", "en"),
        ("We open on March ", "We open on", "en"),
        ("Students get 15 % off ", "Students get", "en"),
        ("Students get 15 % off Premium and ", "Students get 15 % off Premium", "en"),  # "and" is held
        ("The prices apply from 2025-03-01 onwards ", "The prices apply from", "en"),
        ("The prices apply from 2025-03-01 onwards for all of our plans ",
         "The prices apply from 2025-03-01 onwards for all of our plans", "en"),  # six words closed it
        ("Basic kostar nittionio kronor i månaden ", "Basic kostar", "sv"),
        ("Basic kostar nittionio kronor i månaden och ", "Basic kostar nittionio kronor i månaden", "sv"),
        ("Det kostar nittio ", "Det kostar", "sv"),  # "nittio" -> "nittionio" or "nittio kronor"
        ("Hello there", "Hello there", "en"),  # "there" may become "therefore", never a number
        ("It is se", "It is", "en"),  # "se" may become "seven"
        ("Det kostar tvåhu", "Det kostar", "sv"),  # "tvåhundra"
    ],
)
def test_approved_prefix_holds_numbers_that_may_still_grow(text, approved, language):
    assert approved_prefix(text, language=language) == approved


@pytest.mark.parametrize(
    "text, language",
    [
        ("Basic costs 777 kr per ", "en"),
        ("Premium costs 12 kr per ", "en"),
        ("It costs seventy-seven kronor per ", "en"),
        ("Ring 070-999 88 77 today ", "en"),
        ("Det kostar sjuttiosju kronor per ", "sv"),
        ("Basic includes 50 GB of ", "en"),
    ],
)
def test_complete_unverifiable_numbers_reject_mid_stream(text, language):
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core, language=language)
    verdicts = core.handle(m.TranscriptDelta(*KEY, text, len(text)))
    assert [v.rejected for v in verdicts] == [True]
    start = extract_numbers(text, language)[0].span[0]
    assert verdicts[0].approved_frames <= start


def test_no_knowledge_base_rejects_every_number_but_approves_plain_text():
    core = ValidatorCore(None, margin_frames=0)
    open_gate(core)
    verdicts = all_verdicts(stream(core, words_of("Basic costs 99 kr per month.")))
    assert verdicts[-1].rejected and "no knowledge base" in verdicts[-1].reason
    core = ValidatorCore(None, margin_frames=0)
    open_gate(core)
    assert all_verdicts(stream(core, words_of("Let me check that for you.")))[-1].approved_frames == APPROVE_ALL_FRAMES


def test_final_transcript_replaces_the_deltas():
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core)
    stream(core, words_of("Basic costs 99 kr"), done=False)
    verdicts = core.handle(m.TranscriptDone(*KEY, "Basic costs 777 kr", 60))
    assert [v.rejected for v in verdicts] == [True]


def test_a_reloaded_knowledge_base_is_used_for_later_answers():
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core)
    assert all_verdicts(stream(core, words_of("Gold costs 777 kr per month.")))[-1].rejected
    docs = dict(load_knowledge_dir(KB_DIR))
    docs["kb/gold.md"] = "# Gold\n\nGold costs 777 kr per month.\n"
    core.set_knowledge(KnowledgeBase.from_documents(docs))
    core.handle(m.GateOpen(KEY[0], KEY[1], KEY[2] + 1, "numbers", "", "en", ""))
    verdicts = core.handle(m.TranscriptDone(KEY[0], KEY[1], KEY[2] + 1, "Gold costs 777 kr per month.", 90))
    assert verdicts[-1].approved_frames == APPROVE_ALL_FRAMES
    assert json.loads(verdicts[-1].citations)[0]["file"] == "kb/gold.md"


# -- scripted, strict, forbidden, off -----------------------------------------------------------------

SCRIPT = "Thanks for calling Acme. Your order V A N 7 ships on Monday."


def test_scripted_prompt_that_follows_the_script_is_approved():
    core = ValidatorCore(None, margin_frames=0)
    open_gate(core, "scripted", SCRIPT)
    steps = stream(core, words_of("Thanks for calling Acme, your order V-A-N seven ships on Monday."))
    verdicts = all_verdicts(steps)
    assert not any(v.rejected for v in verdicts)
    assert len(verdicts) >= 3 and verdicts[-1].approved_frames == APPROVE_ALL_FRAMES


@pytest.mark.parametrize(
    "said, reason",
    [
        ("Thanks for calling Acme. Your refund of 500 dollars is on its way.", "diverges"),
        ("Thanks for calling Acme. Your order V A M 7 ships on Monday.", "number or spelled"),
        ("Thanks for calling Acme. Your order V A N 8 ships on Monday.", "number or spelled"),
        ("Thanks for calling Acme.", "incomplete"),
    ],
)
def test_scripted_prompt_divergence_is_rejected(said, reason):
    core = ValidatorCore(None, margin_frames=0)
    open_gate(core, "scripted", SCRIPT)
    verdicts = all_verdicts(stream(core, words_of(said)))
    assert [v.rejected for v in verdicts].count(True) == 1 and verdicts[-1].rejected
    assert reason in verdicts[-1].reason
    assert all(v.approved_frames < APPROVE_ALL_FRAMES for v in verdicts)


def test_strict_needs_the_script_and_the_knowledge_base():
    script = "Basic costs 99 kr per month."
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core, "strict", script)
    verdicts = all_verdicts(stream(core, words_of(script)))
    assert verdicts[-1].approved_frames == APPROVE_ALL_FRAMES and json.loads(verdicts[-1].citations)
    core = ValidatorCore(None, margin_frames=0)  # the script is followed, but the number is unverifiable
    open_gate(core, "strict", script)
    verdicts = all_verdicts(stream(core, words_of(script)))
    assert verdicts[-1].rejected and "knowledge base" in verdicts[-1].reason


def test_forbidden_phrase_rejects_and_its_first_words_are_held():
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core, forbidden="got it\nschedul*")
    held = core.handle(m.TranscriptDelta(*KEY, "Okay, got ", 10))
    assert held[-1].approved_frames == len("Okay")  # "got" may be the start of "got it"
    verdicts = core.handle(m.TranscriptDelta(*KEY, "it, thanks ", 21))
    assert verdicts[-1].rejected and verdicts[-1].reason == "a forbidden phrase was said"
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core, forbidden="got it\nschedul*")
    assert core.handle(m.TranscriptDone(*KEY, "I have scheduled it.", 30))[-1].rejected


def test_with_forbidden_phrases_a_word_that_cannot_begin_one_is_approved_with_its_own_delta():
    """The receptionist's gate: numbers and forbidden phrases. The first word of an answer plays as soon as its
    delta came (it held one word, ~160 ms, at the start of every answer); a word that may still become one of
    the phrases ("guar" -> "guarantee", "diagnosis" -> a phrase's own word) waits for the next delta."""
    def approved_after(deltas: list[str]) -> str:
        return approved_through(deltas, "numbers", forbidden="guarantee\ndiagnosis\ngot it")

    assert approved_after(["Sure"]) == "Sure"
    assert approved_after(["Sure", " I", " can"]) == "Sure I can"
    assert approved_after(["I", " can", " guar"]) == "I can"  # may become "guarantee"
    assert approved_after(["I", " can", " diagnosis"]) == "I can"  # may be the phrase itself, or go on
    assert approved_after(["I", " can", " go"]) == "I can"  # may become "got" of "got it"
    assert approved_after(["Okay", " got"]) == "Okay"
    assert approved_after(["I", " won’"]) == "I"  # not a word yet
    assert approved_after(["It", " costs"]) == "It costs"
    assert approved_after(["It", " costs", " 2"]) == "It costs"  # a number is held by the numbers rule


def test_a_forbidden_word_after_an_approved_word_is_still_rejected():
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core, forbidden="guarantee")
    assert core.handle(m.TranscriptDelta(*KEY, "I", 1))[-1].approved_frames == 1
    assert core.handle(m.TranscriptDelta(*KEY, " guarantee", 11)) == []  # nothing more approved
    assert core.handle(m.TranscriptDelta(*KEY, " it", 14))[-1].rejected
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core, forbidden="guarantee")
    core.handle(m.TranscriptDelta(*KEY, "I", 1))
    core.handle(m.TranscriptDelta(*KEY, " guarantee", 11))
    assert core.handle(m.TranscriptDone(*KEY, "", 11))[-1].rejected


@given(before=st.lists(st.sampled_from(["Sure", "I", "can", "book", "the", "clinic", "happy", "we"]), max_size=5),
       phrase=st.sampled_from(["guarantee", "got it", "diagnosis"]),
       cuts=st.lists(st.integers(min_value=1, max_value=60), max_size=12))
def test_no_char_of_a_forbidden_phrase_is_approved_however_the_deltas_are_cut(before, phrase, cuts):
    text = " ".join([*before, phrase, "for you."])
    start = text.index(phrase)
    points = sorted({min(cut, len(text)) for cut in cuts} | {len(text)})
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core, forbidden="guarantee\ngot it\ndiagnosis")
    previous, rejected = 0, False
    for point in points:
        for verdict in core.handle(m.TranscriptDelta(*KEY, text[previous:point], point)):
            rejected = rejected or verdict.rejected
            assert verdict.rejected or verdict.approved_frames <= start, (text, point, verdict)
        previous = point
    final = core.handle(m.TranscriptDone(*KEY, "", len(text)))
    assert rejected or final[-1].rejected


def test_a_scripted_prompts_first_word_plays_with_its_own_delta_unless_it_may_become_a_number():
    def approved_after(script: str, deltas: list[str]) -> str:
        return approved_through(deltas, "scripted", script, forbidden="guarantee")

    assert approved_after("Thank you for calling.", ["Thank"]) == "Thank"
    assert approved_after("Thank you for calling.", ["Thank", " you", " for", " cal"]) == "Thank you for cal"
    assert approved_after("We have several times.", ["We", " have", " seve"]) == "We have"  # may become "seven"
    assert approved_after("We guarantee it.", ["We", " guar"]) == "We"  # may become a forbidden word


def test_off_approves_everything_at_once():
    core = ValidatorCore(None)
    verdicts = open_gate(core, "off")
    assert [(v.approved_frames, v.rejected) for v in verdicts] == [(APPROVE_ALL_FRAMES, False)]
    assert core.handle(m.TranscriptDelta(*KEY, "777 kr", 10)) == []  # nothing to judge any more


@pytest.mark.parametrize("policy, script", [("loose", ""), ("scripted", ""), ("strict", "  ")])
def test_misconfigured_gates_fail_closed(policy, script):
    verdicts = open_gate(ValidatorCore(KB), policy, script)
    assert [v.rejected for v in verdicts] == [True]


def test_transcript_for_an_unknown_tag_is_rejected_once():
    core = ValidatorCore(KB)
    first = core.handle(m.TranscriptDelta(*KEY, "Hello ", 5))
    assert [v.rejected for v in first] == [True]
    assert core.handle(m.TranscriptDelta(*KEY, "there ", 10)) == []
    assert core.handle(m.TranscriptDone(*KEY, "", 10)) == []


def test_duplicate_open_and_foreign_messages_are_dropped():
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core)
    core.handle(m.TranscriptDelta(*KEY, "Hello there ", 12))
    assert open_gate(core) == []  # does not reset the gate
    assert core.handle(m.Heartbeat("x", 1, 1, 1, 150)) == []
    assert core.handle(object()) == []
    assert core.statistics()["dropped"] == 3
    assert core.handle(m.TranscriptDelta(*KEY, "friend ", 19))[-1].approved_frames == len("Hello there friend")


def test_call_ended_forgets_the_calls_gates():
    core = ValidatorCore(KB)
    open_gate(core)
    core.handle(m.CallEnded(KEY[0], KEY[1], "stop"))
    assert core.statistics()["gates_live"] == 0
    assert core.handle(m.TranscriptDelta(*KEY, "Hello ", 5)) == []  # closed, not orphaned


def test_language_falls_back_to_auto():
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core, language="klingon")
    assert all_verdicts(stream(core, words_of("Basic costs 99 kr per month.")))[-1].approved_frames == APPROVE_ALL_FRAMES


def test_snippets_for_a_question():
    core = ValidatorCore(KB)
    snippets = core.snippets_for("How much does Premium cost?")
    assert snippets and any("349" in s["text"] for s in snippets)
    assert {"file", "line", "text"} <= set(snippets[0])
    assert ValidatorCore(None).snippets_for("How much does Premium cost?") == []


def test_approve_all_matches_the_pacers_constant():
    from voicecore.shm.control import APPROVE_ALL

    assert APPROVE_ALL_FRAMES == APPROVE_ALL


# -- bus messages added for the validator -----------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        m.GateOpen(1, 2, 3, "strict", "Välkommen!", "sv", "got it\nschedul*"),
        m.TranscriptDelta(1, 2, 3, " ninety-", 17),
        m.TranscriptDone(1, 2, 3, "Basic costs 99 kr.", 120),
        m.Verdict(1, 2, 3, APPROVE_ALL_FRAMES, False, "", '[{"file": "kb/pricing.md"}]'),
        m.Verdict(1, 2, 3, 40, True, "a number is not in the knowledge base", "[]"),
    ],
    ids=lambda s: type(s).__name__,
)
def test_validator_messages_round_trip(message):
    assert m.decode(m.encode(message)) == message


def test_verdict_rejected_must_be_a_bool():
    import msgpack

    body = {"v": 1, "t": "verdict", "slot": 1, "generation": 1, "tag": 1, "approved_frames": 1,
            "rejected": 1, "reason": "", "citations": "[]"}
    decoded = m.decode(msgpack.packb(body))
    assert isinstance(decoded, m.Rejected) and "wrong type" in decoded.reason


# -- property: INV-GATE under the char -> frame mapping -------------------------------------------------

ORDINARY = ["Basic", "Premium", "costs", "the", "plan", "is", "great", "includes", "per", "month", "data",
            "we", "offer", "today", "and", "so", "on", "price", "for", "you", "kostar", "i", "månaden"]
GROUNDED = ["99 kr", "349 kr", "10 GB", "ninety-nine kronor", "1 TB", "15 %", "2025-03-01", "070-123 45 67"]
UNVERIFIED = ["777 kr", "12 kr", "seventy-seven kronor", "20 GB", "5 TB", "33 %", "2024-01-01", "070-999 88 77"]
MARGIN_FRAMES = 10


@st.composite
def answers(draw):
    pieces = draw(st.lists(st.one_of(st.sampled_from(ORDINARY), st.sampled_from(GROUNDED), st.sampled_from(UNVERIFIED)),
                           min_size=1, max_size=14))
    text = " ".join(pieces) + draw(st.sampled_from([".", "", "?", " ok."]))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    bounds = [0, *cuts, len(text)]
    deltas = [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    frames_per_char = draw(st.integers(2, 5))  # speech at most 25 chars/s: the core's rate bound
    # the audio may be ahead of the transcript by at most the margin, or behind it by any amount
    leads = draw(st.lists(st.integers(-60, MARGIN_FRAMES), min_size=len(deltas), max_size=len(deltas)))
    return text, deltas, frames_per_char, leads


@given(answers())
def test_property_approved_frames_never_cover_an_unverified_number(example):
    """INV-GATE: approved_frames never decreases and never reaches the audio of the first number the
    knowledge base does not hold (audio at frames_per_char frames per transcript char)."""
    text, deltas, frames_per_char, leads = example
    # the oracle: the claims of the whole text (a number with what the text says it is), judged at once
    unverified = [v.claim.mention for v in KB.ground_text(text, "en").verdicts if not v.ok]
    limit_frames = frames_per_char * unverified[0].span[0] if unverified else None

    core = ValidatorCore(KB, margin_frames=MARGIN_FRAMES)
    open_gate(core)
    sent: list[m.Verdict] = []
    so_far = 0
    audio = 0
    for delta, lead in zip(deltas, leads):
        so_far += len(delta)
        audio = max(audio, frames_per_char * so_far + lead, 0)
        sent += core.handle(m.TranscriptDelta(*KEY, delta, audio))
    sent += core.handle(m.TranscriptDone(*KEY, "", frames_per_char * len(text)))

    frames = [v.approved_frames for v in sent]
    assert frames == sorted(frames)
    assert [v.rejected for v in sent].count(True) <= 1
    assert not any(v.rejected for v in sent[:-1])  # a rejection is the last word on a tag
    if limit_frames is not None:
        assert sent and sent[-1].rejected
        assert all(f <= limit_frames for f in frames)
    else:
        assert sent and not sent[-1].rejected and frames[-1] == APPROVE_ALL_FRAMES


# -- facts: a tool's result grounds numbers for one response ------------------------------------------

BOOKING = json.dumps({"booked": True, "reference": "B-1042", "date": "2026-11-26", "time": "11:30", "price": 450})
BOOKED_ANSWER = "You're booked for 11:30 on November 26, reference 1042, and it costs 450 kr."


def finish(core: ValidatorCore, key: tuple[int, int, int], text: str) -> m.Verdict:
    verdicts = core.handle(m.TranscriptDone(*key, text, 3 * len(text)))
    assert len(verdicts) == 1
    return verdicts[0]


def test_a_number_only_in_the_facts_is_approved_and_cites_the_tool_result():
    core = ValidatorCore(KB, margin_frames=0)
    assert core.handle(m.GateOpen(*KEY, "numbers", "", "en", "", BOOKING)) == []
    verdicts = all_verdicts(stream(core, words_of(BOOKED_ANSWER)))
    assert not any(v.rejected for v in verdicts)
    assert verdicts[-1].approved_frames == APPROVE_ALL_FRAMES
    citations = json.loads(verdicts[-1].citations)
    assert {c["file"] for c in citations} == {"tool-result"}
    assert {c["number"] for c in citations} >= {"11:30", "1042", "450"}


def test_the_same_number_without_facts_is_rejected():
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core)
    verdict = finish(core, KEY, BOOKED_ANSWER)
    assert verdict.rejected and "knowledge base" in verdict.reason


def test_a_number_in_neither_the_facts_nor_the_knowledge_base_is_rejected():
    core = ValidatorCore(KB, margin_frames=0)
    core.handle(m.GateOpen(*KEY, "numbers", "", "en", "", BOOKING))
    verdict = finish(core, KEY, "You're booked for 12:45, it costs 450 kr.")
    assert verdict.rejected and "tool result" in verdict.reason


def test_facts_do_not_leak_into_another_gate():
    core = ValidatorCore(KB, margin_frames=0)
    other = (KEY[0], KEY[1], KEY[2] + 1)
    core.handle(m.GateOpen(*KEY, "numbers", "", "en", "", BOOKING))
    core.handle(m.GateOpen(*other, "numbers", "", "en", ""))
    assert finish(core, other, BOOKED_ANSWER).rejected  # opened while the facts' gate was live
    assert finish(core, KEY, BOOKED_ANSWER).approved_frames == APPROVE_ALL_FRAMES
    later = (KEY[0], KEY[1], KEY[2] + 2)
    core.handle(m.GateOpen(*later, "numbers", "", "en", ""))
    assert finish(core, later, BOOKED_ANSWER).rejected  # and after it finished


def test_facts_ground_numbers_without_a_knowledge_base_and_the_knowledge_base_still_counts():
    core = ValidatorCore(None, margin_frames=0)
    core.handle(m.GateOpen(*KEY, "numbers", "", "en", "", BOOKING))
    assert finish(core, KEY, BOOKED_ANSWER).approved_frames == APPROVE_ALL_FRAMES
    core = ValidatorCore(KB, margin_frames=0)
    core.handle(m.GateOpen(*KEY, "numbers", "", "en", "", BOOKING))
    verdict = finish(core, KEY, "Booked for 11:30; Basic is 99 kr per month.")
    assert verdict.approved_frames == APPROVE_ALL_FRAMES
    assert {c["file"] for c in json.loads(verdict.citations)} == {"tool-result", "kb/pricing.md"}


def test_strict_policy_grounds_numbers_in_the_facts_too():
    script = "Your reference is 1042."
    core = ValidatorCore(KB, margin_frames=0)
    core.handle(m.GateOpen(*KEY, "strict", script, "en", "", BOOKING))
    assert finish(core, KEY, script).approved_frames == APPROVE_ALL_FRAMES
    core = ValidatorCore(KB, margin_frames=0)
    core.handle(m.GateOpen(*KEY, "strict", script, "en", ""))
    assert finish(core, KEY, script).rejected


def test_facts_survive_the_bus_codec_and_old_positional_gate_opens_have_none():
    opened = m.GateOpen(*KEY, "numbers", "", "en", "", BOOKING)
    assert m.decode(m.encode(opened)) == opened
    assert m.decode(m.encode(m.GateOpen(*KEY, "numbers", "", "en", ""))).facts == ""
    core = ValidatorCore(KB, margin_frames=0)
    core.handle(m.decode(m.encode(opened)))
    assert finish(core, KEY, BOOKED_ANSWER).approved_frames == APPROVE_ALL_FRAMES


def test_a_gate_sent_again_after_an_unknown_tag_rejection_is_judged_whole():
    """A new validator got only the end of a gate (its opening died with the old one): the answer is rejected
    as unknown once; the model worker sends the gate again, whole (GateOpen.resend), and it is judged."""
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    (unknown,) = core.handle(m.TranscriptDelta(*KEY, "Hello ", 5))
    assert unknown.rejected and unknown.reason == m.UNKNOWN_GATE
    resent = m.GateOpen(*KEY, "off", "", "en", "", "", resend=True)
    verdicts = core.handle(resent)
    assert verdicts and not verdicts[-1].rejected  # judged now (policy off: approved at once)


def test_a_resend_of_a_gate_still_open_starts_it_over():
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    core.handle(m.GateOpen(*KEY, "numbers", "", "en", "", ""))
    core.handle(m.TranscriptDelta(*KEY, "Basic costs ", 12))  # what reached the new validator of the first sending
    core.handle(m.GateOpen(*KEY, "numbers", "", "en", "", "", resend=True))
    core.handle(m.TranscriptDelta(*KEY, "Basic costs ", 12))
    core.handle(m.TranscriptDelta(*KEY, "99 kr per month.", 40))
    assert core._gates[KEY].transcript == "Basic costs 99 kr per month."  # not "Basic costs Basic costs ..."
    (final,) = core.handle(m.TranscriptDone(*KEY, "Basic costs 99 kr per month.", 40))
    assert not final.rejected


# -- claims: a number is judged with what the answer says it is ------------------------------------------


def test_a_number_said_of_the_wrong_subject_is_rejected_when_its_clause_ends():
    """349 kr is in the knowledge base, for Premium: said of Basic it is rejected, and none of its audio
    was approved before its clause ended."""
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core)
    text = "Basic costs 349 kr per month, thanks."
    steps = stream(core, words_of(text), frames_per_char=1)
    verdicts = all_verdicts(steps)
    rejected = [(so_far, v) for so_far, _, vs in steps for v in vs if v.rejected]
    assert len(rejected) == 1
    so_far, verdict = rejected[0]
    assert so_far == "Basic costs 349 kr per month, thanks."  # the clause ended with "month,"
    assert reason_category(verdict.reason) == "a number is in the knowledge base only for something else"
    assert "there it is said of premium, not of basic" in verdict.reason
    assert all(v.approved_frames <= text.index("349") for v in verdicts)


def test_a_number_no_source_holds_is_rejected_before_its_clause_ends():
    core = ValidatorCore(KB, margin_frames=0)
    open_gate(core)
    verdicts = core.handle(m.TranscriptDelta(*KEY, "Basic costs 777 kr per ", 30))
    assert [v.rejected for v in verdicts] == [True]
    assert verdicts[0].reason.startswith("a number is not in the knowledge base: '777 kr'")


def test_a_judged_claim_is_not_judged_again():
    core = ValidatorCore(KB, margin_frames=0, max_chars_per_s=0)
    open_gate(core)
    core.handle(m.TranscriptDelta(*KEY, "Basic costs 99 kr per month, and", 40))
    gate = next(iter(core._gates.values()))
    assert len(gate.judged) == 1
    judged = dict(gate.judged)
    core.handle(m.TranscriptDelta(*KEY, " more", 45))
    assert gate.judged == judged


def test_explain_judges_every_claim_of_an_answer():
    core = ValidatorCore(KB)
    verdicts = core.explain("Basic costs 99 kr, Premium costs 99 kr and Premium costs 777 kr.", "en")
    assert [(v.claim.mention.raw, v.ok) for v in verdicts] == [("99 kr", True), ("99 kr", False), ("777 kr", False)]
    assert verdicts[0].citation.file == "kb/pricing.md"
    assert verdicts[1].value_found and not verdicts[2].value_found
