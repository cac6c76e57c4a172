"""Vonage as the carrier simulator plays it (voicecore/carriers/simulator.py says what this answers): the signed
answer webhook, the NCCO followed to the WebSocket, the ``disconnected`` event of a synchronous connect, and the
Voice API's event webhooks.

- Every request Vonage sends carries the signed-webhook JWT (protocol.sign_webhook: HS256 with the signature
  secret, its ``payload_hash`` over the body, a UUID as its ``jti``); the stream's upgrade only when the NCCO's
  endpoint asks for it (``authorization``).
- A call's ids are UUIDs; the WebSocket leg has its own uuid, and a new leg (a re-attached stream) a new one.
- A call Create Call placed tells every step of its progress, and its advanced machine detection's verdict (then,
  for a machine, the beep), as JSON events to its event_url.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

import orjson

from voicecore.carriers.events import ENCODING_L16
from voicecore.carriers.simulator import (AmdCallback, CarrierSimulator, StreamTarget, WebhookRequest,
                                          iso_timestamp)
from voicecore.carriers.vonage import protocol

__all__ = ["VonageSimulator"]

# Vonage's event status for each step of a placed call's progress, where it names it otherwise
_EVENT_STATUSES = {"initiated": "started", "in-progress": "answered", "no-answer": "timeout"}


class VonageSimulator(CarrierSimulator):
    answer_path = "/vonage/answer"
    user_agent = "Vonage-Voice/1.0"
    serving_settings = ("vonage_signature_secret",)

    def new_nonce(self, random_ids):
        return random_ids.uuid()

    def answer_webhook(self, url, ids, credentials, *, now_s, nonce, answer_method="POST", request_uuid=""):
        """``answer_method``: the application's answer_method (Vonage's default is GET; POST sends the fields as
        JSON, which the JWT's payload_hash then covers, and is what docs/reference/carriers.md#verified asks for)."""
        # The signed-webhook JWT hashes the body: the JSON fields of a POST, the empty body of a GET.
        fields = {"to": ids.to_number.lstrip("+"), "from": ids.from_number.lstrip("+"), "uuid": ids.call_id,
                  "conversation_uuid": ids.session_id, "region_url": "https://api-eu-1.vonage.com"}
        body = orjson.dumps(fields) if answer_method == "POST" else b""
        authorization = protocol.sign_webhook(body, credentials.vonage_signature_secret, int(now_s), nonce,
                                              api_key=credentials.vonage_api_key, application_id=ids.account_id)
        if answer_method == "POST":
            return WebhookRequest("POST", url, (("Content-Type", "application/json"), ("Authorization", authorization)),
                                  body)
        return WebhookRequest("GET", url + "?" + urlencode(fields), (("Authorization", authorization),))

    def parse_answer(self, body):
        return _connected_websocket(_json_array(body, "the NCCO is not JSON", "the NCCO is not a JSON array"))

    def stream_headers(self, target, credentials, *, nonce, now_s):
        # Only when the NCCO's endpoint asks: "vonage", the signed-webhook JWT (of no body); "custom", its value.
        kind = target.authorization.get("type")
        if kind == protocol.AUTHORIZATION_VONAGE:
            return {"Authorization": protocol.sign_webhook(b"", credentials.vonage_signature_secret, int(now_s), nonce,
                                                           api_key=credentials.vonage_api_key)}
        if kind == "custom":
            return {"Authorization": str(target.authorization.get("value", ""))}
        return {}

    def continuation_request(self, url, ids, credentials, *, now_s, nonce, target=None, leg_id=""):
        """The WebSocket leg's ``disconnected`` event to the synchronous connect's ``eventUrl``: JSON with the
        endpoint's headers of ``target`` (the stream that ended) and ``leg_id`` (that leg's uuid)."""
        if target is None:
            raise ValueError("Vonage's disconnected event names the stream that ended: give its target")
        body = protocol.leg_event(protocol.LEG_DISCONNECTED, leg_id or ids.stream_id, ids.session_id,
                                  ids.from_number.lstrip("+"), target.url, target.headers, iso_timestamp(now_s))
        authorization = protocol.sign_webhook(body, credentials.vonage_signature_secret, int(now_s), nonce,
                                              api_key=credentials.vonage_api_key, application_id=ids.account_id)
        return WebhookRequest("POST", url, (("Content-Type", "application/json"), ("Authorization", authorization)),
                              body)

    def parse_continuation(self, body):
        """An empty body is no NCCO (the original NCCO goes on: ours has nothing after the connect, so the call
        completes), an NCCO without a connect to a websocket runs out (the simulator plays none of its actions) and
        the call ends; anything but a JSON array is no NCCO Vonage would run."""
        if not body.strip():
            return None
        ncco = _json_array(body, "the event's answer is not JSON (no NCCO)",
                           "the event's answer is not an NCCO (a JSON array)")
        if not any(type(action) is dict and action.get("action") == "connect" for action in ncco):
            return None
        return _connected_websocket(ncco)

    def callback_request(self, placed, url, fields, credentials, *, now_s, nonce):
        """One event: the call's ids, numbers and timestamp, then ``fields``, as JSON."""
        event = {"uuid": placed.call_sid, "conversation_uuid": "CON-" + placed.call_sid, "direction": "outbound",
                 "from": placed.from_[1:], "to": placed.to[1:], "timestamp": iso_timestamp(int(now_s)), **fields}
        body = json.dumps(event).encode()
        authorization = protocol.sign_webhook(body, credentials.vonage_signature_secret, int(now_s), nonce,
                                              api_key=credentials.vonage_api_key, application_id=placed.account_sid)
        return WebhookRequest("POST", url, (("Content-Type", "application/json"), ("Authorization", authorization)),
                              body)

    def progress_callback(self, placed, status, *, sequence, duration_s, call_uuid):
        if not placed.status_callback:
            return None
        event = {"status": _EVENT_STATUSES.get(status, status)}
        if duration_s is not None:
            event["duration"] = str(duration_s)
        return placed.status_callback, event

    def amd_mode(self, placed):
        # its verdicts are human or machine, as Enable's; the default mode reports the beep after
        return "Enable" if placed.async_amd and placed.amd_callback else ""

    def amd_callbacks(self, placed, answered_by, at_ms, beep_at_ms, call_uuid):
        """``status`` human or machine once it decided, then for a machine whose beep it heard (mode default or
        detect_beep) ``machine`` with ``sub_state`` beep_start as the beep starts."""
        status = "human" if answered_by == "human" else "machine"
        verdict = AmdCallback(at_ms, {"status": status})
        if status != "machine" or beep_at_ms is None or placed.machine_detection == "detect":
            return (verdict,)
        return verdict, AmdCallback(beep_at_ms, {"status": "machine", "sub_state": "beep_start"}, beep=True)


