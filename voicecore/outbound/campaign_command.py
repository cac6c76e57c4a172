"""`voicecore campaign`: check a campaign file (every problem, one per line, as `voicecore check` lists an
agent's), run the simulated crash-safety demo, and run a campaign through the carrier. Argument parsing and
output only; the work is in campaign_file.py, campaign_demo.py and campaign_run.py."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from voicecore.outbound import dial


def register(sub: Any) -> None:
    """Add ``campaign`` with its subcommands to the ``voicecore`` parser's subparsers."""
    campaign = sub.add_parser("campaign", help="outbound campaigns: check a campaign file, run a campaign through the carrier, run the simulated demo")
    actions = campaign.add_subparsers(dest="campaign_command", required=True)
    check = actions.add_parser("check", help="check a campaign file (CSV of callees): every bad row, one per line")
    check.add_argument("file", help="the campaign file: a CSV with a number column, the fields the agent uses, "
                                    "an optional timezone column")
    check.add_argument("--agent", metavar="DIR", help="the agent directory whose {placeholders} every row must fill")
    check.add_argument("--do-not-call", dest="do_not_call", metavar="FILE", help="a do-not-call file (one number a line) to check too")
    check.add_argument("--region", metavar="CC", help="the country (ISO code such as US, SE) of numbers written without +country code")
    check.add_argument("--json", action="store_true", help="print the problems as JSON")
    check.set_defaults(func=_cmd_check)
    demo = actions.add_parser("demo", help="a simulated campaign (no carrier, no audio) whose process is killed twice "
                                           "mid-run and restarted; prints dialed_twice, dnc_dialed, outside_window")
    demo.add_argument("--numbers", type=int, default=200, metavar="N", help="callees in the campaign")
    demo.add_argument("--concurrency", type=int, default=20, metavar="C", help="calls at once (two caller numbers share them)")
    demo.add_argument("--seed", type=int, default=1, metavar="S", help="seed of the numbers and the simulated answers")
    demo.add_argument("--json", action="store_true", help="print the report as JSON")
    demo.set_defaults(func=_cmd_demo)
    run = actions.add_parser("run", help="run a campaign: place its calls through the carrier from the running node, "
                                         "outcomes from the calls' status callbacks and answer verdicts; rerun to resume")
    run.add_argument("file", help="the campaign file (checked first: any problem and nothing is dialled)")
    run.add_argument("--agent", metavar="DIR", required=True,
                     help="the node's agent directory: every {placeholder} it uses must be filled on every row")
    run.add_argument("--from", dest="from_numbers", action="append", required=True, metavar="NUMBER",
                     help="a caller number (your carrier number; repeatable: the calls are spread over them)")
    run.add_argument("--concurrency", type=int, default=10, metavar="C", help="calls at once in the campaign")
    run.add_argument("--per-from", dest="per_from", type=int, default=0, metavar="N",
                     help="calls at once from one caller number (0: only --concurrency bounds them)")
    run.add_argument("--do-not-call", dest="do_not_call", metavar="FILE",
                     help="a do-not-call file (one number a line): its numbers join the store's list, never dialled")
    run.add_argument("--region", metavar="CC", help="the country (ISO code such as US, SE) of numbers written without +country code")
    run.add_argument("--days", default="mon-fri", help="the calling window's days on the callee's clock (mon-fri, mon,wed,sat, mon-sun)")
    run.add_argument("--window-start", dest="window_start", default="09:00", metavar="HH:MM", help="the calling window's start (included)")
    run.add_argument("--window-end", dest="window_end", default="20:00", metavar="HH:MM", help="the calling window's end (not included)")
    run.add_argument("--max-attempts", dest="max_attempts", type=int, default=3, metavar="N", help="attempts per callee (1..20)")
    run.add_argument("--retry-after", dest="retry_after", action="append", default=[], metavar="OUTCOME=SECONDS",
                     help="the wait after an outcome (busy, no-answer, voicemail, failed, interrupted), doubled on each repeat; repeatable")
    run.add_argument("--name", metavar="NAME", help="the campaign's name in the store (default: the file's name without .csv)")
    run.add_argument("--call-timeout", dest="call_timeout", type=float, default=7200.0, metavar="SECONDS",
                     help="the longest a placed call may go without its final status callback (then: failed)")
    run.add_argument("--carrier", default="twilio", choices=dial.CARRIERS, help="the carrier to place the calls with")
    run.add_argument("--machine-detection", dest="machine_detection", choices=("Enable", "DetectMessageEnd"), default="",
                     help="also ask the carrier for its answering-machine detection (Twilio's or Telnyx TeXML's "
                           "MachineDetection with this value; Plivo's machine_detection or Vonage's "
                           "advanced_machine_detection with either), asynchronous and never hanging up: its result "
                           "joins the answer verdict")
    run.add_argument("--json", action="store_true", help="print the result as JSON (no progress bar)")
    run.set_defaults(func=_cmd_run)


