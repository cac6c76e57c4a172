"""Reading a carrier's JSON text messages, without I/O: what every carrier protocol module here shares.

Owns: the internal violation a field reader raises (the peer's bad input, turned into one
:class:`voicecore.carriers.events.ProtocolViolation` by the protocol), the field readers, the message
loader (size bound, strict JSON, an object with a string ``event``), the step through a protocol's
transition table, and the bookkeeping that closes a protocol on its first violation.

Must not know: any carrier's field names, events, states or close-code table. Each carrier module keeps
its transition table literal at its top, its close-code table in its docstring and its parsers; it calls
these readers with its own keys and bounds. Every reason here is short fixed text naming at most a key
the module chose, never peer data (it goes into close frames and logs).
"""

from __future__ import annotations

import binascii
import enum
from collections.abc import Mapping
from typing import ClassVar, TypeVar

import orjson

from voicecore.carriers.events import ProtocolViolation
from voicecore.errors import PeerInputError
from voicecore.timing import MAX_MESSAGE_BYTES

__all__ = [
    "MAX_COUNTER",
    "MAX_COUNTER_DIGITS",
    "ClosesOnViolation",
    "CloseCode",
    "Violation",
    "decode_base64",
    "load_event",
    "load_object",
    "malformed",
    "next_state",
    "printable_id",
    "read_counter",
    "read_id",
    "read_integer",
    "read_object",
    "read_optional_counter",
    "read_optional_string",
    "read_string",
]


class CloseCode(enum.IntEnum):
    """WebSocket close codes a JSON carrier protocol closes with (RFC 6455 section 7.4.1)."""

    UNSUPPORTED_DATA = 1003
    INVALID_PAYLOAD = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009


MAX_COUNTER_DIGITS = 18  # fits int64 with room; also stops int() on absurdly long digit strings
MAX_COUNTER = 10**MAX_COUNTER_DIGITS  # a counter sent as a JSON number is below this


class Violation(PeerInputError):
    """Internal to the protocols: raised by the readers, turned into a ProtocolViolation in one place."""

    def __init__(self, close_code: int, reason: str) -> None:
        self.close_code = close_code
        self.reason = reason


def malformed(reason: str) -> Violation:
    return Violation(CloseCode.INVALID_PAYLOAD, reason)


# --- the message loader --------------------------------------------------------------------------------


