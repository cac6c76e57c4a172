"""The shape every carrier has: its descriptor (:class:`Carrier`), the settings it reads, and what its hang-up and
transfer become. One instance per carrier package (``voicecore/carriers/<name>/carrier.py``), listed in the
registry (voicecore/carriers/registry.py); the gateway and the model worker reach a carrier only through it.

A descriptor answers, for its carrier:

- **serving**: whether it is served (:meth:`Carrier.served`: its secret is configured), its HTTP routes
  (``routes``) and its stream path (``/<name>/stream``);
- **the webhooks**: the check of a request to one of its routes (:meth:`Carrier.check_webhook`: signature or
  credentials, then the call id the session token is tied to), the answer document that points the call at our
  stream with the token (:meth:`Carrier.answer_document`), what a draining node answers instead
  (:meth:`Carrier.draining_answer`), the document a transfer fetches (:meth:`Carrier.transfer_document`), and
  the check of its stream's WebSocket upgrade (:meth:`Carrier.check_upgrade`);
- **the stream**: its protocol (:meth:`Carrier.new_stream`, a :class:`~voicecore.carriers.events.CarrierStream`
  giving the carrier-neutral events), whether its caller audio comes as the arena's frames already
  (``whole_frames``), where the token is (:meth:`Carrier.session_token`) and whether one tied to no call admits
  the stream (``any_call_tokens``), the name the bus gives its calls (``bus_name``), the stream's own id
  (:meth:`Carrier.stream_id`), the law the call's rings carry (:meth:`Carrier.arena_encoding`), the pacer's
  final templates when the carrier takes its frames as they are (:meth:`Carrier.final_templates`), the encoder
  the gateway's edge finishes raw entries with otherwise (:meth:`Carrier.outbound_sink`), and the lead and
  backlog policy (:meth:`Carrier.pacer_lead_ms`, :meth:`Carrier.backlog_max_frames`, :meth:`Carrier.new_backlog`);
- **hang-up and transfer**: the request (or other step) the agent's HangUp / Transfer becomes
  (:meth:`Carrier.end_call`) and reading the carrier's answer (:meth:`Carrier.parse_response`);
- **placing calls** (voicecore/outbound/dial.py): the settings its REST API is asked with (``placing``), the
  request that places a call (:meth:`Carrier.place_call_request`) and reading its answer
  (:meth:`Carrier.parse_placed`);
- **the simulator side**: ``carrier_side``, the carrier's own end of its stream protocol, which the carrier
  simulator (voicecore/sim/) and the tests drive (the simulator's adapter on it plays the stream), and
  ``simulator``, the carrier's :class:`~voicecore.carriers.simulator.CarrierSimulator` (its package's ``sim.py``:
  its signed webhooks and callbacks, its answer document read, its stream's upgrade headers, its calls' ids).

The defaults here are what most carriers do (no upgrade credential, the token among the stream's custom
parameters, mu-law rings, the pacer's lead, no backlog bound, no transfer document); a carrier overrides what
differs. Must not know: sockets, the clock (``now_s`` comes in), randomness (tokens and nonces come in), the
arena, rings, the bus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from voicecore.carriers.events import ENCODING_PCMU, CarrierStream, StreamStarted
from voicecore.carriers.rest_common import PlacedCall, RestRequest, RestResult
from voicecore.carriers.simulator import CarrierSimulator
from voicecore.carriers.webhook import SESSION_TOKEN, AnswerRequest, DrainAnswer, Refusal, Route
from voicecore.carriers.wire import WireTemplates

__all__ = [
    "HANGUP",
    "TRANSFER",
    "CallControlSettings",
    "CallRef",
    "CannotEnd",
    "Carrier",
    "CarrierSettings",
    "CloseStream",
    "InBand",
    "PlacingSettings",
]

HANGUP = "hangup"
TRANSFER = "transfer"

# The REST APIs' default bases, repeated here so the settings need no carrier module (each carrier's rest.py
# owns its own DEFAULT_BASE_URL; tests/unit/test_carrier_rest.py keeps the two the same).
_TWILIO_API = "https://api.twilio.com"
_TELNYX_API = "https://api.telnyx.com"
_PLIVO_API = "https://api.plivo.com"
_VONAGE_API = "https://api.nexmo.com"


# --- settings ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CarrierSettings:
    """What the gateway's side of the carriers reads from the configuration (voicecore/config.py): their secrets
    and options. An empty secret: that carrier is not served (Twilio is always served: an empty auth token is a
    random per-run one, the demo's)."""

    telnyx_public_key: str = ""
    plivo_auth_token: str = ""
    vonage_signature_secret: str = ""
    vonage_sample_rate_hz: int = 16000  # vonage.protocol.DEFAULT_SAMPLE_RATE_HZ
    exotel_username: str = ""
    exotel_password: str = ""
    telnyx_codec: str = "PCMU"  # the law the TeXML answer asks Telnyx to stream both ways (PCMU or PCMA)
    twilio_auth_token: str = ""
    public_url: str = ""  # the node's public base URL (webhooks, Twilio's status callback)
    drain_redirect_url: str = ""  # a draining node's <Redirect> for Twilio's calls; "": <Reject reason="busy">
    alaw_passthrough: bool = True  # an A-law stream's frames reach the model as they are
    plivo_max_unplayed_ms: int = 0  # Plivo's bound on audio its echoes have not confirmed; 0: none

    @classmethod
    def from_config(cls, config) -> CarrierSettings:
        return cls(telnyx_public_key=config.telnyx_public_key, plivo_auth_token=config.plivo_auth_token,
                   vonage_signature_secret=config.vonage_signature_secret,
                   vonage_sample_rate_hz=config.vonage_sample_rate_hz, exotel_username=config.exotel_username,
                   exotel_password=config.exotel_password, telnyx_codec=config.telnyx_codec,
                   twilio_auth_token=config.twilio_auth_token, public_url=config.base_url,
                   drain_redirect_url=config.drain_redirect_url, alaw_passthrough=config.alaw_passthrough,
                   plivo_max_unplayed_ms=config.plivo_max_unplayed_ms)


@dataclass(frozen=True, slots=True)
class CallControlSettings:
    """The credentials and API base URLs of hang-up and transfer (voicecore/config.py); an empty credential:
    that carrier's calls cannot be ended through its API (Twilio's auth token is always set in a stack)."""

    telnyx_api_key: str = ""
    telnyx_api_base: str = _TELNYX_API
    plivo_auth_id: str = ""
    plivo_auth_token: str = ""
    plivo_api_base: str = _PLIVO_API
    public_url: str = ""  # where Plivo reaches the gateway's /plivo/transfer
    vonage_application_id: str = ""
    vonage_private_key: str = ""  # the PEM text (the shell reads a file path into it)
    vonage_api_base: str = _VONAGE_API
    twilio_auth_token: str = ""
    twilio_api_base: str = _TWILIO_API

    @classmethod
    def from_config(cls, config, vonage_private_key: str = "") -> CallControlSettings:
        return cls(telnyx_api_key=config.telnyx_api_key, telnyx_api_base=config.telnyx_api_base,
                   plivo_auth_id=config.plivo_auth_id, plivo_auth_token=config.plivo_auth_token,
                   plivo_api_base=config.plivo_api_base, public_url=config.base_url,
                   vonage_application_id=config.vonage_application_id, vonage_private_key=vonage_private_key,
                   vonage_api_base=config.vonage_api_base, twilio_auth_token=config.twilio_auth_token,
                   twilio_api_base=config.twilio_api_base)


# --- hang-up and transfer ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallRef:
    """The carrier's own ids of one call, as its stream named them: ``call_id`` is Twilio's CallSid, Telnyx's
    call_control_id, Plivo's CallUUID, Vonage's uuid, Exotel's CallSid; ``account_id`` what the stream named as
    the account ("" if nothing)."""

    carrier: str
    call_id: str
    account_id: str = ""


@dataclass(frozen=True, slots=True)
class CloseStream:
    """Close the call's media stream (Exotel: the flow's next applet takes the call)."""

    reason: str


@dataclass(frozen=True, slots=True)
class CannotEnd:
    """Nothing can be sent: a credential is not configured (fixed text naming the setting)."""

    reason: str


@dataclass(frozen=True, slots=True)
class InBand:
    """Digits cannot be sent beside the stream: play them as tones on it (voicecore/outbound/dtmf.py)."""

    reason: str


@dataclass(frozen=True, slots=True)
class PlacingSettings:
    """The settings a carrier's REST API places calls with, by their names in voicecore/config.py: its base URL,
    the account (or application) the calls are placed under, and the secret that authorises the request."""

    api_base: str
    account_id: str
    secret: str
    secret_is_pem: bool = False  # a PEM key, given as its text or as the path of its file (config.pem_text)


# --- the descriptor ----------------------------------------------------------------------------------------


class Carrier:
    """One carrier, as the gateway and the model worker see it (the module docstring lists what it answers).
    Subclasses set ``name``, ``title``, ``routes``, ``carrier_side`` and ``simulator`` and override what differs."""

    name: str = ""
    title: str = ""  # for people: log lines ("hangup sent to Twilio")
    routes: Mapping[str, Route] = {}
    # Caller audio arrives as the arena's frames (160 bytes of mu-law at 8 kHz, each checked by the protocol):
    # the gateway writes them into the inbound ring as they are, with the carrier's own numbering, and reads
    # them from the stream's fast path when it has one (``receive_media``).
    whole_frames: bool = False
    # Its stream may start with a session token tied to no call (``ANY_CALL``: a webhook that named none,
    # Exotel's); False: only with a token tied to the call its stream names.
    any_call_tokens: bool = True
    carrier_side: type | None = None  # None: the simulator plays its stream with its own core (Twilio's)
    simulator: CarrierSimulator = CarrierSimulator()
    # The settings its REST API places calls with (voicecore/outbound/dial.py); None: it places no calls.
    placing: PlacingSettings | None = None

    @property
    def bus_name(self) -> str:
        """The carrier the bus's CallStarted names (voicecore/bus/messages.py), beside the ids its stream sent:
        the carrier's own name; "" for the bus's default carrier (Twilio), whose calls the arena's ids name alone."""
        return self.name

    @property
    def stream_path(self) -> str:
        return f"/{self.name}/stream"

    def __repr__(self) -> str:
        return f"<carrier {self.name}>"

    # -- serving ------------------------------------------------------------------------------------------

    def served(self, settings: CarrierSettings) -> bool:
        raise NotImplementedError

    # -- webhooks -------------------------------------------------------------------------------------------

    def check_webhook(self, route: Route, method: str, target: str, headers: Mapping[str, str], body: bytes,
                      settings: CarrierSettings, url: str, now_s: float) -> AnswerRequest | Refusal:
        """Check one request to one of this carrier's routes: its signature or credentials first, then its
        fields (an unsigned request learns nothing of what we would have read from it). ``headers``: lower-case
        names; ``target``: path and query as received; ``url``: the public URL the carrier called (our base URL
        + ``target``). ``WebhookError`` (the peer's bad input) becomes a 400 in the caller; a configured secret
        our own checks cannot use raises ``ValueError`` (our misuse: the shell answers 500)."""
        raise NotImplementedError

    def checked(self, route: Route, call_id: str | None) -> AnswerRequest | Refusal:
        """A request whose credentials passed, tied to ``call_id`` (None: it named no usable one, a 400)."""
        if call_id is None:
            return Refusal(400, "no usable call id")
        return AnswerRequest(self.name, route.kind, call_id)

    def answer_document(self, request: AnswerRequest, stream_url: str, token: str,
                        settings: CarrierSettings) -> tuple[bytes, bytes]:
        """(content type, body) of the answer that connects the call to ``stream_url`` (our ``ws://`` or
        ``wss://`` stream path) with ``token`` where the carrier carries it to the stream. ValueError: our URL
        cannot go into the document."""
        raise NotImplementedError

    def draining_answer(self, request: AnswerRequest, settings: CarrierSettings) -> DrainAnswer:
        """What a draining node answers the call's webhook: 503, so the carrier's fallback answer URL (where one
        is configured: Telnyx failover, Plivo fallback answer, Vonage fallback_answer_url) takes the call."""
        return DrainAnswer(503, b"text/plain", b"draining\n",
                           f"call {request.call_id}: {self.name} call refused, the node is draining (503)")

    def transfer_document(self, request: AnswerRequest, target: str) -> tuple[bytes, bytes]:
        """(content type, body) of the document a transfer fetches from our TRANSFER route (``target``: its path
        and query as received). ValueError for a carrier with no such route or a query with no usable target."""
        raise ValueError("not a transfer request")

    def check_upgrade(self, target: str, headers: Mapping[str, str | None], settings: CarrierSettings,
                      stream_bases: tuple[str, ...], now_s: float) -> Refusal | None:
        """Check the stream's WebSocket upgrade before it is accepted: None when it carries what the carrier
        puts on it (nothing, by default: the session token at ``start`` admits the stream), else the refusal."""
        return None

    # -- the stream -----------------------------------------------------------------------------------------

    def new_stream(self) -> CarrierStream:
        raise NotImplementedError

    def session_token(self, started: StreamStarted, upgrade_target: str) -> str:
        """The session token a stream presents (by default among its custom parameters); "" when none."""
        return started.custom_parameter(SESSION_TOKEN) or ""

    def stream_id(self, started: StreamStarted, stream: CarrierStream) -> str:
        """The stream's own id for the arena and logs (the call id for a carrier whose stream has none)."""
        return started.stream_id or started.call_id

    def arena_encoding(self, started: StreamStarted, alaw_passthrough: bool) -> str:
        """The law of the frames this call's rings carry: mu-law, into which the edge transcodes once."""
        return ENCODING_PCMU

    def final_templates(self, started: StreamStarted, stream: CarrierStream, arena_law: str) -> WireTemplates | None:
        """The pacer's final templates when this carrier takes the arena's frames as they are (its messages
        are a frame in base64 between fixed text), else None: raw entries the gateway's edge finishes."""
        return None

    def outbound_sink(self, started: StreamStarted, stream: CarrierStream):
        """The edge's sink (voicecore/carriers/edge.py) that turns 20 ms frames, marks and clears into this
        carrier's messages, for a call whose wire entries are raw."""
        raise NotImplementedError

    def pacer_lead_ms(self, edge, configured_lead_ms: int) -> int:
        """The call's own send-ahead in the carrier's buffer (control word LEAD_NS, in ms), 0 for the pacer's
        configured lead: enough for a carrier whose edge sends each frame as it comes."""
        return 0

    def backlog_max_frames(self, settings: CarrierSettings) -> int:
        """The bound on the call's audio its echoes have not confirmed played, in 20 ms frames (control word
        BACKLOG_MAX_FRAMES), 0 for none: the lead is kept by time alone."""
        return 0

    def new_backlog(self, templates: WireTemplates):
        """The gateway's keeper of that bound for one call (needed when :meth:`backlog_max_frames` is not 0)."""
        raise NotImplementedError

    # -- hang-up and transfer --------------------------------------------------------------------------------

    def end_call(self, ref: CallRef, transfer: bool, target: str, settings: CallControlSettings, *, now_s: float,
                 nonce: str) -> RestRequest | CloseStream | CannotEnd:
        """What the agent's HangUp (or Transfer to ``target``) of ``ref``'s call becomes. ``nonce`` is the same
        for every retry of one action. ValueError: an id, target or key that cannot go into the request."""
        raise ValueError(f"no call control for carrier {self.name!r}")

    def send_digits(self, ref: CallRef, digits: str, settings: CallControlSettings, *, now_s: float,
                    nonce: str) -> RestRequest | InBand | CannotEnd:
        """What sending DTMF ``digits`` (voicecore/outbound/dtmf.py syntax, checked) to ``ref``'s call becomes: the
        carrier's send-DTMF request, or in-band tones on the stream (the default: a carrier whose stream is all
        there is). ValueError as :meth:`end_call`."""
        return InBand(f"{self.name}: no DTMF request beside the stream")

    def parse_response(self, status_code: int, body: bytes) -> RestResult:
        """Read the carrier's answer to a request from :meth:`end_call`."""
        raise ValueError(f"no REST answers for carrier {self.name!r}")

    # -- placing calls ---------------------------------------------------------------------------------------

    def place_call_request(self, node_url: str, api_base: str, account_id: str, secret: str, to: str, from_: str,
                           fields: Mapping[str, str], machine_detection: str, *, now_s: float,
                           nonce: str) -> RestRequest:
        """The request that asks the carrier to call ``to`` from ``from_``: answered, the call fetches the answer
        webhook of the node at ``node_url`` (which streams it to us, ``fields`` to the agent) and reports its
        progress to the node. ``account_id`` and ``secret``: the values of ``placing``'s settings;
        ``machine_detection`` ("", Enable or DetectMessageEnd): the carrier's own AMD too, asynchronous, its
        result to the node. ``now_s`` and ``nonce``: for a carrier that signs each request. ValueError: a number,
        field or setting that cannot go into the request."""
        raise ValueError(f"placing calls is not built for carrier {self.name!r}")

    def parse_placed(self, status_code: int, body: bytes) -> PlacedCall:
        """Read the carrier's answer to a request from :meth:`place_call_request`."""
        raise ValueError(f"placing calls is not built for carrier {self.name!r}")
