"""The controller's tool policies (voicecore/call/tools.py): writes remembered for their window, and the
wait for the caller's quiet after a tool's result, on a fake clock."""

from __future__ import annotations

from voicecore.call.tools import MS, PostToolDebounce, WriteLedger


def test_a_write_stands_for_its_window_and_old_ones_are_forgotten():
    ledger = WriteLedger(window_ms=1_000)
    ledger.remember("book:1", '{"ok": true}', 0)
    assert ledger.recent("book:1", 999 * MS) == '{"ok": true}'
    assert ledger.recent("book:1", 1_000 * MS) is None
    assert ledger.recent("book:2", 0) is None
    ledger.remember("book:2", "{}", 2_000 * MS)  # remembering prunes what expired
    assert set(ledger.done) == {"book:2"}


def test_the_wait_ends_after_the_callers_quiet_gathering_their_completed_words():
    debounce = PostToolDebounce(quiet_ms=1_500, cap_ms=5_000)
    assert not debounce.waiting and not debounce.due(0, caller_speaking=False)
    debounce.start(0)
    debounce.heard("on fri", False, 500 * MS)  # a delta: time counts, no words kept
    debounce.heard("on Friday", True, 800 * MS)
    assert not debounce.due(2_299 * MS, caller_speaking=False)
    assert debounce.due(2_300 * MS, caller_speaking=False)
    assert debounce.take() == "on Friday" and not debounce.waiting


def test_speech_without_words_yet_is_not_quiet_but_the_cap_ends_the_wait():
    debounce = PostToolDebounce(quiet_ms=1_500, cap_ms=5_000)
    debounce.start(0)
    for ms in range(0, 5_000, 100):
        assert not debounce.due(ms * MS, caller_speaking=True)
    assert debounce.due(5_000 * MS, caller_speaking=True)


def test_an_empty_delta_is_no_sign_of_speech():
    debounce = PostToolDebounce(quiet_ms=1_000, cap_ms=5_000)
    debounce.start(0)
    debounce.heard("  ", False, 900 * MS)
    assert debounce.due(1_000 * MS, caller_speaking=False) and debounce.take() == ""
