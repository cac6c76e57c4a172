"""The test tiers, the hypothesis profiles, and the stack every tier may share.

Each test file lives in the folder of its tier and gets the tier's marker from it, so `-m unit` (or
`-m "not stack and not e2e"`) selects by tier without a marker written in any file:

- ``unit``: the sans-I/O cores and other parts in-process, no process and no socket of their own;
- ``rules``: the repository's rules (import arrows, no private imports, pure cores, the docs site, deploy/);
- ``component``: real processes or sockets for one part;
- ``stack``: whole stacks (``start_stack``) driven from the test;
- ``e2e``: ``voicecore demo``, ``bench`` and ``up`` run as a user runs them.

Helpers shared by the tiers are modules beside this file (tests/ is on sys.path: pyproject.toml's
``pythonpath``): stacks.py (``start_stack``), external.py (``missing_resource``), waiting.py, records.py,
exposition.py, realtime_wire.py, console_alone.py, nats_server.py, and the scenarios/ package.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from xdist.scheduler import LoadScopeScheduling

from external import in_ci
from stacks import start_stack, wait_for_stops

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "rules", "component", "stack", "e2e")

# Hypothesis: one place sets how hard the properties are searched, per situation, instead of a count per
# test. `dev` (the default) keeps the fast loop fast and lets hypothesis keep its database of failures;
# `ci` searches harder and derandomizes, so a CI failure reproduces from the same seed. Neither has a
# deadline or the too_slow health check: the machine may be busy, and a property's verdict must not
# depend on how fast one example ran. HYPOTHESIS_PROFILE picks one by name; CI=true picks `ci`.
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if in_ci() else "dev"))


def pytest_configure(config: pytest.Config) -> None:
    strays = sorted(path.name for path in TESTS.glob("test_*.py"))
    if strays:
        raise pytest.UsageError(
            f"test files at tests/ itself: {', '.join(strays)}. Each belongs in the folder of its tier "
            f"({', '.join('tests/' + tier for tier in TIERS)}; tests/conftest.py says which is which): "
            "git mv it there, and import shared helpers from the modules beside tests/conftest.py.")


def tier_of(path: Path) -> str | None:
    try:
        folder = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in TIERS else None


# pytest-xdist hands out work by scope (RealtimeScheduling below): a module of the fast tiers is one scope, so
# its module-scoped fixtures (a PostgreSQL server) start once; the real-time tiers (stack, e2e) are all one
# scope, run one test at a time on one worker, so at most one stack takes calls in real time while the fast
# tiers run on the other workers. Two stacks at once on 2 cores made real-time figures (a truncate point, a
# drain's timing) fail under their own load. The shared stacks (tests/stack/conftest.py) live on that worker.
# (xdist's own --dist=loadgroup would say the same with xdist_group marks, but 3.8 did not group them here.)
REALTIME_TIERS = ("stack", "e2e")


class RealtimeScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        tier = nodeid.split("/", 2)[1] if nodeid.startswith("tests/") else ""
        return "realtime" if tier in REALTIME_TIERS else nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> RealtimeScheduling:
    return RealtimeScheduling(config, log)


def pytest_itemcollected(item: pytest.Item) -> None:
    tier = tier_of(item.path)
    if tier is None:
        return
    item.add_marker(getattr(pytest.mark, tier))
    if tier in REALTIME_TIERS:
        item.add_marker(pytest.mark.integration)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-time tiers first, so their one long serial group starts at once and the fast tiers' many
    short tests fill the other workers beside it."""
    items.sort(key=lambda item: tier_of(item.path) not in REALTIME_TIERS)  # stable: within a tier as collected
    config.stash[_SESSION_HAS_REALTIME] = any(tier_of(item.path) in REALTIME_TIERS for item in items)


# A real-time test measures calls as a caller hears them (underruns, a truncate point), on the same 2 cores as
# the fast tiers beside it. Those run at a lower priority while real-time tests are in the session, so they
# take the CPU the calls leave and never delay a frame: as production runs the pacer and gateway above the
# rest (voicecore/priority.py). Niceness only grows, and the real-time group is one scope on one worker, so
# no worker runs a real-time test after lowering itself (a worker's fast tests come after its real-time ones).
FAST_TIER_NICENESS = 10
_SESSION_HAS_REALTIME = pytest.StashKey[bool]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if tier_of(item.path) in REALTIME_TIERS or not item.config.stash.get(_SESSION_HAS_REALTIME, False):
        return
    current = os.nice(0)
    if current < FAST_TIER_NICENESS:
        os.nice(FAST_TIER_NICENESS - current)


def pytest_sessionfinish(session: pytest.Session) -> None:
    wait_for_stops()  # no stack outlives the run


@pytest.fixture(scope="module")
def running_stack():
    """A stack of the default configuration for one module's tests."""
    running = start_stack()
    yield running
    running.stop()
