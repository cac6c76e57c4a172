"""Gateway decisions for the carriers served beside Twilio (Telnyx, Plivo, Vonage, Exotel), without I/O.

Owns: which carriers are served (a carrier is served when its secret is configured), their routes, the
check of an answer webhook (its signature or credentials, then the call id the session token is tied to),
the answer document that points the carrier at our stream (with the single-use session token where that
carrier carries it to the stream), and for a stream: its protocol object, where its token is, the ids its
call gets in the arena, how the pacer writes its messages (final templates when the carrier takes the
pacer's mu-law frames as they are, raw entries for the carrier edge otherwise) and the edge itself.

Must not know: sockets, the clock (``now_s`` comes in), randomness (the token comes in), the arena, rings.
Each carrier's wire format, signatures and answer documents are its module's in voicecore/carriers/; this
module only picks and combines them. Twilio's path is workers/gateway/main.py's own and does not come
through here.

The rules, per carrier (docs/reference/carriers.md says the same for operators):

==========  ===============================  ===================================  ==========================
carrier     answer webhook (checked by)      call id the token is tied to         token reaches the stream in
==========  ===============================  ===================================  ==========================
Telnyx      POST /telnyx/voice, form         ``CallSid`` (TeXML: the call's       ``start.custom_parameters``
            (Ed25519 telnyx-signature-       call_control_id, which the stream's  (a TeXML ``<Parameter>``)
            ed25519 over timestamp|body)     ``start`` carries)
Plivo       POST /plivo/voice, form          ``CallUUID`` (the stream's           ``start.extra_headers``
            (X-Plivo-Signature-V3 + nonce    ``start.callId``)                    (``extraHeaders``)
            over URL and form)
Vonage      GET|POST /vonage/answer, query   ``uuid`` (we put it in the NCCO's    ``websocket:connected``
            or JSON (signed-webhook JWT,     ``call_id`` header)                  (the NCCO's headers)
            payload_hash of the body)
Exotel      GET|POST /exotel/voice, query    ``CallSid`` when the request has     ``start.custom_parameters``
            or form (Basic auth)             one; else the token is tied to no    (the URL's query), or the
                                             call (single use and TTL only)       upgrade URL's query
==========  ===============================  ===================================  ==========================

``POST /vonage/event`` is checked like the answer and answered 204. A refused request gets a status and a
short fixed reason, never an echo of the request.

The stream's WebSocket upgrade is checked too, before the socket is accepted, where the carrier puts a
credential on it (``check_upgrade``; each module cites the carrier's document):

==========  =================================================================================
Telnyx      nothing: Telnyx signs no stream connection (the session token alone admits it)
Plivo       ``X-Plivo-Signature-V3`` + nonce over a GET of the stream URL (ws(s):// read as http://)
Vonage      the signed-webhook JWT (``Authorization: Bearer``), which our NCCO asks for with
            ``"authorization": {"type": "vonage"}``; its age, not its payload_hash (no body)
Exotel      Basic auth with the configured credentials, which our dynamic-URL answer writes into
            the wss URL (``wss://user:password@host/...``)
==========  =================================================================================

A missing or failing credential: 403; a checked header sent twice: 400. The session token is checked at
``start`` as before, whatever the upgrade carried.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

import orjson

from voicecore.carriers.exotel import protocol as exotel
from voicecore.carriers.vonage import protocol as vonage
from voicecore.carriers.plivo import protocol as plivo
from voicecore.carriers.plivo import rest as plivo_rest
from voicecore.carriers.telnyx import protocol as telnyx
from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.edge import BatchedSink, CarrierEdge, FrameSink
from voicecore.carriers.events import ENCODING_PCMA, ENCODING_PCMU, StreamStarted
from voicecore.carriers.wire import MAX_MARK_NAME_BYTES, RAW, WireTemplates
from voicecore.timing import FRAME_BYTES, FRAME_MS, SAMPLE_RATE_HZ
from voicecore.carriers.webhook import WebhookError, parse_form

__all__ = [
    "ANSWER",
    "ANY_CALL",
    "CARRIERS",
    "EVENT",
    "EXOTEL",
    "PLIVO",
    "SESSION_TOKEN",
    "TELNYX",
    "TRANSFER",
    "VONAGE",
    "AnswerRequest",
    "CallIds",
    "CarrierSettings",
    "EchoBoundedBacklog",
    "Refusal",
    "Route",
    "answer_document",
    "arena_encoding",
    "arena_id",
    "backlog_max_frames",
    "check_upgrade",
    "check_webhook",
    "final_templates_fit",
    "new_edge",
    "new_stream_protocol",
    "pacer_lead_ms",
    "routes",
    "session_token",
    "stream_id",
    "stream_paths",
    "stream_url_bases",
    "token_fits_call",
    "upgrade_headers",
    "wire_templates",
]

TELNYX = "telnyx"
PLIVO = "plivo"
VONAGE = "vonage"
EXOTEL = "exotel"
CARRIERS = (TELNYX, PLIVO, VONAGE, EXOTEL)

SESSION_TOKEN = "session_token"  # the parameter / header name, as Twilio's <Parameter> (webhook.py)
ANSWER = "answer"
EVENT = "event"
TRANSFER = "transfer"  # Plivo's fetch of a transfer's aleg_url (voicecore/carriers/plivo/rest.py)

# A webhook's call id, which the session token is tied to: what the arena takes as an id (voicecore/shm/
# arena.py: ids end up in file names and logs) and a signed token carries (voicecore/stream_tokens.py: 1-64
# ASCII bytes). Every carrier's call ids fit (Telnyx "v3:..." call_control_ids, Plivo and Vonage UUIDs,
# Exotel's 32 hex digits).
_CALL_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_ARENA_ID = _CALL_ID
# A token tied to no call (an Exotel request that named none): accepted for any call id; "*" is never one.
ANY_CALL = "*"
_B64_FRAME_CHARS = (FRAME_BYTES + 2) // 3 * 4
EXOTEL_SAMPLE_RATE_HZ = 8000  # asked for in the stream URL: mu-law or L16 at 8 kHz, no resampling
# What a call whose edge batches frames into chunks keeps in the carrier's buffer beyond one chunk: the chunk
# carrying the next audio leaves the edge only once its last frame came from the pacer, so the carrier must
# still hold this much when it lands (the pacer's ticks, the gateway's doorbell, the network's jitter).
CHUNK_LEAD_MARGIN_MS = 100


@dataclass(frozen=True, slots=True)
class CarrierSettings:
    """The carriers' secrets and options (voicecore/config.py); an empty secret: that carrier is not served."""

    telnyx_public_key: str = ""
    plivo_auth_token: str = ""
    vonage_signature_secret: str = ""
    vonage_sample_rate_hz: int = vonage.DEFAULT_SAMPLE_RATE_HZ
    exotel_username: str = ""
    exotel_password: str = ""
    telnyx_codec: str = "PCMU"  # the law the TeXML answer asks Telnyx to stream both ways (PCMU or PCMA)

    @classmethod
    def from_config(cls, config) -> CarrierSettings:
        return cls(config.telnyx_public_key, config.plivo_auth_token, config.vonage_signature_secret,
                   config.vonage_sample_rate_hz, config.exotel_username, config.exotel_password,
                   telnyx_codec=config.telnyx_codec)

    def enabled(self) -> tuple[str, ...]:
        served = {TELNYX: bool(self.telnyx_public_key), PLIVO: bool(self.plivo_auth_token),
                  VONAGE: bool(self.vonage_signature_secret),
                  EXOTEL: bool(self.exotel_username and self.exotel_password)}
        return tuple(carrier for carrier in CARRIERS if served[carrier])


