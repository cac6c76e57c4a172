"""Capacity search: the largest number of concurrent calls whose run met every SLO.

Pure: SLO checks read a run's report (the dict bench/run.py builds on callreport.summarize, same key
names); the search decides the next call count from the verdicts so far. No clock, no processes, so it
is unit-tested on synthetic measurements (tests/unit/test_bench_capacity.py).

Search: double from `start` until a run breaks an SLO (or `max_calls` is reached), then bisect between
the last good and the first bad count until they are `resolution` apart: a number of calls, or a share of
the last good count ("2%": the bracket is within 2% of its lower bound, so a 60-call system and a 600-call
one are found to the same relative precision). A run below `start` is only tried when `start` itself fails
(bisection between 0 and `start`). The bench repeats a search (`--repeat`) and reports the median and the
range (capacity_summary).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


def parse_resolution(text: str | int | float) -> tuple[int, float]:
    """"10" -> (10, 0.0): stop when the bracket is 10 calls wide; "2%" -> (1, 0.02): within 2% of the
    last good count (and at least 1 call). Raises ValueError on anything else."""
    value = str(text).strip()
    if value.endswith("%"):
        share = float(value[:-1]) / 100.0
        if not 0.0 < share < 1.0:
            raise ValueError(f"resolution {text!r}: a percentage must be above 0 and below 100")
        return 1, share
    calls = int(value)
    if calls < 1:
        raise ValueError(f"resolution {text!r}: need at least 1 call")
    return calls, 0.0


def capacity_summary(capacities: list[int]) -> dict:
    """Repeated searches of one system: the median (the figure quoted), every search's result, the range."""
    if not capacities:
        return {"capacity_calls": 0, "capacity_calls_runs": [], "capacity_calls_range": [0, 0]}
    median = statistics.median(capacities)
    return {"capacity_calls": int(median) if median == int(median) else median,
            "capacity_calls_runs": list(capacities), "capacity_calls_range": [min(capacities), max(capacities)]}


@dataclass(frozen=True, slots=True)
class Slo:
    """The service levels a run must meet, the same for every system (defaults and flags:
    docs/how-to/run-the-bench.md#options)."""

    lateness_p99_ms: float = 5.0  # frames' lateness against the carrier's playout clock (voicecore/callreport.py)
    underruns_audio_available: int = 0  # playout gaps while the model had already sent the audio (both systems)
    stale_frames: int = 0
    bargein_to_clear_p99_ms: float = 20.0
    calls_failed: int = 0  # calls that did not complete cleanly (webhook refused, stream closed, errors)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


def slo_violations(report: dict, slo: Slo) -> list[str]:
    """Every SLO the run broke, as readable sentences; [] when it held."""
    broken = []
    lateness = report.get("lateness_ms", {}).get("p99", 0.0)
    if lateness > slo.lateness_p99_ms:
        broken.append(f"lateness p99 {lateness:.2f} ms > {slo.lateness_p99_ms:g} ms")
    underruns = report.get("underruns_audio_available", report.get("underruns", 0))
    if underruns > slo.underruns_audio_available:
        broken.append(f"{underruns} underruns with audio available > {slo.underruns_audio_available}")
    stalled = report.get("underruns_harness_stalled", 0)
    if stalled > slo.underruns_audio_available:  # not the stack's, but the level is not shown to hold either
        broken.append(f"{stalled} underruns while the load generator itself stalled (load-bound) > {slo.underruns_audio_available}")
    stale = report.get("stale_frames", 0)
    if stale > slo.stale_frames:
        broken.append(f"{stale} stale frames > {slo.stale_frames}")
    decision = report.get("bargein_measured_from") == "decision"
    bargein = report.get("gateway_bargein_decision_to_clear_ms" if decision else "bargein_to_clear_ms", {})
    if bargein.get("count", 0) and bargein.get("p99", 0.0) > slo.bargein_to_clear_p99_ms:
        what = "barge-in decision -> clear" if decision else "barge-in -> clear"
        broken.append(f"{what} p99 {bargein['p99']:.2f} ms > {slo.bargein_to_clear_p99_ms:g} ms")
    failed = report.get("calls", 0) - report.get("calls_completed", report.get("calls", 0))
    if failed > slo.calls_failed:
        broken.append(f"{failed} calls did not complete > {slo.calls_failed}")
    return broken


LOAD_SATURATED = 0.9  # of the load side's CPUs: above it the load generator's own delays reach the figures


def load_saturated(report: dict) -> bool:
    """Whether the load side (carrier and model simulators) ran its CPUs nearly full in this run: its own
    queueing then shows up in the carrier's arrival stamps, so an SLO the run broke may be the load
    generator's and not the stack's."""
    cpus = report.get("load_cpus") or 1
    return report.get("load_cpu_fraction", 0.0) >= LOAD_SATURATED * cpus


LOAD_BOUND_CORE = 0.8  # of one core: a load-side process busier than this delays its own arrival stamps


