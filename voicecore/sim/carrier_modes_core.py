"""Sans-I/O carrier modes of the carrier simulator: Telnyx, Plivo, Vonage and Exotel beside Twilio.

Owns, per carrier: the adapter that puts its wire shapes in front of the carrier-neutral measuring core
(voicecore.sim.carrier_core.PlayoutCore), built on that carrier's ``<Carrier>CarrierSide``
(voicecore/carriers/); reading the carrier's answer document (TeXML, Plivo XML, NCCO, Exotel's dynamic-URL
JSON) into where to stream and what to carry, exactly as the carrier would follow it; the signed answer
webhook each carrier sends; and the simulator's credentials (the matching halves of the stack's secrets).

Must not know: sockets, HTTP, asyncio, the clock or randomness (time, ids and nonces come in as
arguments), or how the gateway works inside. The shell is voicecore/sim/carrier.py.

How an adapter works. What the carrier sends (``start``, caller audio, DTMF, mark echoes, clear
acknowledgements, ``stop``) is written by the carrier side's own builders. What the gateway sends is read
by a fast path for the exact bytes the gateway writes (the carrier module's own encoder templates, as the
Twilio adapter's ``receive_fast``) and otherwise by the carrier side's parser. Audio the carrier gets is
turned into the 160-byte 8 kHz mu-law frames the core measures with voicecore.carriers.codec (the same
transcoder the gateway uses, so G.711 mu-law and L16 at 8 kHz come back bit-exact, modulo mu-law's two
zeros; A-law and resampled L16 do not: see voicecore/sim/audio_match.py for how those frames are tied to
the model's responses). Marks (Telnyx/Exotel ``mark``, Plivo ``checkpoint``, Vonage ``notify``) and clears
go to the core, which plays one 20 ms frame per tick, echoes a mark when playout passes it, and measures.
The carrier sides that keep a playout model of their own (Telnyx, Plivo) are used only to read: the
core's playout clock is the one that times echoes, so a second instance of the side reads what we send
and its own queue is never played.

Carrier behaviours the adapters model (docs/explanation/protocols.md#b and each carrier module's sources):

- Telnyx: ``connected`` + ``start`` (the TeXML ``<Parameter>``s in ``custom_parameters``), PCMU or PCMA as
  the TeXML's ``codec`` asks, marks echoed when played and at once when nothing is queued, ``clear``
  returns every queued mark, an ``error`` frame answers a message Telnyx would refuse. Optional jitter:
  a caller frame is now and then sent after the next one (its ``chunk`` and ``sequence_number`` keep the
  true order), the reordering a Telnyx stream documents, to exercise the gateway's reorder window.
- Plivo: ``start`` (the answer XML's ``extraHeaders`` in ``extra_headers``), the XML's ``contentType``,
  ``checkpoint`` echoed as ``playedStream`` when played, ``clearAudio`` answered by ``clearedAudio`` and
  pending checkpoints dropped unechoed. Optional stalls (``playout_stall_ms`` of every
  ``playout_stall_every_ms``): Plivo's buffer plays at real time but may play late (a slow media server,
  jitter in front of it), and whatever we send meanwhile stays in its deep buffer; the core's
  ``metrics.max_queued_frames`` shows how deep it got.
- Vonage: ``websocket:connected`` with the NCCO endpoint's ``content-type`` and its ``headers`` echoed at
  the top level, binary L16 frames of 20 ms both ways, ``notify`` echoed as ``websocket:notify`` with its
  payload when played, ``clear`` answered by ``websocket:cleared`` and pending notifies dropped; no
  ``stop``: the call ends by the socket closing. A socket that ends while the call goes on (the gateway closed it
  or vanished) under a synchronous ``connect`` is followed as its "WebSocket fallback options" say: the
  ``disconnected`` event, signed, to the ``eventUrl``; a new NCCO it answers replaces the call's, no NCCO (or one
  with nothing left to run) ends the call.
- Exotel: ``connected`` + ``start`` (the stream URL's query parameters but ``sample-rate`` in
  ``custom_parameters``; the rate from ``sample-rate``, default 8000), caller audio in ~100 ms ``media``
  messages, our audio in chunks of 100 ms and more, marks echoed when played; a ``clear`` returns the
  pending marks as Twilio's does (Exotel documents no echo rule; voicecore/carriers/exotel/protocol.py settles
  marks the same way).

Bad input from the gateway never raises: it is counted (``metrics.protocol_errors``) with a fixed reason.
Misuse by the harness raises ValueError.
"""

from __future__ import annotations

import abc

import base64
import binascii
import hashlib
import json
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import numpy as np
import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.codec import EdgeTranscoder, Framer
from voicecore.carriers.events import ENCODING_L16, ENCODING_PCMA, ENCODING_PCMU
from voicecore.sim.carrier_core import DEFAULT_LEAD_FRAMES, PlayoutCore, Utterance
from voicecore.timing import FRAME_BYTES, FRAME_MS, SAMPLE_RATE_HZ
from voicecore.carriers.marks import PLAIN_NAME_BYTES

__all__ = [
    "CARRIERS",
    "CONTINUES",
    "CallIdentity",
    "CarrierCredentials",
    "ExotelCall",
    "ModeCall",
    "PlivoCall",
    "StreamTarget",
    "TelnyxCall",
    "VonageCall",
    "WebhookRequest",
    "answer_webhook",
    "continuation_request",
    "parse_answer",
    "parse_continuation",
    "stream_headers",
]

CARRIERS = ("twilio", "telnyx", "plivo", "vonage", "exotel")

# The path of each carrier's answer webhook on the gateway (a public contract: the carriers' consoles point
# at these; docs/reference/carriers.md#answer-webhooks). Everything after
# the answer (the stream's URL, path, query and where the session token travels) is read from the answer.
ANSWER_PATHS = {"telnyx": "/telnyx/voice", "plivo": "/plivo/voice", "vonage": "/vonage/answer",
                "exotel": "/exotel/voice"}
USER_AGENTS = {"telnyx": "Telnyx Webhooks", "plivo": "PlivoHTTP/1.1", "vonage": "Vonage-Voice/1.0",
               "exotel": "Exotel/1.0"}
EXOTEL_MEDIA_FRAMES = 5  # Exotel sends caller audio "about every 100 ms" [ws]: five 20 ms frames a message
_EXOTEL_RATE_KEY = "sample-rate"


