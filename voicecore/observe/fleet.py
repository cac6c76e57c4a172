"""Live observer events across the nodes of a fleet: the message each node's recorder publishes on the fleet
subject and each node's console reads (docs/how-to/fleet.md#observers). Pure: bytes in, rows out; the NATS
connection is voicecore/observe/transport.py's.

One message is one batch of numbered events, as the recorder publishes them locally (``ObservedEvents``:
rows ``[call_sid, seq, at, t_ms, type, data]``, at most about 48 KiB of them), with the node that served
the calls::

    {"v": 1, "node": "node-a", "rows": [[...], ...]}

A console skips its own node's messages (it has them from its recorder already, and first). A call is
served by one node, so its ``seq`` comes from one recorder: the numbering stays per call, gap-free, and a
console on another node meets a late joiner's replay from the shared store without a gap, as it does
locally (the recorder stores a batch before it publishes it, here and on the fleet subject alike).
"""

from __future__ import annotations

import orjson

from voicecore.observe.numbering import Row

__all__ = ["SUBJECT", "VERSION", "decode", "encode", "servers"]

SUBJECT = "voicecore.observe.events"
VERSION = 1


def encode(node: str, rows_text: str) -> bytes:
    """A batch of rows (``ObservedEvents.events``: a JSON array text) from ``node`` as a fleet message."""
    return orjson.dumps({"v": VERSION, "node": node, "rows": orjson.Fragment(rows_text)})


def _row(value: object) -> Row | None:
    if (isinstance(value, list) and len(value) == 6 and isinstance(value[0], str) and value[0]
            and type(value[1]) is int and value[1] > 0 and type(value[2]) in (int, float) and type(value[3]) is int
            and isinstance(value[4], str) and isinstance(value[5], str)):
        return (value[0], value[1], float(value[2]), value[3], value[4], value[5])
    return None


def decode(payload: bytes) -> tuple[str, list[Row]] | None:
    """(the publishing node, its rows), or None for a message that is not ours (counted by the caller)."""
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if (not isinstance(message, dict) or message.get("v") != VERSION or not isinstance(message.get("node"), str)
            or not message["node"] or not isinstance(message.get("rows"), list)):
        return None
    rows = [_row(value) for value in message["rows"]]
    if any(row is None for row in rows):
        return None
    return message["node"], rows  # type: ignore[return-value]


def servers(fanout_url: str) -> list[str]:
    """``nats://a:4222,nats://b:4222`` -> the server URLs."""
    return [server.strip() for server in fanout_url.split(",") if server.strip()]
