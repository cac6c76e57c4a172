"""What the callers heard, as figures: one function shared by the demo, the bench and the tests.

Owns the definitions of the reported figures (key names are a public contract: `voicecore demo --json`
and the bench use them). Inputs are the carrier simulator's call results and the model simulator's
session records (or the pipecat stand-in's, in the same shape), all timed on CLOCK_MONOTONIC; frames are
matched to model responses by content (the simulator dithers each response, so no two responses share a
frame), never by the sender's marks, so every sender is measured the same way.

Lateness and underruns, from the carrier's playout clock (playout_figures). A talk spurt is the frames of
one response the carrier played one after another (the same response, no clear in between, no other
frame played between them). The caller hears frame k of a spurt at play_k. Its play deadline is the tick
it would have played on had the spurt played without a gap since its anchor (the spurt's first frame, or
the first frame after its latest gap): deadline_k = play_anchor + (k - anchor) * 20 ms. A gap (an
underrun) is a playout tick inside a spurt with nothing to play: the ticks between two of its frames'
plays, and after its last played frame, while its response still had audio to come (the model's record
says how much), the ticks until other audio plays, a clear or the end of the call (at most as many as the
frames it had left: the caller heard the answer stop mid-sentence). A frame's lateness is
max(0, arrival_k - deadline_k): 0 unless the caller heard a gap before it, then how late it came. After a gap the spurt re-anchors at the late frame:
the caller heard one gap, the frames after it are judged from there (a sender that never catches up after
a late write is not charged once per later frame). The send-ahead a sender keeps is its own business: it
shows as headroom (deadline_k - arrival_k), never as lateness.

Exemption ("the model had not produced the audio yet"), the same rule for every sender: a gap tick at t
before frame k is model-starved when the model sent frame k's last byte later than t - grace_ms, and so is
frame k's lateness (counted 0 in `lateness_ms`, kept in `lateness_ms_unadjusted`). The model's send times
come from the model simulator's records (the pipecat stand-in records when it produced each chunk).

The instrument's own stalls, the same rule for every sender: the carrier simulator notes when its 20 ms
ticker woke more than two frames after its previous tick (CarrierMetrics.harness_stalls: its process got no
CPU, or its loop was busy). It read nothing then, so frames the sender wrote in that time were stamped when it
woke: a gap tick in a stall (or within a frame of one) is counted in `underruns_harness_stalled`, not as an
underrun with audio available, and a frame stamped in one is not late (`lateness_ms_unadjusted` keeps it). A clear
read in one is stamped when it woke, after its playout caught up on the ticks it missed, so what was heard of the
response it cut is not known: that truncate's error is counted in `truncate_error_ms_harness_stalled`, not in
`truncate_error_ms` (nor against its tolerance). Such a run measured its own load, not the sender: the bench counts these gaps against the SLO all the same
(bench/capacity.py: load-bound), so a capacity search never passes a level on them.

A yield is not a gap: when the caller starts speaking while a spurt plays (a speech start from the
model's VAD at most YIELD_WINDOW_MS before the spurt's last frame played, or after it), or is still speaking
when its last frame plays (a hold that came late, as on a busy machine: the agent talked over the caller longer,
which `talkover_ms` counts), the silence that follows is the agent giving the floor (a barge-in's clear, the
turn-taking controller's hold on a VAD edge while it waits for words), not audio that failed to arrive: its
ticks are not gaps and the frame that resumes the spurt after it (a false alarm) is not late. The same rule
for every sender.

Stale frames: a frame of a response that reached the carrier after a clear, when frames of that response
had already arrived before that clear (content), or a frame the sender's marks say belongs to a tag that
lived before the latest clear (voicecore marks its responses; both rules agree on its frames).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

from voicecore import timing
from voicecore.frame_match import (  # noqa: F401 (re-exported: the report's readers import them from here)
    CONTIGUOUS_PLAY_MS, SILENCE_BYTE, canonical_frame, cut_times, frame_owners, frame_sent_ms, owner_of, owners_at,
    response_frames, talkover_ms,
)
from voicecore.sim.carrier import CallResult
from voicecore.stats import percentile, summary
from voicecore.processes import cpu_seconds
from voicecore.supervise import Stack

# How a call's stream may end without a problem: the script ran out (the carrier hung up), or the agent ended the
# call through the carrier's REST API (the simulated carrier then ends the stream: voicecore/sim/carrier_rest.py).
ENDED_NORMALLY = ("carrier", "rest_hangup", "rest_transfer")
MAX_GAPS_NAMED = 5  # underruns with the audio there named in the problems line (call, when, which response)
MAX_CALLS_COUNTED = 5  # calls whose underruns with the audio there are counted apart (the most first)
TRUNCATE_TOLERANCE_MS = 20  # the bar: the truncate point within one frame of what was played
# A gap (or a late frame) is the model's when the model sent the audio due less than this before the gap:
# a sender may take a few ticks to get a frame onto a dry carrier (a short prefill: pipecat waits for a whole
# 40 ms chunk), plus one frame of pacing. The same grace for every sender. Not voicecore's start_hold_ms,
# which bounds a wait for a lead's worth before the first frame: a hold is latency, never a gap, and a longer
# hold must not make the report more lenient.
SENDER_PREFILL_MS = 60
STARVED_GRACE_MS = SENDER_PREFILL_MS + timing.FRAME_MS
# A clear is a barge-in's when the caller started speaking at most BARGEIN_CLEAR_WINDOW_MS before it (one
# definition with the carrier simulator's barge-ins without a clear: voicecore/timing.py). Later clears are
# the stack's own: a gate rejection, a stalled response.
BARGEIN_CLEAR_WINDOW_MS = timing.BARGEIN_CLEAR_WINDOW_MS
# A clear this soon after a response that the model started while another was still in progress
# (ResponseRecord.overlaps), with no speech start between that response's creation and the clear, is the
# runtime superseding the older response: the newer one wins, the older one's queued audio is cleared. Not
# a barge-in, not a problem. A clear is attributed to its nearest preceding cause.
SUPERSEDE_CLEAR_WINDOW_MS = 1500
# The model's server VAD answers after this much silence (the simulator's server_vad default, which
# voicecore's model worker keeps; the pipecat stand-in's VAD_SILENCE_MS): the model's share of a turn.
MODEL_VAD_SILENCE_MS = 500
# A speech start this long before a spurt's last played frame still explains the silence after it: a hold
# stops release at once, and the carrier plays the lead it holds (lead plus the release swing) first.
YIELD_WINDOW_MS = timing.DEFAULT_LEAD_MS + 2 * timing.FRAME_MS + 40


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


@dataclasses.dataclass(slots=True)
class PlayoutFigures:
    """One call's playout figures (module docstring), each sample with the time the window filters it on."""

    # per played, non-stale frame of a known response: (arrival_ms, lateness_ms, model_starved, headroom_ms)
    frames: list[tuple[float, float, bool, float]] = dataclasses.field(default_factory=list)
    # per gap tick: (tick_ms, model_starved, the response whose spurt it interrupted)
    gaps: list[tuple[float, bool, object]] = dataclasses.field(default_factory=list)
    stale_at_ms: list[float] = dataclasses.field(default_factory=list)  # arrival of each stale frame
    first_arrival_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # response_id -> first frame
    responses: dict[str, object] = dataclasses.field(default_factory=dict)  # response_id -> ResponseRecord

    def windowed(self, w0: float, w1: float) -> "PlayoutFigures":
        """Frames and stale frames that arrived in [w0, w1), gap ticks in it (first arrivals unchanged)."""
        return PlayoutFigures(
            [f for f in self.frames if w0 <= f[0] < w1], [g for g in self.gaps if w0 <= g[0] < w1],
            [t for t in self.stale_at_ms if w0 <= t < w1], self.first_arrival_ms, self.responses)


