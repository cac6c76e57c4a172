"""Who answered an outbound call: a person, a voicemail, a call-screening assistant or an IVR menu.

Owns the decision, not the audio path: an ``AnswerDetector`` is fed the callee's audio frames (8 kHz
mu-law, 20 ms) with their times since the answer, the callee's transcript as it arrives, and optionally
the carrier's own answering-machine detection (Twilio's ``AnsweredBy`` values); it returns a verdict as
soon as the evidence allows and at the latest at ``max_wait_ms``. Pure: nothing here reads a socket or a
clock, so the same frames and text always give the same verdict at the same time.

The signals, in the order they decide:

- the carrier's AMD: ``human`` decides at once (starting to talk hangs up on nobody), unless our own audio
  has heard more than a person's hello already (``human_max_speech_ms`` of speech): then the words or a beep
  still name the machine, and the pause or the bound give ``unknown`` instead of a voicemail (the two
  disagree, and only a voicemail is hung up on). A ``machine_end_*`` decides at once (``machine_end_beep`` a
  voicemail; the others a voicemail unless the words already named a screening assistant or an IVR, which
  carriers report as machines too) when our audio agrees or heard nothing (synchronous AMD holds the stream
  back until it has decided); over a greeting our audio heard as hello-length (some speech, less than
  ``machine_speech_ms_carrier_hint``) it is a hint only, as ``machine_start`` always is: a machine-long
  greeting counts sooner, and a short hello followed by quiet is still a person. ``fax`` gives ``unknown``.
  The carrier's word alone never hangs up on someone who sounded like a person (carriers' guesses are what
  hang up on people);
- the words (voicecore/outbound/phrases.py): a strong phrase decides at once;
- the cadence: a person says a short "hello?" and waits, so a short burst of speech followed by
  ``human_silence_ms`` of quiet is a person; a machine talks on, so ``machine_speech_ms`` of speech is a
  machine, named when its greeting pauses (``words_grace_ms`` longer while the words of its last stretch are
  still to come from a recogniser that sends words) or at the bound (the words' class if a weak phrase was heard,
  else a voicemail);
- the beep (voicecore/outbound/beep.py) after speech: a voicemail. The detector keeps listening after
  its verdict so ``beep_at_ms`` is known when the voicemail's beep comes (the agent's message goes after it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voicecore.g711 import ulaw_to_linear
from voicecore.outbound import phrases
from voicecore.outbound.beep import BeepDetector
from voicecore.outbound.speech import SpeechSegmenter
from voicecore.timing import FRAME_BYTES, FRAME_MS

HUMAN = "human"
VOICEMAIL = phrases.VOICEMAIL
SCREENING = phrases.SCREENING
IVR = phrases.IVR
UNKNOWN = "unknown"
VERDICTS = (HUMAN, VOICEMAIL, SCREENING, IVR, UNKNOWN)

# Twilio's AnsweredBy values (MachineDetection / AsyncAmd); other carriers' results are mapped onto these.
CARRIER_HUMAN = "human"
CARRIER_MACHINE_START = "machine_start"
CARRIER_MACHINE_END = frozenset({"machine_end_beep", "machine_end_silence", "machine_end_other"})
CARRIER_FAX = "fax"
CARRIER_UNKNOWN = "unknown"
CARRIER_ANSWERS = frozenset({CARRIER_HUMAN, CARRIER_MACHINE_START, CARRIER_FAX, CARRIER_UNKNOWN} | CARRIER_MACHINE_END)

DEFAULT_MAX_WAIT_MS = 6000


@dataclass(frozen=True, slots=True)
class DetectorSettings:
    """The thresholds (tuned on the tuning corpus only: bench/answer_detection.py)."""

    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    # a person's greeting: at least this much speech (not a click), at most human_max_speech_ms, then quiet
    min_greeting_speech_ms: int = 100
    human_max_speech_ms: int = 2400
    human_silence_ms: int = 700
    # a machine's greeting: this much speech; sooner when the carrier says machine_start
    machine_speech_ms: int = 3000
    machine_speech_ms_carrier_hint: int = 1200
    # a machine-long greeting's pause waits this much longer for the words of its last stretch of speech when a
    # recogniser is sending words at all (they name screening assistants and IVRs, and come a segment late)
    words_grace_ms: int = 1500
    # ... a stretch of speech is what a recogniser transcribes as one segment: speech after this much quiet
    # begins a new one (the listening session ends a segment after 300 ms of silence: workers/model/answer_wait.py)
    segment_silence_ms: int = 300

    def __post_init__(self):
        if self.max_wait_ms <= 0:
            raise ValueError(f"max_wait_ms must be positive, got {self.max_wait_ms}")


@dataclass(frozen=True, slots=True)
class AnswerVerdict:
    verdict: str  # one of VERDICTS
    at_ms: int  # time since the answer when it was reached
    reason: str  # which signal decided: carrier_amd, words, short_greeting, long_greeting, beep, max_wait
    detail: str = ""  # the phrase, the carrier's value, the beep's frequency


class AnswerDetector:
    """Feed it from the moment the call is answered (time 0); ``verdict`` is set once and never changes."""

    def __init__(self, settings: DetectorSettings | None = None):
        self.settings = settings or DetectorSettings()
        self._speech = SpeechSegmenter()
        self._beeps = BeepDetector()
        self._text_done = ""  # completed transcript segments
        self._text_partial = ""  # the segment being transcribed
        self._weak_class: str | None = None
        self._carrier_hint = False
        self._machine_heard = False
        self._carrier_said_human = False  # ... over a greeting our audio heard as longer than a hello
        self._last_words_ms: int | None = None  # the latest transcript event (None: no recogniser sends words)
        self._stretches = 0  # stretches of speech heard (each one a recogniser's segment)
        self._segments_done = 0  # completed transcript segments
        self.carrier_amd = ""  # the carrier's answer (its AnsweredBy value), once it came
        self.carrier_amd_ms: int | None = None  # when it came (since the answer; late ones too)
        self.carrier_beep_ms: int | None = None  # the carrier said machine_end_beep: its message may start now
        self.verdict: AnswerVerdict | None = None
        self.now_ms = 0

    @property
    def beep_at_ms(self) -> int | None:
        """When the voicemail's beep began (None: no beep heard yet)."""
        beep = self._beeps.beep
        return beep.start_ms if beep is not None else None

    @property
    def beep_end_ms(self) -> int | None:
        """When the beep stopped (None: none heard, or still sounding): the agent's message starts after it."""
        beep = self._beeps.beep
        return beep.end_ms if beep is not None else None

    # -- the inputs ---------------------------------------------------------------------------------------

    def on_audio(self, frame: bytes, at_ms: int) -> AnswerVerdict | None:
        """One callee frame (``FRAME_BYTES`` of mu-law) beginning ``at_ms`` after the answer."""
        if len(frame) != FRAME_BYTES:
            raise ValueError(f"a callee frame is {FRAME_BYTES} bytes of mu-law, got {len(frame)}")
        samples = ulaw_to_linear(frame).astype(np.float64)
        ended = self._speech.last_speech_end_ms
        if self._speech.feed(samples, at_ms) and (ended is None or at_ms - ended >= self.settings.segment_silence_ms):
            self._stretches += 1
        beep = self._beeps.feed(samples, at_ms)
        self._advance(at_ms + FRAME_MS)
        if self.verdict is not None:
            return None
        if beep is not None and self._speech.first_speech_ms is not None and self._speech.first_speech_ms < beep.start_ms:
            return self._decide(VOICEMAIL, "beep", f"{beep.frequency_hz:.0f} Hz")
        return self._judge_cadence() or self._check_deadline()

    def on_transcript_delta(self, text: str, at_ms: int) -> AnswerVerdict | None:
        """Words of the callee's transcript as they arrive (appended to the segment being transcribed)."""
        self._text_partial += text
        return self._judge_words(at_ms)

    def on_transcript_done(self, text: str, at_ms: int) -> AnswerVerdict | None:
        """A completed transcript segment (replaces its deltas)."""
        self._text_done = f"{self._text_done} {text}".strip()
        self._text_partial = ""
        self._segments_done += 1
        return self._judge_words(at_ms)

    def on_carrier_amd(self, answered_by: str, at_ms: int) -> AnswerVerdict | None:
        """The carrier's answering-machine detection result (Twilio ``AnsweredBy``). Kept whenever it comes
        (``carrier_amd``, ``carrier_amd_ms``); it decides only while no verdict was reached."""
        if answered_by not in CARRIER_ANSWERS:
            raise ValueError(f"not a carrier AMD result: {answered_by!r} (one of {', '.join(sorted(CARRIER_ANSWERS))})")
        self._advance(at_ms)
        if not self.carrier_amd:
            self.carrier_amd, self.carrier_amd_ms = answered_by, self.now_ms
        if answered_by == "machine_end_beep" and self.carrier_beep_ms is None:
            self.carrier_beep_ms = self.now_ms
        if self.verdict is not None:
            return None
        if answered_by == CARRIER_HUMAN:
            if self._machine_heard or self._speech.speech_ms > self.settings.human_max_speech_ms:
                self._carrier_said_human = True
                return None
            return self._decide(HUMAN, "carrier_amd", answered_by)
        if answered_by == CARRIER_FAX:
            return self._decide(UNKNOWN, "carrier_amd", answered_by)
        if answered_by in CARRIER_MACHINE_END and not self._heard_a_hello():
            machine = VOICEMAIL if answered_by == "machine_end_beep" else self._weak_class or VOICEMAIL
            return self._decide(machine, "carrier_amd", answered_by)
        if answered_by == CARRIER_MACHINE_START or answered_by in CARRIER_MACHINE_END:
            self._carrier_hint = True
            return self._judge_cadence()
        return None

    def _heard_a_hello(self) -> bool:
        """Our own audio heard a greeting of a person's length so far: some speech, not yet machine-long."""
        speech_ms = self._speech.speech_ms
        return (self.settings.min_greeting_speech_ms <= speech_ms < self.settings.machine_speech_ms_carrier_hint
                and not self._machine_heard)

    def on_tick(self, now_ms: int) -> AnswerVerdict | None:
        """The clock moved (no audio came): the bound still holds when the callee's audio stops arriving."""
        self._advance(now_ms)
        return None if self.verdict is not None else self._check_deadline()

    # -- the rules ----------------------------------------------------------------------------------------

    def _advance(self, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)

    def _decide(self, verdict: str, reason: str, detail: str = "") -> AnswerVerdict:
        self.verdict = AnswerVerdict(verdict, self.now_ms, reason, detail)
        return self.verdict

    def _judge_words(self, at_ms: int) -> AnswerVerdict | None:
        self._advance(at_ms)
        self._last_words_ms = self.now_ms
        if self.verdict is not None:
            return None
        found = phrases.find_phrases(f"{self._text_done} {self._text_partial}")
        strong = phrases.strongest(found, phrases.STRONG)
        if strong is not None:
            detail = next(match.phrase for match in found if match.answer_class == strong)
            return self._decide(strong, "words", detail)
        self._weak_class = phrases.strongest(found, phrases.WEAK) or self._weak_class
        return self._judge_cadence() or self._check_deadline()

    def _judge_cadence(self) -> AnswerVerdict | None:
        settings, speech = self.settings, self._speech
        machine_ms = settings.machine_speech_ms_carrier_hint if self._carrier_hint else settings.machine_speech_ms
        if speech.speech_ms >= machine_ms:
            # A machine: which kind is in its words, and the words that tell (press 1, state your name) often
            # come late, so it is named when the greeting pauses, or at the bound. Nobody waits on a machine.
            self._machine_heard = True
            quiet_ms = settings.human_silence_ms
            if self._last_words_ms is not None and self._segments_done < self._stretches:
                quiet_ms += settings.words_grace_ms  # the words of the speech before this pause are on their way
            if speech.silence_ms() >= quiet_ms and not self._carrier_said_human:
                return self._decide(self._weak_class or VOICEMAIL, "long_greeting",
                                    f"{speech.speech_ms} ms of speech, then quiet")
            return None
        if (settings.min_greeting_speech_ms <= speech.speech_ms <= settings.human_max_speech_ms
                and speech.silence_ms() >= settings.human_silence_ms):
            return self._decide(HUMAN, "short_greeting", f"{speech.speech_ms} ms of speech, then quiet")
        return None

    def _check_deadline(self) -> AnswerVerdict | None:
        if self.now_ms < self.settings.max_wait_ms:
            return None
        if self._machine_heard and self._carrier_said_human:
            return self._decide(UNKNOWN, "max_wait", "a machine-long greeting the carrier called human")  # agent starts
        if self._machine_heard:
            return self._decide(self._weak_class or VOICEMAIL, "max_wait", f"{self._speech.speech_ms} ms of speech")
        if self._carrier_hint and self._speech.speech_ms > 0:
            return self._decide(self._weak_class or VOICEMAIL, "max_wait", "carrier said machine_start")
        return self._decide(UNKNOWN, "max_wait", f"{self._speech.speech_ms} ms of speech")
