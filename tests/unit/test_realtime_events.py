"""voicecore.realtime.events: server events parse to canonical dataclasses whatever the naming (beta or GA),
bad input never raises, and the client events we build validate against the `openai` package's own types
(docs/explanation/protocols.md#c)."""

from __future__ import annotations

import base64
import json
import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

from voicecore.realtime import events as ev

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from openai.types.beta.realtime.realtime_client_event import RealtimeClientEvent as BetaClientEvent
    from openai.types.beta.realtime.realtime_server_event import RealtimeServerEvent as BetaServerEvent
    from openai.types.realtime.realtime_client_event import RealtimeClientEvent as GAClientEvent
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent as GAServerEvent

CLIENT_ADAPTERS = {"ga": TypeAdapter(GAClientEvent), "beta": TypeAdapter(BetaClientEvent)}
SERVER_ADAPTERS = {"ga": TypeAdapter(GAServerEvent), "beta": TypeAdapter(BetaServerEvent)}


def extras(model: Any, path: str = "") -> list[str]:
    """Keys the SDK type does not declare, anywhere in the validated model (openai models allow extras,
    so validation alone would not catch a misspelt key)."""
    found: list[str] = []
    if isinstance(model, BaseModel):
        found += [f"{path}.{key}" for key in (model.model_extra or {})]
        for name in type(model).model_fields:
            found += extras(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, (list, tuple)):
        for i, value in enumerate(model):
            found += extras(value, f"{path}[{i}]")
    return found


def validate_client(naming: str, text: str) -> BaseModel:
    try:
        model = CLIENT_ADAPTERS[naming].validate_python(json.loads(text))
    except ValidationError as exc:  # pragma: no cover - only on failure
        pytest.fail(f"{naming} client event does not validate: {text[:200]}\n{str(exc)[:2000]}")
    assert extras(model) == [], text
    return model


B64 = base64.b64encode(b"\xff\x7f" * 150).decode()

