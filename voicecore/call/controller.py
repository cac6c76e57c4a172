"""The per-call controller: turn-taking and the response lifecycle, around the model worker's core.

Owns the *scheduling* (INV-ONE-VOICE: response requests are made one at a time, never while the caller has
the floor, obsolete queued requests dropped), the response lifecycle (the watchdog, 3 s; the stalled-audio
retry, 8 s; retries of a prompt; a response played out moves the flow on), barge-in (what the caller may hear
is cut for a turn: docs/explanation/turn-taking.md) and DTMF, and composes the *policies*
(docs/explanation/architecture.md#section-7), each a small sans-I/O object with its own state:

- ``CallerTurns`` (turns.py): the caller's utterances, the verdict on each by its words, the hold on a VAD
  edge and its resume, and when a turn is the caller's to be answered;
- ``Tools`` and ``Debounce`` (tools.py): tools running, the action awaiting the caller's yes, duplicate
  writes, fillers; the post-tool debounce (1.5 s of caller quiet, 5 s at most: docs/explanation/agents.md#tools);
- ``Endings`` (endings.py): silence check-ins (10/20/40 s, then goodbye) and the terminal prompt (played in
  full plus grace, then hang up or transfer);
- ``Conversation`` (context.py): the conversation items, the history a new session gets back, a flow's
  context strategy;
- ``GateRelease`` (release.py): each request's release policy and the gated tags' watermarks (INV-GATE);
- ``FailureSpell`` (failures.py): the model's failures, the hold line and the failure policy.

A policy decides and keeps its state; the controller applies what it decides, because only the controller
sees the whole call: what is queued or in flight, what is audible, what the flow says next. The seams run
where a policy's state is read by little else (a check-in reads "idle", a tool's filler reads "nothing
queued"); what is read everywhere (the queued and in-flight requests, the active response) stays here.
The *mechanism* (response -> tag, framing, dead-tag drops, cancel + truncate/delete:
docs/explanation/protocols.md#c5) stays in core.py; *what* to say comes from flow.py; the actions are
actions.py's.

Sans-I/O: no sockets, shared memory, clock or randomness. The shell feeds every input with ``now_ns``
(monotonic) and, where playout matters, a ``Playout`` snapshot read from the control block at that
moment, and applies the returned actions in order. Feeding the same inputs gives the same actions
(INV-REPLAY): ids are counters, timers are deadlines checked against ``now_ns`` on every input.

The realtime server must not take turns itself: the session is configured with server VAD
``create_response: false, interrupt_response: false`` and input transcription on (words are what make a
barge-in semantic). ``session_update`` is built that way by ``start``.

Release hold (bare VAD edge): with ``pause_release`` the controller holds the tag the caller may hear
(``HoldTag``: the pacer releases nothing more of it at once, the carrier plays the lead it holds, 60-100 ms
of talk-over, and once the hold outlasts that the pacer sends ``clear``). The caller's words decide
(voicecore/call/backchannels.py): any words that are not a backchannel are a turn and the tag is cancelled;
a backchannel or a cough resumes it (``ResumeTag``) and it plays on from where it stopped. A resume never
follows a real turn's words. Release itself needs nothing of this loop: an ungated tag is released by the
pacer as it comes (the hold is the pacer's own check), so a model worker busy for a moment starves no call.

Validation gate (INV-GATE, docs/explanation/validation-gate.md#nodes): each request's flow node names its
release policy (``Say.policy``, ``Answer.policy``; ``ControllerConfig.gate_policy`` when it names none). A
gated response's tag is opened gated with ``OpenGate`` carrying the node's script (a Say's text) and forbidden
phrases; the validator's verdicts come back through ``on_verdict`` and bound the rolling approval (the
watermark is the smaller of the two). A rejected scripted prompt is cancelled and retried (at most
``max_prompt_retries``, then the flow advances); a rejected answer is cancelled and the safe line is scheduled
in its place. Retrieve-first: before an answer is requested the controller asks the shell for knowledge-base
snippets (``Retrieve`` -> ``on_snippets``, both recorded) and puts them in the response's instructions; with
none, a question that needs numbers gets the safe line without asking.

Ticks: ``on_tick`` is called every shell loop (``wants_ticks``). Nearly every tick of a call has work to
look at, if not to do: playout progress decides when a prompt played out (no event says so), and the silence
clock restarts on every tick that is not idle, so a call is ticked throughout.
"""

from __future__ import annotations

import dataclasses

from voicecore.agent import actions as agent_actions
from voicecore.call import core
from voicecore.call import flow as flows
from voicecore.call.actions import (IDLE_PLAYOUT, Action, CallOver, CancelTag, EndTag, HangUp, HoldTag, OpenTag,
                                    PlayFallback, Playout, ReleaseTag, ResumeTag, Retrieve, RunTool, SendToModel,
                                    Transfer, WriteFrames, action_to_dict)
from voicecore.call.context import Conversation
from voicecore.call.endings import CHECKIN, GOODBYE, Endings, ending_action
from voicecore.call.failures import HOLD, VENDOR_FAILURE_CODES, FailureSpell
from voicecore.call.release import GateRelease
from voicecore.call.settings import ControllerConfig, ControllerStats, turn_detection
from voicecore.call.tools import Debounce, Tools
from voicecore.call.turns import CallerTurns, Utterance
from voicecore.realtime import events as rt
from voicecore.validate.questions import question_needs_numbers

