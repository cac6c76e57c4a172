"""The reference pages that are generated from the code, so they cannot drift from it.

A mkdocs hook (mkdocs.yml ``hooks:``): ``on_files`` adds each page of ``GENERATED`` to the build as a
generated file, made from the code at build time; nothing is written into docs/. Run it by hand to see the
pages as Markdown:

    python docs/gen_reference.py OUT_DIR        # writes every generated page under OUT_DIR

Sources, one page each:

- settings: ``voicecore.config.SETTINGS`` (every ``Setting(...)`` row: name, type, default, help);
- the CLI: ``voicecore.cli.build_parser()`` (with the subcommands registered through the
  ``voicecore.commands`` entry points, such as ``bench``), ``voicecore replay`` and the ``python -m`` tools;
- ``agent.toml`` and flow keys: the key tuples ``voicecore/agent/load.py`` accepts (an unknown key is a
  problem there), the defaults of ``voicecore/agent/spec.py``'s dataclasses, and ``AGENT_KEY_DOCS`` below
  for what each key means: a key without a description stops the build;
- observer events: ``voicecore.observe.events`` (``EVENT_TYPES``, the fields each ``_emit`` call sends,
  the module docstring's line per event);
- the store schema: ``voicecore.store.schema``'s migrations, applied to an in-memory SQLite database and
  read back, with the comments written above each table;
- metrics: the rules of ``voicecore.metrics_text`` and the families a real stack exports, captured into
  docs/reference/metrics-families.json by tests/stack/test_docs_metrics_stack.py (which fails when a running stack
  exports a family that file lacks).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import inspect
import io
import json
import os
import re
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

DOCS_DIR = Path(__file__).resolve().parent
REPO_DIR = DOCS_DIR.parent
METRICS_FAMILIES = DOCS_DIR / "reference" / "metrics-families.json"
HELP_COLUMNS = "100"  # argparse wraps usage and help to $COLUMNS: fixed, so a page does not depend on a terminal

GENERATED_NOTE = ("!!! note \"Generated\"\n    This page is generated from {source} when the site is built "
                  "(`docs/gen_reference.py`); change the code, not this page.\n")


def _text(text: object) -> str:
    """Plain text for Markdown: ``<`` and ``>`` outside code spans escaped (``<hostname>`` is no HTML tag)."""
    parts = re.split(r"(`+[^`]*`+)", str(text))
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;") for part in parts)


def _cell(text: object) -> str:
    """Text for one Markdown table cell: a literal | would end the cell, a newline the row."""
    return _text(text).replace("|", "\\|").replace("\n", " ")


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _code(text: object) -> str:
    """A value as inline code (a backtick inside it needs a longer fence)."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# --- settings ---------------------------------------------------------------------------------------------------


def settings_page() -> str:
    from voicecore.config import ENV_PREFIX, SETTINGS

    kinds = {str: "text", int: "integer", float: "number", bool: "true/false"}
    rows = ["| setting and environment variable | default (type) | meaning |", "| --- | --- | --- |"]
    for s in SETTINGS:
        if s.default == "":
            default = "(empty)"
        elif isinstance(s.default, bool):
            default = _code("true" if s.default else "false")
        else:
            default = _code(s.default)
        rows.append(f"| <span id=\"{s.name}\"></span>{_code(s.name)}<br>{_code(ENV_PREFIX + s.name.upper())} | "
                    f"{_cell(default)} ({kinds.get(s.kind, s.kind.__name__)}) | {_cell(s.help)} |")
    return "\n".join([
        "# Settings", "",
        GENERATED_NOTE.format(source="`voicecore/config.py` (`SETTINGS`)"),
        "Every setting has a TOML key and an environment variable. Environment variables (prefix "
        f"`{ENV_PREFIX}`) override an optional TOML file, named by `--config FILE` or `VOICECORE_CONFIG=FILE`, whose "
        "keys are the settings' names, at the top level or under `[voicecore]`. An unknown key in the file, or a "
        "value a setting cannot take, stops every command before anything starts, with a message that names "
        "the setting (`voicecore: configuration error: ...`, exit code 2).", "",
        "```toml", "# voicecore.toml", "[voicecore]", 'listen = "127.0.0.1:8080"', "max_calls = 512", "```", "",
        "Each row's anchor is the setting's name: link to `reference/settings.md#max_calls`.", "",
        f"{len(SETTINGS)} settings:", "",
        *rows, "",
    ])


# --- the CLI ----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _help_columns():
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def _captured_help(main: Callable[[list[str]], object]) -> str:
    """What ``main(["--help"])`` prints (argparse exits after printing it)."""
    out = io.StringIO()
    with _help_columns(), contextlib.redirect_stdout(out):
        try:
            main(["--help"])
        except SystemExit:
            pass
    return out.getvalue().rstrip()


