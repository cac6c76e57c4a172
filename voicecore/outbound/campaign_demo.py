"""`voicecore campaign demo`: a simulated campaign that proves its crash-safety.

It writes a campaign file of N callees across time zones and a do-not-call file (numbers in assorted
formats), stores the campaign, and runs the campaign loop in a child process against the SQLite store,
killing that process with SIGKILL twice mid-run and starting it again. Then it checks, from the carrier's
own log of placed calls, that no callee was dialled twice for one attempt, no number on the do-not-call
list was dialled, and no dial fell outside the callee's calling window.

What is simulated: the carrier (a log of placed calls in its own SQLite file, and each call's outcome and
length drawn from a seeded random generator per number and attempt, with no audio) and the clock (it jumps
to the next event: the next call's end, or the next callee's window or backoff). The campaign's file,
rules, scheduler and store are the real ones. Placing calls through a real carrier is not built yet.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import heapq
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import phonenumbers

from voicecore.outbound.campaign import Attempt, CampaignScheduler, CampaignSettings
from voicecore.outbound.campaign_file import parse_do_not_call, read_campaign
from voicecore.outbound.campaign_rules import BUSY, COMPLETED, FAILED, NO_ANSWER, OPTED_OUT, VOICEMAIL
from voicecore.outbound.campaign_store import CampaignStore
from voicecore.store.db import SQLITE_PREFIX, CallStore

CAMPAIGN = "demo"
# Monday 30 November 2026, 12:00 UTC: morning in the Americas (closed, then opening), afternoon in Europe
# (open), night in Australia and Japan (closed).
START_S = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc).timestamp()
# Where the callees live: a number prefix, how many digits follow, and a time zone to write in the file's
# timezone column for some rows ("": always read from the number). Australian mobiles span five zones.
REGIONS = (("+1212", 7, ""), ("+1312", 7, ""), ("+1303", 7, ""), ("+1415", 7, ""), ("+1808", 7, ""),
           ("+4420", 8, ""), ("+468", 7, ""), ("+4930", 8, ""), ("+8190", 8, ""), ("+614", 8, "Australia/Perth"))
# The simulated answers: (outcome, weight, seconds the call lasts from dial to end, low and high).
ANSWERS = ((COMPLETED, 40, (40, 300)), (OPTED_OUT, 4, (15, 40)), (BUSY, 14, (3, 8)), (NO_ANSWER, 20, (25, 45)),
           (VOICEMAIL, 17, (30, 70)), (FAILED, 5, (1, 3)))
DNC_SHARE = 0.08


def simulated_answer(seed: int, number: str, attempt: int) -> tuple[str, float]:
    """The outcome and length of a dial: the same for the same number and attempt, whichever process asks."""
    rng = random.Random(f"{seed}:{number}:{attempt}")
    outcome, _, (low, high) = rng.choices(ANSWERS, weights=[w for _, w, _ in ANSWERS])[0]
    return outcome, rng.uniform(low, high)


def demo_files(numbers: int, seed: int) -> tuple[str, str]:
    """A campaign file of ``numbers`` callees and a do-not-call file naming some of them (national,
    international and E.164 spellings, a comment line)."""
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < numbers:
        prefix, digits, explicit = REGIONS[len(rows) % len(REGIONS)]
        candidate = prefix + "".join(rng.choice("23456789") + "".join(rng.choice("0123456789") for _ in range(digits - 1)))
        parsed = phonenumbers.parse(candidate)
        if candidate in seen or not phonenumbers.is_valid_number(parsed):
            continue
        seen.add(candidate)
        timezone = explicit if explicit and rng.random() < 0.5 else ""
        rows.append((candidate, f"Callee {len(rows) + 1}", timezone))
    campaign = "number,name,timezone\n" + "".join(f"{n},{name},{tz}\n" for n, name, tz in rows)
    listed = rng.sample([n for n, _, _ in rows], max(1, int(numbers * DNC_SHARE)))
    spellings = (phonenumbers.PhoneNumberFormat.E164, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
    dnc = "# numbers that asked not to be called\n" + "".join(
        phonenumbers.format_number(phonenumbers.parse(n), spellings[i % 2]) + "\n" for i, n in enumerate(listed))
    return campaign, dnc


class SimulatedCarrier:
    """The carrier's side: its log of every call it was asked to place, and the simulated clock, in its own
    SQLite file (the campaign's store never sees it). The log has no key: a double dial would show."""

    def __init__(self, path: str | Path, seed: int) -> None:
        self.seed = seed
        self.db = sqlite3.connect(str(path), isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # as the store: a killed process loses no commit, a power cut may
        self.db.execute("CREATE TABLE IF NOT EXISTS placed (number TEXT NOT NULL, attempt INTEGER NOT NULL, "
                        "from_number TEXT NOT NULL, placed_at DOUBLE PRECISION NOT NULL, outcome TEXT NOT NULL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS clock (id INTEGER PRIMARY KEY CHECK (id = 1), now DOUBLE PRECISION NOT NULL)")

    def now(self) -> float:
        row = self.db.execute("SELECT now FROM clock").fetchone()
        return float(row[0]) if row else START_S

    def set_now(self, now: float) -> None:
        self.db.execute("INSERT INTO clock (id, now) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET now = excluded.now", (now,))

    def place(self, number: str, attempt: int, from_number: str, now: float) -> tuple[str, float]:
        outcome, seconds = simulated_answer(self.seed, number, attempt)
        self.db.execute("INSERT INTO placed (number, attempt, from_number, placed_at, outcome) VALUES (?, ?, ?, ?, ?)",
                        (number, attempt, from_number, now, outcome))
        return outcome, now + seconds

    def placed(self) -> list[tuple[str, int, str, float, str]]:
        return self.db.execute("SELECT number, attempt, from_number, placed_at, outcome FROM placed").fetchall()

    def close(self) -> None:
        self.db.close()


def run_campaign_loop(store_url: str, carrier_path: str, seed: int, pace_s: float = 0.0) -> int:
    """The campaign process: resume the campaign from the store and run it to the end. Each dial is
    recorded (committed) before the carrier is asked to place it."""
    store = CampaignStore(CallStore.open(store_url))
    carrier = SimulatedCarrier(carrier_path, seed)
    try:
        found = store.find(CAMPAIGN)
        if found is None:
            print(f"voicecore campaign: no campaign {CAMPAIGN!r} in the store", file=sys.stderr)
            return 2
        campaign_id, settings = found
        now = carrier.now()
        store.interrupt_dialing(campaign_id, now)
        scheduler = CampaignScheduler(settings, store.callees(campaign_id), store.do_not_call(), store.attempts(campaign_id))
        calls: list[tuple[float, int, int, str, str]] = []  # (ends_at, row, attempt, outcome, number): a heap
        while True:
            for dial in scheduler.due(now):
                if not store.begin_attempt(campaign_id, dial, now):
                    scheduler.on_refused(dial.row, dial.attempt)
                    continue
                outcome, ends_at = carrier.place(dial.number, dial.attempt, dial.from_number, now)
                heapq.heappush(calls, (ends_at, dial.row, dial.attempt, outcome, dial.number))
                if pace_s:
                    time.sleep(pace_s)
            wakeup = scheduler.next_wakeup()
            moments = ([calls[0][0]] if calls else []) + ([wakeup] if wakeup is not None and wakeup > now else [])
            if not moments:
                return 0 if scheduler.finished else 1
            now = min(moments)
            carrier.set_now(now)
            while calls and calls[0][0] <= now:
                _, row, attempt, outcome, number = heapq.heappop(calls)
                store.end_attempt(campaign_id, row, attempt, outcome, now, number=number)
                scheduler.on_outcome(row, attempt, outcome, now)
    finally:
        carrier.close()
        store.close()


@dataclasses.dataclass
class DemoResult:
    report: dict[str, object]

    @property
    def ok(self) -> bool:
        r = self.report
        return (r["dialed_twice"] == 0 and r["dnc_dialed"] == 0 and r["outside_window"] == 0
                and r["unrecorded_dials"] == 0 and r["over_max_attempts"] == 0 and r["unfinished"] == 0
                and r["early_retries"] == 0)


def _attempt_count(store_path: str) -> int:
    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True, timeout=30)
    try:
        return int(db.execute("SELECT COUNT(*) FROM campaign_attempts").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


def run_demo(numbers: int = 200, concurrency: int = 20, seed: int = 1, kills: int = 2, pace_s: float = 0.002,
             workdir: str | None = None) -> DemoResult:
    """Run the simulated campaign, killing its process ``kills`` times mid-run, and check the carrier's log."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="voicecore-campaign-", dir=workdir) as tmp:
        campaign_text, dnc_text = demo_files(numbers, seed)
        Path(tmp, "callees.csv").write_text(campaign_text, encoding="utf-8")
        settings = CampaignSettings(concurrency=concurrency, from_numbers=("+12025550100", "+12025550101"),
                                    per_from_limit=max(1, (concurrency + 1) // 2))
        callees = read_campaign(Path(tmp, "callees.csv"), window=settings.window)
        file_dnc = parse_do_not_call(dnc_text)
        store_path = os.path.join(tmp, "calls.db")
        store_url = SQLITE_PREFIX + store_path.lstrip("/")
        store = CampaignStore(CallStore.open(store_url))
        campaign_id = store.create(CAMPAIGN, settings, callees, START_S)
        store.add_do_not_call(sorted(file_dnc), "file", START_S)
        store.close()
        carrier_path = os.path.join(tmp, "carrier.db")
        command = [sys.executable, "-m", "voicecore.outbound.campaign_demo", "--store", store_url,
                   "--carrier", carrier_path, "--seed", str(seed), "--pace-ms", str(pace_s * 1000)]
        killed, runs = 0, 0
        while True:
            runs += 1
            child = subprocess.Popen(command)
            if killed < kills:
                # Kill once the attempts recorded so far pass the next share of the campaign.
                threshold = int(numbers * 0.4 * (killed + 1))
                while child.poll() is None and _attempt_count(store_path) < threshold:
                    time.sleep(0.01)
                if child.poll() is None:
                    child.send_signal(signal.SIGKILL)
                    killed += 1
            code = child.wait()
            if code == 0:
                break
            if code != -signal.SIGKILL:
                raise RuntimeError(f"the campaign process exited with {code}")
        report = _check(store_url, carrier_path, campaign_id, file_dnc, seed)
    report.update(numbers=numbers, concurrency=concurrency, seed=seed, kills=killed, runs=runs,
                  real_s=round(time.monotonic() - started, 2))
    return DemoResult(report)


def _check(store_url: str, carrier_path: str, campaign_id: int, file_dnc: set[str], seed: int) -> dict[str, object]:
    """The demo's figures, from the carrier's log against the store (callees, attempts, do-not-call list)."""
    store = CampaignStore(CallStore.open(store_url))
    carrier = SimulatedCarrier(carrier_path, seed)
    try:
        found = store.find(CAMPAIGN)
        assert found is not None
        _, settings = found
        callees = {c.number: c for c in store.callees(campaign_id)}
        attempts = store.attempts(campaign_id)
        dnc = store.do_not_call()
        placed = carrier.placed()
        by_row = {c.row: c.number for c in callees.values()}
        recorded = {(by_row[a.row], a.attempt) for a in attempts}
        per_attempt = Counter((number, attempt) for number, attempt, _, _, _ in placed)
        dnc_dialed = sum(1 for number, _, _, at, _ in placed
                         if number in file_dnc or (number in dnc and dnc[number][1] < at))
        outside = sum(1 for number, _, _, at, _ in placed
                      if not settings.window.is_open_everywhere(at, callees[number].zones))
        scheduler = CampaignScheduler(settings, callees.values(), dnc, attempts)
        first, last = (min(p[3] for p in placed), max(p[3] for p in placed)) if placed else (START_S, START_S)
        return {
            "dialed_twice": sum(n - 1 for n in per_attempt.values() if n > 1),
            "dnc_dialed": dnc_dialed,
            "outside_window": outside,
            "unrecorded_dials": sum(1 for key in per_attempt if key not in recorded),
            # Killed after the dial was recorded and before the carrier was asked: counted, never placed.
            "recorded_not_placed": len(recorded - set(per_attempt)),
            "early_retries": _early_retries(attempts, settings),
            "over_max_attempts": sum(1 for _, attempt in per_attempt if attempt > settings.retry.max_attempts),
            "unfinished": len(callees) - sum(scheduler.results().values()),
            "dials": len(placed),
            "interrupted": sum(1 for a in attempts if a.outcome == "interrupted"),
            "do_not_call": {"file": len(file_dnc), "opted_out": sum(1 for s, _ in dnc.values() if s == "opt-out")},
            "outcomes": dict(sorted(scheduler.results().items())),
            "attempt_outcomes": dict(sorted(Counter(a.outcome for a in attempts).items())),
            "simulated_days": round((last - first) / 86400, 2),
        }
    finally:
        carrier.close()
        store.close()


def _early_retries(attempts: list[Attempt], settings: CampaignSettings) -> int:
    """Attempts dialled before the wait their previous attempt's outcome sets (RetryPolicy) was over."""
    early = 0
    for before, after in zip(attempts, attempts[1:]):
        if before.row == after.row and before.outcome and before.ended_at is not None:
            allowed = settings.retry.next_attempt_at(before.outcome, before.attempt, before.ended_at)
            early += allowed is None or after.dialed_at < allowed
    return early


def main(argv: list[str] | None = None) -> int:
    """The campaign process the demo starts (and kills): ``python -m voicecore.outbound.campaign_demo``."""
    parser = argparse.ArgumentParser(prog="python -m voicecore.outbound.campaign_demo")
    parser.add_argument("--store", required=True)
    parser.add_argument("--carrier", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pace-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    return run_campaign_loop(args.store, args.carrier, args.seed, args.pace_ms / 1000)


if __name__ == "__main__":
    sys.exit(main())
