"""Process-wide logging and event-loop start-up shared by every voicecore process.

Log lines name the process and the call; audio, transcripts, digits and phone numbers never go into the
message text, only into ``extra`` fields that a redacting handler can drop (docs/explanation/style.md#rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Protocol


class SignalledWorker(Protocol):
    stopping: bool

    def run(self) -> None: ...

    def close(self) -> None: ...


_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_CALL_PREFIX = re.compile(r"^call (CA[0-9A-Za-z]+)\b")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, process, pid, level, logger, message, the call it names (``call``), and
    the record's ``extra`` fields under ``fields`` (where caller words and numbers go: a redacting pipeline
    drops that one key)."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
                      "process": self.process, "pid": record.process, "level": record.levelname.lower(),
                      "logger": record.name, "message": message}
        call = _CALL_PREFIX.match(message)
        if call:
            line["call"] = call.group(1)
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}
        if fields:
            line["fields"] = fields
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def setup_logging(process: str, level: str = "info", log_format: str = "text") -> None:
    """``log_format`` "json": JsonFormatter lines; "text": the human-readable one-liner."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {process}[%(process)d] %(levelname)s %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])


def run_loop(main: Coroutine) -> object:
    """Run ``main`` on uvloop (a dependency), falling back to asyncio's loop only if it is missing."""
    try:
        import uvloop
    except ImportError:
        logging.getLogger("voicecore").warning("uvloop missing: running on the default asyncio loop")
        return asyncio.run(main)
    return uvloop.run(main)


@contextlib.contextmanager
def stop_requests():
    """An Event set by SIGTERM or SIGINT while the block runs (a standby waiting for its turn), the
    previous handlers restored after it."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
