"""Realtime-model simulator, sans-I/O: what a fake OpenAI Realtime server says and when
(docs/explanation/protocols.md#d2).

One module per concern: `config` (the behaviour switches, `SimConfig`), `records` (what a session did,
for a harness), `rng` (seeded randomness), `clips` (mu-law levels, dither and clip recognition),
`rejects` (a refused client event), `session_config` (session.update validation and rendering),
`schedule` (when a response's deltas and words go out), `transcription` (the caller's transcript events
as the session's transcription model sends them), `turns` (which scripted caller turn a response
answers, and the function calls it makes) and `session` (`ModelSession`, the per-connection
state machine). Every module is pure: no sockets, clock or OS randomness; time comes in as `now_ms` and
randomness from a seed. The socket shell is voicecore.sim.model_server.
"""

from voicecore.sim.model.config import SimConfig, SimTurn
from voicecore.sim.model.records import (
    CancelRecord,
    ErrorRecord,
    FunctionCallOutputRecord,
    ResponseRecord,
    SessionRecord,
    SpeechRecord,
    TruncateRecord,
)
from voicecore.sim.model.session import ModelSession

__all__ = [
    "CancelRecord",
    "ErrorRecord",
    "FunctionCallOutputRecord",
    "ModelSession",
    "ResponseRecord",
    "SessionRecord",
    "SimConfig",
    "SimTurn",
    "SpeechRecord",
    "TruncateRecord",
]
