"""The pipecat baseline's pieces that need no pipecat: the stand-in's dither (its frames survive pipecat's
PCM round trip and stay unique), its records in the model simulator's shape, and the bench options that
make the figures comparable across systems (privileges, relative resolution, repeats, the results convention;
docs/how-to/run-the-bench.md#options). No processes but the CLI's
refusals, which exit before starting anything."""

from __future__ import annotations

import argparse
import subprocess
import sys
import warnings

import pytest

from bench import analysis
from bench.baseline_pipecat.dither import dither_ulaw, variant_seed
from bench.cli import add_bench_arguments, bench_options_from_args
from bench.run import BASELINE_LEAVES_OUT, BASELINES, baseline_names, results_path
from bench.scenarios import get_scenario
from voicecore.callreport import STARVED_GRACE_MS, canonical_frame, frame_owners, owner_of
from voicecore.sim.audio_clips import default_library
from voicecore.supervise import REPO_ROOT
from voicecore.timing import FRAME_BYTES

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

NAMES = get_scenario("steady").sim_config.clip_sequence
CLIPS = [default_library().audio[name] for name in NAMES]


def test_the_dither_survives_pipecats_pcm_round_trip_and_makes_frames_unique():
    clip = CLIPS[1]
    a, b = dither_ulaw(clip, variant_seed(1, 0)), dither_ulaw(clip, variant_seed(1, 1))
    assert len(a) == len(clip) and a == dither_ulaw(clip, variant_seed(1, 0))  # deterministic
    # pipecat: mu-law -> 16-bit PCM in the stand-in, PCM -> mu-law in TwilioFrameSerializer
    assert audioop.lin2ulaw(audioop.ulaw2lin(a, 2), 2) == canonical_frame(a)
    # the clip repeats frames (its silences); each dithered response has none, and no two responses share one
    frames = [canonical_frame(x[i:i + FRAME_BYTES]) for x in (a, b) for i in range(0, len(clip), FRAME_BYTES)]
    assert len(set(frames)) == len(frames)


def _line(call_sid: str) -> dict:
    return {"call_sid": call_sid, "connected_ms": 1000.0, "closed_ms": 9000.0, "speech": [[4000.0, 5100.0]],
            "responses": [
                {"index": 0, "clip": 0, "variant": 0, "created_ms": 1000.0, "first_delta_ms": 1200.0,
                 "deltas": [[960, 1200.0], [960, 1230.0]], "status": "completed", "cancel_ms": None, "done_ms": 1300.0},
                {"index": 5, "clip": 0, "variant": 1, "created_ms": 5100.0, "first_delta_ms": 5300.0,
                 "deltas": [[960, 5300.0]], "status": "cancelled", "cancel_ms": 5400.0, "done_ms": 5400.0}]}


def test_stand_in_records_have_the_model_simulators_shape():
    records = analysis.stand_in_records([_line("CA1")], CLIPS, NAMES)
    (record,) = records
    assert record.call_sid == "CA1" and record.speech_started_ms == [4000.0] and record.speech[0].stopped_at_ms == 5100.0
    first, second = record.responses
    assert first.clip_name == NAMES[0] and first.status == "completed" and second.status == "cancelled"
    assert first.delta_sent_ms == [1200.0, 1230.0] and first.delta_bytes == [960, 960]
    assert first.first_delta_ms == 1200.0 and analysis.is_answer(second) and not analysis.is_answer(first)
    # what pipecat puts on the wire for answer 0, frame 3, is found by content
    wire = audioop.lin2ulaw(audioop.ulaw2lin(dither_ulaw(CLIPS[0], variant_seed(0, 0)), 2), 2)
    owner = owner_of(frame_owners(records), wire[3 * FRAME_BYTES:4 * FRAME_BYTES])
    assert owner is not None and owner[0] is first and owner[1] == 3
    assert owner_of(frame_owners(records), b"\x01" * FRAME_BYTES) is None


def _options(*argv: str):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    parser.add_argument("--config", default=None)
    return bench_options_from_args(parser.parse_args(list(argv)))


def test_bench_options_of_issue_14():
    opts = _options()
    assert (opts.privileges, opts.resolution, opts.repeat, opts.save) == ("on", "2%", 1, "")
    assert opts.starved_grace_ms == STARVED_GRACE_MS  # one grace, the demo's and the bench's
    opts = _options("--privileges", "off", "--resolution", "10", "--repeat", "3", "--find-capacity",
                    "--baseline", "pipecat-realtime", "--save", "steady-unix")
    assert (opts.privileges, opts.resolution, opts.repeat, opts.baseline, opts.save) == ("off", "10", 3, "pipecat-realtime", "steady-unix")
    assert set(BASELINES) == set(BASELINE_LEAVES_OUT) == {"pipecat", "pipecat-realtime"}


def test_results_are_named_by_date_and_what_they_measured():
    path = results_path("steady-unix-capacity", today="2026-11-25")
    assert path == REPO_ROOT / "bench" / "results" / "2026-11-25-steady-unix-capacity.json"
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(ValueError):
            results_path(bad)
    assert (REPO_ROOT / "bench" / "results" / "README.md").exists()


def test_both_baselines_in_one_run_in_the_order_given():
    assert baseline_names("") == []
    assert baseline_names("pipecat-realtime, pipecat") == ["pipecat-realtime", "pipecat"]
    for bad in ("pipecat,pipecat", "pipecat,livekit", "vapi"):
        with pytest.raises(ValueError):
            baseline_names(bad)


@pytest.mark.parametrize("argv, needle", [
    (["--baseline", "pipecat,nope"], "unknown baseline 'nope'"),
    (["--baseline", "pipecat-realtime,pipecat", "--scenario", "overlap"], "one-voice rule"),
    (["--repeat", "3"], "--repeat N"),
    (["--resolution", "0%"], "percentage"),
    (["--baseline", "pipecat", "--scenario", "overlap"], "one-voice rule"),
    (["--compare-store", "--baseline", "pipecat"], "--compare-store runs voicecore's stack twice"),
    (["--compare-store", "--find-capacity"], "--compare-store runs voicecore's stack twice"),
    (["--compare-store", "--target", "http://127.0.0.1:9", "--auth-token", "x"], "--compare-store runs voicecore's stack twice"),
    (["--compare-store", "--scenario", "agent:examples/receptionist"], "not with --baseline, --target, --find-capacity, an agent"),
])
def test_bench_refuses_bad_combinations(argv, needle):
    completed = subprocess.run([sys.executable, "-m", "voicecore.cli", "bench", *argv],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 2 and needle in completed.stderr, completed.stderr
