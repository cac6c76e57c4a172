"""The control bus's sockets: ZeroMQ over ipc endpoints in a private runtime directory.

Owns endpoint names, the runtime directory's permissions and the exclusive-bind rule; message meaning
lives in messages.py. Topology (no broker, so a cancel takes one hop):
  gateway  PUB  events.sock   -> SUB  model, validator (call.started, call.ended, heartbeat)
  gateway  PULL gateway.sock  <- PUSH pacer, model   (heartbeat, stats)
  pacer    PULL pacer.sock    <- PUSH model          (cancel doorbells)
                              <- PUSH gateway        (call.started: wakes an idle pacer at once)
  validator PULL validator.sock <- PUSH model        (gate.open, transcript.delta, transcript.done);
            it also PUSHes heartbeat/stats to gateway.sock and SUBs events.sock (call.ended)
  model    PULL model.sock    <- PUSH validator      (verdict)
  recorder PULL recorder.sock <- PUSH model          (observe.events: live calls' events, dropped when full)
  recorder PUB  observe.sock  -> SUB  console        (observed.events: the same, numbered and stored)
The shared-memory arena is the source of truth for call state; bus messages are doorbells, so a worker
that restarts rebuilds its view from the arena, not from messages it missed.
"""

from __future__ import annotations

import errno
import os
import socket
import time
import stat
from pathlib import Path

import zmq

from voicecore.bus import messages
from voicecore.errors import MisuseError

EVENTS = "events.sock"
GATEWAY_INBOX = "gateway.sock"
PACER_INBOX = "pacer.sock"
VALIDATOR_INBOX = "validator.sock"
RECORDER_INBOX = "recorder.sock"  # the recorder binds it (PULL) for the model worker's observable events
OBSERVE_FEED = "observe.sock"  # the recorder binds it (PUB): numbered events for the console's observers
MODEL_INBOX = "model.sock"  # the model worker binds it (PULL) for the validator's verdicts
DOORBELL = "doorbell.sock"  # unix datagram socket, pacer -> gateway: "the wire rings have news"
ARENA_NAME_FILE = "arena.name"


class BusError(MisuseError, RuntimeError):
    """Misuse or an unusable environment (our side's fault), reported at start-up."""


def ensure_runtime_dir(path: str | Path) -> Path:
    """Create the private runtime directory (0700) or check an existing one is ours and private."""
    directory = Path(path)
    os.umask(0o077)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if info.st_uid != os.geteuid():
        raise BusError(f"runtime dir {directory} is owned by uid {info.st_uid}, not us")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise BusError(f"runtime dir {directory} is accessible by others (mode {stat.S_IMODE(info.st_mode):o}); want 0700")
    return directory


def default_runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    return Path(base) / "voicecore" if base else Path(f"/tmp/voicecore-{os.geteuid()}")


def _path_is_live(path: Path, kind: int) -> bool:
    probe = socket.socket(socket.AF_UNIX, kind)
    try:
        probe.connect(str(path))
        return True
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        raise
    finally:
        probe.close()


def claim_socket_path(path: Path, kind: int = socket.SOCK_STREAM) -> None:
    """Refuse to bind a path a live process serves; remove a stale one left by a crash."""
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise BusError(f"{path} exists and is not a socket")
        if _path_is_live(path, kind):
            raise BusError(f"{path} is bound by a live process; is another stack running in this runtime dir?")
        path.unlink()


