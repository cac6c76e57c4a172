"""bench.carrier_cost drives the real carrier shell: every frame and mark it feeds is taken, nothing is an error."""

from bench.carrier_cost import main, measure


def test_carrier_cost_feeds_and_ticks_every_call():
    result = measure(3, 1.0)
    assert result["protocol_errors"] == 0
    assert result["frames_received"] == 3 * 50  # two frames per 40 ms
    assert result["marks_received"] == 3 * 25
    assert result["media_sent"] == 3 * 50  # one caller frame per 20 ms tick
    assert result["frames_played"] > 3 * 40
    assert result["cpu_ms_per_call_second"] > 0


def test_carrier_cost_prints_its_figure(capsys):
    main(["--calls", "2", "--seconds", "0.5"])
    assert "ms CPU per call-second" in capsys.readouterr().out
