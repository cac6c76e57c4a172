"""`voicecore demo --outbound`: bring the stack up, place simulated outbound calls through the carrier's Calls
API, let the carrier simulator's callees answer them, and report who the stack thought answered.

Owns the run: the callees (every kind of voicecore/sim/callee_core.py in turn: a person, a voicemail, a
screening assistant, an IVR, busy, no answer, failed), placing each call (voicecore/outbound/dial.py) against the
carrier simulator's REST API, reading each answered call's verdict from its call record (the model worker's
``answer`` note) and scoring the verdicts against the truth the simulator kept (``score``, pure). The stack is
started and stopped as `voicecore demo` does it (voicecore/demo.py's helpers).

The report's contract: ``answer_verdicts`` (per answer class: precision, recall, n), ``answer_accuracy``,
``verdict_ms`` (p50, p95: callee time from the answer to the verdict), ``human_first_word_ms`` (p50, p95, n: a
person's wait from their greeting's last word to the agent's first audio at the carrier), ``answer_actions`` (per
true class: the actions taken and how many worked: ``action_worked``), ``carrier_amd`` (with
``--machine-detection``: the carrier's answers sent, accepted, right, and the verdicts that followed it),
``ivr_navigated`` (the IVR callees whose menu the agent's keys got through to the person) and ``ivr_navigation``
(with ``--on-ivr dtmf``: the IVR callees, those sent keys, navigated, and by which means the menu heard them),
``ok`` and ``problems``, with the calls; placed through several carriers at once, ``by_carrier``: each
carrier's own report of its calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from voicecore.bus.transport import ARENA_NAME_FILE
from voicecore.call.record import loads_partial
from voicecore.carriers import registry
from voicecore.config import load_config
from voicecore.demo import (
    LoopExceptions,
    demo_config,
    demo_sim_config,
    record_paths,
    replay_records,
    run_and_report,
    tracebacks,
    wait_for_records,
)
from voicecore.outbound import dial
from voicecore.outbound.answer import VERDICTS
from voicecore.outbound.greetings import CLASSES
from voicecore.sim.callee_core import KINDS, UNANSWERED_KINDS, callee_seed, plan_callee, sentences
from voicecore.sim.ivr_callee import CONNECTING_TEXT, PERSON_TEXT, REPROMPT_TEXT, SIM_IVR_DIGITS
from voicecore.sim.screened_callee import PUT_THROUGH_TEXT
from voicecore.sim.caller_voice import speak
from voicecore.sim.carrier import generate_credentials
from voicecore.sim.carrier_rest import CarrierRestServer
from voicecore.sim.model_server import serve_model_sim
from voicecore.stats import percentile_or_none
from voicecore.supervise import Stack, resolve_config

FROM_NUMBER = "+15005550006"
CALL_WAIT_S = 90.0  # the longest a placed call may take, ringing to hang-up, before the run gives up on it


def callee_number(index: int, lane: int = 0) -> str:
    """The number of a run's ``index``-th callee. ``lane``: the carrier's place in a run of several carriers; its
    callees' numbers differ by a multiple of 2**32, so that they answer as in a run of that carrier alone
    (callee_seed is the number modulo 2**32; lane 0 is a one-carrier run's number)."""
    if lane == 0:
        return f"+1555010{index:04d}"
    return f"+{int(callee_number(index)[1:]) + lane * 2**32}"


def callee_kinds(calls: int) -> list[str]:
    """Every kind in turn, answered ones first: the first four calls cover the four answer classes."""
    return [KINDS[i % len(KINDS)] for i in range(calls)]


def score(pairs: list[tuple[str, str]]) -> dict:
    """(truth, verdict) of answered calls: per class precision/recall/n, and the accuracy."""
    per_class = {}
    for label in CLASSES:
        actual = [v for t, v in pairs if t == label]
        predicted = [t for t, v in pairs if v == label]
        hits = sum(1 for t, v in pairs if t == v == label)
        per_class[label] = {"precision": round(hits / len(predicted), 4) if predicted else None,
                            "recall": round(hits / len(actual), 4) if actual else None, "n": len(actual)}
    correct = sum(1 for t, v in pairs if t == v)
    return {"answer_verdicts": per_class, "answer_accuracy": round(correct / len(pairs), 4) if pairs else None}


def action_worked(kind: str, action: str | None, closed_by: str, agent_frames: int, put_through: bool,
                  navigated: bool = False) -> bool | None:
    """Whether the answer gate's action did what it is for, on this callee: a hang-up ended the call through the
    carrier's API; an introduction got a screening assistant to put the call through; keys pressed on an IVR got
    its menu to put the call through to the person; the agent's start (a person, a voicemail greeted, an IVR
    handed to the model) reached the callee as the agent's audio. None: no action."""
    if action is None:
        return None
    if action == "hang_up":
        return closed_by == "rest_hangup"
    if action == "dtmf":
        return kind == "ivr" and navigated
    if action == "message":  # the voicemail's message reached the callee, then the call was hung up
        return agent_frames > 0 and closed_by == "rest_hangup"
    if action == "introduce" and kind == "screening":
        return put_through
    return agent_frames > 0 and closed_by != "rest_hangup"


def score_actions(rows: list[dict]) -> dict:
    """Per true class of the answered calls: the actions taken (action -> n), how many worked, and n."""
    per_class: dict[str, dict] = {}
    for row in rows:
        if "closed_by" not in row:
            continue
        entry = per_class.setdefault(row["callee"], {"actions": {}, "worked": 0, "n": 0})
        entry["n"] += 1
        action = row.get("action")
        if action is not None:
            entry["actions"][action] = entry["actions"].get(action, 0) + 1
        entry["worked"] += 1 if row.get("action_worked") else 0
    return per_class


def score_carrier_amd(rows: list[dict]) -> dict:
    """The carrier's AMD answers of the answered calls: sent, accepted by the node (204), right (the side it
    named, a person or a machine, was the callee's), and the verdicts that agree with the callee where the
    carrier was wrong (the detector overruled it) or right."""
    # a call hung up before the carrier's AMD decided gets no AMD callback (as Twilio's)
    with_amd = [row for row in rows if row.get("carrier_amd") is not None and row.get("carrier_amd_status") is not None]
    wrong = [row for row in with_amd if not row["carrier_amd_right"]]
    return {"sent": len(with_amd), "accepted": sum(1 for row in with_amd if row.get("carrier_amd_status") == 204),
            "right": len(with_amd) - len(wrong),
            "verdict_right_when_amd_wrong": sum(1 for row in wrong if row.get("verdict") == row["callee"]),
            "verdict_right_when_amd_right": sum(1 for row in with_amd if row["carrier_amd_right"]
                                                and row.get("verdict") == row["callee"])}


def arena_name(runtime_dir: str) -> str:
    """The shared-memory arena the stack's gateway runs on (its name file in the runtime directory)."""
    try:
        return (Path(runtime_dir) / ARENA_NAME_FILE).read_text().strip()
    except FileNotFoundError:
        return ""


def answer_note(path: Path) -> dict | None:
    """The ``answer`` note of a call record (None when the model worker wrote none)."""
    _header, entries, _complete = loads_partial(path.read_bytes())
    return next((e for e in entries if e.get("k") == "note" and e.get("what") == "answer"), None)


def first_word_wait_ms(seen) -> float | None:
    """How long a person who answered waited, from their greeting's last word to the agent's first audio reaching
    the carrier (ms; None when the agent never spoke or the call has no record of it)."""
    result = seen.result
    core = getattr(result, "core", None)
    if core is None or not core.frames or core.send_origin_ms is None or seen.last_word_ms is None:
        return None
    return round(core.frames[0].arrival_ms - (core.send_origin_ms + seen.last_word_ms), 1)


async def _outbound_demo(calls: int, config_path: str | None, workdir: Path, log_file, record_dir: Path,
                         carrier: str = "twilio", machine_detection: str = "", on_ivr: str = "",
                         kinds: list[str] | None = None, on_voicemail: str = "", sim_turns: tuple = (),
                         carriers: Sequence[str] = ()) -> dict:
    """``carrier``: whose API places the calls (twilio: the Calls API; plivo: Make Call, its answer XML's stream
    and its ring and hang-up callbacks; telnyx: the TeXML Calls API; vonage: Create Call). ``machine_detection``:
    the carrier's AMD asked for too (Enable or DetectMessageEnd, asynchronous: dial.place_call says what each
    carrier is asked for). ``on_ivr``: the agent's ``[outbound]
    on_ivr`` for this run (a copy of the configured agent with it; ``dtmf`` presses the simulated menus' key). ``kinds``: who answers each
    call (callee_core.KINDS), instead of every kind in turn. ``on_voicemail``: the agent's ``[outbound] on_voicemail``
    for this run (``message``: with DEMO_VOICEMAIL_MESSAGE). ``sim_turns``: the model simulator's scripted turns
    (the tests': e.g. it calls send_dtmf when the menu says "press 1").

    ``carriers``: several carriers at once instead of ``carrier``, as a node that serves them all: one stack, and
    each carrier places the same ``calls`` (``kinds``), all at the same time, to callees of its own that answer as
    in a run of that carrier alone (callee_number's lanes). The report is then of every call, and ``by_carrier``
    holds each carrier's own report, of its calls (the run's own problems, a loop's exception, a stack process's
    traceback or an arena left behind, are in each, as no one carrier's call can be cleared of them)."""
    carriers = list(carriers) or [carrier]
    if len(set(carriers)) != len(carriers):
        raise ValueError(f"carriers named twice: {', '.join(carriers)}")
    loop_exceptions = LoopExceptions()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_exceptions)
    loop.add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    base = resolve_config(load_config(os.environ, config_path))
    credentials = generate_credentials(base.twilio_auth_token)
    rest = CarrierRestServer(credentials)
    await rest.__aenter__()
    names = {f.name for f in dataclasses.fields(base)}
    base = dataclasses.replace(base, **{k: v for k, v in credentials.rest_settings(rest.base_url).items() if k in names})
    # the accounts the calls are placed under (the simulator's REST API takes any; a TeXML application's id)
    base = dataclasses.replace(base, twilio_account_sid="AC" + secrets.token_hex(16),
                               telnyx_texml_application_id="1684641123236054244")
    # the node serves the carriers' webhooks and streams only with their secrets (the simulator's matching halves)
    for name in carriers:
        base = dataclasses.replace(base, **registry.get(name).simulator.gateway_settings(credentials))
    if on_ivr or on_voicemail:
        base = dataclasses.replace(base, agent=agent_with_outbound(base.agent, workdir, on_ivr, on_voicemail))
    kinds = list(kinds) if kinds else callee_kinds(calls)  # kinds: the tests' own callees, one a call
    for lane in range(len(carriers)):
        for index, kind in enumerate(kinds):
            rest.callees[callee_number(index, lane)] = kind
    # The callees' greetings, spoken once: the carrier simulator plays them, and the model simulator, told their
    # words, transcribes them when it hears them (the listening session that gives the answer gate the words).
    phrases = []
    said = [(PUT_THROUGH_TEXT[0], PUT_THROUGH_TEXT[1])] if "screening" in kinds else []  # the person put through
    if "ivr" in kinds:
        said += [REPROMPT_TEXT, CONNECTING_TEXT, PERSON_TEXT]  # the menu asking again, navigated, the person
    for index, kind in enumerate(kinds):
        plan = plan_callee(kind, callee_seed(callee_number(index)))  # every lane's callee answers as lane 0's
        said += [(plan.language, sentence) for sentence in (sentences(plan.text) if plan.answered else [])]
    for language, sentence in said:
        if (language, sentence) not in rest.speech:
            rest.speech[(language, sentence)] = await asyncio.to_thread(speak, sentence, language)
            phrases.append((sentence, rest.speech[(language, sentence)]))
    sim_config = dataclasses.replace(demo_sim_config(), caller_phrases=tuple(phrases))
    if sim_turns:  # the tests' scripted model (voicecore/sim/model/config.py SimTurn): e.g. it calls send_dtmf
        sim_config = dataclasses.replace(sim_config, turns=tuple(sim_turns))
    sim, sim_port = await serve_model_sim("127.0.0.1", 0, sim_config)
    config = demo_config(base, workdir, calls * len(carriers), sim_port, record_dir=str(record_dir))
    apis = {name: dial.credentials(config, name) for name in carriers}
    stack = Stack(config)
    own_arenas: set[str] = set()
    placed: dict[str, list[dial.Placed]] = {}
    try:
        await asyncio.to_thread(stack.start, log_file)
        await asyncio.to_thread(stack.wait_ready)  # READY_TIMEOUT_S: a fresh install on a loaded machine
        own_arenas.add(arena_name(config.runtime_dir))
        started = time.monotonic()
        answers = await asyncio.gather(*(
            dial.place_call(node_url=config.base_url, api_base=apis[name].api_base,
                            account_sid=apis[name].account_sid, auth_token=apis[name].auth_token,
                            to=callee_number(index, lane), from_=FROM_NUMBER,
                            fields={"first_name": f"Callee{index}", "reason": "your appointment"}, carrier=name,
                            machine_detection=machine_detection)
            for lane, name in enumerate(carriers) for index in range(calls)))
        placed = {name: list(answers[lane * calls:(lane + 1) * calls]) for lane, name in enumerate(carriers)}
        await asyncio.sleep(0.1)  # the simulator's call tasks begin after its answer was sent
        await rest.wait_outbound(CALL_WAIT_S)
        wall_s = time.monotonic() - started
        # a call's record goes by the id its stream named (Plivo: the CallUUID, not Make Call's request_uuid)
        answered_sids = [seen.call_uuid or seen.placed.call_sid for seen in rest.outbound if seen.plan.answered]
        await asyncio.to_thread(wait_for_records, record_dir, answered_sids)
    finally:
        await asyncio.to_thread(stack.stop)
        await sim.aclose()
        await rest.__aexit__(None, None, None)
    # the run's own problems, whichever carrier's call they came from
    run_problems = list(loop_exceptions.problems)
    leftovers = sorted(name for name in own_arenas if name and (Path(config.shm_dir) / name).exists())
    if leftovers:
        run_problems.append(f"left behind after the stack stopped: {', '.join(leftovers)}")
    log_path = Path(getattr(log_file, "name", ""))
    if log_path.is_file():
        log_file.flush()
        run_problems += tracebacks(log_path.read_text(errors="replace"), "a stack process (its log)")
    run = dict(calls=calls, kinds=kinds, record_dir=record_dir, machine_detection=machine_detection, on_ivr=on_ivr,
               wall_s=wall_s, run_problems=run_problems)
    report = await _report(carriers, placed, rest.outbound, **run)
    if len(carriers) > 1:
        report["by_carrier"] = {name: await _report([name], placed, rest.outbound, **run) for name in carriers}
    return report


