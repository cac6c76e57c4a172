"""The drain, without processes: the gateway's pure Drain core on a fake clock (table-driven), the TwiML a
draining node answers (checked against the twilio package's own builder), and the drain file."""

from __future__ import annotations

import json
import os
from xml.etree import ElementTree

import pytest
from twilio.twiml.voice_response import VoiceResponse

from voicecore.drain import (DrainFileError, DrainRequest, DrainWatch, drain_path, parse_request,
                             read_request, request_drain)
from voicecore.timing import DRAIN_REATTACH_WAIT_MS, DRAIN_STREAM_WAIT_MS
from voicecore.carriers.twilio.webhook import twiml_redirect, twiml_reject
from workers.gateway.core import Drain, DrainStep

WAIT, END, STOP = DrainStep.WAIT, DrainStep.END_CALLS, DrainStep.STOP
DEADLINE_MS = 60_000  # every scenario's drain begins at t=1000 with this deadline

# Each scenario: (name, events). An event is (t_ms, what, argument, expected):
#   ("hook", call_sid, True|False)  a voice webhook: True = answered <Connect><Stream>, False = refused
#   ("start", call_sid, None)       the call's stream started with its valid token
#   ("drain", None, True|False)     the drain begins (True the first time)
#   ("step", calls_active, step)    the heartbeat's step with that many live calls
#   ("ended", [call_sid, ...], None) calls ended at the deadline whose carrier asks the re-attach step
#   ("reattach", call_sid, None)    that call's re-attach request was answered (<Hangup/>)
SCENARIOS = [
    ("not draining: calls are taken and the node never stops", [
        (0, "hook", "CA1", True), (10, "start", "CA1", None), (20, "step", 1, WAIT), (5000, "step", 0, WAIT),
    ]),
    ("idle node: stops at the first step", [
        (1000, "drain", None, True), (1000, "step", 0, STOP), (1150, "step", 0, WAIT),
    ]),
    ("new calls are refused while draining, and counted", [
        (1000, "drain", None, True), (1100, "hook", "CA2", False), (1200, "hook", "CA3", False),
        (1300, "step", 1, WAIT),
    ]),
    ("a live call keeps the node up; its end stops it", [
        (0, "hook", "CA1", True), (50, "start", "CA1", None), (1000, "drain", None, True), (1150, "step", 1, WAIT),
        (30_000, "step", 1, WAIT), (30_010, "step", 0, STOP), (30_160, "step", 0, WAIT),
    ]),
    ("a stream owed from before the drain keeps the node up until it starts and ends", [
        (900, "hook", "CA1", True), (1000, "drain", None, True), (1000, "step", 0, WAIT),
        (1400, "start", "CA1", None), (1450, "step", 1, WAIT), (9000, "step", 0, STOP),
    ]),
    ("an owed stream that never comes is waited for DRAIN_STREAM_WAIT_MS, no longer", [
        (900, "hook", "CA1", True), (1000, "drain", None, True),
        (900 + DRAIN_STREAM_WAIT_MS - 1, "step", 0, WAIT), (900 + DRAIN_STREAM_WAIT_MS, "step", 0, STOP),
    ]),
    ("a stream owed long ago (its caller hung up) does not delay a later drain", [
        (0, "hook", "CA1", True), (1000 + DRAIN_STREAM_WAIT_MS, "drain", None, True),
        (1000 + DRAIN_STREAM_WAIT_MS, "step", 0, STOP),
    ]),
    ("the deadline ends the calls still up, then stops", [
        (0, "hook", "CA1", True), (10, "start", "CA1", None), (1000, "drain", None, True),
        (DEADLINE_MS - 1, "step", 2, WAIT), (DEADLINE_MS, "step", 2, END), (DEADLINE_MS, "step", 0, STOP),
    ]),
    ("a call ended at the deadline holds the stop until its re-attach request is answered", [
        (0, "hook", "CA1", True), (10, "start", "CA1", None), (1000, "drain", None, True),
        (DEADLINE_MS, "step", 2, END), (DEADLINE_MS, "ended", ["CA1"], None), (DEADLINE_MS, "step", 0, WAIT),
        (DEADLINE_MS + 400, "reattach", "CA1", None), (DEADLINE_MS + 400, "step", 0, STOP),
    ]),
    ("a re-attach request that never comes is waited for DRAIN_REATTACH_WAIT_MS, no longer", [
        (1000, "drain", None, True), (DEADLINE_MS, "step", 1, END), (DEADLINE_MS, "ended", ["CA1", "CA2"], None),
        (DEADLINE_MS + 100, "reattach", "CA2", None),
        (DEADLINE_MS + DRAIN_REATTACH_WAIT_MS - 1, "step", 0, WAIT), (DEADLINE_MS + DRAIN_REATTACH_WAIT_MS, "step", 0, STOP),
    ]),
    ("calls whose carrier has no re-attach step are not waited for", [
        (1000, "drain", None, True), (DEADLINE_MS, "step", 1, END), (DEADLINE_MS, "ended", [], None),
        (DEADLINE_MS, "step", 0, STOP),
    ]),
    ("at the deadline an owed stream is not waited for", [
        (DEADLINE_MS - 200, "hook", "CA1", True), (DEADLINE_MS - 100, "drain", None, True),
        (DEADLINE_MS - 50, "step", 0, WAIT), (DEADLINE_MS, "step", 0, STOP),
    ]),
    ("a second drain request changes nothing (the first deadline holds)", [
        (1000, "drain", None, True), (2000, "drain", None, False), (DEADLINE_MS, "step", 1, END),
    ]),
]


