"""The gateway's carrier decisions, without I/O: what it asks a call's carrier and how it combines the answers.

Owns, for every carrier alike: which carriers are served and their routes and stream paths; turning a webhook
check into an answer or a refusal (a request the carrier's own reader finds malformed is a 400); the answer
document's stream URL; the ids a started stream's call gets in the arena (``CallIds``, ``arena_id``) and whether
its session token fits it; and, at the stream's start, the call's plan (:func:`plan_stream`): the law its rings
carry, how the pacer writes its messages (the carrier's final templates when they fit a wire slot, raw entries
for the carrier edge otherwise), the edge itself, its lead, and the bound on its backlog.

Everything that differs between carriers is the carrier's descriptor's (voicecore/carriers/base.py, one per
package, found in voicecore/carriers/registry.py): its secret, routes, signatures, answer document, upgrade
check, stream protocol, token place, encoders, lead and backlog policy. docs/reference/carriers.md has the
rules per carrier for operators. Every carrier's webhooks and streams, Twilio's included, come through here
(:func:`webhook_routes`, :func:`stream_paths`, :func:`new_stream_protocol`, :func:`plan_stream`): the gateway has
one webhook path and one stream connection class for them all. Must not know: sockets, the clock (``now_s`` comes
in), randomness (the token comes in), the arena, rings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from voicecore.carriers import base, registry
from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.edge import CarrierEdge
from voicecore.carriers.events import ENCODING_PCMA, ENCODING_PCMU, CarrierStream, StreamStarted
from voicecore.carriers.webhook import (ANSWER, ANY_CALL, EVENT, REATTACH, SESSION_TOKEN, TRANSFER, AnswerRequest,
                                        DrainAnswer, Refusal, Route, WebhookError, call_id, stream_url_bases,
                                        upgrade_headers)
from voicecore.carriers.wire import MAX_MARK_NAME_BYTES, RAW, WireTemplates
from voicecore.timing import FRAME_BYTES

__all__ = [
    "ANSWER",
    "ANY_CALL",
    "CARRIERS",
    "EVENT",
    "EXOTEL",
    "REATTACH",
    "PLIVO",
    "SESSION_TOKEN",
    "TELNYX",
    "TRANSFER",
    "TWILIO",
    "VONAGE",
    "AnswerRequest",
    "CallIds",
    "CarrierSettings",
    "DrainAnswer",
    "Refusal",
    "Route",
    "StreamPlan",
    "answer_document",
    "hangup_document",
    "reattaches",
    "arena_encoding",
    "arena_id",
    "backlog_max_frames",
    "call_ids",
    "check_upgrade",
    "check_webhook",
    "draining_answer",
    "final_templates_fit",
    "new_edge",
    "new_stream_protocol",
    "pacer_lead_ms",
    "plan_stream",
    "routes",
    "session_token",
    "stream_id",
    "stream_paths",
    "stream_url_bases",
    "token_fits_call",
    "transfer_document",
    "upgrade_headers",
    "webhook_routes",
    "whole_frames",
    "wire_templates",
]

TWILIO = "twilio"
TELNYX = "telnyx"
PLIVO = "plivo"
VONAGE = "vonage"
EXOTEL = "exotel"
# The carriers served beside Twilio, each when its secret is configured (Twilio always is): the gateway's
# carrier_* counters and its "carriers served" log line count these. Every registered carrier's webhooks and
# stream, Twilio's included, come through here alike.
CARRIERS = tuple(name for name in registry.NAMES if name != TWILIO)

_B64_FRAME_CHARS = (FRAME_BYTES + 2) // 3 * 4


def _served(name: str) -> base.Carrier:
    """The descriptor of a carrier whose stream this module serves (any registered one); ValueError for any
    other name."""
    if name not in registry.NAMES:
        raise ValueError(f"no carrier stream here for {name!r}")
    return registry.get(name)


def webhook_routes(settings: base.CarrierSettings) -> dict[str, Route]:
    """The HTTP routes of every served carrier, Twilio's included: the gateway's one webhook path serves them all
    (the others' paths are 404 like any unknown path)."""
    return registry.routes(registry.served(settings))


class CarrierSettings(base.CarrierSettings):
    """The carriers' secrets and options (voicecore/config.py); an empty secret: that carrier is not served."""

    __slots__ = ()

    def enabled(self) -> tuple[str, ...]:
        """The carriers served beside Twilio (which is always served), in the registry's order."""
        return tuple(name for name in registry.served(self) if name in CARRIERS)

    def served(self) -> tuple[str, ...]:
        """Every served carrier, Twilio included, in the registry's order: whose webhooks and streams the gateway
        takes."""
        return registry.served(self)


def routes(enabled: tuple[str, ...]) -> dict[str, Route]:
    """The HTTP routes of the served carriers (the others' paths are 404 like any unknown path)."""
    return registry.routes(enabled)


def stream_paths(enabled: tuple[str, ...]) -> dict[str, str]:
    """WebSocket path -> carrier, for the served carriers."""
    return registry.stream_paths(enabled)


# --- webhooks --------------------------------------------------------------------------------------------


def check_webhook(route: Route, method: str, target: str, headers: Mapping[str, str], body: bytes,
                  settings: base.CarrierSettings, url: str, now_s: float) -> AnswerRequest | Refusal:
    """Check one request to a carrier route (the route's carrier does: voicecore/carriers/base.py
    ``Carrier.check_webhook``). ``headers``: lower-case names; ``target``: path and query as received; ``url``:
    the public URL the carrier called (our base URL + ``target``). A body or query the carrier's reader refuses
    is a 400 with its fixed reason. A configured secret our own checks cannot use (``ValueError`` from the
    carrier) is our misuse and propagates: the shell logs it and answers 500."""
    try:
        return registry.get(route.carrier).check_webhook(route, method, target, headers, body, settings, url, now_s)
    except WebhookError as exc:
        return Refusal(400, exc.reason)


def answer_document(request: AnswerRequest, stream_base_url: str, token: str,
                    settings: base.CarrierSettings, reattach_token: str | None = None) -> tuple[bytes, bytes]:
    """(content type, body) of the answer that connects the call to ``stream_base_url/<carrier>/stream``
    (``ws://`` or ``wss://``, no trailing slash) with ``token`` where the carrier carries it to the stream, and,
    for a carrier that can go on to one (:func:`reattaches`), ``reattach_token`` in its re-attach step."""
    carrier = registry.get(request.carrier)
    if reattach_token is not None and reattaches(request.carrier):
        return carrier.answer_document(request, stream_base_url + carrier.stream_path, token, settings,
                                       reattach_token=reattach_token)
    return carrier.answer_document(request, stream_base_url + carrier.stream_path, token, settings)


def reattaches(carrier: str) -> bool:
    """Does this carrier's answer document name a re-attach step (voicecore/reattach.py)?"""
    return bool(getattr(registry.get(carrier), "reattaches", False))


def hangup_document(carrier: str) -> tuple[bytes, bytes]:
    """(content type, body) that ends the call: the re-attach step's answer for a call that is over."""
    return registry.get(carrier).hangup_document()


def draining_answer(request: AnswerRequest, settings: base.CarrierSettings) -> DrainAnswer:
    """What a draining node answers the call's webhook instead (it is refused before it is connected)."""
    return registry.get(request.carrier).draining_answer(request, settings)


def transfer_document(request: AnswerRequest, target: str) -> tuple[bytes, bytes]:
    """(content type, body) of the document a transfer fetches (Plivo's ``<Dial>``): ``target`` is the signed
    request's path and query. ValueError when the request is no transfer or its query names no usable target."""
    return registry.get(request.carrier).transfer_document(request, target)


def check_upgrade(carrier: str, target: str, headers: Mapping[str, str | None], settings: base.CarrierSettings,
                  stream_bases: tuple[str, ...], now_s: float) -> Refusal | None:
    """Check a served carrier's WebSocket upgrade before it is accepted: None when it carries what its carrier
    puts on it, else the refusal (403 missing or bad, 400 a checked header sent twice; the reason names the
    header, never its value). ``target``: path and query as received; ``headers``: ``upgrade_headers``;
    ``stream_bases``: ``stream_url_bases`` (Plivo signs the URL it dialled, ours + ``target``). The session
    token is checked at ``start`` as well, whatever the upgrade carried."""
    return _served(carrier).check_upgrade(target, headers, settings, stream_bases, now_s)


# --- streams -----------------------------------------------------------------------------------------------


def new_stream_protocol(carrier: str) -> CarrierStream:
    """The carrier's stream protocol (voicecore/carriers/events.py ``CarrierStream``)."""
    return _served(carrier).new_stream()


def whole_frames(carrier: str) -> bool:
    """Whether the carrier's caller audio comes as the arena's frames already (base.py ``whole_frames``): the
    gateway writes them into the inbound ring as they are, with the carrier's numbering, and reads them from the
    stream's ``receive_media`` fast path when it has one; no edge transcodes them."""
    return _served(carrier).whole_frames


def session_token(carrier: str, started: StreamStarted, upgrade_target: str) -> str:
    """The session token a stream presents, where its carrier puts it; "" when there is none."""
    return _served(carrier).session_token(started, upgrade_target)


@dataclass(frozen=True, slots=True)
class CallIds:
    """What the gateway's slot claim reads of a started stream: the arena's ids (``call_sid`` may be a hash of
    a long call id, ``stream_sid`` the stream's own id) and, as sent, the carrier and the ids its stream named,
    with which the model worker ends or transfers the call (voicecore/carriers/call_control.py).
    ``account_sid`` is the account the stream named ("" if none)."""

    call_sid: str
    stream_sid: str
    account_sid: str = ""
    carrier: str = ""
    carrier_call_id: str = ""
    carrier_account_id: str = ""
    # the stream's custom parameters (an outbound call's direction, callee and fields: call_fields.py)
    custom_parameters: tuple[tuple[str, str], ...] = ()


def call_ids(carrier: str, started: StreamStarted, stream: CarrierStream) -> CallIds:
    """The ids of a started stream's call (:class:`CallIds`): the arena's, and the carrier the bus names with the
    ids its stream sent; a call of the bus's default carrier (``bus_name`` "": Twilio) is named by the arena's ids
    and the account alone (voicecore/bus/messages.py CallStarted)."""
    descriptor = _served(carrier)
    call_sid = arena_id(started.call_id)
    stream_sid = arena_id(descriptor.stream_id(started, stream))
    parameters = tuple(started.custom_parameters)
    if not descriptor.bus_name:
        return CallIds(call_sid, stream_sid, started.account_id, custom_parameters=parameters)
    return CallIds(call_sid, stream_sid, "", descriptor.bus_name, started.call_id, started.account_id, parameters)


def token_fits_call(token_call_id: str | None, started: StreamStarted, carrier: str | None = None) -> bool:
    """Whether a redeemed token's call id admits this stream: the same call, or a token tied to none where the
    stream's ``carrier`` takes one (its descriptor's ``any_call_tokens``; no carrier named: it does)."""
    if token_call_id == ANY_CALL:
        return carrier is None or _served(carrier).any_call_tokens
    return token_call_id == started.call_id


def arena_id(value: str) -> str:
    """``value`` as an id the arena takes (voicecore/shm/arena.py: 1-64 of [A-Za-z0-9._:-]); any other id
    becomes "h" + 40 hex digits of its SHA-256, the same every time."""
    if call_id(value) is not None:  # the same rule as a webhook's call id
        return value
    return "h" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def stream_id(carrier: str, started: StreamStarted, protocol: CarrierStream) -> str:
    """The stream's own id for the arena and logs (the call id for a carrier whose stream has none)."""
    return _served(carrier).stream_id(started, protocol)


def final_templates_fit(templates: WireTemplates, wire_slot_bytes: int) -> bool:
    """Whether the pacer's longest entry from final ``templates`` fits a wire slot (the arena checks the
    same when it writes them; checked here first so a long stream id falls back to raw entries)."""
    longest = max(len(templates.media_prefix) + _B64_FRAME_CHARS + len(templates.media_suffix),
                  len(templates.mark_prefix) + MAX_MARK_NAME_BYTES + len(templates.mark_suffix),
                  len(templates.clear))
    return longest <= wire_slot_bytes


def arena_encoding(carrier: str, started: StreamStarted, alaw_passthrough: bool) -> str:
    """The law of the frames this call's rings carry: ENCODING_PCMA for a stream in A-law the carrier lets
    through when the model takes A-law (config ``alaw_passthrough``: OpenAI Realtime does, g711_alaw /
    audio/pcma both ways, docs/explanation/protocols.md#c1; Telnyx's PCMA), so the caller's bytes reach the model
    and the model's the caller untouched; mu-law (ENCODING_PCMU) for every other call, which the edge transcodes
    to once if it is not in mu-law already."""
    return registry.get(carrier).arena_encoding(started, alaw_passthrough)


def wire_templates(carrier: str, started: StreamStarted, protocol: CarrierStream, wire_slot_bytes: int,
                   arena_law: str = ENCODING_PCMU) -> WireTemplates:
    """How the pacer writes this call's messages: the carrier's final templates where it takes the arena's
    frames as they are (its messages are the pacer's frame in base64 between fixed text) and they fit a wire
    slot; raw entries, which the gateway's edge finishes, for everything else (another encoding or rate,
    binary audio, chunks)."""
    templates = _served(carrier).final_templates(started, protocol, arena_law) or RAW
    if not templates.raw and not final_templates_fit(templates, wire_slot_bytes):
        templates = RAW
    return templates


def new_edge(carrier: str, started: StreamStarted, protocol: CarrierStream, raw: bool,
             arena_law: str = ENCODING_PCMU) -> CarrierEdge:
    """The stream's edge: inbound always (the carrier's audio -> 160-byte frames for the inbound ring),
    outbound when the call's templates are ``raw`` (the carrier's sink finishes them). A stream whose law the
    rings carry as it is (``arena_law``: an A-law call passed through) gets the identity each way, PCMU's
    transcoder: its bytes are framed, never changed."""
    if arena_law == ENCODING_PCMA and started.encoding == ENCODING_PCMA:
        transcoder = EdgeTranscoder(ENCODING_PCMU, started.sample_rate_hz)  # A-law in, A-law on: no transcode
    else:
        transcoder = EdgeTranscoder(started.encoding, started.sample_rate_hz)
    if not raw:
        return CarrierEdge(transcoder)
    return CarrierEdge(transcoder, _served(carrier).outbound_sink(started, protocol))


def pacer_lead_ms(carrier: str, edge: CarrierEdge, configured_lead_ms: int) -> int:
    """The send-ahead the pacer keeps in this call's carrier buffer (the call's control word LEAD_NS, in ms),
    0 for the pacer's configured lead (``configured_lead_ms``) when that is enough."""
    return registry.get(carrier).pacer_lead_ms(edge, configured_lead_ms)


def backlog_max_frames(carrier: str, settings: base.CarrierSettings) -> int:
    """The bound on this call's unplayed audio known from the carrier's echoes, in 20 ms frames (the call's
    control word BACKLOG_MAX_FRAMES; 0: none, the pacer's lead by time alone)."""
    return registry.get(carrier).backlog_max_frames(settings)


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """How the gateway serves a started stream: the law of its rings, the pacer's templates (written into the
    slot), the edge, the lead (ms; 0: the pacer's) and the backlog bound (frames; 0: none) and its keeper."""

    arena_law: str
    templates: WireTemplates
    edge: CarrierEdge | None  # None: a carrier whose caller audio is whole frames and whose templates are final
    lead_ms: int
    backlog_frames: int
    backlog: object | None  # the carrier's keeper of the bound (e.g. plivo.backlog.EchoBoundedBacklog)


def plan_stream(carrier: str, started: StreamStarted, protocol: CarrierStream, settings: base.CarrierSettings,
                wire_slot_bytes: int, configured_lead_ms: int) -> StreamPlan:
    """The call's plan at its stream's start. ValueError: a format the protocol accepted but the edge cannot
    serve (ours to fix)."""
    descriptor = _served(carrier)
    arena_law = descriptor.arena_encoding(started, settings.alaw_passthrough)
    templates = wire_templates(carrier, started, protocol, wire_slot_bytes, arena_law)
    # A carrier whose caller audio is the arena's frames already needs no edge inbound; outbound only for raw entries.
    edge = None if descriptor.whole_frames and not templates.raw else new_edge(carrier, started, protocol,
                                                                               templates.raw, arena_law)
    lead_ms = descriptor.pacer_lead_ms(edge, configured_lead_ms)
    backlog_frames = descriptor.backlog_max_frames(settings)
    backlog = descriptor.new_backlog(templates) if backlog_frames else None
    return StreamPlan(arena_law, templates, edge, lead_ms, backlog_frames, backlog)
