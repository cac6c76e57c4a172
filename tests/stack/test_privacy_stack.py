"""Storage tiers end to end: `voicecore demo` with the Swedish shop agent, whose simulated caller says their
phone number ("Ring mig imorgon på plus 46 70 123 45 67.") and has a callback booked to it (the agent reads
the number back digit by digit in the confirmation prompt). Under ``redacted`` and ``metadata_only`` the
number is nowhere on disk: not in the record directory, the SQLite call store (with its WAL), nor the stack's
logs; the tool still got it whole (the shop API's fake booked the callback). Under ``metadata_only`` the
store keeps the call and its turns with no words at all and the record no audio.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from demo_run import why_not_ok

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The caller's number in the forms it is said, written, sent to the tool and read back.
NUMBER_FORMS = ("70 123 45 67", "701234567", "123 45 67", "sju noll, ett två tre", "fyra sex, sju noll")
DEMO_TIMEOUT_S = 240


def agent_with_tier(tmp_path: Path, storage: str) -> Path:
    """The shop assistant with the given tier; its function's description gives another example number, so
    that the caller's number is on disk only if what the caller said is."""
    agent = tmp_path / "agent"
    shutil.copytree(ROOT / "examples" / "shop-assistant", agent)
    # the shop's own numbers (its function's example, its switchboard in knowledge/), made unlike the caller's
    for name, theirs, other in (("flow.json", "+46 70 123 45 67", "+46 8 555 000 00"),
                                ("knowledge/villkor.md", "08-123 45 67", "08-555 000 00")):
        path = agent / name
        text = path.read_text(encoding="utf-8")
        assert theirs in text
        path.write_text(text.replace(theirs, other), encoding="utf-8")
    toml = agent / "agent.toml"
    text = toml.read_text(encoding="utf-8")
    assert 'storage = "redacted"' in text
    toml.write_text(text.replace('storage = "redacted"', f'storage = "{storage}"'), encoding="utf-8")
    for path in agent.rglob("*"):
        # the demo's script and the agent's tests (tests/*.toml): what callers say, not what the agent keeps
        if path.is_file() and path.name != "demo.toml" and path.parent.name != "tests":
            assert not any(form in path.read_text(encoding="utf-8", errors="replace") for form in NUMBER_FORMS[:3]), path
    return agent


def run_demo(agent: Path, records: Path) -> tuple[dict, str]:
    command = [sys.executable, "-m", "voicecore.cli", "demo", "--agent", str(agent), "--calls", "1", "--seconds", "60",
               "--json", "--logs", "--record-dir", str(records)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, cwd=ROOT)
    # no report at all (the stack never got ready): what the demo said is on stderr
    assert done.stdout.strip(), f"no report (exit {done.returncode}): {done.stderr[-6000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and report["ok"], why_not_ok(report, done.stderr[-4000:])
    return report, done.stderr


def on_disk(records: Path, logs: str) -> dict[str, str]:
    found = {path.name: path.read_bytes().decode("utf-8", errors="replace") for path in records.iterdir() if path.is_file()}
    found["logs"] = logs
    assert "calls.db" in found and any(name.endswith(".jsonl") for name in found)
    assert "gateway" in logs and "model" in logs  # the stack's own log lines, not an empty capture
    return found


TIERS = ("redacted", "metadata_only")


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> dict[str, tuple[Path, dict, str]]:
    """Each tier's demo (one call each), both at once: two small stacks, half the minutes of one after the other."""
    def run(storage: str) -> tuple[Path, dict, str]:
        directory = tmp_path_factory.mktemp(storage)
        records = directory / "records"
        report, logs = run_demo(agent_with_tier(directory, storage), records)
        return records, report, logs

    with ThreadPoolExecutor(len(TIERS)) as pool:
        return dict(zip(TIERS, pool.map(run, TIERS)))


@pytest.mark.parametrize("storage", TIERS)
def test_the_callers_number_is_not_on_disk(demos, storage: str) -> None:
    records, report, logs = demos[storage]
    agent = report["agent"]
    assert agent["actions_executed"] == 1 and agent["tool_server_requests"] == 1  # the tool got a number it could book
    assert report["calls_in_store"] == 1 and report["records_written"] == 1
    files = on_disk(records, logs)
    for name, text in files.items():
        for form in NUMBER_FORMS:
            assert form not in text, (storage, name, form)
    db = sqlite3.connect(records / "calls.db")
    try:
        (calls,) = db.execute("SELECT count(*) FROM calls").fetchone()
        turns = db.execute("SELECT transcript, agent_text FROM turns").fetchall()
        texts = [row[0] for row in db.execute("SELECT text FROM transcripts")]
        arguments = [row[0] for row in db.execute("SELECT arguments FROM tool_calls")]
    finally:
        db.close()
    assert calls == 1 and len(turns) >= 3
    (record,) = [text for name, text in files.items() if name.endswith(".jsonl")]
    if storage == "redacted":
        assert report["records_replayed_identical"] == 1
        assert "Ring mig imorgon på [phone]." in texts
        assert arguments and all("[phone]" in a for a in arguments)
    else:
        assert report["records_replayed_identical"] == 0  # no words to replay: the store has the call
        assert all(t == "" for t in texts) and all(row == ("", "") for row in turns)
        for words in ("Ring mig", "Vad kostar Premium"):  # the caller's words
            for name, text in files.items():
                at = text.lower().find(words.lower())
                assert at < 0, (name, text[max(0, at - 400):at + 100])
        assert '"ulaw"' not in record and 'audio.delta","delta":"' not in record.replace('\\"', '"').replace('"delta":""', "")
