"""asyncio shell of the carrier simulator's REST APIs (Telnyx Call Control, Plivo Call API, Vonage Voice API):
the stack's hang-up and transfer requests for a simulated call end that call, as the carrier would; and the
Calls APIs (Twilio's, Telnyx's TeXML, Plivo's Make Call, Vonage's Create Call) place an outbound call: it rings,
and a simulated callee answers it (voicecore/sim/callee_core.py: a person, a voicemail, a screening assistant,
an IVR) or never does (busy, no-answer, failed), with the call's progress and AMD callbacks as its carrier sends
them. An answered call fetches its answer URL and opens its media stream to the gateway as an inbound one does
(voicecore/sim/carrier.py place_call), the callee's greeting, spoken by espeak-ng, as its audio.

Owns: the HTTP/1.1 server (h11, one request per connection, 127.0.0.1), the registry of live simulated calls
(place_call registers each call it places with ``rest=``), what a granted request does to the call (its
stream is stopped and closed by the carrier side: ``CallResult.closed_by`` is ``rest_hangup`` or
``rest_transfer``), a placed call's course (its progress told, its AMD timed from its stream, its stream), and
for a carrier whose transfer fetches a URL (Plivo's ``aleg_url``) that fetch, whose ``<Dial>`` is recorded.
Every request and its outcome stays in ``requests``.

Must not know: what is checked and answered (voicecore/sim/carrier_rest_core.py), what each carrier's callbacks
hold and how they are signed (its simulator side, ``voicecore/carriers/<name>/sim.py``), or how a call is played.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import h11

from voicecore import http_client
from voicecore.carriers import registry
from voicecore.carriers.simulator import CarrierCredentials, CarrierSimulator
from voicecore.sim import callee_core
from voicecore.sim.callee_core import callee_seed
from voicecore.sim.ivr_callee import CONNECT_GAP_MS, CONNECTING_TEXT, PERSON_TEXT, REPROMPT_TEXT, IvrCallee
from voicecore.sim.screened_callee import PUT_THROUGH_TEXT, ScreenedCallee
from voicecore.sim import carrier_rest_core as core
from voicecore.sim.carrier_modes_core import adapter_for
from voicecore.sim.random_ids import RANDOM_IDS

MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT_S = 5.0
ANSWERED = "in-progress"  # the status step of the answer (callee_core.status_steps)


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
        if outcome.action == core.TRANSFER:
            dialed = await self._fetch_transfer(outcome)
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
        from voicecore.sim.carrier import CallScript, place_call  # the call's stream side (imports this module's users)

        placed, plan = seen.placed, seen.plan
        simulator = registry.get(placed.carrier).simulator
        loop = asyncio.get_running_loop()
        started = answered_at = loop.time()
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
            for step in callee_core.status_steps(plan, self.ring_ms):
                await asyncio.sleep(max(0.0, started + step.at_ms / 1000 - loop.time()))
                answered = step.status == ANSWERED
                if answered:
                    answered_at = loop.time()
                told = await self._progress(seen, simulator, step.status, sequence)
                # the callbacks' SequenceNumber (Twilio's, TeXML's): every step before the answer takes a number,
                # told or not; the answer only when it was told
                if told or not answered:
                    sequence += 1
            if audio is None:
                return
            if simulator.answered_call_has_own_id:
                seen.call_uuid = RANDOM_IDS.uuid()
            call_id = seen.call_uuid or placed.call_sid  # what the answered call's stream and REST requests name
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
                self.listen_digits(placed.carrier, call_id, seen.ivr.on_rest_digits)
            if plan.kind == "screening" and adapter_for(placed.carrier) is None:
                # the assistant reacts to the agent: an introduction puts the call through to the person (a caller
                # that decides while the call runs plays on the simulator's own core, not an adapter's:
                # CallScript.caller)
                language, text = PUT_THROUGH_TEXT
                hello = self.speech.get((language, text))
                if hello is None:
                    from voicecore.sim.caller_voice import speak
                    hello = self.speech[(language, text)] = await asyncio.to_thread(speak, text, language)
                seen.screened = ScreenedCallee(hello, audio.last_word_ms)
                script = dataclasses.replace(script, caller=seen.screened)
            keep_audio = seen.ivr is not None
            amd = None
            amd_mode = simulator.amd_mode(placed)
            if amd_mode:
                # the carrier's asynchronous AMD beside the stream from the answer on; its result goes to the
                # request's AMD callback
                seen.carrier_amd = callee_core.carrier_amd(plan, audio, amd_mode, callee_seed(placed.to))
                amd = loop.create_task(self._carrier_amd(seen, simulator))
            seen.result = await place_call("", self.credentials.twilio_auth_token, script, call_sid=call_id,
                                           account_sid=placed.account_sid, keep_audio=keep_audio, rest=self,
                                           carrier=placed.carrier, credentials=self.credentials, voice_url=placed.url,
                                           direction="outbound-api",
                                           request_uuid=placed.call_sid if seen.call_uuid else "")
            await _cancel(amd)  # a call hung up before the carrier's AMD decided: no callback (or no more of them)
            await self._progress(seen, simulator, "completed", sequence, duration_s=round(loop.time() - answered_at))
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

    async def _progress(self, seen: OutboundCallSeen, simulator: CarrierSimulator, status: str, sequence: int,
                        duration_s: int | None = None) -> bool:
        """The callback that tells the node one step of the call's progress, as the call's carrier tells it; False
        when the carrier tells none for that step."""
        callback = simulator.progress_callback(seen.placed, status, sequence=sequence, duration_s=duration_s,
                                               call_uuid=seen.call_uuid)
        if callback is None:
            return False
        url, fields = callback
        seen.statuses.append((status, await self._callback(simulator, seen.placed, url, fields)))
        return True

    async def _callback(self, simulator: CarrierSimulator, placed: core.PlacedCallRequest, url: str,
                        fields: Mapping[str, str]) -> int | str:
        """POST ``fields`` to ``url`` signed as the call's carrier signs its webhooks; the HTTP status, or the name
        of the error when the request failed."""
        request = simulator.callback_request(placed, url, fields, self.credentials, now_s=time.time(),
                                             nonce=simulator.new_nonce(RANDOM_IDS))
        try:
            code, _body = await http_client.send(request.method, request.url, request.headers, request.body,
                                                 user_agent=simulator.user_agent)
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError) as exc:
            return type(exc).__name__
        return code

    async def _amd_heard_until(self, seen: OutboundCallSeen, at_ms: int) -> None:
        """Until ``at_ms`` of the callee's audio has played: a carrier's AMD listens to what the callee says, so its
        answer is timed from the call's stream (where the simulated callee's audio starts), not from the answer's
        status, which may come a while before it (the answer URL fetched, the WebSocket opened: longer under load,
        and an AMD timed from the answer would then say ``human`` before the person's hello had ended)."""
        origin = await self.stream_opened(seen.placed.carrier, seen.call_uuid or seen.placed.call_sid)
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, origin + at_ms / 1000 - loop.time()))

    async def _carrier_amd(self, seen: OutboundCallSeen, simulator: CarrierSimulator) -> None:
        """The carrier's asynchronous AMD callbacks (its verdict; Vonage's beep after a machine's), each once its AMD
        heard enough of the callee. ``amd_status``: the first answer that was not 204, else 204."""
        placed, amd = seen.placed, seen.carrier_amd
        assert amd is not None
        for callback in simulator.amd_callbacks(placed, amd.answered_by, amd.at_ms, seen.beep_at_ms, seen.call_uuid):
            await self._amd_heard_until(seen, callback.at_ms)
            if callback.beep:
                seen.carrier_amd_beep = callee_core.CarrierAmd("machine_end_beep", callback.at_ms, amd.right)
            code = await self._callback(simulator, placed, placed.amd_callback, callback.fields)
            if seen.amd_status in (None, 204):
                seen.amd_status = code

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

    async def _fetch_transfer(self, outcome: core.RestOutcome) -> str:
        """What the transfer's document dials, for a carrier that runs a transfer by fetching the URL it names (Plivo:
        its aleg_url, a signed form POST, whose XML it follows); "" otherwise."""
        simulator = registry.get(outcome.carrier).simulator
        request = simulator.transfer_fetch(outcome.target, outcome.call_id, self.credentials,
                                           nonce=simulator.new_nonce(RANDOM_IDS))
        if request is None:
            return ""
        try:
            status, body = await http_client.send(request.method, request.url, request.headers, request.body,
                                                  user_agent=simulator.user_agent)
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError):
            return ""
        return (core.dial_target(body) or "") if status == 200 else ""
