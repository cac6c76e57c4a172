"""The console's pure parts: the fan-out's queues and slow-observer rule, sessions and keys, waveform peaks."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson

from voicecore.console import auth, media
from voicecore.console.fanout import FanOut, Observer
from voicecore.g711 import linear_to_ulaw


def rows(call_sid: str, first: int, kinds: list[str]) -> list[tuple]:
    return [(call_sid, first + i, 100.0 + i, i * 10, kind, "{}") for i, kind in enumerate(kinds)]


def test_each_observer_gets_its_calls_events_and_the_every_call_observer_all():
    async def run():
        fanout = FanOut()
        one, other, every = Observer("CA1"), Observer("CA2"), Observer("")
        for observer in (one, other, every):
            fanout.add(observer)
        fanout.publish(rows("CA1", 1, ["call.started", "bargein"]))
        fanout.publish(rows("CA2", 1, ["call.started"]))
        assert fanout.live == {"CA1": 100.0, "CA2": 100.0}
        fanout.publish(rows("CA1", 3, ["call.ended"]))
        assert list(fanout.live) == ["CA2"]
        got = {name: [orjson.loads(o.queue.get_nowait()[1]) for _ in range(o.queue.qsize())]
               for name, o in (("one", one), ("other", other), ("every", every))}
        assert [(e["call_sid"], e["seq"], e["type"]) for e in got["one"]] == [("CA1", 1, "call.started"), ("CA1", 2, "bargein"),
                                                                            ("CA1", 3, "call.ended")]
        assert [e["seq"] for e in got["other"]] == [1] and len(got["every"]) == 4
        fanout.remove(one)
        fanout.remove(one)
        assert fanout.count() == 2

    asyncio.run(run())


def test_a_slow_observer_is_marked_and_woken_and_the_others_get_everything():
    async def run():
        fanout = FanOut()
        slow, fast = Observer("CA1", queue_size=4), Observer("CA1", queue_size=100)
        fanout.add(slow)
        fanout.add(fast)
        fanout.publish(rows("CA1", 1, ["transcript.delta"] * 10))
        assert slow.too_slow and fanout.too_slow == 1
        assert fast.queue.qsize() == 10 and not fast.too_slow
        # what the slow one's reader finds last is the wake-up, after which it closes the connection
        items = [slow.queue.get_nowait() for _ in range(slow.queue.qsize())]
        assert items[-1] == (0, b"") and len(items) == 4
        fanout.publish(rows("CA1", 11, ["bargein"]))
        assert slow.queue.qsize() == 0 and fanout.too_slow == 1  # nothing more for it, counted once

    asyncio.run(run())


def test_keys_come_from_a_header_and_browsers_from_a_session_cookie():
    assert auth.key_from_headers({"authorization": "Bearer vck_a"}) == "vck_a"
    assert auth.key_from_headers({"authorization": "Basic xyz", "x-voicecore-key": "vck_b"}) == "vck_b"
    assert auth.key_from_headers({}) == ""
    assert auth.cookie_value("a=1; voicecore_session=tok; b=2") == "tok" and auth.cookie_value("x=1") == ""
    keys = {"vck_good": "ops"}
    sessions = auth.Sessions(keys.get)
    assert sessions.open("vck_bad", 0.0) is None
    token, name = sessions.open("vck_good", 0.0)
    assert name == "ops" and sessions.who(token, 10.0) == "ops" and sessions.who("forged", 10.0) is None
    del keys["vck_good"]  # revoked: the session ends at its next re-check
    assert sessions.who(token, 30.0) == "ops" and sessions.who(token, 30.0 + auth.RECHECK_S) is None
    keys["vck_good"] = "ops"
    token, _ = sessions.open("vck_good", 0.0)
    assert sessions.who(token, auth.SESSION_TTL_S + 1) is None  # expired


def test_peaks_follow_the_loudness_of_each_stretch():
    quiet = np.zeros(8000, dtype=np.int16)
    loud = (np.sin(np.arange(8000) / 5) * 16000).astype(np.int16)
    track = linear_to_ulaw(np.concatenate([quiet, loud]).tobytes())
    peaks = media.peaks(track, 10)
    assert len(peaks) == 10 and max(peaks[:5]) < 0.01 and min(peaks[5:]) > 0.4
    shape = media.waveform(track, track[:8000], 4)
    assert shape["duration_ms"] == 2000 and len(shape["caller"]) == len(shape["agent"]) == 4
    assert max(shape["agent"]) < 0.01  # the shorter track padded with silence
    assert media.peaks(b"", 10) == []


def test_an_observer_whose_client_left_is_woken_even_with_a_full_queue():
    async def run():
        observer = Observer("CA1", queue_size=2)
        observer.queue.put_nowait((1, b"a"))
        observer.queue.put_nowait((2, b"b"))
        observer.leave()
        assert observer.gone and observer.queue.qsize() == 2 and observer.queue.get_nowait() == (2, b"b")
        assert observer.queue.get_nowait() == (0, b"")
        idle = Observer("CA2")
        idle.leave()
        assert idle.queue.get_nowait() == (0, b"")

    asyncio.run(run())
