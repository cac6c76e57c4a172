"""The Gemini Live driver (voicecore/gemini/driver.py) against the Gemini simulator's core, deterministic: one
fake clock in ms drives both; the driver's client messages go into the simulated connection and its server
messages back into the driver, as the model worker's shell and the simulator's shell would carry them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voicecore import timing
from voicecore.agent.load import default_agent_dir, load_agent
from voicecore.call import core
from voicecore.call.controller import HangUp, RunTool
from voicecore.g711 import linear_to_ulaw
from voicecore.gemini import protocol as gp
from voicecore.gemini.driver import GeminiDriver, driver_for_agent, driver_from_header, vendor_of
from voicecore.sim.gemini_core import Answer, GeminiConnection, GeminiSimConfig, SessionStore, ToolRule

MS = 1_000_000
ANSWER_MS = 400
SILENT = core.Playout(0, 0, 0, 0, 0, 0)


def tone_24k(ms: int) -> bytes:
    t = np.arange(gp.OUTPUT_SAMPLE_RATE_HZ * ms // 1000) / gp.OUTPUT_SAMPLE_RATE_HZ
    return (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()


ANSWERS = (Answer("Hello there, how can I help?", tone_24k(ANSWER_MS)), Answer("It costs ten euros.", tone_24k(ANSWER_MS)))


def caller_frames(ms: int, loud: bool) -> bytes:
    t = np.arange(timing.SAMPLE_RATE_HZ * ms // 1000) / timing.SAMPLE_RATE_HZ
    samples = (np.sin(2 * np.pi * 1000 * t) * (8000 if loud else 0)).astype(np.int16)  # speech-band
    return bytes(linear_to_ulaw(samples))


class Harness:
    """One call: the driver, the simulated connection (a new one after each reconnect), and what came out."""

    def __init__(self, driver: GeminiDriver, config: GeminiSimConfig | None = None) -> None:
        self.driver = driver
        self.config = config or GeminiSimConfig(speed_factor=4.0, first_chunk_ms=0)
        self.store = SessionStore()
        self.now_ms = 0
        self.actions: list[object] = []
        self.connections: list[GeminiConnection] = []
        self.sent: list[str] = []
        self.playout = SILENT  # nothing played: every tag stays audible
        self.delivering = False
        self.connect()

    def connect(self) -> None:
        self.connections.append(GeminiConnection(self.config, ANSWERS, self.store, api_key="test-key", now_ms=self.now_ms))

    @property
    def sim(self) -> GeminiConnection:
        return self.connections[-1]

    def apply(self, actions: list[object]) -> None:
        self.actions.extend(actions)
        for action in actions:
            if isinstance(action, core.SendToModel):
                self.sent.append(action.text)
                self.sim.receive(action.text, self.now_ms)
        self.deliver()

    def deliver(self) -> None:
        """The simulator's messages to the driver in the order it sent them, as a WebSocket carries them (one
        delivery at a time: what the driver's answers make the simulator send waits behind what it sent before)."""
        if self.delivering:
            return
        self.delivering = True
        try:
            while True:
                self.sim.advance(self.now_ms)
                texts = self.sim.take_outgoing()
                if not texts:
                    break
                for text in texts:
                    self.apply(self.driver.on_model_event(text, self.now_ms * MS, self.playout))
        finally:
            self.delivering = False

    def run(self, ms: int, caller: bytes | None = None) -> None:
        """``ms`` of time in 20 ms steps; ``caller``: mu-law sent as it goes (one frame a step)."""
        for step in range(ms // timing.FRAME_MS):
            self.now_ms += timing.FRAME_MS
            if caller is not None:
                frame = caller[step * timing.FRAME_BYTES:(step + 1) * timing.FRAME_BYTES]
                if frame:
                    self.apply(self.driver.on_caller_audio(frame, self.now_ms * MS))
            self.deliver()
            if self.driver.wants_ticks:
                self.apply(self.driver.on_tick(self.now_ms * MS, self.playout))

    def of(self, kind: type) -> list:
        return [a for a in self.actions if isinstance(a, kind)]


def new_driver(**args) -> GeminiDriver:
    defaults = {"model": "gemini-2.5-flash-native-audio-preview-09-2025", "instructions": "Be brief.",
                "voice": "Kore", "greeting": "Hello, thanks for calling."}
    return GeminiDriver("CAgemini", **{**defaults, **args})


def test_setup_names_the_agent_and_the_greeting_waits_for_setup_complete():
    h = Harness(new_driver(tools=[{"type": "function", "name": "end_call", "description": "End the call.",
                                   "parameters": {"type": "object", "properties": {}}}]))
    actions = h.driver.start(0)
    setup = json.loads(actions[0].text)["setup"]
    assert len(actions) == 1  # the greeting is not sent before setupComplete
    assert setup["model"] == "models/gemini-2.5-flash-native-audio-preview-09-2025"
    assert setup["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert setup["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"] == "Kore"
    assert setup["tools"][0]["functionDeclarations"][0]["name"] == "end_call"
    assert "inputAudioTranscription" in setup and "outputAudioTranscription" in setup
    assert "realtimeInputConfig" not in setup  # automatic activity detection: the server's VAD
    assert setup["sessionResumption"] == {}
    h.apply(actions)
    assert h.driver.configured
    assert json.loads(h.sent[-1])["clientContent"]["turns"][0]["parts"][0]["text"] == 'Say exactly: "Hello, thanks for calling."'


def test_an_openai_voice_is_left_to_the_vendor_default():
    setup = json.loads(new_driver(voice="alloy").setup_message())["setup"]
    assert "speechConfig" not in setup["generationConfig"]


def test_a_turn_is_one_tag_resampled_to_whole_mu_law_frames_and_ended():
    h = Harness(new_driver())
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS)  # the simulator sends 4x faster than real time
    opened = h.of(core.OpenTag)
    assert [a.tag for a in opened] == [1]
    writes = h.of(core.WriteFrames)
    assert writes and all(w.tag == 1 and len(w.audio) % timing.FRAME_BYTES == 0 for w in writes)
    ended = h.of(core.EndTag)
    assert len(ended) == 1 and ended[0].tag == 1
    # 400 ms at 24 kHz is 400 ms at 8 kHz: 20 frames (the resampler's 10 ms delay is flushed at the end)
    assert ended[0].total_frames == ANSWER_MS // timing.FRAME_MS + 1
    assert sum(len(w.audio) for w in writes) == ended[0].total_frames * timing.FRAME_BYTES
    assert not h.driver.awaiting_model()


def test_caller_audio_goes_to_the_model_as_16_khz_pcm():
    driver = new_driver()
    actions = driver.on_caller_audio(caller_frames(20, loud=True), 0)
    message = json.loads(actions[0].text)["realtimeInput"]["audio"]
    assert message["mimeType"] == "audio/pcm;rate=16000"
    import base64
    assert len(base64.b64decode(message["data"])) == 320 * 2  # 20 ms at 16 kHz, 16-bit


def test_each_turn_gets_its_own_tag_and_interrupted_cuts_it_dropping_late_chunks():
    h = Harness(new_driver(), GeminiSimConfig(speed_factor=0.5, late_chunks_after_interrupt=2, first_chunk_ms=0))
    h.apply(h.driver.start(0))
    h.run(100)  # the greeting is being generated (at half real time: it is still going)
    assert [a.tag for a in h.of(core.OpenTag)] == [1]
    before = len(h.of(core.WriteFrames))
    h.run(200, caller_frames(200, loud=True))  # the caller talks over it
    cancels = h.of(core.CancelTag)
    assert [c.tag for c in cancels] == [1]
    assert h.sim.record.interrupts == 1 and h.sim.record.late_chunks_sent == 2
    assert h.driver.exchange.late_chunks == 2
    cancel_index = h.actions.index(cancels[0])
    assert not [a for a in h.actions[cancel_index:] if isinstance(a, core.WriteFrames) and a.tag == 1]
    assert before > 0
    h.run(1500, caller_frames(1500, loud=False))  # the caller stops: the model answers under a new tag
    assert [a.tag for a in h.of(core.OpenTag)] == [1, 2]
    assert [a.tag for a in h.of(core.EndTag)] == [2]
    # no client event of the OpenAI protocol ever reaches the Gemini server
    assert not any('"type"' in text and "response." in text for text in h.sent)
    assert h.sim.close is None


def test_a_finished_answer_still_playing_is_cut_when_the_caller_ends_a_turn():
    h = Harness(new_driver())
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS)  # generated and ended; nothing played yet (SILENT playout): it is audible
    assert h.of(core.EndTag) and not h.of(core.CancelTag)
    h.run(200, caller_frames(200, loud=True))
    h.run(600, caller_frames(600, loud=False))
    assert [c.tag for c in h.of(core.CancelTag)] == [1]  # before the answer to this turn opened its tag
    cancel = h.actions.index(h.of(core.CancelTag)[0])
    second = h.actions.index([a for a in h.of(core.OpenTag) if a.tag == 2][0])
    assert cancel < second


