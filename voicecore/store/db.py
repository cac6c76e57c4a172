"""CallStore: the call store's database (SQLite or PostgreSQL), opened from a URL.

Owns the connection, the migrations' running, and reading and writing CallSummary rows (the SQL is
schema.py's; a summary is summary.py's). One connection per store: the recorder worker is the one writer,
`voicecore calls` a reader. SQLite runs in WAL mode (a reader never blocks the writer) with foreign keys
on; its file is created 0600 (it holds what callers said).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any

from voicecore.errors import MisuseError
from voicecore.store import schema
from voicecore.store.figures import call_figures
from voicecore.store.query import CallFilter, after_marker, page_marker, where
from voicecore.store.summary import CallSummary

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")
STORE_FILE = "calls.db"
MIGRATION_LOCK = 0x766F69636563  # PostgreSQL advisory lock key: two processes opening a new store migrate one at a time
SECONDS_PER_DAY = 86400


class StoreError(MisuseError, ValueError):
    """The store URL cannot be used (wrong scheme, a relative SQLite path, psycopg missing)."""


def is_unavailable(exc: BaseException) -> bool:
    """Whether a store error says the database cannot be reached now (connection refused or lost, the server
    shutting down or starting up, SQLite's file locked or unopenable), rather than that a query is wrong: the
    reader answers "try again later" (HTTP 503) instead of an internal error."""
    if isinstance(exc, sqlite3.OperationalError):
        return True
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


def database_url_for(config: Any) -> str:
    """The store a configuration names: ``database_url``, else ``calls.db`` in the record directory (the
    store is filled from records), else "" (no store)."""
    if config.database_url:
        return str(config.database_url)
    if config.record_dir:
        return SQLITE_PREFIX + os.path.join(os.path.abspath(config.record_dir), STORE_FILE).lstrip("/")
    return ""


class _Backend(abc.ABC):
    """What differs between SQLite and PostgreSQL: connecting, parameters, transactions."""

    dialect = ""

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    @abc.abstractmethod
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[None]: ...

    def migration_lock(self) -> None:
        """Called first in the migration's transaction."""

    @abc.abstractmethod
    def close(self) -> None: ...


class _SQLite(_Backend):
    dialect = "sqlite"

    def __init__(self, path: str) -> None:
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # before SQLite creates it with the umask's mode
        # isolation_level None: we say BEGIN and COMMIT ourselves; check_same_thread off: the recorder may open
        # the store on one thread and write from another (never two at once)
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self.connection.execute("PRAGMA journal_mode=WAL")
        # WAL's usual pairing: a commit is not synced to disk, a checkpoint is; a power cut may lose the last
        # commits (the record files stay, and are offered again), never corrupt the store
        self.connection.execute("PRAGMA synchronous=NORMAL")
        self.connection.execute("PRAGMA foreign_keys=ON")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.connection.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self.connection.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.connection.execute("BEGIN IMMEDIATE")  # take the write lock now: no upgrade deadlock with another writer
        try:
            yield
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    def close(self) -> None:
        self.connection.close()


class _Postgres(_Backend):
    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise StoreError("a postgresql:// store needs psycopg: pip install 'voicecore[postgres]'") from None
        self.connection = psycopg.connect(url, autocommit=True)

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")  # schema.py promises no literal ? or %

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.connection.execute(self._sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self.connection.cursor() as cursor:
                cursor.executemany(self._sql(sql), rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self.connection.transaction():
            yield

    def migration_lock(self) -> None:
        self.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def close(self) -> None:
        self.connection.close()


def _backend_for(url: str) -> _Backend:
    if url.startswith(SQLITE_PREFIX):
        path = "/" + url[len(SQLITE_PREFIX):].lstrip("/")
        if url[len(SQLITE_PREFIX):] == "" or not os.path.isdir(os.path.dirname(path)):
            raise StoreError(f"database_url: {url!r}: the directory of the SQLite file must exist")
        return _SQLite(path)
    if url.startswith(POSTGRES_PREFIXES):
        return _Postgres(url)
    raise StoreError(f"database_url: expected sqlite:///ABSOLUTE/PATH or postgresql://..., got {url!r}")


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _rows(cursor: Any) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _started_agent(data: str | None) -> str:
    """The agent a call.started event's data names ("" for none, or data that is not JSON)."""
    try:
        value = json.loads(data) if data else None
    except ValueError:
        return ""
    return str(value.get("agent") or "") if isinstance(value, dict) else ""


CALL_COLUMNS = ("id, source, call_sid, control, flow, agent, started_at, duration_ms, outcome, complete, carrier, direction, "
                "latency_p50_ms, latency_max_ms, bargeins, error_count, rejections")
TRANSCRIPT_KEYS = ("speaker", "text", "at_ms", "spoken_ms", "ref", "prompt")
TOOL_KEYS = ("name", "arguments", "called_ms", "output", "result_ms", "asked_ms", "answered_ms", "answer", "answered_by",
             "started_ms", "reply", "reply_ms", "action")
VERDICT_KEYS = ("tag", "reason", "citations", "at_ms", "frames", "response_id")


class CallStore:
    """The call store: ``CallStore.open(url)``, then ``ingest``, ``calls``, ``call``, ``purge``, ``close``."""

    def __init__(self, backend: _Backend) -> None:
        self.backend = backend

    @classmethod
    def open(cls, url: str) -> CallStore:
        """Connect and bring the schema up to date (creating it in a new database)."""
        store = cls(_backend_for(url))
        try:
            store.migrate()
        except BaseException:
            store.close()
            raise
        return store

    @property
    def dialect(self) -> str:
        return self.backend.dialect

    def migrate(self) -> int:
        """Run the migrations this database lacks, each in its own transaction; the schema's version."""
        db = self.backend
        with db.transaction():
            db.migration_lock()
            db.execute(schema.SCHEMA_VERSION_TABLE)
            version = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
        while version < schema.LATEST_VERSION:
            with db.transaction():
                db.migration_lock()
                current = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
                if current == version:  # nobody else ran it meanwhile
                    for statement in schema.migration_sql(version + 1, db.dialect):
                        db.execute(statement)
                    db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version + 1, time.time()))
            version = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
        return version

    def schema_version(self) -> int:
        return self.backend.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0

    def ingest(self, summary: CallSummary) -> bool:
        """Store a call, all of it or nothing; False when its record (``summary.source``) was stored before."""
        db = self.backend
        figures = call_figures([dataclasses.asdict(t) for t in summary.turns], [dataclasses.asdict(t) for t in summary.tool_calls],
                               [dataclasses.asdict(v) for v in summary.verdicts], list(summary.errors))
        with db.transaction():
            added = db.execute("INSERT INTO sources (name, ingested_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                               (summary.source, time.time()))
            if added.rowcount != 1:
                return False
            call_id = db.execute(
                "INSERT INTO calls (source, call_sid, control, flow, agent, started_at, duration_ms, outcome, complete, "
                "carrier, direction, latency_p50_ms, latency_max_ms, bargeins, error_count, rejections, answer_verdict, "
                "callee, opted_out, answer_action) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (summary.source, summary.call_sid, summary.control, summary.flow, summary.agent, summary.started_at,
                 summary.duration_ms, summary.outcome, int(summary.complete), summary.carrier, summary.direction,
                 figures["latency_p50_ms"], figures["latency_max_ms"], figures["bargeins"], figures["error_count"],
                 figures["rejections"], summary.answer_verdict, summary.callee, int(summary.opted_out),
                 summary.answer_action)).fetchone()[0]
            if summary.opted_out and summary.callee:
                # The callee asked not to be called again: on the do-not-call list every campaign reads before a dial.
                db.execute("INSERT INTO do_not_call (number, source, added_at) VALUES (?, 'opt-out', ?) "
                           "ON CONFLICT (number) DO NOTHING", (summary.callee, time.time()))
            db.executemany(
                "INSERT INTO turns (call_id, idx, speech_started_ms, speech_stopped_ms, transcript, response_requested_ms, "
                "response_id, first_audio_ms, barged_in_ms, truncated_at_ms, agent_text, first_played_ms, played_ms, "
                "speech_began_ms, speech_ended_ms, first_sent_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(call_id, t.index, t.speech_started_ms, t.speech_stopped_ms, t.transcript, t.response_requested_ms,
                  t.response_id, t.first_audio_ms, t.barged_in_ms, t.truncated_at_ms, t.agent_text, t.first_played_ms,
                  t.played_ms, t.speech_began_ms, t.speech_ended_ms, t.first_sent_ms) for t in summary.turns])
            db.executemany("INSERT INTO transcripts (call_id, idx, speaker, text, at_ms, spoken_ms, ref, prompt) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(call_id, i, t.speaker, t.text, t.at_ms, t.spoken_ms, t.ref, t.prompt)
                            for i, t in enumerate(summary.transcripts)])
            db.executemany(
                "INSERT INTO tool_calls (call_id, idx, tool_call_id, name, arguments, called_ms, ran, ok, output, result_ms, "
                "asked_ms, answered_ms, answer, answered_by, started_ms, reply, reply_ms, action) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(call_id, i, t.call_id, t.name, t.arguments, t.called_ms, int(t.ran), None if t.ok is None else int(t.ok),
                  t.output, t.result_ms, t.asked_ms, t.answered_ms, t.answer, t.answered_by, t.started_ms, t.reply,
                  t.reply_ms, t.action) for i, t in enumerate(summary.tool_calls)])
            db.executemany("INSERT INTO verdicts (call_id, idx, tag, rejected, reason, citations, at_ms, frames, response_id) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           [(call_id, i, v.tag, int(v.rejected), v.reason, v.citations, v.at_ms, v.frames, v.response_id)
                            for i, v in enumerate(summary.verdicts)])
            db.executemany("INSERT INTO errors (call_id, idx, code, message, at_ms) VALUES (?, ?, ?, ?, ?)",
                           [(call_id, i, e.code, e.message, e.at_ms) for i, e in enumerate(summary.errors)])
            db.executemany("INSERT INTO keypresses (call_id, idx, digit, at_ms) VALUES (?, ?, ?, ?)",
                           [(call_id, i, k.digit, k.at_ms) for i, k in enumerate(summary.keypresses)])
            text = "\n".join(t.text for t in summary.transcripts)
            if text:
                db.execute("INSERT INTO call_text (rowid, body) VALUES (?, ?)" if db.dialect == "sqlite"
                           else "INSERT INTO call_text (call_id, body) VALUES (?, ?)", (call_id, text))
        return True

    def add_call_status(self, call_sid: str, status: str, sequence: int, direction: str = "", answered_by: str = "",
                        duration_s: int | None = None, now_s: float | None = None, record_call_sid: str = "") -> bool:
        """A verified call status callback: kept when it is the call's first or its sequence number is higher than
        the one kept (callbacks may arrive out of order). Whether it was kept. ``record_call_sid``: the id the
        call's record goes by when the carrier names it otherwise (Plivo's CallUUID beside its RequestUUID): kept
        from the first callback that names it, whatever its sequence."""
        with self.backend.transaction():
            kept = self.backend.execute(
                "INSERT INTO call_status (call_sid, status, sequence, direction, answered_by, duration_s, updated_at, "
                "record_call_sid) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (call_sid) DO UPDATE SET "
                "status = excluded.status, sequence = excluded.sequence, direction = excluded.direction, "
                "answered_by = CASE WHEN excluded.answered_by != '' THEN excluded.answered_by "
                "ELSE call_status.answered_by END, duration_s = excluded.duration_s, updated_at = excluded.updated_at, "
                "record_call_sid = CASE WHEN call_status.record_call_sid = '' THEN excluded.record_call_sid "
                "ELSE call_status.record_call_sid END "
                "WHERE excluded.sequence > call_status.sequence",
                (call_sid, status, sequence, direction, answered_by, duration_s,
                 time.time() if now_s is None else now_s, record_call_sid)).rowcount == 1
            if not kept and record_call_sid and record_call_sid != call_sid:  # a late callback may still name it
                self.backend.execute("UPDATE call_status SET record_call_sid = ? WHERE call_sid = ? AND "
                                     "record_call_sid = ''", (record_call_sid, call_sid))
            return kept

    def set_answered_by(self, call_sid: str, answered_by: str) -> bool:
        """A placed call's carrier AMD result from a callback of its own (Twilio's asynchronous AMD, no status):
        kept on the call's status row, which its earlier callbacks made. ``call_sid``: the row's id or the id its
        record goes by (Plivo's AMD callback is for the CallUUID, the row is the RequestUUID's). Whether there was
        one to keep it on."""
        with self.backend.transaction():
            return self.backend.execute("UPDATE call_status SET answered_by = ? WHERE call_sid = ? OR "
                                        "record_call_sid = ?", (answered_by, call_sid, call_sid)).rowcount >= 1

    def call_status(self, call_sid: str) -> dict[str, Any] | None:
        """The latest status callback kept for ``call_sid`` (None: none came), with ``record_call_sid``: the id
        its record goes by when the carrier named another ('' otherwise)."""
        rows = _rows(self.backend.execute("SELECT call_sid, status, sequence, direction, answered_by, duration_s, "
                                          "updated_at, record_call_sid FROM call_status WHERE call_sid = ?",
                                          (call_sid,)))
        return rows[0] if rows else None

    def placed_call(self, call_sid: str) -> dict[str, Any] | None:
        """What a campaign needs of a stored call: its answer verdict, whether the callee opted out, its outcome."""
        rows = _rows(self.backend.execute("SELECT answer_verdict, opted_out, outcome, callee FROM calls "
                                          "WHERE call_sid = ? ORDER BY id DESC LIMIT 1", (call_sid,)))
        if not rows:
            return None
        row = rows[0]
        row["opted_out"] = bool(row["opted_out"])
        return row

    def has_source(self, source: str) -> bool:
        """Whether the record file ``source`` was ingested (its call may have been purged since)."""
        return self.backend.execute("SELECT 1 FROM sources WHERE name = ?", (source,)).fetchone() is not None

    def calls(self, since_s: float | None = None, limit: int = 100, until_s: float | None = None,
              outcome: str | None = None, agent: str | None = None, filter: CallFilter | None = None,  # noqa: A002
              after: str | None = None) -> list[dict[str, Any]]:
        """Calls started at or after ``since_s`` and before ``until_s`` (seconds since the epoch; None: no
        bound), with that ``outcome`` (``hangup`` matches every ``hangup:<reason>``) and ``agent`` when
        given, or as ``filter`` says (voicecore/store/query.py: carrier, direction, search, latency, errors),
        newest first, each with its number of turns (``turns``), ``ended_at`` and ``cursor`` (where a page
        ending at it ends: pass it as ``after`` for the next page)."""
        filter_ = filter if filter is not None else CallFilter(since_s=since_s, until_s=until_s, outcome=outcome, agent=agent)
        where_sql, params = where(filter_, self.dialect)
        if after:
            condition, more = after_marker(after)
            where_sql = f"{where_sql}AND {condition} " if where_sql else f"WHERE {condition} "
            params += more
        cursor = self.backend.execute(
            f"SELECT {', '.join('c.' + c for c in CALL_COLUMNS.split(', '))}, "
            "(SELECT COUNT(*) FROM turns t WHERE t.call_id = c.id) AS turns "
            f"FROM calls c {where_sql}ORDER BY c.started_at DESC, c.id DESC LIMIT ?", [*params, int(limit)])
        rows = []
        for row in _rows(cursor):
            marker = page_marker(row)
            rows.append({**self._call_row(row), "cursor": marker})
        return rows

    def count_calls(self, filter: CallFilter) -> int:  # noqa: A002
        """How many calls ``filter`` matches."""
        where_sql, params = where(filter, self.dialect)
        return int(self.backend.execute(f"SELECT COUNT(*) FROM calls c {where_sql}", params).fetchone()[0])

    def agents(self) -> list[str]:
        """The agent names of the stored calls (for the console's filter)."""
        return [row[0] for row in self.backend.execute("SELECT DISTINCT agent FROM calls ORDER BY agent").fetchall()]

    def carriers(self) -> list[str]:
        """The carriers of the stored calls ("" for calls whose carrier is not known)."""
        return [row[0] for row in self.backend.execute("SELECT DISTINCT carrier FROM calls ORDER BY carrier").fetchall()]

    # --- the live observers' events ----------------------------------------------------------------------
    def add_events(self, rows: Sequence[tuple[str, int, float, int, str, str]]) -> None:
        """Store numbered events: (call_sid, seq, at (wall clock s), t_ms, type, data as JSON text); a
        (call_sid, seq) stored before is left as it is."""
        if not rows:
            return
        with self.backend.transaction():
            self.backend.executemany(
                "INSERT INTO events (call_sid, seq, at, t_ms, type, data) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (call_sid, seq) DO NOTHING", rows)

    def last_seq(self, call_sid: str) -> int:
        """The highest event number stored for ``call_sid``; 0 for none."""
        return int(self.backend.execute("SELECT MAX(seq) FROM events WHERE call_sid = ?", (call_sid,)).fetchone()[0] or 0)

    def events(self, call_sid: str, after_seq: int = 0, limit: int = 100_000) -> list[dict[str, Any]]:
        """``call_sid``'s events numbered above ``after_seq``, in order, as observers receive them
        (``data`` is the JSON text as stored)."""
        cursor = self.backend.execute(
            "SELECT call_sid, seq, type, t_ms, at, data FROM events WHERE call_sid = ? AND seq > ? ORDER BY seq LIMIT ?",
            (call_sid, int(after_seq), int(limit)))
        return [{"call_sid": r[0], "seq": int(r[1]), "type": r[2], "t_ms": int(r[3]), "at": float(r[4]), "data": r[5]}
                for r in cursor.fetchall()]

    def live_calls(self, now_s: float | None = None, within_s: float = 6 * 3600) -> list[dict[str, Any]]:
        """Calls whose events began within ``within_s`` and hold no ``call.ended``: in progress (or cut off
        by a stop before they ended), newest first: call_sid, started_at, last_at, events."""
        since = (time.time() if now_s is None else now_s) - within_s
        cursor = self.backend.execute(
            "SELECT call_sid, MIN(at), MAX(at), COUNT(*), "
            "MIN(CASE WHEN type = 'call.started' THEN data ELSE NULL END) FROM events WHERE at >= ? GROUP BY call_sid "
            "HAVING SUM(CASE WHEN type = 'call.ended' THEN 1 ELSE 0 END) = 0 ORDER BY MIN(at) DESC", (since,))
        return [{"call_sid": r[0], "started_at": float(r[1]), "last_at": float(r[2]), "events": int(r[3]),
                 "agent": _started_agent(r[4])} for r in cursor.fetchall()]

    # --- signed stream tokens redeemed in the fleet --------------------------------------------------------
    def claim_stream_token(self, nonce: str, call_sid: str, issuer: str, redeemed_by: str, expires_at_s: float,
                           now_s: float | None = None) -> bool:
        """Record the first use of a signed stream token (its ``nonce``); False when it was used before, here
        or on another node sharing this store (a replayed token)."""
        added = self.backend.execute(
            "INSERT INTO stream_tokens (nonce, call_sid, issuer, redeemed_by, redeemed_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (nonce) DO NOTHING",
            (nonce, call_sid, issuer, redeemed_by, time.time() if now_s is None else now_s, expires_at_s))
        return added.rowcount == 1

    def purge_stream_tokens(self, older_than_s: float) -> int:
        """Delete the claimed tokens that expired before ``older_than_s`` (seconds since the epoch); how many."""
        return self.backend.execute("DELETE FROM stream_tokens WHERE expires_at < ?", (older_than_s,)).rowcount

    # --- media streams that ended normally (the fleet's re-attach step) -------------------------------------
    def mark_stream_ended(self, call_sid: str, node: str, expires_at_s: float, now_s: float | None = None) -> None:
        """Note that ``call_sid``'s stream ended normally on ``node``: a re-attach request for it is answered
        with a hang-up on whatever node it reaches."""
        self.backend.execute(
            "INSERT INTO stream_endings (call_sid, node, ended_at, expires_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (call_sid) DO NOTHING",
            (call_sid, node, time.time() if now_s is None else now_s, expires_at_s))

    def stream_ended_normally(self, call_sid: str) -> bool:
        return self.backend.execute("SELECT 1 FROM stream_endings WHERE call_sid = ?", (call_sid,)).fetchone() is not None

    def purge_stream_endings(self, older_than_s: float) -> int:
        """Delete the endings whose re-attach tokens expired before ``older_than_s``; how many."""
        return self.backend.execute("DELETE FROM stream_endings WHERE expires_at < ?", (older_than_s,)).rowcount

    # --- live calls' state (carried to another node after a gateway died) ----------------------------------
    def save_call_state(self, call_sid: str, node: str, state: str, expires_at_s: float,
                        now_s: float | None = None) -> None:
        """``call_sid``'s state (JSON text, voicecore/call/restore.py) as ``node``'s model worker has it now."""
        self.backend.execute(
            "INSERT INTO call_states (call_sid, node, state, updated_at, expires_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (call_sid) DO UPDATE SET node = excluded.node, state = excluded.state, "
            "updated_at = excluded.updated_at, expires_at = excluded.expires_at",
            (call_sid, node, state, time.time() if now_s is None else now_s, expires_at_s))

    def call_state(self, call_sid: str, now_s: float | None = None) -> dict[str, Any] | None:
        """The state last saved for ``call_sid`` (``node``, ``state`` JSON text, ``updated_at``), unless expired."""
        row = self.backend.execute(
            "SELECT node, state, updated_at FROM call_states WHERE call_sid = ? AND expires_at >= ?",
            (call_sid, time.time() if now_s is None else now_s)).fetchone()
        return None if row is None else {"node": row[0], "state": row[1], "updated_at": row[2]}

    def drop_call_state(self, call_sid: str) -> None:
        self.backend.execute("DELETE FROM call_states WHERE call_sid = ?", (call_sid,))

    def purge_call_states(self, older_than_s: float) -> int:
        """Delete the states that expired before ``older_than_s`` (a node died with its calls); how many."""
        return self.backend.execute("DELETE FROM call_states WHERE expires_at < ?", (older_than_s,)).rowcount

    # --- the console's API keys ------------------------------------------------------------------------
    def add_api_key(self, name: str) -> str:
        """A new API key named ``name`` (shown once: only its hash is kept)."""
        if not name or len(name) > 100:
            raise StoreError("an API key needs a name of 1-100 characters")
        key = "vck_" + secrets.token_urlsafe(32)
        with self.backend.transaction():
            if self.backend.execute("SELECT 1 FROM api_keys WHERE name = ?", (name,)).fetchone() is not None:
                raise StoreError(f"an API key named {name!r} exists; revoke it or pick another name")
            self.backend.execute("INSERT INTO api_keys (name, key_hash, created_at) VALUES (?, ?, ?)",
                                 (name, _key_hash(key), time.time()))
        return key

    def api_key_name(self, key: str) -> str | None:
        """The name of the live (not revoked) API key ``key``; None when there is none."""
        if not key or len(key) > 200:
            return None
        row = self.backend.execute("SELECT name FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
                                   (_key_hash(key),)).fetchone()
        return None if row is None else str(row[0])

    def api_keys(self) -> list[dict[str, Any]]:
        cursor = self.backend.execute("SELECT name, created_at, revoked_at FROM api_keys ORDER BY id")
        return [{"name": r[0], "created_at": float(r[1]), "revoked_at": None if r[2] is None else float(r[2])}
                for r in cursor.fetchall()]

    def revoke_api_key(self, name: str) -> bool:
        """Revoke (keep, never accept again) the key ``name``; False when no live key has that name."""
        with self.backend.transaction():
            return self.backend.execute("UPDATE api_keys SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                                        (time.time(), name)).rowcount == 1

    def call(self, call_sid: str) -> dict[str, Any] | None:
        """The call ``call_sid`` with its turns, transcript, tool calls, verdicts and model errors; None if not
        stored. A call recorded in parts (a model worker restarted mid-call) is its latest part, and
        ``sources`` names every part's record."""
        db = self.backend
        rows = _rows(db.execute(f"SELECT {CALL_COLUMNS} FROM calls WHERE call_sid = ? ORDER BY started_at DESC, id DESC",
                                (call_sid,)))
        if not rows:
            return None
        call = self._call_row(rows[0])
        call_id = call.pop("id")
        call["sources"] = sorted(row["source"] for row in rows)
        turns = _rows(db.execute("SELECT * FROM turns WHERE call_id = ? ORDER BY idx", (call_id,)))
        for turn in turns:
            turn["index"] = turn.pop("idx")
            del turn["call_id"]
            stopped, audio = turn["speech_stopped_ms"], turn["first_audio_ms"]
            turn["latency_ms"] = audio - stopped if stopped is not None and audio is not None else None
        call["turns"] = turns
        call["transcript"] = [{k: row[k] for k in TRANSCRIPT_KEYS}
                              for row in _rows(db.execute("SELECT * FROM transcripts WHERE call_id = ? ORDER BY idx", (call_id,)))]
        call["tool_calls"] = [
            {"call_id": row["tool_call_id"], **{k: row[k] for k in TOOL_KEYS}, "ran": bool(row["ran"]), "ok": _flag(row["ok"])}
            for row in _rows(db.execute("SELECT * FROM tool_calls WHERE call_id = ? ORDER BY idx", (call_id,)))]
        call["verdicts"] = [{**{k: row[k] for k in VERDICT_KEYS}, "rejected": bool(row["rejected"])}
                            for row in _rows(db.execute("SELECT * FROM verdicts WHERE call_id = ? ORDER BY idx", (call_id,)))]
        call["errors"] = [{k: row[k] for k in ("code", "message", "at_ms")}
                          for row in _rows(db.execute("SELECT * FROM errors WHERE call_id = ? ORDER BY idx", (call_id,)))]
        call["keypresses"] = [{k: row[k] for k in ("digit", "at_ms")}
                              for row in _rows(db.execute("SELECT * FROM keypresses WHERE call_id = ? ORDER BY idx", (call_id,)))]
        return call

    @staticmethod
    def _call_row(row: dict[str, Any]) -> dict[str, Any]:
        row["started_at"] = float(row["started_at"])
        row["complete"] = bool(row["complete"])
        row["ended_at"] = row["started_at"] + row["duration_ms"] / 1000
        return row

    def purge(self, older_than_days: float, now_s: float | None = None) -> int:
        """Delete the calls started more than ``older_than_days`` ago, with all their rows; how many. Their
        records stay known (``sources``): a record still on disk is not stored again."""
        cutoff = (time.time() if now_s is None else now_s) - older_than_days * SECONDS_PER_DAY
        with self.backend.transaction():
            self.backend.execute("DELETE FROM events WHERE at < ?", (cutoff,))
            return self.backend.execute("DELETE FROM calls WHERE started_at < ?", (cutoff,)).rowcount

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> CallStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
