"""The model simulator's vendor faults (`POST /faults`, voicecore.sim.model.faults): each kind on a real
simulator on 127.0.0.1 with a real WebSocket client, the failures in the vendor's wire shapes (checked
against the OpenAI SDK's event types), and the session working on after a one-shot fault."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest
import uvloop
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from realtime_wire import SERVER_ADAPTERS, validate_server
from voicecore import http_client
from voicecore.realtime import events as ev
from voicecore.sim.model import SimConfig
from voicecore.sim.model.faults import (
    BINARY_PAYLOAD,
    FAULT_KINDS,
    HUGE_DELTA_CHARS,
    MALFORMED_TEXT,
    UNKNOWN_EVENT_TYPE,
    FaultRejected,
    parse_fault_request,
)
from voicecore.sim.model_server import ModelSimServer, post_fault, serve_model_sim

FAST = SimConfig(speed_factor=50.0, first_delta_latency_ms=0, clip_sequence=("agent_checkin",))
STEP_S = 5.0  # any single wait in these tests; a hang fails instead of blocking the suite


class Client:
    """One realtime session over a real WebSocket: configured for mu-law, no VAD; keeps every event."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, port: int, call: str | None = None) -> Client:
        headers = [("Authorization", "Bearer x")] + ([("X-Voicecore-Call", call)] if call else [])
        ws = await connect(f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime", additional_headers=headers,
                           compression=None, max_size=16 * 2**20)
        client = cls(ws)
        await ws.send(ev.session_update("ga", "Help.", "alloy", None))
        await client.until("session.updated")
        return client

    async def recv(self) -> str | bytes:
        return await asyncio.wait_for(self.ws.recv(), STEP_S)

    async def until(self, event_type: str) -> list[dict[str, Any]]:
        """Events up to and including the first of `event_type` (each one validated against the SDK)."""
        seen = []
        while True:
            message = await self.recv()
            assert isinstance(message, str), message[:40]
            event = json.loads(message)
            if not (event["type"] == "response.done" and event["response"]["status"] == "failed"):
                validate_server("ga", message)  # a failed one is checked in its test (the message key)
            seen.append(event)
            self.events.append(event)
            if event["type"] == event_type:
                return seen

    async def respond(self) -> dict[str, Any]:
        """response.create; the response.done that answers it."""
        await self.ws.send(ev.response_create(event_id="evt_client_1"))
        return (await self.until("response.done"))[-1]


async def faults_get(port: int) -> dict[str, int]:
    status, body = await http_client.send("GET", f"http://127.0.0.1:{port}/faults")
    assert status == 200, body
    return orjson.loads(body)


def run(test, config: SimConfig = FAST, loop_runner=asyncio.run) -> None:
    async def main() -> None:
        sim, port = await serve_model_sim(config=config)
        try:
            await asyncio.wait_for(test(sim, port), 30)
        finally:
            await sim.aclose()

    loop_runner(main())


def assert_completed(done: dict[str, Any]) -> None:
    assert done["response"]["status"] == "completed", done["response"]["status_details"]


# ---- the request -----------------------------------------------------------------------------------


def test_fault_requests_are_checked():
    assert parse_fault_request(b'{"kind": "rate_limit", "duration_ms": 1500}').duration_ms == 1500
    assert parse_fault_request(b'{"kind": "malformed_json", "duration_ms": 99}').duration_ms == 0  # one-shot
    assert parse_fault_request(b'{"kind": "drop_1011", "call": "CA1"}').call == "CA1"
    for body, reason in ((b'{"kind": "meteor"}', "unknown kind"), (b"nope", "not JSON"), (b"[]", "JSON object"),
                         (b'{"kind": "stall"}', "positive duration_ms"),
                         (b'{"kind": "stall", "duration_ms": -1}', "duration_ms must be"),
                         (b'{"kind": "stall", "duration_ms": true}', "duration_ms must be"),
                         (b'{"kind": "drop_1011", "call": ""}', "call must be"),
                         (b'{"kind": "drop_1011", "when": 3}', "unknown key")):
        with pytest.raises(FaultRejected, match=reason):
            parse_fault_request(body)


def test_control_endpoint_answers_plain_http_on_the_websocket_port():
    async def test(sim: ModelSimServer, port: int) -> None:
        assert await faults_get(port) == {kind: 0 for kind in FAULT_KINDS}
        base = f"http://127.0.0.1:{port}"
        status, body = await http_client.send("POST", base + "/faults", body=b'{"kind": "meteor", "duration_ms": 1}')
        assert status == 400 and "unknown kind 'meteor'" in orjson.loads(body)["error"]
        status, body = await http_client.send("POST", base + "/faults", body=b'{"kind": "unknown_event"}')
        assert (status, orjson.loads(body)) == (200, {"kind": "unknown_event", "sessions": 0})
        assert (await http_client.send("POST", base + "/elsewhere", body=b"{}"))[0] == 404
        assert (await http_client.send("DELETE", base + "/faults"))[0] == 405
        assert (await http_client.send("GET", base + "/faults?x=1"))[0] == 200
        # a GET that is no upgrade still goes to picows, which refuses it as before
        assert (await http_client.send("GET", base + "/v1/realtime"))[0] == 400
        client = await Client.open(port)  # and WebSocket sessions open on the same port
        assert (await post_fault("127.0.0.1", port, "unknown_event")) == {"kind": "unknown_event", "sessions": 1}
        with pytest.raises(ValueError, match="400"):
            await post_fault("127.0.0.1", port, "stall")
        assert (await faults_get(port))["unknown_event"] == 2
        await client.ws.close()

    run(test)


