"""The gateway process: every served carrier's HTTP webhooks and media stream WebSockets on one port.

Owns the sockets, the arena (it creates it and unlinks it), writing caller frames into inbound rings and
writing what the pacer released to the sockets. It never calls a model and never waits on a worker
(docs/explanation/architecture.md#section-2): the wire rings are drained when the pacer's doorbell rings.

One asyncio.Protocol per TCP connection routes the first request: a WebSocket upgrade to a served carrier's
stream path is handed to picows (the transport switches to its protocol, which parses the upgrade and every
frame in C) with a StreamConnection, the one class for every carrier's stream; anything else goes to h11 (picows
serves only GET upgrades, the webhooks are POSTs). A send is a transport.write, never an awaited send that
starves the loop (docs/explanation/architecture.md#section-11). picows rather than websockets' sans-I/O
protocol: framing and parsing a 200-byte media message costs well under a microsecond in C against several in
websockets' Python parser (bench/micro/bench_websocket.py), and the gateway handles ~120 messages per
call-second.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Coroutine
from typing import Any
from pathlib import Path

import h11
import numpy as np
import zmq
from picows import WSAutoPingStrategy, WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport
from picows.picows import WSProtocol

from voicecore import metrics_text, prom_histogram, timing
from voicecore.bus import messages
from voicecore.outbound.call_fields import outbound_started
from voicecore.bus.transport import (
    ARENA_NAME_FILE,
    EVENTS,
    GATEWAY_INBOX,
    PACER_INBOX,
    Bus,
    bind_doorbell,
    ensure_runtime_dir,
    read_doorbells,
)
from voicecore.carriers.edge import CarrierEdge
from voicecore.carriers.events import (ENCODING_PCMA, ENCODING_PCMU, CallerAudio, Cleared, Dtmf, MarkEcho,
                                       ProtocolViolation, StreamStarted, StreamStopped)
from voicecore.carriers.wire import WireTemplates
from voicecore.config import METRICS_LOCAL, Config, load_config
from voicecore.drain import SUPERVISORD_PID_FILE, DrainFileError, DrainRequest, DrainWatch, stop_supervised_node
from voicecore.logs import run_loop, setup_logging
from voicecore.priority import raise_priority
from voicecore.shm import control as C
from voicecore.shm import rings
from voicecore.shm.arena import Arena, ArenaError, ArenaLayout
from voicecore.shm.warmup import warm_up_rings
from voicecore.standby import ROLES, Leadership, standby_pid
from voicecore.stats import LatencyLog
from voicecore.wsframes import binary_frames, text_frames
from voicecore.wsunix import UnixTransportView
from workers.gateway.core import (Admission, Drain, DrainStep, MarkDiscarded, MarkLedger, MarkPlayed, SlotTable,
                                  peer_close_code_is_valid)
from workers.gateway import carrier_core
from workers.gateway.reattach import ReattachService
from workers.gateway.tokens import TokenService
from workers.gateway.call_status import CallStatusLedger
from voicecore.store import database_url_for

log = logging.getLogger("voicecore.gateway")
# picows logs every accepted connection at INFO; the gateway logs calls itself.
ws_log = logging.getLogger("voicecore.gateway.ws")
ws_log.setLevel(logging.WARNING)

MAX_HTTP_BODY_BYTES = 64 * 1024
MAX_HTTP_HEADER_BYTES = 16 * 1024
# A carrier socket that stops reading would buffer our audio without bound: past this, the call is
# dropped rather than letting one stuck peer eat the gateway's memory (about 6 s of queued audio).
MAX_WRITE_BUFFER_BYTES = 1024 * 1024
UPGRADE_TIMEOUT_S = 5.0  # the WebSocket upgrade request must be complete this soon
HTTP_REASONS = {400: b"Bad Request", 403: b"Forbidden"}  # the statuses a carrier upgrade is refused with
HEAD_TIMEOUT_S = 5.0  # any connection's first request head must be complete this soon (a slow-header flood)
KEEPALIVE_IDLE_S = 30.0  # a kept-alive HTTP connection is closed after this long without a request
# Connections not yet in a call (no request served, no stream start accepted): by default at most twice the
# call slots, and at least this many (config max_pending_connections, max_pending_per_address).
PENDING_FRAMES_MAX = 100  # caller frames kept while a start waits for the token store (2 s; the wait is shorter)
CLOSE_TIMEOUT_S = 2.0  # after our close frame, how long the peer has to answer before TCP is closed
CARRIER_AMD_WAITING = 1000  # placed calls whose carrier AMD result came before their stream


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Gateway:
    """State shared by every connection of this process."""

    def __init__(self, config: Config, runtime_dir: Path, arena: Arena, stop: asyncio.Event | None = None) -> None:
        self.config = config
        self.stop = stop if stop is not None else asyncio.Event()  # set: this process leaves
        self.runtime_dir = runtime_dir
        self.arena = arena
        self.ctrl = arena.ctrl
        self.slots = SlotTable(config.max_calls)
        # The session tokens: signed ones any node of the fleet accepts, or local ones (self.tokens) only this
        # gateway knows (config stream_tokens; workers/gateway/tokens.py).
        self.token_service = TokenService(config)
        self.tokens = self.token_service.local
        # The re-attach step every answer document names (voicecore/reattach.py; its memory is the runtime dir's).
        self.reattach = ReattachService(config, runtime_dir, self.token_service.ledger, self.token_service.shared)
        # A placed call's status callbacks, kept in the call store for the campaign that placed it (none without a store).
        store_url = database_url_for(config)
        self.call_status = CallStatusLedger(store_url) if store_url else None
        self.calls: dict[int, StreamConnection] = {}  # slot -> connection
        self.ready_slots = np.zeros(config.max_calls, dtype=np.int64)
        self.bus = Bus(runtime_dir)
        # XPUB, not PUB: a subscriber's connection is heard (its subscribe message; verbose, so every one and not
        # only the first of its topic), and the live calls' CallStarted are published again for it. A PUB drops
        # what it publishes before a subscriber's connection is up: a model worker that started with the node
        # and connected a moment after a call's start never learnt the call's carrier ids, and its hang-up
        # and transfer then failed ("carrier ids are unknown").
        self.events = self.bus.bind(zmq.XPUB, EVENTS)
        self.events.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.inbox = self.bus.bind(zmq.PULL, GATEWAY_INBOX)
        # A call's start, to the pacer's inbox too: an idle pacer sleeps there until the next heartbeat, and this
        # wakes it at once (it learns of the call from the slot; the message only ends its wait).
        self.pacer = self.bus.connect(zmq.PUSH, PACER_INBOX)
        self.doorbell = bind_doorbell(runtime_dir)
        self.worker_seen_ns: dict[str, int] = {}
        self.worker_interval_ms: dict[str, int] = {}  # the heartbeat interval each process announced last
        self.wake = asyncio.Event()  # the serve loop's wait ends early: a call went live (back to the call interval)
        self.worker_stats: dict[str, dict[str, float]] = {}
        self.vendor_health: messages.VendorHealth | None = None  # the model worker's word on the vendor
        self.bargein_to_clear = LatencyLog()
        self.doorbell_to_drain = LatencyLog(capacity=10_000)
        # The same samples as a Prometheus histogram: cumulative since start, where the log keeps a window.
        self.bargein_clear_seconds = prom_histogram.Histogram(
            (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1))
        self.admission = Admission(config.pending_connections_limit,
                                   config.max_pending_per_address or 1 << 30)
        self.started_messages: dict[int, messages.CallStarted] = {}  # live calls, for a model worker that takes over
        # A placed call's carrier AMD result that came before its stream (Twilio's synchronous AMD answers in the
        # answer webhook): call SID -> AnsweredBy, sent to the model worker when the stream claims its slot.
        self.carrier_amd_waiting: dict[str, str] = {}
        self.model_pid = 0
        self.counters: dict[str, int] = {
            "connections_refused": 0,
            "calls_lost_in_gateway_restart": 0,  # calls of a gateway that died, found in its arena by this one
            "head_timeouts": 0,
            "calls_started": 0,
            "calls_ended": 0,
            "calls_rejected": 0,
            "violations": 0,
            "inbound_frames": 0,
            "inbound_overruns": 0,
            "wire_messages": 0,
            "clears_sent": 0,
            "hold_clears_sent": 0,
            "marks_played": 0,
            "marks_discarded": 0,
            "marks_unknown": 0,
            "status_callbacks": 0,
            "webhooks": 0,
            "subscribers_welcomed": 0,  # subscribers to the events socket sent the live calls' starts (on_subscriber)
        }
        # The carriers served beside Twilio: those whose secret is configured (workers/gateway/carrier_core.py).
        self.carrier_settings = carrier_core.CarrierSettings.from_config(config)
        self.carriers_enabled = self.carrier_settings.enabled()
        self.webhook_routes = carrier_core.webhook_routes(self.carrier_settings)  # Twilio's and the served carriers'
        self.carrier_streams = carrier_core.stream_paths(self.carrier_settings.served())  # Twilio's too
        self.counters.update({name: 0 for name in ("carrier_webhooks", "carrier_streams_started", "carrier_upgrades_refused",
                                                   "carrier_clears_confirmed", "carrier_edge_messages")})
        self.heartbeat_seq = 0
        self.stream_url = self.config.stream_base_url  # node_stream_url: the stream comes back to this node
        # The URLs a carrier may have dialled our stream paths at (Plivo signs the one it dialled).
        self.stream_url_bases = carrier_core.stream_url_bases(self.stream_url, self.config.base_url)
        # The drain (voicecore/drain.py: a file in the runtime dir, so a gateway that takes over drains too).
        self.drain = Drain()
        self.drain_watch = DrainWatch(runtime_dir)
        self.drain_step_soon: asyncio.Handle | None = None
        self.refusal = f"redirected to {config.drain_redirect_url}" if config.drain_redirect_url else "rejected busy"

    # --- doorbell: the pacer put entries into wire rings ------------------------------------------
    def on_doorbell(self) -> None:
        rung_at_ns = read_doorbells(self.doorbell)
        self.drain_wire()
        if rung_at_ns is not None:
            # How long after the pacer released audio it went out: this loop's own delay (no CPU, or busy),
            # which the lead must absorb (docs/explanation/architecture.md#section-2).
            self.doorbell_to_drain.add_ns(time.monotonic_ns() - rung_at_ns)

    def drain_wire(self) -> None:
        # One pass over the arena in numba finds the slots with news (the pacer rings for one group of
        # calls at a time: most slots have none).
        n = rings.wire_ready_slots(self.ctrl, self.ready_slots)
        calls = self.calls
        for slot in self.ready_slots[:n].tolist():
            conn = calls.get(slot)
            if conn is not None:
                conn.drain_wire()

    # --- control bus ---------------------------------------------------------------------------------
    def on_subscriber(self) -> None:
        """A subscriber connected to the events socket (or its connection came back): the live calls' starts
        again, for a subscriber that missed them."""
        joined = False
        while self.events.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            try:
                frame = self.events.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            joined = joined or frame[:1] == b"\x01"  # 1: subscribe, 0: unsubscribe
        if joined:
            self.counters["subscribers_welcomed"] += 1
            for started in self.started_messages.values():
                self.bus.send(self.events, started)

    def on_inbox(self) -> None:
        while self.inbox.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            for message in self.bus.receive_nowait(self.inbox):
                if isinstance(message, messages.Heartbeat):
                    self.worker_seen_ns[message.process] = time.monotonic_ns()
                    self.worker_interval_ms[message.process] = message.interval_ms
                    if message.process == "model" and self.model_pid != message.pid:
                        # A model worker that took over (or restarted) knows the calls from the arena, but
                        # not their AccountSids (a hang-up or transfer needs them): announce them again.
                        self.model_pid = message.pid
                        for started in self.started_messages.values():
                            self.bus.send(self.events, started)
                elif isinstance(message, messages.Stats):
                    self.worker_stats[message.process] = message.values
                    self.worker_seen_ns[message.process] = time.monotonic_ns()
                elif isinstance(message, messages.VendorHealth):
                    self.vendor_health = message
                elif isinstance(message, messages.EndStream):
                    self.end_stream(message)

    def loop_interval_ms(self) -> int:
        """The serve loop's period: the heartbeat's, which is the idle one with no call and no drain."""
        return timing.heartbeat_interval_ms(bool(self.calls) or self.drain.draining)

    def heartbeat(self, interval_ms: int) -> None:
        self.heartbeat_seq += 1
        self.bus.send(self.events, messages.Heartbeat("gateway", os.getpid(), self.heartbeat_seq, time.monotonic_ns(),
                                                      interval_ms))

    # --- call slots ---------------------------------------------------------------------------------
    def claim_slot(self, conn: StreamConnection, start: carrier_core.CallIds) -> int | None:
        for rested in self.slots.due_for_free(now_ms()):
            self.arena.set_slot_state(rested, C.SLOT_FREE)
        # How the pacer writes this call's messages: its carrier module's templates (voicecore/carriers/wire.py).
        templates = conn.call_wire_templates(start)
        slot = self.slots.claim()
        if slot is None:
            return None
        # The arena zeroes every counter (all three rings start at index 0), writes the ids and the
        # templates, and publishes SLOT_ACTIVE last, so a worker that sees the new GENERATION sees a clean
        # slot and the pacer the call's templates.
        # The start's time is stamped before the slot is published: a model worker that saw the slot with no
        # stamp took it for one no gateway stamped and started the session at once, without the CallStarted on
        # its way (an outbound call's fields: no answer detection).
        generation = self.arena.claim_slot(slot, start.stream_sid, start.call_sid, templates, conn.call_lead_ns(),
                                           conn.call_backlog_max_frames(), conn.call_codec(),
                                           started_at_ns=time.monotonic_ns())
        conn.use_wire_templates(templates)
        self.calls[slot] = conn
        self.counters["calls_started"] += 1
        self.wake.set()
        # The carrier and the ids its stream named, for hang-up and transfer ("" for Twilio's: carrier_core.call_ids).
        started = messages.CallStarted(slot, generation, start.call_sid, start.stream_sid, start.account_sid,
                                       start.carrier, start.carrier_call_id, start.carrier_account_id)
        started = outbound_started(started, start.custom_parameters)
        self.started_messages[slot] = started
        self.bus.send(self.events, started)
        self.bus.send(self.pacer, started)
        answered_by = self.carrier_amd_waiting.pop(start.call_sid, "")
        if answered_by and started.direction:
            self.bus.send(self.events, messages.CarrierAmd(slot, generation, answered_by))
        return slot

    def carrier_amd(self, call_sid: str, answered_by: str) -> None:
        """A placed call's verified carrier AMD result: to the model worker serving the call, or kept until its
        stream starts (at most CARRIER_AMD_WAITING of them: the oldest goes first)."""
        for slot, conn in self.calls.items():
            if conn.call_sid == call_sid:
                started = self.started_messages.get(slot)
                if started is not None and started.direction:
                    self.bus.send(self.events, messages.CarrierAmd(slot, started.generation, answered_by))
                return
        self.carrier_amd_waiting[call_sid] = answered_by
        while len(self.carrier_amd_waiting) > CARRIER_AMD_WAITING:
            del self.carrier_amd_waiting[next(iter(self.carrier_amd_waiting))]

    def end_stream(self, message: messages.EndStream) -> None:
        """The model worker ends a call by closing its stream (a carrier with no REST call for it: Exotel's
        flow then runs its next applet). A call that already ended, or a slot now another call's, is left alone."""
        conn = self.calls.get(message.slot)
        if conn is None or int(self.ctrl[message.slot, C.GENERATION]) != message.generation:
            return
        log.info("call %s: stream closed for the agent (%s)", conn.call_sid, message.reason)
        conn._end("ended by the agent")
        conn._close(1000, "call ended by the agent")

    def release_slot(self, slot: int, reason: str) -> None:
        conn = self.calls.pop(slot, None)
        if conn is None:
            return
        self.reattach.stream_ended(conn.call_sid, reason)
        self.started_messages.pop(slot, None)
        self.arena.set_slot_state(slot, C.SLOT_ENDING)
        self.slots.release(slot, now_ms())
        self.counters["calls_ended"] += 1
        self.bus.send(self.events, messages.CallEnded(slot, int(self.ctrl[slot, C.GENERATION]), reason))
        if self.drain.draining:
            self.step_drain_soon()  # the last call's end stops a draining node at once, not at the next heartbeat

    def step_drain_soon(self) -> None:
        if self.drain_step_soon is None:
            self.drain_step_soon = asyncio.get_running_loop().call_soon(self.step_drain)

    # --- drain ----------------------------------------------------------------------------------------
    def poll_drain(self) -> None:
        """Begin draining when the runtime dir holds a drain request (checked before listening, then on each
        heartbeat)."""
        try:
            request = self.drain_watch.poll()
        except DrainFileError as exc:
            # Someone asked for a drain: honour it, on this node's own timeout from now.
            log.warning("drain file %s unreadable (%s): draining with drain_timeout_s=%d from now",
                        self.drain_watch.path, exc, self.config.drain_timeout_s, extra={"problem": "drain"})
            request = DrainRequest(time.time(), time.monotonic_ns(), float(self.config.drain_timeout_s), "?")
        if request is None:
            return
        if self.drain.begin(now_ms(), request.deadline_monotonic_ns // 1_000_000, request.started_at_s,
                            request.deadline_at_s):
            log.warning("draining (asked by %s): %d live calls go on for at most %.0f s more; new calls are %s",
                        request.requested_by or "?", len(self.calls),
                        max(0.0, request.remaining_s(time.monotonic_ns())), self.refusal)
            self.step_drain()

    def step_drain(self) -> None:
        self.drain_step_soon = None
        if self.stop.is_set():
            return  # this gateway is leaving already (the node is being stopped): the calls it closes end no drain
        step = self.drain.step(now_ms(), len(self.calls))
        if step is DrainStep.END_CALLS:
            ended = list(self.calls.values())
            for conn in ended:
                conn._end("drain deadline")  # its one log line: "call CA...: ended (drain deadline)"
                conn._close(1001, "server draining")
            self.drain.ended_at_deadline(len(ended), [conn.call_sid for conn in ended
                                                      if carrier_core.reattaches(conn.carrier)], now_ms())
            step = self.drain.step(now_ms(), len(self.calls))
        if step is DrainStep.STOP:
            self.stop_node()

    def stop_node(self) -> None:
        """The drain is over: stop the node. Under supervisord (our parent, the pid in its pidfile) that is a
        SIGTERM to it and to every program at once (voicecore/drain.py stop_supervised_node; `voicecore up`
        then cleans up and exits too); this gateway leaves by itself. A gateway run by hand just leaves."""
        stats = self.drain.statistics(now_ms())
        try:
            supervisord = int((self.runtime_dir / SUPERVISORD_PID_FILE).read_text().strip())
        except (FileNotFoundError, ValueError):
            supervisord = 0
        parent = os.getppid()
        log.warning("drained: stopping the node (%d calls refused, %d ended at the deadline)",
                    stats.calls_refused, stats.calls_ended_at_deadline)
        if supervisord == parent and parent > 1:
            stop_supervised_node(parent, os.getpid(), [pid for role in ROLES
                                                       if (pid := standby_pid(self.runtime_dir, role))])
        self.stop.set()

    # --- reports ------------------------------------------------------------------------------------
    def health(self) -> dict:
        """/healthz: "ok", "draining", "model_vendor_refused" (the realtime vendor refuses this node's
        configuration: its key, model, quota or session configuration; "model_vendor" says what it said), or
        "workers_down" (a process a call needs, ESSENTIAL_WORKERS, has not been heard from within three of its
        heartbeat intervals, or not yet since the start: "workers_down" names them; no caller would hear the
        agent; timing.ESSENTIAL_WORKERS). All but "ok" are answered 503: a load balancer's readiness check stops sending calls."""
        now = time.monotonic_ns()
        workers = {name: round((now - seen) / 1e6, 1) for name, seen in self.worker_seen_ns.items()}
        # Dead after HEARTBEAT_MISSES_DEAD of the intervals the process announced (an idle one beats slower).
        dead_after_ms = {name: self.worker_interval_ms.get(name, timing.HEARTBEAT_MS) * timing.HEARTBEAT_MISSES_DEAD
                         for name in workers}
        health = {
            "status": "draining" if self.drain.draining else "ok",
            "draining": self.drain.draining,
            "calls": len(self.calls),
            "max_calls": self.config.max_calls,
            "workers_heartbeat_age_ms": workers,
            "workers_alive": {name: age <= dead_after_ms[name] for name, age in workers.items()},
        }
        vendor = self.vendor_health
        down = [name for name in timing.ESSENTIAL_WORKERS if not health["workers_alive"].get(name)]
        health["healthy"] = not self.drain.draining and (vendor is None or vendor.ok) and not down
        if down:
            health["workers_down"] = down
        if vendor is not None and not vendor.ok:
            health["model_vendor"] = {"ok": False, "error": vendor.reason, "since": vendor.since_s}
            if not self.drain.draining:
                health["status"] = "model_vendor_refused"
        if health["status"] == "ok" and down:
            health["status"] = "workers_down"
        if self.drain.draining:
            stats = self.drain.statistics(now // 1_000_000)
            health["drain"] = {"started_at": stats.started_at_s, "deadline_at": stats.deadline_at_s,
                               "remaining_s": round(stats.remaining_s, 1), "streams_awaited": stats.streams_awaited,
                               "reattach_awaited": stats.reattach_awaited}
        return health

    def drain_metrics(self) -> dict:
        stats = self.drain.statistics(now_ms())
        return {"draining": int(stats.draining), "drain_started_at": stats.started_at_s,
                "drain_deadline_at": stats.deadline_at_s, "drain_remaining_s": round(stats.remaining_s, 3),
                "drain_streams_awaited": stats.streams_awaited, "calls_refused_draining": stats.calls_refused,
                "calls_ended_at_drain_deadline": stats.calls_ended_at_deadline}

    def metrics(self) -> dict:
        summary = self.bargein_to_clear.summary_ms()
        return {
            "gateway": {**self.counters, "calls_active": len(self.calls), "pid": os.getpid(),
                        "connections_pending": self.admission.pending, **self.drain_metrics(),
                        **self.token_service.metrics(), **self.reattach.counts,
                        **self.bargein_clear_seconds.flat("bargein_clear_seconds")},
            "bargein_decision_to_clear_ms": summary,
            "doorbell_to_drain_ms": self.doorbell_to_drain.summary_ms(),
            "workers": self.worker_stats,
        }


class ConnectionRouter(asyncio.Protocol):
    """One TCP connection: reads the first request head and hands the connection to HTTP or WebSocket."""

    def __init__(self, gateway: Gateway, metrics_only: bool = False) -> None:
        self.gateway = gateway
        self.metrics_only = metrics_only  # the metrics_listen listener: /metrics and /healthz, nothing else
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.handler: HttpConnection | None = None
        self.over_unix_socket = False
        self.ticket: AdmissionTicket | None = None
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        self.over_unix_socket = sock is not None and sock.family == socket.AF_UNIX
        if sock is not None and not self.over_unix_socket:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and not self.over_unix_socket else ""
        gw = self.gateway
        if not gw.admission.admit(address):
            gw.counters["connections_refused"] += 1
            if gw.counters["connections_refused"] in (1, 10, 100) or gw.counters["connections_refused"] % 1000 == 0:
                log.warning("connection from %s refused: %d connections wait for a request or a stream start "
                            "(%d refused so far)", address or "the unix socket", gw.admission.pending,
                            gw.counters["connections_refused"], extra={"problem": "flood"})
            self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
                                 b"Content-Length: 0\r\n\r\n")
            self.transport.close()
            return
        self.ticket = AdmissionTicket(gw.admission, address)
        self.head_timer = asyncio.get_running_loop().call_later(HEAD_TIMEOUT_S, self._head_timeout)

    def _head_timeout(self) -> None:
        if not self.ticket.held:
            return  # its first request was answered in time (a stream's upgrade cancels the timer)
        self.gateway.counters["head_timeouts"] += 1
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)
            return
        if self.ticket is None:
            return  # refused: closing
        self.buffer += data
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0 and len(self.buffer) <= MAX_HTTP_HEADER_BYTES:
            return
        if head_end < 0 or head_end > MAX_HTTP_HEADER_BYTES:
            # too long, whether it came in pieces or in one segment (the answer must not depend on that)
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            self.transport.close()
            return
        head = bytes(self.buffer[:head_end]).lower()
        first_line = head.split(b"\r\n", 1)[0]
        is_upgrade = first_line.startswith(b"get ") and b"upgrade: websocket" in head
        data, self.buffer = bytes(self.buffer), bytearray()
        if self.metrics_only:
            self.handler = HttpConnection(self.gateway, self.transport, self.ticket, metrics_only=True)
            self.handler.data_received(data)
            return
        if is_upgrade and self._stream_upgrade(first_line, data, head_end):
            return
        # The timer keeps running for plain HTTP: the first request's body must be complete by then too, or
        # a body that never ends would hold its place among the pending connections for ever.
        self.handler = HttpConnection(self.gateway, self.transport, self.ticket)
        self.handler.data_received(data)

    def _stream_upgrade(self, first_line: bytes, data: bytes, head_end: int) -> bool:
        """An upgrade to a served carrier's stream path (/twilio/stream, /telnyx/stream, ...): check what its
        carrier puts on the upgrade (carrier_core.check_upgrade: Plivo's signature, Vonage's JWT, Exotel's Basic
        auth; nothing for Twilio and Telnyx) and hand it to a stream connection for that carrier, or refuse it
        with one log line; say True. Anything else is not ours (False)."""
        target = first_line.split(b" ")[1].decode("latin-1")
        gw = self.gateway
        carrier = gw.carrier_streams.get(target.split("?", 1)[0])
        if carrier is None:
            return False
        if self.head_timer is not None:
            self.head_timer.cancel()  # picows' upgrade timeout and the start deadline take over
        refusal = carrier_core.check_upgrade(carrier, target, carrier_core.upgrade_headers(data[:head_end]),
                                             gw.carrier_settings, gw.stream_url_bases, time.time())
        if refusal is not None:
            gw.counters["carrier_upgrades_refused"] += 1
            log.warning("%s stream upgrade refused: %s (answered %d)", carrier, refusal.reason, refusal.status,
                        extra={"problem": "upgrade"})
            reason = refusal.reason.encode() + b"\n"
            self.transport.write(b"HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (refusal.status, HTTP_REASONS[refusal.status],
                                                                     len(reason), reason))
            self.transport.close()
            return True
        self._hand_to_websocket(data, StreamConnection(gw, carrier, target, self.ticket))
        return True

    def _hand_to_websocket(self, data: bytes, stream: StreamConnection) -> None:
        """Switch the transport to picows' protocol and give it the bytes read so far (the upgrade)."""
        protocol = WSProtocol(
            None, None, False, lambda _request: stream, ws_log, True, UPGRADE_TIMEOUT_S,
            False, 20.0, 20.0, WSAutoPingStrategy.PING_WHEN_IDLE, True, timing.MAX_MESSAGE_BYTES, None, 4096,
        )
        self.transport.set_protocol(protocol)
        protocol.connection_made(UnixTransportView(self.transport) if self.over_unix_socket else self.transport)
        view = memoryview(data)
        while view:
            buffer = protocol.get_buffer(-1)
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            view = view[n:]
            protocol.buffer_updated(n)

    def connection_lost(self, exc: Exception | None) -> None:
        # only while this protocol is the transport's: a stream's connection is picows' from the upgrade on
        if self.head_timer is not None:
            self.head_timer.cancel()
        if self.ticket is not None:
            self.ticket.release()
        if self.handler is not None:
            self.handler.connection_lost(exc)


