"""A call store connection a worker uses from one thread of its own, never from its event loop.

A worker's writes and reads of the shared store (the gateway's token claims and a placed call's status
callbacks, the model worker's live call states) must not hold up the loop that carries the calls' audio, and a
store that fails must cost nothing but that use: the connection is opened when first needed and dropped after a failure, so the next use reopens it.
A store outage (PostgreSQL restarting) is logged once, at its first failure, and once more when a use works again:
never a line per call.
"""

from __future__ import annotations

import concurrent.futures
import logging

from voicecore.store import CallStore


class StoreOnItsThread:
    def __init__(self, url: str, thread_name: str) -> None:
        self.url = url
        self.store: CallStore | None = None
        self.thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=thread_name)
        self.failing = False  # the last use failed: the next failure is not logged again

    def _connect(self) -> CallStore:
        return CallStore.open(self.url)

    def _open(self) -> CallStore:
        """The connection (on the thread only), opened if there is none."""
        if self.store is None:
            self.store = self._connect()
        return self.store

    def _drop(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # noqa: BLE001 (a failed connection may fail to close too)
                pass
            self.store = None

    def _use_failed(self, logger: logging.Logger, problem: str, message: str, *args: object) -> None:
        """A use failed (on the thread): the connection dropped, and ``message`` logged as a warning if this
        failure starts a failing spell, at debug level if the store was failing already."""
        self._drop()
        if self.failing:
            logger.debug(message, *args)
            return
        self.failing = True
        logger.warning(message + "; further failures are not logged until the store works again", *args,
                       extra={"problem": problem})

    def _use_worked(self, logger: logging.Logger, what: str) -> None:
        """A use worked (on the thread): the end of a failing spell is logged."""
        if self.failing:
            self.failing = False
            logger.info("%s: the store works again", what)
