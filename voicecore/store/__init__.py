"""The call store: what a call record says about a call, kept in a database (SQLite or PostgreSQL).

Owns nothing itself: summary.py reads records (pure), schema.py holds the SQL and its migrations, db.py
opens a store and reads and writes it. Filled from records by the recorder worker; read by `voicecore calls`.
"""

from voicecore.store.db import CallStore, StoreError, database_url_for
from voicecore.store.summary import CallSummary, ModelError, ToolCall, Transcript, Turn, Verdict, summarize_record

__all__ = ["CallStore", "CallSummary", "ModelError", "StoreError", "ToolCall", "Transcript", "Turn", "Verdict",
           "database_url_for", "summarize_record"]
