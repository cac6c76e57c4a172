"""Sans-I/O pieces of Twilio's HTTP side: the voice webhook, the TwiML answer, the stream status callback,
single-use session tokens and the request-signature check (docs/explanation/protocols.md#a4;
docs/explanation/architecture.md#section-3). The section numbers in parentheses below (A.1, A.4) are the
protocols page's.

Owns: parsing and validating the form bodies Twilio POSTs, building the ``<Connect><Stream>`` TwiML (and
the ``<Reject>`` / ``<Redirect>`` a draining node answers instead), and the token table that ties a stream's ``start`` back to the webhook that announced it (the WebSocket
upgrade carries no body, so its signature alone could be replayed).

Must not know: HTTP servers, clocks, randomness. The shell reads the body and headers, passes ``now_ms``
from a monotonic clock and tokens it made with ``secrets``, and turns :class:`WebhookError` into a 400.
Unlike the stream protocol this side is one request, one answer, so the peer's bad input is reported by
raising :class:`WebhookError` (its ``reason`` is fixed text, never an echo of the request); our own misuse
raises ``ValueError``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from voicecore.errors import PeerInputError
from voicecore.timing import MAX_MESSAGE_BYTES, TOKEN_TTL_MS
from voicecore.twilio.signature import signature_is_valid

__all__ = [
    "MAX_FORM_BYTES",
    "MAX_FORM_FIELDS",
    "REDEEM_EXPIRED",
    "REDEEM_REUSED",
    "REDEEM_UNKNOWN",
    "REJECT_REASONS",
    "RedeemResult",
    "SessionTokens",
    "StatusCallback",
    "TokenStatistics",
    "VoiceRequest",
    "WebhookError",
    "check_signature",
    "parse_form",
    "parse_status_callback",
    "parse_voice_webhook",
    "twiml_connect_stream",
    "twiml_redirect",
    "twiml_reject",
]

MAX_FORM_BYTES = MAX_MESSAGE_BYTES
MAX_FORM_FIELDS = 200  # a voice webhook has a few dozen fields; more is not Twilio


class WebhookError(PeerInputError):
    """The request is not a well-formed Twilio request (the peer's fault: answer 400)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- TwiML -----------------------------------------------------------------------------------------

# XML 1.0 forbids most control characters outright; a value holding one cannot be written at all.
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# Attribute-value normalisation (XML 1.0 section 3.3.3) turns literal tab/CR/LF into spaces, so they
# are written as character references to arrive unchanged.
_XML_ATTRIBUTE_ESCAPES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\t": "&#9;", "\n": "&#10;", "\r": "&#13;"}
)


def _attribute(value: str) -> str:
    if not isinstance(value, str):
        raise ValueError("TwiML attribute values must be str")
    if _XML_FORBIDDEN.search(value):
        raise ValueError("TwiML attribute value holds a character XML cannot carry")
    return '"' + value.translate(_XML_ATTRIBUTE_ESCAPES) + '"'


def _check_url(url: str, schemes: tuple[str, ...], what: str) -> None:
    if not isinstance(url, str):
        raise ValueError(f"{what} must be a str")
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"{what} must be an absolute {' or '.join(schemes)} URL")


def twiml_connect_stream(
    stream_url: str, session_token: str, status_callback_url: str | None = None, name: str | None = None
) -> str:
    """The TwiML answer to a voice webhook: a bidirectional stream to ``stream_url``
    (docs/explanation/protocols.md#a4).

    ``session_token`` arrives in ``start.customParameters["session_token"]``. ``stream_url`` must carry no
    query string or fragment: Twilio refuses one (error 31922) and data goes in ``<Parameter>`` instead.
    Real Twilio needs ``wss://`` (A.1); ``ws://`` is accepted for the local carrier simulator.
    """
    _check_url(stream_url, ("wss", "ws"), "stream_url")
    if "?" in stream_url or "#" in stream_url:
        raise ValueError("stream_url must not carry a query string or fragment; use <Parameter>")
    if not isinstance(session_token, str) or not session_token:
        raise ValueError("session_token must be a non-empty str")
    stream_attributes = f"url={_attribute(stream_url)}"
    if name is not None:
        stream_attributes += f" name={_attribute(name)}"
    if status_callback_url is not None:
        _check_url(status_callback_url, ("https", "http"), "status_callback_url")
        stream_attributes += f' statusCallback={_attribute(status_callback_url)} statusCallbackMethod="POST"'
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        "<Response><Connect>"
        f"<Stream {stream_attributes}>"
        f'<Parameter name="session_token" value={_attribute(session_token)}/>'
        "</Stream>"
        "</Connect></Response>"
    )


REJECT_REASONS = ("busy", "rejected")


