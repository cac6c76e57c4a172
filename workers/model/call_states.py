"""The model worker's side of the store's ``call_states``: each live call's state written as it changes, and the
state of a call re-attached here after its gateway died on another node read back.

Only with a shared (PostgreSQL) store: a re-attach request reaches any node of the fleet, and the node that gets
it has neither the driver nor the record of a call another node served (docs/how-to/drain.md). Everything runs
on one thread of its own (voicecore/store/on_thread.py), never on the audio loop: a write hands over the newest
state of a call and returns, states waiting to be written are coalesced (only a call's newest is written), and a
store that fails costs only the restore (one log line per failure spell; the call itself goes on).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time

import orjson

from voicecore.privacy.records import RecordPrivacy
from voicecore.store.on_thread import StoreOnItsThread

log = logging.getLogger("voicecore.model")

STATE_TTL_S = 4 * 3600.0  # as a re-attach token's life: no request can restore a call after that


class CallStates(StoreOnItsThread):
    def __init__(self, url: str, node: str) -> None:
        super().__init__(url, "model-call-states")
        self.node = node
        self.lock = threading.Lock()
        self.waiting: dict[str, bytes | None] = {}  # call_sid -> newest state to write (None: delete it)
        self.failing = False
        self.counters = {"call_states_written": 0, "call_states_failed": 0}

    def save(self, call_sid: str, state: dict) -> None:
        """Write ``state`` for ``call_sid`` soon (a newer one handed over before replaces it)."""
        self._hand_over(call_sid, orjson.dumps(state))

    def drop(self, call_sid: str) -> None:
        """The call ended here: its state is of no use to any node any more."""
        self._hand_over(call_sid, None)

    def _hand_over(self, call_sid: str, content: bytes | None) -> None:
        with self.lock:
            first = call_sid not in self.waiting
            self.waiting[call_sid] = content
        if first:
            self.thread.submit(self._write, call_sid)

    def _write(self, call_sid: str) -> None:  # on the thread
        with self.lock:
            if call_sid not in self.waiting:
                return
            content = self.waiting.pop(call_sid)
        try:
            store = self._open()
            if content is None:
                store.drop_call_state(call_sid)
            else:
                now = time.time()
                store.save_call_state(call_sid, self.node, content.decode(), now + STATE_TTL_S, now)
                self.counters["call_states_written"] += 1
            if self.failing:
                self.failing = False
                log.info("call states: the store takes them again")
        except Exception as exc:  # noqa: BLE001 (any store failure costs the restore, never the call)
            self.counters["call_states_failed"] += 1
            if not self.failing:
                self.failing = True
                log.warning("call %s: its state not written to the store for another node (%s: %s)", call_sid,
                            type(exc).__name__, exc, extra={"problem": "store"})
            self._drop()

    def lookup(self, call_sid: str) -> concurrent.futures.Future:
        """The future of ``call_sid``'s state as a worker last wrote it (``{"node", "updated_at", "state"}``), or
        None: a new call. Asked for every call that starts with no driver or record of its own here; a stream
        with a known CallSid starts only when a carrier re-attached the call."""
        return self.thread.submit(self._read, call_sid)

    def _read(self, call_sid: str) -> dict | None:  # on the thread
        try:
            row = self._open().call_state(call_sid)
        except Exception as exc:  # noqa: BLE001
            log.warning("call %s: the store did not say whether another node served it (%s: %s); starting it afresh",
                        call_sid, type(exc).__name__, exc, extra={"problem": "store"})
            self._drop()
            return None
        if row is None:
            return None  # a new call
        try:
            state = orjson.loads(row["state"])
        except orjson.JSONDecodeError:
            log.warning("call %s: its state in the store is not JSON; starting it afresh", call_sid,
                        extra={"problem": "store"})
            return None
        return {"node": row["node"], "updated_at": row["updated_at"], "state": state}

    def close(self) -> None:
        self.thread.submit(self._drop)
        self.thread.shutdown(wait=True, cancel_futures=False)


def state_as_stored(state: dict, privacy: RecordPrivacy) -> dict:
    """``state`` as the call's storage tier lets it reach the store: under ``redacted`` its texts redacted, under
    ``metadata_only`` no text at all (the flow's position and counters only). A confirmation whose arguments the
    tier changes is not carried (a tool must never run on redacted arguments: the new session asks again)."""
    if not privacy.changes_text:
        return state
    stored = dict(state)
    stored["history"] = [[role, kept] for role, text in state.get("history", []) if (kept := privacy.text(text))]
    stored["facts"] = privacy.json_text(state["facts"]) if state.get("facts") else ""
    stored["writes"] = [[key, left_ms, privacy.json_text(output)] for key, left_ms, output in state.get("writes", [])]
    pending = state.get("pending")
    if pending is not None and privacy.json_text(pending["plan"]["arguments"]) != pending["plan"]["arguments"]:
        del stored["pending"]
    return stored
