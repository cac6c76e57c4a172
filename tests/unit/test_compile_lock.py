"""The lock under which one process of a node compiles a set of numba kernels (voicecore/shm/compile_lock.py):
where its file is, that it excludes a second holder, and that the node's clean-up removes it."""

from __future__ import annotations

import dataclasses
import fcntl
import os

import pytest

from voicecore.config import load_config
from voicecore.shm.compile_lock import KERNEL_SETS, LOCK_FILE_NAMES, compiling_alone, lock_file_name
from voicecore.supervise import RUNTIME_FILES, cleanup_runtime


def held_by_someone(path) -> bool:
    """Another open file description's try at the lock: flock excludes it even within this process."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_each_kernel_set_has_its_own_lock_file_in_the_runtime_dir(tmp_path):
    assert [lock_file_name(kernels) for kernels in KERNEL_SETS] == ["compile-rings.lock", "compile-pacer.lock"]
    with compiling_alone(tmp_path, "rings"):
        assert held_by_someone(tmp_path / "compile-rings.lock")
        assert not (tmp_path / "compile-pacer.lock").exists()  # the pacer's step compiles beside the rings
        with compiling_alone(tmp_path, "pacer"):
            assert held_by_someone(tmp_path / "compile-pacer.lock")
    assert not held_by_someone(tmp_path / "compile-rings.lock")
    assert not held_by_someone(tmp_path / "compile-pacer.lock")
    assert oct((tmp_path / "compile-rings.lock").stat().st_mode & 0o777) == oct(0o600)


def test_the_lock_is_released_when_the_compile_fails(tmp_path):
    with pytest.raises(RuntimeError, match="compile failed"):
        with compiling_alone(tmp_path, "pacer"):
            raise RuntimeError("compile failed")
    assert not held_by_someone(tmp_path / "compile-pacer.lock")


def test_no_runtime_dir_or_none_yet_means_no_lock(tmp_path):
    with compiling_alone("", "rings"):
        pass
    with compiling_alone(tmp_path / "not-made-yet", "rings"):
        pass
    assert not (tmp_path / "not-made-yet").exists()


def test_an_unknown_kernel_set_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown kernel set 'gateway'; one of rings, pacer"):
        with compiling_alone(tmp_path, "gateway"):
            pass


def test_the_nodes_clean_up_removes_the_lock_files_and_the_runtime_dir(tmp_path):
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    for kernels in KERNEL_SETS:
        with compiling_alone(runtime_dir, kernels):
            pass
    assert set(LOCK_FILE_NAMES) <= set(RUNTIME_FILES)
    config = dataclasses.replace(load_config({}), runtime_dir=str(runtime_dir), shm_dir=str(tmp_path))
    cleanup_runtime(config)
    assert not runtime_dir.exists()
