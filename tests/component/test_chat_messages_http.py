"""``POST /chat/messages`` on the console's port (workers/console/main.py, workers/chat/endpoint.py), the console a
real process (tests/console_alone.py) with the interview example as its agent and the model simulator answering,
over real sockets: a conversation one message per request, the same session continued over the /chat WebSocket
and back, a /chat client that reconnects by its session's id, every refusal's status, and that none of them
touches another session."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from console_alone import ConsoleAlone, http_json, start_console
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
INTERVIEW = str(REPO / "examples" / "interview")
GREETING = "Hello, and thank you for taking the time for this interview. Are you ready to begin?"
FIRST_QUESTION = "Great. First question: how long have you worked with Python?"


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> ConsoleAlone:
    running = start_console(tmp_path_factory.mktemp("chat-http"), VOICECORE_AGENT=INTERVIEW)
    yield running
    running.stop()


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], dict]:
    """Send ``raw`` as it is and read the answer to the end (the console closes after an HTTP answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


def post(port: int, value, key: str | None, *, method: str = "POST", extra: str = "") -> tuple[int, dict[str, str], dict]:
    body = value if isinstance(value, bytes) else json.dumps(value).encode()
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return exchange(port, f"{method} /chat/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n{extra}\r\n".encode() + body)


async def receive_turn(ws) -> list[dict]:
    messages = []
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
        messages.append(message)
        if message["type"] in ("turn_end", "error"):
            return messages


def test_a_conversation_one_message_per_request_and_continued_over_the_websocket(console):
    status, _, first = post(console.port, {"text": "Yes, I am ready to start.", "id": "m1"}, console.key)
    assert status == 200, first
    session_id = first["session_id"]
    assert session_id.startswith("CHAT") and first["agent"] == "python-interview" and first["started"] is True
    assert first["greeting"] == [GREETING] and first["replies"] == [FIRST_QUESTION] and first["ended"] is None
    assert {"type": "event", "kind": "node", "text": "questioning", "data": {}} in first["events"]
    assert {"type": "response", "text": FIRST_QUESTION, "node": "questioning", "reply_to": "m1"} in first["events"]
    assert [e["data"]["name"] for e in first["events"] if e.get("kind") == "function_call"] == ["begin_interview"]

    async def over_the_socket():
        async with connect(f"ws://127.0.0.1:{console.port}/chat?session={session_id}",
                           additional_headers={"Authorization": f"Bearer {console.key}"}) as ws:
            hello = json.loads(await ws.recv())
            # in use by the socket: a request for it is refused, and the socket's conversation goes on
            busy = await asyncio.to_thread(post, console.port, {"text": "hi", "session_id": session_id}, console.key)
            await ws.send(json.dumps({"type": "message", "id": "w1", "text": "About five years, mostly Django."}))
            return hello, busy, await receive_turn(ws)

    hello, busy, turn = asyncio.run(over_the_socket())
    assert hello == {"type": "session", "id": session_id, "agent": "python-interview", "resumed": True}
    assert busy[0] == 409 and "in use" in busy[2]["error"]
    assert [m["type"] for m in turn][-1] == "turn_end" and any(m["type"] == "response" for m in turn)

    status, _, last = post(console.port, {"text": "That is all from me, thanks.", "session_id": session_id}, console.key)
    assert status == 200 and last["started"] is False and last["greeting"] == [] and last["ended"] == "completed"
    status, _, gone = post(console.port, {"text": "Hello again?", "session_id": session_id}, console.key)
    assert status == 404 and "no chat session" in gone["error"]

    call = http_json(f"{console.base}/api/calls/{session_id}", console.key)["call"]  # one call, all three parts
    caller_lines = [line["text"] for line in call["transcript"] if line["speaker"] == "caller"]
    assert caller_lines == ["Yes, I am ready to start.", "About five years, mostly Django.", "That is all from me, thanks."]
    assert call["carrier"] == "chat" and call["outcome"] == "hangup:completed"


def test_a_websocket_client_that_reconnects_by_id_continues_its_conversation(console):
    headers = {"Authorization": f"Bearer {console.key}"}

    async def twice():
        async with connect(f"ws://127.0.0.1:{console.port}/chat", additional_headers=headers) as ws:
            session = json.loads(await ws.recv())
            await receive_turn(ws)  # the greeting
            await ws.send(json.dumps({"type": "message", "text": "Yes, I am ready to start."}))
            await receive_turn(ws)
        async with connect(f"ws://127.0.0.1:{console.port}/chat?session={session['id']}", additional_headers=headers) as ws:
            again = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "message", "text": "That is all from me, thanks."}))
            last = await receive_turn(ws)
            ended = json.loads(await ws.recv())
        return session, again, last, ended

    session, again, last, ended = asyncio.run(twice())
    assert again == {"type": "session", "id": session["id"], "agent": "python-interview", "resumed": True}
    # no second greeting: the first message on the new connection is answered in the interview's second node
    assert not any(m.get("text") == GREETING for m in last)
    assert any(m["type"] == "event" and m["kind"] == "function_call" and m["data"]["name"] == "end_interview" for m in last)
    assert ended == {"type": "ended", "reason": "completed"}
    found: dict = {}

    def stored() -> bool:  # the connection's end stores it, after the client has seen the close
        found.update(http_json(f"{console.base}/api/calls/{session['id']}", console.key))
        return found.get("stored") is True

    wait_until(stored, 10, "the conversation in the call store", detail=console.log)
    call = found["call"]
    assert [line["text"] for line in call["transcript"] if line["speaker"] == "caller"] == [
        "Yes, I am ready to start.", "That is all from me, thanks."]


