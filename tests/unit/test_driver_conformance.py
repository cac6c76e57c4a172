"""One conformance suite for every call driver (voicecore/call/driver.py): the turn-taking CallController
and the SpineDriver take the same inputs and must keep the same promises about them.

Each test runs against both drivers (as trio runs one suite against every implementation of an
interface). A driver is fed raw Realtime server events on a virtual clock, with the playout snapshot a
carrier that plays everything written in real time would report; what differs by design (the controller
holds release on a bare VAD edge and cuts on words, the spine cuts on the edge) is fed the same way to
both, and the assertions are about what both must do.
"""

from __future__ import annotations

import base64
import json
import typing
from typing import Any

import pytest

from voicecore import timing
from voicecore.call import controller as C
from voicecore.call import core
from voicecore.call.driver import Driver, forwarding_actions
from voicecore.call.record import RECORD_VERSION, CallRecorder, loads
from voicecore.call.spine import SpineDriver
from voicecore.realtime import events as rt
from voicecore.replay import driver_from_header, replay

MS = 1_000_000
CALL_SID = "CA" + "c" * 32
FIRST_TAG = 5
PLAY_FROM_MS = 200  # the carrier starts playing the response's first frame here
SPEECH_MS = 600  # the caller starts speaking over it here
WORDS_MS = 1200  # ... and the first words of that speech are transcribed here
STOP_MS = 2000


def make_turns() -> Driver:
    return C.CallController(CALL_SID, first_tag=FIRST_TAG)


def make_spine() -> Driver:
    return SpineDriver(CALL_SID, first_tag=FIRST_TAG)


@pytest.fixture(params=[make_turns, make_spine], ids=["turns", "spine"])
def make_driver(request):
    return request.param


