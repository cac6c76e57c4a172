"""The voicemail beep: a steady tone of 440-2000 Hz heard for at least 150 ms.

Owns a bank of Goertzel filters over each 20 ms frame and the rule that makes a run of tonal frames a
beep. A Goertzel filter's output power at frequency f over N samples is |sum x[n] e^(-2 pi i f n / fs)|^2
(the closed form of its recurrence's final state), so the bank is one matrix product per frame: cheap
enough for every frame of every call, and exactly what the recurrence gives
(tests/unit/test_answer_detect.py checks the two agree).

A frame is tonal when one filter holds most of the frame's energy (a sine at a filter's frequency puts
all of it there; speech spreads it over many harmonics and formants) and the frame is loud enough to be
heard. A beep is tonal frames in a row at the same frequency (within one filter step either way) for
``min_ms``. Pure: frames and their times come in, nothing is read or timed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voicecore.timing import FRAME_MS, SAMPLE_RATE_HZ

BEEP_LOW_HZ = 440.0
BEEP_HIGH_HZ = 2000.0
BANK_STEP_HZ = 20.0  # a 20 ms frame's filters are ~50 Hz wide; a 20 Hz step loses < 1 dB between filters
MIN_BEEP_MS = 150
TONAL_SHARE = 0.6  # of the frame's energy in the strongest filter (a clean sine: ~1.0)
MIN_TONE_RMS = 120.0  # 16-bit linear: quieter than this is line noise, not a beep


def goertzel_bank(frequencies_hz: np.ndarray, frame_samples: int, sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """The complex kernels of a Goertzel filter bank: one row per frequency, ``frame_samples`` columns."""
    n = np.arange(frame_samples)
    return np.exp(-2j * np.pi * np.outer(frequencies_hz, n) / sample_rate_hz)


def goertzel_powers(kernels: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """Each filter's output power for ``samples`` (one frame, float)."""
    return np.abs(kernels @ samples) ** 2


@dataclass(slots=True)
class Beep:
    start_ms: int
    frequency_hz: float
    end_ms: int | None = None  # None while the tone is still sounding


class BeepDetector:
    """Feed frames in order; ``beep`` is set once a tone has been steady for ``min_ms``."""

    def __init__(self, low_hz: float = BEEP_LOW_HZ, high_hz: float = BEEP_HIGH_HZ, step_hz: float = BANK_STEP_HZ,
                 min_ms: int = MIN_BEEP_MS, tonal_share: float = TONAL_SHARE, min_rms: float = MIN_TONE_RMS,
                 frame_samples: int = FRAME_MS * SAMPLE_RATE_HZ // 1000):
        if not 0 < low_hz < high_hz < SAMPLE_RATE_HZ / 2:
            raise ValueError(f"beep band {low_hz}-{high_hz} Hz must lie between 0 and {SAMPLE_RATE_HZ // 2} Hz")
        self.frequencies_hz = np.arange(low_hz, high_hz + step_hz / 2, step_hz)
        self.frame_samples = frame_samples
        self._kernels = goertzel_bank(self.frequencies_hz, frame_samples)
        self._min_ms = min_ms
        self._tonal_share = tonal_share
        self._min_energy = min_rms * min_rms * frame_samples
        self._run_start_ms: int | None = None
        self._run_bin = -10
        self._last_ms = 0
        self.beep: Beep | None = None

    def tone_of(self, samples: np.ndarray) -> int | None:
        """The filter index holding a steady share of this frame's energy, or None (not tonal, too quiet)."""
        energy = float(samples @ samples)
        if energy < self._min_energy:
            return None
        powers = goertzel_powers(self._kernels, samples)
        best = int(np.argmax(powers))
        # Parseval: a sine of amplitude A at a filter's frequency gives power (A N / 2)^2 and energy A^2 N / 2
        share = float(powers[best]) * 2.0 / (len(samples) * energy)
        return best if share >= self._tonal_share else None

    def feed(self, samples: np.ndarray, at_ms: int) -> Beep | None:
        """One frame (float samples) starting at ``at_ms``; returns the beep the moment it is recognised."""
        if len(samples) != self.frame_samples:
            raise ValueError(f"a frame has {self.frame_samples} samples, got {len(samples)}")
        tone = self.tone_of(samples)
        frame_end_ms = at_ms + FRAME_MS * len(samples) // self.frame_samples
        self._last_ms = frame_end_ms
        if self.beep is not None:
            if self.beep.end_ms is None and (tone is None or abs(tone - self._run_bin) > 1):
                self.beep.end_ms = at_ms
            return None
        if tone is None:
            self._run_start_ms = None
            return None
        if self._run_start_ms is None or abs(tone - self._run_bin) > 1:
            self._run_start_ms = at_ms
        self._run_bin = tone
        if frame_end_ms - self._run_start_ms >= self._min_ms:
            self.beep = Beep(start_ms=self._run_start_ms, frequency_hz=float(self.frequencies_hz[tone]))
            return self.beep
        return None
