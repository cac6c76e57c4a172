"""picows WebSocket connections over Unix sockets, for a gateway behind a TLS proxy on the same host.

picows 2.3 sets TCP_NODELAY and TCP_QUICKACK on every connection's socket (WSProtocol.connection_made)
and reads them back for its log line. A Unix socket refuses TCP options (EOPNOTSUPP), so a connection
would fail before its handshake. The options mean nothing there (no Nagle, no delayed ACKs), so the
wrappers here accept them as no-ops and pass everything else through to the real socket and transport.
"""

from __future__ import annotations

import asyncio
import socket


class _TcpOptionsIgnored:
    """setsockopt/getsockopt that accept TCP-level options as no-ops (0 when read) and pass the rest on."""

    __slots__ = ()

    def setsockopt(self, level, option, *value):
        if level == socket.IPPROTO_TCP:
            return None
        return self._real_setsockopt(level, option, *value)

    def getsockopt(self, level, option, *buflen):
        if level == socket.IPPROTO_TCP:
            return 0
        return self._real_getsockopt(level, option, *buflen)


class UnixStreamSocket(_TcpOptionsIgnored, socket.socket):
    """A client's Unix stream socket (picows' socket_factory) on which TCP options are no-ops."""

    _real_setsockopt = socket.socket.setsockopt
    _real_getsockopt = socket.socket.getsockopt


async def connect_unix_stream(path: str) -> UnixStreamSocket:
    """A connected, non-blocking Unix stream socket to ``path`` (a full backlog waits, not blocks)."""
    sock = UnixStreamSocket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, path)
    except BaseException:
        sock.close()
        raise
    return sock


class _UnixSocketView(_TcpOptionsIgnored):
    """A server transport's socket object as picows sees it: TCP options are no-ops."""

    __slots__ = ("_sock",)

    def __init__(self, sock) -> None:
        self._sock = sock

    def _real_setsockopt(self, level, option, *value):
        return self._sock.setsockopt(level, option, *value)

    def _real_getsockopt(self, level, option, *buflen):
        return self._sock.getsockopt(level, option, *buflen)

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


class UnixTransportView:
    """An accepted Unix-socket transport as handed to picows' WSProtocol.connection_made.

    picows binds write, writelines and get_write_buffer_size once per connection, so they are the real
    transport's bound methods here: no extra call per frame. Everything else is looked up on the real
    transport.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._socket = _UnixSocketView(transport.get_extra_info("socket"))
        self.write = transport.write
        self.writelines = transport.writelines
        self.get_write_buffer_size = transport.get_write_buffer_size

    def get_extra_info(self, name: str, default=None):
        if name == "socket":
            return self._socket
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

