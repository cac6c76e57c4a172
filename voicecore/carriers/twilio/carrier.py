"""Twilio as the model worker sees it: the descriptor the registry serves (voicecore/carriers/base.py says what a
descriptor answers). The stream protocol and its exact messages are stream.py's, the TwiML and the signature check
webhook.py's, the Calls resource requests rest.py's.

- Always served (an empty auth token is a random per-run one, the demo's). Its voice webhook is
  ``POST /twilio/voice`` and the stream status callback ``POST /twilio/status`` (forms), both checked by
  ``X-Twilio-Signature`` over our base URL and the path; the session token is tied to the call's ``CallSid`` and
  reaches the stream as a TwiML ``<Parameter>`` (``start.customParameters``). A draining node answers the voice
  webhook with ``<Reject>`` (the call is never picked up, so not billed) or, with ``drain_redirect_url``,
  ``<Redirect>`` to another node: a 200, as Twilio reads TwiML only from a success. Its refusals keep the lines
  and bodies they always had.
- Its stream is served by the gateway's one stream connection like every carrier's, through this descriptor:
  ``TwilioCarrierStream`` (stream.py) gives the carrier-neutral events; caller audio comes as the arena's frames
  (``whole_frames``: 160 bytes of mu-law, Twilio's own numbering, read by ``receive_media``'s fast path); the pacer
  writes the call's messages whole from the stream SID's templates (``final_templates``). Its stream takes only a
  session token tied to its CallSid (``any_call_tokens`` False: its voice webhook always names the call), and the
  bus names its calls by the arena's ids alone (``bus_name`` "": voicecore/bus/messages.py CallStarted).
- Outbound calls (outbound.py): the node's voice webhook is the placed call's answer URL, its query (signed by
  Twilio with the URL) carrying the call's direction, callee and fields, which the answer document passes to the
  stream as ``<Parameter>``s; the call's progress comes to ``POST /twilio/call-status`` (signed, logged).
- Hang-up and transfer: the Calls resource, ``Status=completed`` or ``Twiml=<Dial>target</Dial>``, basic auth with
  the AccountSid the stream named and ``twilio_auth_token``.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from voicecore.carriers.base import Carrier, PlacingSettings
from voicecore.carriers.twilio import outbound, rest, sim, stream, webhook
from voicecore.carriers.webhook import (ANSWER, EVENT, REATTACH, AnswerRequest, DrainAnswer, Refusal, Route,
                                        WebhookError, call_status_event)

__all__ = ["CALL_STATUS_PATH", "REATTACH_PATH", "TWILIO", "TwilioCarrier", "VOICE_PATH"]

VOICE_PATH = "/twilio/voice"
CALL_STATUS_PATH = "/twilio/call-status"  # a placed call's progress and its AMD result
REATTACH_PATH = "/twilio/reattach"
# The call statuses after which nothing can be re-attached (Twilio's CallStatus values for a call that is over).
_CALL_OVER = frozenset({"completed", "busy", "failed", "no-answer", "canceled"})


class TwilioCarrier(Carrier):
    name = "twilio"
    title = "Twilio"
    routes = {VOICE_PATH: Route("twilio", ANSWER, ("POST",)),
              "/twilio/status": Route("twilio", EVENT, ("POST",)),
              CALL_STATUS_PATH: Route("twilio", EVENT, ("POST",)),
              REATTACH_PATH: Route("twilio", REATTACH, ("POST",))}
    reattaches = True  # its answer document names a re-attach step (``<Connect action>``)
    whole_frames = True  # media payloads are exactly the arena's frames (stream.py checks each)
    any_call_tokens = False
    bus_name = ""  # the bus's default carrier (CallStarted.carrier "")
    placing = PlacingSettings("twilio_api_base", "twilio_account_sid", "twilio_auth_token")
    simulator = sim.TwilioSimulator()

    def served(self, settings):
        return True

    def check_webhook(self, route, method, target, headers, body, settings, url, now_s):
        path = target.split("?", 1)[0]
        try:
            form = webhook.parse_form(body)
        except WebhookError as exc:
            return Refusal(400, "bad form", f"webhook {path}: unparseable form: {exc}", quiet=True, problem="form")
        # Signed over the URL Twilio was given: our base URL, the path, and the query the URL carries (an
        # outbound call's answer URL, the re-attach URL's token): Twilio signs the whole URL.
        if not webhook.check_signature(settings.twilio_auth_token, url, form,
                                       headers.get("x-twilio-signature", "")):
            return Refusal(403, "bad signature", f"webhook {path}: bad X-Twilio-Signature (call "
                                                 f"{form.get('CallSid', '?')})", problem="signature")
        if route.kind == EVENT and path == CALL_STATUS_PATH and outbound.is_amd_result(form):
            try:
                amd = outbound.parse_amd_result(form)
            except WebhookError as exc:
                return Refusal(400, "bad AMD callback", f"AMD callback rejected: {exc}", quiet=True, problem="status")
            return AnswerRequest(self.name, EVENT, amd.call_sid, f"call {amd.call_sid}: answered by {amd.answered_by} "
                                 f"(Twilio AMD, {amd.duration_ms} ms)", answered_by=amd.answered_by)
        if route.kind == EVENT and path == CALL_STATUS_PATH:
            return call_status_event(self.name, form, outbound.parse_call_status, lambda p: f"#{p.sequence}" + (
                f", answered_by={p.answered_by}" if p.answered_by else ""))
        if route.kind == EVENT:
            try:
                status = webhook.parse_status_callback(form)
            except WebhookError as exc:
                return Refusal(400, "bad status callback", f"status callback rejected: {exc}", quiet=True,
                               problem="status")
            return AnswerRequest(self.name, EVENT, status.call_sid,
                                 f"stream status {status.stream_event} for call {status.call_sid}")
        if route.kind == REATTACH:
            tokens = parse_qs(urlsplit(target).query).get("token", [])
            sid = form.get("CallSid", "")
            if len(tokens) != 1 or not tokens[0] or not isinstance(sid, str) or not sid:
                return Refusal(400, "bad reattach request", f"re-attach request {path}: no token or no CallSid",
                               quiet=True, problem="reattach")
            return AnswerRequest(self.name, REATTACH, sid, token=tokens[0],
                                 call_completed=form.get("CallStatus", "") in _CALL_OVER)
        try:
            voice = webhook.parse_voice_webhook(form)
        except WebhookError as exc:
            return Refusal(400, "bad voice webhook", f"voice webhook rejected: {exc}", quiet=True, problem="voice")
        query = target.split("?", 1)[1] if "?" in target else ""
        # synchronous AMD (MachineDetection without AsyncAmd): Twilio fetches the answer URL once it has decided,
        # with the result in the form
        answered_by = form.get("AnsweredBy", "")
        return AnswerRequest(self.name, ANSWER, voice.call_sid, parameters=outbound.stream_parameters(query),
                             answered_by=answered_by if answered_by in outbound.ANSWERED_BY else "")

    def answer_document(self, request, stream_url, token, settings, reattach_token=None):
        action = None if reattach_token is None else f"{settings.public_url}{REATTACH_PATH}?token={reattach_token}"
        twiml = webhook.twiml_connect_stream(stream_url, token, settings.public_url + "/twilio/status",
                                             parameters=request.parameters, action_url=action)
        return b"text/xml", twiml.encode()

    def hangup_document(self):
        """The answer to a re-attach request for a call that is over."""
        return b"text/xml", webhook.twiml_hangup().encode()

    def draining_answer(self, request, settings):
        url = settings.drain_redirect_url
        twiml = webhook.twiml_redirect(url) if url else webhook.twiml_reject("busy")
        refusal = f"redirected to {url}" if url else "rejected busy"
        return DrainAnswer(200, b"text/xml", twiml.encode(),
                           f"call {request.call_id}: refused, the node is draining ({refusal})")

    def new_stream(self):
        return stream.TwilioCarrierStream()

    def final_templates(self, started, stream_protocol, arena_law):
        return stream.wire_templates(started.stream_id)

    def end_call(self, ref, transfer, target, settings, *, now_s, nonce):
        if transfer:
            return rest.transfer_request(ref.account_id, ref.call_id, target, settings.twilio_auth_token,
                                         base_url=settings.twilio_api_base)
        return rest.hangup_request(ref.account_id, ref.call_id, settings.twilio_auth_token,
                                   base_url=settings.twilio_api_base)

    def parse_response(self, status_code, body):
        return rest.parse_response(status_code, body)

    def place_call_request(self, node_url, api_base, account_id, secret, to, from_, fields, machine_detection, *,
                           now_s, nonce):
        return outbound.place_call_request(
            account_id, secret, to, from_, url=outbound.answer_url(node_url + VOICE_PATH, to, fields),
            status_callback=node_url + CALL_STATUS_PATH, machine_detection=machine_detection,
            async_amd=bool(machine_detection), base_url=api_base)

    def parse_placed(self, status_code, body):
        return outbound.parse_place_call_response(status_code, body)


TWILIO = TwilioCarrier()
