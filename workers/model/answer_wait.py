"""The model worker's side of a call the node placed: the callee's audio goes to the answer gate
(voicecore/outbound/answer_gate.py) until it decides, and the agent's texts get the call's fields.

The callee's words come from a listening session of their own (``CalleeWords``): a Realtime socket opened for
the wait only, configured to transcribe and never to answer (``create_response`` false, nothing asked of it), fed
the callee's audio, closed at the decision. The agent's own session opens after it, as for any call: nothing the
callee said before the verdict is in it, and nothing of the listening session is in the call's record.

Owns: reading the call's CallStarted copy of its direction, callee and fields, the agent filled with them
(``{callee}`` and each field's ``{name}`` in its instructions and greeting), the gate's clock (the callee's frames,
and the wall clock since the first of them as the bound), and the call record's ``answer`` note (verdict, its
time, what decided, the beep, what the gate did) and log line.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging

from picows import WSFrame, WSMsgType, WSTransport, WSListener


from voicecore.agent.spec import AgentSpec, BuiltinTool, FunctionSpec
from voicecore.outbound import call_fields
from voicecore.outbound.answer_gate import AnswerGate, GateDecision

log = logging.getLogger("voicecore.model")


SEND_DTMF = "send_dtmf"


def dtmf_function() -> FunctionSpec:
    """The ``send_dtmf`` function an agent with ``[outbound] dtmf_tool = true`` is offered on the calls the node
    places: the model presses keys on a menu (voicecore/outbound/dtmf.py syntax, checked by the schema too)."""
    return FunctionSpec(
        SEND_DTMF, description=("Press keys on the phone keypad of this call, to choose an option of an automated "
                                "menu (IVR). digits: the keys, 0-9, * and #; w waits half a second, W one second."),
        parameters={"type": "object", "properties": {"digits": {"type": "string", "pattern": "^[0-9*#wW]{1,32}$",
                                                                "description": "the keys to press, e.g. 1 or 2w3#"}},
                    "required": ["digits"], "additionalProperties": False},
        tool=BuiltinTool(SEND_DTMF), writes=False)


def agent_for_call(agent: AgentSpec, started) -> AgentSpec:
    """``agent`` with the outbound call's fields in its texts, and with ``dtmf_tool`` the ``send_dtmf`` function in
    every node (itself for an inbound call)."""
    if started is None or started.direction != call_fields.OUTBOUND:
        return agent
    values = dict(call_fields.fields_of(started), callee=started.callee)
    agent = dataclasses.replace(agent, instructions=call_fields.fill(agent.instructions, values),
                                greeting=call_fields.fill(agent.greeting, values),
                                outbound_voicemail_message=call_fields.fill(agent.outbound_voicemail_message, values))
    if agent.outbound_dtmf_tool and SEND_DTMF not in agent.flow.functions:
        nodes = {name: dataclasses.replace(node, functions=node.functions + (SEND_DTMF,))
                 for name, node in agent.flow.nodes.items()}
        flow = dataclasses.replace(agent.flow, nodes=nodes, functions={**agent.flow.functions, SEND_DTMF: dtmf_function()})
        agent = dataclasses.replace(agent, flow=flow)
    return agent


# A greeting's sentences are transcribed one by one as it pauses between them: the words that tell a screening
# assistant or an IVR from a voicemail then come within the wait, not after the whole greeting.
LISTEN_SILENCE_MS = 300
TRANSCRIPT_DELTA = "conversation.item.input_audio_transcription.delta"
TRANSCRIPT_DONE = "conversation.item.input_audio_transcription.completed"


def listening_session(transcription_model: str) -> str:
    """The session.update of the listening session: the callee's audio in, its transcript out, no answer."""
    return json.dumps({"type": "session.update", "session": {
        "type": "realtime", "instructions": "Do not speak. Only transcribe.", "output_modalities": ["audio"],
        "audio": {"input": {"format": {"type": "audio/pcmu"},
                            "turn_detection": {"type": "server_vad", "silence_duration_ms": LISTEN_SILENCE_MS,
                                               "prefix_padding_ms": 300, "create_response": False,
                                               "interrupt_response": False},
                            "transcription": {"model": transcription_model}},
                  "output": {"format": {"type": "audio/pcmu"}}}}})


