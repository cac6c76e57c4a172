"""The per-call controller: turn-taking and the response lifecycle, around the model worker's core.

Owns the *policies* (docs/explanation/architecture.md#section-7, docs/explanation/turn-taking.md): one voice
at a time (INV-ONE-VOICE: response requests are scheduled, one at a time, never while the caller is
mid-utterance, obsolete queued requests dropped), the post-tool debounce (after a tool result the agent waits
for 1.5 s of caller quiet, 5 s at most: docs/explanation/agents.md#tools), semantic barge-in (words, 0.5 s /
1.0 s; a bare VAD edge only holds release of new frames), the watchdog (3 s), the stalled-audio retry (8 s),
silence check-ins (10/20/40 s, then goodbye), endings (goodbye played in full plus grace, then hang up or
transfer) and DTMF. The *mechanism* (response -> tag, framing, dead-tag drops, cancel + truncate/delete:
docs/explanation/protocols.md#c5) stays in core.py; *what* to say comes from flow.py.

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
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from voicecore.agent import actions as agent_actions
from voicecore.call import core
from voicecore.call import flow as flows
from voicecore.call import restore as call_restore
from voicecore.call.actions import (  # noqa: F401 (the vocabulary, importable from here as before)
    Action, CallOver, CancelTag, EndTag, HangUp, HoldTag, OpenTag, Playout, PlayFallback, ReleaseTag, ResumeTag, Retrieve,
    RunTool, SendToModel, Transfer, WriteFrames, action_to_dict,
)
from voicecore.call.context import HISTORY_MESSAGES, MAX_TRACKED_ITEMS, Conversation  # noqa: F401 (importable as before)
from voicecore.call.endings import CHECKIN, GOODBYE, Endings, ending_action
from voicecore.call.failures import HOLD, VENDOR_FAILURE_CODES, FailurePolicy, FailureSpell
from voicecore.call.tools import DEFAULT_DEDUPE_MS, PendingAction, PostToolDebounce, WriteLedger
from voicecore.call.turns import MAX_TRACKED_UTTERANCES, CallerTurns, Utterance  # noqa: F401 (importable as before)
from voicecore.outbound.opt_out import OPT_OUT_PROMPT, find_opt_out
from voicecore.outbound.opt_out import goodbye as opt_out_goodbye
from voicecore.realtime import events as rt
from voicecore.validate.questions import question_needs_numbers

CONTROL = "turns"  # call_control of the configuration, and a record header's "control"
MS = 1_000_000
APPROVE_ALL = 1 << 62  # voicecore.shm.control.APPROVE_ALL: every frame of the tag
GATE_POLICIES = ("off", "numbers", "scripted", "strict")
IDLE_PLAYOUT = Playout(0, 0, 0, 0, 0, 0)
CONFIRM_PROMPT_GRACE_MS = 20_000  # a confirmation prompt never played (rejected, cut): its timeout starts after this


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Every policy constant in one place (ms unless named otherwise)."""

    # A caller's turn asking not to be called again gets the opt-out goodbye, then the hang-up: on for the calls
    # the node placed (build.driver_for_config), where the callee's number goes on the do-not-call list.
    opt_out: bool = False
    watchdog_ms: int = 3000  # response.create sent, no response.created -> retry (a prompt) or the fallback line
    stall_ms: int = 8000  # response started, no audio for this long and not finished -> retry, then apology
    stall_retries: int = 1
    max_prompt_retries: int = 3  # per prompt, watchdog and stall retries together; then the flow advances
    give_up_after_failures: int = 6  # consecutive unanswered requests -> transfer (or hang up) unspoken
    debounce_quiet_ms: int = 1500  # after a tool result the agent waits for this much caller quiet ...
    debounce_cap_ms: int = 5000  # ... but no longer than this after the result
    debounce_send_text: bool = False  # also send the combined fragments as one user text item
    # Turn-taking by what the caller said (voicecore/call/backchannels.py): words that are all backchannel
    # ("mm-hmm", "okay") let the agent carry on; any other words are a turn, whatever their length. Only while
    # no words are known does length decide: speech this long is a turn, shorter is noise (a cough), once
    # transcript_wait_ms passed after the speech stopped without words (late words re-open a noise verdict).
    bargein_min_speech_ms: int = 500
    transcript_wait_ms: int = 1500
    words_settle_ms: int = 300  # words in, speech stopped, no more words this long: the turn is taken
    languages: tuple[str, ...] = ("en", "sv")  # the backchannel lexicons that read the caller's words
    backchannels: tuple[str, ...] = ()  # the agent's own backchannel phrases, on top of the lexicons
    turn_detection: str = "server_vad"  # or "semantic_vad" (the vendor's end-of-turn model)
    vad_eagerness: str = "auto"  # semantic_vad: low, medium, high or auto
    silence_checkins_ms: tuple[int, ...] = (10_000, 20_000, 40_000)  # caller silence before each check-in
    silence_goodbye_ms: int = 10_000  # after the last unanswered check-in
    goodbye_grace_ms: int = 500  # after the goodbye's last frame played, before the hang-up or transfer
    cancel_settle_ms: int = 1500  # a cancelled response whose response.done never comes counts as gone
    pause_release: bool = True  # a bare VAD edge holds release (HoldTag) until the caller's words decide
    transcription_model: str = "gpt-4o-mini-transcribe"
    vad_silence_duration_ms: int = 500
    # included in speech_started.audio_start_ms (docs/explanation/protocols.md#c3)
    vad_prefix_padding_ms: int = 300
    gate_policy: str = "off"  # release policy of flow nodes that name none (off, numbers, scripted, strict)
    gate_language: str = "auto"  # en, sv or auto: how the validator reads numbers and scripts
    safe_line: str = core.DEFAULT_SAFE_LINE  # said instead of a rejected answer
    retrieve_first: bool = False  # put knowledge-base snippets into each answer's instructions
    retrieve_k: int = 3
    retrieve_wait_ms: int = 1500  # after the caller's speech stopped, wait this long for its transcript
    voice: str = "alloy"  # the agent's voice (session.update)
    filler_after_ms: int = 1500  # a tool still running this long: its filler line is said (once)
    confirm_timeout_ms: int = 8000  # no yes this long after a confirmation prompt played: the action is dropped
    confirm_languages: tuple[str, ...] = ("en", "sv")  # how a caller's yes or no is read
    dedupe_ms: int = DEFAULT_DEDUPE_MS  # a write's (or confirmed action's) success stands this long: not run twice
    # The failure policy (the agent's [failure]): responses the vendor failed in a row (errors, rate limits,
    # failed responses, unanswered requests), or this long without a model socket, end the call with the
    # shipped apology, then a transfer (failure_transfer, when there is a target) or a hang-up.
    failure_after_failures: int = 5
    failure_after_ms: int = 10_000
    failure_transfer: bool = True
    vendor_retry_ms: int = 500  # a request the vendor failed is asked again after this (doubling per failure)
    vendor_silent_ms: int = 1000  # a response asked for or coming, and no event from the vendor this long: hold line
    hold_every_ms: int = 3000  # the caller still waits this long after the hold line: it is said again

    def failure_policy(self) -> FailurePolicy:
        return FailurePolicy(after_failures=self.failure_after_failures, after_ms=self.failure_after_ms,
                             vendor_retry_ms=self.vendor_retry_ms, silent_ms=self.vendor_silent_ms,
                             hold_every_ms=self.hold_every_ms)

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> ControllerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in known}
        return cls(**values)


