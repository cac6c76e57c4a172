"""The standbys start once the node serves (voicecore/standby_start.py), with real processes: a role's process 0
runs its module at once, a later one only when every role's leader pid file names a live process; and a
standby says it stands by (voicecore/standby.py), which is what a stack waits for before it calls itself whole."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from voicecore import standby
from voicecore.config import load_config
from voicecore.supervise import RUNTIME_FILES, cleanup_runtime

START_TIMEOUT_S = 30.0  # a loaded machine starts Python slowly; nothing here is timed


@pytest.fixture
def module_dir(tmp_path):
    """A module that says how it was run: its __name__ and argv into the file its environment names."""
    package = tmp_path / "mods"
    package.mkdir()
    (package / "says_how.py").write_text(
        "import os, sys\n"
        "from pathlib import Path\n"
        "Path(os.environ['SAYS_HOW_TO']).write_text(__name__ + ' ' + ' '.join(sys.argv))\n"
    )
    return package


def launch(module_dir: Path, runtime_dir: Path, marker: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "VOICECORE_RUNTIME_DIR": str(runtime_dir), "SAYS_HOW_TO": str(marker),
           "PYTHONPATH": os.pathsep.join([str(module_dir), str(Path(__file__).resolve().parents[2])])}
    return subprocess.Popen([sys.executable, "-m", "voicecore.standby_start", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.05)


def announce_every_role(runtime_dir: Path, pid: int, roles=standby.ROLES) -> None:
    for role in roles:
        standby.pid_path(runtime_dir, role).write_text(f"{pid}\n")


def test_process_zero_of_a_role_runs_its_module_at_once_as_python_dash_m_would(tmp_path, module_dir):
    marker = tmp_path / "ran"
    process = launch(module_dir, tmp_path / "run", marker, "pacer", "0", "says_how")
    assert process.wait(START_TIMEOUT_S) == 0, process.stderr.read()
    name, argv0 = marker.read_text().split()
    assert name == "__main__"
    assert argv0.endswith("says_how.py")  # run_module puts the module's path first, as -m does


def test_a_later_process_waits_until_every_role_serves(tmp_path, module_dir):
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir()
    marker = tmp_path / "ran"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    process = launch(module_dir, runtime_dir, marker, "gateway", "1", "says_how")
    try:
        # every role but the pacer serves, and the pacer's pid file names a process that is gone
        announce_every_role(runtime_dir, sleeper.pid, roles=[r for r in standby.ROLES if r != "pacer"])
        standby.pid_path(runtime_dir, "pacer").write_text(f"{dead.pid}\n")
        time.sleep(1.0)
        assert process.poll() is None and not marker.exists(), "started before the pacer served"
        standby.pid_path(runtime_dir, "pacer").write_text(f"{sleeper.pid}\n")
        assert process.wait(START_TIMEOUT_S) == 0, process.stderr.read()
        assert marker.read_text().startswith("__main__ ")
    finally:
        sleeper.kill()
        sleeper.wait()
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_waiting_process_leaves_at_once_on_sigterm(tmp_path, module_dir):
    process = launch(module_dir, tmp_path, tmp_path / "ran", "model", "1", "says_how")
    time.sleep(0.5)  # in its wait: no role serves
    process.terminate()
    assert process.wait(START_TIMEOUT_S) == -15
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("args", [["pacer"], ["pacer", "one", "says_how"], ["pacer", "0", "says_how", "extra"]])
def test_a_wrong_command_line_says_how_to_call_it(tmp_path, module_dir, args):
    process = launch(module_dir, tmp_path, tmp_path / "ran", *args)
    assert process.wait(START_TIMEOUT_S) != 0
    assert "usage: python -m voicecore.standby_start ROLE PROCESS_NUM MODULE" in process.stderr.read()


def test_a_standby_says_it_stands_by_until_it_takes_over(tmp_path):
    serving = standby.Leadership(tmp_path, "validator")
    assert serving.try_acquire()
    serving.announce()
    assert standby.standbys_missing(tmp_path) == list(standby.ROLES)
    waiting = standby.Leadership(tmp_path, "validator")
    took_over = threading.Event()

    def wait_for_the_role() -> None:  # not the main thread: Leadership.wait looks at stopping() every poll_s
        if waiting.wait(poll_s=0.05):
            took_over.set()

    thread = threading.Thread(target=wait_for_the_role, daemon=True)
    thread.start()
    try:
        wait_for(lambda: standby.standby_pid(tmp_path, "validator") == os.getpid(), START_TIMEOUT_S, "standby file")
        assert "validator" not in standby.standbys_missing(tmp_path)
        assert not took_over.is_set()
        serving.release()
        wait_for(took_over.is_set, START_TIMEOUT_S, "takeover")
        assert standby.standby_pid(tmp_path, "validator") is None  # it serves now: no standby until one starts
        assert "validator" in standby.standbys_missing(tmp_path)
    finally:
        thread.join(START_TIMEOUT_S)
        waiting.release()


def test_a_standby_file_naming_a_gone_or_killed_process_is_no_standby(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    killed.kill()  # not reaped yet: a zombie, as a killed worker is until supervisord notices
    wait_for(lambda: Path(f"/proc/{killed.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
             START_TIMEOUT_S, "zombie")
    try:
        for role in standby.ROLES:
            standby.standby_path(tmp_path, role).write_text(f"{os.getpid()}\n")
        assert standby.standbys_missing(tmp_path) == []
        standby.standby_path(tmp_path, "pacer").write_text(f"{gone.pid}\n")
        standby.standby_path(tmp_path, "model").write_text(f"{killed.pid}\n")
        assert standby.standbys_missing(tmp_path) == ["pacer", "model"]
    finally:
        killed.wait()


def test_the_nodes_clean_up_removes_the_standby_files(tmp_path):
    assert {f"leader-{role}.standby" for role in standby.ROLES} <= set(RUNTIME_FILES)
    for role in standby.ROLES:
        standby.standby_path(tmp_path, role).write_text("1\n")
    cleanup_runtime(dataclasses.replace(load_config({}), runtime_dir=str(tmp_path)))
    assert not any(standby.standby_path(tmp_path, role).exists() for role in standby.ROLES)
