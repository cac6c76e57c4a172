"""A stored call as its page shows it (pure: the store's call dict in, the same dict with keys added).

Owns what the call page reads besides the stored rows, so that every line, mark and figure is on one clock,
the call's audio clock (ms from the record's first entry, as the recording is laid out):

- ``lines``: the conversation in order: a caller line at the moment they began speaking, an agent line at its
  first frame sent to the carrier (where it starts in the recording; an answer never played stays at the
  moment its words were known, ``heard`` False), keypresses (with the confirmation they answered), the
  caller's answer to each confirmation and each function's outcome (voicecore/store/figures.py);
- ``answers``: the validation gate's verdicts grouped per answer (one row: approved or rejected, the reason
  and the citations; ``steps``: the rolling approvals, one per stretch of words released);
- per turn ``heard``: the heard latency and its parts; ``latency``: the call's median and slowest;
- per tool call ``status``, ``status_text``, ``failed``, ``tool_ms``, ``consent_wait_ms``;
- ``outcome_text`` and ``summary`` (the counts the page's summary states).

Keys are only added: the API's existing keys keep their meaning (``transcript``'s ``at_ms`` stays when the
words were known).
"""

from __future__ import annotations

import json
from typing import Any

from voicecore.store.figures import call_latency, heard_latency, outcome_words, tool_status

# the order of lines at the same millisecond: what the caller did before what it caused
_KIND_ORDER = {"caller": 0, "keypad": 1, "confirmation": 2, "tool": 3, "agent": 4}


def _arguments_text(arguments: str) -> str:
    """A function's JSON arguments as "service cleaning, day Friday" (the text as it is when not an object)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments
    if not isinstance(value, dict):
        return arguments
    return ", ".join(f"{name} {item}" for name, item in value.items())


def _citations(text: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def answers(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The gate's verdicts, one row per answer (tag), in the order they were judged."""
    agent_lines = {line.get("ref"): line for line in call.get("transcript", []) if line.get("speaker") == "agent" and line.get("ref")}
    groups: dict[int, dict[str, Any]] = {}
    for verdict in call.get("verdicts", []):
        group = groups.setdefault(verdict["tag"], {
            "tag": verdict["tag"], "response_id": verdict.get("response_id") or "", "verdict": "approved", "reason": "",
            "citations": [], "at_ms": verdict["at_ms"], "steps": []})
        group["steps"].append({"at_ms": verdict["at_ms"], "frames": verdict.get("frames"), "rejected": verdict["rejected"],
                               "reason": verdict.get("reason") or ""})
        if verdict["rejected"]:
            group.update(verdict="rejected", reason=verdict.get("reason") or "", at_ms=verdict["at_ms"])
        cited = _citations(verdict.get("citations") or "")
        if cited:
            group["citations"] = cited  # each verdict holds all the answer's citations so far
    for group in groups.values():
        line = agent_lines.get(group["response_id"])
        group["text"] = line["text"] if line else ""
        group["spoken_ms"] = line.get("spoken_ms") if line else None
    return list(groups.values())


