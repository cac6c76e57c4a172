"""Plivo audio streams (voicecore/carriers/plivo/protocol.py): every inbound event, every bad-input class and its
close code, garbage after and truncation of each valid message, a whole call message by message, the
encoder's bytes, both directions through the carrier's end, the checkpoint-bounded lead, the answer XML and
the V3 request signature.

Message shapes follow Plivo's audio-streaming reference and its official streaming SDK (plivo-stream-sdk
0.1.1 types: number counters, string ``media.timestamp``, number ``media.chunk``), with the variants other
Plivo sources show (string counters, ``playedStream`` without ``streamId``). Signature vectors were computed
with plivo 4.63.0's own ``plivo.utils.signature_v3`` (construct_get_url / construct_post_url /
get_signature_v3), not with the code under test.
"""

from __future__ import annotations

import base64
import json
import math
import xml.etree.ElementTree as ElementTree
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.carriers.events import (
    CallerAudio,
    Cleared,
    Dtmf,
    MarkEcho,
    Outbound,
    ProtocolViolation,
    StreamStarted,
    StreamStopped,
)
from voicecore.carriers.plivo.protocol import (
    CHECKPOINT_HEAD,
    CLEAR_AUDIO_HEAD,
    PLAY_AUDIO_HEAD,
    STREAM_CONTENT_TYPES,
    CheckpointLead,
    Checkpoint,
    ClearAudio,
    CloseCode,
    PlayAudio,
    PlivoCarrierSide,
    PlivoOutboundEncoder,
    PlivoStreamProtocol,
    Rejected,
    State,
    compute_signature_v3,
    stream_xml,
    sign_upgrade,
    upgrade_signature_url,
    validate_upgrade_signature,
    validate_signature_v3,
    wire_templates,
)
from voicecore.carriers.wire import RAW
from voicecore.timing import MAX_MESSAGE_BYTES

STREAM_ID = "87654321-4321-4321-4321-cba987654321"
OTHER_STREAM_ID = "00000000-0000-0000-0000-000000000000"
CALL_ID = "12345678-1234-1234-1234-123456789abc"
ACCOUNT_ID = "MA0123456789ABCDEF01"
FRAME = bytes(range(160))  # 20 ms of mu-law at 8 kHz
FRAME_B64 = base64.b64encode(FRAME).decode("ascii")
L16_FRAME = bytes(range(256)) + bytes(64)  # 20 ms of L16 at 8 kHz: 160 samples, 320 bytes


# --- message builders (dicts, so a test can bend one field) ----------------------------------------


def start_msg(seq: object = 1, encoding: str = "audio/x-mulaw", rate: object = 8000,
              extra: object = "session_token=tok-123;tenant=acme") -> dict:
    return {
        "event": "start",
        "sequenceNumber": seq,
        "start": {
            "callId": CALL_ID,
            "streamId": STREAM_ID,
            "accountId": ACCOUNT_ID,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": encoding, "sampleRate": rate},
        },
        "extra_headers": extra,
    }


def media_msg(seq: object = 2, chunk: object = 1, timestamp: object = "0", payload: str = FRAME_B64) -> dict:
    return {
        "event": "media",
        "sequenceNumber": seq,
        "streamId": STREAM_ID,
        "media": {"track": "inbound", "timestamp": timestamp, "chunk": chunk, "payload": payload},
    }


def dtmf_msg(seq: object = 3, digit: str = "5") -> dict:
    return {"event": "dtmf", "sequenceNumber": seq, "streamId": STREAM_ID,
            "dtmf": {"track": "inbound", "digit": digit, "timestamp": "40"}}


def played_msg(seq: object = 4, name: str = "3:5") -> dict:
    return {"event": "playedStream", "sequenceNumber": seq, "streamId": STREAM_ID, "name": name}


def cleared_msg(seq: object = 5) -> dict:
    return {"event": "clearedAudio", "sequenceNumber": seq, "streamId": STREAM_ID}


def stop_msg(seq: object = 6) -> dict:
    return {"event": "stop", "sequenceNumber": seq, "streamId": STREAM_ID}


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


FRESH, STARTED, STOPPED = "fresh", "started", "stopped"
PRELUDES = {FRESH: [], STARTED: [start_msg()], STOPPED: [start_msg(), stop_msg(seq=2)]}


def protocol_after(prelude: str, start: dict | None = None) -> PlivoStreamProtocol:
    protocol = PlivoStreamProtocol()
    messages = PRELUDES[prelude] if start is None else [start]
    for message in messages:
        events = protocol.receive_text(dumps(message))
        assert not any(isinstance(event, ProtocolViolation) for event in events), events
    return protocol


def feed(protocol: PlivoStreamProtocol, message: object) -> list:
    if isinstance(message, tuple) and message[0] == "binary":
        return protocol.receive_binary(message[1])
    if isinstance(message, dict):
        return protocol.receive_text(dumps(message))
    return protocol.receive_text(message)  # type: ignore[arg-type]


# --- valid input -------------------------------------------------------------------------------------

EXPECTED_START = StreamStarted(
    sequence_number=1,
    call_id=CALL_ID,
    stream_id=STREAM_ID,
    account_id=ACCOUNT_ID,
    custom_parameters=(("session_token", "tok-123"), ("tenant", "acme")),
    encoding="pcmu",
    sample_rate_hz=8000,
    channels=1,
)

HAPPY_CALL: list[tuple[dict, object, State]] = [
    (start_msg(), EXPECTED_START, State.STREAMING),
    (media_msg(), CallerAudio(sequence_number=2, timestamp_ms=0, payload=FRAME), State.STREAMING),
    (dtmf_msg(), Dtmf(sequence_number=3, digit="5"), State.STREAMING),
    (played_msg(), MarkEcho(sequence_number=4, name="3:5"), State.STREAMING),
    (cleared_msg(), Cleared(sequence_number=5), State.STREAMING),
    (stop_msg(seq=7), StreamStopped(sequence_number=7, reason="stop"), State.STOPPED),
]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "utf8-bytes"])
def test_happy_call_parses_every_event(as_bytes: bool) -> None:
    protocol = PlivoStreamProtocol()
    assert protocol.state is State.AWAITING_START
    for message, expected, state in HAPPY_CALL:
        text = dumps(message)
        assert protocol.receive_text(text.encode() if as_bytes else text) == [expected]
        assert protocol.state is state
    assert (protocol.stream_id, protocol.call_id, protocol.account_id) == (STREAM_ID, CALL_ID, ACCOUNT_ID)
    assert (protocol.content_type, protocol.encoding, protocol.sample_rate_hz) == ("audio/x-mulaw", "pcmu", 8000)
    assert protocol.last_sequence_number == 7
    assert protocol.violation is None
    stats = protocol.statistics()
    assert (stats.messages_received, stats.media_frames, stats.media_payload_bytes) == (6, 1, 160)
    assert (stats.checkpoints_echoed, stats.clears_confirmed, stats.dtmf_received) == (1, 1, 1)
    assert (stats.sequence_gaps, stats.sequence_reordered, stats.violations) == (1, 0, 0)  # 6 never came


def test_start_event_is_hashable_and_looks_up_parameters() -> None:
    assert hash(EXPECTED_START) == hash(EXPECTED_START)
    assert EXPECTED_START.custom_parameter("session_token") == "tok-123"
    assert EXPECTED_START.custom_parameter("missing", "x") == "x"


# Plivo's default is L16; we ask for mu-law but must take what start announces.
@pytest.mark.parametrize(("encoding", "rate", "expected_encoding", "expected_rate", "payload"), [
    ("audio/x-mulaw", 8000, "pcmu", 8000, FRAME),
    ("audio/x-l16", 8000, "l16", 8000, L16_FRAME),
    ("audio/x-l16", 16000, "l16", 16000, L16_FRAME * 2),
    ("audio/x-mulaw", "8000", "pcmu", 8000, FRAME),  # a [ref] example quotes sampleRate
    ("audio/x-l16", "16000", "l16", 16000, b"\x01\x00"),  # any whole number of samples
])
def test_media_formats(encoding: str, rate: object, expected_encoding: str, expected_rate: int, payload: bytes) -> None:
    protocol = PlivoStreamProtocol()
    (started,) = protocol.receive_text(dumps(start_msg(encoding=encoding, rate=rate)))
    assert isinstance(started, StreamStarted)
    assert (started.encoding, started.sample_rate_hz, started.channels) == (expected_encoding, expected_rate, 1)
    encoded = base64.b64encode(payload).decode()
    assert protocol.receive_text(dumps(media_msg(payload=encoded))) == [CallerAudio(2, 0, payload)]


