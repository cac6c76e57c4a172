"""`voicecore demo`: bring the stack up, place simulated calls, tear down, report what callers heard.

Owns the demo's call script and the run's orchestration; the figures themselves come from
``voicecore.callreport`` (shared with the bench and the integration tests). Both simulators run in
this process, on one clock, so every latency is measured between two events on the same clock:
the model simulator's send of an event and the carrier simulator's receipt of its consequence.

``--overlap-probability`` makes the model simulator start a second response while some of its responses
still stream, and ``--late-deltas`` sets how many audio deltas it still sends after a cancel, as a real
Realtime server does; the report's overlapping_frames, bargeins_without_clear and talkover_ms say whether
the caller heard two voices (one voice at a time: docs/explanation/invariants.md#inv-one-voice).

Every call is recorded (``--record-dir``, default ./voicecore-records; ``--no-record`` turns it off):
after the stack is down the demo replays each record through the cores (voicecore/replay.py) and
fails if one diverges.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import shlex
import signal
import socket
import sys
import tempfile
import time
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO

import h11

from voicecore.agent import settings as agent_settings
from voicecore.agent.demo_report import agent_figures, python_confirmed
from voicecore.agent.load import AgentError, default_agent_dir, load_agent
from voicecore.agent.scenario import SCENARIO_FILE, Scenario, ScenarioError, load_scenario
from voicecore.chat.agent_tests import AgentTestError
from voicecore.chat.phone_calls import AgentCallers, agent_callers, judged_tests, place_test_calls
from voicecore.agent.spec import AgentSpec
from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.callreport import StackCpu, summarize
from voicecore.carriers import registry
from voicecore.config import Config, ConfigError, load_config
from voicecore.record import record_paths  # noqa: F401 (re-exported: the demo's readers import it from here)
from voicecore.console import probe
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.audio_match import match_frames
from voicecore.sim.carrier import CallResult, CallScript, generate_credentials, place_call
from voicecore.sim.carrier_modes_core import CARRIERS, CarrierCredentials
from voicecore.sim.model import SimConfig
from voicecore.gemini import agent_check as gemini_check
from voicecore.sim import gemini_records as gemini_demo
from voicecore.gemini.driver import vendor_of as gemini_vendor_of
from voicecore.sim.caller_voice import SpeechUnavailable
from voicecore.sim.carrier_rest import CarrierRestServer
from voicecore.sim.model_server import serve_model_sim
from voicecore.priority import SIMULATOR_RT_PRIORITY, priority_raised
from voicecore.sim.quiet_gc import collector_paused
from voicecore.sim.tool_server import ToolServer
from voicecore.supervise import Stack, StackError, get_from_gateway, resolve_config

MIN_SECONDS = 13.0
# The model simulator speaks these in order: greeting, the answer that gets interrupted, the next answer.
DEMO_CLIPS = ("agent_greeting", "agent_basic_price", "agent_hours", "agent_cancel", "agent_sim_card")
FIRST_QUESTION_AT_MS = 5500  # after the 4.2 s greeting
BARGE_IN_AT_MS = 10_000  # about 1.8 s into the 5.6 s answer to the first question
DEFAULT_RECORD_DIR = "voicecore-records"  # relative to the working directory
DEFAULT_LATE_DELTAS = 2  # audio deltas the model simulator still sends after a cancel (0-3)
MODEL_VENDORS = ("openai", "gemini")  # --model-vendor: whose simulator (and protocol) the stack talks to
RECORD_WAIT_S = 15.0  # the model worker writes a call's record when the call ended; wait this long for all
STORE_WAIT_S = 10.0  # the recorder worker scans the record directory every second; wait this long for all calls


_ports_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port free now and not handed out before by this process. The kernel may give the same
    port to two binds in a row once the first socket closed, and a stack's ports are all chosen before any
    worker binds one: a repeat made the gateway and the console share a port (the workers refused the
    configuration), so a port this process already chose is never chosen again."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port


DEMO_CALLER_CLIPS = ("caller_basic_price", "caller_interrupt")  # what the generic callers say


def demo_script(seconds: float) -> CallScript:
    """Greeting, a question, and a barge-in in the middle of the answer."""
    question, barge_in = DEMO_CALLER_CLIPS
    return CallScript(
        duration_ms=int(seconds * 1000),
        utterances=((FIRST_QUESTION_AT_MS, load_clip(question)), (BARGE_IN_AT_MS, load_clip(barge_in))),
        bargein_at_ms=(BARGE_IN_AT_MS,),
    )


def demo_config(base: Config, workdir: Path, calls: int, sim_port: int, record_dir: str | None = None) -> Config:
    """``record_dir``: where the calls' records go; None: into the (temporary) workdir; "": not recorded."""
    return dataclasses.replace(
        base,
        listen=f"127.0.0.1:{free_port()}",
        public_url="",
        realtime_url=f"ws://127.0.0.1:{sim_port}/v1/realtime",
        realtime_api_key="",
        send_call_id_to_vendor=True,  # our own simulator: it ties its sessions to the calls by it
        runtime_dir=str(workdir / "run"),
        record_dir=str(workdir / "records") if record_dir is None else record_dir,
        console_listen=f"127.0.0.1:{free_port()}",  # never the default port a running `voicecore up` may hold
        max_calls=max(calls, 4),
    )


