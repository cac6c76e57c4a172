"""Telnyx, Plivo, Vonage and Exotel calls end to end through the real gateway: real supervisord, gateway, pacer
and model worker processes, real sockets on 127.0.0.1, real shared memory, the model simulator.

Each carrier's test client is built on its module's carrier side (voicecore/carriers/*.py ``*CarrierSide``):
it POSTs (or GETs) the answer webhook signed as that carrier signs it, reads the stream URL and the session
token from the answer document, opens the WebSocket with the ``websockets`` library and what its carrier puts
on the upgrade (Plivo's V3 signature, Vonage's JWT, Exotel's Basic auth from the URL), sends the carrier's
opening messages and 20 ms of caller audio every 20 ms in the carrier's format (Exotel: 100 ms per message),
reads everything the gateway sends with the carrier side (Vonage: 640-byte binary L16 frames; Exotel: chunks
checked against its rules), plays it out in real time, and echoes each mark once the audio before it has
played (and answers a clear as its carrier does). The model simulator's records show the caller's audio
arriving; the gateway's metrics show the echoes counted as played."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import urllib.request
import uuid
import xml.etree.ElementTree as ElementTree
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from stacks import start_stack
from voicecore import http_client
from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.events import ENCODING_L16
from voicecore.demo import demo_script
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import generate_credentials, place_call
from voicecore.timing import FRAME_BYTES, FRAME_MS

pytestmark = pytest.mark.integration

SILENCE = b"\xff" * FRAME_BYTES
CALL_S = 7.0
DTMF_AT_FRAME = 50  # the caller presses a key 1 s into the call
BARGE_IN_AFTER_GREETING_MS = 1500  # the caller speaks this long after the greeting's first audio arrived


@pytest.fixture(scope="module")
def carriers():
    """One stack serving all four carriers (and Twilio), with secrets made for this run: the test clients
    sign with them, the stack checks with its halves (stack_settings), as the demo's simulator does."""
    keys = generate_credentials()
    running = start_stack(**keys.stack_settings())
    yield running, keys
    running.stop()


def gateway_metrics(config) -> dict:
    with urllib.request.urlopen(f"http://{config.listen}/metrics", timeout=5) as response:
        return json.load(response)["gateway"]


# --- a carrier's playout: audio plays in real time, marks echo once the audio before them has played -------


class Playout:
    def __init__(self) -> None:
        self.queue: deque[list] = deque()  # ["audio", ms left] | ["mark", name]

    def audio(self, ms: float) -> None:
        self.queue.append(["audio", ms])

    def mark(self, name: str) -> list[str]:
        self.queue.append(["mark", name])
        return self.play(0)

    def clear(self) -> list[str]:
        """Drop the queue; returns the marks that were queued (a carrier that echoes them on a clear does)."""
        marks = [item[1] for item in self.queue if item[0] == "mark"]
        self.queue.clear()
        return marks

    def play(self, ms: float) -> list[str]:
        reached = []
        while self.queue:
            item = self.queue[0]
            if item[0] == "mark":
                reached.append(self.queue.popleft()[1])
                continue
            if ms <= 0:
                break
            played = min(ms, item[1])
            item[1] -= played
            ms -= played
            if item[1] <= 0:
                self.queue.popleft()
        return reached


# --- the four test clients ------------------------------------------------------------------------------

Message = tuple  # (data: str | bytes, binary: bool)


@dataclass
class Seen:
    """What the client read of one gateway message."""

    kind: str  # audio, mark, clear, bad
    audio_ms: float = 0.0
    name: str = ""
    size: int = 0
    reason: str = ""
    replies: list = field(default_factory=list)  # messages the carrier sends back at once


