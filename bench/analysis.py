"""Bench figures beyond voicecore.callreport: the measured window, frames lost, model event rates, the
pipecat stand-in's records. Pure functions over the simulators' records (no I/O, no clock).

Owns: restricting a call's carrier counters to the steady window [w0, w1) (CLOCK_MONOTONIC ms, the same
clock in every bench process) so the ramp-up and the tear-down do not count, before the results go through
callreport.summarize, which applies the same window to the figures it computes (lateness and gaps from the
playout log, stale frames, per-response figures). Rule: a carrier event (frame arrival, gap tick, clear, a
barge-in without a clear, an overlapping frame's play, a speech start's talkover, a caller's speech end for
the turn latency) counts if it happened in the window; a model response counts (model-to-carrier,
truncate error) if its first audio delta was sent in the window, and so do the truncates and deletes of its
item.
Also owns the hallucination scenario's figures (hallucination_figures): answers, what of the
hallucinated ones the caller heard, false rejections, time to first audio.

Must not know: processes, sockets, how summarize computes its figures.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence

from voicecore.callreport import STARVED_GRACE_MS, playout_figures, trim_record  # noqa: F401 (re-exported)
from voicecore.callreport import frame_owners as _owners
from voicecore.callreport import canonical_frame
from voicecore.callreport import owner_of as _owner_of
from bench.baseline_pipecat.dither import dither_ulaw, variant_seed
from voicecore.sim.carrier import CallResult
from voicecore.sim.model import ResponseRecord, SessionRecord, SpeechRecord
from voicecore.stats import summary as _summary
from voicecore.timing import FRAME_BYTES, FRAME_MS, INBOUND_BATCH_MS
from voicecore.validate.numbers import extract_numbers

DEFAULT_STARVED_GRACE_MS = STARVED_GRACE_MS  # one definition, shared with the demo (voicecore/callreport.py)
INBOUND_SLACK_FRAMES = 2 * INBOUND_BATCH_MS // FRAME_MS  # caller audio still in flight when the call stops

CDF_QUANTILES = tuple([float(q) for q in range(0, 90, 2)] + [90 + q / 2 for q in range(0, 18)]
                      + [99 + q / 10 for q in range(0, 10)] + [99.95, 100.0])


@dataclasses.dataclass(slots=True)
class SessionView:
    """What callreport reads of a model session: its record."""

    record: object


class RecordSet:
    """The model simulator's SessionRecords by call, with the `by_call` that callreport.summarize reads."""

    def __init__(self, records: Iterable) -> None:
        self._by_call: dict[str | None, list[SessionView]] = defaultdict(list)
        for record in records:
            self._by_call[record.call_sid].append(SessionView(record))

    def by_call(self, call_sid: str) -> list[SessionView]:
        return self._by_call.get(call_sid, [])

    def records(self, call_sid: str) -> list:
        return [view.record for view in self.by_call(call_sid)]

    def all_records(self) -> list:
        return [view.record for views in self._by_call.values() for view in views]


def _inside(value: float | None, w0: float, w1: float) -> bool:
    return value is not None and w0 <= value < w1




def trim_result(result: CallResult, w0: float, w1: float) -> CallResult:
    """A copy of ``result`` whose carrier counters (frames received, clears, barge-ins without a clear,
    overlapping frames) count only events in [w0, w1). The frames, the playout log and the clear times are
    shared, whole: callreport.summarize computes lateness, gaps, stale frames and barge-ins from them and
    windows those itself."""
    core = result.core
    if core is None or result.statistics is None:
        return result
    metrics = copy.copy(core.metrics)
    in_window = [frame for frame in core.frames if w0 <= frame.arrival_ms < w1]
    metrics.frames_received = len(in_window)
    metrics.clears_received = sum(1 for t in core.metrics.clear_at_ms if w0 <= t < w1)
    # judged on the whole call (a clear just after w1 still answers a barge-in just before it), counted in the window
    without_clear = sum(1 for at in core.bargeins_without_clear_ms() if w0 <= at < w1)
    overlapping = sum(1 for frame in core.overlapping_played() if w0 <= frame.played_at_ms < w1)
    trimmed_core = copy.copy(core)
    trimmed_core.metrics = metrics
    stats = dataclasses.replace(
        result.statistics,
        frames_received=metrics.frames_received,
        clears_received=metrics.clears_received,
        bargeins_without_clear=without_clear,
        overlapping_frames=overlapping,
    )
    return dataclasses.replace(result, statistics=stats, core=trimmed_core)


