"""Gateway decisions: mark echoes after a clear mean discarded audio; slots rest before reuse."""

from voicecore.carriers.marks import parse_mark_name
from workers.gateway.core import (
    SLOT_QUARANTINE_MS,
    MarkDiscarded,
    MarkLedger,
    MarkPlayed,
    MarkUnknown,
    SlotTable,
)


def test_mark_names():
    # The rule is voicecore/carriers/marks.py's (its full table: tests/unit/test_twilio_wire_format.py).
    assert parse_mark_name("3:10") == (3, 10, False)
    assert parse_mark_name("3:12:end") == (3, 12, True)
    for bad in ("", "3", "a:1", "3:x", "3:1:fin", "3:1:end:x", "-1:2"):
        assert parse_mark_name(bad) is None


def test_echo_before_clear_is_played_after_clear_is_discarded():
    ledger = MarkLedger()
    ledger.sent_mark("1:5")
    ledger.sent_mark("1:10")
    assert ledger.echoed("1:5") == MarkPlayed(1, 5, False)
    ledger.sent_clear()
    ledger.sent_mark("2:5")
    assert ledger.echoed("1:10") == MarkDiscarded("1:10")
    assert ledger.echoed("2:5") == MarkPlayed(2, 5, False)
    assert ledger.pending == 0


def test_unknown_and_skipped_marks():
    ledger = MarkLedger()
    ledger.sent_mark("1:5")
    ledger.sent_mark("1:10:end")
    assert ledger.echoed("1:10:end") == MarkPlayed(1, 10, True)  # "1:5" skipped over: lost
    assert isinstance(ledger.echoed("1:5"), MarkUnknown)
    assert isinstance(ledger.echoed("never-sent"), MarkUnknown)


def test_slots_rest_before_reuse():
    table = SlotTable(2)
    a = table.claim()
    b = table.claim()
    assert {a, b} == {0, 1}
    assert table.claim() is None
    table.release(a, 100)
    assert table.due_for_free(100 + SLOT_QUARANTINE_MS - 1) == []
    assert table.claim() is None
    assert table.due_for_free(100 + SLOT_QUARANTINE_MS) == [a]
    assert table.claim() == a


def test_admission_caps_waiting_connections_in_all_and_per_address():
    from workers.gateway.core import Admission

    admission = Admission(max_pending=5, max_per_address=3)
    assert [admission.admit("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert admission.refused_address == 1 and admission.pending == 3
    assert admission.admit("10.0.0.2") and admission.admit("")  # the unix socket counts in the total only
    assert not admission.admit("10.0.0.3") and admission.refused_total == 1  # 5 waiting: full
    admission.release("10.0.0.1")
    assert admission.admit("10.0.0.1") and not admission.admit("10.0.0.1")  # one place back, for anyone
    for address in ("10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2", ""):
        admission.release(address)
    assert admission.pending == 0 and admission.by_address == {}
