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
               unix_socket: str | None = None, proxy: str | None = None,
               max_response_bytes: int = MAX_RESPONSE_BYTES) -> tuple[int, bytes]:
    """Send one request; returns (status, body). Raises OSError, TimeoutError or h11's errors.

    ``unix_socket``: connect to this Unix socket instead of the URL's host and port (curl's
    --unix-socket); the URL still gives the Host header and the request target. The socket is a TLS
    proxy's backend, so the request goes in plain HTTP whatever the URL's scheme. ``proxy``: an http://
    proxy (http://[user:password@]host:port): https goes through a CONNECT tunnel, http as an absolute URL.
    """
    return await asyncio.wait_for(_send(method, url, headers, body, user_agent, unix_socket, proxy,
                                        max_response_bytes), timeout_s)


async def _open_via_proxy(proxy: str, host: str, port: int, secure: bool
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``host:port`` through an HTTP proxy: a CONNECT tunnel (TLS inside it for https),
    or the proxy itself for plain http (the request then names the absolute URL)."""
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http:// proxies are supported here, got {proxy!r}")
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
    if not secure:
        return reader, writer
    auth = []
    if parts.username:
        import base64

        token = base64.b64encode(f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
                                 .encode()).decode()
        auth = [f"Proxy-Authorization: Basic {token}"]
    writer.write("\r\n".join([f"CONNECT {host}:{port} HTTP/1.1", f"Host: {host}:{port}", *auth, "", ""]).encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    first_line = head.split(b"\r\n", 1)[0]
    status_line = first_line.split()
    if len(status_line) < 2 or status_line[1] != b"200":
        writer.close()
        raise OSError(f"the proxy refused the tunnel: {first_line.decode(errors='replace')}")
    await writer.start_tls(ssl.create_default_context(), server_hostname=host)
    return reader, writer


async def _send(method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes, user_agent: str,
                unix_socket: str | None, proxy: str | None = None,
                max_response_bytes: int = MAX_RESPONSE_BYTES) -> tuple[int, bytes]:
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
    elif proxy:
        reader, writer = await _open_via_proxy(proxy, parts.hostname, port, secure)
        if not secure:
            target = urllib.parse.urlunsplit(parts._replace(fragment=""))  # absolute-form, for the proxy
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
                if size > max_response_bytes:
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