class TelnyxClient:
    carrier = "telnyx"

    def __init__(self, config, keys) -> None:
        self.config, self.keys = config, keys
        self.echoes = 0  # mark echoes sent
        self.call_id = "v3:" + base64.urlsafe_b64encode(os.urandom(30)).decode().rstrip("=")
        self.side: telnyx.TelnyxCarrierSide | None = None

    async def answer(self, signed: bool = True) -> tuple[int, bytes]:
        body = urlencode({"CallSid": self.call_id, "AccountSid": str(uuid.uuid4()), "From": "+15550001",
                          "To": "+15550002", "CallStatus": "ringing"}).encode()
        timestamp = str(int(time.time()))
        key = bytes.fromhex(self.keys.telnyx_private_key) if signed else os.urandom(32)
        headers = [("Content-Type", "application/x-www-form-urlencoded"), ("telnyx-timestamp", timestamp),
                   ("telnyx-signature-ed25519", telnyx.sign_webhook(key, timestamp, body))]
        return await http_client.send("POST", self.config.base_url + "/telnyx/voice", headers, body)

    def stream(self, body: bytes, token: str | None = None) -> str:
        stream = ElementTree.fromstring(body).find("Connect/Stream")
        parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
        if token is not None:
            parameters["session_token"] = token
        self.side = telnyx.TelnyxCarrierSide(str(uuid.uuid4()), self.call_id, "user-1", custom_parameters=parameters)
        return stream.get("url")

    def upgrade(self, url: str) -> list[tuple[str, str]]:
        return []  # Telnyx signs nothing on the stream

    def opening(self) -> list[Message]:
        return [(self.side.connected(), False), (self.side.start(), False)]

    def caller(self, ulaw: bytes) -> list[Message]:
        return [(self.side.media(ulaw), False)]

    def receive(self, data, binary: bool, playout: Playout) -> Seen:
        sent = self.side.receive_binary(data) if binary else self.side.receive_text(data)
        if isinstance(sent, telnyx.SentMedia):
            playout.audio(len(sent.payload) / 8)
            return Seen("audio", len(sent.payload) / 8, size=len(sent.payload))
        if isinstance(sent, telnyx.SentMark):
            return Seen("mark", name=sent.name, replies=[self.echo(n) for n in playout.mark(sent.name)])
        if isinstance(sent, telnyx.SentClear):  # Telnyx echoes every queued mark on a clear
            return Seen("clear", replies=[self.echo(n) for n in playout.clear()])
        return Seen("bad", reason=f"telnyx error {sent.code}")

    def echo(self, name: str) -> Message:
        self.echoes += 1
        return (self.side.mark_echo(name), False)

    def garbage(self) -> Message:
        return ("{not json", False)

    def dtmf(self, digit: str) -> Message:
        return (self.side.dtmf(digit), False)

    def stop(self) -> list[Message]:
        return [(self.side.stop(), False)]


class PlivoClient:
    carrier = "plivo"

    def __init__(self, config, keys) -> None:
        self.config, self.keys = config, keys
        self.echoes = 0  # mark echoes sent
        self.call_id = str(uuid.uuid4())
        self.side: plivo.PlivoCarrierSide | None = None

    async def answer(self, signed: bool = True) -> tuple[int, bytes]:
        form = {"CallUUID": self.call_id, "From": "15550001", "To": "15550002", "Direction": "inbound",
                "CallStatus": "ringing"}
        url = self.config.base_url + "/plivo/voice"
        nonce = str(int(time.time() * 1000))
        token = self.keys.plivo_auth_token if signed else "not-the-token"
        headers = [("Content-Type", "application/x-www-form-urlencoded"), ("X-Plivo-Signature-V3-Nonce", nonce),
                   ("X-Plivo-Signature-V3", plivo.compute_signature_v3(token, url, nonce, form, "POST"))]
        return await http_client.send("POST", url, headers, urlencode(form).encode())

    def stream(self, body: bytes, token: str | None = None) -> str:
        stream = ElementTree.fromstring(body).find("Stream")
        assert (stream.get("bidirectional"), stream.get("keepCallAlive"), stream.get("contentType")) == (
            "true", "true", "audio/x-mulaw;rate=8000")
        extra = stream.get("extraHeaders")
        if token is not None:
            extra = f"session_token={token}"
        self.side = plivo.PlivoCarrierSide(str(uuid.uuid4()), self.call_id, extra_headers=extra)
        return stream.text

    def upgrade(self, url: str) -> list[tuple[str, str]]:
        nonce = str(int(time.time() * 1000))
        return [(plivo.SIGNATURE_V3_HEADER, plivo.sign_upgrade(self.keys.plivo_auth_token, url, nonce)),
                (plivo.SIGNATURE_V3_NONCE_HEADER, nonce)]

    def opening(self) -> list[Message]:
        return [(self.side.start(), False)]

    def caller(self, ulaw: bytes) -> list[Message]:
        return [(self.side.media(ulaw), False)]

    def receive(self, data, binary: bool, playout: Playout) -> Seen:
        sent = self.side.receive_binary(data) if binary else self.side.receive_text(data)
        if isinstance(sent, plivo.PlayAudio):
            playout.audio(len(sent.payload) / 8)
            return Seen("audio", len(sent.payload) / 8, size=len(sent.payload))
        if isinstance(sent, plivo.Checkpoint):
            return Seen("mark", name=sent.name, replies=[self.echo(n) for n in playout.mark(sent.name)])
        if isinstance(sent, plivo.ClearAudio):  # Plivo drops the checkpoints and answers clearedAudio
            playout.clear()
            return Seen("clear", replies=[(self.side.cleared_audio(), False)])
        return Seen("bad", reason=sent.reason)

    def echo(self, name: str) -> Message:
        self.echoes += 1
        return (self.side.played_stream(name), False)

    def garbage(self) -> Message:
        return (b"\x00binary", True)  # Plivo sends text frames only: 1003

    def dtmf(self, digit: str) -> Message:
        return (self.side.dtmf(digit), False)

    def stop(self) -> list[Message]:
        return [(self.side.stop(), False)]