class AdmissionTicket:
    """One admitted connection's place in the gateway's Admission, given back once."""

    __slots__ = ("admission", "address", "held")

    def __init__(self, admission: Admission, address: str) -> None:
        self.admission = admission
        self.address = address
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.admission.release(self.address)


class HttpConnection:
    """Plain HTTP: the voice webhook, the stream status callback, health and metrics."""

    def __init__(self, gateway: Gateway, transport: asyncio.Transport, ticket: AdmissionTicket | None = None,
                 metrics_only: bool = False) -> None:
        self.gateway = gateway
        self.transport = transport
        self.ticket = ticket  # given back once the first request is answered
        self.metrics_only = metrics_only
        sock = transport.get_extra_info("socket")
        self.over_unix_socket = sock is not None and sock.family == socket.AF_UNIX
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HTTP_HEADER_BYTES)
        self.request: h11.Request | None = None
        self.body = bytearray()
        self.idle_timer: asyncio.TimerHandle | None = None
        self.answering: asyncio.Task | None = None  # a request answered when this task ends (_answer_later)

    def data_received(self, data: bytes) -> None:
        # The idle timer is not reset by data, only by a complete request: a kept-alive connection that
        # trickles a request without ever finishing it is closed like an idle one.
        self.conn.receive_data(data)
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                log.info("bad HTTP request: %s", exc, extra={"problem": "http"})
                self._respond(400, b"bad request\n", b"text/plain", close=True)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self.request = event
                self.body.clear()
            elif isinstance(event, h11.Data):
                self.body += event.data
                if len(self.body) > MAX_HTTP_BODY_BYTES:
                    self._respond(413, b"body too large\n", b"text/plain", close=True)
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._handle()
                if self.answering is not None:
                    return  # answered when its task ends (_answered); a next request waits in h11 till then
                if not self._next_cycle():
                    return
            elif isinstance(event, h11.ConnectionClosed):
                self.transport.close()
                return

    def _next_cycle(self) -> bool:
        """After a response: close, or wait for the connection's next request; False when it is closed."""
        if self.conn.our_state is h11.MUST_CLOSE or self.transport.is_closing():
            self.transport.close()
            return False
        try:
            self.conn.start_next_cycle()
        except h11.LocalProtocolError:
            self.transport.close()
            return False
        # a kept-alive connection waits this long for its next whole request, no longer
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = asyncio.get_running_loop().call_later(KEEPALIVE_IDLE_S, self.transport.close)
        return True

    def _answer_later(self, answering: Coroutine[Any, Any, None]) -> None:
        """Answer the request when ``answering`` (which calls _respond) is done: a webhook whose answer waits for
        the fleet's store. The connection reads no further request meanwhile."""
        self.answering = asyncio.get_running_loop().create_task(answering)
        self.answering.add_done_callback(self._answered)

    def _answered(self, task: asyncio.Task) -> None:
        self.answering = None
        if task.cancelled() or self.transport.is_closing():
            return
        if task.exception() is not None:
            log.error("webhook answer failed: %r", task.exception(), extra={"problem": "http"})
            if self.conn.our_state is h11.SEND_RESPONSE:
                self._respond(500, b"internal error\n", b"text/plain", close=True)
            return
        if self._next_cycle():
            self.data_received(b"")  # a request that came meanwhile

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.answering is not None:
            self.answering.cancel()

    def _respond(self, status: int, body: bytes, content_type: bytes, close: bool = False) -> None:
        if self.ticket is not None:
            self.ticket.release()  # served: no longer a connection waiting for its first request
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        if close:
            headers.append((b"connection", b"close"))
        try:
            out = self.conn.send(h11.Response(status_code=status, headers=headers))
            out += self.conn.send(h11.Data(data=body))
            out += self.conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            # The request was unparseable before h11 knew what it was: answer by hand.
            out = b"HTTP/1.1 %d x\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)
            close = True
        self.transport.write(out)
        if close:
            self.transport.close()

    def _handle(self) -> None:
        request = self.request
        assert request is not None
        path = request.target.split(b"?", 1)[0].decode("latin-1")
        method = request.method
        gw = self.gateway
        if method == b"GET" and path == "/healthz":
            health = gw.health()
            self._respond(200 if health["healthy"] else 503, json.dumps(health).encode(), b"application/json")
        elif self.metrics_only and path != "/metrics":
            self._respond(404, b"not found (this listener serves /metrics and /healthz)\n", b"text/plain")
        elif method == b"GET" and path == "/metrics" and not self._metrics_here(request):
            pass  # answered: 403 (not this host's request) or 404 (served on metrics_listen)
        elif method == b"GET" and path == "/metrics":
            # JSON by default (the demo and bench read it); exposition text when scraped as such.
            accept = b",".join(value for name, value in request.headers if name == b"accept").decode("latin-1")
            query = request.target.partition(b"?")[2].decode("latin-1")
            if metrics_text.wants_text(accept, query):
                self._respond(200, metrics_text.render(gw.metrics()).encode(), metrics_text.CONTENT_TYPE.encode())
            else:
                self._respond(200, json.dumps(gw.metrics()).encode(), b"application/json")
        elif path in gw.webhook_routes:
            self._handle_webhook(path, gw.webhook_routes[path])
        elif path in ("/healthz", "/metrics"):
            self._respond(405, b"method not allowed\n", b"text/plain")
        else:
            self._respond(404, b"not found\n", b"text/plain")

    def _metrics_here(self, request: h11.Request) -> bool:
        """May this request read /metrics here? metrics_listen "local": this host's requests only; an address of
        its own: only on that listener. Answers the refusal itself."""
        if self.metrics_only:
            return True
        if self.gateway.config.metrics_listen != METRICS_LOCAL:
            self._respond(404, b"not found (/metrics is served on metrics_listen)\n", b"text/plain")
            return False
        address = self.ticket.address if self.ticket is not None else ""
        if not metrics_text.local_request(address, self.over_unix_socket, (name for name, _ in request.headers)):
            self._respond(403, b"/metrics is served to this host only (set metrics_listen for a scraper on "
                               b"another host)\n", b"text/plain")
            return False
        return True

    def _handle_webhook(self, path: str, route: carrier_core.Route) -> None:
        """A served carrier's answer (or event, or transfer) webhook, Twilio's included: its signature or
        credentials, then the answer document with a session token (workers/gateway/carrier_core.py has the
        rules, the carrier's descriptor its own; one log line for a refusal)."""
        gw = self.gateway
        request = self.request
        method = request.method.decode("ascii", "replace")
        if method not in route.methods:
            self._respond(405, b"method not allowed\n", b"text/plain")
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.headers}
        target = request.target.decode("latin-1")
        try:
            outcome = carrier_core.check_webhook(route, method, target, headers, bytes(self.body), gw.carrier_settings,
                                                 gw.config.base_url + target, time.time())
        except ValueError as exc:  # the configured secret is unusable: ours, not the carrier's
            log.error("webhook %s: the configured %s secret cannot be used: %s", path, route.carrier, exc,
                      extra={"problem": "configuration"})
            self._respond(500, b"server misconfigured\n", b"text/plain")
            return
        if isinstance(outcome, carrier_core.Refusal):
            problem = outcome.problem or ("signature" if outcome.status == 403 else "form")
            level = logging.INFO if outcome.quiet else logging.WARNING
            if outcome.log:
                log.log(level, "%s", outcome.log, extra={"problem": problem})
            else:
                log.log(level, "webhook %s: %s (answered %d)", path, outcome.reason, outcome.status,
                        extra={"problem": problem})
            self._respond(outcome.status, outcome.reason.encode() + b"\n", b"text/plain")
            return
        # A placed call's progress: its status callbacks, and for a carrier with no "answered" callback (Plivo)
        # its answer webhook.
        if outcome.answered_by:
            gw.carrier_amd(outcome.call_id, outcome.answered_by)
            if outcome.call_status is None and outcome.kind == carrier_core.EVENT and gw.call_status is not None:
                gw.call_status.record_answered_by(outcome.call_id, outcome.answered_by)
        progress = outcome.call_status
        if progress is not None and gw.call_status is not None:
            # the id the call's stream and record go by, when the carrier names it beside the placed call's
            # (Plivo: CallUUID beside RequestUUID): kept with the status, so a campaign finds the call's record
            record_call_sid = outcome.call_id if outcome.call_id and outcome.call_id != progress.call_sid else ""
            gw.call_status.record(progress.call_sid, progress.status, progress.sequence, progress.direction,
                                  progress.answered_by, progress.duration_s, record_call_sid)
        if outcome.kind == carrier_core.EVENT:
            gw.counters["status_callbacks"] += 1
            if outcome.note:
                log.info("%s", outcome.note)
            self._respond(204, b"", b"text/plain")
            return
        if outcome.kind == carrier_core.TRANSFER:
            # Plivo fetches the aleg_url of the model worker's transfer: the <Dial> it asked for (its query,
            # which Plivo's signature covers). No token, no drain check: the call is live already.
            try:
                content_type, body = carrier_core.transfer_document(outcome, target)
            except ValueError:
                log.warning("webhook %s: no usable transfer target (answered 400)", path, extra={"problem": "form"})
                self._respond(400, b"no usable transfer target\n", b"text/plain")
                return
            log.info("call %s: %s transfer answered", outcome.call_id, route.carrier)
            self._respond(200, body, content_type)
            return
        if outcome.kind == carrier_core.REATTACH:
            self._answer_later(self._handle_reattach(path, route, outcome))
            return
        if not gw.drain.voice_webhook(outcome.call_id, now_ms()):
            # Draining: refused before the call is connected, as the carrier's descriptor says (Twilio: <Reject>
            # or <Redirect>; the others: 503, so their fallback answer URL, where one is configured, takes it).
            refused = carrier_core.draining_answer(outcome, gw.carrier_settings)
            log.info("%s", refused.log)
            self._respond(refused.status, refused.body, refused.content_type)
            return
        token = gw.token_service.issue(outcome.call_id)
        reattach_token = gw.reattach.issue(outcome.call_id) if carrier_core.reattaches(route.carrier) else None
        try:
            content_type, body = carrier_core.answer_document(outcome, gw.stream_url, token, gw.carrier_settings,
                                                              reattach_token)
        except ValueError as exc:  # our public URL cannot be put into the carrier's document
            log.error("webhook %s: cannot write the answer: %s", path, exc, extra={"problem": "configuration"})
            self._respond(500, b"server misconfigured\n", b"text/plain")
            return
        gw.counters["webhooks"] += 1
        if route.carrier in gw.carriers_enabled:  # the carriers served beside Twilio
            gw.counters["carrier_webhooks"] += 1
        self._respond(200, body, content_type)


    async def _handle_reattach(self, path: str, route: carrier_core.Route, outcome: carrier_core.AnswerRequest) -> None:
        """The carrier went on after a stream's end (voicecore/reattach.py): a new stream for a call whose
        stream ended unexpectedly, the carrier's hang-up for one that is over, 403 for a token we did not issue.
        With a fleet's store, the decision waits for its word (at most token_store_timeout_ms)."""
        gw = self.gateway
        decision = await gw.reattach.decide(outcome.token, outcome.call_id, gw.drain.draining, outcome.call_completed)
        if self.transport.is_closing():
            return
        if decision.action == "refuse":
            log.warning("webhook %s: %s (call %s, answered 403)", path, decision.reason, decision.call_sid or "?",
                        extra={"problem": "reattach"})
            self._respond(403, b"refused\n", b"text/plain")
            return
        if decision.action == "hangup":
            log.info("call %s: not re-attached, %s", outcome.call_id, decision.reason)
            content_type, body = carrier_core.hangup_document(route.carrier)
            self._respond(200, body, content_type)
            if gw.drain.draining:  # a call ended at the deadline had this answer owed: the node may stop now
                gw.drain.reattach_answered(outcome.call_id)
                gw.step_drain_soon()
            return
        try:
            content_type, body = carrier_core.answer_document(
                outcome, gw.stream_url, gw.token_service.issue(outcome.call_id), gw.carrier_settings,
                gw.reattach.issue(outcome.call_id))
        except ValueError as exc:
            log.error("webhook %s: cannot write the answer: %s", path, exc, extra={"problem": "configuration"})
            self._respond(500, b"server misconfigured\n", b"text/plain")
            return
        log.info("call %s: %s", outcome.call_id, decision.reason)
        self._respond(200, body, content_type)


