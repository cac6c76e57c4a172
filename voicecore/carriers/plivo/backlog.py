"""Plivo's buffer bounded by its checkpoint echoes, as the gateway keeps it for one call, without I/O.

Owns: counting, in wire order, what one call's drains put on the socket (media entries, checkpoints, clears,
told apart by the call's templates as the drain does) and what comes back (``playedStream`` echoes,
``clearedAudio``), into a :class:`~voicecore.carriers.plivo.protocol.CheckpointLead`, and the checkpoints of the
gateway's own behind audio the pacer does not mark. The gateway publishes the position it settles (control word
CARRIER_PLAYED_POS) for the pacer's bound (BACKLOG_MAX_FRAMES, from the descriptor's ``backlog_max_frames``:
config ``plivo_max_unplayed_ms``). Plivo's descriptor (carrier.py) makes one per call; a carrier whose echoes
bound its buffer the same way would make its own.

Must not know: sockets, the clock, the arena.
"""

from __future__ import annotations

from voicecore.carriers.plivo.protocol import CheckpointLead
from voicecore.carriers.wire import WireTemplates

__all__ = ["OWN_CHECKPOINT_EVERY_FRAMES", "OWN_CHECKPOINT_PREFIX", "EchoBoundedBacklog", "is_own_checkpoint"]

# A checkpoint the gateway adds to a bounded call's stream (EchoBoundedBacklog.own_checkpoint): its name
# cannot be a pacer mark's (those are digits and colons: voicecore/carriers/marks.py).
OWN_CHECKPOINT_PREFIX = "vc-bound-"
OWN_CHECKPOINT_EVERY_FRAMES = 5  # as the pacer's marks (mark_every_frames' default): 100 ms


def is_own_checkpoint(name: str) -> bool:
    return name.startswith(OWN_CHECKPOINT_PREFIX)


class EchoBoundedBacklog:
    """One call's unplayed audio as the gateway sees it, for a carrier whose echoes bound it (Plivo).

    The gateway is the one place that sees both directions in wire order: it reports every drain's wire
    entries (:meth:`sent`: media, checkpoints, clears, told apart by the call's templates as the drain does)
    and every echo (:meth:`echoed`, ``playedStream``) and clear acknowledgement (:meth:`cleared`,
    ``clearedAudio``) to a :class:`~voicecore.carriers.plivo.protocol.CheckpointLead`, and publishes
    :meth:`played_position_frames` (control word CARRIER_PLAYED_POS). The pacer counts the media entries it
    puts on the wire from the same start (WIRE_FRAMES) and sends no more while the difference is at the
    bound: the carrier never holds more than that of unconfirmed audio, whatever its playout does. A clear
    counts everything sent before it as gone (played or thrown away) the moment it is sent, as CheckpointLead
    says; between the pacer writing the clear and the gateway sending it, the pacer still sees the old
    position: the bound errs on the full side, never the empty one."""

    __slots__ = ("lead", "_media_prefix", "_mark_prefix", "_mark_suffix", "_clear", "_since_checkpoint", "_own_sent")

    def __init__(self, templates: WireTemplates) -> None:
        self.lead = CheckpointLead()
        self._media_prefix = templates.media_prefix
        self._mark_prefix = templates.mark_prefix
        self._mark_suffix = templates.mark_suffix
        self._clear = templates.clear
        self._since_checkpoint = 0  # media entries sent after the newest checkpoint (or clear)
        self._own_sent = 0

    def sent(self, entries: list[bytes]) -> None:
        """One drain's wire entries, in the order they go to the socket (final text or raw entries alike)."""
        lead = self.lead
        media_prefix = self._media_prefix
        media = 0
        for data in entries:
            if data.startswith(media_prefix):
                media += 1
                continue
            if media:
                lead.frames_sent(media)
                media = 0
            if data.startswith(self._mark_prefix):
                name = data[len(self._mark_prefix):len(data) - len(self._mark_suffix)].decode("ascii")
                lead.checkpoint_sent(name, lead.sent_position_frames())
                self._since_checkpoint = 0
            elif data == self._clear:
                lead.clear_sent()
                self._since_checkpoint = 0
        if media:
            lead.frames_sent(media)
            self._since_checkpoint += media

    def own_checkpoint(self) -> bytes | None:
        """A checkpoint of the gateway's own, to send after this drain's entries, once OWN_CHECKPOINT_EVERY_FRAMES
        media entries went out with none behind them: the pacer marks only a response's audio (a mark names
        its tag), so a fallback line goes out unmarked, and its frames would hold the bound full with nothing
        left to echo: the call silent for good (a Plivo call's hold line did exactly that). Its echo settles
        the bound and nothing else (:func:`is_own_checkpoint`: the mark ledger never sees it)."""
        if self._since_checkpoint < OWN_CHECKPOINT_EVERY_FRAMES:
            return None
        self._own_sent += 1
        name = f"{OWN_CHECKPOINT_PREFIX}{self._own_sent}"
        self.lead.checkpoint_sent(name, self.lead.sent_position_frames())
        self._since_checkpoint = 0
        return self._mark_prefix + name.encode("ascii") + self._mark_suffix

    def is_own_checkpoint(self, name: str) -> bool:
        """Whether an echo is of one of :meth:`own_checkpoint`'s (it settles the bound and nothing else)."""
        return is_own_checkpoint(name)

    def is_own_checkpoint(self, name: str) -> bool:
        """Whether an echoed checkpoint is one of :meth:`own_checkpoint`'s (the mark ledger never sees those)."""
        return is_own_checkpoint(name)

    def echoed(self, name: str) -> None:
        self.lead.checkpoint_echoed(name)

    def cleared(self) -> None:
        self.lead.clear_confirmed()

    def played_position_frames(self) -> int:
        return self.lead.played_position_frames()

    def unplayed_frames(self) -> int:
        return self.lead.unplayed_frames()