class VonageClient:
    carrier = "vonage"

    def __init__(self, config, keys) -> None:
        self.config, self.keys = config, keys
        self.echoes = 0  # mark echoes sent
        self.call_id = str(uuid.uuid4())
        self.side: vonage.VonageCarrierSide | None = None
        self.notifies: dict[str, vonage.SentNotify] = {}
        self.transcoder: EdgeTranscoder | None = None

    async def answer(self, signed: bool = True) -> tuple[int, bytes]:
        body = json.dumps({"uuid": self.call_id, "conversation_uuid": "CON-" + str(uuid.uuid4()),
                           "to": "15550002", "from": "15550001"}).encode()
        secret = self.keys.vonage_signature_secret if signed else "not-the-secret-0123456789"
        headers = [("Content-Type", "application/json"),
                   ("Authorization", vonage.sign_webhook(body, secret, int(time.time()), str(uuid.uuid4())))]
        return await http_client.send("POST", self.config.base_url + "/vonage/answer", headers, body)

    def stream(self, body: bytes, token: str | None = None) -> str:
        (action,) = json.loads(body)
        (endpoint,) = action["endpoint"]
        assert action["action"] == "connect" and endpoint["type"] == "websocket"
        rate = int(endpoint["content-type"].rsplit("=", 1)[1])
        headers = dict(endpoint["headers"])
        assert headers["call_id"] == self.call_id
        if token is not None:
            headers["session_token"] = token
        self.side = vonage.VonageCarrierSide(headers, rate)
        self.transcoder = EdgeTranscoder(ENCODING_L16, rate)
        assert endpoint["authorization"] == {"type": "vonage"}  # the JWT on the upgrade, below
        return endpoint["uri"]

    def upgrade(self, url: str) -> list[tuple[str, str]]:
        return [("Authorization", vonage.sign_webhook(b"", self.keys.vonage_signature_secret, int(time.time()),
                                                      str(uuid.uuid4())))]

    def opening(self) -> list[Message]:
        connected = self.side.connected()
        return [(connected.data.decode(), connected.binary)]

    def caller(self, ulaw: bytes) -> list[Message]:
        return [(self.side.audio(self.transcoder.from_ulaw(ulaw)).data, True)]

    def receive(self, data, binary: bool, playout: Playout) -> Seen:
        sent = self.side.receive(data, binary)
        if isinstance(sent, vonage.SentAudio):
            playout.audio(FRAME_MS)
            return Seen("audio", FRAME_MS, size=len(sent.payload))
        if isinstance(sent, vonage.SentNotify):
            self.notifies[sent.mark] = sent
            return Seen("mark", name=sent.mark, replies=[self.echo(n) for n in playout.mark(sent.mark)])
        if isinstance(sent, vonage.SentClear):
            playout.clear()
            cleared = self.side.cleared()
            return Seen("clear", replies=[(cleared.data.decode(), False)])
        return Seen("bad", reason=sent.reason)

    def echo(self, name: str) -> Message:
        self.echoes += 1
        return (self.side.notify_echo(self.notifies.pop(name)).data.decode(), False)

    def garbage(self) -> Message:
        return ("{not json", False)

    def dtmf(self, digit: str) -> Message:
        return (self.side.dtmf(digit).data.decode(), False)

    def stop(self) -> list[Message]:
        return []  # Vonage ends a call by closing the socket