@dataclass(frozen=True, slots=True)
class Route:
    carrier: str
    kind: str  # ANSWER or EVENT
    methods: tuple[str, ...]


_ROUTES: dict[str, Route] = {
    "/telnyx/voice": Route(TELNYX, ANSWER, ("POST",)),
    "/plivo/voice": Route(PLIVO, ANSWER, ("POST",)),
    plivo_rest.TRANSFER_PATH: Route(PLIVO, TRANSFER, ("GET", "POST")),
    "/vonage/answer": Route(VONAGE, ANSWER, ("GET", "POST")),
    "/vonage/event": Route(VONAGE, EVENT, ("POST",)),
    "/exotel/voice": Route(EXOTEL, ANSWER, ("GET", "POST")),
}
_STREAM_PATHS = {f"/{carrier}/stream": carrier for carrier in CARRIERS}


def routes(enabled: tuple[str, ...]) -> dict[str, Route]:
    """The HTTP routes of the served carriers (the others' paths are 404 like any unknown path)."""
    return {path: route for path, route in _ROUTES.items() if route.carrier in enabled}


def stream_paths(enabled: tuple[str, ...]) -> dict[str, str]:
    """WebSocket path -> carrier, for the served carriers."""
    return {path: carrier for path, carrier in _STREAM_PATHS.items() if carrier in enabled}


