"""Rubric expectations of agent tests: a sentence (``rubric = "..."``) a model judges a turn against.

Owns what the judge is asked and how its answer is read, over the Realtime protocol the runtime already speaks
(a session of its own, text out, no tools): the judge gets the conversation up to the turn and the rubric, and
answers ``PASS: <why>`` or ``FAIL: <why>``. Pure: the shell (workers/chat/judge.py) opens the session, sends
``judge_events`` and feeds what comes back to a ``Reading``. A rubric is judged only when a model is configured;
without one the shell reports it skipped with ``NO_MODEL``, never passed.
"""

from __future__ import annotations

import dataclasses

from voicecore.realtime import events as rt

NO_MODEL = ("no model to judge it: set VOICECORE_REALTIME_API_KEY or OPENAI_API_KEY (or realtime_url) to judge "
            "rubric expectations")
INSTRUCTIONS = (
    "You judge one turn of a conversation between a caller and a voice agent against a rubric. You get the "
    "conversation up to and including the turn to judge (the caller's last message and the agent's answer to it) "
    "and the rubric. Answer with one line: PASS: <one sentence why> when the agent's answer in that turn meets the "
    "rubric, FAIL: <one sentence why> when it does not. Judge only what is in the transcript.")


@dataclasses.dataclass(frozen=True, slots=True)
class RubricVerdict:
    ok: bool
    reason: str


def judge_request(rubric: str, transcript: list[tuple[str, str]]) -> str:
    """The judge's user message: the conversation as ``speaker: text`` lines, then the rubric."""
    lines = "\n".join(f"{speaker}: {text}" for speaker, text in transcript) or "(nothing was said)"
    return f"Conversation:\n{lines}\n\nRubric for the agent's last answer: {rubric}"


def judge_events(naming: str, rubric: str, transcript: list[tuple[str, str]]) -> list[str]:
    """The client events of one judgement, in order."""
    return [rt.session_update(naming, INSTRUCTIONS, None, None, tools=[], modality="text"),  # type: ignore[arg-type]
            rt.conversation_item_create_user_text(judge_request(rubric, transcript)),
            rt.response_create()]


def read_verdict(text: str) -> RubricVerdict:
    """The judge's answer read: PASS or FAIL first (case and markup aside); anything else fails, quoted."""
    stripped = text.strip().lstrip("*#> ").strip()
    word, _, rest = stripped.partition(":") if ":" in stripped[:8] else stripped.partition(" ")
    word = word.strip("*. ").upper()
    reason = rest.strip().strip("*").strip().lstrip("-:").strip()
    if word == "PASS":
        return RubricVerdict(True, reason)
    if word == "FAIL":
        return RubricVerdict(False, reason or "the judge gave no reason")
    return RubricVerdict(False, f"the judge answered neither PASS nor FAIL: {text.strip()[:200]!r}")


class Reading:
    """The judge's answer from the server's events (``feed`` each); ``verdict`` once ``done``."""

    def __init__(self) -> None:
        self.text = ""
        self.done = False
        self.verdict: RubricVerdict | None = None

    def feed(self, raw: str) -> None:
        event = rt.parse_server_event(raw)
        if isinstance(event, rt.TextDelta):
            self.text += event.delta
        elif isinstance(event, rt.TextDone):
            self.text = event.text or self.text
        elif isinstance(event, rt.RealtimeError):
            self._finish(RubricVerdict(False, f"the judge's model refused: {event.code}: {event.message}"[:300]))
        elif isinstance(event, rt.ResponseDone):
            if event.status != "completed":
                self._finish(RubricVerdict(False, f"the judge's answer did not complete ({event.status})"))
            else:
                self._finish(read_verdict(self.text))

    def lost(self, why: str) -> None:
        self._finish(RubricVerdict(False, f"could not judge it: {why}"))

    def _finish(self, verdict: RubricVerdict) -> None:
        if not self.done:
            self.done = True
            self.verdict = verdict
