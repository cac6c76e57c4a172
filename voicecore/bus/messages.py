"""Control-bus messages: msgpack maps with a schema version and a type, validated into frozen dataclasses.

Owns the message vocabulary and its codec; knows nothing of sockets (transport.py) or of who sends what.
A new message is one dataclass plus one entry in ``_TYPES``. Decoding never raises: anything unknown,
oversized or mistyped becomes a ``Rejected`` that the receiving loop counts and drops
(docs/explanation/architecture.md#section-5).
"""

from __future__ import annotations

import dataclasses
import typing

import msgpack

SCHEMA_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Heartbeat:
    process: str
    pid: int
    seq: int
    sent_ns: int
    interval_ms: int  # the next one comes within this (voicecore/timing.py heartbeat_interval_ms)


@dataclasses.dataclass(frozen=True, slots=True)
class CallStarted:
    """The gateway claimed ``slot`` for a new call; the slot's control block is already published."""

    slot: int
    generation: int
    call_sid: str
    stream_sid: str
    account_sid: str  # for REST requests about the call (hang up, transfer)
    # A non-Twilio call's carrier ("telnyx", "plivo", "vonage", "exotel"; "" for Twilio) and the ids its stream
    # named, as sent (the arena's call id may be a hash of a long one): voicecore/carriers/call_control.py ends
    # or transfers the call with them.
    carrier: str = ""
    carrier_call_id: str = ""
    carrier_account_id: str = ""
    # An outbound call (the node placed it): "outbound", the callee's number and the call's fields (a JSON
    # object of strings) its answer document passed to the stream; "", "", "" for an inbound call.
    direction: str = ""
    callee: str = ""
    fields: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class CallEnded:
    slot: int
    generation: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class EndStream:
    """Model worker -> gateway: close the call's media stream (normal closure), the way a carrier without a
    REST call for it ends or passes on a call (Exotel's Voicebot applet: its flow's next applet takes over)."""

    slot: int
    generation: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class CancelTag:
    """Doorbell to the pacer: the model worker cancelled ``tag`` in the control block; act now, not next tick."""

    slot: int
    generation: int
    tag: int
    decision_ns: int


@dataclasses.dataclass(frozen=True, slots=True)
class Dtmf:
    """A key the caller pressed (gateway -> model worker, where the call's controller lives)."""

    slot: int
    generation: int
    digit: str


@dataclasses.dataclass(frozen=True, slots=True)
class CarrierAmd:
    """Gateway -> model worker: the carrier's answering-machine detection result for a call the node placed,
    from a verified webhook (Twilio's AnsweredBy values: voicecore/outbound/answer.py CARRIER_ANSWERS). The
    call's answer detector weighs it with its own evidence."""

    slot: int
    generation: int
    answered_by: str


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    """A process's counters and latency summaries, for /metrics and the demo's report."""

    process: str
    pid: int
    values: dict[str, float]


@dataclasses.dataclass(frozen=True, slots=True)
class VendorHealth:
    """Model worker -> gateway, on a change and every second: does the realtime vendor accept this node's
    configuration? ``reason``: the vendor's refusal (kind, code, its message); ``since_s``: wall-clock time
    of the refusal. /healthz reports it (503)."""

    pid: int
    ok: bool
    reason: str
    since_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class GateOpen:
    """Model worker -> validator: response ``tag`` is gated (rings.tag_open(..., gated=True)); judge its
    transcript under ``policy`` ("off", "numbers", "scripted", "strict"). ``script`` is the expected
    text of a scripted prompt ("" otherwise), ``language`` "en", "sv" or "auto", ``forbidden`` the
    prompt's or flow node's forbidden phrases, one per line ("" for none). ``facts`` is text whose numbers
    count as grounded for this response only, besides the knowledge base's: the result of the tool the
    agent is answering from ("" for none). It comes last with a default, so positional constructions
    that predate it still build the same message. ``resend``: the model worker sends a gate it opened again,
    with all of its transcript after it, because a new validator serves (the one it was sent to died): a gate
    still open starts over, one already judged stays judged."""

    slot: int
    generation: int
    tag: int
    policy: str
    script: str
    language: str
    forbidden: str
    facts: str = ""
    resend: bool = False

# The reason of a rejection for a transcript of a gate the validator never saw opened: a model worker that
# still holds the gate sends it again (GateOpen.resend) instead of dropping the answer.
UNKNOWN_GATE = "no gate open for this tag (validator restarted?)"