def test_tool_call_runs_through_the_tool_path_and_the_result_goes_back_as_tool_response():
    agent = load_agent(default_agent_dir())
    driver = driver_for_agent(agent, "CAtool", model="gemini-2.5-flash")
    assert [t["name"] for t in driver.tools] == ["end_call"]
    h = Harness(driver, GeminiSimConfig(tool_rules=(ToolRule("end_call", {}, on_turn=2),)))
    h.apply(driver.start(0))
    h.run(ANSWER_MS * 2)
    h.run(200, caller_frames(200, loud=True))
    h.run(600, caller_frames(600, loud=False))
    # (the greeting is the session's first turn) end_call has no tool: the flow answers it at once, and the goodbye line is asked for
    assert h.sim.record.tool_calls and h.sim.record.tool_responses
    call_id, name, response = h.sim.record.tool_responses[0]
    assert name == "end_call" and response["ok"] is True
    assert response["instruction"].startswith("Say exactly: ")  # the goodbye line: the model's next turn
    h.run(ANSWER_MS * 2)
    assert not h.of(HangUp)  # the goodbye was generated, and it has not played yet
    goodbye = h.of(core.EndTag)[-1]
    h.playout = core.Playout(goodbye.tag, goodbye.total_frames, h.now_ms * MS, goodbye.tag, goodbye.total_frames, 0)
    h.run(40)
    assert h.of(HangUp) == [HangUp("goodbye")] and h.driver.ended


