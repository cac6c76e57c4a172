"""Telnyx media streaming core: every inbound event, every bad-input class and its close code, garbage
after and truncation of each valid message, the reorder window, the outbound byte shapes, the carrier's
end (the simulator core) with round trips both ways, the TeXML answer and webhook signatures.

Message shapes follow Telnyx's "Media Streaming over Websockets" guide and the AsyncAPI page (see the
module docstring of voicecore.carriers.telnyx): string counters, ``stream_id`` at the top level.
"""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ElementTree

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from voicecore.carriers.events import (
    ENCODING_PCMA,
    CallerAudio,
    Dtmf,
    MarkEcho,
    Outbound,
    ProtocolViolation,
    StreamConnected,
    StreamStarted,
    StreamStopped,
)
from voicecore.carriers.telnyx.protocol import (
    CLEAR_MESSAGE,
    FIRST_CHUNK,
    MEDIA_PREFIX,
    MEDIA_SUFFIX,
    REORDER_WINDOW_FRAMES,
    CloseCode,
    Rejected,
    SentClear,
    SentMark,
    SentMedia,
    State,
    TelnyxCarrierSide,
    TelnyxError,
    TelnyxOutboundEncoder,
    TelnyxStreamProtocol,
    sign_webhook,
    texml_connect_stream,
    verify_webhook,
    wire_templates,
)
from voicecore.carriers.wire import RAW
from voicecore.timing import FRAME_BYTES, MAX_MESSAGE_BYTES

# The ids of the Telnyx docs' examples.
STREAM_ID = "32DE0DEA-53CB-4B21-89A4-9E1819C043BC"
OTHER_STREAM_ID = "32de0dea-53cb-4b21-89a4-9e1819c043bc"  # same UUID, other case: still another id
CALL_CONTROL_ID = "v2:T02llQxIyaRkhfRKxgAP8nY511EhFLizdvdUKJiSw8d6A9BborherQ"
OTHER_CALL_CONTROL_ID = "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg"
USER_ID = "3E6F995F-85F7-4705-9741-53B116D28237"
FRAME = bytes(range(FRAME_BYTES))
FRAME_B64 = base64.b64encode(FRAME).decode("ascii")


# --- message builders (dicts, so a test can bend one field) ----------------------------------------


def connected_msg() -> dict:
    return {"event": "connected", "version": "1.0.0"}


def start_msg(seq: object = "1", encoding: str = "PCMU", custom: object = None) -> dict:
    # The guide's example, with custom_parameters from the AsyncAPI example.
    return {
        "event": "start",
        "sequence_number": seq,
        "start": {
            "user_id": USER_ID,
            "call_control_id": CALL_CONTROL_ID,
            "call_session_id": "ff55a038-6f5d-11ef-9692-02420aeffb1f",
            "from": "+13122010094",
            "to": "+13122123456",
            "tags": ["TAG1", "TAG2"],
            "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
            "custom_parameters": {"session_token": "tok-123", "tenant": "acme"} if custom is None else custom,
            "media_format": {"encoding": encoding, "sample_rate": 8000, "channels": 1},
        },
        "stream_id": STREAM_ID,
    }


def media_msg(seq: object = "2", chunk: object = "1", timestamp: object = "5", payload: str = FRAME_B64,
              track: str = "inbound") -> dict:
    return {
        "event": "media",
        "sequence_number": seq,
        "media": {"track": track, "chunk": chunk, "timestamp": timestamp, "payload": payload},
        "stream_id": STREAM_ID,
    }


def dtmf_msg(seq: str = "3", digit: str = "1") -> dict:
    return {"event": "dtmf", "stream_id": STREAM_ID, "occurred_at": "2025-06-05T08:54:19.698408Z",
            "sequence_number": seq, "dtmf": {"digit": digit}}


def mark_msg(seq: str = "4", name: str = "some_mark_name") -> dict:
    return {"event": "mark", "stream_id": STREAM_ID, "sequence_number": seq, "mark": {"name": name}}


def error_msg(code: object = 100002) -> dict:
    # The current guide's shape.
    return {"event": "error", "payload": {"code": code, "title": "unknown_error",
                                          "detail": "An unknown error occurred on the stream"},
            "stream_id": STREAM_ID}


def old_error_msg() -> dict:
    # The older Call Control docs' shape: `error` object, string code, a sequence number.
    return {"stream_id": STREAM_ID, "event": "error", "sequence_number": "6",
            "error": {"title": "rate_limit_reached", "code": "100005", "detail": "Too many requests"}}


def stop_msg(seq: str = "5") -> dict:
    return {"event": "stop", "sequence_number": seq, "stop": {"user_id": USER_ID, "call_control_id": CALL_CONTROL_ID},
            "stream_id": STREAM_ID}


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
FRESH, CONNECTED, STARTED, STOPPED = "fresh", "connected", "started", "stopped"


def protocol_after(prelude: str, **kwargs) -> TelnyxStreamProtocol:
    protocol = TelnyxStreamProtocol(**kwargs)
    for message in PRELUDES[prelude]:
        events = protocol.receive_text(dumps(message))
        assert not any(isinstance(event, ProtocolViolation) for event in events), events
    return protocol


def feed(protocol: TelnyxStreamProtocol, message: object) -> list:
    if isinstance(message, tuple) and message[0] == "binary":
        return protocol.receive_binary(message[1])
    if isinstance(message, dict):
        return protocol.receive_text(dumps(message))
    return protocol.receive_text(message)  # type: ignore[arg-type]


# --- valid input, message by message ---------------------------------------------------------------

EXPECTED_START = StreamStarted(
    sequence_number=1,
    call_id=CALL_CONTROL_ID,
    stream_id="",
    account_id=USER_ID,
    custom_parameters=(("session_token", "tok-123"), ("tenant", "acme")),
    encoding="pcmu",
    sample_rate_hz=8000,
    channels=1,
)

HAPPY_CALL: list[tuple[dict, list, State]] = [
    (connected_msg(), [StreamConnected(fields=(("version", "1.0.0"),))], State.AWAITING_START),
    (start_msg(), [EXPECTED_START], State.STREAMING),
    (media_msg(), [CallerAudio(sequence_number=2, timestamp_ms=5, payload=FRAME)], State.STREAMING),
    (dtmf_msg(), [Dtmf(sequence_number=3, digit="1")], State.STREAMING),
    (mark_msg(), [MarkEcho(sequence_number=4, name="some_mark_name")], State.STREAMING),
    (error_msg(), [], State.STREAMING),
    (stop_msg(seq="6"), [StreamStopped(sequence_number=6, reason="carrier stop")], State.STOPPED),
]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "utf8-bytes"])
def test_happy_call_fed_message_by_message(as_bytes: bool) -> None:
    protocol = TelnyxStreamProtocol()
    assert protocol.state is State.AWAITING_CONNECTED
    for message, expected, state in HAPPY_CALL:
        text = dumps(message)
        assert protocol.receive_text(text.encode() if as_bytes else text) == expected
        assert protocol.state is state
    assert protocol.stream_id == STREAM_ID
    assert (protocol.call_control_id, protocol.user_id) == (CALL_CONTROL_ID, USER_ID)
    assert protocol.call_session_id == "ff55a038-6f5d-11ef-9692-02420aeffb1f"
    assert protocol.client_state == "aGF2ZSBhIG5pY2UgZGF5ID1d"
    assert (protocol.from_number, protocol.to_number) == ("+13122010094", "+13122123456")
    assert protocol.encoding == "pcmu"
    assert protocol.last_error == TelnyxError(code=100002, title="unknown_error")
    assert protocol.violation is None
    stats = protocol.statistics()
    assert (stats.messages_received, stats.media_frames, stats.media_payload_bytes) == (7, 1, FRAME_BYTES)
    assert (stats.frames_released, stats.marks_received, stats.dtmf_received) == (1, 1, 1)
    assert (stats.carrier_errors, stats.violations, stats.gaps_skipped, stats.late_dropped) == (1, 0, 0, 0)


