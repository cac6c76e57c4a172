"""Running an agent's tools: an HTTP webhook or a Python entry point, once per function call, safely.

Owns the I/O of a tool run (``run_tool``) and the pure decisions around it, kept apart so they are tested
without sockets: checking the arguments against the function's JSON Schema, resolving ``${NAME}`` and
``env:NAME`` from the environment, building the request, judging the answer (``webhook_outcome``) and
encoding a Python tool's result. Whatever goes wrong, the model gets a structured output it can act on,
``{"error": {"type": <status>, "message": ...}}``, and ``run_tool`` returns instead of raising: a tool is
someone else's server or code, and its failure must not take the call (or the model worker) down.

What runs the tool and when is not decided here: the call's controller emits a RunTool action (after a
confirmation, de-duplication and the filler line), the model worker runs ``run_tool`` as an asyncio task
off the 20 ms path, and the result goes back to the controller as a recorded input, so a replay needs no
tool server. A webhook is sent on the worker's connection pool (keep-alive per origin,
voicecore/http_client.py); a Python tool runs in a process of the worker's tool pool
(voicecore/agent/tool_pool.py), never on the worker's event loop. Secrets stay out of outputs and logs: header values and error messages never carry a
resolved ``env:`` value, and the log line of a run names the call, the function, the status, the
attempts and the time, never the arguments (they hold the caller's personal data:
docs/explanation/style.md#rules).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Protocol

import h11

from voicecore import http_client
from voicecore.agent.actions import canonical_arguments, idempotency_key
from voicecore.agent.arguments import check_arguments as schema_check
from voicecore.agent.arguments import reject_constant
from voicecore.agent.spec import FunctionSpec, PythonTool, Webhook

__all__ = [
    "MAX_OUTPUT_BYTES", "STATUSES", "ToolContext", "ToolResult", "WebhookRequest", "ToolFailure",
    "canonical_arguments", "idempotency_key", "check_arguments", "build_webhook_request", "webhook_outcome",
    "encode_result", "error_output", "run_tool", "PythonRunner",
]

log = logging.getLogger("voicecore.agent.tools")

STATUSES = ("ok", "invalid_arguments", "timeout", "connection", "http_4xx", "http_5xx", "bad_json", "missing_env",
            "exception", "bad_result", "crashed")  # crashed: a Python tool's process died under it
MAX_OUTPUT_BYTES = 8 * 1024  # what the model gets back: a tool's result is context, not a data dump
MAX_MESSAGE_CHARS = 300  # of an error message: one line the model can read out or act on
MAX_ERROR_BODY_BYTES = 2 * 1024  # a 4xx's JSON body goes to the model ("slot taken") when it is this small
RETRY_BACKOFF_S = 0.2  # times the attempt number: 0.2 s, 0.4 s, ... before the next attempt
OK_OUTPUT = json.dumps({"ok": True})  # a success with nothing to say (empty 2xx body, a tool returning None)

# Set by http_client.send or by us; a tool's own header by one of these names would collide with them.
_RESERVED_HEADERS = frozenset({"host", "connection", "content-length", "transfer-encoding", "user-agent",
                               "content-type", "accept", "idempotency-key", "x-voicecore-call"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_PREFIX = "env:"


@dataclasses.dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool knows of the call besides its arguments; a Python tool gets it as its second argument."""

    call_sid: str
    function: str
    idempotency_key: str  # this call, this function, these arguments -> this key (actions.idempotency_key)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolResult:
    ok: bool
    output: str  # JSON text: the function_call_output the model gets (an {"error": ...} object when not ok)
    status: str  # one of STATUSES
    attempts: int  # times the tool was called: 0 when it was not (invalid arguments, a missing variable)
    elapsed_ms: int  # from the start of run_tool to its result, retries and backoff included


@dataclasses.dataclass(frozen=True, slots=True)
class WebhookRequest:
    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class ToolFailure:
    """Why a tool gave no result (or was not run); ``message`` is safe to show the model and to log."""

    status: str
    message: str
    detail: Any = None  # JSON-able: a 4xx's small JSON body, for the model

    def output(self) -> str:
        return error_output(self.status, self.message, self.detail)


# -- pure helpers ---------------------------------------------------------------------------------------


