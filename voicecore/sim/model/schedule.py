"""When a response's audio deltas and transcript words go out: delta sizes and the send plan.

Owns the timing of one response as the simulator streams it (docs/explanation/protocols.md#d1: two interleaved
streams, the audio "generated" `SimConfig.speed_factor` times faster than real time; #d2-item-4: deltas never
frame-aligned; D.1 and D.2 below are that page's) and the configured stall. A plan is a sorted list of steps
(due_ms, order, kind, index): the order breaks ties between steps due at once, and the session walks the list.
Pure arithmetic on what it is given.
"""

from __future__ import annotations

import math

from voicecore.sim.model.config import SimConfig
from voicecore.sim.model.rng import SplitMix64
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES


def split_delta_sizes(total_bytes: int, rng: SplitMix64, min_bytes: int, max_bytes: int) -> list[int]:
    """Delta sizes summing to `total_bytes`, none a multiple of 160 (so deltas never line up with
    frames, D.2 item 4). The tail may be shorter than `min_bytes`."""
    sizes: list[int] = []
    remaining = total_bytes
    while remaining > max_bytes:
        size = min_bytes + rng.below(max_bytes - min_bytes + 1)
        if size % FRAME_BYTES == 0:
            size -= 1
        sizes.append(size)
        remaining -= size
    if remaining % FRAME_BYTES:
        sizes.append(remaining)
    elif remaining:
        # a frame-aligned tail (160, 320, ...) becomes two unaligned pieces: (r - 81) and 81
        sizes.extend((remaining - 81, 81))
    return sizes


def plan_response(
    config: SimConfig, delta_bytes: list[int], words: list[str], now_ms: int, index: int
) -> tuple[list[tuple[int, int, str, int]], bool]:
    """(the plan, whether it stalls) of response `index` created at `now_ms`: when each audio delta and
    transcript word goes out. Audio as fast as it is 'generated' (speed_factor x real time), words spread
    over the audio (D.1: two interleaved streams); a stalling response (SimConfig.stall_*) shifts every
    step after the cut by stall_ms."""
    start_ms = now_ms + config.first_delta_latency_ms
    plan: list[tuple[int, int, str, int]] = []
    ends: list[int] = []
    cum = 0
    for i, size in enumerate(delta_bytes):
        cum += size
        due = start_ms + math.ceil(cum / BYTES_PER_MS / config.speed_factor)
        ends.append(cum)
        plan.append((due, 1, "audio", i))
    total = cum
    last_due = plan[-1][0] if plan else start_ms
    late_from = len(words) // 2 if config.transcript_after_audio_done else len(words)
    for j in range(len(words)):
        if j >= late_from:
            plan.append((last_due, 3, "text", j))  # after audio.done, before the done cascade
            continue
        position = total * j // max(1, len(words))
        k = next((i for i, end in enumerate(ends) if end > position), len(ends) - 1)
        plan.append((plan[k][0], 0, "text", j))  # a word goes just before the audio it covers
    plan.append((last_due, 2, "audio_done", 0))
    plan.append((last_due, 4, "finish", 0))
    plan.sort()
    stalled = False
    stall_applies = config.stall_after_ms is not None and (
        not config.stall_responses or index in config.stall_responses
    )
    if stall_applies and config.stall_after_ms is not None:
        first_due = plan[0][0]
        cut = first_due + config.stall_after_ms
        if any(entry[0] > cut for entry in plan):
            stalled = True
            plan = [(d + config.stall_ms, o, k, i) if d > cut else (d, o, k, i) for d, o, k, i in plan]
    return plan, stalled


# a text response's words go out this many ms apart (drawn per word, inclusive): a model writes text far
# faster than it would speak it
TEXT_WORD_GAP_MS = (5, 25)


def plan_text(config: SimConfig, words: list[str], now_ms: int, rng: SplitMix64) -> list[tuple[int, int, str, int]]:
    """The plan of a response in text output modality: its words as text deltas, the first
    ``first_delta_latency_ms`` after it was created, then the item's done cascade and response.done."""
    due = now_ms + config.first_delta_latency_ms
    low, high = TEXT_WORD_GAP_MS
    plan: list[tuple[int, int, str, int]] = []
    for j in range(len(words)):
        if j:
            due += low + rng.below(high - low + 1)
        plan.append((due, 0, "text", j))
    plan.append((due, 4, "finish", 0))
    return plan
