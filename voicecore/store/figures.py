"""What a stored call's rows mean, in figures and words (pure: dicts in, dicts and text out).

Owns the definitions the console, its export and the store's per-call columns share:

- a turn's **heard latency**: from the caller's last sound (``speech_ended_ms``: the speech end on the call's
  audio clock; a row stored without it: the model's ``speech_stopped`` event) to the first frame of the answer
  the caller heard (``first_played_ms``: the carrier echoed its mark; without an echo: ``first_sent_ms``, the
  frame went to the carrier). Its parts, each between two of these moments, add up to it:

  ``detection``  speech end -> the answer was asked for (turns control: the controller's ``response.create``;
                 the spine: the vendor's ``speech_stopped``, on which the vendor starts its answer): the
                 vendor's end-of-turn silence and the controller's wait for the caller's words;
  ``model``      asked -> the model's first audio delta (a tool the model called in between is in it);
  ``runtime``    first audio -> its first frame sent to the carrier (the pacer's start hold, the gate);
  ``carrier``    sent -> played (the carrier's buffer and the way back of its echo).

- a call's latency: the median turn (the nearest rank below the middle: of 2 turns, the faster) and the slowest;
- an outcome in words; a tool call's status (``ran``, ``failed``, ``declined``, ``ended the call``,
  ``transferred``, ...) with the tool's own time apart from the caller's time to say yes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

LATENCY_PARTS = ("detection_ms", "model_ms", "runtime_ms", "carrier_ms")

OUTCOME_WORDS = {
    "caller_hangup": "The caller hung up",
    "transfer": "Transferred to a person",
    "ended": "Ended without a hang-up in the record",
    "hangup:completed": "The agent said goodbye and hung up",
    "hangup:vendor_failures": "The agent gave up: the model kept failing",
    "hangup:model_unreachable": "The agent gave up: the model could not be reached",
}


def _known(row: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = row.get(name)
        if value is not None:
            return int(value)
    return None


def _between(first: int | None, last: int | None) -> int | None:
    return None if first is None or last is None else last - first


def heard_latency(turn: Mapping[str, Any]) -> dict[str, Any] | None:
    """The turn's heard latency and its parts (module docstring); None for a turn the caller heard no answer
    to. ``heard_ms``: when the caller heard the answer start, ``ended_ms``: when they stopped speaking (ms from
    the call's start); ``heard_by``: ``played`` (the carrier's echo) or ``sent`` (no echo: the frame's send);
    ``ended_by``: ``audio`` (the speech end on the audio clock) or ``vad`` (the model's event: a row stored
    before the store knew the speech end)."""
    ended = _known(turn, "speech_ended_ms", "speech_stopped_ms")
    heard = _known(turn, "first_played_ms", "first_sent_ms")
    if ended is None or heard is None:
        return None
    asked = _known(turn, "response_requested_ms", "speech_stopped_ms")
    audio = _known(turn, "first_audio_ms")
    sent = _known(turn, "first_sent_ms")
    played = turn.get("first_played_ms") is not None
    return {
        "total_ms": heard - ended, "ended_ms": ended, "heard_ms": heard,
        "detection_ms": _between(ended, asked), "model_ms": _between(asked, audio),
        "runtime_ms": _between(audio, sent if sent is not None else heard),
        "carrier_ms": _between(sent, heard) if played else None,
        "heard_by": "played" if played else "sent", "ended_by": "audio" if turn.get("speech_ended_ms") is not None else "vad",
    }


def median_low(values: Iterable[int]) -> int | None:
    """The median by the nearest rank below the middle (of an even count, the lower of the two middle values:
    always a latency some turn had); None for none."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def call_latency(turns: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``p50_ms`` and ``max_ms`` of the turns' heard latencies, and ``turns``: how many had one."""
    totals = [latency["total_ms"] for turn in turns if (latency := heard_latency(turn)) is not None]
    return {"p50_ms": median_low(totals), "max_ms": max(totals) if totals else None, "turns": len(totals)}


def outcome_words(outcome: str) -> str:
    """How the call ended, for a person."""
    if outcome in OUTCOME_WORDS:
        return OUTCOME_WORDS[outcome]
    if outcome.startswith("transfer"):
        return "Transferred to a person"
    if outcome.startswith("hangup:"):
        reason = outcome.removeprefix("hangup:")
        if reason.endswith("_gave_up"):
            return "The agent hung up: its last line could not be spoken"
        return f"The agent hung up ({reason.replace('_', ' ')})" if reason else "The agent hung up"
    return outcome or "Unknown"


def _reply_error(reply: str) -> str:
    try:
        value = orjson.loads(reply) if reply else None
    except orjson.JSONDecodeError:
        return ""
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or "error")
    return ""


