"""The receptionist's flow on Gemini Live, deterministic: the driver (voicecore/gemini/driver.py) against the
Gemini simulator's core, with the caller's clips played through the driver's resampler and recognised by the
simulator. Flow nodes (every node's functions declared at setup, a new node's messages as context) and
confirmations (nothing runs before the caller's yes; the controller's counts and lines)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from voicecore import timing
from voicecore.call import core
from voicecore.call.controller import RunTool
from voicecore.g711 import ulaw_to_linear
from voicecore.agent.load import load_agent
from voicecore.gemini import protocol as gp
from voicecore.gemini.driver import driver_for_agent
from voicecore.sim.audio_clips import default_library
from voicecore.sim.gemini_core import CallerPhrase, GeminiSimConfig, ToolRule, recognise_phrases

from test_gemini_driver import ANSWER_MS, MS, Harness, caller_frames

ROOT = Path(__file__).resolve().parents[2]
BOOKING = {"service": "cleaning", "date": "2026-11-26", "time": "10:00"}


def clip(name: str) -> bytes:
    return default_library().audio[name]


def phrases(*names: str) -> tuple[CallerPhrase, ...]:
    library = default_library()
    texts = {info.name: info.text for info in library.infos}
    return tuple(CallerPhrase(texts[n], ulaw_to_linear(clip(n)).astype("<i2").tobytes()) for n in names)


PHRASES = phrases("caller_book", "caller_yes", "caller_no", "caller_hours", "caller_person")


def receptionist_call(sid: str = "CArecept") -> Harness:
    agent = load_agent(ROOT / "examples" / "receptionist")
    driver = driver_for_agent(agent, sid, model="gemini-2.5-flash")
    config = GeminiSimConfig(caller_phrases=PHRASES,
                             tool_rules=(ToolRule("book_appointment", BOOKING, on_text="book a cleaning"),))
    h = Harness(driver, config)
    h.apply(driver.start(0))
    h.run(ANSWER_MS * 2)
    return h


def say(h: Harness, name: str) -> None:
    audio = clip(name)
    h.run(len(audio) // timing.FRAME_BYTES * timing.FRAME_MS, audio)
    h.run(700, caller_frames(700, loud=False))


def last_client_content(h: Harness) -> dict:
    """The newest clientContent the driver sent, other than its note of how much of a cut answer was heard."""
    return [json.loads(t)["clientContent"] for t in h.sent
            if t.startswith('{"clientContent"') and gp.HEARD_NOTE_PREFIX not in t][-1]


def ask_to_book(h: Harness) -> None:
    say(h, "caller_book")
    h.run(ANSWER_MS * 2)


def test_setup_declares_every_nodes_functions_and_the_first_nodes_instructions_with_the_gemini_voice():
    h = receptionist_call()
    setup = h.sim.record.setup
    names = [d["name"] for d in setup["tools"][0]["functionDeclarations"]]
    assert sorted(names) == ["book_appointment", "end_call", "transfer_to_person"]
    instruction = setup["systemInstruction"]["parts"][0]["text"]
    assert "Help the caller" in instruction and "The appointment is booked" not in instruction
    assert setup["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"] == "Aoede"


def test_the_simulator_recognises_a_callers_clip_through_the_drivers_resampler():
    h = receptionist_call()
    say(h, "caller_hours")
    say(h, "caller_yes")
    assert h.sim.record.transcripts == ["What are your opening hours?", "Yes, please."]


def test_recognition_finds_nothing_in_other_speech():
    tone = (np.sin(np.arange(16_000) / 3.0) * 8000).astype(np.int16)
    assert recognise_phrases(tone, PHRASES) == ""


def test_a_confirmed_booking_runs_only_after_the_yes_and_moves_the_flow_to_its_next_node():
    h = receptionist_call()
    ask_to_book(h)
    (call_id, name, response), = h.sim.record.tool_responses
    assert name == "book_appointment" and response["status"] == "awaiting_confirmation"
    assert 'Say exactly: "Shall I book a cleaning on' in response["instruction"]
    assert h.of(RunTool) == []  # nothing runs before the caller's yes
    assert h.driver.counts.actions_proposed == 1
    say(h, "caller_yes")
    runs = h.of(RunTool)
    assert len(runs) == 1 and runs[0].name == "book_appointment" and json.loads(runs[0].arguments) == BOOKING
    sent_before = len(h.sent)
    turns_before = h.sim.record.turns_started
    h.apply(h.driver.on_tool_result(runs[0].call_id, True, '{"booked": true, "reference": "B-1042"}', h.now_ms * MS))
    note, result = (json.loads(t)["clientContent"] for t in h.sent[sent_before:])
    assert note["turnComplete"] is False and "The appointment is booked" in note["turns"][0]["parts"][0]["text"]
    assert result["turnComplete"] is True
    text = result["turns"][0]["parts"][0]["text"]
    assert "B-1042" in text and 'Say exactly: "Is there anything else I can help you with?"' in text
    assert h.sim.record.turns_started == turns_before + 1  # the model answers the result
    assert h.driver.flow.node_name == "booked"
    stats = h.driver.statistics()
    assert (stats["actions_confirmed"], stats["transitions"], stats["tools_run"]) == (1, 1, 1)


def test_a_no_declines_the_booking_with_the_declined_line_and_runs_nothing():
    h = receptionist_call()
    ask_to_book(h)
    say(h, "caller_no")
    assert h.of(RunTool) == []
    ask = last_client_content(h)
    assert 'Say exactly: "All right, I haven\'t booked anything."' in ask["turns"][0]["parts"][0]["text"]
    assert h.driver.counts.actions_declined == 1 and h.driver.pending is None
    assert h.driver.flow.node_name == "reception"


def test_other_words_drop_the_action_and_the_model_answers_them():
    h = receptionist_call()
    ask_to_book(h)
    say(h, "caller_hours")
    assert h.of(RunTool) == [] and h.driver.counts.actions_declined == 1
    note = last_client_content(h)
    assert note["turnComplete"] is False and "caller_moved_on" in note["turns"][0]["parts"][0]["text"]


def test_no_answer_within_the_timeout_after_the_prompt_played_drops_it_with_the_timeout_line():
    h = receptionist_call()
    ask_to_book(h)
    prompt = h.driver.pending.response_id
    assert prompt
    h.playout = core.Playout(99, 0, h.now_ms * MS, 99, 0, 0)  # everything written has played
    h.run(7_000, caller_frames(7_000, loud=False))
    assert h.driver.pending is not None  # 8 s after it played: not yet
    h.run(1_200, caller_frames(1_200, loud=False))
    assert h.driver.pending is None and h.driver.counts.actions_timed_out == 1 and h.of(RunTool) == []
    content = last_client_content(h)
    assert content["turnComplete"] is True and "I didn't hear a yes" in content["turns"][0]["parts"][0]["text"]


def test_the_keypad_answers_a_confirmation_one_is_yes():
    h = receptionist_call()
    ask_to_book(h)
    h.apply(h.driver.on_dtmf("1", h.now_ms * MS))
    assert [r.name for r in h.of(RunTool)] == ["book_appointment"] and h.driver.counts.actions_confirmed == 1
    h2 = receptionist_call("CArecept2")
    ask_to_book(h2)
    h2.apply(h2.driver.on_dtmf("2", h2.now_ms * MS))
    assert h2.of(RunTool) == [] and h2.driver.counts.actions_declined == 1


def test_a_function_the_current_node_does_not_offer_is_refused_with_an_error_response():
    h = receptionist_call()
    node = h.driver.flow.spec.flow.nodes["reception"]
    object.__setattr__(node, "functions", ("transfer_to_person", "end_call"))
    ask_to_book(h)
    (_, name, response), = h.sim.record.tool_responses
    assert name == "book_appointment" and response["error"]["type"] == "unknown_function"
    assert h.of(RunTool) == [] and h.driver.counts.actions_proposed == 0


def test_a_rule_on_spoken_words_ignores_the_clients_text_turns():
    from voicecore.sim.gemini_core import GeminiConnection, SessionStore
    from test_gemini_driver import ANSWERS

    config = GeminiSimConfig(tool_rules=(ToolRule("end_call", {}, on_words="bye"),))
    connection = GeminiConnection(config, ANSWERS, SessionStore(), api_key="k", now_ms=0)
    connection.receive('{"setup":{"model":"models/gemini-2.5-flash"}}', 0)
    connection.receive('{"clientContent":{"turns":[{"role":"user","parts":[{"text":"Say exactly: \\"Goodbye!\\""}]}],'
                       '"turnComplete":true}}', 0)
    assert connection.record.tool_calls == [] and connection.record.turns_started == 1


def test_the_receptionists_scenario_gives_the_simulator_its_function_calls_answers_and_callers_phrases():
    from voicecore.agent.scenario import load_scenario
    from voicecore.sim.gemini_records import scenario_behaviour

    rules, answers, known = scenario_behaviour(load_scenario(ROOT / "examples" / "receptionist"))
    assert ("opening hours", "We are open Monday to Friday from 8 to 17, and on Saturday from 9 to 13.") in answers
    assert {(r.name, r.on_words) for r in rules} == {("book_appointment", "book a cleaning"),
                                                     ("transfer_to_person", "talk to a person"), ("end_call", "bye")}
    assert next(r for r in rules if r.name == "book_appointment").args == BOOKING
    texts = {p.text for p in known}
    assert {"Yes, please.", "No, thank you.", "I would like to book a cleaning tomorrow at ten."} <= texts
    assert all(p.kind == "noise" for p in known if not p.text)  # a cough is known by its sound, with no words
    assert {p.kind for p in known if p.text == "Mm-hmm."} == {"backchannel"}


def test_phrases_are_recognised_when_a_late_client_sends_seconds_at_once():
    """A model worker that fell behind sends the caller's audio in bursts: one message may end an utterance and
    begin the next; each is transcribed whole."""
    from voicecore.carriers.codec import EdgeTranscoder
    from voicecore.carriers.events import ENCODING_L16
    from voicecore.gemini import protocol as gp
    from voicecore.sim.gemini_core import GeminiConnection, SessionStore
    from test_gemini_driver import ANSWERS

    connection = GeminiConnection(GeminiSimConfig(caller_phrases=PHRASES), ANSWERS, SessionStore(), api_key="k", now_ms=0)
    connection.receive('{"setup":{"model":"models/gemini-2.5-flash"}}', 0)
    silence = bytes([0xFF]) * timing.FRAME_BYTES * 40
    stream = silence + clip("caller_hours") + silence + clip("caller_book") + silence
    stream += bytes([0xFF]) * (-len(stream) % timing.FRAME_BYTES)
    upsampler = EdgeTranscoder(ENCODING_L16, gp.INPUT_SAMPLE_RATE_HZ)
    pcm = b"".join(upsampler.from_ulaw(stream[i:i + timing.FRAME_BYTES]) for i in range(0, len(stream), timing.FRAME_BYTES))
    burst = 64 * 640  # 64 frames of 16 kHz PCM: what a worker behind by 1.28 s sends at once
    for i in range(0, len(pcm), burst):
        connection.receive(gp.realtime_audio(pcm[i:i + burst]), 0)
    assert connection.record.transcripts == ["What are your opening hours?", "I would like to book a cleaning tomorrow at ten."]


def test_a_text_turn_while_the_caller_speaks_neither_ends_nor_splits_their_utterance():
    """The gate's safe line (a clientContent turn) may be asked for while the caller talks: it is answered,
    the caller's speech talks over that answer (interrupted), and their activity and words go on whole."""
    from voicecore.carriers.codec import EdgeTranscoder
    from voicecore.carriers.events import ENCODING_L16
    from voicecore.gemini import protocol as gp
    from voicecore.sim.gemini_core import GeminiConnection, SessionStore
    from test_gemini_driver import ANSWERS

    connection = GeminiConnection(GeminiSimConfig(caller_phrases=PHRASES), ANSWERS, SessionStore(), api_key="k", now_ms=0)
    connection.receive('{"setup":{"model":"models/gemini-2.5-flash"}}', 0)
    stream = clip("caller_book") + bytes([0xFF]) * timing.FRAME_BYTES * 40
    stream += bytes([0xFF]) * (-len(stream) % timing.FRAME_BYTES)
    upsampler = EdgeTranscoder(ENCODING_L16, gp.INPUT_SAMPLE_RATE_HZ)
    frames = [upsampler.from_ulaw(stream[i:i + timing.FRAME_BYTES]) for i in range(0, len(stream), timing.FRAME_BYTES)]
    for n, frame in enumerate(frames):
        if n == 60:  # 1.2 s into the clip
            connection.receive(gp.client_content([("user", 'Say exactly: "I can\'t verify that."')]), n * 20)
        connection.receive(gp.realtime_audio(frame), n * 20)
    assert connection.record.transcripts == ["I would like to book a cleaning tomorrow at ten."]
    assert len(connection.record.caller_activity) == 1 and connection.record.turns_started == 2
    assert connection.record.turns[0].interrupted_ms is not None  # the caller talked over the text turn's answer


