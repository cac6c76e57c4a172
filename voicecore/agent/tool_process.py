"""A tool process: runs an agent's Python tools, one at a time, for the model worker's tool pool.

Started by voicecore/agent/tool_pool.py as ``python -m voicecore.agent.tool_process --directory DIR
--parent PID [--preload module:function ...] [--log-level L] [--log-format F]``. Owns the child side of the pool's pipe protocol:
frames of a 4-byte big-endian length and a msgpack map, requests on stdin, replies on stdout.

- first, once: ``{"ready": pid}`` after the tools named by ``--preload`` were imported (the first call
  does not pay for the import);
- per request ``{"entry", "arguments", "call_sid", "function", "key"}``: one reply ``{"status", "output",
  "message", "attempts"}``; ``status`` "ok" with the tool's result as JSON text in ``output``, else one of
  tools.STATUSES with a one-line ``message`` the model may read.

The tool runs on this process's own event loop, so a tool that blocks (a synchronous client, a CPU-bound
step) stalls only this process; the pool kills it at the tool's deadline, and a crash (a segfault in a C
extension, ``os._exit``) ends only this process. Whatever the tool prints goes to stderr (the log), never
into the protocol. The process dies with its parent (PR_SET_PDEATHSIG on Linux; elsewhere it ends at the
next request it cannot read).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import importlib
import inspect
import logging
import os
import signal
import struct
import sys
from typing import Any, BinaryIO

import msgpack

from voicecore.agent.load import import_tool_module
from voicecore.agent.tools import ToolContext, ToolFailure, encode_result
from voicecore.logs import setup_logging

log = logging.getLogger("voicecore.tools")

FRAME_HEADER = struct.Struct(">I")
MAX_REQUEST_BYTES = 1024 * 1024  # the arguments of one function call: the model's JSON, far below this
PR_SET_PDEATHSIG = 1


def read_frame(stream: BinaryIO, limit: int) -> dict[str, Any] | None:
    """The next frame's map; None at the end of the stream (the parent closed it or died)."""
    header = _read_exactly(stream, FRAME_HEADER.size)
    if header is None:
        return None
    (size,) = FRAME_HEADER.unpack(header)
    if size > limit:
        raise ValueError(f"a frame of {size} bytes, more than {limit}")
    body = _read_exactly(stream, size)
    if body is None:
        return None
    value = msgpack.unpackb(body, raw=False)
    if not isinstance(value, dict):
        raise ValueError("a frame that is not a map")
    return value


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size > 0:
        chunk = stream.read(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def encode_frame(value: dict[str, Any]) -> bytes:
    body = msgpack.packb(value, use_bin_type=True)
    return FRAME_HEADER.pack(len(body)) + body


class ToolRunner:
    """The entries this process has imported, and running one of them on the process's event loop."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.functions: dict[str, Any] = {}
        self.loop = asyncio.new_event_loop()

    def load(self, entry: str) -> Any:
        """``module:function``, imported once from the agent's directory; a ToolFailure when it cannot be used."""
        found = self.functions.get(entry)
        if found is not None:
            return found
        module_name, _, attribute = entry.partition(":")
        if not module_name or not attribute:
            return ToolFailure("exception", f"python tool {entry!r} is not module:function")
        try:
            if self.directory:
                target: Any = import_tool_module(module_name, self.directory)
            else:
                target = importlib.import_module(module_name)
            for part in attribute.split("."):
                target = getattr(target, part)
        except Exception as exc:  # an import runs someone else's module code: anything can fail in it
            return ToolFailure("exception", f"cannot load python tool {entry}: {type(exc).__name__}")
        if not inspect.iscoroutinefunction(target):
            return ToolFailure("exception", f"python tool {entry} is not an async function")
        self.functions[entry] = target
        return target

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        function = self.load(str(request.get("entry", "")))
        if isinstance(function, ToolFailure):
            return _failure(function, attempts=0)
        arguments = request.get("arguments")
        if not isinstance(arguments, dict):
            return _failure(ToolFailure("invalid_arguments", "the arguments are not an object"), attempts=0)
        context = ToolContext(str(request.get("call_sid", "")), str(request.get("function", "")),
                              str(request.get("key", "")))
        try:
            result = self.loop.run_until_complete(function(arguments, context))
        except BaseException as exc:  # noqa: BLE001 - the tool is someone else's code; SystemExit must not end us
            return _failure(ToolFailure("exception", f"{type(exc).__name__}: {exc}"), attempts=1)
        output, failure = encode_result(result)
        if failure is not None:
            return _failure(failure, attempts=1)
        return {"status": "ok", "output": output, "message": "", "attempts": 1}


def _failure(failure: ToolFailure, attempts: int) -> dict[str, Any]:
    return {"status": failure.status, "output": failure.output(), "message": failure.message, "attempts": attempts}


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux), and exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # no prctl: the process still ends at its next read of the closed pipe
    if os.getppid() != parent_pid:
        os._exit(0)


def protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """The pipe ends of the protocol, taken off fds 0 and 1; fd 0 becomes /dev/null and fd 1 stderr,
    so a tool that reads stdin or prints cannot corrupt a frame."""
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return requests, replies


def serve(runner: ToolRunner, requests: BinaryIO, replies: BinaryIO) -> None:
    replies.write(encode_frame({"ready": os.getpid()}))
    while True:
        request = read_frame(requests, MAX_REQUEST_BYTES)
        if request is None:
            return
        replies.write(encode_frame(runner.run(request)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m voicecore.agent.tool_process")
    parser.add_argument("--directory", default="", help="the agent's directory (its tools' modules are imported from it)")
    parser.add_argument("--parent", type=int, required=True, help="the pid of the model worker that owns this process")
    parser.add_argument("--preload", action="append", default=[], metavar="MODULE:FUNCTION")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", default="text", choices=("text", "json"))
    args = parser.parse_args(argv)
    die_with_parent(args.parent)
    os.setsid()  # its own process group: a timeout kills the tool's own children with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which stops us
    setup_logging("tools", args.log_level, args.log_format)
    requests, replies = protocol_streams()
    runner = ToolRunner(args.directory)
    for entry in args.preload:
        loaded = runner.load(entry)
        if isinstance(loaded, ToolFailure):
            log.error("tool process %d: %s", os.getpid(), loaded.message)
    try:
        serve(runner, requests, replies)
    except BrokenPipeError:
        pass  # the parent is gone


if __name__ == "__main__":
    main()
