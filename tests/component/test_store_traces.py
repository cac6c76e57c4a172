"""Traces of stored calls: a CallSummary (built by summarize_record from tests/records.py's scripted record and from
the real demo record) -> OpenTelemetry spans, caught by the SDK's InMemorySpanExporter; and when the
environment turns tracing on (from_environment).
"""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from records import DEMO_RECORD, scripted_call  # noqa: E402

from voicecore.call.record import loads  # noqa: E402
from voicecore.store import summarize_record  # noqa: E402
from voicecore.store.traces import TurnTracer  # noqa: E402

MS = 1_000_000
WALL_END_S = 1_800_000_000.25
OTEL_ENV = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED", "VOICECORE_OTEL",
            "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")


def traced(summary):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = TurnTracer(provider)
    made = tracer.export(summary)
    tracer.shutdown()
    spans = exporter.get_finished_spans()
    assert made == len(spans)
    return spans


def named(spans, name):
    return [span for span in spans if span.name == name]


def offset_ms(span, call, at: str = "start_time") -> float:
    """A span's start (or end) in ms from the call span's start: exact, both are the same integer base."""
    return (getattr(span, at) - call.start_time) / MS


def private_texts(summary) -> list[str]:
    """What must never reach a span: the words of both sides, tool arguments and outputs, verdict reasons."""
    texts = [t.text for t in summary.transcripts] + [turn.transcript for turn in summary.turns]
    texts += [tool.arguments for tool in summary.tool_calls] + [tool.output for tool in summary.tool_calls]
    texts += [verdict.reason for verdict in summary.verdicts]
    return [text for text in texts if text]


@pytest.fixture
def no_otel_env(monkeypatch):
    for name in OTEL_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --- a summary -> spans -------------------------------------------------------------------------------
def test_a_call_is_one_trace_a_span_per_turn_its_phases_and_its_tool():
    call_record = scripted_call()
    summary = summarize_record(call_record.header, call_record.entries, "CA1.jsonl", wall_end_s=WALL_END_S)
    first, second = summary.turns
    spans = traced(summary)
    assert sorted(span.name for span in spans) == sorted(
        ["call", "turn", "turn", "caller speech", "caller speech", "waiting", "waiting", "tool book"])
    (call,) = named(spans, "call")
    assert {span.context.trace_id for span in spans} == {call.context.trace_id} and call.parent is None
    assert dict(call.attributes) == {"voicecore.call_sid": "CA1", "voicecore.agent": "receptionist",
                                     "voicecore.outcome": "caller_hangup", "voicecore.turns": 2,
                                     "voicecore.control": "turns", "voicecore.complete": True}
    # wall clock: started_at in ns, over the call's duration
    assert call.start_time == round(summary.started_at * 1e9)
    assert abs(call.end_time / 1e9 - WALL_END_S) < 1e-6 and offset_ms(call, call, "end_time") == summary.duration_ms

    turn_spans = sorted(named(spans, "turn"), key=lambda span: span.attributes["voicecore.turn.index"])
    for span in turn_spans:
        assert span.parent.span_id == call.context.span_id
    answered, unanswered = turn_spans
    # answered and talked over: from speech start to the barge-in (after the answer's first audio)
    assert (offset_ms(answered, call), offset_ms(answered, call, "end_time")) == (1000, first.barged_in_ms)
    assert dict(answered.attributes) == {
        "voicecore.turn.index": 0, "voicecore.turn.answered": True, "voicecore.turn.barged_in": True,
        "voicecore.turn.transcript_chars": len("Book a cleaning please"),
        "voicecore.turn.agent_text_chars": len("You are booked for a cleaning."),
        "voicecore.turn.latency_ms": first.first_audio_ms - 2000}
    (barge_in,) = answered.events
    assert barge_in.name == "barged_in" and (barge_in.timestamp - call.start_time) / MS == first.barged_in_ms
    assert dict(barge_in.attributes) == {"voicecore.turn.truncated_at_ms": first.truncated_at_ms}
    # never answered: the caller waited until the call ended
    assert (offset_ms(unanswered, call), offset_ms(unanswered, call, "end_time")) == (
        second.speech_started_ms, summary.duration_ms)
    assert unanswered.attributes["voicecore.turn.answered"] is False and "voicecore.turn.latency_ms" not in unanswered.attributes

    def phase(name, turn_span):
        (span,) = [s for s in named(spans, name) if s.parent.span_id == turn_span.context.span_id]
        return span, offset_ms(span, call), offset_ms(span, call, "end_time")

    assert phase("caller speech", answered)[1:] == (1000, 2000)
    waiting, start, end = phase("waiting", answered)
    assert (start, end) == (2000, first.first_audio_ms)
    assert [(e.name, (e.timestamp - call.start_time) / MS) for e in waiting.events] == [("response_requested", 2100)]
    assert phase("caller speech", unanswered)[1:] == (second.speech_started_ms, second.speech_stopped_ms)
    assert phase("waiting", unanswered)[1:] == (second.speech_stopped_ms, summary.duration_ms)

    # the tool ran inside the first turn, while the caller waited
    (tool,) = named(spans, "tool book")
    assert tool.parent.span_id == answered.context.span_id
    assert (offset_ms(tool, call), offset_ms(tool, call, "end_time")) == (2400, 2600)
    assert dict(tool.attributes) == {"voicecore.tool.name": "book", "voicecore.tool.ran": True, "voicecore.tool.ok": True}
    assert tool.status.status_code is not StatusCode.ERROR