def test_the_same_booking_asked_again_within_the_window_is_not_run_twice():
    h = receptionist_call()
    ask_to_book(h)
    say(h, "caller_yes")
    (run,) = h.of(RunTool)
    h.apply(h.driver.on_tool_result(run.call_id, True, '{"booked": true, "reference": "B-1042"}', h.now_ms * MS))
    # the model calls it again with the same arguments (real models repeat themselves): its first result stands
    again = json.dumps({"toolCall": {"functionCalls": [{"id": "fc-again", "name": "book_appointment", "args": BOOKING}]}})
    sent_before = len(h.sent)
    h.apply(h.driver.on_model_event(again, h.now_ms * MS, h.playout))
    assert len(h.of(RunTool)) == 1 and h.driver.counts.duplicate_writes_suppressed == 1
    assert h.driver.pending is None  # not proposed to the caller again either
    (response,) = [json.loads(t)["toolResponse"] for t in h.sent[sent_before:] if t.startswith('{"toolResponse"')]
    (answer,) = response["functionResponses"]
    assert answer["id"] == "fc-again" and "B-1042" in json.dumps(answer["response"])
    # a failed write is not remembered: asked again, it runs again
    h2 = receptionist_call("CArecept2")
    ask_to_book(h2)
    say(h2, "caller_yes")
    (run2,) = h2.of(RunTool)
    h2.apply(h2.driver.on_tool_result(run2.call_id, False, '{"error": "busy"}', h2.now_ms * MS))
    assert h2.driver.writes.recent(run2.key, h2.now_ms * MS) is None


