"""Choosing Gemini in agent.toml, and `voicecore check` refusing what Gemini cannot honour (voicecore/gemini/agent_check.py)."""

from __future__ import annotations

from pathlib import Path

from voicecore.agent.load import check_agent
from voicecore.gemini.driver import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parents[2]


def agent(tmp_path: Path, body: str) -> Path:
    (tmp_path / "agent.toml").write_text('name = "g"\ninstructions = "Be brief."\n' + body)
    return tmp_path


def test_the_model_table_names_the_vendor_and_defaults_its_model(tmp_path):
    spec = check_agent(agent(tmp_path, '[model]\nvendor = "gemini"\n')).spec
    assert spec is not None and spec.model_vendor == "gemini" and spec.model == DEFAULT_MODEL
    assert spec.to_dict()["model_vendor"] == "gemini"


def test_a_gemini_model_name_alone_chooses_gemini_and_is_checked(tmp_path):
    check = check_agent(agent(tmp_path, 'model = "gemini-live-2.5-flash"\nvoice = "alloy"\n'))
    assert [(p.path, p.code) for p in check.problems] == [("$.voice", "unsupported-by-vendor")]
    assert "Kore" in check.problems[0].message and "(model vendor gemini)" in check.problems[0].message


def test_an_openai_agent_keeps_its_settings_and_its_record_header(tmp_path):
    spec = check_agent(agent(tmp_path, 'voice = "alloy"\n[turns]\ndetection = "semantic_vad"\n')).spec
    assert spec is not None and spec.model_vendor == ""
    assert "model_vendor" not in spec.to_dict()  # records made before vendors could be named are unchanged


def test_every_unsupported_setting_is_named(tmp_path):
    body = ('voice = "coral"\n[model]\nvendor = "gemini"\nname = "gemini-x"\n'
            '[turns]\ndetection = "semantic_vad"\neagerness = "low"\ntranscription_model = "whisper-1"\n')
    check = check_agent(agent(tmp_path, body))
    assert sorted(p.path for p in check.problems) == ["$.turns.detection", "$.turns.eagerness",
                                                      "$.turns.transcription_model", "$.voice"]
    assert {p.code for p in check.problems} == {"unsupported-by-vendor"}


def test_the_receptionists_flow_and_confirmation_are_refused_for_gemini(tmp_path):
    import shutil

    copy = tmp_path / "receptionist"
    shutil.copytree(ROOT / "examples" / "receptionist", copy)
    toml = copy / "agent.toml"
    toml.write_text(toml.read_text() + '\n[model]\nvendor = "gemini"\n')
    paths = {p.path for p in check_agent(copy).problems}
    assert {"$.flow", "$.flow.functions.book_appointment.confirm", "$.voice"} <= paths


def test_a_bad_vendor_is_a_problem(tmp_path):
    check = check_agent(agent(tmp_path, '[model]\nvendor = "acme"\n'))
    assert [(p.path, p.code) for p in check.problems] == [("$.model.vendor", "unknown-vendor")]
