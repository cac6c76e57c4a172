"""voicecore.metrics_text: /metrics as Prometheus exposition text (format 0.0.4) and when to serve it.

The output is read back with a strict parser written from the spec (tests/exposition.py), whose own
refusals are pinned here too. A real stack's scrape during and after a call is read by it in
tests/stack/test_metrics_stack.py.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore import metrics_text as mt
from voicecore import prom_histogram


from exposition import GO_FLOAT, ExpositionError, histogram_series, parse_exposition, value


# --- the parser itself is strict ---------------------------------------------------------------------

@pytest.mark.parametrize("bad", [
    "x 1",  # no newline at the end
    "# TYPE x gauge\nx 1\n\n",  # blank line
    "# TYPE x gauge\nx one\n",
    "# TYPE x gauge\nx 1_000\n",
    "# TYPE x gauge\nx inf\n",
    "x 1\n",  # no TYPE
    "# TYPE x gauge\n# TYPE x gauge\nx 1\n",
    "# TYPE x gauge\nx 1\nx 2\n",
    "# TYPE x gauge\nx{a=\"1\",a=\"2\"} 1\n",
    "# TYPE x gauge\nx{a=\"\\t\"} 1\n",
    "# TYPE x gauge\nx{a=1} 1\n",
    "# TYPE x gauge\nx{1a=\"1\"} 1\n",
    "# TYPE 1x gauge\n",
    "# TYPE x wobbly\nx 1\n",
    "# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\n# TYPE x gauge\n",
    "# TYPE x gauge\nx 1\n# TYPE y gauge\nx 2\n",
])
def test_the_strict_parser_refuses(bad):
    with pytest.raises(ExpositionError):
        parse_exposition(bad)


def test_the_strict_parser_reads_the_spec_example():
    text = (
        '# HELP http_requests_total The total number of HTTP requests.\n'
        '# TYPE http_requests_total counter\n'
        'http_requests_total{method="post",code="200"} 1027 1395066363000\n'
        'http_requests_total{method="post",code="400"}    3 1395066363000\n'.replace("    ", " ")
        + '# A normal comment.\n'
        '# TYPE msdos_file_access_time_seconds gauge\n'
        'msdos_file_access_time_seconds{path="C:\\\\DIR\\\\FILE.TXT",error="Cannot find file:\\n\\"FILE.TXT\\""} 1.458255915e9\n'
        '# TYPE rpc_duration_seconds summary\n'
        'rpc_duration_seconds{quantile="0.5"} 4773\n'
        'rpc_duration_seconds_sum 1.7560473e+07\n'
        'rpc_duration_seconds_count 2693\n'
    )
    families = parse_exposition(text)
    assert value(families, "http_requests_total", method="post", code="400") == 3
    (labels,) = [dict(k[1]) for k in families["msdos_file_access_time_seconds"]["samples"]]
    assert labels == {"path": "C:\\DIR\\FILE.TXT", "error": 'Cannot find file:\n"FILE.TXT"'}
    assert families["rpc_duration_seconds"]["samples"][("rpc_duration_seconds_count", ())] == 2693


# --- rendering -----------------------------------------------------------------------------------------

# The shape Gateway.metrics() answers, with the keys the processes really report.
METRICS = {
    "gateway": {"calls_started": 12, "calls_ended": 11, "calls_rejected": 0, "violations": 1, "inbound_frames": 5000,
                "wire_messages": 4800, "clears_sent": 3, "marks_played": 900, "calls_active": 1, "pid": 4242},
    "bargein_decision_to_clear_ms": {"p50": 2.4, "p99": 4.2, "p999": 4.2, "max": 4.25, "count": 3},
    "workers": {
        "pacer": {"ticks": 1500.0, "skipped_ticks": 0.0, "cancel_wakeups": 3.0,
                  "tick_lateness_p50_ms": 0.02, "tick_lateness_p99_ms": 0.3, "tick_lateness_p999_ms": 0.9,
                  "tick_lateness_max_ms": 1.5, "tick_lateness_count": 1500.0,
                  "tick_duration_p50_ms": 0.01, "tick_duration_p99_ms": 0.05, "tick_duration_p999_ms": 0.1,
                  "tick_duration_max_ms": 0.2, "tick_duration_count": 1500.0,
                  "frames_released": 4000.0, "underruns": 2.0, "calls_active": 1.0, "calls_talking": 1.0,
                  "lead_min_ms": 62.5, "lead_p50_ms": 81.0, "underruns_total": 1.0},
        "model": {"bargeins": 3.0, "holds": 0.0, "active_responses": 7.0, "active_frames_written": 3000.0, "calls": 1.0,
                  "gate_rejections": 2.0},
        "validator": {"gates_opened": 0.0, "gates_live": 0.0, "knowledge_loaded": 0.0, "handle_max_ms": 0.0},
    },
}
# The histograms, as flat keys (the module docstring's convention): written out for the pacer, by the
# producer's own code for the gateway and the model worker.
METRICS["workers"]["pacer"].update({
    'pacer_lateness_seconds_bucket{le="0.0001"}': 1400.0, 'pacer_lateness_seconds_bucket{le="0.001"}': 1495.0,
    'pacer_lateness_seconds_bucket{le="+Inf"}': 1500.0, "pacer_lateness_seconds_sum{}": 0.07,
    "pacer_lateness_seconds_count{}": 1500.0,
})
_clears = prom_histogram.Histogram([0.001, 0.005, 0.01])
for _seconds in (0.0024, 0.0042, 0.00425):
    _clears.observe(_seconds)
METRICS["gateway"].update(_clears.flat("bargein_clear_seconds"))
_tools = {"ok": prom_histogram.Histogram([0.1, 1]), "error": prom_histogram.Histogram([0.1, 1])}
_tools["ok"].observe(0.05)
_tools["ok"].observe(0.3)
_tools["error"].observe(5.0)
for _outcome, _histogram in _tools.items():
    METRICS["workers"]["model"].update(_histogram.flat("tool_duration_seconds", {"outcome": _outcome}))


@pytest.fixture(scope="module")
def families():
    return parse_exposition(mt.render(METRICS))


def test_counters_get_total_and_gauges_do_not(families):
    assert families["voicecore_gateway_calls_started_total"]["type"] == "counter"
    assert value(families, "voicecore_gateway_calls_started_total") == 12
    assert families["voicecore_gateway_calls_active"]["type"] == "gauge"
    assert value(families, "voicecore_gateway_pid") == 4242
    assert families["voicecore_pacer_frames_released_total"]["type"] == "counter"
    assert families["voicecore_pacer_calls_talking"]["type"] == "gauge"
    assert families["voicecore_model_bargeins_total"]["type"] == "counter"
    assert families["voicecore_model_active_responses"]["type"] == "gauge"  # sums over live sessions fall
    assert families["voicecore_model_calls"]["type"] == "gauge"
    assert families["voicecore_validator_gates_live"]["type"] == "gauge"
    assert families["voicecore_validator_handle_max_ms"]["type"] == "gauge"  # a lone max is a plain gauge
    for name, family in families.items():
        assert name.startswith("voicecore_")
        assert (family["type"] == "counter") == name.endswith("_total"), name
        assert family["help"], name


def test_the_pacers_slot_underruns_do_not_clash_with_its_counter(families):
    assert value(families, "voicecore_pacer_underruns_total") == 2
    assert families["voicecore_pacer_underruns_total"]["type"] == "counter"
    assert value(families, "voicecore_pacer_slot_underruns") == 1
    assert families["voicecore_pacer_slot_underruns"]["type"] == "gauge"


def test_latency_summaries_are_gauges_with_a_quantile_label(families):
    name = "voicecore_gateway_bargein_decision_to_clear_ms"
    assert families[name]["type"] == "gauge"
    assert {q: value(families, name, quantile=q) for q in ("0.5", "0.99", "0.999", "1")} == {
        "0.5": 2.4, "0.99": 4.2, "0.999": 4.2, "1": 4.25}
    assert value(families, name + "_count") == 3
    lateness = "voicecore_pacer_tick_lateness_ms"
    assert value(families, lateness, quantile="0.99") == 0.3
    assert value(families, lateness, quantile="1") == 1.5
    assert value(families, lateness + "_count") == 1500
    assert families[lateness + "_count"]["type"] == "gauge"
    assert "voicecore_pacer_tick_lateness_p50_ms" not in families
    assert value(families, "voicecore_pacer_lead_ms", quantile="0") == 62.5
    assert value(families, "voicecore_pacer_lead_ms", quantile="0.5") == 81
    assert value(families, "voicecore_pacer_tick_duration_ms", quantile="0.999") == 0.1


def test_every_number_of_the_dict_is_rendered_once(families):
    """... and the aliases (voicecore_calls_active, voicecore_gate_rejections_total) once more."""
    samples = sum(len(f["samples"]) for f in families.values())
    numbers = len(METRICS["gateway"]) + len(METRICS["bargein_decision_to_clear_ms"]) + sum(
        len(stats) for stats in METRICS["workers"].values())
    assert samples == numbers + 2


def test_histograms_are_prometheus_histograms_in_seconds(families):
    lateness = histogram_series(families, "voicecore_pacer_lateness_seconds")
    assert lateness == {(): {"buckets": [(0.0001, 1400), (0.001, 1495), (math.inf, 1500)], "sum": 0.07, "count": 1500}}
    assert families["voicecore_pacer_lateness_seconds"]["help"] == mt.HISTOGRAM_HELP["pacer_lateness_seconds"]
    clears = histogram_series(families, "voicecore_bargein_clear_seconds")
    assert clears[()]["buckets"] == [(0.001, 0), (0.005, 3), (0.01, 3), (math.inf, 3)]
    assert clears[()]["sum"] == pytest.approx(0.01085)
    tools = histogram_series(families, "voicecore_tool_duration_seconds")
    assert tools[(("outcome", "ok"),)]["buckets"] == [(0.1, 1), (1.0, 2), (math.inf, 2)]
    assert tools[(("outcome", "error"),)] == {"buckets": [(0.1, 0), (1.0, 0), (math.inf, 1)], "sum": 5.0, "count": 1}
    # the pacer's quantile gauges of the same samples stay as they were
    assert value(families, "voicecore_pacer_tick_lateness_ms", quantile="0.99") == 0.3
    assert not any("bucket" in name or "{" in name for name in families if families[name]["type"] != "histogram")


def test_conventional_aliases_are_written_next_to_the_per_process_names(families):
    assert families["voicecore_calls_active"]["type"] == "gauge"
    assert value(families, "voicecore_calls_active") == value(families, "voicecore_gateway_calls_active") == 1
    assert families["voicecore_gate_rejections_total"]["type"] == "counter"
    rejections = value(families, "voicecore_gate_rejections_total")
    assert rejections == value(families, "voicecore_model_gate_rejections_total") == 2
    assert "never played" in families["voicecore_gate_rejections_total"]["help"]
    # the pacer's own calls_active (its view of the slots) is not the conventional gauge
    only_pacer = parse_exposition(mt.render({"workers": {"pacer": {"calls_active": 3.0}}}))
    assert set(only_pacer) == {"voicecore_pacer_calls_active"}


WHOLE = {'h_bucket{le="1"}': 1.0, 'h_bucket{le="+Inf"}': 2.0, "h_sum{}": 3.5, "h_count{}": 2.0}


def _labelled(stats: dict, x: str) -> dict:
    """WHOLE's keys with the label x="<x>" (`h_sum{}` -> `h_sum{x="bad"}`)."""
    return {key.replace("{", f'{{x="{x}",').replace(",}", "}"): v for key, v in stats.items()}


