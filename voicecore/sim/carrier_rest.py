"""asyncio shell of the carrier simulator's REST APIs (Telnyx Call Control, Plivo Call API, Vonage Voice API):
the stack's hang-up and transfer requests for a simulated call end that call, as the carrier would; and Twilio's
Calls API places an outbound call: it rings, and a simulated callee answers it (voicecore/sim/callee_core.py:
a person, a voicemail, a screening assistant, an IVR) or never does (busy, no-answer, failed), with the
call's status callbacks signed as Twilio signs them. An answered call fetches its answer URL and opens its
media stream to the gateway as an inbound one does (voicecore/sim/carrier.py place_call), the callee's
greeting, spoken by espeak-ng, as its audio.

Owns: the HTTP/1.1 server (h11, one request per connection, 127.0.0.1), the registry of live simulated calls
(place_call registers each call it places with ``rest=``), what a granted request does to the call (its
stream is stopped and closed by the carrier side: ``CallResult.closed_by`` is ``rest_hangup`` or
``rest_transfer``), and for a Plivo transfer the fetch of its ``aleg_url``, signed with X-Plivo-Signature-V3
as Plivo signs it, whose ``<Dial>`` is recorded. Every request and its outcome stays in ``requests``.

Must not know: what is checked and answered (voicecore/sim/carrier_rest_core.py), or how a call is played.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import h11

from voicecore import http_client
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.twilio.signature import compute_signature
from voicecore.sim import callee_core
from voicecore.sim.callee_core import callee_seed
from voicecore.sim.ivr_callee import CONNECT_GAP_MS, CONNECTING_TEXT, PERSON_TEXT, REPROMPT_TEXT, IvrCallee
from voicecore.sim.screened_callee import PUT_THROUGH_TEXT, ScreenedCallee
from voicecore.sim import carrier_rest_core as core
from voicecore.sim.carrier_modes_core import CarrierCredentials

MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class RestRequestSeen:
    """One request the simulated carrier got: as sent (method, path, Authorization, body) and its outcome.
    ``dialed``: for a Plivo transfer, what the XML at its ``aleg_url`` dialed ("" if it dialed nothing)."""

    method: str
    path: str
    authorization: str
    body: bytes
    outcome: core.RestOutcome
    dialed: str = ""


@dataclass(slots=True)
class OutboundCallSeen:
    """One call the Calls API placed: who it reached (the truth a detector is scored against), the status
    callbacks sent (status, HTTP status or an error) and, once answered, the call's result."""

    placed: core.PlacedCallRequest
    plan: callee_core.CalleePlan
    statuses: list[tuple[str, int | str]]
    result: object = None  # voicecore.sim.carrier.CallResult once an answered call ended
    beep_at_ms: int | None = None
    last_word_ms: int | None = None  # from the answer (the stream's first caller frame) to the greeting's last word
    done: bool = False
    call_uuid: str = ""  # Plivo: the answered call's CallUUID (its RequestUUID is placed.call_sid)
    # the carrier's async AMD (Twilio's, TeXML's, Plivo's, Vonage's; in the detector's vocabulary): what it said,
    # when, and whether rightly; Vonage's beep_start after a machine in carrier_amd_beep
    carrier_amd: callee_core.CarrierAmd | None = None
    carrier_amd_beep: callee_core.CarrierAmd | None = None
    amd_status: int | str | None = None  # the AMD callback's HTTP status (or an error)
    screened: ScreenedCallee | None = None  # a screening assistant's reaction (Twilio): whom it put through, when
    ivr: IvrCallee | None = None  # an IVR's reaction to keys (every carrier): whether and when it reached a person


async def _cancel(task: asyncio.Task | None) -> None:
    """A call hung up before the carrier's AMD decided: no callback (or no more of them)."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class CarrierRestServer:
    """``async with CarrierRestServer(credentials) as rest:`` then ``rest.base_url`` is the API base URL to give
    the stack (``credentials.rest_settings(rest.base_url)``) and ``rest.requests`` fills as the stack calls."""

    def __init__(self, credentials: CarrierCredentials, accept_unknown_calls: bool = False) -> None:
        # accept_unknown_calls: grant requests for calls not registered here (a bench whose calls live in other
        # processes: the carrier says yes, the call runs on to its script's end as the load expects)
        self.accept_unknown_calls = accept_unknown_calls
        self.credentials = credentials
        self.requests: list[RestRequestSeen] = []
        self._calls: dict[tuple[str, str], Callable[[str], None]] = {}
        # when each call's first stream opened (loop time): its callee's audio starts there, and a carrier's AMD,
        # which listens to that audio, is timed from it
        self._opened: dict[tuple[str, str], asyncio.Future] = {}
        # Digits pressed on a live call through the carrier's REST API (send_dtmf and the like), by call, as sent
        # (Vonage's p pauses as they came); a listener (the simulated IVR) hears them as they arrive.
        self.digits: dict[tuple[str, str], list[str]] = {}
        self._digit_listeners: dict[tuple[str, str], Callable[[str], None]] = {}
        self._server: asyncio.base_events.Server | None = None
        self.base_url = ""
        # Outbound calls: who answers each number (callee_core.KINDS; a number not named is a person), the
        # calls placed, and how long a ring lasts.
        self.callees: dict[str, str] = {}
        self.ring_ms = callee_core.DEFAULT_RING_MS
        self.outbound: list[OutboundCallSeen] = []
        self._outbound_tasks: set[asyncio.Task] = set()
        self.speech: dict[tuple[str, str], bytes] = {}  # greetings' sentences spoken, by (language, text): made once

    async def __aenter__(self) -> CarrierRestServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info) -> None:
        for task in list(self._outbound_tasks):
            task.cancel()
        if self._outbound_tasks:
            await asyncio.gather(*self._outbound_tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # --- the calls ---------------------------------------------------------------------------------------
    def register(self, carrier: str, call_id: str, end: Callable[[str], None]) -> None:
        """A live call: ``end(action)`` ends it (hangup or transfer) when a granted request names it. Its first
        registration is when its stream opened (stream_opened)."""
        self._calls[(carrier, call_id)] = end
        opened = self._opened.setdefault((carrier, call_id), asyncio.get_running_loop().create_future())
        if not opened.done():
            opened.set_result(asyncio.get_running_loop().time())

    def unregister(self, carrier: str, call_id: str) -> None:
        self._calls.pop((carrier, call_id), None)
        self._opened.pop((carrier, call_id), None)
        self._digit_listeners.pop((carrier, call_id), None)

    async def stream_opened(self, carrier: str, call_id: str) -> float:
        """The loop time the call's stream opened (its callee's first audio is due within a tick of it), once it
        has: waits until then."""
        opened = self._opened.setdefault((carrier, call_id), asyncio.get_running_loop().create_future())
        return await asyncio.shield(opened)

    def listen_digits(self, carrier: str, call_id: str, listener: Callable[[str], None]) -> None:
        """``listener(digits)`` is called with the digits of each granted send-DTMF request for the call."""
        self._digit_listeners[(carrier, call_id)] = listener

    def _is_live(self, carrier: str, call_id: str) -> bool:
        return self.accept_unknown_calls or (carrier, call_id) in self._calls

    # --- HTTP -------------------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            request, body = await asyncio.wait_for(self._read(reader, connection), READ_TIMEOUT_S)
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.headers}
            method = request.method.decode("ascii")
            path = urllib.parse.urlsplit(request.target.decode("latin-1")).path
            outcome = core.handle(method, path, headers, body, self.credentials, self._is_live, now_s=time.time(),
                                  api_id=secrets.token_hex(8), new_call_sid="CA" + secrets.token_hex(16))
            response_headers = [("Content-Type", outcome.content_type), ("Content-Length", str(len(outcome.body))),
                                ("Connection", "close")]
            writer.write(connection.send(h11.Response(status_code=outcome.status, headers=response_headers)))
            if outcome.body:
                writer.write(connection.send(h11.Data(data=outcome.body)))
            writer.write(connection.send(h11.EndOfMessage()))
            await writer.drain()
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError):
            writer.close()
            return
        finally:
            if not writer.is_closing():
                writer.close()
        dialed = ""
        if outcome.action == core.TRANSFER and outcome.carrier == "plivo":
            dialed = await self._fetch_aleg_url(outcome.target, outcome.call_id)
        self.requests.append(RestRequestSeen(method, path, headers.get("authorization", ""), body, outcome, dialed))
        if outcome.placed is not None:
            self._start_outbound(outcome.placed)
            return
        if outcome.action == core.DTMF:
            self.digits.setdefault((outcome.carrier, outcome.call_id), []).append(outcome.target)
            listener = self._digit_listeners.get((outcome.carrier, outcome.call_id))
            if listener is not None:
                listener(outcome.target)
            return
        end = self._calls.pop((outcome.carrier, outcome.call_id), None) if outcome.action else None
        if end is not None:
            end(outcome.action)

    # --- outbound calls ---------------------------------------------------------------------------------
    async def wait_outbound(self, timeout_s: float) -> None:
        """Until every placed call has ended (its last status callback sent)."""
        if self._outbound_tasks:
            await asyncio.wait_for(asyncio.gather(*list(self._outbound_tasks), return_exceptions=True), timeout_s)

    def _start_outbound(self, placed: core.PlacedCallRequest) -> None:
        kind = self.callees.get(placed.to, "human")
        # seeded by the number: the same callee answers the same way whatever order the calls were placed in
        seen = OutboundCallSeen(placed, callee_core.plan_callee(kind, callee_seed(placed.to)), [])
        self.outbound.append(seen)
        task = asyncio.get_running_loop().create_task(self._run_outbound(seen))
        self._outbound_tasks.add(task)
        task.add_done_callback(self._outbound_tasks.discard)

    async def _run_outbound(self, seen: OutboundCallSeen) -> None:
        from voicecore.sim.carrier import CallScript, place_call, place_mode_call  # the call's stream side (imports this module's users)

        placed, plan = seen.placed, seen.plan
        loop = asyncio.get_running_loop()
        started = loop.time()
        sequence = 0
        try:
            audio = None
            if plan.answered:
                spoken = []
                for sentence in callee_core.sentences(plan.text):
                    speech = self.speech.get((plan.language, sentence))
                    if speech is None:
                        from voicecore.sim.caller_voice import speak
                        speech = await asyncio.to_thread(speak, sentence, plan.language)
                        self.speech[(plan.language, sentence)] = speech
                    spoken.append(speech)
                reply = b""
                if plan.reply:
                    reply = self.speech.get((plan.language, plan.reply), b"")
                    if not reply:
                        from voicecore.sim.caller_voice import speak
                        reply = self.speech[(plan.language, plan.reply)] = await asyncio.to_thread(
                            speak, plan.reply, plan.language)
                audio = callee_core.callee_audio(plan, spoken, reply)
                seen.beep_at_ms = audio.beep_at_ms
                seen.last_word_ms = audio.last_word_ms
            plivo_call = placed.carrier == "plivo"
            vonage_call = placed.carrier == "vonage"
            for step in callee_core.status_steps(plan, self.ring_ms):
                await asyncio.sleep(max(0.0, started + step.at_ms / 1000 - loop.time()))
                if vonage_call:  # every step is an event, the answer included
                    await self._vonage_event(seen, step.status)
                elif plivo_call:
                    # Plivo tells a ring (ring_url) and the hang-up (hangup_url); its answer is the answer_url's POST
                    if step.status not in ("initiated", "in-progress"):
                        await self._plivo_status(seen, step.status)
                elif step.status != "in-progress":
                    await self._status(seen, step.status, sequence)
                    sequence += 1
            if audio is None:
                return
            answered_at = loop.time()
            if "answered" in placed.status_events and not vonage_call:
                await self._status(seen, "in-progress", sequence)
                sequence += 1
            script = CallScript(duration_ms=len(audio.audio) // 8, utterances=((0, audio.audio),), bargein_at_ms=(),
                                from_number=placed.from_, to_number=placed.to)
            if plan.kind == "ivr":
                # the menu reacts to keys, in-band (the agent's audio is kept to be heard) or by the REST API
                connected, expected, hello_at_ms = await self._ivr_connected()
                reprompt = self.speech.get(REPROMPT_TEXT)
                if reprompt is None:
                    from voicecore.sim.caller_voice import speak
                    reprompt = self.speech[REPROMPT_TEXT] = await asyncio.to_thread(speak, REPROMPT_TEXT[1],
                                                                                    REPROMPT_TEXT[0])
                seen.ivr = IvrCallee(connected, expected, hello_at_ms, reprompt, audio.last_word_ms)
                script = dataclasses.replace(script, caller=seen.ivr)
                if plivo_call:
                    seen.call_uuid = str(uuid.uuid4())
                call_id = seen.call_uuid if plivo_call else placed.call_sid
                self.listen_digits(placed.carrier, call_id, seen.ivr.on_rest_digits)
            keep_audio = seen.ivr is not None
            amd = None
            if placed.carrier in ("plivo", "vonage") and placed.async_amd and placed.amd_callback:
                # the carrier's asynchronous AMD beside the stream from the answer on, as the simulated Twilio's
                # (Enable's answers: human or machine_start; Vonage's default mode reports the beep after)
                seen.carrier_amd = callee_core.carrier_amd(plan, audio, "Enable", callee_seed(placed.to))
                if plivo_call:
                    seen.call_uuid = seen.call_uuid or str(uuid.uuid4())
                amd = loop.create_task(self._plivo_amd(seen) if plivo_call else self._vonage_amd(seen))
            if vonage_call:
                seen.result = await place_mode_call("", self.credentials, script, carrier="vonage",
                                                    call_sid=placed.call_sid, account_sid=placed.account_sid,
                                                    keep_audio=keep_audio, rest=self, answer_url=placed.url)
                await _cancel(amd)
                await self._vonage_event(seen, "completed", duration_s=round(loop.time() - answered_at))
                return
            if placed.carrier == "telnyx":
                amd = None
                if placed.machine_detection and placed.async_amd and placed.amd_callback:  # TeXML's AMD, as Twilio's
                    seen.carrier_amd = callee_core.carrier_amd(plan, audio, placed.machine_detection,
                                                               callee_seed(placed.to))
                    amd = loop.create_task(self._amd_callback(seen))
                seen.result = await place_mode_call("", self.credentials, script, carrier="telnyx",
                                                    call_sid=placed.call_sid, account_sid=placed.account_sid,
                                                    keep_audio=keep_audio, rest=self, answer_url=placed.url)
                if amd is not None:
                    amd.cancel()
                    await asyncio.gather(amd, return_exceptions=True)
                await self._status(seen, "completed", sequence, duration_s=round(loop.time() - answered_at))
                return
            if plivo_call:
                seen.call_uuid = seen.call_uuid or str(uuid.uuid4())
                seen.result = await place_mode_call("", self.credentials, script, carrier="plivo",
                                                    call_sid=seen.call_uuid, account_sid=placed.account_sid,
                                                    keep_audio=keep_audio, rest=self, answer_url=placed.url,
                                                    request_uuid=placed.call_sid)
                await _cancel(amd)
                await self._plivo_status(seen, "completed", duration_s=round(loop.time() - answered_at))
                return
            if plan.kind == "screening":
                # the assistant reacts to the agent: an introduction puts the call through to the person (Twilio:
                # the simulator's callers that decide while the call runs are its Twilio mode's)
                language, text = PUT_THROUGH_TEXT
                hello = self.speech.get((language, text))
                if hello is None:
                    from voicecore.sim.caller_voice import speak
                    hello = self.speech[(language, text)] = await asyncio.to_thread(speak, text, language)
                seen.screened = ScreenedCallee(hello, audio.last_word_ms)
                script = dataclasses.replace(script, caller=seen.screened)
            amd = None
            if placed.machine_detection and placed.async_amd and placed.amd_callback:
                # AMD runs beside the stream from the answer on; its result comes to AsyncAmdStatusCallback
                seen.carrier_amd = callee_core.carrier_amd(plan, audio, placed.machine_detection,
                                                           callee_seed(placed.to))
                amd = loop.create_task(self._amd_callback(seen))
            seen.result = await place_call("", self.credentials.twilio_auth_token, script, call_sid=placed.call_sid,
                                           account_sid=placed.account_sid, keep_audio=keep_audio, rest=self,
                                           voice_url=placed.url, direction="outbound-api")
            if amd is not None:
                amd.cancel()  # a call hung up before Twilio's AMD decided: no callback
                await asyncio.gather(amd, return_exceptions=True)
            await self._status(seen, "completed", sequence, duration_s=round(loop.time() - answered_at))
        finally:
            seen.done = True

    async def _ivr_connected(self) -> tuple[bytes, str, int]:
        """What a navigated IVR plays: "connecting you", a gap, the person's hello (mu-law); the keys it wants; where
        the hello begins."""
        from voicecore.sim.caller_voice import speak
        from voicecore.sim.ivr_callee import SIM_IVR_DIGITS

        parts = []
        for language, text in (CONNECTING_TEXT, PERSON_TEXT):
            speech = self.speech.get((language, text))
            if speech is None:
                speech = self.speech[(language, text)] = await asyncio.to_thread(speak, text, language)
            parts.append(speech)
        gap = b"\xff" * (CONNECT_GAP_MS * 8)  # mu-law quiet
        return parts[0] + gap + parts[1], SIM_IVR_DIGITS, len(parts[0]) // 8 + CONNECT_GAP_MS

    async def _status(self, seen: OutboundCallSeen, status: str, sequence: int, duration_s: int | None = None) -> None:
        """One call status callback, signed as Twilio signs it (X-Twilio-Signature over the URL and the form)."""
        placed = seen.placed
        event = {"in-progress": "answered"}.get(status, status)
        final = status in ("completed", "busy", "no-answer", "failed")
        if not placed.status_callback or (event not in placed.status_events and not final):
            return  # Twilio sends the final status whatever events were asked for
        form = {"CallSid": placed.call_sid, "AccountSid": placed.account_sid, "From": placed.from_, "To": placed.to,
                "Direction": "outbound-api", "CallStatus": status, "SequenceNumber": str(sequence),
                "ApiVersion": "2010-04-01", "CallbackSource": "call-progress-events"}
        if duration_s is not None:
            form["CallDuration"] = str(duration_s)
        seen.statuses.append((status, await self._signed_form_post(placed, placed.status_callback, form)))

    async def _signed_form_post(self, placed: core.PlacedCallRequest, url: str, form: dict[str, str]) -> int | str:
        """POST ``form`` to ``url`` signed as the call's carrier signs its webhooks (TeXML: Ed25519 over
        timestamp|body; Twilio: X-Twilio-Signature over the URL and the form); the HTTP status, or the name of the
        error when the request failed."""
        body = urllib.parse.urlencode(form).encode("ascii")
        if placed.carrier == "telnyx":
            timestamp = str(int(time.time()))
            signature = telnyx.sign_webhook(bytes.fromhex(self.credentials.telnyx_private_key), timestamp, body)
            headers = (("Content-Type", "application/x-www-form-urlencoded"), (telnyx.TIMESTAMP_HEADER, timestamp),
                       (telnyx.SIGNATURE_HEADER, signature))
            agent = "Telnyx Webhooks"
        else:
            signature = compute_signature(self.credentials.twilio_auth_token, url, form)
            headers = (("Content-Type", "application/x-www-form-urlencoded"), ("X-Twilio-Signature", signature))
            agent = "TwilioProxy/1.1"
        try:
            code, _body = await http_client.send("POST", url, headers, body, user_agent=agent)
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError) as exc:
            return type(exc).__name__
        return code

    async def _amd_heard_until(self, seen: OutboundCallSeen, at_ms: int) -> None:
        """Until ``at_ms`` of the callee's audio has played: a carrier's AMD listens to what the callee says, so its
        answer is timed from the call's stream (where the simulated callee's audio starts), not from the answer's
        status, which may come a while before it (the answer URL fetched, the WebSocket opened: longer under load,
        and an AMD timed from the answer would then say ``human`` before the person's hello had ended)."""
        carrier = seen.placed.carrier
        call_id = seen.call_uuid if carrier == "plivo" else seen.placed.call_sid
        origin = await self.stream_opened(carrier, call_id)
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, origin + at_ms / 1000 - loop.time()))

    async def _amd_callback(self, seen: OutboundCallSeen) -> None:
        """The asynchronous AMD callback (Twilio's, or TeXML's with the same fields): CallSid, AccountSid, AnsweredBy,
        MachineDetectionDuration (no CallStatus), signed as the carrier signs its webhooks, once its AMD decided."""
        placed, amd = seen.placed, seen.carrier_amd
        assert amd is not None
        await self._amd_heard_until(seen, amd.at_ms)
        form = {"CallSid": placed.call_sid, "AccountSid": placed.account_sid, "AnsweredBy": amd.answered_by,
                "MachineDetectionDuration": str(amd.at_ms)}
        if placed.carrier == "telnyx":  # TeXML's AMD callback: the same form and CallSidLegacy
            form["CallSidLegacy"] = placed.call_sid
        seen.amd_status = await self._signed_form_post(placed, placed.amd_callback, form)

    async def _vonage_event(self, seen: OutboundCallSeen, status: str, duration_s: int | None = None) -> None:
        """One event webhook (JSON to event_url), signed as a signed-webhook application's are (the JWT with the
        body's payload_hash, HS256 with the signature secret)."""
        placed = seen.placed
        if not placed.status_callback:
            return
        vonage_status = {"initiated": "started", "in-progress": "answered", "no-answer": "timeout"}.get(status, status)
        event: dict[str, object] = {"status": vonage_status}
        if duration_s is not None:
            event["duration"] = str(duration_s)
        seen.statuses.append((status, await self._vonage_post(placed, placed.status_callback, event)))

    async def _vonage_post(self, placed: core.PlacedCallRequest, url: str, fields: dict[str, object]) -> int | str:
        """One event (the call's ids, numbers and timestamp, then ``fields``) POSTed as JSON to ``url``, signed as a
        signed-webhook application's are (the JWT with the body's payload_hash, HS256 with the signature secret);
        the HTTP status, or the name of the error when the request failed."""
        event: dict[str, object] = {"uuid": placed.call_sid, "conversation_uuid": "CON-" + placed.call_sid,
                                    "direction": "outbound", "from": placed.from_[1:], "to": placed.to[1:],
                                    "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), **fields}
        body = json.dumps(event).encode()
        authorization = vonage.sign_webhook(body, self.credentials.vonage_signature_secret, int(time.time()),
                                            secrets.token_hex(8), api_key=self.credentials.vonage_api_key,
                                            application_id=placed.account_sid)
        headers = (("Content-Type", "application/json"), ("Authorization", authorization))
        try:
            code, _body = await http_client.send("POST", url, headers, body, user_agent="Vonage-Voice/1.0")
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError) as exc:
            return type(exc).__name__
        return code

    async def _vonage_amd(self, seen: OutboundCallSeen) -> None:
        """Vonage's advanced machine detection on the event URL: ``status`` human or machine once it decided, then
        for a machine whose beep it heard (mode default or detect_beep) ``machine`` with ``sub_state`` beep_start
        as the beep starts. ``amd_status``: the first answer that was not 204, else 204."""
        placed, amd = seen.placed, seen.carrier_amd
        assert amd is not None
        await self._amd_heard_until(seen, amd.at_ms)
        status = "human" if amd.answered_by == "human" else "machine"
        seen.amd_status = await self._vonage_post(placed, placed.amd_callback, {"status": status})
        if status != "machine" or seen.beep_at_ms is None or placed.machine_detection == "detect":
            return
        await self._amd_heard_until(seen, seen.beep_at_ms)
        seen.carrier_amd_beep = callee_core.CarrierAmd("machine_end_beep", seen.beep_at_ms, amd.right)
        code = await self._vonage_post(placed, placed.amd_callback, {"status": "machine", "sub_state": "beep_start"})
        if seen.amd_status == 204:
            seen.amd_status = code

    async def _plivo_amd(self, seen: OutboundCallSeen) -> None:
        """Plivo's asynchronous machine detection callback to machine_detection_url once it decided: ``Machine``
        true or false with the call's ids, ``Event=MachineDetection``, signed with X-Plivo-Signature-V3. None when
        its AMD heard nothing (the simulated one's ``unknown``)."""
        placed, amd = seen.placed, seen.carrier_amd
        assert amd is not None
        if amd.answered_by == "unknown":
            return
        await self._amd_heard_until(seen, amd.at_ms)
        form = {"From": placed.from_.lstrip("+"), "To": placed.to.lstrip("+"),
                "Machine": "false" if amd.answered_by == "human" else "true", "RequestUUID": placed.call_sid,
                "ALegRequestUUID": placed.call_sid, "CallUUID": seen.call_uuid, "ALegUUID": seen.call_uuid,
                "IfMachine": "hangup" if placed.machine_detection == "hangup" else "continue",
                "Direction": "outbound", "Event": "MachineDetection", "CallStatus": "in-progress"}
        seen.amd_status = await self._plivo_post(placed.amd_callback, form)

    async def _plivo_status(self, seen: OutboundCallSeen, status: str, duration_s: int | None = None) -> None:
        """Plivo's ring (to ring_url, if the request gave one) or hang-up (to hangup_url), signed with
        X-Plivo-Signature-V3 as its answer webhook is."""
        placed = seen.placed
        url = placed.ring_url if status == "ringing" else placed.status_callback
        if not url:
            return
        form = {"RequestUUID": placed.call_sid, "From": placed.from_.lstrip("+"), "To": placed.to.lstrip("+"),
                "Direction": "outbound", "CallStatus": status, "Event": "Ring" if status == "ringing" else "Hangup"}
        if seen.call_uuid:
            form["CallUUID"] = seen.call_uuid
        if status != "ringing":
            form["HangupCause"] = {"completed": "NORMAL_CLEARING", "busy": "USER_BUSY", "no-answer": "NO_ANSWER"}.get(
                status, "CALL_REJECTED")
            form["Duration"] = form["BillDuration"] = str(duration_s or 0)
        seen.statuses.append((status, await self._plivo_post(url, form)))

    async def _plivo_post(self, url: str, form: dict[str, str]) -> int | str:
        """POST ``form`` to ``url`` signed with X-Plivo-Signature-V3 as Plivo signs its callbacks; the HTTP status,
        or the name of the error when the request failed."""
        nonce = secrets.token_hex(10)
        signature = plivo.compute_signature_v3(self.credentials.plivo_auth_token, url, nonce, form, "POST")
        headers = (("Content-Type", "application/x-www-form-urlencoded"), (plivo.SIGNATURE_V3_HEADER, signature),
                   (plivo.SIGNATURE_V3_NONCE_HEADER, nonce))
        try:
            code, _body = await http_client.send("POST", url, headers, urllib.parse.urlencode(form).encode("ascii"),
                                                 user_agent="PlivoHTTP/1.1")
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError) as exc:
            return type(exc).__name__
        return code

    async def _read(self, reader: asyncio.StreamReader, connection: h11.Connection) -> tuple[h11.Request, bytes]:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                connection.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    raise ValueError("body too large")
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                return request, bytes(body)
            elif isinstance(event, h11.ConnectionClosed):
                raise ValueError("connection closed mid-request")

    async def _fetch_aleg_url(self, url: str, call_uuid: str) -> str:
        """Plivo runs a transfer by fetching its aleg_url (a signed form POST) and following the XML."""
        form = core.plivo_transfer_form(call_uuid)
        nonce = secrets.token_hex(10)
        signature = plivo.compute_signature_v3(self.credentials.plivo_auth_token, url, nonce, form, "POST")
        headers = (("Content-Type", "application/x-www-form-urlencoded"), (plivo.SIGNATURE_V3_HEADER, signature),
                   (plivo.SIGNATURE_V3_NONCE_HEADER, nonce))
        try:
            status, body = await http_client.send("POST", url, headers, urllib.parse.urlencode(form).encode("ascii"),
                                                  user_agent="PlivoHTTP/1.1")
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError):
            return ""
        return (core.dial_target(body) or "") if status == 200 else ""