# Each valid message alone, fed whole, with the prelude that makes it valid, and its events.
VALID_IN_CONTEXT: list[tuple[str, str, dict, list]] = [
    ("connected", FRESH, connected_msg(), [StreamConnected(fields=(("version", "1.0.0"),))]),
    ("start", CONNECTED, start_msg(), [EXPECTED_START]),
    ("start-no-connected", FRESH, start_msg(), [EXPECTED_START]),
    ("media", STARTED, media_msg(), [CallerAudio(2, 5, FRAME)]),
    ("media-outbound-track", STARTED, media_msg(track="outbound"), []),
    ("dtmf", STARTED, dtmf_msg(), [Dtmf(3, "1")]),
    ("mark", STARTED, mark_msg(), [MarkEcho(4, "some_mark_name")]),
    ("error", STARTED, error_msg(), []),
    ("error-old-shape", STARTED, old_error_msg(), []),
    ("stop", STARTED, stop_msg(), [StreamStopped(5, "carrier stop")]),
]
VALID_CASES = [case[1:3] for case in VALID_IN_CONTEXT]
VALID_IDS = [case[0] for case in VALID_IN_CONTEXT]


@pytest.mark.parametrize(("prelude", "message", "expected"), [case[1:] for case in VALID_IN_CONTEXT], ids=VALID_IDS)
def test_each_valid_message_fed_whole(prelude: str, message: dict, expected: list) -> None:
    protocol = protocol_after(prelude)
    assert protocol.receive_text(dumps(message)) == expected
    assert protocol.violation is None


def test_start_event_is_hashable_and_looks_up_parameters() -> None:
    assert hash(EXPECTED_START) == hash(EXPECTED_START)
    assert EXPECTED_START.custom_parameter("session_token") == "tok-123"
    assert EXPECTED_START.custom_parameter("missing") is None


@pytest.mark.parametrize(
    ("encoding", "expected"), [("PCMU", "pcmu"), ("PCMA", "pcma"), ("audio/x-mulaw", "pcmu")],
    ids=["pcmu", "pcma", "older-docs-mulaw-spelling"],
)
def test_accepted_encodings(encoding: str, expected: str) -> None:
    protocol = protocol_after(CONNECTED)
    (started,) = protocol.receive_text(dumps(start_msg(encoding=encoding)))
    assert isinstance(started, StreamStarted) and started.encoding == expected
    assert protocol.encoding == expected


@pytest.mark.parametrize("custom", [DELETE, None, {}], ids=["absent", "null", "empty"])
def test_start_without_custom_parameters_reads_as_empty(custom: object) -> None:
    message = start_msg()
    message = bend(message, "start.custom_parameters", custom)
    (started,) = protocol_after(CONNECTED).receive_text(dumps(message))
    assert isinstance(started, StreamStarted) and started.custom_parameters == ()


def test_start_with_only_the_required_fields() -> None:
    # The oldest docs' start: no call_session_id, from, to, tags, client_state or custom_parameters.
    message = {"event": "start", "sequence_number": "1",
               "start": {"user_id": USER_ID, "call_control_id": CALL_CONTROL_ID,
                         "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1}},
               "stream_id": STREAM_ID}
    protocol = protocol_after(CONNECTED)
    (started,) = protocol.receive_text(dumps(message))
    assert isinstance(started, StreamStarted) and started.call_id == CALL_CONTROL_ID
    assert (protocol.client_state, protocol.from_number, protocol.call_session_id) == (None, None, None)


def test_nullable_start_fields() -> None:
    message = bend(bend(start_msg(), "start.client_state", None), "start.from", None)
    protocol = protocol_after(CONNECTED)
    (started,) = protocol.receive_text(dumps(message))
    assert isinstance(started, StreamStarted)
    assert (protocol.client_state, protocol.from_number) == (None, None)


def test_unknown_keys_are_ignored() -> None:
    protocol = TelnyxStreamProtocol()
    # The AsyncAPI connected frame may carry the streaming auth token; it is a credential: never copied.
    connected = {**connected_msg(), "connected": {"x-telnyx-streaming-auth-token": "secret"}}
    assert protocol.receive_text(dumps(connected)) == [StreamConnected(fields=(("version", "1.0.0"),))]
    protocol.receive_text(dumps(bend(start_msg(), "start.new_field", {"x": 1})))
    message = bend(media_msg(), "media.extra", [1])
    message["new_top_level"] = None
    assert protocol.receive_text(dumps(message)) == [CallerAudio(2, 5, FRAME)]


def test_integer_counters_are_accepted_too() -> None:
    protocol = protocol_after(CONNECTED)
    (started,) = protocol.receive_text(dumps(start_msg(seq=1)))
    assert isinstance(started, StreamStarted) and started.sequence_number == 1
    assert protocol.receive_text(dumps(media_msg(seq=2, chunk=1, timestamp=20))) == [CallerAudio(2, 20, FRAME)]


@pytest.mark.parametrize("digit", list("0123456789*#ABCD"))
def test_every_dtmf_key(digit: str) -> None:
    assert protocol_after(STARTED).receive_text(dumps(dtmf_msg(digit=digit))) == [Dtmf(3, digit)]


def test_dtmf_without_sequence_number_reads_zero() -> None:
    message = bend(dtmf_msg(), "sequence_number", DELETE)
    assert protocol_after(STARTED).receive_text(dumps(message)) == [Dtmf(0, "1")]


def test_mark_names_pass_through_unchanged() -> None:
    protocol = protocol_after(STARTED)
    for seq, name in enumerate(["7:5", "", "naïve \"quoted\" \\ name"], start=2):
        assert protocol.receive_text(dumps(mark_msg(seq=str(seq), name=name))) == [MarkEcho(seq, name)]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (error_msg(100003), TelnyxError(100003, "malformed_frame")),
        (error_msg("100004"), TelnyxError(100004, "invalid_media")),
        (old_error_msg(), TelnyxError(100005, "rate_limit_reached")),
        (error_msg(999), TelnyxError(999, "other")),
    ],
    ids=["new-shape", "string-code", "old-shape", "undocumented-code"],
)
def test_error_frames_are_counted_and_kept_not_fatal(message: dict, expected: TelnyxError) -> None:
    protocol = protocol_after(STARTED)
    message = bend(message, "payload" if "payload" in message else "error", {
        **(message.get("payload") or message.get("error")), "title": "<peer text never kept>"})
    assert protocol.receive_text(dumps(message)) == []
    assert protocol.last_error == expected
    assert protocol.state is State.STREAMING
    assert protocol.statistics().carrier_errors == 1
    assert protocol.receive_text(dumps(media_msg())) == [CallerAudio(2, 5, FRAME)]


def test_outbound_track_frames_are_validated_counted_and_never_released() -> None:
    protocol = protocol_after(STARTED)
    assert protocol.receive_text(dumps(media_msg(track="outbound", chunk="1"))) == []
    # The outbound track has its own chunk counter: it does not move the inbound window.
    assert protocol.receive_text(dumps(media_msg(seq="3", chunk="1"))) == [CallerAudio(3, 5, FRAME)]
    stats = protocol.statistics()
    assert (stats.outbound_frames_ignored, stats.media_frames, stats.frames_released) == (1, 1, 1)
    (violation,) = protocol.receive_text(dumps(media_msg(track="outbound", payload="!")))
    assert violation == ProtocolViolation(1007, "payload is not base64")


