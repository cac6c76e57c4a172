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

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from xdist.scheduler import LoadScopeScheduling

from external import in_ci
from stacks import keep_workdirs_under, start_stack, wait_for_stops

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
    if not hasattr(config, "workerinput") and not os.environ.get(LANE_LOCK_VARIABLE):
        # the controller, before its workers start: they inherit the directory of the lanes' lock
        os.environ[LANE_LOCK_VARIABLE] = tempfile.mkdtemp(prefix="voicecore-test-lanes-")


def tier_of(path: Path) -> str | None:
    try:
        folder = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in TIERS else None


# pytest-xdist hands out work by scope (RealtimeScheduling below), a test module each, so a module's fixtures
# (a PostgreSQL server, a demo's reports) start once. The real-time tiers (stack, e2e) mostly wait on calls in
# real time, not on the CPU, so a few of their modules can run at once, each on a worker of its own (a lane,
# VOICECORE_TEST_REALTIME_LANES of them); the fast tiers run beside them on the other workers at a lower
# priority. A lane never runs a fast test before the real-time modules are all handed out, so no real-time
# test runs on a worker that lowered itself.
# (xdist's own --dist=loadgroup would say the same with xdist_group marks, but 3.8 did not group them here.)
REALTIME_TIERS = ("stack", "e2e")
REALTIME_LANES_VARIABLE = "VOICECORE_TEST_REALTIME_LANES"
# Two lanes by default: the suite on 2 cores in 28 minutes instead of 49. The two-lane failures seen were the
# product's races, which a busier machine exposed (a CallStarted published before the model worker's
# subscription, a slot published before its start's stamp), fixed since; three and four lanes (16-24 minutes)
# still lost frames beside other lanes' stacks now and then (docs/how-to/run-the-tests.md#lanes), so they
# are for a developer's run, not for the test command that must pass every time.
DEFAULT_REALTIME_LANES = 2
# Modules that run alone among the real-time ones (LaneLock below), first: the bench runs that measure
# frames' lateness against the SLO (10 calls of `voicecore bench`, p99 at most 5 ms, and the store's
# comparison of two runs' lateness) must not share the cores with another lane's stack start, and their
# carrier load processes run at SCHED_FIFO (bench/loadgen.py: the measuring instrument), above every process
# of another lane's stack but its pacer: calls beside a 10-call load lost frames with the model's audio there
# (underruns in a demo, in the barge-in test). The fast tiers run beside them. The bench's scenario runs
# (chaos, hallucination, soak: 4-6 calls, no lateness asserted) share the lanes like any stack test.
SOLO_MODULES = ("tests/e2e/test_bench_smoke.py",)
SOLO_SCOPE = "tests/e2e/(solo modules)"
LANE_LOCK_VARIABLE = "VOICECORE_TEST_LANE_LOCK_DIR"  # set by the controller for its workers


def realtime_lanes() -> int:
    return max(1, int(os.environ.get(REALTIME_LANES_VARIABLE) or DEFAULT_REALTIME_LANES))


def _includes_realtime_tiers(config: pytest.Config) -> bool:
    for arg in config.args:
        path = Path(arg.split("::", 1)[0]).resolve()
        if path in (TESTS, TESTS.parent) or tier_of(path) in REALTIME_TIERS:
            return True
    return False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: a worker per core for the fast tiers alone; with the real-time tiers in the session, their
    lanes beside a worker for the fast tiers per core the lanes leave (at least one)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or not _includes_realtime_tiers(config):
        return None  # xdist's own answer: PYTEST_XDIST_AUTO_NUM_WORKERS, or a worker per core
    return realtime_lanes() + max(1, (os.cpu_count() or 1) - realtime_lanes())


def _is_realtime_scope(scope: str) -> bool:
    return scope.startswith("tests/") and scope.split("/", 2)[1] in REALTIME_TIERS


class RealtimeScheduling(LoadScopeScheduling):
    """Module scopes (the solo modules one scope together, so one lane runs them one after the other), in
    the collection's order; real-time scopes only on the lanes (the first workers), fast scopes on the other
    workers, and on a lane once no real-time scope is left to hand out. That the solo modules run alone is
    the lanes' lock's business (LaneLock), not the scheduler's: a worker holds back the last test it was
    given until it gets more, so a scheduler that made lanes wait for one to finish would wait forever."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        config.option.loadscopereorder = False  # the collection's order (pytest_collection_modifyitems), not by size
        super().__init__(config, log)
        self.lanes = min(realtime_lanes(), max(1, self.numnodes - 1))

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return SOLO_SCOPE if module in SOLO_MODULES else module

    def _is_lane(self, node) -> bool:
        return int(node.gateway.id.removeprefix("gw") or 0) < self.lanes

    def _next_scope_for(self, node) -> str | None:
        realtime_left = any(_is_realtime_scope(scope) for scope in self.workqueue)
        for scope in self.workqueue:
            if _is_realtime_scope(scope):
                if self._is_lane(node):
                    return scope
            elif not (self._is_lane(node) and realtime_left):
                return scope
        return None

    def _assign_work_unit(self, node) -> None:
        scope = self._next_scope_for(node)
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if self._next_scope_for(node) is None:
            node.shutdown()  # finishes what it holds; nothing left it may take
            return
        if self._pending_of(self.assigned_work[node]) > 2:
            return
        self._assign_work_unit(node)

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        if not any(_is_realtime_scope(scope) for scope in self.workqueue):
            for other in self.nodes:  # a lane may now take fast modules; a fast worker may be done
                if other is not node:
                    self._reschedule(other)


class LaneLock:
    """The lanes' readers-writer lock (flock on two files in a directory the controller made): a real-time
    test holds it shared, the solo modules' tests hold it alone. The turnstile makes it fair: a solo test
    waiting for the lock holds the turnstile, so no new shared holder gets in and the running tests finish;
    a shared holder passes the turnstile first. Shared holds last one test; the solo hold lasts while the
    lane's next test is solo too."""

    def __init__(self, directory: Path) -> None:
        self.turnstile = open(directory / "turnstile", "a")
        self.room = open(directory / "room", "a")
        self.held: str | None = None

    def enter(self, kind: str) -> None:
        if self.held == kind:
            return
        self.leave()
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        if kind == "solo":
            fcntl.flock(self.room, fcntl.LOCK_EX)  # the turnstile stays held until leave()
        else:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
            fcntl.flock(self.room, fcntl.LOCK_SH)
        self.held = kind

    def leave(self) -> None:
        if self.held is None:
            return
        fcntl.flock(self.room, fcntl.LOCK_UN)
        if self.held == "solo":
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.held = None


