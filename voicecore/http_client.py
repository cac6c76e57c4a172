"""A small HTTP/1.1 client over asyncio streams and h11: one request per connection, http or https.

Owns only the exchange of one request and its answer; what is sent (webhooks by the carrier simulator,
REST calls to Twilio by the model worker) is built by its callers. h11 does the protocol; we never parse
HTTP by hand.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections.abc import Sequence

import h11

DEFAULT_TIMEOUT_S = 5.0
MAX_RESPONSE_BYTES = 1024 * 1024


async def send(method: str, url: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b"",
               timeout_s: float = DEFAULT_TIMEOUT_S, user_agent: str = "voicecore",
               unix_socket: str | None = None) -> tuple[int, bytes]:
    """Send one request; returns (status, body). Raises OSError, TimeoutError or h11's errors.

    ``unix_socket``: connect to this Unix socket instead of the URL's host and port (curl's
    --unix-socket); the URL still gives the Host header and the request target. The socket is a TLS
    proxy's backend, so the request goes in plain HTTP whatever the URL's scheme.
    """
    return await asyncio.wait_for(_send(method, url, headers, body, user_agent, unix_socket), timeout_s)


async def _send(method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes, user_agent: str,
                unix_socket: str | None) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"only http:// and https:// URLs are supported, got {parts.scheme!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    names = {name.lower() for name, _ in headers}
    request_headers = [("Host", parts.netloc), ("Connection", "close"), ("Content-Length", str(len(body)))]
    if "user-agent" not in names:
        request_headers.append(("User-Agent", user_agent))
    request_headers.extend(headers)
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    if unix_socket is not None:
        reader, writer = await asyncio.open_unix_connection(unix_socket)
    else:
        reader, writer = await asyncio.open_connection(parts.hostname, port, ssl=ssl.create_default_context() if secure else None)
    try:
        connection = h11.Connection(h11.CLIENT)
        writer.write(connection.send(h11.Request(method=method, target=target, headers=request_headers)))
        writer.write(connection.send(h11.Data(data=body)))
        writer.write(connection.send(h11.EndOfMessage()))
        await writer.drain()
        status = 0
        chunks: list[bytes] = []
        size = 0
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_RESPONSE_BYTES:
                    raise ValueError("response body too large")
                chunks.append(bytes(event.data))
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status, b"".join(chunks)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass
