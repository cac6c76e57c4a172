"""What the callers heard, as figures: one function shared by the demo, the bench and the tests.

Owns the definitions of the reported figures (key names are a public contract: `voicecore demo --json`
and the bench use them). Inputs are the carrier simulator's call results and the model simulator's
session records, both timed on this process's CLOCK_MONOTONIC; frames are matched to model responses
by content (the simulator dithers each response, so no two responses share a frame).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from voicecore import timing
from voicecore.sim.carrier import CallResult
from voicecore.stats import summary
from voicecore.supervise import Stack, cpu_seconds

TRUNCATE_TOLERANCE_MS = 20  # the bar: the truncate point within one frame of what was played
# An underrun is the model's when the audio due next was sent less than this before the gap: the pacer
# may hold a dry carrier's first frame for DEFAULT_START_HOLD_MS to prefill, plus one frame of pacing.
STARVED_GRACE_MS = timing.DEFAULT_START_HOLD_MS + timing.FRAME_MS
# A clear is a barge-in's when the caller started speaking at most BARGEIN_CLEAR_WINDOW_MS before it (one
# definition with the carrier simulator's barge-ins without a clear: voicecore/timing.py). Later clears are
# the stack's own: a gate rejection, a stalled response.
BARGEIN_CLEAR_WINDOW_MS = timing.BARGEIN_CLEAR_WINDOW_MS
# A clear this soon after a response that the model started while another was still in progress
# (ResponseRecord.overlaps), with no speech start in the barge-in window, is the runtime superseding the
# older response: the newer one wins, the older one's queued audio is cleared. Not a barge-in, not a problem.
SUPERSEDE_CLEAR_WINDOW_MS = 1500
# Played frames belong to one stretch of agent audio while each starts this close to the previous one's end.
CONTIGUOUS_PLAY_MS = 1.0


class StackCpu:
    """utime + stime of every voicecore process (supervisord, gateway, pacer, model) over a run."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.before: dict[int, float] = {}

    def _pids(self) -> list[int]:
        pids = [pid for name, pid in self.stack.program_pids().items() if name != "modelsim"]
        if self.stack.process is not None:
            pids.append(self.stack.process.pid)
        return pids

    def start(self) -> None:
        self.before = {pid: cpu_seconds(pid) for pid in self._pids()}

    def stop(self) -> float:
        # A process that restarted during the run counts from zero: all its CPU was in the run.
        return sum(cpu_seconds(pid) - self.before.get(pid, 0.0) for pid in self._pids())


def frame_owners(records: Sequence) -> dict[bytes, tuple[object, int]]:
    """Full 160-byte frame content -> (ResponseRecord, frame index) over the records' responses."""
    owners: dict[bytes, tuple[object, int]] = {}
    for record in records:
        for response in record.responses:
            for index, frame in enumerate(response.frames()):
                if len(frame) == timing.FRAME_BYTES:
                    owners[frame] = (response, index)
    return owners


def frame_sent_ms(response, frame_index: int) -> int | None:
    """When the model sent the last byte of frame ``frame_index`` of ``response`` (None: never)."""
    need = min((frame_index + 1) * timing.FRAME_BYTES, len(response.audio))
    total = 0
    for size, sent_ms in zip(response.delta_bytes, response.delta_sent_ms):
        total += size
        if total >= need:
            return sent_ms
    return None


def owners_at(core, records: Sequence, ticks: Sequence[float]) -> list:
    """Per tick, (response, frame index) of the last frame the carrier played before it (None: not one
    of these records' frames, or nothing played yet)."""
    owners = frame_owners(records)
    played = core.played
    played_at = [frame.played_at_ms for frame in played]
    result = []
    for tick in ticks:
        position = bisect.bisect_left(played_at, tick) - 1
        payload = played[position].payload if position >= 0 else None
        result.append(owners.get(payload) if payload else None)
    return result


def split_underruns(result: CallResult, records: Sequence, w0: float, w1: float,
                    grace_ms: float = STARVED_GRACE_MS) -> tuple[int, int]:
    """(with audio available, model-starved) underrun ticks of one call in [w0, w1).

    An underrun tick at t is model-starved when the frame that should have played next (the one after
    the last frame played, in the same response) had not been sent by the model at least ``grace_ms``
    before t. Anything that cannot be tied to a response counts as available (against voicecore).
    """
    core = result.core
    if core is None:
        return 0, 0
    ticks = [t for t in core.metrics.underrun_at_ms if w0 <= t < w1]
    if not ticks:
        return 0, 0
    available = starved = 0
    for tick, owner in zip(ticks, owners_at(core, records, ticks)):
        if owner is None:
            available += 1
            continue
        response, index = owner
        if (index + 1) * timing.FRAME_BYTES >= len(response.audio):
            available += 1  # the response had no more audio: the spurt should have ended
            continue
        sent_ms = frame_sent_ms(response, index + 1)
        if sent_ms is None or sent_ms > tick - grace_ms:
            starved += 1
        else:
            available += 1
    return available, starved