def test_control_endpoint_and_sessions_under_uvloop():
    """The bench's simulator process runs uvloop: the hand-over to picows works on its transports too."""
    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        assert (await post_fault("127.0.0.1", port, "binary_frame"))["sessions"] == 1
        assert await client.recv() == BINARY_PAYLOAD
        assert_completed(await client.respond())

    run(test, loop_runner=uvloop.run)


# ---- one-shot faults: the bad message arrives, the session works on -------------------------------------


def test_malformed_json_then_the_session_works_on():
    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        assert (await post_fault("127.0.0.1", port, "malformed_json"))["sessions"] == 1
        text = await client.recv()
        assert text == MALFORMED_TEXT
        with pytest.raises(ValueError):
            json.loads(text)
        assert isinstance(ev.parse_server_event(text), ev.MalformedEvent)
        assert_completed(await client.respond())
        assert [f.kind for f in sim.registry[next(iter(sim.registry))].record.faults] == ["malformed_json"]

    run(test)


def test_unknown_event_then_the_session_works_on():
    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        await post_fault("127.0.0.1", port, "unknown_event")
        event = json.loads(await client.recv())
        assert event["type"] == UNKNOWN_EVENT_TYPE and event["event_id"].startswith("event_")
        assert ev.parse_server_event(json.dumps(event)) == ev.Unhandled(UNKNOWN_EVENT_TYPE)
        assert_completed(await client.respond())

    run(test)


def test_unknown_response_delta_then_the_session_works_on():
    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        assert_completed(await client.respond())
        await post_fault("127.0.0.1", port, "unknown_response_delta")
        text = await client.recv()
        validate_server("ga", text)  # a well-formed delta ...
        delta = ev.parse_server_event(text)
        assert isinstance(delta, ev.AudioDelta) and len(delta.audio) == 800
        created = {e["response"]["id"] for e in client.events if e["type"] == "response.created"}
        assert delta.response_id not in created  # ... of a response never created
        assert_completed(await client.respond())

    run(test)


def test_huge_delta_belongs_to_the_response_in_progress_and_the_response_completes():
    slow = SimConfig(speed_factor=5.0, first_delta_latency_ms=0, clip_sequence=("agent_basic_price",))

    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        await client.ws.send(ev.response_create())
        created = (await client.until("response.created"))[-1]["response"]["id"]
        await post_fault("127.0.0.1", port, "huge_delta")
        seen = await client.until("response.done")
        huge = [e for e in seen if e["type"] == "response.output_audio.delta" and len(e["delta"]) == HUGE_DELTA_CHARS]
        assert len(huge) == 1 and huge[0]["response_id"] == created
        assert_completed(seen[-1])
        (session,) = sim.registry.values()
        assert session.record.faults[0].response_id == created
        # a truncate inside the huge delta's audio is inside the item: accepted
        await client.ws.send(ev.item_truncate(huge[0]["item_id"], 60_000))
        assert (await client.until("conversation.item.truncated"))[-1]["audio_end_ms"] == 60_000
        # with nothing in progress it names a response that does not exist
        await post_fault("127.0.0.1", port, "huge_delta")
        idle = json.loads(await client.recv())
        assert len(idle["delta"]) == HUGE_DELTA_CHARS and idle["response_id"] != created
        assert_completed(await client.respond())

    run(test, slow)


def test_binary_frame_then_the_session_works_on():
    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        await post_fault("127.0.0.1", port, "binary_frame")
        message = await client.recv()
        assert message == BINARY_PAYLOAD
        assert isinstance(ev.parse_server_event(message), ev.MalformedEvent)
        assert_completed(await client.respond())
        (session,) = sim.registry.values()
        assert [f.kind for f in session.record.faults] == ["binary_frame"]

    run(test)


def test_drop_1011_closes_every_live_session_and_new_ones_work():
    async def test(sim: ModelSimServer, port: int) -> None:
        first, second = await Client.open(port, "CA1"), await Client.open(port, "CA2")
        assert (await post_fault("127.0.0.1", port, "drop_1011"))["sessions"] == 2
        for client in (first, second):
            with pytest.raises(ConnectionClosedError) as closed:
                while True:
                    await client.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        again = await Client.open(port, "CA1")
        assert_completed(await again.respond())
        await asyncio.sleep(0.05)
        assert len(sim.live) == 1 and [len(sim.by_call(c)) for c in ("CA1", "CA2")] == [2, 1]
        assert [[f.kind for f in s.record.faults] for s in sim.registry.values()] == [["drop_1011"], ["drop_1011"], []]

    run(test)


