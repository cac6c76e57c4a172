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
