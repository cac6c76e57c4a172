"""`voicecore up` compiles the pacer's step ahead (workers/pacer/warm_up.py, started before supervisord): on a
fresh install the process compiles it under the node's compile lock into numba's cache, where the pacer's
own warm-up then finds it and compiles nothing; with the step in the cache already (a restart) `voicecore up`
starts no such process.

A fresh numba cache dir makes the first process really compile (seconds of a core): what the pacer is
spared on a fresh install is exactly that compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import config as numba_config

from voicecore.supervise import REPO_ROOT, pacer_step_cached

pytestmark = pytest.mark.skipif(numba_config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT=1: nothing compiles")

PACERS_WARM_UP = '''
import json, os
from numba.core import event
from voicecore.config import load_config
from workers.pacer.warm_up import warm_up_kernels
compiled = []
class Compiles(event.Listener):
    def on_start(self, e): compiled.append(e.data["dispatcher"].py_func.__name__)
    def on_end(self, e): pass
with event.install_listener("numba:compile", Compiles()):
    warm_up_kernels(load_config(os.environ))
print(json.dumps(compiled))
'''


def test_the_step_compiled_ahead_is_what_the_pacers_warm_up_loads(tmp_path: Path):
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"), "VOICECORE_RUNTIME_DIR": str(runtime_dir),
           "VOICECORE_REALTIME_PRIORITY": "0",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    assert not pacer_step_cached(env)  # a fresh install: `voicecore up` compiles the step ahead
    ahead = subprocess.run([sys.executable, "-m", "workers.pacer.warm_up"], env=env, capture_output=True, text=True,
                           timeout=600, cwd=tmp_path)
    assert ahead.returncode == 0, ahead.stderr[-3000:]
    assert (runtime_dir / "compile-pacer.lock").exists()  # it compiled under the node's lock
    assert pacer_step_cached(env)  # numba's own file names: a restart does not compile ahead
    pacer = subprocess.run([sys.executable, "-c", PACERS_WARM_UP], env=env, capture_output=True, text=True,
                           timeout=600, cwd=tmp_path)
    assert pacer.returncode == 0, pacer.stderr[-3000:]
    assert json.loads(pacer.stdout.splitlines()[-1]) == []  # every kernel of the step came from the cache

