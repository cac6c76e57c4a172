"""How the whole suite shares the cores (tests/conftest.py): the scheduler that hands real-time modules only to
the lanes, in the collection's order, and the lanes' lock that lets the bench's modules run alone.

The scheduler is driven here with stand-ins for xdist's worker controllers (the scheduler only calls their
``send_runtest_some`` and ``shutdown`` and reads ``gateway.id``); the lock is the real flock on real files,
each holder with its own open file description as each worker process has."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import xdist.scheduler.loadscope as loadscope

import conftest
from conftest import LaneLock, RealtimeScheduling

SUITES_SOLO = conftest.SOLO_MODULES
# Two solo modules here, whatever the suite's are: the scheduler keeps them together on one lane.
SOLO = ("tests/e2e/test_solo_a.py", "tests/e2e/test_solo_b.py")
COLLECTION = [
    f"{SOLO[0]}::test_a", f"{SOLO[1]}::test_b",
    "tests/e2e/test_demo.py::test_one", "tests/e2e/test_demo.py::test_two",
    "tests/stack/test_calls.py::test_one", "tests/stack/test_calls.py::test_two",
    "tests/unit/test_core.py::test_one", "tests/rules/test_docs.py::test_one",
]


@pytest.fixture(autouse=True)
def two_solo_modules(monkeypatch):
    monkeypatch.setattr(conftest, "SOLO_MODULES", SOLO)


def test_the_suites_solo_modules_are_its_bench_runs_that_measure_lateness():
    real = (conftest.TESTS.parent / module for module in SUITES_SOLO)
    assert [path.relative_to(conftest.TESTS.parent).as_posix() for path in real if path.is_file()] == [
        "tests/e2e/test_bench_smoke.py"]


class Worker:
    def __init__(self, number: int) -> None:
        self.gateway = SimpleNamespace(id=f"gw{number}")
        self.shutting_down = False
        self.given: list[str] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.given.extend(COLLECTION[i] for i in indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduled(monkeypatch, lanes: int, workers: int) -> tuple[RealtimeScheduling, list[Worker]]:
    monkeypatch.setenv(conftest.REALTIME_LANES_VARIABLE, str(lanes))
    monkeypatch.setattr(loadscope, "parse_tx_spec_config", lambda config: ["popen"] * workers)
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True))
    scheduler = RealtimeScheduling(config, log=None)
    nodes = [Worker(n) for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, COLLECTION)
    scheduler.schedule()
    return scheduler, nodes


def complete_everything(scheduler: RealtimeScheduling, nodes: list[Worker]) -> None:
    done: set[str] = set()
    while any(len(node.given) > len(done & set(node.given)) for node in nodes):
        for node in nodes:
            for nodeid in [n for n in node.given if n not in done]:
                done.add(nodeid)
                scheduler.mark_test_complete(node, COLLECTION.index(nodeid))


def test_the_lanes_take_the_real_time_modules_in_order_the_solo_ones_first_and_together(monkeypatch):
    scheduler, (lane0, lane1, fast) = scheduled(monkeypatch, lanes=2, workers=3)
    # one scope: one lane, one after the other (then the next module, given ahead as xdist does)
    assert lane0.given[:2] == [f"{SOLO[0]}::test_a", f"{SOLO[1]}::test_b"]
    assert lane1.given[:2] == ["tests/e2e/test_demo.py::test_one", "tests/e2e/test_demo.py::test_two"]
    assert all(nodeid.startswith(("tests/unit/", "tests/rules/")) for nodeid in fast.given) and fast.given
    assert config_was_not_reordered(scheduler)


def config_was_not_reordered(scheduler: RealtimeScheduling) -> bool:
    return scheduler.config.option.loadscopereorder is False  # xdist would sort the scopes by size


def test_a_lane_never_gets_a_fast_module_while_a_real_time_one_waits(monkeypatch):
    scheduler, (lane0, lane1, fast) = scheduled(monkeypatch, lanes=2, workers=3)
    complete_everything(scheduler, [lane0, lane1, fast])
    every = lane0.given + lane1.given + fast.given
    assert sorted(every) == sorted(COLLECTION)  # each test handed out once
    for lane in (lane0, lane1):
        tiers = [nodeid.split("/")[1] for nodeid in lane.given]
        first_fast = next((i for i, tier in enumerate(tiers) if tier not in ("stack", "e2e")), len(tiers))
        assert all(tier not in ("stack", "e2e") for tier in tiers[first_fast:])  # fast ones only after
    assert not any(nodeid.split("/")[1] in ("stack", "e2e") for nodeid in fast.given)
    assert all(node.shutting_down for node in (lane0, lane1, fast))


def test_one_lane_runs_every_real_time_module_beside_one_fast_worker(monkeypatch):
    scheduler, (lane, fast) = scheduled(monkeypatch, lanes=1, workers=2)
    complete_everything(scheduler, [lane, fast])
    realtime = [nodeid for nodeid in COLLECTION if nodeid.split("/")[1] in ("stack", "e2e")]
    assert [nodeid for nodeid in lane.given if nodeid in realtime] == realtime  # the collection's order


def holder(tmp_path, kind: str) -> tuple[threading.Thread, threading.Event, LaneLock]:
    lock = LaneLock(tmp_path)
    inside = threading.Event()
    thread = threading.Thread(target=lambda: (lock.enter(kind), inside.set()), daemon=True)
    thread.start()
    return thread, inside, lock


def test_a_solo_test_waits_for_the_shared_holders_and_keeps_new_ones_out_until_it_leaves(tmp_path):
    first = LaneLock(tmp_path)
    first.enter("shared")
    _, solo_inside, solo = holder(tmp_path, "solo")
    assert not solo_inside.wait(0.3)  # a shared holder is inside
    _, late_inside, late = holder(tmp_path, "shared")
    assert not late_inside.wait(0.3)  # the waiting solo test holds the turnstile
    first.leave()
    assert solo_inside.wait(10)
    assert not late_inside.wait(0.3)  # the solo test is inside alone
    solo.leave()
    assert late_inside.wait(10)
    late.leave()


def test_shared_holders_are_inside_together(tmp_path):
    one = LaneLock(tmp_path)
    one.enter("shared")
    _, inside, _ = holder(tmp_path, "shared")
    assert inside.wait(10)
    one.leave()


@pytest.mark.parametrize(("nodeid", "kind"), [
    (f"{SOLO[0]}::test_x", "solo"), ("tests/stack/test_calls.py::test_one", "shared"),
    ("tests/unit/test_core.py::test_one", None),
])
def test_which_hold_a_test_takes(nodeid, kind):
    path = conftest.TESTS.parent / nodeid.split("::")[0]
    item = SimpleNamespace(path=path, nodeid=nodeid)
    assert conftest.lane_lock_kind(item) == kind
