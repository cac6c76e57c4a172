"""The console's /chat WebSocket (workers/chat/endpoint.py), the console a real process (tests/console_alone.py)
with the interview example as its agent and the model simulator answering: a conversation, bad input that
leaves the connection open, and the limits that close it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from console_alone import ConsoleAlone, http_json, start_console
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> ConsoleAlone:
    # a client that left is stored once its session has been idle 2 s (console_chat_idle_s), not 300
    running = start_console(tmp_path_factory.mktemp("chat"), VOICECORE_AGENT=str(REPO / "examples" / "interview"),
                            VOICECORE_CONSOLE_CHAT_IDLE_S="2")
    yield running
    running.stop()


def url(console: ConsoleAlone) -> str:
    return f"ws://127.0.0.1:{console.port}/chat"


async def receive_turn(ws) -> list[dict]:
    messages = []
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
        messages.append(message)
        if message["type"] in ("turn_end", "error"):
            return messages


def test_a_conversation_over_the_socket(console):
    async def talk():
        async with connect(url(console), additional_headers={"Authorization": f"Bearer {console.key}"}) as ws:
            session = json.loads(await ws.recv())
            greeting = await receive_turn(ws)
            await ws.send(json.dumps({"type": "message", "id": "m1", "text": "Yes, I am ready to start."}))
            first = await receive_turn(ws)
            await ws.send("this is not json")
            bad = await receive_turn(ws)
            await ws.send(json.dumps({"type": "message", "id": "m2", "text": "That is all from me, thanks."}))
            last = await receive_turn(ws)
            ended = json.loads(await ws.recv())
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return session, greeting, first, bad, last, ended, ws.close_code

    session, greeting, first, bad, last, ended, code = asyncio.run(talk())
    assert session["type"] == "session" and session["id"].startswith("CHAT") and session["agent"] == "python-interview"
    assert [m["text"] for m in greeting if m["type"] == "response"] == [
        "Hello, and thank you for taking the time for this interview. Are you ready to begin?"]
    assert {"type": "event", "kind": "node", "text": "questioning", "data": {}} in first
    responses = [m for m in first if m["type"] == "response"]
    assert responses[0]["text"] == "Great. First question: how long have you worked with Python?"
    assert responses[0]["reply_to"] == "m1" and first[-1]["type"] == "turn_end"
    assert bad == [{"type": "error", "error": 'not JSON: send {"type": "message", "text": "..."}'}]
    assert any(m["type"] == "event" and m["kind"] == "function_call" and m["data"]["name"] == "end_interview" for m in last)
    assert ended == {"type": "ended", "reason": "completed"} and code == 1000


def test_without_a_key_the_upgrade_is_refused(console):
    async def attempt():
        async with connect(url(console)):
            pass

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(attempt())
    assert refused.value.response.status_code == 401


def test_an_oversize_message_and_a_flood_close_their_own_connection_only(console):
    async def run():
        headers = {"Authorization": f"Bearer {console.key}"}
        async with connect(url(console), additional_headers=headers) as calm, \
                connect(url(console), additional_headers=headers, max_size=None) as big, \
                connect(url(console), additional_headers=headers) as flood:
            for ws in (calm, big, flood):
                await ws.recv()  # session
                await receive_turn(ws)  # the greeting
            await big.send(json.dumps({"type": "message", "text": "x" * 10_000}))
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(big.recv(), 10)
            for _ in range(25):
                await flood.send(json.dumps({"type": "unknown"}))
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(flood.recv(), 10)
            await calm.send(json.dumps({"type": "message", "text": ""}))
            still = await receive_turn(calm)
            return big.close_code, flood.close_code, flood.close_reason, still

    big_code, flood_code, flood_reason, still = asyncio.run(run())
    assert big_code == 1009
    assert flood_code == 1008 and flood_reason == "too many messages"
    assert still == [{"type": "error", "error": "text: expected a non-empty string"}]


def test_each_conversation_is_stored_as_a_call_of_carrier_chat(console):
    async def talk():
        async with connect(url(console), additional_headers={"Authorization": f"Bearer {console.key}"}) as ws:
            session = json.loads(await ws.recv())
            await receive_turn(ws)
            await ws.send(json.dumps({"type": "message", "text": "Yes, I am ready to start."}))
            await receive_turn(ws)
            return session["id"]

    session_id = asyncio.run(talk())  # the client leaves: its conversation is stored once idle 2 s
    calls = {}

    def stored() -> bool:
        calls.update(http_json(f"{console.base}/api/calls/{session_id}", console.key))
        return calls.get("stored")

    wait_until(stored, 10, "the conversation in the call store")
    call = calls["call"]
    assert call["carrier"] == "chat" and call["agent"] == "python-interview" and call["outcome"] == "caller_hangup"
    assert [(line["speaker"], line["text"]) for line in call["transcript"]] == [
        ("agent", "Hello, and thank you for taking the time for this interview. Are you ready to begin?"),
        ("caller", "Yes, I am ready to start."),
        ("agent", "Great. First question: how long have you worked with Python?"),
    ]
    assert [tool["name"] for tool in call["tool_calls"]] == ["begin_interview"]


def test_the_message_limit_is_per_api_key_across_its_connections(tmp_path):
    from voicecore.config import load_config
    from voicecore.store import CallStore, database_url_for

    limited = start_console(tmp_path, VOICECORE_AGENT=str(REPO / "examples" / "interview"),
                            VOICECORE_CONSOLE_CHAT_LIMIT="5")
    try:
        with CallStore.open(database_url_for(load_config({"VOICECORE_RECORD_DIR": str(tmp_path / "records")}))) as store:
            other_key = store.add_api_key("other")

        async def run():
            bad = json.dumps({"type": "nothing"})  # answered with an error: a message all the same, and cheap
            ws_url = f"ws://127.0.0.1:{limited.port}/chat"
            ops = {"Authorization": f"Bearer {limited.key}"}
            async with connect(ws_url, additional_headers=ops) as first, connect(ws_url, additional_headers=ops) as second, \
                    connect(ws_url, additional_headers={"Authorization": f"Bearer {other_key}"}) as other:
                for ws in (first, second, other):
                    json.loads(await ws.recv())  # session
                    await receive_turn(ws)  # the greeting
                answers = []
                for ws in (first, first, second, second, first):  # five of the key's messages: each answered
                    await ws.send(bad)
                    answers.append((await receive_turn(ws))[-1]["type"])
                await second.send(bad)  # the sixth in 10 s, on a connection that sent two: over the key's limit
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(second.recv(), 10)
                await other.send(bad)  # another key is not held to it
                still = (await receive_turn(other))[-1]["type"]
                return answers, second.close_code, second.close_reason, still

        answers, code, reason, still = asyncio.run(run())
        assert answers == ["error"] * 5
        assert (code, reason) == (1008, "too many messages for this key")
        assert still == "error"
    finally:
        limited.stop()
