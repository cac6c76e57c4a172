"""Re-attaching a call whose media stream ended unexpectedly (docs/how-to/drain.md#re-attach-after-a-gateway-failure).

A carrier never reconnects a media stream by itself, but it always goes on with the call's instructions when
the stream ends: Twilio's ``<Connect action="...">`` requests its action URL. Every answer document we
return names such a URL with a re-attach token in it. When the stream ended because the gateway that served
it died (or the carrier lost the connection), any healthy gateway of the node answers that request with a
new answer document for the same call, which opens a new stream; the model worker then resumes the call
from what it kept of it. When the stream ended normally (the caller hung up, the agent said goodbye or
transferred the call, the node drained it) the answer is ``<Hangup/>``.

Owns: the re-attach token (signed with the node's secret like the stream tokens, under a key of its own so
neither kind passes for the other; valid for the length of a call, not a minute), which stream endings a
re-attach follows (``REATTACHED_ENDS``), and the decision for one request (:func:`decide`).

Must not know: files, sockets, clocks, randomness. Whether a token was used before and whether a call
ended normally are the shell's (workers/gateway/reattach.py keeps both in the runtime directory, where a
restarted or standby gateway finds them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac

from voicecore import stream_tokens as st

__all__ = [
    "ATTACH",
    "HANGUP",
    "LEDGER_DIR",
    "REATTACHED_ENDS",
    "REATTACH_TTL_MS",
    "REFUSE",
    "Decision",
    "ReattachTokens",
    "decide",
    "derive_reattach_secret",
    "ended_normally",
]

# A re-attach token lives as long as a call may: it is issued with the answer document and used, if ever,
# when the stream ends (the carrier's own limit on a call is 4 hours for Twilio).
REATTACH_TTL_MS = 4 * 3600 * 1000

# The gateway's reasons for a stream's end after which the call is re-attached: the carrier lost the
# connection (a network failure), or this gateway is stopping under it (a restart: another gateway takes
# the call). A gateway that is killed records no reason at all, which reads the same. Every other end (the
# carrier's stop, the agent's end, a drain deadline, a protocol violation) is final.
REATTACHED_ENDS = frozenset({"connection lost", "shutdown"})

# The runtime dir's folder where the gateways of a node keep what a re-attach decision needs (used tokens,
# normal ends): it outlives a gateway, not the node (a stopped node's calls are over; `voicecore up` removes it).
LEDGER_DIR = "reattach"

ATTACH = "attach"  # answer with a new stream for the call
HANGUP = "hangup"  # the call is over: answer the carrier's hang-up verb
REFUSE = "refuse"  # not a request we made possible: 403

_LABEL = b"voicecore reattach token v1"


def derive_reattach_secret(stream_secret: bytes) -> bytes:
    """The re-attach tokens' MAC key, from the stream tokens' (stream_tokens.derive_secret): the same node
    secret, another key, so a stream token is never a re-attach token nor the reverse."""
    return hmac.new(stream_secret, _LABEL, hashlib.sha256).digest()


def ended_normally(reason: str) -> bool:
    """True when a stream that ended for ``reason`` (the gateway's word) must not be re-attached."""
    return reason not in REATTACHED_ENDS


class ReattachTokens:
    """Issue and check re-attach tokens: voicecore/stream_tokens.py's layout and MAC (the CallSid, the issuing
    node, the expiry, a nonce), with a re-attach key and a call's lifetime. ``check`` says whether a token is
    ours and names its call; that it was not used before is the shell's ledger's word (it outlives a gateway)."""

    def __init__(self, stream_secret: bytes, node_id: str, ttl_ms: int = REATTACH_TTL_MS) -> None:
        self._signed = st.SignedTokens(derive_reattach_secret(stream_secret), node_id, ttl_ms=ttl_ms)

    def issue(self, call_sid: str, now_ms: int, nonce: bytes) -> str:
        """``now_ms``: wall clock (unix ms); ``nonce``: stream_tokens.NONCE_BYTES random bytes."""
        return self._signed.issue(call_sid, now_ms, nonce)

    def check(self, token: str, now_ms: int) -> st.TokenCheck:
        return self._signed.check(token, now_ms)


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    action: str  # ATTACH, HANGUP or REFUSE
    reason: str  # for the log line (fixed text and the call's id, never the request's text)
    call_sid: str | None = None


def decide(check: st.TokenCheck, call_sid: str, first_use: bool, ended: bool, draining: bool,
           call_completed: bool = False) -> Decision:
    """One re-attach request's answer.

    ``check``: the token's verdict; ``call_sid``: the call the carrier's request names; ``first_use``: the
    token was never presented before (the shell claimed its nonce); ``ended``: the call's stream ended
    normally (the shell's record of it); ``draining``: this node takes no new stream; ``call_completed``: the
    carrier says the call itself is over (Twilio's ``CallStatus`` completed, busy, failed, no-answer, canceled).
    """
    if not check.ok:
        return Decision(REFUSE, f"re-attach token {check.reason}")
    if check.call_sid != call_sid:
        return Decision(REFUSE, "re-attach token issued for another call", check.call_sid)
    if not first_use:
        return Decision(REFUSE, "re-attach token reused", call_sid)
    if call_completed:
        return Decision(HANGUP, "the call is over (the carrier says so)", call_sid)
    if ended:
        return Decision(HANGUP, "its stream ended normally", call_sid)
    if draining:
        return Decision(HANGUP, "this node is draining: no new stream", call_sid)
    return Decision(ATTACH, "its stream ended unexpectedly: re-attached", call_sid)