class CalleeWords(WSListener):
    """The listening session's socket: its transcript events go to the wait's gate."""

    def __init__(self, wait: AnswerWait, transcription_model: str) -> None:
        self.wait = wait
        self.transcription_model = transcription_model
        self.transport: WSTransport | None = None

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        transport.send(WSMsgType.TEXT, listening_session(self.transcription_model).encode())

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code())
            transport.disconnect()
            return
        if frame.msg_type != WSMsgType.TEXT or not frame.fin:
            return  # the transcript events are small single frames; nothing else here is needed
        try:
            event = json.loads(frame.get_payload_as_utf8_text())
        except ValueError:
            return
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == TRANSCRIPT_DELTA and isinstance(event.get("delta"), str):
            self.wait.on_words(event["delta"], done=False)
        elif kind == TRANSCRIPT_DONE and isinstance(event.get("transcript"), str):
            self.wait.on_words(event["transcript"], done=True)

    def send_audio(self, audio: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_close_frame_sent and not transport.is_disconnected:
            message = {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode("ascii")}
            transport.send(WSMsgType.TEXT, json.dumps(message).encode())

    def close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_close_frame_sent and not transport.is_disconnected:
            transport.send_close()
            transport.disconnect()


def carrier_agrees(answered_by: str, verdict: str) -> bool | None:
    """Whether the carrier's AMD result names the verdict's side (a person, or a machine of any kind); None
    when it names neither (fax, unknown)."""
    if answered_by == "human":
        return verdict == "human"
    if answered_by.startswith("machine_"):
        return verdict in ("voicemail", "screening", "ivr")
    return None


class AnswerWait:
    def __init__(self, call_sid: str, agent: AgentSpec) -> None:
        self.call_sid = call_sid
        on_voicemail = agent.outbound_on_voicemail
        if on_voicemail == "message" and not agent.outbound_voicemail_message:
            on_voicemail = "hang_up"  # nothing to say (a check would have named it): as without a message
        self.gate = AnswerGate(agent.outbound_max_wait_ms, on_voicemail, agent.outbound_on_screening,
                               agent.outbound_on_ivr)
        self.first_audio_ns = 0
        self.decided_ns = 0
        self.reported = False  # the decision went to the record (and a voicemail's hang-up was asked for)
        self.words: CalleeWords | None = None
        self.words_heard = 0

    @property
    def waiting(self) -> bool:
        return self.gate.waiting

    def on_words(self, text: str, done: bool) -> None:
        self.words_heard += 1
        self.gate.on_words(text, done)

    def on_carrier_amd(self, answered_by: str, now_ns: int) -> dict | None:
        """The carrier's AMD result, timed by the wall clock since the callee's first frame (0 before it: a
        synchronous AMD decided before the stream began). None, or when the decision went to the record
        already, what the record notes of this late result. ValueError for a value that is not one."""
        at_ms = (now_ns - self.first_audio_ns) // 1_000_000 if self.first_audio_ns else 0
        decided = self.gate.decision
        self.gate.on_carrier_amd(answered_by, at_ms)
        if decided is None or not self.reported:
            return None
        log.info("call %s: the carrier's AMD said %s at %d ms, after the verdict %s", self.call_sid, answered_by,
                 at_ms, decided.verdict.verdict)
        return {"answered_by": answered_by, "at_ms": at_ms, "verdict": decided.verdict.verdict,
                "agrees": carrier_agrees(answered_by, decided.verdict.verdict)}

    def feed(self, audio: bytes, now_ns: int) -> GateDecision | None:
        """The callee's audio from the ring (may be empty: the clock moved); the decision once it is reached."""
        if audio and not self.first_audio_ns:
            self.first_audio_ns = now_ns
        if audio and self.gate.waiting and self.words is not None:
            self.words.send_audio(audio)
        decision = self.gate.on_audio(audio) if audio else self.gate.decision
        if decision is None and self.first_audio_ns:
            decision = self.gate.on_elapsed((now_ns - self.first_audio_ns) // 1_000_000)
        if decision is not None and not self.decided_ns:
            self.decided_ns = now_ns
            if self.words is not None:
                self.words.close()
        return decision

    def note(self, decision: GateDecision) -> dict:
        """What the call record keeps of the answer (and the log line says)."""
        verdict = decision.verdict
        wall_ms = (self.decided_ns - self.first_audio_ns) // 1_000_000 if self.first_audio_ns else None
        fields = {"verdict": verdict.verdict, "verdict_ms": verdict.at_ms, "reason": verdict.reason,
                  "detail": verdict.detail, "action": decision.action, "action_ms": decision.at_ms,
                  "beep_at_ms": decision.beep_at_ms, "wall_ms": wall_ms, "transcript_events": self.words_heard,
                  "carrier_amd": self.gate.detector.carrier_amd, "carrier_amd_ms": self.gate.detector.carrier_amd_ms}
        log.info("call %s: answered by %s at %d ms (%s%s): %s", self.call_sid, verdict.verdict, verdict.at_ms,
                 verdict.reason, f", {verdict.detail}" if verdict.detail else "", decision.action)
        return fields


