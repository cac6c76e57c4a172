"""/metrics in the Prometheus text exposition format (version 0.0.4), and when to serve it.

Owns turning the gateway's metrics dict (the JSON `GET /metrics` answers by default) into exposition text,
and the content negotiation that picks text or JSON. Pure: a dict in, text out; no sockets, no clock. It
must not know where the figures come from: the gateway builds the dict, the workers' stats arrive over the
bus.

The dict's shape (workers/gateway/main.py `Gateway.metrics`):

    {"gateway": {name: number, ...},                     # the gateway's own counters and gauges
     "bargein_decision_to_clear_ms": {"p50", "p99", "p999", "max", "count"},
     "workers": {"pacer": {name: number, ...}, "model": {...}, "validator": {...}}}

Names: `voicecore_<process>_<name>` (histograms and aliases: see below), snake_case, anything outside
[a-z0-9_] replaced by `_`. The gateway's latency summary becomes
`voicecore_gateway_bargein_decision_to_clear_ms`.

Types, by these rules in this order (the workers report cumulative event counts since the process started,
plus a few levels):
1. Latency figures are gauges with a `quantile` label. A top-level summary dict ({"p50", "p99", "p999",
   "max", "count"}) and a worker's flat keys `<base>_p<digits>_ms`, `<base>_max_ms`, `<base>_min_ms`
   with `<base>_count` (the pacer's `tick_lateness_p50_ms`, ...; only when a `_p<digits>_ms` key of that
   base exists) become one family `<base>_ms`: p50 -> quantile="0.5", p99 -> "0.99", p999 -> "0.999",
   max -> "1", min -> "0"; the count of samples becomes the gauge `<base>_ms_count` (the gateway's is
   the size of a bounded window, not a running total). Not `summary`: the processes keep no sum.
2. Any other name ending in `_ms`, or starting with `active_` (the model worker's sums over its live
   sessions, which fall when calls end), or listed in `GAUGES` below, is a gauge: a level, not a count.
3. Everything else is a monotonic count: a `counter`, named with a `_total` suffix (not doubled when the
   name already ends in `_total`). A new stat that can go down must be added to `GAUGES`; a gauge whose
   name ends in `_total` gets another name in `RENAMED` (else `_gauge` is appended).

Histograms (Prometheus' own: `_bucket{le=...}` cumulative since the process started, `_sum`, `_count`,
base unit seconds) travel in a process's flat dict as keys that are their exposition sample names and labels
without the prefix (voicecore/prom_histogram.py, which also keeps them):

    'pacer_lateness_seconds_bucket{le="0.0005"}': 1490.0, ..., 'pacer_lateness_seconds_bucket{le="+Inf"}': 1500.0,
    'pacer_lateness_seconds_sum{}': 0.031, 'pacer_lateness_seconds_count{}': 1500.0,
    'tool_duration_seconds_bucket{outcome="ok",le="0.5"}': 3.0, ..., 'tool_duration_seconds_count{outcome="ok"}': 4.0

Such keys (prom_histogram.parse_flat_key; no other stat has braces) are taken before rules 1-3 and become the
histogram family `voicecore_<family>`, not process-prefixed: the family name is the reporter's choice, and a
family two processes report is written once (the first: the gateway, then the workers by name). A series is
written only when it is whole and consistent (a `+Inf` bucket, buckets that do not decrease, `_sum`, and
`_count` equal to the `+Inf` bucket); HELP comes from `HISTOGRAM_HELP`. The families reported:
`voicecore_pacer_lateness_seconds` (pacer), `voicecore_bargein_clear_seconds` (gateway),
`voicecore_tool_duration_seconds{outcome="ok"|"error"}` (model worker).

Aliases: a few figures are also written under a Prometheus-convention name without the process
(`ALIASES`), next to their `voicecore_<process>_<name>` family, which stays: `voicecore_calls_active`
(the gateway's `calls_active`) and `voicecore_gate_rejections_total` (the model worker's `gate_rejections`).

Values: ints and floats as Go's strconv would print them (`NaN`, `+Inf`, `-Inf` spelled out), booleans
as 1 and 0; strings, lists and other non-numbers are left out. A name that two keys map to is written
once (the first), as the format forbids a family twice.

Spec: https://prometheus.io/docs/instrumenting/exposition_formats/ (text format 0.0.4).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import math
import numbers
import re
from collections.abc import Iterable, Mapping

from voicecore import prom_histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "voicecore"

# Rule 2's list: per-process levels that can go down. Names as the processes report them.
GAUGES: frozenset[str] = frozenset({
    "pid",               # every process: a new value means a restart
    "calls",             # model worker: live sessions
    "calls_active",      # gateway and pacer: calls in a slot now
    "connections_pending",  # gateway: connections not yet in a call (no request served, no stream start)
    "calls_talking",     # pacer: calls with audio queued in the carrier's buffer now
    "gates_live",        # validator: gates open now
    "knowledge_loaded",  # validator: 1 when a knowledge base is loaded
    "knowledge_snippets",
    "knowledge_numbers",
    "underruns_total",   # pacer: summed over the slots' counters, which restart when a slot is reused
    "draining",          # gateway: 1 while the node drains (refuses new calls, live ones go on)
    "drain_started_at",  # gateway: unix time the drain was asked for (0: not draining)
    "drain_deadline_at",  # gateway: unix time live calls are ended at (0: not draining)
    "drain_remaining_s",  # gateway: seconds to that deadline
    "drain_streams_awaited",  # gateway: calls answered before the drain whose stream has not started yet
    "tool_processes",    # model worker: processes of its tool pool up now
    "tool_processes_busy",  # model worker: of them, running a tool now
})
# A gauge is never named `..._total` (the suffix says counter), and the pacer's `underruns_total` would
# take the name of its cumulative `underruns` counter: exported names of such gauges.
RENAMED: dict[str, str] = {"underruns_total": "slot_underruns"}

# Prometheus-convention names (after the prefix) for figures a process reports under its own name, which is
# still written too: (process, key) -> (name, type, HELP).
ALIASES: dict[tuple[str, str], tuple[str, str, str]] = {
    ("gateway", "calls_active"): ("calls_active", "gauge", "Calls in a slot now (the gateway's count)."),
    ("model", "gate_rejections"): (
        "gate_rejections_total", "counter",
        "Gated responses the validator rejected that were therefore never played to a caller: the model "
        "worker's count of rejecting verdicts that reached a live call, since the worker started (not the "
        "validator's count of verdicts given)."),
}
# HELP of the histogram families the processes report (by family name after the prefix).
HISTOGRAM_HELP: dict[str, str] = {
    "pacer_lateness_seconds": "How late the pacer's clock woke for each tick, seconds after the tick's deadline "
                              "(every tick since the pacer started).",
    "bargein_clear_seconds": "Barge-in: the model worker's cancel decision to the clear message written to the "
                             "carrier's socket by the gateway, seconds (since the gateway started).",
    "tool_duration_seconds": "Agent tool runs in the model worker, seconds from start to result, by outcome "
                             "(ok or error; since the worker started).",
}

# Summary keys of rule 1 -> the quantile label's value.
_SUMMARY_QUANTILES = {"p50": "0.5", "p99": "0.99", "p999": "0.999", "max": "1", "min": "0"}
_FLAT_QUANTILE = re.compile(r"^(?P<base>.+)_(?P<which>p\d+|max|min)_ms$")
_INVALID_NAME_CHARS = re.compile(r"[^a-z0-9_]+")


# --- negotiation -----------------------------------------------------------------------------------

def wants_text(accept: str, query: str = "") -> bool:
    """True when `GET /metrics` should answer exposition text rather than JSON.

    `?format=prometheus` (or `text`) asks for text and `?format=json` for JSON, whatever Accept says.
    Otherwise text when the Accept header prefers `text/plain` or `application/openmetrics-text` to
    `application/json` (RFC 9110 section 12.5.1: each type's weight is the q of the most specific range
    that matches it; a tie, `*/*` alone or no header keeps JSON, the default the demo and bench read).
    Prometheus sends `application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`.
    """
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "format":
            if value.lower() in ("prometheus", "text"):
                return True
            if value.lower() == "json":
                return False
    ranges = _parse_accept(accept)
    text_q = max(_weight(ranges, "text/plain"), _weight(ranges, "application/openmetrics-text"))
    return text_q > 0 and text_q > _weight(ranges, "application/json")


def _parse_accept(accept: str) -> list[tuple[str, str, float]]:
    """(type, subtype, q) per media range; a range that does not parse is ignored."""
    ranges = []
    for item in accept.split(","):
        media, *params = item.split(";")
        kind, slash, subtype = media.strip().lower().partition("/")
        if not slash or not kind or not subtype:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0 or math.isnan(q):
                    q = 0.0
        ranges.append((kind, subtype.strip(), q))
    return ranges


def _weight(ranges: list[tuple[str, str, float]], media_type: str) -> float:
    kind, subtype = media_type.split("/")
    best_specificity, best_q = -1, 0.0
    for range_kind, range_subtype, q in ranges:
        if (range_kind, range_subtype) == (kind, subtype):
            specificity = 2
        elif range_kind == kind and range_subtype == "*":
            specificity = 1
        elif (range_kind, range_subtype) == ("*", "*"):
            specificity = 0
        else:
            continue
        if specificity > best_specificity:
            best_specificity, best_q = specificity, q
        elif specificity == best_specificity:
            best_q = max(best_q, q)
    return best_q


# --- rendering -------------------------------------------------------------------------------------

def render(metrics: Mapping[str, object]) -> str:
    """The metrics dict as exposition text, one family per metric, ending in a newline."""
    out = _Writer()
    gateway = metrics.get("gateway")
    if isinstance(gateway, Mapping):
        _render_process(out, "gateway", gateway)
    for key, value in metrics.items():
        if key in ("gateway", "workers"):
            continue
        if isinstance(value, Mapping) and _is_summary(value):
            # Top-level summaries are the gateway's own (bargein_decision_to_clear_ms).
            _render_summary(out, _name("gateway", _strip_ms(key) + "_ms"), value, f"gateway {key}")
    workers = metrics.get("workers")
    if isinstance(workers, Mapping):
        for process in sorted(workers, key=str):
            stats = workers[process]
            if isinstance(stats, Mapping):
                _render_process(out, str(process), stats)
    return out.text()


def escape_label_value(value: str) -> str:
    """Backslash, double quote and line feed escaped, as the text format requires in label values."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """Backslash and line feed escaped, as the text format requires in HELP lines."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int | bool) -> str:
    """A sample value as the text format writes it (Go's ParseFloat reads every form used here)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def snake_case(name: str) -> str:
    """A metric-name fragment: camelCase split, lower case, runs of other characters as one `_`."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return _INVALID_NAME_CHARS.sub("_", name).strip("_") or "unnamed"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.families: set[str] = set()
        self.sample_names: set[str] = set()  # a histogram's x_bucket, x_sum, x_count besides the families

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[tuple[str, dict[str, str], object]]) -> None:
        """One metric family; `samples` are (name, labels, value). Skipped when the name, or a sample name
        it would write, is taken (a histogram `x` and a gauge `x_count` cannot both be read back)."""
        samples = [(sample, labels, value) for sample, labels, value in samples if _is_number(value)]
        rendered = [
            f"{sample}{_labels(labels)} {format_value(value)}"  # type: ignore[arg-type]
            for sample, labels, value in samples
        ]
        names = {name} | {sample for sample, _, _ in samples}
        if not rendered or names & (self.families | self.sample_names):
            return
        self.families.add(name)
        self.sample_names |= names
        self.lines.append(f"# HELP {name} {escape_help(help_text)}")
        self.lines.append(f"# TYPE {name} {kind}")
        self.lines.extend(rendered)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n" if self.lines else ""


