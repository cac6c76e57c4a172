"""The caller's turns: what the caller said, utterance by utterance, and when it is theirs to be answered.

Owns one call's utterances (each stretch of the server VAD's speech with the words transcribed for it), the
verdict on each (``backchannel``, ``noise`` or ``turn``: docs/explanation/turn-taking.md), whether the caller
is speaking, and the hold on what the agent says while their words are not known (``HoldTag`` on a VAD edge,
``ResumeTag`` once every utterance since asked for nothing). The words decide, never how long the caller
spoke: any words that are not a backchannel (voicecore/call/backchannels.py) are a turn; length decides only
while no words are known, and words that come later re-open a verdict taken so.

One class, because the verdicts, the hold and taking the turn read the same list: a hold is resumed only
when no utterance is open, and a turn is taken only when every utterance of it is judged and heard whole.
What a verdict does to the call (cutting the agent, answering, a confirmation's yes) is the controller's
(controller.py): ``judge`` returns the utterances that just became turns, ``take`` the words of a turn to
answer. Sans-I/O: fed ``now_ns``; nothing here knows the model, the flow or the playout.
"""

from __future__ import annotations

import dataclasses

from voicecore.agent import actions as agent_actions
from voicecore.call.actions import HoldTag, ResumeTag
from voicecore.call.backchannels import Lexicon
from voicecore.call.settings import ControllerConfig, ControllerStats

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
    """One call's utterances, their verdicts and the hold they put on the agent."""

    __slots__ = ("config", "stats", "lexicon", "utterances", "speaking", "held_tag")

    def __init__(self, config: ControllerConfig, stats: ControllerStats) -> None:
        self.config = config
        self.stats = stats
        self.lexicon = Lexicon(config.languages, config.backchannels)
        self.utterances: list[Utterance] = []  # the caller's utterances still open or still re-openable
        self.speaking = False  # between the server's speech_started and speech_stopped
        self.held_tag = 0  # the agent's response held for the caller's words (0: none)

    # --- what the caller's side of the call is now ---------------------------------------------------
    def has_floor(self) -> bool:
        """An utterance is not judged yet, or a turn not answered yet: the agent must not start speaking."""
        return any(u.open for u in self.utterances)

    def overtaken(self) -> bool:
        """A turn waits to be answered: a response asked for before it answers what the caller no longer asks."""
        return any(u.verdict == "turn" and not u.turn_taken for u in self.utterances)

    def answering_since(self, since_ns: int) -> bool:
        """The caller began an utterance after ``since_ns`` that is still open (their words will decide)."""
        return any(u.open and u.started_ns > since_ns for u in self.utterances)

    # --- the server's VAD and transcription --------------------------------------------------------
    def speech_started(self, item_id: str, audio_start_ms: int, now_ns: int, interrupting: bool) -> None:
        """``interrupting``: the agent has the floor (speaking, or about to): a backchannel asks for nothing."""
        self.speaking = True
        self.utterances.append(Utterance(item_id, now_ns, interrupting=interrupting, audio_start_ms=audio_start_ms))
        self.forget_settled()

    def speech_stopped(self, item_id: str, audio_end_ms: int, now_ns: int) -> None:
        self.speaking = False
        u = self._utterance(item_id) or (self.utterances[-1] if self.utterances else None)
        if u is not None and not u.stopped_ns:
            u.stopped_ns = now_ns
            # On the server's audio clock: audio_start_ms includes the prefix padding and audio_end_ms the
            # VAD's silence (the vendor's definition); what is left is the speech. (semantic_vad's silence
            # varies with what was said: the server_vad setting is the estimate.)
            cfg = self.config
            u.spoken_ms = max(0, audio_end_ms - u.audio_start_ms - cfg.vad_prefix_padding_ms - cfg.vad_silence_duration_ms)

    def words(self, item_id: str, text: str, completed: bool, now_ns: int) -> None:
        u = self._utterance(item_id)
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
        u = self._utterance(item_id)
        if u is not None:
            u.completed = u.failed = True

    def _utterance(self, item_id: str) -> Utterance | None:
        for u in reversed(self.utterances):
            if u.item_id == item_id:
                return u
        return None

    # --- the hold --------------------------------------------------------------------------------------
    def hold(self, tag: int, approved_frames: int) -> HoldTag | None:
        """Stop ``tag`` (what the caller may hear) from going out while their words are not known."""
        if not self.config.pause_release or self.held_tag != 0:
            return None
        self.held_tag = tag
        self.stats.holds += 1
        return HoldTag(tag, approved_frames)

    def response_created(self) -> bool:
        """A response was created while the caller speaks or their words are not judged: it waits, held, for
        their words like audio they talked over (their undecided utterances now count as said over it). True:
        hold it."""
        undecided = [u for u in self.utterances if u.verdict == ""]
        for u in undecided:
            u.interrupting = True
        return self.speaking or bool(undecided)

    def drop_hold(self, tag: int | None = None) -> None:
        """The held response was cancelled (``tag``: only if it is the one held): nothing to resume."""
        if tag is None or self.held_tag == tag:
            self.held_tag = 0

    def resume(self) -> ResumeTag | None:
        """Every utterance since the hold asked for nothing: the agent carries on from where it stopped."""
        tag = self.held_tag
        if not tag or self.speaking or self.has_floor():
            return None
        self.held_tag = 0
        return ResumeTag(tag)

    # --- verdicts --------------------------------------------------------------------------------------
    def verdict(self, u: Utterance, now_ns: int, confirming: bool) -> str:
        """What the utterance is, from what is known of it now ("": not known yet). ``confirming``: the
        agent asked the caller to confirm an action."""
        cfg = self.config
        if u.words.strip():
            if confirming and agent_actions.confirmation_answer(u.words, cfg.confirm_languages):
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

    def judge(self, now_ns: int, confirming: bool) -> list[Utterance]:
        """Judge every utterance not final yet; the ones that just became turns (the agent stops for each)."""
        turns = []
        stats = self.stats
        for u in self.utterances:
            if u.verdict == "turn":
                continue  # final: the agent was cut for it
            verdict = self.verdict(u, now_ns, confirming)
            if verdict == u.verdict:
                continue
            previous, u.verdict = u.verdict, verdict
            if verdict == "turn":
                if previous:
                    stats.turns_reopened += 1
                turns.append(u)
            elif verdict and u.interrupting and not previous:
                if verdict == "backchannel":
                    stats.backchannels += 1
                else:
                    stats.false_interruptions += 1
        return turns

    # --- taking the turn -------------------------------------------------------------------------------
    def _ready(self, u: Utterance, now_ns: int) -> bool:
        """The caller's words for this utterance are all in (or will not come): it can be answered."""
        if u.completed:
            return True
        if not u.stopped_ns:
            return False
        if u.words.strip() and (now_ns - max(u.last_words_ns, u.stopped_ns)) // MS >= self.config.words_settle_ms:
            return True  # words came, then no more: the transcript's end may never be announced
        return (now_ns - u.stopped_ns) // MS >= self.config.transcript_wait_ms

    def _unanswered(self) -> list[Utterance]:
        return [u for u in self.utterances if u.verdict == "turn" and not u.turn_taken]

    def take_confirmation(self, now_ns: int) -> str:
        """A yes or a no to the confirmation asked ("yes", "no"; "" if the next turn is neither or not in yet).
        It is read on its own, at once, even if the caller goes on talking ("Ja, gärna." then a question):
        what follows is the next turn, not part of the answer."""
        pending = self._unanswered()
        if not pending or not self._ready(pending[0], now_ns):
            return ""
        answer = agent_actions.confirmation_answer(pending[0].words, self.config.confirm_languages)
        if answer:
            pending[0].turn_taken = True
        return answer

    def take(self, now_ns: int) -> tuple[str, Utterance] | None:
        """The caller's turn to answer, once they stopped and every utterance of it is judged and heard whole:
        its words (the utterances before the answer could be asked for, together) and its last utterance."""
        if self.speaking:
            return None
        pending = self._unanswered()
        if not pending or any(u.verdict == "" for u in self.utterances) or not all(self._ready(u, now_ns) for u in pending):
            return None
        for u in pending:
            u.turn_taken = True
        return " ".join(u.words.strip() for u in pending if u.words.strip()), pending[-1]

    def forget_settled(self) -> None:
        """Keep what can still change: open utterances, and verdicts that later words may overturn."""
        self.utterances = [u for u in self.utterances
                           if u.open or (u.verdict in ("noise", "backchannel") and not u.completed)][-MAX_TRACKED_UTTERANCES:]
