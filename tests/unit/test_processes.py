"""voicecore/processes.py: a pid runs or not, a zombie counts as gone, a parent's children."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from voicecore.processes import children_of, pid_alive


def test_this_process_runs_and_no_pid_does_not():
    assert pid_alive(os.getpid())
    assert not pid_alive(None) and not pid_alive(0)
    assert not pid_alive(2**22 + 12345)  # above the kernel's pid_max default


def test_a_child_that_exited_unreaped_is_gone_and_is_still_a_child():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert child.pid in children_of(os.getpid())
        deadline = time.monotonic() + 30
        while pid_alive(child.pid):  # exits, not reaped (no wait yet): a zombie
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        with open(f"/proc/{child.pid}/stat") as stat:
            assert stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        child.wait()
    assert child.pid not in children_of(os.getpid())


def test_cpu_seconds_count_this_process_and_a_reaped_childs_time_goes_to_its_parent():
    from voicecore.processes import cpu_seconds, kernel_cpu_seconds, reaped_children_cpu_seconds

    before = reaped_children_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"],
                   check=True)  # waited for: its 0.3 CPU s are its parent's children's now
    assert reaped_children_cpu_seconds(os.getpid()) - before >= 0.25
    assert cpu_seconds(os.getpid()) >= kernel_cpu_seconds(os.getpid()) >= 0
    assert cpu_seconds(2**22 + 12345) == kernel_cpu_seconds(2**22 + 12345) == reaped_children_cpu_seconds(2**22 + 12345) == 0