def lines(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation on the call's audio clock (module docstring)."""
    out: list[dict[str, Any]] = []
    for line in call.get("transcript", []):
        spoken = line.get("spoken_ms")
        kind = line["speaker"]
        prompt = line.get("prompt") or ""
        if kind == "agent" and prompt.startswith("confirm:"):
            kind = "confirmation"
        out.append({"kind": kind, "speaker": line["speaker"], "text": line["text"],
                    "at_ms": spoken if spoken is not None else line["at_ms"], "known_ms": line["at_ms"],
                    "heard": spoken is not None or line["speaker"] == "caller", "prompt": prompt})
    for turn in call.get("turns", []):
        if not turn.get("transcript") and turn.get("speech_started_ms") is not None:
            began = turn.get("speech_began_ms")
            out.append({"kind": "caller", "speaker": "caller", "text": "(spoke; no transcription)", "pending": True,
                        "at_ms": began if began is not None else turn["speech_started_ms"], "known_ms": None, "heard": True,
                        "prompt": ""})
    tools = call.get("tool_calls", [])
    answered_by_key = {(tool.get("answered_by"), tool.get("answered_ms")): tool for tool in tools
                       if str(tool.get("answered_by") or "").startswith("keypad")}
    for press in call.get("keypresses", []):
        tool = answered_by_key.get((f"keypad {press['digit']}", press["at_ms"]))
        meaning = ""
        if tool is not None:
            meaning = f": {'yes' if tool.get('answer') == 'yes' else 'no'} to {tool['name']}"
        out.append({"kind": "keypad", "speaker": "caller", "text": f"pressed {press['digit']}{meaning}", "at_ms": press["at_ms"],
                    "known_ms": press["at_ms"], "heard": True, "prompt": ""})
    for tool in tools:
        what = f"{tool['name']}({_arguments_text(tool.get('arguments') or '')})"
        by_keypad = str(tool.get("answered_by") or "").startswith("keypad")  # its keypress line says it
        if tool.get("asked_ms") is not None and tool.get("answered_ms") is not None and not by_keypad:
            if tool.get("answer") == "yes":
                answer = f"the caller confirmed {what} ({tool.get('answered_by')})"
            elif tool.get("answer") == "no":
                answer = f"the caller declined {what} ({tool.get('answered_by')})"
            else:
                answer = f"{what} was not confirmed ({tool.get('answered_by') or 'no answer'})"
            out.append({"kind": "confirmation", "speaker": "caller" if tool.get("answer") else "agent", "text": answer,
                        "at_ms": tool["answered_ms"], "known_ms": tool["answered_ms"], "heard": True, "prompt": ""})
        at = tool.get("result_ms") if tool.get("result_ms") is not None else tool.get("reply_ms")
        if at is None:
            at = tool.get("called_ms")
        if at is None:
            continue
        took = f" in {tool['tool_ms']} ms" if tool.get("tool_ms") is not None else ""
        out.append({"kind": "tool", "speaker": "agent", "text": f"{what}: {tool.get('status_text', '')}{took}", "at_ms": at,
                    "known_ms": at, "heard": True, "prompt": "", "status": tool.get("status", "")})
    out.sort(key=lambda line: (line["at_ms"], _KIND_ORDER.get(line["kind"], 5)))
    return out


def summary(call: dict[str, Any]) -> dict[str, Any]:
    """What the page's summary states: how it ended, how fast the agent answered, what was done."""
    statuses: dict[str, int] = {}
    for tool in call.get("tool_calls", []):
        statuses[tool["status"]] = statuses.get(tool["status"], 0) + 1
    answered = call.get("answers", [])
    return {
        "outcome_text": call["outcome_text"], "turns": len(call.get("turns", [])),
        "answered_turns": call["latency"]["turns"], "latency_p50_ms": call["latency"]["p50_ms"],
        "latency_max_ms": call["latency"]["max_ms"],
        "bargeins": sum(1 for turn in call.get("turns", []) if turn.get("barged_in_ms") is not None),
        "keypresses": len(call.get("keypresses", [])), "tools": statuses,
        "answers_rejected": sum(1 for a in answered if a["verdict"] == "rejected"),
        "answers_approved": sum(1 for a in answered if a["verdict"] == "approved"),
        "model_errors": len(call.get("errors", [])),
    }


def enrich(call: dict[str, Any]) -> dict[str, Any]:
    """``call`` (CallStore.call) with the page's keys added (module docstring); returns it."""
    call["outcome_text"] = outcome_words(call["outcome"])
    for turn in call.get("turns", []):
        turn["heard"] = heard_latency(turn)
        turn["heard_latency_ms"] = turn["heard"]["total_ms"] if turn["heard"] else None
    call["latency"] = call_latency(call.get("turns", []))
    for tool in call.get("tool_calls", []):
        figures = tool_status(tool, call["outcome"])
        tool.update(status=figures["status"], status_text=figures["words"], failed=figures["failed"],
                    tool_ms=figures["tool_ms"], consent_wait_ms=figures["consent_wait_ms"])
    call["answers"] = answers(call)
    call["lines"] = lines(call)
    call["summary"] = summary(call)
    return call
