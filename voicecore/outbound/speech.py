"""Speech or silence, frame by frame, from energy: the cadence of a greeting.

Owns a noise floor that follows the line when nobody talks, the speech threshold above it, and the
running figures a greeting is judged by: when speech began, how much of it there has been, and how long
the line has been quiet since. Pure: frames (as float samples) and their times come in.
"""

from __future__ import annotations

import math

import numpy as np

from voicecore.timing import FRAME_MS

MIN_SPEECH_RMS = 200.0  # 16-bit linear: never speech below this, however quiet the line
SPEECH_OVER_FLOOR = 3.0  # 9.5 dB above the noise floor: a 20 ms frame of line noise never gets there
FLOOR_SETTLE = 0.05  # how fast the floor rises towards a quiet frame that is louder than it
FLOOR_RISE_LIMIT = 1.5  # frames louder than this times the floor (weak speech) do not raise it


class SpeechSegmenter:
    def __init__(self, min_rms: float = MIN_SPEECH_RMS, over_floor: float = SPEECH_OVER_FLOOR):
        self._min_rms = min_rms
        self._over_floor = over_floor
        self.noise_floor_rms: float | None = None  # the first frame sets it; a quieter one lowers it at once
        self.speech_ms = 0  # voiced frames so far, in ms
        self.first_speech_ms: int | None = None
        self.last_speech_end_ms: int | None = None
        self.now_ms = 0
        self.speaking = False

    def feed(self, samples: np.ndarray, at_ms: int) -> bool:
        """One frame starting at ``at_ms``; True when it is speech."""
        rms = math.sqrt(float(samples @ samples) / len(samples)) if len(samples) else 0.0
        if self.noise_floor_rms is None:
            self.noise_floor_rms = max(rms, 1.0)
        is_speech = rms >= max(self._min_rms, self.noise_floor_rms * self._over_floor)
        if is_speech:
            self.speech_ms += FRAME_MS
            if self.first_speech_ms is None:
                self.first_speech_ms = at_ms
            self.last_speech_end_ms = at_ms + FRAME_MS
        elif rms < self.noise_floor_rms:
            self.noise_floor_rms = max(rms, 1.0)
        elif rms < self.noise_floor_rms * FLOOR_RISE_LIMIT:
            self.noise_floor_rms += (rms - self.noise_floor_rms) * FLOOR_SETTLE
        self.speaking = is_speech
        self.now_ms = at_ms + FRAME_MS
        return is_speech

    def silence_ms(self) -> int:
        """How long the line has been quiet since the last speech (0 while speaking or before any speech)."""
        if self.last_speech_end_ms is None:
            return 0
        return self.now_ms - self.last_speech_end_ms
