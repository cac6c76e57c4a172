"""Which model frame each received frame is, for carriers whose audio does not come back bit-exact.

Owns the tolerant matcher of the carrier simulator's received frames to the model simulator's response
frames, for the carrier modes whose outbound audio path is lossy: A-law (Telnyx PCMA) and L16 at 16 or
24 kHz (Vonage's default, Plivo, Exotel), where the gateway transcodes our mu-law and the simulator
transcodes it back (voicecore.carriers.codec both ways). Must not know how the figures are computed:
it rewrites what it matched and nothing else.

Why it is needed. The reports tie a received frame to (response, frame index) by its exact content
(voicecore/callreport.py frame_owners: the model simulator dithers each response, so no two responses
share a frame). A resampled round trip is not bit-exact (mu-law -> 16 kHz -> mu-law moves some codes by
one step), and G.711 A-law <-> mu-law is not transparent, so exact lookup finds almost nothing.

What it does (``match_frames``): for a call whose core says ``exact_audio`` is False, every received
frame that is no model frame exactly is compared, as 16-bit linear samples, with the model frames of the
call's responses, by squared error relative to the model frame's energy (plus a floor, so near-silent
frames do not match on noise). The transcoders' delay is whole frames (10 ms out of the gateway's
resampler plus 10 ms out of the simulator's: frame k carries the model's frame k-1 of the same stream), so
frames align one to one and no sub-frame search is needed. A frame is matched:

- by continuity: the previous received frame (same clear epoch, arrived at most CONTINUITY_GAP_MS before)
  matched (response, j) and this one matches (response, j + 1) within CONTINUITY_REL_ERROR;
- else globally: it carries signal (RMS at least SIGNAL_RMS), and among the model frames sent before it
  arrived (the model must have produced a frame before the carrier can hear it) the best run of
  RUN_FRAMES consecutive frames matches within MATCH_REL_ERROR. Scoring runs rather than single frames
  tells apart two responses of the same clip, which differ only in their dither (-68 dBFS: a single
  resampled frame picks the wrong twin about 2% of the time, a run of 8 practically never); a tie goes to
  the newest response;
- backwards: frames before a global match in the same run (the quiet start of a response) are matched
  by continuity read backwards.

A matched frame's payload is replaced by the model frame's bytes (so every content-based figure finds
it); an unmatched one keeps the bytes the carrier reconstructed, which match no response (like silence
or another sender's audio). ``match_frames`` returns the counts (``MatchStatistics``), which the reports
publish as ``frame_matching``.

What this measures and what it does not (the demo and the bench say so in their reports): the tag-based
figures (marks: ``overlapping_frames``, the mark-based stale frames, frames without a mark, what was played
of each tag, the truncate error) and every clear-based figure (barge-in -> clear, barge-ins without a
clear) are exact for every carrier. The content-based figures (lateness, underruns, content-based stale
frames, model -> carrier, turn latency, talk-over) rest on this matcher for the resampled carriers:
frames it leaves unmatched (a response's near-silent start before its first frame with signal and no
continuity, the 10 ms tails a clear or the end of a response leave in the resamplers) count as no
response's audio, so they can hide an underrun, never invent one; and first-frame times are of the frame
that carried the model frame, one 20 ms frame after the one that began it (the resamplers' 20 ms), so
model -> carrier and turn latency read up to 20 ms longer than the same call on a mu-law carrier.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from voicecore.timing import FRAME_BYTES

__all__ = ["CONTINUITY_GAP_MS", "CONTINUITY_REL_ERROR", "MATCH_REL_ERROR", "MatchStatistics", "RUN_FRAMES",
           "SIGNAL_RMS", "match_frames"]

# Measured on the packaged clips through the gateway's transcoder and back (L16 16/24 kHz, A-law): the
# right frame's relative error is under 0.01 for 99% of frames and under 0.045 for all; another clip's
# frame is over 0.5 for half of them (identical words rendered twice come close: hence runs and continuity).
MATCH_REL_ERROR = 0.06
CONTINUITY_REL_ERROR = 0.12
ENERGY_FLOOR_RMS = 50.0  # added to a model frame's RMS in the relative error, so silence never matches noise
SIGNAL_RMS = 40.0  # a frame quieter than this (RMS of 16-bit samples, about -58 dBFS) is never matched globally
CONTINUITY_GAP_MS = 100.0
RUN_FRAMES = 8
TIE_FACTOR = 1.25  # run scores within this factor of the best are a tie: the newest response wins


def _ulaw_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.float64)
    for byte in range(256):
        u = ~byte & 0xFF
        sample = ((((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07)) - 0x84
        table[byte] = -sample if u & 0x80 else sample
    return table


_ULAW = _ulaw_table()
_CANONICAL = bytes.maketrans(b"\x7f", b"\xff")  # mu-law's negative zero written as positive (callreport)
_FLOOR_ENERGY = FRAME_BYTES * ENERGY_FLOOR_RMS ** 2
_SIGNAL_ENERGY = FRAME_BYTES * SIGNAL_RMS ** 2


@dataclass(frozen=True, slots=True)
class MatchStatistics:
    frames: int  # received frames of the call
    exact: int  # already a model frame byte for byte
    matched: int  # tied to a model frame by this matcher
    unmatched: int  # no model frame: silence, tails, or audio that is no response's
    unmatched_with_signal: int  # of those, frames with signal (RMS >= SIGNAL_RMS)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class _Model:
    """The call's response frames: their samples, energies, owners and when the model sent each."""

    def __init__(self, records: Sequence) -> None:
        payloads: list[bytes] = []
        self.owner: list[tuple[int, int]] = []  # (response number, frame index)
        sent: list[float] = []
        self.created: list[float] = []
        self.start: list[int] = []  # row of each response's frame 0
        self.exact: dict[bytes, int] = {}
        for record in records:
            for response in record.responses:
                number = len(self.created)
                self.created.append(float(response.created_ms))
                self.start.append(len(payloads))
                frames = response.frames()
                if frames and len(frames[-1]) < FRAME_BYTES:
                    frames[-1] = frames[-1] + b"\xff" * (FRAME_BYTES - len(frames[-1]))
                # when the model sent each frame's last byte (inf: never)
                ends = list(itertools.accumulate(response.delta_bytes[: len(response.delta_sent_ms)]))
                for index, frame in enumerate(frames):
                    need = min((index + 1) * FRAME_BYTES, len(response.audio))
                    position = bisect.bisect_left(ends, need)
                    sent.append(float(response.delta_sent_ms[position]) if position < len(ends) else float("inf"))
                    self.exact.setdefault(frame.translate(_CANONICAL), len(payloads))
                    payloads.append(frame)
                    self.owner.append((number, index))
        self.payloads = payloads
        self.sent = np.array(sent, dtype=np.float64)
        self.samples = (_ULAW[np.frombuffer(b"".join(payloads), dtype=np.uint8)].reshape(-1, FRAME_BYTES)
                        if payloads else np.zeros((0, FRAME_BYTES)))
        self.energy = (self.samples * self.samples).sum(axis=1)

    def row(self, number: int, index: int) -> int | None:
        if number >= len(self.start) or index < 0:
            return None
        row = self.start[number] + index
        end = self.start[number + 1] if number + 1 < len(self.start) else len(self.payloads)
        return row if row < end else None

    def rel_error(self, samples: np.ndarray, row: int) -> float:
        diff = samples - self.samples[row]
        return float((diff * diff).sum() / (self.energy[row] + _FLOOR_ENERGY))