class StreamConnection(WSListener):
    """One carrier's media stream WebSocket (a picows listener), from the accepted upgrade to the close: every
    carrier's, Twilio's included.

    Every message goes through the carrier's protocol module (voicecore/carriers/<name>/, from its descriptor:
    carrier_core.new_stream_protocol) to the carrier-neutral events (voicecore/carriers/events.py): the session
    token and the slot claim (``_on_start`` / ``_start_when_confirmed`` / ``_accept_start``), the inbound ring
    (``_on_caller_frame``), mark echoes (``_on_mark_echo``), DTMF, clears confirmed, stop and violations. A carrier
    whose caller audio is the arena's frames already (its descriptor's ``whole_frames``: Twilio) has them written
    into the ring as they are, the common media message read by its protocol's ``receive_media`` fast path (no
    event, no JSON parser); any other carrier's audio is transcoded to 20 ms mu-law frames once, by the stream's
    edge (voicecore/carriers/edge.py). The pacer writes the call's messages from its carrier's final templates
    (Twilio, Telnyx and Plivo in mu-law at 8 kHz) or as raw entries that :meth:`carrier_edge` finishes (Vonage,
    Exotel, any other encoding or rate); what the edge makes of one doorbell's entries goes out in one write."""

    def __init__(self, gateway: Gateway, carrier: str, target: str, ticket: AdmissionTicket | None = None) -> None:
        self.gateway = gateway
        self.carrier = carrier
        self.target = target  # the upgrade's path and query (Exotel's dynamic URL may carry the token there)
        self.ticket = ticket  # given back when the call is accepted or the connection ends
        self.transport: WSTransport | None = None
        self.protocol = carrier_core.new_stream_protocol(carrier)
        # Caller audio as the arena's frames: the protocol's fast path for its common media message, if it has one.
        self.whole_frames = carrier_core.whole_frames(carrier)
        self.receive_media = getattr(self.protocol, "receive_media", None) if self.whole_frames else None
        # One of the carriers served beside Twilio: counted in the carrier_* counters, its stream's plan logged.
        self.beside_twilio = carrier in gateway.carriers_enabled
        self.ledger = MarkLedger()
        self.slot: int | None = None
        self.call_sid = "-"
        self.fragments: list[bytes] = []
        self.fragments_bytes = 0
        self.binary = False
        self.ctrl = gateway.ctrl
        self.loop = asyncio.get_running_loop()
        self.deadline = self.loop.call_later(timing.START_DEADLINE_MS / 1000, self._start_deadline)
        self.close_timer: asyncio.TimerHandle | None = None
        self.closing = False
        # caller frames that came while the fleet's token store confirmed the start (then into the ring)
        self.pending_frames: list[tuple[int, int, bytes]] | None = None
        # The call's plan at its start (carrier_core.plan_stream): the pacer's templates, the edge, the lead, the
        # backlog bound and the law of the call's frames.
        self.templates: WireTemplates | None = None
        self.edge: CarrierEdge | None = None
        self.lead_ms = 0  # the call's own lead for the pacer (carrier_core.pacer_lead_ms; 0: the configured one)
        self.backlog_frames = 0  # the call's bound on unconfirmed audio (carrier_core.backlog_max_frames; 0: none)
        self.arena_law = ENCODING_PCMU  # the law of the call's frames (carrier_core.arena_encoding)
        # A carrier whose buffer its echoes bound (Plivo): what of the audio sent its echoes confirmed, published
        # to the pacer (CARRIER_PLAYED_POS). None: the pacer keeps the lead by time alone.
        self.backlog = None  # the carrier's keeper of the call's backlog bound (carrier_core.StreamPlan)
        self.edge_out: list[bytes] = []  # framed messages of this doorbell's raw entries, written at its end
        # How to read and send the wire entries the pacer writes for this call (use_wire_templates).
        self.wire_media_prefix = b""
        self.wire_mark_prefix = b""
        self.wire_mark_suffix_bytes = 0
        self.wire_clear = b""
        self.wire_raw = False
        self.wire_frames = text_frames

    def call_wire_templates(self, start: carrier_core.CallIds) -> WireTemplates:
        """How the pacer writes this call's messages (claim_slot writes them into the slot): its carrier's, from
        the stream's plan."""
        return self.templates

    def call_lead_ns(self) -> int:
        """The send-ahead the pacer keeps in this call's carrier buffer (claim_slot writes it into the slot,
        LEAD_NS): 0, the pacer's configured lead, unless the carrier's edge holds audio back."""
        return self.lead_ms * 1_000_000

    def call_backlog_max_frames(self) -> int:
        """The bound on this call's audio its carrier's echoes have not confirmed played (claim_slot writes it,
        BACKLOG_MAX_FRAMES): 0, none, unless the carrier's echoes bound its buffer (Plivo)."""
        return self.backlog_frames

    def call_codec(self) -> int:
        """The law of this call's frames (claim_slot writes it, CODEC): mu-law, or A-law for a stream in A-law
        passed through to the model."""
        return C.CODEC_ALAW if self.arena_law == ENCODING_PCMA else C.CODEC_ULAW

    def publish_played_position(self) -> None:
        """What the carrier's echoes (or a clear sent) settled of this call's audio, for the pacer's bound."""
        if self.slot is not None:
            self.ctrl[self.slot, C.CARRIER_PLAYED_POS] = self.backlog.played_position_frames()

    def use_wire_templates(self, templates: WireTemplates) -> None:
        """The call's templates, as the gateway put them in the arena: the drain tells an entry's kind by
        their heads (media, mark, clear: none a prefix of another) and sends final entries as text frames
        (binary when the carrier asks for them); raw entries go to :meth:`carrier_edge`."""
        self.wire_media_prefix = templates.media_prefix
        self.wire_mark_prefix = templates.mark_prefix
        self.wire_mark_suffix_bytes = len(templates.mark_suffix)
        self.wire_clear = templates.clear
        self.wire_raw = templates.raw
        self.wire_frames = binary_frames if templates.binary else text_frames

    # --- inbound -------------------------------------------------------------------------------------
    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.rsv1 or frame.rsv2 or frame.rsv3:
            # RFC 6455 5.2: no extension was negotiated, so a set reserved bit fails the connection (picows
            # passes such frames on as if the bits were clear).
            self._protocol_close(WSCloseCode.PROTOCOL_ERROR, "reserved bits set")
            return
        msg_type = frame.msg_type
        if msg_type is WSMsgType.TEXT or msg_type is WSMsgType.BINARY:
            if self.fragments:
                self._protocol_close(WSCloseCode.PROTOCOL_ERROR, "new message inside a fragmented one")
                return
            self.binary = msg_type is WSMsgType.BINARY
            if frame.fin:
                self._on_message(frame.get_payload_as_bytes())
                return
            self.fragments = [frame.get_payload_as_bytes()]
            self.fragments_bytes = len(self.fragments[0])
        elif msg_type is WSMsgType.CONTINUATION:
            if not self.fragments:
                self._protocol_close(WSCloseCode.PROTOCOL_ERROR, "continuation without a message")
                return
            self.fragments.append(frame.get_payload_as_bytes())
            self.fragments_bytes += frame.payload_size
            if self.fragments_bytes > timing.MAX_MESSAGE_BYTES:
                self._protocol_close(WSCloseCode.MESSAGE_TOO_BIG, "message too big")
                return
            if frame.fin:
                payload = b"".join(self.fragments)
                self.fragments = []
                self._on_message(payload)
        elif msg_type is WSMsgType.CLOSE:
            # RFC 6455 5.5.1: answer with a close frame (the peer's code, if we have not sent one), then
            # the server closes TCP. A code no endpoint may send (picows lets 1006 and 5000+ through) is
            # not echoed: it is the peer's protocol error.
            if not transport.is_close_frame_sent:
                code = frame.get_close_code()
                transport.send_close(WSCloseCode.OK if code is WSCloseCode.NO_INFO
                                     else code if peer_close_code_is_valid(code.value) else WSCloseCode.PROTOCOL_ERROR)
            self._end("connection closed")
            transport.disconnect()

    def _on_message(self, payload: bytes) -> None:
        if self.closing:
            return
        if self.binary:
            events = self.protocol.receive_binary(payload)
        else:
            receive_media = self.receive_media
            if receive_media is not None:
                media = receive_media(payload)
                if media is not None:
                    self._on_caller_frame(*media)
                    return
            events = self.protocol.receive_text(payload)
        for event in events:
            if self.closing:
                return
            if isinstance(event, CallerAudio):
                if self.whole_frames:
                    self._on_caller_frame(event.sequence_number, event.timestamp_ms, event.payload)
                else:
                    self._on_caller_audio(event.payload)
            elif isinstance(event, MarkEcho):
                backlog = self.backlog
                if backlog is not None and backlog.is_own_checkpoint(event.name):
                    backlog.echoed(event.name)  # the gateway's own: it settles the bound, nothing else
                    self.publish_played_position()
                    continue
                # A resampled stream's mark went out behind 10 ms of the next audio: its echo is that late.
                edge = self.edge
                self._on_mark_echo(event.name, edge.echo_late_ns(event.name) if edge is not None else 0)
                if backlog is not None:
                    backlog.echoed(event.name)
                    self.publish_played_position()
            elif isinstance(event, StreamStarted):
                self._on_start(event)
            elif isinstance(event, Dtmf):
                gw = self.gateway
                if self.slot is not None:
                    gw.bus.send(gw.events, messages.Dtmf(self.slot, int(self.ctrl[self.slot, C.GENERATION]), event.digit))
                log.info("call %s: dtmf received", self.call_sid, extra={"digit": event.digit})
            elif isinstance(event, Cleared):
                self.gateway.counters["carrier_clears_confirmed"] += 1
                if self.backlog is not None:
                    self.backlog.cleared()
            elif isinstance(event, StreamStopped):
                log.info("call %s: stop from carrier", self.call_sid)
                self._end("stop")
                self._close(1000, "stream stopped")
            elif isinstance(event, ProtocolViolation):
                self._violation(event)

    def _protocol_close(self, code: WSCloseCode, reason: str) -> None:
        log.info("call %s: websocket closed by protocol: %d %s", self.call_sid, code.value, reason, extra={"problem": "websocket"})
        self._end("violation")
        self._close(code.value, reason)

    def _on_caller_audio(self, payload: bytes) -> None:
        """Caller audio in the carrier's encoding and size, through the edge into 160-byte arena frames."""
        edge = self.edge
        if edge is None:
            return  # no protocol here gives audio before its start
        frames = edge.inbound(payload)
        # Our own numbering of the arena's frames (the carrier's counts messages of other sizes): 1, 2, ...
        first = edge.inbound_frames - len(frames) + 1
        for index, frame in enumerate(frames):
            sequence_number = first + index
            self._on_caller_frame(sequence_number, (sequence_number - 1) * timing.FRAME_MS, frame)

    def _on_caller_frame(self, sequence_number: int, timestamp_ms: int, payload: bytes) -> None:
        if self.slot is None:
            if self.pending_frames is not None and len(self.pending_frames) < PENDING_FRAMES_MAX:
                self.pending_frames.append((sequence_number, timestamp_ms, payload))
            return
        gw = self.gateway
        gw.counters["inbound_frames"] += 1
        arena = gw.arena
        if not rings.inbound_push(arena.ctrl, arena.in_meta, arena.in_payload, self.slot, sequence_number, timestamp_ms, payload):
            gw.counters["inbound_overruns"] += 1

    def _on_start(self, started: StreamStarted) -> None:
        gw = self.gateway
        carrier = self.carrier
        self.deadline.cancel()
        self.call_sid = carrier_core.arena_id(started.call_id)
        result = gw.token_service.redeem(carrier_core.session_token(carrier, started, self.target))
        if not result.ok:
            self._violation(ProtocolViolation(1008, f"session token {result.reason}"))
            return
        if not carrier_core.token_fits_call(result.call_sid, started, carrier):
            self._violation(ProtocolViolation(1008, "session token issued for another call"))
            return
        try:
            plan = carrier_core.plan_stream(carrier, started, self.protocol, gw.carrier_settings,
                                            gw.arena.layout.wire_slot_bytes, gw.config.lead_ms)
        except ValueError as exc:  # a format the protocol accepted but the edge cannot serve: ours to fix
            log.error("call %s: %s stream cannot be served: %s", self.call_sid, carrier, exc,
                      extra={"problem": "carrier edge"})
            self._end("carrier edge")
            self._close(1011, "internal error")
            return
        self.arena_law, self.templates, self.edge = plan.arena_law, plan.templates, plan.edge
        self.lead_ms, self.backlog_frames, self.backlog = plan.lead_ms, plan.backlog_frames, plan.backlog
        if result.call_sid == carrier_core.ANY_CALL:
            gw.drain.stream_started(carrier_core.ANY_CALL)  # the drain's record of the webhook that named no call
        start = carrier_core.call_ids(carrier, started, self.protocol)
        if self.beside_twilio:
            gw.counters["carrier_streams_started"] += 1
            log.info("call %s: %s stream, %s at %d Hz%s, %s wire entries, lead %s%s", self.call_sid, carrier,
                     started.encoding, started.sample_rate_hz,
                     ", passed through to the model" if self.arena_law == ENCODING_PCMA else "",
                     "raw" if self.templates.raw else "final",
                     f"{self.lead_ms} ms" if self.lead_ms else "the pacer's",
                     f", at most {self.backlog_frames} frames unconfirmed by echoes" if self.backlog_frames else "")
        if gw.token_service.needs_shared_check(result):
            # Signed tokens with a shared store: the fleet confirms this is the token's first use (bounded wait;
            # caller frames meanwhile are kept and go into the ring once the call has its slot).
            self.pending_frames = []
            asyncio.ensure_future(self._start_when_confirmed(start, result))
            return
        self._accept_start(start)

    async def _start_when_confirmed(self, start: carrier_core.CallIds, check) -> None:
        verdict = await self.gateway.token_service.confirm(check)
        frames, self.pending_frames = self.pending_frames or [], None
        if self.closing or self.transport is None or self.transport.is_disconnected:
            return  # the carrier went away meanwhile
        if not verdict.accept:
            self._violation(ProtocolViolation(1008, f"session token {verdict.reason} (on another node)"))
            return
        if verdict.reason:
            log.warning("call %s: %s", self.call_sid, verdict.reason, extra={"problem": "token store"})
        self._accept_start(start)
        for frame in frames:
            self._on_caller_frame(*frame)

    def _accept_start(self, start: carrier_core.CallIds) -> None:
        gw = self.gateway
        # Accepted also while draining: the token was issued before the drain began (none is issued during
        # one), so the carrier routed this call here and has nowhere else to send its stream.
        gw.drain.stream_started(start.call_sid)
        slot = gw.claim_slot(self, start)
        if slot is None:
            gw.counters["calls_rejected"] += 1
            log.warning("call %s: no free call slot (max_calls=%d)", self.call_sid, gw.config.max_calls, extra={"problem": "capacity"})
            self._close(1013, "at capacity")
            return
        self.slot = slot
        if self.ticket is not None:
            self.ticket.release()  # in a call now: no longer a connection waiting to authenticate
        log.info("call %s: stream started in slot %d", self.call_sid, slot)

    def _on_mark_echo(self, name: str, late_ns: int = 0) -> None:
        """``late_ns``: how much after the audio before it the mark was known to be sent (a carrier edge's:
        CarrierEdge.echo_late_ns), taken off the echo's time: PLAYED_AT_NS is when that audio had played."""
        gw = self.gateway
        outcome = self.ledger.echoed(name)
        if isinstance(outcome, MarkPlayed):
            gw.counters["marks_played"] += 1
            if self.slot is not None:
                ctrl = self.ctrl[self.slot]
                ctrl[C.PLAYED_FRAMES] = outcome.frames
                ctrl[C.PLAYED_AT_NS] = time.monotonic_ns() - late_ns
                ctrl[C.PLAYED_TAG] = outcome.tag
        elif isinstance(outcome, MarkDiscarded):
            gw.counters["marks_discarded"] += 1
            if self.slot is not None:
                self.ctrl[self.slot, C.MARKS_DISCARDED] += 1
        else:
            gw.counters["marks_unknown"] += 1

    def _violation(self, violation: ProtocolViolation) -> None:
        self.gateway.counters["violations"] += 1
        log.warning("call %s: %s (closing %d)", self.call_sid, violation.reason, violation.close_code, extra={"problem": "protocol"})
        self._end("violation")
        self._close(violation.close_code, violation.reason[:120])

    def _close(self, code: int, reason: str) -> None:
        """Send our close frame once; the peer answers with its own (then TCP closes) or, after
        CLOSE_TIMEOUT_S, TCP closes anyway. Nothing the peer sends after this is processed."""
        self.closing = True
        transport = self.transport
        if transport is None or transport.is_close_frame_sent or transport.is_disconnected:
            return
        transport.send_close(WSCloseCode(code), reason.encode()[:120])
        if self.close_timer is None:
            self.close_timer = self.loop.call_later(CLOSE_TIMEOUT_S, transport.disconnect)

    def _start_deadline(self) -> None:
        if self.slot is None and not self.closing:
            self._violation(self.protocol.deadline_violation())
        if self.ticket is not None and self.slot is None:
            # the close above ends the connection within CLOSE_TIMEOUT_S; an upgrade picows refused never
            # reached us at all: either way the place is given back by then at the latest
            self.loop.call_later(CLOSE_TIMEOUT_S + 1.0, self.ticket.release)

    # --- outbound ------------------------------------------------------------------------------------
    def drain_wire(self) -> None:
        gw = self.gateway
        slot = self.slot
        transport = self.transport
        if slot is None or transport is None or self.closing or transport.is_close_frame_sent:
            return
        arena = gw.arena
        media_prefix = self.wire_media_prefix
        out: list[bytes] = []
        while batch := rings.wire_drain(arena.ctrl, arena.wire_len, arena.wire_data, slot):
            for data in batch:
                if not data.startswith(media_prefix):
                    mark_prefix = self.wire_mark_prefix
                    if data.startswith(mark_prefix):
                        # The name sits between the mark's templates (ASCII digits and colons: marks.py).
                        name = data[len(mark_prefix):len(data) - self.wire_mark_suffix_bytes]
                        self.ledger.sent_mark(name.decode("ascii"))
                    elif data == self.wire_clear:
                        self.ledger.sent_clear()
                        ctrl = self.ctrl[slot]
                        ctrl[C.CLEARS_SENT] += 1
                        gw.counters["clears_sent"] += 1
                        decided = int(ctrl[C.CANCEL_DECISION_NS])
                        if ctrl[C.PAUSED_TAG] and ctrl[C.PAUSE_SINCE_NS] > decided:
                            # A hold's clear (bare VAD edge), not a cancel's: it comes by design a lead later.
                            gw.counters["hold_clears_sent"] += 1
                        elif decided:
                            elapsed_ns = time.monotonic_ns() - decided
                            gw.bargein_to_clear.add_ns(elapsed_ns)
                            gw.bargein_clear_seconds.observe(elapsed_ns / 1e9)
                out.append(data)
        if not out:
            return
        gw.counters["wire_messages"] += len(out)
        if self.backlog is not None:
            self.backlog.sent(out)  # in wire order: a clear settles what went before it the moment it is sent
            own = self.backlog.own_checkpoint()
            if own is not None:
                out.append(own)
            self.publish_played_position()
        if self.wire_raw:
            for data in out:
                if self.closing:
                    return
                self.carrier_edge(data)
        else:
            # One write for everything released since the last doorbell (one system call, not one per message).
            transport.underlying_transport.write(self.wire_frames(out))
        queued = transport.underlying_transport.get_write_buffer_size()
        if queued > MAX_WRITE_BUFFER_BYTES:
            log.warning("call %s: carrier is not reading (%d bytes queued); dropping the call", self.call_sid,
                        queued, extra={"problem": "slow peer"})
            self._end("slow peer")
            self.closing = True
            transport.disconnect(graceful=False)
            return
        if self.edge_out:
            # What the edge made of this doorbell's raw entries: one write too.
            frames, self.edge_out = self.edge_out, []
            if self.closing or transport.is_close_frame_sent:
                return
            gw.counters["carrier_edge_messages"] += len(frames)
            transport.underlying_transport.write(b"".join(frames))

    def carrier_edge(self, entry: bytes) -> None:
        """Finish one raw wire entry (voicecore/carriers/wire.py: RAW_MEDIA + 160 mu-law bytes, RAW_MARK + a
        mark name, or RAW_CLEAR; its marks and clears are already in the ledger and counters) through the edge
        into the carrier's messages (sent at the end of drain_wire): a carrier whose messages the pacer cannot
        write whole (Vonage, Exotel, a stream not in mu-law at 8 kHz). Marks the edge dropped unsent on a clear
        are settled as discarded: no echo will come for them. A call with no edge (final templates: Twilio,
        Telnyx, Plivo in mu-law) never gets here: if it does, the call cannot be served."""
        edge = self.edge
        if edge is None:
            log.error("call %s: a raw wire entry but no carrier edge; ending the call", self.call_sid,
                      extra={"problem": "carrier edge"})
            self._end("no carrier edge")
            self._close(1011, "internal error")
            return
        try:
            output = edge.outbound(entry)
        except (ValueError, AttributeError) as exc:  # an entry the edge cannot read: the pacer's and ours
            log.error("call %s: raw wire entry not understood (%s); ending the call", self.call_sid, exc,
                      extra={"problem": "carrier edge"})
            self._end("carrier edge")
            self._close(1011, "internal error")
            return
        for name in output.dropped_marks:
            if isinstance(self.ledger.unsent(name), MarkDiscarded):
                self.gateway.counters["marks_discarded"] += 1
                if self.slot is not None:
                    self.ctrl[self.slot, C.MARKS_DISCARDED] += 1
        for message in output.messages:
            self.edge_out.append(binary_frames((message.data,)) if message.binary else text_frames((message.data,)))

    def _end(self, reason: str) -> None:
        if self.slot is not None:
            self.gateway.release_slot(self.slot, reason)
            log.info("call %s: ended (%s)", self.call_sid, reason)
            self.slot = None

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.deadline.cancel()
        if self.ticket is not None:
            self.ticket.release()
        if self.close_timer is not None:
            self.close_timer.cancel()
        self._end("connection lost")


