"""`voicecore calls`: the call store as a table or JSON, one call with its turns; exit codes and messages.

The store is a real SQLite file in a record directory (the default store) filled with scripted calls
(tests/records.py builds them); the command runs as a subprocess, as an operator runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from voicecore.config import load_config
from voicecore.store import CallStore, database_url_for
from voicecore.store.command import call_text, calls_table, since_epoch

from records import summary_of

END_FIRST, END_SECOND = 1_800_000_000.0, 1_800_000_600.0


def run_calls(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    return subprocess.run([sys.executable, "-m", "voicecore.cli", "calls", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def record_dir(tmp_path):
    directory = tmp_path / "records"
    directory.mkdir(mode=0o700)
    env = {"VOICECORE_RECORD_DIR": str(directory)}
    with CallStore.open(database_url_for(load_config(env))) as store:
        store.ingest(summary_of("CAfirst", END_FIRST))
        store.ingest(summary_of("CAsecond", END_SECOND))
    return env


def test_calls_json_lists_both_calls_newest_first(record_dir):
    done = run_calls("--json", env=record_dir)
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)["calls"]
    assert [c["call_sid"] for c in calls] == ["CAsecond", "CAfirst"]
    assert [c["ended_at"] for c in calls] == pytest.approx([END_SECOND, END_FIRST])
    assert all(c["turns"] == 2 and c["outcome"] == "caller_hangup" and c["agent"] == "receptionist" for c in calls)
    since = run_calls("--json", "--since", "2027-01-15T08:00:00+00:00", env=record_dir)  # between the two
    assert [c["call_sid"] for c in json.loads(since.stdout)["calls"]] == ["CAsecond"]
    assert [c["call_sid"] for c in json.loads(run_calls("--json", "--limit", "1", env=record_dir).stdout)["calls"]] == ["CAsecond"]


def test_one_call_with_its_turns_as_json_and_as_text(record_dir):
    done = run_calls("CAfirst", "--json", env=record_dir)
    assert done.returncode == 0, done.stderr
    call = json.loads(done.stdout)
    assert call["call_sid"] == "CAfirst" and len(call["turns"]) == 2 and call["tool_calls"][0]["name"] == "book"
    assert call["turns"][0]["transcript"] == "Book a cleaning please" and call["turns"][0]["latency_ms"] > 0
    text = run_calls("CAfirst", env=record_dir)
    assert text.returncode == 0 and "turns (2)" in text.stdout and "wait ms" in text.stdout and "caller: Book a cleaning please" in text.stdout
    assert "tool book(" in text.stdout and "rejected number not in the knowledge base" in text.stdout
    assert "waited ms" in text.stdout and ': ran {"booked": true}' in text.stdout  # the tool's status in words
    table = run_calls(env=record_dir)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["started", "call_sid", "seconds", "turns", "outcome", "agent"]
    assert [line.split()[1] for line in lines[1:]] == ["CAsecond", "CAfirst"]


def test_an_unknown_call_sid_exits_1_saying_so(record_dir):
    done = run_calls("CAnobody", env=record_dir)
    assert done.returncode == 1 and done.stdout == ""
    assert "no call CAnobody in the call store" in done.stderr


def test_no_store_configured_exits_2_saying_what_to_set():
    done = run_calls("--json", env={})
    assert done.returncode == 2 and done.stdout == ""
    assert "VOICECORE_RECORD_DIR" in done.stderr and "VOICECORE_DATABASE_URL" in done.stderr


def test_a_record_directory_without_a_store_yet_lists_nothing_and_creates_nothing(tmp_path):
    done = run_calls("--json", env={"VOICECORE_RECORD_DIR": str(tmp_path)})
    assert done.returncode == 0 and json.loads(done.stdout) == {"calls": []}
    assert list(tmp_path.iterdir()) == []


def test_since_reads_seconds_ago_or_an_iso_time_and_refuses_the_rest():
    assert since_epoch("3600", now_s=10_000.0) == 6400.0
    assert since_epoch("2027-01-15T08:00:00+00:00", now_s=0.0) == 1_800_000_000.0
    with pytest.raises(ValueError):
        since_epoch("yesterday", now_s=0.0)
    assert calls_table([]) == "no calls stored"
    assert "call CAx" in call_text({"call_sid": "CAx", "started_at": 0.0, "duration_ms": 1000, "outcome": "ended",
                                    "complete": False, "control": "spine", "agent": "", "sources": ["CAx.jsonl.part"],
                                    "turns": [], "transcript": [], "tool_calls": [], "verdicts": [], "errors": []})


def test_console_key_add_makes_a_record_directory_that_does_not_exist_yet(tmp_path):
    """A key made before the first `voicecore up`: the store's directory is made private, as `up` makes it."""
    import io
    import stat

    from voicecore.console.keys_command import run_console_key

    record_dir = tmp_path / "not" / "yet"
    env = {"VOICECORE_RECORD_DIR": str(record_dir)}
    out, err = io.StringIO(), io.StringIO()
    assert run_console_key(env, None, "list", None, out=out, err=err) == 2 and not record_dir.exists()  # list makes nothing
    assert run_console_key(env, None, "add", "ops", out=out, err=err) == 0, err.getvalue()
    assert out.getvalue().startswith("vck_") and stat.S_IMODE(record_dir.stat().st_mode) == 0o700
    assert (record_dir / "calls.db").is_file()
    listed = io.StringIO()
    assert run_console_key(env, None, "list", None, out=listed, err=err) == 0 and listed.getvalue().startswith("ops ")
