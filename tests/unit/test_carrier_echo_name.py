"""The carrier simulator's mark echo writes the name as JSON without json.dumps when it needs no escaping:
the result must be json.dumps' own, for any name."""

import json

from hypothesis import given, strategies as st

from voicecore.sim.carrier_core import _json_string


@given(st.text())
def test_any_name_is_written_as_json_dumps_writes_it(name):
    assert _json_string(name) == json.dumps(name)


def test_names_that_need_escaping_are_escaped():
    for name in ('a"b', "a\\b", "\x01", "\u2028", "é", "\x7f"):
        assert json.loads(_json_string(name)) == name and _json_string(name) == json.dumps(name)
    assert _json_string("12:340:end") == '"12:340:end"'
