"""/metrics?format=prometheus of a real stack (the shared default stack of tests/stack/conftest.py) during
and after a call, read with the strict exposition parser (tests/exposition.py)."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from exposition import histogram_series, parse_exposition, value
from voicecore.demo import demo_script
from voicecore.sim.carrier import place_call

CONVENTIONAL_FAMILIES = {
    "voicecore_calls_active": "gauge",
    "voicecore_pacer_lateness_seconds": "histogram",
    "voicecore_bargein_clear_seconds": "histogram",
    "voicecore_gate_rejections_total": "counter",
    "voicecore_tool_duration_seconds": "histogram",
}


@pytest.mark.integration
def test_the_running_stack_exports_the_conventional_families(running_stack):
    """One call with a barge-in through the real stack: while it runs voicecore_calls_active is 1, after it
    the barge-in's clear is in voicecore_bargein_clear_seconds, and every scrape is valid exposition with
    the five Prometheus-convention families next to the per-process ones."""
    config = running_stack.config
    url = f"http://{config.listen}/metrics?format=prometheus"

    def scrape() -> dict:
        with urllib.request.urlopen(url, timeout=5) as response:
            return parse_exposition(response.read().decode("utf-8"))

    async def scrape_until(condition, timeout_s: float, what: str) -> dict:
        """Scrape off the loop (the carrier simulator shares it) until `condition(families)` holds."""
        deadline = time.monotonic() + timeout_s
        while True:
            families = await asyncio.to_thread(scrape)
            if condition(families):
                return families
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {timeout_s} s waiting for {what}\n{running_stack.log_tail()}", pytrace=False)
            await asyncio.sleep(0.1)

    def count(families: dict, name: str) -> float:
        return families.get(name, {}).get("samples", {}).get((name + "_count", ()), 0)

    async def call() -> tuple[dict, dict, object]:
        async with running_stack.model_sim():
            placed = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(12)))
            # the pacer's figures reach the gateway on its next report, a little after the call's first tick
            during = await scrape_until(lambda f: "voicecore_calls_active" in f and value(f, "voicecore_calls_active") == 1
                                        and count(f, "voicecore_pacer_lateness_seconds") > 0,
                                        10, "the call to be active and the pacer's ticks to be counted")
            result = await placed
        after = await scrape_until(lambda f: value(f, "voicecore_calls_active") == 0
                                   and count(f, "voicecore_bargein_clear_seconds") >= 1, 10,
                                   "the call to end and its barge-in's clear to be measured")
        return during, after, result

    during, after, result = asyncio.run(call())
    assert result.closed_by == "carrier", running_stack.log_tail()
    for families in (during, after):
        for name, kind in CONVENTIONAL_FAMILIES.items():
            assert families[name]["type"] == kind, name
            assert families[name]["help"], name
            if kind == "histogram":
                histogram_series(families, name)  # buckets increase, +Inf == _count, a _sum
        # the per-process names are still there beside them
        assert value(families, "voicecore_gateway_calls_active") == value(families, "voicecore_calls_active")
        assert value(families, "voicecore_gate_rejections_total") == value(families, "voicecore_model_gate_rejections_total")
    lateness = histogram_series(after, "voicecore_pacer_lateness_seconds")[()]
    assert lateness["count"] > histogram_series(during, "voicecore_pacer_lateness_seconds")[()]["count"] > 0  # every tick
    assert {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05} <= {bound for bound, _ in lateness["buckets"]}
    clears = histogram_series(after, "voicecore_bargein_clear_seconds")[()]
    assert clears["count"] >= 1 and 0 < clears["sum"] < clears["count"] * 1.0  # seconds, not milliseconds
    assert value(after, "voicecore_gateway_bargein_decision_to_clear_ms_count") >= clears["count"]
    tools = histogram_series(after, "voicecore_tool_duration_seconds")
    assert set(tools) == {(("outcome", "ok"),), (("outcome", "error"),)}  # both series from the start
    assert value(after, "voicecore_gate_rejections_total") == 0  # nothing gated in the spine's demo call
