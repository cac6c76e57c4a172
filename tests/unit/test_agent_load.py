"""Loading agent directories: the shipped default agent, good agents with tools, and every problem at once."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from voicecore.agent.load import (
    AgentError, AgentProblem, check_agent, default_agent_dir, import_tool_module, load_agent, load_configured_agent,
)
from voicecore.agent.spec import DEFAULT_LINES, AgentSpec, PythonTool, Webhook
from voicecore.config import ConfigError, effective_call_control, load_config
from voicecore.errors import MisuseError

GOOD = Path(__file__).resolve().parents[1] / "agents" / "good"

FLOW_WITH_PYTHON_TOOL = """
initial_node = "main"
[nodes.main]
functions = ["lookup", "end_call"]
[functions.lookup]
description = "Look something up."
python = "{entry}"
[functions.end_call]
action = "end_call"
"""


def write_agent(directory: Path, agent_toml: str, files: dict[str, str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "agent.toml").write_text(agent_toml, encoding="utf-8")
    for name, text in (files or {}).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text, encoding="utf-8")
    return directory.resolve()


def codes(problems: list[AgentProblem]) -> set[tuple[str, str, str]]:
    return {(Path(p.file).name, p.code, p.path) for p in problems}


def round_trips(spec: AgentSpec) -> bool:
    plain = dataclasses.replace(spec, directory="")
    return AgentSpec.from_dict(plain.to_dict()) == plain


def test_the_default_agent_is_a_plain_assistant_that_can_end_the_call():
    spec = load_agent(default_agent_dir())
    assert spec.name == "assistant"
    assert spec.greeting == "Hello, thanks for calling. How can I help you today?"
    assert "phone assistant" in spec.instructions and "brief" in spec.instructions
    assert spec.flow.initial_node == "main"
    assert spec.flow.nodes["main"].functions == ("end_call",)
    end_call = spec.flow.functions["end_call"]
    assert (end_call.action, end_call.tool) == ("end_call", None)
    assert end_call.description == "End the call when the caller says goodbye or needs nothing more."
    assert spec.lines == DEFAULT_LINES and spec.languages == ("en",) and spec.knowledge_dir == ""
    assert spec.directory == str(default_agent_dir().resolve())
    assert round_trips(spec)


def test_the_configured_agent_is_the_default_unless_one_is_set():
    assert load_configured_agent(load_config({}), {}).name == "assistant"
    config = load_config({"VOICECORE_AGENT": str(GOOD / "receptionist")})
    env = {"CLINIC_API": "http://127.0.0.1:9", "CLINIC_TOKEN": "secret"}
    assert load_configured_agent(config, env).name == "receptionist"
    with pytest.raises(AgentError) as caught:
        load_configured_agent(config, {})
    assert {p.code for p in caught.value.problems} == {"missing-env"}


def test_call_control_auto_means_turns_for_any_agent_the_default_one_too():
    # the shipped default agent is an agent: its caller's mm-hmm must not cut it either
    assert load_config({}).call_control == "auto"
    assert effective_call_control(load_config({})) == "turns"
    assert effective_call_control(load_config({"VOICECORE_AGENT": "/agents/x"})) == "turns"
    assert effective_call_control(load_config({"VOICECORE_AGENT": "/agents/x", "VOICECORE_CALL_CONTROL": "spine"})) == "spine"
    assert effective_call_control(load_config({"VOICECORE_CALL_CONTROL": "turns"})) == "turns"
    with pytest.raises(ConfigError, match="call_control: expected auto, spine or turns"):
        load_config({"VOICECORE_CALL_CONTROL": "flow"})


def test_a_receptionist_with_a_webhook_confirmation_knowledge_and_instructions_file():
    spec = load_agent(GOOD / "receptionist")
    assert spec.instructions.startswith("You are the receptionist of the Smile Dental clinic.")
    assert spec.knowledge_dir == str(GOOD / "receptionist" / "knowledge") and os.path.isabs(spec.knowledge_dir)
    assert (spec.voice, spec.transfer_to, spec.max_turns, spec.forbidden) == ("sage", "+15550100", 40, ("as an AI",))
    assert (spec.gate_answers, spec.gate_prompts) == ("numbers", "scripted")
    assert spec.lines["goodbye"] == "Thanks for calling Smile Dental. Goodbye!"
    assert spec.lines["checkin"] == DEFAULT_LINES["checkin"]
    assert (spec.checkin_s, spec.goodbye_after_s) == ((8.0, 16.0), 6.0)
    assert (spec.filler_after_ms, spec.dedupe_s, spec.confirm_timeout_s) == (1200, 45.0, 10.0)
    book = spec.flow.functions["book_appointment"]
    assert book.tool == Webhook(url="${CLINIC_API}/appointments", method="POST",
                                headers=(("Authorization", "env:CLINIC_TOKEN"),), timeout_s=3.0, retries=1)
    assert book.confirm and book.confirm_prompt == "Shall I book {service} on {date} at {time}?"
    assert book.transitions == {"success": "booked", "error": "reception"}
    assert spec.flow.nodes["human"].transfer_to == "sip:frontdesk@clinic.example.com"
    assert spec.flow.nodes["booked"].context_strategy == "reset"
    assert round_trips(spec)


def test_a_python_tool_is_imported_from_the_agent_directory():
    spec = load_agent(GOOD / "shop")
    assert spec.languages == ("sv",) and spec.gate_language == "sv"
    assert spec.flow.functions["order_status"].tool == PythonTool(entry="shop_tools:order_status", timeout_s=2.0)
    assert spec.flow.functions["order_status"].writes is False
    module = import_tool_module("shop_tools", GOOD / "shop")
    assert Path(module.__file__).parent == GOOD / "shop"
    assert round_trips(spec)


@pytest.mark.parametrize("entry, code", [
    ("shop_tools:not_async", "python-not-async"),
    ("shop_tools:missing", "python-not-found"),
    ("no_such_module_here:f", "python-import-failed"),
    ("broken_tools:f", "python-import-failed"),
    ("shop_tools:one_argument", "python-bad-signature"),
    ("shop_tools:keyword_only", "python-bad-signature"),
])
def test_python_tool_problems(tmp_path, entry, code):
    agent = write_agent(tmp_path / "agent", 'name = "t"\ninstructions = "Help."\n', {
        "flow.toml": FLOW_WITH_PYTHON_TOOL.format(entry=entry),
        "shop_tools.py": "async def f(arguments, context):\n    return {}\n\ndef not_async(arguments, context):\n    return {}\n"
                         "\nasync def one_argument(card):\n    return {}\n"
                         "\nasync def keyword_only(arguments, *, context):\n    return {}\n",
        "broken_tools.py": "raise RuntimeError('cannot start')\n",
    })
    check = check_agent(agent)
    assert check.spec is None
    assert codes(check.problems) == {("flow.toml", code, "$.functions.lookup.python")}


@pytest.mark.parametrize("definition", [
    "async def f(arguments, context):", "async def f(arguments, context=None):", "async def f(*args):",
    "async def f(arguments, context, extra=1, **more):", "async def f(args, ctx, /):",
])
def test_python_tools_that_can_be_called_with_arguments_and_context_pass(tmp_path, definition):
    agent = write_agent(tmp_path / "agent", 'name = "t"\ninstructions = "Help."\n', {
        "flow.toml": FLOW_WITH_PYTHON_TOOL.format(entry="ok_tools:f"),
        "ok_tools.py": f"{definition}\n    return {{}}\n"})
    assert check_agent(agent).problems == []


def test_a_wrong_signature_names_the_file_and_the_line_of_the_def(tmp_path):
    agent = write_agent(tmp_path / "agent", 'name = "t"\ninstructions = "Help."\n', {
        "flow.toml": FLOW_WITH_PYTHON_TOOL.format(entry="cards:renew"),
        "cards.py": "import asyncio\n\n\nasync def renew(card):\n    return {}\n"})
    (problem,) = check_agent(agent).problems
    assert problem.code == "python-bad-signature" and problem.path == "$.functions.lookup.python"
    assert f"{agent / 'cards.py'}:4 renew(card)" in problem.message
    assert "async def f(arguments, context)" in problem.message


def test_a_tools_module_of_the_same_name_in_another_agent_is_that_agents_own(tmp_path):
    # Two agents each with their own tools.py: the second load must see its own file, not the first's module.
    first = write_agent(tmp_path / "one", 'name = "one"\ninstructions = "Help."\n', {
        "flow.toml": FLOW_WITH_PYTHON_TOOL.format(entry="tools:lookup"),
        "tools.py": "async def lookup(arguments, context):\n    return 1\n"})
    second = write_agent(tmp_path / "two", 'name = "two"\ninstructions = "Help."\n', {
        "flow.toml": FLOW_WITH_PYTHON_TOOL.format(entry="tools:lookup"),
        "tools.py": "def lookup(arguments, context):\n    return 2\n"})
    assert load_agent(first).name == "one"
    assert codes(check_agent(second).problems) == {("flow.toml", "python-not-async", "$.functions.lookup.python")}


def test_missing_environment_is_a_problem_only_when_an_environment_is_given():
    agent = GOOD / "receptionist"
    assert check_agent(agent).problems == []
    problems = check_agent(agent, environ={"CLINIC_API": "https://clinic.example.com"}).problems
    assert codes(problems) == {("flow.json", "missing-env", "$.functions.book_appointment.webhook.headers.Authorization")}
    problems = check_agent(agent, environ={"CLINIC_API": "ftp://clinic.example.com", "CLINIC_TOKEN": "t"}).problems
    assert {p.code for p in problems} == {"bad-url"}  # the URL the reference makes must be http(s)


def test_every_problem_of_agent_toml_and_the_flow_file_is_listed_together(tmp_path):
    agent = write_agent(tmp_path / "agent", """
