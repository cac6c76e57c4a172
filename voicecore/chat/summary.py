"""A text conversation as the call store keeps a call: a ``CallSummary`` of carrier ``chat``.

Owns the mapping from what a ChatSession saw (the caller's messages, its ChatEvents) to the store's rows:
the transcript (caller and agent lines, in order), each function the model called with its confirmation
and its tool's result, each gate verdict, and the outcome. A text conversation has no speech, so no
turn timings (``turns`` is empty) and no audio. Pure: the shell stores it (``CallStore.ingest``).
"""

from __future__ import annotations

import json

from voicecore.chat.session import ChatSession
from voicecore.privacy.records import RecordPrivacy
from voicecore.store.summary import CallSummary, ToolCall, Transcript, Verdict

MS = 1_000_000
CHANNEL = "chat"  # the calls' carrier column: where the conversation came from


def _ms(at_ns: int, origin_ns: int) -> int:
    return max(0, (at_ns - origin_ns) // MS)


def chat_summary(session: ChatSession, agent: str, started_at: float, origin_ns: int, now_ns: int,
                 closed_by_caller: bool = True, privacy: RecordPrivacy | None = None) -> CallSummary:
    """``origin_ns``: the conversation clock's reading at ``started_at`` (wall seconds); ``now_ns``: at its end.
    ``privacy``: the agent's storage tier (voicecore/privacy/records.py), applied to every text kept, as a phone
    call's record is (None: kept as said)."""
    privacy = privacy or RecordPrivacy("everything")
    transcripts = tuple(Transcript(speaker, privacy.text(text), _ms(at, origin_ns)) for speaker, text, at in session.transcript)
    calls: dict[str, dict] = {}
    verdicts = []
    for event in session.events:
        data = event.data
        call_id = data.get("call_id", "")
        if event.kind == "function_call":
            arguments = data.get("arguments")
            calls[call_id] = {"name": data.get("name", ""), "called_ms": _ms(event.at_ns, origin_ns),
                              "arguments": privacy.json_text(arguments if isinstance(arguments, str)
                                                             else json.dumps(arguments, ensure_ascii=False))}
        elif event.kind == "confirmation" and call_id in calls:
            calls[call_id]["asked_ms"] = _ms(event.at_ns, origin_ns)
        elif event.kind in ("confirmed", "declined") and call_id in calls:
            calls[call_id].update(answered_ms=_ms(event.at_ns, origin_ns), answered_by="timeout" if data.get("timed_out") else "words",
                                  answer="yes" if event.kind == "confirmed" else ("" if data.get("timed_out") else "no"))
        elif event.kind == "tool_result" and call_id in calls:
            calls[call_id].update(ran=True, ok=bool(data.get("ok")), output=privacy.json_text(str(data.get("output", ""))),
                                  result_ms=_ms(event.at_ns, origin_ns))
        elif event.kind == "gate":
            verdicts.append(Verdict(int(data.get("tag", 0)), not data.get("approved"), privacy.log_text(str(data.get("reason", ""))),
                                    privacy.log_text(str(data.get("citations", ""))), _ms(event.at_ns, origin_ns)))
    tool_calls = tuple(ToolCall(call_id, c["name"], c["arguments"], c["called_ms"], c.get("ran", False), c.get("ok"),
                                c.get("output", ""), c.get("result_ms"), asked_ms=c.get("asked_ms"),
                                answered_ms=c.get("answered_ms"), answer=c.get("answer", ""),
                                answered_by=c.get("answered_by", "")) for call_id, c in calls.items())
    if session.ended.startswith("transfer"):
        outcome = "transfer"
    elif session.ended:
        outcome = f"hangup:{session.ended}"
    else:
        outcome = "caller_hangup" if closed_by_caller else "ended"
    return CallSummary(source=f"{CHANNEL}:{session.session_id}", call_sid=session.session_id, control="turns",
                       flow=session.flow.name, agent=agent, started_at=started_at,
                       duration_ms=_ms(now_ns, origin_ns), outcome=outcome, complete=True, turns=(),
                       transcripts=transcripts, tool_calls=tool_calls, verdicts=tuple(verdicts), errors=(),
                       carrier=CHANNEL)