def match_frames(core, records: Sequence) -> MatchStatistics | None:
    """Tie ``core``'s received frames to the model frames of ``records`` (the call's SessionRecords) where
    ``core.exact_audio`` is False, rewriting each matched frame's payload (module docstring). Returns the
    counts, or None for a bit-exact call (nothing done) or a core without audio (keep_audio off)."""
    if core is None or getattr(core, "exact_audio", True):
        return None
    frames = core.frames
    if any(frame.payload is None for frame in frames):
        return None
    model = _Model(records)
    received = (_ULAW[np.frombuffer(b"".join(frame.payload for frame in frames), dtype=np.uint8)]
                .reshape(-1, FRAME_BYTES) if frames else np.zeros((0, FRAME_BYTES)))
    energy = (received * received).sum(axis=1)
    owner: list[tuple[int, int] | None] = [None] * len(frames)
    exact = 0
    for n, frame in enumerate(frames):
        row = model.exact.get(frame.payload.translate(_CANONICAL))
        if row is not None:
            owner[n] = model.owner[row]
            exact += 1

    def continues(n: int) -> bool:
        """Frame n follows frame n-1 on the same stream: same epoch, arrived soon after it."""
        return (n > 0 and frames[n].epoch == frames[n - 1].epoch
                and frames[n].arrival_ms - frames[n - 1].arrival_ms <= CONTINUITY_GAP_MS)

    def fits(n: int, number: int, index: int, limit: float) -> bool:
        row = model.row(number, index)
        return (row is not None and model.sent[row] <= frames[n].arrival_ms
                and model.rel_error(received[n], row) <= limit)

    run_starts: list[int] = []
    for n in range(len(frames)):
        if owner[n] is not None:
            continue
        previous = owner[n - 1] if n > 0 else None
        if previous is not None and continues(n) and fits(n, previous[0], previous[1] + 1, CONTINUITY_REL_ERROR):
            owner[n] = (previous[0], previous[1] + 1)
            continue
        if energy[n] < _SIGNAL_ENERGY or not len(model.payloads):
            continue
        found = _global(model, frames, received, n, continues)
        if found is not None:
            owner[n] = found
            run_starts.append(n)
    for n in run_starts:  # the quiet frames before a global match, read backwards
        m = n
        while m > 0 and owner[m - 1] is None and continues(m):
            number, index = owner[m]
            if not fits(m - 1, number, index - 1, CONTINUITY_REL_ERROR):
                break
            owner[m - 1] = (number, index - 1)
            m -= 1
    matched = unmatched = with_signal = 0
    for n, frame in enumerate(frames):
        found = owner[n]
        if found is None:
            unmatched += 1
            with_signal += bool(energy[n] >= _SIGNAL_ENERGY)
            continue
        row = model.row(*found)
        if frame.payload.translate(_CANONICAL) != model.payloads[row].translate(_CANONICAL):
            frame.payload = model.payloads[row]
            matched += 1
    return MatchStatistics(frames=len(frames), exact=exact, matched=matched, unmatched=unmatched,
                           unmatched_with_signal=with_signal)


