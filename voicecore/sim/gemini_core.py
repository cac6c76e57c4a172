"""Gemini Live simulator, the core: one connection's protocol behaviour, sans-I/O.

Owns what the simulated vendor says and when, for one WebSocket connection of the BidiGenerateContent
API: ``setup`` first (answered ``setupComplete``, or refused with the vendor's close codes), the caller's
activity (its own energy VAD on the 16 kHz PCM when automatic activity detection is on, announced with
``voiceActivity`` ACTIVITY_START / ACTIVITY_END; the client's ``activityStart`` / ``activityEnd`` when it is
disabled), a model turn of 24 kHz PCM16 audio chunks with
``outputTranscription``, then ``generationComplete`` and ``turnComplete``; barge-in (``interrupted``), tool
calls (``toolCall``, waiting for ``toolResponse``, ``toolCallCancellation`` on barge-in), ``goAway`` before
the connection's time limit and ``sessionResumptionUpdate`` handles that a later connection resumes with.

The shell (voicecore/sim/gemini.py) feeds client text and the clock in and writes out what is due; the
sessions that outlive a connection live in a ``SessionStore`` the shell keeps. No clock, randomness or
socket here: times are arguments (ms), handles are counters, the dither is seeded, so every test of it is
deterministic.

What the simulated model says is not understood speech: each caller turn is answered with the next agent
clip in turn, and a ``ToolRule`` fires on a caller turn's number or on the words of a turn. The caller's
words are transcribed (``inputTranscription``) only for the phrases it was given (``CallerPhrase``: a
harness's caller clips), each found in the caller's audio by normalised cross-correlation of its loudest
40 ms, as the client's resampling changes every sample; other speech is "(caller turn N)".
"""

from __future__ import annotations

import binascii
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from voicecore.gemini.protocol import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    HEARD_NOTE_ANSWER,
    HEARD_NOTE_SECONDS,
    HEARD_NOTE_PREFIX,
    INPUT_SAMPLE_RATE_HZ,
    OUTPUT_AUDIO_MIME,
    OUTPUT_SAMPLE_RATE_HZ,
    format_duration,
)
from voicecore.sim.model.clips import SPOKEN_CHARS_PER_S, scripted_text

CLOSE_INVALID_PAYLOAD = 1007  # the vendor's answer to a message it cannot read
BYTES_PER_SAMPLE = 2
VAD_WINDOW_MS = 20  # the simulator's activity detection judges the caller's audio this much at a time

# The members each client message may have, as the vendor's JSON mapping names them; anything else is
# refused as the vendor refuses an unknown field (close 1007 naming it).
_CLIENT_MEMBERS = frozenset({"setup", "clientContent", "realtimeInput", "toolResponse"})
_SETUP_MEMBERS = frozenset({"model", "generationConfig", "systemInstruction", "tools", "realtimeInputConfig",
                            "sessionResumption", "contextWindowCompression", "inputAudioTranscription",
                            "outputAudioTranscription", "proactivity"})
ACTIVITY_HANDLINGS = frozenset({"ACTIVITY_HANDLING_UNSPECIFIED", "START_OF_ACTIVITY_INTERRUPTS", "NO_INTERRUPTION"})
_REALTIME_MEMBERS = frozenset({"audio", "mediaChunks", "audioStreamEnd", "video", "text", "activityStart",
                               "activityEnd"})


# Frame identity: each turn's audio is its clip plus a low deterministic dither (+/-DITHER_LSB, about
# -66 dBFS, seeded by session, turn and chunk), so no two turns share an 8 kHz mu-law frame after the client
# resamples them (a clip's digital silence would otherwise be the same frame in every turn), and a harness
# can tell which turn a frame the carrier received belongs to. Quieter dither vanishes in mu-law's steps.
DITHER_LSB = 16


def chunk_seed(turn_seed: int, index: int) -> int:
    """The dither's seed of a turn's chunk ``index`` (each chunk is dithered as it goes out)."""
    return turn_seed * 100_003 + index


def dithered(pcm: bytes, seed: int) -> bytes:
    """``pcm`` (16-bit little-endian) with the turn's dither added (see DITHER_LSB), clipped to 16 bits."""
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % BYTES_PER_SAMPLE], dtype="<i2").astype(np.int32)
    noise = np.random.default_rng(seed).integers(-DITHER_LSB, DITHER_LSB + 1, samples.size)
    return np.clip(samples + noise, -32768, 32767).astype("<i2").tobytes()


def _camel(name: str) -> str:
    """A field's lowerCamelCase JSON name from its proto name (``realtime_input`` -> ``realtimeInput``)."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _field(obj: dict[str, Any], name: str, default: Any = None) -> Any:
    """Member ``name`` (lowerCamelCase) of a client message object, under either spelling: proto3 JSON
    parsers accept the proto field name too, and Google's Python SDK sends ``realtime_input`` so."""
    if name in obj:
        return obj[name]
    return obj.get(_snake(name), default)


def _names(obj: dict[str, Any]) -> set[str]:
    return {_camel(key) for key in obj}


