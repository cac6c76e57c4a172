"""The recorder's spool listing on a real directory: a scratch file left by a writer killed between its write
and its rename is removed once it is older than any write in progress, and logged; a fresh one (a write in
progress) and the spool's own files are left alone."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from voicecore.config import load_config
from voicecore.store import spool
from workers.recorder.main import Recorder


@pytest.fixture
def recorder(tmp_path):
    # the bus's Unix sockets live in the runtime dir: a short path of its own (tmp_path can be too long for them)
    runtime_dir = Path(tempfile.mkdtemp(prefix="vc-rs-", dir="/tmp"))
    config = load_config({"VOICECORE_RUNTIME_DIR": str(runtime_dir), "VOICECORE_DATABASE_URL": f"sqlite:///{tmp_path}/calls.db",
                          "VOICECORE_CONSOLE_LISTEN": ""})
    recorder = Recorder(config)
    try:
        yield recorder
    finally:
        recorder.close()
        shutil.rmtree(runtime_dir, ignore_errors=True)


def aged(path: Path, age_s: float) -> Path:
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_a_stale_scratch_file_is_removed_and_logged_a_fresh_one_is_not(recorder, caplog):
    directory = recorder.spool_dir
    name = spool.spool_name("CA1", 1_000)
    spool.write(directory, name, b'{"not": "read here"}')
    stale = directory / ".spool-killed.tmp"
    stale.write_bytes(b"half a summary")
    aged(stale, spool.STALE_SCRATCH_AFTER_S + 60)
    fresh = directory / ".spool-writing.tmp"
    fresh.write_bytes(b"a write in progress")
    aged(fresh, spool.STALE_SCRATCH_AFTER_S - 60)
    old_call = aged(directory / name, 10 * spool.STALE_SCRATCH_AFTER_S)  # an old spool file waits to be stored, never removed

    with caplog.at_level(logging.INFO, logger="voicecore.recorder"):
        recorder.scan_spool()

    assert not stale.exists()
    assert fresh.read_bytes() == b"a write in progress"
    assert old_call.exists() and recorder.spooled == [name]
    assert recorder.counters["spool_scratch_removed"] == 1
    removed = [r.getMessage() for r in caplog.records if "scratch" in r.getMessage()]
    assert removed == ["stale spool scratch file .spool-killed.tmp removed (its writer stopped before renaming it)"]

    recorder.scan_spool()  # the next minute's listing: nothing more to remove
    assert recorder.counters["spool_scratch_removed"] == 1 and fresh.exists()


def test_a_missing_spool_directory_removes_nothing(recorder):
    shutil.rmtree(recorder.spool_dir, ignore_errors=True)
    recorder.scan_spool()
    assert recorder.counters["spool_scratch_removed"] == 0
