"""`voicecore bench --scenario chaos`: N calls under supervisord while faults hit the stack one after another.

Owns the chaos run: the fault schedule (quiet running, one fault, an observation window, the next ...),
injecting each fault (SIGKILL of the active pacer, model worker, validator or gateway; the model
simulator's `POST /faults` for the vendor's misbehaviours, docs/reference/model-simulator.md#faults),
watching the stack recover, the load processes of this scenario (`python -m bench.chaos`: like
bench/loadgen.py, but a call whose stream ends early is replaced by a fresh one at once, so the load stays
at N through a gateway kill), and the per-fault figures of the report's `faults` list.

The run reuses bench/run.py's LevelRun for everything that is not chaos (the model simulator process, the
stack, the warm-up call, stopping it all). The figures come from the carrier's playout log and the model
simulator's session records through voicecore.callreport (playout_figures: gap ticks, stale frames;
turn_latencies), restricted to each fault's window [fault, fault + OBSERVE_MS). A frame of a shipped
fallback line (voicecore.fallback) is audio the caller heard: it ends a gap, and is never stale.

Which pid is "the active" worker: `$RUNTIME_DIR/leader-R.pid` when the standby workers write it, else
the supervisord program's pid (a stack without standbys).

Timeline (CLOCK_MONOTONIC ms, system-wide, as in bench/run.py):
    t0 ... ramp ... settle | w0: quiet | fault 1, observe | quiet | fault 2, observe | ... | w1 + tail: calls end
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import math
import os
import pickle
import random
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import NO_MATPLOTLIB, pyplot
from bench.run import BenchError, BenchOptions, LevelRun, LevelWindow, Progress, run_async, save_path_for
from voicecore.processes import pid_alive
from voicecore.supervise import REPO_ROOT
from voicecore.timing import FRAME_MS

# ----- the schedule ---------------------------------------------------------------------------------

QUIET_MS = 5000  # normal running before each fault (the first one is also the baseline window)
OBSERVE_MS = 8000  # a fault's window: its figures count what happened in [fault, fault + OBSERVE_MS)
TAIL_MS = 1000  # after the last window, before every call ends
POLL_MS = 25  # how often a recovery is polled (/healthz, the leader pid)
RATE_LIMIT_MS = 4000  # rate_limit, server_error: long enough for many calls to ask for a response in it
STALL_MS = 2000
REFUSE_MS = 3000

WORKER_KILLS = ("pacer", "model", "validator")
STORE_KILLS = ("recorder", "console")  # the call store's writer and its reader: a run with either has a store
POSTGRES = "postgres"  # the run's own PostgreSQL as the store, killed and started again (bench/postgres.py)
STORE_FAULTS = (*STORE_KILLS, POSTGRES)
POSTGRES_DOWN_MS = 4000  # from the postmaster's SIGKILL to starting it again
# The calls of a chaos run all end together at its end: when the postgres fault is the last one, PostgreSQL stays
# down until this long after that, so that the calls end (and are stored, events and all) while it is down.
POSTGRES_AFTER_END_MS = 1000
GATEWAY = "gateway"
STORE_WAIT_S = 75.0  # after the calls ended: the recorder's safety-net listings (record dir, store spool) run every minute


@dataclass(frozen=True, slots=True)
class FaultSpec:
    name: str  # the --chaos-faults name and the report's `fault`
    description: str
    kill: str = ""  # the role to SIGKILL, or "" for a vendor fault
    vendor: tuple[tuple[str, int], ...] = ()  # (kind, duration_ms) POSTed to the model simulator, in order


FAULTS: dict[str, FaultSpec] = {spec.name: spec for spec in (
    *(FaultSpec(role, f"SIGKILL of the active {role}", kill=role) for role in WORKER_KILLS),
    *(FaultSpec(role, f"SIGKILL of the {role} (the run has a call store: every call that ended must be in it once)",
                kill=role) for role in STORE_KILLS),
    FaultSpec(POSTGRES, f"SIGKILL of the PostgreSQL the store is in (the run's own, on 127.0.0.1), started again "
                        f"{POSTGRES_DOWN_MS} ms later on the same data directory and port (as the last fault: "
                        f"{POSTGRES_AFTER_END_MS} ms after the calls ended): every call that ended must be in the store "
                        "once, with its turns and events"),
    FaultSpec("drop_1011", "the vendor closes every session with 1011", vendor=(("drop_1011", 0),)),
    FaultSpec("rate_limit", f"every response.create answered rate_limit_exceeded for {RATE_LIMIT_MS} ms",
              vendor=(("rate_limit", RATE_LIMIT_MS),)),
    FaultSpec("server_error", f"every response.create answered server_error for {RATE_LIMIT_MS} ms",
              vendor=(("server_error", RATE_LIMIT_MS),)),
    FaultSpec("malformed_json", "one text frame that is not JSON per session", vendor=(("malformed_json", 0),)),
    FaultSpec("unknown_event", "one event of an unknown type per session", vendor=(("unknown_event", 0),)),
    FaultSpec("unknown_response_delta", "one audio delta of a response never created, per session",
              vendor=(("unknown_response_delta", 0),)),
    FaultSpec("huge_delta", "one 4 MiB audio delta per session", vendor=(("huge_delta", 0),)),
    FaultSpec("binary_frame", "one binary WebSocket frame per session", vendor=(("binary_frame", 0),)),
    FaultSpec("stall", f"no event at all for {STALL_MS} ms", vendor=(("stall", STALL_MS),)),
    # Sessions must reconnect against a vendor that refuses them: refuse first, then cut every session.
    FaultSpec("refuse_new", f"new handshakes refused (503) for {REFUSE_MS} ms, every session closed with 1011",
              vendor=(("refuse_new", REFUSE_MS), ("drop_1011", 0))),
    # Last: the calls it cuts (re-attached or dropped) should not be what the other faults are measured on.
    FaultSpec(GATEWAY, "SIGKILL of the active gateway (its calls' streams are lost; the carrier re-attaches them "
                       "through the answer's re-attach step: Twilio's <Connect action>, Plivo's and Telnyx's <Redirect>, "
                       "Vonage's synchronous connect's eventUrl)",
              kill=GATEWAY),
)}
# The store faults are asked for by name: they give the run a call store, and the default run (its figures
# comparable with earlier ones, in about 4 minutes at 100 calls) has none.
DEFAULT_FAULTS = tuple(name for name in FAULTS if name not in STORE_FAULTS)


def parse_faults(text: str) -> list[FaultSpec]:
    """--chaos-faults "pacer,model" -> those faults in that order; "" -> every fault (DEFAULT_FAULTS).
    Raises ValueError on an unknown or repeated name."""
    names = [name.strip() for name in text.split(",") if name.strip()] or list(DEFAULT_FAULTS)
    unknown = [name for name in names if name not in FAULTS]
    if unknown:
        raise ValueError(f"unknown chaos fault {', '.join(map(repr, unknown))} (choose from {', '.join(FAULTS)})")
    if len(set(names)) != len(names):
        raise ValueError(f"--chaos-faults {text!r} names a fault twice")
    return [FAULTS[name] for name in names]


def fault_times_ms(w0_ms: float, count: int) -> list[float]:
    """When each of ``count`` faults is planned: QUIET_MS of normal running before each one, OBSERVE_MS after."""
    return [w0_ms + QUIET_MS + i * (QUIET_MS + OBSERVE_MS) for i in range(count)]


def run_length_ms(count: int) -> float:
    """From w0 (every call up) to the end of the calls, for ``count`` faults."""
    return count * (QUIET_MS + OBSERVE_MS) + TAIL_MS


# ----- the figures (pure: the carrier's results and the simulator's records in, numbers out) -----------

DROPPED_BY = ("server", "connection_lost")  # a stream the bench did not end (CallResult.closed_by)


@dataclass(slots=True)
class CallTimeline:
    """What one call's figures need, over its whole life (CLOCK_MONOTONIC ms)."""

    call_sid: str
    started_ms: float  # the bench placed it (the webhook)
    ended_ms: float  # its stream was over
    dropped: bool  # the stream ended before the bench ended it
    accepted_ms: float | None = None  # its stream was taken and served (the first caller frame's time), if it was
    gap_ticks_ms: list[float] = field(default_factory=list)  # playout ticks with nothing to play inside a spurt
    stale_ms: list[float] = field(default_factory=list)  # arrival of each stale frame (fallback frames never are)
    fallback_ms: list[float] = field(default_factory=list)  # arrival of each fallback-line frame
    unknown_ms: list[float] = field(default_factory=list)  # arrival of frames of no response and no fallback line
    turns: list[tuple[float, float]] = field(default_factory=list)  # (caller speech end, answer latency ms)
    sessions: list[tuple[float, float | None]] = field(default_factory=list)  # model sessions: (connected, closed)
    # re-attaches: (the old stream lost, the new one started, the conversation restored in the model session
    # opened after it (conversation_restored))
    reattaches: list[tuple[float, float, str]] = field(default_factory=list)


