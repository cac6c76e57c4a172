"""`voicecore check` and the broken-flow corpus: every rule has a file, and every problem of a file is listed.

Each tests/agents/broken/NN-name.(json|toml) has NN-name.expected beside it: one "CODE PATH" line per
problem, compared as an exact set (a missing problem and an extra one both fail).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from voicecore.agent.load import check_flow, load_flow_file, run_check
from voicecore.cli import main

AGENTS = Path(__file__).resolve().parents[1] / "agents"
BROKEN = AGENTS / "broken"
GOOD = AGENTS / "good"
CORPUS = sorted(p for p in BROKEN.iterdir() if p.suffix in (".json", ".toml"))

# Every code a flow file can get wrong on its own: the corpus must show each at least once.
FLOW_CODES = {
    "syntax", "wrong-type", "unknown-key", "missing-key", "empty-value", "unknown-initial-node", "unknown-function",
    "unknown-node", "unknown-transition", "unreachable-node", "dead-end-node", "invalid-schema", "parameters-not-object",
    "empty-prompt", "missing-confirm-prompt", "unknown-placeholder", "digit-in-prompt", "unknown-role", "empty-message",
    "unknown-context-strategy", "unknown-gate-policy", "bad-function-name", "bad-url", "unknown-method", "bad-timeout",
    "bad-retries", "two-tools", "unknown-action", "missing-transfer-target", "bad-python-entry", "misplaced-key",
    "bad-transfer-target", "bad-env-reference",
}


def expected_of(path: Path) -> set[str]:
    return {line for line in path.with_suffix(".expected").read_text(encoding="utf-8").splitlines() if line.strip()}


def parsed(path: Path):
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else tomllib.loads(text)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voicecore.cli", *args], capture_output=True, text=True, timeout=60,
                          env=env if env is not None else {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")})


def test_the_corpus_covers_every_rule_with_several_problems_per_file():
    assert len(CORPUS) >= 22
    expected = {path.name: expected_of(path) for path in CORPUS}
    codes = {line.split(" ", 1)[0] for lines in expected.values() for line in lines}
    assert FLOW_CODES <= codes, f"rules without a corpus file: {sorted(FLOW_CODES - codes)}"
    assert sum(1 for lines in expected.values() if len(lines) > 1) >= 8


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_problem_of_a_broken_flow_is_listed(path):
    expected = expected_of(path)
    flow, problems = load_flow_file(path, agent_transfer_to="")
    assert flow is None  # never half-loaded
    assert {f"{p.code} {p.path}" for p in problems} == expected
    assert all(p.file == str(path) and p.message for p in problems)
    if expected == {"syntax $"}:
        assert "line" in problems[0].message and "column" in problems[0].message
        return
    # The parsed data through check_flow says the same as the file.
    assert {f"{p.code} {p.path}" for p in check_flow(parsed(path), path.name, agent_transfer_to="")} == expected


def test_a_good_flow_has_no_problems_and_loads():
    warnings: list = []
    flow, problems = load_flow_file(GOOD / "receptionist" / "flow.json", warnings=warnings)
    assert problems == [] and warnings == []
    assert flow.initial_node == "reception"
    assert set(flow.nodes) == {"reception", "booked", "human"}
    assert flow.functions["opening_hours"].writes is False  # a GET webhook only reads
    assert flow.functions["book_appointment"].writes is True
    assert flow.functions["book_appointment"].tool.method == "POST"  # "post" in the file


def test_transfer_target_is_only_checked_when_the_agents_is_known():
    data = parsed(BROKEN / "19-transfer-without-target.json")
    assert check_flow(data, "f.json") == []  # a flow file alone: the agent may name a target
    assert check_flow(data, "f.json", agent_transfer_to="+15550100") == []
    assert [p.code for p in check_flow(data, "f.json", agent_transfer_to="")] == ["missing-transfer-target"]


def test_an_unused_function_is_a_warning_not_a_problem(tmp_path, capsys):
    data = parsed(BROKEN / "04-unreachable-node.json")
    del data["nodes"]["survey"]
    data["functions"]["spare"] = {"description": "Nobody lists me.", "action": "end_call"}
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(data))
    warnings: list = []
    assert check_flow(data, "flow.json", warnings=warnings) == []
    assert [(w.code, w.path) for w in warnings] == [("unused-function", "$.functions.spare")]
    assert run_check(path) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"warning: {path}: $.functions.spare: function 'spare' is listed by no node"
    assert out[-1] == f"ok: flow {path}: 2 nodes, 3 functions, 1 tools"


def test_check_prints_every_problem_and_exits_1():
    path = BROKEN / "20-unknown-keys.json"
    result = run_cli("check", str(path))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    expected = expected_of(path)
    assert len(lines) == len(expected) + 1 and lines[-1] == f"{len(expected)} problems"
    assert all(line.startswith(f"{path}: $") for line in lines[:-1])
    assert f"{path}: $.nodes.booked.sya: unknown key 'sya'" in result.stdout
    assert f"{path}: $.nodes.booked: node 'booked' cannot be reached from the initial node 'reception'" in result.stdout


def test_check_of_a_syntax_error_names_line_and_column():
    result = run_cli("check", str(BROKEN / "23-syntax-error.toml"))
    assert result.returncode == 1
    assert "(at line 5, column 1)" in result.stdout


def test_check_json_output():
    result = run_cli("check", "--json", str(BROKEN / "11-confirm-prompt-numbers.json"))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["warnings"] == []
    assert {(p["code"], p["path"]) for p in report["problems"]} == {
        ("unknown-placeholder", "$.functions.book.confirm_prompt"), ("digit-in-prompt", "$.functions.book.confirm_prompt")}
    assert all(set(p) == {"file", "path", "code", "message"} for p in report["problems"])


def test_check_a_good_agent_directory():
    result = run_cli("check", str(GOOD / "receptionist"))
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip() == "ok: agent receptionist: 3 nodes, 4 functions, 2 tools"
    report = json.loads(run_cli("check", "--json", str(GOOD / "shop")).stdout)
    assert report == {"ok": True, "summary": "agent butiken: 1 nodes, 3 functions, 1 tools", "problems": [], "warnings": []}


def test_check_with_env_reports_missing_references():
    env = {k: v for k, v in os.environ.items() if k not in ("CLINIC_API", "CLINIC_TOKEN")}
    result = run_cli("check", "--env", str(GOOD / "receptionist"), env=env)
    assert result.returncode == 1
    assert result.stdout.count("environment variable CLINIC_API is not set") == 2
    assert ("$.functions.book_appointment.webhook.headers.Authorization: environment variable CLINIC_TOKEN is not set"
            in result.stdout)
    env.update(CLINIC_API="http://127.0.0.1:9", CLINIC_TOKEN="t")
    assert run_cli("check", "--env", str(GOOD / "receptionist"), env=env).returncode == 0


def test_check_exits_1_naming_the_file_and_line_of_a_python_tool_with_a_wrong_signature(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    agent = agent.resolve()
    (agent / "agent.toml").write_text('name = "cards"\ninstructions = "Help."\n')
    (agent / "flow.toml").write_text('initial_node = "main"\n[nodes.main]\nfunctions = ["renew", "end_call"]\n'
                                     '[functions.renew]\ndescription = "Renew a card."\npython = "card_tools:renew"\n'
                                     '[functions.end_call]\naction = "end_call"\n')
    (agent / "card_tools.py").write_text('"""Card tools."""\n\n\nasync def renew(card):\n    return {"renewed": card}\n')
    result = run_cli("check", str(agent))
    assert result.returncode == 1
    assert f"{agent / 'card_tools.py'}:4 renew(card) cannot be called as async def f(arguments, context)" in result.stdout
    (agent / "card_tools.py").write_text('"""Card tools."""\n\n\nasync def renew(arguments, context):\n    return {}\n')
    assert run_cli("check", str(agent)).returncode == 0


def test_check_in_process_through_main(capsys):
    assert main(["check", str(BROKEN / "18-unknown-action.json")]) == 1
    out = capsys.readouterr().out
    assert "$.functions.end_call.action: action 'hangup'" in out and "$.nodes.booked: node 'booked' has no way out" in out


def test_up_refuses_to_start_an_agent_with_problems(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    agent = agent.resolve()  # problems name files by their absolute path
    (agent / "agent.toml").write_text('name = "broken"\ninstructions = "Help."\nflow = "flow.json"\nvoise = "sage"\n')
    (agent / "flow.json").write_text((BROKEN / "05-dead-end-node.json").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    env["VOICECORE_RUNTIME_DIR"] = str(tmp_path / "run")
    result = run_cli("up", "--agent", str(agent), env=env)
    assert result.returncode == 1
    assert f"{agent / 'agent.toml'}: $.voise: unknown key 'voise'" in result.stderr
    assert f"{agent / 'flow.json'}: $.nodes.booked: node 'booked' has no way out" in result.stderr
    assert not (tmp_path / "run").exists()  # nothing started