def wait_for_records(record_dir: Path, call_sids: list[str], timeout_s: float = RECORD_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    # <sid>-2.jsonl alone: a killed worker left <sid>.jsonl.part and its successor recorded the rest
    while time.monotonic() < deadline and not all((record_dir / f"{sid}.jsonl").exists() or any(record_dir.glob(f"{sid}-*.jsonl"))
                                                  for sid in call_sids):
        time.sleep(0.05)


def calls_in_store(config: Config, call_sids: list[str], timeout_s: float = STORE_WAIT_S) -> tuple[int, list[str]]:
    """How many of these calls the call store holds with at least one turn, waiting up to ``timeout_s`` for
    the recorder worker to ingest their records, and a problem line when any is missing. Blocking (a
    thread's job), and while the stack still runs: the recorder is part of it."""
    from voicecore.store import CallStore, database_url_for

    deadline = time.monotonic() + timeout_s
    missing = list(call_sids)
    store = None
    error = ""
    try:
        while missing and time.monotonic() < deadline:
            try:
                store = store or CallStore.open(database_url_for(config))
                missing = [sid for sid in missing if not (store.call(sid) or {}).get("turns")]
                error = ""
            except Exception as exc:  # noqa: BLE001 (a store the demo cannot read is a problem to report, not a crash)
                error = f"{type(exc).__name__}: {exc}"
            if missing:
                time.sleep(0.1)
    finally:
        if store is not None:
            store.close()
    if not missing:
        return len(call_sids), []
    why = f" (the store cannot be read: {error})" if error else ""
    return len(call_sids) - len(missing), [f"{len(missing)} call(s) not in the call store with a turn after {timeout_s:.0f} s, "
                                           f"e.g. {missing[0]}{why}"]


def console_key_for(config: Config, name: str, revoke: bool = False) -> str:
    """A console API key ``name`` for this demo run (``revoke``: end it). Blocking."""
    from voicecore.store import CallStore, database_url_for

    with CallStore.open(database_url_for(config)) as store:
        if revoke:
            store.revoke_api_key(name)
            return ""
        return store.add_api_key(name)


def replay_records(paths: list[Path], totals: dict | None = None) -> tuple[int, list[str]]:
    """Replay each record through fresh cores: (how many were identical, a problem line per other one).
    ``totals``: receives the replayed drivers' counters, summed, and ``python_runs_by_call`` (call sid ->
    function -> RunTool actions the record holds)."""
    from voicecore.privacy.records import RecordPrivacy
    from voicecore.record import RecordError, load
    from voicecore.replay import replay

    identical = 0
    problems: list[str] = []
    for path in paths:
        try:
            header, entries = load(path)
            if not RecordPrivacy.from_header(header).replayable:
                # kept without words (metadata_only): nothing to replay; its call is in the store
                if totals is not None:
                    totals["records_without_words"] = totals.get("records_without_words", 0) + 1
                continue
            result = replay(header, entries)
        except (RecordError, OSError, KeyError, TypeError, ValueError) as exc:
            problems.append(f"record {path.name} unreadable: {exc}")
            continue
        if totals is not None:
            for key, value in result.statistics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    totals[key] = totals.get(key, 0) + value
            runs = totals.setdefault("python_runs_by_call", {}).setdefault(header.get("call_sid", ""), {})
            for entry in entries:
                if entry["k"] == "out" and entry["a"].get("type") == "RunTool":
                    runs[entry["a"]["name"]] = runs.get(entry["a"]["name"], 0) + 1
        if result.identical:
            identical += 1
        else:
            d = result.divergence
            problems.append(f"record {path.name} diverged at t={d.t_ns} ns (input {d.input_kind}, action {d.index})")
    return identical, problems


async def run_calls(config: Config, calls: int, seconds: float, ramp_ms: int = 0,
                    scenario: Scenario | None = None, carrier: str = "twilio",
                    credentials: CarrierCredentials | None = None, jitter_probability: float = 0.0,
                    rest=None) -> list[CallResult]:
    lead_frames = max(1, config.lead_ms // 20)

    async def one(index: int) -> CallResult:
        if ramp_ms:
            await asyncio.sleep(ramp_ms * index / max(1, calls) / 1000)
        script = scenario.call_script(index, int(seconds * 1000)) if scenario is not None else demo_script(seconds)
        return await place_call(config.base_url, config.twilio_auth_token, script, lead_frames, carrier=carrier,
                                credentials=credentials, jitter_probability=jitter_probability, rest=rest)

    with collector_paused():
        return await asyncio.gather(*(one(i) for i in range(calls)))


# On a carrier whose stream does not keep caller frames in order (its simulator side's reorders_caller_frames:
# Telnyx's), the simulator sends this share of them after the next one, so the demo exercises the gateway's
# reorder window.
DEMO_REORDER_JITTER = 0.02


def carrier_config(config: Config, carrier: str) -> tuple[Config, CarrierCredentials]:
    """``config`` with the secrets of a fresh set of simulator credentials (the Twilio auth token kept),
    and the credentials. Raises StackError when this stack has no setting for ``carrier``'s secret (its
    gateway routes are not there)."""
    credentials = generate_credentials(config.twilio_auth_token)
    names = {f.name for f in dataclasses.fields(config)}
    settings = credentials.stack_settings()
    needed = registry.get(carrier).simulator.serving_settings
    missing = [name for name in needed if name not in names]
    if missing:
        raise StackError(f"this build has no {carrier} settings ({', '.join('VOICECORE_' + n.upper() for n in missing)}): "
                         f"its gateway cannot take {carrier} calls")
    return dataclasses.replace(config, **{name: value for name, value in settings.items() if name in names}), credentials



def frame_matching(results: list[CallResult], sim) -> dict | None:
    """Tie the received frames of calls on a lossy carrier path (A-law, resampled L16) to the model's frames
    (voicecore/sim/audio_match.py) before the figures are computed; the summed counts, or None when every
    call's audio came back bit-exact."""
    totals: dict | None = None
    for result in results:
        records = [session.record for session in sim.by_call(result.call_sid)]
        stats = match_frames(result.core, records)
        if stats is None:
            continue
        totals = totals or dict.fromkeys(stats.as_dict(), 0)
        for key, value in stats.as_dict().items():
            totals[key] += value
    return totals


def demo_sim_config(overlap_probability: float = 0.0, late_deltas: int = DEFAULT_LATE_DELTAS,
                    scenario: Scenario | None = None) -> SimConfig:
    """The model simulator of the demo: the packaged answers in order, or an agent scenario's rules (the
    model then says what the runtime asks for and what the rules say, and calls the agent's functions)."""
    if scenario is not None:
        return SimConfig(turns=scenario.sim_turns, late_deltas_after_cancel=late_deltas,
                         overlap_probability=overlap_probability)
    return SimConfig(clip_sequence=DEMO_CLIPS, late_deltas_after_cancel=late_deltas, overlap_probability=overlap_probability)


def _arena_name(config: Config) -> str:
    """The shared-memory arena the stack's gateway runs on (its name file in the runtime directory)."""
    try:
        return (Path(config.runtime_dir) / ARENA_NAME_FILE).read_text().strip()
    except FileNotFoundError:
        return ""


async def _demo(calls: int, seconds: float, config_path: str | None, workdir: Path, log_file, record_dir: Path | None = None,
                sim_config: SimConfig | None = None, agent_dir: Path | None = None, scenario: Scenario | None = None,
                carrier: str = "twilio", transcription: str | None = None, callers: AgentCallers | None = None,
                model_vendor: str = "openai", connection_limit_s: float = 600.0,
                internal_error_s: float | None = None) -> dict:
    sim_config = sim_config or demo_sim_config()
    reorders = registry.get(carrier).simulator.reorders_caller_frames
    loop_exceptions = LoopExceptions()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_exceptions)
    # SIGTERM stops the demo as Ctrl-C does: its stack is stopped on the way out (a killed demo left its
    # supervisord, workers and arena behind).
    loop.add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    base = resolve_config(load_config(os.environ, config_path))
    if transcription:
        base = dataclasses.replace(base, transcription_model=transcription)
    credentials: CarrierCredentials | None = None
    if carrier != "twilio":
        base, credentials = carrier_config(base, carrier)
    else:
        credentials = generate_credentials(base.twilio_auth_token)
    # The carrier's REST API, simulated: an agent that hangs up or transfers does it as in production, and the
    # simulated call ends the way the carrier ends it (closed_by rest_hangup / rest_transfer).
    rest = CarrierRestServer(credentials)
    await rest.__aenter__()
    names = {f.name for f in dataclasses.fields(base)}
    base = dataclasses.replace(base, **{k: v for k, v in credentials.rest_settings(rest.base_url).items() if k in names})
    if model_vendor == "gemini":  # the Gemini Live simulator instead (voicecore/gemini/demo.py)
        sim = await gemini_demo.start_sim_process(connection_limit_s, sim_config.late_deltas_after_cancel, scenario,
                                                  clips=DEMO_CALLER_CLIPS, internal_error_s=internal_error_s)
        sim_port = sim.port
    else:
        sim, sim_port = await serve_model_sim("127.0.0.1", 0, sim_config)
    config = demo_config(base, workdir, calls, sim_port, record_dir=str(record_dir) if record_dir is not None else "")
    if model_vendor == "gemini":
        config = gemini_demo.demo_config(config, sim_port)
        if agent_dir is not None and scenario is None:  # an agent without its scenario
            config, agent = agent_settings.configure(dataclasses.replace(config, agent=str(agent_dir)), os.environ)
    tool_server: ToolServer | None = None
    agent: AgentSpec | None = None
    if agent_dir is not None and callers is not None:
        # the tests' fake API: one server, its routes set round by round (voicecore/chat/phone_calls.py)
        tool_server = ToolServer(())
        if callers.envs:
            url = await tool_server.start()
            for name in callers.envs:
                os.environ[name] = url
        config, agent = agent_settings.configure(dataclasses.replace(config, agent=str(agent_dir)), os.environ)
    if agent_dir is not None and scenario is not None:
        if scenario.routes:
            # The agent builder's API, faked on loopback; the agent's URLs read its address from the environment
            # the stack inherits.
            tool_server = ToolServer(scenario.routes)
            os.environ[scenario.tool_server_env] = await tool_server.start()
        config, agent = agent_settings.configure(dataclasses.replace(config, agent=str(agent_dir)), os.environ)
    stack = Stack(config)
    own_arenas: set[str] = set()
    console: dict = {}
    watching: asyncio.Task | None = None
    try:
        await asyncio.to_thread(stack.start, log_file)
        await asyncio.to_thread(stack.wait_ready)  # READY_TIMEOUT_S: a fresh install on a loaded machine
        own_arenas.add(_arena_name(config))
        cpu = StackCpu(stack)
        cpu.start()
        started = time.monotonic()
        load_cpu_started = time.process_time()
        # The console: an API key for this run (revoked at the end), observers of the first call while it runs.
        key_name = f"voicecore-demo-{secrets.token_hex(4)}"
        console_key = await asyncio.to_thread(console_key_for, config, key_name) if record_dir is not None else ""
        watching = (asyncio.create_task(probe.watch_first_call(config.console_listen, console_key, seconds))
                    if console_key else None)
        # The simulators (this loop) ahead of the stack while the calls run, as the bench's load processes are
        # (voicecore/priority.py): on a busy machine a simulator that waited for a CPU stamped clears late and
        # counted the playout it caught up on as heard. Back to normal for the report's computation.
        with priority_raised(fifo_priority=SIMULATOR_RT_PRIORITY, nice=-10):
            # Spread call starts over up to 1 s so 200 webhooks do not arrive in the same millisecond.
            if callers is not None:
                with collector_paused():
                    placed = await place_test_calls(config, callers.for_calls(calls), callers.phrases, callers.demo,
                                                    sim, rest, tool_server)
                results = [call.result for call in placed]
            else:
                results = await run_calls(config, calls, seconds, ramp_ms=min(1000, 5 * calls), scenario=scenario,
                                          carrier=carrier, credentials=credentials, rest=rest,
                                          jitter_probability=DEMO_REORDER_JITTER if reorders else 0.0)
        wall_s = time.monotonic() - started
        load_cpu_s = time.process_time() - load_cpu_started
        cpu_s = cpu.stop()
        metrics = await asyncio.to_thread(fetch_gateway_metrics, config)
        call_sids = [r.call_sid for r in results if r.metrics is not None]
        in_store, store_problems = 0, []
        if record_dir is not None:
            await asyncio.to_thread(wait_for_records, record_dir, call_sids)
            in_store, store_problems = await asyncio.to_thread(calls_in_store, config, call_sids)
        if watching is not None:
            console = await watching
            console.update(await asyncio.to_thread(probe.page_loads, config.console_listen, console_key, call_sids))
            console["problems"] = console.get("problems", [])
            store_problems.extend(console["problems"])
            await asyncio.to_thread(console_key_for, config, key_name, revoke=True)
        own_arenas.add(_arena_name(config))  # a restarted gateway made a new one
    finally:
        if watching is not None and not watching.done():
            watching.cancel()
        await asyncio.to_thread(stack.stop)
        await sim.aclose()
        await rest.__aexit__(None, None, None)
        if tool_server is not None:
            await tool_server.stop()
    # Only this stack's arenas: another stack on the machine (a test, a second demo) has its own, alive.
    leftovers = sorted(name for name in own_arenas if name and (Path(config.shm_dir) / name).exists())
    matching = frame_matching(results, sim)
    report = summarize(results, sim, seconds=seconds, cpu_seconds=cpu_s, wall_seconds=wall_s, stack_metrics=metrics,
                       expect_bargeins=scenario is None and callers is None)
    report["carrier"] = carrier
    report["model_vendor"] = model_vendor
    if isinstance(sim, gemini_demo.GeminiRecords):
        report["gemini"] = gemini_demo.report_figures(sim, metrics)
    if matching is not None:
        report["frame_matching"] = matching
    if reorders:  # what the jitter did: caller frames sent after their successor
        report["caller_frames_out_of_order"] = sum(getattr(r.core, "frames_reordered", 0) for r in results if r.core)
    report["shm_leftovers"] = len(leftovers)
    report["command"] = shlex.join(sys.argv)  # a published report says how to run it again (bench/results)
    report["sim_overlap_probability"] = sim_config.overlap_probability
    report["sim_late_deltas"] = sim_config.late_deltas_after_cancel
    # The simulators' own CPU: near one full core the load side, not the stack, is what callers "hear".
    report["load_cpu_fraction"] = round(load_cpu_s / wall_s, 3) if wall_s else 0.0
    report["records_dir"] = str(record_dir) if record_dir is not None else None
    report["records_written"] = report["records_replayed_identical"] = 0
    totals: dict = {}
    if record_dir is not None:
        paths = record_paths(record_dir, call_sids)
        identical, problems = await asyncio.to_thread(replay_records, paths, totals)
        report["records_written"] = len(paths)
        report["records_replayed_identical"] = identical
        # By the names record_paths found for each call: a call id may hold "-" itself (Plivo's and Vonage's
        # UUIDs, Telnyx's call_control_id), so a record's name cannot be cut at its first "-".
        missing = [sid for sid in call_sids if not record_paths(record_dir, [sid])]
        if missing:
            problems.insert(0, f"{len(missing)} call(s) without a record, e.g. {missing[0]}")
        report["calls_in_store"] = in_store
        if console:
            report["console"] = console
        problems.extend(store_problems)
        report["problems"] = list(report.get("problems", [])) + problems
        report["ok"] = bool(report["ok"] and not problems)
    if callers is not None:
        report["callers"] = callers.kind
        report["agent_tests"] = judged_tests(placed, record_dir, agent)
    if agent is not None and scenario is not None:
        requests = tool_server.requests if tool_server is not None else []
        figures = agent_figures(agent, scenario, results, sim, requests, totals, int(seconds * 1000))
        if record_dir is None:
            # The controller's counters come from replaying the records: without them they are unknown (null),
            # which fails the run only where a check needs them (Python tools run behind a confirmation).
            figures["controller"] = None
            if python_confirmed(agent):
                figures["problems"].append("no records: the Python tools behind a confirmation cannot be checked "
                                           "against the callers' yeses (run without --no-record)")
        report["agent"] = figures
        report["problems"] = list(report.get("problems", [])) + figures["problems"]
        report["ok"] = bool(report["ok"] and not figures["problems"])
    crashes = list(loop_exceptions.problems)
    log_path = Path(getattr(log_file, "name", ""))
    if log_path.is_file():
        log_file.flush()
        crashes += tracebacks(log_path.read_text(errors="replace"), "a stack process (its log)")
    if crashes:
        report["problems"] = crashes + list(report.get("problems", []))
        report["ok"] = False
    left = list(leftovers) + ([config.runtime_dir] if Path(config.runtime_dir).exists() else [])
    if left:  # named, so a failed run says why (it used to fail with an empty problems list)
        report["problems"] = list(report.get("problems", [])) + [f"left behind after the stack stopped: {', '.join(left)}"]
    report["ok"] = bool(report["ok"] and not left)
    return report


def explicit_settings(agent_dir: Path) -> dict[str, Any]:
    """The settings of ``agent_dir``'s agent.toml voicecore/gemini/agent_check.py reads, by the names the loader gives them (for an
    agent loaded for another vendor and run on Gemini: the demo's --model-vendor). An unreadable file: none
    (the loader has already said what is wrong with it)."""
    try:
        data = tomllib.loads((Path(agent_dir) / "agent.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    found: dict[str, Any] = {}
    if isinstance(data.get("voice"), str):
        found["voice"] = data["voice"]
    if isinstance(data.get("voices"), dict):
        found["voices"] = data["voices"]
    turns = data.get("turns") if isinstance(data.get("turns"), dict) else {}
    for key, name in (("detection", "turn_detection"), ("eagerness", "vad_eagerness"),
                      ("transcription_model", "transcription_model")):
        if key in turns:
            found[name] = turns[key]
    return found


TRACEBACK_HEAD = "Traceback (most recent call last):"


def tracebacks(text: str, where: str) -> list[str]:
    """One problem line per Python traceback in ``text`` (a process's output): ``where`` and the exception
    it ended with, so a run that went wrong inside a stack or simulator process says so by name."""
    found: list[str] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line.rstrip().endswith(TRACEBACK_HEAD):
            continue
        prefix = line[: len(line.rstrip()) - len(TRACEBACK_HEAD)]
        exception = "(its last line is missing)"
        for later in lines[index + 1:]:
            body = later[len(prefix):] if later.startswith(prefix) else later
            if body and not body[0].isspace():
                exception = body.strip()
                break
        found.append(f"traceback in {where}: {exception[:300]}")
    return found


class LoopExceptions:
    """The demo loop's unhandled exceptions (a simulator's callback that raised): kept as problems and
    passed on to the default handler, which prints them as before."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        exc = context.get("exception")
        what = f"{type(exc).__name__}: {exc}" if exc is not None else context.get("message", "unknown error")
        self.problems.append(f"traceback in the simulators (demo process): {context.get('message', '')}: {what}"[:400])
        loop.default_exception_handler(context)


def spine_configured(config_path: str | None) -> bool:
    """The configuration asks for the bare stream (call_control = spine): the demo then runs the spine's
    scripted call instead of an agent's scenario."""
    try:
        return load_config(os.environ, config_path).call_control == "spine"
    except ConfigError:  # reported where the stack is configured, with its message
        return False


def fetch_gateway_metrics(config: Config) -> dict:
    """The running stack's /metrics (the gateway's JSON counters), or {} when the gateway does not answer
    with them: a report then goes without stack metrics rather than failing. Blocking (a thread's job)."""
    try:
        status, body = get_from_gateway(config, "/metrics")
        return json.loads(body) if status == 200 else {}
    except (OSError, TimeoutError, h11.ProtocolError, ValueError):
        return {}


def run_demo(calls: int, seconds: float, as_json: bool, config_path: str | None, keep_logs: bool = False,
             record_dir: str | None = DEFAULT_RECORD_DIR, overlap_probability: float = 0.0,
             late_deltas: int = DEFAULT_LATE_DELTAS, agent_dir: str | None = None, carrier: str = "twilio",
             transcription: str | None = None, model_vendor: str = "openai", connection_limit_s: float = 600.0,
             internal_error_s: float | None = None) -> int:
    """``record_dir``: one record per call goes there (created 0700 if missing); None: no records.
    ``overlap_probability``, ``late_deltas``: the model simulator's SimConfig.overlap_probability and
    late_deltas_after_cancel. ``agent_dir``: run this agent against its demo scenario (demo.toml: the
    callers' scripts, the simulated model's rules, a fake of its tool API) under the turn-taking controller.
    ``carrier``: the carrier the simulator acts as (twilio, telnyx, plivo, vonage, exotel); the demo makes
    that carrier's secrets for the run and gives the stack its halves. Without ``agent_dir`` the shipped
    default agent runs its own scenario, under the turn-taking controller as `voicecore up` runs it
    (``call_control = spine`` in the configuration runs the bare stream's demo instead).
    ``transcription``: the transcription model the stack asks the vendor for (None: the agent's)."""
    if carrier not in CARRIERS:
        print(f"voicecore demo: --carrier must be one of {', '.join(CARRIERS)}", file=sys.stderr)
        return 2
    if model_vendor not in MODEL_VENDORS:
        print(f"voicecore demo: --model-vendor must be one of {', '.join(MODEL_VENDORS)}", file=sys.stderr)
        return 2
    if model_vendor == "gemini":
        # The Gemini simulator answers every caller turn with its clips: the generic demo calls (greeting, a
        # question, a barge-in) for the default agent, or the named agent's scenario (its callers, function
        # calls and fake API), the agent checked for what Gemini supports.
        gemini_agent: Path | None = None
        if agent_dir is not None:
            gemini_agent = Path(agent_dir).expanduser().resolve()
            try:
                spec = load_agent(gemini_agent)
            except AgentError as exc:
                print(f"voicecore demo: {exc}", file=sys.stderr)
                return 2
            if gemini_vendor_of(spec.model, spec.model_vendor) != "gemini":
                # the demo runs it on Gemini: what Gemini cannot honour is refused as for a Gemini agent
                problems = gemini_check.unsupported_settings(explicit_settings(gemini_agent), spec.flow)
                if problems:
                    print("voicecore demo: this agent cannot run on Gemini:\n" + "\n".join(
                        f"  {gemini_agent / 'agent.toml'}: {path}: {message}" for path, message in problems),
                        file=sys.stderr)
                    return 2
    scenario: Scenario | None = None
    callers: AgentCallers | None = None
    agent_path: Path | None = None
    if model_vendor == "gemini":
        agent_path = gemini_agent
        if agent_path is not None and (agent_path / SCENARIO_FILE).is_file():
            try:  # its callers, function calls and fake API (the simulator transcribes the callers' clips)
                scenario = load_scenario(agent_path)
            except ScenarioError as exc:
                print(f"voicecore demo: {exc}", file=sys.stderr)
                return 2
    elif agent_dir is None and not spine_configured(config_path):
        agent_dir = str(default_agent_dir())
    if agent_dir is not None and model_vendor != "gemini":
        agent_path = Path(agent_dir).expanduser().resolve()
        try:
            spec = load_agent(agent_path)  # every problem of its files, before anything starts
            if (agent_path / SCENARIO_FILE).is_file():
                scenario = load_scenario(agent_path)
            else:
                callers = agent_callers(agent_path, spec)
        except (AgentError, ScenarioError, AgentTestError, SpeechUnavailable) as exc:
            print(f"voicecore demo: {exc}", file=sys.stderr)
            return 2
    if not 0.0 <= overlap_probability <= 1.0:
        print("voicecore demo: --overlap-probability must be from 0 to 1", file=sys.stderr)
        return 2
    if not 0 <= late_deltas <= 3:
        print("voicecore demo: --late-deltas must be from 0 to 3", file=sys.stderr)
        return 2
    sim_config = demo_sim_config(overlap_probability, late_deltas, scenario)
    if callers is not None:
        if carrier != "twilio":
            print("voicecore demo: an agent without demo.toml is demonstrated with its tests' callers, as Twilio calls "
                  "(--carrier twilio)", file=sys.stderr)
            return 2
        sim_config = dataclasses.replace(callers.sim_config, late_deltas_after_cancel=late_deltas,
                                         overlap_probability=overlap_probability)
    if calls < 1:
        print("voicecore demo: --calls must be at least 1", file=sys.stderr)
        return 2
    if seconds < MIN_SECONDS:
        print(f"voicecore demo: --seconds must be at least {MIN_SECONDS:.0f} (greeting, question, barge-in)", file=sys.stderr)
        return 2
    records: Path | None = None
    if record_dir is not None:
        records = Path(record_dir).expanduser().resolve()
        try:
            records.mkdir(mode=0o700, parents=True, exist_ok=True)  # records are personal data
        except OSError as exc:
            print(f"voicecore demo: cannot create the record directory {records}: {exc}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="voicecore-demo-") as tmp:
        workdir = Path(tmp)
        log_path = workdir / "stack.log"
        return run_and_report(
            lambda log_file: _demo(calls, seconds, config_path, workdir, log_file, records, sim_config, agent_path,
                                   scenario, carrier, transcription, callers, model_vendor, connection_limit_s,
                                   internal_error_s),
            log_path, as_json, keep_logs, format_report)


def run_and_report(demo: Callable[[BinaryIO], Awaitable[dict]], log_path: Path, as_json: bool, keep_logs: bool,
                   formatter: Callable[[dict], str]) -> int:
    """Run a demo (``demo(log_file)``: its stack logs to ``log_path``) and print its report, as one JSON object
    or as ``formatter``'s text; the exit code: 0 when the report is ok, 1 when not or the stack failed, 130 when
    stopped. The stack's log goes to stderr when asked for or when something went wrong."""
    with open(log_path, "wb") as log_file:
        try:
            report = asyncio.run(demo(log_file))
        except (asyncio.CancelledError, KeyboardInterrupt):
            print("voicecore demo: stopped before the end; the stack was stopped", file=sys.stderr)
            return 130
        except StackError as exc:
            print(f"voicecore demo: {exc}", file=sys.stderr)
            sys.stderr.write(log_path.read_text(errors="replace")[-4000:])
            return 1
    if keep_logs or not report["ok"]:
        sys.stderr.write(log_path.read_text(errors="replace")[-20000:])
    print(json.dumps(report) if as_json else formatter(report))
    return 0 if report["ok"] else 1


def format_report(report: dict) -> str:
    lines = [
        f"voicecore demo: {report['calls']} call(s) x {report['seconds']:.0f} s as {report.get('carrier', 'twilio')} "
        f"-> {'OK' if report['ok'] else 'FAILED'}",
        f"  caller turns       {report['real_turns']} real, {report['unanswered_turns']} unanswered, "
        f"{report['resumed_after_words']} resumed over their words; {report['backchannels']} backchannels over the agent, "
        f"{report['backchannels_that_cut']} cut it",
        f"  holds ms           resumed p50 {report['hold_ms']['resumed']['p50']:.0f} ({report['hold_ms']['resumed']['count']}), "
        f"cut p50 {report['hold_ms']['cut']['p50']:.0f} ({report['hold_ms']['cut']['count']}); talk-over on real turns "
        f"p99 {report['talkover_real_turns_ms']['p99']:.0f}; resume after the words p50 {report['resume_after_decision_ms']['p50']:.0f}; "
        f"answer asked p50 {report['answer_request_ms']['p50']:.0f} after the words",
        f"  frames sent        {report['frames_sent']}",
        f"  lateness ms        p50 {report['lateness_ms']['p50']:.2f}  p99 {report['lateness_ms']['p99']:.2f}  max {report['lateness_ms']['max']:.2f}",
        f"  underruns          {report['underruns']}",
        f"  stale frames       {report['stale_frames']}",
        f"  barge-ins          {report['bargeins']}  (decision -> clear ms p50 {report['bargein_to_clear_ms']['p50']:.2f}  p99 {report['bargein_to_clear_ms']['p99']:.2f})",
        f"  without clear      {report['bargeins_without_clear']}  (clears superseding an overlapped response {report['clears_superseded']})",
        f"  talkover ms        p50 {report['talkover_ms']['p50']:.1f}  p99 {report['talkover_ms']['p99']:.1f}  max {report['talkover_ms']['max']:.1f}  ({report['talkover_ms']['count']} speech starts over agent audio)",
        f"  overlapping frames {report['overlapping_frames']}  (model: {report['overlapping_responses']} overlapping responses, {report['late_deltas_sent']} late deltas)",
        f"  truncate error ms  max {report['truncate_error_ms']['max']:.1f}",
        f"  model -> carrier   p50 {report['model_to_carrier_ms']['p50']:.1f}  p99 {report['model_to_carrier_ms']['p99']:.1f} ms"
        "  (first audio delta sent -> first frame at the carrier)",
        f"  turn latency ms    p50 {report['turn_latency_ms']['p50']:.0f}  p99 {report['turn_latency_ms']['p99']:.0f}"
        f"  (caller stops -> first agent audio; the model's share p50 {report['turn_latency_model_ms']['p50']:.0f})",
        f"  CPU ms per call-s  {report['cpu_ms_per_call_second']:.2f}",
    ]
    agent = report.get("agent")
    if agent:
        decision = report.get("gateway_bargein_decision_to_clear_ms") or {}
        lines.append(f"  barge-in decision  -> clear ms p50 {decision.get('p50', 0.0):.2f}  p99 {decision.get('p99', 0.0):.2f}"
                     f"  ({decision.get('count', 0)} barge-ins the controller decided on: words, not a bare VAD edge)")
        c = agent["controller"]
    if agent and c is None:
        lines.append(f"  agent              {agent['name']}: {agent['model_function_calls']} function calls by the model, "
                     f"{agent['tool_server_requests']} requests at the tool server (the controller's counters need records)")
    elif agent:
        lines += [
            f"  agent              {agent['name']}: {agent['model_function_calls']} function calls by the model, "
            f"{c['tools_run']} tools run ({c['tool_errors']} errors), {agent['tool_server_requests']} requests at the tool server",
            f"  duplicates         {c['duplicate_writes_suppressed']} writes suppressed (same function and arguments within the window)",
            f"  confirmations      {c['actions_proposed']} proposed, {c['actions_confirmed']} confirmed, {c['actions_declined']} declined, "
            f"{c['actions_timed_out']} timed out; {agent['actions_executed']} executed, "
            f"{agent['actions_executed_without_confirmation']} without the caller's yes",
            f"  after tool calls   talk-over max {agent['talkover_after_tool_ms']['max']:.0f} ms over "
            f"{agent['talkover_after_tool_ms']['count']} answers; {c['fillers']} filler lines, {c['transitions']} node transitions",
        ]
    tests = report.get("agent_tests")
    if tests:
        lines.append(f"  agent tests        {tests['passed']} passed, {tests['failed']} failed "
                     f"({'its tests/*.toml' if report.get('callers') == 'tests' else 'a generic caller'} as the callers)")
        for test in tests["tests"]:
            for failure in test["failures"]:
                lines.append(f"  test failed: {test['name']}: {failure}")
        for problem in tests.get("problems", []):
            lines.append(f"  tests not judged: {problem}")
    gemini = report.get("gemini")
    if gemini:
        lines.append(f"  gemini             {gemini['connections']} connections, {gemini['connections_resumed']} resumed a "
                     f"session ({gemini['go_aways_sent']} goAways sent), {gemini['turns']} model turns, "
                     f"{gemini['interrupted_turns']} interrupted, {gemini['late_chunks_sent']} late chunks sent")
    matching = report.get("frame_matching")
    if matching:
        lines.append(f"  frame matching     {matching['exact']} exact, {matching['matched']} matched by content, "
                     f"{matching['unmatched']} unmatched ({matching['unmatched_with_signal']} with signal) of "
                     f"{matching['frames']} (lossy carrier path: voicecore/sim/audio_match.py)")
    if report.get("records_dir"):
        lines.append(f"  records            {report['records_written']} in {report['records_dir']}, "
                     f"{report['records_replayed_identical']} replayed identically, {report.get('calls_in_store', 0)} calls in the store")
    else:
        lines.append("  records            off (--no-record)")
    console = report.get("console")
    if console and "calls_list_ms" in console:
        lines.append(f"  console            {console['observers']} observers and a late joiner of one live call: "
                     f"{'the same' if console.get('observers_identical') else 'NOT the same'} {console.get('events', 0)} events in order; "
                     f"page load p99: calls list {console['calls_list_ms']['p99']:.1f} ms, call page "
                     f"{console['call_page_ms']['p99']:.1f} ms")
    for problem in report.get("problems", []):
        lines.append(f"  problem: {problem}")
    return "\n".join(lines)
