"""The controller's failure handling (docs/explanation/failure-and-standby.md#the-vendor-fails): the shipped hold
line for a caller waiting on a model that is gone or failing, a failed request asked again after a pause, and the
failure policy (after N failed responses or T seconds without a model socket: the shipped apology, then a transfer
or a hang-up)."""

from __future__ import annotations

import json

from test_controller import IDLE, MS, created, delta, ev, sent

from voicecore.call import controller as C
from voicecore.call import flow as flows


def failed_done(rid, code="rate_limit_exceeded"):
    return ev(type="response.done", response={"id": rid, "status": "failed",
                                              "status_details": {"type": "failed", "error": {"type": "requests", "code": code}}})


def error_event(code="rate_limit_exceeded"):
    return ev(type="error", event_id="e1", error={"type": "requests", "code": code, "message": "Rate limit reached"})


def lines(actions):
    return [a.kind for a in actions if isinstance(a, C.PlayFallback)]


def endings(actions):
    return [a for a in actions if isinstance(a, (C.HangUp, C.Transfer))]


def controller(**config):
    c = C.CallController("CA1", config=C.ControllerConfig(**config))
    c.start(0)
    return c


def test_a_drop_while_the_caller_waits_plays_the_hold_line_once_and_the_request_goes_again_on_reopen():
    c = controller()  # the greeting was asked for: the caller waits on it
    out = c.on_model_lost(100 * MS, "closed_1011")
    assert lines(out) == ["hold"]
    assert lines(c.on_model_lost(400 * MS, "ConnectionRefusedError")) == []  # one hold line per failure spell
    assert lines(c.on_tick(600 * MS, IDLE)) == []
    out = c.reopen(800 * MS)
    (request,) = [e for e in sent(out) if e["type"] == "response.create"]
    assert request["response"]["metadata"]["vc_prompt"] == "greeting"
    assert c.stats.model_lost == 2 and c.stats.hold_lines == 1


def test_no_hold_line_for_a_caller_who_waits_on_nothing():
    c = controller()
    (tag,) = [a.tag for a in c.on_model_event(created("r1", 1), 100 * MS, IDLE) if isinstance(a, C.OpenTag)]
    c.on_model_event(delta("r1", 1600), 110 * MS, IDLE)
    c.on_model_event(ev(type="response.output_audio.done", response_id="r1", item_id="item_a"), 120 * MS, IDLE)
    c.on_model_event(ev(type="response.done", response={"id": "r1", "status": "completed"}), 130 * MS, IDLE)
    played = C.Playout(tag, 10, 400 * MS, tag, 10, 400 * MS)
    c.on_tick(400 * MS, played)  # the greeting played; the question is asked next
    c.on_model_event(created("r2", 2), 450 * MS, played)
    c.on_model_event(delta("r2", 1600), 460 * MS, played)
    c.on_model_event(ev(type="response.output_audio.done", response_id="r2", item_id="item_b"), 470 * MS, played)
    c.on_model_event(ev(type="response.done", response={"id": "r2", "status": "completed"}), 480 * MS, played)
    done = C.Playout(tag + 1, 10, 900 * MS, tag + 1, 10, 900 * MS)
    c.on_tick(900 * MS, done)
    assert not c.awaiting_model()
    assert lines(c.on_model_lost(1000 * MS, "closed_1011")) == []


def test_a_rate_limited_request_is_asked_again_after_a_pause():
    c = controller(vendor_retry_ms=500)
    out = c.on_model_event(error_event(), 100 * MS, IDLE)
    assert lines(out) == ["hold"] and sent(out) == []
    assert sent(c.on_tick(400 * MS, IDLE)) == []  # the pause
    (again,) = sent(c.on_tick(620 * MS, IDLE))
    assert again["type"] == "response.create" and again["response"]["metadata"]["vc_prompt"] == "greeting"
    assert c.stats.vendor_failures == 1


def test_a_failed_response_is_asked_again_and_audio_ends_the_failure_spell():
    c = controller(vendor_retry_ms=100)
    c.on_model_event(created("r1", 1), 100 * MS, IDLE)
    out = c.on_model_event(failed_done("r1", "server_error"), 150 * MS, IDLE)
    assert lines(out) == ["hold"]
    (again,) = sent(c.on_tick(300 * MS, IDLE))
    assert again["response"]["metadata"]["vc_prompt"] == "greeting"
    req = int(again["response"]["metadata"]["vc_req"])
    c.on_model_event(created("r2", req), 350 * MS, IDLE)
    c.on_model_event(delta("r2", 1600), 360 * MS, IDLE)
    assert c.spell.failed_in_row == 0 and c.spell.hold_due(360 * MS)


