"""The session's settings as session.update sets them: validation, merging, rendering per naming.

Owns the canonical form of a session's settings (`SessionSettings`), the merge of a session.update in either
shape (beta flat, GA nested, docs/explanation/protocols.md#c1) with the check of every field it stores (a
peer's odd value becomes a `rejects.ClientEventRejected`, not an exception later in the VAD or the renderer),
and the session object as the server shows it in session.created / session.updated. The section numbers in
parentheses below (C.1, C.2, ...) are docs/explanation/protocols.md's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from voicecore.sim.model.rejects import ClientEventRejected, invalid_value, missing_parameter, unknown_parameter

_SERVER_VAD_DEFAULTS: dict[str, Any] = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
}
_SEMANTIC_VAD_DEFAULTS: dict[str, Any] = {
    "type": "semantic_vad",
    "eagerness": "auto",
    "create_response": True,
    "interrupt_response": True,
}
# semantic_vad, by eagerness: the silence that ends a turn whose words sound finished (the vendor documents
# none: these bracket server_vad's 500 ms default, "high" answering sooner, "low" later), and the longest it
# waits when they sound unfinished (the vendor's documented maximum timeouts: low 8 s, medium 4 s, high 2 s;
# auto is medium)
_SEMANTIC_SILENCE_MS = {"low": 800, "medium": 500, "auto": 500, "high": 300}
_SEMANTIC_MAX_SILENCE_MS = {"low": 8000, "medium": 4000, "auto": 4000, "high": 2000}
# words after which a speaker is not done (English and Swedish fillers and conjunctions)
_UNFINISHED_LAST_WORDS = frozenset({
    "um", "uh", "er", "erm", "ehm", "so", "and", "but", "or", "because", "like", "then", "well",
    "öh", "eh", "och", "så", "men", "eller", "för", "att",
})

_BETA_FORMATS = {"pcm16": "pcm", "g711_ulaw": "pcmu", "g711_alaw": "pcma"}
_BETA_FORMAT_NAMES = {v: k for k, v in _BETA_FORMATS.items()}
_GA_FORMATS = {"audio/pcm": "pcm", "audio/pcmu": "pcmu", "audio/pcma": "pcma"}

_GA_SESSION_KEYS = {
    "type", "model", "instructions", "output_modalities", "audio", "tools", "tool_choice",
    "max_output_tokens", "tracing", "truncation", "include", "prompt", "parallel_tool_calls", "reasoning",
}
_BETA_SESSION_KEYS = {
    "model", "instructions", "modalities", "voice", "input_audio_format", "output_audio_format",
    "input_audio_transcription", "turn_detection", "tools", "tool_choice", "temperature",
    "max_response_output_tokens", "speed", "tracing", "input_audio_noise_reduction", "client_secret",
}


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """A session's settings in canonical form, whatever the naming; the real server's defaults."""

    instructions: str = "You are a helpful assistant."
    voice: str = "alloy"
    speed: float = 1.0
    input_format: str = "pcm"  # canonical: pcm | pcmu | pcma; the real default is 24 kHz PCM
    output_format: str = "pcm"
    turn_detection: dict[str, Any] | None = field(default_factory=lambda: dict(_SERVER_VAD_DEFAULTS))
    transcription: dict[str, Any] | None = None
    noise_reduction: dict[str, Any] | None = None
    tools: tuple[Any, ...] = ()
    tool_choice: Any = "auto"
    max_output_tokens: Any = "inf"
    output_modalities: tuple[str, ...] = ("audio",)  # ("text",): responses are text, no audio (C.1)


# The Realtime voices the vendor speaks in; any other name is refused (invalid_value), as it refuses it.
VOICES = ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar")


def _check_voice(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise invalid_value(param, "expected a string")
    if value not in VOICES:
        listed = ", ".join(f"'{v}'" for v in VOICES[:-1]) + f", and '{VOICES[-1]}'"
        raise ClientEventRejected("invalid_value", f"Invalid value: '{value}'. Supported values are: {listed}.", param)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Leaf checks for session fields: (test, what the error says). Every field we store is checked here, so
# a peer's odd value becomes an `error` event instead of an exception later in the VAD or the renderer.
_CHECKS: dict[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "ms": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "ms_or_null": (lambda v: v is None or (_is_int(v) and v >= 0), "a non-negative integer or null"),
    "number": (_is_number, "a number"),
    "unit": (lambda v: _is_number(v) and 0 <= v <= 1, "a number from 0 to 1"),
    "speed": (lambda v: _is_number(v) and 0.25 <= v <= 1.5, "a number from 0.25 to 1.5"),
    "tokens": (lambda v: v == "inf" or (_is_int(v) and 1 <= v <= 4096), "an integer from 1 to 4096 or 'inf'"),
    "eagerness": (lambda v: v in ("low", "medium", "high", "auto"), "low, medium, high or auto"),
    "tool_choice": (lambda v: v in ("none", "auto", "required"), "none, auto or required"),
    "noise": (lambda v: v in ("near_field", "far_field"), "near_field or far_field"),
    "function": (lambda v: v == "function", "function"),
    "object": (lambda v: isinstance(v, dict), "an object"),
}

# nested objects we store, field by field (the simulator supports function tools only)
_OBJECT_FIELDS: dict[str, dict[str, str]] = {
    "transcription": {"model": "str", "language": "str", "prompt": "str"},
    "noise_reduction": {"type": "noise"},
    "tool": {"type": "function", "name": "str", "description": "str", "parameters": "object"},
    "tool_choice": {"type": "function", "name": "str"},
}

_VAD_FIELDS = {
    "server_vad": {
        "type": "str",
        "threshold": "unit",
        "prefix_padding_ms": "ms",
        "silence_duration_ms": "ms",
        "create_response": "bool",
        "interrupt_response": "bool",
    },
    "semantic_vad": {"type": "str", "eagerness": "eagerness", "create_response": "bool", "interrupt_response": "bool"},
}


def _check(value: Any, check: str, param: str) -> Any:
    test, what = _CHECKS[check]
    if not test(value):
        raise invalid_value(param, f"expected {what}")
    return value


def _check_object(value: Any, kind: str, param: str, nullable: bool = True) -> dict[str, Any] | None:
    if value is None and nullable:
        return None
    if not isinstance(value, dict):
        raise invalid_value(param, "expected an object" + (" or null" if nullable else ""))
    fields = _OBJECT_FIELDS[kind]
    for key, field_value in value.items():
        if key not in fields:
            raise unknown_parameter(f"{param}.{key}")
        _check(field_value, fields[key], f"{param}.{key}")
    return value


def _check_tools(value: Any, param: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list):
        raise invalid_value(param, "expected an array")
    for i, tool in enumerate(value):
        _check_object(tool, "tool", f"{param}[{i}]", nullable=False)
        if not isinstance(tool.get("name"), str):
            raise missing_parameter(f"{param}[{i}].name")
    return tuple(value)


def _check_tool_choice(value: Any, naming: str, param: str) -> Any:
    if isinstance(value, dict) and naming == "ga":  # GA may force one function: {type, name}
        _check_object(value, "tool_choice", param, nullable=False)
        if value.get("type") != "function" or not isinstance(value.get("name"), str):
            raise invalid_value(param, "expected {type: function, name}")
        return value
    return _check(value, "tool_choice", param)


def _merge_turn_detection(
    current: dict[str, Any] | None, value: Any, param: str, naming: str
) -> dict[str, Any] | None:
    if value is None:
        return None  # null clears turn detection (C.2)
    if not isinstance(value, dict):
        raise invalid_value(param, "expected an object or null")
    kind = value.get("type", (current or {}).get("type", "server_vad"))
    if kind not in _VAD_FIELDS:
        raise invalid_value(f"{param}.type", "expected server_vad or semantic_vad")
    fields = dict(_VAD_FIELDS[kind])
    if kind == "server_vad" and naming == "ga":
        fields["idle_timeout_ms"] = "ms_or_null"  # GA only (C.3 timeout_triggered); not simulated
    for key, field_value in value.items():
        if key not in fields:
            raise unknown_parameter(f"{param}.{key}")
        _check(field_value, fields[key], f"{param}.{key}")
    # fields not sent keep their value; a change of type starts from that type's defaults
    defaults = _SERVER_VAD_DEFAULTS if kind == "server_vad" else _SEMANTIC_VAD_DEFAULTS
    base = dict(current) if current is not None and current.get("type") == kind else dict(defaults)
    base.update(value)
    return base


def _parse_format(value: Any, naming: str, param: str) -> str:
    """A canonical format name (pcm | pcmu | pcma) from the GA object or the beta string (C.1)."""
    if naming == "beta":
        if not isinstance(value, str) or value not in _BETA_FORMATS:
            raise invalid_value(param, "expected pcm16, g711_ulaw or g711_alaw")
        return _BETA_FORMATS[value]
    if not isinstance(value, dict):
        raise invalid_value(param, "expected an object")
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in _GA_FORMATS:
        raise invalid_value(f"{param}.type", "expected audio/pcm, audio/pcmu or audio/pcma")
    fmt = _GA_FORMATS[kind]
    for key in value:
        # audio/pcmu and audio/pcma take no `rate` key: the real server rejects it (C.1)
        if key != "type" and not (fmt == "pcm" and key == "rate"):
            raise unknown_parameter(f"{param}.{key}")
    if fmt == "pcm" and value.get("rate", 24000) != 24000:
        raise invalid_value(f"{param}.rate", "PCM is 24000 Hz only")
    return fmt


def _object(value: Any, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_value(param, "expected an object")
    return value


def _only(obj: dict[str, Any], allowed: set[str] | tuple[str, ...], prefix: str) -> None:
    for key in obj:
        if key not in allowed:
            raise unknown_parameter(f"{prefix}.{key}")


def _merge_common(changes: dict[str, Any], session: dict[str, Any], naming: str, tokens_key: str) -> None:
    """Fields spelled the same in both shapes (plus the max-tokens key, which is not)."""
    if "instructions" in session:
        changes["instructions"] = _check(session["instructions"], "str", "session.instructions")
    if "tools" in session:
        changes["tools"] = _check_tools(session["tools"], "session.tools")
    if "tool_choice" in session:
        changes["tool_choice"] = _check_tool_choice(session["tool_choice"], naming, "session.tool_choice")
    if tokens_key in session:
        changes["max_output_tokens"] = _check(session[tokens_key], "tokens", f"session.{tokens_key}")


def _merge_ga(cfg: SessionSettings, session: dict[str, Any]) -> SessionSettings:
    _only(session, _GA_SESSION_KEYS, "session")
    if "type" not in session:
        raise missing_parameter("session.type")
    if session["type"] != "realtime":
        raise invalid_value("session.type", "the simulator supports only 'realtime' sessions")
    if "output_modalities" in session and session["output_modalities"] not in (["audio"], ["text"]):
        raise invalid_value("session.output_modalities", "expected ['audio'] or ['text'], not both")
    changes: dict[str, Any] = {}
    if "output_modalities" in session:
        changes["output_modalities"] = tuple(session["output_modalities"])
    _merge_common(changes, session, "ga", "max_output_tokens")
    audio = _object(session.get("audio"), "session.audio")
    _only(audio, ("input", "output"), "session.audio")
    inp = _object(audio.get("input"), "session.audio.input")
    out = _object(audio.get("output"), "session.audio.output")
    _only(inp, ("format", "transcription", "noise_reduction", "turn_detection"), "session.audio.input")
    _only(out, ("format", "voice", "speed"), "session.audio.output")
    if "format" in inp:
        changes["input_format"] = _parse_format(inp["format"], "ga", "session.audio.input.format")
    if "format" in out:
        changes["output_format"] = _parse_format(out["format"], "ga", "session.audio.output.format")
    if "turn_detection" in inp:
        changes["turn_detection"] = _merge_turn_detection(
            cfg.turn_detection, inp["turn_detection"], "session.audio.input.turn_detection", "ga"
        )
    if "transcription" in inp:
        param = "session.audio.input.transcription"
        changes["transcription"] = _check_object(inp["transcription"], "transcription", param)
    if "noise_reduction" in inp:
        param = "session.audio.input.noise_reduction"
        changes["noise_reduction"] = _check_object(inp["noise_reduction"], "noise_reduction", param)
    if "voice" in out:
        changes["voice"] = _check_voice(out["voice"], "session.audio.output.voice")
    if "speed" in out:
        changes["speed"] = _check(out["speed"], "speed", "session.audio.output.speed")
    return replace(cfg, **changes)


def _merge_beta(cfg: SessionSettings, session: dict[str, Any]) -> SessionSettings:
    _only(session, _BETA_SESSION_KEYS, "session")
    changes: dict[str, Any] = {}
    _merge_common(changes, session, "beta", "max_response_output_tokens")
    if "modalities" in session:
        modalities = session["modalities"]
        if not isinstance(modalities, list) or sorted(modalities) not in (["text"], ["audio", "text"]):
            raise invalid_value("session.modalities", "expected ['text'] or ['text', 'audio']")
        changes["output_modalities"] = ("text",) if modalities == ["text"] else ("audio",)
    if "input_audio_format" in session:
        changes["input_format"] = _parse_format(session["input_audio_format"], "beta", "session.input_audio_format")
    if "output_audio_format" in session:
        param = "session.output_audio_format"
        changes["output_format"] = _parse_format(session["output_audio_format"], "beta", param)
    if "turn_detection" in session:
        changes["turn_detection"] = _merge_turn_detection(
            cfg.turn_detection, session["turn_detection"], "session.turn_detection", "beta"
        )
    if "input_audio_transcription" in session:
        param = "session.input_audio_transcription"
        changes["transcription"] = _check_object(session["input_audio_transcription"], "transcription", param)
    if "input_audio_noise_reduction" in session:
        param = "session.input_audio_noise_reduction"
        changes["noise_reduction"] = _check_object(session["input_audio_noise_reduction"], "noise_reduction", param)
    if "voice" in session:
        changes["voice"] = _check_voice(session["voice"], "session.voice")
    if "speed" in session:
        changes["speed"] = _check(session["speed"], "speed", "session.speed")
    return replace(cfg, **changes)


def merge_session_update(settings: SessionSettings, session: dict[str, Any], naming: str) -> SessionSettings:
    """`settings` with a session.update's `session` object merged in (only the fields sent change, C.2);
    raises ClientEventRejected for a field this naming does not know or a value it does not accept."""
    return _merge_ga(settings, session) if naming == "ga" else _merge_beta(settings, session)


def turn_end_silence_ms(turn_detection: dict[str, Any]) -> int:
    """The silence that ends a caller's turn under this turn detection."""
    if turn_detection["type"] == "semantic_vad":
        return _SEMANTIC_SILENCE_MS.get(turn_detection.get("eagerness", "auto"), 500)
    return int(turn_detection.get("silence_duration_ms", 500))


