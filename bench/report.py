"""The bench's outputs for people: the console table, the PNG, and the machine/versions block of the JSON.

Owns presentation only; every figure is computed elsewhere (voicecore.callreport, bench/analysis.py).
matplotlib is optional (the `bench` extra): without it write_png() says so and writes nothing.
"""

from __future__ import annotations

import html
import math
import os
import platform
import re
import sys
import subprocess
from pathlib import Path
from importlib import metadata

from bench.capacity import LOAD_BOUND_CORE

VERSIONED = ("voicecore", "numpy", "websockets", "numba", "uvloop", "pyzmq", "msgpack", "supervisor")


def _slo_cell(run: dict) -> str:
    """held, BROKE (by the stack), LOAD-BOUND (an SLO broke while the load side was too busy to tell) or
    LOAD-STALLED (only the underruns inside the load generator's own stalls broke an SLO)."""
    if run.get("slo_ok"):
        return "held"
    return {"load_bound": "LOAD-BOUND", "harness_stalled": "LOAD-STALLED"}.get(run.get("slo_verdict"), "BROKE")


def _load_process_line(run: dict) -> str:
    """The busiest load process's CPU, and the load_bound verdict when it was too busy."""
    per_process = run.get("load_process_cpu")
    if not per_process:
        return ""
    kernel = per_process.get("carrier_kernel") or []
    carrier = ", ".join(f"{value:.2f}" + (f" ({kernel[i]:.2f} in the kernel)" if i < len(kernel) else "")
                        for i, value in enumerate(per_process.get("carrier", [])))
    sim = per_process.get("model_sim")
    line = (f"  load processes, cores each: carrier [{carrier}]" + (f", model sim {sim:.2f}" if sim is not None else "")
            + f" (load-bound above {LOAD_BOUND_CORE:g} of a core)")
    if run.get("load_bound"):
        line += ("\n  LOAD-BOUND: a load process used more than {:g} of its core; its own delays reach the figures, "
                 "so a broken SLO here is not the stack's").format(LOAD_BOUND_CORE)
    return line


def _load_split(by_role: dict | None) -> str:
    if not by_role:
        return ""
    return f" (carrier {by_role.get('carrier', 0):.2f}, model sim {by_role.get('model_sim', 0):.2f})"


