"""WebSocket text (or binary) frames for a batch of messages, as one bytes object (one write system call).

Owns only RFC 6455 section 5.2 base framing for the two cases that send batches: unfragmented (FIN set)
text frames (opcode 0x1) with no extension bits, unmasked from a server (5.3: a server never masks) and
masked from a client (5.3: a client always masks, with a fresh unpredictable key per frame; the XOR is
websockets' C ``apply_mask``). picows frames and sends one message per call, and each send is a write
system call; the gateway sends every message the pacer released for a call since the last doorbell
(media frames and their marks) in one write, the model simulator the events a session has due at
once, and the carrier simulator a tick's messages of one call (a mark echo and the next caller frame),
so they frame them here. Everything else on the socket (upgrade, control frames, close, parsing)
stays picows'.

Must not know: sockets, Twilio, the rings.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from websockets.frames import apply_mask

_FIN_TEXT = 0x81  # FIN + opcode 0x1 (text)
_FIN_BINARY = 0x82  # FIN + opcode 0x2 (binary)
_MASKED = 0x80  # the MASK bit of the second header byte
_MASK_KEY_BYTES = 4


def text_frame_header(length: int, masked: bool = False) -> bytes:
    """The 2-, 4- or 10-byte header of a final text frame carrying ``length`` payload bytes (without
    the masking key that follows it when ``masked``)."""
    if length < 0:
        raise ValueError("length must be >= 0")
    mask_bit = _MASKED if masked else 0
    if length < 126:
        return bytes((_FIN_TEXT, mask_bit | length))
    if length < 1 << 16:
        return bytes((_FIN_TEXT, mask_bit | 126)) + length.to_bytes(2, "big")
    return bytes((_FIN_TEXT, mask_bit | 127)) + length.to_bytes(8, "big")


def binary_frames(messages: Iterable[bytes]) -> bytes:
    """Each message as one unmasked final binary frame, concatenated (a carrier whose wire templates ask
    for binary frames: voicecore/carriers/wire.py)."""
    parts: list[bytes] = []
    for message in messages:
        header = text_frame_header(len(message))
        parts.append(bytes((_FIN_BINARY,)) + header[1:])
        parts.append(message)
    return b"".join(parts)


def text_frames(messages: Iterable[bytes]) -> bytes:
    """Each message (UTF-8 text, already valid) as one unmasked final text frame, concatenated."""
    parts: list[bytes] = []
    for message in messages:
        parts.append(text_frame_header(len(message)))
        parts.append(message)
    return b"".join(parts)


def masked_text_frames(messages: Sequence[bytes]) -> bytes:
    """Each message (UTF-8 text, already valid) as one masked final text frame, as a client sends it,
    concatenated. The keys come from os.urandom (one read for the batch)."""
    keys = os.urandom(_MASK_KEY_BYTES * len(messages))
    parts: list[bytes] = []
    for index, message in enumerate(messages):
        key = keys[index * _MASK_KEY_BYTES:(index + 1) * _MASK_KEY_BYTES]
        parts.append(text_frame_header(len(message), masked=True))
        parts.append(key)
        parts.append(apply_mask(message, key))
    return b"".join(parts)
