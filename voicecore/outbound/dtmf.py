"""DTMF: the digit sequences an agent sends to an IVR, the tones that carry them in-band, and a detector of them.

Owns:

- the **syntax** of a sequence (``ivr_digits`` in agent.toml, the ``send_dtmf`` tool's ``digits``): the keys
  ``0``-``9``, ``*`` and ``#``, and two pauses, ``w`` (half a second) and ``W`` (one second), the characters
  Telnyx's and Plivo's send-DTMF requests take as they are (:func:`parse_digits`);
- the **tones** (:func:`tone_audio`): each key the sum of its row and column frequencies (ITU-T Q.23), 100 ms
  of tone then 100 ms of quiet, as 8 kHz mu-law whole 20 ms frames: what a call's stream carries when the
  carrier has no way to press keys beside the stream (Twilio's bidirectional stream);
- a **detector** (:class:`DtmfDetector`): eight Goertzel filters at the DTMF frequencies over each 20 ms frame,
  a frame is a key when its strongest row and column filters together hold most of its energy (speech spreads
  its energy; two pure tones do not), with a bounded twist; a key is reported once when held for two frames,
  and again only after a frame that is not that key. It is what the carrier simulator's IVR hears in-band
  (voicecore/sim/ivr_callee.py); the beep detector (voicecore/outbound/beep.py) is its model.

Pure: text, audio and frames in, bytes and digits out.
"""

from __future__ import annotations

import numpy as np

from voicecore.g711 import linear_to_ulaw, ulaw_to_linear
from voicecore.outbound.beep import goertzel_bank, goertzel_powers
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES, SAMPLE_RATE_HZ

KEYS = "0123456789*#"
PAUSES = {"w": 500, "W": 1000}  # ms
MAX_DIGITS = 32  # characters of a sequence, pauses included
TONE_MS = 100
GAP_MS = 100
TONE_AMPLITUDE = 6000.0  # each of the two sines, 16-bit linear (about -11 dBFS together)
ROWS_HZ = (697.0, 770.0, 852.0, 941.0)
COLUMNS_HZ = (1209.0, 1336.0, 1477.0)
_LAYOUT = ("123", "456", "789", "*0#")
KEY_FREQUENCIES: dict[str, tuple[float, float]] = {
    key: (ROWS_HZ[r], COLUMNS_HZ[c]) for r, row in enumerate(_LAYOUT) for c, key in enumerate(row)}


def parse_digits(text: str) -> str:
    """``text`` checked as a digit sequence (returned as it is). ValueError naming the problem: empty, too
    long, a character that is not a key or a pause, or only pauses."""
    if not isinstance(text, str) or not text:
        raise ValueError("a digit sequence is empty")
    if len(text) > MAX_DIGITS:
        raise ValueError(f"a digit sequence is at most {MAX_DIGITS} characters, got {len(text)}")
    bad = sorted({ch for ch in text if ch not in KEYS and ch not in PAUSES})
    if bad:
        raise ValueError(f"{''.join(bad)!r} in {text!r}: only 0-9, *, # and the pauses w (0.5 s) and W (1 s)")
    if not any(ch in KEYS for ch in text):
        raise ValueError(f"{text!r} presses no key")
    return text


def keys_of(digits: str) -> str:
    """The keys a sequence presses, pauses left out."""
    return "".join(ch for ch in digits if ch in KEYS)


def tone_audio(digits: str, tone_ms: int = TONE_MS, gap_ms: int = GAP_MS,
               amplitude: float = TONE_AMPLITUDE) -> bytes:
    """The sequence as in-band tones: 8 kHz mu-law, whole frames (the last padded with quiet)."""
    parse_digits(digits)
    rate = SAMPLE_RATE_HZ
    pieces: list[np.ndarray] = []
    tone_n = tone_ms * BYTES_PER_MS
    t = np.arange(tone_n) / rate
    ramp = min(2 * BYTES_PER_MS, tone_n // 2)  # 2 ms ramps: no click spreading energy over the band
    envelope = np.ones(tone_n)
    envelope[:ramp] = np.linspace(0, 1, ramp)
    envelope[tone_n - ramp:] = np.linspace(1, 0, ramp)
    for ch in digits:
        if ch in PAUSES:
            pieces.append(np.zeros(PAUSES[ch] * BYTES_PER_MS))
            continue
        low, high = KEY_FREQUENCIES[ch]
        pieces.append(amplitude * envelope * (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)))
        pieces.append(np.zeros(gap_ms * BYTES_PER_MS))
    line = np.concatenate(pieces)
    line = np.concatenate([line, np.zeros((-len(line)) % FRAME_BYTES)])
    return bytes(linear_to_ulaw(np.clip(np.rint(line), -32768, 32767).astype(np.int16)))


def tone_ms(digits: str) -> int:
    """How long :func:`tone_audio` of ``digits`` plays."""
    return len(tone_audio(digits)) // BYTES_PER_MS


# The detector's thresholds: a frame is a key when its row and column filters hold this share of its energy, the
# weaker of the two at least TWIST of the stronger (ITU-T Q.24 allows 8 dB of twist; 0.1 in power is 10 dB), each
# at least SEPARATION times the next filter of its group, and the frame is loud enough to be a tone.
KEY_SHARE = 0.7
TWIST = 0.1
SEPARATION = 4.0
MIN_KEY_RMS = 150.0
HOLD_FRAMES = 2  # 40 ms: a key held this long is a press (Q.24: 40 ms must be accepted)


class DtmfDetector:
    """Feed mu-law (any length: split frames are kept); ``feed`` returns the keys recognised in it, in order, and
    ``keys`` keeps them all."""

    def __init__(self, frame_samples: int = FRAME_BYTES) -> None:
        self.frame_samples = frame_samples
        self._frequencies = np.array(ROWS_HZ + COLUMNS_HZ)
        self._kernels = goertzel_bank(self._frequencies, frame_samples)
        self._min_energy = MIN_KEY_RMS * MIN_KEY_RMS * frame_samples
        self._partial = b""
        self._candidate = ""
        self._held = 0
        self._reported = False
        self.keys = ""

    def key_of(self, samples: np.ndarray) -> str:
        """The key one frame (float samples) carries, or ""."""
        energy = float(samples @ samples)
        if energy < self._min_energy:
            return ""
        powers = goertzel_powers(self._kernels, samples)
        rows, columns = powers[:4], powers[4:]
        r, c = int(np.argmax(rows)), int(np.argmax(columns))
        share = (float(rows[r]) + float(columns[c])) * 2.0 / (len(samples) * energy)
        if share < KEY_SHARE:
            return ""
        weak, strong = sorted((float(rows[r]), float(columns[c])))
        if weak < TWIST * strong:
            return ""
        if any(float(group[best]) < SEPARATION * float(np.partition(group, -2)[-2])
               for group, best in ((rows, r), (columns, c))):
            return ""
        return _LAYOUT[r][c]

    def feed(self, audio: bytes) -> str:
        data = self._partial + audio
        whole = len(data) - len(data) % self.frame_samples
        self._partial = data[whole:]
        found = ""
        for offset in range(0, whole, self.frame_samples):
            frame = ulaw_to_linear(data[offset:offset + self.frame_samples])
            key = self.key_of(frame.astype(np.float64))
            if key and key == self._candidate:
                self._held += 1
            else:
                self._candidate, self._held, self._reported = key, 1 if key else 0, False
            if key and not self._reported and self._held >= HOLD_FRAMES:
                self._reported = True
                found += key
        self.keys += found
        return found
