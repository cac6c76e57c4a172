"""`voicecore up` for an agent on Gemini, up to its preflight (nothing is started when it stops there): the
start line names vendor, endpoint and missing credentials; a Gemini agent without credentials is refused;
on Vertex AI the preflight gets its token from google-auth (against the stand-in token endpoint,
tests/google_oauth.py) and the simulator on Vertex AI's path refuses a model of another project, with its
words; with only a Gemini API key, the preflight dials Gemini (no OpenAI key needed)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from google_oauth import FakeTokenEndpoint

from voicecore.demo import free_port
from voicecore.gemini.driver import DEFAULT_MODEL
from voicecore.gemini.protocol import LIVE_PATH
from voicecore.gemini.transport import VERTEX_LIVE_PATH
from voicecore.sim.gemini import serve_gemini_sim
from voicecore.sim.gemini_core import GeminiSimConfig

CREDENTIAL_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_GENAI_USE_VERTEXAI",
                        "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION")


def up_env(workdir: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICECORE_") and k not in CREDENTIAL_VARIABLES}
    env.update({"VOICECORE_LISTEN": f"127.0.0.1:{free_port()}", "VOICECORE_RUNTIME_DIR": str(workdir / "run"),
                "VOICECORE_TWILIO_AUTH_TOKEN": "test-token", "VOICECORE_MAX_CALLS": "2",
                "VOICECORE_MODEL": DEFAULT_MODEL, **more})
    return env


def run_up(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voicecore.cli", "up"], env=env, capture_output=True, text=True,
                          timeout=60)


class SimInThread:
    """The Gemini simulator on its own event loop in a thread, while `voicecore up` runs as a process."""

    def __init__(self, config: GeminiSimConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sim, self.port = asyncio.run_coroutine_threadsafe(serve_gemini_sim(config=config), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.sim.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_a_gemini_agent_without_credentials_is_refused_and_told_what_is_missing(tmp_path):
    workdir = tmp_path
    done = run_up(up_env(workdir))
    assert done.returncode == 1, done.stderr
    assert f"model {DEFAULT_MODEL} on gemini" in done.stderr
    assert "missing: GEMINI_API_KEY" in done.stderr and "gemini_vertex_project" in done.stderr
    assert "nothing was started" in done.stderr and not (workdir / "run").exists()


def test_vertex_preflight_gets_a_token_and_reports_the_vendors_refusal(tmp_path):
    with FakeTokenEndpoint() as oauth:
        sim = SimInThread(GeminiSimConfig(vertex_project="the-right-project", vertex_location="europe-west4"))
        sim.sim.token_check = oauth.accepts
        try:
            workdir = tmp_path / "node"
            workdir.mkdir()
            done = run_up(up_env(workdir, GOOGLE_APPLICATION_CREDENTIALS=str(oauth.service_account_file(tmp_path)),
                                 VOICECORE_GEMINI_VERTEX_PROJECT="another-project",
                                 VOICECORE_GEMINI_VERTEX_LOCATION="europe-west4",
                                 VOICECORE_REALTIME_URL=f"ws://127.0.0.1:{sim.port}{VERTEX_LIVE_PATH}"))
        finally:
            sim.close()
    assert done.returncode == 1, done.stderr
    assert "on gemini, Vertex AI" in done.stderr and "project another-project" in done.stderr
    assert "Publisher model not found" in done.stderr and "nothing was started" in done.stderr
    assert len(oauth.grants) == 1 and sim.sim.refused_unauthenticated == 0  # the token was good; the model was not
    assert not (workdir / "run").exists()


def test_vertex_preflight_without_a_credentials_file_says_so(tmp_path):
    workdir = tmp_path / "node"
    workdir.mkdir()
    done = run_up(up_env(workdir, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "absent.json"),
                         VOICECORE_GEMINI_VERTEX_PROJECT="acme"))
    assert done.returncode == 1, done.stderr
    assert "no Vertex AI access token" in done.stderr and "absent.json" in done.stderr
    assert not (workdir / "run").exists()


@pytest.mark.parametrize("key", ["AIza-wrong-key"])
def test_a_gemini_key_alone_preflights_gemini_not_the_builtin_simulator(key, tmp_path):
    sim = SimInThread(GeminiSimConfig(api_keys=("AIza-right-key",)))
    try:
        workdir = tmp_path
        done = run_up(up_env(workdir, GEMINI_API_KEY=key,
                             VOICECORE_REALTIME_URL=f"ws://127.0.0.1:{sim.port}{LIVE_PATH}"))
    finally:
        sim.close()
    assert done.returncode == 1, done.stderr
    assert "the Gemini API" in done.stderr and "(API key)" in done.stderr and "missing" not in done.stderr
    assert "API key not valid" in done.stderr and "check GEMINI_API_KEY" in done.stderr
    assert key not in done.stderr