def _options_table(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> list[str]:
    formatter = parser._get_formatter()
    rows = ["| argument | default | meaning |", "| --- | --- | --- |"]
    for action in actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += " " + formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
        else:
            name = formatter._format_args(action, formatter._get_default_metavar_for_positional(action))
        default = action.default
        hidden = default is None or default is False or default == "" or default == argparse.SUPPRESS
        shown = "" if hidden or action.nargs == 0 else _code(default)
        meaning = formatter._expand_help(action) if action.help else ""
        if action.choices is not None and not isinstance(action.choices, range) and "{" not in name:
            meaning += f" (one of: {', '.join(map(str, action.choices))})"
        rows.append(f"| {_cell(_code(name))} | {_cell(shown)} | {_cell(meaning.strip())} |")
    return rows if len(rows) > 2 else []


def _parser_section(parser: argparse.ArgumentParser, title: str, anchor: str, summary: str) -> list[str]:
    with _help_columns():
        usage = parser.format_usage().strip()
    lines = [f"## {title} {{#{anchor}}}", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ("" if summary.endswith(".") else "."), ""]
    if parser.description and parser.description != summary:
        lines += [_text(parser.description), ""]
    lines += ["```text", usage, "```", ""]
    groups = [g for g in parser._action_groups if g._group_actions]
    for group in groups:
        table = _options_table(parser, group._group_actions)
        if not table:
            continue
        if len(groups) > 1 and group.title not in ("options", "optional arguments", "positional arguments"):
            lines += [f"**{group.title}**", ""]
        lines += table + [""]
    return lines


def cli_page() -> str:
    from voicecore import cli, replay
    from voicecore.shm import sizing

    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    summaries = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    lines = [
        "# Command line", "",
        GENERATED_NOTE.format(source="the argument parsers (`voicecore/cli.py`, `bench/cli.py`, `voicecore/replay.py`, "
                                     "`voicecore/shm/sizing.py`)"),
        "`voicecore` is installed by `pip install -e .`; every subcommand reads the [settings](settings.md) from the "
        "environment and the optional TOML file named by the global `--config FILE` (before the subcommand).", "",
        "```text", parser.format_usage().strip(), "```", "",
        *_options_table(parser, [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]), "",
        "| command | what it does |", "| --- | --- |",
    ]
    for name in sub.choices:
        lines.append(f"| [`voicecore {name}`](#{name}) | {_cell(summaries.get(name, ''))} |")
    lines.append("")
    for name, subparser in sub.choices.items():
        if name == "replay":  # it owns its whole argument list: its own parser, in voicecore/replay.py
            lines += [f"## voicecore replay {{#replay}}", "", summaries.get(name, "") + ".", "",
                      "```text", _captured_help(replay.main), "```", ""]
            continue
        lines += _parser_section(subparser, f"voicecore {name}", name, summaries.get(name, ""))
        for nested in [a for a in subparser._actions if isinstance(a, argparse._SubParsersAction)]:
            # a command with subcommands of its own (voicecore campaign check): each gets its section
            helps = {choice.dest: choice.help or "" for choice in nested._choices_actions}
            for action_name, action_parser in nested.choices.items():
                section = _parser_section(action_parser, f"voicecore {name} {action_name}", f"{name}-{action_name}",
                                          helps.get(action_name, ""))
                lines += ["#" + section[0], *section[1:]]
    lines += ["## Tools run with `python -m`", "",
              "### python -m voicecore.shm.sizing {#shm-sizing}", "",
              "```text", _captured_help(sizing.main), "```", ""]
    return "\n".join(lines)


# --- agent.toml and the flow ------------------------------------------------------------------------------------

# What each key of an agent's files means. The keys themselves come from voicecore/agent/load.py (what it
# accepts); a key it accepts that has no line here stops the build, and so does a line for a key it does not
# accept. Defaults come from voicecore/agent/spec.py unless the line starts with "default: ...;".
AGENT_KEY_DOCS: dict[str, str] = {
    # agent.toml, top level
    "agent.name": "default: (required); the agent's name, in messages and call records.",
    "agent.instructions": "default: (one of the two required); the standing instructions. Each node's role and task messages come after them.",
    "agent.instructions_file": "default: (one of the two required); a file holding the instructions instead (relative to the agent's folder). Not together with `instructions`.",
    "agent.model": "default: the configuration's `model`; the realtime model's name (`gemini-...` runs the agent on Gemini Live), or a table naming the vendor ([use Gemini Live](../how-to/use-gemini.md)).",
    "agent.model.vendor": "default: what the model's name says (`gemini-...`: `gemini`, else `openai`); `openai` (the Realtime API) or `gemini` (Gemini Live). `voicecore check` refuses the settings Gemini does not support, naming each.",
    "agent.model.name": "default: the configuration's `model` (`openai`), `gemini-2.5-flash-native-audio-preview-09-2025` (`gemini`); the model's name.",
    "agent.voice": "The model's voice (on every vendor `[voices]` names none for).",
    "agent.voices": "default: see its keys; a table: the voice on each model vendor, for an agent that runs on more than one ([use Gemini Live](../how-to/use-gemini.md#the-voice)).",
    "agent.voices.openai": "default: `voice`; the voice on OpenAI's Realtime API.",
    "agent.voices.gemini": "default: `voice`; the voice on Gemini Live, one of its prebuilt voices (`Aoede`, `Charon`, `Fenrir`, `Kore`, `Leda`, `Orus`, `Puck`, `Zephyr`). `voicecore check` refuses a Gemini agent whose `voice` is no Gemini voice and that names none here.",
    "agent.languages": "The first language is the main one. `en` and `sv` are the languages the gate reads numbers and yes/no answers in; another language makes the gate read both (`auto`).",
    "agent.greeting": "A scripted prompt at the start of every call. Empty: the initial node speaks first.",
    "agent.safe_line": "What the caller hears instead of an answer the gate rejected.",
    "agent.knowledge": "default: `knowledge` (used when that folder exists); a folder of `*.md` files. Numbers in answers are grounded in these files, and questions that need a number are retrieved from them first. A folder that is named must exist.",
    "agent.flow": "default: `flow.json` or `flow.toml` beside `agent.toml`, else one node; the flow file. Without one, the agent has one node, `main`, with the one function `end_call`.",
    "agent.forbidden": "Phrases no response may say.",
    "agent.transfer_to": "The number or SIP URI for a transfer without a target of its own, DTMF `0` and the failure apology. Empty: the call hangs up instead.",
    "agent.max_turns": "Caller turns before the goodbye. `0`: no limit.",
    "agent.gate": "default: see its keys; a table: how responses are judged by the validation gate.",
    "agent.gate.answers": "How the model's answers are judged, in nodes that set no `gate_policy`: `off`, `numbers` (every number must be in the knowledge), `scripted` or `strict`.",
    "agent.gate.prompts": "The same choice for scripted prompts: the greeting, node `say` prompts, confirmation prompts and lines.",
    "agent.lines": "default: see its keys; a table: every line the agent says on its own. An agent in another language must set every line.",
    "agent.lines.goodbye": "Said before the call ends (the flow's end, the last check-in, `max_turns`).",
    "agent.lines.transfer": "Said before a transfer.",
    "agent.lines.checkin": "Said after caller silence (`[silence] checkin_s`).",
    "agent.lines.fallback": "Said when the caller could not be understood.",
    "agent.lines.apology": "Said when something on our side failed.",
    "agent.lines.filler": "Said once when a tool is still running after `[tools] filler_after_ms`.",
    "agent.lines.declined": "Said when the caller said no to a confirmation prompt.",
    "agent.lines.confirm_timeout": "Said when no yes came within `[tools] confirm_timeout_s` of a confirmation prompt.",
    "agent.lines.tool_error": "Said when a tool fails and no `error` transition says otherwise.",
    "agent.lines.reconnect": "Said when a call is re-attached on a new stream after its gateway died in the middle of an answer (see [re-attach after a gateway failure](../how-to/drain.md#re-attach-after-a-gateway-failure)).",
    "agent.lines.hold": "The runtime's own hold line, said when the model vendor keeps the caller waiting (rendered once in the agent's voice by the vendor's speech endpoint, see [connect OpenAI](../how-to/connect-openai.md)).",
    "agent.lines.audio": "default: none; a table: WAV files in the agent folder for the runtime's own lines (`hold`, `apology_hangup`, `apology_transfer`), any rate, resampled; they win over the rendered and the shipped lines.",
    "agent.silence": "default: see its keys; a table: what happens when the caller is silent.",
    "agent.silence.checkin_s": "Seconds of caller silence before each check-in line, each more than the last.",
    "agent.silence.goodbye_after_s": "After the last unanswered check-in: goodbye and hang up.",
    "agent.tools": "default: see its keys; a table: the timings of tools and actions.",
    "agent.tools.filler_after_ms": "A tool still running this long: the filler line is said, once.",
    "agent.tools.dedupe_s": "After a writing tool succeeded, the same function with the same arguments is not run again within this many seconds (its result stands; errors stay retryable).",
    "agent.tools.confirm_timeout_s": "No yes this long after a confirmation prompt played: the action is dropped.",
    "agent.tools.debounce_quiet_ms": "After a tool result, the agent waits for this much caller quiet before it speaks.",
    "agent.tools.debounce_cap_ms": "... but never longer than this (at least `debounce_quiet_ms`).",
    "agent.failure": "default: see its keys; a table: when a failing model vendor ends the call ([failure and standby](../explanation/failure-and-standby.md)).",
    "agent.failure.after_failures": "Responses the vendor failed in a row before the call gives up.",
    "agent.failure.after_s": "Seconds without a working model socket before the call gives up.",
    "agent.failure.action": "`transfer` (to `transfer_to`; with no target: hang up) or `hangup`, after the shipped apology.",
    "agent.failure.hold_every_s": "A caller still waiting this long after the hold line hears it again (`0`: once).",
    "agent.turns": "default: see its keys; a table: how the caller's turns are detected and read ([turn-taking](../explanation/turn-taking.md)).",
    "agent.turns.detection": "`server_vad` (the vendor's silence-based end of turn) or `semantic_vad` (its end-of-turn model).",
    "agent.turns.eagerness": "With `semantic_vad` only: `low`, `medium`, `high` or `auto`: how soon the vendor ends the caller's turn.",
    "agent.turns.transcription_model": "The vendor's model for the caller's words: `gpt-4o-mini-transcribe`, `gpt-4o-transcribe` (words stream after the speech ends) or `whisper-1` (only late and whole). `VOICECORE_TRANSCRIPTION_MODEL` overrides it.",
    "agent.turns.backchannels": "Phrases of the agent's own that are backchannels (the caller carries the agent on), on top of the shipped English and Swedish lexicons of its `languages`.",
    "agent.privacy": "default: see its keys; a table: what of a call is stored, and the agent's own patterns to redact ([privacy](../how-to/privacy.md)).",
    "agent.privacy.storage": "`everything`, `no_audio`, `redacted` (the caller's words with phone, card, personal identity and account numbers, e-mail addresses and the agent's patterns replaced; no caller audio) or `metadata_only` (calls and turns with their timings, no words, no audio). Without the key: `everything`, as before the tiers; the shipped agents say `redacted`.",
    "agent.privacy.patterns": "Regular expressions (Python's syntax, case-insensitive) whose matches are redacted too, as `[pattern]`; `voicecore check` names a bad one.",
    "agent.outbound": "default: see its keys; a table: the calls the node places, before the agent's first words ([outbound calls](../how-to/outbound.md#in-a-call)).",
    "agent.outbound.max_wait_ms": "How long the agent's first words wait, at most, for the answer's verdict (a person, a voicemail, a screening assistant, an IVR): 1000-15000 ms. A person's hello ends the wait at once.",
    "agent.outbound.on_voicemail": "`hang_up` (the call ends as soon as the verdict is voicemail), `greet` (the agent starts, as for a person, once the voicemail's beep has sounded; when no beep comes within 4 s it starts anyway) or `message` (once the beep has sounded, as for `greet`, the agent says `voicemail_message` as a scripted, gated line, then hangs up). A carrier's `machine_end_beep` counts as the beep.",
    "agent.outbound.voicemail_message": "default: none (required with `on_voicemail = \"message\"`); what the agent leaves on a voicemail, e.g. `\"Hi {first_name}, this is Maria from Acme Dental about {reason}. Please call us back.\"`: the call's fields fill its placeholders; the validator checks it is said word for word (scripted, whatever `[gate] prompts` says).",
    "agent.outbound.on_screening": "`introduce` (default: the agent starts at once, its greeting, filled with the call's fields and gated as any scripted line, saying who calls and why; then it waits for the person the assistant puts through) or `hang_up` (the call ends through the carrier's API when the verdict is screening).",
    "agent.outbound.on_ivr": "`model` (default: the agent starts and deals with the menu as the model can), `hang_up` (the call ends through the carrier's API when the verdict is ivr) or `dtmf` (the keys of `ivr_digits` are pressed, then the agent starts: [sending digits](../how-to/outbound.md#dtmf)).",
    "agent.outbound.ivr_digits": "default: none (required with `on_ivr = \"dtmf\"`); the keys pressed on an IVR: `0`-`9`, `*`, `#`, and the pauses `w` (0.5 s) and `W` (1 s), at most 32 characters, e.g. `\"1w2\"`.",
    "agent.outbound.dtmf_tool": "default: `false`; `true`: on every call the node places the model is offered the function `send_dtmf(digits)` (the same syntax) to press keys itself, run and recorded as any tool.",
    "agent.turns.transcript_wait_ms": "How long after the caller stopped speaking their words are waited for before the length of the speech decides alone (500 ms or more: a turn; less: a noise, re-opened if words come).",
    # the flow file
    "flow.initial_node": "default: (required); the node a call starts in.",
    "flow.nodes": "default: (required); the nodes, by name.",
    "flow.functions": "default: `{}`; the functions the nodes offer the model, by name.",
    "message.role": "`system`, `user` or `assistant`.",
    "message.content": "The message's text.",
    "node.role_messages": "Messages for this node (`{\"role\", \"content\"}`), after the agent's instructions.",
    "node.task_messages": "The node's task, as messages; with `context_strategy = \"task\"` the only history kept.",
    "node.functions": "The names of the functions (from `functions`) the model may call in this node. Give every node a way out, such as a function with `\"action\": \"end_call\"`.",
    "node.context_strategy": "What happens to the conversation when the flow enters the node: `keep` (the history stays), `reset` (it is deleted) or `task` (deleted, and the node's task messages added).",
    "node.say": "A scripted prompt spoken when the flow enters the node.",
    "node.end": "After `say` (or at once if there is none): goodbye and hang up.",
    "node.transfer_to": "After `say` (or at once): transfer the call here.",
    "node.gate_policy": "default: the agent's `[gate] answers`; `off`, `numbers`, `scripted` or `strict` for the model's answers in this node.",
    "node.forbidden": "Phrases never said in this node, besides the agent's.",
    "function.description": "The model reads this to decide when to call the function.",
    "function.parameters": "A JSON Schema object. The model's arguments are checked against it before anything runs.",
    "function.webhook": "default: none; an HTTP tool (its keys below). The arguments go as a JSON body, or as a query string for GET.",
    "function.python": "default: none; `\"module:function\"`, an `async def f(arguments: dict, context)` returning something JSON-able; the module sits in the agent's folder.",
    "function.timeout_s": "default: `5.0`; with `python`: how long the Python tool may run.",
    "function.action": "`end_call` or `transfer`: a built-in action after the function (and its tool, if any) has succeeded.",
    "function.transfer_to": "default: the agent's `transfer_to`; the target of `\"action\": \"transfer\"`.",
    "function.confirm": "Ask the caller first with `confirm_prompt`, and run only after a spoken yes or DTMF 1.",
    "function.confirm_prompt": "For example `\"Shall I book a {service} on {date} at {time}?\"`. Placeholders are argument names; put numbers in placeholders, not in the text, so every number the caller hears is one of the arguments.",
    "function.writes": "default: `true` (`false` for a GET webhook); de-duplicated for `[tools] dedupe_s` when true.",
    "function.filler": "default: the agent's filler line; what the agent says while this function's tool is slow.",
    "function.transitions": "`{\"success\": \"node\", \"error\": \"node\"}`: where the flow goes after the function runs.",
    "webhook.url": "default: (required); the URL; `${NAME}` in it is read from the environment when the tool runs.",
    "webhook.method": "`GET`, `POST`, `PUT`, `PATCH` or `DELETE`.",
    "webhook.headers": "default: `{}`; request headers; a value `\"env:NAME\"` is read from the environment when the tool runs, so secrets stay out of the files. Every request also carries an `Idempotency-Key` header (the same for the same function and arguments) and `X-Voicecore-Call`.",
    "webhook.timeout_s": "Seconds one attempt may take.",
    "webhook.retries": "Extra attempts after a timeout, a connection error or a 5xx (never after a 4xx).",
}

# Which spec.py field holds each key's default, where its name differs from the key's.
_AGENT_DEFAULT_FIELDS = {
    "agent.gate.answers": "gate_answers", "agent.gate.prompts": "gate_prompts",
    "agent.silence.checkin_s": "checkin_s", "agent.silence.goodbye_after_s": "goodbye_after_s",
    "agent.failure.after_failures": "failure_after_failures", "agent.failure.after_s": "failure_after_s",
    "agent.failure.action": "failure_action", "agent.failure.hold_every_s": "failure_hold_every_s",
    "agent.turns.detection": "turn_detection", "agent.turns.eagerness": "vad_eagerness",
    "agent.privacy.storage": "privacy_storage", "agent.privacy.patterns": "privacy_patterns",
    "agent.outbound.max_wait_ms": "outbound_max_wait_ms", "agent.outbound.on_voicemail": "outbound_on_voicemail",
    "agent.outbound.on_screening": "outbound_on_screening", "agent.outbound.on_ivr": "outbound_on_ivr",
    "agent.outbound.ivr_digits": "outbound_ivr_digits", "agent.outbound.dtmf_tool": "outbound_dtmf_tool",
    "agent.outbound.voicemail_message": "outbound_voicemail_message",
}


def agent_keys() -> dict[str, list[str]]:
    """Every key an agent's files may hold, as load.py accepts them: {table: [key, ...]} with tables
    ``agent`` (agent.toml's top level), ``agent.<section>`` (its tables), ``flow``, ``node``, ``function``,
    ``webhook`` and ``message``."""
    from voicecore.agent import load

    namespace = vars(load)
    tree = ast.parse(inspect.getsource(load))
    keys: dict[str, list[str]] = {"agent": list(load.AGENT_KEYS), "node": list(load.NODE_KEYS),
                                  "function": list(load.FUNCTION_KEYS), "webhook": list(load.WEBHOOK_KEYS)}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if name == "_section" and len(call.args) == 4 and isinstance(call.args[2], ast.Constant):
            # _section(p, data, "gate", ("answers", "prompts")): the keys of agent.toml's [gate]
            allowed = eval(compile(ast.Expression(call.args[3]), "load.py", "eval"), namespace)  # noqa: S307 - our own source
            keys[f"agent.{call.args[2].value}"] = list(allowed)
        elif name == "known_keys" and isinstance(call.args[1], (ast.Tuple, ast.List)):
            literal = [e.value for e in call.args[1].elts]
            table = {"initial_node": "flow", "role": "message", "vendor": "agent.model"}.get(literal[0])
            if table:
                keys[table] = literal
    return keys


def _agent_default(doc_key: str) -> str:
    from voicecore.agent import spec

    table, _, key = doc_key.partition(".")
    if table == "agent" and key.startswith("lines."):
        return _code(json.dumps(spec.DEFAULT_LINES[key.split(".", 1)[1]], ensure_ascii=False))
    owner = {"agent": spec.AgentSpec, "node": spec.NodeSpec, "function": spec.FunctionSpec,
             "webhook": spec.Webhook, "message": spec.Message}.get(table)
    field_name = _AGENT_DEFAULT_FIELDS.get(doc_key, key.rsplit(".", 1)[-1])
    fields = {f.name: f for f in dataclasses.fields(owner)} if owner else {}
    found = fields.get(field_name)
    if found is None:
        return ""
    if found.default is not dataclasses.MISSING:
        value = found.default
    elif found.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = found.default_factory()  # type: ignore[misc]
    else:
        return "(required)"
    if isinstance(value, tuple):
        value = list(value)
    return _code(json.dumps(value, ensure_ascii=False))


def agent_toml_page() -> str:
    keys = agent_keys()
    wanted = {f"{table}.{key}" for table, names in keys.items() for key in names}
    missing = sorted(wanted - set(AGENT_KEY_DOCS))
    stale = sorted(set(AGENT_KEY_DOCS) - wanted)
    if missing or stale:
        raise ValueError("docs/gen_reference.py AGENT_KEY_DOCS is out of step with voicecore/agent/load.py: "
                         f"keys without a description: {missing or 'none'}; descriptions of keys load.py does not "
                         f"accept: {stale or 'none'}")

    def table(prefix: str, names: list[str], label: Callable[[str], str]) -> list[str]:
        rows = ["| key | default | meaning |", "| --- | --- | --- |"]
        for key in names:
            doc = AGENT_KEY_DOCS[f"{prefix}.{key}"]
            default, sep, rest = doc.partition("; ") if doc.startswith("default: ") else ("", "", doc)
            default = default[len("default: "):] if sep else _agent_default(f"{prefix}.{key}")
            rows.append(f"| {_code(label(key))} | {_cell(default)} | {_cell(_sentence(rest if sep else doc))} |")
        return rows + [""]

    sections = [k for k in keys if k.startswith("agent.")]
    lines = [
        "# agent.toml and flow keys", "",
        GENERATED_NOTE.format(source="`voicecore/agent/load.py` (the keys it accepts) and `voicecore/agent/spec.py` "
                                     "(the defaults)"),
        "An agent is a folder: `agent.toml` plus the files it names (instructions, a knowledge folder, a flow file, "
        "Python tools). Paths are relative to the agent's folder. Every key below is the whole list: any other key "
        "is a problem that `voicecore check DIR` reports with its file and JSON path, and `voicecore up` refuses "
        "an agent with any problem. The [first agent tutorial](../tutorial/first-agent.md) walks through one.", "",
        "## agent.toml {#agent-toml}", "",
        *table("agent", [k for k in keys["agent"] if f"agent.{k}" not in sections], lambda k: k),
    ]
    for section in sections:
        name = section.split(".", 1)[1]
        lines += [f"### [{name}] {{#{name}}}", "", _sentence(AGENT_KEY_DOCS[section].partition("; ")[2]), "",
                  *table(section, keys[section], lambda k, n=name: f"[{n}] {k}")]
    lines += [
        "## The flow file {#flow}", "",
        "`flow.json`, or `flow.toml` with the same structure:", "",
        "```json",
        '{"initial_node": "reception",',
        ' "nodes": {"reception": {"role_messages": [{"role": "system", "content": "..."}],',
        '                         "task_messages": [{"role": "system", "content": "..."}],',
        '                         "functions": ["book_appointment", "end_call"],',
        '                         "context_strategy": "keep"}},',
        ' "functions": {"book_appointment": {"description": "...", "parameters": {"type": "object", "properties": {}},',
        '                                    "webhook": {"url": "${RECEPTIONIST_API}/appointments", "method": "POST"},',
        '                                    "confirm": true, "confirm_prompt": "Shall I book a {service} on {date} at {time}?",',
        '                                    "transitions": {"success": "booked", "error": "reception"}}}}',
        "```", "",
        *table("flow", keys["flow"], lambda k: k),
        "### A node {#node}", "", *table("node", keys["node"], lambda k: k),
        "### A message {#message}", "", *table("message", keys["message"], lambda k: k),
        "### A function {#function}", "", *table("function", keys["function"], lambda k: k),
        "### A webhook {#webhook}", "", *table("webhook", keys["webhook"], lambda k: f"webhook.{k}"),
    ]
    return "\n".join(lines)


# --- observer events --------------------------------------------------------------------------------------------


def event_fields() -> dict[str, list[str]]:
    """type -> the ``data`` fields its ``_emit`` calls send (read from voicecore/observe/events.py)."""
    from voicecore.observe import events

    tree = ast.parse(inspect.getsource(events))
    described = {}
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_describe_call"):
        for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)):
            described = [k.value for k in ret.value.keys]
    fields: dict[str, list[str]] = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "_emit" and len(call.args) == 3):
            continue
        kind, data = call.args[1], call.args[2]
        if not isinstance(kind, ast.Constant):
            continue
        names = [k.value for k in data.keys if isinstance(k, ast.Constant)] if isinstance(data, ast.Dict) else described
        merged = fields.setdefault(kind.value, [])
        merged += [n for n in names if n not in merged]
    return fields


