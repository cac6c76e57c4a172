"""The caller's transcript as the vendor sends it: which events, in what pieces, and when.

Owns what the session's input transcription model decides (docs/explanation/protocols.md#c3, the `openai` package's
`conversation.item.input_audio_transcription.*` events): `whisper-1` (and any model not of the gpt-4o
transcribe family) sends one `completed` event, late; the gpt-4o transcribe family (`gpt-4o-transcribe`,
`gpt-4o-mini-transcribe`, any `gpt-4o*transcribe*`) streams `delta` events carrying word pieces, then
`completed` with the whole transcript. The delays are seeded draws from `SimConfig`'s ranges
(`transcription_whisper_ms`, `transcription_first_delta_ms`, `transcription_delta_gap_ms`,
`transcription_completed_gap_ms`), or one fixed delay when `SimConfig.transcription_delay_ms` pins it.

Also owns the simulator's backchannel vocabulary (the words of its backchannel clips) and the piece at
which a transcript first holds a word outside it: where a caller's words become a real turn
("Yeah, but on Friday." at the piece that brings "but"). Pure: the randomness comes in as a SplitMix64.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

from voicecore.sim.audio_clips import ClipInfo
from voicecore.sim.model.config import SimConfig
from voicecore.sim.model.rng import SplitMix64

STREAMING_MODELS = "gpt-4o*transcribe*"  # fnmatch pattern of the models that stream deltas
DEFAULT_MODEL = "whisper-1"  # a transcription object without a model: the vendor's default
# The vendor's words for a failed transcription (the API reference's example of the failed event).
FAILED_ERROR = {
    "type": "transcription_error",
    "code": "audio_unintelligible",
    "message": "The audio could not be transcribed.",
    "param": None,
}
_PIECE = re.compile(r"\s*[^\W_]+(?:'[^\W_]+)?|\s*[^\w\s]+|\s*_+", re.UNICODE)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def streams_deltas(model: str | None) -> bool:
    """Whether this transcription model sends `delta` events before `completed`."""
    return fnmatch.fnmatchcase(model or DEFAULT_MODEL, STREAMING_MODELS)


def transcript_pieces(text: str) -> list[str]:
    """The delta pieces of a transcript, as the streaming models send them: words with their leading space,
    punctuation on its own ("Yeah, but." -> "Yeah", ",", " but", "."). They join to ``text``."""
    pieces = _PIECE.findall(text)
    if "".join(pieces) != text:  # trailing spaces: the text in one piece, so the deltas still join to it
        return [text] if text else []
    return pieces


def words_of(text: str) -> list[str]:
    """The words of a text, case-folded ("Mm-hmm." -> mm, hmm)."""
    return [word.casefold() for word in _WORD.findall(text)]


def backchannel_vocabulary(clips: Iterable[ClipInfo]) -> frozenset[str]:
    """The words of the library's backchannel clips: what a listener says without taking the turn."""
    return frozenset(word for clip in clips if clip.kind == "backchannel" for word in words_of(clip.text))


def decisive_piece(pieces: list[str], vocabulary: frozenset[str]) -> int | None:
    """Index of the piece after which the words first hold one outside ``vocabulary`` (None: never)."""
    for index, piece in enumerate(pieces):
        if any(word not in vocabulary for word in words_of(piece)):
            return index
    return None


@dataclass(frozen=True, slots=True)
class TranscriptionStep:
    """One transcription event due: kind `delta` (text: the piece), `completed` (text: the transcript) or
    `failed`; `decisive`: this event is the first whose words hold a word that is not a backchannel word."""

    due_ms: int
    kind: str
    text: str
    decisive: bool = False


def _draw(rng: SplitMix64, low_high: tuple[int, int]) -> int:
    low, high = low_high
    return low + rng.below(high - low + 1)


def plan_transcription(config: SimConfig, model: str | None, transcript: str, commit_ms: int,
                       rng: SplitMix64, vocabulary: frozenset[str], fail: bool = False) -> list[TranscriptionStep]:
    """The transcription events of one committed item, in order (module docstring). ``fail``: the
    transcription fails (one `failed` event when the first event would have gone)."""
    pinned = config.transcription_delay_ms
    streaming = streams_deltas(model)
    if not streaming:
        due = commit_ms + (pinned if pinned is not None else _draw(rng, config.transcription_whisper_ms))
        if fail:
            return [TranscriptionStep(due, "failed", "")]
        decisive = any(word not in vocabulary for word in words_of(transcript))
        return [TranscriptionStep(due, "completed", transcript, decisive)]
    due = commit_ms + (pinned if pinned is not None else _draw(rng, config.transcription_first_delta_ms))
    if fail:
        return [TranscriptionStep(due, "failed", "")]
    pieces = transcript_pieces(transcript)
    decisive_at = decisive_piece(pieces, vocabulary)
    steps = []
    for index, piece in enumerate(pieces):
        if index and pinned is None:
            due += _draw(rng, config.transcription_delta_gap_ms)
        steps.append(TranscriptionStep(due, "delta", piece, index == decisive_at))
    if pinned is None:
        due += _draw(rng, config.transcription_completed_gap_ms)
    steps.append(TranscriptionStep(due, "completed", transcript))
    return steps
