"""The Gemini Live path end to end: `voicecore demo --model-vendor gemini` against the Gemini simulator, real
processes, loopback sockets, the records replayed; the simulator's connections end after 4 s (goAway before
it), so each call moves its session to new connections mid-call (13 s: the demo's shortest call) and resumes it with its handle.

What the caller hears is judged from outside the runtime: the carrier simulator's playout log against the
turns the Gemini simulator sent (voicecore/sim/gemini_records.py), and the simulator's own count of the
connections that resumed a session.
"""

from __future__ import annotations

import pytest
from demo_run import run_demo

pytestmark = pytest.mark.integration

DEMO_TIMEOUT_S = 240


def test_two_gemini_calls_resume_across_go_away_with_one_voice_and_no_stale_audio(tmp_path):
    report = run_demo(["--model-vendor", "gemini", "--calls", "2", "--seconds", "13",
                       "--record-dir", str(tmp_path / "records"), "--gemini-connection-limit-s", "4"], DEMO_TIMEOUT_S)
    assert report["model_vendor"] == "gemini"
    assert report["calls_completed"] == 2
    assert report["stale_frames"] == 0 and report["overlapping_frames"] == 0
    assert report["bargeins"] == 2 and report["bargeins_without_clear"] == 0
    assert report["unanswered_turns"] == 0
    gemini = report["gemini"]
    assert gemini["go_aways_sent"] >= 2 and gemini["connections_resumed"] >= 2  # at least once per call
    assert gemini["refused"] == 0
    assert report["underruns_audio_available"] == 0  # the moves to new connections are not heard
    assert report["records_written"] == report["records_replayed_identical"] == 2
    assert report["calls_in_store"] == 2


def test_a_session_the_server_drops_with_an_internal_error_goes_on_on_a_new_connection(tmp_path):
    """The simulator drops each session's first connection with 1011 and no goAway while the first answer is
    given (6.6 s in): the call resumes its session, answers every turn, and plays nothing stale."""
    report = run_demo(["--model-vendor", "gemini", "--calls", "2", "--seconds", "13",
                       "--record-dir", str(tmp_path / "records"), "--gemini-internal-error-s", "6.6"], DEMO_TIMEOUT_S)
    gemini = report["gemini"]
    assert gemini["internal_errors"] == 2 and gemini["go_aways_sent"] == 0 and gemini["refused"] == 0
    assert gemini["connections"] == 4 and gemini["connections_resumed"] == 2
    assert report["calls_completed"] == 2 and report["unanswered_turns"] == 0
    assert report["stale_frames"] == 0 and report["overlapping_frames"] == 0
    assert report["records_written"] == report["records_replayed_identical"] == 2
