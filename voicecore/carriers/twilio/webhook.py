"""Sans-I/O pieces of Twilio's HTTP side: the voice webhook, the TwiML answer, the stream status callback
and the request-signature check (docs/explanation/protocols.md#a4; docs/explanation/architecture.md#section-3).
The section numbers in parentheses below (A.1, A.4) are the protocols page's.

Owns: reading the fields of the form bodies Twilio POSTs (the strict form reader itself is every carrier's:
voicecore/carriers/webhook.py), building the ``<Connect><Stream>`` TwiML (and the ``<Reject>`` / ``<Redirect>``
a draining node answers instead). The session token the TwiML carries is voicecore/carriers/session_tokens.py's
(or voicecore/stream_tokens.py's, signed).

Must not know: HTTP servers, clocks, randomness. The shell reads the body and headers and turns
:class:`WebhookError` into a 400. Unlike the stream protocol this side is one request, one answer, so the peer's bad input is reported by
raising :class:`WebhookError` (its ``reason`` is fixed text, never an echo of the request); our own misuse
raises ``ValueError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from voicecore.carriers.webhook import MAX_FORM_BYTES, MAX_FORM_FIELDS, WebhookError, parse_form
from voicecore.carriers.twilio.signature import signature_is_valid

__all__ = [
    "MAX_FORM_BYTES",
    "MAX_FORM_FIELDS",
    "REJECT_REASONS",
    "StatusCallback",
    "VoiceRequest",
    "WebhookError",
    "check_signature",
    "parse_form",
    "parse_status_callback",
    "parse_voice_webhook",
    "twiml_connect_stream",
    "twiml_hangup",
    "twiml_redirect",
    "twiml_reject",
]

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
    stream_url: str, session_token: str, status_callback_url: str | None = None, name: str | None = None,
    parameters: tuple[tuple[str, str], ...] = (),
    action_url: str | None = None,
) -> str:
    """The TwiML answer to a voice webhook: a bidirectional stream to ``stream_url``
    (docs/explanation/protocols.md#a4).

    ``session_token`` arrives in ``start.customParameters["session_token"]``. ``stream_url`` must carry no
    query string or fragment: Twilio refuses one (error 31922) and data goes in ``<Parameter>`` instead.
    Real Twilio needs ``wss://`` (A.1); ``ws://`` is accepted for the local carrier simulator.
    ``action_url``: where Twilio goes on when the stream ends (``<Connect action>``, POSTed with the call's
    parameters): the re-attach step (voicecore/reattach.py), so a stream whose gateway died gets a new one.
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
    connect = "<Connect>"
    if action_url is not None:
        _check_url(action_url, ("https", "http"), "action_url")
        connect = f'<Connect action={_attribute(action_url)} method="POST">'
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response>{connect}"
        f"<Stream {stream_attributes}>"
        f'<Parameter name="session_token" value={_attribute(session_token)}/>'
        + "".join(f"<Parameter name={_attribute(key)} value={_attribute(value)}/>" for key, value in parameters)
        + "</Stream>"
        "</Connect></Response>"
    )


def twiml_hangup() -> str:
    """The TwiML that ends a call (the re-attach step's answer when the stream ended normally)."""
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>'


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


# --- form fields -----------------------------------------------------------------------------------


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