def summary_with_p95(values: Sequence[float]) -> dict[str, float]:
    """voicecore.stats.summary plus the 95th percentile (hold lengths are reported at p50 and p95)."""
    return {**summary(values), "p95": round(percentile(values, 95), 3)}


# A resumed response's frame is still stale if the response was cut this soon after it reached the carrier:
# the cut reaches the model simulator over the model socket, a little after the runtime decided it.
RESUME_CUT_SLACK_MS = 100.0


def underruns_by_call(gaps: Sequence[tuple[str, float, str]]) -> list[tuple[str, tuple[int, float, float]]]:
    """Per call of (call sid, tick ms, response id) gaps: (sid, (how many, first tick, last tick)), most first:
    a run's count says whether one call went silent for long or many calls for a frame or two."""
    calls: dict[str, list[float]] = {}
    for sid, tick, _rid in gaps:
        calls.setdefault(sid, []).append(tick)
    return sorted(((sid, (len(ticks), min(ticks), max(ticks))) for sid, ticks in calls.items()),
                  key=lambda item: -item[1][0])


def playout_figures(core, records: Sequence, grace_ms: float = STARVED_GRACE_MS) -> PlayoutFigures:
    """Lateness, gaps and stale frames of one call from the carrier's playout log (module docstring)."""
    figures = PlayoutFigures()
    if core is None:
        return figures
    owners = frame_owners(records)
    owner_by_frame: dict[int, tuple[object, int]] = {}
    first_epoch: dict[str, int] = {}
    stale: set[int] = set()
    cuts = cut_times(records)
    for frame in core.frames:
        owner = owner_of(owners, frame.payload)
        if owner is not None:
            response = owner[0]
            rid = response.response_id
            owner_by_frame[frame.index] = owner
            figures.responses.setdefault(rid, response)
            figures.first_arrival_ms.setdefault(rid, frame.arrival_ms)
            if frame.epoch > first_epoch.setdefault(rid, frame.epoch):
                # Its response had frames before a clear that came before it: stale, unless a held response
                # resumed after its hold's clear (the carrier saw its end mark first) and was not cut then.
                resumed = getattr(frame, "resumed", False)
                cut = cuts.get(rid, ())
                if not resumed or any(t <= frame.arrival_ms + RESUME_CUT_SLACK_MS for t in cut):
                    stale.add(frame.index)
        if frame.stale:
            stale.add(frame.index)
    figures.stale_at_ms = [frame.arrival_ms for frame in core.frames if frame.index in stale]

    def starved(response, index: int, at_ms: float) -> bool:
        sent = frame_sent_ms(response, index)
        cut_ms = getattr(response, "cancel_ms", None)
        if sent is not None and cut_ms is not None and sent >= cut_ms:
            return True  # sent once the model had cut the response (Gemini's late audio): never to be played
        return sent is None or sent > at_ms - grace_ms

    frame_ms = float(timing.FRAME_MS)
    speech = sorted((utterance.started_at_ms, utterance.stopped_at_ms)
                    for record in records for utterance in getattr(record, "speech", ()))
    speech_starts = [start for start, _stop in speech]

    def yielded(last_play_ms: float, tick_ms: float) -> bool:
        """The caller started speaking while the spurt played (or since), or was still speaking when its last
        frame played (the agent gave the floor late: talkover_ms says how late): the silence is a yield."""
        i = bisect.bisect_right(speech_starts, tick_ms)
        if i == 0:
            return False
        start, stop = speech[i - 1]
        since = last_play_ms - YIELD_WINDOW_MS
        return start >= since or stop is None or stop >= since

    clears = core.metrics.clear_at_ms
    stop_ms = core.stopped_at_ms if getattr(core, "stopped_at_ms", None) is not None else float("inf")
    frame_counts: dict[str, int] = {}

    def close(spurt, next_play_ms: float) -> None:
        """The spurt's last frame has played: while its response still had audio to come, the ticks until
        something else plays, a clear or the end of the call are gaps (at most as many as it had left)."""
        if spurt is None:
            return
        response, epoch, index, last_play = spurt
        rid = response.response_id
        if rid not in frame_counts:
            frame_counts[rid] = len(response_frames(response))
        end = min(next_play_ms, clears[epoch] if epoch < len(clears) else float("inf"), stop_ms)
        tick = last_play + frame_ms
        for _ in range(frame_counts[rid] - index - 1):
            if tick >= end or yielded(last_play, tick):
                break
            figures.gaps.append((tick, starved(response, index + 1, tick), response))
            tick += frame_ms

    spurt = None  # [response, epoch, last index, last play_ms]
    for frame in core.played:
        owner = owner_by_frame.get(frame.index)
        play_ms = frame.played_at_ms
        if owner is None or frame.index in stale:
            close(spurt, play_ms)  # other audio played: the spurt, if any, is over
            spurt = None
            continue
        response, index = owner
        if spurt is not None and spurt[0] is response and spurt[1] == frame.epoch and index > spurt[2]:
            deadline = spurt[3] + frame_ms
            gap_ticks = max(0, round((play_ms - spurt[3]) / frame_ms) - 1)
            if gap_ticks and yielded(spurt[3], play_ms):
                gap_ticks = 0  # the caller took the floor and gave it back (a false alarm): not a gap
            for j in range(gap_ticks):
                tick = deadline + j * frame_ms
                figures.gaps.append((tick, starved(response, index, tick), response))
            late = max(0.0, frame.arrival_ms - deadline) if gap_ticks else 0.0
            is_starved = bool(gap_ticks) and starved(response, index, deadline)
            figures.frames.append((frame.arrival_ms, late, is_starved, deadline - frame.arrival_ms))
        else:
            close(spurt, play_ms)
            # a spurt's first frame: the anchor (its wait is the turn's latency, not lateness)
            figures.frames.append((frame.arrival_ms, 0.0, False, play_ms - frame.arrival_ms))
        spurt = [response, frame.epoch, index, play_ms]
    close(spurt, float("inf"))
    figures.gaps.sort(key=lambda gap: gap[0])
    return figures