def test_payloads_of_any_length_pass_unchanged() -> None:
    # An RTP payload is one packet: 20 ms is usual, but ptime is the call's, so no size is assumed.
    protocol = protocol_after(STARTED)
    for chunk, size in enumerate([1, 160, 240, 320], start=1):
        payload = bytes(size)
        message = media_msg(seq=str(chunk + 1), chunk=str(chunk), payload=base64.b64encode(payload).decode())
        assert protocol.receive_text(dumps(message)) == [CallerAudio(chunk + 1, 5, payload)]


def test_message_of_exactly_max_bytes_is_accepted() -> None:
    text = dumps(media_msg())
    padded = text + " " * (MAX_MESSAGE_BYTES - len(text))  # JSON allows trailing whitespace
    assert len(padded.encode()) == MAX_MESSAGE_BYTES
    (event,) = protocol_after(STARTED).receive_text(padded)
    assert isinstance(event, CallerAudio)
    (event,) = protocol_after(STARTED).receive_text(padded.encode())
    assert isinstance(event, CallerAudio)


# --- bad input: one table, one close code each ---------------------------------------------------

BIG = MAX_MESSAGE_BYTES + 1
M = media_msg()

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
    ("nan", STARTED, '{"event":"media","sequence_number":NaN}', 1007),
    ("deep-nesting", STARTED, "[" * 30_000 + "]" * 30_000, 1007),
    ("array", STARTED, "[]", 1007),
    ("string", STARTED, '"media"', 1007),
    ("null", STARTED, "null", 1007),
    ("no-event", STARTED, "{}", 1007),
    ("event-int", STARTED, '{"event":1}', 1007),
    ("event-list", FRESH, '{"event":["start"]}', 1007),
    # 1008: unknown event (ours, Twilio's, Telnyx webhook names are not stream events)
    ("unknown-event-fresh", FRESH, {"event": "hello"}, 1008),
    ("unknown-event-case", STARTED, {"event": "Media"}, 1008),
    ("unknown-event-clear", STARTED, {"event": "clear"}, 1008),
    ("unknown-event-webhook-name", STARTED, {"event": "streaming.started"}, 1008),
    # 1008: order
    ("media-before-start", FRESH, M, 1008),
    ("media-after-connected", CONNECTED, M, 1008),
    ("dtmf-before-start", CONNECTED, dtmf_msg(), 1008),
    ("mark-before-start", CONNECTED, mark_msg(), 1008),
    ("error-before-start", CONNECTED, error_msg(), 1008),
    ("stop-before-start", CONNECTED, stop_msg(), 1008),
    ("second-connected", CONNECTED, connected_msg(), 1008),
    ("connected-after-start", STARTED, connected_msg(), 1008),
    ("second-start", STARTED, start_msg(seq="2"), 1008),
    ("media-after-stop", STOPPED, media_msg(seq="3"), 1008),
    ("mark-after-stop", STOPPED, mark_msg(seq="3"), 1008),
    ("error-after-stop", STOPPED, error_msg(), 1008),
    ("stop-after-stop", STOPPED, stop_msg(seq="3"), 1008),
    ("start-after-stop", STOPPED, start_msg(seq="3"), 1008),
    ("garbage-after-stop-is-still-malformed", STOPPED, "nope", 1007),
    # 1008: another stream's or call's ids
    ("media-wrong-stream", STARTED, bend(M, "stream_id", OTHER_STREAM_ID), 1008),
    ("dtmf-wrong-stream", STARTED, bend(dtmf_msg(), "stream_id", OTHER_STREAM_ID), 1008),
    ("mark-wrong-stream", STARTED, bend(mark_msg(), "stream_id", OTHER_STREAM_ID), 1008),
    ("error-wrong-stream", STARTED, bend(error_msg(), "stream_id", OTHER_STREAM_ID), 1008),
    ("stop-wrong-stream", STARTED, bend(stop_msg(), "stream_id", OTHER_STREAM_ID), 1008),
    ("stop-other-call", STARTED, bend(stop_msg(), "stop.call_control_id", OTHER_CALL_CONTROL_ID), 1008),
    ("stop-other-account", STARTED, bend(stop_msg(), "stop.user_id", "another-user"), 1008),
    # 1007: connected
    ("connected-no-version", FRESH, bend(connected_msg(), "version", DELETE), 1007),
    ("connected-version-number", FRESH, bend(connected_msg(), "version", 1.0), 1007),
    # 1007: start
    ("start-seq-missing", CONNECTED, bend(start_msg(), "sequence_number", DELETE), 1007),
    ("start-seq-empty", CONNECTED, bend(start_msg(), "sequence_number", ""), 1007),
    ("start-seq-negative-str", CONNECTED, bend(start_msg(), "sequence_number", "-1"), 1007),
    ("start-seq-negative-int", CONNECTED, bend(start_msg(), "sequence_number", -1), 1007),
    ("start-seq-float-str", CONNECTED, bend(start_msg(), "sequence_number", "1.0"), 1007),
    ("start-seq-float", CONNECTED, bend(start_msg(), "sequence_number", 1.0), 1007),
    ("start-seq-bool", CONNECTED, bend(start_msg(), "sequence_number", True), 1007),
    ("start-seq-plus", CONNECTED, bend(start_msg(), "sequence_number", "+1"), 1007),
    ("start-seq-arabic-digit", CONNECTED, bend(start_msg(), "sequence_number", "\u0661"), 1007),
    ("start-seq-too-long", CONNECTED, bend(start_msg(), "sequence_number", "9" * 5000), 1007),
    ("start-seq-int-too-big", CONNECTED, bend(start_msg(), "sequence_number", 10**19), 1007),
    ("start-no-stream_id", CONNECTED, bend(start_msg(), "stream_id", DELETE), 1007),
    ("start-stream_id-only-inside", CONNECTED,
     bend(bend(start_msg(), "stream_id", DELETE), "start.stream_id", STREAM_ID), 1007),
    ("start-stream_id-empty", CONNECTED, bend(start_msg(), "stream_id", ""), 1007),
    ("start-stream_id-quote", CONNECTED, bend(start_msg(), "stream_id", 'a"b'), 1007),
    ("start-stream_id-space", CONNECTED, bend(start_msg(), "stream_id", "a b"), 1007),
    ("start-stream_id-long", CONNECTED, bend(start_msg(), "stream_id", "a" * 257), 1007),
    ("start-stream_id-int", CONNECTED, bend(start_msg(), "stream_id", 5), 1007),
    ("start-body-missing", CONNECTED, bend(start_msg(), "start", DELETE), 1007),
    ("start-body-list", CONNECTED, bend(start_msg(), "start", []), 1007),
    ("start-call_control_id-missing", CONNECTED, bend(start_msg(), "start.call_control_id", DELETE), 1007),
    ("start-call_control_id-empty", CONNECTED, bend(start_msg(), "start.call_control_id", ""), 1007),
    ("start-call_control_id-newline", CONNECTED, bend(start_msg(), "start.call_control_id", "v3:a\nb"), 1007),
    ("start-user_id-missing", CONNECTED, bend(start_msg(), "start.user_id", DELETE), 1007),
    ("start-client_state-int", CONNECTED, bend(start_msg(), "start.client_state", 1), 1007),
    ("start-from-list", CONNECTED, bend(start_msg(), "start.from", ["+1"]), 1007),
    ("start-session-int", CONNECTED, bend(start_msg(), "start.call_session_id", 7), 1007),
    ("start-params-list", CONNECTED, bend(start_msg(), "start.custom_parameters", [["a", "b"]]), 1007),
    ("start-params-int-value", CONNECTED, bend(start_msg(), "start.custom_parameters", {"a": 1}), 1007),
    ("start-format-missing", CONNECTED, bend(start_msg(), "start.media_format", DELETE), 1007),
    ("start-format-g722", CONNECTED, start_msg(encoding="G722"), 1007),
    ("start-format-opus", CONNECTED, start_msg(encoding="OPUS"), 1007),
    ("start-format-amr-wb", CONNECTED, start_msg(encoding="AMR-WB"), 1007),
    ("start-format-l16", CONNECTED, start_msg(encoding="L16"), 1007),
    ("start-format-lowercase", CONNECTED, start_msg(encoding="pcmu"), 1007),
    ("start-format-encoding-int", CONNECTED, bend(start_msg(), "start.media_format.encoding", 0), 1007),
    ("start-format-rate-16k", CONNECTED, bend(start_msg(), "start.media_format.sample_rate", 16000), 1007),
    ("start-format-rate-string", CONNECTED, bend(start_msg(), "start.media_format.sample_rate", "8000"), 1007),
    ("start-format-rate-float", CONNECTED, bend(start_msg(), "start.media_format.sample_rate", 8000.0), 1007),
    ("start-format-channels-2", CONNECTED, bend(start_msg(), "start.media_format.channels", 2), 1007),
    ("start-format-channels-missing", CONNECTED, bend(start_msg(), "start.media_format.channels", DELETE), 1007),
    # 1007: media
    ("media-seq-missing", STARTED, bend(M, "sequence_number", DELETE), 1007),
    ("media-seq-hex", STARTED, bend(M, "sequence_number", "0x2"), 1007),
    ("media-no-stream_id", STARTED, bend(M, "stream_id", DELETE), 1007),
    ("media-stream_id-null", STARTED, bend(M, "stream_id", None), 1007),
    ("media-body-missing", STARTED, bend(M, "media", DELETE), 1007),
    ("media-body-string", STARTED, bend(M, "media", FRAME_B64), 1007),
    ("media-track-missing", STARTED, bend(M, "media.track", DELETE), 1007),
    ("media-track-both", STARTED, bend(M, "media.track", "inbound/outbound"), 1007),
    ("media-track-twilio-name", STARTED, bend(M, "media.track", "inbound_track"), 1007),
    ("media-chunk-missing", STARTED, bend(M, "media.chunk", DELETE), 1007),
    ("media-chunk-negative", STARTED, bend(M, "media.chunk", -1), 1007),
    ("media-timestamp-missing", STARTED, bend(M, "media.timestamp", DELETE), 1007),
    ("media-timestamp-float", STARTED, bend(M, "media.timestamp", "5.5"), 1007),
    ("media-payload-missing", STARTED, bend(M, "media.payload", DELETE), 1007),
    ("media-payload-list", STARTED, bend(M, "media.payload", list(FRAME)), 1007),
    ("media-payload-bad-char", STARTED, bend(M, "media.payload", "!" + FRAME_B64[1:]), 1007),
    ("media-payload-urlsafe", STARTED, bend(M, "media.payload", base64.urlsafe_b64encode(FRAME).decode()), 1007),
    ("media-payload-newline", STARTED, bend(M, "media.payload", FRAME_B64 + "\n"), 1007),
    ("media-payload-bad-padding", STARTED, bend(M, "media.payload", FRAME_B64.rstrip("=") + "A"), 1007),
    ("media-payload-non-ascii", STARTED, bend(M, "media.payload", "é" + FRAME_B64[1:]), 1007),
    ("media-payload-empty", STARTED, bend(M, "media.payload", ""), 1007),
    # 1007: dtmf, mark, error, stop
    ("dtmf-body-missing", STARTED, bend(dtmf_msg(), "dtmf", DELETE), 1007),
    ("dtmf-two-digits", STARTED, bend(dtmf_msg(), "dtmf.digit", "12"), 1007),
    ("dtmf-empty-digit", STARTED, bend(dtmf_msg(), "dtmf.digit", ""), 1007),
    ("dtmf-lowercase-letter", STARTED, bend(dtmf_msg(), "dtmf.digit", "a"), 1007),
    ("dtmf-digit-int", STARTED, bend(dtmf_msg(), "dtmf.digit", 5), 1007),
    ("dtmf-seq-bad", STARTED, bend(dtmf_msg(), "sequence_number", "three"), 1007),
    ("dtmf-no-stream_id", STARTED, bend(dtmf_msg(), "stream_id", DELETE), 1007),
    ("mark-body-missing", STARTED, bend(mark_msg(), "mark", DELETE), 1007),
    ("mark-name-missing", STARTED, bend(mark_msg(), "mark.name", DELETE), 1007),
    ("mark-name-int", STARTED, bend(mark_msg(), "mark.name", 3), 1007),
    ("mark-seq-missing", STARTED, bend(mark_msg(), "sequence_number", DELETE), 1007),
    ("error-no-body", STARTED, bend(error_msg(), "payload", DELETE), 1007),
    ("error-body-string", STARTED, bend(error_msg(), "payload", "boom"), 1007),
    ("error-code-missing", STARTED, bend(error_msg(), "payload.code", DELETE), 1007),
    ("error-code-text", STARTED, bend(error_msg(), "payload.code", "unknown"), 1007),
    ("error-title-missing", STARTED, bend(error_msg(), "payload.title", DELETE), 1007),
    ("error-seq-bad", STARTED, bend(old_error_msg(), "sequence_number", "six"), 1007),
    ("stop-body-missing", STARTED, bend(stop_msg(), "stop", DELETE), 1007),
    ("stop-call_control_id-missing", STARTED, bend(stop_msg(), "stop.call_control_id", DELETE), 1007),
    ("stop-user_id-int", STARTED, bend(stop_msg(), "stop.user_id", 3), 1007),
    ("stop-seq-missing", STARTED, bend(stop_msg(), "sequence_number", DELETE), 1007),
]