def call_timeline(result, meta: dict, records: Sequence, fallback_frames: frozenset[bytes],
                  grace_ms: float | None = None) -> CallTimeline:
    """One call's timeline from its carrier result, the bench's meta (started_ms, ended_ms) and the model
    simulator's records of its sessions. ``fallback_frames``: canonical payloads of every fallback frame."""
    from voicecore.callreport import (STARVED_GRACE_MS, canonical_frame, frame_owners, playout_figures,
                                      turn_latencies)

    dropped = result.closed_by in DROPPED_BY
    timeline = CallTimeline(result.call_sid, meta["started_ms"], meta["ended_ms"], dropped,
                            sessions=[(r.connected_ms, r.closed_ms) for r in records])
    core = result.core
    if core is None:
        return timeline
    timeline.reattaches = [(lost, attached, conversation_restored(records, lost))
                           for lost, attached in getattr(core.metrics, "reattaches", ())]
    if core.frames and core.send_origin_ms is not None:
        timeline.accepted_ms = core.send_origin_ms
    playout = playout_figures(core, records, STARVED_GRACE_MS if grace_ms is None else grace_ms)
    # After a drop nothing more could be heard: a spurt cut by it is the drop's, not a gap.
    cut_ms = timeline.ended_ms if dropped else math.inf
    timeline.gap_ticks_ms = [tick for tick, _starved, _response in playout.gaps if tick < cut_ms]
    owners = frame_owners(records)
    stale_fallback: collections.Counter = collections.Counter()
    for frame in core.frames:
        if frame.payload is None:
            continue
        canonical = canonical_frame(frame.payload)
        if canonical in fallback_frames:
            timeline.fallback_ms.append(frame.arrival_ms)
            if frame.stale:
                stale_fallback[frame.arrival_ms] += 1
        elif canonical not in owners:
            timeline.unknown_ms.append(frame.arrival_ms)
    # playout_figures marks a frame stale by its response (never a fallback frame's case: it has none) or by
    # the carrier's mark rule; a fallback line is the runtime's own audio, heard, never stale.
    for at in playout.stale_at_ms:
        if stale_fallback[at]:
            stale_fallback[at] -= 1
        else:
            timeline.stale_ms.append(at)
    timeline.turns = [(end, latency) for end, latency, _model in turn_latencies(core, playout, records)]
    return timeline


RESTORED = "restored"  # given the conversation so far (history items), not greeted again
GREETED_AGAIN = "greeted_again"
NO_HISTORY = "no_history"  # not greeted again, but given no earlier turn (the spine keeps none)
NO_SESSION = "no_session"


def conversation_restored(records: Sequence, lost_ms: float) -> str:
    """What the model session a re-attached call opened after ``lost_ms`` was given: RESTORED, GREETED_AGAIN,
    NO_HISTORY, or NO_SESSION when none opened after it."""
    later = sorted((r for r in records if r.connected_ms >= lost_ms), key=lambda r: r.connected_ms)
    if not later:
        return NO_SESSION
    first = later[0]
    if any((getattr(r, "metadata", None) or {}).get("vc_prompt") == "greeting" for r in first.responses):
        return GREETED_AGAIN
    return RESTORED if first.client_events.get("conversation.item.create", 0) >= 1 else NO_HISTORY


def reattach_figures(timelines: Sequence[CallTimeline], at_ms: float, w1_ms: float) -> dict:
    """The re-attaches of streams lost in [at_ms, w1_ms): calls re-attached, the time each caller was without
    a stream (lost to the new stream's start: nothing heard either way) p50/p95/max, and the conversations
    restored (the next model session had the earlier turns)."""
    hits = [(t, lost, attached, restored) for t in timelines for lost, attached, restored in t.reattaches
            if at_ms <= lost < w1_ms]
    gaps = sorted(attached - lost for _t, lost, attached, _r in hits)

    def pct(q: float) -> float | None:
        return round(gaps[min(len(gaps) - 1, math.ceil(q / 100 * len(gaps)) - 1)], 1) if gaps else None

    return {"calls_reattached": len({t.call_sid for t, *_ in hits}),
            "reattach_silence_p50_ms": pct(50), "reattach_silence_p95_ms": pct(95),
            "reattach_silence_max_ms": round(gaps[-1], 1) if gaps else None,
            "conversations_restored": sum(1 for *_x, how in hits if how == RESTORED),
            "reattached_without_history": sum(1 for *_x, how in hits if how == NO_HISTORY),
            "reattached_greeted_again": sum(1 for *_x, how in hits if how == GREETED_AGAIN),
            "reattached_without_model_session": sum(1 for *_x, how in hits if how == NO_SESSION)}


