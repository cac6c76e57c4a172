"""The model worker process: one realtime-model WebSocket per call, between the arena and the vendor.

Owns the model sessions and applying what each call decides; the decisions live in voicecore/call/
(one driver per call, voicecore/call/driver.py: the spine's core alone or the turn-taking controller,
wrapped by the recorder when the node has a call store: its entries feed the record file when records are
on, and the store's summary and the live events either way). Every input of a call goes to its driver: model events,
caller audio from the inbound ring (batched, INBOUND_BATCH_MS per append), DTMF, ticks, the validator's
verdicts, knowledge-base answers, a reconnect, the carrier's stop. The driver's actions are applied by
what they touch (EFFECTS): the model socket, the rings and control block (writes the model's audio into
outbound rings tagged with its response; on barge-in cancels the tag and rings the pacer), the
validator over the bus, Twilio's REST API, the knowledge base. Never touches a telephony socket. Call
state is rebuilt from the arena (not from bus messages), so a restarted worker picks up every live call
where it stands.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import concurrent.futures
import gc
import json
import logging
import os
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zmq
from picows import (WSCloseCode, WSError, WSFrame, WSInvalidStatusError, WSListener, WSMsgType, WSProtocolError,
                    WSTransport, ws_connect)

from voicecore import timing
from voicecore.agent import settings as agent_settings
from voicecore.agent import tools as agent_tools
from voicecore.agent.flow import VOICEMAIL_MESSAGE
from voicecore.agent.spec import PythonTool
from voicecore.agent.tool_pool import ToolPool
from voicecore.agent.load import AgentError, load_configured_agent
from voicecore.agent.spec import AgentSpec
from voicecore.bus import messages
from voicecore.bus.transport import EVENTS, GATEWAY_INBOX, MODEL_INBOX, PACER_INBOX, RECORDER_INBOX, VALIDATOR_INBOX, Bus
from voicecore.call import controller as controller_mod
from voicecore.outbound import answer_gate, dtmf
from voicecore.call import core
from voicecore.call.actions import Action
from voicecore.call.build import driver_for_config, first_session_update
from voicecore.call.inbound_batching import InboundBatching
from voicecore.call.driver import QUIET_TICK_MS, Driver
from voicecore.call.record import CallRecorder
from voicecore.call.record_reader import RecordReader
from voicecore.config import Config, ConfigError, load_config, pem_text
from voicecore.gemini import transport as gemini_connect
from voicecore.gemini import driver as gemini_driver
from voicecore.gemini.transport import VertexTokens
from voicecore.gemini.vertex_tokens import TokenError
from voicecore.logs import run_loop, setup_logging
from voicecore.observe.events import CallEventTap, observe_chunks
from voicecore.privacy.records import RecordPrivacy
from voicecore.store import spool as store_spool
from voicecore.store.db import POSTGRES_PREFIXES, database_url_for
from voicecore.store.summary import RecordSummarizer, summary_to_json
from voicecore.realtime import events as rt
from voicecore.realtime.breaker import CircuitBreaker
from voicecore.realtime import transport as vendor_connect
from voicecore.realtime.vendor_errors import VendorFault, classify_close, classify_handshake, scan_server_text
from voicecore import fallback
from voicecore import reattach as reattach_rules
from voicecore.fallback.lines import agent_clip_number
from voicecore.shm import control as C
from voicecore.shm import rings
from voicecore.shm.arena import Arena
from voicecore.shm.follow import ArenaFollower
from voicecore.shm.warmup import warm_up_rings
from voicecore import standby
from voicecore.standby import Leadership
from workers.model.answer_wait import SEND_DTMF, AnswerWait, CalleeWords, agent_for_call
from workers.model.call_states import CallStates, state_as_stored
from workers.model.follow import FOLLOW_EVERY_S, Followers
from voicecore import http_client, prom_histogram
from voicecore import replay as replay_mod
from voicecore.call.record import RecordError
from voicecore.record import PART_SUFFIX, RecordFile, load_record, record_name
from voicecore.carriers.rest_common import RestResult
from voicecore.carriers import call_control
from voicecore.validate.watch import KnowledgeWatcher

log = logging.getLogger("voicecore.model")

RECONNECT_FIRST_S = 0.2  # the first reconnect after a drop, on average (a caller is waiting)
RECONNECT_MAX_S = 5.0  # failures in a row back off to this, so a failing vendor is not hammered
STABLE_CONNECTION_S = 10.0  # a connection that lasted this long starts the backoff over


def reconnect_delay_s(failures: int, jitter: float) -> float:
    """How long to wait before reconnect number ``failures`` (1 = the first after a drop): doubling from
    RECONNECT_FIRST_S up to RECONNECT_MAX_S, times ``jitter`` (0.5-1.5, random) so calls cut off together
    do not come back in one burst."""
    return min(RECONNECT_MAX_S, RECONNECT_FIRST_S * 2 ** max(0, failures - 1)) * jitter
MODEL_CONNECT_TIMEOUT_S = 5.0
# While the vendor refuses the node's configuration, a trial session this often (a spent quota topped up, a
# key rotated at the vendor's side): it costs no tokens, and callers in between get the failure policy at once.
VENDOR_TRIAL_EVERY_S = 30.0
BREAKER_POLL_S = 0.25  # a call waiting on an open breaker looks again this often
STAMP_EVERY_S = 0.1
LOOP_S = 0.02  # the call loop's period while a call is live (a frame)
IDLE_LOOP_S = timing.IDLE_HEARTBEAT_MS / 1000  # ... and with none: the idle heartbeat's period, woken at once by a call's start (the gateway's news)
VALIDATOR_CHECK_S = 0.25  # how often the serving validator's pid is read (a new one gets the open gates again)
MAX_GATES_KEPT = 16  # per call  # MODEL_ALIVE_NS / MODEL_EXPECTING of every served call (the pacer's hold line watches them)
LINE_PLAYED_WAIT_S = 15.0  # a hang-up or transfer after a fallback line waits at most this long for it to play
# The largest model message accepted, whole or in fragments. A realtime vendor's events are small (an audio
# delta is a few KiB; session.updated with long instructions and tools stays far below this); a bigger one
# is the vendor misbehaving, and parsing it would stall every call this worker serves (the chaos bench's
# 4 MiB delta to 100 sessions: 2.8 s of dead air mid-answer). It closes that call's session with 1009, and
# the call reconnects as after any drop.
MAX_MODEL_MESSAGE_BYTES = 2**20
INBOUND_BATCH_NS = timing.INBOUND_BATCH_MS * 1_000_000
QUIET_TICK_NS = QUIET_TICK_MS * 1_000_000
PUMP_HELD_NS = 2 * int(LOOP_S * 1e9)  # a loop held this long by the model's messages pumps the calls between them
# A new call's slot is published a moment before the gateway's CallStarted for it is sent: its session waits for
# that message (an outbound call's callee and fields are in it) this long at most. Generous: a worker that
# stalled (a loaded machine) reads a batch of them late, and only a lost message ever waits this long.
STARTED_MESSAGE_WAIT_NS = 2_000_000_000
ANSWER_POLL_S = 0.02  # how often a placed call's session looks whether its answer gate let the agent speak
# picows logs every connection at INFO; the worker logs its calls itself.
ws_log = logging.getLogger("voicecore.model.ws")
ws_log.setLevel(logging.WARNING)
REST_ATTEMPTS = 3
REST_RETRY_DELAY_S = 0.5
DIGITS_WAIT_S = 15.0  # an IVR's keys (their REST request and retries, or their tones) before the agent starts anyway
TONES_PLAYED_MARGIN_S = 0.3  # in-band tones: the pacer's lead and the carrier's playout after their length
TONES_WAIT_S = 60.0  # the model's in-band keys (send_dtmf): the longest wait for them to be written and played
STATS_EVERY_S = 1.0
# Call records are encoded and written here, one at a time (threads encoding side by side would only
# fight over the GIL): each call's batches in order, then its finish; its thread finishes pending records
# before the process exits.
RECORD_WRITER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-writer")
OBSERVE_EVERY_S = 0.1  # how fresh a live observer's view is, at one bus message for all the calls
MAX_SUMMARY_BYTES = 56 * 1024  # a call's summary in one bus message (64 KiB); a longer call's record is read instead
RECORD_HAND_OFF_S = 1.0  # a live call's record holds at most about this much in memory
RECORD_FINISH_WAIT_S = 30.0  # stopping: how long to wait for the records of calls in progress


MAX_TOOLS_RUNNING = 256  # tool runs in flight in this worker, all calls together; more wait their turn

RENEWAL_RETRY_S = 5.0  # a renewal's session that could not be opened is tried again this much later

def tool_pool_for(config: Config, agent: AgentSpec) -> ToolPool | None:
    """The processes the agent's Python tools run in; None for an agent without Python tools."""
    entries = [fn.tool.entry for fn in agent.flow.functions.values() if isinstance(fn.tool, PythonTool)]
    if not entries:
        return None
    return ToolPool(agent.directory, entries, processes=config.tool_processes, per_call=config.tool_runs_per_call,
                    log_level=config.log_level, log_format=config.log_format)


def renew_from_s(limit_s: float) -> float:
    """A session this old gets a renewal opened: five minutes before the vendor's limit (a quarter of a
    short one), so a pause in the conversation is almost surely found before the limit."""
    return limit_s - min(300.0, limit_s / 4)


def renew_by_s(limit_s: float) -> float:
    """No pause came: the renewal takes over anyway this close to the limit (the vendor would end the
    session mid-sentence a moment later)."""
    return limit_s - min(15.0, limit_s / 20)


@dataclasses.dataclass(eq=False)
class SessionRenewal:
    """A session opened to replace a call's session near its vendor's limit, until it takes over."""

    started_ns: int
    opened_ns: int = 0  # when its socket connected: the new session's vendor clock
    transport: WSTransport | None = None
    received: list[str] = dataclasses.field(default_factory=list)  # what it said before it took over
    task: asyncio.Task | None = None
    failed: bool = False

    @property
    def ready(self) -> bool:
        """Connected and greeted by the vendor (session.created): it can take the call over."""
        return self.transport is not None and any('"session.created"' in text for text in self.received)


def call_id_for_model(config: Config, call_sid: str) -> str | None:
    """The CallSid to send on the model socket (X-Voicecore-Call), or None: nothing that identifies the
    call or the caller goes to a model endpoint unless `send_call_id_to_vendor` says so. The built-in
    simulator that `voicecore up` starts when no realtime_url and no key are set is ours, not a vendor: it gets it
    (it matches its sessions to calls by it). The demo, the bench and the tests turn the setting on for
    the simulator they start themselves."""
    builtin_simulator = not config.realtime_url and not config.realtime_api_key
    return call_sid if config.send_call_id_to_vendor or builtin_simulator else None


def rebuild_driver(record_dir: str, call_sid: str, finished: bool = False) -> tuple[Driver, str] | None:
    """The driver of a live call a dead worker left, rebuilt from its newest part file, and that file's name;
    None when there is none to read (the call is then resumed without its history). ``finished``: from its
    newest finished record instead (a call this worker served until its gateway died, re-attached since)."""
    directory = Path(record_dir)
    parts = [directory / (record_name(call_sid, n) + ("" if finished else PART_SUFFIX)) for n in range(1, 64)]
    existing = [part for part in parts if part.exists()]
    if not existing:
        return None
    part = existing[-1]
    try:
        header, entries, _complete = load_record(part)
        if header.get("call_sid") != call_sid:
            raise RecordError("the part file names another call")
        started = time.perf_counter()
        driver = replay_mod.rebuild(replay_mod.driver_for_record(directory, header), entries)
    except (RecordError, OSError, KeyError, TypeError, ValueError) as exc:
        log.warning("call %s: cannot rebuild the call from %s (%s); resuming it without its history", call_sid, part.name, exc)
        return None
    log.info("call %s: rebuilt from %s (%d entries) in %.1f ms", call_sid, part.name, len(entries),
             (time.perf_counter() - started) * 1000)
    return driver, part.name


REATTACH_WAIT_S = 30.0  # a call cut off with its gateway is re-attached within this, or ended
REATTACH_RECORD_WAIT_S = 2.0  # a re-attached call waits this long at most for its record to be finished
STATE_LOOKUP_TIMEOUT_S = 1.0  # a new call waits this long at most for the store to say whether it was served elsewhere


@dataclasses.dataclass(slots=True)
class CutCall:
    """A call whose gateway died under it: its finished session, when, its record's finishing (a future of
    the writer thread), and whether a caller was waiting on an answer then."""

    session: CallSession
    at_s: float
    record: concurrent.futures.Future | None
    mid_answer: bool