# --- answer webhooks -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    """A checked webhook. ``call_id``: the call the session token is tied to (``ANY_CALL`` when the request
    names none: Exotel's dynamic-URL request may not; "" for a Vonage event)."""

    carrier: str
    kind: str
    call_id: str


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int  # 400 unreadable, 403 not signed by the carrier
    reason: str  # short fixed text, for the log line and the body


def _header(headers: Mapping[str, str], name: str) -> str | None:
    return headers.get(name)


def _call_id(value: object) -> str | None:
    return value if isinstance(value, str) and _CALL_ID.fullmatch(value) else None


def _query(target: str) -> dict[str, str]:
    try:
        return dict(parse_qsl(urlsplit(target).query, keep_blank_values=True, strict_parsing=False,
                              encoding="utf-8", errors="strict", max_num_fields=200))
    except ValueError:
        raise WebhookError("malformed query") from None


def _json_object(body: bytes) -> dict:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise WebhookError("body is not JSON") from None
    if type(value) is not dict:
        raise WebhookError("body is not a JSON object")
    return value


def check_webhook(route: Route, method: str, target: str, headers: Mapping[str, str], body: bytes,
                  settings: CarrierSettings, url: str, now_s: float) -> AnswerRequest | Refusal:
    """Check one request to a carrier route. ``headers``: lower-case names; ``target``: path and query as
    received; ``url``: the public URL the carrier called (our base URL + ``target``, which Plivo signs).

    The signature (or credentials) first, then the fields: an unsigned request learns nothing of what we
    would have read from it. A configured secret our own checks cannot use (``ValueError`` from the
    carrier module) is our misuse and propagates: the shell logs it and answers 500."""
    carrier = route.carrier
    try:
        if carrier == TELNYX:
            if not telnyx.verify_webhook(settings.telnyx_public_key, _header(headers, telnyx.SIGNATURE_HEADER) or "",
                                         _header(headers, telnyx.TIMESTAMP_HEADER) or "", body, now_s):
                return Refusal(403, "bad telnyx-signature-ed25519")
            form = parse_form(body)
            call_id = _call_id(form.get("CallSid") or form.get("CallControlId"))
        elif carrier == PLIVO:
            form = parse_form(body)
            if not plivo.validate_signature_v3(settings.plivo_auth_token, url,
                                               _header(headers, plivo.SIGNATURE_V3_NONCE_HEADER.lower()),
                                               _header(headers, plivo.SIGNATURE_V3_HEADER.lower()), form, method):
                return Refusal(403, "bad X-Plivo-Signature-V3")
            call_id = _call_id(form.get("CallUUID"))
        elif carrier == VONAGE:
            # A GET carries no body: its payload_hash is of the empty body [unverified]; prefer POST.
            if not vonage.verify_signed_webhook(_header(headers, "authorization"), body,
                                                settings.vonage_signature_secret, now_s):
                return Refusal(403, "bad signed-webhook JWT")
            if route.kind == EVENT:
                return AnswerRequest(carrier, EVENT, "")
            fields = _query(target) if method == "GET" else _json_object(body)
            call_id = _call_id(fields.get("uuid"))
        else:
            if not exotel.check_basic_auth(_header(headers, "authorization"), settings.exotel_username,
                                           settings.exotel_password):
                return Refusal(403, "bad Basic credentials")
            fields = _query(target)
            if method == "POST" and body:
                fields.update(parse_form(body))
            sid = fields.get("CallSid")
            call_id = _call_id(sid) if sid else ANY_CALL
    except WebhookError as exc:
        return Refusal(400, exc.reason)
    if call_id is None:
        return Refusal(400, "no usable call id")
    return AnswerRequest(carrier, route.kind, call_id)