def assert_closed_for_good(protocol: TelnyxStreamProtocol, close_code: int) -> None:
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
    (violation,) = feed(protocol, message)
    assert isinstance(violation, ProtocolViolation)
    assert violation.close_code == close_code and type(violation.close_code) is int
    assert violation.reason and len(violation.reason.encode()) <= 123  # fits a WebSocket close frame
    # A rejected message changes no counter but the message count and the violation count.
    stats_after = protocol.statistics()
    assert stats_after.media_frames == stats_before.media_frames
    assert stats_after.carrier_errors == stats_before.carrier_errors
    assert stats_after.messages_received == stats_before.messages_received + 1
    assert_closed_for_good(protocol, close_code)


def test_unsupported_codec_has_one_fixed_reason() -> None:
    for encoding in ("G722", "OPUS", "AMR-WB", "L16"):
        (violation,) = protocol_after(CONNECTED).receive_text(dumps(start_msg(encoding=encoding)))
        assert violation == ProtocolViolation(1007, "media format is not PCMU/PCMA 8000 Hz mono")


def test_close_code_table_is_the_documented_one() -> None:
    assert {code.name: int(code) for code in CloseCode} == {
        "UNSUPPORTED_DATA": 1003,
        "INVALID_PAYLOAD": 1007,
        "POLICY_VIOLATION": 1008,
        "MESSAGE_TOO_BIG": 1009,
    }
    # Every code of the table is exercised by the bad-input table.
    assert {case[3] for case in BAD_INPUT} == {int(code) for code in CloseCode}


