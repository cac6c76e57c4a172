"""What `POST /api/campaigns` reads from its body and query (voicecore/outbound/campaign_request.py): the campaign
file from JSON rows, a JSON csv or a CSV body, the options `voicecore campaign run` takes, and a clear error for
each option it cannot use. The file's own checks are check_campaign's, as the command's."""

from __future__ import annotations

import json

import pytest

from voicecore.outbound.campaign_file import parse_campaign
from voicecore.outbound.campaign_request import RequestError, build_settings, check_campaign, read_request

NOW = 1_800_000_000.0


def test_rows_become_the_campaign_file_with_every_column_and_the_options_become_its_settings():
    body = {"rows": [{"number": "+46701234567", "first_name": "Anna"}, {"number": "+46701234568", "timezone": "Europe/Stockholm"}],
            "from": "+46812345600", "concurrency": 4, "per_from": 2, "max_attempts": 2, "days": "mon-sun",
            "window_start": "08:00", "window_end": "18:00", "retry_after": {"busy": 60}, "carrier": "plivo",
            "name": "spring", "do_not_call": ["+46701234569"], "call_timeout": 600}
    asked = read_request(json.dumps(body).encode(), "application/json; charset=utf-8", {}, NOW)
    assert asked.text == "number,first_name,timezone\n+46701234567,Anna,\n+46701234568,,Europe/Stockholm\n"
    assert (asked.name, asked.file, asked.carrier, asked.call_timeout_s) == ("spring", "spring.csv", "plivo", 600.0)
    settings = asked.settings
    assert (settings.concurrency, settings.per_from_limit, settings.from_numbers) == (4, 2, ("+46812345600",))
    assert settings.retry.max_attempts == 2 and settings.retry.backoff_s["busy"] == 60.0
    assert settings.window.describe() == {"days": "mon,tue,wed,thu,fri,sat,sun", "start": "08:00", "end": "18:00"}
    assert [c.number for c in parse_campaign(asked.text)] == ["+46701234567", "+46701234568"]
    assert asked.run_options() == {"carrier": "plivo", "machine_detection": "", "call_timeout_s": 600.0}


def test_a_csv_body_takes_its_options_from_the_query_and_a_name_is_made_when_none_is_given():
    query = {"from": ["+46812345600", "+46812345601"], "retry_after": ["no-answer=30"], "concurrency": ["3"]}
    asked = read_request("\ufeffnumber\n+46701234567\n".encode(), "text/csv", query, NOW)
    assert asked.text == "number\n+46701234567\n" and asked.name == "campaign-20270115-080000"
    assert asked.settings.from_numbers == ("+46812345600", "+46812345601") and asked.settings.concurrency == 3
    assert asked.settings.retry.backoff_s["no-answer"] == 30.0


@pytest.mark.parametrize("body, says", [
    ({"rows": [{"number": "+46701234567"}]}, "from"),
    ({"rows": [], "csv": "number\n", "from": "+46812345600"}, "one of the two"),
    ({"rows": [{"number": 46701234567}], "from": "+46812345600"}, "rows[0]"),
    ({"rows": [], "from": "+46812345600", "concurrency": "many"}, "concurrency"),
    ({"rows": [], "from": "+46812345600", "concurrency": 2.5}, "concurrency"),
    ({"rows": [], "from": "+46812345600", "max_attempts": 0}, "max_attempts"),
    ({"rows": [], "from": "12"}, "from '12'"),
    ({"rows": [], "from": "+46812345600", "days": "someday"}, "someday"),
    ({"rows": [], "from": "+46812345600", "retry_after": {"fax": 3}}, "fax"),
    ({"rows": [], "from": "+46812345600", "machine_detection": "yes"}, "machine_detection"),
    ({"rows": [], "from": "+46812345600", "name": "a\nb"}, "name"),
    ({"rows": [], "from": "+46812345600", "call_timeout": 1}, "call_timeout"),
    ({"rows": [], "from": "+46812345600", "speed": 1}, "speed"),
    ([1, 2], "JSON object"),
])
def test_an_option_it_cannot_use_is_refused_by_name(body, says):
    with pytest.raises(RequestError) as refused:
        read_request(json.dumps(body).encode(), "application/json", {}, NOW)
    assert says in str(refused.value)


def test_the_file_and_the_do_not_call_list_are_checked_together_every_problem_listed():
    text = "number,first_name\n+46701234567,Ann\nhello,Bo\n+46701234567,\n"
    callees, listed, problems = check_campaign(text, "spring.csv", {"first_name"},
                                               build_settings(from_numbers=["+46812345600"]).window,
                                               do_not_call="+46701234569\nnope", do_not_call_file="do_not_call")
    assert callees == [] and listed == set()
    assert [(p.file, p.row, p.code) for p in problems] == [
        ("spring.csv", 3, "bad-number"), ("spring.csv", 4, "duplicate-number"), ("spring.csv", 4, "missing-field"),
        ("do_not_call", 2, "bad-number")]
    callees, listed, problems = check_campaign("number\n+46701234567\n", "ok.csv", (), build_settings(
        from_numbers=["+46812345600"]).window, do_not_call="+46701234569")
    assert [c.number for c in callees] == ["+46701234567"] and listed == {"+46701234569"} and problems == []
