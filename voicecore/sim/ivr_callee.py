"""A simulated IVR menu that is navigated by keys: on the right digits it says "connecting you" and a person comes on.

Owns the menu's reaction: the keys it hears, in-band (DTMF tones in the agent's audio, found by
voicecore/outbound/dtmf.py's Goertzel detector on every frame the carrier received) or out of band (the carrier's
send-DTMF REST request for the call: voicecore/sim/carrier_rest.py calls :meth:`IvrCallee.on_rest_digits`); once the
keys heard end with ``expected`` (default ``SIM_IVR_DIGITS``), the menu waits ``AFTER_KEY_MS`` and plays
``connected`` (mu-law: "Connecting you." then the person's hello), once. Other keys are heard and kept
(``keys``), and change nothing. As menus do, it asks again once (``reprompt``: "To speak with someone, press 1.")
when the caller has spoken after its greeting and then been quiet ``REPROMPT_QUIET_MS`` without a key. Sans-I/O: the carrier simulator calls it every 20 ms tick (CallScript.caller) with
the call's core and the time, as voicecore/sim/screened_callee.py is called.
"""

from __future__ import annotations

from voicecore.outbound.dtmf import DtmfDetector, keys_of
from voicecore.timing import BYTES_PER_MS, FRAME_MS

SIM_IVR_DIGITS = "1"  # the key the simulated menus' "press 1" asks for: it reaches a person
CONNECTING_TEXT = ("en", "Connecting you.")
PERSON_TEXT = ("en", "Hello, this is Anna speaking.")
AFTER_KEY_MS = 400  # the menu's reaction time after the key
CONNECT_GAP_MS = 700  # between "connecting you" and the person's hello
REPROMPT_TEXT = ("en", "To speak with someone, press 1.")
REPROMPT_QUIET_MS = 1200  # the caller spoke after the greeting, then this long quiet without a key: the menu again


class IvrCallee:
    # called in every carrier mode of the simulator (its REST keys reach a Telnyx, Plivo or Vonage call)
    any_carrier = True

    def __init__(self, connected: bytes, expected: str = SIM_IVR_DIGITS, connected_hello_at_ms: int = 0,
                 reprompt: bytes = b"", greeting_end_ms: int = 0) -> None:
        self.connected = connected  # mu-law from "connecting you" to the end of the person's hello
        self.expected = expected
        self.connected_hello_at_ms = connected_hello_at_ms  # where in ``connected`` the person's hello begins
        self.reprompt = reprompt  # mu-law of REPROMPT_TEXT ("": the menu never asks again)
        self.greeting_end_ms = greeting_end_ms  # the menu's own greeting ends here (ms since the first frame)
        self.reprompted_at_ms: float | None = None
        self.detector = DtmfDetector()
        self.rest_keys = ""
        self._frames_seen = 0
        self._rest_pending = False
        self.keys = ""  # every key heard, in-band and REST, in order
        self.key_at_ms: float | None = None  # when the expected keys were complete (ms since the first frame)
        self.connected_at_ms: float | None = None  # when "connecting you" began (None: never navigated)
        self.in_band = False  # the expected keys came as tones

    @property
    def navigated(self) -> bool:
        return self.connected_at_ms is not None

    @property
    def person_at_ms(self) -> float | None:
        return None if self.connected_at_ms is None else self.connected_at_ms + self.connected_hello_at_ms

    def on_rest_digits(self, digits: str) -> None:
        """The carrier's send-DTMF request for this call (its own pause characters dropped)."""
        keys = keys_of(digits.replace("p", ""))
        self.rest_keys += keys
        self.keys += keys
        self._rest_pending = bool(keys)

    def __call__(self, core, elapsed_ms: float, now_ms: float) -> bool:
        if self.connected_at_ms is not None:
            return False
        frames = core.frames
        for frame in frames[self._frames_seen:]:
            if frame.payload:
                found = self.detector.feed(frame.payload)
                if found:
                    self.keys += found
                    if self.keys.endswith(self.expected) and self.key_at_ms is None:
                        self.key_at_ms, self.in_band = elapsed_ms, True
        self._frames_seen = len(frames)
        if self._rest_pending:
            self._rest_pending = False
            if self.keys.endswith(self.expected) and self.key_at_ms is None:
                self.key_at_ms = elapsed_ms
        if self.key_at_ms is None:
            self._maybe_reprompt(core, elapsed_ms, now_ms)
            return False
        if elapsed_ms - self.key_at_ms < AFTER_KEY_MS:
            return False
        at_ms = (int(elapsed_ms) // FRAME_MS + 1) * FRAME_MS  # the next caller frame not yet sent
        core.add_utterance(at_ms, self.connected)
        self.connected_at_ms = float(at_ms)
        return False

    def _maybe_reprompt(self, core, elapsed_ms: float, now_ms: float) -> None:
        heard, origin = core.agent_heard_until_ms, core.send_origin_ms
        if (not self.reprompt or self.reprompted_at_ms is not None or heard is None or origin is None
                or heard - origin <= self.greeting_end_ms or now_ms - heard < REPROMPT_QUIET_MS):
            return
        at_ms = (int(elapsed_ms) // FRAME_MS + 1) * FRAME_MS
        core.add_utterance(at_ms, self.reprompt)
        self.reprompted_at_ms = float(at_ms)

    @property
    def connected_ms(self) -> int:
        return len(self.connected) // BYTES_PER_MS
