"""The names of the marks we put behind our audio, and reading them back from their echoes.

Owns the naming rule, one place for its three users: the pacer writes the names (byte by byte, from
:data:`SEPARATOR` and :data:`END_SUFFIX`), the gateway parses the echoes to learn what the caller heard,
and the carrier simulator parses the marks it receives to tie frames to responses.

``"<tag>:<frames>"``: ``frames`` frames of response ``tag`` have been sent up to here (the pacer puts one
behind every group of frames). ``"<tag>:<frames>:end"``: the tag's audio stops here, for now (behind its last
frame, or where a hold stopped it). Twilio echoes a mark once the audio queued before it has played, or at
once for every pending mark when it clears its buffer (docs/explanation/protocols.md#a3); every other carrier's
mark (Telnyx/Exotel ``mark``, Plivo ``checkpoint``, Vonage ``notify``) carries the same name. Tags start at 1;
both numbers are ASCII decimal digits, so a name needs no escaping inside a JSON string.

Must not know: sockets, clocks, the JSON around a name (each carrier's stream module owns that).
"""

from __future__ import annotations

import re

__all__ = ["END_SUFFIX", "PLAIN_NAME_BYTES", "SEPARATOR", "format_mark_name", "parse_mark_name"]

SEPARATOR = ":"
END_SUFFIX = ":end"

# A name as the pacer writes it (its counters are int64: 18 digits is room enough), as UTF-8 bytes; any
# bytes this matches are also a JSON string body that needs no unescaping (the carrier's fast path).
# It admits tag 0, which parse_mark_name rejects: a match is a shape, not yet a name.
PLAIN_NAME_BYTES = re.compile(rb"[0-9]{1,18}:[0-9]{1,18}(?::end)?")


def format_mark_name(tag: int, frames: int, end: bool = False) -> str:
    """``"tag:frames"``, or ``"tag:frames:end"`` when ``end``. Our misuse (tag < 1, frames < 0) raises."""
    if tag < 1 or frames < 0:
        raise ValueError("a mark names a tag >= 1 and a frame count >= 0")
    return f"{tag}{SEPARATOR}{frames}{END_SUFFIX if end else ''}"


def parse_mark_name(name: str) -> tuple[int, int, bool] | None:
    """``"tag:frames"`` or ``"tag:frames:end"`` -> (tag, frames, end); None for any other name.

    An echo is the peer's data: a name we could not have sent (tag 0, signs, non-ASCII digits, another
    suffix) is None, never an exception.
    """
    parts = name.split(SEPARATOR)
    if len(parts) == 3:
        if SEPARATOR + parts[2] != END_SUFFIX:
            return None
    elif len(parts) != 2:
        return None
    tag_text, frames_text = parts[0], parts[1]
    # isascii() first: str.isdigit() also accepts other scripts' digits (and superscripts int() refuses).
    if not (tag_text.isascii() and tag_text.isdigit() and frames_text.isascii() and frames_text.isdigit()):
        return None
    tag = int(tag_text)
    if tag < 1:
        return None
    return tag, int(frames_text), len(parts) == 3
