"""Who the carrier simulator's outbound calls reach: a person, a voicemail, a call-screening assistant, an IVR, or
a line that is busy, never answers, or fails. Sans-I/O: plans and audio are made from a seed and given speech.

Owns: the kinds of callee, the plan of one call (how many rings, what is said, the voicemail's beep), the order
and timing of the call's status callbacks as Twilio sends them (initiated, ringing, in-progress, completed; or
busy / no-answer / failed after ringing, with no answer and no stream), and the callee's audio from the answer
on (the greeting placed on the line, the beep, the quiet after) as 8 kHz mu-law.

Must not know: sockets, the clock, espeak-ng (the shell renders the greeting's text: voicecore/sim/caller_voice.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import re

import numpy as np

from voicecore.g711 import linear_to_ulaw, ulaw_to_linear
from voicecore.outbound.greetings import HELD_OUT
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES

ANSWERED_KINDS = ("human", "voicemail", "screening", "ivr")
UNANSWERED_KINDS = ("busy", "no-answer", "failed")
KINDS = ANSWERED_KINDS + UNANSWERED_KINDS
# A person who answers and, once the agent has begun, asks not to be called again (a campaign's opt-out).
# Not one of KINDS (the answer detector's classes and their rotation in the outbound demo): a kind of its own.
OPT_OUT = "opt-out"
PLANNED_KINDS = KINDS + (OPT_OUT,)
OPT_OUT_REPLIES = (("en", "Please stop calling me. Take me off your list."),
                   ("en", "Do not call me again, remove me from your list."),
                   ("sv", "Ring inte mig igen, tack."))
OPT_OUT_REPLY_AFTER_MS = 5000  # after hello: the answer's verdict has come and the agent has begun to speak
# A ring cycle, compressed: a real one is about 6 s (2 s tone, 4 s quiet); the simulator's calls would take a
# minute to reach a voicemail at that pace. The count of rings (1-5) is what the plan keeps.
DEFAULT_RING_MS = 400
HUMAN_GREETINGS = (("en", "Hello?"), ("en", "Hello."), ("en", "Hi, who is this?"), ("en", "Yeah, hello?"),
                   ("en", "Speaking."), ("sv", "Hallå?"))
SENTENCE_GAP_MS = 450  # a recorded greeting's pause between sentences (shorter than a person's wait for an answer)
PERSON_WAITS_MS = 8000  # after hello, a person listens
MACHINE_WAITS_MS = 6000  # a screening assistant or IVR waits for a response after its greeting
VOICEMAIL_RECORDS_MS = 12_000  # a voicemail records this long after its beep (a message, then the caller's hang-up)
# an IVR holds the line longer: keys pressed, "connecting you", then the person it reaches and the agent's answer
# (voicecore/sim/ivr_callee.py)
IVR_HOLDS_MS = 20_000
# a screening assistant holds the line longer: the agent's introduction, then the person it puts through, then
# the agent's answer to them (voicecore/sim/screened_callee.py)
SCREENING_HOLDS_MS = 16_000
AUDIBLE_LEVEL = 500  # linear PCM16 (about -36 dBFS): quieter than this is the synthesiser's trailing quiet, not a word


@dataclass(frozen=True, slots=True)
class CalleePlan:
    kind: str  # one of KINDS
    rings: int  # rings before the answer (or before busy / no-answer / failed)
    language: str
    text: str  # what the callee says when it answers ("" for the unanswered kinds)
    lead_ms: int  # quiet between the answer and the first word
    beep_hz: float | None  # a voicemail's beep
    beep_ms: int
    gap_ms: int  # between the greeting's end and the beep
    reply: str = ""  # what an opt-out callee says once the agent has begun (OPT_OUT_REPLY_AFTER_MS after hello)

    @property
    def answered(self) -> bool:
        return self.kind in ANSWERED_KINDS or self.kind == OPT_OUT


def callee_seed(number: str) -> int:
    """The seed of the callee at ``number``: the same number answers the same way in every run."""
    return int(number.lstrip("+")) % 2**32


def plan_callee(kind: str, seed: int) -> CalleePlan:
    """One callee of ``kind``; the same seed gives the same plan."""
    if kind not in PLANNED_KINDS:
        raise ValueError(f"callee kind must be one of {', '.join(PLANNED_KINDS)}, got {kind!r}")
    rng = np.random.default_rng(seed)
    rings = int(rng.integers(1, 6))
    if kind in UNANSWERED_KINDS:
        return CalleePlan(kind, rings, "en", "", 0, None, 0, 0)
    if kind == OPT_OUT:
        language, reply = OPT_OUT_REPLIES[int(rng.integers(len(OPT_OUT_REPLIES)))]
        text = "Hallå?" if language == "sv" else "Hello?"
        return CalleePlan(kind, rings, language, text, int(rng.integers(150, 601)), None, 0, 0, reply=reply)
    greetings = HUMAN_GREETINGS if kind == "human" else HELD_OUT[kind]
    language, text = greetings[int(rng.integers(len(greetings)))]
    beep_hz = round(float(rng.uniform(440.0, 2000.0)), 1) if kind == "voicemail" else None
    return CalleePlan(kind, rings, language, text, int(rng.integers(150, 601)), beep_hz, int(rng.integers(300, 801)),
                      int(rng.integers(300, 901)))


@dataclass(frozen=True, slots=True)
class StatusStep:
    at_ms: int  # after the Calls API request was taken
    status: str  # Twilio's CallStatus


def status_steps(plan: CalleePlan, ring_ms: int = DEFAULT_RING_MS) -> list[StatusStep]:
    """The call's progress up to the answer (``in-progress``) or its unanswered end. ``completed`` follows the
    stream's end and is the shell's to send."""
    ringing_for = plan.rings * ring_ms
    steps = [StatusStep(0, "initiated"), StatusStep(ring_ms // 4, "ringing")]
    if plan.kind == "failed":
        return [StatusStep(0, "initiated"), StatusStep(ring_ms // 4, "failed")]
    if plan.kind == "busy":
        return steps + [StatusStep(ring_ms // 4 + ring_ms, "busy")]
    end = "no-answer" if plan.kind == "no-answer" else "in-progress"
    return steps + [StatusStep(ring_ms // 4 + ringing_for, end)]


def sentences(text: str) -> list[str]:
    """A greeting's sentences, each said on its own (a recorded greeting pauses between them)."""
    return [part for part in re.split(r"(?<=[.?!])\s+", text.strip()) if part]