def answer_document(request: AnswerRequest, stream_base_url: str, token: str,
                    settings: CarrierSettings) -> tuple[bytes, bytes]:
    """(content type, body) of the answer that connects the call to ``stream_base_url/<carrier>/stream``
    (``ws://`` or ``wss://``, no trailing slash) with ``token`` where the carrier carries it to the stream."""
    carrier = request.carrier
    stream_url = f"{stream_base_url}/{carrier}/stream"
    if carrier == TELNYX:
        return b"text/xml", telnyx.texml_connect_stream(stream_url, {SESSION_TOKEN: token},
                                                        codec=settings.telnyx_codec).encode()
    if carrier == PLIVO:
        return b"text/xml", plivo.stream_xml(stream_url, {SESSION_TOKEN: token}).encode()
    if carrier == VONAGE:
        headers = {vonage.HEADER_CALL_ID: request.call_id, vonage.HEADER_SESSION_TOKEN: token}
        ncco = vonage.ncco_connect_websocket(stream_url, headers, settings.vonage_sample_rate_hz, signed_upgrade=True)
        return b"application/json", orjson.dumps(ncco)
    url = exotel.voicebot_stream_url(stream_url, sample_rate_hz=EXOTEL_SAMPLE_RATE_HZ,
                                     custom_parameters=[(SESSION_TOKEN, token)])
    # The credentials the request to us carried, for Exotel to put on the upgrade (check_upgrade).
    url = exotel.with_basic_auth(url, settings.exotel_username, settings.exotel_password)
    return b"application/json", exotel.voicebot_url_response(url)


# --- the stream's upgrade ----------------------------------------------------------------------------


def stream_url_bases(*base_urls: str) -> tuple[str, ...]:
    """The distinct ``ws://`` / ``wss://`` bases a carrier may have dialled a stream URL of ours at: this
    node's own (``node_stream_url``) and the fleet's (``public_url``): a stream for a call another node
    answered may reach this one through the shared name. ``http(s)://`` is read as ``ws(s)://``."""
    bases: list[str] = []
    for base in base_urls:
        base = base.rstrip("/")
        for plain, websocket in (("http://", "ws://"), ("https://", "wss://")):
            if base.startswith(plain):
                base = websocket + base[len(plain):]
        if base and base not in bases:
            bases.append(base)
    return tuple(bases)


def upgrade_headers(head: bytes) -> dict[str, str | None]:
    """The header fields of an upgrade request's head (its request line and headers, without the blank
    line): lower-case name -> value with the surrounding whitespace stripped, read as Latin-1 (RFC 9110
    section 5.5). A name sent more than once maps to None: ``check_upgrade`` refuses one it needs."""
    headers: dict[str, str | None] = {}
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        key = name.strip().lower().decode("latin-1")
        headers[key] = None if key in headers else value.strip().decode("latin-1")
    return headers


def _upgrade_header(headers: Mapping[str, str | None], name: str) -> str | Refusal | None:
    """A checked header's value; None when absent or empty; a refusal when it came twice."""
    value = headers.get(name.lower(), "")
    if value is None:
        return Refusal(400, f"{name} sent twice on the upgrade")
    return value or None


