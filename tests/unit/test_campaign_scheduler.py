"""The campaign scheduler, driven by a clock the test passes in: concurrency per campaign and per caller
number, calling windows, the do-not-call list, retries with backoff, and resuming from the stored attempts."""

import datetime as dt

import pytest

from voicecore.outbound.campaign import DO_NOT_CALL, NO_WINDOW, Attempt, CampaignScheduler, CampaignSettings
from voicecore.outbound.campaign_file import Callee
from voicecore.outbound.campaign_rules import (
    BUSY, COMPLETED, INTERRUPTED, NO_ANSWER, OPTED_OUT, VOICEMAIL, CallingWindow, RetryPolicy,
)

MONDAY_NOON_UTC = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc).timestamp()
STOCKHOLM = ("Europe/Stockholm",)  # 13:00 at MONDAY_NOON_UTC: open
NEW_YORK = ("America/New_York",)  # 07:00: opens at 14:00 UTC


def callees(n: int, zones=STOCKHOLM) -> list[Callee]:
    return [Callee(row=i + 2, number=f"+4681234{i:04d}", zones=zones, fields={}) for i in range(n)]


def settings(**kwargs) -> CampaignSettings:
    retry = RetryPolicy(max_attempts=3, backoff_s={BUSY: 600, NO_ANSWER: 3600, VOICEMAIL: 7200, "failed": 60,
                                                   INTERRUPTED: 900}, factor=1)
    return CampaignSettings(**{"retry": retry, **kwargs})


def test_it_dials_no_more_than_the_campaign_and_each_caller_number_allow():
    scheduler = CampaignScheduler(settings(concurrency=5, from_numbers=("+1A", "+1B"), per_from_limit=2), callees(10))
    dials = scheduler.due(MONDAY_NOON_UTC)
    assert len(dials) == 4  # two caller numbers, two calls each: below the campaign's five
    assert sorted(d.from_number for d in dials) == ["+1A", "+1A", "+1B", "+1B"]
    assert [d.row for d in dials] == [2, 3, 4, 5] and all(d.attempt == 1 for d in dials)
    assert scheduler.due(MONDAY_NOON_UTC) == []
    scheduler.on_outcome(3, 1, COMPLETED, MONDAY_NOON_UTC + 60)
    (next_dial,) = scheduler.due(MONDAY_NOON_UTC + 60)
    assert next_dial.row == 6 and next_dial.from_number == dials[1].from_number


def test_a_callee_outside_its_window_waits_for_it_to_open():
    people = callees(1, NEW_YORK) + [Callee(row=9, number="+46812340009", zones=STOCKHOLM, fields={})]
    scheduler = CampaignScheduler(settings(), people)
    assert [d.row for d in scheduler.due(MONDAY_NOON_UTC)] == [9]
    opens = dt.datetime(2026, 11, 30, 14, 0, tzinfo=dt.timezone.utc).timestamp()  # 09:00 in New York
    assert scheduler.next_wakeup() == opens
    assert scheduler.due(opens - 1) == []
    assert [d.row for d in scheduler.due(opens)] == [2]


def test_a_callee_whose_zones_never_share_an_open_hour_is_never_dialled():
    scheduler = CampaignScheduler(settings(window=CallingWindow(start=dt.time(9), end=dt.time(12))),
                                  callees(1, ("Pacific/Honolulu", "Asia/Tokyo")))
    assert scheduler.due(MONDAY_NOON_UTC) == [] and scheduler.result_of(2) == NO_WINDOW and scheduler.finished


def test_retries_follow_the_outcome_backoff_and_stop_at_the_maximum():
    scheduler = CampaignScheduler(settings(), callees(1))
    now = MONDAY_NOON_UTC
    (dial,) = scheduler.due(now)
    scheduler.on_outcome(2, 1, BUSY, now + 10)
    assert scheduler.due(now + 10 + 599) == [] and scheduler.next_wakeup() == now + 610
    (dial,) = scheduler.due(now + 610)
    assert dial.attempt == 2
    scheduler.on_outcome(2, 2, VOICEMAIL, now + 700)
    (dial,) = scheduler.due(now + 700 + 7200)
    assert dial.attempt == 3
    scheduler.on_outcome(2, 3, NO_ANSWER, now + 8000)
    assert scheduler.finished and scheduler.result_of(2) == NO_ANSWER and scheduler.next_wakeup() is None


