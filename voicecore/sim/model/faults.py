"""Vendor faults the model simulator injects on request (`POST /faults`), sans-I/O.

Owns the fault vocabulary (the kinds, which are one-shot and which last a while), the check of a fault
request's JSON, the windows of the lasting kinds with the count of faults applied, and the vendor's own words
for the failures it reports: the `error` object of a rate limit or a server error, as the real service sends
it in an `error` event and in a failed `response.done` (docs/explanation/protocols.md#c3; the rate-limit
message is the wording of OpenAI's rate-limit errors). What a fault does to one session lives in
`ModelSession` (the events it sends), what it does to a socket in the shell, voicecore.sim.model_server.

Kinds (the names `POST /faults` takes are a public contract; docs/how-to/run-the-bench.md#options lists
them):
- one-shot, applied to every live session at once: `drop_1011`, `malformed_json`, `unknown_event`,
  `unknown_response_delta`, `huge_delta`, `binary_frame`, `transcription_failed` (the session's next
  transcription ends in the vendor's `conversation.item.input_audio_transcription.failed`), `close_4000` (the
  vendor closes the session with 4000 `beta_api_shape_disabled`, as it closed sessions of the shape it retired);
- lasting `duration_ms`, for live sessions and those opened meanwhile: `rate_limit`, `server_error`,
  `insufficient_quota` (the account's quota is spent: every response fails with it), `stall`, `refuse_new`.
A request may name a `call` (the X-Voicecore-Call of the sessions to hit) to fault one call among many;
without it a fault hits every session.
"""

from __future__ import annotations

import binascii
import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

ONE_SHOT_KINDS = (
    "drop_1011", "malformed_json", "unknown_event", "unknown_response_delta", "huge_delta", "binary_frame",
    "transcription_failed", "close_4000",
)
WINDOW_KINDS = ("rate_limit", "server_error", "insufficient_quota", "stall", "refuse_new")
FAULT_KINDS = ONE_SHOT_KINDS + WINDOW_KINDS
# the windows a ModelSession itself keeps (its responses fail); stall and refuse_new are the socket's
RESPONSE_FAULT_KINDS = ("rate_limit", "server_error", "insufficient_quota")

MAX_DURATION_MS = 600_000  # a window longer than 10 minutes is a typo, not a test
HUGE_DELTA_CHARS = 4 * 2**20  # base64 text of the huge audio delta: 4 MiB (3 MiB of mu-law, 393 s)
UNKNOWN_DELTA_BYTES = 800  # audio of a delta for a response the session never created: 100 ms
# A server event type the Realtime protocol does not have (docs/explanation/protocols.md#c3); a client must
# ignore it.
UNKNOWN_EVENT_TYPE = "response.simulator_fault.unknown"
# A text frame that is valid UTF-8 but not JSON: an audio delta cut off mid-string, as a server that
# crashed while writing would leave it.
MALFORMED_TEXT = '{"type":"response.output_audio.delta","event_id":"event_fault","delta":"////'
# Bytes that are neither UTF-8 nor JSON: the vendor never sends binary frames, so a client must not
# read one as an event.
BINARY_PAYLOAD = bytes(range(256))
MULAW_SILENCE = 0xFF


class FaultRejected(ValueError):
    """A fault request the simulator does not accept; the message is the reason (the 400 body)."""


@dataclass(frozen=True, slots=True)
class FaultRequest:
    kind: str
    duration_ms: int = 0  # lasting kinds only
    call: str | None = None  # only the sessions of this call (their X-Voicecore-Call); None: every session


