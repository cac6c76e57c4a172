"""Spine-mode records (INV-REPLAY): the model worker's core alone, behind SpineDriver, recorded by
CallRecorder and replayed identically; sans-I/O, against the realtime-model simulator's core."""

from __future__ import annotations

import json
import os
import wave

import numpy as np

from voicecore import record, replay, timing
from voicecore.call import controller as C
from voicecore.call.record import INPUT_KINDS, CallRecorder, playout_from, playout_list
from voicecore.call.spine import SpineDriver
from voicecore.demo import DEMO_CLIPS
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.model import ModelSession, SimConfig

from scenarios.harness import PlayoutModel

MS = 1_000_000
CALL_SID = "CA" + "0" * 31 + "7"
SILENCE = b"\xff" * timing.FRAME_BYTES


def spine_call(seconds: float = 16.0, keep_audio: bool = True, reconnect_at_ms: int | None = None, sink=None,
               on_step=None, **core_args):
    """The demo's call (greeting, a question at 5.5 s, a barge-in at 10 s) on a virtual clock: the model
    simulator answers what the spine core sends; a pacer/carrier model plays what it writes.
    ``sink``: the recorder streams (see CallRecorder); ``on_step(rec, now_ms)`` runs every 20 ms."""
    sim = ModelSession(SimConfig(clip_sequence=DEMO_CLIPS, late_deltas_after_cancel=2), 0, 0, call_sid=CALL_SID)
    driver = SpineDriver(CALL_SID, first_tag=1, **core_args)
    rec = CallRecorder(driver, keep_caller_audio=keep_audio, sink=sink)
    playout = PlayoutModel()
    caller = bytearray(SILENCE * (int(seconds * 1000) // timing.FRAME_MS))
    for at_ms, clip in ((5500, "caller_basic_price"), (10_000, "caller_interrupt")):
        audio = load_clip(clip)
        at = at_ms * timing.BYTES_PER_MS
        caller[at:at + len(audio)] = audio[: max(0, len(caller) - at)]

    def apply(actions, now):
        for a in actions:
            if isinstance(a, C.SendToModel):
                sim.receive_client_event(a.text, now)
            else:
                playout.apply(a, now)

    apply(rec.start(0), 0)
    now = 0
    while now < seconds * 1000:
        if reconnect_at_ms is not None and now == reconnect_at_ms:
            sim = ModelSession(SimConfig(clip_sequence=DEMO_CLIPS), 1, 0, call_sid=CALL_SID, now_ms=now)
            apply(rec.reopen(now * MS), now)
        playout.step(now)
        sim.advance(now)
        for text in sim.events_to_send():
            apply(rec.on_model_event(text, now * MS, playout.snapshot()), now)
        if now % timing.INBOUND_BATCH_MS == 0 and now:
            batch = bytes(caller[(now - timing.INBOUND_BATCH_MS) * timing.BYTES_PER_MS: now * timing.BYTES_PER_MS])
            apply(rec.on_caller_audio(batch, now * MS, playout.snapshot()), now)
        if on_step is not None:
            on_step(rec, now)
        now += timing.FRAME_MS
    apply(rec.on_carrier_stop(now * MS), now)
    return rec, driver, playout


def test_a_spine_record_replays_identically(tmp_path):
    rec, driver, playout = spine_call()
    stats = driver.core.stats
    assert stats.responses >= 3 and stats.bargeins == 1 and stats.truncates == 1  # greeting, cut answer, next answer
    path = record.save_new(rec, tmp_path / "records")
    assert path.name == f"{CALL_SID}.jsonl"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    header, entries = record.load(path)
    assert (header["control"], header["call_sid"], header["first_tag"], header["args"]) == ("spine", CALL_SID, 1, {})
    assert {e["k"] for e in entries} >= {"start", "model", "audio", "stop", "out"}
    assert "tick" not in {e["k"] for e in entries}  # the spine has no timers
    result = replay.replay(header, entries)
    assert result.identical, result.divergence
    assert result.statistics["core_bargeins"] == 1
    assert result.outputs == sum(1 for e in entries if e["k"] == "out")


def test_a_spine_record_keeps_its_core_arguments(tmp_path):
    rec, driver, _ = spine_call(seconds=13, gate_policy="numbers", safe_line="Let me check that.")
    header, entries = record.loads(rec.dumps())
    assert header["args"] == {"gate_policy": "numbers", "safe_line": "Let me check that."}
    assert any(e["k"] == "out" and e["a"]["type"] == "OpenGate" for e in entries)
    assert replay.replay(header, entries).identical
    # a different policy is a different call: the replay says where it first shows
    changed = {**header, "args": {**header["args"], "gate_policy": "off"}}
    result = replay.replay(changed, entries)
    assert not result.identical and result.divergence.input_kind == "model"


def test_a_tampered_spine_record_reports_the_first_divergence(tmp_path):
    rec, _, _ = spine_call()
    header, entries = record.loads(rec.dumps())
    k = next(i for i, e in enumerate(entries) if e["k"] == "out" and e["a"]["type"] == "WriteFrames" and e["a"]["tag"] == 2)
    entries[k] = {**entries[k], "a": {**entries[k]["a"], "audio_crc": entries[k]["a"]["audio_crc"] ^ 1}}
    path = tmp_path / "tampered.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [header] + entries) + "\n")
    result = replay.replay(*record.load(path))
    assert not result.identical
    assert result.divergence.t_ns == entries[k]["t"] and result.divergence.got["audio_crc"] == entries[k]["a"]["audio_crc"] ^ 1
    assert replay.main([str(path), "--json"]) == 1
    # a model event taken out: the replay produces fewer (or other) actions where it mattered
    header, entries = record.loads(rec.dumps())
    k = next(i for i, e in enumerate(entries) if e["k"] == "model" and '"response.created"' in e["text"] and i > 10)
    del entries[k]
    assert not replay.replay(header, entries).identical


def test_replay_wav_of_a_spine_record_has_the_caller_left_and_the_agent_right(tmp_path, capsys):
    rec, _, playout = spine_call()
    path = record.save_new(rec, tmp_path)
    wav = tmp_path / "call.wav"
    assert replay.main([str(path), "--wav", str(wav), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["control"] == "spine" and report["identical"]
    with wave.open(str(wav)) as w:
        assert (w.getnchannels(), w.getframerate()) == (2, 8000)
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, 2)
    left, right = samples[:, 0].astype(np.int64), samples[:, 1].astype(np.int64)
    ms = lambda a, b: slice(a * 8, b * 8)  # noqa: E731
    # the caller speaks at 5.5 s and 10 s; the agent greets first and is cut off after the barge-in
    assert np.abs(left[ms(0, 5000)]).max() < 100 and np.abs(left[ms(5500, 7000)]).max() > 1000
    assert np.abs(right[ms(0, 4000)]).max() > 1000
    # every frame the caller heard sits exactly where the carrier model played it, and nothing else does
    # (not the answer's frames cleared by the barge-in, not what was queued when the call ended)
    header, entries = record.load(path)
    result = replay.replay(header, entries)
    track = replay.agent_track(result, entries[0]["t"])
    written = {}
    for _, a in result.timed_actions:
        if isinstance(a, C.WriteFrames):
            for k in range(len(a.audio) // timing.FRAME_BYTES):
                written[(a.tag, a.first_index + k)] = a.audio[k * timing.FRAME_BYTES:(k + 1) * timing.FRAME_BYTES]
    heard_at = set()
    end_ms = (entries[-1]["t"] - entries[0]["t"]) // MS
    for tag, index, at_ms in (h for h in playout.heard if h[2] < end_ms):
        assert track[at_ms * 8: at_ms * 8 + timing.FRAME_BYTES] == written[(tag, index)]
        heard_at.add(at_ms)
    others = [i // 8 for i in range(0, len(track), timing.FRAME_BYTES) if i // 8 not in heard_at]
    assert all(track[at * 8: at * 8 + timing.FRAME_BYTES] == SILENCE for at in others)
    assert len(heard_at) > 400 and len(track) <= end_ms * 8


def test_without_caller_audio_the_record_keeps_only_timing(tmp_path):
    rec, _, _ = spine_call(seconds=13, keep_audio=False)
    header, entries = record.loads(rec.dumps())
    audio = [e for e in entries if e["k"] == "audio"]
    assert audio and all("ulaw" not in e for e in audio) and all(len(e["p"]) == 7 for e in audio)
    result = replay.replay(header, entries)
    assert result.identical and replay.caller_track(result, 0) == b""


def test_a_reconnected_model_session_is_configured_again_and_replays(tmp_path):
    rec, driver, _ = spine_call(seconds=13, reconnect_at_ms=7000)
    header, entries = record.loads(rec.dumps())
    (reopen,) = [i for i, e in enumerate(entries) if e["k"] == "reopen"]
    outs = [e["a"] for e in entries[reopen + 1:reopen + 3] if e["k"] == "out"]
    assert len(outs) == 1 and outs[0]["type"] == "SendToModel" and '"session.update"' in outs[0]["text"]  # no second greeting
    assert replay.replay(header, entries).identical


def test_old_records_without_control_are_turns_records():
    c = C.CallController("CA1")
    rec = CallRecorder(c)
    rec.start(0)
    rec.on_tick(20 * MS, C.IDLE_PLAYOUT)
    header, entries = record.loads(rec.dumps())
    assert header["control"] == "turns"
    del header["control"]
    assert replay.replay(header, entries).identical
    assert isinstance(replay.driver_from_header(header), C.CallController)


def test_a_second_record_of_one_call_never_overwrites_the_first(tmp_path):
    rec, _, _ = spine_call(seconds=13)
    first = record.save_new(rec, tmp_path)
    second = record.save_new(rec, tmp_path)
    assert (first.name, second.name) == (f"{CALL_SID}.jsonl", f"{CALL_SID}-2.jsonl")
    assert first.read_text() == second.read_text()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_streamed_record_holds_one_hand_off_in_memory_and_writes_the_same_file(tmp_path):
    whole, _, _ = spine_call()
    expected = whole.dumps()
    out = record.RecordFile(tmp_path / "records", whole.header)
    held: list[int] = []

    def every_second(rec, now_ms):
        if now_ms % 1000 == 0:
            held.append(len(rec.entries))
            rec.hand_off()
            assert rec.entries == []

    rec, _, _ = spine_call(sink=out.append, on_step=every_second)
    part = tmp_path / "records" / f"{CALL_SID}.jsonl.part"
    assert part.stat().st_mode & 0o777 == 0o600 and part.parent.stat().st_mode & 0o777 == 0o700
    assert part.read_text().splitlines()[0] == expected.splitlines()[0]  # the header comes first
    # in memory: never more than one second's entries
    per_second: dict[int, int] = {}
    for e in whole.entries:
        per_second[e["t"] // (1000 * MS)] = per_second.get(e["t"] // (1000 * MS), 0) + 1
    assert max(held) <= max(per_second.values()) + 1 and max(held) < len(whole.entries) // 4
    assert rec.handed_off + len(rec.entries) == len(whole.entries)
    rec.hand_off()
    path = out.finish()
    assert path.name == f"{CALL_SID}.jsonl" and not part.exists()
    assert path.read_text() == expected
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_record_file_never_takes_a_name_in_use(tmp_path):
    rec, _, _ = spine_call(seconds=6)
    (tmp_path / f"{CALL_SID}.jsonl.part").write_text("left by a killed worker\n")
    second = record.RecordFile(tmp_path, rec.header)
    second.append(rec.entries)
    assert second.part is not None and second.part.name == f"{CALL_SID}-2.jsonl.part"
    (tmp_path / f"{CALL_SID}-2.jsonl").write_text("taken\n")  # whatever took the name meanwhile stays
    path = second.finish()
    assert path.name == f"{CALL_SID}-3.jsonl" and path.read_text() == rec.dumps()
    assert (tmp_path / f"{CALL_SID}-2.jsonl").read_text() == "taken\n"
    assert (tmp_path / f"{CALL_SID}.jsonl.part").read_text() == "left by a killed worker\n"
    assert sorted(os.listdir(tmp_path)) == [f"{CALL_SID}-2.jsonl", f"{CALL_SID}-3.jsonl", f"{CALL_SID}.jsonl.part"]


def test_a_part_file_cut_short_replays_what_it_has_and_says_incomplete(tmp_path, capsys):
    rec, _, _ = spine_call()
    lines = rec.dumps().splitlines(keepends=True)
    # cut inside a line, right after an input whose actions were not written yet
    cut = next(i for i in range(len(lines) // 2, len(lines)) if '"k":"model"' in lines[i] and '"k":"out"' in lines[i + 1])
    part = tmp_path / f"{CALL_SID}.jsonl.part"
    part.write_text("".join(lines[:cut + 1]) + lines[cut + 1][: len(lines[cut + 1]) // 2])
    header, entries, complete = record.load_record(part)
    assert not complete and len(entries) == cut
    assert replay.main([str(part), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    kept_inputs = sum(1 for line in lines[1:cut + 1] if json.loads(line)["k"] in INPUT_KINDS)
    assert report["identical"] and report["complete"] is False and "incomplete" in report["note"]
    assert report["inputs"] == kept_inputs
    assert replay.main([str(part)]) == 0
    assert "incomplete" in capsys.readouterr().out
    # the same lines under a final name: complete lines, still reported incomplete (the last line is cut)
    cut_final = tmp_path / "cut.jsonl"
    cut_final.write_text(part.read_text())
    assert record.load_record(cut_final)[2] is False
    # a wrong action in what is there is still a divergence
    bad = tmp_path / "bad.jsonl.part"
    i = next(i for i in range(1, cut) if '"k":"out"' in lines[i])
    tampered = json.loads(lines[i])
    tampered["a"]["type"] = "Nothing"
    bad.write_text("".join(lines[:i]) + json.dumps(tampered) + "\n" + "".join(lines[i + 1:cut + 1]))
    assert replay.main([str(bad), "--json"]) == 1


def test_a_record_whose_snapshots_have_six_values_replays_as_one_with_no_clear_time():
    """Records written before cleared_at_ns have six values per snapshot: read with 0 for it, they replay
    as written (this call's fake carrier never clears, so its seventh value is 0 throughout)."""
    rec, _, _ = spine_call()
    header, entries = record.loads(rec.dumps())
    assert all(len(e["p"]) == 7 and e["p"][6] == 0 for e in entries if "p" in e)
    for entry in entries:
        if "p" in entry:
            entry["p"] = entry["p"][:6]
    assert playout_from(next(e["p"] for e in entries if "p" in e)).cleared_at_ns == 0
    result = replay.replay(header, entries)
    assert result.identical, result.divergence
    assert playout_list(playout_from([1, 2, 3, 4, 5, 6, 7])) == [1, 2, 3, 4, 5, 6, 7]
