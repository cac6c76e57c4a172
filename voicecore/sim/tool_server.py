"""A fake of the agent builder's HTTP API, for the demo (`voicecore demo --agent`) and the tests.

Owns a small HTTP/1.1 server on 127.0.0.1 (asyncio streams and h11, as voicecore/http_client.py is on
the client side: we never parse HTTP by hand) that answers each request from a table of ``Route``s and
keeps what it received (``requests``, ``counts``) so a test or the demo's report can say what the
agent's tools really sent. It stands in for a server outside this machine; nothing in the stack imports
it. Bounded: a request body beyond 64 KB is answered 413 and not kept; an unknown path gets a 404, a
known path with another method a 405, both as JSON.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import h11

MAX_REQUEST_BODY_BYTES = 64 * 1024
MAX_DISCARD_BYTES = 1024 * 1024  # an oversized body is read and dropped up to this, then the connection closes
MAX_HEADER_BYTES = 16 * 1024
READ_BYTES = 65536
_DEFAULT_BODY: Any = {"ok": True}


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """How the server answers ``method`` ``path`` (the path without its query string).

    ``body`` is sent as JSON (None: an empty body); ``raw_body`` instead is sent as is, as text/plain
    (a server that answers something that is not JSON). ``times`` > 0: this route answers only that many
    requests, then the next route for the same method and path does (a 503 first, then a success)."""

    method: str
    path: str
    status: int = 200
    body: Any = dataclasses.field(default_factory=lambda: dict(_DEFAULT_BODY))
    delay_ms: int = 0
    raw_body: str | None = None
    times: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Route:
        """A route from a demo.toml ``[tool_server] routes`` entry; unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown route keys {unknown}; known: {sorted(names)}")
        if "method" not in data or "path" not in data:
            raise ValueError("a route needs a method and a path")
        return cls(**{**data, "method": str(data["method"]).upper()})


@dataclasses.dataclass(frozen=True, slots=True)
class ToolRequest:
    method: str
    path: str
    query: dict[str, str]  # the last value of each name
    headers: dict[str, str]  # names lower-case
    json: Any  # the body as JSON; None when it is empty, not JSON or too large
    received_ms: float  # since the server started
    body: bytes = b""  # as received (empty when too large)
    status: int = 0  # what the server answered


class ToolServer:
    """Start with ``await start()`` (returns the base URL), stop with ``await stop()``; or ``async with``."""

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self.routes: list[Route] = list(routes)
        self.requests: list[ToolRequest] = []
        self.counts: dict[tuple[str, str], int] = {}  # (method, path) -> requests a route answered
        self.connections = 0  # TCP connections accepted (a client that keeps them alive opens few)
        self.base_url = ""
        self._used: dict[int, int] = {}  # route index -> requests it answered (routes with ``times``)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._started = 0.0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._started = time.monotonic()
        self._server = await asyncio.start_server(self._serve, host, port)
        bound_port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://{host}:{bound_port}"
        return self.base_url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()  # a delayed answer still pending
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ToolServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def count(self, method: str, path: str) -> int:
        """Requests with this method and path that reached the server, whatever it answered."""
        return sum(1 for r in self.requests if r.method == method.upper() and r.path == path)

    # -- routing (no I/O) ----------------------------------------------------------------------------

    def _route_for(self, method: str, path: str) -> tuple[int, Route | None]:
        """(the route's index, route), or (404 / 405, None)."""
        same_path = [(i, r) for i, r in enumerate(self.routes) if r.path == path]
        if not same_path:
            return 404, None
        for index, route in same_path:
            if route.method.upper() == method and (route.times <= 0 or self._used.get(index, 0) < route.times):
                return index, route
        return 405, None

    def _answer(self, method: str, path: str) -> tuple[int, bytes, str, int]:
        """(status, body, content type, delay ms) for a request that arrived whole."""
        index, route = self._route_for(method, path)
        if route is None:
            message = "no such route" if index == 404 else "method not allowed"
            return index, _json_bytes({"error": message, "method": method, "path": path}), "application/json", 0
        self._used[index] = self._used.get(index, 0) + 1
        self.counts[(route.method.upper(), route.path)] = self.counts.get((route.method.upper(), route.path), 0) + 1
        if route.raw_body is not None:
            return route.status, route.raw_body.encode("utf-8"), "text/plain; charset=utf-8", route.delay_ms
        body = b"" if route.body is None or route.status in (204, 304) else _json_bytes(route.body)
        return route.status, body, "application/json", route.delay_ms

    # -- the connection ------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._exchange(reader, writer)
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass  # the client went away or spoke garbage: nothing more to answer on this connection
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        request: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                if connection.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await _send(writer, connection, exc.error_status_hint, _json_bytes({"error": "bad request"}),
                                "application/json")
                return
            if event is h11.NEED_DATA:
                connection.receive_data(await reader.read(READ_BYTES))
            elif isinstance(event, h11.Request):
                request, chunks, size = event, [], 0
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size <= MAX_REQUEST_BODY_BYTES:
                    chunks.append(bytes(event.data))
                elif size > MAX_DISCARD_BYTES:
                    self._record(request, b"", 413)
                    await _send(writer, connection, 413, _json_bytes({"error": "request body too large"}),
                                "application/json")
                    return
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                await self._respond(writer, connection, request, b"".join(chunks), size)
                if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                    return
                connection.start_next_cycle()
                request = None
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return

    async def _respond(self, writer: asyncio.StreamWriter, connection: h11.Connection, request: h11.Request,
                       body: bytes, size: int) -> None:
        method = request.method.decode("ascii", "replace").upper()
        if size > MAX_REQUEST_BODY_BYTES:
            self._record(request, b"", 413)
            await _send(writer, connection, 413, _json_bytes({"error": "request body too large"}), "application/json")
            return
        path = urllib.parse.urlsplit(request.target.decode("ascii", "replace")).path
        status, answer, content_type, delay_ms = self._answer(method, path)
        self._record(request, body, status)
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        await _send(writer, connection, status, answer, content_type)

    def _record(self, request: h11.Request | None, body: bytes, status: int) -> None:
        if request is None:
            return
        target = urllib.parse.urlsplit(request.target.decode("ascii", "replace"))
        try:
            parsed = json.loads(body) if body.strip() else None
        except ValueError:
            parsed = None
        self.requests.append(ToolRequest(
            method=request.method.decode("ascii", "replace").upper(),
            path=target.path,
            query=dict(urllib.parse.parse_qsl(target.query, keep_blank_values=True)),
            headers={name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.headers},
            json=parsed,
            received_ms=(time.monotonic() - self._started) * 1000,
            body=body,
            status=status,
        ))


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def _send(writer: asyncio.StreamWriter, connection: h11.Connection, status: int, body: bytes,
                content_type: str) -> None:
    # RFC 9110 8.6: no Content-Length on a 1xx or 204; h11 frames those as bodiless
    headers = [] if status < 200 or status == 204 else [("Content-Length", str(len(body)))]
    if body:
        headers.append(("Content-Type", content_type))
    writer.write(connection.send(h11.Response(status_code=status, headers=headers)))
    if body:
        writer.write(connection.send(h11.Data(data=body)))
    writer.write(connection.send(h11.EndOfMessage()))
    await writer.drain()
