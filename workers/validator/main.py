"""The validator process: the control-bus shell around ValidatorCore (core.py holds every rule).

Owns the validator's sockets, the knowledge-base folder (read at start, its files' mtimes polled every
second and reloaded when they change) and reporting. Topology (voicecore/bus/transport.py):
  PULL validator.sock <- model worker: gate.open (with the tool result the answer may cite numbers from:
                         GateOpen.facts, handed to the core as is), transcript.delta, transcript.done
  PUSH model.sock     -> model worker: verdict (the model worker binds it and applies each verdict
                         with rings.tag_approve / rings.tag_cancel)
Both ways several messages may come as one batch (voicecore/bus/messages.py ``encode_batch``): the model
worker's gate messages of one turn of its event loop, the verdicts of one drain of the inbox here.
  PUSH gateway.sock   -> heartbeat every 150 ms and stats, as process "validator"
  SUB  events.sock    <- call.ended: forget that call's gates
It may be slow (the gate waits for it, docs/explanation/architecture.md#section-2) but never crashes on bad
input: bad messages are counted and dropped by the bus, and a message the core chokes on is counted and
dropped here. A knowledge base that cannot be read is no knowledge base: every number is rejected
(fail-closed). Logs never carry transcripts, facts or numbers (docs/explanation/style.md#rules).
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import zmq

from voicecore import timing
from voicecore.bus import messages
from voicecore.bus.transport import (
    EVENTS,
    GATEWAY_INBOX,
    MODEL_INBOX,
    VALIDATOR_INBOX,
    Bus,
    default_runtime_dir,
    ensure_runtime_dir,
)
from voicecore.agent.load import AgentError, load_configured_agent
from voicecore.config import Config, load_config
from voicecore.privacy.records import RecordPrivacy
from voicecore.logs import setup_logging
from voicecore.standby import serve_as_leader
from voicecore.validate.watch import KnowledgeWatcher
from workers.validator.core import ValidatorCore, reason_category

log = logging.getLogger("voicecore.validator")

PROCESS = "validator"
STATS_EVERY_NS = 1_000_000_000
VERDICTS_HELD_MAX_NS = 2_000_000  # a verdict waits for the rest of its drain's at most this long (on_inbox)


def log_privacy(config: Config) -> RecordPrivacy:
    """The agent's storage tier, for what this process logs of an answer (its claims hold what the agent
    said, which may be a caller's number read back). An agent that cannot be read: redacted."""
    try:
        return RecordPrivacy.for_agent(load_configured_agent(config))
    except AgentError:
        return RecordPrivacy("redacted")


