"""Storage tiers on call records (voicecore/privacy/records.py through CallRecorder): what a caller said is
redacted (or emptied) in every entry the record, the observers and the store's summary get, the driver and
the tool still get it whole, a redacted record replays identically, and no tier keeps the caller's audio
but ``everything``."""

from __future__ import annotations

import json

import pytest

from voicecore.agent.flow import AgentFlow
from voicecore.agent.spec import AgentSpec, FlowSpec, FunctionSpec, Message, NodeSpec, Webhook
from voicecore.call import controller as C
from voicecore.call.record import CallRecorder
from voicecore.call.record_reader import RecordReader
from voicecore.observe.events import CallEventTap
from voicecore.privacy.records import RecordPrivacy
from voicecore.replay import replay
from voicecore.store.summary import RecordSummarizer

MS = 1_000_000
IDLE = C.IDLE_PLAYOUT
PAY_PARAMS = {"type": "object", "properties": {"card": {"type": "string"}, "phone": {"type": "string"}},
              "required": ["card", "phone"], "additionalProperties": False}
PAY_ARGS = '{"card": "4111 1111 1111 1111", "phone": "070-123 45 67"}'
# What must not be stored, in any of the forms it was said or sent in.
SECRETS = ("4111", "1111 1111", "070-123", "0701234567", "123 45 67", "sju noll", "anna.berg@example.com", "811218")


def agent() -> AgentSpec:
    functions = {"pay": FunctionSpec("pay", "Take a payment.", PAY_PARAMS, tool=Webhook("http://127.0.0.1:9/pay"), writes=False)}
    nodes = {"main": NodeSpec("main", role_messages=(Message("system", "You take payments."),), functions=("pay",))}
    return AgentSpec("shop", "You are a shop.", FlowSpec("main", nodes, functions), greeting="Hello.")


def ev(**fields) -> str:
    return json.dumps(fields)


def recording(driver, privacy: RecordPrivacy | None, observed: list | None) -> CallRecorder:
    """``driver`` recorded under ``privacy`` (caller audio asked for); with ``observed``, the live observer tap and
    the store's summarizer read its entries and are appended to it."""
    recorder = CallRecorder(driver, keep_caller_audio=True, privacy=privacy)
    if observed is not None:
        tap, summarizer = CallEventTap(recorder.header), RecordSummarizer(recorder.header)
        recorder.observer = RecordReader(tap, summarizer).feed
        observed.extend([tap, summarizer])
    return recorder


def call(privacy: RecordPrivacy | None, observed: list | None = None) -> tuple[CallRecorder, list]:
    """A call in which the caller says their number and personnummer and the model takes a card payment."""
    recorder = recording(C.CallController("CA1", flow=AgentFlow(agent()), config=C.ControllerConfig()), privacy, observed)
    returned: list = []
    recorder.start(0)
    recorder.on_caller_audio(b"\x11" * 160, 500 * MS)
    recorder.on_model_event(ev(type="input_audio_buffer.speech_started", audio_start_ms=1000, item_id="u1"), 1000 * MS, IDLE)
    recorder.on_model_event(ev(type="input_audio_buffer.speech_stopped", audio_end_ms=3000, item_id="u1"), 3000 * MS, IDLE)
    for i, delta in enumerate(["my number is 070", "-123 45 67", ", sju noll", " and my personnummer 811218-9876"]):
        recorder.on_model_event(ev(type="conversation.item.input_audio_transcription.delta", item_id="u1", content_index=0,
                                   delta=delta), (3100 + 10 * i) * MS, IDLE)
    recorder.on_model_event(ev(type="conversation.item.input_audio_transcription.completed", item_id="u1", content_index=0,
                               transcript="my number is 070-123 45 67, and my personnummer 811218-9876"), 3200 * MS, IDLE)
    recorder.on_model_event(ev(type="response.created", response={"id": "r1", "metadata": {"vc_req": "2"}}), 3300 * MS, IDLE)
    recorder.on_model_event(ev(type="response.function_call_arguments.delta", response_id="r1", item_id="fc_1",
                               call_id="call_1", delta='{"card": "4111 1111'), 3350 * MS, IDLE)
    returned += recorder.on_model_event(ev(type="response.function_call_arguments.done", response_id="r1", item_id="fc_1",
                                           call_id="call_1", name="pay", arguments=PAY_ARGS), 3400 * MS, IDLE)
    recorder.on_model_event(ev(type="response.done", response={"id": "r1", "status": "completed"}), 3420 * MS, IDLE)
    returned += recorder.on_tool_result("call_1", True, '{"paid": true, "receipt_to": "anna.berg@example.com"}', 3900 * MS)
    for t in range(3920, 9000, 20):
        returned += recorder.on_tick(t * MS, IDLE)
    return recorder, returned


