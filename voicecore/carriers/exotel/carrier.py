"""Exotel as the gateway and the model worker see it: the descriptor the registry serves (voicecore/carriers/base.py
says what a descriptor answers). The protocol, chunk batcher, dynamic-URL answer and Basic-auth check it uses are
protocol.py's.

- Served when ``exotel_username`` and ``exotel_password`` are set. Its answer webhook is the Voicebot applet's
  dynamic URL, ``GET|POST /exotel/voice`` (query, or form), checked by Basic auth. The session token is tied to
  the request's ``CallSid`` when it has one, else to no call (``ANY_CALL``: single use and TTL only), and reaches
  the stream among ``start.custom_parameters`` (the stream URL's query) or in the upgrade URL's own query.
- The stream's WebSocket upgrade carries the same Basic credentials, which our answer writes into the wss URL
  (``wss://user:password@host/...``).
- The stream asks for 8 kHz (mu-law or L16, no resampling). Its edge batches the pacer's 20 ms frames into
  chunks (200 ms at 8 kHz) and sends a chunk only once its last frame came: with a lead shorter than a chunk the
  carrier has played everything it had by the time the next chunk leaves (underruns at any jitter, and a
  response's first chunk waits for frames the pacer holds back), so its calls keep one chunk plus
  ``CHUNK_LEAD_MARGIN_MS`` in the carrier's buffer.
- Hang-up and transfer: the Voicebot applet has no REST call to end or redirect a live call (Exotel's v2 Legs API
  acts on legs of its own call flows, which a Voicebot applet call does not hand us). What it documents instead:
  the applet's next applet runs once the bot closes the WebSocket (protocol.py [applet]). So both actions close
  the stream, and the flow's next applet decides: a Hangup applet ends the call, a Connect applet transfers it
  (to the number configured there: the agent's target cannot reach Exotel this way).
"""

from __future__ import annotations

from voicecore.carriers.base import Carrier, CloseStream
from voicecore.carriers.edge import BatchedSink
from voicecore.carriers.exotel import protocol, sim
from voicecore.carriers.rest_common import check_target
from voicecore.carriers.webhook import (ANSWER, ANY_CALL, SESSION_TOKEN, Refusal, Route, WebhookError, call_id,
                                        parse_form, parse_query, upgrade_header)

__all__ = ["CHUNK_LEAD_MARGIN_MS", "EXOTEL", "EXOTEL_SAMPLE_RATE_HZ", "ExotelCarrier"]

EXOTEL_SAMPLE_RATE_HZ = 8000  # asked for in the stream URL: mu-law or L16 at 8 kHz, no resampling
# What a call whose edge batches frames into chunks keeps in the carrier's buffer beyond one chunk: the chunk
# carrying the next audio leaves the edge only once its last frame came from the pacer, so the carrier must
# still hold this much when it lands (the pacer's ticks, the gateway's doorbell, the network's jitter).
CHUNK_LEAD_MARGIN_MS = 100


class ExotelCarrier(Carrier):
    name = "exotel"
    title = "Exotel"
    routes = {"/exotel/voice": Route("exotel", ANSWER, ("GET", "POST"))}
    carrier_side = protocol.ExotelCarrierSide
    simulator = sim.ExotelSimulator()

    def served(self, settings):
        return bool(settings.exotel_username and settings.exotel_password)

    def check_webhook(self, route, method, target, headers, body, settings, url, now_s):
        if not protocol.check_basic_auth(headers.get("authorization"), settings.exotel_username,
                                         settings.exotel_password):
            return Refusal(403, "bad Basic credentials")
        fields = parse_query(target)
        if method == "POST" and body:
            fields.update(parse_form(body))
        sid = fields.get("CallSid")
        return self.checked(route, call_id(sid) if sid else ANY_CALL)

    def answer_document(self, request, stream_url, token, settings):
        url = protocol.voicebot_stream_url(stream_url, sample_rate_hz=EXOTEL_SAMPLE_RATE_HZ,
                                           custom_parameters=[(SESSION_TOKEN, token)])
        # The credentials the request to us carried, for Exotel to put on the upgrade (check_upgrade).
        url = protocol.with_basic_auth(url, settings.exotel_username, settings.exotel_password)
        return b"application/json", protocol.voicebot_url_response(url)

    def check_upgrade(self, target, headers, settings, stream_bases, now_s):
        authorization = upgrade_header(headers, "Authorization")
        if isinstance(authorization, Refusal):
            return authorization
        if authorization is None:
            return Refusal(403, "no Basic credentials on the upgrade")
        if not protocol.check_basic_auth(authorization, settings.exotel_username, settings.exotel_password):
            return Refusal(403, "bad Basic credentials on the upgrade")
        return None

    def new_stream(self):
        return protocol.ExotelStreamProtocol()

    def session_token(self, started, upgrade_target):
        token = started.custom_parameter(SESSION_TOKEN)
        if token is None:
            try:
                token = parse_query(upgrade_target).get(SESSION_TOKEN)
            except WebhookError:
                token = None
        return token or ""

    def outbound_sink(self, started, stream):
        encoder = stream.outbound_encoder()
        return BatchedSink(encoder, encoder.batcher())

    def pacer_lead_ms(self, edge, configured_lead_ms):
        sink = edge.sink
        if isinstance(sink, BatchedSink):
            batcher = sink.batcher
            need_ms = -(-batcher.chunk_bytes // batcher.rules.bytes_per_ms) + CHUNK_LEAD_MARGIN_MS
            if need_ms > configured_lead_ms:
                return need_ms
        return 0

    def end_call(self, ref, transfer, target, settings, *, now_s, nonce):
        if transfer:
            check_target(target)
        return CloseStream("exotel transfer: the flow's next applet" if transfer else "exotel hangup")


EXOTEL = ExotelCarrier()