def trim_records(records: Iterable, w0: float, w1: float) -> RecordSet:
    return RecordSet(trim_record(r, w0, w1) for r in records)


# ----- the pipecat stand-in's records ---------------------------------------------------------------


def stand_in_records(lines: Iterable[dict], clips: Sequence[bytes], clip_names: Sequence[str]) -> list[SessionRecord]:
    """The pipecat stand-in's per-call JSON lines (bench/baseline_pipecat/server.py) as the model
    simulator's SessionRecords: each answer's audio rebuilt from its clip and dither variant (what went on
    the wire, as content: callreport.frame_owners), its produced-at times as `delta_sent_ms`, the caller's
    speech as its VAD saw it. So every figure reads the same kind of record for both systems."""
    audio_cache: dict[tuple[int, int], bytes] = {}
    records = []
    for item in lines:
        responses = []
        for answer in item.get("responses", []):
            key = (answer["clip"], answer["variant"])
            audio = audio_cache.get(key)
            if audio is None:
                audio = audio_cache[key] = canonical_frame(dither_ulaw(clips[key[0]], variant_seed(*key)))
            deltas = answer.get("deltas", [])
            responses.append(ResponseRecord(
                index=answer["index"], response_id=f"{item['call_sid']}-{answer['index']}", item_id=f"item-{answer['index']}",
                clip_name=clip_names[key[0]], text="", audio=audio, delta_bytes=[d[0] for d in deltas],
                created_ms=answer["created_ms"], first_delta_ms=answer.get("first_delta_ms"),
                delta_sent_ms=[d[1] for d in deltas], status=answer.get("status", "in_progress"),
                cancel_ms=answer.get("cancel_ms"), done_ms=answer.get("done_ms"),
                sent_bytes=sum(d[0] for d in deltas)))
        speech = [SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=started, stopped_at_ms=stopped)
                  for started, stopped in item.get("speech", [])]
        records.append(SessionRecord(
            session_id=item["call_sid"], session_index=0, naming="ga", model="pipecat-stand-in",
            connected_ms=item["connected_ms"], call_sid=item["call_sid"], closed_ms=item.get("closed_ms"),
            responses=responses, speech=speech))
    return records


# ----- frames lost --------------------------------------------------------------------------------


