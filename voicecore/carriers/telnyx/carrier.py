"""Telnyx as the gateway and the model worker see it: the descriptor the registry serves (voicecore/carriers/base.py
says what a descriptor answers). The protocol, encoder, TeXML and signatures it uses are protocol.py's; the Call
Control requests rest.py's.

- Served when ``telnyx_public_key`` is set. Its answer webhook is ``POST /telnyx/voice`` (a TeXML instruction
  fetch, form-encoded), checked by its Ed25519 ``telnyx-signature-ed25519`` over ``timestamp|body``; the session
  token is tied to its ``CallSid`` (TeXML's CallSid is the call's call_control_id, which the stream's ``start``
  carries) and reaches the stream as a TeXML ``<Parameter>`` (``start.custom_parameters``).
- Telnyx signs nothing on the stream's WebSocket upgrade: the session token alone admits it.
- A stream in PCMU at 8 kHz takes the pacer's frames as they are (final templates); a PCMA stream too when the
  model takes A-law (``alaw_passthrough``: the call's rings then carry A-law, untouched both ways). Telnyx is the
  one carrier here that streams A-law (docs/explanation/protocols.md#b).
- Re-attach (voicecore/reattach.py): the TeXML's ``<Connect><Stream>`` is followed by ``<Redirect>`` to
  ``/telnyx/reattach?token=...`` (TeXML's ``<Connect>`` takes no ``action``; the verbs after it run when the
  stream stops), a form POST signed with Ed25519 like the answer webhook; the answer is a new ``<Connect><Stream>``
  for the same CallSid, or ``<Hangup/>``. A call driven by Call Control alone (no TeXML) has no such step: its
  ``streaming_start`` command names no continuation.
- Outbound calls (outbound.py): the TeXML Calls API's ``Url`` is ``/telnyx/voice`` with the call's direction,
  callee and fields in its query, which the TeXML answer passes to the stream as ``<Parameter>``s; the call's
  progress comes to ``POST /telnyx/call-status`` (Ed25519-signed) and is kept in the call store.
- Hang-up and transfer: Call Control ``hangup`` / ``transfer`` on the stream's call_control_id, Bearer
  ``telnyx_api_key``; the nonce is the ``command_id``, the same for every retry of one action.
"""

from __future__ import annotations

from urllib.parse import urlencode

from voicecore.carriers.base import CannotEnd, Carrier, PlacingSettings
from voicecore.carriers.edge import FrameSink
from voicecore.carriers.events import ENCODING_PCMA, ENCODING_PCMU
from voicecore.carriers.rest_common import check_target
from voicecore.carriers.telnyx import outbound, protocol, rest, sim
from voicecore.carriers.webhook import (ANSWER, EVENT, REATTACH, SESSION_TOKEN, AnswerRequest, Refusal, Route,
                                        WebhookError, call_id, call_status_event, parse_form, reattach_request)
from voicecore.outbound import call_fields
from voicecore.timing import SAMPLE_RATE_HZ

__all__ = ["REATTACH_PATH", "TELNYX", "TelnyxCarrier"]

VOICE_PATH = "/telnyx/voice"
REATTACH_PATH = "/telnyx/reattach"
# TeXML's CallStatus values for a call that is over (its TwiML-compatible set).
_CALL_OVER = frozenset({"completed", "busy", "failed", "no-answer", "canceled"})


