"""Plivo as the carrier simulator plays it (voicecore/carriers/simulator.py says what this answers): its signed
answer_url POST, its XML followed to the stream, its signed stream upgrade, and the Call API's callbacks.

- Every request Plivo sends is signed with X-Plivo-Signature-V3 over the URL (its query included), the form and a
  nonce (protocol.compute_signature_v3), the stream's upgrade too (protocol.sign_upgrade).
- A call its Make Call placed is named by the request (RequestUUID) until answered, then gets its own CallUUID;
  it tells its ring (ring_url), its hang-up (hangup_url) and its machine detection (machine_detection_url), and a
  transfer through the Call API fetches the ``aleg_url`` it names.
"""

from __future__ import annotations

from urllib.parse import urlencode

from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMU
from voicecore.carriers.plivo import protocol
from voicecore.carriers.simulator import (AmdCallback, CarrierSimulator, StreamTarget, WebhookRequest,
                                          continuation_from_xml, parse_xml, redirect_after)
from voicecore.timing import SAMPLE_RATE_HZ

__all__ = ["PlivoSimulator", "transfer_form"]

# Plivo's HangupCause for a placed call's end, by the simulator's status
_HANGUP_CAUSES = {"completed": "NORMAL_CLEARING", "busy": "USER_BUSY", "no-answer": "NO_ANSWER"}


