"""Placing one outbound call through the carrier's REST API: the thin shell around the carrier's request builder.

Owns sending the request (one retry for a 5xx, a 429 or a network error; never for a 4xx: the request is wrong)
and saying what came of it. The request, the answer URL with the call's fields and the status callback address
are the carrier package's (voicecore/carriers/twilio/outbound.py): only Twilio's Calls API is placed for now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import h11

from voicecore import http_client
from voicecore.carriers.twilio import outbound as twilio_outbound

CARRIERS = ("twilio",)
RETRY_DELAY_S = 1.0
STATUS_CALLBACK_PATH = "/twilio/call-status"
VOICE_PATH = "/twilio/voice"


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
    call status callback. ValueError: a number, field or setting that cannot go into the request."""
    if carrier not in CARRIERS:
        raise ValueError(f"placing calls is built for {', '.join(CARRIERS)} only, not {carrier!r}")
    base = node_url.rstrip("/")
    request = twilio_outbound.place_call_request(
        account_sid, auth_token, to, from_, url=twilio_outbound.answer_url(base + VOICE_PATH, to, fields or {}),
        status_callback=base + STATUS_CALLBACK_PATH, machine_detection=machine_detection,
        async_amd=bool(machine_detection), base_url=api_base)
    placed = Placed(False, "", "", "not sent")
    for attempt in range(2):
        try:
            status, body = await http_client.send(request.method, request.url, request.headers, request.body)
        except (OSError, TimeoutError, asyncio.TimeoutError, h11.ProtocolError) as exc:
            placed = Placed(False, "", "", f"{type(exc).__name__} reaching the carrier's API")
        else:
            answer = twilio_outbound.parse_place_call_response(status, body)
            placed = Placed(answer.ok, answer.call_sid, answer.status, answer.error)
            if answer.ok or not answer.retryable:
                return placed
        if attempt == 0:
            await asyncio.sleep(RETRY_DELAY_S)
    return placed