def tool_status(tool: Mapping[str, Any], outcome: str = "") -> dict[str, Any]:
    """What became of a function the model called: ``status`` (``ran``, ``failed``, ``declined``, ``unanswered``,
    ``superseded``, ``ended the call``, ``transferred``, ``refused``, ``done``, ``no result``), ``words`` for a
    person, ``failed`` (a problem, as opposed to the caller's no or a normal end), ``tool_ms`` (the tool's own
    run: started -> result) and ``consent_wait_ms`` (called -> the caller's answer, for a confirmation)."""
    action = tool.get("action") or ""
    answered_by = tool.get("answered_by") or ""
    ran, ok = bool(tool.get("ran")), tool.get("ok")
    started = _known(tool, "started_ms", "called_ms")
    consent = _between(_known(tool, "called_ms", "asked_ms"), tool.get("answered_ms")) if tool.get("asked_ms") is not None else None
    tool_ms = _between(started, tool.get("result_ms")) if ran else None
    ends_call = (action == "end_call" and outcome.startswith("hangup")) or (action == "transfer" and outcome.startswith("transfer"))
    if tool.get("answer") == "no":
        status, words = "declined", f"declined by the caller ({answered_by})" if answered_by else "declined by the caller"
    elif answered_by == "timeout":
        status, words = "unanswered", "not run: the caller did not confirm in time"
    elif answered_by == "superseded":
        status, words = "superseded", "not run: the model proposed another action"
    elif ran and ok is False:
        status, words = "failed", "the tool failed"
    elif ran and ok is None:
        status, words = "no result", "started; the call ended before its result"
    elif ends_call and action == "end_call":
        status, words = "ended the call", "ended the call"
    elif ends_call:
        status, words = "transferred", "transferred the call"
    elif ran:
        status, words = "ran", "ran"
    elif tool.get("asked_ms") is not None and tool.get("answered_ms") is None:
        status, words = "unanswered", "not run: the call ended before the caller answered"
    elif error := _reply_error(str(tool.get("reply") or "")):
        status, words = "refused", f"not run: {error}"
    elif tool.get("reply"):
        status, words = "done", "done (no tool to run)"
    else:
        status, words = "no result", "no result (the call ended first)"
    if ran and answered_by.startswith(("keypad", "words")) and status in ("ran", "ended the call", "transferred", "failed"):
        words += f" after the caller's yes ({answered_by})"
    return {"status": status, "words": words, "failed": status in ("failed", "refused"), "tool_ms": tool_ms,
            "consent_wait_ms": consent}


def call_figures(turns: list[Mapping[str, Any]], tool_calls: list[Mapping[str, Any]], verdicts: list[Mapping[str, Any]],
                 errors: list[Any]) -> dict[str, Any]:
    """The per-call columns the store keeps for the list: latency_p50_ms, latency_max_ms, bargeins, error_count
    (model errors and failed tools), rejections (answers the gate rejected)."""
    latency = call_latency(turns)
    return {
        "latency_p50_ms": latency["p50_ms"], "latency_max_ms": latency["max_ms"],
        "bargeins": sum(1 for turn in turns if turn.get("barged_in_ms") is not None),
        "error_count": len(errors) + sum(1 for tool in tool_calls if tool.get("ran") and tool.get("ok") is False),
        "rejections": len({verdict.get("tag") for verdict in verdicts if verdict.get("rejected")}),
    }