def _json_array(body: bytes, not_json: str, not_array: str) -> list:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError(not_json) from None
    if type(value) is not list:
        raise ValueError(not_array)
    return value


def _connected_websocket(ncco: list) -> StreamTarget:
    """Where the NCCO's first connect to a websocket endpoint streams the call."""
    for action in ncco:
        if type(action) is not dict or action.get("action") != "connect":
            continue
        for endpoint in action.get("endpoint") or ():
            if type(endpoint) is dict and endpoint.get("type") == "websocket" and type(endpoint.get("uri")) is str:
                return _websocket_target(action, endpoint)
    raise ValueError("the NCCO has no connect action to a websocket endpoint")


def _websocket_target(action, endpoint) -> StreamTarget:
    content_type = endpoint.get("content-type", "")
    rate_text = content_type.partition("rate=")[2] if type(content_type) is str else ""
    if not (content_type.startswith("audio/l16") and rate_text.isdigit()
            and int(rate_text) in protocol.VONAGE_SAMPLE_RATES_HZ):
        raise ValueError("the NCCO's websocket content-type is not audio/l16;rate=8000|16000")
    headers = endpoint.get("headers") or {}
    if type(headers) is not dict:
        raise ValueError("the NCCO's websocket headers are not an object")
    parameters = tuple((key, value if type(value) is str else orjson.dumps(value).decode())
                       for key, value in headers.items())
    authorization = endpoint.get("authorization") or {}
    if type(authorization) is not dict or authorization.get("type") not in (None, "vonage", "custom"):
        raise ValueError("the NCCO's websocket authorization is not {\"type\": \"vonage\" | \"custom\"}")
    return StreamTarget(url=endpoint["uri"], parameters=parameters, encoding=ENCODING_L16,
                        sample_rate_hz=int(rate_text), headers=dict(headers), authorization=authorization,
                        redirect=_synchronous_event_url(action))


def _synchronous_event_url(action) -> str:
    """Where Vonage asks what to do when the connect's WebSocket ends with the call still up: its ``eventUrl``
    (the first of the array), only for ``"eventType": "synchronous"`` ("to receive this event, you must include
    the eventType: synchronous") and a POST (ours; the default ``eventMethod``); else "" (the NCCO goes on)."""
    urls = action.get("eventUrl")
    if action.get("eventType") != protocol.EVENT_TYPE_SYNCHRONOUS or type(urls) is not list or not urls:
        return ""
    if str(action.get("eventMethod") or "POST").upper() != "POST" or type(urls[0]) is not str:
        return ""
    return urls[0]