def event_descriptions() -> dict[str, str]:
    """type -> its line in voicecore/observe/events.py's docstring (the fields written there left out)."""
    from voicecore.observe import events

    descriptions: dict[str, str] = {}
    current = None
    for line in (events.__doc__ or "").splitlines():
        match = re.match(r"^- ``([a-z_.]+)``\s*(.*)$", line)
        if match:
            current = match[1]
            descriptions[current] = match[2]
        elif current and line.startswith("  ") and line.strip():
            descriptions[current] += " " + line.strip()
        else:
            current = None
    # the fields' shape ({"a", "b"}) leads each line; the rest is what the event means
    return {k: re.sub(r"^``\{.*?\}``\s*", "", v).strip() for k, v in descriptions.items()}


def events_page() -> str:
    from voicecore.observe import events

    fields = event_fields()
    descriptions = event_descriptions()
    missing = [t for t in events.EVENT_TYPES if not descriptions.get(t)]
    if missing:
        raise ValueError(f"voicecore/observe/events.py: its docstring has no line for {missing}: add one per event type")
    unsent = [t for t in events.EVENT_TYPES if t not in fields]
    if unsent:
        raise ValueError(f"voicecore/observe/events.py: no _emit call sends {unsent}")
    rows = ["| type | data fields | meaning |", "| --- | --- | --- |"]
    for kind in events.EVENT_TYPES:
        rows.append(f"| <span id=\"{kind.replace('.', '-')}\"></span>{_code(kind)} | "
                    f"{', '.join(_code(f) for f in fields[kind])} | {_cell(descriptions[kind])} |")
    return "\n".join([
        "# Observer events", "",
        GENERATED_NOTE.format(source="`voicecore/observe/events.py` (`EVENT_TYPES`, the fields each event is sent "
                                     "with, and the module docstring)"),
        "What the console's `/observe` WebSocket streams and the call store's `events` table keeps. Each message is "
        "one JSON object:", "",
        "```json",
        '{"call_sid": "CA...", "seq": 7, "type": "response.started", "t_ms": 5120, "at": 1764000000.123, '
        '"data": {"response_id": "resp_..."}}',
        "```", "",
        "- `seq` rises by one per call from 1; `t_ms` counts from the call's first recorded entry; `at` is the wall "
        "clock (seconds since the epoch).",
        "- `/observe?call=SID&since=SEQ`: the call's events after `SEQ` from the store, then live, each once and in "
        "order; `/observe` alone: every call's events as they happen.",
        "- Close codes: 1008 the observer was too slow (its queue of 2048 events filled; the call never waits for "
        "it), 1001 the console is stopping.",
        f"- Texts are cut to {events.MAX_TEXT} characters. Events hold what callers said, like the call records: "
        "they follow the same retention and are shown only to holders of an API key.", "",
        f"{len(events.EVENT_TYPES)} event types:", "",
        *rows, "",
    ])