def _cmd_check(args: argparse.Namespace) -> int:
    from voicecore.outbound.campaign_file import CampaignFileError, CampaignProblem, agent_placeholders, read_campaign
    from voicecore.outbound.campaign_rules import CallingWindow

    problems: list[CampaignProblem] = []
    required: set[str] = set()
    if args.agent:
        from voicecore.agent.load import AgentError, load_agent

        try:
            required = agent_placeholders(load_agent(args.agent))
        except AgentError as exc:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            print(f"voicecore campaign check: the agent has {len(exc.problems)} problem(s)", file=sys.stderr)
            return 1
    callees = []
    try:
        callees = read_campaign(args.file, required_fields=required, window=CallingWindow(), default_region=args.region)
    except CampaignFileError as exc:
        problems += exc.problems
    if args.do_not_call:
        from pathlib import Path

        from voicecore.outbound.campaign_file import parse_do_not_call

        path = Path(args.do_not_call)
        try:
            parse_do_not_call(path.read_text(encoding="utf-8-sig"), file=path.name, default_region=args.region)
        except CampaignFileError as exc:
            problems += exc.problems
        except OSError as exc:
            problems.append(CampaignProblem(path.name, 0, "unreadable-file", f"cannot read it: {exc}"))
    if args.json:
        print(json.dumps({"ok": not problems, "callees": len(callees), "problems": [p.to_dict() for p in problems]}))
    else:
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problem(s); nothing will be dialled" if problems else f"ok: {len(callees)} callee(s)",
              file=sys.stderr if problems else sys.stdout)
    return 1 if problems else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from voicecore.outbound.campaign_demo import run_demo

    if not 1 <= args.numbers <= 100_000 or not 1 <= args.concurrency <= 10_000:
        print("voicecore campaign demo: --numbers: expected 1..100000, --concurrency: 1..10000", file=sys.stderr)
        return 2
    result = run_demo(numbers=args.numbers, concurrency=args.concurrency, seed=args.seed)
    report = result.report
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['numbers']} numbers, concurrency {report['concurrency']}: {report['dials']} dials over "
              f"{report['simulated_days']} simulated days; the campaign process was killed {report['kills']} times")
        print(f"dialed_twice {report['dialed_twice']}, dnc_dialed {report['dnc_dialed']}, "
              f"outside_window {report['outside_window']}")
        print("outcomes: " + ", ".join(f"{k} {v}" for k, v in report["outcomes"].items()))
    return 0 if result.ok else 1


