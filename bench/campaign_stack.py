"""`voicecore campaign run` against a running node, with the carrier and model simulators: the e2e test's
stack and the campaign figure.

Brings up the carrier simulator's REST API (its callees: a person, an opt-out person, a voicemail, busy, no
answer, failed, in turn), the model simulator (told the callees' words) and the stack (`voicecore up`'s
processes under supervisord, with a call store), writes a campaign file of Swedish mobile numbers and runs
`voicecore campaign run` on it as its own process, with the node's settings in its environment. Then it
checks the carrier's own log of placed calls against the store: dialled twice, dialled while on the
do-not-call list, dialled outside the window, and each attempt's outcome against the callee's kind.

    python -m bench.campaign_stack --numbers 200 --concurrency 20 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from voicecore.agent.load import default_agent_dir
from voicecore.carriers import registry
from voicecore.config import load_config
from voicecore.demo import demo_config, demo_sim_config
from voicecore.sim.callee_core import OPT_OUT, callee_seed, plan_callee, sentences
from voicecore.sim.caller_voice import speak
from voicecore.sim.carrier import generate_credentials
from voicecore.sim.carrier_rest import CarrierRestServer
from voicecore.sim.model_server import serve_model_sim
from voicecore.store.db import SQLITE_PREFIX
from voicecore.supervise import Stack, resolve_config

FROM_NUMBERS = ("+46812345600", "+46812345601")
# The callees in turn. A person completes; busy, no answer and failed are tried again after their short waits.
ROTATION = ("human", OPT_OUT, "busy", "voicemail", "no-answer", "human", "failed", "human")
# What each kind's attempts must end as (voicemail: the answer gate's verdict, which may miss).
EXPECTED = {"human": "completed", OPT_OUT: "opted-out", "busy": "busy", "no-answer": "no-answer", "failed": "failed",
            "voicemail": "voicemail"}
RETRY_AFTER_S = 2.0


def callee_number(index: int) -> str:
    return f"+467010{index:05d}"


def campaign_rows(numbers: int) -> list[tuple[str, str]]:
    """(number, kind) of the campaign's callees."""
    return [(callee_number(i), ROTATION[i % len(ROTATION)]) for i in range(numbers)]


def _attempts_recorded(store_path: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True, timeout=30)
    except sqlite3.OperationalError:
        return 0
    try:
        return int(db.execute("SELECT COUNT(*) FROM campaign_attempts").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


def _run_campaign_process(command: list[str], env: dict, cwd: Path, timeout_s: float, store_path: Path,
                          kill_after: int) -> tuple[subprocess.CompletedProcess, int]:
    """Run `voicecore campaign run`; with ``kill_after``, SIGKILL it once that many attempts are recorded and run
    the same command again (the resume). The last run's result and the kills."""
    kills = 0
    if kill_after:
        child = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while child.poll() is None and _attempts_recorded(store_path) < kill_after and time.monotonic() < deadline:
            time.sleep(0.05)
        if child.poll() is None:
            child.kill()
            kills += 1
        child.wait()
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, cwd=cwd), kills


@dataclasses.dataclass
class CampaignStack:
    """The simulators and the stack a campaign runs against (``campaign_stack``)."""

    rows: list[tuple[str, str]]
    rest: CarrierRestServer
    credentials: object
    config: object
    stack: Stack
    record_dir: Path


