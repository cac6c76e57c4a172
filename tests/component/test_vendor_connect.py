"""Reaching the vendor: the trial session (`voicecore up`'s preflight, the refused breaker's retry) against
the model simulator's OpenAI and Azure forms, each refusal as the vendor words it, the session limit, the
outbound proxy from the standard environment variables (through a real CONNECT proxy on loopback), and the
URL and header forms of both providers."""

from __future__ import annotations

import asyncio
import dataclasses

import orjson
import pytest

from voicecore.realtime import events as rt
from voicecore.realtime.transport import Endpoint, endpoint, proxy_for, trial_session
from voicecore.realtime.vendor_errors import TRANSIENT, classify_close, scan_server_text
from voicecore.sim.model import SimConfig
from voicecore.sim.model_server import serve_model_sim

GOOD_KEY = "sk-proj-good0000000000"
UPDATE = rt.session_update("ga", "You are Ada.", "marin", None)


def run(coro):
    return asyncio.run(coro)


async def with_sim(config: SimConfig, body):
    sim, port = await serve_model_sim(config=config)
    try:
        return sim, await body(port)
    finally:
        await sim.aclose()


def openai_at(port: int, key: str = GOOD_KEY, model: str = "gpt-realtime", naming: str = "ga") -> Endpoint:
    return endpoint(f"ws://127.0.0.1:{port}/v1/realtime", model, key, "openai", "", {}, naming=naming)  # type: ignore[arg-type]


def azure_at(port: int, key: str = GOOD_KEY, deployment: str = "my-realtime") -> Endpoint:
    return endpoint(f"ws://127.0.0.1:{port}/openai/v1/realtime?api-version=2025-08-28", "gpt-realtime", key, "azure",
                    deployment, {})


STRICT = SimConfig(api_keys=(GOOD_KEY,), models=("gpt-realtime", "my-realtime"))


def test_a_trial_session_is_accepted_with_the_right_key_model_and_session():
    sim, result = run(with_sim(STRICT, lambda port: trial_session(openai_at(port), UPDATE)))
    assert result.ok and result.fault is None and result.session["audio"]["output"]["voice"] == "marin"
    session = next(iter(sim.registry.values()))
    assert session.record.responses == []  # a trial asks for no response: it costs no tokens


@pytest.mark.parametrize("case,kind,words", [
    ("key", "auth", "Incorrect API key provided: sk-"),
    ("no_key", "auth", "You didn't provide an API key"),
    ("model", "model", "The model 'gpt-realtime-typo' does not exist"),
    ("voice", "session_config", "Invalid value: 'nova2'"),
    ("beta", "retired", "beta Realtime API shape has been disabled"),
])
def test_each_refusal_on_openais_path_is_fatal_with_the_vendors_words(case, kind, words):
    def target(port: int) -> Endpoint:
        if case == "key":
            return openai_at(port, key="sk-proj-wrong111111111")
        if case == "no_key":
            return dataclasses.replace(openai_at(port), headers=[])
        if case == "model":
            return openai_at(port, model="gpt-realtime-typo")
        if case == "beta":
            return openai_at(port, naming="beta")
        return openai_at(port)

    update = rt.session_update("ga", "Hi.", "nova2", None) if case == "voice" else UPDATE
    sim, result = run(with_sim(STRICT, lambda port: trial_session(target(port), update)))
    assert not result.ok and result.fault.fatal and result.fault.kind == kind, result.fault
    assert words in result.fault.message, result.fault
    assert "sk-proj-wrong111111111" not in result.fault.message  # the vendor masks the key, and so do we


def test_azure_form_takes_api_key_and_deployment_and_refuses_with_http_statuses():
    async def body(port: int):
        ok = await trial_session(azure_at(port), UPDATE)
        bad_key = await trial_session(azure_at(port, key="wrong"), UPDATE)
        bearer_key = await trial_session(dataclasses.replace(azure_at(port), headers=[("Authorization", f"Bearer {GOOD_KEY}")]),
                                         UPDATE)
        no_deployment = await trial_session(azure_at(port, deployment="gpt-4o-typo"), UPDATE)
        return ok, bad_key, bearer_key, no_deployment

    sim, (ok, bad_key, bearer_key, no_deployment) = run(with_sim(STRICT, body))
    assert ok.ok and bearer_key.ok  # Azure takes an Entra ID bearer token as well as api-key
    assert bad_key.fault.kind == "auth" and "invalid subscription key" in bad_key.fault.message
    assert no_deployment.fault.kind == "model" and "deployment for this resource does not exist" in no_deployment.fault.message
    assert sim.refusals == {"401": 1, "DeploymentNotFound": 1}
    assert [s.record.model for s in sim.registry.values()] == ["my-realtime", "my-realtime"]


