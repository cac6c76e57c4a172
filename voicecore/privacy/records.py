"""What of a call is stored: the agent's storage tier applied to each call-record entry before it is kept.

Owns the tiers' rules for record entries and recorded actions; no I/O. The model worker's recorder
(voicecore/call/record.py ``CallRecorder``) passes every entry through ``RecordPrivacy.entry`` before it is
appended, handed to the record file, or read by the live observers and the store's summarizer, so records,
the call store, observer events, webhooks and traces all get the same stored form; the driver itself
(and through it the tools and the model) still gets what the caller said.

Tiers (``[privacy] storage`` in agent.toml):

- ``everything``: entries as they are (the caller's audio as ``record_caller_audio`` says).
- ``no_audio``: no caller audio; words as said.
- ``redacted``: no caller audio; every text field of the model's events (transcripts, function-call
  arguments, text) and of the recorded actions (tool arguments and results, the text sent to the model,
  retrieval questions) redacted (voicecore/privacy/redact.py); the idempotency key of a tool run (a
  hash of its arguments, which a card or identity number is too small a space to hide in) replaced.
  Deltas (a transcript as it streams, a function's arguments as they stream) are redacted and then masked:
  every digit, and every digit said as a word, becomes ``N``, since a number cut across two deltas is in
  neither whole; the completed transcript keeps its words with only the personal data replaced.
  Such a record replays identically (the replay compares the replayed actions in their stored form).
- ``metadata_only``: no caller audio, no agent audio, and no text: every text field is emptied. The store
  keeps the call, its turns and their timings. Such a record cannot be replayed (the words decided).

The agent's audio is kept under ``redacted`` (the agent may have read a number back).

Gemini Live messages (voicecore/gemini/protocol.py) carry the same things in other members: the caller's
transcription streams in pieces with no completed text after them (each ``inputTranscription`` piece is
masked as a delta); the agent's (``outputTranscription``) is redacted piece by piece as a whole text is, not
masked, because the driver quotes the agent's words back to the model (the note of what a caller heard of a
cut answer) and a replay fed masked words would quote them otherwise; the whole texts the record's reader
joins from the pieces are redacted once more (voicecore/call/record_reader.py). A function call's ``args``
and a function response's ``response`` are objects (every value in them is the caller's business, as in
tool arguments and results), and the agent's audio is ``inlineData`` (emptied under ``metadata_only``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

import orjson

from voicecore.privacy.redact import DIGIT_WORDS, Redactor

TIERS = ("everything", "no_audio", "redacted", "metadata_only")
# The fields of model events and of recorded actions that carry words.
TEXT_KEYS = frozenset({"transcript", "text", "arguments", "output", "instructions", "question", "facts", "reason",
                       "citations"})
AUDIO_DELTA_TYPES = ("response.audio.delta", "response.output_audio.delta")
# A Gemini Live message's members that carry words or audio (module docstring), and its top-level members
# (a message of the server or of the client: OpenAI's events say their "type" instead).
_GEMINI_TRANSCRIPTIONS = frozenset({"inputTranscription", "outputTranscription"})
_GEMINI_CALLER_WORDS = "inputTranscription"
_GEMINI_OBJECTS = frozenset({"args", "response"})
_GEMINI_AUDIO = frozenset({"inlineData", "audio"})
_GEMINI_MEMBERS_WITH_WORDS = _GEMINI_TRANSCRIPTIONS | _GEMINI_OBJECTS | _GEMINI_AUDIO
_GEMINI_MEMBERS = frozenset({"setupComplete", "voiceActivity", "serverContent", "toolCall", "toolCallCancellation",
                             "goAway", "sessionResumptionUpdate", "usageMetadata", "setup", "clientContent",
                             "realtimeInput", "toolResponse"})
# An event's text holds none of these (quoted, so no base64 audio can) and no escape: no field of it carries
# words, so no tier but metadata_only changes it.
_WORD_KEYS = tuple(f'"{key}"' for key in sorted(TEXT_KEYS | _GEMINI_TRANSCRIPTIONS | _GEMINI_OBJECTS | {"delta"}))
# Digit words that are backchannels too ("oh"): masking them would turn a backchannel into a turn.
_KEPT_DIGIT_WORDS = frozenset({"oh", "o"})
_MASKED_WORDS = "|".join(sorted((re.escape(w) for w in DIGIT_WORDS if w not in _KEPT_DIGIT_WORDS), key=len, reverse=True))
_DIGIT_WORD = re.compile(rf"(?<!\w)(?:{_MASKED_WORDS})(?!\w)", re.IGNORECASE)
_DIGIT = re.compile(r"\d")
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class RecordPrivacy:
    """A storage tier with its redactor, applied to record entries (``entry``) and recorded actions (``action``)."""

    def __init__(self, storage: str = "everything", languages: Sequence[str] = ("en",), patterns: Sequence[str] = ()) -> None:
        if storage not in TIERS:
            raise ValueError(f"storage tier {storage!r}: expected one of {', '.join(TIERS)}")
        self.storage = storage
        self.languages = tuple(languages)
        self.patterns = tuple(patterns)
        self.redactor = Redactor(self.languages, self.patterns)
        self.changes_text = storage in ("redacted", "metadata_only")
        self.blank = storage == "metadata_only"

    @classmethod
    def for_agent(cls, agent: Any) -> RecordPrivacy:
        return cls(agent.privacy_storage, agent.languages, agent.privacy_patterns)

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> RecordPrivacy:
        """The tier a record was written under (a record from before the tiers: everything)."""
        data = header.get("privacy") or {}
        return cls(data.get("storage", "everything"), data.get("languages", ("en",)), data.get("patterns", ()))

    def header(self) -> dict[str, Any]:
        return {"storage": self.storage, "languages": list(self.languages), "patterns": list(self.patterns)}

    @property
    def replayable(self) -> bool:
        return not self.blank

    def keep_caller_audio(self, configured: bool) -> bool:
        return configured and self.storage == "everything"

    # -- text ----------------------------------------------------------------------------------------------------------

    def log_text(self, value: str) -> str:
        """A text bound for a log line's fields (a gate verdict's reason, its citations): as the tier stores it."""
        return self.text(value) if self.changes_text else value

    def text(self, value: str) -> str:
        """A whole text (a completed transcript, a tool's result, a question) as stored."""
        if self.blank:
            return ""
        return self.redactor.redact(value)

    def delta(self, value: str) -> str:
        """A piece of a text that streams (a transcript delta): redacted, then every digit and digit word masked."""
        if self.blank:
            return ""
        return _DIGIT_WORD.sub("N", _DIGIT.sub("N", self.redactor.redact(value)))

    def json_text(self, value: str) -> str:
        """A text that may be JSON (tool arguments and results, what is sent to the model): every string in it,
        and every number long enough to be personal data, as stored; not JSON: as a whole text."""
        if self.blank and not value.lstrip().startswith(("{", "[")):
            return ""
        try:
            parsed = orjson.loads(value)
        except ValueError:
            return self.text(value)
        if not isinstance(parsed, (dict, list)):
            return self.text(value)
        return _ENCODER.encode(self._walk_all(parsed))

    def _walk_all(self, value: Any) -> Any:
        """Inside tool arguments and results: every value is the caller's business."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int) and abs(value) >= 1_000_000:
            stored = self.text(str(value))
            return value if stored == str(value) else stored
        if isinstance(value, dict):
            return {k: self._walk_all(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk_all(v) for v in value]
        return value

    def _walk_event(self, value: Any, streaming: bool, gemini: bool = False) -> Any:
        """Inside a model event or a message to the model: only the fields that carry words (and, in a
        Gemini message, its members of the module docstring)."""
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if gemini and isinstance(item, dict) and key in _GEMINI_MEMBERS_WITH_WORDS:
                    out[key] = self._gemini_member(key, item)
                elif isinstance(item, str) and key == "delta" and streaming:
                    out[key] = self.delta(item)
                elif isinstance(item, str) and key in ("arguments", "output"):
                    out[key] = self.json_text(item)
                elif isinstance(item, str) and key in TEXT_KEYS:
                    out[key] = self.text(item)
                elif isinstance(item, (dict, list)):
                    out[key] = self._walk_event(item, streaming, gemini)
                else:
                    out[key] = item
            return out
        if isinstance(value, list):
            return [self._walk_event(v, streaming, gemini) for v in value]
        return value

    def _gemini_member(self, key: str, item: dict[str, Any]) -> dict[str, Any]:
        if key in _GEMINI_TRANSCRIPTIONS:  # a piece of a transcript: the vendor never sends it whole
            text = item.get("text")
            if not isinstance(text, str):
                return item
            return {**item, "text": self.delta(text) if key == _GEMINI_CALLER_WORDS else self.text(text)}
        if key in _GEMINI_AUDIO:
            return {**item, "data": ""} if self.blank and "data" in item else item
        return self._walk_all(item)  # a function call's args, a function response's response

    def model_event(self, text: str) -> str:
        """A model event's raw text as stored (unchanged when nothing in it changes)."""
        if any(kind in text for kind in AUDIO_DELTA_TYPES):
            if not self.blank:
                return text  # the agent's audio: kept under redacted
            try:
                event = orjson.loads(text)
            except ValueError:
                return ""
            if isinstance(event, dict) and event.get("type") in AUDIO_DELTA_TYPES:
                return _ENCODER.encode({**event, "delta": ""})
        try:
            event = orjson.loads(text)
        except ValueError:
            return self.text(text)  # not JSON (a broken vendor): kept only as a text
        if not isinstance(event, dict):
            return text
        if not self.blank and "\\" not in text and not any(key in text for key in _WORD_KEYS):
            return text  # no field of it carries words (a Gemini audio chunk): not walked
        streaming = str(event.get("type", "")).endswith(".delta")
        stored = self._walk_event(event, streaming, _is_gemini(event))
        return text if stored == event else _ENCODER.encode(stored)

    # -- record entries and actions ------------------------------------------------------------------------------------

    def entry(self, entry: dict[str, Any]) -> dict[str, Any]:
        """A record entry as stored (the same dict when the tier changes nothing in it)."""
        if not self.changes_text:
            return entry
        kind = entry["k"]
        if kind == "model":
            stored = self.model_event(entry["text"])
            return entry if stored is entry["text"] else {**entry, "text": stored}
        if kind == "out":
            return {**entry, "a": self.action(entry["a"])}
        if kind == "tool":
            return {**entry, "output": self.json_text(str(entry.get("output", "")))}
        if kind == "verdict":
            return {**entry, "reason": self.text(str(entry.get("reason", ""))),
                    "citations": self.json_text(str(entry.get("citations", ""))) if entry.get("citations") else ""}
        return entry

    def action(self, action: dict[str, Any]) -> dict[str, Any]:
        """A recorded action (``controller.action_to_dict``) as stored. Idempotent, so a replay compares the
        actions it makes, stored the same way, with the record's."""
        if not self.changes_text:
            return action
        kind = action.get("type")
        if kind == "SendToModel":
            return {**action, "text": self._model_message(str(action.get("text", "")))}
        if kind == "GateTranscript":
            return {**action, "text": self.delta(str(action.get("text", "")))}
        if kind == "RunTool":
            return {**action, "arguments": self.json_text(str(action.get("arguments", ""))), "key": "[redacted]"}
        stored = dict(action)
        for key in ("question", "facts", "script"):
            if isinstance(stored.get(key), str):
                stored[key] = self.text(stored[key])
        return stored

    def _model_message(self, text: str) -> str:
        try:
            message = orjson.loads(text)
        except ValueError:
            return self.text(text)
        if not isinstance(message, dict):
            return self.text(text)
        return _ENCODER.encode(self._walk_event(message, streaming=False, gemini=_is_gemini(message)))


def _is_gemini(message: dict[str, Any]) -> bool:
    return "type" not in message and not _GEMINI_MEMBERS.isdisjoint(message)
