"""The end-of-call webhook's sender: one thread, a bounded queue, retries with backoff.

Owns delivering each summary (voicecore/store/webhook.py builds and signs it) to ``call_webhook_url``:
POST, JSON, signed per attempt (a fresh timestamp), retried after a timeout, a connection error, a 5xx, a
408 or a 429 (1, 2, 4, 8 s), never after another 4xx (the receiver refused it: sending it again would not
change that). Its own thread so a slow receiver never holds up ingesting records or the recorder's
heartbeats; the queue is bounded so a receiver that is down for hours costs memory for at most MAX_QUEUED
calls (the rest are counted as dropped and logged, and remain in the call store).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
import time
from typing import Any

from voicecore import http_client
from voicecore.store import webhook

log = logging.getLogger("voicecore.recorder.webhook")

ATTEMPTS = 5
BACKOFF_S = (1.0, 2.0, 4.0, 8.0)
TIMEOUT_S = 5.0
MAX_QUEUED = 1000
RETRYABLE_4XX = frozenset({408, 429})


class WebhookSender:
    def __init__(self, url: str, secret: str, backoff_s: tuple[float, ...] = BACKOFF_S) -> None:
        self.url = url
        self.secret = secret
        self.backoff_s = backoff_s
        self.queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(MAX_QUEUED)
        self.counters: collections.Counter = collections.Counter({"webhooks_sent": 0, "webhooks_failed": 0,
                                                                  "webhook_retries": 0, "webhooks_dropped": 0})
        self.thread = threading.Thread(target=self._run, name="call-webhook", daemon=True)
        self.thread.start()

    def submit(self, call_sid: str, payload: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait((call_sid, payload))
        except queue.Full:
            self.counters["webhooks_dropped"] += 1
            log.warning("call %s: end-of-call webhook dropped (%d waiting: the receiver is not keeping up)",
                        call_sid, MAX_QUEUED)

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (within ``timeout_s``), then stop the thread."""
        try:
            self.queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self.thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            call_sid, payload = item
            self._deliver(call_sid, webhook.encode(payload))

    def _deliver(self, call_sid: str, body: bytes) -> None:
        problem = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                self.counters["webhook_retries"] += 1
                time.sleep(self.backoff_s[min(attempt - 1, len(self.backoff_s) - 1)])
            headers = [("Content-Type", "application/json"),
                       (webhook.SIGNATURE_HEADER, webhook.signature(self.secret, int(time.time()), body))]
            try:
                status, _ = asyncio.run(http_client.send("POST", self.url, headers, body, timeout_s=TIMEOUT_S))
            except (OSError, TimeoutError, ValueError) as exc:
                problem = type(exc).__name__
                continue
            except Exception as exc:  # noqa: BLE001 (h11's protocol errors: a broken receiver, retried)
                problem = type(exc).__name__
                continue
            if 200 <= status < 300:
                self.counters["webhooks_sent"] += 1
                return
            problem = f"HTTP {status}"
            if 400 <= status < 500 and status not in RETRYABLE_4XX:
                break
        self.counters["webhooks_failed"] += 1
        log.warning("call %s: end-of-call webhook not delivered (%s)", call_sid, problem)
