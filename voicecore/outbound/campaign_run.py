"""`voicecore campaign run`: a campaign's calls placed through the carrier from the running node.

Owns the campaign process's loop on the real clock: the scheduler (campaign.py) says whom to dial; each dial
is recorded in the store (campaign_store.py) and committed before the carrier's Calls API is asked to place it
(dial.py, as `voicecore call` does); the attempt's outcome is read from the call store, where the node keeps
the call's verified status callbacks (table ``call_status``, by call SID) and, once the call's record is
stored, its answer verdict and whether the callee opted out (table ``calls``); campaign_rules.py's
``attempt_outcome`` says what they mean. The do-not-call list is read again before every round of dials, so
an opt-out in any call (this campaign's or another's) is honoured from then on; the store reads it once more
in the transaction that records each dial.

An answered call's record may go by another id than the one the campaign follows (Plivo: the CallUUID beside
the Make Call's request_uuid): the status row names it (``record_call_sid``), and the verdict is read under it.
The same engine runs a campaign started through the console's API (workers/console/campaigns.py); ``stop()``
ends a run without a new dial once its calls in the air have ended.

A killed campaign resumes when the same command runs again. Each attempt's call SID is recorded as soon as the
carrier takes the call, so an attempt left ``dialing`` with a call SID is followed to its outcome in the store
(the node kept receiving its status callbacks); one without (killed between recording the dial and the
carrier's answer) ends ``interrupted`` and is retried after its wait. No attempt is dialled twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from voicecore.outbound import dial
from voicecore.outbound.campaign import CampaignScheduler, CampaignSettings, Dial
from voicecore.outbound.campaign_file import Callee
from voicecore.outbound.campaign_rules import FAILED, attempt_outcome
from voicecore.outbound.campaign_store import CampaignStore
from voicecore.store.db import CallStore

POLL_S = 0.25  # how often a call in the air looks for its status in the store
RECORD_WAIT_S = 60.0  # after a call's completed status, how long its verdict and opt-out may take to be stored
DNC_REFRESH_S = 1.0  # how often the do-not-call list is read again from the store


@dataclasses.dataclass(frozen=True, slots=True)
class Carrier:
    """Where and how the calls are placed: the node's public URL (its voice webhook and status callback) and
    the carrier's API with its credentials."""

    node_url: str
    api_base: str
    account_sid: str
    auth_token: str
    carrier: str = "twilio"
    machine_detection: str = ""


@dataclasses.dataclass(slots=True)
class RunReport:
    campaign: str
    campaign_id: int
    callees: int
    resumed: bool
    interrupted_on_start: int = 0  # dials recorded but not taken by the carrier when the last run stopped
    followed_on_start: int = 0  # calls the carrier had taken when the last run stopped: followed to their outcome
    dials: int = 0
    refused_by_dnc: int = 0
    not_placed: int = 0
    attempt_outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    finished: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["attempt_outcomes"] = dict(sorted(self.attempt_outcomes.items()))
        data["outcomes"] = dict(sorted(self.outcomes.items()))
        data["seconds"] = round(self.seconds, 2)
        return data


class Progress:
    """One line on the terminal, rewritten in place (a plain line every few seconds when it is not a terminal)."""

    def __init__(self, total: int, stream: TextIO | None = None, every_s: float = 5.0) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.last_s = 0.0

    def update(self, done: int, in_flight: int, dials: int, outcomes: Counter[str], force: bool = False) -> None:
        now = time.monotonic()
        if not force and (now - self.last_s < (0.2 if self.tty else self.every_s)):
            return
        self.last_s = now
        width = 30
        filled = width * done // self.total if self.total else width
        counts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} done, {in_flight} in the air, "
                f"{dials} dials{': ' + counts if counts else ''}")
        if self.tty:
            self.stream.write("\r" + line[:200] + "\x1b[K")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


