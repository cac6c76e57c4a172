"""Running tools (voicecore/agent/tools.py) against a real loopback HTTP server (voicecore/sim/tool_server.py)
and real Python modules written to disk: what is sent, what is retried, what the model gets back."""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
import uuid

import pytest

from voicecore import http_client
from voicecore.agent import actions, tools
from voicecore.agent.spec import FunctionSpec, PythonTool, Webhook
from voicecore.agent.tool_pool import ToolPool
from voicecore.agent.tools import (
    MAX_OUTPUT_BYTES,
    ToolContext,
    ToolFailure,
    build_webhook_request,
    canonical_arguments,
    check_arguments,
    encode_result,
    idempotency_key,
    run_tool,
    webhook_outcome,
)
from voicecore.sim.tool_server import MAX_REQUEST_BODY_BYTES, Route, ToolServer

BOOK_PARAMETERS = {
    "type": "object",
    "properties": {"service": {"type": "string"}, "date": {"type": "string"}, "time": {"type": "string"},
                   "party": {"type": "integer", "minimum": 1}},
    "required": ["service", "date"],
    "additionalProperties": False,
}
BOOK_ARGUMENTS = '{"service": "cleaning", "date": "2026-11-26", "time": "10:00", "party": 2}'
ENV = {"BOOKING_TOKEN": "Bearer s3cret-token"}


CALL_SID = "CA" + "1" * 32


def context(name: str = "book", arguments: str = BOOK_ARGUMENTS) -> ToolContext:
    return ToolContext(CALL_SID, name, idempotency_key(CALL_SID, name, arguments))


def webhook_function(url: str, method: str = "POST", timeout_s: float = 2.0, retries: int = 1,
                     parameters: dict | None = None, headers=(("Authorization", "env:BOOKING_TOKEN"),)) -> FunctionSpec:
    return FunctionSpec("book", "Book an appointment.", parameters or BOOK_PARAMETERS,
                        tool=Webhook(url, method, tuple(headers), timeout_s, retries))


async def with_server(routes, body):
    """Run ``body(server, base_url)`` with a ToolServer up; returns what it returns."""
    async with ToolServer(routes) as server:
        return await body(server, server.base_url)


def run(coroutine):
    return asyncio.run(coroutine)


# -- webhooks ------------------------------------------------------------------------------------------


def test_post_sends_exactly_the_arguments_with_the_headers_and_returns_the_body():
    async def body(server, base):
        function = webhook_function("${API}/appointments")
        result = await run_tool(function, BOOK_ARGUMENTS, context(), {**ENV, "API": base})
        return server, result

    server, result = run(with_server([Route("POST", "/appointments", body={"booked": True, "reference": "B-1042"})], body))
    assert (result.ok, result.status, result.attempts) == (True, "ok", 1)
    assert json.loads(result.output) == {"booked": True, "reference": "B-1042"}
    assert result.output == '{"booked":true,"reference":"B-1042"}'  # compact
    [request] = server.requests
    assert (request.method, request.path, request.query) == ("POST", "/appointments", {})
    assert request.json == json.loads(BOOK_ARGUMENTS)
    assert request.headers["idempotency-key"] == idempotency_key(CALL_SID, "book", BOOK_ARGUMENTS)
    assert request.headers["x-voicecore-call"] == "CA" + "1" * 32
    assert request.headers["authorization"] == "Bearer s3cret-token"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept"] == "application/json"
    assert server.counts == {("POST", "/appointments"): 1}


def test_get_sends_the_arguments_as_the_query_string_and_no_body():
    parameters = {"type": "object", "properties": {"date": {"type": "string"}, "party": {"type": "integer"},
                                                   "vip": {"type": "boolean"}}}

    async def body(server, base):
        function = webhook_function(f"{base}/slots?clinic=north", "GET", parameters=parameters, headers=())
        return server, await run_tool(function, '{"date": "2026-11-26", "party": 2, "vip": true}', context(), {})

    server, result = run(with_server([Route("GET", "/slots", body={"slots": ["09:30", "14:00"]})], body))
    assert result.ok and json.loads(result.output) == {"slots": ["09:30", "14:00"]}
    [request] = server.requests
    assert request.method == "GET"
    assert request.query == {"clinic": "north", "date": "2026-11-26", "party": "2", "vip": "true"}
    assert request.body == b"" and "content-type" not in request.headers