@dataclass(slots=True)
class StoredCall:
    """What the call store holds of one call: its parts (one per record or spool file), their turns, its events."""

    sources: list[str] = field(default_factory=list)
    turns: int = 0
    events: list[tuple[int, str, int, str]] = field(default_factory=list)  # (seq, type, t_ms, data) in seq order


def store_figures(call_sids: Sequence[str], stored: dict[str, StoredCall], dropped: Iterable[str] = ()) -> dict:
    """Every call that ended against the store: stored, with turns, with its events to call.ended, numbered
    without a hole; stored twice (one call as a record and as a spooled summary, or an event stored twice:
    the same type, time and data under two numbers). ``dropped``: calls the gateway kill dropped (counted
    apart among the missing)."""
    from voicecore.store.spool import is_spooled

    dropped = set(dropped)
    missing = [sid for sid in call_sids if sid not in stored]
    present = [stored[sid] for sid in call_sids if sid in stored]
    unended = [sid for sid in call_sids if sid in stored and (not stored[sid].events or stored[sid].events[-1][1] != "call.ended")]
    both_ways = [c for c in present if any(is_spooled(s) for s in c.sources) and not all(is_spooled(s) for s in c.sources)]
    events_twice = [c for c in present if len({(kind, t_ms, data) for _seq, kind, t_ms, data in c.events}) < len(c.events)]
    return {
        "calls_ended": len(call_sids), "calls_stored": len(present),
        "calls_missing": len(missing), "calls_missing_dropped_by_gateway_kill": sum(sid in dropped for sid in missing),
        "calls_without_turns": sum(1 for c in present if not c.turns),
        "calls_without_events": sum(1 for c in present if not c.events),
        "calls_without_events_to_the_end": len(unended),
        "calls_without_events_to_the_end_dropped_by_gateway_kill": sum(sid in dropped for sid in unended),
        "calls_with_event_numbers_missing": sum(1 for c in present
                                                 if [e[0] for e in c.events] != list(range(1, len(c.events) + 1))),
        "calls_stored_both_ways": len(both_ways), "calls_with_an_event_twice": len(events_twice),
        "parts_max": max((len(c.sources) for c in present), default=0),
        "calls_spooled": sum(1 for c in present if c.sources and all(is_spooled(s) for s in c.sources)),
        "missing_sample": missing[:5],
    }


def read_stored_calls(url: str, call_sids: set[str], timeout_s: float) -> tuple[dict[str, StoredCall], str]:
    """Wait up to ``timeout_s`` for every call of ``call_sids`` in the store at ``url`` with its events to
    call.ended, then read what it holds of them; and why the store could not be read ("" when it could).
    Blocking: a thread's job."""
    from voicecore.store import CallStore

    deadline = time.monotonic() + timeout_s
    while True:
        stored: dict[str, StoredCall] = {}
        error = ""
        try:
            with CallStore.open(url) as store:
                db = store.backend
                turns = dict(db.execute("SELECT call_id, COUNT(*) FROM turns GROUP BY call_id").fetchall())
                for call_id, sid, source in db.execute("SELECT id, call_sid, source FROM calls").fetchall():
                    if sid in call_sids:
                        call = stored.setdefault(sid, StoredCall())
                        call.sources.append(source)
                        call.turns += int(turns.get(call_id, 0))
                for sid, seq, kind, t_ms, data in db.execute(
                        "SELECT call_sid, seq, type, t_ms, data FROM events ORDER BY call_sid, seq").fetchall():
                    if sid in stored:
                        stored[sid].events.append((int(seq), kind, int(t_ms), data))
        except Exception as exc:  # noqa: BLE001 (a store the bench cannot read is a figure to report, not a crash)
            error = f"{type(exc).__name__}: {exc}"
        whole = call_sids <= stored.keys() and all(c.events and c.events[-1][1] == "call.ended" for c in stored.values())
        if whole or time.monotonic() >= deadline:
            return stored, error
        time.sleep(0.5)


def longest_gap_ms(ticks_ms: Iterable[float]) -> float:
    """The longest run of consecutive gap ticks (one frame apart) times the frame length: the longest
    silence the caller heard inside an answer."""
    longest = run = 0
    previous = None
    for tick in sorted(ticks_ms):
        run = run + 1 if previous is not None and abs(tick - previous - FRAME_MS) < FRAME_MS / 2 else 1
        longest = max(longest, run)
        previous = tick
    return float(longest * FRAME_MS)


def window_figures(timelines: Sequence[CallTimeline], w0_ms: float, w1_ms: float) -> dict:
    """The figures of [w0_ms, w1_ms) over every call: calls dropped in it, the longest audible gap of any
    call in it (a gap run crossing an edge counts its ticks inside), stale, fallback and unknown frames that
    arrived in it, the latest answer to a caller who stopped speaking in it."""

    def inside(t: float) -> bool:
        return w0_ms <= t < w1_ms

    latencies = [latency for t in timelines for end, latency in t.turns if inside(end)]
    return {
        "calls_dropped": sum(1 for t in timelines if t.dropped and inside(t.ended_ms)),
        "max_gap_ms": max((longest_gap_ms(g for g in t.gap_ticks_ms if inside(g)) for t in timelines), default=0.0),
        "gap_ticks": sum(1 for t in timelines for g in t.gap_ticks_ms if inside(g)),
        "stale_frames": sum(1 for t in timelines for s in t.stale_ms if inside(s)),
        "fallback_frames": sum(1 for t in timelines for s in t.fallback_ms if inside(s)),
        "unknown_frames": sum(1 for t in timelines for s in t.unknown_ms if inside(s)),
        "answer_latency_max_ms": round(max(latencies), 1) if latencies else None,
    }


def calls_taken_after_ms(timelines: Sequence[CallTimeline], at_ms: float) -> float | None:
    """From ``at_ms`` until a call placed after it had its stream taken and served; None: none was."""
    accepted = [t.accepted_ms for t in timelines if t.started_ms >= at_ms and t.accepted_ms is not None]
    return round(min(accepted) - at_ms, 1) if accepted else None


def sessions_reopened(timelines: Sequence[CallTimeline], at_ms: float, w1_ms: float) -> dict:
    """Over the calls live at ``at_ms`` that were not dropped before ``w1_ms``: how many had a model session
    closed in [at_ms, w1_ms), how many had none open again by the window's end, and from ``at_ms`` until
    every one of them had a session open that stayed open to the window's end (0 when none was closed)."""
    closed_calls = not_reopened = 0
    worst = 0.0
    for t in timelines:
        if not t.started_ms <= at_ms < t.ended_ms or (t.dropped and t.ended_ms < w1_ms):
            continue
        end = min(w1_ms, t.ended_ms) - 1.0
        intervals = sorted((c, math.inf if cl is None else cl) for c, cl in t.sessions)
        if not any(at_ms <= closed < end for _c, closed in intervals):
            continue
        closed_calls += 1
        # merge the sessions' lives; the stretch covering the window's end is the one that held
        start = None
        stretch_start, stretch_end = None, -math.inf
        for c, cl in intervals:
            if stretch_start is None or c > stretch_end:
                stretch_start, stretch_end = c, cl
            else:
                stretch_end = max(stretch_end, cl)
            if stretch_start <= end < stretch_end:
                start = stretch_start
        if start is None:
            not_reopened += 1
            continue
        worst = max(worst, start - at_ms)
    if not closed_calls:
        reopened: float | None = 0.0
    else:
        reopened = None if not_reopened else round(worst, 1)
    return {"calls_with_session_closed": closed_calls, "calls_without_session_at_end": not_reopened,
            "sessions_reopened_ms": reopened}


