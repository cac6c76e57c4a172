"""The Gemini Live codec (voicecore.gemini.protocol): the JSON our builders produce, and the parser on
the vendor's server messages, unknown members and garbage."""

from __future__ import annotations

import base64
import json

import pytest

from voicecore.gemini import protocol as gp


def test_setup_carries_everything_a_voice_agent_configures() -> None:
    tool = gp.function_declaration("book", "Book a slot", {"type": "OBJECT", "properties": {"day": {"type": "STRING"}}})
    message = json.loads(gp.setup("gemini-live-2.5-flash", "Be kind.", "Kore", functions=[tool],
                                  automatic_activity_detection=False, resumption_handle="h1",
                                  compression_trigger_tokens=25600, compression_target_tokens=12800))
    assert message == {"setup": {
        "model": "models/gemini-live-2.5-flash",
        "generationConfig": {"responseModalities": ["AUDIO"],
                             "speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}}},
        "systemInstruction": {"parts": [{"text": "Be kind."}]},
        "tools": [{"functionDeclarations": [tool]}],
        "realtimeInputConfig": {"automaticActivityDetection": {"disabled": True}},
        "inputAudioTranscription": {},
        "outputAudioTranscription": {},
        "sessionResumption": {"handle": "h1"},
        "contextWindowCompression": {"slidingWindow": {"targetTokens": 12800}, "triggerTokens": 25600},
    }}


def test_setup_defaults_and_options_off() -> None:
    body = json.loads(gp.setup("models/m", "x", transcribe_input=False, transcribe_output=False, resumable=False,
                               compress_context=False))["setup"]
    assert body == {"model": "models/m", "generationConfig": {"responseModalities": ["AUDIO"]},
                    "systemInstruction": {"parts": [{"text": "x"}]}}
    assert json.loads(gp.setup("m", "x"))["setup"]["sessionResumption"] == {}
    with pytest.raises(ValueError):
        gp.setup("", "x")


def test_realtime_input_and_turn_messages() -> None:
    pcm = bytes(range(256)) * 2
    assert json.loads(gp.realtime_audio(pcm)) == {
        "realtimeInput": {"audio": {"data": base64.b64encode(pcm).decode(), "mimeType": "audio/pcm;rate=16000"}}}
    assert json.loads(gp.activity_start()) == {"realtimeInput": {"activityStart": {}}}
    assert json.loads(gp.activity_end()) == {"realtimeInput": {"activityEnd": {}}}
    assert json.loads(gp.audio_stream_end()) == {"realtimeInput": {"audioStreamEnd": True}}
    assert json.loads(gp.client_content([("model", "I said: hello"), ("user", "hi")], turn_complete=False)) == {
        "clientContent": {"turns": [{"role": "model", "parts": [{"text": "I said: hello"}]},
                                    {"role": "user", "parts": [{"text": "hi"}]}], "turnComplete": False}}
    with pytest.raises(ValueError):
        gp.client_content([("assistant", "x")])
    assert json.loads(gp.tool_response([("c1", "book", {"ok": True})])) == {
        "toolResponse": {"functionResponses": [{"id": "c1", "name": "book", "response": {"ok": True}}]}}
    assert gp.live_url("a b&c").endswith(gp.LIVE_PATH + "?key=a%20b%26c")


def test_server_content_becomes_events_in_order() -> None:
    audio = base64.b64encode(b"\x01\x02\x03\x04").decode()
    text = json.dumps({"serverContent": {
        "modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": audio}},
                                {"text": "thinking", "thought": True}]},
        "outputTranscription": {"text": "Hello "}, "inputTranscription": {"text": "hi"},
        "generationComplete": True, "turnComplete": True, "futureField": 1},
        "usageMetadata": {"promptTokenCount": 10, "responseTokenCount": "7", "totalTokenCount": 17}})
    assert gp.parse_server_message(text) == (
        gp.InputTranscription("hi"), gp.ModelAudio(b"\x01\x02\x03\x04", "audio/pcm;rate=24000"),
        gp.ModelText("thinking", True), gp.OutputTranscription("Hello "), gp.GenerationComplete(), gp.TurnComplete(),
        gp.UsageMetadata(10, 7, 17))


@pytest.mark.parametrize(("text", "events"), [
    ('{"setupComplete":{}}', (gp.SetupComplete(),)),
    ('{"serverContent":{"interrupted":true}}', (gp.Interrupted(),)),
    ('{"toolCall":{"functionCalls":[{"id":"f1","name":"book","args":{"day":"mon"}}]}}',
     (gp.ToolCall((gp.FunctionCall("f1", "book", {"day": "mon"}),)),)),
    ('{"toolCallCancellation":{"ids":["f1","f2"]}}', (gp.ToolCallCancellation(("f1", "f2")),)),
    ('{"goAway":{"timeLeft":"10s"}}', (gp.GoAway(10_000),)),
    ('{"goAway":{"timeLeft":"0.25s"}}', (gp.GoAway(250),)),
    ('{"goAway":{}}', (gp.GoAway(None),)),
    ('{"sessionResumptionUpdate":{"newHandle":"abc","resumable":true}}', (gp.SessionResumptionUpdate("abc", True),)),
    ('{"sessionResumptionUpdate":{"resumable":false}}', (gp.SessionResumptionUpdate(None, False),)),
    ('{"voiceActivity":{"voiceActivityType":"ACTIVITY_START","audioOffset":"1.5s"}}', (gp.VoiceActivity(True),)),
    ('{"voiceActivity":{"voiceActivityType":"ACTIVITY_END"}}', (gp.VoiceActivity(False),)),
    ('{"voiceActivity":{"voiceActivityType":"TYPE_UNSPECIFIED"}}', ()),
    ('{"voiceActivityDetectionSignal":{"vadSignalType":"VAD_SIGNAL_TYPE_SOS"}}',
     (gp.Unhandled("voiceActivityDetectionSignal"),)),
])
def test_each_server_message(text: str, events: tuple) -> None:
    assert gp.parse_server_message(text) == events


@pytest.mark.parametrize("text", [
    b"\xff\xfe", "not json", "[1,2]", "{}", '{"setupComplete":[]}', '{"serverContent":{"turnComplete":"yes"}}',
    '{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"data":"@@@"}}]}}}',
    '{"serverContent":{"modelTurn":{"parts":"x"}}}', '{"toolCall":{"functionCalls":[{"id":"a"}]}}',
    '{"toolCall":{"functionCalls":[{"name":"f","args":[1]}]}}', '{"toolCallCancellation":{"ids":[1]}}',
    '{"usageMetadata":{"totalTokenCount":true}}', "[" * 100_000,
])
def test_garbage_is_a_malformed_message_never_an_exception(text: str | bytes) -> None:
    (event,) = gp.parse_server_message(text)
    assert isinstance(event, gp.MalformedMessage) and event.reason


def test_durations_both_ways() -> None:
    assert [gp.parse_duration_ms(t) for t in ("9.5s", "0s", "-1s", "10", "nans", None)] == [9500, 0, None, None, None, None]
    assert [gp.format_duration(ms) for ms in (0, 9500, 10_000, 1)] == ["0s", "9.500s", "10s", "0.001s"]
    assert all(gp.parse_duration_ms(gp.format_duration(ms)) == ms for ms in (0, 1, 999, 61_234))
