"""What an outbound call carries to its agent: its direction, the callee's number and the fields the call was
placed with, from the answer document to the stream to the model worker, and into the agent's texts.

Owns the names those travel under as stream parameters (``direction=outbound``, ``callee``, ``field.<name>``:
ours, whatever the carrier), the limits on them, the CallStarted message's copy of them, and filling an agent
text's ``{name}`` placeholders (``{callee}`` and each field). Pure: no carrier, socket or clock.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from urllib.parse import parse_qsl, urlencode
from collections.abc import Iterable, Mapping

DIRECTION = "direction"
OUTBOUND = "outbound"
CALLEE = "callee"
FIELD_PREFIX = "field."
# One parameter holding all the others, for a carrier whose stream headers take only [A-Za-z0-9_-] (Plivo's
# extraHeaders): the URL-encoded parameters in unpadded URL-safe base64.
PACKED = "outbound_call"
MAX_FIELDS = 20
MAX_FIELD_CHARS = 200
FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")
E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def check_fields(fields: Mapping[str, str]) -> dict[str, str]:
    """The call's fields as the agent will see them; ValueError naming the first bad one."""
    if len(fields) > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS} fields pass with a call, got {len(fields)}")
    for name, value in fields.items():
        if not isinstance(name, str) or not FIELD_NAME.match(name):
            raise ValueError(f"field name {name!r} must be a letter or _ then letters, digits, _ (at most 40)")
        if not isinstance(value, str) or len(value) > MAX_FIELD_CHARS:
            raise ValueError(f"field {name!r} must be a string of at most {MAX_FIELD_CHARS} characters")
    return dict(fields)


def parameters_for(callee: str, fields: Mapping[str, str]) -> list[tuple[str, str]]:
    """The stream parameters of an outbound call to ``callee`` with ``fields``."""
    if not isinstance(callee, str) or not E164.match(callee):
        raise ValueError("callee must be a phone number in E.164 (+ and 7-15 digits)")
    return [(DIRECTION, OUTBOUND), (CALLEE, callee)] + [(FIELD_PREFIX + k, v) for k, v in check_fields(fields).items()]


def pack(parameters: Iterable[tuple[str, str]]) -> str:
    """``parameters`` as one value of [A-Za-z0-9_-] (see PACKED)."""
    return base64.urlsafe_b64encode(urlencode(list(parameters)).encode("utf-8")).decode("ascii").rstrip("=")


def unpack(value: str) -> list[tuple[str, str]]:
    """The parameters :func:`pack` made; [] for a value that is not one."""
    try:
        text = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("utf-8")
        return parse_qsl(text, keep_blank_values=True, strict_parsing=True, max_num_fields=MAX_FIELDS + 2)
    except ValueError:  # binascii.Error and UnicodeDecodeError included
        return []


def kept_parameters(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Of ``pairs`` (as a request brought them), the outbound call's parameters; () when they do not say
    outbound. Unknown names and malformed values are dropped, never passed on. A PACKED pair (found by name
    whatever its case: a carrier may change it) stands for the parameters it holds."""
    pairs = list(pairs)
    packed = next((value for name, value in pairs if isinstance(name, str) and name.lower() == PACKED), None)
    if packed is not None:
        pairs = unpack(packed)
    pairs = pairs[: MAX_FIELDS + 2]
    values = dict(pairs)
    if values.get(DIRECTION) != OUTBOUND:
        return ()
    out = [(DIRECTION, OUTBOUND)]
    if E164.match(values.get(CALLEE, "")):
        out.append((CALLEE, values[CALLEE]))
    out += [(name, value) for name, value in pairs
            if name.startswith(FIELD_PREFIX) and FIELD_NAME.match(name[len(FIELD_PREFIX):])
            and len(value) <= MAX_FIELD_CHARS]
    return tuple(out)


def from_query(query: str) -> tuple[tuple[str, str], ...]:
    """The outbound call's parameters an answer URL's query carries (() for an inbound call's)."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=MAX_FIELDS + 2)
    except ValueError:
        return ()
    return kept_parameters(pairs)


def call_fields(parameters: Iterable[tuple[str, str]]) -> tuple[str, str, dict[str, str]]:
    """(direction, callee, fields) from a stream's custom parameters ("", "", {} for an inbound call)."""
    kept = kept_parameters(parameters)
    if not kept:
        return "", "", {}
    values = dict(kept)
    fields = {name[len(FIELD_PREFIX):]: value for name, value in kept if name.startswith(FIELD_PREFIX)}
    return OUTBOUND, values.get(CALLEE, ""), fields


def outbound_started(started, parameters: Iterable[tuple[str, str]]):
    """``started`` (a CallStarted) with the outbound call's direction, callee and fields from its stream's
    parameters; unchanged for an inbound call."""
    direction, callee, fields = call_fields(parameters)
    if not direction:
        return started
    return dataclasses.replace(started, direction=direction, callee=callee, fields=json.dumps(fields))


def fields_of(started) -> dict[str, str]:
    """The fields a CallStarted carries ({} for none or a malformed copy)."""
    try:
        value = json.loads(started.fields) if started.fields else {}
    except ValueError:
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(value, dict) else {}


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` that ``values`` has replaced by its value; other braces stay as written."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)
