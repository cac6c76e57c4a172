"""Latency summaries: a bounded log of samples and the percentiles reports quote.

Owns percentile arithmetic for every report (demo, bench, /metrics) so the figures are computed one way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; 0.0 for an empty sequence."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def percentile_or_none(values: Sequence[float], q: float) -> float | None:
    """:func:`percentile`, but None for an empty sequence: for figures where "no samples" must not read as 0."""
    if not values:
        return None
    return percentile(values, q)


def summary(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), digits),
        "p99": round(percentile(values, 99), digits),
        "p999": round(percentile(values, 99.9), digits),
        "max": round(max(values), digits) if values else 0.0,
        "count": len(values),
    }


class LatencyLog:
    """Samples in nanoseconds, keeping the newest ``capacity`` (a ring), summarised in milliseconds."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self.samples_ns: list[int] = []
        self.next_index = 0
        self.total = 0

    def add_ns(self, value_ns: int) -> None:
        self.total += 1
        if len(self.samples_ns) < self.capacity:
            self.samples_ns.append(value_ns)
        else:
            self.samples_ns[self.next_index] = value_ns
            self.next_index = (self.next_index + 1) % self.capacity

    def summary_ms(self) -> dict[str, float]:
        return summary([v / 1e6 for v in self.samples_ns])
