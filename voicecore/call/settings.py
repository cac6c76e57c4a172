"""The turn-taking controller's settings and counters: ``ControllerConfig`` (every policy constant, in ms
unless named otherwise) and ``ControllerStats`` (every counter), one flat dataclass each.

Owns the two shapes the controller (controller.py) and its policy objects share: each policy reads the
constants it needs from the one config and bumps its own counters in the one stats object, so a record's
header (``config``) and a call's ``statistics()`` stay one flat object whatever module a policy lives in, and
a record written before the policies were split still rebuilds the same controller. Sans-I/O: data only.
"""

from __future__ import annotations

import dataclasses

from voicecore.call import core
from voicecore.call.failures import FailurePolicy


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Every policy constant in one place (ms unless named otherwise)."""

    watchdog_ms: int = 3000  # response.create sent, no response.created -> retry (a prompt) or the fallback line
    stall_ms: int = 8000  # response started, no audio for this long and not finished -> retry, then apology
    stall_retries: int = 1
    max_prompt_retries: int = 3  # per prompt, watchdog and stall retries together; then the flow advances
    give_up_after_failures: int = 6  # consecutive unanswered requests -> transfer (or hang up) unspoken
    debounce_quiet_ms: int = 1500  # after a tool result the agent waits for this much caller quiet ...
    debounce_cap_ms: int = 5000  # ... but no longer than this after the result
    debounce_send_text: bool = False  # also send the combined fragments as one user text item
    # Turn-taking by what the caller said (voicecore/call/backchannels.py): words that are all backchannel
    # ("mm-hmm", "okay") let the agent carry on; any other words are a turn, whatever their length. Only while
    # no words are known does length decide: speech this long is a turn, shorter is noise (a cough), once
    # transcript_wait_ms passed after the speech stopped without words (late words re-open a noise verdict).
    bargein_min_speech_ms: int = 500
    transcript_wait_ms: int = 1500
    words_settle_ms: int = 300  # words in, speech stopped, no more words this long: the turn is taken
    languages: tuple[str, ...] = ("en", "sv")  # the backchannel lexicons that read the caller's words
    backchannels: tuple[str, ...] = ()  # the agent's own backchannel phrases, on top of the lexicons
    turn_detection: str = "server_vad"  # or "semantic_vad" (the vendor's end-of-turn model)
    vad_eagerness: str = "auto"  # semantic_vad: low, medium, high or auto
    silence_checkins_ms: tuple[int, ...] = (10_000, 20_000, 40_000)  # caller silence before each check-in
    silence_goodbye_ms: int = 10_000  # after the last unanswered check-in
    goodbye_grace_ms: int = 500  # after the goodbye's last frame played, before the hang-up or transfer
    cancel_settle_ms: int = 1500  # a cancelled response whose response.done never comes counts as gone
    pause_release: bool = True  # a bare VAD edge holds release (HoldTag) until the caller's words decide
    transcription_model: str = "gpt-4o-mini-transcribe"
    vad_silence_duration_ms: int = 500
    # included in speech_started.audio_start_ms (docs/explanation/protocols.md#c3)
    vad_prefix_padding_ms: int = 300
    gate_policy: str = "off"  # release policy of flow nodes that name none (off, numbers, scripted, strict)
    gate_language: str = "auto"  # en, sv or auto: how the validator reads numbers and scripts
    safe_line: str = core.DEFAULT_SAFE_LINE  # said instead of a rejected answer
    retrieve_first: bool = False  # put knowledge-base snippets into each answer's instructions
    retrieve_k: int = 3
    retrieve_wait_ms: int = 1500  # after the caller's speech stopped, wait this long for its transcript
    voice: str = "alloy"  # the agent's voice (session.update)
    filler_after_ms: int = 1500  # a tool still running this long: its filler line is said (once)
    confirm_timeout_ms: int = 8000  # no yes this long after a confirmation prompt played: the action is dropped
    confirm_languages: tuple[str, ...] = ("en", "sv")  # how a caller's yes or no is read
    dedupe_ms: int = 30_000  # a write's (or confirmed action's) success stands this long: not run twice
    # The failure policy (the agent's [failure]): responses the vendor failed in a row (errors, rate limits,
    # failed responses, unanswered requests), or this long without a model socket, end the call with the
    # shipped apology, then a transfer (failure_transfer, when there is a target) or a hang-up.
    failure_after_failures: int = 5
    failure_after_ms: int = 10_000
    failure_transfer: bool = True
    vendor_retry_ms: int = 500  # a request the vendor failed is asked again after this (doubling per failure)
    vendor_silent_ms: int = 1000  # a response asked for or coming, and no event from the vendor this long: hold line
    hold_every_ms: int = 3000  # the caller still waits this long after the hold line: it is said again

    def failure_policy(self) -> FailurePolicy:
        return FailurePolicy(after_failures=self.failure_after_failures, after_ms=self.failure_after_ms,
                             vendor_retry_ms=self.vendor_retry_ms, silent_ms=self.vendor_silent_ms,
                             hold_every_ms=self.hold_every_ms)

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> ControllerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in known}
        return cls(**values)


TURN_DETECTIONS = ("server_vad", "semantic_vad")
EAGERNESS = ("low", "medium", "high", "auto")


def turn_detection(cfg: ControllerConfig) -> dict:
    """The session's turn_detection: the vendor detects speech and its end, but never answers or cuts on its
    own (the controller takes the turns)."""
    if cfg.turn_detection == "semantic_vad":
        return {"type": "semantic_vad", "eagerness": cfg.vad_eagerness, "create_response": False,
                "interrupt_response": False}
    return {"type": "server_vad", "silence_duration_ms": cfg.vad_silence_duration_ms,
            "prefix_padding_ms": cfg.vad_prefix_padding_ms, "create_response": False, "interrupt_response": False}


@dataclasses.dataclass(slots=True)
class ControllerStats:
    requests_sent: int = 0
    requests_dropped: int = 0
    responses_rejected: int = 0
    bargeins: int = 0
    bargein_latency_ms: list[int] = dataclasses.field(default_factory=list)  # speech start -> decision
    holds: int = 0
    false_interruptions: int = 0  # holds that ended in a resume: no words (a cough), or ...
    backchannels: int = 0  # ... a backchannel said over the agent
    turns_reopened: int = 0  # a noise or backchannel verdict overturned by later words
    watchdog_fires: int = 0
    model_lost: int = 0  # the model socket closed or could not be opened
    vendor_failures: int = 0  # responses the vendor failed (errors, rate limits, failed response.done)
    hold_lines: int = 0  # the shipped hold line asked of the pacer
    failure_policy: int = 0  # the call ended by the failure policy (apology, then transfer or hang-up)
    stalls: int = 0
    retries: int = 0
    checkins: int = 0
    tool_calls: int = 0
    debounce_flushes: int = 0
    dtmf: int = 0
    transfers_cancelled: int = 0
    unheard_cancels: int = 0
    gate_rejections: int = 0
    safe_lines: int = 0
    retrievals: int = 0
    retrievals_empty: int = 0
    tools_run: int = 0  # RunTool actions: tools started
    tool_results: int = 0
    tool_errors: int = 0  # results that were errors (timeout, 4xx, 5xx, non-JSON, ...)
    tool_results_ignored: int = 0  # results of no running tool (the call moved on)
    duplicate_writes_suppressed: int = 0  # the same write within the window: answered without running it
    fillers: int = 0
    transitions: int = 0
    actions_proposed: int = 0  # confirmation prompts asked for
    actions_confirmed: int = 0
    actions_declined: int = 0
    actions_timed_out: int = 0
    end_reason: str = ""
