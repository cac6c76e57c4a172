"""Vonage Voice WebSocket core (voicecore/carriers/vonage/protocol.py): every inbound event, every bad-input class and
its close code, garbage after and truncation of each valid text message, the encoder's exact messages and
their round trip through the carrier's side, caller audio through the protocol and the edge transcoder into
160-byte mu-law frames and back, the answer NCCO's shape, and signed-webhook JWTs.

Message shapes follow the Vonage WebSockets guide (docs/explanation/protocols.md#b): websocket:connected with the
NCCO headers at the top level, binary L16 frames, websocket:dtmf {"digit","duration"}, websocket:notify
{"payload"}, websocket:cleared.
"""

from __future__ import annotations

import base64
import hashlib
import json
import warnings

import jwt
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.carriers.codec import EdgeTranscoder, Framer
from voicecore.carriers.events import (
    CallerAudio,
    Cleared,
    Dtmf,
    MarkEcho,
    Outbound,
    ProtocolViolation,
    StreamConnected,
    StreamStarted,
    StreamStopped,
)
from voicecore.carriers.vonage.protocol import (
    CLEAR_MESSAGE,
    MAX_NCCO_HEADERS_BYTES,
    NOTIFY_HEAD,
    NOTIFY_TAIL,
    CloseCode,
    SentAudio,
    SentClear,
    SentInvalid,
    SentNotify,
    State,
    VonageCarrierSide,
    VonageOutboundEncoder,
    VonageStreamProtocol,
    frame_bytes,
    ncco_connect_websocket,
    sign_webhook,
    verify_signed_webhook,
    verify_upgrade_jwt,
)
from voicecore.timing import FRAME_BYTES, MAX_MESSAGE_BYTES

CALL_ID = "63f61863-4a51-4f6b-86e1-46edebcf9356"
TOKEN = "tok-123"
HEADERS = {"call_id": CALL_ID, "session_token": TOKEN, "tenant": "acme"}
FRAME_16K = (np.arange(320, dtype=np.int16) * 97).astype("<i2").tobytes()  # 640 bytes, 20 ms at 16 kHz
FRAME_8K = FRAME_16K[:320]


# --- message builders (dicts, so a test can bend one field) ----------------------------------------


def connected_msg(rate_hz: int = 16000, **extra: object) -> dict:
    return {"event": "websocket:connected", "content-type": f"audio/l16;rate={rate_hz}", **HEADERS, **extra}


def dtmf_msg(digit: object = "5", duration: object = 260) -> dict:
    return {"event": "websocket:dtmf", "digit": digit, "duration": duration}


def notify_msg(name: object = "3:5") -> dict:
    return {"event": "websocket:notify", "payload": {"mark": name}}


def cleared_msg() -> dict:
    return {"event": "websocket:cleared"}


def dumps(message: dict) -> str:
    return json.dumps(message)


def bend(message: dict, path: str, value: object) -> dict:
    """Copy ``message`` with the dotted ``path`` set to ``value`` (or deleted when value is DELETE)."""
    copy = json.loads(json.dumps(message))
    *parents, leaf = path.split(".")
    target = copy
    for key in parents:
        target = target[key]
    if value is DELETE:
        del target[leaf]
    else:
        target[leaf] = value
    return copy


DELETE = object()
FRESH, CONNECTED, STOPPED = "fresh", "connected", "stopped"


def protocol_after(prelude: str) -> VonageStreamProtocol:
    protocol = VonageStreamProtocol()
    if prelude in (CONNECTED, STOPPED):
        events = protocol.receive_text(dumps(connected_msg()))
        assert [type(event) for event in events] == [StreamConnected, StreamStarted]
    if prelude == STOPPED:
        assert protocol.socket_closed() == [StreamStopped(1, "socket closed")]
    return protocol


def feed(protocol: VonageStreamProtocol, message: object) -> list:
    if isinstance(message, tuple) and message[0] == "binary":
        return protocol.receive_binary(message[1])
    if isinstance(message, dict):
        return protocol.receive_text(dumps(message))
    return protocol.receive_text(message)  # type: ignore[arg-type]


# --- valid input -----------------------------------------------------------------------------------

EXPECTED_CONNECTED = StreamConnected(fields=(
    ("call_id", CALL_ID), ("content-type", "audio/l16;rate=16000"), ("session_token", TOKEN), ("tenant", "acme"),
))
EXPECTED_START = StreamStarted(
    sequence_number=1,
    call_id=CALL_ID,
    stream_id="",
    account_id="",
    custom_parameters=(("call_id", CALL_ID), ("session_token", TOKEN), ("tenant", "acme")),
    encoding="l16",
    sample_rate_hz=16000,
    channels=1,
)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "utf8-bytes"])
def test_happy_call_gives_every_event(as_bytes: bool) -> None:
    protocol = VonageStreamProtocol()
    assert protocol.state is State.AWAITING_CONNECTED

    def text(message: dict) -> list:
        data = dumps(message)
        return protocol.receive_text(data.encode() if as_bytes else data)

    assert text(connected_msg()) == [EXPECTED_CONNECTED, EXPECTED_START]
    assert protocol.state is State.STREAMING
    assert (protocol.call_id, protocol.sample_rate_hz, protocol.frame_bytes) == (CALL_ID, 16000, 640)
    assert protocol.receive_binary(FRAME_16K) == [CallerAudio(2, 0, FRAME_16K)]
    assert protocol.receive_binary(FRAME_16K) == [CallerAudio(3, 20, FRAME_16K)]
    assert text(dtmf_msg()) == [Dtmf(4, "5")]
    assert protocol.receive_binary(FRAME_16K) == [CallerAudio(5, 40, FRAME_16K)]
    assert text(notify_msg()) == [MarkEcho(6, "3:5")]
    assert text(cleared_msg()) == [Cleared(7)]
    assert protocol.socket_closed() == [StreamStopped(7, "socket closed")]
    assert protocol.state is State.STOPPED
    assert protocol.violation is None
    stats = protocol.statistics()
    assert (stats.messages_received, stats.audio_frames, stats.audio_payload_bytes) == (7, 3, 3 * 640)
    assert (stats.marks_received, stats.dtmf_received, stats.clears_received) == (1, 1, 1)
    assert (stats.odd_sized_frames, stats.unknown_events, stats.violations) == (0, 0, 0)
    assert protocol.socket_closed() == []  # once