# One fixture per modelled server event type: (event, expected canonical dataclass), both spellings.
FIXTURES: list[tuple[dict[str, Any], Any]] = [
    (
        {"type": "session.created", "event_id": "event_1", "session": {"id": "sess_1"}},
        ev.SessionCreated({"id": "sess_1"}),
    ),
    ({"type": "session.updated", "event_id": "event_1", "session": {"a": 1}}, ev.SessionUpdated({"a": 1})),
    (
        {"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 1200, "item_id": "item_U"},
        ev.SpeechStarted(1200, "item_U"),
    ),
    (
        {"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 2500, "item_id": "item_U"},
        ev.SpeechStopped(2500, "item_U"),
    ),
    (
        {"type": "input_audio_buffer.committed", "event_id": "e", "item_id": "item_U", "previous_item_id": None},
        ev.InputCommitted("item_U", None),
    ),
    (
        {"type": "conversation.item.created", "event_id": "e", "previous_item_id": None,
         "item": {"id": "item_U", "type": "message", "role": "user", "content": []}},
        ev.ItemAdded("item_U", "user", "message", "created"),
    ),
    (
        {"type": "conversation.item.added", "event_id": "e",
         "item": {"id": "item_A", "type": "message", "role": "assistant", "content": []}},
        ev.ItemAdded("item_A", "assistant", "message", "added"),
    ),
    (
        {"type": "conversation.item.done", "event_id": "e",
         "item": {"id": "item_F", "type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"}},
        ev.ItemAdded("item_F", None, "function_call", "done"),
    ),
    (
        {"type": "response.created", "event_id": "e", "response": {"id": "resp_R", "status": "in_progress"}},
        ev.ResponseCreated("resp_R"),
    ),
    (
        {"type": "response.created", "event_id": "e",
         "response": {"id": "resp_R", "status": "in_progress", "metadata": {"vc_req": "3", "vc_prompt": "greeting"}}},
        ev.ResponseCreated("resp_R", {"vc_req": "3", "vc_prompt": "greeting"}),
    ),
    (
        {"type": "response.output_item.added", "event_id": "e", "response_id": "resp_R", "output_index": 0,
         "item": {"id": "item_A", "type": "message", "role": "assistant", "content": []}},
        ev.OutputItemAdded("resp_R", "item_A", "assistant"),
    ),
    (
        {"type": "response.output_audio.delta", "event_id": "e", "response_id": "resp_R", "item_id": "item_A",
         "output_index": 0, "content_index": 0, "delta": B64},
        ev.AudioDelta("resp_R", "item_A", b"\xff\x7f" * 150),
    ),
    (
        {"type": "response.audio.delta", "event_id": "e", "response_id": "resp_R", "item_id": "item_A",
         "output_index": 0, "content_index": 0, "delta": B64},
        ev.AudioDelta("resp_R", "item_A", b"\xff\x7f" * 150),
    ),
    (
        {"type": "response.output_audio.done", "event_id": "e", "response_id": "resp_R", "item_id": "item_A",
         "output_index": 0, "content_index": 0},
        ev.AudioDone("resp_R", "item_A"),
    ),
    (
        {"type": "response.audio.done", "event_id": "e", "response_id": "resp_R", "item_id": "item_A"},
        ev.AudioDone("resp_R", "item_A"),
    ),
    (
        {"type": "response.output_audio_transcript.delta", "event_id": "e", "response_id": "resp_R",
         "item_id": "item_A", "output_index": 0, "content_index": 0, "delta": " Hello", "obfuscation": "x9Qz"},
        ev.TranscriptDelta("resp_R", "item_A", " Hello"),
    ),
    (
        {"type": "response.audio_transcript.delta", "event_id": "e", "response_id": "resp_R", "item_id": "item_A",
         "delta": "Hi"},
        ev.TranscriptDelta("resp_R", "item_A", "Hi"),
    ),
    (
        {"type": "response.output_audio_transcript.done", "event_id": "e", "response_id": "resp_R",
         "item_id": "item_A", "transcript": "Hi there"},
        ev.TranscriptDone("resp_R", "item_A", "Hi there"),
    ),
    (
        {"type": "response.audio_transcript.done", "event_id": "e", "response_id": "resp_R", "item_id": "item_A",
         "transcript": "Hi there"},
        ev.TranscriptDone("resp_R", "item_A", "Hi there"),
    ),
    (
        {"type": "response.done", "event_id": "e",
         "response": {"id": "resp_R", "status": "cancelled",
                      "status_details": {"type": "cancelled", "reason": "turn_detected"}}},
        ev.ResponseDone("resp_R", "cancelled", "turn_detected", None),
    ),
    (
        {"type": "response.done", "event_id": "e", "response": {"id": "resp_R", "status": "completed",
                                                                "status_details": None}},
        ev.ResponseDone("resp_R", "completed", None, None),
    ),
    (
        {"type": "response.done", "event_id": "e",
         "response": {"id": "resp_R", "status": "failed",
                      "status_details": {"type": "failed", "error": {"type": "server_error", "code": "boom"}}}},
        ev.ResponseDone("resp_R", "failed", None, "boom"),
    ),
    (
        {"type": "conversation.item.truncated", "event_id": "e", "item_id": "item_A", "content_index": 0,
         "audio_end_ms": 1500},
        ev.ItemTruncated("item_A", 1500),
    ),
    ({"type": "conversation.item.deleted", "event_id": "e", "item_id": "item_A"}, ev.ItemDeleted("item_A")),
    (
        {"type": "conversation.item.input_audio_transcription.delta", "event_id": "e", "item_id": "item_U",
         "content_index": 0, "delta": "hel"},
        ev.InputTranscriptionDelta("item_U", "hel"),
    ),
    (
        {"type": "conversation.item.input_audio_transcription.completed", "event_id": "e", "item_id": "item_U",
         "content_index": 0, "transcript": "hello"},
        ev.InputTranscriptionCompleted("item_U", "hello"),
    ),
    (
        {"type": "conversation.item.input_audio_transcription.failed", "event_id": "e", "item_id": "item_U",
         "content_index": 0, "error": {"type": "transcription_error", "code": "audio_unintelligible",
                                       "message": "Audio could not be transcribed", "param": None}},
        ev.InputTranscriptionFailed("item_U", "Audio could not be transcribed"),
    ),
    (
        {"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "resp_R",
         "item_id": "item_F", "output_index": 0, "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        ev.FunctionCallArgumentsDone("resp_R", "item_F", "call_1", "lookup", "{}"),
    ),
    (
        {"type": "error", "event_id": "e",
         "error": {"type": "invalid_request_error", "code": "response_cancel_not_active",
                   "message": "Cancellation failed: no active response found", "param": None, "event_id": "c1"}},
        ev.RealtimeError("invalid_request_error", "response_cancel_not_active",
                         "Cancellation failed: no active response found", "c1", None),
    ),
    ({"type": "rate_limits.updated", "event_id": "e", "rate_limits": []}, ev.Unhandled("rate_limits.updated")),
    ({"type": "some.future.event", "x": 1}, ev.Unhandled("some.future.event")),
]


@pytest.mark.parametrize("event,expected", FIXTURES, ids=[f[0]["type"] for f in FIXTURES])
def test_parse_fixture(event: dict[str, Any], expected: Any) -> None:
    text = json.dumps(event)
    assert ev.parse_server_event(text) == expected
    assert ev.parse_server_event(text.encode()) == expected  # bytes in (a binary frame)
    # garbage after a whole event is not an event
    assert isinstance(ev.parse_server_event(text + "x"), ev.MalformedEvent)


def test_every_modelled_type_has_a_fixture() -> None:
    assert ev.SERVER_EVENT_TYPES <= {f[0]["type"] for f in FIXTURES}


REQUIRED_CASES = [
    (event, key)
    for event, expected in FIXTURES
    if not isinstance(expected, ev.Unhandled)
    for key in event
    if key not in ("type", "event_id", "obfuscation", "previous_item_id", "output_index", "content_index")
    and (event["type"], key) != ("response.function_call_arguments.done", "name")  # optional: beta lacks it
    and (event["type"], key) != ("conversation.item.input_audio_transcription.delta", "delta")  # optional (C.3)
]


@pytest.mark.parametrize("event,key", REQUIRED_CASES, ids=[f"{e['type']}-{k}" for e, k in REQUIRED_CASES])
def test_missing_required_field_is_malformed(event: dict[str, Any], key: str) -> None:
    broken = {k: v for k, v in event.items() if k != key}
    result = ev.parse_server_event(json.dumps(broken))
    assert isinstance(result, ev.MalformedEvent), result
    assert event["type"] in result.reason


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[1, 2]",
        '"session.created"',
        "null",
        "{}",
        '{"type": 5}',
        b"\xff\xfe{}",
        '{"type":"input_audio_buffer.speech_started","audio_start_ms":true,"item_id":"i"}',
        '{"type":"input_audio_buffer.speech_started","audio_start_ms":1.5,"item_id":"i"}',
        '{"type":"response.output_audio.delta","response_id":"r","item_id":"i","delta":"@@@@"}',
        '{"type":"response.output_audio.delta","response_id":"r","item_id":"i","delta":"/w="}',
        '{"type":"response.output_audio.delta","response_id":"r","item_id":"i","delta":"/w==\\n"}',
        '{"type":"response.output_audio.delta","response_id":"r","item_id":"i","delta":"\u00e9\u00e9\u00e9\u00e9"}',
        '{"type":"response.done","response":{"id":"r","status":"cancelled","status_details":"x"}}',
        '{"type":"session.created","session":[]}',
        '{"type":"conversation.item.added","item":{"id":"i","type":"message","role":7}}',
        "[" * 100_000,
    ],
)
def test_malformed_input_never_raises(text: str | bytes) -> None:
    assert isinstance(ev.parse_server_event(text), ev.MalformedEvent)


def test_audio_delta_decodes_exact_bytes_and_empty_delta() -> None:
    audio = bytes(range(256)) * 3
    text = json.dumps({"type": "response.audio.delta", "response_id": "r", "item_id": "i",
                       "delta": base64.b64encode(audio).decode()})
    assert ev.parse_server_event(text) == ev.AudioDelta("r", "i", audio)
    text = json.dumps({"type": "response.audio.delta", "response_id": "r", "item_id": "i", "delta": ""})
    assert ev.parse_server_event(text) == ev.AudioDelta("r", "i", b"")


@given(st.one_of(st.text(), st.binary()))
def test_fuzz_text_never_raises(data: str | bytes) -> None:
    assert ev.parse_server_event(data) is not None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)


