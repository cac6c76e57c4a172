"""The simulated vendor's speech endpoint (text to speech), sans-I/O: `POST /v1/audio/speech` (OpenAI) and
`POST /openai/v1/audio/speech` (Azure OpenAI), as voicecore renders an agent's fallback lines with it.

Owns the request's check as the vendor makes it (the key, a JSON body with model, input, voice, and the
optional response_format and speed; a refusal is the vendor's JSON error with its HTTP status) and the audio
it answers with: a packaged agent clip whose length fits the text (voicecore.sim.model.clips.fitting_clip),
cut to about as long as the text takes to say at the requested speed, as 24 kHz 16-bit mono PCM (``pcm``)
or the same in a WAV file (``wav``). The shell (voicecore.sim.model_server) routes the request here.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping

import numpy as np
import orjson
import soxr

from voicecore.g711 import ulaw_to_linear
from voicecore.sim.audio_clips import ClipLibrary
from voicecore.sim.model.clips import SPOKEN_CHARS_PER_S, fitting_clip
from voicecore.sim.model.config import SimConfig

SPEECH_PATH_SUFFIX = "/audio/speech"
SPEECH_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
                 "marin", "cedar")
SPEECH_MODELS = ("gpt-4o-mini-tts", "tts-1", "tts-1-hd")  # on OpenAI's path; Azure's names deployments
OUTPUT_RATE_HZ = 24_000
MAX_INPUT_CHARS = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class SpeechRequest:
    """One request the endpoint answered, for a harness to read."""

    form: str  # "openai" | "azure"
    model: str
    voice: str
    text: str
    speed: float
    response_format: str
    status: int


def _error(status: int, message: str, code: str | None = None, param: str | None = None,
           error_type: str = "invalid_request_error") -> tuple[int, str, bytes]:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return status, "application/json", orjson.dumps(body)


def _audio(clips: ClipLibrary, text: str, speed: float) -> np.ndarray:
    """int16 samples at 8 kHz: the fitting agent clip, stretched or squeezed to the time the text takes to
    say at ``speed`` (its pitch moves with it: a simulator's voice, not a vocoder)."""
    agent_clips = [c for c in clips.infos if c.role == "agent"]
    clip = fitting_clip(text, agent_clips)
    samples = ulaw_to_linear(clips.audio[clip.name]).astype(np.float64)
    want = max(1, int(8000 * len(text) / SPOKEN_CHARS_PER_S / speed))
    positions = np.linspace(0, len(samples) - 1, want)
    return np.rint(np.interp(positions, np.arange(len(samples)), samples)).astype(np.int16)


def speech_response(config: SimConfig, clips: ClipLibrary, path: str, headers: Mapping[str, str],
                    body: bytes) -> tuple[tuple[int, str, bytes], SpeechRequest | None]:
    """((status, content type, body), what was asked) for one request; ``headers`` with lower-case names."""
    form = "azure" if path.startswith("/openai/") else "openai"
    authorization = headers.get("authorization", "")
    key = authorization[7:].strip() if authorization[:7].lower() == "bearer " else None
    if form == "azure" and headers.get("api-key"):
        key = headers["api-key"]
    if config.api_keys and key not in config.api_keys:
        if form == "azure":
            return _error(401, "Access denied due to invalid subscription key or wrong API endpoint.", "401"), None
        return _error(401, "Incorrect API key provided. You can find your API key at "
                           "https://platform.openai.com/account/api-keys.", "invalid_api_key"), None
    try:
        request = orjson.loads(body)
    except ValueError:
        return _error(400, "We could not parse the JSON body of your request."), None
    if not isinstance(request, dict):
        return _error(400, "The body must be a JSON object."), None
    for name in ("model", "input", "voice"):
        if not isinstance(request.get(name), str) or not request[name]:
            return _error(400, f"Missing required parameter: '{name}'.", "missing_required_parameter", name), None
    known = {"model", "input", "voice", "response_format", "speed", "instructions", "stream_format"}
    unknown = sorted(set(request) - known)
    if unknown:
        return _error(400, f"Unrecognized request argument supplied: {unknown[0]}", "unknown_parameter", unknown[0]), None
    model, text, voice = request["model"], request["input"], request["voice"]
    if form == "openai" and model not in SPEECH_MODELS:
        return _error(404, f"The model '{model}' does not exist or you do not have access to it.", "model_not_found"), None
    if len(text) > MAX_INPUT_CHARS:
        return _error(400, f"Input is too long: at most {MAX_INPUT_CHARS} characters.", "string_above_max_length",
                      "input"), None
    if voice not in SPEECH_VOICES:
        return _error(400, f"Invalid value: '{voice}'. Supported values are: "
                           + ", ".join(f"'{v}'" for v in SPEECH_VOICES) + ".", "invalid_value", "voice"), None
    response_format = request.get("response_format", "mp3")
    if response_format not in ("pcm", "wav"):
        return _error(400, "The voicecore model simulator renders response_format pcm or wav only.",
                      "invalid_value", "response_format"), None
    speed = request.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0.25 <= speed <= 4.0:
        return _error(400, "Invalid value for 'speed': expected a number from 0.25 to 4.0.", "invalid_value",
                      "speed"), None
    samples = _audio(clips, text, float(speed))
    resampled = soxr.resample(samples.astype(np.float32) / 32768.0, 8000, OUTPUT_RATE_HZ, quality="HQ")
    pcm = np.clip(np.rint(resampled * 32768.0), -32768, 32767).astype("<i2").tobytes()
    asked = SpeechRequest(form, model, voice, text, float(speed), response_format, 200)
    if response_format == "pcm":
        return (200, "audio/pcm", pcm), asked
    return (200, "audio/wav", wav_bytes(pcm, OUTPUT_RATE_HZ)), asked


def wav_bytes(pcm: bytes, rate_hz: int) -> bytes:
    """16-bit mono PCM as a WAV file (RIFF, one fmt and one data chunk), built in memory."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate_hz, rate_hz * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 4 + (8 + len(fmt)) + (8 + len(pcm))) + b"WAVE"
            + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(pcm)) + pcm)