@pytest.mark.parametrize("change", [
    {'h_bucket{le="+Inf"}': None},  # no +Inf bucket
    {"h_count{}": None},
    {"h_sum{}": None},
    {"h_count{}": 3.0},  # _count is not the +Inf bucket
    {'h_bucket{le="1"}': 5.0},  # buckets decrease
    {'h_bucket{le="1"}': float("nan")},
    {"h_sum{}": float("nan")},
    {'h_bucket{le="1"}': "1"},  # not a number
])
def test_a_histogram_series_that_is_not_whole_and_consistent_is_left_out(change):
    bad = {key: v for key, v in {**WHOLE, **change}.items() if v is not None}
    families = parse_exposition(mt.render({"workers": {"w": {**_labelled(bad, "bad"), **_labelled(WHOLE, "good")}}}))
    assert set(histogram_series(families, "voicecore_h")) == {(("x", "good"),)}
    assert "voicecore_h" not in parse_exposition(mt.render({"workers": {"w": _labelled(bad, "bad")}}))


def test_labels_in_another_order_are_the_same_series():
    stats = {'h_bucket{a="1",b="2",le="+Inf"}': 1.0, 'h_sum{b="2",a="1"}': 0.5, 'h_count{a="1",b="2"}': 1.0}
    series = histogram_series(parse_exposition(mt.render({"workers": {"w": stats}})), "voicecore_h")
    assert series == {(("a", "1"), ("b", "2")): {"buckets": [(math.inf, 1)], "sum": 0.5, "count": 1}}


