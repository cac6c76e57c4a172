"""The caller's utterances and what each one is: a policy of the controller.

Who has the floor is decided by what the caller said (voicecore/call/backchannels.py). The server's VAD
opens an utterance (speech started) and closes it (speech stopped); the transcription fills in its words.
An utterance's verdict: ``turn`` (the caller takes the floor: any word that is not a backchannel, a yes or a
no to a confirmation asked, or long speech whose words never came), ``backchannel`` ("mm-hmm" while the
agent spoke), ``noise`` (a cough, a breath: no words, or short), or "" (not known yet). A verdict taken by
length while no words were known is re-opened by words that come later; a backchannel is final once its
words settle. An utterance is ``ready`` to be answered once its words are all in (or will not come).

The controller (controller.py) decides what a verdict does (hold, resume, cut, answer); this module only
keeps the utterances and judges them. Sans-I/O: fed ``now_ns``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from voicecore.call.backchannels import Lexicon

if TYPE_CHECKING:
    from voicecore.call.controller import ControllerConfig

MS = 1_000_000
MAX_TRACKED_UTTERANCES = 16


@dataclasses.dataclass(slots=True)
class Utterance:
    """One stretch of caller speech from the server's VAD, with the words transcribed for it."""

    item_id: str
    started_ns: int
    interrupting: bool  # the agent had the floor (audible, or an answer on its way) while it was said
    stopped_ns: int = 0
    audio_start_ms: int = 0  # the server's audio clock (prefix padding included)
    spoken_ms: int = 0  # set at speech_stopped from the server's audio clock: the speech itself
    words: str = ""
    completed: bool = False  # the transcript is final: completed, or its transcription failed
    failed: bool = False  # the vendor could not transcribe it: no words, and none will come
    last_words_ns: int = 0
    verdict: str = ""  # "" (not known yet) | "backchannel" | "noise" | "turn"
    turn_taken: bool = False

    @property
    def open(self) -> bool:
        """Not judged yet, or a turn not answered yet: the caller's floor."""
        return self.verdict == "" or (self.verdict == "turn" and not self.turn_taken)


class CallerTurns:
    __slots__ = ("config", "lexicon", "utterances")

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.lexicon = Lexicon(config.languages, config.backchannels)
        self.utterances: list[Utterance] = []  # the caller's utterances still open or still re-openable

    # --- what the server says --------------------------------------------------------------------------
    def started(self, item_id: str, now_ns: int, interrupting: bool, audio_start_ms: int) -> Utterance:
        u = Utterance(item_id, now_ns, interrupting=interrupting, audio_start_ms=audio_start_ms)
        self.utterances.append(u)
        self.forget_settled()
        return u

    def stopped(self, item_id: str, now_ns: int, audio_end_ms: int) -> None:
        u = self.find(item_id) or (self.utterances[-1] if self.utterances else None)
        if u is not None and not u.stopped_ns:
            u.stopped_ns = now_ns
            # On the server's audio clock: audio_start_ms includes the prefix padding and audio_end_ms the
            # VAD's silence (the vendor's definition); what is left is the speech. (semantic_vad's silence
            # varies with what was said: the server_vad setting is the estimate.)
            cfg = self.config
            u.spoken_ms = max(0, audio_end_ms - u.audio_start_ms - cfg.vad_prefix_padding_ms - cfg.vad_silence_duration_ms)

    def heard(self, item_id: str, text: str, completed: bool, now_ns: int) -> None:
        """Words of utterance ``item_id``: a delta, or (``completed``) its final transcript."""
        u = self.find(item_id)
        if u is not None and not u.completed:
            if completed:
                u.words = text
                u.completed = True
            else:
                u.words += text
            if text.strip():
                u.last_words_ns = now_ns

    def transcription_failed(self, item_id: str) -> None:
        """No words will come for this utterance: its length decides."""
        u = self.find(item_id)
        if u is not None:
            u.completed = u.failed = True

    def find(self, item_id: str) -> Utterance | None:
        for u in reversed(self.utterances):
            if u.item_id == item_id:
                return u
        return None

    def forget_settled(self) -> None:
        """Keep what can still change: open utterances, and verdicts that later words may overturn."""
        self.utterances = [u for u in self.utterances
                           if u.open or (u.verdict in ("noise", "backchannel") and not u.completed)][-MAX_TRACKED_UTTERANCES:]

    @property
    def any_open(self) -> bool:
        return any(u.open for u in self.utterances)

    # --- judging -----------------------------------------------------------------------------------------
    def verdict(self, u: Utterance, now_ns: int, confirmation: str) -> str:
        """What the utterance is, from what is known of it now ("": not known yet). ``confirmation``: the
        yes or no its words give to a confirmation asked ("" when none is asked or they give neither)."""
        cfg = self.config
        if u.words.strip():
            if confirmation:
                return "turn"  # a yes or a no to the confirmation asked: never just a backchannel
            verdict = self.lexicon.verdict(u.words, u.completed) if u.interrupting else "turn"
            if verdict == "turn":
                return verdict  # one word that is not a backchannel is enough
            settled = u.stopped_ns and (now_ns - max(u.last_words_ns, u.stopped_ns)) // MS >= cfg.words_settle_ms
            if u.completed or settled:
                return verdict
            # All backchannel so far, but more words may come ("yeah ... but on Friday"): not yet.
            return u.verdict if u.verdict == "noise" else ""
        by_length = "turn" if u.spoken_ms >= cfg.bargein_min_speech_ms else "noise"
        if u.completed:
            # Final and no words: the vendor heard none (a cough, a breath: noise, however long), or it could
            # not transcribe the speech (its length decides).
            return by_length if u.failed else "noise"
        if u.verdict in ("turn", "noise"):
            return u.verdict  # judged by length while words were late: stands until words come
        if u.stopped_ns and (now_ns - u.stopped_ns) // MS >= cfg.transcript_wait_ms:
            return by_length
        return ""

    def ready(self, u: Utterance, now_ns: int) -> bool:
        """The caller's words for this utterance are all in (or will not come): it can be answered."""
        if u.completed:
            return True
        if not u.stopped_ns:
            return False
        if u.words.strip():
            # Words came: the turn is whole once no more come for a while (the transcript's end may never be
            # announced). Not on the transcript wait: a long turn's words still arriving past it would be
            # answered from half a sentence (and looked up by it).
            return (now_ns - max(u.last_words_ns, u.stopped_ns)) // MS >= self.config.words_settle_ms
        return (now_ns - u.stopped_ns) // MS >= self.config.transcript_wait_ms
