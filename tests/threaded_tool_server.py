"""voicecore's fake tool API (voicecore/sim/tool_server.py) on its own loop in a thread: for code under test
that is a thread and blocks (the webhook sender), and for receivers a whole stack posts to."""

from __future__ import annotations

import asyncio
import threading

from voicecore.sim.tool_server import ToolServer


def serve(routes):
    """A ToolServer on its own loop in a thread (the sender is a thread and blocks)."""
    loop = asyncio.new_event_loop()
    server = ToolServer(routes)
    ready = threading.Event()
    url: list[str] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        url.append(loop.run_until_complete(server.start()))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    return server, url[0], stop
