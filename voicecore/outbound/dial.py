"""Placing one outbound call through the carrier's REST API: the thin shell around the carrier's request builder.

Owns sending the request (one retry for a 5xx, a 429 or a network error; never for a 4xx: the request is wrong)
and saying what came of it. The request, the answer URL with the call's fields and the status callback address
are the carrier's, through its descriptor (voicecore/carriers/base.py ``place_call_request``; e.g.
voicecore/carriers/twilio/outbound.py: Twilio's Calls API; voicecore/carriers/plivo/outbound.py: Plivo's Make
Call; voicecore/carriers/telnyx/outbound.py: Telnyx's TeXML Calls API). ``account_sid``
and ``auth_token`` are the carrier's API credentials (Plivo: its auth id and auth token; Telnyx: the TeXML
application id and the API key; Vonage: the application id and its private key, which sign a JWT per request).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

import h11

from voicecore import http_client
from voicecore.carriers import registry
from voicecore.config import pem_text

# The carriers whose descriptors place calls (voicecore/carriers/base.py ``placing``), in the registry's order.
CARRIERS = registry.PLACING
RETRY_DELAY_S = 1.0
# --machine-detection: Twilio's and Telnyx's MachineDetection values; Plivo and Vonage are asked for their own
# asynchronous AMD with either (Plivo's has one mode; Vonage's reports the beep anyway)
MACHINE_DETECTION = ("Enable", "DetectMessageEnd")


@dataclass(frozen=True, slots=True)
class Credentials:
    api_base: str
    account_sid: str  # Twilio: the AccountSid; Plivo: the auth id; Telnyx: the TeXML application id; Vonage: the application id
    auth_token: str  # Vonage: the application's private key as PEM text


def _placing_carrier(carrier: str):
    if carrier not in CARRIERS:
        raise ValueError(f"placing calls is built for {', '.join(CARRIERS)} only, not {carrier!r}")
    return registry.get(carrier)


def credentials(config, carrier: str) -> Credentials:
    """The settings ``carrier``'s API is asked with; ValueError naming the one that is missing (or a key file
    that cannot be read)."""
    names = _placing_carrier(carrier).placing
    account_id, secret = getattr(config, names.account_id), getattr(config, names.secret)
    for name, value in ((names.account_id, account_id), (names.secret, secret)):
        if not value:
            raise ValueError(f"{name} is not set (VOICECORE_{name.upper()}): {carrier}'s API needs {names.account_id} "
                             f"and {names.secret}")
    if names.secret_is_pem:
        secret = pem_text(names.secret, secret)
    return Credentials(getattr(config, names.api_base), account_id, secret)


@dataclass(frozen=True, slots=True)
class Placed:
    ok: bool
    call_sid: str
    status: str
    error: str | None


async def place_call(*, node_url: str, api_base: str, account_sid: str, auth_token: str, to: str, from_: str,
                     fields: Mapping[str, str] | None = None, carrier: str = "twilio",
                     machine_detection: str = "") -> Placed:
    """Ask the carrier to call ``to`` from ``from_``; when answered it fetches ``node_url``'s voice webhook (the
    node answers with its stream, which carries ``fields`` to the agent) and reports progress to the node's
    call status callback. ``machine_detection`` (MACHINE_DETECTION): the carrier's own AMD too, asynchronous, its
    result to the node. ValueError: a number, field or setting that cannot go into the request."""
    descriptor = _placing_carrier(carrier)
    if machine_detection and machine_detection not in MACHINE_DETECTION:
        raise ValueError(f"machine_detection must be one of {', '.join(MACHINE_DETECTION)}")
    request = descriptor.place_call_request(node_url.rstrip("/"), api_base, account_sid, auth_token, to, from_,
                                            fields or {}, machine_detection, now_s=time.time(),
                                            nonce=secrets.token_hex(16))
    placed = Placed(False, "", "", "not sent")
    for attempt in range(2):
        try:
            status, body = await http_client.send(request.method, request.url, request.headers, request.body)
        except (OSError, TimeoutError, asyncio.TimeoutError, h11.ProtocolError) as exc:
            placed = Placed(False, "", "", f"{type(exc).__name__} reaching the carrier's API")
        else:
            answer = descriptor.parse_placed(status, body)
            placed = Placed(answer.ok, answer.call_sid, answer.status, answer.error)
            if answer.ok or not answer.retryable:
                return placed
        if attempt == 0:
            await asyncio.sleep(RETRY_DELAY_S)
    return placed