def load_object(data: str | bytes) -> dict:
    """One text message (``str``, or its UTF-8 ``bytes``) as a JSON object, or Violation 1009 / 1007.

    The size is UTF-8 bytes, bounded by ``timing.MAX_MESSAGE_BYTES``. orjson is strict RFC 8259 (no
    NaN/Infinity, no garbage after the value, valid UTF-8 only, bounded nesting) and cheap on the media
    path (~50 messages per second per call). JSON duplicate keys: the last one wins (orjson's rule).
    """
    if isinstance(data, str):
        # Cheap bound first: a str of n characters is at most 4n UTF-8 bytes.
        if len(data) * 4 > MAX_MESSAGE_BYTES and len(data.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
            raise Violation(CloseCode.MESSAGE_TOO_BIG, "message too big")
    elif len(data) > MAX_MESSAGE_BYTES:
        raise Violation(CloseCode.MESSAGE_TOO_BIG, "message too big")
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        if not isinstance(data, str):
            try:
                bytes(data).decode("utf-8")
            except UnicodeDecodeError:
                raise malformed("not UTF-8") from None
        raise malformed("not a JSON value") from None
    if type(message) is not dict:
        raise malformed("not a JSON object")
    return message


def load_event(data: str | bytes) -> tuple[dict, str]:
    """:func:`load_object`, and its ``event``, which must be a string (1007). Whether the event is known
    and allowed now is the caller's (:func:`next_state`, or the carrier's own rule)."""
    message = load_object(data)
    event = message.get("event")
    if type(event) is not str:
        raise malformed("event is not a string")
    return message, event


S = TypeVar("S")


def next_state(transitions: Mapping[tuple[S, str], S], known_events: frozenset[str], state: S, event: str,
               stopped: S) -> S:
    """The state ``event`` moves ``state`` to in ``transitions``, or Violation 1008: an event not in
    ``known_events`` ("unknown event", never the peer's name for it), anything in ``stopped`` ("message
    after stop"), any other pair not in the table ("unexpected <event>", a known event's name)."""
    if event not in known_events:
        raise Violation(CloseCode.POLICY_VIOLATION, "unknown event")
    following = transitions.get((state, event))
    if following is None:
        if state is stopped:
            raise Violation(CloseCode.POLICY_VIOLATION, "message after stop")
        raise Violation(CloseCode.POLICY_VIOLATION, f"unexpected {event}")
    return following


# --- field readers: each returns a checked value or raises Violation(1007) -----------------------------


def read_object(message: dict, key: str) -> dict:
    value = message.get(key)
    if type(value) is not dict:
        raise malformed(f"{key} is not an object")
    return value


def read_string(message: dict, key: str) -> str:
    value = message.get(key)
    if type(value) is not str:
        raise malformed(f"{key} is not a string")
    return value


def read_optional_string(message: dict, key: str, *, null: bool = False) -> str | None:
    """None when ``key`` is absent (and, with ``null``, when it is JSON null); otherwise a string."""
    value = message.get(key)
    if value is None and (null or key not in message):
        return None
    if type(value) is not str:
        raise malformed(f"{key} is not a string")
    return value


def read_integer(message: dict, key: str) -> int:
    value = message.get(key)
    if type(value) is not int:  # bool is an int subclass; `type is` keeps it out
        raise malformed(f"{key} is not an integer")
    return value


def read_counter(message: dict, key: str) -> int:
    """A non-negative counter: a string of 1 to ``MAX_COUNTER_DIGITS`` ASCII digits, or a JSON integer
    below ``MAX_COUNTER`` (carriers' examples write strings, their own samples and SDKs numbers)."""
    value = message.get(key)
    if type(value) is str:
        if 0 < len(value) <= MAX_COUNTER_DIGITS and value.isascii() and value.isdigit():
            return int(value)
        raise malformed(f"{key} is not a decimal counter")
    if type(value) is int:  # bool is an int subclass; `type is` keeps it out
        if 0 <= value < MAX_COUNTER:
            return value
        raise malformed(f"{key} is out of range")
    raise malformed(f"{key} is not a counter")


def read_optional_counter(message: dict, key: str) -> int | None:
    """None when ``key`` is absent; otherwise :func:`read_counter` (JSON null is not a counter)."""
    return None if key not in message else read_counter(message, key)


def printable_id(value: object, max_chars: int, *, space: bool = False) -> bool:
    """A str of 1 to ``max_chars`` printable ASCII characters (a space only with ``space``), without
    quotes or backslashes: safe in a log line and inside our JSON string templates as it is."""
    lowest = " " if space else "!"
    return (
        isinstance(value, str)
        and 0 < len(value) <= max_chars
        and all(lowest <= char <= "~" and char not in '"\\' for char in value)
    )


def read_id(message: dict, key: str, max_chars: int, *, space: bool = False) -> str:
    """A string that is a :func:`printable_id`."""
    value = read_string(message, key)
    if not printable_id(value, max_chars, space=space):
        raise malformed(f"{key} is not a usable id")
    return value


def decode_base64(encoded: str) -> bytes:
    """Strict base64 (no characters outside the alphabet, correct padding) of a payload."""
    try:
        return binascii.a2b_base64(encoded, strict_mode=True)
    except ValueError:  # binascii.Error, or non-ASCII characters in a str
        raise malformed("payload is not base64") from None


# --- closing on the first violation ----------------------------------------------------------------------


class ClosesOnViolation:
    """Mixin for a stream protocol: :meth:`_close` turns a violation into the ProtocolViolation the shell
    closes the socket with, and closes the protocol (it ignores every later input).

    The class sets ``_CLOSED`` to its closed state; an instance has ``state``, ``violation`` (the one that
    closed it, or None) and ``_violations``. Closing again (the shell's deadline after a violation) gives
    the violation without counting it twice.
    """

    _CLOSED: ClassVar[enum.Enum]
    state: enum.Enum
    violation: ProtocolViolation | None
    _violations: int

    def _close(self, close_code: int, reason: str) -> ProtocolViolation:
        violation = ProtocolViolation(close_code=int(close_code), reason=reason)
        if self.state is not self._CLOSED:
            self._violations += 1
            self.violation = violation
            self.state = self._CLOSED
        return violation
