"""Client side of Google's Gemini Live API (BidiGenerateContent over WebSocket), sans-I/O: build client
messages, parse server messages.

Owns the wire vocabulary of docs/explanation/gemini-live.md: the JSON of every client message we send
(``setup``, ``realtimeInput``, ``clientContent``, ``toolResponse``, camelCase as the vendor's JSON mapping
spells it) and the server messages we act on, parsed into frozen dataclasses. Must not know sockets, clocks,
calls, tags or frames: a driver's shell feeds text in and writes text out.

One server message can carry several things at once (a ``serverContent`` with audio parts and
``turnComplete``, plus ``usageMetadata``), so ``parse_server_message`` returns a tuple of events in a
fixed order. Bad peer input never raises out of it: it becomes ``(MalformedMessage(reason),)``. A
top-level member we do not model becomes ``Unhandled(name)``; unknown members inside a known one are
ignored (the vendor adds fields). Our own misuse of a builder (an empty model name) raises ValueError.

Audio: the caller's audio goes in as 16-bit little-endian PCM at 16 kHz (``audio/pcm;rate=16000``); the
model's audio comes out as 16-bit PCM at 24 kHz (``audio/pcm;rate=24000``), base64 in JSON both ways.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union
from urllib.parse import quote

import orjson

from voicecore.errors import PeerInputError

INPUT_SAMPLE_RATE_HZ = 16_000
OUTPUT_SAMPLE_RATE_HZ = 24_000
INPUT_AUDIO_MIME = "audio/pcm;rate=16000"
OUTPUT_AUDIO_MIME = "audio/pcm;rate=24000"
# The Gemini API's Live endpoint; Vertex AI's differs (a regional host and an OAuth bearer token).
LIVE_PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
DEFAULT_BASE_URL = "wss://generativelanguage.googleapis.com" + LIVE_PATH

# Close codes the vendor ends a connection with, as a client sees them.
CLOSE_POLICY_VIOLATION = 1008  # a bad key, an unknown model, a setup the server refuses
CLOSE_INTERNAL_ERROR = 1011
CLOSE_NORMAL = 1000

# --------------------------------------------------------------------------------------------------
# Server events
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetupComplete:
    session_id: str | None = None  # some deployments name the session; the Gemini API sends {}


@dataclass(frozen=True, slots=True)
class ModelAudio:
    """One inlineData part of serverContent.modelTurn: the model's speech."""

    audio: bytes  # base64-decoded (strictly)
    mime_type: str  # "audio/pcm;rate=24000"


@dataclass(frozen=True, slots=True)
class ModelText:
    """A text part of serverContent.modelTurn (a TEXT-modality session, or the model's thoughts)."""

    text: str
    thought: bool = False


@dataclass(frozen=True, slots=True)
class InputTranscription:
    """Part of the caller's words (serverContent.inputTranscription); pieces, not a running total."""

    text: str


@dataclass(frozen=True, slots=True)
class OutputTranscription:
    """Part of the model's words (serverContent.outputTranscription)."""

    text: str


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The model's turn was cut by the caller's activity: what was not yet played must not be."""


@dataclass(frozen=True, slots=True)
class GenerationComplete:
    """The model has generated its whole turn (audio may still be streaming to us)."""


@dataclass(frozen=True, slots=True)
class TurnComplete:
    """The model's turn is over; it waits for the caller."""


@dataclass(frozen=True, slots=True)
class FunctionCall:
    call_id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    calls: tuple[FunctionCall, ...]


@dataclass(frozen=True, slots=True)
class ToolCallCancellation:
    """Calls the model no longer wants answered (the caller interrupted them)."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GoAway:
    """The server will close this connection soon: resume on a new one."""

    time_left_ms: int | None  # None when the duration is absent or unreadable


@dataclass(frozen=True, slots=True)
class SessionResumptionUpdate:
    new_handle: str | None
    resumable: bool


@dataclass(frozen=True, slots=True)
class VoiceActivity:
    """The server's activity detection heard the caller start (``started``) or stop speaking (voiceActivity,
    ACTIVITY_START / ACTIVITY_END): the Realtime API's speech_started / speech_stopped."""

    started: bool


@dataclass(frozen=True, slots=True)
class UsageMetadata:
    prompt_tokens: int | None
    response_tokens: int | None
    total_tokens: int | None


