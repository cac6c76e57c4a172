"""Client side of the OpenAI Realtime WebSocket protocol, sans-I/O: parse server events, build client events.

Owns the wire vocabulary of docs/explanation/protocols.md#c: the beta and GA names of every server event we act
on (#c1), their required fields (#c3), and the JSON of the client events we send (#c2). Server events
become frozen dataclasses with one canonical name whatever the naming; client events are built as
compact JSON strings. Must not know sockets, clocks, calls, tags or frames: the model worker's shell
feeds text in and writes text out.

Bad peer input never raises out of `parse_server_event`: it becomes `MalformedEvent(reason)`. Unknown
keys are ignored (real GA traffic carries an undocumented `obfuscation` string, C.3). Our own misuse of
a builder (an unknown naming) raises ValueError.

`read_server_event` reads the text of a server event kept in a call record (voicecore/call/record_reader.py
walks records with it): the same typed events, read as far as they go. A live event with a required field
missing is not acted on (malformed); a recorded one is still what the vendor said, and its readers (the
observer, the call store) show what it holds: a missing or mistyped field takes a default ("" for a text,
None for a number), never raising either.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Callable, Literal, Union
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import orjson

from voicecore.errors import PeerInputError

Naming = Literal["ga", "beta"]

# --------------------------------------------------------------------------------------------------
# Server events (canonical names; see C.1 for the beta/GA spellings each one covers)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionCreated:
    session: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SessionUpdated:
    session: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    # ms into all audio appended this session, prefix padding included (C.3); None only from
    # read_server_event, for a recorded event without it
    audio_start_ms: int | None
    item_id: str  # the user item that will be created


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    audio_end_ms: int | None  # None only from read_server_event, as audio_start_ms
    item_id: str


@dataclass(frozen=True, slots=True)
class InputCommitted:
    item_id: str
    previous_item_id: str | None = None


@dataclass(frozen=True, slots=True)
class ItemAdded:
    """conversation.item.created (beta), conversation.item.added and conversation.item.done (GA)."""

    item_id: str
    role: str | None  # None for function_call items
    item_type: str  # "message" | "function_call" | "function_call_output" | ...
    stage: str  # "created" | "added" | "done": which of the three events this was


@dataclass(frozen=True, slots=True)
class ResponseCreated:
    response_id: str
    # response.metadata as the server echoes it from our response.create (C.2): string values on the
    # wire, kept as sent; None when absent or not an object. It is how a response is matched to the
    # request that asked for it.
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class OutputItemAdded:
    response_id: str
    item_id: str
    role: str | None


@dataclass(frozen=True, slots=True)
class AudioDelta:
    response_id: str
    item_id: str
    audio: bytes  # base64-decoded (strictly), in the session's output format


@dataclass(frozen=True, slots=True)
class AudioDone:
    response_id: str
    item_id: str


@dataclass(frozen=True, slots=True)
class TranscriptDelta:
    response_id: str
    item_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class TranscriptDone:
    response_id: str
    item_id: str
    transcript: str


@dataclass(frozen=True, slots=True)
class ResponseDone:
    response_id: str
    status: str  # completed | cancelled | incomplete | failed
    reason: str | None  # turn_detected | client_cancelled | max_output_tokens | content_filter
    error_code: str | None = None  # status_details.error.code when status is failed


@dataclass(frozen=True, slots=True)
class ItemTruncated:
    item_id: str
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class ItemDeleted:
    item_id: str


@dataclass(frozen=True, slots=True)
class InputTranscriptionDelta:
    """Part of the caller's words while transcription runs (C.3: ``delta`` may be absent: "")."""

    item_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class InputTranscriptionCompleted:
    item_id: str
    transcript: str


@dataclass(frozen=True, slots=True)
class InputTranscriptionFailed:
    """The caller's words for this item will not come (the vendor's transcription failed)."""

    item_id: str
    message: str


@dataclass(frozen=True, slots=True)
class FunctionCallArgumentsDone:
    response_id: str
    item_id: str
    call_id: str
    name: str | None  # GA carries it; the beta type does not
    arguments: str


@dataclass(frozen=True, slots=True)
class RealtimeError:
    type: str
    code: str | None
    message: str
    event_id: str | None  # the client event id the error answers, when the client sent one
    param: str | None


@dataclass(frozen=True, slots=True)
class Unhandled:
    """A well-formed event this module does not model (content_part.*, rate_limits.updated, ...)."""

    type: str