def test_get_with_a_nested_argument_is_invalid_and_not_sent():
    parameters = {"type": "object", "properties": {"filter": {"type": "object"}}}

    async def body(server, base):
        function = webhook_function(f"{base}/slots", "GET", parameters=parameters, headers=())
        return server, await run_tool(function, '{"filter": {"day": "monday"}}', context(), {})

    server, result = run(with_server([Route("GET", "/slots")], body))
    assert (result.ok, result.status, result.attempts) == (False, "invalid_arguments", 0)
    assert server.requests == []


def test_the_declared_method_is_honoured():
    async def body(server, base):
        as_get = await run_tool(webhook_function(f"{base}/appointments", "GET", headers=()), BOOK_ARGUMENTS,
                                context(), {})
        as_post = await run_tool(webhook_function(f"{base}/appointments", "POST", headers=()), BOOK_ARGUMENTS,
                                 context(), {})
        return server, as_get, as_post

    server, as_get, as_post = run(with_server([Route("POST", "/appointments")], body))
    assert (as_get.ok, as_get.status, as_get.attempts) == (False, "http_4xx", 1)
    assert "405" in json.loads(as_get.output)["error"]["message"]
    assert as_post.ok
    assert [r.method for r in server.requests] == ["GET", "POST"]
    assert server.counts == {("POST", "/appointments"): 1}  # the POST route answered the POST only


def test_a_4xx_is_not_retried_and_its_json_body_reaches_the_model():
    async def body(server, base):
        return server, await run_tool(webhook_function(f"{base}/appointments", retries=3), BOOK_ARGUMENTS,
                                      context(), ENV)

    route = Route("POST", "/appointments", status=409, body={"error": "slot taken"})
    server, result = run(with_server([route], body))
    assert (result.ok, result.status, result.attempts) == (False, "http_4xx", 1)
    error = json.loads(result.output)["error"]
    assert error["type"] == "http_4xx" and "409" in error["message"]
    assert error["detail"] == {"error": "slot taken"}
    assert server.count("POST", "/appointments") == 1


def test_a_5xx_is_retried_then_succeeds():
    async def body(server, base):
        return server, await run_tool(webhook_function(f"{base}/appointments", retries=1), BOOK_ARGUMENTS,
                                      context(), ENV)

    routes = [Route("POST", "/appointments", status=503, body={"error": "busy"}, times=1),
              Route("POST", "/appointments", body={"booked": True})]
    server, result = run(with_server(routes, body))
    assert (result.ok, result.status, result.attempts) == (True, "ok", 2)
    assert json.loads(result.output) == {"booked": True}
    assert server.count("POST", "/appointments") == 2
    assert [r.status for r in server.requests] == [503, 200]
    # the same request both times: a retry is the same write, and the key lets the server see that
    assert server.requests[0].body == server.requests[1].body
    assert server.requests[0].headers["idempotency-key"] == server.requests[1].headers["idempotency-key"]
    assert server.requests[1].received_ms - server.requests[0].received_ms >= tools.RETRY_BACKOFF_S * 1000 * 0.9


def test_5xx_on_every_attempt_reports_http_5xx():
    async def body(server, base):
        return server, await run_tool(webhook_function(f"{base}/appointments", retries=2), BOOK_ARGUMENTS,
                                      context(), ENV)

    server, result = run(with_server([Route("POST", "/appointments", status=500)], body))
    assert (result.ok, result.status, result.attempts) == (False, "http_5xx", 3)
    assert "500" in json.loads(result.output)["error"]["message"]
    assert server.count("POST", "/appointments") == 3


def test_a_timeout_is_retried_and_counted():
    async def body(server, base):
        return server, await run_tool(webhook_function(f"{base}/appointments", timeout_s=0.1, retries=1),
                                      BOOK_ARGUMENTS, context(), ENV)

    server, result = run(with_server([Route("POST", "/appointments", delay_ms=1000)], body))
    assert (result.ok, result.status, result.attempts) == (False, "timeout", 2)
    assert json.loads(result.output)["error"]["type"] == "timeout"
    assert server.count("POST", "/appointments") == 2
    # two attempts of 0.1 s and one backoff of 0.2 s, far less than one delayed answer
    assert 350 <= result.elapsed_ms < 1000


def test_a_refused_connection_is_a_connection_error_after_the_retries():
    async def body(server, base):
        return base

    base = run(with_server([], body))  # the server is gone: its port refuses
    result = run(run_tool(webhook_function(f"{base}/appointments", retries=1), BOOK_ARGUMENTS, context(), ENV))
    assert (result.ok, result.status, result.attempts) == (False, "connection", 2)


