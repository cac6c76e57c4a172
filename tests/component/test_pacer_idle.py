"""The pacer process (workers/pacer/main.py) with no live call: it sleeps in its inbox from one heartbeat to
the next (voicecore/timing.py IDLE_HEARTBEAT_MS), not on a shorter timer, and the gateway's CallStarted in
its inbox wakes it at once. The test plays the gateway: it owns the arena (in a temporary directory, not
/dev/shm), reads the pacer's heartbeats and statistics from gateway.sock and pushes to pacer.sock.

The pacer's loop counts its idle waits (`idle_waits`); the test counts them between the pacer's own
heartbeats, not against a clock: one wait per heartbeat, where a timer of its own (it looked for a call every
100 ms before) makes ten."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from voicecore import timing
from voicecore.bus import messages as m
from voicecore.bus.transport import ARENA_NAME_FILE, GATEWAY_INBOX, PACER_INBOX, Bus, ensure_runtime_dir
from voicecore.carriers.wire import RAW
from voicecore.shm.arena import Arena, ArenaLayout
from voicecore.shm.warmup import warm_up_rings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def next_from_pacer(bus: Bus, inbox: zmq.Socket, kind: type, timeout_s: float = 10.0):
    """The pacer's next message of ``kind`` (Heartbeat or Stats) on the gateway's inbox."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if inbox.poll(50, zmq.POLLIN):
            for message in bus.receive_nowait(inbox, limit=1):
                if isinstance(message, kind) and message.process == "pacer":
                    return message
    raise AssertionError(f"no {kind.__name__} from the pacer within {timeout_s} s")


def test_an_idle_pacer_waits_a_heartbeat_at_a_time_and_a_call_start_wakes_it(tmp_path):
    warm_up_rings()  # claim_slot below must not wait for a compile in this process
    runtime = ensure_runtime_dir(tmp_path / "run")
    shm = tmp_path / "shm"
    shm.mkdir()
    arena = Arena.create(ArenaLayout(max_calls=2), directory=str(shm))
    (runtime / ARENA_NAME_FILE).write_text(arena.name)
    bus = Bus(runtime)
    gateway = bus.bind(zmq.PULL, GATEWAY_INBOX)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    env.update(VOICECORE_RUNTIME_DIR=str(runtime), VOICECORE_SHM_DIR=str(shm), VOICECORE_REALTIME_PRIORITY="0",
               VOICECORE_LOG_LEVEL="info")
    log_path = tmp_path / "pacer.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "workers.pacer.main"], cwd=REPO, env=env,
                                stdout=log_file, stderr=subprocess.STDOUT)
    try:
        try:
            first = next_from_pacer(bus, gateway, m.Stats, timeout_s=120)  # a cold numba compile takes a while
        except AssertionError:
            raise AssertionError(log_path.read_text()) from None
        pacer = bus.connect(zmq.PUSH, PACER_INBOX)
        # Idle: one wait in the inbox per heartbeat, each heartbeat announcing the idle interval.
        beats = [next_from_pacer(bus, gateway, m.Heartbeat) for _ in range(4)]
        assert {beat.interval_ms for beat in beats} == {timing.IDLE_HEARTBEAT_MS}
        later = next_from_pacer(bus, gateway, m.Stats)  # with the next heartbeat
        waits = later.values["idle_waits"] - first.values["idle_waits"]
        assert later.values["ticks"] == first.values["ticks"]  # no tick while idle (the count starts at the warm-up tick)
        assert waits <= 2 * (len(beats) + 1), waits  # ten a heartbeat with a 100 ms timer

        # A call starts: the gateway publishes the slot, then its CallStarted wakes the pacer, which beats at
        # the live interval at once instead of at the end of the idle one it had just begun.
        idle_beat = next_from_pacer(bus, gateway, m.Heartbeat)
        generation = arena.claim_slot(1, "MZ" + "1" * 32, "CA" + "1" * 32, RAW)
        bus.send(pacer, m.CallStarted(1, generation, "CA" + "1" * 32, "MZ" + "1" * 32, "AC" + "0" * 32))
        live_beat = next_from_pacer(bus, gateway, m.Heartbeat)
        assert live_beat.interval_ms == timing.HEARTBEAT_MS
        assert live_beat.seq == idle_beat.seq + 1
        assert (live_beat.sent_ns - idle_beat.sent_ns) / 1e6 < timing.IDLE_HEARTBEAT_MS / 2
        ticking = next_from_pacer(bus, gateway, m.Stats)
        assert ticking.values["ticks"] > first.values["ticks"] and ticking.values["calls_active"] == 1
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        bus.close()
        arena.close()
        arena.unlink()
    assert not (runtime / PACER_INBOX).exists()
