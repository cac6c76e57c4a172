"""The carrier protocols' shared JSON reading (voicecore/carriers/jsonwire.py), tested once here: each field
reader on good values, wrong types and edge values; the message loader on oversized str and bytes, bytes
that are not UTF-8, text that is not JSON, garbage after the value, a value that is not an object and an
``event`` that is not a string; the step through a transition table; the close bookkeeping.

The carrier test files (tests/test_carrier_{telnyx,plivo,exotel,vonage}.py) still feed the same classes
of bad input through each protocol: they check each carrier's wiring and close codes, these the readers'.
"""

from __future__ import annotations

import enum

import pytest

from voicecore.carriers.events import ProtocolViolation
from voicecore.carriers.jsonwire import (
    MAX_COUNTER,
    MAX_COUNTER_DIGITS,
    ClosesOnViolation,
    CloseCode,
    Violation,
    decode_base64,
    load_event,
    load_object,
    malformed,
    next_state,
    printable_id,
    read_counter,
    read_id,
    read_integer,
    read_object,
    read_optional_counter,
    read_optional_string,
    read_string,
)
from voicecore.errors import PeerInputError
from voicecore.timing import MAX_MESSAGE_BYTES

BIG = MAX_MESSAGE_BYTES + 1


def violation_of(call, *args, **kwargs) -> tuple[int, str]:
    with pytest.raises(Violation) as caught:
        call(*args, **kwargs)
    return int(caught.value.close_code), caught.value.reason


# --- the violation and the close codes -----------------------------------------------------------------


def test_close_codes_are_rfc_6455s() -> None:
    assert {code.name: int(code) for code in CloseCode} == {
        "UNSUPPORTED_DATA": 1003, "INVALID_PAYLOAD": 1007, "POLICY_VIOLATION": 1008, "MESSAGE_TOO_BIG": 1009,
    }


def test_violation_is_the_peers_fault_and_malformed_is_1007() -> None:
    violation = malformed("x is not a string")
    assert isinstance(violation, PeerInputError)
    assert (violation.close_code, violation.reason) == (1007, "x is not a string")
    assert (Violation(1008, "unknown event").close_code, Violation(1008, "unknown event").reason) == (1008, "unknown event")


# --- the message loader --------------------------------------------------------------------------------


@pytest.mark.parametrize("data", ['{"event":"media","n":1}', b'{"event":"media","n":1}',
                                  bytearray(b'{"event":"media","n":1}'), memoryview(b'{"event":"media","n":1}')])
def test_load_event_reads_str_and_bytes_alike(data) -> None:
    assert load_event(data) == ({"event": "media", "n": 1}, "media")
    assert load_object(data) == {"event": "media", "n": 1}


def test_load_event_leaves_known_and_allowed_to_the_caller() -> None:
    assert load_event('{"event":"never heard of it"}') == ({"event": "never heard of it"}, "never heard of it")


def test_load_object_needs_no_event() -> None:
    assert load_object('{"action":"clear"}') == {"action": "clear"}


def test_exactly_max_message_bytes_is_read() -> None:
    text = '{"event":"x"}'
    padded = text + " " * (MAX_MESSAGE_BYTES - len(text))  # JSON allows trailing whitespace
    assert len(padded.encode()) == MAX_MESSAGE_BYTES
    assert load_event(padded)[1] == "x"
    assert load_event(padded.encode())[1] == "x"


def test_duplicate_keys_last_one_wins() -> None:
    assert load_event('{"event":"a","event":"b"}')[1] == "b"