def test_reasons_never_echo_peer_data() -> None:
    protocol = protocol_after(STARTED)
    (violation,) = protocol.receive_text(dumps(bend(dtmf_msg(), "dtmf.digit", "secret-4242")))
    assert "4242" not in violation.reason and "secret" not in violation.reason


def test_a_rejected_media_message_leaves_the_window_untouched() -> None:
    protocol = protocol_after(STARTED)
    protocol.receive_text(dumps(media_msg(chunk="2")))  # held: chunk 1 is missing
    assert protocol.held_frames == 1
    (violation,) = protocol.receive_text(dumps(bend(media_msg(chunk="1"), "media.payload", "")))
    assert violation.close_code == 1007
    assert protocol.held_frames == 1 and protocol.statistics().frames_released == 0


# --- garbage after, and truncation of, every valid message ---------------------------------------

GARBAGE = ["x", "}", "]", "{}", "[]", "\n{}", ",", "0", '"', "null", "\x00", "é", dumps(connected_msg())]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize(("prelude", "message"), VALID_CASES, ids=VALID_IDS)
def test_valid_message_with_garbage_after_is_1007(prelude: str, message: dict, garbage: str, as_bytes: bool) -> None:
    protocol = protocol_after(prelude)
    text = dumps(message) + garbage
    (violation,) = protocol.receive_text(text.encode() if as_bytes else text)
    assert violation == ProtocolViolation(1007, "not a JSON value")
    assert_closed_for_good(protocol, 1007)


@pytest.mark.parametrize(("prelude", "message"), VALID_CASES, ids=VALID_IDS)
def test_every_truncation_of_a_valid_message_is_1007(prelude: str, message: dict) -> None:
    # The frame-level analogue of feeding byte by byte: a WebSocket message is whole or malformed.
    whole = dumps(bend(message, "extra", "naïve")).encode()  # a multi-byte character to cut through
    for cut in range(len(whole)):
        (violation,) = protocol_after(prelude).receive_text(whole[:cut])
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


# --- the reorder window --------------------------------------------------------------------------


