"""The turn-taking controller in the live model worker (VOICECORE_CALL_CONTROL=turns): a real call is
recorded, and its record replays identically through a fresh controller (INV-REPLAY)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import start_stack

from voicecore.demo import demo_script
from voicecore.sim.carrier import place_call

pytestmark = pytest.mark.integration


def test_a_live_call_under_the_controller_is_recorded_and_replays_identically():
    running = start_stack(call_control="turns")
    try:
        async def call():
            async with running.model_sim() as sim:
                return sim, await place_call(running.config.base_url, running.config.twilio_auth_token, demo_script(16))

        sim, result = asyncio.run(call())
        assert result.closed_by == "carrier", running.log_tail()
        assert result.statistics.stale_frames == 0
        assert result.statistics.clears_received >= 1  # the caller's speech interrupted the agent
        (session,) = sim.by_call(result.call_sid)
        assert session.record.responses[0].instructions.startswith("Say exactly:")  # the flow's greeting
        record = Path(running.config.record_dir) / f"{result.call_sid}.jsonl"
        deadline = time.monotonic() + 10
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert record.exists(), running.log_tail()
        assert (record.stat().st_mode & 0o777) == 0o600
        replay = subprocess.run([sys.executable, "-m", "voicecore.cli", "replay", str(record), "--json"],
                                capture_output=True, text=True, timeout=60)
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert '"identical": true' in replay.stdout
    finally:
        running.stop()
