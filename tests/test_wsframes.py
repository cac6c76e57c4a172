"""voicecore.wsframes against websockets' own frame parser (the reference), table-driven."""

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from voicecore.wsframes import text_frame_header, text_frames


def parse_all(data: bytes, count: int) -> list[Frame]:
    """Frames a client reads from ``data`` (mask=False: a server's frames are never masked, RFC 6455 5.1)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames = []
    for _ in range(count):
        parser = Frame.parse(reader.read_exact, mask=False, max_size=None, extensions=None)
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
