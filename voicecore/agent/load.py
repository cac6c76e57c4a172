"""Reading an agent directory (agent.toml, its instructions file, its flow file) into an ``AgentSpec``.

Owns the validation of the agent's files and the problems it reports. Every check runs and every problem
is reported with its file and JSON path (``$.nodes.reception.functions[1]``), so one ``voicecore check``
shows an author all that is wrong; an agent with any problem is never half-loaded (``load_agent`` raises
``AgentError`` with the whole list). Unknown keys are problems: a typo must not silently fall back to a
default. The shapes themselves live in spec.py; running a tool is tools.py's.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.resources
import inspect
import json
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from voicecore.agent.spec import (
    BUILTIN_ACTIONS, CONTEXT_STRATEGIES, DEFAULT_LINES, GATE_POLICIES, HTTP_METHODS, LINE_AUDIO_KINDS, LINE_KINDS,
    MESSAGE_ROLES, STORAGE_TIERS,
    AgentSpec, FlowSpec, FunctionSpec, Message, NodeSpec, PythonTool, Tool, Webhook,
)
from voicecore.agent.speech import CURRENCIES, CURRENCY_KEY, KIND_KEY, SPOKEN_KINDS, spoken_kind
from voicecore.errors import MisuseError

AGENT_FILE = "agent.toml"
FLOW_SUFFIXES = (".json", ".toml")
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the Realtime API accepts as a tool name
LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")  # "en", "sv", "en-GB"
PYTHON_ENTRY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", re.ASCII)  # mod.sub:obj.fn
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ENV_HEADER_PREFIX = "env:"
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
TRANSFER_TARGET = re.compile(r"^(\+?[0-9]{3,15}|sips?:\S+)$")  # a phone number or a SIP URI
TRANSITION_KEYS = ("success", "error")
MAX_TOOL_TIMEOUT_S = 60.0
MAX_RETRIES = 5

# The flow of an agent without a flow file: one node whose only way on is the goodbye.
DEFAULT_NODE = "main"
END_CALL_DESCRIPTION = "End the call when the caller says goodbye or needs nothing more."

NODE_KEYS = ("role_messages", "task_messages", "functions", "context_strategy", "say", "end", "transfer_to",
             "gate_policy", "forbidden")
FUNCTION_KEYS = ("description", "parameters", "webhook", "python", "timeout_s", "action", "transfer_to", "confirm",
                 "confirm_prompt", "writes", "filler", "transitions")
WEBHOOK_KEYS = ("url", "method", "headers", "timeout_s", "retries")
AGENT_KEYS = ("name", "instructions", "instructions_file", "model", "voice", "languages", "greeting", "safe_line",
              "knowledge", "flow", "forbidden", "transfer_to", "max_turns", "gate", "lines", "silence", "tools",
              "failure", "turns", "privacy", "outbound", "voices")
TURN_DETECTIONS = ("server_vad", "semantic_vad")
MODEL_VENDORS = ("openai", "gemini")
VAD_EAGERNESS = ("low", "medium", "high", "auto")
# The vendor's input transcription models (the first family streams deltas, whisper-1 only a late completed).
TRANSCRIPTION_MODELS = ("gpt-4o-mini-transcribe", "gpt-4o-transcribe", "whisper-1")


@dataclasses.dataclass(frozen=True, slots=True)
class AgentProblem:
    """One thing wrong with an agent's files. ``code`` is a stable kebab-case id (tests and tools match on it)."""

    file: str
    path: str  # JSON path into the file: "$", "$.nodes.reception.functions[1]"
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "path": self.path, "code": self.code, "message": self.message}