def _render_process(out: _Writer, process: str, stats: Mapping[str, object]) -> None:
    histograms = _histogram_keys(stats)
    grouped = _flat_quantile_groups(stats)
    done: set[str] = set()
    for key in stats:
        key = str(key)
        if key in done:
            continue
        if key in histograms:
            family = histograms[key].family
            members = {k: parsed for k, parsed in histograms.items() if parsed.family == family}
            done.update(members)
            _render_histogram(out, process, family, {k: stats[k] for k in members}, members)
            continue
        if key in grouped:
            base, members = grouped[key]
            done.update(members.values())
            summary = {which: stats[member] for which, member in members.items()}
            _render_summary(out, _name(process, base + "_ms"), summary, f"{process} {base} (ms)")
            continue
        value = stats[key]
        if isinstance(value, Mapping):
            if _is_summary(value):
                _render_summary(out, _name(process, _strip_ms(key) + "_ms"), value, f"{process} {key}")
            continue
        if is_gauge(key):
            name = _name(process, RENAMED.get(key, key))
            if name.endswith("_total"):
                name += "_gauge"  # not in RENAMED: still never a gauge named like a counter
            out.family(name, "gauge", f"{process} {key}", [(name, {}, value)])
        else:
            name = _name(process, key)
            if not name.endswith("_total"):
                name += "_total"
            out.family(name, "counter", f"{process} {key} (count since the process started)", [(name, {}, value)])
        alias = ALIASES.get((process, key))
        if alias is not None:
            alias_name, kind, help_text = alias
            out.family(f"{PREFIX}_{alias_name}", kind, help_text, [(f"{PREFIX}_{alias_name}", {}, value)])