async def _report(carriers: list[str], placed: dict[str, list[dial.Placed]], outbound: list, *, calls: int,
                  kinds: list[str], record_dir: Path, machine_detection: str, on_ivr: str, wall_s: float,
                  run_problems: list[str]) -> dict:
    """The report of these carriers' calls of a run (the module docstring's contract); ``outbound``: the calls
    the carrier simulator saw (its OutboundCallSeen), ``run_problems``: the run's own, first in ``problems``."""
    several = len(placed) > 1
    problems: list[str] = [f"{name + ' ' if several else ''}call {i} not placed: {p.error}"
                           for name in carriers for i, p in enumerate(placed.get(name, [])) if not p.ok]
    mine = [seen for seen in outbound if seen.placed.carrier in carriers]
    rows, pairs, verdict_ms = [], [], []
    first_word_waits: list[float] = []
    humans_hung_up = 0
    callbacks_sent = callbacks_accepted = 0
    for seen in mine:
        plan, sid = seen.plan, seen.placed.call_sid
        statuses = [status for status, _code in seen.statuses]
        callbacks_sent += len(seen.statuses)
        callbacks_accepted += sum(1 for _status, code in seen.statuses if code == 204)
        row = {"call_sid": sid, "callee": plan.kind, "rings": plan.rings, "statuses": statuses}
        if several:
            row["carrier"] = seen.placed.carrier
        if seen.call_uuid:
            row["call_uuid"] = seen.call_uuid
        if plan.kind in UNANSWERED_KINDS:
            if not statuses or statuses[-1] != plan.kind:
                problems.append(f"call {sid} ({plan.kind}): its last status callback was {statuses[-1:] or 'none'}")
            rows.append(row)
            continue
        result = seen.result
        closed_by = getattr(result, "closed_by", "not_connected")
        row["closed_by"] = closed_by
        metrics = getattr(result, "metrics", None)
        row["agent_frames"] = metrics.frames_received if metrics is not None else 0  # the agent's audio the callee got
        if getattr(result, "errors", None):
            problems.extend(f"call {sid} ({plan.kind}): {error}" for error in result.errors[:3])
        paths = record_paths(record_dir, [seen.call_uuid or sid])
        note = answer_note(paths[0]) if paths else None
        if note is None:
            problems.append(f"call {sid} ({plan.kind}): no answer verdict in its record")
            row["verdict"] = None
        else:
            row.update(verdict=note["verdict"], verdict_ms=note["verdict_ms"], reason=note["reason"],
                       action=note["action"], beep_at_ms=note.get("beep_at_ms"), true_beep_at_ms=seen.beep_at_ms,
                       transcript_events=note.get("transcript_events"))
            if note.get("carrier_amd"):
                row["carrier_amd_in_verdict"] = note["carrier_amd"]  # came before the verdict: weighed in it
            pairs.append((plan.kind, note["verdict"]))
            verdict_ms.append(note["verdict_ms"])
        if seen.carrier_amd is not None:
            row.update(carrier_amd=seen.carrier_amd.answered_by, carrier_amd_ms=seen.carrier_amd.at_ms,
                       carrier_amd_right=seen.carrier_amd.right, carrier_amd_status=seen.amd_status)
        if seen.carrier_amd_beep is not None:  # Vonage's machine + beep_start after its machine
            row.update(carrier_amd_beep=seen.carrier_amd_beep.answered_by, carrier_amd_beep_ms=seen.carrier_amd_beep.at_ms)
        put_through = seen.screened is not None and seen.screened.put_through_at_ms is not None
        if seen.screened is not None:
            row["put_through_ms"] = seen.screened.put_through_at_ms
        navigated = seen.ivr is not None and seen.ivr.navigated
        if seen.ivr is not None:
            row.update(ivr_keys_heard=seen.ivr.keys, ivr_navigated=navigated, ivr_connected_ms=seen.ivr.connected_at_ms,
                       ivr_keys_by=("in_band" if seen.ivr.in_band else "rest") if seen.ivr.key_at_ms is not None else None)
        row["action_worked"] = action_worked(plan.kind, row.get("action"), closed_by, row["agent_frames"], put_through,
                                             navigated)
        wait = first_word_wait_ms(seen) if plan.kind == "human" else None
        if wait is not None:
            row["first_word_wait_ms"] = wait
            first_word_waits.append(wait)
        if plan.kind == "human" and closed_by == "rest_hangup":
            humans_hung_up += 1
            problems.append(f"call {sid}: a person was hung up on (verdict {row.get('verdict')})")
        if statuses[-1:] != ["completed"]:
            problems.append(f"call {sid} ({plan.kind}): its last status callback was {statuses[-1:] or 'none'}")
        rows.append(row)
    if callbacks_accepted != callbacks_sent:
        problems.append(f"{callbacks_sent - callbacks_accepted} of {callbacks_sent} call status callbacks were refused")
    for name in carriers:
        missing = sorted(set(kinds[:len(KINDS)]) - {seen.plan.kind for seen in mine if seen.placed.carrier == name})
        if missing:
            problems.append(f"no {name + ' ' if several else ''}call reached a callee of kind {', '.join(missing)}")
    answered_paths = record_paths(record_dir, [r.get("call_uuid", r["call_sid"]) for r in rows if "closed_by" in r])
    identical, replay_problems = await asyncio.to_thread(replay_records, answered_paths)
    problems.extend(replay_problems)
    problems = run_problems + problems
    report = {"outbound": True, "calls": calls * len(carriers), "carrier": ",".join(carriers)}
    report.update(score(pairs))
    report["verdict_ms"] = {"p50": percentile_or_none(verdict_ms, 50), "p95": percentile_or_none(verdict_ms, 95)}
    report["answer_actions"] = score_actions(rows)
    report["carrier_amd"] = {"machine_detection": machine_detection or None, **score_carrier_amd(rows)}
    if machine_detection and report["carrier_amd"]["accepted"] != report["carrier_amd"]["sent"]:
        problems.append(f"{report['carrier_amd']['sent'] - report['carrier_amd']['accepted']} AMD callbacks were refused")
    ivr_rows = [row for row in rows if row["callee"] == "ivr" and "closed_by" in row]
    report["ivr_navigated"] = sum(1 for row in ivr_rows if row.get("ivr_navigated"))
    report["ivr_navigation"] = {
        "on_ivr": on_ivr or None, "n": len(ivr_rows),
        "keys_sent": sum(1 for row in ivr_rows if row.get("action") == "dtmf"),
        "navigated": report["ivr_navigated"],
        "by": {means: sum(1 for row in ivr_rows if row.get("ivr_navigated") and row.get("ivr_keys_by") == means)
               for means in ("in_band", "rest")}}
    report["human_first_word_ms"] = {"p50": percentile_or_none(first_word_waits, 50),
                                     "p95": percentile_or_none(first_word_waits, 95), "n": len(first_word_waits)}
    report.update(humans_hung_up=humans_hung_up, status_callbacks_sent=callbacks_sent,
                  status_callbacks_accepted=callbacks_accepted, records_replayed_identical=identical,
                  wall_seconds=round(wall_s, 2) if placed else None, calls_detail=rows,
                  verdict_classes=list(VERDICTS), command=shlex.join(sys.argv), records_dir=str(record_dir))
    report["problems"] = problems
    report["ok"] = not problems
    return report


