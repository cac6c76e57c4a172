"""A campaign as asked: the options `voicecore campaign run` takes (its flags, or the JSON keys and query parameters
of the console's ``POST /api/campaigns``) turned into the campaign's settings, and its file and do-not-call list
checked the way the command checks them.

Owns: building CampaignSettings from the options (every bad option a ValueError saying which), reading the API's
body (a CSV, or JSON with ``csv`` or ``rows``), and ``check_campaign``, which reads the file and the do-not-call
list and lists every problem of both. Sans-I/O: no store, no carrier, no clock (the caller gives the time).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from voicecore.carriers import registry
from voicecore.outbound.campaign import CampaignSettings
from voicecore.outbound.campaign_file import (Callee, CampaignFileError, CampaignProblem, normalise_number,
                                              parse_campaign, parse_do_not_call)
from voicecore.outbound.campaign_rules import DEFAULT_BACKOFF_S, CallingWindow, RetryPolicy, RulesError

CARRIERS = registry.PLACING  # the carriers voicecore/outbound/dial.py places calls with
MACHINE_DETECTION = ("", "Enable", "DetectMessageEnd")
MAX_NAME_CHARS = 100
MAX_ROWS = 100_000


class RequestError(ValueError):
    """An option or a body the campaign cannot be started with (the message says which)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CampaignRequest:
    """What ``POST /api/campaigns`` asked: the campaign file's text, the do-not-call lines, and the options."""

    name: str
    text: str
    settings: CampaignSettings
    carrier: str = "twilio"
    agent: str = ""  # "" : the node's agent
    region: str | None = None
    do_not_call: str = ""  # a do-not-call file's text (one number a line)
    machine_detection: str = ""
    call_timeout_s: float = 7200.0

    @property
    def file(self) -> str:
        """The name the file's problems go by."""
        return f"{self.name}.csv"

    def run_options(self) -> dict[str, Any]:
        return {"carrier": self.carrier, "machine_detection": self.machine_detection,
                "call_timeout_s": self.call_timeout_s}


def build_settings(*, days: str = "mon-fri", window_start: str = "09:00", window_end: str = "20:00",
                   max_attempts: int = 3, retry_after: Iterable[str] = (), concurrency: int = 10,
                   from_numbers: Sequence[str] = (), per_from: int = 0) -> CampaignSettings:
    """The settings of ``voicecore campaign run``'s flags (``retry_after``: OUTCOME=SECONDS items); ValueError (a
    RulesError for the rules' own) naming the option that is wrong."""
    window = CallingWindow.parse(days, window_start, window_end)
    backoff = dict(DEFAULT_BACKOFF_S)
    for pair in retry_after:
        outcome, sep, seconds = pair.partition("=")
        if not sep or outcome not in backoff:
            raise RulesError(f"--retry-after {pair!r}: expected OUTCOME=SECONDS with OUTCOME one of {', '.join(backoff)}")
        try:
            backoff[outcome] = float(seconds)
        except ValueError:
            raise RulesError(f"--retry-after {pair!r}: SECONDS is not a number") from None
    if not from_numbers:
        raise RulesError("from: give at least one caller number")
    numbers = []
    for number in from_numbers:
        try:
            numbers.append(normalise_number(number))
        except ValueError as exc:
            raise RulesError(f"from {number!r}: {exc}") from None
    return CampaignSettings(window=window, retry=RetryPolicy(max_attempts=max_attempts, backoff_s=backoff),
                            concurrency=concurrency, from_numbers=tuple(numbers), per_from_limit=per_from)


def check_campaign(text: str, file: str, required_fields: Iterable[str], window: CallingWindow,
                   region: str | None = None, do_not_call: str = "",
                   do_not_call_file: str = "do-not-call.txt") -> tuple[list[Callee], set[str], list[CampaignProblem]]:
    """The callees of a campaign file's ``text`` and the numbers of a do-not-call list's, with every problem of
    both (any problem: no callee, nothing is dialled). As `voicecore campaign run` checks them."""
    problems: list[CampaignProblem] = []
    callees: list[Callee] = []
    listed: set[str] = set()
    try:
        callees = parse_campaign(text, file=file, required_fields=required_fields, window=window, default_region=region)
    except CampaignFileError as exc:
        problems += exc.problems
    if do_not_call:
        try:
            listed = parse_do_not_call(do_not_call, file=do_not_call_file, default_region=region)
        except CampaignFileError as exc:
            problems += exc.problems
    return ([] if problems else callees), listed, problems


# --- the API's body ----------------------------------------------------------------------------------------------


def default_name(now_s: float) -> str:
    return "campaign-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime(now_s))


