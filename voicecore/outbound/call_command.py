"""`voicecore call +E164`: place one call from a running node through the carrier's Calls API. Argument parsing,
checks and output only; the request is voicecore/outbound/dial.py's (Twilio's Calls API, Plivo's Make Call,
Telnyx's TeXML Calls API or Vonage's Create Call).

The node (`voicecore up`, reachable at its ``public_url``) answers the call when the callee picks up, and its
agent (the node's) gets the call's ``--field`` values as placeholders. ``--agent DIR`` names the agent the node
runs so the command can refuse a call whose fields leave one of its placeholders empty.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from voicecore.outbound import dial


def register(sub: Any) -> None:
    call = sub.add_parser("call", help="place one outbound call from the running node through the carrier's API")
    call.add_argument("number", help="the callee's number in E.164 (+<country code><number>)")
    call.add_argument("--agent", metavar="DIR", help="the node's agent: every {placeholder} it uses must get a --field")
    call.add_argument("--from", dest="from_number", required=True, metavar="NUMBER",
                      help="the caller id: your carrier number in E.164")
    call.add_argument("--carrier", default="twilio", choices=dial.CARRIERS, help="the carrier to place it with")
    call.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                      help="a field the agent sees as {NAME} (repeatable)")
    call.add_argument("--machine-detection", choices=("Enable", "DetectMessageEnd"), default="",
                      help="also ask the carrier for its answering-machine detection (Twilio's or Telnyx TeXML's "
                           "MachineDetection with this value; Plivo's machine_detection or Vonage's "
                           "advanced_machine_detection with either), asynchronous and never hanging up: its result "
                           "joins the answer verdict")
    call.add_argument("--json", action="store_true", help="print one JSON object")
    call.set_defaults(func=_cmd_call)


def parse_fields(pairs: list[str]) -> dict[str, str]:
    """``--field`` values as a dict; ValueError naming the first that is not NAME=VALUE."""
    fields: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--field {pair!r}: expected NAME=VALUE")
        fields[name] = value
    return fields


async def place(config, number: str, from_number: str, fields: dict[str, str], carrier: str = "twilio",
                machine_detection: str = "") -> dict:
    """Place the call as ``config`` says (node URL, the carrier's API base and credentials): the outcome as a dict."""
    found = dial.credentials(config, carrier)
    placed = await dial.place_call(node_url=config.base_url, api_base=found.api_base,
                                   account_sid=found.account_sid, auth_token=found.auth_token,
                                   to=number, from_=from_number, fields=fields, carrier=carrier,
                                   machine_detection=machine_detection)
    return {"ok": placed.ok, "call_sid": placed.call_sid, "status": placed.status, "error": placed.error,
            "to": number, "carrier": carrier}


def _cmd_call(args: argparse.Namespace) -> int:
    from voicecore.config import ConfigError, load_config
    from voicecore.outbound.campaign_file import agent_placeholders, normalise_number

    try:
        number = normalise_number(args.number)
        from_number = normalise_number(args.from_number)
        fields = parse_fields(args.field)
        if args.agent:
            from voicecore.agent.load import AgentError, load_agent

            try:
                missing = sorted(agent_placeholders(load_agent(args.agent)) - set(fields) - {"callee"})
            except AgentError as exc:
                raise ValueError(str(exc)) from None
            if missing:
                raise ValueError(f"the agent's texts use {', '.join('{' + m + '}' for m in missing)}: "
                                 f"give {' '.join(f'--field {m}=...' for m in missing)}")
        config = load_config(os.environ, args.config)
        outcome = asyncio.run(place(config, number, from_number, fields, args.carrier, args.machine_detection))
    except (ValueError, ConfigError) as exc:
        print(f"voicecore call: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(outcome))
    elif outcome["ok"]:
        print(f"placed {outcome['call_sid']} to {number} ({outcome['status'] or 'queued'})")
    else:
        print(f"voicecore call: not placed: {outcome['error']}", file=sys.stderr)
    return 0 if outcome["ok"] else 1