DEMO_VOICEMAIL_MESSAGE = ("Hi {first_name}, this is Maria from Acme Dental about {reason}. "
                          "Please call us back. Thank you.")


def agent_with_outbound(agent: str, workdir: Path, on_ivr: str = "", on_voicemail: str = "") -> str:
    """A copy of ``agent`` (its directory; "": the shipped default) under ``workdir`` whose ``[outbound] on_ivr`` and
    ``on_voicemail`` are these ("": left out; ``dtmf`` with ``ivr_digits`` the simulated menus' key, ``message``
    with DEMO_VOICEMAIL_MESSAGE). ValueError: the agent has an [outbound] table of its own (the demo does not merge
    one into it)."""
    import shutil
    import tomllib

    from voicecore.agent.load import default_agent_dir

    source = Path(agent) if agent else default_agent_dir()
    copy = workdir / "agent-outbound"
    shutil.copytree(source, copy, dirs_exist_ok=True)
    toml = (copy / "agent.toml").read_text()
    if "outbound" in tomllib.loads(toml):
        raise ValueError(f"{source}/agent.toml has an [outbound] table: set on_ivr / on_voicemail there instead")
    extra = "\n[outbound]\n"
    if on_ivr:
        extra += f'on_ivr = "{on_ivr}"\n'
    if on_ivr == "dtmf":
        extra += f'ivr_digits = "{SIM_IVR_DIGITS}"\n'
    if on_voicemail:
        extra += f'on_voicemail = "{on_voicemail}"\n'
    if on_voicemail == "message":
        extra += f'voicemail_message = "{DEMO_VOICEMAIL_MESSAGE}"\n'
    (copy / "agent.toml").write_text(toml + extra)
    return str(copy)


