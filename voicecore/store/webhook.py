"""The end-of-call webhook's content and signature: pure, so a receiver can verify with the same code.

Owns what a call's summary says (outcome, duration, turns, latency percentiles, tool calls, transcript, from
the call store's view of the call) and how it is signed: ``X-Voicecore-Signature: t=<unix seconds>,v1=<hex>``
where ``<hex>`` is HMAC-SHA256 over ``"<t>." + body`` with the shared secret (the timestamp in the signed text
lets a receiver refuse a replayed delivery). Sending and retrying are the recorder worker's
(workers/recorder/webhook.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from voicecore.stats import percentile_or_none

SIGNATURE_HEADER = "X-Voicecore-Signature"
EVENT = "call.ended"
DEFAULT_TOLERANCE_S = 300


def call_summary(call: dict[str, Any]) -> dict[str, Any]:
    """The webhook's JSON object for a call as ``CallStore.call`` returns it."""
    latencies = [t["latency_ms"] for t in call.get("turns", []) if t.get("latency_ms") is not None]
    return {
        "event": EVENT,
        "call_sid": call["call_sid"],
        "agent": call.get("agent", ""),
        "outcome": call.get("outcome", ""),
        "started_at": call.get("started_at"),
        "ended_at": call.get("ended_at"),
        "duration_s": round(call.get("duration_ms", 0) / 1000, 3),
        "turns": len(call.get("turns", [])),
        "bargeins": sum(1 for t in call.get("turns", []) if t.get("barged_in_ms") is not None),
        "latency_ms": {"p50": percentile_or_none(latencies, 50), "p95": percentile_or_none(latencies, 95),
                       "max": max(latencies) if latencies else None},
        "tool_calls": [{k: tool.get(k) for k in ("name", "arguments", "ok", "output")}
                       for tool in call.get("tool_calls", [])],
        "transcript": [{k: line.get(k) for k in ("speaker", "text", "at_ms")} for line in call.get("transcript", [])],
    }


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), str(timestamp).encode("ascii") + b"." + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, now_s: float, tolerance_s: float = DEFAULT_TOLERANCE_S) -> bool:
    """A receiver's check: the signature is ours over this body, and no older than ``tolerance_s``."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now_s - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), f"t={timestamp},v1={fields.get('v1', '')}")