def check_upgrade(carrier: str, target: str, headers: Mapping[str, str | None], settings: CarrierSettings,
                  stream_bases: tuple[str, ...], now_s: float) -> Refusal | None:
    """Check a served carrier's WebSocket upgrade before it is accepted: None when it carries what its carrier
    puts on it, else the refusal (403 missing or bad, 400 a checked header sent twice; the reason names the
    header, never its value). ``target``: path and query as received; ``headers``: ``upgrade_headers``;
    ``stream_bases``: ``stream_url_bases`` (Plivo signs the URL it dialled, ours + ``target``)."""
    if carrier == TELNYX:
        return None  # Telnyx signs nothing on the stream (voicecore/carriers/telnyx/protocol.py): the token admits it
    if carrier == PLIVO:
        signature = _upgrade_header(headers, plivo.SIGNATURE_V3_HEADER)
        nonce = _upgrade_header(headers, plivo.SIGNATURE_V3_NONCE_HEADER)
        for value in (signature, nonce):
            if isinstance(value, Refusal):
                return value
        if signature is None or nonce is None:
            return Refusal(403, "no X-Plivo-Signature-V3 on the upgrade")
        if not any(plivo.validate_upgrade_signature(settings.plivo_auth_token, base + target, nonce, signature)
                   for base in stream_bases):
            return Refusal(403, "bad X-Plivo-Signature-V3 on the upgrade")
        return None
    if carrier not in (VONAGE, EXOTEL):
        raise ValueError(f"unknown carrier {carrier!r}")
    authorization = _upgrade_header(headers, "Authorization")
    if isinstance(authorization, Refusal):
        return authorization
    if carrier == VONAGE:
        if authorization is None:
            return Refusal(403, "no signed JWT on the upgrade")
        if not vonage.verify_upgrade_jwt(authorization, settings.vonage_signature_secret, now_s):
            return Refusal(403, "bad signed JWT on the upgrade")
        return None
    if authorization is None:
        return Refusal(403, "no Basic credentials on the upgrade")
    if not exotel.check_basic_auth(authorization, settings.exotel_username, settings.exotel_password):
        return Refusal(403, "bad Basic credentials on the upgrade")
    return None


def transfer_document(request: AnswerRequest, target: str) -> tuple[bytes, bytes]:
    """(content type, body) of Plivo's transfer XML: ``<Dial>`` the target in the signed request's query
    (``target``: path and query as received). ValueError when the query names no usable target."""
    if request.kind != TRANSFER or request.carrier != PLIVO:
        raise ValueError("not a transfer request")
    try:
        to = _query(target).get(plivo_rest.TARGET_PARAMETER, "")
    except WebhookError:
        raise ValueError("malformed query") from None
    return b"text/xml", plivo_rest.dial_xml(to).encode()


# --- streams -----------------------------------------------------------------------------------------


def new_stream_protocol(carrier: str):
    """The carrier's stream protocol (voicecore/carriers/events.py ``CarrierStream``)."""
    if carrier == TELNYX:
        return telnyx.TelnyxStreamProtocol()
    if carrier == PLIVO:
        return plivo.PlivoStreamProtocol()
    if carrier == VONAGE:
        return vonage.VonageStreamProtocol()
    if carrier == EXOTEL:
        return exotel.ExotelStreamProtocol()
    raise ValueError(f"unknown carrier {carrier!r}")


def session_token(carrier: str, started: StreamStarted, upgrade_target: str) -> str:
    """The session token a stream presents: its custom parameters (TeXML ``<Parameter>``, Plivo
    ``extraHeaders``, Vonage NCCO headers, Exotel URL parameters), found by name (case-insensitively for
    Plivo, whose headers may come back in another case [unverified]); for Exotel also the upgrade URL's
    query, where the dynamic URL put it. "" when there is none."""
    token = started.custom_parameter(SESSION_TOKEN)
    if token is None and carrier == PLIVO:
        token = next((value for key, value in started.custom_parameters if key.lower() == SESSION_TOKEN), None)
    if token is None and carrier == EXOTEL:
        try:
            token = _query(upgrade_target).get(SESSION_TOKEN)
        except WebhookError:
            token = None
    return token or ""