def test_a_histogram_family_is_written_once_and_never_over_another_name():
    h = prom_histogram.Histogram([1]).flat("h")
    families = parse_exposition(mt.render({"gateway": {**h, "h_bucket_x": 1.0},
                                           "workers": {"a": {'h_bucket{le="+Inf"}': 9.0}, "b": h}}))
    assert histogram_series(families, "voicecore_h") == {(): {"buckets": [(1.0, 0), (math.inf, 0)], "sum": 0, "count": 0}}
    # A gauge already called like one of its samples (voicecore_a_active_count) keeps the name: the
    # histogram is not written; and the other way round.
    families = parse_exposition(mt.render({"workers": {"a": {"active_count": 1.0},
                                                       "b": prom_histogram.Histogram([1]).flat("a_active")}}))
    assert set(families) == {"voicecore_a_active_count"}
    families = parse_exposition(mt.render({"gateway": prom_histogram.Histogram([1]).flat("a_active"),
                                           "workers": {"a": {"active_count": 1.0}}}))
    assert set(families) == {"voicecore_a_active"}
    assert histogram_series(families, "voicecore_a_active")[()]["count"] == 0


def test_empty_and_partial_dicts():
    assert mt.render({}) == ""
    assert mt.render({"gateway": {}, "workers": {}}) == ""
    text = mt.render({"workers": {"pacer": {"ticks": 1.0}}})
    assert value(parse_exposition(text), "voicecore_pacer_ticks_total") == 1