def test_n_failed_responses_in_a_row_end_the_call_with_the_apology_and_a_transfer():
    c = C.CallController("CA1", flow=flows.ScriptedFlow(), config=C.ControllerConfig(failure_after_failures=3, vendor_retry_ms=10))
    c.start(0)
    t = 100
    out: list = []
    for _ in range(3):
        out = c.on_model_event(error_event("server_error"), t * MS, IDLE)
        t += 1000
        c.on_tick(t * MS, IDLE)
    assert c.ended
    assert lines(out) == ["apology_transfer"]
    (ending,) = endings(out)
    assert isinstance(ending, C.Transfer) and ending.after_line and ending.target == flows.DEFAULT_OPERATOR
    assert c.stats.failure_policy == 1 and c.stats.end_reason == "transfer_vendor_failures"


def test_t_seconds_without_a_model_socket_end_the_call_with_a_hang_up_when_the_policy_says_so():
    c = controller(failure_after_ms=10_000, failure_transfer=False)
    c.on_model_lost(1_000 * MS, "closed_1011")
    assert not endings(c.on_tick(10_900 * MS, IDLE))
    out = c.on_tick(11_000 * MS, IDLE)
    assert lines(out) == ["apology_hangup"]
    (ending,) = endings(out)
    assert isinstance(ending, C.HangUp) and ending.after_line and ending.reason == "model_unreachable"
    assert c.on_tick(12_000 * MS, IDLE) == []  # ended: nothing more


def test_a_reconnect_stops_the_t_seconds_clock():
    c = controller(failure_after_ms=10_000)
    c.on_model_lost(1_000 * MS, "closed_1011")
    c.reopen(2_000 * MS)
    assert not endings(c.on_tick(20_000 * MS, IDLE)) or c.stats.end_reason != "model_unreachable"


def test_a_fatal_loss_goes_to_the_failure_policy_at_once_even_before_the_session_started():
    c = C.CallController("CA1", config=C.ControllerConfig(failure_transfer=False))
    assert c.awaiting_model()  # the caller waits for the greeting
    out = c.on_model_lost(50 * MS, "breaker_open", fatal=True)
    assert lines(out) == ["apology_hangup"] and isinstance(endings(out)[0], C.HangUp)


def test_a_call_whose_model_never_answered_the_phone_hears_the_hold_line():
    c = C.CallController("CA1")
    assert lines(c.on_model_lost(200 * MS, "ConnectionRefusedError")) == ["hold"]


def test_the_lost_input_is_recorded_and_replays_to_the_same_actions():
    from voicecore.call.record import CallRecorder, loads
    from voicecore.replay import replay

    rec = CallRecorder(C.CallController("CA1", config=C.ControllerConfig(failure_transfer=False)))
    rec.start(0)
    rec.on_model_lost(100 * MS, "closed_1011")
    rec.on_tick(11_000 * MS, IDLE)
    header, entries = loads(rec.dumps())
    inputs = [e for e in entries if e["k"] not in ("out", "note")]
    assert [e["k"] for e in inputs] == ["start", "lost", "tick"]
    assert inputs[1]["reason"] == "closed_1011"
    result = replay(header, entries)
    assert result.divergence is None and result.inputs == 3
    json.dumps(entries)  # JSON-able, as the record file is


# --- the spine keeps the same rules (voicecore/call/failures.py) -------------------------------------------
from voicecore.call.spine import SpineDriver  # noqa: E402


def spine(**failure):
    d = SpineDriver("CA1", greet=False, failure=failure or None)
    d.start(0)
    return d


def generating(d, at_ms=100):
    d.on_model_event(ev(type="response.created", response={"id": "r1"}), at_ms * MS, IDLE)
    d.on_model_event(delta("r1", 1600), (at_ms + 10) * MS, IDLE)


def test_a_healthy_idle_spine_call_wants_no_ticks():
    d = spine()
    assert not d.wants_ticks
    generating(d)
    assert d.wants_ticks  # a response is being generated: the vendor owes the next event


def test_the_spine_plays_the_hold_line_when_the_vendor_falls_silent_mid_answer():
    d = spine()
    generating(d)
    assert lines(d.on_tick(1_000 * MS, IDLE)) == []
    assert lines(d.on_tick(1_110 * MS, IDLE)) == ["hold"]  # 1 s without an event while an answer is owed
    assert lines(d.on_tick(2_500 * MS, IDLE)) == []  # not again at once ...
    assert lines(d.on_tick(4_100 * MS, IDLE)) == []
    assert lines(d.on_tick(4_110 * MS, IDLE)) == ["hold"]  # ... but after hold_every_ms of waiting on
    d.on_model_event(delta("r1", 1600), 4_600 * MS, IDLE)  # the audio flows again: the spell is over
    assert d.spell.hold_due(4_601 * MS)


