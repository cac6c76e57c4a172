"""The realtime-model simulator's scripted caller turns (SimConfig.turns, voicecore.sim.model.turns):
rule answers, function calls driven by the session's declared tools (the full event sequence, GA and
beta, validated against the `openai` package's types and parsed by voicecore.realtime.events), preambles,
repeated calls, the answer after a function's output, cancel mid-arguments, determinism, the real
server's refusal of an unknown call_id; and the example agents' caller clips, recognised by content
through server VAD."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_model_sim import VAD, Harness, caller_turn, types

from voicecore.realtime import events as ev
from voicecore.sim import audio_clips
from voicecore.sim.model import ModelSession, SimConfig, SimTurn
from voicecore.sim.model.clips import caller_signature

BOOK_ARGS = '{"service": "cleaning", "date": "2026-11-26", "time": "10:00"}'
BOOK = SimTurn(when="book a cleaning", call="book_appointment", arguments=BOOK_ARGS, then="You're booked for ten.")
HOURS = SimTurn(when="opening hours", answer="We are open from eight to five.")
PERSON = SimTurn(when="talk to a person", call="transfer_call", answer="I can't transfer you right now.")
BOOK_WORDS = "I would like to book a cleaning tomorrow at ten."

TOOLS = [
    {"type": "function", "name": "book_appointment", "description": "Book a visit.",
     "parameters": {"type": "object", "properties": {"service": {"type": "string"}}}},
    {"type": "function", "name": "end_call", "description": "End the call.", "parameters": {"type": "object"}},
]

CALL_GA = [
    "response.created",
    "response.output_item.added",
    "conversation.item.added",
    *["response.function_call_arguments.delta"] * 8,  # 62 characters, 8 at a time
    "rate_limits.updated",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "conversation.item.done",
    "response.done",
]
CALL_BETA = [t.replace("conversation.item.added", "conversation.item.created") for t in CALL_GA if
             t != "conversation.item.done"]


def harness(naming: str = "ga", turns: tuple[SimTurn, ...] = (BOOK, HOURS, PERSON), tools: list[Any] | None = None,
            **changes: Any) -> Harness:
    h = Harness(SimConfig(first_delta_latency_ms=100, turns=turns, **changes), naming=naming)
    session: dict[str, Any] = {"tools": TOOLS if tools is None else tools}
    if naming == "ga":
        session["type"] = "realtime"
    out = h.send(json.dumps({"type": "session.update", "session": session}))
    assert types(out) == ["session.updated"] and out[0]["session"]["tools"] == session["tools"]
    return h


def say(h: Harness, words: str) -> None:
    out = h.send(ev.conversation_item_create_user_text(words))
    assert out and out[0]["item"]["role"] == "user", out


def respond(h: Harness, **options: Any) -> list[dict[str, Any]]:
    return h.send(ev.response_create(**options)) + h.run_all()


def transcript_of(events: list[dict[str, Any]]) -> str:
    return next(e["transcript"] for e in events if e["type"].endswith("audio_transcript.done"))


def parsed(events: list[dict[str, Any]], kind: type) -> list[Any]:
    found = [ev.parse_server_event(json.dumps(e)) for e in events]
    return [p for p in found if isinstance(p, kind)]


# ---- a function call ----------------------------------------------------------------------------------


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_function_call_response_sequence(naming: str) -> None:
    h = harness(naming)
    say(h, BOOK_WORDS)
    out = respond(h)
    assert types(out) == (CALL_GA if naming == "ga" else CALL_BETA)
    record = h.session.record.responses[0]
    assert (record.function_call, record.arguments, record.arguments_sent) == ("book_appointment", BOOK_ARGS,
                                                                                BOOK_ARGS)
    assert record.rule == 0 and record.audio == b"" and record.clip_name == "" and record.status == "completed"
    assert record.call_id is not None and record.call_id.startswith("call_") and len(record.call_id) == 21
    added = out[1]["item"]
    assert added == {"id": record.call_item_id, "object": "realtime.item", "type": "function_call",
                     "status": "in_progress", "call_id": record.call_id, "name": "book_appointment", "arguments": ""}
    assert out[1]["output_index"] == 0 and record.item_id == record.call_item_id
    deltas = [e for e in out if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(d["delta"] for d in deltas) == BOOK_ARGS
    assert all(len(d["delta"]) <= 8 for d in deltas) and len(deltas[0]["delta"]) == 8
    assert {(d["response_id"], d["item_id"], d["call_id"], d["output_index"]) for d in deltas} == {
        (record.response_id, record.call_item_id, record.call_id, 0)}
    # the arguments stream over a few tens of ms after the first-delta latency, like audio deltas
    sent_at = [t for t, e in h.log if e["type"] == "response.function_call_arguments.delta"]
    assert sent_at == sorted(sent_at) and len(set(sent_at)) > 1 and 100 < sent_at[0] and sent_at[-1] - sent_at[0] < 100
    (done,) = parsed(out, ev.FunctionCallArgumentsDone)
    assert done == ev.FunctionCallArgumentsDone(record.response_id, record.call_item_id, record.call_id,
                                                "book_appointment" if naming == "ga" else None, BOOK_ARGS)
    final = out[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["output_tokens"] > 0
    assert final["output"] == [{**added, "status": "completed", "arguments": BOOK_ARGS}]
    assert parsed(out, ev.ResponseDone) == [ev.ResponseDone(record.response_id, "completed", None)]
    # the item is in the conversation as the server shows it
    got = h.send(json.dumps({"type": "conversation.item.retrieve", "item_id": record.call_item_id}))
    assert got[0]["item"]["arguments"] == BOOK_ARGS and got[0]["item"]["status"] == "completed"


def test_undeclared_function_falls_back_to_the_answer() -> None:
    h = harness()  # transfer_call is not among the session's tools
    say(h, "Can I talk to a person, please?")
    out = respond(h)
    record = h.session.record.responses[0]
    assert record.function_call is None and record.rule == 2
    assert transcript_of(out) == "I can't transfer you right now." == record.text
    assert not any("function_call" in t for t in types(out)) and record.audio
    # declared by the response.create itself: now it calls (a response may carry its own tools)
    h2 = harness()
    say(h2, "Can I talk to a person, please?")
    h2.send(json.dumps({"type": "response.create", "response": {"tools": [
        {"type": "function", "name": "transfer_call", "description": "t", "parameters": {}}]}}))
    h2.run_all()
    assert h2.session.record.responses[0].function_call == "transfer_call"
    # tool_choice "none": a real model calls nothing
    h3 = harness()
    say(h3, BOOK_WORDS)
    h3.send(json.dumps({"type": "response.create", "response": {"tool_choice": "none"}}))
    assert h3.session.record.responses[0].function_call is None


def test_answer_rule_speaks_its_line_once_per_caller_turn() -> None:
    h = harness()
    say(h, "What are your opening hours?")
    out = respond(h)
    record = h.session.record.responses[0]
    assert transcript_of(out) == "We are open from eight to five." and record.rule == 1
    assert record.clip_name == "agent_safe_line"  # the clip whose length fits the line (clips.fitting_clip)
    # the same caller turn again: the rule has answered it; the automatic behaviour speaks
    out = respond(h)
    assert transcript_of(out) == audio_clips.default_library().info("agent_basic_price").text
    assert h.session.record.responses[1].rule is None
    # a scripted prompt and a pinned clip keep today's behaviour, even when the words match
    say(h, "And your opening hours on Saturday?")
    out = respond(h, instructions='Say exactly: "Are you still there?"')
    assert transcript_of(out) == "Are you still there?" and h.session.record.responses[2].rule is None
    out = respond(h, metadata={"sim_clip": "agent_goodbye"})
    assert h.session.record.responses[3].rule is None and h.session.record.responses[3].clip_name == "agent_goodbye"
    # a retrieve-first instruction is not a script: the rule answers
    out = respond(h, instructions="Answer the caller briefly. Facts: open 8-17.")
    assert transcript_of(out) == "We are open from eight to five."


def test_no_rule_matches_means_the_automatic_choice() -> None:
    h = harness()
    say(h, "Do you sell bicycles?")
    out = respond(h)
    assert h.session.record.responses[0].rule is None
    assert transcript_of(out) == audio_clips.default_library().info("agent_question").text


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_preamble_and_call_in_one_response(naming: str) -> None:
    turn = SimTurn(when="book", call="book_appointment", arguments='{"service": "cleaning"}', preamble="Let me check.",
                   then="Done.")
    h = harness(naming, turns=(turn,))
    say(h, BOOK_WORDS)
    out = respond(h)
    record = h.session.record.responses[0]
    assert record.text == "Let me check." and record.audio and record.function_call == "book_appointment"
    assert transcript_of(out) == "Let me check."
    item_events = [e for e in out if e["type"] in ("response.output_item.added", "response.output_item.done")]
    assert [(e["type"].rsplit(".", 1)[1], e["output_index"], e["item"]["type"]) for e in item_events] == [
        ("added", 0, "message"), ("done", 0, "message"), ("added", 1, "function_call"), ("done", 1, "function_call")]
    # the whole preamble is spoken before the function_call item starts
    t = types(out)
    last_audio = max(i for i, x in enumerate(t) if x.endswith("audio.delta"))
    assert last_audio < t.index("response.function_call_arguments.delta")
    assert t.count("rate_limits.updated") == 1 and t[-1] == "response.done"
    final = out[-1]["response"]
    assert [(o["type"], o["status"]) for o in final["output"]] == [("message", "completed"),
                                                                   ("function_call", "completed")]
    assert final["output"][1]["id"] == record.call_item_id != record.item_id
    (done,) = parsed(out, ev.FunctionCallArgumentsDone)
    assert done.item_id == record.call_item_id and done.arguments == '{"service": "cleaning"}'
    assert {e["output_index"] for e in out if e["type"].startswith("response.function_call")} == {1}


# ---- after the function's output -----------------------------------------------------------------------


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_then_answers_after_the_output(naming: str) -> None:
    h = harness(naming)
    say(h, BOOK_WORDS)
    respond(h)
    call_id = h.session.record.responses[0].call_id
    assert call_id is not None
    out = h.send(ev.function_call_output(call_id, '{"booked": true, "reference": "B-1042"}'))
    assert out[0]["item"]["type"] == "function_call_output" and out[0]["item"]["call_id"] == call_id
    (output_record,) = h.session.record.function_call_outputs
    assert (output_record.call_id, output_record.output, output_record.known) == (
        call_id, '{"booked": true, "reference": "B-1042"}', True)
    out = respond(h)
    assert transcript_of(out) == "You're booked for ten." and h.session.record.responses[1].rule == 0
    assert h.session.record.responses[1].function_call is None
    # the follow-up is used once; the next response is the automatic one
    out = respond(h)
    assert h.session.record.responses[2].rule is None


def test_repeat_call_calls_again_with_the_same_arguments_before_answering() -> None:
    turn = SimTurn(when="book", call="book_appointment", arguments=BOOK_ARGS, then="Booked.", repeat_call=2)
    h = harness(turns=(turn,))
    say(h, BOOK_WORDS)
    call_ids = []
    for _ in range(3):
        respond(h)
        record = h.session.record.responses[-1]
        assert record.function_call == "book_appointment" and record.arguments == BOOK_ARGS
        call_ids.append(record.call_id)
        h.send(ev.function_call_output(record.call_id or "", '{"booked": true}'))
    assert len(set(call_ids)) == 3
    out = respond(h)
    assert transcript_of(out) == "Booked." and h.session.record.responses[-1].function_call is None
    assert [o.call_id for o in h.session.record.function_call_outputs] == call_ids


def test_a_new_caller_turn_before_the_output_is_answered_takes_over() -> None:
    h = harness()
    say(h, BOOK_WORDS)
    respond(h)
    h.send(ev.function_call_output(h.session.record.responses[0].call_id or "", "{}"))
    say(h, "What are your opening hours?")  # the caller spoke after the output came back
    out = respond(h)
    assert transcript_of(out) == "We are open from eight to five."


def test_dtmf_note_matches_a_rule() -> None:
    confirm = SimTurn(when="pressed the key 1", call="book_appointment", arguments=BOOK_ARGS, then="Booked.")
    h = harness(turns=(confirm,))
    say(h, "(The caller pressed the key 1.)")
    respond(h)
    assert h.session.record.responses[0].function_call == "book_appointment"


def test_voice_turn_through_server_vad_calls_the_function() -> None:
    """The caller clip's recognised words drive the rule; server VAD creates the response itself."""
    h = harness()
    h.send(json.dumps({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": VAD}}}}))
    h.append(caller_turn("caller_book"))
    h.run_all()
    (record,) = h.session.record.responses
    assert h.session.record.speech[0].caller_clip == "caller_book"
    assert record.function_call == "book_appointment" and record.status == "completed"


# ---- unknown call ids, cancel, failure -----------------------------------------------------------------


@pytest.mark.parametrize("naming", ["ga", "beta"])
def test_output_for_an_unknown_call_id_is_refused_like_the_real_server(naming: str) -> None:
    h = harness(naming)
    out = h.send(ev.function_call_output("call_nope", "{}", event_id="f1"))
    assert types(out) == ["error"]
    error = out[0]["error"]
    assert (error["type"], error["code"], error["event_id"]) == ("invalid_request_error", "invalid_tool_call_id", "f1")
    assert error["message"] == "Tool call ID 'call_nope' not found in conversation."
    assert [(o.call_id, o.known) for o in h.session.record.function_call_outputs] == [("call_nope", False)]
    # a function_call item the client created itself makes its call_id known
    h.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "function_call", "call_id": "call_mine", "name": "end_call", "arguments": "{}"}}))
    assert types(h.send(ev.function_call_output("call_mine", "{}")))[0] != "error"
    # without rules the simulator accepts any call_id, as it always has
    plain = Harness()
    assert types(plain.send(ev.function_call_output("call_nope", "{}")))[0] != "error"