def talkover_ms(core, speech_started_ms: Sequence[float]) -> list[float]:
    """Per speech start at which the carrier was playing agent audio (a played frame covers it), how long
    the agent's audio went on after it: the end of the contiguous stretch of played frames covering it
    (each frame starting within CONTIGUOUS_PLAY_MS of the previous one's end; a frame a clear cut ends
    where it was cut) minus the speech start. Speech starts while the agent was silent give no sample."""
    played = core.played
    if not played or not speech_started_ms:
        return []
    starts = [frame.played_at_ms for frame in played]
    # the end of the stretch each frame belongs to, from the last frame back
    stretch_end = [0.0] * len(played)
    for i in range(len(played) - 1, -1, -1):
        frame = played[i]
        end = frame.played_at_ms + frame.played_ms
        if i + 1 < len(played) and abs(starts[i + 1] - end) <= CONTIGUOUS_PLAY_MS:
            end = stretch_end[i + 1]
        stretch_end[i] = end
    samples = []
    for at in speech_started_ms:
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and at < starts[i] + played[i].played_ms:
            samples.append(stretch_end[i] - at)
    return samples


def _call_figures(result: CallResult, sessions: Sequence, window_ms: tuple[float, float] | None = None) -> dict:
    """Per-call figures that need both simulators' records."""
    core = result.core
    figures = {"bargein_to_clear_ms": [], "truncate_error_ms": [], "mouth_to_ear_ms": [], "problems": [],
               "clears_not_bargein": 0, "clears_superseded": 0, "talkover_ms": [], "overlapping_responses": 0,
               "late_deltas_sent": 0}
    overlap_created: list[int] = []
    for session in sessions:
        for response in session.record.responses:
            figures["late_deltas_sent"] += response.late_deltas
            if response.overlaps is not None:
                overlap_created.append(response.created_ms)
    figures["overlapping_responses"] = len(overlap_created)
    if core is None:
        return figures
    owners: dict[bytes, str] = {}
    responses = {}
    for session in sessions:
        for response in session.record.responses:
            responses[response.response_id] = response
            for frame in response.frames():
                if len(frame) == timing.FRAME_BYTES:
                    owners[frame] = response.response_id
    # Which voicecore tag carried which response, and when each response's first frame arrived.
    tag_of: dict[str, int] = {}
    first_arrival: dict[str, float] = {}
    for frame in core.frames:
        rid = owners.get(frame.payload) if frame.payload is not None else None
        if rid is None:
            continue
        if frame.tag is not None:
            tag_of.setdefault(rid, frame.tag)
        first_arrival.setdefault(rid, frame.arrival_ms)
    for rid, arrival in first_arrival.items():
        first_delta = responses[rid].first_delta_ms
        if first_delta is not None:
            figures["mouth_to_ear_ms"].append(arrival - first_delta)
    speech_starts = sorted(s for session in sessions for s in session.record.speech_started_ms)
    for clear_ms in core.metrics.clear_at_ms:
        earlier = [s for s in speech_starts if s <= clear_ms]
        if earlier and clear_ms - earlier[-1] <= BARGEIN_CLEAR_WINDOW_MS:
            figures["bargein_to_clear_ms"].append(clear_ms - earlier[-1])
        elif any(created <= clear_ms <= created + SUPERSEDE_CLEAR_WINDOW_MS for created in overlap_created):
            figures["clears_superseded"] += 1
        elif earlier:
            figures["clears_not_bargein"] += 1
        else:
            figures["problems"].append(f"call {result.call_sid}: a clear with no speech before it")
    if window_ms is not None:
        speech_starts = [s for s in speech_starts if window_ms[0] <= s < window_ms[1]]
    figures["talkover_ms"] = talkover_ms(core, speech_starts)
    for session in sessions:
        for truncate in session.record.truncates:
            try:
                response = session.record.response_for_item(truncate.item_id)
            except KeyError:
                figures["problems"].append(f"call {result.call_sid}: truncate of an unknown item")
                continue
            tag = tag_of.get(response.response_id)
            heard_ms = core.played_ms_of_tag(tag) if tag is not None else 0.0
            figures["truncate_error_ms"].append(abs(truncate.audio_end_ms - heard_ms))
        for item_id in session.record.deleted_item_ids:
            try:
                response = session.record.response_for_item(item_id)
            except KeyError:
                continue
            tag = tag_of.get(response.response_id)
            figures["truncate_error_ms"].append(core.played_ms_of_tag(tag) if tag is not None else 0.0)
    return figures


