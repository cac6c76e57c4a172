"""Google's own Live client (google-genai's ``client.aio.live.connect``) against the Gemini simulator over
TLS on 127.0.0.1: the simulator accepts the messages the vendor's SDK really sends (which mix camelCase and
the proto field names: ``realtime_input``, ``automatic_activity_detection``), and the SDK reads what the
simulator answers: audio, a tool call, and the tool response's answer."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from voicecore.sim.gemini import serve_gemini_sim
from voicecore.sim.gemini_core import GeminiSimConfig, ToolRule

genai = pytest.importorskip("google.genai", reason="google-genai (the test extra) is not installed")
types = genai.types

KEY = "sdk-key"


def tls_contexts(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh self-signed certificate for 127.0.0.1, and a client context trusting
    only it (the SDK connects only over wss://)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    (folder / "cert.pem").write_bytes(cert_pem)
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return server, ssl.create_default_context(cadata=cert_pem.decode())


def test_the_vendors_sdk_talks_to_the_simulator(tmp_path: Path) -> None:
    async def scenario() -> None:
        server_tls, client_tls = tls_contexts(tmp_path)
        config = GeminiSimConfig(api_keys=(KEY,), speed_factor=20.0,
                                 tool_rules=(ToolRule("lookup_order", {"order": "A17"}, on_turn=2),))
        sim, port = await serve_gemini_sim(config=config, ssl_context=server_tls)
        client = genai.Client(api_key=KEY, http_options=types.HttpOptions(
            base_url=f"https://127.0.0.1:{port}", api_version="v1beta", async_client_args={"ssl": client_tls}))
        live = types.LiveConnectConfig(
            response_modalities=["AUDIO"], system_instruction="Be brief.",
            speech_config=types.SpeechConfig(voice_config=types.VoiceConfig(
                prebuilt_voice_config=types.PrebuiltVoiceConfig(voice_name="Puck"))),
            tools=[types.Tool(function_declarations=[types.FunctionDeclaration(name="lookup_order", description="d")])],
            input_audio_transcription=types.AudioTranscriptionConfig(),
            output_audio_transcription=types.AudioTranscriptionConfig(),
            realtime_input_config=types.RealtimeInputConfig(
                automatic_activity_detection=types.AutomaticActivityDetection(disabled=True)),
            session_resumption=types.SessionResumptionConfig(),
            context_window_compression=types.ContextWindowCompressionConfig(sliding_window=types.SlidingWindow()))
        try:
            async with client.aio.live.connect(model="gemini-live-2.5-flash", config=live) as session:
                async def caller_turn() -> None:
                    await session.send_realtime_input(activity_start=types.ActivityStart())
                    await session.send_realtime_input(audio=types.Blob(data=b"\x00\x10" * 1600,
                                                                       mime_type="audio/pcm;rate=16000"))
                    await session.send_realtime_input(activity_end=types.ActivityEnd())

                await caller_turn()
                audio = b""
                async for message in asyncio_timeout(session.receive()):  # one model turn, to turnComplete
                    audio += message.data or b""
                assert len(audio) > 24_000  # more than half a second of 24 kHz PCM16

                await caller_turn()
                tool_call = None
                async for message in asyncio_timeout(session.receive()):
                    if message.tool_call:
                        tool_call = message.tool_call
                        break
                assert tool_call is not None
                (call,) = tool_call.function_calls
                assert (call.name, call.args) == ("lookup_order", {"order": "A17"})
                await session.send_tool_response(function_responses=[
                    types.FunctionResponse(id=call.id, name=call.name, response={"status": "shipped"})])
                answered = b""
                async for message in asyncio_timeout(session.receive()):
                    answered += message.data or b""
                assert answered
        finally:
            await sim.aclose()
        (connection,) = sim.connections
        assert not connection.automatic_vad and connection.resumption and connection.close is None
        assert connection.record.tool_responses == [(call.id, "lookup_order", {"status": "shipped"})]

    asyncio.run(scenario())


async def asyncio_timeout(messages, seconds: float = 10.0):
    """The messages of an async iterator, failing the test if the next one takes longer than ``seconds``."""
    iterator = messages.__aiter__()
    while True:
        try:
            yield await asyncio.wait_for(iterator.__anext__(), seconds)
        except StopAsyncIteration:
            return
