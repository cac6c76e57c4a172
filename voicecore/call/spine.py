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

Failures (voicecore/call/failures.py, the controller's rules): a caller waiting on a model that dropped,
failed a response or fell silent for a second hears the shipped hold line; a response the vendor failed, or
one a drop cut off, is asked for again (after a pause); past the policy's limits the call gets the shipped
apology and is hung up. The spine needs ticks only while such a spell lasts or a response is owed
(``wants_ticks``), so a healthy call records none.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from voicecore.call import core
from voicecore.call.actions import HangUp, PlayFallback
from voicecore.call.failures import HOLD, VENDOR_FAILURE_CODES, FailurePolicy, FailureSpell
from voicecore.realtime import events as rt

CONTROL = "spine"


class SpineDriver:
    """One call under the spine's control: ``ModelCallCore`` fed the way the spine shell feeds it."""

    control = CONTROL
    stats = None  # no counters beyond the core's
    # A tick that returns no action changed nothing (its only state changes come with an action): a record
    # need not keep it, and a replay without it is the same.
    idle_ticks_change_nothing = True
    quiet = False  # wants_ticks says when it is ticked at all

    def __init__(self, call_sid: str, naming: str = "ga", first_tag: int = 1, failure: dict | None = None,
                 **core_args: Any) -> None:
        # core_args: ModelCallCore's keyword arguments (greet, gate_policy, safe_line, ...), JSON-able:
        # they go into the record's header so the replay builds the same core. failure: FailurePolicy's fields.
        self.call_sid = call_sid
        self.naming = naming
        self.first_tag = first_tag
        self.core_args = dict(core_args)
        self.core = core.ModelCallCore(call_sid, naming=naming, first_tag=first_tag, **core_args)
        self.policy = FailurePolicy(**(failure or {}))
        self.spell = FailureSpell(self.policy)
        self.started = False
        self.ended = False
        self.ask_again = False  # a response the vendor failed (or a drop cut off) is owed to the caller

    @property
    def wants_ticks(self) -> bool:
        """Timers only while the model fails or owes an event: a healthy call is never ticked."""
        return not self.ended and (self.spell.failing or self.ask_again or self._waiting_on_vendor())

    def record_header(self) -> dict[str, Any]:
        """What a record's header needs to rebuild this driver (voicecore/call/record.py)."""
        return {"control": CONTROL, "call_sid": self.call_sid, "naming": self.naming, "first_tag": self.first_tag,
                "args": dict(self.core_args), "failure": self.policy.to_dict()}

    # --- inputs ------------------------------------------------------------------------------------
    def start(self, now_ns: int, opening: str = "") -> list[core.Action]:
        """The model socket opened for the first time: configure the session (and greet). The spine runs no flow:
        an ``opening`` is not its to say."""
        self.started = True
        self.spell.reopened(now_ns)
        return self.core.on_open()

    def resume(self, now_ns: int, cut_off: bool = False, restored: dict | None = None) -> list[core.Action]:
        """A worker took over the live call: as a reconnect (the spine keeps no history to lose, and writes no
        state another node could restore: ``restored`` is never given to it). ``cut_off``: the dead worker was
        mid-answer: the caller hears the hold line and gets an answer from the new session."""
        out = self.reopen(now_ns)
        if cut_off and not self.ended:
            self.ask_again = True
            self.spell.hold_asked(now_ns)
            out.append(PlayFallback(HOLD))
        return out

    def reopen(self, now_ns: int, reattached: bool = False) -> list[core.Action]:
        """The model socket opened again after a drop: configure the new session, never greet twice.
        ``reattached``: on a new stream after its gateway died: the old stream's responses are dead (the
        spine has no line of its own to say; a cut answer is owed as after any drop)."""
        if reattached and self._waiting_on_vendor():
            self.ask_again = True
        if reattached:
            self.core.stream_replaced()
        self.core.greet = False
        self.started = True
        self.spell.reopened(now_ns)
        out = self.core.on_open() + self._cut_off(now_ns)
        return out + self._check(now_ns)

    def _cut_off(self, now_ns: int) -> list[core.Action]:
        """The model socket is gone mid-answer: what came of the answer plays on, the rest never will (its
        session is gone), so its audio ends where it is, now, and the pacer closes it there instead of waiting
        on it as an underrun (the hold line follows it); the caller is owed an answer from the next session."""
        current = self.core.current
        if not self._waiting_on_vendor() or current is None:
            return []
        self.ask_again = True
        return self.core.on_event(rt.ResponseDone(current.response_id, "incomplete", "session_lost"), now_ns,
                                  core.Playout(0, 0, 0, 0, 0, 0))

    def on_model_lost(self, now_ns: int, reason: str, fatal: bool = False) -> list[core.Action]:
        """The model socket closed or could not be opened; the shell reconnects. ``fatal``: no model for
        this call (the vendor's breaker is open for a new call): the apology and a hang-up at once."""
        if self.ended:
            return []
        self.spell.lost(now_ns)
        if fatal:
            return self._give_up(reason, now_ns, None)
        return self._cut_off(now_ns) + self._check(now_ns)

    def awaiting_model(self) -> bool:
        """The caller waits on the model: the call's first words, or an answer being generated or owed."""
        return not self.ended and (not self.started or self.ask_again or self._waiting_on_vendor())

    def _waiting_on_vendor(self) -> bool:
        current = self.core.current
        return current is not None and not current.cancelled and not current.audio_done

    def on_model_event(self, text: str | bytes, now_ns: int, playout: core.Playout) -> list[core.Action]:
        event = rt.parse_server_event(text)
        out = self.core.on_event(event, now_ns, playout)
        if self.ended:
            return out
        self.spell.event(now_ns)
        if isinstance(event, rt.AudioDelta):
            self.spell.served()
        elif ((isinstance(event, rt.RealtimeError) and event.code in VENDOR_FAILURE_CODES)
              or (isinstance(event, rt.ResponseDone) and event.status == "failed" and event.error_code in VENDOR_FAILURE_CODES)):
            self.spell.vendor_failed(now_ns)
            self.ask_again = True
        return out + self._check(now_ns)

    def on_caller_audio(self, audio: bytes, now_ns: int, playout: core.Playout | None = None) -> list[core.Action]:
        return self.core.caller_audio(audio)  # to the model; nothing to decide

    def on_dtmf(self, digit: str, now_ns: int) -> list[core.Action]:
        self.core.stats.dtmf_digits += 1
        return []

    def on_tick(self, now_ns: int, playout: core.Playout) -> list[core.Action]:
        if self.ended:
            return []
        out = self._check(now_ns, playout)
        if self.ask_again and not self.ended and self.spell.may_ask(now_ns) and not self._waiting_on_vendor():
            self.ask_again = False
            self.spell.asked(now_ns)
            out.append(core.SendToModel(rt.response_create()))
        return out

    def _check(self, now_ns: int, playout: core.Playout | None = None) -> list[core.Action]:
        verdict = self.spell.verdict(now_ns, awaiting=self.awaiting_model(), waiting_on_vendor=self._waiting_on_vendor(),
                                     caller_speaking=False)
        if verdict == HOLD:
            return [PlayFallback(HOLD)]
        if verdict is not None:
            return self._give_up(verdict, now_ns, playout)
        return []

    def _give_up(self, reason: str, now_ns: int, playout: core.Playout | None) -> list[core.Action]:
        """The failure policy: what is audible of the model stops, the shipped apology plays, then a hang-up
        (the spine has no flow and no one to transfer to)."""
        self.ended = True
        self.ask_again = False
        out: list[core.Action] = []
        if playout is not None and self.core.audible(playout) is not None:
            out.extend(self.core.barge_in(now_ns, playout))
        return out + [PlayFallback("apology_hangup"), HangUp(reason, after_line=True)]

    def on_carrier_stop(self, now_ns: int) -> list[core.Action]:
        return []

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int, playout: core.Playout,
                   reason: str = "", citations: str = "") -> list[core.Action]:
        return self.core.on_verdict(tag, approved_frames, rejected, now_ns, playout)

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[core.Action]:
        return []  # the spine never asks the knowledge base (no Retrieve action)

    def on_tool_result(self, call_id: str, ok: bool, output: str, now_ns: int) -> list[core.Action]:
        return []  # the spine runs no tools (no RunTool action)

    def on_tones(self, call_id: str, digits: str, now_ns: int) -> list[core.Action]:
        return [] if self.ended else self.core.play_tones(call_id, digits)

    def statistics(self) -> dict:
        return {f"core_{k}": v for k, v in dataclasses.asdict(self.core.stats).items()}