# --- the store schema -------------------------------------------------------------------------------------------


def _table_comments() -> dict[str, str]:
    """Table (or ``table.column`` for an added column) -> the comment lines written above it in schema.py."""
    from voicecore.store import schema

    comments: dict[str, str] = {}
    pending: list[str] = []
    in_comment = False
    for line in inspect.getsource(schema).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if not in_comment:
                pending = []  # a new comment: the one before belonged to the statements above it
            pending.append(stripped.lstrip("#").strip())
            in_comment = True
            continue
        in_comment = in_comment and not stripped
        created = re.search(r"CREATE (?:VIRTUAL )?TABLE (?:IF NOT EXISTS )?(\w+)", stripped)
        added = re.search(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", stripped)
        if created and pending:
            comments[created[1]] = " ".join(pending)
        if added and pending:  # one comment above several added columns is about each of them
            comments[f"{added[1]}.{added[2]}"] = " ".join(pending)
        if stripped and not added:
            pending = []
    return comments


def schema_page() -> str:
    from voicecore.store import schema

    db = sqlite3.connect(":memory:")
    db.execute(schema.SCHEMA_VERSION_TABLE)
    since: dict[str, int] = {}  # table or table.column -> the migration that made it
    for version in range(1, schema.LATEST_VERSION + 1):
        for statement in schema.migration_sql(version, "sqlite"):
            db.execute(statement)
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            since.setdefault(table, version)
            for column in db.execute(f"PRAGMA table_info({table})"):
                since.setdefault(f"{table}.{column[1]}", version)
    comments = _table_comments()
    kinds = {row[1]: row[2] for row in db.execute("PRAGMA table_list") if row[0] == "main"}
    shadows = [name for name, kind in kinds.items() if kind == "shadow"]  # a virtual table's own storage
    tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
              if kinds.get(t) != "shadow"]
    lines = [
        "# Call store schema", "",
        GENERATED_NOTE.format(source="`voicecore/store/schema.py` (its migrations, applied to an empty SQLite "
                                     "database and read back)"),
        "The call store is SQLite (`sqlite:///PATH`, WAL) or PostgreSQL (`postgresql://...`): one schema for both, "
        "created and upgraded by numbered migrations that only ever get appended (migration N runs once, in one "
        "transaction, and records N in `schema_version`). Flags are INTEGER 0/1, times are milliseconds from the "
        "call's start except `calls.started_at` (seconds since the epoch). No caller number is stored; the campaign tables (migration 6) hold the numbers a campaign calls and the do-not-call list, and a call the node placed keeps the number it called (`calls.callee`, migration 7). Types below "
        "are SQLite's spelling; PostgreSQL's auto-numbered `id` is `BIGINT GENERATED BY DEFAULT AS IDENTITY`.", "",
        f"Latest migration: {schema.LATEST_VERSION}.", "",
    ]
    for table in tables:
        lines += [f"## {table} {{#{table}}}", ""]
        if table in comments:
            lines += [comments[table], ""]
        lines += [f"Since migration {since[table]}." if table != "schema_version" else "Made before any migration.", ""]
        if kinds.get(table) == "virtual":
            own = ", ".join(_code(name) for name in shadows if name.startswith(table + "_"))
            lines += [f"In SQLite a virtual table (full-text search, FTS5), which keeps its index in tables SQLite manages "
                      f"({own}); in PostgreSQL a table of its own (see the note above).", ""]
        lines += ["| column | type | null | key | since | note |", "| --- | --- | --- | --- | --- | --- |"]
        for _cid, name, kind, notnull, _default, pk in db.execute(f"PRAGMA table_info({table})"):
            note = comments.get(f"{table}.{name}", "")
            added = since.get(f"{table}.{name}", since.get(table, 0))
            lines.append(f"| {_code(name)} | {kind} | {'no' if notnull or pk else 'yes'} | {'primary' if pk else ''} | "
                         f"{added or ''} | {_cell(note)} |")
        indexes = [row for row in db.execute(f"PRAGMA index_list({table})") if not row[1].startswith("sqlite_autoindex")]
        if indexes:
            lines += ["", "Indexes: " + ", ".join(
                f"{_code(row[1])} ({', '.join(c[2] for c in db.execute(f'PRAGMA index_info({row[1]})'))})" for row in indexes)]
        lines.append("")
    return "\n".join(lines)