def test_refusals_have_their_status_and_harm_no_other_session(console):
    port, key = console.port, console.key
    status, _, opened = post(port, {}, key)  # no text: the session starts with the agent's opening alone
    assert status == 200 and opened["greeting"] == [GREETING] and opened["replies"] == []
    session_id = opened["session_id"]

    refusals = {
        "malformed": post(port, b'{"text": "unterminated', key),
        "not an object": post(port, b'["text"]', key),
        "empty text": post(port, {"text": " ", "session_id": session_id}, key),
        "unknown field": post(port, {"txt": "hello"}, key),
        "too large": post(port, {"text": "x" * 20_000, "session_id": session_id}, key),
        "unknown session": post(port, {"text": "hello", "session_id": "CHAT0000000000000000"}, key),
        "other agent": post(port, {"text": "hello", "agent": "receptionist"}, key),
        "no key": post(port, {"text": "hello", "session_id": session_id}, None),
        "bad key": post(port, {"text": "hello", "session_id": session_id}, "vc_not_a_key"),
        "wrong method": post(port, {"text": "hello"}, key, method="PUT"),
        "no length": exchange(port, f"POST /chat/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                                    "Connection: close\r\n\r\n".encode()),
        "chunked": exchange(port, f"POST /chat/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".encode()),
    }
    statuses = {name: answer[0] for name, answer in refusals.items()}
    assert statuses == {"malformed": 400, "not an object": 400, "empty text": 400, "unknown field": 400, "too large": 413,
                        "unknown session": 404, "other agent": 404, "no key": 401, "bad key": 401, "wrong method": 405,
                        "no length": 411, "chunked": 411}
    for name, (_, headers, body) in refusals.items():
        assert headers["content-type"] == "application/json" and body["error"], name
    assert refusals["malformed"][2]["error"].startswith("the body is not JSON")
    assert refusals["too large"][2]["error"].endswith("bytes; at most 16384 are taken")
    assert refusals["wrong method"][1]["allow"] == "POST"

    status, _, after = post(port, {"text": "Yes, I am ready to start.", "session_id": session_id}, key)
    assert status == 200 and after["replies"] == [FIRST_QUESTION]


def test_limits_the_session_cap_and_idle_expiry(tmp_path):
    limited = start_console(tmp_path, VOICECORE_AGENT=INTERVIEW, VOICECORE_CONSOLE_CHAT_LIMIT="4",
                            VOICECORE_CONSOLE_CHAT_SESSIONS="2", VOICECORE_CONSOLE_CHAT_IDLE_S="1.5")
    try:
        port, key = limited.port, limited.key
        first = post(port, {}, key)
        second = post(port, {}, key)
        full = post(port, {}, key)  # a third while two are open
        assert (first[0], second[0], full[0]) == (200, 200, 503)
        assert "console_chat_sessions" in full[2]["error"]
        async def attempt():
            async with connect(f"ws://127.0.0.1:{port}/chat", additional_headers={"Authorization": f"Bearer {key}"}):
                pass

        with pytest.raises(InvalidStatus) as refused:  # /chat is held to the same cap, before the upgrade
            asyncio.run(attempt())
        assert refused.value.response.status_code == 503
        over = post(port, b"not json", key)  # the key's fourth message in 10 s: counted although it is bad
        assert over[0] == 400
        limited_answer = post(port, {}, key)  # its fifth
        assert limited_answer[0] == 429 and limited_answer[1]["retry-after"] == "10"

        session_id = first[2]["session_id"]

        def stored() -> bool:
            return http_json(f"{limited.base}/api/calls/{session_id}", key).get("stored") is True

        began = time.monotonic()
        wait_until(stored, 15, "the idle session in the call store", detail=limited.log)
        assert time.monotonic() - began < 12  # expired after 1.5 s idle, swept each second
        call = http_json(f"{limited.base}/api/calls/{session_id}", key)["call"]
        assert call["carrier"] == "chat" and call["outcome"] == "caller_hangup"
        assert [line["text"] for line in call["transcript"]] == [GREETING]
    finally:
        limited.stop()