@pytest.mark.parametrize("route, status", [
    (Route("POST", "/appointments", raw_body="<html>booked</html>"), "bad_json"),
    (Route("POST", "/appointments", body={"blob": "x" * (MAX_OUTPUT_BYTES + 1)}), "bad_result"),
])
def test_a_2xx_the_model_cannot_use(route, status):
    async def body(server, base):
        return await run_tool(webhook_function(f"{base}/appointments"), BOOK_ARGUMENTS, context(), ENV)

    result = run(with_server([route], body))
    assert (result.ok, result.status, result.attempts) == (False, status, 1)
    assert json.loads(result.output)["error"]["type"] == status


def test_an_empty_2xx_is_a_bare_success():
    async def body(server, base):
        return await run_tool(webhook_function(f"{base}/appointments"), BOOK_ARGUMENTS, context(), ENV)

    result = run(with_server([Route("POST", "/appointments", status=204, body=None)], body))
    assert (result.ok, result.status, json.loads(result.output)) == (True, "ok", {"ok": True})


@pytest.mark.parametrize("arguments", [
    '{"service": "cleaning"}',  # date is required
    '{"service": "cleaning", "date": "2026-11-26", "party": 0}',  # below the minimum
    '{"service": "cleaning", "date": "2026-11-26", "room": 4}',  # not declared
    '["cleaning"]',
    "not json",
    '{"service": "cleaning", "date": NaN}',
])
def test_invalid_arguments_never_reach_the_tool(arguments):
    async def body(server, base):
        return server, await run_tool(webhook_function(f"{base}/appointments"), arguments, context(), ENV)

    server, result = run(with_server([Route("POST", "/appointments")], body))
    assert (result.ok, result.status, result.attempts) == (False, "invalid_arguments", 0)
    assert json.loads(result.output)["error"]["message"]
    assert server.requests == []


@pytest.mark.parametrize("url, headers", [
    ("${MISSING_API}/appointments", ()),
    ("{base}/appointments", (("Authorization", "env:MISSING_TOKEN"),)),
])
def test_a_missing_environment_variable_stops_the_call_before_it_is_sent(url, headers):
    async def body(server, base):
        function = webhook_function(url.replace("{base}", base), headers=headers)
        return server, await run_tool(function, BOOK_ARGUMENTS, context(), {"MISSING_TOKEN": ""})

    server, result = run(with_server([Route("POST", "/appointments")], body))
    assert (result.ok, result.status, result.attempts) == (False, "missing_env", 0)
    assert "MISSING_" in json.loads(result.output)["error"]["message"]
    assert server.requests == []


def test_no_secret_and_no_argument_goes_into_the_log_or_an_error(caplog):
    async def body(server, base):
        return await run_tool(webhook_function(f"{base}/appointments"), BOOK_ARGUMENTS, context(), ENV)

    with caplog.at_level(logging.INFO, logger="voicecore.agent.tools"):
        result = run(with_server([Route("POST", "/appointments", status=500)], body))
    [line] = [r.getMessage() for r in caplog.records]
    assert "status=http_5xx" in line and "attempts=2" in line and "function=book" in line
    for secret in ("s3cret", "cleaning", "2026-11-26"):
        assert secret not in line and secret not in result.output


# -- Python tools ----------------------------------------------------------------------------------------

TOOL_MODULE = textwrap.dedent("""
    import asyncio

    async def book(arguments, context):
        return {"booked": True, "service": arguments["service"], "call": context.call_sid,
                "key": context.idempotency_key}

    async def broken(arguments, context):
        raise RuntimeError("the calendar is locked\\nsecond line")

    async def slow(arguments, context):
        await asyncio.sleep(5)

    async def unencodable(arguments, context):
        return {"when": object()}

    async def nothing(arguments, context):
        return None

    def not_async(arguments, context):
        return {"booked": True}
""")


@pytest.fixture
def tool_module(tmp_path):
    name = f"voicecore_test_tools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(TOOL_MODULE)
    return name


def python_function(entry: str, timeout_s: float = 2.0) -> FunctionSpec:
    return FunctionSpec("book", "Book.", BOOK_PARAMETERS, tool=PythonTool(entry, timeout_s))


def run_python(directory, function: FunctionSpec, arguments: str = BOOK_ARGUMENTS, ctx: ToolContext | None = None):
    """run_tool with a real tool pool (one process) whose tools come from ``directory``."""
    async def body():
        pool = ToolPool(str(directory), processes=1)
        pool.start()
        try:
            assert await pool.wait_ready(60)  # up before the run: its timeout is the tool's, not the start's
            return await run_tool(function, arguments, ctx or context(), {}, python=pool)
        finally:
            await pool.close()

    return run(body())