@dataclasses.dataclass(frozen=True, slots=True)
class TranscriptDelta:
    """Model worker -> validator: the next piece of ``tag``'s transcript; ``audio_frames`` is how many
    frames of that tag were written to the outbound ring when it arrived (maps text to audio)."""

    slot: int
    generation: int
    tag: int
    delta: str
    audio_frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class TranscriptDone:
    """Model worker -> validator: ``tag``'s transcript is complete (``transcript`` is the model's final
    text; "" means "the deltas as sent"); ``audio_frames`` as in TranscriptDelta."""

    slot: int
    generation: int
    tag: int
    transcript: str
    audio_frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """Validator -> model worker: frames of ``tag`` with index < ``approved_frames`` may be released
    (rings.tag_approve; only rises), or ``rejected``: cancel the tag (rings.tag_cancel) and speak the
    safe line. Sent once per rejection and only when approved_frames rises. ``citations`` is JSON text
    of [{"file", "snippet", "number", "line"}] for the numbers approved so far."""

    slot: int
    generation: int
    tag: int
    approved_frames: int
    rejected: bool
    reason: str
    citations: str


@dataclasses.dataclass(frozen=True, slots=True)
class ObserveEvents:
    """Model worker -> recorder: its live calls' newest observable events (voicecore/observe/events.py), one
    message for every call at a time: JSON text of ``[[call_sid, at, t_ms, type, data], ...]``, each call's in
    the order they happened; ``at`` wall clock (seconds since the epoch). The recorder numbers them."""

    events: str


@dataclasses.dataclass(frozen=True, slots=True)
class ObservedEvents:
    """Recorder -> console: events as stored, numbered per call: JSON text of rows ``[[call_sid, seq, at, t_ms,
    type, data], ...]`` (``data`` JSON text), each call's ``seq`` rising by one (voicecore/observe/numbering.py)."""

    events: str


@dataclasses.dataclass(frozen=True, slots=True)
class RecordFinished:
    """Model worker -> recorder: it finished the call record ``name`` (a file name in the record directory),
    and ``summary`` is what the store keeps of it (voicecore/store/summary.py ``summary_to_json``), built
    as the call went, so the recorder stores it without reading the file; "" when it did not fit a
    message: the recorder reads the record."""

    name: str
    summary: str


@dataclasses.dataclass(frozen=True, slots=True)
class CallSpooled:
    """Model worker -> recorder: a call that wrote no record ended, and its summary waits in the store spool
    under ``name`` (voicecore/store/spool.py, in the runtime directory) until the recorder has stored it;
    ``summary`` is the same summary when it fits a message ("": the recorder reads the spool file)."""

    name: str
    summary: str


@dataclasses.dataclass(frozen=True, slots=True)
class Rejected:
    """What a bad message decodes to; never sent."""

    reason: str


Message = (
    Heartbeat | CallStarted | CallEnded | EndStream | CancelTag | Dtmf | CarrierAmd | Stats | VendorHealth
    | GateOpen | TranscriptDelta | TranscriptDone | Verdict | ObserveEvents | ObservedEvents | RecordFinished
    | CallSpooled
)

_TYPES: dict[str, type] = {
    "heartbeat": Heartbeat,
    "call.started": CallStarted,
    "call.ended": CallEnded,
    "stream.end": EndStream,
    "cancel": CancelTag,
    "dtmf": Dtmf,
    "carrier.amd": CarrierAmd,
    "stats": Stats,
    "vendor.health": VendorHealth,
    "gate.open": GateOpen,
    "transcript.delta": TranscriptDelta,
    "transcript.done": TranscriptDone,
    "verdict": Verdict,
    "observe.events": ObserveEvents,
    "observed.events": ObservedEvents,
    "record.finished": RecordFinished,
    "call.spooled": CallSpooled,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}
_FIELDS = {cls: typing.get_type_hints(cls) for cls in _TYPES.values()}


_FIELD_NAMES = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _TYPES.values()}
BATCH = "batch"  # the envelope of several messages sent as one (``encode_batch``); not a message of its own
# An envelope's own bytes besides its messages': the map's header, "v": 1, "t": "batch", "m" and the array's
# header (at most 5 bytes): a batch of messages whose encodings sum to at most MAX_BATCHED_BYTES fits a message.
_BATCH_HEAD = msgpack.packb({"v": SCHEMA_VERSION, "t": BATCH, "m": None})[:-1]  # without the nil of "m"
MAX_BATCHED_BYTES = MAX_MESSAGE_BYTES - len(_BATCH_HEAD) - 5


