"""What an agent is, as data: the agent's settings, its flow (nodes, functions, transitions) and its tools.

Owns the shapes only; nothing here reads a file (voicecore/agent/load.py does, and validates) or runs a
tool (voicecore/agent/tools.py). Every shape is frozen and JSON-able through ``to_dict``/``from_dict``, so a
call record carries the whole agent in its header and a replay needs none of the agent's files.

The flow is a JSON conversation flow (docs/explanation/agents.md#flows): ``initial_node``, ``nodes`` with role
and task messages, a list of function names and a context strategy, and ``functions`` with a JSON-Schema
``parameters`` object and ``transitions`` (``success`` / ``error`` -> node). Beyond that common shape: a node
may say a scripted prompt on entry (``say``), end the call or transfer it after that prompt (``end``,
``transfer_to``), and name its gate policy and forbidden phrases; a function may run a tool (an HTTP webhook
or a Python entry point), perform a built-in action (``end_call``, ``transfer``) and ask the caller to confirm
before it runs (``confirm``, ``confirm_prompt``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

CONTEXT_STRATEGIES = ("keep", "reset", "task")
GATE_POLICIES = ("off", "numbers", "scripted", "strict")
BUILTIN_ACTIONS = ("end_call", "transfer")
MESSAGE_ROLES = ("system", "user", "assistant")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
LINE_KINDS = ("goodbye", "transfer", "checkin", "fallback", "apology", "filler", "declined", "confirm_timeout",
              "tool_error", "hold", "reconnect")
# The runtime's own lines (voicecore/fallback) an agent may give as audio files: [lines.audio] in agent.toml.
LINE_AUDIO_KINDS = ("hold", "apology_hangup", "apology_transfer")
# [privacy] storage: what of a call is kept (voicecore/privacy/records.py; docs/how-to/privacy.md).
STORAGE_TIERS = ("everything", "no_audio", "redacted", "metadata_only")

# The lines an agent that names none says (English; an agent in another language names its own).
DEFAULT_LINES: dict[str, str] = {
    "goodbye": "Thank you for calling. Goodbye!",
    "transfer": "Let me connect you with a colleague. One moment please.",
    "checkin": "Are you still there?",
    "fallback": "Sorry, could you say that again?",
    "apology": "I'm sorry, I'm having trouble right now.",
    "filler": "One moment please, I'm checking that.",
    "declined": "All right, I won't do that.",
    "confirm_timeout": "I didn't hear a yes, so I haven't done anything.",
    "tool_error": "Sorry, I couldn't do that right now.",
    "hold": "One moment, please.",  # the runtime's hold line, rendered in the agent's voice (voicecore/fallback/lines.py)
    "reconnect": "Sorry, we were cut off for a moment. Could you say that again?",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Webhook:
    """An HTTP tool: the function's arguments go to ``url`` (JSON body; query string for GET).

    ``headers``: (name, value) pairs; a value ``env:NAME`` is read from the environment when the tool runs
    (secrets stay out of the agent's files and out of call records)."""

    url: str
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 5.0
    retries: int = 1  # extra attempts after a timeout, a connection error or a 5xx (never after a 4xx)


@dataclasses.dataclass(frozen=True, slots=True)
class PythonTool:
    """A Python tool: ``entry`` is ``module:function``, an ``async def f(arguments: dict, context: ToolContext)``
    returning something JSON-able (voicecore/agent/tools.py)."""

    entry: str
    timeout_s: float = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class BuiltinTool:
    """A function the runtime runs itself, through the same RunTool path and record as any tool: ``builtin`` names
    it (``send_dtmf``: keys pressed on a call the node placed; workers/model/answer_wait.py declares it)."""

    builtin: str
    timeout_s: float = 15.0


Tool = Webhook | PythonTool | BuiltinTool


@dataclasses.dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    description: str = ""
    parameters: dict[str, Any] = dataclasses.field(default_factory=lambda: {"type": "object", "properties": {}})
    tool: Tool | None = None  # what runs it; None: a function that only transitions or acts
    action: str = ""  # "" | "end_call" | "transfer": a built-in action after it (and its tool) succeeded
    transfer_to: str = ""  # action "transfer": the number or SIP URI; empty: the agent's transfer target
    confirm: bool = False  # ask the caller first (confirm_prompt), run only after a yes
    confirm_prompt: str = ""  # "Shall I book a callback to {phone} {when}?": placeholders are argument names
    writes: bool = True  # de-duplicated for the agent's dedupe window (same arguments, after a success)
    filler: str = ""  # said when the tool takes longer than the agent's filler_after_ms; "": the agent's line
    transitions: dict[str, str] = dataclasses.field(default_factory=dict)  # "success" / "error" -> node name

    def declaration(self) -> dict[str, Any]:
        """The function as the model is told of it in session.update's ``tools``
        (docs/explanation/protocols.md#c2)."""
        return {"type": "function", "name": self.name, "description": self.description, "parameters": self.parameters}


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    role: str  # system | user | assistant
    content: str


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    role_messages: tuple[Message, ...] = ()
    task_messages: tuple[Message, ...] = ()
    functions: tuple[str, ...] = ()
    context_strategy: str = "keep"
    say: str = ""  # a scripted prompt spoken when the flow enters this node
    end: bool = False  # after ``say`` (or at once): goodbye and hang up
    transfer_to: str = ""  # after ``say`` (or at once): transfer the call here
    gate_policy: str = ""  # how the model's answers in this node are judged; "": the agent's gate.answers
    forbidden: tuple[str, ...] = ()  # phrases never said in this node (besides the agent's)


@dataclasses.dataclass(frozen=True, slots=True)
class FlowSpec:
    initial_node: str
    nodes: dict[str, NodeSpec]
    functions: dict[str, FunctionSpec]


@dataclasses.dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str
    instructions: str  # the agent's standing instructions; each node's role and task messages follow them
    flow: FlowSpec
    model: str = ""  # "": the configuration's model
    model_vendor: str = ""  # [model] vendor: "openai" or "gemini"; "": what the model's name says
    voice: str = "alloy"
    voices: dict[str, str] = dataclasses.field(default_factory=dict)  # [voices]: vendor -> its voice, over `voice`
    languages: tuple[str, ...] = ("en",)  # the first is the main one; en and sv are what the gate reads
    greeting: str = ""  # a scripted prompt at the start of every call; "": the initial node speaks first
    safe_line: str = "I can't verify that."
    knowledge_dir: str = ""  # absolute path of the knowledge folder; "": none
    gate_answers: str = "off"  # the model's answers, in nodes that name no gate_policy
    gate_prompts: str = "off"  # scripted prompts: the greeting, node prompts and lines
    forbidden: tuple[str, ...] = ()  # phrases no response may say
    lines: dict[str, str] = dataclasses.field(default_factory=lambda: dict(DEFAULT_LINES))
    checkin_s: tuple[float, ...] = (10.0, 20.0, 40.0)  # silence check-ins, seconds of silence each
    goodbye_after_s: float = 10.0  # after the last unanswered check-in
    transfer_to: str = ""  # where "0", the apology and a transfer without a target go; "": hang up instead
    max_turns: int = 0  # caller turns before the goodbye; 0: no limit
    # [failure]: when the model vendor or the model worker fails under a call. The caller hears the shipped
    # hold line at once (voicecore/fallback); after failure_after_failures failures in a row, or
    # failure_after_s seconds without a working model, the call gets the shipped apology and is transferred
    # (failure_action "transfer", to transfer_to) or hung up ("hangup").
    failure_after_failures: int = 5
    failure_after_s: float = 10.0
    failure_hold_every_s: float = 3.0  # a caller still waiting this long after the hold line hears it again
    failure_action: str = "transfer"  # "transfer" (to transfer_to; hang up when there is none) or "hangup"
    filler_after_ms: int = 1500  # a tool still running this long: say the filler line (once)
    debounce_quiet_ms: int = 1500  # after a tool result: this much caller quiet before the agent speaks
    debounce_cap_ms: int = 5000  # ... but no longer than this
    dedupe_s: float = 30.0  # a write tool's success stands for this long: the same call again is not run
    confirm_timeout_s: float = 8.0  # no yes this long after a confirmation prompt played: dropped
    # [turns]: the vendor's end-of-turn detection, the transcription model that gives the caller's words,
    # the agent's own backchannel phrases (on top of the shipped lexicons of its languages), and how long
    # the caller's words are waited for before the length of their speech decides alone.
    turn_detection: str = "server_vad"  # or "semantic_vad"
    vad_eagerness: str = "auto"  # semantic_vad only: low, medium, high, auto
    transcription_model: str = "gpt-4o-mini-transcribe"
    backchannels: tuple[str, ...] = ()
    transcript_wait_ms: int = 1500
    # [privacy]: what of a call is stored (STORAGE_TIERS) and the agent's own patterns to redact (regular
    # expressions, on top of the shipped kinds: voicecore/privacy/redact.py). An agent.toml without the key
    # stores everything, as before the tiers existed; the shipped agents say "redacted".
    privacy_storage: str = "everything"
    privacy_patterns: tuple[str, ...] = ()
    # [outbound]: a call the node placed: how long the agent's first words wait for the answer's verdict (a
    # person, a voicemail, a screening assistant, an IVR: voicecore/outbound/answer.py) and what it does on a
    # voicemail ("hang_up", or "greet": once its beep has sounded, the agent starts as for a person).
    outbound_max_wait_ms: int = 6000
    outbound_on_voicemail: str = "hang_up"
    # ... on a call-screening assistant ("introduce": the agent starts, its greeting saying who calls and why, and
    # waits for the person put through; or "hang_up") and on an IVR menu ("model": the agent starts and deals
    # with it; or "hang_up").
    outbound_on_screening: str = "introduce"
    outbound_on_ivr: str = "model"
    # ... the keys pressed on an IVR with on_ivr = "dtmf" (voicecore/outbound/dtmf.py: 0-9 * # and the pauses w, W),
    # and whether the model is offered the send_dtmf function on every call the node places
    outbound_ivr_digits: str = ""
    # ... what the agent says after a voicemail's beep with on_voicemail = "message" (the call's fields as placeholders,
    # said as a scripted line, gated, then the call is hung up)
    outbound_voicemail_message: str = ""
    outbound_dtmf_tool: bool = False
    directory: str = ""  # where it was loaded from (for messages; not part of the record)
    # [lines.audio]: the runtime's fallback lines as WAV files (kind -> absolute path; voicecore/fallback/lines.py)
    line_audio: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def gate_language(self) -> str:
        """How the validator reads numbers and scripts: en, sv, or auto for several languages."""
        if len(self.languages) == 1 and self.languages[0] in ("en", "sv"):
            return self.languages[0]
        return "auto"

    def voice_for(self, vendor: str) -> str:
        """The voice the agent speaks with on ``vendor`` (its [voices] entry, else ``voice``)."""
        return self.voices.get(vendor) or self.voice

    def to_dict(self) -> dict[str, Any]:
        data = _plain(self)
        if not data.get("voices"):
            data.pop("voices", None)  # a record's header is as it was before voices per vendor
        data.pop("directory", None)
        data.pop("line_audio", None)  # files of this machine, played by the pacer: not part of the record
        if not data.get("model_vendor"):
            data.pop("model_vendor", None)  # a record's header is as it was before vendors could be named
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentSpec:
        """Inverse of ``to_dict`` (the data is trusted: it was written by to_dict, e.g. in a record header)."""
        flow = data["flow"]
        nodes = {name: NodeSpec(
            name=node["name"],
            role_messages=tuple(Message(**m) for m in node.get("role_messages", ())),
            task_messages=tuple(Message(**m) for m in node.get("task_messages", ())),
            functions=tuple(node.get("functions", ())),
            context_strategy=node.get("context_strategy", "keep"),
            say=node.get("say", ""), end=node.get("end", False), transfer_to=node.get("transfer_to", ""),
            gate_policy=node.get("gate_policy", ""), forbidden=tuple(node.get("forbidden", ())),
        ) for name, node in flow["nodes"].items()}
        functions = {name: FunctionSpec(**{**fn, "tool": _tool_from_dict(fn.get("tool"))})
                     for name, fn in flow["functions"].items()}
        values = {k: v for k, v in data.items() if k != "flow"}
        for key in ("languages", "forbidden", "checkin_s", "backchannels", "privacy_patterns"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(flow=FlowSpec(flow["initial_node"], nodes, functions), **values)


def _tool_from_dict(data: dict[str, Any] | None) -> Tool | None:
    if data is None:
        return None
    if "builtin" in data:
        return BuiltinTool(**data)
    if "url" in data:
        return Webhook(**{**data, "headers": tuple(tuple(h) for h in data.get("headers", ()))})
    return PythonTool(**data)


def _plain(value: Any) -> Any:
    """Dataclasses, tuples and dicts as JSON-able dicts and lists (a tool remembers its kind by its fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
