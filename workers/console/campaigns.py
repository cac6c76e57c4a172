"""The console's campaigns: ``POST /api/campaigns`` runs a campaign in the console process with the engine of
`voicecore campaign run` (voicecore/outbound/campaign_run.py), its state in the call store as the command keeps it.

Owns: checking a request as the command checks it (the node's agent's placeholders, the file and the do-not-call
list: campaign_request.check_campaign; the carrier account), creating or resuming the campaign in the store,
one CampaignRun task per running campaign (each with its own store connection), stopping one (no new dial; the
calls in the air end and their outcomes are stored), and every campaign's progress read from the store.

A campaign the console runs is marked in the store (``campaigns.state`` running, ``runner`` this node): a
restarted console resumes its own running campaigns, as a rerun of the command does (an attempt the carrier
had taken is followed to its outcome, one it had not is ``interrupted`` and retried after its wait: no attempt
is dialled twice). A stopped campaign is not resumed, but its calls left in the air are followed to their
outcomes. A campaign the terminal command runs (``state`` '') is never run here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from voicecore.agent.load import AgentError, default_agent_dir, load_agent
from voicecore.config import Config
from voicecore.outbound import dial
from voicecore.outbound.campaign import CampaignScheduler
from voicecore.outbound.campaign_file import agent_placeholders
from voicecore.outbound.campaign_request import CampaignRequest, check_campaign
from voicecore.outbound.campaign_run import Carrier, CampaignRun
from voicecore.outbound.campaign_store import CampaignStore, CampaignStoreError, settings_from_json
from voicecore.store import CallStore

log = logging.getLogger("voicecore.console")

RUNNING, STOPPED, FINISHED = "running", "stopped", "finished"
MAX_LISTED = 200  # campaigns in GET /api/campaigns, newest first
MAX_ATTEMPTS_SHOWN = 2000  # attempts in GET /api/campaigns/{id}, the latest first


class CampaignRefused(Exception):
    """A campaign request answered with ``status`` and ``body`` (its ``error``, and ``problems`` for a bad file)."""

    def __init__(self, status: int, error: str, problems: list[dict[str, Any]] | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.body: dict[str, Any] = {"error": error}
        if problems is not None:
            self.body["problems"] = problems


def progress(store: CampaignStore, campaign_id: int) -> dict[str, Any]:
    """A campaign's progress from the store: its numbers, those dialled, attempts and their outcomes, the calls in
    the air, what became of each callee done (``outcomes``), and whether every callee is done."""
    callees = store.callees(campaign_id)
    attempts = store.attempts(campaign_id)
    row = store.db.execute("SELECT settings, state FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
    scheduler = CampaignScheduler(settings_from_json(row[0]), callees, store.do_not_call().keys(), attempts)
    outcomes = scheduler.results()
    attempt_outcomes: dict[str, int] = {}
    for attempt in attempts:
        if attempt.outcome:
            attempt_outcomes[attempt.outcome] = attempt_outcomes.get(attempt.outcome, 0) + 1
    return {"numbers": len(callees), "dialled": len({a.row for a in attempts}), "attempts": len(attempts),
            "in_progress": scheduler.in_flight, "done": sum(outcomes.values()),
            "outcomes": dict(sorted(outcomes.items())), "attempt_outcomes": dict(sorted(attempt_outcomes.items())),
            "finished": row[1] == FINISHED or scheduler.finished}


class ConsoleCampaigns:
    """The campaigns this console runs. ``start`` (a checked request), ``stop``, ``resume_own`` when the console
    starts, ``close`` when it stops. Store work runs in threads; each run has its own store connection."""

    def __init__(self, config: Config, url: str) -> None:
        self.config = config
        self.url = url
        self.node = config.node or "node"
        self.runs: dict[int, CampaignRun] = {}
        self.tasks: dict[int, asyncio.Task] = {}
        self.errors: dict[int, str] = {}  # a run that ended in an error: why
        self.starting = asyncio.Lock()

    # --- starting -------------------------------------------------------------------------------------------------
    def agent_dir(self, asked: str) -> str:
        node_agent = self.config.agent or str(default_agent_dir())
        if asked and Path(asked).resolve() != Path(node_agent).resolve():
            raise CampaignRefused(400, f"agent: this node's agent is {node_agent}; its campaigns' calls are answered "
                                       f"by it (leave agent out, or name that directory)")
        return node_agent

    def check(self, request: CampaignRequest) -> tuple[list, set[str]]:
        """The callees and do-not-call numbers of a request, or CampaignRefused (400 with every problem)."""
        try:
            required = agent_placeholders(load_agent(self.agent_dir(request.agent)))
        except AgentError as exc:
            raise CampaignRefused(503, f"this node's agent has {len(exc.problems)} problem(s)",
                                  [{"file": "agent", "row": 0, "code": "agent", "message": str(p)}
                                   for p in exc.problems]) from None
        callees, listed, problems = check_campaign(request.text, request.file, required - {"callee"},
                                                   request.settings.window, request.region, request.do_not_call,
                                                   "do_not_call")
        if problems:
            raise CampaignRefused(400, f"{len(problems)} problem(s); nothing was dialled",
                                  [p.to_dict() for p in problems])
        try:
            dial.credentials(self.config, request.carrier)
        except ValueError as exc:
            raise CampaignRefused(503, f"this node has no {request.carrier} account to place calls with: {exc}") from None
        return callees, listed

    def create_or_resume(self, request: CampaignRequest, callees: list, listed: set[str]) -> tuple[int, bool]:
        """The campaign in the store, marked running here: a new one, or the one of that name (the same callees,
        not run elsewhere), resumed with the settings it was started with. (id, resumed)."""
        store = CampaignStore(CallStore.open(self.url))
        try:
            now = time.time()
            found = store.find(request.name)
            if found is None:
                campaign_id = store.create(request.name, request.settings, callees, now)
            else:
                campaign_id = found[0]
                state, runner = store.run_state(campaign_id)
                if campaign_id in self.tasks:
                    raise CampaignRefused(409, f"campaign {request.name!r} is running already")
                if state == "":
                    raise CampaignRefused(409, f"campaign {request.name!r} is the terminal command's (voicecore "
                                               f"campaign run): resume it there, or give this one another name")
                if state == RUNNING and runner != self.node:
                    raise CampaignRefused(409, f"campaign {request.name!r} is running on node {runner!r}")
                if {c.number for c in store.callees(campaign_id)} != {c.number for c in callees}:
                    raise CampaignRefused(409, f"the store's campaign {request.name!r} has other callees: to start "
                                               f"another campaign give it another name")
            with store.db.transaction():
                store.db.execute("UPDATE campaigns SET state = ?, runner = ?, run_options = ? WHERE id = ?",
                                 (RUNNING, self.node, json.dumps(request.run_options(), sort_keys=True), campaign_id))
            if listed:
                store.add_do_not_call(sorted(listed), "file", now)
            return campaign_id, found is not None
        finally:
            store.close()

    async def start(self, request: CampaignRequest, who: str) -> dict[str, Any]:
        callees, listed = await asyncio.to_thread(self.check, request)
        async with self.starting:  # one at a time: two requests of one name never run it twice
            try:
                campaign_id, resumed = await asyncio.to_thread(self.create_or_resume, request, callees, listed)
            except CampaignStoreError as exc:
                raise CampaignRefused(409, str(exc)) from None
            self.launch(campaign_id, request.name, request.run_options(), resumed)
        log.info("console: key %s %s campaign %d %r: %d callee(s), %s", who, "resumed" if resumed else "started",
                 campaign_id, request.name, len(callees), request.carrier)
        return {"id": campaign_id, "name": request.name, "resumed": resumed, "numbers": len(callees),
                "state": RUNNING}

    def launch(self, campaign_id: int, name: str, options: dict[str, Any], resumed: bool, stopped: bool = False) -> None:
        """Run the campaign (``stopped``: only follow its calls left in the air to their outcomes)."""
        carrier_name = options.get("carrier", "twilio")
        api = dial.credentials(self.config, carrier_name)
        store = CampaignStore(CallStore.open(self.url))
        found = store.find(name)
        assert found is not None
        carrier = Carrier(node_url=self.config.base_url, api_base=api.api_base, account_sid=api.account_sid,
                          auth_token=api.auth_token, carrier=carrier_name,
                          machine_detection=options.get("machine_detection", ""))
        run = CampaignRun(store, campaign_id, name, found[1], carrier,
                          call_timeout_s=float(options.get("call_timeout_s", 7200.0)), resumed=resumed)
        if stopped:
            run.stop()
        self.runs[campaign_id] = run
        self.errors.pop(campaign_id, None)
        self.tasks[campaign_id] = asyncio.create_task(self._run(campaign_id, run, store))

    async def _run(self, campaign_id: int, run: CampaignRun, store: CampaignStore) -> None:
        state = STOPPED
        try:
            report = await run.run()
            state = FINISHED if report.finished else STOPPED
            log.info("console: campaign %d %r %s: %d dial(s); %s", campaign_id, report.campaign, state, report.dials,
                     ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items())) or "no outcome")
        except asyncio.CancelledError:
            state = ""  # the console is stopping: the campaign stays running in the store, resumed at the next start
            raise
        except Exception as exc:  # noqa: BLE001 (a store or carrier failure ends this campaign, never the console)
            self.errors[campaign_id] = f"{type(exc).__name__}: {exc}"[:300]
            log.exception("console: campaign %d stopped on an error", campaign_id)
        finally:
            if state:
                try:
                    await asyncio.to_thread(self._set_state, store, campaign_id, state)
                except Exception:  # noqa: BLE001
                    log.exception("console: campaign %d: its state %s was not stored", campaign_id, state)
            await asyncio.to_thread(store.close)
            self.runs.pop(campaign_id, None)
            self.tasks.pop(campaign_id, None)

    @staticmethod
    def _set_state(store: CampaignStore, campaign_id: int, state: str) -> None:
        with store.db.transaction():
            store.db.execute("UPDATE campaigns SET state = ? WHERE id = ?", (state, campaign_id))

    def resume_own(self) -> None:
        """At the console's start: its running campaigns resume; its stopped ones with calls left in the air have
        them followed to their outcomes."""
        store = CampaignStore(CallStore.open(self.url))
        try:
            rows = store.db.execute(
                "SELECT id, name, state, run_options FROM campaigns WHERE runner = ? AND (state = ? OR (state = ? AND "
                "EXISTS (SELECT 1 FROM campaign_attempts a WHERE a.campaign_id = campaigns.id AND a.state = 'dialing')))",
                (self.node, RUNNING, STOPPED)).fetchall()
        finally:
            store.close()
        for campaign_id, name, state, options in rows:
            try:
                self.launch(int(campaign_id), name, json.loads(options), True, stopped=state == STOPPED)
                log.info("console: campaign %d %r: %s", campaign_id, name,
                         "resumed" if state == RUNNING else "stopped; following its calls left in the air")
            except ValueError as exc:
                log.error("console: campaign %d %r not resumed: %s", campaign_id, name, exc)

    # --- stopping -------------------------------------------------------------------------------------------------
    async def stop(self, campaign_id: int) -> dict[str, Any]:
        summary = await asyncio.to_thread(self._row, campaign_id)
        run = self.runs.get(campaign_id)
        if run is not None:
            run.stop()
            store = CampaignStore(CallStore.open(self.url))
            try:
                await asyncio.to_thread(self._set_state, store, campaign_id, STOPPED)
            finally:
                store.close()
            log.info("console: campaign %d %r stopping: no new dial; %d call(s) in the air finish", campaign_id,
                     summary["name"], run.report.dials)
            return {"id": campaign_id, "state": "stopping"}
        if summary["state"] in (STOPPED, FINISHED):
            return {"id": campaign_id, "state": summary["state"]}
        if summary["state"] == "":
            raise CampaignRefused(409, "this campaign is the terminal command's (voicecore campaign run): stop it there "
                                       "(Ctrl-C)")
        raise CampaignRefused(409, f"this campaign runs on node {summary['runner']!r}: stop it there")

    async def close(self) -> None:
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- reading ----------------------------------------------------------------------------------------------------
    def _row(self, campaign_id: int, store: CampaignStore | None = None) -> dict[str, Any]:
        own = store is None
        store = store or CampaignStore(CallStore.open(self.url))
        try:
            row = store.db.execute("SELECT id, name, created_at, settings, state, runner, run_options FROM campaigns "
                                   "WHERE id = ?", (campaign_id,)).fetchone()
            if row is None:
                raise CampaignRefused(404, "no such campaign")
            return self._summary(store, row)
        finally:
            if own:
                store.close()

    def _summary(self, store: CampaignStore, row: tuple) -> dict[str, Any]:
        campaign_id, name, created_at, settings, state, runner, options = row
        run = self.runs.get(int(campaign_id))
        shown = state or "command"  # '' : the terminal command's campaign, whose state the store does not keep
        if run is not None and run.stopping:
            shown = "stopping"
        elif state == RUNNING and run is None:
            shown = RUNNING if runner != self.node else "interrupted"
        done = progress(store, int(campaign_id))
        if done["finished"] and state:
            # every callee is done: the run's own 'finished' reaches the store moments later, and a reader who saw
            # finished true must not see the campaign still running (nor stopping) in the same answer
            shown = FINISHED
        return {"id": int(campaign_id), "name": name, "created_at": created_at, "state": shown, "runner": runner,
                "carrier": json.loads(options or "{}").get("carrier", ""), "settings": json.loads(settings),
                "error": self.errors.get(int(campaign_id), ""), **done}

    def listing(self, store: CallStore) -> list[dict[str, Any]]:
        campaigns = CampaignStore(store)
        rows = store.backend.execute("SELECT id, name, created_at, settings, state, runner, run_options FROM campaigns "
                                     "ORDER BY id DESC LIMIT ?", (MAX_LISTED,)).fetchall()
        return [self._summary(campaigns, row) for row in rows]

    def detail(self, store: CallStore, campaign_id: int) -> dict[str, Any] | None:
        """One campaign's summary and its latest attempts (number, attempt, outcome, call id); None: no such one."""
        campaigns = CampaignStore(store)
        if store.backend.execute("SELECT 1 FROM campaigns WHERE id = ?", (campaign_id,)).fetchone() is None:
            return None
        summary = self._row(campaign_id, campaigns)
        rows = store.backend.execute(
            "SELECT c.row_no, c.number, a.attempt, a.from_number, a.state, a.outcome, a.dialed_at, a.ended_at, "
            "a.call_sid, s.record_call_sid FROM campaign_attempts a JOIN campaign_callees c USING (campaign_id, row_no) "
            "LEFT JOIN call_status s ON s.call_sid = a.call_sid WHERE a.campaign_id = ? "
            "ORDER BY a.dialed_at DESC, c.row_no LIMIT ?", (campaign_id, MAX_ATTEMPTS_SHOWN)).fetchall()
        summary["recent_attempts"] = [
            {"row": r[0], "number": r[1], "attempt": r[2], "from": r[3], "state": r[4], "outcome": r[5],
             "dialed_at": r[6], "ended_at": r[7], "call_sid": r[8], "record_call_sid": r[9] or r[8]} for r in rows]
        return summary