def lane_lock_kind(item: pytest.Item | None) -> str | None:
    if item is None or tier_of(item.path) not in REALTIME_TIERS:
        return None
    return "solo" if item.nodeid.split("::", 1)[0] in SOLO_MODULES else "shared"


_LANE_LOCK = pytest.StashKey[LaneLock]()


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
    """The real-time tiers first, their solo modules first of all, so the lanes start at once and the fast
    tiers' many short tests fill the other workers beside them."""
    def order(item: pytest.Item) -> int:  # stable: within a group as collected
        if tier_of(item.path) not in REALTIME_TIERS:
            return 2
        return 0 if item.nodeid.split("::", 1)[0] in SOLO_MODULES else 1

    items.sort(key=order)
    config.stash[_SESSION_HAS_REALTIME] = any(tier_of(item.path) in REALTIME_TIERS for item in items)


# A real-time test measures calls as a caller hears them (underruns, a truncate point), on the same 2 cores as
# the fast tiers beside it. Those run at a lower priority while real-time tests are in the session, so they
# take the CPU the calls leave and never delay a frame: as production runs the pacer and gateway above the
# rest (voicecore/priority.py). Niceness only grows, and a worker's fast tests come after its real-time ones
# (RealtimeScheduling), so no worker runs a real-time test after lowering itself.
FAST_TIER_NICENESS = 10
_SESSION_HAS_REALTIME = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    kind = lane_lock_kind(item)
    directory = os.environ.get(LANE_LOCK_VARIABLE)
    if kind and directory and hasattr(item.config, "workerinput"):
        if _LANE_LOCK not in item.config.stash:
            item.config.stash[_LANE_LOCK] = LaneLock(Path(directory))
        item.config.stash[_LANE_LOCK].enter(kind)  # before the test's fixtures start a stack
    if tier_of(item.path) in REALTIME_TIERS or not item.config.stash.get(_SESSION_HAS_REALTIME, False):
        return
    current = os.nice(0)
    if current < FAST_TIER_NICENESS:
        os.nice(FAST_TIER_NICENESS - current)


# The numba kernels every worker of a stack loads: on a fresh clone the first stack of each real-time lane
# compiled them at once (about 9 s of a core each, within a node's lock but not across the lanes' nodes), the
# lanes' first real-time tests running beside it. Compiled once here, before the workers start, they are
# in numba's cache beside the sources for every stack. The rings and the pacer's step compile side by side.
KERNEL_WARM_UPS = (
    "from voicecore.shm.warmup import warm_up_rings; warm_up_rings()",
    "from voicecore.config import load_config; from workers.pacer.warm_up import warm_up_kernels; "
    "warm_up_kernels(load_config({}))",
)


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or not _includes_realtime_tiers(session.config):
        return
    compiling = [subprocess.Popen([sys.executable, "-c", code], cwd=TESTS.parent, stderr=subprocess.PIPE)
                 for code in KERNEL_WARM_UPS]
    for process, code in zip(compiling, KERNEL_WARM_UPS):
        _, stderr = process.communicate(timeout=300)
        if process.returncode:
            raise pytest.UsageError(f"compiling the numba kernels failed ({code}):\n{stderr.decode(errors='replace')[-3000:]}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    lock = item.config.stash.get(_LANE_LOCK, None)
    if lock is not None and (lock.held == "shared" or lane_lock_kind(nextitem) != lock.held):
        lock.leave()


def pytest_sessionfinish(session: pytest.Session) -> None:
    wait_for_stops()  # no stack outlives the run


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = os.environ.get(LANE_LOCK_VARIABLE, "")
    if not hasattr(config, "workerinput") and Path(directory).name.startswith("voicecore-test-lanes-"):
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _stack_workdirs_in_the_sessions_temp(tmp_path_factory):
    """Every stack's working directory inside this session's (each worker's) temporary directory, which
    pytest removes once three newer sessions exist: a suite run made ~100 under /tmp that nothing removed."""
    keep_workdirs_under(tmp_path_factory.getbasetemp() / "stacks")


@pytest.fixture(scope="module")
def running_stack():
    """A stack of the default configuration for one module's tests."""
    running = start_stack()
    yield running
    running.stop()
