"""The runtime's own lines: what a caller hears when the model cannot speak (INV-NEVER-SILENT).

Owns the shipped clips (8 kHz mu-law, rendered by ``bench/make_clips.py --fallback``; A-law copies made at
load for A-law calls, ``codec_table``) and their table in the layout the pacer's step reads: ``frames[clip, k]`` is frame k of a clip, ``frame_counts[clip]`` how
many it has. A clip's number is ``language_index * len(KINDS) + kind``; the model worker asks for one by
number through the call's control block (FALLBACK_SEQ / FALLBACK_CLIP) and the pacer plays it from its
own memory, so a line can be heard while the model worker itself is gone. Knows nothing of processes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from voicecore.g711 import ULAW_TO_ALAW
from voicecore.timing import FRAME_BYTES

CLIPS_DIR = Path(__file__).resolve().parent / "clips"
MULAW_SILENCE = 0xFF

# The kinds of line, in clip-number order.
HOLD = 0  # "One moment, please.": the model is late or away; under 1 s
APOLOGY_HANGUP = 1  # the failure policy gives up: apology, then the call is hung up
APOLOGY_TRANSFER = 2  # the failure policy gives up: apology, then the call is transferred
KINDS = ("hold", "apology_hangup", "apology_transfer")
LANGUAGES = ("en", "sv")  # the first is the default for a language without its own lines
HOLD_MAX_MS = 1000


@dataclass(frozen=True)
class FallbackClips:
    frames: np.ndarray  # uint8[n_clips, max_frames, FRAME_BYTES]
    frame_counts: np.ndarray  # int64[n_clips]
    texts: tuple[str, ...]  # what each clip says, by number

    def frame_payloads(self) -> frozenset[bytes]:
        """Every frame of every clip: how a carrier-side check tells a fallback line from model audio."""
        return frozenset(bytes(self.frames[c, k]) for c in range(len(self.texts)) for k in range(int(self.frame_counts[c])))


def codec_table(clips: FallbackClips) -> tuple[np.ndarray, np.ndarray]:
    """The pacer's table of ``clips`` for calls in either law: ``frames[c]`` for c < n is clip c as shipped
    (mu-law), ``frames[n + c]`` the same clip in A-law (each byte through ``g711.ULAW_TO_ALAW``, so its
    mu-law silence padding becomes A-law silence), with ``frame_counts`` likewise twice. Made once at start:
    an A-law call's line is read from its own rows, never transcoded per tick."""
    n = clips.frames.shape[0]
    alaw = np.frombuffer(clips.frames.tobytes().translate(ULAW_TO_ALAW), dtype=np.uint8).reshape(clips.frames.shape)
    frames = np.concatenate([clips.frames, alaw])
    counts = np.concatenate([clips.frame_counts, clips.frame_counts]).astype(np.int64)
    assert frames.shape[0] == counts.shape[0] == 2 * n
    frames.setflags(write=False)
    counts.setflags(write=False)
    return frames, counts


def clip_number(language: str, kind: int) -> int:
    """The clip for ``kind`` in ``language`` ("sv", "sv-SE", "en-US", ...): the default language's when there
    are no lines in it."""
    base = language.split("-", 1)[0].lower()
    index = LANGUAGES.index(base) if base in LANGUAGES else 0
    return index * len(KINDS) + kind


def clip_duration_ms(clips: FallbackClips, number: int) -> int:
    return int(clips.frame_counts[number]) * 20


@lru_cache(maxsize=1)
def load_clips(directory: Path = CLIPS_DIR) -> FallbackClips:
    """The shipped clips, cut into frames (a short last frame padded with mu-law silence)."""
    index = {row["name"]: row for row in json.loads((directory / "index.json").read_text())}
    audio: list[bytes] = []
    texts: list[str] = []
    for language in LANGUAGES:
        for kind in KINDS:
            name = f"{language}_{kind}"
            if name not in index:
                raise FileNotFoundError(f"fallback clip {name} is missing from {directory}/index.json")
            data = (directory / f"{name}.ulaw").read_bytes()
            if kind == "hold" and len(data) > HOLD_MAX_MS * 8:
                raise ValueError(f"fallback clip {name} is {len(data) // 8} ms; a hold line must fit in {HOLD_MAX_MS} ms")
            audio.append(data)
            texts.append(index[name]["text"])
    max_frames = max(-(-len(a) // FRAME_BYTES) for a in audio)
    frames = np.full((len(audio), max_frames, FRAME_BYTES), MULAW_SILENCE, dtype=np.uint8)
    counts = np.zeros(len(audio), dtype=np.int64)
    for number, data in enumerate(audio):
        n = -(-len(data) // FRAME_BYTES)
        frames[number].reshape(-1)[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        counts[number] = n
    frames.setflags(write=False)
    counts.setflags(write=False)
    return FallbackClips(frames=frames, frame_counts=counts, texts=tuple(texts))
