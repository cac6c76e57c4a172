"""How much /dev/shm one node needs for its call slots: the figure operators give `docker run --shm-size`
and a Kubernetes memory-backed emptyDir's sizeLimit (deploy/).

Owns the sizing rule only; the arena's layout, and so its exact size, is arena.py's (`ArenaLayout`). Knows
nothing of containers beyond the spelling of the two units it prints.

The rule: room for two arenas, plus a little headroom, rounded up to 8 MiB.
- Two, not one: when a gateway dies, the standby that takes over (or supervisord's restart) unlinks the dead
  one's arena and creates a fresh one *before* the pacer, the model worker and the validator let go of the
  old mapping (they re-attach when the new name appears: shm/follow.py). An unlinked file that is still
  mapped keeps its tmpfs pages, so for a moment both are charged to /dev/shm; the creator reserves its whole
  file with posix_fallocate, which fails with ENOSPC when they do not fit, and the node stays down.
- Headroom: other small files libraries keep in /dev/shm (POSIX semaphores).
A memory-backed emptyDir is charged to the pod's memory, so the pod's memory limit must hold this too.

    python -m voicecore.shm.sizing --max-calls 256          # one line for people
    python -m voicecore.shm.sizing --max-calls 256 --json   # one JSON object
    VOICECORE_MAX_CALLS=512 python -m voicecore.shm.sizing   # max_calls from the configuration
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from voicecore.shm.arena import ArenaLayout

MIB = 1 << 20
ARENAS_AT_ONCE = 2  # the serving arena and a dead gateway's, still mapped by the workers (module docstring)
HEADROOM_BYTES = 8 * MIB
ROUND_BYTES = 8 * MIB


@dataclasses.dataclass(frozen=True, slots=True)
class ShmSize:
    max_calls: int
    arena_bytes: int  # one arena file, exactly as Arena.create makes it
    shm_bytes: int  # what /dev/shm must hold: ARENAS_AT_ONCE arenas + headroom, rounded up

    @property
    def shm_mib(self) -> int:
        return self.shm_bytes // MIB

    @property
    def docker_shm_size(self) -> str:
        return f"{self.shm_mib}m"  # docker run --shm-size: "m" is MiB

    @property
    def kubernetes_size_limit(self) -> str:
        return f"{self.shm_mib}Mi"

    def as_dict(self) -> dict[str, object]:
        return {"max_calls": self.max_calls, "arena_bytes": self.arena_bytes, "shm_bytes": self.shm_bytes,
                "shm_mib": self.shm_mib, "docker_shm_size": self.docker_shm_size,
                "kubernetes_size_limit": self.kubernetes_size_limit}


def arena_bytes(max_calls: int) -> int:
    """The size of the arena file the gateway creates for ``max_calls`` slots."""
    return ArenaLayout(max_calls=max_calls).size_bytes()


def shm_size(max_calls: int) -> ShmSize:
    one = arena_bytes(max_calls)
    needed = ARENAS_AT_ONCE * one + HEADROOM_BYTES
    return ShmSize(max_calls, one, -(-needed // ROUND_BYTES) * ROUND_BYTES)


def parse_quantity_bytes(text: str) -> int:
    """A Kubernetes quantity (``240Mi``, ``1Gi``, ``250M``, ``1048576``) or a docker size (``240m``) in bytes."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9,
             "T": 10**12, "b": 1, "m": 1 << 20, "g": 1 << 30}
    text = text.strip()
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)].isdigit():
            return int(text[: -len(suffix)]) * units[suffix]
    if text.isdigit():
        return int(text)
    raise ValueError(f"not a size: {text!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voicecore.shm.sizing",
                                     description="/dev/shm a node needs for its call slots (docker --shm-size, "
                                                 "a Kubernetes emptyDir's sizeLimit)")
    parser.add_argument("--max-calls", type=int, metavar="N",
                        help="call slots (default: max_calls from $VOICECORE_MAX_CALLS / --config, else 256)")
    parser.add_argument("--config", help="TOML configuration file (default: $VOICECORE_CONFIG)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    max_calls = args.max_calls
    if max_calls is None:
        from voicecore.config import ConfigError, load_config

        try:
            max_calls = load_config(os.environ, args.config).max_calls
        except ConfigError as exc:
            print(f"voicecore.shm.sizing: {exc}", file=sys.stderr)
            return 2
    try:
        size = shm_size(max_calls)
    except ValueError as exc:
        print(f"voicecore.shm.sizing: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(size.as_dict()))
    else:
        print(f"max_calls {size.max_calls}: one arena is {size.arena_bytes} bytes ({size.arena_bytes / MIB:.1f} MiB); "
              f"/dev/shm needs {size.shm_mib} MiB (two arenas during a gateway takeover, plus headroom): "
              f"docker run --shm-size={size.docker_shm_size}, Kubernetes emptyDir sizeLimit: {size.kubernetes_size_limit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
