"""voicecore.wsframes against websockets' own frame parser (the reference), table-driven: unmasked server
frames and masked client frames."""

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from voicecore import wsframes
from voicecore.wsframes import masked_text_frame, masked_text_frames, text_frame_header, text_frames


def parse_all(data: bytes, count: int, mask: bool = False) -> list[Frame]:
    """Frames a peer reads from ``data``: a client reads unmasked frames (mask=False: a server never
    masks, RFC 6455 5.1), a server reads masked ones (mask=True: websockets refuses unmasked ones)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames = []
    for _ in range(count):
        parser = Frame.parse(reader.read_exact, mask=mask, max_size=None, extensions=None)
        try:
            while True:
                next(parser)
        except StopIteration as done:
            frames.append(done.value)
    assert reader.at_eof() is True or reader.buffer == b""
    return frames


@pytest.mark.parametrize("length, header_bytes", [(0, 2), (1, 2), (125, 2), (126, 4), (400, 4), (65535, 4), (65536, 10)])
def test_each_length_class_parses_back_exactly(length, header_bytes):
    message = (b"x" * length)
    header = text_frame_header(length)
    assert len(header) == header_bytes
    [frame] = parse_all(header + message, 1)
    assert frame.opcode is Opcode.TEXT and frame.fin and frame.data == message
    assert not (frame.rsv1 or frame.rsv2 or frame.rsv3)


def test_a_batch_is_the_messages_in_order_one_frame_each():
    messages = [b'{"event":"media","media":{"payload":"' + b"A" * 216 + b'"}}', b'{"event":"mark","mark":{"name":"1:5"}}',
                b'{"event":"clear"}', "{\"é\":\"ü\"}".encode()]
    frames = parse_all(text_frames(messages), len(messages))
    assert [f.data for f in frames] == messages
    assert all(f.opcode is Opcode.TEXT and f.fin for f in frames)


def test_negative_length_is_our_misuse():
    with pytest.raises(ValueError):
        text_frame_header(-1)


@pytest.mark.parametrize("length", [0, 1, 125, 126, 372, 65535, 65536])
def test_masked_frames_parse_back_as_a_server_reads_them(length):
    messages = [bytes(range(256)) * (length // 256) + b"m" * (length % 256), b'{"event":"mark","mark":{"name":"1:5"}}']
    data = masked_text_frames(messages)
    frames = parse_all(data, 2, mask=True)
    assert [f.data for f in frames] == messages
    assert all(f.opcode is Opcode.TEXT and f.fin and not (f.rsv1 or f.rsv2 or f.rsv3) for f in frames)
    assert len(data) == sum(len(text_frame_header(len(m))) + 4 + len(m) for m in messages)


def test_masked_frames_mask_with_fresh_keys():
    message = b"x" * 64
    first, second = masked_text_frames([message, message]), masked_text_frames([message])
    assert message not in first and message not in second  # the payload is masked on the wire
    keys = {first[2:6], first[6 + 64 + 2:6 + 64 + 6], second[2:6]}
    assert len(keys) == 3  # a fresh key per frame (equal by chance: 1 in 2**31)
    assert masked_text_frames([]) == b""


@pytest.mark.parametrize("length", [0, 1, 125, 126, 372, 65535, 65536])
def test_one_masked_frame_parses_back_as_a_server_reads_it(length):
    message = b"m" * length
    data = masked_text_frame(message)
    [frame] = parse_all(data, 1, mask=True)
    assert frame.data == message and frame.opcode is Opcode.TEXT and frame.fin
    assert len(data) == len(text_frame_header(length)) + 4 + length
    [frame] = parse_all(masked_text_frames([message]), 1, mask=True)  # a batch of one is the same frame
    assert frame.data == message


def test_masking_keys_are_read_in_bulk_and_each_used_once(monkeypatch):
    reads = []

    def urandom(size: int) -> bytes:
        reads.append(size)
        start = sum(reads[:-1])
        return bytes((start + i) % 251 for i in range(size))  # distinct, known bytes per read

    monkeypatch.setattr(wsframes.os, "urandom", urandom)
    monkeypatch.setattr(wsframes, "_mask_keys", wsframes._MaskKeys())
    per_read = wsframes._KEYS_PER_READ
    keys = [masked_text_frame(b"x")[2:6] for _ in range(per_read)]
    assert reads == [4 * per_read]  # one read of the OS's random source for that many frames
    assert b"".join(keys) == bytes(i % 251 for i in range(4 * per_read))  # every key in turn, none twice
    batch = masked_text_frames([b"a", b"b"])
    assert len(reads) == 2  # the pool ran out: a fresh read
    assert batch[2:6] == bytes((4 * per_read + i) % 251 for i in range(4))
