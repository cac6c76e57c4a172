"""The in-call opt-out: the phrases in English and Swedish, and the controller's goodbye and hang-up."""

from __future__ import annotations

import json

import pytest

from voicecore.call import controller as C
from voicecore.outbound.opt_out import GOODBYES, OPT_OUT_PROMPT, find_opt_out, goodbye

MS = 1_000_000
IDLE = C.IDLE_PLAYOUT


@pytest.mark.parametrize("text, language", [
    ("Please STOP calling me!", "en"),
    ("Could you take me off your list, thanks", "en"),
    ("Don't call me again.", "en"),
    ("don\u2019t call me again", "en"),
    ("Ring inte mig igen.", "sv"),
    ("Snälla, ta bort mig från listan", "sv"),
    ("Sluta ringa!", "sv"),
])
def test_opt_out_phrases_are_found_whatever_the_case_and_punctuation(text, language):
    heard = find_opt_out(text)
    assert heard is not None and heard.language == language


@pytest.mark.parametrize("text", ["Hello?", "Yes, Tuesday is fine.", "Don't call me Bob.", "I'll call you back",
                                  "stopp", "Ring mig på tisdag", "the listing is wrong"])
def test_ordinary_answers_are_no_opt_out(text):
    assert find_opt_out(text) is None


def test_the_goodbye_is_in_the_callers_language_and_english_otherwise():
    assert goodbye("sv") == GOODBYES["sv"] and "Hej då" in goodbye("sv")
    assert goodbye("de") == GOODBYES["en"]


def _turn(c: C.CallController, words: str, t_ms: int) -> list:
    out = []
    out += c.on_model_event(json.dumps({"type": "input_audio_buffer.speech_started", "audio_start_ms": t_ms,
                                        "item_id": "u1"}), t_ms * MS, IDLE)
    out += c.on_model_event(json.dumps({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": t_ms + 1500,
                                        "item_id": "u1"}), (t_ms + 1500) * MS, IDLE)
    out += c.on_model_event(json.dumps({"type": "conversation.item.input_audio_transcription.completed",
                                        "item_id": "u1", "content_index": 0, "transcript": words}),
                            (t_ms + 1600) * MS, IDLE)
    for step in range(1, 10):  # within the watchdog: no retry of the request yet
        out += c.on_tick((t_ms + 1600 + 100 * step) * MS, IDLE)
    return [json.loads(a.text) for a in out if isinstance(a, C.SendToModel)]


def test_a_caller_asking_not_to_be_called_gets_the_goodbye_not_the_model():
    c = C.CallController("CA1", config=C.ControllerConfig(opt_out=True))
    c.start(0)
    c.inflight = None
    sent = _turn(c, "Ring inte mig igen, tack.", 1000)
    creates = [e for e in sent if e["type"] == "response.create"]
    assert len(creates) == 1
    response = creates[0]["response"]
    assert response["metadata"]["vc_prompt"] == OPT_OUT_PROMPT and GOODBYES["sv"] in response["instructions"]
    assert c.queued is None and c.inflight is not None and c.inflight.step.terminal


def test_an_ordinary_turn_is_answered_by_the_model_and_the_opt_out_is_off_unless_asked_for():
    for words, config in (("What time is my appointment?", C.ControllerConfig(opt_out=True)),
                          ("Stop calling me.", C.ControllerConfig())):
        c = C.CallController("CA1", config=config)
        c.start(0)
        c.inflight = None
        creates = [e for e in _turn(c, words, 1000) if e["type"] == "response.create"]
        assert len(creates) == 1 and creates[0]["response"]["metadata"].get("vc_prompt") != OPT_OUT_PROMPT


def test_only_a_call_the_node_placed_hears_an_opt_out():
    """An inbound caller saying "stop calling me" is answered as any turn: there is no callee number to list,
    and hanging up on them would be wrong."""
    from pathlib import Path

    from voicecore.agent.load import load_agent
    from voicecore.call.build import driver_for_config
    from voicecore.config import load_config

    receptionist = Path(__file__).resolve().parents[2] / "examples" / "receptionist"
    config = load_config({"VOICECORE_CALL_CONTROL": "turns", "VOICECORE_AGENT": str(receptionist)})
    agent = load_agent(receptionist)
    inbound = driver_for_config(config, agent, "CA" + "1" * 32)
    placed = driver_for_config(config, agent, "CA" + "2" * 32, placed=True)
    assert inbound.config.opt_out is False and placed.config.opt_out is True