@contextlib.asynccontextmanager
async def campaign_stack(numbers: int, concurrency: int, workdir: Path, ring_ms: int = 200, carrier: str = "twilio"):
    """The carrier simulator's REST API with the campaign's callees, the model simulator told their words, and the
    stack (its console too) with a call store and the carrier's account: up, then stopped."""
    rows = campaign_rows(numbers)
    base = resolve_config(load_config(os.environ, None))
    credentials = generate_credentials(base.twilio_auth_token)
    rest = CarrierRestServer(credentials)
    rest.ring_ms = ring_ms
    await rest.__aenter__()
    sim = None
    log_file = None
    stack = None
    try:
        names = {f.name for f in dataclasses.fields(base)}
        base = dataclasses.replace(base, **{k: v for k, v in credentials.rest_settings(rest.base_url).items() if k in names})
        base = dataclasses.replace(base, twilio_account_sid="AC" + secrets.token_hex(16))
        # the node serves the carrier's webhooks and stream only with its secret (the simulator's matching half)
        base = dataclasses.replace(base, **registry.get(carrier).simulator.gateway_settings(credentials))
        phrases = []
        for number, kind in rows:
            rest.callees[number] = kind
            plan = plan_callee(kind, callee_seed(number))
            said = (sentences(plan.text) if plan.answered else []) + ([plan.reply] if plan.reply else [])
            for sentence in said:
                if (plan.language, sentence) not in rest.speech:
                    rest.speech[(plan.language, sentence)] = await asyncio.to_thread(speak, sentence, plan.language)
                    phrases.append((sentence, rest.speech[(plan.language, sentence)]))
        sim, sim_port = await serve_model_sim("127.0.0.1", 0, dataclasses.replace(demo_sim_config(), caller_phrases=tuple(phrases)))
        record_dir = workdir / "records"
        record_dir.mkdir(parents=True, exist_ok=True)
        # twice the concurrency: an ended call's slot rests 2 s before it is handed out again, and the campaign
        # dials its next callee as soon as the outcome is stored
        config = demo_config(base, workdir, 2 * concurrency + 2, sim_port, record_dir=str(record_dir))
        stack = Stack(config)
        log_file = open(workdir / "stack.log", "w")  # noqa: SIM115 (closed in the finally below)
        await asyncio.to_thread(stack.start, log_file)
        await asyncio.to_thread(stack.wait_ready, 240.0)  # a first start compiles the pacer (numba)
        yield CampaignStack(rows, rest, credentials, config, stack, record_dir)
        await rest.wait_outbound(60.0)
    finally:
        if stack is not None:
            await asyncio.to_thread(stack.stop)
        if sim is not None:
            await sim.aclose()
        await rest.__aexit__(None, None, None)
        if log_file is not None:
            log_file.close()


def do_not_call_numbers(rows: list[tuple[str, str]], count: int) -> list[str]:
    """The do-not-call file names the last persons of the rotation: never dialled."""
    return [n for n, kind in rows if kind == "human"][-count:] if count else []


async def run_stack_campaign(numbers: int, concurrency: int, workdir: Path, max_attempts: int = 2,
                             dnc_numbers: int = 1, ring_ms: int = 200, timeout_s: float = 600.0,
                             kill_after: int = 0) -> dict:
    """``kill_after``: kill the campaign process once that many attempts are recorded, then run it again."""
    async with campaign_stack(numbers, concurrency, workdir, ring_ms) as up:
        rows, config, record_dir = up.rows, up.config, up.record_dir
        campaign = workdir / "callees.csv"
        campaign.write_text("number,first_name,timezone\n" + "".join(f"{n},Callee {i},Europe/Stockholm\n"
                                                                     for i, (n, _) in enumerate(rows)), encoding="utf-8")
        listed = do_not_call_numbers(rows, dnc_numbers)
        dnc = workdir / "dnc.txt"
        dnc.write_text("# asked by letter\n" + "".join(n + "\n" for n in listed), encoding="utf-8")
        env = dict(os.environ, VOICECORE_LISTEN=config.listen, VOICECORE_PUBLIC_URL="", VOICECORE_RECORD_DIR=str(record_dir),
                   VOICECORE_TWILIO_API_BASE=up.rest.base_url, VOICECORE_TWILIO_AUTH_TOKEN=up.credentials.twilio_auth_token,
                   VOICECORE_TWILIO_ACCOUNT_SID=config.twilio_account_sid, VOICECORE_DATABASE_URL="")
        command = [sys.executable, "-m", "voicecore.cli", "campaign", "run", str(campaign), "--agent", str(default_agent_dir()),
                   "--concurrency", str(concurrency), "--do-not-call", str(dnc), "--days", "mon-sun", "--window-start",
                   "00:00", "--window-end", "23:59", "--max-attempts", str(max_attempts), "--json"]
        for number in FROM_NUMBERS:
            command += ["--from", number]
        for outcome in ("busy", "no-answer", "failed", "voicemail", "interrupted"):
            command += ["--retry-after", f"{outcome}={RETRY_AFTER_S}"]
        started = time.monotonic()
        done, kills = await asyncio.to_thread(_run_campaign_process, command, env, workdir, timeout_s,
                                              record_dir / "calls.db", kill_after)
        wall_s = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    run_report = json.loads(lines[-1]) if lines else {}
    report = check(record_dir / "calls.db", rows, up.rest, set(listed), max_attempts)
    report.update(numbers=numbers, concurrency=concurrency, wall_s=round(wall_s, 1), exit_code=done.returncode, kills=kills,
                  run=run_report, stderr_tail=done.stderr[-3000:])
    return report


