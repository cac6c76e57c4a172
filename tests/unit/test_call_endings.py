"""The controller's silence and endings policy (voicecore/call/endings.py), on a fake clock."""

from __future__ import annotations

import types

from voicecore.call import flow as flows
from voicecore.call.actions import HangUp, Transfer
from voicecore.call.controller import ControllerConfig, ControllerStats
from voicecore.call.endings import CHECKIN, GOODBYE, MS, Endings, ending_action


def endings(**config) -> Endings:
    return Endings(ControllerConfig(**config), ControllerStats())


def terminal(step: flows.Say):
    return types.SimpleNamespace(request=types.SimpleNamespace(step=step))


def test_check_ins_then_the_goodbye_each_after_its_own_silence():
    e = endings(silence_checkins_ms=(1_000, 2_000), silence_goodbye_ms=3_000)
    e.not_silent(0)
    asked = [(ms, e.silence(ms * MS, idle=True)) for ms in range(0, 7_000, 100)]
    assert [(ms, what) for ms, what in asked if what] == [(1_000, CHECKIN), (3_000, CHECKIN), (6_000, GOODBYE)]
    assert e.stats.checkins == 2


def test_silence_counts_only_while_idle_and_a_caller_turn_starts_the_check_ins_over():
    e = endings(silence_checkins_ms=(1_000,), silence_goodbye_ms=5_000)
    e.not_silent(0)
    assert e.silence(900 * MS, idle=False) == ""  # someone spoke or something is pending: from here again
    assert e.silence(1_800 * MS, idle=True) == ""
    assert e.silence(1_900 * MS, idle=True) == CHECKIN
    e.not_silent(2_000 * MS)
    e.caller_turn()
    assert e.silence(3_000 * MS, idle=True) == CHECKIN  # the first check-in again, not the goodbye


def test_the_terminal_prompt_ends_the_call_after_it_played_and_its_grace():
    e = endings(goodbye_grace_ms=500)
    bye = terminal(flows.Say("bye", "Goodbye.", terminal=True))
    e.ending_created(bye)
    assert e.playing and e.due(10_000 * MS) is None  # not played yet
    assert e.played(bye, 1_000 * MS)
    assert e.due(1_499 * MS) is None and e.due(1_500 * MS) is bye.request.step


def test_a_terminal_prompt_cut_by_the_caller_ends_nothing():
    e = endings()
    bye = terminal(flows.Say("bye", "Goodbye.", terminal=True))
    other = terminal(flows.Say("hi", "Hello."))
    e.ending_created(bye)
    assert not e.cut(other) and e.playing
    assert e.cut(bye) and not e.playing and e.due(10**12) is None
    assert not e.played(bye, 0)


def test_the_ending_action_transfers_or_hangs_up():
    assert ending_action(flows.Say("t", "Transferring.", terminal=True, transfer_to="+46701234567"), "completed") == (
        "transfer_completed", Transfer("+46701234567"))
    assert ending_action(flows.Say("bye", "Goodbye.", terminal=True), "silence") == ("silence", HangUp("silence"))
