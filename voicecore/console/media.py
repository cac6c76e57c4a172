"""A stored call's audio for the console: the stereo WAV (caller left, agent right), the same as Opus in
Ogg for long calls, and its waveform peaks, made from the call's record by replaying it (voicecore/replay.py,
a consumer of the one walk over a record's entries, places what the caller heard in time). Pure but for
reading the record file; CPU-bound (a replay, an Opus encoding): the console runs it off its loop.

The Opus rendition exists because the WAV is 16-bit PCM, 1.9 MB per minute of call: a long call's page
would download tens of megabytes. It is encoded by libsndfile (the ``soundfile`` package), at the tracks' own
8 kHz, which Opus takes as it is (its rates: 8, 12, 16, 24 and 48 kHz).
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import soundfile

from voicecore import timing
from voicecore.call.record_reader import received_at_ns
from voicecore.console import ranges
from voicecore.g711 import stereo_wav_bytes, ulaw_to_linear
from voicecore.record import load_record
from voicecore.replay import agent_track, caller_track, replay

MAX_POINTS = 4000
WAV_TYPE = "audio/wav"
OPUS_TYPE = "audio/ogg; codecs=opus"
SAMPLE_RATE_HZ = 8000


def call_audio(record_path: str | Path) -> tuple[bytes, bytes]:
    """(caller track, agent track) as 8 kHz mu-law, both from the call's start. The caller's frames are placed
    when they were received (voicecore/call/record_reader.py ``received_at_ns``: the clock the call store's
    speech times use too); the agent's as the replay of the record places what the caller heard."""
    header, entries, complete = load_record(record_path)
    if not entries:
        return b"", b""
    result = replay(header, entries, stop_at_divergence=False, complete=complete)
    origin = entries[0]["t"]
    received = [(received_at_ns(t, len(audio) // timing.FRAME_BYTES), audio) for t, audio in result.caller_audio]
    return caller_track(dataclasses.replace(result, caller_audio=received), origin), agent_track(result, origin)


def wav(caller: bytes, agent: bytes) -> bytes:
    return stereo_wav_bytes(caller, agent)


def stereo_samples(caller: bytes, agent: bytes) -> np.ndarray:
    """Both tracks as 16-bit samples, one column each (caller left, agent right), the shorter one padded with
    silence: the WAV's frames."""
    left, right = ulaw_to_linear(caller), ulaw_to_linear(agent)
    frames = np.zeros((max(left.size, right.size), 2), dtype=np.int16)
    frames[: left.size, 0] = left
    frames[: right.size, 1] = right
    return frames


def opus(caller: bytes, agent: bytes) -> bytes:
    """Both tracks as stereo Opus in an Ogg file (RFC 7845), at 8 kHz. Not the same bytes from one encoding to
    the next (the Ogg stream's serial number is random), so its entity tag is that of the bytes served."""
    out = io.BytesIO()
    soundfile.write(out, stereo_samples(caller, agent), SAMPLE_RATE_HZ, format="OGG", subtype="OPUS")
    return out.getvalue()


@dataclasses.dataclass(frozen=True, slots=True)
class Rendition:
    """One encoding of a recording as it is served: its bytes, their media type and entity tag."""
    body: bytes
    content_type: str
    etag: str


def opus_rendition(caller: bytes, agent: bytes) -> Rendition:
    body = opus(caller, agent)
    return Rendition(body, OPUS_TYPE, ranges.entity_tag(body))


@dataclasses.dataclass(frozen=True, slots=True)
class Recording:
    """A call's audio as the console serves it: both tracks (for the waveform), the WAV and its entity tag."""
    caller: bytes
    agent: bytes
    wav: bytes
    etag: str

    @property
    def size_bytes(self) -> int:
        return len(self.caller) + len(self.agent) + len(self.wav)

    @property
    def wav_rendition(self) -> Rendition:
        return Rendition(self.wav, WAV_TYPE, self.etag)


def recording(record_path: str | Path) -> Recording:
    caller, agent = call_audio(record_path)
    body = wav(caller, agent)
    return Recording(caller, agent, body, ranges.entity_tag(body))


def peaks(track: bytes, points: int) -> list[float]:
    """The track's loudest sample per bucket, ``points`` buckets over ``total`` samples, 0..1 (3 decimals)."""
    points = max(1, min(points, MAX_POINTS))
    if not track:
        return []
    samples = np.abs(ulaw_to_linear(track).astype(np.int32))
    edges = np.linspace(0, samples.size, num=min(points, samples.size) + 1).astype(np.int64)
    maxima = np.maximum.reduceat(samples, edges[:-1]) if samples.size else np.zeros(0)
    return [round(float(v) / 32768.0, 3) for v in maxima]


def waveform(caller: bytes, agent: bytes, points: int) -> dict:
    """The waveform the call page draws: both tracks' peaks over the same time axis."""
    duration_ms = max(len(caller), len(agent)) // 8
    length = max(len(caller), len(agent))
    padded_caller = caller + b"\xff" * (length - len(caller))
    padded_agent = agent + b"\xff" * (length - len(agent))
    return {"duration_ms": duration_ms, "sample_rate": 8000, "caller": peaks(padded_caller, points),
            "agent": peaks(padded_agent, points)}
