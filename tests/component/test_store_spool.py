"""The store spool on a real directory and a real SQLite store: a summary written whole (0600 in a 0700
directory), listed oldest first, stored once however often it is offered (the recorder's idempotence after
a kill between storing and removing)."""

from __future__ import annotations

import stat

from records import summary_of

from voicecore.store import CallStore, spool
from voicecore.store.summary import summary_to_json

EVENTS = [(0, "call.started", {"control": "turns"}), (1500, "turn.started", {"index": 0}), (9000, "call.ended", {"outcome": "caller_hangup"})]


def spooled(call_sid: str, name: str) -> bytes:
    return spool.document(summary_to_json(summary_of(call_sid, 1_800_000_000.0, source=name)), 1_799_999_991.0, EVENTS)


def test_a_spooled_summary_is_private_whole_and_listed_oldest_first(tmp_path):
    directory = spool.spool_dir(tmp_path)
    later = spool.spool_name("CA2", 2_000)
    earlier = spool.spool_name("CA9", 1_000)
    for name in (later, earlier):
        spool.write(directory, name, spooled(name.split("-")[0], name))
    (directory / ".spool-leftover.tmp").write_bytes(b"half")  # a writer killed mid-write: never listed
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / later).stat().st_mode) == 0o600
    assert spool.listing(directory) == [earlier, later]
    call = spool.parse(spool.read(directory, earlier))
    assert call.summary.call_sid == "CA9" and call.summary.source == earlier and call.summary.turns
    assert call.started_at == 1_799_999_991.0 and call.events == EVENTS
    spool.remove(directory, earlier)
    spool.remove(directory, earlier)  # removed twice (a restart's listing and a late message): no error
    assert spool.listing(directory) == [later]


def test_a_missing_spool_lists_nothing(tmp_path):
    assert spool.listing(tmp_path / "nothing-here") == []


def test_a_spooled_call_offered_again_after_it_was_stored_is_stored_once(tmp_path):
    name = spool.spool_name("CA1", 1_800_000_000_000)
    summary = summary_of("CA1", 1_800_000_000.0, source=name)
    spool.write(spool.spool_dir(tmp_path), name, spooled("CA1", name))
    with CallStore.open(f"sqlite:///{tmp_path}/calls.db") as store:
        assert store.ingest(spool.parse(spool.read(spool.spool_dir(tmp_path), name)).summary) is True
        # killed before the removal: the restarted recorder lists the file again
        assert store.ingest(spool.parse(spool.read(spool.spool_dir(tmp_path), name)).summary) is False
        call = store.call("CA1")
        assert call is not None and call["sources"] == [name] and len(store.calls()) == 1
        assert len(call["turns"]) == len(summary.turns) >= 1


def test_what_is_not_a_spooled_call_does_not_parse():
    for content in (b"[]", b'{"summary": {}}', b"not json", b'{"summary": null, "started_at": 0, "events": []}'):
        try:
            spool.parse(content)
        except (ValueError, TypeError, KeyError):
            continue
        raise AssertionError(f"{content!r} parsed")


def test_a_stale_part_is_finished_under_its_name_and_never_over_a_finished_file(tmp_path):
    directory = spool.spool_dir(tmp_path)
    name = spool.spool_name("CA1", 1_000)
    part = name + spool.PART_SUFFIX
    spool.write(directory, part, spooled("CA1", name))
    assert spool.listing(directory) == [] and [n for n, _ in spool.part_listing(directory)] == [part]
    assert spool.finish_part(directory, part) == name
    assert spool.listing(directory) == [name] and spool.part_listing(directory) == []
    assert spool.parse(spool.read(directory, name)).summary.source == name  # stored under the name it will have

    other = spool.spool_name("CA2", 2_000)
    spool.write(directory, other, b"the finished one")
    spool.write(directory, other + spool.PART_SUFFIX, spooled("CA2", other))
    assert spool.finish_part(directory, other + spool.PART_SUFFIX) == other
    assert spool.read(directory, other) == b"the finished one" and spool.part_listing(directory) == []


def test_a_spooled_call_holds_what_the_agents_storage_tier_keeps():
    """Wired as the model worker wires a call without a record file: the recorder applies the tier to every
    entry before the summary and the events read it, so the spool file has the number redacted."""
    from records import IDLE, MS, created, done, ev, receptionist, said

    from voicecore.agent.flow import AgentFlow
    from voicecore.call import controller as C
    from voicecore.call.record import CallRecorder
    from voicecore.call.record_reader import RecordReader
    from voicecore.observe.events import CallEventTap
    from voicecore.privacy.records import RecordPrivacy
    from voicecore.store.summary import RecordSummarizer

    recorder = CallRecorder(C.CallController("CA1", flow=AgentFlow(receptionist())), privacy=RecordPrivacy("redacted"))
    tap, summarizer = CallEventTap(recorder.header), RecordSummarizer(recorder.header)
    recorder.observer = RecordReader(tap, summarizer).feed
    recorder.start(0)
    recorder.on_model_event(created("r1", "1"), 100 * MS, IDLE)
    recorder.on_model_event(said("r1", "Hello, Smile Dental."), 120 * MS, IDLE)
    recorder.on_model_event(done("r1"), 121 * MS, IDLE)
    recorder.on_model_event(ev(type="input_audio_buffer.speech_started", item_id="u1", audio_start_ms=900), 1000 * MS, IDLE)
    recorder.on_model_event(ev(type="input_audio_buffer.speech_stopped", item_id="u1", audio_end_ms=1900), 2000 * MS, IDLE)
    recorder.on_model_event(ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0,
                               transcript="Call me back on +46 70 123 45 67"), 2100 * MS, IDLE)
    recorder.on_carrier_stop(3000 * MS)
    name = spool.spool_name("CA1", 1_000)
    content = spool.document(summary_to_json(summarizer.summary(name, 1_800_000_000.0)), 1_799_999_997.0, tap.take())
    call = spool.parse(content)
    assert "Call me back on [phone]" in [t.text for t in call.summary.transcripts]
    assert any(kind == "call.ended" for _t, kind, _data in call.events)
    assert b"70 123 45 67" not in content and b"701234567" not in content