class CallSession:
    """One live call: its model WebSocket, its driver, and the effects of what the driver decides."""

    def __init__(self, worker: ModelWorker, slot: int, generation: int, call_sid: str, resumed: bool,
                 reattached: CutCall | None = None) -> None:
        self.worker = worker
        self.slot = slot
        self.generation = generation
        self.call_sid = call_sid
        ctrl = worker.arena.ctrl[slot]
        first_tag = int(ctrl[C.NEXT_TAG]) or 1
        # One driver per call, fed every input. call_control "spine": the mechanism core alone (barge-in on
        # the model's speech_started), behind SpineDriver. "turns": the turn-taking controller around it
        # (docs/explanation/turn-taking.md). With a record_dir the recorder wraps either and records every
        # input (INV-REPLAY).
        config = worker.config
        agent = worker.agent
        # A call the node placed: the agent's texts get its fields, its first words wait for who answered.
        self.answer_wait: AnswerWait | None = None
        placed = worker.outbound_started.get((slot, generation))
        if placed is not None and not resumed:
            agent = agent_for_call(agent, placed)
            self.answer_wait = AnswerWait(call_sid, agent)
            answered_by = worker.carrier_amd_waiting.pop((slot, generation), "")
            if answered_by:
                self.answer_wait.on_carrier_amd(answered_by, time.monotonic_ns())
        # A placed call that may press keys on an IVR (on_ivr = "dtmf"): where the carrier has no send-DTMF request
        # the tones play on the stream under a tag of their own, taken before the driver's first (whose record and
        # replay then start after it, as for any first tag the arena gave).
        self.tone_tag = 0
        self.digits_task: asyncio.Task | None = None
        if self.answer_wait is not None and agent.outbound_on_ivr == answer_gate.DTMF and agent.outbound_ivr_digits:
            self.tone_tag = first_tag
            first_tag += 1
        self.ivr_digits = agent.outbound_ivr_digits
        self.dtmf_tool = placed is not None and agent.outbound_dtmf_tool  # the model may press keys (send_dtmf)
        # The law of the call's frames, as the gateway claimed the slot (CODEC): an A-law carrier stream passed
        # through (alaw_passthrough) is A-law all the way, so the session is opened in A-law both ways.
        self.audio_format = "pcma" if int(ctrl[C.CODEC]) == C.CODEC_ALAW else "pcmu"
        decider: Driver
        if worker.vendor == gemini_driver.VENDOR:  # Gemini Live: its own driver (voicecore/gemini/driver.py)
            decider = gemini_driver.driver_for_agent(agent, call_sid, model=worker.gemini_model, first_tag=first_tag,
                                                     greet=not resumed, gate_policy=config.gate_policy,
                                                     audio_format=self.audio_format,
                                                     by_words=config.call_control != "spine",
                                                     gate_language=config.gate_language,
                                                     flow_overrides=agent_settings.flow_overrides(config),
                                                     knowledge=worker.gemini_knowledge)
        else:
            decider = driver_for_config(config, agent, call_sid, first_tag=first_tag, greet=not resumed,
                                        audio_format=self.audio_format, placed=placed is not None)
        # A call this worker took over (a worker died under it): its driver as the dead worker left it, rebuilt
        # from that worker's part file (INV-REPLAY), so the call goes on where it stood instead of starting over.
        self.resumed = resumed or reattached is not None
        self.rebuilt_from: str | None = None
        self.kept_driver = False  # re-attached with the driver this worker kept in memory
        if reattached is not None:
            # Its gateway died under it and the carrier re-attached it (voicecore/reattach.py). This worker served
            # it until then: with records, the record it finished when the arena went is the call as it stood
            # (and the new record continues it); without, the driver it kept in memory is.
            rebuilt = None
            if worker.writes_records:
                if reattached.record is not None:
                    concurrent.futures.wait([reattached.record], timeout=REATTACH_RECORD_WAIT_S)
                rebuilt = rebuild_driver(config.record_dir, call_sid, finished=True)
            if rebuilt is not None:
                decider, self.rebuilt_from = rebuilt
            else:
                decider, self.kept_driver = reattached.session.decider, True
            decider.core.next_tag = max(decider.core.next_tag, first_tag)
        elif resumed and worker.writes_records:
            # what the standby followed while it waited (workers/model/follow.py), else the whole part file
            rebuilt = worker.followers.take(call_sid) if worker.followers is not None else None
            if rebuilt is not None:
                worker.counters["calls_taken_over_followed"] += 1
                log.info("call %s: rebuilt from %s (followed while standing by)", call_sid, rebuilt[1])
            else:
                rebuilt = rebuild_driver(config.record_dir, call_sid)
            if rebuilt is not None:
                decider, self.rebuilt_from = rebuilt
                decider.core.next_tag = max(decider.core.next_tag, first_tag)  # never reuse a tag the arena saw
        # A call that starts here without a driver or record of its own may be one another node served until its
        # gateway died (re-attached here by its carrier): the store says, before its model session opens, and its
        # state from there is restored (workers/model/call_states.py). A turns driver writes its state as it goes.
        self.state_lookup: concurrent.futures.Future | None = None
        self.restored: dict | None = None
        self.state_key: tuple | None = None
        self.writes_state = worker.call_states is not None and hasattr(decider, "call_state")
        if self.writes_state and not self.resumed and placed is None:
            assert worker.call_states is not None
            self.state_lookup = worker.call_states.lookup(call_sid)
        # Gemini: the driver is asked (a query, not an input) when its session should move to a new connection
        self.gemini = decider if isinstance(decider, gemini_driver.GeminiDriver) else None
        self.planned_reconnect = False  # the socket is being closed to resume the session on a new one
        self.decider = decider
        # The recorder is also kept as such for its record's plumbing only (header, hand-offs to the writer
        # thread): inputs go to self.driver. It wraps the driver whenever the node has a call store, with or
        # without a record file: its entries, as the agent's storage tier keeps them, are what the store's
        # summary and the observers' events are made of.
        self.recorder = CallRecorder(decider, keep_caller_audio=config.record_caller_audio,
                                     privacy=worker.record_privacy) if worker.stores_calls else None
        if self.recorder is not None and self.rebuilt_from:
            self.recorder.header["resumed_from"] = self.rebuilt_from  # the replay rebuilds from it first
        if self.recorder is not None and placed is not None and placed.direction == "outbound":
            # the store keeps whom a placed call called: an opt-out during it puts this number on the do-not-call list
            self.recorder.header.update(direction="outbound", callee=placed.callee)
        self.driver: Driver = self.recorder if self.recorder is not None else decider
        # The live observers' events (voicecore/observe/events.py), from the same entries as the record;
        # shipped to the recorder every OBSERVE_EVERY_S (ModelWorker.run). One walk over the entries as they
        # are recorded (voicecore/call/record_reader.py) feeds them and the store's summary alike.
        self.tap: CallEventTap | None = None
        self.summarizer: RecordSummarizer | None = None  # what the store keeps of the call, built as it goes
        if self.recorder is not None:
            self.tap = CallEventTap(self.recorder.header, resumed=resumed)
            self.summarizer = RecordSummarizer(self.recorder.header)
            self.recorder.observer = RecordReader(self.tap, self.summarizer).feed
        # Streamed: ModelWorker.run hands the entries of the last second to the writer thread, which appends
        # them to the call's part file (only the writer touches record_file).
        # Without a record file (record_calls false, or a database_url and no record_dir) the entries handed
        # off are dropped, and the summary goes to the store spool when the call ends (_spool_summary).
        self.record_file: RecordFile | None = None
        self.record_failed = False
        self.spool_events: list[tuple[int, str, dict]] | None = None if worker.writes_records else []
        self.spool_started_at = 0.0
        self.spool_name: str | None = None  # this session's spool file (and store source), when it has one
        if self.recorder is not None and not worker.writes_records:
            try:
                self.spool_name = store_spool.spool_name(call_sid, int(time.time() * 1000))
            except ValueError as exc:
                log.warning("call %s: its summary cannot be spooled for the store: %s", call_sid, exc)
        self.next_spool_part_s = time.monotonic() + store_spool.PART_EVERY_S
        self.spool_part_failed = False
        if self.recorder is not None:
            if worker.writes_records:
                self.record_file = RecordFile(worker.config.record_dir, self.recorder.header)
                self.recorder.sink = self._hand_off_record
            else:
                self.recorder.sink = self._drop_entries
        self.started = False
        self.pending: collections.deque[tuple[int, int, bytes]] = collections.deque()  # ring full: (tag, index, frame)
        self.inbound = np.zeros(timing.FRAME_BYTES * 64, dtype=np.uint8)
        self.task: asyncio.Task | None = None
        self.transport: WSTransport | None = None
        self.close_code: int | None = None
        self.next_inbound_ns = 0
        self.batching = InboundBatching()
        # The agent's own lines (voicecore/fallback/lines.py): its row of the pacer's table, whatever its language.
        ctrl[C.HOLD_CLIP] = agent_clip_number(fallback.HOLD)
        self.model_lost_reported = False  # the driver was told the model is gone (until a socket opens again)
        self.ticked_ns = 0  # the driver's last tick: a quiet driver is ticked every QUIET_TICK_NS, not every loop
        self.configured = False  # this socket's session acknowledged its first session.update
        # Session renewal: the vendor ends a session at realtime_session_limit_s; a longer call gets a new one at
        # a pause in the conversation before that (SessionRenewal), restored as after a reconnect.
        self.session_opened_ns = 0  # when the session in use opened (its vendor clock)
        self.renewal: SessionRenewal | None = None
        self.next_renewal_ns = 0  # a renewal that failed is tried again from here
        self.renewals = 0
        self.caller_speaking = False  # the model's VAD heard the caller start and not yet stop
        self.tools_running = 0
        self.refusal: VendorFault | None = None  # the vendor refused the node's configuration on this socket
        self.gate_messages: dict[int, list[object]] = {}  # per gated tag, what the validator was sent
        self.gates_resent: set[int] = set()  # tags sent again to the validator serving now
        self.cut_off = False  # taken over in the middle of an answer (a live tag the dead worker never ended)
        if resumed:
            self.cut_off = self._end_orphaned_tags()
        elif reattached is not None:
            self.cut_off = reattached.mid_answer
        self.reattached = reattached is not None

    def alive(self) -> bool:
        ctrl = self.worker.arena.ctrl[self.slot]
        return ctrl[C.STATE] == C.SLOT_ACTIVE and ctrl[C.GENERATION] == self.generation

    def _end_orphaned_tags(self) -> bool:
        # A previous worker died mid-response: its frames already in the ring may play out, but nobody
        # will end that tag, so close it now (the pacer marks its end instead of counting a dry spell).
        arena = self.worker.arena
        ctrl = arena.ctrl[self.slot]
        orphaned = False
        for row in range(C.TAG_TABLE_SIZE):
            base = C.TAG_TABLE_BASE + row * C.TAG_ROW_WORDS
            tag = int(ctrl[base + C.TAG_ROW_TAG])
            if tag and ctrl[base + C.TAG_ROW_STATE] == C.TAG_LIVE:
                rings.outbound_push_end(arena.ctrl, arena.out_meta, self.slot, tag, 0)
                rings.tag_done(arena.ctrl, self.slot, tag)
                orphaned = True
        return orphaned

    def playout(self) -> core.Playout:
        ctrl = self.worker.arena.ctrl[self.slot]
        return core.Playout(
            played_tag=int(ctrl[C.PLAYED_TAG]),
            played_frames=int(ctrl[C.PLAYED_FRAMES]),
            played_at_ns=int(ctrl[C.PLAYED_AT_NS]),
            sent_tag=int(ctrl[C.SENT_TAG]),
            sent_frames=int(ctrl[C.SENT_FRAMES]),
            carrier_empty_at_ns=int(ctrl[C.CARRIER_EMPTY_AT_NS]),
            cleared_at_ns=int(ctrl[C.CLEAR_QUEUED_NS]),
        )

    async def run(self) -> None:
        """Keep this call's model socket open while the call lives (reconnecting after a drop). A vendor that
        refuses the node's configuration (vendor_errors: fatal) ends the call's wait at once: its failure policy."""
        worker = self.worker
        endpoint = worker.endpoint_for(self.call_sid)
        breaker = worker.breaker_for(endpoint.url)
        failures = 0
        # A call the node placed opens its model session once the answer gate let the agent speak: none is held
        # open (and billed) while a voicemail greets, and none at all for one that is hung up on.
        listening = None
        if self.answer_wait is not None and self.answer_wait.waiting:
            listening = asyncio.ensure_future(self._listen_to_callee(endpoint))  # held: a bare task may be collected
        while self.answer_wait is not None and self.answer_wait.waiting and self.alive():
            await asyncio.sleep(ANSWER_POLL_S)
        if listening is not None and not listening.done():
            listening.cancel()  # still connecting when the wait ended
        if self.answer_wait is not None and self.answer_wait.words is not None:
            self.answer_wait.words.close()
        if self.answer_wait is not None and (self.answer_wait.waiting
                                             or self.answer_wait.gate.decision.action == answer_gate.HANG_UP):
            return  # the call ended before its verdict, or it was a voicemail to hang up on
        if self.digits_task is not None:
            # an IVR: its keys first (sent, or their tones played), then the agent's session opens and it starts
            await asyncio.wait({self.digits_task}, timeout=DIGITS_WAIT_S)
            if not self.alive():
                return
        if self.state_lookup is not None:
            await self._restore_from_store(self.state_lookup)
        while self.alive() and not self.driver_ended():
            connected_at = 0.0
            if breaker.is_fatal:
                worker.counters["calls_refused_by_vendor"] += 1
                log.warning("call %s: no model session (the vendor refused the configuration): failure policy", self.call_sid)
                self.model_lost("vendor_refused", fatal=True)
                return
            if not breaker.allow(time.monotonic()):
                if not self.started:
                    # A new call while the vendor is known to be down: its failure policy at once.
                    worker.counters["calls_refused_by_breaker"] += 1
                    log.warning("call %s: the model vendor's circuit breaker is open; failure policy", self.call_sid)
                    self.model_lost("breaker_open", fatal=True)
                    return
                self.model_lost("breaker_open")
                # look again soon: the moment the trial session succeeds, every waiting call reconnects
                await asyncio.sleep(min(BREAKER_POLL_S, max(0.05, breaker.retry_in(time.monotonic()))) * random.uniform(1.0, 1.3))
                continue
            if worker.vertex_tokens is not None:
                # Vertex AI: a fresh access token for every connection (a reconnect an hour on needs a new one);
                # the refresh runs in its own thread, and a failure is this call's failed connection
                try:
                    await worker.vertex_tokens.token(timeout_s=MODEL_CONNECT_TIMEOUT_S)
                except TokenError as exc:
                    worker.counters["model_connect_failures"] += 1
                    breaker.failure(time.monotonic())
                    log.warning("call %s: no Vertex AI access token (%s): model connection failed", self.call_sid, exc,
                                extra={"problem": "vendor"})
                    self.model_lost("vertex_token")
                    failures += 1
                    await asyncio.sleep(reconnect_delay_s(failures, random.uniform(0.5, 1.5)))
                    continue
                endpoint = worker.endpoint_for(self.call_sid)
            try:
                transport, _socket = await ws_connect(
                    lambda: ModelSocket(self), endpoint.url, extra_headers=endpoint.headers, proxy=endpoint.proxy,
                    max_frame_size=MAX_MODEL_MESSAGE_BYTES, websocket_handshake_timeout=MODEL_CONNECT_TIMEOUT_S,
                    logger_name=ws_log)
            except WSInvalidStatusError as exc:  # the vendor answered the upgrade with an HTTP error
                status = int(exc.response.status) if exc.response is not None else 0
                fault = classify_handshake(status, exc.raw_body)
                if fault.fatal:
                    worker.vendor_refused(endpoint, fault)
                    continue  # the loop's first check ends the call's wait
                worker.counters["model_connect_failures"] += 1
                breaker.failure(time.monotonic())
                log.warning("call %s: model connection refused: HTTP %d", self.call_sid, status)
                self.model_lost(f"http_{status}")
            except (OSError, WSError, TimeoutError) as exc:
                worker.counters["model_connect_failures"] += 1
                breaker.failure(time.monotonic())
                log.warning("call %s: model connection failed: %s", self.call_sid, type(exc).__name__)
                self.model_lost(type(exc).__name__)
            else:
                connected_at = time.monotonic()
                if self.refusal is None:  # the socket's first events may already have refused the configuration
                    breaker.success(connected_at)
                await self._serve(transport)
                if not self.alive() or self.driver_ended():
                    return
                if self.refusal is not None:  # an error or a close that refused the configuration (reported)
                    self.refusal = None
                    continue  # the loop's first check ends the call's wait
                if self.planned_reconnect:  # Gemini's goAway: the session resumes on a new connection at once
                    self.planned_reconnect = False
                    worker.counters["sessions_resumed_after_go_away"] += 1
                    failures = 0
                    continue
                log.warning("call %s: model connection closed (%s); reconnecting", self.call_sid, self.close_code)
                self.model_lost(f"closed_{self.close_code}")
            failures = 1 if connected_at and time.monotonic() - connected_at >= STABLE_CONNECTION_S else failures + 1
            await asyncio.sleep(reconnect_delay_s(failures, random.uniform(0.5, 1.5)))

    async def _serve(self, transport: WSTransport) -> None:
        """Until the call's model socket is gone: this one, then each session that renewed it."""
        while True:
            try:
                await transport.wait_disconnected()
            except WSProtocolError as exc:  # the vendor broke the framing (a message over the cap: 1009)
                if transport is self.transport:
                    self.worker.counters["model_protocol_errors"] += 1
                    self.close_code = int(exc.code)
                    log.warning("call %s: the model vendor broke the WebSocket protocol (%s)", self.call_sid,
                                self.close_code)
            except Exception:  # a handler raised: picows closed the socket (1011); this call reconnects
                if transport is self.transport:
                    self.worker.counters["model_handler_errors"] += 1
                    log.exception("call %s: model event handling failed; reconnecting", self.call_sid)
            if self.transport is not None and self.transport is not transport:
                transport = self.transport  # renewed: the new session's socket is the call's now
                continue
            self.transport = None
            return

    async def _restore_from_store(self, lookup: concurrent.futures.Future) -> None:
        """Whether another node (or this one, before its stream was lost) served this call: its state, if so, is
        restored when the session opens (``on_connected``). A store slower than STATE_LOOKUP_TIMEOUT_S or failing
        starts the call afresh (it is most likely new)."""
        try:
            found = await asyncio.wait_for(asyncio.wrap_future(lookup), STATE_LOOKUP_TIMEOUT_S)
        except asyncio.TimeoutError:
            self.worker.counters["call_state_lookups_timed_out"] += 1
            log.warning("call %s: the store did not say in %.1f s whether another node served it; starting it afresh",
                        self.call_sid, STATE_LOOKUP_TIMEOUT_S, extra={"problem": "store"})
            return
        if found is None:
            return
        self.restored = found["state"]
        self.resumed = True
        self.worker.counters["calls_restored_from_store"] += 1
        log.info("call %s: re-attached here; its state restored from the store (written by %s %.1f s ago)",
                 self.call_sid, found["node"], max(0.0, time.time() - float(found["updated_at"])))

    def save_state(self) -> None:
        """This call's state to the store when it changed (every RECORD_HAND_OFF_S at most): what another node
        restores if a carrier re-attaches the call there (workers/model/call_states.py)."""
        states = self.worker.call_states
        if states is None or not self.writes_state or not self.started or not self.alive():
            return
        decider: Any = self.decider
        key = decider.call_state_key()
        if key == self.state_key:
            return
        self.state_key = key
        states.save(self.call_sid, state_as_stored(decider.call_state(), self.worker.record_privacy))

    def driver_ended(self) -> bool:
        """The call's driver gave up on it (the failure policy): no model session is wanted any more."""
        return bool(getattr(self.driver, "ended", False))

    def model_lost(self, reason: str, fatal: bool = False) -> None:
        """Tell the driver the model is gone (it decides the hold line and the failure policy)."""
        self.model_lost_reported = True
        self._apply(self.driver.on_model_lost(time.monotonic_ns(), reason, fatal))

    def on_connected(self, transport: WSTransport) -> None:
        """The model socket is open: configure the session before any server event is handled."""
        self.transport = transport
        self.model_lost_reported = False
        self.configured = False
        self.refusal = None
        self.session_opened_ns = time.monotonic_ns()
        self.caller_speaking = False
        if self.renewal is not None:  # reconnected after a drop: the new session is young, a renewal is moot
            renewal, self.renewal = self.renewal, None
            if renewal.transport is not None and not renewal.transport.is_close_frame_sent:
                renewal.transport.send_close(WSCloseCode.OK)
                renewal.transport.disconnect()
        if not self.started:
            self.started = True
            if (self.rebuilt_from or self.kept_driver) and self.reattached:  # on a new stream: its old audio never plays
                self._apply(self.driver.reopen(time.monotonic_ns(), True))
            elif self.rebuilt_from:  # the call's state is back: its new session gets what the old one had
                self._apply(self.driver.reopen(time.monotonic_ns()))
            elif self.restored is not None:  # re-attached here: its state from the store, written where it was
                try:
                    self._apply(self.driver.resume(time.monotonic_ns(), False, self.restored))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("call %s: its state from the store cannot be restored (%s); going on without it",
                                self.call_sid, exc, extra={"problem": "store"})
                    self.restored = None
                    self._apply(self.driver.resume(time.monotonic_ns(), True))
            elif self.resumed:  # taken over without a record: configured, never greeted twice
                self._apply(self.driver.resume(time.monotonic_ns(), self.cut_off))
            elif self.answer_wait is not None and self.answer_wait.gate.decision.action == answer_gate.MESSAGE:
                # a voicemail after its beep: the agent's message, scripted and gated, then the call ends
                self._apply(self.driver.start(time.monotonic_ns(), VOICEMAIL_MESSAGE))
            else:
                self._apply(self.driver.start(time.monotonic_ns()))
        else:  # reconnected: configure the new session (no second greeting)
            self._apply(self.driver.reopen(time.monotonic_ns()))
        self.next_inbound_ns = time.monotonic_ns() + INBOUND_BATCH_NS

    def on_model_text(self, text: str) -> None:
        """One server event from the model socket. A refusal of the node's configuration in it (an error
        event, a failed response: vendor_errors) closes the socket after the driver saw the event."""
        fault = None
        if self.gemini is not None:  # Gemini says no with a close (on_model_close), never in a message
            self.configured = self.configured or self.gemini.configured
        elif rt.AUDIO_DELTA_MARK not in text[:64]:  # the bulk of a call's events, never an error: not scanned
            fault = scan_server_text(text, configuring=not self.configured)
            if not self.configured and '"session.updated"' in text:
                self.configured = True  # the vendor accepted the session.update: later errors answer other events
            if "input_audio_buffer.speech_st" in text:
                event = rt.parse_server_event(text)
                if isinstance(event, (rt.SpeechStarted, rt.SpeechStopped)):
                    self.caller_speaking = isinstance(event, rt.SpeechStarted)
        self._apply(self.driver.on_model_event(text, time.monotonic_ns(), self.playout()))
        if fault is not None and fault.fatal and self.refusal is None:
            self.refused(fault)
            if self.transport is not None:
                self.transport.send_close(WSCloseCode.OK)
                self.transport.disconnect()
        if not self.alive() and self.transport is not None:
            self.transport.disconnect()

    def socket_text(self, transport: WSTransport, text: str) -> None:
        """A text message from one of this call's sockets: the session in use gets it; a renewal's session
        keeps what it says until it takes over; a socket already replaced has nothing more to say."""
        if transport is self.transport:
            self.on_model_text(text)
        elif self.renewal is not None and transport is self.renewal.transport:
            fault = scan_server_text(text, configuring=True)
            if fault is not None and fault.fatal:  # the vendor refuses the configuration now: the call keeps its session
                self.renewal.failed = True
                self.worker.vendor_refused(self.worker.endpoint_for(self.call_sid), fault)
                transport.send_close(WSCloseCode.OK)
                transport.disconnect()
                return
            self.renewal.received.append(text)

    # --- session renewal ------------------------------------------------------------------------------
    def renewal_due(self, now_ns: int) -> tuple[bool, bool]:
        """(a new session should be opened now, the swap may wait no longer for a pause)."""
        if not self.session_opened_ns or self.transport is None:
            return False, False
        limit_s = self.worker.config.realtime_session_limit_s
        age_s = (now_ns - self.session_opened_ns) / 1e9
        return age_s >= renew_from_s(limit_s), age_s >= renew_by_s(limit_s)

    def at_pause(self, now_ns: int) -> bool:
        """Nothing would be cut by a new session now: the caller waits on no answer, none of the agent's audio
        or fallback lines is queued or playing, the caller is not speaking, no tool result is owed."""
        row = self.worker.arena.ctrl[self.slot]
        return (not self.driver.awaiting_model() and not self.pending and not self.caller_speaking
                and self.tools_running == 0 and row[C.OUT_HEAD] == row[C.OUT_TAIL]
                and row[C.CARRIER_EMPTY_AT_NS] <= now_ns and row[C.FALLBACK_PLAYING] == 0
                and row[C.FALLBACK_PENDING] == 0 and row[C.FALLBACK_SEEN_SEQ] == row[C.FALLBACK_SEQ])

    def tend_renewal(self, now_ns: int) -> None:
        """Every loop: open the renewal's session when the one in use nears its limit, and hand the call over
        to it at the first pause (or at the last moment, should no pause come)."""
        renewal = self.renewal
        if renewal is None and now_ns - self.session_opened_ns < self.worker.renew_from_ns:
            return  # every loop of every call: nothing is due before the session is this old
        opening, forced = self.renewal_due(now_ns)
        if renewal is None:
            if opening and now_ns >= self.next_renewal_ns and not self.driver_ended():
                self.renewal = SessionRenewal(now_ns)
                self.renewal.task = asyncio.get_running_loop().create_task(self._open_renewal(self.renewal))
            return
        if renewal.failed:
            self.renewal = None
            self.next_renewal_ns = now_ns + int(RENEWAL_RETRY_S * 1e9)
            return
        if renewal.ready and (forced or self.at_pause(now_ns)):
            self._take_over(renewal, now_ns, forced)

    async def _open_renewal(self, renewal: SessionRenewal) -> None:
        worker = self.worker
        endpoint = worker.endpoint_for(self.call_sid)
        try:
            transport, _socket = await ws_connect(
                lambda: ModelSocket(self, renewal=True), endpoint.url, extra_headers=endpoint.headers,
                proxy=endpoint.proxy, max_frame_size=MAX_MODEL_MESSAGE_BYTES,
                websocket_handshake_timeout=MODEL_CONNECT_TIMEOUT_S, logger_name=ws_log)
        except (OSError, WSError, TimeoutError) as exc:
            worker.counters["session_renewals_failed"] += 1
            log.warning("call %s: the renewal's model session could not be opened (%s); trying again in %g s",
                        self.call_sid, type(exc).__name__, RENEWAL_RETRY_S)
            renewal.failed = True
            return
        try:
            await transport.wait_disconnected()
        except Exception:  # the renewal's socket broke before or after the hand-over: the call's own loop decides
            pass
        if self.renewal is renewal:  # closed before it took over: try again later
            worker.counters["session_renewals_failed"] += 1
            renewal.failed = True

    def on_renewal_connected(self, transport: WSTransport) -> None:
        if self.renewal is None or self.transport is None:  # the call ended or lost its socket meanwhile
            transport.send_close(WSCloseCode.OK)
            transport.disconnect()
            return
        self.renewal.transport = transport
        self.renewal.opened_ns = time.monotonic_ns()

    def _take_over(self, renewal: SessionRenewal, now_ns: int, forced: bool) -> None:
        """The renewal's session becomes the call's: configured and given the conversation so far (the
        driver's reopen, as after a reconnect), then what it already said; the old one is closed."""
        old = self.transport
        self.renewal = None
        self.transport = renewal.transport
        self.configured = False
        self.refusal = None
        old_age_s = (now_ns - self.session_opened_ns) / 1e9
        self.session_opened_ns = renewal.opened_ns
        self.caller_speaking = False
        self.renewals += 1
        self.worker.counters["session_renewals"] += 1
        if forced:
            self.worker.counters["session_renewals_forced"] += 1
        self._apply(self.driver.reopen(now_ns))
        for text in renewal.received:
            self.on_model_text(text)
        if old is not None and not old.is_close_frame_sent:
            old.send_close(WSCloseCode.OK)
            old.disconnect()
        log.info("call %s: model session renewed after %.0f s%s", self.call_sid, old_age_s,
                 " (no pause came before the vendor's limit)" if forced else " at a pause")

    def on_model_close(self, code: int, reason: str) -> None:
        """The vendor closed the socket: a close that refuses the configuration (4000) is reported at once."""
        self.close_code = code
        fault = gemini_connect.classify_close(code, reason) if self.gemini is not None else classify_close(code, reason)
        if fault is not None and self.refusal is None:
            self.refused(fault)

    def refused(self, fault: VendorFault) -> None:
        """The vendor refused the node's configuration on this call's socket. The worker hears it now, not
        when run() sees the socket closed: a call whose caller hangs up on the apology first would otherwise
        never report it, and the next call would dial the vendor to meet the same refusal."""
        self.refusal = fault
        self.worker.vendor_refused(self.worker.endpoint_for(self.call_sid), fault)

    def pump_inbound(self, now_ns: int) -> None:
        """Every INBOUND_BATCH_MS (from the worker's loop): the caller audio that arrived, to the model."""
        if self.answer_wait is not None and not self.answer_wait.reported:
            self._wait_for_answer(now_ns)
            return
        if self.transport is None or now_ns < self.next_inbound_ns:
            return
        arena = self.worker.arena
        n = rings.inbound_pop(arena.ctrl, arena.in_meta, arena.in_payload, self.slot, self.inbound, 64)
        audio = self.inbound[: n * timing.FRAME_BYTES].tobytes() if n else b""
        # 100 ms while the caller talks or is long quiet, 40 ms where their turn may be ending
        # (voicecore/call/inbound_batching.py): the vendor's VAD ends the turn on the audio it was sent.
        self.next_inbound_ns = self.batching.next_due_ns(now_ns, audio)
        if self.next_inbound_ns - now_ns < INBOUND_BATCH_NS:
            self.worker.counters["inbound_short_batches"] += 1
        if n:
            # Where playout stood is read only for a record (its WAV places the agent's audio with it).
            playout = self.playout() if self.recorder is not None else None
            self._apply(self.driver.on_caller_audio(audio, time.monotonic_ns(), playout))

    async def _listen_to_callee(self, endpoint: vendor_connect.Endpoint) -> None:
        """The listening session that gives the answer gate the callee's words (workers/model/answer_wait.py).
        Without it (the vendor unreachable or refusing) the gate decides on the audio alone."""
        model = self.worker.config.transcription_model or self.worker.agent.transcription_model
        words = CalleeWords(self.answer_wait, model)
        try:
            await ws_connect(lambda: words, endpoint.url, extra_headers=endpoint.headers, proxy=endpoint.proxy,
                             max_frame_size=MAX_MODEL_MESSAGE_BYTES, websocket_handshake_timeout=MODEL_CONNECT_TIMEOUT_S,
                             logger_name=ws_log)
        except (OSError, WSError, TimeoutError) as exc:
            log.info("call %s: no listening session for the answer (%s): the audio alone decides", self.call_sid,
                     type(exc).__name__)
            return
        self.answer_wait.words = words
        if not self.answer_wait.waiting or not self.alive():
            words.close()

    def _wait_for_answer(self, now_ns: int) -> None:
        """An outbound call before its answer's verdict: the callee's audio goes to the answer gate, not the model."""
        arena = self.worker.arena
        n = rings.inbound_pop(arena.ctrl, arena.in_meta, arena.in_payload, self.slot, self.inbound, 64)
        decision = self.answer_wait.feed(self.inbound[: n * timing.FRAME_BYTES].tobytes() if n else b"", now_ns)
        if decision is None:
            return
        self.answer_wait.reported = True
        note = self.answer_wait.note(decision)
        if self.recorder is not None:
            self.recorder.note(now_ns, "answer", **note)
        if decision.action == answer_gate.HANG_UP:
            self._on_rest(controller_mod.HangUp(f"answered by {decision.verdict.verdict}"))
        elif decision.action == answer_gate.DTMF:
            self.digits_task = asyncio.get_running_loop().create_task(self._press_digits(self.ivr_digits, self.tone_tag))

    def carrier_amd(self, answered_by: str, now_ns: int) -> None:
        """The carrier's AMD result for this placed call (workers/gateway: a verified webhook). Before the answer's
        verdict it is evidence for the gate; after it, a note in the record beside the verdict it came too late for."""
        wait = self.answer_wait
        if wait is None:
            return
        try:
            late = wait.on_carrier_amd(answered_by, now_ns)
        except ValueError as exc:
            log.warning("call %s: carrier AMD result not used: %s", self.call_sid, exc, extra={"problem": "outbound"})
            return
        if late is not None and self.recorder is not None:
            self.recorder.note(now_ns, "carrier_amd", **late)

    def tick(self) -> None:
        """Timers and rolling approvals of the turn-taking controller (every loop of the worker, 20 ms), and
        the renewal of a session near its vendor's limit."""
        if self.gemini is not None:
            self.tend_go_away(time.monotonic_ns())
        elif self.session_opened_ns and self.transport is not None:
            self.tend_renewal(time.monotonic_ns())
        # the spine asks for ticks only while its model fails or owes an event: a healthy call costs nothing;
        # the turn-taking controller, between turns, only every QUIET_TICK_NS (its timers then count in seconds)
        driver = self.driver
        if (self.started or self.model_lost_reported) and driver.wants_ticks:
            now_ns = time.monotonic_ns()
            if driver.quiet and now_ns - self.ticked_ns < QUIET_TICK_NS:
                return
            self.ticked_ns = now_ns
            actions = driver.on_tick(now_ns, self.playout())
            if actions:
                self._apply(actions)

    def tend_go_away(self, now_ns: int) -> None:
        """Gemini: after goAway, at the first pause (or near the server's deadline), close this connection; run()
        opens the next at once and the driver resumes the session with its handle. The rings are untouched:
        audio already queued plays on, and the caller's audio waits in the inbound ring meanwhile."""
        transport = self.transport
        if (transport is None or self.planned_reconnect or self.gemini is None
                or not self.gemini.reconnect_due(now_ns)):
            return
        self.planned_reconnect = True
        log.info("call %s: Gemini session moves to a new connection (goAway)", self.call_sid)
        if not transport.is_close_frame_sent:
            transport.send_close(WSCloseCode.OK)
        transport.disconnect()

    def dtmf(self, digit: str) -> None:
        """A keypad digit from the gateway; before the model session is configured it means nothing yet."""
        if self.started:
            actions = self.driver.on_dtmf(digit, time.monotonic_ns())
            if actions:
                self._apply(actions)

    def finish(self, call_ended: bool = True) -> concurrent.futures.Future | None:
        """The call ended: tell the driver, and finish its record (INV-REPLAY) on the writer thread (the
        future of that). ``call_ended`` False: this worker is stopping mid-call; the record so far is finished
        (a restarted worker records the rest). A call whose model session never opened (the vendor down,
        its breaker open) tells its driver nothing more, but its record is finished all the same: what it
        holds is the failure policy at work, and left unfinished its part file kept an open descriptor and
        its sink (a method of this session, held by the recorder) a reference cycle."""
        if self.started and call_ended:
            # The call's slot (its rings and control-block row) may already carry the next call, and nothing
            # written for this one would play; the caller is gone, so a cancel or truncate would only tell
            # the model about audio nobody hears: of the driver's last actions only closing the session applies.
            for action in self.driver.on_carrier_stop(time.monotonic_ns()):
                if isinstance(action, controller_mod.CallOver):
                    self._on_model_session(action)
        self.take_events(self.worker.observed)  # shipped with the next pass's
        if self.recorder is None or self.recorder.sink is None:  # no record, or finished already
            return None
        self.recorder.hand_off()
        self.recorder.sink = None
        return RECORD_WRITER.submit(self._finish_record)

    def take_events(self, into: list[tuple[str, float, int, str, dict]]) -> None:
        """This call's observable events since the last time, as (call_sid, at, t_ms, type, data)."""
        if self.tap is None or not self.tap.pending:
            return
        assert self.tap.t0 is not None  # set by the entry that made the first event
        started_at = time.time() - (time.monotonic_ns() - self.tap.t0) / 1e9
        events = self.tap.take()
        if self.spool_events is not None:  # a call without a record file: its events go to the spool too
            self.spool_events.extend(events)
            self.spool_started_at = self.spool_started_at or started_at
        into.extend((self.call_sid, round(started_at + t_ms / 1000, 3), t_ms, kind, data) for t_ms, kind, data in events)

    def hand_off_record(self) -> None:
        if self.recorder is not None:
            self.recorder.hand_off()
            if self.spool_name is not None and self.recorder.sink is not None and time.monotonic() >= self.next_spool_part_s:
                self.next_spool_part_s = time.monotonic() + store_spool.PART_EVERY_S
                self._spool_part()

    def _spool_part(self) -> None:
        """The summary so far into the spool's part file (built here: the summarizer is fed on this thread;
        written on the writer thread, before the call's finish, which removes it): what the store keeps of the
        call if this worker is killed before the call ends. No events: they reach the store live."""
        assert self.summarizer is not None and self.spool_name is not None
        summary = summary_to_json(self.summarizer.summary(self.spool_name, time.time(), complete=False))
        RECORD_WRITER.submit(self._write_spool_part, store_spool.document(summary, self.spool_started_at, []))

    def _write_spool_part(self, content: bytes) -> None:  # on the writer thread
        assert self.spool_name is not None
        try:
            store_spool.write(self.worker.spool_dir, self.spool_name + store_spool.PART_SUFFIX, content)
        except OSError as exc:
            if not self.spool_part_failed:
                self.spool_part_failed = True
                log.warning("call %s: summary so far not spooled: %s", self.call_sid, exc)

    def _hand_off_record(self, batch: list[dict]) -> None:
        RECORD_WRITER.submit(self._append_record, batch)

    def _append_record(self, batch: list[dict]) -> None:  # on the writer thread
        if self.record_failed or self.record_file is None:
            return
        try:
            self.record_file.append(batch)
        except OSError as exc:
            self.record_failed = True
            self.record_file.close()
            log.warning("call %s: record not written: %s", self.call_sid, exc)

    @staticmethod
    def _drop_entries(batch: list[dict]) -> None:
        """No record file: the entries were read as they were recorded (observers, summary); nothing keeps them."""

    def _finish_record(self) -> None:  # on the writer thread
        if self.record_file is None:
            self._spool_summary()  # no record file: the summary alone, to the store
            return
        if self.record_failed:  # its part file stays: the recorder finishes and stores it (a day on)
            return
        try:
            path = self.record_file.finish()
            summary = b""
            if self.summarizer is not None:
                summary = summary_to_json(self.summarizer.summary(path.name, time.time()))
            # the recorder hears of it with the next events
            self.worker.records_finished.append((path.name, summary.decode() if len(summary) <= MAX_SUMMARY_BYTES else ""))
            log.info("call %s: record written to %s", self.call_sid, path)
        except OSError as exc:
            self.record_failed = True
            self.record_file.close()
            log.warning("call %s: record not written: %s", self.call_sid, exc)

    def _spool_summary(self) -> None:  # on the writer thread
        """The call's summary into the store spool (voicecore/store/spool.py), then named to the recorder: the
        file, not the message, is what survives a recorder that is down or killed; the recorder removes it
        once stored."""
        if self.summarizer is None or self.spool_name is None:
            return
        name = self.spool_name
        try:
            summary = summary_to_json(self.summarizer.summary(name, time.time()))
            store_spool.write(self.worker.spool_dir, name,
                              store_spool.document(summary, self.spool_started_at, self.spool_events or []))
            (self.worker.spool_dir / (name + store_spool.PART_SUFFIX)).unlink(missing_ok=True)
        except OSError as exc:
            self.worker.counters["calls_not_spooled"] += 1
            log.warning("call %s: summary not spooled for the store: %s", self.call_sid, exc)
            return
        self.worker.counters["calls_spooled"] += 1
        self.worker.calls_spooled.append((name, summary.decode() if len(summary) <= MAX_SUMMARY_BYTES else ""))

    # --- the driver's actions, each applied by the handler of what it touches (EFFECTS) --------------
    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            EFFECTS[type(action)](self, action)

    def _on_model_session(self, action: core.SendToModel | controller_mod.CallOver) -> None:
        """The call's model socket: a client event to send, or the call is over (close it)."""
        match action:
            case core.SendToModel():
                if self.transport is not None:
                    self.transport.send(WSMsgType.TEXT, action.text.encode())
            case controller_mod.CallOver():
                self.close()

    def _on_rings(self, action: Any) -> None:
        """The call's outbound ring and its control-block row: what the pacer may release, and when."""
        arena = self.worker.arena
        match action:
            case core.WriteFrames():
                self._write_frames(action)
            case core.OpenTag():
                rings.tag_open(arena.ctrl, self.slot, action.tag, 1 if action.gated else 0)
                arena.ctrl[self.slot, C.NEXT_TAG] = action.tag + 1
            case core.EndTag():
                self.pending.append((action.tag, -1 - action.total_frames, b""))
                self.flush_pending()
            case core.ApproveFrames() | controller_mod.ReleaseTag():
                rings.tag_approve(arena.ctrl, self.slot, action.tag, action.frames)
            case controller_mod.HoldTag():
                rings.tag_pause(arena.ctrl, self.slot, action.tag, time.monotonic_ns())
                self.worker.counters["holds"] += 1
            case controller_mod.ResumeTag():
                rings.tag_resume(arena.ctrl, self.slot, action.tag)
            case core.CancelTag():
                self._cancel_tag(action)

    def _cancel_tag(self, action: core.CancelTag) -> None:
        # The control block is the decision; the bus message only wakes the pacer early.
        worker = self.worker
        self.pending = collections.deque(p for p in self.pending if p[0] != action.tag)
        rings.tag_cancel(worker.arena.ctrl, self.slot, action.tag, action.decision_ns)
        worker.bus.send(worker.pacer, messages.CancelTag(self.slot, self.generation, action.tag, action.decision_ns))
        worker.counters["bargeins"] += 1
        log.info("call %s: response tag %d cancelled (barge-in, superseded or rejected)", self.call_sid, action.tag)

    def _on_validator(self, action: core.OpenGate | core.GateTranscript) -> None:
        """The validator, over the bus: a gated response opens, and its transcript as it comes (INV-GATE)."""
        worker = self.worker
        match action:
            case core.OpenGate():
                language = action.language if action.language != "auto" else worker.config.gate_language
                message: object = messages.GateOpen(self.slot, self.generation, action.tag, action.policy,
                                                    action.script, language, action.forbidden, action.facts)
            case core.GateTranscript(done=True):
                message = messages.TranscriptDone(self.slot, self.generation, action.tag, action.text, action.audio_frames)
            case core.GateTranscript():
                message = messages.TranscriptDelta(self.slot, self.generation, action.tag, action.text, action.audio_frames)
        # Kept until the tag's verdict is final: a validator that takes over from a dead one never saw them.
        self.gate_messages.setdefault(action.tag, []).append(message)
        while len(self.gate_messages) > MAX_GATES_KEPT:
            del self.gate_messages[next(iter(self.gate_messages))]
        worker.to_validator(message)

    def resend_gates(self, tags: list[int] | None = None) -> int:
        """A new validator serves: every gate still waiting for its final verdict (or ``tags``), from its
        opening on, once per validator."""
        sent = 0
        for tag in list(self.gate_messages) if tags is None else tags:
            batch = self.gate_messages.get(tag)
            if batch is None or tag in self.gates_resent:
                continue
            self.gates_resent.add(tag)
            first = batch[0]
            if isinstance(first, messages.GateOpen):
                batch = [dataclasses.replace(first, resend=True), *batch[1:]]
            for message in batch:
                self.worker.to_validator(message)
                sent += 1
        return sent

    def stamp(self, now_ns: int) -> None:
        """Tell the pacer this worker serves the call, and whether the caller waits on the model: should
        the stamps stop while they wait, the pacer plays the hold line on its own (INV-NEVER-SILENT)."""
        ctrl = self.worker.arena.ctrl
        ctrl[self.slot, C.MODEL_EXPECTING] = 1 if self.driver.awaiting_model() else 0
        ctrl[self.slot, C.MODEL_ALIVE_NS] = now_ns

    def _on_fallback(self, action: controller_mod.PlayFallback) -> None:
        """One of the runtime's own lines, played by the pacer from its memory: clip first, then the request."""
        ctrl = self.worker.arena.ctrl
        ctrl[self.slot, C.FALLBACK_CLIP] = agent_clip_number(fallback.KINDS.index(action.kind))
        ctrl[self.slot, C.FALLBACK_SEQ] += 1  # after the clip: the pacer reads the clip once it sees the bump
        self.worker.counters["fallback_lines_asked"] += 1
        if action.kind != "hold":
            self.worker.counters["failure_policy_calls"] += 1  # the apology: the call ends by its failure policy
        log.warning("call %s: fallback line %s asked of the pacer", self.call_sid, action.kind)

    async def _line_played(self) -> None:
        """Until the fallback line asked for last has played to the caller (or LINE_PLAYED_WAIT_S)."""
        ctrl = self.worker.arena.ctrl
        deadline = time.monotonic() + LINE_PLAYED_WAIT_S
        while time.monotonic() < deadline and self.alive():
            row = ctrl[self.slot]
            if (row[C.FALLBACK_SEEN_SEQ] == row[C.FALLBACK_SEQ] and row[C.FALLBACK_PENDING] == 0
                    and row[C.FALLBACK_PLAYING] == 0 and row[C.CARRIER_EMPTY_AT_NS] <= time.monotonic_ns()):
                return
            await asyncio.sleep(0.05)

    def _on_rest(self, action: controller_mod.HangUp | controller_mod.Transfer) -> None:
        """The call's carrier's REST API (voicecore/carriers/call_control.py):
        end or redirect the call, off the loop's path (retried on its own task)."""
        self.worker.counters["call_endings_requested"] += 1
        asyncio.get_running_loop().create_task(self._end_call_via_rest(action))

    def _on_knowledge(self, action: controller_mod.Retrieve) -> None:
        """Retrieve-first: answered at once from this process's copy of the knowledge base."""
        knowledge = self.worker.knowledge_base
        found = knowledge.retrieve(action.question, action.k) if knowledge is not None else []
        snippets = [{"file": s.file, "line": s.line, "text": s.text} for s in found]
        self._apply(self.driver.on_snippets(action.req_id, snippets, time.monotonic_ns()))

    def _on_tool(self, action: controller_mod.RunTool) -> None:
        """A tool runs on its own task (at most MAX_TOOLS_RUNNING at once): a webhook on the worker's
        keep-alive connections, a Python tool in a process of the worker's tool pool (never on this loop);
        its result comes back to the driver as an input."""
        worker = self.worker
        worker.counters["tools_started"] += 1
        task = asyncio.get_running_loop().create_task(self._run_tool(action))
        worker.tool_tasks.add(task)
        task.add_done_callback(worker.tool_tasks.discard)

    async def _run_tool(self, action: controller_mod.RunTool) -> None:
        worker = self.worker
        self.tools_running += 1  # a session renewed before its result is back would not know the call's id
        try:
            result, run_s = await self._tool_result(action)
        finally:
            self.tools_running -= 1
        worker.counters["tool_errors" if not result.ok else "tools_ok"] += 1
        worker.tool_durations["ok" if result.ok else "error"].observe(run_s)
        if not result.ok:
            log.warning("call %s: tool %s failed: %s", self.call_sid, action.name, result.status)
        if worker.stopping or not self.alive() or worker.calls.get(self.slot) is not self:
            worker.counters["tool_results_after_call"] += 1  # stopping: the records are finished, nothing goes after them
            return
        self._apply(self.driver.on_tool_result(action.call_id, result.ok, result.output, time.monotonic_ns()))

    async def _tool_result(self, action: controller_mod.RunTool) -> tuple[agent_tools.ToolResult, float]:
        worker = self.worker
        if action.name == SEND_DTMF and self.dtmf_tool:
            return await self._dtmf_tool(action)
        function = worker.agent.flow.functions.get(action.name)
        context = agent_tools.ToolContext(self.call_sid, action.name, action.key)
        async with worker.tool_slots:
            started_ns = time.monotonic_ns()  # the run, not the wait for a slot
            if function is None:  # a record's flow and this agent disagree: never run something undeclared
                result = agent_tools.ToolResult(False, '{"error": {"type": "unknown_function", "message": "not declared"}}',
                                                "unknown_function", 0, 0)
            else:
                result = await agent_tools.run_tool(function, action.arguments, context, os.environ,
                                                    http=worker.http, python=worker.tool_pool)
            run_s = (time.monotonic_ns() - started_ns) / 1e9
        return result, run_s

    def on_verdict(self, verdict: messages.Verdict) -> None:
        if not self.started:
            return
        batch = self.gate_messages.get(verdict.tag)
        if verdict.rejected and verdict.reason == messages.UNKNOWN_GATE and batch is not None:
            # a new validator got part of a gate (the rest died with the old one): it gets the gate whole
            resent = self.resend_gates([verdict.tag])
            self.worker.counters["gate_messages_resent"] += resent
            return
        if batch is not None and (verdict.rejected or verdict.approved_frames >= C.APPROVE_ALL):
            del self.gate_messages[verdict.tag]  # final: nothing to tell a validator that takes over
        actions = self.driver.on_verdict(verdict.tag, verdict.approved_frames, verdict.rejected, time.monotonic_ns(),
                                         self.playout(), verdict.reason, verdict.citations)
        if verdict.rejected:
            self.worker.counters["gate_rejections"] += 1
            # a reason is "<category>: <the claim and its nearest passage>"; the claim holds numbers, so the
            # message text gets the category only (the whole reason is a field)
            log.info("call %s: response tag %d rejected by the validator (%s); not played", self.call_sid, verdict.tag,
                     verdict.reason.partition(": ")[0], extra={"reason": self.worker.record_privacy.log_text(verdict.reason)})
        elif verdict.approved_frames >= C.APPROVE_ALL and verdict.citations not in ("", "[]"):
            log.info("call %s: response tag %d approved with citations", self.call_sid, verdict.tag,
                     extra={"citations": self.worker.record_privacy.log_text(verdict.citations)})
        if actions:
            self._apply(actions)

    async def _end_call_via_rest(self, action: controller_mod.HangUp | controller_mod.Transfer) -> None:
        """Hang up or transfer through the carrier's REST API. Where that cannot be done (no credentials, the
        API unreachable or refusing after the retries), the gateway closes the stream instead: the agent has
        finished with the call (its driver ended), and a call left open would be dead air for as long as the
        caller holds on (the chaos bench: failure-policy hang-ups to an unreachable API left calls silent).
        Closing the stream ends the call where the answer document has nothing after the stream, as ours."""
        if action.after_line:
            await self._line_played()
        if action.after_line and not self.alive():
            return  # the caller hung up while the line played
        sent = await self._end_carrier_call(action)
        if not sent and self.alive():
            self.worker.counters["call_endings_by_stream_close"] += 1
            log.warning("call %s: %s not sent; the gateway closes the stream instead", self.call_sid,
                        type(action).__name__.lower())
            self.worker.bus.send(self.worker.gateway, messages.EndStream(self.slot, self.generation, "rest_failed"))

    async def _end_carrier_call(self, action: controller_mod.HangUp | controller_mod.Transfer) -> bool:
        """Any carrier's call: the request its descriptor decides (voicecore/carriers/call_control.py; one command
        id / JWT id for every retry of this action), retried while the carrier calls the failure retryable; or
        the stream closed by the gateway (Exotel); or a log line (False). True: the carrier took it."""
        kind = call_control.TRANSFER if isinstance(action, controller_mod.Transfer) else call_control.HANGUP
        target = action.target if isinstance(action, controller_mod.Transfer) else ""
        control = self.worker.call_control
        sent = await self._carrier_request(kind, lambda ref, now_s, nonce: call_control.end_call(
            ref, kind, target, control, now_s=now_s, nonce=nonce), "call_endings")
        return sent is True

    async def _carrier_request(self, kind: str, build, counter: str) -> bool | call_control.InBand:
        """The call's carrier REST path, one for every kind of request (hang-up, transfer, DTMF): ``build(ref, now_s,
        nonce)`` is the step its descriptor decides (built per attempt: a Vonage JWT is dated; one command id / JWT
        id for every retry), sent and retried while the carrier calls the failure retryable; a ``CloseStream`` is
        asked of the gateway; an ``InBand`` is returned (the caller plays tones). True: the carrier took it;
        False: it could not be sent (logged, ``<counter>_failed`` counted)."""
        worker = self.worker
        ref = worker.carrier_calls.get((self.slot, self.generation))
        if ref is None:
            log.warning("call %s: cannot %s: the call's carrier ids are unknown (worker restarted mid-call)",
                        self.call_sid, kind)
            return False
        nonce = uuid.uuid4().hex
        for attempt in range(REST_ATTEMPTS):
            try:
                step = build(ref, time.time(), nonce)
            except ValueError as exc:  # a bad id from the stream, the agent's bad target, an unusable key
                worker.counters[f"{counter}_failed"] += 1
                log.warning("call %s: cannot %s the %s call: %s", self.call_sid, kind, ref.carrier, exc)
                return False
            if isinstance(step, call_control.InBand):
                return step
            if isinstance(step, call_control.CannotEnd):
                worker.counters[f"{counter}_failed"] += 1
                log.warning("call %s: cannot %s the %s call: %s", self.call_sid, kind, ref.carrier, step.reason)
                return False
            if isinstance(step, call_control.CloseStream):
                worker.bus.send(worker.gateway, messages.EndStream(self.slot, self.generation, step.reason))
                worker.counters[f"{counter}_sent"] += 1
                log.info("call %s: %s: the gateway closes the %s stream", self.call_sid, kind, ref.carrier)
                return True
            try:
                status, body = await http_client.send(step.method, step.url, step.headers, step.body)
                result = call_control.parse_response(ref.carrier, status, body)
            except (OSError, TimeoutError, ValueError) as exc:
                result = RestResult(False, True, None, type(exc).__name__)
            if result.ok:
                worker.counters[f"{counter}_sent"] += 1
                log.info("call %s: %s sent to %s", self.call_sid, kind, call_control.title(ref.carrier))
                return True
            if not result.retryable:
                break
            await asyncio.sleep(REST_RETRY_DELAY_S * (attempt + 1))
        worker.counters[f"{counter}_failed"] += 1
        log.warning("call %s: %s failed: %s", self.call_sid, kind, result.error)
        return False

    async def _dtmf_tool(self, action: controller_mod.RunTool) -> tuple[agent_tools.ToolResult, float]:
        """The model's ``send_dtmf`` (an agent with ``[outbound] dtmf_tool``): the keys through the carrier's REST path,
        or, where the carrier takes keys only as tones on the stream (Twilio, Exotel), as in-band tones: the driver
        (``on_tones``, recorded) writes them as agent audio under a tag of its core's own, once the response that
        called the tool has written all of its audio, so they play after it and before the model's next response
        (which comes after this result). A barge-in cuts them like any agent audio; the model is then told they
        were not sent. The result (``{"ok": true, "digits"}`` once the keys were taken or the tones played, else a
        ``not_sent`` error) is the tool's, recorded as any tool's."""
        started_ns = time.monotonic_ns()
        try:
            digits = dtmf.parse_digits(json.loads(action.arguments).get("digits"))
        except (ValueError, TypeError, AttributeError) as exc:
            output = json.dumps({"error": {"type": "invalid_arguments", "message": str(exc)[:200]}})
            return agent_tools.ToolResult(False, output, "invalid_arguments", 0, 0), 0.0
        note = await self._press_digits(digits, 0, action.call_id)
        run_s = (time.monotonic_ns() - started_ns) / 1e9
        if note["ok"]:
            output = json.dumps({"ok": True, "digits": digits})
            return agent_tools.ToolResult(True, output, "ok", 1, int(run_s * 1000)), run_s
        message = ("the keys' tones were cut before they had played (the other side spoke over them, or the call "
                   "ended)" if note["means"] == "in_band" else "the carrier did not take the keys")
        output = json.dumps({"error": {"type": "not_sent", "message": message}})
        return agent_tools.ToolResult(False, output, "exception", 1, int(run_s * 1000)), run_s

    async def _press_digits(self, digits: str, tag: int, call_id: str = "") -> dict:
        """Press ``digits`` (voicecore/outbound/dtmf.py) on the call: the carrier's send-DTMF request through the REST
        path above, or, where it has none (Twilio, Exotel), the tones on the stream as agent audio (ungated: tones
        say nothing the gate could check), returning once they have played: under ``tag`` (the IVR verdict's keys,
        before the driver's first tag), or, for the tool run ``call_id`` (the model's ``send_dtmf``), under the tag
        the driver gives them (``_tones_played``). What was done goes to the call's record (a ``dtmf`` note) and is
        returned: ``digits``, ``means`` (rest or in_band), ``ok``."""
        worker = self.worker
        control = worker.call_control
        sent = await self._carrier_request(call_control.DTMF, lambda ref, now_s, nonce: call_control.send_digits(
            ref, digits, control, now_s=now_s, nonce=nonce), "dtmf")
        means = "rest"
        if isinstance(sent, call_control.InBand):
            means = "in_band"
            sent = False
            if tag and self.alive():
                audio = dtmf.tone_audio(digits)
                frames = len(audio) // timing.FRAME_BYTES
                self._apply([core.OpenTag(tag, False), core.WriteFrames(tag, 0, audio), core.EndTag(tag, frames)])
                worker.counters["dtmf_sent"] += 1
                log.info("call %s: dtmf %s played in-band (%d ms of tones)", self.call_sid, digits,
                         frames * timing.FRAME_MS)
                await asyncio.sleep(frames * timing.FRAME_MS / 1000 + TONES_PLAYED_MARGIN_S)
                sent = True
            elif call_id and self.alive():
                sent = await self._tones_played(call_id, digits)
                worker.counters["dtmf_sent" if sent else "dtmf_failed"] += 1
            else:
                worker.counters["dtmf_failed"] += 1
                log.warning("call %s: dtmf %s not sent: in-band tones need a tag of their own", self.call_sid, digits)
        note = {"digits": digits, "means": means, "ok": bool(sent)}
        if self.recorder is not None and self.alive():
            self.recorder.note(time.monotonic_ns(), "dtmf", **note)
        return note

    async def _tones_played(self, call_id: str, digits: str) -> bool:
        """The model's in-band keys: the driver writes them under a tag of its own (``on_tones``: at once, or once
        the response producing audio has written all of it); True once they have played (their end mark echoed,
        or all of them sent and the carrier's buffer, as the pacer models it, empty), False if they were cut or
        never played within TONES_WAIT_S."""
        self._apply(self.driver.on_tones(call_id, digits, time.monotonic_ns()))
        model_core = self.driver.core
        deadline = time.monotonic() + TONES_WAIT_S
        logged = False
        while self.alive() and time.monotonic() < deadline:
            tones = model_core.tones_state(call_id)
            if tones is None or tones.cancelled:
                log.info("call %s: dtmf %s cut before it had played", self.call_sid, digits)
                return False
            if tones.tag:
                if not logged:
                    logged = True
                    log.info("call %s: dtmf %s in-band under tag %d (%d ms of tones)", self.call_sid, digits, tones.tag,
                             tones.frames * timing.FRAME_MS)
                p = self.playout()
                if (p.played_tag > tones.tag or (p.played_tag == tones.tag and p.played_frames >= tones.frames)
                        or ((p.sent_tag > tones.tag or (p.sent_tag == tones.tag and p.sent_frames >= tones.frames))
                            and p.carrier_empty_at_ns <= time.monotonic_ns())):
                    return True
            await asyncio.sleep(timing.FRAME_MS / 1000)
        log.warning("call %s: dtmf %s not played within %.0f s", self.call_sid, digits, TONES_WAIT_S)
        return False

    def _write_frames(self, action: core.WriteFrames) -> None:
        audio = action.audio
        n = len(audio) // timing.FRAME_BYTES
        worker = self.worker
        arena = worker.arena
        scratch = worker.delta_buffer
        if (not self.pending and 0 < n * timing.FRAME_BYTES <= len(scratch)
                and rings.tag_state(arena.ctrl, self.slot, action.tag) != C.TAG_CANCELLED
                and rings.outbound_free(arena.ctrl, arena.out_meta, self.slot) >= n):
            # The usual case: a whole delta into the ring with one call and one publish.
            frames = scratch[: n * timing.FRAME_BYTES]
            frames[:] = np.frombuffer(audio, dtype=np.uint8, count=n * timing.FRAME_BYTES)
            rings.outbound_push_many(arena.ctrl, arena.out_meta, arena.out_payload, self.slot, action.tag,
                                     action.first_index, frames)
            return
        for k in range(n):
            self.pending.append((action.tag, action.first_index + k, audio[k * timing.FRAME_BYTES:(k + 1) * timing.FRAME_BYTES]))
        self.flush_pending()

    def flush_pending(self) -> None:
        """Move frames into the outbound ring in order; a full ring keeps the rest here (reported)."""
        arena = self.worker.arena
        frame = self.worker.frame_buffer
        while self.pending:
            tag, index, payload = self.pending[0]
            if rings.tag_state(arena.ctrl, self.slot, tag) == C.TAG_CANCELLED:
                self.pending.popleft()
                continue
            if rings.outbound_free(arena.ctrl, arena.out_meta, self.slot) <= 0:
                # The pacer has not caught up: the frames wait here, in order, and are not lost (a push
                # into a full ring would count them as dropped).
                self.worker.counters["ring_full_waits"] += 1
                return
            if index < 0:
                ok = rings.outbound_push_end(arena.ctrl, arena.out_meta, self.slot, tag, -1 - index)
            else:
                frame[:] = np.frombuffer(payload, dtype=np.uint8)
                ok = rings.outbound_push(arena.ctrl, arena.out_meta, arena.out_payload, self.slot, tag, index, frame)
            if not ok:
                self.worker.counters["ring_full_waits"] += 1
                return
            self.pending.popleft()

    def drop_task(self) -> None:
        """Cancel the session's task and forget it. A cancelled task keeps its CancelledError, whose traceback
        holds run()'s frame and so this session: a session that kept its task formed a reference cycle
        (session -> task -> error -> traceback -> frame -> session) that only the cyclic collector frees, and
        its full passes are rare in this worker (none in a soak's first 1,300 calls), so every ended call's
        session, driver, socket and buffers stayed in memory until one came. Forgotten, the task is freed
        when it finishes, and the session with it."""
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if self.renewal is not None and self.renewal.task is not None:
            self.renewal.task.cancel()
        self.renewal = None

    def close(self) -> None:
        for transport in (self.transport, self.renewal.transport if self.renewal is not None else None):
            if transport is not None and not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
                transport.disconnect()
        self.renewal = None