def test_the_hold_line_once_per_spell_when_hold_every_is_zero():
    d = spine(hold_every_ms=0)
    generating(d)
    assert lines(d.on_tick(1_110 * MS, IDLE)) == ["hold"]
    assert lines(d.on_tick(30_000 * MS, IDLE)) == []


def test_the_spine_asks_again_after_a_rate_limit_and_gives_up_after_three():
    d = spine(vendor_retry_ms=100, after_failures=3)
    out = d.on_model_event(failed_done("r9"), 100 * MS, IDLE)
    assert lines(out) == ["hold"] and d.wants_ticks
    assert sent(d.on_tick(150 * MS, IDLE)) == []  # the pause
    assert [e["type"] for e in sent(d.on_tick(210 * MS, IDLE))] == ["response.create"]
    d.on_model_event(failed_done("r10"), 300 * MS, IDLE)
    out = d.on_model_event(failed_done("r11"), 600 * MS, IDLE)
    assert lines(out) == ["apology_hangup"] and isinstance(endings(out)[0], C.HangUp) and endings(out)[0].after_line
    assert d.ended and d.on_tick(5_000 * MS, IDLE) == []


def test_a_drop_that_cut_an_answer_off_asks_for_one_on_the_new_session():
    d = spine()
    generating(d)
    out = d.on_model_lost(200 * MS, "closed_1011")
    assert lines(out) == ["hold"]
    d.reopen(500 * MS)
    assert [e["type"] for e in sent(d.on_tick(520 * MS, IDLE))] == ["response.create"]


def test_the_spines_failure_policy_is_in_its_record_and_replays():
    from voicecore.call.record import CallRecorder, loads
    from voicecore.replay import replay

    rec = CallRecorder(SpineDriver("CA1", greet=False, failure={"after_ms": 2000}))
    rec.start(0)
    rec.on_model_lost(100 * MS, "closed_1011")
    rec.on_tick(2_200 * MS, IDLE)
    header, entries = loads(rec.dumps())
    assert header["failure"]["after_ms"] == 2000
    assert any(e["k"] == "out" and e["a"]["type"] == "HangUp" for e in entries)
    assert replay(header, entries).divergence is None


def test_a_failed_request_waits_longer_after_each_failure_but_never_more_than_the_cap():
    from voicecore.call.failures import FailurePolicy, FailureSpell

    spell = FailureSpell(FailurePolicy(vendor_retry_ms=500, vendor_retry_max_ms=2000))
    waits = []
    now = 0
    for _ in range(5):
        spell.vendor_failed(now)
        waits.append((spell.not_before_ns - now) // MS)
        now = spell.not_before_ns  # the retry goes when the pause is over, and fails again
    assert waits == [500, 1000, 2000, 2000, 2000]
    assert spell.failed_in_row == 5


def test_one_refused_request_counts_once_toward_the_failure_policy():
    """Realtime answers a refused response.create with an `error` and a failed `response.done`; a response
    the vendor starts by itself inside the pause (server VAD) fails too. One attempt, one failure."""
    from voicecore.call.failures import GAVE_UP_VENDOR, FailurePolicy, FailureSpell

    spell = FailureSpell(FailurePolicy(after_failures=3, vendor_retry_ms=500, vendor_retry_max_ms=2000))
    spell.vendor_failed(0)  # the error event
    spell.vendor_failed(2 * MS)  # the same response's response.done (failed)
    spell.vendor_failed(300 * MS)  # a server-VAD response inside the pause
    assert spell.failed_in_row == 1
    assert spell.not_before_ns == 500 * MS  # the pause is not stretched either
    spell.vendor_failed(500 * MS)  # the retry
    assert spell.failed_in_row == 2
    assert spell.verdict(600 * MS, awaiting=True, waiting_on_vendor=True, caller_speaking=False) != GAVE_UP_VENDOR
    spell.vendor_failed(1500 * MS)
    assert spell.verdict(1500 * MS, awaiting=True, waiting_on_vendor=True, caller_speaking=False) == GAVE_UP_VENDOR


def test_a_spine_record_keeps_only_the_ticks_that_decided_something():
    from voicecore.call.record import CallRecorder, loads
    from voicecore.replay import replay

    rec = CallRecorder(SpineDriver("CA1", greet=False))
    rec.start(0)
    rec.on_model_event(ev(type="response.created", response={"id": "r1"}), 100 * MS, IDLE)
    rec.on_model_event(delta("r1", 1600), 110 * MS, IDLE)
    for t in range(120, 1400, 20):  # the vendor falls silent mid-answer: one tick plays the hold line
        rec.on_tick(t * MS, IDLE)
    header, entries = loads(rec.dumps())
    ticks = [e for e in entries if e["k"] == "tick"]
    assert [e["t"] for e in ticks] == [1120 * MS]
    assert replay(header, entries).divergence is None
