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


# --- batches: several messages in one bus message ---------------------------------------------------------
DELTA = m.TranscriptDelta(3, 2, 5, " costs", 40)
VERDICT = m.Verdict(3, 2, 5, 40, False, "", "")


@pytest.mark.parametrize("count", [0, 1, 15, 16, 17, 300])
def test_a_batch_reads_back_as_its_messages_in_order(count):
    sent = [m.TranscriptDelta(3, 2, 5, f" w{i}", i) for i in range(count)]
    assert m.decode_all(m.encode_batch([m.encode(x) for x in sent])) == sent


def test_a_lone_message_is_read_as_itself_and_decode_refuses_a_batch():
    assert m.decode_all(m.encode(VERDICT)) == [VERDICT]
    refused = m.decode(m.encode_batch([m.encode(VERDICT)]))
    assert isinstance(refused, m.Rejected) and "batch" in refused.reason


def test_a_bad_message_in_a_batch_is_one_rejection_and_the_others_are_read():
    bad = _raw({"v": 1, "t": "verdict", "slot": 3})  # fields missing
    decoded = m.decode_all(m.encode_batch([m.encode(DELTA), bad, _raw(7), m.encode(VERDICT)]))
    assert decoded[0] == DELTA and decoded[3] == VERDICT
    assert isinstance(decoded[1], m.Rejected) and "missing field" in decoded[1].reason
    assert isinstance(decoded[2], m.Rejected) and "not a map" in decoded[2].reason


@pytest.mark.parametrize(
    "raw, reason",
    [
        (_raw({"v": 1, "t": "batch", "m": "x"}), "batch: malformed"),
        (_raw({"v": 1, "t": "batch"}), "batch: malformed"),
        (_raw({"v": 1, "t": "batch", "m": [], "extra": 1}), "batch: malformed"),
        (_raw({"v": 2, "t": "batch", "m": []}), "schema version"),
        (_raw({"v": 1, "t": "batch", "m": [{"v": 2, "t": "cancel"}]}), "schema version"),
        (b"\xc1", "undecodable"),
    ],
)
def test_a_malformed_batch_is_rejected_not_raised(raw, reason):
    decoded = m.decode_all(raw)
    assert all(isinstance(d, m.Rejected) for d in decoded) and reason in decoded[0].reason


def test_batches_are_cut_to_fit_a_message_in_order():
    big = m.encode(m.TranscriptDone(3, 2, 5, "x" * 40_000, 900))  # two never fit one message
    encoded = [m.encode(DELTA), big, big, m.encode(VERDICT), big, big]
    runs = m.batches(encoded)
    assert [item for run in runs for item in run] == encoded
    assert [len(run) for run in runs] == [2, 2, 1, 1]
    for run in runs:
        assert len(m.encode_batch(run)) <= m.MAX_MESSAGE_BYTES
        assert len(m.decode_all(m.encode_batch(run))) == len(run)
    assert m.batches([]) == []


def _done_of_size(size: int) -> bytes:
    """An encoded TranscriptDone of exactly ``size`` bytes (its text long enough for a 16-bit string length)."""
    base = len(m.encode(m.TranscriptDone(3, 2, 5, "y" * 1000, 0)))
    encoded = m.encode(m.TranscriptDone(3, 2, 5, "y" * (1000 + size - base), 0))
    assert len(encoded) == size
    return encoded


def test_messages_that_sum_to_the_batch_limit_fit_one_batch_and_one_byte_more_does_not():
    filler = m.encode(DELTA)
    exact = [_done_of_size(m.MAX_BATCHED_BYTES - len(filler)), filler]
    assert len(m.batches(exact)) == 1
    assert len(m.encode_batch(exact)) <= m.MAX_MESSAGE_BYTES
    assert m.decode_all(m.encode_batch(exact))[1] == DELTA
    over = [_done_of_size(m.MAX_BATCHED_BYTES - len(filler) + 1), filler]
    assert len(m.batches(over)) == 2