@pytest.mark.parametrize("late", [0, 2])
def test_cancel_mid_arguments(late: int) -> None:
    h = harness(late_deltas_after_cancel=late)
    say(h, BOOK_WORDS)
    out = h.send(ev.response_create())
    while "response.function_call_arguments.delta" not in types(out):
        out += h.run_until(h.session.next_wakeup_ms() or h.now)
    out += h.send(ev.response_cancel())
    record = h.session.record.responses[0]
    assert record.status == "cancelled" and record.reason == "client_cancelled"
    assert 0 < len(record.arguments_sent) < len(BOOK_ARGS) and BOOK_ARGS.startswith(record.arguments_sent)
    (done,) = parsed(out, ev.FunctionCallArgumentsDone)
    assert done.arguments == record.arguments_sent  # arguments.done also comes on cancel, with what was sent
    final = out[-1]["response"]
    assert final["status"] == "cancelled" and final["status_details"]["reason"] == "client_cancelled"
    assert [(o["type"], o["status"], o["arguments"]) for o in final["output"]] == [
        ("function_call", "incomplete", record.arguments_sent)]
    assert h.run_all() == [] and h.session.active_response_id is None


def test_cancel_during_the_preamble_makes_no_call() -> None:
    turn = SimTurn(when="book", call="book_appointment", arguments=BOOK_ARGS, preamble="Let me check.")
    h = harness(turns=(turn,))
    say(h, BOOK_WORDS)
    out = h.send(ev.response_create())
    while not any(t.endswith("audio.delta") for t in types(out)):
        out += h.run_until(h.session.next_wakeup_ms() or h.now)
    out = h.send(ev.response_cancel())
    assert not any("function_call" in t for t in types(out))
    assert [o["type"] for o in out[-1]["response"]["output"]] == ["message"]
    assert out[-1]["response"]["status"] == "cancelled"