class PlivoSimulator(CarrierSimulator):
    answer_path = "/plivo/voice"
    user_agent = "PlivoHTTP/1.1"
    serving_settings = ("plivo_auth_token",)
    answered_call_has_own_id = True

    def answer_webhook(self, url, ids, credentials, *, now_s, nonce, answer_method="POST", request_uuid=""):
        form = {"CallUUID": ids.call_id, "ALegUUID": ids.call_id, "ALegRequestUUID": ids.session_id,
                "From": ids.from_number, "To": ids.to_number, "CallerName": ids.from_number,
                "CallStatus": "ringing", "Direction": "inbound", "Event": "StartApp"}
        if request_uuid:  # an outbound call: answered by the callee, named by the request that placed it
            # (Plivo's answer request names it ALegRequestUUID: the request id its Call API returned)
            form.update(RequestUUID=request_uuid, ALegRequestUUID=request_uuid, CallStatus="in-progress",
                        Direction="outbound")
        return _signed_form(url, form, credentials, nonce)

    def parse_answer(self, body):
        root = parse_xml(body, "Plivo XML")
        stream = root.find("./Stream")
        if root.tag != "Response" or stream is None or not (stream.text or "").strip():
            raise ValueError("Plivo XML has no <Response><Stream>wss://...</Stream>")
        problems = []
        if stream.get("bidirectional", "false").lower() != "true":
            problems.append("Plivo stream without bidirectional=\"true\": the caller would hear nothing from us")
        if stream.get("keepCallAlive", "false").lower() != "true":
            problems.append("Plivo stream without keepCallAlive=\"true\": Plivo would end the call at once")
        # Plivo's default content type is L16 at 8 kHz [ref]; "audio/x-mulaw;rate=8000" asks for G.711.
        content_type, _, rate_text = (stream.get("contentType") or "audio/x-l16;rate=8000").partition(";")
        rate = int(rate_text.strip().removeprefix("rate=") or SAMPLE_RATE_HZ)
        encoding = {protocol.CONTENT_TYPE_MULAW: ENCODING_PCMU,
                    protocol.CONTENT_TYPE_L16: ENCODING_L16}.get(content_type.strip())
        if encoding is None or (encoding == ENCODING_PCMU and rate != SAMPLE_RATE_HZ) or rate not in (8000, 16000):
            raise ValueError("Plivo XML asks for a content type Plivo does not stream")
        raw = stream.get("extraHeaders", "")
        pairs = []
        for item in raw.replace(";", ",").split(","):
            key, separator, value = item.partition("=")
            if separator and key.strip():
                pairs.append((key.strip(), value.strip()))
        # With keepCallAlive the elements after <Stream> run once the stream disconnects [ref]; without it they
        # run at once (and the simulator reports that above), so only a kept-alive stream has a continuation.
        kept_alive = stream.get("keepCallAlive", "false").lower() == "true"
        return StreamTarget(url=(stream.text or "").strip(), parameters=tuple(pairs), encoding=encoding,
                            sample_rate_hz=rate, raw_extra_headers=raw, problems=tuple(problems),
                            redirect=redirect_after(root, stream) if kept_alive else "")

    def stream_headers(self, target, credentials, *, nonce, now_s):
        # Plivo signs every stream upgrade: a GET of the stream URL with ws(s):// read as http:// (sign_upgrade).
        return {protocol.SIGNATURE_V3_HEADER: protocol.sign_upgrade(credentials.plivo_auth_token, target.url, nonce),
                protocol.SIGNATURE_V3_NONCE_HEADER: nonce}

    def continuation_request(self, url, ids, credentials, *, now_s, nonce, target=None, leg_id=""):
        # Plivo's <Redirect> request: From, To, Event=Redirect, CallUUID, CallerName, Direction, CallStatus [redirect]
        form = {"From": ids.from_number, "To": ids.to_number, "Event": "Redirect", "CallUUID": ids.call_id,
                "CallerName": ids.from_number, "Direction": "inbound", "CallStatus": "in-progress"}
        return _signed_form(url, form, credentials, nonce)

    def parse_continuation(self, body):
        return continuation_from_xml(body, "./Stream", self.parse_answer)

    def callback_request(self, placed, url, fields, credentials, *, now_s, nonce):
        return _signed_form(url, fields, credentials, nonce)

    def progress_callback(self, placed, status, *, sequence, duration_s, call_uuid):
        # Plivo tells a ring (ring_url) and the hang-up (hangup_url); its answer is the answer_url's POST
        if status in ("initiated", "in-progress"):
            return None
        url = placed.ring_url if status == "ringing" else placed.status_callback
        if not url:
            return None
        form = {"RequestUUID": placed.call_sid, "From": placed.from_.lstrip("+"), "To": placed.to.lstrip("+"),
                "Direction": "outbound", "CallStatus": status, "Event": "Ring" if status == "ringing" else "Hangup"}
        if call_uuid:
            form["CallUUID"] = call_uuid
        if status != "ringing":
            form["HangupCause"] = _HANGUP_CAUSES.get(status, "CALL_REJECTED")
            form["Duration"] = form["BillDuration"] = str(duration_s or 0)
        return url, form

    def amd_mode(self, placed):
        # Plivo's machine detection answers human or machine, as Enable does
        return "Enable" if placed.async_amd and placed.amd_callback else ""

    def amd_callbacks(self, placed, answered_by, at_ms, beep_at_ms, call_uuid):
        if answered_by == "unknown":  # its AMD heard nothing: no callback
            return ()
        return (AmdCallback(at_ms, {
            "From": placed.from_.lstrip("+"), "To": placed.to.lstrip("+"),
            "Machine": "false" if answered_by == "human" else "true", "RequestUUID": placed.call_sid,
            "ALegRequestUUID": placed.call_sid, "CallUUID": call_uuid, "ALegUUID": call_uuid,
            "IfMachine": "hangup" if placed.machine_detection == "hangup" else "continue",
            "Direction": "outbound", "Event": "MachineDetection", "CallStatus": "in-progress"}),)

    def transfer_fetch(self, url, call_id, credentials, *, nonce):
        return _signed_form(url, transfer_form(call_id), credentials, nonce)


def transfer_form(call_uuid: str) -> dict[str, str]:
    """The form Plivo posts to a transfer's ``aleg_url`` (its call's ids, as its answer webhook's)."""
    return {"CallUUID": call_uuid, "ALegUUID": call_uuid, "CallStatus": "in-progress", "Direction": "inbound",
            "Event": "Transfer"}


def _signed_form(url, form, credentials, nonce) -> WebhookRequest:
    """A form POST signed as Plivo signs its requests: X-Plivo-Signature-V3 over the URL, the form and ``nonce``."""
    body = urlencode(form).encode("ascii")
    signature = protocol.compute_signature_v3(credentials.plivo_auth_token, url, nonce, form, "POST")
    headers = (("Content-Type", "application/x-www-form-urlencoded"), (protocol.SIGNATURE_V3_HEADER, signature),
               (protocol.SIGNATURE_V3_NONCE_HEADER, nonce))
    return WebhookRequest("POST", url, headers, body)
