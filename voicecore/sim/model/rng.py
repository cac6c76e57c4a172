"""The simulator's deterministic randomness: a seed folded from parts, and a splitmix64 stream.

Owns how ids, delta sizes and failure draws follow from a seed, identically on every platform and Python
version, so a session replays byte for byte. Nothing here reads a clock or the OS's randomness; the seed
comes in from the caller (`SimConfig.seed` mixed with the session index).
"""

from __future__ import annotations

_MASK64 = (1 << 64) - 1
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE62_SQUARED = 62 * 62
_BASE62_PAIRS = tuple(_BASE62[r % 62] + _BASE62[r // 62] for r in range(_BASE62_SQUARED))  # low digit first


def fold_seed(*parts: int | str) -> int:
    """A stable 64-bit seed from parts (FNV-1a; Python's hash() of str changes per process)."""
    h = 0xCBF29CE484222325
    for part in parts:
        data = part.encode() if isinstance(part, str) else int(part).to_bytes(16, "little", signed=True)
        for byte in data + b"\x00":
            h = ((h ^ byte) * 0x100000001B3) & _MASK64
    return h


class SplitMix64:
    """A splitmix64 stream seeded with `fold_seed(*parts)`: tiny, fast enough, and identical on every
    platform and Python version."""

    __slots__ = ("_state",)

    def __init__(self, *parts: int | str) -> None:
        self._state = fold_seed(*parts)

    def u64(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK64
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.u64() % n

    def uniform(self) -> float:
        return self.u64() / 2.0**64

    def token(self, length: int = 21) -> str:
        # Ten base-62 digits per draw (62**10 < 2**64), two at a time (a divmod by 62**2 and a table):
        # ids are a large share of the simulator's work.
        pairs: list[str] = []
        while 2 * len(pairs) < length:
            z = self.u64()
            for _ in range(5):
                z, r = divmod(z, _BASE62_SQUARED)
                pairs.append(_BASE62_PAIRS[r])
        return "".join(pairs)[:length]
