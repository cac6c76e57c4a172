"""STYLE.md: the sans-I/O cores import no I/O, clock or randomness; time and ids come in as arguments."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE_MODULES = [
    "voicecore/timing.py",
    "voicecore/stats.py",
    "voicecore/bus/messages.py",
    "voicecore/shm/control.py",
    "voicecore/twilio/stream.py",
    "voicecore/twilio/webhook.py",
    "voicecore/twilio/signature.py",
    "voicecore/realtime/events.py",
    "voicecore/sim/model_core.py",
    "voicecore/sim/carrier_core.py",
    "workers/gateway/core.py",
    "workers/model/core.py",
    "workers/pacer/core.py",
]
FORBIDDEN = {"asyncio", "zmq", "websockets", "time", "os", "random", "uuid", "socket", "secrets", "threading", "subprocess"}


@pytest.mark.parametrize("relative", PURE_MODULES)
def test_core_imports_no_io(relative):
    tree = ast.parse((ROOT / relative).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, f"{relative} imports {sorted(imported & FORBIDDEN)}"
