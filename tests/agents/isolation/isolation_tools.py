"""Python tools that misbehave, for the tool isolation test: each runs in a process of the model worker's
tool pool, so a hang or a crash here must cost only the call that ran it."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any


async def hang(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """A synchronous client that never answers: blocks its process's event loop until it is killed."""
    time.sleep(300)
    return {"hours": "never"}


async def crash(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """A C extension that dereferences NULL: SIGSEGV in the tool's process."""
    ctypes.string_at(0)
    return {}


async def echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answers at once: the pool still serves this call after its hang or crash."""
    return {"noted": True, "call": context.call_sid, "pid": os.getpid()}
