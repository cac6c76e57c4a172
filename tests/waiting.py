"""Waiting on a condition instead of sleeping a fixed time (a flaky test is a bug:
docs/explanation/style.md#rules).

A fixed sleep is either too short on a loaded machine (the test flakes) or too long everywhere else (the
suite crawls). These helpers poll a predicate until it holds and fail with a message naming the
condition when it does not hold in time. ``wait_until`` blocks; ``wait_until_async`` is for code that
runs inside an event loop next to the thing it waits on (it yields to the loop between polls).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float, condition: str, interval_s: float = 0.05,
               detail: Callable[[], str] | None = None) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; fail the test after
    ``timeout_s`` with "timed out after N s waiting for <condition>" (plus ``detail()``, e.g. a log tail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(_timeout_message(timeout_s, condition, detail), pytrace=False)
        time.sleep(interval_s)


async def wait_until_async(predicate: Callable[[], T], timeout_s: float, condition: str, interval_s: float = 0.05,
                           detail: Callable[[], str] | None = None) -> T:
    """``wait_until`` inside an event loop: the same contract, and the loop runs between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(_timeout_message(timeout_s, condition, detail), pytrace=False)
        await asyncio.sleep(interval_s)


def _timeout_message(timeout_s: float, condition: str, detail: Callable[[], str] | None) -> str:
    message = f"timed out after {timeout_s:g} s waiting for {condition}"
    return f"{message}\n{detail()}" if detail is not None else message