class Bus:
    """One process's bus sockets. ``send_*`` never block: a full queue drops and counts (a doorbell)."""

    def __init__(self, runtime_dir: str | Path) -> None:
        self.runtime_dir = Path(runtime_dir)
        self.context = zmq.Context.instance()
        self.sockets: list[zmq.Socket] = []
        self.dropped_sends = 0
        self.rejected = 0

    def _socket(self, kind: int) -> zmq.Socket:
        sock = self.context.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        sock.setsockopt(zmq.MAXMSGSIZE, messages.MAX_MESSAGE_BYTES)
        self.sockets.append(sock)
        return sock

    def bind(self, kind: int, name: str) -> zmq.Socket:
        path = self.runtime_dir / name
        claim_socket_path(path)
        sock = self._socket(kind)
        sock.bind(f"ipc://{path}")
        return sock

    def connect(self, kind: int, name: str, reconnect_max_ms: int = 0) -> zmq.Socket:
        """``reconnect_max_ms``: for a peer that may not run at all, back off its reconnect attempts (every
        100 ms, ZeroMQ's default, doubling up to this) instead of trying ten times a second for ever."""
        sock = self._socket(kind)
        if reconnect_max_ms:
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, reconnect_max_ms)  # read at connect: set before it
        if kind == zmq.SUB:
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(f"ipc://{self.runtime_dir / name}")
        return sock

    def send(self, sock: zmq.Socket, message: messages.Message) -> bool:
        try:
            sock.send(messages.encode(message), zmq.NOBLOCK)
            return True
        except zmq.Again:
            self.dropped_sends += 1
            return False

    def send_all(self, sock: zmq.Socket, encoded: list[bytes]) -> int:
        """Encoded messages (``messages.encode``), in order, in as few bus messages as fit (batches: one
        send instead of one per message, for the receiver one wake-up); a lone message goes as itself. How
        many were sent; the others were dropped and counted, as by ``send``."""
        sent = 0
        for run in messages.batches(encoded):
            try:
                sock.send(run[0] if len(run) == 1 else messages.encode_batch(run), zmq.NOBLOCK)
                sent += len(run)
            except zmq.Again:
                self.dropped_sends += len(run)
        return sent

    def receive_nowait(self, sock: zmq.Socket, limit: int = 1000) -> list[messages.Message]:
        """Everything waiting on ``sock`` (up to ``limit`` bus messages; a batch's messages each), decoded;
        bad messages are counted and dropped."""
        received: list[messages.Message] = []
        for _ in range(limit):
            try:
                raw = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            for decoded in messages.decode_all(raw):
                if isinstance(decoded, messages.Rejected):
                    self.rejected += 1
                    continue
                received.append(decoded)
        return received

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(linger=0)
        self.sockets.clear()


class DoorbellSender:
    """Pacer side of the wake-up datagram: one per tick that produced wire entries, carrying when it rang
    (CLOCK_MONOTONIC ns, 8 bytes little-endian), so the gateway can tell how long its drain came after."""

    def __init__(self, runtime_dir: str | Path) -> None:
        self.path = str(Path(runtime_dir) / DOORBELL)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.failures = 0

    def ring(self, rung_at_ns: int | None = None) -> None:
        stamp = time.monotonic_ns() if rung_at_ns is None else rung_at_ns
        try:
            self.sock.sendto(stamp.to_bytes(8, "little"), self.path)
        except (BlockingIOError, FileNotFoundError, ConnectionRefusedError):
            # The gateway's queue already holds an unread ring (it will drain everything), or it is
            # restarting; either way there is nothing to wait for.
            self.failures += 1

    def close(self) -> None:
        self.sock.close()


def read_doorbells(sock: socket.socket) -> int | None:
    """Every datagram waiting on the gateway's doorbell socket read; the oldest ring's time (None when none
    carried one: a pacer from before the stamp sent one byte)."""
    oldest: int | None = None
    try:
        while True:
            data = sock.recv(64)
            if len(data) == 8:
                stamp = int.from_bytes(data, "little")
                oldest = stamp if oldest is None else min(oldest, stamp)
    except BlockingIOError:
        pass
    return oldest


def bind_doorbell(runtime_dir: str | Path) -> socket.socket:
    path = Path(runtime_dir) / DOORBELL
    claim_socket_path(path, socket.SOCK_DGRAM)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    return sock