def load_process_cpu(cpu_s_by_pid: dict[int, float], model_sim_pid: int | None, window_s: float,
                     kernel_s_by_pid: dict[int, float] | None = None) -> dict:
    """Each load-side process's CPU over the window, in cores (CPU seconds / wall seconds): the carrier
    load processes in pid order, the model simulator apart, and the busiest of them all. Each is one
    event loop on one thread, so 1.0 is all it can use: a whole core. ``kernel_s_by_pid``: the system
    time within it, reported for the carrier processes as ``carrier_kernel`` (socket writes and reads; on
    loopback a write also runs the receiver's side of TCP, so part of it is the stack's network cost)."""
    if window_s <= 0:
        return {"carrier": [], "carrier_kernel": [], "model_sim": None, "max": 0.0}
    carrier_pids = [pid for pid in sorted(cpu_s_by_pid) if pid != model_sim_pid]
    carrier = [round(cpu_s_by_pid[pid] / window_s, 3) for pid in carrier_pids]
    kernel = kernel_s_by_pid or {}
    carrier_kernel = [round(kernel.get(pid, 0.0) / window_s, 3) for pid in carrier_pids]
    model_sim = (round(cpu_s_by_pid[model_sim_pid] / window_s, 3)
                 if model_sim_pid is not None and model_sim_pid in cpu_s_by_pid else None)
    busiest = max(carrier + ([model_sim] if model_sim is not None else []), default=0.0)
    return {"carrier": carrier, "carrier_kernel": carrier_kernel, "model_sim": model_sim, "max": busiest}


def load_bound(report: dict) -> bool:
    """Whether a load-side process (a carrier load process or the model simulator) used more than
    LOAD_BOUND_CORE of its core in this run. Its own queueing then reaches the arrival stamps the figures
    are made of, so a broken SLO cannot be called the stack's: the run is load-bound."""
    return report.get("load_process_cpu", {}).get("max", 0.0) > LOAD_BOUND_CORE


def slo_verdict(report: dict, slo: Slo) -> str:
    """Whose account a run's SLOs are on: "held" (every SLO met); "load_bound" (an SLO broke while the load
    side was busy enough to be the cause: load_bound or load_saturated); "harness_stalled" (the only SLO
    broken is the underruns inside the load generator's own stalls, when its process got no CPU on a
    shared machine: nothing is shown against the stack); "broken_by_stack" (an SLO broke with the load
    side clear)."""
    if not slo_violations(report, slo):
        return "held"
    if load_bound(report) or load_saturated(report):
        return "load_bound"
    if not slo_violations({**report, "underruns_harness_stalled": 0}, slo):
        return "harness_stalled"
    return "broken_by_stack"


def capacity_load_bound(runs: list[dict], search: "CapacitySearch") -> bool:
    """True when the smallest count that broke ran with the load side saturated (all its CPUs nearly full,
    or one load process above LOAD_BOUND_CORE of its core): the capacity found is a lower bound of the
    stack's, set by the load generator."""
    if search.bad is None:
        return False
    broken = [r for r in runs if r.get("calls") == search.bad]
    return bool(broken) and (load_saturated(broken[-1]) or load_bound(broken[-1]))


@dataclass(slots=True)
class CapacitySearch:
    """Doubling then bisection. Call next_calls() for the next count to run, record() its verdict."""

    start: int = 25
    max_calls: int = 1024
    resolution: int = 10  # stop when the first bad count is at most this far above the last good one ...
    relative: float = 0.0  # ... or at most this share of the last good one above it (whichever is larger)
    good: int = 0  # largest count that held (0: none yet)
    bad: int | None = None  # smallest count that broke (None: none yet)
    history: list[tuple[int, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.start < 1 or self.max_calls < self.start or self.resolution < 1 or not 0.0 <= self.relative < 1.0:
            raise ValueError("need 1 <= start <= max_calls, resolution >= 1 and 0 <= relative < 1")

    @property
    def width(self) -> int:
        """How wide the bracket (last good, first bad) may be when the search stops."""
        return max(self.resolution, math.floor(self.relative * self.good)) if self.good else self.resolution

    def next_calls(self) -> int | None:
        """The next call count to run, or None when the search is over."""
        if self.bad is None:
            if not self.history:
                return self.start
            if self.good >= self.max_calls:
                return None
            return min(self.max_calls, self.good * 2)
        if self.bad - self.good <= self.width or self.bad <= 1:
            return None
        return (self.good + self.bad) // 2

    def record(self, calls: int, passed: bool) -> None:
        self.history.append((calls, passed))
        if passed:
            # A pass above a recorded failure means the measurement is noisy: trust the failure,
            # keep `good` below `bad` so the search still ends.
            if self.bad is None or calls < self.bad:
                self.good = max(self.good, calls)
        else:
            self.bad = calls if self.bad is None else min(self.bad, calls)
            if self.good >= self.bad:
                self.good = 0 if not any(ok and c < self.bad for c, ok in self.history) else max(
                    c for c, ok in self.history if ok and c < self.bad)

    @property
    def done(self) -> bool:
        return self.next_calls() is None

    @property
    def capacity(self) -> int:
        """The largest count that held (0 if none did)."""
        return self.good

    @property
    def capped(self) -> bool:
        """True when max_calls held: the real capacity may be higher."""
        return self.bad is None and self.good >= self.max_calls
