"""The documentation site: it builds with `mkdocs build --strict` (no warning: every nav entry has its page,
every link and anchor resolves), and the reference pages generated from the code (docs/gen_reference.py) cover
what the code has: every setting has its row, every command and option its entry, every agent.toml key its
description, every observer event and store column its line. docs/citations.md maps every citation in the code,
and the code, tests/ included, cites only what a reader of the repository can open (docs/find_citations.py --check).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from external import missing_resource

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load("gen_reference")
citations = _load("find_citations")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        missing_resource("mkdocs and mkdocs-material", sys.executable, "pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
                             "--site-dir", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # the theme's banner about its future
    return result, out


def test_the_site_builds_strict_without_a_warning(site):
    result, out = site
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert "WARNING" not in log, log
    assert (out / "index.html").is_file()
    for page in gen.GENERATED:
        assert (out / page.removesuffix(".md") / "index.html").is_file(), page


def test_every_generated_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    for page in gen.GENERATED:
        assert f": {page}\n" in nav, page


def _rows(page: str) -> list[list[str]]:
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line in page.splitlines() if line.startswith("| ") and not line.startswith("| ---")]


def test_every_setting_has_its_row():
    from voicecore.config import ENV_PREFIX, SETTINGS

    rows = {row[0].split("<br>")[1].strip("`"): row for row in _rows(gen.settings_page())[1:]}
    for setting in SETTINGS:
        row = rows.get(ENV_PREFIX + setting.name.upper())
        assert row is not None, f"{setting.name} has no row on the settings page"
        assert f"`{setting.name}`<br>" in row[0] and row[2] == gen._cell(setting.help)
        default = row[1].rsplit(" (", 1)[0]
        assert default == "(empty)" if setting.default == "" else str(setting.default).lower() in default.lower()
    assert len(rows) == len(SETTINGS)


def test_a_setting_added_to_the_code_gets_its_row(monkeypatch):
    from voicecore import config

    added = config.Setting("docs_probe_ms", int, 7, "a probe: <not a tag> | not a cell break")
    monkeypatch.setattr(config, "SETTINGS", (*config.SETTINGS, added))
    (row,) = [r for r in _rows(gen.settings_page()) if "VOICECORE_DOCS_PROBE_MS" in r[0]]
    assert row[1] == "`7` (integer)" and row[2] == "a probe: &lt;not a tag&gt; \\| not a cell break"


def test_every_command_and_option_is_on_the_cli_page():
    from voicecore.cli import build_parser

    page = gen.cli_page()
    parser = build_parser()
    (sub,) = [a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)]
    assert {"up", "drain", "demo", "check", "calls", "console-key", "bench", "replay"} <= set(sub.choices)
    for name, subparser in sub.choices.items():
        assert f"## voicecore {name} {{#{name}}}" in page, name
        for action in subparser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page or f" {option}" in page, f"voicecore {name} {option}"
        for nested in [a for a in subparser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)]:
            for action_name, action_parser in nested.choices.items():  # voicecore campaign demo
                section = page.split(f"### voicecore {name} {action_name} {{#{name}-{action_name}}}", 1)[1].split("\n## ")[0]
                for option in (o for a in action_parser._actions for o in a.option_strings if o not in ("-h", "--help")):
                    assert f"`{option}" in section, f"voicecore {name} {action_name} {option}"
    for option in ("--wav", "--json", "--max-calls"):  # replay's own parser, the shm sizing tool
        assert option in page


def test_every_agent_key_is_described():
    keys = gen.agent_keys()
    page = gen.agent_toml_page()  # raises when a key lacks its description, or a description its key
    assert {"agent", "agent.gate", "agent.lines", "agent.silence", "agent.tools", "agent.failure", "flow", "node",
            "function", "webhook", "message"} <= set(keys)
    assert "book_appointment" in page and "`[failure] after_s`" in page
    for table, names in keys.items():
        for key in names:
            if f"agent.{key}" in keys:  # a table of agent.toml: a heading, its keys rows below it
                assert f"### [{key}] {{#{key}}}" in page, key
            else:
                assert f"`{key}`" in page or f"] {key}`" in page or f"webhook.{key}`" in page, f"{table}.{key}"


def test_a_key_without_a_description_stops_the_build(monkeypatch):
    monkeypatch.delitem(gen.AGENT_KEY_DOCS, "agent.voice")
    with pytest.raises(ValueError, match="agent.voice"):
        gen.agent_toml_page()


def test_every_observer_event_is_on_its_page():
    from voicecore.observe.events import EVENT_TYPES

    rows = {row[0].split("</span>")[-1].strip("`"): row for row in _rows(gen.events_page())[1:]}
    assert list(rows) == list(EVENT_TYPES)
    assert rows["model.lost"][1] == "`reason`, `fatal`" and rows["call.started"][1].count("`") == 8
    assert all(row[2] for row in rows.values()), "an event without a meaning"


def test_every_store_table_and_column_is_on_the_schema_page():
    import sqlite3

    from voicecore.store import schema

    page = gen.schema_page()
    db = sqlite3.connect(":memory:")
    for version in range(1, schema.LATEST_VERSION + 1):
        for statement in schema.migration_sql(version, "sqlite"):
            db.execute(statement)
    shadows = {row[1] for row in db.execute("PRAGMA table_list") if row[2] == "shadow"}  # SQLite's own FTS5 storage
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        if table in shadows:
            assert f"`{table}`" in page and f"## {table} " not in page, table  # named under its table, not a section
            continue
        section = page.split(f"## {table} {{#{table}}}", 1)[1].split("\n## ", 1)[0]
        for column in db.execute(f"PRAGMA table_info({table})"):
            assert f"| `{column[1]}` |" in section, f"{table}.{column[1]}"
    assert "| `first_played_ms` | BIGINT | yes |  | 3 | The turn timing model's playout end" in page  # migration 3
    assert "| `played_ms` | BIGINT | yes |  | 3 | The turn timing model's playout end" in page


def test_the_metrics_page_lists_the_captured_families():
    families = gen.metrics_families()
    page = gen.metrics_page()
    assert len(families) > 50, "docs/reference/metrics-families.json: run tests/stack/test_docs_metrics_stack.py to capture them"
    for name, family in families.items():
        assert f"`{name}` | {family['type']} |" in page, name
    for name in ("voicecore_calls_active", "voicecore_pacer_lateness_seconds", "voicecore_gate_rejections_total"):
        assert name in families


def test_every_citation_in_the_code_is_mapped():
    rows = citations.find()
    assert len(rows) > 100
    unmapped = sorted({(r["cited"], f"{r['file']}:{r['line']}") for r in rows if r["target"] == "UNMAPPED"})
    assert not unmapped, f"add these to docs/citations.md: {unmapped}"


@pytest.mark.parametrize(("text", "cited"), [
    ("(PROTOCOLS.md D.2 item 5)", "PROTOCOLS.md D.2 item 5"),
    ("PROTOCOLS.md C.5 step 4), or", "PROTOCOLS.md C.5 step 4"),
    ("ARCHITECTURE.md sections 1", "ARCHITECTURE.md section 1"),
    ("ARCHITECTURE.md 9).", "ARCHITECTURE.md section 9"),
    ("see PROTOCOLS.md section C", "PROTOCOLS.md C"),
    ("(STYLE.md).", "STYLE.md"),
    ("keeps INV-ONE-VOICE:", "INV-ONE-VOICE"),
    ('(README "Carriers" says', 'README "Carriers"'),
    ("README (\"Measured\"): caller", 'README "Measured"'),
    ("the debounce of seed 1", "seed 001"),
    ("Issue 14's: model", "issue 14"),
])
def test_citation_forms(text, cited):
    assert [c for _, c in citations.citations_in(text)] == [cited]


def test_the_code_cites_only_what_the_repository_holds():
    code_dirs = {"voicecore", "workers", "bench", "tests", "deploy", "examples", ".ci", "docs"}
    assert set(citations.CHECKED_DIRS) >= code_dirs
    found = citations.problems()
    assert not found, "cite a docs page or say the rule (docs/citations.md):\n" + "\n".join(found)


@pytest.mark.parametrize(("text", "problem"), [
    ("(PROTOCOLS.md D.2 item 5)", "PROTOCOLS.md D.2 item 5 is not in the repository: "
                                  "cite docs/explanation/protocols.md#d2-item-5"),
    ("(STYLE.md: a flaky test is a bug)", "STYLE.md is not in the repository: cite docs/explanation/style.md#rules"),
    ('(README "Carriers")', 'README "Carriers" moved to the docs: cite docs/reference/carriers.md'),
    ("vectors in ../shared/testdata/g711", "../shared/testdata/g711 is outside the repository"),
    ("(seed 001's timeline)", "seed 001 cannot be looked up: say the rule itself"),
    ("(issue 18)", "issue 18 cannot be looked up: say the rule itself"),
    ("see docs/explanation/protocols.md#no-such-anchor",
     "docs/explanation/protocols.md has no anchor #no-such-anchor"),
    ("see docs/explanation/no-such-page.md", "no page docs/explanation/no-such-page.md"),
])
def test_the_check_names_the_file_and_line_of_each_problem(text, problem):
    found = citations.problems_in("tests/unit/test_x.py", f"first line\n{text}\n")
    assert len(found) == 1 and found[0].startswith("tests/unit/test_x.py:2: ") and problem in found[0], found


def test_what_a_reader_can_open_is_no_problem():
    text = ("(docs/explanation/protocols.md#d2-item-5), INV-ONE-VOICE, CPython issue 82300, "
            "docs/explanation/protocols.md#a2 and #a5; after a tool result the agent waits for the caller's quiet")
    assert citations.problems_in("tests/unit/test_x.py", text) == []


def test_cpython_issue_numbers_are_not_ours():
    assert citations.citations_in("(CPython issue 82300, fixed by track=False)") == []


def test_the_map_targets_pages_that_exist():
    mapping = citations.load_map()
    assert mapping["PROTOCOLS.md D.2 item 5"] == "explanation/protocols.md#d2-item-5"
    assert mapping["ARCHITECTURE.md section 7"] == "explanation/architecture.md#section-7"
    assert mapping["seed 001"].startswith("RULE: ")
    for target in mapping.values():
        if not target.startswith("RULE: "):
            assert (DOCS / target.split("#")[0]).is_file() or target.split("#")[0] in gen.GENERATED, target