@dataclass(frozen=True, slots=True)
class ToolRule:
    """A tool call the simulated model makes instead of answering a caller turn: on the caller's
    ``on_turn``-th turn of the session (1-based), on a turn whose words contain ``on_text`` (any case), or
    on spoken words only (``on_words``: the caller's recognised speech, never a client's text turn)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    on_turn: int | None = None
    on_text: str | None = None
    on_words: str | None = None

    def matches(self, turn: int, text: str | None, spoken: bool = False) -> bool:
        if self.on_turn is not None and self.on_turn == turn:
            return True
        if self.on_words is not None and spoken and text is not None and self.on_words.lower() in text.lower():
            return True
        return self.on_text is not None and text is not None and self.on_text.lower() in text.lower()


# Recognising a caller phrase: its loudest 40 ms at 8 kHz, searched in the caller's 16 kHz audio taken every
# other sample (both phases: the client's upsampler keeps neither exactly); a normalised correlation at or
# above RECOGNISE_MIN is the phrase. Short phrases' signatures can pass it inside another phrase ("Mm" in
# "Mm-hmm"): the best-scoring match claims its stretch of audio, and a match inside a claimed stretch is not heard.
PHRASE_RATE_HZ = 8_000
SIGNATURE_MS = 40
SIGNATURE_SAMPLES = PHRASE_RATE_HZ * SIGNATURE_MS // 1000
RECOGNISE_MIN = 0.8
# While the caller speaks, the phrases they finished saying are transcribed this often, from this much of the
# latest audio (the vendor streams inputTranscription during the utterance, not only at its end).
PARTIAL_EVERY_MS = 200
PRE_ROLL_MS = 300  # caller audio kept before the activity detection heard speech (a VAD starts late)


@dataclass(frozen=True, slots=True)
class CallerPhrase:
    """Words the simulator transcribes when it hears them: ``pcm8k`` is the phrase as 8 kHz 16-bit PCM.
    ``kind``: the harness's label of the clip (caller, backchannel, noise), kept in the record for the turn
    figures; a noise has no text and is transcribed as nothing."""

    text: str
    pcm8k: bytes
    kind: str = "caller"


@functools.lru_cache(maxsize=256)
def _signature(pcm8k: bytes) -> np.ndarray:
    """The loudest 40 ms of a phrase, zero-mean and unit-norm."""
    samples = np.frombuffer(pcm8k[: len(pcm8k) - len(pcm8k) % 2], dtype="<i2").astype(np.float64)
    if samples.size < SIGNATURE_SAMPLES:
        return np.zeros(0)
    at = _signature_at(pcm8k)
    part = samples[at:at + SIGNATURE_SAMPLES] - samples[at:at + SIGNATURE_SAMPLES].mean()
    norm = float(np.linalg.norm(part))
    return part / norm if norm else np.zeros(0)


@functools.lru_cache(maxsize=256)
def _signature_at(pcm8k: bytes) -> int:
    """Where in the phrase (8 kHz samples) its signature begins."""
    samples = np.frombuffer(pcm8k[: len(pcm8k) - len(pcm8k) % 2], dtype="<i2").astype(np.float64)
    energy = np.convolve(samples * samples, np.ones(SIGNATURE_SAMPLES), mode="valid")
    return int(np.argmax(energy))


@functools.lru_cache(maxsize=2048)
def _signature_spectrum(pcm8k: bytes, size: int) -> np.ndarray:
    return np.conj(np.fft.rfft(_signature(pcm8k), size))


def recognise_phrases(pcm16k: np.ndarray, phrases: tuple[CallerPhrase, ...]) -> str:
    """The words of the phrases heard in ``pcm16k`` (16 kHz samples), in the order heard ("" none)."""
    return " ".join(phrase.text for phrase in recognised(pcm16k, phrases) if phrase.text)


def heard_kind(heard: list[CallerPhrase]) -> str:
    """What an utterance was by the phrases heard in it: backchannel or noise when every one was, else caller
    ("" when none was recognised)."""
    kinds = {phrase.kind for phrase in heard}
    return "" if not kinds else kinds.pop() if len(kinds) == 1 else "caller"


def recognised(pcm16k: np.ndarray, phrases: tuple[CallerPhrase, ...]) -> list[CallerPhrase]:
    """The phrases heard in ``pcm16k`` (16 kHz samples), in the order heard."""
    return [phrase for _, _, phrase in recognised_spans(pcm16k, phrases)]


def recognised_spans(pcm16k: np.ndarray, phrases: tuple[CallerPhrase, ...]) -> list[tuple[int, int, CallerPhrase]]:
    """The phrases heard in ``pcm16k`` (16 kHz samples), in the order heard, each with where it begins and ends
    (8 kHz samples from the audio's start; a phrase whose signature is near the audio's start may begin before it)."""
    claimed: list[tuple[int, int, CallerPhrase]] = []  # (start, end) in 8 kHz samples, best matches first
    for _, start, end, phrase in sorted(phrase_hits(pcm16k, phrases), key=lambda hit: -hit[0]):
        if all(other is not phrase and (end <= s or start >= e) for s, e, other in claimed):
            claimed.append((start, end, phrase))
    return sorted(claimed, key=lambda c: c[0])


def phrase_hits(pcm16k: np.ndarray, phrases: tuple[CallerPhrase, ...]) -> list[tuple[float, int, int, CallerPhrase]]:
    """Each phrase's best match in ``pcm16k`` at or above RECOGNISE_MIN: (score, start, end, phrase), the span in
    8 kHz samples from the audio's start. Matches may overlap (recognised_spans keeps the best)."""
    hits: list[tuple[float, int, int, CallerPhrase]] = []
    for phase in (0, 1):
        y = pcm16k[phase::2].astype(np.float64)
        n = y.size
        if n < SIGNATURE_SAMPLES:
            continue
        size = 1 << (n + SIGNATURE_SAMPLES - 1).bit_length()
        spectrum = np.fft.rfft(y, size)
        sums = np.concatenate(([0.0], np.cumsum(y)))
        squares = np.concatenate(([0.0], np.cumsum(y * y)))
        window_sum = sums[SIGNATURE_SAMPLES:] - sums[:-SIGNATURE_SAMPLES]
        # the window's energy about its mean (the signature is zero-mean): correlation is then normalised
        energy = squares[SIGNATURE_SAMPLES:] - squares[:-SIGNATURE_SAMPLES] - window_sum * window_sum / SIGNATURE_SAMPLES
        scale = np.sqrt(np.maximum(energy, 1e-9))
        quiet = energy < SIGNATURE_SAMPLES * 100.0 ** 2  # below about -50 dBFS: no phrase is in it
        for phrase in phrases:
            if _signature(phrase.pcm8k).size == 0:
                continue
            corr = np.fft.irfft(spectrum * _signature_spectrum(phrase.pcm8k, size), size)[: n - SIGNATURE_SAMPLES + 1]
            score = np.where(quiet, 0.0, corr / scale)
            at = int(np.argmax(score))
            if score[at] >= RECOGNISE_MIN:
                start = at - _signature_at(phrase.pcm8k)
                hits.append((float(score[at]), start, start + len(phrase.pcm8k) // 2, phrase))
    return hits


@dataclass(frozen=True, slots=True)
class GeminiSimConfig:
    api_keys: tuple[str, ...] = ()  # keys accepted; empty: any key (a missing one is still refused)
    models: tuple[str, ...] = ()  # model names served ("gemini-..." or "models/gemini-..."); empty: any
    connection_limit_ms: int = 600_000  # the vendor ends a connection after about 10 minutes
    go_away_notice_ms: int = 10_000  # goAway this long before the limit (timeLeft)
    speed_factor: float = 4.0  # model audio is sent this many times faster than it plays, as the vendor's is
    chunk_ms: int = 40  # audio per modelTurn chunk
    # The model's time from the caller's turn (or a function's result) to its first audio, as the vendor's
    # (hundreds of ms; the Realtime simulator's first_delta_latency_ms): a client must not count on audio at once.
    first_chunk_ms: int = 200
    late_chunks_after_interrupt: int = 0  # chunks of a cut turn still sent after `interrupted` (a fault)
    # A stall (the Realtime simulator's switch of the same name): a turn's output stops this long after its first
    # chunk went out, for stall_ms, then goes on; only the connection's model turns numbered in stall_turns
    # (counted from 0 on the session), or every turn when it is empty. None: no stall.
    stall_after_ms: int | None = None
    stall_ms: int = 2000
    stall_turns: tuple[int, ...] = ()
    # An error after the handshake: a session's first connection is closed with 1011 ("Internal error encountered.",
    # no goAway before it) this long after it opened, as the vendor's server now and then drops a live session; the
    # client resumes it on a new connection, which is not dropped. None: never.
    internal_error_after_ms: int | None = None
    vad_rms: float = 500.0  # 16-bit RMS at or above which 20 ms of the caller's audio is speech
    vad_silence_ms: int = 500  # of caller audio below it that ends the caller's activity
    tool_rules: tuple[ToolRule, ...] = ()
    # (words, line): a caller's spoken turn whose words contain ``words`` (any case) is answered with ``line``
    # (an agent scenario's [[sim]] answers, as the Realtime simulator follows them); other turns: the answers
    answer_rules: tuple[tuple[str, str], ...] = ()
    caller_phrases: tuple[CallerPhrase, ...] = ()  # what the transcription recognises (module docstring)
    # Vertex AI (the LlmBidiService path): bearer tokens accepted (empty: any), and the project and location a
    # model's resource name must carry (empty: any)
    access_tokens: tuple[str, ...] = ()
    vertex_project: str = ""
    vertex_location: str = ""

    def serves(self, model: str) -> bool:
        bare = model.removeprefix("models/")
        return not self.models or any(m.removeprefix("models/") == bare for m in self.models)


@dataclass(frozen=True, slots=True)
class Answer:
    """One thing the simulated model says: its words and 24 kHz PCM16 audio."""

    text: str
    pcm24: bytes


@dataclass(slots=True)
class GeminiSession:
    """What outlives a connection: the conversation, continued by a resumption handle."""

    number: int
    caller_turns: int = 0
    model_turns: int = 0
    history: list[tuple[str, str]] = field(default_factory=list)  # (role, text), as the model would keep it
    handles: list[str] = field(default_factory=list)
    connections: int = 0


@dataclass(slots=True)
class SessionStore:
    """Sessions by resumption handle (the shell keeps one per server)."""

    by_handle: dict[str, GeminiSession] = field(default_factory=dict)
    sessions: list[GeminiSession] = field(default_factory=list)

    def new_session(self) -> GeminiSession:
        session = GeminiSession(len(self.sessions))
        self.sessions.append(session)
        return session

    def issue_handle(self, session: GeminiSession) -> str:
        handle = f"sim-resume-{session.number}-{len(session.handles)}"
        session.handles.append(handle)
        self.by_handle[handle] = session
        return handle


@dataclass(slots=True)
class TurnRecord:
    """One model turn as sent: which answer, its audio chunks and when each went out, how it ended."""

    text: str
    pcm24: bytes  # the whole answer's clip, undithered (what would be sent if not interrupted, but its dither)
    started_ms: int
    seed: int = 0  # the turn's dither: chunk i of chunk_size bytes is dithered(..., chunk_seed(seed, i))
    chunk_size: int = 0
    chunk_bytes: list[int] = field(default_factory=list)  # PCM bytes of each audio chunk, in order
    chunk_sent_ms: list[int] = field(default_factory=list)  # when each chunk sent went out (late ones too)
    interrupted_ms: int | None = None
    client_cut_ms: int | None = None  # the client's note that its caller cut this turn arrived (NO_INTERRUPTION)
    completed_ms: int | None = None  # turnComplete sent
    late_chunks: int = 0
    stalled: bool = False  # its output paused for the configured stall


@dataclass(slots=True)
class ConnectionRecord:
    """What happened on one connection, for tests and harnesses."""

    setup: dict[str, Any] | None = None
    resumed: bool = False
    audio_in_bytes: int = 0
    turns_started: int = 0
    interrupts: int = 0
    late_chunks_sent: int = 0
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (id, name)
    tool_responses: list[tuple[str, str, dict]] = field(default_factory=list)  # (id, name, response)
    cancelled_calls: list[str] = field(default_factory=list)
    go_away_ms: int | None = None
    closed: tuple[int, str] | None = None  # the close the server decided on, if it did
    disconnected: bool = False  # set by the shell once the socket is gone, whoever closed it
    call_sid: str | None = None  # the shell's X-Voicecore-Call header, when the client sent one (harnesses)
    opened_ms: int = 0
    turns: list[TurnRecord] = field(default_factory=list)
    caller_activity: list[list[int | None]] = field(default_factory=list)  # [started_ms, ended_ms or None]
    transcripts: list[str] = field(default_factory=list)  # each audio turn's recognised words ("" none)
    caller_kinds: list[str] = field(default_factory=list)  # each audio turn's kind by its phrases ("" unknown)


@dataclass(slots=True)
class _Turn:
    # (due ms, message text, or the index of the audio chunk whose message is built when it is due), in order:
    # a turn's audio is dithered and encoded chunk by chunk as it goes out, never all at once at its start
    # (50 calls' turns starting together would stall the server for their whole answers' worth of work)
    chunks: list[tuple[int, str | int]]
    started_ms: int
    record: TurnRecord
    pieces: list[bytes]  # the clip's audio, chunk by chunk, undithered
    words: list[str]
    seed: int

    def audio_message(self, index: int) -> tuple[str, int]:
        """Chunk ``index``'s serverContent text and its PCM bytes (dithered: see DITHER_LSB)."""
        piece = dithered(self.pieces[index], chunk_seed(self.seed, index))
        content: dict[str, Any] = {"modelTurn": {"parts": [{"inlineData": {
            "mimeType": OUTPUT_AUDIO_MIME, "data": binascii.b2a_base64(piece, newline=False).decode("ascii")}}]}}
        # the words spread over the audio, as the vendor's transcription trails its speech
        n, words = len(self.pieces), self.words
        said = words[len(words) * index // n: len(words) * (index + 1) // n]
        if said:
            content["outputTranscription"] = {"text": " ".join(said) + " "}
        return _text({"serverContent": content}), len(piece)


class GeminiConnection:
    """One WebSocket connection. ``receive`` client text; ``advance`` the clock; ``take_outgoing`` what is
    due; ``close`` is set once the connection must end (send what is due, then close with it)."""

    def __init__(self, config: GeminiSimConfig, answers: tuple[Answer, ...], store: SessionStore, *,
                 api_key: str | None, now_ms: int, vertex: bool = False) -> None:
        if not answers:
            raise ValueError("the simulator needs at least one answer")
        self.config = config
        self.answers = answers
        self.store = store
        self.api_key = api_key
        self.vertex = vertex  # reached on Vertex AI's path: its token was checked at the upgrade, its model is a resource
        self.opened_ms = now_ms
        self.record = ConnectionRecord(opened_ms=now_ms)
        self.session: GeminiSession | None = None
        self.close: tuple[int, str] | None = None
        self.automatic_vad = True
        self.interrupts = True  # activityHandling: the caller's activity cuts the model's turn
        self._answer_after_turn: tuple[str | None, bool] | None = None  # a caller turn heard while the model spoke
        self.resumption = False
        self._out: list[str] = []
        self._turn: _Turn | None = None
        self._pending_calls: dict[str, str] = {}  # id -> name, awaiting toolResponse
        self._speaking = False
        self._silence_ms = 0.0
        self._heard: list[np.ndarray] = []  # the caller's audio since speech began (with its pre-roll)
        self._pre_roll: list[np.ndarray] = []
        self._heard_samples = 0  # 16 kHz samples in _heard
        self._partial_due = 0  # ... at which the phrases said so far are transcribed next
        self._searched_samples = 0  # ... searched for phrases so far (the next search starts near there)
        # phrases matched while the caller speaks: [score, start, end (8 kHz samples of the utterance), phrase, sent]
        self._partial_sent: list[list[Any]] = []
        self._go_away_due = now_ms + max(0, config.connection_limit_ms - config.go_away_notice_ms)
        self._limit_due = now_ms + config.connection_limit_ms
        after = config.internal_error_after_ms
        self._error_due = now_ms + after if after is not None else None

    # -- client input -------------------------------------------------------------------------------

    def receive(self, text: str | bytes, now_ms: int) -> None:
        if self.close is not None:
            return
        try:
            message = orjson.loads(text)
        except (ValueError, TypeError):
            self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid JSON payload received.")
            return
        if not isinstance(message, dict) or len(message) != 1:
            self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid JSON payload received. A message has exactly one member.")
            return
        (spelled, body), = message.items()
        kind = _camel(spelled)
        if kind not in _CLIENT_MEMBERS:
            self._refuse(CLOSE_INVALID_PAYLOAD, f'Invalid JSON payload received. Unknown name "{spelled}": Cannot find field.')
            return
        if not isinstance(body, dict):
            self._refuse(CLOSE_INVALID_PAYLOAD, f"Invalid JSON payload received. {kind} is not an object.")
            return
        if self.session is None and kind != "setup":
            self._refuse(CLOSE_POLICY_VIOLATION, "The first message must be setup.")
            return
        try:
            if kind == "setup":
                self._setup(body, now_ms)
            elif kind == "realtimeInput":
                self._realtime_input(body, now_ms)
            elif kind == "clientContent":
                self._client_content(body, now_ms)
            else:
                self._tool_response(body, now_ms)
        except (AttributeError, TypeError, ValueError):
            # a member of the wrong JSON type deeper in: refused like any unreadable payload, never raised
            self._refuse(CLOSE_INVALID_PAYLOAD, f"Invalid JSON payload received. A member of {kind} has the wrong type.")

    def _refuse(self, code: int, reason: str) -> None:
        # a close reason is at most 123 bytes (RFC 6455 5.5: 125 with the code)
        self.close = (code, reason.encode()[:123].decode(errors="ignore"))
        self.record.closed = self.close

    def _vertex_model_served(self, model: Any) -> bool:
        """projects/P/locations/L/publishers/google/models/NAME, of the configured project and location."""
        if not isinstance(model, str):
            return False
        parts = model.split("/")
        if (len(parts) != 8 or parts[0] != "projects" or parts[2] != "locations" or parts[4:7] != ["publishers", "google", "models"]
                or not all(parts)):
            return False
        config = self.config
        return ((not config.vertex_project or parts[1] == config.vertex_project)
                and (not config.vertex_location or parts[3] == config.vertex_location) and config.serves(parts[7]))

    def _setup(self, body: dict[str, Any], now_ms: int) -> None:
        if self.session is not None:
            self._refuse(CLOSE_POLICY_VIOLATION, "setup may be sent only once per connection.")
            return
        unknown = sorted(_names(body) - _SETUP_MEMBERS)
        if unknown:
            self._refuse(CLOSE_INVALID_PAYLOAD,
                         f"Invalid JSON payload received. Unknown name \"{unknown[0]}\" at 'setup': Cannot find field.")
            return
        model = _field(body, "model")
        if self.vertex:
            if not self._vertex_model_served(model):
                # the words first: a close reason is cut at 123 bytes and a resource name is long
                self._refuse(CLOSE_POLICY_VIOLATION, f"Publisher model not found, or the project has no access to it: {model}")
                return
        elif not self.api_key or (self.config.api_keys and self.api_key not in self.config.api_keys):
            self._refuse(CLOSE_POLICY_VIOLATION, "API key not valid. Please pass a valid API key.")
            return
        elif not isinstance(model, str) or not model.startswith("models/") or not self.config.serves(model):
            self._refuse(CLOSE_POLICY_VIOLATION, f"{model} is not found for API version v1beta, or is not "
                                                 "supported for bidiGenerateContent.")
            return
        realtime_config = _field(body, "realtimeInputConfig") or {}
        detection = _field(realtime_config, "automaticActivityDetection") or {}
        self.automatic_vad = not _field(detection, "disabled", False)
        handling = _field(realtime_config, "activityHandling", "ACTIVITY_HANDLING_UNSPECIFIED")
        if handling not in ACTIVITY_HANDLINGS:
            self._refuse(CLOSE_INVALID_PAYLOAD, f"Invalid value at 'setup.realtime_input_config.activity_handling' "
                                                f"(type.googleapis.com/google.ai.generativelanguage.v1beta.ActivityHandling), \"{handling}\"")
            return
        # NO_INTERRUPTION: the caller's activity cuts no turn; their turn is answered once the model's is done
        self.interrupts = handling != "NO_INTERRUPTION"
        resumption = _field(body, "sessionResumption")
        self.resumption = isinstance(resumption, dict)
        handle = _field(resumption, "handle") if self.resumption else None
        if handle:
            session = self.store.by_handle.get(handle)
            if session is None:
                self._refuse(CLOSE_POLICY_VIOLATION, "Invalid session resumption handle.")
                return
            self.record.resumed = True
        else:
            session = self.store.new_session()
        session.connections += 1
        self.session = session
        self.record.setup = body
        self._send({"setupComplete": {}})
        if self.resumption:
            self._send({"sessionResumptionUpdate": {"newHandle": self.store.issue_handle(session), "resumable": True}})

    def _realtime_input(self, body: dict[str, Any], now_ms: int) -> None:
        unknown = sorted(_names(body) - _REALTIME_MEMBERS)
        if unknown or len(body) != 1:
            self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid JSON payload received. realtimeInput takes one of "
                                                "audio, video, text, activityStart, activityEnd, audioStreamEnd.")
            return
        (spelled, value), = body.items()
        kind = _camel(spelled)
        if kind in ("activityStart", "activityEnd"):
            if self.automatic_vad:
                self._refuse(CLOSE_INVALID_PAYLOAD, "Explicit activity control is not supported when automatic "
                                                    "activity detection is enabled.")
                return
            if kind == "activityStart":
                self._caller_started(now_ms)
            else:
                self._caller_ended(now_ms)
        elif kind == "audio":
            self._audio(value, now_ms)
        elif kind == "audioStreamEnd":
            if self._speaking and self.automatic_vad:
                self._caller_ended(now_ms)
        # video, text, mediaChunks: a voice agent sends none; accepted and ignored

    def _audio(self, blob: Any, now_ms: int) -> None:
        if not isinstance(blob, dict) or not str(_field(blob, "mimeType", "")).startswith("audio/pcm"):
            self._refuse(CLOSE_INVALID_PAYLOAD, "realtimeInput.audio must be a blob of audio/pcm.")
            return
        try:
            pcm = binascii.a2b_base64(_field(blob, "data", ""), strict_mode=True)
        except (binascii.Error, ValueError, TypeError):
            self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid value at 'realtime_input.audio.data': not base64.")
            return
        self.record.audio_in_bytes += len(pcm)
        if not self.automatic_vad or len(pcm) < BYTES_PER_SAMPLE:
            return
        raw = np.frombuffer(pcm[: len(pcm) - len(pcm) % BYTES_PER_SAMPLE], dtype="<i2")
        samples = raw.astype(np.float64)
        # judged 20 ms at a time, as a VAD does: speech that begins late in a long message is heard there
        window = INPUT_SAMPLE_RATE_HZ * VAD_WINDOW_MS // 1000
        for start in range(0, len(samples), window):
            part = samples[start:start + window]
            rms = float(np.sqrt(np.mean(part * part)))
            if rms >= self.config.vad_rms:
                self._silence_ms = 0.0
                if not self._speaking:
                    # the server's activity detection says so as the vendor's does (voiceActivity), then acts on it
                    self._send({"voiceActivity": {"voiceActivityType": "ACTIVITY_START"}})
                    self._caller_started(now_ms)
                elif self._turn is not None and self.interrupts:
                    self._take_floor(now_ms)  # a turn begun while the caller speaks (a text turn's) is talked over
            elif self._speaking:
                self._silence_ms += 1000.0 * len(part) / INPUT_SAMPLE_RATE_HZ
                if self._silence_ms >= self.config.vad_silence_ms:
                    self._send({"voiceActivity": {"voiceActivityType": "ACTIVITY_END"}})
                    self._caller_ended(now_ms)
            # kept window by window: a client that falls behind sends seconds in one message, in which one
            # utterance may end and the next begin
            self._keep_heard(raw[start:start + window])

    def _keep_heard(self, raw: np.ndarray) -> None:
        """The caller's audio of the utterance being spoken, for the transcription (only with phrases to know)."""
        if not self.config.caller_phrases:
            return
        if self._speaking:
            self._heard.append(raw)
            self._heard_samples += raw.size
            if self._heard_samples >= self._partial_due:
                self._partial_due = self._heard_samples + INPUT_SAMPLE_RATE_HZ * PARTIAL_EVERY_MS // 1000
                self._transcribe_so_far()
            return
        self._pre_roll.append(raw)
        keep = INPUT_SAMPLE_RATE_HZ * PRE_ROLL_MS // 1000
        while sum(part.size for part in self._pre_roll) - self._pre_roll[0].size >= keep:
            self._pre_roll.pop(0)

    def _transcribe_so_far(self) -> None:
        """The phrases the caller finished saying, sent as inputTranscription pieces while they speak. Only the
        newest audio is searched (a phrase is found by its signature, 40 ms); a match whose phrase is not said
        to its end waits, and a better match over the same stretch replaces one not sent yet."""
        claims = self._claim_new_hits()
        said_until = self._heard_samples // 2
        for claim in sorted(claims, key=lambda c: c[1]):
            if claim[4] or claim[2] > said_until:
                continue
            first = not any(c[4] and c[3].text for c in claims)
            claim[4] = True
            if claim[3].text:
                self._send({"serverContent": {"inputTranscription": {"text": ("" if first else " ") + claim[3].text}}})

    def _claim_new_hits(self) -> list[list]:
        """Searches the audio heard since the last search (from two signatures before its end, so a signature
        across the seam is whole in one of them; the whole utterance the first time) and updates the claims: a
        hit claims its stretch unless a sent claim, or a better one, holds it. Each search costs what its stretch
        does, so the end of an utterance costs no more than a partial transcription: searching the whole
        utterance again there made the simulator, one process for every session, pause every session's audio
        for ~200 ms when 50 callers stopped speaking at once (docs/how-to/use-gemini.md#prefill)."""
        overlap = INPUT_SAMPLE_RATE_HZ * 2 * SIGNATURE_MS // 1000
        window = self._heard_samples - max(0, self._searched_samples - overlap)  # all of it the first time (0)
        self._searched_samples = self._heard_samples
        tail: list[np.ndarray] = []
        size = 0
        for part in reversed(self._heard):
            tail.append(part)
            size += part.size
            if size >= window:
                break
        offset = (self._heard_samples - size) // 2  # the tail's start, in 8 kHz samples of the utterance
        claims = self._partial_sent
        for score, start, end, phrase in sorted(phrase_hits(np.concatenate(tail[::-1]), self.config.caller_phrases),
                                                key=lambda hit: -hit[0]):
            start, end = start + offset, end + offset
            over = [c for c in claims if not (end <= c[1] or start >= c[2])]
            if any(c[4] or c[0] >= score for c in over):
                continue
            for c in over:
                claims.remove(c)
            claims.append([score, start, end, phrase, False])
        return claims

    def _heard_phrases(self) -> list[CallerPhrase]:
        """The phrases of the utterance that just ended, in the order heard: the claims of its searches after a
        last one over what came since, each phrase once (its best match, as one search of the whole utterance
        would find it)."""
        best: dict[int, list] = {}
        for claim in self._claim_new_hits():
            if id(claim[3]) not in best or claim[0] > best[id(claim[3])][0]:
                best[id(claim[3])] = claim
        return [claim[3] for claim in sorted(best.values(), key=lambda c: c[1])]

    def _client_content(self, body: dict[str, Any], now_ms: int) -> None:
        turns = _field(body, "turns", [])
        if not isinstance(turns, list):
            self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid JSON payload received. clientContent.turns is a list.")
            return
        assert self.session is not None
        texts = []
        for turn in turns:
            parts = _field(turn, "parts", []) if isinstance(turn, dict) else None
            if not isinstance(parts, list):
                self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid JSON payload received. A turn has a list of parts.")
                return
            if not all(isinstance(p, dict) and isinstance(p.get("text", ""), str) for p in parts):
                self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid JSON payload received. A part's text is a string.")
                return
            text = " ".join(p["text"] for p in parts if "text" in p)
            self.session.history.append((str(turn.get("role", "user")), text))
            texts.append(text)
        notes = [text for text in texts if text.startswith(HEARD_NOTE_PREFIX)]
        if not _field(body, "turnComplete") and notes:
            self._client_cut(now_ms, notes[-1])
        if _field(body, "turnComplete"):
            # a text turn cuts what the model is saying and is answered at once; a caller speaking meanwhile
            # goes on speaking (the activity detection hears their audio, not the client's text)
            self._take_floor(now_ms)
            self._answer(" ".join(texts), now_ms, spoken=False, line=scripted_text(texts[-1]) if texts else None)

    def _tool_response(self, body: dict[str, Any], now_ms: int) -> None:
        responses = _field(body, "functionResponses")
        if not isinstance(responses, list) or not responses:
            self._refuse(CLOSE_INVALID_PAYLOAD, "Invalid JSON payload received. toolResponse.functionResponses is a list.")
            return
        line = None  # a line a response's instruction asks the model to say as written: its next turn says it
        for response in responses:
            call_id = response.get("id") if isinstance(response, dict) else None
            if call_id not in self._pending_calls:
                self._refuse(CLOSE_INVALID_PAYLOAD, f"Function response id {call_id!r} answers no pending function call.")
                return
            name = self._pending_calls.pop(call_id)
            result = response.get("response")
            self.record.tool_responses.append((call_id, name, result if isinstance(result, dict) else {}))
            if isinstance(result, dict):
                line = scripted_text(result.get("instruction")) or line
        if not self._pending_calls:
            self._start_model_turn(now_ms, line)

    # -- turn taking ---------------------------------------------------------------------------------

    def _caller_started(self, now_ms: int) -> None:
        self.record.caller_activity.append([now_ms, None])
        if not self._speaking:
            self._heard, self._pre_roll = self._pre_roll, []
            self._heard_samples = sum(part.size for part in self._heard)
            self._partial_due, self._partial_sent, self._searched_samples = 0, [], 0
        self._speaking = True
        self._silence_ms = 0.0
        if self.interrupts:
            self._take_floor(now_ms)

    def _take_floor(self, now_ms: int) -> None:
        """The model's turn is cut and the function calls it waits on are cancelled."""
        if self._turn is not None:
            self._interrupt(now_ms)
        if self._pending_calls:
            ids = list(self._pending_calls)
            self._pending_calls.clear()
            self.record.cancelled_calls.extend(ids)
            self._send({"toolCallCancellation": {"ids": ids}})

    def _caller_ended(self, now_ms: int) -> None:
        if not self._speaking:
            return
        self._speaking = False
        if self.record.caller_activity and self.record.caller_activity[-1][1] is None:
            self.record.caller_activity[-1][1] = now_ms
        assert self.session is not None
        # its words if they are a phrase the simulator knows
        phrases = self._heard_phrases() if self._heard else []
        self._heard = []
        words = " ".join(phrase.text for phrase in phrases if phrase.text)
        kind = heard_kind(phrases)
        self.record.transcripts.append(words)
        self.record.caller_kinds.append(kind)
        said = words or f"(caller turn {self.session.caller_turns + 1})"
        # what was not transcribed while they spoke (a phrase whose end came last; unknown speech as a placeholder);
        # a cough or a breath is transcribed as nothing
        sent = [c[3] for c in self._partial_sent if c[4] and c[3].text]
        spoke = bool(sent)
        rest = [p for p in phrases if p.text and not (p in sent and sent.remove(p) is None)]
        if kind != "noise" and (rest or not spoke):
            text = " ".join(p.text for p in rest) if rest else said
            self._send({"serverContent": {"inputTranscription": {"text": (" " if spoke else "") + text}}})
        self._partial_sent = []
        self.session.history.append(("user", said))
        if self._turn is not None and not self.interrupts:
            self._answer_after_turn = (words or None, True)  # answered once the model's turn is done
            return
        self._answer(words or None, now_ms, spoken=True)

    def _answer(self, text: str | None, now_ms: int, spoken: bool, line: str | None = None) -> None:
        """A caller turn (spoken, or the client's text turn) ended: a function call its rules ask for, or a model
        turn. ``line``: what a text turn asked the model to say as written ("Say exactly: ...")."""
        assert self.session is not None
        self.session.caller_turns += 1
        for rule in self.config.tool_rules:
            if rule.matches(self.session.caller_turns, text, spoken):
                call_id = f"function-call-{self.session.number}-{len(self.record.tool_calls)}"
                self._pending_calls[call_id] = rule.name
                self.record.tool_calls.append((call_id, rule.name))
                self._send({"toolCall": {"functionCalls": [{"id": call_id, "name": rule.name, "args": dict(rule.args)}]}})
                self._not_resumable()
                return
        if line is None and spoken and text:
            line = next((answer for words, answer in self.config.answer_rules if words.lower() in text.lower()), None)
        self._start_model_turn(now_ms, line)

    def _start_model_turn(self, now_ms: int, line: str | None = None) -> None:
        """The model's next turn: the answers in turn, or ``line`` when the client asked for it as written (a
        model told to say a line says it: its words, in the audio of the answer nearest its length)."""
        assert self.session is not None
        number = self.session.model_turns
        answer = self.answers[number % len(self.answers)]
        if line:
            want_bytes = len(line) / SPOKEN_CHARS_PER_S * OUTPUT_SAMPLE_RATE_HZ * BYTES_PER_SAMPLE
            fitting = min(self.answers, key=lambda a: abs(len(a.pcm24) - want_bytes))
            answer = Answer(line, fitting.pcm24)
        seed = self.session.number * 1_000_003 + number
        self.session.model_turns += 1
        self.session.history.append(("model", answer.text))
        self.record.turns_started += 1
        chunk_bytes = OUTPUT_SAMPLE_RATE_HZ * BYTES_PER_SAMPLE * self.config.chunk_ms // 1000
        pcm = answer.pcm24
        pieces = [pcm[i:i + chunk_bytes] for i in range(0, len(pcm), chunk_bytes)] or [b""]
        step_ms = self.config.chunk_ms / self.config.speed_factor
        first_ms = now_ms + self.config.first_chunk_ms
        chunks: list[tuple[int, str | int]] = [(first_ms + round(index * step_ms), index) for index in range(len(pieces))]
        end_ms = first_ms + round(len(pieces) * step_ms)
        chunks.append((end_ms, _text({"serverContent": {"generationComplete": True}})))
        usage = {"promptTokenCount": 25 * len(self.session.history), "responseTokenCount": 25 * len(pieces)}
        usage["totalTokenCount"] = usage["promptTokenCount"] + usage["responseTokenCount"]
        chunks.append((end_ms, _text({"serverContent": {"turnComplete": True}, "usageMetadata": usage})))
        chunks, stalled = self._stalled(chunks, first_ms, number)
        record = TurnRecord(answer.text, pcm, now_ms, seed=seed, chunk_size=chunk_bytes, stalled=stalled)
        self.record.turns.append(record)
        self._turn = _Turn(chunks, now_ms, record, pieces, answer.text.split(), seed)
        self._not_resumable()

    def _not_resumable(self) -> None:
        """As the vendor's server says while it generates or waits on function calls: no handle now (a session
        resumed from the last one loses what is under way); a new handle follows once the turn is complete."""
        if self.resumption:
            self._send({"sessionResumptionUpdate": {"resumable": False}})

    def _stalled(self, chunks: list[tuple[int, str | int]], first_ms: int,
                 number: int) -> tuple[list[tuple[int, str | int]], bool]:
        """The turn's schedule with the configured stall: what is due more than stall_after_ms after its first
        audio goes out stall_ms later (the model stopped producing, as a vendor's server does under load)."""
        config = self.config
        if config.stall_after_ms is None or (config.stall_turns and number not in config.stall_turns):
            return chunks, False
        cut = first_ms + config.stall_after_ms
        if not any(due > cut for due, _ in chunks):
            return chunks, False
        return [(due + config.stall_ms, item) if due > cut else (due, item) for due, item in chunks], True

    def _client_cut(self, now_ms: int, note: str = "") -> None:
        """The client's note that its caller cut a turn (voicecore's turn-taking by words), recorded as cut there
        (the note's arrival): the newest turn the note names by its opening words, else the turn that was playing
        when the caller's last utterance began. The note comes once the model is idle, most often after it has
        answered the caller, and another utterance may have begun meanwhile (a backchannel over that answer):
        read by the last utterance alone, it would name the answer that went on."""
        starts = [start for start, _ in self.record.caller_activity]
        if not starts:
            return
        named = HEARD_NOTE_ANSWER.search(note)
        if named is not None:
            opening = named.group(1).split()
            matching = [turn for turn in self.record.turns if turn.client_cut_ms is None and opening
                        and turn.started_ms <= starts[-1] and turn.text.split()[:len(opening)] == opening]
            if matching:
                # answers may share their opening words (the safe line said twice): the one an utterance began
                # over about as far into its audio as the note says the caller heard (ties: the newest)
                heard = HEARD_NOTE_SECONDS.search(note)
                heard_ms = round(float(heard.group(1)) * 1000) if heard else 0

                def distance(turn: TurnRecord) -> float:
                    first = turn.chunk_sent_ms[0] if turn.chunk_sent_ms else turn.started_ms
                    return min((abs(start - first - heard_ms) for start in starts if start >= turn.started_ms),
                               default=float("inf"))
                min(reversed(matching), key=distance).client_cut_ms = now_ms
                return
        began = [turn for turn in self.record.turns if turn.started_ms <= starts[-1] and turn.client_cut_ms is None]
        if began:
            began[-1].client_cut_ms = now_ms

    def _interrupt(self, now_ms: int) -> None:
        turn = self._turn
        assert turn is not None
        self._turn = None
        self.record.interrupts += 1
        self._send({"serverContent": {"interrupted": True}})
        late = [item for _, item in turn.chunks if isinstance(item, int)][: self.config.late_chunks_after_interrupt]
        self.record.late_chunks_sent += len(late)
        turn.record.interrupted_ms = now_ms
        turn.record.late_chunks = len(late)
        for index in late:
            text, size = turn.audio_message(index)
            turn.record.chunk_bytes.append(size)
            turn.record.chunk_sent_ms.append(now_ms)
            self._out.append(text)
        # the vendor ends an interrupted turn with turnComplete (no generationComplete): "interrupted >
        # turn_complete", as google-genai's LiveServerContent.generation_complete says; what comes after it
        # belongs to the next turn
        self._send({"serverContent": {"turnComplete": True}})

    # -- clock and output ---------------------------------------------------------------------------

    def advance(self, now_ms: int) -> None:
        if self.close is not None:
            return
        turn = self._turn
        while turn is not None and turn.chunks and turn.chunks[0][0] <= now_ms:
            _, item = turn.chunks.pop(0)
            if isinstance(item, int):
                text, size = turn.audio_message(item)
                turn.record.chunk_bytes.append(size)
                turn.record.chunk_sent_ms.append(now_ms)
            else:
                text = item
            self._out.append(text)
        if turn is not None and not turn.chunks:
            turn.record.completed_ms = now_ms
            self._turn = None
            if self.resumption and self.session is not None:
                handle = self.store.issue_handle(self.session)
                self._send({"sessionResumptionUpdate": {"newHandle": handle, "resumable": True}})
            if self._answer_after_turn is not None:
                (text, spoken), self._answer_after_turn = self._answer_after_turn, None
                self._answer(text, now_ms, spoken)
        if self.record.go_away_ms is None and now_ms >= self._go_away_due:
            self.record.go_away_ms = now_ms
            left = max(0, self._limit_due - now_ms)
            self._send({"goAway": {"timeLeft": format_duration(left)}})
        if now_ms >= self._limit_due:
            self._refuse(CLOSE_NORMAL, "The connection reached its time limit.")
        elif self._error_due is not None and now_ms >= self._error_due and not self.record.resumed:
            self._refuse(CLOSE_INTERNAL_ERROR, "Internal error encountered.")

    def next_wakeup_ms(self) -> int | None:
        if self.close is not None:
            return None
        due = [self._limit_due if self.record.go_away_ms is not None else self._go_away_due]
        if self._error_due is not None and not self.record.resumed:
            due.append(self._error_due)
        if self._turn is not None and self._turn.chunks:
            due.append(self._turn.chunks[0][0])
        return min(due)

    def take_outgoing(self) -> list[str]:
        out, self._out = self._out, []
        return out

    def _send(self, message: dict[str, Any]) -> None:
        self._out.append(_text(message))


def _text(message: dict[str, Any]) -> str:
    return orjson.dumps(message).decode()