def _histogram_keys(stats: Mapping[str, object]) -> dict[str, prom_histogram.FlatKey]:
    """The keys of `stats` that carry histograms (module docstring, Histograms), parsed."""
    parsed = {}
    for key in stats:
        flat = prom_histogram.parse_flat_key(str(key)) if "{" in str(key) else None
        if flat is not None and not flat.family.endswith("_total"):  # `_total` names a counter
            parsed[str(key)] = flat
    return parsed


def _render_histogram(out: _Writer, process: str, family: str, values: Mapping[str, object],
                      keys: Mapping[str, prom_histogram.FlatKey]) -> None:
    """One histogram family from its flat keys; a series that is not whole and consistent is left out."""
    series: dict[tuple[tuple[str, str], ...], dict[str, object]] = {}
    for key, flat in keys.items():
        labels = tuple(sorted(label for label in flat.labels if label[0] != "le"))  # one series whatever the key order
        parts = series.setdefault(labels, {"buckets": {}})
        if flat.suffix == "bucket":
            parts["buckets"][prom_histogram.bound_of(flat.labels[-1][1])] = values[key]  # type: ignore[index]
        else:
            parts[flat.suffix] = values[key]
    name = f"{PREFIX}_{family}"
    samples: list[tuple[str, dict[str, str], object]] = []
    for labels, parts in series.items():
        buckets: dict[float, object] = parts["buckets"]  # type: ignore[assignment]
        total, total_sum = parts.get("count"), parts.get("sum")
        if not _is_whole_series(buckets, total, total_sum):
            continue
        for bound in sorted(buckets):
            samples.append((name + "_bucket", {**dict(labels), "le": prom_histogram.format_bound(bound)}, buckets[bound]))
        samples.append((name + "_sum", dict(labels), total_sum))
        samples.append((name + "_count", dict(labels), total))
    out.family(name, "histogram", HISTOGRAM_HELP.get(family, f"{process} {family}"), samples)