def frames_lost(result: CallResult, records: Sequence, call_end_ms: float, measure_inbound: bool = True) -> tuple[int, int]:
    """(outbound, inbound) frames lost in one call.

    Outbound: full frames of model responses that were neither cancelled nor truncated and had all
    their audio sent long enough before the call ended, but never reached the carrier. Inbound: caller
    frames the carrier sent that the model never got (input_audio_buffer.append), beyond what can still
    be in flight when the call stops.
    """
    core = result.core
    if core is None:
        return 0, 0
    received: dict[bytes, int] = defaultdict(int)
    for frame in core.frames:
        if frame.payload is not None:
            received[canonical_frame(frame.payload)] += 1
    outbound = 0
    appended = 0
    for record in records:
        appended += record.appended_bytes
        interrupted = {t.item_id for t in record.truncates} | set(record.deleted_item_ids)
        for response in record.responses:
            if response.status != "completed" or response.item_id in interrupted or response.done_ms is None:
                continue
            if response.done_ms + len(response.audio) / 8 + 1000 > call_end_ms:
                continue  # the call ended before all of it could have played
            full = [canonical_frame(f) for f in response.frames() if len(f) == FRAME_BYTES]
            outbound += sum(1 for f in full if received.get(f, 0) == 0)
    sent = core.metrics.media_sent
    inbound = max(0, sent - appended // FRAME_BYTES - INBOUND_SLACK_FRAMES) if records and measure_inbound else 0
    return outbound, inbound


# ----- model side ---------------------------------------------------------------------------------


def model_event_rates(records: Sequence, w0: float, w1: float) -> dict:
    """Events per second over the window, all calls together, and the client's events per call-second."""
    span_s = max(1e-9, (w1 - w0) / 1000.0)
    deltas = responses = cancels = truncates = speech = 0
    client: dict[str, int] = defaultdict(int)
    lifetime_s = 0.0
    for record in records:
        for response in record.responses:
            responses += _inside(response.created_ms, w0, w1)
            deltas += sum(1 for t in response.delta_sent_ms if w0 <= t < w1)
        cancels += sum(1 for c in record.cancels if w0 <= c.at_ms < w1)
        truncates += sum(1 for t in record.truncates if w0 <= t.at_ms < w1)
        speech += sum(1 for s in record.speech if w0 <= s.started_at_ms < w1)
        for name, count in record.client_events.items():
            client[name] += count
        if record.closed_ms is not None:
            lifetime_s += (record.closed_ms - record.connected_ms) / 1000.0
    per_s = {
        "audio_deltas": round(deltas / span_s, 2),
        "responses": round(responses / span_s, 3),
        "speech_started": round(speech / span_s, 3),
        "cancels_received": round(cancels / span_s, 3),
        "truncates_received": round(truncates / span_s, 3),
    }
    per_call_s = {name: round(count / lifetime_s, 3) for name, count in sorted(client.items())} if lifetime_s else {}
    return {"server_events_per_second": per_s, "client_events_per_call_second": per_call_s,
            "sessions": len(records)}


# ----- hallucination: what the validation gate let through ----------------------------------------

SAFE_LINE_CLIP = "agent_safe_line"  # the simulator's clip for "Say exactly: <safe line>"
# A cancel is the caller's (a barge-in), not the gate's, when the caller started speaking this long before
# it (server VAD's speech_started -> the worker's cancel takes a few ms; 1.5 s covers a slow loop) ...
SPEECH_BEFORE_CANCEL_MS = 1500
SPEECH_AFTER_CANCEL_MS = 250  # ... or this soon after it (the two simulators' events race on a busy machine)


def is_safe_line(response) -> bool:
    return response.clip_name == SAFE_LINE_CLIP


def is_answer(response) -> bool:
    """A model response that answers the caller: not the session's greeting (its first response), not the
    safe line spoken in place of a rejected answer, not a response that failed before it had audio."""
    return response.index != 0 and not is_safe_line(response) and response.status != "failed"


def answers(records: Iterable) -> list:
    return [r for record in records for r in record.responses if is_answer(r)]


def cancel_ms(record, response) -> float | None:
    """When the model heard the cancel of ``response`` (its CancelRecord, else the response's own mark)."""
    times = [c.at_ms for c in record.cancels if c.cancelled_response_id == response.response_id]
    if times:
        return min(times)
    return response.cancel_ms if response.status == "cancelled" else None


def false_rejections(records: Iterable) -> int:
    """Honest answers cancelled with no caller speech near the cancel: nobody barged in, so the gate did it."""
    count = 0
    for record in records:
        speech = [s.started_at_ms for s in record.speech]
        for response in record.responses:
            if not is_answer(response) or response.hallucinated:
                continue
            at = cancel_ms(record, response)
            if at is None:
                continue
            if any(at - SPEECH_BEFORE_CANCEL_MS <= s <= at + SPEECH_AFTER_CANCEL_MS for s in speech):
                continue
            count += 1
    return count


def claim_frame(response) -> int | None:
    """The first frame of ``response``'s audio that its transcript's first number covers, in the
    simulator's alignment (voicecore.sim.model.schedule.plan_response: word j of n covers the audio from
    len(audio) * j // n on); None when the transcript has no number. For a hallucinated answer, frames
    before it carry the words ahead of the claim ("Basic costs"), which a streaming gate may release."""
    mentions = extract_numbers(response.text)
    if not mentions:
        return None
    words = response.text.split(" ")
    j = response.text[: min(m.span[0] for m in mentions)].count(" ")
    return len(response.audio) * j // max(1, len(words)) // FRAME_BYTES


def played_frames_by_response(result: CallResult, records: Sequence) -> dict[str, list[int]]:
    """response_id -> indices of its frames the carrier played (matched by content: callreport.frame_owners)."""
    core = result.core
    played: dict[str, list[int]] = defaultdict(list)
    if core is None:
        return played
    owners = _owners(records)
    for frame in core.played:
        owner = _owner_of(owners, frame.payload)
        if owner is not None:
            played[owner[0].response_id].append(owner[1])
    return played


def first_audio_ms(result: CallResult, records: Sequence) -> list[float]:
    """Per answer that reached the carrier: its first frame's arrival minus the model's first audio delta."""
    core = result.core
    if core is None:
        return []
    owners = _owners(records)
    first: dict[str, tuple[object, float]] = {}
    for frame in core.frames:
        owner = _owner_of(owners, frame.payload)
        if owner is not None and owner[0].response_id not in first:
            first[owner[0].response_id] = (owner[0], frame.arrival_ms)
    return [arrival - response.first_delta_ms for response, arrival in first.values()
            if is_answer(response) and response.first_delta_ms is not None]


def underruns_in_hallucinated_answers(result: CallResult, records: Sequence) -> int:
    """Gap ticks (callreport.playout_figures) inside a hallucinated answer's talk spurt: the gate held its
    audio at the unverified number until the rejection came."""
    if result.core is None:
        return 0
    gaps = playout_figures(result.core, records).gaps
    return sum(1 for _tick, _starved, response in gaps if response.hallucinated and is_answer(response))


def hallucination_figures(calls: Iterable[tuple[CallResult, Sequence]]) -> dict:
    """The hallucination scenario's keys over (call result, that call's records restricted to the window).

    answers / hallucinated_answers: model responses that answer (is_answer), and those whose transcript
    was the simulator's hallucination. hallucinated_frames_played: frames the carrier played that belong
    to hallucinated answers. false_rejections: see false_rejections(). first_audio_ms: first delta sent
    -> first frame at the carrier, per answer that reached it. safe_lines_played: safe lines of which the
    carrier played at least one frame (safe_lines: how many the model spoke).
    hallucinated_frames_played_past_claim: of hallucinated_frames_played, those at or after claim_frame
    (the caller heard the unverified number itself, not only the words before it).
    underruns_in_hallucinated_answers: see underruns_in_hallucinated_answers().
    """
    n_answers = n_hallucinated = hallucinated_played = past_claim = blocked = rejections = safe_lines = safe_played = 0
    held = 0
    first_audio: list[float] = []
    for result, records in calls:
        played = played_frames_by_response(result, records)
        for record in records:
            for response in record.responses:
                frames = played.get(response.response_id, [])
                if is_safe_line(response):
                    safe_lines += 1
                    safe_played += bool(frames)
                    continue
                if not is_answer(response):
                    continue
                n_answers += 1
                if response.hallucinated:
                    n_hallucinated += 1
                    hallucinated_played += len(frames)
                    blocked += not frames
                    claim = claim_frame(response)
                    past_claim += sum(1 for index in frames if claim is not None and index >= claim)
        rejections += false_rejections(records)
        first_audio.extend(first_audio_ms(result, records))
        held += underruns_in_hallucinated_answers(result, records)
    return {
        "answers": n_answers,
        "hallucinated_answers": n_hallucinated,
        "hallucinated_frames_played": hallucinated_played,
        "hallucinated_frames_played_past_claim": past_claim,
        "hallucinated_answers_blocked": blocked,  # hallucinated answers of which the caller heard nothing
        "false_rejections": rejections,
        "safe_lines": safe_lines,
        "safe_lines_played": safe_played,
        "underruns_in_hallucinated_answers": held,
        "first_audio_ms": _summary(first_audio),
    }
