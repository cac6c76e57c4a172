"""The model worker's reconnect schedule after a dropped or refused model socket."""

from workers.model.main import RECONNECT_FIRST_S, RECONNECT_MAX_S, reconnect_delay_s


def test_reconnects_start_fast_double_and_stay_bounded_with_jitter():
    plain = [reconnect_delay_s(n, 1.0) for n in range(1, 10)]
    assert plain[0] == RECONNECT_FIRST_S and plain[1] == 2 * RECONNECT_FIRST_S and plain[2] == 4 * RECONNECT_FIRST_S
    assert plain == sorted(plain) and max(plain) == RECONNECT_MAX_S
    assert reconnect_delay_s(1, 0.5) == RECONNECT_FIRST_S / 2 and reconnect_delay_s(20, 1.5) == RECONNECT_MAX_S * 1.5


def test_a_session_is_renewed_before_the_vendors_limit_with_time_to_find_a_pause():
    from workers.model.main import renew_by_s, renew_from_s

    assert (renew_from_s(3600), renew_by_s(3600)) == (3300, 3585)  # from 55 min, at the latest 59:45
    assert (renew_from_s(60), renew_by_s(60)) == (45, 57)  # a short limit: a quarter and a twentieth of it
    for limit in (60, 600, 3600, 86_400):
        assert 0 < renew_from_s(limit) < renew_by_s(limit) < limit