def test_a_python_tool_gets_the_arguments_and_the_context(tool_module, tmp_path):
    result = run_python(tmp_path, python_function(f"{tool_module}:book"))
    assert (result.ok, result.status, result.attempts) == (True, "ok", 1)
    assert json.loads(result.output) == {"booked": True, "service": "cleaning", "call": CALL_SID,
                                         "key": idempotency_key(CALL_SID, "book", BOOK_ARGUMENTS)}


def test_a_python_tool_returning_none_is_a_bare_success(tool_module, tmp_path):
    result = run_python(tmp_path, python_function(f"{tool_module}:nothing"))
    assert (result.ok, json.loads(result.output)) == (True, {"ok": True})


def test_a_python_tool_exception_is_one_line_with_its_type(tool_module, tmp_path):
    result = run_python(tmp_path, python_function(f"{tool_module}:broken"))
    assert (result.ok, result.status, result.attempts) == (False, "exception", 1)
    message = json.loads(result.output)["error"]["message"]
    assert message == "RuntimeError: the calendar is locked second line"
    assert "Traceback" not in result.output


def test_a_python_tool_timeout(tool_module, tmp_path):
    result = run_python(tmp_path, python_function(f"{tool_module}:slow", timeout_s=1.0))
    assert (result.ok, result.status, result.attempts) == (False, "timeout", 1)  # slow sleeps 5 s: stopped, not awaited
    assert "it was stopped" in json.loads(result.output)["error"]["message"]
    assert result.elapsed_ms >= 900


@pytest.mark.parametrize("function, status, words", [
    ("not_async", "exception", "not an async function"),
    ("unencodable", "bad_result", "JSON"),
    ("missing", "exception", "AttributeError"),
])
def test_a_python_tool_that_cannot_be_used_is_reported(tool_module, tmp_path, function, status, words):
    result = run_python(tmp_path, python_function(f"{tool_module}:{function}"))
    assert (result.ok, result.status) == (False, status)
    assert words in json.loads(result.output)["error"]["message"]


def test_a_python_tool_module_that_does_not_exist(tmp_path):
    result = run_python(tmp_path, python_function("voicecore_no_such_module_xyz:book"))
    assert (result.ok, result.status, result.attempts) == (False, "exception", 0)
    assert "ModuleNotFoundError" in json.loads(result.output)["error"]["message"]


def test_a_python_tool_with_invalid_arguments_is_not_called(tool_module, tmp_path):
    result = run_python(tmp_path, python_function(f"{tool_module}:book"), '{"date": "2026-11-26"}')
    assert (result.ok, result.status, result.attempts) == (False, "invalid_arguments", 0)


def test_a_function_without_a_tool_is_an_error_not_an_exception():
    result = run(run_tool(FunctionSpec("end_call"), "{}", context("end_call", "{}"), {}))
    assert (result.ok, result.status, result.attempts) == (False, "exception", 0)


# -- pure helpers ----------------------------------------------------------------------------------------


def test_idempotency_key_is_stable_under_key_order_and_whitespace():
    a = idempotency_key("CA1", "book", '{"date": "2026-11-26", "service": "cleaning"}')
    b = idempotency_key("CA1", "book", '{"service":"cleaning","date":"2026-11-26"}')
    assert a == b and len(a) == 24 and int(a, 16) >= 0
    assert idempotency_key("CA1", "cancel", '{"service":"cleaning","date":"2026-11-26"}') != a
    assert idempotency_key("CA1", "book", '{"service":"cleaning","date":"2026-11-27"}') != a


def test_two_calls_never_share_an_idempotency_key_for_the_same_action():
    arguments = '{"service": "cleaning", "date": "2026-11-26", "time": "10:00"}'
    keys = {idempotency_key(sid, "book", arguments) for sid in ("CA1", "CA2", "CA1\nbook", "")}
    assert len(keys) == 4
    assert idempotency_key("CA1", "book", arguments) != actions.call_free_idempotency_key("book", arguments)
    assert canonical_arguments('{"b": 1, "a": [1, 2]}') == '{"a":[1,2],"b":1}'
    assert canonical_arguments("[1]") is None and canonical_arguments("nope") is None


