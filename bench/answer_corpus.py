"""The labelled answer corpus: greetings spoken by espeak-ng, placed on a phone line with noise and a beep.

Owns turning a greeting's text (voicecore/outbound/greetings.py) into what the callee's side of a call
carries after the answer: a moment of line noise, the greeting in one of several voices and speeds, then
what that kind of answer does next (a person waits in silence; a voicemail pauses, beeps at 440-2000 Hz
and records silence; a screening assistant or an IVR waits for the caller), with noise at a chosen level
over all of it, as 8 kHz mu-law. It also times the greeting's transcript the way a streaming recogniser
delivers it (each word shortly after it was said), since the detector reads words too.

Needs espeak-ng on PATH (Debian package `espeak-ng`). Every random choice comes from a seed, so a clip is the
same every run for the same espeak-ng version.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voicecore.g711 import linear_to_ulaw, read_wav_as_ulaw, ulaw_to_linear
from voicecore.outbound.greetings import CLASSES
from voicecore.sim.callee_core import beep_tone
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES

ESPEAK = "espeak-ng"
SYNTH_TIMEOUT_S = 20
# (voice variant, words per minute): a few speakers and speeds; the language's voice comes first
VOICES = (("+f3", 165), ("+m3", 185), ("+f2", 150), ("+m1", 200), ("+f4", 175))
LANGUAGE_VOICES = {"en": "en-us", "sv": "sv"}
NOISE_SNR_DB = (None, 30.0, 20.0, 15.0)  # None: a clean line (mu-law's own quantization only)
SPEECH_PEAK = 12000.0  # 16-bit linear: the greeting's loudest sample, a little under a phone's full scale
SILENCE_RMS = 300.0
ASR_WORD_DELAY_MS = 300  # a streaming recogniser's lag behind the word
ASR_DONE_DELAY_MS = 700  # and to the completed segment after the last word
PERSON_WAITS_MS = 5000  # a person who said hello waits this long for an answer
MACHINE_WAITS_MS = 4000  # a screening assistant or IVR waits for a response (or repeats) after this


class SpeechMissing(RuntimeError):
    """espeak-ng is not installed or failed."""


def espeak_available() -> bool:
    return shutil.which(ESPEAK) is not None


@dataclass
class Clip:
    """One labelled answer: the callee's audio from the answer on, and its transcript events."""

    name: str
    label: str  # human | voicemail | screening | ivr
    text: str
    audio: bytes  # mu-law, a whole number of frames
    transcript: list[tuple[int, str, str]] = field(default_factory=list)  # (at_ms, "delta" | "done", text)
    beep_at_ms: int | None = None
    beep_hz: float | None = None
    greeting_end_ms: int = 0  # when the greeting's last word ended

    def frames(self):
        for offset in range(0, len(self.audio), FRAME_BYTES):
            yield offset // BYTES_PER_MS, self.audio[offset:offset + FRAME_BYTES]