# ----- credentials -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CarrierCredentials:
    """The carrier's halves of the stack's secrets (the shell makes random ones per run: voicecore.sim.carrier
    generate_credentials). ``telnyx_private_key`` is the 32-byte Ed25519 seed, hex; the stack gets its public
    key (``stack_settings``)."""

    twilio_auth_token: str = ""
    telnyx_private_key: str = ""
    plivo_auth_token: str = ""
    vonage_signature_secret: str = ""
    vonage_api_key: str = "simulator"
    exotel_username: str = ""
    exotel_password: str = ""
    # The REST APIs' credentials (hang-up and transfer, voicecore/sim/carrier_rest_core.py): Telnyx's API key,
    # Plivo's auth id (its token is plivo_auth_token), Vonage's application id and private key (PEM).
    telnyx_api_key: str = ""
    plivo_auth_id: str = ""
    vonage_application_id: str = ""
    vonage_private_key: str = ""

    def telnyx_public_key(self) -> str:
        """base64 of the raw 32-byte Ed25519 public key (the form Telnyx's Mission Control shows)."""
        key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(self.telnyx_private_key))
        raw = key.public_key().public_bytes_raw()
        return base64.b64encode(raw).decode("ascii")

    def stack_settings(self) -> dict[str, str]:
        """Config field -> value for the stack the simulator calls (VOICECORE_TWILIO_AUTH_TOKEN,
        VOICECORE_TELNYX_PUBLIC_KEY, VOICECORE_PLIVO_AUTH_TOKEN, VOICECORE_VONAGE_SIGNATURE_SECRET,
        VOICECORE_EXOTEL_USERNAME / _PASSWORD); a secret that is not set is left out."""
        settings = {"twilio_auth_token": self.twilio_auth_token, "plivo_auth_token": self.plivo_auth_token,
                    "vonage_signature_secret": self.vonage_signature_secret, "exotel_username": self.exotel_username,
                    "exotel_password": self.exotel_password}
        if self.telnyx_private_key:
            settings["telnyx_public_key"] = self.telnyx_public_key()
        return {name: value for name, value in settings.items() if value}

    def rest_settings(self, api_base_url: str) -> dict[str, str]:
        """Config field -> value that point the stack's hang-up and transfer at the simulator's REST APIs at
        ``api_base_url`` (voicecore/sim/carrier_rest.py) with these credentials. Kept apart from
        stack_settings: a demo's stack has no REST server to reach."""
        return {"twilio_api_base": api_base_url, "telnyx_api_key": self.telnyx_api_key, "telnyx_api_base": api_base_url,
                "plivo_auth_id": self.plivo_auth_id, "plivo_api_base": api_base_url,
                "vonage_application_id": self.vonage_application_id, "vonage_private_key": self.vonage_private_key,
                "vonage_api_base": api_base_url}

    def to_json(self) -> str:
        return json.dumps({name: getattr(self, name) for name in self.__slots__})

    @classmethod
    def from_json(cls, text: str) -> CarrierCredentials:
        values = json.loads(text) if text else {}
        return cls(**{name: str(values[name]) for name in cls.__slots__ if name in values})


