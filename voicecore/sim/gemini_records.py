"""`voicecore demo --model-vendor gemini`: the Gemini Live simulator in place of the Realtime one, and its
connections read as the call report reads the Realtime simulator's sessions.

Owns the simulator's settings for a demo or the bench (its connection limit, late chunks, stalls), starting it
for a demo in a process of its own (voicecore/sim/gemini_process.py), the configuration that points the stack at it, and ``GeminiRecords``: per call, each of its simulated connections as a ``SessionRecord``
(voicecore/sim/model/records.py) whose responses are the model turns as the carrier receives them, so
``voicecore.callreport.summarize`` computes the same figures (stale and overlapping frames, barge-in to
clear, lateness, underruns) for either vendor. A turn's audio is resampled here exactly as the driver
resamples it (the carrier edge's filter, fed the same chunks, its 10 ms tail flushed at the turn's end),
so every frame the carrier receives is matched to its turn byte for byte.
"""

from __future__ import annotations

from typing import Any

import dataclasses
import json

from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.events import ENCODING_L16
from voicecore.config import Config
from voicecore.gemini import protocol as gp
from voicecore.gemini.driver import DEFAULT_MODEL
from voicecore.sim.gemini import GeminiSimServer, serve_gemini_sim
from voicecore.sim.gemini_process import GeminiSimProcess
from voicecore.g711 import ulaw_to_linear
from voicecore.sim.audio_clips import default_library
from voicecore.sim.gemini_core import (CallerPhrase, ConnectionRecord, GeminiSimConfig, ToolRule, TurnRecord, chunk_seed,
                                       dithered)
from voicecore.sim.model.records import ResponseRecord, SessionRecord, SpeechRecord

