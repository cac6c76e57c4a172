"""Scenario harness: a call's controller driven by a scripted model, caller and playout, on a virtual clock.

Three fakes around one real CallController (wrapped in a CallRecorder):
- ``FakeModel``: answers the client events the controller sends with timed server events (raw Realtime
  JSON, GA names): response.created (echoing metadata), audio deltas not aligned to frames, faster than
  real time, done events; tool calls, stalls, late deltas after a cancel, never answering, a spontaneous
  second response. It also plays the server's VAD and transcription for the caller's scripted speech.
- ``PlayoutModel``: the pacer and the carrier. Releases frames in ring order every 20 ms while the
  carrier holds less than the 80 ms lead and the gate watermark allows; echoes a mark every 5 frames
  and at a tag's end when its audio has played; a cancel clears what the carrier had not played yet.
  What it plays is "what the caller heard".
- the caller: speech intervals (with or without words), DTMF, hang-up.
With a release policy configured, the real validator core (workers/validator/core.py) judges the gated
responses against the knowledge base in tests/kb/ (its verdicts arrive one tick later, as over the bus),
and the controller's Retrieve actions are answered from the same knowledge base.
No sockets, no sleeps; every run is deterministic.
"""

from __future__ import annotations

import base64
import dataclasses
import json

from pathlib import Path

from voicecore import timing
from voicecore.bus import messages
from voicecore.call import controller as C
from voicecore.call import core as model_core
from voicecore.call import flow as flows
from voicecore.call.record import CallRecorder
from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir
from workers.validator.core import ValidatorCore

KB_DIR = Path(__file__).resolve().parent.parent / "kb"

MS = 1_000_000
TICK_MS = 20
LEAD_MS = timing.DEFAULT_LEAD_MS
MARK_EVERY = timing.DEFAULT_MARK_EVERY_FRAMES
CALL_SID = "CA" + "0" * 31 + "1"


# --- the caller's script ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Speech:
    """Caller speech from start to start+dur (ms). ``words``: its transcript (None: cough/breath/noise).

    Start is absolute (``at_ms``) or ``offset_ms`` after the first heard frame of prompt ``after``.
    The words come as the vendor sends them: after the VAD's commit (speech end + its silence), the first
    ``words_delay_ms`` after it; word by word ``WORD_GAP_MS`` apart then ``completed`` (``deltas``: the
    gpt-4o-transcribe family), or only the ``completed`` (``deltas=False``: whisper-1). ``failed``: the
    transcription fails instead (no words ever).
    """

    dur_ms: int
    words: str | None = "yes I have a question"
    at_ms: int | None = None
    after: str | None = None
    offset_ms: int = 0
    words_delay_ms: int = 300
    deltas: bool = True
    failed: bool = False


WORD_GAP_MS = 30


@dataclasses.dataclass(frozen=True)
class Dtmf:
    digit: str
    at_ms: int | None = None
    after: str | None = None
    offset_ms: int = 0


@dataclasses.dataclass(frozen=True)
class HangUpCaller:
    at_ms: int | None = None
    after: str | None = None
    offset_ms: int = 0


# --- the model's script -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Plan:
    """What the model does for one response.create."""

    audio_ms: int = 1500
    tool: str | None = None  # function calls (comma-separated, no audio) instead of speech
    tool_after_ms: int = 653  # lookup_caller's 653 ms in the call where the agent spoke over the caller
    stall_after_ms: int | None = None  # audio stops after this much (never finishes)
    never: bool = False  # no answer at all
    text: str | None = None  # its transcript: words sent just before the audio they cover, then done


@dataclasses.dataclass
class ModelScript:
    plans: dict[str, list[Plan]] = dataclasses.field(default_factory=dict)  # prompt_id -> per attempt
    default: Plan = Plan()  # for prompts not in plans
    latency_ms: int = 300  # response.create -> response.created
    first_audio_ms: int = 200  # response.created -> first delta
    delta_bytes: int = 1000  # not a multiple of 160 (docs/explanation/protocols.md#d2)
    speed: float = 2.0  # audio generated this much faster than real time
    late_deltas_after_cancel: int = 2
    vad_stop_delay_ms: int = 500  # server VAD silence_duration_ms
    spontaneous_at_ms: int | None = None  # the model starts a response nobody asked for


