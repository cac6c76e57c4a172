"""Plivo as the gateway and the model worker see it: the descriptor the registry serves (voicecore/carriers/base.py
says what a descriptor answers). The protocol, encoder, answer XML and signatures it uses are protocol.py's, the
bound on its buffer backlog.py's, the Call API requests rest.py's.

- Served when ``plivo_auth_token`` is set. Its answer webhook is ``POST /plivo/voice`` (form), checked by
  ``X-Plivo-Signature-V3`` + nonce over the URL and the form; the session token is tied to its ``CallUUID`` (the
  stream's ``start.callId``) and reaches the stream in ``extraHeaders`` (``start.extra_headers``, found by name
  case-insensitively: the headers may come back in another case [unverified]).
- The stream's WebSocket upgrade carries ``X-Plivo-Signature-V3`` + nonce over a GET of the stream URL (ws(s)://
  read as http://), checked against every base the carrier may have dialled (this node's and the fleet's).
- ``/plivo/transfer`` answers the ``aleg_url`` of a transfer with ``<Dial>`` the target in its query (signed by
  Plivo like the answer webhook; GET or POST).
- A stream in mu-law at 8 kHz takes the pacer's frames as they are (final templates); L16 is finished by the edge.
- Plivo's buffer takes whatever is sent (40-60 s [plivo ref]) and plays it as its media server can, so a lead
  kept by time says nothing about how deep that buffer is once Plivo played late (network jitter, a slow media
  server): every late ms stays in the buffer. Its ``playedStream`` echoes say exactly what played
  (:class:`~voicecore.carriers.plivo.protocol.CheckpointLead`), so its calls send only while the audio no echo
  has confirmed is below ``plivo_max_unplayed_ms`` (:class:`~voicecore.carriers.plivo.backlog.EchoBoundedBacklog`).
- Re-attach (voicecore/reattach.py): the answer's ``<Stream keepCallAlive="true">`` is followed by ``<Redirect>``
  to ``/plivo/reattach?token=...``, which Plivo requests when the stream disconnects (signed like the answer
  webhook, over the URL with its token); the answer is a new ``<Stream>`` for the same CallUUID, or ``<Hangup/>``.
- Outbound calls (outbound.py): the Make Call request's answer URL is ``/plivo/voice`` with the call's direction,
  callee and fields in its query (signed by Plivo with the URL); the answer XML passes them to the stream packed in
  one ``extraHeaders`` item; the call's ring and hang-up come to ``POST /plivo/call-status`` (signed) and, with
  the answer webhook's ``in-progress``, are kept in the call store under the call's RequestUUID, its CallUUID (the
  id its stream and record go by) beside it once a request names both. Its machine detection callback (same
  route, ``Event=MachineDetection``) is the carrier's AMD: ``Machine`` mapped to the detector's vocabulary.
- Hang-up and transfer: ``DELETE`` / ``POST .../Call/{CallUUID}/``, basic auth ``plivo_auth_id`` +
  ``plivo_auth_token``; a transfer sends Plivo to the gateway's ``/plivo/transfer?to=...`` (under ``public_url``).
"""

from __future__ import annotations

from voicecore.carriers.base import CannotEnd, Carrier, PlacingSettings
from voicecore.carriers.edge import FrameSink
from voicecore.carriers.events import ENCODING_PCMU
from voicecore.carriers.plivo import outbound, protocol, rest, sim
from voicecore.carriers.plivo.backlog import EchoBoundedBacklog
from voicecore.carriers.rest_common import check_target
from voicecore.carriers.webhook import (ANSWER, EVENT, REATTACH, SESSION_TOKEN, TRANSFER, AnswerRequest, Refusal,
                                        Route, WebhookError, call_id, call_status_event, parse_form, parse_query, reattach_request,
                                        upgrade_header)
from voicecore.timing import FRAME_MS, SAMPLE_RATE_HZ

__all__ = ["PLIVO", "PlivoCarrier", "REATTACH_PATH"]