class AgentError(MisuseError, ValueError):
    """The agent's files have problems (all of them are in ``problems``); nothing was loaded."""

    def __init__(self, problems: list[AgentProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclasses.dataclass(frozen=True, slots=True)
class AgentCheck:
    """What checking an agent directory found: the spec when there was no problem, and everything reported."""

    spec: AgentSpec | None
    problems: list[AgentProblem]
    warnings: list[AgentProblem]


# -- paths and the problem collector ------------------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if _PLAIN_KEY.match(key) else f"{path}[{json.dumps(key)}]"


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


class _Problems:
    """Collects the problems (and warnings) of one file, with typed readers that report instead of raising."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[AgentProblem] = []
        self.warnings: list[AgentProblem] = []

    def add(self, path: str, code: str, message: str) -> None:
        self.problems.append(AgentProblem(self.file, path, code, message))

    def warn(self, path: str, code: str, message: str) -> None:
        self.warnings.append(AgentProblem(self.file, path, code, message))

    def table(self, value: Any, path: str) -> dict[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.add(path, "wrong-type", f"expected a table (object), got {_type_name(value)}")
        return None

    def known_keys(self, table: dict[str, Any], allowed: tuple[str, ...], path: str) -> None:
        for key in table:
            if key not in allowed:
                self.add(_key(path, key), "unknown-key", f"unknown key {key!r} (expected one of: {', '.join(allowed)})")

    def string(self, table: dict[str, Any], key: str, path: str, default: str = "") -> str:
        value = table.get(key, default)
        if isinstance(value, str):
            return value
        self.add(_key(path, key), "wrong-type", f"expected a string, got {_type_name(value)}")
        return default

    def prompt(self, table: dict[str, Any], key: str, path: str) -> str:
        """A scripted line: absent is fine, present must say something."""
        value = self.string(table, key, path)
        if key in table and isinstance(table[key], str) and not value.strip():
            self.add(_key(path, key), "empty-prompt", f"{key} is empty (leave it out, or say something)")
        return value

    def boolean(self, table: dict[str, Any], key: str, path: str, default: bool = False) -> bool:
        value = table.get(key, default)
        if isinstance(value, bool):
            return value
        self.add(_key(path, key), "wrong-type", f"expected true or false, got {_type_name(value)}")
        return default

    def number(self, table: dict[str, Any], key: str, path: str, default: float) -> float | None:
        value = table.get(key, default)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            return float(value)
        self.add(_key(path, key), "wrong-type", f"expected a number, got {_type_name(value)}")
        return None

    def integer(self, table: dict[str, Any], key: str, path: str, default: int) -> int | None:
        value = table.get(key, default)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        self.add(_key(path, key), "wrong-type", f"expected an integer, got {_type_name(value)}")
        return None

    def strings(self, table: dict[str, Any], key: str, path: str) -> list[str]:
        value = table.get(key, [])
        if not isinstance(value, list):
            self.add(_key(path, key), "wrong-type", f"expected a list of strings, got {_type_name(value)}")
            return []
        good = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                good.append(item)
            else:
                self.add(_index(_key(path, key), i), "wrong-type", f"expected a string, got {_type_name(item)}")
        return good

    def in_range(self, value: float | None, path: str, low: float, high: float, *, low_open: bool = False,
                 code: str = "out-of-range") -> None:
        if value is None:
            return
        too_low = value <= low if low_open else value < low
        if too_low or value > high:
            bound = f"more than {low:g}" if low_open else f"at least {low:g}"
            self.add(path, code, f"expected {bound} and at most {high:g}, got {value:g}")


# -- the flow -------------------------------------------------------------------------------------------------------------


def check_flow(data: Any, file: str, *, warnings: list[AgentProblem] | None = None,
               environ: Mapping[str, str] | None = None, agent_transfer_to: str | None = None,
               directory: str | Path | None = None) -> list[AgentProblem]:
    """Every problem of a flow (the parsed JSON or TOML of a flow file); [] when it is good.

    ``warnings``: a list the warnings (unused functions) are appended to. ``environ``: also report webhook
    environment references missing from it. ``agent_transfer_to``: the agent's transfer target ("" none), to
    report transfers without one; None: not known (a flow file checked alone). ``directory``: the agent's
    directory, to import its Python tools."""
    problems, found_warnings, _ = _read_flow(data, file, environ, agent_transfer_to, directory)
    if warnings is not None:
        warnings.extend(found_warnings)
    return problems


def load_flow_file(path: str | Path, *, warnings: list[AgentProblem] | None = None,
                   environ: Mapping[str, str] | None = None, agent_transfer_to: str | None = None,
                   directory: str | Path | None = None) -> tuple[FlowSpec | None, list[AgentProblem]]:
    """Read and check a flow file (JSON or TOML by its suffix): (the flow, []) or (None, every problem)."""
    path = Path(path)
    data, problems = _parse_file(path, str(path))
    if problems:
        return None, problems
    problems, found_warnings, flow = _read_flow(data, str(path), environ, agent_transfer_to, directory)
    if warnings is not None:
        warnings.extend(found_warnings)
    return (None if problems else flow), problems


def _parse_file(path: Path, file: str) -> tuple[Any, list[AgentProblem]]:
    if path.suffix not in FLOW_SUFFIXES:
        return None, [AgentProblem(file, "$", "unsupported-format", f"expected a .json or .toml file, got {path.name!r}")]
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [AgentProblem(file, "$", "missing-file", "no such file")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [AgentProblem(file, "$", "unreadable-file", f"cannot read it: {exc}")]
    if path.suffix == ".json":
        try:
            return json.loads(text), []
        except json.JSONDecodeError as exc:
            return None, [AgentProblem(file, "$", "syntax", f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
    try:
        return tomllib.loads(text), []
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line L, column C)"
        return None, [AgentProblem(file, "$", "syntax", f"invalid TOML: {exc}")]


def _read_flow(data: Any, file: str, environ: Mapping[str, str] | None, agent_transfer_to: str | None,
               directory: str | Path | None) -> tuple[list[AgentProblem], list[AgentProblem], FlowSpec | None]:
    p = _Problems(file)
    root = p.table(data, "$")
    if root is None:
        return p.problems, p.warnings, None
    p.known_keys(root, ("initial_node", "nodes", "functions"), "$")
    initial = p.string(root, "initial_node", "$")
    if "initial_node" not in root:
        p.add("$.initial_node", "missing-key", "initial_node is required")

    raw_functions = root.get("functions", {}) if isinstance(root.get("functions", {}), dict) else {}
    nodes: dict[str, NodeSpec] = {}
    if "nodes" not in root:
        p.add("$.nodes", "missing-key", "nodes is required")
    raw_nodes = p.table(root.get("nodes", {}), "$.nodes") or {}
    if "nodes" in root and isinstance(root["nodes"], dict) and not raw_nodes:
        p.add("$.nodes", "empty-value", "a flow needs at least one node")
    for name, raw in raw_nodes.items():
        node = _read_node(p, name, raw, _key("$.nodes", name), raw_functions)
        if node is not None:
            nodes[name] = node

    functions: dict[str, FunctionSpec] = {}
    p.table(root.get("functions", {}), "$.functions")
    for name, raw in raw_functions.items():
        fn = _read_function(p, name, raw, _key("$.functions", name), environ, agent_transfer_to, directory)
        if fn is not None:
            functions[name] = fn

    # Transitions name nodes; checked once every node is known (with no nodes at all, that one problem says it).
    for name, raw in raw_functions.items() if raw_nodes else ():
        transitions = raw.get("transitions") if isinstance(raw, dict) else None
        if isinstance(transitions, dict):
            for key, target in transitions.items():
                if key in TRANSITION_KEYS and isinstance(target, str) and target not in raw_nodes:
                    p.add(_key(_key(_key("$.functions", name), "transitions"), key), "unknown-node",
                          f"transition {key} goes to {target!r}, which is not a node")

    if initial and raw_nodes and initial not in raw_nodes:
        p.add("$.initial_node", "unknown-initial-node", f"initial node {initial!r} is not a node")
    elif initial in raw_nodes:
        _check_graph(p, initial, raw_nodes, raw_functions)

    listed = {f for node in nodes.values() for f in node.functions}
    for name in raw_functions:
        if name not in listed:
            p.warn(_key("$.functions", name), "unused-function", f"function {name!r} is listed by no node")

    if p.problems:
        return p.problems, p.warnings, None
    return [], p.warnings, FlowSpec(initial_node=initial, nodes=nodes, functions=functions)


def _node_functions(raw_node: Any, raw_functions: dict[str, Any]) -> list[dict[str, Any]]:
    names = raw_node.get("functions", []) if isinstance(raw_node, dict) else []
    if not isinstance(names, list):
        return []
    return [raw_functions[n] for n in names if isinstance(n, str) and isinstance(raw_functions.get(n), dict)]


def _transition_targets(raw_function: dict[str, Any]) -> list[str]:
    transitions = raw_function.get("transitions", {})
    if not isinstance(transitions, dict):
        return []
    return [t for k, t in transitions.items() if k in TRANSITION_KEYS and isinstance(t, str)]


def _check_graph(p: _Problems, initial: str, raw_nodes: dict[str, Any], raw_functions: dict[str, Any]) -> None:
    """Every node reachable from the initial one, and none a trap the call cannot leave."""
    reached = {initial}
    todo = [initial]
    while todo:
        for fn in _node_functions(raw_nodes[todo.pop()], raw_functions):
            for target in _transition_targets(fn):
                if target in raw_nodes and target not in reached:
                    reached.add(target)
                    todo.append(target)
    for name, raw in raw_nodes.items():
        path = _key("$.nodes", name)
        if name not in reached:
            p.add(path, "unreachable-node", f"node {name!r} cannot be reached from the initial node {initial!r}")
        ends_itself = isinstance(raw, dict) and (raw.get("end") is True or bool(raw.get("transfer_to")))
        if not isinstance(raw, dict) or ends_itself:
            continue
        ways_out = [fn for fn in _node_functions(raw, raw_functions)
                    if fn.get("action") in BUILTIN_ACTIONS
                    or any(t != name and t in raw_nodes for t in _transition_targets(fn))]
        if not ways_out:
            p.add(path, "dead-end-node", f"node {name!r} has no way out: give it a function that transitions to "
                                         "another node or ends or transfers the call, or set end or transfer_to")


def _read_messages(p: _Problems, node: dict[str, Any], key: str, path: str) -> tuple[Message, ...]:
    raw = node.get(key, [])
    path = _key(path, key)
    if not isinstance(raw, list):
        p.add(path, "wrong-type", f"expected a list of messages, got {_type_name(raw)}")
        return ()
    messages = []
    for i, item in enumerate(raw):
        item_path = _index(path, i)
        message = p.table(item, item_path)
        if message is None:
            continue
        p.known_keys(message, ("role", "content"), item_path)
        role = p.string(message, "role", item_path)
        content = p.string(message, "content", item_path)
        if role not in MESSAGE_ROLES:
            p.add(_key(item_path, "role"), "unknown-role", f"role {role!r}: expected one of {', '.join(MESSAGE_ROLES)}")
        if not content.strip():
            p.add(_key(item_path, "content"), "empty-message", "a message needs content")
        messages.append(Message(role=role, content=content))
    return tuple(messages)


def _read_node(p: _Problems, name: str, raw: Any, path: str, raw_functions: dict[str, Any]) -> NodeSpec | None:
    node = p.table(raw, path)
    if node is None:
        return None
    p.known_keys(node, NODE_KEYS, path)
    functions = p.strings(node, "functions", path)
    for i, fn in enumerate(functions):
        if fn not in raw_functions:
            p.add(_index(_key(path, "functions"), i), "unknown-function", f"function {fn!r} is not defined in functions")
    strategy = p.string(node, "context_strategy", path, "keep")
    if strategy not in CONTEXT_STRATEGIES:
        p.add(_key(path, "context_strategy"), "unknown-context-strategy",
              f"context_strategy {strategy!r}: expected one of {', '.join(CONTEXT_STRATEGIES)}")
    gate_policy = p.string(node, "gate_policy", path)
    if gate_policy and gate_policy not in GATE_POLICIES:
        p.add(_key(path, "gate_policy"), "unknown-gate-policy",
              f"gate_policy {gate_policy!r}: expected one of {', '.join(GATE_POLICIES)}")
    transfer_to = p.string(node, "transfer_to", path)
    _check_transfer_target(p, transfer_to, _key(path, "transfer_to"))
    return NodeSpec(
        name=name,
        role_messages=_read_messages(p, node, "role_messages", path),
        task_messages=_read_messages(p, node, "task_messages", path),
        functions=tuple(functions), context_strategy=strategy, say=p.prompt(node, "say", path),
        end=p.boolean(node, "end", path), transfer_to=transfer_to, gate_policy=gate_policy,
        forbidden=tuple(_phrases(p, node, "forbidden", path)),
    )


def _phrases(p: _Problems, table: dict[str, Any], key: str, path: str) -> list[str]:
    phrases = p.strings(table, key, path)
    for i, phrase in enumerate(phrases):
        if not phrase.strip():
            p.add(_index(_key(path, key), i), "empty-value", "an empty phrase would forbid everything")
    return phrases


def _check_transfer_target(p: _Problems, target: str, path: str) -> None:
    if target and not TRANSFER_TARGET.match(target):
        p.add(path, "bad-transfer-target", f"{target!r}: expected a phone number (+15550100) or a SIP URI (sip:...)")


def _read_function(p: _Problems, name: str, raw: Any, path: str, environ: Mapping[str, str] | None,
                   agent_transfer_to: str | None, directory: str | Path | None) -> FunctionSpec | None:
    if not FUNCTION_NAME.match(name):
        p.add(path, "bad-function-name", f"function name {name!r}: expected 1-64 letters, digits, _ or -")
    fn = p.table(raw, path)
    if fn is None:
        return None
    p.known_keys(fn, FUNCTION_KEYS, path)
    description = p.string(fn, "description", path)
    parameters = _read_parameters(p, fn, _key(path, "parameters"))

    tool: Tool | None = None
    if "webhook" in fn and "python" in fn:
        p.add(path, "two-tools", "a function runs one tool: a webhook or a python entry, not both")
    if "webhook" in fn:
        tool = _read_webhook(p, fn["webhook"], _key(path, "webhook"), environ)
    elif "python" in fn:
        tool = _read_python(p, fn, path, directory)
    if "timeout_s" in fn and "python" not in fn:
        p.add(_key(path, "timeout_s"), "misplaced-key", "timeout_s here is a python tool's (a webhook has its own)")

    action = p.string(fn, "action", path)
    if action and action not in BUILTIN_ACTIONS:
        p.add(_key(path, "action"), "unknown-action", f"action {action!r}: expected one of {', '.join(BUILTIN_ACTIONS)}")
    transfer_to = p.string(fn, "transfer_to", path)
    _check_transfer_target(p, transfer_to, _key(path, "transfer_to"))
    if "transfer_to" in fn and action != "transfer":
        p.add(_key(path, "transfer_to"), "misplaced-key", "transfer_to needs action = \"transfer\"")
    if action == "transfer" and not transfer_to and agent_transfer_to == "":
        p.add(_key(path, "action"), "missing-transfer-target",
              "a transfer needs a target: set this function's transfer_to or the agent's transfer_to")
    elif action == "transfer" and not transfer_to and agent_transfer_to is None:
        # a flow checked on its own: the agent that uses it must name the target
        p.warn(_key(path, "action"), "agent-transfer-target",
               "a transfer without transfer_to goes to the agent's transfer_to, which agent.toml must set")

    confirm = p.boolean(fn, "confirm", path)
    confirm_prompt = p.prompt(fn, "confirm_prompt", path)
    if confirm and "confirm_prompt" not in fn:
        p.add(_key(path, "confirm_prompt"), "missing-confirm-prompt", "confirm = true needs the confirm_prompt to say")
    if confirm_prompt and not ("parameters" in fn and parameters is None):  # bad parameters: reported already
        _check_confirm_prompt(p, confirm_prompt, _key(path, "confirm_prompt"), parameters)

    transitions: dict[str, str] = {}
    raw_transitions = fn.get("transitions", {})
    transitions_path = _key(path, "transitions")
    if p.table(raw_transitions, transitions_path) is not None:
        for key, target in raw_transitions.items():
            if key not in TRANSITION_KEYS:
                p.add(_key(transitions_path, key), "unknown-transition",
                      f"transition {key!r}: expected {' or '.join(TRANSITION_KEYS)}")
            elif not isinstance(target, str):
                p.add(_key(transitions_path, key), "wrong-type", f"expected a node name, got {_type_name(target)}")
            else:
                transitions[key] = target

    writes_default = not (isinstance(tool, Webhook) and tool.method == "GET")  # design: a GET only reads
    return FunctionSpec(
        name=name, description=description, parameters=parameters or {"type": "object", "properties": {}},
        tool=tool, action=action, transfer_to=transfer_to, confirm=confirm, confirm_prompt=confirm_prompt,
        writes=p.boolean(fn, "writes", path, writes_default), filler=p.prompt(fn, "filler", path),
        transitions=transitions,
    )


def _read_parameters(p: _Problems, fn: dict[str, Any], path: str) -> dict[str, Any] | None:
    if "parameters" not in fn:
        return None
    parameters = p.table(fn["parameters"], path)
    if parameters is None:
        return None
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in exc.absolute_path)
        p.add(path + where, "invalid-schema", f"not a valid JSON Schema: {exc.message}")
        return None
    if parameters.get("type") != "object":
        p.add(_key(path, "type"), "parameters-not-object", "parameters must be a JSON Schema of type \"object\"")
        return None
    _check_spoken_kinds(p, parameters, path)
    return parameters


def _check_confirm_prompt(p: _Problems, prompt: str, path: str, parameters: dict[str, Any] | None) -> None:
    properties = parameters.get("properties", {}) if parameters else {}
    for placeholder in PLACEHOLDER.findall(prompt):
        if placeholder not in properties:
            p.add(path, "unknown-placeholder", f"placeholder {{{placeholder}}} names no parameter")
    outside = PLACEHOLDER.sub("", prompt)
    if "{" in outside or "}" in outside:
        p.add(path, "bad-placeholder", "unbalanced { or } (placeholders are {parameter})")
    if any(ch.isdigit() for ch in outside):
        # The prompt is spoken ungated: a number in it must come from the caller's own arguments.
        p.add(path, "digit-in-prompt", "a confirm_prompt may hold no digit outside a placeholder")
    for placeholder in dict.fromkeys(PLACEHOLDER.findall(prompt)):
        schema = properties.get(placeholder)
        if isinstance(schema, dict) and spoken_kind(schema) is None and _looks_spoken(schema):
            p.warn(path, "unspoken-placeholder",
                   f"{{{placeholder}}} is read out as written: give its schema a \"format\" (date, time, date-time) "
                   f"or \"{KIND_KEY}\" (money, phone) to have it said as a person says it")


def _looks_spoken(schema: dict[str, Any]) -> bool:
    """A parameter a person would say differently from how it is written: one its schema constrains to a
    pattern of digits ("^([01][0-9]|2[0-3]):[0-5][0-9]$" is a time said "ten a.m.")."""
    pattern = str(schema.get("pattern", ""))
    return "\\d" in pattern or "0-9" in pattern


def _check_spoken_kinds(p: _Problems, schema: Any, path: str) -> None:
    """``x-kind`` and ``x-currency`` (voicecore/agent/speech.py) hold known values, wherever they stand."""
    if isinstance(schema, dict):
        if KIND_KEY in schema and schema[KIND_KEY] not in SPOKEN_KINDS:
            p.add(_key(path, KIND_KEY), "unknown-kind",
                  f"{schema[KIND_KEY]!r}: expected one of {', '.join(SPOKEN_KINDS)}")
        if CURRENCY_KEY in schema and str(schema[CURRENCY_KEY]).upper() not in CURRENCIES:
            p.add(_key(path, CURRENCY_KEY), "unknown-currency",
                  f"{schema[CURRENCY_KEY]!r}: expected one of {', '.join(sorted(set(CURRENCIES) - {'KR'}))}")
        for key, value in schema.items():
            if isinstance(value, (dict, list)):
                _check_spoken_kinds(p, value, _key(path, str(key)))
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            _check_spoken_kinds(p, item, _index(path, i))


def _read_webhook(p: _Problems, raw: Any, path: str, environ: Mapping[str, str] | None) -> Webhook | None:
    hook = p.table(raw, path)
    if hook is None:
        return None
    p.known_keys(hook, WEBHOOK_KEYS, path)
    if "url" not in hook:
        p.add(_key(path, "url"), "missing-key", "a webhook needs a url")
    url = p.string(hook, "url", path)
    if "url" in hook and isinstance(hook["url"], str):
        _check_url(p, url, _key(path, "url"), environ)
    method = p.string(hook, "method", path, "POST").upper()
    if method not in HTTP_METHODS:
        p.add(_key(path, "method"), "unknown-method", f"method {method!r}: expected one of {', '.join(HTTP_METHODS)}")
    headers: list[tuple[str, str]] = []
    raw_headers = hook.get("headers", {})
    headers_path = _key(path, "headers")
    if p.table(raw_headers, headers_path) is not None:
        for name, value in raw_headers.items():
            if not isinstance(value, str):
                p.add(_key(headers_path, name), "wrong-type", f"expected a string, got {_type_name(value)}")
                continue
            if value.startswith(ENV_HEADER_PREFIX):
                env_name = value[len(ENV_HEADER_PREFIX):]
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name):
                    p.add(_key(headers_path, name), "bad-env-reference", f"{value!r}: expected env:NAME")
                elif environ is not None and env_name not in environ:
                    p.add(_key(headers_path, name), "missing-env", f"environment variable {env_name} is not set")
            headers.append((name, value))
    timeout_s = p.number(hook, "timeout_s", path, 5.0)
    p.in_range(timeout_s, _key(path, "timeout_s"), 0, MAX_TOOL_TIMEOUT_S, low_open=True, code="bad-timeout")
    retries = p.integer(hook, "retries", path, 1)
    p.in_range(retries, _key(path, "retries"), 0, MAX_RETRIES, code="bad-retries")
    return Webhook(url=url, method=method, headers=tuple(headers), timeout_s=timeout_s or 5.0, retries=retries or 0)


def _check_url(p: _Problems, url: str, path: str, environ: Mapping[str, str] | None) -> None:
    names = ENV_REFERENCE.findall(url)
    if "$" in ENV_REFERENCE.sub("", url):
        p.add(path, "bad-url", f"{url!r}: environment references are written ${{NAME}}")
        return
    if environ is not None:
        missing = [n for n in names if n not in environ]
        for name in missing:
            p.add(path, "missing-env", f"environment variable {name} is not set")
        if missing:
            return
        url = ENV_REFERENCE.sub(lambda m: environ[m.group(1)], url)
    elif url.startswith("${"):
        return  # the base URL comes from the environment when the tool runs: any http(s) URL can follow
    else:
        url = ENV_REFERENCE.sub("x", url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        p.add(path, "bad-url", f"{url!r}: expected an http:// or https:// URL")


def _read_python(p: _Problems, fn: dict[str, Any], path: str, directory: str | Path | None) -> PythonTool | None:
    entry = p.string(fn, "python", path)
    timeout_s = p.number(fn, "timeout_s", path, 5.0)
    p.in_range(timeout_s, _key(path, "timeout_s"), 0, MAX_TOOL_TIMEOUT_S, low_open=True, code="bad-timeout")
    if not isinstance(fn["python"], str):
        return None
    if not PYTHON_ENTRY.match(entry):
        p.add(_key(path, "python"), "bad-python-entry", f"{entry!r}: expected module:function")
        return None
    if directory is not None:
        _check_python_entry(p, entry, _key(path, "python"), Path(directory))
    return PythonTool(entry=entry, timeout_s=timeout_s or 5.0)


def _check_python_entry(p: _Problems, entry: str, path: str, directory: Path) -> None:
    module_name, _, function_name = entry.partition(":")
    try:
        module = import_tool_module(module_name, directory)
    except Exception as exc:  # the agent's own code: whatever it raises on import is the author's problem to see
        p.add(path, "python-import-failed", f"cannot import {module_name}: {type(exc).__name__}: {exc}")
        return
    function: Any = module
    for part in function_name.split("."):
        function = getattr(function, part, None)
    if function is None:
        p.add(path, "python-not-found", f"module {module_name} has no {function_name}")
    elif not inspect.iscoroutinefunction(function):
        p.add(path, "python-not-async", f"{entry} must be an async def: {python_tool_signature(function)}")
    else:
        problem = python_tool_signature_problem(function)
        if problem:
            p.add(path, "python-bad-signature", f"{entry}: {problem}")


TOOL_SIGNATURE = "async def f(arguments, context)"


def _where(function: Any) -> str:
    """'/agent/tools.py:12' (the file and line of a function's def), or its name when they are not known."""
    try:
        target = inspect.unwrap(function)
        file = inspect.getsourcefile(target) or inspect.getfile(target)
        _, line = inspect.getsourcelines(target)
    except (OSError, TypeError):
        return getattr(function, "__qualname__", repr(function))
    return f"{file}:{line}"


def python_tool_signature(function: Any) -> str:
    """Where a tool function is and what it takes: '/agent/tools.py:12 renew(card)'."""
    try:
        parameters = str(inspect.signature(function))
    except (TypeError, ValueError):
        parameters = "(?)"
    return f"{_where(function)} {getattr(function, '__name__', '?')}{parameters}"


def python_tool_signature_problem(function: Any) -> str:
    """"" when the model worker can call ``function(arguments, context)``; else what is wrong and where."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return ""  # a builtin or C function without a signature: nothing to check before it runs
    try:
        signature.bind(object(), object())
    except TypeError as exc:
        return f"{python_tool_signature(function)} cannot be called as {TOOL_SIGNATURE} ({exc})"
    return ""


def import_tool_module(module_name: str, directory: str | Path) -> Any:
    """Import a Python tool's module with the agent's directory first on sys.path.

    The directory stays on sys.path (the tool may import its siblings when it runs). A module of the same
    name imported earlier from elsewhere (another agent's tools.py) is replaced: the agent's own file wins."""
    directory = str(Path(directory).resolve())
    if sys.path[:1] != [directory]:
        if directory in sys.path:
            sys.path.remove(directory)
        sys.path.insert(0, directory)
    top = module_name.partition(".")[0]
    if importlib.machinery.PathFinder.find_spec(top, [directory]) is not None:
        cached = sys.modules.get(top)
        cached_file = getattr(cached, "__file__", None) or ""
        if cached is not None and not cached_file.startswith(directory + "/"):
            for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
                del sys.modules[name]
    importlib.invalidate_caches()
    return importlib.import_module(module_name)


# -- agent.toml --------------------------------------------------------------------------------------------------------


def default_flow() -> FlowSpec:
    """The flow of an agent without a flow file: one node that can only end the call."""
    end_call = FunctionSpec(name="end_call", description=END_CALL_DESCRIPTION, action="end_call")
    return FlowSpec(initial_node=DEFAULT_NODE, nodes={DEFAULT_NODE: NodeSpec(name=DEFAULT_NODE, functions=("end_call",))},
                    functions={"end_call": end_call})


def default_agent_dir() -> Path:
    """The shipped default agent (package data voicecore/agents/default)."""
    return Path(str(importlib.resources.files("voicecore").joinpath("agents", "default")))


def load_configured_agent(config: Any, environ: Mapping[str, str] | None = None) -> AgentSpec:
    """The agent of this configuration: ``config.agent``'s directory, or the shipped default."""
    return load_agent(config.agent or default_agent_dir(), environ)


def load_agent(directory: str | Path, environ: Mapping[str, str] | None = None) -> AgentSpec:
    """Read and check an agent directory; raises AgentError with every problem found.

    ``environ`` (as ``voicecore up`` passes): webhook environment references missing from it are problems."""
    check = check_agent(directory, environ)
    if check.spec is None:
        raise AgentError(check.problems)
    return check.spec


def check_agent(directory: str | Path, environ: Mapping[str, str] | None = None) -> AgentCheck:
    """Every problem and warning of an agent directory, and its spec when there is no problem."""
    root = Path(directory).resolve()
    agent_path = root / AGENT_FILE
    file = str(agent_path)
    if not root.is_dir():
        return AgentCheck(None, [AgentProblem(str(root), "$", "missing-file", "no such agent directory")], [])
    data, parse_problems = _parse_file(agent_path, file)
    if parse_problems:
        return AgentCheck(None, parse_problems, [])
    p = _Problems(file)
    values = _read_agent_table(p, data, root)
    problems, warnings = list(p.problems), list(p.warnings)

    flow = default_flow()
    flow_file = values.pop("flow_file")
    if flow_file is not None:
        flow_warnings: list[AgentProblem] = []
        loaded, flow_problems = load_flow_file(flow_file, warnings=flow_warnings, environ=environ,
                                               agent_transfer_to=values.get("transfer_to", ""), directory=root)
        problems += flow_problems
        warnings += flow_warnings
        if loaded is not None:
            flow = loaded
    if not problems:
        problems += _vendor_problems(file, values, flow)
        warnings += _vendor_warnings(file, values)
    if problems:
        return AgentCheck(None, problems, warnings)
    return AgentCheck(AgentSpec(flow=flow, directory=str(root), **values), [], warnings)


def _vendor_problems(file: str, values: dict[str, Any], flow: FlowSpec) -> list[AgentProblem]:
    """The agent's settings its model vendor does not support, each named (only Gemini has such)."""
    from voicecore.gemini import agent_check
    from voicecore.gemini.driver import vendor_of

    if vendor_of(values.get("model", ""), values.get("model_vendor", "")) != "gemini":
        return []
    return [AgentProblem(file, path, "unsupported-by-vendor", f"{message} (model vendor gemini)")
            for path, message in agent_check.unsupported_settings(values, flow)]


def _vendor_warnings(file: str, values: dict[str, Any]) -> list[AgentProblem]:
    """What a vendor does with the agent that its author should know: a Gemini session's instructions hold the
    knowledge folder up to a size (voicecore/gemini/driver.py ``session_knowledge``)."""
    from voicecore.gemini.driver import KNOWLEDGE_MAX_CHARS, session_knowledge, vendor_of
    from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir

    if vendor_of(values.get("model", ""), values.get("model_vendor", "")) != "gemini" or not values.get("knowledge_dir"):
        return []
    try:
        snippets = KnowledgeBase.from_documents(load_knowledge_dir(values["knowledge_dir"])).snippets
    except (OSError, UnicodeDecodeError, ValueError):
        return []  # the validator names an unreadable folder when it loads it
    left_out = session_knowledge([{"text": s.text, "file": s.file} for s in snippets])[1]
    if not left_out:
        return []
    return [AgentProblem(file, "$.knowledge", "knowledge-left-out",
                         f"{left_out} of {len(snippets)} knowledge snippets are left out of a Gemini session's "
                         f"instructions (they hold {KNOWLEDGE_MAX_CHARS} characters of it): the model does not "
                         "know them, and the gate still rejects a number it says that is not in the knowledge")]


def _read_agent_table(p: _Problems, data: dict[str, Any], root: Path) -> dict[str, Any]:
    """AgentSpec's fields (without flow) from agent.toml, and ``flow_file``: the flow file's path or None."""
    p.known_keys(data, AGENT_KEYS, "$")
    values: dict[str, Any] = {}
    name = p.string(data, "name", "$")
    if "name" not in data:
        p.add("$.name", "missing-key", "name is required")
    elif isinstance(data["name"], str) and not name.strip():
        p.add("$.name", "empty-value", "name is empty")
    values["name"] = name
    values["instructions"] = _read_instructions(p, data, root)
    for key in ("model", "voice", "transfer_to"):
        if key == "model" and isinstance(data.get("model"), dict):
            _read_model_table(p, data["model"], values)
        elif key in data:
            values[key] = p.string(data, key, "$")
    if "voice" in data and isinstance(data["voice"], str) and not values["voice"].strip():
        p.add("$.voice", "empty-value", "voice is empty (leave it out for the default)")
    if "safe_line" in data:
        values["safe_line"] = p.prompt(data, "safe_line", "$")
    _check_transfer_target(p, values.get("transfer_to", ""), "$.transfer_to")
    if "greeting" in data:
        values["greeting"] = p.prompt(data, "greeting", "$")

    if "languages" in data:
        languages = p.strings(data, "languages", "$")
        if isinstance(data["languages"], list) and not data["languages"]:
            p.add("$.languages", "empty-value", "languages needs at least one language code")
        for i, code in enumerate(languages):
            if not LANGUAGE_CODE.match(code):
                p.add(_index("$.languages", i), "bad-language", f"{code!r}: expected a short language code (en, sv, en-GB)")
        values["languages"] = tuple(languages)
    if "forbidden" in data:
        values["forbidden"] = tuple(_phrases(p, data, "forbidden", "$"))
    if "max_turns" in data:
        values["max_turns"] = p.integer(data, "max_turns", "$", 0)
        p.in_range(values["max_turns"], "$.max_turns", 0, 10_000)

    knowledge = p.string(data, "knowledge", "$", "knowledge")
    values["knowledge_dir"] = ""
    if knowledge:
        folder = (root / knowledge).resolve()
        if folder.is_dir():
            values["knowledge_dir"] = str(folder)
        elif "knowledge" in data:  # the default folder may be absent; one that was named must exist
            p.add("$.knowledge", "missing-knowledge", f"knowledge folder {knowledge!r} does not exist")

    _read_gate(p, data, values)
    _read_lines(p, data, values, root)
    _read_silence(p, data, values)
    _read_failure(p, data, values)
    _read_tools(p, data, values)
    _read_turns(p, data, values)
    _read_voices(p, data, values)
    _read_privacy(p, data, values)
    _read_outbound(p, data, values)
    values["flow_file"] = _flow_file(p, data, root)
    return {k: v for k, v in values.items() if v is not None or k == "flow_file"}


def _read_instructions(p: _Problems, data: dict[str, Any], root: Path) -> str:
    if "instructions" in data and "instructions_file" in data:
        p.add("$.instructions_file", "conflicting-keys", "give instructions or instructions_file, not both")
        return ""
    if "instructions" in data:
        text = p.string(data, "instructions", "$")
        if isinstance(data["instructions"], str) and not text.strip():
            p.add("$.instructions", "empty-value", "instructions is empty")
        return text
    if "instructions_file" not in data:
        p.add("$.instructions", "missing-key", "instructions (or instructions_file) is required")
        return ""
    name = p.string(data, "instructions_file", "$")
    if not isinstance(data["instructions_file"], str):
        return ""
    try:
        text = (root / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        p.add("$.instructions_file", "missing-file", f"instructions file {name!r} does not exist")
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        p.add("$.instructions_file", "unreadable-file", f"cannot read {name!r}: {exc}")
        return ""
    if not text.strip():
        p.add("$.instructions_file", "empty-value", f"instructions file {name!r} is empty")
    return text.strip()


def _section(p: _Problems, data: dict[str, Any], key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    section = p.table(data.get(key, {}), _key("$", key))
    if section is None:
        return {}
    p.known_keys(section, allowed, _key("$", key))
    return section


def _read_gate(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    gate = _section(p, data, "gate", ("answers", "prompts"))
    for key in ("answers", "prompts"):
        policy = p.string(gate, key, "$.gate", "off")
        if policy not in GATE_POLICIES:
            p.add(_key("$.gate", key), "unknown-gate-policy", f"{policy!r}: expected one of {', '.join(GATE_POLICIES)}")
        values["gate_" + key] = policy


def _read_lines(p: _Problems, data: dict[str, Any], values: dict[str, Any], root: Path) -> None:
    section = _section(p, data, "lines", (*LINE_KINDS, "audio"))
    lines = dict(DEFAULT_LINES)
    for key in LINE_KINDS:
        if key in section:
            lines[key] = p.prompt(section, key, "$.lines")
    values["lines"] = lines
    # [lines.audio]: the runtime's fallback lines as WAV files, checked here so a bad one never reaches a call
    from voicecore.fallback.lines import LineAudioError, check_line, wav_to_line

    audio = p.table(section.get("audio", {}), "$.lines.audio") or {}
    p.known_keys(audio, LINE_AUDIO_KINDS, "$.lines.audio")
    files: dict[str, str] = {}
    for kind in LINE_AUDIO_KINDS:
        if kind not in audio:
            continue
        name = p.string(audio, kind, "$.lines.audio")
        if not isinstance(audio[kind], str):
            continue
        path = (root / name).resolve()
        if not path.is_file():
            p.add(_key("$.lines.audio", kind), "missing-file", f"audio file {name!r} does not exist")
            continue
        try:
            check_line(kind, wav_to_line(path))
        except LineAudioError as exc:
            p.add(_key("$.lines.audio", kind), "bad-audio", f"{name!r}: {exc}")
            continue
        files[kind] = str(path)
    values["line_audio"] = files


def _read_silence(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    section = _section(p, data, "silence", ("checkin_s", "goodbye_after_s"))
    if "checkin_s" in section:
        raw = section["checkin_s"]
        if not isinstance(raw, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
            p.add("$.silence.checkin_s", "wrong-type", "expected a list of seconds")
        elif any(v <= 0 for v in raw) or any(b <= a for a, b in zip(raw, raw[1:])):
            p.add("$.silence.checkin_s", "bad-checkin", f"{raw}: expected positive seconds, each more than the last")
        else:
            values["checkin_s"] = tuple(float(v) for v in raw)
    if "goodbye_after_s" in section:
        values["goodbye_after_s"] = p.number(section, "goodbye_after_s", "$.silence", 10.0)
        p.in_range(values["goodbye_after_s"], "$.silence.goodbye_after_s", 0, 600, low_open=True)


def _read_failure(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    section = _section(p, data, "failure", ("after_failures", "after_s", "action", "hold_every_s"))
    if "after_failures" in section:
        count = p.integer(section, "after_failures", "$.failure", 5)
        p.in_range(count, "$.failure.after_failures", 1, 100)
        if count is not None:
            values["failure_after_failures"] = count
    if "after_s" in section:
        values["failure_after_s"] = p.number(section, "after_s", "$.failure", 10.0)
        p.in_range(values["failure_after_s"], "$.failure.after_s", 0, 600, low_open=True)
    if "hold_every_s" in section:  # 0: the hold line once per spell
        values["failure_hold_every_s"] = p.number(section, "hold_every_s", "$.failure", 3.0)
        p.in_range(values["failure_hold_every_s"], "$.failure.hold_every_s", 0, 600)
    if "action" in section:
        action = section["action"]
        if action not in ("transfer", "hangup"):
            p.add("$.failure.action", "unknown-failure-action", f"{action!r}: expected transfer or hangup")
        else:
            values["failure_action"] = action


# [tools] key -> (kind, low, high, low excluded): ranges a call can live with.
_TOOL_SETTINGS: dict[str, tuple[type, float, float, bool]] = {
    "filler_after_ms": (int, 0, 60_000, True),
    "dedupe_s": (float, 0, 3600, False),
    "confirm_timeout_s": (float, 0, 120, True),
    "debounce_quiet_ms": (int, 0, 30_000, False),
    "debounce_cap_ms": (int, 0, 60_000, False),
}


def _read_tools(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    section = _section(p, data, "tools", tuple(_TOOL_SETTINGS))
    for key, (kind, low, high, low_open) in _TOOL_SETTINGS.items():
        if key not in section:
            continue
        value = p.integer(section, key, "$.tools", 0) if kind is int else p.number(section, key, "$.tools", 0.0)
        p.in_range(value, _key("$.tools", key), low, high, low_open=low_open)
        values[key] = value
    defaults = AgentSpec.__dataclass_fields__
    quiet = values.get("debounce_quiet_ms", defaults["debounce_quiet_ms"].default)
    cap = values.get("debounce_cap_ms", defaults["debounce_cap_ms"].default)
    if quiet is not None and cap is not None and cap < quiet:  # type: ignore[operator]
        p.add("$.tools.debounce_cap_ms", "out-of-range", f"debounce_cap_ms ({cap}) is below debounce_quiet_ms ({quiet})")


def _read_model_table(p: _Problems, table: dict[str, Any], values: dict[str, Any]) -> None:
    """[model]: the vendor (openai, gemini) and the model's name; ``model = "NAME"`` alone is the short form
    (the vendor then follows the name: "gemini-..." is Google's)."""
    p.known_keys(table, ("vendor", "name"), "$.model")
    vendor = p.string(table, "vendor", "$.model")
    if "vendor" in table and vendor not in MODEL_VENDORS:
        p.add("$.model.vendor", "unknown-vendor", f"{vendor!r}: expected one of {', '.join(MODEL_VENDORS)}")
        return
    name = p.string(table, "name", "$.model")
    if "name" in table and not name.strip():
        p.add("$.model.name", "empty-value", "name is empty (leave it out for the vendor's default model)")
    if vendor == "gemini" and not name:
        from voicecore.gemini.driver import DEFAULT_MODEL
        name = DEFAULT_MODEL
    values["model"] = name
    values["model_vendor"] = vendor


def _read_voices(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    """[voices]: the voice to use on each model vendor, for an agent that runs on more than one (``voice``
    names the voice of every vendor that has none here)."""
    section = _section(p, data, "voices", MODEL_VENDORS)
    voices: dict[str, str] = {}
    for vendor in MODEL_VENDORS:
        if vendor in section:
            voice = p.string(section, vendor, "$.voices")
            if not voice.strip():
                p.add(_key("$.voices", vendor), "empty-value", f"{vendor} is empty (leave it out for `voice`)")
            voices[vendor] = voice
    if voices:
        values["voices"] = voices


def _read_turns(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    """[turns]: how the caller's turns are detected and read (voicecore/call/backchannels.py)."""
    section = _section(p, data, "turns", ("detection", "eagerness", "transcription_model", "backchannels",
                                          "transcript_wait_ms"))
    if "detection" in section:
        detection = p.string(section, "detection", "$.turns")
        if detection not in TURN_DETECTIONS:
            p.add("$.turns.detection", "unknown-turn-detection", f"{detection!r}: expected one of {', '.join(TURN_DETECTIONS)}")
        else:
            values["turn_detection"] = detection
    if "eagerness" in section:
        eagerness = p.string(section, "eagerness", "$.turns")
        if eagerness not in VAD_EAGERNESS:
            p.add("$.turns.eagerness", "unknown-eagerness", f"{eagerness!r}: expected one of {', '.join(VAD_EAGERNESS)}")
        elif values.get("turn_detection", "server_vad") != "semantic_vad":
            p.add("$.turns.eagerness", "conflicting-keys", 'eagerness applies to detection = "semantic_vad" only')
        else:
            values["vad_eagerness"] = eagerness
    if "transcription_model" in section:
        model = p.string(section, "transcription_model", "$.turns")
        if not model.strip():
            p.add("$.turns.transcription_model", "empty-value", "transcription_model is empty (leave it out for the default)")
        else:
            if model not in TRANSCRIPTION_MODELS:
                p.warn("$.turns.transcription_model", "unknown-transcription-model",
                       f"{model!r} is not one of {', '.join(TRANSCRIPTION_MODELS)}: the vendor may refuse it")
            values["transcription_model"] = model
    if "backchannels" in section:
        phrases = p.strings(section, "backchannels", "$.turns")
        for i, phrase in enumerate(phrases):
            if not phrase.strip():
                p.add(_index("$.turns.backchannels", i), "empty-value", "a backchannel phrase is empty")
        values["backchannels"] = tuple(phrase.strip() for phrase in phrases if phrase.strip())
    if "transcript_wait_ms" in section:
        wait = p.integer(section, "transcript_wait_ms", "$.turns", 1500)
        p.in_range(wait, "$.turns.transcript_wait_ms", 100, 10_000)
        if wait is not None:
            values["transcript_wait_ms"] = wait


OUTBOUND_ON_VOICEMAIL = ("hang_up", "greet", "message")
OUTBOUND_ON_SCREENING = ("introduce", "hang_up")
OUTBOUND_ON_IVR = ("model", "hang_up", "dtmf")


def _read_outbound(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    """[outbound]: the answer detection of the calls the node places (voicecore/outbound/answer_gate.py)."""
    section = _section(p, data, "outbound", ("max_wait_ms", "on_voicemail", "on_screening", "on_ivr", "ivr_digits",
                                             "dtmf_tool", "voicemail_message"))
    if "max_wait_ms" in section:
        wait = p.integer(section, "max_wait_ms", "$.outbound", 6000)
        p.in_range(wait, "$.outbound.max_wait_ms", 1000, 15_000)
        if wait is not None:
            values["outbound_max_wait_ms"] = wait
    if "on_voicemail" in section:
        action = p.string(section, "on_voicemail", "$.outbound")
        if action not in OUTBOUND_ON_VOICEMAIL:
            p.add("$.outbound.on_voicemail", "unknown-voicemail-action",
                  f"{action!r}: expected one of {', '.join(OUTBOUND_ON_VOICEMAIL)}")
        else:
            values["outbound_on_voicemail"] = action
    for key, allowed in (("on_screening", OUTBOUND_ON_SCREENING), ("on_ivr", OUTBOUND_ON_IVR)):
        if key not in section:
            continue
        action = p.string(section, key, "$.outbound")
        if action not in allowed:
            p.add(f"$.outbound.{key}", f"unknown-{key.removeprefix('on_')}-action",
                  f"{action!r}: expected one of {', '.join(allowed)}")
        else:
            values[f"outbound_{key}"] = action
    if "ivr_digits" in section:
        from voicecore.outbound.dtmf import parse_digits

        digits = p.string(section, "ivr_digits", "$.outbound")
        if isinstance(section["ivr_digits"], str):
            try:
                values["outbound_ivr_digits"] = parse_digits(digits)
            except ValueError as exc:
                p.add("$.outbound.ivr_digits", "bad-ivr-digits", str(exc))
    if section.get("on_ivr") == "dtmf" and "ivr_digits" not in section:
        p.add("$.outbound.ivr_digits", "missing-ivr-digits",
              "on_ivr = 'dtmf' needs the keys to press, e.g. ivr_digits = \"1w2\" (0-9, *, #; w 0.5 s, W 1 s)")
    if "voicemail_message" in section:
        message = p.prompt(section, "voicemail_message", "$.outbound")
        if message.strip():
            values["outbound_voicemail_message"] = message.strip()
    if section.get("on_voicemail") == "message" and "voicemail_message" not in section:
        p.add("$.outbound.voicemail_message", "missing-voicemail-message",
              "on_voicemail = 'message' needs the text to leave, e.g. voicemail_message = \"Hi {first_name}, ...\"")
    if "dtmf_tool" in section:
        values["outbound_dtmf_tool"] = p.boolean(section, "dtmf_tool", "$.outbound")


def _read_privacy(p: _Problems, data: dict[str, Any], values: dict[str, Any]) -> None:
    """[privacy]: the storage tier and the agent's own patterns to redact (voicecore/privacy/)."""
    from voicecore.privacy.redact import PatternError, compile_patterns

    section = _section(p, data, "privacy", ("storage", "patterns"))
    if "storage" in section:
        storage = p.string(section, "storage", "$.privacy")
        if storage not in STORAGE_TIERS:
            p.add("$.privacy.storage", "unknown-storage-tier", f"{storage!r}: expected one of {', '.join(STORAGE_TIERS)}")
        else:
            values["privacy_storage"] = storage
    if "patterns" in section:
        patterns = p.strings(section, "patterns", "$.privacy")
        good = []
        for i, pattern in enumerate(patterns):
            try:
                compile_patterns([pattern])
            except PatternError as exc:
                p.add(_index("$.privacy.patterns", i), "bad-pattern",
                      f"{pattern!r} is not a valid regular expression: {exc.reason}")
                continue
            good.append(pattern)
        values["privacy_patterns"] = tuple(good)


def _flow_file(p: _Problems, data: dict[str, Any], root: Path) -> Path | None:
    if "flow" in data:
        name = p.string(data, "flow", "$")
        if not isinstance(data["flow"], str):
            return None
        path = root / name
        if path.suffix not in FLOW_SUFFIXES:
            p.add("$.flow", "unsupported-format", f"flow file {name!r}: expected a .json or .toml file")
            return None
        if not path.is_file():
            p.add("$.flow", "missing-file", f"flow file {name!r} does not exist")
            return None
        return path
    # Not named: flow.json or flow.toml beside agent.toml is the flow (an author who wrote one means it).
    present = [root / f"flow{suffix}" for suffix in FLOW_SUFFIXES if (root / f"flow{suffix}").is_file()]
    if len(present) > 1:
        p.add("$.flow", "conflicting-keys", "both flow.json and flow.toml exist: name the one to use in flow")
        return None
    return present[0] if present else None


# -- `voicecore check` ----------------------------------------------------------------------------------------------------


def check_path(path: str | Path, environ: Mapping[str, str] | None = None) -> tuple[str, list[AgentProblem], list[AgentProblem]]:
    """Check an agent directory or a single flow file: (a one-line summary, problems, warnings)."""
    path = Path(path)
    if path.is_dir():
        check = check_agent(path, environ)
        if check.spec is None:
            return "", check.problems, check.warnings
        return f"agent {check.spec.name}: {_flow_summary(check.spec.flow)}", [], check.warnings
    warnings: list[AgentProblem] = []
    flow, problems = load_flow_file(path, warnings=warnings, environ=environ)
    if flow is None:
        return "", problems, warnings
    return f"flow {path}: {_flow_summary(flow)}", [], warnings


def _flow_summary(flow: FlowSpec) -> str:
    tools = sum(1 for fn in flow.functions.values() if fn.tool is not None)
    return f"{len(flow.nodes)} nodes, {len(flow.functions)} functions, {tools} tools"


def run_check(path: str | Path, as_json: bool = False, environ: Mapping[str, str] | None = None,
              out: Any = None) -> int:
    """`voicecore check PATH`: print every problem (exit 1) or a one-line summary (exit 0); warnings either way."""
    out = out if out is not None else sys.stdout
    summary, problems, warnings = check_path(path, environ)
    if as_json:
        print(json.dumps({"ok": not problems, "summary": summary, "problems": [x.to_dict() for x in problems],
                          "warnings": [x.to_dict() for x in warnings]}), file=out)
        return 1 if problems else 0
    for problem in problems:
        print(problem, file=out)
    for warning in warnings:
        print(f"warning: {warning}", file=out)
    if problems:
        print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''}", file=out)
        return 1
    print(f"ok: {summary}", file=out)
    return 0
