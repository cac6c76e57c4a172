"""Exotel Voicebot stream core (voicecore/carriers/exotel/protocol.py): every inbound event, every bad-input class and
its close code, each message whole / with garbage after it / truncated, a stream fed message by message,
the run-time media format, outbound shapes checked by Exotel's end (ExotelCarrierSide), the chunk rules
and the ChunkBatcher's ordering (marks never overtake their audio; padding only at an end), the dynamic
URL answer, the stream URL and Basic auth.

Message shapes follow developer.exotel.com/docs/agentstream/websocket-protocol (string counters,
snake_case keys); see the module docstring for the sources of each rule.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.events import (
    CallerAudio,
    CarrierEncoder,
    CarrierStream,
    Dtmf,
    MarkEcho,
    Outbound,
    ProtocolViolation,
    StreamConnected,
    StreamStarted,
    StreamStopped,
)
from voicecore.carriers.exotel.protocol import (
    CallParties,
    ChunkBatcher,
    ChunkMark,
    ChunkMedia,
    ClearedChunk,
    ExotelCarrierSide,
    ExotelOutboundEncoder,
    ExotelStreamProtocol,
    OutboundRejected,
    SentClear,
    SentMark,
    SentMedia,
    State,
    check_basic_auth,
    with_basic_auth,
    chunk_rules,
    frame_bytes,
    silence,
    voicebot_stream_url,
    voicebot_url_response,
)
from voicecore.timing import MAX_MESSAGE_BYTES

STREAM_SID = "MZ18ad3ab5a668481ce02b83e7395059f0"
OTHER_STREAM_SID = "MZ00000000000000000000000000000000"
CALL_SID = "c5797dcbaaeed7678c4a7a1a1e35d19b"
OTHER_CALL_SID = "00000000000000000000000000000000"
ACCOUNT_SID = "acme1"
FROM_NUMBER = "+910000000001"  # fake numbers: they must never show up in an event or a repr
TO_NUMBER = "+910000000002"
L16_100MS = bytes(range(256)) * 6 + bytes(range(64))  # 1600 bytes: 100 ms of 16-bit 8 kHz
L16_100MS_B64 = base64.b64encode(L16_100MS).decode("ascii")
FORMATS = [("l16", 8000), ("l16", 16000), ("l16", 24000), ("pcmu", 8000)]


# --- message builders (dicts, so a test can bend one field) ----------------------------------------


def connected_msg() -> dict:
    return {"event": "connected"}


def start_msg(seq: str = "1", custom: dict | None = None, encoding: str = "audio/x-raw", rate: object = "8000") -> dict:
    return {
        "event": "start",
        "sequence_number": seq,
        "stream_sid": STREAM_SID,
        "start": {
            "stream_sid": STREAM_SID,
            "call_sid": CALL_SID,
            "account_sid": ACCOUNT_SID,
            "from": FROM_NUMBER,
            "to": TO_NUMBER,
            "custom_parameters": {"session_token": "tok-123", "tenant": "acme"} if custom is None else custom,
            "media_format": {"encoding": encoding, "sample_rate": rate, "bit_rate": "16"},
        },
    }


def media_msg(seq: str = "2", chunk: str = "1", timestamp: str = "100", payload: str = L16_100MS_B64) -> dict:
    return {
        "event": "media",
        "sequence_number": seq,
        "stream_sid": STREAM_SID,
        "media": {"chunk": chunk, "timestamp": timestamp, "payload": payload},
    }


def dtmf_msg(seq: str = "3", digit: str = "5") -> dict:
    return {"event": "dtmf", "sequence_number": seq, "stream_sid": STREAM_SID,
            "dtmf": {"digit": digit, "duration": "100"}}


def mark_msg(seq: str = "4", name: str = "3:5") -> dict:
    return {"event": "mark", "sequence_number": seq, "stream_sid": STREAM_SID, "mark": {"name": name}}


def stop_msg(seq: str = "5", reason: str = "callended") -> dict:
    return {
        "event": "stop",
        "sequence_number": seq,
        "stream_sid": STREAM_SID,
        "stop": {"call_sid": CALL_SID, "account_sid": ACCOUNT_SID, "reason": reason},
    }


def dumps(message: dict) -> str:
    return json.dumps(message)


DELETE = object()


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


PRELUDES = {
    "fresh": [],
    "connected": [connected_msg()],
    "started": [connected_msg(), start_msg()],
    "stopped": [connected_msg(), start_msg(), stop_msg(seq="2")],
}


def protocol_after(prelude: str, start: dict | None = None) -> ExotelStreamProtocol:
    protocol = ExotelStreamProtocol()
    messages = PRELUDES[prelude]
    if start is not None:
        messages = [connected_msg(), start]
    for message in messages:
        events = protocol.receive_text(dumps(message))
        assert not any(isinstance(event, ProtocolViolation) for event in events), events
    return protocol


def only(events: list) -> object:
    (event,) = events
    return event


# --- valid input -----------------------------------------------------------------------------------

EXPECTED_START = StreamStarted(
    sequence_number=1,
    call_id=CALL_SID,
    stream_id=STREAM_SID,
    account_id=ACCOUNT_SID,
    custom_parameters=(("session_token", "tok-123"), ("tenant", "acme")),
    encoding="l16",
    sample_rate_hz=8000,
    channels=1,
)

HAPPY_CALL: list[tuple[dict, object, State]] = [
    (connected_msg(), StreamConnected(), State.AWAITING_START),
    (start_msg(), EXPECTED_START, State.STREAMING),
    (media_msg(), CallerAudio(sequence_number=2, timestamp_ms=100, payload=L16_100MS), State.STREAMING),
    (dtmf_msg(), Dtmf(sequence_number=3, digit="5"), State.STREAMING),
    (mark_msg(), MarkEcho(sequence_number=4, name="3:5"), State.STREAMING),
    (stop_msg(seq="6"), StreamStopped(sequence_number=6, reason="callended"), State.STOPPED),
]


def test_the_module_implements_the_carrier_interfaces() -> None:
    stream: CarrierStream = ExotelStreamProtocol()
    encoder: CarrierEncoder = ExotelOutboundEncoder(STREAM_SID, "l16", 8000)
    assert callable(stream.receive_text) and callable(encoder.media)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "utf8-bytes"])
def test_happy_call_parses_every_event(as_bytes: bool) -> None:
    protocol = ExotelStreamProtocol()
    assert protocol.state is State.AWAITING_CONNECTED
    for message, expected, state in HAPPY_CALL:
        text = dumps(message)
        assert protocol.receive_text(text.encode() if as_bytes else text) == [expected]
        assert protocol.state is state
    assert (protocol.stream_sid, protocol.call_sid, protocol.account_sid) == (STREAM_SID, CALL_SID, ACCOUNT_SID)
    assert (protocol.encoding, protocol.sample_rate_hz, protocol.frame_bytes) == ("l16", 8000, 320)
    assert protocol.chunk_rules == chunk_rules("l16", 8000)
    assert protocol.last_sequence_number == 6 and protocol.violation is None
    stats = protocol.statistics()
    assert (stats.messages_received, stats.media_messages, stats.media_payload_bytes) == (6, 1, 1600)
    assert (stats.marks_received, stats.dtmf_received, stats.violations) == (1, 1, 0)
    assert (stats.sequence_gaps, stats.sequence_reordered) == (1, 0)  # seq 5 never came


def test_phone_numbers_stay_out_of_events_and_reprs() -> None:
    protocol = protocol_after("started")
    assert protocol.call_parties == CallParties(from_number=FROM_NUMBER, to_number=TO_NUMBER)
    assert protocol.call_parties.from_number == FROM_NUMBER
    for text in (repr(protocol.call_parties), repr(EXPECTED_START), repr(protocol.statistics())):
        assert FROM_NUMBER not in text and TO_NUMBER not in text
    events = protocol_after("connected").receive_text(dumps(start_msg()))
    assert FROM_NUMBER not in repr(events) and TO_NUMBER not in repr(events)


def test_start_without_from_and_to_is_accepted() -> None:
    start = bend(bend(start_msg(), "start.from", DELETE), "start.to", DELETE)
    protocol = protocol_after("connected", start)
    assert protocol.call_parties == CallParties("", "")


def test_start_without_connected_is_tolerated() -> None:
    protocol = ExotelStreamProtocol()
    assert protocol.receive_text(dumps(start_msg())) == [EXPECTED_START]
    assert protocol.state is State.STREAMING


def test_connected_keeps_protocol_and_version_only() -> None:
    message = {"event": "connected", "protocol": "Exotel Media Stream", "version": "1.0.0", "x": "y", "n": 1}
    assert ExotelStreamProtocol().receive_text(dumps(message)) == [
        StreamConnected(fields=(("protocol", "Exotel Media Stream"), ("version", "1.0.0")))
    ]


# encoding name as Exotel may write it, sample_rate as string or number -> (our encoding, rate)
MEDIA_FORMATS = [
    ("audio/x-raw", "8000", ("l16", 8000)),
    ("audio/x-raw", 16000, ("l16", 16000)),
    ("audio/x-raw", "24000", ("l16", 24000)),
    ("raw/slin", "8000", ("l16", 8000)),
    ("linear16", 8000, ("l16", 8000)),
    ("audio/L16;rate=16000", "16000", ("l16", 16000)),
    ("AUDIO/L16; rate=8000", DELETE, ("l16", 8000)),
    ("audio/L16;channels=1", "8000", ("l16", 8000)),  # a parameter other than rate is ignored
    ("audio/x-mulaw", "8000", ("pcmu", 8000)),
    ("audio/x-mulaw;rate=8000", "8000", ("pcmu", 8000)),
    ("mulaw", 8000, ("pcmu", 8000)),
]


@pytest.mark.parametrize(("name", "rate", "expected"), MEDIA_FORMATS)
def test_media_format_is_read_at_run_time(name: str, rate: object, expected: tuple[str, int]) -> None:
    start = start_msg(encoding=name)
    start = bend(start, "start.media_format.sample_rate", rate)
    if expected[0] == "pcmu":
        start = bend(start, "start.media_format.bit_rate", "8")
    protocol = ExotelStreamProtocol()
    event = only(protocol.receive_text(dumps(start)))
    assert isinstance(event, StreamStarted)
    assert (event.encoding, event.sample_rate_hz) == expected
    assert protocol.frame_bytes == frame_bytes(*expected)
    assert protocol.outbound_encoder().rules == chunk_rules(*expected)


def test_start_with_stream_sid_in_one_place_only() -> None:
    for path in ("stream_sid", "start.stream_sid"):
        event = only(ExotelStreamProtocol().receive_text(dumps(bend(start_msg(), path, DELETE))))
        assert isinstance(event, StreamStarted) and event.stream_id == STREAM_SID


def test_start_without_custom_parameters_or_bit_rate() -> None:
    start = bend(bend(start_msg(), "start.custom_parameters", DELETE), "start.media_format.bit_rate", DELETE)
    event = only(ExotelStreamProtocol().receive_text(dumps(start)))
    assert isinstance(event, StreamStarted) and event.custom_parameters == ()


def test_stream_started_is_hashable_and_looks_up_parameters() -> None:
    assert hash(EXPECTED_START) == hash(EXPECTED_START)
    assert EXPECTED_START.custom_parameter("tenant") == "acme"
    assert EXPECTED_START.custom_parameter("missing", "x") == "x"


def test_unknown_keys_are_ignored() -> None:
    protocol = protocol_after("started")
    message = bend(media_msg(), "media.extra", {"x": 1})
    message["new_top_level"] = [1, 2]
    message["streamSid"] = OTHER_STREAM_SID  # not a key of this protocol: ignored like any other
    assert protocol.receive_text(dumps(message)) == [CallerAudio(2, 100, L16_100MS)]


def test_integer_counters_are_accepted() -> None:
    # Exotel's own samples write numbers where the docs write strings.
    protocol = protocol_after("connected", bend(start_msg(), "sequence_number", 1))
    message = bend(bend(bend(media_msg(), "sequence_number", 2), "media.timestamp", 100), "media.chunk", 1)
    assert protocol.receive_text(dumps(message)) == [CallerAudio(2, 100, L16_100MS)]


def test_messages_after_start_may_omit_stream_sid() -> None:
    protocol = protocol_after("started")
    for message, expected in [
        (media_msg(), CallerAudio(2, 100, L16_100MS)),
        (dtmf_msg(), Dtmf(3, "5")),
        (mark_msg(), MarkEcho(4, "3:5")),
        (stop_msg(), StreamStopped(5, "callended")),
    ]:
        assert protocol.receive_text(dumps(bend(message, "stream_sid", DELETE))) == [expected]
    assert protocol.statistics().messages_without_stream_sid == 4


@pytest.mark.parametrize("frames", [1, 5, 10])
def test_media_payload_is_passed_on_as_sent(frames: int) -> None:
    # ~100 ms per message [ws], but any whole number of samples is the carrier's to choose.
    payload = bytes(range(1, 161)) * 2 * frames
    protocol = protocol_after("started")
    event = only(protocol.receive_text(dumps(media_msg(payload=base64.b64encode(payload).decode()))))
    assert event == CallerAudio(2, 100, payload)


def test_mu_law_payload_may_have_an_odd_length() -> None:
    start = bend(start_msg(encoding="audio/x-mulaw"), "start.media_format.bit_rate", "8")
    protocol = protocol_after("connected", start)
    payload = b"\x7f" * 801
    event = only(protocol.receive_text(dumps(media_msg(payload=base64.b64encode(payload).decode()))))
    assert event == CallerAudio(2, 100, payload)


@pytest.mark.parametrize("track", ["outbound", "outbound_track"])
def test_outbound_track_media_is_counted_and_dropped(track: str) -> None:
    protocol = protocol_after("started")
    assert protocol.receive_text(dumps(bend(media_msg(), "media.track", track))) == []
    assert protocol.receive_text(dumps(bend(media_msg(seq="3"), "media.track", "inbound"))) == [
        CallerAudio(3, 100, L16_100MS)
    ]
    stats = protocol.statistics()
    assert (stats.outbound_track_messages, stats.media_messages, stats.media_payload_bytes) == (1, 2, 1600)


def test_empty_media_is_counted_and_dropped() -> None:
    protocol = protocol_after("started")
    assert protocol.receive_text(dumps(media_msg(payload=""))) == []
    assert protocol.statistics().empty_media_messages == 1 and protocol.state is State.STREAMING


@pytest.mark.parametrize("digit", list("0123456789*#ABCD"))
def test_every_dtmf_key(digit: str) -> None:
    assert protocol_after("started").receive_text(dumps(dtmf_msg(digit=digit))) == [Dtmf(3, digit)]


def test_dtmf_without_duration() -> None:
    assert protocol_after("started").receive_text(dumps(bend(dtmf_msg(), "dtmf.duration", DELETE))) == [Dtmf(3, "5")]


def test_mark_names_pass_through_unchanged() -> None:
    protocol = protocol_after("started")
    for seq, name in enumerate(["7:5", "7:10:end", "", "naïve \"quoted\" \\ name"], start=2):
        assert protocol.receive_text(dumps(mark_msg(seq=str(seq), name=name))) == [MarkEcho(seq, name)]


@pytest.mark.parametrize(("reason", "expected"), [
    ("callended", "callended"), ("stopped", "stopped"), ("caller_hangup", "caller_hangup"),
    ("+910000000001 hung up", ""),  # peer text never becomes our reason
])
def test_stop_reason_is_fixed_text(reason: str, expected: str) -> None:
    assert protocol_after("started").receive_text(dumps(stop_msg(reason=reason))) == [StreamStopped(5, expected)]


@pytest.mark.parametrize("path", ["stop", "stop.reason", "stop.call_sid", "stop.account_sid"])
def test_stop_body_parts_may_be_absent(path: str) -> None:
    event = only(protocol_after("started").receive_text(dumps(bend(stop_msg(), path, DELETE))))
    assert isinstance(event, StreamStopped) and event.sequence_number == 5


def test_message_of_exactly_max_bytes_is_accepted() -> None:
    text = dumps(media_msg())
    padded = text + " " * (MAX_MESSAGE_BYTES - len(text))  # JSON allows trailing whitespace
    for data in (padded, padded.encode()):
        assert isinstance(only(protocol_after("started").receive_text(data)), CallerAudio)


def test_sequence_gaps_and_reordering_are_counted_not_violations() -> None:
    protocol = protocol_after("started")  # start was seq 1
    for seq in ["2", "3", "5", "4", "6", "9", "7", "8", "10", "10"]:
        event = only(protocol.receive_text(dumps(media_msg(seq=seq))))
        assert isinstance(event, CallerAudio) and event.sequence_number == int(seq)
    stats = protocol.statistics()
    assert (stats.sequence_gaps, stats.sequence_reordered, stats.violations) == (2, 4, 0)
    assert protocol.last_sequence_number == 10


# --- the whole stream, message by message; each message with garbage after it ----------------------


def recorded_stream(side: ExotelCarrierSide, chunks: int) -> list[str]:
    messages = side.opening_messages()
    for n in range(chunks):
        messages.append(side.media(bytes([n % 250 + 1]) * side.rules.frame_bytes * 5))
        if n == 3:
            messages.append(side.dtmf("7"))
        if n == 5:
            messages.append(side.mark_echo("1:5"))
    messages.append(side.stop())
    return messages


@pytest.mark.parametrize(("encoding", "rate"), FORMATS)
def test_a_recorded_stream_message_by_message(encoding: str, rate: int) -> None:
    side = ExotelCarrierSide(STREAM_SID, CALL_SID, ACCOUNT_SID, encoding=encoding, sample_rate_hz=rate,
                             custom_parameters=[("tenant", "acme")], from_number=FROM_NUMBER, to_number=TO_NUMBER)
    protocol = ExotelStreamProtocol()
    events = [event for message in recorded_stream(side, 10) for event in protocol.receive_text(message)]
    kinds = [type(event).__name__ for event in events]
    assert kinds == (["StreamConnected", "StreamStarted"] + ["CallerAudio"] * 4 + ["Dtmf"] + ["CallerAudio"] * 2
                     + ["MarkEcho"] + ["CallerAudio"] * 4 + ["StreamStopped"])
    started = events[1]
    assert isinstance(started, StreamStarted)
    assert (started.encoding, started.sample_rate_hz) == (encoding, rate)
    assert started.custom_parameters == (("tenant", "acme"),)
    audio = [event for event in events if isinstance(event, CallerAudio)]
    assert [event.timestamp_ms for event in audio] == [100 * n for n in range(10)]  # 5 frames = 100 ms each
    assert [event.sequence_number for event in events[1:]] == list(range(1, 15))
    assert all(len(event.payload) == 5 * protocol.frame_bytes for event in audio)
    stats = protocol.statistics()
    assert (stats.sequence_gaps, stats.sequence_reordered, stats.violations) == (0, 0, 0)
    assert protocol.state is State.STOPPED


GARBAGE = ["x", "}", "{}", ",", "]", "\x00", '"', " 1"]


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("index", range(len(HAPPY_CALL)), ids=[m["event"] for m, _, _ in HAPPY_CALL])
def test_each_message_with_garbage_after_it_is_malformed(index: int, garbage: str) -> None:
    protocol = ExotelStreamProtocol()
    for message, _, _ in HAPPY_CALL[:index]:
        protocol.receive_text(dumps(message))
    message = dumps(HAPPY_CALL[index][0])
    for data in (message + garbage, (message + garbage).encode()):
        fresh = ExotelStreamProtocol()
        for earlier, _, _ in HAPPY_CALL[:index]:
            fresh.receive_text(dumps(earlier))
        assert fresh.receive_text(data) == [ProtocolViolation(1007, "not a JSON value")]
        assert fresh.state is State.CLOSED


@pytest.mark.parametrize("index", range(len(HAPPY_CALL)), ids=[m["event"] for m, _, _ in HAPPY_CALL])
def test_each_message_truncated_anywhere_is_malformed(index: int) -> None:
    message = dumps(HAPPY_CALL[index][0])
    for cut in range(len(message)):
        protocol = ExotelStreamProtocol()
        for earlier, _, _ in HAPPY_CALL[:index]:
            protocol.receive_text(dumps(earlier))
        event = only(protocol.receive_text(message[:cut]))
        assert isinstance(event, ProtocolViolation) and event.close_code == 1007, (cut, event)


# --- bad input: one table, one close code each ---------------------------------------------------

BIG = MAX_MESSAGE_BYTES + 1
M, STARTED, CONNECTED, FRESH, STOPPED = media_msg(), "started", "connected", "fresh", "stopped"
ODD_L16_B64 = base64.b64encode(b"\x01" * 1601).decode()

# (id, prelude, message: dict | str | bytes | ("binary", bytes), expected close code)
BAD_INPUT: list[tuple[str, str, object, int]] = [
    # 1003: binary frames
    ("binary-before-start", FRESH, ("binary", b"\x00\x01"), 1003),
    ("binary-while-streaming", STARTED, ("binary", json.dumps(M).encode()), 1003),
    # 1009: too big, measured in UTF-8 bytes
    ("too-big-str", STARTED, " " * BIG, 1009),
    ("too-big-bytes", STARTED, b" " * BIG, 1009),
    ("too-big-multibyte", STARTED, '"' + "é" * (MAX_MESSAGE_BYTES // 2) + '"', 1009),
    # 1007: not JSON / not an object / no event
    ("empty", STARTED, "", 1007),
    ("not-utf8", STARTED, b'{"event":"\xff"}', 1007),
    ("nan", STARTED, '{"event":"media","sequence_number":NaN}', 1007),
    ("deep-nesting", STARTED, "[" * 30_000 + "]" * 30_000, 1007),
    ("array", STARTED, "[]", 1007),
    ("string", STARTED, '"media"', 1007),
    ("null", STARTED, "null", 1007),
    ("no-event", STARTED, "{}", 1007),
    ("event-int", STARTED, '{"event":1}', 1007),
    ("event-list", FRESH, '{"event":["start"]}', 1007),
    # 1008: unknown event (strict)
    ("unknown-event-fresh", FRESH, {"event": "hello"}, 1008),
    ("unknown-event-case", STARTED, {"event": "Media"}, 1008),
    ("our-clear-echoed", STARTED, {"event": "clear", "stream_sid": STREAM_SID}, 1008),
    # 1008: order
    ("media-before-start", FRESH, M, 1008),
    ("media-after-connected", CONNECTED, M, 1008),
    ("dtmf-before-start", CONNECTED, dtmf_msg(), 1008),
    ("mark-before-start", CONNECTED, mark_msg(), 1008),
    ("stop-before-start", CONNECTED, stop_msg(), 1008),
    ("second-connected", CONNECTED, connected_msg(), 1008),
    ("connected-after-start", STARTED, connected_msg(), 1008),
    ("second-start", STARTED, start_msg(seq="2"), 1008),
    ("media-after-stop", STOPPED, media_msg(seq="3"), 1008),
    ("stop-after-stop", STOPPED, stop_msg(seq="3"), 1008),
    ("garbage-after-stop-is-still-malformed", STOPPED, "nope", 1007),
    # 1008: another stream's or call's ids
    ("media-wrong-stream", STARTED, bend(M, "stream_sid", OTHER_STREAM_SID), 1008),
    ("dtmf-wrong-stream", STARTED, bend(dtmf_msg(), "stream_sid", OTHER_STREAM_SID), 1008),
    ("mark-wrong-stream", STARTED, bend(mark_msg(), "stream_sid", OTHER_STREAM_SID), 1008),
    ("stop-wrong-stream", STARTED, bend(stop_msg(), "stream_sid", OTHER_STREAM_SID), 1008),
    ("stop-other-call", STARTED, bend(stop_msg(), "stop.call_sid", OTHER_CALL_SID), 1008),
    ("stop-other-account", STARTED, bend(stop_msg(), "stop.account_sid", "other1"), 1008),
    # 1007: the stream_sid of a later message has the wrong type
    ("media-stream-sid-int", STARTED, bend(M, "stream_sid", 1), 1007),
    # 1007: start
    ("start-seq-missing", CONNECTED, bend(start_msg(), "sequence_number", DELETE), 1007),
    ("start-seq-empty", CONNECTED, bend(start_msg(), "sequence_number", ""), 1007),
    ("start-seq-negative", CONNECTED, bend(start_msg(), "sequence_number", "-1"), 1007),
    ("start-seq-negative-int", CONNECTED, bend(start_msg(), "sequence_number", -1), 1007),
    ("start-seq-float", CONNECTED, bend(start_msg(), "sequence_number", 1.0), 1007),
    ("start-seq-bool", CONNECTED, bend(start_msg(), "sequence_number", True), 1007),
    ("start-seq-huge-int", CONNECTED, bend(start_msg(), "sequence_number", 10**18), 1007),
    ("start-seq-arabic-digit", CONNECTED, bend(start_msg(), "sequence_number", "\u0661"), 1007),
    ("start-seq-too-long", CONNECTED, bend(start_msg(), "sequence_number", "9" * 5000), 1007),
    ("start-no-stream-sid", CONNECTED, bend(bend(start_msg(), "stream_sid", DELETE), "start.stream_sid", DELETE), 1007),
    ("start-stream-sid-quote", CONNECTED, bend(start_msg(), "stream_sid", 'MZ"x'), 1007),
    ("start-stream-sid-empty", CONNECTED, bend(start_msg(), "stream_sid", ""), 1007),
    ("start-stream-sid-long", CONNECTED, bend(start_msg(), "stream_sid", "M" * 129), 1007),
    ("start-stream-sid-non-ascii", CONNECTED, bend(start_msg(), "stream_sid", "MZé"), 1007),
    ("start-inner-stream-sid-bad", CONNECTED,
     bend(bend(start_msg(), "stream_sid", DELETE), "start.stream_sid", 5), 1007),
    ("start-stream-sid-mismatch", CONNECTED, bend(start_msg(), "start.stream_sid", OTHER_STREAM_SID), 1007),
    ("start-body-missing", CONNECTED, bend(start_msg(), "start", DELETE), 1007),
    ("start-body-list", CONNECTED, bend(start_msg(), "start", []), 1007),
    ("start-call-sid-missing", CONNECTED, bend(start_msg(), "start.call_sid", DELETE), 1007),
    ("start-call-sid-control", CONNECTED, bend(start_msg(), "start.call_sid", "ab\ncd"), 1007),
    ("start-account-sid-int", CONNECTED, bend(start_msg(), "start.account_sid", 7), 1007),
    ("start-from-int", CONNECTED, bend(start_msg(), "start.from", 919876543210), 1007),
    ("start-to-null", CONNECTED, bend(start_msg(), "start.to", None), 1007),
    ("start-custom-list", CONNECTED, bend(start_msg(), "start.custom_parameters", ["a"]), 1007),
    ("start-custom-int-value", CONNECTED, bend(start_msg(), "start.custom_parameters", {"a": 1}), 1007),
    ("start-format-missing", CONNECTED, bend(start_msg(), "start.media_format", DELETE), 1007),
    ("start-encoding-missing", CONNECTED, bend(start_msg(), "start.media_format.encoding", DELETE), 1007),
    ("start-encoding-unknown", CONNECTED, start_msg(encoding="audio/opus"), 1007),
    ("start-encoding-alaw", CONNECTED, start_msg(encoding="audio/x-alaw"), 1007),
    ("start-encoding-empty", CONNECTED, start_msg(encoding=""), 1007),
    ("start-rate-missing", CONNECTED, bend(start_msg(), "start.media_format.sample_rate", DELETE), 1007),
    ("start-rate-hz-suffix", CONNECTED, start_msg(rate="8000Hz"), 1007),
    ("start-rate-float", CONNECTED, start_msg(rate=8000.0), 1007),
    ("start-rate-unsupported", CONNECTED, start_msg(rate="44100"), 1007),
    ("start-mulaw-16k", CONNECTED, start_msg(encoding="audio/x-mulaw", rate="16000"), 1007),
    ("start-rate-param-mismatch", CONNECTED, start_msg(encoding="audio/L16;rate=16000", rate="8000"), 1007),
    ("start-rate-param-bad", CONNECTED, start_msg(encoding="audio/L16;rate=fast"), 1007),
    ("start-bit-rate-8-for-l16", CONNECTED, bend(start_msg(), "start.media_format.bit_rate", "8"), 1007),
    ("start-bit-rate-text", CONNECTED, bend(start_msg(), "start.media_format.bit_rate", "16bit"), 1007),
    # 1007: media
    ("media-body-missing", STARTED, bend(M, "media", DELETE), 1007),
    ("media-seq-missing", STARTED, bend(M, "sequence_number", DELETE), 1007),
    ("media-timestamp-missing", STARTED, bend(M, "media.timestamp", DELETE), 1007),
    ("media-timestamp-float", STARTED, bend(M, "media.timestamp", "1.5"), 1007),
    ("media-chunk-bad", STARTED, bend(M, "media.chunk", "one"), 1007),
    ("media-payload-missing", STARTED, bend(M, "media.payload", DELETE), 1007),
    ("media-payload-int", STARTED, bend(M, "media.payload", 5), 1007),
    ("media-payload-not-base64", STARTED, bend(M, "media.payload", "!!!!"), 1007),
    ("media-payload-no-padding", STARTED, bend(M, "media.payload", "AAA"), 1007),
    ("media-payload-non-ascii", STARTED, bend(M, "media.payload", "AAAé"), 1007),
    ("media-payload-odd-l16", STARTED, bend(M, "media.payload", ODD_L16_B64), 1007),
    ("media-track-unknown", STARTED, bend(M, "media.track", "both"), 1007),
    ("media-track-int", STARTED, bend(M, "media.track", 1), 1007),
    # 1007: dtmf / mark / stop
    ("dtmf-digit-missing", STARTED, bend(dtmf_msg(), "dtmf.digit", DELETE), 1007),
    ("dtmf-digit-two", STARTED, dtmf_msg(digit="12"), 1007),
    ("dtmf-digit-empty", STARTED, dtmf_msg(digit=""), 1007),
    ("dtmf-digit-int", STARTED, bend(dtmf_msg(), "dtmf.digit", 5), 1007),
    ("dtmf-duration-bad", STARTED, bend(dtmf_msg(), "dtmf.duration", "long"), 1007),
    ("dtmf-body-string", STARTED, bend(dtmf_msg(), "dtmf", "5"), 1007),
    ("mark-name-missing", STARTED, bend(mark_msg(), "mark.name", DELETE), 1007),
    ("mark-name-int", STARTED, bend(mark_msg(), "mark.name", 3), 1007),
    ("mark-body-missing", STARTED, bend(mark_msg(), "mark", DELETE), 1007),
    ("stop-body-list", STARTED, bend(stop_msg(), "stop", []), 1007),
    ("stop-reason-int", STARTED, bend(stop_msg(), "stop.reason", 1), 1007),
    ("stop-call-sid-int", STARTED, bend(stop_msg(), "stop.call_sid", 1), 1007),
    ("stop-seq-missing", STARTED, bend(stop_msg(), "sequence_number", DELETE), 1007),
]


@pytest.mark.parametrize(("prelude", "message", "code"), [row[1:] for row in BAD_INPUT],
                         ids=[row[0] for row in BAD_INPUT])
def test_bad_input_closes_with_its_code(prelude: str, message: object, code: int) -> None:
    protocol = protocol_after(prelude)
    before = protocol.state
    if isinstance(message, tuple):
        events = protocol.receive_binary(message[1])
    elif isinstance(message, dict):
        events = protocol.receive_text(dumps(message))
    else:
        events = protocol.receive_text(message)  # type: ignore[arg-type]
    violation = only(events)
    assert isinstance(violation, ProtocolViolation)
    assert violation.close_code == code, violation
    assert violation.reason and len(violation.reason) < 60
    assert FROM_NUMBER not in violation.reason and STREAM_SID not in violation.reason
    assert protocol.state is State.CLOSED and protocol.violation == violation
    assert protocol.statistics().violations == 1
    assert before is not State.CLOSED
    # closed: everything after is ignored, nothing counted
    assert protocol.receive_text(dumps(media_msg())) == []
    assert protocol.receive_binary(b"x") == []
    assert protocol.statistics().violations == 1


def test_every_close_code_is_exercised() -> None:
    assert {row[3] for row in BAD_INPUT} == {int(code) for code in exotel.CloseCode}


def test_unsupported_encoding_has_a_fixed_reason() -> None:
    violation = only(protocol_after("connected").receive_text(dumps(start_msg(encoding="audio/secret-codec"))))
    assert violation == ProtocolViolation(1007, "unsupported media encoding")


@pytest.mark.parametrize("prelude", ["fresh", "connected"])
def test_deadline_violation(prelude: str) -> None:
    protocol = protocol_after(prelude)
    assert protocol.deadline_violation() == ProtocolViolation(1008, "no start within 5 s")
    assert protocol.state is State.CLOSED
    assert protocol.receive_text(dumps(start_msg())) == []


def test_a_violation_does_not_move_the_state_or_keep_partial_start() -> None:
    protocol = protocol_after("connected")
    protocol.receive_text(dumps(start_msg(encoding="audio/opus")))
    assert protocol.stream_sid is None and protocol.encoding is None and protocol.call_parties is None
    with pytest.raises(ValueError):
        protocol.outbound_encoder()


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_near_messages = st.fixed_dictionaries(
    {"event": st.sampled_from(["connected", "start", "media", "dtmf", "mark", "stop", "other"])},
    optional={
        "sequence_number": st.sampled_from(["1", "2", "x", 2, -1]) | _json_values,
        "stream_sid": st.sampled_from([STREAM_SID, OTHER_STREAM_SID]) | _json_values,
        "media": st.fixed_dictionaries({}, optional={
            "timestamp": st.just("1"), "track": st.sampled_from(["inbound", "outbound", "x"]),
            "payload": st.sampled_from([L16_100MS_B64, ODD_L16_B64, ""]) | st.text(max_size=8),
        }),
        "start": st.just(start_msg()["start"]) | _json_values,
        "stop": _json_values,
        "mark": _json_values,
        "dtmf": _json_values,
    },
)


@given(
    prelude=st.sampled_from([FRESH, CONNECTED, STARTED, STOPPED]),
    inputs=st.lists(st.text(max_size=40) | st.binary(max_size=40) | _near_messages.map(dumps), max_size=6),
)
def test_arbitrary_input_never_raises(prelude: str, inputs: list) -> None:
    protocol = protocol_after(prelude)
    for data in inputs:
        events = protocol.receive_text(data)
        assert len(events) <= 1
        if protocol.state is State.CLOSED:
            assert protocol.statistics().violations == 1


# --- formats and chunk rules -------------------------------------------------------------------------

# (encoding, rate) -> frame bytes, alignment, min, max
RULES = [
    (("l16", 8000), (320, 320, 3200, 99_840)),  # the documented base format: 3.2 KB, multiple of 320
    (("l16", 16000), (640, 640, 3200, 99_840)),
    (("l16", 24000), (960, 960, 4800, 99_840)),  # at least 100 ms
    (("pcmu", 8000), (160, 320, 1600, 99_840)),  # 200 ms, on the 320-byte grid
]


@pytest.mark.parametrize(("fmt", "expected"), RULES)
def test_chunk_rules_per_format(fmt: tuple[str, int], expected: tuple[int, int, int, int]) -> None:
    rules = chunk_rules(*fmt)
    assert (rules.frame_bytes, rules.alignment_bytes, rules.min_bytes, rules.max_bytes) == expected
    assert frame_bytes(*fmt) == expected[0]
    assert rules.min_bytes % exotel.ALIGNMENT_BYTES == 0 and rules.max_bytes % exotel.ALIGNMENT_BYTES == 0
    assert rules.min_bytes // rules.bytes_per_ms >= exotel.MIN_CHUNK_MS
    assert rules.problem(rules.min_bytes) is None and rules.problem(rules.max_bytes) is None
    assert rules.problem(rules.min_bytes - rules.alignment_bytes) == "chunk below the minimum"
    assert rules.problem(rules.max_bytes + rules.alignment_bytes) == "chunk above the maximum"
    assert rules.problem(rules.min_bytes + rules.frame_bytes // 2).startswith("chunk not a multiple")


def test_frame_bytes_agree_with_the_edge_transcoder() -> None:
    from voicecore.carriers.codec import carrier_frame_bytes

    for fmt in FORMATS:
        assert frame_bytes(*fmt) == carrier_frame_bytes(*fmt)


@pytest.mark.parametrize("fmt", [("l16", 11025), ("pcmu", 16000), ("pcma", 8000), ("opus", 48000)])
def test_unknown_formats_are_our_misuse(fmt: tuple[str, int]) -> None:
    with pytest.raises(ValueError):
        frame_bytes(*fmt)
    with pytest.raises(ValueError):
        chunk_rules(*fmt)


def test_silence_per_encoding() -> None:
    assert silence("l16", 4) == b"\x00" * 4
    assert silence("pcmu", 3) == b"\xff" * 3
    with pytest.raises(ValueError):
        silence("opus", 1)


# --- outbound: the encoder, checked by Exotel's end -----------------------------------------------


def carrier(encoding: str = "l16", rate: int = 8000) -> ExotelCarrierSide:
    return ExotelCarrierSide(STREAM_SID, CALL_SID, ACCOUNT_SID, encoding=encoding, sample_rate_hz=rate)


@pytest.mark.parametrize(("encoding", "rate"), FORMATS)
def test_encoder_round_trips_through_the_carrier_side(encoding: str, rate: int) -> None:
    encoder = ExotelOutboundEncoder(STREAM_SID, encoding, rate)
    side = carrier(encoding, rate)
    rules = encoder.rules
    for size in (rules.min_bytes, rules.min_bytes + rules.alignment_bytes, rules.max_bytes):
        payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
        wire = encoder.media(payload)
        assert isinstance(wire, Outbound) and wire.binary is False
        assert json.loads(wire.data) == {"event": "media", "stream_sid": STREAM_SID,
                                         "media": {"payload": base64.b64encode(payload).decode()}}
        assert wire.data == encoder.media_prefix + base64.b64encode(payload) + encoder.media_suffix
        assert side.receive_text(wire.data) == SentMedia(payload)
    for name in ("1:5", "1:10:end", 'quote " back \\ slash', "naïve ☎", "\ud800"):
        wire = encoder.mark(name)
        assert json.loads(wire.data) == {"event": "mark", "stream_sid": STREAM_SID, "mark": {"name": name}}
        wire.data.decode("ascii")  # escaped, so always ASCII
        if name != "\ud800":  # a lone surrogate survives json but not orjson's strict UTF-8 reading
            assert side.receive_text(wire.data) == SentMark(name)
    assert encoder.clear().data == b'{"event":"clear","stream_sid":"' + STREAM_SID.encode() + b'"}'
    assert side.receive_text(encoder.clear().data) == SentClear()
    stats = side.statistics()
    assert (stats.media_received, stats.marks_received, stats.clears_received, stats.rejected) == (3, 4, 1, 0)
    batcher = encoder.batcher()
    assert (batcher.rules, batcher.chunk_bytes) == (rules, ChunkBatcher.for_format(encoding, rate).chunk_bytes)


@pytest.mark.parametrize(("encoding", "rate"), FORMATS)
def test_encoder_refuses_chunks_that_break_the_rules(encoding: str, rate: int) -> None:
    encoder = ExotelOutboundEncoder(STREAM_SID, encoding, rate)
    rules = encoder.rules
    for size in (0, rules.frame_bytes, rules.min_bytes - rules.alignment_bytes, rules.min_bytes + 1,
                 rules.max_bytes + rules.alignment_bytes):
        with pytest.raises(ValueError):
            encoder.media(b"\x00" * size)


@pytest.mark.parametrize("name", ["", None, 5])
def test_mark_rejects_unusable_names(name: object) -> None:
    with pytest.raises(ValueError):
        ExotelOutboundEncoder(STREAM_SID, "l16", 8000).mark(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("sid", ["", 'MZ"x', "MZ\\x", "MZé", "MZ\n", "MZ\x7f", "M" * 129, None, b"MZ00"])
def test_encoder_rejects_unsafe_stream_sid(sid: object) -> None:
    with pytest.raises(ValueError):
        ExotelOutboundEncoder(sid, "l16", 8000)  # type: ignore[arg-type]


def test_encoder_accepts_the_stream_sid_the_protocol_accepted() -> None:
    sid = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\')
    protocol = protocol_after("connected", bend(bend(start_msg(), "stream_sid", sid), "start.stream_sid", sid))
    encoder = protocol.outbound_encoder()
    assert json.loads(encoder.clear().data) == {"event": "clear", "stream_sid": sid}


# (id, what we send, why Exotel's end refuses it)
REJECTED: list[tuple[str, object, str]] = [
    ("binary", ("binary", b"{}"), "binary frame"),
    ("not-json", b"nope", "not JSON"),
    ("array", b"[]", "not a JSON object"),
    ("unknown-event", {"event": "play", "stream_sid": STREAM_SID}, "not media, mark or clear"),
    ("camel-case-sid", {"event": "clear", "streamSid": STREAM_SID}, "wrong or missing stream_sid"),
    ("other-sid", {"event": "clear", "stream_sid": OTHER_STREAM_SID}, "wrong or missing stream_sid"),
    ("media-body-missing", {"event": "media", "stream_sid": STREAM_SID}, "media is not an object"),
    ("payload-int", {"event": "media", "stream_sid": STREAM_SID, "media": {"payload": 1}}, "payload is not a string"),
    ("payload-bad", {"event": "media", "stream_sid": STREAM_SID, "media": {"payload": "@@@@"}},
     "payload is not base64"),
    ("one-frame", {"event": "media", "stream_sid": STREAM_SID,
                   "media": {"payload": base64.b64encode(b"\x00" * 320).decode()}}, "chunk below the minimum"),
    ("off-grid", {"event": "media", "stream_sid": STREAM_SID,
                  "media": {"payload": base64.b64encode(b"\x00" * 4096).decode()}},
     "chunk not a multiple of 320 bytes"),
    ("too-big", {"event": "media", "stream_sid": STREAM_SID,
                 "media": {"payload": base64.b64encode(b"\x00" * 100_160).decode()}}, "chunk above the maximum"),
    ("mark-name-empty", {"event": "mark", "stream_sid": STREAM_SID, "mark": {"name": ""}},
     "mark name is not a non-empty string"),
    ("mark-body-list", {"event": "mark", "stream_sid": STREAM_SID, "mark": []}, "mark is not an object"),
]


@pytest.mark.parametrize(("message", "reason"), [row[1:] for row in REJECTED], ids=[row[0] for row in REJECTED])
def test_carrier_side_rejects_what_the_contract_does_not_allow(message: object, reason: str) -> None:
    side = carrier()
    if isinstance(message, tuple):
        got = side.receive_binary(message[1])
    elif isinstance(message, dict):
        got = side.receive_text(json.dumps(message))
    else:
        got = side.receive_text(message)  # type: ignore[arg-type]
    assert got == OutboundRejected(reason)
    assert side.statistics().rejected == 1


def test_carrier_side_builds_what_exotel_sends() -> None:
    side = ExotelCarrierSide(STREAM_SID, CALL_SID, ACCOUNT_SID, encoding="pcmu", custom_parameters=[("a", "b")],
                             from_number=FROM_NUMBER, to_number=TO_NUMBER)
    connected, start = (json.loads(text) for text in side.opening_messages())
    assert connected == {"event": "connected"}
    assert start["sequence_number"] == "1" and start["stream_sid"] == start["start"]["stream_sid"] == STREAM_SID
    assert start["start"]["media_format"] == {"encoding": "audio/x-mulaw", "sample_rate": "8000", "bit_rate": "8"}
    assert start["start"]["custom_parameters"] == {"a": "b"} and start["start"]["from"] == FROM_NUMBER
    first = json.loads(side.media(b"\xff" * 800))
    assert (first["sequence_number"], first["media"]["chunk"], first["media"]["timestamp"]) == ("2", "1", "0")
    second = json.loads(side.media(b"\xff" * 800))
    assert (second["sequence_number"], second["media"]["chunk"], second["media"]["timestamp"]) == ("3", "2", "100")
    assert json.loads(side.media(b"\xff" * 160, timestamp_ms=5000))["media"]["timestamp"] == "5000"
    assert json.loads(side.dtmf("#", 250))["dtmf"] == {"digit": "#", "duration": "250"}
    assert json.loads(side.stop())["stop"] == {"call_sid": CALL_SID, "account_sid": ACCOUNT_SID, "reason": "callended"}
    assert side.statistics().messages_sent == 7 and side.statistics().media_sent == 3
    with pytest.raises(ValueError):
        side.dtmf("E")
    with pytest.raises(ValueError):
        carrier("l16").media(b"\x00" * 3)


# --- the chunk batcher ------------------------------------------------------------------------------


def frames_of(fmt: tuple[str, int], count: int, start: int = 0) -> bytes:
    """``count`` frames, each filled with its own non-silent byte, so order and origin are visible."""
    size = frame_bytes(*fmt)
    return b"".join(bytes([(start + n) % 200 + 1]) * size for n in range(count))


L16 = ("l16", 8000)


def test_frames_come_out_in_chunks_of_the_minimum_by_default() -> None:
    batcher = ChunkBatcher.for_format(*L16)
    assert batcher.chunk_bytes == 3200  # 100 ms asked, 200 ms is the minimum at 8 kHz (3.2 KB)
    out = []
    for n in range(25):
        out += batcher.push(frames_of(L16, 1, n))
    assert [type(item) for item in out] == [ChunkMedia, ChunkMedia]
    assert b"".join(item.payload for item in out) == frames_of(L16, 20)
    assert batcher.pending_bytes == 5 * 320
    stats = batcher.statistics()
    assert (stats.frames_in, stats.chunks_out, stats.chunk_bytes_out, stats.padded_frames) == (25, 2, 6400, 0)


def test_a_mark_waits_behind_its_partial_chunk_and_follows_it() -> None:
    batcher = ChunkBatcher.for_format(*L16)
    assert batcher.push(frames_of(L16, 5)) == []
    assert batcher.mark("1:5") == []  # 100 ms pending: below the minimum, so the mark waits
    assert batcher.waiting_marks == ("1:5",)
    out = batcher.push(frames_of(L16, 5, 5))
    assert out == [ChunkMedia(frames_of(L16, 10)), ChunkMark("1:5")]
    assert batcher.statistics().marks_deferred == 1


def test_a_mark_with_nothing_pending_goes_out_at_once() -> None:
    batcher = ChunkBatcher.for_format(*L16)
    assert batcher.mark("1:0") == [ChunkMark("1:0")]
    batcher.push(frames_of(L16, 10))
    assert batcher.mark("1:10") == [ChunkMark("1:10")]


def test_a_mark_sends_a_pending_part_that_already_obeys_the_rules() -> None:
    batcher = ChunkBatcher.for_format(*L16, chunk_ms=400)  # 6400-byte chunks
    batcher.push(frames_of(L16, 5))
    batcher.mark("1:5")  # waits: 1600 B is below the minimum
    batcher.push(frames_of(L16, 7, 5))  # 12 frames pending = 3840 B: obeys the rules
    assert batcher.mark("1:12") == [ChunkMedia(frames_of(L16, 12)), ChunkMark("1:5"), ChunkMark("1:12")]


def test_an_end_mark_pads_the_tail_with_counted_silence() -> None:
    batcher = ChunkBatcher.for_format(*L16)
    batcher.push(frames_of(L16, 13))  # one chunk of 10 out, 3 frames left
    batcher.mark("1:12")
    out = batcher.mark("1:13:end", end=True)
    assert out == [ChunkMedia(frames_of(L16, 3, 10) + b"\x00" * 2240, padded_bytes=2240), ChunkMark("1:12"),
                   ChunkMark("1:13:end")]
    stats = batcher.statistics()
    assert (stats.padded_chunks, stats.padded_frames, stats.marks_out) == (1, 7, 2)
    assert batcher.pending_bytes == 0 and batcher.waiting_marks == ()


def test_mu_law_tail_is_padded_onto_the_320_byte_grid_with_mu_law_silence() -> None:
    fmt = ("pcmu", 8000)
    batcher = ChunkBatcher.for_format(*fmt, chunk_ms=400)  # 3200-byte chunks
    batcher.push(frames_of(fmt, 11))  # 1760 B: above the 1600 B minimum but off the grid by one frame
    (media,) = batcher.flush()
    assert isinstance(media, ChunkMedia)
    assert media.payload == frames_of(fmt, 11) + b"\xff" * 160 and media.padded_bytes == 160
    assert batcher.statistics().padded_frames == 1
    assert batcher.flush() == []  # nothing pending: nothing sent, nothing padded


def test_clear_drops_the_partial_chunk_and_the_marks_behind_it() -> None:
    batcher = ChunkBatcher.for_format(*L16)
    batcher.push(frames_of(L16, 14))
    batcher.mark("1:14")
    assert batcher.clear() == ClearedChunk(dropped_bytes=1280, dropped_frames=4, dropped_marks=("1:14",))
    assert batcher.pending_bytes == 0 and batcher.flush() == []
    assert batcher.push(frames_of(L16, 10, 50)) == [ChunkMedia(frames_of(L16, 10, 50))]
    stats = batcher.statistics()
    assert (stats.frames_dropped_by_clear, stats.marks_dropped_by_clear) == (4, 1)


def test_a_large_push_comes_out_as_several_chunks_with_the_marks_between_them() -> None:
    batcher = ChunkBatcher.for_format(*L16)
    batcher.push(frames_of(L16, 3))
    batcher.mark("a")
    out = batcher.push(frames_of(L16, 40, 3))
    assert [item if isinstance(item, ChunkMark) else len(item.payload) for item in out] == [
        3200, ChunkMark("a"), 3200, 3200, 3200]


@pytest.mark.parametrize("chunk_bytes", [0, 320, 3201, 3520 + 160, 100_160])
def test_batcher_refuses_chunk_sizes_that_break_the_rules(chunk_bytes: int) -> None:
    with pytest.raises(ValueError):
        ChunkBatcher(chunk_rules(*L16), chunk_bytes)


@pytest.mark.parametrize("chunk_ms", [0, -100, 1.5, 10_000])
def test_batcher_refuses_unusable_chunk_ms(chunk_ms: object) -> None:
    with pytest.raises(ValueError):
        ChunkBatcher.for_format(*L16, chunk_ms=chunk_ms)  # type: ignore[arg-type]


def test_batcher_takes_whole_frames_only() -> None:
    batcher = ChunkBatcher.for_format(*L16)
    with pytest.raises(ValueError):
        batcher.push(b"\x01" * 321)
    with pytest.raises(ValueError):
        batcher.mark("")


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(min_value=1, max_value=40)),
        st.tuples(st.just("mark"), st.booleans()),
        st.tuples(st.just("flush"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=40,
)


@given(fmt=st.sampled_from(FORMATS), chunk_ms=st.sampled_from([100, 200, 300, 400, 1000, 2000]), ops=_ops)
def test_batcher_properties(fmt: tuple[str, int], chunk_ms: int, ops: list) -> None:
    """Any sequence of frames, marks, flushes and clears: every chunk obeys the rules, real audio comes out
    in order and unchanged, silence only at the end of a flushed chunk, and no mark overtakes audio pushed
    before it; every mark goes out exactly once or is handed back by a clear."""
    batcher = ChunkBatcher.for_format(*fmt, chunk_ms=chunk_ms)
    rules = batcher.rules
    encoder = ExotelOutboundEncoder(STREAM_SID, *fmt)
    side = carrier(*fmt)
    silence_byte = silence(fmt[0], 1)
    pushed = bytearray()  # audio pushed since the last clear
    sent_real = bytearray()  # real (unpadded) audio sent since the last clear
    mark_needs: dict[str, int] = {}  # mark name -> audio bytes pushed before it (since the last clear)
    marks_called: list[str] = []
    marks_sent: list[str] = []
    marks_dropped: list[str] = []
    frames_counter = 0

    def take(items: list, flushed: bool) -> None:
        for index, item in enumerate(items):
            assert side.receive_text(encoder.encode([item])[0].data) == (
                SentMedia(item.payload) if isinstance(item, ChunkMedia) else SentMark(item.name))
            if isinstance(item, ChunkMedia):
                assert rules.problem(len(item.payload)) is None
                real = len(item.payload) - item.padded_bytes
                assert real > 0
                if item.padded_bytes:
                    assert flushed, "silence outside a flush"
                    assert item.payload[real:] == silence_byte * item.padded_bytes
                    assert item.padded_bytes % rules.frame_bytes == 0
                sent_real.extend(item.payload[:real])
                assert bytes(sent_real) == bytes(pushed[: len(sent_real)]), "audio out of order or changed"
            else:
                assert len(sent_real) >= mark_needs[item.name], "a mark overtook its audio"
                marks_sent.append(item.name)

    for n, (op, arg) in enumerate(ops):
        if op == "push":
            data = frames_of(fmt, arg, frames_counter)
            frames_counter += arg
            pushed.extend(data)
            take(batcher.push(data), flushed=False)
        elif op == "mark":
            name = f"m{n}"
            marks_called.append(name)
            mark_needs[name] = len(pushed)
            take(batcher.mark(name, end=arg), flushed=arg)
            if arg:
                assert batcher.pending_bytes == 0 and marks_sent[-1] == name
        elif op == "flush":
            take(batcher.flush(), flushed=True)
            assert batcher.pending_bytes == 0 and batcher.waiting_marks == ()
        else:
            cleared = batcher.clear()
            assert bytes(sent_real) + bytes(pushed[len(sent_real):]) == bytes(pushed)
            assert cleared.dropped_bytes == len(pushed) - len(sent_real)
            marks_dropped.extend(cleared.dropped_marks)
            pushed.clear()
            sent_real.clear()
        assert batcher.pending_bytes == len(pushed) - len(sent_real) < batcher.chunk_bytes
    assert sorted(marks_sent + marks_dropped + list(batcher.waiting_marks)) == sorted(marks_called)
    assert marks_sent + marks_dropped + list(batcher.waiting_marks) != [] or marks_called == []
    order = {name: i for i, name in enumerate(marks_called)}
    assert [order[name] for name in marks_sent] == sorted(order[name] for name in marks_sent)
    stats = batcher.statistics()
    assert stats.marks_out == len(marks_sent) and stats.marks_dropped_by_clear == len(marks_dropped)
    assert stats.frames_in == frames_counter
    assert side.statistics().rejected == 0


# --- configuration: dynamic URL answer, stream URL, Basic auth -------------------------------------


def test_voicebot_url_response() -> None:
    url = "wss://gw.example.com/exotel?sample-rate=8000&tenant=acme"
    assert json.loads(voicebot_url_response(url)) == {"url": url}
    assert voicebot_url_response("ws://127.0.0.1:5001/media") == b'{"url":"ws://127.0.0.1:5001/media"}'


@pytest.mark.parametrize("url", ["https://gw.example.com/x", "wss://gw.example.com/a b", "wss://gw\n.example.com",
                                 "wss://gw.example.com/é", "", None, b"wss://x"])
def test_voicebot_url_response_refuses_what_is_not_a_ws_url(url: object) -> None:
    with pytest.raises(ValueError):
        voicebot_url_response(url)  # type: ignore[arg-type]


def test_voicebot_stream_url() -> None:
    assert voicebot_stream_url("wss://gw.example.com/exotel") == "wss://gw.example.com/exotel?sample-rate=8000"
    assert voicebot_stream_url("wss://gw.example.com/exotel", sample_rate_hz=16000,
                               custom_parameters=[("tenant", "acme co"), ("t", "a&b")]) == (
        "wss://gw.example.com/exotel?sample-rate=16000&tenant=acme+co&t=a%26b")


@pytest.mark.parametrize(("kwargs", "base"), [
    ({"sample_rate_hz": 11025}, "wss://gw/x"),
    ({"custom_parameters": [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]}, "wss://gw/x"),
    ({"custom_parameters": [("a", "x" * 300)]}, "wss://gw/x"),
    ({"custom_parameters": [("sample-rate", "16000")]}, "wss://gw/x"),
    ({"custom_parameters": [("a", "1"), ("a", "2")]}, "wss://gw/x"),
    ({"custom_parameters": [("", "1")]}, "wss://gw/x"),
    ({"custom_parameters": [("a", 1)]}, "wss://gw/x"),
    ({}, "wss://gw/x?y=1"),
    ({}, "https://gw/x"),
])
def test_voicebot_stream_url_refuses_what_the_applet_does_not_take(kwargs: dict, base: str) -> None:
    with pytest.raises(ValueError):
        voicebot_stream_url(base, **kwargs)


def basic(user: bytes, password: bytes, scheme: str = "Basic") -> str:
    return f"{scheme} " + base64.b64encode(user + b":" + password).decode()


# (id, header, expected)
AUTH: list[tuple[str, object, bool]] = [
    ("good", basic(b"key", b"tok:en"), True),  # the password may hold colons; the user may not
    ("good-bytes", basic(b"key", b"tok:en").encode(), True),
    ("scheme-case", basic(b"key", b"tok:en", "bAsIc"), True),
    ("surrounding-space", "  " + basic(b"key", b"tok:en") + " ", True),
    ("wrong-user", basic(b"kex", b"tok:en"), False),
    ("wrong-password", basic(b"key", b"tok:eN"), False),
    ("password-prefix", basic(b"key", b"tok"), False),
    ("swapped", basic(b"tok:en", b"key"), False),
    ("no-colon", "Basic " + base64.b64encode(b"keytok:en").decode().replace("=", ""), False),
    ("only-user", "Basic " + base64.b64encode(b"key").decode(), False),
    ("bearer", "Bearer " + base64.b64encode(b"key:tok:en").decode(), False),
    ("no-token", "Basic", False),
    ("bad-base64", "Basic !!!", False),
    ("unpadded", "Basic " + base64.b64encode(b"key:tok:en1").decode().rstrip("="), False),
    ("non-ascii-bytes", b"Basic \xff", False),
    ("non-ascii-str", "Basic é", False),
    ("empty", "", False),
    ("none", None, False),
]


@pytest.mark.parametrize(("header", "expected"), [row[1:] for row in AUTH], ids=[row[0] for row in AUTH])
def test_check_basic_auth(header: object, expected: bool) -> None:
    assert check_basic_auth(header, "key", "tok:en") is expected  # type: ignore[arg-type]


def test_check_basic_auth_handles_utf8_credentials() -> None:
    assert check_basic_auth(basic("ключ".encode(), "пароль".encode()), "ключ", "пароль") is True


@pytest.mark.parametrize(("user", "password"), [("", "x"), ("x", "")])
def test_check_basic_auth_refuses_empty_expected_credentials(user: str, password: str) -> None:
    with pytest.raises(ValueError):
        check_basic_auth(basic(b"", b""), user, password)


def test_with_basic_auth_writes_the_credentials_into_the_url() -> None:
    url = "wss://gw.example.com:8443/exotel/stream?sample-rate=8000&session_token=T"
    assert with_basic_auth(url, "key", "tok-en_1.~") == ("wss://key:tok-en_1.~@gw.example.com:8443/exotel/stream"
                                                           "?sample-rate=8000&session_token=T")
    assert with_basic_auth("ws://h/x", "a b", "p@ss:w/") == "ws://a%20b:p%40ss%3Aw%2F@h/x"


@pytest.mark.parametrize(("url", "user", "password"), [
    ("https://h/x", "k", "p"), ("wss://k:p@h/x", "k", "p"), ("wss://h/x", "", "p"), ("wss://h/x", "k", ""),
])
def test_with_basic_auth_misuse(url: str, user: str, password: str) -> None:
    with pytest.raises(ValueError):
        with_basic_auth(url, user, password)