def stored_words(recorder: CallRecorder) -> str:
    """Everything the record keeps but the clock and playout numbers."""
    entries = [{k: v for k, v in e.items() if k not in ("t", "p")} for e in recorder.entries]
    return recorder.dumps().split("\n", 1)[0] + json.dumps(entries, ensure_ascii=False)


def test_without_a_tier_everything_is_kept() -> None:
    recorder, _ = call(None)
    words = stored_words(recorder)
    assert "070-123 45 67" in words and "4111 1111 1111 1111" in words and "anna.berg@example.com" in words
    assert any("ulaw" in e for e in recorder.entries)


@pytest.mark.parametrize("storage", ["redacted", "metadata_only"])
def test_nothing_the_caller_said_is_stored_yet_the_tool_gets_it_whole(storage: str) -> None:
    observed: list = []
    recorder, returned = call(RecordPrivacy(storage, ("en", "sv")), observed)
    words = stored_words(recorder)
    for secret in SECRETS:
        assert secret not in words, secret
    assert not any("ulaw" in e for e in recorder.entries)  # no caller audio, though record_caller_audio asked for it
    assert recorder.header["privacy"]["storage"] == storage
    (run,) = [a for a in returned if isinstance(a, C.RunTool)]
    assert json.loads(run.arguments) == json.loads(PAY_ARGS)  # the shell runs the tool with what the caller said
    tap, summarizer = observed
    events = json.dumps(tap.take(), ensure_ascii=False)
    summary = json.dumps(summarizer.summary("test").__repr__())
    for secret in SECRETS:
        assert secret not in events and secret not in summary, secret
    if storage == "redacted":
        assert "my number is [phone], and my personnummer [personnummer]" in words
        assert "[card]" in words and "[email]" in words
        assert "my number is [phone], and my personnummer [personnummer]" in events
    else:
        assert "my number is" not in words and "my number is" not in events


def test_a_redacted_record_replays_identically() -> None:
    recorder, _ = call(RecordPrivacy("redacted", ("en", "sv")))
    header = json.loads(json.dumps(recorder.header))
    entries = json.loads(json.dumps(recorder.entries))
    result = replay(header, entries)
    assert result.identical, result.divergence
    assert result.statistics["tools_run"] == 1
    assert RecordPrivacy.from_header(header).replayable


def test_metadata_only_records_say_they_cannot_be_replayed() -> None:
    recorder, _ = call(RecordPrivacy("metadata_only"))
    assert not RecordPrivacy.from_header(json.loads(json.dumps(recorder.header))).replayable


def test_no_audio_keeps_the_words_but_not_the_callers_audio() -> None:
    recorder, _ = call(RecordPrivacy("no_audio"))
    assert "070-123 45 67" in stored_words(recorder)
    assert not any("ulaw" in e for e in recorder.entries)


def test_deltas_are_masked_but_a_backchannel_oh_is_kept() -> None:
    privacy = RecordPrivacy("redacted")
    assert privacy.delta("my number is 070") == "my number is NNN"
    assert privacy.delta(" seven one two") == " N N N"
    assert privacy.delta("oh okay") == "oh okay"
    assert privacy.delta(privacy.delta("call 070 now, a@b.se")) == privacy.delta("call 070 now, a@b.se")


def test_tool_arguments_with_numbers_as_numbers() -> None:
    privacy = RecordPrivacy("redacted")
    assert json.loads(privacy.json_text('{"card": 4111111111111111, "qty": 2, "note": "ring 0701234567"}')) == \
        {"card": "[card]", "qty": 2, "note": "ring [phone]"}
    assert privacy.json_text("not json 0701234567") == "not json [phone]"


# --- Gemini Live: the same tiers over its members (transcription pieces, function-call args, inlineData) ---------------

def gemini(**members) -> str:
    return json.dumps(members)


AGENT_AUDIO = gemini(serverContent={"modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000",
                                                                              "data": "AAAAAAAAAAAAAAAA"}}]}})