def counter_delta(before: float | None, after: float | None) -> float:
    """A cumulative counter's growth; a counter that went down belongs to a restarted process (all of its
    count is new); 0 when it is absent."""
    if after is None:
        return 0.0
    if before is None or after < before:
        return after
    return after - before


def pacer_metric(metrics: dict, key: str) -> float | None:
    value = metrics.get("workers", {}).get("pacer", {}).get(key)
    return float(value) if value is not None else None


def leader_file(runtime_dir: str | Path, role: str) -> Path:
    return Path(runtime_dir) / f"leader-{role}.pid"


def read_leader_pid(runtime_dir: str | Path, role: str) -> int | None:
    """The active worker's pid as the standby workers publish it, None without the file
    (docs/explanation/failure-and-standby.md#hot-standby)."""
    try:
        return int(leader_file(runtime_dir, role).read_text().strip())
    except (OSError, ValueError):
        return None


# ----- the load: N calls, a dropped one replaced at once ----------------------------------------------

TOKEN_ENV = "BENCH_TWILIO_AUTH_TOKEN"
CREDENTIALS_ENV = "BENCH_CARRIER_CREDENTIALS"  # bench/loadgen.py's: the other carriers' secrets, as JSON
MIN_CALL_MS = 3000  # no fresh call is placed with less than this left before the common end
RETRY_MS = 50  # a placement that failed (gateway down) is tried again after about this long


def _mono_ms() -> float:
    return time.monotonic() * 1000.0


def strip_result(result):
    """Drop what the report never reads (the caller's clips, the playout queue) before pickling, as
    bench/loadgen.py does."""
    core = result.core
    if core is not None:
        if hasattr(core, "release_wire_state"):  # a carrier mode's adapter: its codecs and carrier sides too
            core.release_wire_state()
        else:
            core._clips = []
            core._queue.clear()
            core._outbox = []
    return result


async def _load(args: argparse.Namespace, t0_ms: float, end_ms: float) -> dict:
    from bench.scenarios import get_scenario
    from voicecore.sim.carrier import place_call, shared_ticker

    scenario = get_scenario(args.scenario)
    token = os.environ.get(TOKEN_ENV, "")
    credentials = None
    if args.carrier != "twilio":
        from voicecore.sim.carrier_modes_core import CarrierCredentials
        credentials = CarrierCredentials.from_json(os.environ.get(CREDENTIALS_ENV, ""))
    calls: list = []
    refused: list[dict] = []
    counts = {"done": 0, "failed": 0}

    async def slot(index: int) -> None:
        start_ms = t0_ms + args.ramp_ms * index / max(1, args.calls_total)
        if (delay := start_ms / 1000.0 - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        placed = 0
        while (left_ms := end_ms - _mono_ms()) >= MIN_CALL_MS or placed == 0:
            started = _mono_ms()
            # a fresh call is a fresh caller: its script starts with the greeting
            script = scenario.script(int(max(left_ms, 1000.0)), index + placed * args.calls_total)
            result = await place_call(args.base_url, token, script, args.lead_frames,
                                      unix_socket=args.unix_socket or None, carrier=args.carrier,
                                      credentials=credentials)
            ended = _mono_ms()
            placed += 1
            if result.core is None:  # never reached the stream: the gateway is down or refused it
                refused.append({"slot": index, "at_ms": started, "ended_ms": ended,
                                "reason": "; ".join(result.errors)[:200]})
                await asyncio.sleep(RETRY_MS * (0.5 + random.random()) / 1000.0)
                continue
            dropped = result.closed_by in DROPPED_BY
            counts["done"] += 1
            counts["failed"] += dropped
            meta = {"slot": index, "started_ms": started, "ended_ms": ended, "end_ms": end_ms,
                    "closed_by": result.closed_by}
            calls.append((strip_result(result), meta))
            if not dropped:
                return

    async def progress() -> None:
        ticker = shared_ticker()
        while True:
            print(json.dumps({"live": ticker.live(), **counts}), flush=True)
            await asyncio.sleep(1.0)

    from voicecore.sim.quiet_gc import collector_paused

    reporter = asyncio.create_task(progress())
    try:
        with collector_paused():
            await asyncio.gather(*(slot(i) for i in range(args.proc_index, args.calls_total, args.procs)))
    finally:
        reporter.cancel()
    return {"calls": calls, "refused": refused}


def load_main(argv: list[str] | None = None) -> None:
    """One chaos load process (`python -m bench.chaos`): bench/loadgen.py's protocol with the bench ("ready",
    one JSON line {"t0_ms", "end_ms"}, status lines, --out, "finished")."""
    import uvloop

    from bench.loadgen import LOAD_RT_PRIORITY
    from bench.pinning import parse_cpus
    from voicecore.priority import raise_priority

    parser = argparse.ArgumentParser(description="voicecore bench --scenario chaos: one load process")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--calls-total", type=int, required=True)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--proc-index", type=int, default=0)
    parser.add_argument("--ramp-ms", type=float, required=True)
    parser.add_argument("--lead-frames", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--unix-socket", default="")
    parser.add_argument("--cpus", default="")
    parser.add_argument("--carrier", default="twilio")
    args = parser.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, parse_cpus(args.cpus))
    raise_priority(fifo_priority=LOAD_RT_PRIORITY, nice=-10)
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line:
        return
    plan = json.loads(line)
    results = uvloop.run(_load(args, float(plan["t0_ms"]), float(plan["end_ms"])))
    out = Path(args.out)
    with open(out.with_suffix(".tmp"), "wb") as f:
        pickle.dump(results, f, protocol=pickle.HIGHEST_PROTOCOL)
    out.with_suffix(".tmp").replace(out)
    print("finished", flush=True)


# ----- the run ----------------------------------------------------------------------------------------

SPARE_SLOTS = 4


@dataclass
class Injected:
    """One fault as it happened."""

    spec: FaultSpec
    at_ms: float  # when it was injected (just before the kill or the first POST)
    note: str = ""  # why it was not injected ("" when it was)
    killed_pid: int | None = None
    pid_source: str = ""  # "leader_file" or "supervisord"
    sessions_hit: int | None = None  # the simulator's answer: live sessions the fault applied to
    new_pid: int | None = None
    pid_changed_ms: float | None = None
    heartbeat_ms: float | None = None  # the first heartbeat of the role the gateway saw after the kill
    store_up_ms: float | None = None  # the postgres fault: PostgreSQL accepting connections again
    gateway_up_ms: float | None = None  # a new gateway answered /healthz
    metrics_before: dict = field(default_factory=dict)
    metrics_after: dict = field(default_factory=dict)


