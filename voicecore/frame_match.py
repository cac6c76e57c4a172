"""Which model response a frame the carrier played belongs to, by its content, and when responses were cut.

The frame matching every report of played audio builds on (the demo's and the bench's call reports,
voicecore/callreport.py, and the turn-taking figures, voicecore/callturns.py): a played 160-byte frame is
matched to (response, frame index) by its canonical content over the model simulator's records, so the figures
come from what the carrier played, not from what the runtime says it did. Pure functions over records.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from voicecore import timing

SILENCE_BYTE = b"\xff"  # mu-law code of linear 0
# Played frames belong to one stretch of agent audio while each starts this close to the previous one's end.
CONTIGUOUS_PLAY_MS = 1.0


_CANONICAL = bytes.maketrans(b"\x7f", b"\xff")


def canonical_frame(payload: bytes) -> bytes:
    """``payload`` with mu-law code 0x7F (negative zero) written 0xFF (positive zero): both decode to linear
    0, and a sender that decodes to PCM and encodes again (pipecat's serializer) always sends 0xFF."""
    return payload.translate(_CANONICAL)


def response_frames(response) -> list[bytes]:
    """The response's audio as the carrier receives it: 160-byte frames from its start, the last one padded
    with mu-law silence (voicecore's model worker pads it; pipecat pads its last chunk with linear 0)."""
    frames = response.frames()
    if frames and len(frames[-1]) < timing.FRAME_BYTES:
        frames[-1] = frames[-1] + SILENCE_BYTE * (timing.FRAME_BYTES - len(frames[-1]))
    return frames


def frame_owners(records: Sequence) -> dict[bytes, tuple[object, int]]:
    """Canonical 160-byte frame content (canonical_frame) -> (ResponseRecord, frame index) over the records'
    responses, the padded last frame included."""
    owners: dict[bytes, tuple[object, int]] = {}
    for record in records:
        for response in record.responses:
            for index, frame in enumerate(response_frames(response)):
                owners[canonical_frame(frame)] = (response, index)
    return owners


def owner_of(owners: dict, payload: bytes | None):
    """(response, index) of a received payload, None when it is no known response's frame."""
    return owners.get(canonical_frame(payload)) if payload is not None else None


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
        result.append(owner_of(owners, played[position].payload) if position >= 0 else None)
    return result

def cut_times(records: Sequence) -> dict[str, list[float]]:
    """Per response id, when the model simulator saw it cut, sorted: its cancel (a client response.cancel
    naming it or none, or the vendor's turn_detected), a response.cancel naming it that found it done, and
    the truncate of its item (the runtime cutting what was already generated, as it must once the vendor
    has sent the whole answer: it is generated faster than it plays)."""
    cuts: dict[str, list[float]] = {}
    by_item: dict[str, str] = {}
    for record in records:
        for response in record.responses:
            if response.item_id:
                by_item[response.item_id] = response.response_id
            if response.cancel_ms is not None:
                cuts.setdefault(response.response_id, []).append(response.cancel_ms)
        for cancel in getattr(record, "cancels", ()):
            if cancel.cancelled_response_id is None and cancel.requested_response_id is not None:
                cuts.setdefault(cancel.requested_response_id, []).append(cancel.at_ms)
        for truncate in getattr(record, "truncates", ()):
            if truncate.item_id in by_item:
                cuts.setdefault(by_item[truncate.item_id], []).append(truncate.at_ms)
    return {rid: sorted(times) for rid, times in cuts.items()}

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
