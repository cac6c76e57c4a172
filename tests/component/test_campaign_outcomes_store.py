"""What a campaign reads its attempts' outcomes from, in a real SQLite call store: the status callbacks kept by
call SID (the latest by sequence number), a placed call's answer verdict and opt-out as its record is stored,
and an opted-out callee put on the do-not-call list in the same transaction."""

from __future__ import annotations

import dataclasses

from voicecore.agent.flow import AgentFlow
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder
from voicecore.outbound.campaign_store import CampaignStore
from voicecore.outbound.opt_out import OPT_OUT_PROMPT
from voicecore.store import CallStore, summarize_record

from records import IDLE, MS, created, delta, done, ev, receptionist, requests, said, summary_of


def test_the_latest_status_by_sequence_number_is_kept_whatever_order_they_came_in(tmp_path):
    with CallStore.open(f"sqlite:///{tmp_path}/calls.db") as store:
        assert store.call_status("CA1") is None
        assert store.add_call_status("CA1", "initiated", 0, "outbound-api", now_s=1.0)
        assert store.add_call_status("CA1", "completed", 3, "outbound-api", "machine_start", 12, now_s=3.0)
        assert not store.add_call_status("CA1", "ringing", 1, "outbound-api", now_s=4.0)  # late: older than kept
        status = store.call_status("CA1")
        assert (status["status"], status["sequence"], status["answered_by"], status["duration_s"]) == \
            ("completed", 3, "machine_start", 12)
        store.add_call_status("CA2", "busy", 2)
        assert store.call_status("CA2")["status"] == "busy" and store.call_status("CA1")["status"] == "completed"
        # Twilio's asynchronous AMD result comes in a callback of its own: kept on the row the statuses made
        assert store.set_answered_by("CA2", "machine_end_beep") and store.call_status("CA2")["answered_by"] == "machine_end_beep"
        assert not store.set_answered_by("CA9", "human") and store.call_status("CA9") is None
        # Plivo's machine detection callback names the call's CallUUID: kept on the row of its RequestUUID, which
        # the answer webhook linked to that CallUUID
        request_uuid, call_uuid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "11111111-2222-4333-8444-555555555555"
        store.add_call_status(request_uuid, "in-progress", 2, "outbound", record_call_sid=call_uuid)
        assert store.set_answered_by(call_uuid, "human") and store.call_status(request_uuid)["answered_by"] == "human"


def test_a_placed_calls_verdict_and_opt_out_are_stored_and_the_callee_joins_the_list(tmp_path):
    url = f"sqlite:///{tmp_path}/calls.db"
    with CallStore.open(url) as store:
        assert store.placed_call("CA1") is None
        opted = dataclasses.replace(summary_of("CA1", 1_800_000_000.0), answer_verdict="human", callee="+46701234567",
                                    opted_out=True, direction="outbound")
        kept = dataclasses.replace(summary_of("CA2", 1_800_000_100.0), answer_verdict="voicemail",
                                   answer_action="hang_up", callee="+46701234568", direction="outbound")
        assert store.ingest(opted) and store.ingest(kept)
        action = store.backend.execute("SELECT answer_action FROM calls WHERE call_sid = 'CA2'").fetchone()[0]
        assert action == "hang_up"
        assert store.placed_call("CA1") == {"answer_verdict": "human", "opted_out": True, "outcome": opted.outcome,
                                            "callee": "+46701234567"}
        assert store.placed_call("CA2")["answer_verdict"] == "voicemail" and not store.placed_call("CA2")["opted_out"]
    campaigns = CampaignStore(CallStore.open(url))
    try:
        assert set(campaigns.do_not_call()) == {"+46701234567"}
        assert campaigns.do_not_call()["+46701234567"][0] == "opt-out"
    finally:
        campaigns.close()


