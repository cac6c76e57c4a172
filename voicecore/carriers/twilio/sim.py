"""Twilio as the carrier simulator plays it (voicecore/carriers/simulator.py says what this answers): the Calls
API's progress and AMD callbacks of a call it placed, signed with X-Twilio-Signature over the URL and the form.

Twilio's voice webhook, its TwiML followed to the stream and the stream itself are the simulator's own core and
shell (voicecore/sim/carrier_core.py CarrierCall, voicecore/sim/carrier.py place_call), not its carrier modes:
``answer_path`` stays empty and the descriptor has no ``carrier_side``.
"""

from __future__ import annotations

from urllib.parse import urlencode

from voicecore.carriers.simulator import TwimlCallsSimulator, WebhookRequest
from voicecore.carriers.twilio.signature import compute_signature

__all__ = ["TwilioSimulator"]


class TwilioSimulator(TwimlCallsSimulator):
    user_agent = "TwilioProxy/1.1"
    serving_settings = ("twilio_auth_token",)

    def callback_request(self, placed, url, fields, credentials, *, now_s, nonce):
        signature = compute_signature(credentials.twilio_auth_token, url, fields)
        headers = (("Content-Type", "application/x-www-form-urlencoded"), ("X-Twilio-Signature", signature))
        return WebhookRequest("POST", url, headers, urlencode(fields).encode("ascii"))