CONTROL = "turns"  # call_control of the configuration, and a record header's "control"
MS = 1_000_000
APPROVE_ALL = 1 << 62  # voicecore.shm.control.APPROVE_ALL: every frame of the tag
TRACKED_RESPONSES = 32  # responses remembered by tag (a late verdict or playout of an older one finds nothing)


# --- the scheduling's state ---------------------------------------------------------------------------
@dataclasses.dataclass(slots=True)
class Request:
    """One response the controller wants the model to produce."""

    req_id: int
    step: flows.Say | flows.Answer
    source: str  # flow | checkin | fallback | retry | apology | debounce | dtmf | safe_line
    user_text: str | None = None  # sent as a user text item before response.create
    question: str = ""  # the caller's words this answers (retrieve-first)
    facts: str = ""  # a tool's result the answer may take numbers from (the gate grounds them in it too)
    utterance: Utterance | None = None  # ... or the utterance whose completed transcript they are
    snippets: tuple[dict, ...] | None = None  # knowledge-base snippets; None: not looked up yet
    retrieving: bool = False

    @property
    def prompt_id(self) -> str:
        return self.step.prompt_id if isinstance(self.step, flows.Say) else "answer"

    @property
    def terminal(self) -> bool:
        return isinstance(self.step, flows.Say) and self.step.terminal


@dataclasses.dataclass(slots=True)
class Active:
    response_id: str
    request: Request
    created_ns: int
    last_audio_ns: int
    tag: int = 0
    done: bool = False
    cancelled_ns: int = 0
    had_tool_call: bool = False
    settled: bool = False  # played out (or cancelled) and reported to the flow


