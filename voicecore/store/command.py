"""`voicecore calls`: the call store's calls as a table, or one call with its turns and timings.

Owns the command's work (voicecore/cli.py parses its arguments): reading ``--since``, the store it names,
and the text it prints. The formatting functions are pure; ``run_calls`` is the shell.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from voicecore.config import load_config
from voicecore.store.db import SQLITE_PREFIX, CallStore, StoreError, database_url_for
from voicecore.store.figures import heard_latency, tool_status

NO_STORE = ("voicecore calls: no call store configured: set VOICECORE_RECORD_DIR (the store is filled from its call "
            "records, in <record_dir>/calls.db) or VOICECORE_DATABASE_URL")


def since_epoch(text: str, now_s: float) -> float:
    """``--since``: seconds ago (``3600``) or an ISO 8601 time (``2026-11-25T09:00``, local unless it says its
    zone) -> seconds since the epoch."""
    try:
        return now_s - float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since: expected seconds ago or an ISO 8601 time, got {text!r}") from None
    return moment.timestamp()  # a naive time is local time


def _clock(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s).astimezone().isoformat(timespec="seconds")


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value / 1000:.2f}"


def calls_table(calls: list[dict[str, Any]]) -> str:
    """One line per call, newest first (as given)."""
    if not calls:
        return "no calls stored"
    header = ("started", "call_sid", "seconds", "turns", "outcome", "agent")
    rows = [header] + [(_clock(c["started_at"]), c["call_sid"], f"{c['duration_ms'] / 1000:.1f}", str(c["turns"]),
                        c["outcome"] + ("" if c["complete"] else " (incomplete)"), c["agent"] or c["control"]) for c in calls]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def call_text(call: dict[str, Any]) -> str:
    """One call: what it was, its turns with their timings (seconds from the call's start), what was said,
    tools, verdicts and model errors."""
    lines = [f"call {call['call_sid']}  {_clock(call['started_at'])}  {call['duration_ms'] / 1000:.1f} s  "
             f"{call['outcome']}{'' if call['complete'] else ' (incomplete record)'}",
             f"control {call['control']}" + (f"  agent {call['agent']}" if call["agent"] else "") + f"  records {', '.join(call['sources'])}"]
    lines.append(f"turns ({len(call['turns'])}), seconds from the call's start; wait: speech end to first audio; "
                 "played: the answer's first frame played to the caller; waited: the caller stopped speaking to "
                 "hearing the answer (voicecore/store/figures.py); heard: the answer's audio the caller heard")
    lines.append(f"  {'#':>3}  {'speech':<13}  {'asked':>6}  {'audio':>6}  {'played':>6}  {'wait ms':>7}  {'waited ms':>9}  "
                 f"{'barge-in':>8}  {'heard ms':>8}")
    for turn in call["turns"]:
        latency = "-" if turn["latency_ms"] is None else str(turn["latency_ms"])
        waited_by = heard_latency(turn)
        waited = "-" if waited_by is None else str(waited_by["total_ms"])
        heard_ms = turn["truncated_at_ms"] if turn["truncated_at_ms"] is not None else turn.get("played_ms")
        heard = "-" if heard_ms is None else str(heard_ms)
        speech = f"{_ms(turn['speech_started_ms'])}-{_ms(turn['speech_stopped_ms'])}"
        lines.append(f"  {turn['index'] + 1:>3}  {speech:<13}  {_ms(turn['response_requested_ms']):>6}  "
                     f"{_ms(turn['first_audio_ms']):>6}  {_ms(turn.get('first_played_ms')):>6}  {latency:>7}  {waited:>9}  "
                     f"{_ms(turn['barged_in_ms']):>8}  {heard:>8}")
        if turn["transcript"]:
            lines.append(f"       caller: {turn['transcript']}")
        if turn["agent_text"]:
            lines.append(f"       agent:  {turn['agent_text']}")
    if call["transcript"]:
        lines.append("transcript:")
        lines += [f"  {_ms(line['at_ms']):>7}  {line['speaker']}: {line['text']}" for line in call["transcript"]]
    for tool in call["tool_calls"]:
        result = tool_status(tool, call["outcome"])["words"]  # ran, declined, ended the call, ...: not a bare "not run"
        lines.append(f"tool {tool['name']}({tool['arguments']}) at {_ms(tool['called_ms'])}: {result} {tool['output']}".rstrip())
    for verdict in call["verdicts"]:
        lines.append(f"verdict on response {verdict['tag']} at {_ms(verdict['at_ms'])}: "
                     f"{'rejected' if verdict['rejected'] else 'approved'} {verdict['reason']}".rstrip())
    for error in call["errors"]:
        lines.append(f"model error at {_ms(error['at_ms'])}: {error['code']} {error['message']}".rstrip())
    return "\n".join(lines)


def run_calls(environ: Mapping[str, str], config_path: str | None, since: str | None, limit: int, as_json: bool,
              call_sid: str | None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    url = database_url_for(load_config(environ, config_path))
    if not url:
        print(NO_STORE, file=err)
        return 2
    try:
        since_s = None if since is None else since_epoch(since, time.time())
    except ValueError as exc:
        print(f"voicecore calls: {exc}", file=err)
        return 2
    if url.startswith(SQLITE_PREFIX) and not os.path.exists("/" + url[len(SQLITE_PREFIX):].lstrip("/")):
        calls: list[dict[str, Any]] = []  # nothing stored yet: say so without creating the file
        call = None
    else:
        try:
            store = CallStore.open(url)
        except StoreError as exc:
            print(f"voicecore calls: {exc}", file=err)
            return 2
        except Exception as exc:  # the database's own errors (unreachable server, a damaged file): report, not trace
            print(f"voicecore calls: cannot open the call store: {type(exc).__name__}: {exc}", file=err)
            return 1
        with store:
            calls = [] if call_sid else store.calls(since_s, limit)
            call = store.call(call_sid) if call_sid else None
    if call_sid:
        if call is None:
            print(f"voicecore calls: no call {call_sid} in the call store", file=err)
            return 1
        print(json.dumps(call, ensure_ascii=False) if as_json else call_text(call), file=out)
        return 0
    calls = [{k: v for k, v in c.items() if k != "cursor"} for c in calls]  # the console's page marker: not for here
    print(json.dumps({"calls": calls}, ensure_ascii=False) if as_json else calls_table(calls), file=out)
    return 0
