"""What the carrier simulator (voicecore/sim/) asks a carrier, and the shapes those answers share.

One :class:`CarrierSimulator` per carrier package (``voicecore/carriers/<name>/sim.py``), reached from the carrier's
descriptor as ``Carrier.simulator`` (voicecore/carriers/base.py). It answers, for its carrier:

- **its requests**: the path of its answer webhook on the gateway (``answer_path``), the User-Agent it sends, and
  each request signed as the carrier signs it: the answer webhook (:meth:`CarrierSimulator.answer_webhook`), the
  request that follows a stream which ended with the call still up (:meth:`CarrierSimulator.continuation_request`),
  the headers of its stream's upgrade (:meth:`CarrierSimulator.stream_headers`);
- **its documents**: reading its answer document into where it streams and what it carries there
  (:meth:`CarrierSimulator.parse_answer`, :meth:`CarrierSimulator.parse_continuation`);
- **its ids**: the shape of a simulated call's ids (:meth:`CarrierSimulator.new_identity`) and of its signing nonces;
- **the calls its API placed** (voicecore/sim/carrier_rest.py): the progress callbacks of such a call, its AMD
  and their callbacks, signed as the carrier signs them, and what a transfer through its API fetches;
- **running it**: the settings a stack serves it with (``serving_settings``), and whether its stream may deliver
  caller frames out of order (``reorders_caller_frames``: the demo's jitter).

The defaults are a carrier the simulator's carrier modes do not play (Twilio's webhook and stream are
voicecore/sim/carrier.py place_call's own) and whose API places no calls: a carrier overrides what it does.
Playing the stream itself is the simulator's adapter on the carrier's own end of its protocol (the descriptor's
``carrier_side``: voicecore/sim/carrier_modes_core.py); the simulated REST APIs' checks are
voicecore/sim/carrier_rest_core.py's.

Must not know: sockets, HTTP, the clock or randomness: time comes in as ``now_s``, nonces as ``nonce``, new ids
from the shell's :class:`RandomIds`.
"""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from voicecore.carriers.events import ENCODING_PCMU
from voicecore.timing import SAMPLE_RATE_HZ

__all__ = [
    "AmdCallback",
    "CallIdentity",
    "CarrierCredentials",
    "CarrierSimulator",
    "PlacedCallRequest",
    "RandomIds",
    "StreamTarget",
    "TwimlCallsSimulator",
    "WebhookRequest",
    "continuation_from_xml",
    "iso_timestamp",
    "parse_xml",
    "redirect_after",
]


# ----- the shapes ----------------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class PlacedCallRequest:
    """A Calls API request the simulated carrier took: what it will dial and tell."""

    account_sid: str
    call_sid: str
    to: str
    from_: str
    url: str  # the answer document's address ("" when the request gave the document itself)
    twiml: str
    status_callback: str
    status_events: tuple[str, ...]
    machine_detection: str
    async_amd: bool
    carrier: str = "twilio"
    ring_url: str = ""  # Plivo: where its ring goes (its hang-up goes to status_callback, its hangup_url)
    # where an asynchronous AMD's result goes: Twilio's (TeXML's) AsyncAmdStatusCallback, Plivo's
    # machine_detection_url, Vonage's event_url; machine_detection holds the carrier's own value (Twilio's
    # Enable / DetectMessageEnd, Plivo's true / hangup, Vonage's mode)
    amd_callback: str = ""


@dataclass(frozen=True, slots=True)
class AmdCallback:
    """One callback of a carrier's asynchronous AMD, sent once ``at_ms`` of the callee's audio has played (a
    carrier's AMD listens to what the callee says): ``fields`` for :meth:`CarrierSimulator.callback_request`;
    ``beep``: it tells the voicemail's beep (Vonage's ``beep_start``), not the verdict."""

    at_ms: int
    fields: Mapping[str, str]
    beep: bool = False


class RandomIds(Protocol):
    """Where new ids and nonces come from (the shell's secrets and uuid: voicecore/sim/random_ids.py)."""

    def uuid(self) -> str: ...

    def uuid_hex(self) -> str: ...

    def token_hex(self, nbytes: int) -> str: ...

    def token_urlsafe(self, nbytes: int) -> str: ...


# ----- the carrier's simulator side -------------------------------------------------------------------