def _cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import os
    import time
    from pathlib import Path

    from voicecore.agent.load import AgentError, load_agent
    from voicecore.config import ConfigError, load_config
    from voicecore.outbound.campaign_file import CampaignProblem, agent_placeholders
    from voicecore.outbound.campaign_request import build_settings, check_campaign
    from voicecore.outbound.campaign_run import Carrier, CampaignRun, Progress
    from voicecore.outbound.campaign_store import CampaignStore, CampaignStoreError
    from voicecore.store.db import CallStore, StoreError, database_url_for

    def fail(message: str, code: int = 2) -> int:
        print(f"voicecore campaign run: {message}", file=sys.stderr)
        return code

    try:
        settings = build_settings(days=args.days, window_start=args.window_start, window_end=args.window_end,
                                  max_attempts=args.max_attempts, retry_after=args.retry_after,
                                  concurrency=args.concurrency, from_numbers=args.from_numbers, per_from=args.per_from)
    except ValueError as exc:
        return fail(str(exc))
    try:
        required = agent_placeholders(load_agent(args.agent))
    except AgentError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return fail(f"the agent has {len(exc.problems)} problem(s)", 1)
    # The file and the do-not-call file first: every problem listed, and nothing dialled when there is one
    # (campaign_request.check_campaign, as the console's POST /api/campaigns checks them).
    problems: list[CampaignProblem] = []
    text, dnc_text = "", ""
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(CampaignProblem(str(path), 0, "unreadable-file", f"cannot read it: {exc}"))
    dnc_name = Path(args.do_not_call).name if args.do_not_call else ""
    if args.do_not_call:
        try:
            dnc_text = Path(args.do_not_call).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(CampaignProblem(dnc_name, 0, "unreadable-file", f"cannot read it: {exc}"))
    callees, listed, found = check_campaign(text, path.name, required - {"callee"}, settings.window, args.region,
                                            dnc_text, dnc_name) if not problems else ([], set(), [])
    problems += found
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        return fail(f"{len(problems)} problem(s); nothing was dialled", 1)
    try:
        config = load_config(os.environ, args.config)
    except ConfigError as exc:
        return fail(str(exc))
    try:
        api = dial.credentials(config, args.carrier)
    except ValueError as exc:
        return fail(str(exc))
    url = database_url_for(config)
    if not url:
        return fail("the node has no call store (set database_url or record_dir): a campaign's state and its calls' "
                    "outcomes are kept there")
    name = args.name or Path(args.file).stem
    try:
        store = CampaignStore(CallStore.open(url))
    except (StoreError, OSError) as exc:
        return fail(f"cannot open the call store: {exc}")
    try:
        now = time.time()
        found = store.find(name)
        resumed = found is not None
        if found is None:
            campaign_id = store.create(name, settings, callees, now)
        else:
            campaign_id, stored = found
            state, runner = store.run_state(campaign_id)
            if state == "running":
                return fail(f"campaign {name!r} runs in the console of node {runner!r}: stop it there first "
                            f"(POST /api/campaigns/{campaign_id}/stop), or give this one another --name", 1)
            if {c.number for c in store.callees(campaign_id)} != {c.number for c in callees}:
                return fail(f"the store's campaign {name!r} has other callees than {args.file}: to start another "
                            f"campaign give it another --name", 1)
            if stored != settings:
                print(f"voicecore campaign run: resuming {name!r} with the settings it was started with",
                      file=sys.stderr)
            settings = stored
        if listed:
            store.add_do_not_call(sorted(listed), "file", now)
        if not args.json:
            print(f"{'resuming' if resumed else 'starting'} campaign {name!r}: {len(callees)} callee(s), concurrency "
                  f"{settings.concurrency}, from {', '.join(settings.from_numbers)}", file=sys.stderr)
        carrier = Carrier(node_url=config.base_url, api_base=api.api_base, account_sid=api.account_sid,
                          auth_token=api.auth_token, carrier=args.carrier, machine_detection=args.machine_detection)
        run = CampaignRun(store, campaign_id, name, settings, carrier, call_timeout_s=args.call_timeout,
                          progress=None if args.json else Progress(len(callees)), resumed=resumed)
        try:
            report = asyncio.run(run.run())
        except CampaignStoreError as exc:
            return fail(str(exc))
        except KeyboardInterrupt:
            # the calls in the air stay 'dialing' in the store: the next run ends them as interrupted
            return fail(f"stopped; run the same command again to resume campaign {name!r}", 130)
    finally:
        store.close()
    data = report.to_dict()
    if args.json:
        print(json.dumps(data))
    else:
        print(f"campaign {name!r}: {data['dials']} dial(s) in {data['seconds']} s; "
              + ", ".join(f"{k} {v}" for k, v in data["outcomes"].items()))
    return 0 if report.finished else 1