def test_no_words_arguments_outputs_or_reasons_in_any_span():
    call_record = scripted_call()
    summary = summarize_record(call_record.header, call_record.entries, "CA1.jsonl", wall_end_s=WALL_END_S)
    secrets = private_texts(summary)
    assert len(secrets) >= 8  # both sides' words, the tool's arguments and output, the verdict's reason
    for span in traced(summary):
        values = [str(value) for value in span.attributes.values()]
        values += [str(value) for event in span.events for value in event.attributes.values()]
        values += [span.name] + [event.name for event in span.events]
        for text in secrets:
            assert not any(text in value for value in values), (span.name, text)
        serialized = span.to_json()
        for word in ("cleaning", "Friday", "booked", "knowledge", "Smile"):
            assert word not in serialized, (span.name, word)


def test_a_failed_tool_is_an_error_span_and_the_real_demo_record_traces_its_turns():
    call_record = scripted_call()
    failing = [dict(entry, ok=False) if entry["k"] == "tool" else entry for entry in call_record.entries]
    (tool,) = named(traced(summarize_record(call_record.header, failing, "CA1.jsonl", WALL_END_S)), "tool book")
    assert tool.attributes["voicecore.tool.ok"] is False and tool.status.status_code is StatusCode.ERROR

    header, entries = loads(gzip.open(DEMO_RECORD, "rt", encoding="utf-8").read())
    summary = summarize_record(header, entries, DEMO_RECORD.name, wall_end_s=1_000_000.0)
    spans = traced(summary)
    (call,) = named(spans, "call")
    assert call.attributes["voicecore.control"] == "spine" and call.attributes["voicecore.turns"] == len(summary.turns) == 2
    for turn, span in zip(summary.turns, sorted(named(spans, "turn"), key=lambda s: s.attributes["voicecore.turn.index"])):
        assert span.attributes["voicecore.turn.latency_ms"] == turn.latency_ms
        assert offset_ms(span, call) == turn.speech_started_ms
        assert offset_ms(span, call, "end_time") == max(turn.first_audio_ms, turn.barged_in_ms or 0)
        assert 0 <= span.start_time - call.start_time and span.end_time <= call.end_time
    # the spine lets the server create responses: no request to mark
    assert all(not span.events for span in named(spans, "waiting"))


# --- when tracing is on ---------------------------------------------------------------------------------
def test_importing_the_module_does_not_import_opentelemetry():
    code = ("import sys, voicecore.store.traces, voicecore.store; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_from_environment_is_none_unless_configured(no_otel_env):
    assert TurnTracer.from_environment() is None
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    no_otel_env.setenv("OTEL_TRACES_EXPORTER", "none")  # explicitly none wins over an endpoint
    assert TurnTracer.from_environment() is None
    no_otel_env.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    no_otel_env.setenv("OTEL_TRACES_EXPORTER", "console")
    no_otel_env.setenv("OTEL_SDK_DISABLED", "true")
    assert TurnTracer.from_environment() is None


def test_voicecore_otel_console_prints_the_calls_spans(no_otel_env, capsys):
    no_otel_env.setenv("VOICECORE_OTEL", "console")
    tracer = TurnTracer.from_environment()
    assert tracer is not None
    call_record = scripted_call()
    made = tracer.export(summarize_record(call_record.header, call_record.entries, "CA1.jsonl", WALL_END_S))
    tracer.shutdown()  # the batch is exported now
    out = capsys.readouterr().out
    decoder, printed, at = json.JSONDecoder(), [], 0
    while (at := out.find("{", at)) >= 0:
        span, at = decoder.raw_decode(out, at)
        printed.append(span)
    assert len(printed) == made == 8
    assert {span["name"] for span in printed} == {"call", "turn", "caller speech", "waiting", "tool book"}
    assert {span["resource"]["attributes"]["service.name"] for span in printed} == {"voicecore"}
    assert "cleaning" not in out and "Friday" not in out


def test_without_the_sdk_or_an_exporter_package_it_is_none_with_one_warning(no_otel_env, caplog):
    no_otel_env.setenv("VOICECORE_OTEL", "console")
    no_otel_env.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if opentelemetry-sdk were not installed
    with caplog.at_level(logging.WARNING, logger="voicecore.store.traces"):
        assert TurnTracer.from_environment() is None
    assert [r.getMessage() for r in caplog.records if "opentelemetry-sdk is not installed" in r.getMessage()]
    no_otel_env.delitem(sys.modules, "opentelemetry.sdk.trace")

    caplog.clear()
    no_otel_env.setenv("OTEL_TRACES_EXPORTER", "no_such_exporter")
    with caplog.at_level(logging.WARNING, logger="voicecore.store.traces"):
        assert TurnTracer.from_environment() is None
    assert len(caplog.records) == 1 and "no_such_exporter" in caplog.records[0].getMessage()


def test_otlp_needs_its_exporter_package(no_otel_env, caplog):
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        installed = True
    except ImportError:
        installed = False
    with caplog.at_level(logging.WARNING, logger="voicecore.store.traces"):
        tracer = TurnTracer.from_environment()
    if installed:
        assert tracer is not None and not caplog.records
        tracer.shutdown()
    else:
        assert tracer is None
        (warning,) = caplog.records
        assert "opentelemetry-exporter-otlp-proto-http is not installed" in warning.getMessage()
        assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in warning.getMessage()