def semantic_max_silence_ms(turn_detection: dict[str, Any]) -> int:
    """The longest semantic_vad waits for a caller whose words sound unfinished to go on."""
    return _SEMANTIC_MAX_SILENCE_MS.get(turn_detection.get("eagerness", "auto"), 4000)


def sounds_unfinished(text: str) -> bool:
    """Whether words end unfinished for semantic_vad: with "..." (or an ellipsis), a comma, a semicolon, a
    colon or a dash, or with a filler or conjunction ("um", "so", "and"). Words ending in . ? ! sound
    finished, and so do words with no end mark at all (the simulator's "hello"), and no words (a cough)."""
    stripped = text.rstrip()
    if stripped.endswith(("...", "\u2026")):
        return True
    if stripped.endswith((".", "?", "!")):
        return False
    if stripped.endswith((",", ";", ":", "-", "\u2013", "\u2014")):
        return True
    words = re.findall(r"[^\W_]+", stripped.casefold())
    return bool(words) and words[-1] in _UNFINISHED_LAST_WORDS


def render_session(settings: SessionSettings, naming: str, session_id: str, model: str) -> dict[str, Any]:
    """The session object of session.created / session.updated, in this naming's shape (C.1)."""
    td = None if settings.turn_detection is None else dict(settings.turn_detection)
    if naming == "ga":
        if td is not None and td["type"] == "server_vad":
            td.setdefault("idle_timeout_ms", None)

        def fmt(name: str) -> dict[str, Any]:
            return {"type": "audio/pcm", "rate": 24000} if name == "pcm" else {"type": f"audio/{name}"}

        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": session_id,
            "model": model,
            "output_modalities": list(settings.output_modalities),
            "instructions": settings.instructions,
            "tools": list(settings.tools),
            "tool_choice": settings.tool_choice,
            "max_output_tokens": settings.max_output_tokens,
            "tracing": None,
            "truncation": "auto",
            "prompt": None,
            "expires_at": 0,
            "audio": {
                "input": {
                    "format": fmt(settings.input_format),
                    "transcription": settings.transcription,
                    "noise_reduction": settings.noise_reduction,
                    "turn_detection": td,
                },
                "output": {"format": fmt(settings.output_format), "voice": settings.voice, "speed": settings.speed},
            },
            "include": None,
        }
    return {
        "id": session_id,
        "object": "realtime.session",
        "model": model,
        "expires_at": 0,
        "modalities": ["text"] if settings.output_modalities == ("text",) else ["text", "audio"],
        "instructions": settings.instructions,
        "voice": settings.voice,
        "speed": settings.speed,
        "input_audio_format": _BETA_FORMAT_NAMES[settings.input_format],
        "output_audio_format": _BETA_FORMAT_NAMES[settings.output_format],
        "input_audio_transcription": settings.transcription,
        "input_audio_noise_reduction": settings.noise_reduction,
        "turn_detection": td,
        "tools": list(settings.tools),
        "tool_choice": settings.tool_choice,
        "temperature": 0.8,
        "max_response_output_tokens": settings.max_output_tokens,
        "tracing": None,
    }
