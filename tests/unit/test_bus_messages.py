"""Control-bus codec: round trips, and every kind of bad message decodes to Rejected (never raises)."""

import msgpack
import pytest

from voicecore.bus import messages as m

SAMPLES = [
    m.Heartbeat("pacer", 123, 7, 99, 150),
    m.CallStarted(3, 2, "CA" + "a" * 32, "MZ" + "b" * 32, "AC" + "c" * 32),
    m.CallEnded(3, 2, "stop"),
    m.CancelTag(3, 2, 5, 1234567),
    m.Dtmf(3, 2, "7"),
    m.CarrierAmd(3, 2, "machine_end_beep"),
    m.Stats("model", 44, {"frames": 10.0, "calls": 2}),
    m.RecordFinished("CA1.jsonl", '{"call_sid":"CA1"}'),
    m.CallSpooled("CA1-1800000000000.call.json", ""),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda s: type(s).__name__)
def test_round_trip(message):
    assert m.decode(m.encode(message)) == message


def _raw(body):
    return msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"\xc1", "undecodable"),
        (_raw([1, 2]), "not a map"),
        (_raw({"t": "heartbeat", "process": "x", "pid": 1, "seq": 1, "sent_ns": 1}), "schema version"),
        (_raw({"v": 2, "t": "heartbeat"}), "schema version"),
        (_raw({"v": 1, "t": "nope"}), "unknown message type"),
        (_raw({"v": 1, "t": "heartbeat", "process": "x", "pid": 1, "seq": 1}), "missing field"),
        (_raw({"v": 1, "t": "heartbeat", "process": "x", "pid": "1", "seq": 1, "sent_ns": 1}), "wrong type"),
        (_raw({"v": 1, "t": "heartbeat", "process": "x", "pid": True, "seq": 1, "sent_ns": 1}), "wrong type"),
        (_raw({"v": 1, "t": "heartbeat", "process": "x", "pid": 1, "seq": 1, "sent_ns": 1, "extra": 0}), "unknown fields"),
        (_raw({"v": 1, "t": "stats", "process": "x", "pid": 1, "values": {"a": "b"}}), "wrong type"),
        (b"\x00" * (m.MAX_MESSAGE_BYTES + 1), "oversized"),
    ],
)
def test_bad_messages_are_rejected(raw, reason):
    decoded = m.decode(raw)
    assert isinstance(decoded, m.Rejected)
    assert reason in decoded.reason


def test_decoded_messages_are_frozen():
    decoded = m.decode(m.encode(SAMPLES[0]))
    with pytest.raises((AttributeError, TypeError)):
        decoded.seq = 8  # type: ignore[misc]