# Which handler applies each action a driver returns, by what the action touches. Every action type has
# one (tests/unit/test_driver_conformance.py checks it against the Action union).
MODEL_SESSION_ACTIONS = (core.SendToModel, controller_mod.CallOver)
RING_ACTIONS = (core.WriteFrames, core.OpenTag, core.EndTag, core.CancelTag, core.ApproveFrames,
                controller_mod.ReleaseTag, controller_mod.HoldTag, controller_mod.ResumeTag)
VALIDATOR_ACTIONS = (core.OpenGate, core.GateTranscript)
REST_ACTIONS = (controller_mod.HangUp, controller_mod.Transfer)
KNOWLEDGE_ACTIONS = (controller_mod.Retrieve,)
TOOL_ACTIONS = (controller_mod.RunTool,)
FALLBACK_ACTIONS = (controller_mod.PlayFallback,)
EFFECTS: dict[type, Callable[[CallSession, Any], None]] = {
    kind: handler
    for kinds, handler in ((MODEL_SESSION_ACTIONS, CallSession._on_model_session), (RING_ACTIONS, CallSession._on_rings),
                           (VALIDATOR_ACTIONS, CallSession._on_validator), (REST_ACTIONS, CallSession._on_rest),
                           (KNOWLEDGE_ACTIONS, CallSession._on_knowledge), (TOOL_ACTIONS, CallSession._on_tool),
                           (FALLBACK_ACTIONS, CallSession._on_fallback))
    for kind in kinds
}


