"""Calling windows on the callee's clock, time zones from numbers, and retries by outcome."""

import datetime as dt

import phonenumbers
import pytest

from voicecore.outbound.campaign_rules import (
    BUSY, COMPLETED, FAILED, INTERRUPTED, NO_ANSWER, OPTED_OUT, VOICEMAIL, CallingWindow, RetryPolicy, RulesError,
    attempt_outcome, zones_of_number,
)


def at(text: str, zone: str = "UTC") -> float:
    from zoneinfo import ZoneInfo

    return dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def test_the_default_window_is_nine_to_eight_on_weekdays_on_the_callees_clock():
    window = CallingWindow()
    assert window.describe() == {"days": "mon,tue,wed,thu,fri", "start": "09:00", "end": "20:00"}
    monday_noon_utc = at("2026-11-30T12:00")
    assert window.is_open(monday_noon_utc, "Europe/Stockholm")  # 13:00 there
    assert not window.is_open(monday_noon_utc, "America/New_York")  # 07:00 there
    assert not window.is_open(at("2026-11-30T20:00", "Europe/Stockholm"), "Europe/Stockholm")  # the end is excluded
    assert window.is_open(at("2026-11-30T19:59", "Europe/Stockholm"), "Europe/Stockholm")
    assert not window.is_open(at("2026-12-05T12:00", "Europe/Stockholm"), "Europe/Stockholm")  # a Saturday


def test_a_number_in_several_zones_is_called_only_when_every_zone_is_open():
    window = CallingWindow()
    zones = ("America/New_York", "America/Los_Angeles")
    assert not window.is_open_everywhere(at("2026-11-30T10:00", "America/New_York"), zones)  # 07:00 in LA
    opens = window.next_open(at("2026-11-30T10:00", "America/New_York"), zones)
    assert opens == at("2026-11-30T09:00", "America/Los_Angeles")
    # and it closes when New York's window does
    assert not window.is_open_everywhere(at("2026-11-30T20:00", "America/New_York"), zones)


def test_next_open_skips_the_weekend_and_follows_daylight_saving():
    window = CallingWindow()
    assert window.next_open(at("2026-12-04T20:30", "Europe/Stockholm"), ["Europe/Stockholm"]) == at(
        "2026-12-07T09:00", "Europe/Stockholm")
    # the clocks went forward on Sunday 29 March 2026: Monday opens at 09:00 CEST, 07:00 UTC
    assert window.next_open(at("2026-03-27T21:00", "Europe/Stockholm"), ["Europe/Stockholm"]) == at("2026-03-30T07:00")


def test_zones_whose_windows_never_overlap_have_no_opening():
    window = CallingWindow(start=dt.time(9), end=dt.time(12))
    assert window.next_open(at("2026-11-30T00:00"), ["Pacific/Honolulu", "Asia/Tokyo"]) is None


def test_windows_parse_what_a_user_writes_and_refuse_the_rest():
    window = CallingWindow.parse("mon,wed,sat-sun", "10:30", "18:00")
    assert window.days == frozenset({0, 2, 5, 6}) and window.start == dt.time(10, 30)
    for days, start, end in (("fri-mon", "09:00", "20:00"), ("someday", "09:00", "20:00"), ("mon", "9", "20:00"),
                             ("mon", "20:00", "09:00")):
        with pytest.raises(RulesError):
            CallingWindow.parse(days, start, end)


def test_zones_come_from_the_number_and_a_region_spanning_zones_gives_them_all():
    assert zones_of_number(phonenumbers.parse("+12125550123")) == ("America/New_York",)
    assert zones_of_number(phonenumbers.parse("+46812345678")) == ("Europe/Stockholm",)
    australian_mobile = zones_of_number(phonenumbers.parse("+61412345678"))
    assert {"Australia/Perth", "Australia/Sydney"} <= set(australian_mobile)


def test_retries_back_off_by_outcome_and_stop_at_the_maximum():
    policy = RetryPolicy(max_attempts=3, backoff_s={BUSY: 600, "no-answer": 3600, VOICEMAIL: 7200, "failed": 60,
                                                   INTERRUPTED: 900}, factor=2)
    assert policy.next_attempt_at(BUSY, 1, 1000.0) == 1600.0
    assert policy.next_attempt_at(BUSY, 2, 1000.0) == 2200.0  # doubled after the second
    assert policy.next_attempt_at(VOICEMAIL, 1, 0.0) == 7200.0
    assert policy.next_attempt_at(INTERRUPTED, 1, 0.0) == 900.0
    assert policy.next_attempt_at(BUSY, 3, 1000.0) is None  # attempts used up
    assert policy.next_attempt_at(COMPLETED, 1, 0.0) is None
    assert policy.next_attempt_at(OPTED_OUT, 1, 0.0) is None
    with pytest.raises(RulesError):
        policy.next_attempt_at("maybe", 1, 0.0)
    with pytest.raises(RulesError):
        RetryPolicy(max_attempts=0)


def test_an_attempts_outcome_comes_from_the_last_status_then_the_verdict_and_the_opt_out():
    for status in ("queued", "initiated", "ringing", "in-progress"):
        assert attempt_outcome(status) is None  # not over yet
    assert (attempt_outcome("busy"), attempt_outcome("no-answer")) == (BUSY, NO_ANSWER)
    assert attempt_outcome("failed") == attempt_outcome("canceled") == FAILED
    assert attempt_outcome("completed", verdict="human") == COMPLETED
    assert attempt_outcome("completed", verdict="voicemail") == VOICEMAIL
    # a screening assistant or an IVR may have passed the call on: only a voicemail is tried again
    assert attempt_outcome("completed", verdict="screening") == attempt_outcome("completed", verdict="ivr") == COMPLETED
    # the carrier's AMD decides only when the gate gave no verdict
    assert attempt_outcome("completed", answered_by="machine_end_beep") == VOICEMAIL
    assert attempt_outcome("completed", answered_by="machine_start", verdict="human") == COMPLETED
    assert attempt_outcome("completed", answered_by="human") == COMPLETED
    # an opt-out wins over every verdict
    assert attempt_outcome("completed", verdict="voicemail", opted_out=True) == OPTED_OUT
