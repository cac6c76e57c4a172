"""The console over a PostgreSQL store that is killed and started again (pgserver, through the chaos bench's
wrapper bench/postgres.py): while it is down every request that needs the store is answered 503 with
Retry-After (not a 500, not a crash), the outage is logged once, and once it is back the same requests are
served again, the console's connection reopened by itself."""

from __future__ import annotations

import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from console_alone import start_console
from waiting import wait_until

pytestmark = pytest.mark.integration


def get(console, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(console.base + path, headers={"Authorization": f"Bearer {console.key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_a_store_down_is_503_and_the_console_serves_again_when_it_is_back():
    pytest.importorskip("pgserver")
    from bench.postgres import BenchPostgres
    from voicecore.demo import free_port

    with tempfile.TemporaryDirectory(prefix="voicecore-console-pg-") as tmp:
        postgres = BenchPostgres(Path(tmp) / "pg", free_port())
        (Path(tmp) / "pg").mkdir()
        (Path(tmp) / "console").mkdir()
        console = None
        try:
            postgres.create()
            console = start_console(Path(tmp) / "console", VOICECORE_DATABASE_URL=postgres.url)
            assert get(console, "/api/calls")[0] == 200
            assert get(console, f"/api/calls/{console.sid}/events")[0] == 200

            assert postgres.kill() is not None
            # the open connection is cut (its backend ends with the postmaster), and reopening it is refused;
            # the API key is checked from a cache a while, so the store is asked by the routes themselves
            for path in ("/api/calls", f"/api/calls/{console.sid}/events", f"/api/calls/{console.sid}"):
                status, headers = get(console, path)
                assert status == 503 and headers.get("Retry-After") == "5", (path, status, console.log()[-2000:])
            assert console.process.poll() is None

            postgres.start()
            # served again once the restarted server takes connections (a loaded machine's start may lag the
            # postmaster's launch by a moment): the next request opens a new connection, no restart needed
            wait_until(lambda: get(console, "/api/calls")[0] == 200, 20, "the console serving again",
                       interval_s=0.2, detail=console.log)
            assert get(console, f"/api/calls/{console.sid}/events")[0] == 200
            log = console.log()
            assert log.count("the call store cannot be reached") == 1, log[-3000:]
            assert log.count("the call store answers again") == 1
            assert "Traceback" not in log
        finally:
            if console is not None:
                console.stop()
            postgres.stop()