class ModelSocket(WSListener):
    """picows listener of one call's model WebSocket: whole text messages to the session."""

    def __init__(self, session: CallSession, renewal: bool = False) -> None:
        self.session = session
        self.renewal = renewal  # the socket of a session opened to replace one near its vendor's limit
        self.fragments: list[bytes] = []
        self.fragments_bytes = 0

    def on_ws_connected(self, transport: WSTransport) -> None:
        if self.renewal:
            self.session.on_renewal_connected(transport)
        else:
            self.session.on_connected(transport)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        msg_type = frame.msg_type
        if msg_type is WSMsgType.TEXT:
            if frame.fin:
                # Not valid UTF-8 is the vendor's malformed event, not a reason to drop the session: the
                # replacement characters make it unparseable JSON, counted as malformed (and recorded).
                self.session.socket_text(transport, frame.get_payload_as_bytes().decode("utf-8", errors="replace"))
                self.session.worker.pump_if_held()
            else:
                self.fragments = [frame.get_payload_as_bytes()]
                self.fragments_bytes = len(self.fragments[0])
        elif msg_type is WSMsgType.CONTINUATION and self.fragments:
            self.fragments.append(frame.get_payload_as_bytes())
            self.fragments_bytes += len(self.fragments[-1])
            if self.fragments_bytes > MAX_MODEL_MESSAGE_BYTES:  # picows caps one frame, not a message
                self.fragments = []
                if transport is self.session.transport:
                    self.session.close_code = WSCloseCode.MESSAGE_TOO_BIG.value
                transport.send_close(WSCloseCode.MESSAGE_TOO_BIG)
                transport.disconnect()
                return
            if frame.fin:
                text = b"".join(self.fragments).decode("utf-8", errors="replace")
                self.fragments = []
                self.session.socket_text(transport, text)
                self.session.worker.pump_if_held()
        elif msg_type is WSMsgType.CLOSE:
            code = frame.get_close_code()
            if transport is self.session.transport:
                self.session.on_model_close(code.value, (frame.get_close_message() or b"").decode("utf-8", errors="replace"))
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK if code is WSCloseCode.NO_INFO else code)
            transport.disconnect()


