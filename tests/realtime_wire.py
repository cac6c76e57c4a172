"""The OpenAI SDK's own Realtime server event types as the check of what a simulator sends.

A server event is valid when the SDK type of its naming (GA or beta) accepts it with no key the type does not
declare (but those real servers send: ``TOLERATED_EXTRAS``), its id has the vendor's shape, and voicecore's
own parser reads it. The model simulator's tests (unit and over real sockets) check every event this way.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from voicecore.realtime import events as ev

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from openai.types.beta.realtime.realtime_server_event import RealtimeServerEvent as BetaServerEvent
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent as GAServerEvent

SERVER_ADAPTERS = {"ga": TypeAdapter(GAServerEvent), "beta": TypeAdapter(BetaServerEvent)}
# keys real servers send that the SDK types do not declare (C.3 `obfuscation`; session/response
# bookkeeping seen in real session.created traffic)
TOLERATED_EXTRAS = {"obfuscation", "object", "id", "expires_at"}
ID_RE = re.compile(r"^(event|resp|item|sess|conv)_[0-9A-Za-z]{21}$")


def extras(model: Any, path: str = "") -> list[str]:
    found: list[str] = []
    if isinstance(model, BaseModel):
        found += [f"{path}.{k}" for k in (model.model_extra or {}) if k not in TOLERATED_EXTRAS]
        for name in type(model).model_fields:
            found += extras(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, (list, tuple)):
        for i, value in enumerate(model):
            found += extras(value, f"{path}[{i}]")
    return found


def validate_server(naming: str, text: str) -> None:
    """The SDK type of this naming accepts the event, with no undeclared keys, and our parser agrees."""
    try:
        model = SERVER_ADAPTERS[naming].validate_python(json.loads(text))
    except ValidationError as exc:
        pytest.fail(f"{naming} server event does not validate: {text[:300]}\n{str(exc)[:1500]}")
    assert extras(model) == [], text[:300]
    assert ID_RE.match(model.event_id), model.event_id  # type: ignore[attr-defined]
    parsed = ev.parse_server_event(text)
    assert not isinstance(parsed, ev.MalformedEvent), (parsed, text[:300])