def test_the_summary_reads_the_answer_note_the_callee_and_the_opt_out_goodbye():
    recorder = CallRecorder(C.CallController("CA1", flow=AgentFlow(receptionist()), config=C.ControllerConfig(opt_out=True)))
    recorder.header.update(direction="outbound", callee="+46701234567")
    recorder.start(0)
    recorder.note(50 * MS, "answer", verdict="human", verdict_ms=1400, reason="hello", action="start")
    recorder.on_model_event(created("r1", "1"), 100 * MS, IDLE)
    recorder.on_model_event(delta("r1", 10), 110 * MS, IDLE)
    recorder.on_model_event(said("r1", "Hello, Smile Dental."), 120 * MS, IDLE)
    recorder.on_model_event(done("r1"), 121 * MS, IDLE)
    recorder.on_tick(400 * MS, C.Playout(1, 10, 320 * MS, 1, 10, 320 * MS))
    recorder.on_model_event(ev(type="input_audio_buffer.speech_started", item_id="u1", audio_start_ms=900), 1000 * MS, IDLE)
    recorder.on_model_event(ev(type="input_audio_buffer.speech_stopped", item_id="u1", audio_end_ms=1900), 2000 * MS, IDLE)
    asked = []
    asked += requests(recorder.on_model_event(ev(type="conversation.item.input_audio_transcription.completed",
                                                 item_id="u1", content_index=0, transcript="Stop calling me."),
                                              2100 * MS, IDLE))
    for at_ms in range(2120, 3000, 20):
        asked += requests(recorder.on_tick(at_ms * MS, IDLE))
    assert [a["response"]["metadata"].get("vc_prompt") for a in asked] == [OPT_OUT_PROMPT]
    # the vendor echoes the request's metadata, its prompt id with it
    recorder.on_model_event(ev(type="response.created", response={"id": "r2", "metadata": asked[0]["response"]["metadata"]}),
                            3100 * MS, IDLE)
    recorder.on_model_event(said("r2", "Of course. Goodbye!"), 3200 * MS, IDLE)
    recorder.on_model_event(done("r2"), 3300 * MS, IDLE)
    summary = summarize_record(recorder.header, recorder.entries, "CA1.jsonl", wall_end_s=1000.0)
    assert (summary.answer_verdict, summary.answer_action, summary.callee, summary.direction, summary.opted_out) == \
        ("human", "start", "+46701234567", "outbound", True)
    plain = summarize_record({"call_sid": "CA2"}, [], "CA2.jsonl", wall_end_s=1000.0)
    assert (plain.answer_verdict, plain.callee, plain.opted_out) == ("", "", False)


def test_the_call_id_a_record_goes_by_is_kept_beside_the_placed_calls_from_whichever_callback_names_it(tmp_path):
    with CallStore.open(f"sqlite:///{tmp_path}/calls.db") as store:
        assert store.add_call_status("req-1", "ringing", 1, "outbound")
        assert store.call_status("req-1")["record_call_sid"] == ""
        assert store.add_call_status("req-1", "completed", 3, "outbound", record_call_sid="uuid-1")
        # the answer's in-progress comes late (sequence 2): not kept as the status, and the link stays the first
        assert not store.add_call_status("req-1", "in-progress", 2, "outbound", record_call_sid="uuid-2")
        status = store.call_status("req-1")
        assert (status["status"], status["record_call_sid"]) == ("completed", "uuid-1")
        # a link named only by a late callback is still kept
        store.add_call_status("req-2", "completed", 3, "outbound")
        assert not store.add_call_status("req-2", "in-progress", 2, "outbound", record_call_sid="uuid-3")
        assert store.call_status("req-2")["record_call_sid"] == "uuid-3"


def test_a_campaign_reads_a_plivo_calls_verdict_and_opt_out_under_its_call_uuid(tmp_path):
    """The campaign follows the request_uuid; the call's record (its verdict, its opt-out) is stored under the
    CallUUID the status row links to it."""
    import asyncio

    from voicecore.outbound.campaign import CampaignSettings
    from voicecore.outbound.campaign_run import Carrier, CampaignRun

    url = f"sqlite:///{tmp_path}/calls.db"
    with CallStore.open(url) as store:
        store.add_call_status("req-vm", "completed", 3, "outbound", record_call_sid="uuid-vm")
        store.add_call_status("req-out", "completed", 3, "outbound", record_call_sid="uuid-out")
        store.add_call_status("req-none", "completed", 3, "outbound")
        store.ingest(dataclasses.replace(summary_of("uuid-vm", 1_800_000_000.0), answer_verdict="voicemail",
                                         callee="+46701234567", direction="outbound", carrier="plivo"))
        store.ingest(dataclasses.replace(summary_of("uuid-out", 1_800_000_100.0), answer_verdict="human",
                                         callee="+46701234568", direction="outbound", opted_out=True, carrier="plivo"))
    campaigns = CampaignStore(CallStore.open(url))
    try:
        run = CampaignRun(campaigns, 1, "plivo", CampaignSettings(), Carrier("http://127.0.0.1:9", "http://127.0.0.1:9",
                                                                          "MA", "tok", "plivo"), record_wait_s=0.3)

        async def outcomes():
            return [await run._outcome(sid) for sid in ("req-vm", "req-out", "req-none")]

        # without the link the record is not found: completed after the wait (what Plivo calls got before)
        assert asyncio.run(outcomes()) == ["voicemail", "opted-out", "completed"]
    finally:
        campaigns.close()