def speak(text: str, language: str, variant: int) -> np.ndarray:
    """``text`` in voice ``variant``, trimmed to the words, peak at SPEECH_PEAK, as float 8 kHz samples."""
    program = shutil.which(ESPEAK)
    if program is None:
        raise SpeechMissing(f"{ESPEAK} is not installed (Debian: apt-get install espeak-ng)")
    suffix, wpm = VOICES[variant % len(VOICES)]
    voice = LANGUAGE_VOICES.get(language, language) + suffix
    with tempfile.TemporaryDirectory(prefix="voicecore-answer-") as tmp:
        wav = Path(tmp) / "greeting.wav"
        try:
            subprocess.run([program, "-v", voice, "-s", str(wpm), "-w", str(wav), "--", text],
                           check=True, capture_output=True, timeout=SYNTH_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SpeechMissing(f"{ESPEAK} could not say {text!r} in {voice}: {exc}") from None
        samples = ulaw_to_linear(read_wav_as_ulaw(wav)).astype(np.float64)
    window = 10 * BYTES_PER_MS
    count = len(samples) // window
    rms = np.sqrt((samples[: count * window].reshape(count, window) ** 2).mean(axis=1))
    loud = np.nonzero(rms >= SILENCE_RMS)[0]
    if len(loud):
        samples = samples[loud[0] * window:(loud[-1] + 1) * window]
    peak = float(np.abs(samples).max()) if len(samples) else 0.0
    return samples * (SPEECH_PEAK / peak) if peak > 0 else samples


def transcript_events(text: str, speech_start_ms: int, speech_ms: int) -> list[tuple[int, str, str]]:
    """A streaming recogniser's output for ``text`` said from ``speech_start_ms`` for ``speech_ms``: a delta
    per word (word i ends at its share of the characters), then the completed segment."""
    words = text.split()
    total = sum(len(word) + 1 for word in words)
    events, spoken = [], 0
    for index, word in enumerate(words):
        spoken += len(word) + 1
        at = speech_start_ms + speech_ms * spoken // total + ASR_WORD_DELAY_MS
        events.append((at, "delta", word if index == 0 else f" {word}"))
    events.append((speech_start_ms + speech_ms + ASR_DONE_DELAY_MS, "done", text))
    return events


def make_clip(label: str, language: str, text: str, variant: int, seed: int) -> Clip:
    """One answer of kind ``label``; ``variant`` picks the voice, speed and noise, ``seed`` the rest."""
    if label not in CLASSES:
        raise ValueError(f"not an answer class: {label!r}")
    rng = np.random.default_rng(seed)
    speech = speak(text, language, variant)
    lead_ms = int(rng.integers(150, 700))
    parts = [np.zeros(lead_ms * BYTES_PER_MS), speech]
    speech_ms = len(speech) // BYTES_PER_MS
    beep_at_ms = beep_hz = None
    if label == "voicemail":
        gap_ms = int(rng.integers(300, 900))
        beep_hz = float(rng.uniform(440.0, 2000.0))
        beep_ms = int(rng.integers(250, 1000))
        beep_at_ms = lead_ms + speech_ms + gap_ms
        parts += [np.zeros(gap_ms * BYTES_PER_MS), beep_tone(beep_hz, beep_ms, float(rng.uniform(4000, 12000))),
                  np.zeros(2000 * BYTES_PER_MS)]
    else:
        parts.append(np.zeros((PERSON_WAITS_MS if label == "human" else MACHINE_WAITS_MS) * BYTES_PER_MS))
    line = np.concatenate(parts)
    line = np.concatenate([line, np.zeros((-len(line)) % FRAME_BYTES)])
    snr_db = NOISE_SNR_DB[variant % len(NOISE_SNR_DB)]
    if snr_db is not None:
        speech_rms = float(np.sqrt(np.mean(speech ** 2))) if len(speech) else SPEECH_PEAK / 4
        line = line + rng.normal(0.0, speech_rms / (10 ** (snr_db / 20)), len(line))
    audio = linear_to_ulaw(np.clip(np.rint(line), -32768, 32767).astype(np.int16))
    name = f"{label}-{language}-v{variant}-{seed}"
    return Clip(name, label, text, audio, transcript_events(text, lead_ms, speech_ms), beep_at_ms, beep_hz,
                lead_ms + speech_ms)


def corpus(greetings: dict[str, list[tuple[str, str]]], variants: int, seed: int,
           limit_per_class: int | None = None) -> list[Clip]:
    """Every greeting in ``variants`` voices (each with its noise level); ``limit_per_class`` caps each class."""
    clips: list[Clip] = []
    for label in CLASSES:
        made = 0
        for index, (language, text) in enumerate(greetings.get(label, [])):
            for variant in range(variants):
                if limit_per_class is not None and made >= limit_per_class:
                    break
                clips.append(make_clip(label, language, text, (index + variant) % len(VOICES),
                                       seed * 100_003 + len(clips)))
                made += 1
    return clips