@pytest.mark.parametrize("events", [events for _, events in SCENARIOS], ids=[name for name, _ in SCENARIOS])
def test_drain_rules(events):
    drain = Drain()
    refused = 0
    for t_ms, what, argument, expected in events:
        if what == "hook":
            assert drain.voice_webhook(argument, t_ms) is expected, (t_ms, what, argument)
            refused += not expected
        elif what == "start":
            drain.stream_started(argument)
        elif what == "drain":
            deadline = DEADLINE_MS if expected else DEADLINE_MS + 99_000
            assert drain.begin(t_ms, deadline, 1_700_000_000.0, 1_700_000_060.0) is expected
        elif what == "step":
            assert drain.step(t_ms, argument) is expected, (t_ms, what, argument)
        elif what == "ended":
            drain.ended_at_deadline(len(argument), argument, t_ms)
            assert drain.statistics(t_ms).reattach_awaited == len(argument)
        elif what == "reattach":
            drain.reattach_answered(argument)
        else:
            raise AssertionError(what)
    assert drain.statistics(events[-1][0]).calls_refused == refused


def test_statistics_while_draining_and_after_the_deadline():
    drain = Drain()
    assert drain.statistics(0) == drain.statistics(0).__class__(False, 0.0, 0.0, 0.0, 0, 0, 0)
    drain.voice_webhook("CA1", 500)
    drain.begin(1000, 31_000, 1_700_000_000.0, 1_700_000_030.0)
    drain.voice_webhook("CA2", 1200)
    stats = drain.statistics(11_000)
    assert (stats.draining, stats.started_at_s, stats.deadline_at_s, stats.remaining_s) == (True, 1_700_000_000.0,
                                                                                           1_700_000_030.0, 20.0)
    assert (stats.calls_refused, stats.streams_awaited) == (1, 1)
    assert drain.step(31_000, 3) is END
    drain.ended_at_deadline(3)
    assert drain.step(31_000, 0) is STOP
    stats = drain.statistics(32_000)
    assert (stats.remaining_s, stats.calls_ended_at_deadline) == (0.0, 3)


def test_a_zero_timeout_ends_the_calls_at_once():
    drain = Drain()
    drain.begin(1000, 1000, 0.0, 0.0)
    assert drain.step(1000, 1) is END


# --- TwiML ------------------------------------------------------------------------------------------

def _canonical(xml: str) -> str:
    return ElementTree.tostring(ElementTree.fromstring(xml.encode()), encoding="unicode")


def test_reject_is_twilios_reject_busy():
    expected = VoiceResponse()
    expected.reject(reason="busy")
    assert _canonical(twiml_reject()) == _canonical(str(expected))
    assert twiml_reject().startswith('<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="busy"/>')
    with pytest.raises(ValueError):
        twiml_reject("hangup")


@pytest.mark.parametrize("url", ["https://other.example.com/twilio/voice",
                                 "https://lb.example.com/twilio/voice?pool=b&from=drain"])
def test_redirect_is_twilios_redirect_post(url):
    expected = VoiceResponse()
    expected.redirect(url, method="POST")
    assert _canonical(twiml_redirect(url)) == _canonical(str(expected))
    redirect = ElementTree.fromstring(twiml_redirect(url).encode()).find("Redirect")
    assert redirect.text == url and redirect.get("method") == "POST"


@pytest.mark.parametrize("url", ["", "/relative", "ftp://x.example.com/", "wss://x.example.com/", "https://x.example.com/\x01"])
def test_redirect_refuses_what_is_not_an_absolute_http_url(url):
    with pytest.raises(ValueError):
        twiml_redirect(url)


# --- the drain file -----------------------------------------------------------------------------------

