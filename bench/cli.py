"""The `voicecore bench` subcommand: its arguments (kept light: voicecore/cli.py loads this module through
the ``voicecore.commands`` entry point for every command) and the hand-off to bench/run.py."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add `voicecore bench` to the `voicecore` parser (entry point ``voicecore.commands``: bench)."""
    bench = subparsers.add_parser("bench", help="load test: N simulated calls (or a capacity search) with a JSON and PNG report")
    add_bench_arguments(bench)
    bench.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from bench.main import run_bench

    return run_bench(bench_options_from_args(args))


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument_group("run")
    run.add_argument("--calls", type=int, default=None, help="concurrent simulated calls (default 10; 100 with --soak)")
    run.add_argument("--seconds", type=float, default=10.0, help="measured window in seconds, after every call is up (default 10)")
    run.add_argument("--scenario", default="steady", metavar="NAME",
                     help="what callers and the model do: steady (default), bargein-storm, model-stall, silence, "
                          "hallucination, overlap, chaos (steady's calls while workers are killed and the model "
                          "vendor misbehaves, one fault after another; see --chaos-faults), turn-taking (backchannels, coughs "
                          "and short real turns over long answers: the turn figures), or agent:DIR (an agent directory's demo.toml: its callers, its "
                          "model rules with function calls, its tool API; the stack runs the agent)")
    run.add_argument("--soak", type=float, default=0.0, metavar="SECONDS",
                     help="instead of a measured run: keep --calls calls up for SECONDS, each call 20-90 s then the next, "
                          "and report RSS and open fds of every stack process over time, and after the stop whether "
                          "/dev/shm and the runtime dir are clean and no process is left (JSON key soak; bench/soak.py)")
    run.add_argument("--json", dest="json_path", metavar="PATH", help="write the JSON report here")
    run.add_argument("--png", dest="png_path", metavar="PATH", help="write the PNG report here (default: next to the JSON)")
    run.add_argument("--target", metavar="URL", help="drive a stack that is already running (http://host:port) instead of starting one")
    run.add_argument("--auth-token", default="", help="with --target: the stack's Twilio auth token (default $VOICECORE_TWILIO_AUTH_TOKEN)")
    run.add_argument("--carrier", default="twilio", choices=("twilio", "telnyx", "plivo", "vonage", "exotel"),
                     help="the carrier the simulated calls come from (default twilio): its signed webhook, answer "
                          "document and media stream, in every load process; the bench makes the carrier's secrets "
                          "for the stack it starts. Not with --target, --baseline, --soak or --bad-input; with --scenario chaos, "
                          "a gateway kill is re-attached through the carrier's re-attach step (Exotel has none)")
    run.add_argument("--model-vendor", default="openai", choices=("openai", "gemini"),
                     help="the model vendor the stack talks to, simulated: openai (the Realtime API) or gemini (Gemini "
                          "Live: its simulator, the stack's Gemini driver) (default openai)")
    run.add_argument("--transport", default="tcp", choices=("tcp", "unix"),
                     help="how the simulated carrier reaches the servers the bench starts: tcp (127.0.0.1, default) or "
                          "unix (a Unix socket, as a TLS proxy on the same host would: gateway listen = unix:PATH, "
                          "the pipecat baseline's uvicorn --uds)")
    run.add_argument("--unix-socket", default="", metavar="PATH",
                     help="with --target: reach the stack through this Unix socket (its listen = unix:PATH)")
    run.add_argument("--load-procs", type=int, default=0, metavar="K", help="carrier load processes (default: one per 150 calls, at most one per load CPU)")
    run.add_argument("--ramp-ms", type=float, default=None, help="spread call starts over this long (default: one conversation cycle of the scenario, at least 10 ms per call, at most 15 s); not measured")
    run.add_argument("--settle-ms", type=float, default=1500.0, help="wait after the last call started before measuring (default 1500)")
    run.add_argument("--logs", dest="keep_logs", action="store_true", help="print the stack's log tail after the run")
    run.add_argument("--privileges", default="on", choices=("on", "off"),
                     help="on (default): voicecore's pacer SCHED_FIFO and gateway nice -10, the pipecat server nice -10; "
                          "off: none of them (VOICECORE_REALTIME_PRIORITY=0). The report's privileges says what was granted")
    run.add_argument("--save", default="", metavar="NAME",
                     help="also write the JSON report to bench/results/<UTC date>-NAME.json (never overwrites; "
                          "see bench/results/README.md)")
    run.add_argument("--bad-input", action="store_true",
                     help="run twice, taking turns: without and with a hypothesis-driven attacker of the gateway's webhooks and stream (bench/badinput.py) through the measured window; JSON key bad_input: inputs tried, closed as documented, crashes, the good calls' figures both ways, memory before and after")
    run.add_argument("--compare-store", action="store_true",
                     help="run the stack twice, taking turns: without records (voicecore) and with records, the SQLite "
                          "call store and the console (voicecore-store); the report's store_comparison has both "
                          "runs' lateness and CPU and the store's write cost (the recorder's CPU ms per call-second)")
    run.add_argument("--chaos-faults", default="", metavar="NAME[,NAME]",
                     help="--scenario chaos: the faults to inject, in this order (default: all of pacer, model, "
                          "validator, drop_1011, rate_limit, server_error, malformed_json, unknown_event, "
                          "unknown_response_delta, huge_delta, binary_frame, stall, refuse_new, gateway; also by name: "
                          "recorder, console, which give the run a call store and check every call that ended is in it once; "
                          "postgres, which makes that store a PostgreSQL of the run's own (pgserver: pip install "
                          "'voicecore[postgres-bench]'), SIGKILLs it mid-run and starts it again)")
    pin = parser.add_argument_group("pinning")
    pin.add_argument("--pin-stack", default="", metavar="CPUS", help="CPUs for supervisord and every stack process, e.g. 0")
    pin.add_argument("--pin-load", default="", metavar="CPUS", help="CPUs for the load processes and the model simulator, e.g. 1")
    cap = parser.add_argument_group("capacity search")
    cap.add_argument("--find-capacity", action="store_true", help="double the calls until an SLO breaks, then bisect")
    cap.add_argument("--start-calls", type=int, default=25, help="first call count of the search (default 25)")
    cap.add_argument("--max-calls", type=int, default=1024, help="largest call count the search tries (default 1024)")
    cap.add_argument("--resolution", default="2%",
                     help="stop bisecting when the first count that broke is within this of the last that held: "
                          "a number of calls (10) or a share of the last that held (2%%, the default)")
    cap.add_argument("--repeat", type=int, default=1, metavar="N",
                     help="run each system's search N times, the systems alternating; the report quotes the median "
                          "and the range (default 1)")
    cap.add_argument("--slo-lateness-p99-ms", type=float, default=5.0)
    cap.add_argument("--slo-underruns", type=int, default=0, help="underruns allowed while audio was available (default 0)")
    cap.add_argument("--slo-stale-frames", type=int, default=0)
    cap.add_argument("--slo-bargein-p99-ms", type=float, default=20.0)
    cap.add_argument("--starved-grace-ms", type=float, default=80.0,
                     help="a gap (or late frame) whose audio the model sent less than this before it was due is the "
                          "model's, for every system alike (default 80: a sender's prefill hold plus one frame)")
    base = parser.add_argument_group("baseline")
    base.add_argument("--baseline", default="", metavar="NAME[,NAME]",
                      help="also run a pipecat-ai 1.14 server (own venv: bench/baseline_pipecat/setup_venv.sh) under the "
                           "same load, alternately: pipecat (a model stand-in inside the pipeline), pipecat-realtime "
                           "(pipecat's OpenAI Realtime service on a socket to the bench's model simulator), or both "
                           "(pipecat,pipecat-realtime: every system's searches take turns in one run)")
    base.add_argument("--pipecat-venv", default="", metavar="DIR",
                      help="the pipecat venv (default $VOICECORE_PIPECAT_VENV or ~/.cache/voicecore-bench/pipecat-venv)")
    prof = parser.add_argument_group("profile")
    prof.add_argument("--profile", action="store_true", help="py-spy the hottest voicecore process, flame graph next to the report")


