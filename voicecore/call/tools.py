"""Tools' policies of the controller: the writes already done, the wait after a tool's result, and a function
awaiting the caller's yes.

- ``WriteLedger``: a write tool (a booking, a payment) that ran is remembered by its idempotency key
  (voicecore/agent/actions.py) for ``dedupe_ms``; the same write asked again in that window (the model
  repeating itself, a second yes) gets the first result, and nothing runs twice.
- ``PostToolDebounce``: after a tool's result the agent would speak, but the caller may still be talking
  (a fast tool answers mid-sentence). It waits until the caller was quiet for ``debounce_quiet_ms`` (speech,
  not only words, counts as not quiet: a transcript can come seconds after the speech began), at most
  ``debounce_cap_ms``, gathering the caller's completed words meanwhile into one turn
  (docs/explanation/agents.md#tools).

Sans-I/O: fed ``now_ns``.
"""

from __future__ import annotations

import dataclasses

from voicecore.call import flow as flows

MS = 1_000_000
DEFAULT_DEDUPE_MS = 30_000  # a write's (or confirmed action's) success stands this long: not run twice


@dataclasses.dataclass(slots=True)
class PendingAction:
    """A function that runs only after the caller's yes
    (docs/explanation/agents.md#actions-with-confirmation)."""

    call_id: str
    plan: flows.ToolPlan
    asked_ns: int
    played_ns: int = 0  # its confirmation prompt played out; the timeout runs from here


class WriteLedger:
    __slots__ = ("window_ms", "done")

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.done: dict[str, tuple[int, str]] = {}  # idempotency key -> (until_ns, output)

    def recent(self, key: str, now_ns: int) -> str | None:
        """The output of the write of ``key`` if it ran within the window, else None."""
        done = self.done.get(key)
        return done[1] if done is not None and done[0] > now_ns else None

    def remember(self, key: str, output: str, now_ns: int) -> None:
        for old in [k for k, (until, _) in self.done.items() if until <= now_ns]:
            del self.done[old]
        self.done[key] = (now_ns + self.window_ms * MS, output)


class PostToolDebounce:
    __slots__ = ("quiet_ms", "cap_ms", "window", "fragments")

    def __init__(self, quiet_ms: int, cap_ms: int) -> None:
        self.quiet_ms = quiet_ms
        self.cap_ms = cap_ms
        self.window: tuple[int, int] | None = None  # (started_ns, the caller's last sign of speech)
        self.fragments: list[str] = []  # the caller's completed words while waiting

    @property
    def waiting(self) -> bool:
        return self.window is not None

    def start(self, now_ns: int) -> None:
        self.window = (now_ns, now_ns)
        self.fragments = []

    def heard(self, text: str, completed: bool, now_ns: int) -> None:
        """Words of the caller (a delta, or ``completed``: an utterance's final transcript)."""
        if self.window is None or not (text.strip() or completed):
            return
        self.window = (self.window[0], now_ns)
        if completed and text.strip():
            self.fragments.append(text.strip())

    def due(self, now_ns: int, caller_speaking: bool) -> bool:
        """The wait is over: the caller was quiet long enough, or the cap was reached."""
        if self.window is None:
            return False
        started, last = self.window
        if caller_speaking:
            last = now_ns
            self.window = (started, now_ns)
        return (now_ns - last) // MS >= self.quiet_ms or (now_ns - started) // MS >= self.cap_ms

    def take(self) -> str:
        """End the wait: the words gathered, as one turn."""
        combined = " ".join(self.fragments)
        self.window = None
        self.fragments = []
        return combined
