"""Run a command with its stdout and stderr on a pipe this process made, and copy that pipe to our stderr.

    python -m voicecore.stdio_relay -- voicecore up

Why it exists: supervisord, which `voicecore up` runs, writes its programs' output by *opening* /dev/stderr
(voicecore/deploy_templates/supervisord.conf), and that open fails where stderr is something the node may
not or cannot open again:
- a container that runs as a non-root user: the runtime made the stdio pipes as root, and reopening a pipe
  through /proc checks its owner (EACCES: docker, Kubernetes);
- a systemd service whose output goes to the journal: stderr is a socket, which /proc cannot reopen (ENXIO).
Either way supervisord marks every program FATAL and the node never serves. A pipe we create is ours and
can be reopened, so the deploy files (deploy/Dockerfile, deploy/systemd/voicecore.service) start
`voicecore up` through this relay.

Owns only the pipe, the copy and the signals: SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are
passed on to the command (so `voicecore up` drains on SIGTERM exactly as it does without us), and we exit
with its status (128 + N when signal N ended it, as a shell reports it). Knows nothing of voicecore.
The copy goes on until the command has exited and the pipe is quiet or closed, so a busy command never
blocks on a full pipe; a write to our stderr that fails drops that output, never the copy.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
QUIET_AFTER_EXIT_S = 1.0  # a grandchild that outlived the command may keep the pipe open: stop waiting then
CHUNK_BYTES = 65536


def exit_status(returncode: int) -> int:
    """Popen's returncode (-N: signal N) as a process exit status."""
    return 128 - returncode if returncode < 0 else returncode


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError:
            return  # our reader went away: drop the output, keep draining the command's pipe
        view = view[written:]


def relay(command: list[str], out_fd: int = 2) -> int:
    child: subprocess.Popen | None = None
    early: list[int] = []  # signals that came before the command was running: passed on once it is

    def forward(signum, frame):  # noqa: ARG001
        if child is None:
            early.append(signum)
        elif child.returncode is None:
            child.send_signal(signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    read_fd, write_fd = os.pipe()
    try:
        # A process group of its own: a terminal's Ctrl-C reaches us only, and we pass it on once (a second
        # SIGINT would make `voicecore up` stop at once instead of draining).
        child = subprocess.Popen(command, stdout=write_fd, stderr=write_fd, process_group=0)
    except OSError as exc:
        os.close(read_fd)
        print(f"voicecore.stdio_relay: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    finally:
        os.close(write_fd)  # only the command and its children hold the writing end now
    for signum in early:
        child.send_signal(signum)
    try:
        while True:
            exited = child.poll() is not None
            readable, _, _ = select.select([read_fd], [], [], QUIET_AFTER_EXIT_S if exited else 0.5)
            if not readable:
                if exited:
                    break
                continue
            data = os.read(read_fd, CHUNK_BYTES)
            if not data:
                break  # every writer is gone
            _write_all(out_fd, data)
    finally:
        os.close(read_fd)
    return exit_status(child.wait())


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args or args[0].startswith("-"):
        print("usage: python -m voicecore.stdio_relay -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    return relay(args)


if __name__ == "__main__":
    sys.exit(main())
