"""Keep-alive connections for webhooks (voicecore/http_client.py ConnectionPool) against real loopback
servers: the fake tool API (voicecore/sim/tool_server.py) and small raw servers that misbehave the way
real ones do (close after each answer, close a kept connection just as it is used)."""

from __future__ import annotations

import asyncio
import json

import pytest

from voicecore import http_client
from voicecore.agent.spec import FunctionSpec, Webhook
from voicecore.agent.tools import ToolContext, run_tool
from voicecore.sim.tool_server import Route, ToolServer

ARGUMENTS = '{"service": "cleaning"}'
PARAMETERS = {"type": "object", "properties": {"service": {"type": "string"}}}


def run(coroutine):
    return asyncio.run(coroutine)


def test_requests_to_one_origin_share_one_connection():
    async def body():
        async with ToolServer([Route("POST", "/book", body={"booked": True}), Route("GET", "/slots", body=[1])]) as server:
            pool = http_client.ConnectionPool()
            try:
                answers = [await pool.send("POST", f"{server.base_url}/book", body=b"{}") for _ in range(3)]
                answers.append(await pool.send("GET", f"{server.base_url}/slots"))
                return answers, server.connections, pool.stats, len(server.requests)
            finally:
                await pool.close()

    answers, connections, stats, requests = run(body())
    assert answers == [(200, b'{"booked":true}')] * 3 + [(200, b"[1]")]
    assert connections == 1 and requests == 4
    assert (stats.requests, stats.connections_opened, stats.reused) == (4, 1, 3)


def test_concurrent_requests_open_what_they_need_and_keep_them_for_later():
    async def body():
        async with ToolServer([Route("POST", "/book", delay_ms=200)]) as server:
            pool = http_client.ConnectionPool()
            try:
                await asyncio.gather(*(pool.send("POST", f"{server.base_url}/book") for _ in range(3)))
                opened = server.connections
                await asyncio.gather(*(pool.send("POST", f"{server.base_url}/book") for _ in range(3)))
                return opened, server.connections, pool.idle_connections()
            finally:
                await pool.close()

    opened, total, idle = run(body())
    assert opened == 3 and total == 3 and idle == 3


def test_a_webhook_tool_reuses_the_workers_connection():
    function = FunctionSpec("book", "Book.", PARAMETERS, tool=Webhook("${API}/book", "POST", (), 2.0, 1))
    context = ToolContext("CA1", "book", "k" * 24)

    async def body():
        async with ToolServer([Route("POST", "/book", body={"booked": True})]) as server:
            pool = http_client.ConnectionPool()
            try:
                results = [await run_tool(function, ARGUMENTS, context, {"API": server.base_url}, http=pool)
                           for _ in range(3)]
                return results, server.connections, [r.headers.get("connection") for r in server.requests]
            finally:
                await pool.close()

    results, connections, connection_headers = run(body())
    assert all(r.ok and json.loads(r.output) == {"booked": True} for r in results)
    assert connections == 1 and connection_headers == [None] * 3  # no "Connection: close" any more


async def raw_server(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    return head + (await reader.readexactly(length) if length else b"")


OK_KEEP_ALIVE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def test_a_server_that_says_close_gets_a_new_connection_each_time():
    accepted = []

    async def handler(reader, writer):
        accepted.append(1)
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()

    async def body():
        server, base = await raw_server(handler)
        pool = http_client.ConnectionPool()
        try:
            return [await pool.send("GET", f"{base}/x") for _ in range(3)], pool.idle_connections()
        finally:
            await pool.close()
            server.close()
            await server.wait_closed()

    answers, idle = run(body())
    assert answers == [(200, b"{}")] * 3 and len(accepted) == 3 and idle == 0


def test_a_kept_connection_the_server_closes_as_it_is_used_is_retried_once_on_a_new_one():
    accepted = []

    async def handler(reader, writer):
        accepted.append(1)
        await read_request(reader)
        writer.write(OK_KEEP_ALIVE)
        await writer.drain()
        if len(accepted) == 1:
            await read_request(reader)  # the second request arrives on the kept connection ...
        writer.close()  # ... and the server closes it unanswered (its idle timeout ran out just then)

    async def body():
        server, base = await raw_server(handler)
        pool = http_client.ConnectionPool()
        try:
            first = await pool.send("POST", f"{base}/x", body=b"{}")
            second = await pool.send("POST", f"{base}/x", body=b"{}")
            return first, second, pool.stats
        finally:
            await pool.close()
            server.close()
            await server.wait_closed()

    first, second, stats = run(body())
    assert first == second == (200, b"{}")
    assert len(accepted) == 2 and stats.stale_retries == 1


def test_a_new_connection_that_fails_is_not_retried_by_the_pool():
    async def handler(reader, writer):
        await read_request(reader)
        writer.close()

    async def body():
        server, base = await raw_server(handler)
        pool = http_client.ConnectionPool()
        try:
            with pytest.raises(Exception) as caught:
                await pool.send("POST", f"{base}/x", body=b"{}")
            return caught.value, pool.stats
        finally:
            await pool.close()
            server.close()
            await server.wait_closed()

    error, stats = run(body())
    assert stats.stale_retries == 0 and stats.connections_opened == 1


def test_a_timed_out_exchange_closes_its_connection_and_an_idle_one_expires():
    async def body():
        async with ToolServer([Route("GET", "/slow", delay_ms=500), Route("GET", "/fast")]) as server:
            pool = http_client.ConnectionPool(idle_timeout_s=0.2)
            try:
                with pytest.raises(TimeoutError):
                    await pool.send("GET", f"{server.base_url}/slow", timeout_s=0.1)
                assert pool.idle_connections() == 0  # half an exchange is never reused
                await pool.send("GET", f"{server.base_url}/fast")
                assert pool.idle_connections() == 1
                await asyncio.sleep(0.3)
                await pool.send("GET", f"{server.base_url}/fast")  # the idle one expired: a new one
                return server.connections
            finally:
                await pool.close()

    assert run(body()) == 3
