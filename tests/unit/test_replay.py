"""Record and replay (INV-REPLAY): a recorded call replays through a fresh controller to identical actions."""

from __future__ import annotations

import json
import wave

from voicecore import record, replay
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder

from scenarios.catalog import SCENARIOS
from scenarios.harness import run

MS = 1_000_000


def recorded(name="bargein_mid", keep_audio=False):
    s = next(s for s in SCENARIOS if s.name == name)
    outcome = run(s.caller, s.model, s.config, s.flow_args, max_ms=s.max_ms)
    return outcome


def test_record_file_round_trips_and_replays_identically(tmp_path):
    o = recorded()
    path = record.save(o.recorder, tmp_path / "call.jsonl")
    assert path.stat().st_mode & 0o777 == 0o600
    header, entries = record.load(path)
    assert header["voicecore_record"] == 1 and header["config"]["watchdog_ms"] == 3000
    assert {e["k"] for e in entries} >= {"start", "model", "audio", "tick", "out"}
    result = replay.replay(header, entries)
    assert result.identical and result.divergence is None
    assert result.statistics["bargeins"] == 1


def test_a_changed_output_is_reported_as_the_first_divergence():
    o = recorded()
    header, entries = record.loads(o.recorder.dumps())
    target = next(i for i, e in enumerate(entries) if e["k"] == "out" and e["a"]["type"] == "CancelTag")
    entries[target] = {**entries[target], "a": {**entries[target]["a"], "tag": 99}}
    result = replay.replay(header, entries)
    assert not result.identical
    d = result.divergence
    assert d.t_ns == entries[target]["t"] and d.expected["tag"] == 99 and d.got["type"] == "CancelTag"


def test_a_changed_policy_diverges_where_it_first_matters():
    o = recorded()
    header, entries = record.loads(o.recorder.dumps())
    # the agent says the caller's words are one of its backchannels: the barge-in becomes a resume
    header = {**header, "config": {**header["config"], "backchannels": ["yes i have a question"]}}
    result = replay.replay(header, entries)
    assert not result.identical and result.divergence.expected["type"] == "CancelTag"


def test_main_reports_identical_writes_a_stereo_wav_and_measures_speed(tmp_path, capsys):
    o = recorded()
    path = record.save(o.recorder, tmp_path / "call.jsonl")
    wav = tmp_path / "call.wav"
    assert replay.main([str(path), "--wav", str(wav), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["identical"] and report["replay_speed_x"] > 1
    with wave.open(str(wav)) as w:
        assert (w.getnchannels(), w.getframerate(), w.getsampwidth()) == (2, 8000, 2)
        # agent audio heard: greeting + question + cut answer + second answer, at 8 samples per ms
        assert w.getnframes() >= 8 * 1000 * 10


def test_caller_audio_is_kept_when_asked_and_lands_on_the_left(tmp_path):
    c = C.CallController("CA1")
    rec = CallRecorder(c, keep_caller_audio=True)
    rec.start(0)
    rec.on_caller_audio(b"\x00" * 160, 1000 * MS)
    rec.on_tick(2000 * MS, C.IDLE_PLAYOUT)
    header, entries = record.loads(rec.dumps())
    result = replay.replay(header, entries)
    assert result.identical
    left = replay.caller_track(result, 0)
    assert left[8000:8160] == b"\x00" * 160 and left[:8000] == b"\xff" * 8000


def test_main_rejects_files_that_are_not_records(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    assert replay.main([str(bad)]) == 2
    assert replay.main([str(tmp_path / "missing.jsonl")]) == 2


def test_main_exit_1_on_divergence(tmp_path, capsys):
    o = recorded("cough_without_words")
    header, entries = record.loads(o.recorder.dumps())
    k = next(i for i, e in enumerate(entries) if e["k"] == "out" and e["a"]["type"] == "HoldTag")
    entries[k]["a"]["frames"] += 1
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [header] + entries) + "\n")
    assert replay.main([str(path)]) == 1
    assert "diverged at t=" in capsys.readouterr().out