def turn_latencies(core, figures: PlayoutFigures, records: Sequence = ()) -> list[tuple[float, float, float]]:
    """Per caller utterance followed by agent audio: (speech end ms, turn latency ms, the model's share ms).

    The caller stops speaking at the end of the utterance's last 20 ms of speech (carrier_core
    speech_end_ms; CLOCK_MONOTONIC). The turn latency runs from there to the arrival at the carrier of the
    first frame of the next response: the first one created after the caller started that utterance whose
    first frame arrived after the speech end. The model's share is what the model itself takes: the
    silence its server VAD waits for (MODEL_VAD_SILENCE_MS) plus speech_stopped -> that response's first
    audio delta sent, from the model's record of the utterance (the first VAD stop at or after the speech
    end; the silence counted from the speech end, so at most stop - speech end: the VAD sees 20 ms windows
    of its own); without one, the speech end -> first delta. The rest (the turn latency minus the model's
    share, never negative) is the runtime's: caller audio reaching the model late (voicecore batches it
    every 100 ms), the first delta reaching the carrier."""
    origin = core.send_origin_ms if core is not None else None
    if origin is None or not core.utterance_spans_ms or not figures.first_arrival_ms:
        return []
    arrivals = sorted((arrival, rid) for rid, arrival in figures.first_arrival_ms.items())
    stops = sorted(s.stopped_at_ms for record in records for s in record.speech if s.stopped_at_ms is not None)
    samples = []
    for start_ms, end_ms in core.utterance_spans_ms:
        speech_start = origin + start_ms
        speech_end = origin + end_ms
        for arrival, rid in arrivals:
            response = figures.responses[rid]
            if arrival <= speech_end or response.created_ms < speech_start or response.first_delta_ms is None:
                continue
            stop = stops[bisect.bisect_left(stops, speech_end)] if bisect.bisect_left(stops, speech_end) < len(stops) else None
            if stop is not None and stop <= response.first_delta_ms:
                # the VAD's silence counted from the speech end, never more than the model waited in all
                model = response.first_delta_ms - stop + min(MODEL_VAD_SILENCE_MS, stop - speech_end)
            else:
                model = response.first_delta_ms - speech_end
            samples.append((speech_end, arrival - speech_end, model))
            break
    return samples