def test_a_function_with_a_tool_is_run_with_run_tool_and_answered_on_its_result():
    tools = [{"type": "function", "name": "price", "description": "The price.", "parameters": {"type": "object", "properties": {}}}]
    driver = new_driver(tools=tools, gate_turns=True)

    class Flow:
        def start(self):
            from voicecore.call.flow import Wait
            return Wait()

        def answer(self):
            from voicecore.call.flow import Answer
            return Answer("numbers")

        def on_tool_call(self, name, arguments):
            from voicecore.call.flow import ToolPlan
            return ToolPlan(name, arguments, writes=False)

        def on_tool_result(self, name, arguments, ok, output):
            from voicecore.call.flow import ToolOutcome
            return ToolOutcome(output, facts=output)

    driver.flow = Flow()
    h = Harness(driver, GeminiSimConfig(tool_rules=(ToolRule("price", {"item": "tea"}, on_turn=2),)))
    h.apply(driver.start(0))
    h.run(ANSWER_MS)
    h.run(200, caller_frames(200, loud=True))
    h.run(600, caller_frames(600, loud=False))
    runs = h.of(RunTool)
    assert len(runs) == 1 and runs[0].name == "price" and json.loads(runs[0].arguments) == {"item": "tea"}
    assert driver.awaiting_model()
    turns_before = h.sim.record.turns_started
    h.apply(driver.on_tool_result(runs[0].call_id, True, '{"price": 10}', h.now_ms * MS))
    assert h.sim.record.tool_responses == [(runs[0].call_id, "price", {"price": 10})]
    assert h.sim.record.turns_started == turns_before + 1  # the model answers with the result
    h.run(ANSWER_MS)
    answer = h.of(core.OpenGate)[-1]  # grounded in the result: its numbers may be said
    assert (answer.policy, answer.facts) == ("numbers", '{"price": 10}')