TURN_DETECTIONS = ("server_vad", "semantic_vad")
EAGERNESS = ("low", "medium", "high", "auto")


def turn_detection(cfg: ControllerConfig) -> dict:
    """The session's turn_detection: the vendor detects speech and its end, but never answers or cuts on its
    own (the controller takes the turns)."""
    if cfg.turn_detection == "semantic_vad":
        return {"type": "semantic_vad", "eagerness": cfg.vad_eagerness, "create_response": False,
                "interrupt_response": False}
    return {"type": "server_vad", "silence_duration_ms": cfg.vad_silence_duration_ms,
            "prefix_padding_ms": cfg.vad_prefix_padding_ms, "create_response": False, "interrupt_response": False}


# --- internal state -----------------------------------------------------------------------------------
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
    text_chars: int = 0  # text channel: characters of text the model wrote for it


@dataclasses.dataclass(slots=True)
class RunningTool:
    call_id: str
    plan: flows.ToolPlan
    key: str
    started_ns: int
    filler_asked: bool = False


@dataclasses.dataclass(slots=True)
class ControllerStats:
    requests_sent: int = 0
    requests_dropped: int = 0
    responses_rejected: int = 0
    bargeins: int = 0
    bargein_latency_ms: list[int] = dataclasses.field(default_factory=list)  # speech start -> decision
    holds: int = 0
    false_interruptions: int = 0  # holds that ended in a resume: no words (a cough), or ...
    backchannels: int = 0  # ... a backchannel said over the agent
    turns_reopened: int = 0  # a noise or backchannel verdict overturned by later words
    watchdog_fires: int = 0
    model_lost: int = 0  # the model socket closed or could not be opened
    vendor_failures: int = 0  # responses the vendor failed (errors, rate limits, failed response.done)
    hold_lines: int = 0  # the shipped hold line asked of the pacer
    failure_policy: int = 0  # the call ended by the failure policy (apology, then transfer or hang-up)
    stalls: int = 0
    retries: int = 0
    checkins: int = 0
    tool_calls: int = 0
    debounce_flushes: int = 0
    dtmf: int = 0
    transfers_cancelled: int = 0
    unheard_cancels: int = 0
    gate_rejections: int = 0
    safe_lines: int = 0
    retrievals: int = 0
    retrievals_empty: int = 0
    tools_run: int = 0  # RunTool actions: tools started
    tool_results: int = 0
    tool_errors: int = 0  # results that were errors (timeout, 4xx, 5xx, non-JSON, ...)
    tool_results_ignored: int = 0  # results of no running tool (the call moved on)
    duplicate_writes_suppressed: int = 0  # the same write within the window: answered without running it
    fillers: int = 0
    transitions: int = 0
    actions_proposed: int = 0  # confirmation prompts asked for
    actions_confirmed: int = 0
    actions_declined: int = 0
    actions_timed_out: int = 0
    end_reason: str = ""


def step_policy(step: flows.Step, default_policy: str) -> str:
    """The release policy a flow step's response is judged by: its own, else the call's."""
    policy = getattr(step, "policy", "") or default_policy
    if policy not in GATE_POLICIES:
        policy = "strict"  # an unknown name must not open the gate
    if isinstance(step, flows.Answer) and policy in ("scripted", "strict"):
        return "numbers"  # an answer has no script: judged on its numbers (and forbidden phrases)
    return policy


