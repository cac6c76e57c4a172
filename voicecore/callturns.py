"""How the runtime took turns, as figures: measured from outside, from the two simulators' records.

Owns the definitions of the turn-taking keys of the demo and bench reports (public contracts; the page
docs/reference/turn-figures.md says the same in words). Inputs: the carrier simulator's playout log (which
frame arrived and played when; frames matched to model responses by content, voicecore.frame_match) and the
model simulator's records: each caller utterance its VAD heard (SpeechRecord: start, stop, the kind of the
caller clips recognised in it, when its transcript's words went out), each response (ResponseRecord: when
it was asked for, and by whom; when it was cancelled). Times are CLOCK_MONOTONIC ms on both sides. The
runtime's own counters are never read: every runtime is measured the same way.

Words used below. An utterance is a SpeechRecord; its start is the VAD start (speech_started), its stop the
VAD stop. A real turn is an utterance whose kind is `caller` (a packaged caller clip that is not a
backchannel nor a noise) and that has words. The agent is audible at t when a played frame covers t; the
response audible at t is that frame's owner. A response R's frames "arrive again after a gap" at the first
arrival of one of R's frames that comes HOLD_GAP_MS or more after R's previous frame arrived.

- backchannels: utterances of kind backchannel that started while the agent was audible.
- A response is cut when the model simulator sees it cut: its cancel (a client response.cancel, or the
  vendor's own turn_detected cancel when the runtime left interrupt_response on), a response.cancel naming
  it that came after it was done, or the truncate of its item. The vendor generates an answer faster than
  it plays, so an answer cut mid-play is often done at the vendor: then the truncate is the cut.
- backchannels_that_cut: of those, the ones after which the response audible at their start was cut from
  the utterance's start to BACKCHANNEL_CUT_AFTER_MS after its transcript completed (without a transcript:
  after its stop), and before the next real turn started (a cut after that is the real turn's).
- real_turns, unanswered_turns, turns_cut_by_call_end: a real turn is answered when a response was asked
  for (a client response.create, or the vendor's turn-detection response when the runtime left
  create_response on; never the simulator's injected overlap) after its stop and before the next real
  turn's start. A real turn not answered so whose stop is less than CALL_END_GRACE_MS before the call's end
  (or that never stopped) is cut by the call's end, not unanswered. A real turn followed by the next one
  less than MERGE_TURNS_MS after its stop, and not answered in between, is what that next turn is
  (answered, unanswered or cut): the turns merged into one answer.
- talkover_real_turns_ms: voicecore.frame_match.talkover_ms at the real turns' starts.
- hold_ms: per utterance that started while a response R was audible: its start -> R's frames arriving
  again after a gap ("resumed"), or its start -> R's cut ("cut"), whichever came first; none when
  neither happened (R played on).
- resumed_after_words: real turns that started while a response R was audible, after whose decisive words
  (SpeechRecord.decisive_words_ms: the first transcription event with a word that is not a backchannel
  word) R's frames arrived again after a gap: the runtime resumed an answer the caller had interrupted.
- resume_after_decision_ms: per "resumed" hold whose utterance's transcript completed (or failed) before
  the resume: that event -> R's frames arriving again at the carrier (the runtime's reaction to the words
  that let the agent carry on, carrier arrival included).
- frames_lost_to_hold_clears: frames of a response that the carrier threw away unplayed at a clear and
  whose response then went on (resumed after a hold whose clear came while the carrier still held audio):
  words of a live answer the caller never heard. 0 when the carrier's echoes keep up.
- answer_request_ms: per answered real turn whose answer was asked for before the caller said anything
  else and that ran no tool (no function output before the next real turn: a tool's answer waits for the
  tool, a confirmation's filler for filler_after_ms): the later of its
  transcript's completion and its stop -> the request (0 when the request came first, on settled words).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

from voicecore import frame_match

HOLD_GAP_MS = 100  # frames of a response this long apart: it had stopped, and arrives again
BACKCHANNEL_CUT_AFTER_MS = 2000  # a cancel this long after a backchannel's transcript is still its doing
MERGE_TURNS_MS = 3000  # a real turn this soon after the previous one's stop continues it (one answer for both)
CALL_END_GRACE_MS = 8000  # a real turn stopping this close to the call's end may still have been answered
REAL_TURN, BACKCHANNEL = "caller", "backchannel"


@dataclasses.dataclass(slots=True)
class TurnFigures:
    """One call's turn figures (module docstring); the samples are per utterance."""

    backchannels: int = 0
    backchannels_that_cut: int = 0
    real_turns: int = 0
    unanswered_turns: int = 0
    turns_cut_by_call_end: int = 0
    resumed_after_words: int = 0
    talkover_real_turns_ms: list[float] = dataclasses.field(default_factory=list)
    hold_resumed_ms: list[float] = dataclasses.field(default_factory=list)
    hold_cut_ms: list[float] = dataclasses.field(default_factory=list)
    resume_after_decision_ms: list[float] = dataclasses.field(default_factory=list)
    answer_request_ms: list[float] = dataclasses.field(default_factory=list)
    frames_lost_to_hold_clears: int = 0

    def add(self, other: TurnFigures) -> None:
        for field in dataclasses.fields(self):
            mine = getattr(self, field.name)
            if isinstance(mine, list):
                mine.extend(getattr(other, field.name))
            else:
                setattr(self, field.name, mine + getattr(other, field.name))


