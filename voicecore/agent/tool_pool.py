"""The model worker's pool of tool processes: an agent's Python tools run there, never on its event loop.

Owns the processes (voicecore/agent/tool_process.py, one tool run at a time each), giving a run to an
idle one, the deadline of a run and what happens at it, and the processes' replacement. The model
worker's loop serves every call's model socket, barge-ins and tool results; a Python tool that blocks
it (a synchronous HTTP client, a slow CPU step) would stall all of them. So:

- **Off the loop**: a run is a request frame to an idle process and a reply frame back (pipes, msgpack);
  the loop only waits on a pipe.
- **Deadlines that stop the work**: the tool's ``timeout_s`` bounds the whole run as the caller waits
  for it (waiting for a free process included). At the deadline a running tool's process group is sent
  SIGKILL (the tool, and any process it started), whatever the tool is doing (a blocking sleep, a CPU
  loop); its call gets a ``timeout`` error, and a new process takes the dead one's place.
- **Crash isolation**: a process that dies mid-run (a segfault in a C extension, ``os._exit``) costs that
  run a ``crashed`` error and nothing else; it is replaced. A process that cannot start (its tools'
  module fails at import) is tried again with a growing pause, and runs meanwhile time out waiting.
- **Fair shares**: at most ``per_call`` runs of one call at once (a call whose model fires many calls in
  parallel waits for its own runs, not for the others'); ``processes`` runs of all calls at once.

Why a pool owned by the model worker and not a separate supervised worker: the worker that knows which
call a run belongs to is the one that must kill exactly that run's process and answer exactly that
call, and a separate tools worker would need this same pool inside it (a single process per node would
put every call's tools behind one blocking tool again) plus a bus protocol, a leader and a standby of its
own. Here the processes are the worker's children: they die with it (PR_SET_PDEATHSIG), a standby's
pool starts when it takes over, and the pool's counters go out with the worker's stats.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import msgpack

from voicecore.agent.spec import PythonTool
from voicecore.agent.tool_process import FRAME_HEADER, encode_frame
from voicecore.agent.tools import STATUSES, ToolContext, ToolFailure

log = logging.getLogger("voicecore.tools")

DEFAULT_PROCESSES = 4
DEFAULT_PER_CALL = 2
MAX_REPLY_BYTES = 64 * 1024  # a result is capped at 8 KiB of JSON (tools.MAX_OUTPUT_BYTES); more is a broken process
START_TIMEOUT_S = 30.0  # a process that has not imported its tools by then is killed and started again
RESTART_FIRST_S = 0.5  # a process that died before it was ready: the next start waits this, doubling ...
RESTART_MAX_S = 30.0  # ... up to this


@dataclasses.dataclass(slots=True, eq=False)  # compared and hashed by identity: kept in a set
class _Process:
    process: asyncio.subprocess.Process
    busy: bool = False
    killed: bool = False  # by us, at a deadline or for a broken reply

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.returncode is None and not self.killed


def exit_description(returncode: int | None) -> str:
    """'SIGSEGV' for a process killed by a signal, 'exit code 3' otherwise."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class ToolPool:
    """Start with ``start()`` (returns at once; processes come up in the background), run tools with
    ``run()``, stop with ``close()``. One pool per event loop: the model worker's."""

    def __init__(self, directory: str, entries: Iterable[str] = (), processes: int = DEFAULT_PROCESSES,
                 per_call: int = DEFAULT_PER_CALL, environ: Mapping[str, str] | None = None,
                 log_level: str = "info", log_format: str = "text", python: str = sys.executable) -> None:
        if processes < 1 or per_call < 1:
            raise ValueError("processes and per_call must be at least 1")
        self.directory = directory
        self.entries = tuple(dict.fromkeys(entries))
        self.processes = processes
        self.per_call = per_call
        self.environ = dict(environ) if environ is not None else None
        self.log_args = ("--log-level", log_level, "--log-format", log_format)
        self.python = python
        self.counters: collections.Counter[str] = collections.Counter(
            {"tool_process_starts": 0, "tool_process_start_failures": 0, "tool_process_deaths": 0,
             "tool_runs_killed": 0, "tool_runs_crashed": 0, "tool_runs_waited": 0, "tool_runs_wait_timeouts": 0})
        self._idle: collections.deque[_Process] = collections.deque()
        self._all: set[_Process] = set()
        self._free = asyncio.Condition()
        self._calls: dict[str, asyncio.Semaphore] = {}
        self._call_runs: collections.Counter[str] = collections.Counter()
        self._tasks: set[asyncio.Task] = set()  # starting and watching processes
        self._exchanges: set[asyncio.Task] = set()  # runs in progress (each ends when its process answers or ends)
        self._closed = False
        self._restart_pause_s = 0.0

    # -- life ----------------------------------------------------------------------------------------

    def start(self) -> None:
        for _ in range(self.processes):
            self._spawn_soon(0.0)

    async def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """True once every process is up (for tests and a measured start; runs do not need it)."""
        async with asyncio.timeout(timeout_s):
            async with self._free:
                await self._free.wait_for(lambda: len(self._idle) >= self.processes or self._closed)
        return not self._closed

    async def close(self) -> None:
        """Kill every process and wait for them; a run in progress ends with a ``crashed`` error."""
        self._closed = True
        for process in list(self._all):
            _kill(process)
        async with self._free:
            self._free.notify_all()
        for task in list(self._tasks):
            if not task.done():
                task.cancel()
        await asyncio.gather(*self._tasks, *self._exchanges, return_exceptions=True)
        await asyncio.gather(*(p.process.wait() for p in list(self._all)), return_exceptions=True)

    def pids(self) -> list[int]:
        """The processes running now (to watch them from outside)."""
        return sorted(p.pid for p in self._all if p.alive())

    def stats(self) -> dict[str, float]:
        alive = [p for p in self._all if p.alive()]
        return {**{k: float(v) for k, v in self.counters.items()},
                "tool_processes": float(len(alive)), "tool_processes_busy": float(sum(1 for p in alive if p.busy))}

    def _spawn_soon(self, delay_s: float) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._spawn(delay_s))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self, delay_s: float) -> None:
        if delay_s:
            await asyncio.sleep(delay_s)
        if self._closed:
            return
        command = [self.python, "-m", "voicecore.agent.tool_process", "--directory", self.directory,
                   "--parent", str(os.getpid()), *self.log_args]
        for entry in self.entries:
            command += ["--preload", entry]
        self.counters["tool_process_starts"] += 1
        try:
            child = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE, env=self.environ)
        except OSError as exc:
            self._start_failed(f"cannot start a tool process: {type(exc).__name__}: {exc}")
            self._spawn_soon(self._restart_pause_s)  # no process, so no watcher to do it
            return
        process = _Process(child)
        self._all.add(process)
        watcher = asyncio.get_running_loop().create_task(self._watch(process))
        self._tasks.add(watcher)
        watcher.add_done_callback(self._tasks.discard)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                hello = await _read_reply(child)
        except (TimeoutError, asyncio.IncompleteReadError, ValueError, msgpack.UnpackException) as exc:
            _kill(process)
            self._start_failed(f"a tool process did not start ({type(exc).__name__}); see its lines above")
            return
        if not isinstance(hello.get("ready"), int):
            _kill(process)
            self._start_failed("a tool process did not say it was ready")
            return
        self._restart_pause_s = 0.0
        await self._give_back(process)

    def _start_failed(self, message: str) -> None:
        self.counters["tool_process_start_failures"] += 1
        self._restart_pause_s = min(RESTART_MAX_S, max(RESTART_FIRST_S, self._restart_pause_s * 2))
        if not self._closed:
            log.error("%s; trying again in %.1f s", message, self._restart_pause_s)
        # The watcher of a started process replaces it when it exits; one that never started is replaced here.

    async def _watch(self, process: _Process) -> None:
        """When a process exits (killed, crashed, or it never came up), another takes its place."""
        returncode = await process.process.wait()
        self._all.discard(process)
        if process in self._idle:
            self._idle.remove(process)
        if not self._closed:
            self.counters["tool_process_deaths"] += 1
            if not process.killed:
                log.warning("tool process %d ended (%s)", process.pid, exit_description(returncode))
            self._spawn_soon(self._restart_pause_s)

    async def _give_back(self, process: _Process) -> None:
        process.busy = False
        if not process.alive() or self._closed:
            return
        async with self._free:
            self._idle.append(process)
            self._free.notify_all()

    async def _take(self) -> _Process:
        async with self._free:
            while True:
                while self._idle:
                    process = self._idle.popleft()
                    if process.alive():
                        process.busy = True
                        return process
                if self._closed:
                    raise RuntimeError("the tool pool is closed")
                await self._free.wait()

    # -- a run ---------------------------------------------------------------------------------------

    async def run(self, tool: PythonTool, arguments: dict[str, Any],
                  context: ToolContext) -> tuple[str, ToolFailure | None, int]:
        """(output, None, attempts) for a result, ("", failure, attempts) otherwise; never raises but
        CancelledError (the run's process then finishes or is killed on its own, and is reused)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + tool.timeout_s
        call_sid = context.call_sid
        slots = self._calls.get(call_sid)
        if slots is None:
            slots = self._calls[call_sid] = asyncio.Semaphore(self.per_call)
        self._call_runs[call_sid] += 1
        acquired = False
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await slots.acquire()
                    acquired = True
                    if not self._idle:
                        self.counters["tool_runs_waited"] += 1
                    process = await self._take()
            except TimeoutError:
                self.counters["tool_runs_wait_timeouts"] += 1
                return "", ToolFailure("timeout", f"no tool process was free within {tool.timeout_s:g} s"), 0
            except RuntimeError as exc:
                return "", ToolFailure("exception", str(exc)), 0
            request = {"entry": tool.entry, "arguments": arguments, "call_sid": call_sid, "function": context.function,
                       "key": context.idempotency_key}
            exchange = loop.create_task(self._exchange(process, request, deadline, tool.timeout_s))
            self._exchanges.add(exchange)
            exchange.add_done_callback(self._exchanges.discard)
            return await asyncio.shield(exchange)
        finally:
            if acquired:
                slots.release()
            self._call_runs[call_sid] -= 1
            if self._call_runs[call_sid] <= 0:
                del self._call_runs[call_sid]
                self._calls.pop(call_sid, None)

    async def _exchange(self, process: _Process, request: dict[str, Any], deadline: float,
                        timeout_s: float) -> tuple[str, ToolFailure | None, int]:
        child = process.process
        try:
            async with asyncio.timeout_at(deadline):
                assert child.stdin is not None
                child.stdin.write(encode_frame(request))
                await child.stdin.drain()
                reply = await _read_reply(child)
        except TimeoutError:
            self.counters["tool_runs_killed"] += 1
            _kill(process)
            return "", ToolFailure("timeout", f"the tool did not finish within {timeout_s:g} s; it was stopped"), 1
        except (asyncio.IncompleteReadError, ConnectionError):
            self.counters["tool_runs_crashed"] += 1
            returncode = await child.wait()
            # Killed by us (the pool closing): say so from what we did, not from the exit status, which
            # asyncio reports as 255 when another waiter in the process reaped the child first.
            how = exit_description(-signal.SIGKILL) if process.killed else exit_description(returncode)
            return "", ToolFailure("crashed", f"the tool's process died ({how})"), 1
        except (ValueError, msgpack.UnpackException) as exc:
            self.counters["tool_runs_crashed"] += 1
            _kill(process)
            return "", ToolFailure("crashed", f"the tool's process answered garbage ({type(exc).__name__})"), 1
        failure = _reply_failure(reply)
        await self._give_back(process)
        if failure is not None:
            return "", failure, int(reply.get("attempts", 1))
        return str(reply.get("output", "")), None, int(reply.get("attempts", 1))


def _reply_failure(reply: dict[str, Any]) -> ToolFailure | None:
    status = reply.get("status")
    if status == "ok" and isinstance(reply.get("output"), str):
        return None
    if status not in STATUSES or status == "ok":
        return ToolFailure("crashed", "the tool's process sent a reply without a known status")
    return ToolFailure(str(status), str(reply.get("message", "")))


async def _read_reply(child: asyncio.subprocess.Process) -> dict[str, Any]:
    """The next frame from a process; raises IncompleteReadError when it ended, ValueError when the frame
    is too large or not a map."""
    assert child.stdout is not None
    header = await child.stdout.readexactly(FRAME_HEADER.size)
    (size,) = FRAME_HEADER.unpack(header)
    if size > MAX_REPLY_BYTES:
        raise ValueError(f"a reply of {size} bytes")
    value = msgpack.unpackb(await child.stdout.readexactly(size), raw=False)
    if not isinstance(value, dict):
        raise ValueError("a reply that is not a map")
    return value


def _kill(process: _Process) -> None:
    """SIGKILL the process's group (the tool and whatever it started), then the process itself."""
    process.killed = True
    if process.process.returncode is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # not yet its own group leader (still starting): the process alone
    try:
        process.process.kill()
    except ProcessLookupError:
        pass
