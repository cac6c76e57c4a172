"""Confirmation prompts said as a person says them (voicecore/agent/speech.py, actions.render_prompt), and
the gate's scripted check accepting the spoken form against what the arguments say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voicecore.agent import actions
from voicecore.agent.flow import AgentFlow
from voicecore.agent.load import check_agent, load_agent
from voicecore.agent.speech import number_words, speak, spoken_kind
from voicecore.validate.numbers import extract_numbers
from voicecore.validate.script import ScriptMatcher

ROOT = Path(__file__).resolve().parents[2]
DATE, TIME, DATE_TIME = {"format": "date"}, {"format": "time"}, {"format": "date-time"}
PHONE, SEK = {"x-kind": "phone"}, {"x-kind": "money", "x-currency": "SEK"}

SPOKEN = [
    # value, schema, English, Swedish
    ("2026-11-26", DATE, "Thursday the 26th of November", "torsdag den 26 november"),
    ("2027-01-01", DATE, "Friday the 1st of January", "fredag den 1 januari"),
    ("2026-03-22", DATE, "Sunday the 22nd of March", "söndag den 22 mars"),
    ("2026-03-13", DATE, "Friday the 13th of March", "fredag den 13 mars"),
    ("10:00", TIME, "ten a.m.", "klockan tio"),
    ("14:30", TIME, "two thirty p.m.", "klockan fjorton och trettio"),
    ("09:05:00", TIME, "nine oh five a.m.", "klockan nio och fem"),
    ("12:00", TIME, "noon", "klockan tolv"),
    ("00:00", TIME, "midnight", "midnatt"),
    ("23:59", TIME, "eleven fifty-nine p.m.", "klockan tjugotre och femtionio"),
    ("2026-11-26T10:00:00", DATE_TIME, "Thursday the 26th of November at ten a.m.", "torsdag den 26 november klockan tio"),
    (349, SEK, "349 kronor", "349 kronor"),
    (1, SEK, "1 krona", "1 krona"),
    ("99,50 kr", {"x-kind": "money"}, "99 kronor and 50 öre", "99 kronor och 50 öre"),
    ("5.99 USD", {"x-kind": "money"}, "5 dollars and 99 cents", "5 dollar och 99 cent"),
    ("+46 70 123 45 67", PHONE, "plus four six, seven zero, one two three, four five, six seven",
     "plus fyra sex, sju noll, ett två tre, fyra fem, sex sju"),
    ("+1 555 010 4477", PHONE, "plus one, five five five, zero one zero, four four seven seven",
     "plus ett, fem fem fem, noll ett noll, fyra fyra sju sju"),
    ("0701234567", PHONE, "zero seven zero, one two three, four five six seven", "noll sju noll, ett två tre, fyra fem sex sju"),
]


@pytest.mark.parametrize(("value", "schema", "english", "swedish"), SPOKEN, ids=[str(s[0]) for s in SPOKEN])
def test_spoken_forms_in_both_languages(value, schema, english, swedish):
    assert speak(value, schema, "en") == english
    assert speak(value, schema, "sv") == swedish


@pytest.mark.parametrize(("value", "schema"), [
    ("2026-02-30", DATE),  # no such day
    ("tomorrow", DATE),
    ("25:00", TIME),
    ("soon", DATE_TIME),
    (349, {"x-kind": "money"}),  # no currency
    ("349 zł", {"x-kind": "money"}),  # one we cannot say
    ("ring me", PHONE),
    ("cleaning", {"type": "string"}),  # nothing says what it is
])
def test_a_value_that_is_not_what_its_schema_says_is_said_as_given(value, schema):
    assert speak(value, schema, "en") is None and speak(value, schema, "sv") is None


def test_an_unsupported_language_says_values_as_given():
    assert speak("2026-11-26", DATE, "de") is None


def test_every_spoken_form_reads_back_as_its_value():
    for value, schema, english, swedish in SPOKEN:
        for language, said in (("en", english), ("sv", swedish)):
            mentions = extract_numbers(said, language)
            assert mentions, (language, said)
            kind = spoken_kind(schema)
            if kind == "phone":
                assert [m.kind for m in mentions] == ["phone"]
            if kind == "date":
                assert mentions[0].value == "--" + str(value)[5:10]


def test_number_words():
    assert [number_words(n, "en") for n in (0, 13, 40, 99, 100, 349, 1000, 1099)] == [
        "zero", "thirteen", "forty", "ninety-nine", "one hundred", "three hundred and forty-nine", "one thousand",
        "one thousand and ninety-nine"]
    assert [number_words(n, "sv") for n in (0, 13, 40, 99, 100, 349, 1000, 2345)] == [
        "noll", "tretton", "fyrtio", "nittionio", "etthundra", "trehundrafyrtionio", "ettusen", "tvåtusentrehundrafyrtiofem"]
    for n in (7, 21, 99, 120, 349, 1000, 2345, 999_999):
        assert extract_numbers(number_words(n, "en"), "en")[0].value == str(n)
        assert extract_numbers(number_words(n, "sv"), "sv")[0].value == str(n)


BOOK = {"type": "object", "properties": {"service": {"type": "string"}, "date": {"type": "string", "format": "date"},
                                         "time": {"type": "string", "format": "time"}}}


def test_render_prompt_speaks_the_arguments_its_schema_describes():
    arguments = '{"service": "cleaning", "date": "2026-11-26", "time": "10:00"}'
    template = "Shall I book a {service} on {date} at {time}?"
    assert actions.render_prompt(template, arguments, BOOK, "en") == \
        "Shall I book a cleaning on Thursday the 26th of November at ten a.m.?"
    assert actions.render_prompt("Ska jag boka {service} {date} {time}?", arguments, BOOK, "sv") == \
        "Ska jag boka cleaning torsdag den 26 november klockan tio?"
    # without the schema (or a language), as given: what an agent without formats hears
    assert actions.render_prompt(template, arguments) == "Shall I book a cleaning on 2026-11-26 at 10:00?"
    assert actions.render_prompt(template, '{"service": "cleaning"}', BOOK, "en") is None


EXAMPLES = [
    ("receptionist", "book_appointment", {"service": "cleaning", "date": "2026-11-26", "time": "10:00"},
     "Shall I book a cleaning on Thursday the 26th of November at ten a.m.?", "en"),
    ("shop-assistant", "schedule_callback", {"phone": "+46 70 123 45 67", "when": "imorgon"},
     "Ska jag boka en återuppringning till plus fyra sex, sju noll, ett två tre, fyra fem, sex sju imorgon?", "sv"),
    ("shop-assistant", "send_sms", {"phone": "+46 70 123 45 67", "text": "Premium kostar 349 kr per månad."},
     "Ska jag skicka ett sms till plus fyra sex, sju noll, ett två tre, fyra fem, sex sju?", "sv"),
]


@pytest.mark.parametrize(("example", "function", "arguments", "prompt", "language"), EXAMPLES, ids=[e[1] for e in EXAMPLES])
def test_the_examples_confirmation_prompts_speak_naturally(example, function, arguments, prompt, language):
    flow = AgentFlow(load_agent(ROOT / "examples" / example))
    flow.start()
    plan = flow.on_tool_call(function, json.dumps(arguments))
    assert plan.confirm.text == prompt and plan.confirm.policy == "scripted"


WRITTEN_BACK = [
    # the prompt (the gate's script), a transcript of it that writes the numbers the usual way, accepted?
    ("Shall I book a cleaning on Thursday the 26th of November at ten a.m.?",
     "Shall I book a cleaning on Thursday, November 26th at 10 AM?", "en", True),
    ("Shall I book a cleaning on Thursday the 26th of November at ten a.m.?",
     "Shall I book a cleaning on Thursday 2026-11-26 at 10:00?", "en", True),
    ("Shall I book a cleaning on Thursday the 26th of November at ten a.m.?",
     "Shall I book a cleaning on Thursday the 27th of November at ten a.m.?", "en", False),
    ("Shall I book a cleaning on Thursday the 26th of November at ten a.m.?",
     "Shall I book a cleaning on Thursday the 26th of November at eleven a.m.?", "en", False),
    ("Ska jag boka en återuppringning till plus fyra sex, sju noll, ett två tre, fyra fem, sex sju imorgon?",
     "Ska jag boka en återuppringning till +46 70 123 45 67 imorgon?", "sv", True),
    ("Ska jag boka en återuppringning till plus fyra sex, sju noll, ett två tre, fyra fem, sex sju imorgon?",
     "Ska jag boka en återuppringning till +46 70 123 45 68 imorgon?", "sv", False),
    ("Ska jag boka städning torsdag den 26 november klockan tio?",
     "Ska jag boka städning torsdag den 26 november klockan 10?", "sv", True),
    ("Ska jag boka städning torsdag den 26 november klockan tio?",
     "Ska jag boka städning torsdag den tjugosjätte november klockan tio?", "sv", True),
]


@pytest.mark.parametrize(("script", "said", "language", "accepted"), WRITTEN_BACK)
def test_the_scripted_check_accepts_the_spoken_form_against_the_arguments(script, said, language, accepted):
    matcher = ScriptMatcher(script, language)
    matcher.feed(said)
    verdict = matcher.finish()
    assert verdict.complete is accepted and verdict.rejected is not accepted


# -- what `voicecore check` says of x-kind, x-currency and placeholders said as written --------------------


def spoken_agent(directory: Path, properties: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "agent.toml").write_text('name = "x"\ninstructions = "Help."\n', encoding="utf-8")
    (directory / "flow.json").write_text(
        '{"initial_node": "main", "nodes": {"main": {"functions": ["book"]}}, "functions": {"book": {'
        '"parameters": {"type": "object", "properties": ' + properties + '}, "action": "end_call", '
        '"confirm": true, "confirm_prompt": "Book {when} for {price}?"}}}', encoding="utf-8")
    return directory


def test_spoken_kinds_and_currencies_must_be_known(tmp_path):
    agent = spoken_agent(tmp_path / "agent", '{"when": {"type": "string", "x-kind": "weekday"}, '
                                             '"price": {"type": "number", "x-kind": "money", "x-currency": "DKK"}}')
    assert {(p.code, p.path) for p in check_agent(agent).problems} == {
        ("unknown-kind", "$.functions.book.parameters.properties.when.x-kind"),
        ("unknown-currency", "$.functions.book.parameters.properties.price.x-currency"),
    }


def test_a_placeholder_with_a_digit_pattern_and_no_kind_is_a_warning(tmp_path):
    agent = spoken_agent(tmp_path / "agent", '{"when": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}, '
                                             '"price": {"type": "number", "x-kind": "money", "x-currency": "SEK"}}')
    check = check_agent(agent)
    assert check.problems == []
    assert [(w.code, w.path) for w in check.warnings] == [("unspoken-placeholder", "$.functions.book.confirm_prompt")]
    assert "{when} is read out as written" in check.warnings[0].message
    good = spoken_agent(tmp_path / "good", '{"when": {"type": "string", "format": "time", "pattern": "^[0-9]{2}:[0-9]{2}$"}, '
                                           '"price": {"type": "number", "x-kind": "money", "x-currency": "SEK"}}')
    assert check_agent(good).warnings == []