def test_realtime_url_forms_for_openai_and_azure():
    assert rt.RealtimeUrl("gpt-realtime").url() == "wss://api.openai.com/v1/realtime?model=gpt-realtime"
    azure_v1 = rt.RealtimeUrl("gpt-realtime", base_url="wss://acme.openai.azure.com/openai/v1/realtime?api-version=2025-08-28",
                              provider="azure", deployment="rt-prod")
    assert azure_v1.url() == "wss://acme.openai.azure.com/openai/v1/realtime?api-version=2025-08-28&model=rt-prod"
    assert azure_v1.headers("k") == [("api-key", "k")]
    older = rt.RealtimeUrl("rt", base_url="wss://acme.openai.azure.com/openai/realtime?api-version=2025-04-01-preview",
                           provider="azure")
    assert older.url().endswith("?api-version=2025-04-01-preview&deployment=rt")
    named = rt.RealtimeUrl("ignored", base_url="wss://acme.openai.azure.com/openai/v1/realtime?model=rt-x", provider="azure")
    assert named.url() == "wss://acme.openai.azure.com/openai/v1/realtime?model=rt-x"  # not added twice
    proxied = rt.RealtimeUrl("gpt-realtime", base_url="wss://gw.example/v1/realtime?tenant=a b")
    assert proxied.url() == "wss://gw.example/v1/realtime?tenant=a b&model=gpt-realtime"
    assert rt.detect_provider("wss://acme.openai.azure.com/openai/v1/realtime") == "azure"
    assert rt.detect_provider("wss://acme.cognitiveservices.azure.com/openai/v1/realtime") == "azure"
    assert rt.detect_provider("wss://api.openai.com/v1/realtime") == "openai"
    with pytest.raises(ValueError):
        rt.RealtimeUrl("m", provider="gemini").url()


def test_the_session_limit_ends_a_session_with_session_expired_which_passes():
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async def body(port: int):
        seen = []
        async with connect(f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime", compression=None) as ws:
            await ws.send(UPDATE)
            try:
                while True:
                    seen.append(await asyncio.wait_for(ws.recv(), 5))
            except ConnectionClosed as closed:
                return seen, closed.rcvd.code, closed.rcvd.reason

    sim, (seen, code, reason) = run(with_sim(SimConfig(session_limit_ms=1200), body))
    error = orjson.loads(seen[-1])
    assert error["type"] == "error" and error["error"]["code"] == "session_expired"
    assert error["error"]["message"] == "Your session hit the maximum duration of 1.2 seconds."
    assert (code, reason) == (1000, "session_expired")
    fault = scan_server_text(seen[-1], configuring=False)
    assert fault.severity == TRANSIENT and classify_close(code, reason) is None  # a reconnect outlives it
    session = next(iter(sim.registry.values()))
    assert session.record.expired_ms - session.record.connected_ms >= 1200


def test_a_spent_quota_fails_responses_with_insufficient_quota_which_is_fatal():
    from voicecore.sim.model import ModelSession

    session = ModelSession(SimConfig(first_delta_latency_ms=0), 0, 1)
    session.receive_client_event(rt.session_update("ga", "Hi.", "marin", None), 0)
    session.fail_responses("insufficient_quota", 10_000, 0)
    session.receive_client_event(rt.response_create(), 1)
    session.advance(5)
    faults = [scan_server_text(text, configuring=False) for text in session.events_to_send()]
    kinds = {f.kind for f in faults if f is not None}
    assert kinds == {"quota"} and all(f.fatal for f in faults if f is not None)
    assert session.record.responses[0].error_code == "insufficient_quota"


class ConnectProxy:
    """An HTTP CONNECT proxy on loopback that tunnels and remembers what it was asked for."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode()
        self.requests.append(line)
        method, target, _ = line.split(" ")
        host, port = target.rsplit(":", 1)
        if method != "CONNECT":
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()


def test_the_model_socket_goes_through_an_http_connect_proxy():
    async def body(port: int):
        proxy = ConnectProxy()
        proxy_port = await proxy.start()
        try:
            target = dataclasses.replace(openai_at(port), proxy=f"http://127.0.0.1:{proxy_port}")
            return proxy.requests, await trial_session(target, UPDATE)
        finally:
            await proxy.close()

    sim, (requests, result) = run(with_sim(STRICT, body))
    assert result.ok, result.fault
    assert requests and requests[0].startswith("CONNECT 127.0.0.1:")


def test_the_proxy_comes_from_the_standard_variables():
    env = {"HTTPS_PROXY": "http://proxy.corp:3128", "HTTP_PROXY": "http://plain.corp:8080", "NO_PROXY": "internal.corp,.lan"}
    assert proxy_for("wss://api.openai.com/v1/realtime", env) == "http://proxy.corp:3128"
    assert proxy_for("ws://gw.example/v1/realtime", env) == "http://plain.corp:8080"
    assert proxy_for("wss://rt.internal.corp/v1/realtime", env) is None
    assert proxy_for("wss://box.lan/v1/realtime", env) is None
    assert proxy_for("ws://127.0.0.1:9100/v1/realtime", env) is None  # the built-in simulator: never proxied
    assert proxy_for("ws://localhost:9100/v1/realtime", env) is None
    assert proxy_for("wss://api.openai.com/v1/realtime", {"https_proxy": "proxy.corp:3128"}) == "http://proxy.corp:3128"
    assert proxy_for("wss://api.openai.com/v1/realtime", {"ALL_PROXY": "socks5://s:1080"}) == "socks5://s:1080"
    assert proxy_for("wss://api.openai.com/v1/realtime", {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"}) \
        == "http://lower:1"
    assert proxy_for("wss://api.openai.com/v1/realtime", {}) is None
