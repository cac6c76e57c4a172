"""The pacer process: the 20 ms playout clock for every call.

Owns the absolute frame grid (``start + n * 20 ms``, never "sleep 20 ms after the last send"), the
wake-ups (a poll on the cancel inbox until just before the tick, then a short spin), the doorbell to the
gateway, and exporting lateness, tick time and the release counters. The release rules live in core.py.
It waits on nothing but its clock and the cancel inbox; after start-up it runs with a frozen heap and
allocates nothing per frame (docs/explanation/architecture.md#section-6).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import zmq

from voicecore import prom_histogram, timing
from voicecore.bus import messages
from voicecore.bus.transport import GATEWAY_INBOX, PACER_INBOX, Bus, DoorbellSender
from voicecore.config import Config, load_config
from voicecore.agent.load import AgentError, load_configured_agent
from voicecore.fallback import KINDS, FallbackClips
from voicecore.fallback.lines import agent_lines, load_clips, table_with_agent_lines
from voicecore.priority import raise_priority
from voicecore.logs import setup_logging
from voicecore.shm import control as C
from voicecore.shm.arena import Arena
from voicecore.shm.follow import ArenaFollower
from voicecore.standby import serve_as_leader
from workers.pacer.core import PacerCore
from workers.pacer.warm_up import warm_up_kernels, warm_up_priority

log = logging.getLogger("voicecore.pacer")


def clips_for_config(config: Config, environ: Mapping[str, str]) -> FallbackClips:
    """The pacer's table for this configuration's agent: the shipped rows, and the shipped English lines in the
    agent's row when the agent cannot be loaded. In the shell, as it reads the agent's files: voicecore/fallback/
    knows lines and clips, not agents (and the agent loader checks line files through it)."""
    try:
        agent = load_configured_agent(config, environ)
    except AgentError as exc:
        log.error("the agent cannot be loaded for its fallback lines (%s); the shipped lines play", exc)
        shipped = load_clips()
        english = {kind: (shipped.frames[i, : int(shipped.frame_counts[i])].tobytes(), "shipped:en")
                   for i, kind in enumerate(KINDS)}
        return table_with_agent_lines(english, shipped)
    lines = agent_lines(agent, config.model_url, config.speech_model if not config.uses_simulator else "",
                        config.lines_cache_dir, environ)
    log.info("fallback lines of agent %s: %s", agent.name, ", ".join(f"{k} {src}" for k, (_, src) in lines.items()))
    return table_with_agent_lines(lines)


POLL_MARGIN_NS = 2_000_000  # stop polling the inbox this long before a tick ...
SPIN_NS = 150_000  # ... sleep until this long before it, then spin
STATS_EVERY_NS = 1_000_000_000
PACER_RT_PRIORITY = 10
# The slots are ticked in this many groups, one group every FRAME_MS / PHASES: each call still gets an
# absolute 20 ms grid (on its group's phase), and the gateway writes a quarter of the calls' frames at a
# time instead of all of them in one burst that delays the last call's write and its inbound reads.
PHASES = 4
SUB_TICK_NS = timing.FRAME_NS // PHASES
HISTOGRAM_BUCKET_NS = 10_000  # 10 us buckets ...
HISTOGRAM_BUCKETS = 10_000  # ... up to 100 ms; later samples land in the last bucket
# voicecore_pacer_lateness_seconds' upper bounds: the spin makes most ticks microseconds late, a busy core
# or a page fault makes some a millisecond or more.
LATENESS_BUCKETS_S = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)


class Histogram:
    """Fixed buckets, preallocated: recording a sample allocates nothing."""

    def __init__(self) -> None:
        self.counts = np.zeros(HISTOGRAM_BUCKETS, dtype=np.int64)
        self.max_ns = 0

    def add(self, value_ns: int) -> None:
        bucket = value_ns // HISTOGRAM_BUCKET_NS
        self.counts[bucket if bucket < HISTOGRAM_BUCKETS else HISTOGRAM_BUCKETS - 1] += 1
        if value_ns > self.max_ns:
            self.max_ns = value_ns

    def quantile_ms(self, q: float, cumulative: np.ndarray | None = None) -> float:
        cumulative = np.cumsum(self.counts) if cumulative is None else cumulative
        total = int(cumulative[-1])
        if total == 0:
            return 0.0
        bucket = int(np.searchsorted(cumulative, q * total))
        return (bucket + 1) * HISTOGRAM_BUCKET_NS / 1e6

    def summary(self, prefix: str) -> dict[str, float]:
        cumulative = np.cumsum(self.counts)  # once for every quantile: a pass over 10,000 buckets each
        return {
            f"{prefix}_p50_ms": self.quantile_ms(0.50, cumulative),
            f"{prefix}_p99_ms": self.quantile_ms(0.99, cumulative),
            f"{prefix}_p999_ms": self.quantile_ms(0.999, cumulative),
            f"{prefix}_max_ms": self.max_ns / 1e6,
            f"{prefix}_count": float(cumulative[-1]),
        }


class Pacer:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.runtime_dir = Path(config.runtime_dir)
        self.bus = Bus(self.runtime_dir)
        self.inbox = self.bus.bind(zmq.PULL, PACER_INBOX)
        self.gateway = self.bus.connect(zmq.PUSH, GATEWAY_INBOX)
        self.doorbell = DoorbellSender(self.runtime_dir)
        self.arena: Arena | None = None
        self.follower = ArenaFollower(self.runtime_dir, config.shm_dir)
        self.core: PacerCore | None = None
        # the runtime's own lines, the agent's in its voice where it has them (voicecore/fallback/lines.py)
        self.clips = clips_for_config(config, os.environ)
        self.earlier_stats: dict[str, int] = {}  # the counters of cores of earlier arenas
        self.lateness = Histogram()
        self.lateness_seconds = prom_histogram.Histogram(LATENESS_BUCKETS_S)  # the same samples, for Prometheus
        self.tick_time = Histogram()
        self.ticks = 0
        self.skipped_ticks = 0
        self.cancel_wakeups = 0
        self.idle_waits = 0
        self.call_wakeups = 0  # the gateway's news of a call's start (it ends an idle wait at once)
        self.next_report_ns = 0
        self.next_arena_check_ns = 0
        self.next_idle_stats_ns = 0
        self.stopping = False
        self.heartbeat_seq = 0

    def attach_arena(self) -> bool:
        arena, changed = self.follower.poll()
        if changed:
            if self.core is not None:  # a new arena (the gateway restarted): the counters stay cumulative
                for name, value in self.core.statistics().items():
                    self.earlier_stats[name] = self.earlier_stats.get(name, 0) + value
            self.core = None
        self.arena = arena
        if arena is not None and self.core is None:
            self.core = PacerCore(arena, lead_ms=self.config.lead_ms, mark_every_frames=self.config.mark_every_frames,
                                  max_burst_frames=timing.MAX_CATCH_UP_FRAMES, start_hold_ms=self.config.start_hold_ms,
                                  release_frames=self.config.release_frames, clips=self.clips)
            self.core.tick(time.monotonic_ns())  # compile-or-load before the clock starts
            self.core.cancels(time.monotonic_ns())
            self.core.has_live_call()
        return self.core is not None

    def on_inbox(self) -> None:
        """What woke the pacer: the model worker's cancel doorbells, or the gateway's news of a call's start."""
        drained = self.bus.receive_nowait(self.inbox)
        if any(type(message) is messages.CallStarted for message in drained):
            # The gateway's news of a call (sent after it published the slot): an idle pacer woke for it. A
            # gateway that restarted serves from a new arena, and its first call may be what tells us.
            self.call_wakeups += 1
            self.attach_arena()
        if self.core is not None and any(type(message) is not messages.CallStarted for message in drained):
            self.cancel_wakeups += 1
            if self.core.cancels(time.monotonic_ns()):
                self.doorbell.ring()

    def idle_wait_ms(self, now_ns: int) -> int:
        """With no live call, how long the pacer sleeps in its inbox: until its next heartbeat or look for a new
        arena is due (the idle heartbeat's period), rounded up so it never wakes just before. A call's start
        does not wait for it: the gateway's CallStarted in the inbox ends the wait at once."""
        due_ns = min(self.next_report_ns, self.next_arena_check_ns) - now_ns
        return max(0, -(-due_ns // 1_000_000))

    def lead_statistics(self) -> dict[str, float]:
        """Audio queued in each talking call's carrier buffer right now, as the pacer models it."""
        ctrl = self.arena.ctrl
        now = time.monotonic_ns()
        active = ctrl[:, C.STATE] == C.SLOT_ACTIVE
        lead_ms = (ctrl[active, C.CARRIER_EMPTY_AT_NS] - now) / 1e6
        talking = lead_ms[lead_ms > 0]
        return {
            "calls_active": float(active.sum()),
            "calls_talking": float(talking.size),
            "lead_min_ms": float(talking.min()) if talking.size else 0.0,
            "lead_p50_ms": float(np.median(talking)) if talking.size else 0.0,
            "underruns_total": float(ctrl[:, C.UNDERRUNS].sum()),
        }

    def report(self, with_stats: bool = True, interval_ms: int = timing.HEARTBEAT_MS) -> None:
        self.heartbeat_seq += 1
        pid = os.getpid()
        self.bus.send(self.gateway, messages.Heartbeat("pacer", pid, self.heartbeat_seq, time.monotonic_ns(), interval_ms))
        if not with_stats:
            return
        values: dict[str, float] = {
            "ticks": float(self.ticks),
            "skipped_ticks": float(self.skipped_ticks),
            "cancel_wakeups": float(self.cancel_wakeups),
            "idle_waits": float(self.idle_waits),
            "call_wakeups": float(self.call_wakeups),
            **self.lateness.summary("tick_lateness"),
            **self.lateness_seconds.flat("pacer_lateness_seconds"),
            **self.tick_time.summary("tick_duration"),
        }
        if self.core is not None:
            values.update({k: float(v + self.earlier_stats.get(k, 0)) for k, v in self.core.statistics().items()})
        if self.arena is not None:
            values.update(self.lead_statistics())
        self.bus.send(self.gateway, messages.Stats("pacer", pid, values))

    def raise_priority(self) -> str:
        """Run the clock ahead of the gateway and workers that share its core, when the OS lets us.

        The pacer sleeps almost all of every tick, so a real-time class costs the others little and keeps a
        busy gateway or model worker from delaying a tick (docs/explanation/architecture.md#section-6).
        Without the privilege (CAP_SYS_NICE) it runs at normal priority and says so.
        """
        if os.environ.get("VOICECORE_REALTIME_PRIORITY", "1") == "0":  # the bench's --privileges off
            return "normal (VOICECORE_REALTIME_PRIORITY=0)"
        return raise_priority(fifo_priority=PACER_RT_PRIORITY, nice=-10)

    def run(self) -> None:
        log.info("pacer scheduling: %s", self.raise_priority())
        while not self.stopping and not self.attach_arena():
            time.sleep(0.05)
        gc.collect()
        gc.freeze()  # everything built so far is permanent: the collector never walks it again
        start_ns = time.monotonic_ns()
        tick_index = 0
        self.next_report_ns = start_ns
        self.next_arena_check_ns = start_ns + STATS_EVERY_NS
        inbox = self.inbox
        while not self.stopping:
            if tick_index % PHASES == 0 and (self.core is None or not self.core.has_live_call()):
                # No live call: nothing to pace. Wait in the inbox, not on the grid (no spin, no sub-ticks,
                # no timer but the idle heartbeat: an idle node costs next to nothing) until the gateway's news
                # of a call or the next heartbeat, and start the grid afresh once a call is live.
                if inbox.poll(self.idle_wait_ms(time.monotonic_ns()), zmq.POLLIN):
                    self.on_inbox()
                self.idle_waits += 1
                start_ns, tick_index = time.monotonic_ns(), 0
                self.housekeeping(start_ns, idle=True)
                continue
            deadline = start_ns + tick_index * SUB_TICK_NS
            now = time.monotonic_ns()
            # Sleep in the cancel inbox until shortly before the tick, so a barge-in is acted on at once;
            # poll timeouts are whole milliseconds and overshoot, so the last stretch is a nanosleep and
            # the final SPIN_NS a spin (docs/explanation/architecture.md#section-11).
            while (timeout_ms := (deadline - now - POLL_MARGIN_NS) // 1_000_000) > 0:
                if inbox.poll(timeout_ms, zmq.POLLIN):
                    self.on_inbox()
                now = time.monotonic_ns()
                if self.stopping:
                    return
            if deadline - now > SPIN_NS:
                time.sleep((deadline - now - SPIN_NS) / 1e9)
                if inbox.poll(0, zmq.POLLIN):
                    self.on_inbox()
            while now < deadline:
                now = time.monotonic_ns()
            self.lateness.add(now - deadline)
            self.lateness_seconds.observe((now - deadline) / 1e9)
            if self.core is not None and self.core.tick(now, tick_index % PHASES, PHASES):
                self.doorbell.ring(now)
            done = time.monotonic_ns()
            self.tick_time.add(done - now)
            self.ticks += 1
            tick_index += 1
            behind = (done - start_ns) // SUB_TICK_NS - tick_index
            if behind > 0:
                # We missed whole ticks (a stall): resume on the grid; the core refills the lead with a
                # bounded burst, so skipping the missed ticks loses no audio. Every group's turn may have
                # passed: tick them all once now.
                self.skipped_ticks += behind
                tick_index += behind
                if self.core is not None and self.core.tick(done):
                    self.doorbell.ring(done)
            self.housekeeping(done)

    def housekeeping(self, now_ns: int, idle: bool = False) -> None:
        """The heartbeat and statistics, and a look for a new arena, each when due. Idle, the statistics
        (which do not move) go once a second instead of with every heartbeat, and the look for a new arena
        with the heartbeat, so an idle pacer wakes once per heartbeat, not once for each."""
        reported = False
        if now_ns >= self.next_report_ns or (not idle and self.next_report_ns - now_ns > timing.HEARTBEAT_MS * 1_000_000):
            # (a call went live during an idle interval: back to the call's interval at once)
            interval_ms = timing.heartbeat_interval_ms(not idle)
            self.next_report_ns = now_ns + interval_ms * 1_000_000
            with_stats = not idle or now_ns >= self.next_idle_stats_ns
            if with_stats:
                self.next_idle_stats_ns = now_ns + STATS_EVERY_NS
            self.report(with_stats, interval_ms)
            reported = True
        if now_ns >= self.next_arena_check_ns or (idle and reported):
            self.next_arena_check_ns = now_ns + STATS_EVERY_NS
            self.attach_arena()

    def close(self) -> None:
        self.bus.close()
        self.doorbell.close()
        (self.runtime_dir / PACER_INBOX).unlink(missing_ok=True)
        self.follower.close()


def main() -> None:
    config = load_config(os.environ)
    setup_logging("pacer", config.log_level, config.log_format)
    # A fresh install's start waits on this compile (seconds of one core) while the node's other processes
    # import beside it; Pacer.run asks for SCHED_FIFO once it serves.
    if (granted := warm_up_priority()) is not None:
        log.info("pacer warm-up scheduling: %s", granted)
    warm_up_kernels(config)  # before standing by: a standby that takes over ticks at once
    serve_as_leader(config.runtime_dir, "pacer", lambda: Pacer(config))


if __name__ == "__main__":
    main()
