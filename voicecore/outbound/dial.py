"""Placing one outbound call through the carrier's REST API: the thin shell around the carrier's request builder.

Owns sending the request (one retry for a 5xx, a 429 or a network error; never for a 4xx: the request is wrong)
and saying what came of it. The request, the answer URL with the call's fields and the status callback address
are the carrier package's (voicecore/carriers/twilio/outbound.py: Twilio's Calls API; voicecore/carriers/plivo/
outbound.py: Plivo's Make Call; voicecore/carriers/telnyx/outbound.py: Telnyx's TeXML Calls API). ``account_sid``
and ``auth_token`` are the carrier's API credentials (Plivo: its auth id and auth token; Telnyx: the TeXML
application id and the API key; Vonage: the application id and its private key, which sign a JWT per request).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import h11

from voicecore import http_client
from voicecore.outbound import call_fields
from voicecore.carriers.plivo import outbound as plivo_outbound
from voicecore.carriers.telnyx import outbound as telnyx_outbound
from voicecore.carriers.vonage import outbound as vonage_outbound
from voicecore.carriers.vonage import rest as vonage_rest
from voicecore.carriers.twilio import outbound as twilio_outbound

CARRIERS = ("twilio", "plivo", "telnyx", "vonage")
RETRY_DELAY_S = 1.0
STATUS_CALLBACK_PATH = "/twilio/call-status"
VOICE_PATH = "/twilio/voice"
PLIVO_VOICE_PATH = "/plivo/voice"
TELNYX_VOICE_PATH = "/telnyx/voice"
# --machine-detection: Twilio's and Telnyx's MachineDetection values; Plivo and Vonage are asked for their own
# asynchronous AMD with either (Plivo's has one mode; Vonage's reports the beep anyway)
MACHINE_DETECTION = ("Enable", "DetectMessageEnd")


@dataclass(frozen=True, slots=True)
class Credentials:
    api_base: str
    account_sid: str  # Twilio: the AccountSid; Plivo: the auth id; Telnyx: the TeXML application id; Vonage: the application id
    auth_token: str


def credentials(config, carrier: str) -> Credentials:
    """The settings ``carrier``'s API is asked with; ValueError naming the one that is missing."""
    if carrier == "plivo":
        found = Credentials(config.plivo_api_base, config.plivo_auth_id, config.plivo_auth_token)
        names = ("plivo_auth_id", "plivo_auth_token")
    elif carrier == "twilio":
        found = Credentials(config.twilio_api_base, config.twilio_account_sid, config.twilio_auth_token)
        names = ("twilio_account_sid", "twilio_auth_token")
    elif carrier == "vonage":
        found = Credentials(config.vonage_api_base, config.vonage_application_id, vonage_private_key(config))
        names = ("vonage_application_id", "vonage_private_key")
    elif carrier == "telnyx":
        found = Credentials(config.telnyx_api_base, config.telnyx_texml_application_id, config.telnyx_api_key)
        names = ("telnyx_texml_application_id", "telnyx_api_key")
    else:
        raise ValueError(f"placing calls is built for {', '.join(CARRIERS)} only, not {carrier!r}")
    for name, value in zip(names, (found.account_sid, found.auth_token)):
        if not value:
            raise ValueError(f"{name} is not set (VOICECORE_{name.upper()}): {carrier}'s API needs {names[0]} and "
                             f"{names[1]}")
    return found


def vonage_private_key(config) -> str:
    """vonage_private_key as PEM text: the setting itself, or the file it names; ValueError for a file that
    cannot be read."""
    value = config.vonage_private_key
    if not value or value.lstrip().startswith("-----BEGIN"):
        return value
    try:
        return Path(value).read_text()
    except OSError as exc:
        raise ValueError(f"vonage_private_key: cannot read {value} ({type(exc).__name__})") from None


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
    if carrier not in CARRIERS:
        raise ValueError(f"placing calls is built for {', '.join(CARRIERS)} only, not {carrier!r}")
    base = node_url.rstrip("/")
    if machine_detection and machine_detection not in MACHINE_DETECTION:
        raise ValueError(f"machine_detection must be one of {', '.join(MACHINE_DETECTION)}")
    if carrier == "plivo":
        # Plivo's AMD has one mode (Machine true/false): either value asks for it, asynchronous, never hangup
        request = plivo_outbound.place_call_request(
            account_sid, auth_token, to, from_,
            answer_url=plivo_outbound.answer_url(base + PLIVO_VOICE_PATH, to, fields or {}),
            status_url=base + plivo_outbound.STATUS_PATH, base_url=api_base,
            machine_detection=bool(machine_detection))
        parse = plivo_outbound.parse_place_call_response
    elif carrier == "telnyx":
        request = telnyx_outbound.place_call_request(
            account_sid, auth_token, to, from_,
            url=base + TELNYX_VOICE_PATH + "?" + urlencode(call_fields.parameters_for(to, fields or {})),
            status_callback=base + telnyx_outbound.STATUS_PATH, base_url=api_base, machine_detection=machine_detection)
        parse = telnyx_outbound.parse_place_call_response
    elif carrier == "vonage":
        # Vonage's asynchronous advanced machine detection reports the beep too: either value asks for it
        token = vonage_rest.application_jwt(account_sid, auth_token, time.time(), secrets.token_hex(16))
        request = vonage_outbound.place_call_request(
            token, to, from_, answer_url=vonage_outbound.answer_url(base + vonage_outbound.ANSWER_PATH, to, fields or {}),
            event_url=base + vonage_outbound.EVENT_PATH, base_url=api_base, machine_detection=bool(machine_detection))
        parse = vonage_outbound.parse_place_call_response
    else:
        request = twilio_outbound.place_call_request(
            account_sid, auth_token, to, from_, url=twilio_outbound.answer_url(base + VOICE_PATH, to, fields or {}),
            status_callback=base + STATUS_CALLBACK_PATH, machine_detection=machine_detection,
            async_amd=bool(machine_detection), base_url=api_base)
        parse = twilio_outbound.parse_place_call_response
    placed = Placed(False, "", "", "not sent")
    for attempt in range(2):
        try:
            status, body = await http_client.send(request.method, request.url, request.headers, request.body)
        except (OSError, TimeoutError, asyncio.TimeoutError, h11.ProtocolError) as exc:
            placed = Placed(False, "", "", f"{type(exc).__name__} reaching the carrier's API")
        else:
            answer = parse(status, body)
            placed = Placed(answer.ok, answer.call_sid, answer.status, answer.error)
            if answer.ok or not answer.retryable:
                return placed
        if attempt == 0:
            await asyncio.sleep(RETRY_DELAY_S)
    return placed
