"""How Stack.stop stops a node: every process at once when no call is up (nothing for supervisord's one program
after the other to protect), supervisord's own order when calls are up or the gateway does not say."""

from __future__ import annotations

import dataclasses
import signal

import pytest

from voicecore import supervise
from voicecore.config import load_config


class FakeSupervisord:
    """The Popen of a supervisord that is running until it gets a signal."""

    pid = 4242

    def __init__(self) -> None:
        self.signals: list[int] = []

    def poll(self):
        return None

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def wait(self, timeout=None) -> int:
        return 0


def stop_with(monkeypatch, tmp_path, calls: int | None) -> tuple[FakeSupervisord, list[tuple[int, int]]]:
    monkeypatch.setattr(supervise, "live_calls", lambda config: calls)
    side_by_side: list[tuple[int, int]] = []
    monkeypatch.setattr(supervise.drain, "stop_supervised_node",
                        lambda supervisord, own_pid: side_by_side.append((supervisord, own_pid)) or 0)
    config = dataclasses.replace(load_config({}), runtime_dir=str(tmp_path / "run"), shm_dir=str(tmp_path))
    stack = supervise.Stack(config)
    stack.process = FakeSupervisord()
    assert stack.stop() == 0
    return stack.process, side_by_side


def test_a_node_without_calls_stops_every_process_at_once(monkeypatch, tmp_path):
    process, side_by_side = stop_with(monkeypatch, tmp_path, 0)
    assert side_by_side == [(FakeSupervisord.pid, supervise.os.getpid())]
    assert process.signals == []  # stop_supervised_node signals supervisord itself


@pytest.mark.parametrize("calls", [1, None], ids=["a call up", "no answer"])
def test_a_node_with_calls_up_or_silent_is_stopped_in_supervisords_order(monkeypatch, tmp_path, calls):
    process, side_by_side = stop_with(monkeypatch, tmp_path, calls)
    assert side_by_side == []
    assert process.signals == [signal.SIGTERM]
