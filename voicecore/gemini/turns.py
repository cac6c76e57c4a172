"""Gemini Live's server messages as the turns of a conversation, in the Realtime API's events: one account of
which model turn is which response, and which caller utterance is which item, shared by the driver and by
whatever reads a Gemini call's record.

Owns the turn bookkeeping, pure (no clock, no audio work): fed the parsed server events of one session in
order (``feed``), it returns the events of voicecore/realtime/events.py the OpenAI path would have seen, so
the mechanism core (voicecore/call/core.py), the live observers and the call store's summary read a Gemini
call as they read any other:

- a model turn (``serverContent.modelTurn`` parts until ``turnComplete`` or ``interrupted``) is one response:
  ``ResponseCreated`` at its first audio, ``AudioDelta`` per audio part (the audio as given: the driver
  resamples it), ``TranscriptDelta`` per ``outputTranscription``, and at ``turnComplete``
  ``TranscriptDone`` + ``ResponseDone(completed)``;
- the caller taking the floor (``voiceActivity`` ACTIVITY_START, or ``interrupted`` / the first
  ``inputTranscription`` from a server that sends no voiceActivity) is ``SpeechStarted`` of a new caller item,
  and a turn being generated is cut there (``ResponseDone(cancelled, turn_detected)``): its late audio is
  dropped (``late_chunks``) until its ``turnComplete`` (the vendor ends an interrupted turn with one:
  "interrupted > turn_complete") or the next exchange begins (the caller's words, a tool call);
- the caller's words (``inputTranscription`` pieces) are ``InputTranscriptionDelta``s, completed
  (``InputTranscriptionCompleted``, after a ``SpeechStopped`` if none came) when the model starts answering;
- each ``toolCall`` function call is a ``FunctionCallArgumentsDone``.

A session whose setup asked for ``activityHandling`` NO_INTERRUPTION (``server_interrupts`` False: the
turn-taking controller's rule, voicecore/gemini/driver.py) is never cut by the caller's activity: the server
finishes the turn, and the runtime cuts it (``cut_turn``) when the caller's words make a turn of it; the cut
turn's audio is late until its ``turnComplete``.

Response ids are ``gemini_turn_<n>`` in the order the turns began: a record's reader counts the same as the
driver did.
"""

from __future__ import annotations

import dataclasses
import json

from voicecore.gemini import protocol as gp
from voicecore.realtime import events as rt

# The top-level members of Gemini's server messages: how a record's reader tells them from Realtime events.
_MESSAGE_HEADS = tuple(f'{{"{name}"' for name in (*gp.SERVER_MESSAGE_MEMBERS, "voiceActivity",
                                                   "voiceActivityDetectionSignal"))


def is_gemini_text(text: str) -> bool:
    """A Gemini server message's text (a Realtime event's starts with its type)."""
    return text.startswith(_MESSAGE_HEADS)