@pytest.mark.parametrize(("extra", "expected"), [
    ("session_token=tok;tenant=acme", (("session_token", "tok"), ("tenant", "acme"))),  # [ref] example
    ("session_token=tok,tenant=acme", (("session_token", "tok"), ("tenant", "acme"))),  # the XML's form
    ('{"session_token": "tok", "tenant": "acme"}', (("session_token", "tok"), ("tenant", "acme"))),  # [sdk]
    ("{}", ()),  # a Plivo-compatible carrier
    ("", ()),
    (None, ()),
    (DELETE, ()),
    ({"session_token": "tok"}, (("session_token", "tok"),)),
    (" a = 1 ; ;b=2=3, junk ,=x, c= ", (("a", "1"), ("b", "2=3"), ("c", ""))),
])
def test_extra_headers_become_custom_parameters(extra: object, expected: tuple) -> None:
    message = bend(start_msg(), "extra_headers", extra)
    (started,) = PlivoStreamProtocol().receive_text(dumps(message))
    assert isinstance(started, StreamStarted) and started.custom_parameters == expected


OPTIONAL_FIELDS = [
    # (id, message, expected event): fields one Plivo source shows and another leaves out
    ("played-no-streamId-no-seq", {"event": "playedStream", "name": "a"}, MarkEcho(0, "a")),
    ("cleared-no-streamId-no-seq", {"event": "clearedAudio"}, Cleared(0)),
    ("cleared-seq-0", {"event": "clearedAudio", "sequenceNumber": 0, "streamId": STREAM_ID}, Cleared(0)),
    ("dtmf-bare", {"event": "dtmf", "dtmf": {"digit": "#"}}, Dtmf(0, "#")),
    ("stop-bare", {"event": "stop"}, StreamStopped(0, "stop")),
    ("media-no-track-no-chunk", bend(bend(media_msg(), "media.track", DELETE), "media.chunk", DELETE),
     CallerAudio(2, 0, FRAME)),
    ("media-string-counters", media_msg(seq="2", chunk="1", timestamp="20"), CallerAudio(2, 20, FRAME)),
    ("media-number-timestamp", media_msg(timestamp=40), CallerAudio(2, 40, FRAME)),
    ("played-string-seq", played_msg(seq="2"), MarkEcho(2, "3:5")),
    ("played-odd-name", played_msg(seq=2, name=""), MarkEcho(2, "")),
]


@pytest.mark.parametrize(("message", "expected"), [case[1:] for case in OPTIONAL_FIELDS],
                         ids=[case[0] for case in OPTIONAL_FIELDS])
def test_optional_fields(message: dict, expected: object) -> None:
    assert protocol_after(STARTED).receive_text(dumps(message)) == [expected]


@pytest.mark.parametrize(("path", "value"), [
    ("start.tracks", DELETE), ("start.accountId", DELETE), ("sequenceNumber", "1"), ("extra_headers", DELETE),
])
def test_start_tolerates_what_a_source_leaves_out(path: str, value: object) -> None:
    (started,) = PlivoStreamProtocol().receive_text(dumps(bend(start_msg(), path, value)))
    assert isinstance(started, StreamStarted) and started.stream_id == STREAM_ID
    if path == "start.accountId":
        assert started.account_id == ""


def test_unknown_keys_are_ignored() -> None:
    protocol = PlivoStreamProtocol()
    start = bend(start_msg(), "start.extra", {"x": [1]})
    start["mediaServer"] = "ms-1"
    assert protocol.receive_text(dumps(start)) == [EXPECTED_START]
    media = bend(media_msg(), "media.extra", {"x": 1})
    media["extra_headers"] = "{}"
    assert protocol.receive_text(dumps(media)) == [CallerAudio(2, 0, FRAME)]


@pytest.mark.parametrize("digit", list("0123456789*#ABCD"))
def test_every_dtmf_key(digit: str) -> None:
    assert protocol_after(STARTED).receive_text(dumps(dtmf_msg(digit=digit))) == [Dtmf(3, digit)]


@pytest.mark.parametrize("event", ["playFailed", "error"])
def test_tolerated_advisory_events_are_counted_not_fatal(event: str) -> None:
    protocol = protocol_after(STARTED)
    message = {"event": event, "sequenceNumber": 2, "streamId": STREAM_ID, "reason": "secret 4242"}
    assert protocol.receive_text(dumps(message)) == []
    assert protocol.receive_text(dumps({"event": event})) == []
    stats = protocol.statistics()
    assert (stats.play_failures, stats.carrier_errors) == ((2, 0) if event == "playFailed" else (0, 2))
    assert protocol.state is State.STREAMING and stats.violations == 0
    (violation,) = protocol.receive_text(dumps({"event": event, "streamId": OTHER_STREAM_ID}))
    assert violation == ProtocolViolation(1008, "wrong streamId")


def test_message_of_exactly_max_bytes_is_accepted() -> None:
    text = dumps(media_msg())
    padded = text + " " * (MAX_MESSAGE_BYTES - len(text))  # JSON allows trailing whitespace
    assert len(padded.encode()) == MAX_MESSAGE_BYTES
    assert protocol_after(STARTED).receive_text(padded) == [CallerAudio(2, 0, FRAME)]
    assert protocol_after(STARTED).receive_text(padded.encode()) == [CallerAudio(2, 0, FRAME)]


def test_sequence_gaps_and_reordering_are_counted_not_violations() -> None:
    protocol = protocol_after(STARTED)  # start was 1
    for seq in [2, 3, 5, 4, 6, 9, 7, 8, 10]:
        (event,) = protocol.receive_text(dumps(media_msg(seq=seq)))
        assert isinstance(event, CallerAudio) and event.sequence_number == seq
    stats = protocol.statistics()
    assert (stats.sequence_gaps, stats.sequence_reordered, stats.violations) == (2, 3, 0)
    assert protocol.last_sequence_number == 10


# --- bad input: one table, one close code each -------------------------------------------------------

BIG = MAX_MESSAGE_BYTES + 1
M = media_msg()

