"""voicecore.priority.priority_raised: SCHED_FIFO (or a lower nice value) for the calling thread during a
block, not for the threads it starts, and the thread's own policy and nice value afterwards. Run without
CAP_SYS_NICE, nothing is granted and the first test checks only that nothing changed."""

from __future__ import annotations

import os
import threading

from voicecore.priority import SIMULATOR_RT_PRIORITY, priority_raised


def _policy() -> int:
    return os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK


def _run_in_thread(read):
    seen = []
    thread = threading.Thread(target=lambda: seen.append(read()))
    thread.start()
    thread.join()
    return seen[0]


def test_the_block_runs_ahead_its_threads_do_not_and_the_thread_gets_its_priority_back():
    before = (_policy(), os.sched_getparam(0).sched_priority, os.nice(0))
    with priority_raised(fifo_priority=SIMULATOR_RT_PRIORITY, nice=-10) as granted:
        inside = (_policy(), os.sched_getparam(0).sched_priority, os.nice(0))
        started_inside = _run_in_thread(lambda: (_policy(), os.nice(0)))
    assert (_policy(), os.sched_getparam(0).sched_priority, os.nice(0)) == before
    if granted == "SCHED_FIFO":
        assert inside[:2] == (os.SCHED_FIFO, SIMULATOR_RT_PRIORITY)
        # a worker thread, a synthesizer: not ahead of the stack (SCHED_RESET_ON_FORK: SCHED_OTHER at nice 0,
        # whatever nice value the thread had; a test worker of the fast tiers runs at nice 10 beside the lanes)
        assert started_inside == (os.SCHED_OTHER, 0)
    elif granted.startswith("nice"):
        assert inside[2] == -10 and inside[:2] == before[:2]
    else:
        assert granted == "normal" and inside == before


def test_the_priority_comes_back_when_the_block_raises():
    before = (_policy(), os.nice(0))
    try:
        with priority_raised(fifo_priority=SIMULATOR_RT_PRIORITY, nice=-10):
            raise KeyError("the calls failed")
    except KeyError:
        pass
    assert (_policy(), os.nice(0)) == before
