"""Gemini Live through Vertex AI, on 127.0.0.1: google-auth's Application Default Credentials for real (a
service-account JSON key made here, its ``token_uri`` at a stand-in of Google's token endpoint that verifies
the RS256 JWT-bearer grant, tests/google_oauth.py), the model worker's Gemini transport
(voicecore/gemini/transport.py, vertex_tokens.py) and the Gemini simulator on Vertex AI's path; and Google's own
SDK in Vertex mode against the same simulator (a short call: a caller turn, the model's audio)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from google_oauth import AUDIENCE, FakeTokenEndpoint
from voicecore.gemini import transport as gemini_connect
from voicecore.gemini.driver import DEFAULT_MODEL, GeminiDriver
from voicecore.gemini.transport import VertexTokens
from voicecore.gemini.vertex_tokens import CLOUD_PLATFORM_SCOPE, TokenError
from voicecore.sim.gemini import serve_gemini_sim
from voicecore.sim.gemini_core import GeminiSimConfig

pytest.importorskip("google.auth", reason="google-auth (the vertex extra) is not installed")

PROJECT = "voicecore-test"
LOCATION = "europe-west4"


def vertex_access(port: int) -> gemini_connect.GeminiAccess:
    url = f"ws://127.0.0.1:{port}{gemini_connect.VERTEX_LIVE_PATH}"
    return gemini_connect.access(url, "", {}, PROJECT, LOCATION)


def setup_text(access: gemini_connect.GeminiAccess) -> str:
    driver = GeminiDriver("CAvertex", model=access.model_name(DEFAULT_MODEL), instructions="Be brief.")
    return driver.setup_message()


def test_the_transport_opens_a_vertex_session_with_a_token_from_a_service_account(tmp_path, monkeypatch):
    with FakeTokenEndpoint() as oauth:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(oauth.service_account_file(tmp_path)))

        async def scenario() -> None:
            sim, port = await serve_gemini_sim(config=GeminiSimConfig(vertex_project=PROJECT, vertex_location=LOCATION))
            sim.token_check = oauth.accepts
            tokens = VertexTokens()
            try:
                access = vertex_access(port)
                token = await tokens.token()
                target = gemini_connect.endpoint_for_access(access, {}, token=token)
                assert ("Authorization", f"Bearer {token}") in target.headers
                accepted = await gemini_connect.trial_session(target, setup_text(access), timeout_s=10)
                assert accepted.ok, accepted.fault
                # a second connection reuses the token: one grant, no blocking refresh per connection
                assert await tokens.token() == token and len(oauth.grants) == 1

                # a token Google does not know (revoked, expired): HTTP 401 at the upgrade, the key refused
                stale = gemini_connect.endpoint_for_access(access, {}, token="ya29.not-issued")
                refused = await gemini_connect.trial_session(stale, setup_text(access), timeout_s=10)
                assert not refused.ok and refused.fault.fatal and refused.fault.kind == "auth"
                assert "invalid authentication credentials" in refused.fault.message

                # a model of another project: closed 1008 at setup, as a model not found
                other = gemini_connect.access(access.url, "", {}, "someone-else", LOCATION)
                wrong = await gemini_connect.trial_session(target, setup_text(other), timeout_s=10)
                assert not wrong.ok and wrong.fault.kind == "model" and "not found" in wrong.fault.message
            finally:
                tokens.close()
                await sim.aclose()
            assert sim.refused_unauthenticated == 1
            opened = [c for c in sim.connections if c.session is not None]
            assert len(opened) == 1 and opened[0].vertex

        asyncio.run(scenario())
    (claims,) = oauth.grants
    assert claims["scope"] == CLOUD_PLATFORM_SCOPE and claims["aud"] == AUDIENCE


def test_a_refused_grant_is_a_token_error_with_googles_words(tmp_path, monkeypatch):
    with FakeTokenEndpoint() as oauth:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(oauth.service_account_file(tmp_path)))
        oauth.refuse_next = 1

        async def scenario() -> tuple[str, str]:
            tokens = VertexTokens()
            try:
                with pytest.raises(TokenError) as refused:
                    await tokens.token()
                return str(refused.value), await tokens.token()  # the next call's try succeeds
            finally:
                tokens.close()

        message, token = asyncio.run(scenario())
    assert "invalid_grant" in message and "account not found" in message
    assert oauth.accepts(token)


def test_no_credentials_file_is_a_token_error(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))

    async def scenario() -> None:
        tokens = VertexTokens()
        try:
            with pytest.raises(TokenError, match="no Application Default Credentials"):
                await tokens.token()
        finally:
            tokens.close()

    asyncio.run(scenario())


def test_googles_sdk_in_vertex_mode_talks_to_the_simulator(tmp_path, monkeypatch):
    genai = pytest.importorskip("google.genai", reason="google-genai (the test extra) is not installed")
    from google.oauth2 import service_account
    from test_gemini_sdk_client import asyncio_timeout, tls_contexts

    types = genai.types
    with FakeTokenEndpoint() as oauth:
        key_file = oauth.service_account_file(tmp_path)

        async def scenario() -> None:
            server_tls, client_tls = tls_contexts(tmp_path)
            sim, port = await serve_gemini_sim(config=GeminiSimConfig(speed_factor=20.0, vertex_project=PROJECT,
                                                                      vertex_location=LOCATION),
                                               ssl_context=server_tls)
            sim.token_check = oauth.accepts
            credentials = service_account.Credentials.from_service_account_file(str(key_file),
                                                                                scopes=[CLOUD_PLATFORM_SCOPE])
            client = genai.Client(vertexai=True, project=PROJECT, location=LOCATION, credentials=credentials,
                                  http_options=types.HttpOptions(base_url=f"https://127.0.0.1:{port}",
                                                                 async_client_args={"ssl": client_tls}))
            live = types.LiveConnectConfig(
                response_modalities=["AUDIO"], system_instruction="Be brief.",
                realtime_input_config=types.RealtimeInputConfig(
                    automatic_activity_detection=types.AutomaticActivityDetection(disabled=True)))
            try:
                async with client.aio.live.connect(model=DEFAULT_MODEL, config=live) as session:
                    await session.send_realtime_input(activity_start=types.ActivityStart())
                    await session.send_realtime_input(audio=types.Blob(data=b"\x00\x10" * 1600,
                                                                       mime_type="audio/pcm;rate=16000"))
                    await session.send_realtime_input(activity_end=types.ActivityEnd())
                    audio = b""
                    async for message in asyncio_timeout(session.receive()):
                        audio += message.data or b""
                    assert len(audio) > 24_000  # more than half a second of 24 kHz PCM16
            finally:
                await sim.aclose()
            (connection,) = sim.connections
            assert connection.vertex and connection.close is None and sim.refused_unauthenticated == 0

        asyncio.run(scenario())
    assert len(oauth.grants) == 1  # the SDK did the JWT-bearer grant against the stand-in