class ChaosRun(LevelRun):
    """LevelRun's stack, warm-up and stop; the load of bench.chaos; a measure() that runs the fault schedule."""

    def __init__(self, opts: BenchOptions, calls: int, workdir: Path) -> None:
        super().__init__(opts, calls, workdir, None, "voicecore")
        self.faults = parse_faults(opts.chaos_faults)
        # A dropped call's slot rests before it is free again, and its replacement needs one meanwhile.
        self.spare_slots = calls + SPARE_SLOTS
        self.skipped: list[dict] = []
        self.injected: list[Injected] = []
        self.leader_files: dict[str, bool] = {}
        self.sim_port = 0
        self.end_ms = 0.0
        self.baseline_metrics: dict = {}
        # A recorder or console kill needs a call store: the run's own (records in its workdir, as the demo's),
        # unless the environment names one. VOICECORE_RECORD_CALLS=false: the store without record files.
        # The postgres fault: a PostgreSQL of the run's own (bench/postgres.py) is the store, whatever the
        # environment names.
        self.wants_store = any(spec.name in STORE_FAULTS for spec in self.faults)
        self.store: dict = {}
        self.postgres = None  # BenchPostgres, with the postgres fault
        self.postgres_restart: asyncio.Task | None = None

    async def start_system(self) -> None:
        if any(spec.name == POSTGRES for spec in self.faults):
            from bench.postgres import BenchPostgres, PostgresUnavailable
            from voicecore.demo import free_port

            self.postgres = BenchPostgres(self.workdir, free_port())
            try:
                await asyncio.to_thread(self.postgres.create)
            except PostgresUnavailable as exc:
                raise BenchError(str(exc)) from None
            self.store_url = self.postgres.url
        await super().start_system()

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            if self.postgres_restart is not None:
                self.postgres_restart.cancel()
                with contextlib.suppress(BaseException):
                    await self.postgres_restart
            if self.postgres is not None:
                await asyncio.to_thread(self.postgres.stop)

    async def run(self) -> dict:
        self.log_file = open(self.log_path, "wb")
        try:
            await self.start_system()
            await self.warm_up()
            await self.plan()
            t0_ms = await self.start_load()
            window = await self.measure(t0_ms)
        finally:
            await self.stop()
        return self.build_report(window)

    # ---- the plan ----

    async def plan(self) -> None:
        """Drop the vendor faults when the model simulator has no /faults (said in faults_skipped)."""
        self.sim_port = int((self.workdir / "sim.port").read_text())
        vendor = [spec for spec in self.faults if spec.vendor]
        if vendor:
            reason = await self._probe_faults()
            if reason:
                self.skipped.extend({"fault": spec.name, "reason": reason} for spec in vendor)
                self.faults = [spec for spec in self.faults if not spec.vendor]
        if not self.faults:
            raise BenchError("no fault left to inject: " + "; ".join(s["reason"] for s in self.skipped[:1]))

    async def _sim_request(self, method: str, body: dict | None = None) -> tuple[int, bytes]:
        from voicecore import http_client

        data = json.dumps(body).encode() if body is not None else b""
        headers = [("Content-Type", "application/json")] if body is not None else []
        return await http_client.send(method, f"http://127.0.0.1:{self.sim_port}/faults", headers, data, timeout_s=3.0)

    async def _probe_faults(self) -> str:
        """"" when the model simulator serves GET /faults (docs/reference/model-simulator.md#faults), else why not."""
        try:
            status, body = await self._sim_request("GET")
            if status != 200:
                return f"the model simulator has no /faults yet (GET /faults answered HTTP {status})"
            json.loads(body)
        except Exception as exc:  # noqa: BLE001 (any failure means the same: no fault endpoint to use)
            return f"the model simulator has no /faults yet ({type(exc).__name__}: {str(exc)[:120]})"
        return ""

    # ---- the load ----

    async def start_load(self) -> float:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env[TOKEN_ENV] = self.token
        if self.credentials is not None:  # --carrier other than twilio: the simulator's halves of the secrets
            env[CREDENTIALS_ENV] = self.credentials.to_json()
        carrier = self.opts.carrier
        for k in range(self.procs):
            self.loads.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.chaos", "--base-url", self.base_url, "--scenario", self.opts.scenario,
                *(["--carrier", carrier] if carrier != "twilio" else []),
                "--calls-total", str(self.calls), "--procs", str(self.procs), "--proc-index", str(k),
                "--ramp-ms", str(self.ramp_ms), "--lead-frames", str(self.lead_frames),
                "--out", str(self.workdir / f"load-{k}.pkl"),
                *(["--unix-socket", self.unix_socket] if self.unix_socket else []),
                *(["--cpus", self.cpus_arg] if self.cpus_arg else []),
                env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self.log_file))
        for k, proc in enumerate(self.loads):
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise BenchError(f"load process {k} did not start: {line[:200]!r}")
            self.readers.append(asyncio.create_task(self._read_status(proc.stdout, k)))
        t0_ms = _mono_ms() + 200.0
        self.end_ms = t0_ms + self.ramp_ms + self.settle_ms + run_length_ms(len(self.faults))
        for proc in self.loads:
            proc.stdin.write((json.dumps({"t0_ms": t0_ms, "end_ms": self.end_ms}) + "\n").encode())
            await proc.stdin.drain()
            proc.stdin.close()
        return t0_ms

    async def _read_status(self, stream: asyncio.StreamReader, k: int) -> None:
        """Keep load process k's latest status line ({"live", "done", "failed"}) in self.status."""
        while line := await stream.readline():
            with contextlib.suppress(ValueError):
                if line.startswith(b"{"):
                    self.status[k] = json.loads(line)

    # ---- the faults ----

    async def _gateway_json(self, path: str) -> dict:
        from voicecore import http_client

        unix_path = self.config.listen_unix_path
        url = f"http://{'localhost' if unix_path else self.config.listen}{path}"
        try:
            status, body = await http_client.send("GET", url, timeout_s=1.0, unix_socket=unix_path)
            # 503 too: its body says the same (a node with a worker down, or draining, is up and answering)
            return json.loads(body) if status in (200, 503) else {}
        except Exception:  # noqa: BLE001 (a gateway that is down or restarting answers nothing: that is the figure)
            return {}

    def _active_pid(self, role: str) -> tuple[int | None, str]:
        pid = read_leader_pid(self.config.runtime_dir, role)
        if pid is not None:
            return pid, "leader_file"
        return self.stack.program_pids().get(role), "supervisord"

    async def measure(self, t0_ms: float) -> LevelWindow:
        w0 = t0_ms + self.ramp_ms + self.settle_ms
        self.progress = Progress(f"bench chaos {self.calls} calls", (self.end_ms - _mono_ms()) / 1000.0 + 1.0)
        await self._sleep_until(w0, "ramp-up")
        self.baseline_metrics = await self._gateway_json("/metrics")
        self.leader_files = {role: leader_file(self.config.runtime_dir, role).exists()
                             for role in (*WORKER_KILLS, GATEWAY)}
        for spec, planned in zip(self.faults, fault_times_ms(w0, len(self.faults))):
            await self._sleep_until(planned, "quiet")
            before = await self._gateway_json("/metrics")
            injected = await self._inject(spec)
            injected.metrics_before = before
            self.injected.append(injected)
            if not injected.note:
                await self._watch(injected, injected.at_ms + OBSERVE_MS)
            await self._sleep_until(planned + OBSERVE_MS, spec.name)
            injected.metrics_after = await self._gateway_json("/metrics")
        w1 = fault_times_ms(w0, len(self.faults))[-1] + OBSERVE_MS
        await self._wait_for_load_end(w1)
        self.progress.finish()
        if self.wants_store:
            await self._read_store()
        window = LevelWindow(w0_ms=w0, w1_ms=w1, seconds=(w1 - w0) / 1000.0, live_at_start=0, cpu_by_process={},
                             load_cpu_by_pid={}, loaded_memory={}, affinity={}, scheduling={})
        window.metrics = await self._gateway_json("/metrics")
        return window

    async def _inject(self, spec: FaultSpec) -> Injected:
        if spec.name == POSTGRES:
            return self._kill_postgres(spec)
        if spec.kill:
            pid, source = self._active_pid(spec.kill)
            if not pid_alive(pid):
                return Injected(spec, _mono_ms(), note=f"no live {spec.kill} process to kill", pid_source=source)
            at = _mono_ms()
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return Injected(spec, at, note=f"the {spec.kill} ({pid}) was gone before the kill", pid_source=source)
            return Injected(spec, at, killed_pid=pid, pid_source=source)
        at = _mono_ms()
        injected = Injected(spec, at)
        for kind, duration_ms in spec.vendor:
            try:
                status, body = await self._sim_request("POST", {"kind": kind, "duration_ms": duration_ms})
            except Exception as exc:  # noqa: BLE001 (reported as the fault's note)
                injected.note = f"POST /faults {kind}: {type(exc).__name__}: {str(exc)[:120]}"
                break
            if status != 200:
                injected.note = f"POST /faults {kind} answered HTTP {status}: {body[:120].decode(errors='replace')}"
                break
            with contextlib.suppress(ValueError, AttributeError):
                sessions = json.loads(body).get("sessions")
                injected.sessions_hit = (injected.sessions_hit or 0) + int(sessions)
        return injected

    def _kill_postgres(self, spec: FaultSpec) -> Injected:
        """SIGKILL of the postmaster now; started again POSTGRES_DOWN_MS later, or after the calls ended when this
        is the last fault (a task: the schedule goes on)."""
        assert self.postgres is not None
        at = _mono_ms()
        pid = self.postgres.kill()
        if pid is None:
            return Injected(spec, at, note="no PostgreSQL running to kill", pid_source="postmaster.pid")
        injected = Injected(spec, at, killed_pid=pid, pid_source="postmaster.pid")

        down_ms = POSTGRES_DOWN_MS
        if self.faults[-1].name == POSTGRES:
            down_ms = max(down_ms, self.end_ms + POSTGRES_AFTER_END_MS - at)

        async def restart() -> None:
            await asyncio.sleep(down_ms / 1000.0)
            try:
                await asyncio.to_thread(self.postgres.start)
            except Exception as exc:  # noqa: BLE001 (the run goes on: every call's store figure will say it)
                self.problems.append(f"PostgreSQL did not start again: {exc}")
                return
            injected.store_up_ms = _mono_ms()
            injected.new_pid = self.postgres.postmaster_pid()

        self.postgres_restart = asyncio.create_task(restart())
        return injected

    async def _watch(self, injected: Injected, until_ms: float) -> None:
        """Poll until the killed role is back: its leader pid changed, and (a worker) the gateway saw its
        heartbeat again, or (the gateway) a new gateway answers. Vendor faults are judged from the records."""
        if injected.spec.name == POSTGRES and self.postgres_restart is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.postgres_restart), max(0.0, until_ms - _mono_ms()) / 1000.0)
            return
        role = injected.spec.kill
        if not role:
            return
        while _mono_ms() < until_ms:
            self._show(injected.spec.name)
            if injected.pid_changed_ms is None:
                pid, _source = self._active_pid(role)
                if pid and pid != injected.killed_pid and pid_alive(pid):
                    injected.new_pid, injected.pid_changed_ms = pid, _mono_ms()
            asked = _mono_ms()
            if role == GATEWAY:
                health = await self._gateway_json("/healthz")
                if health and injected.gateway_up_ms is None:
                    injected.gateway_up_ms = _mono_ms()
                done = injected.gateway_up_ms is not None and injected.pid_changed_ms is not None
            else:
                health = await self._gateway_json("/healthz")
                age = health.get("workers_heartbeat_age_ms", {}).get(role)
                seen = (asked + _mono_ms()) / 2.0 - age if age is not None else None
                # A heartbeat the dead worker sent just before the kill may be read a moment later: one
                # frame's margin (the gateway drains its inbox far faster than that).
                if seen is not None and seen > injected.at_ms + FRAME_MS and injected.heartbeat_ms is None:
                    injected.heartbeat_ms = seen
                done = injected.heartbeat_ms is not None and injected.pid_changed_ms is not None
            if done:
                return
            await asyncio.sleep(POLL_MS / 1000.0)

    async def _read_store(self) -> None:
        """Every call whose stream was served, in the store (the stack still runs: the recorder finishes)."""
        from voicecore.store import database_url_for

        if self.postgres_restart is not None:  # PostgreSQL back (or given up on) before the store is read
            with contextlib.suppress(Exception):
                await self.postgres_restart
        calls, _refused = self._chaos_results()
        served = [result.call_sid for result, _meta in calls if result.core is not None and result.core.frames]
        dropped = [result.call_sid for result, _meta in calls if result.closed_by in DROPPED_BY]
        started = time.monotonic()
        stored, error = await asyncio.to_thread(read_stored_calls, database_url_for(self.config), set(served), STORE_WAIT_S)
        self.store = {**store_figures(served, stored, dropped), "waited_s": round(time.monotonic() - started, 1),
                      "record_files": self.config.record_calls and bool(self.config.record_dir)}
        restarts = [i for i in self.injected if i.spec.name == POSTGRES and not i.note]
        if restarts:
            self.store["database"] = "postgresql (the run's own, killed and restarted)"
            self.store["store_down_ms"] = [round(i.store_up_ms - i.at_ms, 1) if i.store_up_ms else None for i in restarts]
            # A store outage must lose nothing the recorder had: every event of every call that ended, numbered
            # without a hole (a call the gateway kill dropped has no call.ended of its own).
            for key in ("calls_without_turns", "calls_with_event_numbers_missing"):
                if self.store[key]:
                    self.problems.append(f"call store: {key} {self.store[key]}")
            unended = self.store["calls_without_events_to_the_end"] - self.store[
                "calls_without_events_to_the_end_dropped_by_gateway_kill"]
            if unended:
                self.problems.append(f"call store: calls_without_events_to_the_end {unended} (not dropped by a gateway kill)")
        if error:
            self.problems.append(f"the call store could not be read: {error}")
        for key in ("calls_missing", "calls_stored_both_ways", "calls_with_an_event_twice"):
            if self.store[key]:
                self.problems.append(f"call store: {key} {self.store[key]}")

    # ---- the report ----

    def _chaos_results(self) -> tuple[list, list[dict]]:
        calls: list = []
        refused: list[dict] = []
        for k in range(self.procs):
            path = self.workdir / f"load-{k}.pkl"
            if not path.exists():
                self.problems.append(f"load process {k} wrote no results")
                continue
            with open(path, "rb") as f:
                data = pickle.load(f)
            calls.extend(data["calls"])
            refused.extend(data["refused"])
        return calls, refused

    def build_report(self, window: LevelWindow) -> dict:
        from bench import analysis
        from voicecore.callreport import canonical_frame
        from voicecore.fallback import load_clips

        calls, refused = self._chaos_results()
        records = analysis.RecordSet(self._model_records())
        fallback = frozenset(canonical_frame(p) for p in load_clips().frame_payloads())
        timelines = [call_timeline(result, meta, records.records(result.call_sid), fallback, self.opts.starved_grace_ms)
                     for result, meta in calls]
        faults = [fault_report(i, timelines, refused) for i in self.injected if not i.note]
        self.skipped.extend({"fault": i.spec.name, "reason": i.note} for i in self.injected if i.note)
        baseline = window_figures(timelines, window.w0_ms, window.w0_ms + QUIET_MS)
        gateway_at = [i.at_ms for i in self.injected if i.spec.kill == GATEWAY and not i.note]
        unplanned = [t for t in timelines if t.dropped and not any(at <= t.ended_ms < at + OBSERVE_MS for at in gateway_at)]
        report = {
            "scenario": "chaos", "system": "voicecore", "calls": self.calls, "carrier": self.opts.carrier,
            "faults": faults, "faults_skipped": self.skipped, "baseline_window": baseline,
            "schedule": {"quiet_ms": QUIET_MS, "observe_ms": OBSERVE_MS, "faults": [s.name for s in self.faults],
                         "ramp_ms": self.ramp_ms, "settle_ms": self.settle_ms},
            "leader_files": self.leader_files,
            "calls_placed": len(timelines), "calls_dropped": sum(t.dropped for t in timelines),
            "calls_dropped_outside_gateway_kill": len(unplanned), "placements_refused": len(refused),
            "stale_frames": sum(len(t.stale_ms) for t in timelines),
            "fallback_lines_metric": pacer_metric(window.metrics, "fallback_lines") is not None,
            "sessions_open_metric": "sessions_open" in window.metrics.get("workers", {}).get("model", {}),
            "store": self.store,
            "problems": self.problems[:50],
        }
        report["ok"] = bool(not unplanned and report["stale_frames"] == 0 and not self.problems and faults)
        if self.opts.keep_logs or not report["ok"]:
            report["_log_tail"] = self.log_path.read_text(errors="replace")[-6000:]
        return report


