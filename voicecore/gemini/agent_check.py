"""Which of an agent's settings Gemini Live cannot honour, named, so `voicecore check` refuses the agent
before a call meets them.

Owns the list of what the Gemini driver (voicecore/gemini/driver.py) does not do, and why: a voice must be
one of Gemini's prebuilt voices (``[voices] gemini`` names it for an agent whose ``voice`` is another
vendor's); the OpenAI Realtime turn-detection and transcription settings have no Gemini counterpart; a
flow node whose context strategy deletes the conversation (``reset``, ``task``) cannot be followed, as a
Gemini session's history cannot be edited (nodes that keep it are followed: the driver declares every
node's functions at ``setup`` and tells the model of each new node in the conversation). Pure: fed the
keys agent.toml set explicitly and the flow as loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from voicecore.gemini.driver import VOICES

# [turns] keys with no Gemini counterpart (Gemini's activity detection is its own).
OPENAI_TURN_KEYS = {"turn_detection": "$.turns.detection", "vad_eagerness": "$.turns.eagerness",
                    "transcription_model": "$.turns.transcription_model"}
# Context strategies that delete conversation items: a Gemini session's history cannot be edited.
EDITING_CONTEXT = ("reset", "task")


def unsupported_settings(values: Mapping[str, Any], flow: Any) -> list[tuple[str, str]]:
    """(JSON path, message) for every setting of the agent the Gemini driver does not support."""
    found: list[tuple[str, str]] = []
    voices = values.get("voices") or {}
    gemini_voice = voices.get("gemini")
    voice = values.get("voice")
    names = ", ".join(sorted(VOICES))
    if gemini_voice is not None:
        if gemini_voice not in VOICES:
            found.append(("$.voices.gemini", f"voice {gemini_voice!r} is not a Gemini voice (one of {names})"))
    elif voice is not None and voice not in VOICES:
        found.append(("$.voice", f"voice {voice!r} is not a Gemini voice: name one for Gemini under [voices] "
                                 f'(gemini = "Aoede"; one of {names}) or leave voice out'))
    for key, path in OPENAI_TURN_KEYS.items():
        if key in values:
            found.append((path, f"{path.rsplit('.', 1)[1]} is an OpenAI Realtime setting; Gemini detects the "
                                "caller's turns itself: leave it out"))
    for name, node in flow.nodes.items():
        if len(flow.nodes) > 1 and node.context_strategy in EDITING_CONTEXT:
            found.append((f"$.nodes.{name}.context_strategy",
                          f"context_strategy {node.context_strategy!r} deletes the conversation, which a Gemini "
                          "session cannot: use \"keep\""))
    return found
