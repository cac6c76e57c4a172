"""The recorder's pure decisions (workers/recorder/core.py) on a fake clock: what to ingest, which part
files are stale, which records retention deletes, when retention runs, and what a store outage keeps."""

from __future__ import annotations

from workers.recorder.core import (
    DAY_S,
    MinuteCount,
    PurgeSchedule,
    RecordEntry,
    StoreOutage,
    UnstoredEvents,
    expired_records,
    record_name_of_part,
    stale_parts,
    to_ingest,
)

NOW_S = 1_700_000_000.0


def names(entries):
    return [e.name for e in entries]


def test_only_finished_records_not_yet_handled_are_ingested_oldest_first():
    listing = [
        RecordEntry("CAb.jsonl", NOW_S - 5),
        RecordEntry("CAa.jsonl", NOW_S - 10),
        RecordEntry("CAc.jsonl.part", NOW_S - 1),  # the call still runs
        RecordEntry(".record-x1.tmp", NOW_S - 1),  # a writer's scratch file
        RecordEntry("calls.db", NOW_S),  # the SQLite store lives in the same directory
        RecordEntry("CAa-2.jsonl", NOW_S - 2),
        RecordEntry("CAd.jsonl", NOW_S - 20),
    ]
    assert names(to_ingest(listing, set())) == ["CAd.jsonl", "CAa.jsonl", "CAb.jsonl", "CAa-2.jsonl"]
    assert names(to_ingest(listing, {"CAd.jsonl", "CAb.jsonl"})) == ["CAa.jsonl", "CAa-2.jsonl"]
    assert to_ingest(listing, {"CAa.jsonl", "CAb.jsonl", "CAa-2.jsonl", "CAd.jsonl"}) == []


def test_a_part_file_is_stale_after_a_day_untouched_and_not_before():
    listing = [
        RecordEntry("CAold.jsonl.part", NOW_S - DAY_S - 1),
        RecordEntry("CAday.jsonl.part", NOW_S - DAY_S),
        RecordEntry("CAlive.jsonl.part", NOW_S - DAY_S + 60),  # written to a minute short of a day ago
        RecordEntry("CAfresh.jsonl.part", NOW_S - 0.5),
        RecordEntry("CAdone.jsonl", NOW_S - 10 * DAY_S),  # finished: not a part file, however old
    ]
    assert names(stale_parts(listing, NOW_S)) == ["CAday.jsonl.part", "CAold.jsonl.part"]
    assert names(stale_parts(listing, NOW_S + 61)) == ["CAday.jsonl.part", "CAlive.jsonl.part", "CAold.jsonl.part"]
    assert record_name_of_part("CAold-2.jsonl.part") == "CAold-2.jsonl"


def test_retention_deletes_records_older_than_it_and_nothing_when_keeping_forever():
    listing = [
        RecordEntry("CAancient.jsonl", NOW_S - 40 * DAY_S),
        RecordEntry("CAedge.jsonl", NOW_S - 30 * DAY_S),  # exactly at the limit: kept
        RecordEntry("CArecent.jsonl", NOW_S - 29 * DAY_S),
        RecordEntry("CAancient-2.jsonl.part", NOW_S - 40 * DAY_S),  # parts are the stale-part rule's
        RecordEntry("calls.db", NOW_S - 40 * DAY_S),
    ]
    assert names(expired_records(listing, NOW_S, 30)) == ["CAancient.jsonl"]
    assert names(expired_records(listing, NOW_S, 0.5)) == ["CAancient.jsonl", "CAedge.jsonl", "CArecent.jsonl"]
    assert expired_records(listing, NOW_S, 0) == []


def test_retention_runs_at_start_then_hourly_on_the_fake_clock():
    schedule = PurgeSchedule(retention_days=7)
    t = 500.0
    assert schedule.due(t)  # at start
    schedule.ran(t)
    assert not schedule.due(t + 1)
    assert not schedule.due(t + 3599)
    assert schedule.due(t + 3600)
    schedule.ran(t + 3605)  # a purge that started late counts from when it ran
    assert not schedule.due(t + 7200)
    assert schedule.due(t + 7205)


