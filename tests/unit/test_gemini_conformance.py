"""Conformance with the vendor's own message types: every client message our codec builds validates as
google-genai's LiveClientMessage (pydantic, unknown fields forbidden), and every server message the
simulator's core emits as LiveServerMessage. The socket-level check of the simulator is in
tests/component/test_gemini_sim.py."""

from __future__ import annotations

import base64
import json

import pytest

from voicecore.gemini import protocol as gp
from voicecore.sim.gemini_core import Answer, GeminiConnection, GeminiSimConfig, SessionStore, ToolRule

genai_types = pytest.importorskip("google.genai.types", reason="google-genai (the test extra) is not installed")

TOOL = gp.function_declaration("book", "Book a slot", {"type": "OBJECT", "properties": {"day": {"type": "STRING"}},
                                                       "required": ["day"]})


def client_messages() -> list[str]:
    return [
        gp.setup("gemini-live-2.5-flash", "Be kind.", "Kore", functions=[TOOL], resumption_handle="h",
                 compression_trigger_tokens=25600, compression_target_tokens=12800),
        gp.setup("m", "x", transcribe_input=False, transcribe_output=False, resumable=False, compress_context=False),
        gp.realtime_audio(b"\x00\x01" * 320), gp.activity_start(), gp.activity_end(), gp.audio_stream_end(),
        gp.client_content([("user", "hi"), ("model", "hello")]), gp.client_content([("model", "heard: hel")], False),
        gp.tool_response([("c1", "book", {"ok": True}), ("c2", "book", {"error": "full"})]),
    ]


@pytest.mark.parametrize("text", client_messages())
def test_every_client_message_validates(text: str) -> None:
    parsed = genai_types.LiveClientMessage.model_validate_json(text)
    # nothing we sent was dropped: the vendor's model, dumped by its aliases, gives our JSON back
    assert parsed.model_dump(mode="json", by_alias=True, exclude_none=True) == json.loads(text)


def test_activity_detection_setting_validates_where_the_sdk_sends_it() -> None:
    """LiveClientSetup (google-genai 1.x to 3.x) has no realtimeInputConfig member, yet the SDK's own
    connect sends LiveConnectConfig.realtime_input_config as setup.realtimeInputConfig; the member is checked
    against the SDK's RealtimeInputConfig type and the rest of the message against LiveClientMessage."""
    message = json.loads(gp.setup("m", "x", automatic_activity_detection=False))
    member = message["setup"].pop("realtimeInputConfig")
    assert genai_types.RealtimeInputConfig.model_validate(member).automatic_activity_detection.disabled is True
    genai_types.LiveClientMessage.model_validate(message)
    assert "realtime_input_config" in genai_types.LiveConnectConfig.model_fields


def test_activity_handling_of_turn_taking_by_words_validates_as_the_sdks_enum() -> None:
    """The setup of a call whose caller's words decide the floor (voicecore/gemini/driver.py, turn_taking):
    realtimeInputConfig.activityHandling NO_INTERRUPTION, a value of the SDK's ActivityHandling enum; the whole
    message round-trips through the SDK's types with nothing dropped."""
    from voicecore.agent.load import default_agent_dir, load_agent
    from voicecore.gemini.driver import driver_for_agent

    text = driver_for_agent(load_agent(default_agent_dir()), "CAconf", model="gemini-2.5-flash").setup_message()
    message = json.loads(text)
    member = message["setup"].pop("realtimeInputConfig")
    config = genai_types.RealtimeInputConfig.model_validate(member)
    assert config.activity_handling == genai_types.ActivityHandling.NO_INTERRUPTION
    assert config.model_dump(mode="json", by_alias=True, exclude_none=True) == member
    genai_types.LiveClientMessage.model_validate(message)


def test_every_message_the_simulator_core_sends_validates() -> None:
    answers = (Answer("Hello there, how can I help?", b"\x10\x00" * 24_000),)
    config = GeminiSimConfig(tool_rules=(ToolRule("book", {"day": "mon"}, on_text="book"),), late_chunks_after_interrupt=1,
                             connection_limit_ms=5_000, go_away_notice_ms=1_000)
    store = SessionStore()
    conn = GeminiConnection(config, answers, store, api_key="k", now_ms=0)
    sent: list[str] = []
    conn.receive(gp.setup("m", "x", automatic_activity_detection=False), 0)
    conn.receive(gp.activity_start(), 0)
    conn.receive(gp.realtime_audio(b"\x00\x10" * 320), 10)
    conn.receive(gp.activity_end(), 20)
    conn.advance(100)
    conn.receive(gp.activity_start(), 120)  # barge-in
    conn.receive(gp.activity_end(), 300)
    conn.advance(2_000)
    conn.receive(gp.client_content([("user", "please book monday")]), 2_100)  # a tool call
    conn.receive(gp.activity_start(), 2_150)  # cancels it
    conn.receive(gp.activity_end(), 2_200)
    conn.advance(4_500)
    sent = conn.take_outgoing()
    kinds = {key for text in sent for key in json.loads(text)}
    assert kinds == {"setupComplete", "serverContent", "sessionResumptionUpdate", "toolCall", "toolCallCancellation",
                     "usageMetadata", "goAway"}
    for text in sent:
        genai_types.LiveServerMessage.model_validate_json(text)
    audio = [json.loads(t)["serverContent"]["modelTurn"]["parts"][0]["inlineData"] for t in sent if "modelTurn" in t]
    assert {a["mimeType"] for a in audio} == {"audio/pcm;rate=24000"}
    assert len(base64.b64decode(audio[0]["data"])) == 24_000 * 2 * config.chunk_ms // 1000
