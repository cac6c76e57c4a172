"""The pipecat stand-in's per-response dither, shared by the stand-in (pipecat's venv) and the bench's
analysis (voicecore's venv): numpy only, nothing of voicecore or pipecat.

Why: the bench ties every frame the carrier receives to a response and a frame index by its content
(voicecore/callreport.py frame_owners), the same way for every sender, so pipecat needs no marks. The
stand-in speaks the same clips again and again; a tiny deterministic dither per response makes each
response's frames unique. As in the model simulator (voicecore/sim/model/clips.py), it moves mu-law codes,
not linear samples (a +/-1 LSB change in 16-bit linear would not survive mu-law encoding): each sample in
the two quietest mu-law segments (magnitude codes 0-31), and at least the 32 quietest samples of every
frame, moves by -1, 0 or +1 code, never through zero (pipecat decodes to PCM and encodes again, and
negative zero comes back as positive zero), so the bytes survive pipecat's serializer unchanged.
The random steps come from numpy's PCG64 bit stream (stable across numpy versions), one byte per sample.

    dither_ulaw(clip, variant_seed(clip_index, variant)) -> the response's mu-law audio
"""

from __future__ import annotations

import numpy as np

FRAME_BYTES = 160
QUIET_CODE = 31
MIN_SAMPLES = 32
_STEP = (np.arange(256) % 3 - 1).astype(np.int16)  # a random byte -> -1, 0 or +1


def variant_seed(clip_index: int, variant: int) -> int:
    """The seed of a clip's ``variant``-th dither (the stand-in's response r speaks clip r % L, variant r // L)."""
    return 0x5EED0000 + clip_index * 100_003 + variant


def dither_ulaw(audio: bytes, seed: int) -> bytes:
    """``audio`` (mu-law) with the deterministic dither of ``seed`` (module docstring); same length."""
    n = len(audio)
    if n == 0:
        return b""
    frames = -(-n // FRAME_BYTES)
    padded = np.full(frames * FRAME_BYTES, 0xFF, dtype=np.uint8)
    padded[:n] = np.frombuffer(audio, dtype=np.uint8)
    inverted = ~padded
    magnitude = (inverted & 0x7F).astype(np.int16).reshape(frames, FRAME_BYTES)
    sign = (inverted & 0x80).reshape(frames, FRAME_BYTES)
    valid = (np.arange(frames * FRAME_BYTES) < n).reshape(frames, FRAME_BYTES)
    ranked = np.where(valid, magnitude, 1000)
    kth = np.partition(ranked, MIN_SAMPLES - 1, axis=1)[:, MIN_SAMPLES - 1:MIN_SAMPLES]
    chosen = valid & ((magnitude <= QUIET_CODE) | (ranked <= kth))
    count = frames * FRAME_BYTES
    raw = np.random.PCG64(seed).random_raw(-(-count // 8)).astype("<u8", copy=False).view(np.uint8)[:count]
    step = np.where(chosen, _STEP[raw.reshape(frames, FRAME_BYTES)], 0)
    moved = np.clip(magnitude + step, 0, 127).astype(np.uint8)
    out = (~(sign | moved)).astype(np.uint8).reshape(-1)[:n]
    return out.tobytes()
