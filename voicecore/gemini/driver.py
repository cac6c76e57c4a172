"""A call driven by Gemini Live: the model worker's driver for the BidiGenerateContent protocol, sans-I/O.

Owns the translation between one call and one Gemini Live session: the ``setup`` it opens with (the agent's
instructions, voice and functions, input and output transcription, automatic activity detection, session
resumption), the caller's audio to the model (8 kHz mu-law -> 16 kHz PCM16), the model's turns back to the
call as tagged responses (24 kHz PCM16 -> 8 kHz mu-law), barge-in, tool calls and the resumption handle a
reconnect continues the session with. Implements the ``Driver`` protocol of voicecore/call/driver.py, so
the model worker, the recorder and the replay drive it as they drive the OpenAI path's drivers.

Which model turn is which response, and which caller utterance which item, is kept by ``GeminiTurns``
(voicecore/gemini/turns.py), which turns the server's messages into the Realtime API's events of the same
conversation; the record reader uses it too, so observers and the call store agree with the driver. The
driver feeds those events to ``ModelCallCore`` (voicecore/call/core.py), the spine's mechanism: every model
turn gets its own tag, its audio is cut into frames and written under it, and a barge-in cancels every live
tag at the played position exactly as on the OpenAI path (the ring and pacer invariants are the core's,
unchanged). The core's client events (OpenAI Realtime text) are not sent: Gemini needs no cancel or
truncate (the server already discarded what it did not send), and a response the core asks for (the gate's
safe line) becomes a ``clientContent`` turn.

The caller takes the floor (``speech_started`` for the core, which cuts every live tag) on the server's
``voiceActivity`` ACTIVITY_START, on ``interrupted``, and, from a server that sends neither while an
earlier answer still plays, on the caller's first words (a server done generating an answer no longer
tracks it). Audio after a cut belongs to the cut turn (late chunks) and is dropped until the next exchange
begins. The driver decides on server events only, never on the content of the caller's audio, so a record
replays to the same actions.

Tool calls run through the same tool path as the turn-taking controller's: the agent's flow decides
(``AgentFlow.on_tool_call``), a tool runs off the call's path (``RunTool``), its result comes back as
``on_tool_result`` and goes to the model as ``toolResponse``.

Flow nodes: a Gemini session cannot change its ``systemInstruction`` or tools after ``setup``, so the setup
declares the functions of every node (the first node's instructions are the system instruction) and the
flow refuses, with an ``unknown_function`` error response, a call to a function its current node does not
offer. Entering a node sends the node's role and task messages as a ``clientContent`` turn with
``turnComplete`` false (context only, so the model does not answer it) before the ``toolResponse`` that
moved the flow; the model then goes on under them. A reconnect resumes with the same ``setup`` (a resumed
session keeps its conversation, the node's messages with it). Context strategies that delete the
conversation cannot be followed: `voicecore check` refuses them (``unsupported_settings``).

The gate: each model turn is judged as the turn-taking controller judges the response it asks for
(``step_gate``): a line the driver asks for with "Say exactly" (the greeting, a node's or a function's line,
a confirmation prompt, the declined and timeout lines) against its script under the prompt's policy, any
other turn as the current node's answer (its policy and forbidden phrases; the numbers a tool's result just
gave are facts it may say). A turn that begins after the caller took a turn is judged as an answer: it may
answer them rather than say the line.

Confirmations: a call of a function that asks the caller first is answered at once with a
``functionResponse`` saying it is not done yet and asking the model to say the confirmation prompt as
written; nothing runs. The caller's transcribed words (``inputTranscription``) or keypad (1 is yes) then
decide, by the rules of the turn-taking controller (``confirmation_answer``): a yes runs the tool, whose
result goes to the model as a ``clientContent`` turn (the call it answered is closed); a no says the
declined line, other words drop the action, and no yes within the agent's confirmation timeout after the
prompt played says the timeout line. The counts are the controller's (``actions_proposed``, ...).

No sockets, no clock: ``now_ns`` comes with every input. The resampling filters are the carrier edge's
(voicecore/carriers/codec.py), so their state lives here, per call and per turn.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import orjson

from voicecore import g711
from voicecore.agent import actions as agent_actions
from voicecore.call import core
from voicecore.call.controller import (ControllerConfig, HangUp, HoldTag, PlayFallback, ResumeTag, RunTool, Transfer,
                                       grounded_instructions, step_gate)
from voicecore.call.failures import HOLD, FailurePolicy, FailureSpell
from voicecore.call.flow import Say, ToolPlan
from voicecore.call.tools import DEFAULT_DEDUPE_MS, WriteLedger
from voicecore.call.turns import CallerTurns
from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.events import ENCODING_L16
from voicecore.gemini import protocol as gp
from voicecore.gemini.turns import GeminiTurns
from voicecore.realtime import events as rt

CONTROL = "gemini"
VENDOR = "gemini"
# How much of the agent's knowledge a session's instructions hold (session_knowledge): about 4,000 tokens, a
# small share of the native-audio models' context window, so the conversation keeps the rest.
KNOWLEDGE_MAX_CHARS = 16_000
# The prebuilt voices of Gemini Live's native-audio models; any other voice name is refused at setup.
VOICES = frozenset({"Puck", "Charon", "Kore", "Fenrir", "Aoede", "Leda", "Orus", "Zephyr"})
# The model a Gemini agent gets when it names the vendor but no model.
DEFAULT_MODEL = "gemini-2.5-flash-native-audio-preview-09-2025"
# A turn the model could not finish because its connection dropped: the caller heard part of it at most.
ASK_AGAIN = ("(The connection dropped while you were answering; the caller did not hear the end of your last "
             "answer. Give that answer again, briefly.)")
ASK_AGAIN_TOOLS = ("(The connection dropped while a function you called was running, and its result was lost. "
                   "Call it again if you still need it, then answer the caller.)")
# After goAway the session moves to a new connection at the first pause (no turn being generated, no tool
# result owed), or, should none come, this long before the server's deadline (half the notice, if shorter).
GO_AWAY_MARGIN_MS = 2_000
_FLUSH_24K = bytes(gp.OUTPUT_SAMPLE_RATE_HZ * 2 * 10 // 1000)  # 10 ms of silence: the resampler's look-ahead


def vendor_of(model: str, vendor: str = "") -> str:
    """The model vendor: ``vendor`` when named, else what the model's name says ("gemini-..." is Google's)."""
    if vendor:
        return vendor
    bare = model.removeprefix("models/")
    return VENDOR if bare.startswith("gemini") else "openai"


def declarations(tools: list[dict] | tuple[dict, ...]) -> list[dict]:
    """The flow's functions (session.update ``tools`` entries) as Gemini ``functionDeclarations``."""
    out = []
    for tool in tools:
        parameters = tool.get("parameters")
        out.append(gp.function_declaration(tool["name"], tool.get("description", ""),
                                           parameters if parameters else None))
    return out


