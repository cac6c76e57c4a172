"""The `voicecore` command: up, drain, demo, check, redact, calls, console-key, campaign, replay, and the subcommands other packages register
(bench, gate).

Owns argument parsing and exit codes only; each subcommand's work lives in its own module. Subcommands
outside the library (the bench) come from the ``voicecore.commands`` entry point group: each entry names
a ``register(subparsers)`` function that adds its subparser (pyproject.toml), so the library imports
none of them. One that cannot be loaded is still listed, and running it says why.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from typing import Any

from voicecore.config import ConfigError, load_config


def _cmd_up(args: argparse.Namespace) -> int:
    from voicecore.agent.load import AgentError
    from voicecore.agent.settings import configure
    from voicecore.supervise import resolve_config, run_foreground

    if args.agent:
        # Absolute: the stack's processes inherit it (Config.as_env) and need not share our working directory.
        os.environ["VOICECORE_AGENT"] = os.path.abspath(args.agent)
    config = resolve_config(load_config(os.environ, args.config))
    try:
        # An agent with any problem never starts; a good one decides what the configuration leaves open
        # (its knowledge folder, model and language; call_control auto: turns), for every process.
        config, agent = configure(config, os.environ)
    except AgentError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"voicecore: the agent has {len(exc.problems)} problem(s); nothing was started", file=sys.stderr)
        return 1
    from voicecore.vendor_route import route_for

    # Which vendor and endpoint the agent uses, with which credentials (a Gemini agent with Gemini credentials
    # talks to Google though no OpenAI key is set), said before anything starts.
    route = route_for(config, agent, os.environ)
    print(f"voicecore up: {route.line()}", file=sys.stderr, flush=True)
    if route.refused:
        print("voicecore up: nothing was started (the agent's model vendor has no credentials and no realtime_url)",
              file=sys.stderr, flush=True)
        return 1
    if not route.simulated and not args.no_preflight:
        from voicecore.preflight import run_preflight

        # A key, model or session the vendor refuses stops here, with its words, not at the first call.
        if not run_preflight(config, agent, sys.stderr):
            return 1
    if not route.simulated and route.vendor == "openai" and config.speech_model:
        from voicecore.agent.settings import agent_for_config
        from voicecore.fallback.render import render_for_up

        # The hold line and the apologies in the agent's voice, rendered once and kept (the pacer reads them).
        render_for_up(config, agent_for_config(agent, config), os.environ, sys.stderr)
    return run_foreground(config, model_line=route.line(), simulator=route.simulated)


def _cmd_drain(args: argparse.Namespace) -> int:
    from voicecore.supervise import drain_node

    if args.timeout is not None and not 0 <= args.timeout <= 86_400:
        print("voicecore drain: --timeout: expected 0..86400 seconds", file=sys.stderr)
        return 2
    return drain_node(load_config(os.environ, args.config), wait=not args.no_wait, timeout_s=args.timeout)


def _cmd_demo(args: argparse.Namespace) -> int:
    from voicecore.demo import run_demo

    if args.outbound:
        from voicecore.outbound.outbound_demo import run_outbound_demo

        if args.model_vendor != "openai":
            # The answer gate's listening session speaks the Realtime protocol: outbound calls are OpenAI's for now.
            print("voicecore demo: --outbound runs on --model-vendor openai (the answer gate listens through a "
                  "Realtime session)", file=sys.stderr)
            return 2

        return run_outbound_demo(args.calls, args.json, args.config, keep_logs=args.logs,
                                 record_dir=None if args.no_record else args.record_dir,
                                 machine_detection=args.machine_detection, on_ivr=args.on_ivr,
                                 on_voicemail=args.on_voicemail, carrier=args.carrier)

    return run_demo(calls=args.calls, seconds=args.seconds, as_json=args.json, config_path=args.config, keep_logs=args.logs,
                    record_dir=None if args.no_record else args.record_dir,
                    overlap_probability=args.overlap_probability, late_deltas=args.late_deltas, agent_dir=args.agent,
                    carrier=args.carrier, transcription=args.transcription, model_vendor=args.model_vendor,
                    connection_limit_s=args.gemini_connection_limit_s,
                    internal_error_s=args.gemini_internal_error_s)


def _cmd_check(args: argparse.Namespace) -> int:
    from voicecore.agent.load import run_check

    return run_check(args.path, as_json=args.json, environ=os.environ if args.env else None)


def _cmd_redact(args: argparse.Namespace) -> int:
    from voicecore.privacy.command import run_redact

    return run_redact(" ".join(args.text), language=args.language, agent_dir=args.agent)


def _cmd_replay(args: argparse.Namespace) -> int:
    from voicecore.replay import main as replay_main

    return replay_main(args.replay_args)


def _cmd_calls(args: argparse.Namespace) -> int:
    from voicecore.store.command import run_calls

    return run_calls(os.environ, args.config, since=args.since, limit=args.limit, as_json=args.json, call_sid=args.call_sid)


def _cmd_console_key(args: argparse.Namespace) -> int:
    from voicecore.console.keys_command import run_console_key

    return run_console_key(os.environ, args.config, args.action, args.name, as_json=args.json)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voicecore", description="Media runtime for AI phone agents.")
    parser.add_argument("--config", help="TOML configuration file (default: $VOICECORE_CONFIG)")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run the gateway, pacer and model worker under supervisord until SIGTERM or Ctrl-C "
                                   "(the first drains the node, a second stops it at once)")
    up.add_argument("--agent", metavar="DIR", help="agent directory (default: $VOICECORE_AGENT, else the shipped default agent)")
    up.add_argument("--no-preflight", action="store_true",
                    help="start without first opening one trial session with the vendor (URL, key, model and the "
                         "agent's session configuration); by default a refusal stops `up` with the vendor's message")
    up.set_defaults(func=_cmd_up)

    drain = sub.add_parser(
        "drain", help="drain the running node: refuse new calls, let live ones finish (up to drain_timeout_s), then stop it",
        description="Drain the node whose runtime dir is $VOICECORE_RUNTIME_DIR (as `voicecore up` resolves it): new "
                    "calls are refused (<Reject reason=\"busy\"/>, or <Redirect> to drain_redirect_url), /healthz "
                    "answers 503, live calls go on until they end or the deadline, then the node stops. Exit codes: "
                    "0 the node stopped (--no-wait: the drain is under way), 1 it had not stopped 30 s after the "
                    "deadline, 2 configuration error, 3 no running node in the runtime dir.")
    drain.add_argument("--no-wait", action="store_true", help="return as soon as the drain is under way")
    drain.add_argument("--timeout", type=float, metavar="SECONDS",
                       help="how long live calls may go on (default: drain_timeout_s); ignored when a drain is already under way")
    drain.set_defaults(func=_cmd_drain)

    demo = sub.add_parser("demo", help="bring the stack up, place simulated calls, tear down, print a summary")
    demo.add_argument("--calls", type=int, default=1, help="concurrent simulated calls (default 1)")
    demo.add_argument("--seconds", type=float, default=20.0, help="length of each call in seconds (default 20, minimum 13)")
    demo.add_argument("--json", action="store_true", help="print exactly one JSON object")
    demo.add_argument("--logs", action="store_true", help="print the stack's log after the run")
    demo.add_argument("--record-dir", metavar="DIR", default="voicecore-records",
                      help="write one call record per call here (created 0700 if missing; default ./voicecore-records); "
                           "each is replayed at the end and must be identical")
    demo.add_argument("--no-record", action="store_true", help="do not record the calls")
    demo.add_argument("--overlap-probability", type=float, default=0.0, metavar="P",
                      help="the model simulator starts a second response while this share (0-1) of its responses still "
                           "stream, as a real Realtime server sometimes does (default 0)")
    demo.add_argument("--late-deltas", type=int, default=2, choices=range(4), metavar="N",
                      help="audio deltas the model simulator still sends after a cancel, 0-3 (default 2)")
    demo.add_argument("--agent", metavar="DIR",
                      help="agent directory (its demo.toml scripts the calls; without one, its tests/*.toml or a generic "
                           "caller do; default: the shipped default agent, "
                           "whose callers ask, talk over the agent, say backchannels and cough)")
    demo.add_argument("--transcription", metavar="MODEL", choices=("gpt-4o-mini-transcribe", "gpt-4o-transcribe", "whisper-1"),
                      help="the vendor's transcription model for the caller's words (sets transcription_model): the "
                           "gpt-4o-transcribe family streams words after the speech ends, whisper-1 sends them only "
                           "late and whole; the model simulator does as the vendor does (default: the agent's)")
    demo.add_argument("--carrier", default="twilio", choices=("twilio", "telnyx", "plivo", "vonage", "exotel"),
                      help="the carrier the simulated calls come from: its signed webhook, answer document and "
                           "media stream (default twilio); the demo makes the carrier's secrets for the run")
    demo.add_argument("--outbound", action="store_true",
                      help="place simulated outbound calls instead (every kind of callee in turn: person, voicemail, "
                           "screening assistant, IVR, busy, no answer, failed) and report who the stack found answered")
    demo.add_argument("--on-ivr", choices=("model", "hang_up", "dtmf"), default="",
                      help="--outbound: run the agent with this [outbound] on_ivr (dtmf: it presses the simulated "
                           "IVR menus' key, which puts the call through to a person); default: the agent's own")
    demo.add_argument("--on-voicemail", choices=("hang_up", "greet", "message"), default="",
                      help="--outbound: run the agent with this [outbound] on_voicemail (message: a scripted voicemail "
                           "message after the beep, then a hang-up); default: the agent's own")
    demo.add_argument("--machine-detection", choices=("Enable", "DetectMessageEnd"), default="",
                      help="--outbound: place the calls with the carrier's answering-machine detection too "
                           "(Twilio's, Telnyx TeXML's, Plivo's or Vonage's, asynchronous; the simulated AMD errs on "
                           "purpose now and then) and report how its answers combined with the detector's")
    demo.add_argument("--model-vendor", default="openai", choices=("openai", "gemini"),
                      help="the model vendor the stack talks to, simulated: openai (the Realtime API) or gemini "
                           "(Gemini Live; the default agent, or --agent's, with generic callers) (default openai)")
    demo.add_argument("--gemini-connection-limit-s", type=float, default=600.0, metavar="S",
                      help="--model-vendor gemini: the simulator ends each connection this long after it opened, "
                           "with goAway before it, as the vendor does; calls resume their sessions (default 600)")
    demo.add_argument("--gemini-internal-error-s", type=float, default=None, metavar="S",
                      help="--model-vendor gemini: the simulator drops each session's first connection this long "
                           "after it opened with close code 1011 and no goAway, as the vendor's server now and then "
                           "does; calls resume their sessions on a new one (default: never)")
    demo.set_defaults(func=_cmd_demo)

    check = sub.add_parser("check", help="check an agent directory or a flow file: every problem, one per line")
    check.add_argument("path", metavar="PATH", help="an agent directory (agent.toml) or a single flow file (.json, .toml)")
    check.add_argument("--json", action="store_true", help="print one JSON object: ok, problems, warnings")
    check.add_argument("--env", action="store_true",
                       help="also report webhook environment references (${NAME}, env:NAME) this environment lacks")
    check.set_defaults(func=_cmd_check)

    redact = sub.add_parser("redact", help="print TEXT as it would be stored: phone, email, card, personnummer, IBAN "
                                           "and the agent's [privacy] patterns replaced by [kind]")
    redact.add_argument("text", nargs="+", metavar="TEXT", help="the text (several arguments are joined by spaces)")
    redact.add_argument("--language", metavar="L",
                        help="the language the text is in (en, sv): which phone regions come first (default: the "
                             "agent's languages, else en)")
    redact.add_argument("--agent", metavar="DIR", help="agent directory whose [privacy] patterns apply too")
    redact.set_defaults(func=_cmd_redact)

    calls = sub.add_parser("calls", help="the call store: recent calls, or one call with its turns and timings")
    calls.add_argument("call_sid", nargs="?", metavar="CALL_SID", help="show this call: its turns, timings, transcript, tools")
    calls.add_argument("--since", metavar="SECONDS_AGO|ISO", help="calls started since: seconds ago (3600) or an ISO time")
    calls.add_argument("--limit", type=int, default=100, metavar="N", help="at most N calls, newest first (default 100)")
    calls.add_argument("--json", action="store_true", help="print one JSON object")
    calls.set_defaults(func=_cmd_calls)

    keys = sub.add_parser("console-key", help="the console's API keys: add NAME (prints the key once), list, revoke NAME")
    keys.add_argument("action", choices=("add", "list", "revoke"))
    keys.add_argument("name", nargs="?", metavar="NAME")
    keys.add_argument("--json", action="store_true", help="list: print one JSON object")
    keys.set_defaults(func=_cmd_console_key)

    _register_commands(sub)

    from voicecore.outbound.campaign_command import register as register_campaign

    register_campaign(sub)
    from voicecore.outbound.call_command import register as register_call

    register_call(sub)
    replay = sub.add_parser("replay", help="replay a recorded call through the cores (see `voicecore replay -h`)", add_help=False)
    replay.add_argument("replay_args", nargs=argparse.REMAINDER)
    replay.set_defaults(func=_cmd_replay)
    return parser


COMMAND_GROUP = "voicecore.commands"


def _register_commands(sub: Any) -> None:
    """Add the subcommands of the ``voicecore.commands`` entry points (one per name, first found wins)."""
    seen: set[str] = set()
    for entry in sorted(importlib.metadata.entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        if entry.name in seen:
            continue
        seen.add(entry.name)
        try:
            register = entry.load()
            register(sub)
        except Exception as exc:  # a broken plugin must not take the other commands down with it
            _register_unavailable(sub, entry.name, entry.value, exc)


def _register_unavailable(sub: Any, name: str, target: str, exc: Exception) -> None:
    if name in sub.choices:
        return  # it registered itself before it failed: leave what it added
    why = f"{type(exc).__name__}: {exc}"
    command = sub.add_parser(name, help=f"(unavailable: {target} could not be loaded)", add_help=False)

    def unavailable(args: argparse.Namespace) -> int:
        print(f"voicecore: the {name!r} command is unavailable: {target} could not be loaded ({why})", file=sys.stderr)
        return 2

    unavailable.takes_any_arguments = True  # type: ignore[attr-defined]  # whatever they were, say why it cannot run
    command.set_defaults(func=unavailable)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["replay"]:
        # replay owns its whole argument list (its own -h, --wav, --json)
        return _cmd_replay(argparse.Namespace(replay_args=argv[1:]))
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args.func, "takes_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # what parse_args says
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"voicecore: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
