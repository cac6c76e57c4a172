"""Exotel as the carrier simulator plays it (voicecore/carriers/simulator.py says what this answers): the
Voicebot applet's dynamic-URL request, its JSON answer followed to the stream, and the Basic credentials that URL
carried put on the stream's upgrade. Exotel's Voicebot calls have no REST API here (voicecore/carriers/exotel/
carrier.py) and nothing follows their stream.
"""

from __future__ import annotations

import base64
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import orjson

from voicecore.carriers.events import ENCODING_L16
from voicecore.carriers.exotel import protocol
from voicecore.carriers.simulator import CallIdentity, CarrierSimulator, StreamTarget, WebhookRequest
from voicecore.timing import SAMPLE_RATE_HZ

__all__ = ["ExotelSimulator"]

_RATE_KEY = "sample-rate"  # the stream URL's query parameter Exotel reads the rate from; the others it hands back


class ExotelSimulator(CarrierSimulator):
    answer_path = "/exotel/voice"
    user_agent = "Exotel/1.0"
    serving_settings = ("exotel_username", "exotel_password")

    def new_stream_id(self, random_ids):
        return random_ids.uuid_hex()

    def new_identity(self, call_id, account_id, from_number, to_number, random_ids):
        # Exotel's CallSid and StreamSid are 32 hex digits; its calls name no session
        return CallIdentity(call_id or random_ids.uuid_hex(), account_id or "simulator", self.new_stream_id(random_ids),
                            "", from_number, to_number)

    def answer_webhook(self, url, ids, credentials, *, now_s, nonce, answer_method="POST", request_uuid=""):
        # The Voicebot applet's dynamic URL: asked per call (a GET with the call's details), Basic auth from
        # the credentials written into the applet's URL.
        query = {"CallSid": ids.call_id, "CallFrom": ids.from_number, "CallTo": ids.to_number, "From": ids.from_number,
                 "To": ids.to_number, "Direction": "incoming", "CallType": "call-attempt"}
        pair = f"{credentials.exotel_username}:{credentials.exotel_password}".encode("utf-8")
        basic = "Basic " + base64.b64encode(pair).decode("ascii")
        return WebhookRequest("GET", url + "?" + urlencode(query), (("Authorization", basic),))

    def parse_answer(self, body):
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ValueError("the dynamic-URL answer is not JSON") from None
        url = answer.get("url") if type(answer) is dict else None
        if type(url) is not str or not url.startswith(("ws://", "wss://")):
            raise ValueError("the dynamic-URL answer has no ws(s) \"url\"")
        parts = urlsplit(url)
        basic = ""
        if parts.username is not None:
            # wss://KEY:TOKEN@host/...: Exotel sends the pair as Basic auth on the upgrade [applet], decoded from
            # the URL's percent-encoding as any HTTP client does (RFC 3986 section 3.2.1).
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode("utf-8")
            basic = "Basic " + base64.b64encode(pair).decode("ascii")
            host = parts.hostname or ""
            netloc = f"[{host}]" if ":" in host else host
            if parts.port is not None:
                netloc += f":{parts.port}"
            url = urlunsplit(parts._replace(netloc=netloc))
        rate = SAMPLE_RATE_HZ
        parameters = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key == _RATE_KEY:
                if not value.isdigit() or int(value) not in protocol.SAMPLE_RATES_HZ[ENCODING_L16]:
                    raise ValueError("the stream URL's sample-rate is not 8000, 16000 or 24000")
                rate = int(value)
            else:
                parameters.append((key, value))
        problems = ()
        if len(parameters) > protocol.MAX_CUSTOM_PARAMETERS:
            problems = (f"the stream URL carries {len(parameters)} custom parameters; Exotel passes at most "
                        f"{protocol.MAX_CUSTOM_PARAMETERS}",)
        return StreamTarget(url=url, parameters=tuple(parameters), encoding=ENCODING_L16, sample_rate_hz=rate,
                            basic_auth=basic, problems=problems)

    def stream_headers(self, target, credentials, *, nonce, now_s):
        if target.basic_auth:
            return {"Authorization": target.basic_auth}  # only what the URL carried (wss://user:pass@...)
        return {}
