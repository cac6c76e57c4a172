"""A small HTTP/1.1 client over asyncio streams and h11, http or https.

Owns only the exchange of requests and their answers; what is sent (webhooks by the carrier simulator,
REST calls to Twilio by the model worker, an agent's webhook tools) is built by its callers. h11 does the
protocol, including whether a connection may carry another request; we never parse HTTP by hand.

Two ways to send: ``send`` opens a connection for one request and closes it (a rare request: a
health check, a hang-up); a ``ConnectionPool`` keeps connections open per origin and reuses them
(keep-alive), so a busy tool API costs one TCP and TLS handshake per connection, not per request.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import ssl
import time
import urllib.parse
from collections.abc import Sequence

import h11

DEFAULT_TIMEOUT_S = 5.0
MAX_RESPONSE_BYTES = 1024 * 1024
# How long a pooled connection may sit idle before it is closed instead of reused. Servers close idle
# keep-alive connections after 5-75 s; a connection the server closed meanwhile is noticed (EOF) and
# skipped, and a reused one that fails before any answer is retried once on a new connection.
IDLE_TIMEOUT_S = 15.0
MAX_IDLE_PER_ORIGIN = 16  # idle connections kept per origin; more are closed when they come back
READ_BYTES = 65536

Origin = tuple[str, str, int]  # (scheme, host, port)


async def send(method: str, url: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b"",
               timeout_s: float = DEFAULT_TIMEOUT_S, user_agent: str = "voicecore",
               unix_socket: str | None = None, proxy: str | None = None,
               max_response_bytes: int = MAX_RESPONSE_BYTES) -> tuple[int, bytes]:
    """Send one request on a connection of its own; returns (status, body). Raises OSError,
    TimeoutError or h11's errors (ValueError for a URL that is not http(s), or a body past its cap).

    ``unix_socket``: connect to this Unix socket instead of the URL's host and port (curl's
    --unix-socket); the URL still gives the Host header and the request target. The socket is a TLS
    proxy's backend, so the request goes in plain HTTP whatever the URL's scheme. ``proxy``: an http://
    proxy (http://[user:password@]host:port): https goes through a CONNECT tunnel, http as an absolute URL.
    """
    return await asyncio.wait_for(_send_once(method, url, headers, body, user_agent, unix_socket, proxy,
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




def _split(url: str) -> tuple[urllib.parse.SplitResult, Origin, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"only http:// and https:// URLs are supported, got {parts.scheme!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts, (parts.scheme, parts.hostname, port), target


def _request_headers(netloc: str, headers: Sequence[tuple[str, str]], body: bytes, user_agent: str,
                     close: bool) -> list[tuple[str, str]]:
    names = {name.lower() for name, _ in headers}
    request_headers = [("Host", netloc), ("Content-Length", str(len(body)))]
    if close:
        request_headers.append(("Connection", "close"))
    if "user-agent" not in names:
        request_headers.append(("User-Agent", user_agent))
    request_headers.extend(headers)
    return request_headers


async def _send_once(method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes, user_agent: str,
                     unix_socket: str | None, proxy: str | None = None,
                     max_response_bytes: int = MAX_RESPONSE_BYTES) -> tuple[int, bytes]:
    parts, (scheme, host, port), target = _split(url)
    secure = scheme == "https"
    if unix_socket is not None:
        reader, writer = await asyncio.open_unix_connection(unix_socket)
    elif proxy:
        reader, writer = await _open_via_proxy(proxy, host, port, secure)
        if not secure:
            target = urllib.parse.urlunsplit(parts._replace(fragment=""))  # absolute-form, for the proxy
    else:
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl.create_default_context() if secure else None)
    try:
        connection = h11.Connection(h11.CLIENT)
        request = h11.Request(method=method, target=target,
                              headers=_request_headers(parts.netloc, headers, body, user_agent, close=True))
        status, answer, _ = await _exchange(reader, writer, connection, request, body,
                                            max_response_bytes=max_response_bytes)
        return status, answer
    finally:
        await _close(writer)


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: h11.Connection,
                    request: h11.Request, body: bytes, progress: list[bool] | None = None,
                    max_response_bytes: int = MAX_RESPONSE_BYTES) -> tuple[int, bytes, bool]:
    """One request and its whole answer on ``connection``: (status, body, whether any of the answer came).
    ``progress``: set to [True] as soon as a byte of the answer arrived (a caller deciding on a retry
    reads it when this raises)."""
    writer.write(connection.send(request))
    writer.write(connection.send(h11.Data(data=body)))
    writer.write(connection.send(h11.EndOfMessage()))
    await writer.drain()
    status = 0
    chunks: list[bytes] = []
    size = 0
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(READ_BYTES)
            if data and progress is not None:
                progress[0] = True
            connection.receive_data(data)
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > max_response_bytes:
                raise ValueError("response body too large")
            chunks.append(bytes(event.data))
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return status, b"".join(chunks), isinstance(event, h11.EndOfMessage)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass


@dataclasses.dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    protocol: h11.Connection
    idle_since: float = 0.0

    def usable(self, now: float, idle_timeout_s: float) -> bool:
        """Idle, not expired, and the server has not closed it (nor sent anything unasked)."""
        return (now - self.idle_since < idle_timeout_s and not self.reader.at_eof()
                and not self.writer.is_closing() and self.protocol.our_state is h11.IDLE)


@dataclasses.dataclass(slots=True)
class PoolStats:
    requests: int = 0
    connections_opened: int = 0
    reused: int = 0  # requests sent on a connection an earlier request had used
    stale_retries: int = 0  # a reused connection failed before any answer: sent again on a new one


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections per origin (scheme, host, port), for the event loop that uses it.

    ``send`` takes an idle connection to the URL's origin (or opens one), sends the request and, when
    both sides allow another request on it (h11's states: no ``Connection: close``, the answer read to
    its end), puts it back. A connection that failed, timed out or was cancelled mid-exchange is closed,
    never reused. The TLS context is made once per pool. ``close`` closes every idle connection; those
    in use are closed by their request when it ends."""

    def __init__(self, user_agent: str = "voicecore", idle_timeout_s: float = IDLE_TIMEOUT_S,
                 max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN) -> None:
        self.user_agent = user_agent
        self.idle_timeout_s = idle_timeout_s
        self.max_idle_per_origin = max_idle_per_origin
        self.stats = PoolStats()
        self._idle: dict[Origin, collections.deque[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    def idle_connections(self) -> int:
        return sum(len(q) for q in self._idle.values())

    async def send(self, method: str, url: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b"",
                   timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, bytes]:
        """Send one request; returns (status, body). Raises as ``send`` does (TimeoutError after
        ``timeout_s`` for the whole exchange, connecting included)."""
        async with asyncio.timeout(timeout_s):
            return await self._send(method, url, headers, body)

    async def _send(self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes) -> tuple[int, bytes]:
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        parts, origin, target = _split(url)
        request_headers = _request_headers(parts.netloc, headers, body, self.user_agent, close=False)
        self.stats.requests += 1
        self._drop_expired()
        while True:
            connection = self._take_idle(origin)
            reused = connection is not None
            if connection is None:
                connection = await self._open(origin)
            else:
                self.stats.reused += 1
            progress = [False]
            done = False
            try:
                request = h11.Request(method=method, target=target, headers=request_headers)
                status, answer, whole = await _exchange(connection.reader, connection.writer, connection.protocol, request,
                                                        body, progress)
                if reused and not whole and not progress[0]:
                    raise ConnectionResetError("the server closed the connection")
                done = True
            except (OSError, h11.RemoteProtocolError):
                if reused and not progress[0]:
                    # A kept connection the server closed as we sent: nothing of ours was answered. Once more
                    # on a new connection (the request carries its idempotency key, if it has one).
                    self.stats.stale_retries += 1
                    continue
                raise
            finally:
                if not done:
                    await _close(connection.writer)
            await self._release(origin, connection)
            return status, answer

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to have been closed by the server
            if connection.usable(now, self.idle_timeout_s):
                return connection
            connection.writer.close()
        return None

    async def _open(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        self.stats.connections_opened += 1
        return _Connection(reader, writer, h11.Connection(h11.CLIENT))

    async def _release(self, origin: Origin, connection: _Connection) -> None:
        state = connection.protocol
        if self._closed or state.our_state is not h11.DONE or state.their_state is not h11.DONE:
            await _close(connection.writer)  # the server said close, or the answer was not read to its end
            return
        state.start_next_cycle()
        idle = self._idle.setdefault(origin, collections.deque())
        if len(idle) >= self.max_idle_per_origin:
            await _close(connection.writer)
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)

    def _drop_expired(self) -> None:
        """Close idle connections past their time (an origin not asked again would keep them open)."""
        now = time.monotonic()
        for origin in list(self._idle):
            keep: collections.deque[_Connection] = collections.deque()
            for connection in self._idle[origin]:
                if connection.usable(now, self.idle_timeout_s):
                    keep.append(connection)
                else:
                    connection.writer.close()
            if keep:
                self._idle[origin] = keep
            else:
                del self._idle[origin]

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await _close(connection.writer)