def test_audio_payload_is_not_copied() -> None:
    protocol = protocol_after(CONNECTED)
    (event,) = protocol.receive_binary(FRAME_16K)
    assert event.payload is FRAME_16K
    (event,) = protocol.receive_binary(bytearray(FRAME_16K))
    assert type(event.payload) is bytes and event.payload == FRAME_16K


def test_8khz_stream_and_its_timestamps() -> None:
    protocol = VonageStreamProtocol()
    _, start = protocol.receive_text(dumps(connected_msg(rate_hz=8000)))
    assert start.sample_rate_hz == 8000 and protocol.frame_bytes == 320
    timestamps = [protocol.receive_binary(FRAME_8K)[0].timestamp_ms for _ in range(4)]
    assert timestamps == [0, 20, 40, 60]
    assert protocol.statistics().odd_sized_frames == 0


def test_other_frame_sizes_are_accepted_and_counted() -> None:
    protocol = protocol_after(CONNECTED)
    sizes = [640, 320, 2, 1280, 640]  # 20, 10, 1/16, 40, 20 ms
    events = [protocol.receive_binary(bytes(size))[0] for size in sizes]
    assert [event.timestamp_ms for event in events] == [0, 20, 30, 30, 70]
    stats = protocol.statistics()
    assert (stats.audio_frames, stats.odd_sized_frames, stats.audio_payload_bytes) == (5, 3, sum(sizes))


def test_headers_of_any_json_type_and_account_id() -> None:
    message = connected_msg(account_id="app-1", age=40, roles=[1, 2], address={"city": "NYC"}, audit=False)
    connected, start = protocol_after(FRESH).receive_text(dumps(message))
    assert start.account_id == "app-1"
    assert start.custom_parameter("age") == "40"
    assert start.custom_parameter("roles") == "[1,2]"
    assert start.custom_parameter("address") == '{"city":"NYC"}'
    assert start.custom_parameter("audit") == "false"
    assert start.custom_parameter("session_token") == TOKEN
    assert [key for key, _ in start.custom_parameters] == ["call_id", "session_token", "tenant", "account_id",
                                                           "age", "roles", "address", "audit"]  # as sent
    assert [key for key, _ in connected.fields] == sorted(key for key in message if key != "event")
    assert hash(connected) == hash(connected) and hash(start) == hash(start)


@pytest.mark.parametrize("content_type", ["audio/l16;rate=16000", "audio/L16;rate=16000", "audio/l16; rate=16000"])
def test_content_type_spellings(content_type: str) -> None:
    message = bend(connected_msg(), "content-type", content_type)
    _, start = protocol_after(FRESH).receive_text(dumps(message))
    assert start.sample_rate_hz == 16000


def test_unknown_events_and_keys_are_ignored_while_streaming() -> None:
    protocol = protocol_after(CONNECTED)
    assert protocol.receive_text(dumps({"event": "websocket:media:update", "x": 1})) == []
    assert protocol.receive_text(dumps({"event": "", "anything": [1]})) == []
    assert protocol.receive_text(dumps({**cleared_msg(), "extra": {"x": 1}})) == [Cleared(4)]
    assert protocol.receive_text(dumps({**notify_msg(), "ts": 5})) == [MarkEcho(5, "3:5")]
    stats = protocol.statistics()
    assert (stats.unknown_events, stats.violations, stats.messages_received) == (2, 0, 5)


@pytest.mark.parametrize("digit", list("0123456789*#ABCD"))
def test_every_dtmf_key(digit: str) -> None:
    assert protocol_after(CONNECTED).receive_text(dumps(dtmf_msg(digit))) == [Dtmf(2, digit)]


@pytest.mark.parametrize("message", [
    {"event": "websocket:dtmf", "digit": "7"},  # no duration
    {"event": "websocket:dtmf", "digit": "7", "duration": "long"},  # duration is not used
    {"event": "websocket:dtmf", "dtmf": {"digit": "7", "duration": 100}},  # the nested form pipecat reads
], ids=["no-duration", "odd-duration", "nested"])
def test_dtmf_forms(message: dict) -> None:
    assert protocol_after(CONNECTED).receive_text(dumps(message)) == [Dtmf(2, "7")]


def test_mark_names_pass_through_unchanged() -> None:
    protocol = protocol_after(CONNECTED)
    for seq, name in enumerate(["7:5", "7:10:end", "", "naïve \"quoted\" \\ name"], start=2):
        assert protocol.receive_text(dumps(notify_msg(name))) == [MarkEcho(seq, name)]


