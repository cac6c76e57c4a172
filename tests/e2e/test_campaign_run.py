"""`voicecore campaign run` end to end: a stack with the carrier and model simulators, a campaign of eight numbers
at concurrency 3 (persons, an opt-out, busy, a voicemail, no answer, failed, and a number on the do-not-call file)
run by the command as its own process. The carrier's log of placed calls is checked against the store."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from bench.campaign_stack import EXPECTED, RETRY_AFTER_S, campaign_rows, run_stack_campaign

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_campaign_run_dials_each_attempt_once_and_the_opt_out_joins_the_list(tmp_path):
    report = asyncio.run(run_stack_campaign(8, 3, tmp_path, max_attempts=2, dnc_numbers=1))
    assert report["exit_code"] == 0, report["stderr_tail"]
    assert report["run"]["finished"] and report["run"]["not_placed"] == 0
    # every number dialled once per attempt, none on the do-not-call list, every dial recorded first
    assert (report["dialed_twice"], report["dnc_dialed"], report["unrecorded_dials"]) == (0, 0, 0)
    kinds = dict(campaign_rows(8))
    assert set(kinds.values()) == set(EXPECTED)
    # a person completes in one attempt; the retried kinds get both attempts, after the wait the rules set
    per_kind = {kind: {int(k): v for k, v in counts.items()} for kind, counts in report["attempts_per_kind"].items()}
    assert per_kind["busy"] == {2: 1} and per_kind["no-answer"] == {2: 1} and per_kind["failed"] == {2: 1}
    assert per_kind["human"] == {1: 2, 0: 1}  # the third person is on the do-not-call file: never dialled
    assert per_kind["opt-out"] == {1: 1}
    assert report["early_retries"] == 0 and RETRY_AFTER_S > 0
    # outcomes from the status callbacks and the answer verdict, stored with each attempt
    assert report["mismatched_outcomes"] == []
    assert report["attempt_outcomes"]["busy"] == 2 and report["attempt_outcomes"]["completed"] >= 2
    assert report["voicemail_outcomes"] == {"voicemail": 2}  # the answer gate's verdict; tried again, as the rules say
    assert per_kind["voicemail"] == {2: 1}
    assert report["run"]["outcomes"]["do-not-call"] == 1 and report["run"]["outcomes"]["opted-out"] == 1
    # the callee who asked not to be called again is on the list, from the call itself
    assert report["opted_out_on_list"] == report["opt_out_callees"] == 1
    assert report["do_not_call"] == {"file": 1, "opt-out": 1}
    assert report["status_callbacks_refused"] == 0 and report["status_rows"] == report["dials"]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (Debian package) is not installed")
def test_a_killed_campaign_run_resumes_without_dialling_an_attempt_twice(tmp_path):
    """SIGKILL the command once 3 attempts are recorded (calls in the air), then run the same command again."""
    report = asyncio.run(run_stack_campaign(8, 3, tmp_path, max_attempts=3, dnc_numbers=1, kill_after=3))
    assert report["kills"] == 1 and report["exit_code"] == 0, report["stderr_tail"]
    run = report["run"]
    # the calls the carrier had taken are followed to their outcome; a dial it had not taken yet is interrupted
    assert run["resumed"] and run["finished"] and run["interrupted_on_start"] + run["followed_on_start"] >= 1
    assert (report["dialed_twice"], report["dnc_dialed"], report["unrecorded_dials"]) == (0, 0, 0)
    assert report["early_retries"] == 0 and report["mismatched_outcomes"] == []
    assert report["attempt_outcomes"].get("interrupted", 0) == run["interrupted_on_start"]
    # the callee who opted out did so in a call that went on while the campaign was down: still on the list
    assert report["opted_out_on_list"] == report["opt_out_callees"]