def test_a_failed_response_does_not_use_the_rule_up() -> None:
    h = harness(fail_next_response=True)
    say(h, BOOK_WORDS)
    out = respond(h)
    assert out[-1]["response"]["status"] == "failed" and h.session.record.responses[0].function_call is None
    respond(h)
    assert h.session.record.responses[1].function_call == "book_appointment"


# ---- determinism ------------------------------------------------------------------------------------------


def test_same_seed_same_texts() -> None:
    def run(seed: int) -> list[str]:
        turn = SimTurn(when="book", call="book_appointment", arguments=BOOK_ARGS, preamble="Let me check.",
                       then="Booked.", repeat_call=1)
        config = SimConfig(turns=(turn, HOURS), argument_delta_chars=5)
        session = ModelSession(config, 3, seed, naming="ga")
        texts = session.events_to_send()
        now = 0

        def send(text: str) -> None:
            session.receive_client_event(text, now)
            texts.extend(session.events_to_send())

        def run_all() -> None:
            nonlocal now
            while (wake := session.next_wakeup_ms()) is not None:
                now = max(now, wake)
                session.advance(now)
                texts.extend(session.events_to_send())

        update = json.loads(ev.session_update("ga", "Help.", "alloy", None, None))
        update["session"]["tools"] = TOOLS
        send(json.dumps(update))
        send(ev.conversation_item_create_user_text(BOOK_WORDS))
        for _ in range(3):
            send(ev.response_create())
            run_all()
            send(ev.function_call_output(session.record.responses[-1].call_id or "call_x", "{}"))
        return texts

    first = run(11)
    assert first == run(11)
    assert first != run(12)
    deltas = [json.loads(t)["delta"] for t in first if '"response.function_call_arguments.delta"' in t]
    assert deltas and all(len(d) <= 5 for d in deltas)