def test_a_cancelled_tool_call_is_not_answered():
    driver = new_driver()
    driver.tool_calls["fc-1"] = ("price", "{}")
    driver.on_model_event('{"toolCallCancellation":{"ids":["fc-1"]}}', 0, SILENT)
    assert driver.on_tool_result("fc-1", True, "{}", 0) == []
    assert driver.counts.tool_calls_cancelled == 1


def test_go_away_moves_the_session_to_a_new_connection_with_its_handle():
    config = GeminiSimConfig(connection_limit_ms=3_000, go_away_notice_ms=2_500, first_chunk_ms=0)
    h = Harness(new_driver(), config)
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS)
    handle = h.driver.handle
    assert handle is not None
    h.run(200)
    assert h.driver.go_away and h.driver.reconnect_due(h.now_ms * MS)  # at a pause: now
    h.connect()
    actions = h.driver.reopen(h.now_ms * MS)
    assert json.loads(actions[0].text)["setup"]["sessionResumption"] == {"handle": h.driver.handle}
    h.apply(actions)
    assert h.sim.record.resumed and h.sim.close is None
    assert not h.driver.go_away  # the new connection's clock
    assert h.driver.counts.resumed == 1
    # the conversation goes on: the next caller turn is answered under the next tag
    h.run(200, caller_frames(200, loud=True))
    h.run(600, caller_frames(600, loud=False))
    assert [a.tag for a in h.of(core.OpenTag)] == [1, 2]


def test_a_handle_is_kept_while_the_server_says_the_session_is_not_resumable():
    h = Harness(new_driver())
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS)
    handle, handles = h.driver.handle, h.driver.counts.handles
    assert handle is not None
    # the simulator, as the vendor, says so when a turn begins (voicecore/sim/gemini_core.py _not_resumable)
    h.driver.on_model_event('{"sessionResumptionUpdate":{"resumable":false}}', h.now_ms * MS, SILENT)
    assert h.driver.handle == handle and h.driver.counts.handles == handles  # resuming goes back to the last good one
    h.run(200, caller_frames(200, loud=True))
    h.run(600, caller_frames(600, loud=False))
    h.run(ANSWER_MS)
    assert h.driver.handle != handle and h.driver.counts.handles == handles + 1  # the next answer complete: a new one