def test_message_of_exactly_max_bytes_is_accepted() -> None:
    text = dumps(dtmf_msg())
    padded = text + " " * (MAX_MESSAGE_BYTES - len(text))
    assert protocol_after(CONNECTED).receive_text(padded) == [Dtmf(2, "5")]
    (event,) = protocol_after(CONNECTED).receive_binary(bytes(MAX_MESSAGE_BYTES))
    assert isinstance(event, CallerAudio)


def test_socket_closed_before_connected_or_after_a_violation_gives_nothing() -> None:
    assert protocol_after(FRESH).socket_closed() == []
    protocol = protocol_after(CONNECTED)
    protocol.receive_text("[]")
    assert protocol.socket_closed() == [] and protocol.state is State.CLOSED


# --- bad input: one table, one close code each ---------------------------------------------------

BIG = MAX_MESSAGE_BYTES + 1

# (id, prelude, message: dict | str | bytes | ("binary", bytes), expected close code)
BAD_INPUT: list[tuple[str, str, object, int]] = [
    # 1009: too big, text in UTF-8 bytes, or binary
    ("too-big-str", CONNECTED, " " * BIG, 1009),
    ("too-big-bytes", CONNECTED, b" " * BIG, 1009),
    ("too-big-multibyte", CONNECTED, '"' + "é" * (MAX_MESSAGE_BYTES // 2) + '"', 1009),
    ("too-big-binary", CONNECTED, ("binary", bytes(BIG + 1)), 1009),
    ("too-big-binary-before-connected", FRESH, ("binary", bytes(BIG + 1)), 1009),
    # 1007: not JSON / not an object / no event
    ("empty", CONNECTED, "", 1007),
    ("truncated", CONNECTED, '{"event":"websocket:dtmf"', 1007),
    ("not-utf8", CONNECTED, b'{"event":"\xff"}', 1007),
    ("nan", CONNECTED, '{"event":"websocket:dtmf","digit":NaN}', 1007),
    ("deep-nesting", CONNECTED, "[" * 30_000 + "]" * 30_000, 1007),
    ("array", FRESH, "[]", 1007),
    ("string", CONNECTED, '"websocket:cleared"', 1007),
    ("null", CONNECTED, "null", 1007),
    ("no-event", CONNECTED, "{}", 1007),
    ("our-own-clear-echoed", CONNECTED, {"action": "clear"}, 1007),
    ("event-int", CONNECTED, '{"event":1}', 1007),
    ("event-null", FRESH, '{"event":null}', 1007),
    # 1008: order
    ("binary-before-connected", FRESH, ("binary", FRAME_16K), 1008),
    ("dtmf-before-connected", FRESH, dtmf_msg(), 1008),
    ("notify-before-connected", FRESH, notify_msg(), 1008),
    ("cleared-before-connected", FRESH, cleared_msg(), 1008),
    ("unknown-before-connected", FRESH, {"event": "hello"}, 1008),
    ("second-connected", CONNECTED, connected_msg(), 1008),
    ("binary-after-close", STOPPED, ("binary", FRAME_16K), 1008),
    ("dtmf-after-close", STOPPED, dtmf_msg(), 1008),
    ("unknown-after-close", STOPPED, {"event": "hello"}, 1008),
    ("connected-after-close", STOPPED, connected_msg(), 1008),
    ("garbage-after-close-is-still-malformed", STOPPED, "nope", 1007),
    # 1007: websocket:connected
    ("connected-no-content-type", FRESH, bend(connected_msg(), "content-type", DELETE), 1007),
    ("connected-content-type-int", FRESH, bend(connected_msg(), "content-type", 16000), 1007),
    ("connected-mulaw", FRESH, bend(connected_msg(), "content-type", "audio/x-mulaw;rate=8000"), 1007),
    ("connected-rate-24k", FRESH, bend(connected_msg(), "content-type", "audio/l16;rate=24000"), 1007),
    ("connected-rate-44k", FRESH, bend(connected_msg(), "content-type", "audio/l16;rate=44100"), 1007),
    ("connected-no-rate", FRESH, bend(connected_msg(), "content-type", "audio/l16"), 1007),
    ("connected-rate-garbage", FRESH, bend(connected_msg(), "content-type", "audio/l16;rate=16000x"), 1007),
    ("connected-rate-huge", FRESH, bend(connected_msg(), "content-type", "audio/l16;rate=" + "9" * 5000), 1007),
    ("connected-no-call-id", FRESH, bend(connected_msg(), "call_id", DELETE), 1007),
    ("connected-call-id-empty", FRESH, bend(connected_msg(), "call_id", ""), 1007),
    ("connected-call-id-int", FRESH, bend(connected_msg(), "call_id", 5), 1007),
    ("connected-account-id-int", FRESH, connected_msg(account_id=5), 1007),
    # 1007: text events
    ("dtmf-no-digit", CONNECTED, bend(dtmf_msg(), "digit", DELETE), 1007),
    ("dtmf-two-digits", CONNECTED, dtmf_msg("12"), 1007),
    ("dtmf-empty", CONNECTED, dtmf_msg(""), 1007),
    ("dtmf-letter", CONNECTED, dtmf_msg("x"), 1007),
    ("dtmf-int", CONNECTED, dtmf_msg(5), 1007),
    ("dtmf-nested-bad", CONNECTED, {"event": "websocket:dtmf", "dtmf": {"digit": "55"}}, 1007),
    ("dtmf-nested-not-object", CONNECTED, {"event": "websocket:dtmf", "dtmf": "5"}, 1007),
    ("notify-no-payload", CONNECTED, bend(notify_msg(), "payload", DELETE), 1007),
    ("notify-payload-list", CONNECTED, bend(notify_msg(), "payload", ["mark"]), 1007),
    ("notify-no-mark", CONNECTED, bend(notify_msg(), "payload", {"customKey": "customValue"}), 1007),
    ("notify-mark-int", CONNECTED, notify_msg(3), 1007),
    # 1007: audio frames
    ("binary-empty", CONNECTED, ("binary", b""), 1007),
    ("binary-odd", CONNECTED, ("binary", FRAME_16K[:-1]), 1007),
    ("binary-one-byte", CONNECTED, ("binary", b"\x00"), 1007),
]


def assert_closed_for_good(protocol: VonageStreamProtocol, close_code: int) -> None:
    assert protocol.state is State.CLOSED
    assert protocol.violation is not None and protocol.violation.close_code == close_code
    before = protocol.statistics()
    assert before.violations == 1
    # Everything after a violation is ignored, valid or not, text or binary.
    for message in [connected_msg(), dtmf_msg(), ("binary", FRAME_16K), "garbage", {"event": "x"}]:
        assert feed(protocol, message) == []
    assert protocol.socket_closed() == []
    assert protocol.state is State.CLOSED
    assert protocol.statistics() == before


@pytest.mark.parametrize(
    ("prelude", "message", "close_code"), [case[1:] for case in BAD_INPUT], ids=[case[0] for case in BAD_INPUT]
)
def test_bad_input_gives_close_code_then_ignores_input(prelude: str, message: object, close_code: int) -> None:
    protocol = protocol_after(prelude)
    stats_before = protocol.statistics()
    events = feed(protocol, message)
    assert len(events) == 1
    (violation,) = events
    assert isinstance(violation, ProtocolViolation)
    assert violation.close_code == close_code and type(violation.close_code) is int
    assert violation.reason and len(violation.reason.encode()) <= 123  # fits a WebSocket close frame
    stats_after = protocol.statistics()
    assert stats_after.audio_frames == stats_before.audio_frames
    assert stats_after.messages_received == stats_before.messages_received + 1
    assert_closed_for_good(protocol, close_code)


def test_close_code_table_is_the_documented_one() -> None:
    assert {code.name: int(code) for code in CloseCode} == {
        "INVALID_PAYLOAD": 1007,
        "POLICY_VIOLATION": 1008,
        "MESSAGE_TOO_BIG": 1009,
    }
    assert {case[3] for case in BAD_INPUT} == {int(code) for code in CloseCode}


def test_reasons_never_echo_peer_data() -> None:
    protocol = protocol_after(CONNECTED)
    (violation,) = protocol.receive_text(dumps(dtmf_msg("secret-4242")))
    assert "4242" not in violation.reason and "secret" not in violation.reason
    (violation,) = protocol_after(FRESH).receive_text(dumps({"event": "secret-4242"}))
    assert "4242" not in violation.reason


# --- garbage after, and truncation of, every valid text message ---------------------------------------

VALID_IN_CONTEXT = [
    ("connected", FRESH, connected_msg()),
    ("dtmf", CONNECTED, dtmf_msg()),
    ("notify", CONNECTED, notify_msg()),
    ("cleared", CONNECTED, cleared_msg()),
]
VALID_CASES = [case[1:] for case in VALID_IN_CONTEXT]
VALID_IDS = [case[0] for case in VALID_IN_CONTEXT]
GARBAGE = ["x", "}", "]", "{}", "[]", "\n{}", ",", "0", '"', "null", "\x00", "é", dumps(cleared_msg())]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize(("prelude", "message"), VALID_CASES, ids=VALID_IDS)
def test_valid_message_with_garbage_after_is_1007(prelude: str, message: dict, garbage: str,
                                                   as_bytes: bool) -> None:
    events = protocol_after(prelude).receive_text(dumps(message))
    assert events and not any(isinstance(event, ProtocolViolation) for event in events)
    protocol = protocol_after(prelude)
    text = dumps(message) + garbage
    (violation,) = protocol.receive_text(text.encode() if as_bytes else text)
    assert violation == ProtocolViolation(1007, "not a JSON value")
    assert_closed_for_good(protocol, 1007)


@pytest.mark.parametrize(("prelude", "message"), VALID_CASES, ids=VALID_IDS)
def test_every_truncation_of_a_valid_message_is_1007(prelude: str, message: dict) -> None:
    whole = dumps(bend(message, "extra", "naïve")).encode()  # a multi-byte character to cut through
    for cut in range(len(whole)):
        (violation,) = protocol_after(prelude).receive_text(whole[:cut])
        assert isinstance(violation, ProtocolViolation) and violation.close_code == 1007, cut


# --- deadline ------------------------------------------------------------------------------------


def test_deadline_violation() -> None:
    protocol = protocol_after(FRESH)
    violation = protocol.deadline_violation()
    assert violation == ProtocolViolation(1008, "no websocket:connected within 5 s")
    assert protocol.violation == violation
    assert_closed_for_good(protocol, 1008)


def test_deadline_after_close_does_not_count_twice() -> None:
    protocol = protocol_after(FRESH)
    protocol.receive_binary(FRAME_16K)
    assert protocol.deadline_violation().close_code == 1008
    assert protocol.violation == ProtocolViolation(1008, "audio before websocket:connected")
    assert protocol.statistics().violations == 1


# --- no input can make it raise ------------------------------------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_near_messages = st.fixed_dictionaries(
    {"event": st.sampled_from(["websocket:connected", "websocket:dtmf", "websocket:notify", "websocket:cleared",
                               "other"])},
    optional={
        "content-type": st.sampled_from(["audio/l16;rate=16000", "audio/l16;rate=8000", "x"]) | _json_values,
        "call_id": st.just(CALL_ID) | _json_values,
        "account_id": _json_values,
        "digit": st.sampled_from(["5", "#", "55"]) | _json_values,
        "dtmf": _json_values,
        "payload": st.fixed_dictionaries({}, optional={"mark": st.text(max_size=4) | _json_values}) | _json_values,
    },
)


@given(
    prelude=st.sampled_from([FRESH, CONNECTED, STOPPED]),
    inputs=st.lists(
        st.text(max_size=40) | st.binary(max_size=40) | _near_messages.map(dumps)
        | st.binary(max_size=700).map(lambda data: ("binary", data)),
        max_size=6,
    ),
)
def test_arbitrary_input_never_raises(prelude: str, inputs: list) -> None:
    protocol = protocol_after(prelude)
    for data in inputs:
        events = feed(protocol, data)
        assert len(events) <= 2
        if protocol.state is State.CLOSED:
            assert protocol.statistics().violations == 1
    protocol.socket_closed()


# --- outbound --------------------------------------------------------------------------------------


def test_encoder_media_is_one_binary_frame_of_20_ms() -> None:
    encoder = VonageOutboundEncoder()
    assert (encoder.sample_rate_hz, encoder.frame_bytes) == (16000, 640)
    out = encoder.media(FRAME_16K)
    assert out == Outbound(FRAME_16K, binary=True) and out.data is FRAME_16K
    assert VonageOutboundEncoder(8000).media(FRAME_8K) == Outbound(FRAME_8K, binary=True)
    assert VonageOutboundEncoder(16000).media(bytearray(FRAME_16K)).data == FRAME_16K


@pytest.mark.parametrize("size", [0, 1, 320, 639, 641, 1280])
def test_encoder_rejects_frames_that_are_not_20_ms(size: int) -> None:
    with pytest.raises(ValueError):
        VonageOutboundEncoder(16000).media(bytes(size))


@pytest.mark.parametrize("rate", [24000, 44100, 0, "16000", None])
def test_encoder_rejects_rates_vonage_does_not_offer(rate: object) -> None:
    with pytest.raises(ValueError):
        VonageOutboundEncoder(rate)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["1:5", "1:10:end", "mark \"quoted\" \\ back", "naïve ☎", "\n\t"])