def check(store_path: Path, rows: list[tuple[str, str]], rest: CarrierRestServer, listed: set[str],
          max_attempts: int) -> dict:
    """The carrier's log of placed calls (rest.outbound) against the store's attempts and lists."""
    kinds = dict(rows)
    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        attempts = db.execute("SELECT c.number, a.attempt, a.outcome, a.call_sid, a.dialed_at, a.ended_at "
                              "FROM campaign_attempts a JOIN campaign_callees c USING (campaign_id, row_no) "
                              "ORDER BY c.number, a.attempt").fetchall()
        dnc = {n: s for n, s in db.execute("SELECT number, source FROM do_not_call").fetchall()}
        statuses = db.execute("SELECT COUNT(*) FROM call_status").fetchone()[0]
    finally:
        db.close()
    placed = Counter(seen.placed.to for seen in rest.outbound)
    per_number = Counter(number for number, *_ in attempts)
    mismatched = [f"{n} attempt {a}: {kinds[n]} ended as {o}" for n, a, o, *_ in attempts
                  if o != EXPECTED[kinds[n]] and kinds[n] != "voicemail" and o != "interrupted"]
    early = []
    by_number: dict[str, list] = {}
    for row in attempts:
        by_number.setdefault(row[0], []).append(row)
    for number, tries in by_number.items():
        for before, after in zip(tries, tries[1:]):
            if after[4] < before[5] + RETRY_AFTER_S:
                early.append(number)
    return {
        "dials": sum(placed.values()),
        "dialed_twice": sum(max(0, placed[n] - per_number[n]) for n in placed),
        "unrecorded_dials": sum(1 for n in placed if n not in per_number),
        "dnc_dialed": sum(placed[n] for n in listed),
        "outside_window": 0,  # the window is open every day, all day: nothing can fall outside it
        "attempts_per_kind": {k: dict(Counter(len(by_number.get(n, [])) for n, kk in rows if kk == k))
                              for k in sorted(set(kinds.values()))},
        "attempt_outcomes": dict(Counter(o for _, _, o, *_ in attempts)),
        "mismatched_outcomes": mismatched[:20],
        "voicemail_outcomes": dict(Counter(o for n, _, o, *_ in attempts if kinds[n] == "voicemail")),
        "early_retries": len(early),
        "opt_out_callees": sum(1 for _, k in rows if k == OPT_OUT),
        "opted_out_on_list": sum(1 for n, k in rows if k == OPT_OUT and dnc.get(n) == "opt-out"),
        "do_not_call": dict(Counter(dnc.values())),
        "status_rows": statuses,
        "status_callbacks_refused": sum(1 for seen in rest.outbound for _, code in seen.statuses if code != 204),
        "max_attempts": max_attempts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.campaign_stack")
    parser.add_argument("--numbers", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--max-attempts", type=int, default=2)
    parser.add_argument("--kill-after", type=int, default=0, help="kill the campaign process after N attempts, then resume it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voicecore-campaign-stack-") as tmp:
        report = asyncio.run(run_stack_campaign(args.numbers, args.concurrency, Path(tmp), args.max_attempts,
                                                    kill_after=args.kill_after))
    print(json.dumps(report, indent=None if args.json else 2))
    ok = (report["exit_code"] == 0 and report["dialed_twice"] == 0 and report["dnc_dialed"] == 0
          and not report["mismatched_outcomes"] and report["early_retries"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
