"""The agent's own fallback lines: the hold line and the two apologies (each ends with the agent's goodbye or
transfer line) in the agent's voice and language, instead of the shipped robotic English or Swedish clips.

Owns where each line's audio comes from, in order: a WAV file the agent names (``[lines.audio]`` in
agent.toml; any rate and sample width, resampled to 8 kHz with libsoxr), a rendering in the agent's voice by
the vendor's speech endpoint that `voicecore up` made once and keeps on disk (voicecore/fallback/render.py;
the cache key is the endpoint's host, the speech model, the voice and the text), and last the shipped clip of
the agent's language (English for a language without one). The pacer plays them from one more row of its
table, the agent's row (``agent_clip_number``), after the shipped ones; the model worker asks for that row.
"""

from __future__ import annotations

import hashlib
import logging
import os
import wave
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import soxr

from voicecore.fallback import (
    HOLD_MAX_MS,
    KINDS,
    LANGUAGES,
    MULAW_SILENCE,
    FallbackClips,
    clip_number,
    load_clips,
)
from voicecore.g711 import linear_to_ulaw, ulaw_to_linear
from voicecore.timing import FRAME_BYTES

log = logging.getLogger("voicecore.fallback")

SAMPLE_RATE_HZ = 8000
APOLOGY_MAX_MS = 20_000  # an apology longer than this is a wrong file, not a line
SILENCE_LEVEL = 200  # |linear sample| below this at a line's ends is silence (trimmed, 30 ms kept)
KEEP_SILENCE_MS = 30
AGENT_ROW = len(LANGUAGES)  # the agent's lines come after the shipped languages' rows
CACHE_VERSION = "1"  # part of every cache key: a change of format or processing renders again


class LineAudioError(ValueError):
    """A line's audio cannot be used (not a PCM WAV, too long, empty); the message says why."""


def agent_clip_number(kind: int) -> int:
    """The pacer's clip number of the agent's line of ``kind`` (fallback.HOLD, APOLOGY_HANGUP, APOLOGY_TRANSFER)."""
    return AGENT_ROW * len(KINDS) + kind


def line_texts(lines: Mapping[str, str]) -> dict[str, str]:
    """What each fallback line says, from the agent's [lines]: the hold line, and the apology followed by the
    goodbye (the call is hung up) or by the transfer line (it is transferred)."""
    return {"hold": lines["hold"], "apology_hangup": f"{lines['apology']} {lines['goodbye']}",
            "apology_transfer": f"{lines['apology']} {lines['transfer']}"}


def max_ms(kind: str) -> int:
    return HOLD_MAX_MS if kind == "hold" else APOLOGY_MAX_MS


def trim_silence(ulaw: bytes) -> bytes:
    """The line without the silence before and after it (KEEP_SILENCE_MS of it kept each side)."""
    samples = ulaw_to_linear(ulaw)
    loud = np.nonzero(np.abs(samples.astype(np.int32)) >= SILENCE_LEVEL)[0]
    if loud.size == 0:
        return b""
    keep = KEEP_SILENCE_MS * SAMPLE_RATE_HZ // 1000
    return ulaw[max(0, int(loud[0]) - keep): int(loud[-1]) + 1 + keep]


def linear_to_line(samples: np.ndarray, rate_hz: int) -> bytes:
    """Mono linear samples (any numeric type, full scale of int16) at ``rate_hz`` as an 8 kHz mu-law line."""
    audio = samples.astype(np.float32) / 32768.0
    if rate_hz != SAMPLE_RATE_HZ:
        audio = soxr.resample(audio, rate_hz, SAMPLE_RATE_HZ, quality="HQ")
    return linear_to_ulaw(np.clip(audio * 32768.0, -32768, 32767))


def wav_to_line(path: str | Path) -> bytes:
    """A PCM WAV file (8-bit unsigned or 16/24/32-bit signed, any channels, any rate) as an 8 kHz mu-law line,
    its silent ends trimmed. Raises LineAudioError."""
    try:
        with wave.open(str(path), "rb") as reader:
            channels, width, rate = reader.getnchannels(), reader.getsampwidth(), reader.getframerate()
            raw = reader.readframes(reader.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise LineAudioError(f"not a PCM WAV file ({exc})") from None
    if width == 1:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.int32) - 128) * 256
    elif width == 2:
        samples = np.frombuffer(raw, dtype="<i2").astype(np.int32)
    elif width == 3:
        bytes3 = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        value = bytes3[:, 0] | (bytes3[:, 1] << 8) | (bytes3[:, 2] << 16)
        samples = np.where(value >= 1 << 23, value - (1 << 24), value) >> 8
    elif width == 4:
        samples = np.frombuffer(raw, dtype="<i4").astype(np.int64) >> 16
    else:
        raise LineAudioError(f"{width * 8}-bit samples are not PCM this reads")
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    line = trim_silence(linear_to_line(np.asarray(samples), rate))
    if not line:
        raise LineAudioError("it is silent")
    return line