def beep_tone(frequency_hz: float, duration_ms: int, amplitude: float = 8000.0) -> np.ndarray:
    """A voicemail beep: a sine with 5 ms ramps (a hard edge would splash energy over every frequency)."""
    n = duration_ms * BYTES_PER_MS
    tone = amplitude * np.sin(2 * np.pi * frequency_hz * np.arange(n) / (BYTES_PER_MS * 1000))
    ramp = min(5 * BYTES_PER_MS, n // 2)
    envelope = np.ones(n)
    envelope[:ramp] = np.linspace(0, 1, ramp)
    envelope[n - ramp:] = np.linspace(1, 0, ramp)
    return tone * envelope


@dataclass(frozen=True, slots=True)
class CalleeAudio:
    audio: bytes  # mu-law from the answer on, whole frames
    speech_ms: int  # the greeting's length
    beep_at_ms: int | None
    last_word_ms: int = 0  # from the answer to the greeting's last audible sample (its own trailing quiet left out)


# Twilio's AMD as the simulator plays it, with the defaults of Twilio's tuning parameters: a greeting of more than
# MachineDetectionSpeechThreshold (2400 ms) is a machine, a shorter one followed by
# MachineDetectionSpeechEndThreshold (1200 ms) of quiet a person, nothing said for MachineDetectionSilenceTimeout
# (5000 ms) unknown. DetectMessageEnd waits on a machine for the end of its message (the beep, or quiet).
AMD_SPEECH_THRESHOLD_MS = 2400
AMD_SPEECH_END_THRESHOLD_MS = 1200
AMD_SILENCE_TIMEOUT_MS = 5000
AMD_WRONG_SHARE = 0.2  # this share of answers is deliberately the other side's (labelled), as real AMD errs


@dataclass(frozen=True, slots=True)
class CarrierAmd:
    """What the simulated carrier's AMD says of a call, when (ms after the answer), and the label: ``right``
    is whether it named the right side (a person, or a machine of any kind)."""

    answered_by: str
    at_ms: int
    right: bool


def carrier_amd(plan: CalleePlan, audio: CalleeAudio, machine_detection: str, seed: int) -> CarrierAmd:
    """Twilio's AnsweredBy for this callee (``machine_detection``: Enable or DetectMessageEnd), plausible in
    value and timing, and wrong for AMD_WRONG_SHARE of the seeds: a person taken for a machine (a carrier's
    common error) or a machine taken for a person."""
    if not plan.answered:
        raise ValueError(f"a {plan.kind} callee never answers: no AMD")
    if machine_detection not in ("Enable", "DetectMessageEnd"):
        raise ValueError(f"machine_detection must be Enable or DetectMessageEnd, got {machine_detection!r}")
    wrong = bool(np.random.default_rng(seed + 7919).random() < AMD_WRONG_SHARE)
    end_of_message = machine_detection == "DetectMessageEnd"
    person = plan.kind in ("human", OPT_OUT)
    if audio.speech_ms == 0:
        return CarrierAmd("unknown", AMD_SILENCE_TIMEOUT_MS, False)
    said_as_person = person != wrong
    if said_as_person:
        at_ms = min(audio.last_word_ms, plan.lead_ms + AMD_SPEECH_THRESHOLD_MS) + AMD_SPEECH_END_THRESHOLD_MS
        return CarrierAmd("human", at_ms, person)
    if not end_of_message:
        at_ms = plan.lead_ms + min(audio.speech_ms, AMD_SPEECH_THRESHOLD_MS)
        return CarrierAmd("machine_start", at_ms, not person)
    if audio.beep_at_ms is not None:
        return CarrierAmd("machine_end_beep", audio.beep_at_ms + plan.beep_ms, not person)
    return CarrierAmd("machine_end_silence", audio.last_word_ms + AMD_SPEECH_END_THRESHOLD_MS, not person)


def callee_audio(plan: CalleePlan, speech: bytes | list[bytes], reply: bytes = b"") -> CalleeAudio:
    """The callee's line from the answer: quiet, the greeting (``speech``: mu-law of plan.text, or of each of its
    sentences, then SENTENCE_GAP_MS between them), then for a voicemail the gap and the beep, for an opt-out
    callee ``reply`` (mu-law of plan.reply) OPT_OUT_REPLY_AFTER_MS after the greeting, then the quiet of
    someone (or something) waiting."""
    if not plan.answered:
        raise ValueError(f"a {plan.kind} callee never answers: it has no audio")
    spoken = [speech] if isinstance(speech, bytes) else list(speech)
    pieces: list[np.ndarray] = []
    for index, part in enumerate(spoken):
        if index:
            pieces.append(np.zeros(SENTENCE_GAP_MS * BYTES_PER_MS))
        pieces.append(ulaw_to_linear(part).astype(np.float64))
    voiced = np.concatenate(pieces) if pieces else np.zeros(0)
    parts = [np.zeros(plan.lead_ms * BYTES_PER_MS), voiced]
    speech_ms = len(voiced) // BYTES_PER_MS
    audible = np.nonzero(np.abs(voiced) > AUDIBLE_LEVEL)[0]
    last_word_ms = plan.lead_ms + (int(audible[-1]) + 1) // BYTES_PER_MS if len(audible) else plan.lead_ms
    beep_at_ms = None
    if plan.beep_hz is not None:
        beep_at_ms = plan.lead_ms + speech_ms + plan.gap_ms
        parts += [np.zeros(plan.gap_ms * BYTES_PER_MS), beep_tone(plan.beep_hz, plan.beep_ms),
                  np.zeros(VOICEMAIL_RECORDS_MS * BYTES_PER_MS)]
    else:
        if plan.kind == OPT_OUT:
            if not reply:
                raise ValueError("an opt-out callee needs the audio of its reply")
            parts += [np.zeros(OPT_OUT_REPLY_AFTER_MS * BYTES_PER_MS), ulaw_to_linear(reply).astype(np.float64)]
        wait_ms = {"screening": SCREENING_HOLDS_MS, "ivr": IVR_HOLDS_MS}.get(plan.kind, PERSON_WAITS_MS)
        parts.append(np.zeros(wait_ms * BYTES_PER_MS))
    line = np.concatenate(parts)
    line = np.concatenate([line, np.zeros((-len(line)) % FRAME_BYTES)])
    audio = linear_to_ulaw(np.clip(np.rint(line), -32768, 32767).astype(np.int16))
    return CalleeAudio(bytes(audio), speech_ms, beep_at_ms, last_word_ms)