@given(st.sampled_from(sorted(ev.SERVER_EVENT_TYPES)), st.dictionaries(
    st.sampled_from(["response_id", "item_id", "delta", "transcript", "audio_start_ms", "audio_end_ms", "item",
                     "response", "session", "error", "call_id", "arguments", "name", "status_details"]),
    json_values, max_size=6))
def test_fuzz_known_types_with_random_fields_never_raise(event_type: str, fields: dict[str, Any]) -> None:
    result = ev.parse_server_event(json.dumps({"type": event_type, **fields}))
    assert not isinstance(result, ev.Unhandled)


# ---- client builders ------------------------------------------------------------------------------

TD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
      "create_response": True, "interrupt_response": True}


def test_session_update_ga_shape() -> None:
    text = ev.session_update("ga", "Be brief.", "alloy", TD, "gpt-4o-mini-transcribe", event_id="evt_1")
    event = json.loads(text)
    session = event["session"]
    assert event["event_id"] == "evt_1"
    assert session["type"] == "realtime"
    # audio/pcmu takes no rate key (C.1)
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["output"] == {"format": {"type": "audio/pcmu"}, "voice": "alloy"}
    assert session["audio"]["input"]["turn_detection"] == TD
    assert session["audio"]["input"]["transcription"] == {"model": "gpt-4o-mini-transcribe"}
    assert " " not in text.replace("Be brief.", "")  # compact
    validate_client("ga", text)


