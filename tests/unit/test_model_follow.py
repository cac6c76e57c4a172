"""The standby's followers (workers/model/follow.py): a part file read as it grows, line by line and across
cut lines, rebuilds the same driver a whole-file replay does; a newer part file (the call was taken over
again) starts over from its chain; what cannot be read is given up, not guessed."""

from __future__ import annotations

from test_controller import IDLE, MS, created, delta, ev

from voicecore import replay
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder, encode_line
from voicecore.record import load_record
from workers.model.follow import CallFollower, Followers, part_path

CALL = "CA" + "7" * 32


def recorder():
    rec = CallRecorder(C.CallController(CALL))
    rec.start(0)
    return rec


def some_inputs(rec, t0_ms):
    rec.on_model_event(created(f"r{t0_ms}", 1), t0_ms * MS, IDLE)
    rec.on_model_event(delta(f"r{t0_ms}", 1600), (t0_ms + 10) * MS, IDLE)
    rec.on_tick((t0_ms + 20) * MS, IDLE)


def write(path, text, mode="a"):
    with open(path, mode, encoding="utf-8") as f:
        f.write(text)


def test_a_growing_part_file_rebuilds_what_a_whole_replay_rebuilds(tmp_path):
    rec = recorder()
    part = part_path(tmp_path, CALL, 1)
    write(part, encode_line(rec.header) + "\n", "w")
    follower = CallFollower(tmp_path, CALL)
    written = 0
    for t0 in (100, 300, 500):
        some_inputs(rec, t0)
        entries = rec.entries[written:]
        written = len(rec.entries)
        text = "".join(encode_line(e) + "\n" for e in entries)
        write(part, text[: len(text) // 2])  # a batch cut in the middle of a line ...
        follower.poll()
        write(part, text[len(text) // 2:])  # ... and its rest
        follower.poll()
    header, entries, _ = load_record(part)
    whole = replay.rebuild(replay.driver_for_record(tmp_path, header), entries)
    driver, name = follower.take()
    assert name == part.name and driver.statistics() == whole.statistics() == rec.statistics()
    assert driver.core.next_tag == whole.core.next_tag


def test_a_newer_part_file_starts_the_follower_over(tmp_path):
    rec = recorder()
    some_inputs(rec, 100)
    write(part_path(tmp_path, CALL, 1), "".join(encode_line(x) + "\n" for x in [rec.header, *rec.entries]), "w")
    followers = Followers(str(tmp_path))
    for f in followers.update([CALL]):
        f.poll()
    rec2 = CallRecorder(replay.rebuild(replay.driver_for_record(tmp_path, rec.header), rec.entries))
    rec2.header["resumed_from"] = part_path(tmp_path, CALL, 1).name
    rec2.reopen(1000 * MS)
    write(part_path(tmp_path, CALL, 2), "".join(encode_line(x) + "\n" for x in [rec2.header, *rec2.entries]), "w")
    driver, name = followers.take(CALL)
    assert name == part_path(tmp_path, CALL, 2).name
    assert driver.statistics() == rec2.statistics()


def test_a_part_file_that_is_not_a_record_is_given_up(tmp_path):
    write(part_path(tmp_path, CALL, 1), '{"not": "a record"}\n', "w")
    follower = CallFollower(tmp_path, CALL)
    follower.poll()
    assert follower.failed and follower.take() is None


def test_calls_that_ended_are_no_longer_followed(tmp_path):
    followers = Followers(str(tmp_path))
    followers.update([CALL, "CA" + "8" * 32])
    followers.update([CALL])
    assert list(followers.by_call) == [CALL]