def test_the_first_request_wins(tmp_path):
    first, created = request_drain(tmp_path, 300, "voicecore drain")
    assert created and read_request(tmp_path) == first
    second, created = request_drain(tmp_path, 5, "voicecore up (SIGTERM)")
    assert not created and second == first  # the deadline does not move
    assert sorted(os.listdir(tmp_path)) == ["drain.json"]  # no temporary file left behind
    assert first.deadline_monotonic_ns == first.started_monotonic_ns + 300 * 10**9
    assert first.deadline_at_s == first.started_at_s + 300


def test_no_file_no_drain(tmp_path):
    assert read_request(tmp_path) is None
    assert DrainWatch(tmp_path).poll() is None


def test_the_watch_reports_a_request_once(tmp_path):
    watch = DrainWatch(tmp_path)
    assert watch.poll() is None
    request, _ = request_drain(tmp_path, 10, "test")
    assert watch.poll() == request
    assert watch.poll() is None


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b'{"version": 2}',
                                  json.dumps({"version": 1, "started_at_s": 1.0}).encode(),
                                  json.dumps({"version": 1, "started_at_s": 1.0, "started_monotonic_ns": 5,
                                              "timeout_s": -1}).encode(),
                                  json.dumps({"version": 1, "started_at_s": 1.0, "started_monotonic_ns": "x",
                                              "timeout_s": 1}).encode()])
def test_a_bad_file_is_an_error_said_once(tmp_path, data):
    with pytest.raises(DrainFileError):
        parse_request(data)
    drain_path(tmp_path).write_bytes(data)
    watch = DrainWatch(tmp_path)
    with pytest.raises(DrainFileError):
        watch.poll()
    assert watch.poll() is None  # the gateway drains on its own timeout after the first error


def test_round_trip():
    request = DrainRequest(1_700_000_000.5, 123_456_789, 42.0, "voicecore drain")
    assert parse_request(request.to_json()) == request


# --- the command's edges and the exposition names ------------------------------------------------------

def test_drain_without_a_running_node_exits_3(tmp_path, monkeypatch, capsys):
    from voicecore.cli import main

    monkeypatch.setenv("VOICECORE_RUNTIME_DIR", str(tmp_path))
    assert main(["drain"]) == 3
    assert "no running node in" in capsys.readouterr().err
    assert not drain_path(tmp_path).exists()  # nothing left that would drain the next stack started here
    assert main(["drain", "--timeout", "-1"]) == 2


def test_a_stale_drain_file_is_cleaned_up_with_the_runtime_dir(tmp_path):
    import dataclasses

    from voicecore.config import load_config
    from voicecore.supervise import cleanup_runtime

    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir()
    request_drain(runtime_dir, 10, "test")
    cleanup_runtime(dataclasses.replace(load_config({}), runtime_dir=str(runtime_dir)))
    assert not runtime_dir.exists()


def test_drain_figures_in_the_prometheus_text():
    from voicecore import metrics_text

    text = metrics_text.render({"gateway": {"draining": 1, "drain_started_at": 1_700_000_000.5, "drain_deadline_at": 1_700_000_300.5,
                                            "drain_remaining_s": 12.5, "drain_streams_awaited": 0, "calls_refused_draining": 3,
                                            "calls_ended_at_drain_deadline": 1, "calls_active": 2},
                                "bargein_decision_to_clear_ms": {}, "workers": {}})
    for name, kind in (("voicecore_gateway_draining", "gauge"), ("voicecore_gateway_drain_started_at", "gauge"),
                       ("voicecore_gateway_drain_deadline_at", "gauge"), ("voicecore_gateway_drain_remaining_s", "gauge"),
                       ("voicecore_gateway_drain_streams_awaited", "gauge"),
                       ("voicecore_gateway_calls_refused_draining_total", "counter"),
                       ("voicecore_gateway_calls_ended_at_drain_deadline_total", "counter")):
        assert f"# TYPE {name} {kind}" in text, name


def test_a_drained_nodes_stop_signals_supervisord_then_the_standbys_then_the_rest(monkeypatch):
    """A standby signalled after the process it stands by for could take over for a moment: it hears first."""
    import signal

    from voicecore import drain

    signalled: list[int] = []
    monkeypatch.setattr(drain, "children_of", lambda pid: [11, 12, 13, 14, 15] if pid == 10 else [])

    def kill(pid: int, sig: int) -> None:
        assert sig == signal.SIGTERM
        if pid == 14:
            raise ProcessLookupError  # gone already: not counted
        signalled.append(pid)

    monkeypatch.setattr(drain.os, "kill", kill)
    assert drain.stop_supervised_node(10, own_pid=12, standbys=[15, 13]) == 3
    assert signalled[0] == 10  # supervisord first: nothing is restarted from then on
    assert set(signalled[1:3]) == {13, 15} and signalled[3:] == [11]
