"""Byte ranges and validators of a recording's response (RFC 9110 sections 13 and 14), pure.

Owns reading ``Range``, ``If-Range`` and ``If-None-Match`` against a body's size and entity tag. A browser's
audio element asks for ranges to seek (and to read the header first); a server that answers them with the
whole body makes the recording unseekable. One range is served as 206; several are answered with the whole
body (200), which RFC 9110 allows, as is ignoring a Range header that is not valid.
"""

from __future__ import annotations

import dataclasses
import hashlib


@dataclasses.dataclass(frozen=True, slots=True)
class ByteRange:
    first: int
    last: int  # inclusive

    @property
    def length(self) -> int:
        return self.last - self.first + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.first}-{self.last}/{size}"


UNSATISFIABLE = "unsatisfiable"  # a valid single range that selects nothing of the body: 416


def byte_range(header: str | None, size: int) -> ByteRange | str | None:
    """The one range ``header`` selects of a ``size``-byte body; ``UNSATISFIABLE`` (416); None to send the
    whole body (no header, another unit, several ranges, or a header that is not valid)."""
    if header is None:
        return None
    unit, sep, spec = header.strip().partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    specs = [part.strip() for part in spec.split(",")]
    if len(specs) != 1 or not specs[0]:
        return None  # several ranges (or an empty list): the whole body
    first_text, dash, last_text = specs[0].partition("-")
    first_text, last_text = first_text.strip(), last_text.strip()
    if not dash or not _digits(first_text, allow_empty=True) or not _digits(last_text, allow_empty=True):
        return None
    if not first_text:  # -N: the last N bytes
        if not last_text:
            return None
        suffix = int(last_text)
        if suffix == 0 or size == 0:
            return UNSATISFIABLE
        return ByteRange(max(0, size - suffix), size - 1)
    first = int(first_text)
    if last_text and int(last_text) < first:
        return None  # not valid: ignored
    if first >= size:
        return UNSATISFIABLE
    last = min(int(last_text), size - 1) if last_text else size - 1
    return ByteRange(first, last)


def _digits(text: str, allow_empty: bool) -> bool:
    return (allow_empty and text == "") or (text.isascii() and text.isdigit() and len(text) <= 19)


def entity_tag(body: bytes) -> str:
    """A strong entity tag of ``body`` (the same bytes, the same tag, across console restarts)."""
    return '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'


def _tags(header: str) -> list[str]:
    return [tag.strip() for tag in header.split(",") if tag.strip()]


def none_match(header: str | None, etag: str | None) -> bool:
    """``If-None-Match`` matches ``etag`` (weak comparison): the client's copy is current (304)."""
    if header is None or etag is None:
        return False
    tags = _tags(header)
    return "*" in tags or etag.removeprefix("W/") in (tag.removeprefix("W/") for tag in tags)


def range_applies(if_range: str | None, etag: str | None) -> bool:
    """``If-Range``: the range is served only while the body is the one the client holds part of (strong
    comparison; a date cannot be checked: the recording has no Last-Modified)."""
    if if_range is None:
        return True
    tag = if_range.strip()
    return etag is not None and not tag.startswith("W/") and tag == etag
