"""A simulated call-screening assistant that puts the call through once the caller has introduced themselves.

Owns the decision of when the screened person comes on: after the assistant's greeting, the agent's audio is
heard (its introduction), at least ``INTRODUCTION_MIN_MS`` of it, then ``QUIET_MS`` without it (the caller
waits); the person then says hello (``hello``: mu-law), once. An agent that hangs up, or says nothing, is
never put through. Sans-I/O: the carrier simulator calls it every 20 ms tick (CallScript.caller) with the
call's core and the time, as voicecore/sim/turn_caller.py is called.
"""

from __future__ import annotations

from voicecore.timing import BYTES_PER_MS, FRAME_MS

INTRODUCTION_MIN_MS = 600  # less agent audio than this is no introduction (a click, a breath)
QUIET_MS = 1200  # the caller stopped: the assistant takes the introduction to the person
PUT_THROUGH_TEXT = ("en", "Hello? Yes, this is Anna.")  # what the screened person says when put through


class ScreenedCallee:
    def __init__(self, hello: bytes, greeting_end_ms: int, introduction_min_ms: int = INTRODUCTION_MIN_MS,
                 quiet_ms: int = QUIET_MS) -> None:
        self.hello = hello
        self.greeting_end_ms = greeting_end_ms  # the assistant's own greeting ends here (ms since the first frame)
        self.introduction_min_ms = introduction_min_ms
        self.quiet_ms = quiet_ms
        self.introduction_from_ms: float | None = None  # when the agent's introduction was first heard
        self.put_through_at_ms: float | None = None  # when the person's hello began (None: never put through)

    def __call__(self, core, elapsed_ms: float, now_ms: float) -> bool:
        if self.put_through_at_ms is not None:
            return False
        heard, origin = core.agent_heard_until_ms, core.send_origin_ms
        if heard is None or origin is None or heard - origin <= self.greeting_end_ms:
            return False
        if self.introduction_from_ms is None:
            # the agent's first audio after the greeting: its introduction began about a frame before it was heard
            self.introduction_from_ms = heard - origin - FRAME_MS
        introduced_ms = heard - origin - self.introduction_from_ms
        if introduced_ms < self.introduction_min_ms or now_ms - heard < self.quiet_ms:
            return False
        at_ms = (int(elapsed_ms) // FRAME_MS + 1) * FRAME_MS  # the next caller frame not yet sent
        core.add_utterance(at_ms, self.hello)
        self.put_through_at_ms = float(at_ms)
        return False

    @property
    def hello_ms(self) -> int:
        return len(self.hello) // BYTES_PER_MS