def call_end_ms(core, records: Sequence) -> float:
    """When the call ended: the carrier's stop, else the last model session's close (inf: not known)."""
    if getattr(core, "stopped_at_ms", None) is not None:
        return core.stopped_at_ms
    closed = [r.closed_ms for r in records if getattr(r, "closed_ms", None) is not None]
    return max(closed) if closed else float("inf")


def _requested_ms(records: Sequence) -> list[float]:
    """When each response was asked for (the client's, or the vendor's turn detection's; not an overlap)."""
    return sorted(r.created_ms for record in records for r in record.responses
                  if getattr(r, "origin", "client") != "overlap" and r.overlaps is None)


def _audible(core, owners: dict, starts: list[float], at_ms: float) -> tuple[bool, object | None]:
    """(whether a played frame covers at_ms, the response it belongs to or None)."""
    i = bisect.bisect_right(starts, at_ms) - 1
    if i < 0:
        return False, None
    frame = core.played[i]
    if at_ms >= frame.played_at_ms + frame.played_ms:
        return False, None
    owner = frame_match.owner_of(owners, frame.payload)
    return True, None if owner is None else owner[0]


def _resumptions(arrivals: list[float]) -> list[float]:
    """The arrivals that come HOLD_GAP_MS or more after the previous one: the response arriving again."""
    return [b for a, b in zip(arrivals, arrivals[1:]) if b - a >= HOLD_GAP_MS]


def _answers(turns: list, requested: list[float], end_ms: float) -> list[str]:
    """Per real turn (sorted by start): "answered", "unanswered" or "cut" (by the call's end). A turn merged
    with the next one (it started less than MERGE_TURNS_MS after this one's stop) and not answered before
    it shares that turn's fate: the two had one answer to get."""
    states = [""] * len(turns)
    for i in range(len(turns) - 1, -1, -1):
        stop = turns[i].stopped_at_ms
        next_start = turns[i + 1].started_at_ms if i + 1 < len(turns) else float("inf")
        if stop is None:
            states[i] = "cut"  # the call ended while the caller spoke
            continue
        k = bisect.bisect_left(requested, stop)
        if k < len(requested) and requested[k] < next_start:
            states[i] = "answered"
        elif i + 1 < len(turns) and next_start - stop < MERGE_TURNS_MS:
            states[i] = states[i + 1]
        else:
            states[i] = "cut" if stop > end_ms - CALL_END_GRACE_MS else "unanswered"
    return states