class ExotelClient:
    carrier = "exotel"
    FRAMES_PER_MESSAGE = 5  # Exotel sends about 100 ms per media message

    def __init__(self, config, keys) -> None:
        self.config, self.keys = config, keys
        self.echoes = 0  # mark echoes sent
        self.call_id = os.urandom(16).hex()
        self.side: exotel.ExotelCarrierSide | None = None
        self.transcoder = EdgeTranscoder(ENCODING_L16, 8000)
        self.pending = b""

    async def answer(self, signed: bool = True) -> tuple[int, bytes]:
        query = urlencode({"CallSid": self.call_id, "CallFrom": "0955550001", "CallTo": "0805550002"})
        password = self.keys.exotel_password if signed else "wrong"
        credentials = base64.b64encode(f"{self.keys.exotel_username}:{password}".encode()).decode()
        return await http_client.send("GET", f"{self.config.base_url}/exotel/voice?{query}",
                                      [("Authorization", "Basic " + credentials)])

    def stream(self, body: bytes, token: str | None = None) -> str:
        url = json.loads(body)["url"]
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        rate = int(query.pop("sample-rate"))
        if token is not None:
            query["session_token"] = token
            url = parts._replace(query=urlencode({"sample-rate": rate, **query})).geturl()
        self.side = exotel.ExotelCarrierSide(os.urandom(16).hex(), self.call_id, "exotel-acct", encoding=ENCODING_L16,
                                             sample_rate_hz=rate, custom_parameters=tuple(query.items()))
        return url

    def upgrade(self, url: str) -> list[tuple[str, str]]:
        assert urlsplit(url).username == self.keys.exotel_username
        return []  # websockets sends the URL's wss://user:password@ as Authorization: Basic, as Exotel does

    def opening(self) -> list[Message]:
        return [(message, False) for message in self.side.opening_messages()]

    def caller(self, ulaw: bytes) -> list[Message]:
        self.pending += self.transcoder.from_ulaw(ulaw)
        if len(self.pending) < self.FRAMES_PER_MESSAGE * 320:
            return []
        payload, self.pending = self.pending, b""
        return [(self.side.media(payload), False)]

    def receive(self, data, binary: bool, playout: Playout) -> Seen:
        sent = self.side.receive_binary(data) if binary else self.side.receive_text(data)
        if isinstance(sent, exotel.SentMedia):
            playout.audio(len(sent.payload) / 16)
            return Seen("audio", len(sent.payload) / 16, size=len(sent.payload))
        if isinstance(sent, exotel.SentMark):
            return Seen("mark", name=sent.name, replies=[self.echo(n) for n in playout.mark(sent.name)])
        if isinstance(sent, exotel.SentClear):
            playout.clear()  # whether Exotel echoes the queued marks is not documented: this one does not
            return Seen("clear")
        return Seen("bad", reason=sent.reason)

    def echo(self, name: str) -> Message:
        self.echoes += 1
        return (self.side.mark_echo(name), False)

    def garbage(self) -> Message:
        return (b"\x00binary", True)  # Exotel sends text frames only: 1003

    def dtmf(self, digit: str) -> Message:
        return (self.side.dtmf(digit), False)

    def stop(self) -> list[Message]:
        return [(self.side.stop(), False)]


CLIENTS = {client.carrier: client for client in (TelnyxClient, PlivoClient, VonageClient, ExotelClient)}


# --- one call ----------------------------------------------------------------------------------------------