def machine_info() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_mb = 0
    try:
        with open("/proc/meminfo") as f:
            memory_mb = int(f.readline().split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu_model": model or platform.processor(),
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)),
        "memory_mb": memory_mb,
        "kernel": platform.release(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def versions() -> dict:
    found = {"python": platform.python_version(), "implementation": sys.implementation.name}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    found["voicecore_commit"] = source_commit()
    return found


def source_commit() -> str | None:
    """The git commit the measured code came from ("+dirty" when the tree had uncommitted changes), or None
    outside a git checkout (a published figure then names its commit in bench/results/README.md)."""
    from voicecore.supervise import REPO_ROOT

    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _p(summary: dict, key: str) -> str:
    return f"{summary.get(key, 0.0):.2f}"


def format_table(top: dict, runs: list[dict]) -> str:
    """One row per run, then the capacity verdict (if searched) and any problems of the last run."""
    header = ("calls", "late p50", "p99", "p99.9", "max", "underr avail/starved", "stale", "overlap", "b-in no clr",
              "b-in>clr p99", "trunc max", "m2c p99", "turn p50", "cpu ms/call-s", "MB/call", "lost", "SLO")
    rows = []
    for run in runs:
        late = run["lateness_ms"]
        rows.append((
            str(run["calls"]) + (f" s{run['search']}" if run.get("search", 1) > 1 else ""), _p(late, "p50"), _p(late, "p99"), _p(late, "p999"), _p(late, "max"),
            f"{run.get('underruns_audio_available', run['underruns'])}/{run.get('underruns_model_starved', 0)}",
            str(run["stale_frames"]), str(run.get("overlapping_frames", 0)), str(run.get("bargeins_without_clear", 0)),
            _p(bargein_figure(run), "p99"), f"{run['truncate_error_ms']['max']:.1f}",
            _p(run.get("model_to_carrier_ms", run.get("mouth_to_ear_ms", {})), "p99"),
            f"{run.get('turn_latency_ms', {}).get('p50', 0.0):.0f}",
            f"{run['cpu_ms_per_call_second']:.2f}", f"{run.get('rss_per_call_mb', 0):.3f}",
            str(run.get("frames_lost", 0)), _slo_cell(run),
        ))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    scenario = top.get("scenario", "?")
    machine = top.get("machine", {})
    system = top.get("system") or "voicecore"
    title = "voicecore bench" if system == "voicecore" else f"{system} baseline"
    seconds = runs[-1]["seconds"] if runs else top.get("seconds", 0)
    transport = (runs[-1] if runs else top).get("transport", "tcp")
    privileges = (runs[-1] if runs else top).get("privileges", {}).get("mode", "on")
    carrier = (runs[-1] if runs else top).get("carrier", "twilio")
    out = [f"{title}: scenario {scenario}, {seconds:.0f} s measured per run, calls from {carrier}, over {transport} sockets, "
           f"privileges {privileges}, {machine.get('cores', '?')} cores ({machine.get('cpu_model', '?')})",
           line(header), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    last = runs[-1] if runs else top
    talkover = last.get("talkover_ms", {})
    turn = last.get("turn_latency_ms", {})
    turn_model = last.get("turn_latency_model_ms", {})
    headroom = last.get("playout_headroom_ms", {})
    out.append(f"  turn latency ms p50/p99 {_p(turn, 'p50')}/{_p(turn, 'p99')} ({turn.get('count', 0)} turns; the model's "
               f"share p50 {_p(turn_model, 'p50')})  playout headroom ms p50 {_p(headroom, 'p50')}  "
               f"late frames exempt (model) {last.get('lateness_frames_model_starved', 0)}")
    if last.get("bargein_measured_from") == "decision":
        out.append("  barge-in -> clear is measured from the turn-taking controller's decision (it waits for words); "
                   f"from the caller's first sound p99 {_p(last['bargein_to_clear_ms'], 'p99')} ms")
    out.append(f"  frames sent {last['frames_sent']}  barge-ins {last['bargeins']}  "
               f"overlapping responses {last.get('overlapping_responses', 0)}  late deltas {last.get('late_deltas_sent', 0)}  "
               f"talkover ms p50/p99 {_p(talkover, 'p50')}/{_p(talkover, 'p99')} ({talkover.get('count', 0)})")
    matching = last.get("frame_matching")
    if matching:
        out.append(f"  frame matching (lossy carrier path) {matching['exact']} exact, {matching['matched']} matched by content, "
                   f"{matching['unmatched']} unmatched ({matching['unmatched_with_signal']} with signal) of {matching['frames']}")
    out.append(f"  load CPU {last.get('load_cpu_fraction', 0):.2f} cores over {last.get('load_procs', 1)} load process(es)"
               f"{_load_split(last.get('load_cpu_fraction_by_role'))}  "
               f"per process ms/call-s {last.get('cpu_ms_per_call_second_by_process', {})}")
    if _load_process_line(last):
        out.append(_load_process_line(last))
    if "capacity_calls" in top:
        capped = " (the largest count tried: the real capacity may be higher)" if top.get("capacity_capped") else ""
        searches = top.get("capacity_calls_runs") or [top["capacity_calls"]]
        spread = (f" (median of {len(searches)} searches: {', '.join(map(str, searches))}; range "
                  f"{top['capacity_calls_range'][0]}-{top['capacity_calls_range'][1]})") if len(searches) > 1 else ""
        out.append(f"capacity: {top['capacity_calls']} concurrent calls met every SLO{spread}{capped}")
        if top.get("capacity_load_bound"):
            out.append("  the load side ran its CPUs nearly full at the first count that broke: the capacity above is a "
                       "lower bound set by the load generator (see load_cpu_fraction_by_role)")
    for violation in last.get("slo_violations", []):
        out.append(f"  SLO broken at {last['calls']} calls: {violation}")
    for problem in last.get("problems", [])[:10]:
        out.append(f"  problem: {problem}")
    profile = top.get("profile") or last.get("profile")
    if profile:
        if "svg" in profile:
            out.append(f"  profile: {profile['process']} (hottest, {profile['cpu_share_during_sample']:.0%} of a core) -> {profile['svg']}")
            for spot in profile.get("hot_spots", [])[:3]:
                out.append(f"    {spot['self_share']:6.1%} self  {spot['function']}")
        else:
            out.append(f"  profile: not recorded: {profile.get('error')}")
    return "\n".join(out)


def format_store_comparison(comparison: dict) -> str:
    """--compare-store: the run without the call store beside the run with it, then the store's write cost
    against its target and what the store held at the end."""
    header = ("store", "late p50", "p99", "p99.9", "max", "underr avail", "stale", "cpu ms/call-s", "recorder", "console")
    rows = []
    for label in ("off", "on"):
        side = comparison[label]
        late, by_process = side["lateness_ms"], side["cpu_ms_per_call_second_by_process"]
        rows.append((label, _p(late, "p50"), _p(late, "p99"), _p(late, "p999"), _p(late, "max"),
                     str(side["underruns_audio_available"]), str(side["stale_frames"]),
                     f"{side['cpu_ms_per_call_second']:.3f}",
                     *(f"{by_process[name]:.3f}" if name in by_process else "-" for name in ("recorder", "console"))))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    on = comparison["on"]
    verdict = "within" if comparison["store_cpu_within_target"] else "OVER"
    out = [f"call store off vs on: {comparison['calls']} calls, {comparison['seconds']:.0f} s measured each, taking turns",
           line(header), line(["-" * w for w in widths]), *(line(r) for r in rows),
           f"  store write cost {on['store_cpu_ms_per_call_second']:.3f} CPU ms per call-second (recorder, in the window; "
           f"target <= {comparison['store_cpu_target_ms']}: {verdict})  ingest after the calls ended "
           f"{on.get('store_ingest_cpu_ms_per_call_second', 0.0):.3f}  console {on['console_cpu_ms_per_call_second']:.3f}",
           f"  lateness p99 on - off {comparison['lateness_p99_delta_ms']:+.2f} ms  stored: {on['calls_stored']} of "
           f"{comparison['calls']} calls (warm-up call {'too' if on.get('warm_up_call_stored') else 'not'}), "
           f"{on['events_stored']} events"]
    return "\n".join(out)


def _tail_axis(q: float) -> float:
    """Quantile (percent) -> -log10 of the fraction above it, so p50, p90, p99, p99.9 are evenly spaced."""
    return -math.log10(max(1e-4, 1.0 - q / 100.0))


NICE_TICKS = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 400, 500, 1000, 2000, 5000)


def _calls_axis(ax, calls: list[int], log: bool, matplotlib) -> None:
    if log:
        ax.set_xscale("log")
    ticks = calls if len(calls) <= 5 else [t for t in NICE_TICKS if min(calls) * 0.8 <= t <= max(calls) * 1.25]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("concurrent calls")


NO_MATPLOTLIB = "PNG skipped: matplotlib is not installed (pip install 'voicecore[bench]')"


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None when matplotlib (the `bench` extra) is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write_png(path: str, top: dict, runs: list[dict], baseline_runs: list[dict] | None = None) -> str:
    """Lateness CDF per N, CPU per call-second vs N, SLO figures vs N with the capacity line; the pipecat
    baseline (if measured) in red on the same axes."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    import matplotlib.ticker
    from bench.analysis import CDF_QUANTILES

    slo = top.get("slo", {})
    capacity = top.get("capacity_calls")
    runs = sorted(runs, key=lambda r: r["calls"])
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.6))
    cmap = plt.get_cmap("viridis")

    ax = axes[0]
    for i, run in enumerate(runs):
        values = run.get("lateness_cdf_ms") or []
        if not values:
            continue
        colour = cmap(i / max(1, len(runs) - 1) * 0.9)
        style = "-" if run.get("slo_ok") else "--"
        ax.plot(values, [_tail_axis(q) for q in CDF_QUANTILES[: len(values)]], style, color=colour, lw=2,
                label=f"{run['calls']} calls" + ("" if run.get("slo_ok") else " (SLO broken)"))
    baseline_runs = sorted(baseline_runs or [], key=lambda r: r["calls"])
    reds = plt.get_cmap("autumn")
    for i, run in enumerate(baseline_runs):
        values = run.get("lateness_cdf_ms") or []
        if values:
            ax.plot(values, [_tail_axis(q) for q in CDF_QUANTILES[: len(values)]], ":", lw=1.8,
                    color=reds(i / max(1, len(baseline_runs) - 1) * 0.8), label=f"{run.get('system', 'pipecat')} {run['calls']} calls")
    runs_all = runs + baseline_runs
    if "lateness_p99_ms" in slo:
        ax.axvline(slo["lateness_p99_ms"], color="crimson", ls=":", lw=1.5, label=f"SLO p99 {slo['lateness_p99_ms']:g} ms")
        ax.axhline(_tail_axis(99), color="crimson", ls=":", lw=0.8)
    ticks = (0, 50, 90, 99, 99.9, 99.99)
    ax.set_yticks([_tail_axis(q) for q in ticks], [f"p{q:g}" for q in ticks])
    ax.set_xscale("symlog", linthresh=1.0)
    worst = max([max(r.get("lateness_cdf_ms") or [0.0]) for r in runs_all] + [slo.get("lateness_p99_ms", 0.0)])
    ax.set_xlim(0, max(2.0, worst * 1.6))
    xticks = [t for t in (0, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if t <= worst * 1.6]
    ax.set_xticks(xticks, [f"{t:g}" for t in xticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("lateness against the carrier's playout clock (ms, log beyond 1 ms)")
    ax.set_ylabel("share of frames at or below")
    ax.set_title("Lateness CDF per number of calls")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")

    ax = axes[1]
    calls = [r["calls"] for r in runs]
    all_calls = sorted({r["calls"] for r in runs_all})
    names = sorted({n for r in runs for n in r.get("cpu_ms_per_call_second_by_process", {})})
    log_calls = len(all_calls) > 1 and max(all_calls) / min(all_calls) >= 4
    if len(runs) > 1:
        layers = [[r.get("cpu_ms_per_call_second_by_process", {}).get(name, 0.0) for r in runs] for name in names]
        ax.stackplot(calls, layers, labels=[f"voicecore {n}" for n in names], alpha=0.6,
                     colors=[plt.get_cmap("tab10")(j) for j in range(len(names))])
    else:
        bottom = 0.0
        for j, name in enumerate(names):
            height = runs[0].get("cpu_ms_per_call_second_by_process", {}).get(name, 0.0)
            ax.bar(calls, [height], width=max(1.0, calls[0] * 0.2), bottom=bottom, label=f"voicecore {name}",
                   color=plt.get_cmap("tab10")(j), alpha=0.6)
            bottom += height
    ax.plot(calls, [r["cpu_ms_per_call_second"] for r in runs], "ko-", lw=1, ms=4, label="voicecore total")
    if baseline_runs:
        ax.plot([r["calls"] for r in baseline_runs], [r["cpu_ms_per_call_second"] for r in baseline_runs], "o-",
                color="crimson", lw=1.5, ms=4, label="pipecat")
    if capacity:
        ax.axvline(capacity, color="green", lw=2, label=f"capacity {capacity} calls")
    if top.get("baseline_capacity_calls"):
        ax.axvline(top["baseline_capacity_calls"], color="crimson", lw=2, label=f"pipecat capacity {top['baseline_capacity_calls']}")
    _calls_axis(ax, all_calls, log_calls, matplotlib)
    ax.set_ylabel("server CPU ms per call-second")
    ax.set_ylim(bottom=0)
    ax.set_title("CPU per call vs calls (every server process)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")

    ax = axes[2]
    ax.plot(calls, [r["lateness_ms"]["p99"] for r in runs], "o-", label="lateness p99 (ms)")
    ax.plot(calls, [r["bargein_to_clear_ms"]["p99"] for r in runs], "s-", label="barge-in -> clear p99 (ms)")
    ax.plot(calls, [r.get("underruns_audio_available", 0) for r in runs], "^-", label="underruns with audio available")
    if baseline_runs:
        ax.plot([r["calls"] for r in baseline_runs], [r["lateness_ms"]["p99"] for r in baseline_runs], "o:",
                color="crimson", label="pipecat lateness p99 (ms)")
    if "lateness_p99_ms" in slo:
        ax.axhline(slo["lateness_p99_ms"], color="C0", ls=":", lw=1.2, label=f"SLO lateness {slo['lateness_p99_ms']:g} ms")
    if "bargein_to_clear_p99_ms" in slo:
        ax.axhline(slo["bargein_to_clear_p99_ms"], color="C1", ls=":", lw=1.2,
                   label=f"SLO barge-in {slo['bargein_to_clear_p99_ms']:g} ms")
    if capacity:
        ax.axvline(capacity, color="green", lw=2, label=f"capacity {capacity} calls")
    if top.get("baseline_capacity_calls"):
        ax.axvline(top["baseline_capacity_calls"], color="crimson", lw=2, label=f"pipecat capacity {top['baseline_capacity_calls']}")
    _calls_axis(ax, all_calls, log_calls, matplotlib)
    ax.set_yscale("symlog", linthresh=1.0)
    highest = max([r["lateness_ms"]["p99"] for r in runs_all] + [r["bargein_to_clear_ms"]["p99"] for r in runs]
                  + [float(r.get("underruns_audio_available", 0)) for r in runs] + [slo.get("bargein_to_clear_p99_ms", 1.0)])
    ax.set_ylim(0, highest * 2.5)
    ax.set_title("SLO figures vs calls")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)

    machine = top.get("machine", {})
    options = top.get("configuration", {}).get("options", {})
    pins = f"stack on CPU {options.get('pin_stack') or 'any'}, load on CPU {options.get('pin_load') or 'any'}"
    verdict = (f"capacity {capacity} calls" + (f" vs pipecat {top['baseline_capacity_calls']}" if top.get("baseline_capacity_calls") is not None else "")) if capacity is not None else f"{runs[-1]['calls']} calls, SLO {'held' if runs[-1].get('slo_ok') else 'broken'}"
    fig.suptitle(f"voicecore bench - scenario {top.get('scenario')} - {verdict} - {pins} - "
                 f"{machine.get('cores')} x {machine.get('cpu_model', '')}", fontsize=11)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"PNG report written to {path}"


_SVG_NODE = re.compile(r'<g><title>(.*?) \(([\d,]+) samples?, [\d.]+%\)</title><rect x="[^"]*" y="([\d.]+)"'
                       r'[^>]*?fg:x="(\d+)" fg:w="(\d+)"')


def hot_spots_from_svg(path: str, top: int = 5) -> list[dict]:
    """The functions with the most self samples in a py-spy flame graph (SVG from `py-spy record`).

    Each box is a (function, samples); a box's self samples are its width minus its children's
    (the boxes one row further from the root that lie inside it).
    """
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return []
    nodes = [(html.unescape(m[1]), float(m[3]), int(m[4]), int(m[5])) for m in _SVG_NODE.finditer(text)]
    if not nodes:
        return []
    rows = sorted({y for _, y, _, _ in nodes})
    root_y = max(nodes, key=lambda n: n[3])[1]
    step = (rows[1] - rows[0]) if len(rows) > 1 else 0.0
    direction = 1.0 if root_y == rows[0] else -1.0
    by_row: dict[float, list] = {}
    for node in nodes:
        by_row.setdefault(node[1], []).append(node)
    self_samples: dict[str, int] = {}
    total = max(n[3] for n in nodes)
    for name, y, x, w in nodes:
        children = by_row.get(y + direction * step, [])
        inside = sum(cw for _, _, cx, cw in children if x <= cx < x + w)
        self_samples[name] = self_samples.get(name, 0) + max(0, w - inside)
    ranked = sorted(self_samples.items(), key=lambda item: -item[1])[:top]
    return [{"function": name, "self_samples": count, "self_share": round(count / total, 3)} for name, count in ranked]


def bargein_figure(run: dict) -> dict:
    """The barge-in -> clear figure a run is judged on: from the caller's speech, or, under the turn-taking
    controller (which waits for words on purpose), from the controller's decision (the gateway's figure)."""
    if run.get("bargein_measured_from") == "decision":
        return run.get("gateway_bargein_decision_to_clear_ms") or {"p99": 0.0, "count": 0}
    return run["bargein_to_clear_ms"]