def turn_figures(core, records: Sequence, window_ms: tuple[float, float] | None = None) -> TurnFigures:
    """One call's turn figures. ``records``: the call's model session records, whole (responses asked for
    or cancelled outside the window still answer or cut an utterance in it); ``window_ms``: only utterances
    that started in [w0, w1) are counted."""
    figures = TurnFigures()
    if core is None:
        return figures
    owners = frame_match.frame_owners(records)
    starts = [frame.played_at_ms for frame in core.played]
    arrivals: dict[str, list[float]] = {}
    for frame in core.frames:
        owner = frame_match.owner_of(owners, frame.payload)
        if owner is not None:
            arrivals.setdefault(owner[0].response_id, []).append(frame.arrival_ms)
    resumed = {rid: _resumptions(times) for rid, times in arrivals.items()}
    resumed_tags = {frame.tag for frame in core.frames if getattr(frame, "resumed", False)}
    figures.frames_lost_to_hold_clears = sum(1 for frame in core.frames if frame.dropped and frame.tag in resumed_tags
                                             and (window_ms is None or window_ms[0] <= frame.arrival_ms < window_ms[1]))
    cuts = frame_match.cut_times(records)
    any_cut = sorted(t for times in cuts.values() for t in times)
    end_ms = call_end_ms(core, records)

    utterances = sorted((s for record in records for s in record.speech), key=lambda s: s.started_at_ms)
    real = [s for s in utterances if getattr(s, "caller_kind", None) == REAL_TURN and s.transcript]
    real_starts = [s.started_at_ms for s in real]

    def counted(speech) -> bool:
        return window_ms is None or window_ms[0] <= speech.started_at_ms < window_ms[1]

    requested = _requested_ms(records)
    utterance_starts = [s.started_at_ms for s in utterances]
    outputs = sorted(o.at_ms for record in records for o in getattr(record, "function_call_outputs", ()))
    for i, (state, turn) in enumerate(zip(_answers(real, requested, end_ms), real)):
        next_real = real[i + 1].started_at_ms if i + 1 < len(real) else end_ms
        if counted(turn):
            figures.real_turns += 1
            figures.unanswered_turns += state == "unanswered"
            figures.turns_cut_by_call_end += state == "cut"
            if state == "answered" and turn.stopped_at_ms is not None:
                words_in = max(turn.stopped_at_ms, turn.transcript_completed_ms or turn.stopped_at_ms)
                asked = requested[bisect.bisect_left(requested, turn.stopped_at_ms)]
                spoke_again = bisect.bisect_right(utterance_starts, turn.stopped_at_ms) < len(utterance_starts) and \
                    utterance_starts[bisect.bisect_right(utterance_starts, turn.stopped_at_ms)] < asked
                # a turn answered through a tool (a confirmation's yes runs it; its filler or answer waits
                # for it by design) is the tool's latency, not the turn-taking's
                tool = bisect.bisect_left(outputs, turn.stopped_at_ms) < len(outputs) and \
                    outputs[bisect.bisect_left(outputs, turn.stopped_at_ms)] < next_real
                if not spoke_again and not tool:
                    figures.answer_request_ms.append(max(0.0, asked - words_in))
    figures.talkover_real_turns_ms = frame_match.talkover_ms(core, [s.started_at_ms for s in real if counted(s)])

    for speech in utterances:
        if not counted(speech):
            continue
        start = speech.started_at_ms
        audible, response = _audible(core, owners, starts, start)
        if not audible:
            continue
        kind = getattr(speech, "caller_kind", None)
        if kind == BACKCHANNEL:
            figures.backchannels += 1
            heard = speech.transcript_completed_ms or speech.transcription_failed_ms or speech.stopped_at_ms
            until = end_ms if heard is None else heard + BACKCHANNEL_CUT_AFTER_MS
            k = bisect.bisect_right(real_starts, start)
            if k < len(real_starts):
                until = min(until, real_starts[k])
            # agent audio of no known response (a hold line): a cut of any response in the window
            times = any_cut if response is None else cuts.get(response.response_id, [])
            i = bisect.bisect_left(times, start)
            figures.backchannels_that_cut += i < len(times) and times[i] <= until
        if response is None:
            continue
        again = resumed.get(response.response_id, [])
        i = bisect.bisect_right(again, start)
        resumed_at = again[i] if i < len(again) else None
        times = cuts.get(response.response_id, [])
        i = bisect.bisect_left(times, start)
        cut_at = times[i] if i < len(times) else None
        if resumed_at is not None and (cut_at is None or resumed_at <= cut_at):
            figures.hold_resumed_ms.append(resumed_at - start)
            decided = speech.transcript_completed_ms or speech.transcription_failed_ms
            if decided is not None and decided <= resumed_at:
                figures.resume_after_decision_ms.append(resumed_at - decided)
        elif cut_at is not None:
            figures.hold_cut_ms.append(cut_at - start)
        words_ms = getattr(speech, "decisive_words_ms", None)
        if kind == REAL_TURN and speech.transcript and words_ms is not None:
            figures.resumed_after_words += any(at > words_ms for at in again)
    return figures
