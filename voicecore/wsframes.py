"""WebSocket text (or binary) frames for a batch of messages, as one bytes object (one write system call).

Owns only RFC 6455 section 5.2 base framing for the two cases that send batches: unfragmented (FIN set)
text frames (opcode 0x1) with no extension bits, unmasked from a server (5.3: a server never masks) and
masked from a client (5.3: a client always masks, with a fresh unpredictable key per frame; the XOR is
websockets' C ``apply_mask``). picows frames and sends one message per call, and each send is a write
system call; the gateway sends every message the pacer released for a call since the last doorbell
(media frames and their marks) in one write, the model simulator the events a session has due at
once, and the carrier simulator a tick's messages of one call (a mark echo and the next caller frame),
so they frame them here. The carrier simulator frames its single messages here too: the masking keys
come from a pool read from os.urandom in bulk (_MaskKeys), not one getrandom system call per frame.
Everything else on the socket (upgrade, control frames, close, parsing) stays picows'.

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
# Masking keys are read from the OS's random source this many at a time: one getrandom system call per
# frame cost a busy client (the carrier simulator, one frame per call every 20 ms) more than the framing.
_KEYS_PER_READ = 1024


class _MaskKeys:
    """Fresh 4-byte masking keys from os.urandom, read in bulk. Each key is used once; a forked child
    starts with an empty pool, so parent and child never share keys."""

    __slots__ = ("_pool", "_offset")

    def __init__(self) -> None:
        self._pool = b""
        self._offset = 0

    def reset(self) -> None:
        self._pool = b""
        self._offset = 0

    def take(self, count: int) -> bytes:
        """``count`` keys, concatenated."""
        size = _MASK_KEY_BYTES * count
        offset = self._offset
        if offset + size > len(self._pool):
            self._pool = os.urandom(max(size, _MASK_KEY_BYTES * _KEYS_PER_READ))
            offset = 0
        self._offset = offset + size
        return self._pool[offset:offset + size]


_mask_keys = _MaskKeys()
os.register_at_fork(after_in_child=_mask_keys.reset)


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
    concatenated. The keys come from os.urandom, read in bulk (_MaskKeys)."""
    count = len(messages)
    if count == 1:
        return masked_text_frame(messages[0])
    keys = _mask_keys.take(count)
    parts: list[bytes] = []
    append = parts.append
    offset = 0
    for message in messages:
        key = keys[offset:offset + _MASK_KEY_BYTES]
        offset += _MASK_KEY_BYTES
        length = len(message)
        # The header inline (text_frame_header's): this runs for every frame the carrier simulator sends.
        if length < 126:
            append(_SHORT_MASKED_HEADERS[length])
        elif length < 1 << 16:
            append(_MEDIUM_MASKED_HEADER + length.to_bytes(2, "big"))
        else:
            append(text_frame_header(length, masked=True))
        append(key)
        append(apply_mask(message, key))
    return b"".join(parts)


def masked_text_frame(message: bytes) -> bytes:
    """One masked final text frame, as a client sends it (masked_text_frames of one message)."""
    key = _mask_keys.take(1)
    length = len(message)
    if length < 126:
        header = _SHORT_MASKED_HEADERS[length]
    elif length < 1 << 16:
        header = _MEDIUM_MASKED_HEADER + length.to_bytes(2, "big")
    else:
        header = text_frame_header(length, masked=True)
    return header + key + apply_mask(message, key)


_SHORT_MASKED_HEADERS = tuple(bytes((_FIN_TEXT, _MASKED | length)) for length in range(126))
_MEDIUM_MASKED_HEADER = bytes((_FIN_TEXT, _MASKED | 126))
