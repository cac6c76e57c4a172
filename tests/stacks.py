"""A real stack (supervisord, gateway, pacer, model worker, validator, console) on 127.0.0.1.

The model simulator is not part of the stack here: each test starts it on the stack's configured model
port inside its own event loop, next to the carrier simulator, as `voicecore demo` does. One loop and one
clock for both simulators keeps their measurements comparable, and a simulator thread would fight the
carrier for the GIL and distort exactly the timings under test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import threading
from pathlib import Path

from voicecore.config import load_config
from voicecore.demo import DEMO_CLIPS, free_port
from voicecore.sim.model import SimConfig
from voicecore.sim.model_server import serve_model_sim
from voicecore.supervise import Stack, resolve_config

# 1.5x real time: the answer is still being generated when the caller barges in, so the cancel really
# cancels and the simulator lets late deltas out after it (docs/explanation/protocols.md#d2-item-5).
# The caller's transcript 150 ms after each commit, every event at once (the simulator's fixed delay before
# it drew vendor-like ones): the integration tests' scripts are timed on it, and they are not about how long
# the vendor takes to transcribe. A test of turn-taking asks for the vendor's timing:
# dataclasses.replace(TEST_SIM, transcription_delay_ms=None).
TEST_SIM = SimConfig(clip_sequence=DEMO_CLIPS, late_deltas_after_cancel=2, speed_factor=1.5, transcription_delay_ms=150)


@dataclasses.dataclass
class RunningStack:
    stack: Stack
    sim_port: int
    workdir: Path
    log_path: Path

    @property
    def config(self):
        return self.stack.config

    def log_tail(self, n: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    @contextlib.asynccontextmanager
    async def model_sim(self, config: SimConfig = TEST_SIM):
        """The realtime-model simulator on the port the stack's model worker dials, for one test."""
        sim, _ = await serve_model_sim("127.0.0.1", self.sim_port, config)
        try:
            yield sim
        finally:
            await sim.aclose()

    def stop(self) -> None:
        """Stop the stack without waiting: supervisord stops its programs one priority after the other, seconds
        spent mostly waiting on them, and a test that is done with its stack needs nothing from that. Every
        stop is waited for before the session ends (``wait_for_stops``); a test that checks what a stop
        leaves behind calls ``stop_and_wait``."""
        stopping = threading.Thread(target=self.stack.stop, name=f"stopping {self.workdir.name}")
        stopping.start()
        _STOPPING.append(stopping)

    def stop_and_wait(self) -> None:
        self.stack.stop()


_STOPPING: list[threading.Thread] = []

# Where the stacks' working directories (logs, records, runtime files) go: the test session's own temporary
# directory once tests/conftest.py names it, so pytest's retention (the newest three sessions) removes them;
# the system's temporary directory for a stack started outside pytest.
_WORKDIR_ROOT: Path | None = None


def keep_workdirs_under(root: Path) -> None:
    global _WORKDIR_ROOT
    root.mkdir(parents=True, exist_ok=True)
    _WORKDIR_ROOT = root


def wait_for_stops() -> None:
    """Every stack stopped with ``stop()`` has stopped (tests/conftest.py calls this at the session's end)."""
    while _STOPPING:
        _STOPPING.pop().join()


def start_stack(max_calls: int = 8, **overrides) -> RunningStack:
    """A stack on 127.0.0.1. Without an ``agent`` it runs the spine (barge-in on every VAD edge) unless
    ``call_control`` says otherwise: the stack tests measure the media path; the turn-taking controller has
    its own tests. With one it runs the agent, under the controller."""
    overrides.setdefault("call_control", "turns" if overrides.get("agent") else "spine")
    sim_port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="voicecore-test-", dir=_WORKDIR_ROOT))
    base = resolve_config(load_config({k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}))
    config = dataclasses.replace(
        base,
        listen=overrides.pop("listen", f"127.0.0.1:{free_port()}"),
        console_listen=overrides.pop("console_listen", f"127.0.0.1:{free_port()}"),
        realtime_url=overrides.pop("realtime_url", f"ws://127.0.0.1:{sim_port}/v1/realtime"),
        send_call_id_to_vendor=True,  # our own simulator: it ties its sessions to the calls by it
        runtime_dir=str(workdir / "run"),
        record_dir=str(workdir / "records"),
        max_calls=max_calls,
        **overrides,
    )
    log_path = workdir / "stack.log"
    stack = Stack(config)
    stack.start(open(log_path, "wb"))
    try:
        stack.wait_ready(180)  # a fresh checkout compiles the numba kernels on first start
    except Exception:
        stack.stop()
        raise RuntimeError("stack did not start:\n" + log_path.read_text(errors="replace")[-4000:]) from None
    return RunningStack(stack, sim_port, workdir, log_path)