# --- metrics ----------------------------------------------------------------------------------------------------


def metrics_families() -> dict[str, dict[str, str]]:
    """The families a real stack exported (name -> {"type", "help"}), as tests/stack/test_docs_metrics_stack.py captured them."""
    return json.loads(METRICS_FAMILIES.read_text(encoding="utf-8"))


def metrics_page() -> str:
    from voicecore import metrics_text as mt

    families = metrics_families()
    doc = mt.__doc__ or ""
    rules = _docstring_markdown(doc[doc.index("The dict's shape"):doc.index("Spec:")])
    by_group: dict[str, list[str]] = {}
    conventional = {f"{mt.PREFIX}_{name}" for name, _, _ in mt.ALIASES.values()} | {
        f"{mt.PREFIX}_{family}" for family in mt.HISTOGRAM_HELP}
    for name in sorted(families):
        if name in conventional:
            group = "conventional"
        else:
            group = name[len(mt.PREFIX) + 1:].split("_", 1)[0]
        by_group.setdefault(group, []).append(name)
    titles = {"conventional": "Prometheus-convention families", "gateway": "gateway", "pacer": "pacer",
              "model": "model worker", "validator": "validator", "recorder": "recorder", "console": "console"}
    lines = [
        "# Metrics", "",
        GENERATED_NOTE.format(source="`voicecore/metrics_text.py` (the rules) and the families a real stack exported "
                                     "(`docs/reference/metrics-families.json`, captured by `tests/stack/test_docs_metrics_stack.py`)"),
        "`GET /metrics` on the gateway's `listen` address (to this host only; a scraper elsewhere reads it on "
        "[`metrics_listen`](settings.md#metrics_listen): [Keep callers private](../how-to/privacy.md#hardening)) "
        "answers JSON (what the demo and the bench read), and the "
        "Prometheus text format (0.0.4) when the request's Accept header prefers `text/plain` or "
        "`application/openmetrics-text` to JSON, as Prometheus' scraper does, or with `?format=prometheus`. Point a "
        "scrape job at the gateway (the default `metrics_path`). The gateway answers for the whole node: the "
        "workers send it their figures over the control bus. Beside the per-process names, the "
        "[Prometheus-convention families](#conventional) are in seconds and are real histograms, cumulative since "
        "the process started, so `histogram_quantile()` and `rate()` work across scrapes.", "",
        "## How names and types are made {#rules}", "",
        "From `voicecore/metrics_text.py`:", "",
        rules, "",
        "## Levels that can go down {#gauges}", "",
        "Rule 2's list (`GAUGES`): " + ", ".join(_code(g) for g in sorted(mt.GAUGES)) + ".", "",
        "## Families {#families}", "",
        f"{len(families)} families, as a stack exported them during and after a call under each call control "
        "(`spine` and `turns`). A family appears once its process has reported it: a histogram once it has a sample, "
        "the model worker's `active_*` sums while calls are live.", "",
    ]
    for group in ("conventional", "gateway", "pacer", "model", "validator", "recorder", "console",
                  *sorted(set(by_group) - set(titles))):
        if group not in by_group:
            continue
        lines += [f"### {titles.get(group, group)} {{#{group}}}", "", "| family | type | help |", "| --- | --- | --- |"]
        for name in by_group[group]:
            lines.append(f"| {_code(name)} | {families[name]['type']} | {_cell(families[name]['help'])} |")
        lines.append("")
    return "\n".join(lines)