@dataclasses.dataclass(slots=True)
class PendingConfirmation:
    """A function that runs only after the caller's yes: its confirmation prompt asked of the model."""

    call_id: str
    plan: ToolPlan
    asked_ns: int
    response_id: str = ""  # the model turn that says the prompt (the first after the ask)
    played_ns: int = 0  # that turn played out: the timeout runs from here


# A confirmation prompt that never played (cut, lost): its timeout starts this long after it was asked.
CONFIRM_PROMPT_GRACE_MS = 20_000


@dataclasses.dataclass(slots=True)
class GeminiStats:
    """What the driver counts beyond its core's."""

    turns: int = 0
    interrupted: int = 0
    caller_took_floor: int = 0  # a caller utterance began (voiceActivity, interrupted, or words)
    tool_calls: int = 0
    tools_run: int = 0
    duplicate_writes_suppressed: int = 0  # the same write asked again within the window: its first result stood
    tool_calls_cancelled: int = 0
    transitions: int = 0
    actions_proposed: int = 0  # confirmations asked (as the turn-taking controller counts them)
    actions_confirmed: int = 0
    actions_declined: int = 0
    actions_timed_out: int = 0
    go_aways: int = 0
    asked_again: int = 0  # answers a dropped connection cut off, asked for again on the next one
    resumed: int = 0
    handles: int = 0
    malformed: int = 0
    # the turn-taking controller's rule (turn_taking given): what the caller's speech over the agent was
    holds: int = 0  # the agent's audio held at the caller's first sound, until their words decide
    resumes: int = 0  # ... and let go on: every utterance since was a backchannel or noise
    backchannels: int = 0  # utterances over the agent whose words were all backchannel
    false_interruptions: int = 0  # ... that had no words (a cough, a breath)
    turns_by_words: int = 0  # utterances whose words took the floor: the agent cut there
    replies_dropped: int = 0  # model turns that answered only a backchannel or noise: never played
    heard_notes: int = 0  # notes telling the model how much of a cut answer the caller heard