def vonage_private_key(config: Config) -> str:
    """vonage_private_key as PEM text (read once, at start). An unreadable file is logged and leaves Vonage calls
    unable to hang up, as an unset key does."""
    try:
        return pem_text("vonage_private_key", config.vonage_private_key)
    except ConfigError as exc:
        log.error("%s: Vonage calls cannot be hung up or transferred", exc, extra={"problem": "configuration"})
        return ""


class ModelWorker:
    def __init__(self, config: Config, agent: AgentSpec, followers: Followers | None = None) -> None:
        self.config = config
        # a call's session this old gets its renewal opened (CallSession.tend_renewal)
        self.renew_from_ns = int(renew_from_s(config.realtime_session_limit_s) * 1e9)
        self.followers = followers  # the live calls' drivers this process kept rebuilt while it stood by
        self.validator_pid: int | None = None
        self.agent = agent_settings.agent_for_config(agent, config)
        self.vendor = gemini_driver.vendor_of(config.model, self.agent.model_vendor)  # openai | gemini
        # Gemini: the Gemini API with a key, or Vertex AI with an access token kept fresh in the background
        self.gemini_access = gemini_connect.access_for_config(config, os.environ)
        vertex = self.vendor == gemini_driver.VENDOR and self.gemini_access.kind == gemini_connect.VERTEX
        self.vertex_tokens: VertexTokens | None = VertexTokens() if vertex else None
        self.gemini_model = self.gemini_access.model_name(config.model)  # as setup names it (Vertex: a resource)
        # What of each call's record (and so of the store, observers, webhooks) is kept: the agent's tier.
        self.record_privacy = RecordPrivacy.for_agent(self.agent)
        self.tool_slots = asyncio.Semaphore(MAX_TOOLS_RUNNING)
        self.tool_tasks: set[asyncio.Task] = set()
        self.http = http_client.ConnectionPool()  # webhooks: kept connections per origin
        self.stopping = False  # set once run() stops serving: tool results that come after it are dropped
        self.tool_pool = tool_pool_for(config, self.agent)
        self.runtime_dir = Path(config.runtime_dir)
        self.arena: Arena | None = None
        self.calls_pumped_ns = 0  # when pump_calls last ran
        self.follower = ArenaFollower(self.runtime_dir, config.shm_dir)
        self.bus = Bus(self.runtime_dir)
        self.events = self.bus.connect(zmq.SUB, EVENTS)
        self.pacer = self.bus.connect(zmq.PUSH, PACER_INBOX)
        self.gateway = self.bus.connect(zmq.PUSH, GATEWAY_INBOX)
        self.validator = self.bus.connect(zmq.PUSH, VALIDATOR_INBOX)
        # Gate messages (every transcript delta of every gated answer) go out once per turn of the event loop,
        # in as few bus messages as fit: per message, a send here and a wake-up of the validator were a tenth of
        # this worker's and a third of the validator's time at 200 agent calls (docs/explanation/measured.md#agent-cpu).
        self.validator_outbox: list[bytes] = []
        self.verdicts = self.bus.bind(zmq.PULL, MODEL_INBOX)
        # The recorder runs only with a call store (voicecore/supervise.py): without one nothing binds its inbox,
        # and the attempts to reach it back off to one a heartbeat instead of ten a second.
        self.observe = self.bus.connect(zmq.PUSH, RECORDER_INBOX, reconnect_max_ms=timing.IDLE_HEARTBEAT_MS)
        self.observed: list[tuple[str, float, int, str, dict]] = []  # events of every call, not shipped yet
        self.records_finished: collections.deque[tuple[str, str]] = collections.deque()  # (name, summary), from the writer thread
        # The node's call store, and whether its calls' record files are written: without them each call's
        # summary goes through the store spool (voicecore/store/spool.py) to the recorder.
        self.stores_calls = bool(database_url_for(config))
        # A fleet's shared store: each live call's state goes there as it changes, for the node a carrier may
        # re-attach the call to after its gateway died (workers/model/call_states.py). A node's own SQLite store
        # is no use to another node (and this node's worker keeps its cut calls itself).
        self.call_states = (CallStates(config.database_url, config.node)
                            if config.database_url.startswith(POSTGRES_PREFIXES) else None)
        self.writes_records = bool(config.record_dir) and config.record_calls
        self.spool_dir = store_spool.spool_dir(self.runtime_dir)
        self.calls_spooled: collections.deque[tuple[str, str]] = collections.deque()  # (name, summary), from the writer thread
        self.calls: dict[int, CallSession] = {}
        # Calls whose gateway died under them (the arena went): re-attached when a stream for the same CallSid
        # starts within REATTACH_WAIT_S, ended (call.ended, "stream_lost") when none does.
        self.cut_calls: dict[str, CutCall] = {}
        self.frame_buffer = np.zeros(timing.FRAME_BYTES, dtype=np.uint8)
        self.delta_buffer = np.zeros(timing.FRAME_BYTES * 64, dtype=np.uint8)  # one model delta's frames
        self.counters = collections.Counter({"inbound_short_batches": 0, "pumps_in_model_bursts": 0, "bargeins": 0, "holds": 0, "ring_full_waits": 0, "model_connect_failures": 0, "model_handler_errors": 0, "model_protocol_errors": 0, "gate_rejections": 0, "call_endings_requested": 0,
                                             "call_endings_sent": 0, "call_endings_failed": 0, "call_endings_by_stream_close": 0,
                                             "dtmf_sent": 0, "dtmf_failed": 0,
                                             "tools_started": 0, "tools_ok": 0, "tool_errors": 0, "tool_results_after_call": 0,
                                             "observe_events_sent": 0, "observe_events_dropped": 0,
                                             "fallback_lines_asked": 0, "calls_refused_by_breaker": 0,
                                             "calls_refused_by_vendor": 0, "vendor_refusals": 0,
                                             "vendor_trial_sessions": 0, "session_renewals": 0,
                                             "session_renewals_forced": 0, "session_renewals_failed": 0,
                                             "failure_policy_calls": 0, "calls_taken_over_followed": 0,
                                             "gate_messages_resent": 0, "calls_spooled": 0, "calls_not_spooled": 0,
                                             "calls_reattached": 0, "calls_lost_with_gateway": 0,
                                             "calls_restored_from_store": 0, "call_state_lookups_timed_out": 0})
        self.breakers: dict[str, CircuitBreaker] = {}  # per vendor endpoint (URL)
        self.vendor_trial: asyncio.Task | None = None  # the trial sessions while the vendor refuses the configuration
        # voicecore_tool_duration_seconds: each tool run's time by outcome, cumulative since start (both
        # outcomes reported from the start, so a scraper sees the series before the first error).
        self.tool_durations = {outcome: prom_histogram.Histogram((0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10))
                               for outcome in ("ok", "error")}
        # (slot, generation) -> a non-Twilio call's carrier and ids, from CallStarted (hang-up and transfer)
        self.carrier_calls: dict[tuple[int, int], call_control.CallRef] = {}
        # (slot, generation) -> the CallStarted of a call the node placed (its callee and fields)
        self.outbound_started: dict[tuple[int, int], messages.CallStarted] = {}
        # (slot, generation) -> the carrier's AMD result for a placed call whose session has not started yet
        self.carrier_amd_waiting: dict[tuple[int, int], str] = {}
        self.call_control = call_control.CallControlSettings.from_config(config, vonage_private_key(config))
        self.heartbeat_seq = 0
        # retrieve-first (turns mode), or a Gemini session's knowledge: this process's own copy of the knowledge
        # base, reloaded on change
        knows = config.call_control == "turns" or self.vendor == gemini_driver.VENDOR
        self.knowledge = KnowledgeWatcher(config.knowledge_dir if knows else "")
        self.knowledge_base = self.knowledge.poll()[1]
        self.gemini_knowledge: tuple[dict, ...] = ()
        self._gemini_knowledge_for(self.knowledge_base)
        self.next_knowledge_poll = time.monotonic() + KnowledgeWatcher.POLL_NS / 1e9

    def _gemini_knowledge_for(self, knowledge: Any) -> None:
        """A Gemini session's knowledge (voicecore/gemini/driver.py ``session_knowledge``) from the base as loaded:
        the calls begun after a reload get the new one."""
        if self.vendor != gemini_driver.VENDOR:
            return
        self.gemini_knowledge = tuple({"text": s.text, "file": s.file} for s in knowledge.snippets) if knowledge else ()
        left_out = gemini_driver.session_knowledge(self.gemini_knowledge)[1]
        if left_out:
            log.warning("knowledge base %s: %d of %d snippets left out of a Gemini session's instructions (over %d "
                        "characters): the model does not know them; the gate still checks every number against all",
                        self.config.knowledge_dir, left_out, len(self.gemini_knowledge), gemini_driver.KNOWLEDGE_MAX_CHARS)

    def pump_calls(self, now_ns: int) -> None:
        """Every call's waiting frames to its ring and its caller's audio to the model (each when due)."""
        self.calls_pumped_ns = now_ns
        for session in list(self.calls.values()):
            session.flush_pending()
            session.pump_inbound(now_ns)

    def pump_if_held(self) -> None:
        """Between two of the model's messages: the calls pumped now if a burst of messages has held the loop
        longer than PUMP_HELD_NS. The vendor's VAD hears a caller who starts to speak only once their audio
        reaches it, so a caller talking over the agent meanwhile is heard late and the agent talks on: 50 answers
        streamed at once held the loop 150 ms here, and 500-700 ms on a slower machine, where every barge-in of
        the demo then heard the agent that long."""
        now_ns = time.monotonic_ns()
        if now_ns - self.calls_pumped_ns >= PUMP_HELD_NS and self.arena is not None:
            self.counters["pumps_in_model_bursts"] += 1
            self.pump_calls(now_ns)

    def attach_arena(self) -> bool:
        """(Re)attach when the gateway (re)created its arena; False while there is none."""
        arena, changed = self.follower.poll()
        if changed:
            # Sessions of the old arena's calls are gone with it (a gateway restart drops their streams): their
            # records so far are finished, and each waits for the carrier to re-attach it.
            for session in self.calls.values():
                mid_answer = session.started and session.driver.awaiting_model()
                record = session.finish(call_ended=False)
                # Its model socket closes too: left open, its events would drive the old driver into this slot
                # of the new arena, which is another call's (or this call's re-attached stream's).
                session.close()
                session.transport = None
                session.drop_task()
                self.cut_calls[session.call_sid] = CutCall(session, time.monotonic(), record, mid_answer)
            self.calls.clear()
        self.arena = arena
        return arena is not None

    def reconcile(self) -> None:
        """Start a session for every active slot we do not serve; drop sessions whose call ended."""
        arena = self.arena
        if arena is None:
            return
        # Every loop: each slot's two words read once for all calls (a call's own alive() is a numpy read each).
        states, generations = arena.ctrl[:, C.STATE].tolist(), arena.ctrl[:, C.GENERATION].tolist()
        for slot, session in list(self.calls.items()):
            if states[slot] != C.SLOT_ACTIVE or generations[slot] != session.generation:
                session.finish()
                session.close()
                session.drop_task()
                del self.calls[slot]
        active = np.nonzero(arena.ctrl[:, C.STATE] == C.SLOT_ACTIVE)[0]
        for slot in active.tolist():
            if slot in self.calls:
                continue
            ctrl = arena.ctrl[slot]
            generation = int(ctrl[C.GENERATION])
            resumed = int(ctrl[C.MODEL_GENERATION]) == generation
            started_at_ns = int(ctrl[C.STARTED_AT_NS])  # 0: a slot no gateway stamped (an arena a test fills)
            if (not resumed and started_at_ns and (slot, generation) not in self.carrier_calls
                    and time.monotonic_ns() - started_at_ns < STARTED_MESSAGE_WAIT_NS):
                continue  # its CallStarted (an outbound call's fields) is on its way: the session starts with it
            ctrl[C.MODEL_GENERATION] = generation
            call_sid = arena.call_sid(slot)
            reattached = None if resumed else self.cut_calls.pop(call_sid, None)
            session = CallSession(self, slot, generation, call_sid, resumed, reattached)
            session.task = asyncio.get_running_loop().create_task(session.run())
            self.calls[slot] = session
            how = "resumed" if resumed else "re-attached" if reattached is not None else "started"
            if reattached is not None:
                self.counters["calls_reattached"] += 1
                how += f" ({'rebuilt from ' + session.rebuilt_from if session.rebuilt_from else 'its state kept in memory'})"
            log.info("call %s: model session %s in slot %d%s", call_sid, how, slot,
                     " (placed by the node: waiting for the answer's verdict)" if session.answer_wait else "")

    def end_lost_calls(self, now_s: float) -> None:
        """A call whose gateway died and that no stream re-attached within REATTACH_WAIT_S is over: its
        ``call.ended`` (outcome ``stream_lost``), so the store and the observers see it end."""
        for call_sid, cut in list(self.cut_calls.items()):
            if now_s - cut.at_s < REATTACH_WAIT_S:
                continue
            del self.cut_calls[call_sid]
            self.counters["calls_lost_with_gateway"] += 1
            if cut.session.tap is not None:
                cut.session.tap.end(time.monotonic_ns(), "stream_lost")
                cut.session.take_events(self.observed)
            log.info("call %s: no stream re-attached it in %.0f s: ended (stream lost)", call_sid, REATTACH_WAIT_S)

    def breaker_for(self, url: str) -> CircuitBreaker:
        breaker = self.breakers.get(url)
        if breaker is None:
            breaker = self.breakers[url] = CircuitBreaker()
        return breaker

    def endpoint_for(self, call_sid: str | None) -> vendor_connect.Endpoint:
        """The vendor endpoint a call dials: URL, key header (OpenAI's or Azure's), the outbound proxy."""
        config = self.config
        if self.vendor == gemini_driver.VENDOR:
            tokens = self.vertex_tokens
            return gemini_connect.endpoint_for_access(
                self.gemini_access, os.environ, token=tokens.current() if tokens is not None else "",
                quota_project=tokens.quota_project if tokens is not None else "",
                call_sid=call_id_for_model(config, call_sid) if call_sid else None)
        return vendor_connect.endpoint(config.model_url, config.model, config.realtime_api_key, config.model_provider,
                                       config.realtime_deployment, os.environ,
                                       call_sid=call_id_for_model(config, call_sid) if call_sid else None,
                                       naming=config.realtime_naming)  # type: ignore[arg-type]

    def vendor_refused(self, endpoint: vendor_connect.Endpoint, fault: VendorFault) -> None:
        """The vendor refused the node's configuration (its key, model, quota, session configuration, API
        shape): every call would meet the same refusal. The breaker closes the vendor to every call (each
        new one gets its failure policy at once, no hold-line loop), one log line says what the vendor said,
        /healthz reports it, and a trial session of our own every VENDOR_TRIAL_EVERY_S finds out when the
        vendor accepts the configuration again."""
        self.counters["vendor_refusals"] += 1
        breaker = self.breaker_for(endpoint.url)
        if not breaker.fatal(time.monotonic(), fault.describe()):
            return
        log.error("the model vendor refuses this node's configuration (%s, model %s): %s; new calls get the "
                  "agent's failure policy at once and /healthz answers 503 until a trial session (every %d s) is "
                  "accepted: fix the configuration and restart", endpoint.describe(), self.config.model,
                  fault.describe(), VENDOR_TRIAL_EVERY_S, extra={"problem": "vendor"})
        self.send_vendor_health()
        if self.vendor_trial is None or self.vendor_trial.done():
            self.vendor_trial = asyncio.get_running_loop().create_task(self.retry_refused_vendor(endpoint.url))

    async def retry_refused_vendor(self, url: str) -> None:
        """While the vendor refuses the configuration: a trial session (the agent's session.update, no
        response asked for) every VENDOR_TRIAL_EVERY_S; the first it accepts closes the breaker."""
        breaker = self.breaker_for(url)
        gemini = self.vendor == gemini_driver.VENDOR
        first = (gemini_driver.driver_for_agent(self.agent, "CAtrial", model=self.gemini_model).setup_message() if gemini
                 else first_session_update(self.config, self.agent))
        trial = gemini_connect.trial_session if gemini else vendor_connect.trial_session
        while breaker.is_fatal:
            await asyncio.sleep(VENDOR_TRIAL_EVERY_S)
            self.counters["vendor_trial_sessions"] += 1
            if self.vertex_tokens is not None:
                try:
                    await self.vertex_tokens.token()
                except TokenError as exc:
                    log.warning("trial session: no Vertex AI access token (%s)", exc)
                    continue
            result = await trial(self.endpoint_for(None), first)
            if result.ok:
                breaker.success(time.monotonic())
                log.warning("the model vendor accepts this node's configuration again: calls are served")
                self.send_vendor_health()
            elif result.fault is not None and result.fault.fatal:
                breaker.fatal(time.monotonic(), result.fault.describe())

    def vendor_health(self) -> messages.VendorHealth:
        refused = [b for b in self.breakers.values() if b.is_fatal]
        if not refused:
            return messages.VendorHealth(os.getpid(), True, "", 0.0)
        since_s = time.time() - (time.monotonic() - refused[0].fatal_since)
        return messages.VendorHealth(os.getpid(), False, refused[0].fatal_reason, round(since_s, 3))

    def send_vendor_health(self) -> None:
        self.bus.send(self.gateway, self.vendor_health())

    def check_validator(self) -> None:
        """A validator that took over (or restarted) knows nothing of the gates open: send them again."""
        pid = standby.leader_pid(self.config.runtime_dir, "validator")
        if pid is None or pid == self.validator_pid:
            return
        if self.validator_pid is not None:
            for session in self.calls.values():
                session.gates_resent.clear()  # a validator newer than the one they were resent to
            resent = sum(session.resend_gates() for session in self.calls.values())
            self.counters["gate_messages_resent"] += resent
            log.warning("a new validator serves (pid %d): %d gate messages sent again", pid, resent)
        self.validator_pid = pid

    def to_validator(self, message: messages.Message) -> None:
        """A gate message to the validator, sent with the others of this turn of the event loop (in order)."""
        if not self.validator_outbox:
            try:
                asyncio.get_running_loop().call_soon(self.flush_validator)
            except RuntimeError:  # no loop runs (a test drives the session): nothing would flush it later
                self.bus.send(self.validator, message)
                return
        self.validator_outbox.append(messages.encode(message))

    def flush_validator(self) -> None:
        if self.validator_outbox:
            outbox, self.validator_outbox = self.validator_outbox, []
            self.bus.send_all(self.validator, outbox)

    def stamp_calls(self) -> None:
        now_ns = time.monotonic_ns()
        for session in self.calls.values():
            if session.alive():
                session.stamp(now_ns)

    def on_verdicts(self) -> None:
        """Apply every verdict waiting (woken by the socket's fd, and polled each loop as the fd is edge-triggered)."""
        while self.verdicts.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            for message in self.bus.receive_nowait(self.verdicts):
                if not isinstance(message, messages.Verdict):
                    continue
                session = self.calls.get(message.slot)
                if session is not None and session.generation == message.generation:
                    session.on_verdict(message)

    def ship_events(self) -> None:
        """Every call's observable events since the last pass, to the recorder in as few messages as fit
        (dropped, and counted, when it is not there or not keeping up: observers never hold up a call)."""
        for session in self.calls.values():
            session.take_events(self.observed)
        while self.records_finished:
            name, summary = self.records_finished.popleft()
            self.bus.send(self.observe, messages.RecordFinished(name, summary))
        while self.calls_spooled:
            name, summary = self.calls_spooled.popleft()
            self.bus.send(self.observe, messages.CallSpooled(name, summary))
        if not self.observed:
            return
        for count, text in observe_chunks(self.observed):
            if self.bus.send(self.observe, messages.ObserveEvents(text)):
                self.counters["observe_events_sent"] += count
            else:
                self.counters["observe_events_dropped"] += count
        self.observed = []

    def stats(self) -> dict[str, float]:
        totals: collections.Counter = collections.Counter()
        for session in self.calls.values():
            driver = session.driver
            core_stats = driver.core.stats
            for field in ("responses", "frames_written", "deltas_dropped", "bargeins", "truncates", "deletes", "model_errors",
                          "harmless_errors", "malformed_events", "gated_responses", "rejections", "safe_lines"):
                totals[field] += getattr(core_stats, field)
            turn_stats = driver.stats  # None: the spine counts nothing beyond its core
            if turn_stats is not None:
                for field in ("bargeins", "holds", "false_interruptions", "watchdog_fires", "stalls", "retries",
                              "gate_rejections", "safe_lines", "retrievals", "retrievals_empty", "tools_run", "tool_errors",
                              "duplicate_writes_suppressed", "fillers", "transitions", "actions_proposed",
                              "actions_confirmed", "actions_declined", "actions_timed_out", "model_lost", "vendor_failures",
                              "hold_lines", "failure_policy"):
                    totals["turns_" + field] += getattr(turn_stats, field)
        histograms = {key: value for outcome, durations in self.tool_durations.items()
                      for key, value in durations.flat("tool_duration_seconds", {"outcome": outcome}).items()}
        sessions_open = sum(1 for session in self.calls.values() if session.transport is not None)
        health = {"sessions_open": float(sessions_open), "sessions_reconnecting": float(len(self.calls) - sessions_open),
                  "breaker_open": float(any(b.is_open for b in self.breakers.values())),
                  "breaker_opened_total": float(sum(b.times_opened for b in self.breakers.values())),
                  "vendor_refused": float(any(b.is_fatal for b in self.breakers.values()))}
        pool = self.tool_pool.stats() if self.tool_pool is not None else {}
        if self.call_states is not None:
            pool = {**pool, **self.call_states.counters}
        webhooks = self.http.stats
        connections = {"webhook_requests": float(webhooks.requests), "webhook_connections_opened": float(webhooks.connections_opened),
                       "webhook_connections_reused": float(webhooks.reused)}
        return {**{k: float(v) for k, v in self.counters.items()}, **{f"active_{k}": float(v) for k, v in totals.items()}, "calls": float(len(self.calls)),
                **health, **histograms, **pool, **connections}

    async def run(self, stop: asyncio.Event) -> None:
        last_stats = 0.0
        next_hand_off = time.monotonic() + RECORD_HAND_OFF_S
        next_events = 0.0
        next_heartbeat = 0.0
        announced_ms = 0  # the heartbeat interval the last heartbeat announced
        next_stamp = 0.0
        next_validator_check = 0.0
        verdicts_fd = self.verdicts.getsockopt(zmq.FD)
        asyncio.get_running_loop().add_reader(verdicts_fd, self.on_verdicts)
        # A gateway's news (a call started) wakes an idle loop at once; with calls the loop runs every 20 ms anyway.
        news = asyncio.Event()
        events_fd = self.events.getsockopt(zmq.FD)
        asyncio.get_running_loop().add_reader(events_fd, lambda: (self.events.getsockopt(zmq.EVENTS), news.set()))
        stopped = asyncio.ensure_future(stop.wait())
        if self.tool_pool is not None:
            self.tool_pool.start()  # in the background: a run before they are up waits for one
        # Vertex AI: the first token now (the first call finds it ready), then each one before the last expires
        token_keeper = (asyncio.get_running_loop().create_task(self.vertex_tokens.keep_fresh(stop))
                        if self.vertex_tokens is not None else None)
        while not stop.is_set():
            self.on_verdicts()
            if self.attach_arena():
                for message in self.bus.receive_nowait(self.events):
                    if isinstance(message, messages.CallStarted):
                        self.carrier_calls[(message.slot, message.generation)] = call_control.call_ref(message)
                        if message.direction:
                            # a second copy (the gateway's welcome of a subscriber that reconnected) is no news
                            first = (message.slot, message.generation) not in self.outbound_started
                            self.outbound_started[(message.slot, message.generation)] = message
                            late = self.calls.get(message.slot)
                            if (first and late is not None and late.generation == message.generation
                                    and late.answer_wait is None):
                                log.warning("call %s: placed by the node, but its session started before the call's "
                                            "fields came: no answer detection", late.call_sid,
                                            extra={"problem": "outbound"})
                        self.reconcile()
                    elif isinstance(message, messages.CallEnded):
                        ended = self.calls.get(message.slot)
                        if (self.call_states is not None and ended is not None and ended.generation == message.generation
                                and reattach_rules.ended_normally(message.reason)):
                            self.call_states.drop(ended.call_sid)  # nothing will re-attach it (its slot stopped its writes)
                        self.carrier_calls.pop((message.slot, message.generation), None)
                        self.outbound_started.pop((message.slot, message.generation), None)
                        self.carrier_amd_waiting.pop((message.slot, message.generation), None)
                        self.reconcile()
                    elif isinstance(message, messages.Dtmf):
                        session = self.calls.get(message.slot)
                        if session is not None and session.generation == message.generation:
                            session.dtmf(message.digit)
                    elif isinstance(message, messages.CarrierAmd):
                        session = self.calls.get(message.slot)
                        if session is not None and session.generation == message.generation:
                            session.carrier_amd(message.answered_by, time.monotonic_ns())
                        elif (message.slot, message.generation) in self.outbound_started:
                            # its session starts with the next reconcile: the result waits for it there
                            self.carrier_amd_waiting[(message.slot, message.generation)] = message.answered_by
                self.reconcile()
                self.pump_calls(time.monotonic_ns())
                for session in self.calls.values():
                    session.tick()
            now = time.monotonic()
            if now >= next_stamp and self.arena is not None:
                next_stamp = now + STAMP_EVERY_S
                self.stamp_calls()
            if now >= next_validator_check:
                next_validator_check = now + VALIDATOR_CHECK_S
                self.check_validator()
            interval_ms = timing.heartbeat_interval_ms(bool(self.calls))
            if now >= next_heartbeat or interval_ms != announced_ms:
                # the loop runs every 20 ms with a call; the gateway expects one per interval announced. The
                # interval changes at once both ways: a call that went live needs the short one, and the last call's
                # end must announce the long one before the idle loop sleeps it (a worker idle under a short
                # announced interval looks dead to /healthz until its next beat)
                announced_ms = interval_ms
                next_heartbeat = now + interval_ms / 1000
                self.heartbeat_seq += 1
                self.bus.send(self.gateway, messages.Heartbeat("model", os.getpid(), self.heartbeat_seq, time.monotonic_ns(), interval_ms))
            if now >= self.next_knowledge_poll:
                self.next_knowledge_poll = now + KnowledgeWatcher.POLL_NS / 1e9
                changed, knowledge = self.knowledge.poll()
                if changed:
                    self.knowledge_base = knowledge
                    self._gemini_knowledge_for(knowledge)
            if now >= next_events:  # the live observers' events of the last OBSERVE_EVERY_S, to the recorder
                next_events = now + OBSERVE_EVERY_S
                if self.cut_calls:
                    self.end_lost_calls(now)
                self.ship_events()
            if now >= next_hand_off:  # records: the last second's entries to the writer thread
                next_hand_off = now + RECORD_HAND_OFF_S
                for session in self.calls.values():
                    session.hand_off_record()
                    session.save_state()
            if now - last_stats >= STATS_EVERY_S:
                last_stats = now
                self.bus.send(self.gateway, messages.Stats("model", os.getpid(), self.stats()))
                self.send_vendor_health()  # a gateway that restarted learns it within a second
            # No call: nothing is due sooner than the idle heartbeat, so an idle worker wakes once a second
            # (or on the gateway's news), not every 20 ms.
            if self.calls:
                await asyncio.wait((stopped,), timeout=LOOP_S)
            else:
                news.clear()
                woken = asyncio.ensure_future(news.wait())
                await asyncio.wait((stopped, woken), timeout=IDLE_LOOP_S, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
        stopped.cancel()
        asyncio.get_running_loop().remove_reader(events_fd)
        self.stopping = True
        records = []
        for session in self.calls.values():
            records.append(session.finish(call_ended=False))
            session.drop_task()
        concurrent.futures.wait([f for f in records if f is not None], timeout=RECORD_FINISH_WAIT_S)
        self.ship_events()
        if self.tool_pool is not None:
            await self.tool_pool.close()
        if token_keeper is not None and self.vertex_tokens is not None:
            token_keeper.cancel()
            self.vertex_tokens.close()
        if self.call_states is not None:  # the states waiting are written (a stopping node's calls may be re-attached)
            await asyncio.get_running_loop().run_in_executor(None, self.call_states.close)
        await self.http.close()
        # Before the bus closes the socket: a wakeup on its dead fd would read a closed socket (a traceback at stop).
        asyncio.get_running_loop().remove_reader(verdicts_fd)
        self.flush_validator()
        self.bus.close()
        (self.runtime_dir / MODEL_INBOX).unlink(missing_ok=True)
        self.follower.close()


async def follow_while_standing_by(config: Config, followers: Followers) -> None:
    """Every FOLLOW_EVERY_S: the arena's live calls, each one's record read on (workers/model/follow.py).
    Reads only: the serving worker owns the arena's words and the files."""
    arena_follower = ArenaFollower(Path(config.runtime_dir), config.shm_dir)
    try:
        while True:
            arena, _changed = arena_follower.poll()
            if arena is not None:
                active = np.nonzero(arena.ctrl[:, C.STATE] == C.SLOT_ACTIVE)[0]
                for follower in followers.update([arena.call_sid(int(slot)) for slot in active]):
                    follower.poll()
                    await asyncio.sleep(0)
            await asyncio.sleep(FOLLOW_EVERY_S)
    except asyncio.CancelledError:
        raise
    except Exception:  # following is an optimisation: a takeover then rebuilds from the files
        log.exception("following the live calls' records failed; a takeover rebuilds them from the start")
    finally:
        arena_follower.close()


async def amain(config: Config) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    warm_up_rings(config.runtime_dir)
    try:
        agent = load_configured_agent(config, os.environ)
    except AgentError as exc:  # `voicecore up` checks first; this is a worker started some other way
        log.error("the agent cannot be loaded; the model worker stops:\n%s", exc)
        raise SystemExit(2) from None
    # Warmed up (imports, compiled ring kernels, the agent): stand by until this process serves the role,
    # following the live calls' records meanwhile so that a takeover replays seconds, not whole calls.
    leadership = Leadership(config.runtime_dir, "model")
    followers = Followers(config.record_dir) if config.record_dir and config.record_calls else None
    following = asyncio.get_running_loop().create_task(follow_while_standing_by(config, followers)) if followers else None
    try:
        acquired = await leadership.wait_async(stop)
        if following is not None:
            following.cancel()
        if not acquired or stop.is_set():
            return
        worker = ModelWorker(config, agent, followers)
        leadership.announce()
        gc.freeze()
        await worker.run(stop)
    finally:
        leadership.release()


def main() -> None:
    config = load_config(os.environ)
    setup_logging("model", config.log_level, config.log_format)
    run_loop(amain(config))


if __name__ == "__main__":
    main()
