"""The gateway's call status ledger: a placed call's verified status callbacks (busy, no-answer, failed,
completed, ...) kept in the call store, keyed by the call SID, where a campaign reads its attempts' outcomes.

Its writes run on one thread of their own with their own connection, never on the event loop; the callback
is answered at once (Twilio needs only the 2xx). A store that fails is logged and reopened on the next
callback: a lost status leaves the campaign waiting for it until its own bound, never the call.
"""

from __future__ import annotations

import logging

from voicecore.store.on_thread import StoreOnItsThread

log = logging.getLogger("voicecore.gateway")


class CallStatusLedger(StoreOnItsThread):
    def __init__(self, url: str) -> None:
        super().__init__(url, "gateway-call-status")

    def record(self, call_sid: str, status: str, sequence: int, direction: str, answered_by: str,
               duration_s: int | None, record_call_sid: str = "") -> None:
        """``record_call_sid``: the id the call's record goes by when the carrier names it beside ``call_sid``."""
        try:
            self.thread.submit(self._record, call_sid, status, sequence, direction, answered_by, duration_s,
                               record_call_sid)
        except RuntimeError:  # the gateway is stopping: its thread is shut down
            log.warning("call %s: status %s not stored (the gateway is stopping)", call_sid, status,
                        extra={"problem": "call status store"})

    def _record(self, call_sid: str, status: str, sequence: int, direction: str, answered_by: str,
                duration_s: int | None, record_call_sid: str) -> None:
        try:
            self._open().add_call_status(call_sid, status, sequence, direction, answered_by, duration_s,
                                         record_call_sid=record_call_sid)
        except Exception as exc:  # noqa: BLE001 (driver errors vary; the next callback reopens)
            self._use_failed(log, "call status store", "call %s: status %s not stored (%s: %s)", call_sid, status,
                             type(exc).__name__, exc)
            return
        self._use_worked(log, "call statuses")

    def record_answered_by(self, call_sid: str, answered_by: str) -> None:
        """A carrier AMD result that came in a callback of its own: kept on the call's status row."""
        try:
            self.thread.submit(self._record_answered_by, call_sid, answered_by)
        except RuntimeError:
            log.warning("call %s: AMD result %s not stored (the gateway is stopping)", call_sid, answered_by,
                        extra={"problem": "call status store"})

    def _record_answered_by(self, call_sid: str, answered_by: str) -> None:
        try:
            self._open().set_answered_by(call_sid, answered_by)
        except Exception as exc:  # noqa: BLE001 (driver errors vary; the next callback reopens)
            log.warning("call %s: AMD result not stored (%s: %s)", call_sid, type(exc).__name__, exc,
                        extra={"problem": "call status store"})
            self._drop()

    def close(self) -> None:
        self.thread.submit(self._drop)
        self.thread.shutdown(wait=True, cancel_futures=False)
