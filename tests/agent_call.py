"""A whole agent call recorded as the model worker records it, on a virtual clock: the turn-taking controller
with a receptionist agent, fed the caller's audio in 100 ms batches (with playout snapshots), the model's events
(a scripted model: it answers each ``response.create`` as the next entry of its script says, echoing the
request's metadata as the vendor does), a carrier that plays what is released (marks every 5 frames) and
the caller's keypresses.

The call: the greeting; the caller asks for a booking; the model calls ``book``, which needs the caller's yes:
the confirmation prompt plays and the caller answers (keypad 1, keypad 2, "yes please", or not at all); the
tool runs (its result 300 ms later) and the agent says so; the gate approves that answer in steps (verdicts with
citations); the caller says goodbye, the model calls ``end_call`` and the agent hangs up after its goodbye.
For the store's and the console's tests: DTMF and confirmations, the audio clock, the heard latency's parts.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math

from voicecore.agent.flow import AgentFlow
from voicecore.agent.spec import AgentSpec, FlowSpec, FunctionSpec, Message, NodeSpec, Webhook
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder
from voicecore.g711 import linear_to_ulaw
from voicecore.sim.model.clips import scripted_text

MS = 1_000_000
FRAME = 160
BOOK_PARAMS = {"type": "object", "properties": {"service": {"type": "string"}, "day": {"type": "string"}},
               "required": ["service", "day"], "additionalProperties": False}
BOOK_ARGS = '{"service": "cleaning", "day": "Friday"}'
QUESTION_AT_MS, QUESTION_END_MS = 2000, 3400
GOODBYE_SAID_MS = 1600  # after the booked answer started: the caller's "bye" begins then
CITATIONS = json.dumps([{"file": "services.md", "snippet": "A cleaning takes 45 minutes.", "number": "45", "line": 4}])


def receptionist() -> AgentSpec:
    functions = {"book": FunctionSpec("book", "Book an appointment.", BOOK_PARAMS, tool=Webhook("http://127.0.0.1:9/book"),
                                      confirm=True, confirm_prompt="Shall I book a {service} on {day}?"),
                 "end_call": FunctionSpec("end_call", "End the call.", action="end_call")}
    nodes = {"reception": NodeSpec("reception", role_messages=(Message("system", "You book appointments."),),
                                   functions=("book", "end_call"))}
    return AgentSpec("receptionist", "You are the receptionist of Smile Dental.", FlowSpec("reception", nodes, functions),
                     greeting="Hello, Smile Dental.")


def tone(frames: int, hz: float, level: float) -> bytes:
    import numpy as np

    t = np.arange(frames * FRAME) / 8000.0
    return bytes(linear_to_ulaw((np.sin(2 * math.pi * hz * t) * level * 32767).astype(np.int16)))


SILENCE = b"\xff" * FRAME


@dataclasses.dataclass
class Carrier:
    """Plays released frames in real time from the first release of a tag; echoes a mark every 5 frames."""

    tag: int = 0
    written: int = 0
    start_ms: int = 0
    cut: bool = False

    def write(self, tag: int, frames: int, now_ms: int) -> None:
        if tag != self.tag:
            self.tag, self.written, self.start_ms, self.cut = tag, 0, now_ms + 10, False
        self.written += frames

    def playout(self, now_ms: int) -> C.Playout:
        if not self.tag:
            return C.IDLE_PLAYOUT
        elapsed = max(0, (now_ms - self.start_ms) // 20)
        sent = min(self.written, elapsed + 4)  # the pacer keeps a lead of 4 frames
        played = min(self.written, elapsed)
        played = (played if played == self.written else played // 5 * 5) if not self.cut else 0  # and a mark at the end
        played_at = (self.start_ms + played * 20) * MS + 15 * MS if played else 0  # the echo comes 15 ms after
        return C.Playout(self.tag if played else 0, played, played_at, self.tag, sent, (self.start_ms + sent * 20) * MS)


@dataclasses.dataclass
class AgentCall:
    header: dict
    entries: list
    dtmf_at_ms: int | None
    booked_tag: int


def agent_call(call_sid: str = "CAagent", answer: str = "keypad") -> AgentCall:
    """The call above; ``answer``: ``keypad`` (1), ``keypad no`` (2), ``words`` ("yes please") or ``none``."""
    recorder = CallRecorder(C.CallController(call_sid, flow=AgentFlow(receptionist()), config=C.ControllerConfig()),
                            keep_caller_audio=True)
    carrier = Carrier()
    pending: list[tuple[int, str, dict]] = []  # (at ms, what, fields): model events and caller actions to come
    script = ["say", "tool book", "say", "say", "tool end_call", "say"]  # what the model does per response.create
    said_by_response: dict[str, str] = {}
    tags: dict[int, str] = {}
    state = {"responses": 0, "prompt_played_ms": None, "booked_tag": 0, "booked_started": None, "dtmf_at": None,
             "bye_planned": False, "answered": False, "stop_ms": None}
    speech_windows: list[tuple[int, int]] = [(QUESTION_AT_MS, QUESTION_END_MS)]

    def plan_utterance(start_ms: int, end_ms: int, text: str, item: str) -> None:
        speech_windows.append((start_ms, end_ms)) if (start_ms, end_ms) not in speech_windows else None
        pending.append((start_ms + 300, "model", {"type": "input_audio_buffer.speech_started", "item_id": item,
                                                  "audio_start_ms": start_ms}))
        pending.append((end_ms + 520, "model", {"type": "input_audio_buffer.speech_stopped", "item_id": item,
                                                "audio_end_ms": end_ms + 500}))
        pending.append((end_ms + 700, "model", {"type": "conversation.item.input_audio_transcription.completed",
                                                "item_id": item, "content_index": 0, "transcript": text}))

    def respond(request: dict, now_ms: int) -> None:
        kind = script[state["responses"]] if state["responses"] < len(script) else "say"
        state["responses"] += 1
        rid = f"resp_{state['responses']}"
        metadata = (request.get("response") or {}).get("metadata") or {}
        pending.append((now_ms + 180, "model", {"type": "response.created", "response": {"id": rid, "metadata": metadata}}))
        if kind.startswith("tool"):
            name = kind.split()[1]
            arguments = BOOK_ARGS if name == "book" else "{}"
            pending.append((now_ms + 260, "model", {"type": "response.function_call_arguments.done", "response_id": rid,
                                                    "item_id": f"fc_{rid}", "call_id": f"call_{name}", "name": name,
                                                    "arguments": arguments}))
            pending.append((now_ms + 270, "model", {"type": "response.done", "response": {"id": rid, "status": "completed"}}))
            return
        instructions = (request.get("response") or {}).get("instructions") or ""
        # a scripted line comes after the session's instructions, as the runtime sends it to the vendor
        text = scripted_text(instructions) or "You are booked for a cleaning on Friday. It takes 45 minutes."
        said_by_response[rid] = text
        frames = max(20, len(text) * 3)  # about 60 ms of speech per character
        audio = tone(frames, 220.0 + 40 * state["responses"], 0.3)
        for i in range(0, frames, 10):
            chunk = base64.b64encode(audio[i * FRAME:(i + 10) * FRAME]).decode()
            pending.append((now_ms + 300 + i * 6, "model", {"type": "response.output_audio.delta", "response_id": rid,
                                                            "item_id": f"item_{rid}", "delta": chunk}))
        for i, word in enumerate(text.split(" ")):  # the words as the vendor streams them, with the audio
            pending.append((now_ms + 301 + i * 12, "model", {"type": "response.output_audio_transcript.delta", "response_id": rid,
                                                             "item_id": f"item_{rid}", "delta": word if i == 0 else " " + word}))
        end = now_ms + 300 + frames * 6
        pending.append((end, "model", {"type": "response.output_audio.done", "response_id": rid, "item_id": f"item_{rid}"}))
        pending.append((end + 1, "model", {"type": "response.output_audio_transcript.done", "response_id": rid,
                                           "item_id": f"item_{rid}", "transcript": text}))
        pending.append((end + 2, "model", {"type": "response.done", "response": {"id": rid, "status": "completed"}}))

    def apply(actions: list, now_ms: int) -> None:
        for action in actions:
            if isinstance(action, C.SendToModel):
                sent = json.loads(action.text)
                if sent.get("type") == "response.create":
                    respond(sent, now_ms)
            elif isinstance(action, C.OpenTag):
                tags[action.tag] = state.get("creating", "")
            elif isinstance(action, C.WriteFrames):
                carrier.write(action.tag, len(action.audio) // FRAME, now_ms)
            elif isinstance(action, C.CancelTag):
                carrier.cut = True
            elif isinstance(action, C.RunTool):
                pending.append((now_ms + 300, "tool", {"call_id": action.call_id, "ok": True,
                                                       "output": '{"booked": true, "when": "Friday 10:00"}'}))
            elif isinstance(action, (C.HangUp, C.Transfer)):
                state["stop_ms"] = now_ms + 400

    plan_utterance(QUESTION_AT_MS, QUESTION_END_MS, "I'd like to book a cleaning on Friday", "item_q")
    apply(recorder.start(0), 0)
    now = 0
    while now < 60_000:
        now += 20
        playout = carrier.playout(now)
        # the caller's audio: a batch every 100 ms (the frames of the last 100 ms)
        if now % 100 == 0:
            frames = b"".join(tone(1, 180.0, 0.5) if any(s <= now - 100 + k * 20 < e for s, e in speech_windows) else SILENCE
                              for k in range(5))
            apply(recorder.on_caller_audio(frames, now * MS, playout), now)
        for item in sorted([p for p in pending if p[0] <= now], key=lambda p: p[0]):
            pending.remove(item)
            _, what, fields = item
            if what == "model":
                if fields["type"] == "response.created":
                    rid = fields["response"]["id"]
                    state["creating"] = rid
                    prompt = fields["response"]["metadata"].get("vc_prompt", "")
                    if prompt.startswith("confirm:"):
                        state["confirm_response"] = rid
                    elif state["answered"] and "booked_response" not in state and prompt == "answer":
                        state["booked_response"] = rid
                if fields["type"] == "response.done" and fields["response"]["id"] == state.get("confirm_response"):
                    state["confirm_done"] = True
                apply(recorder.on_model_event(json.dumps(fields), now * MS, playout), now)
            elif what == "tool":
                apply(recorder.on_tool_result(fields["call_id"], fields["ok"], fields["output"], now * MS), now)
            elif what == "dtmf":
                apply(recorder.on_dtmf(fields["digit"], now * MS), now)
                state["dtmf_at"] = now
            elif what == "verdict":
                apply(recorder.on_verdict(fields["tag"], fields["frames"], False, now * MS, playout, "", CITATIONS), now)
        apply(recorder.on_tick(now * MS, playout), now)
        # the caller answers once the confirmation prompt has played out
        playing = tags.get(carrier.tag, "")
        if not state["answered"] and state.get("confirm_done") and playing == state.get("confirm_response") and \
                (now - carrier.start_ms) // 20 >= carrier.written:
            state["answered"] = True
            at = now + 600
            if answer == "keypad":
                pending.append((at, "dtmf", {"digit": "1"}))
            elif answer == "keypad no":
                pending.append((at, "dtmf", {"digit": "2"}))
            elif answer == "words":
                plan_utterance(at, at + 700, "Yes please", "item_yes")
        # the booked answer: the gate approves it in three steps; the caller says goodbye while it finishes
        booked = state.get("booked_response")
        if booked and not state["booked_tag"] and playing == booked and carrier.written:
            state["booked_tag"] = carrier.tag
            state["booked_started"] = now
            for step, frames in enumerate((20, 60, 200)):
                pending.append((now + 100 + step * 150, "verdict", {"tag": carrier.tag, "frames": frames}))
        if state["booked_started"] and not state["bye_planned"] and now >= state["booked_started"] + GOODBYE_SAID_MS + 2500:
            state["bye_planned"] = True
            plan_utterance(now, now + 600, "Thanks, bye", "item_bye")
        if state["stop_ms"] is not None and now >= state["stop_ms"]:
            break
        if answer in ("none", "keypad no") and state["answered"] and now > 40_000:
            break
    recorder.on_carrier_stop(now * MS)
    header = json.loads(json.dumps(recorder.header))
    entries = json.loads(json.dumps(recorder.entries))
    return AgentCall(header, entries, state["dtmf_at"], state["booked_tag"])


def write_record(call: AgentCall, path) -> None:
    """The record as the model worker writes it (JSON lines)."""
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in [call.header, *call.entries]))