@dataclass
class CallOutcome:
    call_id: str
    seen: list[tuple[float, Seen]] = field(default_factory=list)  # (ms since the stream opened, what)
    echoes_sent: int = 0
    close_code: int | None = None
    first_audio_ms: float | None = None
    barge_in_ms: float | None = None

    def of(self, kind: str) -> list[Seen]:
        return [item for _, item in self.seen if item.kind == kind]

    @property
    def audio_ms(self) -> float:
        return sum(item.audio_ms for item in self.of("audio"))


async def run_call(client, seconds: float = CALL_S, barge_in: bool = False, garbage_after_audio: bool = False,
                   token: str | None = None) -> CallOutcome:
    """One call as the client's carrier places it. ``barge_in``: the caller speaks over the greeting;
    ``garbage_after_audio``: once the greeting's first audio arrived, a message the carrier never sends;
    ``token``: present this token instead of the answer's."""
    status, body = await client.answer()
    assert status == 200, body
    url = client.stream(body, token)
    outcome = CallOutcome(client.call_id)
    playout = Playout()
    clip = load_clip("caller_interrupt")
    async with connect(url, additional_headers=client.upgrade(url), compression=None, open_timeout=5,
                       close_timeout=5) as ws:
        opened = time.monotonic()

        def now_ms() -> float:
            return (time.monotonic() - opened) * 1000

        async def send(messages) -> None:
            for data, _binary in messages:
                try:
                    await ws.send(data)
                except ConnectionClosed:
                    return  # the gateway closed the stream (what some tests wait for)

        async def read() -> None:
            try:
                async for message in ws:
                    seen = client.receive(message, isinstance(message, bytes), playout)
                    outcome.seen.append((now_ms(), seen))
                    if seen.kind == "audio" and outcome.first_audio_ms is None:
                        outcome.first_audio_ms = now_ms()
                    await send(seen.replies)
            except ConnectionClosed:
                pass

        reader = asyncio.create_task(read())
        await send(client.opening())
        frame_index = 0
        caller_audio = b""
        garbage_sent = False
        start = time.monotonic()
        while time.monotonic() - start < seconds and not reader.done():
            if (barge_in and outcome.barge_in_ms is None and outcome.first_audio_ms is not None
                    and now_ms() >= outcome.first_audio_ms + BARGE_IN_AFTER_GREETING_MS):
                outcome.barge_in_ms = now_ms()
                caller_audio = clip
            frame, caller_audio = (caller_audio[:FRAME_BYTES], caller_audio[FRAME_BYTES:]) if caller_audio else (SILENCE, b"")
            frame = frame.ljust(FRAME_BYTES, b"\xff")
            await send(client.caller(frame))
            for name in playout.play(FRAME_MS):
                await send([client.echo(name)])
            if frame_index == DTMF_AT_FRAME:
                await send([client.dtmf("5")])
            if garbage_after_audio and not garbage_sent and outcome.first_audio_ms is not None:
                await send([client.garbage()])
                garbage_sent = True
            frame_index += 1
            await asyncio.sleep(max(0.0, start + frame_index * FRAME_MS / 1000 - time.monotonic()))
        if not reader.done():
            await send(client.stop())
            if not client.stop():
                await ws.close(1000)
        await asyncio.wait_for(reader, 10)
        outcome.close_code = ws.close_code
    outcome.echoes_sent = client.echoes
    return outcome


