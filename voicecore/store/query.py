"""Which calls a list asks for: its filters as SQL, its search words, and the place where a page ends.

Owns the filter vocabulary the console's list, its export and the store share (``CallFilter``), its SQL for
each dialect (a WHERE clause with ``?`` parameters, under schema.py's no-literal-``?``-or-``%`` rule), the
search (a call id's beginning, or words of its transcript: SQLite FTS5, PostgreSQL ``tsvector``), and keyset
paging: a page ends at a call (started_at, id), and the next page is the calls after it in the list's order
(newest first), so paging stays fast and stable while calls are added.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

MAX_SEARCH_WORDS = 12
_WORD = re.compile(r"\w+", re.UNICODE)
_CALL_ID = re.compile(r"[A-Za-z0-9._:-]{2,100}")


class QueryError(ValueError):
    """A filter or a page marker that cannot be used: its message says which and why."""


@dataclasses.dataclass(frozen=True, slots=True)
class CallFilter:
    since_s: float | None = None  # started at or after (seconds since the epoch)
    until_s: float | None = None  # started before
    outcome: str | None = None  # exact, or "hangup" for every hangup:<reason>
    agent: str | None = None
    carrier: str | None = None
    direction: str | None = None
    search: str = ""  # a call id's beginning, or words the call's transcript holds (all of them, as word prefixes)
    min_latency_ms: int | None = None  # the call's slowest turn took at least this long (heard latency)
    errors: bool = False  # only calls with a model error or a failed tool
    bargeins: bool = False  # only calls where the caller talked over the agent


def search_words(text: str) -> list[str]:
    """The words a search looks for: letters and digits, lower case, at most MAX_SEARCH_WORDS."""
    return [word.lower() for word in _WORD.findall(text)][:MAX_SEARCH_WORDS]


def _text_match(dialect: str, words: list[str]) -> tuple[str, str]:
    """The SQL that finds calls whose words hold every one of ``words`` (as a prefix), and its parameter."""
    if dialect == "sqlite":
        return "c.id IN (SELECT rowid FROM call_text WHERE call_text MATCH ?)", " ".join(f'"{w}"*' for w in words)
    return "c.id IN (SELECT call_id FROM call_text WHERE words @@ to_tsquery('simple', ?))", " & ".join(f"{w}:*" for w in words)


def where(filter_: CallFilter, dialect: str) -> tuple[str, list[Any]]:
    """``filter_`` as "WHERE ..." (or "") over ``calls c``, and its parameters."""
    conditions: list[str] = []
    params: list[Any] = []
    if filter_.since_s is not None:
        conditions.append("c.started_at >= ?")
        params.append(filter_.since_s)
    if filter_.until_s is not None:
        conditions.append("c.started_at < ?")
        params.append(filter_.until_s)
    if filter_.outcome:
        if filter_.outcome == "hangup":
            conditions.append("c.outcome LIKE 'hangup:' || ?")  # || ? : the schema's no-literal-% rule
            params.append("%")
        else:
            conditions.append("c.outcome = ?")
            params.append(filter_.outcome)
    for column in ("agent", "carrier", "direction"):
        value = getattr(filter_, column)
        if value is not None and value != "":
            conditions.append(f"c.{column} = ?")
            params.append(value)
    if filter_.min_latency_ms is not None:
        conditions.append("c.latency_max_ms >= ?")
        params.append(int(filter_.min_latency_ms))
    if filter_.errors:
        conditions.append("c.error_count > 0")
    if filter_.bargeins:
        conditions.append("c.bargeins > 0")
    search = filter_.search.strip()
    if search:
        alternatives = []
        if _CALL_ID.fullmatch(search):  # a call id, or its beginning, in any case
            escaped = search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            alternatives.append("lower(c.call_sid) LIKE ? ESCAPE '\\'")
            params.append(escaped + "%")
        words = search_words(search)
        if words:
            sql, match = _text_match(dialect, words)
            alternatives.append(sql)
            params.append(match)
        conditions.append(f"({' OR '.join(alternatives)})" if alternatives else "1 = 0")
    return (f"WHERE {' AND '.join(conditions)} " if conditions else ""), params


def page_marker(row: dict[str, Any]) -> str:
    """Where a page ends: the last call's start (exact: repr of the float) and id."""
    return f"{float(row['started_at'])!r}_{int(row['id'])}"


def after_marker(marker: str) -> tuple[str, list[Any]]:
    """The condition for the calls after ``marker`` in the list's order (newest first), and its parameters."""
    started, _, call_id = marker.partition("_")
    try:
        started_at, row_id = float(started), int(call_id)
    except ValueError:
        raise QueryError(f"cursor: not a page marker this console gave: {marker[:60]!r}") from None
    return "(c.started_at < ? OR (c.started_at = ? AND c.id < ?))", [started_at, started_at, row_id]