class CarrierSimulator:
    """One carrier as the carrier simulator plays it (the module docstring lists what it answers)."""

    # The gateway's path for its answer webhook: a public contract, the carrier's console points there
    # (docs/reference/carriers.md#answer-webhooks). Written in each carrier's sim.py, not read from its
    # descriptor's routes, so that the simulator checks the gateway still serves it. Everything after the answer
    # (the stream's URL, path, query and where the session token travels) is read from the answer. "": the
    # simulator's carrier modes do not play this carrier.
    answer_path: str = ""
    user_agent: str = ""
    # The settings (voicecore/config.py names, the keys of CarrierCredentials.stack_settings) a stack checks this
    # carrier's requests with; the carrier's halves stay with the simulator.
    serving_settings: tuple[str, ...] = ()
    # Its stream does not keep caller frames in order (Telnyx documents reordering): the simulator may send a
    # share of them after their successor (voicecore/sim/carrier_modes_core.py TelnyxCall's jitter).
    reorders_caller_frames: bool = False
    # A call its API placed gets an id of its own once answered, beside the placing request's (Plivo: the
    # CallUUID, apart from the RequestUUID); the answered call's stream and REST requests name that one.
    answered_call_has_own_id: bool = False

    def gateway_settings(self, credentials: CarrierCredentials) -> dict[str, str]:
        """Config field -> value that make a stack serve this carrier with ``credentials``."""
        settings = credentials.stack_settings()
        return {name: settings[name] for name in self.serving_settings if name in settings}

    # -- ids -------------------------------------------------------------------------------------------------

    def new_stream_id(self, random_ids: RandomIds) -> str:
        return random_ids.uuid()

    def new_identity(self, call_id: str | None, account_id: str | None, from_number: str, to_number: str,
                     random_ids: RandomIds) -> CallIdentity:
        """The ids of a new simulated call (``call_id``, ``account_id``: given ones kept): UUIDs, as Plivo's
        CallUUID and Vonage's uuid are (Vonage's application id stands in for an account)."""
        return CallIdentity(call_id or random_ids.uuid(), account_id or random_ids.uuid(),
                            self.new_stream_id(random_ids), random_ids.uuid(), from_number, to_number)

    def new_nonce(self, random_ids: RandomIds) -> str:
        """A nonce for one signed request (Plivo's signature nonce, Vonage's JWT id)."""
        return random_ids.token_hex(10)

    # -- a call that comes in ----------------------------------------------------------------------------------

    def answer_webhook(self, url: str, ids: CallIdentity, credentials: CarrierCredentials, *, now_s: float,
                       nonce: str, answer_method: str = "POST", request_uuid: str = "") -> WebhookRequest:
        """The signed answer webhook to ``url`` the carrier sends when the call comes in. ``now_s``: Unix seconds
        (a timestamp or a JWT's iat); ``answer_method``: the method a carrier that lets its application choose
        asks with; ``request_uuid``: a call its API placed, answered by the callee, named by the request that
        placed it."""
        raise ValueError(f"{type(self).__name__}: no answer webhook in the simulator's carrier modes")

    def parse_answer(self, body: bytes) -> StreamTarget:
        """Read the carrier's answer document. Raises ValueError when it does not start a stream."""
        raise ValueError(f"{type(self).__name__}: no answer document in the simulator's carrier modes")

    def stream_headers(self, target: StreamTarget, credentials: CarrierCredentials, *, nonce: str,
                       now_s: float) -> dict[str, str]:
        """The extra headers of the carrier's WebSocket upgrade to ``target.url``: exactly what the carrier puts
        there, no more (by default nothing: the session token in the stream admits it)."""
        return {}

    def continuation_request(self, url: str, ids: CallIdentity, credentials: CarrierCredentials, *, now_s: float,
                             nonce: str, target: StreamTarget | None = None, leg_id: str = "") -> WebhookRequest:
        """The signed request the carrier sends to ``url`` (``target.redirect``) once the stream ``target`` ended
        with the call still up; ``leg_id``: the id of the stream's leg where the carrier names it
        (default ``ids.stream_id``)."""
        raise ValueError(f"{type(self).__name__}: names no continuation after its stream")

    def parse_continuation(self, body: bytes) -> StreamTarget | None:
        """Read the document a continuation answered: the new stream it starts, or None when it starts none (the
        call ends). ValueError: not a document of the carrier, or a stream it would refuse."""
        raise ValueError(f"{type(self).__name__}: names no continuation after its stream")

    # -- a call its API placed -------------------------------------------------------------------------------

    def callback_request(self, placed: PlacedCallRequest, url: str, fields: Mapping[str, str],
                         credentials: CarrierCredentials, *, now_s: float, nonce: str) -> WebhookRequest:
        """The callback with ``fields`` to ``url`` about ``placed``'s call, signed as the carrier signs its
        webhooks."""
        raise ValueError(f"{type(self).__name__}: places no calls")

    def progress_callback(self, placed: PlacedCallRequest, status: str, *, sequence: int, duration_s: int | None,
                          call_uuid: str) -> tuple[str, dict[str, str]] | None:
        """(url, fields) of the callback that tells one step of the placed call's progress (``status``: initiated,
        ringing, in-progress, busy, no-answer, failed or completed; ``duration_s`` with completed), or None when
        the carrier tells none for it. ``sequence``: the callbacks numbered so far; ``call_uuid``: the answered
        call's own id when it has one (``answered_call_has_own_id``)."""
        return None

    def amd_mode(self, placed: PlacedCallRequest) -> str:
        """The mode (Enable or DetectMessageEnd) the carrier's asynchronous AMD answers ``placed`` in, "" when the
        request asked for none it reports."""
        return ""

    def amd_callbacks(self, placed: PlacedCallRequest, answered_by: str, at_ms: int, beep_at_ms: int | None,
                      call_uuid: str) -> tuple[AmdCallback, ...]:
        """What the carrier's AMD tells the placed call's ``amd_callback`` once it decided ``answered_by`` (Twilio's
        AnsweredBy vocabulary) after ``at_ms`` of the callee's audio; ``beep_at_ms``: where a voicemail's beep
        starts (None: none)."""
        return ()

    def transfer_fetch(self, url: str, call_id: str, credentials: CarrierCredentials, *,
                       nonce: str) -> WebhookRequest | None:
        """The request the carrier sends when a transfer through its API names a URL to fetch the call's next
        document from (``url``), or None: its transfer fetches nothing."""
        return None


