"""Stacks shared by the stack tier's tests where the configuration is the default.

Starting a stack (supervisord and six processes, each importing numpy and the kernels) costs seconds of both
cores; a test that only needs *a* stack of the default configuration takes a shared one. A test that
changes a stack (kills a process, drains it, fills its call slots) or needs another setting starts its own
with ``start_stack``. A shared stack has taken other tests' calls before: a test on it counts what its
own calls did (by call SID, or as a difference of counters), never a total since the stack started.
"""

from __future__ import annotations

import pytest

from stacks import RunningStack, start_stack


@pytest.fixture(scope="session")
def default_stack() -> RunningStack:
    running = start_stack()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def turns_stack() -> RunningStack:
    """The default configuration under the turn-taking controller (call_control="turns")."""
    running = start_stack(call_control="turns")
    yield running
    running.stop()


@pytest.fixture
def running_stack(default_stack: RunningStack) -> RunningStack:
    return default_stack
