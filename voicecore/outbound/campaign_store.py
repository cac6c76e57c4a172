"""A campaign's state in the call store: its callees, every dial (recorded before it is placed) and the
do-not-call list, so that a campaign killed at any moment resumes without calling anyone twice for one
attempt.

Owns the SQL of the campaign tables (their schema is migration 6 in voicecore/store/schema.py) and runs
it on a CallStore's connection: same URL, same SQLite conventions (WAL, foreign keys, BEGIN IMMEDIATE).
The rules are campaign_rules.py's; what to dial is campaign.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from voicecore.outbound.campaign import Attempt, CampaignSettings, Dial
from voicecore.outbound.campaign_file import Callee
from voicecore.outbound.campaign_rules import INTERRUPTED, OPTED_OUT, OUTCOMES, CallingWindow, RetryPolicy
from voicecore.store.db import CallStore


class CampaignStoreError(ValueError):
    """A campaign that cannot be created or resumed as asked (the message says why)."""


def settings_to_json(settings: CampaignSettings) -> str:
    return json.dumps({"window": settings.window.describe(), "max_attempts": settings.retry.max_attempts,
                       "backoff_s": dict(settings.retry.backoff_s), "backoff_factor": settings.retry.factor,
                       "concurrency": settings.concurrency, "from_numbers": list(settings.from_numbers),
                       "per_from_limit": settings.per_from_limit}, sort_keys=True)


def settings_from_json(text: str) -> CampaignSettings:
    raw = json.loads(text)
    return CampaignSettings(window=CallingWindow.parse(**raw["window"]),
                            retry=RetryPolicy(max_attempts=raw["max_attempts"], backoff_s=raw["backoff_s"],
                                              factor=raw["backoff_factor"]),
                            concurrency=raw["concurrency"], from_numbers=tuple(raw["from_numbers"]),
                            per_from_limit=raw["per_from_limit"])


class CampaignStore:
    """The campaign tables of one call store. ``CampaignStore(CallStore.open(url))``; close() closes the store."""

    def __init__(self, store: CallStore) -> None:
        self.store = store
        self.db = store.backend

    def close(self) -> None:
        self.store.close()

    # -- campaigns and their callees ----------------------------------------------------------------------------------

    def create(self, name: str, settings: CampaignSettings, callees: Iterable[Callee], now: float) -> int:
        """A new campaign with its callees, in one transaction; CampaignStoreError when the name is taken."""
        with self.db.transaction():
            if self.db.execute("SELECT 1 FROM campaigns WHERE name = ?", (name,)).fetchone():
                raise CampaignStoreError(f"a campaign named {name!r} exists already (resume it, or choose another name)")
            self.db.execute("INSERT INTO campaigns (name, created_at, settings) VALUES (?, ?, ?)",
                            (name, now, settings_to_json(settings)))
            (campaign_id,) = self.db.execute("SELECT id FROM campaigns WHERE name = ?", (name,)).fetchone()
            self.db.executemany(
                "INSERT INTO campaign_callees (campaign_id, row_no, number, zones, fields) VALUES (?, ?, ?, ?, ?)",
                [(campaign_id, c.row, c.number, ",".join(c.zones), json.dumps(c.fields, sort_keys=True)) for c in callees])
        return int(campaign_id)

    def find(self, name: str) -> tuple[int, CampaignSettings] | None:
        row = self.db.execute("SELECT id, settings FROM campaigns WHERE name = ?", (name,)).fetchone()
        return (int(row[0]), settings_from_json(row[1])) if row else None

    def run_state(self, campaign_id: int) -> tuple[str, str]:
        """(state, runner) of a campaign a console runs (running, stopped, finished; its node); ('', '') for one
        the terminal command runs, whose state is its process's."""
        row = self.db.execute("SELECT state, runner FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
        return (str(row[0]), str(row[1])) if row else ("", "")

    def callees(self, campaign_id: int) -> list[Callee]:
        rows = self.db.execute("SELECT row_no, number, zones, fields FROM campaign_callees WHERE campaign_id = ? "
                               "ORDER BY row_no", (campaign_id,)).fetchall()
        return [Callee(row=r[0], number=r[1], zones=tuple(z for z in r[2].split(",") if z), fields=json.loads(r[3]))
                for r in rows]

    # -- attempts -----------------------------------------------------------------------------------------------------

    def attempts(self, campaign_id: int) -> list[Attempt]:
        rows = self.db.execute("SELECT row_no, attempt, from_number, dialed_at, outcome, ended_at FROM campaign_attempts "
                               "WHERE campaign_id = ? ORDER BY row_no, attempt", (campaign_id,)).fetchall()
        return [Attempt(row=r[0], attempt=r[1], from_number=r[2], dialed_at=r[3], outcome=r[4], ended_at=r[5])
                for r in rows]

    def interrupt_dialing(self, campaign_id: int, now: float, keep_placed: bool = False) -> int:
        """End every attempt left 'dialing' (the campaign process stopped between recording a dial and
        learning its outcome) as 'interrupted' at ``now``: it counts as made, whether or not the call was
        placed, and is retried after its backoff if attempts remain. How many there were. ``keep_placed``:
        leave those whose call the carrier took (their call SID is recorded): their outcome can still be
        learnt from the call store (``placed_dialing``)."""
        placed = " AND call_sid = ''" if keep_placed else ""
        with self.db.transaction():
            return int(self.db.execute(
                "UPDATE campaign_attempts SET state = 'ended', outcome = ?, ended_at = ? "
                f"WHERE campaign_id = ? AND state = 'dialing'{placed}", (INTERRUPTED, now, campaign_id)).rowcount)

    def set_call_sid(self, campaign_id: int, row: int, attempt: int, call_sid: str) -> None:
        """The carrier took the dialing attempt's call as ``call_sid``: recorded at once, so that a restarted
        campaign follows the call to its outcome instead of calling again."""
        with self.db.transaction():
            self.db.execute("UPDATE campaign_attempts SET call_sid = ? WHERE campaign_id = ? AND row_no = ? "
                            "AND attempt = ? AND state = 'dialing'", (call_sid, campaign_id, row, attempt))

    def placed_dialing(self, campaign_id: int) -> list[tuple[int, int, str]]:
        """(row, attempt, call SID) of the attempts still 'dialing' whose call the carrier took."""
        rows = self.db.execute("SELECT row_no, attempt, call_sid FROM campaign_attempts WHERE campaign_id = ? "
                               "AND state = 'dialing' AND call_sid != '' ORDER BY row_no", (campaign_id,)).fetchall()
        return [(int(r[0]), int(r[1]), str(r[2])) for r in rows]

    def begin_attempt(self, campaign_id: int, dial: Dial, now: float) -> bool:
        """Record ``dial`` as 'dialing' and commit, before the call is placed. False (nothing recorded: do not
        dial) when the number is on the do-not-call list, which is read in the same transaction, so a number
        added by anyone up to this moment is honoured. A second record of the same attempt raises (the
        table's key): a dial is never placed twice."""
        with self.db.transaction():
            if self.db.execute("SELECT 1 FROM do_not_call WHERE number = ?", (dial.number,)).fetchone():
                return False
            self.db.execute("INSERT INTO campaign_attempts (campaign_id, row_no, attempt, from_number, state, dialed_at) "
                            "VALUES (?, ?, ?, ?, 'dialing', ?)", (campaign_id, dial.row, dial.attempt, dial.from_number, now))
        return True

    def end_attempt(self, campaign_id: int, row: int, attempt: int, outcome: str, now: float, call_sid: str = "",
                    number: str = "") -> None:
        """Attempt ``attempt`` of the callee on ``row`` ended as ``outcome``. An opt-out puts ``number`` on the
        do-not-call list in the same transaction."""
        if outcome not in OUTCOMES:
            raise CampaignStoreError(f"unknown outcome {outcome!r}")
        with self.db.transaction():
            updated = self.db.execute(
                "UPDATE campaign_attempts SET state = 'ended', outcome = ?, ended_at = ?, call_sid = ? "
                "WHERE campaign_id = ? AND row_no = ? AND attempt = ? AND state = 'dialing'",
                (outcome, now, call_sid, campaign_id, row, attempt)).rowcount
            if updated != 1:
                raise CampaignStoreError(f"row {row}: attempt {attempt} is not dialing")
            if outcome == OPTED_OUT and number:
                self._add_do_not_call([number], "opt-out", now)

    # -- the do-not-call list -----------------------------------------------------------------------------------------

    def add_do_not_call(self, numbers: Iterable[str], source: str, now: float) -> int:
        """Add E.164 numbers to the list (those already on it keep their first source); how many were new."""
        with self.db.transaction():
            return self._add_do_not_call(numbers, source, now)

    def _add_do_not_call(self, numbers: Iterable[str], source: str, now: float) -> int:
        added = 0
        for number in numbers:
            if not self.db.execute("SELECT 1 FROM do_not_call WHERE number = ?", (number,)).fetchone():
                self.db.execute("INSERT INTO do_not_call (number, source, added_at) VALUES (?, ?, ?)", (number, source, now))
                added += 1
        return added

    def do_not_call(self) -> dict[str, tuple[str, float]]:
        """The list: number -> (source, added_at)."""
        return {r[0]: (r[1], r[2]) for r in self.db.execute("SELECT number, source, added_at FROM do_not_call").fetchall()}