class Validator:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.runtime_dir = ensure_runtime_dir(config.runtime_dir or default_runtime_dir())
        self.bus = Bus(self.runtime_dir)
        self.inbox = self.bus.bind(zmq.PULL, VALIDATOR_INBOX)
        self.model = self.bus.connect(zmq.PUSH, MODEL_INBOX)
        self.gateway = self.bus.connect(zmq.PUSH, GATEWAY_INBOX)
        self.events = self.bus.connect(zmq.SUB, EVENTS)
        self.poller = zmq.Poller()
        self.poller.register(self.inbox, zmq.POLLIN)
        self.poller.register(self.events, zmq.POLLIN)
        self.knowledge = KnowledgeWatcher(config.knowledge_dir)
        _, knowledge = self.knowledge.poll()
        margin_frames = math.ceil(config.gate_margin_ms / timing.FRAME_MS)
        self.core = ValidatorCore(knowledge, margin_frames=margin_frames, max_chars_per_s=config.gate_max_chars_per_s,
                                  release=config.gate_release)
        self.log_privacy = log_privacy(config)
        self.live_calls: set[tuple[int, int]] = set()  # (slot, generation) from the gateway's news: the heartbeat's interval
        if knowledge is None and not config.knowledge_dir:
            log.warning("no knowledge_dir configured: every number in a gated answer will be rejected")
        self.stopping = False
        self.heartbeat_seq = 0
        self.core_errors = 0
        self.verdicts_sent = 0
        self.handle_ns_max = 0

    def on_inbox(self) -> None:
        """Judge what waits; the verdicts go back together (``messages.encode_batch``), or as soon as the oldest
        of them has waited VERDICTS_HELD_MAX_NS: a long drain must not hold back the first answers' audio."""
        outbox: list[bytes] = []
        first_held_ns = 0
        for message in self.bus.receive_nowait(self.inbox):
            started = time.monotonic_ns()
            try:
                verdicts = self.core.handle(message)
            except Exception:  # the core must not raise; if it does, this message is lost, not the process
                self.core_errors += 1
                log.exception("validator core failed on a %s message; dropped", type(message).__name__)
                continue
            for verdict in verdicts:
                if not outbox:
                    first_held_ns = started
                outbox.append(messages.encode(verdict))
                if verdict.rejected:
                    # the reason's claim holds the answer's numbers: the message text gets its category only
                    log.info("slot %d tag %d rejected: %s", verdict.slot, verdict.tag, reason_category(verdict.reason),
                             extra={"reason": self.log_privacy.log_text(verdict.reason)})
            done = time.monotonic_ns()
            self.handle_ns_max = max(self.handle_ns_max, done - started)
            if outbox and done - first_held_ns >= VERDICTS_HELD_MAX_NS:
                self.verdicts_sent += self.bus.send_all(self.model, outbox)
                outbox = []
        if outbox:
            self.verdicts_sent += self.bus.send_all(self.model, outbox)

    def on_events(self) -> None:
        for message in self.bus.receive_nowait(self.events):
            if isinstance(message, messages.CallStarted):
                self.live_calls.add((message.slot, message.generation))
            elif isinstance(message, messages.CallEnded):
                self.live_calls.discard((message.slot, message.generation))
                self.core.end_call(message.slot, message.generation)

    def reload_knowledge(self) -> None:
        changed, knowledge = self.knowledge.poll()
        if changed:
            self.core.set_knowledge(knowledge)

    def report(self, stats: bool, interval_ms: int) -> None:
        self.heartbeat_seq += 1
        pid = os.getpid()
        self.bus.send(self.gateway, messages.Heartbeat(PROCESS, pid, self.heartbeat_seq, time.monotonic_ns(), interval_ms))
        if stats:
            values = self.core.statistics()
            values.update({
                "bus_rejected": float(self.bus.rejected),
                "bus_dropped_sends": float(self.bus.dropped_sends),
                "core_errors": float(self.core_errors),
                "verdicts_sent": float(self.verdicts_sent),
                "knowledge_errors": float(self.knowledge.errors),
                "handle_max_ms": self.handle_ns_max / 1e6,
            })
            self.bus.send(self.gateway, messages.Stats(PROCESS, pid, values))

    def run(self) -> None:
        log.info("validator ready")
        now = time.monotonic_ns()
        next_heartbeat_ns = now
        next_stats_ns = now
        next_knowledge_ns = now + KnowledgeWatcher.POLL_NS
        while not self.stopping:
            now = time.monotonic_ns()
            if now >= next_heartbeat_ns:
                stats = now >= next_stats_ns
                interval_ms = timing.heartbeat_interval_ms(bool(self.live_calls))
                self.report(stats, interval_ms)
                next_heartbeat_ns = now + interval_ms * 1_000_000
                if stats:
                    next_stats_ns = now + STATS_EVERY_NS
            if now >= next_knowledge_ns:
                self.reload_knowledge()
                next_knowledge_ns = time.monotonic_ns() + KnowledgeWatcher.POLL_NS
            timeout_ms = max(1, (min(next_heartbeat_ns, next_knowledge_ns) - time.monotonic_ns()) // 1_000_000)
            try:
                ready = dict(self.poller.poll(timeout_ms))
            except zmq.ZMQError:  # EINTR from SIGTERM
                continue
            if self.inbox in ready:
                self.on_inbox()
            if self.events in ready:
                self.on_events()

    def close(self) -> None:
        self.bus.close()
        (self.runtime_dir / VALIDATOR_INBOX).unlink(missing_ok=True)


def main() -> None:
    config = load_config(os.environ)
    setup_logging(PROCESS, config.log_level, config.log_format)
    serve_as_leader(config.runtime_dir or default_runtime_dir(), PROCESS, lambda: Validator(config))


if __name__ == "__main__":
    main()
