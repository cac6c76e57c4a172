"""Process-wide logging and event-loop start-up shared by every voicecore process.

Log lines name the process and the call; audio, transcripts, digits and phone numbers never go into the
message text, only into ``extra`` fields that a redacting handler can drop (STYLE.md).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Protocol


class SignalledWorker(Protocol):
    stopping: bool

    def run(self) -> None: ...

    def close(self) -> None: ...


def setup_logging(process: str, level: str = "info") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        stream=sys.stderr,
        format=f"%(asctime)s {process}[%(process)d] %(levelname)s %(message)s",
    )


def run_loop(main: Coroutine) -> object:
    """Run ``main`` on uvloop (a dependency), falling back to asyncio's loop only if it is missing."""
    try:
        import uvloop
    except ImportError:
        logging.getLogger("voicecore").warning("uvloop missing: running on the default asyncio loop")
        return asyncio.run(main)
    return uvloop.run(main)


def run_until_signalled(worker: SignalledWorker) -> None:
    """Run a synchronous worker's loop until SIGTERM or SIGINT sets its ``stopping``; close it either way."""

    def stop(signum, frame):  # noqa: ARG001
        worker.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        worker.run()
    finally:
        worker.close()