class CampaignRun:
    """One campaign process: ``await CampaignRun(...).run()`` until every callee is done."""

    def __init__(self, store: CampaignStore, campaign_id: int, name: str, settings: CampaignSettings,
                 carrier: Carrier, *, call_timeout_s: float = 2 * 3600.0, record_wait_s: float = RECORD_WAIT_S,
                 progress: Progress | None = None, clock: Callable[[], float] = time.time, resumed: bool = False) -> None:
        self.store = store
        self.campaign_id = campaign_id
        self.settings = settings
        self.carrier = carrier
        self.call_timeout_s = call_timeout_s
        self.record_wait_s = record_wait_s
        self.progress = progress
        self.clock = clock
        self.callees: dict[int, Callee] = {}
        self.report = RunReport(name, campaign_id, 0, resumed)
        self.lock = asyncio.Lock()  # one store call at a time: the store's connection is not shared between threads
        self.woken = asyncio.Event()
        self.stopping = False  # stop(): no new dial; the run ends when the calls in the air have

    def stop(self) -> None:
        """Dial no one more; ``run`` returns once the calls in the air have ended (their outcomes stored)."""
        self.stopping = True
        self.woken.set()

    async def _store(self, fn: Callable[..., Any], *args: Any) -> Any:
        async with self.lock:
            return await _in_thread(fn, *args)

    async def run(self) -> RunReport:
        started = time.monotonic()
        now = self.clock()
        # A dial recorded but not yet taken by the carrier when the last run stopped may or may not have been
        # placed: interrupted. One the carrier took (its call SID recorded) is followed to its outcome.
        self.report.interrupted_on_start = await self._store(self.store.interrupt_dialing, self.campaign_id, now, True)
        placed = await self._store(self.store.placed_dialing, self.campaign_id)
        self.report.followed_on_start = len(placed)
        callees = await self._store(self.store.callees, self.campaign_id)
        self.callees = {c.row: c for c in callees}
        self.report.callees = len(callees)
        scheduler = CampaignScheduler(self.settings, callees, (await self._store(self.store.do_not_call)).keys(),
                                      await self._store(self.store.attempts, self.campaign_id))
        calls: set[asyncio.Task] = set()
        for row, attempt, call_sid in placed:
            task = asyncio.ensure_future(self._follow(row, attempt, call_sid, scheduler))
            calls.add(task)
            task.add_done_callback(calls.discard)
        next_dnc_s = 0.0
        try:
            while True:
                now = self.clock()
                if now >= next_dnc_s:
                    next_dnc_s = now + DNC_REFRESH_S
                    for number in (await self._store(self.store.do_not_call)).keys() - scheduler.do_not_call:
                        scheduler.add_do_not_call(number)
                for dial_ in ([] if self.stopping else scheduler.due(now)):
                    if not await self._store(self.store.begin_attempt, self.campaign_id, dial_, self.clock()):
                        scheduler.on_refused(dial_.row, dial_.attempt)
                        self.report.refused_by_dnc += 1
                        continue
                    self.report.dials += 1
                    task = asyncio.ensure_future(self._attempt(dial_, scheduler))
                    calls.add(task)
                    task.add_done_callback(calls.discard)
                self._show(scheduler)
                if (scheduler.finished or self.stopping) and not calls:
                    break
                wakeup = scheduler.next_wakeup()
                wait_s = 1.0 if wakeup is None else min(1.0, max(0.05, wakeup - self.clock()))
                self.woken.clear()
                try:
                    await asyncio.wait_for(self.woken.wait(), wait_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            for task in calls:
                task.cancel()
            if calls:
                await asyncio.gather(*calls, return_exceptions=True)
        self.report.outcomes = scheduler.results()
        self.report.finished = scheduler.finished
        self.report.seconds = time.monotonic() - started
        self._show(scheduler, force=True)
        if self.progress is not None:
            self.progress.close()
        return self.report

    def _show(self, scheduler: CampaignScheduler, force: bool = False) -> None:
        if self.progress is not None:
            self.progress.update(sum(scheduler.results().values()), scheduler.in_flight, self.report.dials,
                                 scheduler.results(), force)

    async def _attempt(self, dial_: Dial, scheduler: CampaignScheduler) -> None:
        """Place one recorded dial and wait for its outcome; then end the attempt in the store and the scheduler."""
        callee = self.callees[dial_.row]
        fields = {k: v for k, v in callee.fields.items() if k != "timezone"}
        try:
            placed = await dial.place_call(node_url=self.carrier.node_url, api_base=self.carrier.api_base,
                                           account_sid=self.carrier.account_sid, auth_token=self.carrier.auth_token,
                                           to=dial_.number, from_=dial_.from_number, fields=fields,
                                           carrier=self.carrier.carrier,
                                           machine_detection=self.carrier.machine_detection)
        except ValueError as exc:  # a field the carrier's request cannot carry: this callee cannot be called
            placed = dial.Placed(False, "", "", str(exc))
        if not placed.ok:
            self.report.not_placed += 1
            print(f"voicecore campaign run: row {dial_.row} ({dial_.number}) attempt {dial_.attempt}: not placed: "
                  f"{placed.error}", file=sys.stderr)
            await self._end(dial_.row, dial_.attempt, FAILED, "", scheduler)
            return
        await self._store(self.store.set_call_sid, self.campaign_id, dial_.row, dial_.attempt, placed.call_sid)
        await self._follow(dial_.row, dial_.attempt, placed.call_sid, scheduler)

    async def _follow(self, row: int, attempt: int, call_sid: str, scheduler: CampaignScheduler) -> None:
        """Wait for a placed call's outcome in the store, then end its attempt."""
        await self._end(row, attempt, await self._outcome(call_sid), call_sid, scheduler)

    async def _end(self, row: int, attempt: int, outcome: str, call_sid: str, scheduler: CampaignScheduler) -> None:
        await self._store(self.store.end_attempt, self.campaign_id, row, attempt, outcome, self.clock(), call_sid,
                          self.callees[row].number)
        scheduler.on_outcome(row, attempt, outcome, self.clock())
        self.report.attempt_outcomes[outcome] += 1
        self.woken.set()

    async def _outcome(self, call_sid: str) -> str:
        """The attempt's outcome from the store: the call's last status callback, then (answered) its verdict."""
        calls: CallStore = self.store.store
        deadline = time.monotonic() + self.call_timeout_s
        status: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            status = await self._store(calls.call_status, call_sid)
            if status is not None and attempt_outcome(status["status"]) is not None:
                break
            await asyncio.sleep(POLL_S)
        else:
            print(f"voicecore campaign run: call {call_sid}: no final status within {self.call_timeout_s:g} s",
                  file=sys.stderr)
            return FAILED
        assert status is not None
        if status["status"] != "completed":
            return attempt_outcome(status["status"]) or FAILED
        # Answered: its verdict and opt-out are stored with the call once its record is (the recorder, at its end),
        # under the id its stream went by: the placed call's, or the one its status callbacks named beside it
        # (Plivo's CallUUID beside the request_uuid the campaign follows).
        placed: dict[str, Any] | None = None
        deadline = time.monotonic() + self.record_wait_s
        while time.monotonic() < deadline:
            record_sid = status.get("record_call_sid") or call_sid
            placed = await self._store(calls.placed_call, record_sid)
            if placed is not None:
                break
            await asyncio.sleep(POLL_S)
            status = await self._store(calls.call_status, call_sid) or status
        if placed is None:
            print(f"voicecore campaign run: call {call_sid}: answered, but its record was not stored within "
                  f"{self.record_wait_s:g} s: counted completed", file=sys.stderr)
        return attempt_outcome("completed", status["answered_by"], (placed or {}).get("answer_verdict", ""),
                               bool((placed or {}).get("opted_out"))) or FAILED
