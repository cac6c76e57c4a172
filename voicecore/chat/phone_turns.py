"""An agent test's turns read from a call: what the stack did between one caller line and the next.

Owns cutting a recorded call (its ``CallSummary``, the flow's nodes over time from replaying its record,
and when the simulated caller began each line) into the test's turns, as the same ``ChatEvent`` lists the
text channel produces, so ``agent_tests.judge_turn`` judges a phone call exactly as it judges a chat. Pure:
the shell (workers/chat/phone.py) runs the calls and reads the records.

A turn's window runs from the start of its caller line to the start of the next one (the greeting's, from
the call's start to the first line; the last, to the end of the call). Everything the stack did in it
belongs to the turn: the agent's lines (their transcripts), the functions the model called with their
arguments, the confirmations asked and answered, the tool results, the gate's verdicts, and, for the
turn the call ended in, its hang-up or transfer.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from voicecore.chat.session import ChatEvent
from voicecore.store.summary import CallSummary

MS = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class PhoneTurn:
    events: list[ChatEvent]
    node: str  # the flow's node at the end of the window
    latency_ms: int | None  # the caller's line ended -> the first agent audio the caller got (None: none)


def node_at(timeline: list[tuple[int, str]], at_ms: float) -> str:
    """The node the flow was at ``at_ms`` into the call (``timeline``: (ms, node) in order)."""
    node = timeline[0][1] if timeline else ""
    for when, name in timeline:
        if when > at_ms:
            break
        node = name
    return node


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


def call_events(summary: CallSummary) -> list[tuple[int, ChatEvent]]:
    """(ms into the call, event) of everything the call's summary holds, in time order."""
    timed: list[tuple[int, ChatEvent]] = []
    # an answer the gate rejected was not heard (the safe line was): it is no line said, as in a chat
    unheard = {verdict.response_id for verdict in summary.verdicts if verdict.rejected and verdict.response_id}
    for line in summary.transcripts:
        if line.speaker == "agent" and line.text.strip() and not (line.ref and line.ref in unheard):
            at = line.spoken_ms if line.spoken_ms is not None else line.at_ms
            timed.append((at, ChatEvent("said", line.text.strip(), {"prompt": line.prompt})))
        elif line.speaker == "caller":
            at = line.spoken_ms if line.spoken_ms is not None else line.at_ms
            timed.append((at, ChatEvent("heard", line.text.strip())))
    for call in summary.tool_calls:
        data = {"name": call.name, "arguments": _arguments(call.arguments), "call_id": call.call_id}
        if call.called_ms is not None:
            timed.append((call.called_ms, ChatEvent("function_call", "", data)))
        if call.asked_ms is not None:
            timed.append((call.asked_ms, ChatEvent("confirmation", "", {"name": call.name})))
        if call.answered_ms is not None and call.answer:
            timed.append((call.answered_ms, ChatEvent("confirmed" if call.answer == "yes" else "declined", "",
                                                      {"name": call.name})))
        if call.ran and call.result_ms is not None:
            timed.append((call.result_ms, ChatEvent("tool_result", "", {"name": call.name, "ok": call.ok,
                                                                         "output": call.output})))
    judged: set[tuple[int, bool]] = set()
    for verdict in summary.verdicts:
        if (verdict.tag, verdict.rejected) in judged:
            continue  # a streamed answer is approved piece by piece: its first verdict of each kind says it
        judged.add((verdict.tag, verdict.rejected))
        timed.append((verdict.at_ms, ChatEvent("gate", "", {"approved": not verdict.rejected, "reason": verdict.reason,
                                                            "policy": f"tag {verdict.tag}"})))
    timed.sort(key=lambda item: item[0])
    return timed


def end_event(summary: CallSummary, transfer_to: str) -> ChatEvent | None:
    """How the agent ended the call, if it did (a caller who hangs up is no end of the agent's)."""
    if summary.outcome == "transfer":
        return ChatEvent("transferred", transfer_to)
    if summary.outcome.startswith("hangup:"):
        return ChatEvent("ended", summary.outcome.split(":", 1)[1])
    return None


def split_turns(summary: CallSummary, timeline: list[tuple[int, str]], line_starts_ms: list[float],
                latencies_ms: list[int | None], judges_greeting: bool, transfer_to: str = "") -> list[PhoneTurn]:
    """The call cut into the test's turns. ``line_starts_ms``: when each caller line began (ms into the call,
    on the record's clock); ``latencies_ms``: each line's latency; ``judges_greeting``: the test's first turn
    has no caller line and judges the greeting (then the greeting is turn 0 and line k is turn k + 1)."""
    timed = call_events(summary)
    ending = end_event(summary, transfer_to)
    bounds = ([0.0] if judges_greeting else []) + list(line_starts_ms)
    latencies = ([None] if judges_greeting else []) + list(latencies_ms)
    turns: list[PhoneTurn] = []
    for index, start in enumerate(bounds):
        end = bounds[index + 1] if index + 1 < len(bounds) else float("inf")
        events = [event for at, event in timed if start <= at < end]
        last = index + 1 == len(bounds)
        if ending is not None and last:
            events.append(ending)
        node = node_at(timeline, end if end != float("inf") else summary.duration_ms)
        turns.append(PhoneTurn(events, node, latencies[index]))
    return turns


def first_turn_events(summary: CallSummary, line_starts_ms: list[float]) -> list[ChatEvent]:
    """What happened before the first caller line (the greeting), for the transcript of a failure."""
    first = line_starts_ms[0] if line_starts_ms else float("inf")
    return [event for at, event in call_events(summary) if at < first]
