"""The cores under ``POST /chat/messages``: the console's request reader with bodies (voicecore/console/bodies.py),
the text sessions by id (voicecore/chat/sessions.py) and the message's JSON (voicecore/chat/http_messages.py),
fed bytes and a clock."""

from __future__ import annotations

import json

import pytest
from websockets.streams import StreamReader

from voicecore.chat.http_messages import BadMessage, answer, read_message
from voicecore.chat.sessions import Refused, Sessions
from voicecore.console.bodies import DRAIN_BYTES, HeadersTooLarge, RequestLineTooLong, read_request

HEAD = b"POST /chat/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def feed(chunks: list[bytes], max_body: int = 100, eof: bool = False):
    """The request read from ``chunks`` fed one after another (those after the request's end go to the reader
    all the same, as the socket would), and the reader; "waiting" when it needs more."""
    reader = StreamReader()
    reading = read_request(reader, max_body)
    result = "waiting"
    next(reading)
    for chunk in chunks:
        reader.feed_data(chunk)
        if result == "waiting":
            try:
                next(reading)
            except StopIteration as done:
                result = done.value
    if eof and result == "waiting":
        reader.feed_eof()
        try:
            next(reading)
        except StopIteration as done:
            result = done.value
    return result, reader


def test_a_body_is_read_whole_whatever_the_pieces_it_comes_in():
    raw = HEAD + b"Content-Length: 11\r\n\r\n" + b'{"text":""}' + b"GET / HTTP/1.1\r\n"
    request, reader = feed([raw[i:i + 7] for i in range(0, len(raw), 7)])
    assert (request.method, request.path, request.body, request.content_length, request.refusal) == (
        "POST", "/chat/messages", b'{"text":""}', 11, None)
    assert bytes(reader.buffer).startswith(b"GET / HTTP/1.1")  # what follows the body is left for the next reader


def test_a_request_waits_for_the_rest_of_its_body_and_a_peer_that_leaves_mid_body_is_an_error():
    assert feed([HEAD + b"Content-Length: 10\r\n\r\nhello"])[0] == "waiting"
    with pytest.raises(EOFError):
        feed([HEAD + b"Content-Length: 10\r\n\r\nhello"], eof=True)


def test_without_content_length_there_is_no_body_and_the_route_decides():
    request, _ = feed([HEAD + b"\r\n"])
    assert request.content_length is None and request.body == b"" and request.refusal is None


@pytest.mark.parametrize("lengths, status", [
    (b"Content-Length: ten\r\n", 400),
    (b"Content-Length: -1\r\n", 400),
    (b"Content-Length: 5\r\nContent-Length: 6\r\n", 400),
    (b"Transfer-Encoding: chunked\r\n", 411),
])
def test_a_length_the_reader_cannot_trust_is_refused_before_any_body_is_read(lengths, status):
    request, reader = feed([HEAD + lengths + b"\r\n5\r\nhello\r\n0\r\n\r\n"])
    assert request.refusal[0] == status and request.body == b""
    assert bytes(reader.buffer) == b"5\r\nhello\r\n0\r\n\r\n"  # left unread


def test_a_body_over_the_limit_is_refused_413_and_drained_when_small_enough_to_drain():
    request, reader = feed([HEAD + b"Content-Length: 150\r\n\r\n", b"x" * 150], max_body=100)
    assert request.refusal == (413, "the body is 150 bytes; at most 100 are taken") and request.body == b""
    assert bytes(reader.buffer) == b""
    huge = DRAIN_BYTES + 1
    request, reader = feed([HEAD + f"Content-Length: {huge}\r\n\r\n".encode(), b"x" * 10], max_body=100)
    assert request.refusal[0] == 413 and bytes(reader.buffer) == b"x" * 10  # not waited for: the answer closes