# --- the tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("carrier", list(CLIENTS))
def test_a_call_end_to_end(carriers, carrier):
    """Admitted, caller audio reaches the model, the greeting comes back in the carrier's format and parses
    with its carrier side, marks echo and count as played, the caller barges in and the gateway clears."""
    running, keys = carriers
    config = running.config
    before = gateway_metrics(config)

    async def call():
        async with running.model_sim() as sim:
            client = CLIENTS[carrier](config, keys)
            return sim, client, await run_call(client, barge_in=True)

    sim, client, outcome = asyncio.run(call())
    detail = running.log_tail()
    assert outcome.close_code == 1000, detail
    assert outcome.of("bad") == [], [item.reason for item in outcome.of("bad")]
    # The caller's audio reached the model: its session of this call holds the whole call's appended audio.
    sessions = sim.by_call(client.call_id)
    assert sessions, detail
    appended_ms = sum(session.record.appended_bytes for session in sessions) / 8
    assert appended_ms >= (CALL_S - 1.5) * 1000, appended_ms
    # The greeting came back in the carrier's own format.
    assert outcome.first_audio_ms is not None and outcome.first_audio_ms < 3000, detail
    assert outcome.audio_ms >= 1000
    audio = outcome.of("audio")
    if carrier == "vonage":
        assert {item.size for item in audio} == {640}  # 20 ms of L16 at 16 kHz, each a binary frame
    elif carrier == "exotel":
        rules = client.side.rules
        assert all(rules.problem(item.size) is None for item in audio)  # and the side rejected none ("bad")
        assert min(item.size for item in audio) >= 3200
    else:
        assert {item.size for item in audio} == {FRAME_BYTES}  # mu-law 20 ms: the pacer's final templates
    # Marks went out behind the audio, came back, and the gateway counted them played.
    assert outcome.of("mark") and outcome.echoes_sent > 0
    after = gateway_metrics(config)
    assert after["marks_played"] > before["marks_played"]
    assert after["carrier_streams_started"] == before["carrier_streams_started"] + 1
    # The barge-in: the caller spoke over the greeting, the model's speech_started cut it, the pacer cleared.
    clears = [ms for ms, item in outcome.seen if item.kind == "clear"]
    assert outcome.barge_in_ms is not None and clears, detail
    assert clears[0] - outcome.barge_in_ms < 2000, (clears, outcome.barge_in_ms)
    assert after["clears_sent"] > before["clears_sent"]
    # Every echo was one the gateway sent: none unknown (a clear's marks settled, not lost).
    assert after["marks_unknown"] == before["marks_unknown"]
    # The wire entries: the pacer's final text for mu-law Telnyx and Plivo, raw entries the edge finished otherwise.
    expected = {"telnyx": "pcmu at 8000 Hz, final", "plivo": "pcmu at 8000 Hz, final",
                "vonage": "l16 at 16000 Hz, raw", "exotel": "l16 at 8000 Hz, raw"}[carrier]
    log = running.log_tail(400_000)
    assert f"call {client.call_id}: {carrier} stream, {expected} wire entries" in log
    assert f"call {client.call_id}: dtmf received" in log


def test_a_bad_signature_is_refused_403(carriers):
    running, keys = carriers

    async def attempts():
        return {carrier: (await client_type(running.config, keys).answer(signed=False))[0]
                for carrier, client_type in CLIENTS.items()}

    assert asyncio.run(attempts()) == {carrier: 403 for carrier in CLIENTS}


@pytest.mark.parametrize("carrier", list(CLIENTS))
def test_a_forged_token_closes_the_stream_with_1008(carriers, carrier):
    running, keys = carriers
    client = CLIENTS[carrier](running.config, keys)
    outcome = asyncio.run(run_call(client, seconds=2, token="forged" + os.urandom(12).hex()))
    assert outcome.close_code == 1008, running.log_tail()
    assert outcome.seen == []


@pytest.mark.parametrize("carrier,code", [("telnyx", 1007), ("plivo", 1003), ("vonage", 1007), ("exotel", 1003)])
def test_garbage_closes_with_the_carriers_code_and_another_call_is_unharmed(carriers, carrier, code):
    """Mid-call garbage closes that call with the code its protocol module documents; a Twilio call and a
    call of another carrier in the same stack go on and end normally."""
    running, keys = carriers
    config = running.config
    other = "vonage" if carrier != "vonage" else "telnyx"

    async def calls():
        async with running.model_sim():
            bad = asyncio.create_task(run_call(CLIENTS[carrier](config, keys), seconds=5, garbage_after_audio=True))
            good = asyncio.create_task(run_call(CLIENTS[other](config, keys), seconds=5))
            twilio = asyncio.create_task(place_call(config.base_url, config.twilio_auth_token, demo_script(5)))
            return await bad, await good, await twilio

    bad, good, twilio = asyncio.run(calls())
    assert bad.close_code == code, running.log_tail()
    assert good.close_code == 1000 and good.of("bad") == [] and good.audio_ms >= 1000
    assert twilio.closed_by == "carrier" and twilio.metrics.protocol_errors == 0