class Carrier:
    """Plays every frame written for the response's tag back to back from PLAY_FROM_MS (no pacer, no lead)."""

    def __init__(self) -> None:
        self.tag = 0
        self.written_frames = 0

    def apply(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, core.OpenTag) and not self.tag:
                self.tag = action.tag
            elif isinstance(action, core.WriteFrames) and action.tag == self.tag:
                self.written_frames = max(self.written_frames, action.first_index + len(action.audio) // timing.FRAME_BYTES)

    def played_frames(self, now_ns: int) -> int:
        return max(0, min(self.written_frames, (now_ns - PLAY_FROM_MS * MS) // timing.FRAME_NS))

    def snapshot(self, now_ns: int) -> core.Playout:
        played = self.played_frames(now_ns)
        empty_at = PLAY_FROM_MS * MS + self.written_frames * timing.FRAME_NS
        if played:  # the mark of the frame playing now has just echoed
            return core.Playout(self.tag, played, now_ns, self.tag, self.written_frames, empty_at)
        return core.Playout(0, 0, 0, self.tag, self.written_frames, empty_at if self.tag else 0)


class Call:
    """A driver (or a recorder around one) fed on a virtual clock; every action it returned is kept."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.carrier = Carrier()
        self.timed: list[tuple[int, Any]] = []  # (ms, action)
        self.requests: list[dict] = []  # response.create events the driver sent, in order

    def _keep(self, at_ms: int, actions: list) -> list:
        self.carrier.apply(actions)
        for action in actions:
            self.timed.append((at_ms, action))
            if isinstance(action, core.SendToModel):
                event = json.loads(action.text)
                if event["type"] == "response.create":
                    self.requests.append(event)
        return actions

    def start(self, at_ms: int = 0) -> list:
        return self._keep(at_ms, self.driver.start(at_ms * MS))

    def model(self, at_ms: int, **event: Any) -> list:
        now = at_ms * MS
        return self._keep(at_ms, self.driver.on_model_event(json.dumps(event), now, self.carrier.snapshot(now)))

    def tick(self, at_ms: int) -> list:
        now = at_ms * MS
        return self._keep(at_ms, self.driver.on_tick(now, self.carrier.snapshot(now)))

    def stop(self, at_ms: int) -> list:
        return self._keep(at_ms, self.driver.on_carrier_stop(at_ms * MS))

    def ticks(self, from_ms: int, to_ms: int) -> None:
        for at_ms in range(from_ms, to_ms, timing.FRAME_MS):
            self.tick(at_ms)

    # --- the server's side -----------------------------------------------------------------------
    def created(self, at_ms: int, response_id: str = "resp_1") -> list:
        """response.created answering the driver's newest response.create (its metadata echoed, C.2)."""
        response: dict[str, Any] = {"id": response_id, "object": "realtime.response", "status": "in_progress"}
        metadata = self.requests[-1].get("response", {}).get("metadata")
        if metadata is not None:
            response["metadata"] = metadata
        return self.model(at_ms, type="response.created", response=response)

    def delta(self, at_ms: int, audio: bytes, response_id: str = "resp_1") -> list:
        return self.model(at_ms, type="response.output_audio.delta", response_id=response_id, item_id="item_1",
                          output_index=0, content_index=0, delta=base64.b64encode(audio).decode())

    def of(self, kind: type, actions: list | None = None) -> list:
        source = [a for _, a in self.timed] if actions is None else actions
        return [a for a in source if isinstance(a, kind)]


def sent(actions: list) -> list[dict]:
    return [json.loads(a.text) for a in actions if isinstance(a, core.SendToModel)]


AUDIO = bytes(range(1, 251)) * 8 * 8  # 16,000 bytes: 100 frames (2 s) in 16 deltas of 1,000 (not frame-aligned)
DELTA_BYTES = 1000


def playing_call(driver: Any) -> Call:
    """Started, the greeting created at 50 ms, all of its audio streamed from 100 ms, playing from 200 ms."""
    call = Call(driver)
    call.start(0)
    call.created(50)
    for i in range(0, len(AUDIO), DELTA_BYTES):
        call.delta(100 + i // DELTA_BYTES, AUDIO[i:i + DELTA_BYTES])
    call.ticks(120, SPEECH_MS)
    return call


def barge_in(call: Call) -> None:
    """The caller talks over the playing response: the VAD edge, then words; the server's late deltas."""
    call.model(SPEECH_MS, type="input_audio_buffer.speech_started", audio_start_ms=SPEECH_MS, item_id="item_U")
    call.ticks(SPEECH_MS + 20, WORDS_MS)
    call.model(WORDS_MS, type="conversation.item.input_audio_transcription.delta", item_id="item_U",
               content_index=0, delta="stop please ")
    call.ticks(WORDS_MS + 20, WORDS_MS + 200)


# --- the tests --------------------------------------------------------------------------------------------
def test_both_drivers_satisfy_the_protocol(make_driver):
    driver = make_driver()
    assert isinstance(driver, Driver)
    assert driver.call_sid == CALL_SID and driver.control in ("turns", "spine")
    assert isinstance(driver.core, core.ModelCallCore)
    assert not isinstance(object(), Driver)


def test_start_configures_the_session_for_mu_law_and_asks_for_a_greeting(make_driver):
    call = Call(make_driver())
    events = sent(call.start(0))
    assert events[0]["type"] == "session.update"
    audio = events[0]["session"]["audio"]
    assert audio["input"]["format"] == audio["output"]["format"] == {"type": "audio/pcmu"}
    assert audio["input"]["turn_detection"]["type"] == "server_vad"
    assert [e["type"] for e in events[1:]] == ["response.create"]


def test_reopen_configures_the_new_session_first(make_driver):
    call = Call(make_driver())
    call.start(0)
    assert sent(call.driver.reopen(500 * MS))[0]["type"] == "session.update"


def test_a_responses_audio_deltas_become_frames_of_its_open_tag(make_driver):
    call = playing_call(make_driver())
    (opened,) = call.of(core.OpenTag)
    assert opened.tag == FIRST_TAG
    writes = call.of(core.WriteFrames)
    assert {w.tag for w in writes} == {opened.tag}
    assert [w.first_index for w in writes] == [sum(len(x.audio) for x in writes[:i]) // timing.FRAME_BYTES
                                              for i in range(len(writes))]  # contiguous, from frame 0
    assert all(len(w.audio) % timing.FRAME_BYTES == 0 for w in writes)
    assert b"".join(w.audio for w in writes) == AUDIO  # 100 whole frames: nothing padded, nothing lost
    closing = call.model(700, type="response.output_audio.done", response_id="resp_1", item_id="item_1",
                         output_index=0, content_index=0)
    assert call.of(core.EndTag, closing) == [core.EndTag(opened.tag, len(AUDIO) // timing.FRAME_BYTES)]


def test_a_short_last_frame_is_padded_with_silence_when_the_audio_is_done(make_driver):
    call = Call(make_driver())
    call.start(0)
    call.created(50)
    call.delta(100, b"\x01" * 200)  # one frame and 40 bytes
    closing = call.model(150, type="response.output_audio.done", response_id="resp_1", item_id="item_1")
    (last,) = call.of(core.WriteFrames, closing)
    assert (last.first_index, last.audio) == (1, b"\x01" * 40 + core.MU_LAW_SILENCE * 120)
    assert call.of(core.EndTag, closing) == [core.EndTag(FIRST_TAG, 2)]


def test_a_barge_in_cancels_the_tag_and_truncates_at_the_played_position(make_driver):
    call = playing_call(make_driver())
    barge_in(call)
    (cancel,) = call.of(core.CancelTag)
    assert cancel.tag == FIRST_TAG
    assert SPEECH_MS * MS <= cancel.decision_ns <= WORDS_MS * MS
    decided = [a for t, a in call.timed if t * MS == cancel.decision_ns]
    events = sent(decided)
    assert {"type": "response.cancel", "response_id": "resp_1"} in events
    (truncate,) = [e for e in events if e["type"] == "conversation.item.truncate"]
    heard_ms = call.carrier.played_frames(cancel.decision_ns) * timing.FRAME_MS
    assert 0 < heard_ms < len(AUDIO) // timing.BYTES_PER_MS  # cut mid-response
    assert truncate == {"type": "conversation.item.truncate", "item_id": "item_1", "content_index": 0,
                        "audio_end_ms": heard_ms}
    assert call.driver.statistics()["core_bargeins"] == 1


def test_late_deltas_of_a_cancelled_response_write_no_frames(make_driver):
    call = playing_call(make_driver())
    barge_in(call)
    dropped = call.driver.statistics()["core_deltas_dropped"]
    late = call.delta(WORDS_MS + 210, b"\x55" * 800) + call.delta(WORDS_MS + 220, b"\x55" * 800)
    assert call.of(core.WriteFrames, late) == []
    assert call.driver.statistics()["core_deltas_dropped"] == dropped + 2
    done = call.model(WORDS_MS + 230, type="response.done",
                      response={"id": "resp_1", "status": "cancelled", "status_details": {"reason": "client_cancelled"}})
    assert call.of(core.WriteFrames, done) == [] and call.of(core.EndTag, done) == []


def test_carrier_stop_starts_nothing_new(make_driver):
    call = playing_call(make_driver())
    barge_in(call)
    out = call.stop(STOP_MS)
    assert call.of(core.WriteFrames, out) == [] and call.of(core.OpenTag, out) == []
    assert [e for e in sent(out) if e["type"] in ("response.create", "conversation.item.create")] == []


def test_the_record_header_rebuilds_the_driver_and_the_record_replays_identically(make_driver):
    driver = make_driver()
    recorder = CallRecorder(driver)
    assert recorder.header == {"voicecore_record": RECORD_VERSION, **driver.record_header()}
    call = playing_call(recorder)
    barge_in(call)
    call.delta(WORDS_MS + 210, b"\x55" * 800)
    call.stop(STOP_MS)
    header, entries = loads(recorder.dumps())
    rebuilt = driver_from_header(header)
    assert type(rebuilt) is type(driver) and rebuilt.record_header() == driver.record_header()
    result = replay(header, entries)
    assert result.identical, result.divergence
    assert [C.action_to_dict(a) for _, a in result.timed_actions] == [C.action_to_dict(a) for _, a in call.timed]
    assert result.statistics == driver.statistics()


def test_the_recorder_is_a_driver_too(make_driver):
    driver = make_driver()
    recorder = CallRecorder(driver)
    assert isinstance(recorder, Driver)
    assert (recorder.call_sid, recorder.control, recorder.wants_ticks) == (driver.call_sid, driver.control, driver.wants_ticks)
    call = playing_call(recorder)
    assert recorder.quiet is driver.quiet is False  # a response plays
    call.stop(STOP_MS)
    # ended: the turns controller has nothing left to tick for; the spine is never ticked by quiet
    assert recorder.quiet is driver.quiet is (driver.control == "turns")
    assert recorder.core is driver.core and recorder.stats is driver.stats
    assert recorder.record_header() == driver.record_header() and recorder.statistics() == driver.statistics()


CALLER_FRAMES = bytes(range(1, 161)) * 5  # 100 ms of the caller: one inbound batch


def test_caller_audio_goes_to_the_model_first_and_the_record_keeps_it_as_an_entry(make_driver):
    recorder = CallRecorder(make_driver(), keep_caller_audio=False)
    call = playing_call(recorder)
    append = core.SendToModel(rt.input_audio_append(CALLER_FRAMES))
    assert forwarding_actions(CALLER_FRAMES) == 1 and forwarding_actions(b"") == 0
    out = call._keep(SPEECH_MS - 10, recorder.on_caller_audio(CALLER_FRAMES, (SPEECH_MS - 10) * MS))
    assert out[0] == append
    assert append not in call._keep(SPEECH_MS - 5, recorder.on_caller_audio(b"", (SPEECH_MS - 5) * MS))
    barge_in(call)
    call.stop(STOP_MS)
    # after the end: the audio still goes to the model (its content is the model's business), nothing else
    assert recorder.on_caller_audio(CALLER_FRAMES, (STOP_MS + 100) * MS) == [append]
    header, entries = loads(recorder.dumps())
    audio = [e for e in entries if e["k"] == "audio"]
    assert [e["n"] for e in audio] == [5, 0, 5] and not any("ulaw" in e for e in audio)
    assert not any(e["k"] == "out" and "input_audio_buffer.append" in e["a"].get("text", "") for e in entries)
    result = replay(header, entries)
    assert result.identical, result.divergence
    assert result.statistics == recorder.statistics()


def test_a_dtmf_digit_is_counted_in_the_core(make_driver):
    call = Call(make_driver())
    call.start(0)
    call.driver.on_dtmf("5", 100 * MS)
    assert call.driver.core.stats.dtmf_digits == 1 and call.driver.statistics()["core_dtmf_digits"] == 1


def test_the_spines_ticks_never_act_on_a_healthy_call(make_driver):
    """The turns controller always wants ticks; the spine only while its model owes an event or fails
    (voicecore/call/failures.py), and on a healthy call its ticks never act."""
    call = playing_call(make_driver())
    if call.driver.control == "turns":
        assert call.driver.wants_ticks is True
    else:  # playing, then talked over, then stopped: no tick ever acts
        ticks = [call.tick(at_ms) for at_ms in range(SPEECH_MS - 100, SPEECH_MS, timing.FRAME_MS)]
        barge_in(call)
        ticks += [call.tick(at_ms) for at_ms in range(WORDS_MS + 200, STOP_MS, timing.FRAME_MS)]
        call.stop(STOP_MS)
        ticks.append(call.tick(STOP_MS + 20))
        assert ticks == [[]] * len(ticks)


def test_a_verdict_carries_its_reason_and_citations_for_the_reader(make_driver):
    call = playing_call(make_driver())
    now = SPEECH_MS * MS
    assert isinstance(call.driver.on_verdict(FIRST_TAG, 10, False, now, call.carrier.snapshot(now), "ok", "[]"), list)


def test_carrier_stop_ends_a_turns_call_and_the_spine_decides_nothing(make_driver):
    call = playing_call(make_driver())
    out = call.stop(SPEECH_MS)  # the response is audible
    if call.driver.control == "turns":
        assert out[-1] == C.CallOver("caller_hangup")
    else:
        assert out == []  # the shell closes the model session of every call that ended


def test_every_action_a_driver_returns_has_one_handler_in_the_model_worker():
    from workers.model.main import EFFECTS, MODEL_SESSION_ACTIONS

    assert set(EFFECTS) == set(typing.get_args(C.Action))
    assert set(MODEL_SESSION_ACTIONS) == {core.SendToModel, C.CallOver}  # the model-session handler's actions