def test_an_opt_out_ends_the_callee_and_joins_the_do_not_call_list():
    scheduler = CampaignScheduler(settings(), callees(1))
    (dial,) = scheduler.due(MONDAY_NOON_UTC)
    scheduler.on_outcome(2, 1, OPTED_OUT, MONDAY_NOON_UTC + 30)
    assert scheduler.result_of(2) == OPTED_OUT and dial.number in scheduler.do_not_call


def test_the_do_not_call_list_is_honoured_before_every_dial():
    people = callees(3)
    scheduler = CampaignScheduler(settings(), people, do_not_call={people[0].number})
    assert scheduler.result_of(2) == DO_NOT_CALL
    scheduler.add_do_not_call(people[1].number)  # listed while the campaign runs
    assert [d.row for d in scheduler.due(MONDAY_NOON_UTC)] == [4]
    assert scheduler.results() == {DO_NOT_CALL: 2}


def test_a_dial_the_store_refused_is_not_counted():
    scheduler = CampaignScheduler(settings(), callees(2))
    first, second = scheduler.due(MONDAY_NOON_UTC)
    scheduler.on_refused(first.row, first.attempt)
    assert scheduler.result_of(first.row) == DO_NOT_CALL and scheduler.in_flight == 1
    with pytest.raises(ValueError):
        scheduler.on_outcome(first.row, first.attempt, COMPLETED, MONDAY_NOON_UTC)


def test_it_resumes_from_the_stored_attempts_without_repeating_one():
    people = callees(3)
    stored = [Attempt(row=2, attempt=1, from_number="", dialed_at=MONDAY_NOON_UTC, outcome=BUSY,
                      ended_at=MONDAY_NOON_UTC + 5),
              Attempt(row=3, attempt=1, from_number="", dialed_at=MONDAY_NOON_UTC, outcome=COMPLETED,
                      ended_at=MONDAY_NOON_UTC + 90),
              # the campaign process died while this one was dialing: the store ends it as interrupted
              Attempt(row=4, attempt=1, from_number="", dialed_at=MONDAY_NOON_UTC, outcome=INTERRUPTED,
                      ended_at=MONDAY_NOON_UTC + 100)]
    scheduler = CampaignScheduler(settings(), people, attempts=stored)
    assert scheduler.result_of(3) == COMPLETED
    assert scheduler.due(MONDAY_NOON_UTC + 100) == []
    assert [(d.row, d.attempt) for d in scheduler.due(MONDAY_NOON_UTC + 605)] == [(2, 2)]
    assert [(d.row, d.attempt) for d in scheduler.due(MONDAY_NOON_UTC + 1000)] == [(4, 2)]  # after its backoff


def test_an_attempt_still_dialing_holds_its_line():
    stored = [Attempt(row=2, attempt=1, from_number="+1A", dialed_at=MONDAY_NOON_UTC)]
    scheduler = CampaignScheduler(settings(concurrency=1, from_numbers=("+1A",)), callees(2), attempts=stored)
    assert scheduler.in_flight == 1 and scheduler.due(MONDAY_NOON_UTC) == []
    scheduler.on_outcome(2, 1, COMPLETED, MONDAY_NOON_UTC + 1)
    assert [(d.row, d.attempt) for d in scheduler.due(MONDAY_NOON_UTC + 1)] == [(3, 1)]


def test_unknown_outcomes_and_bad_settings_are_refused():
    scheduler = CampaignScheduler(settings(), callees(1))
    scheduler.due(MONDAY_NOON_UTC)
    with pytest.raises(ValueError):
        scheduler.on_outcome(2, 1, "maybe", MONDAY_NOON_UTC)
    for bad in ({"concurrency": 0}, {"from_numbers": ()}, {"from_numbers": ("+1", "+1")}, {"per_from_limit": -1}):
        with pytest.raises(ValueError):
            settings(**bad)