def _is_whole_series(buckets: Mapping[float, object], total: object, total_sum: object) -> bool:
    """A `+Inf` bucket, counts that do not decrease with `le`, `_count` equal to `+Inf`, and a `_sum`."""
    counts = [buckets[bound] for bound in sorted(buckets)]
    if math.inf not in buckets or not all(_is_number(v) and not math.isnan(v) for v in (*counts, total, total_sum)):  # type: ignore[arg-type]
        return False
    return all(earlier <= later for earlier, later in zip(counts, counts[1:])) and counts[-1] == total  # type: ignore[operator]


def is_gauge(key: str) -> bool:
    """Rule 2 of the module docstring: a level, not a count."""
    return key in GAUGES or key.endswith("_ms") or key.startswith("active_")


def _flat_quantile_groups(stats: Mapping[str, object]) -> dict[str, tuple[str, dict[str, str]]]:
    """Every member key of a rule-1 group -> (base, {which: key}); which is p50, max, min or count."""
    groups: dict[str, dict[str, str]] = {}
    for key in stats:
        match = _FLAT_QUANTILE.match(str(key))
        if match:
            groups.setdefault(match["base"], {})[match["which"]] = str(key)
    result: dict[str, tuple[str, dict[str, str]]] = {}
    for base, members in groups.items():
        if not any(which.startswith("p") for which in members):
            continue  # a lone handle_max_ms is a plain gauge
        if f"{base}_count" in stats:
            members["count"] = f"{base}_count"
        for key in members.values():
            result[key] = (base, members)
    return result