@dataclass(frozen=True, slots=True)
class CallIds:
    """What the gateway's slot claim reads of a started stream (the shape of ``twilio.stream.Start``'s ids).
    ``account_sid`` is "" for these carriers: the model worker's Twilio REST path takes it, which has no business
    with another carrier's call. ``carrier``, ``carrier_call_id`` and ``carrier_account_id`` are the carrier and
    the ids its stream named, as sent (``call_sid`` may be their hash): the model worker ends or transfers the
    call with them (voicecore/carriers/call_control.py)."""

    call_sid: str
    stream_sid: str
    account_sid: str = ""
    carrier: str = ""
    carrier_call_id: str = ""
    carrier_account_id: str = ""


def token_fits_call(token_call_id: str | None, started: StreamStarted) -> bool:
    """Whether a redeemed token's call id admits this stream: the same call, or a token tied to none."""
    return token_call_id == ANY_CALL or token_call_id == started.call_id


def arena_id(value: str) -> str:
    """``value`` as an id the arena takes (voicecore/shm/arena.py: 1-64 of [A-Za-z0-9._:-]); any other id
    becomes "h" + 40 hex digits of its SHA-256, the same every time."""
    if _ARENA_ID.fullmatch(value):
        return value
    return "h" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def stream_id(carrier: str, started: StreamStarted, protocol) -> str:
    """The stream's own id for the arena and logs (Telnyx keeps it on the protocol; Vonage has none: the call id)."""
    if carrier == TELNYX:
        return protocol.stream_id or started.call_id
    return started.stream_id or started.call_id


def final_templates_fit(templates: WireTemplates, wire_slot_bytes: int) -> bool:
    """Whether the pacer's longest entry from final ``templates`` fits a wire slot (the arena checks the
    same when it writes them; checked here first so a long stream id falls back to raw entries)."""
    longest = max(len(templates.media_prefix) + _B64_FRAME_CHARS + len(templates.media_suffix),
                  len(templates.mark_prefix) + MAX_MARK_NAME_BYTES + len(templates.mark_suffix),
                  len(templates.clear))
    return longest <= wire_slot_bytes


def arena_encoding(carrier: str, started: StreamStarted, alaw_passthrough: bool) -> str:
    """The law of the frames this call's rings carry: ENCODING_PCMA for a Telnyx stream in PCMA when the model
    takes A-law (config ``alaw_passthrough``: OpenAI Realtime does, g711_alaw / audio/pcma both ways,
    docs/explanation/protocols.md#c1), so the caller's bytes reach the model and the model's the caller
    untouched; mu-law (ENCODING_PCMU) for every other call, which the edge transcodes to once if it is not in
    mu-law already. Telnyx is the one carrier here that streams A-law (docs/explanation/protocols.md#b)."""
    if (alaw_passthrough and carrier == TELNYX and started.encoding == ENCODING_PCMA
            and started.sample_rate_hz == SAMPLE_RATE_HZ):
        return ENCODING_PCMA
    return ENCODING_PCMU


def wire_templates(carrier: str, started: StreamStarted, protocol, wire_slot_bytes: int,
                   arena_law: str = ENCODING_PCMU) -> WireTemplates:
    """How the pacer writes this call's messages: final for Telnyx and Plivo streams in mu-law at 8 kHz,
    and for a Telnyx PCMA stream whose frames stay A-law (``arena_law``, :func:`arena_encoding`): their
    messages are the pacer's frame in base64 between fixed text. Raw for everything else (Vonage's binary
    L16, Exotel's chunks, another encoding or rate), which the gateway's edge finishes."""
    templates = RAW
    if carrier == TELNYX and started.encoding == arena_law == ENCODING_PCMA:
        templates = telnyx.wire_templates(ENCODING_PCMA, arena_encoding=ENCODING_PCMA)
    elif started.encoding == ENCODING_PCMU and started.sample_rate_hz == SAMPLE_RATE_HZ:
        if carrier == TELNYX:
            templates = telnyx.wire_templates(ENCODING_PCMU)
        elif carrier == PLIVO:
            templates = plivo.wire_templates(started.stream_id, protocol.content_type, started.sample_rate_hz)
    if not templates.raw and not final_templates_fit(templates, wire_slot_bytes):
        templates = RAW
    return templates