class GeminiDriver:
    """One call's Gemini Live session, from the model worker's side (module docstring)."""

    control = CONTROL
    stats = None  # no turn-taking counters (the shell sums the controller's by name); its own are ``counts``

    def __init__(self, call_sid: str, *, model: str, instructions: str, voice: str | None = None,
                 greeting: str = "", tools: list[dict] | None = None, flow_args: dict | None = None,
                 first_tag: int = 1, greet: bool = True, gate_policy: str = "off",
                 safe_line: str = core.DEFAULT_SAFE_LINE, audio_format: str = "pcmu",
                 failure: dict | None = None, dedupe_ms: int = DEFAULT_DEDUPE_MS,
                 turn_taking: dict | None = None, gate_language: str = "auto", gate_turns: bool = False) -> None:
        # failure: FailurePolicy's fields (the agent's [failure]): the hold line and the apology, as the spine's
        # audio_format: the law of the call's frames ("pcma" for an A-law stream passed through): converted
        # to and from mu-law at the resampler, and the law a turn's short last frame is padded in
        self.call_sid = call_sid
        self.model = model
        self.instructions = instructions
        self.voice = voice if voice in VOICES else None
        self.greeting = greeting
        self.tools = list(tools or [])
        self.flow_args = flow_args
        self.first_tag = first_tag
        self.greet = greet
        self.audio_format = audio_format
        self.core = core.ModelCallCore(call_sid, first_tag=first_tag, greet=False, instructions=instructions,
                                       gate_policy=gate_policy, safe_line=safe_line, audio_format=audio_format)
        self._header_args = {"model": model, "instructions": instructions, "voice": voice, "greeting": greeting,
                             "tools": self.tools, "flow_args": flow_args, "greet": greet,
                             "gate_policy": gate_policy, "safe_line": safe_line}
        if audio_format != "pcmu":  # a mu-law call's header names none
            self._header_args["audio_format"] = audio_format
        if dedupe_ms != DEFAULT_DEDUPE_MS:  # a record made before the ledger (or with the default) names none
            self._header_args["dedupe_ms"] = dedupe_ms
        # gate_turns: the agent's gate, per model turn (as the controller gates each response it asks for): a line
        # asked "Say exactly" is judged against its script under the prompt's policy, any other turn as the
        # current node's answer, grounded in the last tool result. A record made before it names neither, and
        # replays as it was made: every turn under gate_policy alone.
        self.gate_turns = gate_turns
        self.gate_language = gate_language
        if gate_turns:
            self._header_args["gate_turns"] = True
        if gate_language != "auto":
            self._header_args["gate_language"] = gate_language
        self.scripted_next: Say | None = None  # a line asked of the model: its next turn is judged against it
        # ... once the ask is on its way: a turn that begins in the server message the driver is reading when it
        # asks was generated before the server had the ask (the model's own answer to the caller's "no" that the
        # declined line then cuts), so it is judged as an answer
        self.scripted_armed = False
        self.reading = False  # within on_model_event
        self.facts_next = ""  # a tool's result the next answer may take numbers from
        # writes done, by idempotency key (voicecore/call/tools.py, as the turn-taking controller keeps them): the
        # same write (or a repeated yes) within the window gets its first result, and nothing runs twice
        self.writes = WriteLedger(dedupe_ms)
        self.write_keys: dict[str, str] = {}  # call or run id of a write running -> its idempotency key
        self.policy = FailurePolicy(**(failure or {}))
        self._header_args["failure"] = self.policy.to_dict()
        self.spell = FailureSpell(self.policy)
        self.flow = None
        if flow_args is not None:
            from voicecore.agent.flow import AgentFlow  # the agent's flow only where it has one
            self.flow = AgentFlow(**flow_args)
        self.counts = GeminiStats()
        self.inbound = EdgeTranscoder(ENCODING_L16, gp.INPUT_SAMPLE_RATE_HZ)  # from_ulaw: 8 kHz -> 16 kHz
        self.handle: str | None = None
        self.started = False
        self.ended = False
        self.configured = False  # setupComplete seen on this connection
        self.after_setup: list[str] = []  # client messages that wait for setupComplete
        self.go_away = False  # goAway received on this connection
        self.go_away_deadline_ns = 0
        self.exchange = GeminiTurns()  # which model turn is which response, which utterance which item
        self.transcoders: dict[str, EdgeTranscoder] = {}  # per model turn in progress: 24 kHz -> 8 kHz
        self.tool_calls: dict[str, tuple[str, str]] = {}  # id -> (name, arguments): a result owed to the model
        self.next_line: Say | None = None  # a terminal line asked of the model: the next turn ends the call
        self.lines: dict[str, Say] = {}  # model turn -> the terminal line it says
        self.hang_up_after: tuple[str, Say] | None = None  # (turn, line): the call ends once it has played
        self.cut_by_drop = False  # the connection dropped mid-answer (or owing a tool result): the caller waits
        self.tools_owed_at_loss = False
        self.pending: PendingConfirmation | None = None
        self.confirmed_runs: dict[str, tuple[str, str]] = {}  # run id -> (name, arguments): confirmed, running
        self._node_notes: list[str] = []  # clientContent of a node entered, sent before the response that moved there
        # turn_taking: the turn-taking controller's settings of the caller's floor (ControllerConfig's fields:
        # languages, backchannels, words_settle_ms, ...). Given: the session asks for activityHandling
        # NO_INTERRUPTION and the caller's words decide (the "Turn-taking by words" section of the docstring);
        # None: the server's activity detection cuts the agent on every sound.
        self.floor: CallerTurns | None = None
        if turn_taking is not None:
            self._header_args["turn_taking"] = dict(turn_taking)
            self.floor = CallerTurns(ControllerConfig(**{k: tuple(v) if isinstance(v, list) else v
                                                         for k, v in turn_taking.items()}))
            self.exchange.server_interrupts = False
        self.held_tag = 0  # the tag held at the caller's first sound (HoldTag), until their words decide
        self.reply_owed = True  # something asked the model for an answer since its last turn began
        self.backchannel_since_answer = False  # the caller only backchannelled over the agent since then
        self.dropped: set[str] = set()  # model turns that answered a backchannel: never played
        self.said: dict[str, str] = {}  # the newest turns' transcripts, for the note of what a cut left heard
        self.heard_note: str = ""  # that note, sent once the session is idle
        # a tick that changed what later inputs decide though it gave no action (a confirmation prompt found
        # played, a caller's utterance judged): the recorder keeps that tick, so a replay sees it too
        self.tick_changed = False

    quiet = False  # wants_ticks says when it is ticked at all

    @property
    def idle_ticks_change_nothing(self) -> bool:
        """The last tick, if it gave no action, left the driver as it was (voicecore/call/record.py drops it)."""
        return not self.tick_changed

    # --- Driver protocol: the session -----------------------------------------------------------------
    @property
    def wants_ticks(self) -> bool:
        """Timers only while a line is to end the call, the model fails or is generating: a quiet call is never ticked."""
        return not self.ended and (self.hang_up_after is not None or self.spell.failing or self._generating()
                                   or not self.configured or self.pending is not None
                                   or bool(self.heard_note)
                                   or (self.floor is not None and (self.held_tag != 0 or self.floor.any_open)))

    def record_header(self) -> dict[str, Any]:
        return {"control": CONTROL, "call_sid": self.call_sid, "first_tag": self.first_tag,
                "args": dict(self._header_args)}

    def setup_message(self) -> str:
        return gp.setup(self.model, self.instructions, self.voice, functions=declarations(self.tools),
                        resumption_handle=self.handle, interrupt_on_activity=self.floor is None)

    def start(self, now_ns: int, opening: str = "") -> list[core.Action]:
        self.started = True  # no flow here: an ``opening`` (a voicemail's message) is the turns controller's
        self.spell.reopened(now_ns)
        out = self._open()
        if self.greet:
            line = f'Say exactly: "{self.greeting}"' if self.greeting else "Greet the caller."
            self.after_setup.append(gp.client_content([("user", line)]))
            if self.greeting and self.flow is not None:
                step = self.flow.start()
                if isinstance(step, Say) and step.text == self.greeting:
                    self._ask_line(step)
        return out

    def resume(self, now_ns: int, cut_off: bool = False, restored: dict | None = None) -> list[core.Action]:
        # restored: never given (this driver writes no call state for another node: a call re-attached there
        # starts its Gemini session afresh; docs/how-to/drain.md)
        out = self.reopen(now_ns)
        if cut_off and not self.ended:
            out.append(PlayFallback("hold"))
        return out

    def reopen(self, now_ns: int, reattached: bool = False) -> list[core.Action]:
        """A new connection: ``setup`` with the resumption handle (the session goes on where it stood; the
        server keeps the conversation), or a fresh session when there is none. ``reattached``: the call is on
        a new stream after its gateway died: nothing written for the old stream plays any more."""
        if reattached:
            self.core.stream_replaced()
        self.started = True
        if self.handle is not None:
            self.counts.resumed += 1
        self.spell.reopened(now_ns)
        tools_lost = self.tools_owed_at_loss
        out = self._cut_off(now_ns) + self._open()
        if self.cut_by_drop and not self.ended:
            # the model is back, and the caller is owed the answer the drop cut off (or one that waited on a tool
            # result no one could take): asked for again once the new connection is set up, as the turn-taking
            # controller asks a cut request again after a reconnect
            self.counts.asked_again += 1
            self.after_setup.append(gp.client_content([("user", ASK_AGAIN_TOOLS if tools_lost else ASK_AGAIN)]))
        self.cut_by_drop = False
        return out

    def _open(self) -> list[core.Action]:
        self.configured = False
        self.go_away = False
        self.go_away_deadline_ns = 0
        self.after_setup = []
        return [core.SendToModel(self.setup_message())]

    def _cut_off(self, now_ns: int) -> list[core.Action]:
        """The connection is gone mid-turn: what came of the turn plays on (its tag ends where it is), the rest
        never will; tool calls of the old connection are owed to no one."""
        self.tools_owed_at_loss = bool(self.tool_calls)
        self.tool_calls.clear()
        out: list[core.Action] = []
        speaking = self.exchange.caller_item
        for event in self.exchange.lost():
            out += self._on_turn_event(event, now_ns, _NO_PLAYOUT)
        if self.floor is not None and speaking:
            # the rest of their words went with the connection: how long they spoke decides (a turn cuts the agent)
            self.floor.transcription_failed(speaking)
        return out

    def on_model_lost(self, now_ns: int, reason: str, fatal: bool = False) -> list[core.Action]:
        if self.ended:
            return []
        self.spell.lost(now_ns)
        if fatal:
            return self._give_up(reason, now_ns, None)
        out = self._cut_off(now_ns)
        # an answer cut off, or a tool's result no one can take now: the caller waits until the model is back
        self.cut_by_drop = self.cut_by_drop or bool(out) or self.tools_owed_at_loss
        return out + self._check(now_ns)

    def awaiting_model(self) -> bool:
        if self.ended:
            return False
        return not self.configured or self._generating() or bool(self.tool_calls) or self.cut_by_drop

    def _generating(self) -> bool:
        return bool(self.exchange.response_id) and not self.exchange.cut

    def reconnect_due(self, now_ns: int) -> bool:
        """goAway came: move to a new connection now (a pause, or the server's deadline is near)."""
        if not self.go_away or self.ended:
            return False
        # a pause: nothing generated, no tool result owed, no answer owed (to what the caller said: their
        # utterance is open until the model answers it, or to what we asked), and the caller not in the middle of
        # an utterance: the new connection's activity detection would hear only its rest, and the answer the
        # old connection was about to give would be lost with it
        at_pause = (not self._generating() and not self.tool_calls and not self.exchange.caller_item
                    and not self.reply_owed)
        return at_pause or now_ns >= self.go_away_deadline_ns

    # --- the model's messages ---------------------------------------------------------------------------
    def on_model_event(self, text: str | bytes, now_ns: int, playout: core.Playout) -> list[core.Action]:
        out: list[core.Action] = []
        if self.ended:
            return out
        self.spell.event(now_ns)
        self.reading = True
        try:
            for event in gp.parse_server_message(text):
                for turn_event in self.exchange.feed(event):
                    out.extend(self._on_turn_event(turn_event, now_ns, playout))
                out.extend(self._on_session_event(event, now_ns))
        finally:
            self.reading = False
        self.scripted_armed = self.scripted_next is not None  # what it asked is on its way now
        if self.floor is not None:
            out.extend(self._judge(now_ns, playout))
        out = self._asked(out + self._check(now_ns))
        return out + self._note_heard()

    def _asked(self, out: list[core.Action]) -> list[core.Action]:
        """Note what of ``out`` asks the model for an answer (a tool's result, a text turn that completes): the
        model's next turn answers it, and is never taken for a reply to a backchannel."""
        for action in out:
            if isinstance(action, core.SendToModel) and gp.asks_answer(action.text):
                self.reply_owed = True
        return out

    def _on_turn_event(self, event: object, now_ns: int, playout: core.Playout) -> list[core.Action]:
        """One event of the conversation's account; with turn-taking by words, the caller's floor first."""
        if self.floor is None:
            return self._on_exchange_event(event, now_ns, playout)
        response_id = getattr(event, "response_id", None)
        if response_id is not None and response_id in self.dropped:
            return []  # a reply to a backchannel: none of it plays
        floor = self.floor
        if isinstance(event, rt.ResponseCreated):
            out = self._judge(now_ns, playout)  # the caller's words were completed just before it
            if self.backchannel_since_answer and not self.reply_owed:
                return out + self._drop_reply(event.response_id, now_ns, playout)
            self.backchannel_since_answer = False
            out += self._on_exchange_event(event, now_ns, playout)
            response = self.core.responses.get(event.response_id)
            if response is not None and not self.held_tag and (self.caller_speaking or floor.any_open):
                # begun while the caller speaks (an answer to something before): it never plays over them
                # before their words decide (as the controller holds a response created then)
                self.held_tag = response.tag
                self.counts.holds += 1
                out.append(HoldTag(response.tag, 0))
            return out
        if isinstance(event, rt.SpeechStarted):
            # The caller made a sound: what the agent says is held (the carrier plays its lead, then a clear) until
            # their words decide: a backchannel or noise lets it go on, anything else cuts it (_judge).
            self.counts.caller_took_floor += 1
            audible = self.core.audible(playout)
            floor.started(event.item_id, now_ns, audible is not None or self._generating(), 0)
            if audible is None or self.held_tag:
                return []
            self.held_tag = audible.tag
            self.counts.holds += 1
            return [HoldTag(audible.tag, audible.frames)]
        if isinstance(event, rt.SpeechStopped):
            u = floor.find(event.item_id)
            floor.stopped(event.item_id, now_ns, (now_ns - u.started_ns) // 1_000_000 if u is not None else 0)
        elif isinstance(event, rt.InputTranscriptionDelta):
            floor.heard(event.item_id, event.delta, False, now_ns)
        elif isinstance(event, rt.InputTranscriptionCompleted):
            floor.heard(event.item_id, event.transcript, True, now_ns)
        return self._on_exchange_event(event, now_ns, playout)

    def _judge(self, now_ns: int, playout: core.Playout) -> list[core.Action]:
        """The caller's utterances judged by their words, as the turn-taking controller judges them
        (voicecore/call/turns.py): a turn cuts the agent (the server answers it), a backchannel or noise over
        the agent lets a held answer go on and makes the model's reply to it unheard."""
        floor = self.floor
        assert floor is not None
        out: list[core.Action] = []
        languages = floor.config.confirm_languages
        for u in floor.utterances:
            if u.verdict == "turn":
                continue
            confirmation = ""
            if self.pending is not None and u.words.strip():
                confirmation = agent_actions.confirmation_answer(u.words, languages)
            verdict = floor.verdict(u, now_ns, confirmation)
            if verdict == u.verdict:
                continue
            self.tick_changed = True
            previous, u.verdict = u.verdict, verdict
            if verdict == "turn":
                u.turn_taken = True  # the server answers it
                self.reply_owed = True
                out += self._cut_for_turn(u.item_id, now_ns, playout)
            elif verdict and u.interrupting and not previous:
                self.backchannel_since_answer = True
                if verdict == "backchannel":
                    self.counts.backchannels += 1
                else:
                    self.counts.false_interruptions += 1
        if self.held_tag and not self.caller_speaking and not floor.any_open:
            out.append(ResumeTag(self.held_tag))
            self.held_tag = 0
            self.counts.resumes += 1
        tracked = len(floor.utterances)
        floor.forget_settled()
        self.tick_changed |= len(floor.utterances) != tracked
        return out

    def _note_heard(self) -> list[core.Action]:
        """The note of how much of a cut answer the caller heard, once the model is idle."""
        if not self.heard_note or not self._idle():
            return []
        note, self.heard_note = self.heard_note, ""
        self.counts.heard_notes += 1
        return [core.SendToModel(note)]

    def _cut_for_turn(self, item_id: str, now_ns: int, playout: core.Playout) -> list[core.Action]:
        """The caller's words took the floor: every live turn is cut where it plays (the core's barge-in), a turn
        still being generated ends there (its rest is late), and the model will be told what was heard."""
        self.counts.turns_by_words += 1
        self.held_tag = 0
        out = self._on_exchange_event(rt.SpeechStarted(None, item_id), now_ns, playout)
        for event in self.exchange.cut_turn():
            out += self._on_exchange_event(event, now_ns, playout)
        return out

    def _drop_reply(self, response_id: str, now_ns: int, playout: core.Playout) -> list[core.Action]:
        """A model turn that answers only a backchannel or noise the caller made over the agent: it gets its tag
        (so the record reads it as the driver did) and is cut before a frame of it is written."""
        self.counts.replies_dropped += 1
        self.dropped.add(response_id)
        self.backchannel_since_answer = False
        out = self._on_exchange_event(rt.ResponseCreated(response_id), now_ns, playout)
        out += self._translate(self.core.cancel(response_id, now_ns, playout))
        for event in self.exchange.cut_turn():
            out += self._on_exchange_event(event, now_ns, playout)
        return out

    @property
    def caller_speaking(self) -> bool:
        """An utterance of the caller has begun and not stopped (the account of turns keeps it)."""
        return bool(self.exchange.caller_item) and not self.exchange.caller_stopped

    def _idle(self) -> bool:
        """Nothing asked of the model is pending and it generates nothing: a note sent now interrupts no answer."""
        return (self.configured and not self._generating() and not self.reply_owed and not self.caller_speaking
                and not self.tool_calls and not self.exchange.caller_item)

    def _on_exchange_event(self, event: object, now_ns: int, playout: core.Playout) -> list[core.Action]:
        """One event of the conversation's account (voicecore/gemini/turns.py) to the core, the audio resampled."""
        if isinstance(event, rt.ResponseCreated):
            self.counts.turns += 1
            self.reply_owed = False  # what was asked is answered by this turn
            self.transcoders[event.response_id] = EdgeTranscoder(ENCODING_L16, gp.OUTPUT_SAMPLE_RATE_HZ)
            if self.next_line is not None:
                self.lines[event.response_id], self.next_line = self.next_line, None
            if event.response_id not in self.dropped:  # a reply never played keeps what the next turn is owed
                self._gate_turn()
            if self.pending is not None and not self.pending.response_id:
                self.pending.response_id = event.response_id
        elif isinstance(event, rt.AudioDelta):
            self.spell.served()
            transcoder = self.transcoders[event.response_id]
            event = rt.AudioDelta(event.response_id, event.item_id, self._out(transcoder.to_ulaw(event.audio)))
        elif isinstance(event, rt.TranscriptDelta):
            self.said[event.response_id] = self.said.get(event.response_id, "") + event.delta
            while len(self.said) > 4:  # the newest turns' words: the heard note quotes a cut one's
                del self.said[next(iter(self.said))]
        elif isinstance(event, rt.ResponseDone):
            return self._turn_ends(event, now_ns, playout)
        elif isinstance(event, rt.SpeechStarted):
            if self.floor is None:
                self.counts.caller_took_floor += 1
            # the caller took a turn: the model's next turn may answer them rather than say the line asked of it
            # (judged as an answer then: a scripted gate would refuse it and say the safe line instead)
            self.scripted_next = None
            # the core cuts every live tag where it plays: the model will be told how much of it was heard
            audible = self.core.audible(playout)
            if audible is not None and audible.produced_frames:
                heard_ms = core.played_ms(audible.tag, playout, now_ns, audible.frames)
                self.heard_note = _heard_note(heard_ms, audible.frames * 20, self.said.get(audible.response_id, ""))
        elif isinstance(event, rt.FunctionCallArgumentsDone):
            return []  # the toolCall itself is answered (_tool_call)
        elif isinstance(event, rt.InputTranscriptionCompleted) and self.pending is not None:
            return self._core(event, now_ns, playout) + self._caller_answers(event.transcript, now_ns)
        return self._core(event, now_ns, playout)

    def _ask_line(self, line: Say | None) -> None:
        """``line`` is asked of the model ("Say exactly"): the next turn begun after the ask is judged against it."""
        self.scripted_next = line
        self.scripted_armed = not self.reading

    def _gate_turn(self) -> None:
        """The gate of the model turn beginning now: the line asked of it, else the current node's answer. The
        core's own safe line (asked after a rejection) stays ungated, and without a flow the call's policy holds."""
        if not self.gate_turns or self.flow is None or self.core.safe_line_next:
            return
        line = self.scripted_next if self.scripted_armed else None
        if line is not None:
            self.scripted_next = None
        step = line or self.flow.answer()
        facts, self.facts_next = self.facts_next, ""
        self.core.gate_next_response(step_gate(step, self.core.gate_policy, self.gate_language, facts))

    def _turn_ends(self, event: rt.ResponseDone, now_ns: int, playout: core.Playout) -> list[core.Action]:
        transcoder = self.transcoders.pop(event.response_id, None)
        line = self.lines.pop(event.response_id, None)
        out: list[core.Action] = []
        if event.status == "completed" and transcoder is not None:
            # the resampler holds its last 10 ms back for look-ahead: silence after the turn lets it out
            tail = self._out(transcoder.to_ulaw(_FLUSH_24K))
            out += self._core(rt.AudioDelta(event.response_id, self.exchange.item_of(event.response_id), tail),
                              now_ns, playout)
        out += self._core(event, now_ns, playout)
        if line is not None:
            if event.status == "completed":
                self.hang_up_after = (event.response_id, line)
            elif self.next_line is None:
                self.next_line = line  # cut: the call ends after the next turn instead
        return out

    def _on_session_event(self, event: gp.ServerEvent, now_ns: int) -> list[core.Action]:
        if isinstance(event, gp.ToolCall):
            return self._tool_call(event, now_ns)
        if isinstance(event, gp.Interrupted):
            self.counts.interrupted += 1
        elif isinstance(event, gp.ToolCallCancellation):
            for call_id in event.ids:
                if self.tool_calls.pop(call_id, None) is not None:
                    self.counts.tool_calls_cancelled += 1
        elif isinstance(event, gp.SetupComplete):
            self.configured = True
            out = [core.SendToModel(text) for text in self.after_setup]
            self.after_setup = []
            return out
        elif isinstance(event, gp.SessionResumptionUpdate):
            if event.resumable and event.new_handle:
                self.handle = event.new_handle
                self.counts.handles += 1
        elif isinstance(event, gp.GoAway):
            self.counts.go_aways += 1
            self.go_away = True
            left_ms = event.time_left_ms if event.time_left_ms is not None else 0
            margin_ms = min(GO_AWAY_MARGIN_MS, left_ms // 2)  # a short notice still leaves half for a pause
            self.go_away_deadline_ns = now_ns + max(0, left_ms - margin_ms) * 1_000_000
        elif isinstance(event, gp.MalformedMessage):
            self.counts.malformed += 1
            self.core.stats.malformed_events += 1
        return []

    def _core(self, event: object, now_ns: int, playout: core.Playout) -> list[core.Action]:
        return self._translate(self.core.on_event(event, now_ns, playout))

    def _translate(self, actions: list[core.Action]) -> list[core.Action]:
        """The core's actions with its OpenAI client events replaced by their Gemini counterparts (or none)."""
        out: list[core.Action] = []
        for action in actions:
            if not isinstance(action, core.SendToModel):
                out.append(action)
                continue
            event = orjson.loads(action.text)
            if event.get("type") == "response.create":
                instructions = (event.get("response") or {}).get("instructions") or ""
                out.append(core.SendToModel(gp.client_content([("user", instructions)])))
            # response.cancel, conversation.item.truncate/delete: the server discarded what it did not send
        return out

    # --- tools ----------------------------------------------------------------------------------------
    def _tool_call(self, event: gp.ToolCall, now_ns: int) -> list[core.Action]:
        out: list[core.Action] = []
        answers: list[tuple[str, str, dict]] = []  # answered now (the flow's own outcome, or an error)
        for call in event.calls:
            self.counts.tool_calls += 1
            arguments = json.dumps(call.args, separators=(",", ":"), sort_keys=True)
            if self.flow is None:
                answers.append((call.call_id, call.name, _error("unknown_function", "this agent has no functions")))
                continue
            decision = self.flow.on_tool_call(call.name, arguments)
            if isinstance(decision, ToolPlan):  # run the tool
                key = agent_actions.idempotency_key(self.call_sid, decision.name, decision.arguments)
                done = self.writes.recent(key, now_ns) if decision.writes else None
                if done is not None:  # done within the window: not run (nor proposed) again, its first result stands
                    self.counts.duplicate_writes_suppressed += 1
                    outcome = self.flow.on_tool_result(decision.name, decision.arguments, True, done)
                    answers.append((call.call_id, call.name, self._outcome_response(outcome)))
                    continue
                if decision.confirm is not None:
                    answers.append((call.call_id, call.name, self._propose(call.call_id, decision, now_ns, out)))
                    continue
                self.tool_calls[call.call_id] = (decision.name, decision.arguments)
                if decision.writes:
                    self.write_keys[call.call_id] = key
                self.counts.tools_run += 1
                out.append(RunTool(call.call_id, decision.name, decision.arguments, key))
            else:
                answers.append((call.call_id, call.name, self._outcome_response(decision)))
        if answers:
            # a node's messages (context) go before the response that moved the flow: the model goes on under them
            out[:0] = [core.SendToModel(text) for text in self._node_notes] + [core.SendToModel(gp.tool_response(answers))]
            self._node_notes = []
        return out

    def on_tones(self, call_id: str, digits: str, now_ns: int) -> list[core.Action]:
        """A ``send_dtmf`` run's keys as in-band tones: the core's own tag (ModelCallCore.play_tones)."""
        return [] if self.ended else self.core.play_tones(call_id, digits)

    def on_tool_result(self, call_id: str, ok: bool, output: str, now_ns: int) -> list[core.Action]:
        key = self.write_keys.pop(call_id, None)
        if key is not None and ok:
            self.writes.remember(key, output, now_ns)
        confirmed = self.confirmed_runs.pop(call_id, None)
        if confirmed is not None and not self.ended and self.flow is not None:
            return self._asked(self._confirmed_result(confirmed, ok, output))
        owed = self.tool_calls.pop(call_id, None)
        if owed is None or self.ended or self.flow is None:
            return []  # cancelled by the model, or its connection is gone: no one is owed it
        name, arguments = owed
        outcome = self.flow.on_tool_result(name, arguments, ok, output)
        response = self._outcome_response(outcome)
        out = [core.SendToModel(text) for text in self._node_notes]
        self._node_notes = []
        return self._asked(out + [core.SendToModel(gp.tool_response([(call_id, name, response)]))])

    def _enter_node(self, transition: Any) -> None:
        """The flow moved to another node: its role and task messages go to the model as context (a session's
        instructions and tools are its setup's; every node's functions were declared there)."""
        self.counts.transitions += 1
        node = self.flow.spec.flow.nodes[transition.node] if self.flow is not None else None
        parts = [f"(The conversation moved on to the step {transition.node!r}. From now on:)"]
        if node is not None:
            parts += [m.content.strip() for m in node.role_messages] + [m.content.strip() for m in node.task_messages]
        self._node_notes.append(gp.client_content([("user", "\n\n".join(p for p in parts if p))], turn_complete=False))

    def _outcome_response(self, outcome: Any) -> dict:
        """The functionResponse for a flow's outcome. The model goes on by itself after a toolResponse, so a
        line the flow wants said next (the goodbye after end_call) goes with it as an instruction; a terminal
        line's turn ends the call once it has played."""
        response = _response_object(outcome.output)
        if outcome.transition is not None:
            self._enter_node(outcome.transition)
        self.facts_next = outcome.facts
        step = outcome.then
        if isinstance(step, Say):
            response = {**response, "instruction": f'Say exactly: "{step.text}"'}
            self._ask_line(step)
            if step.terminal:
                self.next_line = step
        return response

    # --- actions with confirmation --------------------------------------------------------------------
    def _propose(self, call_id: str, plan: ToolPlan, now_ns: int, out: list[core.Action]) -> dict:
        """The functionResponse to a call that needs the caller's yes: not done, say the prompt as written."""
        assert plan.confirm is not None
        if self.pending is not None:
            self._drop("superseded", None, out)  # the model proposed another: only the newest stands
        self.pending = PendingConfirmation(call_id, plan, now_ns)
        self.counts.actions_proposed += 1
        self._ask_line(plan.confirm)
        return {"status": "awaiting_confirmation",
                "instruction": f'Nothing is done yet. Ask the caller, then wait for their answer. Say exactly: '
                               f'"{plan.confirm.text}"'}

    def _caller_answers(self, words: str, now_ns: int) -> list[core.Action]:
        """The caller's words after a confirmation was asked: a yes runs it, a no declines it, anything else
        drops it (the model answers those words itself)."""
        if self.pending is None or not words.strip():
            return []
        languages = tuple(self.flow.spec.languages) if self.flow is not None else ("en",)
        answer = agent_actions.confirmation_answer(words, languages)
        out: list[core.Action] = []
        if answer == "yes":
            self._confirm(out)
        elif answer == "no":
            self._drop("caller_declined", "declined", out)
        else:
            self._drop("caller_moved_on", None, out)
        return out

    def _confirm(self, out: list[core.Action]) -> None:
        pending, self.pending = self.pending, None
        assert pending is not None
        self.counts.actions_confirmed += 1
        run_id = f"{pending.call_id}:confirmed"
        plan = pending.plan
        self.confirmed_runs[run_id] = (plan.name, plan.arguments)
        self.counts.tools_run += 1
        key = agent_actions.idempotency_key(self.call_sid, plan.name, plan.arguments)
        if plan.writes:
            self.write_keys[run_id] = key
        out.append(RunTool(run_id, plan.name, plan.arguments, key))

    def _drop(self, reason: str, line: str | None, out: list[core.Action]) -> None:
        """Not run: the model is told why (as context); the flow's line for it, if any, is said."""
        pending, self.pending = self.pending, None
        assert pending is not None
        if reason == "no_confirmation":
            self.counts.actions_timed_out += 1
        else:
            self.counts.actions_declined += 1
        note = json.dumps({"function": pending.plan.name, "status": "not_done", "reason": reason})
        if line is not None and self.flow is not None:
            say = self.flow.line(line)
            self._ask_line(say)
            out.append(core.SendToModel(gp.client_content([("user", f'{note}\nSay exactly: "{say.text}"')])))
        else:
            out.append(core.SendToModel(gp.client_content([("user", note)], turn_complete=False)))

    def _confirmed_result(self, run: tuple[str, str], ok: bool, output: str) -> list[core.Action]:
        """A confirmed action's result: its call was answered when the prompt was asked, so the result goes to
        the model as a turn it answers (under the node the flow moved to)."""
        assert self.flow is not None
        name, arguments = run
        outcome = self.flow.on_tool_result(name, arguments, ok, output)
        if outcome.transition is not None:
            self._enter_node(outcome.transition)
        text = f"Result of {name} (confirmed by the caller): {outcome.output}"
        self.facts_next = outcome.facts
        step = outcome.then
        if isinstance(step, Say):
            text += f'\nSay exactly: "{step.text}"'
            self._ask_line(step)
            if step.terminal:
                self.next_line = step
        out = [core.SendToModel(note) for note in self._node_notes]
        self._node_notes = []
        return out + [core.SendToModel(gp.client_content([("user", text)]))]

    def _check_confirmation(self, now_ns: int, playout: core.Playout) -> list[core.Action]:
        """The confirmation prompt's timeout: from when its turn played out (or, should it never play, a grace
        after it was asked), no yes this long drops the action with the timeout line."""
        pending = self.pending
        if pending is None or self.flow is None:
            return []
        if pending.response_id and not pending.played_ns and self.exchange.response_id != pending.response_id:
            if not any(r.response_id == pending.response_id for r in self.core.live_responses(playout)):
                pending.played_ns = now_ns
                self.tick_changed = True
        if self.exchange.caller_item and not self.exchange.caller_stopped:
            return []  # the caller is answering; their words decide
        start = pending.played_ns or pending.asked_ns + CONFIRM_PROMPT_GRACE_MS * 1_000_000
        if now_ns - start >= int(self.flow.spec.confirm_timeout_s * 1000) * 1_000_000:
            out: list[core.Action] = []
            self._drop("no_confirmation", "confirm_timeout", out)
            return out
        return []

    # --- the caller -----------------------------------------------------------------------------------
    def on_caller_audio(self, audio: bytes, now_ns: int, playout: core.Playout | None = None) -> list[core.Action]:
        if not audio:
            return []
        return [core.SendToModel(gp.realtime_audio(self.inbound.from_ulaw(g711.to_ulaw(audio, self.audio_format))))]

    def _out(self, ulaw: bytes) -> bytes:
        return g711.from_ulaw(ulaw, self.audio_format)

    def on_dtmf(self, digit: str, now_ns: int) -> list[core.Action]:
        self.core.stats.dtmf_digits += 1
        out: list[core.Action] = []
        if self.pending is not None:  # a key answers the confirmation prompt: 1 is yes, any other key is no
            if digit == "1":
                self._confirm(out)
            else:
                self._drop("caller_declined", "declined", out)
        return self._asked(out)

    def on_tick(self, now_ns: int, playout: core.Playout) -> list[core.Action]:
        self.tick_changed = False
        if self.ended:
            return []
        out = self._check(now_ns, playout) + self._check_confirmation(now_ns, playout)
        if self.floor is not None:
            out += self._judge(now_ns, playout)
        self._asked(out)
        out += self._note_heard()
        if self.hang_up_after is None or self.ended:
            return out
        response_id, line = self.hang_up_after
        if any(r.response_id == response_id for r in self.core.live_responses(playout)):
            return []  # the line is still playing (or queued)
        self.hang_up_after = None
        self.ended = True
        return out + [Transfer(line.transfer_to) if line.transfer_to else HangUp("goodbye")]

    def _check(self, now_ns: int, playout: core.Playout | None = None) -> list[core.Action]:
        """The failure policy (voicecore/call/failures.py), as the spine keeps it: a caller waiting on a model
        that dropped or fell silent hears the hold line; past the policy's limits, the apology and a hang-up."""
        verdict = self.spell.verdict(now_ns, awaiting=self.awaiting_model(), waiting_on_vendor=self._generating(),
                                     caller_speaking=False)
        if verdict == HOLD:
            return [PlayFallback(HOLD)]
        if verdict is not None:
            return self._give_up(verdict, now_ns, playout)
        return []

    def _give_up(self, reason: str, now_ns: int, playout: core.Playout | None) -> list[core.Action]:
        self.ended = True
        out: list[core.Action] = []
        if playout is not None and self.core.audible(playout) is not None:
            out.extend(self._translate(self.core.barge_in(now_ns, playout)))
        return out + [PlayFallback("apology_hangup"), HangUp(reason, after_line=True)]

    def on_carrier_stop(self, now_ns: int) -> list[core.Action]:
        self.ended = True
        return []

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int, playout: core.Playout,
                   reason: str = "", citations: str = "") -> list[core.Action]:
        return self._translate(self.core.on_verdict(tag, approved_frames, rejected, now_ns, playout))

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[core.Action]:
        return []

    def statistics(self) -> dict:
        counts = dataclasses.asdict(self.counts)
        return {**{f"core_{k}": v for k, v in dataclasses.asdict(self.core.stats).items()},
                **{f"gemini_{k}": v for k, v in counts.items()},
                # the turn-taking controller's counters of the flow, tools and confirmations, by its names
                **{k: counts[k] for k in CONTROLLER_NAMED},
                "gemini_late_chunks_dropped": self.exchange.late_chunks}


_NO_PLAYOUT = core.Playout(0, 0, 0, 0, 0, 0)
CONTROLLER_NAMED = ("tool_calls", "tools_run", "transitions", "actions_proposed", "actions_confirmed",
                    "actions_declined", "actions_timed_out")


def _heard_note(heard_ms: int, total_ms: int, said: str) -> str:
    """The context note after a cut (clientContent, no answer asked): how much of the answer the caller heard.
    Gemini cannot truncate an answer's item; this is the closest it takes. The words heard are estimated from
    the share of the audio played."""
    words = said.split()
    heard = " ".join(words[: len(words) * min(heard_ms, total_ms) // total_ms]) if total_ms > 0 and words else ""
    # The note waits until the model is idle (a clientContent interrupts what it generates), which is most often
    # after it has answered the caller's turn: "your last answer" would then name the wrong one. The answer is
    # named by its opening words.
    answer = f'your answer that began "{" ".join(words[:gp.HEARD_NOTE_OPENING_WORDS])}"' if words else "your last answer"
    if heard_ms < 100:
        text = f"{gp.HEARD_NOTE_PREFIX} the caller did not hear {answer}.)"
    else:
        text = (f"{gp.HEARD_NOTE_PREFIX} the caller heard about {heard_ms / 1000:.1f} s of {answer}"
                + (f', up to "{heard}"' if heard else "") + "; they did not hear the rest.)")
    return gp.client_content([("user", text)], turn_complete=False)



def _error(kind: str, message: str) -> dict:
    return {"error": {"type": kind, "message": message}}


def _response_object(output: str) -> dict:
    """A tool's output (JSON text) as a functionResponse's ``response`` object."""
    try:
        value = json.loads(output)
    except ValueError:
        return {"output": output}
    return value if isinstance(value, dict) else {"output": value}


def driver_from_header(header: dict[str, Any]) -> GeminiDriver:
    """The driver a record's header describes, fresh (voicecore/replay.py)."""
    args = header.get("args", {})
    return GeminiDriver(header["call_sid"], first_tag=int(header.get("first_tag", 1)), **args)


def session_knowledge(snippets: Sequence[dict]) -> tuple[str, int]:
    """The agent's knowledge as a Gemini session's instructions hold it, and how many snippets were left out.

    The Realtime path puts the snippets the caller's question retrieves into each answer's instructions; a
    Gemini server answers the caller's turn on its own, with nothing to add per answer, so the session gets the
    whole knowledge at setup, in the same words (``grounded_instructions``), up to ``KNOWLEDGE_MAX_CHARS`` (the
    first snippets, in the folder's order). The gate checks every number against all of it either way."""
    kept: list[dict] = []
    size = 0
    for snippet in snippets:
        size += len(str(snippet.get("text", ""))) + len(str(snippet.get("file", ""))) + 6
        if size > KNOWLEDGE_MAX_CHARS:
            break
        kept.append(snippet)
    return (grounded_instructions(kept) if kept else ""), len(snippets) - len(kept)


def driver_for_agent(agent: Any, call_sid: str, *, model: str, first_tag: int = 1, greet: bool = True,
                     gate_policy: str = "off", audio_format: str = "pcmu", by_words: bool = True,
                     gate_language: str = "auto", flow_overrides: dict | None = None,
                     knowledge: Sequence[dict] = ()) -> GeminiDriver:
    """A new call's Gemini driver from the agent's spec: its first node's instructions and functions.
    ``by_words``: the caller's words decide who has the floor (the agent's languages and backchannels, as the
    turn-taking controller reads them); False: the server's activity detection cuts the agent on every sound.
    ``gate_language`` and ``flow_overrides`` (the operator's per-node gate settings, AgentFlow's keyword
    arguments): the gate as the controller's calls get it. ``knowledge``: the agent's knowledge-base snippets
    (``{"text", "file"}``, in the folder's order), put after the instructions (``session_knowledge``)."""
    from voicecore.agent.flow import AgentFlow

    flow = AgentFlow(agent, **(flow_overrides or {}))  # the operator's per-node gate settings, as the controller's
    session = flow.session()
    # every node's functions, declared once: a session's tools cannot change after setup (the flow refuses a
    # call of a function its current node does not offer)
    tools = [function.declaration() for function in agent.flow.functions.values()]
    failure = FailurePolicy(after_failures=agent.failure_after_failures, after_ms=int(agent.failure_after_s * 1000),
                            hold_every_ms=int(agent.failure_hold_every_s * 1000))
    facts = session_knowledge(knowledge)[0]
    instructions = f"{session.instructions}\n\n{facts}" if facts else session.instructions
    return GeminiDriver(call_sid, model=model, instructions=instructions, voice=agent.voice_for(VENDOR),
                        greeting=agent.greeting, tools=tools, flow_args=flow.record_args(),
                        first_tag=first_tag, greet=greet, gate_policy=gate_policy, safe_line=agent.safe_line,
                        audio_format=audio_format, failure=failure.to_dict(), dedupe_ms=int(agent.dedupe_s * 1000),
                        turn_taking=floor_settings(agent) if by_words else None, gate_language=gate_language,
                        gate_turns=True)


def floor_settings(agent: Any) -> dict:
    """The turn-taking controller's settings that judge the caller's words on a Gemini call (ControllerConfig's
    names; recorded in the call's header). The server's activity detection waits ~500 ms of silence, as the
    Realtime path's server VAD does, and its utterances carry no prefix padding."""
    languages = list(agent.languages)
    return {"languages": languages, "confirm_languages": languages, "backchannels": list(agent.backchannels),
            "transcript_wait_ms": agent.transcript_wait_ms, "vad_prefix_padding_ms": 0}