# (id, prelude, message: dict | str | bytes | ("binary", bytes), expected close code)
BAD_INPUT: list[tuple[str, str, object, int]] = [
    # 1003: binary frames
    ("binary-before-start", FRESH, ("binary", b"\x00\x01"), 1003),
    ("binary-while-streaming", STARTED, ("binary", dumps(M).encode()), 1003),
    # 1009: too big, measured in UTF-8 bytes
    ("too-big-str", STARTED, " " * BIG, 1009),
    ("too-big-bytes", STARTED, b" " * BIG, 1009),
    ("too-big-multibyte", STARTED, '"' + "é" * (MAX_MESSAGE_BYTES // 2) + '"', 1009),
    # 1007: not JSON / not an object / no event
    ("empty", STARTED, "", 1007),
    ("truncated", STARTED, '{"event":"media"', 1007),
    ("not-utf8", STARTED, b'{"event":"\xff"}', 1007),
    ("nan", STARTED, '{"event":"media","sequenceNumber":NaN}', 1007),
    ("deep-nesting", STARTED, "[" * 30_000 + "]" * 30_000, 1007),
    ("array", STARTED, "[]", 1007),
    ("null", STARTED, "null", 1007),
    ("no-event", STARTED, "{}", 1007),
    ("event-int", FRESH, '{"event":1}', 1007),
    # 1008: unknown events (strict), including other carriers' names and our own outbound ones
    ("unknown-event-fresh", FRESH, {"event": "hello"}, 1008),
    ("twilio-connected", FRESH, {"event": "connected", "protocol": "Call", "version": "1.0.0"}, 1008),
    ("twilio-mark", STARTED, {"event": "mark", "mark": {"name": "a"}}, 1008),
    ("our-playAudio", STARTED, {"event": "playAudio", "media": {}}, 1008),
    ("our-checkpoint", STARTED, {"event": "checkpoint", "streamId": STREAM_ID, "name": "a"}, 1008),
    ("case-differs", STARTED, {"event": "Media"}, 1008),
    # 1008: order
    ("media-before-start", FRESH, M, 1008),
    ("dtmf-before-start", FRESH, dtmf_msg(), 1008),
    ("played-before-start", FRESH, played_msg(), 1008),
    ("cleared-before-start", FRESH, cleared_msg(), 1008),
    ("stop-before-start", FRESH, stop_msg(), 1008),
    ("playFailed-before-start", FRESH, {"event": "playFailed"}, 1008),
    ("second-start", STARTED, start_msg(seq=2), 1008),
    ("media-after-stop", STOPPED, media_msg(seq=3), 1008),
    ("played-after-stop", STOPPED, played_msg(seq=3), 1008),
    ("stop-after-stop", STOPPED, stop_msg(seq=3), 1008),
    ("start-after-stop", STOPPED, start_msg(seq=3), 1008),
    ("garbage-after-stop-is-still-malformed", STOPPED, "nope", 1007),
    # 1008: another stream's id
    ("media-wrong-stream", STARTED, bend(M, "streamId", OTHER_STREAM_ID), 1008),
    ("dtmf-wrong-stream", STARTED, bend(dtmf_msg(), "streamId", OTHER_STREAM_ID), 1008),
    ("played-wrong-stream", STARTED, bend(played_msg(), "streamId", OTHER_STREAM_ID), 1008),
    ("cleared-wrong-stream", STARTED, bend(cleared_msg(), "streamId", OTHER_STREAM_ID), 1008),
    ("stop-wrong-stream", STARTED, bend(stop_msg(), "streamId", OTHER_STREAM_ID), 1008),
    ("media-stream-case", STARTED, bend(M, "streamId", STREAM_ID.upper()), 1008),
    # 1007: start
    ("start-seq-missing", FRESH, bend(start_msg(), "sequenceNumber", DELETE), 1007),
    ("start-seq-negative", FRESH, bend(start_msg(), "sequenceNumber", -1), 1007),
    ("start-seq-float", FRESH, bend(start_msg(), "sequenceNumber", 1.0), 1007),
    ("start-seq-bool", FRESH, bend(start_msg(), "sequenceNumber", True), 1007),
    ("start-seq-huge", FRESH, bend(start_msg(), "sequenceNumber", 10**19), 1007),
    ("start-seq-string-sign", FRESH, bend(start_msg(), "sequenceNumber", "+1"), 1007),
    ("start-seq-arabic-digit", FRESH, bend(start_msg(), "sequenceNumber", "\u0661"), 1007),
    ("start-seq-too-long", FRESH, bend(start_msg(), "sequenceNumber", "9" * 5000), 1007),
    ("start-body-missing", FRESH, bend(start_msg(), "start", DELETE), 1007),
    ("start-body-list", FRESH, bend(start_msg(), "start", []), 1007),
    ("start-streamId-missing", FRESH, bend(start_msg(), "start.streamId", DELETE), 1007),
    ("start-streamId-quote", FRESH, bend(start_msg(), "start.streamId", 'ab"cd'), 1007),
    ("start-streamId-backslash", FRESH, bend(start_msg(), "start.streamId", "ab\\cd"), 1007),
    ("start-streamId-space", FRESH, bend(start_msg(), "start.streamId", "ab cd"), 1007),
    ("start-streamId-empty", FRESH, bend(start_msg(), "start.streamId", ""), 1007),
    ("start-streamId-long", FRESH, bend(start_msg(), "start.streamId", "a" * 129), 1007),
    ("start-streamId-int", FRESH, bend(start_msg(), "start.streamId", 5), 1007),
    ("start-callId-missing", FRESH, bend(start_msg(), "start.callId", DELETE), 1007),
    ("start-callId-empty", FRESH, bend(start_msg(), "start.callId", ""), 1007),
    ("start-callId-long", FRESH, bend(start_msg(), "start.callId", "c" * 129), 1007),
    ("start-accountId-int", FRESH, bend(start_msg(), "start.accountId", 1), 1007),
    ("start-tracks-both", FRESH, bend(start_msg(), "start.tracks", ["inbound", "outbound"]), 1007),
    ("start-tracks-outbound", FRESH, bend(start_msg(), "start.tracks", ["outbound"]), 1007),
    ("start-tracks-empty", FRESH, bend(start_msg(), "start.tracks", []), 1007),
    ("start-tracks-string", FRESH, bend(start_msg(), "start.tracks", "inbound"), 1007),
    ("start-format-missing", FRESH, bend(start_msg(), "start.mediaFormat", DELETE), 1007),
    ("start-format-encoding-missing", FRESH, bend(start_msg(), "start.mediaFormat.encoding", DELETE), 1007),
    ("start-format-mulaw-16k", FRESH, start_msg(rate=16000), 1007),
    ("start-format-l16-24k", FRESH, start_msg(encoding="audio/x-l16", rate=24000), 1007),
    ("start-format-with-rate-param", FRESH, start_msg(encoding="audio/x-mulaw;rate=8000"), 1007),
    ("start-format-case", FRESH, start_msg(encoding="audio/X-MULAW"), 1007),
    ("start-format-pcma", FRESH, start_msg(encoding="audio/x-alaw"), 1007),
    ("start-format-rate-float", FRESH, start_msg(rate=8000.0), 1007),
    ("start-format-rate-missing", FRESH, bend(start_msg(), "start.mediaFormat.sampleRate", DELETE), 1007),
    ("start-extra-headers-int", FRESH, start_msg(extra=5), 1007),
    ("start-extra-headers-list", FRESH, start_msg(extra=["a=b"]), 1007),
    ("start-extra-headers-bad-json", FRESH, start_msg(extra="{not json"), 1007),
    ("start-extra-headers-json-list", FRESH, start_msg(extra="{}[]"), 1007),
    ("start-extra-headers-json-int-value", FRESH, start_msg(extra='{"a": 1}'), 1007),
    ("start-extra-headers-dict-null-value", FRESH, start_msg(extra={"a": None}), 1007),
    # 1007: media
    ("media-seq-missing", STARTED, bend(M, "sequenceNumber", DELETE), 1007),
    ("media-seq-null", STARTED, bend(M, "sequenceNumber", None), 1007),
    ("media-no-streamId", STARTED, bend(M, "streamId", DELETE), 1007),
    ("media-streamId-null", STARTED, bend(M, "streamId", None), 1007),
    ("media-body-missing", STARTED, bend(M, "media", DELETE), 1007),
    ("media-body-string", STARTED, bend(M, "media", FRAME_B64), 1007),
    ("media-track-outbound", STARTED, bend(M, "media.track", "outbound"), 1007),
    ("media-track-null", STARTED, bend(M, "media.track", None), 1007),
    ("media-chunk-negative", STARTED, bend(M, "media.chunk", -1), 1007),
    ("media-chunk-hex", STARTED, bend(M, "media.chunk", "0x1"), 1007),
    ("media-timestamp-missing", STARTED, bend(M, "media.timestamp", DELETE), 1007),
    ("media-timestamp-float", STARTED, bend(M, "media.timestamp", "155.5"), 1007),
    ("media-payload-missing", STARTED, bend(M, "media.payload", DELETE), 1007),
    ("media-payload-bad-char", STARTED, bend(M, "media.payload", "!" + FRAME_B64[1:]), 1007),
    ("media-payload-urlsafe", STARTED, bend(M, "media.payload", base64.urlsafe_b64encode(FRAME).decode()), 1007),
    ("media-payload-newline", STARTED, bend(M, "media.payload", FRAME_B64 + "\n"), 1007),
    ("media-payload-bad-padding", STARTED, bend(M, "media.payload", FRAME_B64.rstrip("=") + "="), 1007),
    ("media-payload-non-ascii", STARTED, bend(M, "media.payload", "é" + FRAME_B64[1:]), 1007),
    ("media-payload-empty", STARTED, bend(M, "media.payload", ""), 1007),
    # 1007: dtmf, playedStream, clearedAudio, stop
    ("dtmf-body-missing", STARTED, bend(dtmf_msg(), "dtmf", DELETE), 1007),
    ("dtmf-two-digits", STARTED, bend(dtmf_msg(), "dtmf.digit", "12"), 1007),
    ("dtmf-empty-digit", STARTED, bend(dtmf_msg(), "dtmf.digit", ""), 1007),
    ("dtmf-letter", STARTED, bend(dtmf_msg(), "dtmf.digit", "x"), 1007),
    ("dtmf-digit-int", STARTED, bend(dtmf_msg(), "dtmf.digit", 5), 1007),
    ("dtmf-seq-bad", STARTED, bend(dtmf_msg(), "sequenceNumber", "three"), 1007),
    ("dtmf-streamId-int", STARTED, bend(dtmf_msg(), "streamId", 7), 1007),
    ("played-name-missing", STARTED, bend(played_msg(), "name", DELETE), 1007),
    ("played-name-int", STARTED, bend(played_msg(), "name", 3), 1007),
    ("played-seq-null", STARTED, bend(played_msg(), "sequenceNumber", None), 1007),
    ("cleared-seq-float", STARTED, bend(cleared_msg(), "sequenceNumber", 5.5), 1007),
    ("stop-seq-negative", STARTED, bend(stop_msg(), "sequenceNumber", -6), 1007),
    ("stop-streamId-null", STARTED, bend(stop_msg(), "streamId", None), 1007),
]


def assert_closed_for_good(protocol: PlivoStreamProtocol, close_code: int) -> None:
    assert protocol.state is State.CLOSED
    assert protocol.violation is not None and protocol.violation.close_code == close_code
    before = protocol.statistics()
    assert before.violations == 1
    # Everything after a violation is ignored, valid or not, text or binary.
    for message in [start_msg(), media_msg(seq=9), stop_msg(seq=10), "garbage", ("binary", b"x")]:
        assert feed(protocol, message) == []
    assert protocol.state is State.CLOSED
    assert protocol.statistics() == before


@pytest.mark.parametrize(("prelude", "message", "close_code"), [case[1:] for case in BAD_INPUT],
                         ids=[case[0] for case in BAD_INPUT])
def test_bad_input_gives_close_code_then_ignores_input(prelude: str, message: object, close_code: int) -> None:
    protocol = protocol_after(prelude)
    stats_before = protocol.statistics()
    events = feed(protocol, message)
    assert len(events) == 1
    (violation,) = events
    assert isinstance(violation, ProtocolViolation)
    assert violation.close_code == close_code and type(violation.close_code) is int
    assert violation.reason and len(violation.reason.encode()) <= 123  # fits a WebSocket close frame
    # A rejected message changes no counter but the message count and the violation count.
    stats_after = protocol.statistics()
    assert stats_after.media_frames == stats_before.media_frames
    assert stats_after.messages_received == stats_before.messages_received + 1
    assert_closed_for_good(protocol, close_code)


def test_l16_payload_must_be_whole_samples() -> None:
    protocol = protocol_after(STARTED, start=start_msg(encoding="audio/x-l16", rate=8000))
    (violation,) = protocol.receive_text(dumps(media_msg(payload=base64.b64encode(b"\x00" * 319).decode())))
    assert violation == ProtocolViolation(1007, "payload is empty or not whole samples")


def test_close_code_table_is_the_documented_one() -> None:
    assert {code.name: int(code) for code in CloseCode} == {
        "UNSUPPORTED_DATA": 1003, "INVALID_PAYLOAD": 1007, "POLICY_VIOLATION": 1008, "MESSAGE_TOO_BIG": 1009,
    }
    # Every code of the table is exercised by the bad-input table.
    assert {case[3] for case in BAD_INPUT} == {int(code) for code in CloseCode}


def test_reasons_never_echo_peer_data() -> None:
    # Logs must not hold digits, tokens or payloads: the reason is fixed text.
    for message in [bend(dtmf_msg(), "dtmf.digit", "secret-4242"), {"event": "secret-4242"},
                    start_msg(encoding="secret-4242")]:
        protocol = protocol_after(STARTED if message.get("event") == "dtmf" else FRESH)
        (violation,) = protocol.receive_text(dumps(message))
        assert "4242" not in violation.reason and "secret" not in violation.reason


# --- garbage after, and truncation of, every valid message ------------------------------------------

VALID_IN_CONTEXT = [
    ("start", FRESH, start_msg()),
    ("media", STARTED, media_msg()),
    ("dtmf", STARTED, dtmf_msg()),
    ("playedStream", STARTED, played_msg()),
    ("clearedAudio", STARTED, cleared_msg()),
    ("playFailed", STARTED, {"event": "playFailed", "reason": "x"}),
    ("stop", STARTED, stop_msg()),
]
VALID_CASES = [case[1:] for case in VALID_IN_CONTEXT]
VALID_IDS = [case[0] for case in VALID_IN_CONTEXT]
GARBAGE = ["x", "}", "]", "{}", "[]", "\n{}", ",", "0", '"', "null", "\x00", "é", dumps(cleared_msg())]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize(("prelude", "message"), VALID_CASES, ids=VALID_IDS)
def test_valid_message_with_garbage_after_is_1007(prelude: str, message: dict, garbage: str, as_bytes: bool) -> None:
    events = protocol_after(prelude).receive_text(dumps(message))
    assert not any(isinstance(event, ProtocolViolation) for event in events)  # valid alone
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
        (violation,) = protocol_after(prelude).receive_text(whole[:cut])
        assert isinstance(violation, ProtocolViolation) and violation.close_code == 1007, cut


# --- a whole call, message by message, from the carrier's end ----------------------------------------


@pytest.mark.parametrize(("content_type", "rate", "frame"), [
    ("audio/x-mulaw", 8000, FRAME), ("audio/x-l16", 8000, L16_FRAME), ("audio/x-l16", 16000, L16_FRAME * 2),
])
def test_a_whole_call_message_by_message(content_type: str, rate: int, frame: bytes) -> None:
    carrier = PlivoCarrierSide(STREAM_ID, CALL_ID, content_type=content_type, sample_rate_hz=rate,
                               extra_headers='{"session_token": "tok"}')
    protocol = PlivoStreamProtocol()
    (started,) = protocol.receive_text(carrier.start())
    assert started == StreamStarted(1, CALL_ID, STREAM_ID, ACCOUNT_ID, (("session_token", "tok"),),
                                    "pcmu" if content_type == "audio/x-mulaw" else "l16", rate, 1)
    expected_timestamp_ms = 0
    for index in range(150):  # 3 s of audio, a key press, an echo and a clear along the way
        expected_sequence_number = index + 2 + (3 if index > 50 else 0)  # one counter across all messages
        (audio,) = protocol.receive_text(carrier.media(frame))
        assert audio == CallerAudio(expected_sequence_number, expected_timestamp_ms, frame)
        expected_timestamp_ms += 20
        if index == 50:
            assert protocol.receive_text(carrier.dtmf("9")) == [Dtmf(53, "9")]
            assert protocol.receive_text(carrier.played_stream("1:5:end")) == [MarkEcho(54, "1:5:end")]
            assert protocol.receive_text(carrier.cleared_audio()) == [Cleared(55)]
    assert protocol.receive_text(carrier.stop()) == [StreamStopped(155, "stop")]
    stats = protocol.statistics()
    assert (stats.media_frames, stats.media_payload_bytes) == (150, 150 * len(frame))
    assert (stats.sequence_gaps, stats.sequence_reordered, stats.violations) == (0, 0, 0)


# --- deadline ------------------------------------------------------------------------------------------


def test_deadline_violation() -> None:
    protocol = protocol_after(FRESH)
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


# --- no input can make it raise --------------------------------------------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_near_messages = st.fixed_dictionaries(
    {"event": st.sampled_from(["start", "media", "dtmf", "playedStream", "clearedAudio", "stop", "playFailed",
                               "error", "other"])},
    optional={
        "sequenceNumber": st.sampled_from([1, 2, "3", -1, "x"]) | _json_values,
        "streamId": st.sampled_from([STREAM_ID, OTHER_STREAM_ID]) | _json_values,
        "name": _json_values,
        "media": st.fixed_dictionaries({}, optional={
            "track": st.sampled_from(["inbound", "outbound"]), "chunk": st.just(1), "timestamp": st.just("0"),
            "payload": st.just(FRAME_B64) | st.text(max_size=8)}),
        "start": st.fixed_dictionaries({}, optional={
            "callId": st.just(CALL_ID) | _json_values, "streamId": st.just(STREAM_ID) | _json_values,
            "tracks": st.just(["inbound"]) | _json_values,
            "mediaFormat": st.just({"encoding": "audio/x-mulaw", "sampleRate": 8000}) | _json_values}),
        "extra_headers": _json_values,
        "dtmf": _json_values,
    },
)


@given(prelude=st.sampled_from([FRESH, STARTED, STOPPED]),
       inputs=st.lists(st.text(max_size=40) | st.binary(max_size=40) | _near_messages.map(dumps), max_size=6))
def test_arbitrary_input_never_raises(prelude: str, inputs: list) -> None:
    protocol = protocol_after(prelude)
    for data in inputs:
        events = protocol.receive_text(data)
        assert len(events) <= 1
        if protocol.state is State.CLOSED:
            assert protocol.statistics().violations == 1


# --- outbound ------------------------------------------------------------------------------------------


def test_media_is_compact_and_assembles_from_prefix_and_suffix() -> None:
    encoder = PlivoOutboundEncoder(STREAM_ID)
    wire = encoder.media(FRAME)
    assert isinstance(wire, Outbound) and wire.binary is False  # Plivo takes text frames only
    assert json.loads(wire.data) == {
        "event": "playAudio", "streamId": STREAM_ID,
        "media": {"contentType": "audio/x-mulaw", "sampleRate": 8000, "payload": FRAME_B64},
    }
    assert b" " not in wire.data and b"\n" not in wire.data
    # The pacer writes prefix, base64 and suffix into shared memory itself.
    assert wire.data == encoder.media_prefix + FRAME_B64.encode() + encoder.media_suffix
    assert wire.data.startswith(PLAY_AUDIO_HEAD)


@pytest.mark.parametrize(("content_type", "rate", "payload"), [
    ("audio/x-mulaw", 8000, FRAME), ("audio/x-mulaw", 8000, b"\xff" * 160 * 50), ("audio/x-mulaw", 8000, b"\x00"),
    ("audio/x-l16", 8000, L16_FRAME), ("audio/x-l16", 16000, L16_FRAME * 2), ("audio/x-l16", 16000, b"\x01\x80"),
])
def test_media_round_trips_through_the_carrier_side(content_type: str, rate: int, payload: bytes) -> None:
    wire = PlivoOutboundEncoder(STREAM_ID, content_type, rate).media(payload)
    carrier = PlivoCarrierSide(STREAM_ID, CALL_ID, content_type=content_type, sample_rate_hz=rate)
    assert carrier.receive_text(wire.data) == PlayAudio(content_type, rate, payload)
    assert carrier.queued_bytes == len(payload)


@pytest.mark.parametrize("name", ["1:5", "1:10:end", 'cp "quoted" \\ back', "naïve ☎", "\n\t"])
def test_checkpoint_round_trips(name: str) -> None:
    encoder = PlivoOutboundEncoder(STREAM_ID)
    wire = encoder.mark(name)
    assert json.loads(wire.data) == {"event": "checkpoint", "streamId": STREAM_ID, "name": name}
    wire.data.decode("ascii")  # escaped, so always ASCII
    assert wire.data.startswith(encoder.mark_prefix) and wire.data.startswith(CHECKPOINT_HEAD)
    assert PlivoCarrierSide(STREAM_ID, CALL_ID).receive_text(wire.data) == Checkpoint(name)


def test_clear_round_trips() -> None:
    wire = PlivoOutboundEncoder(STREAM_ID).clear()
    assert wire.data == b'{"event":"clearAudio","streamId":"' + STREAM_ID.encode() + b'"}'
    assert wire.data.startswith(CLEAR_AUDIO_HEAD)
    assert PlivoCarrierSide(STREAM_ID, CALL_ID).receive_text(wire.data) == ClearAudio()


def test_no_head_is_a_prefix_of_another() -> None:
    heads = [PLAY_AUDIO_HEAD, CHECKPOINT_HEAD, CLEAR_AUDIO_HEAD]
    for head in heads:
        assert [other.startswith(head) for other in heads].count(True) == 1


def test_encoder_takes_the_stream_id_the_protocol_accepted() -> None:
    protocol = protocol_after(STARTED)
    assert PlivoOutboundEncoder(protocol.stream_id).stream_id == STREAM_ID  # type: ignore[arg-type]


@pytest.mark.parametrize("stream_id", ["", 'ab"c', "ab\\c", "abé", "ab\n", "a b", "a" * 129, None, b"abc"])
def test_encoder_rejects_unsafe_stream_ids(stream_id: object) -> None:
    with pytest.raises(ValueError):
        PlivoOutboundEncoder(stream_id)  # type: ignore[arg-type]


@pytest.mark.parametrize(("content_type", "rate"), [
    ("audio/x-mulaw", 16000), ("audio/x-mulaw;rate=8000", 8000), ("audio/x-l16", 24000), ("audio/x-l16", "8000"),
    ("audio/pcmu", 8000),
])
def test_encoder_rejects_formats_plivo_does_not_play(content_type: str, rate: object) -> None:
    with pytest.raises(ValueError):
        PlivoOutboundEncoder(STREAM_ID, content_type, rate)  # type: ignore[arg-type]


@pytest.mark.parametrize(("content_type", "rate", "payload"), [
    ("audio/x-mulaw", 8000, b""), ("audio/x-l16", 8000, b""), ("audio/x-l16", 16000, b"\x00" * 3),
])
def test_encoder_rejects_empty_or_partial_sample_payloads(content_type: str, rate: int, payload: bytes) -> None:
    with pytest.raises(ValueError):
        PlivoOutboundEncoder(STREAM_ID, content_type, rate).media(payload)


@pytest.mark.parametrize("name", ["", None, 5, "\ud800"])
def test_checkpoint_rejects_unusable_names(name: object) -> None:
    with pytest.raises(ValueError):
        PlivoOutboundEncoder(STREAM_ID).mark(name)  # type: ignore[arg-type]


# --- the carrier's end: what it refuses, and playout ------------------------------------------------------

PLAY = {"event": "playAudio", "streamId": STREAM_ID,
        "media": {"contentType": "audio/x-mulaw", "sampleRate": 8000, "payload": FRAME_B64}}

CARRIER_REJECTS: list[tuple[str, object, str]] = [
    ("not-json", "nope", "not a JSON value"),
    ("array", "[]", "not a JSON object"),
    ("unknown-event", {"event": "media", "streamSid": STREAM_ID, "media": {"payload": FRAME_B64}}, "unknown event"),
    ("play-wrong-stream", bend(PLAY, "streamId", OTHER_STREAM_ID), "wrong streamId"),
    ("play-media-missing", bend(PLAY, "media", DELETE), "media is not an object"),
    ("play-content-type-with-rate", bend(PLAY, "media.contentType", "audio/x-mulaw;rate=8000"),
     "contentType/sampleRate differ from the stream's"),
    ("play-wrong-rate", bend(PLAY, "media.sampleRate", 16000), "contentType/sampleRate differ from the stream's"),
    ("play-rate-string", bend(PLAY, "media.sampleRate", "8000"), "contentType/sampleRate differ from the stream's"),
    ("play-rate-float", bend(PLAY, "media.sampleRate", 8000.0), "contentType/sampleRate differ from the stream's"),
    ("play-l16-on-mulaw", bend(PLAY, "media.contentType", "audio/x-l16"),
     "contentType/sampleRate differ from the stream's"),
    ("play-payload-missing", bend(PLAY, "media.payload", DELETE), "payload is not a string"),
    ("play-payload-bad", bend(PLAY, "media.payload", "!!!!"), "payload is not base64"),
    ("play-payload-empty", bend(PLAY, "media.payload", ""), "payload is empty or not whole samples"),
    ("checkpoint-no-stream", {"event": "checkpoint", "name": "a"}, "wrong or missing streamId"),
    ("checkpoint-wrong-stream", {"event": "checkpoint", "streamId": OTHER_STREAM_ID, "name": "a"},
     "wrong or missing streamId"),
    ("checkpoint-no-name", {"event": "checkpoint", "streamId": STREAM_ID}, "name is not a non-empty string"),
    ("checkpoint-empty-name", {"event": "checkpoint", "streamId": STREAM_ID, "name": ""},
     "name is not a non-empty string"),
    ("clear-no-stream", {"event": "clearAudio"}, "wrong or missing streamId"),
]


@pytest.mark.parametrize(("message", "reason"), [case[1:] for case in CARRIER_REJECTS],
                         ids=[case[0] for case in CARRIER_REJECTS])
def test_carrier_side_rejects_what_plivo_would(message: object, reason: str) -> None:
    carrier = PlivoCarrierSide(STREAM_ID, CALL_ID)
    data = message if isinstance(message, str) else dumps(message)  # type: ignore[arg-type]
    assert carrier.receive_text(data) == Rejected(reason)
    assert carrier.queued_bytes == 0
    assert carrier.receive_binary(b"{}") == Rejected("binary frame")


def test_carrier_side_accepts_play_audio_without_stream_id() -> None:
    # [ref]'s example and plivo-stream-sdk send playAudio with no streamId.
    carrier = PlivoCarrierSide(STREAM_ID, CALL_ID)
    assert carrier.receive_text(dumps(bend(PLAY, "streamId", DELETE))) == PlayAudio("audio/x-mulaw", 8000, FRAME)


def test_playout_echoes_checkpoints_in_order_and_clear_drops_them() -> None:
    encoder = PlivoOutboundEncoder(STREAM_ID)
    carrier = PlivoCarrierSide(STREAM_ID, CALL_ID)
    protocol = protocol_after(STARTED)
    carrier.sequence_number = 1  # start went out already (protocol_after fed our own start)
    carrier.receive_text(encoder.mark("empty-queue").data)
    assert [protocol.receive_text(echo) for echo in carrier.play(0)] == [[MarkEcho(2, "empty-queue")]]
    for name in ["1:5", "1:10"]:
        carrier.receive_text(encoder.media(FRAME * 5).data)
        carrier.receive_text(encoder.mark(name).data)
    assert carrier.play(99) == []  # 99 ms: not yet through the first 100 ms
    (echo,) = carrier.play(1)
    assert protocol.receive_text(echo) == [MarkEcho(3, "1:5")]
    assert carrier.played_bytes == 800 and carrier.queued_bytes == 800
    carrier.receive_text(encoder.clear().data)
    assert (carrier.queued_bytes, carrier.discarded_bytes, carrier.checkpoints_dropped) == (0, 800, 1)
    assert carrier.play(1000) == []  # a dropped checkpoint is never echoed [ref]
    assert protocol.receive_text(carrier.cleared_audio()) == [Cleared(4)]
    with pytest.raises(ValueError):
        carrier.play(-1)


# --- bounded lead by checkpoints ------------------------------------------------------------------------

# Each step: (operation, argument, unplayed frames after it, what the operation returned or None).
LEAD_SCENARIOS: dict[str, list[tuple[str, object, int, object]]] = {
    "echoes-advance-played": [
        ("sent", 5, 5, None), ("checkpoint", ("a", 5), 5, None), ("sent", 5, 10, None),
        ("checkpoint", ("b", 10), 10, None), ("echo", "a", 5, 5), ("echo", "b", 0, 5),
    ],
    "a-later-echo-passes-earlier-checkpoints": [
        ("sent", 10, 10, None), ("checkpoint", ("a", 4), 10, None), ("checkpoint", ("b", 8), 10, None),
        ("echo", "b", 2, 8), ("echo", "a", 2, 0),  # a's echo after b's: unmatched, changes nothing
    ],
    "unknown-and-repeated-echoes-change-nothing": [
        ("sent", 3, 3, None), ("checkpoint", ("a", 3), 3, None), ("echo", "zzz", 3, 0), ("echo", "a", 0, 3),
        ("echo", "a", 0, 0),
    ],
    "clear-resets-and-stale-echoes-are-ignored": [
        ("sent", 10, 10, None), ("checkpoint", ("a", 5), 10, None), ("clear", None, 0, None),
        ("echo", "a", 0, 0),  # Plivo played it before it read the clear: stale
        ("sent", 4, 4, None), ("checkpoint", ("b", 14), 4, None), ("cleared", None, 4, None),
        ("echo", "b", 0, 4),
    ],
    "an-echo-after-the-clear-shows-it-was-read": [
        ("sent", 10, 10, None), ("checkpoint", ("a", 10), 10, None), ("clear", None, 0, None),
        ("sent", 6, 6, None), ("checkpoint", ("b", 16), 6, None),
        ("echo", "b", 0, 6),  # clearedAudio lost or late: b's echo alone proves the clear was read
        ("cleared", None, 0, None), ("echo", "a", 0, 0),  # now unmatched, not stale
    ],
    "a-name-pending-before-and-after-a-clear-stays-stale": [
        ("sent", 5, 5, None), ("checkpoint", ("x", 5), 5, None), ("clear", None, 0, None),
        ("sent", 5, 5, None), ("checkpoint", ("x", 10), 5, None),
        ("echo", "x", 5, 0),  # ambiguous until clearedAudio: the safe side keeps 5 unplayed
        ("cleared", None, 5, None), ("sent", 1, 6, None), ("checkpoint", ("y", 11), 6, None),
        ("echo", "y", 0, 6),
    ],
    "two-clears-before-either-is-confirmed": [
        ("sent", 4, 4, None), ("checkpoint", ("a", 4), 4, None), ("clear", None, 0, None),
        ("sent", 4, 4, None), ("checkpoint", ("b", 8), 4, None), ("clear", None, 0, None),
        ("echo", "b", 0, 0), ("cleared", None, 0, None), ("echo", "a", 0, 0),
        ("sent", 2, 2, None), ("checkpoint", ("c", 10), 2, None), ("cleared", None, 2, None),
        ("echo", "c", 0, 2),
    ],
}


@pytest.mark.parametrize("steps", list(LEAD_SCENARIOS.values()), ids=list(LEAD_SCENARIOS))
def test_checkpoint_lead_scenarios(steps: list[tuple[str, object, int, object]]) -> None:
    lead = CheckpointLead()
    for index, (operation, argument, unplayed, returned) in enumerate(steps):
        if operation == "sent":
            result = lead.frames_sent(argument)  # type: ignore[arg-type]
        elif operation == "checkpoint":
            result = lead.checkpoint_sent(*argument)  # type: ignore[misc]
        elif operation == "echo":
            result = lead.checkpoint_echoed(argument)  # type: ignore[arg-type]
        elif operation == "clear":
            result = lead.clear_sent()
        else:
            result = lead.clear_confirmed()
        assert (lead.unplayed_frames(), result) == (unplayed, returned), (index, operation, argument)


def test_checkpoint_lead_statistics_and_may_send() -> None:
    lead = CheckpointLead()
    assert lead.may_send(10, 10) and not lead.may_send(11, 10)
    lead.frames_sent(8)
    lead.checkpoint_sent("a", 4)
    assert lead.may_send(2, 10) and not lead.may_send(3, 10)
    assert lead.checkpoint_echoed("a") == 4
    assert lead.may_send(6, 10) and not lead.may_send(7, 10) and lead.pending_checkpoints() == 0
    lead.checkpoint_sent("b", 8)
    lead.clear_sent()
    lead.checkpoint_echoed("b")
    lead.checkpoint_echoed("nope")
    lead.clear_confirmed()
    stats = lead.statistics()
    assert (stats.frames_sent, stats.frames_played, stats.frames_discarded) == (8, 4, 4)
    assert (stats.checkpoints_sent, stats.echoes_matched, stats.echoes_stale, stats.echoes_unmatched) == (2, 1, 1, 1)
    assert (stats.clears_sent, stats.clears_confirmed) == (1, 1)


@pytest.mark.parametrize("misuse", [
    lambda lead: lead.frames_sent(-1),
    lambda lead: lead.frames_sent(1.0),
    lambda lead: lead.checkpoint_sent("", 0),
    lambda lead: lead.checkpoint_sent("a", 1),  # past the frames reported
    lambda lead: (lead.frames_sent(4), lead.checkpoint_sent("a", 3), lead.checkpoint_sent("b", 2)),  # goes back
    lambda lead: (lead.frames_sent(4), lead.clear_sent(), lead.checkpoint_sent("a", 3)),  # before the clear
    lambda lead: lead.may_send(-1, 10),
    lambda lead: lead.may_send(1, -1),
], ids=["negative-frames", "float-frames", "empty-name", "past-sent", "backwards", "before-clear",
        "negative-more", "negative-bound"])
def test_checkpoint_lead_misuse_raises(misuse) -> None:
    with pytest.raises(ValueError):
        misuse(CheckpointLead())


_lead_operations = st.lists(st.sampled_from([
    # weighted by repetition: mostly the steady loop (send, checkpoint, deliver, play, echo), clears rarer
    ("send", 1), ("send", 1), ("send", 3), ("send", 5), ("send", 12),
    ("checkpoint", None), ("checkpoint", None), ("clear", None),
    ("to_carrier", 1), ("to_carrier", 4), ("to_carrier", 4),
    ("play", 0), ("play", 20), ("play", 60), ("play", 200),
    ("to_us", 1), ("to_us", 4), ("to_us", 4),
]), min_size=30, max_size=150)


@given(operations=_lead_operations, max_unplayed_frames=st.integers(0, 30))
def test_checkpoint_lead_bounds_what_the_carrier_has_not_played(operations: list, max_unplayed_frames: int) -> None:
    """The pacer obeys may_send; messages cross in flight both ways (FIFO, like a WebSocket); the carrier
    plays and echoes at its own pace. The lead is never negative, never above the bound, and never below
    what the carrier really still has to play of the audio sent since our last clear."""
    encoder = PlivoOutboundEncoder(STREAM_ID)
    carrier = PlivoCarrierSide(STREAM_ID, CALL_ID)
    protocol = PlivoStreamProtocol()
    protocol.receive_text(carrier.start())
    lead = CheckpointLead()
    to_carrier: deque[tuple[str, bytes, int]] = deque()  # (kind, message, frames)
    to_us: deque[str] = deque()
    sent_frames = 0
    played_position = 0
    names = iter(range(1, 10**6))

    def deliver_to_carrier(count: int) -> None:
        for _ in range(min(count, len(to_carrier))):
            _, data, _ = to_carrier.popleft()
            if isinstance(carrier.receive_text(data), ClearAudio):
                to_us.append(carrier.cleared_audio())

    def deliver_to_us(count: int) -> None:
        for _ in range(min(count, len(to_us))):
            (event,) = protocol.receive_text(to_us.popleft())
            if isinstance(event, MarkEcho):
                lead.checkpoint_echoed(event.name)
            else:
                assert isinstance(event, Cleared)
                lead.clear_confirmed()

    def truly_unplayed_since_our_last_clear() -> int:
        kinds = [kind for kind, _, _ in to_carrier]
        if "clear" in kinds:
            last_clear = len(kinds) - 1 - kinds[::-1].index("clear")
            return sum(frames for _, _, frames in list(to_carrier)[last_clear + 1:])
        return math.ceil(carrier.queued_bytes / 160) + sum(frames for _, _, frames in to_carrier)

    for operation, argument in operations:
        if operation == "send" and argument and lead.may_send(argument, max_unplayed_frames):
            to_carrier.append(("media", encoder.media(b"\xff" * 160 * argument).data, argument))
            lead.frames_sent(argument)
            sent_frames += argument
        elif operation == "checkpoint":
            name = f"1:{next(names)}"
            to_carrier.append(("checkpoint", encoder.mark(name).data, 0))
            lead.checkpoint_sent(name, sent_frames)
        elif operation == "clear":
            to_carrier.append(("clear", encoder.clear().data, 0))
            lead.clear_sent()
        elif operation == "to_carrier":
            deliver_to_carrier(argument)
        elif operation == "play":
            to_us.extend(carrier.play(argument))
        elif operation == "to_us":
            deliver_to_us(argument)
        assert 0 <= lead.unplayed_frames() <= max_unplayed_frames
        assert truly_unplayed_since_our_last_clear() <= lead.unplayed_frames()
        # The positions the gateway publishes to the pacer (CARRIER_PLAYED_POS): the played one only moves
        # forward, and never past what was sent, so the pacer's count minus it is the unplayed backlog.
        assert lead.sent_position_frames() == sent_frames
        assert lead.sent_position_frames() - lead.played_position_frames() == lead.unplayed_frames()
        assert lead.played_position_frames() >= played_position
        played_position = lead.played_position_frames()

    # Drain: one last checkpoint, everything delivered and played: nothing is left unplayed.
    name = f"1:{next(names)}"
    to_carrier.append(("checkpoint", encoder.mark(name).data, 0))
    lead.checkpoint_sent(name, sent_frames)
    deliver_to_carrier(len(to_carrier))
    to_us.extend(carrier.play(20 * (sent_frames + 1)))
    deliver_to_us(len(to_us))
    assert lead.unplayed_frames() == 0 and lead.pending_checkpoints() == 0
    assert protocol.statistics().violations == 0


# --- answer XML ----------------------------------------------------------------------------------------------


def test_stream_xml_exact_shape() -> None:
    assert stream_xml("wss://gw.example.com/plivo/ws", {"session_token": "tok-_1", "tenant": "acme"}) == (
        '<Response><Stream bidirectional="true" keepCallAlive="true" contentType="audio/x-mulaw;rate=8000"'
        ' extraHeaders="session_token=tok-_1,tenant=acme">wss://gw.example.com/plivo/ws</Stream></Response>'
    )
    assert stream_xml("ws://127.0.0.1:8765/ws", {}) == (
        '<Response><Stream bidirectional="true" keepCallAlive="true" contentType="audio/x-mulaw;rate=8000">'
        "ws://127.0.0.1:8765/ws</Stream></Response>"
    )


@pytest.mark.parametrize("content_type", sorted(STREAM_CONTENT_TYPES))
def test_stream_xml_content_types(content_type: str) -> None:
    stream = ElementTree.fromstring(stream_xml("wss://gw.example.com/ws", {}, content_type)).find("Stream")
    assert stream is not None and stream.get("contentType") == content_type


def test_stream_xml_escapes_hostile_urls() -> None:
    stream_url = 'wss://gw.example.com/ws?a=1&b=<Hangup/>&c="x"&d=\'y\'&e=]]>'
    callback = 'https://gw.example.com/status?x=1&y="><Hangup/><Stream/a="'
    xml = stream_xml(stream_url, {"session_token": "tok"}, status_callback_url=callback)
    assert "<Hangup" not in xml and "]]>" not in xml
    response = ElementTree.fromstring(xml)
    assert [child.tag for child in response] == ["Stream"]
    (stream,) = response
    assert stream.text == stream_url and list(stream) == []
    assert stream.attrib == {
        "bidirectional": "true", "keepCallAlive": "true", "contentType": "audio/x-mulaw;rate=8000",
        "extraHeaders": "session_token=tok", "statusCallbackUrl": callback, "statusCallbackMethod": "POST",
    }


@pytest.mark.parametrize(("stream_url", "extra_headers", "content_type", "callback"), [
    ("https://gw.example.com/ws", {}, "audio/x-mulaw;rate=8000", None),  # not a WebSocket URL
    ("wss:///ws", {}, "audio/x-mulaw;rate=8000", None),  # no host
    ("gw.example.com/ws", {}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws\x00", {}, "audio/x-mulaw;rate=8000", None),  # XML cannot carry it
    ("wss://gw.example.com/w s", {}, "audio/x-mulaw;rate=8000", None),
    (" wss://gw.example.com/ws", {}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/" + "a" * 2048, {}, "audio/x-mulaw;rate=8000", None),  # [ref]: 2048 at most
    (b"wss://gw.example.com/ws", {}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws", {}, "audio/x-mulaw", None),  # the XML value carries ;rate=
    ("wss://gw.example.com/ws", {}, "audio/x-mulaw;rate=16000", None),
    ("wss://gw.example.com/ws", {"a": "b,c=d"}, "audio/x-mulaw;rate=8000", None),  # would forge a header
    ("wss://gw.example.com/ws", {"a": 'x"><Hangup/>'}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws", {"a;b": "c"}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws", {"": "c"}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws", {"a": ""}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws", {"a": 1}, "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws", {"a": "x" * 511}, "audio/x-mulaw;rate=8000", None),  # [ref]: 512 bytes at most
    ("wss://gw.example.com/ws", [("a", "b")], "audio/x-mulaw;rate=8000", None),
    ("wss://gw.example.com/ws", {}, "audio/x-mulaw;rate=8000", "ftp://gw.example.com/status"),
    ("wss://gw.example.com/ws", {}, "audio/x-mulaw;rate=8000", "https://gw.example.com/\x0b"),
])
def test_stream_xml_refuses_what_plivo_could_not_use(stream_url: object, extra_headers: object, content_type: str,
                                                     callback: object) -> None:
    with pytest.raises(ValueError):
        stream_xml(stream_url, extra_headers, content_type, callback)  # type: ignore[arg-type]


def test_stream_xml_extra_headers_at_the_limit() -> None:
    value = "x" * (512 - len("a="))
    stream = ElementTree.fromstring(stream_xml("wss://gw.example.com/ws", {"a": value})).find("Stream")
    assert stream is not None and stream.get("extraHeaders") == "a=" + value


def test_stream_xml_extra_headers_round_trip_into_start() -> None:
    stream = ElementTree.fromstring(stream_xml("wss://gw.example.com/ws", {"session_token": "t0k", "b": "2"}))
    extra = stream.find("Stream").get("extraHeaders")  # type: ignore[union-attr]
    (started,) = PlivoStreamProtocol().receive_text(dumps(start_msg(extra=extra)))
    assert isinstance(started, StreamStarted)
    assert started.custom_parameters == (("session_token", "t0k"), ("b", "2"))


# --- request signature V3 --------------------------------------------------------------------------------------

TOKEN = "MAdummyauthtoken0123456789abcdefABCDEF"
NONCE = "05429567804466091622"

# (method, url, params, signature): computed with plivo 4.63.0's plivo.utils.signature_v3.
SIGNATURE_VECTORS: list[tuple[str, str, dict, str]] = [
    ("POST", "https://gw.example.com/plivo/answer",
     {"CallUUID": "b3a1c2d4-0000-4000-8000-000000000001", "From": "+14155550100", "To": "+14155550199",
      "Direction": "inbound", "Event": "StartApp"},
     "Dnzfrb8W+GSeQ6zHPlGtsEeS3xQdJDlyAsQZ7It0QN8="),
    ("POST", "https://gw.example.com/plivo/answer?tenant=acme&a=2&a=1", {"CallUUID": "x", "From": "+1"},
     "Q5R76oaL1zTe1CdFMB6pgsVuaaC3V2mjbxfaZrILGxQ="),
    ("POST", "https://gw.example.com/plivo/answer?tenant=acme", {}, "w4K0ADKl0wCwB30XxOx5HXvWWmnst3Eoc4L+jdZQmxw="),
    ("POST", "https://gw.example.com/plivo/answer", {}, "O2gfOiXHGEI0QAl25oFWJSqLaLXTi7uLT5nW7FLu73g="),
    ("GET", "http://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb", {},
     "anDw82TIu7KbWj8n97mNkjFg18js8vSJCrKkmZMpg9E="),
    ("GET", "http://gw.example.com/plivo/ws", {}, "5cNijD07MAt4Fi60Y3bgrARN86mhr+JpARbAFyXQbwE="),
    ("GET", "https://gw.example.com/plivo/answer?z=1", {"CallUUID": "c", "From": "+2"},
     "dqNPMlQtK1Ag7X+F/xwU2iDaE0dMR1tcdm5+j8obnEI="),
    ("POST", "https://gw.example.com/plivo/answer", {"CallerName": "José Ñ", "Multi": ["b", "a"]},
     "5XG3PSwQnNegq/CilweQcz4KxOTRMLSuCx/6NsmdVWI="),
    ("POST", "https://gw.example.com/pl%C3%AFvo/answer#frag", {"A": ""},
     "GQl0hOOhEWaEQCb7BAs1trkkls6OK74s6dVcgCoqYek="),
]
VECTOR_IDS = ["post-answer", "post-query-and-params", "post-query-only", "post-bare", "get-upgrade-port-query",
              "get-bare", "get-params-and-query", "post-utf8-and-list", "post-fragment-empty-value"]


@pytest.mark.parametrize(("method", "url", "params", "signature"), SIGNATURE_VECTORS, ids=VECTOR_IDS)
def test_signature_matches_plivos_sdk(method: str, url: str, params: dict, signature: str) -> None:
    assert compute_signature_v3(TOKEN, url, NONCE, params, method) == signature
    assert validate_signature_v3(TOKEN, url, NONCE, signature, params, method)
    assert validate_signature_v3(TOKEN, url, NONCE, signature, params, method.lower())
    # Several active tokens: a comma-separated list, any member may match (with or without spaces).
    other = compute_signature_v3("another-token", url, NONCE, params, method)
    assert validate_signature_v3(TOKEN, url, NONCE, f"{other},{signature}", params, method)
    assert validate_signature_v3(TOKEN, url, NONCE, f"{signature}, {other}", params, method)
    assert not validate_signature_v3(TOKEN, url, NONCE, other, params, method)


def _flip(text: str) -> str:
    return ("B" if text[0] == "A" else "A") + text[1:]


@pytest.mark.parametrize("tamper", [
    lambda a: {**a, "url": a["url"].replace("gw.example.com", "gw.example.org")},
    lambda a: {**a, "url": a["url"].replace("https://", "http://")},
    lambda a: {**a, "url": a["url"] + "x"},
    lambda a: {**a, "url": a["url"] + "?extra=1"},
    lambda a: {**a, "params": {**a["params"], "From": "+19995550100"}},
    lambda a: {**a, "params": {**a["params"], "Injected": "1"}},
    lambda a: {**a, "params": {k: v for k, v in a["params"].items() if k != "To"}},
    lambda a: {**a, "method": "GET"},
    lambda a: {**a, "nonce": a["nonce"][:-1] + "3"},
    lambda a: {**a, "auth_token": a["auth_token"] + "x"},
    lambda a: {**a, "signature_header": _flip(a["signature_header"])},
    lambda a: {**a, "signature_header": a["signature_header"][:-2]},
    lambda a: {**a, "signature_header": ""},
    lambda a: {**a, "signature_header": None},
    lambda a: {**a, "nonce": ""},
    lambda a: {**a, "nonce": None},
    lambda a: {**a, "signature_header": "ñ" + a["signature_header"]},
    lambda a: {**a, "signature_header": ",,"},
], ids=["host", "scheme", "path", "query", "param-value", "param-added", "param-removed", "method", "nonce", "token",
        "signature-char", "signature-cut", "no-signature", "signature-none", "no-nonce", "nonce-none",
        "signature-non-ascii", "only-commas"])
def test_tampered_requests_are_rejected(tamper) -> None:
    method, url, params, signature = SIGNATURE_VECTORS[0]
    good = {"auth_token": TOKEN, "url": url, "nonce": NONCE, "signature_header": signature, "params": params,
            "method": method}
    assert validate_signature_v3(**good)
    assert not validate_signature_v3(**tamper(good))


def test_signature_method_must_be_get_or_post() -> None:
    with pytest.raises(ValueError):
        compute_signature_v3(TOKEN, "https://gw.example.com/a", NONCE, None, "PUT")


@pytest.mark.parametrize(("stream_url", "expected"), [
    ("wss://gw.example.com/plivo/ws?tenant=acme", "http://gw.example.com/plivo/ws?tenant=acme"),
    ("ws://127.0.0.1:8765/ws", "http://127.0.0.1:8765/ws"),
])
def test_upgrade_signature_url(stream_url: str, expected: str) -> None:
    assert upgrade_signature_url(stream_url) == expected


def test_upgrade_signature_url_refuses_other_schemes() -> None:
    with pytest.raises(ValueError):
        upgrade_signature_url("https://gw.example.com/ws")


def test_upgrade_is_validated_as_a_get_over_the_http_url() -> None:
    # The GET vector above is the upgrade of wss://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb.
    method, url, params, signature = SIGNATURE_VECTORS[4]
    signed_url = upgrade_signature_url("wss://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb")
    assert signed_url == url
    assert validate_signature_v3(TOKEN, signed_url, NONCE, signature, None, "GET")


def test_sign_upgrade_is_that_get_signature_and_validate_upgrade_signature_checks_it() -> None:
    stream_url = "wss://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb"
    signature = sign_upgrade(TOKEN, stream_url, NONCE)
    assert signature == SIGNATURE_VECTORS[4][3]
    assert validate_upgrade_signature(TOKEN, stream_url, NONCE, signature)
    assert validate_upgrade_signature(TOKEN, stream_url, NONCE, "stale=," + signature)  # several tokens: any one
    assert validate_upgrade_signature(TOKEN, "ws://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb", NONCE,
                                      signature)  # ws:// and wss:// are both read as http://


@pytest.mark.parametrize(("stream_url", "nonce", "signature"), [
    ("wss://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb", NONCE, None),  # missing
    ("wss://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb", None, "x"),  # no nonce
    ("wss://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb", "other-nonce", "x"),
    ("wss://gw.example.com:8443/plivo/ws?tenant=other&token=a%2Bb", NONCE, "x"),  # another URL
    ("wss://gw.example.com/plivo/ws?tenant=acme&token=a%2Bb", NONCE, "x"),  # another port
    ("https://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb", NONCE, "x"),  # not a ws URL
])
def test_validate_upgrade_signature_rejects(stream_url: str, nonce: str | None, signature: str | None) -> None:
    good = SIGNATURE_VECTORS[4][3]
    assert not validate_upgrade_signature(TOKEN, stream_url, nonce, good if signature == "x" else signature)
    assert not validate_upgrade_signature("other-token", "wss://gw.example.com:8443/plivo/ws?tenant=acme&token=a%2Bb",
                                          NONCE, good)


# --- the pacer's wire templates (voicecore/carriers/wire.py) --------------------------------------------


def test_wire_templates_are_the_encoders_bytes_and_l16_is_raw() -> None:
    encoder = PlivoOutboundEncoder(STREAM_ID)
    templates = wire_templates(STREAM_ID)
    assert templates == encoder.wire_templates() and not templates.raw and not templates.binary
    assert templates.media_prefix + FRAME_B64.encode() + templates.media_suffix == encoder.media(FRAME).data
    assert templates.mark_prefix + b"12:345:end" + templates.mark_suffix == encoder.mark("12:345:end").data
    assert templates.clear == encoder.clear().data
    for rate in (8000, 16000):  # the pacer's frames are mu-law at 8 kHz: the carrier edge resamples
        assert wire_templates(STREAM_ID, "audio/x-l16", rate) == RAW


def test_what_the_pacer_writes_from_the_templates_is_read_by_plivo(tmp_path) -> None:
    from test_pacer_core import PACER_ENTRIES_FRAMES, PACER_ENTRIES_MARKS, frame_payload, pacer_wire_entries

    side = PlivoCarrierSide(STREAM_ID, "call-uuid")
    read = [side.receive_text(entry) for entry in pacer_wire_entries(tmp_path, STREAM_ID, wire_templates(STREAM_ID))]
    assert [r.payload for r in read if isinstance(r, PlayAudio)] == [frame_payload(*f) for f in PACER_ENTRIES_FRAMES]
    assert {(r.content_type, r.sample_rate_hz) for r in read if isinstance(r, PlayAudio)} == {("audio/x-mulaw", 8000)}
    assert [r.name for r in read if isinstance(r, Checkpoint)] == PACER_ENTRIES_MARKS
    assert isinstance(read[-1], ClearAudio) and not [r for r in read if isinstance(r, Rejected)]