def twiml_reject(reason: str = "busy") -> str:
    """The TwiML that refuses a call without answering it (Twilio's ``<Reject>``: as the first verb, the
    call is never picked up, so it is not billed; ``busy`` plays a busy signal, ``rejected`` a
    not-in-service message, as the caller's own provider renders them). A draining node answers this."""
    if reason not in REJECT_REASONS:
        raise ValueError(f"reason must be one of {', '.join(REJECT_REASONS)}")
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="{reason}"/></Response>'


def twiml_redirect(url: str) -> str:
    """The TwiML that hands the call to the TwiML at ``url`` (Twilio's ``<Redirect>``, POSTed with the same
    call parameters): a draining node sends its callers to another node this way. The URL is the verb's
    text (its noun), so it is escaped as text, not as an attribute."""
    _check_url(url, ("https", "http"), "redirect url")
    if _XML_FORBIDDEN.search(url):
        raise ValueError("redirect url holds a character XML cannot carry")
    text = url.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Redirect method="POST">{text}</Redirect></Response>'


# --- session tokens --------------------------------------------------------------------------------

REDEEM_UNKNOWN = "unknown"  # never issued, or already swept or evicted
REDEEM_EXPIRED = "expired"  # issued, never redeemed, older than the TTL
REDEEM_REUSED = "reused"  # redeemed once already: a replayed stream


@dataclass(frozen=True, slots=True)
class RedeemResult:
    """``ok`` with the ``call_sid`` the token was issued for, or not ``ok`` with one ``REDEEM_*`` reason.
    The shell must also check ``call_sid`` against ``start.callSid``."""

    ok: bool
    call_sid: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class TokenStatistics:
    live: int
    issued: int
    redeemed: int
    refused: int
    expired: int  # swept after their TTL
    evicted: int  # pushed out early because the table was full


@dataclass(slots=True)
class _TokenEntry:
    call_sid: str
    expires_at_ms: int
    redeemed: bool = False


class SessionTokens:
    """Single-use session tokens, each valid ``ttl_ms`` after issue (``timing.TOKEN_TTL_MS``).

    ``now_ms`` must come from a monotonic clock (non-decreasing). The TTL is the same for all, so issue
    order is expiry order: the table is an ordered dict swept from the front, and when it is full the
    oldest token is evicted first. A redeemed token stays until its TTL so a replay reads "reused".
    """

    def __init__(self, ttl_ms: int = TOKEN_TTL_MS, max_entries: int = 10_000) -> None:
        if ttl_ms <= 0 or max_entries <= 0:
            raise ValueError("ttl_ms and max_entries must be positive")
        self.ttl_ms = ttl_ms
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _TokenEntry] = OrderedDict()
        self._last_now_ms: int | None = None
        self._issued = 0
        self._redeemed = 0
        self._refused = 0
        self._expired = 0
        self._evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def issue(self, token: str, call_sid: str, now_ms: int) -> None:
        if not isinstance(token, str) or not token:
            raise ValueError("token must be a non-empty str")
        self._advance(now_ms)
        self.expire(now_ms)
        if token in self._entries:
            raise ValueError("token already issued")  # the shell's generator collided or repeated
        while len(self._entries) >= self.max_entries:
            self._entries.popitem(last=False)
            self._evicted += 1
        self._entries[token] = _TokenEntry(call_sid=call_sid, expires_at_ms=now_ms + self.ttl_ms)
        self._issued += 1

    def redeem(self, token: str, now_ms: int) -> RedeemResult:
        self._advance(now_ms)
        entry = self._entries.get(token)
        if entry is None:
            return self._refuse(REDEEM_UNKNOWN)
        if entry.redeemed:
            return self._refuse(REDEEM_REUSED)
        if now_ms >= entry.expires_at_ms:
            return self._refuse(REDEEM_EXPIRED)
        entry.redeemed = True
        self._redeemed += 1
        return RedeemResult(ok=True, call_sid=entry.call_sid)

    def expire(self, now_ms: int) -> int:
        """Forget every token whose TTL has passed; returns how many went."""
        self._advance(now_ms)
        swept = 0
        while self._entries:
            token, entry = next(iter(self._entries.items()))
            if entry.expires_at_ms > now_ms:
                break
            del self._entries[token]
            swept += 1
        self._expired += swept
        return swept

    def statistics(self) -> TokenStatistics:
        return TokenStatistics(
            live=len(self._entries),
            issued=self._issued,
            redeemed=self._redeemed,
            refused=self._refused,
            expired=self._expired,
            evicted=self._evicted,
        )

    def _refuse(self, reason: str) -> RedeemResult:
        self._refused += 1
        return RedeemResult(ok=False, reason=reason)

    def _advance(self, now_ms: int) -> None:
        # The front-of-queue sweep is only right if time never goes back; a wall clock would break it.
        if self._last_now_ms is not None and now_ms < self._last_now_ms:
            raise ValueError("now_ms went backwards: pass a monotonic clock")
        self._last_now_ms = now_ms