def step_gate(step: flows.Step, default_policy: str, language: str, facts: str = "") -> core.GateSpec:
    """How the response that says (a Say) or answers in (an Answer) a flow step is judged: its policy, the
    script a scripted line must follow, its forbidden phrases, and the facts an answer may take numbers from.
    One rule for every driver that speaks a flow (the controller; voicecore/gemini/driver.py)."""
    policy = step_policy(step, default_policy)
    script = step.text if isinstance(step, flows.Say) and policy in ("scripted", "strict") else ""
    return core.GateSpec(policy, script, "\n".join(getattr(step, "forbidden", ())), language,
                         facts if isinstance(step, flows.Answer) else "")


class CallController:
    """One call's turn-taking. Feed it inputs in time order; apply every returned action in order.
    A call driver (voicecore/call/driver.py), like the spine's."""

    control = CONTROL
    wants_ticks = True  # timers, rolling approvals and playout progress: on_tick every shell loop (but see quiet)

    def __init__(self, call_sid: str, flow: flows.Flow | None = None, config: ControllerConfig | None = None,
                 naming: str = "ga", first_tag: int = 1, audio_format: str = "pcmu", modality: str = "audio") -> None:
        # audio_format: the law of the call's frames (ModelCallCore's): "pcma" for an A-law stream passed through.
        # modality "text": the text channel (on_caller_text in, text deltas out): a caller's message is a whole
        # turn, and a reply is "played" once it is written (and, gated, approved whole).
        if modality not in ("audio", "text"):
            raise ValueError(f"modality must be 'audio' or 'text', not {modality!r}")
        self.modality = modality
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
            audio_format=audio_format, modality=modality,
        )
        self.stats = ControllerStats()
        self.playout = IDLE_PLAYOUT
        self.now_ns = 0
        self.started = False
        self.ended = False
        self.next_req_id = 1
        self.queued: Request | None = None
        self.inflight: Request | None = None
        self.inflight_sent_ns = 0
        self.active: Active | None = None
        self.by_tag: dict[int, Active] = {}
        self.rejected: set[str] = set()
        self.retries: dict[str, int] = {}
        self.stall_count: dict[str, int] = {}
        self.turns = CallerTurns(self.config)  # the caller's utterances and their verdicts (turns.py)
        self.caller_speaking = False
        self.debounce = PostToolDebounce(self.config.debounce_quiet_ms, self.config.debounce_cap_ms)  # tools.py
        self.held_tag = 0
        self.approved: dict[int, int] = {}  # gated tags: the watermark released to the pacer
        self.gate_approved: dict[int, int] = {}  # gated tags: the validator's watermark
        self.endings = Endings(self.config, self.stats)  # the caller's silence and the terminal prompt (endings.py)
        self.failures = 0  # consecutive requests the model never answered
        self.tools_running: dict[str, RunningTool] = {}  # call_id -> the tool started for it
        self.pending_action: PendingAction | None = None
        self.writes = WriteLedger(self.config.dedupe_ms)  # writes done, by idempotency key (tools.py)
        self.facts = ""  # the last tool result, for the answer that follows it
        self.conversation = Conversation()  # what the model holds: given back on reconnect, reset by a flow (context.py)
        self.spell = FailureSpell(self.config.failure_policy())  # the model's failures (voicecore/call/failures.py)

    def record_header(self) -> dict:
        """What a record's header needs to rebuild this controller (voicecore/call/record.py)."""
        header = {"control": CONTROL, "call_sid": self.call_sid, "naming": self.naming, "first_tag": self.first_tag,
                  "flow": self.flow.name, "flow_args": self.flow.record_args(), "config": self.config.to_dict()}
        if self.audio_format != "pcmu":  # a mu-law call's header is as it always was
            header["audio_format"] = self.audio_format
        if self.modality != "audio":
            header["modality"] = self.modality
        return header

    # ======================================================================================= inputs
    def start(self, now_ns: int, opening: str = "") -> list[Action]:
        """The call's media started and the model socket is open: configure the session, greet. ``opening``: how
        the flow opens instead of its greeting (voicecore/agent/flow.py: a voicemail's message)."""
        self.now_ns = now_ns
        self.started = True
        self.endings.not_silent(now_ns)
        out: list[Action] = list(self.core.on_open())
        self._enqueue(self.flow.start(opening) if opening else self.flow.start(), "flow", out)
        self._pump(out)
        return out

    def resume(self, now_ns: int, cut_off: bool = False, restored: dict | None = None) -> list[Action]:
        """A model worker took over this live call and has no record of it to rebuild from (records off):
        configure the session, and do not start the call over (the caller heard the greeting already).
        ``cut_off``: the dead worker was in the middle of an answer, which the caller will not hear the end
        of: the flow's fallback line asks them to say it again (the new session knows nothing of it).
        ``restored``: the call was re-attached on this node after its gateway died on another, and this is its
        state as that node's worker last wrote it to the store (voicecore/call/restore.py): the conversation,
        flow node, pending confirmation and writes are set back, the new session is configured for that node
        and given the conversation, and an answer cut off or words left unanswered get the ``reconnect`` line."""
        self.now_ns = now_ns
        self.started = True
        self.endings.not_silent(now_ns)
        self.flow.start()  # the flow stands at its start; its first prompt was said by the worker before
        if restored is not None:
            say_reconnect = call_restore.restore(self, restored, now_ns)
            session = self.flow.session()
            self.core.instructions, self.core.tools = session.instructions, list(session.tools)
            out: list[Action] = list(self.core.on_open())
            out.extend(self.conversation.given_back())  # the new session starts empty
            if say_reconnect or cut_off:
                self._enqueue(self.flow.line("reconnect"), "reconnect", out)
            self._step(out)
            return out
        out = list(self.core.on_open())
        if cut_off:
            self._enqueue(self.flow.line("fallback"), "fallback", out)
        self._step(out)
        return out

    def call_state_key(self) -> tuple:
        """Changes whenever ``call_state`` would (voicecore/call/restore.py)."""
        return call_restore.state_key(self)

    def call_state(self) -> dict:
        """The call's state as another node needs it to carry the call on (voicecore/call/restore.py)."""
        return call_restore.snapshot(self, self.now_ns)

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
        if isinstance(event, rt.ResponseCreated):
            self._on_response_created(event, out)
        elif isinstance(event, rt.SpeechStarted):
            self._on_speech_started(event, out)
        elif isinstance(event, rt.SpeechStopped):
            self._on_speech_stopped(event, out)
        elif isinstance(event, rt.InputTranscriptionCompleted):
            if event.transcript.strip():
                self.conversation.said("user", event.transcript.strip())
            self._on_words(event.item_id, event.transcript, True, out)
        elif isinstance(event, rt.InputTranscriptionDelta):
            self._on_words(event.item_id, event.delta, False, out)
        elif isinstance(event, rt.InputTranscriptionFailed):
            self.turns.transcription_failed(event.item_id)
        elif isinstance(event, rt.OutputItemAdded) and event.response_id in self.rejected:
            out.append(SendToModel(rt.item_delete(event.item_id)))
        elif isinstance(event, rt.FunctionCallArgumentsDone):
            self._on_tool_call(event, out)
        elif isinstance(event, rt.ItemAdded):
            self.conversation.item_added(event.item_id, event.stage)
        elif isinstance(event, rt.ItemDeleted):
            self.conversation.item_deleted(event.item_id)
        elif isinstance(event, rt.AudioDelta):
            active = self.active
            if active is not None and active.response_id == event.response_id:
                active.last_audio_ns = now_ns
                self.spell.served()
        elif isinstance(event, rt.TextDelta):
            active = self.active
            if active is not None and active.response_id == event.response_id:
                active.last_audio_ns = now_ns  # the stall timer: text coming is the reply coming
                active.text_chars += len(event.delta)
                self.spell.served()
        elif isinstance(event, rt.TextDone) and event.text.strip() and event.response_id not in self.rejected:
            self.conversation.said("assistant", event.text.strip())
        elif isinstance(event, rt.RealtimeError) and event.code in VENDOR_FAILURE_CODES:
            self._vendor_failed(event.code, out)
        elif isinstance(event, rt.ResponseDone):
            self._on_response_done(event, out)
        elif isinstance(event, rt.TranscriptDone) and event.transcript.strip() and event.response_id not in self.rejected:
            self.conversation.said("assistant", event.transcript.strip())  # a rejected answer was never said
        if not isinstance(event, rt.ResponseCreated):
            out.extend(self.core.on_event(event, now_ns, playout))
        self._after_core(out)
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

    def on_caller_text(self, text: str, now_ns: int) -> list[Action]:
        """Text channel: one message of the caller, a whole turn (no speech to wait for, no backchannel to
        weigh). It goes to the model as a user item; a reply still being written is cut; a yes or a no
        answers a confirmation asked; anything else is the flow's turn, as words said on a call are."""
        self.now_ns = now_ns
        if self.ended:
            return []
        words = " ".join(text.split())
        out: list[Action] = [SendToModel(rt.conversation_item_create_user_text(words))]
        self.conversation.said("user", words)
        self._caller_active()
        self.endings.caller_turn()
        self._drop_queued()
        if self._barge_in(now_ns, out):
            self.stats.bargein_latency_ms.append(0)
        self._caller_turn(words, None, out)
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
        self._caller_active()
        self._drop_queued()
        self._barge_in(now_ns, out)
        if self.pending_action is not None:
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
        if tag in self.gate_approved:
            if not rejected:
                if approved_frames > self.gate_approved[tag]:
                    self.gate_approved[tag] = approved_frames
                    self._approve(tag, out)
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
                if self._policy(request) in ("numbers", "strict") and question_needs_numbers(request.question):
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
        running = self.tools_running.pop(call_id, None)
        if running is None:
            self.stats.tool_results_ignored += 1
        else:
            self.stats.tool_results += 1
            if ok and running.plan.writes:
                self.writes.remember(running.key, output, self.now_ns)
            if not ok:
                self.stats.tool_errors += 1
            if self.queued is not None and self.queued.source == "filler":
                self.queued = None  # not said yet, and no longer true
                self.stats.requests_dropped += 1
            self._tool_finished(call_id, running.plan, ok, output, out)
        self._step(out)
        return out

    def on_tones(self, call_id: str, digits: str, now_ns: int) -> list[Action]:
        """The running tool ``call_id`` (``send_dtmf``) presses ``digits`` as in-band tones: the core writes them
        under a tag of its own once no response is producing audio (ModelCallCore.play_tones). They are agent
        audio the caller may hear like any: a barge-in cuts them; the tool's result follows once they played."""
        self.now_ns = now_ns
        if self.ended or call_id not in self.tools_running:
            return []
        return self.core.play_tones(call_id, digits)

    def reopen(self, now_ns: int, reattached: bool = False) -> list[Action]:
        """The model socket reconnected: configure the new session (no greeting). The old session's
        response is gone with it: a request it never answered is asked again, and a response cut off
        mid-audio is handled as a stall (cancelled where audible, retried once). ``reattached``: the call is
        on a new stream after its gateway died: nothing written for the old one plays any more, and an answer
        it cut off is dropped for the agent's ``reconnect`` line."""
        self.now_ns = now_ns
        if self.ended:
            return []
        self.spell.reopened(now_ns)
        out: list[Action] = list(self.core.on_open())
        out.extend(self.conversation.given_back())  # the new session starts empty
        if self.inflight is not None:
            request, self.inflight = self.inflight, None
            if self.queued is None:
                self.queued = request
        active = self.active
        if reattached:
            self._reattached(now_ns, out)
        elif active is not None and not active.done and not active.cancelled_ns:
            self._on_stall(active, out)
        self._step(out)
        return out

    def _reattached(self, now_ns: int, out: list[Action]) -> None:
        """The call is on a new stream and a new session after its gateway died. What was written for the old
        stream never plays; what the caller was saying went with the old session (the new one never hears its
        end). An answer cut off, or words of the caller's that were never answered, get the agent's
        ``reconnect`` line (unless a request the old session never answered is asked again anyway)."""
        self.core.stream_replaced()
        active = self.active
        mid_answer = active is not None and not active.settled and not active.cancelled_ns
        if active is not None and mid_answer:
            active.cancelled_ns = now_ns  # the old session that made it is closed: no cancel to send
            active.settled = True
            self.endings.cut(active)
            self.active = None  # no response.done will come for it: nothing to wait for
        words_lost = self.caller_speaking or self.turns.any_open
        self.caller_speaking = False
        for utterance in self.turns.utterances:
            if utterance.open:  # never judged or answered now: its end and its words are the old session's
                if utterance.verdict == "turn":
                    utterance.turn_taken = True
                else:
                    utterance.verdict = "noise"
        if (mid_answer or words_lost) and self.queued is None:
            self._enqueue(self.flow.line("reconnect"), "reconnect", out)

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

    @property
    def quiet(self) -> bool:
        """Only coarse timers can act before the next input (the silence check-in, a call's end after its last
        line, the failure policy's pauses): the session has started, nobody speaks, no caller's words wait for
        a verdict, nothing is asked, retrieved, coming, running, awaiting confirmation, held or audible, and
        the newest response has played out or was cancelled. The shell then ticks every
        voicecore.call.driver.QUIET_TICK_MS instead of every loop; caller audio, model events and verdicts are
        inputs, handled at once, and the loop after one ticks as usual if it made the call busy."""
        if not self.started or self.ended:
            return self.ended
        newest = next(reversed(self.by_tag.values()), None)
        return (not self.caller_speaking and self.queued is None and self.inflight is None and self.active is None
                and not self.turns.utterances and not self.tools_running and self.pending_action is None
                and not self.held_tag and not self.debounce.waiting and not self.endings.playing
                and (newest is None or newest.settled or bool(newest.cancelled_ns))
                and self.core.audible(self.playout) is None)

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
        self._finish("caller_hangup", out, CallOver("caller_hangup"))
        return out

    # ================================================================================ model events
    def _on_response_created(self, event: rt.ResponseCreated, out: list[Action]) -> None:
        req_tag = (event.metadata or {}).get("vc_req")
        request = self.inflight
        solicited = request is not None and (req_tag is None or req_tag == str(request.req_id))
        # The caller took the floor after it was asked for: it answers what they no longer wait for.
        overtaken = any(u.verdict == "turn" and not u.turn_taken for u in self.turns.utterances)
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
        self.core.gate_next_response(self._gate_spec(request))
        actions = self.core.on_event(event, self.now_ns, self.playout)
        active = Active(event.response_id, request, self.now_ns, self.now_ns)
        for action in actions:
            if isinstance(action, OpenTag):
                active.tag = action.tag
        self.active = active
        self.by_tag[active.tag] = active
        if len(self.by_tag) > 32:
            for tag in list(self.by_tag)[:-32]:
                del self.by_tag[tag]
        self.failures = 0
        if request.terminal:
            self.endings.ending_created(active)
        out.extend(actions)
        undecided = [u for u in self.turns.utterances if u.verdict == ""]
        if self.caller_speaking or undecided:
            # Asked for before the caller began: it waits, held, for their words, like audio they talked over.
            for u in undecided:
                u.interrupting = True
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
        produced = active.text_chars if self.modality == "text" else frames
        if (not active.cancelled_ns and produced == 0 and not active.had_tool_call
                and isinstance(active.request.step, flows.Say)):
            # A scripted prompt that produced no audio (failed, incomplete): the caller heard nothing.
            self._retry(active.request, "empty", out)

    def _on_tool_call(self, event: rt.FunctionCallArgumentsDone, out: list[Action]) -> None:
        self.stats.tool_calls += 1
        if self.active is not None and self.active.response_id == event.response_id:
            self.active.had_tool_call = True
        if self.debounce.waiting:
            self._flush_debounce(out)  # another tool call sends the debounced fragments first
        decision = self.flow.on_tool_call(event.name or "", event.arguments)
        if isinstance(decision, flows.ToolPlan):
            if decision.confirm is not None and not self._done_recently(decision):
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
            if transition.context in ("reset", "task"):
                self.conversation.schedule(transition)
        self.facts = outcome.facts
        if outcome.then is not None:
            self._enqueue(outcome.then, "flow", out)
        elif outcome.speak:
            # the state changed and the agent would speak: first wait until the caller is quiet (the post-tool
        # debounce).
            self.debounce.start(self.now_ns)

    def _run_tool(self, call_id: str, plan: flows.ToolPlan, out: list[Action]) -> None:
        key = agent_actions.idempotency_key(self.call_sid, plan.name, plan.arguments)
        done = self.writes.recent(key, self.now_ns)
        if plan.writes and done is not None:
            # The same write (or a repeated yes) within the window: its first result stands, nothing runs.
            self.stats.duplicate_writes_suppressed += 1
            self._tool_finished(call_id, plan, True, done, out)
            return
        self.stats.tools_run += 1
        self.tools_running[call_id] = RunningTool(call_id, plan, key, self.now_ns)
        out.append(RunTool(call_id, plan.name, plan.arguments, key))

    def _done_recently(self, plan: flows.ToolPlan) -> bool:
        """The same action ran within the window (the model asks again after it was done): it is not
        proposed again, its first result stands."""
        return self.writes.recent(agent_actions.idempotency_key(self.call_sid, plan.name, plan.arguments), self.now_ns) is not None

    def _tool_finished(self, call_id: str, plan: flows.ToolPlan, ok: bool, output: str, out: list[Action]) -> None:
        self._apply_outcome(call_id, self.flow.on_tool_result(plan.name, plan.arguments, ok, output), out)

    # --- actions with confirmation (docs/explanation/agents.md#actions-with-confirmation) -----------------
    def _propose_action(self, call_id: str, plan: flows.ToolPlan, out: list[Action]) -> None:
        if self.pending_action is not None:
            self._drop_action("superseded", None, out)  # the model proposed another: only the newest stands
        assert plan.confirm is not None
        self.pending_action = PendingAction(call_id, plan, self.now_ns)
        self.stats.actions_proposed += 1
        self._enqueue(plan.confirm, "confirm", out)

    def _confirm_action(self, out: list[Action]) -> None:
        pending, self.pending_action = self.pending_action, None
        assert pending is not None
        self.stats.actions_confirmed += 1
        self._run_tool(pending.call_id, pending.plan, out)

    def _drop_action(self, reason: str, line: str | None, out: list[Action]) -> None:
        """The caller said no, said something else, or nothing: the action is not run; the model is told."""
        pending, self.pending_action = self.pending_action, None
        assert pending is not None
        if reason == "no_confirmation":
            self.stats.actions_timed_out += 1
        else:
            self.stats.actions_declined += 1
        out.append(SendToModel(rt.function_call_output(pending.call_id, json.dumps({"status": "not_done", "reason": reason}))))
        if line is not None:
            self._enqueue(self.flow.line(line), "flow", out)

    def _check_action_timeout(self, out: list[Action]) -> None:
        pending = self.pending_action
        if pending is None or self.caller_speaking:
            return
        if any(u.open and u.started_ns > pending.asked_ns for u in self.turns.utterances):
            return  # the caller is answering; their words decide
        start = pending.played_ns or pending.asked_ns + CONFIRM_PROMPT_GRACE_MS * MS
        if (self.now_ns - start) // MS >= self.config.confirm_timeout_ms:
            self._drop_action("no_confirmation", "confirm_timeout", out)

    def _check_fillers(self, out: list[Action]) -> None:
        for running in self.tools_running.values():
            if running.filler_asked or running.plan.filler is None:
                continue
            if (self.now_ns - running.started_ns) // MS < self.config.filler_after_ms:
                continue
            running.filler_asked = True
            if self.queued is None and not self.endings.playing:
                self.stats.fillers += 1
                self._enqueue(running.plan.filler, "filler", out)

    # ============================================================================== caller speech
    # Who has the floor is decided by what the caller said (voicecore/call/backchannels.py): a VAD edge only
    # holds what the agent is saying (HoldTag: the carrier plays out its lead, then gets a clear); the words
    # then resume it (a backchannel, a cough) or cut it for good and answer (anything else). A verdict by
    # length alone, taken while no words are known, is re-opened by words that come later.
    def _on_speech_started(self, event: rt.SpeechStarted, out: list[Action]) -> None:
        self.caller_speaking = True
        self._caller_active()
        self.turns.started(event.item_id, self.now_ns, self._agent_has_floor(), event.audio_start_ms)
        self._hold(out)

    def _agent_has_floor(self) -> bool:
        """The agent is speaking or about to: a caller's backchannel now asks for nothing."""
        return (self.core.audible(self.playout) is not None or self.inflight is not None or self.queued is not None
                or bool(self.tools_running) or self.debounce.waiting or self.endings.playing)

    def _hold(self, out: list[Action]) -> None:
        """Stop what the caller may hear from going out while their words are not known."""
        audible = self.core.audible(self.playout)
        if audible is None or not self.config.pause_release or self.held_tag != 0:
            return
        self.held_tag = audible.tag
        self.stats.holds += 1
        out.append(HoldTag(audible.tag, self.approved.get(audible.tag, 0)))

    def _on_speech_stopped(self, event: rt.SpeechStopped, out: list[Action]) -> None:
        self.caller_speaking = False
        self._caller_active()
        self.turns.stopped(event.item_id, self.now_ns, event.audio_end_ms)

    def _on_words(self, item_id: str, text: str, completed: bool, out: list[Action]) -> None:
        self.turns.heard(item_id, text, completed, self.now_ns)
        self.debounce.heard(text, completed, self.now_ns)
        if text.strip():
            self._caller_active()

    def _verdict(self, u: Utterance) -> str:
        confirmation = ""
        if self.pending_action is not None and u.words.strip():
            confirmation = agent_actions.confirmation_answer(u.words, self.config.confirm_languages)
        return self.turns.verdict(u, self.now_ns, confirmation)

    def _evaluate_utterances(self, out: list[Action]) -> None:
        for u in self.turns.utterances:
            if u.verdict == "turn":
                continue  # final: the agent was cut for it
            verdict = self._verdict(u)
            if verdict == u.verdict:
                continue
            previous, u.verdict = u.verdict, verdict
            if verdict == "turn":
                if previous:
                    self.stats.turns_reopened += 1
                self._turn_detected(u, out)
            elif verdict and u.interrupting and not previous:
                if verdict == "backchannel":
                    self.stats.backchannels += 1
                else:
                    self.stats.false_interruptions += 1
        if self.held_tag and not self.caller_speaking and not self.turns.any_open:
            self._resume(out)  # every utterance since the hold asked for nothing: the agent carries on
        self._take_turn(out)
        self.turns.forget_settled()

    def _turn_detected(self, u: Utterance, out: list[Action]) -> None:
        """The caller took the floor: the agent stops for good, whatever it was about to say."""
        self._caller_active()
        self.endings.caller_turn()
        self._drop_queued()
        if self._barge_in(self.now_ns, out):
            self.stats.bargein_latency_ms.append((self.now_ns - u.started_ns) // MS)

    def _take_turn(self, out: list[Action]) -> None:
        """Answer the caller once they stopped and every utterance of their turn is judged and heard whole."""
        pending = [u for u in self.turns.utterances if u.verdict == "turn" and not u.turn_taken]
        if self.pending_action is not None and pending and self.turns.ready(pending[0], self.now_ns):
            # A yes or a no to the confirmation asked is read on its own, at once, even if the caller goes
            # on talking ("Ja, gärna." then a question): what follows is the next turn, not part of the answer.
            answer = agent_actions.confirmation_answer(pending[0].words, self.config.confirm_languages)
            if answer:
                pending.pop(0).turn_taken = True
                self._answer_confirmation(answer, out)
        if self.caller_speaking:
            return
        if not pending or any(u.verdict == "" for u in self.turns.utterances) or not all(self.turns.ready(u, self.now_ns) for u in pending):
            return
        for u in pending:
            u.turn_taken = True
        words = " ".join(u.words.strip() for u in pending if u.words.strip())
        self._caller_turn(words, pending[-1], out)

    def _answer_confirmation(self, answer: str, out: list[Action]) -> None:
        if answer == "yes":
            self._confirm_action(out)
        else:
            self._drop_action("caller_declined", "declined", out)

    def _caller_turn(self, words: str, u: Utterance | None, out: list[Action]) -> None:
        if self.pending_action is not None:
            answer = agent_actions.confirmation_answer(words, self.config.confirm_languages)
            if answer:
                self._answer_confirmation(answer, out)
                return
            self._drop_action("caller_moved_on", None, out)  # then the turn is answered as any other
        heard = find_opt_out(words) if self.config.opt_out else None
        if heard is not None:
            # The callee asked not to be called again: a polite goodbye, then the call ends. The goodbye's
            # prompt id is what the call store reads to put the number on the do-not-call list.
            self._enqueue(flows.Say(OPT_OUT_PROMPT, opt_out_goodbye(heard.language), terminal=True, policy="off"),
                          "opt_out", out)
            return
        if self.debounce.waiting:
            return  # gathered into the combined turn
        self._enqueue(self.flow.on_user_turn(words), "flow", out, question=words)
        if self.queued is not None and isinstance(self.queued.step, flows.Answer):
            self.queued.utterance = u

    def _caller_active(self) -> None:
        self.endings.not_silent(self.now_ns)

    # ================================================================================ barge-in
    def _barge_in(self, now_ns: int, out: list[Action]) -> bool:
        """Cancel what the caller may hear (core mechanism: docs/explanation/protocols.md#c5). True if audio
        was cut."""
        audible = self.core.audible(self.playout)
        actions = self.core.barge_in(now_ns, self.playout) if audible is not None else []
        self.held_tag = 0
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

    def _resume(self, out: list[Action]) -> None:
        tag = self.held_tag
        self.held_tag = 0
        if tag:
            out.append(ResumeTag(tag))

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

    # ================================================================================ the gate
    def _policy(self, request: Request) -> str:
        return step_policy(request.step, self.config.gate_policy)

    def _gate_spec(self, request: Request) -> core.GateSpec:
        return step_gate(request.step, self.config.gate_policy, self.config.gate_language, request.facts)

    def _on_rejected(self, tag: int, out: list[Action]) -> None:
        actions = self.core.reject(tag, self.now_ns, self.playout)
        self.gate_approved.pop(tag, None)
        if not actions:
            return  # already cancelled (barge-in) or finished with it
        out.extend(actions)
        self.stats.gate_rejections += 1
        if self.held_tag == tag:
            self.held_tag = 0
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
        if self.inflight is not None or self.caller_speaking or self.debounce.waiting:
            return False
        if self.turns.any_open:
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
        out.extend(self.conversation.apply_pending())
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
            return self.core.in_session(grounded_instructions(request.snippets))
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
            self._finish_ending(step, f"{why}_gave_up", out)
            return
        if isinstance(request.step, flows.Say):
            self._enqueue(self.flow.after_played(key), "flow", out)
        else:
            self._enqueue(self.flow.line("fallback"), "fallback", out)

    # ================================================================================ the step
    def _after_core(self, out: list[Action]) -> None:
        for action in list(out):
            if isinstance(action, core.OpenGate):
                self.gate_approved[action.tag] = 0  # before its OpenTag below: nothing plays unapproved
                if len(self.gate_approved) > 32:
                    for tag in list(self.gate_approved)[:-32]:
                        del self.gate_approved[tag]
        for action in list(out):
            if isinstance(action, OpenTag) and action.gated:
                self.approved[action.tag] = 0
                if len(self.approved) > 32:
                    for tag in list(self.approved)[:-32]:
                        del self.approved[tag]

    def _approve(self, tag: int, out: list[Action]) -> None:
        """A gated tag's release follows the validator's verdict (INV-GATE), never past it."""
        target = self.gate_approved.get(tag, 0)
        if target > self.approved.get(tag, 0):
            self.approved[tag] = target
            out.append(ReleaseTag(tag, target))

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
        if self.debounce.due(now, self.caller_speaking):
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

    def _flush_debounce(self, out: list[Action]) -> None:
        combined = self.debounce.take()
        self.stats.debounce_flushes += 1
        step = self.flow.after_tool(combined)
        user_text = combined if (self.config.debounce_send_text and combined) else None
        self._enqueue(step, "debounce", out, user_text=user_text, question=combined, facts=self.facts)
        self.facts = ""

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
        if self.modality == "text":
            # written whole, and a gated reply approved whole: the caller has it (nothing plays out)
            return response.finished and (not response.gated or self.approved.get(active.tag, 0) >= APPROVE_ALL)
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
            if active.request.source == "confirm" and self.pending_action is not None:
                self.pending_action.played_ns = self.now_ns
            if self.endings.played(active, self.now_ns):
                pass  # its grace runs; then the call ends (_check_ending)
            elif isinstance(active.request.step, flows.Say):
                self._enqueue(self.flow.after_played(active.request.prompt_id), "flow", out)

    def _idle(self) -> bool:
        return (not self.caller_speaking and self.queued is None and self.inflight is None and self.active is None
                and not self.debounce.waiting and not self.endings.playing and self.core.audible(self.playout) is None
                and not self.turns.any_open)

    def _check_silence(self, out: list[Action]) -> None:
        wanted = self.endings.silence(self.now_ns, self._idle())  # only silence while nobody speaks and nothing is pending counts
        if wanted == CHECKIN:
            self._enqueue(self.flow.line("checkin"), "checkin", out)
        elif wanted == GOODBYE:
            self._enqueue(self.flow.line("goodbye"), "silence", out)

    def _check_ending(self, out: list[Action]) -> None:
        step = self.endings.due(self.now_ns)
        if step is not None:
            self._finish_ending(step, "completed", out)

    def _finish_ending(self, step: flows.Say, reason: str, out: list[Action]) -> None:
        reason, final = ending_action(step, reason)
        self._finish(reason, out, final)

    def _finish(self, reason: str, out: list[Action], final: Action) -> None:
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
                                     caller_speaking=self.caller_speaking)
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
            self._finish(f"transfer_{reason}", out, Transfer(target, after_line=True))
        else:
            out.append(PlayFallback("apology_hangup"))
            self._finish(reason, out, HangUp(reason, after_line=True))

    # ================================================================================ reporting
    def statistics(self) -> dict:
        return {**dataclasses.asdict(self.stats), **{f"core_{k}": v for k, v in dataclasses.asdict(self.core.stats).items()}}


def grounded_instructions(snippets: Sequence[dict]) -> str:
    """Knowledge-base snippets (``{"text", "file"}``) as instructions: an answer's (retrieve-first), or a Gemini
    session's whole knowledge (voicecore/gemini/driver.py ``driver_for_agent``)."""
    facts = "\n".join(f"- {s.get('text', '')} ({s.get('file', '')})" for s in snippets)
    return ("Answer the caller briefly, in the caller's language. Say a price, date, time, amount or phone "
            "number only as it appears in these facts; if they do not hold it, say you cannot verify it.\n"
            f"Facts:\n{facts}")


__all__ = [
    "Action", "CallController", "CallOver", "ControllerConfig", "HangUp", "HoldTag", "PlayFallback", "ReleaseTag", "ResumeTag",
    "Retrieve", "RunTool", "Transfer",
    "SendToModel", "OpenTag", "WriteFrames", "EndTag", "CancelTag", "Playout", "action_to_dict",
]
