"""Which of an agent's settings Gemini Live cannot honour, named, so `voicecore check` refuses the agent
before a call meets them.

Owns the list of what the Gemini driver (voicecore/gemini/driver.py) does not do, and why: a Gemini session
takes its instructions and tools once, at ``setup``, so a flow that moves between nodes (each with its own
instructions and functions) cannot be followed; a function that asks the caller to confirm needs the
turn-taking controller, which Gemini's own turn taking replaces; the OpenAI Realtime turn-detection and
transcription settings have no Gemini counterpart; a voice must be one of Gemini's prebuilt voices. Pure:
fed the keys agent.toml set explicitly and the flow as loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from voicecore.gemini.driver import VOICES

# [turns] keys with no Gemini counterpart (Gemini's activity detection is its own).
OPENAI_TURN_KEYS = {"turn_detection": "$.turns.detection", "vad_eagerness": "$.turns.eagerness",
                    "transcription_model": "$.turns.transcription_model"}


def unsupported_settings(values: Mapping[str, Any], flow: Any) -> list[tuple[str, str]]:
    """(JSON path, message) for every setting of the agent the Gemini driver does not support."""
    found: list[tuple[str, str]] = []
    voice = values.get("voice")
    if voice is not None and voice not in VOICES:
        found.append(("$.voice", f"voice {voice!r} is not a Gemini voice (one of {', '.join(sorted(VOICES))})"))
    for key, path in OPENAI_TURN_KEYS.items():
        if key in values:
            found.append((path, f"{path.rsplit('.', 1)[1]} is an OpenAI Realtime setting; Gemini detects the "
                                "caller's turns itself: leave it out"))
    if len(flow.nodes) > 1:
        found.append(("$.flow", f"a flow of {len(flow.nodes)} nodes: a Gemini session keeps the instructions and "
                                "functions of its setup, so it cannot move between nodes (use one node)"))
    for name, function in flow.functions.items():
        if function.confirm:
            found.append((f"$.flow.functions.{name}.confirm", f"function {name!r} asks the caller to confirm: "
                                                              "not supported with Gemini"))
    return found

