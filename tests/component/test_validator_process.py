"""The validator process (workers/validator/main.py) on a real control bus: verdicts over ipc sockets,
heartbeats and stats to the gateway inbox, bad input counted not fatal, knowledge-base reload, SIGTERM
leaves no socket behind. The test plays the gateway (gateway.sock) and the model worker (model.sock)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from voicecore.bus import messages as m
from voicecore.bus.transport import GATEWAY_INBOX, MODEL_INBOX, VALIDATOR_INBOX, Bus, ensure_runtime_dir
from workers.validator.core import APPROVE_ALL_FRAMES

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def receive(bus: Bus, sock: zmq.Socket, want, timeout_s: float = 5.0) -> list:
    """Messages from ``sock`` until ``want(messages)`` holds or the timeout passes."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not want(got) and time.monotonic() < deadline:
        if sock.poll(50, zmq.POLLIN):
            got += bus.receive_nowait(sock)
    return got


def answer_messages(tag: int, text: str, policy: str = "numbers") -> list:
    out: list = [m.GateOpen(2, 1, tag, policy, "", "en", "")]
    parts = text.split(" ")
    so_far = 0
    for i, part in enumerate(parts):
        delta = part if i == 0 else " " + part
        so_far += len(delta)
        out.append(m.TranscriptDelta(2, 1, tag, delta, 3 * so_far))
    out.append(m.TranscriptDone(2, 1, tag, "", 3 * so_far))
    return out


def answer(bus: Bus, sock: zmq.Socket, tag: int, text: str, policy: str = "numbers") -> None:
    for message in answer_messages(tag, text, policy):
        bus.send(sock, message)


def verdicts_for(got: list, tag: int) -> list[m.Verdict]:
    return [v for v in got if isinstance(v, m.Verdict) and v.tag == tag]


def finished(tag: int):
    return lambda got: any(v.rejected or v.approved_frames == APPROVE_ALL_FRAMES for v in verdicts_for(got, tag))


def test_validator_process_end_to_end(tmp_path):
    runtime = ensure_runtime_dir(tmp_path / "run")
    kb = tmp_path / "kb"
    shutil.copytree(REPO / "tests" / "kb", kb)
    bus = Bus(runtime)
    gateway = bus.bind(zmq.PULL, GATEWAY_INBOX)
    model = bus.bind(zmq.PULL, MODEL_INBOX)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    env.update(VOICECORE_RUNTIME_DIR=str(runtime), VOICECORE_KNOWLEDGE_DIR=str(kb), VOICECORE_LOG_LEVEL="info",
               VOICECORE_GATE_MARGIN_MS="200")
    log_path = tmp_path / "validator.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "workers.validator.main"], cwd=REPO, env=env,
                                stdout=log_file, stderr=subprocess.STDOUT)
    try:
        beats = receive(bus, gateway, lambda got: any(isinstance(x, m.Heartbeat) for x in got), timeout_s=10)
        assert any(isinstance(x, m.Heartbeat) and x.process == "validator" for x in beats), log_path.read_text()
        assert (runtime / VALIDATOR_INBOX).exists()
        inbox = bus.connect(zmq.PUSH, VALIDATOR_INBOX)

        # bad input first: a garbage frame and a transcript for a tag nobody opened
        inbox.send(b"\xc1 not msgpack", zmq.NOBLOCK)
        bus.send(inbox, m.TranscriptDelta(2, 1, 99, "Hello ", 3))

        answer(bus, inbox, 1, "Basic costs 777 kr per month.")
        answer(bus, inbox, 2, "Basic costs 99 kr per month.")
        got = receive(bus, model, lambda got: finished(1)(got) and finished(2)(got) and verdicts_for(got, 99))

        orphan = verdicts_for(got, 99)
        assert [v.rejected for v in orphan] == [True]
        hallucinated = verdicts_for(got, 1)
        assert [v.rejected for v in hallucinated].count(True) == 1 and hallucinated[-1].rejected
        assert all(v.approved_frames <= 3 * len("Basic costs ") for v in hallucinated)
        honest = verdicts_for(got, 2)
        assert not any(v.rejected for v in honest) and honest[-1].approved_frames == APPROVE_ALL_FRAMES
        assert json.loads(honest[-1].citations)[0]["file"] == "kb/pricing.md"

        # as the model worker sends them: a turn of its loop's gate messages in one batch, here two answers'
        assert bus.send_all(inbox, [m.encode(x) for x in answer_messages(4, "Basic costs 777 kr per month.")
                                    + answer_messages(5, "Basic costs 99 kr per month.")]) > 0
        got = receive(bus, model, lambda got: finished(4)(got) and finished(5)(got))
        assert verdicts_for(got, 4)[-1].rejected and not any(v.rejected for v in verdicts_for(got, 5))
        assert verdicts_for(got, 5)[-1].approved_frames == APPROVE_ALL_FRAMES

        # the knowledge base is reloaded when a file changes (polled every second)
        (kb / "gold.md").write_text("# Gold\n\nGold costs 777 kr per month.\n")
        receive(bus, gateway, lambda got: any(isinstance(x, m.Stats) and x.values.get("knowledge_reloads", 0) >= 1
                                              for x in got), timeout_s=6)
        answer(bus, inbox, 3, "Gold costs 777 kr per month.")
        gold = verdicts_for(receive(bus, model, finished(3)), 3)
        assert gold and gold[-1].approved_frames == APPROVE_ALL_FRAMES, log_path.read_text()

        stats = [x for x in receive(bus, gateway, lambda got: any(isinstance(x, m.Stats) for x in got), timeout_s=3)
                 if isinstance(x, m.Stats)]
        assert stats and stats[-1].process == "validator"
        assert stats[-1].values["bus_rejected"] >= 1 and stats[-1].values["core_errors"] == 0
        assert proc.poll() is None  # bad input did not kill it
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        bus.close()
    assert code == 0, log_path.read_text()
    assert not (runtime / VALIDATOR_INBOX).exists()
    log_text = log_path.read_text()
    assert "costs" not in log_text and "777 kr" not in log_text  # logs carry no transcripts
