"""Numbering a call's events as they arrive (the recorder's part of the observer feed; pure but for the
``last_seq`` look-up it is given).

Owns ``seq``: per call sid, rising by one from 1 across everything the call sent, also across a restarted
model worker (its events continue the count) and a restarted recorder (``last_seq`` asks the store where
the count stood). Owns the wire form an observer receives, one JSON object per event::

    {"call_sid": "CA..", "seq": 7, "type": "transcript.delta", "t_ms": 5120, "at": 1764070000.12, "data": {...}}

``at``: wall clock, seconds since the epoch; ``t_ms``: from the call's start as its model session counted
(a resumed session counts from its own start). The store keeps ``data`` as JSON text; ``wire`` turns a
stored row into the same bytes the live feed carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from voicecore.observe.events import EVENT_TYPES, json_array_chunks

_TYPES = frozenset(EVENT_TYPES)
FORGET_AFTER = 4096  # ended calls whose count is kept in memory (a late event finds it without a look-up)

Row = tuple[str, int, float, int, str, str]  # call_sid, seq, at, t_ms, type, data (JSON text)


class EventNumbering:
    def __init__(self, last_seq: Callable[[str], int]) -> None:
        self.last_seq = last_seq
        self.seqs: dict[str, int] = {}
        self.ended: list[str] = []
        self.malformed = 0

    def number(self, events_json: str) -> list[Row]:
        """The rows of one model-worker message (``ObserveEvents``); events that are not
        ``[call_sid, at, t_ms, known type, object]`` are counted in ``malformed`` and left out."""
        try:
            events = orjson.loads(events_json)
        except orjson.JSONDecodeError:
            self.malformed += 1
            return []
        if not isinstance(events, list):
            self.malformed += 1
            return []
        rows: list[Row] = []
        for event in events:
            if (not isinstance(event, list) or len(event) != 5 or not isinstance(event[0], str) or not event[0]
                    or type(event[1]) not in (int, float) or type(event[2]) is not int or event[3] not in _TYPES
                    or not isinstance(event[4], dict)):
                self.malformed += 1
                continue
            call_sid, at, t_ms, kind, data = event
            seq = self.seqs.get(call_sid)
            if seq is None:
                seq = self.last_seq(call_sid)
            seq += 1
            self.seqs[call_sid] = seq
            rows.append((call_sid, seq, round(float(at), 3), t_ms, kind, orjson.dumps(data).decode()))
            if kind == "call.ended":
                self.ended.append(call_sid)
        if len(self.ended) > FORGET_AFTER:
            for sid in self.ended[: len(self.ended) - FORGET_AFTER]:
                self.seqs.pop(sid, None)
            del self.ended[: len(self.ended) - FORGET_AFTER]
        return rows


def wire(row: Row) -> bytes:
    """One event as an observer receives it (a WebSocket text message)."""
    call_sid, seq, at, t_ms, kind, data = row
    return orjson.dumps({"call_sid": call_sid, "seq": seq, "type": kind, "t_ms": t_ms, "at": at,
                         "data": orjson.Fragment(data)})


def wire_stored(event: dict[str, Any]) -> bytes:
    """A stored event (``CallStore.events``) as an observer receives it."""
    return wire((event["call_sid"], event["seq"], event["at"], event["t_ms"], event["type"], event["data"]))


def rows_chunks(rows: list[Row]) -> Iterator[tuple[int, str]]:
    """Rows as the recorder publishes them (``ObservedEvents.events``): (how many rows, a JSON list of row
    arrays), each text small enough for a bus message."""
    return json_array_chunks(rows)


def rows_from_json(text: str) -> list[Row]:
    rows = orjson.loads(text)
    return [tuple(row) for row in rows]  # type: ignore[misc]
