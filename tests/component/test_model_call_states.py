"""The model worker's writer and reader of live call states (workers/model/call_states.py), on a real SQLite store:
written off the caller's path, coalesced to the newest, read back for a re-attached call, and a failing store
costs only the restore."""

from __future__ import annotations

import logging

from voicecore.store import CallStore
from workers.model.call_states import CallStates


def test_states_are_written_read_back_and_dropped(tmp_path):
    url = f"sqlite:///{tmp_path}/calls.db"
    with CallStore.open(url) as store:
        store.migrate()
    states = CallStates(url, "node-a")
    try:
        for turn in range(1, 6):  # handed over faster than written: only the newest need reach the store
            states.save("CA1", {"format": 1, "turn": turn})
        found = states.lookup("CA1").result(timeout=10)  # the thread writes in order: the reads come after
        assert found["node"] == "node-a" and found["state"] == {"format": 1, "turn": 5}
        assert 1 <= states.counters["call_states_written"] <= 5 and states.counters["call_states_failed"] == 0
        assert states.lookup("CA-new").result(timeout=10) is None  # a call nobody served before
        states.drop("CA1")
        assert states.lookup("CA1").result(timeout=10) is None
    finally:
        states.close()


def test_a_failing_store_costs_the_restore_only_with_one_log_line(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/gone/calls.db"  # its directory does not exist: every open fails
    states = CallStates(url, "node-a")
    try:
        with caplog.at_level(logging.WARNING, logger="voicecore.model"):
            states.save("CA1", {"format": 1})
            states.save("CA2", {"format": 1})
            assert states.lookup("CA1").result(timeout=10) is None
        assert states.counters["call_states_failed"] >= 1
        written = [r for r in caplog.records if "not written to the store" in r.getMessage()]
        assert len(written) == 1 and "CA1" in written[0].getMessage()  # one line for the spell, naming a call
        assert any("starting it afresh" in r.getMessage() for r in caplog.records)
    finally:
        states.close()