@dataclass(frozen=True, slots=True)
class Unhandled:
    """A well-formed top-level member this module does not model (voiceActivityDetectionSignal, ...)."""

    name: str


@dataclass(frozen=True, slots=True)
class MalformedMessage:
    reason: str


ServerEvent = Union[
    SetupComplete,
    ModelAudio,
    ModelText,
    InputTranscription,
    OutputTranscription,
    Interrupted,
    GenerationComplete,
    TurnComplete,
    ToolCall,
    ToolCallCancellation,
    GoAway,
    SessionResumptionUpdate,
    VoiceActivity,
    UsageMetadata,
    Unhandled,
    MalformedMessage,
]


class _Bad(PeerInputError):
    """Internal: a member is missing or mistyped. Never leaves this module."""


def _obj(parent: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise _Bad(f"{key} not an object")
    return value


def _opt_str(parent: Mapping[str, Any], key: str) -> str | None:
    value = parent.get(key)
    if value is not None and not isinstance(value, str):
        raise _Bad(f"{key} not a string")
    return value


def _flag(parent: Mapping[str, Any], key: str) -> bool:
    value = parent.get(key, False)
    if not isinstance(value, bool):
        raise _Bad(f"{key} not a boolean")
    return value


def _count(parent: Mapping[str, Any], key: str) -> int | None:
    value = parent.get(key)
    if isinstance(value, str) and value.isdigit():  # int64 in proto3 JSON may be a string
        return int(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _Bad(f"{key} not an integer")


def _b64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise _Bad(f"{what} not a string")
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise _Bad(f"{what} is not valid base64 ({exc})") from None


def parse_duration_ms(text: Any) -> int | None:
    """A protobuf Duration in JSON ("10s", "1.5s", "0.000340s") in milliseconds; None if it is not one."""
    if not isinstance(text, str) or not text.endswith("s"):
        return None
    try:
        seconds = float(text[:-1])
    except ValueError:
        return None
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        return None
    return round(seconds * 1000)


def format_duration(ms: int) -> str:
    """``ms`` as a protobuf Duration in JSON ("9.5s")."""
    if ms < 0:
        raise ValueError("a duration is not negative")
    whole, rest = divmod(ms, 1000)
    return f"{whole}s" if rest == 0 else f"{whole}.{rest:03d}s"


def _transcription(content: dict[str, Any], key: str) -> str | None:
    if key not in content:
        return None
    return _opt_str(_obj(content, key), "text") or ""


def _server_content(content: dict[str, Any]) -> list[ServerEvent]:
    events: list[ServerEvent] = []
    heard = _transcription(content, "inputTranscription")
    if heard is not None:
        events.append(InputTranscription(heard))
    if _flag(content, "interrupted"):
        events.append(Interrupted())
    if "modelTurn" in content:
        parts = _obj(content, "modelTurn").get("parts", [])
        if not isinstance(parts, list):
            raise _Bad("modelTurn.parts not a list")
        for part in parts:
            if not isinstance(part, dict):
                raise _Bad("modelTurn part not an object")
            if "inlineData" in part:
                blob = _obj(part, "inlineData")
                events.append(ModelAudio(_b64(blob.get("data"), "inlineData.data"), _opt_str(blob, "mimeType") or ""))
            elif "text" in part:
                events.append(ModelText(_opt_str(part, "text") or "", _flag(part, "thought")))
            # other parts (executableCode, ...) are not used by a voice agent
    said = _transcription(content, "outputTranscription")
    if said is not None:
        events.append(OutputTranscription(said))
    if _flag(content, "generationComplete"):
        events.append(GenerationComplete())
    if _flag(content, "turnComplete"):
        events.append(TurnComplete())
    return events


def _tool_call(body: dict[str, Any]) -> ServerEvent:
    raw = body.get("functionCalls", [])
    if not isinstance(raw, list):
        raise _Bad("functionCalls not a list")
    calls = []
    for call in raw:
        if not isinstance(call, dict):
            raise _Bad("functionCall not an object")
        args = call.get("args", {})
        if not isinstance(args, dict):
            raise _Bad("functionCall.args not an object")
        name = _opt_str(call, "name")
        if not name:
            raise _Bad("functionCall.name missing")
        calls.append(FunctionCall(_opt_str(call, "id") or "", name, args))
    return ToolCall(tuple(calls))


def _cancellation(body: dict[str, Any]) -> ServerEvent:
    ids = body.get("ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _Bad("toolCallCancellation.ids not a list of strings")
    return ToolCallCancellation(tuple(ids))


def _usage(body: dict[str, Any]) -> ServerEvent:
    return UsageMetadata(_count(body, "promptTokenCount"), _count(body, "responseTokenCount"),
                         _count(body, "totalTokenCount"))


# The top-level members we model, in the order their events are returned when one message has several.
_ORDER = ("setupComplete", "voiceActivity", "serverContent", "toolCall", "toolCallCancellation", "goAway",
          "sessionResumptionUpdate", "usageMetadata")
_ACTIVITY_TYPES = {"ACTIVITY_START": True, "ACTIVITY_END": False}
SERVER_MESSAGE_MEMBERS = frozenset(_ORDER)


def parse_server_message(text: str | bytes) -> tuple[ServerEvent, ...]:
    """A server message's text as typed events (module docstring). Never raises."""
    try:
        message = orjson.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError) as exc:
        return (MalformedMessage(f"not JSON text: {type(exc).__name__}"),)
    if not isinstance(message, dict):
        return (MalformedMessage("not a JSON object"),)
    if not message:
        return (MalformedMessage("an empty object"),)
    events: list[ServerEvent] = []
    try:
        for key in _ORDER:
            if key not in message:
                continue
            body = _obj(message, key)
            if key == "setupComplete":
                events.append(SetupComplete(_opt_str(body, "sessionId")))
            elif key == "serverContent":
                events.extend(_server_content(body))
            elif key == "toolCall":
                events.append(_tool_call(body))
            elif key == "toolCallCancellation":
                events.append(_cancellation(body))
            elif key == "goAway":
                events.append(GoAway(parse_duration_ms(body.get("timeLeft"))))
            elif key == "voiceActivity":
                kind = _opt_str(body, "voiceActivityType")
                if kind in _ACTIVITY_TYPES:
                    events.append(VoiceActivity(_ACTIVITY_TYPES[kind]))
                # TYPE_UNSPECIFIED or a type added later: nothing to act on
            elif key == "sessionResumptionUpdate":
                events.append(SessionResumptionUpdate(_opt_str(body, "newHandle") or None, _flag(body, "resumable")))
            else:
                events.append(_usage(body))
    except _Bad as exc:
        return (MalformedMessage(f"{key}: {exc}"),)
    events.extend(Unhandled(key) for key in message if key not in SERVER_MESSAGE_MEMBERS)
    return tuple(events)


# --------------------------------------------------------------------------------------------------
# Client messages. Each builder returns compact JSON text ready for the socket.
# --------------------------------------------------------------------------------------------------


def _dump(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def function_declaration(name: str, description: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One entry of a tool's functionDeclarations; ``parameters`` is an OpenAPI-subset JSON schema."""
    declaration: dict[str, Any] = {"name": name, "description": description}
    if parameters is not None:
        declaration["parameters"] = dict(parameters)
    return declaration


def setup(
    model: str,
    instructions: str,
    voice: str | None = None,
    *,
    functions: Sequence[Mapping[str, Any]] = (),
    automatic_activity_detection: bool = True,
    interrupt_on_activity: bool = True,
    transcribe_input: bool = True,
    transcribe_output: bool = True,
    resumption_handle: str | None = None,
    resumable: bool = True,
    compression_trigger_tokens: int | None = None,
    compression_target_tokens: int | None = None,
    compress_context: bool = True,
) -> str:
    """The first message of a connection. ``model`` is "models/NAME" ("NAME" alone is prefixed).

    ``automatic_activity_detection`` False: the server's VAD is off and the client marks each caller turn
    with activityStart / activityEnd. ``interrupt_on_activity`` False: ``activityHandling`` NO_INTERRUPTION,
    the caller's speech does not cut the model's turn (the client decides whether it was a turn: the
    turn-taking controller's rule by words). ``resumable``: ask for sessionResumptionUpdate handles; with
    ``resumption_handle`` the connection continues that session. ``compress_context``: a sliding window
    keeps the session going past the context limit (without it an audio session ends after ~15 minutes).
    """
    if not model:
        raise ValueError("model must name a model")
    body: dict[str, Any] = {
        "model": model if model.startswith(("models/", "projects/")) else f"models/{model}",
        "generationConfig": {"responseModalities": ["AUDIO"]},
        "systemInstruction": {"parts": [{"text": instructions}]},
    }
    if voice is not None:
        body["generationConfig"]["speechConfig"] = {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": voice}}}
    if functions:
        body["tools"] = [{"functionDeclarations": [dict(f) for f in functions]}]
    if not automatic_activity_detection or not interrupt_on_activity:
        body["realtimeInputConfig"] = {}
    if not automatic_activity_detection:
        body["realtimeInputConfig"]["automaticActivityDetection"] = {"disabled": True}
    if not interrupt_on_activity:
        body["realtimeInputConfig"]["activityHandling"] = NO_INTERRUPTION
    if transcribe_input:
        body["inputAudioTranscription"] = {}
    if transcribe_output:
        body["outputAudioTranscription"] = {}
    if resumable or resumption_handle is not None:
        body["sessionResumption"] = {} if resumption_handle is None else {"handle": resumption_handle}
    if compress_context:
        window: dict[str, Any] = {}
        if compression_target_tokens is not None:
            window["targetTokens"] = int(compression_target_tokens)
        compression: dict[str, Any] = {"slidingWindow": window}
        if compression_trigger_tokens is not None:
            compression["triggerTokens"] = int(compression_trigger_tokens)
        body["contextWindowCompression"] = compression
    return _dump({"setup": body})


def realtime_audio(pcm16_16khz: bytes) -> str:
    """realtimeInput.audio: 16-bit little-endian PCM at 16 kHz. Built by concatenation (hot path)."""
    b64 = binascii.b2a_base64(pcm16_16khz, newline=False).decode("ascii")
    return '{"realtimeInput":{"audio":{"data":"' + b64 + '","mimeType":"' + INPUT_AUDIO_MIME + '"}}}'


NO_INTERRUPTION = "NO_INTERRUPTION"  # realtimeInputConfig.activityHandling: the caller's speech cuts no model turn
# How voicecore's note of a cut answer begins (a clientContent turn the model does not answer; Gemini has no item
# truncation): the simulator reads a note that begins so as the client's cut of the turn the caller spoke over.
HEARD_NOTE_PREFIX = "(You were interrupted:"
HEARD_NOTE_OPENING_WORDS = 6  # the note names the cut answer by this many of its first words ('began "..."')
HEARD_NOTE_ANSWER = re.compile(r'your answer that began "([^"]*)"')
HEARD_NOTE_SECONDS = re.compile(r"heard about ([0-9]+(?:\.[0-9]+)?) s of")  # how much of it the caller heard


def activity_start() -> str:
    """The caller started speaking (only with automatic activity detection disabled)."""
    return '{"realtimeInput":{"activityStart":{}}}'


def activity_end() -> str:
    """The caller's turn is over: the model answers (only with automatic activity detection disabled)."""
    return '{"realtimeInput":{"activityEnd":{}}}'


def audio_stream_end() -> str:
    """The audio stream paused (a muted microphone) with automatic activity detection on: flush what is cached."""
    return '{"realtimeInput":{"audioStreamEnd":true}}'


def client_content(turns: Sequence[tuple[str, str]], turn_complete: bool = True) -> str:
    """clientContent: text turns, each (role, text) with role "user" or "model", appended to the
    conversation. ``turn_complete`` True: the model answers now; False: context only (a note of what the
    caller heard)."""
    built = []
    for role, text in turns:
        if role not in ("user", "model"):
            raise ValueError(f"a turn's role is user or model, not {role!r}")
        built.append({"role": role, "parts": [{"text": text}]})
    return _dump({"clientContent": {"turns": built, "turnComplete": turn_complete}})


def asks_answer(text: str) -> bool:
    """A client message (as built here) the model answers: a toolResponse, or a clientContent turn that completes."""
    return text.startswith('{"toolResponse"') or (text.startswith('{"clientContent"')
                                                 and text.endswith('"turnComplete":true}}'))


def tool_response(responses: Sequence[tuple[str, str, Mapping[str, Any]]]) -> str:
    """toolResponse: each (call id, function name, response object) answers one functionCall."""
    return _dump({"toolResponse": {"functionResponses": [
        {"id": call_id, "name": name, "response": dict(response)} for call_id, name, response in responses]}})


def live_url(api_key: str, base_url: str = DEFAULT_BASE_URL) -> str:
    """The WebSocket URL with the Gemini API key in the ``key`` query parameter."""
    separator = "&" if "?" in base_url else "?"
    return f"{base_url}{separator}key={quote(api_key, safe='')}"