def run_outbound_demo(calls: int, as_json: bool, config_path: str | None, keep_logs: bool = False,
                      record_dir: str | None = None, machine_detection: str = "", on_ivr: str = "",
                      on_voicemail: str = "", carrier: str = "twilio") -> int:
    if calls < 1:
        print("voicecore demo: --calls must be at least 1", file=sys.stderr)
        return 2
    if carrier not in dial.CARRIERS:
        print(f"voicecore demo: --outbound places calls with {', '.join(dial.CARRIERS)}, not {carrier}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="voicecore-outbound-") as tmp:
        workdir = Path(tmp)
        records = Path(record_dir).expanduser().resolve() if record_dir else workdir / "records"
        try:
            records.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            print(f"voicecore demo: cannot create the record directory {records}: {exc}", file=sys.stderr)
            return 2
        return run_and_report(lambda log_file: _outbound_demo(calls, config_path, workdir, log_file, records,
                                                              carrier=carrier, machine_detection=machine_detection,
                                                              on_ivr=on_ivr, on_voicemail=on_voicemail),
                              workdir / "stack.log", as_json, keep_logs, format_report)


def format_report(report: dict) -> str:
    lines = [f"voicecore demo --outbound: {report['calls']} call(s), accuracy {report['answer_accuracy']}, "
             f"verdict p50 {report['verdict_ms']['p50']} ms p95 {report['verdict_ms']['p95']} ms",
             f"  a person's wait from their last word to the agent's first: p50 {report['human_first_word_ms']['p50']} ms "
             f"p95 {report['human_first_word_ms']['p95']} ms (n {report['human_first_word_ms']['n']})"]
    for label, row in report["answer_verdicts"].items():
        acted = report.get("answer_actions", {}).get(label)
        did = f"  actions {acted['actions']} worked {acted['worked']}/{acted['n']}" if acted else ""
        lines.append(f"  {label:10s} precision {row['precision']}  recall {row['recall']}  n {row['n']}{did}")
    if report.get("ivr_navigation", {}).get("keys_sent"):
        nav = report["ivr_navigation"]
        lines.append(f"  IVR menus navigated by the agent's keys: {nav['navigated']} of {nav['n']} "
                     f"(keys sent on {nav['keys_sent']}; heard in-band {nav['by']['in_band']}, by REST {nav['by']['rest']})")
    for row in report["calls_detail"]:
        lines.append(f"  {row['call_sid']}  {row['callee']:10s} -> {row.get('verdict', '-')!s:10s} "
                     f"{row.get('verdict_ms', '')!s:>6} ms  {row.get('action', '')}  {' '.join(row['statuses'])}")
    lines.append("ok" if report["ok"] else "problems:\n  " + "\n  ".join(report["problems"]))
    return "\n".join(lines)