def test_mark_is_a_notify_with_the_name(name: str) -> None:
    out = VonageOutboundEncoder().mark(name)
    assert out.binary is False
    assert json.loads(out.data) == {"action": "notify", "payload": {"mark": name}}
    out.data.decode("ascii")  # escaped, so always ASCII
    assert out.data == NOTIFY_HEAD + json.dumps(name).encode() + NOTIFY_TAIL  # compact, key order fixed
    assert NOTIFY_HEAD == b'{"action":"notify","payload":{"mark":' and NOTIFY_TAIL == b"}}"


@pytest.mark.parametrize("name", ["", None, 5, "\ud800"])  # a lone surrogate is no JSON a peer parses
def test_mark_rejects_unusable_names(name: object) -> None:
    with pytest.raises(ValueError):
        VonageOutboundEncoder().mark(name)  # type: ignore[arg-type]


def test_clear_is_the_documented_text() -> None:
    out = VonageOutboundEncoder().clear()
    assert out == Outbound(b'{"action":"clear"}', binary=False) and out.data == CLEAR_MESSAGE


# --- round trips through the carrier's side ----------------------------------------------------------


def test_carrier_side_opening_reaches_the_protocol() -> None:
    carrier = VonageCarrierSide(HEADERS)
    protocol = VonageStreamProtocol()
    opening = carrier.connected()
    assert opening.binary is False
    assert json.loads(opening.data) == connected_msg()
    assert protocol.receive_text(opening.data) == [EXPECTED_CONNECTED, EXPECTED_START]
    assert protocol.receive_binary(carrier.audio(FRAME_16K).data) == [CallerAudio(2, 0, FRAME_16K)]
    assert carrier.audio(FRAME_16K).binary is True
    assert protocol.receive_text(carrier.dtmf("#").data) == [Dtmf(3, "#")]
    assert json.loads(carrier.dtmf("#").data) == {"event": "websocket:dtmf", "digit": "#", "duration": 260}
    assert protocol.receive_text(carrier.cleared().data) == [Cleared(4)]


