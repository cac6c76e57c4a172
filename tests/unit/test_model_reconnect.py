"""The model worker's reconnect schedule after a dropped or refused model socket."""

from workers.model.main import RECONNECT_FIRST_S, RECONNECT_MAX_S, reconnect_delay_s


def test_reconnects_start_fast_double_and_stay_bounded_with_jitter():
    plain = [reconnect_delay_s(n, 1.0) for n in range(1, 10)]
    assert plain[0] == RECONNECT_FIRST_S and plain[1] == 2 * RECONNECT_FIRST_S and plain[2] == 4 * RECONNECT_FIRST_S
    assert plain == sorted(plain) and max(plain) == RECONNECT_MAX_S
    assert reconnect_delay_s(1, 0.5) == RECONNECT_FIRST_S / 2 and reconnect_delay_s(20, 1.5) == RECONNECT_MAX_S * 1.5
