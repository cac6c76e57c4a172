"""A campaign file is refused with every bad row listed; a good one gives callees in E.164 with their zones."""

import pytest

from voicecore.agent.spec import AgentSpec, FlowSpec, Message, NodeSpec
from voicecore.outbound.campaign_file import (
    CampaignFileError, agent_placeholders, parse_campaign, parse_do_not_call,
)
from voicecore.outbound.campaign_rules import CallingWindow


def problems(text: str, **kwargs) -> list[tuple[int, str]]:
    with pytest.raises(CampaignFileError) as caught:
        parse_campaign(text, **kwargs)
    return [(p.row, p.code) for p in caught.value.problems]


def test_a_good_file_gives_e164_numbers_zones_and_fields():
    callees = parse_campaign("number,name,timezone\n+1 (212) 555-0123,Ann,\n+46 8 123 456 78,Bo,Europe/Stockholm\n"
                             "+61 412 345 678,Cy,Australia/Perth\n\n", required_fields={"name"})
    assert [(c.row, c.number, c.zones, c.fields) for c in callees] == [
        (2, "+12125550123", ("America/New_York",), {"name": "Ann"}),
        (3, "+46812345678", ("Europe/Stockholm",), {"name": "Bo"}),
        (4, "+61412345678", ("Australia/Perth",), {"name": "Cy"}),  # the column wins over the number's five zones
    ]


def test_every_bad_row_is_listed_with_its_row_number_and_nothing_is_returned():
    text = ("number,name,timezone\n"
            "+12125550123,Ann,\n"      # 2: good
            "212-555-0124,Bob,\n"      # 3: no country code
            "+1212555012,Cy,\n"        # 4: too short for the plan
            "hello,Di,\n"              # 5: not a number
            "+1 212 555 0123,Ed,\n"    # 6: the number of row 2 again
            "+12125550125,,\n"         # 7: the agent's {name} is empty
            "+46812345678,Fi,Mars/Base\n"  # 8: no such zone
            ",Gu,\n"                   # 9: no number
            "+12125550126,Ha,,extra\n")  # 10: more cells than the header
    assert problems(text, required_fields={"name"}) == [
        (3, "bad-number"), (4, "bad-number"), (5, "bad-number"), (6, "duplicate-number"), (7, "missing-field"),
        (8, "bad-timezone"), (9, "no-number"), (10, "extra-cells")]
    with pytest.raises(CampaignFileError) as caught:
        parse_campaign(text, file="callees.csv", required_fields={"name"})
    lines = str(caught.value).splitlines()
    assert lines[3] == "callees.csv: row 6: +12125550123 is also on row 2"
    assert lines[0] == "callees.csv: row 3: number '212-555-0124': no country code (write it as +<country code><number>)"


def test_a_default_region_reads_national_numbers():
    (callee,) = parse_campaign("number\n(212) 555-0123\n", default_region="US")
    assert callee.number == "+12125550123"


def test_a_missing_column_the_agent_uses_or_a_missing_number_column_is_refused():
    assert problems("number,name\n+12125550123,Ann\n", required_fields={"name", "appointment"}) == [(1, "missing-column")]
    assert problems("phone,name\n+12125550123,Ann\n") == [(1, "no-number-column")]
    assert problems("number\n") == [(1, "no-callees")]


def test_a_number_that_could_never_be_called_within_its_window_is_refused():
    short = CallingWindow.parse("mon-sun", "09:00", "10:00")
    # a US toll-free number may ring anywhere from Guam to Newfoundland: no hour is 09-10 in all of them
    assert problems("number\n+18005550123\n", window=short) == [(2, "no-common-window")]
    (callee,) = parse_campaign("number,timezone\n+18005550123,America/Chicago\n", window=short)
    assert callee.zones == ("America/Chicago",)


def test_the_do_not_call_file_takes_any_format_and_refuses_a_line_that_is_no_number():
    assert parse_do_not_call("# list\n+1 (212) 555-0123\n\n+46 8 123 456 78\n+12125550123\n") == {
        "+12125550123", "+46812345678"}
    assert parse_do_not_call("(212) 555-0199\n", default_region="US") == {"+12125550199"}
    with pytest.raises(CampaignFileError) as caught:
        parse_do_not_call("+12125550123\ncall me maybe\n", file="dnc.txt")
    assert str(caught.value) == "dnc.txt: row 2: 'call me maybe': not a phone number"


def test_the_fields_a_campaign_needs_are_the_placeholders_of_the_agents_texts():
    node = NodeSpec(name="main", role_messages=(Message("system", "You call {first_name}."),),
                    task_messages=(Message("system", 'Confirm {appointment_time}. JSON: {"a": 1}'),), say="Hi {first_name}")
    spec = AgentSpec(name="reminder", instructions="Remind them of {clinic}.", greeting="Hello, {first_name}?",
                     flow=FlowSpec(initial_node="main", nodes={"main": node}, functions={}))
    assert agent_placeholders(spec) == {"first_name", "appointment_time", "clinic"}