# ----- the answer webhook ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WebhookRequest:
    """One HTTP request the carrier sends: ``url`` already carries the query of a GET."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """The ids one simulated call uses in its webhook and its stream (made by the shell)."""

    call_id: str  # Telnyx CallSid/call_control_id, Plivo CallUUID, Vonage uuid, Exotel CallSid
    account_id: str
    stream_id: str
    session_id: str  # Telnyx call_session_id, Vonage conversation_uuid
    from_number: str
    to_number: str


def answer_webhook(carrier: str, base_url: str, ids: CallIdentity, credentials: CarrierCredentials, *,
                   now_s: float, nonce: str, vonage_method: str = "POST", answer_url: str = "",
                   request_uuid: str = "") -> WebhookRequest:
    """The signed answer webhook ``carrier`` sends when the call comes in. ``now_s``: Unix seconds (Telnyx's
    timestamp, Vonage's iat); ``nonce``: Plivo's signature nonce and Vonage's JWT id. ``vonage_method``: the
    application's answer_method (Vonage's default is GET; POST sends the fields as JSON, which the JWT's
    payload_hash then covers, and is what docs/reference/carriers.md#verified asks for). ``answer_url`` and
    ``request_uuid`` (Plivo): a call its Make Call placed, answered by the callee: the answer_url the request
    gave (signed with its query) and the request's id."""
    url = answer_url or base_url.rstrip("/") + ANSWER_PATHS[carrier]
    if carrier == "telnyx":
        return _telnyx_texml_request(url, ids, credentials, now_s, "ringing")
    if carrier == "plivo":
        # Plivo's answer_url: a form POST signed with X-Plivo-Signature-V3 over URL, params and nonce.
        form = {"CallUUID": ids.call_id, "ALegUUID": ids.call_id, "ALegRequestUUID": ids.session_id,
                "From": ids.from_number, "To": ids.to_number, "CallerName": ids.from_number,
                "CallStatus": "ringing", "Direction": "inbound", "Event": "StartApp"}
        if request_uuid:  # an outbound call: answered by the callee, named by the request that placed it
            # (Plivo's answer request names it ALegRequestUUID: the request id its Call API returned)
            form.update(RequestUUID=request_uuid, ALegRequestUUID=request_uuid, CallStatus="in-progress",
                        Direction="outbound")
        return _plivo_form_request(url, form, credentials, nonce)
    if carrier == "vonage":
        # The signed-webhook JWT hashes the body: the JSON fields of a POST, the empty body of a GET.
        fields = {"to": ids.to_number.lstrip("+"), "from": ids.from_number.lstrip("+"), "uuid": ids.call_id,
                  "conversation_uuid": ids.session_id, "region_url": "https://api-eu-1.vonage.com"}
        body = orjson.dumps(fields) if vonage_method == "POST" else b""
        authorization = vonage.sign_webhook(body, credentials.vonage_signature_secret, int(now_s), nonce,
                                            api_key=credentials.vonage_api_key, application_id=ids.account_id)
        if vonage_method == "POST":
            return WebhookRequest("POST", url, (("Content-Type", "application/json"), ("Authorization", authorization)),
                                  body)
        return WebhookRequest("GET", url + "?" + urlencode(fields), (("Authorization", authorization),))
    if carrier == "exotel":
        # The Voicebot applet's dynamic URL: asked per call (a GET with the call's details), Basic auth from
        # the credentials written into the applet's URL.
        query = {"CallSid": ids.call_id, "CallFrom": ids.from_number, "CallTo": ids.to_number, "From": ids.from_number,
                 "To": ids.to_number, "Direction": "incoming", "CallType": "call-attempt"}
        return WebhookRequest("GET", url + "?" + urlencode(query), (("Authorization", _basic(credentials)),))
    raise ValueError(f"no answer webhook for carrier {carrier!r}")


def _telnyx_texml_request(url: str, ids: CallIdentity, credentials: CarrierCredentials, now_s: float,
                          status: str) -> WebhookRequest:
    """A TeXML request for the call (the answer's, a continuation's): a form POST like TwiML's, signed with
    Ed25519 over "timestamp|body"."""
    form = {"AccountSid": ids.account_id, "CallSid": ids.call_id, "CallSidLegacy": ids.call_id,
            "CallSessionId": ids.session_id, "ConnectionId": "1684641123236054244", "From": ids.from_number,
            "To": ids.to_number, "CallStatus": status, "Direction": "inbound"}
    body = urlencode(form).encode("ascii")
    timestamp = str(int(now_s))
    signature = telnyx.sign_webhook(bytes.fromhex(credentials.telnyx_private_key), timestamp, body)
    headers = (("Content-Type", "application/x-www-form-urlencoded"), (telnyx.TIMESTAMP_HEADER, timestamp),
               (telnyx.SIGNATURE_HEADER, signature))
    return WebhookRequest("POST", url, headers, body)


def _plivo_form_request(url: str, form: dict[str, str], credentials: CarrierCredentials, nonce: str) -> WebhookRequest:
    """A form POST signed as Plivo signs its requests: X-Plivo-Signature-V3 over the URL, the form and ``nonce``."""
    body = urlencode(form).encode("ascii")
    signature = plivo.compute_signature_v3(credentials.plivo_auth_token, url, nonce, form, "POST")
    headers = (("Content-Type", "application/x-www-form-urlencoded"), (plivo.SIGNATURE_V3_HEADER, signature),
               (plivo.SIGNATURE_V3_NONCE_HEADER, nonce))
    return WebhookRequest("POST", url, headers, body)


# The carriers whose answer document can name where the call goes when its stream ends (a <Redirect> after the
# stream; Vonage: a synchronous connect's eventUrl): the simulator follows it as the carrier would
# (continuation_request).
CONTINUES = ("telnyx", "plivo", "vonage")


def continuation_request(carrier: str, url: str, ids: CallIdentity, credentials: CarrierCredentials, *,
                         now_s: float, nonce: str, target: StreamTarget | None = None,
                         leg_id: str = "") -> WebhookRequest:
    """The signed request ``carrier`` sends to the ``<Redirect>`` URL that follows a stream, once the stream
    ended: a form POST with the call's fields (the call still up: ``in-progress``), signed as its answer
    webhook is (Telnyx: Ed25519 over ``timestamp|body``; Plivo: V3 over the whole URL, its query included, the
    form and ``nonce``). Vonage: the WebSocket leg's ``disconnected`` event to the synchronous connect's
    ``eventUrl``, JSON with the endpoint's headers of ``target`` (the stream that ended) and ``leg_id`` (that
    leg's uuid; default ``ids.stream_id``), signed with the signed-webhook JWT over the body."""
    if carrier == "vonage":
        if target is None:
            raise ValueError("Vonage's disconnected event names the stream that ended: give its target")
        body = vonage.leg_event(vonage.LEG_DISCONNECTED, leg_id or ids.stream_id, ids.session_id,
                                ids.from_number.lstrip("+"), target.url, target.headers, _iso_timestamp(now_s))
        authorization = vonage.sign_webhook(body, credentials.vonage_signature_secret, int(now_s), nonce,
                                            api_key=credentials.vonage_api_key, application_id=ids.account_id)
        return WebhookRequest("POST", url, (("Content-Type", "application/json"), ("Authorization", authorization)),
                              body)
    if carrier == "telnyx":
        return _telnyx_texml_request(url, ids, credentials, now_s, "in-progress")
    if carrier == "plivo":
        # Plivo's <Redirect> request: From, To, Event=Redirect, CallUUID, CallerName, Direction, CallStatus [redirect]
        form = {"From": ids.from_number, "To": ids.to_number, "Event": "Redirect", "CallUUID": ids.call_id,
                "CallerName": ids.from_number, "Direction": "inbound", "CallStatus": "in-progress"}
        return _plivo_form_request(url, form, credentials, nonce)
    raise ValueError(f"carrier {carrier!r} names no continuation after its stream")


def parse_continuation(carrier: str, body: bytes) -> StreamTarget | None:
    """Read the document a continuation answered: the new stream it starts, or None when it starts none
    (``<Hangup/>``: the call ends). ValueError: not the carrier's XML, or a stream the carrier would refuse.
    Vonage: an empty body is no NCCO (the original NCCO goes on: ours has nothing after the connect, so the call
    completes), an NCCO without a connect to a websocket runs out (the simulator plays none of its actions) and
    the call ends; anything but a JSON array is no NCCO Vonage would run."""
    if carrier == "vonage":
        if not body.strip():
            return None
        try:
            ncco = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ValueError("the event's answer is not JSON (no NCCO)") from None
        if type(ncco) is not list:
            raise ValueError("the event's answer is not an NCCO (a JSON array)")
        if not any(type(action) is dict and action.get("action") == "connect" for action in ncco):
            return None
        return _parse_ncco(body)
    root = _xml(body, "the continuation's answer")
    if root.tag != "Response":
        raise ValueError("the continuation's answer has no <Response>")
    starts_stream = root.find("./Connect/Stream") if carrier == "telnyx" else root.find("./Stream")
    if starts_stream is None:
        return None
    return parse_answer(carrier, body)


def _basic(credentials: CarrierCredentials) -> str:
    pair = f"{credentials.exotel_username}:{credentials.exotel_password}".encode("utf-8")
    return "Basic " + base64.b64encode(pair).decode("ascii")


# ----- following the answer ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """Where the carrier streams and what it carries there, as its answer document said.

    ``url``: the WebSocket URL as given (credentials in it removed into ``basic_auth``); ``parameters``: what
    the carrier hands back on the stream (TeXML ``<Parameter>``s, Plivo ``extraHeaders`` pairs, NCCO
    ``headers``, Exotel URL query parameters); ``encoding`` / ``sample_rate_hz``: the audio asked for;
    ``raw_extra_headers``: Plivo's attribute as written; ``authorization``: the NCCO websocket endpoint's
    ``authorization`` object (Vonage: ``{"type": "vonage"}`` puts the signed-webhook JWT on the upgrade);
    ``problems``: what the carrier would not like (reported, not fatal)."""

    url: str
    parameters: tuple[tuple[str, str], ...] = ()
    encoding: str = ENCODING_PCMU
    sample_rate_hz: int = SAMPLE_RATE_HZ
    raw_extra_headers: str = ""
    basic_auth: str = ""
    headers: Mapping[str, object] = field(default_factory=dict)  # Vonage: the NCCO headers, values as given
    authorization: Mapping[str, object] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    # Where the carrier goes on when the stream ends: the URL of the ``<Redirect>`` that follows the stream
    # (TeXML after ``<Connect>``, Plivo XML after a ``keepCallAlive`` ``<Stream>``; Vonage: a synchronous
    # connect's ``eventUrl``, POST), "" when nothing follows.
    redirect: str = ""


def parse_answer(carrier: str, body: bytes) -> StreamTarget:
    """Read ``carrier``'s answer document. Raises ValueError when it does not start a stream."""
    if carrier == "telnyx":
        return _parse_texml(body)
    if carrier == "plivo":
        return _parse_plivo_xml(body)
    if carrier == "vonage":
        return _parse_ncco(body)
    if carrier == "exotel":
        return _parse_exotel(body)
    raise ValueError(f"no answer document for carrier {carrier!r}")


def _xml(body: bytes, what: str) -> ElementTree.Element:
    try:
        return ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise ValueError(f"{what} is not XML: {exc}") from None


def _parse_texml(body: bytes) -> StreamTarget:
    root = _xml(body, "TeXML")
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
    return StreamTarget(url=stream.get("url", ""), parameters=parameters, encoding=encoding, problems=tuple(problems),
                        redirect=_redirect_after(root, root.find("./Connect")))


def _redirect_after(root: ElementTree.Element, element: ElementTree.Element | None) -> str:
    """The URL of a ``<Redirect>`` that is the verb right after ``element``: what the carrier runs when the
    stream ends. Only a POST redirect is followed (ours are); any other verb there is not modelled (the
    simulated call ends with its stream, as a carrier's would once the document runs out)."""
    children = list(root)
    if element is None or element not in children:
        return ""
    index = children.index(element)
    if index + 1 >= len(children):
        return ""
    following = children[index + 1]
    if following.tag != "Redirect" or (following.get("method") or "POST").upper() != "POST":
        return ""
    return (following.text or "").strip()


def _parse_plivo_xml(body: bytes) -> StreamTarget:
    root = _xml(body, "Plivo XML")
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
    encoding = {plivo.CONTENT_TYPE_MULAW: ENCODING_PCMU, plivo.CONTENT_TYPE_L16: ENCODING_L16}.get(content_type.strip())
    if encoding is None or (encoding == ENCODING_PCMU and rate != SAMPLE_RATE_HZ) or rate not in (8000, 16000):
        raise ValueError("Plivo XML asks for a content type Plivo does not stream")
    raw = stream.get("extraHeaders", "")
    pairs = []
    for item in raw.replace(";", ",").split(","):
        key, separator, value = item.partition("=")
        if separator and key.strip():
            pairs.append((key.strip(), value.strip()))
    # With keepCallAlive the elements after <Stream> run once the stream disconnects [ref]; without it they run
    # at once (and the simulator reports that above), so only a kept-alive stream has a continuation.
    kept_alive = stream.get("keepCallAlive", "false").lower() == "true"
    return StreamTarget(url=(stream.text or "").strip(), parameters=tuple(pairs), encoding=encoding,
                        sample_rate_hz=rate, raw_extra_headers=raw, problems=tuple(problems),
                        redirect=_redirect_after(root, stream) if kept_alive else "")


def _parse_ncco(body: bytes) -> StreamTarget:
    try:
        ncco = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError("the NCCO is not JSON") from None
    if type(ncco) is not list:
        raise ValueError("the NCCO is not a JSON array")
    for action in ncco:
        if type(action) is not dict or action.get("action") != "connect":
            continue
        for endpoint in action.get("endpoint") or ():
            if type(endpoint) is dict and endpoint.get("type") == "websocket" and type(endpoint.get("uri")) is str:
                content_type = endpoint.get("content-type", "")
                rate_text = content_type.partition("rate=")[2] if type(content_type) is str else ""
                if not (content_type.startswith("audio/l16") and rate_text.isdigit()
                        and int(rate_text) in vonage.VONAGE_SAMPLE_RATES_HZ):
                    raise ValueError("the NCCO's websocket content-type is not audio/l16;rate=8000|16000")
                headers = endpoint.get("headers") or {}
                if type(headers) is not dict:
                    raise ValueError("the NCCO's websocket headers are not an object")
                parameters = tuple((key, value if type(value) is str else orjson.dumps(value).decode())
                                   for key, value in headers.items())
                authorization = endpoint.get("authorization") or {}
                if type(authorization) is not dict or authorization.get("type") not in (None, "vonage", "custom"):
                    raise ValueError("the NCCO's websocket authorization is not {\"type\": \"vonage\" | \"custom\"}")
                return StreamTarget(url=endpoint["uri"], parameters=parameters, encoding=ENCODING_L16,
                                    sample_rate_hz=int(rate_text), headers=dict(headers), authorization=authorization,
                                    redirect=_synchronous_event_url(action))
    raise ValueError("the NCCO has no connect action to a websocket endpoint")


def _synchronous_event_url(action: Mapping[str, object]) -> str:
    """Where Vonage asks what to do when the connect's WebSocket ends with the call still up: its ``eventUrl``
    (the first of the array), only for ``"eventType": "synchronous"`` ("to receive this event, you must include
    the eventType: synchronous") and a POST (ours; the default ``eventMethod``); else "" (the NCCO goes on)."""
    urls = action.get("eventUrl")
    if action.get("eventType") != vonage.EVENT_TYPE_SYNCHRONOUS or type(urls) is not list or not urls:
        return ""
    if str(action.get("eventMethod") or "POST").upper() != "POST" or type(urls[0]) is not str:
        return ""
    return urls[0]


def _iso_timestamp(now_s: float) -> str:
    """Vonage's event ``timestamp``: ISO 8601 in UTC with milliseconds ("2020-03-31T12:00:00.000Z"), by arithmetic
    (a pure core imports no datetime)."""
    whole_s = int(now_s // 1)
    days, second_of_day = divmod(whole_s, 86_400)
    year, month, day = _civil_from_days(days)
    millis = min(int((now_s - whole_s) * 1000), 999)
    return (f"{year:04d}-{month:02d}-{day:02d}T{second_of_day // 3600:02d}:{second_of_day // 60 % 60:02d}:"
            f"{second_of_day % 60:02d}.{millis:03d}Z")


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """The Gregorian (year, month, day) ``days`` after 1970-01-01 (H. Hinnant's days_from_civil, inverted)."""
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153  # March is 0
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return year_of_era + era * 400 + (1 if month <= 2 else 0), month, day


def _parse_exotel(body: bytes) -> StreamTarget:
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError("the dynamic-URL answer is not JSON") from None
    url = answer.get("url") if type(answer) is dict else None
    if type(url) is not str or not url.startswith(("ws://", "wss://")):
        raise ValueError("the dynamic-URL answer has no ws(s) \"url\"")
    parts = urlsplit(url)
    basic = ""
    if parts.username is not None:
        # wss://KEY:TOKEN@host/...: Exotel sends the pair as Basic auth on the upgrade [applet], decoded from
        # the URL's percent-encoding as any HTTP client does (RFC 3986 section 3.2.1).
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode("utf-8")
        basic = "Basic " + base64.b64encode(pair).decode("ascii")
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        url = urlunsplit(parts._replace(netloc=netloc))
    query = parse_qsl(parts.query, keep_blank_values=True)
    rate = SAMPLE_RATE_HZ
    parameters = []
    for key, value in query:
        if key == _EXOTEL_RATE_KEY:
            if not value.isdigit() or int(value) not in exotel.SAMPLE_RATES_HZ[ENCODING_L16]:
                raise ValueError("the stream URL's sample-rate is not 8000, 16000 or 24000")
            rate = int(value)
        else:
            parameters.append((key, value))
    problems = ()
    if len(parameters) > exotel.MAX_CUSTOM_PARAMETERS:
        problems = (f"the stream URL carries {len(parameters)} custom parameters; Exotel passes at most "
                    f"{exotel.MAX_CUSTOM_PARAMETERS}",)
    return StreamTarget(url=url, parameters=tuple(parameters), encoding=ENCODING_L16, sample_rate_hz=rate,
                        basic_auth=basic, problems=problems)


def stream_headers(carrier: str, target: StreamTarget, credentials: CarrierCredentials, *, nonce: str,
                   now_s: float) -> dict[str, str]:
    """The extra headers of the carrier's WebSocket upgrade to ``target.url``: exactly what the carrier puts
    there, no more. ``nonce``: Plivo's signature nonce and Vonage's JWT id; ``now_s``: Vonage's iat."""
    if carrier == "plivo":
        # Plivo signs every stream upgrade: a GET of the stream URL with ws(s):// read as http:// (plivo.sign_upgrade).
        return {plivo.SIGNATURE_V3_HEADER: plivo.sign_upgrade(credentials.plivo_auth_token, target.url, nonce),
                plivo.SIGNATURE_V3_NONCE_HEADER: nonce}
    if carrier == "vonage":
        # Only when the NCCO's endpoint asks: "vonage", the signed-webhook JWT (of no body); "custom", its value.
        kind = target.authorization.get("type")
        if kind == vonage.AUTHORIZATION_VONAGE:
            return {"Authorization": vonage.sign_webhook(b"", credentials.vonage_signature_secret, int(now_s), nonce,
                                                         api_key=credentials.vonage_api_key)}
        if kind == "custom":
            return {"Authorization": str(target.authorization.get("value", ""))}
        return {}
    if carrier == "exotel" and target.basic_auth:
        return {"Authorization": target.basic_auth}  # only what the URL carried (wss://user:pass@...)
    return {}  # Telnyx signs nothing on the stream


# ----- the adapters ------------------------------------------------------------------------------------


class ModeCall(PlayoutCore):
    """What the four adapters share: the outbound audio path into the core (carrier encoding -> mu-law frames,
    ``exact_audio`` telling whether that path is bit-exact) and the interface the shell drives (the Twilio
    adapter's, but stop_messages for its stop_message: opening_messages, tick_send, send_dtmf, receive_fast,
    receive, messages_to_send). Messages are ``str`` (a text frame) or ``bytes`` (a binary frame)."""

    carrier = ""
    BINARY_MESSAGES = False  # some messages it sends are binary frames (Vonage's audio)

    def __init__(self, call_sid: str, caller_audio, lead_frames: int, encoding: str, sample_rate_hz: int, *,
                 play_phase_ms: float | None, keep_audio: bool) -> None:
        super().__init__(caller_audio, lead_frames, play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self.call_sid = call_sid
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        # One transcoder each way, so the caller's and the measured direction keep separate state.
        self._caller_codec = EdgeTranscoder(encoding, sample_rate_hz)
        self._measure_codec = EdgeTranscoder(encoding, sample_rate_hz)
        self._framer = Framer(FRAME_BYTES)
        # mu-law passes untouched and L16 at 8 kHz converts sample by sample: the gateway's frames come back
        # byte for byte (callreport's canonical form). A-law and resampled L16 do not (audio_match.py).
        self.exact_audio = encoding == ENCODING_PCMU or (encoding == ENCODING_L16 and sample_rate_hz == SAMPLE_RATE_HZ)
        # The gateway's transcoder delays what it sends by this much (its output starts with that much silence),
        # so a tag's played time holds that much of the audio before it (PlayoutCore.played_ms_of_tag).
        self.outbound_delay_ms = self._caller_codec.delay_ms
        # An A-law stream's audio as it came, byte for byte (keep_audio): the core measures it as mu-law, which
        # cannot tell A-law passed through from the model untouched from A-law the gateway transcoded.
        self.alaw_received: bytearray | None = bytearray() if keep_audio and encoding == ENCODING_PCMA else None

    def _caller_payload(self, n: int) -> bytes:
        """Caller frame ``n`` in the carrier's encoding."""
        self.metrics.media_sent += 1
        return self._caller_codec.from_ulaw(self._caller_frame(n))

    def _audio_arrived(self, payload: bytes, now_ms: float) -> None:
        """Audio in the carrier's encoding reached the carrier: as 20 ms mu-law frames into the core."""
        self._advance_play(now_ms)
        if self.alaw_received is not None:
            self.alaw_received += payload
        ulaw = self._measure_codec.to_ulaw(payload)
        for frame in self._framer.push(ulaw):
            self._accept_frame(frame, now_ms)

    def _cleared_audio_path(self) -> None:
        """A clear threw the queued audio away: the transcoder's held-back samples and the framer's
        remainder belonged to it (the next response must not start with the tail of the one dropped)."""
        if not self.exact_audio:
            self._measure_codec = EdgeTranscoder(self.encoding, self.sample_rate_hz)
        self._framer.take_remainder()

    @abc.abstractmethod
    def stop_messages(self, now_ms: float | None = None) -> list[str | bytes]:
        """The carrier's last messages (its ``stop``, and caller audio still held back): afterwards
        tick_send() returns nothing. ``now_ms``: when the call ends (see PlayoutCore.stopped_at_ms)."""

    def _stop(self, now_ms: float | None) -> None:
        self._require_open()
        self._stopped = True
        if now_ms is not None:
            self.stopped_at_ms = now_ms

    def release_wire_state(self) -> None:
        """Drop what only the live call needs (codecs, carrier sides, clips) before a result is stored."""
        self._clips = []
        self._queue.clear()
        self._outbox = []
        self._caller_codec = self._measure_codec = None


class TelnyxCall(ModeCall):
    """A Telnyx media stream (TeXML ``<Connect><Stream bidirectionalMode="rtp">``)."""

    carrier = "telnyx"

    def __init__(self, call_control_id: str, stream_id: str, user_id: str,
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, custom_parameters: Sequence[tuple[str, str]] = (),
                 encoding: str = ENCODING_PCMU, call_session_id: str | None = None, from_number: str | None = None,
                 to_number: str | None = None, play_phase_ms: float | None = None, keep_audio: bool = True,
                 jitter_probability: float = 0.0, jitter_seed: int = 0) -> None:
        if encoding not in (ENCODING_PCMU, ENCODING_PCMA):
            raise ValueError("a Telnyx stream here is PCMU or PCMA")
        if not 0.0 <= jitter_probability <= 1.0:
            raise ValueError("jitter_probability must be from 0 to 1")
        super().__init__(call_control_id, caller_audio, lead_frames, encoding, SAMPLE_RATE_HZ,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        codec = "PCMU" if encoding == ENCODING_PCMU else "PCMA"
        self.stream_id = stream_id
        kwargs = dict(encoding=codec, call_session_id=call_session_id, from_number=from_number, to_number=to_number,
                      custom_parameters=dict(custom_parameters))
        self._writer = telnyx.TelnyxCarrierSide(stream_id, call_control_id, user_id, **kwargs)
        self._reader = telnyx.TelnyxCarrierSide(stream_id, call_control_id, user_id, **kwargs)
        self._media_head = telnyx.MEDIA_PREFIX
        self._media_tail = telnyx.MEDIA_SUFFIX
        self._mark_head = telnyx.MARK_PREFIX + b'"'
        self._mark_tail = b'"' + telnyx.MARK_SUFFIX
        self.jitter_probability = jitter_probability
        self._jitter = np.random.Generator(np.random.PCG64(jitter_seed)) if jitter_probability else None
        self._held: str | None = None  # a caller frame held back to go out after the next one
        self.frames_reordered = 0

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return [self._writer.connected(), self._writer.start()]

    def _media_message(self, n: int) -> str:
        return self._writer.media(self._caller_payload(n))

    def tick_send(self, now_ms: float) -> list[str]:
        messages = super().tick_send(now_ms)
        if self._jitter is None or not messages:
            return messages
        out = []
        for message in messages:
            if self._held is not None:
                out += [message, self._held]  # the held frame arrives after its successor
                self._held = None
                self.frames_reordered += 1
            elif self._jitter.random() < self.jitter_probability:
                self._held = message
            else:
                out.append(message)
        return out

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._writer.dtmf(digit)

    def reattach(self, stream_id: str, custom_parameters: Sequence[tuple[str, str]], lost_at_ms: float,
                 now_ms: float) -> list[str]:
        """The same call on a new stream (the TeXML its ``<Redirect>`` answered after the old stream dropped):
        its ``connected`` and ``start`` with the new stream id and ``<Parameter>``s."""
        self._new_stream(lost_at_ms, now_ms)
        self._held = None  # a frame held back belonged to the old stream
        self._cleared_audio_path()
        self.stream_id = stream_id
        w = self._writer
        kwargs = dict(encoding=w.encoding, call_session_id=w.call_session_id, from_number=w.from_number,
                      to_number=w.to_number, custom_parameters=dict(custom_parameters))
        self._writer = telnyx.TelnyxCarrierSide(stream_id, w.call_control_id, w.user_id, **kwargs)
        self._reader = telnyx.TelnyxCarrierSide(stream_id, w.call_control_id, w.user_id, **kwargs)
        return self.opening_messages()

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        held, self._held = self._held, None
        self._stop(now_ms)
        # a frame still held goes out before the stop (it was due before it)
        return ([held] if held is not None else []) + [self._writer.stop()]

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        """The gateway's own ``media`` and ``mark`` bytes (telnyx.TelnyxOutboundEncoder's); anything else
        returns False with nothing changed."""
        head = self._media_head
        if data.startswith(head) and data.endswith(self._media_tail):
            try:
                payload = binascii.a2b_base64(data[len(head):-len(self._media_tail)], strict_mode=True)
            except (binascii.Error, ValueError):
                return False
            if not payload or len(payload) % FRAME_BYTES:
                return False
            self._audio_arrived(payload, now_ms)
            return True
        head = self._mark_head
        if data.startswith(head) and data.endswith(self._mark_tail):
            name = data[len(head):-len(self._mark_tail)]
            if PLAIN_NAME_BYTES.fullmatch(name) is None:
                return False
            self.mark_arrived(name.decode("ascii"), now_ms)
            return True
        return False

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        if not isinstance(data, str):
            self._reject(self._reader.receive_binary(data), "binary frame")
            return
        sent = self._reader.receive_text(data)
        # The reader's own playout queue is never played (the core times echoes): keep it empty.
        self._reader.advance(int(self._reader.queued_ms) + FRAME_MS)
        self._reader.data_to_send()
        if isinstance(sent, telnyx.SentMedia):
            if len(sent.payload) % FRAME_BYTES:
                self._protocol_error("media: payload is not whole 20 ms frames")
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, telnyx.SentMark):
            self.mark_arrived(sent.name, now_ms)
        elif isinstance(sent, telnyx.SentClear):
            self.clear_arrived(now_ms)
        else:
            self._reject(sent, f"rejected: {sent.title}")

    def _reject(self, rejected: telnyx.Rejected, reason: str) -> None:
        # Telnyx answers a message it refuses with an `error` frame [guide].
        self._protocol_error(reason)
        self._outbox.append(self._writer.error(rejected.code))

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        self._outbox.append(self._writer.mark_echo(name))

    def _cleared(self, now_ms: float) -> None:
        self._cleared_audio_path()

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._writer = self._reader = self._jitter = None


class PlivoCall(ModeCall):
    """A Plivo bidirectional audio stream (``<Stream bidirectional="true">``)."""

    carrier = "plivo"
    ECHOES_MARKS_ON_CLEAR = False  # clearAudio drops pending checkpoints unechoed [ref]

    def __init__(self, call_uuid: str, stream_id: str, account_id: str,
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, extra_headers: str = "", encoding: str = ENCODING_PCMU,
                 sample_rate_hz: int = SAMPLE_RATE_HZ, play_phase_ms: float | None = None,
                 keep_audio: bool = True, playout_stall_ms: int = 0, playout_stall_every_ms: int = 0) -> None:
        super().__init__(call_uuid, caller_audio, lead_frames, encoding, sample_rate_hz,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self.set_playout_stall(playout_stall_ms, playout_stall_every_ms)
        content_type = plivo.CONTENT_TYPE_MULAW if encoding == ENCODING_PCMU else plivo.CONTENT_TYPE_L16
        self.stream_id = stream_id
        args = (stream_id, call_uuid, account_id, content_type, sample_rate_hz, extra_headers)
        self._writer = plivo.PlivoCarrierSide(*args)
        self._reader = plivo.PlivoCarrierSide(*args)
        encoder = plivo.PlivoOutboundEncoder(stream_id, content_type, sample_rate_hz)
        self._media_head = encoder.media_prefix
        self._media_tail = encoder.media_suffix
        self._mark_head = encoder.mark_prefix + b'"'
        self._mark_tail = b'"}'
        self._frame_bytes = EdgeTranscoder(encoding, sample_rate_hz).carrier_frame_bytes

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return [self._writer.start()]  # Plivo sends no `connected` [ref]

    def reattach(self, stream_id: str, extra_headers: str, lost_at_ms: float, now_ms: float) -> list[str]:
        """The same call on a new stream (the XML its ``<Redirect>`` answered after the old stream dropped): its
        ``start`` with the new stream id and ``extraHeaders``."""
        self._new_stream(lost_at_ms, now_ms)
        self._cleared_audio_path()
        w = self._writer
        self.stream_id = stream_id
        args = (stream_id, w.call_id, w.account_id, w.content_type, w.sample_rate_hz, extra_headers)
        self._writer = plivo.PlivoCarrierSide(*args)
        self._reader = plivo.PlivoCarrierSide(*args)
        encoder = plivo.PlivoOutboundEncoder(stream_id, w.content_type, w.sample_rate_hz)
        self._media_head = encoder.media_prefix
        self._mark_head = encoder.mark_prefix + b'"'
        return self.opening_messages()

    def _media_message(self, n: int) -> str:
        return self._writer.media(self._caller_payload(n))

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._writer.dtmf(digit)

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        self._stop(now_ms)
        return [self._writer.stop()]

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        """The gateway's own ``playAudio`` and ``checkpoint`` bytes (plivo.PlivoOutboundEncoder's)."""
        head = self._media_head
        if data.startswith(head) and data.endswith(self._media_tail):
            try:
                payload = binascii.a2b_base64(data[len(head):-len(self._media_tail)], strict_mode=True)
            except (binascii.Error, ValueError):
                return False
            if not payload or len(payload) % self._frame_bytes:
                return False
            self._audio_arrived(payload, now_ms)
            return True
        head = self._mark_head
        if data.startswith(head) and data.endswith(self._mark_tail):
            name = data[len(head):-len(self._mark_tail)]
            if PLAIN_NAME_BYTES.fullmatch(name) is None:
                return False
            self.mark_arrived(name.decode("ascii"), now_ms)
            return True
        return False

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        if not isinstance(data, str):
            self._protocol_error("binary frame")
            return
        sent = self._reader.receive_text(data)
        if self._reader.queued_bytes > 1 << 20:
            # The reader's queue is never played (the core times echoes); start a fresh reader before it grows.
            self._reader = plivo.PlivoCarrierSide(self._reader.stream_id, self._reader.call_id, self._reader.account_id,
                                                  self._reader.content_type, self._reader.sample_rate_hz)
        if isinstance(sent, plivo.PlayAudio):
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, plivo.Checkpoint):
            self.mark_arrived(sent.name, now_ms)
        elif isinstance(sent, plivo.ClearAudio):
            self.clear_arrived(now_ms)
        else:
            self._protocol_error(f"rejected: {sent.reason}")

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        self._outbox.append(self._writer.played_stream(name))

    def _cleared(self, now_ms: float) -> None:
        self._cleared_audio_path()
        self._outbox.append(self._writer.cleared_audio())

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._writer = self._reader = None


class VonageCall(ModeCall):
    """A Vonage Voice API WebSocket (NCCO ``connect`` to a ``websocket`` endpoint). ``headers``: the NCCO
    endpoint's headers, echoed in ``websocket:connected``; ``call_sid`` is the call's uuid."""

    carrier = "vonage"
    BINARY_MESSAGES = True
    ECHOES_MARKS_ON_CLEAR = False  # a clear drops the queued audio and the notifies behind it

    def __init__(self, call_uuid: str, headers: Mapping[str, object],
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, sample_rate_hz: int = vonage.DEFAULT_SAMPLE_RATE_HZ,
                 play_phase_ms: float | None = None, keep_audio: bool = True) -> None:
        super().__init__(call_uuid, caller_audio, lead_frames, ENCODING_L16, sample_rate_hz,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self._side = vonage.VonageCarrierSide(headers, sample_rate_hz)
        self._notify_payloads: dict[str, bytes] = {}  # a pending notify's payload, echoed verbatim

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return [self._side.connected().data.decode("utf-8")]

    def _media_message(self, n: int) -> bytes:
        return self._side.audio(self._caller_payload(n)).data

    def reattach(self, headers: Mapping[str, object], lost_at_ms: float, now_ms: float) -> list[str]:
        """The same call on a new stream (the NCCO the ``disconnected`` event's answer connected after the old
        socket ended): its ``websocket:connected`` with the new NCCO's headers."""
        self._new_stream(lost_at_ms, now_ms)
        self._notify_payloads.clear()  # the old socket's pending notifies went with it
        self._cleared_audio_path()
        self._side = vonage.VonageCarrierSide(headers, self.sample_rate_hz)
        self._opened = False
        return self.opening_messages()

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._side.dtmf(digit).data.decode("utf-8")

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        """Vonage has no ``stop``: the call ends by the socket closing."""
        self._stop(now_ms)
        return []

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        return False  # audio is binary (always the plain path, which is short); control is rare

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        binary = not isinstance(data, str)
        sent = self._side.receive(data, binary)
        if isinstance(sent, vonage.SentAudio):
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, vonage.SentNotify):
            name = sent.mark if sent.mark is not None else ""
            self._notify_payloads[name] = sent.payload_json
            self.mark_arrived(name, now_ms)
        elif isinstance(sent, vonage.SentClear):
            self.clear_arrived(now_ms)
        else:
            self._protocol_error(f"rejected: {sent.reason}")

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        payload = self._notify_payloads.pop(name, None) or orjson.dumps({"mark": name})
        self._outbox.append(self._side.notify_echo(vonage.SentNotify(payload, name)).data.decode("utf-8"))

    def _cleared(self, now_ms: float) -> None:
        self._notify_payloads.clear()  # every notify not yet echoed was pending, and is dropped
        self._cleared_audio_path()
        self._outbox.append(self._side.cleared().data.decode("utf-8"))

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._side = None


class ExotelCall(ModeCall):
    """An Exotel Voicebot stream. Caller audio goes out in ``EXOTEL_MEDIA_FRAMES``-frame ``media`` messages."""

    carrier = "exotel"

    def __init__(self, call_sid: str, stream_sid: str, account_sid: str,
                 caller_audio: bytes | Sequence[tuple[int, bytes]] | Sequence[Utterance] = b"",
                 lead_frames: int = DEFAULT_LEAD_FRAMES, *, custom_parameters: Sequence[tuple[str, str]] = (),
                 encoding: str = ENCODING_L16, sample_rate_hz: int = SAMPLE_RATE_HZ, from_number: str = "",
                 to_number: str = "", play_phase_ms: float | None = None, keep_audio: bool = True) -> None:
        super().__init__(call_sid, caller_audio, lead_frames, encoding, sample_rate_hz,
                         play_phase_ms=play_phase_ms, keep_audio=keep_audio)
        self.stream_sid = stream_sid
        self._side = exotel.ExotelCarrierSide(stream_sid, call_sid, account_sid, encoding=encoding,
                                              sample_rate_hz=sample_rate_hz, custom_parameters=custom_parameters,
                                              from_number=from_number, to_number=to_number)
        self._caller_batch: list[bytes] = []

    def opening_messages(self) -> list[str]:
        if self._opened:
            raise RuntimeError("opening_messages() called twice")
        self._opened = True
        return self._side.opening_messages()

    def _media_message(self, n: int) -> str | None:
        self._caller_batch.append(self._caller_payload(n))
        if len(self._caller_batch) < EXOTEL_MEDIA_FRAMES:
            return None
        return self._flush_caller_batch()

    def _flush_caller_batch(self) -> str:
        payload, self._caller_batch = b"".join(self._caller_batch), []
        return self._side.media(payload)

    def tick_send(self, now_ms: float) -> list[str]:
        return [message for message in super().tick_send(now_ms) if message is not None]

    def send_dtmf(self, digit: str) -> str:
        self._require_open()
        self.metrics.dtmf_sent += 1
        return self._side.dtmf(digit)

    def stop_messages(self, now_ms: float | None = None) -> list[str]:
        self._stop(now_ms)
        # caller audio still batched goes out before the stop (it was due before it)
        batched = [self._flush_caller_batch()] if self._caller_batch else []
        return batched + [self._side.stop()]

    def receive_fast(self, data: bytes, now_ms: float) -> bool:
        return False  # chunks come every 100 ms or more and marks with them: the carrier side reads them

    def receive(self, data: str | bytes, now_ms: float) -> None:
        self._advance_play(now_ms)
        sent = self._side.receive_binary(data) if not isinstance(data, str) else self._side.receive_text(data)
        if isinstance(sent, exotel.SentMedia):
            self._audio_arrived(sent.payload, now_ms)
        elif isinstance(sent, exotel.SentMark):
            self.mark_arrived(sent.name, now_ms)
        elif isinstance(sent, exotel.SentClear):
            self.clear_arrived(now_ms)
        else:
            self._protocol_error(f"rejected: {sent.reason}")

    def _echo(self, name: str, is_end: bool) -> None:
        self._echo_ended_spurt(is_end)
        self._outbox.append(self._side.mark_echo(name))

    def _cleared(self, now_ms: float) -> None:
        self._cleared_audio_path()

    def release_wire_state(self) -> None:
        super().release_wire_state()
        self._side = None


def stable_seed(text: str) -> int:
    """A 64-bit seed from ``text`` (a call id): the same call jitters the same way."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
