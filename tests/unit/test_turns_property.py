"""Turn-taking by what the caller said, over random timings (hypothesis, on the scenario harness).

Hypothesis draws a call's caller: utterances at random times over the agent's greeting, question and
answers, each a real turn ("no", "wait, how much is it"), a backchannel ("mm-hmm", "okay okay") or a noise
(no words), said for a random length, with its words sent the way the vendor sends them: word by word
after the commit (the gpt-4o-transcribe family) or only as a late ``completed`` (whisper-1), at a random
latency, or not at all (a failed transcription). The real controller takes the turns; the harness plays the
model, the pacer and the carrier on a virtual clock.

For every draw, measured from outside the controller (what it sent and what the caller heard):
- a real turn's words are never talked over by a resume: once its words are in, nothing held is resumed
  before the caller speaks again;
- every real turn is answered: a response is asked for after its words are in and before the caller's
  next utterance;
- and the scenario invariants (one voice, no stale frame, talk-over within the carrier's lead, no request
  while the caller speaks; tests/unit/test_scenarios.py).
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from scenarios.harness import WORD_GAP_MS, ModelScript, Plan, Speech, run
from test_scenarios import check_invariants

REAL = ("no", "stop", "wait", "sorry who is this", "hold on a second", "how much is it", "yeah but on Friday",
        "I would like to book a table")
BACKCHANNEL = ("mm-hmm", "yeah", "okay", "uh-huh", "right", "okay okay", "yeah I see")
VAD_SILENCE_MS = 500
FIRST_AT_MS = 2600  # the question is heard from about 2.5 s
GAP_AFTER_MS = 4500  # a caller waits this long after their last words came: the agent's answer has room


@st.composite
def utterances(draw):
    out = []
    at = FIRST_AT_MS + draw(st.integers(0, 2000))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("real", "real", "backchannel", "noise")))
        words = {"real": draw(st.sampled_from(REAL)), "backchannel": draw(st.sampled_from(BACKCHANNEL)), "noise": None}[kind]
        dur = draw(st.integers(150, 1500))
        deltas = draw(st.booleans())
        delay = draw(st.integers(50, 1400))
        failed = kind != "noise" and draw(st.integers(0, 9)) == 0
        out.append((kind, Speech(dur, words, at_ms=at, words_delay_ms=delay, deltas=deltas, failed=failed)))
        words_done = at + dur + VAD_SILENCE_MS + 1 + delay + (len((words or "").split()) * WORD_GAP_MS if deltas else 0)
        at = words_done + GAP_AFTER_MS + draw(st.integers(0, 1500))
    return out


def decisive_words_ms(sp: Speech) -> int:
    """When the words that make ``sp`` a real turn reached the controller (all of them, to be safe)."""
    n = len(sp.words.split())
    return sp.at_ms + sp.dur_ms + VAD_SILENCE_MS + 1 + sp.words_delay_ms + ((n - 1) * WORD_GAP_MS if sp.deltas else 0)


@given(script=utterances(), answer_ms=st.sampled_from((1500, 4000, 8000)))
# Found by CI: a seven-word turn whose words still came in past transcript_wait_ms was answered from six.
@example(script=[("real", Speech(150, "no", at_ms=at, words_delay_ms=50, failed=True)) for at in (2600, 7801, 13002)]
         + [("real", Speech(150, "I would like to book a table", at_ms=18203, words_delay_ms=1327, deltas=True))],
         answer_ms=1500)
def test_real_turns_are_never_resumed_over_and_always_answered(script, answer_ms):
    speeches = [sp for _, sp in script]
    last = speeches[-1]
    o = run(speeches, ModelScript(default=Plan(audio_ms=answer_ms)), None, {}, max_ms=last.at_ms + last.dur_ms + 9000)
    check_invariants(o)
    resumes = [e["t"] // 1_000_000 for e in o.recorder.entries if e["k"] == "out" and e["a"]["type"] == "ResumeTag"]
    creates = [t for t, _ in o.sent("response.create")]
    for i, (kind, sp) in enumerate(script):
        if kind != "real" or sp.failed:
            continue
        words_in = decisive_words_ms(sp)
        until = speeches[i + 1].at_ms if i + 1 < len(speeches) else o.end_ms
        assert not [t for t in resumes if words_in <= t < until], (sp, resumes)
        assert [t for t in creates if words_in <= t < until], ("unanswered", sp, creates)
