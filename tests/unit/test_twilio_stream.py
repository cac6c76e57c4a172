"""Twilio Media Streams protocol core: every inbound event, every bad-input class and its close code,
garbage after and truncation of each valid message, sequence-gap counting, and outbound byte shapes.

Message shapes follow docs/explanation/protocols.md#a2 and #a5, the real capture (string counters, key order
event, sequenceNumber, <body>, streamSid).
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.timing import FRAME_BYTES, MAX_MESSAGE_BYTES
from voicecore.carriers.twilio.stream import (
    CloseCode,
    Connected,
    Dtmf,
    Mark,
    Media,
    OutboundEncoder,
    ProtocolViolation,
    Start,
    State,
    Stop,
    TwilioCarrierStream,
    TwilioStreamProtocol,
)
from voicecore.carriers import events as neutral

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
CALL_SID = "CA" + "fedcba9876543210" * 2
STREAM_SID = "MZ" + "18ad3ab5a668481ce02b83e7395059f0"
OTHER_STREAM_SID = "MZ" + "0" * 32
OTHER_CALL_SID = "CA" + "1" * 32
FRAME = bytes(range(FRAME_BYTES))
FRAME_B64 = base64.b64encode(FRAME).decode("ascii")
SILENCE_B64 = base64.b64encode(b"\xff" * FRAME_BYTES).decode("ascii")


# --- message builders (dicts, so a test can bend one field) ----------------------------------------


def connected_msg() -> dict:
    return {"event": "connected", "protocol": "Call", "version": "1.0.0"}


def start_msg(seq: str = "1", custom: dict | None = None) -> dict:
    return {
        "event": "start",
        "sequenceNumber": seq,
        "start": {
            "accountSid": ACCOUNT_SID,
            "streamSid": STREAM_SID,
            "callSid": CALL_SID,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"session_token": "tok-123", "tenant": "acme"} if custom is None else custom,
        },
        "streamSid": STREAM_SID,
    }


def media_msg(seq: str = "2", chunk: str = "1", timestamp: str = "155", payload: str = FRAME_B64) -> dict:
    return {
        "event": "media",
        "sequenceNumber": seq,
        "media": {"track": "inbound", "chunk": chunk, "timestamp": timestamp, "payload": payload},
        "streamSid": STREAM_SID,
    }


def dtmf_msg(seq: str = "3", digit: str = "5") -> dict:
    return {
        "event": "dtmf",
        "streamSid": STREAM_SID,
        "sequenceNumber": seq,
        "dtmf": {"track": "inbound_track", "digit": digit},
    }


def mark_msg(seq: str = "4", name: str = "3:5") -> dict:
    return {"event": "mark", "sequenceNumber": seq, "streamSid": STREAM_SID, "mark": {"name": name}}


def stop_msg(seq: str = "5") -> dict:
    return {
        "event": "stop",
        "sequenceNumber": seq,
        "streamSid": STREAM_SID,
        "stop": {"accountSid": ACCOUNT_SID, "callSid": CALL_SID},
    }


def dumps(message: dict) -> str:
    # Twilio's own spacing (", " and ": "), as in the captures.
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

PRELUDES = {
    "fresh": [],
    "connected": [connected_msg()],
    "started": [connected_msg(), start_msg()],
    "stopped": [connected_msg(), start_msg(), stop_msg(seq="2")],
}


def protocol_after(prelude: str) -> TwilioStreamProtocol:
    protocol = TwilioStreamProtocol()
    for message in PRELUDES[prelude]:
        events = protocol.receive_text(dumps(message))
        assert not any(isinstance(event, ProtocolViolation) for event in events), events
    return protocol


# --- valid input -----------------------------------------------------------------------------------

EXPECTED_START = Start(
    sequence_number=1,
    stream_sid=STREAM_SID,
    account_sid=ACCOUNT_SID,
    call_sid=CALL_SID,
    tracks=("inbound",),
    custom_parameters=(("session_token", "tok-123"), ("tenant", "acme")),
    encoding="audio/x-mulaw",
    sample_rate_hz=8000,
    channels=1,
)

HAPPY_CALL: list[tuple[dict, object]] = [
    (connected_msg(), Connected(protocol="Call", version="1.0.0")),
    (start_msg(), EXPECTED_START),
    (media_msg(), Media(sequence_number=2, chunk=1, timestamp_ms=155, track="inbound", payload=FRAME)),
    (dtmf_msg(), Dtmf(sequence_number=3, digit="5", track="inbound_track")),
    (mark_msg(), Mark(sequence_number=4, name="3:5")),
    (stop_msg(seq="6"), Stop(sequence_number=6, account_sid=ACCOUNT_SID, call_sid=CALL_SID)),
]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "utf8-bytes"])
def test_happy_call_parses_every_event(as_bytes: bool) -> None:
    protocol = TwilioStreamProtocol()
    assert protocol.state is State.AWAITING_CONNECTED
    states = [State.AWAITING_START, State.STREAMING, State.STREAMING, State.STREAMING, State.STREAMING, State.STOPPED]
    for (message, expected), state in zip(HAPPY_CALL, states, strict=True):
        text = dumps(message)
        assert protocol.receive_text(text.encode() if as_bytes else text) == [expected]
        assert protocol.state is state
    assert protocol.stream_sid == STREAM_SID
    assert protocol.call_sid == CALL_SID
    assert protocol.account_sid == ACCOUNT_SID
    assert protocol.last_sequence_number == 6
    assert protocol.violation is None
    stats = protocol.statistics()
    assert (stats.messages_received, stats.media_frames, stats.media_payload_bytes) == (6, 1, FRAME_BYTES)
    assert (stats.marks_received, stats.dtmf_received, stats.violations) == (1, 1, 0)
    assert (stats.sequence_gaps, stats.sequence_reordered) == (1, 0)  # seq 5 never came


def test_start_without_connected_is_tolerated() -> None:
    protocol = TwilioStreamProtocol()
    assert protocol.receive_text(dumps(start_msg())) == [EXPECTED_START]
    assert protocol.state is State.STREAMING


def test_real_capture_shape_a5() -> None:
    # A.5: customParameters {}, media seq "2" chunk "1" ts "155" ... seq "74" chunk "73" ts "1593", stop seq "378".
    protocol = protocol_after("connected")
    (start,) = protocol.receive_text(dumps(start_msg(custom={})))
    assert isinstance(start, Start) and start.custom_parameters == ()
    for chunk in range(1, 74):
        timestamp = 155 + round((chunk - 1) * (1593 - 155) / 72)
        (event,) = protocol.receive_text(dumps(media_msg(str(chunk + 1), str(chunk), str(timestamp), SILENCE_B64)))
        assert isinstance(event, Media)
        assert (event.sequence_number, event.chunk, event.timestamp_ms) == (chunk + 1, chunk, timestamp)
        assert event.payload == b"\xff" * FRAME_BYTES
    assert protocol.receive_text(dumps(stop_msg(seq="378"))) == [Stop(378, ACCOUNT_SID, CALL_SID)]
    stats = protocol.statistics()
    assert (stats.media_frames, stats.media_payload_bytes, stats.sequence_gaps) == (73, 73 * FRAME_BYTES, 1)


def test_start_event_is_hashable_and_looks_up_parameters() -> None:
    assert hash(EXPECTED_START) == hash(EXPECTED_START)
    assert EXPECTED_START.custom_parameter("session_token") == "tok-123"
    assert EXPECTED_START.custom_parameter("missing") is None
    assert EXPECTED_START.custom_parameter("missing", "x") == "x"
    with pytest.raises(AttributeError):
        EXPECTED_START.call_sid = "CA" + "2" * 32  # type: ignore[misc]


def test_start_without_custom_parameters_reads_as_empty() -> None:
    protocol = protocol_after("connected")
    (start,) = protocol.receive_text(dumps(bend(start_msg(), "start.customParameters", DELETE)))
    assert isinstance(start, Start) and start.custom_parameters == ()


def test_unknown_keys_are_ignored() -> None:
    protocol = protocol_after("started")
    message = bend(media_msg(), "media.extra", {"x": 1})
    message["newTopLevel"] = [1, 2]
    assert protocol.receive_text(dumps(message)) == [Media(2, 1, 155, "inbound", FRAME)]


def test_both_tracks_and_uppercase_hex_sids() -> None:
    start = bend(start_msg(), "start.tracks", ["inbound", "outbound"])
    start = bend(start, "start.callSid", "CA" + CALL_SID[2:].upper())
    protocol = protocol_after("connected")
    (event,) = protocol.receive_text(dumps(start))
    assert isinstance(event, Start) and event.tracks == ("inbound", "outbound")
    (event,) = protocol.receive_text(dumps(bend(media_msg(), "media.track", "outbound")))
    assert isinstance(event, Media) and event.track == "outbound"


@pytest.mark.parametrize("digit", list("0123456789*#ABCD"))
def test_every_dtmf_key(digit: str) -> None:
    protocol = protocol_after("started")
    assert protocol.receive_text(dumps(dtmf_msg(digit=digit))) == [Dtmf(3, digit, "inbound_track")]


def test_mark_names_pass_through_unchanged() -> None:
    protocol = protocol_after("started")
    for seq, name in enumerate(["7:5", "7:10:end", "", "naïve \"quoted\" \\ name"], start=2):
        assert protocol.receive_text(dumps(mark_msg(seq=str(seq), name=name))) == [Mark(seq, name)]


def test_message_of_exactly_max_bytes_is_accepted() -> None:
    text = dumps(media_msg())
    padded = text + " " * (MAX_MESSAGE_BYTES - len(text))  # JSON allows trailing whitespace
    assert len(padded.encode()) == MAX_MESSAGE_BYTES
    (event,) = protocol_after("started").receive_text(padded)
    assert isinstance(event, Media)
    (event,) = protocol_after("started").receive_text(padded.encode())
    assert isinstance(event, Media)


# --- sequence numbers --------------------------------------------------------------------------------


def test_sequence_gaps_and_reordering_are_counted_not_violations() -> None:
    protocol = protocol_after("started")  # start was seq 1
    for seq in ["2", "3", "5", "4", "6", "9", "7", "8", "10"]:
        (event,) = protocol.receive_text(dumps(media_msg(seq=seq, chunk=str(int(seq) - 1))))
        assert isinstance(event, Media) and event.sequence_number == int(seq)
    stats = protocol.statistics()
    assert stats.sequence_gaps == 2  # 3 -> 5, 6 -> 9
    assert stats.sequence_reordered == 3  # 4, 7, 8 arrived late
    assert stats.violations == 0
    assert protocol.last_sequence_number == 10


def test_duplicate_sequence_number_counts_as_reordered() -> None:
    protocol = protocol_after("started")
    protocol.receive_text(dumps(media_msg(seq="2")))
    protocol.receive_text(dumps(media_msg(seq="2")))
    assert protocol.statistics().sequence_reordered == 1
    assert protocol.last_sequence_number == 2


# --- bad input: one table, one close code each ---------------------------------------------------

BIG = MAX_MESSAGE_BYTES + 1
M, STARTED, CONNECTED, FRESH, STOPPED = media_msg(), "started", "connected", "fresh", "stopped"

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
    ("truncated", STARTED, '{"event":"media"', 1007),
    ("not-utf8", STARTED, b'{"event":"\xff"}', 1007),
    ("nan", STARTED, '{"event":"media","sequenceNumber":NaN}', 1007),
    ("infinity", STARTED, '{"event":"connected","x":-Infinity}', 1007),
    ("deep-nesting", STARTED, "[" * 30_000 + "]" * 30_000, 1007),
    ("array", STARTED, "[]", 1007),
    ("string", STARTED, '"media"', 1007),
    ("number", STARTED, "1", 1007),
    ("null", STARTED, "null", 1007),
    ("no-event", STARTED, "{}", 1007),
    ("event-int", STARTED, '{"event":1}', 1007),
    ("event-null", STARTED, '{"event":null}', 1007),
    ("event-list", FRESH, '{"event":["start"]}', 1007),
    # 1008: unknown event
    ("unknown-event-fresh", FRESH, {"event": "hello"}, 1008),
    ("unknown-event-streaming", STARTED, {"event": "Media"}, 1008),
    ("unknown-event-clear", STARTED, {"event": "clear", "streamSid": STREAM_SID}, 1008),
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
    ("mark-after-stop", STOPPED, mark_msg(seq="3"), 1008),
    ("stop-after-stop", STOPPED, stop_msg(seq="3"), 1008),
    ("start-after-stop", STOPPED, start_msg(seq="3"), 1008),
    ("connected-after-stop", STOPPED, connected_msg(), 1008),
    ("garbage-after-stop-is-still-malformed", STOPPED, "nope", 1007),
    # 1008: another stream's or call's ids
    ("media-wrong-stream", STARTED, bend(M, "streamSid", OTHER_STREAM_SID), 1008),
    ("dtmf-wrong-stream", STARTED, bend(dtmf_msg(), "streamSid", OTHER_STREAM_SID), 1008),
    ("mark-wrong-stream", STARTED, bend(mark_msg(), "streamSid", OTHER_STREAM_SID), 1008),
    ("stop-wrong-stream", STARTED, bend(stop_msg(), "streamSid", OTHER_STREAM_SID), 1008),
    ("stop-other-call", STARTED, bend(stop_msg(), "stop.callSid", OTHER_CALL_SID), 1008),
    ("stop-other-account", STARTED, bend(stop_msg(), "stop.accountSid", "AC" + "9" * 32), 1008),
    # 1007: connected
    ("connected-no-protocol", FRESH, bend(connected_msg(), "protocol", DELETE), 1007),
    ("connected-version-number", FRESH, bend(connected_msg(), "version", 1.0), 1007),
    # 1007: start
    ("start-seq-int", CONNECTED, bend(start_msg(), "sequenceNumber", 1), 1007),
    ("start-seq-missing", CONNECTED, bend(start_msg(), "sequenceNumber", DELETE), 1007),
    ("start-seq-empty", CONNECTED, bend(start_msg(), "sequenceNumber", ""), 1007),
    ("start-seq-negative", CONNECTED, bend(start_msg(), "sequenceNumber", "-1"), 1007),
    ("start-seq-float", CONNECTED, bend(start_msg(), "sequenceNumber", "1.0"), 1007),
    ("start-seq-space", CONNECTED, bend(start_msg(), "sequenceNumber", " 1"), 1007),
    ("start-seq-plus", CONNECTED, bend(start_msg(), "sequenceNumber", "+1"), 1007),
    ("start-seq-underscore", CONNECTED, bend(start_msg(), "sequenceNumber", "1_0"), 1007),
    ("start-seq-arabic-digit", CONNECTED, bend(start_msg(), "sequenceNumber", "\u0661"), 1007),
    ("start-seq-superscript", CONNECTED, bend(start_msg(), "sequenceNumber", "\u00b2"), 1007),
    ("start-seq-too-long", CONNECTED, bend(start_msg(), "sequenceNumber", "9" * 5000), 1007),
    ("start-no-streamSid", CONNECTED, bend(start_msg(), "streamSid", DELETE), 1007),
    ("start-streamSid-bad-form", CONNECTED, bend(start_msg(), "streamSid", 'MZ"' + "0" * 31), 1007),
    ("start-streamSid-mismatch", CONNECTED, bend(start_msg(), "start.streamSid", OTHER_STREAM_SID), 1007),
    ("start-body-missing", CONNECTED, bend(start_msg(), "start", DELETE), 1007),
    ("start-body-list", CONNECTED, bend(start_msg(), "start", []), 1007),
    ("start-accountSid-bad", CONNECTED, bend(start_msg(), "start.accountSid", "AC123"), 1007),
    ("start-accountSid-prefix", CONNECTED, bend(start_msg(), "start.accountSid", "CA" + "0" * 32), 1007),
    ("start-callSid-missing", CONNECTED, bend(start_msg(), "start.callSid", DELETE), 1007),
    ("start-callSid-nonhex", CONNECTED, bend(start_msg(), "start.callSid", "CA" + "g" * 32), 1007),
    ("start-callSid-long", CONNECTED, bend(start_msg(), "start.callSid", CALL_SID + "0"), 1007),
    ("start-tracks-missing", CONNECTED, bend(start_msg(), "start.tracks", DELETE), 1007),
    ("start-tracks-string", CONNECTED, bend(start_msg(), "start.tracks", "inbound"), 1007),
    ("start-tracks-empty", CONNECTED, bend(start_msg(), "start.tracks", []), 1007),
    ("start-tracks-unknown", CONNECTED, bend(start_msg(), "start.tracks", ["inbound_track"]), 1007),
    ("start-tracks-repeated", CONNECTED, bend(start_msg(), "start.tracks", ["inbound", "inbound"]), 1007),
    ("start-tracks-number", CONNECTED, bend(start_msg(), "start.tracks", [1]), 1007),
    ("start-params-list", CONNECTED, bend(start_msg(), "start.customParameters", [["a", "b"]]), 1007),
    ("start-params-int-value", CONNECTED, bend(start_msg(), "start.customParameters", {"a": 1}), 1007),
    ("start-params-null-value", CONNECTED, bend(start_msg(), "start.customParameters", {"a": None}), 1007),
    ("start-format-missing", CONNECTED, bend(start_msg(), "start.mediaFormat", DELETE), 1007),
    ("start-format-encoding", CONNECTED, bend(start_msg(), "start.mediaFormat.encoding", "audio/x-l16"), 1007),
    ("start-format-encoding-case", CONNECTED, bend(start_msg(), "start.mediaFormat.encoding", "audio/X-MULAW"), 1007),
    ("start-format-rate-16k", CONNECTED, bend(start_msg(), "start.mediaFormat.sampleRate", 16000), 1007),
    ("start-format-rate-string", CONNECTED, bend(start_msg(), "start.mediaFormat.sampleRate", "8000"), 1007),
    ("start-format-rate-float", CONNECTED, bend(start_msg(), "start.mediaFormat.sampleRate", 8000.0), 1007),
    ("start-format-channels-2", CONNECTED, bend(start_msg(), "start.mediaFormat.channels", 2), 1007),
    ("start-format-channels-bool", CONNECTED, bend(start_msg(), "start.mediaFormat.channels", True), 1007),
    # 1007: media
    ("media-seq-int", STARTED, bend(M, "sequenceNumber", 2), 1007),
    ("media-seq-missing", STARTED, bend(M, "sequenceNumber", DELETE), 1007),
    ("media-no-streamSid", STARTED, bend(M, "streamSid", DELETE), 1007),
    ("media-streamSid-null", STARTED, bend(M, "streamSid", None), 1007),
    ("media-body-missing", STARTED, bend(M, "media", DELETE), 1007),
    ("media-body-string", STARTED, bend(M, "media", FRAME_B64), 1007),
    ("media-track-missing", STARTED, bend(M, "media.track", DELETE), 1007),
    ("media-track-not-started", STARTED, bend(M, "media.track", "outbound"), 1007),
    ("media-chunk-int", STARTED, bend(M, "media.chunk", 1), 1007),
    ("media-chunk-hex", STARTED, bend(M, "media.chunk", "0x1"), 1007),
    ("media-timestamp-missing", STARTED, bend(M, "media.timestamp", DELETE), 1007),
    ("media-timestamp-float", STARTED, bend(M, "media.timestamp", "155.5"), 1007),
    ("media-payload-missing", STARTED, bend(M, "media.payload", DELETE), 1007),
    ("media-payload-bytes-list", STARTED, bend(M, "media.payload", list(FRAME)), 1007),
    ("media-payload-bad-char", STARTED, bend(M, "media.payload", "!" + FRAME_B64[1:]), 1007),
    ("media-payload-urlsafe", STARTED, bend(M, "media.payload", base64.urlsafe_b64encode(FRAME).decode()), 1007),
    ("media-payload-newline", STARTED, bend(M, "media.payload", FRAME_B64 + "\n"), 1007),
    ("media-payload-inner-newline", STARTED, bend(M, "media.payload", FRAME_B64[:76] + "\n" + FRAME_B64[76:]), 1007),
    ("media-payload-excess-after-pad", STARTED, bend(M, "media.payload", FRAME_B64 + "AAAA"), 1007),
    ("media-payload-bad-padding", STARTED, bend(M, "media.payload", FRAME_B64.rstrip("=")), 1007),
    ("media-payload-non-ascii", STARTED, bend(M, "media.payload", "é" + FRAME_B64[1:]), 1007),
    ("media-payload-empty", STARTED, bend(M, "media.payload", ""), 1007),
    ("media-payload-159", STARTED, bend(M, "media.payload", base64.b64encode(FRAME[:159]).decode()), 1007),
    ("media-payload-161", STARTED, bend(M, "media.payload", base64.b64encode(FRAME + b"\x00").decode()), 1007),
    ("media-payload-320", STARTED, bend(M, "media.payload", base64.b64encode(FRAME * 2).decode()), 1007),
    ("media-payload-wav-header", STARTED, bend(M, "media.payload", base64.b64encode(b"RIFF" + FRAME).decode()), 1007),
    # 1007: dtmf, mark, stop
    ("dtmf-body-missing", STARTED, bend(dtmf_msg(), "dtmf", DELETE), 1007),
    ("dtmf-two-digits", STARTED, bend(dtmf_msg(), "dtmf.digit", "12"), 1007),
    ("dtmf-empty-digit", STARTED, bend(dtmf_msg(), "dtmf.digit", ""), 1007),
    ("dtmf-letter", STARTED, bend(dtmf_msg(), "dtmf.digit", "x"), 1007),
    ("dtmf-digit-int", STARTED, bend(dtmf_msg(), "dtmf.digit", 5), 1007),
    ("dtmf-track-missing", STARTED, bend(dtmf_msg(), "dtmf.track", DELETE), 1007),
    ("dtmf-seq-bad", STARTED, bend(dtmf_msg(), "sequenceNumber", "three"), 1007),
    ("mark-body-missing", STARTED, bend(mark_msg(), "mark", DELETE), 1007),
    ("mark-name-missing", STARTED, bend(mark_msg(), "mark.name", DELETE), 1007),
    ("mark-name-int", STARTED, bend(mark_msg(), "mark.name", 3), 1007),
    ("mark-seq-missing", STARTED, bend(mark_msg(), "sequenceNumber", DELETE), 1007),
    ("stop-body-missing", STARTED, bend(stop_msg(), "stop", DELETE), 1007),
    ("stop-callSid-bad", STARTED, bend(stop_msg(), "stop.callSid", "CA1"), 1007),
    ("stop-accountSid-missing", STARTED, bend(stop_msg(), "stop.accountSid", DELETE), 1007),
    ("stop-seq-int", STARTED, bend(stop_msg(), "sequenceNumber", 5), 1007),
]


def feed(protocol: TwilioStreamProtocol, message: object) -> list:
    if isinstance(message, tuple) and message[0] == "binary":
        return protocol.receive_binary(message[1])
    if isinstance(message, dict):
        return protocol.receive_text(dumps(message))
    return protocol.receive_text(message)  # type: ignore[arg-type]


def assert_closed_for_good(protocol: TwilioStreamProtocol, close_code: int) -> None:
    assert protocol.state is State.CLOSED
    assert protocol.violation is not None and protocol.violation.close_code == close_code
    before = protocol.statistics()
    assert before.violations == 1
    # Everything after a violation is ignored, valid or not, text or binary.
    for message in [connected_msg(), start_msg(), media_msg(seq="9"), stop_msg(seq="10"), "garbage", ("binary", b"x")]:
        assert feed(protocol, message) == []
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
    assert violation.close_code == close_code
    assert isinstance(violation.close_code, int)
    assert violation.reason and len(violation.reason.encode()) <= 123  # fits a WebSocket close frame
    # A rejected message changes no counter but the message count and the violation count.
    stats_after = protocol.statistics()
    assert stats_after.media_frames == stats_before.media_frames
    assert stats_after.messages_received == stats_before.messages_received + 1
    assert_closed_for_good(protocol, close_code)


# --- the carrier-neutral events the gateway reads (TwilioCarrierStream) -----------------------------


def test_the_carrier_stream_gives_the_neutral_events_with_the_same_checks_and_statistics() -> None:
    """TwilioCarrierStream (the descriptor's stream, which the gateway's one stream connection reads) gives every
    carrier's events for the same messages, with TwilioStreamProtocol's state and counts."""
    twilio, carrier = TwilioStreamProtocol(), TwilioCarrierStream()
    expected = [
        neutral.StreamConnected(),
        neutral.StreamStarted(1, CALL_SID, STREAM_SID, ACCOUNT_SID, (("session_token", "tok-123"), ("tenant", "acme")),
                              neutral.ENCODING_PCMU, 8000, 1),
        neutral.CallerAudio(2, 155, FRAME),
        neutral.Dtmf(3, "5"),
        neutral.MarkEcho(4, "3:5"),
        neutral.StreamStopped(6),
    ]
    for (message, _), event in zip(HAPPY_CALL, expected, strict=True):
        twilio.receive_text(dumps(message))
        assert carrier.receive_text(dumps(message)) == [event]
        assert carrier.state is twilio.state
    assert carrier.statistics() == twilio.statistics()


def test_the_carrier_streams_media_fast_path_is_the_protocols() -> None:
    carrier = TwilioCarrierStream()
    for message in (connected_msg(), start_msg()):
        carrier.receive_text(dumps(message))
    wire = json.dumps(media_msg(seq="2"), separators=(",", ":")).encode()
    assert carrier.receive_media(wire) == (2, 155, FRAME)
    assert carrier.statistics().media_frames == 1


@pytest.mark.parametrize(
    ("prelude", "message", "close_code"), [case[1:] for case in BAD_INPUT], ids=[case[0] for case in BAD_INPUT]
)
def test_the_carrier_stream_closes_on_the_same_input_with_the_same_violation(prelude, message, close_code) -> None:
    carrier = TwilioCarrierStream()
    for before in PRELUDES[prelude]:
        carrier.receive_text(dumps(before))
    reference = protocol_after(prelude)
    assert feed(carrier, message) == feed(reference, message)
    assert carrier.statistics() == reference.statistics() and carrier.state is State.CLOSED


def test_close_code_table_is_the_documented_one() -> None:
    assert {code.name: int(code) for code in CloseCode} == {
        "UNSUPPORTED_DATA": 1003,
        "INVALID_PAYLOAD": 1007,
        "POLICY_VIOLATION": 1008,
        "MESSAGE_TOO_BIG": 1009,
    }
    assert {case[3] for case in BAD_INPUT} == {int(code) for code in CloseCode}


def test_reasons_never_echo_peer_data() -> None:
    # Logs must not hold digits, tokens or payloads: the reason is fixed text.
    protocol = protocol_after("started")
    (violation,) = protocol.receive_text(dumps(bend(dtmf_msg(), "dtmf.digit", "secret-4242")))
    assert "4242" not in violation.reason and "secret" not in violation.reason


# --- garbage after, and truncation of, every valid message ---------------------------------------

# Each valid message of the happy call with the prelude that makes it valid.
VALID_IN_CONTEXT = [
    ("connected", FRESH, connected_msg()),
    ("start", CONNECTED, start_msg()),
    ("start-no-connected", FRESH, start_msg()),
    ("media", STARTED, media_msg()),
    ("dtmf", STARTED, dtmf_msg()),
    ("mark", STARTED, mark_msg()),
    ("stop", STARTED, stop_msg()),
]
VALID_CASES = [case[1:] for case in VALID_IN_CONTEXT]
VALID_IDS = [case[0] for case in VALID_IN_CONTEXT]
GARBAGE = ["x", "}", "]", "{}", "[]", "\n{}", ",", "0", '"', "null", "\x00", "é", dumps(connected_msg())]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize(("prelude", "message"), VALID_CASES, ids=VALID_IDS)
def test_valid_message_with_garbage_after_is_1007(prelude: str, message: dict, garbage: str, as_bytes: bool) -> None:
    # Sanity: the message alone is valid in this context.
    (event,) = protocol_after(prelude).receive_text(dumps(message))
    assert not isinstance(event, ProtocolViolation)
    protocol = protocol_after(prelude)
    text = dumps(message) + garbage
    (violation,) = protocol.receive_text(text.encode() if as_bytes else text)
    assert violation == ProtocolViolation(1007, "not a JSON value")
    assert_closed_for_good(protocol, 1007)


@pytest.mark.parametrize(("prelude", "message"), VALID_CASES, ids=VALID_IDS)
def test_every_truncation_of_a_valid_message_is_1007(prelude: str, message: dict) -> None:
    # The frame-level analogue of h11's byte-by-byte feeding: a WebSocket message is whole or malformed.
    whole = dumps(bend(message, "extra", "naïve")).encode()  # a multi-byte character to cut through
    for cut in range(len(whole)):
        protocol = protocol_after(prelude)
        (violation,) = protocol.receive_text(whole[:cut])
        assert isinstance(violation, ProtocolViolation) and violation.close_code == 1007, cut


# --- deadline ------------------------------------------------------------------------------------


@pytest.mark.parametrize("prelude", [FRESH, CONNECTED])
def test_deadline_violation(prelude: str) -> None:
    protocol = protocol_after(prelude)
    violation = protocol.deadline_violation()
    assert violation == ProtocolViolation(1008, "no start within 5 s")
    assert protocol.violation == violation
    assert_closed_for_good(protocol, 1008)


def test_deadline_after_close_does_not_count_twice() -> None:
    protocol = protocol_after(FRESH)
    protocol.receive_binary(b"x")
    assert protocol.deadline_violation().close_code == 1008
    assert protocol.violation == ProtocolViolation(1003, "binary frame")
    assert protocol.statistics().violations == 1


# --- no input can make it raise ------------------------------------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_near_messages = st.fixed_dictionaries(
    {"event": st.sampled_from(["connected", "start", "media", "dtmf", "mark", "stop", "other"])},
    optional={
        "sequenceNumber": st.sampled_from(["1", "2", "x", 2]) | _json_values,
        "streamSid": st.sampled_from([STREAM_SID, OTHER_STREAM_SID]) | _json_values,
        "media": st.fixed_dictionaries(
            {},
            optional={
                "track": st.just("inbound"),
                "chunk": st.just("1"),
                "timestamp": st.just("1"),
                "payload": st.just(FRAME_B64) | st.text(max_size=8),
            },
        ),
        "start": _json_values,
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


# --- the media fast path (receive_media) ----------------------------------------------------------


def compact(message: dict) -> bytes:
    # How Twilio really writes it (A.5): no spaces, key order event, sequenceNumber, media, streamSid.
    return json.dumps(message, separators=(",", ":")).encode()


def assert_same_media(fast: TwilioStreamProtocol, slow: TwilioStreamProtocol, data: bytes) -> None:
    """``data`` through receive_media on ``fast`` (then receive_text if it declined) and through
    receive_text on ``slow``: the same outcome, the same protocol state and counters."""
    got = fast.receive_media(data)
    if got is None:
        fast_events = fast.receive_text(data)
    slow_events = slow.receive_text(data)
    if got is not None:
        (slow_event,) = slow_events
        assert isinstance(slow_event, Media)
        assert got == (slow_event.sequence_number, slow_event.timestamp_ms, slow_event.payload)
    else:
        assert fast_events == slow_events
    assert fast.statistics() == slow.statistics()
    assert (fast.state, fast.last_sequence_number, fast.violation) == (slow.state, slow.last_sequence_number, slow.violation)


def test_receive_media_takes_twilios_exact_shape() -> None:
    protocol = protocol_after("started")
    assert protocol.receive_media(compact(media_msg(seq="2", chunk="1", timestamp="155"))) == (2, 155, FRAME)
    assert protocol.receive_media(compact(media_msg(seq="4", chunk="3", timestamp="195"))) == (4, 195, FRAME)
    assert protocol.receive_media(compact(media_msg(seq="3", chunk="2", timestamp="175"))) == (3, 175, FRAME)
    stats = protocol.statistics()
    assert (stats.messages_received, stats.media_frames, stats.media_payload_bytes) == (5, 3, 3 * FRAME_BYTES)
    assert (stats.sequence_gaps, stats.sequence_reordered, protocol.last_sequence_number) == (1, 1, 4)


@pytest.mark.parametrize("data", [
    dumps(media_msg()).encode(),  # spaces after , and :
    compact({"streamSid": STREAM_SID, **media_msg()}),  # another key order
    compact(bend(media_msg(), "media.payload", SILENCE_B64[:-2] + "AA")),  # 162 bytes, no padding
    compact(bend(media_msg(), "media.payload", FRAME_B64[:-4] + "====")),  # not base64
    compact(bend(media_msg(), "streamSid", OTHER_STREAM_SID)),
    compact(bend(media_msg(), "media.track", "outbound")),  # not a started track
    compact(bend(media_msg(), "sequenceNumber", "1" * 19)),  # longer than a counter may be
    compact(bend(media_msg(), "sequenceNumber", 2)),  # a number, not a string
    compact(bend(media_msg(), "media.extra", "x")),  # unknown key: valid, but not the exact shape
    compact(media_msg()) + b" ",
    compact(media_msg())[:-1],
    compact(mark_msg()),
], ids=["spaced", "key-order", "long-payload", "bad-base64", "other-stream", "other-track", "long-counter",
        "int-counter", "extra-key", "trailing-space", "truncated", "mark"])
def test_receive_media_declines_anything_else_and_changes_nothing(data: bytes) -> None:
    fast, slow = protocol_after("started"), protocol_after("started")
    before = fast.statistics()
    assert fast.receive_media(data) is None
    assert fast.statistics() == before and fast.state is State.STREAMING
    assert_same_media(fast, slow, data)


@pytest.mark.parametrize("prelude", ["fresh", "connected", "stopped"])
def test_receive_media_only_while_streaming(prelude: str) -> None:
    protocol = protocol_after(prelude)
    assert protocol.receive_media(compact(media_msg())) is None
    assert protocol.statistics().messages_received == len(PRELUDES[prelude])


def test_receive_media_declines_str_and_after_a_violation() -> None:
    protocol = protocol_after("started")
    assert protocol.receive_media(compact(media_msg()).decode()) is None
    protocol.receive_text("[]")
    assert protocol.state is State.CLOSED
    assert protocol.receive_media(compact(media_msg())) is None


@given(messages=st.lists(
    st.builds(media_msg, seq=st.sampled_from(["2", "3", "7", "02", "1" * 18, "x", ""]),
              chunk=st.sampled_from(["1", "9", "-1"]), timestamp=st.sampled_from(["0", "155", "1e3"]),
              payload=st.sampled_from([FRAME_B64, SILENCE_B64, FRAME_B64[:-4], FRAME_B64 + "AAAA", ""]))
    | _near_messages, max_size=5))
def test_receive_media_agrees_with_receive_text(messages: list[dict]) -> None:
    fast, slow = protocol_after("started"), protocol_after("started")
    for message in messages:
        assert_same_media(fast, slow, compact(message))


# --- outbound ------------------------------------------------------------------------------------


def test_media_round_trips_and_is_compact() -> None:
    encoder = OutboundEncoder(STREAM_SID)
    wire = encoder.media(FRAME)
    assert json.loads(wire) == {"event": "media", "streamSid": STREAM_SID, "media": {"payload": FRAME_B64}}
    assert b" " not in wire and b"\n" not in wire
    assert wire == encoder.media_prefix + FRAME_B64.encode() + encoder.media_suffix
    assert len(wire) == len(encoder.media_prefix) + 216 + len(encoder.media_suffix)
    assert wire.startswith(b'{"event":"media","streamSid":"MZ')


@pytest.mark.parametrize("payload", [FRAME, b"\xff" * FRAME_BYTES * 50, b"\x00", b""])
def test_media_any_length_round_trips(payload: bytes) -> None:
    message = json.loads(OutboundEncoder(STREAM_SID).media(payload))
    assert base64.b64decode(message["media"]["payload"], validate=True) == payload


def test_prefix_and_suffix_assemble_a_media_message() -> None:
    # The pacer writes prefix, base64 and suffix into shared memory itself.
    encoder = OutboundEncoder(STREAM_SID)
    assembled = bytearray(encoder.media_prefix)
    assembled += base64.b64encode(FRAME)
    assembled += encoder.media_suffix
    assert bytes(assembled) == encoder.media(FRAME)
    assert isinstance(encoder.media_prefix, bytes) and isinstance(encoder.media_suffix, bytes)


@pytest.mark.parametrize("name", ["1:5", "1:10:end", "mark \"quoted\" \\ back", "naïve ☎", "\n\t", "\ud800"])
def test_mark_round_trips(name: str) -> None:
    wire = OutboundEncoder(STREAM_SID).mark(name)
    assert json.loads(wire) == {"event": "mark", "streamSid": STREAM_SID, "mark": {"name": name}}
    wire.decode("ascii")  # escaped, so always ASCII
    assert b": " not in wire and b", " not in wire


@pytest.mark.parametrize("name", ["", None, 5])
def test_mark_rejects_unusable_names(name: object) -> None:
    with pytest.raises(ValueError):
        OutboundEncoder(STREAM_SID).mark(name)  # type: ignore[arg-type]


def test_clear_round_trips() -> None:
    wire = OutboundEncoder(STREAM_SID).clear()
    assert wire == b'{"event":"clear","streamSid":"' + STREAM_SID.encode() + b'"}'
    assert json.loads(wire) == {"event": "clear", "streamSid": STREAM_SID}


def test_encoder_accepts_the_stream_sid_the_protocol_accepted() -> None:
    protocol = protocol_after("started")
    assert protocol.stream_sid is not None
    assert OutboundEncoder(protocol.stream_sid).stream_sid == STREAM_SID


@pytest.mark.parametrize("sid", ["", 'MZ"x', "MZ\\x", "MZé", "MZ\n", "MZ\x7f", "MZ\x00", None, b"MZ00"])
def test_encoder_rejects_unsafe_stream_sid(sid: object) -> None:
    with pytest.raises(ValueError):
        OutboundEncoder(sid)  # type: ignore[arg-type]


def test_encoder_accepts_any_template_safe_sid() -> None:
    sid = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\')
    encoder = OutboundEncoder(sid)
    for wire, expected in [
        (encoder.media(FRAME), {"event": "media", "streamSid": sid, "media": {"payload": FRAME_B64}}),
        (encoder.mark("m"), {"event": "mark", "streamSid": sid, "mark": {"name": "m"}}),
        (encoder.clear(), {"event": "clear", "streamSid": sid}),
    ]:
        assert json.loads(wire) == expected