def remove_stale_arena(name_file: Path, shm_dir: str) -> list[str]:
    """A gateway killed with SIGKILL could not unlink its arena; its successor does. The calls it held are
    gone with it (a carrier never reconnects a media stream; it re-attaches the call through the answer document's
    re-attach step, voicecore/reattach.py): returns their CallSids, each logged."""
    try:
        stale = name_file.read_text().strip()
    except FileNotFoundError:
        return []
    lost: list[str] = []
    if stale.startswith("voicecore-") and "/" not in stale:
        try:
            with Arena.attach(stale, directory=shm_dir) as old:
                active = np.nonzero(old.ctrl[:, C.STATE] != C.SLOT_FREE)[0]
                lost = [old.call_sid(int(slot)) for slot in active]
        except ArenaError as exc:
            log.warning("the arena %s of a gateway that did not shut down cannot be read: %s", stale, exc)
        for call_sid in lost:
            log.warning("call %s: lost with the gateway that served it (its stream: the carrier's re-attach step may "
                        "bring the call back)", call_sid)
        log.warning("removing the arena %s of a gateway that did not shut down (%d calls lost)", stale, len(lost))
        (Path(shm_dir) / stale).unlink(missing_ok=True)
    return lost


def remove_stale_socket(path: str) -> None:
    """A Unix socket left by a gateway that did not shut down would make bind fail; a socket something
    still listens on, or anything that is not a socket, is not ours to delete."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SystemExit(f"gateway: listen path {path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            pass  # nobody listens: stale
        else:
            raise SystemExit(f"gateway: another process listens on {path}")
    log.warning("removing the socket %s of a gateway that did not shut down", path)
    os.unlink(path)


GATEWAY_NICE = -10  # ahead of the model worker on a shared core, behind the pacer (voicecore/priority.py)


async def run(config: Config) -> None:
    # VOICECORE_REALTIME_PRIORITY=0 (the bench's --privileges off): stay at normal priority.
    granted = ("normal (VOICECORE_REALTIME_PRIORITY=0)" if os.environ.get("VOICECORE_REALTIME_PRIORITY", "1") == "0"
               else raise_priority(fifo_priority=None, nice=GATEWAY_NICE))
    log.info("gateway scheduling: %s", granted)
    runtime_dir = ensure_runtime_dir(config.runtime_dir)
    warm_up_rings(runtime_dir)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    leadership = Leadership(runtime_dir, "gateway")
    try:
        if not await leadership.wait_async(stop) or stop.is_set():
            return
        await serve(config, runtime_dir, stop, leadership)
    finally:
        leadership.release()


async def serve(config: Config, runtime_dir: Path, stop: asyncio.Event, leadership: Leadership) -> None:
    """The serving gateway: a fresh arena (the calls of one that died are gone: counted), then the port."""
    name_file = runtime_dir / ARENA_NAME_FILE
    lost = remove_stale_arena(name_file, config.shm_dir)
    layout = ArenaLayout(max_calls=config.max_calls)
    arena = Arena.create(layout, directory=config.shm_dir)
    gateway: Gateway | None = None
    server = None
    metrics_server = None
    try:
        tmp = name_file.with_suffix(".tmp")
        tmp.write_text(arena.name)
        tmp.replace(name_file)  # atomic: a worker never reads half a name
        gateway = Gateway(config, runtime_dir, arena, stop)
        gateway.counters["calls_lost_in_gateway_restart"] += len(lost)
        gateway.poll_drain()  # a gateway that starts (or takes over) during a drain never takes a new call
        loop = asyncio.get_running_loop()
        loop.add_reader(gateway.doorbell.fileno(), gateway.on_doorbell)
        loop.add_reader(gateway.inbox.getsockopt(zmq.FD), gateway.on_inbox)
        loop.add_reader(gateway.events.getsockopt(zmq.FD), gateway.on_subscriber)
        gateway.on_subscriber()  # subscribers that connected before the reader was added
        unix_path = config.listen_unix_path
        if unix_path is not None:
            remove_stale_socket(unix_path)
            server = await loop.create_unix_server(lambda: ConnectionRouter(gateway), unix_path, backlog=1024)
        else:
            server = await loop.create_server(
                lambda: ConnectionRouter(gateway), config.listen_host, config.listen_port, reuse_address=True, backlog=1024
            )
        log.info("gateway listening on %s (arena %s, %d call slots)", config.listen, arena.name, config.max_calls)
        if config.metrics_listen != METRICS_LOCAL:
            host, _, port = config.metrics_listen.rpartition(":")
            metrics_server = await loop.create_server(lambda: ConnectionRouter(gateway, metrics_only=True), host.strip("[]"),
                                                      int(port), reuse_address=True, backlog=64)
            log.info("gateway serving /metrics on %s", config.metrics_listen)
        unserved = [c for c in carrier_core.CARRIERS if c not in gateway.carriers_enabled]
        log.info("carriers served: %s%s", ", ".join(gateway.carrier_settings.served()),
                 f" (not served, no secret configured: {', '.join(unserved)})" if unserved else "")
        leadership.announce()
        gc.freeze()
        stopped = asyncio.ensure_future(stop.wait())
        while not stop.is_set():
            gateway.poll_drain()
            if gateway.drain.draining:
                gateway.step_drain()
            interval_ms = gateway.loop_interval_ms()
            gateway.heartbeat(interval_ms)
            gateway.on_inbox()  # the zmq FD is edge-triggered: poll it on every heartbeat too
            gateway.on_subscriber()  # the same for the events socket (its sends may take the edge)
            gateway.drain_wire()  # a lost doorbell costs at most one heartbeat of delay
            # Idle (no call, no drain) the loop wakes once a second; the first call wakes it at once.
            gateway.wake.clear()
            woken = asyncio.ensure_future(gateway.wake.wait())
            await asyncio.wait((stopped, woken), timeout=interval_ms / 1000,
                               return_when=asyncio.FIRST_COMPLETED)
            woken.cancel()
        stopped.cancel()
        log.info("gateway stopping: closing %d calls", len(gateway.calls))
        for conn in list(gateway.calls.values()):
            conn._end("shutdown")
            conn._close(1001, "server shutting down")
    finally:
        if metrics_server is not None:
            metrics_server.close()
        if server is not None:
            server.close()
            if config.listen_unix_path is not None:
                Path(config.listen_unix_path).unlink(missing_ok=True)
        if gateway is not None:
            gateway.token_service.close()
            if gateway.call_status is not None:
                gateway.call_status.close()
            loop = asyncio.get_running_loop()
            loop.remove_reader(gateway.doorbell.fileno())  # no wakeup may reach a closed socket
            loop.remove_reader(gateway.inbox.getsockopt(zmq.FD))
            loop.remove_reader(gateway.events.getsockopt(zmq.FD))
            gateway.bus.close()
            gateway.doorbell.close()
            for name in (EVENTS, GATEWAY_INBOX, "doorbell.sock"):
                (runtime_dir / name).unlink(missing_ok=True)
        name_file.unlink(missing_ok=True)
        arena.close()
        arena.unlink()


def main() -> None:
    config = load_config(os.environ)
    setup_logging("gateway", config.log_level, config.log_format)
    run_loop(run(config))
    sys.exit(0)


if __name__ == "__main__":
    main()
