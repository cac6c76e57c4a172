"""Silence and endings: how a call ends without the caller hanging up, a policy of the controller.

Owns the caller's silence (since when nobody spoke and nothing played or was pending, and how many
check-ins it has had: ``silence_checkins_ms``, then the goodbye after ``silence_goodbye_ms``) and the
terminal prompt playing (a goodbye or a transfer's line: once it played in full and ``goodbye_grace_ms``
passed, the call is hung up or transferred; a caller who speaks over it cuts it, and the call is not over).
Together because the silence's last step is a terminal prompt, and both end in the same actions
(``HangUp``, ``Transfer``: ``ending_action``). The controller (controller.py) says when the call is idle and
asks the flow for the lines. Sans-I/O: fed ``now_ns``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from voicecore.call import flow as flows
from voicecore.call.actions import HangUp, Transfer

if TYPE_CHECKING:
    from voicecore.call.controller import Active, ControllerConfig, ControllerStats

MS = 1_000_000
CHECKIN = "checkin"
GOODBYE = "goodbye"


class Endings:
    __slots__ = ("config", "stats", "silence_ref_ns", "checkins_done", "ending", "ending_played_ns")

    def __init__(self, config: ControllerConfig, stats: ControllerStats) -> None:
        self.config = config
        self.stats = stats
        self.silence_ref_ns = 0  # the silence counts from here
        self.checkins_done = 0  # check-ins since the caller last took a turn
        self.ending: Active | None = None  # the terminal prompt that is playing
        self.ending_played_ns = 0

    # --- silence -----------------------------------------------------------------------------------------
    def not_silent(self, now_ns: int) -> None:
        """Someone spoke, or something played or began: the silence counts from now."""
        self.silence_ref_ns = now_ns

    def caller_turn(self) -> None:
        """The caller took a turn: the check-ins start over (the silence itself was reset by their speech)."""
        self.checkins_done = 0

    def silence(self, now_ns: int, idle: bool) -> str:
        """What the silence asks for now: CHECKIN, GOODBYE or "". ``idle``: nobody speaks and nothing is
        pending (only such silence counts)."""
        if not idle:
            self.silence_ref_ns = now_ns
            return ""
        checkins = self.config.silence_checkins_ms
        limit = checkins[self.checkins_done] if self.checkins_done < len(checkins) else self.config.silence_goodbye_ms
        if (now_ns - self.silence_ref_ns) // MS < limit:
            return ""
        self.silence_ref_ns = now_ns
        if self.checkins_done < len(checkins):
            self.checkins_done += 1
            self.stats.checkins += 1
            return CHECKIN
        return GOODBYE

    # --- the terminal prompt -----------------------------------------------------------------------------
    @property
    def playing(self) -> bool:
        """A terminal prompt is the agent's last word now (until it is cut)."""
        return self.ending is not None

    def ending_created(self, active: Active) -> None:
        """The response to a terminal prompt was created: once it played, the call ends."""
        self.ending = active
        self.ending_played_ns = 0

    def cut(self, active: Active) -> bool:
        """``active`` was cancelled; True if it was the terminal prompt (then the call is not over)."""
        if self.ending is active:
            self.ending = None
            return True
        return False

    def played(self, active: Active, now_ns: int) -> bool:
        """``active`` played out; True if it was the terminal prompt (its grace starts now)."""
        if active is self.ending:
            self.ending_played_ns = now_ns
            return True
        return False

    def due(self, now_ns: int) -> flows.Say | None:
        """The terminal prompt played and its grace passed: the step whose ending it is."""
        ending = self.ending
        if ending is None or not self.ending_played_ns:
            return None
        if (now_ns - self.ending_played_ns) // MS < self.config.goodbye_grace_ms:
            return None
        step = ending.request.step
        assert isinstance(step, flows.Say)
        return step


def ending_action(step: flows.Say, reason: str) -> tuple[str, HangUp | Transfer]:
    """The end reason and the action that ends the call after terminal prompt ``step``: a transfer to its
    target, or a hang-up."""
    if step.transfer_to:
        return f"transfer_{reason}", Transfer(step.transfer_to)
    return reason, HangUp(reason)