def bench_options_from_args(args: argparse.Namespace):
    from bench.capacity import Slo
    from bench.run import BenchOptions

    return BenchOptions(
        calls=args.calls if args.calls is not None else (100 if args.soak else 10),
        seconds=args.seconds, scenario=args.scenario, json_path=args.json_path, png_path=args.png_path,
        target=args.target, auth_token=args.auth_token, transport=args.transport, unix_socket=args.unix_socket,
        load_procs=args.load_procs, pin_stack=args.pin_stack,
        pin_load=args.pin_load, find_capacity=args.find_capacity, start_calls=args.start_calls, max_calls=args.max_calls,
        resolution=args.resolution, repeat=args.repeat, privileges=args.privileges, save=args.save,
        slo=Slo(lateness_p99_ms=args.slo_lateness_p99_ms, underruns_audio_available=args.slo_underruns,
                stale_frames=args.slo_stale_frames, bargein_to_clear_p99_ms=args.slo_bargein_p99_ms),
        profile=args.profile, ramp_ms=args.ramp_ms, settle_ms=args.settle_ms, starved_grace_ms=args.starved_grace_ms,
        config_path=args.config, keep_logs=args.keep_logs, baseline=args.baseline, pipecat_venv=args.pipecat_venv,
        compare_store=args.compare_store, soak=args.soak, chaos_faults=args.chaos_faults,
        bad_input=args.bad_input, carrier=args.carrier, model_vendor=args.model_vendor,
    )
