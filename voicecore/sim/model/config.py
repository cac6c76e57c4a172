"""The model simulator's behaviour switches: `SimConfig`, one frozen value per simulator run.

Owns what a harness or scenario may turn on (naming, timing, delta sizes, failure and transcript hooks,
overlapping responses, the scripted caller turns `SimTurn` that make it answer or call functions) and the
check that the values make sense. Knows nothing of sessions or events. The section numbers in comments
(D.2 item 5, ...) are docs/explanation/protocols.md's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class SimTurn:
    """One scripted behaviour of the simulated model: when the caller's words contain `when`, it answers
    `answer`, or calls the function `call` (if the session declares it) with `arguments`, optionally
    speaking `preamble` first in the same response, then answers `then` once the function's output is in
    the conversation (after calling it `repeat_call` more times with the same arguments, as real models
    sometimes do). The audio of every spoken line is a packaged agent clip; its transcript is the text."""

    when: str  # case-insensitive substring of the caller's words (a caller clip's text, a user text item)
    answer: str = ""
    call: str = ""
    arguments: str = "{}"  # JSON object text, sent as the model streams it
    preamble: str = ""
    then: str = ""
    repeat_call: int = 0

    def __post_init__(self) -> None:
        for name in ("when", "answer", "call", "arguments", "preamble", "then"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"SimTurn.{name} must be a string")
        if not self.when.strip():
            raise ValueError("SimTurn.when must not be empty")
        try:
            parsed = json.loads(self.arguments)
        except ValueError:
            raise ValueError(f"SimTurn.arguments is not JSON: {self.arguments!r}") from None
        if not isinstance(parsed, dict):
            raise ValueError("SimTurn.arguments must be a JSON object (a function's arguments)")
        if not isinstance(self.repeat_call, int) or isinstance(self.repeat_call, bool) or self.repeat_call < 0:
            raise ValueError("SimTurn.repeat_call must be a non-negative integer")

    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> SimTurn:
        """A rule from a demo.toml [[sim]] table (keys are the field names). `arguments` may also be a
        table; it is sent as its compact JSON text."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"unknown SimTurn key(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        values = dict(table)
        if isinstance(values.get("arguments"), Mapping):
            values["arguments"] = json.dumps(values["arguments"], ensure_ascii=False, separators=(", ", ": "))
        if "when" not in values:
            raise ValueError("a SimTurn needs `when`")
        return cls(**values)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Behaviour switches of the simulator. Response indices count from 0 within one session."""

    naming: str = "ga"  # "ga" | "beta" (D.2 item 9); a connection may override it
    # A vendor failing mid-call: each call's first session is closed with 1011 (server error) this long after
    # it opened, as a real server does on an internal error; 0: never. The client is expected to reconnect.
    drop_after_ms: int = 0
    seed: int = 0  # base seed; each session mixes in its session_index
    model: str = "gpt-realtime"  # reported in session.created unless the URL names one
    speed_factor: float = 4.0  # audio is generated this many times faster than real time (D.2 item 4)
    first_delta_latency_ms: int = 200  # response.create -> first audio delta
    delta_min_bytes: int = 300  # audio delta sizes are drawn in [min, max], never a multiple of 160
    delta_max_bytes: int = 1900
    clip_sequence: tuple[str, ...] = ()  # pin the agent clips spoken, cycled; () = automatic choice
    late_deltas_after_cancel: int = 0  # 0-3 already generated deltas sent after a cancel (D.2 item 5)
    # The caller's transcript, when the session turns input transcription on (module transcription): the
    # model it names decides the events, these ranges (inclusive, ms, seeded draws) when they go out.
    # whisper-1: one `completed`, this long after the commit.
    transcription_whisper_ms: tuple[int, int] = (400, 1500)
    # the gpt-4o transcribe family: the first `delta` this long after the commit, the next ones these gaps
    # apart, then `completed` (the whole transcript) this long after the last delta
    transcription_first_delta_ms: tuple[int, int] = (50, 1200)
    transcription_delta_gap_ms: tuple[int, int] = (10, 80)
    transcription_completed_gap_ms: tuple[int, int] = (5, 40)
    # Pin every transcription instead (tests that are not about turn-taking): all its events, deltas and
    # `completed` alike, exactly this long after the commit. None: the vendor-like draws above.
    transcription_delay_ms: int | None = None
    vad_rms_threshold: int = 200  # 20 ms windows at or above this RMS (16-bit linear) are speech
    vad_min_speech_ms: int = 40  # this much speech in a row starts a turn
    hallucinate: bool = False  # every response's transcript says `hallucinated_text`; audio stays a clip
    hallucinate_responses: tuple[int, ...] = ()  # ... or only these responses
    hallucinated_text: str = "Basic costs 777 kr per month."
    stall_after_ms: int | None = None  # output pauses this long after the first delta ...
    stall_ms: int = 2000  # ... for this long
    stall_responses: tuple[int, ...] = ()  # responses that stall; () = every response
    error_rate: float = 0.0  # probability (seeded draw) that a response ends with status failed
    fail_next_response: bool = False  # the session's first response fails
    fail_responses: tuple[int, ...] = ()  # these responses fail
    # transcript-validation hooks (D.2 item 8)
    transcript_done_differs: bool = False  # (a) *_transcript.done differs from the joined deltas
    omit_transcript_done_on_cancel: bool = False  # (b)
    transcript_after_audio_done: bool = False  # (c) the second half of the transcript after audio.done
    obfuscation: bool = False  # (d) unknown `obfuscation` key on every delta
    rate_limits_empty: bool = False  # (e) rate_limits.updated carries []
    # A second response while the first still streams (server VAD racing a client response.create, a
    # function-call follow-up): for each response the session starts (not a failed one, not itself an
    # overlap) a seeded draw with this probability starts another one, a uniform delay in
    # overlap_delay_ms after the first was created, if the first is still in progress then.
    overlap_probability: float = 0.0
    overlap_delay_ms: tuple[int, int] = (200, 2000)
    # Scripted caller turns (SimTurn): what the model says or which function it calls when the caller's
    # words match; () = the automatic clip choice only. A function call's arguments stream in deltas of
    # this many characters.
    turns: tuple[SimTurn, ...] = ()
    argument_delta_chars: int = 8
    # What callers say beyond the packaged caller clips: (text, 8 kHz mu-law audio) pairs, each recognised
    # in the caller's audio by the same signature as a packaged clip (clips.caller_signature) and
    # transcribed as its text. A harness that synthesizes its callers' lines registers them here.
    caller_phrases: tuple[tuple[str, bytes], ...] = ()
    # The vendor's refusals of a configuration (voicecore.sim.model_server): the keys it accepts and the
    # models (Azure: deployments) it serves; () accepts any. A refused key or model is answered as the vendor
    # does: an `error` event and a close on OpenAI's path, HTTP 401 / 404 on Azure's (/openai/...).
    api_keys: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    # A session ends this long after it opened, as the vendor's do at 60 minutes: an `error` event with code
    # session_expired, then a close.
    session_limit_ms: int = 3_600_000

    def __post_init__(self) -> None:
        if self.naming not in ("ga", "beta"):
            raise ValueError(f"naming must be 'ga' or 'beta', not {self.naming!r}")
        if not self.speed_factor > 0:
            raise ValueError("speed_factor must be positive")
        if not 1 <= self.delta_min_bytes <= self.delta_max_bytes:
            raise ValueError("need 1 <= delta_min_bytes <= delta_max_bytes")
        if not 0 <= self.late_deltas_after_cancel <= 3:
            raise ValueError("late_deltas_after_cancel must be 0-3")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be in [0, 1]")
        if not 0.0 <= self.overlap_probability <= 1.0:
            raise ValueError("overlap_probability must be in [0, 1]")
        for name in ("overlap_delay_ms", "transcription_whisper_ms", "transcription_first_delta_ms",
                     "transcription_delta_gap_ms", "transcription_completed_gap_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value)
                    and 0 <= value[0] <= value[1]):
                raise ValueError(f"{name} must be (low, high) with 0 <= low <= high")
            object.__setattr__(self, name, tuple(value))
        if self.transcription_delay_ms is not None and not (
                isinstance(self.transcription_delay_ms, int) and self.transcription_delay_ms >= 0):
            raise ValueError("transcription_delay_ms must be None or a non-negative integer")
        if not isinstance(self.turns, tuple):
            object.__setattr__(self, "turns", tuple(self.turns))  # a list from a loader is fine too
        if not all(isinstance(turn, SimTurn) for turn in self.turns):
            raise ValueError("turns must be SimTurn values (SimTurn.from_dict reads a table)")
        if not isinstance(self.caller_phrases, tuple):
            object.__setattr__(self, "caller_phrases", tuple(tuple(p) for p in self.caller_phrases))
        for phrase in self.caller_phrases:
            if not (len(phrase) == 2 and isinstance(phrase[0], str) and phrase[0].strip()
                    and isinstance(phrase[1], (bytes, bytearray)) and len(phrase[1]) >= 2 * 160):
                raise ValueError("caller_phrases must be (text, mu-law audio of at least 40 ms) pairs")
        if self.argument_delta_chars < 1:
            raise ValueError("argument_delta_chars must be at least 1")
        for name in ("api_keys", "models"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
            if not all(isinstance(v, str) and v for v in getattr(self, name)):
                raise ValueError(f"{name} must be non-empty strings")
        if self.session_limit_ms < 1000:
            raise ValueError("session_limit_ms must be at least 1000")