# --- form bodies -----------------------------------------------------------------------------------


def parse_form(body: bytes, max_fields: int = MAX_FORM_FIELDS) -> dict[str, str]:
    """Decode an ``application/x-www-form-urlencoded`` body strictly.

    A repeated key keeps its **last** value (Twilio does not repeat keys; a request that does will not
    match its signature, which is computed over this dict, so it is refused there). Blank values are
    kept, since Twilio sends some fields empty.
    """
    if len(body) > MAX_FORM_BYTES:
        raise WebhookError("form body too big")
    try:
        text = body.decode("ascii")  # the encoding escapes everything else as %XX
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=max_fields,
        )
    except ValueError:  # UnicodeDecodeError included
        raise WebhookError("malformed form body") from None
    return dict(pairs)


def _form_string(form: Mapping[str, str], key: str) -> str:
    value = form.get(key)
    if not isinstance(value, str):
        raise WebhookError(f"missing {key}")
    return value


def _form_sid(form: Mapping[str, str], key: str, prefix: str) -> str:
    value = _form_string(form, key)
    if not re.fullmatch(prefix + "[0-9a-fA-F]{32}", value):
        raise WebhookError(f"{key} is not a {prefix} SID")
    return value


# --- voice webhook ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoiceRequest:
    call_sid: str
    account_sid: str
    from_: str  # a phone number: keep it out of log message text
    to: str


def parse_voice_webhook(form: Mapping[str, str]) -> VoiceRequest:
    """The fields of Twilio's voice webhook POST we use; the rest is ignored."""
    return VoiceRequest(
        call_sid=_form_sid(form, "CallSid", "CA"),
        account_sid=_form_sid(form, "AccountSid", "AC"),
        from_=_form_string(form, "From"),
        to=_form_string(form, "To"),
    )


# --- stream status callback ------------------------------------------------------------------------

STREAM_EVENTS = frozenset({"stream-started", "stream-stopped", "stream-error"})


@dataclass(frozen=True, slots=True)
class StatusCallback:
    """The ``<Stream statusCallback>`` POST (docs/explanation/protocols.md#a4). ``timestamp`` is kept as sent
    (RFC 3339)."""

    account_sid: str
    call_sid: str
    stream_sid: str
    stream_name: str  # equals stream_sid when the TwiML set no name
    stream_event: str  # one of STREAM_EVENTS
    stream_error: str | None  # present only with stream-error
    timestamp: str


def parse_status_callback(form: Mapping[str, str]) -> StatusCallback:
    stream_event = _form_string(form, "StreamEvent")
    if stream_event not in STREAM_EVENTS:
        # A.4: trust the hyphenated forms; "start"/"stop" seen in one codebase are not Twilio's.
        raise WebhookError("unknown StreamEvent")
    stream_error = form.get("StreamError")
    return StatusCallback(
        account_sid=_form_sid(form, "AccountSid", "AC"),
        call_sid=_form_sid(form, "CallSid", "CA"),
        stream_sid=_form_sid(form, "StreamSid", "MZ"),
        stream_name=_form_string(form, "StreamName"),
        stream_event=stream_event,
        stream_error=stream_error if isinstance(stream_error, str) else None,
        timestamp=_form_string(form, "Timestamp"),
    )


# --- signature -------------------------------------------------------------------------------------

_DEFAULT_PORTS = {"https": 443, "wss": 443, "http": 80, "ws": 80}


def _port_variants(url: str) -> list[str]:
    """``url`` as given, without its port and with the scheme's default port.

    Twilio signs some requests with the port in the URL and some without; its own RequestValidator
    accepts either, so we do too.
    """
    variants = [url]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return variants
    host_and_port = parts.netloc
    if port is not None:
        without_port = host_and_port[: host_and_port.rfind(":")]
        variants.append(urlunsplit(parts._replace(netloc=without_port)))
    elif parts.scheme in _DEFAULT_PORTS and host_and_port:
        with_port = f"{host_and_port}:{_DEFAULT_PORTS[parts.scheme]}"
        variants.append(urlunsplit(parts._replace(netloc=with_port)))
    return variants


def check_signature(auth_token: str, url: str, form: Mapping[str, str] | None, header_value: str | None) -> bool:
    """True if ``header_value`` (``X-Twilio-Signature``) signs ``url`` + ``form`` with ``auth_token``.

    For the WebSocket upgrade, ``url`` is the wss URL and ``form`` is empty (docs/explanation/protocols.md#a1).
    """
    if not header_value:
        return False
    # Check every variant (no short-circuit) so the time taken does not tell which one matched.
    results = [signature_is_valid(auth_token, candidate, form, header_value) for candidate in _port_variants(url)]
    return any(results)