VOICE_PATH = "/plivo/voice"
REATTACH_PATH = "/plivo/reattach"
# Plivo's CallStatus values for a call that is over (its <Redirect> page: completed; busy, failed, timeout or
# no-answer for an outbound call).
_CALL_OVER = frozenset({"completed", "busy", "failed", "timeout", "no-answer"})


class PlivoCarrier(Carrier):
    name = "plivo"
    title = "Plivo"
    routes = {VOICE_PATH: Route("plivo", ANSWER, ("POST",)),
              rest.TRANSFER_PATH: Route("plivo", TRANSFER, ("GET", "POST")),
              REATTACH_PATH: Route("plivo", REATTACH, ("POST",)),
              outbound.STATUS_PATH: Route("plivo", EVENT, ("POST",))}
    carrier_side = protocol.PlivoCarrierSide
    simulator = sim.PlivoSimulator()
    placing = PlacingSettings("plivo_api_base", "plivo_auth_id", "plivo_auth_token")
    reattaches = True  # its answer document names a re-attach step (``<Redirect>`` after the kept-alive stream)

    def served(self, settings):
        return bool(settings.plivo_auth_token)

    def check_webhook(self, route, method, target, headers, body, settings, url, now_s):
        form = parse_form(body)
        if not protocol.validate_signature_v3(settings.plivo_auth_token, url,
                                              headers.get(protocol.SIGNATURE_V3_NONCE_HEADER.lower()),
                                              headers.get(protocol.SIGNATURE_V3_HEADER.lower()), form, method):
            return Refusal(403, "bad X-Plivo-Signature-V3")
        if route.kind == REATTACH:
            return reattach_request(self.name, target, form.get("CallUUID"), form.get("CallStatus"), _CALL_OVER)
        if route.kind == EVENT and outbound.is_amd_result(form):
            # its machine detection (machine_detection_url): for the call's stream by its CallUUID, and kept on the
            # status row that CallUUID was linked to (call_status.record_call_sid)
            try:
                amd = outbound.parse_amd_result(form)
            except WebhookError as exc:
                return Refusal(400, "bad AMD callback", f"AMD callback rejected: {exc}", quiet=True, problem="status")
            return AnswerRequest(self.name, EVENT, amd.call_uuid, f"call {amd.call_uuid}: answered by {amd.answered_by} "
                                 f"(Plivo machine detection, Machine={form.get('Machine')})", answered_by=amd.answered_by)
        if route.kind == EVENT:
            return call_status_event(self.name, form, outbound.parse_call_status,
                                     lambda p: f"Plivo {form.get('CallStatus')}, {form.get('Event', '?')}",
                                     call_id=lambda p: p.call_uuid)
        checked = self.checked(route, call_id(form.get("CallUUID")))
        if route.kind != ANSWER or isinstance(checked, Refusal):
            return checked
        parameters = outbound.stream_parameters(target.split("?", 1)[1] if "?" in target else "")
        if not parameters:
            return checked
        # A call we placed: its answer is its in-progress status, under the id Make Call gave (RequestUUID, which
        # Plivo's answer request names ALegRequestUUID), linked to its CallUUID (the id its stream goes by).
        request_uuid = form.get("RequestUUID") or form.get("ALegRequestUUID", "")
        try:
            progress = outbound.parse_call_status({**form, "RequestUUID": request_uuid, "CallStatus": "in-progress"})
        except WebhookError:
            progress = None
        return AnswerRequest(self.name, ANSWER, checked.call_id, parameters=parameters, call_status=progress)

    def answer_document(self, request, stream_url, token, settings, reattach_token=None):
        redirect = None if reattach_token is None else f"{settings.public_url}{REATTACH_PATH}?token={reattach_token}"
        headers = outbound.extra_headers(SESSION_TOKEN, token, request.parameters)
        return b"text/xml", protocol.stream_xml(stream_url, headers, redirect_url=redirect).encode()

    def hangup_document(self):
        """The answer to a re-attach request for a call that is over."""
        return b"text/xml", protocol.hangup_xml().encode()

    def transfer_document(self, request, target):
        if request.kind != TRANSFER:
            raise ValueError("not a transfer request")
        try:
            to = parse_query(target).get(rest.TARGET_PARAMETER, "")
        except WebhookError:
            raise ValueError("malformed query") from None
        return b"text/xml", rest.dial_xml(to).encode()

    def check_upgrade(self, target, headers, settings, stream_bases, now_s):
        signature = upgrade_header(headers, protocol.SIGNATURE_V3_HEADER)
        nonce = upgrade_header(headers, protocol.SIGNATURE_V3_NONCE_HEADER)
        for value in (signature, nonce):
            if isinstance(value, Refusal):
                return value
        if signature is None or nonce is None:
            return Refusal(403, "no X-Plivo-Signature-V3 on the upgrade")
        if not any(protocol.validate_upgrade_signature(settings.plivo_auth_token, base + target, nonce, signature)
                   for base in stream_bases):
            return Refusal(403, "bad X-Plivo-Signature-V3 on the upgrade")
        return None

    def new_stream(self):
        return protocol.PlivoStreamProtocol()

    def session_token(self, started, upgrade_target):
        token = started.custom_parameter(SESSION_TOKEN)
        if token is None:
            token = next((value for key, value in started.custom_parameters if key.lower() == SESSION_TOKEN), None)
        return token or ""

    def final_templates(self, started, stream, arena_law):
        if started.encoding == ENCODING_PCMU and started.sample_rate_hz == SAMPLE_RATE_HZ:
            return protocol.wire_templates(started.stream_id, stream.content_type, started.sample_rate_hz)
        return None

    def outbound_sink(self, started, stream):
        return FrameSink(protocol.PlivoOutboundEncoder(started.stream_id, stream.content_type, started.sample_rate_hz))

    def backlog_max_frames(self, settings):
        max_unplayed_ms = settings.plivo_max_unplayed_ms  # whole frames, rounded down: never above the setting
        if max_unplayed_ms > 0:
            return max(1, max_unplayed_ms // FRAME_MS)
        return 0

    def new_backlog(self, templates):
        return EchoBoundedBacklog(templates)

    def end_call(self, ref, transfer, target, settings, *, now_s, nonce):
        if transfer:
            check_target(target)
        if not (settings.plivo_auth_id and settings.plivo_auth_token):
            return CannotEnd("plivo_auth_id is not set")
        if transfer:
            aleg_url = rest.transfer_url(settings.public_url, target)
            return rest.transfer_request(settings.plivo_auth_id, ref.call_id, aleg_url, settings.plivo_auth_token,
                                         settings.plivo_api_base)
        return rest.hangup_request(settings.plivo_auth_id, ref.call_id, settings.plivo_auth_token,
                                   settings.plivo_api_base)

    def send_digits(self, ref, digits, settings, *, now_s, nonce):
        if not (settings.plivo_auth_id and settings.plivo_auth_token):
            return CannotEnd("plivo_auth_id is not set")
        return rest.send_dtmf_request(settings.plivo_auth_id, ref.call_id, digits, settings.plivo_auth_token,
                                      settings.plivo_api_base)

    def parse_response(self, status_code, body):
        return rest.parse_response(status_code, body)

    def place_call_request(self, node_url, api_base, account_id, secret, to, from_, fields, machine_detection, *,
                           now_s, nonce):
        # Plivo's AMD has one mode (Machine true/false): either value asks for it, asynchronous, never hangup
        return outbound.place_call_request(
            account_id, secret, to, from_, answer_url=outbound.answer_url(node_url + VOICE_PATH, to, fields),
            status_url=node_url + outbound.STATUS_PATH, base_url=api_base, machine_detection=bool(machine_detection))

    def parse_placed(self, status_code, body):
        return outbound.parse_place_call_response(status_code, body)


PLIVO = PlivoCarrier()
