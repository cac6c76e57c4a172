"""The realtime-model simulator (voicecore.sim.model / model_server): every client event path of
docs/explanation/protocols.md#d2, beta and GA naming, the order of docs/explanation/protocols.md#d1, delta sizes,
dither, late deltas, truncation, the failure and transcript-validation switches. Every server event the simulator
emits is validated against the `openai` package's own types and parsed by voicecore.realtime.events. The core runs
on a fake clock that jumps to each wakeup; one test starts the real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicecore.realtime import events as ev
from voicecore.sim import audio_clips
from voicecore.sim.model import ModelSession, SimConfig
from voicecore.sim.model.clips import dither_ulaw, peak_ulaw, rms_ulaw, rms_ulaw_numpy
from voicecore.sim.model.rng import SplitMix64
from voicecore.sim.model.schedule import split_delta_sizes
from voicecore.timing import BYTES_PER_MS, FRAME_BYTES

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import audioop

from realtime_wire import ID_RE, validate_server

PCMU = {"ga": "audio/pcmu", "beta": "g711_ulaw"}
VAD = {"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 300}
CLIPS = {c.name: c for c in audio_clips.clip_index()}


class Harness:
    """A ModelSession on a fake clock: every emitted text is validated, parsed and kept."""

    def __init__(self, config: SimConfig | None = None, naming: str | None = None, index: int = 0,
                 seed: int = 7, setup: bool = True, **session_update: Any) -> None:
        self.config = config or SimConfig(first_delta_latency_ms=100)
        self.now = 0
        self.session = ModelSession(self.config, index, seed, naming=naming, call_sid="CA1")
        self.naming = self.session.naming
        self.log: list[tuple[int, dict[str, Any]]] = []
        self.drain()
        if setup:
            kwargs = {"instructions": "Help.", "voice": "alloy", "turn_detection": None,
                      "transcription_model": "whisper-1"}
            kwargs.update(session_update)
            out = self.send(ev.session_update(self.naming, **kwargs))
            assert [e["type"] for e in out] == ["session.updated"], out

    def drain(self) -> list[dict[str, Any]]:
        out = []
        for text in self.session.events_to_send():
            validate_server(self.naming, text)
            event = json.loads(text)
            self.log.append((self.now, event))
            out.append(event)
        return out

    def send(self, text: str) -> list[dict[str, Any]]:
        self.session.receive_client_event(text, self.now)
        return self.drain()

    def run_until(self, t_ms: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while (wake := self.session.next_wakeup_ms()) is not None and wake <= t_ms:
            self.now = max(self.now, wake)
            self.session.advance(self.now)
            out += self.drain()
        self.now = max(self.now, t_ms)
        return out

    def run_all(self, limit_ms: int = 600_000) -> list[dict[str, Any]]:
        """Run until nothing is scheduled (at most `limit_ms` ahead); the clock stays at the last event."""
        out: list[dict[str, Any]] = []
        end = self.now + limit_ms
        while (wake := self.session.next_wakeup_ms()) is not None and wake <= end:
            out += self.run_until(wake)
        return out

    def append(self, audio: bytes, batch_ms: int = 100) -> list[dict[str, Any]]:
        """Append like the model worker does, in batches, advancing the clock in real time."""
        out: list[dict[str, Any]] = []
        step = batch_ms * BYTES_PER_MS
        for i in range(0, len(audio), step):
            out += self.run_until(self.now + batch_ms)
            out += self.send(ev.input_audio_append(audio[i : i + step]))
        return out


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def audio_of(events: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in events if e["type"].endswith("audio.delta"))


def first(events: list[dict[str, Any]], event_type: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == event_type)


SILENCE = b"\xff"


# ---- handshake and session -------------------------------------------------------------------------


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_session_created_first_then_update_merges(naming: str) -> None:
    h = Harness(naming=naming, setup=False)
    assert types([e for _, e in h.log]) == ["session.created"]
    created = h.log[0][1]["session"]
    assert created["id"] == h.session.session_id and ID_RE.match(created["id"])
    out = h.send(ev.session_update(naming, "Be brief.", "coral", VAD, None))
    session = out[0]["session"]
    if naming == "ga":
        assert session["audio"]["output"]["format"] == {"type": "audio/pcmu"}
        assert session["audio"]["output"]["voice"] == "coral"
        td = session["audio"]["input"]["turn_detection"]
    else:
        assert session["output_audio_format"] == session["input_audio_format"] == "g711_ulaw"
        assert session["voice"] == "coral"
        td = session["turn_detection"]
    # fields not sent keep their defaults (C.2: only the fields you send change)
    assert td["create_response"] is True and td["interrupt_response"] is True and td["threshold"] == 0.5
    assert session["instructions"] == "Be brief."
    # a second update that sends only instructions keeps the rest
    again = h.send(json.dumps({"type": "session.update", "session": (
        {"type": "realtime", "instructions": "Other."} if naming == "ga" else {"instructions": "Other."})}))
    assert again[0]["session"]["instructions"] == "Other."
    kept = again[0]["session"]
    assert (kept["audio"]["output"]["voice"] if naming == "ga" else kept["voice"]) == "coral"


@pytest.mark.parametrize(
    "naming,session,code,param",
    [
        ("ga", {"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcmu", "rate": 8000}}}},
         "unknown_parameter", "session.audio.output.format.rate"),
        ("ga", {"instructions": "x"}, "missing_required_parameter", "session.type"),
        ("ga", {"type": "realtime", "modalities": ["audio"]}, "unknown_parameter", "session.modalities"),
        ("ga", {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad", "x": 1}}}},
         "unknown_parameter", "session.audio.input.turn_detection.x"),
        ("ga", {"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}},
         "invalid_value", "session.audio.output.format.rate"),
        ("ga", {"type": "transcription"}, "invalid_value", "session.type"),
        ("beta", {"audio": {}}, "unknown_parameter", "session.audio"),
        ("beta", {"output_audio_format": "audio/pcmu"}, "invalid_value", "session.output_audio_format"),
        ("beta", {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5}}, "unknown_parameter",
         "session.turn_detection.idle_timeout_ms"),
        ("beta", {"turn_detection": {"type": "magic"}}, "invalid_value", "session.turn_detection.type"),
        ("beta", {"input_audio_transcription": "whisper-1"}, "invalid_value", "session.input_audio_transcription"),
        ("beta", {"instructions": 5}, "invalid_value", "session.instructions"),
        ("ga", {"type": "realtime", "instructions": None}, "invalid_value", "session.instructions"),
        ("ga", {"type": "realtime", "output_modalities": ["audio", "text"]}, "invalid_value",
         "session.output_modalities"),
        ("ga", {"type": "realtime", "audio": []}, "invalid_value", "session.audio"),
        ("ga", {"type": "realtime", "audio": {"video": {}}}, "unknown_parameter", "session.audio.video"),
        ("ga", {"type": "realtime", "audio": {"input": {"rate": 1}}}, "unknown_parameter",
         "session.audio.input.rate"),
        ("ga", {"type": "realtime", "audio": {"output": {"temperature": 1}}}, "unknown_parameter",
         "session.audio.output.temperature"),
        ("ga", {"type": "realtime", "audio": {"input": {"format": "pcmu"}}}, "invalid_value",
         "session.audio.input.format"),
        ("ga", {"type": "realtime", "audio": {"input": {"format": {"type": "g711_ulaw"}}}}, "invalid_value",
         "session.audio.input.format.type"),
        ("ga", {"type": "realtime", "audio": {"input": {"turn_detection": "server_vad"}}}, "invalid_value",
         "session.audio.input.turn_detection"),
    ],
)
def test_session_update_errors(naming: str, session: dict[str, Any], code: str, param: str) -> None:
    h = Harness(naming=naming)
    out = h.send(json.dumps({"type": "session.update", "event_id": "evt_su", "session": session}))
    assert types(out) == ["error"]
    error = out[0]["error"]
    assert (error["code"], error["param"], error["event_id"]) == (code, param, "evt_su")
    assert error["type"] == "invalid_request_error"
    assert h.session.record.errors[-1].code == code


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_session_update_every_field(naming: str) -> None:
    h = Harness(naming=naming)
    tool = {"type": "function", "name": "lookup", "description": "d", "parameters": {"type": "object"}}
    if naming == "ga":
        session = {"type": "realtime", "instructions": "I.", "output_modalities": ["audio"], "tools": [tool],
                   "tool_choice": "auto", "max_output_tokens": 512,
                   "audio": {"input": {"format": {"type": "audio/pcmu"}, "noise_reduction": {"type": "near_field"},
                                       "transcription": {"model": "whisper-1"},
                                       "turn_detection": {"type": "semantic_vad", "eagerness": "low"}},
                             "output": {"format": {"type": "audio/pcmu"}, "voice": "marin", "speed": 1.1}}}
    else:
        session = {"instructions": "I.", "modalities": ["text", "audio"], "tools": [tool], "tool_choice": "auto",
                   "max_response_output_tokens": 512, "input_audio_format": "g711_ulaw",
                   "output_audio_format": "g711_ulaw", "input_audio_noise_reduction": {"type": "near_field"},
                   "input_audio_transcription": {"model": "whisper-1"}, "voice": "ash", "speed": 1.1,
                   "turn_detection": {"type": "semantic_vad", "eagerness": "low"}, "temperature": 0.7}
    out = h.send(json.dumps({"type": "session.update", "session": session}))
    updated = out[0]["session"]
    assert updated["tools"] == [tool]
    if naming == "ga":
        assert updated["max_output_tokens"] == 512 and updated["audio"]["output"]["speed"] == 1.1
        assert updated["audio"]["input"]["noise_reduction"] == {"type": "near_field"}
        assert updated["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"
    else:
        assert updated["max_response_output_tokens"] == 512 and updated["speed"] == 1.1
        assert updated["input_audio_noise_reduction"] == {"type": "near_field"}
    h.send(ev.response_create())
    done = h.run_all()[-1]["response"]
    assert done["max_output_tokens"] == 512


def test_voice_fixed_once_audio_produced() -> None:
    h = Harness()
    h.send(ev.response_create())
    h.run_all()
    out = h.send(ev.session_update("ga", "Help.", "verse", None))
    assert out[0]["error"]["code"] == "cannot_update_voice"
    assert types(h.send(ev.session_update("ga", "Again.", "alloy", None))) == ["session.updated"]


def test_response_refused_until_output_is_pcmu() -> None:
    h = Harness(setup=False)
    out = h.send(ev.response_create(event_id="r1"))
    assert types(out) == ["error"] and out[0]["error"]["event_id"] == "r1"
    assert h.session.record.responses == []


# ---- responses ---------------------------------------------------------------------------------------

GA_ORDER_HEAD = ["response.created", "response.output_item.added", "conversation.item.added",
                 "response.content_part.added"]
GA_ORDER_TAIL = ["rate_limits.updated", "response.output_audio.done", "response.output_audio_transcript.done",
                 "response.content_part.done", "response.output_item.done", "conversation.item.done", "response.done"]
BETA_ORDER_HEAD = ["response.created", "response.output_item.added", "conversation.item.created",
                   "response.content_part.added"]
BETA_ORDER_TAIL = ["rate_limits.updated", "response.audio.done", "response.audio_transcript.done",
                   "response.content_part.done", "response.output_item.done", "response.done"]


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_response_sequence_d1(naming: str) -> None:
    h = Harness(naming=naming)
    head = h.send(ev.response_create())
    body = h.run_all()
    head_order, tail_order = (GA_ORDER_HEAD, GA_ORDER_TAIL) if naming == "ga" else (BETA_ORDER_HEAD, BETA_ORDER_TAIL)
    assert types(head) == head_order
    delta_types = {"response.output_audio.delta", "response.output_audio_transcript.delta"} if naming == "ga" else {
        "response.audio.delta", "response.audio_transcript.delta"}
    middle = [e for e in body if e["type"] in delta_types]
    assert types(body) == types(middle) + tail_order
    assert len({e["type"] for e in middle}) == 2
    record = h.session.record.responses[0]
    rid, iid = record.response_id, record.item_id
    assert ID_RE.match(rid) and ID_RE.match(iid)
    assert head[0]["response"]["id"] == rid and head[1]["item"]["id"] == iid
    for e in body:
        if e["type"] not in ("rate_limits.updated", "response.done", "conversation.item.done",
                             "response.output_item.done"):
            assert (e["response_id"], e["item_id"]) == (rid, iid), e["type"]
    # the two streams are interleaved, not one after the other
    kinds = ["a" if "audio.delta" in e["type"] else "t" for e in middle]
    assert "".join(kinds).count("ta") + "".join(kinds).count("at") > 4
    # audio: the clip plus dither, in deltas that never line up with 160-byte frames
    audio = audio_of(body)
    assert audio == record.audio and len(audio) == len(audio_clips.load_clip(record.clip_name))
    sizes = [len(base64.b64decode(e["delta"])) for e in middle if "audio.delta" in e["type"]]
    assert sizes == record.delta_bytes and all(s % FRAME_BYTES for s in sizes)
    assert all(300 <= s <= 1900 for s in sizes[:-1])
    # transcript deltas join to the transcript, which is the clip's text
    words = "".join(e["delta"] for e in middle if "transcript" in e["type"])
    done = first(body, "response.output_audio_transcript.done" if naming == "ga" else "response.audio_transcript.done")
    assert words == done["transcript"] == record.text == CLIPS[record.clip_name].text
    final = body[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["status"] == "completed"
    assert final["output"][0]["content"][0]["transcript"] == record.text
    assert final["usage"]["total_tokens"] > 0
    assert record.status == "completed" and record.sent_bytes == len(record.audio) and record.late_bytes == 0
    assert record.first_delta_ms is not None and record.done_ms is not None


def test_audio_faster_than_real_time() -> None:
    config = SimConfig(first_delta_latency_ms=250, speed_factor=4.0, clip_sequence=("agent_basic_price",))
    h = Harness(config)
    h.send(ev.response_create())
    h.run_all()
    delta_times = [t for t, e in h.log if e["type"] == "response.output_audio.delta"]
    duration_ms = CLIPS["agent_basic_price"].duration_ms
    record = h.session.record.responses[0]
    assert delta_times[0] >= 250 and record.first_delta_ms == delta_times[0]
    assert delta_times[-1] <= 250 + duration_ms // 4 + 2
    assert record.done_ms == delta_times[-1]


def test_response_ids_events_and_audio_are_deterministic() -> None:
    def run(index: int, seed: int) -> list[str]:
        h = Harness(index=index, seed=seed)
        h.send(ev.response_create())
        h.run_all()
        return [json.dumps(e) for _, e in h.log]

    assert run(0, 7) == run(0, 7)
    assert run(1, 7) != run(0, 7)
    assert run(0, 8) != run(0, 7)


def test_clip_choice_round_robin_scripted_pinned_and_metadata() -> None:
    h = Harness()
    chosen = []
    for _ in range(4):
        h.send(ev.response_create())
        h.run_all()
    chosen = [r.clip_name for r in h.session.record.responses]
    auto = [c.name for c in audio_clips.clip_index() if c.role == "agent" and c.kind in ("question", "answer")]
    assert chosen == auto[:4]
    h.send(ev.response_create(instructions='Say exactly: "Hello, thanks for calling Acme. How can I help you today?"'))
    h.run_all()
    h.send(ev.response_create(metadata={"sim_clip": "agent_goodbye"}))
    h.run_all()
    assert [r.clip_name for r in h.session.record.responses[4:]] == ["agent_greeting", "agent_goodbye"]
    out = h.send(ev.response_create(metadata={"sim_clip": "nope"}, event_id="m1"))
    assert out[0]["error"]["param"] == "response.metadata.sim_clip" and out[0]["error"]["event_id"] == "m1"
    pinned = Harness(SimConfig(clip_sequence=("agent_checkin", "agent_hours")))
    for _ in range(3):
        pinned.send(ev.response_create(instructions="Hello, thanks for calling Acme. How can I help you today?"))
        pinned.run_all()
    assert [r.clip_name for r in pinned.session.record.responses] == ["agent_checkin", "agent_hours", "agent_checkin"]


def test_response_create_while_active_is_an_error() -> None:
    h = Harness()
    h.send(ev.response_create())
    out = h.send(ev.response_create(event_id="dup"))
    assert types(out) == ["error"]
    assert out[0]["error"]["code"] == "conversation_already_has_active_response"
    assert out[0]["error"]["event_id"] == "dup"
    assert len(h.session.record.responses) == 1


# ---- dither and frame identity -----------------------------------------------------------------------


def test_frames_of_different_responses_never_collide() -> None:
    # the same clip six times: only the dither tells the frames apart
    h = Harness(SimConfig(clip_sequence=("agent_checkin",)))
    for _ in range(6):
        h.send(ev.response_create())
        h.run_all()
    responses = h.session.record.responses
    owners = h.session.record.frame_owners()
    full_frames = sum(len(r.audio) // FRAME_BYTES for r in responses)
    assert len(owners) == full_frames  # no frame content appears twice, within or across responses
    r = responses[3]
    assert owners[r.frames()[5]] == (r.response_id, 5)
    assert h.session.record.response(r.response_id) is r and h.session.record.response_for_item(r.item_id) is r
    with pytest.raises(KeyError):
        h.session.record.response("resp_x")
    with pytest.raises(KeyError):
        h.session.record.response_for_item("item_x")
    assert len({r.audio for r in responses}) == 6


def test_dither_is_small_and_keeps_length() -> None:
    clip = audio_clips.load_clip("agent_greeting")
    out = dither_ulaw(clip, 123)
    assert len(out) == len(clip) and out != clip and dither_ulaw(clip, 123) == out
    lin_in = np.frombuffer(audioop.ulaw2lin(clip, 2), dtype=np.int16).astype(np.int32)
    lin_out = np.frombuffer(audioop.ulaw2lin(out, 2), dtype=np.int16).astype(np.int32)
    diff = np.abs(lin_out - lin_in)
    quiet = np.abs(lin_in) < 370
    assert diff[quiet].max() <= 16  # one mu-law step in the two quietest segments (about -66 dBFS)
    noise_dbfs = 10 * np.log10(np.mean(diff.astype(float) ** 2) / 32768.0**2)
    assert noise_dbfs < -60  # measured about -69 dBFS RMS on this clip
    noise_db = 10 * np.log10(np.mean(diff.astype(float) ** 2) / np.mean(lin_in.astype(float) ** 2))
    assert noise_db < -40  # well under mu-law's own quantisation noise (about -38 dB below the signal)
    assert dither_ulaw(b"", 1) == b""
    silence = dither_ulaw(SILENCE * 1000, 5)
    assert set(audioop.ulaw2lin(silence, 2)) <= set(audioop.ulaw2lin(bytes([0xFF, 0xFE, 0x7E, 0x7F]), 2))


def test_split_delta_sizes_never_frame_aligned() -> None:
    rng = SplitMix64(1)
    for total in [1, 80, 160, 161, 320, 1900, 1920, 3200, 32000, 33920, 40000]:
        sizes = split_delta_sizes(total, rng, 300, 1900)
        assert sum(sizes) == total and all(s > 0 and s % FRAME_BYTES for s in sizes), (total, sizes)


def test_rms_fallback_matches_audioop() -> None:
    data = bytes(SplitMix64(3).below(256) for _ in range(1600))
    for i in range(0, 1600, 160):
        assert abs(rms_ulaw_numpy(data[i : i + 160]) - rms_ulaw(data[i : i + 160])) <= 1
    assert rms_ulaw_numpy(b"") == 0


# ---- cancel ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("naming", ["ga", "beta"])
@pytest.mark.parametrize("late", [0, 1, 2, 3])
def test_cancel_lets_late_deltas_out_then_cascade(naming: str, late: int) -> None:
    h = Harness(SimConfig(first_delta_latency_ms=100, late_deltas_after_cancel=late,
                          clip_sequence=("agent_basic_price",)), naming=naming)
    h.send(ev.response_create())
    before = h.run_until(400)
    sent_before = audio_of(before)
    assert 0 < len(sent_before) < len(h.session.record.responses[0].audio)
    out = h.send(ev.response_cancel(event_id="c1"))
    record = h.session.record.responses[0]
    audio_delta = "response.output_audio.delta" if naming == "ga" else "response.audio.delta"
    assert types(out)[:late] == [audio_delta] * late
    tail = GA_ORDER_TAIL[1:] if naming == "ga" else BETA_ORDER_TAIL[1:]
    assert types(out)[late:] == tail
    late_audio = audio_of(out)
    assert record.late_bytes == len(late_audio) and record.sent_bytes == len(sent_before) + len(late_audio)
    assert sent_before + late_audio == record.audio[: record.sent_bytes]
    done = out[-1]["response"]
    assert done["status"] == "cancelled"
    assert done["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    assert done["output"][0]["status"] == "incomplete"
    transcript_done = out[late + 1]
    spoken = "".join(e["delta"] for _, e in h.log if "transcript.delta" in e["type"])
    assert transcript_done["transcript"] == spoken and len(spoken) < len(record.text)
    assert (record.status, record.reason, record.cancel_ms) == ("cancelled", "client_cancelled", 400)
    assert h.session.record.cancels[0].cancelled_response_id == record.response_id
    assert h.run_all() == [] and h.session.next_wakeup_ms() is None
    # nothing is active any more
    again = h.send(ev.response_cancel())
    assert again[0]["error"]["code"] == "response_cancel_not_active"


def test_cancel_errors() -> None:
    h = Harness()
    out = h.send(ev.response_cancel(event_id="c0"))
    assert types(out) == ["error"]
    assert out[0]["error"]["code"] == "response_cancel_not_active"
    assert out[0]["error"]["message"] == "Cancellation failed: no active response found"
    assert out[0]["error"]["event_id"] == "c0"
    h.send(ev.response_create())
    out = h.send(ev.response_cancel("resp_notthisone000000000"))
    assert out[0]["error"]["code"] == "response_cancel_not_active"
    rid = h.session.active_response_id
    out = h.send(ev.response_cancel(rid))
    assert out[-1]["type"] == "response.done" and out[-1]["response"]["status"] == "cancelled"
    assert [c.cancelled_response_id for c in h.session.record.cancels] == [None, None, rid]


def test_cancel_before_first_delta() -> None:
    h = Harness()
    h.send(ev.response_create())
    out = h.send(ev.response_cancel())
    assert types(out) == GA_ORDER_TAIL[1:]
    assert out[1]["transcript"] == "" and h.session.record.responses[0].sent_bytes == 0


# ---- truncate / delete / items -----------------------------------------------------------------------


def test_truncate_semantics() -> None:
    h = Harness(SimConfig(first_delta_latency_ms=0, clip_sequence=("agent_hours",)))
    h.send(ev.response_create())
    h.run_all()
    record = h.session.record.responses[0]
    item_ms = len(record.audio) // BYTES_PER_MS
    out = h.send(ev.item_truncate(record.item_id, item_ms + 1, event_id="t1"))
    assert out[0]["error"]["message"] == f"Audio content of {item_ms}ms is already shorter than {item_ms + 1}ms"
    assert out[0]["error"]["event_id"] == "t1"
    out = h.send(ev.item_truncate(record.item_id, 1500))
    assert out == [{"type": "conversation.item.truncated", "event_id": out[0]["event_id"],
                    "item_id": record.item_id, "content_index": 0, "audio_end_ms": 1500}]
    # after the cut the item is 1500 ms long
    out = h.send(ev.item_truncate(record.item_id, 1501))
    assert "Audio content of 1500ms is already shorter than 1501ms" == out[0]["error"]["message"]
    assert types(h.send(ev.item_truncate(record.item_id, 1500))) == ["conversation.item.truncated"]
    truncates = h.session.record.truncates
    assert [(t.audio_end_ms, t.ok) for t in truncates] == [(item_ms + 1, False), (1500, True), (1501, False),
                                                           (1500, True)]
    assert truncates[0].item_audio_ms == item_ms and truncates[2].item_audio_ms == 1500


def test_truncate_errors() -> None:
    h = Harness()
    h.send(ev.conversation_item_create_user_text("hi"))
    user_id = next(e["item"]["id"] for _, e in h.log if e["type"] == "conversation.item.added")
    cases = [
        (ev.item_truncate("item_missing", 10), "item_id"),
        (ev.item_truncate(user_id, 10), "item_id"),
        (json.dumps({"type": "conversation.item.truncate", "audio_end_ms": 5}), "item_id"),
        (json.dumps({"type": "conversation.item.truncate", "item_id": user_id, "audio_end_ms": -1}), "audio_end_ms"),
        (json.dumps({"type": "conversation.item.truncate", "item_id": user_id, "audio_end_ms": "5"}), "audio_end_ms"),
    ]
    for text, param in cases:
        out = h.send(text)
        assert types(out) == ["error"] and out[0]["error"]["param"] == param, (text, out)
    assert "Only assistant" in h.send(ev.item_truncate(user_id, 0))[0]["error"]["message"]
    h.send(ev.response_create())
    h.run_all()
    item_id = h.session.record.responses[0].item_id
    out = h.send(ev.item_truncate(item_id, 10, content_index=1))
    assert out[0]["error"]["param"] == "content_index"
    # every truncate with an integer audio_end_ms is recorded, accepted or not
    assert len(h.session.record.truncates) == 5 and not any(t.ok for t in h.session.record.truncates)


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_item_create_retrieve_delete(naming: str) -> None:
    h = Harness(naming=naming)
    out = h.send(ev.conversation_item_create_user_text("What does Basic cost?"))
    expected = ["conversation.item.added", "conversation.item.done"] if naming == "ga" else [
        "conversation.item.created"]
    assert types(out) == expected
    item_id = out[0]["item"]["id"]
    assert out[0]["item"]["content"] == [{"type": "input_text", "text": "What does Basic cost?"}]
    out = h.send(json.dumps({"type": "conversation.item.retrieve", "item_id": item_id}))
    assert out[0]["type"] == "conversation.item.retrieved" and out[0]["item"]["id"] == item_id
    fco = {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "call_1",
                                                         "output": "{\"ok\":true}"}}
    out = h.send(json.dumps(fco))
    assert out[0]["item"]["call_id"] == "call_1" and out[0]["previous_item_id"] == item_id
    out = h.send(ev.item_delete(item_id))
    assert out[0] == {"type": "conversation.item.deleted", "event_id": out[0]["event_id"], "item_id": item_id}
    out = h.send(ev.item_delete(item_id, event_id="d2"))
    assert out[0]["error"]["param"] == "item_id" and out[0]["error"]["event_id"] == "d2"
    assert h.session.record.deleted_item_ids == [item_id]
    for bad in ({"type": "message", "role": "robot", "content": []}, {"type": "message", "role": "user"},
                {"type": "function_call_output"}, {"type": "file"}, "x"):
        out = h.send(json.dumps({"type": "conversation.item.create", "item": bad}))
        assert types(out) == ["error"], bad
    dup = h.send(json.dumps({"type": "conversation.item.create", "item": {
        "id": out[0]["event_id"], "type": "message", "role": "user", "content": []}}))
    assert types(dup) == expected
    again = h.send(json.dumps({"type": "conversation.item.create", "item": {
        "id": out[0]["event_id"], "type": "message", "role": "user", "content": []}}))
    assert types(again) == ["error"]


def test_deleting_the_item_of_an_active_response_is_tolerated() -> None:
    h = Harness()
    h.send(ev.response_create())
    h.run_until(300)
    h.send(ev.item_delete(h.session.record.responses[0].item_id))
    out = h.run_all()
    assert out[-1]["response"]["status"] == "completed"


# ---- input buffer, commit, VAD -----------------------------------------------------------------------


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_manual_commit_and_clear(naming: str) -> None:
    h = Harness(naming=naming)
    out = h.send(ev.input_audio_commit(event_id="k0"))
    assert out[0]["error"]["code"] == "input_audio_buffer_commit_empty" and out[0]["error"]["event_id"] == "k0"
    assert h.send(ev.input_audio_append(SILENCE * 400)) == []  # append is never acknowledged (C.2)
    assert h.send(ev.input_audio_commit())[0]["error"]["code"] == "input_audio_buffer_commit_empty"  # 50 ms
    h.send(ev.input_audio_append(audio_clips.load_clip("caller_premium")))
    out = h.send(ev.input_audio_commit())
    items = ["conversation.item.added", "conversation.item.done"] if naming == "ga" else ["conversation.item.created"]
    assert types(out) == ["input_audio_buffer.committed"] + items
    item_id = out[0]["item_id"]
    assert out[1]["item"]["role"] == "user" and out[1]["item"]["content"] == [{"type": "input_audio",
                                                                               "transcript": None}]
    # no VAD: no automatic response; the transcription arrives later (asynchronous, C.3)
    later = h.run_all()
    assert types(later) == ["conversation.item.input_audio_transcription.completed"]
    assert later[0]["item_id"] == item_id and later[0]["transcript"] == CLIPS["caller_premium"].text
    h.send(ev.input_audio_append(SILENCE * 8000))
    assert types(h.send(ev.input_audio_clear())) == ["input_audio_buffer.cleared"]
    assert h.send(ev.input_audio_commit())[0]["error"]["code"] == "input_audio_buffer_commit_empty"
    assert h.session.record.appended_bytes == 400 + len(audio_clips.load_clip("caller_premium")) + 8000


def caller_turn(name: str, lead_ms: int = 500, tail_ms: int = 1000) -> bytes:
    return SILENCE * (lead_ms * BYTES_PER_MS) + audio_clips.load_clip(name) + SILENCE * (tail_ms * BYTES_PER_MS)


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_vad_turn_then_auto_response(naming: str) -> None:
    h = Harness(naming=naming, turn_detection=VAD)
    out = h.append(caller_turn("caller_basic_price"))
    out += h.run_until(h.now + 200)
    items = ["conversation.item.added", "conversation.item.done"] if naming == "ga" else ["conversation.item.created"]
    head = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed"] + items + ["response.created"]
    assert types(out)[: len(head)] == head
    started, stopped, committed = out[0], out[1], out[2]
    assert started["item_id"] == stopped["item_id"] == committed["item_id"]
    # prefix padding (300 ms) is included in audio_start_ms; the clip starts at 500 ms
    assert 150 <= started["audio_start_ms"] <= 300
    clip_end_ms = 500 + CLIPS["caller_basic_price"].duration_ms
    assert clip_end_ms <= stopped["audio_end_ms"] <= clip_end_ms + 500 + 40
    transcription = first(out, "conversation.item.input_audio_transcription.completed")
    assert transcription["transcript"] == CLIPS["caller_basic_price"].text
    speech = h.session.record.speech[0]
    assert speech.caller_clip == "caller_basic_price" and speech.item_id == started["item_id"]
    assert speech.started_at_ms < speech.stopped_at_ms
    assert h.session.record.speech_started_ms == [speech.started_at_ms]
    h.run_all()
    assert h.session.record.responses[0].status == "completed"


def test_vad_barge_in_cancels_with_turn_detected() -> None:
    config = SimConfig(first_delta_latency_ms=100, late_deltas_after_cancel=2, speed_factor=1.0,
                       clip_sequence=("agent_premium_price",))
    h = Harness(config, turn_detection=VAD)
    h.send(ev.response_create())
    h.run_until(1000)
    rid = h.session.active_response_id
    out = h.append(caller_turn("caller_interrupt", lead_ms=200, tail_ms=0))
    i = types(out).index("input_audio_buffer.speech_started")
    assert types(out)[i + 1 : i + 3] == ["response.output_audio.delta"] * 2
    done = first(out, "response.done")["response"]
    assert done["id"] == rid and done["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    record = h.session.record
    assert record.speech[0].interrupted_response_id == rid
    assert record.responses[0].reason == "turn_detected" and record.responses[0].late_bytes > 0
    assert record.responses[0].cancel_ms == record.speech[0].started_at_ms
    assert record.cancels == []  # not a client cancel


def test_vad_without_create_or_interrupt() -> None:
    td = dict(VAD, create_response=False, interrupt_response=False)
    h = Harness(SimConfig(speed_factor=1.0), turn_detection=td)
    h.send(ev.response_create())
    h.run_until(300)
    out = h.append(caller_turn("caller_hello"))
    assert "input_audio_buffer.speech_stopped" in types(out)
    assert first(out, "response.done")["response"]["status"] == "completed"  # not interrupted
    assert types(out).count("response.created") == 0
    assert len(h.session.record.responses) == 1


def test_no_vad_no_turn_events() -> None:
    h = Harness(turn_detection=None)
    assert h.append(caller_turn("caller_hello")) == []


def test_semantic_vad_and_vad_switched_on_later() -> None:
    h = Harness(turn_detection=None)
    h.append(SILENCE * 8000)
    h.send(ev.session_update("ga", "Help.", None, {"type": "semantic_vad", "eagerness": "high"}))
    out = h.append(caller_turn("caller_bye"))
    assert types(out)[:2] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"]
    assert out[0]["audio_start_ms"] >= 1000


@pytest.mark.parametrize("batch_ms", [20, 60, 100, 340])
@pytest.mark.parametrize("turns", [("caller_hello", "caller_bye"), ("caller_interrupt", "caller_basic_price")])
def test_quiet_frame_skip_changes_nothing(monkeypatch: pytest.MonkeyPatch, batch_ms: int, turns: tuple[str, str]) -> None:
    # Two turns with short and long silences around them, a response playing meanwhile: the events and
    # the record are the same with the bulk skip of quiet frames and with the frame-by-frame loop alone.
    audio = caller_turn(turns[0], lead_ms=700, tail_ms=380) + caller_turn(turns[1], lead_ms=120, tail_ms=2600)

    def run() -> tuple[list, list]:
        h = Harness(SimConfig(speed_factor=1.0, clip_sequence=("agent_premium_price",)), turn_detection=VAD)
        h.send(ev.response_create())
        out = h.append(audio, batch_ms=batch_ms)
        out += h.run_all()
        return [(e["type"], e.get("audio_start_ms"), e.get("audio_end_ms")) for e in out], h.session.record.speech

    with_skip = run()
    monkeypatch.setattr(ModelSession, "_skip_quiet_frames", lambda self, prefix_ms, silence_ms: None)
    assert run() == with_skip
    assert [t for t, _, _ in with_skip[0]].count("input_audio_buffer.speech_started") == 2


def test_peak_bounds_rms() -> None:
    clip = audio_clips.load_clip("caller_hello")
    assert peak_ulaw(b"") == 0 and peak_ulaw(SILENCE * 160) <= 8
    for i in range(0, len(clip) - FRAME_BYTES, FRAME_BYTES):
        assert rms_ulaw(clip[i : i + FRAME_BYTES]) <= peak_ulaw(clip[i : i + FRAME_BYTES]) <= peak_ulaw(clip)


def test_recognition_by_length_and_fallback() -> None:
    h = Harness(turn_detection=VAD)
    clip = audio_clips.load_clip("caller_cancel")
    # a gain change defeats the byte match; the speech length still identifies the clip
    quieter = audioop.lin2ulaw(audioop.mul(audioop.ulaw2lin(clip, 2), 2, 0.7), 2)
    h.append(SILENCE * 4000 + quieter + SILENCE * 8000)
    h.run_until(h.now + 300)
    assert h.session.record.speech[0].transcript == CLIPS["caller_cancel"].text
    assert h.session.record.speech[0].caller_clip == "caller_cancel"
    h.run_all()
    # 5 s of loud noise is no caller clip
    noise = bytes(0x80 | SplitMix64(9).below(0x30) for _ in range(40000))
    h.append(SILENCE * 4000 + noise + SILENCE * 8000)
    assert h.session.record.speech[1].transcript == "hello" and h.session.record.speech[1].caller_clip is None


# ---- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,code,echo",
    [
        ('{"type":"bogus.event","event_id":"b1"}', "invalid_value", "b1"),
        ("{not json", "invalid_json", None),
        ("[1,2]", "invalid_json", None),
        (b"\xff\xfe", "invalid_json", None),
        ('{"event_id":"n1"}', "missing_required_parameter", "n1"),
        ('{"type":"input_audio_buffer.append","audio":"@@@","event_id":"a1"}', "invalid_value", "a1"),
        ('{"type":"input_audio_buffer.append"}', "missing_required_parameter", None),
        ('{"type":"output_audio_buffer.clear","event_id":"o1"}', "invalid_value", "o1"),
        ('{"type":"session.update"}', "missing_required_parameter", None),
        ('{"type":"response.create","response":"x"}', "invalid_value", None),
        ('{"type":"response.create","response":{"metadata":{"a":1}}}', "invalid_value", None),
        ('{"type":"response.cancel","response_id":5}', "invalid_value", None),
        ('{"type":"conversation.item.delete"}', "missing_required_parameter", None),
        ('{"type":"conversation.item.retrieve","item_id":"item_x"}', "invalid_value", None),
        ('{"type":"conversation.item.create"}', "missing_required_parameter", None),
    ],
)
@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_bad_client_events_become_errors(naming: str, text: str | bytes, code: str, echo: str | None) -> None:
    h = Harness(naming=naming)
    out = h.send(text)  # type: ignore[arg-type]
    assert types(out) == ["error"]
    assert out[0]["error"]["type"] == "invalid_request_error"
    assert (out[0]["error"]["code"], out[0]["error"]["event_id"]) == (code, echo)
    # the session survives: it still answers
    assert types(h.send(ev.input_audio_clear())) == ["input_audio_buffer.cleared"]


# ---- failure switches and transcript hooks (D.2 item 8) ----------------------------------------------


def test_failures() -> None:
    h = Harness(SimConfig(fail_next_response=True, fail_responses=(2,)))
    results = []
    for _ in range(4):
        head = h.send(ev.response_create())
        assert types(head) == ["response.created"] or types(head) == GA_ORDER_HEAD
        results.append(h.run_all()[-1]["response"])
    assert [r["status"] for r in results] == ["failed", "completed", "failed", "completed"]
    assert results[0]["status_details"]["type"] == "failed"
    assert results[0]["status_details"]["error"]["type"] == "server_error"
    assert results[0]["output"] == []
    h.session.fail_next_response()
    h.send(ev.response_create())
    assert h.run_all()[-1]["response"]["status"] == "failed"
    assert [r.failed for r in h.session.record.responses] == [True, False, True, False, True]
    always = Harness(SimConfig(error_rate=1.0))
    always.send(ev.response_create())
    assert always.run_all()[-1]["response"]["status"] == "failed"
    # a failing response can still be cancelled before it fails
    pending = Harness(SimConfig(error_rate=1.0))
    pending.send(ev.response_create())
    assert types(pending.send(ev.response_cancel())) == ["response.done"]


def test_hallucination_changes_transcript_not_audio() -> None:
    h = Harness(SimConfig(hallucinate_responses=(1,), clip_sequence=("agent_basic_price",)))
    for _ in range(2):
        h.send(ev.response_create())
        h.run_all()
    ok, bad = h.session.record.responses
    assert ok.text == CLIPS["agent_basic_price"].text and not ok.hallucinated
    assert bad.text == "Basic costs 777 kr per month." and bad.hallucinated
    assert len(bad.audio) == len(ok.audio)
    dones = [e for _, e in h.log if e["type"] == "response.output_audio_transcript.done"]
    assert dones[1]["transcript"] == bad.text
    every = Harness(SimConfig(hallucinate=True))
    every.send(ev.response_create())
    every.run_all()
    assert every.session.record.responses[0].hallucinated


def test_stall_pauses_output() -> None:
    h = Harness(SimConfig(first_delta_latency_ms=100, stall_after_ms=300, stall_ms=2000, speed_factor=1.0,
                          clip_sequence=("agent_hours",)))
    h.send(ev.response_create())
    h.run_all()
    times = [t for t, e in h.log if e["type"] == "response.output_audio.delta"]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) >= 2000 and sorted(gaps)[-2] < 1000
    assert h.session.record.responses[0].stalled


def test_transcript_hooks() -> None:
    config = SimConfig(transcript_done_differs=True, transcript_after_audio_done=True, obfuscation=True,
                       rate_limits_empty=True, clip_sequence=("agent_cancel",))
    h = Harness(config)
    h.send(ev.response_create())
    out = h.run_all()
    deltas = "".join(e["delta"] for e in out if e["type"] == "response.output_audio_transcript.delta")
    done = first(out, "response.output_audio_transcript.done")["transcript"]
    assert deltas == CLIPS["agent_cancel"].text and done != deltas
    after = types(out)[types(out).index("response.output_audio.done"):]
    assert "response.output_audio_transcript.delta" in after
    assert all("obfuscation" in e for e in out if e["type"].endswith(".delta"))
    assert first(out, "rate_limits.updated")["rate_limits"] == []
    parsed = [ev.parse_server_event(json.dumps(e)) for e in out]
    assert any(isinstance(p, ev.TranscriptDelta) for p in parsed)


def test_omit_transcript_done_on_cancel() -> None:
    h = Harness(SimConfig(omit_transcript_done_on_cancel=True))
    h.send(ev.response_create())
    h.run_until(300)
    out = h.send(ev.response_cancel())
    assert "response.output_audio_transcript.done" not in types(out)
    assert types(out)[-1] == "response.done"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5000) | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "x", "audio/pcmu", "g711_ulaw", "server_vad", "semantic_vad", "realtime", "inf"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "rate", "model", "eagerness", "threshold", "prefix_padding_ms", "silence_duration_ms",
         "create_response", "interrupt_response", "idle_timeout_ms", "x"]), children, max_size=4),
    max_leaves=8,
)
session_keys = st.sampled_from(sorted(
    {"type", "instructions", "output_modalities", "audio", "tools", "tool_choice", "max_output_tokens", "voice",
     "speed", "input_audio_format", "output_audio_format", "turn_detection", "input_audio_transcription",
     "max_response_output_tokens", "input_audio_noise_reduction", "modalities", "temperature"}))
audio_objects = st.fixed_dictionaries({}, optional={
    "input": st.dictionaries(st.sampled_from(["format", "transcription", "noise_reduction", "turn_detection"]),
                             json_values, max_size=4),
    "output": st.dictionaries(st.sampled_from(["format", "voice", "speed"]), json_values, max_size=3),
})
sessions = st.dictionaries(session_keys, json_values | audio_objects, max_size=5).map(
    lambda d: d if "type" in d else {**d, "type": "realtime"})
client_events = st.one_of(
    st.builds(lambda session: {"type": "session.update", "session": session}, sessions),
    st.builds(lambda fields, t: {**fields, "type": t}, st.dictionaries(st.sampled_from(
        ["item_id", "audio_end_ms", "content_index", "response_id", "response", "item", "audio", "event_id"]),
        json_values, max_size=4), st.sampled_from([
            "conversation.item.truncate", "conversation.item.delete", "conversation.item.retrieve",
            "conversation.item.create", "response.create", "response.cancel", "input_audio_buffer.append",
            "input_audio_buffer.commit", "input_audio_buffer.clear", "output_audio_buffer.clear", "other"])),
    st.just({"type": "response.create"}),
    st.just({"type": "response.cancel"}),
    st.just({"type": "input_audio_buffer.append",
             "audio": base64.b64encode(audio_clips.load_clip("caller_premium")).decode()}),
)


@given(st.sampled_from(["ga", "beta"]), st.lists(st.tuples(client_events, st.integers(0, 800)), max_size=8))
def test_fuzz_client_events_never_raise_and_replies_validate(
    naming: str, steps: list[tuple[dict[str, Any], int]]
) -> None:
    h = Harness(naming=naming, turn_detection=VAD)
    for event, wait_ms in steps:
        h.send(json.dumps(event))  # Harness validates every reply against the SDK types
        h.run_until(h.now + wait_ms)
    h.run_all()
    if h.session.record.responses:
        assert h.session.record.responses[-1].status != "in_progress"


def test_config_validation() -> None:
    for bad in ({"naming": "v2"}, {"speed_factor": 0}, {"delta_min_bytes": 0}, {"delta_min_bytes": 500,
                "delta_max_bytes": 400}, {"late_deltas_after_cancel": 4}, {"error_rate": 2.0}):
        with pytest.raises(ValueError):
            SimConfig(**bad)
    with pytest.raises(ValueError):
        ModelSession(SimConfig(), 0, 0, naming="v3")


def test_every_emitted_event_parses_to_its_canonical_event() -> None:
    h = Harness(SimConfig(late_deltas_after_cancel=1, obfuscation=True), turn_detection=VAD)
    h.send(ev.response_create())
    h.run_until(400)
    h.send(ev.response_cancel())
    h.append(caller_turn("caller_hello"))
    h.run_all()
    item_id = h.session.record.responses[0].item_id
    h.send(ev.item_truncate(item_id, 100))
    h.send(ev.item_delete(item_id))
    h.send('{"type":"nope"}')
    seen: dict[type, int] = {}
    for _, event in h.log:
        parsed = ev.parse_server_event(json.dumps(event))
        seen[type(parsed)] = seen.get(type(parsed), 0) + 1
    expected = {ev.SessionCreated, ev.SessionUpdated, ev.SpeechStarted, ev.SpeechStopped, ev.InputCommitted,
                ev.ItemAdded, ev.ResponseCreated, ev.OutputItemAdded, ev.AudioDelta, ev.AudioDone,
                ev.TranscriptDelta, ev.TranscriptDone, ev.ResponseDone, ev.ItemTruncated, ev.ItemDeleted,
                ev.InputTranscriptionCompleted, ev.RealtimeError, ev.Unhandled}
    assert set(seen) == expected


def test_core_is_pure() -> None:
    from pathlib import Path

    import voicecore.sim.model as package

    modules = sorted(Path(package.__file__).parent.glob("*.py"))
    assert len(modules) >= 8
    for module in modules:
        source = module.read_text(encoding="utf-8")
        for name in ("asyncio", "websockets", "time", "os", "random", "uuid", "zmq"):
            assert f"\nimport {name}\n" not in source and f"\nfrom {name} " not in source, (module.name, name)


def test_clip_assets() -> None:
    index = audio_clips.clip_index()
    agents = [c for c in index if c.role == "agent"]
    callers = [c for c in index if c.role == "caller"]
    assert len(agents) >= 8 and len(callers) >= 5
    assert CLIPS["agent_greeting"].text == "Hello, thanks for calling Acme. How can I help you today?"
    total = 0
    for clip in index:
        audio = audio_clips.load_clip(clip.name)
        total += len(audio)
        assert len(audio) // BYTES_PER_MS == clip.duration_ms
        assert audioop.rms(audioop.ulaw2lin(audio, 2), 2) > 1000  # speech, not silence
    assert total < 1_500_000
    with pytest.raises(KeyError):
        audio_clips.load_clip("../index")
    library = audio_clips.default_library()
    assert library.info("agent_goodbye").kind == "goodbye" and len(library.by_role("caller")) == len(callers)
    with pytest.raises(KeyError):
        library.info("nope")


# ---- the real server ---------------------------------------------------------------------------------


def test_real_server_beta_and_ga_connections() -> None:
    from websockets.asyncio.client import connect

    from voicecore.sim.model_server import serve_model_sim

    async def call(port: int, headers: list[tuple[str, str]], naming: str) -> list[dict[str, Any]]:
        url = f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-4o-realtime-preview"
        seen: list[dict[str, Any]] = []
        async with connect(url, additional_headers=headers, compression=None) as ws:
            await ws.send(ev.session_update(naming, "Help.", "alloy", None))
            await ws.send(ev.response_create())
            while True:
                text = await asyncio.wait_for(ws.recv(), 10)
                validate_server(naming, text)
                seen.append(json.loads(text))
                if seen[-1]["type"] == "response.done":
                    return seen

    async def refused_beta(port: int) -> tuple[list[dict[str, Any]], int | None, str]:
        from websockets.exceptions import ConnectionClosed

        url = f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime"
        seen: list[dict[str, Any]] = []
        async with connect(url, additional_headers=[("Authorization", "Bearer x"), ("OpenAI-Beta", "realtime=v1")],
                           compression=None) as ws:
            try:
                while True:
                    text = await asyncio.wait_for(ws.recv(), 10)
                    validate_server("ga", text)
                    seen.append(json.loads(text))
            except ConnectionClosed as closed:
                assert closed.rcvd is not None
                return seen, closed.rcvd.code, closed.rcvd.reason
        raise AssertionError("the server did not close")

    async def main() -> None:
        fast = {"speed_factor": 50.0, "first_delta_latency_ms": 0, "clip_sequence": ("agent_checkin",)}
        # The vendor retired the beta shape: a client that asks for it gets the error and close 4000. A
        # simulator configured with naming "beta" still speaks it (records made before the retirement).
        sim, port = await serve_model_sim(config=SimConfig(**fast))
        legacy, legacy_port = await serve_model_sim(config=SimConfig(naming="beta", **fast))
        try:
            refused, code, reason = await refused_beta(port)
            beta = await call(legacy_port, [("Authorization", "Bearer x"), ("OpenAI-Beta", "realtime=v1"),
                                            ("X-Voicecore-Call", "CA42")], "beta")
            ga = await call(port, [("Authorization", "Bearer x")], "ga")
            await asyncio.sleep(0.05)  # let the server notice the closes
        finally:
            await sim.aclose()
            await legacy.aclose()
        assert [e["type"] for e in refused] == ["error"] and refused[0]["error"]["code"] == "beta_api_shape_disabled"
        assert (code, reason) == (4000, "beta_api_shape_disabled")
        assert sim.refusals == {"beta_api_shape_disabled": 1}
        assert beta[0]["type"] == ga[0]["type"] == "session.created"
        assert "response.audio.delta" in types(beta) and "response.output_audio.delta" in types(ga)
        sessions = list(legacy.registry.values()) + list(sim.registry.values())
        assert [s.naming for s in sessions] == ["beta", "ga"]
        assert [s.record.call_sid for s in sessions] == ["CA42", None]
        assert legacy.by_call("CA42") == [sessions[0]]
        assert sessions[0].record.model == "gpt-4o-realtime-preview"
        assert all(s.record.closed_ms is not None for s in sessions)
        for s, events in zip(sessions, (beta, ga)):
            record = s.record.responses[0]
            assert record.status == "completed" and audio_of(events) == record.audio
            assert record.created_ms <= record.first_delta_ms <= record.done_ms  # type: ignore[operator]
        # a long-running server keeps only the newest closed sessions
        legacy.keep_closed = 0
        legacy._prune()
        assert list(legacy.registry.values()) == []

    asyncio.run(main())


@pytest.mark.integration
def test_cli_serves_until_sigterm() -> None:
    import signal
    import subprocess
    import sys

    from websockets.sync.client import connect

    proc = subprocess.Popen(
        [sys.executable, "-m", "voicecore.sim.model_server", "--port", "0", "--naming", "beta"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        match = None
        for _ in range(20):  # websockets logs its own line first
            line = proc.stderr.readline()
            match = re.search(r"model simulator listening on 127\.0\.0\.1:(\d+) naming=beta", line)
            if match or not line:
                break
        assert match, line
        with connect(f"ws://127.0.0.1:{match.group(1)}/v1/realtime?model=gpt-realtime") as ws:
            text = ws.recv(timeout=10)
            validate_server("beta", text)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- overlapping responses (a real server sometimes starts a second response early: INV-ONE-VOICE) ---

OVERLAP = dict(first_delta_latency_ms=100, overlap_probability=1.0, overlap_delay_ms=(300, 300),
               clip_sequence=("agent_basic_price", "agent_hours"))


def overlapped(naming: str | None = None, **changes: Any) -> tuple[Harness, str, str]:
    """A harness whose first response got an overlap 300 ms in; the clock stands just after it started."""
    turn_detection = changes.pop("turn_detection", None)
    h = Harness(SimConfig(**{**OVERLAP, **changes}), naming=naming, turn_detection=turn_detection)
    h.send(ev.response_create())
    h.run_until(300)
    first_id, second_id = (r.response_id for r in h.session.record.responses)
    return h, first_id, second_id


def audio_ids(events: list[dict[str, Any]]) -> list[str]:
    return [e["response_id"] for e in events if e["type"].endswith("audio.delta")]


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_overlap_starts_a_second_response_that_streams_alongside(naming: str) -> None:
    h = Harness(SimConfig(**OVERLAP), naming=naming)
    h.send(ev.response_create())
    h.run_all()  # every event validated against the SDK types by the harness
    first, second = h.session.record.responses
    assert (first.overlaps, second.overlaps) == (None, first.response_id)
    assert second.created_ms == first.created_ms + 300 and second.index == 1
    assert (first.clip_name, second.clip_name) == ("agent_basic_price", "agent_hours")  # the clip_sequence's next
    assert second.response_id != first.response_id and second.item_id != first.item_id
    events = [e for _, e in h.log]
    kinds = types(events)
    created = [i for i, t in enumerate(kinds) if t == "response.created"]
    dones = [i for i, t in enumerate(kinds) if t == "response.done"]
    assert len(created) == 2 and len(dones) == 2
    assert created[1] < dones[0]  # the second began before the first was done
    # both stream at once: the audio deltas alternate between the two responses several times
    ids = audio_ids(events)
    assert sum(1 for a, b in zip(ids, ids[1:]) if a != b) >= 4
    # each gets its whole audio and its own done cascade, completed
    for record in (first, second):
        mine = [e for e in events if e.get("response_id") == record.response_id and e["type"].endswith("audio.delta")]
        assert b"".join(base64.b64decode(e["delta"]) for e in mine) == record.audio
        assert record.status == "completed" and record.late_deltas == 0
    assert {events[i]["response"]["id"] for i in dones} == {first.response_id, second.response_id}
    assert h.session.next_wakeup_ms() is None and h.session.active_response_id is None


def test_overlap_is_refused_to_the_client_and_never_overlaps_itself() -> None:
    h, first_id, second_id = overlapped()
    assert h.session.active_response_id == second_id  # the newest
    out = h.send(ev.response_create(event_id="dup"))
    assert types(out) == ["error"] and out[0]["error"]["code"] == "conversation_already_has_active_response"
    assert second_id in out[0]["error"]["message"]
    h.run_all()
    assert len(h.session.record.responses) == 2  # the overlap did not get an overlap of its own
    h.send(ev.response_create())
    h.run_until(h.now + 300)
    assert [r.overlaps for r in h.session.record.responses] == [None, first_id, None, h.session.record.responses[2].response_id]


def test_no_overlap_after_the_first_finished() -> None:
    h = Harness(SimConfig(first_delta_latency_ms=100, overlap_probability=1.0, overlap_delay_ms=(20_000, 20_000),
                          clip_sequence=("agent_checkin",)))
    h.send(ev.response_create())
    h.run_all()
    assert len(h.session.record.responses) == 1 and h.session.next_wakeup_ms() is None
    # cancelled before its overlap was due: none either
    h2 = Harness(SimConfig(**OVERLAP))
    h2.send(ev.response_create())
    h2.run_until(200)
    h2.send(ev.response_cancel())
    assert h2.run_all() == [] and len(h2.session.record.responses) == 1


def test_no_overlap_of_a_failed_response() -> None:
    h = Harness(SimConfig(**OVERLAP, fail_responses=(0,)))
    h.send(ev.response_create())
    h.run_all()
    assert [r.failed for r in h.session.record.responses] == [True]


@pytest.mark.parametrize("late", [0, 2])
def test_cancel_by_id_cancels_only_that_response(late: int) -> None:
    h, first_id, second_id = overlapped(late_deltas_after_cancel=late)
    h.run_until(600)
    out = h.send(ev.response_cancel(first_id))
    assert types(out).count("response.done") == 1 and out[-1]["response"]["id"] == first_id
    assert out[-1]["response"]["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    assert audio_ids(out) == [first_id] * late
    first, second = h.session.record.responses
    assert first.late_deltas == late and (first.late_bytes > 0) == (late > 0)
    assert h.session.active_response_id == second_id
    rest = h.run_all()
    assert set(audio_ids(rest)) == {second_id} and second.status == "completed"
    assert [(c.requested_response_id, c.cancelled_response_id) for c in h.session.record.cancels] == [(first_id, first_id)]
    out = h.send(ev.response_cancel(first_id))  # no longer active
    assert out[0]["error"]["code"] == "response_cancel_not_active"


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_cancel_without_id_cancels_every_active_response(naming: str) -> None:
    h, first_id, second_id = overlapped(naming, late_deltas_after_cancel=2)
    h.run_until(600)
    out = h.send(ev.response_cancel())
    tail = (GA_ORDER_TAIL if naming == "ga" else BETA_ORDER_TAIL)[1:]
    delta = "response.output_audio.delta" if naming == "ga" else "response.audio.delta"
    # oldest first: its late deltas, its done cascade, then the other's
    assert types(out) == [delta, delta] + tail + [delta, delta] + tail
    assert audio_ids(out) == [first_id, first_id, second_id, second_id]
    assert [e["response"]["id"] for e in out if e["type"] == "response.done"] == [first_id, second_id]
    assert [r.late_deltas for r in h.session.record.responses] == [2, 2]
    assert [r.status for r in h.session.record.responses] == ["cancelled", "cancelled"]
    assert [(c.requested_response_id, c.cancelled_response_id) for c in h.session.record.cancels] == [
        (None, first_id), (None, second_id)]
    assert h.run_all() == [] and h.session.active_response_id is None


def test_speech_started_cancels_every_active_response() -> None:
    h, first_id, second_id = overlapped(late_deltas_after_cancel=2, speed_factor=1.0, turn_detection=VAD)
    out = h.append(caller_turn("caller_interrupt", lead_ms=200, tail_ms=0))
    i = types(out).index("input_audio_buffer.speech_started")
    assert audio_ids(out[i:])[:4] == [first_id, first_id, second_id, second_id]
    done = [e["response"] for e in out if e["type"] == "response.done"]
    assert [d["id"] for d in done] == [first_id, second_id]
    assert all(d["status_details"] == {"type": "cancelled", "reason": "turn_detected"} for d in done)
    speech = h.session.record.speech[0]
    assert speech.interrupted_response_id == second_id  # the newest
    assert all(r.cancel_ms == speech.started_at_ms and r.late_deltas == 2 for r in h.session.record.responses)
    assert h.session.record.cancels == []  # not client cancels


def test_overlaps_are_deterministic_per_seed_session_and_response() -> None:
    def run(seed: int, index: int = 0) -> tuple[list[str], list[bool]]:
        h = Harness(SimConfig(first_delta_latency_ms=100, overlap_probability=0.5, clip_sequence=("agent_basic_price",)),
                    seed=seed, index=index)
        for _ in range(12):
            h.send(ev.response_create())
            h.run_all()
        overlaps = [r.overlaps is not None for r in h.session.record.responses]
        return [json.dumps(e) for _, e in h.log], overlaps

    a, b = run(7), run(7)
    assert a == b
    assert 0 < sum(a[1]) < 12  # some overlapped, some did not (delays up to 2 s against 1.5 s of generation)
    assert run(8)[0] != a[0] and run(7, index=1)[0] != a[0]


@given(st.sampled_from(["ga", "beta"]), st.lists(st.tuples(client_events, st.integers(0, 800)), max_size=8))
def test_fuzz_with_overlaps_never_raises_and_everything_finishes(
    naming: str, steps: list[tuple[dict[str, Any], int]]
) -> None:
    h = Harness(SimConfig(overlap_probability=1.0, overlap_delay_ms=(0, 400), late_deltas_after_cancel=3),
                naming=naming, turn_detection=VAD)
    for event, wait_ms in steps:
        h.send(json.dumps(event))
        h.run_until(h.now + wait_ms)
        assert len(h.session._active) <= 2
    h.run_all()
    assert all(r.status != "in_progress" for r in h.session.record.responses)
    assert h.session.active_response_id is None


def test_overlap_config_validation_and_server_flag() -> None:
    from voicecore.sim.model_server import probability

    for bad in ({"overlap_probability": -0.1}, {"overlap_probability": 1.5}, {"overlap_delay_ms": (300, 200)},
                {"overlap_delay_ms": (-1, 5)}):
        with pytest.raises(ValueError):
            SimConfig(**bad)
    assert probability("0.25") == 0.25 and probability("1") == 1.0
    for text in ("2", "-0.5", "x"):
        with pytest.raises(Exception):
            probability(text)


def test_a_scripted_line_after_the_sessions_instructions_is_read_from_its_own_paragraph():
    # the runtime keeps the session's instructions in force: the line comes after them
    from voicecore.sim.model.clips import clip_speaking, scripted_text
    from voicecore.sim.audio_clips import default_library

    agent_clips = [c for c in default_library().infos if c.role == "agent"]
    persona = "You are Acme's assistant. Never say: Are you still there?"
    instructions = f'{persona}\n\nSay exactly: "Thank you for calling Acme. Have a nice day, goodbye!"'
    assert scripted_text(instructions) == "Thank you for calling Acme. Have a nice day, goodbye!"
    assert scripted_text('Say exactly: "Are you still there?"') == "Are you still there?"
    assert scripted_text(persona) is None
    clip = clip_speaking(scripted_text(instructions) or instructions, agent_clips)
    assert clip is not None and clip.name == "agent_goodbye"  # not the check-in line the persona quotes


def test_response_instructions_replace_the_sessions_for_that_response_as_the_vendor_applies_them() -> None:
    persona = "You are Ada, Acme's receptionist. Always answer in Swedish."
    h = Harness(instructions=persona)
    h.send(ev.response_create())
    h.run_all()
    h.send(ev.response_create(instructions='Say exactly: "Hello, thanks for calling Acme. How can I help you today?"'))
    h.run_all()
    h.send(ev.response_create(instructions=persona + '\nSay exactly: "Goodbye."'))
    h.run_all()
    plain, scripted, kept = h.session.record.responses
    assert (plain.instructions, plain.response_instructions) == (persona, None)
    assert scripted.instructions.startswith("Say exactly:") and scripted.session_instructions == persona
    assert persona not in scripted.instructions  # the vendor's rule: the session's are not in force for it
    assert kept.instructions.startswith(persona)
    assert h.session.record.responses_without("You are Ada") == [scripted]
    out = h.send(ev.session_update(h.naming, instructions="Other.", voice=None, turn_detection=None))
    assert types(out) == ["session.updated"]
    h.send(ev.response_create())
    h.run_all()
    assert h.session.record.responses[-1].instructions == "Other."


def test_response_instructions_that_are_not_text_are_refused() -> None:
    h = Harness()
    out = h.send(json.dumps({"type": "response.create", "event_id": "e1", "response": {"instructions": 5}}))
    assert types(out) == ["error"]
    assert (out[0]["error"]["param"], out[0]["error"]["event_id"]) == ("response.instructions", "e1")
    assert h.session.record.responses == []


def test_the_speech_endpoints_wav_is_what_the_wave_module_reads():
    import io
    import wave

    from voicecore.sim.model.speech import wav_bytes

    pcm = bytes(range(256)) * 10
    with wave.open(io.BytesIO(wav_bytes(pcm, 24000))) as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (1, 2, 24000)
        assert reader.readframes(reader.getnframes()) == pcm
