"""The store spool's file names: one per call session, never a scratch file or a path, listed oldest first."""

from __future__ import annotations

import pytest

from voicecore.store import spool


def test_a_sessions_name_is_its_call_and_when_it_began():
    assert spool.spool_name("CA1", 1_800_000_000_123) == "CA1-1800000000123.call.json"
    assert spool.is_spooled("CA1-1800000000123.call.json")


@pytest.mark.parametrize("name", ["CA1.jsonl", "CA1.jsonl.part", ".spool-x.tmp", ".call.json", "../CA1-1.call.json",
                                  "CA1-1.call.json.tmp", ".CA1-1.call.json"])
def test_anything_else_is_not_a_spooled_call(name):
    assert not spool.is_spooled(name)


@pytest.mark.parametrize("sid", ["", "../x", "a/b", ".hidden"])
def test_a_call_sid_that_would_make_a_path_is_refused(sid):
    with pytest.raises(ValueError, match="spool file"):
        spool.spool_name(sid, 1)


def test_a_part_file_is_a_spool_files_name_and_part():
    assert spool.is_part("CA1-5.call.json.part") and not spool.is_spooled("CA1-5.call.json.part")
    assert not spool.is_part("CA1.jsonl.part") and not spool.is_part(".call.json.part") and not spool.is_part("CA1-5.call.json")


def test_part_files_untouched_long_enough_are_stale_oldest_first():
    entries = [("CA2-9.call.json.part", 900.0), ("CA1-5.call.json.part", 800.0), ("CA3-1.call.json.part", 990.0),
               ("CA4-1.call.json", 100.0)]  # a finished file is never a stale part
    assert spool.stale_parts(entries, now_s=1000.0, after_s=100.0) == ["CA1-5.call.json.part", "CA2-9.call.json.part"]
    assert spool.stale_parts(entries, now_s=1000.0, after_s=500.0) == []


def test_a_scratch_file_is_what_write_makes_before_its_rename():
    assert spool.is_scratch(".spool-k2j3h4.tmp")
    for name in ("CA1-5.call.json", "CA1-5.call.json.part", ".spool-.tmp", "spool-x.tmp", ".spool-x.tmp.part", "a/.spool-x.tmp"):
        assert not spool.is_scratch(name), name


def test_scratch_files_untouched_past_any_write_are_stale_oldest_first():
    now = 10_000.0
    entries = [(".spool-b.tmp", now - 601.0), (".spool-a.tmp", now - 3600.0), (".spool-fresh.tmp", now - 5.0),
               ("CA4-1.call.json", 0.0), ("CA4-1.call.json.part", 0.0)]  # never a spool or part file
    assert spool.stale_scratch(entries, now_s=now) == [".spool-a.tmp", ".spool-b.tmp"]
    assert spool.STALE_SCRATCH_AFTER_S >= 10 * spool.PART_EVERY_S  # far past the slowest write in progress
