"""Following the gateway's arena from a worker: attach to the one named in the runtime dir, and notice
when a restarted gateway replaced it.

Owns only the attach/re-attach decision shared by every worker; what a worker does on a change (drop its
sessions, rebuild its pacer scratch) stays in that worker.
"""

from __future__ import annotations

import logging
from pathlib import Path

from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.shm.arena import Arena, ArenaError

log = logging.getLogger("voicecore.shm")


class ArenaFollower:
    def __init__(self, runtime_dir: str | Path, shm_dir: str) -> None:
        self.name_file = Path(runtime_dir) / ARENA_NAME_FILE
        self.shm_dir = shm_dir
        self.arena: Arena | None = None
        self.name = ""

    def poll(self) -> tuple[Arena | None, bool]:
        """(the arena to use or None, whether it changed since the last poll)."""
        try:
            name = self.name_file.read_text().strip()
        except FileNotFoundError:
            return self.arena, False  # the gateway is restarting or stopping: keep what we have
        if name == self.name and self.arena is not None:
            return self.arena, False
        self.close()
        try:
            self.arena = Arena.attach(name, directory=self.shm_dir)
        except (ArenaError, FileNotFoundError) as exc:
            log.warning("cannot attach arena %s: %s", name, exc)
            return None, True
        self.name = name
        log.info("attached arena %s", name)
        return self.arena, True

    def close(self) -> None:
        if self.arena is not None:
            self.arena.close()
        self.arena = None
        self.name = ""