def trim_record(record, w0: float, w1: float):
    """A copy of a SessionRecord holding only the responses whose first delta went out in [w0, w1) (and the
    truncates and deletes of their items): the per-response figures of a measured window."""
    responses = [r for r in record.responses if r.first_delta_ms is not None and w0 <= r.first_delta_ms < w1]
    items = {r.item_id for r in responses}
    return dataclasses.replace(
        record,
        responses=responses,
        truncates=[t for t in record.truncates if t.item_id in items],
        deleted_item_ids=[i for i in record.deleted_item_ids if i in items],
    )


def _call_figures(result: CallResult, records: Sequence, window_ms: tuple[float, float] | None = None,
                  playout: PlayoutFigures | None = None) -> dict:
    """Per-call figures that need both simulators' records. ``records``: the call's records restricted to
    the responses that count (trim_record); ``playout``: the call's playout figures over all its records."""
    core = result.core
    figures = {"bargein_to_clear_ms": [], "truncate_error_ms": [], "truncate_error_ms_harness_stalled": [],
               "truncate_cases": [],  # (error ms, response id, ms the truncate said, ms the carrier played)
               "model_to_carrier_ms": [], "problems": [],
               "clears_not_bargein": 0, "clears_superseded": 0, "talkover_ms": [], "overlapping_responses": 0,
               "late_deltas_sent": 0, "turns": [], "clears_idle": 0}
    overlap_created: list[int] = []
    for record in records:
        for response in record.responses:
            figures["late_deltas_sent"] += response.late_deltas
            if response.overlaps is not None:
                overlap_created.append(response.created_ms)
    figures["overlapping_responses"] = len(overlap_created)
    if core is None:
        return figures
    owners = frame_owners(records)
    # Which voicecore tag carried which response (for the played position of a truncated response), and
    # when each response's first frame arrived.
    tag_of: dict[str, int] = {}
    first_arrival: dict[str, tuple[object, float]] = {}
    for frame in core.frames:
        owner = owner_of(owners, frame.payload)
        if owner is None:
            continue
        rid = owner[0].response_id
        if frame.tag is not None:
            tag_of.setdefault(rid, frame.tag)
        first_arrival.setdefault(rid, (owner[0], frame.arrival_ms))
    for response, arrival in first_arrival.values():
        if response.first_delta_ms is not None:
            figures["model_to_carrier_ms"].append(arrival - response.first_delta_ms)
    if playout is not None:
        turns = turn_latencies(core, playout, records)
        if window_ms is not None:
            turns = [t for t in turns if window_ms[0] <= t[0] < window_ms[1]]
        figures["turns"] = turns
    speech_starts = sorted(s for record in records for s in record.speech_started_ms)
    clears = core.metrics.clear_at_ms
    if window_ms is not None:
        clears = [t for t in clears if window_ms[0] <= t < window_ms[1]]
    for clear_ms in clears:
        earlier = [s for s in speech_starts if s <= clear_ms]
        overlaps_before = [created for created in overlap_created if created <= clear_ms]
        if overlaps_before and clear_ms - overlaps_before[-1] <= SUPERSEDE_CLEAR_WINDOW_MS and (
                not earlier or overlaps_before[-1] >= earlier[-1]):
            # the nearest cause before it is an overlapping response, not the caller's speech
            figures["clears_superseded"] += 1
        elif earlier and clear_ms - earlier[-1] <= BARGEIN_CLEAR_WINDOW_MS and not _agent_audio_at(core, earlier[-1], clear_ms):
            figures["clears_idle"] += 1  # a clear at a turn start with no agent audio to stop (pipecat sends one per turn)
        elif earlier and clear_ms - earlier[-1] <= BARGEIN_CLEAR_WINDOW_MS:
            figures["bargein_to_clear_ms"].append(clear_ms - earlier[-1])
        elif earlier:
            figures["clears_not_bargein"] += 1
        else:
            figures["problems"].append(f"call {result.call_sid}: a clear with no speech before it")
    if window_ms is not None:
        speech_starts = [s for s in speech_starts if window_ms[0] <= s < window_ms[1]]
    figures["talkover_ms"] = talkover_ms(core, speech_starts)
    stalls = core.metrics.harness_stalls

    def add_truncate_error(said_ms: float, heard_ms: float, response) -> None:
        # A clear read in the simulator's own stall is stamped when it woke, and the playout it caught up on
        # meanwhile counts as heard: what was heard before the cut is not known there (module docstring).
        cut_in_stall = stalls and _cut_in_harness_stall(core, response, tag_of, stalls)
        error_ms = abs(said_ms - heard_ms)
        figures["truncate_error_ms_harness_stalled" if cut_in_stall else "truncate_error_ms"].append(error_ms)
        if not cut_in_stall:
            figures["truncate_cases"].append((error_ms, response.response_id, said_ms, heard_ms))

    for record in records:
        for truncate in record.truncates:
            try:
                response = record.response_for_item(truncate.item_id)
            except KeyError:
                figures["problems"].append(f"call {result.call_sid}: truncate of an unknown item")
                continue
            add_truncate_error(truncate.audio_end_ms, _heard_ms(core, response, tag_of), response)
        for item_id in record.deleted_item_ids:
            try:
                response = record.response_for_item(item_id)
            except KeyError:
                continue
            heard = _heard_ms(core, response, tag_of)
            if response.audio and heard >= len(response_frames(response)) * timing.FRAME_MS - 2 * timing.FRAME_MS:
                # Heard whole, then deleted: a flow's context strategy forgetting history (a barge-in deletes
                # only what nobody heard), not a cut whose position could be wrong.
                continue
            add_truncate_error(0, heard, response)  # deleted: the model keeps none of it
    return figures


