"""The call driver protocol: what the model worker and the recorder call on a call's driver.

Owns the interface only. Two implementations: the turn-taking ``CallController`` (controller.py,
``call_control = "turns"``) and the ``SpineDriver`` (spine.py, ``call_control = "spine"``); one
conformance suite (tests/test_driver_conformance.py) runs against both. ``CallRecorder`` (record.py)
wraps either and records every input listed here; ``voicecore replay`` rebuilds either from the header
``record_header`` returns (INV-REPLAY).

Every input takes ``now_ns`` (monotonic, from the shell) and, where playout matters, a ``Playout``
snapshot read from the control block at that moment; every input returns the actions to apply, in order.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from voicecore.call.controller import Action
from voicecore.call.core import ModelCallCore, Playout


@runtime_checkable
class Driver(Protocol):
    call_sid: str
    control: str  # "turns" | "spine": the configuration's call_control and the record header's "control"
    core: ModelCallCore  # the mechanism the driver steers; the shell sends caller audio through it

    def record_header(self) -> dict[str, Any]:
        """JSON-able: what a record's header needs to build this driver afresh (voicecore/replay.py)."""
        ...

    def start(self, now_ns: int) -> list[Action]:
        """The call's media started and the model socket is open: configure the session (and greet)."""
        ...

    def reopen(self, now_ns: int) -> list[Action]:
        """The model socket opened again after a drop: configure the new session, never greet twice."""
        ...

    def on_model_event(self, text: str | bytes, now_ns: int, playout: Playout) -> list[Action]:
        """One server event as it came off the socket (raw text: it is what a record keeps)."""
        ...

    def on_caller_audio(self, n_frames: int, now_ns: int) -> list[Action]:
        """``n_frames`` of the caller's audio went to the model (their content is the model's business)."""
        ...

    def on_dtmf(self, digit: str, now_ns: int) -> list[Action]: ...

    def on_tick(self, now_ns: int, playout: Playout) -> list[Action]:
        """Timers and playout progress (the shell calls it every loop, 20 ms)."""
        ...

    def on_carrier_stop(self, now_ns: int) -> list[Action]:
        """The caller hung up or the stream stopped."""
        ...

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int,
                   playout: Playout) -> list[Action]:
        """The validator's verdict on gated ``tag`` (INV-GATE)."""
        ...

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[Action]:
        """The knowledge base's answer to a ``Retrieve`` action."""
        ...

    def statistics(self) -> dict: ...
