"""Server-to-client WebSocket text frames for a batch of messages, as one bytes object.

Owns only RFC 6455 section 5.2 base framing for the one case the gateway needs: unmasked (a server
never masks, 5.3), unfragmented (FIN set), text (opcode 0x1), no extension bits. picows frames and
sends one message per call, and each send is a write system call; the gateway sends every message the
pacer released for a call since the last doorbell (media frames and their marks) in one write, so it
frames them here. Everything else on the socket (upgrade, control frames, close, parsing) stays picows'.

Must not know: sockets, Twilio, the rings.
"""

from __future__ import annotations

from collections.abc import Iterable

_FIN_TEXT = 0x81  # FIN + opcode 0x1 (text)


def text_frame_header(length: int) -> bytes:
    """The 2-, 4- or 10-byte header of an unmasked final text frame carrying ``length`` payload bytes."""
    if length < 0:
        raise ValueError("length must be >= 0")
    if length < 126:
        return bytes((_FIN_TEXT, length))
    if length < 1 << 16:
        return bytes((_FIN_TEXT, 126)) + length.to_bytes(2, "big")
    return bytes((_FIN_TEXT, 127)) + length.to_bytes(8, "big")


def text_frames(messages: Iterable[bytes]) -> bytes:
    """Each message (UTF-8 text, already valid) as one unmasked final text frame, concatenated."""
    parts: list[bytes] = []
    for message in messages:
        parts.append(text_frame_header(len(message)))
        parts.append(message)
    return b"".join(parts)