def in_harness_stall(at_ms: float, stalls: Sequence[tuple[float, float]]) -> bool:
    """Whether ``at_ms`` falls in (or within a frame of) a stall of the carrier simulator itself."""
    frame_ms = timing.FRAME_MS
    return any(from_ms - frame_ms <= at_ms <= to_ms + frame_ms for from_ms, to_ms in stalls)


def _agent_audio_at(core, speech_ms: float, clear_ms: float) -> bool:
    """Whether the caller could hear agent audio, or had some coming (queued at the carrier), when speech
    started at ``speech_ms``, or the clear at ``clear_ms`` threw some away: a barge-in has something to stop."""
    for frame in core.frames:
        if frame.arrival_ms > clear_ms:
            break
        if frame.dropped and frame.dropped_at_ms == clear_ms:
            return True
        if frame.arrival_ms > speech_ms:
            continue
        ends = frame.played_at_ms + frame.played_ms if frame.played_at_ms is not None else frame.dropped_at_ms
        if ends is None or ends > speech_ms:
            return True
    return False


def _cut_in_harness_stall(core, response, tag_of: dict[str, int], stalls: Sequence[tuple[float, float]]) -> bool:
    """Whether the clear that ended ``response``'s playout (the first one at or after its last played frame
    began) reached the carrier simulator in one of its own stalls."""
    plays = [frame.played_at_ms for frame in _played_frames(core, response, tag_of)]
    if not plays:
        return False
    last_play = max(plays)
    clears = core.metrics.clear_at_ms
    cut = bisect.bisect_left(clears, last_play)
    return cut < len(clears) and in_harness_stall(clears[cut], stalls)


def _heard_ms(core, response, tag_of: dict[str, int]) -> float:
    """How much of ``response`` the caller heard: its tag's played milliseconds (voicecore marks its frames);
    without a tag, its played frames found by content."""
    tag = tag_of.get(response.response_id)
    if tag is not None:
        return core.played_ms_of_tag(tag)
    return sum(frame.played_ms for frame in _played_frames(core, response, tag_of))


def _played_frames(core, response, tag_of: dict[str, int]) -> list:
    """The frames of ``response`` the carrier played: by its tag (voicecore marks its frames), else by content."""
    tag = tag_of.get(response.response_id)
    if tag is not None:
        return [frame for frame in core.played if frame.tag == tag]
    owners = frame_owners([_Single(response)])
    return [frame for frame in core.played if owner_of(owners, frame.payload) is not None]


@dataclasses.dataclass(slots=True)
class _Single:
    """A record holding one response (frame_owners reads `responses`)."""

    response: object

    @property
    def responses(self) -> list:
        return [self.response]