@dataclass(frozen=True, slots=True)
class MalformedEvent:
    reason: str


ServerEvent = Union[
    SessionCreated,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    InputCommitted,
    ItemAdded,
    ResponseCreated,
    OutputItemAdded,
    AudioDelta,
    AudioDone,
    TranscriptDelta,
    TranscriptDone,
    ResponseDone,
    ItemTruncated,
    ItemDeleted,
    InputTranscriptionDelta,
    InputTranscriptionCompleted,
    InputTranscriptionFailed,
    FunctionCallArgumentsDone,
    RealtimeError,
    Unhandled,
    MalformedEvent,
]


class _Bad(PeerInputError):
    """Internal: a required field is missing or mistyped. Never leaves this module."""


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _Bad(f"{key} missing or not a string")
    return value


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise _Bad(f"{key} not a string")
    return value


def _int(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    # bool is an int subclass; `true` is not a millisecond count
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Bad(f"{key} missing or not an integer")
    return value


def _obj(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise _Bad(f"{key} missing or not an object")
    return value


def _audio(obj: dict[str, Any]) -> bytes:
    text = _str(obj, "delta")
    try:
        # strict_mode: junk characters and bad padding are errors, not silently skipped (ARCH. 11)
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise _Bad(f"delta is not valid base64 ({exc})") from None


def _item_event(stage: str) -> Callable[[dict[str, Any]], ServerEvent]:
    def parse(event: dict[str, Any]) -> ServerEvent:
        item = _obj(event, "item")
        return ItemAdded(_str(item, "id"), _opt_str(item, "role"), _str(item, "type"), stage)

    return parse


def _output_item_added(event: dict[str, Any]) -> ServerEvent:
    item = _obj(event, "item")
    return OutputItemAdded(_str(event, "response_id"), _str(item, "id"), _opt_str(item, "role"))


def _response_done(event: dict[str, Any]) -> ServerEvent:
    response = _obj(event, "response")
    details = response.get("status_details")
    reason = error_code = None
    if details is not None:
        if not isinstance(details, dict):
            raise _Bad("response.status_details not an object")
        reason = _opt_str(details, "reason")
        error = details.get("error")
        if isinstance(error, dict):
            error_code = _opt_str(error, "code")
    return ResponseDone(_str(response, "id"), _str(response, "status"), reason, error_code)


def _response_created(event: dict[str, Any]) -> ServerEvent:
    response = _obj(event, "response")
    metadata = response.get("metadata")
    return ResponseCreated(_str(response, "id"), metadata if isinstance(metadata, dict) else None)


def _error(event: dict[str, Any]) -> ServerEvent:
    error = _obj(event, "error")
    return RealtimeError(
        type=_str(error, "type"),
        code=_opt_str(error, "code"),
        message=_str(error, "message"),
        event_id=_opt_str(error, "event_id"),
        param=_opt_str(error, "param"),
    )


def _audio_delta(e: dict[str, Any]) -> ServerEvent:
    return AudioDelta(_str(e, "response_id"), _str(e, "item_id"), _audio(e))


def _audio_done(e: dict[str, Any]) -> ServerEvent:
    return AudioDone(_str(e, "response_id"), _str(e, "item_id"))


def _transcript_delta(e: dict[str, Any]) -> ServerEvent:
    return TranscriptDelta(_str(e, "response_id"), _str(e, "item_id"), _str(e, "delta"))


def _transcription_failed(e: dict[str, Any]) -> ServerEvent:
    message = _obj(e, "error").get("message")
    return InputTranscriptionFailed(_str(e, "item_id"), message if isinstance(message, str) else "")


def _transcript_done(e: dict[str, Any]) -> ServerEvent:
    return TranscriptDone(_str(e, "response_id"), _str(e, "item_id"), _str(e, "transcript"))


# One row per server event type we model; beta and GA spellings point at the same parser (C.1).
_PARSERS: dict[str, Callable[[dict[str, Any]], ServerEvent]] = {
    "session.created": lambda e: SessionCreated(_obj(e, "session")),
    "session.updated": lambda e: SessionUpdated(_obj(e, "session")),
    "input_audio_buffer.speech_started": lambda e: SpeechStarted(_int(e, "audio_start_ms"), _str(e, "item_id")),
    "input_audio_buffer.speech_stopped": lambda e: SpeechStopped(_int(e, "audio_end_ms"), _str(e, "item_id")),
    "input_audio_buffer.committed": lambda e: InputCommitted(_str(e, "item_id"), _opt_str(e, "previous_item_id")),
    "conversation.item.created": _item_event("created"),  # beta (GA union still lists it)
    "conversation.item.added": _item_event("added"),  # GA
    "conversation.item.done": _item_event("done"),  # GA
    "response.created": _response_created,
    "response.output_item.added": _output_item_added,
    "response.audio.delta": _audio_delta,  # beta
    "response.output_audio.delta": _audio_delta,  # GA
    "response.audio.done": _audio_done,
    "response.output_audio.done": _audio_done,
    "response.audio_transcript.delta": _transcript_delta,
    "response.output_audio_transcript.delta": _transcript_delta,
    "response.audio_transcript.done": _transcript_done,
    "response.output_audio_transcript.done": _transcript_done,
    "response.done": _response_done,
    "conversation.item.truncated": lambda e: ItemTruncated(_str(e, "item_id"), _int(e, "audio_end_ms")),
    "conversation.item.deleted": lambda e: ItemDeleted(_str(e, "item_id")),
    "conversation.item.input_audio_transcription.delta": lambda e: InputTranscriptionDelta(
        _str(e, "item_id"), _opt_str(e, "delta") or ""
    ),
    "conversation.item.input_audio_transcription.completed": lambda e: InputTranscriptionCompleted(
        _str(e, "item_id"), _str(e, "transcript")
    ),
    "conversation.item.input_audio_transcription.failed": _transcription_failed,
    "response.function_call_arguments.done": lambda e: FunctionCallArgumentsDone(
        _str(e, "response_id"), _str(e, "item_id"), _str(e, "call_id"), _opt_str(e, "name"), _str(e, "arguments")
    ),
    "error": _error,
}

SERVER_EVENT_TYPES: frozenset[str] = frozenset(_PARSERS)

# Server event names, GA and beta, for readers of raw event text (records, observers, the call store).
AUDIO_DELTA_TYPES = frozenset({"response.output_audio.delta", "response.audio.delta"})
TRANSCRIPT_DELTA_TYPES = frozenset({"response.output_audio_transcript.delta", "response.audio_transcript.delta"})
TRANSCRIPT_DONE_TYPES = frozenset({"response.output_audio_transcript.done", "response.audio_transcript.done"})
CALLER_TRANSCRIPT_DONE = "conversation.item.input_audio_transcription.completed"
# In the head of an audio delta's text (our writers and the vendors put "type" first), and in no other
# event's: lets a reader skip the bulk of a call's events without parsing them.
AUDIO_DELTA_MARK = 'audio.delta"'


def parse_server_event(text: str | bytes) -> ServerEvent:
    """One WebSocket message from the model, as a typed event. Never raises."""
    try:
        if isinstance(text, (bytearray, memoryview)):
            text = bytes(text)
        event = orjson.loads(text)  # strict JSON, UTF-8 checked, ~3x json.loads on large audio deltas
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return MalformedEvent(f"not JSON text: {type(exc).__name__}")
    if not isinstance(event, dict):
        return MalformedEvent("not a JSON object")
    event_type = event.get("type")
    if not isinstance(event_type, str):
        return MalformedEvent("type missing or not a string")
    parser = _PARSERS.get(event_type)
    if parser is None:
        return Unhandled(event_type)
    try:
        return parser(event)
    except _Bad as exc:
        return MalformedEvent(f"{event_type}: {exc}")


# --------------------------------------------------------------------------------------------------
# Recorded server events, read as far as they go (module docstring)
# --------------------------------------------------------------------------------------------------


def _text(obj: dict[str, Any], key: str) -> str:
    """A text field as its readers show it: "" when absent, any other JSON value written out."""
    return str(obj.get(key, ""))


def _number(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _label(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def _member(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _recorded_audio(obj: dict[str, Any]) -> bytes:
    value = obj.get("delta")
    try:
        return binascii.a2b_base64(value) if isinstance(value, str) else b""
    except (binascii.Error, ValueError):
        return b""


def _recorded_response_done(e: dict[str, Any]) -> ServerEvent:
    response = _member(e, "response")
    details = _member(response, "status_details")
    return ResponseDone(_text(response, "id"), _text(response, "status"), _label(details, "reason"),
                        _label(_member(details, "error"), "code"))


def _recorded_response_created(e: dict[str, Any]) -> ServerEvent:
    response = _member(e, "response")
    metadata = response.get("metadata")
    return ResponseCreated(_text(response, "id"), metadata if isinstance(metadata, dict) else None)


def _recorded_error(e: dict[str, Any]) -> ServerEvent:
    error = e.get("error") or {}
    if not isinstance(error, dict):
        return RealtimeError(type="", code=None, message=str(error), event_id=None, param=None)
    kind, code = error.get("type"), error.get("code")
    return RealtimeError(type=str(kind) if kind else "", code=str(code) if code else None, message=_text(error, "message"),
                         event_id=_label(error, "event_id"), param=_label(error, "param"))


def _recorded_audio_delta(e: dict[str, Any]) -> ServerEvent:
    return AudioDelta(_text(e, "response_id"), _text(e, "item_id"), _recorded_audio(e))


def _recorded_transcript_delta(e: dict[str, Any]) -> ServerEvent:
    return TranscriptDelta(_text(e, "response_id"), _text(e, "item_id"), _text(e, "delta"))


def _recorded_transcript_done(e: dict[str, Any]) -> ServerEvent:
    return TranscriptDone(_text(e, "response_id"), _text(e, "item_id"), _text(e, "transcript"))


# The events records are read for (the caller's turns, the answers, what was said, tools, errors), beta and
# GA alike; any other type is parsed as live (_PARSERS).
_RECORDED: dict[str, Callable[[dict[str, Any]], ServerEvent]] = {
    "input_audio_buffer.speech_started": lambda e: SpeechStarted(_number(e, "audio_start_ms"), _text(e, "item_id")),
    "input_audio_buffer.speech_stopped": lambda e: SpeechStopped(_number(e, "audio_end_ms"), _text(e, "item_id")),
    "response.created": _recorded_response_created,
    "response.done": _recorded_response_done,
    "response.audio.delta": _recorded_audio_delta,
    "response.output_audio.delta": _recorded_audio_delta,
    "response.audio_transcript.delta": _recorded_transcript_delta,
    "response.output_audio_transcript.delta": _recorded_transcript_delta,
    "response.audio_transcript.done": _recorded_transcript_done,
    "response.output_audio_transcript.done": _recorded_transcript_done,
    "conversation.item.input_audio_transcription.delta": lambda e: InputTranscriptionDelta(_text(e, "item_id"),
                                                                                           _text(e, "delta")),
    "conversation.item.input_audio_transcription.completed": lambda e: InputTranscriptionCompleted(
        _text(e, "item_id"), _text(e, "transcript")),
    "response.function_call_arguments.done": lambda e: FunctionCallArgumentsDone(
        _text(e, "response_id"), _text(e, "item_id"), _text(e, "call_id"), _text(e, "name"), _text(e, "arguments")),
    "error": _recorded_error,
}


def read_server_event(text: str | bytes) -> ServerEvent:
    """A server event's text as a call record keeps it, as a typed event read as far as it goes (module
    docstring): text that is not a JSON object with a string ``type`` is a MalformedEvent, an unknown type
    Unhandled. Never raises."""
    try:
        event = orjson.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError) as exc:
        return MalformedEvent(f"not JSON text: {type(exc).__name__}")
    if not isinstance(event, dict):
        return MalformedEvent("not a JSON object")
    event_type = event.get("type")
    if not isinstance(event_type, str):
        return MalformedEvent("type missing or not a string")
    parser = _RECORDED.get(event_type) or _PARSERS.get(event_type)
    if parser is None:
        return Unhandled(event_type)
    try:
        return parser(event)
    except _Bad as exc:
        return MalformedEvent(f"{event_type}: {exc}")


# --------------------------------------------------------------------------------------------------
# Client events (C.2). Each builder returns compact JSON text ready for the socket.
# --------------------------------------------------------------------------------------------------


def _dump(event: dict[str, Any], event_id: str | None) -> str:
    if event_id is not None:
        event["event_id"] = event_id
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def _check_naming(naming: str) -> None:
    if naming not in ("ga", "beta"):
        raise ValueError(f"naming must be 'ga' or 'beta', not {naming!r}")


# The model side's G.711 formats (voicecore/g711.py PCMU / PCMA) by naming: GA type, beta string (C.1).
_G711_FORMATS = {"pcmu": ("audio/pcmu", "g711_ulaw"), "pcma": ("audio/pcma", "g711_alaw")}


def session_update(
    naming: Naming,
    instructions: str,
    voice: str | None,
    turn_detection: dict[str, Any] | None,
    transcription_model: str | None = None,
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    event_id: str | None = None,
    audio_format: str = "pcmu",
) -> str:
    """session.update for G.711 in and out, in the beta flat shape or the GA nested shape (C.1):
    ``audio_format`` "pcmu" (mu-law: ``audio/pcmu`` / ``g711_ulaw``) or "pcma" (A-law, a call whose carrier
    streams it: ``audio/pcma`` / ``g711_alaw``), the same both ways.

    `turn_detection=None` is sent as null: no server VAD, the client commits (C.4). `voice=None` leaves
    the voice as it is. `transcription_model=None` turns input transcription off. `tools`: the function
    tools the model may call (``{"type": "function", "name", "description", "parameters"}``, the same in
    both shapes), with ``tool_choice`` auto; an empty list clears them; None leaves them as they are.
    """
    _check_naming(naming)
    if audio_format not in _G711_FORMATS:
        raise ValueError(f"audio_format must be 'pcmu' or 'pcma', not {audio_format!r}")
    ga_format, beta_format = _G711_FORMATS[audio_format]
    transcription = None if transcription_model is None else {"model": transcription_model}
    session: dict[str, Any]
    if naming == "ga":
        # audio/pcmu and audio/pcma take no `rate` key: the server rejects it as an unknown parameter (C.1)
        output: dict[str, Any] = {"format": {"type": ga_format}}
        if voice is not None:
            output["voice"] = voice
        session = {
            "type": "realtime",
            "instructions": instructions,
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": {"type": ga_format},
                    "turn_detection": turn_detection,
                    "transcription": transcription,
                },
                "output": output,
            },
        }
    else:
        session = {
            "instructions": instructions,
            "modalities": ["text", "audio"],
            "input_audio_format": beta_format,
            "output_audio_format": beta_format,
            "turn_detection": turn_detection,
            "input_audio_transcription": transcription,
        }
        if voice is not None:
            session["voice"] = voice
    if tools is not None:
        session["tools"] = list(tools)
        session["tool_choice"] = "auto"
    return _dump({"type": "session.update", "session": session}, event_id)


def input_audio_append(audio: bytes, *, event_id: str | None = None) -> str:
    """input_audio_buffer.append. Built by concatenation: base64 needs no JSON escaping (hot path)."""
    b64 = binascii.b2a_base64(audio, newline=False).decode("ascii")
    if event_id is None:
        return '{"type":"input_audio_buffer.append","audio":"' + b64 + '"}'
    return '{"type":"input_audio_buffer.append","audio":"' + b64 + '","event_id":' + json.dumps(event_id) + "}"


def input_audio_commit(*, event_id: str | None = None) -> str:
    return _dump({"type": "input_audio_buffer.commit"}, event_id)


def input_audio_clear(*, event_id: str | None = None) -> str:
    return _dump({"type": "input_audio_buffer.clear"}, event_id)


def response_create(
    instructions: str | None = None, metadata: dict[str, str] | None = None, *, event_id: str | None = None
) -> str:
    """response.create; the `response` object is sent only when it has something in it."""
    event: dict[str, Any] = {"type": "response.create"}
    response: dict[str, Any] = {}
    if instructions is not None:
        response["instructions"] = instructions
    if metadata is not None:
        response["metadata"] = metadata
    if response:
        event["response"] = response
    return _dump(event, event_id)


def response_cancel(response_id: str | None = None, *, event_id: str | None = None) -> str:
    """response.cancel; without `response_id` the server cancels the active response (C.2)."""
    event: dict[str, Any] = {"type": "response.cancel"}
    if response_id is not None:
        event["response_id"] = response_id
    return _dump(event, event_id)


def item_truncate(item_id: str, audio_end_ms: int, content_index: int = 0, *, event_id: str | None = None) -> str:
    """conversation.item.truncate: `audio_end_ms` is audio actually played, capped at the item (C.5)."""
    return _dump(
        {
            "type": "conversation.item.truncate",
            "item_id": item_id,
            "content_index": content_index,
            "audio_end_ms": int(audio_end_ms),
        },
        event_id,
    )


def item_delete(item_id: str, *, event_id: str | None = None) -> str:
    return _dump({"type": "conversation.item.delete", "item_id": item_id}, event_id)


def conversation_item_create_user_text(text: str, *, event_id: str | None = None) -> str:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return _dump({"type": "conversation.item.create", "item": item}, event_id)


def conversation_item_create_message(role: str, text: str, *, event_id: str | None = None) -> str:
    """conversation.item.create of a message item: system and user text is ``input_text``, the assistant's
    ``output_text`` (a flow's task messages after a context reset)."""
    if role not in ("system", "user", "assistant"):
        raise ValueError(f"message role must be system, user or assistant, not {role!r}")
    kind = "output_text" if role == "assistant" else "input_text"
    item = {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
    return _dump({"type": "conversation.item.create", "item": item}, event_id)


def function_call_output(call_id: str, output: str, *, event_id: str | None = None) -> str:
    """conversation.item.create of a function_call_output item: a tool's result for ``call_id`` (C.2)."""
    item = {"type": "function_call_output", "call_id": call_id, "output": output}
    return _dump({"type": "conversation.item.create", "item": item}, event_id)


# --------------------------------------------------------------------------------------------------
# Connection (C.0)
# --------------------------------------------------------------------------------------------------


# Hosts of Azure OpenAI resources (the Realtime API of a deployment there): the key goes in `api-key`.
AZURE_HOST_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")
PROVIDERS = ("openai", "azure")


def detect_provider(url: str) -> str:
    """"azure" for a URL on an Azure OpenAI resource's host, else "openai" (OpenAI, a proxy in front of
    it, the simulator)."""
    host = (urlsplit(url).hostname or "").lower()
    return "azure" if host.endswith(AZURE_HOST_SUFFIXES) else "openai"


@dataclass(frozen=True, slots=True)
class RealtimeUrl:
    """Where and how to open the realtime WebSocket. `base_url` points at the simulator in tests.

    ``provider`` "openai": ``?model=MODEL`` and ``Authorization: Bearer KEY``. "azure" (Azure OpenAI):
    the deployment's name (``deployment``, else ``model``) as ``?model=`` on the GA path
    (``/openai/v1/realtime``) or ``&deployment=`` on the older ``/openai/realtime`` path, and the key in
    ``api-key``. A query string already in ``base_url`` (Azure's ``api-version``) is kept as it is, and a
    ``model`` or ``deployment`` it already names is not added twice."""

    model: str
    naming: Naming = "ga"
    base_url: str = "wss://api.openai.com/v1/realtime"
    provider: str = "openai"
    deployment: str = ""

    def url(self) -> str:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be openai or azure, not {self.provider!r}")
        parts = urlsplit(self.base_url)
        named = {key for key, _ in parse_qsl(parts.query, keep_blank_values=True)}
        query = parts.query
        if not named & {"model", "deployment"}:
            key = "model"
            if self.provider == "azure" and parts.path.rstrip("/").endswith("/openai/realtime"):
                key = "deployment"  # the pre-v1 path names the deployment so
            name = self.deployment if self.provider == "azure" and self.deployment else self.model
            added = f"{key}={quote(name, safe='')}"
            query = f"{query}&{added}" if query else added
        return urlunsplit(parts._replace(query=query))

    def headers(self, api_key: str, call_sid: str | None = None) -> list[tuple[str, str]]:
        """The key (``Authorization: Bearer`` for OpenAI, ``api-key`` for Azure), plus ``OpenAI-Beta:
        realtime=v1`` for the beta naming (GA sends session.type instead; the vendor retired beta).

        `call_sid` adds `X-Voicecore-Call`, which only the model simulator reads (spec: model-session
        correlation). A CallSid identifies the call to whoever receives it, so none goes out by default:
        the caller passes one only when configured to (`send_call_id_to_vendor`) or when the endpoint is
        the built-in simulator (workers/model/main.py `call_id_for_model`). No other header identifies the
        call or the caller.
        """
        _check_naming(self.naming)
        if self.provider == "azure":
            headers = [("api-key", api_key)]
        else:
            headers = [("Authorization", f"Bearer {api_key}")]
        if self.naming == "beta":
            headers.append(("OpenAI-Beta", "realtime=v1"))
        if call_sid is not None:
            headers.append(("X-Voicecore-Call", call_sid))
        return headers
