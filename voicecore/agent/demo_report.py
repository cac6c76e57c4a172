"""The figures of an agent's demo run that the plain demo has not: tools, duplicates, confirmations, and
talk-over after a tool call, each from a source outside the controller that decided it.

Owns reading them off the simulators and the records: tool calls the model made (the model simulator's
record), requests that reached the fake tool server (its log: what the agent's tools really sent), actions
executed against what the scripted caller actually said (a yes clip or the key 1: the caller script is the
ground truth), and agent audio heard while the caller was speaking after a tool result (the carrier's
playout log against the model simulator's VAD). The controller's own counters (from the records' replays)
are reported beside them, never instead of them.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from voicecore.agent.actions import confirmation_answer
from voicecore.agent.scenario import Scenario
from voicecore.agent.spec import AgentSpec, Webhook
from voicecore.callreport import frame_owners, owner_of
from voicecore.sim.audio_clips import default_library

CONTROLLER_COUNTERS = ("tool_calls", "tools_run", "tool_errors", "duplicate_writes_suppressed", "fillers", "transitions",
                       "actions_proposed", "actions_confirmed", "actions_declined", "actions_timed_out")


def caller_yeses(scenario: Scenario, call_index: int, duration_ms: int, languages: tuple[str, ...]) -> int:
    """How many times call ``call_index``'s scripted caller said yes (a clip read as yes, or the key 1)."""
    texts = {c.name: c.text for c in default_library().infos}
    yeses = 0
    for turn in scenario.script_for(call_index).turns:
        if turn.at_ms >= duration_ms:
            continue
        if turn.dtmf == "1" or (turn.clip and confirmation_answer(texts.get(turn.clip, ""), languages) == "yes"):
            yeses += 1
    return yeses


def _confirmed_routes(agent: AgentSpec) -> set[str]:
    """URL path endings of the webhooks of functions that need the caller's yes."""
    return {fn.tool.url.rsplit("}", 1)[-1] for fn in agent.flow.functions.values()
            if fn.confirm and isinstance(fn.tool, Webhook)}


def python_confirmed(agent: AgentSpec) -> set[str]:
    """The agent's Python tools behind a confirmation: only the call records say when they ran."""
    return {fn.name for fn in agent.flow.functions.values() if fn.confirm and fn.tool is not None
            and not isinstance(fn.tool, Webhook)}


def talkover_after_tools_ms(result, sessions: Sequence) -> list[float]:
    """Per answer to a function's result (the first response that is not itself a function call created after
    each function_call_output): how long its audio played while the caller was speaking, counted from a speech
    start (the model's VAD) that came before the answer's first frame reached the carrier. A caller who starts
    speaking once the answer is on its way barges in on it (its hold and barge-in figures are elsewhere): the
    frames were sent before anything could know, and at a simultaneous start, one of the two yields. Nor is a
    later response of the call (a silence prompt, the next turn's answer) the agent answering a tool over the
    caller."""
    core = result.core
    if core is None:
        return []
    records = [s.record for s in sessions]
    owners = frame_owners(records)
    speech = [(s.started_at_ms, s.stopped_at_ms if s.stopped_at_ms is not None else float("inf"))
              for record in records for s in record.speech]
    outputs = sorted(o.at_ms for record in records for o in record.function_call_outputs)
    answers = sorted((r.created_ms, r.response_id) for record in records for r in record.responses
                     if r.function_call is None)
    post_tool = set()
    for at in outputs:
        following = [rid for created, rid in answers if created >= at]
        if following:
            post_tool.add(following[0])
    played: dict[str, list] = collections.defaultdict(list)
    for frame in core.played:
        owner = owner_of(owners, frame.payload)
        if owner is not None and owner[0].response_id in post_tool:
            played[owner[0].response_id].append(frame)
    samples: list[float] = []
    for frames in played.values():
        sent = min(frame.arrival_ms for frame in frames)
        over = 0.0
        for start, stop in speech:
            if start > sent:
                continue
            for frame in frames:
                begin, end = frame.played_at_ms, frame.played_at_ms + frame.played_ms
                over += max(0.0, min(end, stop) - max(begin, start))
        samples.append(over)
    return samples


def agent_figures(agent: AgentSpec, scenario: Scenario, results: Sequence, sim, requests: Sequence,
                  controller_totals: dict[str, int], duration_ms: int) -> dict:
    """``requests``: the fake tool server's log; ``controller_totals``: the records' replayed statistics,
    summed. Returns the report's ``agent`` section; its ``problems`` fail the demo."""
    function_calls = 0
    talkover: list[float] = []
    for result in results:
        sessions = sim.by_call(result.call_sid) if result.metrics is not None else []
        function_calls += sum(1 for s in sessions for r in s.record.responses if r.function_call)
        talkover.extend(talkover_after_tools_ms(result, sessions))
    confirmed_paths = _confirmed_routes(agent)
    executed: collections.Counter = collections.Counter()  # call sid -> confirmed actions that reached the server
    keys_seen: set[tuple[str, str]] = set()
    for request in requests:
        sid = request.headers.get("x-voicecore-call", "")
        key = request.headers.get("idempotency-key", "")
        if any(request.path.endswith(p) for p in confirmed_paths) and (sid, key) not in keys_seen:
            keys_seen.add((sid, key))  # a retry of the same attempt is one execution
            executed[sid] += 1
    confirmed_python = python_confirmed(agent)
    without = 0
    executed_total = 0
    problems: list[str] = []
    for index, result in enumerate(results):
        runs = executed[result.call_sid] + sum(controller_totals.get("python_runs_by_call", {}).get(result.call_sid, {}).get(n, 0)
                                               for n in confirmed_python)
        executed_total += runs
        yeses = caller_yeses(scenario, index, duration_ms, tuple(agent.languages))
        if runs > yeses:
            without += runs - yeses
            problems.append(f"call {result.call_sid}: {runs} confirmed action(s) executed, the caller said yes {yeses} time(s)")
    talkover_max = max(talkover) if talkover else 0.0
    if talkover_max > 0:
        problems.append(f"the agent talked over the caller after a tool call ({talkover_max:.0f} ms)")
    # The vendor makes a response with instructions of its own under those alone: every response must still
    # carry the agent's (its persona's first line stands for them).
    persona = agent.instructions.strip().splitlines()[0][:60] if agent.instructions.strip() else ""
    without_agent = sum(len(s.record.responses_without(persona)) for result in results if result.metrics is not None
                        for s in sim.by_call(result.call_sid)) if persona else 0
    if without_agent:
        problems.append(f"{without_agent} response(s) made without the agent's instructions in force")
    figures = {
        "name": agent.name,
        "model_function_calls": function_calls,
        "tool_server_requests": len(requests),
        "actions_executed": executed_total,
        "actions_executed_without_confirmation": without,
        "talkover_after_tool_ms": {"count": len(talkover), "max": round(talkover_max, 1)},
        "responses_without_agent_instructions": without_agent,
        "controller": {k: int(controller_totals.get(k, 0)) for k in CONTROLLER_COUNTERS},
        "problems": problems,
    }
    return figures