def test_an_unserved_carrier_is_404_and_the_log_says_which_are_served():
    running = start_stack(max_calls=2, plivo_auth_token="only-plivo")
    try:
        base = running.config.base_url

        async def probes():
            return {path: (await http_client.send(method, base + path, [], b""))[0] for method, path in (
                ("POST", "/telnyx/voice"), ("GET", "/vonage/answer"), ("POST", "/vonage/event"),
                ("GET", "/exotel/voice"), ("GET", "/telnyx/stream"), ("POST", "/plivo/voice"))}

        assert asyncio.run(probes()) == {"/telnyx/voice": 404, "/vonage/answer": 404, "/vonage/event": 404,
                                         "/exotel/voice": 404, "/telnyx/stream": 404, "/plivo/voice": 403}
        assert "carriers served: twilio, plivo (not served, no secret configured: telnyx, vonage, exotel)" in running.log_tail(200_000)
    finally:
        running.stop()


# Per carrier, an upgrade its carrier would never send: (what it lacks or gets wrong, extra headers, URL change).
BAD_UPGRADES = {
    "plivo": [("unsigned", [], None),
              ("signed with another token", [(plivo.SIGNATURE_V3_HEADER, plivo.sign_upgrade("not-the-token", "ws://x/", "1")),
                                             (plivo.SIGNATURE_V3_NONCE_HEADER, "1")], None)],
    "vonage": [("unsigned", [], None),
               ("signed with another secret", [("Authorization", vonage.sign_webhook(b"", "not-the-secret-0123456789",
                                                                                    int(time.time()), "j"))], None)],
    "exotel": [("no credentials", [], "strip"), ("a wrong password", [], "wrong-password")],
}


@pytest.mark.parametrize("carrier", list(BAD_UPGRADES))
def test_a_bad_upgrade_is_refused_403_while_a_good_call_runs(carriers, carrier):
    """A stream upgrade without what its carrier puts on it (or with it wrong) is refused with 403 before
    any WebSocket opens, one log line each, counted; a good call of the same carrier, admitted with its
    carrier's credential, goes on to a normal end meanwhile."""
    running, keys = carriers
    config = running.config
    before = gateway_metrics(config)

    async def scenario():
        async with running.model_sim():
            good = asyncio.create_task(run_call(CLIENTS[carrier](config, keys), seconds=4))
            statuses = []
            for _what, headers, url_change in BAD_UPGRADES[carrier]:
                client = CLIENTS[carrier](config, keys)
                status, body = await client.answer()
                assert status == 200, body
                url = client.stream(body)
                parts = urlsplit(url)
                if url_change == "strip":
                    url = parts._replace(netloc=parts.hostname + f":{parts.port}").geturl()
                elif url_change == "wrong-password":
                    url = parts._replace(netloc=f"{parts.username}:wrong@{parts.hostname}:{parts.port}").geturl()
                try:
                    async with connect(url, additional_headers=headers, open_timeout=5):
                        statuses.append(101)
                except InvalidStatus as exc:
                    statuses.append(exc.response.status_code)
            return await good, statuses

    good, statuses = asyncio.run(scenario())
    assert statuses == [403] * len(BAD_UPGRADES[carrier]), running.log_tail()
    assert good.close_code == 1000 and good.of("bad") == [] and good.audio_ms >= 1000, running.log_tail()
    after = gateway_metrics(config)
    assert after["carrier_upgrades_refused"] == before["carrier_upgrades_refused"] + len(statuses)
    assert after["carrier_streams_started"] == before["carrier_streams_started"] + 1  # the good call alone
    log = running.log_tail(400_000)
    reason = {"plivo": "X-Plivo-Signature-V3", "vonage": "signed JWT", "exotel": "Basic credentials"}[carrier]
    assert log.count(f"{carrier} stream upgrade refused: no {reason} on the upgrade (answered 403)") >= 1
    assert log.count(f"{carrier} stream upgrade refused: bad {reason} on the upgrade (answered 403)") >= 1