class TelnyxCarrier(Carrier):
    name = "telnyx"
    title = "Telnyx"
    routes = {VOICE_PATH: Route("telnyx", ANSWER, ("POST",)),
              REATTACH_PATH: Route("telnyx", REATTACH, ("POST",)),
              outbound.STATUS_PATH: Route("telnyx", EVENT, ("POST",))}
    carrier_side = protocol.TelnyxCarrierSide
    simulator = sim.TelnyxSimulator()
    placing = PlacingSettings("telnyx_api_base", "telnyx_texml_application_id", "telnyx_api_key")
    reattaches = True  # its answer document names a re-attach step (``<Redirect>`` after ``<Connect>``)

    def served(self, settings):
        return bool(settings.telnyx_public_key)

    def check_webhook(self, route, method, target, headers, body, settings, url, now_s):
        if not protocol.verify_webhook(settings.telnyx_public_key, headers.get(protocol.SIGNATURE_HEADER) or "",
                                       headers.get(protocol.TIMESTAMP_HEADER) or "", body, now_s):
            return Refusal(403, "bad telnyx-signature-ed25519")
        form = parse_form(body)
        if route.kind == REATTACH:
            return reattach_request(self.name, target, form.get("CallSid"), form.get("CallStatus"), _CALL_OVER)
        if route.kind == EVENT and outbound.is_amd_result(form):
            try:
                sid, answered_by = outbound.parse_amd_result(form)
            except WebhookError as exc:
                return Refusal(400, "bad AMD callback", f"AMD callback rejected: {exc}", quiet=True, problem="status")
            return AnswerRequest(self.name, EVENT, sid, f"call {sid}: answered by {answered_by} (Telnyx AMD)",
                                 answered_by=answered_by)
        if route.kind == EVENT:
            return call_status_event(self.name, form, outbound.parse_call_status, lambda p: f"#{p.sequence}")
        checked = self.checked(route, call_id(form.get("CallSid") or form.get("CallControlId")))
        parameters = call_fields.from_query(target.split("?", 1)[1] if "?" in target else "")
        if route.kind != ANSWER or isinstance(checked, Refusal) or not parameters:
            return checked
        return AnswerRequest(self.name, ANSWER, checked.call_id, parameters=parameters)

    def answer_document(self, request, stream_url, token, settings, reattach_token=None):
        redirect = None if reattach_token is None else f"{settings.public_url}{REATTACH_PATH}?token={reattach_token}"
        return b"text/xml", protocol.texml_connect_stream(stream_url, {SESSION_TOKEN: token, **dict(request.parameters)},
                                                          codec=settings.telnyx_codec, redirect_url=redirect).encode()

    def hangup_document(self):
        """The answer to a re-attach request for a call that is over."""
        return b"text/xml", protocol.texml_hangup().encode()

    def new_stream(self):
        return protocol.TelnyxStreamProtocol()

    def stream_id(self, started, stream):
        return stream.stream_id or started.call_id  # the protocol keeps it: Telnyx's messages to us carry it

    def arena_encoding(self, started, alaw_passthrough):
        if alaw_passthrough and started.encoding == ENCODING_PCMA and started.sample_rate_hz == SAMPLE_RATE_HZ:
            return ENCODING_PCMA
        return ENCODING_PCMU

    def final_templates(self, started, stream, arena_law):
        if started.encoding == arena_law == ENCODING_PCMA:
            return protocol.wire_templates(ENCODING_PCMA, arena_encoding=ENCODING_PCMA)
        if started.encoding == ENCODING_PCMU and started.sample_rate_hz == SAMPLE_RATE_HZ:
            return protocol.wire_templates(ENCODING_PCMU)
        return None

    def outbound_sink(self, started, stream):
        return FrameSink(protocol.TelnyxOutboundEncoder())

    def end_call(self, ref, transfer, target, settings, *, now_s, nonce):
        if transfer:
            check_target(target)
        if not settings.telnyx_api_key:
            return CannotEnd("telnyx_api_key is not set")
        if transfer:
            return rest.transfer_request(ref.call_id, target, settings.telnyx_api_key, nonce, settings.telnyx_api_base)
        return rest.hangup_request(ref.call_id, settings.telnyx_api_key, nonce, settings.telnyx_api_base)

    def send_digits(self, ref, digits, settings, *, now_s, nonce):
        if not settings.telnyx_api_key:
            return CannotEnd("telnyx_api_key is not set")
        return rest.send_dtmf_request(ref.call_id, digits, settings.telnyx_api_key, nonce, settings.telnyx_api_base)

    def parse_response(self, status_code, body):
        return rest.parse_response(status_code, body)

    def place_call_request(self, node_url, api_base, account_id, secret, to, from_, fields, machine_detection, *,
                           now_s, nonce):
        url = node_url + VOICE_PATH + "?" + urlencode(call_fields.parameters_for(to, fields))
        return outbound.place_call_request(account_id, secret, to, from_, url=url,
                                           status_callback=node_url + outbound.STATUS_PATH, base_url=api_base,
                                           machine_detection=machine_detection)

    def parse_placed(self, status_code, body):
        return outbound.parse_place_call_response(status_code, body)


TELNYX = TelnyxCarrier()