def fault_report(injected: Injected, timelines: Sequence[CallTimeline], refused: Sequence[dict]) -> dict:
    """One entry of the report's `faults`: the window's figures and the fault's recovery."""
    at, spec = injected.at_ms, injected.spec
    w1 = at + OBSERVE_MS
    figures = window_figures(timelines, at, w1)
    sessions = sessions_reopened(timelines, at, w1)
    entry = {"fault": spec.name, "description": spec.description, "at_ms": round(at, 1),
             "calls_dropped": figures["calls_dropped"], "max_gap_ms": figures["max_gap_ms"],
             "fallback_lines": counter_delta(pacer_metric(injected.metrics_before, "fallback_lines"),
                                             pacer_metric(injected.metrics_after, "fallback_lines")),
             "stale_frames": figures["stale_frames"], "recovery_ms": None, "recovery_from": "",
             "fallback_lines_counter": [pacer_metric(injected.metrics_before, "fallback_lines"),
                                        pacer_metric(injected.metrics_after, "fallback_lines")],
             "answer_latency_max_ms": figures["answer_latency_max_ms"],
             "gap_ticks": figures["gap_ticks"], "fallback_frames": figures["fallback_frames"],
             "unknown_frames": figures["unknown_frames"],
             "placements_refused": sum(1 for r in refused if at <= r["at_ms"] < w1), **sessions}
    if spec.kill or spec.name == POSTGRES:
        entry.update(killed_pid=injected.killed_pid, new_pid=injected.new_pid, pid_source=injected.pid_source)
    if spec.name == POSTGRES:
        entry["store_down_ms"] = round(injected.store_up_ms - at, 1) if injected.store_up_ms else None
        entry["recovery_ms"], entry["recovery_from"] = entry["store_down_ms"], "PostgreSQL accepting connections again"
    elif spec.kill == GATEWAY:
        taken = calls_taken_after_ms(timelines, at)
        entry.update(reattach_figures(timelines, at, w1))
        entry["calls_taken_after_ms"] = taken
        entry["gateway_up_ms"] = round(injected.gateway_up_ms - at, 1) if injected.gateway_up_ms else None
        entry["recovery_ms"], entry["recovery_from"] = taken, "a new call's stream accepted"
    elif spec.kill:
        if injected.pid_changed_ms is not None and injected.heartbeat_ms is not None:
            entry["recovery_ms"] = round(max(injected.pid_changed_ms, injected.heartbeat_ms) - at, 1)
        entry["recovery_from"] = f"{spec.kill}'s leader pid changed and its heartbeat fresh in /healthz"
    else:
        entry["sessions_hit"] = injected.sessions_hit
        entry["recovery_ms"] = sessions["sessions_reopened_ms"]
        entry["recovery_from"] = "every live call's model session open again (the model simulator's records)"
    return entry