def error_output(status: str, message: str, detail: Any = None) -> str:
    """The model's output for a failed run: ``{"error": {"type", "message"[, "detail"]}}``, one line."""
    error: dict[str, Any] = {"type": status, "message": _one_line(message)}
    if detail is not None:
        error["detail"] = detail
    return json.dumps({"error": error}, ensure_ascii=False, separators=(",", ":"))


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def _compact(value: Any) -> str:
    """JSON text of ``value``; raises TypeError / ValueError when it has no JSON form (NaN included)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def check_arguments(function: FunctionSpec, arguments: str) -> dict[str, Any] | ToolFailure:
    """The arguments as a dict when they are a JSON object valid against ``function.parameters``."""
    value, problem = schema_check(function.parameters, arguments)
    return ToolFailure("invalid_arguments", problem) if value is None else value


def _resolve_env(text: str, environ: Mapping[str, str]) -> str | ToolFailure:
    """``text`` with every ``${NAME}`` replaced; a variable that is unset or empty is a failure."""
    missing = [name for name in _ENV_REFERENCE.findall(text) if not environ.get(name)]
    if missing:
        return ToolFailure("missing_env", f"environment variable {missing[0]} is not set")
    return _ENV_REFERENCE.sub(lambda match: environ[match.group(1)], text)


def _query_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def build_webhook_request(webhook: Webhook, arguments: dict[str, Any], context: ToolContext,
                          environ: Mapping[str, str]) -> WebhookRequest | ToolFailure:
    """The one request a webhook run sends (each attempt sends it again, unchanged)."""
    method = webhook.method.upper()
    url = _resolve_env(webhook.url, environ)
    if isinstance(url, ToolFailure):
        return url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ToolFailure("exception", "the webhook URL is not an http:// or https:// URL")
    headers: list[tuple[str, str]] = []
    for name, value in webhook.headers:
        if name.lower() in _RESERVED_HEADERS:
            continue
        if value.startswith(_ENV_PREFIX):
            variable = value[len(_ENV_PREFIX):]
            if not environ.get(variable):
                return ToolFailure("missing_env", f"environment variable {variable} is not set")
            value = environ[variable]
        headers.append((name, value))
    body = b""
    if method in _BODY_METHODS:
        body = _compact(arguments).encode("utf-8")
        headers.append(("Content-Type", "application/json"))
    else:
        query: list[tuple[str, str]] = []
        for key, value in arguments.items():
            if value is None:
                continue  # null is "not given" in a query string
            text = _query_value(value)
            if text is None:
                return ToolFailure("invalid_arguments", f"{key}: a GET webhook takes only scalar arguments")
            query.append((key, text))
        if query:
            encoded = urllib.parse.urlencode(query)
            url = urllib.parse.urlunsplit(parts._replace(query=f"{parts.query}&{encoded}" if parts.query else encoded))
    headers += [("Accept", "application/json"), ("Idempotency-Key", context.idempotency_key),
                ("X-Voicecore-Call", context.call_sid)]
    return WebhookRequest(method, url, tuple(headers), body)


def webhook_outcome(status_code: int, body: bytes) -> tuple[str, ToolFailure | None]:
    """(output, None) for a usable answer, else ("", failure); a failure with status http_5xx is retried."""
    if 200 <= status_code < 300:
        if not body.strip():
            return OK_OUTPUT, None
        try:
            output = _compact(json.loads(body, parse_constant=reject_constant))
        except ValueError:  # UnicodeDecodeError is a ValueError too
            return "", ToolFailure("bad_json", f"the server answered {status_code} with a body that is not JSON")
        return _capped(output)
    if 400 <= status_code < 500:
        return "", ToolFailure("http_4xx", f"the server answered {status_code}", _small_json(body))
    if status_code >= 500:
        return "", ToolFailure("http_5xx", f"the server answered {status_code}")
    return "", ToolFailure("bad_result", f"the server answered {status_code} (redirects are not followed)")


def _small_json(body: bytes) -> Any:
    if not body.strip() or len(body) > MAX_ERROR_BODY_BYTES:
        return None
    try:
        return json.loads(body, parse_constant=reject_constant)
    except ValueError:
        return None


def _capped(output: str) -> tuple[str, ToolFailure | None]:
    size = len(output.encode("utf-8"))
    if size > MAX_OUTPUT_BYTES:
        return "", ToolFailure("bad_result", f"the result is {size} bytes, more than {MAX_OUTPUT_BYTES}")
    return output, None


def encode_result(result: Any) -> tuple[str, ToolFailure | None]:
    """A Python tool's return value as the model's output: JSON text, capped; None means a bare success."""
    if result is None:
        return OK_OUTPUT, None
    try:
        output = _compact(result)
    except (TypeError, ValueError) as exc:
        return "", ToolFailure("bad_result", f"the result cannot be encoded as JSON: {type(exc).__name__}")
    return _capped(output)


# -- the I/O shell ---------------------------------------------------------------------------------------


async def _run_webhook(webhook: Webhook, arguments: dict[str, Any], context: ToolContext,
                       environ: Mapping[str, str], http: http_client.ConnectionPool | None) -> tuple[str, ToolFailure | None, int]:
    request = build_webhook_request(webhook, arguments, context, environ)
    if isinstance(request, ToolFailure):
        return "", request, 0
    attempts = 0
    failure: ToolFailure | None = None
    for attempt in range(1, max(0, webhook.retries) + 2):
        if attempt > 1:
            await asyncio.sleep(RETRY_BACKOFF_S * (attempt - 1))
        attempts = attempt
        try:
            if http is not None:
                status_code, body = await http.send(request.method, request.url, request.headers, request.body,
                                                    timeout_s=webhook.timeout_s)
            else:
                status_code, body = await http_client.send(request.method, request.url, request.headers, request.body,
                                                           timeout_s=webhook.timeout_s)
        except TimeoutError:  # before OSError: TimeoutError is one
            failure = ToolFailure("timeout", f"no answer within {webhook.timeout_s:g} s")
            continue
        except OSError as exc:
            failure = ToolFailure("connection", f"cannot reach the server: {type(exc).__name__}")
            continue
        except ValueError:  # http_client's only ValueError once the URL is checked: the body passed its cap
            return "", ToolFailure("bad_result", "the response body is too large"), attempts
        except h11.RemoteProtocolError as exc:  # the server does not speak HTTP/1.1 properly
            failure = ToolFailure("connection", f"the server's answer is not valid HTTP: {type(exc).__name__}")
            continue
        except h11.LocalProtocolError as exc:
            # e.g. a header value (an env: secret) with a line break; h11's text may quote it: only the type
            return "", ToolFailure("exception", f"the request cannot be sent: {type(exc).__name__}"), attempts
        output, failure = webhook_outcome(status_code, body)
        if failure is None or failure.status != "http_5xx":
            return output, failure, attempts
    return "", failure, attempts


class PythonRunner(Protocol):
    """What runs a Python tool away from the caller's event loop (voicecore/agent/tool_pool.py's ToolPool)."""

    async def run(self, tool: PythonTool, arguments: dict[str, Any],
                  context: ToolContext) -> tuple[str, ToolFailure | None, int]: ...


async def run_tool(function: FunctionSpec, arguments: str, context: ToolContext, environ: Mapping[str, str], *,
                   http: http_client.ConnectionPool | None = None, python: PythonRunner | None = None) -> ToolResult:
    """Run ``function``'s tool with ``arguments`` (the model's JSON text). Never raises, except
    asyncio.CancelledError when the task running it is cancelled (the call ended).

    ``http``: the connection pool webhooks are sent on (None: a connection per request). ``python``: the
    pool that runs Python tools in processes of their own; without one a Python tool is not run (it
    would run on this event loop, where a blocking tool stalls every call it serves)."""
    started = time.monotonic()
    output, failure, attempts = "", None, 0
    try:
        checked = check_arguments(function, arguments)
        if isinstance(checked, ToolFailure):
            failure = checked
        elif isinstance(function.tool, Webhook):
            output, failure, attempts = await _run_webhook(function.tool, checked, context, environ, http)
        elif isinstance(function.tool, PythonTool):
            if python is None:
                failure = ToolFailure("exception", f"python tool {function.tool.entry}: no tool process pool to run it in")
            else:
                output, failure, attempts = await python.run(function.tool, checked, context)
        else:
            failure = ToolFailure("exception", f"function {function.name} has no tool to run")
    except Exception as exc:  # our own bug must still give the model an answer, not leave the call waiting
        log.exception("tool run failed unexpectedly call=%s function=%s", context.call_sid, function.name)
        failure = ToolFailure("exception", f"the tool run failed: {type(exc).__name__}")
    elapsed_ms = int((time.monotonic() - started) * 1000)
    if failure is not None:
        result = ToolResult(False, failure.output(), failure.status, attempts, elapsed_ms)
    else:
        result = ToolResult(True, output, "ok", attempts, elapsed_ms)
    log.log(logging.INFO if result.ok else logging.WARNING,
            "tool.run call=%s function=%s status=%s attempts=%d elapsed_ms=%d",
            context.call_sid, function.name, result.status, result.attempts, result.elapsed_ms)
    return result
