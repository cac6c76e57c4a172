"""A node on Gemini Live through Vertex AI, with real processes: the model worker gets its access token from
google-auth's Application Default Credentials (a service-account key made here, its token endpoint a
stand-in of Google's that verifies the JWT-bearer grant, tests/google_oauth.py), in a thread of its own, and
dials the Gemini simulator on Vertex AI's path with it; one short call hears the model."""

from __future__ import annotations

import asyncio

import pytest
from google_oauth import FakeTokenEndpoint
from stacks import free_port, start_stack

from voicecore.demo import demo_script
from voicecore.gemini.driver import DEFAULT_MODEL
from voicecore.gemini.transport import VERTEX_LIVE_PATH
from voicecore.sim.carrier import place_call
from voicecore.sim.gemini import serve_gemini_sim
from voicecore.sim.gemini_core import GeminiSimConfig

pytestmark = pytest.mark.integration
pytest.importorskip("google.auth", reason="google-auth (the vertex extra) is not installed")

PROJECT = "voicecore-test"
LOCATION = "europe-west4"


def test_a_call_on_vertex_ai_hears_the_model(tmp_path, monkeypatch):
    with FakeTokenEndpoint() as oauth:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(oauth.service_account_file(tmp_path)))
        for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
            monkeypatch.delenv(name, raising=False)

        port = free_port()
        running = start_stack(call_control="spine", model=DEFAULT_MODEL, gemini_vertex_project=PROJECT,
                              gemini_vertex_location=LOCATION, realtime_url=f"ws://127.0.0.1:{port}{VERTEX_LIVE_PATH}")

        async def scenario() -> tuple[object, object]:
            sim, _ = await serve_gemini_sim(port=port, config=GeminiSimConfig(vertex_project=PROJECT,
                                                                              vertex_location=LOCATION))
            sim.token_check = oauth.accepts
            try:
                config = running.config
                return sim, await place_call(config.base_url, config.twilio_auth_token, demo_script(6))
            finally:
                await sim.aclose()

        try:
            sim, result = asyncio.run(scenario())
            log = running.log_tail(20_000)
        finally:
            running.stop()
        assert result.statistics.frames_received > 100, log  # the model's turns reached the caller
        opened = [c for c in sim.connections if c.session is not None]
        assert opened and all(c.vertex for c in opened), log
        assert sim.refused_unauthenticated == 0, log
        assert "no Vertex AI access token" not in log and "refresh failed" not in log
    assert len(oauth.grants) == 1  # one token for the worker, fetched before the call, reused by it
