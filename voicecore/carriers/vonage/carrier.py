"""Vonage as the gateway and the model worker see it: the descriptor the registry serves (voicecore/carriers/base.py
says what a descriptor answers). The protocol, encoder, NCCO and signed webhooks it uses are protocol.py's; the
Voice API requests rest.py's.

- Served when ``vonage_signature_secret`` is set. Its answer webhook is ``GET|POST /vonage/answer`` (query, or
  JSON: prefer POST, whose ``payload_hash`` covers the body; a GET's covers the empty body [unverified]), checked
  by the signed-webhook JWT; the session token is tied to its ``uuid``, which the NCCO puts in the stream's
  ``call_id`` header beside the token (``websocket:connected`` echoes the NCCO's headers). ``POST /vonage/event``
  is checked the same way and answered 204; on it, a placed call's statuses go to the call store and its advanced
  machine detection results (``status`` human / machine, ``sub_state`` beep_start) to the call as the carrier's AMD.
- The stream's WebSocket upgrade carries the same JWT (``Authorization: Bearer``), which the NCCO asks for with
  ``"authorization": {"type": "vonage"}``: its age is checked, not its payload_hash (an upgrade has no body).
- Its audio is binary L16 (16 kHz by default, ``vonage_sample_rate_hz``): the edge resamples and frames it both
  ways, so the pacer writes raw entries.
- Re-attach (voicecore/reattach.py): the NCCO's ``connect`` is synchronous (``"eventType": "synchronous"``) with its
  ``eventUrl`` at ``/vonage/reattach?token=...`` (POST). Vonage posts the WebSocket leg's events there, signed like
  every webhook; the one that is the step is ``disconnected`` (the socket ended, the call did not: "WebSocket
  fallback options" of Vonage's WebSockets guide), which names the call by the endpoint's headers it echoes
  (``call_id``). Its answer is a new NCCO connecting a new stream for the same call, or one with no action (the
  call ends: Vonage's NCCO has no hang-up action). The leg's other events are answered 204 like /vonage/event's.
- Hang-up and transfer: ``PUT /v1/calls/{uuid}`` with an application JWT (``vonage_application_id``,
  ``vonage_private_key``; the nonce is its ``jti``).
"""

from __future__ import annotations

import orjson

from voicecore.carriers.base import CannotEnd, Carrier, PlacingSettings
from voicecore.carriers.edge import FrameSink
from voicecore.carriers.rest_common import check_target
from voicecore.carriers.vonage import outbound, protocol, rest, sim
from voicecore.carriers.webhook import (ANSWER, EVENT, REATTACH, AnswerRequest, Refusal, Route, WebhookError,
                                        call_id, parse_json_object, parse_query, reattach_request, upgrade_header)
from voicecore.outbound import call_fields

__all__ = ["REATTACH_PATH", "VONAGE", "VonageCarrier"]

REATTACH_PATH = "/vonage/reattach"