def why_no_clear(core) -> str:
    """What the carrier saw of a call whose barge-in got no clear: whether the caller's barge-in found the
    agent audible, and when each response's audio arrived, in seconds after the call's first media frame. A
    barge-in while the agent is silent interrupts nothing: then the answer came late or early, and no clear
    was owed."""
    if core is None:
        return "the call never reached its stream"
    metrics, origin = core.metrics, core.send_origin_ms
    noted = [f"{(at - origin) / 1000:.1f} s" for at in metrics.bargein_at_ms] if origin is not None else []
    spans: dict[int | None, list[float]] = {}  # response tag -> [first, last] arrival
    for frame in core.frames:
        span = spans.setdefault(frame.tag, [frame.arrival_ms, frame.arrival_ms])
        span[1] = frame.arrival_ms
    heard = ("agent audio arrived " + ", ".join(f"{(first - origin) / 1000:.1f}-{(last - origin) / 1000:.1f} s"
                                                for first, last in spans.values())
             if spans and origin is not None else "no agent audio arrived")
    if not noted:
        return f"{metrics.bargeins_ignored} barge-in(s) found the agent silent, so none interrupted it; {heard}"
    return f"barge-in(s) at {', '.join(noted)} with the agent audible; {heard}"


def summarize(results: Sequence[CallResult], sim, *, seconds: float, cpu_seconds: float, wall_seconds: float,
              stack_metrics: dict | None = None, expect_bargeins: bool = True,
              window_ms: tuple[float, float] | None = None, grace_ms: float = STARVED_GRACE_MS,
              samples: dict | None = None) -> dict:
    """``sim``: anything with ``by_call(call_sid)`` -> sessions with a ``record`` (the model simulator, or
    bench/analysis.RecordSet). ``expect_bargeins``: every call's script barges in, so a call without a clear
    is a problem (the bench turns it off for scenarios without barge-ins). ``window_ms``: (w0, w1), the
    bench's measured window: lateness for frames that arrived in it, gaps and stale frames in it, per-response
    figures for responses whose first delta went out in it, talkover and turns for speech in it (the carrier
    counters of the results come trimmed to it, bench/analysis.trim_result). ``grace_ms``: the exemption's
    grace (module docstring). ``samples``: a dict to receive the raw ``lateness_ms`` samples (the bench's CDF).

    The one-voice figures (docs/explanation/invariants.md#inv-one-voice): ``overlapping_frames`` (frames the
    caller heard of an older response after a newer one began: two voices), ``bargeins_without_clear``
    (barge-ins with no clear within BARGEIN_CLEAR_WINDOW_MS), ``overlapping_responses`` (responses the model
    simulator started while another was in progress), ``late_deltas_sent`` (audio deltas it sent after a
    cancel), ``talkover_ms`` (talkover_ms()), ``clears_superseded`` (SUPERSEDE_CLEAR_WINDOW_MS). The latency
    figures, from the carrier's playout clock as for every system
    (docs/reference/bench-report.md#definitions): ``model_to_carrier_ms`` (a response's first audio delta
    leaving the model -> its first frame at the carrier: the runtime's own hop; ``mouth_to_ear_ms`` is the
    same figure under its old, deprecated name), ``turn_latency_ms`` (turn_latencies: caller stops speaking ->
    first agent audio at the carrier) and ``turn_latency_model_ms`` / ``turn_latency_runtime_ms`` (the model's
    share of it and the rest). How the runtime took turns (voicecore.callturns): ``backchannels``,
    ``backchannels_that_cut``, ``real_turns``, ``unanswered_turns``, ``turns_cut_by_call_end``,
    ``talkover_real_turns_ms``, ``hold_ms`` (``resumed``, ``cut``), ``resumed_after_words``,
    ``resume_after_decision_ms`` and ``answer_request_ms``."""
    from voicecore import callturns  # it builds on this module's frame matching: imported when used

    turn_taking = callturns.TurnFigures()
    lateness: list[float] = []
    lateness_raw: list[float] = []
    headroom: list[float] = []
    talkover: list[float] = []
    bargein: list[float] = []
    truncate: list[float] = []
    truncate_stalled: list[float] = []
    worst_truncate: tuple | None = None  # (error ms, response id, said ms, heard ms, call sid) of the largest
    model_to_carrier: list[float] = []
    turn: list[float] = []
    turn_model: list[float] = []
    problems: list[str] = []
    frames_sent = frames_played = underruns = stale = clears = completed = 0
    underruns_available = underruns_starved = late_starved = clears_not_bargein = clears_superseded = clears_idle = 0
    underruns_harness = harness_stalls = 0
    available_gaps: list[tuple[str, float, str]] = []  # (call, the tick on the carrier's clock, ms; response)
    harness_stall_ms: list[float] = []
    overlapping_frames = bargeins_without_clear = overlapping_responses = late_deltas_sent = 0
    for result in results:
        if result.closed_by not in ENDED_NORMALLY or result.errors:
            problems.append(f"call {result.call_sid}: ended by {result.closed_by} (close code {result.close_code}) {'; '.join(result.errors)[:200]}")
        else:
            completed += 1
        records = [session.record for session in sim.by_call(result.call_sid)]
        counted = records if window_ms is None else [trim_record(r, *window_ms) for r in records]
        if result.core is None:
            figures = _call_figures(result, counted)
            overlapping_responses += figures["overlapping_responses"]
            late_deltas_sent += figures["late_deltas_sent"]
            continue
        stats = result.statistics
        frames_sent += stats.frames_received
        clears += stats.clears_received
        overlapping_frames += stats.overlapping_frames
        bargeins_without_clear += stats.bargeins_without_clear
        playout = playout_figures(result.core, records, grace_ms)
        window = playout if window_ms is None else playout.windowed(*window_ms)
        stalls = result.core.metrics.harness_stalls
        if window_ms is not None:
            stalls = [s for s in stalls if s[1] >= window_ms[0] and s[0] < window_ms[1]]
        harness_stalls += len(stalls)
        harness_stall_ms.extend(to_ms - from_ms for from_ms, to_ms in stalls)
        for arrival, late, starved, ahead in window.frames:
            lateness_raw.append(late)
            lateness.append(0.0 if starved or in_harness_stall(arrival, stalls) else late)
            late_starved += starved
            headroom.append(ahead)
        frames_played += len(window.frames)
        stale += len(window.stale_at_ms)
        underruns += len(window.gaps)
        starved_gaps = sum(1 for gap in window.gaps if gap[1])
        available = [gap for gap in window.gaps if not gap[1] and not in_harness_stall(gap[0], stalls)]
        underruns_starved += starved_gaps
        underruns_harness += len(window.gaps) - starved_gaps - len(available)
        underruns_available += len(available)
        available_gaps.extend((result.call_sid, gap[0], getattr(gap[2], "response_id", "?")) for gap in available)
        figures = _call_figures(result, counted, window_ms, playout)
        bargein.extend(figures["bargein_to_clear_ms"])
        clears_not_bargein += figures["clears_not_bargein"]
        clears_superseded += figures["clears_superseded"]
        clears_idle += figures["clears_idle"]
        talkover.extend(figures["talkover_ms"])
        overlapping_responses += figures["overlapping_responses"]
        late_deltas_sent += figures["late_deltas_sent"]
        truncate.extend(figures["truncate_error_ms"])
        for case in figures["truncate_cases"]:
            if worst_truncate is None or case[0] > worst_truncate[0]:
                worst_truncate = (*case, result.call_sid)
        truncate_stalled.extend(figures["truncate_error_ms_harness_stalled"])
        model_to_carrier.extend(figures["model_to_carrier_ms"])
        for _end, total, model in figures["turns"]:
            turn.append(total)
            turn_model.append(model)
        problems.extend(figures["problems"])
        turn_taking.add(callturns.turn_figures(result.core, records, window_ms))
        if expect_bargeins and stats.clears_received == 0:
            problems.append(f"call {result.call_sid}: the barge-in produced no clear ({why_no_clear(result.core)})")
    calls = len(results)
    call_seconds = calls * seconds
    if samples is not None:
        samples["lateness_ms"] = lateness
    report = {
        "calls": calls,
        "seconds": seconds,
        "calls_completed": completed,
        "frames_sent": frames_sent,
        "frames_played_timed": frames_played,
        "lateness_ms": summary(lateness),
        "lateness_ms_unadjusted": summary(lateness_raw),
        "lateness_frames_model_starved": late_starved,
        "playout_headroom_ms": summary(headroom),
        "underruns": underruns,
        "underruns_audio_available": underruns_available,
        "underruns_model_starved": underruns_starved,
        "underruns_harness_stalled": underruns_harness,
        "harness_stalls": harness_stalls,
        "harness_stall_ms": summary(harness_stall_ms),
        "stale_frames": stale,
        "bargeins": clears - clears_not_bargein - clears_superseded - clears_idle,
        "clears_not_bargein": clears_not_bargein,
        "clears_idle": clears_idle,
        "clears_superseded": clears_superseded,
        "bargeins_without_clear": bargeins_without_clear,
        "bargein_to_clear_ms": summary(bargein),
        "talkover_ms": summary(talkover),
        "overlapping_frames": overlapping_frames,
        "overlapping_responses": overlapping_responses,
        "late_deltas_sent": late_deltas_sent,
        "truncate_error_ms": summary(truncate),
        "truncate_error_ms_harness_stalled": summary(truncate_stalled),
        "model_to_carrier_ms": summary(model_to_carrier),
        "mouth_to_ear_ms": summary(model_to_carrier),  # deprecated alias of model_to_carrier_ms (one release)
        "turn_latency_ms": summary(turn),
        "turn_latency_model_ms": summary(turn_model),
        "turn_latency_runtime_ms": summary([t - m for t, m in zip(turn, turn_model)]),
        "backchannels": turn_taking.backchannels,
        "backchannels_that_cut": turn_taking.backchannels_that_cut,
        "real_turns": turn_taking.real_turns,
        "unanswered_turns": turn_taking.unanswered_turns,
        "turns_cut_by_call_end": turn_taking.turns_cut_by_call_end,
        "talkover_real_turns_ms": summary(turn_taking.talkover_real_turns_ms),
        "hold_ms": {"resumed": summary_with_p95(turn_taking.hold_resumed_ms), "cut": summary_with_p95(turn_taking.hold_cut_ms)},
        "resumed_after_words": turn_taking.resumed_after_words,
        "resume_after_decision_ms": summary(turn_taking.resume_after_decision_ms),
        "answer_request_ms": summary(turn_taking.answer_request_ms),
        "frames_lost_to_hold_clears": turn_taking.frames_lost_to_hold_clears,
        "starved_grace_ms": grace_ms,
        "cpu_ms_per_call_second": round(cpu_seconds * 1000 / call_seconds, 3) if call_seconds else 0.0,
        "cpu_seconds": round(cpu_seconds, 3),
        "wall_seconds": round(wall_seconds, 3),
    }
    if stack_metrics:
        pacer = stack_metrics.get("workers", {}).get("pacer", {})
        report["pacer_tick_lateness_ms"] = {k.removeprefix("tick_lateness_").removesuffix("_ms"): v for k, v in pacer.items() if k.startswith("tick_lateness_") and k.endswith("_ms")}
        report["pacer_frames_skipped"] = int(pacer.get("frames_skipped", 0))
        # The pacer's own dry spells (its time model: the carrier ran dry, the tag live, nothing in the ring to
        # release): beside the carrier's underruns it says which side of the pacer a gap came from.
        report["pacer_underruns"] = int(pacer.get("underruns_total", 0))
        report["gateway_bargein_decision_to_clear_ms"] = stack_metrics.get("bargein_decision_to_clear_ms", {})
        report["gateway_doorbell_to_drain_ms"] = stack_metrics.get("doorbell_to_drain_ms", {})
        model = stack_metrics.get("workers", {}).get("model", {})
        # voicecore_tool_duration_seconds' counts, as /metrics exports them: tools run, by outcome
        report["tool_runs_by_outcome"] = {outcome: int(model.get(f'tool_duration_seconds_count{{outcome="{outcome}"}}', 0))
                                          for outcome in ("ok", "error")}
    # Every reason for ok false has its line: a failed run must say why (the per-call lines come after).
    if not calls:
        problems.insert(0, "no calls were placed")
    if truncate and max(truncate) > TRUNCATE_TOLERANCE_MS:
        which = ""
        if worst_truncate is not None:
            _error, rid, said, heard, sid = worst_truncate
            which = f"; call {sid}, response {rid}: the truncate said {said:.0f} ms, the carrier played {heard:.0f} ms of it"
        problems.insert(0, f"a truncate point was {max(truncate):.1f} ms from what the caller heard "
                           f"(tolerance {TRUNCATE_TOLERANCE_MS} ms{which})")
    by_call = underruns_by_call(available_gaps)
    report["underruns_audio_available_by_call"] = {sid: count for sid, (count, _first, _last) in by_call[:MAX_CALLS_COUNTED]}
    if underruns_available:
        where = "; ".join(f"call {sid} at {tick:.0f} ms, response {rid}" for sid, tick, rid in available_gaps[:MAX_GAPS_NAMED])
        if len(by_call) > 1 or by_call[0][1][0] > MAX_GAPS_NAMED:
            where += "; by call: " + ", ".join(f"{sid} {count} ({first:.0f}-{last:.0f} ms)"
                                               for sid, (count, first, last) in by_call[:MAX_CALLS_COUNTED])
        which_side = ""  # with the stack's metrics: was the audio late before the pacer, or after it
        if stack_metrics:
            dry = report["pacer_underruns"]
            which_side = f"; the pacer's own dry spells: {dry}" + ("" if dry else " (the audio left the pacer in time)")
            drain_max = report["gateway_doorbell_to_drain_ms"].get("max")
            if drain_max is not None:
                which_side += f"; the gateway wrote it out at most {drain_max:.1f} ms after the pacer's doorbell"
        problems.insert(0, f"{underruns_available} underrun(s) while the model's audio was available ({where}){which_side}")
    if turn_taking.resumed_after_words:
        problems.insert(0, f"{turn_taking.resumed_after_words} real turn(s) heard the answer they interrupted "
                           "resume after their words were sent")
    if turn_taking.unanswered_turns:
        problems.insert(0, f"{turn_taking.unanswered_turns} real turn(s) of the caller got no answer before "
                           "the caller spoke again")
    if stale:
        problems.insert(0, f"{stale} stale frame(s): audio of a cancelled response reached the caller")
    if completed != calls:
        problems.insert(0, f"{calls - completed} of {calls} call(s) did not end normally")
    # the two-voices figures first: one line each, ahead of the per-call lines the list is cut after
    if bargeins_without_clear:
        problems.insert(0, f"{bargeins_without_clear} barge-in(s) got no clear within {BARGEIN_CLEAR_WINDOW_MS} ms")
    if overlapping_frames:
        problems.insert(0, f"{overlapping_frames} frame(s) of an older response played after a newer one's began (two voices)")
    report["problems"] = problems[:50]
    report["ok"] = not problems
    return report
