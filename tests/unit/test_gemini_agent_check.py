"""Choosing Gemini in agent.toml, and `voicecore check` refusing what Gemini cannot honour (voicecore/gemini/agent_check.py)."""

from __future__ import annotations

import json
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


def receptionist_on_gemini(tmp_path: Path, keep_voices: bool = True) -> Path:
    import shutil

    copy = tmp_path / "receptionist"
    shutil.copytree(ROOT / "examples" / "receptionist", copy)
    toml = copy / "agent.toml"
    text = toml.read_text()
    if not keep_voices:
        text = text.replace('[voices]\ngemini = "Aoede"\n', "")
    toml.write_text(text + '\n[model]\nvendor = "gemini"\n')
    return copy


def test_the_receptionists_flow_confirmation_and_gemini_voice_are_accepted_for_gemini(tmp_path):
    check = check_agent(receptionist_on_gemini(tmp_path))
    assert check.problems == []
    assert check.spec is not None and check.spec.voice_for("gemini") == "Aoede" and check.spec.voice_for("openai") == "coral"
    assert len(check.spec.flow.nodes) == 2 and check.spec.flow.functions["book_appointment"].confirm


def test_an_openai_voice_without_a_gemini_voice_is_refused_naming_the_fix(tmp_path):
    problems = check_agent(receptionist_on_gemini(tmp_path, keep_voices=False)).problems
    assert [p.path for p in problems] == ["$.voice"]
    assert "[voices]" in problems[0].message and "gemini = " in problems[0].message


def test_a_gemini_voice_that_is_no_gemini_voice_is_refused(tmp_path):
    check = check_agent(agent(tmp_path, 'voice = "coral"\n[voices]\ngemini = "shimmer"\n[model]\nvendor = "gemini"\n'))
    assert [(p.path, p.code) for p in check.problems] == [("$.voices.gemini", "unsupported-by-vendor")]


def test_an_unknown_vendor_under_voices_is_a_problem(tmp_path):
    check = check_agent(agent(tmp_path, '[voices]\nacme = "x"\n'))
    assert [p.code for p in check.problems] == ["unknown-key"]


def test_a_node_that_deletes_the_conversation_is_refused_for_gemini(tmp_path):
    copy = receptionist_on_gemini(tmp_path)
    flow = copy / "flow.json"
    flow.write_text(flow.read_text().replace('"context_strategy": "keep",\n      "say"', '"context_strategy": "reset",\n      "say"'))
    problems = check_agent(copy).problems
    assert [p.path for p in problems] == ["$.nodes.booked.context_strategy"]
    assert "keep" in problems[0].message


def test_voices_stay_out_of_a_record_header_that_has_none(tmp_path):
    spec = check_agent(agent(tmp_path, 'voice = "alloy"\n')).spec
    assert spec is not None and "voices" not in spec.to_dict()
    with_voices = check_agent(agent(tmp_path, '[voices]\ngemini = "Kore"\n')).spec
    assert with_voices is not None and with_voices.to_dict()["voices"] == {"gemini": "Kore"}


def test_a_bad_vendor_is_a_problem(tmp_path):
    check = check_agent(agent(tmp_path, '[model]\nvendor = "acme"\n'))
    assert [(p.path, p.code) for p in check.problems] == [("$.model.vendor", "unknown-vendor")]


# --- the knowledge a Gemini session's instructions hold (voicecore/gemini/driver.py session_knowledge) ------------

def test_a_gemini_session_is_set_up_with_the_agents_knowledge_in_the_controllers_words():
    from voicecore.agent.load import load_agent
    from voicecore.gemini.driver import driver_for_agent
    from voicecore.replay import driver_from_header
    from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir

    spec = load_agent(ROOT / "examples" / "receptionist")
    snippets = [{"text": s.text, "file": s.file}
                for s in KnowledgeBase.from_documents(load_knowledge_dir(spec.knowledge_dir)).snippets]
    driver = driver_for_agent(spec, "CAk", model=DEFAULT_MODEL, knowledge=snippets)
    instruction = json.loads(driver.setup_message())["setup"]["systemInstruction"]["parts"][0]["text"]
    assert "Facts:\n- Smile Dental (knowledge/hours.md)" in instruction
    assert "- Cleaning: 95 dollars, about 45 minutes (knowledge/hours.md)" in instruction
    assert instruction.index("Help the caller") < instruction.index("Facts:")  # after the node's instructions
    bare = json.loads(driver_for_agent(spec, "CAk", model=DEFAULT_MODEL).setup_message())
    assert "Facts:" not in bare["setup"]["systemInstruction"]["parts"][0]["text"]
    # the record's header holds them: a replay sets its session up with the same knowledge
    assert driver_from_header(json.loads(json.dumps(driver.record_header()))).setup_message() == driver.setup_message()


def test_knowledge_over_the_sessions_share_is_left_out_from_its_end_and_check_warns(tmp_path):
    from voicecore.gemini.driver import KNOWLEDGE_MAX_CHARS, session_knowledge

    snippets = [{"text": f"Item {i}: {i} dollars", "file": "kb/prices.md"} for i in range(2000)]
    facts, left_out = session_knowledge(snippets)
    assert 0 < left_out < 2000 and len(facts) <= KNOWLEDGE_MAX_CHARS + 400
    assert "- Item 0: 0 dollars (kb/prices.md)" in facts and f"Item {1999 - left_out}: " in facts
    assert f"Item {2000 - left_out}: " not in facts
    assert session_knowledge([]) == ("", 0)

    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "prices.md").write_text("# Prices\n\n" + "".join(f"- Item {i}: {i} dollars\n" for i in range(2000)))
    check = check_agent(agent(tmp_path, 'knowledge = "kb"\n[model]\nvendor = "gemini"\n'))
    assert check.spec is not None and not check.problems
    assert [(w.path, w.code) for w in check.warnings] == [("$.knowledge", "knowledge-left-out")]
    assert "of 2001 knowledge snippets are left out" in check.warnings[0].message
    small = tmp_path / "small"
    (small / "kb").mkdir(parents=True)
    (small / "kb" / "prices.md").write_text("# Prices\n\n- Cleaning: 95 dollars\n")
    assert check_agent(agent(small, 'knowledge = "kb"\n[model]\nvendor = "gemini"\n')).warnings == []
    openai = tmp_path / "openai"
    openai.mkdir()
    (openai / "kb").symlink_to(tmp_path / "kb")
    assert check_agent(agent(openai, 'knowledge = "kb"\n')).warnings == []  # retrieval per answer: all of it