# ----- the command --------------------------------------------------------------------------------

def check_options(opts: BenchOptions) -> str:
    """Why these options cannot run the chaos scenario ("" when they can)."""
    if opts.baseline or opts.target or opts.find_capacity or opts.compare_store or opts.profile:
        return ("the chaos scenario kills the processes of a stack it starts itself: not with --baseline, --target, "
                "--find-capacity, --compare-store or --profile")
    try:
        parse_faults(opts.chaos_faults)
    except ValueError as exc:
        return str(exc)
    return ""


async def _chaos(opts: BenchOptions) -> dict:
    from bench.report import machine_info, versions
    from bench.scenarios import get_scenario

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    os.environ["VOICECORE_REALTIME_PRIORITY"] = "1" if opts.privileges == "on" else "0"
    with tempfile.TemporaryDirectory(prefix="voicecore-bench-chaos-") as tmp:
        report = await ChaosRun(opts, opts.calls, Path(tmp)).run()
    report["command"] = shlex.join(sys.argv)
    report["privileges"] = {"mode": opts.privileges}
    report["machine"] = machine_info()
    report["versions"] = versions()
    options = dataclasses.asdict(opts)
    options.pop("auth_token", None)
    report["configuration"] = {"options": options, "config_file": opts.config_path,
                               "scenario": {"name": "chaos", "description": get_scenario("chaos").description}}
    return report


