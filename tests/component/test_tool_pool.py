"""The model worker's tool pool (voicecore/agent/tool_pool.py): real processes running real Python tools
written to disk. A tool that blocks, spins, segfaults or exits costs its own run an error and nothing else;
its process is killed or replaced and the pool serves the next run. No timing targets here: orderings and
outcomes only (the stalls a blocking tool caused are measured by the bench, docs/how-to/write-a-tool.md)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from voicecore.agent.spec import PythonTool
from voicecore.agent.tool_pool import ToolPool, exit_description
from voicecore.agent.tools import ToolContext

TOOLS = textwrap.dedent("""
    import asyncio, ctypes, os, subprocess, sys, time

    async def echo(arguments, context):
        return {"echo": arguments, "call": context.call_sid, "pid": os.getpid()}

    async def blocking(arguments, context):
        time.sleep(arguments.get("seconds", 30))  # a synchronous client: blocks its event loop
        return {"slept": True}

    async def spinning(arguments, context):
        while True:  # CPU-bound, never yields
            pass

    async def segfault(arguments, context):
        ctypes.string_at(0)

    async def exits(arguments, context):
        os._exit(3)

    async def chatty(arguments, context):
        print("a line on stdout that must not reach the protocol")
        sys.stdout.flush()
        os.write(1, b"\\x00\\x00\\x00\\x05hello")
        return {"said": "hello"}

    async def with_child(arguments, context):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(arguments["pid_file"], "w") as f:
            f.write(str(child.pid))
        time.sleep(60)

    async def logged(arguments, context):
        with open(arguments["log"], "a") as f:
            f.write(f"start {arguments['name']}\\n")
        await asyncio.sleep(arguments.get("seconds", 0))
        with open(arguments["log"], "a") as f:
            f.write(f"end {arguments['name']}\\n")
        return {"done": arguments["name"]}