def test_the_declined_line_plays_though_it_cut_the_models_own_answer_to_the_no():
    """The model starts its own answer to the caller's "no" (Gemini takes the turns); the declined line, a text
    turn, cuts it at the server (`interrupted`). Under turn-taking by words that cut is the server's, not the
    caller's: the line that follows is a turn of its own, written and played, never taken for late audio."""
    h = receptionist_call()
    ask_to_book(h)
    say(h, "caller_no")
    h.run(ANSWER_MS * 2)
    assert h.sim.record.interrupts >= 1  # the text turn cut the model's own answer to the "no"
    line = h.sim.record.turns[-1]
    assert line.interrupted_ms is None and line.completed_ms is not None
    last = max(a.tag for a in h.of(core.OpenTag))
    assert [w for w in h.of(core.WriteFrames) if w.tag == last]
    assert last not in [c.tag for c in h.of(core.CancelTag)]
    assert h.driver.exchange.late_chunks == 0


def test_each_model_turn_is_gated_as_the_controller_gates_it_lines_by_their_script_answers_by_the_node():
    """The agent's [gate] on Gemini: prompts = "scripted", answers = "numbers" with its forbidden phrases;
    the answer after a tool's result may take numbers from it."""
    h = receptionist_call()
    forbidden = "guarantee\ndiagnosis"
    greeting, = h.of(core.OpenGate)
    assert (greeting.policy, greeting.script) == ("scripted", h.driver.greeting) and greeting.forbidden == forbidden
    say(h, "caller_hours")
    answer = h.of(core.OpenGate)[-1]
    assert (answer.policy, answer.script, answer.forbidden, answer.facts) == ("numbers", "", forbidden, "")
    ask_to_book(h)
    prompt = h.of(core.OpenGate)[-1]
    assert prompt.policy == "scripted" and prompt.script.startswith("Shall I book a cleaning on")
    say(h, "caller_yes")
    run, = h.of(RunTool)
    opened = len(h.of(core.OpenGate))
    h.apply(h.driver.on_tool_result(run.call_id, True, '{"booked": true, "reference": "B-1042"}', h.now_ms * MS))
    h.run(ANSWER_MS * 2)
    after, = h.of(core.OpenGate)[opened:]
    assert (after.policy, after.script) == ("scripted", "Is there anything else I can help you with?")
    # every turn that played had its gate: none was written ungated
    assert not [a for a in h.of(core.OpenTag) if not a.gated]