def push_chunks(protocol: TelnyxStreamProtocol, chunks: list[int]) -> list[list[int]]:
    """Feed media frames with these chunks (the payload's first byte is the chunk, to see it back);
    return the chunks released after each one."""
    releases = []
    for sequence, chunk in enumerate(chunks, start=2):
        payload = bytes([chunk % 256]) * FRAME_BYTES
        message = media_msg(seq=str(sequence), chunk=str(chunk), timestamp=str(20 * chunk),
                            payload=base64.b64encode(payload).decode())
        events = protocol.receive_text(dumps(message))
        assert all(isinstance(event, CallerAudio) for event in events), events
        releases.append([event.timestamp_ms // 20 for event in events])
    return releases


# (id, arrivals, released after each arrival, (reordered, gaps_skipped, frames_skipped, late, duplicates), held)
REORDER_CASES = [
    ("in-order", [1, 2, 3, 4], [[1], [2], [3], [4]], (0, 0, 0, 0, 0), 0),
    ("swapped-pairs", [2, 1, 4, 3, 6, 5], [[], [1, 2], [], [3, 4], [], [5, 6]], (3, 0, 0, 0, 0), 0),
    ("reversed-full-window", [4, 3, 2, 1], [[], [], [], [1, 2, 3, 4]], (3, 0, 0, 0, 0), 0),
    ("gap-times-out-by-overflow", [1, 3, 4, 5, 6], [[1], [], [], [], [3, 4, 5, 6]], (0, 1, 1, 0, 0), 0),
    ("gap-of-two", [1, 4, 5, 6, 7], [[1], [], [], [], [4, 5, 6, 7]], (0, 1, 2, 0, 0), 0),
    ("skipped-frame-arrives-late", [1, 3, 4, 5, 6, 2], [[1], [], [], [], [3, 4, 5, 6], []], (0, 1, 1, 1, 0), 0),
    ("late-duplicates", [1, 2, 2, 1, 3], [[1], [2], [], [], [3]], (0, 0, 0, 2, 0), 0),
    ("duplicate-while-held", [1, 3, 3, 2], [[1], [], [], [2, 3]], (1, 0, 0, 0, 1), 0),
    ("overflow-keeps-later-gaps", [3, 5, 7, 9], [[], [], [], [3]], (0, 1, 2, 0, 0), 3),
    ("missing-first-chunk", [2, 3, 4, 5], [[], [], [], [2, 3, 4, 5]], (0, 1, 1, 0, 0), 0),
    ("chunk-zero-is-before-the-first", [0, 1], [[], [1]], (0, 0, 0, 1, 0), 0),
]


@pytest.mark.parametrize(
    ("arrivals", "releases", "counts", "held"), [case[1:] for case in REORDER_CASES],
    ids=[case[0] for case in REORDER_CASES],
)
def test_reorder_window(arrivals: list[int], releases: list[list[int]], counts: tuple, held: int) -> None:
    assert REORDER_WINDOW_FRAMES == 3 and FIRST_CHUNK == 1  # the cases are written for these
    protocol = protocol_after(STARTED)
    assert push_chunks(protocol, arrivals) == releases
    stats = protocol.statistics()
    assert (stats.frames_reordered, stats.gaps_skipped, stats.frames_skipped, stats.late_dropped,
            stats.duplicates_dropped) == counts
    assert protocol.held_frames == held
    assert stats.frames_released == sum(len(release) for release in releases)
    assert stats.violations == 0


def test_stop_releases_held_frames_in_order_before_stopped() -> None:
    protocol = protocol_after(STARTED)
    assert push_chunks(protocol, [3, 5]) == [[], []]
    events = protocol.receive_text(dumps(stop_msg(seq="9")))
    assert [type(event) for event in events] == [CallerAudio, CallerAudio, StreamStopped]
    assert [event.timestamp_ms // 20 for event in events[:2]] == [3, 5]
    stats = protocol.statistics()
    assert (stats.gaps_skipped, stats.frames_skipped, stats.frames_released) == (2, 3, 2)
    assert protocol.held_frames == 0


def test_window_of_zero_releases_at_once_and_skips_every_gap() -> None:
    protocol = protocol_after(STARTED, reorder_window_frames=0)
    assert push_chunks(protocol, [1, 3, 2, 4]) == [[1], [3], [], [4]]
    stats = protocol.statistics()
    assert (stats.gaps_skipped, stats.frames_skipped, stats.late_dropped) == (1, 1, 1)


@pytest.mark.parametrize("frames", [-1, 1.5, "3", True])
def test_window_size_must_be_a_non_negative_int(frames: object) -> None:
    with pytest.raises(ValueError):
        TelnyxStreamProtocol(reorder_window_frames=frames)  # type: ignore[arg-type]


def test_released_audio_keeps_its_own_sequence_number_and_timestamp() -> None:
    protocol = protocol_after(STARTED)
    assert protocol.receive_text(dumps(media_msg(seq="7", chunk="2", timestamp="40"))) == []
    assert protocol.receive_text(dumps(media_msg(seq="6", chunk="1", timestamp="20"))) == [
        CallerAudio(6, 20, FRAME), CallerAudio(7, 40, FRAME)]


@st.composite
def windowed_permutations(draw) -> list[int]:
    """Chunks 1..n in blocks of at most WINDOW + 1, each block in any order: every frame arrives while
    at most WINDOW later ones are waiting, so none may be skipped."""
    blocks = draw(st.lists(st.integers(1, REORDER_WINDOW_FRAMES + 1), min_size=1, max_size=8))
    arrivals: list[int] = []
    for size in blocks:
        block = list(range(len(arrivals) + 1, len(arrivals) + 1 + size))
        arrivals.extend(draw(st.permutations(block)))
    return arrivals


@given(windowed_permutations())
def test_any_permutation_within_the_window_is_released_in_order(arrivals: list[int]) -> None:
    protocol = protocol_after(STARTED)
    released = [chunk for release in push_chunks(protocol, arrivals) for chunk in release]
    assert released == list(range(1, len(arrivals) + 1))
    stats = protocol.statistics()
    assert (stats.gaps_skipped, stats.frames_skipped, stats.late_dropped, stats.duplicates_dropped) == (0, 0, 0, 0)
    assert protocol.held_frames == 0


@given(arrivals=st.lists(st.integers(0, 25), max_size=40), window=st.integers(0, 4))
def test_any_arrival_order_releases_each_chunk_once_in_increasing_order(arrivals: list[int], window: int) -> None:
    protocol = protocol_after(STARTED, reorder_window_frames=window)
    released: list[int] = []
    for release in push_chunks(protocol, arrivals):
        released.extend(release)
        assert protocol.held_frames <= window
    released.extend(event.timestamp_ms // 20 for event in protocol.receive_text(dumps(stop_msg(seq="99")))[:-1])
    assert released == sorted(set(released))  # strictly increasing: in order, never twice
    assert set(released) <= set(arrivals)
    stats = protocol.statistics()
    assert stats.frames_released == len(released)
    assert len(arrivals) == stats.frames_released + stats.late_dropped + stats.duplicates_dropped
    # Every chunk from the first to the last released was either released or counted as skipped.
    if released:
        assert stats.frames_skipped == (released[-1] - FIRST_CHUNK + 1) - len(released)


# --- no input can make it raise ------------------------------------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_near_messages = st.fixed_dictionaries(
    {"event": st.sampled_from(["connected", "start", "media", "dtmf", "mark", "error", "stop", "other"])},
    optional={
        "sequence_number": st.sampled_from(["1", "2", "x", 2, -1]) | _json_values,
        "stream_id": st.sampled_from([STREAM_ID, OTHER_STREAM_ID]) | _json_values,
        "version": st.just("1.0.0") | _json_values,
        "media": st.fixed_dictionaries(
            {},
            optional={
                "track": st.sampled_from(["inbound", "outbound", "x"]),
                "chunk": st.sampled_from(["1", "2", 3]),
                "timestamp": st.just("1"),
                "payload": st.just(FRAME_B64) | st.text(max_size=8),
            },
        ),
        "start": _json_values,
        "stop": _json_values,
        "mark": _json_values,
        "dtmf": _json_values,
        "payload": _json_values,
        "error": _json_values,
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
        if protocol.state is State.CLOSED:
            assert protocol.statistics().violations == 1
        assert sum(isinstance(event, ProtocolViolation) for event in events) <= 1


# --- outbound ------------------------------------------------------------------------------------


def test_encoder_output_is_json_in_the_documented_shapes() -> None:
    encoder = TelnyxOutboundEncoder(STREAM_ID)
    media = encoder.media(FRAME)
    assert media == Outbound(data=media.data, binary=False)
    assert json.loads(media.data) == {"event": "media", "media": {"payload": FRAME_B64}}
    assert media.data == encoder.media_prefix + FRAME_B64.encode() + encoder.media_suffix
    assert (encoder.media_prefix, encoder.media_suffix) == (MEDIA_PREFIX, MEDIA_SUFFIX)
    assert json.loads(encoder.mark("7:5").data) == {"event": "mark", "mark": {"name": "7:5"}}
    assert encoder.clear() == Outbound(CLEAR_MESSAGE) and json.loads(encoder.clear().data) == {"event": "clear"}
    assert b"stream_id" not in media.data + encoder.mark("x").data + encoder.clear().data


def test_encoder_accepts_the_empty_stream_id_telnyx_starts_give() -> None:
    assert TelnyxOutboundEncoder("").media(FRAME) == TelnyxOutboundEncoder(STREAM_ID).media(FRAME)
    assert TelnyxOutboundEncoder().stream_id == ""
    with pytest.raises(ValueError):
        TelnyxOutboundEncoder(None)  # type: ignore[arg-type]


def test_encoder_mark_names_are_json_escaped() -> None:
    encoder = TelnyxOutboundEncoder()
    for name in ['quote " and \\ backslash', "naïve", "line\nbreak", "</script>"]:
        assert json.loads(encoder.mark(name).data)["mark"]["name"] == name
        assert encoder.mark(name).data.isascii()


@pytest.mark.parametrize("payload", [b"", bytes(159), bytes(240_001)], ids=["empty", "under-20ms", "over-30s"])
def test_encoder_refuses_media_telnyx_would_not_play(payload: bytes) -> None:
    with pytest.raises(ValueError):
        TelnyxOutboundEncoder().media(payload)


@pytest.mark.parametrize("name", ["", None, 5])
def test_encoder_refuses_unusable_mark_names(name: object) -> None:
    with pytest.raises(ValueError):
        TelnyxOutboundEncoder().mark(name)  # type: ignore[arg-type]


# --- the carrier's end, and round trips ------------------------------------------------------------


def carrier(**kwargs) -> TelnyxCarrierSide:
    defaults = dict(call_session_id="ff55a038-6f5d-11ef-9692-02420aeffb1f", client_state="c3RhdGU=",
                    from_number="+13122010094", to_number="+13122123456",
                    custom_parameters={"session_token": "tok-123"})
    return TelnyxCarrierSide(STREAM_ID, CALL_CONTROL_ID, USER_ID, **{**defaults, **kwargs})


def test_carrier_side_to_stream_protocol_round_trip() -> None:
    side = carrier(first_timestamp_ms=100)
    protocol = TelnyxStreamProtocol()
    frames = [bytes([n]) * FRAME_BYTES for n in range(1, 7)]
    assert protocol.receive_text(side.connected()) == [StreamConnected(fields=(("version", "1.0.0"),))]
    (started,) = protocol.receive_text(side.start())
    assert started == StreamStarted(1, CALL_CONTROL_ID, "", USER_ID, (("session_token", "tok-123"),), "pcmu", 8000, 1)
    assert protocol.client_state == "c3RhdGU="
    media = [side.media(frame) for frame in frames]
    # Telnyx does not guarantee order: deliver the frames swapped in pairs, the outbound echo between.
    released: list[CallerAudio] = []
    for index in (1, 0, 3, 2, 5, 4):
        released.extend(protocol.receive_text(media[index]))
    assert protocol.receive_text(side.media(bytes(FRAME_BYTES), track="outbound")) == []
    assert [audio.payload for audio in released] == frames
    assert [audio.timestamp_ms for audio in released] == [100 + 20 * n for n in range(6)]
    assert [audio.sequence_number for audio in released] == list(range(2, 8))
    assert protocol.receive_text(side.dtmf("#", occurred_at="2025-06-05T08:54:19.698408Z")) == [Dtmf(9, "#")]
    assert protocol.receive_text(side.mark_echo("m1")) == [MarkEcho(10, "m1")]
    assert protocol.receive_text(side.error(100004)) == []
    assert protocol.last_error == TelnyxError(100004, "invalid_media")
    assert protocol.receive_text(side.stop()) == [StreamStopped(11, "carrier stop")]
    assert protocol.statistics().frames_reordered == 3


def test_carrier_side_builds_pcma_and_unsupported_starts() -> None:
    (started,) = TelnyxStreamProtocol().receive_text(carrier(encoding="PCMA").start())
    assert isinstance(started, StreamStarted) and started.encoding == "pcma"
    (violation,) = TelnyxStreamProtocol().receive_text(carrier(encoding="L16", sample_rate_hz=16000).start())
    assert violation == ProtocolViolation(1007, "media format is not PCMU/PCMA 8000 Hz mono")


def test_encoder_to_carrier_side_round_trip() -> None:
    encoder = TelnyxOutboundEncoder("")
    side = carrier()
    assert side.receive_text(encoder.media(FRAME).data) == SentMedia(FRAME)
    assert side.receive_text(encoder.mark("m1").data) == SentMark("m1")
    assert side.receive_text(encoder.clear().data) == SentClear()
    assert side.receive_text(encoder.mark('odd "name"').data.decode()) == SentMark('odd "name"')


def mark_names(messages: list[str]) -> list[str]:
    return [json.loads(message)["mark"]["name"] for message in messages]


def test_carrier_side_plays_audio_and_echoes_marks_when_reached() -> None:
    encoder, side = TelnyxOutboundEncoder(), carrier()
    side.receive_text(encoder.mark("idle").data)
    assert mark_names(side.data_to_send()) == ["idle"]  # nothing queued: echoed at once
    for name in ("a", "b"):
        side.receive_text(encoder.media(bytes(FRAME_BYTES * 5)).data)  # 100 ms
        side.receive_text(encoder.mark(name).data)
    assert side.queued_ms == 200 and side.data_to_send() == []
    side.advance(99)
    assert side.data_to_send() == []
    side.advance(1)
    assert mark_names(side.data_to_send()) == ["a"]
    side.advance(500)
    assert mark_names(side.data_to_send()) == ["b"]
    assert (side.played_bytes, side.queued_ms) == (1600, 0)


def test_carrier_side_clear_drops_audio_and_echoes_queued_marks() -> None:
    encoder, side = TelnyxOutboundEncoder(), carrier()
    for name in ("a", "b"):
        side.receive_text(encoder.media(bytes(FRAME_BYTES * 5)).data)
        side.receive_text(encoder.mark(name).data)
    side.advance(30)
    assert side.receive_text(encoder.clear().data) == SentClear()
    assert mark_names(side.data_to_send()) == ["a", "b"]
    assert (side.played_bytes, side.cleared_bytes, side.queued_ms) == (240, 1360, 0)


def test_mark_echoes_from_the_carrier_side_parse_as_mark_echoes() -> None:
    encoder, side = TelnyxOutboundEncoder(), carrier()
    protocol = TelnyxStreamProtocol()
    protocol.receive_text(side.connected())
    protocol.receive_text(side.start())
    side.receive_text(encoder.media(FRAME).data)
    side.receive_text(encoder.mark("m").data)
    side.advance(20)
    (echo,) = side.data_to_send()
    assert protocol.receive_text(echo) == [MarkEcho(2, "m")]


# (id, what we send, the error Telnyx answers with)
REJECTED = [
    ("not-json", b"{", 100003),
    ("not-object", b"[]", 100003),
    ("unknown-event", b'{"event":"playAudio"}', 100003),
    ("media-no-body", b'{"event":"media"}', 100003),
    ("media-payload-int", b'{"event":"media","media":{"payload":1}}', 100003),
    ("media-not-base64", b'{"event":"media","media":{"payload":"!!"}}', 100004),
    ("media-too-short", json.dumps({"event": "media", "media": {"payload": FRAME_B64[:8]}}).encode(), 100004),
    ("mark-no-name", b'{"event":"mark","mark":{}}', 100003),
    ("mark-body-string", b'{"event":"mark","mark":"m"}', 100003),
]


@pytest.mark.parametrize(("data", "code"), [case[1:] for case in REJECTED], ids=[case[0] for case in REJECTED])
def test_carrier_side_rejects_with_an_error_frame(data: bytes, code: int) -> None:
    side = carrier()
    rejected = side.receive_text(data)
    assert isinstance(rejected, Rejected) and rejected.code == code
    (frame,) = side.data_to_send()
    assert json.loads(frame)["payload"]["code"] == code
    # The error frame is what the stream protocol reads as a carrier error.
    protocol = TelnyxStreamProtocol()
    protocol.receive_text(side.connected())
    protocol.receive_text(side.start())
    assert protocol.receive_text(frame) == []
    assert protocol.last_error is not None and protocol.last_error.code == code


def test_carrier_side_rejects_binary_frames() -> None:
    side = carrier()
    assert side.receive_binary(b"\x00") == Rejected(100003, "malformed_frame")
    assert len(side.data_to_send()) == 1


# --- TeXML ---------------------------------------------------------------------------------------


def parse_texml(document: str) -> ElementTree.Element:
    assert document.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ElementTree.fromstring(document.encode())


@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
def test_texml_connect_stream_shape(codec: str) -> None:
    root = parse_texml(texml_connect_stream("wss://gw.example.com/telnyx", {"session_token": "tok", "n": "1"}, codec))
    assert root.tag == "Response"
    (connect,) = list(root)
    assert connect.tag == "Connect"
    (stream,) = list(connect)
    assert stream.tag == "Stream"
    assert stream.attrib == {
        "url": "wss://gw.example.com/telnyx",
        "track": "inbound_track",
        "codec": codec,
        "bidirectionalMode": "rtp",
        "bidirectionalCodec": codec,
        "bidirectionalSamplingRate": "8000",
    }
    assert [(p.tag, p.get("name"), p.get("value")) for p in stream] == [
        ("Parameter", "session_token", "tok"), ("Parameter", "n", "1")]


HOSTILE = ['"/><Hangup/><Stream url="wss://evil', "a&b<c>d", "it's", "line\nbreak\ttab\rcr", "]]>", "naïve ☎"]


@pytest.mark.parametrize("value", HOSTILE)
def test_texml_escapes_hostile_values(value: str) -> None:
    document = texml_connect_stream("wss://gw.example.com/t?x=1&y=" + value.replace(" ", "")[:3] + "z",
                                    {value: value})
    root = parse_texml(document)
    assert [element.tag for element in root.iter()] == ["Response", "Connect", "Stream", "Parameter"]
    (parameter,) = root.iter("Parameter")
    assert (parameter.get("name"), parameter.get("value")) == (value, value)


def test_texml_query_string_survives() -> None:
    root = parse_texml(texml_connect_stream("wss://gw.example.com/t?a=1&b=2", {}))
    assert root.find("Connect/Stream").get("url") == "wss://gw.example.com/t?a=1&b=2"


@pytest.mark.parametrize(
    ("url", "parameters", "codec"),
    [
        ("https://gw.example.com/t", {}, "PCMU"),
        ("gw.example.com/t", {}, "PCMU"),
        ("wss://", {}, "PCMU"),
        ("wss://gw.example.com/t", {}, "G722"),
        ("wss://gw.example.com/t", {}, "pcmu"),
        ("wss://gw.example.com/t", {"a": "nul\x00"}, "PCMU"),
        ("wss://gw.example.com/t", {"bell\x07": "v"}, "PCMU"),
        ("wss://gw.example.com/t", {"": "v"}, "PCMU"),
        ("wss://gw.example.com/t", {"a": 1}, "PCMU"),
        ("wss://gw.example.com/\x01", {}, "PCMU"),
        (None, {}, "PCMU"),
    ],
    ids=["https", "no-scheme", "no-host", "g722", "lowercase-codec", "nul-value", "control-name", "empty-name",
         "int-value", "control-url", "none-url"],
)
def test_texml_refuses_what_it_cannot_write(url: object, parameters: dict, codec: str) -> None:
    with pytest.raises(ValueError):
        texml_connect_stream(url, parameters, codec)  # type: ignore[arg-type]


def test_texml_accepts_ws_for_the_local_simulator() -> None:
    assert parse_texml(texml_connect_stream("ws://127.0.0.1:9000/t", {})).find("Connect/Stream") is not None


# --- webhook signatures --------------------------------------------------------------------------

PRIVATE_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))  # fixed: tests are deterministic
PUBLIC_KEY_RAW = PRIVATE_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
PUBLIC_KEY_B64 = base64.b64encode(PUBLIC_KEY_RAW).decode()
PUBLIC_KEY_DER_B64 = base64.b64encode(
    PRIVATE_KEY.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)).decode()
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
BODY = b'{"data":{"event_type":"call.initiated","payload":{"call_control_id":"v3:abc"}}}'
NOW_S = 1_717_000_000
TIMESTAMP = str(NOW_S - 10)
SIGNATURE = sign_webhook(PRIVATE_KEY, TIMESTAMP, BODY)


def test_signature_is_ed25519_over_timestamp_pipe_body() -> None:
    # The documented construction, checked directly with the public key.
    PRIVATE_KEY.public_key().verify(base64.b64decode(SIGNATURE), TIMESTAMP.encode() + b"|" + BODY)
    assert sign_webhook(bytes(range(32)), int(TIMESTAMP), BODY) == SIGNATURE  # raw seed, int timestamp
    assert sign_webhook(PRIVATE_KEY, TIMESTAMP, BODY.decode()) == SIGNATURE  # str body: its UTF-8


@pytest.mark.parametrize("public_key", [PUBLIC_KEY_B64, PUBLIC_KEY_DER_B64], ids=["raw", "der"])
def test_verify_accepts_a_good_signature(public_key: str) -> None:
    assert verify_webhook(public_key, SIGNATURE, TIMESTAMP, BODY, now_s=NOW_S)
    assert verify_webhook(public_key, SIGNATURE, TIMESTAMP, BODY.decode(), now_s=NOW_S)


# (id, signature, timestamp, body, now_s)
TAMPERED = [
    ("body-changed", SIGNATURE, TIMESTAMP, BODY.replace(b"abc", b"abd"), NOW_S),
    ("body-whitespace", SIGNATURE, TIMESTAMP, BODY + b"\n", NOW_S),
    ("timestamp-changed", SIGNATURE, str(NOW_S - 11), BODY, NOW_S),
    ("timestamp-too-old", sign_webhook(PRIVATE_KEY, NOW_S - 301, BODY), str(NOW_S - 301), BODY, NOW_S),
    ("timestamp-too-far-ahead", sign_webhook(PRIVATE_KEY, NOW_S + 301, BODY), str(NOW_S + 301), BODY, NOW_S),
    ("timestamp-not-digits", sign_webhook(PRIVATE_KEY, "1e9", BODY), "1e9", BODY, NOW_S),
    ("timestamp-empty", sign_webhook(PRIVATE_KEY, "", BODY), "", BODY, NOW_S),
    ("timestamp-huge", SIGNATURE, "9" * 400, BODY, NOW_S),
    ("other-key", sign_webhook(OTHER_KEY, TIMESTAMP, BODY), TIMESTAMP, BODY, NOW_S),
    ("signature-not-base64", "!" + SIGNATURE[1:], TIMESTAMP, BODY, NOW_S),
    ("signature-truncated", SIGNATURE[:-4], TIMESTAMP, BODY, NOW_S),
    ("signature-empty", "", TIMESTAMP, BODY, NOW_S),
    ("signature-hex", base64.b64decode(SIGNATURE).hex(), TIMESTAMP, BODY, NOW_S),
]


@pytest.mark.parametrize(
    ("signature", "timestamp", "body", "now_s"), [case[1:] for case in TAMPERED], ids=[case[0] for case in TAMPERED]
)
def test_verify_rejects_tampered_or_stale_requests(signature: str, timestamp: str, body: bytes, now_s: int) -> None:
    assert not verify_webhook(PUBLIC_KEY_B64, signature, timestamp, body, now_s=now_s)


def test_verify_tolerance_edges() -> None:
    for skew in (-300, 300):
        stamp = str(NOW_S + skew)
        assert verify_webhook(PUBLIC_KEY_B64, sign_webhook(PRIVATE_KEY, stamp, BODY), stamp, BODY, now_s=NOW_S)
    stamp = str(NOW_S - 60)
    signature = sign_webhook(PRIVATE_KEY, stamp, BODY)
    assert not verify_webhook(PUBLIC_KEY_B64, signature, stamp, BODY, now_s=NOW_S, tolerance_s=59)


@pytest.mark.parametrize("public_key", ["", "not base64!", base64.b64encode(b"short").decode(),
                                        base64.b64encode(bytes(33)).decode()],
                         ids=["empty", "not-base64", "short", "33-bytes"])
def test_an_unusable_public_key_is_our_misconfiguration(public_key: str) -> None:
    with pytest.raises(ValueError):
        verify_webhook(public_key, SIGNATURE, TIMESTAMP, BODY, now_s=NOW_S)


def test_a_public_key_of_another_algorithm_is_our_misconfiguration() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    ec_key = ec.derive_private_key(1, ec.SECP256R1()).public_key()
    der = base64.b64encode(ec_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)).decode()
    with pytest.raises(ValueError):
        verify_webhook(der, SIGNATURE, TIMESTAMP, BODY, now_s=NOW_S)


@pytest.mark.parametrize("signature", [None, b"bytes", 64])
def test_verify_rejects_a_signature_that_is_not_text(signature: object) -> None:
    assert not verify_webhook(PUBLIC_KEY_B64, signature, TIMESTAMP, BODY, now_s=NOW_S)  # type: ignore[arg-type]


# --- the pacer's wire templates (voicecore/carriers/wire.py) --------------------------------------------


def test_wire_templates_are_the_encoders_bytes_and_pcma_is_raw() -> None:
    encoder = TelnyxOutboundEncoder(STREAM_ID)
    templates = wire_templates()
    assert not templates.raw and not templates.binary
    assert templates.media_prefix + FRAME_B64.encode() + templates.media_suffix == encoder.media(FRAME).data
    assert templates.mark_prefix + b"12:345:end" + templates.mark_suffix == encoder.mark("12:345:end").data
    assert templates.clear == encoder.clear().data
    assert wire_templates(ENCODING_PCMA) == RAW  # the pacer's frames are mu-law: the carrier edge transcodes


def test_what_the_pacer_writes_from_the_templates_is_read_by_telnyx(tmp_path) -> None:
    from test_pacer_core import PACER_ENTRIES_FRAMES, PACER_ENTRIES_MARKS, frame_payload, pacer_wire_entries

    side = TelnyxCarrierSide(STREAM_ID, CALL_CONTROL_ID, USER_ID)
    read = [side.receive_text(entry) for entry in pacer_wire_entries(tmp_path, "telnyx-stream", wire_templates())]
    assert [r.payload for r in read if isinstance(r, SentMedia)] == [frame_payload(*f) for f in PACER_ENTRIES_FRAMES]
    assert [r.name for r in read if isinstance(r, SentMark)] == PACER_ENTRIES_MARKS
    assert isinstance(read[-1], SentClear) and not [r for r in read if isinstance(r, Rejected)]