def test_go_away_waits_for_the_turn_being_generated_until_near_the_deadline():
    driver = new_driver()
    driver.on_model_event('{"setupComplete":{}}', 0, SILENT)
    driver.on_model_event(json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": gp.OUTPUT_AUDIO_MIME, "data": "AAAAAA=="}}]}}}), 0, SILENT)
    driver.on_model_event('{"goAway":{"timeLeft":"10s"}}', 0, SILENT)
    assert not driver.reconnect_due(1_000 * MS)
    assert driver.reconnect_due(8_000 * MS)


def test_go_away_waits_for_the_answer_owed_to_what_the_caller_just_said():
    """goAway while the caller speaks: the session does not move until their utterance has been answered (the
    old connection's answer would be lost with it, and the new one never heard the question)."""
    driver = new_driver()
    driver.on_model_event('{"setupComplete":{}}', 0, SILENT)
    driver.reply_owed = False  # the greeting was answered long ago
    driver.on_model_event('{"voiceActivity":{"voiceActivityType":"ACTIVITY_START"}}', 0, SILENT)
    driver.on_model_event('{"goAway":{"timeLeft":"10s"}}', 100 * MS, SILENT)
    assert not driver.reconnect_due(200 * MS)  # speaking
    driver.on_model_event('{"serverContent":{"inputTranscription":{"text":"What time is it?"}}}', 900 * MS, SILENT)
    driver.on_model_event('{"voiceActivity":{"voiceActivityType":"ACTIVITY_END"}}', 1_000 * MS, SILENT)
    assert not driver.reconnect_due(1_000 * MS)  # stopped, the answer not begun
    driver.on_model_event(json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": gp.OUTPUT_AUDIO_MIME, "data": "AAAAAA=="}}]}}}), 1_200 * MS, SILENT)
    driver.on_model_event('{"serverContent":{"turnComplete":true}}', 1_300 * MS, SILENT)
    assert driver.reconnect_due(1_300 * MS)  # answered: a pause
    assert driver.reconnect_due(8_000 * MS)


def test_a_lost_connection_ends_the_turn_where_it_is_and_owes_no_tool_results():
    driver = new_driver()
    driver.start(0)
    driver.on_model_event('{"setupComplete":{}}', 0, SILENT)
    actions = driver.on_model_event(json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": gp.OUTPUT_AUDIO_MIME, "data": "AAAAAA=="}}]}}}), 0, SILENT)
    assert any(isinstance(a, core.OpenTag) for a in actions)
    driver.tool_calls["fc"] = ("x", "{}")
    lost = driver.on_model_lost(5 * MS, "closed_1011")
    from voicecore.call.controller import PlayFallback
    # the short last frame padded, the tag ended where it is, and the caller (owed the rest) hears the hold line
    assert [type(a) for a in lost] == [core.WriteFrames, core.EndTag, PlayFallback]
    assert driver.on_tool_result("fc", True, "{}", 0) == []


@pytest.mark.parametrize("text", ["not json", "[]", '{"serverContent":{"modelTurn":{"parts":"x"}}}', "{}"])
def test_bad_server_messages_are_counted_never_raised(text):
    driver = new_driver()
    assert driver.on_model_event(text, 0, SILENT) == []
    assert driver.counts.malformed == 1


def test_the_record_header_rebuilds_the_same_driver():
    driver = new_driver(greeting="Hi.")
    again = driver_from_header(json.loads(json.dumps(driver.record_header())))
    assert again.setup_message() == driver.setup_message() and again.greeting == "Hi."


@pytest.mark.parametrize(("model", "vendor", "expected"), [
    ("gemini-2.5-flash", "", "gemini"), ("models/gemini-live-2.5", "", "gemini"), ("gpt-realtime", "", "openai"),
    ("my-proxy-model", "gemini", "gemini")])
def test_the_vendor_follows_the_model_name_unless_named(model, vendor, expected):
    assert vendor_of(model, vendor) == expected


def test_the_servers_voice_activity_cuts_a_finished_answer_as_it_plays():
    h = Harness(new_driver())
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS)  # generated and ended, still audible (nothing played)
    h.run(40, caller_frames(40, loud=True))
    assert [c.tag for c in h.of(core.CancelTag)] == [1]  # at ACTIVITY_START, not at the end of the caller's turn
    assert h.driver.counts.caller_took_floor == 1 and h.sim._speaking


def test_without_voice_activity_the_callers_finished_turn_cuts_what_still_plays():
    driver = new_driver()
    driver.on_model_event('{"setupComplete":{}}', 0, SILENT)
    audio = json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": gp.OUTPUT_AUDIO_MIME, "data": "AAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}]}}})
    driver.on_model_event(audio, 0, SILENT)
    ended = driver.on_model_event('{"serverContent":{"turnComplete":true}}', 0, SILENT)
    assert [type(a) for a in ended][-1] is core.EndTag
    cut = driver.on_model_event('{"serverContent":{"inputTranscription":{"text":"wait"}}}', 5 * MS, SILENT)
    assert [type(a) for a in cut] == [core.CancelTag]
    assert driver.exchange.words == ["wait"]


