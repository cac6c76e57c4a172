"""The Gemini Live simulator over a real WebSocket on 127.0.0.1, driven by the codec in voicecore.gemini:
setup, caller audio in, model audio out, barge-in, a tool call's round trip, goAway and resumption with a
handle, and the vendor's refusals. Every message the simulator sends is also checked against the vendor's
own types (google-genai's LiveServerMessage, extra fields forbidden) when that package is installed."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from voicecore.gemini import protocol as gp
from voicecore.sim.gemini import serve_gemini_sim
from voicecore.sim.gemini_core import GeminiSimConfig, ToolRule

try:
    from google.genai import types as genai_types
except ImportError:  # the conformance half is skipped, the behaviour half still runs
    genai_types = None

KEY = "sim-key"
MODEL = "gemini-live-2.5-flash-preview"
TIMEOUT_S = 10.0
TOOL = gp.function_declaration("lookup_order", "Find an order", {"type": "OBJECT", "properties": {
    "order": {"type": "STRING"}}})


class Peer:
    """A client connection that parses every server message and keeps its text for the conformance check."""

    def __init__(self, ws: ClientConnection, seen: list[str]) -> None:
        self.ws = ws
        self.seen = seen

    async def next_events(self) -> tuple:
        text = await asyncio.wait_for(self.ws.recv(), TIMEOUT_S)
        self.seen.append(text)
        events = gp.parse_server_message(text)
        assert not any(isinstance(e, (gp.MalformedMessage, gp.Unhandled)) for e in events), text
        return events

    async def until(self, kind: type) -> tuple[list, object]:
        """Every event up to and including the first of ``kind``."""
        before: list = []
        while True:
            for event in await self.next_events():
                before.append(event)
                if isinstance(event, kind):
                    return before, event


def tone_16k(ms: int, amplitude: int = 8000) -> bytes:
    t = np.arange(16 * ms) / 16000
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()


async def open_peer(port: int, seen: list[str], key: str = KEY) -> Peer:
    ws = await connect(gp.live_url(key, f"ws://127.0.0.1:{port}{gp.LIVE_PATH}"), max_size=None)
    return Peer(ws, seen)


def check_conformance(seen: list[str]) -> None:
    if genai_types is None:
        pytest.skip("google-genai is not installed: the messages' conformance with the vendor's types is unchecked")
    for text in seen:
        genai_types.LiveServerMessage.model_validate_json(text)


def test_a_session_from_setup_to_resumption() -> None:
    async def scenario() -> None:
        config = GeminiSimConfig(api_keys=(KEY,), models=(MODEL,), speed_factor=10.0, connection_limit_ms=4000,
                                 go_away_notice_ms=1500, tool_rules=(ToolRule("lookup_order", {"order": "A17"}, on_turn=2),))
        sim, port = await serve_gemini_sim(config=config)
        seen: list[str] = []
        try:
            peer = await open_peer(port, seen)
            await peer.ws.send(gp.setup(MODEL, "You are a receptionist.", "Puck", functions=[TOOL],
                                        automatic_activity_detection=False))
            first = await peer.next_events()
            assert first == (gp.SetupComplete(),)
            _, update = await peer.until(gp.SessionResumptionUpdate)
            assert update.resumable and update.new_handle

            # turn 1: caller audio between activityStart and activityEnd, model audio back at 24 kHz
            await peer.ws.send(gp.activity_start())
            for _ in range(5):
                await peer.ws.send(gp.realtime_audio(tone_16k(20)))
            await peer.ws.send(gp.activity_end())
            audio = []
            while len(audio) < 3:
                for event in await peer.next_events():
                    if isinstance(event, gp.ModelAudio):
                        audio.append(event)
            assert all(a.mime_type == gp.OUTPUT_AUDIO_MIME and len(a.audio) == 24_000 * 2 * 40 // 1000 for a in audio)
            # barge-in during the model's turn
            await peer.ws.send(gp.activity_start())
            before, _ = await peer.until(gp.Interrupted)
            assert not any(isinstance(e, gp.TurnComplete) for e in before)
            # turn 2 matches the tool rule: a toolCall, and the model answers once it has the result
            await peer.ws.send(gp.activity_end())
            _, call = await peer.until(gp.ToolCall)
            (function,) = call.calls
            assert (function.name, function.args) == ("lookup_order", {"order": "A17"})
            await peer.ws.send(gp.tool_response([(function.call_id, function.name, {"status": "shipped"})]))
            events, _ = await peer.until(gp.TurnComplete)
            assert any(isinstance(e, gp.ModelAudio) for e in events)
            assert "".join(e.text for e in events if isinstance(e, gp.OutputTranscription)).strip()
            assert any(isinstance(e, gp.GenerationComplete) for e in events)
            _, update = await peer.until(gp.SessionResumptionUpdate)
            handle = update.new_handle
            assert handle and update.resumable

            # goAway before the connection's limit; a new connection resumes with the handle
            _, go_away = await peer.until(gp.GoAway)
            assert go_away.time_left_ms is not None and 0 < go_away.time_left_ms <= 1500
            resumed = await open_peer(port, seen)
            await resumed.ws.send(gp.setup(MODEL, "You are a receptionist.", "Puck", functions=[TOOL],
                                           resumption_handle=handle))
            assert await resumed.next_events() == (gp.SetupComplete(),)
            await resumed.ws.send(gp.client_content([("user", "Are you still there?")]))
            events, _ = await resumed.until(gp.TurnComplete)
            assert any(isinstance(e, gp.ModelAudio) for e in events)
            # the old connection ends at its limit with a normal close
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await peer.next_events()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
            await resumed.ws.close()
        finally:
            await sim.aclose()
        first_connection, second_connection = sim.connections
        assert first_connection.record.disconnected
        assert second_connection.record.resumed and second_connection.session is first_connection.session
        assert len(sim.store.sessions) == 1 and first_connection.session.model_turns == 3
        assert first_connection.record.interrupts == 1
        assert first_connection.record.tool_responses == [(function.call_id, "lookup_order", {"status": "shipped"})]
        check_conformance(seen)

    asyncio.run(scenario())


def test_automatic_activity_detection_and_late_chunks() -> None:
    async def scenario() -> None:
        config = GeminiSimConfig(speed_factor=2.0, late_chunks_after_interrupt=2, vad_silence_ms=200)
        sim, port = await serve_gemini_sim(config=config)
        seen: list[str] = []
        try:
            peer = await open_peer(port, seen)
            await peer.ws.send(gp.setup(MODEL, "Be brief."))
            await peer.until(gp.SetupComplete)
            for _ in range(10):
                await peer.ws.send(gp.realtime_audio(tone_16k(20)))
            for _ in range(12):  # 240 ms of silence ends the caller's turn by the simulator's VAD
                await peer.ws.send(gp.realtime_audio(bytes(640)))
            _, heard = await peer.until(gp.InputTranscription)
            assert heard.text
            await peer.until(gp.ModelAudio)
            await peer.ws.send(gp.realtime_audio(tone_16k(20)))  # the caller speaks over the model
            await peer.until(gp.Interrupted)
            late = [e for e in await peer.next_events() + await peer.next_events() if isinstance(e, gp.ModelAudio)]
            assert len(late) == 2  # the switch: audio of the cut turn after `interrupted`
            await peer.ws.close()
        finally:
            await sim.aclose()
        assert sim.connections[0].record.late_chunks_sent == 2
        check_conformance(seen)

    asyncio.run(scenario())


@pytest.mark.parametrize(("key", "model", "reason"), [
    ("wrong", MODEL, "API key not valid"),
    (KEY, "gemini-unknown", "is not found"),
])
def test_refusals_close_1008(key: str, model: str, reason: str) -> None:
    async def scenario() -> None:
        sim, port = await serve_gemini_sim(config=GeminiSimConfig(api_keys=(KEY,), models=(MODEL,)))
        try:
            peer = await open_peer(port, [], key=key)
            await peer.ws.send(gp.setup(model, "x"))
            with pytest.raises(ConnectionClosed) as closed:
                await peer.next_events()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
            assert reason in closed.value.rcvd.reason
        finally:
            await sim.aclose()

    asyncio.run(scenario())