class VonageCarrier(Carrier):
    name = "vonage"
    title = "Vonage"
    routes = {outbound.ANSWER_PATH: Route("vonage", ANSWER, ("GET", "POST")),
              outbound.EVENT_PATH: Route("vonage", EVENT, ("POST",)),
              REATTACH_PATH: Route("vonage", REATTACH, ("POST",))}
    carrier_side = protocol.VonageCarrierSide
    simulator = sim.VonageSimulator()
    # the secret: the application's private key (PEM), which signs a JWT per request
    placing = PlacingSettings("vonage_api_base", "vonage_application_id", "vonage_private_key", secret_is_pem=True)
    reattaches = True  # its answer NCCO names a re-attach step (the synchronous connect's eventUrl)

    def served(self, settings):
        return bool(settings.vonage_signature_secret)

    def check_webhook(self, route, method, target, headers, body, settings, url, now_s):
        if not protocol.verify_signed_webhook(headers.get("authorization"), body, settings.vonage_signature_secret,
                                              now_s):
            return Refusal(403, "bad signed-webhook JWT")
        if route.kind == REATTACH:
            return self._leg_event(target, body)
        if route.kind == EVENT:
            # A placed call's status (started, ringing, answered, completed, busy, ...) is kept, its machine
            # detection result (human, machine, machine + beep_start) goes to the call as the carrier's AMD; other
            # events logged
            try:
                event = parse_json_object(body)
                if outbound.is_amd_event(event):
                    uuid, answered_by = outbound.parse_amd_event(event)
                    return AnswerRequest(self.name, EVENT, uuid if answered_by else "",
                                         f"call {uuid}: answered by {answered_by or 'nothing new'} (Vonage machine "
                                         f"detection, {event.get('status')} {event.get('sub_state') or ''})".rstrip(),
                                         answered_by=answered_by)
                progress = outbound.parse_event(event)
            except WebhookError as exc:
                return Refusal(400, "bad event", f"event webhook rejected: {exc}", quiet=True, problem="status")
            if progress is None:
                return AnswerRequest(self.name, EVENT, "")
            return AnswerRequest(self.name, EVENT, progress.call_sid,
                                 f"call {progress.call_sid}: {progress.direction or 'call'} status {progress.status}",
                                 call_status=progress)
        fields = parse_query(target) if method == "GET" else parse_json_object(body)
        checked = self.checked(route, call_id(fields.get("uuid")))
        # a call we placed: its direction, callee and fields ride in the answer_url's query (with our own
        # parameter names, apart from Vonage's GET fields)
        parameters = call_fields.from_query(target.split("?", 1)[1] if "?" in target else "")
        if isinstance(checked, Refusal) or not parameters:
            return checked
        return AnswerRequest(self.name, ANSWER, checked.call_id, parameters=parameters)

    def _leg_event(self, target, body):
        """An event of the WebSocket leg at the connect's eventUrl (its signature passed): ``disconnected`` is the
        re-attach request, for the call its echoed headers name; any other status is a plain event (204)."""
        try:
            event = protocol.parse_leg_event(body)
        except ValueError as exc:
            return Refusal(400, "bad event", f"re-attach event rejected: {exc}", quiet=True, problem="reattach")
        if event.status != protocol.LEG_DISCONNECTED:
            return AnswerRequest(self.name, EVENT, "")
        # The call is live (its leg to the socket ended, not the call: a caller's hang-up completes that leg).
        return reattach_request(self.name, target, event.call_id, None, frozenset())

    def answer_document(self, request, stream_url, token, settings, reattach_token=None):
        headers = {**dict(request.parameters), protocol.HEADER_CALL_ID: request.call_id,
                   protocol.HEADER_SESSION_TOKEN: token}
        event_url = None if reattach_token is None else f"{settings.public_url}{REATTACH_PATH}?token={reattach_token}"
        ncco = protocol.ncco_connect_websocket(stream_url, headers, settings.vonage_sample_rate_hz,
                                               signed_upgrade=True, event_url=event_url)
        return b"application/json", orjson.dumps(ncco)

    def hangup_document(self):
        """The answer to a re-attach request for a call that is over: an NCCO with no action."""
        return b"application/json", orjson.dumps(protocol.ncco_end_call())

    def check_upgrade(self, target, headers, settings, stream_bases, now_s):
        authorization = upgrade_header(headers, "Authorization")
        if isinstance(authorization, Refusal):
            return authorization
        if authorization is None:
            return Refusal(403, "no signed JWT on the upgrade")
        if not protocol.verify_upgrade_jwt(authorization, settings.vonage_signature_secret, now_s):
            return Refusal(403, "bad signed JWT on the upgrade")
        return None

    def new_stream(self):
        return protocol.VonageStreamProtocol()

    def outbound_sink(self, started, stream):
        return FrameSink(protocol.VonageOutboundEncoder(started.sample_rate_hz))

    def end_call(self, ref, transfer, target, settings, *, now_s, nonce):
        if transfer:
            check_target(target)
        if not (settings.vonage_application_id and settings.vonage_private_key):
            return CannotEnd("vonage_application_id or vonage_private_key is not set")
        token = rest.application_jwt(settings.vonage_application_id, settings.vonage_private_key, now_s, nonce)
        if transfer:
            return rest.transfer_request(ref.call_id, target, token, settings.vonage_api_base)
        return rest.hangup_request(ref.call_id, token, settings.vonage_api_base)

    def send_digits(self, ref, digits, settings, *, now_s, nonce):
        if not (settings.vonage_application_id and settings.vonage_private_key):
            return CannotEnd("vonage_application_id or vonage_private_key is not set")
        token = rest.application_jwt(settings.vonage_application_id, settings.vonage_private_key, now_s, nonce)
        return rest.send_dtmf_request(ref.call_id, digits, token, settings.vonage_api_base)

    def parse_response(self, status_code, body):
        return rest.parse_response(status_code, body)

    def place_call_request(self, node_url, api_base, account_id, secret, to, from_, fields, machine_detection, *,
                           now_s, nonce):
        # Vonage's asynchronous advanced machine detection reports the beep too: either value asks for it
        token = rest.application_jwt(account_id, secret, now_s, nonce)
        return outbound.place_call_request(
            token, to, from_, answer_url=outbound.answer_url(node_url + outbound.ANSWER_PATH, to, fields),
            event_url=node_url + outbound.EVENT_PATH, base_url=api_base, machine_detection=bool(machine_detection))

    def parse_placed(self, status_code, body):
        return outbound.parse_place_call_response(status_code, body)


VONAGE = VonageCarrier()
