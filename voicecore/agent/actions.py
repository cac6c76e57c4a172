"""Actions with confirmation and write de-duplication, the pure parts
(docs/explanation/agents.md#actions-with-confirmation).

Owns: the canonical form of a function's arguments and the idempotency key made from it and the call, the rendering of
a confirmation prompt from the arguments (so every number it says is one of theirs), and reading a
caller's answer to it as yes, no or neither (English and Swedish). The controller (voicecore/call/
controller.py) holds the pending action, its timeout and the key's 30 s window; voicecore/agent/tools.py
sends the key as the webhook's Idempotency-Key. No I/O, no clock.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from typing import Any

from voicecore.agent.speech import speak

_YES = {
    "en": ("yes", "yeah", "yep", "yup", "sure", "correct", "right", "ok", "okay", "please do", "go ahead",
           "that's right", "absolutely", "of course"),
    "sv": ("ja", "japp", "jajamen", "absolut", "okej", "ok", "gärna", "visst", "stämmer", "det stämmer",
           "kör", "självklart", "javisst"),
}
_NO = {
    "en": ("no", "nope", "don't", "do not", "not now", "cancel", "stop", "wrong", "never mind", "nah"),
    "sv": ("nej", "nä", "nää", "inte", "avbryt", "stopp", "fel", "strunta i det", "nej tack"),
}
_WORD = re.compile(r"[\w']+(?:\s+[\w']+)*", re.UNICODE)


def canonical_arguments(arguments: str) -> str | None:
    """The arguments object as compact JSON with sorted keys; None when ``arguments`` is not a JSON object."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(call_sid: str, name: str, arguments: str) -> str:
    """The key of one action of one call (24 hex chars): the call, the function and its arguments (in any
    key order). Within a call the same action has the same key, so a retry or the model asking again is
    recognised as the same write; two calls never share a key, so an API that honours it cannot merge two
    callers' bookings of the same slot into one."""
    return _key_of(call_sid + "\n" + name, arguments)


def call_free_idempotency_key(name: str, arguments: str) -> str:
    """The key as records made before keys named the call (function and arguments only). Only for reading
    those records (voicecore/replay.py): it is shared by every call and must never be sent."""
    return _key_of(name, arguments)


def _key_of(prefix: str, arguments: str) -> str:
    canonical = canonical_arguments(arguments)
    text = prefix + "\n" + (canonical if canonical is not None else arguments)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def prompt_fields(template: str) -> list[str]:
    """The placeholder names of a confirmation prompt template ("{phone}" -> "phone")."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def render_prompt(template: str, arguments: str, parameters: dict[str, Any] | None = None,
                  language: str = "") -> str | None:
    """The confirmation prompt with each ``{name}`` replaced by that argument's value; None when an
    argument it names is missing (the model must ask again rather than the caller hear a gap). An argument
    whose schema in ``parameters`` says what it is (a date, time, date-time, money or phone number) is said
    as a person says it in ``language`` (voicecore/agent/speech.py); any other, as given."""
    canonical = canonical_arguments(arguments)
    if canonical is None:
        return None
    values = json.loads(canonical)
    properties = (parameters or {}).get("properties", {}) if isinstance(parameters, dict) else {}
    out: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        value = values.get(name)
        if value is None or value == "":
            return None
        spoken = speak(value, properties.get(name), language) if language else None
        if spoken is not None:
            out.append(spoken)
        else:
            out.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return "".join(out)


def confirmation_answer(words: str, languages: tuple[str, ...] = ("en", "sv")) -> str:
    """"yes", "no" or "" (neither: the caller said something else) for the caller's words after a
    confirmation prompt. A no wins over a yes ("yes, no wait": not a yes); only short answers count,
    so "yes, but make it Friday instead" is neither."""
    text = " ".join(_WORD.findall(words.lower().replace("’", "'")))
    if not text:
        return ""
    if len(text.split()) > 6:
        return ""
    padded = f" {text} "
    for language in languages:
        if any(f" {phrase} " in padded for phrase in _NO.get(language, ())):
            return "no"
    for language in languages:
        if any(f" {phrase} " in padded for phrase in _YES.get(language, ())):
            return "yes"
    return ""
