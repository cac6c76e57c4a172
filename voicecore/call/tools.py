"""The agent's tools during a call: the tools running, the action waiting for the caller's yes, the writes
already done, the filler lines, and the post-tool debounce.

``Tools`` owns what the model's function calls started (docs/explanation/agents.md#tools): each running
tool with its idempotency key (voicecore/agent/actions.py), the one action proposed for confirmation
(docs/explanation/agents.md#actions-with-confirmation) and when its prompt played, and the writes that
succeeded within ``dedupe_ms`` (the same write, or a repeated yes, is answered with its first result instead
of running twice). Confirmation lives with the running tools because a yes runs the tool and the dedupe
window decides whether an action is proposed again at all.

``Debounce`` owns the post-tool debounce: after a tool result the agent waits for ``debounce_quiet_ms`` of
caller quiet (``debounce_cap_ms`` at most), gathering the caller's completed words meanwhile into one turn,
and keeps the tool's facts for the answer that follows.

What the flow makes of a call or a result, and what gets said, is the controller's (controller.py): these
classes return the action to apply (``RunTool``, the model's ``function_call_output``) or what is due.
Sans-I/O: fed ``now_ns``.
"""

from __future__ import annotations

import dataclasses
import json

from voicecore.agent import actions as agent_actions
from voicecore.call import flow as flows
from voicecore.call.actions import RunTool, SendToModel
from voicecore.call.settings import ControllerConfig, ControllerStats
from voicecore.realtime import events as rt

MS = 1_000_000
CONFIRM_PROMPT_GRACE_MS = 20_000  # a confirmation prompt never played (rejected, cut): its timeout starts after this


@dataclasses.dataclass(slots=True)
class RunningTool:
    call_id: str
    plan: flows.ToolPlan
    key: str
    started_ns: int
    filler_asked: bool = False


@dataclasses.dataclass(slots=True)
class PendingAction:
    """A function that runs only after the caller's yes
    (docs/explanation/agents.md#actions-with-confirmation)."""

    call_id: str
    plan: flows.ToolPlan
    asked_ns: int
    played_ns: int = 0  # its confirmation prompt played out; the timeout runs from here