def new_edge(carrier: str, started: StreamStarted, protocol, raw: bool,
             arena_law: str = ENCODING_PCMU) -> CarrierEdge:
    """The stream's edge: inbound always (the carrier's audio -> 160-byte frames for the inbound ring),
    outbound when the call's templates are ``raw``. A stream whose law the rings carry as it is
    (``arena_law``: an A-law call passed through) gets the identity each way, PCMU's transcoder: its
    bytes are framed, never changed."""
    if arena_law == ENCODING_PCMA and started.encoding == ENCODING_PCMA:
        transcoder = EdgeTranscoder(ENCODING_PCMU, started.sample_rate_hz)  # A-law in, A-law on: no transcode
    else:
        transcoder = EdgeTranscoder(started.encoding, started.sample_rate_hz)
    if not raw:
        return CarrierEdge(transcoder)
    if carrier == TELNYX:
        sink = FrameSink(telnyx.TelnyxOutboundEncoder())
    elif carrier == PLIVO:
        sink = FrameSink(plivo.PlivoOutboundEncoder(started.stream_id, protocol.content_type, started.sample_rate_hz))
    elif carrier == VONAGE:
        sink = FrameSink(vonage.VonageOutboundEncoder(started.sample_rate_hz))
    elif carrier == EXOTEL:
        encoder = protocol.outbound_encoder()
        sink = BatchedSink(encoder, encoder.batcher())
    else:
        raise ValueError(f"unknown carrier {carrier!r}")
    return CarrierEdge(transcoder, sink)