@pytest.mark.parametrize("name", ["1:5", "9:12:end", "naïve \"q\" \\", "\U0001f4de"])
def test_mark_round_trip_through_the_carrier(name: str) -> None:
    encoder, carrier = VonageOutboundEncoder(), VonageCarrierSide(HEADERS)
    protocol = protocol_after(CONNECTED)
    sent = encoder.mark(name)
    received = carrier.receive(sent.data, sent.binary)
    assert isinstance(received, SentNotify) and received.mark == name
    echo = carrier.notify_echo(received)
    assert json.loads(echo.data) == {"event": "websocket:notify", "payload": {"mark": name}}
    assert protocol.receive_text(echo.data) == [MarkEcho(2, name)]


def test_clear_and_media_round_trip_through_the_carrier() -> None:
    encoder, carrier = VonageOutboundEncoder(8000), VonageCarrierSide(HEADERS, sample_rate_hz=8000)
    media = encoder.media(FRAME_8K)
    assert carrier.receive(media.data, media.binary) == SentAudio(FRAME_8K)
    clear = encoder.clear()
    assert carrier.receive(clear.data, clear.binary) == SentClear()
    protocol = VonageStreamProtocol()
    protocol.receive_text(carrier.connected().data)
    assert protocol.receive_text(carrier.cleared().data) == [Cleared(2)]