def test_an_a_law_call_is_converted_at_the_resampler_and_padded_in_a_law():
    from voicecore import g711
    h = Harness(new_driver(audio_format="pcma"))
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS)
    writes = h.of(core.WriteFrames)
    mu_law = Harness(new_driver())
    mu_law.apply(mu_law.driver.start(0))
    mu_law.run(ANSWER_MS)
    expected = b"".join(w.audio for w in mu_law.of(core.WriteFrames))
    got = b"".join(w.audio for w in writes)
    assert len(got) == len(expected)
    assert g711.to_ulaw(got[:-timing.FRAME_BYTES], "pcma") != got[:-timing.FRAME_BYTES]  # A-law on the wire
    assert driver_from_header(h.driver.record_header()).audio_format == "pcma"
    frame = caller_frames(20, loud=True)
    a_law = g711.from_ulaw(frame, "pcma")
    # the caller's A-law reaches the model as its mu-law would (G.711 A-law <-> mu-law is not lossless)
    assert h.driver.on_caller_audio(a_law, 0)[0].text == new_driver().on_caller_audio(g711.to_ulaw(a_law, "pcma"), 0)[0].text


def test_the_demos_reading_of_the_simulator_matches_the_frames_the_driver_wrote():
    """voicecore/sim/gemini_records.py resamples each turn as the driver does: the call report matches the
    carrier's frames to the turns byte for byte (stale and overlapping audio are judged by it)."""
    from voicecore.sim.gemini_records import session_record

    h = Harness(new_driver(), GeminiSimConfig(speed_factor=0.5, first_chunk_ms=0))
    h.apply(h.driver.start(0))
    h.run(200)
    h.run(200, caller_frames(200, loud=True))  # cuts the greeting mid-generation
    h.run(1500, caller_frames(1500, loud=False))  # the answer, whole
    record = session_record(h.sim.record, 0)
    written: dict[int, bytes] = {}
    for w in h.of(core.WriteFrames):
        written[w.tag] = written.get(w.tag, b"") + w.audio
    cut, whole = record.responses
    assert cut.status == "cancelled" and whole.status == "completed"
    assert written[1] == cut.audio[:len(written[1])]  # what the driver wrote of the cut turn, as sent
    padded = whole.audio + b"\xff" * (-len(whole.audio) % timing.FRAME_BYTES)
    assert written[2] == padded
    assert [s.caller_kind for s in record.speech] == ["caller"]


def seen_events(*kinds: type) -> type:
    """A record consumer class that keeps the events of ``kinds`` a RecordReader hands it, in order."""
    from voicecore.call.record_reader import RecordConsumer

    class Seen(RecordConsumer):
        __slots__ = ("events", "awaiting_audio")

        def __init__(self) -> None:
            super().__init__()
            self.events: list[object] = []
            self.awaiting_audio: set[str] = set()

        def event_handlers(self):
            return {kind: lambda event, at_ms: self.events.append(event) for kind in kinds}

    return Seen


def test_a_gemini_record_is_read_as_the_driver_kept_the_turns():
    """The record reader gives observers and the call store the same turns, words and ids as the driver."""
    from voicecore.call.record import CallRecorder
    from voicecore.call.record_reader import RecordReader
    from voicecore.realtime import events as rt

    Seen = seen_events(rt.ResponseCreated, rt.ResponseDone, rt.SpeechStarted, rt.InputTranscriptionCompleted,
                       rt.TranscriptDone)

    recorder = CallRecorder(new_driver())
    seen = Seen()
    recorder.observer = RecordReader(seen).feed
    h = Harness(recorder.driver)
    h.driver = recorder  # every input through the recorder, as the model worker does it
    h.apply(recorder.start(0))
    h.run(ANSWER_MS)
    h.run(200, caller_frames(200, loud=True))
    h.run(600, caller_frames(600, loud=False))
    kinds = [type(e).__name__ for e in seen.events]
    assert kinds == ["ResponseCreated", "TranscriptDone", "ResponseDone", "SpeechStarted",
                     "InputTranscriptionCompleted", "ResponseCreated"]
    assert [e.response_id for e in seen.events if isinstance(e, rt.ResponseCreated)] == \
        [r for r in recorder.driver.core.responses]
    assert seen.events[1].transcript == "Hello, thanks for calling."  # the greeting, said as written
    assert seen.events[4].transcript == "(caller turn 2)"


