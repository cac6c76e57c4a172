"""What a simulator run as a process of its own does around the simulator: say where it listens, then serve until
told to stop (the demo's Gemini simulator, voicecore/sim/gemini_process.py; the bench's, bench/simproc.py)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from voicecore.sim.quiet_gc import collector_paused


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path`` all at once: a reader polling for the file never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


async def announce_and_serve(port: int, port_file: Path) -> None:
    """Write the bound ``port`` to ``port_file``, then return on SIGTERM or SIGINT, the collector paused meanwhile
    (a simulator that stops for a collection delays every call it serves at once)."""
    write_atomically(port_file, str(port).encode())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with collector_paused():
        await stop.wait()
