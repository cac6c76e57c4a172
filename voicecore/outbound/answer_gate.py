"""The start of a call the node placed: the agent's first words wait until the answer detector says who answered.

Owns what the verdict means for the call, per the agent's ``[outbound]`` actions: a person (or no clear answer:
the agent may be talking to someone, so it is never hung up on) lets the agent start at once; a voicemail hangs
up (``on_voicemail = "hang_up"``), lets the agent start once the beep has sounded (``"greet"``) or say its scripted
``voicemail_message`` then and hang up (``"message"``; for both, when no beep
comes within ``BEEP_WAIT_MS`` after the verdict, it starts anyway: some mailboxes record without one; a
carrier's ``machine_end_beep`` counts as the beep); a screening assistant gets the agent's introduction
(``on_screening = "introduce"``: the agent starts, its greeting naming who calls and why, and waits for the
person put through) or a hang-up; an IVR is handed to the agent (``on_ivr = "model"``), hung up on, or sent the
agent's ``ivr_digits`` (``"dtmf"``: the shell presses them, then the agent starts). The
carrier's AMD result (``on_carrier_amd``) is evidence for the detector (voicecore/outbound/answer.py has the rule). Feeds the
detector (voicecore/outbound/answer.py) the callee's audio as it arrives, in 20 ms frames, timed by the frames
themselves from the first one (the answer), and the callee's words when a recogniser sends them, timed at the
audio heard so far.

Pure: audio and a clock reading come in, a decision comes out.
"""

from __future__ import annotations

from dataclasses import dataclass

from voicecore.outbound.answer import IVR, SCREENING, VOICEMAIL, AnswerDetector, AnswerVerdict, DetectorSettings
from voicecore.timing import FRAME_BYTES, FRAME_MS

START = "start"  # the agent speaks now
HANG_UP = "hang_up"
INTRODUCE = "introduce"  # a screening assistant: the agent speaks now, saying who calls and why
DTMF = "dtmf"  # an IVR: the agent's ivr_digits are pressed now, then the agent starts
MESSAGE = "message"  # a voicemail after its beep: the agent says its scripted voicemail_message (gated), hangs up
ON_VOICEMAIL = ("hang_up", "greet", "message")
ON_SCREENING = ("introduce", "hang_up")
ON_IVR = ("model", "hang_up", "dtmf")
BEEP_WAIT_MS = 4000


@dataclass(frozen=True, slots=True)
class GateDecision:
    action: str  # START, HANG_UP, INTRODUCE (the agent starts: a screening assistant's introduction), DTMF or MESSAGE
    verdict: AnswerVerdict
    at_ms: int  # callee time (since the answer) of the decision: the verdict's, or the beep's end
    beep_at_ms: int | None


class AnswerGate:
    def __init__(self, max_wait_ms: int = 6000, on_voicemail: str = "hang_up", on_screening: str = "introduce",
                 on_ivr: str = "model") -> None:
        for name, value, allowed in (("on_voicemail", on_voicemail, ON_VOICEMAIL),
                                     ("on_screening", on_screening, ON_SCREENING), ("on_ivr", on_ivr, ON_IVR)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        self.detector = AnswerDetector(DetectorSettings(max_wait_ms=max_wait_ms))
        self.on_voicemail = on_voicemail
        self.on_screening = on_screening
        self.on_ivr = on_ivr
        self.callee_ms = 0  # the callee's audio so far
        self.decision: GateDecision | None = None
        self._partial = b""

    @property
    def waiting(self) -> bool:
        return self.decision is None

    def on_audio(self, audio: bytes) -> GateDecision | None:
        """The callee's audio as it came off the ring (any number of whole or split frames)."""
        data = self._partial + audio
        whole = len(data) - len(data) % FRAME_BYTES
        self._partial = data[whole:]
        for offset in range(0, whole, FRAME_BYTES):
            if self.decision is not None:
                break
            self.detector.on_audio(data[offset:offset + FRAME_BYTES], self.callee_ms)
            self.callee_ms += FRAME_MS
            self._decide()
        return self.decision

    def on_words(self, text: str, done: bool) -> GateDecision | None:
        """The callee's transcript as the recogniser sends it (``done``: a completed segment), timed at the
        callee audio heard so far."""
        if self.decision is None:
            if done:
                self.detector.on_transcript_done(text, self.callee_ms)
            else:
                self.detector.on_transcript_delta(text, self.callee_ms)
            self._decide()
        return self.decision

    def on_carrier_amd(self, answered_by: str, at_ms: int) -> GateDecision | None:
        """The carrier's AMD result (Twilio's AnsweredBy values), ``at_ms`` since the answer by the clock; kept
        by the detector even after the decision (the record notes it). ValueError for a value not one of them."""
        self.detector.on_carrier_amd(answered_by, max(at_ms, self.callee_ms))
        if self.decision is None:
            self._decide(at_ms)
        return self.decision

    def on_elapsed(self, elapsed_ms: int) -> GateDecision | None:
        """Time since the answer by the clock: the bound holds when the callee's audio stops coming."""
        if self.decision is None:
            self.detector.on_tick(max(elapsed_ms, self.callee_ms))
            self._decide(elapsed_ms)
        return self.decision

    def _decide(self, now_ms: int | None = None) -> None:
        verdict = self.detector.verdict
        if verdict is None:
            return
        now_ms = self.callee_ms if now_ms is None else max(now_ms, self.callee_ms)
        beep_at = self.detector.beep_at_ms
        if verdict.verdict == SCREENING:
            action = HANG_UP if self.on_screening == "hang_up" else INTRODUCE
            self.decision = GateDecision(action, verdict, verdict.at_ms, beep_at)
        elif verdict.verdict == IVR:
            action = {"hang_up": HANG_UP, "dtmf": DTMF}.get(self.on_ivr, START)
            self.decision = GateDecision(action, verdict, verdict.at_ms, beep_at)
        elif verdict.verdict != VOICEMAIL:
            self.decision = GateDecision(START, verdict, verdict.at_ms, beep_at)
        elif self.on_voicemail == "hang_up":
            self.decision = GateDecision(HANG_UP, verdict, verdict.at_ms, beep_at)
        else:  # greet or message: after the beep
            after_beep = MESSAGE if self.on_voicemail == "message" else START
            if self.detector.beep_end_ms is not None:
                self.decision = GateDecision(after_beep, verdict, self.detector.beep_end_ms, beep_at)
            elif self.detector.carrier_beep_ms is not None:  # the carrier heard the beep (machine_end_beep)
                self.decision = GateDecision(after_beep, verdict, max(self.detector.carrier_beep_ms, verdict.at_ms),
                                             beep_at)
            elif now_ms >= verdict.at_ms + BEEP_WAIT_MS:
                self.decision = GateDecision(after_beep, verdict, now_ms, beep_at)
