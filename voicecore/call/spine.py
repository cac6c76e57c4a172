"""The spine's call control as a driver: the model worker's core alone, behind the controller's interface.

Owns nothing but the forwarding. In ``call_control = "spine"`` the shell drives ``ModelCallCore``
directly in spirit (session set-up on open, every server event parsed and handed to ``on_event``, the
validator's verdicts to ``on_verdict``, barge-in on the model's ``speech_started``); this class gives
that the same input methods as the turn-taking ``CallController`` (the ``Driver`` protocol of driver.py)
so a ``CallRecorder`` can wrap either and ``voicecore replay`` can rebuild either from a record's header
(INV-REPLAY). Sans-I/O: no sockets, shared memory or clock.

The caller's audio goes to the model through ``on_caller_audio`` (``core.caller_audio``: its bytes are
the model's business, not a decision, and the spine decides nothing on them). The spine has no timers
(``wants_ticks`` False: the shell does not tick it) and no counters beyond its core's (``stats`` None).
On a carrier stop it returns nothing: it decides nothing about a call that ended (the shell closes the
model session of every call that ended), and its records end in a ``stop`` without actions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from voicecore.call import core
from voicecore.call.controller import HangUp, PlayFallback
from voicecore.realtime import events as rt

CONTROL = "spine"


class SpineDriver:
    """One call under the spine's control: ``ModelCallCore`` fed the way the spine shell feeds it."""

    control = CONTROL
    stats = None  # no counters beyond the core's
    wants_ticks = False  # no timers: on_tick never acts

    def __init__(self, call_sid: str, naming: str = "ga", first_tag: int = 1, **core_args: Any) -> None:
        # core_args: ModelCallCore's keyword arguments (greet, gate_policy, safe_line, ...), JSON-able:
        # they go into the record's header so the replay builds the same core.
        self.call_sid = call_sid
        self.naming = naming
        self.first_tag = first_tag
        self.core_args = dict(core_args)
        self.core = core.ModelCallCore(call_sid, naming=naming, first_tag=first_tag, **core_args)

    def record_header(self) -> dict[str, Any]:
        """What a record's header needs to rebuild this driver (voicecore/call/record.py)."""
        return {"control": CONTROL, "call_sid": self.call_sid, "naming": self.naming, "first_tag": self.first_tag,
                "args": dict(self.core_args)}

    # --- inputs ------------------------------------------------------------------------------------
    def start(self, now_ns: int) -> list[core.Action]:
        """The model socket opened for the first time: configure the session (and greet)."""
        return self.core.on_open()

    def resume(self, now_ns: int) -> list[core.Action]:
        """A worker took over the live call: as a reconnect (the spine keeps no history to lose)."""
        return self.reopen(now_ns)

    def reopen(self, now_ns: int) -> list[core.Action]:
        """The model socket opened again after a drop: configure the new session, never greet twice."""
        self.core.greet = False
        return self.core.on_open()

    def on_model_lost(self, now_ns: int, reason: str, fatal: bool = False) -> list[core.Action]:
        """The spine has no failure policy (no flow to hand over): a response cut off by the drop gets the
        shipped hold line; the shell reconnects."""
        if fatal:
            return [PlayFallback("apology_hangup"), HangUp(reason, after_line=True)]
        return [PlayFallback("hold")] if self.awaiting_model() else []

    def awaiting_model(self) -> bool:
        current = self.core.current
        return current is not None and not current.cancelled and not current.audio_done

    def on_model_event(self, text: str | bytes, now_ns: int, playout: core.Playout) -> list[core.Action]:
        return self.core.on_event(rt.parse_server_event(text), now_ns, playout)

    def on_caller_audio(self, audio: bytes, now_ns: int, playout: core.Playout | None = None) -> list[core.Action]:
        return self.core.caller_audio(audio)  # to the model; nothing to decide

    def on_dtmf(self, digit: str, now_ns: int) -> list[core.Action]:
        self.core.stats.dtmf_digits += 1
        return []

    def on_tick(self, now_ns: int, playout: core.Playout) -> list[core.Action]:
        return []  # the spine has no timers

    def on_carrier_stop(self, now_ns: int) -> list[core.Action]:
        return []

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int, playout: core.Playout,
                   reason: str = "", citations: str = "") -> list[core.Action]:
        return self.core.on_verdict(tag, approved_frames, rejected, now_ns, playout)

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[core.Action]:
        return []  # the spine never asks the knowledge base (no Retrieve action)

    def on_tool_result(self, call_id: str, ok: bool, output: str, now_ns: int) -> list[core.Action]:
        return []  # the spine runs no tools (no RunTool action)

    def statistics(self) -> dict:
        return {f"core_{k}": v for k, v in dataclasses.asdict(self.core.stats).items()}
