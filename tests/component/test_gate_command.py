"""`voicecore gate DIR "a sentence"`: the verdict an agent's gate gives, its claims, exit status 0/1/2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from voicecore.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHOP = str(ROOT / "examples" / "shop-assistant")
RECEPTIONIST = str(ROOT / "examples" / "receptionist")


def gate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["gate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_approved_sentence_exits_0_and_cites_its_passages(capsys):
    code, out, _ = gate(capsys, SHOP, "Basic kostar 99 kr i månaden och har 10 GB surf.")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "approved (policy numbers, language sv)"
    assert "ok  '99 kr' = 99 kr (of basic; per month)" in out
    assert 'cites knowledge/priser.md:7 "Basic: 99 kr/månad, 10 GB surf, ingen bindningstid."' in out


def test_a_wrong_subject_exits_1_and_names_the_near_miss(capsys):
    code, out, _ = gate(capsys, SHOP, "Standard kostar 99 kr i månaden.")
    assert code == 1
    assert out.startswith("rejected (policy numbers, language sv)\n  reason: a number is in the knowledge base only "
                          "for something else: '99 kr' in \"Standard kostar 99 kr i månaden.\"; nearest: "
                          "knowledge/priser.md:7")
    assert "NO  '99 kr' = 99 kr (of standard; per month)" in out
    assert "(there it is said of basic, not of standard)" in out


def test_json_report(capsys):
    code, out, _ = gate(capsys, RECEPTIONIST, "We close at half past four on Saturdays.", "--json")
    assert code == 1
    report = json.loads(out)
    assert set(report) >= {"approved", "policy", "language", "sentence", "reason", "category", "claims", "citations",
                           "agent", "node", "knowledge"}
    assert (report["approved"], report["policy"], report["language"], report["node"]) == (False, "numbers", "en", "reception")
    assert report["category"] == "a number is not in the knowledge base"
    (claim,) = report["claims"]
    assert (claim["number"], claim["kind"], claim["readings"], claim["role"], claim["days"]) == \
        ("half past four", "time", ["04:30", "16:30"], "end", [5])
    assert claim["supported"] is False and claim["near_miss"]["snippet"] == "Saturday: 9 to 13"


def test_policy_node_script_and_facts_options(capsys):
    assert gate(capsys, SHOP, "Basic kostar 777 kr.", "--policy", "off")[0] == 0
    code, out, err = gate(capsys, SHOP, "Hej", "--policy", "scripted")
    assert code == 2 and "--script" in err
    assert gate(capsys, SHOP, "Hej då och tack!", "--policy", "scripted", "--script", "Hej då och tack!")[0] == 0
    assert gate(capsys, SHOP, "Hej och tack!", "--policy", "scripted", "--script", "Hej då och tack för idag!")[0] == 1
    # a number only the tool result holds: approved with --facts, rejected without
    facts = json.dumps({"booked": True, "reference": "CB-2207", "time": "14:30"})
    assert gate(capsys, SHOP, "Vi ringer dig klockan 14:30.")[0] == 1
    code, out, _ = gate(capsys, SHOP, "Vi ringer dig klockan 14:30.", "--facts", facts, "--json")
    assert code == 0 and json.loads(out)["citations"][0]["file"] == "tool-result"
    assert gate(capsys, SHOP, "x", "--node", "nowhere")[0] == 2


def test_facts_from_a_file(capsys, tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"time": "14:30"}))
    assert gate(capsys, SHOP, "Vi ringer dig klockan 14:30.", "--facts", f"@{path}")[0] == 0
    code, _, err = gate(capsys, SHOP, "x", "--facts", f"@{tmp_path / 'missing.json'}")
    assert code == 2 and "cannot read" in err


def test_an_agent_with_problems_is_a_usage_error(capsys, tmp_path):
    code, _, err = gate(capsys, str(tmp_path / "nowhere"), "x")
    assert code == 2 and "no such agent directory" in err


def test_the_command_line_exit_status_and_a_bad_flag():
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    run = [sys.executable, "-m", "voicecore.cli", "gate", RECEPTIONIST]
    assert subprocess.run(run + ["A cleaning costs 95 dollars."], capture_output=True, env=env, timeout=60).returncode == 0
    assert subprocess.run(run + ["A cleaning costs 60 dollars."], capture_output=True, env=env, timeout=60).returncode == 1
    bad = subprocess.run(run + ["x", "--policy", "loose"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.parametrize("sentence", ["Thank you for calling.", "Hello"])
def test_a_sentence_without_numbers_has_nothing_to_ground(capsys, sentence):
    code, out, _ = gate(capsys, RECEPTIONIST, sentence)
    assert code == 0 and "no numbers: nothing to ground" in out