def test_a_repeated_equal_content_length_is_one_length():
    request, _ = feed([HEAD + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\nok"])
    assert request.body == b"ok" and request.refusal is None


def test_what_is_not_http_or_too_long_raises_as_websockets_reader_does():
    with pytest.raises(ValueError):
        feed([b"HELLO\r\n\r\n"])
    with pytest.raises(ValueError):
        feed([b"POST / HTTP/2\r\n\r\n"])
    with pytest.raises(RequestLineTooLong):
        feed([b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n"])
    with pytest.raises(HeadersTooLarge):
        feed([HEAD + b"".join(b"X-%d: y\r\n" % n for n in range(200))])


# --- the sessions ------------------------------------------------------------------------------------------------

def test_a_session_is_claimed_by_one_user_at_a_time_and_by_its_own_key_only():
    sessions: Sessions[str] = Sessions(idle_s=60, cap=10)
    entry = sessions.open("ops", "conversation", now_s=0)
    assert entry.busy and entry.session_id.startswith("CHAT") and len(entry.session_id) == 20
    with pytest.raises(Refused) as busy:
        sessions.claim(entry.session_id, "ops", 1)
    assert busy.value.status == 409
    sessions.release(entry, 2)
    assert sessions.check(entry.session_id, "ops", 2) is entry and not entry.busy  # a look claims nothing
    with pytest.raises(Refused) as other:
        sessions.claim(entry.session_id, "other-key", 3)
    assert other.value.status == 404  # the same answer as for an id never given: ids cannot be probed
    assert sessions.claim(entry.session_id, "ops", 3) is entry


def test_an_idle_session_expires_but_one_in_use_does_not():
    sessions: Sessions[str] = Sessions(idle_s=60, cap=10)
    idle = sessions.open("ops", "a", 0)
    sessions.release(idle, 10)
    held = sessions.open("ops", "b", 0)  # claimed, never let go: a /chat connection that stays
    assert sessions.expired(69) == []
    with pytest.raises(Refused) as late:  # idle long enough, though not swept yet: gone all the same
        sessions.claim(idle.session_id, "ops", 70)
    assert late.value.status == 404
    assert sessions.expired(70) == [idle]
    assert list(sessions.entries) == [held.session_id] and sessions.expired(10_000) == []
    sessions.end(held)
    assert len(sessions) == 0


def test_the_cap_refuses_new_sessions_until_one_ends_or_expires():
    sessions: Sessions[str] = Sessions(idle_s=5, cap=2)
    first = sessions.open("ops", "a", 0)
    sessions.open("ops", "b", 0)
    with pytest.raises(Refused) as full:
        sessions.open("ops", "c", 1)
    assert full.value.status == 503 and "console_chat_sessions" in full.value.message
    sessions.release(first, 1)
    sessions.expired(6)
    assert sessions.open("ops", "c", 6).conversation == "c"
    assert len(sessions.drain()) == 2 and len(sessions) == 0


# --- the message's JSON ------------------------------------------------------------------------------------------

def test_a_message_request_is_read_with_its_defaults():
    assert read_message(b'{"text": "hi"}') == read_message(b'{"text": "hi", "session_id": null}')
    request = read_message(json.dumps({"text": "hi", "session_id": "CHAT1", "agent": "a", "id": 7}).encode())
    assert (request.text, request.session_id, request.agent, request.reply_to) == ("hi", "CHAT1", "a", 7)
    assert read_message(b"{}").text == ""  # a new session with the agent's opening alone


@pytest.mark.parametrize("body, problem", [
    (b"{not json", "the body is not JSON"),
    (b"\xff\xfe", "the body is not JSON"),
    (b"[]", "expected a JSON object"),
    (b'{"text": "hi", "sessionid": "x"}', "unknown field 'sessionid'"),
    (b'{"session_id": "CHAT1"}', "text: expected a non-empty string"),
    (b'{"text": "   "}', "text: expected a non-empty string"),
    (b'{"text": 5}', "text: expected a non-empty string"),
    (json.dumps({"text": "x" * 2001}).encode(), "text: at most 2000 characters"),
    (b'{"text": "hi", "session_id": 5}', "session_id: expected"),
    (b'{"text": "hi", "agent": []}', "agent: expected a string"),
    (b'{"text": "hi", "id": {}}', "id: expected a string or a number"),
])
def test_a_bad_message_request_is_400_naming_what_is_wrong(body, problem):
    with pytest.raises(BadMessage) as bad:
        read_message(body)
    assert bad.value.status == 400 and bad.value.message.startswith(problem)


def test_the_answer_holds_the_lines_and_every_event_in_order():
    greeting = [{"type": "response", "text": "Hello.", "node": "start", "reply_to": None}]
    reply = [{"type": "event", "kind": "node", "text": "next", "data": {}},
             {"type": "response", "text": "Sure.", "node": "next", "reply_to": "m1"}]
    assert answer("CHAT1", "agent", True, greeting, reply, 12, "") == {
        "session_id": "CHAT1", "agent": "agent", "started": True, "greeting": ["Hello."], "replies": ["Sure."],
        "events": greeting + reply, "latency_ms": 12, "ended": None}
    assert answer("CHAT1", "agent", False, [], [], None, "completed")["ended"] == "completed"