DEMO_API_KEY = "voicecore-demo"  # the simulator accepts it; nothing leaves the machine
_FLUSH_24K = bytes(gp.OUTPUT_SAMPLE_RATE_HZ * 2 * 10 // 1000)


def sim_config(connection_limit_s: float = 600.0, late_chunks: int = 0, scenario: Any = None,
               clips: tuple[str, ...] = (), stall: "Stall | None" = None,
               internal_error_s: float | None = None) -> GeminiSimConfig:
    """The demo's (and the bench's) Gemini simulator settings. ``connection_limit_s``: each connection gets goAway
    10 s (or half the limit, if shorter) before it ends, and the call resumes its session on a new one.
    ``scenario``: an agent's demo scenario (voicecore/agent/scenario.py): the simulator transcribes its
    callers' clips, makes its function calls and says its answers on their words (other turns: its own answers;
    a line asked "Say exactly" as written).
    ``clips``: without a scenario, the packaged caller clips its callers say, which it transcribes (each known
    phrase costs the simulator a search of every 200 ms of a caller's speech: only those its callers say).
    ``stall``: the model's output pauses mid-turn (the Realtime simulator's switch; the bench's model-stall).
    ``internal_error_s``: each session's first connection is dropped with 1011 this long after it opened."""
    limit_ms = int(connection_limit_s * 1000)
    rules, answers, phrases = (scenario_behaviour(scenario) if scenario is not None
                               else ((), (), caller_phrases(set(clips)) if clips else ()))
    config = GeminiSimConfig(api_keys=(DEMO_API_KEY,), connection_limit_ms=limit_ms,
                             go_away_notice_ms=min(10_000, limit_ms // 2), late_chunks_after_interrupt=late_chunks,
                             tool_rules=rules, answer_rules=answers, caller_phrases=phrases,
                             internal_error_after_ms=None if internal_error_s is None else int(internal_error_s * 1000))
    if stall is not None:
        config = dataclasses.replace(config, stall_after_ms=stall.after_ms, stall_ms=stall.stall_ms, stall_turns=stall.turns)
    return config


async def start_sim(connection_limit_s: float = 600.0, late_chunks: int = 0, scenario: Any = None,
                    clips: tuple[str, ...] = (), stall: "Stall | None" = None) -> tuple[GeminiSimServer, int]:
    """The simulator (``sim_config``'s settings) on loopback in this process (the bench's own simulator process)."""
    return await serve_gemini_sim("127.0.0.1", 0, sim_config(connection_limit_s, late_chunks, scenario, clips, stall))


async def start_sim_process(connection_limit_s: float = 600.0, late_chunks: int = 0, scenario: Any = None,
                            clips: tuple[str, ...] = (), internal_error_s: float | None = None) -> "GeminiRecords":
    """The demo's simulator in a process of its own (voicecore/sim/gemini_process.py: not on the carrier
    simulator's event loop); its records, read as the Realtime simulator's, once ``aclose``d."""
    process = await GeminiSimProcess.start(sim_config(connection_limit_s, late_chunks, scenario, clips,
                                                      internal_error_s=internal_error_s))
    return GeminiRecords(process)


@dataclasses.dataclass(frozen=True, slots=True)
class Stall:
    """A model that stops producing mid-turn: after ``after_ms`` of a turn's output, for ``stall_ms``; only the
    turns numbered in ``turns`` (each session counts from 0), or every one."""

    after_ms: int
    stall_ms: int = 2000
    turns: tuple[int, ...] = ()


def caller_phrases(names: Any = None) -> tuple[CallerPhrase, ...]:
    """The packaged caller clips (``names``, or every one: callers, backchannels, noises) as phrases the
    simulator recognises, each with its kind, so it transcribes what a harness's callers say."""
    library = default_library()
    return tuple(CallerPhrase(info.text, ulaw_to_linear(library.audio[info.name]).astype("<i2").tobytes(), info.kind)
                 for info in library.infos
                 if info.role == "caller" and (names is None or info.name in names) and (info.text or info.kind == "noise"))


def scenario_behaviour(scenario: Any) -> tuple[tuple[ToolRule, ...], tuple[tuple[str, str], ...],
                                                tuple[CallerPhrase, ...]]:
    """A demo scenario's function calls and answers (its ``[[sim]]`` rules, on the caller's spoken words) and
    the caller clips its scripts say, as phrases the simulator recognises."""
    rules = tuple(ToolRule(turn.call, json.loads(turn.arguments), on_words=turn.when)
                  for turn in scenario.sim_turns if turn.call)
    answers = tuple((turn.when, turn.answer) for turn in scenario.sim_turns if turn.answer and not turn.call)
    names = {t.clip for script in scenario.scripts for t in script.turns if t.clip}
    return rules, answers, caller_phrases(names)


def demo_config(config: Config, port: int) -> Config:
    """The stack pointed at the simulator on ``port``: its URL, a key it accepts, a Gemini model."""
    model = config.model if config.model.removeprefix("models/").startswith("gemini") else DEFAULT_MODEL
    return dataclasses.replace(config, realtime_url=f"ws://127.0.0.1:{port}{gp.LIVE_PATH}",
                               realtime_api_key=DEMO_API_KEY, model=model, send_call_id_to_vendor=True)


def turn_ulaw(turn: TurnRecord) -> tuple[bytes, list[int], list[int]]:
    """The turn's audio as the driver turned it into 8 kHz mu-law: (the audio, the bytes of each part, when
    each part was sent). Each chunk the simulator sent is resampled as sent; a turn that completed ends with
    the resampler's flushed tail (sent with turnComplete). Audio never sent is not the turn's."""
    transcoder = EdgeTranscoder(ENCODING_L16, gp.OUTPUT_SAMPLE_RATE_HZ)
    parts: list[bytes] = []
    offset = 0
    for index, size in enumerate(turn.chunk_bytes):
        pcm = dithered(turn.pcm24[offset:offset + size], chunk_seed(turn.seed, index))  # as the simulator sent it
        parts.append(transcoder.to_ulaw(pcm))
        offset += size
    sent_ms = list(turn.chunk_sent_ms)
    if turn.completed_ms is not None and turn.interrupted_ms is None:
        parts.append(transcoder.to_ulaw(_FLUSH_24K))
        sent_ms.append(turn.completed_ms)
    return b"".join(parts), [len(p) for p in parts], sent_ms


def session_record(record: ConnectionRecord, index: int) -> SessionRecord:
    """One simulated connection as the call report reads a Realtime session."""
    session = SessionRecord(session_id=f"gemini-connection-{index}", session_index=index, naming="gemini",
                            model=str((record.setup or {}).get("model", "")), connected_ms=record.opened_ms,
                            call_sid=record.call_sid)
    session.input_format = session.output_format = "pcmu"
    instruction = ((record.setup or {}).get("systemInstruction") or {}).get("parts") or [{}]
    instructions = str(instruction[0].get("text", "")) if isinstance(instruction[0], dict) else ""
    # the caller's audio received, as the 8 kHz mu-law bytes it was (16 kHz 16-bit PCM is 4 bytes for each)
    session.appended_bytes = record.audio_in_bytes // 4
    for number, turn in enumerate(record.turns):
        audio, sizes, sent_ms = turn_ulaw(turn)
        sent = len(turn.chunk_sent_ms)
        # cut by the server (interrupted), or by the client whose note says its caller cut it (NO_INTERRUPTION)
        cut_ms = turn.interrupted_ms if turn.interrupted_ms is not None else turn.client_cut_ms
        status = "cancelled" if cut_ms is not None else "completed" if turn.completed_ms else "in_progress"
        late = turn.late_chunks
        session.responses.append(ResponseRecord(
            index=number, response_id=f"gemini-{index}-{number}", item_id=f"gemini-item-{index}-{number}",
            clip_name="", text=turn.text, audio=audio, delta_bytes=sizes, created_ms=turn.started_ms,
            first_delta_ms=turn.chunk_sent_ms[0] if sent else None, cancel_ms=cut_ms,
            done_ms=turn.completed_ms or turn.interrupted_ms, status=status,
            reason="turn_detected" if cut_ms is not None else None,
            sent_bytes=len(audio), late_bytes=sum(sizes[sent - late:sent]) if late else 0, late_deltas=late,
            delta_sent_ms=sent_ms, origin="turn_detection", instructions=instructions, stalled=turn.stalled))
    transcripts = list(record.transcripts) + [""] * len(record.caller_activity)
    kinds = list(record.caller_kinds) + [""] * len(record.caller_activity)
    for number, (started, ended) in enumerate(record.caller_activity):
        # an utterance the simulator's activity detection ended is what its phrases were (a backchannel, a
        # noise); one it recognised nothing in counts as a real turn (it answers every utterance)
        finished = ended is not None
        session.speech.append(SpeechRecord(
            item_id=f"gemini-caller-{index}-{number}", audio_start_ms=0, started_at_ms=started, stopped_at_ms=ended,
            transcript=(transcripts[number] or f"(caller turn {number + 1})") if finished else None, transcript_completed_ms=ended,
            caller_kind=(kinds[number] or "caller") if finished else None))
    return session


@dataclasses.dataclass(frozen=True, slots=True)
class GeminiSession:
    """One simulated connection as the Realtime simulator's sessions are offered: its ``record``."""

    record: SessionRecord


@dataclasses.dataclass
class GeminiRecords:
    """The simulator process's connections by call (``by_call``, as the Realtime simulator offers it), read once
    it was stopped (``aclose``); its ``port`` while it runs."""

    process: GeminiSimProcess
    connections: list[ConnectionRecord] = dataclasses.field(default_factory=list)

    @property
    def port(self) -> int:
        return self.process.port

    def by_call(self, call_sid: str) -> list[GeminiSession]:
        return [GeminiSession(session_record(record, i)) for i, record in enumerate(self.connections)
                if record.call_sid == call_sid]

    async def aclose(self) -> None:
        self.connections = await self.process.stop()


def report_figures(records: GeminiRecords, stack_metrics: dict | None) -> dict:
    """What the Gemini simulator saw, for the demo's report: connections, those that resumed a session (after
    a goAway or a drop), goAways sent, connections it refused and those it dropped with an internal error (1011),
    model turns, interruptions, late chunks sent after them."""
    connections = records.connections
    return {
        "connections": len(connections),
        "connections_resumed": sum(1 for r in connections if r.resumed),
        "go_aways_sent": sum(1 for r in connections if r.go_away_ms is not None),
        "refused": sum(1 for r in connections
                       if r.closed is not None and r.closed[0] not in (gp.CLOSE_NORMAL, gp.CLOSE_INTERNAL_ERROR)),
        "internal_errors": sum(1 for r in connections if r.closed is not None and r.closed[0] == gp.CLOSE_INTERNAL_ERROR),
        "turns": sum(len(r.turns) for r in connections),
        "interrupted_turns": sum(r.interrupts for r in connections),
        "late_chunks_sent": sum(r.late_chunks_sent for r in connections),
        "tool_calls": sum(len(r.tool_calls) for r in connections),
    }