class Tools:
    """One call's running tools, its action awaiting confirmation and its recent writes."""

    __slots__ = ("call_sid", "config", "stats", "running", "pending", "done_writes")

    def __init__(self, call_sid: str, config: ControllerConfig, stats: ControllerStats) -> None:
        self.call_sid = call_sid
        self.config = config
        self.stats = stats
        self.running: dict[str, RunningTool] = {}  # call_id -> the tool started for it
        self.pending: PendingAction | None = None
        self.done_writes: dict[str, tuple[int, str]] = {}  # idempotency key -> (until_ns, output)

    def _key(self, plan: flows.ToolPlan) -> str:
        return agent_actions.idempotency_key(self.call_sid, plan.name, plan.arguments)

    # --- running ---------------------------------------------------------------------------------------
    def run(self, call_id: str, plan: flows.ToolPlan, now_ns: int) -> RunTool | str:
        """Start the tool (the ``RunTool`` to apply), or, for the same write (or a repeated yes) within the
        window, its first result, which stands: nothing runs."""
        key = self._key(plan)
        done = self.done_writes.get(key)
        if plan.writes and done is not None and done[0] > now_ns:
            self.stats.duplicate_writes_suppressed += 1
            return done[1]
        self.stats.tools_run += 1
        self.running[call_id] = RunningTool(call_id, plan, key, now_ns)
        return RunTool(call_id, plan.name, plan.arguments, key)

    def finished(self, call_id: str, ok: bool, output: str, now_ns: int) -> RunningTool | None:
        """A tool's result came: the tool it belongs to (None: no running tool, the call moved on)."""
        running = self.running.pop(call_id, None)
        if running is None:
            self.stats.tool_results_ignored += 1
            return None
        self.stats.tool_results += 1
        if ok and running.plan.writes:
            self._remember_write(running.key, output, now_ns)
        if not ok:
            self.stats.tool_errors += 1
        return running

    def _remember_write(self, key: str, output: str, now_ns: int) -> None:
        for old in [k for k, (until, _) in self.done_writes.items() if until <= now_ns]:
            del self.done_writes[old]
        self.done_writes[key] = (now_ns + self.config.dedupe_ms * MS, output)

    def done_recently(self, plan: flows.ToolPlan, now_ns: int) -> bool:
        """The same action ran within the window (the model asks again after it was done): it is not
        proposed again, its first result stands."""
        done = self.done_writes.get(self._key(plan))
        return done is not None and done[0] > now_ns

    def fillers_due(self, now_ns: int) -> list[flows.ToolPlan]:
        """Tools running for ``filler_after_ms`` whose filler line was not asked for yet (each is asked once)."""
        due = []
        for running in self.running.values():
            if running.filler_asked or running.plan.filler is None:
                continue
            if (now_ns - running.started_ns) // MS < self.config.filler_after_ms:
                continue
            running.filler_asked = True
            due.append(running.plan)
        return due

    # --- confirmation ----------------------------------------------------------------------------------
    def propose(self, call_id: str, plan: flows.ToolPlan, now_ns: int) -> None:
        """The action waits for the caller's yes (the controller drops the one pending first)."""
        self.pending = PendingAction(call_id, plan, now_ns)
        self.stats.actions_proposed += 1

    def confirm(self) -> PendingAction:
        """The caller said yes: the action to run."""
        pending, self.pending = self.pending, None
        assert pending is not None
        self.stats.actions_confirmed += 1
        return pending

    def drop(self, reason: str) -> SendToModel:
        """The caller said no, said something else, or nothing: the action is not run; what the model is told."""
        pending, self.pending = self.pending, None
        assert pending is not None
        if reason == "no_confirmation":
            self.stats.actions_timed_out += 1
        else:
            self.stats.actions_declined += 1
        return SendToModel(rt.function_call_output(pending.call_id, json.dumps({"status": "not_done", "reason": reason})))

    def confirmation_played(self, now_ns: int) -> None:
        """The confirmation prompt played out: the timeout runs from here."""
        if self.pending is not None:
            self.pending.played_ns = now_ns

    def confirmation_expired(self, now_ns: int) -> bool:
        """No answer for ``confirm_timeout_ms`` after the prompt played (or its grace, if it never did)."""
        pending = self.pending
        if pending is None:
            return False
        start = pending.played_ns or pending.asked_ns + CONFIRM_PROMPT_GRACE_MS * MS
        return (now_ns - start) // MS >= self.config.confirm_timeout_ms


class Debounce:
    """The post-tool debounce: the agent speaks after a tool result once the caller was quiet long enough."""

    __slots__ = ("config", "stats", "window", "fragments", "facts")

    def __init__(self, config: ControllerConfig, stats: ControllerStats) -> None:
        self.config = config
        self.stats = stats
        self.window: tuple[int, int] | None = None  # (started_ns, last_fragment_ns); None: not waiting
        self.fragments: list[str] = []  # the caller's completed words meanwhile
        self.facts = ""  # the last tool result, for the answer that follows it

    @property
    def waiting(self) -> bool:
        return self.window is not None

    def begin(self, now_ns: int) -> None:
        """The state changed and the agent would speak: first wait until the caller is quiet."""
        self.window = (now_ns, now_ns)
        self.fragments = []

    def heard(self, text: str, completed: bool, now_ns: int) -> None:
        """Words of the caller: the quiet starts over; completed words join the combined turn."""
        if self.window is not None and (text.strip() or completed):
            started, _ = self.window
            self.window = (started, now_ns)
            if completed and text.strip():
                self.fragments.append(text.strip())

    def due(self, now_ns: int, caller_speaking: bool) -> bool:
        """The caller was quiet ``debounce_quiet_ms``, or the cap passed since the result."""
        assert self.window is not None
        started, last = self.window
        if caller_speaking:
            # Quiet means no speech, not only no words: a transcript may come seconds after speech began.
            last = now_ns
            self.window = (started, now_ns)
        cfg = self.config
        return (now_ns - last) // MS >= cfg.debounce_quiet_ms or (now_ns - started) // MS >= cfg.debounce_cap_ms

    def flush(self) -> tuple[str, str]:
        """The caller's words gathered meanwhile (one turn) and the tool's facts; the debounce is over."""
        self.window = None
        self.stats.debounce_flushes += 1
        combined = " ".join(self.fragments)
        self.fragments = []
        facts, self.facts = self.facts, ""
        return combined, facts