def check_line(kind: str, ulaw: bytes) -> None:
    """Raises LineAudioError when ``ulaw`` cannot be ``kind``'s line (empty, or longer than it may be)."""
    if not ulaw:
        raise LineAudioError("it is silent")
    ms = len(ulaw) * 1000 // SAMPLE_RATE_HZ
    if ms > max_ms(kind):
        what = "a hold line must fit in" if kind == "hold" else "an apology must fit in"
        raise LineAudioError(f"{ms} ms: {what} {max_ms(kind)} ms")


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "voicecore" / "lines"


def cache_dir(lines_cache_dir: str, environ: Mapping[str, str]) -> Path:
    return Path(lines_cache_dir) if lines_cache_dir else default_cache_dir(environ)


def speech_url(model_url: str) -> str:
    """The vendor's speech (text-to-speech) endpoint beside its realtime one: wss://HOST/v1/realtime ->
    https://HOST/v1/audio/speech (Azure: /openai/v1/realtime -> /openai/v1/audio/speech), the query kept
    but for the realtime model or deployment."""
    parts = urlsplit(model_url)
    scheme = {"wss": "https", "ws": "http"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    path = (path[: -len("/realtime")] if path.endswith("/realtime") else path) + "/audio/speech"
    query = "&".join(p for p in parts.query.split("&") if p and p.split("=", 1)[0] not in ("model", "deployment"))
    return f"{scheme}://{parts.netloc}{path}" + (f"?{query}" if query else "")


def cache_file(directory: Path, url: str, model: str, voice: str, text: str) -> Path:
    """Where the rendering of ``text`` in ``voice`` by ``model`` at the speech endpoint ``url`` is kept."""
    key = "\x1f".join((CACHE_VERSION, urlsplit(url).netloc, model, voice, text))
    return directory / (hashlib.sha256(key.encode("utf-8")).hexdigest()[:32] + ".ulaw")


def write_cache(path: Path, ulaw: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    partial.write_bytes(ulaw)
    os.replace(partial, path)


def agent_lines(agent, model_url: str, speech_model: str, lines_cache_dir: str,
                environ: Mapping[str, str]) -> dict[str, tuple[bytes, str]]:
    """kind -> (its 8 kHz mu-law audio, where it came from: "wav:PATH", "rendered" or "shipped:LANG") for the
    agent (an AgentSpec). Never raises: a line that cannot be had from the agent's file or the cache is the
    shipped clip, and a file that has become unusable since the agent was checked is logged."""
    shipped = load_clips()
    language = agent.languages[0] if agent.languages else "en"
    base = language.split("-", 1)[0].lower()
    texts = line_texts(agent.lines)
    url = speech_url(model_url)
    directory = cache_dir(lines_cache_dir, environ)
    out: dict[str, tuple[bytes, str]] = {}
    for index, kind in enumerate(KINDS):
        wav = agent.line_audio.get(kind) if getattr(agent, "line_audio", None) else None
        if wav:
            try:
                audio = wav_to_line(wav)
                check_line(kind, audio)
                out[kind] = (audio, f"wav:{wav}")
                continue
            except LineAudioError as exc:
                log.error("agent %s: [lines.audio] %s (%s) cannot be played: %s; the shipped line plays instead",
                          agent.name, kind, wav, exc)
        if speech_model:
            cached = cache_file(directory, url, speech_model, agent.voice, texts[kind])
            try:
                audio = cached.read_bytes()
                check_line(kind, audio)
                out[kind] = (audio, "rendered")
                continue
            except (OSError, LineAudioError):
                pass
        number = clip_number(base if base in LANGUAGES else LANGUAGES[0], index)
        frames = shipped.frames[number, : int(shipped.frame_counts[number])]
        out[kind] = (frames.tobytes(), f"shipped:{LANGUAGES[number // len(KINDS)]}")
    return out


def table_with_agent_lines(lines: Mapping[str, tuple[bytes, str]], shipped: FallbackClips | None = None) -> FallbackClips:
    """The pacer's table: the shipped rows, then the agent's row (``agent_clip_number``)."""
    shipped = shipped if shipped is not None else load_clips()
    audio = [lines[kind][0] for kind in KINDS]
    max_frames = max(shipped.frames.shape[1], max(-(-len(a) // FRAME_BYTES) for a in audio))
    frames = np.full((shipped.frames.shape[0] + len(KINDS), max_frames, FRAME_BYTES), MULAW_SILENCE, dtype=np.uint8)
    frames[: shipped.frames.shape[0], : shipped.frames.shape[1]] = shipped.frames
    counts = np.concatenate([shipped.frame_counts, np.zeros(len(KINDS), dtype=np.int64)])
    for kind_index, data in enumerate(audio):
        number = shipped.frames.shape[0] + kind_index
        frames[number].reshape(-1)[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        counts[number] = -(-len(data) // FRAME_BYTES)
    frames.setflags(write=False)
    counts.setflags(write=False)
    texts = shipped.texts + tuple(lines[kind][1] for kind in KINDS)
    return FallbackClips(frames=frames, frame_counts=counts, texts=texts)