@dataclasses.dataclass
class _Gen:
    response_id: str
    item_id: str
    prompt_id: str
    remaining_bytes: int
    next_at: int
    stall_left_bytes: int | None
    cancelled: bool = False
    late_left: int = 0
    finished: bool = False
    words: list[str] = dataclasses.field(default_factory=list)
    total_bytes: int = 0
    sent_bytes: int = 0
    sent_words: int = 0


class FakeModel:
    def __init__(self, script: ModelScript) -> None:
        self.script = script
        self.queue: list[tuple[int, int, str]] = []  # (t_ms, seq, raw json)
        self.seq = 0
        self.received: list[tuple[int, dict]] = []
        self.attempts: dict[str, int] = {}
        self.gens: list[_Gen] = []
        self.n_resp = 0
        self.n_item = 0
        self.response_prompt: dict[str, str] = {}
        self.spontaneous_done = False

    def emit(self, t: int, event: dict) -> None:
        self.seq += 1
        self.queue.append((t, self.seq, json.dumps(event, separators=(",", ":"))))

    def due(self, now: int) -> list[str]:
        self.queue.sort()
        out = [text for t, _, text in self.queue if t <= now]
        self.queue = [q for q in self.queue if q[0] > now]
        return out

    def receive(self, text: str, now: int) -> None:
        event = json.loads(text)
        self.received.append((now, event))
        kind = event["type"]
        if kind == "response.create":
            meta = (event.get("response") or {}).get("metadata") or {}
            prompt = meta.get("vc_prompt", "answer")
            n = self.attempts.get(prompt, 0)
            self.attempts[prompt] = n + 1
            plans = self.script.plans.get(prompt) or [self.script.default]
            self._start(now, prompt, plans[min(n, len(plans) - 1)], meta)
        elif kind == "response.cancel":
            for gen in self.gens:
                if gen.response_id == event.get("response_id", gen.response_id) and not gen.finished and not gen.cancelled:
                    gen.cancelled = True
                    gen.late_left = self.script.late_deltas_after_cancel
                    gen.next_at = now + 5
        elif kind == "conversation.item.truncate":
            self.emit(now + 20, {"type": "conversation.item.truncated", "item_id": event["item_id"],
                                 "content_index": 0, "audio_end_ms": event["audio_end_ms"]})
        elif kind == "conversation.item.delete":
            self.emit(now + 20, {"type": "conversation.item.deleted", "item_id": event["item_id"]})

    def _start(self, now: int, prompt: str, plan: Plan, meta: dict) -> None:
        if plan.never:
            return
        self.n_resp += 1
        self.n_item += 1
        rid, iid = f"resp_{self.n_resp}", f"item_a{self.n_item}"
        self.response_prompt[rid] = prompt
        t = now + self.script.latency_ms
        created = {"type": "response.created", "response": {"id": rid, "object": "realtime.response", "status": "in_progress"}}
        if meta:
            created["response"]["metadata"] = meta
        self.emit(t, created)
        if plan.tool:
            names = plan.tool.split(",")
            for k, name in enumerate(names):  # parallel tool calls of one response, 100 ms apart
                self.emit(t + plan.tool_after_ms + 100 * k, {
                    "type": "response.function_call_arguments.done", "response_id": rid, "item_id": f"{iid}_{k}",
                    "output_index": k, "call_id": f"call_{self.n_resp}_{k}", "name": name, "arguments": "{}"})
            self.emit(t + plan.tool_after_ms + 100 * len(names), {"type": "response.done", "response": {"id": rid, "status": "completed"}})
            return
        self.emit(t + 1, {"type": "response.output_item.added", "response_id": rid, "output_index": 0,
                          "item": {"id": iid, "type": "message", "role": "assistant"}})
        stall = None if plan.stall_after_ms is None else plan.stall_after_ms * timing.BYTES_PER_MS
        total = plan.audio_ms * timing.BYTES_PER_MS
        words = [w if i == 0 else " " + w for i, w in enumerate(plan.text.split(" "))] if plan.text else []
        self.gens.append(_Gen(rid, iid, prompt, total, t + self.script.first_audio_ms, stall, words=words, total_bytes=total))

    def spontaneous(self, now: int) -> None:
        self.spontaneous_done = True
        self._start(now - self.script.latency_ms, "spontaneous", Plan(audio_ms=2000), {})

    def advance(self, now: int) -> None:
        """Generate audio deltas due by ``now``."""
        s = self.script
        interval = int(s.delta_bytes / timing.BYTES_PER_MS / s.speed)
        for gen in self.gens:
            while not gen.finished and gen.next_at <= now:
                t = gen.next_at
                if gen.cancelled:
                    if gen.late_left > 0:
                        gen.late_left -= 1
                        self._delta(gen, t, min(s.delta_bytes, max(gen.remaining_bytes, 160)))
                        gen.next_at = t + 5
                        continue
                    gen.finished = True
                    self.emit(t + 5, {"type": "response.done", "response": {"id": gen.response_id, "status": "cancelled",
                                                                        "status_details": {"type": "cancelled", "reason": "client_cancelled"}}})
                    break
                if gen.stall_left_bytes is not None and gen.stall_left_bytes <= 0:
                    gen.next_at = 10**12  # stalled: nothing more, ever
                    break
                n = min(s.delta_bytes, gen.remaining_bytes)
                if gen.stall_left_bytes is not None:
                    n = min(n, gen.stall_left_bytes)
                    gen.stall_left_bytes -= n
                self._words_until(gen, t, gen.sent_bytes + n)
                self._delta(gen, t, n)
                gen.sent_bytes += n
                gen.remaining_bytes -= n
                gen.next_at = t + interval
                if gen.remaining_bytes <= 0:
                    gen.finished = True
                    self.emit(t + 1, {"type": "response.output_audio.done", "response_id": gen.response_id, "item_id": gen.item_id,
                                      "output_index": 0, "content_index": 0})
                    if gen.words:
                        self.emit(t + 1, {"type": "response.output_audio_transcript.done", "response_id": gen.response_id,
                                          "item_id": gen.item_id, "output_index": 0, "content_index": 0,
                                          "transcript": "".join(gen.words)})
                    self.emit(t + 2, {"type": "response.done", "response": {"id": gen.response_id, "status": "completed"}})

    def _words_until(self, gen: _Gen, t: int, end_byte: int) -> None:
        """Transcript words whose audio starts before ``end_byte``, sent just before that audio."""
        while gen.sent_words < len(gen.words) and gen.total_bytes * gen.sent_words // len(gen.words) < end_byte:
            self.emit(t, {"type": "response.output_audio_transcript.delta", "response_id": gen.response_id,
                          "item_id": gen.item_id, "output_index": 0, "content_index": 0, "delta": gen.words[gen.sent_words]})
            gen.sent_words += 1

    def _delta(self, gen: _Gen, t: int, n: int) -> None:
        audio = bytes([0x10 + int(gen.response_id.split("_")[1]) % 0x60]) * n
        self.emit(t, {"type": "response.output_audio.delta", "response_id": gen.response_id, "item_id": gen.item_id,
                      "output_index": 0, "content_index": 0, "delta": base64.b64encode(audio).decode("ascii")})

    def caller_speech(self, start: int, sp: Speech, n: int) -> None:
        """The server's VAD and transcription for one stretch of caller speech."""
        item = f"item_u{n}"
        end = start + sp.dur_ms
        self.emit(start, {"type": "input_audio_buffer.speech_started", "audio_start_ms": max(0, start - 300), "item_id": item})
        stop = end + self.script.vad_stop_delay_ms
        # audio_end_ms includes the VAD's silence, as the vendor's does (audio_start_ms its prefix padding)
        self.emit(stop, {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": stop, "item_id": item})
        self.emit(stop + 1, {"type": "input_audio_buffer.committed", "item_id": item, "previous_item_id": None})
        at = stop + 1 + sp.words_delay_ms
        if sp.failed:
            self.emit(at, {"type": "conversation.item.input_audio_transcription.failed", "item_id": item,
                           "content_index": 0, "error": {"type": "transcription_error", "message": "failed"}})
            return
        if sp.words and sp.deltas:
            for i, word in enumerate(sp.words.split()):
                self.emit(at + i * WORD_GAP_MS, {"type": "conversation.item.input_audio_transcription.delta",
                                                 "item_id": item, "content_index": 0, "delta": (" " if i else "") + word})
            at += len(sp.words.split()) * WORD_GAP_MS
        self.emit(at, {"type": "conversation.item.input_audio_transcription.completed", "item_id": item,
                       "content_index": 0, "transcript": sp.words or ""})


# --- the pacer and the carrier ------------------------------------------------------------------------
class PlayoutModel:
    def __init__(self) -> None:
        self.ring: list[tuple[int, int, bytes]] = []
        self.state: dict[int, str] = {}
        self.approved: dict[int, int] = {}
        self.total: dict[int, int] = {}
        self.carrier_end = 0
        self.heard: list[list[int]] = []  # [tag, index, play_at_ms]
        self.marks: list[tuple[int, int, int]] = []  # (echo_at_ms, tag, frames)
        self.played = (0, 0, 0)
        self.sent = (0, 0)
        self.cancel_at: dict[int, int] = {}
        self.paused_tag = 0  # held on a bare VAD edge (HoldTag), as the pacer's PAUSED_TAG: the carrier
        # plays what it holds, nothing newer of the tag is released

    def apply(self, action: object, now: int) -> None:
        if isinstance(action, C.OpenTag):
            self.state[action.tag] = "live"
            self.approved[action.tag] = 0 if action.gated else 1 << 62
        elif isinstance(action, C.WriteFrames):
            if self.state.get(action.tag) == "cancelled":
                return
            for k in range(len(action.audio) // timing.FRAME_BYTES):
                self.ring.append((action.tag, action.first_index + k, action.audio[k * 160:(k + 1) * 160]))
        elif isinstance(action, C.EndTag):
            self.total[action.tag] = action.total_frames
        elif isinstance(action, C.ReleaseTag):
            self.approved[action.tag] = max(self.approved.get(action.tag, 0), action.frames)
        elif isinstance(action, C.HoldTag):
            self.paused_tag = action.tag
        elif isinstance(action, C.ResumeTag):
            if self.paused_tag == action.tag:
                self.paused_tag = 0
        elif isinstance(action, C.CancelTag):
            self.state[action.tag] = "cancelled"
            self.cancel_at.setdefault(action.tag, now)
            self.ring = [r for r in self.ring if r[0] != action.tag]
            # clear: the carrier drops what it had not started playing; their mark echoes are not "played"
            self.heard = [h for h in self.heard if not (h[0] == action.tag and h[2] >= now)]
            self.marks = [m for m in self.marks if not (m[1] == action.tag and m[0] > now)]
            ends = [h[2] + TICK_MS for h in self.heard]
            self.carrier_end = min(self.carrier_end, max([now] + [e for e in ends if e > now]))

    def step(self, now: int) -> None:
        for m in sorted(m for m in self.marks if m[0] <= now):
            self.played = (m[1], m[2], m[0])
        self.marks = [m for m in self.marks if m[0] > now]
        while self.ring:
            tag, index, _ = self.ring[0]
            if self.state.get(tag) == "cancelled":
                self.ring.pop(0)
                continue
            if tag == self.paused_tag or index >= self.approved.get(tag, 0) or self.carrier_end - now >= LEAD_MS:
                break
            self.ring.pop(0)
            play_at = max(now, self.carrier_end)
            self.carrier_end = play_at + TICK_MS
            self.sent = (tag, index + 1)
            self.heard.append([tag, index, play_at])
            if (index + 1) % MARK_EVERY == 0 or index + 1 == self.total.get(tag):
                self.marks.append((play_at + TICK_MS, tag, index + 1))
        # a tag whose end arrived after its last frame was released still gets its end mark
        for tag, total in self.total.items():
            if self.sent == (tag, total) and not any(m[1] == tag and m[2] == total for m in self.marks) \
                    and self.played[:2] != (tag, total) and total % MARK_EVERY:
                self.marks.append((max(now, self.carrier_end), tag, total))

    def snapshot(self) -> C.Playout:
        return C.Playout(self.played[0], self.played[1], self.played[2] * MS, self.sent[0], self.sent[1], self.carrier_end * MS)


# --- one run ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    recorder: CallRecorder
    controller: C.CallController
    validator: ValidatorCore | None
    model: FakeModel
    playout: PlayoutModel
    speech: list[tuple[int, int, bool]]  # (start_ms, end_ms, has_words) of the caller's real speech
    end: tuple[int, object] | None
    tag_prompt: dict[int, str]
    end_ms: int

    def heard_by_prompt(self) -> dict[str, list[tuple[int, int, int]]]:
        out: dict[str, list[tuple[int, int, int]]] = {}
        for tag, index, at in self.playout.heard:
            out.setdefault(self.tag_prompt.get(tag, "?"), []).append((tag, index, at))
        return out

    def heard_ms(self, prompt: str) -> int:
        return len(self.heard_by_prompt().get(prompt, [])) * TICK_MS

    def sent(self, kind: str) -> list[tuple[int, dict]]:
        return [(t, e) for t, e in self.model.received if e["type"] == kind]

    def received(self, kind: str) -> list[tuple[int, dict]]:
        """Server events of ``kind`` the controller got, with the ms it got them (from its record)."""
        events = []
        for entry in self.recorder.entries:
            if entry["k"] == "model" and f'"{kind}"' in entry["text"]:
                event = json.loads(entry["text"])
                if event.get("type") == kind:
                    events.append((entry["t"] // MS, event))
        return events

    def overlap_ms(self) -> int:
        """Agent audio heard while the caller was speaking (any speech, words or not)."""
        total = 0
        for _, _, at in self.playout.heard:
            for start, end, _ in self.speech:
                total += max(0, min(at + TICK_MS, end) - max(at, start))
        return total

    def max_dead_air_ms(self) -> int:
        """Longest silence the agent owed: no one audible, ending when agent audio (or the call's end
        action) starts. Waiting for the caller (a gap ended by caller speech, or the run's cut-off) is
        not counted; the silence monitor's 10/20/40 s waits are, by design."""
        agent = [(at, at + TICK_MS, True) for _, _, at in self.playout.heard]
        caller = [(s, e, False) for s, e, _ in self.speech]
        cursor, worst = 0, 0
        for s, e, is_agent in sorted(agent + caller):
            if s > cursor and is_agent:
                worst = max(worst, s - cursor)
            cursor = max(cursor, e)
        if self.end is not None and self.end[0] > cursor:
            worst = max(worst, self.end[0] - cursor)
        return worst


def knowledge_base() -> KnowledgeBase:
    return KnowledgeBase.from_documents(load_knowledge_dir(KB_DIR))


def run(caller: list, model: ModelScript | None = None, config: C.ControllerConfig | None = None,
        flow_args: dict | None = None, max_ms: int = 60_000) -> Outcome:
    model_script = model or ModelScript()
    fake = FakeModel(model_script)
    playout = PlayoutModel()
    flow_args = flow_args or {}
    controller = C.CallController(CALL_SID, flow=flows.ScriptedFlow(**flow_args), config=config)
    rec = CallRecorder(controller)
    gated = controller.config.gate_policy != "off" or bool(flow_args.get("node_policies"))
    knowledge = knowledge_base() if gated or controller.config.retrieve_first else None
    validator = ValidatorCore(knowledge) if gated else None
    verdicts: list[messages.Verdict] = []  # delivered on the next tick, as over the bus
    pending = list(caller)
    first_heard: dict[str, int] = {}
    tag_prompt: dict[int, str] = {}
    speech: list[tuple[int, int, bool]] = []
    end: tuple[int, object] | None = None
    n_speech = 0

    def apply(actions: list, now: int) -> None:
        nonlocal end
        for a in actions:
            if isinstance(a, C.SendToModel):
                fake.receive(a.text, now)
            elif isinstance(a, model_core.OpenGate):
                assert validator is not None, "a gate opened without a release policy"
                verdicts.extend(validator.handle(messages.GateOpen(0, 1, a.tag, a.policy, a.script, a.language, a.forbidden)))
            elif isinstance(a, model_core.GateTranscript):
                assert validator is not None
                message = (messages.TranscriptDone(0, 1, a.tag, a.text, a.audio_frames) if a.done
                           else messages.TranscriptDelta(0, 1, a.tag, a.text, a.audio_frames))
                verdicts.extend(validator.handle(message))
            elif isinstance(a, C.Retrieve):
                found = knowledge.retrieve(a.question, a.k) if knowledge is not None else []
                snippets = [{"file": s.file, "line": s.line, "text": s.text} for s in found]
                apply(rec.on_snippets(a.req_id, snippets, now * MS), now)
            elif isinstance(a, (C.HangUp, C.Transfer, C.CallOver)):
                end = end or (now, a)
            else:
                if isinstance(a, C.OpenTag):
                    active = controller.by_tag.get(a.tag)
                    tag_prompt[a.tag] = active.request.prompt_id if active else "?"
                playout.apply(a, now)

    now = 0
    apply(rec.start(now * MS), now)
    while now <= max_ms and end is None:
        playout.step(now)
        for tag, _, at in playout.heard:
            first_heard.setdefault(tag_prompt.get(tag, "?"), at)
        # caller script entries whose time has come
        for item in list(pending):
            if item.at_ms is not None:
                due = item.at_ms
            elif item.after in first_heard:
                due = first_heard[item.after] + item.offset_ms
            else:
                continue
            if due > now:
                continue
            pending.remove(item)
            if isinstance(item, Speech):
                n_speech += 1
                speech.append((due, due + item.dur_ms, bool(item.words)))
                fake.caller_speech(due, item, n_speech)
            elif isinstance(item, Dtmf):
                apply(rec.on_dtmf(item.digit, now * MS), now)
            elif isinstance(item, HangUpCaller):
                apply(rec.on_carrier_stop(now * MS), now)
        if end is not None:
            break
        for verdict in verdicts[:]:
            verdicts.remove(verdict)
            apply(rec.on_verdict(verdict.tag, verdict.approved_frames, verdict.rejected, now * MS, playout.snapshot(),
                                 verdict.reason, verdict.citations), now)
        if model_script.spontaneous_at_ms is not None and not fake.spontaneous_done and now >= model_script.spontaneous_at_ms:
            fake.spontaneous(now)
        fake.advance(now)
        for text in fake.due(now):
            apply(rec.on_model_event(text, now * MS, playout.snapshot()), now)
            if end is not None:
                break
        if end is not None:
            break
        if now % 100 == 0:
            apply(rec.on_caller_audio(b"\xff" * 5 * timing.FRAME_BYTES, now * MS), now)  # 100 ms of silence
        apply(rec.on_tick(now * MS, playout.snapshot()), now)
        now += TICK_MS
    return Outcome(rec, controller, validator, fake, playout, speech, end, tag_prompt, now)
