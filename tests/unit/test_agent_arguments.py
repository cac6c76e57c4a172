"""A function call's arguments against its JSON Schema: one check for the flow and the tool runner."""

from __future__ import annotations

from voicecore.agent.arguments import check_arguments

DATE_TIME = {"type": "object", "properties": {"date": {"type": "string", "format": "date"},
                                              "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}},
             "required": ["date", "time"], "additionalProperties": False}


def test_valid_arguments_come_back_as_the_object():
    assert check_arguments(DATE_TIME, '{"date": "2026-11-26", "time": "10:00"}') == ({"date": "2026-11-26", "time": "10:00"}, "")


def test_a_format_is_enforced_not_only_the_type():
    value, problem = check_arguments(DATE_TIME, '{"date": "tomorrow", "time": "10:00"}')
    assert value is None and problem.startswith("date:") and "date" in problem


def test_each_kind_of_bad_input_says_what_is_wrong():
    assert check_arguments(DATE_TIME, '{"date": "2026-11-26"}')[1] == "'time' is a required property"
    assert check_arguments(DATE_TIME, '{"date": "2026-11-26", "time": "10:00", "x": 1}')[1].startswith("Additional properties")
    assert check_arguments(DATE_TIME, "[1]")[1] == "the arguments must be a JSON object"
    assert check_arguments(DATE_TIME, '{"date": NaN}')[1].startswith("the arguments are not JSON")
    assert check_arguments({"type": "nonsense"}, "{}")[1].startswith("the function's parameters are not a valid schema")


def test_time_and_date_time_formats_are_checked_whatever_jsonschema_finds_installed():
    schema = {"type": "object", "properties": {"time": {"type": "string", "format": "time"},
                                               "at": {"type": "string", "format": "date-time"}}}
    for time in ("10:00", "23:59", "10:00:00", "10:00:00.5", "10:00Z", "10:00:00+01:00"):
        assert check_arguments(schema, f'{{"time": "{time}"}}')[1] == "", time
    for time in ("24:00", "10", "ten", "10:60", "1000"):
        assert check_arguments(schema, f'{{"time": "{time}"}}')[1].startswith("time:"), time
    for moment in ("2026-11-26T10:00", "2026-11-26T10:00:00Z", "2026-11-26 10:00:00+01:00"):
        assert check_arguments(schema, f'{{"at": "{moment}"}}')[1] == "", moment
    for moment in ("2026-11-26", "tomorrow at ten", "2026-13-26T10:00"):
        assert check_arguments(schema, f'{{"at": "{moment}"}}')[1].startswith("at:"), moment
