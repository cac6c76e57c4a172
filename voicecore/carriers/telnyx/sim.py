"""Telnyx as the carrier simulator plays it (voicecore/carriers/simulator.py says what this answers): TeXML's
signed instruction fetches, the TeXML answer followed to the stream, and the TeXML Calls API's callbacks.

- The answer webhook and the request of the ``<Redirect>`` after the stream are TeXML form POSTs, signed with
  Ed25519 over ``timestamp|body`` (protocol.sign_webhook); the stream's upgrade carries nothing.
- A call's id is its call_control_id (TeXML's CallSid: "v3:" and URL-safe base64), the one its stream's
  ``start`` names; its stream may deliver caller frames out of order (docs/explanation/protocols.md#b).
- A call the TeXML Calls API placed tells its progress and its AMD as Twilio's does (TeXML copies the Calls
  API), its AMD callback with ``CallSidLegacy`` too, every callback Ed25519-signed.
"""

from __future__ import annotations

from urllib.parse import urlencode

from voicecore.carriers.events import ENCODING_PCMA, ENCODING_PCMU
from voicecore.carriers.simulator import (AmdCallback, CallIdentity, StreamTarget, TwimlCallsSimulator,
                                          WebhookRequest, continuation_from_xml, parse_xml, redirect_after)
from voicecore.carriers.telnyx import protocol
from voicecore.timing import SAMPLE_RATE_HZ

__all__ = ["TelnyxSimulator"]

_CALL_CONTROL_ID_BYTES = 39  # "v3:" + 52 URL-safe base64 characters, as Telnyx's ids are


class TelnyxSimulator(TwimlCallsSimulator):
    answer_path = "/telnyx/voice"
    user_agent = "Telnyx Webhooks"
    serving_settings = ("telnyx_public_key",)
    reorders_caller_frames = True

    def new_identity(self, call_id, account_id, from_number, to_number, random_ids):
        return CallIdentity(call_id or "v3:" + random_ids.token_urlsafe(_CALL_CONTROL_ID_BYTES),
                            account_id or random_ids.uuid(), self.new_stream_id(random_ids), random_ids.uuid(),
                            from_number, to_number)

    def answer_webhook(self, url, ids, credentials, *, now_s, nonce, answer_method="POST", request_uuid=""):
        return _texml_request(url, ids, credentials, now_s, "ringing")

    def parse_answer(self, body):
        root = parse_xml(body, "TeXML")
        stream = root.find("./Connect/Stream")
        if root.tag != "Response" or stream is None or not stream.get("url"):
            raise ValueError("TeXML has no <Response><Connect><Stream url=...>")
        problems = []
        if stream.get("bidirectionalMode") != "rtp":
            problems.append("TeXML stream without bidirectionalMode=\"rtp\": Telnyx would read our media as MP3 files")
        codec = stream.get("bidirectionalCodec") or stream.get("codec") or "PCMU"
        inbound_codec = stream.get("codec") or "PCMU"
        if codec != inbound_codec:
            problems.append("TeXML asks for different codecs each way; the simulator uses bidirectionalCodec both ways")
        encoding = {"PCMU": ENCODING_PCMU, "PCMA": ENCODING_PCMA}.get(codec)
        if encoding is None:
            raise ValueError(f"TeXML asks for a codec the simulator does not speak: {codec[:16]!r}")
        rate = stream.get("bidirectionalSamplingRate") or str(SAMPLE_RATE_HZ)
        if rate != str(SAMPLE_RATE_HZ):
            raise ValueError("TeXML asks for G.711 at a rate other than 8000 Hz")
        parameters = tuple((p.get("name", ""), p.get("value", "")) for p in stream.findall("Parameter"))
        return StreamTarget(url=stream.get("url", ""), parameters=parameters, encoding=encoding,
                            problems=tuple(problems), redirect=redirect_after(root, root.find("./Connect")))

    def continuation_request(self, url, ids, credentials, *, now_s, nonce, target=None, leg_id=""):
        return _texml_request(url, ids, credentials, now_s, "in-progress")

    def parse_continuation(self, body):
        return continuation_from_xml(body, "./Connect/Stream", self.parse_answer)

    def callback_request(self, placed, url, fields, credentials, *, now_s, nonce):
        return _signed_form(url, urlencode(fields).encode("ascii"), credentials, now_s)

    def amd_callbacks(self, placed, answered_by, at_ms, beep_at_ms, call_uuid):
        (callback,) = super().amd_callbacks(placed, answered_by, at_ms, beep_at_ms, call_uuid)
        return (AmdCallback(callback.at_ms, {**callback.fields, "CallSidLegacy": placed.call_sid}),)


def _texml_request(url, ids, credentials, now_s, status) -> WebhookRequest:
    """A TeXML request for the call (the answer's, a continuation's): a form POST like TwiML's."""
    form = {"AccountSid": ids.account_id, "CallSid": ids.call_id, "CallSidLegacy": ids.call_id,
            "CallSessionId": ids.session_id, "ConnectionId": "1684641123236054244", "From": ids.from_number,
            "To": ids.to_number, "CallStatus": status, "Direction": "inbound"}
    return _signed_form(url, urlencode(form).encode("ascii"), credentials, now_s)


def _signed_form(url, body: bytes, credentials, now_s) -> WebhookRequest:
    """A form POST signed as Telnyx signs its webhooks: Ed25519 over "timestamp|body"."""
    timestamp = str(int(now_s))
    signature = protocol.sign_webhook(bytes.fromhex(credentials.telnyx_private_key), timestamp, body)
    headers = (("Content-Type", "application/x-www-form-urlencoded"), (protocol.TIMESTAMP_HEADER, timestamp),
               (protocol.SIGNATURE_HEADER, signature))
    return WebhookRequest("POST", url, headers, body)