def test_a_caller_waiting_on_a_dropped_model_hears_the_hold_line_then_the_apology():
    from voicecore.call.controller import PlayFallback

    driver = new_driver(failure={"after_ms": 3_000, "hold_every_ms": 0})
    driver.start(0)
    driver.on_model_event('{"setupComplete":{}}', 0, SILENT)
    driver.on_model_event(json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": gp.OUTPUT_AUDIO_MIME, "data": "AAAAAA=="}}]}}}), 0, SILENT)  # an answer is coming
    lost = driver.on_model_lost(100 * MS, "closed_1011")
    assert PlayFallback("hold") in lost  # the answer was cut off: the caller waits
    assert driver.wants_ticks and driver.on_tick(1_000 * MS, SILENT) == []  # said once (hold_every_ms 0)
    gave_up = driver.on_tick(3_200 * MS, SILENT)
    # what still plays of the cut answer is cut (SILENT: nothing played yet), then the apology and the hang-up
    assert gave_up == [core.CancelTag(1, 3_200 * MS), PlayFallback("apology_hangup"),
                       HangUp("model_unreachable", after_line=True)]
    assert driver.ended and not driver.wants_ticks


def test_a_planned_move_to_a_new_connection_is_no_failure():
    driver = new_driver()
    driver.start(0)
    driver.on_model_event('{"setupComplete":{}}', 0, SILENT)
    reopened = driver.reopen(50 * MS)  # goAway: no on_model_lost before it
    assert [type(a) for a in reopened] == [core.SendToModel] and not driver.spell.failing


def test_an_answer_a_dropped_connection_cut_off_is_asked_for_again_on_the_next_one():
    from voicecore.gemini.driver import ASK_AGAIN, ASK_AGAIN_TOOLS

    driver = new_driver()
    driver.start(0)
    driver.on_model_event('{"setupComplete":{}}', 0, SILENT)
    driver.on_model_event(json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": gp.OUTPUT_AUDIO_MIME, "data": "AAAAAA=="}}]}}}), 0, SILENT)  # an answer is coming
    driver.on_model_lost(100 * MS, "closed_1011")
    driver.reopen(600 * MS)
    sent = [a.text for a in driver.on_model_event('{"setupComplete":{}}', 700 * MS, SILENT)
            if isinstance(a, core.SendToModel)]
    (content,) = [json.loads(t)["clientContent"] for t in sent if t.startswith('{"clientContent"')]
    assert content["turnComplete"] is True and content["turns"][0]["parts"][0]["text"] == ASK_AGAIN
    assert driver.counts.asked_again == 1
    # a quiet drop (nothing cut, nothing owed) asks nothing; a lost tool result asks for the call again
    quiet = new_driver()
    quiet.start(0)
    quiet.on_model_event('{"setupComplete":{}}', 0, SILENT)
    quiet.on_model_lost(100 * MS, "closed_1011")
    quiet.reopen(600 * MS)
    assert not any('"clientContent"' in a.text for a in quiet.on_model_event('{"setupComplete":{}}', 700 * MS, SILENT)
                   if isinstance(a, core.SendToModel)) and quiet.counts.asked_again == 0
    owed = new_driver()
    owed.start(0)
    owed.on_model_event('{"setupComplete":{}}', 0, SILENT)
    owed.tool_calls["fc"] = ("price", "{}")
    owed.on_model_lost(100 * MS, "closed_1011")
    owed.reopen(600 * MS)
    texts = [a.text for a in owed.on_model_event('{"setupComplete":{}}', 700 * MS, SILENT) if isinstance(a, core.SendToModel)]
    assert any(ASK_AGAIN_TOOLS in t for t in texts)
