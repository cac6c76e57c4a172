"""The call driver protocol: what the model worker and the recorder call on a call's driver.

Owns the interface only. Two implementations: the turn-taking ``CallController`` (controller.py,
``call_control = "turns"``) and the ``SpineDriver`` (spine.py, ``call_control = "spine"``); one
conformance suite (tests/unit/test_driver_conformance.py) runs against both. ``CallRecorder`` (record.py)
wraps either and records every input listed here; ``voicecore replay`` rebuilds either from the header
``record_header`` returns (INV-REPLAY).

Every input takes ``now_ns`` (monotonic, from the shell) and, where playout matters, a ``Playout``
snapshot read from the control block at that moment; every input returns the actions to apply, in order.
The shell holds one driver per call and feeds it every input, the caller's audio included: the audio's
``SendToModel`` comes back first (``forwarding_actions``), then what the driver decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from voicecore.call.actions import Action, Playout

if TYPE_CHECKING:  # the interface names the types its implementations share, without importing one of them
    from voicecore.call.controller import ControllerStats
    from voicecore.call.core import ModelCallCore


# How often the shell ticks a driver that says it is ``quiet``: the coarse timers left then (a silence check-in,
# a confirmation's timeout, a call's end after its last line) count in seconds.
QUIET_TICK_MS = 100


def forwarding_actions(audio: bytes) -> int:
    """How many of ``on_caller_audio(audio, ...)``'s actions, the first ones, carry ``audio`` to the model:
    one ``SendToModel`` (none for no audio). They are the mechanism, not a decision: a record keeps the
    frames in its ``audio`` entry instead of as actions, and a replay compares what follows them."""
    return 1 if audio else 0


@runtime_checkable
class Driver(Protocol):
    call_sid: str
    control: str  # "turns" | "spine": the configuration's call_control and the record header's "control"
    core: ModelCallCore  # the mechanism the driver steers; the shell reads its stats (and nothing else)
    stats: ControllerStats | None  # the driver's own counters beyond its core's; None: it has none (the spine)
    wants_ticks: bool  # False: on_tick never acts (no timers), so the shell skips it (no playout read, no record line)
    # True: only coarse timers (seconds) can act until the next input, so the shell may tick it every QUIET_TICK_MS
    # instead of every loop; any input is handled at once as always. Read every loop: it must be cheap.
    quiet: bool

    def record_header(self) -> dict[str, Any]:
        """JSON-able: what a record's header needs to build this driver afresh (voicecore/replay.py)."""
        ...

    def start(self, now_ns: int, opening: str = "") -> list[Action]:
        """The call's media started and the model socket is open: configure the session (and greet)."""
        ...

    def resume(self, now_ns: int, cut_off: bool = False, restored: dict | None = None) -> list[Action]:
        """A worker took over this live call without its history: configure the session, greet no one;
        ``cut_off``: the dead worker was in the middle of an answer the caller will not hear the end of;
        ``restored``: the call's state from the store, written by another node's worker (a driver with
        ``call_state``: voicecore/call/restore.py), for a call re-attached here after its gateway died."""
        ...

    def reopen(self, now_ns: int, reattached: bool = False) -> list[Action]:
        """The model socket opened again after a drop: configure the new session, never greet twice.
        ``reattached``: the call is on a new stream after its gateway died (voicecore/reattach.py): nothing
        written for the old stream plays any more."""
        ...

    def on_model_lost(self, now_ns: int, reason: str, fatal: bool = False) -> list[Action]:
        """The model socket closed or could not be opened; ``fatal``: none will be opened for this call."""
        ...

    def awaiting_model(self) -> bool:
        """A caller waits on the model now (the pacer's own hold line covers such a call if this worker dies)."""
        ...

    def on_model_event(self, text: str | bytes, now_ns: int, playout: Playout) -> list[Action]:
        """One server event as it came off the socket (raw text: it is what a record keeps)."""
        ...

    def on_caller_audio(self, audio: bytes, now_ns: int, playout: Playout | None = None) -> list[Action]:
        """The caller's frames (mu-law, whole frames) from the inbound ring: first the ``SendToModel`` that
        appends them to the model's input (``forwarding_actions``; always, even after the call's end was
        decided: their content is the model's business), then what their timing decides. ``playout``:
        where playout stood, when the shell read it (a record keeps it for its WAV; no driver needs it)."""
        ...

    def on_dtmf(self, digit: str, now_ns: int) -> list[Action]:
        """A keypad digit (counted in the core's ``dtmf_digits``)."""
        ...

    def on_tick(self, now_ns: int, playout: Playout) -> list[Action]:
        """Timers and playout progress (the shell calls it every loop, 20 ms)."""
        ...

    def on_carrier_stop(self, now_ns: int) -> list[Action]:
        """The caller hung up or the stream stopped. The call's slot is no longer the driver's: of the
        actions, the shell applies those on the model session (``SendToModel``, ``CallOver``)."""
        ...

    def on_verdict(self, tag: int, approved_frames: int, rejected: bool, now_ns: int,
                   playout: Playout, reason: str = "", citations: str = "") -> list[Action]:
        """The validator's verdict on gated ``tag`` (INV-GATE). ``reason`` and ``citations``: for a record's
        reader; no driver decides on them."""
        ...

    def on_snippets(self, req_id: int, snippets: list[dict], now_ns: int) -> list[Action]:
        """The knowledge base's answer to a ``Retrieve`` action."""
        ...

    def on_tool_result(self, call_id: str, ok: bool, output: str, now_ns: int) -> list[Action]:
        """A tool's result for a ``RunTool`` action (``output``: JSON text for the model)."""
        ...

    def on_tones(self, call_id: str, digits: str, now_ns: int) -> list[Action]:
        """The ``RunTool`` ``call_id`` (``send_dtmf``) presses ``digits`` as in-band tones (the call's carrier takes
        keys only on the stream): agent audio under a tag of the core's own (``ModelCallCore.play_tones``), at once
        or once the response producing audio has written all of it. The tool's result comes later, as any."""
        ...

    def statistics(self) -> dict: ...