def encode(message: Message) -> bytes:
    body = {name: getattr(message, name) for name in _FIELD_NAMES[type(message)]}
    body["v"] = SCHEMA_VERSION
    body["t"] = _NAMES[type(message)]
    return msgpack.packb(body, use_bin_type=True)


def encode_batch(encoded: list[bytes]) -> bytes:
    """Several encoded messages (``encode``) as one bus message, in order: a map of the schema version, type
    "batch" and the array of their maps. A msgpack array is its header and its items' bytes, so nothing is
    encoded twice. Their encodings must sum to at most MAX_BATCHED_BYTES (``batches``)."""
    count = len(encoded)
    if count < 16:
        header = bytes((0x90 | count,))
    elif count < 1 << 16:
        header = b"\xdc" + count.to_bytes(2, "big")
    else:
        header = b"\xdd" + count.to_bytes(4, "big")
    return b"".join((_BATCH_HEAD, header, *encoded))


def batches(encoded: list[bytes]) -> list[list[bytes]]:
    """``encoded`` cut, in order, into runs that each fit one batch (MAX_BATCHED_BYTES)."""
    runs: list[list[bytes]] = []
    run: list[bytes] = []
    size = 0
    for item in encoded:
        if run and size + len(item) > MAX_BATCHED_BYTES:
            runs.append(run)
            run, size = [], 0
        run.append(item)
        size += len(item)
    if run:
        runs.append(run)
    return runs


def _field_ok(value: object, hint: object) -> bool:
    if hint is int:
        return type(value) is int
    if hint is str:
        return type(value) is str
    if hint is bool:
        return type(value) is bool
    if hint is float:
        return type(value) is float
    if hint == dict[str, float]:
        return type(value) is dict and all(
            type(k) is str and type(v) in (int, float) for k, v in value.items()
        )
    return False


def decode(raw: bytes) -> Message | Rejected:
    """One bus message; a batch (``encode_batch``) is not one: ``decode_all`` reads both."""
    body = _unpack(raw)
    if isinstance(body, Rejected):
        return body
    if body.get("t") == BATCH:
        return Rejected("a batch where one message was expected")
    return _from_body(body)


def decode_all(raw: bytes) -> list[Message | Rejected]:
    """The messages of one bus message, in order: a batch's every message (each validated on its own: one
    bad message of a batch is one ``Rejected``, the others are read), else the one message."""
    body = _unpack(raw)
    if isinstance(body, Rejected):
        return [body]
    if body.get("t") != BATCH:
        return [_from_body(body)]
    items = body.get("m")
    if set(body) != {"v", "t", "m"} or type(items) is not list:
        return [Rejected("batch: malformed")]
    return [_from_body(item) if type(item) is dict else Rejected("batch: an item is not a map") for item in items]


def _unpack(raw: bytes) -> dict | Rejected:
    if len(raw) > MAX_MESSAGE_BYTES:
        return Rejected(f"oversized message: {len(raw)} bytes")
    try:
        body = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        return Rejected(f"undecodable msgpack: {type(exc).__name__}")
    if type(body) is not dict:
        return Rejected("message is not a map")
    if body.get("v") != SCHEMA_VERSION:
        return Rejected(f"unsupported schema version {body.get('v')!r}")
    return body


def _from_body(body: dict) -> Message | Rejected:
    if body.get("v") != SCHEMA_VERSION:
        return Rejected(f"unsupported schema version {body.get('v')!r}")
    cls = _TYPES.get(body.get("t"))  # type: ignore[arg-type]
    if cls is None:
        return Rejected(f"unknown message type {body.get('t')!r}")
    hints = _FIELDS[cls]
    extra = set(body) - set(hints) - {"v", "t"}
    if extra:
        return Rejected(f"{body['t']}: unknown fields {sorted(extra)}")
    for name, hint in hints.items():
        if name not in body:
            return Rejected(f"{body['t']}: missing field {name}")
        if not _field_ok(body[name], hint):
            return Rejected(f"{body['t']}: field {name} has the wrong type")
    return cls(**{name: body[name] for name in hints})
