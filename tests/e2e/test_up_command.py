"""`voicecore up` as a user runs it: the main job with the built-in model simulator, then Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from voicecore.demo import demo_script, free_port
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.sim.carrier import place_call
from waiting import wait_until

pytestmark = pytest.mark.integration


def test_up_serves_a_call_with_the_builtin_simulator_and_stops_clean_on_ctrl_c():
    workdir = Path(tempfile.mkdtemp(prefix="voicecore-up-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    env.update({
        "VOICECORE_LISTEN": f"127.0.0.1:{port}",
        "VOICECORE_SIM_PORT": str(free_port()),
        "VOICECORE_RUNTIME_DIR": str(workdir / "run"),
        "VOICECORE_RECORD_DIR": str(workdir / "records"),
        "VOICECORE_TWILIO_AUTH_TOKEN": "test-token",
        "VOICECORE_MAX_CALLS": "4",
    })
    up = subprocess.Popen([sys.executable, "-m", "voicecore.cli", "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def model_worker_alive() -> bool:
        assert up.poll() is None, up.stdout.read().decode(errors="replace")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                return b'"model": true' in response.read()
        except OSError:
            return False

    try:
        # a fresh checkout compiles the numba kernels on first start
        wait_until(model_worker_alive, 180, "/healthz to report the model worker alive", interval_s=0.3)
        # this stack's arena (other stacks on the machine have their own: only this one is checked)
        arena = Path("/dev/shm") / (workdir / "run" / ARENA_NAME_FILE).read_text().strip()
        assert arena.exists()
        script = demo_script(13)
        result = asyncio.run(place_call(f"http://127.0.0.1:{port}", "test-token", script))
        assert result.closed_by == "carrier"
        assert result.statistics.frames_received > 200  # greeting and answers from the built-in simulator
        assert result.statistics.clears_received == 1  # the barge-in
        assert result.statistics.stale_frames == 0
    finally:
        up.send_signal(signal.SIGINT)
        output = up.communicate(timeout=60)[0].decode(errors="replace")
    assert up.returncode == 0, output
    assert "voicecore up: stopped" in output
    assert not arena.exists()  # the gateway unlinked its arena
    assert not (workdir / "run").exists()
