"""The call's action vocabulary: what a driver (the turn-taking controller, the spine) returns and the
shell applies, in order, and the playout snapshot the shell reads for it.

One home for every action, so the driver interface (driver.py), the recorder (record.py), replay and the
model worker's shell depend on the vocabulary, not on one implementation of it. ``CoreAction``: what the
mechanism (core.py: response -> tag, framing, cut) returns; ``Action``: those and the policies' own
(controller.py: release and hold, knowledge, tools, endings, fallback lines). Plain frozen dataclasses:
records and replay compare them through ``action_to_dict``.
"""

from __future__ import annotations

import dataclasses
import zlib

# --- actions the shell applies -------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class SendToModel:
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class OpenTag:
    """Start response ``tag``. ``gated``: release waits for the approval watermark (rings.tag_open gated=1)."""

    tag: int
    gated: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class OpenGate:
    """Ask the validator to judge response ``tag`` under ``policy`` (INV-GATE); its frames wait for it."""

    tag: int
    policy: str
    script: str = ""  # the expected text of a scripted prompt
    forbidden: str = ""  # forbidden phrases, one per line
    language: str = "auto"
    facts: str = ""  # text whose numbers count as grounded for this response only (a tool's result)


@dataclasses.dataclass(frozen=True, slots=True)
class GateSpec:
    """How the next response is judged (set by the controller per flow node; None: the call's policy)."""

    policy: str
    script: str = ""
    forbidden: str = ""
    language: str = "auto"
    facts: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class GateTranscript:
    """Transcript text of gated ``tag`` for the validator, with the frames written so far (``done``: final)."""

    tag: int
    text: str
    audio_frames: int
    done: bool


@dataclasses.dataclass(frozen=True, slots=True)
class ApproveFrames:
    tag: int
    frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class WriteFrames:
    """Frames ``first_index`` .. of ``tag``; ``audio`` is a whole number of 160-byte frames."""

    tag: int
    first_index: int
    audio: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class EndTag:
    tag: int
    total_frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class CancelTag:
    tag: int
    decision_ns: int


CoreAction = SendToModel | OpenTag | WriteFrames | EndTag | CancelTag | OpenGate | GateTranscript | ApproveFrames


@dataclasses.dataclass(frozen=True, slots=True)
class Playout:
    """What the control block says about the carrier's playout, read by the shell at decision time."""

    played_tag: int
    played_frames: int
    played_at_ns: int
    sent_tag: int
    sent_frames: int
    carrier_empty_at_ns: int
    # CLOCK_MONOTONIC when the pacer queued the call's newest clear (a barge-in's, a hold's); 0: none yet. Records
    # written before it have six values and replay with 0.
    cleared_at_ns: int = 0


# --- actions beyond the core's (the shell applies these too) ------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class ReleaseTag:
    """Raise the approval watermark: frames of ``tag`` with index < ``frames`` may be released.

    Shell: ``rings.tag_approve(ctrl, slot, tag, frames)`` (the watermark only rises)."""

    tag: int
    frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class HoldTag:
    """Bare VAD edge: release of ``tag`` stops at once (the pacer sends nothing newer of it; the carrier
    plays what it holds, then gets a ``clear``) until a ResumeTag or CancelTag. ``frames``: its approval
    watermark, which stays where it is.

    Shell: ``rings.tag_pause(ctrl, slot, tag, now_ns)``; count it."""

    tag: int
    frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class ResumeTag:
    """A false alarm (no words, short): release of held ``tag`` goes on. Shell: ``rings.tag_resume``."""

    tag: int


@dataclasses.dataclass(frozen=True, slots=True)
class Retrieve:
    """Look ``question`` up in the knowledge base (best ``k`` snippets) and feed the result back with
    ``on_snippets(req_id, snippets, now_ns)`` (the shell does it at once; the record keeps the answer)."""

    req_id: int
    question: str
    k: int


@dataclasses.dataclass(frozen=True, slots=True)
class RunTool:
    """Run the tool of function ``name`` with ``arguments`` (canonical JSON) off the call's path, and feed
    its result back with ``on_tool_result(call_id, ok, output, now_ns)`` (recorded: a replay needs no tool
    server). ``key``: the idempotency key (voicecore/agent/actions.py), sent to the tool."""

    call_id: str
    name: str
    arguments: str
    key: str


@dataclasses.dataclass(frozen=True, slots=True)
class HangUp:
    """End the call through the carrier's REST API (voicecore/carriers/twilio/rest.py hangup_request); ``after_line``:
    once the fallback line asked for just before has played (the failure policy's apology)."""

    reason: str
    after_line: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Transfer:
    """Redirect the call to ``target`` through the carrier's REST API (voicecore/carriers/twilio/rest.py transfer_request);
    ``after_line`` as HangUp's."""

    target: str
    after_line: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class PlayFallback:
    """The pacer plays one of the runtime's own lines (voicecore/fallback, in the call's language): the model
    cannot speak (INV-NEVER-SILENT). ``kind``: hold | apology_hangup | apology_transfer."""

    kind: str


@dataclasses.dataclass(frozen=True, slots=True)
class CallOver:
    """The caller hung up (or the stream stopped): close the model session; nothing more will be sent."""

    reason: str


Action = CoreAction | ReleaseTag | HoldTag | ResumeTag | Retrieve | RunTool | HangUp | Transfer | CallOver | PlayFallback


def action_to_dict(action: Action) -> dict:
    """A JSON-able form of an action, for records and comparison (audio as length + CRC-32)."""
    data: dict = {"type": type(action).__name__}
    for field in dataclasses.fields(action):  # type: ignore[arg-type]
        value = getattr(action, field.name)
        if isinstance(value, bytes):
            data[field.name + "_len"] = len(value)
            data[field.name + "_crc"] = zlib.crc32(value)
        else:
            data[field.name] = value
    return data
