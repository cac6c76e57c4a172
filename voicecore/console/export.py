"""The calls list as a file: CSV (one row per call, for a spreadsheet) or JSON (the list's own rows).

Owns the export's columns and their text. Times are ISO 8601 in UTC (a spreadsheet in any zone reads them the
same); durations and latencies in milliseconds. A cell that a spreadsheet would take for a formula (starting
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is prefixed with ``'``: an agent's name or a call id
is data, never a formula run on the operator's machine.
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Iterable
from typing import Any

import orjson

from voicecore.store.figures import outcome_words

MAX_EXPORT_ROWS = 100_000
CSV_COLUMNS = ("call_sid", "started_at", "ended_at", "duration_ms", "direction", "carrier", "agent", "control", "turns",
               "latency_p50_ms", "latency_max_ms", "bargeins", "error_count", "rejections", "outcome", "outcome_text",
               "complete")
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _iso(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s, datetime.timezone.utc).isoformat(timespec="milliseconds")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def export_row(call: dict[str, Any]) -> dict[str, Any]:
    """A list row (CallStore.calls) with the export's added keys: ``outcome_text``, ISO times."""
    return {**call, "outcome_text": outcome_words(call["outcome"])}


def to_csv(calls: Iterable[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180
    writer.writerow(CSV_COLUMNS)
    for call in calls:
        row = export_row(call)
        row["started_at"], row["ended_at"] = _iso(call["started_at"]), _iso(call["ended_at"])
        writer.writerow([_cell(row.get(column)) for column in CSV_COLUMNS])
    return out.getvalue().encode("utf-8")


def to_json(calls: Iterable[dict[str, Any]]) -> bytes:
    return orjson.dumps({"calls": [{k: v for k, v in export_row(call).items() if k not in ("id", "cursor")} for call in calls]})


def filename(kind: str, now_s: float) -> str:
    stamp = datetime.datetime.fromtimestamp(now_s, datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"calls-{stamp}.{kind}"