def _render_summary(out: _Writer, name: str, summary: Mapping[str, object], what: str) -> None:
    by_quantile: dict[str, object] = {}
    for which, value in summary.items():
        quantile = _quantile_of(str(which))
        if quantile is not None and _is_number(value):
            by_quantile.setdefault(quantile, value)  # p5 and p500 are both 0.5: a series once
    samples = [(name, {"quantile": q}, by_quantile[q]) for q in sorted(by_quantile, key=float)]
    out.family(name, "gauge", f"{what}: quantiles (1 is the maximum, 0 the minimum)", samples)
    if "count" in summary:
        out.family(name + "_count", "gauge", f"{what}: samples the quantiles are computed over",
                   [(name + "_count", {}, summary["count"])])


def _quantile_of(which: str) -> str | None:
    if which in _SUMMARY_QUANTILES:
        return _SUMMARY_QUANTILES[which]
    if re.fullmatch(r"p\d+", which):
        digits = which[1:]
        return format_value(float("0." + digits)) if digits != "100" else "1"
    return None


def _is_summary(value: Mapping[str, object]) -> bool:
    return any(_quantile_of(str(k)) is not None for k in value) and all(
        _quantile_of(str(k)) is not None or k == "count" for k in value
    )


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real)


def _strip_ms(key: str) -> str:
    return key[:-3] if key.endswith("_ms") else key


def _name(process: str, key: str) -> str:
    return f"{PREFIX}_{snake_case(process)}_{snake_case(key)}"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{escape_label_value(value)}"' for name, value in labels.items()) + "}"


# A proxy or tunnel in front of the gateway says whom it forwards for: such a request is not this host's own.
FORWARDING_HEADERS = (b"forwarded", b"x-forwarded-for", b"x-real-ip")


def local_request(peer_address: str, over_unix_socket: bool, header_names: Iterable[bytes]) -> bool:
    """``metrics_listen = "local"``: may this request to the gateway's own address read /metrics? Only from this
    host: a loopback peer (or the Unix socket), and no proxy's forwarding header (a tunnel to localhost
    would otherwise hand /metrics to anyone)."""
    if any(name.lower() in FORWARDING_HEADERS for name in header_names):
        return False
    if over_unix_socket:
        return True
    try:
        return ipaddress.ip_address(peer_address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
