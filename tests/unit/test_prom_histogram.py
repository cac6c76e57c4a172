"""voicecore.prom_histogram: a process's Prometheus histograms and the flat stats keys that carry them.

Bucket semantics are Prometheus' (`le`: observations less than or equal to the bound, cumulative), checked
against a direct count over the observed values; the flat keys must read back to what was written.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore import prom_histogram as ph


def test_a_value_equal_to_a_bound_counts_in_that_bucket_and_larger_ones_in_inf():
    h = ph.Histogram([0.1, 0.5, 1])
    for value in (0.05, 0.1, 0.10000001, 0.5, 3.0, -1.0):
        h.observe(value)
    assert h.cumulative() == [(0.1, 3), (0.5, 5), (1.0, 5), (math.inf, 6)]
    assert h.count == 6
    assert h.sum == pytest.approx(0.05 + 0.1 + 0.10000001 + 0.5 + 3.0 - 1.0)


def test_a_fresh_histogram_reports_zeros_in_every_bucket():
    assert ph.Histogram([1, 2]).cumulative() == [(1.0, 0), (2.0, 0), (math.inf, 0)]
    assert ph.Histogram([]).cumulative() == [(math.inf, 0)]


def test_nan_is_not_an_observation():
    h = ph.Histogram([1])
    h.observe(float("nan"))
    h.observe(2.0)
    assert h.cumulative() == [(1.0, 0), (math.inf, 1)] and h.sum == 2.0 and h.count == 1


def test_infinity_lands_in_the_inf_bucket():
    h = ph.Histogram([1])
    h.observe(math.inf)
    assert h.cumulative() == [(1.0, 0), (math.inf, 1)] and h.sum == math.inf


@pytest.mark.parametrize("bounds", [[1, 1], [2, 1], [float("nan")], [1, float("inf"), 2], [-math.inf, 1]])
def test_bad_bounds_are_refused(bounds):
    with pytest.raises(ValueError):
        ph.Histogram(bounds)


def test_a_trailing_infinity_is_the_implicit_inf_bucket():
    assert ph.Histogram([0.5, math.inf]).bounds == (0.5,)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), max_size=60),
       st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=1, max_size=10, unique=True))
def test_cumulative_counts_are_the_values_at_or_below_each_bound(values, bounds):
    h = ph.Histogram(sorted(bounds))
    for value in values:
        h.observe(value)
    cumulative = h.cumulative()
    assert [bound for bound, _ in cumulative] == [*sorted(bounds), math.inf]
    for bound, n in cumulative:
        assert n == sum(1 for v in values if v <= bound)
    counts = [n for _, n in cumulative]
    assert counts == sorted(counts) and counts[-1] == h.count == len(values)


# --- flat keys ----------------------------------------------------------------------------------------

def test_flat_keys_are_exposition_sample_names_and_read_back():
    h = ph.Histogram([0.00025, 1, 2.5])
    h.observe(0.0001)
    h.observe(2)
    flat = h.flat("tool_duration_seconds", {"outcome": "ok"})
    assert flat == {
        'tool_duration_seconds_bucket{outcome="ok",le="0.00025"}': 1.0,
        'tool_duration_seconds_bucket{outcome="ok",le="1"}': 1.0,
        'tool_duration_seconds_bucket{outcome="ok",le="2.5"}': 2.0,
        'tool_duration_seconds_bucket{outcome="ok",le="+Inf"}': 2.0,
        'tool_duration_seconds_sum{outcome="ok"}': 2.0001,
        'tool_duration_seconds_count{outcome="ok"}': 2.0,
    }
    assert all(isinstance(v, float) for v in flat.values())
    parsed = {key: ph.parse_flat_key(key) for key in flat}
    assert parsed['tool_duration_seconds_bucket{outcome="ok",le="+Inf"}'] == ph.FlatKey(
        "tool_duration_seconds", "bucket", (("outcome", "ok"), ("le", "+Inf")))
    assert parsed['tool_duration_seconds_sum{outcome="ok"}'] == ph.FlatKey("tool_duration_seconds", "sum",
                                                                           (("outcome", "ok"),))
    assert set(ph.Histogram([1]).flat("pacer_lateness_seconds")) == {
        'pacer_lateness_seconds_bucket{le="1"}', 'pacer_lateness_seconds_bucket{le="+Inf"}',
        "pacer_lateness_seconds_sum{}", "pacer_lateness_seconds_count{}"}


@pytest.mark.parametrize("raw", ['plain', 'a"b', "a\\b", "a\nb", "}{,=", ""])
def test_label_values_are_escaped_and_read_back(raw):
    (key,) = [k for k in ph.Histogram([]).flat("x", {"v": raw}) if "_sum" in k]
    assert "\n" not in key
    assert ph.parse_flat_key(key) == ph.FlatKey("x", "sum", (("v", raw),))


@pytest.mark.parametrize("bound, text", [(0.0001, "0.0001"), (0.00025, "0.00025"), (1, "1"), (10.0, "10"),
                                         (1e-05, "1e-05"), (math.inf, "+Inf")])
def test_bounds_are_written_as_go_writes_them(bound, text):
    assert ph.format_bound(bound) == text
    assert ph.bound_of(text) == bound


@pytest.mark.parametrize("key", [
    "ticks", "tick_lateness_p50_ms", "x_count", "x_sum",  # the processes' other stats
    'x_bucket{}', 'x_bucket{le="1",a="b"}', 'x_sum{le="1"}',  # le missing, not last, or on a sum
    'x_bucket{le="one"}', 'x_bucket{le="inf"}', 'x_bucket{le="1_0"}', 'x_bucket{le=" 1"}',
    'x_sum{a="1",a="2"}', 'x_sum{a="1",}', 'x_sum{a=1}', 'x_sum{,}', 'x_sum{a="1"b="2"}',
    'X_sum{}', '_x_sum{}', 'x_total{}', 'x_sum{}\n', 'x_sum{} ', 'x_sum{a="\\"}',
])
def test_other_keys_are_not_histogram_keys(key):
    assert ph.parse_flat_key(key) is None


@pytest.mark.parametrize("family, labels", [("Bad", {}), ("x", {"bad-name": "v"}), ("x y", {})])
def test_flat_key_refuses_names_that_would_not_read_back(family, labels):
    with pytest.raises(ValueError):
        ph.Histogram([1]).flat(family, labels)


def test_the_module_is_pure():
    tree = ast.parse(Path(ph.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "bisect", "math", "re", "collections", "typing"}
