"""Call records built the way the model worker builds them: a CallRecorder around a CallController fed
scripted model events on a fake clock (``scripted_call``), and one real record from `voicecore demo`
(spine control; its caller audio left out, as VOICECORE_RECORD_CALLER_AUDIO=false writes it) in
tests/data/records/. The store's, the observer's, the traces' and the `calls` command's tests read them.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

from voicecore.agent.flow import AgentFlow
from voicecore.agent.spec import AgentSpec, FlowSpec, FunctionSpec, Message, NodeSpec, Webhook
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder
from voicecore.store import summarize_record

MS = 1_000_000
IDLE = C.IDLE_PLAYOUT
DATA = Path(__file__).resolve().parent / "data" / "records"
DEMO_RECORD = DATA / "CA12d7ea0ef4734a81a0186375f3878962.jsonl.gz"
BOOK_PARAMS = {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"],
               "additionalProperties": False}


def ev(**fields) -> str:
    return json.dumps(fields)


def receptionist() -> AgentSpec:
    functions = {"book": FunctionSpec("book", "Book an appointment.", BOOK_PARAMS, tool=Webhook("http://127.0.0.1:9/book"),
                                      confirm=False),
                 "end_call": FunctionSpec("end_call", "End the call.", action="end_call")}
    nodes = {"reception": NodeSpec("reception", role_messages=(Message("system", "You book appointments."),),
                                   functions=("book", "end_call"))}
    return AgentSpec("receptionist", "You are the receptionist of Smile Dental.", FlowSpec("reception", nodes, functions),
                     greeting="Hello, Smile Dental.")


def delta(rid: str, frames: int) -> str:
    return ev(type="response.output_audio.delta", response_id=rid, item_id="item_" + rid,
              delta=base64.b64encode(b"\x11" * 160 * frames).decode())


def said(rid: str, text: str) -> str:
    return ev(type="response.output_audio_transcript.done", response_id=rid, item_id="item_" + rid, transcript=text)


def created(rid: str, req: str) -> str:
    return ev(type="response.created", response={"id": rid, "metadata": {"vc_req": req}})


def done(rid: str) -> str:
    return ev(type="response.done", response={"id": rid, "status": "completed"})


def requests(actions) -> list[dict]:
    return [json.loads(a.text) for a in actions if isinstance(a, C.SendToModel)
            and json.loads(a.text).get("type") == "response.create"]


def tick_until_request(recorder: CallRecorder, from_ms: int, playout=IDLE) -> tuple[int, str]:
    """Tick every 20 ms until the controller asks for a response: (when, its vc_req)."""
    for at_ms in range(from_ms, from_ms + 10_000, 20):
        asked = requests(recorder.on_tick(at_ms * MS, playout))
        if asked:
            return at_ms, asked[0]["response"]["metadata"]["vc_req"]
    raise AssertionError("the controller never asked for a response")


@dataclasses.dataclass
class ScriptedCall:
    header: dict
    entries: list
    request_ms: int  # when the answer after the tool was asked for
    cancel_ms: int  # when the caller's barge-in cancelled that answer


def scripted_call(call_sid: str = "CA1", end: str = "caller") -> ScriptedCall:
    """Greeting; the caller asks for a booking (a tool runs, then the agent answers); the caller talks over
    the answer (barge-in, truncate); a verdict and a model error; the caller hangs up."""
    r = CallRecorder(C.CallController(call_sid, flow=AgentFlow(receptionist())))
    r.start(0)
    r.on_model_event(created("r1", "1"), 100 * MS, IDLE)
    r.on_model_event(delta("r1", 10), 110 * MS, IDLE)
    r.on_model_event(said("r1", "Hello, Smile Dental."), 120 * MS, IDLE)
    r.on_model_event(done("r1"), 121 * MS, IDLE)
    r.on_tick(400 * MS, C.Playout(1, 10, 320 * MS, 1, 10, 320 * MS))
    # turn 1: a booking, through a tool
    r.on_model_event(ev(type="input_audio_buffer.speech_started", item_id="u1", audio_start_ms=900), 1000 * MS, IDLE)
    r.on_model_event(ev(type="input_audio_buffer.speech_stopped", item_id="u1", audio_end_ms=1900), 2000 * MS, IDLE)
    out = r.on_model_event(ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0,
                              transcript="Book a cleaning please"), 2100 * MS, IDLE)
    assert requests(out)[0]["response"]["metadata"]["vc_req"] == "2"
    r.on_model_event(created("r2", "2"), 2300 * MS, IDLE)
    r.on_model_event(ev(type="response.function_call_arguments.done", response_id="r2", item_id="fc_1", call_id="call_1",
                        name="book", arguments='{"service": "cleaning"}'), 2400 * MS, IDLE)
    r.on_model_event(done("r2"), 2410 * MS, IDLE)
    r.on_tool_result("call_1", True, '{"booked": true}', 2600 * MS)
    request_ms, req = tick_until_request(r, 2620)
    out = r.on_model_event(created("r3", req), (request_ms + 200) * MS, IDLE)
    (tag,) = [a.tag for a in out if isinstance(a, C.OpenTag)]
    r.on_model_event(delta("r3", 100), (request_ms + 300) * MS, IDLE)
    r.on_model_event(said("r3", "You are booked for a cleaning."), (request_ms + 400) * MS, IDLE)
    r.on_model_event(done("r3"), (request_ms + 410) * MS, IDLE)
    # turn 2: the caller talks over the answer
    speaking_ms = request_ms + 1000
    playing = C.Playout(tag, 20, speaking_ms * MS, tag, 25, (speaking_ms + 100) * MS)
    r.on_model_event(ev(type="input_audio_buffer.speech_started", item_id="u2", audio_start_ms=speaking_ms), speaking_ms * MS, playing)
    out = r.on_model_event(ev(type="conversation.item.input_audio_transcription.delta", item_id="u2", content_index=0,
                              delta="no wait "), (speaking_ms + 300) * MS, playing)
    cancel_ms = speaking_ms + 300 if any(isinstance(a, C.CancelTag) for a in out) else 0  # the words decide at once
    for at_ms in range(speaking_ms + 320, speaking_ms + 3000, 20) if not cancel_ms else ():
        if any(isinstance(a, C.CancelTag) for a in r.on_tick(at_ms * MS, playing)):
            cancel_ms = at_ms
            break
    assert cancel_ms, "the caller's words never cancelled the answer"
    r.on_model_event(ev(type="input_audio_buffer.speech_stopped", item_id="u2", audio_end_ms=speaking_ms + 1500),
                     (speaking_ms + 1500) * MS, IDLE)
    r.on_model_event(ev(type="conversation.item.input_audio_transcription.completed", item_id="u2", content_index=0,
                        transcript="No wait, make it Friday"), (speaking_ms + 1600) * MS, IDLE)
    r.on_verdict(tag, 0, True, (speaking_ms + 1700) * MS, IDLE, reason="number not in the knowledge base",
                 citations='[{"file": "prices.md", "line": 3}]')
    r.on_model_event(ev(type="error", error={"type": "invalid_request_error", "code": "response_cancel_not_active",
                                             "message": "no active response"}), (speaking_ms + 1800) * MS, IDLE)
    if end == "caller":
        r.on_carrier_stop((speaking_ms + 2000) * MS)
    return ScriptedCall(r.header, r.entries, request_ms, cancel_ms)


def summary_of(call_sid: str, wall_end_s: float, source: str | None = None):
    call = scripted_call(call_sid)
    return summarize_record(call.header, call.entries, source or f"{call_sid}.jsonl", wall_end_s)