""")


@pytest.fixture
def tools_dir(tmp_path):
    (tmp_path / "pool_tools.py").write_text(TOOLS)
    return tmp_path


def tool(name: str, timeout_s: float = 30.0) -> PythonTool:
    return PythonTool(f"pool_tools:{name}", timeout_s)


def ctx(call_sid: str = "CA1", function: str = "f") -> ToolContext:
    return ToolContext(call_sid, function, "k" * 24)


async def started_pool(directory: Path, **kwargs) -> ToolPool:
    pool = ToolPool(str(directory), ["pool_tools:echo"], **kwargs)
    pool.start()
    assert await pool.wait_ready(60)  # a loaded machine starts Python slowly; nothing here is timed
    return pool


def gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie nobody has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_tool_runs_in_a_process_of_its_own_and_gets_its_context(tools_dir):
    async def body():
        pool = await started_pool(tools_dir, processes=1)
        try:
            return await pool.run(tool("echo"), {"a": 1}, ctx("CA7"))
        finally:
            await pool.close()

    output, failure, attempts = asyncio.run(body())
    assert failure is None and attempts == 1
    result = json.loads(output)
    assert result["echo"] == {"a": 1} and result["call"] == "CA7" and result["pid"] != os.getpid()


@pytest.mark.parametrize("name", ["blocking", "spinning"])
def test_a_tool_that_blocks_or_spins_is_killed_at_its_deadline_and_the_pool_serves_the_next_run(tools_dir, name):
    async def body():
        pool = await started_pool(tools_dir, processes=1)
        try:
            first = await pool.run(tool(name, timeout_s=1.0), {}, ctx())
            after = await pool.run(tool("echo"), {"n": 2}, ctx())  # the replacement, once it is up
            return first, after, pool.stats()
        finally:
            await pool.close()

    (output, failure, attempts), (after, after_failure, _), stats = asyncio.run(body())
    assert failure is not None and failure.status == "timeout" and "stopped" in failure.message and attempts == 1
    assert after_failure is None and json.loads(after)["echo"] == {"n": 2}
    assert stats["tool_runs_killed"] == 1 and stats["tool_process_starts"] == 2 and stats["tool_processes"] == 1


@pytest.mark.parametrize("name, how", [("segfault", "SIGSEGV"), ("exits", "exit code 3")])
def test_a_tool_that_crashes_its_process_costs_its_run_a_crashed_error_and_nothing_else(tools_dir, name, how):
    async def body():
        pool = await started_pool(tools_dir, processes=2)
        try:
            # another call's run is in progress on the other process while this one crashes
            other = asyncio.create_task(pool.run(tool("logged"), {"log": str(tools_dir / "log"), "name": "other",
                                                                  "seconds": 1.0}, ctx("CA2")))
            crashed = await pool.run(tool(name), {}, ctx("CA1"))
            return crashed, await other, await pool.run(tool("echo"), {}, ctx("CA1")), pool.stats()
        finally:
            await pool.close()

    (_, failure, _), other, after, stats = asyncio.run(body())
    assert failure is not None and failure.status == "crashed" and how in failure.message
    assert other == ('{"done":"other"}', None, 1)
    assert after[1] is None
    assert stats["tool_runs_crashed"] == 1 and stats["tool_process_deaths"] == 1


def test_a_hung_tool_of_one_call_does_not_hold_up_another_calls_run(tools_dir):
    async def body():
        pool = await started_pool(tools_dir, processes=2)
        try:
            hung = asyncio.create_task(pool.run(tool("blocking"), {"seconds": 30}, ctx("CA1")))
            await asyncio.sleep(0.2)
            quick = await pool.run(tool("echo"), {}, ctx("CA2"))
            still_hung = not hung.done()  # CA2 got its answer while CA1's tool still blocked its process
        finally:
            await pool.close()
        return quick, still_hung, await hung

    quick, still_hung, hung = asyncio.run(body())
    assert quick[1] is None and still_hung
    assert hung[1] is not None and hung[1].status == "crashed"  # still blocked when the pool closed


def test_one_calls_runs_wait_for_each_other_beyond_its_share_and_other_calls_do_not(tools_dir):
    log = tools_dir / "log"

    def logged(name: str, seconds: float) -> dict:
        return {"log": str(log), "name": name, "seconds": seconds}

    async def body():
        pool = await started_pool(tools_dir, processes=3, per_call=1)
        try:
            a1 = asyncio.create_task(pool.run(tool("logged"), logged("a1", 3.0), ctx("CA1")))
            await asyncio.sleep(0.2)
            a2 = asyncio.create_task(pool.run(tool("logged"), logged("a2", 0.0), ctx("CA1")))
            b1 = asyncio.create_task(pool.run(tool("logged"), logged("b1", 0.0), ctx("CA2")))
            return await asyncio.gather(a1, a2, b1), pool.stats()
        finally:
            await pool.close()

    results, stats = asyncio.run(body())
    assert all(failure is None for _, failure, _ in results)
    lines = log.read_text().splitlines()
    assert lines.index("end b1") < lines.index("end a1")  # CA2 ran beside CA1's long run
    assert lines.index("end a1") < lines.index("start a2")  # CA1's second run waited for its first


def test_a_run_that_finds_no_free_process_before_its_deadline_times_out_without_running(tools_dir):
    async def body():
        pool = await started_pool(tools_dir, processes=1)
        try:
            hung = asyncio.create_task(pool.run(tool("blocking"), {"seconds": 30}, ctx("CA1")))
            await asyncio.sleep(0.2)
            waited = await pool.run(tool("echo", timeout_s=0.5), {}, ctx("CA2"))
            return waited, pool.stats()
        finally:
            await pool.close()
            await hung

    (output, failure, attempts), stats = asyncio.run(body())
    assert failure is not None and failure.status == "timeout" and "no tool process was free" in failure.message
    assert attempts == 0 and stats["tool_runs_wait_timeouts"] == 1


def test_what_a_tool_prints_goes_to_the_log_not_into_the_protocol(tools_dir):
    async def body():
        pool = await started_pool(tools_dir, processes=1)
        try:
            return await pool.run(tool("chatty"), {}, ctx()), await pool.run(tool("echo"), {"n": 1}, ctx())
        finally:
            await pool.close()

    chatty, echo = asyncio.run(body())
    assert chatty == ('{"said":"hello"}', None, 1) and echo[1] is None


def test_the_deadline_kills_what_the_tool_started_too(tools_dir):
    pid_file = tools_dir / "grandchild.pid"

    async def body():
        pool = await started_pool(tools_dir, processes=1)
        try:
            return await pool.run(tool("with_child", timeout_s=5.0), {"pid_file": str(pid_file)}, ctx())
        finally:
            await pool.close()

    _, failure, _ = asyncio.run(body())
    assert failure is not None and failure.status == "timeout"
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(grandchild)


def test_a_module_that_fails_at_import_is_an_error_for_its_runs(tools_dir):
    (tools_dir / "broken_tools.py").write_text("raise RuntimeError('no calendar')\n")

    async def body():
        pool = ToolPool(str(tools_dir), ["broken_tools:f", "pool_tools:echo"], processes=1)
        pool.start()
        try:
            assert await pool.wait_ready(60)
            return await pool.run(PythonTool("broken_tools:f", 30.0), {}, ctx()), await pool.run(tool("echo"), {}, ctx())
        finally:
            await pool.close()

    (_, failure, attempts), echo = asyncio.run(body())
    assert failure is not None and failure.status == "exception" and "RuntimeError" in failure.message and attempts == 0
    assert echo[1] is None  # the other tools of the module's process still run


def test_closing_the_pool_mid_run_answers_the_run_and_a_waiting_one(tools_dir):
    async def body():
        pool = await started_pool(tools_dir, processes=1)
        running = asyncio.create_task(pool.run(tool("blocking", timeout_s=30.0), {"seconds": 30}, ctx("CA1")))
        waiting = asyncio.create_task(pool.run(tool("echo", timeout_s=30.0), {}, ctx("CA2")))
        for _ in range(200):  # until the blocking run is in its process (a fixed wait lost that race under load)
            if pool.stats()["tool_processes_busy"] == 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        pids = pool.pids()
        await pool.close()
        return await running, await waiting, pids

    (_, running, _), (_, waiting, _), pids = asyncio.run(body())
    assert running is not None and running.status == "crashed" and "SIGKILL" in running.message, running
    assert waiting is not None and waiting.status == "exception" and "closed" in waiting.message, waiting
    assert pids and all(gone(p) for p in pids), [(p, gone(p)) for p in pids]


def test_closing_the_pool_ends_every_process_and_a_dead_parent_takes_them_with_it(tools_dir):
    script = textwrap.dedent(f"""
        import asyncio, os, sys
        from voicecore.agent.tool_pool import ToolPool

        async def main():
            pool = ToolPool({str(tools_dir)!r}, ["pool_tools:echo"], processes=2)
            pool.start()
            await pool.wait_ready(60)
            print(" ".join(str(p) for p in pool.pids()), flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(gone(p) for p in pids)
        parent.send_signal(signal.SIGKILL)  # no clean-up of its own: the children must go anyway
        parent.wait(10)
        deadline = time.monotonic() + 5
        while not all(gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(gone(p) for p in pids)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_exit_descriptions():
    assert exit_description(-signal.SIGSEGV) == "SIGSEGV"
    assert exit_description(3) == "exit code 3"
    assert exit_description(None) == "still running"