def test_session_update_beta_shape() -> None:
    text = ev.session_update("beta", "Be brief.", "alloy", None, None)
    session = json.loads(text)["session"]
    assert session["input_audio_format"] == session["output_audio_format"] == "g711_ulaw"
    assert session["turn_detection"] is None and session["input_audio_transcription"] is None
    assert session["voice"] == "alloy" and "audio" not in session and "type" not in session
    validate_client("beta", text)


def test_session_update_without_voice_and_bad_naming() -> None:
    assert "voice" not in json.loads(ev.session_update("ga", "x", None, TD))["session"]["audio"]["output"]
    assert "voice" not in json.loads(ev.session_update("beta", "x", None, TD))["session"]
    with pytest.raises(ValueError):
        ev.session_update("v2", "x", None, None)  # type: ignore[arg-type]


BUILT = [
    ev.input_audio_append(b"\xff" * 160),
    ev.input_audio_append(b"\x00\x01", event_id='ev"1'),
    ev.input_audio_commit(),
    ev.input_audio_commit(event_id="c1"),
    ev.input_audio_clear(),
    ev.response_create(),
    ev.response_create(instructions="Say exactly: hello", metadata={"turn": "3"}, event_id="r1"),
    ev.response_cancel(),
    ev.response_cancel("resp_1", event_id="x"),
    ev.item_truncate("item_1", 1234),
    ev.item_truncate("item_1", 1234.9, event_id="t"),  # type: ignore[arg-type]
    ev.item_delete("item_1"),
    ev.conversation_item_create_user_text("What does Basic cost?", event_id="u1"),
    ev.function_call_output("call_1", '{"found": true}'),
    ev.function_call_output("call_2", "ok", event_id="f1"),
]


@pytest.mark.parametrize("text", BUILT)
@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_client_events_validate_against_openai_types(naming: str, text: str) -> None:
    model = validate_client(naming, text)
    assert model.type == json.loads(text)["type"]  # type: ignore[attr-defined]


