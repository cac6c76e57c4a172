"""The simulators' speech clips: raw 8 kHz mu-law files in voicecore/sim/clips/ and their index.

Owns reading the packaged assets (importlib.resources, so it works from a wheel) and the `ClipInfo` /
`ClipLibrary` values that cores receive as arguments. Knows nothing of protocols or timing. The clips
are synthetic speech made by bench/make_clips.py (espeak-ng + sox), so no dataset licence applies
(docs/explanation/protocols.md#e2). Files are headerless mu-law, one byte per sample, 8 bytes per ms.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

_PACKAGE = "voicecore.sim"
_DIR = "clips"


@dataclass(frozen=True, slots=True)
class ClipInfo:
    name: str
    role: str  # "agent" | "caller"
    kind: str  # agent: greeting | question | answer | goodbye | checkin | safe_line; caller: caller | backchannel | noise
    text: str
    duration_ms: int


@dataclass(frozen=True, slots=True)
class ClipLibrary:
    """Clip metadata plus audio, handed to the model simulator core so the core reads no files."""

    infos: tuple[ClipInfo, ...]
    audio: dict[str, bytes]

    def info(self, name: str) -> ClipInfo:
        for clip in self.infos:
            if clip.name == name:
                return clip
        raise KeyError(name)

    def by_role(self, role: str) -> tuple[ClipInfo, ...]:
        return tuple(clip for clip in self.infos if clip.role == role)


@functools.lru_cache(maxsize=1)
def _index() -> tuple[ClipInfo, ...]:
    text = resources.files(_PACKAGE).joinpath(_DIR, "index.json").read_text(encoding="utf-8")
    return tuple(
        ClipInfo(
            name=row["name"],
            role=row["role"],
            kind=row["kind"],
            text=row["text"],
            duration_ms=int(row["duration_ms"]),
        )
        for row in json.loads(text)
    )


def clip_index() -> list[ClipInfo]:
    """Every clip, in index order (agent clips first)."""
    return list(_index())


@functools.lru_cache(maxsize=None)
def load_clip(name: str) -> bytes:
    """The raw mu-law bytes of clip `name`; KeyError if the index has no such clip."""
    if all(clip.name != name for clip in _index()):
        raise KeyError(name)
    return resources.files(_PACKAGE).joinpath(_DIR, f"{name}.ulaw").read_bytes()


@functools.lru_cache(maxsize=1)
def default_library() -> ClipLibrary:
    """All packaged clips, loaded once per process."""
    infos = _index()
    return ClipLibrary(infos=infos, audio={clip.name: load_clip(clip.name) for clip in infos})


PHRASE_PREFIX = "phrase_"  # the names of registered caller phrases (with_caller_phrases)


def with_caller_phrases(library: ClipLibrary, phrases: tuple[tuple[str, bytes], ...]) -> ClipLibrary:
    """``library`` with each (text, mu-law audio) phrase added as a caller clip (kind ``caller``), listed
    before the packaged caller clips; ``library`` itself when there are none."""
    if not phrases:
        return library
    added = tuple(ClipInfo(f"{PHRASE_PREFIX}{n}", "caller", "caller", text, len(audio) // 8)
                  for n, (text, audio) in enumerate(phrases))
    audio = dict(library.audio)
    audio.update({info.name: bytes(phrase[1]) for info, phrase in zip(added, phrases)})
    agents = tuple(c for c in library.infos if c.role != "caller")
    callers = tuple(c for c in library.infos if c.role == "caller")
    return ClipLibrary(infos=agents + added + callers, audio=audio)
