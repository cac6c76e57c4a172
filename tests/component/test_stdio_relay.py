"""voicecore/stdio_relay.py: the pipe that lets supervisord reopen /dev/stderr under docker, Kubernetes and
systemd, the signals it passes on, and the exit status it gives back. Real processes, no sleeps."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from voicecore.stdio_relay import exit_status
from waiting import wait_until

RELAY = [sys.executable, "-m", "voicecore.stdio_relay", "--"]
# What supervisord does with stdout_logfile=/dev/stderr (supervisor/loggers.py FileHandler).
REOPEN_STDERR = "open('/dev/stderr', 'ab').write(b'reopened /dev/stderr\\n')"


def read_socket(sock: socket.socket, until: bytes, timeout_s: float = 20.0) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    while until not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_socket_stderr_cannot_be_reopened_but_the_relays_pipe_can():
    """systemd's journal is a socket: opening /dev/stderr fails (ENXIO), through the relay it works."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        direct = subprocess.run([sys.executable, "-c", REOPEN_STDERR], stdout=subprocess.DEVNULL, stderr=theirs.fileno())
        assert direct.returncode != 0
        relayed = subprocess.Popen([*RELAY, sys.executable, "-c", REOPEN_STDERR], stdout=subprocess.DEVNULL,
                                   stderr=theirs.fileno())
        theirs.close()
        output = read_socket(ours, b"reopened /dev/stderr\n")
        assert relayed.wait(20) == 0
    assert b"reopened /dev/stderr\n" in output


REPO = Path(__file__).resolve().parents[2]


def others_may_use(path: Path, mode: int) -> bool:
    """Every directory on the way searchable by any user, and the file's ``mode`` bits (0o004 read, 0o005 read
    and execute) granted to any user."""
    path = path.resolve()
    return all(parent.stat().st_mode & 0o001 for parent in path.parents) and path.stat().st_mode & mode == mode


def python_for_another_user() -> str | None:
    """A Python >= 3.11 that a user other than us can run, and that finds voicecore (PYTHONPATH=REPO)."""
    if not others_may_use(REPO / "voicecore" / "stdio_relay.py", 0o004):
        return None
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if not candidate or not Path(candidate).exists() or not others_may_use(Path(candidate), 0o005):
            continue
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info >= (3, 11))"], capture_output=True, text=True)
        if probe.stdout.strip() == "True":
            return str(Path(candidate).resolve())
    return None


def test_a_pipe_made_by_root_cannot_be_reopened_by_another_user_but_the_relays_pipe_can():
    """A non-root container's stdio pipes belong to root (EACCES); the relay's pipe belongs to the node."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the command as another user")
    python = python_for_another_user()
    if python is None:
        pytest.skip("no Python 3.11 that another user may run, or the checkout is private to us")
    setpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", f"PYTHONPATH={REPO}", python]
    direct = subprocess.run([*setpriv, "-c", REOPEN_STDERR], capture_output=True, timeout=30)
    assert direct.returncode != 0 and b"PermissionError" in direct.stderr and b"/dev/stderr" in direct.stderr
    relayed = subprocess.run([*setpriv, "-m", "voicecore.stdio_relay", "--", python, "-c", REOPEN_STDERR],
                             capture_output=True, timeout=30)
    assert relayed.returncode == 0, relayed.stderr
    assert b"reopened /dev/stderr\n" in relayed.stderr


CHILD = textwrap.dedent("""
    import os, signal, sys, time
    got = []
    def on(signum, frame):
        got.append(signum)
        print("signal", signal.Signals(signum).name, flush=True)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on)
    print("ready", os.getpgrp(), flush=True)
    deadline = time.monotonic() + 30
    while signal.SIGTERM not in got and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(0 if signal.SIGTERM in got else 9)
""")


class Relayed:
    """The relay in a session of its own (so a signal to its group cannot reach pytest), its output in a file."""

    def __init__(self, tmp_path, code: str):
        self.log = tmp_path / "relay.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([*RELAY, sys.executable, "-c", code], stdout=out, stderr=out,
                                            start_new_session=True)

    def output(self) -> str:
        return self.log.read_text()

    def wait_for(self, text: str) -> str:
        return wait_until(lambda: text in self.output() and self.output(), 30, f"{text!r} from the command",
                          detail=self.output)


def test_sigterm_is_passed_on_and_the_commands_status_comes_back(tmp_path):
    relayed = Relayed(tmp_path, CHILD)
    relayed.wait_for("ready")
    relayed.process.send_signal(signal.SIGTERM)
    assert relayed.process.wait(30) == 0
    assert "signal SIGTERM" in relayed.output()


def test_a_terminals_ctrl_c_reaches_the_command_once(tmp_path):
    """Ctrl-C signals the terminal's whole foreground group; the command has a group of its own, so it gets the
    SIGINT once, from the relay (a second one would make `voicecore up` stop at once instead of draining)."""
    relayed = Relayed(tmp_path, CHILD)
    child_group = int(relayed.wait_for("ready").split("ready", 1)[1].split()[0])
    assert child_group != os.getpgid(relayed.process.pid)
    os.killpg(relayed.process.pid, signal.SIGINT)  # the relay leads its session's group: what a terminal hits
    relayed.wait_for("signal SIGINT")
    relayed.process.send_signal(signal.SIGTERM)
    assert relayed.process.wait(30) == 0
    assert relayed.output().count("signal SIGINT") == 1


@pytest.mark.parametrize(("code", "status"), [("import sys; sys.exit(3)", 3),
                                              ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9)])
def test_exit_status(code, status):
    assert subprocess.run([*RELAY, sys.executable, "-c", code], timeout=30).returncode == status


def test_exit_status_of_popen_return_codes():
    assert (exit_status(0), exit_status(1), exit_status(-15)) == (0, 1, 143)


def test_a_missing_command_and_no_command():
    assert subprocess.run([*RELAY, "/nonexistent/voicecore"], capture_output=True, timeout=30).returncode == 127
    assert subprocess.run(RELAY, capture_output=True, timeout=30).returncode == 2


def test_a_grandchild_holding_the_pipe_does_not_keep_the_relay_waiting(tmp_path):
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print('grandchild', p.pid, flush=True)")
    started = time.monotonic()
    done = subprocess.run([*RELAY, sys.executable, "-c", code], capture_output=True, timeout=30)
    try:
        assert done.returncode == 0
        assert time.monotonic() - started < 20  # QUIET_AFTER_EXIT_S after the command exited, not the grandchild's 60 s
    finally:
        os.kill(int(done.stderr.split()[1]), signal.SIGKILL)
