"""A call's state as another node needs it to carry the call on: the conversation, the flow's position, a
pending confirmation and the writes done, as one JSON-able dict.

Why: when a gateway dies the carrier re-attaches the call to any healthy gateway of the fleet
(docs/how-to/drain.md). The model worker that served the call keeps its driver (or its record) and resumes it
there; a model worker on another node has neither, so the serving worker writes this state to the shared
store as the call goes, and the other node's worker builds a fresh driver and restores it from the store
(``restore``) before it opens the call's new model session. Sans-I/O: reads and sets a controller's fields,
no clock of its own (times are carried as what is left of a window, never as one process's monotonic clock).

What is carried is what a new, empty model session and the controller need so that the call goes on where it
stood: the messages given back to the model (context.py's history), the flow node and its counters, a function
awaiting the caller's yes, the writes done within the de-duplication window (so a write is never done twice for
one call, whichever node runs it), the last tool result for the answer that follows it, and whether an answer
was playing or the caller's words were unanswered (then the agent's ``reconnect`` line is said). Everything
else (playout, timers, the model's item ids) belongs to the old session and stream, which are gone.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from voicecore.call import flow as flows
from voicecore.call.tools import MS, PendingAction

if TYPE_CHECKING:
    from voicecore.call.controller import CallController

FORMAT = 1  # the dict's layout; a state of another layout is not restored (the call starts its session afresh)


def state_key(ctrl: CallController) -> tuple:
    """Changes whenever ``snapshot`` would (cheap: the shell asks every second whether to write the state)."""
    active = ctrl.active
    answering = active is not None and not active.settled and not active.cancelled_ns
    pending = ctrl.pending_action.call_id if ctrl.pending_action is not None else ""
    return (ctrl.conversation.said_count, _flow_position(ctrl.flow), pending, len(ctrl.writes.done), ctrl.facts,
            answering, ctrl.turns.any_open, ctrl.ended)


def snapshot(ctrl: CallController, now_ns: int) -> dict[str, Any]:
    """The call's state now, JSON-able (see the module's docstring)."""
    active = ctrl.active
    state: dict[str, Any] = {
        "format": FORMAT,
        "history": [[role, text] for role, text in ctrl.conversation.history],
        "flow": _flow_position(ctrl.flow),
        "writes": [[key, max(0, (until - now_ns) // MS), output] for key, (until, output) in ctrl.writes.done.items()
                   if until > now_ns],
        "facts": ctrl.facts,
        "answering": active is not None and not active.settled and not active.cancelled_ns,
        "words_open": ctrl.caller_speaking or ctrl.turns.any_open,
        "ended": ctrl.ended,
    }
    pending = ctrl.pending_action
    if pending is not None:
        state["pending"] = {"call_id": pending.call_id, "plan": _plan_to_dict(pending.plan)}
    return state


def restore(ctrl: CallController, state: dict[str, Any], now_ns: int) -> bool:
    """Set ``ctrl`` (a fresh controller, its flow started) to ``state`` (ValueError, nothing set, for a state of
    another format). Returns whether the agent should say its ``reconnect`` line (an answer was cut
    off, or the caller's words were never answered)."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"call state of format {state.get('format') if isinstance(state, dict) else None!r}, "
                         f"expected {FORMAT}")
    history = [(str(role), str(text)) for role, text in state.get("history", [])]
    position = state.get("flow")
    restore_position = getattr(ctrl.flow, "restore_position", None)
    if isinstance(position, dict) and restore_position is not None:
        restore_position(position)
    for role, text in history:
        ctrl.conversation.said(role, text)
    for key, left_ms, output in state.get("writes", []):
        ctrl.writes.done[str(key)] = (now_ns + int(left_ms) * MS, str(output))
    ctrl.facts = str(state.get("facts", ""))
    pending = state.get("pending")
    if isinstance(pending, dict):
        ctrl.pending_action = PendingAction(str(pending["call_id"]), _plan_from_dict(pending["plan"]), now_ns, now_ns)
    return bool(state.get("answering")) or bool(state.get("words_open"))


def _flow_position(flow: Any) -> dict[str, Any] | None:
    position = getattr(flow, "position", None)
    return position() if position is not None else None


def _say_to_dict(say: flows.Say | None) -> dict[str, Any] | None:
    return None if say is None else dataclasses.asdict(say)


def _say_from_dict(data: dict[str, Any] | None) -> flows.Say | None:
    if data is None:
        return None
    return flows.Say(str(data["prompt_id"]), str(data["text"]), bool(data.get("terminal", False)),
                     data.get("transfer_to"), data.get("policy"), tuple(data.get("forbidden", ())))


def _plan_to_dict(plan: flows.ToolPlan) -> dict[str, Any]:
    return {"name": plan.name, "arguments": plan.arguments, "writes": plan.writes,
            "confirm": _say_to_dict(plan.confirm), "filler": _say_to_dict(plan.filler)}


def _plan_from_dict(data: dict[str, Any]) -> flows.ToolPlan:
    return flows.ToolPlan(str(data["name"]), str(data["arguments"]), bool(data.get("writes", True)),
                          _say_from_dict(data.get("confirm")), _say_from_dict(data.get("filler")))