def test_build_webhook_request_without_sockets():
    function = webhook_function("${API}/a?x=1", "PUT", headers=(("X-Token", "env:T"), ("Content-Length", "9"),
                                                                ("X-Plain", "yes")))
    request = build_webhook_request(function.tool, {"a": 1}, context(), {"API": "https://api.example", "T": "t"})
    assert not isinstance(request, ToolFailure)
    assert (request.method, request.url, request.body) == ("PUT", "https://api.example/a?x=1", b'{"a":1}')
    names = [name.lower() for name, _ in request.headers]
    assert names.count("content-length") == 0  # http_client sets it; a declared one would conflict
    assert ("X-Token", "t") in request.headers and ("X-Plain", "yes") in request.headers
    failure = build_webhook_request(Webhook("ftp://x/y"), {}, context(), {})
    assert isinstance(failure, ToolFailure) and failure.status == "exception"


@pytest.mark.parametrize("status_code, body, expected", [
    (200, b'{"a": 1}', ("ok", '{"a":1}')),
    (201, b"  ", ("ok", '{"ok": true}')),
    (200, b"ok", ("bad_json", "")),
    (200, b"\xff\xfe", ("bad_json", "")),
    (404, b"", ("http_4xx", "")),
    (502, b'{"a": 1}', ("http_5xx", "")),
    (302, b"", ("bad_result", "")),
])
def test_webhook_outcome(status_code, body, expected):
    output, failure = webhook_outcome(status_code, body)
    assert ((failure.status if failure else "ok"), output) == expected


def test_check_arguments_and_encode_result():
    function = FunctionSpec("book", parameters=BOOK_PARAMETERS)
    assert check_arguments(function, BOOK_ARGUMENTS) == json.loads(BOOK_ARGUMENTS)
    failure = check_arguments(function, '{"service": 5, "date": "x"}')
    assert isinstance(failure, ToolFailure) and failure.message.startswith("service:")
    bad_schema = FunctionSpec("x", parameters={"type": "no-such-type"})
    assert check_arguments(bad_schema, "{}").status == "invalid_arguments"
    assert encode_result([1, "två"]) == ('[1,"två"]', None)
    assert encode_result(float("nan"))[1].status == "bad_result"


# -- the tool server itself ------------------------------------------------------------------------------


def test_tool_server_unknown_route_oversized_body_and_keep_alive():
    async def body(server, base):
        missing = await http_client.send("GET", f"{base}/nowhere")
        too_large = await http_client.send("POST", f"{base}/echo", [("Content-Type", "application/json")],
                                           b'"' + b"x" * MAX_REQUEST_BODY_BYTES + b'"')
        fine = await http_client.send("POST", f"{base}/echo", [("Content-Type", "application/json")], b'{"n": 1}')
        # two requests on one connection: the server keeps it open between them (HTTP/1.1 keep-alive)
        reader, writer = await asyncio.open_connection("127.0.0.1", int(base.rsplit(":", 1)[1]))
        writer.write(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return server, missing, too_large, fine, raw

    routes = [Route("POST", "/echo", body={"seen": True}), Route("GET", "/echo", status=200, body=[1])]
    server, missing, too_large, fine, raw = run(with_server(routes, body))
    assert missing[0] == 404 and json.loads(missing[1])["error"] == "no such route"
    assert too_large[0] == 413
    assert fine == (200, b'{"seen":true}')
    assert raw.count(b"HTTP/1.1 200") == 2
    assert [r.status for r in server.requests] == [404, 413, 200, 200, 200]
    assert server.requests[1].body == b"" and server.requests[1].json is None
    assert server.requests[2].json == {"n": 1}
    assert server.counts == {("POST", "/echo"): 1, ("GET", "/echo"): 2}


def test_route_from_dict_checks_its_keys():
    route = Route.from_dict({"method": "post", "path": "/a", "status": 201, "body": {"booked": True}, "delay_ms": 5})
    assert route == Route("POST", "/a", 201, {"booked": True}, 5)
    with pytest.raises(ValueError, match="unknown route keys"):
        Route.from_dict({"method": "GET", "path": "/a", "bdy": {}})


def test_a_header_secret_with_a_line_break_is_refused_without_quoting_it():
    async def body(server, base):
        return server, await run_tool(webhook_function(f"{base}/appointments"), BOOK_ARGUMENTS, context(),
                                      {"BOOKING_TOKEN": "s3cret\r\nX-Injected: 1"})

    server, result = run(with_server([Route("POST", "/appointments")], body))
    assert (result.ok, result.status) == (False, "exception")
    assert "s3cret" not in result.output
    assert all("x-injected" not in r.headers for r in server.requests)