@dataclasses.dataclass(slots=True)
class GeminiTurns:
    """One session's turn bookkeeping (module docstring)."""

    turns: int = 0
    response_id: str = ""  # the model turn in progress ("" none)
    cut: bool = False  # ... and it was cut: its late audio goes nowhere
    utterances: int = 0
    caller_item: str = ""  # the caller's utterance not yet completed ("" none)
    caller_stopped: bool = False
    words: list[str] = dataclasses.field(default_factory=list)
    said: list[str] = dataclasses.field(default_factory=list)  # the model turn's outputTranscription so far
    late_chunks: int = 0
    server_interrupts: bool = True  # False: activityHandling NO_INTERRUPTION (the module docstring)
    server_cut: bool = False  # the turn in progress was cut by the server's `interrupted` (it sends no more of it)

    def configured_by(self, setup_text: str) -> None:
        """The client's ``setup`` (its text as sent): whether the server cuts a turn on the caller's activity."""
        self.server_interrupts = gp.NO_INTERRUPTION not in setup_text

    def cut_turn(self) -> list[object]:
        """The runtime cut the turn in progress (the caller's words took the floor, or it answered a
        backchannel): the rest of its audio is late."""
        if not self.response_id or self.cut:
            return []
        self.cut = True
        return [rt.ResponseDone(self.response_id, "cancelled", "turn_detected")]

    def item_of(self, response_id: str) -> str:
        return response_id.replace("gemini_turn_", "gemini_item_")

    def feed(self, event: gp.ServerEvent) -> list[object]:
        if isinstance(event, gp.ModelAudio):
            if self.response_id and self.cut:
                self.late_chunks += 1
                return []
            out = self._answer_starts()
            return out + [rt.AudioDelta(self.response_id, self.item_of(self.response_id), event.audio)]
        if isinstance(event, gp.OutputTranscription):
            if not self.response_id or self.cut or not event.text:
                return []
            self.said.append(event.text)
            return [rt.TranscriptDelta(self.response_id, self.item_of(self.response_id), event.text)]
        if isinstance(event, gp.TurnComplete):
            response_id, cut = self.response_id, self.cut
            self.response_id, self.cut = "", False
            if not response_id or cut:
                return []
            return [rt.TranscriptDone(response_id, self.item_of(response_id), "".join(self.said).strip()),
                    rt.ResponseDone(response_id, "completed", None)]
        if isinstance(event, gp.VoiceActivity):
            if event.started:
                return self._caller_starts(new=True)
            if self.caller_item and not self.caller_stopped:
                self.caller_stopped = True
                return [rt.SpeechStopped(None, self.caller_item)]
            return []
        if isinstance(event, gp.Interrupted):
            if self.server_interrupts:
                return self._caller_starts(new=False)
            # NO_INTERRUPTION: the caller's activity cut nothing; a client message did (a text turn). The server
            # ends the cut turn with its turnComplete ("interrupted > turn_complete"): audio before that is the
            # cut turn's late audio, never the start of the answer asked for.
            out = self.cut_turn()
            self.server_cut = True
            return out
        if isinstance(event, gp.InputTranscription):
            out = self._next_exchange()
            if not event.text.strip():
                return out
            if not self.caller_item:
                out += self._caller_starts(new=True)
            self.words.append(event.text.strip())
            return out + [rt.InputTranscriptionDelta(self.caller_item, event.text)]
        if isinstance(event, gp.ToolCall):
            out = self._next_exchange() + self._complete_words()
            for call in event.calls:
                arguments = json.dumps(call.args, separators=(",", ":"), sort_keys=True)
                out.append(rt.FunctionCallArgumentsDone(self.response_id, f"gemini_call_{call.call_id}", call.call_id,
                                                        call.name, arguments))
            return out
        return []

    def lost(self) -> list[object]:
        """The connection is gone: a turn in progress ends where it is (its session will not finish it), and so
        does the caller's utterance (the next connection's activity detection starts afresh: what it hears of
        the rest is a new one)."""
        response_id, cut = self.response_id, self.cut
        self.response_id, self.cut = "", False
        out: list[object] = [rt.ResponseDone(response_id, "incomplete", "session_lost")] if response_id and not cut else []
        return out + self._complete_words()

    def _answer_starts(self) -> list[object]:
        if self.response_id:
            return []
        # the model answers what the caller said; a caller still speaking (the server cuts nothing under
        # NO_INTERRUPTION: the turn answers something before) goes on with the same utterance
        out = self._complete_words() if self.server_interrupts or self.caller_stopped else []
        self.turns += 1
        self.response_id, self.cut, self.said = f"gemini_turn_{self.turns}", False, []
        self.server_cut = False
        return out + [rt.ResponseCreated(self.response_id)]

    def _caller_starts(self, new: bool) -> list[object]:
        """The caller took the floor: a new utterance (unless ``new`` is False and one is open), and the turn
        being generated is cut."""
        out: list[object] = []
        if new or not self.caller_item:
            out += self._complete_words()
            self.utterances += 1
            self.caller_item, self.caller_stopped = f"gemini_caller_{self.utterances}", False
            out.append(rt.SpeechStarted(None, self.caller_item))
        if self.server_interrupts or not new:  # `interrupted` cuts it whatever the setup asked
            out += self.cut_turn()
        return out

    def _next_exchange(self) -> list[object]:
        """A cut turn takes no more late audio once the exchange after it begins (a server that does not
        interrupt finishes it: its audio is late until its turnComplete)."""
        if self.response_id and self.cut and (self.server_interrupts or self.server_cut):
            self.response_id, self.cut = "", False
        return []

    def _complete_words(self) -> list[object]:
        if not self.caller_item:
            return []
        item, words = self.caller_item, " ".join(self.words)
        out: list[object] = [] if self.caller_stopped else [rt.SpeechStopped(None, item)]
        self.caller_item, self.caller_stopped, self.words = "", False, []
        return out + [rt.InputTranscriptionCompleted(item, words)]