def test_retention_never_runs_when_keeping_forever():
    schedule = PurgeSchedule(retention_days=0)
    assert not schedule.enabled
    assert not schedule.due(0.0)
    assert not schedule.due(1e9)


def test_the_minute_count_reports_once_a_minute_and_only_when_something_happened():
    minute = MinuteCount()
    assert minute.take_due(0.0) is None  # the first minute starts now
    minute.add("ingested")
    minute.add("ingested")
    assert minute.take_due(59.9) is None
    minute.add("unreadable")
    assert minute.take_due(60.0) == {"ingested": 2, "unreadable": 1}
    assert minute.take_due(121.0) is None  # a quiet minute says nothing
    minute.add("ingested", 3)
    assert minute.take_due(181.0) == {"ingested": 3}


def test_live_events_no_later_than_a_calls_derived_ones_repeat_them():
    from workers.recorder.core import DerivedEvents

    derived = DerivedEvents(margin_s=1.0)
    assert not derived.repeats("CA1", 100.0)  # nothing derived: every live event is new
    derived.derived("CA1", [90.0, 95.5, 99.0])
    assert derived.repeats("CA1", 90.0) and derived.repeats("CA1", 99.0)
    assert derived.repeats("CA1", 99.9)  # the same moment, read from another clock
    assert not derived.repeats("CA1", 101.0)  # a later part of the call (another model worker took it over)
    assert not derived.repeats("CA2", 50.0)
    derived.derived("CA3", [])  # no events: nothing to repeat
    assert "CA3" not in derived.until


def test_derived_calls_are_forgotten_oldest_first():
    from workers.recorder.core import DerivedEvents

    derived = DerivedEvents(kept=2)
    for n, sid in enumerate(("CA1", "CA2", "CA3")):
        derived.derived(sid, [float(n)])
    assert list(derived.until) == ["CA2", "CA3"]
    derived.derived("CA2", [5.0])  # derived again (its second part): the newest
    derived.derived("CA4", [6.0])
    assert list(derived.until) == ["CA2", "CA4"]


# ----- a store outage: when to retry, what is logged, the live events kept for the store -------------------

def test_store_outage_logs_its_first_failure_only_and_retries_sooner_at_first():
    outage = StoreOutage(first_s=0.5, max_s=10.0)  # the defaults are shorter: any bound works
    assert not outage.down and outage.may_try(0.0)
    assert outage.failed(100.0) is True  # the outage starts: the one failure logged
    assert outage.down and not outage.may_try(100.4) and outage.may_try(100.5)
    assert outage.failed(100.5) is False  # a retry failed too: not logged again
    assert not outage.may_try(101.4) and outage.may_try(101.5)  # 1 s
    for now in (101.5, 103.5, 107.5, 115.5):  # 2, 4, 8, then never more than 10 s apart
        assert outage.failed(now) is False
    assert outage.retry_s == 10.0 and not outage.may_try(125.4) and outage.may_try(125.5)
    assert outage.recovered(126.0) == 26.0  # down from the first failure to the reopen
    assert not outage.down and outage.may_try(126.0) and outage.recovered(127.0) is None
    assert outage.failed(200.0) is True and outage.retry_s == 0.5  # a new outage: logged, and quick retries again


def test_unstored_events_keep_their_order_and_drop_the_oldest_past_the_bound():
    kept = UnstoredEvents(kept=5)
    rows = [("CA1", seq, 0.0, 0, "transcript.delta", "{}") for seq in range(1, 8)]
    assert kept.keep(rows[:3]) == 0 and len(kept) == 3
    assert kept.oldest(2) == rows[:2]
    kept.stored(2)  # the store took the batch
    assert kept.oldest(10) == rows[2:3]
    assert kept.keep(rows[3:]) == 0 and len(kept) == 5
    assert kept.keep([("CA2", 1, 0.0, 0, "call.started", "{}")]) == 1  # over the bound: the oldest goes
    assert kept.dropped == 1 and kept.oldest(1) == [rows[3]]
    kept.stored(99)
    assert len(kept) == 0 and kept.oldest(3) == []
