"""The metrics reference lists every family a real stack exports.

A stack under each call control (spine, turns) takes one simulated call with a barge-in; /metrics is scraped in
Prometheus' format while the call runs and after it ended. Every family seen must be in
docs/reference/metrics-families.json with the same type (the page docs/gen_reference.py makes from it), so a new
counter, gauge or histogram fails here until it is documented. `VOICECORE_DOCS_UPDATE=1` adds what is missing
to the file instead (families never seen again are kept: some appear only under conditions a call here does
not meet).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from pathlib import Path

import pytest

from exposition import families_of
from voicecore.demo import demo_script
from voicecore.sim.carrier import place_call

REPO = Path(__file__).resolve().parents[2]
FAMILIES_FILE = REPO / "docs" / "reference" / "metrics-families.json"


async def _scrape_during_and_after_a_call(running) -> dict[str, dict[str, str]]:
    url = f"http://{running.config.listen}/metrics?format=prometheus"

    def scrape() -> dict[str, dict[str, str]]:
        with urllib.request.urlopen(url, timeout=5) as response:
            return families_of(response.read().decode("utf-8"))

    def active(text_families: dict) -> bool:
        return "voicecore_calls_active" in text_families

    seen: dict[str, dict[str, str]] = {}
    async with running.model_sim():
        placed = asyncio.create_task(place_call(running.config.base_url, running.config.twilio_auth_token,
                                                demo_script(14)))
        deadline = time.monotonic() + 20
        while not placed.done() and time.monotonic() < deadline:
            seen.update(await asyncio.to_thread(scrape))
            await asyncio.sleep(1.0)
        await placed
    await asyncio.sleep(1.0)  # the workers' next reports
    seen.update(await asyncio.to_thread(scrape))
    assert active(seen), running.log_tail()
    return seen


@pytest.mark.integration
@pytest.mark.parametrize("call_control", ["spine", "turns"])
def test_every_family_a_stack_exports_is_documented(call_control, request):
    running = request.getfixturevalue({"spine": "running_stack", "turns": "turns_stack"}[call_control])
    exported = asyncio.run(_scrape_during_and_after_a_call(running))
    documented = json.loads(FAMILIES_FILE.read_text(encoding="utf-8"))
    if os.environ.get("VOICECORE_DOCS_UPDATE") == "1":
        documented = dict(sorted({**documented, **exported}.items()))
        FAMILIES_FILE.write_text(json.dumps(documented, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    missing = sorted(set(exported) - set(documented))
    assert not missing, (f"families exported but not in {FAMILIES_FILE.relative_to(REPO)}: {missing} "
                         "(rerun with VOICECORE_DOCS_UPDATE=1 to add them)")
    for name, family in exported.items():
        assert documented[name]["type"] == family["type"], name