LOADER_BAD_INPUT = [
    # 1009: larger than MAX_MESSAGE_BYTES, in UTF-8 bytes
    ("too-big-str", " " * BIG, 1009, "message too big"),
    ("too-big-bytes", b" " * BIG, 1009, "message too big"),
    ("too-big-bytearray", bytearray(b" " * BIG), 1009, "message too big"),
    # a str short in characters but long in UTF-8 bytes: the cheap 4n bound lets it through to the count
    ("too-big-multibyte", '"' + "é" * (MAX_MESSAGE_BYTES // 2) + '"', 1009, "message too big"),
    ("too-big-four-byte-characters", '"' + "\U0001f600" * (MAX_MESSAGE_BYTES // 4) + '"', 1009, "message too big"),
    ("too-big-lone-surrogates", '"' + "\ud800" * (MAX_MESSAGE_BYTES // 3) + '"', 1009, "message too big"),
    # 1007: not UTF-8 (bytes only: a str is text already)
    ("invalid-utf8", b'{"event":"media","x":"\xff\xfe"}', 1007, "not UTF-8"),
    ("overlong-utf8", b'{"event":"\xc0\xaf"}', 1007, "not UTF-8"),
    ("truncated-utf8", b'{"event":"\xe2\x82"}', 1007, "not UTF-8"),
    # 1007: not JSON
    ("empty-str", "", 1007, "not a JSON value"),
    ("empty-bytes", b"", 1007, "not a JSON value"),
    ("not-json", "nope", 1007, "not a JSON value"),
    ("not-json-bytes", b"nope", 1007, "not a JSON value"),
    ("truncated", '{"event":"media"', 1007, "not a JSON value"),
    ("single-quotes", "{'event':'media'}", 1007, "not a JSON value"),
    ("nan", '{"event":"media","x":NaN}', 1007, "not a JSON value"),
    ("infinity", '{"event":"media","x":Infinity}', 1007, "not a JSON value"),
    ("trailing-comma", '{"event":"media",}', 1007, "not a JSON value"),
    ("lone-surrogate-in-str", '{"event":"\ud800"}', 1007, "not a JSON value"),
    # 1007: garbage after the value
    ("garbage-after", '{"event":"media"}x', 1007, "not a JSON value"),
    ("garbage-after-bytes", b'{"event":"media"}x', 1007, "not a JSON value"),
    ("second-value-after", '{"event":"media"}{"event":"media"}', 1007, "not a JSON value"),
    ("nul-after", '{"event":"media"}\x00', 1007, "not a JSON value"),
    # 1007: not an object
    ("array", '["event","media"]', 1007, "not a JSON object"),
    ("string", '"media"', 1007, "not a JSON object"),
    ("number", "7", 1007, "not a JSON object"),
    ("null", "null", 1007, "not a JSON object"),
    ("true", b"true", 1007, "not a JSON object"),
]

EVENT_BAD_INPUT = [
    ("event-missing", '{"x":"media"}', 1007, "event is not a string"),
    ("event-null", '{"event":null}', 1007, "event is not a string"),
    ("event-number", '{"event":1}', 1007, "event is not a string"),
    ("event-bool", '{"event":true}', 1007, "event is not a string"),
    ("event-object", '{"event":{"name":"media"}}', 1007, "event is not a string"),
    ("event-list", b'{"event":["media"]}', 1007, "event is not a string"),
]


@pytest.mark.parametrize(("name", "data", "code", "reason"), LOADER_BAD_INPUT + EVENT_BAD_INPUT,
                         ids=[row[0] for row in LOADER_BAD_INPUT + EVENT_BAD_INPUT])
def test_load_event_bad_input(name: str, data, code: int, reason: str) -> None:
    assert violation_of(load_event, data) == (code, reason)


@pytest.mark.parametrize(("name", "data", "code", "reason"), LOADER_BAD_INPUT, ids=[row[0] for row in LOADER_BAD_INPUT])
def test_load_object_bad_input(name: str, data, code: int, reason: str) -> None:
    assert violation_of(load_object, data) == (code, reason)


@pytest.mark.parametrize("name", [row[0] for row in EVENT_BAD_INPUT])
def test_load_object_takes_any_event(name: str) -> None:
    data = {row[0]: row[1] for row in EVENT_BAD_INPUT}[name]
    assert type(load_object(data)) is dict


# --- the step through a transition table ---------------------------------------------------------------


class Phase(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    STOPPED = "stopped"
    CLOSED = "closed"


TABLE = {
    (Phase.WAITING, "start"): Phase.RUNNING,
    (Phase.RUNNING, "media"): Phase.RUNNING,
    (Phase.RUNNING, "stop"): Phase.STOPPED,
}
KNOWN = frozenset(event for _, event in TABLE)


@pytest.mark.parametrize(("state", "event", "following"), [(state, event, following) for (state, event), following in TABLE.items()])
def test_next_state_follows_the_table(state: Phase, event: str, following: Phase) -> None:
    assert next_state(TABLE, KNOWN, state, event, Phase.STOPPED) is following


@pytest.mark.parametrize(("state", "event", "reason"), [
    (Phase.RUNNING, "hello", "unknown event"),  # never the peer's text
    (Phase.STOPPED, "hello", "unknown event"),  # unknown wins over after-stop
    (Phase.WAITING, "media", "unexpected media"),
    (Phase.RUNNING, "start", "unexpected start"),
    (Phase.STOPPED, "media", "message after stop"),
    (Phase.STOPPED, "start", "message after stop"),
    (Phase.STOPPED, "stop", "message after stop"),
])
def test_next_state_violations_are_1008(state: Phase, event: str, reason: str) -> None:
    assert violation_of(next_state, TABLE, KNOWN, state, event, Phase.STOPPED) == (1008, reason)


def test_an_unknown_event_name_never_reaches_the_reason() -> None:
    _code, reason = violation_of(next_state, TABLE, KNOWN, Phase.RUNNING, "secret-4242", Phase.STOPPED)
    assert "4242" not in reason


# --- field readers -------------------------------------------------------------------------------------

WRONG_TYPES = [None, True, False, 0, 1, -1, 1.5, "", "x", [], ["x"], {}, {"x": 1}]


def wrong(kind: type) -> list:
    return [value for value in WRONG_TYPES if type(value) is not kind]


def test_read_object() -> None:
    assert read_object({"k": {"a": 1}}, "k") == {"a": 1}
    assert read_object({"k": {}}, "k") == {}


@pytest.mark.parametrize("value", wrong(dict))
def test_read_object_wrong_type(value) -> None:
    assert violation_of(read_object, {"k": value}, "k") == (1007, "k is not an object")


def test_read_object_missing() -> None:
    assert violation_of(read_object, {}, "start") == (1007, "start is not an object")


@pytest.mark.parametrize("value", ["", "x", "é", "\x00", " spaced ", "1" * 10_000])
def test_read_string(value: str) -> None:
    assert read_string({"k": value}, "k") == value


@pytest.mark.parametrize("value", wrong(str))
def test_read_string_wrong_type(value) -> None:
    assert violation_of(read_string, {"k": value}, "k") == (1007, "k is not a string")


def test_read_string_missing() -> None:
    assert violation_of(read_string, {}, "name") == (1007, "name is not a string")


@pytest.mark.parametrize("null", [False, True])
def test_read_optional_string(null: bool) -> None:
    assert read_optional_string({"k": "v"}, "k", null=null) == "v"
    assert read_optional_string({"k": ""}, "k", null=null) == ""
    assert read_optional_string({}, "k", null=null) is None


def test_read_optional_string_null_is_absent_only_when_asked() -> None:
    assert read_optional_string({"k": None}, "k", null=True) is None
    assert violation_of(read_optional_string, {"k": None}, "k") == (1007, "k is not a string")


@pytest.mark.parametrize("null", [False, True])
@pytest.mark.parametrize("value", [value for value in wrong(str) if value is not None])
def test_read_optional_string_wrong_type(value, null: bool) -> None:
    assert violation_of(read_optional_string, {"k": value}, "k", null=null) == (1007, "k is not a string")


@pytest.mark.parametrize("value", [0, 1, -1, 2**63, -(2**63), 10**30])
def test_read_integer(value: int) -> None:
    assert read_integer({"k": value}, "k") == value


@pytest.mark.parametrize("value", wrong(int) + [True, False, 1.0, "1"])
def test_read_integer_wrong_type(value) -> None:
    assert violation_of(read_integer, {"k": value}, "k") == (1007, "k is not an integer")


@pytest.mark.parametrize(("value", "expected"), [
    ("0", 0), ("1", 1), ("007", 7), ("9" * MAX_COUNTER_DIGITS, 10**MAX_COUNTER_DIGITS - 1),
    (0, 0), (1, 1), (MAX_COUNTER - 1, MAX_COUNTER - 1),
])
def test_read_counter(value, expected: int) -> None:
    assert read_counter({"k": value}, "k") == expected
    assert type(read_counter({"k": value}, "k")) is int


@pytest.mark.parametrize(("value", "reason"), [
    # strings: 1 to MAX_COUNTER_DIGITS ASCII digits, nothing else
    ("", "k is not a decimal counter"),
    ("1" * (MAX_COUNTER_DIGITS + 1), "k is not a decimal counter"),
    ("-1", "k is not a decimal counter"),
    ("+1", "k is not a decimal counter"),
    (" 1", "k is not a decimal counter"),
    ("1 ", "k is not a decimal counter"),
    ("1.0", "k is not a decimal counter"),
    ("1e3", "k is not a decimal counter"),
    ("0x1", "k is not a decimal counter"),
    ("\u0661", "k is not a decimal counter"),  # ARABIC-INDIC DIGIT ONE: isdigit() but not ASCII
    ("\u00b2", "k is not a decimal counter"),  # SUPERSCRIPT TWO
    # numbers: non-negative and below MAX_COUNTER
    (-1, "k is out of range"),
    (MAX_COUNTER, "k is out of range"),
    (2**64, "k is out of range"),
    # other types
    (None, "k is not a counter"),
    (True, "k is not a counter"),  # bool is an int subclass
    (False, "k is not a counter"),
    (1.0, "k is not a counter"),
    ([], "k is not a counter"),
    ({}, "k is not a counter"),
])
def test_read_counter_bad(value, reason: str) -> None:
    assert violation_of(read_counter, {"k": value}, "k") == (1007, reason)


def test_read_counter_missing() -> None:
    assert violation_of(read_counter, {}, "sequence_number") == (1007, "sequence_number is not a counter")


def test_read_optional_counter() -> None:
    assert read_optional_counter({}, "k") is None
    assert read_optional_counter({"k": "12"}, "k") == 12
    assert read_optional_counter({"k": 12}, "k") == 12
    assert violation_of(read_optional_counter, {"k": None}, "k") == (1007, "k is not a counter")
    assert violation_of(read_optional_counter, {"k": "x"}, "k") == (1007, "k is not a decimal counter")


@pytest.mark.parametrize("space", [False, True])
@pytest.mark.parametrize("value", ["a", "MZ18ad3ab5a668481ce02b83e7395059f0", "v3:abc-_.~!#$%&'()*+,/;<=>?@[]^`{|}",
                                   "x" * 16])
def test_printable_id(value: str, space: bool) -> None:
    assert printable_id(value, 16 if value == "x" * 16 else 64, space=space)
    assert read_id({"k": value}, "k", 64, space=space) == value


@pytest.mark.parametrize("space", [False, True])
@pytest.mark.parametrize("value", ["", "x" * 17, 'a"b', "a\\b", "a\x00", "a\x7f", "a\tb", "a\nb", "é", "\u2028", None, 7,
                                   b"ab"])
def test_not_printable_id(value, space: bool) -> None:
    assert not printable_id(value, 16, space=space)


def test_a_space_is_allowed_only_when_asked() -> None:
    assert printable_id("a b", 16, space=True)
    assert not printable_id("a b", 16)
    assert not printable_id(" ", 16)


@pytest.mark.parametrize("value", ["", "x" * 17, 'a"b', "a\\b", "a b", "é"])
def test_read_id_bad(value: str) -> None:
    assert violation_of(read_id, {"k": value}, "k", 16) == (1007, "k is not a usable id")


@pytest.mark.parametrize("value", wrong(str))
def test_read_id_wrong_type(value) -> None:
    assert violation_of(read_id, {"k": value}, "k", 16) == (1007, "k is not a string")


@pytest.mark.parametrize(("encoded", "decoded"), [("", b""), ("AA==", b"\x00"), ("/w==", b"\xff"), ("AQID", b"\x01\x02\x03"),
                                                  ("////", b"\xff\xff\xff")])
def test_decode_base64(encoded: str, decoded: bytes) -> None:
    assert decode_base64(encoded) == decoded


@pytest.mark.parametrize("encoded", ["A", "AA=", "AA", "AA==AA==", "AA=A", "A A=", "AA==\n", "-_-_", "AQID!", "é", "AQ\x00D"])
def test_decode_base64_bad(encoded: str) -> None:
    assert violation_of(decode_base64, encoded) == (1007, "payload is not base64")


# --- closing on the first violation --------------------------------------------------------------------


class Toy(ClosesOnViolation):
    _CLOSED = Phase.CLOSED

    def __init__(self) -> None:
        self.state = Phase.RUNNING
        self.violation: ProtocolViolation | None = None
        self._violations = 0


def test_close_records_the_first_violation_and_closes() -> None:
    toy = Toy()
    first = toy._close(CloseCode.INVALID_PAYLOAD, "not a JSON value")
    assert first == ProtocolViolation(close_code=1007, reason="not a JSON value")
    assert type(first.close_code) is int  # the enum member is not what goes to the shell
    assert (toy.state, toy.violation, toy._violations) == (Phase.CLOSED, first, 1)


def test_closing_again_gives_the_violation_without_counting_it() -> None:
    toy = Toy()
    first = toy._close(1007, "first")
    second = toy._close(1008, "no start within 5 s")
    assert second == ProtocolViolation(close_code=1008, reason="no start within 5 s")
    assert (toy.state, toy.violation, toy._violations) == (Phase.CLOSED, first, 1)