# ---- configuration ----------------------------------------------------------------------------------------


def test_sim_turn_from_dict_and_validation() -> None:
    turn = SimTurn.from_dict({"when": "book", "call": "book_appointment", "arguments": {"service": "cleaning"},
                              "preamble": "One moment.", "then": "Done.", "repeat_call": 1})
    assert turn == SimTurn("book", "", "book_appointment", '{"service": "cleaning"}', "One moment.", "Done.", 1)
    assert SimTurn.from_dict({"when": "hours", "answer": "Eight to five."}).answer == "Eight to five."
    for bad in ({"answer": "x"}, {"when": "x", "colour": "red"}, {"when": ""}, {"when": "x", "arguments": "{nope"},
                {"when": "x", "arguments": "[1]"}, {"when": "x", "repeat_call": -1}, {"when": "x", "answer": 5}):
        with pytest.raises(ValueError):
            SimTurn.from_dict(bad)
    assert SimConfig(turns=[turn]).turns == (turn,)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SimConfig(turns=({"when": "x"},))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SimConfig(argument_delta_chars=0)


# ---- the example agents' caller clips --------------------------------------------------------------------

NEW_CALLER_CLIPS = {
    "caller_hours": "What are your opening hours?",
    "caller_book": "I would like to book a cleaning tomorrow at ten.",
    "caller_yes": "Yes, please.",
    "caller_no": "No, thank you.",
    "caller_person": "Can I talk to a person, please?",
    "caller_sv_price": "Vad kostar Premium per månad?",
    "caller_sv_callback": "Ring mig imorgon på plus 46 70 123 45 67.",
    "caller_sv_sms": "Kan ni skicka priset som sms?",
    "caller_sv_ja": "Ja, gärna.",
    "caller_sv_nej": "Nej tack.",
    "caller_sv_bye": "Tack, hej då.",
    "caller_ready": "Yes, I am ready to start.",
    "caller_experience": "I have worked with Python for five years.",
    "caller_done": "That is all from me, thank you.",
}