def test_carrier_echoes_a_foreign_notify_payload_verbatim() -> None:
    carrier = VonageCarrierSide(HEADERS)
    received = carrier.receive('{"action":"notify","payload":{"customKey":"customValue","n":[1,2]}}', False)
    assert isinstance(received, SentNotify) and received.mark is None
    assert json.loads(carrier.notify_echo(received).data) == {
        "event": "websocket:notify", "payload": {"customKey": "customValue", "n": [1, 2]}}
    # ...which our protocol refuses: only voicecore sends notifies, and always with a mark.
    (violation,) = protocol_after(CONNECTED).receive_text(carrier.notify_echo(received).data)
    assert violation.close_code == 1007


@pytest.mark.parametrize(("data", "binary", "reason"), [
    (FRAME_16K[:320], True, "audio frame is not 20 ms"),
    (b"", True, "audio frame is not 20 ms"),
    ('{"action":"clear"', False, "not a JSON value"),
    (b'{"action":"\xff"}', False, "not UTF-8"),
    ("[]", False, "not a JSON object"),
    ('{"action":"stop"}', False, "unknown action"),
    ('{"event":"clear"}', False, "unknown action"),
    ('{"action":"notify"}', False, "notify payload is not an object"),
    ('{"action":"notify","payload":"x"}', False, "notify payload is not an object"),
    (" " * BIG, False, "message too big"),
])
def test_carrier_side_flags_what_vonage_would_not_accept(data: object, binary: bool, reason: str) -> None:
    assert VonageCarrierSide(HEADERS).receive(data, binary) == SentInvalid(reason)  # type: ignore[arg-type]


def test_carrier_side_misuse_raises() -> None:
    with pytest.raises(ValueError):
        VonageCarrierSide({"event": "x"})
    with pytest.raises(ValueError):
        VonageCarrierSide({"content-type": "x"})
    with pytest.raises(ValueError):
        VonageCarrierSide(HEADERS, sample_rate_hz=24000)
    for digit in ["", "12", "x"]:
        with pytest.raises(ValueError):
            VonageCarrierSide(HEADERS).dtmf(digit)


# --- caller audio through the protocol and the edge transcoder ------------------------------------------