def summarize(results: Sequence[CallResult], sim, *, seconds: float, cpu_seconds: float, wall_seconds: float,
              stack_metrics: dict | None = None, expect_bargeins: bool = True,
              window_ms: tuple[float, float] | None = None) -> dict:
    """``expect_bargeins``: every call's script barges in, so a call without a clear is a problem
    (the bench turns it off for scenarios without barge-ins). ``window_ms``: (w0, w1): talkover only for
    speech that started in [w0, w1) (the bench's measured window; the carrier figures come trimmed).

    Issue 13's figures: ``overlapping_frames`` (frames the caller heard of an older response after a
    newer one began: two voices), ``bargeins_without_clear`` (barge-ins with no clear within
    BARGEIN_CLEAR_WINDOW_MS), ``overlapping_responses`` (responses the model simulator started while
    another was in progress), ``late_deltas_sent`` (audio deltas it sent after a cancel), ``talkover_ms``
    (talkover_ms()), ``clears_superseded`` (SUPERSEDE_CLEAR_WINDOW_MS)."""
    lateness: list[float] = []
    talkover: list[float] = []
    bargein: list[float] = []
    truncate: list[float] = []
    mouth_to_ear: list[float] = []
    problems: list[str] = []
    frames_sent = underruns = stale = clears = completed = 0
    underruns_available = underruns_starved = clears_not_bargein = clears_superseded = 0
    overlapping_frames = bargeins_without_clear = overlapping_responses = late_deltas_sent = 0
    for result in results:
        if result.closed_by != "carrier" or result.errors:
            problems.append(f"call {result.call_sid}: ended by {result.closed_by} (close code {result.close_code}) {'; '.join(result.errors)[:200]}")
        else:
            completed += 1
        sessions = sim.by_call(result.call_sid)
        if result.core is None:
            figures = _call_figures(result, sessions)
            overlapping_responses += figures["overlapping_responses"]
            late_deltas_sent += figures["late_deltas_sent"]
            continue
        stats = result.statistics
        frames_sent += stats.frames_received
        underruns += stats.underruns
        stale += stats.stale_frames
        clears += stats.clears_received
        overlapping_frames += stats.overlapping_frames
        bargeins_without_clear += stats.bargeins_without_clear
        lateness.extend(result.core.metrics.lateness_ms)
        available, starved = split_underruns(result, [s.record for s in sessions], float("-inf"), float("inf"))
        underruns_available += available
        underruns_starved += starved
        figures = _call_figures(result, sessions, window_ms)
        bargein.extend(figures["bargein_to_clear_ms"])
        clears_not_bargein += figures["clears_not_bargein"]
        clears_superseded += figures["clears_superseded"]
        talkover.extend(figures["talkover_ms"])
        overlapping_responses += figures["overlapping_responses"]
        late_deltas_sent += figures["late_deltas_sent"]
        truncate.extend(figures["truncate_error_ms"])
        mouth_to_ear.extend(figures["mouth_to_ear_ms"])
        problems.extend(figures["problems"])
        if expect_bargeins and stats.clears_received == 0:
            problems.append(f"call {result.call_sid}: the barge-in produced no clear")
    calls = len(results)
    call_seconds = calls * seconds
    report = {
        "calls": calls,
        "seconds": seconds,
        "calls_completed": completed,
        "frames_sent": frames_sent,
        "lateness_ms": summary(lateness),
        "underruns": underruns,
        "underruns_audio_available": underruns_available,
        "underruns_model_starved": underruns_starved,
        "stale_frames": stale,
        "bargeins": clears - clears_not_bargein - clears_superseded,
        "clears_not_bargein": clears_not_bargein,
        "clears_superseded": clears_superseded,
        "bargeins_without_clear": bargeins_without_clear,
        "bargein_to_clear_ms": summary(bargein),
        "talkover_ms": summary(talkover),
        "overlapping_frames": overlapping_frames,
        "overlapping_responses": overlapping_responses,
        "late_deltas_sent": late_deltas_sent,
        "truncate_error_ms": summary(truncate),
        "mouth_to_ear_ms": summary(mouth_to_ear),
        "cpu_ms_per_call_second": round(cpu_seconds * 1000 / call_seconds, 3) if call_seconds else 0.0,
        "cpu_seconds": round(cpu_seconds, 3),
        "wall_seconds": round(wall_seconds, 3),
    }
    if stack_metrics:
        pacer = stack_metrics.get("workers", {}).get("pacer", {})
        report["pacer_tick_lateness_ms"] = {k.removeprefix("tick_lateness_").removesuffix("_ms"): v for k, v in pacer.items() if k.startswith("tick_lateness_") and k.endswith("_ms")}
        report["pacer_frames_skipped"] = int(pacer.get("frames_skipped", 0))
        report["gateway_bargein_decision_to_clear_ms"] = stack_metrics.get("bargein_decision_to_clear_ms", {})
    # the two-voices figures first: one line each, ahead of the per-call lines the list is cut after
    if bargeins_without_clear:
        problems.insert(0, f"{bargeins_without_clear} barge-in(s) got no clear within {BARGEIN_CLEAR_WINDOW_MS} ms")
    if overlapping_frames:
        problems.insert(0, f"{overlapping_frames} frame(s) of an older response played after a newer one's began (two voices)")
    report["problems"] = problems[:50]
    report["ok"] = bool(
        calls
        and completed == calls
        and stale == 0
        and overlapping_frames == 0
        and bargeins_without_clear == 0
        and underruns_available == 0
        and not problems
        and (not truncate or max(truncate) <= TRUNCATE_TOLERANCE_MS)
    )
    return report