def test_a_fault_for_one_call_leaves_the_others_alone():
    async def test(sim: ModelSimServer, port: int) -> None:
        hit, spared = await Client.open(port, "CA1"), await Client.open(port, "CA2")
        assert (await post_fault("127.0.0.1", port, "unknown_event", call="CA1"))["sessions"] == 1
        assert json.loads(await hit.recv())["type"] == UNKNOWN_EVENT_TYPE
        assert_completed(await spared.respond())
        assert UNKNOWN_EVENT_TYPE not in [e["type"] for e in spared.events]
        assert (await post_fault("127.0.0.1", port, "rate_limit", 5000, call="CA1"))["sessions"] == 1
        assert_completed(await spared.respond())
        assert (await hit.respond())["response"]["status"] == "failed"

    run(test)


# ---- lasting faults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, code", [("rate_limit", "rate_limit_exceeded"), ("server_error", "server_error")])
def test_response_faults_fail_every_response_in_the_window_in_the_vendors_shapes(kind: str, code: str):
    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        assert (await post_fault("127.0.0.1", port, kind, 600))["sessions"] == 1
        await client.ws.send(ev.response_create(event_id="evt_client_1"))
        seen = await client.until("response.done")
        assert [e["type"] for e in seen] == ["response.created", "error", "response.done"]
        error, done = seen[1], seen[2]
        assert error["error"]["type"] == error["error"]["code"] == code
        assert error["error"]["event_id"] == "evt_client_1"  # it answers that response.create
        assert error["error"]["message"]
        SERVER_ADAPTERS["ga"].validate_python(error)
        parsed = ev.parse_server_event(json.dumps(error))
        assert isinstance(parsed, ev.RealtimeError) and parsed.code == code
        response = done["response"]
        assert response["id"] == seen[0]["response"]["id"] and response["status"] == "failed"
        assert response["status_details"]["type"] == "failed"
        assert response["status_details"]["error"]["code"] == response["status_details"]["error"]["type"] == code
        # the SDK's status_details.error declares type and code; real traffic also carries the message
        # (openai/openai-openapi#471), so that one key is not an undeclared-field failure here
        SERVER_ADAPTERS["ga"].validate_python(done)
        assert ev.parse_server_event(json.dumps(done)) == ev.ResponseDone(response["id"], "failed", None, code)
        if kind == "rate_limit":
            assert "Please try again in" in error["error"]["message"]
        # a session opened during the window is limited too (a reconnect does not escape it) ...
        late = await Client.open(port)
        assert (await late.respond())["response"]["status"] == "failed"
        # ... and after it both answer again, in the same sessions
        await asyncio.sleep(0.65)
        assert_completed(await client.respond())
        assert_completed(await late.respond())
        record = sim.registry[next(iter(sim.registry))].record
        assert [r.error_code for r in record.responses] == [code, None]
        assert record.faults[0].kind == kind and record.faults[0].until_ms is not None

    run(test)


def test_stall_holds_every_event_but_reads_input_then_sends_what_was_due():
    async def test(sim: ModelSimServer, port: int) -> None:
        client = await Client.open(port)
        loop = asyncio.get_running_loop()
        assert (await post_fault("127.0.0.1", port, "stall", 500))["sessions"] == 1
        started = loop.time()
        await client.ws.send(ev.response_create())
        first = await client.recv()
        waited = loop.time() - started
        assert waited >= 0.45, waited  # nothing came out during the window
        assert json.loads(first)["type"] == "response.created"
        (session,) = sim.registry.values()
        assert session.record.client_events["response.create"] == 1  # the input was read meanwhile
        assert [(f.kind, f.until_ms is not None) for f in session.record.faults] == [("stall", True)]
        assert_completed((await client.until("response.done"))[-1])

    run(test)


def test_stall_holds_a_new_sessions_first_event_too():
    async def test(sim: ModelSimServer, port: int) -> None:
        await post_fault("127.0.0.1", port, "stall", 400)
        loop = asyncio.get_running_loop()
        started = loop.time()
        ws = await connect(f"ws://127.0.0.1:{port}/v1/realtime", compression=None)
        assert json.loads(await asyncio.wait_for(ws.recv(), STEP_S))["type"] == "session.created"
        assert loop.time() - started >= 0.35
        await ws.close()

    run(test)


def test_refuse_new_answers_handshakes_503_and_spares_live_sessions():
    async def test(sim: ModelSimServer, port: int) -> None:
        live = await Client.open(port)
        assert (await post_fault("127.0.0.1", port, "refuse_new", 400))["sessions"] == 0
        with pytest.raises(InvalidStatus) as refused:
            await Client.open(port)
        assert refused.value.response.status_code == 503
        assert sim.handshakes_refused == 1 and len(sim.registry) == 1
        assert_completed(await live.respond())
        await asyncio.sleep(0.45)
        assert_completed(await (await Client.open(port)).respond())
        assert (await faults_get(port))["refuse_new"] == 1

    run(test)