@pytest.mark.parametrize("rate_hz", [8000, 16000])
def test_audio_through_protocol_and_transcoder_gives_arena_frames_and_back(rate_hz: int) -> None:
    carrier = VonageCarrierSide(HEADERS, sample_rate_hz=rate_hz)
    protocol = VonageStreamProtocol()
    (_, start) = protocol.receive_text(carrier.connected().data)
    transcoder = EdgeTranscoder(start.encoding, start.sample_rate_hz)
    inbound = Framer(FRAME_BYTES)
    tone = (0.3 * 32767 * np.sin(2 * np.pi * 440 * np.arange(rate_hz) / rate_hz)).astype("<i2").tobytes()
    size = frame_bytes(rate_hz)
    arena_frames = []
    for offset in range(0, len(tone), size):
        (audio,) = protocol.receive_binary(carrier.audio(tone[offset : offset + size]).data)
        assert isinstance(audio, CallerAudio)
        arena_frames += inbound.push(transcoder.to_ulaw(audio.payload))
    assert len(arena_frames) == 50 and all(len(frame) == FRAME_BYTES for frame in arena_frames)
    assert inbound.pending_bytes == 0
    # ...and what the pacer sends goes back out as exact Vonage frames the carrier accepts.
    encoder = VonageOutboundEncoder(rate_hz)
    outbound = Framer(encoder.frame_bytes)
    played = []
    for frame in arena_frames:
        for carrier_frame in outbound.push(transcoder.from_ulaw(frame)):
            message = encoder.media(carrier_frame)
            received = carrier.receive(message.data, message.binary)
            assert isinstance(received, SentAudio)
            played.append(received.payload)
    assert len(played) == 50 and outbound.pending_bytes == 0
    back = np.frombuffer(b"".join(played), dtype="<i2").astype(np.float64)[rate_hz // 10 :]
    level = np.sqrt(np.mean(back**2)) / (0.3 * 32767 / np.sqrt(2))
    assert 0.95 < level < 1.05


# --- the answer NCCO ---------------------------------------------------------------------------------


def test_ncco_shape() -> None:
    ncco = ncco_connect_websocket("wss://gw.example.com/vonage", {"call_id": CALL_ID, "session_token": TOKEN})
    assert ncco == [{
        "action": "connect",
        "endpoint": [{
            "type": "websocket",
            "uri": "wss://gw.example.com/vonage",
            "content-type": "audio/l16;rate=16000",
            "headers": {"call_id": CALL_ID, "session_token": TOKEN},
        }],
    }]
    assert json.loads(json.dumps(ncco)) == ncco
    (endpoint,) = ncco_connect_websocket("ws://127.0.0.1:1/v", {}, 8000)[0]["endpoint"]
    assert endpoint["content-type"] == "audio/l16;rate=8000"


def test_ncco_headers_come_back_in_websocket_connected() -> None:
    headers = {"call_id": CALL_ID, "session_token": TOKEN}
    endpoint = ncco_connect_websocket("wss://gw.example.com/vonage", headers)[0]["endpoint"][0]
    carrier = VonageCarrierSide(endpoint["headers"], sample_rate_hz=16000)
    _, start = VonageStreamProtocol().receive_text(carrier.connected().data)
    assert start.call_id == CALL_ID and start.custom_parameter("session_token") == TOKEN


@pytest.mark.parametrize(("uri", "headers", "rate"), [
    ("https://gw.example.com/vonage", {}, 16000),
    ("gw.example.com", {}, 16000),
    ("wss://gw.example.com/vonage", {}, 24000),
    ("wss://gw.example.com/vonage", {"n": 1}, 16000),
    ("wss://gw.example.com/vonage", {"event": "x"}, 16000),
    ("wss://gw.example.com/vonage", {"content-type": "x"}, 16000),
    ("wss://gw.example.com/vonage", {"pad": "x" * MAX_NCCO_HEADERS_BYTES}, 16000),
])
def test_ncco_rejects_what_vonage_would_not_take(uri: str, headers: dict, rate: int) -> None:
    with pytest.raises(ValueError):
        ncco_connect_websocket(uri, headers, rate)


def test_ncco_headers_up_to_512_bytes() -> None:
    pad = "x" * (MAX_NCCO_HEADERS_BYTES - len('{"pad":""}'))
    ncco_connect_websocket("wss://gw.example.com/vonage", {"pad": pad})
    with pytest.raises(ValueError):
        ncco_connect_websocket("wss://gw.example.com/vonage", {"pad": pad + "x"})


# --- signed webhooks ---------------------------------------------------------------------------------

SECRET = "vonage-signature-secret-0123456789abcdef"
SHORT_SECRET = "abc123"  # Vonage lets accounts choose short ones
BODY = b'{"status":"answered","uuid":"63f61863-4a51-4f6b-86e1-46edebcf9356"}'
NOW_S = 1_700_000_000


def header(body: bytes = BODY, secret: str = SECRET, iat: int = NOW_S) -> str:
    return sign_webhook(body, secret, iat, jti="c5ba8f24-1a14-4c10-bfdf-3fbe8ce511b5", api_key="a1b2c3d",
                        application_id="aaaaaaaa-bbbb-cccc-dddd-0123456789ab")


def raw_token(claims: dict, secret: str = SECRET, algorithm: str = "HS256") -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return "Bearer " + jwt.encode(claims, secret, algorithm=algorithm)


def good_claims(**changes: object) -> dict:
    claims = {"iat": NOW_S, "jti": "j", "iss": "Vonage", "payload_hash": hashlib.sha256(BODY).hexdigest(),
              "api_key": "a1b2c3d"}
    claims.update(changes)
    return {key: value for key, value in claims.items() if value is not DELETE}


def test_signed_webhook_good() -> None:
    authorization = header()
    assert authorization.startswith("Bearer ")
    claims = jwt.decode(authorization[7:], SECRET, algorithms=["HS256"], options={"verify_iat": False})
    assert claims == {"iat": NOW_S, "jti": "c5ba8f24-1a14-4c10-bfdf-3fbe8ce511b5", "iss": "Vonage",
                      "payload_hash": hashlib.sha256(BODY).hexdigest(), "api_key": "a1b2c3d",
                      "application_id": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab"}
    assert jwt.get_unverified_header(authorization[7:])["alg"] == "HS256"
    assert verify_signed_webhook(authorization, BODY, SECRET, NOW_S)
    assert verify_signed_webhook(authorization, BODY, SECRET, NOW_S + 300)  # at the edge of max_age_s
    assert verify_signed_webhook(authorization, BODY, SECRET, NOW_S - 60)  # Vonage's clock a minute ahead
    assert verify_signed_webhook("bearer " + authorization[7:], BODY, SECRET, NOW_S)
    assert verify_signed_webhook("  Bearer  " + authorization[7:] + " ", BODY, SECRET, NOW_S)
    assert verify_signed_webhook(header(b""), b"", SECRET, NOW_S)  # a GET has an empty body
    assert verify_signed_webhook(raw_token(good_claims(payload_hash=hashlib.sha256(BODY).hexdigest().upper())),
                                 BODY, SECRET, NOW_S)


def test_short_secrets_work_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        authorization = header(secret=SHORT_SECRET)
        assert verify_signed_webhook(authorization, BODY, SHORT_SECRET, NOW_S)


def tampered_signature(authorization: str) -> str:
    head, payload, signature = authorization[7:].split(".")
    raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    raw[0] ^= 1
    return "Bearer " + ".".join([head, payload, base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()])


def tampered_claims(authorization: str) -> str:
    head, payload, signature = authorization[7:].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["payload_hash"] = hashlib.sha256(b"other").hexdigest()
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return "Bearer " + ".".join([head, forged, signature])


BAD_WEBHOOKS = [
    ("tampered-body", header(), BODY + b" ", NOW_S),
    ("other-body", header(), b"{}", NOW_S),
    ("tampered-signature", tampered_signature(header()), BODY, NOW_S),
    ("tampered-claims", tampered_claims(header()), BODY, NOW_S),
    ("wrong-secret", header(secret="another-secret-0123456789abcdef0123"), BODY, NOW_S),
    ("expired", header(), BODY, NOW_S + 301),
    ("issued-in-the-future", header(), BODY, NOW_S - 61),
    ("wrong-hash", raw_token(good_claims(payload_hash="0" * 64)), BODY, NOW_S),
    ("hash-not-a-string", raw_token(good_claims(payload_hash=5)), BODY, NOW_S),
    ("no-hash", raw_token(good_claims(payload_hash=DELETE)), BODY, NOW_S),
    ("no-iat", raw_token(good_claims(iat=DELETE)), BODY, NOW_S),
    ("iat-string", raw_token(good_claims(iat="1700000000")), BODY, NOW_S),
    ("iat-bool", raw_token(good_claims(iat=True)), BODY, NOW_S),
    ("exp-passed", raw_token(good_claims(exp=NOW_S)), BODY, NOW_S),
    ("exp-not-a-number", raw_token(good_claims(exp="soon")), BODY, NOW_S),
    ("nbf-later", raw_token(good_claims(nbf=NOW_S + 600)), BODY, NOW_S),
    ("hs512", raw_token(good_claims(), algorithm="HS512"), BODY, NOW_S),
    ("alg-none", "Bearer " + jwt.encode(good_claims(), None, algorithm="none"), BODY, NOW_S),
    ("no-scheme", header()[7:], BODY, NOW_S),
    ("basic-scheme", "Basic " + header()[7:], BODY, NOW_S),
    ("bearer-only", "Bearer ", BODY, NOW_S),
    ("empty", "", BODY, NOW_S),
    ("none", None, BODY, NOW_S),
    ("not-a-jwt", "Bearer not.a.jwt", BODY, NOW_S),
    ("two-parts", "Bearer abc.def", BODY, NOW_S),
    ("non-ascii", "Bearer é.é.é", BODY, NOW_S),
]


@pytest.mark.parametrize(("authorization", "body", "now_s"), [case[1:] for case in BAD_WEBHOOKS],
                         ids=[case[0] for case in BAD_WEBHOOKS])
def test_signed_webhook_rejects(authorization: str | None, body: bytes, now_s: int) -> None:
    assert verify_signed_webhook(authorization, body, SECRET, now_s) is False


def test_exp_in_the_future_and_max_age_are_honoured() -> None:
    assert verify_signed_webhook(raw_token(good_claims(exp=NOW_S + 10)), BODY, SECRET, NOW_S)
    assert not verify_signed_webhook(header(), BODY, SECRET, NOW_S + 31, max_age_s=30)
    assert verify_signed_webhook(header(), BODY, SECRET, NOW_S + 30, max_age_s=30)


def test_empty_secret_is_our_misuse() -> None:
    with pytest.raises(ValueError):
        verify_signed_webhook(header(), BODY, "", NOW_S)
    with pytest.raises(ValueError):
        sign_webhook(BODY, "", NOW_S, jti="j")


@given(authorization=st.none() | st.text(max_size=80) | st.text(max_size=40).map(lambda text: "Bearer " + text),
       body=st.binary(max_size=20))
def test_no_header_makes_verification_raise(authorization: str | None, body: bytes) -> None:
    assert verify_signed_webhook(authorization, body, SECRET, NOW_S) is False


# --- the same JWT on the WebSocket upgrade ---------------------------------------------------------------


def test_the_ncco_asks_for_the_jwt_on_the_upgrade_only_when_told() -> None:
    (plain,) = ncco_connect_websocket("wss://gw.example.com/v", {})[0]["endpoint"]
    (signed,) = ncco_connect_websocket("wss://gw.example.com/v", {}, signed_upgrade=True)[0]["endpoint"]
    assert "authorization" not in plain and signed["authorization"] == {"type": "vonage"}


def test_upgrade_jwt_good() -> None:
    # An upgrade has no body: whatever payload_hash the JWT holds is not compared (or may be absent).
    assert verify_upgrade_jwt(header(b""), SECRET, NOW_S)
    assert verify_upgrade_jwt(header(BODY), SECRET, NOW_S + 300)
    assert verify_upgrade_jwt(raw_token(good_claims(payload_hash=DELETE)), SECRET, NOW_S - 60)


BAD_UPGRADES = [case for case in BAD_WEBHOOKS
                if case[0] not in ("tampered-body", "other-body", "wrong-hash", "hash-not-a-string", "no-hash")]


@pytest.mark.parametrize(("authorization", "now_s"), [(case[1], case[3]) for case in BAD_UPGRADES],
                         ids=[case[0] for case in BAD_UPGRADES])
def test_upgrade_jwt_rejects(authorization: str | None, now_s: int) -> None:
    assert verify_upgrade_jwt(authorization, SECRET, now_s) is False


def test_upgrade_jwt_max_age_and_misuse() -> None:
    assert not verify_upgrade_jwt(header(), SECRET, NOW_S + 31, max_age_s=30)
    with pytest.raises(ValueError):
        verify_upgrade_jwt(header(), "", NOW_S)
