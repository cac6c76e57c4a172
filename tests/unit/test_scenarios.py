"""The turn-taking scenario suite: scripted calls through the real controller on a virtual clock.

Each scenario asserts what the caller heard (frames by tag and time, from the playout model fed with the
controller's WriteFrames/CancelTag/ReleaseTag), what the model received (response.create, cancels,
truncate ms), the invariants, and that its record replays to identical outputs (INV-REPLAY).
"""

from __future__ import annotations

import pytest

from voicecore.call import controller as C
from voicecore.call.record import loads
from voicecore.replay import replay

from scenarios.catalog import SCENARIOS, Scenario
from scenarios.harness import LEAD_MS, TICK_MS, Outcome, run

pytestmark = pytest.mark.scenario


def run_scenario(s: Scenario) -> Outcome:
    return run(s.caller, s.model, s.config, s.flow_args, max_ms=s.max_ms)


def check_invariants(o: Outcome) -> None:
    heard = sorted(o.playout.heard, key=lambda h: h[2])
    # INV-ONE-VOICE: never two frames at once, and one response's audio is not interleaved with another's
    for (tag_a, _, at_a), (tag_b, _, at_b) in zip(heard, heard[1:]):
        assert at_a + TICK_MS <= at_b, "two frames audible at once"
        assert tag_b >= tag_a, "responses interleaved"
    # INV-STALE: nothing of a cancelled tag starts playing after the decision to cancel it
    for tag, _, at in heard:
        cut = o.playout.cancel_at.get(tag)
        assert cut is None or at < cut, f"stale frame of tag {tag}"
    # INV-ORDER: each tag's frames play in order from 0, none lost or duplicated
    by_tag: dict[int, list[int]] = {}
    for tag, index, _ in heard:
        by_tag.setdefault(tag, []).append(index)
    for tag, indices in by_tag.items():
        assert indices == list(range(len(indices))), f"tag {tag} out of order"
    # Talk-over: once the caller starts speaking over the agent, the release stops at once (a hold or a
    # cancel) and only the lead the carrier held plays on: at most LEAD_MS + one tick of agent audio.
    for start, _end, _words in o.speech:
        over = [at for _, _, at in heard if at <= start < at + TICK_MS]
        if over:
            run_end = over[0] + TICK_MS
            for _, _, at in heard:
                if run_end <= at <= run_end + 1:
                    run_end = at + TICK_MS
            assert run_end - start <= LEAD_MS + TICK_MS, f"talk-over of {run_end - start} ms at {start} ms"
    # INV-ONE-VOICE (caller side): no response is requested while the caller is mid-utterance
    for t, _ in o.sent("response.create"):
        assert not any(start < t < end for start, end, _ in o.speech), f"response.create at {t} ms over the caller"
    # the model never gets a second response.create while one is outstanding is checked by the fake:
    # every response.create was answered in order (or never, by script)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(scenario: Scenario) -> None:
    outcome = run_scenario(scenario)
    check_invariants(outcome)
    scenario.check(outcome)
    # INV-REPLAY: the record, through a fresh controller, reproduces every action
    header, entries = loads(outcome.recorder.dumps())
    result = replay(header, entries)
    assert result.identical, result.divergence
    assert result.outputs == sum(1 for e in entries if e["k"] == "out")


def test_at_least_fifteen_scenarios() -> None:
    assert len(SCENARIOS) >= 15
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)
