"""When the caller's audio goes to the model (voicecore/call/inbound_batching.py): long batches while the caller
talks or has long been quiet, short ones where a turn may be ending."""

from __future__ import annotations

import numpy as np
import pytest

from voicecore.call.inbound_batching import InboundBatching
from voicecore.g711 import ULAW_SILENCE, linear_to_ulaw

MS = 1_000_000


def voiced(frames: int) -> bytes:
    t = np.arange(160 * frames) / 8000
    return linear_to_ulaw((3000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16))


def quiet(frames: int) -> bytes:
    return bytes([ULAW_SILENCE]) * 160 * frames


def test_speech_and_long_silence_keep_the_long_batch():
    b = InboundBatching()
    assert b.next_due_ns(0, quiet(5)) == 100 * MS  # nobody has spoken yet
    assert b.next_due_ns(100 * MS, voiced(5)) == 200 * MS  # speaking
    assert b.short_batches == 0


def test_quiet_after_speech_shortens_the_batch_until_the_vads_silence_has_passed():
    b = InboundBatching()
    b.next_due_ns(100 * MS, voiced(5))
    assert b.next_due_ns(200 * MS, voiced(2) + quiet(3)) == 240 * MS  # the newest frames are quiet: a turn may end
    due, now = 240 * MS, 240 * MS
    while now < 1100 * MS:
        due = b.next_due_ns(now, quiet(2))
        assert due - now == 40 * MS
        now = due
    # a second after the last voiced frame the vendor's VAD has long ended the turn: the long batch again
    assert b.next_due_ns(1240 * MS, quiet(2)) == 1340 * MS
    assert b.short_batches > 20


def test_nothing_arrived_is_judged_by_what_came_before():
    b = InboundBatching()
    b.next_due_ns(0, voiced(5))
    assert b.next_due_ns(100 * MS, b"") == 200 * MS  # no frame says the caller stopped
    b.next_due_ns(200 * MS, quiet(5))
    assert b.next_due_ns(240 * MS, b"") == 280 * MS


def test_a_short_batch_longer_than_the_long_one_is_refused():
    with pytest.raises(ValueError):
        InboundBatching(batch_ms=100, turn_end_ms=150)