def gemini_call(privacy: RecordPrivacy | None, observed: list | None = None) -> tuple[CallRecorder, list]:
    """The same call on Gemini: the caller's number and card arrive as transcription pieces (Gemini sends no
    completed transcript), the model calls pay with them as an object, and reads the receipt address back."""
    from voicecore.gemini.driver import driver_for_agent

    recorder = recording(driver_for_agent(agent(), "CA2", model="gemini-2.5-flash", greet=False), privacy, observed)
    returned: list = []
    recorder.start(0)
    recorder.on_model_event(gemini(setupComplete={}), 100 * MS, IDLE)
    recorder.on_caller_audio(b"\x11" * 160, 500 * MS)
    for i, piece in enumerate(["my number is 070", "-123 45 67, sju noll", " and my card 4111 1111", " 1111 1111"]):
        recorder.on_model_event(gemini(serverContent={"inputTranscription": {"text": piece}}), (3100 + 10 * i) * MS, IDLE)
    returned += recorder.on_model_event(gemini(toolCall={"functionCalls": [
        {"id": "fc_1", "name": "pay", "args": json.loads(PAY_ARGS)}]}), 3400 * MS, IDLE)
    returned += recorder.on_tool_result("fc_1", True, '{"paid": true, "receipt_to": "anna.berg@example.com"}', 3900 * MS)
    recorder.on_model_event(AGENT_AUDIO, 4300 * MS, IDLE)
    for piece in ["Paid. The receipt goes to anna", ".berg@example.com"]:
        recorder.on_model_event(gemini(serverContent={"outputTranscription": {"text": piece}}), 4310 * MS, IDLE)
    recorder.on_model_event(gemini(serverContent={"turnComplete": True}), 4500 * MS, IDLE)
    for t in range(4520, 6000, 20):
        returned += recorder.on_tick(t * MS, IDLE)
    return recorder, returned


def test_without_a_tier_a_gemini_call_keeps_everything() -> None:
    words = stored_words(gemini_call(None)[0])
    assert "4111 1111" in words and "070-123 45 67" in words and "anna.berg@example.com" in words


@pytest.mark.parametrize("storage", ["redacted", "metadata_only"])
def test_nothing_the_caller_said_on_gemini_is_stored_yet_the_tool_gets_it_whole(storage: str) -> None:
    observed: list = []
    recorder, returned = gemini_call(RecordPrivacy(storage, ("en", "sv")), observed)
    words = stored_words(recorder)
    # the card and the number each cut across two pieces, the args and the result
    for secret in (*SECRETS, "1111"):
        assert secret not in words, secret
    (run,) = [a for a in returned if isinstance(a, C.RunTool)]
    assert json.loads(run.arguments) == json.loads(PAY_ARGS)
    tap, summarizer = observed
    events = json.dumps(tap.take(), ensure_ascii=False)
    summary = json.dumps(summarizer.summary("test").__repr__())
    for secret in (*SECRETS, "1111"):
        assert secret not in events and secret not in summary, secret
    audio = [e["text"] for e in recorder.entries if e["k"] == "model" and "inlineData" in e["text"]]
    if storage == "redacted":
        assert "my number is NNN" in words and "the receipt goes to" in words.lower()
        assert audio == [AGENT_AUDIO]  # the agent's audio is kept under redacted, as it came
    else:
        assert "my number is" not in words and "receipt goes" not in words
        assert audio and all(json.loads(a)["serverContent"]["modelTurn"]["parts"][0]["inlineData"]["data"] == ""
                             for a in audio)


def test_a_redacted_gemini_record_replays_identically() -> None:
    recorder, _ = gemini_call(RecordPrivacy("redacted", ("en", "sv")))
    result = replay(json.loads(json.dumps(recorder.header)), json.loads(json.dumps(recorder.entries)))
    assert result.identical, result.divergence


def test_an_event_with_no_field_of_words_is_kept_as_it_came_and_an_escaped_key_is_still_read() -> None:
    privacy = RecordPrivacy("redacted")
    assert privacy.model_event(AGENT_AUDIO) is AGENT_AUDIO
    escaped = '{"serverContent":{"inputTranscription":{"\\u0074ext":"call 070 123"}}}'
    assert json.loads(privacy.model_event(escaped))["serverContent"]["inputTranscription"]["text"] == "call NNN NNN"
    assert privacy.model_event("not json 0701234567") == "not json [phone]"


def test_the_agents_gemini_words_are_redacted_not_masked_as_the_driver_quotes_them_back() -> None:
    privacy = RecordPrivacy("redacted")
    said = gemini(serverContent={"outputTranscription": {"text": "Our Basic plan costs 199 kronor"}})
    assert privacy.model_event(said) == said  # a replay's note of what the caller heard quotes "199" as the call did
    phone = gemini(serverContent={"outputTranscription": {"text": "Call us on 070-123 45 67."}})
    assert "[phone]" in privacy.model_event(phone)
    heard = gemini(serverContent={"inputTranscription": {"text": "it costs 199?"}})
    assert "it costs NNN?" in privacy.model_event(heard)
