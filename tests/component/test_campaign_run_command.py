"""`voicecore campaign run` refuses before dialling: a file with problems (every one listed), a setting it
cannot use, no carrier credentials, no call store. Run as the command runs, in its own process; nothing
listens at the carrier URL it is given, so a dial would show as a 'not placed' line and a stored attempt."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from voicecore.agent.load import default_agent_dir


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_")}
    environ.update(VOICECORE_RECORD_DIR=str(tmp_path / "records"), VOICECORE_TWILIO_API_BASE="http://127.0.0.1:9",
                   VOICECORE_PUBLIC_URL="http://127.0.0.1:9")
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "voicecore.cli", "campaign", "run", *args], capture_output=True,
                          text=True, env=environ, cwd=tmp_path, timeout=60)


def attempts(tmp_path: Path) -> int:
    store = tmp_path / "records" / "calls.db"
    if not store.exists():
        return 0
    db = sqlite3.connect(store)
    try:
        return db.execute("SELECT COUNT(*) FROM campaign_attempts").fetchone()[0]
    finally:
        db.close()


def test_a_file_with_problems_lists_every_one_and_dials_nothing(tmp_path):
    (tmp_path / "callees.csv").write_text("number,first_name\n+46701234567,Ann\nhello,Bo\n+46701234567,Cy\n")
    (tmp_path / "dnc.txt").write_text("+46701234568\nnot a number\n")
    done = run(tmp_path, "callees.csv", "--agent", str(default_agent_dir()), "--from", "+46812345600",
               "--do-not-call", "dnc.txt", "--days", "mon-sun", VOICECORE_TWILIO_ACCOUNT_SID="AC" + "0" * 32,
               VOICECORE_TWILIO_AUTH_TOKEN="tok")
    assert done.returncode == 1
    assert "row 3: number 'hello'" in done.stderr and "row 4: +46701234567 is also on row 2" in done.stderr
    assert "dnc.txt" in done.stderr and "3 problem(s); nothing was dialled" in done.stderr
    assert attempts(tmp_path) == 0


def test_unusable_settings_and_missing_credentials_are_refused_before_anything_is_stored(tmp_path):
    (tmp_path / "callees.csv").write_text("number,first_name\n+46701234567,Ann\n")
    agent = str(default_agent_dir())
    bad_window = run(tmp_path, "callees.csv", "--agent", agent, "--from", "+46812345600", "--window-start", "21:00",
                     "--window-end", "08:00")
    assert bad_window.returncode == 2 and "start 21:00 must be before end 08:00" in bad_window.stderr
    bad_retry = run(tmp_path, "callees.csv", "--agent", agent, "--from", "+46812345600", "--retry-after", "fax=3")
    assert bad_retry.returncode == 2 and "--retry-after 'fax=3'" in bad_retry.stderr
    no_credentials = run(tmp_path, "callees.csv", "--agent", agent, "--from", "+46812345600")
    assert no_credentials.returncode == 2 and "twilio_account_sid and twilio_auth_token" in no_credentials.stderr
    no_store = run(tmp_path, "callees.csv", "--agent", agent, "--from", "+46812345600", VOICECORE_RECORD_DIR="",
                   VOICECORE_TWILIO_ACCOUNT_SID="AC" + "0" * 32, VOICECORE_TWILIO_AUTH_TOKEN="tok")
    assert no_store.returncode == 2 and "no call store" in no_store.stderr
    assert attempts(tmp_path) == 0


def test_a_campaign_the_console_runs_is_not_run_by_the_command_too(tmp_path):
    from voicecore.outbound.campaign import CampaignSettings
    from voicecore.outbound.campaign_file import Callee
    from voicecore.outbound.campaign_store import CampaignStore
    from voicecore.store import CallStore

    (tmp_path / "callees.csv").write_text("number\n+46701234567\n")
    (tmp_path / "records").mkdir()
    store = CampaignStore(CallStore.open(f"sqlite:///{tmp_path}/records/calls.db"))
    try:
        campaign_id = store.create("callees", CampaignSettings(), [Callee(2, "+46701234567", ("Europe/Stockholm",), {})], 0.0)
        with store.db.transaction():
            store.db.execute("UPDATE campaigns SET state = 'running', runner = 'node-a' WHERE id = ?", (campaign_id,))
    finally:
        store.close()
    done = run(tmp_path, "callees.csv", "--agent", str(default_agent_dir()), "--from", "+46812345600",
               VOICECORE_TWILIO_ACCOUNT_SID="AC" + "0" * 32, VOICECORE_TWILIO_AUTH_TOKEN="tok")
    assert done.returncode == 1 and "runs in the console of node 'node-a'" in done.stderr
    assert attempts(tmp_path) == 0