def _docstring_markdown(text: str) -> str:
    """A module docstring's plain text as Markdown: a blank line before a numbered list and around an indented
    block (Python-Markdown starts neither without one)."""
    out: list[str] = []
    for line in text.strip().splitlines():
        previous = out[-1] if out else ""
        starts_list = re.match(r"^\d+\. ", line) and previous and not re.match(r"^(\d+\. |   )", previous)
        starts_code = line.startswith("    ") and previous and not previous.startswith("    ")
        ends_code = line.strip() and not line.startswith("    ") and previous.startswith("    ")
        if starts_list or starts_code or ends_code:
            out.append("")
        out.append(line)
    return _text("\n".join(out))


# --- the hook ---------------------------------------------------------------------------------------------------

GENERATED: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "reference/agent-toml.md": agent_toml_page,
    "reference/observer-events.md": events_page,
    "reference/store-schema.md": schema_page,
    "reference/metrics.md": metrics_page,
}


def on_files(files, config):  # mkdocs hook
    from mkdocs.structure.files import File

    for path, make in GENERATED.items():
        if files.get_file_from_path(path) is not None:
            raise ValueError(f"docs/{path} is generated by docs/gen_reference.py: remove the file")
        files.append(File.generated(config, path, content=make()))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write the generated reference pages as Markdown")
    parser.add_argument("out_dir", help="where to write them (reference/*.md under it)")
    args = parser.parse_args(argv)
    for path, make in GENERATED.items():
        target = Path(args.out_dir) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(make(), encoding="utf-8")
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
