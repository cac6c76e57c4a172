"""What every carrier's HTTP side shares, without I/O: the peer's-fault error, strict readers of form, query and
JSON bodies, the shapes of a route, a checked request and a refusal, and the stream upgrade's headers.

Owns: the route table's entries (:class:`Route`: a path's carrier, its kind and its methods), what a carrier's
webhook check answers (:class:`AnswerRequest`, or a :class:`Refusal` with its status, body and log line), what a
draining node answers a carrier's call (:class:`DrainAnswer`), the name the session token travels under
(``SESSION_TOKEN``), the id a token tied to no call carries (``ANY_CALL``), which call ids a token and the arena
take, and reading an upgrade request's head. Each carrier's own checks (its signatures, its fields, its answer
document) are its package's (``voicecore/carriers/<name>/``); the gateway only calls them through the carrier's
descriptor (voicecore/carriers/base.py).

Must not know: HTTP servers, clocks, randomness. The peer's bad input is :class:`WebhookError` (its ``reason``
is fixed text, never an echo of the request); our own misuse raises ``ValueError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

from voicecore.errors import PeerInputError
from voicecore.timing import MAX_MESSAGE_BYTES

__all__ = [
    "ANSWER",
    "ANY_CALL",
    "EVENT",
    "MAX_FORM_BYTES",
    "MAX_FORM_FIELDS",
    "SESSION_TOKEN",
    "REATTACH",
    "TRANSFER",
    "AnswerRequest",
    "DrainAnswer",
    "Refusal",
    "Route",
    "WebhookError",
    "call_id",
    "parse_form",
    "parse_json_object",
    "parse_query",
    "reattach_request",
    "stream_url_bases",
    "upgrade_header",
    "upgrade_headers",
]

MAX_FORM_BYTES = MAX_MESSAGE_BYTES
MAX_FORM_FIELDS = 200  # a voice webhook has a few dozen fields; more is not a carrier

SESSION_TOKEN = "session_token"  # the parameter / header name the answer document gives the token under
# The kinds of a carrier route: the call's answer webhook, an event (status) callback, and the fetch of a
# transfer's document (Plivo's aleg_url).
ANSWER = "answer"
EVENT = "event"
TRANSFER = "transfer"
REATTACH = "reattach"  # the carrier went on after a stream's end: re-attach the call (voicecore/reattach.py)

# A webhook's call id, which the session token is tied to: what the arena takes as an id (voicecore/shm/
# arena.py: ids end up in file names and logs) and a signed token carries (voicecore/stream_tokens.py: 1-64
# ASCII bytes). Every carrier's call ids fit (Twilio's CallSids, Telnyx "v3:..." call_control_ids, Plivo and
# Vonage UUIDs, Exotel's 32 hex digits).
_CALL_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
# A token tied to no call (a request that named none: Exotel's dynamic-URL request may not): accepted for any
# call id; "*" is never one.
ANY_CALL = "*"


class WebhookError(PeerInputError):
    """The request is not a well-formed carrier request (the peer's fault: answer 400)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- routes, checked requests, refusals --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    carrier: str
    kind: str  # ANSWER, EVENT or TRANSFER
    methods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    """A checked webhook. ``call_id``: the call the session token is tied to (``ANY_CALL`` when the request
    names none; "" for an event the carrier's check reads no call from). ``note``: a line to log for an event
    the carrier reports (a stream status callback), "" for none."""

    carrier: str
    kind: str
    call_id: str
    note: str = ""
    # the stream parameters the answer document passes on besides the token (an outbound call's direction,
    # callee and fields: voicecore/carriers/twilio/outbound.py), as (name, value) in order
    parameters: tuple[tuple[str, str], ...] = ()
    token: str = ""  # REATTACH: the re-attach token the request's URL carried
    call_completed: bool = False  # REATTACH: the carrier says the call itself is over
    # EVENT: a placed call's status callback as the carrier's parser read it (Twilio: CallStatusEvent), None for others
    call_status: object = None
    # a placed call's carrier answering-machine detection result (Twilio's AnsweredBy values), from its verified
    # AMD callback, status callback or answer webhook; "" when the request carries none
    answered_by: str = ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused request: its status (400 unreadable, 403 not signed by the carrier) and a short fixed reason,
    for the log line and the body (``reason`` + a newline), never an echo of the request.

    A carrier whose refusals always had lines of their own gives them here: ``log`` (the whole line; "" for the
    common one, ``"webhook <path>: <reason> (answered <status>)"``), ``quiet`` (logged at INFO, not WARNING)
    and ``problem`` (the line's ``problem`` field; "" for the common rule: ``signature`` for a 403, else
    ``form``)."""

    status: int
    reason: str
    log: str = ""
    quiet: bool = False
    problem: str = ""


@dataclass(frozen=True, slots=True)
class DrainAnswer:
    """What a draining node answers a carrier's call webhook (the call is refused before it is connected):
    the status, body and content type, and the line it logs."""

    status: int
    content_type: bytes
    body: bytes
    log: str


def call_id(value: object) -> str | None:
    """``value`` if it is an id the session token and the arena take, else None."""
    return value if isinstance(value, str) and _CALL_ID.fullmatch(value) else None


def call_status_event(carrier: str, form: Mapping[str, str], parse: Callable[[Mapping[str, str]], Any],
                      detail: Callable[[Any], str], call_id: Callable[[Any], str] | None = None) -> AnswerRequest | Refusal:
    """A verified status callback of a call the node placed (every carrier's EVENT route for them, once its
    signature passed): the carrier's ``parse`` of its form (its call progress), as an EVENT the gateway logs and
    keeps in the store; 400 for a form the parser refuses. ``detail``: the log line's carrier-specific tail;
    ``call_id``: the id the event goes by (default: the progress's call_sid)."""
    try:
        progress = parse(form)
    except WebhookError as exc:
        return Refusal(400, "bad call status callback", f"call status callback rejected: {exc}", quiet=True,
                       problem="status")
    return AnswerRequest(carrier, EVENT, progress.call_sid if call_id is None else call_id(progress),
                         f"call {progress.call_sid}: {progress.direction or 'call'} status {progress.status} "
                         f"({detail(progress)})", call_status=progress,
                         answered_by=getattr(progress, "answered_by", "") or "")


def reattach_request(carrier: str, target: str, call: object, call_status: object,
                     over: frozenset[str]) -> AnswerRequest | Refusal:
    """A signed re-attach request's fields (every carrier's route of kind REATTACH, once its signature passed):
    the one ``token`` of ``target``'s query (the URL our answer document named), the call the carrier's form
    names (``call``) and whether its ``call_status`` is one of the carrier's ``over`` statuses."""
    path = target.split("?", 1)[0]
    try:
        tokens = [value for key, value in parse_qsl(urlsplit(target).query, keep_blank_values=True)
                  if key == "token"]
    except ValueError:
        tokens = []
    sid = call_id(call)
    if len(tokens) != 1 or not tokens[0] or sid is None:
        return Refusal(400, "bad reattach request", f"re-attach request {path}: no token or no call id", quiet=True,
                       problem="reattach")
    return AnswerRequest(carrier, REATTACH, sid, token=tokens[0], call_completed=call_status in over)


# --- bodies and queries ---------------------------------------------------------------------------------


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


def parse_query(target: str) -> dict[str, str]:
    """The query of ``target`` (a path and query as received), leniently split, strictly decoded."""
    try:
        return dict(parse_qsl(urlsplit(target).query, keep_blank_values=True, strict_parsing=False,
                              encoding="utf-8", errors="strict", max_num_fields=200))
    except ValueError:
        raise WebhookError("malformed query") from None


def parse_json_object(body: bytes) -> dict:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise WebhookError("body is not JSON") from None
    if type(value) is not dict:
        raise WebhookError("body is not a JSON object")
    return value


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
    section 5.5). A name sent more than once maps to None: a carrier's upgrade check refuses one it needs."""
    headers: dict[str, str | None] = {}
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        key = name.strip().lower().decode("latin-1")
        headers[key] = None if key in headers else value.strip().decode("latin-1")
    return headers


def upgrade_header(headers: Mapping[str, str | None], name: str) -> str | Refusal | None:
    """A checked header's value; None when absent or empty; a refusal when it came twice."""
    value = headers.get(name.lower(), "")
    if value is None:
        return Refusal(400, f"{name} sent twice on the upgrade")
    return value or None