def pacer_lead_ms(carrier: str, edge: CarrierEdge, configured_lead_ms: int) -> int:
    """The send-ahead the pacer keeps in this call's carrier buffer (the call's control word LEAD_NS, in ms),
    0 for the pacer's configured lead (``configured_lead_ms``) when that is enough.

    Exotel's edge batches the pacer's 20 ms frames into chunks (200 ms at 8 kHz) and sends a chunk only once
    its last frame came: with a lead shorter than a chunk the carrier has played everything it had by the
    time the next chunk leaves (underruns at any jitter, and a response's first chunk waits for frames the
    pacer holds back). Its calls keep one chunk plus CHUNK_LEAD_MARGIN_MS. Every other carrier's edge sends
    each frame as it comes (a resampled stream holds back 10 ms, within any lead): 0."""
    sink = edge.sink
    if carrier == EXOTEL and isinstance(sink, BatchedSink):
        batcher = sink.batcher
        need_ms = -(-batcher.chunk_bytes // batcher.rules.bytes_per_ms) + CHUNK_LEAD_MARGIN_MS
        if need_ms > configured_lead_ms:
            return need_ms
    return 0


# --- a carrier buffer bounded by its echoes ------------------------------------------------------------


def backlog_max_frames(carrier: str, max_unplayed_ms: int) -> int:
    """The bound on this call's unplayed audio known from the carrier's echoes, in 20 ms frames (the call's
    control word BACKLOG_MAX_FRAMES; 0: none, the pacer's lead by time alone).

    Plivo's: its server-side buffer takes whatever we send (40-60 s [plivo ref]) and plays it as its media
    server can, so a lead kept by time says nothing about how deep that buffer is once Plivo played late
    (network jitter, a slow media server): every late ms stays in the buffer, and the caller hears the agent
    that much later for the rest of the answer. Its ``playedStream`` echoes say exactly what played
    (:class:`voicecore.carriers.plivo.CheckpointLead`), so its calls send only while the audio no echo has
    confirmed is below ``max_unplayed_ms`` (config ``plivo_max_unplayed_ms``). Twilio, Telnyx, Vonage and Exotel
    keep the lead by time (their buffers are not known to run that deep)."""
    if carrier == PLIVO and max_unplayed_ms > 0:
        return max(1, max_unplayed_ms // FRAME_MS)
    return 0


# A checkpoint the gateway adds to a bounded call's stream (EchoBoundedBacklog.own_checkpoint): its name
# cannot be a pacer mark's (those are digits and colons: voicecore/carriers/marks.py).
OWN_CHECKPOINT_PREFIX = "vc-bound-"
OWN_CHECKPOINT_EVERY_FRAMES = 5  # as the pacer's marks (mark_every_frames' default): 100 ms


def is_own_checkpoint(name: str) -> bool:
    return name.startswith(OWN_CHECKPOINT_PREFIX)


class EchoBoundedBacklog:
    """One call's unplayed audio as the gateway sees it, for a carrier whose echoes bound it (Plivo).

    The gateway is the one place that sees both directions in wire order: it reports every drain's wire
    entries (:meth:`sent`: media, checkpoints, clears, told apart by the call's templates as the drain does)
    and every echo (:meth:`echoed`, ``playedStream``) and clear acknowledgement (:meth:`cleared`,
    ``clearedAudio``) to a :class:`~voicecore.carriers.plivo.CheckpointLead`, and publishes
    :meth:`played_position_frames` (control word CARRIER_PLAYED_POS). The pacer counts the media entries it
    puts on the wire from the same start (WIRE_FRAMES) and sends no more while the difference is at the
    bound: the carrier never holds more than that of unconfirmed audio, whatever its playout does. A clear
    counts everything sent before it as gone (played or thrown away) the moment it is sent, as CheckpointLead
    says; between the pacer writing the clear and the gateway sending it, the pacer still sees the old
    position: the bound errs on the full side, never the empty one."""

    __slots__ = ("lead", "_media_prefix", "_mark_prefix", "_mark_suffix", "_clear", "_since_checkpoint", "_own_sent")

    def __init__(self, templates: WireTemplates) -> None:
        self.lead = plivo.CheckpointLead()
        self._media_prefix = templates.media_prefix
        self._mark_prefix = templates.mark_prefix
        self._mark_suffix = templates.mark_suffix
        self._clear = templates.clear
        self._since_checkpoint = 0  # media entries sent after the newest checkpoint (or clear)
        self._own_sent = 0

    def sent(self, entries: list[bytes]) -> None:
        """One drain's wire entries, in the order they go to the socket (final text or raw entries alike)."""
        lead = self.lead
        media_prefix = self._media_prefix
        media = 0
        for data in entries:
            if data.startswith(media_prefix):
                media += 1
                continue
            if media:
                lead.frames_sent(media)
                media = 0
            if data.startswith(self._mark_prefix):
                name = data[len(self._mark_prefix):len(data) - len(self._mark_suffix)].decode("ascii")
                lead.checkpoint_sent(name, lead.sent_position_frames())
                self._since_checkpoint = 0
            elif data == self._clear:
                lead.clear_sent()
                self._since_checkpoint = 0
        if media:
            lead.frames_sent(media)
            self._since_checkpoint += media

    def own_checkpoint(self) -> bytes | None:
        """A checkpoint of the gateway's own, to send after this drain's entries, once OWN_CHECKPOINT_EVERY_FRAMES
        media entries went out with none behind them: the pacer marks only a response's audio (a mark names
        its tag), so a fallback line goes out unmarked, and its frames would hold the bound full with nothing
        left to echo: the call silent for good (a Plivo call's hold line did exactly that). Its echo settles
        the bound and nothing else (:func:`is_own_checkpoint`: the mark ledger never sees it)."""
        if self._since_checkpoint < OWN_CHECKPOINT_EVERY_FRAMES:
            return None
        self._own_sent += 1
        name = f"{OWN_CHECKPOINT_PREFIX}{self._own_sent}"
        self.lead.checkpoint_sent(name, self.lead.sent_position_frames())
        self._since_checkpoint = 0
        return self._mark_prefix + name.encode("ascii") + self._mark_suffix

    def echoed(self, name: str) -> None:
        self.lead.checkpoint_echoed(name)

    def cleared(self) -> None:
        self.lead.clear_confirmed()

    def played_position_frames(self) -> int:
        return self.lead.played_position_frames()

    def unplayed_frames(self) -> int:
        return self.lead.unplayed_frames()
