"""Request bodies on the console's port: the HTTP/1.1 request reader the console's server uses instead of
websockets', which refuses any request with a body.

Owns how a request's body is taken: only with a ``Content-Length`` (a request with ``Transfer-Encoding``, i.e.
chunked, is answered 411 and its body not read), read whole before the request is routed, at most ``max_body``
bytes. A larger one is answered 413: its body is read and dropped when it is at most DRAIN_BYTES (so the client,
still sending, reads the answer instead of a reset), else the connection is closed after the answer. A bad
``Content-Length`` is 400. The reader only reads and records; the console's routes answer
(``BodyRequest.refusal``), so the answer is the console's JSON with its headers, and one request's trouble
ends its own connection, nothing else.

The reader is a generator over websockets' stream reader (sans-I/O): ``read_request`` is fed bytes by
whoever owns the socket. ``body_reading`` puts it under an asyncio server made by websockets' ``serve``.
"""

from __future__ import annotations

import dataclasses
import http
from collections.abc import Generator
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import InvalidMessage
from websockets.http11 import Request, parse_headers, parse_line
from websockets.exceptions import SecurityError
from websockets.protocol import CONNECTING, Protocol
from websockets.server import ServerProtocol
from websockets.streams import StreamReader

MAX_BODY_BYTES = 16 * 1024  # the console's bodies are short JSON (a chat message is at most 2000 characters)
# ...except at these paths: a campaign file (POST /api/campaigns) is about 40 bytes a callee
LARGER_BODIES = {"/api/campaigns": 8 << 20}
DRAIN_BYTES = 1 << 20  # a too-large body up to this is read and dropped, so its sender sees the 413


class RequestLineTooLong(SecurityError):
    pass


class HeadersTooLarge(SecurityError):
    pass


@dataclasses.dataclass
class BodyRequest(Request):
    """A request and its body. ``content_length``: None when the request had no Content-Length.
    ``refusal``: (status, why) when the body could not be taken; the route answers it."""

    body: bytes = b""
    content_length: int | None = None
    refusal: tuple[int, str] | None = None


def read_request(reader: StreamReader, max_body: int = MAX_BODY_BYTES,
                 larger: dict[str, int] | None = None) -> Generator[None, None, BodyRequest]:
    """One request from ``reader``: its line, its headers, and its body as the module docstring says
    (``larger``: path -> the most its bodies may hold instead of ``max_body``).
    Raises as websockets' reader does for what is not HTTP (ValueError, EOFError) and for what is too long
    (RequestLineTooLong, HeadersTooLarge)."""
    line = yield from parse_line(reader.read_line, RequestLineTooLong)
    try:
        raw_method, raw_path, raw_protocol = line.split(b" ", 2)
    except ValueError:
        raise ValueError(f"invalid HTTP request line: {bytes(line[:100])!r}") from None
    if raw_protocol not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise ValueError(f"unsupported protocol: {bytes(raw_protocol[:20])!r}")
    try:
        headers = yield from parse_headers(reader.read_line)
    except SecurityError as exc:  # a header line too long, too many headers
        raise HeadersTooLarge(str(exc)) from exc
    request = BodyRequest(raw_path.decode("ascii"), headers, raw_method.decode("ascii"), raw_protocol.decode("ascii"))
    if "Transfer-Encoding" in headers:
        request.refusal = (411, "send the body with a Content-Length (a chunked or other Transfer-Encoding is not taken)")
        return request
    lengths = set(headers.get_all("Content-Length"))
    if not lengths:
        return request
    value = lengths.pop()
    if lengths or not value.isascii() or not value.isdigit() or len(value) > 18:
        request.refusal = (400, "Content-Length: expected one whole number of bytes")
        return request
    length = request.content_length = int(value)
    max_body = (larger or {}).get(request.path.split("?", 1)[0], max_body)
    if length > max_body:
        request.refusal = (413, f"the body is {length} bytes; at most {max_body} are taken")
        if length <= DRAIN_BYTES:
            while length:
                length -= len((yield from reader.read_exact(min(length, 64 * 1024))))
        return request
    request.body = bytes((yield from reader.read_exact(length)))
    return request


class BodyServerProtocol(ServerProtocol):
    """websockets' server protocol reading requests with ``read_request`` (the rest of the handshake, and
    the WebSocket after it, are websockets' own)."""

    max_body: int = MAX_BODY_BYTES

    def parse(self) -> Generator[None]:
        if self.state is CONNECTING:
            try:
                request = yield from read_request(self.reader, self.max_body, LARGER_BODIES)
            except (RequestLineTooLong, HeadersTooLarge) as exc:
                self.handshake_exc = exc
                status = http.HTTPStatus.REQUEST_URI_TOO_LONG if isinstance(exc, RequestLineTooLong) \
                    else http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
                self.send_response(self.reject(status, f"{exc}\n"))
                yield  # send_response put the discarding parser in this one's place: never resumed
            except Exception as exc:  # not HTTP, or the peer left mid-request: as websockets does, close
                self.handshake_exc = InvalidMessage("did not receive a valid HTTP request")
                self.handshake_exc.__cause__ = exc
                self.send_eof()
                self.parser = self.discard()
                next(self.parser)
                yield
            self.events.append(request)
            if request.method != "GET" or request.refusal is not None:
                # not an upgrade: no WebSocket frames follow, and the answer closes the connection; a body left
                # unread (a refusal's) must not be taken for frames, which would close it before the answer
                while True:
                    self.reader.discard()
                    yield
        yield from Protocol.parse(self)


def body_reading(max_body: int = MAX_BODY_BYTES) -> type[ServerConnection]:
    """A ``create_connection`` for websockets' ``serve`` whose connections read request bodies: ``serve``
    builds a ServerProtocol itself and has no hook for its class, so the connection gives it ours before a
    byte has come (its parser, waiting for the first line, starts again as ours)."""

    class BodyConnection(ServerConnection):
        def __init__(self, protocol: ServerProtocol, *args: Any, **kwargs: Any) -> None:
            protocol.__class__ = BodyServerProtocol
            protocol.max_body = max_body
            protocol.parser = protocol.parse()
            next(protocol.parser)
            super().__init__(protocol, *args, **kwargs)

    return BodyConnection
