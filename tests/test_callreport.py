"""voicecore.callreport's figures on synthetic simulator records (no stack, no sockets, a fake clock):
talkover, the clears a superseded (overlapped) response causes, and issue 13's keys in summarize."""

from __future__ import annotations

import base64
import json

from bench.analysis import RecordSet
from voicecore.callreport import SUPERSEDE_CLEAR_WINDOW_MS, summarize, talkover_ms
from voicecore.sim.carrier import CallResult
from voicecore.sim.carrier_core import CarrierCall
from voicecore.sim.model_core import ResponseRecord, SessionRecord, SpeechRecord
from voicecore.timing import FRAME_BYTES

SID = "MZ1"


def _core() -> CarrierCall:
    core = CarrierCall("CA1", SID, "AC1", "token", b"", 4, play_phase_ms=0.0)
    core.opening_messages()
    return core


def _send(core: CarrierCall, tag: int, frames: int, at_ms: float, byte: int = 1, start: int = 0, end: bool = True) -> None:
    for n in range(start + 1, start + frames + 1):
        payload = base64.b64encode(bytes([byte]) * FRAME_BYTES).decode()
        core.receive(json.dumps({"event": "media", "streamSid": SID, "media": {"payload": payload}}), at_ms)
    name = f"{tag}:{start + frames}" + (":end" if end else "")
    core.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": name}}), at_ms)


def _clear(core: CarrierCall, at_ms: float) -> None:
    core.receive(json.dumps({"event": "clear", "streamSid": SID}), at_ms)


def _response(rid: str, created_ms: int, overlaps: str | None = None, late_deltas: int = 0) -> ResponseRecord:
    return ResponseRecord(index=0, response_id=rid, item_id="item_" + rid, clip_name="x", text="", audio=b"",
                          delta_bytes=[], created_ms=created_ms, overlaps=overlaps, late_deltas=late_deltas,
                          status="completed")


def _record(speech_ms: list[int], responses: list[ResponseRecord]) -> SessionRecord:
    return SessionRecord("s", 0, "ga", "m", 0, call_sid="CA1", responses=responses,
                         speech=[SpeechRecord(item_id="", audio_start_ms=0, started_at_ms=t) for t in speech_ms])


def _report(core: CarrierCall, record: SessionRecord, **kwargs) -> dict:
    result = CallResult("CA1", core.metrics, core.statistics(), None, "carrier", [], core)
    return summarize([result], RecordSet([record]), seconds=10, cpu_seconds=0.0, wall_seconds=10, **kwargs)


def test_talkover_runs_to_the_end_of_the_stretch_of_agent_audio():
    core = _core()
    _send(core, 1, 20, 0)  # frames play at 0, 20, ... 380: one stretch ending at 400
    core.tick_play(2000)
    _send(core, 2, 10, 2000)  # a second stretch: playout idles until the next tick, 2020, and ends at 2220
    core.tick_play(5000)
    assert talkover_ms(core, [150, 399.5, 400, 1000, 2010, 2030]) == [250, 0.5, 190]  # 400, 1000, 2010: silent


def test_talkover_ends_where_a_clear_cut_the_audio():
    core = _core()
    _send(core, 1, 50, 0, end=False)
    core.tick_play(200)
    _clear(core, 205)  # the frame playing since 200 is cut at 205
    core.tick_play(1000)
    assert talkover_ms(core, [110]) == [95]


def test_summarize_reports_overlaps_and_clears_superseding_them():
    core = _core()
    _send(core, 3, 10, 0, end=False)
    core.tick_play(100)
    _send(core, 4, 10, 100)
    _send(core, 3, 5, 100, start=10)  # the older response again after the newer one began: 5 overlapping frames
    core.tick_play(1000)
    _clear(core, 1000)  # supersede: an overlapping response was created at 800, no speech near
    _clear(core, 3000)  # barge-in: speech started at 2990
    _clear(core, 6000)  # neither: the speech at 2990 is too long ago
    core.note_bargein(7000)  # the agent is silent: ignored
    core.stop_message(8000)
    record = _record([2990], [_response("a", 0), _response("b", 800, overlaps="a", late_deltas=2),
                              _response("c", 2900, late_deltas=1)])
    report = _report(core, record, expect_bargeins=False)
    assert report["overlapping_frames"] == 5
    assert report["overlapping_responses"] == 1 and report["late_deltas_sent"] == 3
    assert (report["clears_superseded"], report["bargeins"], report["clears_not_bargein"]) == (1, 1, 1)
    assert report["bargein_to_clear_ms"]["count"] == 1 and report["bargein_to_clear_ms"]["max"] == 10
    assert report["bargeins_without_clear"] == 0
    assert set(report["talkover_ms"]) == {"p50", "p99", "p999", "max", "count"}
    assert not report["ok"] and "two voices" in report["problems"][0]


def test_a_clear_long_after_the_overlap_is_not_a_supersede():
    core = _core()
    _send(core, 1, 10, 0)
    core.tick_play(500)
    _clear(core, 800 + SUPERSEDE_CLEAR_WINDOW_MS + 1)
    report = _report(core, _record([], [_response("a", 0), _response("b", 800, overlaps="a")]), expect_bargeins=False)
    assert report["clears_superseded"] == 0
    assert any("a clear with no speech before it" in p for p in report["problems"])


def test_a_bargein_without_clear_fails_the_run_and_talkover_counts_in_the_window():
    core = _core()
    _send(core, 1, 100, 0)
    core.tick_play(100)
    assert core.note_bargein(100)
    core.tick_play(5000)
    core.stop_message(5000)
    record = _record([150, 4000], [_response("a", 0)])
    report = _report(core, record, expect_bargeins=False)
    assert report["bargeins_without_clear"] == 1 and not report["ok"]
    assert any("no clear within 1500 ms" in p for p in report["problems"])
    assert report["talkover_ms"]["count"] == 1 and report["talkover_ms"]["max"] == 1850  # 150 -> 2000
    windowed = _report(core, record, expect_bargeins=False, window_ms=(1000.0, 5000.0))
    assert windowed["talkover_ms"]["count"] == 0


def test_a_clean_call_stays_ok_with_the_new_keys_at_zero():
    core = _core()
    _send(core, 1, 20, 0)
    core.tick_play(100)
    assert core.note_bargein(100)
    _clear(core, 120)
    core.tick_play(2000)
    core.stop_message(2000)
    report = _report(core, _record([110], [_response("a", 0)]))
    assert report["ok"], report["problems"]
    assert (report["overlapping_frames"], report["bargeins_without_clear"], report["overlapping_responses"],
            report["late_deltas_sent"], report["clears_superseded"], report["bargeins"]) == (0, 0, 0, 0, 0, 1)
    assert report["talkover_ms"]["count"] == 1 and report["talkover_ms"]["max"] == 10  # 110 -> cut at 120