name = ""
instructions = "Help."
instructions_file = "instructions.md"
languages = []
greeting = ""
knowledge = "kb"
colour = "blue"
max_turns = -1
transfer_to = "the front desk"
flow = "flow.json"

[gate]
answers = "sometimes"

[lines]
goodbye = ""
hello = "Hi"

[silence]
checkin_s = [20, 10]
goodbye_after_s = 0

[tools]
filler_after_ms = "soon"
debounce_quiet_ms = 4000
debounce_cap_ms = 2000
""", {"flow.json": (Path(__file__).parents[1] / "agents" / "broken" / "02-unknown-function.json").read_text()})
    with pytest.raises(AgentError) as caught:
        load_agent(agent)
    expected = {
        ("agent.toml", "empty-value", "$.name"),
        ("agent.toml", "conflicting-keys", "$.instructions_file"),
        ("agent.toml", "empty-value", "$.languages"),
        ("agent.toml", "empty-prompt", "$.greeting"),
        ("agent.toml", "missing-knowledge", "$.knowledge"),
        ("agent.toml", "unknown-key", "$.colour"),
        ("agent.toml", "out-of-range", "$.max_turns"),
        ("agent.toml", "bad-transfer-target", "$.transfer_to"),
        ("agent.toml", "unknown-gate-policy", "$.gate.answers"),
        ("agent.toml", "empty-prompt", "$.lines.goodbye"),
        ("agent.toml", "unknown-key", "$.lines.hello"),
        ("agent.toml", "bad-checkin", "$.silence.checkin_s"),
        ("agent.toml", "out-of-range", "$.silence.goodbye_after_s"),
        ("agent.toml", "wrong-type", "$.tools.filler_after_ms"),
        ("agent.toml", "out-of-range", "$.tools.debounce_cap_ms"),
        ("flow.json", "unknown-function", "$.nodes.reception.functions[2]"),
    }
    assert codes(caught.value.problems) == expected
    error = caught.value
    assert isinstance(error, MisuseError) and isinstance(error, ValueError)
    assert str(error).splitlines() == [str(p) for p in error.problems]
    assert any(line.startswith(f"{agent / 'agent.toml'}: $.colour: unknown key 'colour'") for line in str(error).splitlines())


@pytest.mark.parametrize("agent_toml, files, expected", [
    ('name = "x"\n', {}, {("agent.toml", "missing-key", "$.instructions")}),
    ('instructions = "Help."\n', {}, {("agent.toml", "missing-key", "$.name")}),
    ('name = "x"\ninstructions_file = "missing.md"\n', {}, {("agent.toml", "missing-file", "$.instructions_file")}),
    ('name = "x"\ninstructions_file = "i.md"\n', {"i.md": "  \n"}, {("agent.toml", "empty-value", "$.instructions_file")}),
    ('name = "x"\ninstructions = "Help."\nflow = "flow.yaml"\n', {}, {("agent.toml", "unsupported-format", "$.flow")}),
    ('name = "x"\ninstructions = "Help."\nflow = "nope.json"\n', {}, {("agent.toml", "missing-file", "$.flow")}),
    ('name = "x"\ninstructions = "Help."\nlanguages = ["english", 5]\n', {},
     {("agent.toml", "bad-language", "$.languages[0]"), ("agent.toml", "wrong-type", "$.languages[1]")}),
    ('name = "x"\ninstructions = "Help."\ngate = "strict"\n', {}, {("agent.toml", "wrong-type", "$.gate")}),
    ('name = "x"\ninstructions = "Help."\n[silence]\ncheckin_s = [0, 5]\n', {},
     {("agent.toml", "bad-checkin", "$.silence.checkin_s")}),
    ('name = "x"\ninstructions = "Help."\n', {"flow.json": "{}", "flow.toml": ""},
     {("agent.toml", "conflicting-keys", "$.flow")}),
    ('name = "x"\ninstructions = "Help.\n', {}, {("agent.toml", "syntax", "$")}),
    ('name = "x"\ninstructions = "Help."\n[turns]\ndetection = "push_to_talk"\neagerness = "eager"\n'
     'backchannels = ["", 3]\ntranscript_wait_ms = 50\ncolour = 1\n', {},
     {("agent.toml", "unknown-turn-detection", "$.turns.detection"), ("agent.toml", "unknown-eagerness", "$.turns.eagerness"),
      ("agent.toml", "empty-value", "$.turns.backchannels[0]"), ("agent.toml", "wrong-type", "$.turns.backchannels[1]"),
      ("agent.toml", "out-of-range", "$.turns.transcript_wait_ms"), ("agent.toml", "unknown-key", "$.turns.colour")}),
    ('name = "x"\ninstructions = "Help."\n[turns]\neagerness = "high"\n', {},
     {("agent.toml", "conflicting-keys", "$.turns.eagerness")}),
])
def test_agent_toml_problems(tmp_path, agent_toml, files, expected):
    assert codes(check_agent(write_agent(tmp_path / "agent", agent_toml, files)).problems) == expected


def test_a_transfer_needs_the_agents_target_when_it_names_none(tmp_path):
    flow = (GOOD / "shop" / "flow.toml").read_text()
    files = {"flow.toml": flow, "shop_tools.py": (GOOD / "shop" / "shop_tools.py").read_text()}
    without = write_agent(tmp_path / "without", 'name = "x"\ninstructions = "Help."\n', files)
    assert codes(check_agent(without).problems) == {("flow.toml", "missing-transfer-target", "$.functions.human.action")}
    with_target = write_agent(tmp_path / "with", 'name = "x"\ninstructions = "Help."\ntransfer_to = "+15550100"\n', files)
    assert check_agent(with_target).problems == []


def test_a_flow_file_beside_agent_toml_is_used_without_naming_it(tmp_path):
    agent = write_agent(tmp_path / "agent", 'name = "x"\ninstructions = "Help."\n', {
        "flow.json": (GOOD / "receptionist" / "flow.json").read_text()})
    assert load_agent(agent).flow.initial_node == "reception"


def test_the_default_knowledge_folder_is_optional_but_used_when_present(tmp_path):
    agent = write_agent(tmp_path / "agent", 'name = "x"\ninstructions = "Help."\n')
    assert load_agent(agent).knowledge_dir == ""
    (agent / "knowledge").mkdir()
    assert load_agent(agent).knowledge_dir == str(agent / "knowledge")


def test_a_missing_directory_is_one_problem(tmp_path):
    with pytest.raises(AgentError, match="no such agent directory"):
        load_agent(tmp_path / "nowhere")
    assert codes(check_agent(tmp_path).problems) == {("agent.toml", "missing-file", "$")}


def test_turns_section_sets_how_the_callers_turns_are_detected_and_read(tmp_path):
    agent = write_agent(tmp_path / "agent", '''name = "x"
instructions = "Help."
languages = ["sv", "en"]
[turns]
detection = "semantic_vad"
eagerness = "low"
transcription_model = "whisper-1"
backchannels = ["sounds good", "  kanon  "]
transcript_wait_ms = 2000
''')
    spec = load_agent(agent)
    assert (spec.turn_detection, spec.vad_eagerness, spec.transcription_model, spec.backchannels, spec.transcript_wait_ms) == (
        "semantic_vad", "low", "whisper-1", ("sounds good", "kanon"), 2000)
    assert round_trips(spec)
    defaults = load_agent(write_agent(tmp_path / "plain", 'name = "y"\ninstructions = "Help."\n'))
    assert (defaults.turn_detection, defaults.transcription_model, defaults.backchannels) == (
        "server_vad", "gpt-4o-mini-transcribe", ())
    warned = check_agent(write_agent(tmp_path / "odd", 'name = "z"\ninstructions = "Help."\n[turns]\ntranscription_model = "gpt-9"\n'))
    assert warned.spec is not None and {w.code for w in warned.warnings} == {"unknown-transcription-model"}


def test_the_outbound_actions_on_screening_and_ivr_are_read_and_bad_ones_named(tmp_path):
    agent = write_agent(tmp_path / "ok", 'name = "t"\ninstructions = "Help."\n'
                        '[outbound]\non_screening = "hang_up"\non_ivr = "hang_up"\n')
    spec = load_agent(agent)
    assert (spec.outbound_on_screening, spec.outbound_on_ivr) == ("hang_up", "hang_up") and round_trips(spec)
    default = load_agent(write_agent(tmp_path / "default", 'name = "t"\ninstructions = "Help."\n'))
    assert (default.outbound_on_screening, default.outbound_on_ivr) == ("introduce", "model")
    bad = write_agent(tmp_path / "bad", 'name = "t"\ninstructions = "Help."\n'
                      '[outbound]\non_screening = "greet"\non_ivr = "press"\n')
    problems = check_agent(bad).problems
    assert codes(problems) == {("agent.toml", "unknown-screening-action", "$.outbound.on_screening"),
                               ("agent.toml", "unknown-ivr-action", "$.outbound.on_ivr")}
    messages = " ".join(p.message for p in problems)
    assert "'greet': expected one of introduce, hang_up" in messages
    assert "'press': expected one of model, hang_up, dtmf" in messages


def test_dtmf_on_an_ivr_needs_good_digits_and_the_tool_is_a_boolean(tmp_path):
    agent = write_agent(tmp_path / "ok", 'name = "t"\ninstructions = "Help."\n'
                        '[outbound]\non_ivr = "dtmf"\nivr_digits = "1w2W#*0"\ndtmf_tool = true\n')
    spec = load_agent(agent)
    assert (spec.outbound_on_ivr, spec.outbound_ivr_digits, spec.outbound_dtmf_tool) == ("dtmf", "1w2W#*0", True)
    assert round_trips(spec)
    default = load_agent(write_agent(tmp_path / "default", 'name = "t"\ninstructions = "Help."\n'))
    assert (default.outbound_ivr_digits, default.outbound_dtmf_tool) == ("", False)
    missing = check_agent(write_agent(tmp_path / "missing", 'name = "t"\ninstructions = "Help."\n'
                                      '[outbound]\non_ivr = "dtmf"\n')).problems
    assert codes(missing) == {("agent.toml", "missing-ivr-digits", "$.outbound.ivr_digits")}
    for digits, words in (("1x2", "'x' in '1x2'"), ("", "empty"), ("ww", "presses no key"), ("1" * 33, "at most 32")):
        bad = check_agent(write_agent(tmp_path / f"bad{len(digits)}", 'name = "t"\ninstructions = "Help."\n'
                                      f'[outbound]\non_ivr = "dtmf"\nivr_digits = "{digits}"\n')).problems
        assert codes(bad) == {("agent.toml", "bad-ivr-digits", "$.outbound.ivr_digits")}, digits
        assert words in bad[0].message
    wrong = check_agent(write_agent(tmp_path / "wrong", 'name = "t"\ninstructions = "Help."\n'
                                    '[outbound]\ndtmf_tool = "yes"\n')).problems
    assert codes(wrong) == {("agent.toml", "wrong-type", "$.outbound.dtmf_tool")}


def test_a_voicemail_message_is_read_and_needed_for_on_voicemail_message(tmp_path):
    agent = write_agent(tmp_path / "ok", 'name = "t"\ninstructions = "Help."\n[outbound]\non_voicemail = "message"\n'
                        'voicemail_message = "Hi {first_name}, please call us back."\n')
    spec = load_agent(agent)
    assert (spec.outbound_on_voicemail, spec.outbound_voicemail_message) == (
        "message", "Hi {first_name}, please call us back.") and round_trips(spec)
    missing = check_agent(write_agent(tmp_path / "missing", 'name = "t"\ninstructions = "Help."\n'
                                      '[outbound]\non_voicemail = "message"\n')).problems
    assert codes(missing) == {("agent.toml", "missing-voicemail-message", "$.outbound.voicemail_message")}
    empty = check_agent(write_agent(tmp_path / "empty", 'name = "t"\ninstructions = "Help."\n'
                                    '[outbound]\non_voicemail = "message"\nvoicemail_message = " "\n')).problems
    assert codes(empty) == {("agent.toml", "empty-prompt", "$.outbound.voicemail_message")}
