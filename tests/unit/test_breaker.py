"""The circuit breaker per vendor endpoint: closed, open after `threshold` failed session opens in the window,
one trial after `open_s`, closed by its success, open twice as long by its failure (capped)."""

from __future__ import annotations

import pytest

from voicecore.realtime.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker


def test_failures_outside_the_window_do_not_add_up():
    b = CircuitBreaker(threshold=3, window_s=10)
    for t in (0, 5, 16):
        b.failure(t)
    assert b.state == CLOSED and b.allow(16)


def test_threshold_failures_open_it_then_one_trial_at_a_time_decides():
    b = CircuitBreaker(threshold=3, window_s=10, open_s=1, max_open_s=4)
    for t in (0.0, 0.1, 0.2):
        b.failure(t)
    assert b.state == OPEN and not b.allow(0.5) and b.retry_in(0.5) == pytest.approx(0.7)
    assert b.allow(1.2) and b.state == HALF_OPEN
    assert not b.allow(1.3)  # the trial is out: nobody else
    b.failure(1.4)  # the trial failed: open twice as long
    assert b.state == OPEN and not b.allow(3.0) and b.allow(3.5)
    b.failure(3.6)
    b.allow(7.7)
    b.failure(7.8)
    assert b.open_s == 4  # capped at max_open_s
    assert b.allow(11.9)
    b.success(12.0)
    assert b.state == CLOSED and b.open_s == 1 and b.allow(12.0) and b.times_opened == 4


def test_a_trial_that_never_reports_is_retried():
    b = CircuitBreaker(threshold=1, open_s=1)
    b.failure(0)
    assert b.allow(1.0) and not b.allow(1.5) and b.allow(2.1)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        CircuitBreaker(threshold=0)
    with pytest.raises(ValueError):
        CircuitBreaker(open_s=10, max_open_s=5)


def test_a_refused_configuration_closes_it_to_every_call_until_a_trial_of_its_own_succeeds():
    from voicecore.realtime.breaker import FATAL

    b = CircuitBreaker(threshold=3, open_s=1, max_open_s=5)
    assert b.fatal(10.0, "auth: invalid_api_key: Incorrect API key provided") is True
    assert b.state == FATAL and b.is_open and b.is_fatal and b.times_opened == 1
    assert not b.allow(10.0) and not b.allow(1000.0)  # no half-open trial by a caller: the key will not change
    assert b.retry_in(10.0) == 5
    b.failure(11.0)  # a failed handshake meanwhile changes nothing
    assert b.state == FATAL and b.fatal_reason.startswith("auth:")
    assert b.fatal(12.0, "quota: insufficient_quota: You exceeded your current quota") is False  # already said
    assert b.fatal_since == 10.0 and b.fatal_reason.startswith("quota:")
    b.success(40.0)  # the shell's own trial session was accepted
    assert b.state == CLOSED and b.allow(40.0) and b.fatal_reason == ""