def _cell(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_chaos_table(report: dict) -> str:
    """The console table: one line per fault. `fallback` is the pacer's count of lines it started, `fb frames` the
    fallback-line frames the callers heard, found by their content."""
    columns = (("fault", 24), ("dropped", 8), ("max gap ms", 11), ("fallback", 9), ("fb frames", 10), ("stale", 6),
               ("recovery ms", 12), ("answer max ms", 14), ("taken after ms", 15))
    lines = [f"voicecore bench chaos: {report['calls']} {report.get('carrier', 'twilio')} calls, {len(report['faults'])} faults "
             f"({report['schedule']['quiet_ms'] / 1000:.0f} s quiet, {report['schedule']['observe_ms'] / 1000:.0f} s "
             "observed each)",
             "".join(name.rjust(width) if i else name.ljust(width) for i, (name, width) in enumerate(columns))]
    for row in [{"fault": "(baseline, no fault)", **report["baseline_window"], "fallback_lines": None,
                 "recovery_ms": None}, *report["faults"]]:
        cells = (row["fault"], _cell(row["calls_dropped"]), _cell(row["max_gap_ms"]), _cell(row["fallback_lines"]),
                 _cell(row["fallback_frames"]), _cell(row["stale_frames"]), _cell(row["recovery_ms"]),
                 _cell(row["answer_latency_max_ms"]),
                 _cell(row.get("calls_taken_after_ms")))
        lines.append("".join(c.rjust(w) if i else c.ljust(w) for i, (c, (_n, w)) in enumerate(zip(cells, columns))))
    for fault in report["faults"]:
        if "calls_reattached" in fault:
            lines.append(f"{fault['fault']}: {fault['calls_reattached']} calls re-attached, {fault['calls_dropped']} "
                         f"dropped; caller without a stream p50 {_cell(fault['reattach_silence_p50_ms'])} ms, p95 "
                         f"{_cell(fault['reattach_silence_p95_ms'])} ms, max {_cell(fault['reattach_silence_max_ms'])} ms; "
                         f"conversations restored {fault['conversations_restored']} of {fault['calls_reattached']} "
                         f"({fault['reattached_without_history']} without history, {fault['reattached_greeted_again']} "
                         f"greeted again, {fault['reattached_without_model_session']} without a model session)")
    for skipped in report["faults_skipped"]:
        lines.append(f"skipped {skipped['fault']}: {skipped['reason']}")
    present = [role for role, there in report["leader_files"].items() if there]
    lines.append(f"leader files: {', '.join(present) if present else 'none'} (the others' pids from supervisord); "
                 f"calls placed {report['calls_placed']}, dropped {report['calls_dropped']} "
                 f"({report['calls_dropped_outside_gateway_kill']} outside a gateway kill), "
                 f"placements refused {report['placements_refused']}")
    store = report.get("store")
    if store:
        lines.append(f"call store ({'records' if store['record_files'] else 'no record files'}): "
                     f"{store['calls_stored']} of {store['calls_ended']} calls that ended stored "
                     f"({store['calls_missing']} missing, {store['calls_missing_dropped_by_gateway_kill']} of them dropped "
                     f"by the gateway kill), {store['calls_without_turns']} without turns, "
                     f"{store['calls_without_events_to_the_end']} without events to call.ended "
                     f"({store['calls_without_events_to_the_end_dropped_by_gateway_kill']} dropped by the gateway kill), "
                     f"{store['calls_with_event_numbers_missing']} with event numbers missing; stored twice: "
                     f"{store['calls_stored_both_ways']} calls, {store['calls_with_an_event_twice']} with an event twice"
                     + (f"; PostgreSQL down {', '.join(_cell(ms) for ms in store['store_down_ms'])} ms"
                        if "store_down_ms" in store else ""))
    return "\n".join(lines)


def write_chaos_png(path: str, report: dict) -> str:
    """Per fault: the longest gap and the recovery time, with the calls dropped written beside."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    faults = report["faults"]
    names = [f["fault"] for f in faults]
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.2 + 0.4 * len(faults)), sharey=True)
    for ax, key, title in ((axes[0], "max_gap_ms", "longest audible gap (ms)"),
                           (axes[1], "recovery_ms", "recovery (ms)")):
        values = [f[key] or 0 for f in faults]
        ax.barh(range(len(faults)), values, color=["tab:red" if f["calls_dropped"] else "tab:blue" for f in faults])
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
        for y, (value, fault) in enumerate(zip(values, faults)):
            ax.text(value, y, f" {value:.0f}" + (f"  dropped {fault['calls_dropped']}" if fault["calls_dropped"] else ""),
                    va="center", fontsize=8)
    axes[0].set_yticks(range(len(faults)), names)
    axes[0].invert_yaxis()
    fig.suptitle(f"voicecore bench chaos, {report['calls']} calls (red: calls dropped)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"PNG report written to {path}"


def run_chaos(opts: BenchOptions) -> int:
    """`voicecore bench --scenario chaos`: the run, its table, JSON and PNG. 0 when no call was dropped
    outside a gateway kill and no frame was stale."""
    problem = check_options(opts)
    if problem:
        print(f"voicecore bench: {problem}", file=sys.stderr)
        return 2
    save_path, problem = save_path_for(opts)
    if problem:
        print(f"voicecore bench: {problem}", file=sys.stderr)
        return 2
    report, code = run_async(_chaos(opts))
    if report is None:
        return code
    log_tail = report.pop("_log_tail", None)
    if log_tail and opts.keep_logs:
        sys.stderr.write(log_tail + "\n")
    print(format_chaos_table(report))
    text = json.dumps(report, indent=1) + "\n"
    for path in filter(None, (opts.json_path, save_path)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        print(f"bench: JSON report written to {path}", file=sys.stderr)
    png = opts.png_path or (str(Path(opts.json_path).with_suffix(".png")) if opts.json_path else None)
    if png and report["faults"]:
        print(f"bench: {write_chaos_png(png, report)}", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    load_main()