def test_the_models_own_answer_that_a_line_cuts_is_judged_as_an_answer_and_the_line_by_its_script():
    """The declined line is asked in the server message that begins the model's own answer to the "no": that
    answer was generated before the server had the ask, so it is not judged against the line's script (which
    would refuse it), and the line's own turn is."""
    h = receptionist_call()
    ask_to_book(h)
    say(h, "caller_no")
    h.run(ANSWER_MS * 2)
    own_answer, line = h.of(core.OpenGate)[-2:]
    assert (own_answer.policy, own_answer.script) == ("numbers", "")
    assert (line.policy, line.script) == ("scripted", "All right, I haven't booked anything.")
    assert line.tag == max(a.tag for a in h.of(core.OpenTag))


def test_a_confirmation_that_times_out_replays_from_its_record():
    """The tick that finds the prompt played gives no action but starts the timeout: the recorder keeps it
    (the driver says that tick changed it), so the replay times out at the same moment."""
    from voicecore.call.record import CallRecorder, loads
    from voicecore.replay import replay

    agent = load_agent(ROOT / "examples" / "receptionist")
    recorder = CallRecorder(driver_for_agent(agent, "CArecord", model="gemini-2.5-flash"))
    config = GeminiSimConfig(caller_phrases=PHRASES,
                             tool_rules=(ToolRule("book_appointment", BOOKING, on_text="book a cleaning"),))
    h = Harness(recorder.driver, config)
    h.driver = recorder  # every input through the recorder, as the model worker does it
    h.apply(recorder.start(0))
    h.run(ANSWER_MS * 2)
    ask_to_book(h)
    h.run(2_000, caller_frames(2_000, loud=False))
    h.playout = core.Playout(99, 0, h.now_ms * MS, 99, 0, 0)  # everything written has played
    h.run(9_000, caller_frames(9_000, loud=False))
    assert recorder.driver.counts.actions_timed_out == 1
    header, entries = loads(recorder.dumps())
    assert replay(header, entries).divergence is None