def test_new_caller_clips_are_indexed_with_their_words() -> None:
    index = {clip.name: clip for clip in audio_clips.clip_index()}
    for name, text in NEW_CALLER_CLIPS.items():
        clip = index[name]
        assert (clip.role, clip.kind, clip.text) == ("caller", "caller", text)
        assert len(audio_clips.load_clip(name)) // 8 == clip.duration_ms > 400


@pytest.mark.parametrize("name", sorted(NEW_CALLER_CLIPS))
def test_server_vad_recognises_each_new_caller_clip(name: str) -> None:
    h = Harness(turn_detection=VAD)
    out = h.append(caller_turn(name, lead_ms=400, tail_ms=900)) + h.run_all()
    assert types(out).count("input_audio_buffer.speech_started") == 1, name  # one turn, not split at a pause
    (speech,) = h.session.record.speech
    assert (speech.caller_clip, speech.transcript) == (name, NEW_CALLER_CLIPS[name])
    transcription = next(e for e in out if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert transcription["transcript"] == NEW_CALLER_CLIPS[name]


def test_caller_clip_signatures_are_distinct() -> None:
    library = audio_clips.default_library()
    callers = library.by_role("caller")
    probes = {clip.name: caller_signature(library.audio[clip.name], 200)[0] for clip in callers}
    assert len(set(probes.values())) == len(probes)
    for clip in callers:
        for other, probe in probes.items():
            if other != clip.name:
                assert probe not in library.audio[clip.name], (other, clip.name)

