"""A simulated caller who takes turns: says each line once the agent is done answering the previous one.

Owns the decision of when the next line is said, from what the carrier simulator's call has heard of the
agent (its core's received and played frames): after the greeting (or the previous line), wait for the
agent's answer to start, then for ``quiet_ms`` without its audio; a turn whose answer never comes is given
up after ``answer_wait_ms``. After the last line's answer the caller hangs up. Sans-I/O: the carrier
simulator calls it every 20 ms tick (CallScript.caller) with the call's core and the time.
"""

from __future__ import annotations

from collections.abc import Sequence

from voicecore.timing import BYTES_PER_MS, FRAME_MS

QUIET_MS = 2000  # no agent audio this long after its answer started: the agent is done with the turn
ANSWER_WAIT_MS = 15_000  # no answer (or no end of it) this long after the line: go on anyway
GREETING_WAIT_MS = 15_000


class TurnCaller:
    def __init__(self, lines: Sequence[bytes], quiet_ms: int = QUIET_MS, answer_wait_ms: int = ANSWER_WAIT_MS,
                 greeting_wait_ms: int = GREETING_WAIT_MS) -> None:
        """``lines``: mu-law audio of each line, in order."""
        self.lines = list(lines)
        self.quiet_ms = quiet_ms
        self.answer_wait_ms = answer_wait_ms
        self.greeting_wait_ms = greeting_wait_ms
        # (start, end of audio) of each line said, in the call's ms (ms since its first media frame), and the
        # same start on the clock the caller was given (now_ms: CLOCK_MONOTONIC ms, the stack's records' clock)
        self.said_ms: list[tuple[float, float]] = []
        self.said_clock_ms: list[float] = []
        self.gave_up: list[int] = []  # turns (0: the greeting) whose answer did not end in time
        self.hung_up = False
        self._waiting_since_ms = 0.0  # the call's ms the current wait began (the last line's end)

    def __call__(self, core, elapsed_ms: float, now_ms: float) -> bool:
        if self.hung_up:
            return True
        if self.said_ms and elapsed_ms < self.said_ms[-1][1]:
            return False  # still saying the line
        origin = core.send_origin_ms
        heard = core.agent_heard_until_ms
        waited = elapsed_ms - self._waiting_since_ms
        limit = self.greeting_wait_ms if not self.said_ms else self.answer_wait_ms
        # an answer started: the agent was heard after the wait began
        answered = heard is not None and origin is not None and heard - origin > self._waiting_since_ms
        done = answered and now_ms - heard >= self.quiet_ms
        if not done and waited < limit:
            return False
        if not done:
            self.gave_up.append(len(self.said_ms))
        if len(self.said_ms) == len(self.lines):
            self.hung_up = True
            return True
        line = self.lines[len(self.said_ms)]
        at_ms = (int(elapsed_ms) // FRAME_MS + 1) * FRAME_MS  # the next caller frame not yet sent
        core.add_utterance(at_ms, line)
        end_ms = at_ms + len(line) / BYTES_PER_MS
        self.said_ms.append((float(at_ms), end_ms))
        self.said_clock_ms.append(now_ms + (at_ms - elapsed_ms))
        self._waiting_since_ms = end_ms
        return False