class CallController:
    """One call's turn-taking. Feed it inputs in time order; apply every returned action in order.
    A call driver (voicecore/call/driver.py), like the spine's."""

    control = CONTROL
    wants_ticks = True  # timers, rolling approvals and playout progress: on_tick every shell loop

    def __init__(self, call_sid: str, flow: flows.Flow | None = None, config: ControllerConfig | None = None,
                 naming: str = "ga", first_tag: int = 1, audio_format: str = "pcmu") -> None:
        # audio_format: the law of the call's frames (ModelCallCore's): "pcma" for an A-law stream passed through
        self.call_sid = call_sid
        self.naming = naming
        self.audio_format = audio_format
        self.first_tag = first_tag
        self.config = config or ControllerConfig()
        self.flow: flows.Flow = flow if flow is not None else flows.ScriptedFlow()
        cfg = self.config
        session = self.flow.session()
        self.core = core.ModelCallCore(
            call_sid, naming=naming, first_tag=first_tag, greet=False, auto_barge_in=False,
            instructions=session.instructions, tools=list(session.tools), voice=cfg.voice,
            gate_release=False,
            turn_detection=turn_detection(cfg),
            transcription_model=cfg.transcription_model,
            audio_format=audio_format,
        )
        self.stats = ControllerStats()
        self.playout = IDLE_PLAYOUT
        self.now_ns = 0
        self.started = False
        self.ended = False
        # scheduling: one request at a time
        self.next_req_id = 1
        self.queued: Request | None = None
        self.inflight: Request | None = None
        self.inflight_sent_ns = 0
        self.active: Active | None = None
        self.by_tag: dict[int, Active] = {}
        self.rejected: set[str] = set()  # responses never given a tag (INV-ONE-VOICE)
        self.retries: dict[str, int] = {}
        self.stall_count: dict[str, int] = {}
        self.failures = 0  # consecutive requests the model never answered
        # the policies
        self.turns = CallerTurns(cfg, self.stats)
        self.tools = Tools(call_sid, cfg, self.stats)
        self.debounce = Debounce(cfg, self.stats)
        self.endings = Endings(cfg, self.stats)
        self.context = Conversation()
        self.release = GateRelease(cfg)
        self.spell = FailureSpell(cfg.failure_policy())  # the model's failures (voicecore/call/failures.py)

    def record_header(self) -> dict:
        """What a record's header needs to rebuild this controller (voicecore/call/record.py)."""
        header = {"control": CONTROL, "call_sid": self.call_sid, "naming": self.naming, "first_tag": self.first_tag,
                  "flow": self.flow.name, "flow_args": self.flow.record_args(), "config": self.config.to_dict()}
        if self.audio_format != "pcmu":  # a mu-law call's header is as it always was
            header["audio_format"] = self.audio_format
        return header

    # ======================================================================================= inputs
    def start(self, now_ns: int) -> list[Action]:
        """The call's media started and the model socket is open: configure the session, greet."""
        self.now_ns = now_ns
        self.started = True
        self.endings.not_silent(now_ns)
        out: list[Action] = list(self.core.on_open())
        self._enqueue(self.flow.start(), "flow", out)
        self._pump(out)
        return out

    def resume(self, now_ns: int, cut_off: bool = False) -> list[Action]:
        """A model worker took over this live call and has no record of it to rebuild from (records off):
        configure the session, and do not start the call over (the caller heard the greeting already).
        ``cut_off``: the dead worker was in the middle of an answer, which the caller will not hear the end
        of: the flow's fallback line asks them to say it again (the new session knows nothing of it)."""
        self.now_ns = now_ns
        self.started = True
        self.endings.not_silent(now_ns)
        self.flow.start()  # the flow stands at its start; its first prompt was said by the worker before
        out: list[Action] = list(self.core.on_open())
        if cut_off:
            self._enqueue(self.flow.line("fallback"), "fallback", out)
        self._step(out)
        return out

    def on_model_event(self, event: object, now_ns: int, playout: Playout) -> list[Action]:
        """One server event: raw text from the socket (preferred: it is what gets recorded) or parsed."""
        self.now_ns = now_ns
        self.playout = playout
        if isinstance(event, (str, bytes, bytearray)):
            event = rt.parse_server_event(event)
        if self.ended:
            return []
        self.spell.event(now_ns)
        out: list[Action] = []
        if isinstance(event, rt.AudioDelta):  # the most frequent event by far: first
            active = self.active
            if active is not None and active.response_id == event.response_id:
                active.last_audio_ns = now_ns
                self.spell.served()
        elif isinstance(event, rt.ResponseCreated):
            self._on_response_created(event, out)
        elif isinstance(event, rt.SpeechStarted):
            self._on_speech_started(event, out)
        elif isinstance(event, rt.SpeechStopped):
            self.turns.speech_stopped(event.item_id, event.audio_end_ms, now_ns)
            self.endings.not_silent(now_ns)
        elif isinstance(event, rt.InputTranscriptionCompleted):
            if event.transcript.strip():
                self.context.said("user", event.transcript.strip())
            self._on_words(event.item_id, event.transcript, True)
        elif isinstance(event, rt.InputTranscriptionDelta):
            self._on_words(event.item_id, event.delta, False)
        elif isinstance(event, rt.InputTranscriptionFailed):
            self.turns.transcription_failed(event.item_id)
        elif isinstance(event, rt.OutputItemAdded) and event.response_id in self.rejected:
            out.append(SendToModel(rt.item_delete(event.item_id)))
        elif isinstance(event, rt.FunctionCallArgumentsDone):
            self._on_tool_call(event, out)
        elif isinstance(event, rt.ItemAdded):
            if event.stage != "done":
                self.context.item_added(event.item_id)
        elif isinstance(event, rt.ItemDeleted):
            self.context.item_deleted(event.item_id)
        elif isinstance(event, rt.RealtimeError) and event.code in VENDOR_FAILURE_CODES:
            self._vendor_failed(event.code, out)
        elif isinstance(event, rt.ResponseDone):
            self._on_response_done(event, out)
        elif isinstance(event, rt.TranscriptDone) and event.transcript.strip() and event.response_id not in self.rejected:
            self.context.said("assistant", event.transcript.strip())  # a rejected answer was never said
        if not isinstance(event, rt.ResponseCreated):
            out.extend(self.core.on_event(event, now_ns, playout))
        self._step(out)
        return out

    def on_caller_audio(self, audio: bytes, now_ns: int, playout: Playout | None = None) -> list[Action]:
        """The caller's frames: to the model first, always (their content is the model's business), then
        what their timing decides (only timing is ours). ``playout``: for a record; not needed here."""
        out: list[Action] = self.core.caller_audio(audio)
        self.now_ns = now_ns
        if self.ended:
            return out
        self._step(out)
        return out

    def on_dtmf(self, digit: str, now_ns: int) -> list[Action]:
        """A keypad digit: unambiguous caller input, so it interrupts at once (no words needed)."""
        self.core.stats.dtmf_digits += 1
        self.now_ns = now_ns
        if self.ended:
            return []
        out: list[Action] = []
        self.stats.dtmf += 1
        self.endings.not_silent(now_ns)
        self._drop_queued()
        self._barge_in(now_ns, out)
        if self.tools.pending is not None:
            # a key answers the confirmation prompt: 1 is yes, any other key is no
            if digit == "1":
                self._confirm_action(out)
            else:
                self._drop_action("caller_declined", "declined", out)
            self._step(out)
            return out
        step = self.flow.on_dtmf(digit)
        self._enqueue(step, "dtmf", out, user_text=f"(The caller pressed the key {digit}.)" if isinstance(step, flows.Answer) else None,
                      question=f"(keypad {digit})")
        self._step(out)
        return out

    def on_tick(self, now_ns: int, playout: Playout) -> list[Action]:
        """Timers and playout progress. Call every 20-50 ms (at most every 100 ms: rolling approvals)."""
        self.now_ns = now_ns
        self.playout = playout
        if self.ended:
            return []
        out: list[Action] = []
        self._step(out)
        return out

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int, playout: Playout,
                   reason: str = "", citations: str = "") -> list[Action]:
        """The validator's verdict on gated ``tag``: frames below ``approved_frames`` may play, or none
        more may (rejected: cancel it; a scripted prompt is retried, an answer replaced by the safe line).
        ``reason`` and ``citations`` are for a record's reader; nothing here decides on them."""
        self.now_ns = now_ns
        self.playout = playout
        if self.ended:
            return []
        out: list[Action] = []
        if self.release.judging(tag):
            if not rejected:
                release = self.release.approve(tag, approved_frames)
                if release is not None:
                    out.append(release)
            else:
                self._on_rejected(tag, out)
        self._step(out)
        return out

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[Action]:
        """The knowledge base's answer to ``Retrieve(req_id, ...)`` (best first; empty: nothing relevant)."""
        self.now_ns = now_ns
        if self.ended:
            return []
        out: list[Action] = []
        request = self.queued
        if request is not None and request.req_id == req_id and request.snippets is None:
            request.snippets = tuple(snippets)
            if not snippets:
                self.stats.retrievals_empty += 1
                if self.release.policy(request.step) in ("numbers", "strict") and question_needs_numbers(request.question):
                    # Fail-closed: nothing to ground an answer in, and it would need numbers: the safe line.
                    self.queued = None
                    self._enqueue_safe_line(out)
        self._step(out)
        return out

    def on_tool_result(self, call_id: str, ok: bool, output: str, now_ns: int) -> list[Action]:
        """The result of ``RunTool(call_id, ...)``: ``output`` is the JSON text the model gets (a
        structured error when not ``ok``)."""
        self.now_ns = now_ns
        if self.ended:
            return []
        out: list[Action] = []
        running = self.tools.finished(call_id, ok, output, now_ns)
        if running is not None:
            if self.queued is not None and self.queued.source == "filler":
                self.queued = None  # not said yet, and no longer true
                self.stats.requests_dropped += 1
            self._tool_finished(call_id, running.plan, ok, output, out)
        self._step(out)
        return out

    def reopen(self, now_ns: int) -> list[Action]:
        """The model socket reconnected: configure the new session (no greeting). The old session's
        response is gone with it: a request it never answered is asked again, and a response cut off
        mid-audio is handled as a stall (cancelled where audible, retried once)."""
        self.now_ns = now_ns
        if self.ended:
            return []
        self.spell.reopened(now_ns)
        out: list[Action] = list(self.core.on_open())
        out.extend(self.context.restore())  # the new session starts empty
        if self.inflight is not None:
            request, self.inflight = self.inflight, None
            if self.queued is None:
                self.queued = request
        if self.active is not None and not self.active.done and not self.active.cancelled_ns:
            self._on_stall(self.active, out)
        self._step(out)
        return out

    def on_model_lost(self, now_ns: int, reason: str, fatal: bool = False) -> list[Action]:
        """The model socket closed or could not be opened (``reason``: a close code, an exception's name,
        breaker_open). A caller waiting on the model hears the hold line; the shell reconnects. ``fatal``:
        there will be no model for this call (the vendor's circuit breaker is open for a new call): the
        failure policy at once."""
        self.now_ns = now_ns
        if self.ended:
            return []
        out: list[Action] = []
        self.stats.model_lost += 1
        self.spell.lost(now_ns)
        if fatal:
            self._give_up(reason, out)
            return out
        self._step(out)
        return out

    def awaiting_model(self) -> bool:
        """A caller waits on the model: a response is asked for, coming or playing, or a turn is being
        answered. The pacer plays the hold line on its own when the model worker stops serving such a call."""
        if self.ended:
            return False
        return (not self.started or self.inflight is not None or self.queued is not None or self.debounce.waiting
                or (self.active is not None and not self.active.done))

    def _waiting_on_vendor(self) -> bool:
        """A response was asked for and not created yet, or is being generated: the vendor owes an event."""
        active = self.active
        return self.inflight is not None or (active is not None and not active.done and not active.cancelled_ns)

    def on_carrier_stop(self, now_ns: int) -> list[Action]:
        """The caller hung up / the stream stopped: stop everything, cleanly, once."""
        self.now_ns = now_ns
        if self.ended:
            return []
        out: list[Action] = []
        audible = self.core.audible(self.playout)
        if audible is not None:
            out.extend(self.core.barge_in(now_ns, self.playout))
        elif self.active is not None and not self.active.done:
            out.append(SendToModel(rt.response_cancel(self.active.response_id)))
        self.queued = None
        self._finish("caller_hangup", CallOver("caller_hangup"), out)
        return out

    # ================================================================================ model events
    def _on_response_created(self, event: rt.ResponseCreated, out: list[Action]) -> None:
        req_tag = (event.metadata or {}).get("vc_req")
        request = self.inflight
        solicited = request is not None and (req_tag is None or req_tag == str(request.req_id))
        # The caller took the floor after it was asked for: it answers what they no longer wait for.
        overtaken = self.turns.overtaken()
        if not solicited or self.core.audible(self.playout) is not None or self.active is not None or overtaken:
            # INV-ONE-VOICE: a response we did not ask for (or a second one while one plays) never gets a
            # tag, so none of its audio can reach the ring; the server is told to stop it.
            self.rejected.add(event.response_id)
            self.stats.responses_rejected += 1
            if overtaken and solicited:
                self.inflight = None
                self.stats.requests_dropped += 1
            out.append(SendToModel(rt.response_cancel(event.response_id)))
            return
        assert request is not None
        self.inflight = None
        self.core.gate_next_response(self.release.spec(request.step, request.facts))
        actions = self.core.on_event(event, self.now_ns, self.playout)
        self.release.opened(actions)  # a gated tag releases nothing unapproved
        active = Active(event.response_id, request, self.now_ns, self.now_ns)
        for action in actions:
            if isinstance(action, OpenTag):
                active.tag = action.tag
        self.active = active
        self.by_tag[active.tag] = active
        if len(self.by_tag) > TRACKED_RESPONSES:
            for tag in list(self.by_tag)[:-TRACKED_RESPONSES]:
                del self.by_tag[tag]
        self.failures = 0
        if request.terminal:
            self.endings.ending_created(active)
        out.extend(actions)
        if self.turns.response_created():
            # Asked for before the caller began: it waits, held, for their words, like audio they talked over.
            self._hold(out)

    def _on_response_done(self, event: rt.ResponseDone, out: list[Action]) -> None:
        active = self.active
        if active is None or active.response_id != event.response_id:
            return
        active.done = True
        self.active = None
        response = self.core.response(active.response_id)
        frames = response.produced_frames if response is not None else 0
        if event.status == "failed" and event.error_code in VENDOR_FAILURE_CODES and not active.cancelled_ns:
            # The vendor could not answer: the same request again after a pause (the failure policy bounds it).
            active.settled = True  # not "played": the flow must not move on past what was never said
            if frames == 0 and self.queued is None:
                self.queued = Request(self.next_req_id, active.request.step, "retry", active.request.user_text)
                self.next_req_id += 1
            self._vendor_failed(event.error_code, out)
            return
        if (not active.cancelled_ns and frames == 0 and not active.had_tool_call
                and isinstance(active.request.step, flows.Say)):
            # A scripted prompt that produced no audio (failed, incomplete): the caller heard nothing.
            self._retry(active.request, "empty", out)

    # ================================================================================ tools
    def _on_tool_call(self, event: rt.FunctionCallArgumentsDone, out: list[Action]) -> None:
        self.stats.tool_calls += 1
        if self.active is not None and self.active.response_id == event.response_id:
            self.active.had_tool_call = True
        if self.debounce.waiting:
            self._flush_debounce(out)  # another tool call sends the debounced fragments first
        decision = self.flow.on_tool_call(event.name or "", event.arguments)
        if isinstance(decision, flows.ToolPlan):
            if decision.confirm is not None and not self.tools.done_recently(decision, self.now_ns):
                self._propose_action(event.call_id, decision, out)
            else:
                self._run_tool(event.call_id, decision, out)
            return
        self._apply_outcome(event.call_id, decision, out)

    def _apply_outcome(self, call_id: str, outcome: flows.ToolOutcome, out: list[Action]) -> None:
        out.append(SendToModel(rt.function_call_output(call_id, outcome.output)))
        transition = outcome.transition
        if transition is not None:
            # The next node's instructions and tools now; its context strategy before the next request
            # (no response is active then, so nothing it says is cut from under it).
            self.stats.transitions += 1
            out.append(self.core.reconfigure(transition.session.instructions, list(transition.session.tools)))
            self.context.transition(transition)
        self.debounce.facts = outcome.facts
        if outcome.then is not None:
            self._enqueue(outcome.then, "flow", out)
        elif outcome.speak:
            # the state changed and the agent would speak: first wait until the caller is quiet (the post-tool
            # debounce).
            self.debounce.begin(self.now_ns)

    def _run_tool(self, call_id: str, plan: flows.ToolPlan, out: list[Action]) -> None:
        run = self.tools.run(call_id, plan, self.now_ns)
        if isinstance(run, RunTool):
            out.append(run)
        else:  # the same write within the window: its first result stands
            self._tool_finished(call_id, plan, True, run, out)

    def _tool_finished(self, call_id: str, plan: flows.ToolPlan, ok: bool, output: str, out: list[Action]) -> None:
        self._apply_outcome(call_id, self.flow.on_tool_result(plan.name, plan.arguments, ok, output), out)

    def _flush_debounce(self, out: list[Action]) -> None:
        combined, facts = self.debounce.flush()
        step = self.flow.after_tool(combined)
        user_text = combined if (self.config.debounce_send_text and combined) else None
        self._enqueue(step, "debounce", out, user_text=user_text, question=combined, facts=facts)

    # --- actions with confirmation (docs/explanation/agents.md#actions-with-confirmation) -----------------
    def _propose_action(self, call_id: str, plan: flows.ToolPlan, out: list[Action]) -> None:
        if self.tools.pending is not None:
            self._drop_action("superseded", None, out)  # the model proposed another: only the newest stands
        assert plan.confirm is not None
        self.tools.propose(call_id, plan, self.now_ns)
        self._enqueue(plan.confirm, "confirm", out)

    def _confirm_action(self, out: list[Action]) -> None:
        pending = self.tools.confirm()
        self._run_tool(pending.call_id, pending.plan, out)

    def _drop_action(self, reason: str, line: str | None, out: list[Action]) -> None:
        """The caller said no, said something else, or nothing: the action is not run; the model is told."""
        out.append(self.tools.drop(reason))
        if line is not None:
            self._enqueue(self.flow.line(line), "flow", out)

    def _answer_confirmation(self, answer: str, out: list[Action]) -> None:
        if answer == "yes":
            self._confirm_action(out)
        else:
            self._drop_action("caller_declined", "declined", out)

    def _check_action_timeout(self, out: list[Action]) -> None:
        pending = self.tools.pending
        if pending is None or self.turns.speaking:
            return
        if self.turns.answering_since(pending.asked_ns):
            return  # the caller is answering; their words decide
        if self.tools.confirmation_expired(self.now_ns):
            self._drop_action("no_confirmation", "confirm_timeout", out)

    def _check_fillers(self, out: list[Action]) -> None:
        for plan in self.tools.fillers_due(self.now_ns):
            if self.queued is None and self.endings.ending is None:
                self.stats.fillers += 1
                self._enqueue(plan.filler, "filler", out)  # type: ignore[arg-type]

    # ============================================================================== caller speech
    # Who has the floor is decided by what the caller said (CallerTurns, turns.py): a VAD edge only holds what
    # the agent is saying; the words then resume it (a backchannel, a cough) or cut it for good and answer
    # (anything else). What follows from a verdict is applied here.
    def _on_speech_started(self, event: rt.SpeechStarted, out: list[Action]) -> None:
        self.endings.not_silent(self.now_ns)
        self.turns.speech_started(event.item_id, event.audio_start_ms, self.now_ns, interrupting=self._agent_has_floor())
        self._hold(out)

    def _agent_has_floor(self) -> bool:
        """The agent is speaking or about to: a caller's backchannel now asks for nothing."""
        return (self.core.audible(self.playout) is not None or self.inflight is not None or self.queued is not None
                or bool(self.tools.running) or self.debounce.waiting or self.endings.ending is not None)

    def _hold(self, out: list[Action]) -> None:
        """Stop what the caller may hear from going out while their words are not known."""
        audible = self.core.audible(self.playout)
        if audible is not None:
            hold = self.turns.hold(audible.tag, self.release.released(audible.tag))
            if hold is not None:
                out.append(hold)

    def _on_words(self, item_id: str, text: str, completed: bool) -> None:
        self.turns.words(item_id, text, completed, self.now_ns)
        self.debounce.heard(text, completed, self.now_ns)
        if text.strip():
            self.endings.not_silent(self.now_ns)

    def _evaluate_utterances(self, out: list[Action]) -> None:
        for u in self.turns.judge(self.now_ns, confirming=self.tools.pending is not None):
            self._turn_detected(u, out)
        resume = self.turns.resume()
        if resume is not None:
            out.append(resume)  # every utterance since the hold asked for nothing: the agent carries on
        self._take_turn(out)
        self.turns.forget_settled()

    def _turn_detected(self, u: Utterance, out: list[Action]) -> None:
        """The caller took the floor: the agent stops for good, whatever it was about to say."""
        self.endings.caller_turn(self.now_ns)
        self._drop_queued()
        if self._barge_in(self.now_ns, out):
            self.stats.bargein_latency_ms.append((self.now_ns - u.started_ns) // MS)

    def _take_turn(self, out: list[Action]) -> None:
        """Answer the caller once they stopped and every utterance of their turn is judged and heard whole."""
        if self.tools.pending is not None:
            answer = self.turns.take_confirmation(self.now_ns)
            if answer:
                self._answer_confirmation(answer, out)
        taken = self.turns.take(self.now_ns)
        if taken is not None:
            self._caller_turn(*taken, out)

    def _caller_turn(self, words: str, u: Utterance, out: list[Action]) -> None:
        if self.tools.pending is not None:
            answer = agent_actions.confirmation_answer(words, self.config.confirm_languages)
            if answer:
                self._answer_confirmation(answer, out)
                return
            self._drop_action("caller_moved_on", None, out)  # then the turn is answered as any other
        if self.debounce.waiting:
            return  # gathered into the combined turn
        self._enqueue(self.flow.on_user_turn(words), "flow", out, question=words)
        if self.queued is not None and isinstance(self.queued.step, flows.Answer):
            self.queued.utterance = u

    # ================================================================================ barge-in
    def _barge_in(self, now_ns: int, out: list[Action]) -> bool:
        """Cancel what the caller may hear (core mechanism: docs/explanation/protocols.md#c5). True if audio
        was cut."""
        audible = self.core.audible(self.playout)
        actions = self.core.barge_in(now_ns, self.playout) if audible is not None else []
        self.turns.drop_hold()
        if audible is None or not actions:
            return False
        out.extend(actions)
        active = self.by_tag.get(audible.tag)
        if active is not None:
            active.cancelled_ns = now_ns
            active.settled = True
            if self.endings.cut(active):
                # The caller spoke over the goodbye: the call is not over (and a transfer is cancelled).
                step = active.request.step
                if isinstance(step, flows.Say) and step.transfer_to:
                    self.stats.transfers_cancelled += 1
        if audible.produced_frames == 0:
            # Nothing of it was written yet, so nothing was heard: the caller's new speech supersedes a
            # response still being prepared (counted apart from barge-ins).
            self.stats.unheard_cancels += 1
            return False
        self.stats.bargeins += 1
        return True

    # ================================================================================ scheduling
    def _enqueue(self, step: flows.Step, source: str, out: list[Action], user_text: str | None = None,
                 question: str = "", facts: str = "") -> None:
        if isinstance(step, flows.Wait):
            return
        if self.queued is not None:
            if self.queued.terminal and not (isinstance(step, flows.Say) and step.terminal):
                return  # an ending already queued wins over anything but another ending
            self.stats.requests_dropped += 1  # obsolete: replaced before it was sent
        self.queued = Request(self.next_req_id, step, source, user_text, question,
                              facts=facts if isinstance(step, flows.Answer) else "")
        self.next_req_id += 1

    def _enqueue_safe_line(self, out: list[Action]) -> None:
        self.stats.safe_lines += 1
        self._enqueue(flows.Say(flows.SAFE_LINE_NODE, self.config.safe_line, policy="off"), "safe_line", out)

    def _on_rejected(self, tag: int, out: list[Action]) -> None:
        actions = self.core.reject(tag, self.now_ns, self.playout)
        self.release.rejected(tag)
        if not actions:
            return  # already cancelled (barge-in) or finished with it
        out.extend(actions)
        self.stats.gate_rejections += 1
        self.turns.drop_hold(tag)
        active = self.by_tag.get(tag)
        if active is None:
            return
        active.cancelled_ns = self.now_ns
        active.settled = True
        self.endings.cut(active)
        request = active.request
        if isinstance(request.step, flows.Answer):
            self._enqueue_safe_line(out)
        else:
            self._retry(request, "rejected", out)

    def _drop_queued(self) -> None:
        if self.queued is not None and not self.queued.terminal:
            self.queued = None
            self.stats.requests_dropped += 1

    def _may_speak(self) -> bool:
        if self.inflight is not None or self.turns.speaking or self.debounce.waiting:
            return False
        if self.turns.has_floor():
            return False  # the caller's words are not judged, or their turn not answered, yet
        if self.active is not None:
            if not self.active.cancelled_ns:
                return False
            if (self.now_ns - self.active.cancelled_ns) // MS < self.config.cancel_settle_ms:
                return False  # wait for its response.done so the server has no active response
            self.active = None
        return self.core.audible(self.playout) is None

    def _pump(self, out: list[Action]) -> None:
        request = self.queued
        if request is None:
            return
        if self.config.retrieve_first and isinstance(request.step, flows.Answer) and request.snippets is None:
            # Retrieve while the request waits its turn; it is not sent before the snippets are in. The
            # turn is often taken on the first transcription delta: look the question up once the
            # transcript is complete (or late).
            u = request.utterance
            if u is not None and not u.completed and (self.now_ns - (u.stopped_ns or self.now_ns)) // MS < self.config.retrieve_wait_ms:
                return
            if u is not None and u.words.strip():
                request.question = u.words.strip()
            if not request.retrieving:
                request.retrieving = True
                self.stats.retrievals += 1
                out.append(Retrieve(request.req_id, request.question, self.config.retrieve_k))
            return
        if not self.spell.may_ask(self.now_ns):
            return  # no model socket, or a pause after the vendor failed: the request waits
        if not self._may_speak():
            return
        self.queued = None
        self.inflight = request
        self.inflight_sent_ns = self.now_ns
        self.spell.asked(self.now_ns)
        self.stats.requests_sent += 1
        out.extend(self.context.before_request())  # a flow's context strategy, now that nothing is active
        if request.user_text:
            out.append(SendToModel(rt.conversation_item_create_user_text(request.user_text)))
        metadata = {"vc_req": str(request.req_id), "vc_prompt": request.prompt_id}
        out.append(SendToModel(rt.response_create(instructions=self._response_instructions(request), metadata=metadata)))

    def _response_instructions(self, request: Request) -> str | None:
        """A response's own instructions, or None for the session's. The vendor's rule: a response's
        instructions replace the session's for that response, so what a response needs of its own (a line to
        say, the facts to answer from) comes after the session's instructions in force (the agent's persona,
        its node's role, its language rules), never instead of them."""
        step = request.step
        if isinstance(step, flows.Say):
            return self.core.in_session(f'Say exactly: "{step.text}"')
        if request.snippets:
            return self.core.in_session(_grounded_instructions(request.snippets))
        return None

    def _retry(self, request: Request, why: str, out: list[Action]) -> None:
        """Ask again for the same prompt, at most max_prompt_retries times; then let the flow advance."""
        key = request.prompt_id
        count = self.retries.get(key, 0) + 1
        self.retries[key] = count
        if count <= self.config.max_prompt_retries:
            self.stats.retries += 1
            if self.queued is None or not self.queued.terminal or request.terminal:
                self.queued = Request(self.next_req_id, request.step, "retry", request.user_text)
                self.next_req_id += 1
            return
        self.retries[key] = 0
        if request.terminal:
            # Even the ending cannot be spoken: end the call rather than leave the caller in silence.
            step = request.step
            assert isinstance(step, flows.Say)
            self._finish(*ending_action(step, f"{why}_gave_up"), out)
            return
        if isinstance(request.step, flows.Say):
            self._enqueue(self.flow.after_played(key), "flow", out)
        else:
            self._enqueue(self.flow.line("fallback"), "fallback", out)

    # ================================================================================ the step
    def _step(self, out: list[Action]) -> None:
        """Everything time- or playout-driven, in a fixed order (deterministic)."""
        if self.ended:
            return
        now = self.now_ns
        cfg = self.config
        if self._check_failures(out):
            return
        self._evaluate_utterances(out)
        # post-tool debounce: the fragments go once the caller was quiet long enough, or at the cap
        if self.debounce.waiting and self.debounce.due(now, self.turns.speaking):
            self._flush_debounce(out)
        # watchdog: asked, nothing created
        if self.inflight is not None and (now - self.inflight_sent_ns) // MS >= cfg.watchdog_ms:
            request = self.inflight
            self.inflight = None
            self.stats.watchdog_fires += 1
            self.failures += 1
            if self.failures >= cfg.give_up_after_failures:
                # The model is not answering at all: the shipped apology, then a person (or a hang-up),
                # rather than prompts looped into silence (INV-NEVER-SILENT).
                self._give_up("model_unresponsive", out)
                return
            if isinstance(request.step, flows.Answer):
                self._enqueue(self.flow.line("fallback"), "fallback", out)
            else:
                self._retry(request, "watchdog", out)
        # stall: started, audio stopped coming, not finished
        active = self.active
        if active is not None and not active.done and not active.cancelled_ns and (now - active.last_audio_ns) // MS >= cfg.stall_ms:
            self._on_stall(active, out)
        self._check_played(out)
        self._check_fillers(out)
        self._check_action_timeout(out)
        self._check_silence(out)
        self._check_ending(out)
        self._pump(out)

    def _on_stall(self, active: Active, out: list[Action]) -> None:
        self.stats.stalls += 1
        request = active.request
        if self.core.audible(self.playout) is not None and self.core.current and self.core.current.tag == active.tag:
            out.extend(self.core.barge_in(self.now_ns, self.playout))
        else:
            out.append(SendToModel(rt.response_cancel(active.response_id)))
        active.cancelled_ns = self.now_ns
        active.settled = True
        self.endings.cut(active)
        key = request.prompt_id
        self.stall_count[key] = self.stall_count.get(key, 0) + 1
        if self.stall_count[key] <= self.config.stall_retries:
            self._retry(request, "stall", out)
        else:
            self._enqueue(self.flow.line("apology"), "apology", out)

    def _played_out(self, active: Active) -> bool:
        response = self.core.response(active.response_id)
        if response is None or response.cancelled or not response.audio_done:
            return False
        if response.frames == 0:
            return active.done
        p = self.playout
        return p.played_tag == active.tag and p.played_frames >= response.frames

    def _check_played(self, out: list[Action]) -> None:
        for active in list(self.by_tag.values()):
            if active.settled or active.cancelled_ns:
                continue
            if not self._played_out(active):
                continue
            active.settled = True
            self.endings.not_silent(self.now_ns)
            self.retries.pop(active.request.prompt_id, None)
            if active.request.source == "confirm":
                self.tools.confirmation_played(self.now_ns)
            if not self.endings.played(active, self.now_ns) and isinstance(active.request.step, flows.Say):
                self._enqueue(self.flow.after_played(active.request.prompt_id), "flow", out)

    def _idle(self) -> bool:
        return (not self.turns.speaking and self.queued is None and self.inflight is None and self.active is None
                and not self.debounce.waiting and self.endings.ending is None and self.core.audible(self.playout) is None
                and not self.turns.has_floor())

    def _check_silence(self, out: list[Action]) -> None:
        due = self.endings.silence(self.now_ns, self._idle())
        if due == CHECKIN:
            self._enqueue(self.flow.line("checkin"), "checkin", out)
        elif due == GOODBYE:
            self._enqueue(self.flow.line("goodbye"), "silence", out)

    def _check_ending(self, out: list[Action]) -> None:
        step = self.endings.due(self.now_ns)
        if step is not None:
            self._finish(*ending_action(step, "completed"), out)

    def _finish(self, reason: str, final: Action, out: list[Action]) -> None:
        self.ended = True
        self.stats.end_reason = reason
        out.append(final)

    # ================================================================================ failure policy
    def _vendor_failed(self, code: str, out: list[Action]) -> None:
        """The vendor failed a response (an error, a failed response.done): a request waiting for its
        response is asked again after a doubling pause; the hold line and the policy follow in _step."""
        self.stats.vendor_failures += 1
        self.spell.vendor_failed(self.now_ns)
        if self.inflight is not None:
            request, self.inflight = self.inflight, None
            if self.queued is None:
                self.queued = request

    def _check_failures(self, out: list[Action]) -> bool:
        """The hold line for a caller waiting on a failing model, and the failure policy. True: given up."""
        verdict = self.spell.verdict(self.now_ns, awaiting=self.awaiting_model(), waiting_on_vendor=self._waiting_on_vendor(),
                                     caller_speaking=self.turns.speaking)
        if verdict == HOLD:
            self.stats.hold_lines += 1
            out.append(PlayFallback(HOLD))
        elif verdict is not None:
            self._give_up(verdict, out)
            return True
        return False

    def _give_up(self, reason: str, out: list[Action]) -> None:
        """The failure policy: what is audible of the model stops, the shipped apology plays, then the call
        is transferred (to the agent's target) or hung up. Nothing of the model is needed for any of it."""
        audible = self.core.audible(self.playout)
        if audible is not None:
            out.extend(self.core.barge_in(self.now_ns, self.playout))
        self.queued = None
        self.inflight = None
        target = self.flow.line("apology").transfer_to if self.config.failure_transfer else None
        self.stats.failure_policy += 1
        if target:
            out.append(PlayFallback("apology_transfer"))
            self._finish(f"transfer_{reason}", Transfer(target, after_line=True), out)
        else:
            out.append(PlayFallback("apology_hangup"))
            self._finish(reason, HangUp(reason, after_line=True), out)

    # ================================================================================ reporting
    def statistics(self) -> dict:
        return {**dataclasses.asdict(self.stats), **{f"core_{k}": v for k, v in dataclasses.asdict(self.core.stats).items()}}


def _grounded_instructions(snippets: tuple[dict, ...]) -> str:
    facts = "\n".join(f"- {s.get('text', '')} ({s.get('file', '')})" for s in snippets)
    return ("Answer the caller briefly, in the caller's language. Say a price, date, time, amount or phone "
            "number only as it appears in these facts; if they do not hold it, say you cannot verify it.\n"
            f"Facts:\n{facts}")


__all__ = [
    "Action", "CallController", "CallOver", "ControllerConfig", "ControllerStats", "HangUp", "HoldTag", "PlayFallback",
    "ReleaseTag", "ResumeTag", "Retrieve", "RunTool", "Transfer",
    "SendToModel", "OpenTag", "WriteFrames", "EndTag", "CancelTag", "Playout", "action_to_dict",
]