def test_the_simulator_answers_a_callers_words_with_the_scenarios_answer_and_other_turns_with_its_own():
    agent = load_agent(ROOT / "examples" / "receptionist")
    hours = "We are open Monday to Friday from 8 to 17, and on Saturday from 9 to 13."
    h = Harness(driver_for_agent(agent, "CAanswers", model="gemini-2.5-flash"),
                GeminiSimConfig(caller_phrases=PHRASES, answer_rules=(("opening hours", hours),)))
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS * 2)
    say(h, "caller_hours")
    h.run(ANSWER_MS * 2)
    assert h.sim.record.turns[-1].text == hours
    say(h, "caller_person")  # no rule for these words (nor a function call: no tool rules here)
    h.run(ANSWER_MS * 2)
    assert h.sim.record.turns[-1].text != hours


def test_late_audio_of_the_answer_a_line_cut_never_plays_as_the_lines_start():
    """The vendor may still send audio of the turn a text turn interrupted, after `interrupted` and before that
    turn's `turnComplete` ("interrupted > turn_complete"): it is the cut turn's, dropped; the line's tag holds
    the line's audio alone."""
    agent = load_agent(ROOT / "examples" / "receptionist")
    config = GeminiSimConfig(caller_phrases=PHRASES, late_chunks_after_interrupt=2,
                             tool_rules=(ToolRule("book_appointment", BOOKING, on_text="book a cleaning"),))
    h = Harness(driver_for_agent(agent, "CAlate", model="gemini-2.5-flash"), config)
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS * 2)
    ask_to_book(h)
    say(h, "caller_no")
    h.run(ANSWER_MS * 2)
    cut, line = h.sim.record.turns[-2:]
    assert cut.interrupted_ms is not None and cut.late_chunks == 2 and line.completed_ms is not None
    assert h.driver.exchange.late_chunks == 2
    last = max(a.tag for a in h.of(core.OpenTag))
    end, = [e for e in h.of(core.EndTag) if e.tag == last]
    line_frames = -(-len(line.pcm24) // 2 // 3 // 160)  # 24 kHz PCM16 -> 8 kHz, 20 ms frames
    assert abs(end.total_frames - line_frames) <= 1, (end.total_frames, line_frames)


def test_a_record_made_before_the_gate_followed_the_agent_replays_as_it_was_made():
    """A header without gate_turns (a record made before) builds a driver that gates every turn by the call's
    policy alone, as the driver that made it did; a new call's header names it."""
    from voicecore.gemini.driver import driver_from_header

    agent = load_agent(ROOT / "examples" / "receptionist")
    header = driver_for_agent(agent, "CAold", model="gemini-2.5-flash").record_header()
    assert header["args"]["gate_turns"] is True
    del header["args"]["gate_turns"]
    h = Harness(driver_from_header(header), GeminiSimConfig(caller_phrases=PHRASES))
    h.apply(h.driver.start(0))
    h.run(ANSWER_MS * 2)
    say(h, "caller_hours")
    h.run(ANSWER_MS * 2)
    assert h.of(core.OpenTag) and h.of(core.OpenGate) == []  # gate_policy "off": no turn gated