def _global(model: _Model, frames, received: np.ndarray, n: int, continues) -> tuple[int, int] | None:
    """The model frame that received frame ``n`` starts a run of (module docstring), or None."""
    arrival = frames[n].arrival_ms
    diff_energy = ((received[n] ** 2).sum() + model.energy) - 2.0 * (model.samples @ received[n])
    rel = diff_energy / (model.energy + _FLOOR_ENERGY)
    candidates = np.nonzero((rel <= MATCH_REL_ERROR) & (model.sent <= arrival))[0]
    if not len(candidates):
        return None
    # the received run that follows frame n on the same stream
    run = [n]
    while len(run) < RUN_FRAMES and run[-1] + 1 < len(frames) and continues(run[-1] + 1):
        run.append(run[-1] + 1)
    scored = []
    for row in candidates:
        number, index = model.owner[row]
        score = 0.0
        for offset, m in enumerate(run):
            other = model.row(number, index + offset)
            if other is None or model.sent[other] > frames[m].arrival_ms:
                score += CONTINUITY_REL_ERROR  # the response ended (or was not sent yet): no evidence either way
            else:
                score += min(model.rel_error(received[m], other), CONTINUITY_REL_ERROR)
        scored.append((score, -model.created[number], number, index))
    scored.sort()
    best = scored[0][0]
    ties = [entry for entry in scored if entry[0] <= best * TIE_FACTOR + 1e-9]
    _score, _newest, number, index = min(ties, key=lambda entry: entry[1])  # the newest response among ties
    return number, index
