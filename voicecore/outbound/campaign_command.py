"""`voicecore campaign`: check a campaign file (every problem, one per line, as `voicecore check` lists an
agent's) and run the simulated crash-safety demo. Argument parsing and output only; the work is in
campaign_file.py and campaign_demo.py."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    """Add ``campaign`` with its subcommands to the ``voicecore`` parser's subparsers."""
    campaign = sub.add_parser("campaign", help="outbound campaigns: check a campaign file, run the simulated campaign demo")
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