def test_builder_contents() -> None:
    append = json.loads(ev.input_audio_append(b"\x00\x01", event_id='ev"1'))
    assert base64.b64decode(append["audio"]) == b"\x00\x01" and append["event_id"] == 'ev"1'
    assert json.loads(ev.response_create()) == {"type": "response.create"}
    assert json.loads(ev.response_create(metadata={"a": "b"}))["response"] == {"metadata": {"a": "b"}}
    assert json.loads(ev.response_cancel()) == {"type": "response.cancel"}
    assert json.loads(ev.response_cancel("resp_1"))["response_id"] == "resp_1"
    assert json.loads(ev.item_truncate("i", 1234.9)) == {  # type: ignore[arg-type]
        "type": "conversation.item.truncate", "item_id": "i", "content_index": 0, "audio_end_ms": 1234}
    assert json.loads(ev.item_delete("i")) == {"type": "conversation.item.delete", "item_id": "i"}
    item = json.loads(ev.conversation_item_create_user_text("hi"))["item"]
    assert item == {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def test_function_call_output_is_a_conversation_item_for_the_call() -> None:
    text = ev.function_call_output("call_1", '{"name": "Jonas", "note": "\u00e9"}')
    assert json.loads(text) == {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_1", "output": '{"name": "Jonas", "note": "\u00e9"}'}}
    # compact, and non-ASCII as UTF-8 text (the controller's records hold these exact bytes)
    assert text == ('{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"call_1",'
                    '"output":"{\\"name\\": \\"Jonas\\", \\"note\\": \\"\u00e9\\"}"}}')
    assert json.loads(ev.function_call_output("c", "x", event_id="f1"))["event_id"] == "f1"


@pytest.mark.parametrize("metadata,expected", [
    ({"vc_req": "7"}, {"vc_req": "7"}),
    ({}, {}),
    (None, None),
    ("not an object", None),
    (["vc_req"], None),
])
def test_response_created_carries_the_metadata_of_the_request(metadata: Any, expected: Any) -> None:
    response: dict[str, Any] = {"id": "resp_R", "status": "in_progress"}
    if metadata is not None:
        response["metadata"] = metadata
    parsed = ev.parse_server_event(json.dumps({"type": "response.created", "response": response}))
    assert parsed == ev.ResponseCreated("resp_R", expected)


def test_input_transcription_delta_without_text_is_an_empty_delta() -> None:
    text = json.dumps({"type": "conversation.item.input_audio_transcription.delta", "item_id": "item_U"})
    assert ev.parse_server_event(text) == ev.InputTranscriptionDelta("item_U", "")
    bad = json.dumps({"type": "conversation.item.input_audio_transcription.delta", "item_id": "item_U", "delta": 5})
    assert isinstance(ev.parse_server_event(bad), ev.MalformedEvent)


@pytest.mark.parametrize("event", [
    {"type": "conversation.item.input_audio_transcription.delta", "event_id": "e", "item_id": "item_U",
     "content_index": 0, "delta": "hel"},
    {"type": "response.created", "event_id": "e", "response": {"id": "resp_R", "object": "realtime.response",
     "status": "in_progress", "metadata": {"vc_req": "3"}}},
])
@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_new_server_fixtures_match_the_sdk_types(naming: str, event: dict[str, Any]) -> None:
    """The shapes parsed for the controller are the vendor's own (docs/explanation/protocols.md#c3), in both
    namings."""
    model = SERVER_ADAPTERS[naming].validate_python(event)
    assert model.type == event["type"]  # type: ignore[attr-defined]


def test_realtime_url_and_headers() -> None:
    ga = ev.RealtimeUrl("gpt-realtime")
    assert ga.url() == "wss://api.openai.com/v1/realtime?model=gpt-realtime"
    assert ga.headers("sk-x") == [("Authorization", "Bearer sk-x")]
    beta = ev.RealtimeUrl("gpt-4o-realtime-preview", naming="beta", base_url="ws://127.0.0.1:9100/v1/realtime")
    assert beta.url() == "ws://127.0.0.1:9100/v1/realtime?model=gpt-4o-realtime-preview"
    assert beta.headers("k", call_sid="CA123") == [
        ("Authorization", "Bearer k"), ("OpenAI-Beta", "realtime=v1"), ("X-Voicecore-Call", "CA123")]
    assert ev.RealtimeUrl("a b&c").url().endswith("?model=a%20b%26c")
    with pytest.raises(ValueError):
        ev.RealtimeUrl("m", naming="v9").headers("k")  # type: ignore[arg-type]


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_headers_carry_no_call_id_unless_given_one(naming) -> None:
    """Privacy: X-Voicecore-Call (the CallSid) goes out only when the caller of headers() passes it,
    which the model worker does only when configured (test_config: send_call_id_to_vendor)."""
    url = ev.RealtimeUrl("gpt-realtime", naming=naming)
    names = [name for name, _ in url.headers("sk-x")]
    assert names == (["Authorization"] if naming == "ga" else ["Authorization", "OpenAI-Beta"])
    assert url.headers("sk-x", call_sid=None) == url.headers("sk-x")
    assert url.headers("sk-x", call_sid="CA9")[-1] == ("X-Voicecore-Call", "CA9")


def test_events_module_is_pure() -> None:
    source = open(ev.__file__, encoding="utf-8").read()
    for name in ("asyncio", "websockets", "time", "os", "random", "uuid", "zmq"):
        assert f"import {name}\n" not in source and f"from {name} " not in source
