"""A simulated caller's words as speech: text rendered by espeak-ng into 8 kHz mu-law, as a phone carries it.

Owns running espeak-ng (the Debian package of that name; it is not a Python dependency) and turning its WAV
into the carrier's audio: mono, 8 kHz, mu-law, the silence espeak-ng leaves around the words trimmed to a
short pad, the peak brought to the level of the packaged clips. The same text, voice and espeak-ng version
give the same bytes, so a model simulator that was given the audio with its text (SimConfig.caller_phrases)
recognises it in the caller's stream and transcribes it as that text.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from voicecore.errors import MisuseError
from voicecore.g711 import linear_to_ulaw, read_wav_as_ulaw, ulaw_to_linear
from voicecore.timing import BYTES_PER_MS

ESPEAK = "espeak-ng"
# espeak-ng voices of the caller, by the agent's main language (the packaged caller clips use the same)
VOICES = {"en": "en+m3", "sv": "sv+m3"}
CALLER_WPM = 170
SILENCE_RMS = 300.0  # a 10 ms window quieter than this (16-bit linear) is the silence around the words
LEAD_PAD_MS = 50
TAIL_PAD_MS = 100
PEAK = 0.7 * 32767  # about -3 dBFS, as the packaged clips are normalised
SYNTH_TIMEOUT_S = 30.0


class SpeechUnavailable(MisuseError, RuntimeError):
    """espeak-ng is not installed (or failed): a caller's text cannot be spoken."""


def espeak_path() -> str | None:
    return shutil.which(ESPEAK)


def voice_for(language: str) -> str:
    return VOICES.get(language.split("-")[0].lower(), VOICES["en"])


def speak(text: str, language: str = "en") -> bytes:
    """``text`` said by the caller's voice for ``language``, as raw 8 kHz mu-law."""
    program = espeak_path()
    if program is None:
        raise SpeechUnavailable(f"{ESPEAK} is not installed (Debian: apt-get install espeak-ng): "
                                "the callers' lines cannot be spoken")
    with tempfile.TemporaryDirectory(prefix="voicecore-voice-") as tmp:
        wav = Path(tmp) / "line.wav"
        try:
            subprocess.run([program, "-v", voice_for(language), "-s", str(CALLER_WPM), "-w", str(wav), "--", text],
                           check=True, capture_output=True, timeout=SYNTH_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SpeechUnavailable(f"{ESPEAK} could not say {text!r}: {exc}") from None
        return _shaped(read_wav_as_ulaw(wav))


def _shaped(ulaw: bytes) -> bytes:
    """Trimmed to the words with a short pad each side, the peak at PEAK."""
    samples = ulaw_to_linear(ulaw).astype(np.float64)
    window = 10 * BYTES_PER_MS
    count = len(samples) // window
    if count == 0:
        return ulaw
    rms = np.sqrt((samples[: count * window].reshape(count, window) ** 2).mean(axis=1))
    loud = np.nonzero(rms >= SILENCE_RMS)[0]
    if len(loud):
        samples = samples[loud[0] * window:(loud[-1] + 1) * window]
    peak = float(np.abs(samples).max()) if len(samples) else 0.0
    if peak > 0:
        samples = samples * (PEAK / peak)
    pad_lead = np.zeros(LEAD_PAD_MS * BYTES_PER_MS)
    pad_tail = np.zeros(TAIL_PAD_MS * BYTES_PER_MS)
    out = np.concatenate([pad_lead, samples, pad_tail])
    return linear_to_ulaw(np.clip(np.rint(out), -32768, 32767).astype(np.int16))