class TwimlCallsSimulator(CarrierSimulator):
    """The Calls API shape Twilio's has and Telnyx's TeXML copies: a form status callback per progress event
    asked for (the final status always), numbered by ``SequenceNumber``, and the asynchronous AMD's one
    ``AnsweredBy`` callback. A subclass signs them (:meth:`CarrierSimulator.callback_request`)."""

    def progress_callback(self, placed, status, *, sequence, duration_s, call_uuid):
        event = {"in-progress": "answered"}.get(status, status)
        final = status in ("completed", "busy", "no-answer", "failed")
        if not placed.status_callback or (event not in placed.status_events and not final):
            return None
        form = {"CallSid": placed.call_sid, "AccountSid": placed.account_sid, "From": placed.from_, "To": placed.to,
                "Direction": "outbound-api", "CallStatus": status, "SequenceNumber": str(sequence),
                "ApiVersion": "2010-04-01", "CallbackSource": "call-progress-events"}
        if duration_s is not None:
            form["CallDuration"] = str(duration_s)
        return placed.status_callback, form

    def amd_mode(self, placed):
        if placed.machine_detection and placed.async_amd and placed.amd_callback:
            return placed.machine_detection
        return ""

    def amd_callbacks(self, placed, answered_by, at_ms, beep_at_ms, call_uuid):
        # CallSid, AccountSid, AnsweredBy, MachineDetectionDuration: no CallStatus
        return (AmdCallback(at_ms, {"CallSid": placed.call_sid, "AccountSid": placed.account_sid,
                                    "AnsweredBy": answered_by, "MachineDetectionDuration": str(at_ms)}),)


# ----- what the carriers' sim.py share ------------------------------------------------------------------


def parse_xml(body: bytes, what: str) -> ElementTree.Element:
    try:
        return ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise ValueError(f"{what} is not XML: {exc}") from None


def continuation_from_xml(body: bytes, stream_path: str,
                          parse_answer: Callable[[bytes], StreamTarget]) -> StreamTarget | None:
    """An XML continuation's answer (TeXML, Plivo XML): the stream it starts (its ``stream_path`` element, read
    as an answer document), or None when it starts none (``<Hangup/>``: the call ends)."""
    root = parse_xml(body, "the continuation's answer")
    if root.tag != "Response":
        raise ValueError("the continuation's answer has no <Response>")
    if root.find(stream_path) is None:
        return None
    return parse_answer(body)


def redirect_after(root: ElementTree.Element, element: ElementTree.Element | None) -> str:
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


def iso_timestamp(now_s: float) -> str:
    """ISO 8601 in UTC with milliseconds ("2020-03-31T12:00:00.000Z", Vonage's event ``timestamp``), by
    arithmetic (a pure module imports no datetime)."""
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