def parse_fault_request(body: bytes | str) -> FaultRequest:
    """The JSON body of `POST /faults`: {"kind": K, "duration_ms": D, "call": SID?}. Raises FaultRejected."""
    try:
        value = orjson.loads(body)
    except (ValueError, RecursionError):
        raise FaultRejected("the body is not JSON") from None
    if not isinstance(value, dict):
        raise FaultRejected("the body must be a JSON object")
    unknown = sorted(set(value) - {"kind", "duration_ms", "call"})
    if unknown:
        raise FaultRejected(f"unknown key(s): {', '.join(unknown)} (known: kind, duration_ms, call)")
    kind = value.get("kind")
    if kind not in FAULT_KINDS:
        raise FaultRejected(f"unknown kind {kind!r}; one of {', '.join(FAULT_KINDS)}")
    duration = value.get("duration_ms", 0)
    if not isinstance(duration, int) or isinstance(duration, bool) or not 0 <= duration <= MAX_DURATION_MS:
        raise FaultRejected(f"duration_ms must be an integer from 0 to {MAX_DURATION_MS}")
    if kind in WINDOW_KINDS and duration <= 0:
        raise FaultRejected(f"{kind} lasts duration_ms: give a positive duration_ms")
    call = value.get("call")
    if call is not None and (not isinstance(call, str) or not call):
        raise FaultRejected("call must be a non-empty string (a CallSid)")
    return FaultRequest(kind, duration if kind in WINDOW_KINDS else 0, call)


@dataclass(frozen=True, slots=True)
class FaultWindow:
    kind: str
    until_ms: int
    call: str | None

    def covers(self, call_sid: str | None, now_ms: int) -> bool:
        return now_ms < self.until_ms and (self.call is None or self.call == call_sid)


@dataclass(slots=True)
class FaultBook:
    """The faults a simulator applied: counts by kind, and the windows still open (expired ones pruned)."""

    windows: list[FaultWindow] = field(default_factory=list)
    applied: Counter = field(default_factory=Counter)

    def record(self, request: FaultRequest, now_ms: int) -> FaultWindow | None:
        """Count a fault; a lasting one opens its window (returned)."""
        self.applied[request.kind] += 1
        self.windows = [w for w in self.windows if w.until_ms > now_ms]
        if request.kind not in WINDOW_KINDS:
            return None
        window = FaultWindow(request.kind, now_ms + request.duration_ms, request.call)
        self.windows.append(window)
        return window

    def until_ms(self, kind: str, call_sid: str | None, now_ms: int) -> int | None:
        """When the latest open window of `kind` covering this call ends; None: none covers it now."""
        ends = [w.until_ms for w in self.windows if w.kind == kind and w.covers(call_sid, now_ms)]
        if not ends and all(w.until_ms <= now_ms for w in self.windows):
            self.windows.clear()  # all over: the shell's per-send check is one empty-list test again
        return max(ends) if ends else None

    def open_windows(self, call_sid: str | None, now_ms: int) -> list[FaultWindow]:
        """The windows a session of this call opened now inherits."""
        return [w for w in self.windows if w.covers(call_sid, now_ms)]

    def counts(self) -> dict[str, int]:
        """`GET /faults`: faults applied so far, every kind listed."""
        return {kind: self.applied[kind] for kind in FAULT_KINDS}


def vendor_error(kind: str, model: str, retry_after_ms: int) -> dict[str, Any]:
    """The `error` object of a failed response.create: type and code `rate_limit_exceeded`, `server_error`
    or `insufficient_quota`, with the vendor's message (the rate limit says when to try again)."""
    if kind == "rate_limit":
        return {
            "type": "rate_limit_exceeded",
            "code": "rate_limit_exceeded",
            "message": (
                f"Rate limit reached for {model} in organization org-voicecoresim on tokens per min (TPM): "
                f"Limit 40000, Used 39712, Requested 1180. Please try again in {max(retry_after_ms, 1) / 1000:g}s. "
                "Visit https://platform.openai.com/account/rate-limits to learn more."
            ),
        }
    if kind == "server_error":
        return {
            "type": "server_error",
            "code": "server_error",
            "message": (
                "The server had an error while processing your request. Sorry about that! You can retry your "
                "request, or contact us through our help center at help.openai.com if the error persists."
            ),
        }
    if kind == "insufficient_quota":
        return {
            "type": "insufficient_quota",
            "code": "insufficient_quota",
            "message": (
                "You exceeded your current quota, please check your plan and billing details. For more information "
                "on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
            ),
        }
    raise ValueError(f"not a response fault: {kind!r}")


@functools.cache
def huge_delta_base64() -> str:
    """HUGE_DELTA_CHARS of base64: mu-law silence, built once (4 MiB) and shared by every session."""
    audio = bytes([MULAW_SILENCE]) * (HUGE_DELTA_CHARS // 4 * 3)
    return binascii.b2a_base64(audio, newline=False).decode("ascii")