def read_request(body: bytes, content_type: str, query: Mapping[str, Sequence[str]], now_s: float) -> CampaignRequest:
    """``POST /api/campaigns``: a JSON body (``csv``: the file's text, or ``rows``: objects of strings with a
    ``number``; the options as keys), or the CSV itself (any other content type; the options in the query).
    RequestError naming what is wrong."""
    if content_type.split(";", 1)[0].strip().lower() == "application/json":
        try:
            data = orjson.loads(body or b"null")
        except orjson.JSONDecodeError:
            raise RequestError("the body is not JSON") from None
        if not isinstance(data, dict):
            raise RequestError('expected a JSON object: {"rows": [{"number": "+E164", ...}], "from": ["+E164"], ...}')
        if ("csv" in data) == ("rows" in data):
            raise RequestError("give the campaign as csv (the file's text) or rows (objects), one of the two")
        text = _csv_of(data) if "rows" in data else _text(data, "csv")
        options: dict[str, Any] = {k: v for k, v in data.items() if k not in ("csv", "rows")}
    else:
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise RequestError("the campaign file is not UTF-8 text") from None
        options = {}
        for key, values in query.items():
            options[key] = list(values) if key in ("from", "retry_after", "do_not_call") else values[-1]
    known = {"name", "agent", "from", "carrier", "concurrency", "per_from", "days", "window_start", "window_end",
             "max_attempts", "retry_after", "region", "do_not_call", "machine_detection", "call_timeout"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise RequestError(f"unknown option(s) {', '.join(unknown)[:200]}: the options are {', '.join(sorted(known))}")
    name = _text(options, "name", default_name(now_s)).strip()
    if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise RequestError(f"name: 1-{MAX_NAME_CHARS} printable characters")
    carrier = _text(options, "carrier", "twilio")
    if carrier not in CARRIERS:
        raise RequestError(f"carrier: one of {', '.join(CARRIERS)}")
    machine_detection = _text(options, "machine_detection", "")
    if machine_detection not in MACHINE_DETECTION:
        raise RequestError("machine_detection: Enable or DetectMessageEnd (or leave it out)")
    retry_after = options.get("retry_after", [])
    if isinstance(retry_after, dict):  # JSON: {"busy": 600}
        retry_after = [f"{k}={v}" for k, v in retry_after.items()]
    from_numbers = options.get("from", [])
    if isinstance(from_numbers, str):
        from_numbers = [from_numbers]
    if not isinstance(from_numbers, list) or not all(isinstance(n, str) for n in from_numbers):
        raise RequestError('from: a caller number, or a list of them ("+E164")')
    if not isinstance(retry_after, list) or not all(isinstance(r, str) for r in retry_after):
        raise RequestError('retry_after: {"busy": SECONDS, ...} (or OUTCOME=SECONDS items)')
    do_not_call = options.get("do_not_call", [])
    if isinstance(do_not_call, str):
        do_not_call = [do_not_call]
    if not isinstance(do_not_call, list) or not all(isinstance(n, str) for n in do_not_call):
        raise RequestError("do_not_call: a list of numbers")
    region = _text(options, "region", "") or None
    try:
        settings = build_settings(days=_text(options, "days", "mon-fri"),
                                  window_start=_text(options, "window_start", "09:00"),
                                  window_end=_text(options, "window_end", "20:00"),
                                  max_attempts=_whole(options, "max_attempts", 3), retry_after=retry_after,
                                  concurrency=_whole(options, "concurrency", 10), from_numbers=from_numbers,
                                  per_from=_whole(options, "per_from", 0))
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    call_timeout = _number(options, "call_timeout", 7200.0)
    if not 10 <= call_timeout <= 86_400:
        raise RequestError("call_timeout: 10-86400 seconds")
    return CampaignRequest(name=name, text=text, settings=settings, carrier=carrier, agent=_text(options, "agent", ""),
                           region=region, do_not_call="\n".join(do_not_call), machine_detection=machine_detection,
                           call_timeout_s=call_timeout)


def _text(options: Mapping[str, Any], key: str, default: str = "") -> str:
    value = options.get(key, default)
    if not isinstance(value, str):
        raise RequestError(f"{key}: expected a string")
    return value


def _number(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise RequestError(f"{key}: expected a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise RequestError(f"{key}: expected a number")
    return float(value)


def _whole(options: Mapping[str, Any], key: str, default: int) -> int:
    value = _number(options, key, default)
    if value != int(value):
        raise RequestError(f"{key}: expected a whole number")
    return int(value)


def _csv_of(data: Mapping[str, Any]) -> str:
    """The campaign file of JSON ``rows``: a header of every key in the order they first appear."""
    rows = data["rows"]
    if not isinstance(rows, list):
        raise RequestError('rows: a list of objects such as {"number": "+46701234567", "first_name": "Anna"}')
    if len(rows) > MAX_ROWS:
        raise RequestError(f"rows: at most {MAX_ROWS}")
    header: dict[str, None] = {}
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not all(isinstance(v, str) for v in row.values()):
            raise RequestError(f"rows[{index}]: expected an object of strings")
        header.update(dict.fromkeys(row))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([row.get(k, "") for k in header])
    return out.getvalue()