def test_values_nan_inf_bools_numpy_and_non_numbers():
    stats = {"a_ms": float("nan"), "b_ms": float("inf"), "c_ms": -float("inf"), "flag": True, "big": 1e20,
             "small_ms": 1.5e-7, "np": np.int64(7), "npf_ms": np.float32(0.5), "name": "x", "list": [1, 2],
             "nested": {"k": 1}}
    text = mt.render({"workers": {"w": stats}})
    families = parse_exposition(text)
    assert math.isnan(value(families, "voicecore_w_a_ms"))
    assert value(families, "voicecore_w_b_ms") == math.inf
    assert value(families, "voicecore_w_c_ms") == -math.inf
    assert value(families, "voicecore_w_flag_total") == 1
    assert value(families, "voicecore_w_big_total") == 1e20
    assert value(families, "voicecore_w_small_ms") == 1.5e-7
    assert value(families, "voicecore_w_np_total") == 7
    assert value(families, "voicecore_w_npf_ms") == 0.5
    assert not any("name" in n or "list" in n or "nested" in n for n in families)


@pytest.mark.parametrize("raw, expected", [
    (0, "0"), (3, "3"), (3.0, "3"), (0.25, "0.25"), (-2.5, "-2.5"), (1e20, "1e+20"), (1e-7, "1e-07"),
    (float("nan"), "NaN"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"), (True, "1"), (False, "0"),
])
def test_format_value(raw, expected):
    assert mt.format_value(raw) == expected
    assert GO_FLOAT.fullmatch(expected)


def test_names_are_snake_case_and_valid():
    families = parse_exposition(mt.render({"workers": {"Model Worker": {"framesWritten": 1.0, "weird-key.x": 2.0,
                                                                        "": 3.0, "bad\nkey \\ \"q\"": 4.0}}}))
    assert set(families) == {"voicecore_model_worker_frames_written_total", "voicecore_model_worker_weird_key_x_total",
                             "voicecore_model_worker_unnamed_total", "voicecore_model_worker_bad_key_q_total"}
    assert families["voicecore_model_worker_bad_key_q_total"]["help"].startswith('Model Worker bad\nkey \\ "q"')


def test_a_name_two_keys_map_to_is_written_once():
    families = parse_exposition(mt.render({"workers": {"w": {"x": 1.0, "x_total": 2.0, "X": 3.0}}}))
    assert value(families, "voicecore_w_x_total") == 1
    families = parse_exposition(mt.render({"workers": {"w": {"t_p5_ms": 1.0, "t_p500_ms": 2.0, "t_p0_ms": 3.0, "t_min_ms": 4.0}}}))
    assert families["voicecore_w_t_ms"]["samples"] == {
        ("voicecore_w_t_ms", (("quantile", "0"),)): 3.0, ("voicecore_w_t_ms", (("quantile", "0.5"),)): 1.0}


@pytest.mark.parametrize("raw, escaped", [
    ("plain", "plain"), ('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ('\\"\n', '\\\\\\"\\n'),
])
def test_label_values_are_escaped_per_the_spec(raw, escaped):
    assert mt.escape_label_value(raw) == escaped
    families = parse_exposition(f'# TYPE x gauge\nx{{v="{mt.escape_label_value(raw)}"}} 1\n')
    assert value(families, "x", v=raw) == 1


def test_help_text_is_escaped_per_the_spec():
    assert mt.escape_help("a\\b\nc\"") == 'a\\\\b\\nc"'


_keys = st.one_of(
    st.text(min_size=0, max_size=12),
    st.builds("{}_{}".format, st.sampled_from(["a", "b", "underruns", "x_ms"]),
              st.sampled_from(["p50_ms", "p5_ms", "p500_ms", "p0_ms", "max_ms", "min_ms", "count", "total", "ms"])),
    st.sampled_from(["p50", "p99", "max", "count", "calls_active", "underruns_total", "active_x", "active_total", "pid",
                     "gate_rejections"]),
    # histogram keys, whole or not (module docstring, Histograms)
    st.sampled_from(['h_bucket{le="1"}', 'h_bucket{le="+Inf"}', "h_sum{}", "h_count{}", 'h_bucket{a="x",le="+Inf"}',
                     'h_count{a="x"}', 'h_sum{a="x"}', 'h_total_bucket{le="+Inf"}', 'h_count_bucket{le="+Inf"}',
                     'h_bucket{le="1",}', "h_bucket{}"]),
)
_numbers = st.one_of(st.integers(-(2**63), 2**63), st.floats(allow_nan=True, allow_infinity=True), st.booleans())


@given(st.dictionaries(_keys, st.dictionaries(_keys, _numbers, max_size=8), max_size=4),
       st.dictionaries(_keys, _numbers, max_size=8))
def test_any_dict_of_numbers_renders_valid_text(workers, gateway):
    families = parse_exposition(mt.render({"gateway": gateway, "workers": workers, "x_ms": dict(gateway)}))
    for name, family in families.items():
        assert (family["type"] == "counter") == name.endswith("_total"), name
        if family["type"] == "histogram":
            histogram_series(families, name)


def test_the_real_processes_stats_are_classified():
    """The pacer core's and the validator's cumulative counts render as counters, their levels as gauges."""
    from workers.pacer.core import STAT_NAMES
    from workers.validator.core import ValidatorCore

    assert not any(mt.is_gauge(name) for name in STAT_NAMES)
    core = ValidatorCore()
    assert not any(mt.is_gauge(name) for name in core.counters)
    levels = set(core.statistics()) - set(core.counters)
    assert levels and all(mt.is_gauge(name) for name in levels)
    for gauge in mt.GAUGES:
        assert not mt.RENAMED.get(gauge, gauge).endswith("_total")


# --- negotiation ---------------------------------------------------------------------------------------

PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


@pytest.mark.parametrize("accept, query, text", [
    (PROMETHEUS_ACCEPT, "", True),
    ("text/plain;version=0.0.4", "", True),
    ("application/openmetrics-text; version=1.0.0", "", True),
    ("text/*", "", True),
    ("TEXT/PLAIN", "", True),
    ("", "", False),
    ("*/*", "", False),
    ("application/json", "", False),
    ("application/json, text/plain;q=0.9", "", False),
    ("text/plain;q=0.5, application/json;q=0.4", "", True),
    ("text/plain, application/json", "", False),  # a tie keeps JSON
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "", False),  # a browser
    ("text/plain;q=0", "", False),
    ("text/plain;q=abc", "", False),
    ("garbage, ;;, /", "", False),
    ("", "format=prometheus", True),
    ("", "x=1&format=text", True),
    (PROMETHEUS_ACCEPT, "format=json", False),
    ("", "format=other", False),
])
def test_negotiation(accept, query, text):
    assert mt.wants_text(accept, query) is text


def test_the_module_is_pure():
    tree = ast.parse(Path(mt.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"asyncio", "zmq", "websockets", "time", "os", "random", "uuid", "socket", "json"}
