"""Prometheus histograms kept by a process, and the flat stats keys that carry them to the gateway.

Owns the state of one histogram (cumulative bucket counts, sum and count since it was created, with
Prometheus' `le` semantics: a bucket counts the observations less than or equal to its upper bound) and
the key convention that lets a histogram travel in a process's Stats message, which is a flat dict of
floats (voicecore/bus/messages.py `Stats`). Pure: no clock, no I/O; the caller measures and observes.

The flat keys are the exposition text's own sample names and labels, without the `voicecore_` prefix:

    <family>_bucket{le="0.005"}                   cumulative count of observations <= 0.005
    <family>_bucket{outcome="ok",le="+Inf"}       ... for one label set; `le` comes last
    <family>_sum{}, <family>_count{outcome="ok"}  sum and count (empty braces when there are no labels)

A key is one of these only when it parses as such whole (parse_flat_key): braces are never part of the
processes' other stats names. voicecore/metrics_text.py renders them as the histogram family
`voicecore_<family>`; in the JSON form of /metrics they stay these keys.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

SUFFIXES = ("bucket", "sum", "count")
_FAMILY = r"[a-z][a-z0-9_]*"
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FLAT_KEY = re.compile(rf"^(?P<family>{_FAMILY})_(?P<suffix>bucket|sum|count)\{{(?P<labels>.*)\}}\Z")
_BOUND = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|\+Inf")  # a Go float, or +Inf
_LABEL = re.compile(r'(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"(?:,|\Z)')


class Histogram:
    """Cumulative bucket counts since creation. `bounds` are the finite upper bounds in the metric's base
    unit, strictly increasing; the `+Inf` bucket is always there (a trailing infinity in `bounds` is
    accepted and dropped). Observing is a bisect and three additions: cheap enough for a 5 ms tick."""

    __slots__ = ("bounds", "_in_bucket", "sum", "count")

    def __init__(self, bounds: Iterable[float]) -> None:
        finite = [float(b) for b in bounds]
        if finite and finite[-1] == math.inf:
            finite.pop()
        if any(math.isnan(b) or math.isinf(b) for b in finite):
            raise ValueError(f"histogram bounds must be finite numbers: {finite}")
        if any(b >= c for b, c in zip(finite, finite[1:])):
            raise ValueError(f"histogram bounds must increase strictly: {finite}")
        self.bounds: tuple[float, ...] = tuple(finite)
        self._in_bucket = [0] * (len(finite) + 1)  # per bucket, not cumulative; the last is (bounds[-1], +Inf]
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """One observation. A NaN is not a measurement: ignored (it would make the sum NaN for good)."""
        if value != value:
            return
        # bisect_left: the first bound >= value, so a value equal to a bound counts in that bound's bucket.
        self._in_bucket[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it) per bucket, ending with (inf, count)."""
        running, out = 0, []
        for bound, n in zip((*self.bounds, math.inf), self._in_bucket):
            running += n
            out.append((bound, running))
        return out

    def flat(self, family: str, labels: Mapping[str, str] | None = None) -> dict[str, float]:
        """This histogram as flat stats keys (the module docstring's convention), values as floats."""
        labels = dict(labels or {})
        values = {flat_key(family, "bucket", {**labels, "le": format_bound(bound)}): float(n)
                  for bound, n in self.cumulative()}
        values[flat_key(family, "sum", labels)] = float(self.sum)
        values[flat_key(family, "count", labels)] = float(self.count)
        return values


class FlatKey(NamedTuple):
    family: str
    suffix: str  # "bucket", "sum" or "count"
    labels: tuple[tuple[str, str], ...]  # in key order; a bucket's `le` among them


def format_bound(bound: float) -> str:
    """An `le` value as Prometheus' Go clients write it: `0.005`, `1`, `+Inf`."""
    if math.isinf(bound):
        return "+Inf" if bound > 0 else "-Inf"
    return str(int(bound)) if bound == int(bound) and abs(bound) < 1e15 else repr(float(bound))


def flat_key(family: str, suffix: str, labels: Mapping[str, str]) -> str:
    if not re.fullmatch(_FAMILY, family) or suffix not in SUFFIXES:
        raise ValueError(f"not a histogram family and suffix: {family!r} {suffix!r}")
    for name in labels:
        if not _LABEL_NAME.fullmatch(name):
            raise ValueError(f"not a label name: {name!r}")
    rendered = ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items())
    return f"{family}_{suffix}{{{rendered}}}"


def parse_flat_key(key: str) -> FlatKey | None:
    """The parts of a flat histogram key, or None when `key` is not one (any other stat).

    A bucket must carry `le` (a float or `+Inf`) as its last label, `_sum` and `_count` must not carry it;
    no label twice."""
    match = _FLAT_KEY.match(key)
    if match is None:
        return None
    text, labels, position = match["labels"], [], 0
    while position < len(text):
        label = _LABEL.match(text, position)
        if label is None or label.start() != position:
            return None
        labels.append((label["name"], _unescape(label["value"])))
        position = label.end()
    if text.endswith(","):
        return None
    names = [name for name, _ in labels]
    if len(set(names)) != len(names):
        return None
    if match["suffix"] == "bucket":
        if not names or names[-1] != "le" or not _is_bound(labels[-1][1]):
            return None
    elif "le" in names:
        return None
    return FlatKey(match["family"], match["suffix"], tuple(labels))


def bound_of(le: str) -> float:
    """An `le` label's value as a float (`+Inf` included)."""
    return float(le.replace("Inf", "inf"))


def _is_bound(le: str) -> bool:
    return _BOUND.fullmatch(le) is not None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value)
